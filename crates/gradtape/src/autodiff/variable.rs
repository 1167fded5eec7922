//! `Variable`: a named, mutable slot holding a tensor, shared across threads.
//!
//! A variable has a *handle id* (a [`TensorId`] drawn when it is created, so
//! handle ids order variables by creation). Tapes watch the handle; reading
//! the variable under a tape records a `ReadVariable` op from the handle to a
//! fresh tensor, so gradients w.r.t. the variable arrive at the handle.

use std::sync::{Arc, OnceLock, RwLock};

use crate::autodiff::gradient::IndexedSlices;
use crate::autodiff::tape;
use crate::dispatch::{self, Kind, Operands};
use crate::error::{Error, Result};
use crate::kernels::cpu::index::update_rows;
use crate::ops::desc::F64;
use crate::tensor::{with_float_dtype, with_num_dtype, DType, Element, Num, Tensor, TensorId};

/// A mutable, named tensor slot, like `tf.Variable`.
///
/// ```
/// use gradtape::{GradientTape, Tensor, Variable};
/// let w = Variable::new(Tensor::scalar(2.0f32));
/// let tape = GradientTape::new();
/// let y = tape.record(|| w.read().mul(&w.read()))?;   // trainable: watched on read
/// let dw = tape.gradient(&y, &w)?.unwrap();
/// assert_eq!(dw.to_scalar::<f32>()?, 4.0);
/// w.assign_sub(&dw.mul_scalar(0.1)?)?;
/// assert_eq!(w.read().to_scalar::<f32>()?, 1.6);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone)]
pub struct Variable {
    inner: Arc<VarInner>,
}

struct VarInner {
    handle: TensorId,
    name: String,
    trainable: bool,
    value: RwLock<Tensor>,
}

/// Options for a new [`Variable`]; see [`Variable::builder`].
pub struct VariableBuilder {
    value: Tensor,
    name: String,
    trainable: bool,
}

impl VariableBuilder {
    /// Sets the name (default `"Variable"`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets whether tapes watch it automatically when read (default `true`).
    pub fn trainable(mut self, trainable: bool) -> Self {
        self.trainable = trainable;
        self
    }

    /// Creates the variable.
    ///
    /// Inside a traced function a variable may be made at the first trace
    /// only (a layer built at its first call, an optimizer's slots): a
    /// closure that makes one at every trace is an error at its first call
    /// (see [`function`](crate::function())), as in TensorFlow.
    pub fn build(self) -> Variable {
        let v = Variable {
            inner: Arc::new(VarInner {
                handle: TensorId::fresh_ordered(),
                name: self.name,
                trainable: self.trainable,
                value: RwLock::new(self.value),
            }),
        };
        if let Some(h) = hook() {
            h.created(&v);
        }
        v
    }
}

impl Variable {
    /// A trainable variable named `"Variable"` holding `value`.
    pub fn new(value: Tensor) -> Variable {
        Variable::builder(value).build()
    }

    /// Starts a variable with a name or trainability of its own.
    ///
    /// ```
    /// use gradtape::{Tensor, Variable};
    /// let step = Variable::builder(Tensor::scalar(0i64)).name("step").trainable(false).build();
    /// assert_eq!(step.name(), "step");
    /// assert!(!step.trainable());
    /// ```
    pub fn builder(value: Tensor) -> VariableBuilder {
        VariableBuilder {
            value,
            name: "Variable".into(),
            trainable: true,
        }
    }

    /// The id tapes know this variable by.
    pub fn handle(&self) -> TensorId {
        self.inner.handle
    }

    /// The variable's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether tapes watch it automatically when it is read.
    pub fn trainable(&self) -> bool {
        self.inner.trainable
    }

    pub(crate) fn current(&self) -> Tensor {
        self.inner.value.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the stored value with `t` (of the same shape, dtype and
    /// device), ignoring traces, tapes and checks, and returns the old one:
    /// for the executor of compiled graphs on a GPU, which lets a variable
    /// hold a buffer of its CUDA graph during a capture.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn set_untraced(&self, t: Tensor) -> Tensor {
        let mut slot = self.inner.value.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *slot, t)
    }

    /// The stored value, ignoring traces and tapes.
    pub(crate) fn value_untraced(&self) -> Tensor {
        self.current()
    }

