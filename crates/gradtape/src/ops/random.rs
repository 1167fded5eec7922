//! Random tensors from explicit seeds, and dropout.
//!
//! The generator is counter-based: element `i` of a draw is a fixed function
//! (SplitMix64's output mixer) of the seed, a stream number and `i`, so a
//! result depends on the seed and the shape only, never on the number of
//! threads or the order in which chunks are filled.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use super::desc::{CreateOp, Distribution, DynOp, Lazy, Op, Outputs, F64};
use super::rng_state::State;
use super::unsupported;
use crate::error::{Error, Result};
use crate::kernels::cpu::build;
use crate::kernels::cpu::counter::CounterRng;
use crate::kernels::cpu::math::with_simd;
use crate::tensor::layout::checked_numel;
use crate::tensor::{with_float_dtype, DType, Element, Float, Tensor};

/// Fills a tensor of `shape` with `f(i)` for every flat index `i`; errors
/// (a shape that overflows, a buffer that cannot be allocated) name `op`.
/// Uniform values in `[lo, hi)` of a half type: drawn in `f64`, rounded,
/// and a draw that rounds up to `hi` (or below `lo`) replaced by `lo`.
fn half_uniform<T: Float>(op: &'static str, shape: &[usize], lo: f64, hi: f64, g: &CounterRng) -> Result<Tensor> {
    let (l, h) = (T::from_f64(lo), T::from_f64(hi));
    generate::<T>(op, shape, |i| {
        let v = T::from_f64(lo + g.unit(i) * (hi - lo));
        if v >= h || v < l {
            l
        } else {
            v
        }
    })
}

fn generate<T: Element>(op: &'static str, shape: &[usize], f: impl Fn(u64) -> T + Sync) -> Result<Tensor> {
    let n = checked_numel(op, shape)?;
    // (f32 and f64 compiled for the CPU's widest vectors: the counter's
    // 64-bit multiplies and conversions vectorise with AVX-512; the same
    // operations, so the same values)
    let fill = |start: usize, out: &mut [std::mem::MaybeUninit<T>]| {
        for (j, o) in out.iter_mut().enumerate() {
            o.write(f((start + j) as u64));
        }
    };
    let buf = if matches!(T::DTYPE, DType::F32 | DType::F64) {
        build::<T>(op, n, |start, out| with_simd(|| fill(start, out)))?
    } else {
        // (the other dtypes' draws, rarely hot, keep one copy)
        build::<T>(op, n, fill)?
    };
    Ok(Tensor::from_storage(T::buf_into_storage(buf), shape))
}

/// The smallest 53-bit draw `k` kept by dropout at `rate`: [`CounterRng::unit`]
/// is `k · 2⁻⁵³` exactly, so `unit >= rate` exactly when `k >= ⌈rate ·
/// 2⁵³⌉` (a product by a power of two, exact): the keep/drop decisions of
/// the float comparison, made on integers.
pub fn keep_from(rate: f64) -> u64 {
    (rate * (1u64 << 53) as f64).ceil() as u64
}

fn check_finite(op: &'static str, what: &str, v: f64) -> Result<()> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(Error::invalid(op, format!("{what} must be finite, got {v}")))
    }
}

fn float_gen<T: Float>(op: &'static str, shape: &[usize], f: impl Fn(u64) -> f64 + Sync) -> Result<Tensor> {
    generate::<T>(op, shape, |i| T::from_f64(f(i)))
}

