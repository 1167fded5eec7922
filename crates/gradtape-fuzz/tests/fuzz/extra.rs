//! More op families: sorting and searching, segment reductions,
//! decompositions and least squares, FFTs, special functions, the
//! activations of Keras 3 and PyTorch, the fused LSTM step. Each family
//! has raw entries (the case's operands as they are: wrong dtypes, ranks
//! and shapes reach the argument checks) and fitted ones (operands made to
//! agree: sorted segment ids, square or symmetric matrices, complex
//! signals), so that the kernels run too.

use gradtape::{DType, MatrixNorm, Result, Tensor};

use crate::ops::{first, pair_first, same, Env, OpFn};

/// Any operand of more than 2^20 elements (a broadcast view): sorting,
/// decomposing or transforming it is valid and just slow, so the case
/// skips it. (An empty operand with a huge dim, `[2^31, 2, 0]`, is not
/// skipped: these ops must return at once, without walking or allocating
/// for the empty batches; the fuzz found several that did.)
fn big(ts: &[&Tensor]) -> bool {
    ts.iter().any(|t| t.numel() > 1 << 20)
}

/// Skips the call (returns `a`) when an operand is [`big`].
fn small(e: &Env, ts: &[&Tensor], f: impl FnOnce() -> Result<Tensor>) -> Result<Tensor> {
    if big(ts) {
        Ok(e.a.clone())
    } else {
        f()
    }
}

/// Sorted, non-negative segment ids, one per row of `a`: `i * s / n`.
fn sorted_ids(e: &Env) -> Result<Tensor> {
    let n = e.a.shape().first().copied().unwrap_or(0).min(4096);
    let s = e.size(0).clamp(1, 8);
    let ids: Vec<i64> = (0..n).map(|i| (i * s / n.max(1)) as i64).collect();
    let t = Tensor::from_vec(ids, &[n])?;
    if e.flag(1) {
        t.cast(DType::I32)
    } else {
        Ok(t)
    }
}

/// Unsorted ids in `0..m` (m the case's first size, maybe 0), one per row.
fn unsorted_ids(e: &Env, m: usize) -> Result<Tensor> {
    let n = e.a.shape().first().copied().unwrap_or(0).min(4096);
    let ids: Vec<i64> = (0..n)
        .map(|i| ((i as u64).wrapping_mul(0x9E37_79B9) ^ e.k.c.seed) % (m.max(1) as u64))
        .map(|v| v as i64)
        .collect();
    Tensor::from_vec(ids, &[n])
}

/// `a` made square in its last two dims (cropped to the smaller one).
fn square(e: &Env) -> Result<Tensor> {
    let r = e.a.rank();
    if r < 2 {
        return e.a.reshape(&[1, 1]).or_else(|_| Ok(e.a.clone()));
    }
    let n = e.a.shape()[r - 1].min(e.a.shape()[r - 2]);
    e.a.narrow(-1, 0, n)?.narrow(-2, 0, n)
}

/// `a + aᵀ` of the square part: symmetric (Hermitian-ish for complex).
fn symmetric(e: &Env) -> Result<Tensor> {
    let s = square(e)?;
    s.add(&s.transpose()?)
}

/// `a` as a complex signal (`complex(a, b)` cast to `a`'s precision).
fn signal(e: &Env) -> Result<Tensor> {
    if e.a.dtype().is_complex() {
        return Ok(e.a.clone());
    }
    let re = e.a.cast(if e.flag(2) { DType::F64 } else { DType::F32 })?;
    Tensor::complex(&re, &re.mul_scalar(0.5)?.add_scalar(-0.25)?)
}

fn norm_kind(e: &Env) -> MatrixNorm {
    [
        MatrixNorm::Fro,
        MatrixNorm::Nuc,
        MatrixNorm::One,
        MatrixNorm::Inf,
        MatrixNorm::Two,
    ][e.size(1) % 5]
}

