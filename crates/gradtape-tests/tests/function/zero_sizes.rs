//! Zero-size dimensions and scalars through compiled graphs (fused
//! elementwise groups, broadcasts, reductions and their gradients),
//! traced against eager; and the values of reductions over nothing
//! against TensorFlow.
//!
//! Seeded random programs over a base shape with a zero dim (`[0, 5]`,
//! `[5, 0]`, `[0]`, `[0, 0]`, `[3, 0, 2]`), a scalar, a one (`[1]`,
//! `[1, 1]`) or a plain shape (the control), with a second input that
//! broadcasts against it (dims set to 1, fewer dims, a scalar: `[1]`
//! against `[0]` gives `[0]`): elementwise chains, broadcasting binaries,
//! reductions over any axis (kept dims, so that every value still
//! broadcasts against the base), and, under a tape inside the function,
//! the gradient of a loss over all values with respect to both inputs.
//! Every call (the trace, the cached graph, new values) must give eager's
//! shapes and values: NaN where eager has NaN, the same infinities.
//!
//! Expected values: the closure run eagerly; for the reductions over
//! nothing, TensorFlow 2.21 (eager and in a `tf.function`):
//! ```python
//! x = tf.zeros([0, 5])
//! tf.reduce_sum(x, 0)        # [0. 0. 0. 0. 0.]
//! tf.reduce_mean(x, 0)       # [nan ...]
//! tf.reduce_max(x, 0)        # [-inf ...]
//! tf.reduce_min(x, 0)        # [inf ...]
//! tf.reduce_prod(x, 0)       # [1. ...]
//! tf.reduce_logsumexp(x, 0)  # [-inf ...]
//! tf.matmul(tf.zeros([3, 0]), tf.zeros([0, 4]))  # zeros [3, 4]
//! (tf.zeros([0]) + tf.ones([1])).shape           # (0,)
//! ```

use std::sync::Arc;

use gradtape::{cond, function, while_loop, DType, GradientTape, Result, Tensor, WhileOptions};

use super::aliasing::Gen;

const BASES: [&[usize]; 11] = [
    &[0, 5],
    &[5, 0],
    &[0],
    &[0, 0],
    &[3, 0, 2],
    &[],
    &[1],
    &[1, 1],
    &[4, 3],
    &[2, 1, 3],
    &[1, 0],
];

#[derive(Clone, Copy, Debug)]
enum Step {
    Unary(usize, usize),
    Binary(usize, usize, usize),
    /// a reduction (kind, axis drawn from the value's rank) with kept dims
    Reduce(usize, usize, usize),
    /// a reduction of every element (a scalar)
    All(usize, usize),
    /// `cond(sum(pool[a]) > 0, tanh(pool[a]) * pool[b], pool[b] - 1)`
    /// (an empty sum is 0: the second branch)
    Cond(usize, usize),
    /// two turns of `s -> tanh(s) * pool[b]` from `s = pool[a]`
    Loop(usize, usize),
}

#[derive(Clone, Debug)]
struct Prog {
    base: Vec<usize>,
    partner: Vec<usize>,
    dtype: DType,
    steps: Vec<Step>,
}

fn unary(op: usize, a: &Tensor) -> Result<Tensor> {
    match op % 6 {
        0 => a.tanh(),
        1 => a.exp(),
        2 => a.neg()?.add_scalar(1.0),
        3 => a.abs()?.sqrt(),
        4 => a.sigmoid()?.mul_scalar(2.0),
        _ => a.square(),
    }
}

fn binary(op: usize, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match op % 4 {
        0 => a.add(b),
        1 => a.mul(b),
        2 => a.sub(b)?.tanh(),
        _ => a.maximum(b),
    }
}

fn reduce(op: usize, a: &Tensor, axes: &[isize], keep: bool) -> Result<Tensor> {
    match op % 6 {
        0 => a.sum(axes, keep),
        1 => a.mean(axes, keep),
        2 => a.max(axes, keep),
        3 => a.min(axes, keep),
        4 => a.prod(axes, keep),
        _ => a.logsumexp(axes, keep),
    }
}

impl Prog {
    fn random(g: &mut Gen) -> Prog {
        let base = BASES[g.below(BASES.len())].to_vec();
        // the partner: some dims 1, maybe fewer leading dims
        let mut partner: Vec<usize> = base.iter().map(|&d| if g.coin() { 1 } else { d }).collect();
        let cut = g.below(partner.len() + 1);
        partner.drain(..cut);
        let n = 2 + g.below(8);
        let steps = (0..n)
            .map(|i| {
                let pool = 2 + i;
                let op = g.below(60);
                match g.below(10) {
                    0..=2 => Step::Unary(op, g.below(pool)),
                    3..=5 => Step::Binary(op, g.below(pool), g.below(pool)),
                    6 => Step::Reduce(op, g.below(4), g.below(pool)),
                    7 => Step::All(op, g.below(pool)),
                    8 => Step::Cond(g.below(pool), g.below(pool)),
                    _ => Step::Loop(g.below(pool), g.below(pool)),
                }
            })
            .collect();
        Prog {
            base,
            partner,
            dtype: if g.coin() { DType::F32 } else { DType::F64 },
            steps,
        }
    }

