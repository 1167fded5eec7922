//! Elementwise arithmetic of two tensors, with NumPy broadcasting
//! (`add`, `sub`, `mul`, `div`, `pow`, `maximum`, `minimum`,
//! `squared_difference`), `where_`, and the fused gradients of relu and
//! tanh. Each rule ends in `sum_to_shape`, which undoes broadcasting.

// (the half types take their math from `num_traits::Float`)
use super::compare::is_nan;
pub(crate) use super::compare::scalar_for;
use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::elementwise::zip;
use crate::kernels::cpu::select::select;
use crate::kernels::cuda::{INT_ADD, INT_DIV, INT_MAX, INT_MIN, INT_MUL, INT_SUB};
use crate::ops::desc::Binary;
use crate::ops::{bind, bind_jvp, expect_float, expect_same_dtype, grads, sum_terms, tangent_or_zero, unsupported};
use crate::tensor::{with_float_dtype, with_num_dtype, DType, Num, Tensor};
#[allow(unused_imports)]
use num_traits::Float as _;

/// `f(a, b)` on matching numeric dtypes, broadcasting.
/// On a GPU, integer tensors (`i32`, `i64`) take the CUDA kernel of the
/// C expression `$c` of `a` and `b` (`None`: no GPU kernel, an error).
macro_rules! num_zip {
    ($op:expr, $a:expr, $b:expr, $c:expr, |$x:ident, $y:ident| $body:expr) => {{
        expect_same_dtype($op, $a, $b)?;
        let host = |a: &Tensor, b: &Tensor| {
            with_num_dtype!(a.dtype(), T => zip::<T, T, T>($op, a, b, |$x: T, $y: T| $body),
                _ => Err(unsupported($op, a.dtype(), "a numeric dtype")))
        };
        match int_on_device($op, $a, $b, $c, |h| host(&h[0], &h[1])) {
            Some(r) => r,
            None => host($a, $b),
        }
    }};
}

/// An integer op of two tensors on a GPU: the CUDA kernel of the C
/// expression `c` (of `a` and `b`, broadcasting), or `host` on the host
/// copies of an emulated GPU. `None` (the CPU kernel, which reports a
/// tensor on a device as having no kernel there) on the CPU, for other
/// dtypes, and without an expression.
fn int_on_device(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    c: Option<&str>,
    host: impl FnOnce(&[Tensor]) -> Result<Tensor>,
) -> Option<Result<Tensor>> {
    let on_device = a.device_buffer().is_some() || b.device_buffer().is_some();
    let expr = c.filter(|_| on_device && matches!(a.dtype(), DType::I32 | DType::I64))?;
    crate::dispatch::device::offload(
        op,
        &[a, b],
        |_| {
            let shape = crate::tensor::layout::broadcast_shapes(op, a.shape(), b.shape())?;
            crate::kernels::cuda::binary(op, a, b, &shape, "", expr, a.dtype())
        },
        host,
    )
}

/// Relu's gradient in one pass (TensorFlow's `ReluGrad`): `g · [x > 0]`
/// (`x` may broadcast against `g`), a product as TensorFlow's kernel, so
/// that an infinite or NaN `g` gives NaN where `x <= 0`, not 0.
/// Linear in `g`, so its own gradient is `relu_grad` again; `x` gets none
/// (the mask is piecewise constant).
pub fn relu_grad(g: &Tensor, x: &Tensor) -> Result<Tensor> {
    const OP: &str = "ReluGrad";
    expect_same_dtype(OP, g, x)?;
    let y = super::table::binary_or(Binary::ReluGrad, OP, g, x, || {
        with_num_dtype!(g.dtype(), T => zip::<T, T, T>(OP, g, x, |gv: T, xv: T| gv * if xv > <T as num_traits::Zero>::zero() { <T as num_traits::One>::one() } else { <T as num_traits::Zero>::zero() }),
        _ => Err(unsupported(OP, g.dtype(), "a numeric dtype")))
    })?;
    let x = x.clone();
    Ok(bind_jvp(
        Binary::ReluGrad,
        &[g, &x],
        y,
        {
            let x = x.clone();
            move |_| vjp(move |gg, _| Ok(grads![Some(relu_grad(&gg[0], &x)?), None]))
        },
        |t, y| match &t[0] {
            Some(tg) => relu_grad(tg, &x),
            None => y.try_zeros_like(),
        },
    ))
}

