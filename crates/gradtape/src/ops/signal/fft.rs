//! Discrete Fourier transforms over the innermost one, two or three axes,
//! as TensorFlow's `tf.signal` (`fft`, `ifft`, `rfft`, `irfft` and their
//! `2d` and `3d` forms), computed with the `rustfft` crate, always in f64: complex64
//! data is widened, transformed and rounded back. (Planning in one
//! precision only halves the `rustfft` code this crate instantiates, a
//! fifth of its unoptimised IR when both were planned; the f32 results are
//! the correctly rounded f64 ones, as accurate as an f32 FFT can be.)
//!
//! Two primitives: the complex transform and its inverse over the last
//! `rank` axes (the inverse scaled by `1/N`, `N` the number of transformed
//! entries). Both are linear, so each is the other's rule: with
//! TensorFlow's convention for complex gradients (see `ops/complex.rs`) the
//! cotangent of `y = F x` is `Fᴴ ȳ = N · ifft(ȳ)`, and that of `ifft` is
//! `fft(ȳ) / N`. The real transforms are compositions: `rfft` pads or crops
//! the real input to `fft_length`, makes it complex and keeps the first
//! `n/2 + 1` entries of the last axis; `irfft` rebuilds the Hermitian
//! spectrum (`z_k`, then `conj(z_{n-k})`) and keeps the real part. Their
//! gradients follow from those steps and equal TensorFlow's.

use num_complex::Complex;
use rustfft::FftPlanner;

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::ops::desc::{FftOp, Lazy, Op};
use crate::ops::{bind_jvp, grads, only, unsupported};
use crate::tensor::{alloc, DType, Tensor};

/// Transforms every length-`n` row of `data` in place (rows of a contiguous
/// buffer), unnormalised.
fn rows(data: &mut [Complex<f64>], n: usize, inverse: bool) {
    if n == 0 || data.is_empty() {
        return;
    }
    let mut planner = FftPlanner::<f64>::new();
    let plan = if inverse {
        planner.plan_fft_inverse(n)
    } else {
        planner.plan_fft_forward(n)
    };
    plan.process(data);
}

/// The transform of the last `rank` axes of a contiguous buffer of
/// `shape` (transformed in place), scaled by `1/N` when `inverse`. The
/// scratch for the axes before the last is allocated fallibly.
fn transform(
    op: &'static str,
    mut out: Vec<Complex<f64>>,
    shape: &[usize],
    rank: usize,
    inverse: bool,
) -> Result<Vec<Complex<f64>>> {
    let r = shape.len();
    let n = shape[r - 1];
    rows(&mut out, n, inverse);
    let mut count = n;
    // each earlier axis (length m, the entries after it `inner` apart):
    // blocks of m x inner transposed into `col`, transformed, transposed back
    let mut inner = n;
    for a in (r - rank..r - 1).rev() {
        let m = shape[a];
        count *= m;
        // (no scratch for an empty batch: `[0, 2^32, 4]` has no column)
        if m > 0 && inner > 0 && !out.is_empty() {
            let mut col = alloc::try_filled(op, m * inner, Complex::new(0.0, 0.0))?;
            for block in out.chunks_mut(m * inner) {
                for i in 0..m {
                    for j in 0..inner {
                        col[j * m + i] = block[i * inner + j];
                    }
                }
                rows(&mut col, m, inverse);
                for i in 0..m {
                    for j in 0..inner {
                        block[i * inner + j] = col[j * m + i];
                    }
                }
            }
        }
        inner = inner.saturating_mul(m);
    }
    if inverse && count > 0 {
        let s = 1.0 / count as f64;
        for v in &mut out {
            *v *= s;
        }
    }
    Ok(out)
}

fn kernel(op: &'static str, x: &Tensor, rank: usize, inverse: bool) -> Result<Tensor> {
    // (no GPU kernel: on the CPU under soft device placement)
    if let Some(r) = crate::kernels::gpu::hosted(op, &[x], |h| kernel(op, &h[0], rank, inverse)) {
        return r;
    }
    if x.rank() < rank {
        return Err(Error::invalid(
            op,
            format!("needs rank >= {rank}, got shape {:?}", x.shape()),
        ));
    }
    let shape = x.shape();
    match x.dtype() {
        DType::C64 => {
            let narrow = x.owned_values::<Complex<f32>>(op)?;
            let mut wide = alloc::try_filled(op, narrow.len(), Complex::new(0.0, 0.0))?;
            for (w, z) in wide.iter_mut().zip(&narrow) {
                *w = Complex::new(z.re as f64, z.im as f64);
            }
            let wide = transform(op, wide, shape, rank, inverse)?;
            let mut narrow = narrow;
            for (z, w) in narrow.iter_mut().zip(&wide) {
                *z = Complex::new(w.re as f32, w.im as f32);
            }
            Tensor::from_vec(narrow, shape)
        }
        DType::C128 => {
            let v = transform(op, x.owned_values::<Complex<f64>>(op)?, shape, rank, inverse)?;
            Tensor::from_vec(v, shape)
        }
        d => Err(unsupported(op, d, "complex64 or complex128 (use rfft for real input)")),
    }
}

