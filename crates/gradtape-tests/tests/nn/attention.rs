//! `scaled_dot_product_attention`: values against the definition in numpy
//! f64 (`/work/scratch/attn_ref.py`, cross-checked there against
//! `jax.nn.dot_product_attention`, which computes its softmax in f32 and
//! so agrees to 1e-6 only; TensorFlow has no such op), the fused kernel
//! against the unfused composite over many shapes (several key blocks,
//! masks of every broadcast, fully masked blocks), gradients, forward
//! mode, tracing, half precision and bad input. The gradient checks (first
//! order through the fused backward op, second order through the
//! composite) are in the checker's table (`gradcheck/gradcheck_nn.rs`).

use gradtape::{function, DType, ForwardAccumulator, GradientTape, Result, Tensor};

use super::sums_util::{close_sums as close, init, wsum};

/// The unfused definition with public ops.
fn composite(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, causal: bool, scale: f64) -> Result<Tensor> {
    let r = k.rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    let mut s = q.matmul(&k.permute(&perm)?)?.mul_scalar(scale)?;
    if let Some(m) = mask {
        s = s.add(m)?;
    }
    if causal {
        let (tq, tk) = (q.shape()[r - 2], k.shape()[r - 2]);
        let c: Vec<f64> = (0..tq * tk)
            .map(|x| if x % tk > x / tk { f64::NEG_INFINITY } else { 0.0 })
            .collect();
        s = s.add(&Tensor::from_vec(c, &[tq, tk])?.cast(q.dtype())?)?;
    }
    s.softmax(-1)?.matmul(v)
}

#[test]
fn values_match_the_definition() {
    let (q, k, v) = (
        init(&[2, 3, 5, 4], 1.0, 0.8),
        init(&[2, 3, 5, 4], 2.0, 0.9),
        init(&[2, 3, 5, 4], 3.0, 1.0),
    );
    let (q2, k2, v2) = (
        init(&[2, 2, 3, 4], 4.0, 0.7),
        init(&[2, 2, 7, 4], 5.0, 0.6),
        init(&[2, 2, 7, 4], 6.0, 1.1),
    );
    let m = init(&[3, 7], 7.0, 2.0);
    let mut pad = vec![true; 14];
    pad[12..].fill(false);
    let pad = Tensor::from_vec(pad, &[2, 1, 1, 7]).unwrap();
    let (v3, q3) = (init(&[2, 2, 7, 6], 8.0, 1.2), init(&[2, 2, 9, 4], 9.0, 0.5));
    type Case<'a> = (&'a str, Box<dyn Fn() -> Result<Tensor> + 'a>, (f64, f64));
    let cases: Vec<Case> = vec![
        (
            "plain",
            Box::new(|| q.scaled_dot_product_attention(&k, &v, None, false, None)),
            (0.21439186189752868, 1.1848754925888083),
        ),
        (
            "causal",
            Box::new(|| q.scaled_dot_product_attention(&k, &v, None, true, None)),
            (-0.9761211581643972, -0.28914011254511296),
        ),
        (
            "causal scale 0.3",
            Box::new(|| q.scaled_dot_product_attention(&k, &v, None, true, Some(0.3))),
            (-1.2132519462475495, 0.05929799336811259),
        ),
        (
            "cross additive mask",
            Box::new(|| q2.scaled_dot_product_attention(&k2, &v2, Some(&m), false, None)),
            (2.9166906027344863, -1.8801805836065508),
        ),
        (
            "cross bool mask",
            Box::new(|| q2.scaled_dot_product_attention(&k2, &v2, Some(&pad), false, None)),
            (2.651919403621694, 0.18658538584405848),
        ),
        (
            "dv 6 causal tq 9",
            Box::new(|| q3.scaled_dot_product_attention(&k2, &v3, None, true, None)),
            (-0.9314045729228662, -0.7212733102407387),
        ),
    ];
    for (name, f, want) in &cases {
        close(wsum(&f().unwrap()), *want, 1e-13, name);
    }
    // f32: the same to f32's precision
    let f32s = |t: &Tensor| t.cast(DType::F32).unwrap();
    let o = f32s(&q)
        .scaled_dot_product_attention(&f32s(&k), &f32s(&v), None, true, None)
        .unwrap();
    assert_eq!(o.dtype(), DType::F32);
    close(
        wsum(&o),
        (-0.9761211581643972, -0.28914011254511296),
        1e-5,
        "causal f32",
    );
}

