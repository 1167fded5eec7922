//! The fused, in-place update loop every optimizer runs.
//!
//! An optimizer's update is an elementwise rule on the variable `w`, its
//! `K` slots `s` and the gradient `g` ([`ElemRule`]). On the host, [`run`]
//! makes it a job of [`batch`](super::batch), run at once or with the
//! step's other variables in one parallel pass: the write locks of the
//! variable and its slots are taken, their buffers got for writing (in
//! place when nothing else shares them, as
//! [`Variable::apply_gradient_descent`] does; a copy otherwise, so a tensor
//! read earlier keeps its value) and one pass made by the rule's loop
//! ([`pass`]), applying Keras's decoupled weight decay `w -= w · wd · lr`
//! first where it is on.
//!
//! A sparse gradient ([`IndexedSlices`]) is never densified: its rows are
//! summed per index (duplicates add, as in the dense tensor it stands for)
//! and sorted, then the pass visits
//!
//! - only the listed rows when the rule leaves a row with a zero gradient
//!   unchanged (plain SGD, Adagrad) and no weight decay is on, or when the
//!   optimizer is *lazy*;
//! - every row otherwise, the listed ones with their gradient and the gaps
//!   between them with a zero gradient (no zero tensor is built), which
//!   gives exactly the result of the dense gradient, as Keras 3 does.

use std::cell::Cell;

use super::batch::{Grad, Job, OwnedPass};
use crate::autodiff::gradient::{Gradient, IndexedSlices};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::kernels::cpu::lockstep::{self, zip};
use crate::kernels::cpu::math::with_simd_for;
use crate::tensor::dtype::with_types;
use crate::tensor::{bf16, f16, with_float_dtype, DType, Element, Float, Tensor};

/// The per-step constants of an update.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Step {
    /// The learning rate for this step.
    pub lr: f64,
    /// The step number, 1 for the first update (Keras's `iterations + 1`).
    pub t: f64,
    /// The weight decay for this variable (0 when off or excluded).
    pub wd: f64,
    /// Whether a sparse gradient updates only its rows.
    pub lazy: bool,
    /// A factor the gradient is to be multiplied by first (a traced step's
    /// global-norm clipping, folded into the update by the compiler: see
    /// `ApplyUpdates` in `traced.rs`). A dense host `f32`/`f64` gradient
    /// is multiplied as the update loop reads it (each product rounded
    /// once, in the gradient's type, as the `Mul` node it replaces rounded
    /// it; see [`pass`]); any other is multiplied whole first.
    pub grad_scale: Option<f64>,
}

/// An elementwise update of a weight, its `K` slots and its gradient
/// (`Sync`: a large variable's pass is spread over the compute threads;
/// `Clone + 'static`: each update loop owns a copy, run with its step's
/// other updates, see `batch`).
pub trait ElemRule<const K: usize>: Sync + Clone + 'static {
    /// Whether a zero gradient leaves the weight and slots unchanged (then a
    /// sparse gradient needs to visit its rows only).
    const ZERO_GRAD_IS_NOOP: bool;
    /// Updates one element.
    fn apply<T: super::half_update::Arith>(&self, w: &mut T, s: &mut [T; K], g: T);
    /// The same update in CUDA C, for variables on a GPU: statements over
    /// `T w`, `T s[K]`, `T g` and the `double` parameters `p[0..]` (the
    /// values this returns), computed as [`apply`](Self::apply) computes
    /// them (each `T::from_f64(x)` a `(T)` of its parameter).
    fn cuda(&self) -> (&'static str, Vec<f64>);
}

/// A sparse gradient's rows summed per index and sorted (duplicates add
/// in their order, as in the dense tensor it stands for).
fn sparse_rows<T: Float>(s: &IndexedSlices) -> Result<Grad<T>> {
    let width: usize = s.dense_shape()[1..].iter().product();
    let v = s.values().values::<T>("optimizer")?;
    let idx: Vec<usize> = s
        .indices()
        .f64_values("optimizer")?
        .into_iter()
        .map(|i| i as usize)
        .collect();
    let mut order: Vec<usize> = (0..idx.len()).collect();
    order.sort_by_key(|&k| idx[k]); // stable: duplicates add in their order
    let mut rows: Vec<usize> = crate::tensor::alloc::try_vec("optimizer", idx.len())?;
    let mut vals: Vec<T> = crate::tensor::alloc::try_vec("optimizer", v.len())?;
    for k in order {
        let src = &v[k * width..(k + 1) * width];
        if rows.last() == Some(&idx[k]) {
            let start = vals.len() - width;
            vals[start..].iter_mut().zip(src).for_each(|(a, &b)| *a = *a + b);
        } else {
            rows.push(idx[k]);
            vals.extend_from_slice(src);
        }
    }
    Ok(Grad::Sparse { rows, vals, width })
}

