//! The activations models ported from Keras 3 and PyTorch use beyond
//! `activation.rs`'s: `hard_sigmoid`, `hard_silu` (hard swish), `mish` and
//! its derivative, `celu`, Keras's `relu` with `negative_slope`,
//! `max_value` and `threshold` (`relu_with`), `hard_tanh`, `soft_shrink`,
//! `hard_shrink`, `tanh_shrink`, `glu`, `sparse_plus` and `squareplus`.
//!
//! Definitions, defaults and the derivatives at the kinks are Keras 3's
//! (TensorFlow backend) unless a doc says otherwise. Most are compositions
//! of differentiable ops, so every order of derivative, the traced graph
//! and forward mode come with them; where Keras's composition overflows or
//! cancels at extreme inputs (hard_silu's product rule, sparse_plus's and
//! squareplus's squares, mish's `1 − tanh²`) the composition here selects
//! with `where` between branches computed on inputs clamped to their own
//! side, so that no branch a `where` leaves out sends `0 · inf` into a
//! gradient. Mish is one elementwise op of the table (`Mish`, with its
//! derivative `MishGrad`), and so is `tanh_shrink` (`TanhShrink`, whose
//! difference cancels near 0).

use super::elementary::elementwise;
use crate::error::{Error, Result};
use crate::ops::desc::Unary;
use crate::ops::expect_float;
use crate::tensor::{DType, Tensor};

/// An error of `op` for a bad parameter.
fn bad(op: &'static str, x: &Tensor, what: String) -> Error {
    Error::invalid(op, format!("{what} ({} tensor of shape {:?})", x.dtype(), x.shape()))
}

/// The largest finite number of a float dtype.
fn dtype_max(d: DType) -> f64 {
    match d {
        DType::F16 => 65504.0,
        DType::BF16 => 3.389_531_389_251_535e38,
        DType::F32 => f32::MAX as f64,
        _ => f64::MAX,
    }
}

