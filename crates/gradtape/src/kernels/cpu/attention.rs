//! Fused scaled dot-product attention on the CPU, forward and backward.
//!
//! Terms: for one batch element (all leading dims flattened into `batch`),
//! queries `q` are `[tq, d]`, keys `k` are `[tk, d]`, values `v` are
//! `[tk, dv]`. The **scores** of query row `i` are
//! `s[i, j] = scale · q[i]·k[j] + mask[i, j]`, over the keys `j` the row
//! may see (with `causal`, `j <= i`, PyTorch's top-left alignment); the
//! **probabilities** `p[i] = softmax(s[i])`, and the output row
//! `o[i] = Σ_j p[i, j] v[j]`. The **log-sum-exp** `lse[i] = ln Σ_j e^s[i, j]`
//! is what the backward pass needs to recompute `p` from the scores.
//!
//! Nothing of size `[tq, tk]` is ever held: the forward pass walks the keys
//! of a row in blocks of [`BLOCK`], keeping FlashAttention's **online
//! softmax** state (the running maximum `m`, the running sum `l` of
//! `e^(s - m)`, the output accumulator scaled to `m`), and rescales the
//! state when a block raises the maximum. The backward pass recomputes each
//! score and its probability `p = e^(s - lse)` from the saved `lse`, and
//! with `D[i] = dO[i]·o[i]`:
//!
//! ```text
//! dv[j] += p[i,j] dO[i]        dp = dO[i]·v[j]        ds = p[i,j] (dp - D[i])
//! dq[i] += scale ds k[j]       dk[j] += scale ds q[i]
//! ```
//!
//! So memory is linear in the sequence lengths, forward and backward.
//!
//! A row whose mask hides every key it could see has no probabilities: its
//! output is 0, as PyTorch's (since 2.5) and Keras's, not the NaN of a
//! softmax over only `-inf`. Its log-sum-exp is stored as `+inf`, which
//! makes each recomputed `p = e^(s - lse)` 0, so its gradients are 0 too
//! (`D[i] = 0`, the output being 0). A row with a NaN score (a NaN in its
//! query, a key or the mask) is NaN, output and log-sum-exp, as the
//! softmax's and PyTorch's: the running maximum passes over NaN, so a NaN
//! met while it is still `-inf` is recorded rather than lost.
//!
//! **Dropout** of the probabilities (rate `r`, training): a probability
//! is kept, and scaled by `1/(1 - r)`, when the counter-based generator's
//! draw for its index `(b·tq + i)·tk + j` is at least `r` ([`Dropout`]);
//! the log-sum-exp is the undropped one. Both passes recompute each
//! decision from its index, so no mask is stored either. With `f` that
//! factor, the output sums `p f v[j]`; the backward pass uses `p f` for
//! `dv` and `dp = f · dO[i]·v[j]`, and `D[i] = dO[i]·o[i]` still holds.
//!
//! Each block's probabilities are exponentiated together
//! (`math::exp_in_place`: `f32` through the vectorised `math::exp_slice`).
//!
//! Both passes accumulate in the element type (`f32` or `f64`; the op
//! layer runs half-precision tensors through `f32`). Work is spread over
//! rows (forward) and over batch elements (backward, whose key gradients
//! sum over a batch element's rows).

use super::lockstep::{chunks, fill, whole, zip, zip3};
use crate::error::Result;
use crate::kernels::cpu::attention_gemm::{GradDest, Rows};
use crate::kernels::cpu::counter::CounterRng;
use crate::kernels::cpu::math::exp_in_place;
use crate::kernels::cpu::scratch;
use crate::kernels::cpu::workers;
use crate::tensor::Float;

/// Keys per block of the online softmax.
pub(crate) const BLOCK: usize = 64;

