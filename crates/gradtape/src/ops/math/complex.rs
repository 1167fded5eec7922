//! Complex numbers: the ops that build and take apart complex tensors
//! (`complex`, `real`, `imag`, `conj`, `angle`), and the complex forms of
//! the arithmetic ops, to which the real ops (`add`, `mul`, `abs`,
//! `matmul`, ...) hand a complex input. The holomorphic functions (`exp`,
//! `sqrt`, `sin`, `pow`, ...) are in `complex_fns.rs`.
//!
//! Gradients follow TensorFlow's convention. For a complex input `z = x + iy`
//! and a cotangent `g` of an output `w = f(z)`, the input cotangent is
//! `conj(df/dz) · g` for holomorphic `f`; in general, for a real loss `L`,
//! the gradient w.r.t. `z` is `dL/dx + i·dL/dy`. So the gradient of `c·z`
//! is `conj(c)` (seeded with ones), that of `|z|²` is `2z`, and a real loss
//! descends along `-grad` in the complex plane as it would in `R²`. Every
//! rule below is that formula written with these same differentiable ops,
//! so gradients of gradients work as for real tensors. Rules apply `conj`
//! where the real rule multiplies by a saved operand.

use crate::dispatch::vjp;
use crate::error::Result;
use crate::kernels::cpu::complex::{self as kc, BinKind};
use crate::kernels::cpu::elementwise::map;
use crate::kernels::cpu::matmul::matmul;
use crate::ops::desc::{Binary, Op, Unary, F64};
use crate::ops::{bind, grads, unsupported};
use crate::tensor::{with_float_dtype, DType, Element, Tensor};

impl Tensor {
    /// The complex tensor `re + i·im` from two real tensors of one float
    /// dtype (f32 gives complex64, f64 complex128), broadcasting. The
    /// gradient w.r.t. `re` is `real(g)`, w.r.t. `im` is `imag(g)`.
    ///
    /// ```
    /// use gradtape::{Complex, Tensor};
    /// let z = Tensor::complex(&Tensor::vector(&[1.0f64, 3.0]), &Tensor::scalar(2.0f64))?;
    /// assert_eq!(z.dtype(), gradtape::DType::C128);
    /// assert_eq!(z.to_vec::<Complex<f64>>()?, vec![Complex::new(1.0, 2.0), Complex::new(3.0, 2.0)]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn complex(re: &Tensor, im: &Tensor) -> Result<Tensor> {
        let y = kc::from_parts("complex", re, im)?;
        let (sr, si) = (re.shape().to_vec(), im.shape().to_vec());
        Ok(bind(Binary::Complex, &[re, im], y, move |_| {
            vjp(move |g, needs| {
                let gr = needs[0].then(|| g[0].real()?.sum_to_shape(&sr)).transpose()?;
                let gi = needs[1].then(|| g[0].imag()?.sum_to_shape(&si)).transpose()?;
                Ok(grads![gr, gi])
            })
        }))
    }

    /// The real parts of a complex tensor (f32 for complex64, f64 for
    /// complex128); a real tensor is returned as it is (recorded as an
    /// identity). The gradient is `complex(g, 0)`.
    ///
    /// ```
    /// use gradtape::{Complex, Tensor};
    /// let z = Tensor::vector(&[Complex::new(1.0f32, 2.0), Complex::new(-3.0, 0.5)]);
    /// assert_eq!(z.real()?.to_vec::<f32>()?, vec![1.0, -3.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn real(&self) -> Result<Tensor> {
        if !self.dtype().is_complex() {
            return Ok(self.identity());
        }
        let y = kc::re(self)?;
        Ok(bind(Unary::Real, &[self], y, |_| {
            vjp(|g, _| Ok(grads![Some(Tensor::complex(&g[0], &g[0].scalar_like(0.0)?)?)]))
        }))
    }

    /// The imaginary parts of a complex tensor (a real tensor); zeros for a
    /// real tensor. The gradient is `complex(0, g)`.
    ///
    /// ```
    /// use gradtape::{Complex, Tensor};
    /// let z = Tensor::vector(&[Complex::new(1.0f32, 2.0), Complex::new(-3.0, 0.5)]);
    /// assert_eq!(z.imag()?.to_vec::<f32>()?, vec![2.0, 0.5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn imag(&self) -> Result<Tensor> {
        if !self.dtype().is_complex() {
            return self.try_zeros_like();
        }
        let y = kc::im(self)?;
        Ok(bind(Unary::Imag, &[self], y, |_| {
            vjp(|g, _| Ok(grads![Some(Tensor::complex(&g[0].scalar_like(0.0)?, &g[0])?)]))
        }))
    }

    /// The complex conjugate `x - iy`; a real tensor is returned as it is
    /// (recorded as an identity). The gradient is `conj(g)`.
    ///
    /// ```
    /// use gradtape::{Complex, Tensor};
    /// let z = Tensor::scalar(Complex::new(1.0f64, 2.0));
    /// assert_eq!(z.conj()?.to_scalar::<Complex<f64>>()?, Complex::new(1.0, -2.0));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn conj(&self) -> Result<Tensor> {
        if !self.dtype().is_complex() {
            return Ok(self.identity());
        }
        let y = kc::conj(self)?;
        Ok(bind(Unary::Conj, &[self], y, |_| {
            vjp(|g, _| Ok(grads![Some(g[0].conj()?)]))
        }))
    }

    /// The argument `atan2(imag, real)` of each complex element, in
    /// `(-π, π]` (a real tensor). For a real float tensor, `π` where it is
    /// negative and 0 elsewhere, not differentiable (as TensorFlow). The
    /// gradient of the complex form is `i·g / conj(z)` (not finite at 0).
    ///
    /// ```
    /// use gradtape::{Complex, Tensor};
    /// let z = Tensor::vector(&[Complex::new(0.0f64, 2.0), Complex::new(-1.0, 0.0)]);
    /// let a = z.angle()?.to_vec::<f64>()?;
    /// assert_eq!(a, vec![std::f64::consts::FRAC_PI_2, std::f64::consts::PI]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn angle(&self) -> Result<Tensor> {
        if !self.dtype().is_complex() {
            let y = with_float_dtype!(self.dtype(), T => map::<T, T>("angle", self, |v: T| {
                if v < T::from_f64(0.0) { T::from_f64(std::f64::consts::PI) } else { T::from_f64(0.0) }
            }), _ => Err(unsupported("angle", self.dtype(), "a float or complex dtype")))?;
            return Ok(crate::ops::bind_nondiff(Unary::Angle, &[self], y));
        }
        let y = kc::angle(self)?;
        let z = self.clone();
        Ok(bind(Unary::Angle, &[self], y, move |_| {
            vjp(move |g, _| {
                // i·g / conj(z), as i·g · (1 / conj z): at z = 0 that is
                // NaN in both parts (TensorFlow's and JAX's), where the
                // quotient by a complex zero is an infinity
                let ig = Tensor::complex(&g[0].scalar_like(0.0)?, &g[0])?;
                Ok(grads![Some(ig.mul(&z.conj()?.reciprocal()?)?)])
            })
        }))
    }
}