/// The length of the zero gradient a gap between sparse rows is updated
/// with, piece by piece.
pub(crate) const ZEROS: usize = 256;

/// `grad` times `c` (a scalar of its values' dtype), as tensor ops that
/// no tape or trace records.
fn scale_whole(grad: &Gradient, c: f64) -> Result<Gradient> {
    let times = |v: &Tensor| -> Result<Tensor> {
        crate::function::trace::paused(|| {
            crate::autodiff::tape::without_tapes(|| v.mul(&Tensor::scalar(c).cast(v.dtype())?.to(v.device())?))
        })
    };
    Ok(match grad {
        Gradient::Dense(g) => Gradient::Dense(times(g)?),
        Gradient::Sparse(s) => Gradient::Sparse(IndexedSlices::new(
            times(s.values())?,
            s.indices().clone(),
            s.dense_shape(),
        )?),
    })
}

/// The elements of `t` for writing: in place when `t` is the only owner of
/// a contiguous buffer, else after copying it into a new one.
pub(crate) fn values_mut<T: Element>(t: &mut Tensor) -> Result<&mut [T]> {
    if t.unique_values_mut::<T>().is_none() {
        *t = Tensor::from_vec(t.owned_values::<T>("optimizer")?, t.shape())?;
    }
    t.unique_values_mut::<T>()
        .ok_or_else(|| Error::invalid("optimizer", "could not get a writable buffer"))
}

/// Locks `var` and its `slots` (at most three) for writing and runs `f`.
///
/// The locking is compiled once ([`lock_all`], through `&mut dyn`), not
/// once per rule, dtype and slot count: each of its four nestings would
/// otherwise hold its own copy of the update loop.
fn with_locked<R>(
    var: &Variable,
    slots: &[Variable],
    f: impl FnOnce(&mut Tensor, Vec<&mut Tensor>) -> Result<R>,
) -> Result<R> {
    let (mut f, mut out) = (Some(f), None);
    lock_all(var, slots, &mut |w, s| {
        let f = f.take().expect("lock_all calls its function once");
        out = Some(f(w, s)?);
        Ok(())
    })?;
    Ok(out.expect("lock_all called its function"))
}

#[inline(never)]
fn lock_all(
    var: &Variable,
    slots: &[Variable],
    f: &mut dyn FnMut(&mut Tensor, Vec<&mut Tensor>) -> Result<()>,
) -> Result<()> {
    var.with_value_mut(|w| match slots {
        [] => f(w, vec![]),
        [a] => a.with_value_mut(|a| f(w, vec![a])),
        [a, b] => a.with_value_mut(|a| b.with_value_mut(|b| f(w, vec![a, b]))),
        [a, b, c] => a.with_value_mut(|a| b.with_value_mut(|b| c.with_value_mut(|c| f(w, vec![a, b, c])))),
        _ => Err(Error::invalid("optimizer", "at most three slots per variable")),
    })
}

