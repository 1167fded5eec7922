//! Forward mode: [`ForwardAccumulator`], after `tf.autodiff.ForwardAccumulator`
//! (the helpers [`jvp`](crate::jvp), [`hvp`](crate::hvp) and
//! [`hessian`](crate::hessian) are in `forward_helpers`).
//!
//! An accumulator maps the ids of the tensors it watches (*primals*) to their
//! *tangents*. While it is active, every op bound through the dispatch layer
//! with an input that has a tangent gets an output tangent, the
//! Jacobian-vector product `J · t` of the op:
//!
//! - by the op's own JVP rule where it has one (`bind_jvp`: elementwise ops,
//!   matmul, sum, shape ops, ...), written with public differentiable ops;
//! - else from its VJP rule by the *double-VJP* construction: the VJP rule is
//!   linear in the cotangent `u`, so with `u` a watched zero on an inner
//!   tape, `vjp(u) = Jᵀ u`, and the gradient of `Σ ⟨vjp(u)ᵢ, tᵢ⟩` w.r.t.
//!   `u` is `J t`.
//!
//! **Complex primals**: a tangent of a complex tensor is the complex
//! direction `dz`. The holomorphic ops (`exp`, `sqrt`, `sin`, `pow`, ...)
//! have JVP rules `f'(z)·dz`; the others (`conj`, `real`, `imag`, `abs`,
//! `angle`, `complex`) get theirs from their VJP rule, which in TensorFlow's
//! convention is the adjoint of the real-linear map `dz ↦ df` for the real
//! inner product `Re Σ conj(a)·b`, so the double-VJP gives that real-linear
//! map itself (`conj(dz)` for `conj`, `Re(conj(z)·dz)/|z|` for `abs`), as
//! TensorFlow's `ForwardAccumulator` does.
//!
//! The active accumulators form a thread-local stack beside the tape stack.
//! The rule of an op is built at most once, by the dispatch layer's `Call`,
//! and shared by the tapes and the accumulators.
//!
//! **Nesting** (as in TensorFlow): tapes and accumulators are ordered by when
//! they were last entered. An accumulator computes its tangents with itself,
//! the accumulators entered after it and the tapes entered after it hidden,
//! so its tangent computations are seen by the accumulators and tapes
//! *outside* it only. Hence nested accumulators give higher derivatives
//! (`outer.jvp(inner.jvp(y))`), a tape outside an accumulator can
//! differentiate a tangent (reverse over forward), and an accumulator outside
//! a tape differentiates the tape's backward pass (forward over reverse, a
//! Hessian-vector product) while that tape keeps none of the tangents. An
//! accumulator never sees its own tangent computations.
//!
//! **Pausing**: [`ForwardAccumulator::stop_recording`] pauses one
//! accumulator; [`GradientTape::stop_recording`] pauses the tape and forward
//! mode altogether (TensorFlow's `stop_recording` pauses backprop and
//! forwardprop).
//!
//! **Memory**: each tangent is held beside a weak handle of its primal;
//! entries whose primal died are swept whenever the map has doubled since the
//! last sweep, and dropping the accumulator frees every tangent.
//!
//! Forward mode is an interpreter of the dispatch layer (`crate::dispatch`):
//! it registers itself there when an accumulator is first entered and
//! listens while one is visible. Ops with several outputs (bound with
//! `dispatch::bind_untraced`) get their tangents by the double-VJP
//! construction.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use rustc_hash::FxHashMap;
use smallvec::{smallvec, SmallVec};

use crate::autodiff::backprop::Unconnected;
use crate::autodiff::gradient_tape::{GradientOptions, GradientTape};
use crate::autodiff::sources::{SourceRef, Sources};
use crate::autodiff::tape;
use crate::dispatch::{self, Call, Interpreter, Kind, Operands, VjpFn};
use crate::error::{Error, Result};
use crate::tensor::{Tensor, TensorId, WeakTensor};

/// One watched or computed tangent.
struct Entry {
    /// `None` for a variable's handle (variables outlive their reads).
    primal: Option<WeakTensor>,
    tangent: Tensor,
}

/// The map is swept of dead primals when it reaches this size at least.
const SWEEP_MIN: usize = 64;