/// The number of entries one transform covers.
fn size(x: &Tensor, rank: usize) -> f64 {
    x.shape()[x.rank() - rank..].iter().product::<usize>() as f64
}

/// The complex transform (or its inverse) over the last `rank` axes.
fn fft_op(x: &Tensor, rank: usize, inverse: bool) -> Result<Tensor> {
    let op = FftOp {
        rank: rank as u8,
        inverse,
    };
    let y = kernel(op.public_name(), x, rank, inverse)?;
    Ok(bind_jvp(
        Lazy(op.name(), move || Op::Fft(op)),
        &[x],
        y,
        move |_| {
            vjp(move |g, _| {
                let n = size(&g[0], rank);
                let gx = if inverse {
                    fft_op(&g[0], rank, false)?.div_scalar(n)?
                } else {
                    fft_op(&g[0], rank, true)?.mul_scalar(n)?
                };
                Ok(grads![Some(gx)])
            })
        },
        move |t, _| fft_op(only(t)?, rank, inverse),
    ))
}

/// `x` cropped or zero-padded along each of its last `lengths.len()` axes
/// to `lengths`.
fn fit(op: &'static str, x: &Tensor, lengths: &[usize]) -> Result<Tensor> {
    let r = x.rank();
    let k = lengths.len();
    if r < k {
        return Err(Error::invalid(
            op,
            format!("needs rank >= {k}, got shape {:?}", x.shape()),
        ));
    }
    let mut y = x.clone();
    for (i, &want) in lengths.iter().enumerate() {
        let a = r - k + i;
        let have = y.shape()[a];
        if want < have {
            y = y.narrow(a as isize, 0, want)?;
        } else if want > have {
            let mut pads = vec![(0, 0); r];
            pads[a] = (0, want - have);
            y = y.pad(&pads)?;
        }
    }
    Ok(y)
}

/// The real transform over the last `rank` axes (`lengths`: the FFT
/// lengths, defaulting to the input's dims).
fn rfft_n(op: &'static str, x: &Tensor, rank: usize, lengths: Option<&[usize]>) -> Result<Tensor> {
    if !matches!(x.dtype(), DType::F32 | DType::F64) {
        return Err(unsupported(op, x.dtype(), "f32 or f64"));
    }
    if x.rank() < rank {
        return Err(Error::invalid(
            op,
            format!("needs rank >= {rank}, got shape {:?}", x.shape()),
        ));
    }
    let dims: Vec<usize> = match lengths {
        Some(l) if l.len() == rank => l.to_vec(),
        Some(l) => {
            return Err(Error::invalid(
                op,
                format!("{} FFT lengths given for {rank} axes", l.len()),
            ))
        }
        None => x.shape()[x.rank() - rank..].to_vec(),
    };
    let run = || {
        let xr = fit(op, x, &dims)?;
        let z = Tensor::complex(&xr, &xr.try_zeros_like()?)?;
        let f = fft_op(&z, rank, false)?;
        let n = dims[rank - 1];
        f.narrow(-1, 0, if n == 0 { 0 } else { n / 2 + 1 })
    };
    run().map_err(|e| e.for_op(op))
}

