//! What the new-user model tests (`new_user_*.rs`) share: the reference
//! numbers of `tests/data/new_user_models2.txt` (written by
//! `tests/reference/new_user_models2.py`, TensorFlow 2.21.0 / Keras 3.15.1,
//! float64), the deterministic weights, and the comparison that collects
//! every difference.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use gradtape::nn::{Activation, Dense};
use gradtape::optim::Adam;
use gradtape::{function, DType, Result, Rng, Tensor, Variable};

use super::tf_util::{agrees, magnitude};

const DATA: &str = include_str!("../data/new_user_models2.txt");

/// The tolerance: both sides compute in float64 with the same formulas, so
/// they differ by accumulated roundoff only, relative to the larger of an
/// element's magnitude and its vector's largest.
pub const REL: f64 = 1e-12;

/// The least scale of a vector's roundoff: a result that is zero in exact
/// arithmetic (the GNN's attention weights' gradient for a per-destination
/// shift, which the softmax over a destination's edges ignores) is
/// roundoff of ~1e-20 on either side, compared absolutely at 1e-18.
const FLOOR: f64 = 1e-6;

/// The reference numbers of a data file by name (`None`: TensorFlow gave
/// no gradient).
fn reference(data: &'static str) -> HashMap<&'static str, Option<Vec<f64>>> {
    data.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, rest) = l.split_once(": ").expect("name: numbers");
            let v = (rest != "none").then(|| rest.split(' ').map(|x| x.parse().expect(x)).collect());
            (name, v)
        })
        .collect()
}

/// `scale · 0.5 sin(0.7 i + k)` over the row-major index `i`, in f64.
pub fn fill(shape: &[usize], k: f64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| scale * (0.5 * (0.7 * i as f64 + k).sin())).collect();
    Tensor::from_vec(v, shape).unwrap()
}

/// One training step of an image classifier: `logits()` recorded on a
/// tape, the mean sparse cross-entropy against the labels `labels` [b]
/// (i64), then [`update`]; outputs the logits and the loss, then the
/// gradients.
pub fn classifier_step<O: gradtape::optim::Optimizer>(
    vars: &[Variable],
    opt: &std::sync::Mutex<O>,
    labels: &Tensor,
    logits: impl FnOnce() -> Result<Tensor>,
) -> Result<Vec<Option<Tensor>>> {
    let tape = gradtape::GradientTape::new();
    let (logits, loss) = tape.record(|| {
        let logits = logits()?;
        let loss = Tensor::sparse_softmax_cross_entropy_with_logits(labels, &logits)?.mean_all()?;
        Ok((logits, loss))
    })?;
    update(&tape, &loss, vars, opt, vec![logits, loss.clone()])
}

/// Sets variable `j` to `fill(shape, k0 + j)`.
pub fn set_weights(vars: &[Variable], k0: f64) {
    for (j, v) in vars.iter().enumerate() {
        v.assign(&fill(&v.shape(), k0 + j as f64, 1.0)).unwrap();
    }
}

/// A float64 Dense layer.
pub fn dense(inp: usize, units: usize, act: Option<Activation>, bias: bool) -> Result<Dense> {
    let b = Dense::builder(inp, units).dtype(DType::F64).use_bias(bias);
    let rng = &mut Rng::new(0);
    match act {
        Some(a) => b.activation(a).build(rng),
        None => b.build(rng),
    }
}

/// The script's Adam: lr 2^-7, betas 0.875 and 1 - 2^-10, epsilon 2^-20.
pub fn adam() -> Adam {
    Adam::new(2f64.powi(-7))
        .betas(0.875, 1.0 - 2f64.powi(-10))
        .unwrap()
        .epsilon(2f64.powi(-20))
        .unwrap()
}

/// Compares named results with the reference, collecting differences.
pub struct Check {
    refs: HashMap<&'static str, Option<Vec<f64>>>,
    /// the least scale of a vector's roundoff (see [`FLOOR`])
    floor: f64,
    /// the relative tolerance ([`REL`] unless [`Check::tolerance`] says)
    rel: f64,
    bad: Vec<String>,
    checked: usize,
    /// the largest relative difference, per way of running
    worst: Vec<(String, f64)>,
}

impl Check {
    /// Against `tests/data/new_user_models2.txt`, with [`FLOOR`].
    pub fn new() -> Check {
        Check::with(DATA, FLOOR)
    }

    /// Against the reference numbers of `data` (a file of the same
    /// format), each vector's roundoff scaled at least by `floor`.
    pub fn with(data: &'static str, floor: f64) -> Check {
        Check {
            refs: reference(data),
            floor,
            rel: REL,
            bad: Vec::new(),
            checked: 0,
            worst: Vec::new(),
        }
    }