/// Tanh's gradient in one pass (TensorFlow's `TanhGrad`): `g * (1 - y²)`
/// from tanh's output `y`, which may broadcast against `g` (four kernels
/// and three temporaries as separate ops; an RNN runs it every step). Its own rule: `g` gets `tanh_grad(y, gg)`, `y` gets `-2 y g gg`.
pub(crate) fn tanh_grad(y: &Tensor, g: &Tensor) -> Result<Tensor> {
    const OP: &str = "TanhGrad";
    expect_same_dtype(OP, y, g)?;
    let out = super::table::binary_or(Binary::TanhGrad, OP, y, g, || {
        with_float_dtype!(g.dtype(), T => zip::<T, T, T>(OP, y, g, |yv: T, gv: T| gv * (<T as num_traits::One>::one() - yv * yv)),
        _ => Err(unsupported(OP, g.dtype(), "f32 or f64")))
    })?;
    let (yc, gc) = (y.clone(), g.clone());
    Ok(bind_jvp(
        Binary::TanhGrad,
        &[y, g],
        out,
        move |_| {
            vjp(move |gg, needs| {
                let dy = needs[0]
                    .then(|| gg[0].mul(&gc)?.mul(&yc)?.mul_scalar(-2.0)?.sum_to_shape(yc.shape()))
                    .transpose()?;
                let dg = needs[1].then(|| tanh_grad(&yc, &gg[0])).transpose()?;
                Ok(grads![dy, dg])
            })
        },
        |t, _| {
            sum_terms([
                t[0].as_ref().map(|ty| ty.mul(g)?.mul(y)?.mul_scalar(-2.0)).transpose(),
                t[1].as_ref().map(|tg| tanh_grad(y, tg)).transpose(),
            ])
        },
    ))
}