/// The inverse real transform over the last `rank` axes.
fn irfft_n(op: &'static str, z: &Tensor, rank: usize, lengths: Option<&[usize]>) -> Result<Tensor> {
    if !z.dtype().is_complex() {
        return Err(unsupported(op, z.dtype(), "complex64 or complex128"));
    }
    if z.rank() < rank {
        return Err(Error::invalid(
            op,
            format!("needs rank >= {rank}, got shape {:?}", z.shape()),
        ));
    }
    let r = z.rank();
    let dims: Vec<usize> = match lengths {
        Some(l) if l.len() == rank => l.to_vec(),
        Some(l) => {
            return Err(Error::invalid(
                op,
                format!("{} FFT lengths given for {rank} axes", l.len()),
            ))
        }
        None => {
            let mut d = z.shape()[r - rank..].to_vec();
            d[rank - 1] = 2 * d[rank - 1].saturating_sub(1);
            d
        }
    };
    let n = dims[rank - 1];
    let run = || {
        // the half spectrum of the last axis, the other axes at full length
        let mut fitted = dims.clone();
        fitted[rank - 1] = n / 2 + 1;
        let half = fit(op, z, &fitted)?;
        let full = if n == 0 {
            half.narrow(-1, 0, 0)?
        } else {
            let extra = n - (n / 2 + 1);
            if extra == 0 {
                half
            } else {
                // z_{n-k} = conj(z_k) for k = n-m .. 1, and for a 2-D or
                // 3-D transform the other axes are mirrored too (index
                // -i mod m)
                let mut tail = half.narrow(-1, 1, extra)?.reverse(&[-1])?.conj()?;
                for (j, &m) in dims[..rank - 1].iter().enumerate() {
                    if m > 1 {
                        let a = j as isize - rank as isize;
                        let first = tail.narrow(a, 0, 1)?;
                        let rest = tail.narrow(a, 1, m - 1)?.reverse(&[a])?;
                        tail = Tensor::concat(&[&first, &rest], a)?;
                    }
                }
                Tensor::concat(&[&half, &tail], -1)?
            }
        };
        fft_op(&full, rank, true)?.real()
    };
    run().map_err(|e| e.for_op(op))
}