    /// The current value's shape.
    pub fn shape(&self) -> Vec<usize> {
        self.current().shape().to_vec()
    }

    /// Where the current value lives.
    pub fn device(&self) -> crate::tensor::Device {
        self.current().device()
    }

    /// Moves the value to `device` (a copy there; nothing when it is there
    /// already): reads and writes then happen on that device, as PyTorch's
    /// `module.to(device)` moves parameters. Not inside a traced function.
    ///
    /// ```
    /// use gradtape::{Device, Tensor, Variable};
    /// let v = Variable::new(Tensor::vector(&[1.0f32]));
    /// v.move_to(Device::Cpu)?;
    /// if gradtape::cuda_is_available() {
    ///     v.move_to(Device::Cuda(0))?;
    ///     assert_eq!(v.read().device(), Device::Cuda(0));
    /// }
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn move_to(&self, device: crate::tensor::Device) -> Result<()> {
        const OP: &str = "Variable::move_to";
        if crate::dispatch::listens(crate::dispatch::Kind::Trace) {
            return Err(Error::invalid(
                OP,
                "variables cannot move between devices inside a traced function",
            ));
        }
        let mut slot = self.inner.value.write().unwrap_or_else(|e| e.into_inner());
        if slot.device() != device {
            *slot = crate::kernels::gpu::to_device(OP, &slot, device)?;
        }
        Ok(())
    }

    /// The current value's dtype.
    pub fn dtype(&self) -> DType {
        self.current().dtype()
    }

    /// Reads the current value. Under active tapes this is a recorded op, so
    /// gradients flow back to the variable; a trainable variable is watched
    /// by tapes that watch accessed variables.
    pub fn read(&self) -> Tensor {
        let value = hook().and_then(|h| h.shadow(self)).unwrap_or_else(|| self.current());
        if !dispatch::listening() {
            return value;
        }
        let out = value.alias();
        if dispatch::listens(Kind::Trace)
            && let Some(h) = hook()
        {
            h.read(self, &out);
        }
        tape::variable_accessed(self);
        // the read's tangent is the variable's
        let jvp = |t: &[Option<Tensor>], o: &Tensor| crate::ops::tangent_or_zero(&t[0], o);
        dispatch::bind_untraced(
            "ReadVariable",
            Operands::Ids(&[(self.handle(), value.dtype())]),
            std::slice::from_ref(&out),
            &mut tape::pass_through,
            Some(&jvp),
        );
        out
    }

    fn mismatch(&self, op: &'static str, cur: &Tensor, v: &Tensor) -> Result<()> {
        if cur.shape() != v.shape() || cur.dtype() != v.dtype() {
            return Err(Error::VariableMismatch {
                op,
                name: self.inner.name.clone(),
                expected: cur.shape().to_vec(),
                expected_dtype: cur.dtype(),
                got: v.shape().to_vec(),
                got_dtype: v.dtype(),
            });
        }
        Ok(())
    }

    /// Replaces the value with `f(current)` under the write lock, so
    /// concurrent updates are not lost. `v` is checked against the current
    /// shape and dtype.
    fn update(&self, op: &'static str, v: &Tensor, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<()> {
        let mut slot = self.inner.value.write().unwrap_or_else(|e| e.into_inner());
        self.mismatch(op, &slot, v)?;
        let new = tape::without_tapes(|| f(&slot))?;
        *slot = new;
        Ok(())
    }

    /// Replaces the value (same shape and dtype). Not differentiable.
    pub fn assign(&self, value: &Tensor) -> Result<()> {
        if let Some(r) = traced_write(self, Write::Assign, &[value]) {
            return r;
        }
        // (a value on another device is copied to the variable's, as
        // PyTorch's `copy_` and TensorFlow's `assign` do)
        let device = self.device();
        let value = &if value.device() != device {
            crate::kernels::gpu::to_device("assign", value, device)?
        } else {
            value.clone()
        };
        self.update("assign", value, |_| Ok(value.clone()))
    }

    /// Adds `delta` to the value (same shape and dtype), atomically. Not
    /// differentiable.
    pub fn assign_add(&self, delta: &Tensor) -> Result<()> {
        if let Some(r) = traced_write(self, Write::AssignAdd, &[delta]) {
            return r;
        }
        self.update("assign_add", delta, |cur| cur.add(delta))
    }

