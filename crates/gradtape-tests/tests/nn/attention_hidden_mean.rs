//! The fused attention op's [`HiddenRows::Mean`]: a query row that sees
//! no key gives the mean of the values (Keras's default attention path),
//! its gradient reaching the values only. Against the composite the
//! layer used before (the op's zeros, then `where(no key seen,
//! mean(v), o)`, written out here in `f64`) in values, gradients and
//! forward-mode tangents; through the gradient checker (first and second
//! order); under `vmap`; and `MultiHeadAttention`'s masked self-attention
//! traced against eager, its traced backward now one `AttentionGradInto`
//! node on two model shapes. (`tests/nn/attention_masks.rs` checks the
//! layer's padded rows against Keras 3.15 itself.)

use gradtape::nn::{AttentionArgs, Module, MultiHeadAttention};
use gradtape::{
    check_gradients, function, jvp, vmap, CheckOptions, DType, GradientTape, HiddenRows, Result, Rng, Tensor, Variable,
};

/// `scale · sin(0.37 i + k)` in `shape` (row-major `i`), `dtype`.
fn init(shape: &[usize], k: f64, scale: f64, dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| scale * (0.37 * i as f64 + k).sin()).collect();
    Tensor::from_vec(v, shape).unwrap().cast(dtype).unwrap()
}

/// The keep mask `[b, 1, tq, tk]`: true where `(3i + 5j + b) % 4 != 0`,
/// every key hidden from the rows in `hidden` (`(b, i)`).
fn keep(b: usize, tq: usize, tk: usize, hidden: &[(usize, usize)]) -> Tensor {
    let v: Vec<bool> = (0..b * tq * tk)
        .map(|x| {
            let (bb, i, j) = (x / (tq * tk), x / tk % tq, x % tk);
            (i * 3 + j * 5 + bb) % 4 != 0 && !hidden.contains(&(bb, i))
        })
        .collect();
    Tensor::from_vec(v, &[b, 1, tq, tk]).unwrap()
}

/// The op with the values' mean on hidden rows.
fn fused(x: &[Tensor], mask: &Tensor, causal: bool) -> Result<Tensor> {
    x[0].scaled_dot_product_attention_with_hidden(&x[1], &x[2], Some(mask), causal, None, HiddenRows::Mean)
}

/// The composite: the op's zeros, then the values' mean where the mask
/// (and the causal band) hides every key.
fn composite(x: &[Tensor], mask: &Tensor, causal: bool) -> Result<Tensor> {
    let o = x[0].scaled_dot_product_attention(&x[1], &x[2], Some(mask), causal, None)?;
    let (tq, tk) = (x[0].shape()[2], x[1].shape()[2]);
    let seen = if causal {
        let band: Vec<bool> = (0..tq * tk).map(|a| a % tk <= a / tk).collect();
        mask.logical_and(&Tensor::from_vec(band, &[tq, tk])?)?
    } else {
        mask.clone()
    };
    let hidden = seen.any(&[-1], true)?.logical_not()?;
    Tensor::where_(&hidden, &x[2].mean(&[-2], true)?, &o)
}

/// `Σ o[i] sin(0.1 i)`.
fn weighted(o: &Tensor) -> Result<Tensor> {
    let n = o.numel();
    let w: Vec<f64> = (0..n).map(|i| (0.1 * i as f64).sin()).collect();
    let w = Tensor::from_vec(w, o.shape())?.cast(o.dtype())?;
    o.mul(&w)?.sum_all()
}

/// The value and the gradients of `weighted(f(q, k, v))`.
fn value_and_grads(f: impl Fn(&[Tensor]) -> Result<Tensor>, x: &[Tensor]) -> Result<Vec<Vec<f64>>> {
    let vars: Vec<Variable> = x.iter().map(|t| Variable::new(t.clone())).collect();
    let tape = GradientTape::new();
    let (o, l) = tape.record(|| {
        let o = f(&vars.iter().map(Variable::read).collect::<Vec<_>>())?;
        let l = weighted(&o)?;
        Ok((o, l))
    })?;
    let g = tape.gradient(&l, &vars)?;
    let mut out = vec![o.to_vec_f64()];
    out.extend(
        g.into_iter()
            .map(|g| g.expect("every input gets a gradient").to_vec_f64()),
    );
    Ok(out)
}

struct Case {
    name: &'static str,
    q: [usize; 4],
    tk: usize,
    dv: usize,
    hidden: &'static [(usize, usize)],
    causal: bool,
}

