//! The functional API, after TensorFlow's eager helpers (`gradients_function`,
//! `val_and_grad_function`, `make_vjp`, `implicit_grad`,
//! `implicit_val_and_grad`): differentiate a closure of tensors without
//! handling a tape.
//!
//! A differentiated closure has the form `Fn(&[Tensor]) -> Result<T>` where
//! `T` is anything [`Targets`] accepts (a tensor, a `Vec` or array of
//! tensors); several outputs are differentiated through their sum.
//!
//! - [`grad`] and [`value_and_grad`] wrap a closure into a callable
//!   ([`Grad`], [`ValueAndGrad`]) whose `call(&args)` returns one gradient
//!   per chosen parameter. Parameters are chosen by position
//!   ([`Grad::params`]); all arguments by default.
//! - [`make_vjp`] runs a closure once and returns its value with a
//!   [`VjpFunction`], callable any number of times with output cotangents.
//! - [`implicit_grad`] and [`implicit_value_and_grad`] differentiate w.r.t.
//!   every trainable variable the closure reads.
//!
//! Each chosen argument enters the closure under a fresh identity (a
//! recorded `Identity`), so the same tensor passed twice is two independent
//! parameters, and an outer tape still sees through it: `grad` of a closure
//! that itself calls `grad` gives second derivatives.
//!
//! Gradients are `Option<Tensor>`: `None` for a parameter the output does
//! not depend on (unless [`Unconnected::Zero`] is chosen), and always `None`
//! for an integer or bool parameter, which has no gradient.

use crate::autodiff::backprop::Unconnected;
use crate::autodiff::gradient_tape::{GradientOptions, GradientTape};
use crate::autodiff::sources::Targets;
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Which arguments are parameters, and what unconnected ones get.
#[derive(Clone, Debug, Default)]
struct Spec {
    /// `None`: every argument.
    params: Option<Vec<usize>>,
    unconnected: Unconnected,
}

impl Spec {
    /// The chosen argument positions, checked against `n` arguments.
    fn positions(&self, api: &'static str, n: usize) -> Result<Vec<usize>> {
        match &self.params {
            None => Ok((0..n).collect()),
            Some(p) => {
                if let Some(&bad) = p.iter().find(|&&i| i >= n) {
                    return Err(Error::invalid(
                        api,
                        format!("parameter index {bad} is out of range for {n} arguments (params {p:?})"),
                    ));
                }
                Ok(p.clone())
            }
        }
    }

    /// Runs `f` on `args` (the chosen ones under fresh identities, watched)
    /// and differentiates the sum of its outputs w.r.t. them.
    fn run<F, T>(&self, api: &'static str, f: &F, args: &[Tensor]) -> Result<(T, Vec<Option<Tensor>>)>
    where
        F: Fn(&[Tensor]) -> Result<T>,
        T: Targets,
    {
        let pos = self.positions(api, args.len())?;
        let mut inner: Vec<Tensor> = args.to_vec();
        // a parameter chosen twice is one parameter: give it one fresh identity
        let mut fresh: Vec<Option<Tensor>> = vec![None; args.len()];
        for &i in &pos {
            if fresh[i].is_none() {
                let t = args[i].identity();
                inner[i] = t.clone();
                fresh[i] = Some(t);
            }
        }
        let params: Vec<Tensor> = pos.iter().map(|&i| inner[i].clone()).collect();
        let tape = GradientTape::new().watch_accessed_variables(false);
        let value = tape.record(|| {
            tape.watch(&params[..]);
            f(&inner)
        })?;
        let opts = GradientOptions::default().unconnected(self.unconnected);
        let grads = tape.gradient_with(&value, &params[..], opts)?;
        Ok((value, no_integer_grads(grads, &params)))
    }
}

/// Integer and bool parameters get `None`, whatever `unconnected` says.
fn no_integer_grads(grads: Vec<Option<Tensor>>, params: &[Tensor]) -> Vec<Option<Tensor>> {
    grads
        .into_iter()
        .zip(params)
        .map(|(g, p)| if p.dtype().is_float() { g } else { None })
        .collect()
}

/// The gradient of a closure w.r.t. some of its arguments; made by [`grad`].
///
/// ```
/// use gradtape::{grad, Tensor};
/// // d(x*y)/dx = y, d(x*y)/dy = x; the same tensor twice is two parameters
/// let g = grad(|a: &[Tensor]| a[0].mul(&a[1]));
/// let x = Tensor::scalar(3.0f64);
/// let d = g.call(&[x.clone(), x.clone()])?;
/// assert_eq!(d[0].as_ref().unwrap().to_scalar::<f64>()?, 3.0);
/// assert_eq!(d[1].as_ref().unwrap().to_scalar::<f64>()?, 3.0);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Grad<F> {
    f: F,
    spec: Spec,
}