impl Tensor {
    /// Keras 3's hard sigmoid, `relu6(x + 3) / 6`: 0 for x ≤ −3, 1 for
    /// x ≥ 3, linear between. d/dx = 1/6 for −3 < x < 3, else 0 (0 at both
    /// kinks, relu6's).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-4.0f64, 0.0, 1.5, 9.0]);
    /// assert_eq!(x.hard_sigmoid()?.to_vec::<f64>()?, vec![0.0, 0.5, 0.75, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn hard_sigmoid(&self) -> Result<Tensor> {
        expect_float("hard_sigmoid", self)?;
        self.add_scalar(3.0)?.relu6()?.div_scalar(6.0)
    }

    /// Hard SiLU (hard swish, MobileNetV3), `x · hard_sigmoid(x)`: 0 for
    /// x ≤ −3, `x` for x ≥ 3, `x(x + 3)/6` between. d/dx is Keras's: 0 at
    /// −3 and 1 at 3 (the product rule on relu6's kinks). Computed as
    /// `where(x ≥ 3, x, m · hard_sigmoid(m))` with `m` = x inside (−3, 3)
    /// and 0 outside: Keras's product sends the cotangent times `x` into
    /// relu6's rule, NaN where that overflows (|x| near the maximum) and at
    /// `-inf`, where this is 0, its limit (and 1 at `+inf`).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-4.0f64, 0.0, 1.5, 9.0]);
    /// assert_eq!(x.hard_silu()?.to_vec::<f64>()?, vec![0.0, 0.0, 1.125, 9.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    #[doc(alias = "hard_swish")]
    pub fn hard_silu(&self) -> Result<Tensor> {
        expect_float("hard_silu", self)?;
        let three = self.scalar_like(3.0)?;
        // (false at NaN: m keeps it)
        let outside = self.abs()?.ge(&three)?;
        let m = Tensor::where_(&outside, &self.scalar_like(0.0)?, self)?;
        let inner = m.mul(&m.hard_sigmoid()?)?;
        Tensor::where_(&self.ge(&three)?, self, &inner)
    }

    /// Mish, `x · tanh(softplus(x))`, one elementwise op (`Mish`) whose
    /// derivative is another (`MishGrad`, see [`mish_grad`](Self::mish_grad)):
    /// finite wherever `x` is, at any cotangent (Keras's composition's
    /// gradient is NaN where `x` times the cotangent overflows, and its
    /// `1 − tanh²` cancels to 0 for x ≫ 0). NaN at `-inf` (`-inf · 0`, as
    /// Keras's). Every order of gradient is available.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[0.0f64, 1.0, 1e300]);
    /// let y = x.mish()?.to_vec::<f64>()?;
    /// assert!(y[0] == 0.0 && (y[1] - 0.8650983882673103).abs() < 1e-15 && y[2] == 1e300);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn mish(&self) -> Result<Tensor> {
        expect_float("mish", self)?;
        let y = super::table::float_unary(Unary::Mish, "mish", self)?;
        Ok(elementwise(Unary::Mish, self, y, |x, _| x.mish_grad()))
    }

    /// Mish's derivative, `t + x·σ(x)·(1 − t²)` with `t = tanh(softplus(x))`,
    /// one elementwise op (computed with `1 − t = 2/(n + 2)`, `n = eˣ(eˣ +
    /// 2)`, without cancellation): 1 and 0 in the limits, NaN at ±inf. d/dx
    /// = `2qσ + (q·x)·σ·(σ(−x) − 2tσ)` with `q = 1 − t²`, written with
    /// differentiable ops (`q·x` rather than `x·(…)`: finite wherever `x` is).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[0.0f64, f64::MAX, -f64::MAX]);
    /// assert_eq!(x.mish_grad()?.to_vec::<f64>()?, vec![0.6, 1.0, 0.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn mish_grad(&self) -> Result<Tensor> {
        expect_float("mish_grad", self)?;
        let y = super::table::float_unary(Unary::MishGrad, "mish_grad", self)?;
        Ok(elementwise(Unary::MishGrad, self, y, |x, _| {
            let t = x.softplus()?.tanh()?;
            let e = x.exp()?;
            // 1 − t = 2/(n + 2), 0 where n overflows (x ≫ 0)
            let u = e
                .mul(&e.add_scalar(2.0)?)?
                .add_scalar(2.0)?
                .reciprocal()?
                .mul_scalar(2.0)?;
            let q = u.mul(&t.add_scalar(1.0)?)?;
            let (s, sn) = (x.sigmoid()?, x.neg()?.sigmoid()?);
            let inner = s.mul(&sn.sub(&t.mul(&s)?.mul_scalar(2.0)?)?)?;
            q.mul(&s)?.mul_scalar(2.0)?.add(&q.mul(x)?.mul(&inner)?)
        }))
    }

    /// CELU (Keras's `celu`, PyTorch's `celu`): `x` for x > 0, else
    /// `α·(e^(x/α) − 1)`. d/dx = 1 at 0 (the function is smooth there;
    /// Keras's `max(x, 0) + α·expm1(min(x, 0)/α)` gives 2, both `max` and
    /// `min` passing the gradient at the tie), `e^(x/α)` below, 1 above.
    /// `alpha` must be finite and positive (an error naming `celu`).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-2.0f64, 0.0, 3.0]);
    /// let y = x.celu(2.0)?.to_vec::<f64>()?;
    /// assert!((y[0] - 2.0 * (-1.0f64).exp_m1()).abs() < 1e-15 && y[1] == 0.0 && y[2] == 3.0);
    /// assert!(x.celu(-1.0).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn celu(&self, alpha: f64) -> Result<Tensor> {
        expect_float("celu", self)?;
        if !(alpha > 0.0 && alpha.is_finite()) {
            return Err(bad(
                "celu",
                self,
                format!("alpha must be positive and finite, got {alpha}"),
            ));
        }
        let pos = self.gt_scalar(0.0)?;
        let xn = Tensor::where_(&pos, &self.scalar_like(0.0)?, self)?;
        let neg = xn.div_scalar(alpha)?.expm1()?.mul_scalar(alpha)?;
        Tensor::where_(&pos, self, &neg)
    }

    /// Keras's `relu(x, negative_slope, max_value, threshold)`: `x` above
    /// `threshold` (capped at `max_value` when given), and
    /// `negative_slope · (x − threshold)` at or below it. Built as Keras
    /// builds it (`leaky_relu` for a slope alone, `relu6` for a cap of 6,
    /// `clip_by_value` for another cap, `where(x > threshold, x, 0)`), so
    /// the derivatives at the kinks are Keras's: at `threshold` 0 (with a
    /// slope and threshold 0 but no cap: the slope, `leaky_relu`'s); at a
    /// cap of 6 (no threshold) 0, at another cap 1. Parameters are refused
    /// as Keras's `ReLU` layer refuses them: negative or NaN
    /// `negative_slope`, `max_value` or `threshold` (an error naming
    /// `relu`).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-10.0f64, -5.0, 0.0, 5.0, 10.0]);
    /// assert_eq!(x.relu_with(0.5, None, 0.0)?.to_vec::<f64>()?, vec![-5.0, -2.5, 0.0, 5.0, 10.0]);
    /// assert_eq!(x.relu_with(0.0, Some(5.0), 0.0)?.to_vec::<f64>()?, vec![0.0, 0.0, 0.0, 5.0, 5.0]);
    /// assert_eq!(x.relu_with(0.0, None, 5.0)?.to_vec::<f64>()?, vec![0.0, 0.0, 0.0, 0.0, 10.0]);
    /// assert!(x.relu_with(-1.0, None, 0.0).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn relu_with(&self, negative_slope: f64, max_value: Option<f64>, threshold: f64) -> Result<Tensor> {
        expect_float("relu", self)?;
        for (name, v) in [
            ("negative_slope", negative_slope),
            ("max_value", max_value.unwrap_or(0.0)),
            ("threshold", threshold),
        ] {
            if v.is_nan() || v < 0.0 {
                return Err(bad(
                    "relu",
                    self,
                    format!("{name} must not be negative or NaN, got {v}"),
                ));
            }
        }
        let x = self;
        if negative_slope != 0.0 && max_value.is_none() && threshold == 0.0 {
            return x.leaky_relu(negative_slope);
        }
        let negative_part = if negative_slope != 0.0 {
            Some(if threshold != 0.0 {
                x.neg()?.add_scalar(threshold)?.relu()?
            } else {
                x.neg()?.relu()?
            })
        } else {
            None
        };
        let mut cap = max_value;
        let mut y = if threshold != 0.0 {
            Tensor::where_(&x.gt_scalar(threshold)?, x, &x.scalar_like(0.0)?)?
        } else if max_value == Some(6.0) {
            cap = None;
            x.relu6()?
        } else {
            x.relu()?
        };
        if let Some(m) = cap {
            y = y.clip_by_value(0.0, m)?;
        }
        if let Some(n) = negative_part {
            y = y.sub(&n.mul_scalar(negative_slope)?)?;
        }
        Ok(y)
    }

    /// Keras's `hard_tanh`, `x` clipped into [−1, 1] (`clip_by_value`: the
    /// gradient passes at ±1, as Keras's; PyTorch's `hardtanh` gives 0
    /// there).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-2.0f32, 0.5, 3.0]);
    /// assert_eq!(x.hard_tanh()?.to_vec::<f32>()?, vec![-1.0, 0.5, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn hard_tanh(&self) -> Result<Tensor> {
        self.hard_tanh_range(-1.0, 1.0)
    }

    /// PyTorch's `hardtanh(min_val, max_val)`: `x` clipped into
    /// `[min_val, max_val]`, with Keras's gradient at the bounds (passed,
    /// `clip_by_value`'s). `min_val > max_val` or a NaN bound is an error
    /// naming `hard_tanh`.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-2.0f32, 0.5, 3.0]);
    /// assert_eq!(x.hard_tanh_range(0.0, 2.0)?.to_vec::<f32>()?, vec![0.0, 0.5, 2.0]);
    /// assert!(x.hard_tanh_range(1.0, 0.0).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn hard_tanh_range(&self, min_val: f64, max_val: f64) -> Result<Tensor> {
        expect_float("hard_tanh", self)?;
        if min_val.is_nan() || max_val.is_nan() || min_val > max_val {
            return Err(bad(
                "hard_tanh",
                self,
                format!("need min_val <= max_val, got {min_val} and {max_val}"),
            ));
        }
        self.clip_by_value(min_val, max_val)
    }

    /// Soft shrinkage (Keras's `soft_shrink`, PyTorch's `softshrink`):
    /// `x − t` for x > t, `x + t` for x < −t, else 0 (Keras's default
    /// `t = 0.5`). d/dx = 1 outside [−t, t], 0 inside and at ±t. A negative
    /// or NaN threshold is an error naming `soft_shrink` (as PyTorch's;
    /// Keras computes it).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-2.0f64, 0.25, 1.0]);
    /// assert_eq!(x.soft_shrink(0.5)?.to_vec::<f64>()?, vec![-1.5, 0.0, 0.5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn soft_shrink(&self, threshold: f64) -> Result<Tensor> {
        expect_float("soft_shrink", self)?;
        shrink_threshold("soft_shrink", self, threshold)?;
        let zero = self.scalar_like(0.0)?;
        let below = Tensor::where_(&self.lt_scalar(-threshold)?, &self.add_scalar(threshold)?, &zero)?;
        Tensor::where_(&self.gt_scalar(threshold)?, &self.sub_scalar(threshold)?, &below)
    }

    /// Hard shrinkage (Keras's `hard_shrink`, PyTorch's `hardshrink`): `x`
    /// where |x| > t, else 0 (default `t = 0.5`). d/dx = 1 where |x| > t, 0
    /// elsewhere (at ±t too). A negative or NaN threshold is an error naming
    /// `hard_shrink`.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-2.0f64, 0.5, 1.0]);
    /// assert_eq!(x.hard_shrink(0.5)?.to_vec::<f64>()?, vec![-2.0, 0.0, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn hard_shrink(&self, threshold: f64) -> Result<Tensor> {
        expect_float("hard_shrink", self)?;
        shrink_threshold("hard_shrink", self, threshold)?;
        Tensor::where_(&self.abs()?.gt_scalar(threshold)?, self, &self.scalar_like(0.0)?)
    }

    /// `x − tanh(x)` (Keras's `tanh_shrink`, PyTorch's `tanhshrink`), one
    /// elementwise op (`TanhShrink`): below |x| = 0.3 its Taylor series
    /// `x³/3 − 2x⁵/15 + …`, where Keras's difference cancels (to 0 at
    /// 1e-30, where it is 3.3e-91). d/dx = tanh²(x), written with
    /// differentiable ops.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[0.0f64, 1e-30, 1e300]);
    /// let y = x.tanh_shrink()?.to_vec::<f64>()?;
    /// assert!(y[0] == 0.0 && (y[1] * 3e90 - 1.0).abs() < 1e-15 && y[2] == 1e300);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn tanh_shrink(&self) -> Result<Tensor> {
        expect_float("tanh_shrink", self)?;
        let y = super::table::float_unary(Unary::TanhShrink, "tanh_shrink", self)?;
        Ok(elementwise(Unary::TanhShrink, self, y, |x, _| x.tanh()?.square()))
    }

    /// Gated linear unit (Keras's `glu`, PyTorch's `glu`): the input split
    /// in two halves `a`, `b` along `axis`, `a · sigmoid(b)`. An odd length
    /// along `axis` or an axis out of range is an error naming `glu`.
    ///
    /// ```
    /// let x = gradtape::Tensor::from_vec(vec![2.0f64, -3.0, 0.0, 0.0], &[1, 4])?;
    /// assert_eq!(x.glu(-1)?.to_vec::<f64>()?, vec![1.0, -1.5]);
    /// assert!(gradtape::Tensor::vector(&[1.0f64, 2.0, 3.0]).glu(0).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn glu(&self, axis: isize) -> Result<Tensor> {
        expect_float("glu", self)?;
        let rank = self.shape().len() as isize;
        let ax = if axis < 0 { axis + rank } else { axis };
        if !(0..rank).contains(&ax) {
            return Err(bad("glu", self, format!("axis {axis} out of range")));
        }
        let d = self.shape()[ax as usize];
        if !d.is_multiple_of(2) {
            return Err(bad(
                "glu",
                self,
                format!("the length along axis {axis} must be even, got {d}"),
            ));
        }
        let ab = self.split(2, axis)?;
        ab[0].mul(&ab[1].sigmoid()?)
    }

    /// Keras's `sparse_plus`: 0 for x ≤ −1, `(x + 1)²/4` for −1 < x < 1,
    /// `x` for x ≥ 1. d/dx = 0, `(x + 1)/2`, 1 (0 at −1, 1 at 1, Keras's
    /// branches). The square is computed on `x` clamped to [−1, 1], so that
    /// the branch left out neither overflows nor sends NaN into a gradient.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-2.0f64, 0.0, 3.0]);
    /// assert_eq!(x.sparse_plus()?.to_vec::<f64>()?, vec![0.0, 0.25, 3.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn sparse_plus(&self) -> Result<Tensor> {
        expect_float("sparse_plus", self)?;
        let mid = self
            .clip_by_value(-1.0, 1.0)?
            .add_scalar(1.0)?
            .square()?
            .mul_scalar(0.25)?;
        let upper = Tensor::where_(&self.lt_scalar(1.0)?, &mid, self)?;
        let low = self.le(&self.scalar_like(-1.0)?)?;
        Tensor::where_(&low, &self.scalar_like(0.0)?, &upper)
    }

    /// Squareplus (Keras's `squareplus`, default `b = 4`):
    /// `(x + √(x² + b))/2`, a smooth relu. Computed without Keras's
    /// overflow of `x²` (|x| beyond √max gave `inf` or NaN) and its
    /// cancellation for x ≪ 0: `x + (b/2)/(r + x)` for x ≥ 0 and
    /// `(b/2)/(r − x)` below, with `r = s·√((x/s)² + (√b/s)²)`, `s =
    /// max(|x|, 1)` held constant (`r` does not depend on it). In these
    /// forms the cotangent reaching `r` is small where `r` is large, so no
    /// product overflows in the gradient, and the second derivative comes
    /// from the quotient's accurate terms (the `r''` it also takes is
    /// weighted down by `1/(r ± x)²`). d/dx = `y/r`. `b = 0` is `relu`; a
    /// negative or non-finite `b` is an error naming `squareplus`.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[0.0f64, 1.5, 1e300, -1e300]);
    /// let y = x.squareplus(4.0)?.to_vec::<f64>()?;
    /// assert!(y[0] == 1.0 && (y[1] - 2.0).abs() < 1e-15 && y[2] == 1e300 && (y[3] * 1e300 - 1.0).abs() < 1e-15);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn squareplus(&self, b: f64) -> Result<Tensor> {
        expect_float("squareplus", self)?;
        if !(b >= 0.0 && b.is_finite()) {
            return Err(bad(
                "squareplus",
                self,
                format!("b must be finite and not negative, got {b}"),
            ));
        }
        if b == 0.0 {
            return self.relu();
        }
        let zero = self.scalar_like(0.0)?;
        let (one, cap, sb) = (
            self.scalar_like(1.0)?,
            self.scalar_like(dtype_max(self.dtype()))?,
            self.scalar_like(b.sqrt())?,
        );
        // √(v² + b) without overflow
        let r = |v: &Tensor| -> Result<Tensor> {
            let s = v.abs()?.maximum(&one)?.minimum(&cap)?.stop_gradient();
            v.div(&s)?.square()?.add(&sb.div(&s)?.square()?)?.sqrt()?.mul(&s)
        };
        let nonneg = self.ge(&zero)?;
        let pos = Tensor::where_(&nonneg, self, &zero)?;
        let neg = Tensor::where_(&nonneg, &zero, self)?;
        let upper = pos.add(&self.scalar_like(b / 2.0)?.div(&r(&pos)?.add(&pos)?)?)?;
        let lower = self.scalar_like(b / 2.0)?.div(&r(&neg)?.sub(&neg)?)?;
        Tensor::where_(&nonneg, &upper, &lower)
    }
}

/// A shrink's threshold: not negative, not NaN.
fn shrink_threshold(op: &'static str, x: &Tensor, t: f64) -> Result<()> {
    if t.is_nan() || t < 0.0 {
        return Err(bad(op, x, format!("threshold must not be negative or NaN, got {t}")));
    }
    Ok(())
}
