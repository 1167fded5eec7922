//! `GradientTape`: the user-facing recorder, after `tf.GradientTape`.
//!
//! Python's `with tape:` becomes a closure, [`GradientTape::record`], or a
//! guard, [`GradientTape::enter`], whose drop stops recording. A tape is
//! bound to the thread that records on it (it is not `Send`).

use std::rc::Rc;

use smallvec::SmallVec;

use crate::autodiff::backprop::{backprop, Pass, Unconnected};
use crate::autodiff::gradient::{densify, Gradient};
use crate::autodiff::sources::{source_infos, SourceRef, Sources, Targets};
use crate::autodiff::tape::{self, TapeCell, TapeState};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Records operations for reverse-mode automatic differentiation.
///
/// ```
/// use gradtape::{GradientTape, Tensor};
/// let x = Tensor::scalar(3.0f32);
/// let tape = GradientTape::new();
/// let y = tape.record(|| {
///     tape.watch(&x);
///     x.mul(&x)
/// })?;
/// let dy_dx = tape.gradient(&y, &x)?.unwrap();
/// assert_eq!(dy_dx.to_scalar::<f32>()?, 6.0);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct GradientTape {
    pub(crate) cell: Rc<TapeCell>,
}

/// Options of [`GradientTape::gradient_with`].
#[derive(Default, Clone)]
pub struct GradientOptions {
    /// One cotangent per target (its shape and dtype), weighting that target.
    pub output_gradients: Option<Vec<Tensor>>,
    /// What unconnected sources get.
    pub unconnected: Unconnected,
    /// Tensors treated as constants: no gradient flows through them to
    /// what they were computed from (TensorFlow's `stop_gradients` of
    /// `tf.gradients`). A stopped tensor that is also a source still gets
    /// its own gradient.
    pub stop_gradients: Vec<Tensor>,
}

impl GradientOptions {
    /// Weights target `i` by `grads[i]`.
    pub fn output_gradients(mut self, grads: Vec<Tensor>) -> Self {
        self.output_gradients = Some(grads);
        self
    }

    /// Chooses what unconnected sources get.
    pub fn unconnected(mut self, u: Unconnected) -> Self {
        self.unconnected = u;
        self
    }

    /// Treats these tensors as constants (see [`stop_gradients`](Self::stop_gradients)).
    pub fn stop_gradients(mut self, stop: Vec<Tensor>) -> Self {
        self.stop_gradients = stop;
        self
    }
}

/// Keeps a tape recording until dropped; see [`GradientTape::enter`].
pub struct RecordingGuard<'a> {
    tape: &'a GradientTape,
}

impl Drop for RecordingGuard<'_> {
    fn drop(&mut self) {
        if self.tape.cell.recording.get() {
            tape::pop(&self.tape.cell);
        }
    }
}

impl Default for GradientTape {
    fn default() -> Self {
        GradientTape::new()
    }
}

impl GradientTape {
    fn with_flags(persistent: bool, watch_accessed_variables: bool) -> Self {
        GradientTape {
            cell: Rc::new(TapeCell {
                state: Default::default(),
                persistent,
                watch_accessed_variables,
                recording: Default::default(),
                used: Default::default(),
                entered: Default::default(),
                internal: false,
            }),
        }
    }

    /// A trace's own persistent tape (watches nothing by itself).
    pub(crate) fn internal() -> Self {
        GradientTape {
            cell: Rc::new(TapeCell {
                state: Default::default(),
                persistent: true,
                watch_accessed_variables: false,
                recording: Default::default(),
                used: Default::default(),
                entered: Default::default(),
                internal: true,
            }),
        }
    }

    /// A one-shot tape: one call to `gradient`, which frees the records as it goes.
    pub fn new() -> Self {
        GradientTape::with_flags(false, true)
    }

    /// A tape that allows any number of `gradient` calls and keeps its
    /// records until dropped (or reset).
    pub fn persistent() -> Self {
        GradientTape::with_flags(true, true)
    }