/// The value of a closure with its gradient; made by [`value_and_grad`].
///
/// ```
/// use gradtape::{value_and_grad, Tensor};
/// let vg = value_and_grad(|a: &[Tensor]| a[0].square()?.mul(&a[1])).params(&[0]);
/// let (y, d) = vg.call(&[Tensor::scalar(3.0f64), Tensor::scalar(2.0f64)])?;
/// assert_eq!(y.to_scalar::<f64>()?, 18.0);
/// assert_eq!(d.len(), 1);
/// assert_eq!(d[0].as_ref().unwrap().to_scalar::<f64>()?, 12.0);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct ValueAndGrad<F> {
    f: F,
    spec: Spec,
}

/// Wraps `f` so that `call(&args)` returns the gradient of the sum of its
/// outputs w.r.t. its arguments (all of them, or those chosen with
/// [`Grad::params`]), one `Option<Tensor>` per parameter.
pub fn grad<F, T>(f: F) -> Grad<F>
where
    F: Fn(&[Tensor]) -> Result<T>,
    T: Targets,
{
    Grad {
        f,
        spec: Spec::default(),
    }
}

/// Like [`grad`], and `call` also returns the closure's value.
pub fn value_and_grad<F, T>(f: F) -> ValueAndGrad<F>
where
    F: Fn(&[Tensor]) -> Result<T>,
    T: Targets,
{
    ValueAndGrad {
        f,
        spec: Spec::default(),
    }
}

macro_rules! spec_setters {
    ($ty:ident) => {
        impl<F> $ty<F> {
            /// Differentiates w.r.t. the arguments at these positions only,
            /// in this order (an index past the arguments is an error at
            /// `call`).
            pub fn params(mut self, positions: &[usize]) -> Self {
                self.spec.params = Some(positions.to_vec());
                self
            }

            /// What an unconnected float parameter gets (default `None`).
            pub fn unconnected(mut self, u: Unconnected) -> Self {
                self.spec.unconnected = u;
                self
            }
        }
    };
}
spec_setters!(Grad);
spec_setters!(ValueAndGrad);

impl<F> Grad<F> {
    /// Calls the closure on `args` and returns the gradients.
    pub fn call<T>(&self, args: &[Tensor]) -> Result<Vec<Option<Tensor>>>
    where
        F: Fn(&[Tensor]) -> Result<T>,
        T: Targets,
    {
        Ok(self.spec.run("grad", &self.f, args)?.1)
    }
}

impl<F> ValueAndGrad<F> {
    /// Calls the closure on `args` and returns its value and the gradients.
    pub fn call<T>(&self, args: &[Tensor]) -> Result<(T, Vec<Option<Tensor>>)>
    where
        F: Fn(&[Tensor]) -> Result<T>,
        T: Targets,
    {
        self.spec.run("value_and_grad", &self.f, args)
    }
}

/// A vector-Jacobian product function returned by [`make_vjp`]: maps
/// cotangents of the outputs to cotangents of the arguments, as often as
/// wanted.
pub struct VjpFunction {
    tape: GradientTape,
    outputs: Vec<Tensor>,
    params: Vec<Tensor>,
}

/// Runs `f` on `args` once and returns its value with a [`VjpFunction`]
/// w.r.t. every argument (each under a fresh identity, as for [`grad`]).
///
/// ```
/// use gradtape::{make_vjp, Tensor};
/// let x = Tensor::vector(&[1.0f64, 2.0]);
/// let (y, vjp) = make_vjp(|a: &[Tensor]| a[0].square(), &[x])?;
/// assert_eq!(y.to_vec::<f64>()?, vec![1.0, 4.0]);
/// let d = vjp.call(&[Tensor::vector(&[1.0f64, 10.0])])?;
/// assert_eq!(d[0].as_ref().unwrap().to_vec::<f64>()?, vec![2.0, 40.0]);
/// let d = vjp.call(&[Tensor::vector(&[3.0f64, 0.0])])?;
/// assert_eq!(d[0].as_ref().unwrap().to_vec::<f64>()?, vec![6.0, 0.0]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn make_vjp<F, T>(f: F, args: &[Tensor]) -> Result<(T, VjpFunction)>
where
    F: FnOnce(&[Tensor]) -> Result<T>,
    T: Targets,
{
    let params: Vec<Tensor> = args.iter().map(|a| a.identity()).collect();
    let tape = GradientTape::persistent().watch_accessed_variables(false);
    let value = tape.record(|| {
        tape.watch(&params[..]);
        f(&params)
    })?;
    let mut outputs = Vec::new();
    value.collect_targets(&mut outputs);
    Ok((value, VjpFunction { tape, outputs, params }))
}