    /// Subtracts `delta` from the value (same shape and dtype), atomically.
    /// Not differentiable.
    pub fn assign_sub(&self, delta: &Tensor) -> Result<()> {
        if let Some(r) = traced_write(self, Write::AssignSub, &[delta]) {
            return r;
        }
        self.update("assign_sub", delta, |cur| cur.sub(delta))
    }

    /// One step of gradient descent: the value becomes `value - lr * grad`
    /// (TensorFlow's `ApplyGradientDescent`, PyTorch's
    /// `p.add_(g, alpha=-lr)`), atomically. For `f32` and `f64` this is one
    /// pass, written over the value's buffer when nothing else holds it
    /// (a tensor returned by an earlier [`read`](Self::read) keeps its old
    /// value either way). `grad` must have the variable's shape and dtype.
    /// Not differentiable.
    ///
    /// ```
    /// use gradtape::{Tensor, Variable};
    /// let v = Variable::new(Tensor::vector(&[1.0f32, 2.0]));
    /// v.apply_gradient_descent(0.5, &Tensor::vector(&[2.0f32, -4.0]))?;
    /// assert_eq!(v.read().to_vec::<f32>()?, vec![0.0, 4.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn apply_gradient_descent(&self, lr: f64, grad: &Tensor) -> Result<()> {
        if let Some(r) = traced_write(self, Write::GradientDescent(F64(lr)), &[grad]) {
            return r;
        }
        let mut slot = self.inner.value.write().unwrap_or_else(|e| e.into_inner());
        self.mismatch("apply_gradient_descent", &slot, grad)?;
        if slot.device().is_cuda() || grad.device().is_cuda() {
            // (f32 and f64: one pass, `w - g·lr` rounded as on the CPU)
            let fused = matches!(slot.dtype(), DType::F32 | DType::F64).then(|| {
                dispatch::device::offload(
                    "apply_gradient_descent",
                    &[&slot, grad],
                    |_| {
                        let mut new = crate::kernels::cuda::optimizer_update(
                            "apply_gradient_descent",
                            &slot,
                            &[],
                            grad,
                            crate::kernels::cuda::GRADIENT_DESCENT,
                            &[lr],
                            0.0,
                            lr,
                        )?;
                        Ok(new.remove(0))
                    },
                    |h| h[0].sub(&h[1].mul_scalar(lr)?),
                )
            });
            let new = match fused.flatten() {
                Some(r) => r?,
                None => tape::without_tapes(|| slot.sub(&grad.mul_scalar(lr)?))?,
            };
            *slot = new;
            return Ok(());
        }
        crate::tensor::with_float_dtype!(slot.dtype(), T => {
            crate::kernels::cpu::elementwise::sub_scaled_in_place::<T>("apply_gradient_descent", &mut slot, <T as crate::tensor::Element>::from_f64(lr), grad)
        }, _ => {
            let new = tape::without_tapes(|| slot.sub(&grad.mul_scalar(lr)?))?;
            *slot = new;
            Ok(())
        })
    }

    /// Adds sparse rows to the value, atomically, without building a dense
    /// delta (repeated indices accumulate, as TensorFlow's `scatter_add`).
    /// The rows' dense shape and dtype must be the variable's (a numeric
    /// dtype). The rows are written in place when nothing else holds the
    /// value, so the cost is the rows', not the table's; a tensor returned
    /// by an earlier [`read`](Self::read) keeps its old value (the table is
    /// copied once then). Not differentiable.
    ///
    /// ```
    /// use gradtape::{IndexedSlices, Tensor, Variable};
    /// let v = Variable::new(Tensor::zeros(&[3, 2], gradtape::DType::F64));
    /// let rows = IndexedSlices::new(Tensor::ones(&[2, 2], gradtape::DType::F64), Tensor::vector(&[2i64, 2]), &[3, 2])?;
    /// v.scatter_add(&rows)?;
    /// assert_eq!(v.read().to_vec::<f64>()?, vec![0.0, 0.0, 0.0, 0.0, 2.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn scatter_add(&self, rows: &IndexedSlices) -> Result<()> {
        let w = Write::ScatterAdd(rows.dense_shape().to_vec());
        if let Some(r) = traced_write(self, w, &[rows.values(), rows.indices()]) {
            return r;
        }
        self.scatter("scatter_add", rows, |slot| add_rows("scatter_add", slot, rows, false))
    }

    /// Subtracts sparse rows from the value, atomically, in place as
    /// [`scatter_add`](Self::scatter_add) (repeated indices accumulate). For
    /// an SGD step on a sparse gradient see
    /// [`apply_sparse_gradient_descent`](Self::apply_sparse_gradient_descent).
    /// Not differentiable.
    pub fn scatter_sub(&self, rows: &IndexedSlices) -> Result<()> {
        let w = Write::ScatterSub(rows.dense_shape().to_vec());
        if let Some(r) = traced_write(self, w, &[rows.values(), rows.indices()]) {
            return r;
        }
        self.scatter("scatter_sub", rows, |slot| add_rows("scatter_sub", slot, rows, true))
    }

    /// Runs `f` on the value itself under the write lock, outside any tape:
    /// the optimizers' fused in-place updates (`crate::optim`) write through
    /// it. `f` must keep the shape and dtype.
    pub(crate) fn with_value_mut<R>(&self, f: impl FnOnce(&mut Tensor) -> Result<R>) -> Result<R> {
        let mut slot = self.inner.value.write().unwrap_or_else(|e| e.into_inner());
        let slot = &mut *slot;
        tape::without_tapes(move || f(slot))
    }

    /// The write lock of the stored value, held by the caller: the
    /// optimizers' batched update (`crate::optim`) holds those of every
    /// variable and slot it writes, taken in the order of their handles,
    /// while one parallel pass writes them all. Writers through it write
    /// outside any tape and keep the shape and dtype.
    pub(crate) fn write_value(&self) -> std::sync::RwLockWriteGuard<'_, Tensor> {
        self.inner.value.write().unwrap_or_else(|e| e.into_inner())
    }

    /// One step of gradient descent on sparse rows: `value[indices[j]] -=
    /// lr * values[j]` (TensorFlow's `SparseApplyGradientDescent`; repeated
    /// indices accumulate), atomically and in place as
    /// [`scatter_add`](Self::scatter_add): the cost is the rows', not the
    /// table's, and no scaled copy of the rows is built. `f32` and `f64`
    /// tables; other numeric dtypes go through
    /// [`IndexedSlices::scale`] (so `lr` must be exact for integers). Not
    /// differentiable.
    ///
    /// ```
    /// use gradtape::{GradientTape, Tensor, Variable};
    /// let table = Variable::new(Tensor::ones(&[1000, 4], gradtape::DType::F32));
    /// let tape = GradientTape::new();
    /// let loss = tape.record(|| table.read().gather(&Tensor::vector(&[7i64, 7, 3]), 0)?.sum_all())?;
    /// let g = tape.sparse_gradient(&loss, &table)?.unwrap();
    /// table.apply_sparse_gradient_descent(0.25, g.as_sparse().unwrap())?;
    /// let rows = table.read().gather(&Tensor::vector(&[7i64, 3, 0]), 0)?;
    /// assert_eq!(rows.to_vec::<f32>()?, [[0.5f32; 4], [0.75; 4], [1.0; 4]].concat());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn apply_sparse_gradient_descent(&self, lr: f64, rows: &IndexedSlices) -> Result<()> {
        const OP: &str = "apply_sparse_gradient_descent";
        let w = Write::SparseGradientDescent(F64(lr), rows.dense_shape().to_vec());
        if let Some(r) = traced_write(self, w, &[rows.values(), rows.indices()]) {
            return r;
        }
        self.scatter(OP, rows, |slot| {
            with_float_dtype!(slot.dtype(), T => {
                let a = <T as Element>::from_f64(lr);
                update_rows::<T>(OP, slot, rows.values(), rows.indices(), move |d, s| d - a * s)
            }, _ => add_rows(OP, slot, &rows.scale(lr)?, true))
        })
    }

    /// Runs `f` on the value under the write lock, after checking the rows'
    /// dense shape and dtype against it.
    fn scatter(&self, op: &'static str, rows: &IndexedSlices, f: impl FnOnce(&mut Tensor) -> Result<()>) -> Result<()> {
        let mut slot = self.inner.value.write().unwrap_or_else(|e| e.into_inner());
        if rows.dense_shape() != slot.shape() || rows.dtype() != slot.dtype() {
            return Err(Error::VariableMismatch {
                op,
                name: self.inner.name.clone(),
                expected: slot.shape().to_vec(),
                expected_dtype: slot.dtype(),
                got: rows.dense_shape().to_vec(),
                got_dtype: rows.dtype(),
            });
        }
        f(&mut slot)
    }
}