/// `a + b` for complex `a` (dispatched from [`Tensor::add`]).
pub(crate) fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let y = kc::binary("add", a, b, BinKind::Add)?;
    let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
    Ok(bind(Binary::Add, &[a, b], y, move |_| {
        vjp(move |g, needs| {
            let ga = needs[0].then(|| g[0].sum_to_shape(&sa)).transpose()?;
            let gb = needs[1].then(|| g[0].sum_to_shape(&sb)).transpose()?;
            Ok(grads![ga, gb])
        })
    }))
}

/// `a - b` for complex `a`.
pub(crate) fn sub(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let y = kc::binary("sub", a, b, BinKind::Sub)?;
    let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
    Ok(bind(Binary::Sub, &[a, b], y, move |_| {
        vjp(move |g, needs| {
            let ga = needs[0].then(|| g[0].sum_to_shape(&sa)).transpose()?;
            let gb = needs[1].then(|| g[0].neg()?.sum_to_shape(&sb)).transpose()?;
            Ok(grads![ga, gb])
        })
    }))
}

/// `a · b` for complex `a`: `(g·conj b, g·conj a)`.
pub(crate) fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let y = kc::binary("mul", a, b, BinKind::Mul)?;
    let (ca, cb) = (a.clone(), b.clone());
    Ok(bind(Binary::Mul, &[a, b], y, move |_| {
        vjp(move |g, needs| {
            let ga = needs[0]
                .then(|| g[0].mul(&cb.conj()?)?.sum_to_shape(ca.shape()))
                .transpose()?;
            let gb = needs[1]
                .then(|| g[0].mul(&ca.conj()?)?.sum_to_shape(cb.shape()))
                .transpose()?;
            Ok(grads![ga, gb])
        })
    }))
}

/// `a / b` for complex `a`: `(g / conj b, -g · conj(a / b²))`.
pub(crate) fn div(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let y = kc::binary("div", a, b, BinKind::Div)?;
    let (ca, cb) = (a.clone(), b.clone());
    Ok(bind(Binary::Div, &[a, b], y, move |_| {
        vjp(move |g, needs| {
            let ga = needs[0]
                .then(|| g[0].div(&cb.conj()?)?.sum_to_shape(ca.shape()))
                .transpose()?;
            let gb = needs[1]
                .then(|| {
                    let q = ca.div(&cb)?.div(&cb)?.conj()?;
                    g[0].mul(&q)?.neg()?.sum_to_shape(cb.shape())
                })
                .transpose()?;
            Ok(grads![ga, gb])
        })
    }))
}

/// `-z`.
pub(crate) fn neg(x: &Tensor) -> Result<Tensor> {
    let y = kc::neg(x)?;
    Ok(bind(Unary::Neg, &[x], y, |_| vjp(|g, _| Ok(grads![Some(g[0].neg()?)]))))
}

