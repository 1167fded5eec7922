//! Cumulative sums and products along one axis, with TensorFlow's
//! `exclusive` and `reverse` flags.

use crate::autodiff::tape::vjp_batched;
use crate::error::Result;
use crate::kernels::cpu::filled_vec;
use crate::ops::desc::{Scan, ScanKind};
use crate::ops::{bind, ct, grads, unsupported};
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
            vjp_batched(move |g, _| Ok(grads![Some(g[0].cumsum(ct::axis(a), exclusive, !reverse)?)]))
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
            vjp_batched(move |g, _| {
                let zero = x.eq(&x.scalar_like(0.0)?)?;
                let s = g[0].mul(&y)?.cumsum(ct::axis(a), exclusive, !reverse)?;
                // Eagerly, inputs without zeros take the short form. Inside a
                // trace the values are not known (the graph runs on others), so
                // the rule always takes the general form, which gives the same
                // values where `x` has no zeros.
                if !crate::function::trace::recording() && !zero.to_vec::<bool>()?.contains(&true) {
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
                let s1 = g[0].mul(&y1)?.cumsum(ct::axis(a), exclusive, !reverse)?;
                let at_first = Tensor::where_(&first, &s1, &s1.scalar_like(0.0)?)?;
                Ok(grads![Some(Tensor::where_(&zero, &at_first, &s.div(&safe)?)?)])
            })
        }))
    }
}

/// The batched rules of the math ops (elementwise, activations, atan2,
/// squared_difference, norm, scans) checked against row-by-row pulls: a
/// cotangent with one leading batch dim must give each row's plain result.
#[cfg(test)]
mod batched_rules {
    use std::rc::Rc;

    use crate::autodiff::tape::{self, TapeCell};
    use crate::ops::ct;
    use crate::tensor::Tensor;

    /// Runs `f` on a fresh tape watching `xs` and returns the last op's rule
    /// and output shape.
    fn last_rule(xs: &[Tensor], f: &dyn Fn(&[Tensor]) -> crate::Result<Tensor>) -> (crate::VjpFn, Vec<usize>) {
        let cell = Rc::new(TapeCell {
            state: Default::default(),
            persistent: true,
            watch_accessed_variables: true,
            recording: Default::default(),
            used: Default::default(),
            entered: Default::default(),
            internal: false,
        });
        for x in xs {
            cell.state.borrow_mut().watch_id(x.id());
        }
        tape::push(&cell);
        let y = f(xs);
        tape::pop(&cell);
        let y = y.unwrap();
        let st = cell.state.borrow();
        let n = st.ops.len();
        (st.ops[n - 1].vjp.clone().unwrap(), y.shape().to_vec())
    }

    fn values(shape: &[usize], seed: f64) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n).map(|i| 0.3 + 0.9 * ((i as f64) * 1.3 + seed).sin()).collect();
        Tensor::from_vec(v, shape).unwrap()
    }

    fn check(name: &str, xs: &[Tensor], f: &dyn Fn(&[Tensor]) -> crate::Result<Tensor>) {
        let (rule, yshape) = last_rule(xs, f);
        assert!(rule.is_batched(), "{name}: rule is not batched");
        let rows = 3;
        let mut bshape = vec![rows];
        bshape.extend_from_slice(&yshape);
        let g = values(&bshape, 0.7);
        let needs = vec![true; xs.len()];
        let batched = ct::with_batch_dims(1, || rule.call(std::slice::from_ref(&g), &needs)).unwrap();
        for r in 0..rows {
            let gr = g.narrow(0, r, 1).unwrap().reshape(&yshape).unwrap();
            let plain = rule.call(&[gr], &needs).unwrap();
            for (i, (b, p)) in batched.iter().zip(&plain).enumerate() {
                match (b, p) {
                    (None, None) => {}
                    (Some(b), Some(p)) => {
                        assert_eq!(&b.shape()[1..], xs[i].shape(), "{name}: input {i} shape");
                        let br = b.narrow(0, r, 1).unwrap().to_vec_f64();
                        let pv = p.to_vec_f64();
                        assert_eq!(br.len(), pv.len(), "{name}");
                        for (u, v) in br.iter().zip(&pv) {
                            assert!((u - v).abs() < 1e-12, "{name}: input {i} row {r}: {br:?} vs {pv:?}");
                        }
                    }
                    _ => panic!("{name}: input {i}: batched and plain disagree on None"),
                }
            }
        }
    }

    #[test]
    fn batched_rules_match_row_by_row() {
        type F = fn(&[Tensor]) -> crate::Result<Tensor>;
        let unary: &[(&str, F)] = &[
            ("expm1", |x| x[0].expm1()),
            ("log1p", |x| x[0].log1p()),
            ("rsqrt", |x| x[0].abs()?.add_scalar(0.5)?.rsqrt()),
            ("reciprocal", |x| x[0].reciprocal()),
            ("erf", |x| x[0].erf()),
            ("erfc", |x| x[0].erfc()),
            ("floor", |x| x[0].floor()),
            ("tan", |x| x[0].tan()),
            ("asin", |x| x[0].mul_scalar(0.5)?.asin()),
            ("acos", |x| x[0].mul_scalar(0.5)?.acos()),
            ("atan", |x| x[0].atan()),
            ("sinh", |x| x[0].sinh()),
            ("cosh", |x| x[0].cosh()),
            ("asinh", |x| x[0].asinh()),
            ("acosh", |x| x[0].add_scalar(2.0)?.acosh()),
            ("atanh", |x| x[0].mul_scalar(0.5)?.atanh()),
            ("softplus", |x| x[0].softplus()),
            ("relu6", |x| x[0].mul_scalar(8.0)?.relu6()),
            ("leaky_relu", |x| x[0].leaky_relu(0.3)),
            ("elu", |x| x[0].elu()),
            ("selu", |x| x[0].selu()),
            ("clip_by_value", |x| x[0].clip_by_value(0.0, 0.8)),
            ("norm axis 1", |x| x[0].norm(&[1], false)),
            ("norm axes 0,2 keepdims", |x| x[0].norm(&[0, 2], true)),
            ("norm all", |x| x[0].norm(&[0, 1, 2], false)),
            ("cumsum", |x| x[0].cumsum(1, true, false)),
            ("cumsum reverse", |x| x[0].cumsum(-1, false, true)),
            ("cumprod", |x| x[0].cumprod(2, false, true)),
            ("cumprod zeros", |x| {
                let m = x[0].gt_scalar(0.0)?;
                Tensor::where_(&m, &x[0], &x[0].zeros_like())?
                    .stop_gradient()
                    .add(&x[0].mul_scalar(0.0)?)?
                    .cumprod(1, true, false)
            }),
        ];
        for &(name, f) in unary {
            check(name, &[values(&[2, 3, 4], 0.1)], &f);
        }
        let binary: &[(&str, F)] = &[
            ("squared_difference", |x| x[0].squared_difference(&x[1])),
            ("atan2", |x| x[0].atan2(&x[1])),
        ];
        for &(name, f) in binary {
            for (sa, sb) in [
                (&[2, 3][..], &[2, 3][..]),
                (&[2, 3], &[3]),
                (&[2, 1], &[1, 3]),
                (&[], &[2, 3]),
            ] {
                check(
                    &format!("{name} {sa:?} {sb:?}"),
                    &[values(sa, 0.2), values(sb, 1.1)],
                    &f,
                );
            }
        }
    }
}