/// `slot[indices] += rows` (or `-=`), in place where possible, for every
/// numeric dtype (integers wrap).
fn add_rows(op: &'static str, slot: &mut Tensor, rows: &IndexedSlices, negate: bool) -> Result<()> {
    let (u, i) = (rows.values(), rows.indices());
    with_num_dtype!(slot.dtype(), T => if negate {
        update_rows::<T>(op, slot, u, i, |d, s| d.sub_wrap(s))
    } else {
        update_rows::<T>(op, slot, u, i, |d, s| d.add_wrap(s))
    }, _ => Err(Error::UnsupportedDType { op, dtype: slot.dtype(), expected: "a numeric dtype" }))
}

impl std::fmt::Debug for Variable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Variable('{}', {})", self.inner.name, self.current())
    }
}

/// What a tracer does with variables: installed by the layer above
/// (`function`, which this one cannot name) when it first traces. Without
/// it, or outside a trace, reads and writes go to the variable itself.
pub(crate) trait VariableHook: Sync {
    /// The value `v` has for the active trace (its shadow, if written in it).
    fn shadow(&self, v: &Variable) -> Option<Tensor>;
    /// Records a read of `v` whose output is `out` (while a trace records).
    fn read(&self, v: &Variable, out: &Tensor);
    /// A write inside a trace: recorded and applied to the shadow
    /// (`Some(result)`); `None` outside one (the write goes ahead).
    fn write(&self, v: &Variable, w: Write, args: &[&Tensor]) -> Option<Result<()>>;
    /// A variable was made (noted by the active traces, if any).
    fn created(&self, v: &Variable);
}

