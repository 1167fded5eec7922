//! Jacobians on a tape: [`GradientTape::jacobian`] and
//! [`GradientTape::batch_jacobian`], after TensorFlow's. They live in the
//! function layer, beside vmap, which the vectorized ones use (their
//! options, [`JacobianOptions`], are the tape's).
//!
//! A Jacobian is a stack of vector-Jacobian products, one per element of the
//! target, each seeded with a one-hot cotangent (a row of an identity).
//!
//! **Vectorized** (the default), the Jacobian is a use of
//! [`vmap`](crate::vmap())'s machinery, as `vmap(vjp)` is in JAX: the
//! backward pass for *one* cotangent is traced into a graph whose input is
//! that cotangent (the same tracing by which [`function`](crate::function())
//! differentiates: the rules run on the first one-hot row, their ops
//! recorded as graph nodes, the forward values they read held as constants
//! or captures), and vmap's batching interpreter runs that graph on all the
//! one-hot rows at once, each node by its batching rule. Only the cotangent
//! is batched, so a node that reads only forward values runs once, as
//! itself. A node without a batching rule runs in vmap's fallback loop (once
//! per row; logged once per op, listed by
//! [`vmap_fallbacks`](crate::vmap_fallbacks)). A backward pass that cannot
//! be traced at all (a custom op without a descriptor in it, a rule that
//! reads a cotangent's values) runs as the non-vectorized mode does, one
//! pass per row (logged once). VJP rules are thus written for one plain
//! cotangent only: batching is the interpreter's business.
//!
//! The one-row pass runs on every call, because only running the rules
//! says which forward tensors they read (each rule holds its own). The
//! trace wants only its graph, so products of the cotangent are not
//! computed in it (see `trace::graph_only`), and the optimized graph is
//! kept by the traced graph's structure (see `vmap::cache`): a Jacobian of
//! a tape like an earlier one runs the kept graph on its own forward
//! tensors instead of optimizing again.
//!
//! **Non-vectorized**, one backward pass runs per row, spread over threads
//! when no tape is recording on this thread (else sequentially, so the
//! recording tapes see every row); as in TensorFlow that needs a persistent
//! tape.
//!
//! Everything is computed with recorded ops (the interpreter runs ordinary
//! eager ops on the very forward tensors the rules read), so a Jacobian
//! taken under an outer tape can be differentiated again: a Hessian is the
//! Jacobian of a gradient. Under a trace (a Jacobian inside a `function`)
//! the batched ops are recorded into the enclosing graph.

use std::cell::RefCell;

use crate::autodiff::backprop::{backprop, Pass, SourceInfo, Unconnected};
use crate::autodiff::gradient::densify;
use crate::autodiff::gradient_tape::GradientTape;
use crate::autodiff::jacobian::JacobianOptions;
use crate::autodiff::sources::{source_infos, Sources};
use crate::autodiff::tape::{self, OpRecord, TapeState};
use crate::error::{Error, Result};
use crate::tensor::layout::checked_numel;
use crate::tensor::{Tensor, TensorId};

/// `n` one-hot rows: an identity of shape `[n, n]` in `t`'s dtype.
fn eye_like(op: &'static str, t: &Tensor, n: usize) -> Result<Tensor> {
    let eye = Tensor::try_eye(n, t.dtype()).map_err(|e| e.for_op(op))?;
    crate::kernels::gpu::to_device(op, &eye, t.device())
}

/// Checks that every source's result shape (`shape(s)`) is valid.
fn check_shapes(op: &'static str, infos: &[SourceInfo], shape: impl Fn(&SourceInfo) -> Vec<usize>) -> Result<()> {
    for s in infos {
        checked_numel(op, &shape(s))?;
    }
    Ok(())
}

fn concat(a: &[usize], b: &[usize]) -> Vec<usize> {
    let mut s = a.to_vec();
    s.extend_from_slice(b);
    s
}