/// The sizes of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    /// Batch elements (the leading dims, flattened).
    pub batch: usize,
    /// Query rows per batch element.
    pub tq: usize,
    /// Key (and value) rows per batch element.
    pub tk: usize,
    /// Query and key width.
    pub d: usize,
    /// Value width.
    pub dv: usize,
    /// The factor of `q·k`.
    pub scale: f64,
    /// Whether row `i` sees only the keys `j <= i`.
    pub causal: bool,
    /// Dropout of the probabilities, if any.
    pub dropout: Option<Dropout>,
}

/// The generator's stream for attention's dropout.
const DROPOUT_STREAM: u64 = 0xA77E;

/// Dropout of the probabilities: which are kept, from a seed and each
/// probability's flat index `(b·tq + i)·tk + j`.
#[derive(Clone, Copy, Debug)]
pub struct Dropout {
    rng: CounterRng,
    rate: f64,
}

impl Dropout {
    /// Drops with probability `rate` (in `[0, 1)`), decided by `seed`.
    pub fn new(seed: u64, rate: f64) -> Dropout {
        Dropout {
            rng: CounterRng::new(seed, DROPOUT_STREAM),
            rate,
        }
    }

    /// The generator's key, from which a GPU kernel recomputes the same
    /// decisions (`kernels::cuda::attention`).
    pub fn key(&self) -> u64 {
        self.rng.key()
    }

    /// The probability of dropping.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The factor of the probability at flat index `at`: 0 if dropped,
    /// `1 / (1 - rate)` if kept.
    #[inline(always)]
    pub fn factor(&self, at: usize) -> f64 {
        if self.rng.unit(at as u64) >= self.rate {
            1.0 / (1.0 - self.rate)
        } else {
            0.0
        }
    }
}

impl Dims {
    /// How many keys row `i` sees.
    #[inline]
    pub(crate) fn keys(&self, i: usize) -> usize {
        if self.causal {
            (i + 1).min(self.tk)
        } else {
            self.tk
        }
    }
}

/// An additive mask, read in its own (broadcast) shape: the element of
/// batch element `b`, row `i`, key `j` is `data[batch.offset(b) + i·row +
/// j·col]` (the batch's offsets computed, not listed: nothing is allocated
/// per call).
pub struct Mask<'a, T> {
    pub data: &'a [T],
    /// Where each batch element's matrix starts (broadcast dims stride 0).
    pub batch: super::attention_gemm::Batch,
    /// The stride of a query row (0 when broadcast).
    pub row: usize,
    /// The stride of a key (0 when broadcast).
    pub col: usize,
}

impl<T: Float> Mask<'_, T> {
    /// Row `i` of batch element `b`: its key `j` is the returned function's
    /// value at `j`.
    #[inline]
    pub(crate) fn row(&self, b: usize, i: usize) -> impl Fn(usize) -> T + '_ {
        let start = self.batch.offset(b) + i * self.row;
        move |j| self.data[start + j * self.col]
    }
}

