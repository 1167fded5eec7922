//! Fused attention on matrix products: the kernels of
//! [`attention`](super::attention) for key lengths up to
//! [`GEMM_MAX_KEYS`] and heads wide enough for the products to pay (which
//! depends on the CPU's product kernels; see `attention::on_products`).
//!
//! The online kernel walks scores one query row at a time (a
//! matrix-vector product per row and block): a few GFLOP/s. Here a block
//! of up to [`ROWS`] query rows of one batch element takes its scores
//! against all the keys it sees as one product into a scratch block
//! (`ROWS × tk`, per task, reused: memory stays linear in the sequence
//! lengths, and nothing of size `[tq, tk]` outlives the block), then the
//! softmax row by row, then the output as a second product. The backward
//! pass, per batch element, recomputes each block's probabilities from the
//! saved log-sum-exp (one product) and makes its four gradient products:
//!
//! ```text
//! S = scale·Q_b Kᵀ + mask        P = e^(S − lse)           (hidden keys: P = 0)
//! dP = (dO_b Vᵀ) ∘ F             dS = scale·P ∘ (dP − D)   D[i] = dO[i]·o[i]
//! dV += (P∘F)ᵀ dO_b   dQ_b = dS K   dK += dSᵀ Q_b
//! ```
//!
//! (`F` the dropout factors, 1 without dropout.) The products are those of
//! [`sgemm`](super::sgemm) for `f32` where the CPU has it (narrow ones
//! too), else of [`matmul::gemm_raw`](super::matmul::gemm_raw), each
//! single-threaded: the tasks (blocks of rows forward, batch elements
//! backward) are spread over the compute threads. Values agree with the online kernel to rounding.
//!
//! A causal block's rows see different numbers of keys. In `f32` with
//! AVX-512 its products run on [`causal_tiles`](super::causal_tiles),
//! register tiles cut along the diagonal that multiply only what their rows
//! see (the whole block up to
//! [`TILES_WHOLE`](super::attention_split::TILES_WHOLE) keys; past that the keys
//! before the block's first row go to the blocked kernel, and only the
//! diagonal to the tiles); otherwise the block is cut into sub-blocks
//! ([`split`](super::attention_split::split)). A block whose rows all see
//! the same keys runs there too, up to the same length, as a flat
//! staircase. The scratch blocks are not cleared between tasks: every
//! entry a product or the softmax reads was written first (on the tiles, a
//! causal row's entries past its keys are set to 0 only as far as the
//! tiles read them: [`hide`]). Gradients whose rows lie apart (a QKV
//! product's heads) are made in a task's scratch and copied out
//! ([`Staged`]).

use super::attention::{Dims, Mask};
use super::attention_rows::{exp_sum, probs_and_ds, row_max};
use super::attention_split::{split, Piece, Split};
use super::causal_tiles::KeyPanels;
use super::lockstep::{fill, zip, zip3};
use super::math::exp_affine_each;
use super::matmul::gemm_raw;
use super::scratch;
use super::small_gemm;
use super::workers;
use crate::error::Result;
use crate::tensor::Float;

use super::attention_layout::Staged;
pub use super::attention_layout::{Batch, GradDest, Rows};

/// Query rows per block.
pub(crate) const ROWS: usize = 64;

/// The longest key length these kernels take (a task's scratch holds
/// `ROWS · tk` scores); longer ones go to the online kernel.
pub(crate) const GEMM_MAX_KEYS: usize = 4096;

/// `dst (m×n) = [dst +] a (m×k) · b (k×n)`, strided, on this thread:
/// [`small_gemm::product`] with a `pack` (its scratch; see [`packs`]),
/// else `f32` on [`sgemm`](super::sgemm) where the CPU has it (narrow
/// products too), else [`gemm_raw`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn product<T: Float>(
    mnk: (usize, usize, usize),
    dst: &mut [T],
    d_rs: usize,
    acc: bool,
    a: &[T],
    a_strides: (usize, usize),
    b: &[T],
    b_strides: (usize, usize),
    pack: Option<&mut Vec<T>>,
) {
    // SAFETY: `dst` is a distinct mutable slice of `dst.len()` elements.
    unsafe {
        product_at(
            mnk,
            (dst.as_mut_ptr(), dst.len()),
            d_rs,
            acc,
            a,
            a_strides,
            b,
            b_strides,
            pack,
        )
    }
}