impl GradientTape {
    /// The Jacobian of `target` w.r.t. each source: a tensor of shape
    /// `target.shape ++ source.shape` whose entry `[i..., j...]` is
    /// `∂target[i...] / ∂source[j...]`. Sources are given as for
    /// [`gradient`](Self::gradient) and the result has the same structure;
    /// unconnected and integer sources give `None`.
    ///
    /// Vectorized: all rows at once, the backward pass for one row traced
    /// and batched over the rows by [`vmap`](crate::vmap())'s interpreter. On
    /// a one-shot tape it can be called once.
    ///
    /// ```
    /// use gradtape::{GradientTape, Tensor};
    /// let x = Tensor::vector(&[1.0f64, 2.0]);
    /// let y = Tensor::vector(&[3.0f64, 4.0]);
    /// let tape = GradientTape::persistent();
    /// let z = tape.record(|| {
    ///     tape.watch(&[&x, &y]);
    ///     x.mul(&x)?.mul(&y)
    /// })?;
    /// let [jx, jy] = tape.jacobian(&z, &[&x, &y])?;
    /// assert_eq!(jx.unwrap().to_vec::<f64>()?, vec![6.0, 0.0, 0.0, 16.0]);
    /// assert_eq!(jy.unwrap().to_vec::<f64>()?, vec![1.0, 0.0, 0.0, 4.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn jacobian<S: Sources + ?Sized>(&self, target: &Tensor, sources: &S) -> Result<S::Output> {
        self.jacobian_with(target, sources, JacobianOptions::default())
    }

    /// [`jacobian`](Self::jacobian) with options: zeros for unconnected
    /// sources, and the non-vectorized mode (one backward pass per row,
    /// in parallel; needs a persistent tape).
    ///
    /// ```
    /// use gradtape::{GradientTape, JacobianOptions, Tensor, Unconnected};
    /// let x = Tensor::vector(&[1.0f32, 2.0, 3.0]);
    /// let c = Tensor::scalar(1.0f32);
    /// let tape = GradientTape::persistent();
    /// let y = tape.record(|| { tape.watch(&[&x, &c]); x.sin()?.sum_all() })?;
    /// let opts = JacobianOptions::default().vectorized(false).unconnected(Unconnected::Zero);
    /// let (jx, jc) = tape.jacobian_with(&y, &(&x, &c), opts)?;
    /// assert_eq!(jx.unwrap().shape(), &[3]);
    /// assert_eq!(jc.unwrap().to_scalar::<f32>()?, 0.0);
    /// // the non-vectorized mode needs a persistent tape
    /// let once = GradientTape::new();
    /// let y = once.record(|| { once.watch(&x); x.exp() })?;
    /// assert!(once.jacobian_with(&y, &x, JacobianOptions::default().vectorized(false)).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn jacobian_with<S: Sources + ?Sized>(
        &self,
        target: &Tensor,
        sources: &S,
        opts: JacobianOptions,
    ) -> Result<S::Output> {
        let infos = source_infos(sources);
        let n = target.numel();
        check_shapes("jacobian", &infos, |s| concat(target.shape(), &s.shape))?;
        let seed = eye_like("jacobian", target, n)?.reshape(&concat(&[n], target.shape()))?;
        let rows = self.jacobian_rows("jacobian", target, seed, &infos, &opts)?;
        let mut out = Vec::with_capacity(infos.len());
        for (r, s) in rows.into_iter().zip(&infos) {
            let shape = concat(target.shape(), &s.shape);
            out.push(finish(r, s, &shape, &opts, |t| t.reshape(&shape))?);
        }
        Ok(sources.pack(&mut out.into_iter()))
    }

    /// The Jacobian of each example of a batch: for `target` of shape
    /// `[b, y...]` and a source of shape `[b, x...]` (ranks at least 2, the
    /// same `b`), a tensor of shape `[b, y..., x...]` holding
    /// `∂target[i, y...] / ∂source[i, x...]`. Rows of different examples are
    /// assumed independent (as in TensorFlow) and are never formed: the
    /// backward pass has `prod(y)` rows, not `b · prod(y)`.
    ///
    /// ```
    /// use gradtape::{GradientTape, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let y = Tensor::from_vec(vec![3.0f64, 4.0, 5.0, 6.0], &[2, 2])?;
    /// let tape = GradientTape::new();
    /// let z = tape.record(|| { tape.watch(&x); x.mul(&x)?.mul(&y) })?;
    /// let j = tape.batch_jacobian(&z, &x)?.unwrap();
    /// assert_eq!(j.shape(), &[2, 2, 2]);
    /// assert_eq!(j.to_vec::<f64>()?, vec![6.0, 0.0, 0.0, 16.0, 30.0, 0.0, 0.0, 48.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn batch_jacobian<S: Sources + ?Sized>(&self, target: &Tensor, sources: &S) -> Result<S::Output> {
        self.batch_jacobian_with(target, sources, JacobianOptions::default())
    }

    /// [`batch_jacobian`](Self::batch_jacobian) with options (see
    /// [`JacobianOptions`]).
    pub fn batch_jacobian_with<S: Sources + ?Sized>(
        &self,
        target: &Tensor,
        sources: &S,
        opts: JacobianOptions,
    ) -> Result<S::Output> {
        let infos = source_infos(sources);
        let ts = target.shape();
        for s in &infos {
            if ts.len() < 2 || s.shape.len() < 2 {
                return Err(Error::invalid(
                    "batch_jacobian",
                    format!(
                        "target and source need rank >= 2, got target shape {ts:?} and source shape {:?}",
                        &s.shape[..]
                    ),
                ));
            }
            if ts[0] != s.shape[0] {
                return Err(Error::invalid(
                    "batch_jacobian",
                    format!(
                        "first dims differ: target shape {ts:?}, source shape {:?}",
                        &s.shape[..]
                    ),
                ));
            }
        }
        let b = ts.first().copied().unwrap_or(0);
        let ys = &ts[ts.len().min(1)..];
        let ny: usize = ys.iter().product();
        check_shapes("batch_jacobian", &infos, |s| concat(ts, &s.shape[1..]))?;
        checked_numel("batch_jacobian", &concat(&[ny], ts))?;
        // seed[j, i, y...] = 1 where y... is the j-th element of y
        let seed = eye_like("batch_jacobian", target, ny)?
            .reshape(&concat(&[ny, 1], ys))?
            .broadcast_to(&concat(&[ny, b], ys))?
            .contiguous()
            .map_err(|e| e.for_op("batch_jacobian"))?;
        let rows = self.jacobian_rows("batch_jacobian", target, seed, &infos, &opts)?;
        let mut out = Vec::with_capacity(infos.len());
        for (r, s) in rows.into_iter().zip(&infos) {
            let shape = concat(ts, &s.shape[1..]);
            out.push(finish(r, s, &shape, &opts, |t| {
                // [ny, b, x...] -> [b, ny, x...] -> [b, y..., x...]
                let mut perm: Vec<usize> = (0..t.rank()).collect();
                perm.swap(0, 1);
                t.permute(&perm)?.reshape(&shape)
            })?);
        }
        Ok(sources.pack(&mut out.into_iter()))
    }

    /// The backward passes of a Jacobian: `seed` holds one cotangent of
    /// `target` per row along axis 0; the result, per source, stacks the
    /// rows' gradients (`None` where no row reached the source).
    fn jacobian_rows(
        &self,
        op: &'static str,
        target: &Tensor,
        seed: Tensor,
        infos: &[SourceInfo],
        opts: &JacobianOptions,
    ) -> Result<Vec<Option<Tensor>>> {
        let cell = &self.cell;
        if cell.used.get() || (!opts.vectorized && !cell.persistent) {
            return Err(Error::TapeNotPersistent { op });
        }
        if !cell.persistent && cell.recording.get() {
            // as `gradient`: a one-shot tape stops recording before its backward pass
            tape::pop(cell);
        }
        if !cell.persistent {
            cell.used.set(true);
        }
        let n = seed.shape().first().copied().unwrap_or(0);
        if n == 0 {
            // no rows: nothing to differentiate; `finish` gives empty zeros
            return infos
                .iter()
                .map(|s| {
                    crate::kernels::gpu::filled("zeros", &concat(&[0], &s.shape), 0.0, s.dtype, s.device).map(Some)
                })
                .collect();
        }
        let targets = std::slice::from_ref(target);
        if opts.vectorized {
            match vectorized(&cell.state, targets, &seed, infos) {
                Ok(rows) => {
                    if !cell.persistent {
                        release(&cell.state);
                    }
                    return Ok(rows);
                }
                Err(e) => note_loop(op, &e),
            }
        }
        let row_shape = seed.shape()[1..].to_vec();
        let row = |j: usize| seed.narrow(0, j, 1)?.reshape(&row_shape);
        let per_row: Vec<Vec<Option<Tensor>>> = if tape::any_active() {
            // tapes record on this thread: run here, so they see every row
            (0..n)
                .map(|j| {
                    densify(backprop(
                        &cell.state,
                        false,
                        targets,
                        vec![row(j)?],
                        infos,
                        Pass::plain(),
                    )?)
                })
                .collect::<Result<_>>()?
        } else {
            // a snapshot of the tape that worker threads can read
            let (ids, ops): (Vec<(TensorId, u32)>, Vec<OpRecord>) = {
                let st = cell.state.borrow();
                (
                    st.tensors.iter().map(|(&k, &v)| (k, v)).collect(),
                    (0..st.ops.len()).map(|i| st.ops[i].clone()).collect(),
                )
            };
            let fresh = || {
                let mut st = TapeState::default();
                st.tensors.extend(ids.iter().copied());
                for r in &ops {
                    st.ops.push(r.clone());
                }
                RefCell::new(st)
            };
            let wave = opts.parallel_iterations.unwrap_or(n).max(1);
            let mut all = Vec::with_capacity(n);
            for start in (0..n).step_by(wave) {
                let seeds: Vec<Tensor> = (start..n.min(start + wave)).map(row).collect::<Result<_>>()?;
                // contiguous shares of the wave, one per thread, each thread
                // with its own copy of the tape; rows come back in order
                let share = seeds.len().div_ceil(crate::kernels::cpu::workers::threads().max(1));
                let done = std::thread::scope(|scope| {
                    let mut seeds = seeds.into_iter();
                    let shares: Vec<Vec<Tensor>> = std::iter::from_fn(|| {
                        let part: Vec<Tensor> = seeds.by_ref().take(share).collect();
                        (!part.is_empty()).then_some(part)
                    })
                    .collect();
                    let fresh = &fresh;
                    let handles: Vec<_> = shares
                        .into_iter()
                        .map(|part| {
                            scope.spawn(move || {
                                let st = fresh();
                                part.into_iter()
                                    .map(|s| densify(backprop(&st, false, targets, vec![s], infos, Pass::plain())?))
                                    .collect::<Result<Vec<_>>>()
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                        .collect::<Result<Vec<_>>>()
                })?;
                all.extend(done.into_iter().flatten());
            }
            all
        };
        let mut by_source: Vec<Vec<Option<Tensor>>> = vec![Vec::with_capacity(n); infos.len()];
        for r in per_row {
            for (slot, g) in by_source.iter_mut().zip(r) {
                slot.push(g);
            }
        }
        let rows = by_source.into_iter().map(stack_rows).collect();
        if !cell.persistent {
            release(&cell.state);
        }
        rows
    }
}

/// The vectorized backward passes: the pass for one cotangent of `targets`
/// traced into a graph whose input is that cotangent, then run on every row
/// of `seed` at once by the vmap interpreter, with each op's batching rule
/// (ops without one run in vmap's fallback loop). Per source, the rows'
/// gradients stacked on axis 0, `None` where none reached it.
fn vectorized(
    state: &RefCell<TapeState>,
    targets: &[Tensor],
    seed: &Tensor,
    infos: &[SourceInfo],
) -> Result<Vec<Option<Tensor>>> {
    let n = seed.shape().first().copied().unwrap_or(0);
    let (reached, rows) = super::vmap::batch_once(std::slice::from_ref(seed), n, |ct| {
        let gs = densify(backprop(
            state,
            false,
            targets,
            vec![ct[0].clone()],
            infos,
            Pass::plain(),
        )?)?;
        let reached: Vec<bool> = gs.iter().map(Option::is_some).collect();
        Ok((reached, gs.into_iter().flatten().collect()))
    })?;
    let mut rows = rows.into_iter();
    Ok(reached
        .into_iter()
        .map(|r| if r { rows.next() } else { None })
        .collect())
}

/// Logs, once per process, that a vectorized Jacobian runs row by row: its
/// backward pass could not be traced or batched (`e` says why).
fn note_loop(op: &'static str, e: &Error) {
    static LOGGED: std::sync::Once = std::sync::Once::new();
    LOGGED.call_once(|| {
        log::warn!("{op}: the backward pass could not be vectorized ({e}); it runs once per row");
    });
}

/// Frees what a one-shot tape recorded, once its Jacobian is computed (the
/// watched variables stay listed).
fn release(state: &RefCell<TapeState>) {
    let mut st = state.borrow_mut();
    let variables = std::mem::take(&mut st.variables);
    *st = TapeState::default();
    st.variables = variables;
}

/// Stacks per-row results along a new leading axis: `None` when every row
/// is `None` (or there are no rows), else rows that are `None` become zeros
/// shaped like the others.
pub fn stack_rows(rows: Vec<Option<Tensor>>) -> Result<Option<Tensor>> {
    let Some(like) = rows.iter().flatten().next().cloned() else {
        return Ok(None);
    };
    let rows: Vec<Tensor> = rows
        .into_iter()
        .map(|r| r.map_or_else(|| like.try_zeros_like(), Ok))
        .collect::<Result<_>>()?;
    crate::ops::array::join::stack(&rows).map(Some)
}

/// The final form of one source's Jacobian: `shape_rows` turns the stacked
/// rows into the result's shape; unconnected and integer sources per the
/// options.
fn finish(
    rows: Option<Tensor>,
    s: &SourceInfo,
    shape: &[usize],
    opts: &JacobianOptions,
    shape_rows: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Option<Tensor>> {
    if !s.dtype.is_float() {
        return Ok(None);
    }
    match rows {
        Some(r) => shape_rows(&r).map(Some),
        None => match opts.unconnected {
            Unconnected::None => Ok(None),
            Unconnected::Zero => crate::kernels::gpu::filled("zeros", shape, 0.0, s.dtype, s.device).map(Some),
        },
    }
}

/// How many vectorized Jacobians on this thread ran a graph kept from an
/// earlier trace of the same structure, and how many optimized their own
/// (see `vmap::cache`; for tests).
pub fn graph_cache_counts() -> (usize, usize) {
    super::vmap::cache::counts()
}

/// How many matrix products on this thread were placeholders (zeros of
/// their shape, not computed) in traces that want only their graphs, as
/// the vectorized Jacobians' traces do (for tests).
pub fn placeholder_products() -> usize {
    crate::ops::linalg::matmul::placeholders()
}