    /// Compares at `rel` instead of [`REL`] (float32 runs against the
    /// float64 reference).
    pub fn tolerance(mut self, rel: f64) -> Check {
        self.rel = rel;
        self
    }

    fn want(&self, name: &str) -> &Option<Vec<f64>> {
        self.refs
            .get(name)
            .unwrap_or_else(|| panic!("no reference named {name}"))
    }

    /// One result against the reference `name`.
    pub fn one(&mut self, what: &str, name: &str, got: Option<&Tensor>) {
        let want = self.want(name).clone();
        match (got, want) {
            (None, None) => self.checked += 1,
            (Some(_), None) => self
                .bad
                .push(format!("{what} {name}: a gradient where TensorFlow has none")),
            (None, Some(_)) => self.bad.push(format!("{what} {name}: no gradient")),
            (Some(t), Some(w)) => {
                let g = t.to_vec_f64();
                if g.len() != w.len() {
                    self.bad
                        .push(format!("{what} {name}: {} numbers, want {}", g.len(), w.len()));
                    return;
                }
                let scale = magnitude(&w).max(self.floor);
                for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                    self.checked += 1;
                    let d = (a - b).abs() / b.abs().max(scale);
                    match self.worst.iter_mut().find(|(w, _)| w == what) {
                        Some((_, m)) => *m = m.max(d),
                        None => self.worst.push((what.to_string(), d)),
                    }
                    if !agrees(*a, *b, self.rel, scale) {
                        self.bad.push(format!("{what} {name}[{i}]: got {a}, want {b}"));
                    }
                }
            }
        }
    }

    /// `got` against the references `names`, in order.
    pub fn all(&mut self, what: &str, names: &[String], got: &[Tensor]) {
        assert_eq!(names.len(), got.len(), "{what}: output count");
        for (n, g) in names.iter().zip(got) {
            self.one(what, n, Some(g));
        }
    }

    /// `got` against the references `names` in order, `None` for no
    /// gradient. A `got` shorter than `names` is a traced function's
    /// outputs, which leave out the gradients that do not exist: it is
    /// matched with the names whose reference is not `none`.
    pub fn all_optional(&mut self, what: &str, names: &[String], got: &[Option<Tensor>]) {
        let names: Vec<&String> = if got.len() == names.len() {
            names.iter().collect()
        } else {
            names.iter().filter(|n| self.want(n).is_some()).collect()
        };
        assert_eq!(names.len(), got.len(), "{what}: output count");
        for (n, g) in names.into_iter().zip(got) {
            self.one(what, n, g.as_ref());
        }
    }

    /// Variable `j` against `{prefix}{j}`.
    pub fn vars(&mut self, what: &str, prefix: &str, vars: &[Variable]) {
        for (j, v) in vars.iter().enumerate() {
            self.one(what, &format!("{prefix}{j}"), Some(&v.read()));
        }
    }

    /// Fails on any difference, or when fewer than `min` numbers were
    /// compared; prints the largest relative difference per way of running.
    pub fn finish(self, model: &str, min: usize) {
        let worst: Vec<String> = self.worst.iter().map(|(w, d)| format!("{w} {d:.1e}")).collect();
        eprintln!(
            "{model}: {} numbers, max relative difference: {}",
            self.checked,
            worst.join(", ")
        );
        super::tf_util::report(self.checked, min, &self.bad);
    }
}

/// `{prefix}_{s}` for the scalars, then `{prefix}_{g}{j}` for `j < n`.
pub fn names(prefix: &str, scalars: &[&str], grads: &[(&str, usize)]) -> Vec<String> {
    let mut v: Vec<String> = scalars.iter().map(|s| format!("{prefix}_{s}")).collect();
    for (g, n) in grads {
        v.extend((0..*n).map(|j| format!("{prefix}_{g}{j}")));
    }
    v
}

/// Unwraps gradients that must all exist.
pub fn all_some(grads: Vec<Option<Tensor>>, what: &str) -> Vec<Tensor> {
    grads
        .into_iter()
        .enumerate()
        .map(|(j, g)| g.unwrap_or_else(|| panic!("{what}: no gradient for variable {j}")))
        .collect()
}