impl Tensor {
    /// Uniform values in `[lo, hi)` of the given dtype (floats, or `i32`/`i64`
    /// where values are integers `lo <= v < hi`), reproducible from `seed`
    /// and independent of the thread count. `lo < hi` is required. A float
    /// value that rounds up to `hi` in the dtype is replaced by `lo`.
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// let a = Tensor::random_uniform(&[1000], -1.0, 1.0, DType::F32, 7)?;
    /// let b = Tensor::random_uniform(&[1000], -1.0, 1.0, DType::F32, 7)?;
    /// assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    /// assert!(a.to_vec::<f32>()?.iter().all(|&v| (-1.0..1.0).contains(&v)));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn random_uniform(shape: &[usize], lo: f64, hi: f64, dtype: DType, seed: u64) -> Result<Tensor> {
        const OP: &str = "random_uniform";
        check_finite(OP, "lo", lo)?;
        check_finite(OP, "hi", hi)?;
        if lo >= hi {
            return Err(Error::invalid(OP, format!("needs lo < hi, got lo = {lo}, hi = {hi}")));
        }
        let g = CounterRng::new(seed, 1);
        let y = match dtype {
            DType::F32 => {
                let (l, h) = (lo as f32, hi as f32);
                generate::<f32>(OP, shape, |i| {
                    let v = (lo + g.unit(i) * (hi - lo)) as f32;
                    if v >= h || v < l {
                        l
                    } else {
                        v
                    }
                })
            }
            DType::F64 => generate::<f64>(OP, shape, |i| {
                let v = lo + g.unit(i) * (hi - lo);
                if v >= hi {
                    lo
                } else {
                    v
                }
            }),
            DType::I32 | DType::I64 => {
                let (l, h) = (lo.ceil(), hi.ceil());
                let (min, max) = if dtype == DType::I32 {
                    (i32::MIN as f64, i32::MAX as f64 + 1.0)
                } else {
                    (i64::MIN as f64, i64::MAX as f64)
                };
                if l >= h || l < min || h > max {
                    return Err(Error::invalid(
                        OP,
                        format!("no {dtype} values in [{lo}, {hi}) (or the range exceeds the dtype)"),
                    ));
                }
                let span = h - l;
                let draw = move |i: u64| (l + (g.unit(i) * span).floor()).min(h - 1.0);
                if dtype == DType::I32 {
                    generate::<i32>(OP, shape, |i| draw(i) as i32)
                } else {
                    generate::<i64>(OP, shape, |i| draw(i) as i64)
                }
            }
            DType::F16 => half_uniform::<crate::tensor::f16>(OP, shape, lo, hi, &g),
            DType::BF16 => half_uniform::<crate::tensor::bf16>(OP, shape, lo, hi, &g),
            DType::Bool | DType::C64 | DType::C128 => Err(unsupported(OP, dtype, "a float dtype, i32 or i64")),
        }?;
        Ok(bound(Distribution::Uniform, shape, lo, hi, dtype, seed, y))
    }

    /// Normal values `mean + std · z` (floats), reproducible from `seed`.
    /// `std >= 0` is required.
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// let x = Tensor::random_normal(&[4, 3], 0.0, 1.0, DType::F64, 1)?;
    /// assert_eq!(x.shape(), &[4, 3]);
    /// assert_eq!(x.to_vec::<f64>()?, Tensor::random_normal(&[4, 3], 0.0, 1.0, DType::F64, 1)?.to_vec::<f64>()?);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn random_normal(shape: &[usize], mean: f64, std: f64, dtype: DType, seed: u64) -> Result<Tensor> {
        const OP: &str = "random_normal";
        check_normal(OP, mean, std, dtype)?;
        let g = CounterRng::new(seed, 2);
        let y = with_float_dtype!(dtype, T => float_gen::<T>(OP, shape, |i| mean + std * g.normal(i)), _ => unreachable!())?;
        Ok(bound(Distribution::Normal, shape, mean, std, dtype, seed, y))
    }

    /// Normal values `mean + std · z` with every `|z| > 2` redrawn (as
    /// TensorFlow's truncated normal, the usual weight initialiser), so
    /// every value lies within two standard deviations of `mean`.
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// let x = Tensor::truncated_normal(&[1000], 0.0, 1.0, DType::F32, 3)?;
    /// assert!(x.to_vec::<f32>()?.iter().all(|v| v.abs() <= 2.0));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn truncated_normal(shape: &[usize], mean: f64, std: f64, dtype: DType, seed: u64) -> Result<Tensor> {
        const OP: &str = "truncated_normal";
        check_normal(OP, mean, std, dtype)?;
        let gens: Vec<CounterRng> = (0..64).map(|a| CounterRng::new(seed, 3 + a)).collect();
        let z = move |i: u64| {
            for g in &gens {
                let z = g.normal(i);
                if z.abs() <= 2.0 {
                    return z;
                }
            }
            0.0 // 64 rejections in a row: probability below 1e-85
        };
        let y = with_float_dtype!(dtype, T => float_gen::<T>(OP, shape, |i| mean + std * z(i)), _ => unreachable!())?;
        Ok(bound(Distribution::TruncatedNormal, shape, mean, std, dtype, seed, y))
    }

    /// Dropout: each element is zeroed with probability `rate` and the kept
    /// ones are scaled by `1 / (1 − rate)`, so the expectation is unchanged.
    /// The mask is a function of `seed` and the shape only (reproducible).
    /// `rate` must lie in `[0, 1)`; floats only. Differentiable: the
    /// gradient is the cotangent times the same scaled mask.
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// let x = Tensor::ones(&[1000], DType::F32);
    /// let y = x.dropout(0.5, 42)?.to_vec::<f32>()?;
    /// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
    /// assert!(x.dropout(1.0, 42).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn dropout(&self, rate: f64, seed: u64) -> Result<Tensor> {
        const OP: &str = "dropout";
        super::expect_float(OP, self)?;
        if !(0.0..1.0).contains(&rate) {
            return Err(Error::invalid(OP, format!("rate must lie in [0, 1), got {rate}")));
        }
        if rate == 0.0 {
            return Ok(self.identity());
        }
        // (the mask is drawn on the host and moved to where `self` lives)
        self.mul(&dropout_mask(self.shape(), rate, self.dtype(), seed)?.to(self.device())?)
    }
}