const CASES: &[Case] = &[
    // padded queries: rows 3 and 4 of batch 0, row 4 of batch 1
    Case {
        name: "padding on the query side",
        q: [2, 2, 5, 4],
        tk: 7,
        dv: 3,
        hidden: &[(0, 3), (0, 4), (1, 4)],
        causal: false,
    },
    // every row of batch 1 hidden
    Case {
        name: "a fully hidden batch element",
        q: [2, 2, 4, 3],
        tk: 6,
        dv: 5,
        hidden: &[(1, 0), (1, 1), (1, 2), (1, 3)],
        causal: false,
    },
    // the causal band and the mask together hide rows 0 (key 0 is hidden
    // by the mask pattern for batch 0) and 2
    Case {
        name: "causal and a mask",
        q: [2, 1, 6, 4],
        tk: 6,
        dv: 4,
        hidden: &[(0, 2), (1, 5)],
        causal: true,
    },
    // wide heads, more keys (the kernels on matrix products)
    Case {
        name: "wide: [1, 2, 8, 64] x 70 keys",
        q: [1, 2, 8, 64],
        tk: 70,
        dv: 64,
        hidden: &[(0, 1), (0, 6)],
        causal: false,
    },
];

fn inputs(c: &Case, dtype: DType) -> (Vec<Tensor>, Tensor) {
    let [b, h, tq, d] = c.q;
    let x = vec![
        init(&[b, h, tq, d], 1.0, 0.8, dtype),
        init(&[b, h, c.tk, d], 2.0, 0.9, dtype),
        init(&[b, h, c.tk, c.dv], 3.0, 1.0, dtype),
    ];
    (x, keep(b, tq, c.tk, c.hidden))
}

#[test]
fn hidden_rows_give_the_values_mean_as_the_composite_does() -> Result<()> {
    for c in CASES {
        let (x, mask) = inputs(c, DType::F64);
        let got = value_and_grads(|x| fused(x, &mask, c.causal), &x)?;
        let want = value_and_grads(|x| composite(x, &mask, c.causal), &x)?;
        for (part, (g, w)) in ["output", "dq", "dk", "dv"].iter().zip(got.iter().zip(&want)) {
            let err = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(err < 1e-12, "{} {part}: off by {err}", c.name);
        }
        // the hidden rows are the values' mean, not zeros
        let [_, h, tq, _] = c.q;
        let (o, v) = (&got[0], x[2].to_vec_f64());
        for &(bb, i) in c.hidden {
            for hh in 0..h {
                let e = bb * h + hh;
                for col in 0..c.dv {
                    let mean = (0..c.tk).map(|j| v[(e * c.tk + j) * c.dv + col]).sum::<f64>() / c.tk as f64;
                    let at = (e * tq + i) * c.dv + col;
                    assert!(
                        (o[at] - mean).abs() < 1e-12,
                        "{} row ({bb}, {i}): {} against {mean}",
                        c.name,
                        o[at]
                    );
                }
            }
        }
        // f32: the same, to f32's rounding
        let (x32, _) = inputs(c, DType::F32);
        let got32 = value_and_grads(|x| fused(x, &mask, c.causal), &x32)?;
        for (part, (g, w)) in ["output", "dq", "dk", "dv"].iter().zip(got32.iter().zip(&want)) {
            let err = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            let size = w.iter().fold(1.0f64, |m, x| m.max(x.abs()));
            assert!(
                err < 1e-5 * size,
                "{} f32 {part}: off by {err} (largest {size})",
                c.name
            );
        }
    }
    Ok(())
}

#[test]
fn hidden_rows_zeros_and_mean_differ_only_on_hidden_rows() -> Result<()> {
    let c = &CASES[0];
    let (x, mask) = inputs(c, DType::F64);
    let mean = fused(&x, &mask, false)?.to_vec_f64();
    let zeros = x[0]
        .scaled_dot_product_attention_with_hidden(&x[1], &x[2], Some(&mask), false, None, HiddenRows::Zeros)?
        .to_vec_f64();
    let [_, h, tq, _] = c.q;
    for (r, (a, b)) in mean.chunks(c.dv).zip(zeros.chunks(c.dv)).enumerate() {
        let (bb, i) = (r / (h * tq), r % tq);
        if c.hidden.contains(&(bb, i)) {
            assert!(b.iter().all(|&z| z == 0.0) && a.iter().any(|&m| m != 0.0), "row {r}");
        } else {
            assert_eq!(a, b, "row {r}: a row that sees keys is the same either way");
        }
    }
    Ok(())
}

