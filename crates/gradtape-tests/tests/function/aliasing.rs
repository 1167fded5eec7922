//! Traced functions against eager where a graph compiler reuses memory:
//! results that must keep their values across later calls, inputs that
//! must keep theirs, and outputs that alias inputs, captured constants,
//! variables' values, views of them and each other.
//!
//! The executor of compiled graphs moves a value out at its last reader,
//! lets a fused kernel write its output over an input's buffer that
//! nothing else holds, and keeps the tensors a run drops (and the results
//! the caller has dropped since) for the next run (`compile/exec.rs`,
//! `tensor/recycle.rs`). None of that may be visible: a tensor a caller
//! holds, or holds a view of, never changes. Seeded random programs of
//! elementwise chains (fused, written in place), views (reshape,
//! transpose, slice, reverse), reductions broadcast back, and a variable
//! read before and after a write, return a random selection of those
//! values *and* of the aliases (an input passed through, a captured
//! constant, a view of an input or of the variable, the same value twice,
//! the variable's value read before the write). Each program is called on
//! several inputs (the same tensor for both arguments too, and the first
//! inputs again), eagerly on a twin variable alongside; every call's
//! results must equal eager's (within rounding: the same element
//! functions, in another order only in sums), and every tensor returned
//! earlier, every view of one whose handle was dropped, and every input
//! must still hold the bits it had.
//!
//! Expected values are the closure run eagerly (itself checked against
//! TensorFlow elsewhere); TensorFlow has the same semantics here (a
//! `tf.function`'s results are new tensors; `v.read_value()` before
//! `v.assign_add` returns the old value under automatic control
//! dependencies).

use std::sync::Arc;

use gradtape::{cond, function, while_loop, DType, GradientTape, Result, Rng, Tensor, Variable, WhileOptions};

/// One step of a random program over a pool of `[r, c]` values (the
/// pool starts with the two inputs, the variable's value and a captured
/// constant).
#[derive(Clone, Copy, Debug)]
enum Step {
    Unary(u8, usize),
    Binary(u8, usize, usize),
    /// an elementwise op on a non-contiguous view, back to `[r, c]`
    Viewed(u8, usize),
    /// a row or column sum broadcast back against a value
    Reduce(bool, usize, usize),
    /// the variable's value read here (after any write before it)
    ReadVar,
    /// `pool[a] @ (pool[b]ᵀ pool[b]) / 8`: products, one with a transposed
    /// operand (adjacent independent ones run as pairs, on two threads)
    Product(usize, usize),
    /// `cond(sum(pool[a]) > 0, (pool[b], tanh(pool[c])), (pool[c], -pool[b]))`:
    /// branches passing captured values through
    Cond(usize, usize, usize),
    /// three turns of `(s, t) -> (tanh(s) + t / 2, t)`: a loop variable
    /// passed through
    Loop(usize, usize),
    /// a call of another traced function ([`inner_body`]) on `pool[a]`,
    /// `pool[b]`: its chain's value, and its first argument passed
    /// through
    Call(usize, usize),
}

/// The body of the function that programs call (traced, from the traced
/// program; as a plain closure from the eager one): an argument passed
/// through (twice), a fused chain, a view's round trip.
fn inner_body(x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    Ok(vec![
        x.clone(),
        x.tanh()?.add(y)?.mul_scalar(0.5)?,
        y.transpose()?.transpose()?,
        x.clone(),
    ])
}

/// How a program calls [`inner_body`].
type Inner<'a> = &'a dyn Fn(&Tensor, &Tensor) -> Result<Vec<Tensor>>;

/// What a program returns, besides its last value.
#[derive(Clone, Copy, Debug)]
enum Out {
    Pool(usize),
    /// the first or the second input itself
    Input(bool),
    Captured,
    /// a constant made inside the closure
    Made,
    InputReshaped,
    InputTransposed,
    InputSliced,
    InputReversed,
    PoolTransposed(usize),
    VarRead,
    VarTransposed,
    /// a pool value, twice
    Twice(usize),
}