/// Dropout's keep-mask: `1 / (1 - rate)` with probability `1 - rate`, else
/// 0 (`rate` in `(0, 1)`, a float dtype).
pub fn dropout_mask(shape: &[usize], rate: f64, dtype: DType, seed: u64) -> Result<Tensor> {
    const OP: &str = "dropout";
    if !dtype.is_float() {
        return Err(unsupported(OP, dtype, "f32 or f64"));
    }
    if !(0.0..1.0).contains(&rate) {
        return Err(Error::invalid(OP, format!("rate must lie in [0, 1), got {rate}")));
    }
    let g = CounterRng::new(seed, 4);
    let scale = 1.0 / (1.0 - rate);
    let keep = keep_from(rate);
    let y = with_float_dtype!(dtype, T => {
        let (kept, dropped) = (T::from_f64(scale), T::from_f64(0.0));
        generate::<T>(OP, shape, move |i| if g.bits(i) >> 11 >= keep { kept } else { dropped })
    }, _ => unreachable!())?;
    Ok(bound(Distribution::DropoutMask, shape, rate, 0.0, dtype, seed, y))
}

thread_local! {
    /// The generator whose stream the draw being made belongs to, while a
    /// trace records (see [`fresh`]).
    static FRESH: RefCell<Option<Arc<State>>> = const { RefCell::new(None) };
}

/// Runs `f`, whose seeded draw is the next of the generator `state`'s
/// stream: a trace records it as a node that takes that stream's next seed
/// at each run of the graph (TF's `tf.random.Generator` inside a
/// `tf.function`), not as a draw with a fixed seed. Outside traces it only
/// runs `f` (no allocation). Only the first draw `f` makes is the
/// stream's; any other is an explicit-seed draw.
pub(crate) fn fresh<R>(state: &Arc<State>, f: impl FnOnce() -> R) -> R {
    if !crate::dispatch::listens(crate::dispatch::Kind::Trace) {
        return f();
    }
    struct Reset(Option<Arc<State>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            FRESH.with(|c| *c.borrow_mut() = self.0.take());
        }
    }
    let _reset = Reset(FRESH.with(|c| c.borrow_mut().replace(state.clone())));
    f()
}