/// The median wall time per call of `eager` and of `traced`, in
/// microseconds, over `n` calls of each after one warm-up call each (which
/// traces the traced step); the calls alternate, so that the load of a
/// shared machine falls on both alike.
pub fn eager_vs_traced(
    n: usize,
    mut eager: impl FnMut() -> Result<()>,
    mut traced: impl FnMut() -> Result<()>,
) -> (f64, f64) {
    eager().unwrap();
    traced().unwrap();
    let (mut e, mut t) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        for (f, v) in [
            (&mut eager as &mut dyn FnMut() -> Result<()>, &mut e),
            (&mut traced, &mut t),
        ] {
            let start = Instant::now();
            f().unwrap();
            v.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (median(&mut e), median(&mut t))
}

/// Prints one model's eager and traced times per step.
pub fn print_times(model: &str, sizes: &str, eager: f64, traced: f64) {
    eprintln!(
        "timing {model} ({sizes}): eager {eager:.0} us/step, traced {traced:.0} us/step, traced/eager {:.2}",
        traced / eager
    );
}

/// A model of `new_user_models3.py`: built at a dtype, its trainable
/// weights in the script's order, and one training step on `data` that
/// returns the step's outputs, then the gradients (the optimizer inside).
pub trait Stepper: Send + Sync + 'static {
    fn vars(&self) -> Vec<Variable>;
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>>;
}

/// The end of a [`Stepper::step`]: the gradients of `loss` on `tape`
/// w.r.t. `vars`, applied by `opt`, and the step's outputs `outs`
/// followed by the gradients.
pub fn update<O: gradtape::optim::Optimizer>(
    tape: &gradtape::GradientTape,
    loss: &Tensor,
    vars: &[Variable],
    opt: &std::sync::Mutex<O>,
    outs: Vec<Tensor>,
) -> Result<Vec<Option<Tensor>>> {
    let grads = tape.gradient(loss, vars)?;
    opt.lock()
        .unwrap()
        .apply_gradients(grads.clone().into_iter().zip(vars))?;
    Ok(outs.into_iter().map(Some).chain(grads).collect())
}

/// Sets variable `j` to `fill(shape, k0 + j)`, plus 1 where `j` is in
/// `ones` (normalisation scales), cast to the variable's dtype.
pub fn set_weights_as(vars: &[Variable], k0: f64, ones: &[usize]) {
    for (j, v) in vars.iter().enumerate() {
        let one = if ones.contains(&j) { 1.0 } else { 0.0 };
        let w = fill(&v.shape(), k0 + j as f64, 1.0).add_scalar(one).unwrap();
        v.assign(&w.cast(v.dtype()).unwrap()).unwrap();
    }
}

/// The four ways a model of `new_user_models3.py` runs: eager and traced,
/// float64 and float32.
pub struct Runs<M> {
    /// (label, model) after its two steps
    pub models: Vec<(String, Arc<M>)>,
}

/// Two training steps of the model `build` makes, from fresh weights each
/// way: eagerly, and as a traced `function` called twice (one trace), in
/// float64 (checked by `c64`) and float32 (`data`'s floating tensors cast;
/// checked by `c32`). Each step's outputs `{name}{s}_{out}` and gradients
/// `{name}{s}_grad{j}`, then the weights `{name}_weight{j}`.
pub fn train_both<M: Stepper>(
    c64: &mut Check,
    c32: &mut Check,
    name: &str,
    outs: &[&str],
    build: impl Fn(DType) -> Result<M>,
    data: &[Tensor],
) -> Result<Runs<M>> {
    train_steps(c64, c32, name, outs, build, data, 2)
}

/// [`train_both`] for `steps` steps.
pub fn train_steps<M: Stepper>(
    c64: &mut Check,
    c32: &mut Check,
    name: &str,
    outs: &[&str],
    build: impl Fn(DType) -> Result<M>,
    data: &[Tensor],
    steps: usize,
) -> Result<Runs<M>> {
    let mut models = Vec::new();
    for dtype in [DType::F64, DType::F32] {
        let data: Vec<Tensor> = data
            .iter()
            .map(|t| {
                if t.dtype().is_float() {
                    t.cast(dtype)
                } else {
                    Ok(t.clone())
                }
            })
            .collect::<Result<_>>()?;
        for traced in [false, true] {
            let what = format!("{} {dtype:?}", if traced { "traced" } else { "eager" });
            let check = if dtype == DType::F64 { &mut *c64 } else { &mut *c32 };
            let m = Arc::new(build(dtype)?);
            let f = {
                let m = m.clone();
                function(move |d: &Vec<Tensor>| Ok(m.step(d)?.into_iter().flatten().collect::<Vec<_>>()))
            };
            let n = m.vars().len();
            for s in 1..=steps {
                let got = if traced {
                    f.call(&data)?.into_iter().map(Some).collect()
                } else {
                    m.step(&data)?
                };
                check.all_optional(&what, &names(&format!("{name}{s}"), outs, &[("grad", n)]), &got);
            }
            if traced {
                assert_eq!(f.trace_count(), 1, "{name} {what}: traced more than once");
            }
            check.vars(&what, &format!("{name}_weight"), &m.vars());
            models.push((what, m));
        }
    }
    Ok(Runs { models })
}
