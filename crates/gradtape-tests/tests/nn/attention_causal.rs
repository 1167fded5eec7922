//! Causal `scaled_dot_product_attention` against the unfused composite
//! (`softmax(q kᵀ · scale + causal mask) · v` from ordinary ops, f64), at
//! shapes that split the product kernels' blocks of 64 query rows into
//! sub-blocks, each of whose products runs over only the keys its last row
//! sees (`kernels/cpu/attention_gemm.rs`): query and key lengths that are
//! no multiple of a block or of a sub-block, fewer queries than keys and
//! more, heads either side of 64 (the products' two kernels), and the last
//! key's values large, so that anything of a key leaking into a row that
//! does not see it (a score or a gradient left in the scratch past the
//! row's keys) shows far above the tolerance.
//!
//! Three ways in: the product kernels called directly in f64 (every head
//! width, whichever kernel the op would pick on this CPU); the public op in
//! f64 (the product kernels from 64 keys on heads of 64 and more, and on
//! narrower ones where the CPU has the small products; the online kernel
//! elsewhere); the public op in f32 (the product kernels from 8 keys where
//! the CPU has `sgemm`).

use gradtape::__internals::kernels::cpu::attention::Dims;
use gradtape::__internals::kernels::cpu::attention_gemm;
use gradtape::{DType, GradientTape, Result, Tensor};

use super::sums_util::init;

/// `(batch dims, tq, tk, d, dv)`.
type Shape = (&'static [usize], usize, usize, usize, usize);

const SHAPES: &[Shape] = &[
    (&[1], 1, 1, 16, 16),
    (&[2], 17, 17, 16, 12),
    (&[2], 65, 65, 64, 64),
    (&[1, 2], 130, 130, 96, 80),
    (&[3], 130, 130, 24, 40),
    // fewer queries than keys: row i sees keys 0..=i (top-left)
    (&[2], 40, 130, 64, 64),
    (&[1], 70, 200, 32, 24),
    (&[1], 100, 150, 80, 72),
    // more queries than keys: the rows from tk on see every key
    (&[2], 130, 70, 72, 64),
    (&[1], 150, 90, 16, 8),
];

/// The unfused definition with public ops (causal, top-left aligned).
fn composite(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    let r = k.rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    let (tq, tk) = (q.shape()[r - 2], k.shape()[r - 2]);
    let c: Vec<f64> = (0..tq * tk)
        .map(|x| if x % tk > x / tk { f64::NEG_INFINITY } else { 0.0 })
        .collect();
    let hide = Tensor::from_vec(c, &[tq, tk])?.cast(q.dtype())?;
    q.matmul(&k.permute(&perm)?)?
        .mul_scalar(scale)?
        .add(&hide)?
        .softmax(-1)?
        .matmul(v)
}

/// The inputs of a shape: `q`, `k`, `v` (the last key's values times
/// `big`) and the output's cotangent `w`.
fn inputs(n: usize, &(batch, tq, tk, d, dv): &Shape, big: f64) -> [Tensor; 4] {
    let sh = |t, w| batch.iter().copied().chain([t, w]).collect::<Vec<_>>();
    let v = init(&sh(tk, dv), n as f64 + 0.25, 1.0);
    let mut vv = v.to_vec::<f64>().unwrap();
    for (i, x) in vv.iter_mut().enumerate() {
        if (i / dv) % tk == tk - 1 {
            *x *= big;
        }
    }
    [
        init(&sh(tq, d), n as f64, 1.5),
        init(&sh(tk, d), n as f64 + 0.5, 1.5),
        Tensor::from_vec(vv, &sh(tk, dv)).unwrap(),
        init(&sh(tq, dv), n as f64 + 0.75, 1.0),
    ]
}

/// The output and the gradients of `Σ o ∘ w` w.r.t. `q`, `k`, `v`, fused or
/// composite, in f64.
fn output_and_gradients(q: &Tensor, k: &Tensor, v: &Tensor, w: &Tensor, scale: f64, fused: bool) -> Vec<Vec<f64>> {
    let tape = GradientTape::new();
    let mut out = None;
    let loss = tape
        .record(|| {
            tape.watch(&[q.clone(), k.clone(), v.clone()]);
            let o = if fused {
                q.scaled_dot_product_attention(k, v, None, true, Some(scale))?
            } else {
                composite(q, k, v, scale)?
            };
            out = Some(o.clone());
            o.mul(&w.cast(o.dtype())?)?.sum_all()
        })
        .unwrap();
    let grads = tape.gradient(&loss, &[q.clone(), k.clone(), v.clone()]).unwrap();
    std::iter::once(out.unwrap())
        .chain(grads.into_iter().map(Option::unwrap))
        .map(|t| t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap())
        .collect()
}

/// Each tensor of `got` (output, dq, dk, dv) within `tol · (1 + m)` of
/// `want`'s, elementwise, `m` the largest `|want|` of them all (the
/// gradients of a softmax are differences of terms of the output's size).
fn close(got: &[Vec<f64>], want: &[Vec<f64>], tol: f64, what: &str) {
    let top = want.iter().flatten().fold(0.0f64, |m, x| m.max(x.abs()));
    for (n, (got, want)) in got.iter().zip(want).enumerate() {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (x, y)) in got.iter().zip(want).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + top),
                "{what} {} [{i}]: {x} vs {y} (largest {top})",
                NAMES[n]
            );
        }
    }
}