#[derive(Clone, Debug)]
struct Program {
    rows: usize,
    cols: usize,
    dtype: DType,
    steps: Vec<Step>,
    outs: Vec<Out>,
    /// `v.assign_add(tanh(pool[k]) / 4)` (or `assign` when the flag is set)
    /// after the steps, and further reads after it
    write: Option<(usize, bool)>,
    reads_after: usize,
}

fn unary(op: u8, a: &Tensor) -> Result<Tensor> {
    match op % 7 {
        0 => a.neg(),
        1 => a.tanh(),
        2 => a.sin(),
        3 => a.mul_scalar(0.5)?.add_scalar(0.25),
        4 => a.sigmoid(),
        5 => a.relu(),
        _ => a.square()?.tanh(),
    }
}

fn binary(op: u8, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match op % 5 {
        0 => a.add(b),
        1 => a.sub(b),
        2 => a.mul(b)?.tanh(),
        3 => a.maximum(b),
        _ => a.minimum(b)?.mul_scalar(1.5),
    }
}

fn viewed(op: u8, a: &Tensor) -> Result<Tensor> {
    let [r, c] = [a.shape()[0], a.shape()[1]];
    match op % 4 {
        0 => a.transpose()?.neg()?.transpose(),
        1 => a.reshape(&[c, r])?.sin()?.reshape(&[r, c]),
        2 => a.reverse(&[0])?.mul(a),
        _ => a.roll(&[1], &[1])?.add(a),
    }
}

impl Program {
    fn random(rng: &mut Rng) -> Program {
        let big = rng.below(8) == 0;
        let (rows, cols) = match big {
            // (past the threaded kernels' and `remat`'s thresholds)
            true => (256 + rng.below(60) as usize, 260 + rng.below(30) as usize),
            false => (3 + rng.below(6) as usize, 3 + rng.below(6) as usize),
        };
        let dtype = if rng.below(3) == 0 { DType::F32 } else { DType::F64 };
        let n_steps = 2 + rng.below(9) as usize;
        let mut steps = Vec::new();
        // the pool's size: the inputs, the variable's value, the constant,
        // then one value per step (two for `Cond` and `Loop`)
        let mut pool = 4;
        for _ in 0..n_steps {
            let pick = |rng: &mut Rng| rng.below(pool as u64) as usize;
            let op = rng.below(251) as u8;
            let step = match rng.below(15) {
                0..=3 => Step::Unary(op, pick(rng)),
                4..=6 => Step::Binary(op, pick(rng), pick(rng)),
                7 => Step::Viewed(op, pick(rng)),
                8 => Step::Reduce(rng.below(2) == 0, pick(rng), pick(rng)),
                9 => Step::ReadVar,
                10 | 11 => Step::Product(pick(rng), pick(rng)),
                12 => Step::Cond(pick(rng), pick(rng), pick(rng)),
                13 => Step::Loop(pick(rng), pick(rng)),
                _ => Step::Call(pick(rng), pick(rng)),
            };
            pool += if matches!(step, Step::Cond(..) | Step::Loop(..) | Step::Call(..)) {
                2
            } else {
                1
            };
            steps.push(step);
        }
        let write = (rng.below(3) != 0).then(|| (rng.below(pool as u64) as usize, rng.below(2) == 0));
        let reads_after = if write.is_some() { rng.below(3) as usize } else { 0 };
        let n_outs = 1 + rng.below(5) as usize;
        let outs = (0..n_outs)
            .map(|_| {
                let k = rng.below(pool as u64) as usize;
                match rng.below(12) {
                    0 => Out::Pool(k),
                    1 => Out::Input(rng.below(2) == 0),
                    2 => Out::Captured,
                    3 => Out::Made,
                    4 => Out::InputReshaped,
                    5 => Out::InputTransposed,
                    6 => Out::InputSliced,
                    7 => Out::InputReversed,
                    8 => Out::PoolTransposed(k),
                    9 => Out::VarRead,
                    10 => Out::VarTransposed,
                    _ => Out::Twice(k),
                }
            })
            .collect();
        Program {
            rows,
            cols,
            dtype,
            steps,
            outs,
            write,
            reads_after,
        }
    }