/// The fused kernel equals the composite on shapes with several key
/// blocks (64 keys each), masks of every broadcast, a first block that
/// is wholly masked, and rows that see no key at all.
#[test]
fn fused_equals_composite_across_shapes() {
    let shapes: &[(&[usize], usize, usize, usize, usize)] = &[
        // (batch dims, tq, tk, d, dv)
        (&[1], 1, 1, 1, 1),
        (&[3], 4, 200, 8, 5),
        (&[2, 2], 130, 130, 16, 16),
        (&[], 65, 64, 3, 7),
        (&[2, 1, 2], 5, 129, 4, 2),
    ];
    for (n, &(batch, tq, tk, d, dv)) in shapes.iter().enumerate() {
        let sh = |t, w| batch.iter().copied().chain([t, w]).collect::<Vec<_>>();
        let q = init(&sh(tq, d), n as f64, 1.5);
        let k = init(&sh(tk, d), n as f64 + 0.5, 1.5);
        let v = init(&sh(tk, dv), n as f64 + 0.25, 1.0);
        // masks: [tq, tk]; [..batch, 1, tk] with the first 64 keys hidden
        let m1 = init(&[tq, tk], 3.0, 4.0);
        let mut hide = vec![0.0; tk];
        for h in hide.iter_mut().take(64.min(tk.saturating_sub(1))) {
            *h = f64::NEG_INFINITY;
        }
        let mut shape2 = vec![1; batch.len()];
        shape2.extend([1, tk]);
        let m2 = Tensor::from_vec(hide.repeat(1), &shape2).unwrap();
        for (mask, causal) in [
            (None, false),
            (None, true),
            (Some(&m1), false),
            (Some(&m2), false),
            (Some(&m1), true),
        ] {
            for scale in [0.7, 1.0 / (d as f64).sqrt()] {
                let got = q
                    .scaled_dot_product_attention(&k, &v, mask, causal, Some(scale))
                    .unwrap();
                let want = composite(&q, &k, &v, mask, causal, scale).unwrap();
                assert_eq!(got.shape(), want.shape());
                let (g, w) = (got.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
                for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-12 * (1.0 + b.abs()) || (a.is_nan() && b.is_nan()),
                        "shape {n} mask {} causal {causal} at {i}: {a} vs {b}",
                        mask.is_some()
                    );
                }
            }
        }
    }
}

/// First-order gradients through the fused backward op equal the
/// composite's, with and without a mask, causal or not, on every kernel
/// (heads of 4: the online kernel; of 8: the products' small kernel where
/// the CPU has it, else the online kernel; of 64: the `gemm` crate's
/// products).
#[test]
fn gradients_equal_the_composites() {
    for width in [4, 8, 64] {
        gradients_equal_the_composites_at(width);
    }
}