#[test]
fn hidden_rows_forward_mode_matches_the_composite() -> Result<()> {
    for c in &CASES[..3] {
        let (x, mask) = inputs(c, DType::F64);
        let t: Vec<Tensor> = x
            .iter()
            .enumerate()
            .map(|(j, x)| init(x.shape(), 5.0 + j as f64, 0.5, DType::F64))
            .collect();
        let (y1, t1) = jvp(|p| fused(p, &mask, c.causal), &x, &t)?;
        let (y2, t2) = jvp(|p| composite(p, &mask, c.causal), &x, &t)?;
        for (what, a, b) in [("value", y1, y2), ("tangent", t1, t2)] {
            let err = a
                .to_vec_f64()
                .iter()
                .zip(b.to_vec_f64())
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(err < 1e-12, "{} {what}: off by {err}", c.name);
        }
    }
    Ok(())
}

#[test]
fn hidden_rows_pass_the_gradient_checker_to_second_order() -> Result<()> {
    for c in &CASES[..3] {
        let (x, mask) = inputs(c, DType::F64);
        let opts = CheckOptions {
            second_order: true,
            ..CheckOptions::default()
        };
        let r = check_gradients(|x| weighted(&fused(x, &mask, c.causal)?), &x, &opts)?;
        assert!(r.compared > 0 && r.max_err_second.is_some(), "{}: {r:?}", c.name);
    }
    Ok(())
}

#[test]
fn hidden_rows_under_vmap_match_each_example() -> Result<()> {
    let c = &CASES[0];
    let (x, _) = inputs(c, DType::F64);
    // [2, 2, 5, 4]: vmap over the first dim, a shared mask [1, 5, 7]
    let mask = keep(1, 5, 7, &[(0, 3), (0, 0)]).reshape(&[1, 5, 7])?;
    let m = mask.clone();
    let f = move |a: &[Tensor]| -> Result<Vec<Tensor>> {
        Ok(vec![a[0].scaled_dot_product_attention_with_hidden(
            &a[1],
            &a[2],
            Some(&m),
            false,
            None,
            HiddenRows::Mean,
        )?])
    };
    let got = vmap(f.clone(), &[Some(0), Some(0), Some(0)], &[Some(0)]).call(&x)?;
    for e in 0..2 {
        let one: Vec<Tensor> = x
            .iter()
            .map(|t| t.narrow(0, e, 1).unwrap().squeeze(&[0]).unwrap())
            .collect();
        let want = f(&one)?[0].to_vec_f64();
        let g = got[0].narrow(0, e, 1)?.to_vec_f64();
        let err = g.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(err < 1e-12, "example {e}: off by {err}");
    }
    Ok(())
}

/// A masked self-attention step (2 heads of `key_dim` on `features`, a
/// padding mask hiding the last `pad` positions of batch element 0): the
/// loss and every variable's gradient, eager and traced, and the traced
/// step's count of `AttentionGradInto` nodes.
fn masked_step(features: usize, heads: usize, key_dim: usize, t: usize, pad: usize) -> Result<()> {
    let m = MultiHeadAttention::builder(heads, key_dim)
        .dtype(DType::F64)
        .build(features, &mut Rng::new(3))?;
    let keep: Vec<bool> = (0..2 * t).map(|i| i >= t || i < t - pad).collect();
    let keep = Tensor::from_vec(keep, &[2, t])?;
    let x = init(&[2, t, features], 0.3, 1.0, DType::F64);
    let step = move |x: &Tensor| -> Result<Vec<Tensor>> {
        let vars = m.variables();
        let tape = GradientTape::new();
        let l = tape.record(|| {
            let args = AttentionArgs::new().query_mask(&keep).value_mask(&keep);
            weighted(&m.call_with(x, x, args)?)
        })?;
        let g = tape.gradient(&l, &vars)?;
        Ok(std::iter::once(l).chain(g.into_iter().map(|g| g.unwrap())).collect())
    };
    let eager = step(&x)?;
    let f = function(step);
    let traced = f.call(&x)?;
    for (j, (a, b)) in traced.iter().zip(&eager).enumerate() {
        let err = a
            .to_vec_f64()
            .iter()
            .zip(b.to_vec_f64())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(
            err < 1e-12,
            "[{features}, {heads}x{key_dim}, t {t}] output {j}: off by {err}"
        );
    }
    let g = f.concrete(&x)?;
    let graph = g.optimized_graph();
    assert_eq!(
        graph.count("AttentionGradInto"),
        1,
        "[{features}, {heads}x{key_dim}, t {t}]: the backward writes dq, dk, dv into one buffer:\n{graph}"
    );
    Ok(())
}

#[test]
fn masked_self_attention_traced_equals_eager_and_writes_its_gradients_into_one_buffer() -> Result<()> {
    masked_step(8, 2, 4, 6, 2)?;
    // a second shape: more heads, a longer sequence, more padding
    masked_step(12, 3, 5, 9, 4)
}
