//! Dropout inside the fused `scaled_dot_product_attention_dropout`.
//!
//! No peer has the same random decisions, so the references are built
//! here: with `v` the identity, an output row is the row of dropped
//! probabilities itself, which shows each decision (0, or the undropped
//! probability times `1 / (1 - rate)`) against the undropped op; the
//! decisions so read make a constant factor matrix `F`, and the unfused
//! `(softmax(s) ⊙ F) v` is the reference for gradients (first and second
//! order), forward mode and tracing.

use gradtape::{function, vmap, AttentionDropout, DType, ForwardAccumulator, GradientTape, Result, Tensor};

use super::sums_util::init;

/// `[b, h, tk, tk]` identities.
fn identity(lead: &[usize], tk: usize) -> Tensor {
    let n: usize = lead.iter().product();
    let v: Vec<f64> = (0..n * tk * tk)
        .map(|i| f64::from(u8::from(i % tk == (i / tk) % tk)))
        .collect();
    let mut shape = lead.to_vec();
    shape.extend([tk, tk]);
    Tensor::from_vec(v, &shape).unwrap()
}

/// The unfused reference `(softmax(q kᵀ·scale [+ causal]) ⊙ f) v`.
fn composite(q: &Tensor, k: &Tensor, v: &Tensor, f: &Tensor, causal: bool, scale: f64) -> Result<Tensor> {
    let r = k.rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    let mut s = q.matmul(&k.permute(&perm)?)?.mul_scalar(scale)?;
    if causal {
        let (tq, tk) = (q.shape()[r - 2], k.shape()[r - 2]);
        let c: Vec<f64> = (0..tq * tk)
            .map(|x| if x % tk > x / tk { f64::NEG_INFINITY } else { 0.0 })
            .collect();
        s = s.add(&Tensor::from_vec(c, &[tq, tk])?)?;
    }
    s.softmax(-1)?.mul(f)?.matmul(v)
}

/// Reads the decisions of a dropout seed off an identity `v` and checks
/// each against the undropped probabilities; returns the factor matrix.
fn factors(q: &Tensor, k: &Tensor, causal: bool, drop: AttentionDropout) -> Tensor {
    let r = q.rank();
    let tk = k.shape()[r - 2];
    let eye = identity(&q.shape()[..r - 2], tk);
    let p = q
        .scaled_dot_product_attention(k, &eye, None, causal, None)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let o = q
        .scaled_dot_product_attention_dropout(k, &eye, None, causal, None, drop)
        .unwrap();
    let keep = 1.0 / (1.0 - drop.rate);
    let (mut dropped, mut seen) = (0usize, 0usize);
    let f: Vec<f64> = o
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .zip(&p)
        .enumerate()
        .map(|(at, (&o, &p))| {
            if p == 0.0 {
                // (a causally hidden key: nothing to decide)
                assert_eq!(o, 0.0, "at {at}");
                return 0.0;
            }
            seen += 1;
            if o == 0.0 {
                dropped += 1;
                0.0
            } else {
                assert!(
                    (o - p * keep).abs() <= 1e-14 * o.abs(),
                    "at {at}: {o} is neither 0 nor {p}·{keep}"
                );
                keep
            }
        })
        .collect();
    // dropped ~ Binomial(seen, rate): within 5 standard deviations
    let (n, r) = (seen as f64, drop.rate);
    let sd = (n * r * (1.0 - r)).sqrt();
    assert!(
        (dropped as f64 - n * r).abs() <= 5.0 * sd + 1.0,
        "{dropped} of {seen} dropped at rate {r}"
    );
    Tensor::from_vec(f, o.shape()).unwrap()
}