/// The state of one accumulator.
pub(crate) struct AccCell {
    tangents: RefCell<FxHashMap<TensorId, Entry>>,
    recording: Cell<bool>,
    /// When it was last entered (shared numbering with the tapes).
    entered: Cell<u64>,
    /// The first failure of a tangent computation; `jvp` reports it.
    error: RefCell<Option<Error>>,
    sweep_at: Cell<usize>,
}

impl AccCell {
    fn tangent(&self, id: TensorId) -> Option<Tensor> {
        self.tangents.borrow().get(&id).map(|e| e.tangent.clone())
    }

    fn insert(&self, id: TensorId, primal: Option<WeakTensor>, tangent: Tensor) {
        let mut m = self.tangents.borrow_mut();
        if m.len() >= self.sweep_at.get() {
            m.retain(|_, e| e.primal.as_ref().is_none_or(WeakTensor::is_alive));
            self.sweep_at.set((2 * m.len()).max(SWEEP_MIN));
        }
        m.insert(id, Entry { primal, tangent });
    }

    fn fail(&self, op: &'static str, e: Error) {
        let mut slot = self.error.borrow_mut();
        if slot.is_none() {
            *slot = Some(Error::invalid(
                "ForwardAccumulator",
                format!("computing the tangent of a {op} op failed: {e}"),
            ));
        }
    }
}

thread_local! {
    /// The visible accumulators are `STACK[..DEPTH]`, ordered by entry.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    static STACK: RefCell<Vec<Rc<AccCell>>> = const { RefCell::new(Vec::new()) };
}

/// Whether any accumulator is active on this thread.
#[inline(always)]
pub(crate) fn any_active() -> bool {
    DEPTH.with(|d| d.get() != 0)
}

/// Sets how many accumulators are visible, and so whether forward mode
/// listens to the dispatch layer on this thread.
#[inline]
fn set_depth(n: usize) {
    DEPTH.with(|d| d.set(n));
    dispatch::listen(Kind::Forward, n != 0);
}

/// Forward mode as an interpreter of the dispatch layer: each op with a
/// rule gets output tangents in the visible accumulators ([`record`]).
struct Accumulators;

impl Interpreter for Accumulators {
    fn process(&self, call: &Call<'_>) {
        if call.differentiable() {
            // (several accumulators may each need it: kept here once taken)
            let mut cache: Option<VjpFn> = None;
            let mut rule = || {
                cache
                    .get_or_insert_with(|| {
                        call.rule_or(crate::autodiff::custom::overridden_for)
                            .expect("a differentiable call has a rule")
                    })
                    .clone()
            };
            record(call.name, call.inputs, call.outputs, &mut rule, call.jvp);
        }
    }

    fn suspend(&self, on: bool) {
        thread_local! {
            static SUSPENDED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
        }
        if on {
            SUSPENDED.with(|x| x.borrow_mut().push(DEPTH.with(Cell::get)));
            set_depth(0);
        } else if let Some(d) = SUSPENDED.with(|x| x.borrow_mut().pop()) {
            let n = STACK.with(|s| s.borrow().len());
            set_depth(d.min(n));
        }
    }
}

/// Whether a visible accumulator has a tangent for `id` (a watched
/// tensor's or variable's).
pub(crate) fn watches(id: TensorId) -> bool {
    any_active()
        && STACK.with(|s| {
            let s = s.borrow();
            let d = DEPTH.with(Cell::get).min(s.len());
            s[..d].iter().any(|a| a.tangents.borrow().contains_key(&id))
        })
}

/// Puts `acc` among the visible accumulators at its place by entry.
fn insert(acc: &Rc<AccCell>) {
    dispatch::register(Kind::Forward, &Accumulators);
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        let d = DEPTH.with(Cell::get).min(s.len());
        let at = s[..d]
            .iter()
            .position(|a| a.entered.get() > acc.entered.get())
            .unwrap_or(d);
        s.insert(at, acc.clone());
        set_depth(d + 1);
    });
    acc.recording.set(true);
}

/// Takes `acc` off the stack wherever it is.
fn remove(acc: &Rc<AccCell>) {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        if let Some(i) = s.iter().rposition(|a| Rc::ptr_eq(a, acc)) {
            s.remove(i);
            let d = DEPTH.with(Cell::get);
            if i < d {
                set_depth(d - 1);
            }
        }
    });
    acc.recording.set(false);
}

/// Restores the number of visible accumulators when dropped (to what it
/// was when [`Restore::enter`] made it, or to how many there are now, if
/// fewer).
struct Restore(usize);