/// [`product`] into `dst.0`, of which `dst.1` elements may be written:
/// the rows of a gradient laid out anywhere in the output ([`GradDest`]).
/// Writes only the `m×n` elements of the product.
///
/// # Safety
///
/// `dst.0` addresses `dst.1` writable elements that overlap neither
/// operand, and no other thread reads or writes the product's `m×n`
/// elements meanwhile.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn product_at<T: Float>(
    (m, n, k): (usize, usize, usize),
    (dst, dst_len): (*mut T, usize),
    d_rs: usize,
    acc: bool,
    a: &[T],
    a_strides: (usize, usize),
    b: &[T],
    b_strides: (usize, usize),
    pack: Option<&mut Vec<T>>,
) {
    if m == 0 || n == 0 {
        return;
    }
    let last = |rs: usize, cs: usize, rows: usize, cols: usize| (rows - 1) * rs + (cols - 1) * cs;
    assert!(
        dst_len > last(d_rs, 1, m, n)
            && (k == 0
                || a.len() > last(a_strides.0, a_strides.1, m, k) && b.len() > last(b_strides.0, b_strides.1, k, n)),
        "attention product out of bounds"
    );
    if let Some(pack) = pack {
        // SAFETY: as below; `suits` holds (`packs`).
        unsafe {
            small_gemm::product(
                (m, n, k),
                dst,
                d_rs,
                acc,
                a.as_ptr(),
                a_strides,
                b.as_ptr(),
                b_strides,
                pack,
            )
        };
        return;
    }
    let s = |(r, c): (usize, usize)| (r as isize, c as isize);
    #[cfg(target_arch = "x86_64")]
    if T::DTYPE == crate::DType::F32 && super::sgemm::suits(m, n, k) && d_rs >= n {
        // every f32 product of a block on the blocked kernel, the narrow
        // ones (heads or key pieces of 8 to 32) included: `gemm_raw` gives
        // those to `narrow_matmul`, which spares a large row-major `A` its
        // packing, but a block's row-major `A` has at most `ROWS` rows,
        // which the blocked kernel reads in place, and `narrow_matmul`
        // multiplies and adds separately (heads of 32, causal, `[64, 64,
        // 32]`: the forward pass from 0.98 to 0.74 ms on one Zen 4 core,
        // the backward from 1.50 to 1.27)
        use super::sgemm::View;
        let v = |p: &[T], st: (usize, usize)| View {
            ptr: p.as_ptr() as *const f32,
            rs: st.0 as isize,
            cs: st.1 as isize,
        };
        let _flush = super::denormal::flush_guard();
        // SAFETY: T is f32; the bounds are checked above, and the caller
        // keeps `dst` apart from the operands and from other threads.
        unsafe {
            super::sgemm::sgemm(
                m,
                n,
                k,
                v(a, a_strides),
                v(b, b_strides),
                dst as *mut f32,
                d_rs,
                acc,
                false,
            )
        };
        return;
    }
    // SAFETY: the bounds are checked above; the caller keeps `dst` apart
    // from the operands and from other threads.
    unsafe {
        gemm_raw(
            (m, n, k),
            dst,
            (d_rs as isize, 1),
            acc,
            a.as_ptr(),
            s(a_strides),
            b.as_ptr(),
            s(b_strides),
            false,
        )
    }
}

/// The scratch of the products of a call with these dimensions: one for
/// [`small_gemm`] where the CPU [`suits`](small_gemm::suits) it and the
/// heads are narrower than 64 (at 8 to 32 its products made the forward
/// and backward passes faster than the online kernel, where the `gemm`
/// crate's were slower than it; at 64 and above, the `gemm` crate's were
/// some 5 % faster than its), else none (the `gemm` crate).
fn packs<T: Float>(dims: &Dims) -> Option<scratch::Kept<T>> {
    (small_gemm::suits() && dims.d < 64 && dims.dv < 64).then(|| scratch::take(0, T::zero()))
}