const NAMES: [&str; 4] = ["output", "dq", "dk", "dv"];

/// The product kernels, called directly: output and gradients equal the
/// composite's to 1e-12.
#[test]
fn product_kernels_equal_the_composite() {
    for (n, shape) in SHAPES.iter().enumerate() {
        let &(batch, tq, tk, d, dv) = shape;
        for big in [1.0, 1e6] {
            let [q, k, v, w] = inputs(n, shape, big);
            let scale = 0.6 / (d as f64).sqrt();
            let want = output_and_gradients(&q, &k, &v, &w, scale, false);
            let b: usize = batch.iter().product();
            let dims = Dims {
                batch: b,
                tq,
                tk,
                d,
                dv,
                scale,
                causal: true,
                dropout: None,
            };
            let vals = |t: &Tensor| t.to_vec::<f64>().unwrap();
            let (q, k, v, w) = (vals(&q), vals(&k), vals(&v), vals(&w));
            let fwd = attention_gemm::forward("t", &dims, &q, &k, &v, None).unwrap();
            let o: Vec<f64> = fwd.chunks(dv + 1).flat_map(|r| r[..dv].to_vec()).collect();
            let g = attention_gemm::backward("t", &dims, &q, &k, &v, None, &fwd, &w).unwrap();
            // per batch element: dq, dk, dv
            let per = [tq * d, tk * d, tk * dv];
            let mut got = vec![o, vec![], vec![], vec![]];
            for part in g.chunks(per.iter().sum()) {
                let (dq, rest) = part.split_at(per[0]);
                let (dk, dvv) = rest.split_at(per[1]);
                got[1].extend_from_slice(dq);
                got[2].extend_from_slice(dk);
                got[3].extend_from_slice(dvv);
            }
            let what = format!("kernels {batch:?} tq {tq} tk {tk} d {d} dv {dv} big {big}");
            close(&got, &want, 1e-12, &what);
        }
    }
}

/// The public op in f64 (1e-12) and in f32 (to f32's rounding): output and
/// gradients equal the composite's.
#[test]
fn causal_op_equals_the_composite() {
    for (n, shape) in SHAPES.iter().enumerate() {
        let &(batch, tq, tk, d, dv) = shape;
        for big in [1.0, 1e6] {
            let [q, k, v, w] = inputs(n, shape, big);
            let scale = 0.6 / (d as f64).sqrt();
            let want = output_and_gradients(&q, &k, &v, &w, scale, false);
            for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-5)] {
                let c = |t: &Tensor| t.cast(dt).unwrap();
                let got = output_and_gradients(&c(&q), &c(&k), &c(&v), &w, scale, true);
                let what = format!("{dt:?} {batch:?} tq {tq} tk {tk} d {d} dv {dv} big {big}");
                close(&got, &want, tol, &what);
            }
        }
    }
}

/// Not a check: causal attention forward and backward on `GT_ATTN`
/// (`batch,heads,t,d`, f32), `GT_ATTN_REPS` times, to count its
/// instructions under callgrind.
#[test]
#[ignore]
fn causal_attention_cost() {
    let spec = std::env::var("GT_ATTN").unwrap_or_else(|_| "2,2,200,32".into());
    let n: Vec<usize> = spec.split(',').map(|x| x.parse().unwrap()).collect();
    let reps: usize = std::env::var("GT_ATTN_REPS").map_or(3, |x| x.parse().unwrap());
    let sh = [n[0], n[1], n[2], n[3]];
    let f = |t: Tensor| t.cast(DType::F32).unwrap();
    let (q, k, v, w) = (
        f(init(&sh, 1.0, 1.0)),
        f(init(&sh, 2.0, 1.0)),
        f(init(&sh, 3.0, 1.0)),
        f(init(&sh, 4.0, 1.0)),
    );
    for _ in 0..reps {
        let tape = GradientTape::new();
        let loss = tape
            .record(|| {
                tape.watch(&[q.clone(), k.clone(), v.clone()]);
                q.scaled_dot_product_attention(&k, &v, None, true, None)?
                    .mul(&w)?
                    .sum_all()
            })
            .unwrap();
        let g = tape.gradient(&loss, &[q.clone(), k.clone(), v.clone()]).unwrap();
        std::hint::black_box(g);
    }
}