/// Applies `rule` to `var` with its `K` slots and gradient `grad` (checked
/// against the variable's shape and dtype by the caller).
pub(crate) fn run<R: ElemRule<K>, const K: usize>(
    rule: &R,
    step: &Step,
    var: &Variable,
    slots: &[Variable],
    grad: &Gradient,
) -> Result<()> {
    if slots.len() != K {
        return Err(Error::invalid(
            "optimizer",
            format!("expected {K} slots, got {}", slots.len()),
        ));
    }
    let noop = R::ZERO_GRAD_IS_NOOP;
    let reference = TESTING.with(Cell::get).0;
    if let Some(c) = step.grad_scale {
        let in_loop = !reference
            && !var.device().is_cuda()
            && matches!(var.dtype(), DType::F32 | DType::F64)
            && matches!(grad, Gradient::Dense(g) if g.dtype() == var.dtype() && !g.device().is_cuda());
        if !in_loop {
            // (the product the `Mul` node made, then the update as is)
            let scaled = scale_whole(grad, c)?;
            let step = Step {
                grad_scale: None,
                ..*step
            };
            return run(rule, &step, var, slots, &scaled);
        }
    }
    if var.device().is_cuda() {
        // (the GPU's update kernels are f32 and f64 ones, and so is the
        // emulated GPU's host path)
        let cuda = rule.cuda();
        return with_types!(var.dtype(), T => run_on_gpu::<T>(step, var, slots, grad, cuda, &|d, c, w, s, g| pass::<T, R, K>(rule, d, c, w, s, g)), [F32: f32, F64: f64], _ => Err(Error::UnsupportedDType {
            op: "apply_gradients",
            dtype: var.dtype(),
            expected: "f32 or f64 variables on a GPU",
        }));
    }
    let sequential = reference;
    // (each update loop owns a copy of the rule: the update may run later,
    // with the step's others; see `batch`)
    if reference {
        return with_float_dtype!(var.dtype(), T => {
            let rule = rule.clone();
            submit::<T>(noop, step, var, slots, grad, Box::new(move |d, c, w, s, g| pass_elementwise::<T, R, K>(&rule, d, c, w, s, g)), sequential)
        }, _ => Err(Error::UnsupportedDType {
            op: "apply_gradients",
            dtype: var.dtype(),
            expected: "float variables (f32, f64, f16 or bf16)",
        }));
    }
    let rule = rule.clone();
    // (the half types a block at a time: see `half_update`; their
    // gradients were scaled whole above)
    match var.dtype() {
        DType::F16 => submit::<f16>(
            noop,
            step,
            var,
            slots,
            grad,
            Box::new(move |d, _, w, s, g| super::half_update::pass::<f16, R, K>(&rule, d, w, s, g)),
            sequential,
        ),
        DType::BF16 => submit::<bf16>(
            noop,
            step,
            var,
            slots,
            grad,
            Box::new(move |d, _, w, s, g| super::half_update::pass::<bf16, R, K>(&rule, d, w, s, g)),
            sequential,
        ),
        _ => {
            with_float_dtype!(var.dtype(), T => submit::<T>(noop, step, var, slots, grad, Box::new(move |d, c, w, s, g| pass::<T, R, K>(&rule, d, c, w, s, g)), sequential), _ => Err(Error::UnsupportedDType {
                op: "apply_gradients",
                dtype: var.dtype(),
                expected: "float variables (f32, f64, f16 or bf16)",
            }))
        }
    }
}

thread_local! {
    /// This thread's test settings (see [`testing`]): whether updates run
    /// the reference loop, and a factor forced on every gradient.
    static TESTING: Cell<(bool, Option<f64>)> = const { Cell::new((false, None)) };
}

/// Runs `f` with this thread's optimizer updates changed, for the tests
/// of `tests/internals/optim_kernel_bits.rs` (the update code they compare is
/// the library's own, compiled with its optimisation): with `elementwise`,
/// every update runs [`pass_elementwise`] on this thread, alone, at once
/// (not batched with the step's others), a factor multiplied into the
/// gradient whole first (as the `Mul` node of a traced step's clipping
/// made it), the reference; with `scale`, every dense gradient of an
/// update is to be multiplied by `scale` (as a traced step's
/// `ApplyUpdates` whose clipping the compiler folded into it:
/// [`Step::grad_scale`]).
#[doc(hidden)]
pub fn testing<R>(elementwise: bool, scale: Option<f64>, f: impl FnOnce() -> R) -> R {
    struct Reset((bool, Option<f64>));
    impl Drop for Reset {
        fn drop(&mut self) {
            TESTING.with(|t| t.set(self.0));
        }
    }
    let _reset = Reset(TESTING.with(|t| t.replace((elementwise, scale))));
    f()
}

/// The factor [`testing`] forces on this thread's gradients.
pub(crate) fn forced_scale() -> Option<f64> {
    TESTING.with(Cell::get).1
}

/// A rule's update loop ([`pass`]) for one dtype: the weight decay, the
/// gradient's factor, the weights, their slots and the gradient.
/// Everything around it is compiled once per dtype, through this
/// reference, not once per rule.
type PassFn<'a, T> = dyn Fn(Option<(T, T)>, Option<T>, &mut [T], &mut [&mut [T]], &[T]) + Sync + 'a;