/// Each probability is dropped or scaled by `1 / (1 - rate)`, at about the
/// rate, over several key blocks, causal or not; the same seed gives the
/// same decisions, another seed others, rate 0 the plain op.
#[test]
fn drops_probabilities_at_the_rate() {
    let (q, k) = (init(&[2, 3, 33, 8], 1.0, 1.0), init(&[2, 3, 150, 8], 2.0, 1.0));
    for causal in [false, true] {
        for rate in [0.1, 0.5, 0.9] {
            let a = factors(&q, &k, causal, AttentionDropout { rate, seed: 3 });
            let b = factors(&q, &k, causal, AttentionDropout { rate, seed: 3 });
            let c = factors(&q, &k, causal, AttentionDropout { rate, seed: 4 });
            assert_eq!(a.to_vec::<f64>().unwrap(), b.to_vec::<f64>().unwrap());
            assert_ne!(a.to_vec::<f64>().unwrap(), c.to_vec::<f64>().unwrap());
        }
    }
    let v = init(&[2, 3, 150, 5], 3.0, 1.0);
    let plain = q.scaled_dot_product_attention(&k, &v, None, true, None).unwrap();
    let zero = q
        .scaled_dot_product_attention_dropout(&k, &v, None, true, None, AttentionDropout { rate: 0.0, seed: 9 })
        .unwrap();
    assert_eq!(plain.to_vec::<f64>().unwrap(), zero.to_vec::<f64>().unwrap());
}

/// The fused output and its gradients (through the fused backward op, which
/// recomputes the decisions) equal the unfused composite's with the same
/// decisions; so do the second order and forward mode (through the
/// composite inside the op's rules).
#[test]
fn gradients_equal_the_composites() {
    // heads of 4 (the online kernel), of 16 (the products' small kernel
    // where the CPU has it) and of 64 (the `gemm` crate's products)
    for (d, dv) in [(4, 3), (16, 16), (64, 64)] {
        gradients_equal_the_composites_at(d, dv);
    }
}

fn gradients_equal_the_composites_at(d: usize, dv: usize) {
    let (q, k, v) = (
        init(&[2, 2, 9, d], 1.0, 1.0),
        init(&[2, 2, 70, d], 2.0, 1.0),
        init(&[2, 2, 70, dv], 3.0, 1.0),
    );
    let w = init(&[2, 2, 9, dv], 4.0, 1.0);
    let u = init(&[2, 2, 9, d], 5.0, 1.0);
    let xs = [q.clone(), k.clone(), v.clone()];
    for causal in [false, true] {
        let drop = AttentionDropout { rate: 0.35, seed: 21 };
        let f = factors(&q, &k, causal, drop);
        let run = |fused: bool, q: &Tensor| -> Result<Tensor> {
            if fused {
                q.scaled_dot_product_attention_dropout(&k, &v, None, causal, None, drop)
            } else {
                composite(q, &k, &v, &f, causal, 1.0 / (d as f64).sqrt())
            }
        };
        let close = |a: &Tensor, b: &Tensor, what: &str| {
            let (a, b) = (a.to_vec::<f64>().unwrap(), b.to_vec::<f64>().unwrap());
            assert_eq!(a.len(), b.len());
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-11 * (1.0 + y.abs()),
                    "{what} d {d} causal {causal} [{i}]: {x} vs {y}"
                );
            }
        };
        close(&run(true, &q).unwrap(), &run(false, &q).unwrap(), "value");
        // first and second order
        let orders = |fused: bool| {
            let outer = GradientTape::new();
            let inner = GradientTape::new();
            let mut first = Vec::new();
            let z = outer
                .record(|| {
                    outer.watch(&xs);
                    let loss = inner.record(|| {
                        inner.watch(&xs);
                        run(fused, &q)?.mul(&w)?.sum_all()
                    })?;
                    let g = inner.gradient(&loss, &xs)?;
                    first = g.iter().map(|g| g.clone().unwrap()).collect();
                    g[0].as_ref()
                        .unwrap()
                        .mul(&u)?
                        .sum_all()?
                        .add(&g[1].as_ref().unwrap().square()?.sum_all()?)?
                        .add(&g[2].as_ref().unwrap().sum_all()?)
                })
                .unwrap();
            let second: Vec<Tensor> = outer
                .gradient(&z, &xs)
                .unwrap()
                .into_iter()
                .map(Option::unwrap)
                .collect();
            (first, second)
        };
        let ((f1, s1), (f2, s2)) = (orders(true), orders(false));
        for i in 0..3 {
            close(&f1[i], &f2[i], &format!("gradient {i}"));
            close(&s1[i], &s2[i], &format!("second order {i}"));
        }
        // forward mode
        let tangent = |fused: bool| {
            let acc = ForwardAccumulator::new();
            acc.watch(&q, &u).unwrap();
            acc.watch(&v, &init(&[2, 2, 70, dv], 6.0, 1.0)).unwrap();
            let o = acc.record(|| run(fused, &q)).unwrap();
            acc.jvp(&o).unwrap().unwrap()
        };
        close(&tangent(true), &tangent(false), "jvp");
    }
}

