//! The new-user models of `new_user_*.rs` as a new user would first run
//! them: float32, Keras's default initialisers, larger sizes (where the
//! compiled graph's kernels take other paths: fused chains, blocked
//! products, threads). No TensorFlow reference here: the traced training
//! step (a `function` called three times) must give what the same step
//! gives eagerly, from the same initial weights, to 2e-5 relative (a fused
//! kernel may sum in another order; each step's update is of the order of
//! its learning rate, so a difference carried through three steps stays
//! of that order). Also prints eager and traced time per step with
//! `--ignored --nocapture`.

use std::sync::{Arc, Mutex};

use gradtape::nn::{losses, Activation, Dense, Layer, Module};
use gradtape::optim::{Adam, Optimizer};
use gradtape::{function, DType, GradientTape, Result, Rng, Tensor, Variable};

use super::new_user_util::{eager_vs_traced, print_times};

pub(super) const F: DType = DType::F32;
const RTOL: f64 = 2e-5;

pub(super) fn dense(i: usize, o: usize, act: Activation, rng: &mut Rng) -> Result<Dense> {
    Dense::builder(i, o).activation(act).build(rng)
}

/// A model: its variables and one training step (loss first, then
/// whatever else it returns), the optimizer inside.
pub(super) trait Model: Send + Sync + 'static {
    fn vars(&self) -> Vec<Variable>;
    fn step(&self, data: &[Tensor]) -> Result<Vec<Tensor>>;
}

/// Random integers in `[0, n)`, i64.
pub(super) fn ints(rng: &mut Rng, shape: &[usize], n: usize) -> Result<Tensor> {
    rng.uniform(shape, 0.0, n as f64 - 1e-3, DType::F64)?
        .floor()?
        .cast(DType::I64)
}

/// Three steps eagerly and traced from equal weights: every output and
/// weight compared; returns (eager, traced) microseconds per step.
pub(super) fn differential<M: Model>(
    name: &str,
    build: impl Fn() -> Result<M>,
    data: Vec<Tensor>,
) -> Result<(f64, f64)> {
    let eager = build()?;
    let traced = Arc::new(build()?);
    let f = {
        let m = traced.clone();
        function(move |d: &Vec<Tensor>| m.step(d))
    };
    let mut bad = Vec::new();
    let mut worst = 0.0f64;
    let mut cmp = |what: String, a: &Tensor, b: &Tensor| {
        let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
        let scale = b.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-30);
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            let d = (x - y).abs() / y.abs().max(scale);
            worst = worst.max(d);
            if d > RTOL || x.is_nan() != y.is_nan() {
                bad.push(format!("{name} {what}[{i}]: eager {x}, traced {y}"));
                break;
            }
        }
    };
    for s in 1..=3 {
        let e = eager.step(&data)?;
        let t = f.call(&data)?;
        assert_eq!(e.len(), t.len());
        for (j, (a, b)) in e.iter().zip(&t).enumerate() {
            cmp(format!("step {s} output {j}"), a, b);
        }
        for (j, (a, b)) in eager.vars().iter().zip(traced.vars()).enumerate() {
            cmp(format!("step {s} weight {j} ({})", a.name()), &a.read(), &b.read());
        }
    }
    assert_eq!(f.trace_count(), 1, "{name}: retraced");
    eprintln!("{name}: traced vs eager, max relative difference {worst:.1e}");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // (NEW_USER_TIMING_STEPS=n for steadier numbers)
    let n = std::env::var("NEW_USER_TIMING_STEPS").map_or(20, |s| s.parse().unwrap_or(20));
    Ok(eager_vs_traced(
        n,
        || eager.step(&data).map(drop),
        || f.call(&data).map(drop),
    ))
}

// ---- GNN --------------------------------------------------------------------

struct Gnn {
    self_l: Dense,
    nb: Dense,
    z: Dense,
    a: Variable,
    head: Dense,
    nodes: usize,
    graphs: usize,
    opt: Mutex<Adam>,
}

impl Model for Gnn {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.self_l.variables();
        v.extend(self.nb.variables());
        v.extend(self.z.variables());
        v.push(self.a.clone());
        v.extend(self.head.variables());
        v
    }

    /// data: x, edge weights, src, dst, graph ids (sorted), targets
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let (x, ew, src, dst, gid, y) = (&d[0], &d[1], &d[2], &d[3], &d[4], &d[5]);
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let agg = x
                .gather(src, 0)?
                .mul(&ew.expand_dims(-1)?)?
                .unsorted_segment_mean(dst, self.nodes)?;
            let h1 = self.self_l.call(x)?.add(&self.nb.call(&agg)?)?.relu()?;
            let z = self.z.call(&h1)?;
            let pair = Tensor::concat(&[&z.gather(src, 0)?, &z.gather(dst, 0)?], 1)?;
            let score = pair.matmul(&self.a.read())?.leaky_relu(0.2)?;
            let mx = score.unsorted_segment_max(dst, self.nodes)?;
            let ex = score.sub(&mx.gather(dst, 0)?)?.exp()?;
            let den = ex.unsorted_segment_sum(dst, self.nodes)?;
            let alpha = ex.div(&den.gather(dst, 0)?)?;
            let out = alpha.mul(&z.gather(src, 0)?)?.unsorted_segment_sum(dst, self.nodes)?;
            let h2 = out.add(&h1)?.elu()?;
            let pooled = h2.segment_mean(gid)?;
            losses::mean_squared_error(y, &self.head.call(&pooled)?)
        })?;
        let grads = tape.gradient(&loss, &vars)?;
        self.opt.lock().unwrap().apply_gradients(grads.into_iter().zip(&vars))?;
        let _ = self.graphs;
        Ok(vec![loss])
    }
}

#[test]
fn scaled_models_traced_match_eager() -> Result<()> {
    let mut times = Vec::new();
    // GNN: 400 nodes in 8 graphs, 2400 edges, 16 -> 32 features
    let (n, e, g) = (400, 2400, 8);
    let mut rng = Rng::new(7);
    let gid: Vec<i64> = (0..n).map(|i| (i * g / n) as i64).collect();
    let data = vec![
        rng.normal(&[n, 16], 0.0, 1.0, F)?,
        rng.uniform(&[e], 0.5, 1.5, F)?,
        ints(&mut rng, &[e], n)?,
        ints(&mut rng, &[e], n)?,
        Tensor::vector(&gid),
        rng.normal(&[g, 1], 0.0, 1.0, F)?,
    ];
    let build = || {
        let rng = &mut Rng::new(1);
        Ok(Gnn {
            self_l: dense(16, 32, Activation::Linear, rng)?,
            nb: dense(16, 32, Activation::Linear, rng)?,
            z: dense(32, 32, Activation::Linear, rng)?,
            a: Variable::new(rng.normal(&[64, 1], 0.0, 0.3, F)?),
            head: dense(32, 1, Activation::Linear, rng)?,
            nodes: n,
            graphs: g,
            opt: Mutex::new(Adam::new(1e-2)),
        })
    };
    times.push((
        "gnn",
        "400 nodes, 2400 edges, 16 -> 32",
        differential("gnn", build, data)?,
    ));
    times.extend(super::new_user_scaled_more::run_all()?);
    for (name, sizes, (e, t)) in times {
        print_times(name, sizes, e, t);
    }
    Ok(())
}

// ---- the other models are in new_user_scaled_more.rs ----------------------