/// The scores of rows `i0..i0 + n` of batch element `b` against keys
/// `0..nk` into `s` (`n × nk`): `scale · q kᵀ + mask`, and 0 (the
/// probability) where a causal row may not look, as far as the products
/// read ([`hide`]; the rest of the row is left as it was): the callers
/// exponentiate only the keys a row sees. Returns the factor `a` still to be applied.
/// Without a mask and with a positive scale the product is left unscaled
/// (`a = scale`, taken by the exponential's argument, [`exp_affine`]:
/// the same bits as scaling first, one pass over the scores fewer); else
/// the scores are whole (`a = 1`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn scores<T: Float>(
    dims: &Dims,
    q: &Rows<'_, T>,
    k: &Rows<'_, T>,
    mask: Option<&Mask<'_, T>>,
    b: usize,
    i0: usize,
    n: usize,
    nk: usize,
    s: &mut [T],
    cut: &Split,
    mut pack: Option<&mut Vec<T>>,
    panels: &mut KeyPanels,
) -> T {
    if let Some(t) = &cut.tiles {
        super::causal_tiles::cols(
            &t.seen[..n],
            dims.d,
            (q.at(b, i0), q.rs),
            (k.at(b, 0), k.rs, t.lo),
            (&mut s[t.lo..], nk),
            panels,
        );
    }
    for &Piece { r0, r1, lo, hi } in &cut.prods {
        product(
            (r1 - r0, hi - lo, dims.d),
            &mut s[r0 * nk + lo..],
            nk,
            false,
            q.at(b, i0 + r0),
            (q.rs, 1),
            k.at(b, lo),
            (1, k.rs),
            pack.as_deref_mut(),
        );
    }
    let scale = T::from_f64(dims.scale);
    let deferred = mask.is_none() && scale > T::zero() && scale.is_finite();
    for r in 0..n {
        let i = i0 + r;
        let row = &mut s[r * nk..][..nk];
        let seen = dims.keys(i).min(nk);
        match mask {
            Some(m) => {
                // (a key mask's or a full mask's row is one slice: added
                // in vectors, where a read per key through `Mask::row`
                // stays scalar)
                let start = m.batch.offset(b) + i * m.row;
                match m.col {
                    1 => {
                        for (x, &y) in zip(&mut row[..seen], &m.data[start..][..seen]) {
                            *x = scale * *x + y;
                        }
                    }
                    0 => {
                        let y = m.data[start];
                        for x in row[..seen].iter_mut() {
                            *x = scale * *x + y;
                        }
                    }
                    _ => {
                        let at = m.row(b, i);
                        for (j, x) in zip(0.., &mut row[..seen][..]) {
                            *x = scale * *x + at(j);
                        }
                    }
                }
            }
            None if !deferred => {
                for x in row[..seen].iter_mut() {
                    *x = scale * *x;
                }
            }
            None => {}
        }
        hide(row, seen, (r, n), cut);
    }
    if deferred {
        scale
    } else {
        T::one()
    }
}

/// Sets the entries of row `r` of a block of `n` rows past the `seen` keys it sees
/// to 0 (the probabilities of hidden keys), as far as the block's
/// products read them: where the tiles take the block, up to
/// [`read_end`](super::causal_tiles::read_end) (a causal row's next few
/// keys); else to the row's end (`row`: the block's `nk` keys).
#[inline(always)]
fn hide<T: Float>(row: &mut [T], seen: usize, (r, n): (usize, usize), cut: &Split) {
    let end = match &cut.tiles {
        Some(t) => (t.lo + super::causal_tiles::read_end(&t.seen[..n], r)).clamp(seen, row.len()),
        None => row.len(),
    };
    super::attention_rows::zero(&mut row[seen..end]);
}

/// The forward pass, as `attention::forward`:
/// per query row, the output row and its log-sum-exp.
pub fn forward<T: Float>(
    op: &'static str,
    dims: &Dims,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Option<&Mask<'_, T>>,
) -> Result<Vec<T>> {
    let Dims {
        batch, tq, tk, d, dv, ..
    } = *dims;
    let (q, k, v) = (
        Rows::packed(q, batch, tq, d),
        Rows::packed(k, batch, tk, d),
        Rows::packed(v, batch, tk, dv),
    );
    forward_rows(op, dims, &q, &k, &v, mask)
}