/// `a·b` in eight interleaved partial sums (independent lanes, which
/// vectorise; one dependent chain of adds would not), added pairwise.
#[inline(always)]
pub(crate) fn dot<T: Float>(a: &[T], b: &[T]) -> T {
    let mut acc = [T::zero(); 8];
    let n = a.len().min(b.len());
    let ((ac, ar), (bc, br)) = (whole(&a[..n], 8), whole(&b[..n], 8));
    for (x, y) in zip(chunks(ac, 8), chunks(bc, 8)) {
        for l in 0..8 {
            acc[l] = acc[l] + x[l] * y[l];
        }
    }
    for (l, &x, &y) in zip3(0.., ar, br) {
        acc[l] = acc[l] + x * y;
    }
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

/// `y += a x`.
#[inline(always)]
fn axpy<T: Float>(y: &mut [T], a: T, x: &[T]) {
    for (y, &x) in zip(&mut y[..], x) {
        *y = *y + a * x;
    }
}

/// `rows` (`len` rows of `w` starting at row `j0` of `m`) transposed into
/// `out` (`w` rows of `len`): a block of keys or values laid out so that a
/// query's scores against the whole block are a sum of `w` vector updates.
#[inline(always)]
fn transpose_block<T: Float>(m: &[T], j0: usize, len: usize, w: usize, out: &mut [T]) {
    for jj in 0..len {
        let row = &m[(j0 + jj) * w..][..w];
        for (c, &x) in zip(0.., row) {
            out[c * len + jj] = x;
        }
    }
}

/// `s[jj] = Σ_c x[c] · t[c, jj]` for a block transposed by
/// [`transpose_block`] (`s.len()` columns of a block of `len`).
#[inline(always)]
fn block_products<T: Float>(x: &[T], t: &[T], len: usize, s: &mut [T]) {
    fill(s, T::zero());
    let n = s.len();
    for (c, &xc) in zip(0.., x) {
        axpy(s, xc, &t[c * len..][..n]);
    }
}

/// The scores of query row `i` of batch element `b` against keys
/// `j0..j0 + s.len()`, from the key block transposed into `kt`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn block_scores<T: Float>(
    dims: &Dims,
    qi: &[T],
    kt: &[T],
    len: usize,
    mask: Option<&Mask<'_, T>>,
    b: usize,
    i: usize,
    j0: usize,
    s: &mut [T],
) {
    block_products(qi, kt, len, s);
    let scale = T::from_f64(dims.scale);
    match mask {
        Some(m) => {
            let at = m.row(b, i);
            for (jj, x) in zip(0.., &mut s[..]) {
                *x = scale * *x + at(j0 + jj);
            }
        }
        None => {
            for x in s.iter_mut() {
                *x = scale * *x;
            }
        }
    }
}

/// Whether a call runs on the kernels on matrix products
/// ([`attention_gemm`](super::attention_gemm)) rather than the online
/// kernel: keys up to
/// [`GEMM_MAX_KEYS`](super::attention_gemm::GEMM_MAX_KEYS), and heads and
/// key lengths for which the products pay.
/// - `f32` where the CPU has [`sgemm`](super::sgemm): heads and keys from
///   8. Its products beat the online kernel (a matrix-vector product per
///   row) from there on, narrow heads included; below 8 keys the online
///   kernel's rows are too short to lose to it.
/// - Where the CPU takes [`small_gemm`](super::small_gemm)'s products:
///   heads from 8, keys from 64.
/// - Elsewhere (the `gemm` crate's products): heads and keys from 64; on
///   narrower heads the online kernel was the faster.
fn on_products<T: Float>(dims: &Dims) -> bool {
    let wide = |min: usize| dims.d >= min && dims.dv >= min;
    let keys = |min: usize| (min..=super::attention_gemm::GEMM_MAX_KEYS).contains(&dims.tk);
    if T::DTYPE == crate::DType::F32 && sgemm_available() {
        return wide(8) && keys(8);
    }
    keys(64) && (wide(64) || super::small_gemm::suits() && wide(8))
}

/// Whether this CPU runs [`sgemm`](super::sgemm)'s `f32` products.
fn sgemm_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::sgemm::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The forward pass: per query row, the output row followed by its
/// log-sum-exp (`batch · tq` rows of `dv + 1`), on the kernels on matrix
/// products where [`on_products`], else [`forward_online`].
pub(crate) fn forward<T: Float>(
    op: &'static str,
    dims: &Dims,
    q: &Rows<'_, T>,
    k: &Rows<'_, T>,
    v: &Rows<'_, T>,
    mask: Option<&Mask<'_, T>>,
) -> Result<Vec<T>> {
    if dims.dv == 0 {
        // no output columns: nothing depends on the log-sum-exp (the
        // backward pass's gradients are all 0, see `backward`), which is
        // left 0 rather than walking keys that hold nothing
        return super::filled_vec(op, dims.batch.saturating_mul(dims.tq), T::zero());
    }
    if on_products::<T>(dims) {
        return super::attention_gemm::forward_rows(op, dims, q, k, v, mask);
    }
    let Dims { tq, tk, d, dv, .. } = *dims;
    let (q, k, v) = (
        q.packed_values(op, tq, d)?,
        k.packed_values(op, tk, d)?,
        v.packed_values(op, tk, dv)?,
    );
    forward_online(op, dims, &q, &k, &v, mask)
}