    /// Whether trainable variables read while recording are watched
    /// automatically (default `true`). Set it before recording.
    ///
    /// ```
    /// use gradtape::{GradientTape, Tensor, Variable};
    /// let a = Variable::new(Tensor::scalar(2.0f64));
    /// let b = Variable::new(Tensor::scalar(5.0f64));
    /// let tape = GradientTape::persistent().watch_accessed_variables(false);
    /// let (y, z) = tape.record(|| {
    ///     tape.watch(&a);
    ///     Ok((a.read().square()?, b.read().pow_scalar(3.0)?))
    /// })?;
    /// assert_eq!(tape.gradient(&y, &a)?.unwrap().to_scalar::<f64>()?, 4.0);
    /// assert!(tape.gradient(&z, &b)?.is_none());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn watch_accessed_variables(self, watch: bool) -> Self {
        GradientTape::with_flags(self.cell.persistent, watch)
    }

    /// Whether this tape is persistent.
    pub fn is_persistent(&self) -> bool {
        self.cell.persistent
    }

    /// Whether this tape is recording now.
    pub fn is_recording(&self) -> bool {
        self.cell.recording.get()
    }

    /// Starts recording until the guard drops. Entering a tape again after it
    /// stopped continues the same tape; entering one that is recording is an
    /// error.
    ///
    /// ```
    /// use gradtape::{GradientTape, Tensor};
    /// let x = Tensor::scalar(2.0f32);
    /// let tape = GradientTape::new();
    /// let y = {
    ///     let _rec = tape.enter()?;
    ///     assert!(tape.enter().is_err());
    ///     tape.watch(&x);
    ///     x.exp()?
    /// };
    /// assert!(!tape.is_recording());
    /// assert!(tape.gradient(&y, &x)?.is_some());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn enter(&self) -> Result<RecordingGuard<'_>> {
        if self.cell.recording.get() {
            return Err(Error::TapeAlreadyRecording);
        }
        tape::push(&self.cell);
        Ok(RecordingGuard { tape: self })
    }

    /// Records the ops `f` runs, like Python's `with tape:` block.
    pub fn record<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let _guard = self.enter()?;
        f()
    }

    /// Watches tensors or variables: gradients can then be taken w.r.t. them.
    /// Integer and bool tensors may be watched; they get no gradient.
    pub fn watch<S: Sources + ?Sized>(&self, sources: &S) {
        let mut refs: SmallVec<[SourceRef<'_>; 4]> = SmallVec::new();
        sources.collect(&mut refs);
        let mut st = self.cell.state.borrow_mut();
        for r in refs {
            match r {
                SourceRef::Tensor(t) => st.watch_id(t.id()),
                SourceRef::Variable(v) => st.watch_variable(v),
            }
        }
    }

    /// The variables this tape watches, in creation order.
    pub fn watched_variables(&self) -> Vec<Variable> {
        self.cell.state.borrow().variables.values().cloned().collect()
    }

    /// Runs `f` without recording on this tape (other tapes still record)
    /// and with forward mode paused: no active
    /// [`ForwardAccumulator`](crate::ForwardAccumulator) computes tangents
    /// inside. An error if the tape is not recording.
    ///
    /// ```
    /// use gradtape::{GradientTape, Tensor};
    /// let x = Tensor::scalar(4.0f32);
    /// let tape = GradientTape::new();
    /// let y = tape.record(|| {
    ///     tape.watch(&x);
    ///     tape.stop_recording(|| x.square())
    /// })?;
    /// assert!(tape.gradient(&y, &x)?.is_none());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn stop_recording<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if !self.cell.recording.get() {
            return Err(Error::TapeNotRecording);
        }
        tape::pop(&self.cell);
        struct Resume<'a>(&'a Rc<TapeCell>, u64);
        impl Drop for Resume<'_> {
            fn drop(&mut self) {
                tape::push(self.0);
                // it resumes at its old place in the nesting order
                self.0.entered.set(self.1);
            }
        }
        let _resume = Resume(&self.cell, self.cell.entered.get());
        crate::autodiff::forward::paused(f)
    }

    /// Clears everything recorded, as if the tape were exited and entered
    /// anew; a one-shot tape that was used becomes usable again.
    pub fn reset(&self) {
        *self.cell.state.borrow_mut() = TapeState::default();
        self.cell.used.set(false);
    }

    /// The gradient of `targets` (summed) w.r.t. `sources`.
    ///
    /// One source gives `Option<Tensor>` (`None` when unconnected); a slice,
    /// `Vec`, array or tuple gives the same structure of options.
    pub fn gradient<S: Sources + ?Sized>(&self, targets: impl Targets, sources: &S) -> Result<S::Output> {
        self.gradient_with(targets, sources, GradientOptions::default())
    }

    /// [`gradient`](Self::gradient) with `output_gradients` and the choice
    /// for unconnected sources.
    ///
    /// ```
    /// use gradtape::{GradientOptions, GradientTape, Tensor, Unconnected};
    /// let x = Tensor::vector(&[1.0f64, 2.0]);
    /// let c = Tensor::scalar(5.0f64);
    /// let tape = GradientTape::new();
    /// let y = tape.record(|| { tape.watch(&x); tape.watch(&c); x.square() })?;
    /// let opts = GradientOptions::default()
    ///     .output_gradients(vec![Tensor::vector(&[10.0f64, 1.0])])
    ///     .unconnected(Unconnected::Zero);
    /// let [dx, dc] = tape.gradient_with(&y, &[&x, &c], opts)?;
    /// assert_eq!(dx.unwrap().to_vec::<f64>()?, vec![20.0, 4.0]);
    /// assert_eq!(dc.unwrap().to_scalar::<f64>()?, 0.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn gradient_with<S: Sources + ?Sized>(
        &self,
        targets: impl Targets,
        sources: &S,
        opts: GradientOptions,
    ) -> Result<S::Output> {
        let grads = self.flat_gradient(targets, sources, opts)?;
        Ok(sources.pack(&mut densify(grads)?.into_iter()))
    }

    /// [`gradient`](Self::gradient) keeping sparse gradients sparse: a source
    /// reached only through `gather` along axis 0 (an embedding lookup) gets
    /// a [`Gradient::Sparse`] of the rows used, never a dense tensor of the
    /// table's size. See [`Gradient`] for how terms aggregate.
    ///
    /// ```
    /// use gradtape::{GradientTape, Tensor, Variable};
    /// let table = Variable::new(Tensor::ones(&[1000, 4], gradtape::DType::F32));
    /// let tape = GradientTape::new();
    /// let ids = Tensor::vector(&[7i64, 7, 3]);
    /// let loss = tape.record(|| table.read().gather(&ids, 0)?.sum_all())?;
    /// let g = tape.sparse_gradient(&loss, &table)?.unwrap();
    /// let rows = g.as_sparse().unwrap();
    /// assert_eq!(rows.values().shape(), &[3, 4]);
    /// assert_eq!(rows.dense_shape(), &[1000, 4]);
    /// table.apply_sparse_gradient_descent(1.0, rows)?; // an SGD step, in place
    /// assert_eq!(table.read().gather(&Tensor::vector(&[7i64]), 0)?.to_vec::<f32>()?, vec![-1.0; 4]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn sparse_gradient<S: Sources + ?Sized>(&self, targets: impl Targets, sources: &S) -> Result<S::SparseOutput> {
        self.sparse_gradient_with(targets, sources, GradientOptions::default())
    }

    /// [`sparse_gradient`](Self::sparse_gradient) with options.
    pub fn sparse_gradient_with<S: Sources + ?Sized>(
        &self,
        targets: impl Targets,
        sources: &S,
        opts: GradientOptions,
    ) -> Result<S::SparseOutput> {
        let grads = self.flat_gradient(targets, sources, opts)?;
        Ok(sources.pack_sparse(&mut grads.into_iter()))
    }

    /// The gradients of the flat list of sources.
    fn flat_gradient<S: Sources + ?Sized>(
        &self,
        targets: impl Targets,
        sources: &S,
        opts: GradientOptions,
    ) -> Result<Vec<Option<Gradient>>> {
        let cell = &self.cell;
        if cell.used.get() {
            return Err(Error::TapeNotPersistent { op: "gradient" });
        }
        if !cell.persistent && cell.recording.get() {
            // as TensorFlow: a one-shot tape stops recording before its backward pass
            tape::pop(cell);
        }
        let mut flat_targets = Vec::new();
        targets.collect_targets(&mut flat_targets);
        let seeds = match opts.output_gradients {
            None => flat_targets.iter().map(|t| t.try_ones_like()).collect::<Result<_>>()?,
            Some(g) => {
                if g.len() != flat_targets.len() {
                    return Err(Error::OutputGradientsCount {
                        expected: flat_targets.len(),
                        got: g.len(),
                    });
                }
                for (i, (g, t)) in g.iter().zip(&flat_targets).enumerate() {
                    if g.shape() != t.shape() || g.dtype() != t.dtype() {
                        return Err(Error::OutputGradientShape {
                            index: i,
                            expected: t.shape().to_vec(),
                            expected_dtype: t.dtype(),
                            got: g.shape().to_vec(),
                            got_dtype: g.dtype(),
                        });
                    }
                }
                g
            }
        };
        let infos = source_infos(sources);
        if !cell.persistent {
            cell.used.set(true);
        }
        backprop(
            &cell.state,
            !cell.persistent,
            &flat_targets,
            seeds,
            &infos,
            Pass {
                unconnected: opts.unconnected,
                stop: &opts.stop_gradients.iter().map(Tensor::id).collect::<Vec<_>>(),
            },
        )
    }
}