impl Tensor {
    /// Sums `self` over the dimensions that broadcasting added or stretched,
    /// giving a tensor of `shape`. The single place where every binary rule
    /// undoes broadcasting.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let g = Tensor::ones(&[2, 3], gradtape::DType::F32);
    /// assert_eq!(g.sum_to_shape(&[1, 3])?.to_vec::<f32>()?, vec![2.0; 3]);
    /// assert_eq!(g.sum_to_shape(&[])?.to_scalar::<f32>()?, 6.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn sum_to_shape(&self, shape: &[usize]) -> Result<Tensor> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        let s = self.shape();
        if shape.len() > s.len() {
            return Err(Error::ShapeMismatch {
                op: "sum_to_shape",
                lhs: s.to_vec(),
                rhs: shape.to_vec(),
            });
        }
        let lead = s.len() - shape.len();
        let mut axes: Vec<isize> = (0..lead as isize).collect();
        for (i, &d) in shape.iter().enumerate() {
            if d == 1 && s[lead + i] != 1 {
                axes.push((lead + i) as isize);
            } else if d != s[lead + i] {
                return Err(Error::ShapeMismatch {
                    op: "sum_to_shape",
                    lhs: s.to_vec(),
                    rhs: shape.to_vec(),
                });
            }
        }
        self.sum(&axes, false)?.reshape(shape)
    }

    /// `a + b`, broadcasting.
    pub fn add(&self, rhs: &Tensor) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex::add(self, rhs);
        }
        let y = super::table::binary_or(Binary::Add, "add", self, rhs, || {
            num_zip!("add", self, rhs, Some(INT_ADD), |x, y| x.add_wrap(y))
        })?;
        let (sa, sb) = (self.shape().to_vec(), rhs.shape().to_vec());
        Ok(bind_jvp(
            Binary::Add,
            &[self, rhs],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].sum_to_shape(&sa)?), Some(g[0].sum_to_shape(&sb)?)])),
            |t, _| sum_terms([Ok(t[0].clone()), Ok(t[1].clone())]),
        ))
    }

    /// `a - b`, broadcasting.
    pub fn sub(&self, rhs: &Tensor) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex::sub(self, rhs);
        }
        let y = super::table::binary_or(Binary::Sub, "sub", self, rhs, || {
            num_zip!("sub", self, rhs, Some(INT_SUB), |x, y| x.sub_wrap(y))
        })?;
        let (sa, sb) = (self.shape().to_vec(), rhs.shape().to_vec());
        Ok(bind_jvp(
            Binary::Sub,
            &[self, rhs],
            y,
            move |_| {
                vjp(move |g, _| {
                    Ok(grads![
                        Some(g[0].sum_to_shape(&sa)?),
                        Some(g[0].neg()?.sum_to_shape(&sb)?)
                    ])
                })
            },
            |t, _| sum_terms([Ok(t[0].clone()), t[1].as_ref().map(Tensor::neg).transpose()]),
        ))
    }

    /// `a · b` elementwise, broadcasting.
    pub fn mul(&self, rhs: &Tensor) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex::mul(self, rhs);
        }
        let y = super::table::binary_or(Binary::Mul, "mul", self, rhs, || {
            num_zip!("mul", self, rhs, Some(INT_MUL), |x, y| x.mul_wrap(y))
        })?;
        let (a, b) = (self.clone(), rhs.clone());
        Ok(bind_jvp(
            Binary::Mul,
            &[self, rhs],
            y,
            move |_| {
                vjp(move |g, needs| {
                    let ga = needs[0].then(|| g[0].mul(&b)?.sum_to_shape(a.shape())).transpose()?;
                    let gb = needs[1].then(|| g[0].mul(&a)?.sum_to_shape(b.shape())).transpose()?;
                    Ok(grads![ga, gb])
                })
            },
            |t, _| {
                sum_terms([
                    t[0].as_ref().map(|ta| ta.mul(rhs)).transpose(),
                    t[1].as_ref().map(|tb| self.mul(tb)).transpose(),
                ])
            },
        ))
    }

    /// `a / b` elementwise, broadcasting. Integers divide truncating toward
    /// zero (`MIN / -1` wraps); integer division by zero is an error.
    pub fn div(&self, rhs: &Tensor) -> Result<Tensor> {
        let _site = crate::dispatch::site::user_op("div", &[("x", self), ("y", rhs)]);
        if self.dtype().is_complex() {
            return super::complex::div(self, rhs);
        }
        expect_same_dtype("div", self, rhs)?;
        // (a divisor on a GPU is checked there: one value read back)
        let has_zero = |r: &Tensor| -> Result<bool> {
            if r.device_buffer().is_none() {
                return Ok(r.f64_values("div")?.contains(&0.0));
            }
            let all: Vec<isize> = (0..r.rank() as isize).collect();
            let zero = r.eq(&scalar_for("div", r, 0.0)?)?.any(&all, false)?;
            Ok(zero.to_vec::<bool>()?.iter().any(|&z| z))
        };
        if rhs.dtype().is_int() && has_zero(rhs)? {
            return Err(Error::invalid(
                "div",
                format!(
                    "integer division by zero ({} {:?} / {} {:?})",
                    self.dtype(),
                    self.shape(),
                    rhs.dtype(),
                    rhs.shape()
                ),
            ));
        }
        let ints = |a: &Tensor, b: &Tensor| match a.dtype() {
            DType::I32 => zip::<i32, i32, i32>("div", a, b, i32::wrapping_div),
            _ => zip::<i64, i64, i64>("div", a, b, i64::wrapping_div),
        };
        let y = match self.dtype() {
            DType::I32 | DType::I64 => match int_on_device("div", self, rhs, Some(INT_DIV), |h| ints(&h[0], &h[1])) {
                Some(r) => r,
                None => ints(self, rhs),
            },
            _ => super::table::binary_or(Binary::Div, "div", self, rhs, || {
                num_zip!("div", self, rhs, None, |x, y| x / y)
            }),
        }?;
        let (a, b) = (self.clone(), rhs.clone());
        Ok(bind_jvp(
            Binary::Div,
            &[self, rhs],
            y,
            move |_| {
                vjp(move |g, needs| {
                    let ga = needs[0].then(|| g[0].div(&b)?.sum_to_shape(a.shape())).transpose()?;
                    let gb = needs[1]
                        .then(|| g[0].mul(&a.div(&b)?.div(&b)?)?.neg()?.sum_to_shape(b.shape()))
                        .transpose()?;
                    Ok(grads![ga, gb])
                })
            },
            |t, y| {
                sum_terms([
                    t[0].as_ref().map(|ta| ta.div(rhs)).transpose(),
                    t[1].as_ref().map(|tb| tb.mul(y)?.div(rhs)?.neg()).transpose(),
                ])
            },
        ))
    }

    /// `aᵇ` elementwise, broadcasting (one dtype). d/da = b·aᵇ⁻¹; d/db = aᵇ·ln a
    /// where a > 0, else 0 (as TensorFlow; for complex `a`, `exp(b ln a)`
    /// with d/db = 0 where a = 0, and gradients conjugated as TensorFlow's).
    ///
    /// Integers (one dtype) as TensorFlow's: repeated multiplication,
    /// wrapping on overflow (`0⁰ = 1`); a negative exponent is an error.
    /// Not differentiable.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let p = Tensor::vector(&[2i32, -3, 0]).pow(&Tensor::vector(&[3i32, 3, 0]))?;
    /// assert_eq!(p.to_vec::<i32>()?, vec![8, -27, 1]);
    /// assert!(Tensor::scalar(2i32).pow(&Tensor::scalar(-1i32)).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn pow(&self, rhs: &Tensor) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::pow(self, rhs);
        }
        if self.dtype().is_int() {
            return int_pow(self, rhs);
        }
        expect_float("pow", self)?;
        expect_same_dtype("pow", self, rhs)?;
        let y = super::table::binary_or(Binary::Pow, "pow", self, rhs, || {
            unreachable!("pow of {}: checked above", self.dtype())
        })?;
        let (a, b) = (self.clone(), rhs.clone());
        Ok(bind_jvp(
            Binary::Pow,
            &[self, rhs],
            y,
            move |y| {
                let y = y.clone();
                vjp(move |g, needs| {
                    let ga = needs[0]
                        .then(|| g[0].mul(&b)?.mul(&a.pow(&b.sub_scalar(1.0)?)?)?.sum_to_shape(a.shape()))
                        .transpose()?;
                    let gb = needs[1]
                        .then(|| {
                            let pos = a.gt_scalar(0.0)?;
                            let safe = Tensor::where_(&pos, &a, &a.scalar_like(1.0)?)?;
                            let log_a = Tensor::where_(&pos, &safe.log()?, &a.scalar_like(0.0)?)?;
                            g[0].mul(&y)?.mul(&log_a)?.sum_to_shape(b.shape())
                        })
                        .transpose()?;
                    Ok(grads![ga, gb])
                })
            },
            |t, y| {
                sum_terms([
                    t[0].as_ref()
                        .map(|ta| ta.mul(rhs)?.mul(&self.pow(&rhs.sub_scalar(1.0)?)?))
                        .transpose(),
                    t[1].as_ref()
                        .map(|tb| tb.mul(y)?.mul(&log_where_positive(self)?))
                        .transpose(),
                ])
            },
        ))
    }

    /// Elementwise maximum, broadcasting; NaN if either element is NaN (as
    /// TensorFlow and NumPy). The gradient goes to `a` where `a >= b` (ties
    /// included), else to `b`, so at a NaN it goes to `b` (as TensorFlow).
    pub fn maximum(&self, rhs: &Tensor) -> Result<Tensor> {
        let y = super::table::binary_or(Binary::Maximum, "maximum", self, rhs, || {
            num_zip!("maximum", self, rhs, Some(INT_MAX), |x, y| if x >= y || is_nan(x) {
                x
            } else {
                y
            })
        })?;
        let (a, b) = (self.clone(), rhs.clone());
        Ok(bind_jvp(
            Binary::Maximum,
            &[self, rhs],
            y,
            move |_| vjp(move |g, _| route(&a.ge(&b)?, &g[0], &a, &b)),
            |t, _| {
                Tensor::where_(
                    &self.ge(rhs)?,
                    &tangent_or_zero(&t[0], self)?,
                    &tangent_or_zero(&t[1], rhs)?,
                )
            },
        ))
    }

    /// Elementwise minimum, broadcasting; NaN if either element is NaN. The
    /// gradient goes to `a` where `a <= b` (ties included), else to `b` (as
    /// TensorFlow, also at a NaN).
    pub fn minimum(&self, rhs: &Tensor) -> Result<Tensor> {
        let y = super::table::binary_or(Binary::Minimum, "minimum", self, rhs, || {
            num_zip!("minimum", self, rhs, Some(INT_MIN), |x, y| if x <= y || is_nan(x) {
                x
            } else {
                y
            })
        })?;
        let (a, b) = (self.clone(), rhs.clone());
        Ok(bind_jvp(
            Binary::Minimum,
            &[self, rhs],
            y,
            move |_| vjp(move |g, _| route(&a.le(&b)?, &g[0], &a, &b)),
            |t, _| {
                Tensor::where_(
                    &self.le(rhs)?,
                    &tangent_or_zero(&t[0], self)?,
                    &tangent_or_zero(&t[1], rhs)?,
                )
            },
        ))
    }

    /// `(a - b)²` elementwise, broadcasting (floats). d/da = 2(a - b),
    /// d/db = -2(a - b).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let d = Tensor::vector(&[1.0f64, 5.0]).squared_difference(&Tensor::scalar(3.0f64))?;
    /// assert_eq!(d.to_vec::<f64>()?, vec![4.0, 4.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn squared_difference(&self, rhs: &Tensor) -> Result<Tensor> {
        if self.dtype().is_int() {
            // (TensorFlow's integer kernels: wrapping, not differentiable)
            expect_same_dtype("squared_difference", self, rhs)?;
            let run = || {
                let d = self.sub(rhs)?;
                d.mul(&d)
            };
            return run().map_err(|e| e.for_op("squared_difference"));
        }
        expect_float("squared_difference", self)?;
        expect_same_dtype("squared_difference", self, rhs)?;
        let y = super::table::binary_or(
            Binary::SquaredDifference,
            "squared_difference",
            self,
            rhs,
            || with_float_dtype!(self.dtype(), T => zip::<T, T, T>("squared_difference", self, rhs, |x: T, y: T| (x - y) * (x - y)), _ => unreachable!()),
        )?;
        let (a, b) = (self.clone(), rhs.clone());
        Ok(bind(Binary::SquaredDifference, &[self, rhs], y, move |_| {
            vjp(move |g, needs| {
                let d = g[0].mul(&a.sub(&b)?.mul_scalar(2.0)?)?;
                let ga = needs[0].then(|| d.sum_to_shape(a.shape())).transpose()?;
                let gb = needs[1].then(|| d.neg()?.sum_to_shape(b.shape())).transpose()?;
                Ok(grads![ga, gb])
            })
        }))
    }

    /// Picks `a` where `cond` is true, else `b`; all three broadcast. `a` and
    /// `b` must share a dtype; `cond` is bool. Differentiable in `a` and `b`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let c = Tensor::vector(&[true, false]);
    /// let r = Tensor::where_(&c, &Tensor::vector(&[1.0f32, 2.0]), &Tensor::scalar(0.0f32))?;
    /// assert_eq!(r.to_vec::<f32>()?, vec![1.0, 0.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn where_(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        if cond.dtype() != crate::DType::Bool {
            return Err(unsupported("where", cond.dtype(), "bool condition"));
        }
        expect_same_dtype("where", a, b)?;
        let y = match crate::dispatch::device::offload(
            "where",
            &[cond, a, b],
            |_| {
                let op = "where";
                let shape = crate::tensor::layout::broadcast_shapes(op, cond.shape(), a.shape())?;
                let shape = crate::tensor::layout::broadcast_shapes(op, &shape, b.shape())?;
                crate::kernels::cuda::select(op, cond, a, b, &shape)
            },
            |h| select("where", &h[0], &h[1], &h[2]),
        ) {
            Some(r) => r?,
            None => select("where", cond, a, b)?,
        };
        let (c, sa, sb) = (cond.clone(), a.shape().to_vec(), b.shape().to_vec());
        Ok(bind_jvp(
            crate::ops::desc::Op::Select,
            &[cond, a, b],
            y,
            move |_| {
                vjp(move |g, needs| {
                    let zero = g[0].scalar_like(0.0)?;
                    let ga = needs[1]
                        .then(|| Tensor::where_(&c, &g[0], &zero)?.sum_to_shape(&sa))
                        .transpose()?;
                    let gb = needs[2]
                        .then(|| Tensor::where_(&c, &zero, &g[0])?.sum_to_shape(&sb))
                        .transpose()?;
                    Ok(grads![None, ga, gb])
                })
            },
            |t, _| Tensor::where_(cond, &tangent_or_zero(&t[1], a)?, &tangent_or_zero(&t[2], b)?),
        ))
    }
}

