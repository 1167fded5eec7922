//! User-defined gradients, after TensorFlow's `tf.custom_gradient`,
//! `record_gradient` and `gradient_override_map`.
//!
//! - [`custom_gradient`]: a forward closure returns its outputs together with
//!   a backward closure; the outputs are recorded as one op whose rule is
//!   that backward. As in TensorFlow's eager mode the forward runs with the
//!   tapes active, so a backward written with ops on tensors the forward
//!   computed is itself differentiable: gradients of gradients go through it.
//!   [`custom_gradient_with_variables`] also routes gradients to the
//!   trainable variables the forward reads.
//! - [`record_gradient`]: records already computed outputs as one op of the
//!   given inputs, with a user backward, on every active tape that watches
//!   an input (the building block of the two above).
//! - [`with_gradient_override`]: within a scope, ops of a given name are
//!   recorded with a user rule instead of their own (looked up when an op is
//!   recorded, so the override sticks to the ops run in the scope).
//!
//! User backward closures are rules like any other ([`crate::vjp`]): a
//! vectorized Jacobian traces them with the rest of the backward pass and
//! batches their ops. What they return is checked: one entry
//! per input, each `None` or of its input's shape and dtype; anything else
//! is an error naming the function (a gradient for an integer input is
//! dropped).

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use crate::autodiff::gradient_tape::GradientTape;
use crate::autodiff::tape::{vjp, Grads, VjpFn};
use crate::autodiff::variable::Variable;
use crate::dispatch::{self, Call, Operands};
use crate::error::{Error, Result};
use crate::ops::desc::{Op, ShapeOp};
use crate::tensor::{DType, Tensor, TensorId};

/// Shape and dtype of an input, what a returned gradient is checked against.
struct InputMeta {
    shape: Vec<usize>,
    dtype: DType,
}

/// Checks the gradients a user backward returned against the inputs.
fn check_grads(name: &'static str, metas: &[InputMeta], grads: Vec<Option<Tensor>>) -> Result<Grads> {
    if grads.len() != metas.len() {
        return Err(Error::invalid(
            name,
            format!(
                "custom gradient function returned {} gradients for {} inputs",
                grads.len(),
                metas.len()
            ),
        ));
    }
    let mut out = Grads::new();
    for (i, (g, m)) in grads.into_iter().zip(metas).enumerate() {
        match g {
            Some(_) if !m.dtype.is_float() => out.push(None),
            Some(g) if g.shape() != m.shape.as_slice() || g.dtype() != m.dtype => {
                return Err(Error::invalid(
                    name,
                    format!(
                        "custom gradient function returned a gradient of shape {:?} and dtype {:?} for input {i} of shape {:?} and dtype {:?}",
                        g.shape(),
                        g.dtype(),
                        m.shape,
                        m.dtype
                    ),
                ))
            }
            g => out.push(g),
        }
    }
    Ok(out)
}

/// Records `outputs` as one op of `inputs` and `vars` (in that order) on the
/// active tapes that watch one of them; `backward` maps output cotangents to
/// one gradient per input and variable.
pub(crate) fn record_checked(
    name: &'static str,
    inputs: &[Tensor],
    vars: &[Variable],
    outputs: &[Tensor],
    backward: impl Fn(&[Tensor]) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
) {
    if !dispatch::differentiating() {
        return;
    }
    let mut ids: Vec<(TensorId, DType)> = inputs.iter().map(|t| (t.id(), t.dtype())).collect();
    ids.extend(vars.iter().map(|v| (v.handle(), v.dtype())));
    let rule = || {
        let mut metas: Vec<InputMeta> = inputs
            .iter()
            .map(|t| InputMeta {
                shape: t.shape().to_vec(),
                dtype: t.dtype(),
            })
            .collect();
        metas.extend(vars.iter().map(|v| InputMeta {
            shape: v.shape(),
            dtype: v.dtype(),
        }));
        vjp(move |dys, _| check_grads(name, &metas, backward(dys)?))
    };
    record_rule(name, &ids, outputs, rule);
}