    fn values(&self, x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
        let mut pool = vec![x.clone(), y.clone()];
        for s in &self.steps {
            let t = match *s {
                Step::Unary(op, a) => unary(op, &pool[a])?,
                Step::Binary(op, a, b) => binary(op, &pool[a], &pool[b])?,
                Step::Reduce(op, axis, a) => match pool[a].rank() {
                    0 => reduce(op, &pool[a], &[], true)?,
                    r => reduce(op, &pool[a], &[(axis % r) as isize], true)?,
                },
                Step::All(op, a) => {
                    let axes: Vec<isize> = (0..pool[a].rank() as isize).collect();
                    reduce(op, &pool[a], &axes, false)?
                }
                Step::Cond(a, b) => {
                    let (pa, pb) = (&pool[a], &pool[b]);
                    cond(
                        &pa.sum_all()?.gt_scalar(0.0)?,
                        || pa.tanh()?.mul(pb),
                        // (the same shape in both branches)
                        || pb.add_scalar(-1.0)?.add(&pa.mul_scalar(0.0)?),
                    )?
                }
                Step::Loop(a, b) => {
                    // (the loop variable keeps its shape: `pool[a]`
                    // broadcast against `pool[b]` first)
                    let start = pool[a].add(&pool[b].mul_scalar(0.0)?)?;
                    let pb = &pool[b];
                    let (_, s) = while_loop(
                        |(i, _): &(Tensor, Tensor)| i.lt_scalar(2.0),
                        |(i, s): &(Tensor, Tensor)| Ok((i.add_scalar(1.0)?, s.tanh()?.mul(pb)?)),
                        (Tensor::scalar(0.0f64), start),
                        WhileOptions::default(),
                    )?;
                    s
                }
            };
            pool.push(t);
        }
        Ok(pool)
    }

    /// The values, and the gradient of `sum(tanh(v))` over every value
    /// with respect to both inputs, taken inside.
    fn run(&self, x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let (mut out, loss) = tape.record(|| {
            tape.watch(&(x, y));
            let vals = self.values(x, y)?;
            let mut loss = Tensor::zeros(&[], self.dtype);
            for v in &vals[2..] {
                loss = loss.add(&v.tanh()?.sum_all()?)?;
            }
            Ok((vals, loss))
        })?;
        let (gx, gy) = tape.gradient(&loss, &(x, y))?;
        out.push(loss);
        out.push(gx.unwrap_or_else(|| Tensor::zeros(x.shape(), x.dtype())));
        out.push(gy.unwrap_or_else(|| Tensor::zeros(y.shape(), y.dtype())));
        Ok(out)
    }
}

fn same(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtypes");
    let tol = if want.dtype() == DType::F32 { 2e-5 } else { 1e-11 };
    for (i, (g, w)) in got.to_vec_f64().iter().zip(want.to_vec_f64()).enumerate() {
        let ok = match (g.is_nan(), w.is_nan(), w.is_finite()) {
            (true, true, _) => true,
            (_, false, false) => g == &w,
            (false, false, true) => (g - w).abs() <= tol * (1.0 + w.abs()),
            _ => false,
        };
        assert!(ok, "{what}: element {i}: traced {g}, eager {w}");
    }
}

fn check(seed: u64) -> Result<()> {
    let mut g = Gen(seed);
    let p = Arc::new(Prog::random(&mut g));
    let label = format!("seed {seed}: {p:?}");
    let f = {
        let p = p.clone();
        function(move |(x, y): &(Tensor, Tensor)| p.run(x, y))
    };
    for call in 0..3 {
        let x = g.tensor(&p.base, p.dtype)?;
        let y = g.tensor(&p.partner, p.dtype)?;
        let got = f.call(&(x.clone(), y.clone()))?;
        let want = p.run(&x, &y)?;
        assert_eq!(got.len(), want.len(), "call {call} ({label})");
        for (i, (t, e)) in got.iter().zip(&want).enumerate() {
            same(t, e, &format!("call {call} value {i} ({label})"));
        }
    }
    assert_eq!(f.trace_count(), 1, "{label}");
    Ok(())
}

/// 300 programs (CI); `GRADTAPE_ZERO_SIZES=N` for more.
#[test]
fn zero_sizes_and_scalars_traced_match_eager() -> Result<()> {
    let n: u64 = std::env::var("GRADTAPE_ZERO_SIZES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    for seed in 0..n {
        check(0x2e50 + seed)?;
    }
    Ok(())
}

/// The reductions of nothing, traced (the TensorFlow values in the module
/// docs), the product over an empty inner dim, and `[1]` broadcast
/// against `[0]`.
#[test]
fn reductions_over_nothing_traced_give_tf_values() -> Result<()> {
    let f = function(|x: &Tensor| {
        Ok(vec![
            x.sum(&[0], false)?,
            x.mean(&[0], false)?,
            x.max(&[0], false)?,
            x.min(&[0], false)?,
            x.prod(&[0], false)?,
            x.logsumexp(&[0], false)?,
            x.mean_all()?,
            x.transpose()?.matmul(x)?,
            x.reshape(&[0])?.add(&Tensor::vector(&[1.0f32]))?,
        ])
    });
    let inf = f64::INFINITY;
    for _ in 0..2 {
        let r = f.call(&Tensor::zeros(&[0, 5], DType::F32))?;
        let v: Vec<Vec<f64>> = r.iter().map(Tensor::to_vec_f64).collect();
        assert_eq!(v[0], [0.0; 5]);
        assert!(v[1].len() == 5 && v[1].iter().all(|x| x.is_nan()), "mean: {:?}", v[1]);
        assert_eq!(v[2], [-inf; 5]);
        assert_eq!(v[3], [inf; 5]);
        assert_eq!(v[4], [1.0; 5]);
        assert_eq!(v[5], [-inf; 5]);
        assert!(v[6].len() == 1 && v[6][0].is_nan(), "mean of all: {:?}", v[6]);
        assert_eq!(r[7].shape(), &[5, 5]);
        assert_eq!(v[7], [0.0; 25]);
        assert_eq!(r[8].shape(), &[0]);
    }
    Ok(())
}
