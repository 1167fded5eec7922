//! Activation functions (floats): `softplus`, `softsign`, `relu6`,
//! `leaky_relu`, `elu`, `selu`, `gelu` (exact and tanh form) and the
//! derivatives of both forms (`gelu_grad`, `gelu_tanh_grad`), `silu` and
//! its derivative (`silu_grad`), and
//! `clip_by_value`. Kinks follow TensorFlow's gradient kernels:
//! relu6'(0) = relu6'(6) = 0, leaky_relu'(0) = alpha, elu'(0) = 1,
//! selu'(0) = scale, and `clip_by_value` passes the gradient where
//! `lo <= x <= hi` (boundaries included).

use super::elementary::{elementwise, fmap};
use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::elementwise::map;
use crate::ops::desc::{Unary, F64};
use crate::ops::{bind, bind_jvp, expect_float, grads, only, unsupported};
use crate::tensor::{with_num_dtype, Element, Tensor};

/// SELU's scale λ.
pub const SELU_SCALE: f64 = 1.050_700_987_355_480_5;
/// SELU's α.
pub const SELU_ALPHA: f64 = 1.673_263_242_354_377_3;

/// The derivative of elu/selu from their output `y`: `y + shift` where
/// `y < 0`, else `pos`. Selected, not blended (`g · where(..)`, never
/// `where(.., g · (y + shift), g)`), so that no `0 · inf` or `0 · NaN` of the
/// unselected side reaches a gradient or a tangent.
fn elu_slope(y: &Tensor, shift: f64, pos: f64) -> Result<Tensor> {
    Tensor::where_(&y.lt_scalar(0.0)?, &y.add_scalar(shift)?, &y.scalar_like(pos)?)
}