fn gradients_equal_the_composites_at(width: usize) {
    let (q, k, v) = (
        init(&[2, 3, 70, width], 1.0, 1.2),
        init(&[2, 3, 90, width], 2.0, 1.1),
        init(&[2, 3, 90, width + 5], 3.0, 1.0),
    );
    let m = init(&[70, 90], 4.0, 3.0);
    let w = init(&[2, 3, 70, width + 5], 5.0, 1.0);
    for (mask, causal) in [(None, false), (None, true), (Some(&m), true)] {
        let grads = |fused: bool| {
            let tape = GradientTape::new();
            let loss = tape
                .record(|| {
                    tape.watch(&[q.clone(), k.clone(), v.clone()]);
                    let o = if fused {
                        q.scaled_dot_product_attention(&k, &v, mask, causal, None)?
                    } else {
                        composite(&q, &k, &v, mask, causal, 1.0 / (width as f64).sqrt())?
                    };
                    o.mul(&w)?.sum_all()
                })
                .unwrap();
            tape.gradient(&loss, &[q.clone(), k.clone(), v.clone()]).unwrap()
        };
        let (a, b) = (grads(true), grads(false));
        for (i, (ga, gb)) in a.iter().zip(&b).enumerate() {
            let (ga, gb) = (
                ga.as_ref().unwrap().to_vec::<f64>().unwrap(),
                gb.as_ref().unwrap().to_vec::<f64>().unwrap(),
            );
            for (x, y) in ga.iter().zip(&gb) {
                assert!(
                    (x - y).abs() <= 1e-11 * (1.0 + y.abs()),
                    "width {width} input {i} causal {causal}: {x} vs {y}"
                );
            }
        }
    }
}

/// Forward mode: the tangent of the output is the composite's.
#[test]
fn forward_mode_matches_the_composite() {
    let (q, k, v) = (
        init(&[2, 6, 4], 1.0, 1.0),
        init(&[2, 9, 4], 2.0, 1.0),
        init(&[2, 9, 3], 3.0, 1.0),
    );
    let (tq, tk, tv) = (
        init(&[2, 6, 4], 4.0, 1.0),
        init(&[2, 9, 4], 5.0, 1.0),
        init(&[2, 9, 3], 6.0, 1.0),
    );
    let tangent = |fused: bool| {
        let acc = ForwardAccumulator::new();
        acc.watch(&q, &tq).unwrap();
        acc.watch(&k, &tk).unwrap();
        acc.watch(&v, &tv).unwrap();
        let o = acc
            .record(|| {
                if fused {
                    q.scaled_dot_product_attention(&k, &v, None, true, None)
                } else {
                    composite(&q, &k, &v, None, true, 0.5)
                }
            })
            .unwrap();
        acc.jvp(&o).unwrap().unwrap().to_vec::<f64>().unwrap()
    };
    let (a, b) = (tangent(true), tangent(false));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{x} vs {y}");
    }
}

/// A traced function gives eager's values and gradients (the fused ops are
/// graph nodes, run again at each call), also at new inputs, on both
/// kernels (heads of 8 and of 64).
#[test]
fn traced_equals_eager() {
    for width in [8, 64] {
        traced_equals_eager_at(width);
    }
}

fn traced_equals_eager_at(width: usize) {
    let step = |q: &Tensor, k: &Tensor, v: &Tensor| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(&[q.clone(), k.clone(), v.clone()]);
            q.scaled_dot_product_attention(k, v, None, true, None)?
                .square()?
                .sum_all()
        })?;
        let g = tape.gradient(&loss, &[q.clone(), k.clone(), v.clone()])?;
        let mut out = vec![loss];
        out.extend(g.into_iter().map(|g| g.unwrap()));
        Ok(out)
    };
    let f = function(move |(q, k, v): &(Tensor, Tensor, Tensor)| step(q, k, v));
    for s in [1.0, 2.0] {
        let args = (
            init(&[2, 66, width], s, 1.0),
            init(&[2, 66, width], s + 1.0, 1.0),
            init(&[2, 66, width], s + 2.0, 1.0),
        );
        let traced = f.call(&args).unwrap();
        let eager = step(&args.0, &args.1, &args.2).unwrap();
        // a compiled graph may add the loss's sum and the cotangent's terms
        // in another order (to rounding); the attention ops run as eagerly
        for (i, (t, e)) in traced.iter().zip(&eager).enumerate() {
            let (t, e) = (t.to_vec::<f64>().unwrap(), e.to_vec::<f64>().unwrap());
            assert_eq!(t.len(), e.len());
            for (j, (a, b)) in t.iter().zip(&e).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-13 * (1.0 + b.abs()),
                    "width {width} output {i} [{j}]: {a} vs {b}, seed {s}"
                );
            }
        }
    }
    let graph = f.graph(&(
        init(&[2, 66, width], 0.0, 1.0),
        init(&[2, 66, width], 0.0, 1.0),
        init(&[2, 66, width], 0.0, 1.0),
    ));
    let graph = graph.unwrap();
    assert_eq!(
        (graph.count("Attention"), graph.count("AttentionGrad")),
        (1, 1),
        "{graph}"
    );
}