impl Restore {
    /// Shows only the first `depth` accumulators until the guard drops.
    fn enter(depth: usize) -> Restore {
        let r = Restore(DEPTH.with(Cell::get));
        set_depth(depth);
        r
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        let n = STACK.with(|s| s.borrow().len());
        set_depth(self.0.min(n));
    }
}

/// Runs `f` with only the first `depth` accumulators visible.
fn with_depth<T>(depth: usize, f: impl FnOnce() -> T) -> T {
    let _restore = Restore::enter(depth);
    f()
}

/// Runs `f` with every accumulator of this thread paused. (The wrapper is
/// instantiated for hundreds of closures: each instance is only a call of
/// [`scoped::once`](crate::scoped::once), the pausing compiled once.)
pub(crate) fn paused<T>(f: impl FnOnce() -> T) -> T {
    crate::scoped::once(f, paused_dyn)
}

#[inline(never)]
pub(crate) fn paused_dyn(f: &mut dyn FnMut()) {
    let _restore = any_active().then(|| Restore::enter(0));
    f()
}

/// Gives the outputs of an op tangents in every visible accumulator that has
/// a tangent for one of its float or complex inputs.
fn record(
    name: &'static str,
    inputs: Operands<'_>,
    outputs: &[Tensor],
    rule: &mut dyn FnMut() -> VjpFn,
    jvp: Option<&dispatch::JvpRule<'_>>,
) {
    if !outputs.iter().any(|o| o.dtype().is_differentiable()) || !inputs.iter().any(|(_, d)| d.is_differentiable()) {
        return;
    }
    let accs: SmallVec<[Rc<AccCell>; 2]> = STACK.with(|s| {
        let s = s.borrow();
        let d = DEPTH.with(Cell::get).min(s.len());
        s[..d].iter().cloned().collect()
    });
    // in the order entered, as TensorFlow; each one's work is visible to
    // those before it (outside it) only
    for (i, acc) in accs.iter().enumerate() {
        let tangents: SmallVec<[Option<Tensor>; 2]> = inputs
            .iter()
            .map(|(id, dtype)| dtype.is_differentiable().then(|| acc.tangent(id)).flatten())
            .collect();
        if tangents.iter().all(Option::is_none) {
            continue;
        }
        let result = with_depth(i, || {
            tape::hiding_tapes_after(acc.entered.get(), || {
                output_tangents(outputs, &tangents, &mut *rule, jvp)
            })
        });
        match result {
            Ok(ts) => {
                for (o, t) in outputs.iter().zip(ts) {
                    if let Some(t) = t {
                        acc.insert(o.id(), Some(o.downgrade()), t);
                    }
                }
            }
            Err(e) => acc.fail(name, e),
        }
    }
}

/// The output tangents of an op, `None` for zero.
fn output_tangents(
    outputs: &[Tensor],
    tangents: &[Option<Tensor>],
    rule: &mut dyn FnMut() -> VjpFn,
    jvp: Option<&dispatch::JvpRule<'_>>,
) -> Result<SmallVec<[Option<Tensor>; 1]>> {
    if let (Some(jvp), [out]) = (jvp, outputs) {
        let t = jvp(tangents, out)?;
        return Ok(smallvec![Some(fit(t, out)?)]);
    }
    double_vjp(&rule(), outputs, tangents)
}

/// Checks a rule's tangent against its output, broadcasting it if needed.
fn fit(t: Tensor, out: &Tensor) -> Result<Tensor> {
    if t.dtype() != out.dtype() {
        return Err(Error::DTypeMismatch {
            op: "jvp",
            lhs: out.dtype(),
            rhs: t.dtype(),
        });
    }
    if t.shape() == out.shape() {
        Ok(t)
    } else {
        t.broadcast_to(out.shape())
    }
}