pub const EXTRA: &[(&str, OpFn)] = &[
    // sorting and searching
    ("sort", |e| small(e, &[e.a], || same(e.a.sort(e.ax(0), e.flag(0)), e.a))),
    ("argsort", |e| {
        small(e, &[e.a], || same(e.a.argsort(e.ax(0), e.flag(0)), e.a))
    }),
    ("top_k", |e| small(e, &[e.a], || pair_first(e.a.top_k(e.size(0))))),
    ("top_k_indices", |e| small(e, &[e.a], || Ok(e.a.top_k(e.size(0))?.1))),
    ("unique", |e| small(e, &[e.a], || pair_first(e.a.unique()))),
    ("unique_idx", |e| small(e, &[e.a], || Ok(e.a.unique()?.1))),
    ("searchsorted", |e| {
        small(e, &[e.a, e.b], || e.a.searchsorted(e.b, e.flag(0)))
    }),
    ("fit_searchsorted", |e| {
        small(e, &[e.a, e.b], || {
            let s = e.a.sort(-1, false)?;
            s.searchsorted(&e.b.cast(e.a.dtype())?, e.flag(0))
        })
    }),
    ("bincount", |e| {
        small(e, &[e.a, e.b], || e.a.bincount(e.flag(0).then_some(e.b), e.size(0)))
    }),
    ("fit_bincount", |e| {
        small(e, &[e.a], || {
            let ids = e.a.cast(DType::I64)?.abs()?;
            let w = e.flag(0).then_some(e.a);
            ids.bincount(w, e.size(0).min(64))
        })
    }),
    ("argwhere", |e| small(e, &[e.a], || e.a.argwhere())),
    ("boolean_mask", |e| small(e, &[e.a, e.b], || e.a.boolean_mask(e.b))),
    ("fit_boolean_mask", |e| {
        small(e, &[e.a], || {
            e.a.boolean_mask(&e.b.gt_scalar(0.0)?.broadcast_to(e.a.shape())?)
        })
    }),
    ("roll", |e| {
        let shifts: Vec<isize> = e.k.ints.iter().take(2).map(|&v| v as isize).collect();
        let axes: Vec<isize> =
            e.k.ints
                .iter()
                .skip(2)
                .take(shifts.len())
                .map(|&v| v as isize)
                .collect();
        small(e, &[e.a], || same(e.a.roll(&shifts, &axes), e.a))
    }),
    ("take_along_axis", |e| {
        small(e, &[e.a, e.b], || e.a.take_along_axis(e.b, e.ax(0)))
    }),
    ("fit_take_along_axis", |e| {
        small(e, &[e.a], || {
            let i = e.a.argsort(-1, e.flag(0))?;
            same(e.a.take_along_axis(&i, -1), e.a)
        })
    }),
    // segment reductions
    ("segment_sum", |e| small(e, &[e.a, e.b], || e.a.segment_sum(e.b))),
    ("segment_max", |e| small(e, &[e.a, e.b], || e.a.segment_max(e.b))),
    ("unsorted_segment_sum", |e| {
        small(e, &[e.a, e.b], || e.a.unsorted_segment_sum(e.b, e.size(0)))
    }),
    ("fit_segment", |e| {
        small(e, &[e.a], || {
            let ids = sorted_ids(e)?;
            match e.int(0).rem_euclid(5) {
                0 => e.a.segment_sum(&ids),
                1 => e.a.segment_prod(&ids),
                2 => e.a.segment_max(&ids),
                3 => e.a.segment_min(&ids),
                _ => e.a.segment_mean(&ids),
            }
        })
    }),
    ("fit_unsorted_segment", |e| {
        small(e, &[e.a], || {
            let m = e.size(0);
            let ids = unsorted_ids(e, m)?;
            match e.int(0).rem_euclid(5) {
                0 => e.a.unsorted_segment_sum(&ids, m),
                1 => e.a.unsorted_segment_prod(&ids, m),
                2 => e.a.unsorted_segment_max(&ids, m),
                3 => e.a.unsorted_segment_min(&ids, m),
                _ => e.a.unsorted_segment_mean(&ids, m),
            }
        })
    }),
    // decompositions, least squares, norms
    ("eigh", |e| small(e, &[e.a], || pair_first(e.a.eigh()))),
    ("svd", |e| {
        small(e, &[e.a], || first(e.a.svd().map(|(s, u, v)| vec![s, u, v])))
    }),
    ("qr", |e| small(e, &[e.a], || pair_first(e.a.qr()))),
    ("lu", |e| {
        small(e, &[e.a], || first(e.a.lu().map(|(l, u, p)| vec![l, u, p])))
    }),
    ("matrix_exp", |e| small(e, &[e.a], || e.a.matrix_exp())),
    ("lstsq", |e| small(e, &[e.a, e.b], || e.a.lstsq(e.b, e.f(0)))),
    ("pinv", |e| small(e, &[e.a], || e.a.pinv(e.flag(0).then_some(e.f(1))))),
    ("matrix_norm", |e| small(e, &[e.a], || e.a.matrix_norm(norm_kind(e)))),
    ("fit_decomposition", |e| {
        small(e, &[e.a], || match e.int(0).rem_euclid(9) {
            0 => pair_first(symmetric(e)?.eigh()),
            1 => Ok(symmetric(e)?.eigh()?.1),
            2 => first(e.a.svd().map(|(s, u, v)| vec![s, u, v])),
            3 => pair_first(e.a.qr()),
            4 => Ok(e.a.qr()?.1),
            5 => first(square(e)?.lu().map(|(l, u, p)| vec![u, l, p])),
            6 => square(e)?.mul_scalar(0.25)?.matrix_exp(),
            7 => {
                e.a.lstsq(&e.b.cast(e.a.dtype())?.broadcast_to(e.a.shape())?, e.f(0).abs())
            }
            _ => e.a.matrix_norm(norm_kind(e)),
        })
    }),
    // FFTs
    ("fft", |e| small(e, &[e.a], || same(e.a.fft(), e.a))),
    ("ifft", |e| small(e, &[e.a], || same(e.a.ifft(), e.a))),
    ("fft2d", |e| small(e, &[e.a], || e.a.fft2d())),
    ("fft3d", |e| small(e, &[e.a], || e.a.fft3d())),
    ("ifft3d", |e| small(e, &[e.a], || e.a.ifft3d())),
    ("rfft3d", |e| {
        let n = e.flag(0).then_some([e.size(0), e.size(1), e.size(2)]);
        small(e, &[e.a], || e.a.rfft3d(n))
    }),
    ("irfft3d", |e| {
        let n = e.flag(0).then_some([e.size(0), e.size(1), e.size(2)]);
        small(e, &[e.a], || e.a.irfft3d(n))
    }),
    ("fit_fft3d", |e| {
        small(e, &[e.a], || {
            let x = signal(e)?;
            let n = |k: usize| e.size(k).min(8);
            match e.int(0).rem_euclid(3) {
                0 => x.fft3d(),
                1 => x.ifft3d(),
                _ => x.irfft3d(e.flag(0).then_some([n(0), n(1), n(2)])),
            }
        })
    }),
    ("rfft", |e| {
        let n = e.flag(0).then_some(e.size(0));
        small(e, &[e.a], || e.a.rfft(n))
    }),
    ("irfft", |e| {
        let n = e.flag(0).then_some(e.size(0));
        small(e, &[e.a], || e.a.irfft(n))
    }),
    ("rfft2d", |e| {
        let n = e.flag(0).then_some([e.size(0), e.size(1)]);
        small(e, &[e.a], || e.a.rfft2d(n))
    }),
    ("fit_fft", |e| {
        small(e, &[e.a], || {
            let x = signal(e)?;
            match e.int(0).rem_euclid(6) {
                0 => same(x.fft(), &x),
                1 => same(x.ifft(), &x),
                2 => x.fft2d(),
                3 => x.ifft2d(),
                4 => x.irfft(e.flag(0).then_some(e.size(0).min(16))),
                _ => x.irfft2d(e.flag(0).then_some([e.size(0).min(16), e.size(1).min(16)])),
            }
        })
    }),
    ("fit_rfft", |e| {
        small(e, &[e.a], || {
            let x = e.a.cast(if e.flag(2) { DType::F64 } else { DType::F32 })?;
            let n = e.flag(0).then_some(e.size(0).min(16));
            if e.flag(1) {
                x.rfft(n)?.irfft(n)
            } else {
                x.rfft2d(n.map(|n| [n, e.size(1).min(16)]))
            }
        })
    }),
    // special functions
    ("lgamma", |e| same(e.a.lgamma(), e.a)),
    ("digamma", |e| same(e.a.digamma(), e.a)),
    ("polygamma", |e| Tensor::polygamma(e.a, e.b)),
    ("fit_polygamma", |e| {
        let n = e.b.abs()?.floor()?.cast(e.a.dtype())?;
        Tensor::polygamma(&n.clip_by_value(0.0, 3.0)?, e.a)
    }),
    ("igamma", |e| Tensor::igamma(e.a, e.b)),
    ("igammac", |e| Tensor::igammac(e.a, e.b)),
    ("fit_igamma", |e| {
        let x = e.b.cast(e.a.dtype())?.abs()?;
        let a = e.a.abs()?;
        if e.flag(0) {
            Tensor::igamma(&a, &x)
        } else {
            Tensor::igammac(&a, &x)
        }
    }),
    ("betainc", |e| Tensor::betainc(e.a, e.b, e.c)),
    ("fit_betainc", |e| {
        let d = e.a.dtype();
        let (b, c) = (e.b.cast(d)?.abs()?, e.c.cast(d)?.sigmoid()?);
        Tensor::betainc(&e.a.abs()?, &b, &c)
    }),
    ("erfinv", |e| same(e.a.erfinv(), e.a)),
    ("ndtri", |e| same(e.a.ndtri(), e.a)),
    ("fit_erfinv", |e| {
        let x = e.a.tanh()?;
        if e.flag(0) {
            same(x.erfinv(), e.a)
        } else {
            same(x.abs()?.ndtri(), e.a)
        }
    }),
    ("bessel_i0e", |e| same(e.a.bessel_i0e(), e.a)),
    ("bessel_i1e", |e| same(e.a.bessel_i1e(), e.a)),
    ("xlogy", |e| Tensor::xlogy(e.a, e.b)),
    ("xlog1py", |e| Tensor::xlog1py(e.a, e.b)),
    ("divide_no_nan", |e| Tensor::divide_no_nan(e.a, e.b)),
    ("fit_xlogy", |e| {
        let y = e.b.cast(e.a.dtype())?;
        match e.int(0).rem_euclid(3) {
            0 => Tensor::xlogy(e.a, &y),
            1 => Tensor::xlog1py(e.a, &y),
            _ => Tensor::divide_no_nan(e.a, &y),
        }
    }),
    ("log_sigmoid", |e| same(e.a.log_sigmoid(), e.a)),
    ("is_nan", |e| same(e.a.is_nan(), e.a)),
    ("is_finite", |e| same(e.a.is_finite(), e.a)),
    ("is_inf", |e| same(e.a.is_inf(), e.a)),
    // the activations of Keras 3 and PyTorch, with their parameters drawn
    // (NaN, infinite, negative: refused or accepted as documented)
    ("hard_sigmoid", |e| same(e.a.hard_sigmoid(), e.a)),
    ("hard_silu", |e| same(e.a.hard_silu(), e.a)),
    ("mish", |e| same(e.a.mish(), e.a)),
    ("mish_grad", |e| same(e.a.mish_grad(), e.a)),
    ("silu_grad", |e| same(e.a.silu_grad(), e.a)),
    ("tanh_shrink", |e| same(e.a.tanh_shrink(), e.a)),
    ("sparse_plus", |e| same(e.a.sparse_plus(), e.a)),
    ("hard_tanh", |e| same(e.a.hard_tanh_range(e.f(0), e.f(1)), e.a)),
    ("celu", |e| same(e.a.celu(e.f(0)), e.a)),
    ("shrink", |e| match e.flag(0) {
        true => same(e.a.soft_shrink(e.f(0)), e.a),
        false => same(e.a.hard_shrink(e.f(0)), e.a),
    }),
    ("squareplus", |e| same(e.a.squareplus(e.f(0)), e.a)),
    ("relu_with", |e| {
        let max = e.flag(0).then(|| e.f(1));
        same(e.a.relu_with(e.f(0), max, e.f(2)), e.a)
    }),
    ("glu", |e| e.a.glu(e.axes().first().copied().unwrap_or(-1))),
    // the fused LSTM step: raw operands (shapes and dtypes checked), and
    // gates tiled from `a` with `a` as the state (the kernels run)
    ("lstm_cell", |e| Tensor::lstm_cell(e.a, e.b).map(|(h, _)| h)),
    ("fit_lstm_cell", |e| {
        let mut reps = vec![1; e.a.rank()];
        if let Some(last) = reps.last_mut() {
            *last = 4;
        }
        let z = e.a.tile(&reps)?;
        let (h, c) = Tensor::lstm_cell(&z, e.a)?;
        same(h.add(&c), e.a)
    }),
];