/// Records `outputs` as one op of the inputs `ids` (tensor ids or variable
/// handles, with dtypes) on the active tapes that watch one of them, and
/// gives them tangents in the active accumulators, with the rule `rule`
/// builds (built at most once, only if needed).
pub(crate) fn record_rule(
    name: &'static str,
    ids: &[(TensorId, DType)],
    outputs: &[Tensor],
    rule: impl FnOnce() -> VjpFn,
) {
    // forward accumulators get tangents from the rule (the double-VJP
    // construction: it is built from differentiable ops)
    let mut once = Some(rule);
    let mut make = || (once.take().expect("built once"))();
    dispatch::bind_untraced(name, Operands::Ids(ids), outputs, &mut make, None);
}

/// A fresh tensor sharing `t`'s storage (a new id, as an op's output must
/// have), bound as an `Identity` of `t` that only a trace sees: the alias
/// a custom gradient returns is then a value of the graph, not an unknown
/// tensor the trace would refuse.
pub(crate) fn traced_alias(t: &Tensor) -> Tensor {
    dispatch::bind_nondiff(Op::Shape(ShapeOp::Identity), &[t], t.alias())
}

/// Runs `f` and lists the trainable variables it read, in creation order.
pub(crate) fn variables_read<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, Vec<Variable>)> {
    let watcher = GradientTape::persistent();
    let value = watcher.record(f)?;
    Ok((value, watcher.watched_variables()))
}

/// Records `outputs` (computed from `inputs` by the caller) as one op named
/// `name` on every active tape that watches an input, with `backward` as
/// its gradient: given one cotangent per output (each of its output's shape
/// and dtype) it returns one gradient per input, `None` for none.
///
/// The outputs must be new tensors, none of them one of the inputs (use
/// [`Tensor::identity`] to pass an input through); an error otherwise. Like
/// TensorFlow's `record_gradient`.
///
/// ```
/// use gradtape::{record_gradient, GradientTape, Tensor};
/// let x = Tensor::scalar(3.0f64);
/// let tape = GradientTape::new();
/// let y = tape.record(|| {
///     tape.watch(&x);
///     // y = x^2 computed where no tape sees it, then recorded with its rule
///     let y = tape.stop_recording(|| x.square())?;
///     let xc = x.clone();
///     record_gradient("MySquare", &[x.clone()], &[y.clone()], move |dy: &[Tensor]| {
///         Ok(vec![Some(dy[0].mul(&xc)?.mul_scalar(2.0)?)])
///     })?;
///     Ok(y)
/// })?;
/// assert_eq!(tape.gradient(&y, &x)?.unwrap().to_scalar::<f64>()?, 6.0);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn record_gradient<B>(name: &'static str, inputs: &[Tensor], outputs: &[Tensor], backward: B) -> Result<()>
where
    B: Fn(&[Tensor]) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
{
    for (j, o) in outputs.iter().enumerate() {
        if let Some(i) = inputs.iter().position(|x| x.id() == o.id()) {
            return Err(Error::invalid(
                name,
                format!("output {j} is input {i}: record a new tensor (for example its identity)"),
            ));
        }
    }
    record_checked(name, inputs, &[], outputs, backward);
    Ok(())
}