    /// Runs the program (eagerly, or while traced) on `x`, `y`, the
    /// variable `v` and the captured constant `c`.
    fn run(&self, x: &Tensor, y: &Tensor, v: &Variable, c: &Tensor, inner: Inner<'_>) -> Result<Vec<Tensor>> {
        let first_read = v.read();
        let mut pool = vec![x.clone(), y.clone(), first_read.clone(), c.clone()];
        for s in &self.steps {
            let t = match *s {
                Step::Unary(op, a) => unary(op, &pool[a])?,
                Step::Binary(op, a, b) => binary(op, &pool[a], &pool[b])?,
                Step::Viewed(op, a) => viewed(op, &pool[a])?,
                Step::Reduce(rows, a, b) => {
                    let axis = if rows { 0 } else { 1 };
                    pool[a].sum(&[axis], true)?.mul_scalar(0.125)?.add(&pool[b])?.tanh()?
                }
                Step::ReadVar => v.read().mul_scalar(0.75)?,
                Step::Product(a, b) => {
                    let square = pool[b].transpose()?.matmul(&pool[b])?.mul_scalar(0.125)?;
                    pool[a].matmul(&square)?
                }
                Step::Cond(a, b, c) => {
                    let (pb, pc) = (&pool[b], &pool[c]);
                    let (s, t) = cond(
                        &pool[a].sum_all()?.gt_scalar(0.0)?,
                        || Ok((pb.clone(), pc.tanh()?)),
                        || Ok((pc.clone(), pb.neg()?)),
                    )?;
                    pool.push(s);
                    t
                }
                Step::Loop(a, b) => {
                    let start = (Tensor::zeros(&[], DType::F64), pool[a].clone(), pool[b].clone());
                    let (_, s, t) = while_loop(
                        |(i, _, _): &(Tensor, Tensor, Tensor)| i.lt_scalar(3.0),
                        |(i, s, t): &(Tensor, Tensor, Tensor)| {
                            Ok((i.add_scalar(1.0)?, s.tanh()?.add(&t.mul_scalar(0.5)?)?, t.clone()))
                        },
                        start,
                        WhileOptions::default(),
                    )?;
                    pool.push(s);
                    t
                }
                Step::Call(a, b) => {
                    let o = inner(&pool[a], &pool[b])?;
                    pool.push(o[1].clone());
                    o[3].clone()
                }
            };
            pool.push(t);
        }
        let mut after = Vec::new();
        if let Some((k, plain)) = self.write {
            // (bounded: the variable grows by a quarter at most per call)
            let delta = pool[k].tanh()?.mul_scalar(0.25)?;
            match plain {
                true => v.assign(&delta)?,
                false => v.assign_add(&delta)?,
            }
            for i in 0..self.reads_after {
                after.push(v.read().add_scalar(i as f64)?);
            }
        }
        let (r, cols) = (self.rows, self.cols);
        let mut outs = Vec::new();
        for o in &self.outs {
            match *o {
                Out::Pool(k) => outs.push(pool[k].clone()),
                Out::Input(first) => outs.push(if first { x.clone() } else { y.clone() }),
                Out::Captured => outs.push(c.clone()),
                Out::Made => outs.push(Tensor::full(&[r, cols], 1.5, self.dtype)),
                Out::InputReshaped => outs.push(x.reshape(&[r * cols])?),
                Out::InputTransposed => outs.push(x.transpose()?),
                Out::InputSliced => outs.push(y.slice(&[1, 0], &[r - 1, cols])?),
                Out::InputReversed => outs.push(x.reverse(&[1])?),
                Out::PoolTransposed(k) => outs.push(pool[k].transpose()?),
                Out::VarRead => outs.push(first_read.clone()),
                Out::VarTransposed => outs.push(first_read.transpose()?),
                Out::Twice(k) => {
                    outs.push(pool[k].clone());
                    outs.push(pool[k].clone());
                }
            }
        }
        outs.push(pool.last().expect("the pool is never empty").clone());
        outs.extend(after);
        Ok(outs)
    }
}

/// The bits of a tensor's elements (`f32` widened exactly), NaNs alike.
pub(super) fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64()
        .iter()
        .map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() })
        .collect()
}

/// A deterministic generator (SplitMix64) for the seeded tests of this
/// binary's modules.
pub(super) struct Gen(pub u64);