/// The backward pass, on the kernel [`forward`] chose: [`backward_online`]
/// or [`attention_gemm::backward`](super::attention_gemm::backward).
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward<T: Float>(
    op: &'static str,
    dims: &Dims,
    q: &Rows<'_, T>,
    k: &Rows<'_, T>,
    v: &Rows<'_, T>,
    mask: Option<&Mask<'_, T>>,
    fwd: &[T],
    dout: &Rows<'_, T>,
) -> Result<Vec<T>> {
    if dims.dv == 0 {
        // an empty output: its cotangent is empty, every gradient 0
        let Dims { batch, tq, tk, d, .. } = *dims;
        let per = tq.saturating_mul(d).saturating_add(tk.saturating_mul(d));
        return super::filled_vec(op, batch.saturating_mul(per), T::zero());
    }
    if on_products::<T>(dims) {
        let dest = GradDest::packed(dims);
        // SAFETY: the packed parts are disjoint.
        return unsafe { super::attention_gemm::backward_rows_into(op, dims, q, k, v, mask, fwd, dout, &dest) };
    }
    let Dims { tq, tk, d, dv, .. } = *dims;
    let (q, k, v, g) = (
        q.packed_values(op, tq, d)?,
        k.packed_values(op, tk, d)?,
        v.packed_values(op, tk, dv)?,
        dout.packed_values(op, tq, dv)?,
    );
    backward_online(op, dims, &q, &k, &v, mask, fwd, &g)
}

/// [`backward`] with `dq`, `dk` and `dv` written where `dest` says (a
/// buffer of `dest.len` elements, 0 outside the parts): by the kernels on
/// matrix products themselves, else copied there from the packed
/// gradients.
///
/// # Safety
///
/// `dest`'s parts are pairwise disjoint (see
/// [`backward_rows_into`](super::attention_gemm::backward_rows_into)).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn backward_into<T: Float>(
    op: &'static str,
    dims: &Dims,
    q: &Rows<'_, T>,
    k: &Rows<'_, T>,
    v: &Rows<'_, T>,
    mask: Option<&Mask<'_, T>>,
    fwd: &[T],
    dout: &Rows<'_, T>,
    dest: &GradDest,
) -> Result<Vec<T>> {
    if dims.dv > 0 && on_products::<T>(dims) {
        // SAFETY: the caller's.
        return unsafe { super::attention_gemm::backward_rows_into(op, dims, q, k, v, mask, fwd, dout, dest) };
    }
    // (checked here: the copies below index within it)
    dest.extents(op, dims)?;
    let packed = backward(op, dims, q, k, v, mask, fwd, dout)?;
    let Dims { tq, tk, d, dv, .. } = *dims;
    let sizes = [(0, tq, d), (tq * d, tk, d), (tq * d + tk * d, tk, dv)];
    let per = tq * d + tk * d + tk * dv;
    let mut out = super::filled_vec(op, dest.len, T::zero())?;
    for b in 0..dims.batch {
        for ((batch, rs), (start, rows, width)) in dest.parts.iter().zip(sizes) {
            let (from, to) = (b * per + start, batch.offset(b));
            for i in 0..rows {
                out[to + i * rs..][..width].copy_from_slice(&packed[from + i * width..][..width]);
            }
        }
    }
    Ok(out)
}