impl Tensor {
    /// The discrete Fourier transform of the last axis (complex64 or
    /// complex128; TensorFlow's `tf.signal.fft`). Unnormalised.
    ///
    /// ```
    /// use gradtape::{Complex, Tensor};
    /// let x = Tensor::vector(&[Complex::new(1.0f64, 0.0), Complex::new(2.0, 0.0)]);
    /// let y = x.fft()?.to_vec::<Complex<f64>>()?;
    /// assert_eq!(y, vec![Complex::new(3.0, 0.0), Complex::new(-1.0, 0.0)]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn fft(&self) -> Result<Tensor> {
        fft_op(self, 1, false)
    }

    /// The inverse transform of the last axis, scaled by `1/n` (so
    /// `x.fft()?.ifft()` is `x`).
    pub fn ifft(&self) -> Result<Tensor> {
        fft_op(self, 1, true)
    }

    /// The 2-D transform of the last two axes (`tf.signal.fft2d`).
    pub fn fft2d(&self) -> Result<Tensor> {
        fft_op(self, 2, false)
    }

    /// The inverse 2-D transform of the last two axes, scaled by `1/(m n)`.
    pub fn ifft2d(&self) -> Result<Tensor> {
        fft_op(self, 2, true)
    }

    /// The transform of a real last axis (f32 gives complex64, f64
    /// complex128), its `n/2 + 1` non-negative frequencies; the input is
    /// cropped or zero-padded to `fft_length` first when given
    /// (`tf.signal.rfft`). Differentiable.
    ///
    /// ```
    /// use gradtape::{Complex, Tensor};
    /// let x = Tensor::vector(&[1.0f64, 2.0, 3.0, 4.0]);
    /// let y = x.rfft(None)?.to_vec::<Complex<f64>>()?;
    /// assert_eq!(y, vec![Complex::new(10.0, 0.0), Complex::new(-2.0, 2.0), Complex::new(-2.0, 0.0)]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn rfft(&self, fft_length: Option<usize>) -> Result<Tensor> {
        rfft_n("rfft", self, 1, fft_length.as_ref().map(std::slice::from_ref))
    }

    /// The real signal of length `fft_length` (default `2 (m - 1)` for a
    /// last axis of `m` frequencies) whose `rfft` is `self`
    /// (`tf.signal.irfft`). The imaginary parts of the zero (and, for even
    /// lengths, the last) frequency are ignored. Differentiable.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[1.0f64, 2.0, 3.0, 4.0, 5.0]);
    /// let back = x.rfft(None)?.irfft(Some(5))?.to_vec::<f64>()?;
    /// assert!(back.iter().zip([1.0, 2.0, 3.0, 4.0, 5.0]).all(|(a, b)| (a - b).abs() < 1e-12));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn irfft(&self, fft_length: Option<usize>) -> Result<Tensor> {
        irfft_n("irfft", self, 1, fft_length.as_ref().map(std::slice::from_ref))
    }

    /// [`rfft`](Self::rfft) of the last two axes (`tf.signal.rfft2d`).
    pub fn rfft2d(&self, fft_length: Option<[usize; 2]>) -> Result<Tensor> {
        rfft_n("rfft2d", self, 2, fft_length.as_ref().map(|l| &l[..]))
    }

    /// [`irfft`](Self::irfft) of the last two axes (`tf.signal.irfft2d`).
    pub fn irfft2d(&self, fft_length: Option<[usize; 2]>) -> Result<Tensor> {
        irfft_n("irfft2d", self, 2, fft_length.as_ref().map(|l| &l[..]))
    }

    /// The 3-D transform of the last three axes (complex64 or complex128;
    /// `tf.signal.fft3d`). Unnormalised; differentiable to any order (its
    /// cotangent is `N` times the inverse transform of the output's,
    /// `N = l m n`).
    ///
    /// ```
    /// use gradtape::{Complex, Tensor};
    /// let x = Tensor::from_vec(vec![Complex::new(1.0f64, 0.0); 8], &[2, 2, 2])?;
    /// let y = x.fft3d()?.to_vec::<Complex<f64>>()?;
    /// assert_eq!(y[0], Complex::new(8.0, 0.0));
    /// assert!(y[1..].iter().all(|z| z.norm() == 0.0));
    /// assert!(Tensor::from_vec(vec![Complex::new(1.0f64, 0.0); 4], &[2, 2])?.fft3d().is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn fft3d(&self) -> Result<Tensor> {
        fft_op(self, 3, false)
    }

    /// The inverse 3-D transform of the last three axes, scaled by
    /// `1/(l m n)` (`tf.signal.ifft3d`; `x.fft3d()?.ifft3d()` is `x`).
    ///
    /// ```
    /// use gradtape::{Complex, Tensor};
    /// let v: Vec<Complex<f64>> = (0..12).map(|i| Complex::new(i as f64, 1.0 - i as f64)).collect();
    /// let x = Tensor::from_vec(v.clone(), &[2, 3, 2])?;
    /// let back = x.fft3d()?.ifft3d()?.to_vec::<Complex<f64>>()?;
    /// assert!(back.iter().zip(&v).all(|(a, b)| (a - b).norm() < 1e-12));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn ifft3d(&self) -> Result<Tensor> {
        fft_op(self, 3, true)
    }

    /// [`rfft`](Self::rfft) of the last three axes (`tf.signal.rfft3d`):
    /// `f32` gives complex64, `f64` complex128, the last axis keeping its
    /// `n/2 + 1` non-negative frequencies; the input cropped or
    /// zero-padded to `fft_length` first when given. Differentiable
    /// (TensorFlow has no gradient for `RFFT3D`; this one is the
    /// composition's, as for [`rfft2d`](Self::rfft2d)).
    ///
    /// ```
    /// use gradtape::{Complex, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f64; 12], &[2, 2, 3])?;
    /// let y = x.rfft3d(None)?;
    /// assert_eq!(y.shape(), &[2, 2, 2]);
    /// assert_eq!(y.to_vec::<Complex<f64>>()?[0], Complex::new(12.0, 0.0));
    /// assert_eq!(x.rfft3d(Some([2, 2, 4]))?.shape(), &[2, 2, 3]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn rfft3d(&self, fft_length: Option<[usize; 3]>) -> Result<Tensor> {
        rfft_n("rfft3d", self, 3, fft_length.as_ref().map(|l| &l[..]))
    }

    /// [`irfft`](Self::irfft) of the last three axes (`tf.signal.irfft3d`):
    /// the real signal whose `rfft3d` is `self`, of `fft_length` (default:
    /// the first two axes as given, the last `2 (m - 1)`). Differentiable
    /// (TensorFlow has no gradient for `IRFFT3D`; this one is the
    /// composition's, as for [`irfft2d`](Self::irfft2d)).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let v: Vec<f64> = (0..30).map(|i| (i as f64 * 0.7).sin()).collect();
    /// let x = Tensor::from_vec(v.clone(), &[2, 3, 5])?;
    /// let back = x.rfft3d(None)?.irfft3d(Some([2, 3, 5]))?.to_vec::<f64>()?;
    /// assert!(back.iter().zip(&v).all(|(a, b)| (a - b).abs() < 1e-12));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn irfft3d(&self, fft_length: Option<[usize; 3]>) -> Result<Tensor> {
        irfft_n("irfft3d", self, 3, fft_length.as_ref().map(|l| &l[..]))
    }
}