/// A forward with its own gradient, like `tf.custom_gradient`.
///
/// `f` gets `inputs` and returns the outputs with a backward closure; the
/// returned outputs (fresh tensors with the same values) are recorded as one
/// op named `name` whose gradient is that backward: given one cotangent per
/// output it returns one gradient per input (`None` for none). Write the
/// backward with ops: it is then differentiable, and nested tapes give
/// higher derivatives through it. If nothing upstream is watched (say the
/// input went through `stop_gradient`), the backward is never called.
///
/// Errors: when `f` reads a trainable variable (use
/// [`custom_gradient_with_variables`]); during backprop, when the backward
/// returns the wrong number of gradients or a gradient of the wrong shape or
/// dtype (the message names `name`).
///
/// ```
/// use gradtape::{custom_gradient, GradientTape, Tensor};
/// // log(1 + e^x) with the numerically stable gradient 1 - 1 / (1 + e^x)
/// let x = Tensor::scalar(0.0f64);
/// let tape = GradientTape::new();
/// let y = tape.record(|| {
///     tape.watch(&x);
///     let ys = custom_gradient("log1pexp", &[x.clone()], |xs| {
///         let e = xs[0].exp()?;
///         let y = e.add_scalar(1.0)?.log()?;
///         let backward = move |dy: &[Tensor]| {
///             let s = e.add_scalar(1.0)?;
///             Ok(vec![Some(dy[0].mul(&s.ones_like().sub(&s.ones_like().div(&s)?)?)?)])
///         };
///         Ok((vec![y], backward))
///     })?;
///     Ok(ys[0].clone())
/// })?;
/// assert_eq!(tape.gradient(&y, &x)?.unwrap().to_scalar::<f64>()?, 0.5);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn custom_gradient<F, B>(name: &'static str, inputs: &[Tensor], f: F) -> Result<Vec<Tensor>>
where
    F: FnOnce(&[Tensor]) -> Result<(Vec<Tensor>, B)>,
    B: Fn(&[Tensor]) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
{
    let ((outs, backward), vars) = variables_read(|| f(inputs))?;
    if !vars.is_empty() {
        let names: Vec<&str> = vars.iter().map(|v| v.name()).collect();
        return Err(Error::invalid(
            name,
            format!(
                "the forward read trainable variables {names:?}: use custom_gradient_with_variables to give their gradients"
            ),
        ));
    }
    let outs: Vec<Tensor> = outs.iter().map(traced_alias).collect();
    record_checked(name, inputs, &[], &outs, backward);
    Ok(outs)
}

/// [`custom_gradient`] for a forward that reads trainable variables: the
/// backward gets the output cotangents and the variables read (in creation
/// order) and returns `(input gradients, variable gradients)`, one entry per
/// input and per variable.
///
/// ```
/// use gradtape::{custom_gradient_with_variables, GradientTape, Tensor, Variable};
/// let w = Variable::new(Tensor::scalar(4.0f64));
/// let x = Tensor::scalar(3.0f64);
/// let tape = GradientTape::new();
/// let y = tape.record(|| {
///     tape.watch(&x);
///     let ys = custom_gradient_with_variables("scale", &[x.clone()], |xs| {
///         let (xv, wv) = (xs[0].clone(), w.read());
///         let y = xv.mul(&wv)?;
///         let backward = move |dy: &[Tensor], vars: &[Variable]| {
///             assert_eq!(vars.len(), 1);
///             // deliberately scaled by 10 for the variable, to show it is used
///             Ok((vec![Some(dy[0].mul(&wv)?)], vec![Some(dy[0].mul(&xv)?.mul_scalar(10.0)?)]))
///         };
///         Ok((vec![y], backward))
///     })?;
///     Ok(ys[0].clone())
/// })?;
/// let [dx, dw] = tape.gradient(&y, &[gradtape::SourceRef::from(&x), (&w).into()])?;
/// assert_eq!(dx.unwrap().to_scalar::<f64>()?, 4.0);
/// assert_eq!(dw.unwrap().to_scalar::<f64>()?, 30.0);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn custom_gradient_with_variables<F, B>(name: &'static str, inputs: &[Tensor], f: F) -> Result<Vec<Tensor>>
where
    F: FnOnce(&[Tensor]) -> Result<(Vec<Tensor>, B)>,
    B: Fn(&[Tensor], &[Variable]) -> Result<(Vec<Option<Tensor>>, Vec<Option<Tensor>>)> + Send + Sync + 'static,
{
    let ((outs, backward), vars) = variables_read(|| f(inputs))?;
    let outs: Vec<Tensor> = outs.iter().map(traced_alias).collect();
    let (n_in, n_var) = (inputs.len(), vars.len());
    let vs = vars.clone();
    let flat = move |dys: &[Tensor]| {
        let (mut gi, gv) = backward(dys, &vs)?;
        if gi.len() != n_in || gv.len() != n_var {
            return Err(Error::invalid(
                name,
                format!(
                    "custom gradient function returned {} input and {} variable gradients for {n_in} inputs and {n_var} variables",
                    gi.len(),
                    gv.len()
                ),
            ));
        }
        gi.extend(gv);
        Ok(gi)
    };
    record_checked(name, inputs, &vars, &outs, flat);
    Ok(outs)
}