/// The online forward pass: per query row, the output row followed by its
/// log-sum-exp (`batch · tq` rows of `dv + 1`). A row that sees no key has
/// output 0 and log-sum-exp `-inf`; a row whose scores are all `-inf` (a
/// mask that hides every key) has output 0 and log-sum-exp `+inf`, so
/// that the backward pass's `e^(s - lse)` is 0 on it (see the module
/// docs).
///
/// A task takes a run of rows; for each block of keys (transposed once
/// for all its rows) it updates each row's online-softmax state, which
/// lives in the row's output (the accumulator) and two small arrays.
pub fn forward_online<T: Float>(
    op: &'static str,
    dims: &Dims,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Option<&Mask<'_, T>>,
) -> Result<Vec<T>> {
    let (tq, tk, d, dv) = (dims.tq, dims.tk, dims.d, dims.dv);
    let width = dv + 1;
    let mut out = super::filled_vec(op, dims.batch * tq * width, T::zero())?;
    // rows per task: enough work per task to pay for the hand-off and the
    // block transposes, at most ROWS
    const ROWS: usize = 64;
    let per_row = tk.max(1) * (d + dv).max(1);
    let rows = (65536 / per_row).clamp(8, ROWS);
    workers::for_each_chunk_mut(&mut out, rows * width, |c, part| {
        crate::kernels::cpu::math::with_simd(
            #[inline(always)]
            || {
                let mut kt = scratch::take(BLOCK * d, T::zero());
                let mut s = [T::zero(); BLOCK];
                let (mut m, mut l) = ([T::neg_infinity(); ROWS], [T::zero(); ROWS]);
                // a NaN score met while the row's maximum was still -inf
                // (where nothing adds, so it would be lost): the row is NaN
                let mut nan = [false; ROWS];
                let n_rows = part.len() / width;
                let first = c * rows;
                // runs of rows of one batch element
                let mut r0 = 0;
                while r0 < n_rows {
                    let b = (first + r0) / tq;
                    let r1 = n_rows.min(r0 + (tq - (first + r0) % tq));
                    let last_i = (first + r1 - 1) % tq;
                    let n_keys = dims.keys(last_i);
                    let mut j0 = 0;
                    while j0 < n_keys {
                        let len = BLOCK.min(n_keys - j0);
                        transpose_block(&k[b * tk * d..], j0, len, d, &mut kt);
                        for r in r0..r1 {
                            let i = (first + r) % tq;
                            let n = dims.keys(i);
                            if j0 >= n {
                                continue;
                            }
                            let cols = len.min(n - j0);
                            let s = &mut s[..cols];
                            block_scores(dims, &q[(b * tq + i) * d..][..d], &kt, len, mask, b, i, j0, s);
                            let acc = &mut part[r * width..][..dv];
                            let bm = crate::kernels::cpu::math::max_lanes(s);
                            if bm > m[r] {
                                // a larger maximum: the state so far shrinks by e^(m - bm)
                                let shrink = (m[r] - bm).exp();
                                l[r] = l[r] * shrink;
                                for a in acc.iter_mut() {
                                    *a = *a * shrink;
                                }
                                m[r] = bm;
                            }
                            // (while every score so far is -inf, nothing adds: a row
                            // of only -inf ends with l = 0, and output 0 below; a NaN
                            // among them, which the maximum passes over, is kept)
                            // (m is never NaN: only a larger maximum replaces it)
                            if m[r] == T::neg_infinity() {
                                nan[r] |= s.iter().any(|x| x.is_nan());
                            } else {
                                let at = (b * tq + i) * tk + j0;
                                for x in s.iter_mut() {
                                    *x = *x - m[r];
                                }
                                exp_in_place(s);
                                for (jj, &p) in zip(0.., &s[..]) {
                                    l[r] = l[r] + p;
                                    // (the sum is of the undropped probabilities)
                                    let pf = match &dims.dropout {
                                        Some(dr) => p * T::from_f64(dr.factor(at + jj)),
                                        None => p,
                                    };
                                    axpy(acc, pf, &v[(b * tk + j0 + jj) * dv..][..dv]);
                                }
                            }
                        }
                        j0 += len;
                    }
                    for r in r0..r1 {
                        let i = (first + r) % tq;
                        let row = &mut part[r * width..][..width];
                        if dims.keys(i) == 0 {
                            row[dv] = T::neg_infinity();
                        } else if nan[r] {
                            // a NaN score: NaN throughout, as the softmax's
                            fill(row, T::nan());
                        } else if l[r] == T::zero() {
                            // every key hidden: no probability, output 0
                            row[dv] = T::infinity();
                        } else {
                            let inv = T::one() / l[r];
                            for a in row[..dv].iter_mut() {
                                *a = *a * inv;
                            }
                            row[dv] = m[r] + l[r].ln();
                        }
                        (m[r], l[r], nan[r]) = (T::neg_infinity(), T::zero(), false);
                    }
                    r0 = r1;
                }
            },
        )
    });
    Ok(out)
}