/// [`forward`] on operands that lie anywhere ([`Rows`]).
pub(crate) fn forward_rows<T: Float>(
    op: &'static str,
    dims: &Dims,
    q: &Rows<'_, T>,
    k: &Rows<'_, T>,
    v: &Rows<'_, T>,
    mask: Option<&Mask<'_, T>>,
) -> Result<Vec<T>> {
    let (tq, tk, dv) = (dims.tq, dims.tk, dims.dv);
    let width = dv + 1;
    let total = dims.batch * tq * width;
    // (not cleared first: every row is written below, by the products and
    // the log-sum-exp; clearing was a pass of its own over the output, 1 MB
    // at a transformer step's `[8, 4, 128, 64]`, whose buffer inside a
    // step is usually cold)
    let mut out = super::uninit_buf::<T>(op, total)?;
    let base = workers::SendPtr(out.as_mut_ptr());
    // a task: a block of rows, or, with batch elements enough to share
    // among the threads, a whole batch element (its blocks share the
    // packing of its keys: `KeyPanels`)
    let task = match dims.batch >= 8 * workers::threads() {
        true => tq.max(1),
        false => ROWS,
    };
    let chunk = task * width;
    let part = |c: usize| {
        let start = c * chunk;
        // SAFETY: within the buffer's room (`total` elements).
        (unsafe { base.get().add(start) }, chunk.min(total - start))
    };
    workers::parallel_for(total.div_ceil(chunk.max(1)), |c| {
        let (part, part_len) = part(c);
        super::math::with_simd(
            #[inline(always)]
            || {
                let mut s = scratch::take_stale(ROWS * tk, T::zero());
                let mut pack = packs::<T>(dims);
                let mut panels = KeyPanels::new();
                let n_rows = part_len / width;
                let first = c * task;
                // runs of up to ROWS rows of one batch element
                let mut r0 = 0;
                while r0 < n_rows {
                    let b = (first + r0) / tq;
                    let i0 = (first + r0) % tq;
                    let n = (n_rows - r0).min(tq - i0).min(ROWS);
                    // this block's output rows (this task's own)
                    // SAFETY: rows r0.. of the part, inside the buffer.
                    let (rows, rows_len) = (unsafe { part.add(r0 * width) }, part_len - r0 * width);
                    let nk = dims.keys(i0 + n - 1);
                    if nk == 0 {
                        // no keys (tk = 0): output 0, log-sum-exp -inf
                        for r in 0..n {
                            for j in 0..width {
                                let x = if j == dv { T::neg_infinity() } else { T::zero() };
                                // SAFETY: row r of this block.
                                unsafe { rows.add(r * width + j).write(x) };
                            }
                        }
                        r0 += n;
                        continue;
                    }
                    let s = &mut s[..n * nk];
                    let cut = split::<T>(dims, i0, n, nk, pack.is_some());
                    let a = scores(
                        dims,
                        q,
                        k,
                        mask,
                        b,
                        i0,
                        n,
                        nk,
                        s,
                        &cut,
                        pack.as_deref_mut(),
                        &mut panels,
                    );
                    // per row: the log-sum-exp, and the factor of the output
                    // row (1 / Σ e^(s − m) where the probabilities are left
                    // unnormalised: the output's dv values scaled instead of
                    // the row's nk probabilities)
                    let (mut lse, mut post) = ([T::zero(); ROWS], [T::one(); ROWS]);
                    for r in 0..n {
                        let i = i0 + r;
                        let row = &mut s[r * nk..][..nk];
                        let seen = dims.keys(i).min(nk);
                        // (a > 0: the largest raw score gives the largest score)
                        let m = a * row_max(&row[..seen]);
                        // (a maximum of -inf over a NaN score, which max_lanes
                        // passes over, goes on: the exponentials make the row NaN,
                        // as the softmax's)
                        let hidden = m == T::neg_infinity() && !row[..seen].iter().any(|x| x.is_nan());
                        if dims.keys(i) == 0 || hidden {
                            // no key, or every key hidden: no probability,
                            // output 0; the log-sum-exp of a hidden row is
                            // +inf, so that the backward pass's P is 0 there
                            fill(row, T::zero());
                            lse[r] = if dims.keys(i) == 0 {
                                T::neg_infinity()
                            } else {
                                T::infinity()
                            };
                            continue;
                        }
                        let l = exp_sum(&mut row[..seen], a, m);
                        // (the C library's `logf`, 4-6 % of a causal call at
                        // 32 to 64 keys; `log::log_f32` inline made the
                        // forward pass 3-10 % slower on one Xeon core)
                        lse[r] = m + l.ln();
                        let inv = T::one() / l;
                        match &dims.dropout {
                            Some(dr) => {
                                let at = (b * tq + i) * tk;
                                for (j, x) in zip(0.., &mut row[..seen][..]) {
                                    *x = *x * inv * T::from_f64(dr.factor(at + j));
                                }
                            }
                            None => post[r] = inv,
                        }
                    }
                    for &Piece { r0, r1, lo, hi } in &cut.prods {
                        // (the piece with lo = 0 writes its rows first; each
                        // row of the block lies in one)
                        // SAFETY: this task's own rows, inside the buffer.
                        unsafe {
                            product_at(
                                (r1 - r0, dv, hi - lo),
                                (rows.add(r0 * width), rows_len - r0 * width),
                                width,
                                lo > 0,
                                &s[r0 * nk + lo..],
                                (nk, 1),
                                v.at(b, lo),
                                (v.rs, 1),
                                pack.as_deref_mut(),
                            )
                        };
                    }
                    if let Some(t) = &cut.tiles {
                        // (written where no piece came first: t.lo = 0)
                        // SAFETY: this task's own rows.
                        unsafe {
                            super::causal_tiles::rows_k(
                                &t.seen[..n],
                                (&s[t.lo..], nk),
                                (v.at(b, t.lo), v.rs),
                                dv,
                                (rows, rows_len, width),
                                t.lo > 0,
                            )
                        };
                    }
                    for r in 0..n {
                        // SAFETY: row r of this block, its dv outputs
                        // written by the products above.
                        let row = unsafe { std::slice::from_raw_parts_mut(rows.add(r * width), dv) };
                        if post[r] != T::one() {
                            for o in row.iter_mut() {
                                *o = *o * post[r];
                            }
                        }
                        // SAFETY: the row's last element.
                        unsafe { rows.add(r * width + dv).write(lse[r]) };
                    }
                    r0 += n;
                }
            },
        )
    });
    // SAFETY: the tasks wrote every row of every chunk, which together are
    // the whole buffer; `T` is a plain number.
    unsafe { out.set_len(total) };
    Ok(out.into_vec())
}