/// An override rule: `(op inputs, op output, output cotangent) -> one
/// gradient per input`.
type OverrideRule = dyn Fn(&[Tensor], &Tensor, &Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync;

thread_local! {
    /// Active overrides, innermost last, and their number (read first, so
    /// recording an op with no override in force costs one `Cell` read).
    static OVERRIDES: RefCell<Vec<(String, Arc<OverrideRule>)>> = const { RefCell::new(Vec::new()) };
    static N_OVERRIDES: Cell<usize> = const { Cell::new(0) };
}

/// Runs `f` with the gradient of every op named `op` (as ops record
/// themselves: `"Tanh"`, `"Mul"`, ...) recorded on this thread replaced by
/// `rule(inputs, output, dy)`, which returns one gradient per op input, like
/// TensorFlow's `gradient_override_map`. The override applies to the ops
/// *run* inside the scope (it is looked up when an op is recorded), whenever
/// their gradient is later taken; scopes nest, the innermost wins. A name no
/// op uses overrides nothing.
///
/// ```
/// use gradtape::{with_gradient_override, GradientTape, Tensor};
/// let x = Tensor::scalar(0.5f64);
/// let tape = GradientTape::new();
/// let y = tape.record(|| {
///     tape.watch(&x);
///     // a straight-through tanh: its gradient is the identity
///     with_gradient_override("Tanh", |_inputs: &[Tensor], _y: &Tensor, dy: &Tensor| Ok(vec![Some(dy.clone())]), || {
///         x.tanh()
///     })
/// })?;
/// assert_eq!(tape.gradient(&y, &x)?.unwrap().to_scalar::<f64>()?, 1.0);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn with_gradient_override<T, R>(op: &str, rule: R, f: impl FnOnce() -> Result<T>) -> Result<T>
where
    R: Fn(&[Tensor], &Tensor, &Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
{
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            OVERRIDES.with(|o| o.borrow_mut().pop());
            N_OVERRIDES.with(|n| n.set(n.get() - 1));
        }
    }
    OVERRIDES.with(|o| o.borrow_mut().push((op.to_string(), Arc::new(rule))));
    N_OVERRIDES.with(|n| n.set(n.get() + 1));
    let _pop = Pop;
    f()
}

/// The rule an override in force gives the op of `call`, if any: the tape
/// and forward mode build a call's rule with it (for single-output ops of
/// tensors, bound through `dispatch::bind`).
#[inline]
pub(crate) fn overridden_for(call: &Call<'_>) -> Option<VjpFn> {
    if N_OVERRIDES.with(|n| n.get()) == 0 {
        return None;
    }
    match (call.inputs.tensors(), call.outputs) {
        (Some(inputs), [output]) => overridden(call.name, inputs, output),
        _ => None,
    }
}

/// The rule an override in force gives the op `name` being recorded, if any.
#[inline]
fn overridden(name: &'static str, inputs: &[&Tensor], output: &Tensor) -> Option<VjpFn> {
    if N_OVERRIDES.with(|n| n.get()) == 0 {
        return None;
    }
    let rule = OVERRIDES.with(|o| {
        let o = o.borrow();
        o.iter().rev().find(|(n, _)| n == name).map(|(_, r)| r.clone())
    })?;
    let xs: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
    let metas: Vec<InputMeta> = inputs
        .iter()
        .map(|t| InputMeta {
            shape: t.shape().to_vec(),
            dtype: t.dtype(),
        })
        .collect();
    let y = output.clone();
    Some(vjp(move |dys, _| check_grads(name, &metas, rule(&xs, &y, &dys[0])?)))
}