/// Offers a draw to the active traces: a node holding its seed (a
/// stateless draw: the same values at each run), or, inside [`fresh`], a
/// stateful node that draws the generator's next seed at each run.
fn bound(dist: Distribution, shape: &[usize], a: f64, b: f64, dtype: DType, seed: u64, y: Tensor) -> Tensor {
    let op = || CreateOp::Random {
        dist,
        shape: shape.into(),
        a: F64(a),
        b: F64(b),
        dtype,
        seed,
    };
    if let Some(state) = crate::dispatch::listens(crate::dispatch::Kind::Trace)
        .then(|| FRESH.with(|c| c.borrow_mut().take()))
        .flatten()
    {
        let node = StreamDraw { op: op(), state };
        crate::dispatch::announce(&Op::Dyn(Arc::new(node)), &[], std::slice::from_ref(&y));
        return y;
    }
    let name = op().name();
    super::bind_nondiff(Lazy(name, || Op::Create(op())), &[], y)
}

/// A draw of a generator's stream: each run takes the generator's next
/// seed (advancing it, as the eager draw did), so a traced call draws what
/// the eager call would at that point of the stream.
pub(crate) struct StreamDraw {
    op: CreateOp,
    pub(crate) state: Arc<State>,
}

impl DynOp for StreamDraw {
    fn name(&self) -> &'static str {
        self.op.name()
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let seed = self.state.next_u64();
        // (a trace that records this run, as a graph called inside another
        // function's trace, records a draw of the stream too, not one fixed
        // at the seed this run drew with)
        fresh(&self.state, || self.op.reseeded(seed).eval(inputs))
    }
    fn stateful(&self) -> bool {
        true
    }
    fn writes(&self) -> bool {
        false
    }
    fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.op.fmt_attrs(f)?;
        f.write_str("[the generator's next seed]")
    }
}

/// A random order of `0..n` (`i64` `[n]`) drawn from the generator `state`
/// (Fisher–Yates, as [`Rng::permutation`](crate::Rng::permutation)):
/// inside a trace, a node that draws it from the generator at each run.
pub(crate) fn row_order(state: &Arc<State>, n: usize) -> Result<Tensor> {
    let y = order(state, n)?;
    if crate::dispatch::listens(crate::dispatch::Kind::Trace) {
        let node = RowOrder {
            state: state.clone(),
            n,
        };
        crate::dispatch::announce(&Op::Dyn(Arc::new(node)), &[], std::slice::from_ref(&y));
    }
    Ok(y)
}

/// [`row_order`]'s values.
fn order(state: &Arc<State>, n: usize) -> Result<Tensor> {
    const OP: &str = "shuffle_rows";
    if i64::try_from(n).is_err() {
        return Err(Error::invalid(OP, format!("{n} rows do not fit i64 indices")));
    }
    let mut p: Vec<i64> = crate::tensor::alloc::try_collect(OP, (0..n).map(|i| i as i64))?;
    state.shuffle(&mut p);
    Tensor::from_vec(p, &[n])
}

/// [`row_order`]'s node.
pub(crate) struct RowOrder {
    pub(crate) state: Arc<State>,
    n: usize,
}

impl DynOp for RowOrder {
    fn name(&self) -> &'static str {
        "RandomRowOrder"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        if !inputs.is_empty() {
            return Err(Error::invalid(
                self.name(),
                format!("takes no inputs, got {}", inputs.len()),
            ));
        }
        Ok(smallvec::smallvec![order(&self.state, self.n)?])
    }
    fn stateful(&self) -> bool {
        true
    }
    fn writes(&self) -> bool {
        false
    }
    fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[n={}, the generator's next draws]", self.n)
    }
}