impl VjpFunction {
    /// The number of outputs (and so of cotangents `call` takes).
    pub fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    /// The cotangents of the arguments given one cotangent per output (each
    /// of its output's shape and dtype): `None` where an argument is
    /// unconnected or not a float.
    pub fn call(&self, dys: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        if dys.len() != self.outputs.len() {
            return Err(Error::invalid(
                "make_vjp",
                format!(
                    "the function has {} outputs but {} cotangents were given",
                    self.outputs.len(),
                    dys.len()
                ),
            ));
        }
        for (i, (dy, y)) in dys.iter().zip(&self.outputs).enumerate() {
            if dy.shape() != y.shape() || dy.dtype() != y.dtype() {
                return Err(Error::invalid(
                    "make_vjp",
                    format!(
                        "cotangent {i} has shape {:?} and dtype {:?}, output {i} has shape {:?} and dtype {:?}",
                        dy.shape(),
                        dy.dtype(),
                        y.shape(),
                        y.dtype()
                    ),
                ));
            }
        }
        let opts = GradientOptions::default().output_gradients(dys.to_vec());
        let grads = self.tape.gradient_with(&self.outputs, &self.params[..], opts)?;
        Ok(no_integer_grads(grads, &self.params))
    }
}

/// Gradients w.r.t. the trainable variables a closure reads; made by
/// [`implicit_grad`].
pub struct ImplicitGrad<F> {
    f: F,
}

/// Like [`ImplicitGrad`], also returning the value; made by
/// [`implicit_value_and_grad`].
pub struct ImplicitValueAndGrad<F> {
    f: F,
}

/// Wraps `f` so that `call(&args)` returns the gradient of the sum of its
/// outputs w.r.t. every trainable float variable it reads, as
/// `(gradient, variable)` pairs in the variables' creation order. The
/// arguments are not differentiated. It is an error when `f` reads no
/// trainable variable.
///
/// ```
/// use gradtape::{implicit_grad, Tensor, Variable};
/// let b = Variable::new(Tensor::scalar(3.0f64));
/// let a = Variable::new(Tensor::scalar(2.0f64));
/// let g = implicit_grad(|x: &[Tensor]| a.read().mul(&b.read())?.mul(&x[0]));
/// let pairs = g.call(&[Tensor::scalar(10.0f64)])?;
/// // b was created first
/// assert_eq!(pairs[0].1.handle(), b.handle());
/// assert_eq!(pairs[0].0.as_ref().unwrap().to_scalar::<f64>()?, 20.0);
/// assert_eq!(pairs[1].0.as_ref().unwrap().to_scalar::<f64>()?, 30.0);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn implicit_grad<F, T>(f: F) -> ImplicitGrad<F>
where
    F: Fn(&[Tensor]) -> Result<T>,
    T: Targets,
{
    ImplicitGrad { f }
}

/// Like [`implicit_grad`], and `call` also returns the closure's value.
pub fn implicit_value_and_grad<F, T>(f: F) -> ImplicitValueAndGrad<F>
where
    F: Fn(&[Tensor]) -> Result<T>,
    T: Targets,
{
    ImplicitValueAndGrad { f }
}

/// `(gradient, variable)` pairs, as [`implicit_grad`] returns them.
pub type VariableGrads = Vec<(Option<Tensor>, Variable)>;

fn run_implicit<F, T>(api: &'static str, f: &F, args: &[Tensor]) -> Result<(T, VariableGrads)>
where
    F: Fn(&[Tensor]) -> Result<T>,
    T: Targets,
{
    let tape = GradientTape::new();
    let value = tape.record(|| f(args))?;
    let vars = tape.watched_variables();
    if vars.is_empty() {
        return Err(Error::invalid(
            api,
            "the function read no trainable variable, so there is nothing to differentiate",
        ));
    }
    let grads = tape.gradient(&value, &vars[..])?;
    Ok((value, grads.into_iter().zip(vars).collect()))
}

impl<F> ImplicitGrad<F> {
    /// Calls the closure on `args` and returns the `(gradient, variable)` pairs.
    pub fn call<T>(&self, args: &[Tensor]) -> Result<VariableGrads>
    where
        F: Fn(&[Tensor]) -> Result<T>,
        T: Targets,
    {
        Ok(run_implicit("implicit_grad", &self.f, args)?.1)
    }
}

impl<F> ImplicitValueAndGrad<F> {
    /// Calls the closure on `args` and returns its value with the
    /// `(gradient, variable)` pairs.
    pub fn call<T>(&self, args: &[Tensor]) -> Result<(T, VariableGrads)>
    where
        F: Fn(&[Tensor]) -> Result<T>,
        T: Targets,
    {
        run_implicit("implicit_value_and_grad", &self.f, args)
    }
}