/// Half precision computes in f32 and rounds once.
#[test]
fn half_precision_goes_through_f32() {
    let (q, k, v) = (
        init(&[1, 5, 4], 1.0, 1.0),
        init(&[1, 5, 4], 2.0, 1.0),
        init(&[1, 5, 4], 3.0, 1.0),
    );
    for dt in [DType::F16, DType::BF16] {
        let c = |t: &Tensor| t.cast(dt).unwrap();
        let o = c(&q)
            .scaled_dot_product_attention(&c(&k), &c(&v), None, true, None)
            .unwrap();
        assert_eq!(o.dtype(), dt);
        let c32 = |t: &Tensor| t.cast(dt).unwrap().cast(DType::F32).unwrap();
        let want = c32(&q)
            .scaled_dot_product_attention(&c32(&k), &c32(&v), None, true, None)
            .unwrap();
        assert_eq!(
            o.cast(DType::F32).unwrap().to_vec::<f32>().unwrap(),
            want.cast(dt)
                .unwrap()
                .cast(DType::F32)
                .unwrap()
                .to_vec::<f32>()
                .unwrap()
        );
    }
}

/// Bad input is an error naming the op and the shapes or dtypes.
#[test]
fn bad_input_is_a_clear_error() {
    let q = init(&[2, 3, 4], 1.0, 1.0);
    let err = |r: Result<Tensor>, want: &str| {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("scaled_dot_product_attention") && e.contains(want), "{e}");
    };
    err(
        q.scaled_dot_product_attention(&init(&[2, 3, 5], 1.0, 1.0), &q, None, false, None),
        "[2, 3, 5]",
    );
    err(
        q.scaled_dot_product_attention(&q, &init(&[2, 4, 4], 1.0, 1.0), None, false, None),
        "[2, 4, 4]",
    );
    err(
        q.scaled_dot_product_attention(&q, &q, Some(&init(&[4, 3], 1.0, 1.0)), false, None),
        "[4, 3]",
    );
    err(
        q.scaled_dot_product_attention(&q, &q.cast(DType::F32).unwrap(), None, false, None),
        "f32",
    );
    err(
        q.scaled_dot_product_attention(&q, &q, None, false, Some(f64::NAN)),
        "scale",
    );
    let i = Tensor::from_vec(vec![1i64; 6], &[1, 2, 3]).unwrap();
    err(i.scaled_dot_product_attention(&i, &i, None, false, None), "i64");
    err(
        Tensor::vector(&[1.0f64]).scaled_dot_product_attention(&q, &q, None, false, None),
        "rank",
    );
}