static HOOK: OnceLock<&'static dyn VariableHook> = OnceLock::new();

/// Installs the tracer's hook (the first installation stands).
pub(crate) fn install_hook(h: &'static dyn VariableHook) {
    let _ = HOOK.set(h);
}

#[inline]
fn hook() -> Option<&'static dyn VariableHook> {
    HOOK.get().copied()
}

/// The hook at the top of every write (see [`VariableHook::write`]).
fn traced_write(v: &Variable, w: Write, args: &[&Tensor]) -> Option<Result<()>> {
    hook()?.write(v, w, args)
}

/// Which write a node makes.
#[derive(Clone, Debug)]
pub(crate) enum Write {
    /// `v = x`
    Assign,
    /// `v += x`
    AssignAdd,
    /// `v -= x`
    AssignSub,
    /// `v -= lr · g`
    GradientDescent(F64),
    /// rows added (inputs: values, indices)
    ScatterAdd(Vec<usize>),
    /// rows subtracted (inputs: values, indices)
    ScatterSub(Vec<usize>),
    /// rows times `lr` subtracted (inputs: values, indices)
    SparseGradientDescent(F64, Vec<usize>),
}

impl Write {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Write::Assign => "AssignVariable",
            Write::AssignAdd => "AssignAddVariable",
            Write::AssignSub => "AssignSubVariable",
            Write::GradientDescent(_) => "ApplyGradientDescent",
            Write::ScatterAdd(_) => "ScatterAddVariable",
            Write::ScatterSub(_) => "ScatterSubVariable",
            Write::SparseGradientDescent(..) => "SparseApplyGradientDescent",
        }
    }

    /// Applies the write to `v` through its public method.
    pub(crate) fn apply(&self, v: &Variable, args: &[Tensor]) -> Result<()> {
        let rows = |shape: &[usize]| IndexedSlices::new(args[0].clone(), args[1].clone(), shape);
        match self {
            Write::Assign => v.assign(&args[0]),
            Write::AssignAdd => v.assign_add(&args[0]),
            Write::AssignSub => v.assign_sub(&args[0]),
            Write::GradientDescent(lr) => v.apply_gradient_descent(lr.0, &args[0]),
            Write::ScatterAdd(s) => v.scatter_add(&rows(s)?),
            Write::ScatterSub(s) => v.scatter_sub(&rows(s)?),
            Write::SparseGradientDescent(lr, s) => v.apply_sparse_gradient_descent(lr.0, &rows(s)?),
        }
    }
}