/// The backward pass, as `attention::backward`:
/// per batch element, `dq`, `dk`, `dv` concatenated.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Float>(
    op: &'static str,
    dims: &Dims,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Option<&Mask<'_, T>>,
    fwd: &[T],
    dout: &[T],
) -> Result<Vec<T>> {
    let Dims {
        batch, tq, tk, d, dv, ..
    } = *dims;
    let (q, k, v, g) = (
        Rows::packed(q, batch, tq, d),
        Rows::packed(k, batch, tk, d),
        Rows::packed(v, batch, tk, dv),
        Rows::packed(dout, batch, tq, dv),
    );
    let dest = GradDest::packed(dims);
    // SAFETY: the packed parts are disjoint.
    unsafe { backward_rows_into(op, dims, &q, &k, &v, mask, fwd, &g, &dest) }
}

/// [`backward`] on operands that lie anywhere ([`Rows`]; the forward
/// pass's packed rows `fwd` are the kernel's own), its gradients written
/// where `dest` says, in a buffer of `dest.len` elements (0 elsewhere).
///
/// # Safety
///
/// `dest`'s parts are pairwise disjoint: no element of the buffer belongs
/// to two rows of one part or of two parts (tasks on different batch
/// elements write at the same time). Their bounds are checked here.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn backward_rows_into<T: Float>(
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
    let Dims { tq, tk, d, dv, .. } = *dims;
    let scale = T::from_f64(dims.scale);
    let ext = dest.extents(op, dims)?;
    // where the parts fill the buffer (disjoint, as the caller promises,
    // and as many elements as it holds), it starts uninitialised: each task
    // writes its rows of dq and zeroes its rows of dk and dv just before it
    // adds to them, while they are in its caches (a separate pass zeroing
    // the whole buffer first cost some 5 % of a traced transformer step's
    // backward call, `[8, 128, 3·256]`)
    let covered = dims.batch * (tq * d + tk * d + tk * dv) == dest.len;
    let mut out = match covered {
        true => super::uninit_buf(op, dest.len)?,
        false => super::filled_buf(op, dest.len, T::zero())?,
    };
    let base = workers::SendPtr(out.as_mut_ptr());
    workers::parallel_for(dims.batch, |b| {
        super::math::with_simd(
            #[inline(always)]
            || {
                // each part's first row for this batch element, and how
                // many elements from there its rows may reach
                let at = |p: usize| {
                    let off = dest.parts[p].0.offset(b);
                    // SAFETY: `extents` checked off + ext[p] <= len.
                    (unsafe { base.get().add(off) }, ext[p], dest.parts[p].1)
                };
                let real = [at(0), at(1), at(2)];
                // a part whose rows are not adjacent (the heads of a QKV
                // gradient, rows `3 · heads · d` apart) is made in this
                // task's scratch, rows adjacent, and copied out at the end
                // (see `Staged`)
                let staged = Staged::new(dims, &real);
                let mut local = scratch::take_stale(staged.len, T::zero());
                let parts = staged.parts(&real, local.as_mut_ptr());
                let ((dq, nq, qrs), (dk, nk_, krs), (dvv, nv, vrs)) = (parts[0], parts[1], parts[2]);
                // rows of a part of this batch element set to 0 (where the
                // buffer starts uninitialised, and in the scratch)
                let zero = |p: *mut T, rs: usize, rows: std::ops::Range<usize>, width: usize| {
                    if (covered || staged.len > 0) && rs == width {
                        // (rows side by side: one call, not one a row)
                        // SAFETY: as below, the rows' span.
                        unsafe { std::ptr::write_bytes(p.add(rows.start * rs), 0, rows.len() * width) };
                    } else if covered {
                        for i in rows {
                            // SAFETY: this batch element's rows of a part
                            // (`extents` checked their reach).
                            unsafe { std::ptr::write_bytes(p.add(i * rs), 0, width) };
                        }
                    }
                };
                zero(dk, krs, 0..tk, d);
                zero(dvv, vrs, 0..tk, dv);
                let mut s = scratch::take_stale(ROWS * tk, T::zero());
                let mut dp = scratch::take_stale(ROWS * tk, T::zero());
                let mut pack = packs::<T>(dims);
                let (mut kpanels, mut vpanels) = (KeyPanels::new(), KeyPanels::new());
                let mut i0 = 0;
                while i0 < tq {
                    let n = ROWS.min(tq - i0);
                    let nk = dims.keys(i0 + n - 1);
                    if nk == 0 {
                        zero(dq, qrs, i0..i0 + n, d);
                        i0 += n;
                        continue;
                    }
                    let (s, dp) = (&mut s[..n * nk], &mut dp[..n * nk]);
                    let cut = split::<T>(dims, i0, n, nk, pack.is_some());
                    let a = scores(
                        dims,
                        q,
                        k,
                        mask,
                        b,
                        i0,
                        n,
                        nk,
                        s,
                        &cut,
                        pack.as_deref_mut(),
                        &mut kpanels,
                    );
                    let (g, gs) = (dout.at(b, i0), dout.rs);
                    // dP = dO Vᵀ
                    for &Piece { r0, r1, lo, hi } in &cut.prods {
                        product(
                            (r1 - r0, hi - lo, dv),
                            &mut dp[r0 * nk + lo..],
                            nk,
                            false,
                            &g[r0 * gs..],
                            (gs, 1),
                            v.at(b, lo),
                            (1, v.rs),
                            pack.as_deref_mut(),
                        );
                    }
                    if let Some(t) = &cut.tiles {
                        super::causal_tiles::cols(
                            &t.seen[..n],
                            dv,
                            (g, gs),
                            (v.at(b, 0), v.rs, t.lo),
                            (&mut dp[t.lo..], nk),
                            &mut vpanels,
                        );
                    }
                    for r in 0..n {
                        let i = i0 + r;
                        let f = &fwd[(b * tq + i) * (dv + 1)..][..dv + 1];
                        let lse = f[dv];
                        let dd = super::attention_rows::dot(&f[..dv], &g[r * gs..][..dv]);
                        let seen = dims.keys(i).min(nk);
                        let (srow, dprow) = (&mut s[r * nk..][..seen], &mut dp[r * nk..][..nk]);
                        // srow: P, then P∘F (for dV); dprow: dS, 0 past the
                        // keys the row sees as far as the products read
                        // (`hide`: P is 0 there already, and the products
                        // left dprow's scratch as it was beyond its keys,
                        // or wrote scores there). dS is made from each block
                        // of P as the exponentials make it, in one pass
                        // with them (no sum of P either, which this pass
                        // does not need)
                        hide(dprow, seen, (r, n), &cut);
                        let dprow = &mut dprow[..seen];
                        match &dims.dropout {
                            Some(dr) => {
                                let at = (b * tq + i) * tk;
                                exp_affine_each(srow, a, lse, |j0, pc| {
                                    for (j, p, y) in zip3(j0.., pc, &mut dprow[j0..]) {
                                        let fj = T::from_f64(dr.factor(at + j));
                                        *y = *p * (*y * fj - dd) * scale;
                                        *p = *p * fj;
                                    }
                                });
                            }
                            None => probs_and_ds(srow, dprow, a, lse, dd, scale),
                        }
                    }
                    // dQ = dS K
                    for &Piece { r0, r1, lo, hi } in &cut.prods {
                        let row = (i0 + r0) * qrs;
                        // SAFETY: this batch element's rows of dq (the
                        // caller's disjoint parts), inside the buffer.
                        unsafe {
                            product_at(
                                (r1 - r0, d, hi - lo),
                                (dq.add(row), nq.saturating_sub(row)),
                                qrs,
                                lo > 0,
                                &dp[r0 * nk + lo..],
                                (nk, 1),
                                k.at(b, lo),
                                (k.rs, 1),
                                pack.as_deref_mut(),
                            );
                        }
                    }
                    if let Some(t) = &cut.tiles {
                        let row = i0 * qrs;
                        // SAFETY: as the pieces' (after them: the sums over
                        // keys before `lo` are written first).
                        unsafe {
                            super::causal_tiles::rows_k(
                                &t.seen[..n],
                                (&dp[t.lo..], nk),
                                (k.at(b, t.lo), k.rs),
                                d,
                                (dq.add(row), nq.saturating_sub(row), qrs),
                                t.lo > 0,
                            )
                        };
                        let (rv, rk) = (t.lo * vrs, t.lo * krs);
                        // SAFETY: as the pieces' below, for dv and dk.
                        unsafe {
                            super::causal_tiles::keys_t(
                                &t.seen[..n],
                                (&s[t.lo..], nk),
                                (g, gs),
                                dv,
                                (dvv.add(rv), nv.saturating_sub(rv), vrs),
                            );
                            super::causal_tiles::keys_t(
                                &t.seen[..n],
                                (&dp[t.lo..], nk),
                                (q.at(b, i0), q.rs),
                                d,
                                (dk.add(rk), nk_.saturating_sub(rk), krs),
                            );
                        }
                    }
                    // dV += (P∘F)ᵀ dO, dK += dSᵀ Q
                    for &Piece { r0, r1, lo, hi } in &cut.accs {
                        let (rv, rk) = (lo * vrs, lo * krs);
                        // SAFETY: as dQ's, for dv and dk.
                        unsafe {
                            product_at(
                                (hi - lo, dv, r1 - r0),
                                (dvv.add(rv), nv.saturating_sub(rv)),
                                vrs,
                                true,
                                &s[r0 * nk + lo..],
                                (1, nk),
                                &g[r0 * gs..],
                                (gs, 1),
                                pack.as_deref_mut(),
                            );
                            product_at(
                                (hi - lo, d, r1 - r0),
                                (dk.add(rk), nk_.saturating_sub(rk)),
                                krs,
                                true,
                                &dp[r0 * nk + lo..],
                                (1, nk),
                                q.at(b, i0 + r0),
                                (q.rs, 1),
                                pack.as_deref_mut(),
                            );
                        }
                    }
                    i0 += n;
                }
                // SAFETY: the real parts are this batch element's rows
                // (`extents` checked their reach), apart from the scratch.
                unsafe { staged.copy_out(&real, &parts) };
            },
        )
    });
    if covered {
        // SAFETY: the tasks wrote every row of every part, which together
        // are the whole buffer (dq by the first product of each row's
        // block, or zeroed with dk and dv); `T` is a plain number.
        unsafe { out.set_len(dest.len) };
    }
    Ok(out.into_vec())
}