impl Tensor {
    /// `ln(1 + eˣ)`, computed without overflow (`max(x,0) + ln(1 + e^-|x|)`).
    /// d/dx = sigmoid(x).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[0.0f64, 1000.0]);
    /// assert_eq!(x.softplus()?.to_vec::<f64>()?, vec![std::f64::consts::LN_2, 1000.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn softplus(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Softplus, "softplus", self)?;
        Ok(elementwise(Unary::Softplus, self, y, |x, _| x.sigmoid()))
    }

    /// `x / (1 + |x|)` (NaN at ±inf, as TensorFlow's kernel: inf / inf).
    /// d/dx = r² with `r = 1 / (1 + |x|)` (TF's `SoftsignGrad`): 0 at ±inf,
    /// and written with `reciprocal` (whose rule is `-r²`) so that the
    /// second derivative `-2 sign(x) r³` is 0 there too, not `0 · inf`.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[1.0f64, -3.0]);
    /// assert_eq!(x.softsign()?.to_vec::<f64>()?, vec![0.5, -0.75]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn softsign(&self) -> Result<Tensor> {
        expect_float("softsign", self)?;
        let y = super::table::float_unary(Unary::Softsign, "softsign", self)?;
        Ok(elementwise(Unary::Softsign, self, y, |x, _| {
            x.abs()?.add_scalar(1.0)?.reciprocal()?.square()
        }))
    }

    /// `min(max(x, 0), 6)`. d/dx = 1 for 0 < x < 6, else 0 (0 at both kinks,
    /// as TensorFlow).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-1.0f32, 3.0, 7.0]);
    /// assert_eq!(x.relu6()?.to_vec::<f32>()?, vec![0.0, 3.0, 6.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn relu6(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Relu6, "relu6", self)?;
        let x = self.clone();
        Ok(bind(Unary::Relu6, &[self], y, move |_| {
            vjp(move |g, _| {
                // g · [x > 0] · [6 − x > 0] as two ReluGrads (6 − x > 0 is
                // x < 6 exactly: a float difference is 0 only for equal
                // operands), products as `g · mask` is: float ops all, that
                // a traced graph fuses with their neighbours (the masks as
                // comparisons, a LogicalAnd and a Cast were four bool passes)
                let below = x.scalar_like(6.0)?.sub(&x)?;
                Ok(grads![Some(super::binary::relu_grad(
                    &super::binary::relu_grad(&g[0], &x)?,
                    &below
                )?)])
            })
        }))
    }

    /// `x` for x > 0, else `alpha · x`. d/dx = 1 for x > 0, else `alpha`
    /// (so `alpha` at 0, as TensorFlow).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-2.0f64, 3.0]);
    /// assert_eq!(x.leaky_relu(0.2)?.to_vec::<f64>()?, vec![-0.4, 3.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn leaky_relu(&self, alpha: f64) -> Result<Tensor> {
        let y = // (the half types natively, as TensorFlow: alpha rounded to the type)
        super::table::unary_or(Unary::LeakyRelu(F64(alpha)), "leaky_relu", self, || {
            fmap!("leaky_relu", self, |v| if v > T::zero() { v } else { v * T::from_f64(alpha) })
        })?;
        let x = self.clone();
        Ok(bind(Unary::LeakyRelu(F64(alpha)), &[self], y, move |_| {
            vjp(move |g, _| {
                let pos = x.gt_scalar(0.0)?;
                Ok(grads![Some(Tensor::where_(&pos, &g[0], &g[0].mul_scalar(alpha)?)?)])
            })
        }))
    }

    /// `x` for x > 0, else `eˣ - 1`. d/dx = 1 for x >= 0, else `y + 1`
    /// (from the output, as TensorFlow's `EluGrad`: 1 at NaN and `+inf`, 0
    /// at `-inf`; forward-mode tangents agree).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[0.0f64, 2.0]);
    /// assert_eq!(x.elu()?.to_vec::<f64>()?, vec![0.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn elu(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Elu, "elu", self)?;
        Ok(bind_jvp(
            Unary::Elu,
            &[self],
            y,
            |y| {
                let y = y.clone();
                vjp(move |g, _| Ok(grads![Some(g[0].mul(&elu_slope(&y, 1.0, 1.0)?)?)]))
            },
            |t, y| only(t)?.mul(&elu_slope(y, 1.0, 1.0)?),
        ))
    }

    /// Scaled ELU: `λx` for x > 0, else `λα(eˣ - 1)` with TensorFlow's
    /// constants [`SELU_SCALE`] and [`SELU_ALPHA`]. d/dx = λ for x >= 0,
    /// else `y + λα` (λ at NaN and `+inf`, 0 at `-inf`, as TensorFlow's
    /// `SeluGrad`; forward-mode tangents agree).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[1.0f64]);
    /// assert_eq!(x.selu()?.to_vec::<f64>()?, vec![gradtape::SELU_SCALE]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn selu(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Selu, "selu", self)?;
        const SA: f64 = SELU_SCALE * SELU_ALPHA;
        Ok(bind_jvp(
            Unary::Selu,
            &[self],
            y,
            |y| {
                let y = y.clone();
                vjp(move |g, _| Ok(grads![Some(g[0].mul(&elu_slope(&y, SA, SELU_SCALE)?)?)]))
            },
            |t, y| only(t)?.mul(&elu_slope(y, SA, SELU_SCALE)?),
        ))
    }

    /// Gaussian error linear unit. Exact: `x · Φ(x) = x/2 · (1 + erf(x/√2))`,
    /// one elementwise op (`Gelu`) whose derivative `Φ(x) + x·φ(x)` is
    /// another (`GeluGrad`, see [`gelu_grad`](Self::gelu_grad)); with
    /// `approximate`, the tanh form
    /// `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))` (TensorFlow's
    /// function, computed as `x · σ(2u)`, which does not cancel for
    /// `x ≪ 0`), likewise one op (`GeluTanh`) with its derivative
    /// (`GeluTanhGrad`, [`gelu_tanh_grad`](Self::gelu_tanh_grad)). Every
    /// order of gradient is available.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[0.0f64, 1.0]);
    /// let y = x.gelu(false)?.to_vec::<f64>()?;
    /// assert!(y[0] == 0.0 && (y[1] - 0.8413447460685429).abs() < 1e-15);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn gelu(&self, approximate: bool) -> Result<Tensor> {
        expect_float("gelu", self)?;
        if approximate {
            let y = super::table::float_unary(Unary::GeluTanh, "gelu", self)?;
            return Ok(elementwise(Unary::GeluTanh, self, y, |x, _| x.gelu_tanh_grad()));
        }
        if let Some(y) = super::gelu_slope::gelu(self) {
            // (for a one-shot tape's rule: the slope made with the value)
            return y;
        }
        let y = super::table::float_unary(Unary::Gelu, "gelu", self)?;
        Ok(elementwise(Unary::Gelu, self, y, |x, _| x.gelu_grad()))
    }

    /// The exact GELU's derivative, `Φ(x) + x·φ(x)` (`Φ`, `φ` the standard
    /// normal's distribution and density), one elementwise op. d/dx =
    /// `φ(x) · (2 − x²)`, written with differentiable ops on `x` clamped
    /// to ±40 (where `φ` is 0 in every float type; beyond, `x²` overflows
    /// and `0 · inf` would be NaN at ±1e300), NaN at ±inf as the
    /// derivative itself.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[0.0f64]);
    /// assert_eq!(x.gelu_grad()?.to_vec::<f64>()?, vec![0.5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn gelu_grad(&self) -> Result<Tensor> {
        expect_float("gelu_grad", self)?;
        let y = super::table::float_unary(Unary::GeluGrad, "gelu_grad", self)?;
        Ok(elementwise(Unary::GeluGrad, self, y, |x, _| {
            let c = 0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2;
            // (+ (x − x): NaN at ±inf, where the first derivative is NaN
            // too, as TensorFlow's and JAX's; 0 at finite x)
            let x2 = x.clip_by_value(-40.0, 40.0)?.add(&x.sub(x)?)?.square()?;
            x2.mul_scalar(-0.5)?
                .exp()?
                .mul_scalar(c)?
                .mul(&x2.neg()?.add_scalar(2.0)?)
        }))
    }

    /// The derivative of GELU's tanh form (`gelu(true)`), one elementwise
    /// op: with `u = √(2/π)·(x + 0.044715 x³)`, `u' = √(2/π)·p`,
    /// `p = 1 + 3·0.044715 x²`, `s = σ(2u)` and `s̄ = σ(−2u)` (so that
    /// `(1 + tanh u)/2 = s` and `1 − tanh²u = 4 s s̄`, without their
    /// cancellation), `s + 2x·s·s̄·u'`. d/dx, written with differentiable
    /// ops: `2 s s̄ · (2u' + 2x(s̄ − s)u'² + 6·0.044715·√(2/π)·x²)`, on `x`
    /// clamped to ±30 (where it is 0, and `x³` would overflow); NaN at ±inf.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[0.0f64]);
    /// assert_eq!(x.gelu_tanh_grad()?.to_vec::<f64>()?, vec![0.5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn gelu_tanh_grad(&self) -> Result<Tensor> {
        expect_float("gelu_tanh_grad", self)?;
        let y = super::table::float_unary(Unary::GeluTanhGrad, "gelu_tanh_grad", self)?;
        Ok(elementwise(Unary::GeluTanhGrad, self, y, |x, _| {
            let [_, c, a] = crate::kernels::cpu::math::GELU_TANH;
            let bound = crate::kernels::cpu::math::GELU_TANH_SATURATED;
            // (+ (x − x): NaN at ±inf, as the derivative itself)
            let x = &x.clip_by_value(-bound, bound)?.add(&x.sub(x)?)?;
            let x2 = x.square()?;
            let u2 = x.add(&x2.mul(x)?.mul_scalar(a)?)?.mul_scalar(2.0 * c)?;
            let (s, sn) = (u2.sigmoid()?, u2.neg()?.sigmoid()?);
            let du = x2.mul_scalar(3.0 * a)?.add_scalar(1.0)?.mul_scalar(c)?;
            let inner = du
                .mul_scalar(2.0)?
                .add(&x.mul(&sn.sub(&s)?)?.mul(&du.square()?)?.mul_scalar(2.0)?)?
                .add(&x2.mul_scalar(6.0 * a * c)?)?;
            s.mul(&sn)?.mul_scalar(2.0)?.mul(&inner)
        }))
    }

    /// `x · sigmoid(x)` (also called swish), one elementwise op (`Silu`)
    /// whose derivative `σ(x) · (1 + x·σ(−x))` is another (`SiluGrad`, see
    /// [`silu_grad`](Self::silu_grad)): finite wherever `x` is, at any
    /// cotangent (the product `x · sigmoid(x)`'s rule multiplied the
    /// cotangent by `x`, which overflows near the dtype's maximum, and
    /// `inf · 0` made the gradient NaN). NaN at `-inf` (`-inf · 0`) as
    /// TensorFlow's. Every order of gradient is available.
    ///
    /// ```
    /// use gradtape::{GradientTape, Tensor};
    /// let x = Tensor::vector(&[0.0f64, f64::MAX / 2.0]);
    /// assert_eq!(x.silu()?.to_vec::<f64>()?, vec![0.0, f64::MAX / 2.0]);
    /// let tape = GradientTape::new();
    /// let y = tape.record(|| { tape.watch(&x); x.silu()?.mul_scalar(4.0)?.sum_all() })?;
    /// assert_eq!(tape.gradient(&y, &x)?.unwrap().to_vec::<f64>()?, vec![2.0, 4.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn silu(&self) -> Result<Tensor> {
        expect_float("silu", self)?;
        let y = super::table::float_unary(Unary::Silu, "silu", self)?;
        Ok(elementwise(Unary::Silu, self, y, |x, _| x.silu_grad()))
    }

    /// SiLU's derivative, `σ(x) · (1 + x·σ(−x))` (computed as `s + x·s·s̄`
    /// with `s = σ(x)`, `s̄ = σ(−x)`, never `1 − s`, which cancels for
    /// `x ≫ 0`), one elementwise op: 1 and 0 in the limits, NaN at ±inf
    /// (`inf · 0`, as TensorFlow's). d/dx = `s·s̄·(2 + x·(s̄ − s))`, written
    /// with differentiable ops (finite wherever `x` is: `x·(s̄ − s)` is at
    /// most `|x|`, and `s·s̄` is 0 where `2 + x·(s̄ − s)` is huge).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[0.0f64, f64::MAX, -f64::MAX]);
    /// assert_eq!(x.silu_grad()?.to_vec::<f64>()?, vec![0.5, 1.0, 0.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn silu_grad(&self) -> Result<Tensor> {
        expect_float("silu_grad", self)?;
        let y = super::table::float_unary(Unary::SiluGrad, "silu_grad", self)?;
        Ok(elementwise(Unary::SiluGrad, self, y, |x, _| {
            let (s, sn) = (x.sigmoid()?, x.neg()?.sigmoid()?);
            s.mul(&sn)?.mul(&x.mul(&sn.sub(&s)?)?.add_scalar(2.0)?)
        }))
    }

    /// Clamps every element into `[lo, hi]` (numeric dtypes; the bounds are
    /// converted to the tensor's dtype). The gradient passes where
    /// `lo <= x <= hi`, boundaries included, and is 0 outside (as
    /// TensorFlow). `lo > hi` or a NaN bound is an error.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-2.0f64, 0.5, 3.0]);
    /// assert_eq!(x.clip_by_value(-1.0, 1.0)?.to_vec::<f64>()?, vec![-1.0, 0.5, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn clip_by_value(&self, lo: f64, hi: f64) -> Result<Tensor> {
        if lo.is_nan() || hi.is_nan() || lo > hi {
            return Err(Error::invalid(
                "clip_by_value",
                format!(
                    "bounds must satisfy lo <= hi, got lo = {lo}, hi = {hi} ({} tensor of shape {:?})",
                    self.dtype(),
                    self.shape()
                ),
            ));
        }
        crate::ops::check_scalar("clip_by_value", self, lo)?;
        crate::ops::check_scalar("clip_by_value", self, hi)?;
        let y = super::table::unary_or(Unary::ClipByValue(F64(lo), F64(hi)), "clip_by_value", self, || {
            with_num_dtype!(self.dtype(), T => {
                let (l, h) = (T::from_f64(lo), T::from_f64(hi));
                map::<T, T>("clip_by_value", self, move |v: T| if v < l { l } else if v > h { h } else { v })
            }, _ => Err(unsupported("clip_by_value", self.dtype(), "a numeric dtype")))
        })?;
        let x = self.clone();
        Ok(bind(Unary::ClipByValue(F64(lo), F64(hi)), &[self], y, move |_| {
            vjp(move |g, _| {
                // (a choice, as TensorFlow's: an infinite or NaN cotangent
                // of a clipped element gives 0)
                let inside = x.ge(&x.scalar_like(lo)?)?.logical_and(&x.le(&x.scalar_like(hi)?)?)?;
                Ok(grads![Some(Tensor::where_(&inside, &g[0], &g[0].scalar_like(0.0)?)?)])
            })
        }))
    }

    /// Clips to bounds that are tensors, TensorFlow's `tf.clip_by_value`
    /// with tensor bounds: `maximum(minimum(self, hi), lo)`, each bound
    /// broadcast to `self`'s shape (an adversarial example projected on
    /// the ε-ball `[x − ε, x + ε]` around its clean input). The result has
    /// `self`'s shape: a bound that broadcasts `self` to a larger shape, or
    /// of another dtype, is an error naming the shapes and dtypes. The
    /// gradient goes to `self` where `lo <= self <= hi` (boundaries
    /// included), to `lo` where `self < lo`, to `hi` where `self > hi` (as
    /// TensorFlow, summed over a bound's broadcast axes). Where `lo > hi`
    /// the value is `lo`, as TensorFlow's; a NaN in `self` or in a bound
    /// gives NaN, its gradient going to `lo` (as TensorFlow's).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[0.0f64, 0.5, 2.0]);
    /// let c = Tensor::vector(&[0.25f64, 0.25, 1.75]);
    /// let y = x.clip_by_tensors(&c.add_scalar(-0.125)?, &c.add_scalar(0.125)?)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![0.125, 0.375, 1.875]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn clip_by_tensors(&self, lo: &Tensor, hi: &Tensor) -> Result<Tensor> {
        const OP: &str = "clip_by_tensors";
        for (what, b) in [("lo", lo), ("hi", hi)] {
            if b.dtype() != self.dtype() {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "the bound {what} must have the clipped tensor's dtype {}, got {} (shapes {:?} and {:?})",
                        self.dtype(),
                        b.dtype(),
                        self.shape(),
                        b.shape()
                    ),
                ));
            }
            let joint = crate::tensor::layout::broadcast_shapes(OP, self.shape(), b.shape())?;
            if joint.as_slice() != self.shape() {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "the bound {what} of shape {:?} must broadcast to the clipped tensor's shape {:?}, not widen it to {:?}",
                        b.shape(),
                        self.shape(),
                        joint.as_slice()
                    ),
                ));
            }
        }
        self.minimum(hi)?.maximum(lo)
    }
}
