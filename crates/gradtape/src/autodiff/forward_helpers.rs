//! Forward-mode helpers built on [`ForwardAccumulator`]: [`jvp`],
//! [`jvp_many`], [`hvp`] (forward over reverse) and [`hessian`].

use crate::autodiff::backprop::Unconnected;
use crate::autodiff::forward::ForwardAccumulator;
use crate::autodiff::gradient_tape::{GradientOptions, GradientTape};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Runs `f` on `primals` with an accumulator watching them with `tangents`,
/// returning `f`'s output and its JVP `J · tangents` (zeros when the output
/// does not depend on the primals).
///
/// `f` receives fresh aliases of the primals, so a tensor passed twice is
/// two independent primals. Nested calls give higher derivatives, and the
/// JVP is differentiable by outer tapes.
///
/// ```
/// use gradtape::{jvp, Tensor};
/// let x = Tensor::scalar(0.5f64);
/// let (y, dy) = jvp(|p| p[0].sin(), &[x], &[Tensor::scalar(2.0f64)])?;
/// assert_eq!(y.to_scalar::<f64>()?, 0.5f64.sin());
/// assert_eq!(dy.to_scalar::<f64>()?, 2.0 * 0.5f64.cos());
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn jvp<F>(f: F, primals: &[Tensor], tangents: &[Tensor]) -> Result<(Tensor, Tensor)>
where
    F: FnOnce(&[Tensor]) -> Result<Tensor>,
{
    let (mut ys, mut ts) = jvp_many(|p| Ok(vec![f(p)?]), primals, tangents)?;
    match (ys.pop(), ts.pop()) {
        (Some(y), Some(t)) => Ok((y, t)),
        _ => Err(Error::invalid("jvp", "internal: no output")),
    }
}

/// [`jvp`] for a function with several outputs: the outputs and one JVP per
/// output.
pub fn jvp_many<F>(f: F, primals: &[Tensor], tangents: &[Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>)>
where
    F: FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
{
    if primals.len() != tangents.len() {
        return Err(Error::invalid(
            "jvp",
            format!("{} primals given with {} tangents", primals.len(), tangents.len()),
        ));
    }
    let xs: Vec<Tensor> = primals.iter().map(Tensor::identity).collect();
    let acc = ForwardAccumulator::new();
    for (x, t) in xs.iter().zip(tangents) {
        acc.watch(x, t).map_err(|e| e.for_op("jvp"))?;
    }
    let ys = acc.record(|| f(&xs))?;
    let ts = acc.jvp_with(&ys, Unconnected::Zero)?.into_iter().flatten().collect();
    Ok((ys, ts))
}

/// The Hessian-vector product `H v` of a scalar function `f` at `x`,
/// computed forward over reverse: an accumulator watching `x` with `v`
/// around a tape that takes the gradient. Zeros where `f` does not depend on
/// `x`. An error if `f` does not return one element, or `v` is not shaped
/// like `x`.
///
/// ```
/// use gradtape::{hvp, Tensor};
/// // f = Σ x³: H = diag(6x)
/// let x = Tensor::vector(&[1.0f64, 2.0]);
/// let hv = hvp(|x| x.pow_scalar(3.0)?.sum_all(), &x, &Tensor::vector(&[1.0f64, 0.0]))?;
/// assert_eq!(hv.to_vec::<f64>()?, vec![6.0, 0.0]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn hvp<F>(f: F, x: &Tensor, v: &Tensor) -> Result<Tensor>
where
    F: FnOnce(&Tensor) -> Result<Tensor>,
{
    crate::ops::expect_float("hvp", x)?;
    let x = x.identity();
    let acc = ForwardAccumulator::new();
    acc.watch(&x, v).map_err(|e| e.for_op("hvp"))?;
    acc.record(|| {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x);
            f(&x)
        })?;
        if y.numel() != 1 {
            return Err(Error::invalid(
                "hvp",
                format!("the function must return a scalar, got shape {:?}", y.shape()),
            ));
        }
        let opts = GradientOptions::default().unconnected(Unconnected::Zero);
        let g = tape
            .gradient_with(&y, &x, opts)?
            .map_or_else(|| x.try_zeros_like(), Ok)?;
        acc.jvp_with(&g, Unconnected::Zero)?
            .map_or_else(|| x.try_zeros_like(), Ok)
    })
}

/// The Hessian of a scalar function `f` at `x`, of shape `x.shape ++
/// x.shape`: entry `[i, j]` is `∂²f / ∂xᵢ ∂xⱼ`. Computed as the vectorized
/// Jacobian of the gradient under nested tapes (one vectorized backward pass
/// over the gradient computation, not one pass per element); differentiable
/// by outer tapes. [`hvp`] gives single Hessian-vector products in forward
/// over reverse mode.
///
/// ```
/// use gradtape::{hessian, Tensor};
/// // f = x0² x1: H = [[2 x1, 2 x0], [2 x0, 0]]
/// let x = Tensor::vector(&[3.0f64, 5.0]);
/// let h = hessian(|x| x.narrow(0, 0, 1)?.square()?.mul(&x.narrow(0, 1, 1)?)?.sum_all(), &x)?;
/// assert_eq!(h.shape(), &[2, 2]);
/// assert_eq!(h.to_vec::<f64>()?, vec![10.0, 6.0, 6.0, 0.0]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn hessian<F>(f: F, x: &Tensor) -> Result<Tensor>
where
    F: Fn(&Tensor) -> Result<Tensor>,
{
    crate::ops::expect_float("hessian", x)?;
    let mut shape = x.shape().to_vec();
    shape.extend_from_slice(x.shape());
    crate::tensor::layout::checked_numel("hessian", &shape)?;
    let outer = crate::GradientTape::new();
    let g = outer.record(|| -> Result<Tensor> {
        outer.watch(x);
        let inner = crate::GradientTape::new();
        let y = inner.record(|| {
            inner.watch(x);
            f(x)
        })?;
        if y.numel() != 1 {
            return Err(Error::invalid(
                "hessian",
                format!("the function must return a scalar, got shape {:?}", y.shape()),
            ));
        }
        let opts = GradientOptions::default().unconnected(Unconnected::Zero);
        inner.gradient_with(&y, x, opts)?.map_or_else(|| x.try_zeros_like(), Ok)
    })?;
    let opts = crate::JacobianOptions::default().unconnected(Unconnected::Zero);
    let h = outer.jacobian_with(&g, x, opts).map_err(|e| e.for_op("hessian"))?;
    h.map_or_else(
        || crate::kernels::gpu::filled("hessian", &shape, 0.0, x.dtype(), x.device()),
        Ok,
    )
}