/// The update of `var` on the host as a [`Job`], run now or with its
/// step's others (see [`batch`](super::batch)); `noop`: the rule's
/// [`ZERO_GRAD_IS_NOOP`](ElemRule::ZERO_GRAD_IS_NOOP).
fn submit<T: Float>(
    noop: bool,
    step: &Step,
    var: &Variable,
    slots: &[Variable],
    grad: &Gradient,
    pass: OwnedPass<T>,
    sequential: bool,
) -> Result<()> {
    let grad = match grad {
        Gradient::Dense(g) => Grad::Dense(g.clone()),
        Gradient::Sparse(s) => sparse_rows::<T>(s)?,
    };
    let job = Job {
        var: var.clone(),
        slots: slots.to_vec(),
        grad,
        all: !step.lazy && (!noop || step.wd != 0.0),
        decay: (step.wd != 0.0).then(|| (T::from_f64(step.wd), T::from_f64(step.lr))),
        factor: step.grad_scale.map(T::from_f64),
        pass,
    };
    super::batch::submit(Box::new(job), sequential)
}

/// [`run`] for a variable on a GPU: the rule's CUDA form `cuda` over the
/// weight, its slots and the gradient (made dense: a lazy sparse update is
/// not done on a GPU yet), in one kernel; on an emulated GPU, the rule's
/// `pass` on host copies.
fn run_on_gpu<T: Float>(
    step: &Step,
    var: &Variable,
    slots: &[Variable],
    grad: &Gradient,
    (body, params): (&'static str, Vec<f64>),
    pass: &PassFn<'_, T>,
) -> Result<()> {
    const OP: &str = "apply_gradients";
    let g = match grad {
        Gradient::Dense(g) => g.clone(),
        Gradient::Sparse(s) => s.to_dense()?,
    };
    let k = slots.len();
    with_locked(var, slots, |w, s| {
        let mut inputs: Vec<&Tensor> = vec![&*w];
        inputs.extend(s.iter().map(|t| &**t));
        inputs.push(&g);
        let host = |h: &[Tensor]| -> Result<Vec<Tensor>> {
            let mut wv = h[0].owned_values::<T>(OP)?;
            let mut sv: Vec<Vec<T>> = h[1..=k]
                .iter()
                .map(|t| t.owned_values::<T>(OP))
                .collect::<Result<_>>()?;
            let gv = h[k + 1].values::<T>(OP)?;
            let decay = (step.wd != 0.0).then(|| (T::from_f64(step.wd), T::from_f64(step.lr)));
            let mut refs: Vec<&mut [T]> = sv.iter_mut().map(|v| v.as_mut_slice()).collect();
            // (a factor was multiplied into the gradient whole: see `run`)
            pass(decay, None, &mut wv, &mut refs, &gv);
            let shape = h[0].shape();
            let mut out = vec![Tensor::from_vec(wv, shape)?];
            for v in sv {
                out.push(Tensor::from_vec(v, shape)?);
            }
            Ok(out)
        };
        let outs = crate::dispatch::device::offload_n(
            OP,
            &inputs,
            |_| {
                crate::kernels::cuda::optimizer_update(
                    OP,
                    &inputs[0].clone(),
                    &inputs[1..=k],
                    &g,
                    body,
                    &params,
                    step.wd,
                    step.lr,
                )
            },
            host,
        )
        .unwrap_or_else(|| Err(Error::invalid(OP, "a variable on a GPU with its slots on the CPU")))?;
        let mut outs = outs.into_iter();
        *w = outs.next().expect("the weight");
        for (slot, new) in s.into_iter().zip(outs) {
            *slot = new;
        }
        Ok(())
    })
}

/// One update loop per rule, dtype and slot count, which the dense, the
/// sparse and the emulated GPU's updates share: `s` holds the `K` slots'
/// parts, each and `g` as long as `w` (as [`run`] checked); `scale`, a
/// factor each gradient element is multiplied by first.
///
/// [`LANES`] elements at a time: each run of the weight, the slots and
/// the gradient is copied into local arrays (fixed-size copies, a few
/// vector moves), updated there by a loop the compiler vectorises (the
/// local arrays alias nothing and need no bounds checks; with AVX-512 or
/// AVX2 where the CPU has them, for f32 and f64), and copied back. Until
/// this form, the runs were blocks of 128 copied by `memcpy` calls of a
/// length known only at run time (seven calls per block for Adam): an
/// AdamW step over 7.1 M `f32` weights ran at 28 B × 7.1 M / 7.0 ms =
/// 28 GB/s on two threads, 53 GB/s this way (3.8 ms; the same flat
/// arrays, one run of a scratch probe). The last `n % LANES` elements
/// go through the same loop in arrays padded with zeros.
///
/// Each element's arithmetic is [`pass_elementwise`]'s, in the same order
/// (the decay `w − w·wd·lr`, then the product `g·scale` rounded once in
/// `T`, then the rule; no fused multiply-adds, no reassociation): the same
/// bits, checked for every rule in `tests/internals/optim_kernel_bits.rs`.
#[inline(never)]
fn pass<T: Float, R: ElemRule<K>, const K: usize>(
    rule: &R,
    decay: Option<(T, T)>,
    scale: Option<T>,
    w: &mut [T],
    s: &mut [&mut [T]],
    g: &[T],
) {
    let Ok(s) = <&mut [&mut [T]; K]>::try_from(s) else {
        debug_assert!(false, "{K} slots expected");
        return;
    };
    let n = s.iter().fold(w.len().min(g.len()), |n, s| n.min(s.len()));
    // the update of one run of `LANES`, in local arrays
    #[inline(always)]
    fn lanes<T: Float, R: ElemRule<K>, const K: usize>(
        rule: &R,
        decay: Option<(T, T)>,
        scale: Option<T>,
        wv: &mut [T; LANES],
        sv: &mut [[T; LANES]; K],
        gv: &[T; LANES],
    ) {
        for i in 0..LANES {
            let mut wi = wv[i];
            let mut st: [T; K] = lockstep::from_fn(|k| sv[k][i]);
            if let Some((wd, lr)) = decay {
                // Keras: variable.assign_sub(variable * wd * lr)
                wi = wi - wi * wd * lr;
            }
            let gi = match scale {
                Some(c) => gv[i] * c,
                None => gv[i],
            };
            rule.apply(&mut wi, &mut st, gi);
            wv[i] = wi;
            for k in 0..K {
                sv[k][i] = st[k];
            }
        }
    }
    with_simd_for::<T, T, _>(
        #[inline(always)]
        || {
            let full = n - n % LANES;
            for lo in (0..full).step_by(LANES) {
                let at = |v: &[T]| -> [T; LANES] { v[lo..lo + LANES].try_into().expect("LANES elements") };
                let mut wv = at(w);
                let mut sv: [[T; LANES]; K] = lockstep::from_fn(|k| at(s[k]));
                let gv = at(g);
                lanes(rule, decay, scale, &mut wv, &mut sv, &gv);
                let put = |v: &mut [T], a: &[T; LANES]| {
                    *<&mut [T; LANES]>::try_from(&mut v[lo..lo + LANES]).expect("LANES elements") = *a;
                };
                put(w, &wv);
                for k in 0..K {
                    put(s[k], &sv[k]);
                }
            }
            if full < n {
                let m = n - full;
                let pad = |v: &[T]| -> [T; LANES] {
                    let mut a = [T::zero(); LANES];
                    a[..m].copy_from_slice(&v[full..n]);
                    a
                };
                let mut wv = pad(w);
                let mut sv: [[T; LANES]; K] = lockstep::from_fn(|k| pad(s[k]));
                let gv = pad(g);
                lanes(rule, decay, scale, &mut wv, &mut sv, &gv);
                w[full..n].copy_from_slice(&wv[..m]);
                for k in 0..K {
                    s[k][full..n].copy_from_slice(&sv[k][..m]);
                }
            }
        },
    );
}

/// Elements per run of the update loop `pass` (256 bytes of `f32`: four AVX-512
/// vectors an array).
pub const LANES: usize = 64;

/// The update loop as it was before the runs of `pass`: one element at
/// a time over the slices (the decay, the product `g·scale`, the rule),
/// on the calling thread; the reference of the tests. For the half types
/// it is Keras's update in the variable's dtype, each operation rounded by
/// the `half` crate's arithmetic (the reference of `half_update`).
pub fn pass_elementwise<T: Float, R: ElemRule<K>, const K: usize>(
    rule: &R,
    decay: Option<(T, T)>,
    scale: Option<T>,
    w: &mut [T],
    s: &mut [&mut [T]],
    g: &[T],
) {
    let Ok(s) = <&mut [&mut [T]; K]>::try_from(s) else {
        debug_assert!(false, "{K} slots expected");
        return;
    };
    for (i, w) in zip(0.., &mut w[..]) {
        let mut st: [T; K] = lockstep::from_fn(|k| s[k][i]);
        if let Some((wd, lr)) = decay {
            *w = *w - *w * wd * lr;
        }
        let gi = match scale {
            Some(c) => g[i] * c,
            None => g[i],
        };
        rule.apply(w, &mut st, gi);
        for k in 0..K {
            s[k][i] = st[k];
        }
    }
}
