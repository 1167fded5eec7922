//! Gradient clipping with TensorFlow's semantics: `clip_by_norm`,
//! `global_norm`, `clip_by_global_norm`. Written with differentiable ops.

use crate::autodiff::gradient::{Gradient, IndexedSlices};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

fn check_clip(op: &'static str, clip_norm: f64) -> Result<()> {
    if clip_norm > 0.0 && clip_norm.is_finite() {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("clip_norm must be finite and > 0, got {clip_norm}"),
        ))
    }
}

/// `t · clip_norm / max(‖t‖, clip_norm)`, the L2 norm taken over `axes`
/// (all axes when `None`), TensorFlow's `tf.clip_by_norm`: unchanged when
/// the norm is at most `clip_norm`, rescaled to norm `clip_norm` otherwise.
/// Differentiable, also at `t = 0` (the norm is computed with TF's "double
/// where" so its gradient is not NaN there).
///
/// ```
/// use gradtape::{optim::clip_by_norm, Tensor};
/// let t = Tensor::vector(&[3.0f32, 4.0]);                  // norm 5
/// assert_eq!(clip_by_norm(&t, 1.0, None)?.to_vec::<f32>()?, vec![0.6, 0.8]);
/// assert_eq!(clip_by_norm(&t, 10.0, None)?.to_vec::<f32>()?, vec![3.0, 4.0]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn clip_by_norm(t: &Tensor, clip_norm: f64, axes: Option<&[isize]>) -> Result<Tensor> {
    check_clip("clip_by_norm", clip_norm)?;
    crate::ops::expect_float("clip_by_norm", t)?;
    let all: Vec<isize> = (0..t.rank() as isize).collect();
    // summed without `keepdims`, then reshaped: `sum`'s keepdims reshape
    // runs outside tracing, so this way `clip_by_norm` traces
    let axes = axes.unwrap_or(&all);
    let mut kept = t.shape().to_vec();
    for &a in axes {
        let a = if a < 0 { a + t.rank() as isize } else { a };
        if let Some(d) = usize::try_from(a).ok().and_then(|a| kept.get_mut(a)) {
            *d = 1;
        }
    }
    let l2sum = t.square()?.sum(axes, false)?.reshape(&kept)?;
    let pred = l2sum.gt_scalar(0.0)?;
    let safe = Tensor::where_(&pred, &l2sum, &l2sum.try_ones_like()?)?;
    let l2norm = Tensor::where_(&pred, &safe.sqrt()?, &l2sum)?;
    t.mul_scalar(clip_norm)?
        .div(&l2norm.maximum(&l2norm.try_full_like(clip_norm)?)?)
}

/// `sqrt(Σ ‖t‖²)` over the tensors given (`None` skipped), TensorFlow's
/// `tf.linalg.global_norm`: a scalar of the first tensor's dtype. At least
/// one tensor is needed.
///
/// ```
/// use gradtape::{optim::global_norm, Tensor};
/// let n = global_norm(&[Some(Tensor::vector(&[3.0f64])), None, Some(Tensor::vector(&[4.0f64]))])?;
/// assert_eq!(n.to_scalar::<f64>()?, 5.0);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn global_norm(tensors: &[Option<Tensor>]) -> Result<Tensor> {
    let mut acc: Option<Tensor> = None;
    for t in tensors.iter().flatten() {
        crate::ops::expect_float("global_norm", t)?;
        let s = t.square()?.sum_all()?;
        acc = Some(match acc {
            None => s,
            Some(a) => a.add(&s.cast(a.dtype())?)?,
        });
    }
    acc.ok_or_else(|| Error::invalid("global_norm", "needs at least one tensor"))?
        .sqrt()
}

/// Scales every tensor by `clip_norm / max(global_norm, clip_norm)`,
/// TensorFlow's `tf.clip_by_global_norm`: returns the clipped tensors
/// (`None` kept) and the global norm before clipping. A non-finite global
/// norm makes every result NaN, as in TensorFlow.
///
/// ```
/// use gradtape::{optim::clip_by_global_norm, Tensor};
/// let (c, n) = clip_by_global_norm(&[Some(Tensor::vector(&[3.0f64])), Some(Tensor::vector(&[4.0f64]))], 1.0)?;
/// assert_eq!(n.to_scalar::<f64>()?, 5.0);
/// assert!((c[0].as_ref().unwrap().to_vec::<f64>()?[0] - 0.6).abs() < 1e-15);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn clip_by_global_norm(tensors: &[Option<Tensor>], clip_norm: f64) -> Result<(Vec<Option<Tensor>>, Tensor)> {
    check_clip("clip_by_global_norm", clip_norm)?;
    let norm = global_norm(tensors)?;
    let scale = global_scale(&norm, clip_norm)?;
    let clipped = tensors
        .iter()
        .map(|t| t.as_ref().map(|t| t.mul(&scale.cast(t.dtype())?)).transpose())
        .collect::<Result<_>>()?;
    Ok((clipped, norm))
}

/// `clip_norm · min(1 / norm, 1 / clip_norm)`, NaN when `norm` is not finite.
fn global_scale(norm: &Tensor, clip_norm: f64) -> Result<Tensor> {
    let inv = norm.reciprocal()?;
    let scale = inv
        .minimum(&inv.try_full_like(1.0 / clip_norm)?)?
        .mul_scalar(clip_norm)?;
    // + (norm − norm): NaN for an infinite or NaN norm
    scale.add(&norm.sub(norm)?)
}

/// [`clip_by_global_norm`] for gradients that may be sparse (the values of
/// an [`IndexedSlices`] enter the norm as they are, duplicates included, as
/// in TensorFlow).
pub fn clip_gradients_by_global_norm(
    grads: &[Option<Gradient>],
    clip_norm: f64,
) -> Result<(Vec<Option<Gradient>>, Tensor)> {
    check_clip("clip_by_global_norm", clip_norm)?;
    let values: Vec<Option<Tensor>> = grads.iter().map(|g| g.as_ref().map(|g| values_of(g).clone())).collect();
    let norm = global_norm(&values)?;
    let scale = global_scale(&norm, clip_norm)?;
    let clipped = grads
        .iter()
        .map(|g| {
            g.as_ref()
                .map(|g| map_values(g, |v| v.mul(&scale.cast(v.dtype())?)))
                .transpose()
        })
        .collect::<Result<_>>()?;
    Ok((clipped, norm))
}

fn values_of(g: &Gradient) -> &Tensor {
    match g {
        Gradient::Dense(t) => t,
        Gradient::Sparse(s) => s.values(),
    }
}

fn map_values(g: &Gradient, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Gradient> {
    Ok(match g {
        Gradient::Dense(t) => Gradient::Dense(f(t)?),
        Gradient::Sparse(s) => Gradient::Sparse(IndexedSlices::new(
            f(s.values())?,
            s.indices().clone(),
            s.dense_shape(),
        )?),
    })
}

/// `clip_by_norm` of a gradient (of its values when sparse, as TF).
pub(crate) fn clip_gradient_by_norm(g: &Gradient, c: f64) -> Result<Gradient> {
    map_values(g, |v| clip_by_norm(v, c, None))
}

/// Each element clipped to `[-c, c]`.
pub(crate) fn clip_gradient_by_value(g: &Gradient, c: f64) -> Result<Gradient> {
    map_values(g, |v| v.clip_by_value(-c, c))
}