/// Second order (the gradient of a gradient, through `AttentionGrad`'s own
/// rule) and forward-over-reverse equal the composite's.
#[test]
fn second_order_matches_the_composite() {
    let (q, k, v) = (
        init(&[2, 5, 3], 1.0, 1.0),
        init(&[2, 7, 3], 2.0, 1.0),
        init(&[2, 7, 4], 3.0, 1.0),
    );
    let m = init(&[5, 7], 4.0, 1.0);
    let (w, u) = (init(&[2, 5, 4], 5.0, 1.0), init(&[2, 5, 3], 6.0, 1.0));
    let xs = [q.clone(), k.clone(), v.clone()];
    let second = |fused: bool| {
        let outer = GradientTape::new();
        let inner = GradientTape::new();
        let z = outer
            .record(|| {
                outer.watch(&xs);
                let loss = inner.record(|| {
                    inner.watch(&xs);
                    let o = if fused {
                        q.scaled_dot_product_attention(&k, &v, Some(&m), true, Some(0.6))?
                    } else {
                        composite(&q, &k, &v, Some(&m), true, 0.6)?
                    };
                    o.mul(&w)?.sum_all()
                })?;
                let g = inner.gradient(&loss, &xs)?;
                // a scalar of all three first derivatives
                g[0].as_ref()
                    .unwrap()
                    .mul(&u)?
                    .sum_all()?
                    .add(&g[1].as_ref().unwrap().square()?.sum_all()?)?
                    .add(&g[2].as_ref().unwrap().sum_all()?)
            })
            .unwrap();
        outer.gradient(&z, &xs).unwrap()
    };
    let (a, b) = (second(true), second(false));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let (x, y) = (
            x.as_ref().unwrap().to_vec::<f64>().unwrap(),
            y.as_ref().unwrap().to_vec::<f64>().unwrap(),
        );
        for (p, r) in x.iter().zip(&y) {
            assert!((p - r).abs() <= 1e-11 * (1.0 + r.abs()), "input {i}: {p} vs {r}");
        }
    }
    // forward over reverse: the tangent of the gradient
    let hvp = |fused: bool| {
        let acc = ForwardAccumulator::new();
        acc.watch(&q, &u).unwrap();
        let g = acc
            .record(|| {
                let tape = GradientTape::new();
                let loss = tape.record(|| {
                    tape.watch(&xs);
                    let o = if fused {
                        q.scaled_dot_product_attention(&k, &v, None, false, Some(0.6))?
                    } else {
                        composite(&q, &k, &v, None, false, 0.6)?
                    };
                    o.mul(&w)?.sum_all()
                })?;
                Ok(tape.gradient(&loss, &xs)?[1].clone().unwrap())
            })
            .unwrap();
        acc.jvp(&g).unwrap().unwrap().to_vec::<f64>().unwrap()
    };
    for (p, r) in hvp(true).iter().zip(&hvp(false)) {
        assert!((p - r).abs() <= 1e-11 * (1.0 + r.abs()), "hvp: {p} vs {r}");
    }
}

