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
//! Both passes accumulate in the element type (`f32` or `f64`; the op
//! layer runs half-precision tensors through `f32`). Work is spread over
//! rows (forward) and over batch elements (backward, whose key gradients
//! sum over a batch element's rows).

use crate::error::Result;
use crate::kernels::cpu::workers;
use crate::tensor::{alloc, Float};

/// Keys per block of the online softmax.
pub(crate) const BLOCK: usize = 64;

/// The sizes of one attention call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dims {
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
}

impl Dims {
    /// How many keys row `i` sees.
    fn keys(&self, i: usize) -> usize {
        if self.causal {
            (i + 1).min(self.tk)
        } else {
            self.tk
        }
    }
}

/// An additive mask, read in its own (broadcast) shape: the element of
/// batch element `b`, row `i`, key `j` is `data[base[b] + i·row + j·col]`.
pub(crate) struct Mask<'a, T> {
    pub data: &'a [T],
    /// The offset of each batch element (`batch` entries).
    pub base: Vec<usize>,
    /// The stride of a query row (0 when broadcast).
    pub row: usize,
    /// The stride of a key (0 when broadcast).
    pub col: usize,
}

impl<T: Float> Mask<'_, T> {
    #[inline]
    fn at(&self, b: usize, i: usize, j: usize) -> T {
        self.data[self.base[b] + i * self.row + j * self.col]
    }
}

/// `a·b` in eight interleaved partial sums (independent lanes, which
/// vectorise; one dependent chain of adds would not), added pairwise.
#[inline]
fn dot<T: Float>(a: &[T], b: &[T]) -> T {
    let mut acc = [T::zero(); 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] = acc[l] + x[l] * y[l];
        }
    }
    for (l, (&x, &y)) in ar.iter().zip(br).enumerate() {
        acc[l] = acc[l] + x * y;
    }
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

#[inline]
fn axpy<T: Float>(y: &mut [T], a: T, x: &[T]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = *y + a * x;
    }
}

/// The score `s[i, j]` of batch element `b`.
#[inline]
#[allow(clippy::too_many_arguments)]
fn score<T: Float>(dims: &Dims, q: &[T], k: &[T], mask: Option<&Mask<'_, T>>, b: usize, i: usize, j: usize) -> T {
    let (d, scale) = (dims.d, T::from_f64(dims.scale));
    let qi = &q[(b * dims.tq + i) * d..][..d];
    let kj = &k[(b * dims.tk + j) * d..][..d];
    let s = scale * dot(qi, kj);
    match mask {
        Some(m) => s + m.at(b, i, j),
        None => s,
    }
}

/// The forward pass: per query row, the output row followed by its
/// log-sum-exp (`batch · tq` rows of `dv + 1`). A row that sees no key has
/// output 0 and log-sum-exp `-inf`; a row whose scores are all `-inf` has
/// a NaN output (as the softmax of such a row).
pub(crate) fn forward<T: Float>(
    op: &'static str,
    dims: &Dims,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Option<&Mask<'_, T>>,
) -> Result<Vec<T>> {
    let (tq, dv) = (dims.tq, dims.dv);
    let width = dv + 1;
    let mut out = alloc::try_filled(op, dims.batch * tq * width, T::zero())?;
    // rows per task: enough work per task to pay for the hand-off
    let per_row = dims.tk.max(1) * (dims.d + dv).max(1);
    let rows = (16384 / per_row).clamp(1, 64);
    workers::for_each_chunk_mut(&mut out, rows * width, |c, part| {
        let mut s = [T::zero(); BLOCK];
        for (r, row) in part.chunks_mut(width).enumerate() {
            let flat = c * rows + r;
            let (b, i) = (flat / tq, flat % tq);
            let (acc, lse) = row.split_at_mut(dv);
            let mut m = T::neg_infinity();
            let mut l = T::zero();
            let n = dims.keys(i);
            let mut j0 = 0;
            while j0 < n {
                let len = BLOCK.min(n - j0);
                let mut bm = T::neg_infinity();
                for (jj, sj) in s[..len].iter_mut().enumerate() {
                    *sj = score(dims, q, k, mask, b, i, j0 + jj);
                    if *sj > bm {
                        bm = *sj;
                    }
                }
                if bm > m {
                    // a larger maximum: the state so far shrinks by e^(m - bm)
                    let shrink = (m - bm).exp();
                    l = l * shrink;
                    for a in acc.iter_mut() {
                        *a = *a * shrink;
                    }
                    m = bm;
                }
                // (while every score so far is -inf, nothing adds: a row
                // of only -inf ends with l = 0 and a NaN output, 0/0)
                if m > T::neg_infinity() {
                    for (jj, &sj) in s[..len].iter().enumerate() {
                        let p = (sj - m).exp();
                        l = l + p;
                        axpy(acc, p, &v[(b * dims.tk + j0 + jj) * dv..][..dv]);
                    }
                }
                j0 += len;
            }
            if n == 0 {
                lse[0] = T::neg_infinity();
                continue;
            }
            let inv = T::one() / l;
            for a in acc.iter_mut() {
                *a = *a * inv;
            }
            lse[0] = m + l.ln();
        }
    });
    Ok(out)
}

/// The backward pass from the output cotangent `dout` (`[batch, tq, dv]`)
/// and the forward pass's packed rows `fwd` (output and log-sum-exp): per
/// batch element, `dq` (`tq · d`), then `dk` (`tk · d`), then `dv`
/// (`tk · dv`), concatenated.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward<T: Float>(
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
    let mut out = alloc::try_filled(op, dims.batch * per, T::zero())?;
    workers::for_each_chunk_mut(&mut out, per.max(1), |b, part| {
        let (dq, rest) = part.split_at_mut(tq * d);
        let (dk, dvv) = rest.split_at_mut(tk * d);
        for i in 0..tq {
            let row = &fwd[(b * tq + i) * (dv + 1)..][..dv + 1];
            let (o, lse) = (&row[..dv], row[dv]);
            let g = &dout[(b * tq + i) * dv..][..dv];
            let di = dot(g, o);
            let qi = &q[(b * tq + i) * d..][..d];
            let dqi = &mut dq[i * d..][..d];
            for j in 0..dims.keys(i) {
                let p = (score(dims, q, k, mask, b, i, j) - lse).exp();
                let vj = &v[(b * tk + j) * dv..][..dv];
                axpy(&mut dvv[j * dv..][..dv], p, g);
                let ds = p * (dot(g, vj) - di) * scale;
                axpy(dqi, ds, &k[(b * tk + j) * d..][..d]);
                axpy(&mut dk[j * d..][..d], ds, qi);
            }
        }
    });
    Ok(out)
}