/// `ln a` where `a > 0`, else 0: the factor of d(aᵇ)/db (as TensorFlow).
fn log_where_positive(a: &Tensor) -> Result<Tensor> {
    let pos = a.gt_scalar(0.0)?;
    let safe = Tensor::where_(&pos, a, &a.scalar_like(1.0)?)?;
    Tensor::where_(&pos, &safe.log()?, &a.scalar_like(0.0)?)
}

/// The rule of maximum/minimum: `g` goes to `a` where `to_a`, else to `b`.
fn route(to_a: &Tensor, g: &Tensor, a: &Tensor, b: &Tensor) -> Result<crate::Grads> {
    let zero = g.scalar_like(0.0)?;
    Ok(grads![
        Some(Tensor::where_(to_a, g, &zero)?.sum_to_shape(a.shape())?),
        Some(Tensor::where_(to_a, &zero, g)?.sum_to_shape(b.shape())?)
    ])
}

/// `aᵇ` on integer tensors of one dtype (see [`Tensor::pow`]).
fn int_pow(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    /// `x^e` by squaring, wrapping (`e >= 0`)
    fn power<T: Num>(x: T, e: u64) -> T {
        let (mut base, mut e, mut acc) = (x, e, T::one());
        while e > 0 {
            if e & 1 == 1 {
                acc = acc.mul_wrap(base);
            }
            base = base.mul_wrap(base);
            e >>= 1;
        }
        acc
    }
    expect_same_dtype("pow", a, b)?;
    // (an empty result computes no power: TensorFlow checks each one it
    // computes, and takes `[0, 1, 1] ** -43`; the result is empty exactly
    // where `a` is, `b`'s emptiness leaving nothing to check)
    if a.numel() > 0 && crate::kernels::gpu::host_f64s("pow", b)?.iter().any(|&e| e < 0.0) {
        return Err(Error::invalid(
            "pow",
            format!(
                "integers to negative integer powers are not allowed ({} {:?} to the power of {} {:?})",
                a.dtype(),
                a.shape(),
                b.dtype(),
                b.shape()
            ),
        ));
    }
    let y = match a.dtype() {
        DType::I32 => zip::<i32, i32, i32>("pow", a, b, |x, e| power(x, e as u64))?,
        _ => zip::<i64, i64, i64>("pow", a, b, |x, e| power(x, e as u64))?,
    };
    Ok(crate::ops::bind_nondiff(Binary::Pow, &[a, b], y))
}