/// `J t` from the VJP rule: the gradient w.r.t. a watched zero cotangent `u`
/// of the rule's input cotangents, weighted by the input tangents.
fn double_vjp(rule: &VjpFn, outputs: &[Tensor], tangents: &[Option<Tensor>]) -> Result<SmallVec<[Option<Tensor>; 1]>> {
    let us: Vec<Tensor> = outputs.iter().map(|o| o.try_zeros_like()).collect::<Result<_>>()?;
    let needs: SmallVec<[bool; 4]> = tangents.iter().map(Option::is_some).collect();
    let inner = GradientTape::new();
    let cots = inner.record(|| {
        inner.watch(&us[..]);
        rule.call(&us, &needs)
    })?;
    if cots.len() != tangents.len() {
        return Err(Error::invalid(
            "jvp",
            format!(
                "gradient rule returned {} gradients for {} inputs",
                cots.len(),
                tangents.len()
            ),
        ));
    }
    let (mut targets, mut seeds) = (Vec::new(), Vec::new());
    for (c, t) in cots.into_iter().zip(tangents) {
        if let (Some(c), Some(t)) = (c, t)
            && c.dtype().is_differentiable()
        {
            targets.push(c);
            seeds.push(t.clone());
        }
    }
    if targets.is_empty() {
        return Ok(smallvec![None; outputs.len()]);
    }
    let grads = inner.gradient_with(
        &targets[..],
        &us[..],
        GradientOptions::default().output_gradients(seeds),
    )?;
    Ok(grads
        .into_iter()
        .zip(outputs)
        .map(|(g, o)| g.filter(|_| o.dtype().is_differentiable()))
        .collect())
}

/// Computes Jacobian-vector products in forward mode, like
/// `tf.autodiff.ForwardAccumulator`.
///
/// Watch primals with their tangents, run the computation while the
/// accumulator is active ([`record`](Self::record) or
/// [`enter`](Self::enter)), then read the tangent (JVP) of any result with
/// [`jvp`](Self::jvp). Tangents are computed as the ops run, so they must be
/// supplied in advance; unwatched tensors have zero tangents.
///
/// ```
/// use gradtape::{ForwardAccumulator, Tensor};
/// let x = Tensor::vector(&[0.0f64, 1.0]);
/// let acc = ForwardAccumulator::new();
/// acc.watch(&x, &Tensor::vector(&[1.0f64, 2.0]))?;
/// let y = acc.record(|| x.sin()?.mul_scalar(3.0))?;
/// // d/dx 3 sin x = 3 cos x, times the tangent
/// let t = acc.jvp(&y)?.unwrap().to_vec::<f64>()?;
/// assert!((t[0] - 3.0).abs() < 1e-12 && (t[1] - 6.0 * 1f64.cos()).abs() < 1e-12);
/// # Ok::<(), gradtape::Error>(())
/// ```
///
/// Nested accumulators give higher derivatives; the inner one's tangents are
/// watched by the outer one (not the other way round):
///
/// ```
/// use gradtape::{ForwardAccumulator, Tensor};
/// let x = Tensor::scalar(1.1f64);
/// let outer = ForwardAccumulator::new();
/// let inner = ForwardAccumulator::new();
/// outer.watch(&x, &Tensor::scalar(1.0f64))?;
/// inner.watch(&x, &Tensor::scalar(1.0f64))?;
/// let y = outer.record(|| inner.record(|| x.pow_scalar(3.5)))?;
/// let d1 = inner.jvp(&y)?.unwrap();
/// let d2 = outer.jvp(&d1)?.unwrap();
/// assert!((d2.to_scalar::<f64>()? - 3.5 * 2.5 * 1.1f64.powf(1.5)).abs() < 1e-12);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct ForwardAccumulator {
    cell: Rc<AccCell>,
}

/// Keeps an accumulator active until dropped; see [`ForwardAccumulator::enter`].
pub struct ForwardGuard<'a> {
    acc: &'a ForwardAccumulator,
}

impl Drop for ForwardGuard<'_> {
    fn drop(&mut self) {
        if self.acc.cell.recording.get() {
            remove(&self.acc.cell);
        }
    }
}

impl Default for ForwardAccumulator {
    fn default() -> Self {
        ForwardAccumulator::new()
    }
}

impl std::fmt::Debug for ForwardAccumulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardAccumulator")
            .field("recording", &self.is_recording())
            .field("tangents", &self.len())
            .finish()
    }
}

/// Id, shape and dtype of a primal.
fn describe(r: &SourceRef<'_>) -> (TensorId, Vec<usize>, crate::DType) {
    match r {
        SourceRef::Tensor(t) => (t.id(), t.shape().to_vec(), t.dtype()),
        SourceRef::Variable(v) => (v.handle(), v.shape(), v.dtype()),
    }
}

