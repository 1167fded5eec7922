//! Cumulative sums and products along one axis, with TensorFlow's
//! `exclusive` and `reverse` flags.

use crate::dispatch::vjp;
use crate::error::Result;
use crate::kernels::cpu::build_rows;
use crate::kernels::cpu::lockstep::{chunks, chunks_mut, zip, zip3};
use crate::kernels::cpu::math::with_simd_for;
use crate::ops::desc::{Scan, ScanKind};
use crate::ops::{bind, grads, unsupported};
use crate::tensor::layout::norm_axis;
use crate::tensor::{with_complex_dtype, with_num_dtype, Element, Num, Tensor};
use num_traits::{One, Zero};

/// A running fold of `x` along axis `a`; `exclusive` writes the value before
/// each element is folded in, `reverse` runs from the end.
///
/// Each output is the same fold in the same order as a walk along the axis
/// element by element, but many folds run side by side: over a middle
/// axis a block of up to [`SCAN_W`] neighbouring columns (one vector
/// operation per row of the block), along the last axis [`SCAN_ROWS`]
/// rows at a time, a step of each in turn (independent chains: the adds
/// of one row's walk wait on each other, not on the other rows'); outer
/// slices over the compute threads. (Element by element, a `cumsum` over
/// [32, 64, 128] took 0.3 ms over its middle axis and 0.9 ms over its
/// first, 10-30x a sum; now about 0.05 ms. Along the last axis, tiles of
/// rows turned through a small array, whose copies stayed scalar, took
/// 0.33 ms of one thread's time; the side-by-side chains 0.10 ms.)
#[allow(clippy::too_many_arguments)]
fn scan<T: Element>(
    op: &'static str,
    x: &Tensor,
    a: usize,
    exclusive: bool,
    reverse: bool,
    init: T,
    f: impl Fn(T, T) -> T + Sync + Copy,
) -> Result<Tensor> {
    let shape = x.shape();
    let outer: usize = shape[..a].iter().product();
    let n = shape[a];
    let inner: usize = shape[a + 1..].iter().product();
    let src = x.values::<T>(op)?;
    // (an empty tensor is not walked, however many empty rows it has)
    if src.is_empty() {
        return Tensor::from_vec(Vec::<T>::new(), shape);
    }
    let src = &src[..];
    let data = build_rows::<T>(op, outer, n * inner, |rows, out| {
        with_simd_for::<T, T, _>(
            #[inline(always)]
            || {
                let at = |k: usize| if reverse { n - 1 - k } else { k };
                let src = &src[rows.start * n * inner..rows.end * n * inner];
                if inner == 1 {
                    // SCAN_ROWS rows at a time, one step of each in turn:
                    // independent chains, so each step waits on none of the
                    // others' adds (a tile turned through a small array
                    // took 3-4x as long, its copies scalar)
                    const R: usize = SCAN_ROWS;
                    let whole = src.len() / (R * n) * (R * n);
                    let ((gs, rest), (os, orest)) = (src.split_at(whole), out.split_at_mut(whole));
                    for (g, o) in zip(chunks(gs, R * n), chunks_mut(os, R * n)) {
                        let mut acc = [init; R];
                        for k in (0..n).map(at) {
                            for (j, a) in acc.iter_mut().enumerate() {
                                let next = f(*a, g[j * n + k]);
                                o[j * n + k].write(if exclusive { *a } else { next });
                                *a = next;
                            }
                        }
                    }
                    for (g, o) in zip(chunks(rest, n), chunks_mut(orest, n)) {
                        let mut a = init;
                        for k in (0..n).map(at) {
                            let next = f(a, g[k]);
                            o[k].write(if exclusive { a } else { next });
                            a = next;
                        }
                    }
                    return;
                }
                for (s, o) in zip(chunks(src, n * inner), chunks_mut(out, n * inner)) {
                    for c0 in (0..inner).step_by(SCAN_W) {
                        let w = (inner - c0).min(SCAN_W);
                        let mut acc = [init; SCAN_W];
                        for k in (0..n).map(at) {
                            let i = k * inner + c0;
                            for (a, &v, o) in zip3(&mut acc[..w], &s[i..i + w], &mut o[i..i + w]) {
                                let next = f(*a, v);
                                o.write(if exclusive { *a } else { next });
                                *a = next;
                            }
                        }
                    }
                }
            },
        )
    })?;
    Ok(Tensor::from_storage(T::buf_into_storage(data), shape))
}