/// `|z|` (real): `complex(g, 0) · z / |z|`, and 0 where `z = 0` (as
/// TensorFlow's `div_no_nan`, and abs'(0) = 0 for reals).
pub(crate) fn abs(x: &Tensor) -> Result<Tensor> {
    let y = kc::abs(x)?;
    let z = x.clone();
    Ok(bind(Unary::ComplexAbs, &[x], y, move |y| {
        let y = y.clone();
        vjp(move |g, _| {
            let zero = y.eq(&y.scalar_like(0.0)?)?;
            // divide by 1 where |z| = 0, so that no NaN reaches the gradient of this rule
            let safe = Tensor::complex(&Tensor::where_(&zero, &y.scalar_like(1.0)?, &y)?, &y.scalar_like(0.0)?)?;
            let unit = Tensor::where_(&zero, &z.scalar_like(0.0)?, &z.div(&safe)?)?;
            let gc = Tensor::complex(&g[0], &g[0].scalar_like(0.0)?)?;
            Ok(grads![Some(gc.mul(&unit)?)])
        })
    }))
}

/// `z · c` for a real constant `c`.
pub(crate) fn mul_scalar(x: &Tensor, c: f64) -> Result<Tensor> {
    let y = kc::mul_scalar(x, c)?;
    Ok(bind(Unary::MulScalar(F64(c)), &[x], y, move |_| {
        vjp(move |g, _| Ok(grads![Some(g[0].mul_scalar(c)?)]))
    }))
}

/// `z / c` for a real constant `c` (division by 0 gives infinities/NaN, as
/// for floats).
pub(crate) fn div_scalar(x: &Tensor, c: f64) -> Result<Tensor> {
    let y = kc::div_scalar(x, c)?;
    Ok(bind(Unary::DivScalar(F64(c)), &[x], y, move |_| {
        vjp(move |g, _| Ok(grads![Some(g[0].div_scalar(c)?)]))
    }))
}

/// `z + c` for a real constant `c`.
pub(crate) fn add_scalar(x: &Tensor, c: f64) -> Result<Tensor> {
    let y = kc::add_scalar(x, c)?;
    Ok(bind(Unary::AddScalar(F64(c)), &[x], y, |_| {
        crate::dispatch::pass_through()
    }))
}

/// Mean over `axes` of a complex tensor: the sum divided by the count.
pub(crate) fn mean(x: &Tensor, axes: &[isize], keepdims: bool) -> Result<Tensor> {
    let ax = crate::ops::reduce::norm_axes("mean", axes, x.shape())?;
    let n: usize = ax.iter().map(|&a| x.shape()[a]).product();
    x.sum(axes, keepdims)?.div_scalar(n as f64)
}

/// `op(a) @ op(b)` for complex operands (`op` transposes, it does not
/// conjugate). The rule is the real one with `conj a`, `conj b` in place of
/// `a`, `b`: for `A B`, `(G Bᴴ, Aᴴ G)`.
pub(crate) fn matmul_with(a: &Tensor, b: &Tensor, ta: bool, tb: bool) -> Result<Tensor> {
    let y = matmul(a, b, ta, tb)?;
    let (ca, cb) = (a.clone(), b.clone());
    Ok(bind(
        Op::MatMul {
            transpose_a: ta,
            transpose_b: tb,
        },
        &[a, b],
        y,
        move |_| {
            vjp(move |g, needs| {
                let g = &g[0];
                let ga = needs[0]
                    .then(|| {
                        let b = cb.conj()?;
                        match (ta, tb) {
                            (false, false) => g.matmul_with(&b, false, true),
                            (false, true) => g.matmul_with(&b, false, false),
                            (true, false) => b.matmul_with(g, false, true),
                            (true, true) => b.matmul_with(g, true, true),
                        }?
                        .sum_to_shape(ca.shape())
                    })
                    .transpose()?;
                let gb = needs[1]
                    .then(|| {
                        let a = ca.conj()?;
                        match (ta, tb) {
                            (false, false) => a.matmul_with(g, true, false),
                            (false, true) => g.matmul_with(&a, true, false),
                            (true, false) => a.matmul_with(g, false, false),
                            (true, true) => g.matmul_with(&a, true, true),
                        }?
                        .sum_to_shape(cb.shape())
                    })
                    .transpose()?;
                Ok(grads![ga, gb])
            })
        },
    ))
}

/// `cast` where the source or the target is complex: real to complex (the
/// gradient is the real part of the cotangent, cast back) and complex to
/// complex; complex to real is an error (use `real`).
pub(crate) fn cast(x: &Tensor, to: DType) -> Result<Tensor> {
    let y = kc::cast(x, to)?;
    let from = x.dtype();
    Ok(bind(Op::Cast(to), &[x], y, move |_| {
        vjp(move |g, _| {
            let g = if from.is_complex() {
                g[0].cast(from)?
            } else {
                g[0].real()?.cast(from)?
            };
            Ok(grads![Some(g)])
        })
    }))
}