impl ForwardAccumulator {
    /// An accumulator watching nothing yet.
    pub fn new() -> Self {
        ForwardAccumulator {
            cell: Rc::new(AccCell {
                tangents: RefCell::new(FxHashMap::default()),
                recording: Cell::new(false),
                entered: Cell::new(0),
                error: RefCell::new(None),
                sweep_at: Cell::new(SWEEP_MIN),
            }),
        }
    }

    /// An accumulator watching `primals[i]` with `tangents[i]` (TensorFlow's
    /// constructor). Listing a primal twice is an error (watch it twice to
    /// sum tangents), as is a count, shape or dtype mismatch.
    ///
    /// ```
    /// use gradtape::{ForwardAccumulator, Tensor};
    /// let (a, b) = (Tensor::scalar(2.0f32), Tensor::scalar(3.0f32));
    /// let acc = ForwardAccumulator::watching(&[&a, &b], &[Tensor::scalar(1.0f32), Tensor::scalar(0.5f32)])?;
    /// let y = acc.record(|| a.mul(&b))?;
    /// assert_eq!(acc.jvp(&y)?.unwrap().to_scalar::<f32>()?, 3.0 + 2.0 * 0.5);
    /// assert!(ForwardAccumulator::watching(&[&a, &a], &[a.clone(), a.clone()]).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn watching<S: Sources + ?Sized>(primals: &S, tangents: &[Tensor]) -> Result<Self> {
        let mut refs: SmallVec<[SourceRef<'_>; 4]> = SmallVec::new();
        primals.collect(&mut refs);
        if refs.len() != tangents.len() {
            return Err(Error::invalid(
                "ForwardAccumulator::watching",
                format!("{} primals given with {} tangents", refs.len(), tangents.len()),
            ));
        }
        let acc = ForwardAccumulator::new();
        for (i, (r, t)) in refs.iter().zip(tangents).enumerate() {
            let id = describe(r).0;
            if refs[..i].iter().any(|p| describe(p).0 == id) {
                return Err(Error::invalid(
                    "ForwardAccumulator::watching",
                    format!(
                        "primal {i} was already listed; a primal may be given once \
                         (sum its tangents, or call watch again to add them)"
                    ),
                ));
            }
            acc.watch(*r, t)?;
        }
        Ok(acc)
    }

