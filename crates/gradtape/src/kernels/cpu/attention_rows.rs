//! The row passes of the fused attention kernels
//! ([`attention_gemm`](super::attention_gemm)) between their products: the
//! forward pass's softmax of a row of scores (its largest score, the
//! exponentials and their sum) and the backward pass's `P = e^(a·S − lse)`
//! with `dS = P ∘ (dP − D) · scale` made from each vector of `P` as it is
//! made.
//!
//! Written with the generic helpers ([`max_lanes`], [`exp_affine`],
//! [`exp_affine_each`]) these passes took about a third of a causal
//! forward call and a sixth of a backward one (`[32, 128, 128, 64]` on one
//! Zen 4 core): the eight-lane sum went through the stack on every vector
//! (a chain of store-to-load forwards), and the exponentials were made in
//! a block copy and read again. Here, in `f32` on CPUs with AVX-512, each
//! vector of 16 scores is loaded once, exponentiated in registers and
//! stored once, and the sum stays in a register. The values are the
//! generic helpers' bits: each exponential is [`exp_f32`]'s (whose bits
//! `exp_normal` gives in its range: which of the two a block took never
//! changed a value), and the sum adds element `i` to lane `i mod 8` in
//! order and totals the lanes as [`lanes_total`] does. Elsewhere (`f64`,
//! other CPUs) the generic helpers run.
//!
//! A lane whose exponential is 0 (its argument below −103.97: a key that
//! a mask hides, `−inf`) is exponentiated as 0 and then replaced by 0:
//! clamped to −104, as before, its steps made a subnormal product
//! (`2^−150`), and on the Xeon cores (not on the Zen 4) each such vector
//! took a microcode assist of some hundred cycles, the kernels running
//! without flush-to-zero outside their products. With a key padding mask
//! the row passes took twice their time: per call on one Xeon core,
//! `[batch, heads, time, head]` `[16, 4, 64, 32]`, not causal, a fifth of
//! the keys hidden, forward 0.85 → 0.60 ms, backward 1.29 → 1.02 (the same
//! bits; more in `docs/compiler-notes.md`).
//!
//! [`exp_f32`]: super::math::exp_f32
//! [`lanes_total`]: super::math::lanes_total

use super::math::{exp_affine, exp_affine_each, max_lanes};
use crate::tensor::Float;

/// Rows passed through these kernels, counted for the tests: each thread
/// counts its calls of [`row_max`] with the vector kernels in a
/// thread-local cell and adds one here on its first and every 64th after
/// (an increment of one shared counter per row, from every compute thread,
/// bounced its cache line between the cores some 4000 times a call).
static ROWS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    /// This thread's rows since it started (see [`ROWS`]).
    static MINE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts a row taken by the vector kernels (see [`ROWS`]).