/// Neighbouring columns [`scan`] folds side by side over a middle axis.
const SCAN_W: usize = 128;

/// Rows [`scan`] folds side by side along a last axis.
const SCAN_ROWS: usize = 16;

/// The CPU's cumulative sum.
fn cumsum_host(x: &Tensor, a: usize, exclusive: bool, reverse: bool) -> Result<Tensor> {
    with_num_dtype!(x.dtype(), T => scan::<T>("cumsum", x, a, exclusive, reverse, T::zero(), |p, v| p.add_wrap(v)),
        _ => with_complex_dtype!(x.dtype(), T => scan::<T>("cumsum", x, a, exclusive, reverse, T::zero(), |p, v| p + v),
            _ => Err(unsupported("cumsum", x.dtype(), "a numeric dtype"))))
}

/// The CPU's cumulative product.
fn cumprod_host(x: &Tensor, a: usize, exclusive: bool, reverse: bool) -> Result<Tensor> {
    with_num_dtype!(x.dtype(), T => scan::<T>("cumprod", x, a, exclusive, reverse, T::one(), |p, v| p.mul_wrap(v)),
        _ => with_complex_dtype!(x.dtype(), T => scan::<T>("cumprod", x, a, exclusive, reverse, T::one(), |p, v| p * v),
            _ => Err(unsupported("cumprod", x.dtype(), "a numeric dtype"))))
}

/// The scan on the GPU `x` lives on (`kernels::cuda::scan`: the CPU's
/// bits), or `None` on the CPU.
fn on_device(
    op: &'static str,
    x: &Tensor,
    a: usize,
    exclusive: bool,
    reverse: bool,
    prod: bool,
) -> Option<Result<Tensor>> {
    crate::dispatch::device::offload(
        op,
        &[x],
        |_| crate::kernels::cuda::scan(op, x, a, exclusive, reverse, prod),
        |h| {
            if prod {
                cumprod_host(&h[0], a, exclusive, reverse)
            } else {
                cumsum_host(&h[0], a, exclusive, reverse)
            }
        },
    )
}

impl Tensor {
    /// Cumulative sum along `axis` (numeric and complex dtypes; integers
    /// wrap). With
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
        if !(self.dtype().is_float() || self.dtype().is_int() || self.dtype().is_complex()) {
            return Err(unsupported("cumsum", self.dtype(), "a numeric dtype"));
        }
        let y = on_device("cumsum", self, a, exclusive, reverse, false)
            .unwrap_or_else(|| cumsum_host(self, a, exclusive, reverse))?;
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

    /// Cumulative product along `axis` (numeric and complex dtypes;
    /// integers wrap; the complex gradient is TensorFlow's, `g ·
    /// conj(∂y/∂x)`), with
    /// the same flags as [`Tensor::cumsum`] (an exclusive product starts at
    /// 1).
    ///
    /// The gradient needs no division (TensorFlow's, `cumsum(y · g,
    /// exclusive, !reverse) / x`, is wrong where `x` has zeros, and loses
    /// everything to cancellation where `x` spans many magnitudes): element
    /// `j` gets `Π_{m<j} x_m · r_j` with `r_j = Σ_{k≥j} g_k Π_{j<m≤k} x_m`,
    /// the solution of `r_j = g_j + x_{j+1} r_{j+1}` found in `log₂ n`
    /// doubling steps of differentiable ops (`cumprod_vjp`), so that its
    /// own derivatives are exact too, at zeros included.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[1.0f64, 2.0, 3.0]);
    /// assert_eq!(x.cumprod(0, false, false)?.to_vec::<f64>()?, vec![1.0, 2.0, 6.0]);
    /// assert_eq!(x.cumprod(0, true, true)?.to_vec::<f64>()?, vec![6.0, 3.0, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn cumprod(&self, axis: isize, exclusive: bool, reverse: bool) -> Result<Tensor> {
        let a = norm_axis("cumprod", axis, self.shape())?;
        if !(self.dtype().is_float() || self.dtype().is_int() || self.dtype().is_complex()) {
            return Err(unsupported("cumprod", self.dtype(), "a numeric dtype"));
        }
        let y = on_device("cumprod", self, a, exclusive, reverse, true)
            .unwrap_or_else(|| cumprod_host(self, a, exclusive, reverse))?;
        let x = self.clone();
        let desc = Scan {
            kind: ScanKind::Prod,
            axis,
            exclusive,
            reverse,
        };
        Ok(bind(desc, &[self], y, move |_| {
            // complex: TensorFlow's g · conj(∂y/∂x), the products of the
            // conjugates
            vjp(move |g, _| {
                let x = if x.dtype().is_complex() { x.conj()? } else { x.clone() };
                Ok(grads![Some(cumprod_vjp(&x, &g[0], a, exclusive, reverse)?)])
            })
        }))
    }
}