    /// Watches a tensor or variable with the given tangent (same shape and
    /// dtype, a float or complex dtype). Watching one primal again adds the tangents.
    /// Works whether or not the accumulator is active.
    ///
    /// ```
    /// use gradtape::{ForwardAccumulator, Tensor, Variable};
    /// let v = Variable::new(Tensor::vector(&[1.0f32, 2.0]));
    /// let acc = ForwardAccumulator::new();
    /// acc.watch(&v, &Tensor::vector(&[0.5f32, -1.0]))?;
    /// let y = acc.record(|| v.read().mul_scalar(2.0))?;
    /// assert_eq!(acc.jvp(&y)?.unwrap().to_vec::<f32>()?, vec![1.0, -2.0]);
    /// assert!(acc.watch(&v, &Tensor::vector(&[1.0f32])).is_err()); // wrong shape
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn watch<'a>(&self, primal: impl Into<SourceRef<'a>>, tangent: &Tensor) -> Result<()> {
        const OP: &str = "ForwardAccumulator::watch";
        let primal = primal.into();
        let (id, shape, dtype) = describe(&primal);
        if !dtype.is_differentiable() {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype,
                expected: "a float or complex primal",
            });
        }
        if tangent.dtype() != dtype {
            return Err(Error::DTypeMismatch {
                op: OP,
                lhs: dtype,
                rhs: tangent.dtype(),
            });
        }
        if tangent.shape() != shape.as_slice() {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: shape,
                rhs: tangent.shape().to_vec(),
            });
        }
        let t = match self.cell.tangent(id) {
            Some(prev) => paused(|| prev.add(tangent))?,
            None => tangent.clone(),
        };
        let weak = match primal {
            SourceRef::Tensor(p) => Some(p.downgrade()),
            SourceRef::Variable(_) => None,
        };
        self.cell.insert(id, weak, t);
        Ok(())
    }

    /// Activates the accumulator until the guard drops. Entering it again
    /// after it stopped continues with the same tangents; entering one that
    /// is active is an error.
    pub fn enter(&self) -> Result<ForwardGuard<'_>> {
        if self.cell.recording.get() {
            return Err(Error::invalid(
                "ForwardAccumulator::enter",
                "the accumulator is already active; it cannot be entered twice",
            ));
        }
        self.cell.entered.set(tape::next_entry());
        insert(&self.cell);
        Ok(ForwardGuard { acc: self })
    }

    /// Runs `f` with the accumulator active (Python's `with acc:`).
    pub fn record<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let _guard = self.enter()?;
        f()
    }

    /// Whether the accumulator is active now.
    pub fn is_recording(&self) -> bool {
        self.cell.recording.get()
    }

    /// Runs `f` with this accumulator paused (others stay active); it
    /// resumes at its old place in the nesting order. An error if it is not
    /// active.
    ///
    /// ```
    /// use gradtape::{ForwardAccumulator, Tensor};
    /// let x = Tensor::scalar(2.0f64);
    /// let acc = ForwardAccumulator::new();
    /// acc.watch(&x, &Tensor::scalar(1.0f64))?;
    /// let (y, z) = acc.record(|| Ok((acc.stop_recording(|| x.exp())?, x.exp()?)))?;
    /// assert!(acc.jvp(&y)?.is_none());
    /// assert!(acc.jvp(&z)?.is_some());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn stop_recording<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if !self.cell.recording.get() {
            return Err(Error::invalid(
                "ForwardAccumulator::stop_recording",
                "the accumulator is not active",
            ));
        }
        remove(&self.cell);
        struct Resume<'a>(&'a Rc<AccCell>);
        impl Drop for Resume<'_> {
            fn drop(&mut self) {
                insert(self.0);
            }
        }
        let _resume = Resume(&self.cell);
        f()
    }

    /// The tangent (JVP) of a tensor or variable, `None` where it has none
    /// (not computed from a watched primal while the accumulator was
    /// active). One primal gives `Option<Tensor>`; a slice, `Vec`, array or
    /// tuple gives the same structure. Computes nothing.
    ///
    /// An error if computing some tangent failed while the accumulator was
    /// active (the message names the op).
    pub fn jvp<S: Sources + ?Sized>(&self, primals: &S) -> Result<S::Output> {
        self.jvp_with(primals, Unconnected::None)
    }

    /// [`jvp`](Self::jvp), with zeros of the primal's shape and dtype for an
    /// unconnected primal when `unconnected` is [`Unconnected::Zero`].
    ///
    /// ```
    /// use gradtape::{ForwardAccumulator, Tensor, Unconnected};
    /// let x = Tensor::scalar(-1.0f32);
    /// let acc = ForwardAccumulator::new();
    /// acc.watch(&x, &Tensor::scalar(0.1f32))?;
    /// let y = Tensor::vector(&[-2.0f32, 3.0]);
    /// assert!(acc.jvp(&y)?.is_none());
    /// let zero = acc.jvp_with(&y, Unconnected::Zero)?.unwrap();
    /// assert_eq!(zero.to_vec::<f32>()?, vec![0.0, 0.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn jvp_with<S: Sources + ?Sized>(&self, primals: &S, unconnected: Unconnected) -> Result<S::Output> {
        if let Some(e) = self.cell.error.borrow().as_ref() {
            return Err(e.clone());
        }
        let mut refs: SmallVec<[SourceRef<'_>; 4]> = SmallVec::new();
        primals.collect(&mut refs);
        let found = refs
            .iter()
            .map(|r| {
                let (id, shape, dtype) = describe(r);
                match (self.cell.tangent(id), unconnected) {
                    (Some(t), _) => Ok(Some(t)),
                    (None, Unconnected::None) => Ok(None),
                    (None, Unconnected::Zero) => {
                        let device = match r {
                            SourceRef::Tensor(t) => t.device(),
                            SourceRef::Variable(v) => v.device(),
                        };
                        crate::kernels::gpu::filled("zeros", &shape, 0.0, dtype, device).map(Some)
                    }
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(primals.pack(&mut found.into_iter()))
    }

    /// The number of tangents held (watched primals and computed tangents
    /// whose primals are alive or not yet swept).
    pub fn len(&self) -> usize {
        self.cell.tangents.borrow().len()
    }

    /// Whether no tangent is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for ForwardAccumulator {
    fn drop(&mut self) {
        if self.cell.recording.get() {
            remove(&self.cell);
        }
    }
}