/// A traced step with a fixed seed gives eager's values and gradients at
/// each call (the decisions are the seed's, the seed a node of the graph).
#[test]
fn traced_equals_eager() {
    let drop = AttentionDropout { rate: 0.25, seed: 77 };
    let step = move |q: &Tensor, k: &Tensor, v: &Tensor| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(&[q.clone(), k.clone(), v.clone()]);
            q.scaled_dot_product_attention_dropout(k, v, None, true, None, drop)?
                .square()?
                .sum_all()
        })?;
        let g = tape.gradient(&loss, &[q.clone(), k.clone(), v.clone()])?;
        let mut out = vec![loss];
        out.extend(g.into_iter().map(Option::unwrap));
        Ok(out)
    };
    let f = function(move |(q, k, v): &(Tensor, Tensor, Tensor)| step(q, k, v));
    for s in [1.0, 2.0] {
        let args = (
            init(&[2, 70, 8], s, 1.0),
            init(&[2, 70, 8], s + 1.0, 1.0),
            init(&[2, 70, 8], s + 2.0, 1.0),
        );
        let traced = f.call(&args).unwrap();
        let eager = step(&args.0, &args.1, &args.2).unwrap();
        for (i, (t, e)) in traced.iter().zip(&eager).enumerate() {
            let (t, e) = (t.to_vec::<f64>().unwrap(), e.to_vec::<f64>().unwrap());
            for (j, (a, b)) in t.iter().zip(&e).enumerate() {
                assert!((a - b).abs() <= 1e-13 * (1.0 + b.abs()), "output {i} [{j}]: {a} vs {b}");
            }
        }
    }
    let args = (
        init(&[2, 70, 8], 0.0, 1.0),
        init(&[2, 70, 8], 0.0, 1.0),
        init(&[2, 70, 8], 0.0, 1.0),
    );
    let graph = f.graph(&args).unwrap();
    assert_eq!(
        (graph.count("Attention"), graph.count("AttentionGrad")),
        (1, 1),
        "{graph}"
    );
}

/// Under `vmap`, attention with dropout takes the per-example loop (its
/// decisions follow each example's own indices), so it equals the loop.
#[test]
fn vmap_equals_the_loop() -> Result<()> {
    let drop = AttentionDropout { rate: 0.5, seed: 2 };
    let (q, k, v) = (
        init(&[3, 4, 6], 1.0, 1.0),
        init(&[4, 6], 2.0, 1.0),
        init(&[3, 4, 6], 3.0, 1.0),
    );
    let f = vmap(
        move |a: &[Tensor]| {
            Ok(vec![a[0].scaled_dot_product_attention_dropout(
                &a[1], &a[2], None, false, None, drop,
            )?])
        },
        &[Some(0), None, Some(0)],
        &[Some(0)],
    );
    let got = f.call(&[q.clone(), k.clone(), v.clone()])?;
    for e in 0..3 {
        let one = |x: &Tensor| x.narrow(0, e, 1).and_then(|x| x.reshape(&[4, 6]));
        let want = one(&q)?.scaled_dot_product_attention_dropout(&k, &one(&v)?, None, false, None, drop)?;
        assert_eq!(one(&got[0])?.to_vec::<f64>()?, want.to_vec::<f64>()?, "example {e}");
    }
    Ok(())
}

/// A rate outside `[0, 1)` is an error naming the op and the rate.
#[test]
fn bad_rates_are_clear_errors() {
    let q = init(&[2, 3, 4], 1.0, 1.0);
    for rate in [1.0, -0.1, f64::NAN, 2.0] {
        let e = q
            .scaled_dot_product_attention_dropout(&q, &q, None, false, None, AttentionDropout { rate, seed: 0 })
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("scaled_dot_product_attention") && e.contains("dropout rate"),
            "{e}"
        );
    }
    let h = q.cast(DType::F32).unwrap();
    let o = h
        .scaled_dot_product_attention_dropout(&h, &h, None, false, None, AttentionDropout { rate: 0.5, seed: 0 })
        .unwrap();
    assert_eq!(o.dtype(), DType::F32);
}