/// The gradient of `cumprod(x, a, exclusive, reverse)` for the output
/// gradient `g`, in differentiable ops and without division (see
/// [`Tensor::cumprod`]). For the forward scan, element `j` gets `P_j r_j`
/// with `P` the exclusive cumulative product and `r` the solution of
/// `r_j = b_j + x_{j+1} r_{j+1}` (0 past the end), where `b = g`; an
/// exclusive scan's last element is in no product (gradient 0) and the
/// others get the inclusive scan's gradient of the first `n - 1` elements
/// with `b_j = g_{j+1}` (`r_j = Σ_{k>j} g_k Π_{j<m<k} x_m`), so that no
/// element outside a product multiplies anything (at inf or NaN, 0 · inf
/// would be NaN). The recurrence is solved by doubling: after the step
/// of width `d`, `(c_j, r_j)` hold the composition of the `2d` steps from
/// `j` (coefficient and sum), combined with those from `j + d` as
/// `r_j + c_j r_{j+d}`, `c_j c_{j+d}`. A reverse scan is the forward one
/// of the reversed axis.
fn cumprod_vjp(x: &Tensor, g: &Tensor, a: usize, exclusive: bool, reverse: bool) -> Result<Tensor> {
    let ax = a as isize;
    if reverse {
        let r = cumprod_vjp(&x.reverse(&[ax])?, &g.reverse(&[ax])?, a, exclusive, false)?;
        return r.reverse(&[ax]);
    }
    let n = x.shape()[a];
    if exclusive {
        // the last element is in no product: its gradient is 0, whatever it
        // holds (not 0 · inf); the others follow the inclusive recurrence
        // of the first n - 1 elements with b_j = g_{j+1}
        if n == 0 {
            return Ok(g.clone());
        }
        let last = x.narrow(ax, n - 1, 1)?.try_zeros_like()?;
        if n == 1 {
            return Ok(last);
        }
        let head = cumprod_vjp(&x.narrow(ax, 0, n - 1)?, &g.narrow(ax, 1, n - 1)?, a, false, false)?;
        return Tensor::concat(&[&head, &last], ax);
    }
    // `t` moved one step back along the axis (element j is t_{j+1}), 0 at the end
    let ahead = |t: &Tensor| -> Result<Tensor> {
        let mut pads = vec![(0, 0); t.rank()];
        pads[a] = (0, 1.min(n));
        t.narrow(ax, 1.min(n), n - 1.min(n))?.pad(&pads)
    };
    let mut c = ahead(x)?;
    let mut r = g.clone();
    let mut d = 1;
    while d < n {
        // the first n - d elements combine with those d ahead; the last d
        // keep theirs (no product with padding: inf · 0 would be NaN)
        let m = n - d;
        let (head, ahead_d, tail) = (
            |t: &Tensor| t.narrow(ax, 0, m),
            |t: &Tensor| t.narrow(ax, d, m),
            |t: &Tensor| t.narrow(ax, m, d),
        );
        let r_head = head(&r)?.add(&head(&c)?.mul(&ahead_d(&r)?)?)?;
        let c_head = head(&c)?.mul(&ahead_d(&c)?)?;
        r = Tensor::concat(&[&r_head, &tail(&r)?], ax)?;
        c = Tensor::concat(&[&c_head, &tail(&c)?], ax)?;
        d *= 2;
    }
    x.cumprod(ax, true, false)?.mul(&r)
}
