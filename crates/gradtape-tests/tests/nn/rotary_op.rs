//! The rotary position embedding as one op (`Rotary`): the values of the
//! composite it replaced (`x · cos + concat(−x₂, x₁) · sin`, written out
//! below with public ops, its tables computed in f64 as the layer did)
//! bit for bit in every float dtype, contiguous and strided; its gradient
//! against the transposed rotation written out in f64; its JVP, vmap and
//! traced forms against the eager op; one node per rotation in a traced
//! graph, on two shapes.

use crate::half_util::f64_bits;
use gradtape::nn::{Layer, RotaryEmbedding};
use gradtape::{function, jvp, vmap, vmap_fallbacks, DType, GradientTape, Result, Tensor};

use super::sums_util::init;

/// The composite the layer computed before the op (its own f64 tables
/// `[t, d]`, shaped to broadcast against `x`, cast to `x`'s dtype).
fn composite(x: &Tensor, seq: usize, feat: usize, start: usize, w: f64) -> Result<Tensor> {
    let shape = x.shape();
    let (t, d) = (shape[seq], shape[feat]);
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for p in 0..t {
        let pos = (start + p) as f64;
        for j in 0..d {
            let i = (j % (d / 2)) as f64;
            let angle = pos * w.powf(-2.0 * i / d as f64);
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    let mut bshape = vec![1; shape.len()];
    bshape[seq] = t;
    bshape[feat] = d;
    let table = |v: Vec<f64>| -> Result<Tensor> {
        let m = Tensor::from_vec(v, &[t, d])?;
        let m = if seq < feat { m } else { m.transpose()? };
        m.reshape(&bshape)?.cast(x.dtype())
    };
    let (cos, sin) = (table(cos)?, table(sin)?);
    let f = feat as isize;
    let (x1, x2) = (x.narrow(f, 0, d / 2)?, x.narrow(f, d / 2, d / 2)?);
    let rotated = Tensor::concat(&[&x2.neg()?, &x1], f)?;
    x.mul(&cos)?.add(&rotated.mul(&sin)?)
}

fn rope(seq: isize, feat: isize, w: f64) -> RotaryEmbedding {
    RotaryEmbedding::builder()
        .sequence_axis(seq)
        .feature_axis(feat)
        .max_wavelength(w)
        .build()
        .unwrap()
}

/// Every float dtype, three layouts: contiguous `[b, t, h, d]`; the heads
/// of a projection (`[b, t, h, d]` permuted to `[b, h, t, d]`, a strided
/// view); features before the positions (`[b, d, t]`, rotated through a
/// view whose features are not contiguous).
#[test]
fn rotary_op_keeps_the_composite_bits() -> Result<()> {
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let x = init(&[2, 5, 3, 8], 0.3, 2.0).cast(dtype)?;
        let y = rope(1, -1, 10000.0).call_at(&x, 0)?;
        assert_eq!(
            f64_bits(&y),
            f64_bits(&composite(&x, 1, 3, 0, 10000.0)?),
            "{dtype} contiguous"
        );

        let heads = init(&[2, 6, 3, 4], 1.1, 3.0).cast(dtype)?.permute(&[0, 2, 1, 3])?;
        assert!(!heads.is_contiguous());
        let y = rope(2, 3, 500.0).call_at(&heads, 7)?;
        assert_eq!(
            f64_bits(&y),
            f64_bits(&composite(&heads, 2, 3, 7, 500.0)?),
            "{dtype} heads from 7"
        );

        let x = init(&[2, 6, 5], 0.7, 1.5).cast(dtype)?;
        let y = rope(2, 1, 10000.0).call_at(&x, 2)?;
        assert_eq!(y.shape(), &[2, 6, 5]);
        assert_eq!(
            f64_bits(&y),
            f64_bits(&composite(&x, 2, 1, 2, 10000.0)?),
            "{dtype} features first"
        );
    }
    Ok(())
}

/// `[x₁ c + x₂ s, x₂ c − x₁ s]` of `w`, in f64: the transposed rotation
/// (the gradient of `Σ rope(x) · w`), for features last, positions axis
/// `seq` of `shape`.
fn transposed(w: &[f64], shape: &[usize], seq: usize, start: usize, wl: f64) -> Vec<f64> {
    let d = *shape.last().unwrap();
    let h = d / 2;
    let inner: usize = shape[seq + 1..shape.len() - 1].iter().product();
    let t = shape[seq];
    let mut out = vec![0.0; w.len()];
    for (row, (o, g)) in out.chunks_mut(d).zip(w.chunks(d)).enumerate() {
        let p = (start + (row / inner) % t) as f64;
        for j in 0..h {
            let a = p * wl.powf(-2.0 * j as f64 / d as f64);
            let (c, s) = (a.cos(), a.sin());
            o[j] = g[j] * c + g[j + h] * s;
            o[j + h] = g[j + h] * c - g[j] * s;
        }
    }
    out
}

/// The gradient of `Σ rope(x) · w` with respect to `x`.
fn grad_of(layer: &RotaryEmbedding, w: &Tensor, x: &Tensor, start: usize) -> Result<Tensor> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(x);
        layer.call_at(x, start)?.mul(w)?.sum_all()
    })?;
    Ok(tape.gradient(&loss, x)?.expect("a gradient"))
}