/// Operands that are views (the heads of slices of one fused QKV product,
/// `[b, t, 3·h·d]` sliced, split into `[b, t, h, d]` and transposed to
/// `[b, h, t, d]`: rows `3·h·d` apart, which the kernels read in place; and
/// a view with a reversed axis, which they copy) give the values and
/// gradients of the same operands made contiguous first, on both kernels
/// (width 64: the kernels on matrix products; 8: the online one).
#[test]
fn strided_operands_equal_contiguous_ones() -> Result<()> {
    for (width, t) in [(64, 80), (8, 40)] {
        let (b, h) = (2, 3);
        let qkv = init(&[b, t, 3 * h * width], 1.0, 1.0).cast(DType::F32)?;
        let heads = |i: usize| -> Result<Tensor> {
            qkv.narrow(2, i * h * width, h * width)?
                .reshape(&[b, t, h, width])?
                .permute(&[0, 2, 1, 3])
        };
        let (q, k, v) = (heads(0)?, heads(1)?, heads(2)?);
        // a reversed time axis (negative strides: copied by the kernels)
        let vr = v.strided_slice(&[gradtape::Slice::all(), gradtape::Slice::all(), gradtape::Slice::rev()])?;
        let w = init(&[b, h, t, width], 5.0, 1.0).cast(DType::F32)?;
        let run = |q: &Tensor, k: &Tensor, v: &Tensor| -> Result<Vec<Vec<f32>>> {
            let tape = GradientTape::new();
            let loss = tape.record(|| {
                tape.watch(&[q.clone(), k.clone(), v.clone()]);
                q.scaled_dot_product_attention(k, v, None, true, None)?
                    .mul(&w)?
                    .sum_all()
            })?;
            let o = q.scaled_dot_product_attention(k, v, None, true, None)?;
            let mut out = vec![o.to_vec::<f32>()?];
            for g in tape.gradient(&loss, &[q.clone(), k.clone(), v.clone()])? {
                out.push(g.unwrap().to_vec::<f32>()?);
            }
            Ok(out)
        };
        for v in [&v, &vr] {
            let strided = run(&q, &k, v)?;
            let copied = run(&q.contiguous()?, &k.contiguous()?, &v.contiguous()?)?;
            for (i, (a, c)) in strided.iter().zip(&copied).enumerate() {
                for (x, y) in a.iter().zip(c) {
                    assert!(
                        (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                        "width {width}, result {i}: {x} vs {y}"
                    );
                }
            }
        }
    }
    Ok(())
}

/// One case of [`rows_that_see_no_key_give_zeros`]: shapes of q, k, v,
/// the mask, causal, and PyTorch's sums of the output and of the
/// gradients of `Σ o[i] sin(0.1 i)` w.r.t. q, k and v.
struct Hidden {
    name: &'static str,
    shapes: [&'static [usize]; 3],
    mask: Tensor,
    causal: bool,
    want: [(f64, f64); 4],
}

/// PyTorch's keep pattern of `reference/attention_hidden_rows.py`: true
/// where `(3i + 5j + b) % 4 != 0`, rows `hidden` all false; `[b, 1, tq, tk]`.
fn keep_mask(b: usize, tq: usize, tk: usize, hidden: &[(usize, usize)]) -> Tensor {
    let mut m = vec![false; b * tq * tk];
    for bb in 0..b {
        for i in 0..tq {
            for j in 0..tk {
                m[(bb * tq + i) * tk + j] = (i * 3 + j * 5 + bb) % 4 != 0 && !hidden.contains(&(bb, i));
            }
        }
    }
    Tensor::from_vec(m, &[b, 1, tq, tk]).unwrap()
}

fn hidden_cases() -> Vec<Hidden> {
    let small: [&[usize]; 3] = [&[2, 2, 5, 4], &[2, 2, 7, 4], &[2, 2, 7, 3]];
    let m = keep_mask(2, 5, 7, &[(0, 2), (1, 0), (1, 4)]);
    let additive = Tensor::where_(&m, &Tensor::scalar(0.0f64), &Tensor::scalar(f64::NEG_INFINITY)).unwrap();
    let key0: Vec<bool> = (0..35).map(|x| x % 7 != 0).collect();
    let key0 = Tensor::from_vec(key0, &[5, 7]).unwrap();
    // the numbers: PyTorch 2.15's scaled_dot_product_attention in f64,
    // printed by tests/reference/attention_hidden_rows.py
    let plain = [
        (-1.2199982218801726, -2.130810364719187),
        (0.00391555256358167, 2.199431161265683),
        (0.0, -0.1614675062683042),
        (3.1693717004995086, 3.1389182976917938),
    ];
    vec![
        Hidden {
            name: "bool mask",
            shapes: small,
            mask: m,
            causal: false,
            want: plain,
        },
        Hidden {
            name: "additive mask, -inf where hidden",
            shapes: small,
            mask: additive,
            causal: false,
            want: plain,
        },
        Hidden {
            // (PyTorch was given the mask and the causal band as one mask)
            name: "causal with key 0 hidden: row 0 sees no key",
            shapes: small,
            mask: key0,
            causal: true,
            want: [
                (1.3285461883868366, -5.4908184384538705),
                (-0.6452060767881806, 3.8115434127845216),
                (2.220446049250313e-16, -0.2027037802444818),
                (0.09725461724283502, 11.555190129248281),
            ],
        },
        Hidden {
            name: "heads of 64, 70 keys, row 1 hidden",
            shapes: [&[1, 2, 4, 64], &[1, 2, 70, 64], &[1, 2, 70, 64]],
            mask: keep_mask(1, 4, 70, &[(0, 1)]),
            causal: false,
            want: [
                (0.7608567885993778, 3.062996196418754),
                (-0.10240964805234987, 0.3059200857190787),
                (-5.204170427930421e-18, -0.09402231699787308),
                (2.8543042260539133, 10.16695338119953),
            ],
        },
        Hidden {
            name: "heads of 8, 12 keys, rows 0 and 5 hidden",
            shapes: [&[1, 2, 9, 8], &[1, 2, 12, 8], &[1, 2, 12, 8]],
            mask: keep_mask(1, 9, 12, &[(0, 0), (0, 5)]),
            causal: false,
            want: [
                (-1.794931023952799, 2.561993249822623),
                (2.2308429438229354, 7.9964424618327055),
                (-6.175615574477433e-16, -1.2845442836321563),
                (15.908752123491656, -1.1061816278642813),
            ],
        },
    ]
}

/// `Σ o[i] sin(0.1 i)`, the loss whose gradients the reference prints.
fn sin_weighted(o: &Tensor) -> Result<Tensor> {
    let w: Vec<f64> = (0..o.numel()).map(|i| (0.1 * i as f64).sin()).collect();
    o.mul(&Tensor::from_vec(w, o.shape())?.cast(o.dtype())?)?.sum_all()
}

/// The output and the gradients of [`sin_weighted`] w.r.t. q, k, v.
fn out_and_grads(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, causal: bool) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let mut o = None;
    let loss = tape.record(|| {
        tape.watch(&[q.clone(), k.clone(), v.clone()]);
        let y = q.scaled_dot_product_attention(k, v, Some(mask), causal, None)?;
        o = Some(y.clone());
        sin_weighted(&y)
    })?;
    let g = tape.gradient(&loss, &[q.clone(), k.clone(), v.clone()])?;
    let mut out = vec![o.unwrap()];
    out.extend(g.into_iter().map(|g| g.unwrap()));
    Ok(out)
}

/// A query row whose mask hides every key gives zeros and zero
/// gradients, as PyTorch's (since 2.5) and Keras's, not NaN: on both
/// kernels (online, and on matrix products), bool and additive `-inf`
/// masks, a mask that empties a causal row; in f64 against PyTorch, in
/// f32 (the same to f32's precision), traced as eager, in forward mode
/// as in reverse, and differentiated twice without a NaN.
#[test]
fn rows_that_see_no_key_give_zeros() -> Result<()> {
    for c in hidden_cases() {
        let [qs, ks, vs] = c.shapes;
        let (q, k, v) = (init(qs, 1.0, 0.8), init(ks, 2.0, 0.9), init(vs, 3.0, 1.0));
        let got = out_and_grads(&q, &k, &v, &c.mask, c.causal)?;
        for (what, (g, w)) in ["out", "dq", "dk", "dv"].iter().zip(got.iter().zip(c.want)) {
            close(wsum(g), w, 1e-12, &format!("{}: {what}", c.name));
        }
        // the hidden rows are exact zeros
        let keep = match c.mask.dtype() {
            DType::Bool => c.mask.clone(),
            _ => c.mask.gt_scalar(f64::NEG_INFINITY)?,
        };
        let dead = keep.cast(DType::F64)?.max(&[-1], false)?.to_vec::<f64>()?;
        let o = got[0].to_vec::<f64>()?;
        let dv = *vs.last().unwrap();
        let rows = o.len() / dv;
        let per_mask = dead.len();
        let mut hidden = 0;
        for r in 0..rows {
            // (a broadcast mask: rows of later heads repeat the mask's rows)
            let (bq, i) = (r / qs[qs.len() - 2], r % qs[qs.len() - 2]);
            let mrow = if c.mask.rank() == 2 {
                i
            } else {
                (bq / qs[1] * qs[qs.len() - 2] + i) % per_mask
            };
            if dead[mrow] == 0.0 || (c.causal && c.mask.rank() == 2 && i == 0) {
                hidden += 1;
                assert!(o[r * dv..][..dv].iter().all(|&x| x == 0.0), "{}: row {r}", c.name);
            }
        }
        assert!(hidden > 0, "{}: no hidden row", c.name);
        // f32: the same sums to f32's precision
        let f = |t: &Tensor| t.cast(DType::F32).unwrap();
        let mask32 = if c.mask.dtype() == DType::Bool {
            c.mask.clone()
        } else {
            f(&c.mask)
        };
        let got32 = out_and_grads(&f(&q), &f(&k), &f(&v), &mask32, c.causal)?;
        for (what, (g, w)) in ["out", "dq", "dk", "dv"].iter().zip(got32.iter().zip(c.want)) {
            close(wsum(g), w, 2e-5, &format!("{} f32: {what}", c.name));
        }
        // half precision (computed in f32): no NaN, the same zeros
        let h = |t: &Tensor| t.cast(DType::BF16).unwrap();
        let mask_h = if c.mask.dtype() == DType::Bool {
            c.mask.clone()
        } else {
            h(&c.mask)
        };
        let oh = h(&q).scaled_dot_product_attention(&h(&k), &h(&v), Some(&mask_h), c.causal, None)?;
        let oh = oh.to_vec_f64();
        assert!(
            oh.iter()
                .zip(&o)
                .all(|(a, b)| (*b == 0.0) == (*a == 0.0) && (a - b).abs() <= 0.02),
            "{} bf16",
            c.name
        );
        // traced: the same values and gradients
        let (mask, causal) = (c.mask.clone(), c.causal);
        let traced = function(move |(q, k, v): &(Tensor, Tensor, Tensor)| out_and_grads(q, k, v, &mask, causal));
        let t = traced.call(&(q.clone(), k.clone(), v.clone()))?;
        for (i, (a, b)) in t.iter().zip(&got).enumerate() {
            let (a, b) = (a.to_vec::<f64>()?, b.to_vec::<f64>()?);
            assert!(
                a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-13 * (1.0 + y.abs())),
                "{}: traced output {i}",
                c.name
            );
        }
        // forward mode: the tangent along (tq, tk, tv) is the reverse
        // mode's directional derivative of the loss
        let (tq, tk, tv) = (init(qs, 4.0, 1.0), init(ks, 5.0, 1.0), init(vs, 6.0, 1.0));
        let acc = ForwardAccumulator::new();
        acc.watch(&q, &tq)?;
        acc.watch(&k, &tk)?;
        acc.watch(&v, &tv)?;
        let l =
            acc.record(|| sin_weighted(&q.scaled_dot_product_attention(&k, &v, Some(&c.mask), c.causal, None)?))?;
        let fwd = acc.jvp(&l)?.unwrap().item()?;
        let mut rev = 0.0;
        for (g, t) in got[1..].iter().zip([&tq, &tk, &tv]) {
            rev += g.mul(t)?.sum_all()?.item()?;
        }
        assert!(
            (fwd - rev).abs() <= 1e-11 * (1.0 + rev.abs()),
            "{}: jvp {fwd} vs vjp {rev}",
            c.name
        );
        // second order (through the composite): finite, and zero for the
        // hidden rows' queries
        let outer = GradientTape::new();
        let s = outer.record(|| {
            outer.watch(&q);
            let g = out_and_grads(&q, &k, &v, &c.mask, c.causal)?;
            g[1].square()?.sum_all()
        })?;
        let h = outer.gradient(&s, &q)?.unwrap().to_vec::<f64>()?;
        assert!(h.iter().all(|x| x.is_finite()), "{}: second order {h:?}", c.name);
        assert!(h.iter().any(|&x| x != 0.0), "{}: second order all zero", c.name);
    }
    Ok(())
}