#[inline(always)]
fn count_row() {
    let n = MINE.with(|c| {
        let n = c.get();
        c.set(n + 1);
        n
    });
    if n.is_multiple_of(64) {
        ROWS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A count that grows whenever the vector kernels take rows (on a
/// thread's first row and every 64th after; other threads' rows included):
/// a test's check that they run.
///
/// ```
/// use gradtape::__internals::kernels::cpu::attention_rows::vector_rows;
/// let before = vector_rows();
/// assert!(vector_rows() >= before);
/// ```
pub fn vector_rows() -> usize {
    ROWS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether the `f32` vector kernels run here (AVX-512).
#[inline(always)]
fn vector<T: Float>() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        T::DTYPE == crate::DType::F32 && std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The largest element of `x` that is not NaN (`-inf` if none): the
/// element [`max_lanes`] picks.
///
/// ```
/// use gradtape::__internals::kernels::cpu::attention_rows::row_max;
/// assert_eq!(row_max(&[1.0f32, f32::NAN, 3.0, -2.0]), 3.0);
/// ```
#[inline(always)]
pub fn row_max<T: Float>(x: &[T]) -> T {
    #[cfg(target_arch = "x86_64")]
    if vector::<T>() {
        count_row();
        // SAFETY: T is f32 (same layout); the CPU has AVX-512.
        let m = unsafe { f32x16::max(std::slice::from_raw_parts(x.as_ptr().cast::<f32>(), x.len())) };
        return T::from_f64(m as f64);
    }
    max_lanes(x)
}

/// `x[i] = e^(a·x[i] − b)` and their sum: the bits of `math::exp_affine`.
///
/// ```
/// use gradtape::__internals::kernels::cpu::attention_rows::exp_sum;
/// let mut x = [0.0f32, 1.0, f32::NEG_INFINITY];
/// let l = exp_sum(&mut x, 2.0, 2.0);
/// assert_eq!(x[2], 0.0);
/// assert!((l - (1.0 + (-2.0f32).exp())).abs() < 1e-6);
/// ```
#[inline(always)]
pub fn exp_sum<T: Float>(x: &mut [T], a: T, b: T) -> T {
    #[cfg(target_arch = "x86_64")]
    if vector::<T>() {
        // SAFETY: T is f32 (same layout); the CPU has AVX-512.
        let l = unsafe {
            f32x16::exp_sum(
                std::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<f32>(), x.len()),
                a.to_f64() as f32,
                b.to_f64() as f32,
            )
        };
        return T::from_f64(l as f64);
    }
    exp_affine(x, a, b)
}

/// Sets `x` to 0: a few entries (past a causal row's keys, up to where the
/// tiles read, `causal_tiles::read_end`)
/// with one masked vector store per 16 in `f32` on AVX-512, where `fill`
/// is a `memset` call (its start cost more than the stores).
///
/// ```
/// use gradtape::__internals::kernels::cpu::attention_rows::zero;
/// let mut x = [1.0f32; 20];
/// zero(&mut x[3..19]);
/// assert_eq!(x.iter().filter(|&&v| v == 0.0).count(), 16);
/// assert_eq!((x[2], x[19]), (1.0, 1.0));
/// ```
#[inline(always)]
pub fn zero<T: Float>(x: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if x.len() <= 32 && vector::<T>() {
        // SAFETY: T is f32 (same layout); the CPU has AVX-512.
        unsafe { f32x16::zero(std::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<f32>(), x.len())) };
        return;
    }
    super::lockstep::fill(x, T::zero());
}

/// `Σ a[i]·b[i]` over the shorter's length, with
/// `attention::dot`'s bits (element `i` into lane
/// `i mod 8`, each product rounded before it is added, the lanes totalled
/// pairwise): the backward pass's `D = dO·o` per query row. In `f32` on
/// AVX-512 the eight lanes stay in a register, where the generic loop kept
/// them on the stack (a store-to-load chain per eight elements: some 3 %
/// of a causal `[32, 128, 128, 64]` backward call).
///
/// ```
/// use gradtape::__internals::kernels::cpu::attention_rows::dot;
/// let a: Vec<f32> = (0..21).map(|i| i as f32 * 0.5).collect();
/// let b: Vec<f32> = (0..21).map(|i| 1.0 - i as f32 * 0.25).collect();
/// let want: f32 = a.iter().zip(&b).map(|(x, y)| (*x as f64 * *y as f64) as f32).sum();
/// assert!((dot(&a, &b) - want).abs() < 1e-3);
/// ```
#[inline(always)]
pub fn dot<T: Float>(a: &[T], b: &[T]) -> T {
    let n = a.len().min(b.len());
    #[cfg(target_arch = "x86_64")]
    if vector::<T>() {
        // SAFETY: T is f32 (same layout); the CPU has AVX-512; `n`
        // elements of each.
        let x = unsafe { f32x16::dot(a.as_ptr().cast::<f32>(), b.as_ptr().cast::<f32>(), n) };
        return T::from_f64(x as f64);
    }
    super::attention::dot(&a[..n], &b[..n])
}

/// The backward pass's row without dropout: `p[j] = e^(a·s[j] − lse)`
/// into `s`, and `dp[j] = p[j] · (dp[j] − dd) · scale` (the gradient of the
/// scores), over `s.len()` keys: the bits of `math::exp_affine_each` with that
/// pass after each block.
///
/// ```
/// use gradtape::__internals::kernels::cpu::attention_rows::probs_and_ds;
/// let (mut s, mut dp) = ([0.0f32, 1.0], [1.0f32, 3.0]);
/// probs_and_ds(&mut s, &mut dp, 1.0, 1.0, 1.0, 0.5);
/// assert_eq!(s[1], 1.0);
/// assert_eq!(dp, [0.0, 1.0]);
/// ```
#[inline(always)]
pub fn probs_and_ds<T: Float>(s: &mut [T], dp: &mut [T], a: T, lse: T, dd: T, scale: T) {
    let dp = &mut dp[..s.len()];
    #[cfg(target_arch = "x86_64")]
    if vector::<T>() {
        let f = |v: T| v.to_f64() as f32;
        // SAFETY: T is f32 (same layout); the CPU has AVX-512; `dp` is as
        // long as `s`.
        unsafe {
            f32x16::probs_and_ds(
                std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<f32>(), s.len()),
                dp.as_mut_ptr().cast::<f32>(),
                [f(a), f(lse), f(dd), f(scale)],
            )
        };
        return;
    }
    exp_affine_each(s, a, lse, |j0, pc| {
        for (p, y) in super::lockstep::zip(&*pc, &mut dp[j0..]) {
            *y = *p * (*y - dd) * scale;
        }
    });
}

/// The `f32` kernels on AVX-512 vectors of 16.
#[cfg(target_arch = "x86_64")]
mod f32x16 {
    use std::arch::x86_64::*;

    /// The part of `x` from `at` as a vector, lanes past its end `fill`.
    #[inline(always)]
    unsafe fn load(x: *const f32, at: usize, len: usize, fill: f32) -> (__m512, __mmask16) {
        unsafe {
            if at + 16 <= len {
                (_mm512_loadu_ps(x.add(at)), 0xffff)
            } else {
                let k = ((1u32 << (len - at)) - 1) as __mmask16;
                (_mm512_mask_loadu_ps(_mm512_set1_ps(fill), k, x.add(at)), k)
            }
        }
    }

    /// `Σ a[i]·b[i]` over `n` elements in eight lanes (element `i` into
    /// lane `i mod 8`: a lane past the end adds nothing), totalled as
    /// [`total`] does.
    #[target_feature(enable = "avx,avx2")]
    pub(super) unsafe fn dot(a: *const f32, b: *const f32, n: usize) -> f32 {
        unsafe {
            let mut acc = _mm256_setzero_ps();
            let mut at = 0;
            while at + 8 <= n {
                let p = _mm256_mul_ps(_mm256_loadu_ps(a.add(at)), _mm256_loadu_ps(b.add(at)));
                acc = _mm256_add_ps(acc, p);
                at += 8;
            }
            if at < n {
                // (lanes from n - at on: their loads 0, their sums kept)
                let k = _mm256_cmpgt_epi32(
                    _mm256_set1_epi32((n - at) as i32),
                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                );
                let p = _mm256_mul_ps(_mm256_maskload_ps(a.add(at), k), _mm256_maskload_ps(b.add(at), k));
                acc = _mm256_blendv_ps(acc, _mm256_add_ps(acc, p), _mm256_castsi256_ps(k));
            }
            total(acc)
        }
    }

    /// `x` set to 0, 16 lanes a store.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn zero(x: &mut [f32]) {
        unsafe {
            let (p, n) = (x.as_mut_ptr(), x.len());
            let mut at = 0;
            while at < n {
                let k = if at + 16 <= n {
                    0xffff
                } else {
                    ((1u32 << (n - at)) - 1) as __mmask16
                };
                _mm512_mask_storeu_ps(p.add(at), k, _mm512_setzero_ps());
                at += 16;
            }
        }
    }

    /// The largest lane of `x` that is not NaN (`-inf` if none).
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn max(x: &[f32]) -> f32 {
        unsafe {
            let (p, n) = (x.as_ptr(), x.len());
            let mut acc = _mm512_set1_ps(f32::NEG_INFINITY);
            let mut at = 0;
            while at < n {
                let (v, _) = load(p, at, n, f32::NEG_INFINITY);
                // (the second operand where either is NaN: `acc`, never
                // NaN, wins over a NaN lane of `v`)
                acc = _mm512_max_ps(v, acc);
                at += 16;
            }
            _mm512_reduce_max_ps(acc)
        }
    }

    /// `e^x` in each lane, with [`exp_f32`](crate::kernels::cpu::math::exp_f32)'s
    /// bits (its steps, lane by lane).
    #[inline(always)]
    unsafe fn exp(x: __m512) -> __m512 {
        const LOG2E: f32 = std::f32::consts::LOG2_E;
        const LN2_HI: f32 = 0.693_359_4;
        const LN2_LO: f32 = -2.121_944_4e-4;
        const MAGIC: f32 = 12582912.0;
        unsafe {
            let s = _mm512_set1_ps;
            // (NaN lanes: whatever comes of them is replaced at the end)
            let tiny = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, s(-103.972_08));
            // (lanes whose result is 0 work on 0 instead: from -104 the
            // steps below made a subnormal product, 2^-150, which on Intel
            // cores without flush-to-zero takes a microcode assist of some
            // hundred cycles: every hidden key of a padding mask, -inf)
            let xc = _mm512_mask_blend_ps(tiny, _mm512_min_ps(_mm512_max_ps(x, s(-104.0)), s(88.8)), s(0.0));
            let t = _mm512_fmadd_ps(xc, s(LOG2E), s(MAGIC));
            let n = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(MAGIC.to_bits() as i32));
            let nf = _mm512_sub_ps(t, s(MAGIC));
            let r = _mm512_fnmadd_ps(nf, s(LN2_LO), _mm512_fnmadd_ps(nf, s(LN2_HI), xc));
            let mut p = s(1.987_569_1e-4);
            p = _mm512_fmadd_ps(p, r, s(1.398_199_9e-3));
            p = _mm512_fmadd_ps(p, r, s(8.333_452e-3));
            p = _mm512_fmadd_ps(p, r, s(4.166_579_6e-2));
            p = _mm512_fmadd_ps(p, r, s(1.666_666_5e-1));
            p = _mm512_fmadd_ps(p, r, s(0.5));
            let y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), s(1.0));
            // y · 2^n1 · 2^(n − n1), n1 = n >> 1 (subnormal results, n = 128)
            let n1 = _mm512_srai_epi32::<1>(n);
            let pow2 =
                |k: __m512i| _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(k, _mm512_set1_epi32(127))));
            let e = _mm512_mul_ps(_mm512_mul_ps(y, pow2(n1)), pow2(_mm512_sub_epi32(n, n1)));
            let e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, s(88.722_84)), e, s(f32::INFINITY));
            let e = _mm512_mask_blend_ps(tiny, e, s(0.0));
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), e, x)
        }
    }

    /// The eight lanes' total of a sum kept as `sum_lanes` keeps it
    /// (element `i` in lane `i mod 8`), added pairwise as `lanes_total`.
    #[inline(always)]
    unsafe fn total(acc: __m256) -> f32 {
        let mut l = [0.0f32; 8];
        unsafe { _mm256_storeu_ps(l.as_mut_ptr(), acc) };
        ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
    }

    /// Adds a vector of 16 consecutive elements to the eight lanes, the
    /// first eight then the last eight (lanes past the row's end are 0,
    /// which leaves a lane's sum of non-negative terms as it was).
    #[inline(always)]
    unsafe fn add8(acc: __m256, v: __m512) -> __m256 {
        unsafe {
            let lo = _mm512_castps512_ps256(v);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
            _mm256_add_ps(_mm256_add_ps(acc, lo), hi)
        }
    }

    /// `x[i] = e^(a·x[i] − b)` (the product, then the difference, each
    /// rounded) and their sum in `sum_lanes`' lanes and order.
    #[target_feature(enable = "avx512f,avx")]
    pub(super) unsafe fn exp_sum(x: &mut [f32], a: f32, b: f32) -> f32 {
        unsafe {
            let (p, n) = (x.as_mut_ptr(), x.len());
            let (av, bv) = (_mm512_set1_ps(a), _mm512_set1_ps(b));
            let mut acc = _mm256_setzero_ps();
            let mut at = 0;
            while at < n {
                let (v, k) = load(p, at, n, 0.0);
                let e = exp(_mm512_sub_ps(_mm512_mul_ps(av, v), bv));
                let e = _mm512_maskz_mov_ps(k, e);
                _mm512_mask_storeu_ps(p.add(at), k, e);
                acc = add8(acc, e);
                at += 16;
            }
            total(acc)
        }
    }

    /// `x[i] = e^(a·x[i] − lse)`, `dp[i] = x[i] · (dp[i] − dd) · scale`
    /// (`[a, lse, dd, scale]`), for the `x.len()` elements of each.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn probs_and_ds(x: &mut [f32], dp: *mut f32, [a, lse, dd, scale]: [f32; 4]) {
        unsafe {
            let (p, n) = (x.as_mut_ptr(), x.len());
            let s = _mm512_set1_ps;
            let (av, bv, dv, sv) = (s(a), s(lse), s(dd), s(scale));
            let mut at = 0;
            while at < n {
                let (v, k) = load(p, at, n, 0.0);
                let (y, _) = load(dp, at, n, 0.0);
                let e = exp(_mm512_sub_ps(_mm512_mul_ps(av, v), bv));
                let ds = _mm512_mul_ps(_mm512_mul_ps(e, _mm512_sub_ps(y, dv)), sv);
                _mm512_mask_storeu_ps(p.add(at), k, e);
                _mm512_mask_storeu_ps(dp.add(at), k, ds);
                at += 16;
            }
        }
    }
}