/// The gradient (eager and traced, f64 and f32) against the transposed
/// rotation in f64, and the traced step one `Rotary` node each way, no
/// `ConcatV2`, on two shapes.
#[test]
fn rotary_gradient_is_the_transposed_rotation() -> Result<()> {
    for (shape, seq, start) in [(&[2usize, 5, 3, 8][..], 1usize, 0usize), (&[3, 7, 6][..], 1, 4)] {
        for (dtype, tol) in [(DType::F64, 1e-14), (DType::F32, 2e-6)] {
            let x = init(shape, 0.2, 1.0).cast(dtype)?;
            let wv = init(shape, 1.3, 1.0);
            let w = wv.cast(dtype)?;
            let layer = rope(seq as isize, -1, 10000.0);
            let eager = grad_of(&layer, &w, &x, start)?;
            let want = transposed(&wv.to_vec::<f64>()?, shape, seq, start, 10000.0);
            let got = eager.cast(DType::F64)?.to_vec::<f64>()?;
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - e).abs() <= tol * (1.0 + e.abs()),
                    "{dtype} {shape:?} [{i}]: {g} vs {e}"
                );
            }
            let f = function(move |x: &Tensor| grad_of(&layer, &w, x, start));
            assert_eq!(
                f64_bits(&f.call(&x)?),
                f64_bits(&eager),
                "{dtype} {shape:?}: traced gradient"
            );
            let g = f.graph(&x)?;
            assert_eq!(g.count("Rotary"), 2, "{g}");
            assert_eq!(g.count("ConcatV2"), 0, "{g}");
        }
    }
    Ok(())
}

/// Forward mode: the JVP is the rotation of the tangent; a vmap over
/// examples `[t, h, d]` is the rotation of the batch, by the batching
/// rule (no per-example loop).
#[test]
fn rotary_jvp_and_vmap() -> Result<()> {
    let layer = rope(-3, -1, 10000.0);
    let x = init(&[4, 3, 6], 0.4, 1.0);
    let t = init(&[4, 3, 6], 2.4, 1.0);
    let l = layer.clone();
    let (y, dy) = jvp(
        move |p| l.call_at(&p[0], 1),
        std::slice::from_ref(&x),
        std::slice::from_ref(&t),
    )?;
    assert_eq!(f64_bits(&y), f64_bits(&layer.call_at(&x, 1)?));
    assert_eq!(f64_bits(&dy), f64_bits(&layer.call_at(&t, 1)?));
    // against the composite's JVP (a linear map: the composite of t)
    assert_eq!(f64_bits(&dy), f64_bits(&composite(&t, 0, 2, 1, 10000.0)?));

    let xs = init(&[5, 4, 3, 6], 0.9, 1.0);
    let l = layer.clone();
    let f = vmap(move |a: &[Tensor]| Ok(vec![l.call(&a[0])?]), &[Some(0)], &[Some(0)]);
    let ys = f.call(std::slice::from_ref(&xs))?;
    assert_eq!(f64_bits(&ys[0]), f64_bits(&layer.call(&xs)?));
    assert!(
        !vmap_fallbacks().iter().any(|f| f.op == "Rotary"),
        "{:?}",
        vmap_fallbacks()
    );
    Ok(())
}

/// Derivatives of every order are the op again: the third derivative of
/// `Σ rope(x)³ · w` along a direction, nested tapes against the f64
/// formula (`6 Σ w · (R v)³`, the rotation `R` linear).
#[test]
fn rotary_third_order() -> Result<()> {
    let layer = rope(1, -1, 10000.0);
    let x = init(&[1, 3, 2, 4], 0.1, 1.0);
    let v = init(&[1, 3, 2, 4], 0.8, 1.0);
    let w = init(&[1, 3, 2, 4], 1.7, 1.0);
    let (t1, t2, t3) = (GradientTape::new(), GradientTape::new(), GradientTape::new());
    let d3 = t3.record(|| -> Result<Tensor> {
        t3.watch(&x);
        let d2 = t2.record(|| -> Result<Tensor> {
            t2.watch(&x);
            let d1 = t1.record(|| -> Result<Tensor> {
                t1.watch(&x);
                layer.call(&x)?.pow_scalar(3.0)?.mul(&w)?.sum_all()
            })?;
            // directional derivatives along v, three times
            t1.gradient(&d1, &x)?.expect("g1").mul(&v)?.sum_all()
        })?;
        t2.gradient(&d2, &x)?.expect("g2").mul(&v)?.sum_all()
    })?;
    let d3 = t3
        .gradient(&d3, &x)?
        .expect("g3")
        .mul(&v)?
        .sum_all()?
        .to_scalar::<f64>()?;
    let rv = composite(&v, 1, 3, 0, 10000.0)?.to_vec::<f64>()?;
    let want: f64 = 6.0
        * rv.iter()
            .zip(w.to_vec::<f64>()?)
            .map(|(r, w)| w * r * r * r)
            .sum::<f64>();
    // (rv: the rotation of v, whose own rounding is 1e-16)
    assert!((d3 - want).abs() <= 1e-12 * (1.0 + want.abs()), "{d3} vs {want}");
    Ok(())
}