/// The key and counter of each of `gens` now.
pub(crate) fn snapshot(gens: &[Arc<State>]) -> Vec<(u64, u64)> {
    gens.iter().map(|g| g.get()).collect()
}

/// Runs `f` with the generators `gens` set to `at` (a [`snapshot`]), then
/// puts them back where they stood: a recomputation of a forward run (a
/// gradient of its saved values) draws what that run drew, and leaves the
/// generators as it found them.
pub(crate) fn replaying<R>(gens: &[Arc<State>], at: &[(u64, u64)], f: impl FnOnce() -> R) -> R {
    struct Back<'a>(&'a [Arc<State>], Vec<(u64, u64)>);
    impl Drop for Back<'_> {
        fn drop(&mut self) {
            for (g, &(k, c)) in self.0.iter().zip(&self.1) {
                g.set(k, c);
            }
        }
    }
    let _back = Back(gens, snapshot(gens));
    for (g, &(k, c)) in gens.iter().zip(at) {
        g.set(k, c);
    }
    f()
}

/// How traced code made a generator (see [`rng_made`]).
pub(crate) enum Made {
    /// [`Rng::new`](crate::Rng::new) from this seed
    New(u64),
    /// a clone of this generator
    Copy(Arc<State>),
    /// split off this generator (which it advances)
    Split(Arc<State>),
}

/// Notes that a generator was made: traced code that makes one makes it
/// again at each run of its graph (a node that sets its state), as the
/// eager code makes a new one at each call. Nothing outside traces.
pub(crate) fn rng_made(state: &Arc<State>, how: Made) {
    if !crate::dispatch::listens(crate::dispatch::Kind::Trace) {
        return;
    }
    let node = MakeRng {
        state: state.clone(),
        how,
    };
    // (a node has an output: an i64 scalar nothing reads, kept by the
    // passes as the output of a stateful node)
    let y = Tensor::scalar(0i64);
    crate::dispatch::announce(&Op::Dyn(Arc::new(node)), &[], std::slice::from_ref(&y));
}

/// A generator made by traced code, made again at each run.
pub(crate) struct MakeRng {
    pub(crate) state: Arc<State>,
    pub(crate) how: Made,
}

impl DynOp for MakeRng {
    fn name(&self) -> &'static str {
        "MakeRng"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        if !inputs.is_empty() {
            return Err(Error::invalid(
                self.name(),
                format!("takes no inputs, got {}", inputs.len()),
            ));
        }
        match &self.how {
            Made::New(seed) => self.state.set(super::rng_state::key_of(*seed), 0),
            Made::Copy(from) => {
                let (key, counter) = from.get();
                self.state.set(key, counter);
            }
            Made::Split(parent) => self.state.split_from(parent),
        }
        Ok(smallvec::smallvec![Tensor::scalar(0i64)])
    }
    fn stateful(&self) -> bool {
        true
    }
    fn writes(&self) -> bool {
        false
    }
    fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.how {
            Made::New(seed) => write!(f, "[seed={seed}]"),
            Made::Copy(_) => f.write_str("[a copy]"),
            Made::Split(_) => f.write_str("[split]"),
        }
    }
}

fn check_normal(op: &'static str, mean: f64, std: f64, dtype: DType) -> Result<()> {
    if !dtype.is_float() {
        return Err(unsupported(op, dtype, "f32 or f64"));
    }
    check_finite(op, "mean", mean)?;
    check_finite(op, "std", std)?;
    if std < 0.0 {
        return Err(Error::invalid(op, format!("std must be >= 0, got {std}")));
    }
    Ok(())
}

// (the mask's and the fill's bits against the scalar formulas: `tests/internals/ops_random.rs`)
