//! Cumulative sums and products along one axis, with TensorFlow's
//! `exclusive` and `reverse` flags.

use crate::dispatch::vjp;
use crate::error::Result;
use crate::kernels::cpu::filled_vec;
use crate::ops::desc::{Scan, ScanKind};
use crate::ops::{bind, grads, unsupported};
use crate::tensor::layout::norm_axis;
use crate::tensor::{with_num_dtype, Num, Tensor};
use num_traits::{One, Zero};

/// A running fold of `x` along axis `a`; `exclusive` writes the value before
/// each element is folded in, `reverse` runs from the end.
#[allow(clippy::too_many_arguments)]
fn scan<T: Num>(
    op: &'static str,
    x: &Tensor,
    a: usize,
    exclusive: bool,
    reverse: bool,
    init: T,
    f: impl Fn(T, T) -> T,
) -> Result<Tensor> {
    let shape = x.shape();
    let outer: usize = shape[..a].iter().product();
    let n = shape[a];
    let inner: usize = shape[a + 1..].iter().product();
    let src = x.values::<T>(op)?;
    let mut out = filled_vec(op, src.len(), init)?;
    // (an empty tensor is not walked, however many empty rows it has)
    let outer = if src.is_empty() { 0 } else { outer };
    for o in 0..outer {
        for i in 0..inner {
            let base = o * n * inner + i;
            let mut acc = init;
            for k in 0..n {
                let k = if reverse { n - 1 - k } else { k };
                let at = base + k * inner;
                let next = f(acc, src[at]);
                out[at] = if exclusive { acc } else { next };
                acc = next;
            }
        }
    }
    Tensor::from_vec(out, shape)
}

impl Tensor {
    /// Cumulative sum along `axis` (numeric dtypes; integers wrap). With
    /// `exclusive` each output omits its own element (the first is 0); with
    /// `reverse` the sum runs from the end. The gradient is the cumulative
    /// sum of `g` with the same `exclusive` and the opposite `reverse`.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[1.0f64, 2.0, 3.0]);
    /// assert_eq!(x.cumsum(0, false, false)?.to_vec::<f64>()?, vec![1.0, 3.0, 6.0]);
    /// assert_eq!(x.cumsum(0, true, false)?.to_vec::<f64>()?, vec![0.0, 1.0, 3.0]);
    /// assert_eq!(x.cumsum(0, false, true)?.to_vec::<f64>()?, vec![6.0, 5.0, 3.0]);
    /// assert_eq!(x.cumsum(-1, true, true)?.to_vec::<f64>()?, vec![5.0, 3.0, 0.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn cumsum(&self, axis: isize, exclusive: bool, reverse: bool) -> Result<Tensor> {
        let a = norm_axis("cumsum", axis, self.shape())?;
        let y = with_num_dtype!(self.dtype(), T => scan::<T>("cumsum", self, a, exclusive, reverse, T::zero(), |p, v| p.add_wrap(v))?,
            _ => return Err(unsupported("cumsum", self.dtype(), "a numeric dtype")));
        let desc = Scan {
            kind: ScanKind::Sum,
            axis,
            exclusive,
            reverse,
        };
        Ok(bind(desc, &[self], y, move |_| {
            vjp(move |g, _| Ok(grads![Some(g[0].cumsum(a as isize, exclusive, !reverse)?)]))
        }))
    }

    /// Cumulative product along `axis` (numeric dtypes; integers wrap), with
    /// the same flags as [`Tensor::cumsum`] (an exclusive product starts at
    /// 1).
    ///
    /// The gradient is TensorFlow's `cumsum(y · g, exclusive, !reverse) / x`
    /// where `x != 0`; unlike TensorFlow's it stays right where `x` has zeros:
    /// the first zero along the scan gets the cumulative products with itself
    /// replaced by 1, later zeros get 0. (Second derivatives are exact except
    /// at points with two or more zeros in one scan.)
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[1.0f64, 2.0, 3.0]);
    /// assert_eq!(x.cumprod(0, false, false)?.to_vec::<f64>()?, vec![1.0, 2.0, 6.0]);
    /// assert_eq!(x.cumprod(0, true, true)?.to_vec::<f64>()?, vec![6.0, 3.0, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn cumprod(&self, axis: isize, exclusive: bool, reverse: bool) -> Result<Tensor> {
        let a = norm_axis("cumprod", axis, self.shape())?;
        let y = with_num_dtype!(self.dtype(), T => scan::<T>("cumprod", self, a, exclusive, reverse, T::one(), |p, v| p.mul_wrap(v))?,
            _ => return Err(unsupported("cumprod", self.dtype(), "a numeric dtype")));
        let x = self.clone();
        let desc = Scan {
            kind: ScanKind::Prod,
            axis,
            exclusive,
            reverse,
        };
        Ok(bind(desc, &[self], y, move |y| {
            let y = y.clone();
            vjp(move |g, _| {
                let zero = x.eq(&x.scalar_like(0.0)?)?;
                let s = g[0].mul(&y)?.cumsum(a as isize, exclusive, !reverse)?;
                // Eagerly, inputs without zeros take the short form. Inside a
                // trace the values are not known (the graph runs on others), so
                // the rule always takes the general form, which gives the same
                // values where `x` has no zeros.
                if !crate::dispatch::listens(crate::dispatch::Kind::Trace) && !zero.to_vec::<bool>()?.contains(&true) {
                    return Ok(grads![Some(s.div(&x)?)]);
                }
                // zeros: the division is valid where x != 0; the first zero
                // (in scan order) gets the products with itself replaced by
                // 1; elements after it get 0
                let ones = x.scalar_like(1.0)?;
                let before = zero.cast(x.dtype())?.cumsum(a as isize, true, reverse)?;
                let first = before.eq(&before.scalar_like(0.0)?)?.logical_and(&zero)?;
                let safe = Tensor::where_(&zero, &ones, &x)?;
                let y1 = Tensor::where_(&first, &ones, &x)?.cumprod(a as isize, exclusive, reverse)?;
                let s1 = g[0].mul(&y1)?.cumsum(a as isize, exclusive, !reverse)?;
                let at_first = Tensor::where_(&first, &s1, &s1.scalar_like(0.0)?)?;
                Ok(grads![Some(Tensor::where_(&zero, &at_first, &s.div(&safe)?)?)])
            })
        }))
    }
}