/// The online backward pass from the output cotangent `dout` (`[batch, tq, dv]`)
/// and the forward pass's packed rows `fwd` (output and log-sum-exp): per
/// batch element, `dq` (`tq · d`), then `dk` (`tk · d`), then `dv`
/// (`tk · dv`), concatenated. A task takes a batch element (its key
/// gradients sum over its rows); for each block of keys (keys and values
/// transposed once) it walks the rows that see it.
#[allow(clippy::too_many_arguments)]
pub fn backward_online<T: Float>(
    op: &'static str,
    dims: &Dims,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Option<&Mask<'_, T>>,
    fwd: &[T],
    dout: &[T],
) -> Result<Vec<T>> {
    let Dims { tq, tk, d, dv, .. } = *dims;
    let per = tq * d + tk * d + tk * dv;
    let scale = T::from_f64(dims.scale);
    let mut out = super::filled_vec(op, dims.batch * per, T::zero())?;
    workers::for_each_chunk_mut(&mut out, per.max(1), |b, part| {
        crate::kernels::cpu::math::with_simd(
            #[inline(always)]
            || {
                let (dq, rest) = part.split_at_mut(tq * d);
                let (dk, dvv) = rest.split_at_mut(tk * d);
                // D[i] = dO[i]·o[i]
                let mut dd = scratch::take(tq, T::zero());
                for (i, x) in zip(0.., &mut dd[..]) {
                    let row = &fwd[(b * tq + i) * (dv + 1)..][..dv];
                    *x = dot(&dout[(b * tq + i) * dv..][..dv], row);
                }
                let (mut kt, mut vt) = (
                    scratch::take(BLOCK * d, T::zero()),
                    scratch::take(BLOCK * dv, T::zero()),
                );
                let (mut s, mut dp) = ([T::zero(); BLOCK], [T::zero(); BLOCK]);
                let n_keys = (0..tq).map(|i| dims.keys(i)).max().unwrap_or(0);
                let mut j0 = 0;
                while j0 < n_keys {
                    let len = BLOCK.min(n_keys - j0);
                    transpose_block(&k[b * tk * d..], j0, len, d, &mut kt);
                    transpose_block(&v[b * tk * dv..], j0, len, dv, &mut vt);
                    for i in 0..tq {
                        let n = dims.keys(i);
                        if j0 >= n {
                            continue;
                        }
                        let cols = len.min(n - j0);
                        let lse = fwd[(b * tq + i) * (dv + 1) + dv];
                        let g = &dout[(b * tq + i) * dv..][..dv];
                        let qi = &q[(b * tq + i) * d..][..d];
                        let (s, dp) = (&mut s[..cols], &mut dp[..cols]);
                        block_scores(dims, qi, &kt, len, mask, b, i, j0, s);
                        block_products(g, &vt, len, dp);
                        for x in s.iter_mut() {
                            *x = *x - lse;
                        }
                        exp_in_place(s);
                        let dqi = &mut dq[i * d..][..d];
                        let at = (b * tq + i) * tk;
                        for jj in 0..cols {
                            let j = j0 + jj;
                            let p = s[jj];
                            let f = match &dims.dropout {
                                Some(dr) => T::from_f64(dr.factor(at + j)),
                                None => T::one(),
                            };
                            axpy(&mut dvv[j * dv..][..dv], p * f, g);
                            let ds = p * (dp[jj] * f - dd[i]) * scale;
                            axpy(dqi, ds, &k[(b * tk + j) * d..][..d]);
                            axpy(&mut dk[j * d..][..d], ds, qi);
                        }
                    }
                    j0 += len;
                }
            },
        )
    });
    Ok(out)
}