impl Gen {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n`.
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(super) fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
    /// A tensor of values in `[-2, 2)` (multiples of 1/64: exact in f32).
    pub(super) fn tensor(&mut self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let n = shape.iter().product::<usize>();
        let v: Vec<f64> = (0..n).map(|_| (self.below(256) as f64 - 128.0) / 64.0).collect();
        Tensor::from_vec(v, shape)?.cast(dtype)
    }
}

/// A tensor and its bits when it was made, to check later that no run
/// wrote its buffer.
pub(super) struct Kept {
    what: String,
    pub(super) t: Tensor,
    bits: Vec<u64>,
}

impl Kept {
    pub(super) fn new(what: impl Into<String>, t: &Tensor) -> Kept {
        Kept {
            what: what.into(),
            t: t.clone(),
            bits: bits(t),
        }
    }
    pub(super) fn check(&self, when: &str) {
        assert!(
            bits(&self.t) == self.bits,
            "{} changed {when}: now {:?}, was {:?}",
            self.what,
            self.t.to_vec_f64(),
            self.bits.iter().map(|&b| f64::from_bits(b)).collect::<Vec<_>>()
        );
    }
}

fn close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtypes");
    // (products may add in another order traced: within rounding of the
    // value's scale)
    let tol = if want.dtype() == DType::F32 { 1e-5 } else { 1e-12 };
    let finite = want.to_vec_f64().into_iter().filter(|v| v.is_finite());
    let scale = finite.fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.to_vec_f64().iter().zip(want.to_vec_f64()).enumerate() {
        // (NaN where eager has NaN, the same infinities)
        let ok = match w.is_finite() {
            true => (g - w).abs() <= tol * scale,
            false => *g == w || (g.is_nan() && w.is_nan()),
        };
        assert!(ok, "{what}: element {i}: traced {g}, eager {w}");
    }
}

/// Runs `n` seeded programs; each is called five times (new inputs, the
/// same tensor as both arguments, the first inputs again), keeping every
/// result, a view of some whose handles are dropped, and the inputs, all
/// checked for their bits after the last call.
fn campaign(seed: u64, n: usize) -> Result<()> {
    let mut rng = Rng::new(seed);
    for case in 0..n {
        let p = Arc::new(Program::random(&mut rng));
        let what = |call: usize| format!("seed {seed} program {case} call {call}: {p:?}");
        let (r, c, dt) = (p.rows, p.cols, p.dtype);
        let init = rng.uniform(&[r, c], -1.5, 1.5, dt)?;
        let v_traced = Variable::new(init.clone());
        let v_eager = Variable::new(init);
        let captured = rng.uniform(&[r, c], -1.0, 1.0, dt)?;
        let inner_f = Arc::new(function(|(x, y): &(Tensor, Tensor)| inner_body(x, y)));
        let f = {
            let (p, v, c) = (p.clone(), v_traced.clone(), captured.clone());
            function(move |(x, y): &(Tensor, Tensor)| {
                p.run(x, y, &v, &c, &|a: &Tensor, b: &Tensor| {
                    inner_f.call(&(a.clone(), b.clone()))
                })
            })
        };
        let a = rng.uniform(&[r, c], -2.0, 2.0, dt)?;
        let b = rng.uniform(&[r, c], -2.0, 2.0, dt)?;
        let d = rng.uniform(&[r, c], -2.0, 2.0, dt)?;
        if std::env::var("GRADTAPE_ALIAS_ONLY").is_ok_and(|o| o != case.to_string()) {
            continue;
        }
        let inputs = [
            (a.clone(), b.clone()),
            (d.clone(), a.clone()),
            (b.clone(), b.clone()),
            (a.clone(), b.clone()),
            (d.clone(), d.clone()),
        ];
        let held_inputs: Vec<Kept> = [&a, &b, &d, &captured]
            .iter()
            .enumerate()
            .map(|(i, t)| Kept::new(format!("seed {seed} program {case}: input {i}"), t))
            .collect();
        // (results kept, with their bits; views of results whose handles go)
        let mut kept: Vec<Kept> = Vec::new();
        for (call, (x, y)) in inputs.iter().enumerate() {
            // calls 1 and 3 under a tape (the call's forward split keeps
            // values for its gradient): the gradients too
            let taped = call % 2 == 1;
            let (traced, eager) = match taped {
                true => (
                    with_gradients(x, y, |x, y| f.call(&(x.clone(), y.clone())))?,
                    with_gradients(x, y, |x, y| p.run(x, y, &v_eager, &captured, &inner_body))?,
                ),
                false => (
                    f.call(&(x.clone(), y.clone()))?,
                    p.run(x, y, &v_eager, &captured, &inner_body)?,
                ),
            };
            assert_eq!(traced.len(), eager.len(), "{}: result count", what(call));
            for (i, (t, e)) in traced.iter().zip(&eager).enumerate() {
                close(t, e, &format!("{} result {i}", what(call)));
            }
            close(
                &v_traced.read(),
                &v_eager.read(),
                &format!("{}: the variable after the call", what(call)),
            );
            for (i, t) in traced.into_iter().enumerate() {
                let label = format!("{} result {i}", what(call));
                match (call + i) % 3 {
                    // kept as returned
                    0 => kept.push(Kept::new(label, &t)),
                    // a view kept, the result's own handle dropped
                    1 if t.rank() == 2 => {
                        let view = t.transpose()?;
                        kept.push(Kept::new(format!("{label} (a view of it)"), &view));
                    }
                    // dropped: its memory may serve the next call
                    _ => {}
                }
            }
        }
        for k in kept.iter().chain(&held_inputs) {
            k.check(&format!("by later calls: {p:?}"));
        }
    }
    Ok(())
}

/// `run(x, y)` under a persistent tape watching both, its results then
/// the gradients of `sum(tanh(result))` over all results with respect to
/// `x` and `y` (zeros where none).
fn with_gradients(
    x: &Tensor,
    y: &Tensor,
    run: impl FnOnce(&Tensor, &Tensor) -> Result<Vec<Tensor>>,
) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let (mut outs, loss) = tape.record(|| {
        tape.watch(&(x, y));
        let outs = run(x, y)?;
        let mut loss = Tensor::zeros(&[], x.dtype());
        for o in &outs {
            loss = loss.add(&o.tanh()?.sum_all()?)?;
        }
        Ok((outs, loss))
    })?;
    let (gx, gy) = tape.gradient(&loss, &(x, y))?;
    outs.push(gx.unwrap_or_else(|| Tensor::zeros(x.shape(), x.dtype())));
    outs.push(gy.unwrap_or_else(|| Tensor::zeros(y.shape(), y.dtype())));
    Ok(outs)
}

/// 150 programs (CI) from seed 61; `GRADTAPE_ALIAS_PROGRAMS=N
/// GRADTAPE_ALIAS_SEED=S` for a campaign, `GRADTAPE_ALIAS_ONLY=K` to rerun
/// program `K` of one alone.
#[test]
fn results_and_inputs_keep_their_values_across_calls() -> Result<()> {
    let n = std::env::var("GRADTAPE_ALIAS_PROGRAMS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let seed = std::env::var("GRADTAPE_ALIAS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(61);
    campaign(seed, n)
}

/// One program (no writes) called from four threads at once, twenty
/// times each on inputs of their own: a call that finds the graph's
/// memory busy runs in memory of its own, and no call's results are
/// another's.
#[test]
fn concurrent_calls_keep_their_own_results() -> Result<()> {
    let mut rng = Rng::new(62);
    for case in 0..12 {
        let mut p = Program::random(&mut rng);
        p.write = None;
        p.reads_after = 0;
        let p = Arc::new(p);
        let (r, c, dt) = (p.rows, p.cols, p.dtype);
        let v = Variable::new(rng.uniform(&[r, c], -1.5, 1.5, dt)?);
        let captured = rng.uniform(&[r, c], -1.0, 1.0, dt)?;
        let inner_f = Arc::new(function(|(x, y): &(Tensor, Tensor)| inner_body(x, y)));
        let f = Arc::new({
            let (p, v, c) = (p.clone(), v.clone(), captured.clone());
            function(move |(x, y): &(Tensor, Tensor)| {
                p.run(x, y, &v, &c, &|a: &Tensor, b: &Tensor| {
                    inner_f.call(&(a.clone(), b.clone()))
                })
            })
        });
        // (traced once, before the threads, on two tensors: one tensor
        // passed twice would be a trace of its own, see `shared_args`)
        let x0 = rng.uniform(&[r, c], -2.0, 2.0, dt)?;
        f.call(&(x0.clone(), x0.add_scalar(1.0)?))?;
        let mut work = Vec::new();
        for _ in 0..4 {
            let (x, y) = (
                rng.uniform(&[r, c], -2.0, 2.0, dt)?,
                rng.uniform(&[r, c], -2.0, 2.0, dt)?,
            );
            let want = p.run(&x, &y, &v, &captured, &inner_body)?;
            work.push((x, y, want));
        }
        std::thread::scope(|s| {
            for (t, (x, y, want)) in work.iter().enumerate() {
                let f = f.clone();
                let p = &p;
                s.spawn(move || {
                    let mut kept: Vec<Vec<Tensor>> = Vec::new();
                    for k in 0..20 {
                        let got = f.call(&(x.clone(), y.clone())).expect("the call runs");
                        for (i, (g, w)) in got.iter().zip(want).enumerate() {
                            close(g, w, &format!("case {case} thread {t} call {k} result {i}: {p:?}"));
                        }
                        kept.push(got);
                    }
                    for (k, got) in kept.iter().enumerate() {
                        for (i, (g, w)) in got.iter().zip(want).enumerate() {
                            close(
                                g,
                                w,
                                &format!("case {case} thread {t}: result {i} of call {k}, kept: {p:?}"),
                            );
                        }
                    }
                });
            }
        });
        assert_eq!(f.trace_count(), 1);
    }
    Ok(())
}

/// A function with a `None` batch dim (one graph checked per new size, see
/// `FunctionOptions::input_signature`), called at sizes that come back:
/// every call equals eager and every result kept (the input passed
/// through, a view of it, a row of the variable broadcast) keeps its bits
/// while calls at other sizes run.
#[test]
fn results_keep_their_values_across_calls_of_other_sizes() -> Result<()> {
    let mut rng = Rng::new(63);
    for case in 0..20 {
        let cols = 3 + rng.below(5) as usize;
        let ops: Arc<Vec<u8>> = Arc::new((0..6).map(|_| rng.below(251) as u8).collect());
        let v = Variable::new(rng.uniform(&[1, cols], -1.0, 1.0, DType::F64)?);
        let row = rng.uniform(&[1, cols], -1.0, 1.0, DType::F64)?;
        let body = {
            let (ops, v, row) = (ops.clone(), v.clone(), row.clone());
            move |x: &Tensor| -> Result<Vec<Tensor>> {
                let mut h = x.add(&row)?;
                for (i, &op) in ops.iter().enumerate() {
                    h = match i % 3 {
                        0 => unary(op, &h)?,
                        1 => binary(op, &h, &v.read())?,
                        _ => h.add(&h.mean(&[0], true)?)?,
                    };
                }
                Ok(vec![
                    h.clone(),
                    x.clone(),
                    x.transpose()?,
                    v.read().add(&h.sum(&[0], true)?)?,
                    h,
                ])
            }
        };
        let opts = gradtape::FunctionOptions {
            input_signature: Some(vec![gradtape::TensorSpec::new(DType::F64, &[None, Some(cols)])]),
            ..Default::default()
        };
        let f = gradtape::Function::with_options(body.clone(), opts);
        let mut kept: Vec<Kept> = Vec::new();
        for (k, n) in [3usize, 5, 3, 9, 5, 1, 9].into_iter().enumerate() {
            let x = rng.uniform(&[n, cols], -2.0, 2.0, DType::F64)?;
            kept.push(Kept::new(format!("case {case}: the input of call {k}"), &x));
            let got = f.call(&x)?;
            for (i, (g, w)) in got.iter().zip(&body(&x)?).enumerate() {
                close(
                    g,
                    w,
                    &format!("case {case} call {k} (batch {n}) result {i}: ops {ops:?}"),
                );
                kept.push(Kept::new(format!("case {case} call {k} (batch {n}) result {i}"), g));
            }
            for s in &kept {
                s.check(&format!("after call {k}"));
            }
        }
    }
    Ok(())
}
