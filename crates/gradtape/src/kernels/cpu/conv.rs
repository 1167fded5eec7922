//! Convolution kernels on NHWC buffers: im2col + GEMM for the dense
//! convolution and its two adjoints (after handing `f32` stride-1 ones to
//! the direct kernels of [`super::direct_conv`] where the CPU has AVX-512;
//! grouped ones build their im2col rows group by group and run one GEMM per
//! group on strided blocks, see [`products`]),
//! direct channel-vectorised loops for the depthwise convolution. Rows and
//! images run in parallel on the compute threads ([`super::workers`]);
//! scratch buffers come from the buffer cache and are written without a
//! zero fill first.
//!
//! Every kernel takes row-major slices and a [`Geom`] that has already been
//! validated by the op layer, and returns a fresh row-major `Vec`.

use std::mem::MaybeUninit;

use super::lockstep::{chunks, chunks_mut, whole, whole_mut, zip, zip3};
use crate::error::{Error, Result};
use crate::tensor::layout::checked_numel;
use crate::tensor::{Buf, Float};

/// Padding mode of convolutions and pools, with TensorFlow's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Padding {
    /// Output size `ceil(in / stride)`; the input is padded with zeros, the
    /// smaller half of the total padding before, the larger half after.
    Same,
    /// No padding: output size `ceil((in - (k - 1) * dilation) / stride)`.
    Valid,
}

/// The geometry of one 2-D window op on NHWC data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geom {
    /// The op the user called, for the kernels' errors (allocation failures).
    pub op: &'static str,
    /// Batch, input height, input width, input channels.
    pub n: usize,
    pub h: usize,
    pub w: usize,
    pub c: usize,
    /// Window height and width.
    pub kh: usize,
    pub kw: usize,
    /// Output channels (dense conv) or channel multiplier (depthwise); 1 for pools.
    pub o: usize,
    /// Groups of a dense convolution (1 otherwise): group `i` reads input
    /// channels `[i·c/groups, (i+1)·c/groups)` and writes output channels
    /// `[i·o/groups, (i+1)·o/groups)`; the filter is `[kh, kw, c/groups, o]`.
    /// Both `c` and `o` are multiples of it (the op layer checks).
    pub groups: usize,
    /// Output height and width.
    pub oh: usize,
    pub ow: usize,
    /// Strides, dilations, padding before (top, left).
    pub sh: usize,
    pub sw: usize,
    pub dh: usize,
    pub dw: usize,
    pub pt: usize,
    pub pl: usize,
}

/// Output size and padding before for one spatial dim, as TensorFlow computes them.
pub(crate) fn out_dim(
    op: &'static str,
    what: &str,
    input: usize,
    k: usize,
    stride: usize,
    dil: usize,
    padding: Padding,
) -> Result<(usize, usize)> {
    let eff = (k.saturating_sub(1)).saturating_mul(dil).saturating_add(1);
    match padding {
        Padding::Same => {
            let out = input.div_ceil(stride);
            let total = (out.saturating_sub(1) * stride + eff).saturating_sub(input);
            Ok((out, total / 2))
        }
        Padding::Valid => {
            if k == 0 {
                return Err(Error::invalid(op, format!("{what} window size is 0")));
            }
            if input < eff {
                return Err(Error::invalid(
                    op,
                    format!(
                        "VALID padding: {what} input size {input} is smaller than the \
                         (dilated) window size {eff}; the output size would be negative"
                    ),
                ));
            }
            Ok(((input - eff) / stride + 1, 0))
        }
    }
}

/// Converts user strides / dilations / window sizes (`>= 1`) to `usize`.
pub(crate) fn positive<const N: usize>(op: &'static str, what: &str, v: [i64; N]) -> Result<[usize; N]> {
    if v.iter().any(|&s| s < 1) {
        return Err(Error::invalid(op, format!("{what} must be >= 1, got {v:?}")));
    }
    let mut out = [0usize; N];
    for (o, &s) in zip(&mut out[..], &v) {
        *o = usize::try_from(s).map_err(|_| Error::invalid(op, format!("{what} {v:?} too large")))?;
    }
    Ok(out)
}

impl Geom {
    /// The geometry of a window `k` over an NHWC input of shape `x`, with `o`
    /// output channels (or multiplier).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        op: &'static str,
        x: &[usize],
        k: [usize; 2],
        o: usize,
        strides: [usize; 2],
        dilations: [usize; 2],
        padding: Padding,
    ) -> Result<Geom> {
        let (oh, pt) = out_dim(op, "height", x[1], k[0], strides[0], dilations[0], padding)?;
        let (ow, pl) = out_dim(op, "width", x[2], k[1], strides[1], dilations[1], padding)?;
        let g = Geom {
            op,
            n: x[0],
            h: x[1],
            w: x[2],
            c: x[3],
            kh: k[0],
            kw: k[1],
            o,
            groups: 1,
            oh,
            ow,
            sh: strides[0],
            sw: strides[1],
            dh: dilations[0],
            dw: dilations[1],
            pt,
            pl,
        };
        // the shapes of the input, the filter, the output (channels
        // `c * o` at most) and one image's im2col matrix must be valid, so
        // that the kernels' size products fit (their buffers are allocated
        // fallibly)
        checked_numel(op, x)?;
        checked_numel(op, &[g.kh, g.kw, g.c, o])?;
        checked_numel(op, &[g.n, g.oh, g.ow, g.c, o])?;
        checked_numel(op, &[g.oh, g.ow, g.kh, g.kw, g.c])?;
        Ok(g)
    }

    /// This geometry with `groups` groups (`>= 1`, dividing `c` and `o`:
    /// the op layer checks).
    pub fn grouped(mut self, groups: usize) -> Geom {
        self.groups = groups.max(1);
        self
    }

    /// Elements of the filter: `kh * kw * (c / groups) * o`.
    pub fn filter_len(&self) -> usize {
        self.kdim() / self.groups * self.o
    }

    /// The input row for output row `o` and window row `k`, if inside the input.
    #[inline]
    pub(crate) fn ih(&self, o: usize, k: usize) -> Option<usize> {
        (o * self.sh + k * self.dh).checked_sub(self.pt).filter(|&i| i < self.h)
    }

    /// The input column for output column `o` and window column `k`, if inside the input.
    #[inline]
    pub(crate) fn iw(&self, o: usize, k: usize) -> Option<usize> {
        (o * self.sw + k * self.dw).checked_sub(self.pl).filter(|&i| i < self.w)
    }

    /// The window rows `k` whose input row for output row `o` may lie
    /// inside the input (a superset of those `ih` accepts, of at most
    /// `h + 1` rows, so that a huge window costs what the input costs).
    #[inline]
    pub(crate) fn kh_range(&self, o: usize) -> std::ops::Range<usize> {
        window_range(o * self.sh, self.pt, self.dh, self.h, self.kh)
    }

    /// The window columns `k` for output column `o` (see [`Self::kh_range`]).
    #[inline]
    pub(crate) fn kw_range(&self, o: usize) -> std::ops::Range<usize> {
        window_range(o * self.sw, self.pl, self.dw, self.w, self.kw)
    }

    /// Rows of the im2col matrix of one image.
    pub fn rows(&self) -> usize {
        self.oh * self.ow
    }

    /// Columns of the im2col matrix: `kh * kw * c` (in `groups` blocks of
    /// `kh * kw * c / groups`, one group's taps and channels each).
    pub fn kdim(&self) -> usize {
        self.kh * self.kw * self.c
    }

    /// Whether im2col is the identity (1x1 window, stride 1, no padding).
    fn trivial(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.sh == 1 && self.sw == 1 && self.pt == 0 && self.pl == 0
    }

    /// Images per im2col chunk ([`images_per_chunk`]).
    fn chunk(&self) -> usize {
        images_per_chunk(self.rows(), self.kdim(), self.n)
    }
}

use super::matmul::gemm_raw;

/// Images per im2col chunk for `rows` output positions per image and `kdim`
/// window elements per position (2-D and 3-D convolutions alike): the
/// scratch matrix bounded to about 8M elements (32 MiB of f32).
pub(crate) fn images_per_chunk(rows: usize, kdim: usize, n: usize) -> usize {
    let per = (rows * kdim).max(1);
    ((8 << 20) / per).clamp(1, n.max(1))
}

/// The three products of an im2col convolution (2-D and 3-D), for a chunk
/// of `rows` output positions with `kd` window elements each and `o`
/// output channels, in `groups` groups; `f` is the `(kd / groups) x o`
/// filter, all row-major. With groups, the im2col rows hold one block of
/// `kd / groups` columns per group (that group's taps and channels), and
/// group `i` is the product of column block `i` with the filter's columns
/// `[i·o/groups, (i+1)·o/groups)`, giving (or reading) those output
/// columns: one GEMM per group on strided blocks, nothing copied.
pub(crate) mod products {
    use super::gemm_raw;
    use crate::tensor::Float;

    /// `out = a @ f` per group: `a` `rows x kd` (im2col rows), `out` `rows
    /// x o`, written whole.
    ///
    /// # Safety
    /// `out` must point to `rows * o` writable elements (they may be
    /// uninitialised) in a buffer distinct from `a` and `f`; `groups`
    /// must divide `kd` and `o`.
    pub(crate) unsafe fn forward<T: Float>(
        (rows, kd, o): (usize, usize, usize),
        groups: usize,
        out: *mut T,
        a: &[T],
        f: &[T],
    ) {
        let (kg, og) = (kd / groups, o / groups);
        assert!(a.len() >= rows * kd && f.len() >= kg * o && kg * groups == kd && og * groups == o);
        for i in 0..groups {
            // SAFETY: a's column block i is rows x kg (row stride kd), f's
            // column block i kg x og (row stride o), out's column block i
            // rows x og (row stride o), all inside their buffers (checked
            // above, and the caller's contract for out); distinct buffers.
            unsafe {
                gemm_raw(
                    (rows, og, kg),
                    out.add(i * og),
                    (o as isize, 1),
                    false,
                    a.as_ptr().add(i * kg),
                    (kd as isize, 1),
                    f.as_ptr().add(i * og),
                    (o as isize, 1),
                    true,
                )
            }
        }
    }

    /// `dst = dy @ f^T` per group: `dy` `rows x o`, `dst` `rows x kd`
    /// (im2col rows of the input gradient), written whole.
    ///
    /// # Safety
    /// `dst` must point to `rows * kd` writable elements (they may be
    /// uninitialised) in a buffer distinct from `dy` and `f`; `groups`
    /// must divide `kd` and `o`.
    pub(crate) unsafe fn input<T: Float>(
        (rows, kd, o): (usize, usize, usize),
        groups: usize,
        dst: *mut T,
        dy: &[T],
        f: &[T],
    ) {
        let (kg, og) = (kd / groups, o / groups);
        assert!(dy.len() >= rows * o && f.len() >= kg * o && kg * groups == kd && og * groups == o);
        for i in 0..groups {
            // SAFETY: dy's column block i is rows x og (row stride o), the
            // transpose of f's column block i og x kg (f row-major kg x o),
            // dst's column block i rows x kg (row stride kd; the caller's
            // contract); distinct buffers.
            unsafe {
                gemm_raw(
                    (rows, kg, og),
                    dst.add(i * kg),
                    (kd as isize, 1),
                    false,
                    dy.as_ptr().add(i * og),
                    (o as isize, 1),
                    f.as_ptr().add(i * og),
                    (1, o as isize),
                    true,
                )
            }
        }
    }

    /// `df (+)= a^T @ dy` per group (added to `df` when `acc`): `a` `rows
    /// x kd` (im2col rows), `dy` `rows x o`, `df` `(kd / groups) x o`.
    pub(crate) fn filter<T: Float>(
        (rows, kd, o): (usize, usize, usize),
        groups: usize,
        df: &mut [T],
        acc: bool,
        a: &[T],
        dy: &[T],
    ) {
        let (kg, og) = (kd / groups, o / groups);
        assert!(a.len() >= rows * kd && dy.len() >= rows * o && df.len() >= kg * o);
        assert!(kg * groups == kd && og * groups == o);
        for i in 0..groups {
            // SAFETY: the transpose of a's column block i is kg x rows (a
            // row-major rows x kd), dy's column block i rows x og (row
            // stride o), df's column block i kg x og (row stride o), all
            // inside their slices (checked above); `df` is borrowed
            // mutably, so it overlaps neither operand.
            unsafe {
                gemm_raw(
                    (kg, og, rows),
                    df.as_mut_ptr().add(i * og),
                    (o as isize, 1),
                    acc,
                    a.as_ptr().add(i * kg),
                    (1, kd as isize),
                    dy.as_ptr().add(i * og),
                    (o as isize, 1),
                    true,
                )
            }
        }
    }
}

/// An empty scratch buffer with room for `n` elements (from the cache).
fn scratch<T: Float>(g: &Geom, n: usize) -> Result<Buf<T>> {
    super::uninit_buf(g.op, n)
}

/// Lets `write` fill the first `n` slots of `buf` (it must write every one)
/// and returns them; the buffer's length becomes at least `n`.
fn filled<T: Float>(buf: &mut Buf<T>, n: usize, write: impl FnOnce(&mut [MaybeUninit<T>])) -> &[T] {
    if buf.len() < n {
        buf.clear();
        write(&mut super::spare(buf)[..n]);
        // SAFETY: `write` initialised slots 0..n (the callers' contract).
        unsafe { buf.set_len(n) };
    } else {
        // SAFETY: the first `len >= n` elements are initialised; viewing
        // them as `MaybeUninit` only forgets that.
        write(unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut MaybeUninit<T>, n) });
    }
    &buf[..n]
}

/// `dst.copy_from_slice(src)` for the short runs (a few channels, a window
/// row) that make up im2col: whole 16-element blocks and a short tail, with
/// no `memcpy` call.
#[inline(always)]
fn copy_small<T: Copy + num_traits::Zero>(dst: &mut [MaybeUninit<T>], src: &[T]) {
    let n = dst.len().min(src.len());
    let (head, rest) = dst.split_at_mut(n);
    let (d, d_rest) = whole_mut(head, 16);
    let (s, s_rest) = whole(&src[..n], 16);
    for (a, b) in zip(chunks_mut(d, 16), chunks(s, 16)) {
        if let (Ok(a), Ok(b)) = (<&mut [MaybeUninit<T>; 16]>::try_from(a), <&[T; 16]>::try_from(b)) {
            for (a, &b) in zip(a, b) {
                a.write(b);
            }
        }
    }
    for (a, &b) in zip(d_rest, s_rest) {
        a.write(b);
    }
    for a in rest {
        a.write(T::zero());
    }
}

/// The im2col rows of images `n0..n0 + nb` of `x` into `cols`
/// (`nb * oh * ow` rows of `kh * kw * c`, row-major), writing every element.
/// With groups, each row is `groups` blocks of `kh * kw * c / groups`, one
/// group's window taps over its own channels.
fn im2col<T: Float>(x: &[T], g: &Geom, n0: usize, cols: &mut [MaybeUninit<T>]) {
    let (kd, c) = (g.kdim(), g.c);
    let (cg, kg) = (c / g.groups, kd / g.groups);
    let img = g.h * g.w * c;
    let span = g.kw * c;
    super::workers::for_each_chunk_mut(cols, (g.ow * kd).max(1), |r, row| {
        let (n, oh) = (n0 + r / g.oh, r % g.oh);
        let xi = &x[n * img..(n + 1) * img];
        for ow in 0..g.ow {
            let out = &mut row[ow * kd..(ow + 1) * kd];
            // the window's first column, when the whole window row is
            // inside and contiguous (in the matrix too: one group)
            let iw0 = (ow * g.sw)
                .checked_sub(g.pl)
                .filter(|&i| g.dw == 1 && i + g.kw <= g.w && g.groups == 1);
            for kh in 0..g.kh {
                let ih = g.ih(oh, kh);
                if let (Some(ih), Some(iw0)) = (ih, iw0) {
                    let at = (ih * g.w + iw0) * c;
                    copy_small(&mut out[kh * span..(kh + 1) * span], &xi[at..at + span]);
                    continue;
                }
                for kw in 0..g.kw {
                    let tap = (kh * g.kw + kw) * cg;
                    let at = match (ih, g.iw(ow, kw)) {
                        (Some(ih), Some(iw)) => Some((ih * g.w + iw) * c),
                        _ => None,
                    };
                    for i in 0..g.groups {
                        let dst = &mut out[i * kg + tap..i * kg + tap + cg];
                        match at {
                            Some(at) => copy_small(dst, &xi[at + i * cg..at + (i + 1) * cg]),
                            None => dst.iter_mut().for_each(|d| {
                                d.write(T::zero());
                            }),
                        }
                    }
                }
            }
        }
    });
}

/// Adds the im2col rows `cols` of images `n0..` back into `dx` (the adjoint of [`im2col`]).
fn col2im<T: Float>(cols: &[T], g: &Geom, n0: usize, nb: usize, dx: &mut [T]) {
    let (kd, c) = (g.kdim(), g.c);
    let (cg, kg) = (c / g.groups, kd / g.groups);
    let img = g.h * g.w * c;
    if img == 0 {
        return;
    }
    super::workers::for_each_chunk_mut(&mut dx[n0 * img..(n0 + nb) * img], img, |i, dxi| {
        let base = i * g.rows() * kd;
        for oh in 0..g.oh {
            for kh in 0..g.kh {
                let Some(ih) = g.ih(oh, kh) else { continue };
                for ow in 0..g.ow {
                    let row = &cols[base + (oh * g.ow + ow) * kd..];
                    for kw in 0..g.kw {
                        let Some(iw) = g.iw(ow, kw) else { continue };
                        let tap = (kh * g.kw + kw) * cg;
                        let at = (ih * g.w + iw) * c;
                        for grp in 0..g.groups {
                            let src = &row[grp * kg + tap..grp * kg + tap + cg];
                            let dst = &mut dxi[at + grp * cg..at + (grp + 1) * cg];
                            for (d, s) in zip(&mut dst[..], src) {
                                *d = *d + *s;
                            }
                        }
                    }
                }
            }
        }
    });
}

/// Dense conv2d: `x` \[n,h,w,c\], `f` \[kh,kw,c/groups,o\] -> \[n,oh,ow,o\]; also gives
/// its im2col matrix ([n*oh*ow, kh*kw*c]) when `keep` and it was built whole
/// (the images fit one chunk), for the filter gradient to reuse instead of
/// building it again.
pub fn conv2d_keep<T: Float>(x: &[T], f: &[T], g: &Geom, keep: bool) -> Result<(Vec<T>, Option<Vec<T>>)> {
    let (rows, kd, o) = (g.rows(), g.kdim(), g.o);
    let total = g.n * rows * o;
    if total == 0 || kd == 0 {
        return Ok((super::filled_vec(g.op, total, T::zero())?, None));
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(y) = super::direct_conv::forward(x, f, g) {
        return Ok((y, None));
    }
    // the products below write every element of `out` (no accumulation)
    let mut out = super::uninit_buf::<T>(g.op, total)?;
    let optr = super::spare(&mut out).as_mut_ptr() as *mut T;
    let nc = g.chunk();
    let mut cols = scratch::<T>(g, if g.trivial() { 0 } else { nc * rows * kd })?;
    for n0 in (0..g.n).step_by(nc) {
        let nb = nc.min(g.n - n0);
        let a: &[T] = if g.trivial() {
            &x[n0 * rows * kd..(n0 + nb) * rows * kd]
        } else {
            filled(&mut cols, nb * rows * kd, |c| im2col(x, g, n0, c))
        };
        // SAFETY: rows n0*rows.. of `out` ((nb*rows) x o) lie inside it;
        // `out` is a distinct allocation, written, not read.
        unsafe { products::forward((nb * rows, kd, o), g.groups, optr.add(n0 * rows * o), a, f) }
    }
    // SAFETY: the chunks above covered all `total` elements.
    unsafe { out.set_len(total) };
    let out = out.into_vec();
    if keep && nc >= g.n && !g.trivial() {
        return Ok((out, Some(cols.into_vec())));
    }
    super::recycle(cols.into_vec());
    Ok((out, None))
}

/// The input gradient of [`conv2d_keep`]: `dy` \[n,oh,ow,o\], `f` \[kh,kw,c/groups,o\] -> \[n,h,w,c\].
pub fn conv2d_backprop_input<T: Float>(dy: &[T], f: &[T], g: &Geom) -> Result<Vec<T>> {
    let (rows, kd, o) = (g.rows(), g.kdim(), g.o);
    if g.n * g.h * g.w * g.c == 0 || rows == 0 || o == 0 {
        return super::filled_vec(g.op, g.n * g.h * g.w * g.c, T::zero());
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(dx) = super::direct_conv::backprop_input(dy, f, g) {
        return Ok(dx);
    }
    let mut dx = super::filled_vec(g.op, g.n * g.h * g.w * g.c, T::zero())?;
    let nc = g.chunk();
    let direct = g.trivial();
    let mut cols = scratch::<T>(g, if direct { 0 } else { nc * rows * kd })?;
    for n0 in (0..g.n).step_by(nc) {
        let nb = nc.min(g.n - n0);
        let dyc = &dy[n0 * rows * o..(n0 + nb) * rows * o];
        let product = |dst: *mut T| {
            // SAFETY: dst is (nb*rows) x kd inside dx or the scratch, written
            // whole; distinct allocations.
            unsafe { products::input((nb * rows, kd, o), g.groups, dst, dyc, f) }
        };
        if direct {
            product(dx[n0 * rows * kd..(n0 + nb) * rows * kd].as_mut_ptr());
        } else {
            let c = filled(&mut cols, nb * rows * kd, |c| product(c.as_mut_ptr() as *mut T));
            col2im(c, g, n0, nb, &mut dx);
        }
    }
    super::recycle(cols.into_vec());
    Ok(dx)
}

/// The filter gradient of [`conv2d_keep`]: `x` [n,h,w,c], `dy` [n,oh,ow,o] -> [kh,kw,c/groups,o].
pub(crate) fn conv2d_backprop_filter<T: Float>(x: &[T], dy: &[T], g: &Geom) -> Result<Vec<T>> {
    let (rows, kd, o) = (g.rows(), g.kdim(), g.o);
    if g.filter_len() == 0 || rows == 0 || g.n == 0 {
        return super::filled_vec(g.op, g.filter_len(), T::zero());
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(df) = super::direct_conv::backprop_filter(x, dy, g) {
        return Ok(df);
    }
    let mut df = super::filled_vec(g.op, g.filter_len(), T::zero())?;
    let nc = g.chunk();
    let mut cols = scratch::<T>(g, if g.trivial() { 0 } else { nc * rows * kd })?;
    for n0 in (0..g.n).step_by(nc) {
        let nb = nc.min(g.n - n0);
        let a: &[T] = if g.trivial() {
            &x[n0 * rows * kd..(n0 + nb) * rows * kd]
        } else {
            filled(&mut cols, nb * rows * kd, |c| im2col(x, g, n0, c))
        };
        let dyc = &dy[n0 * rows * o..(n0 + nb) * rows * o];
        products::filter((nb * rows, kd, o), g.groups, &mut df, n0 > 0, a, dyc);
    }
    super::recycle(cols.into_vec());
    Ok(df)
}

/// The filter gradient of [`conv2d_keep`] from the forward pass's whole im2col
/// matrix `cols` ([n*oh*ow, kd]): `cols^T @ dy` per group -> [kh,kw,c/groups,o].
pub(crate) fn conv2d_backprop_filter_cols<T: Float>(cols: &[T], dy: &[T], g: &Geom) -> Result<Vec<T>> {
    let (rows, kd, o) = (g.n * g.rows(), g.kdim(), g.o);
    let mut df = super::filled_vec(g.op, g.filter_len(), T::zero())?;
    if df.is_empty() || rows == 0 || cols.len() < rows * kd || dy.len() < rows * o {
        return Ok(df);
    }
    products::filter((rows, kd, o), g.groups, &mut df, false, cols, dy);
    Ok(df)
}

/// Depthwise conv2d: `x` `[n,h,w,c]`, `f` `[kh,kw,c,m]` -> `[n,oh,ow,c*m]`.
pub fn depthwise<T: Float>(x: &[T], f: &[T], g: &Geom) -> Result<Vec<T>> {
    let (c, m) = (g.c, g.o);
    let cm = c * m;
    let mut out = super::filled_vec(g.op, g.n * g.rows() * cm, T::zero())?;
    let img = g.h * g.w * c;
    if out.is_empty() {
        return Ok(out);
    }
    super::workers::for_each_chunk_mut(&mut out, g.ow * cm, |r, orow| {
        let (n, oh) = (r / g.oh, r % g.oh);
        let xi = &x[n * img..(n + 1) * img];
        for ow in 0..g.ow {
            let o = &mut orow[ow * cm..(ow + 1) * cm];
            for kh in 0..g.kh {
                let Some(ih) = g.ih(oh, kh) else { continue };
                for kw in 0..g.kw {
                    let Some(iw) = g.iw(ow, kw) else { continue };
                    let xr = &xi[(ih * g.w + iw) * c..(ih * g.w + iw + 1) * c];
                    let fr = &f[(kh * g.kw + kw) * cm..(kh * g.kw + kw + 1) * cm];
                    if m == 1 {
                        for (o, &xv, &fv) in zip3(&mut o[..], xr, fr) {
                            *o = *o + xv * fv;
                        }
                    } else {
                        for (oc, &xv, fc) in zip3(chunks_mut(o, m), xr, chunks(fr, m)) {
                            for (o, &fv) in zip(&mut oc[..], fc) {
                                *o = *o + xv * fv;
                            }
                        }
                    }
                }
            }
        }
    });
    Ok(out)
}

/// The input gradient of [`depthwise`]: `dy` `[n,oh,ow,c*m]` -> `[n,h,w,c]`.
pub fn depthwise_backprop_input<T: Float>(dy: &[T], f: &[T], g: &Geom) -> Result<Vec<T>> {
    let (c, m) = (g.c, g.o);
    let cm = c * m;
    let img = g.h * g.w * c;
    let mut dx = super::filled_vec(g.op, g.n * img, T::zero())?;
    if dx.is_empty() || m == 0 {
        return Ok(dx);
    }
    let orows = g.rows() * cm;
    super::workers::for_each_chunk_mut(&mut dx, img, |n, dxi| {
        let dyi = &dy[n * orows..(n + 1) * orows];
        for oh in 0..g.oh {
            for kh in 0..g.kh {
                let Some(ih) = g.ih(oh, kh) else { continue };
                for ow in 0..g.ow {
                    let d = &dyi[(oh * g.ow + ow) * cm..(oh * g.ow + ow + 1) * cm];
                    for kw in 0..g.kw {
                        let Some(iw) = g.iw(ow, kw) else { continue };
                        let fr = &f[(kh * g.kw + kw) * cm..(kh * g.kw + kw + 1) * cm];
                        let xr = &mut dxi[(ih * g.w + iw) * c..(ih * g.w + iw + 1) * c];
                        if m == 1 {
                            // one filter per channel: a vectorised multiply-add along the channels
                            for (xv, &a, &b) in zip3(&mut xr[..], d, fr) {
                                *xv = *xv + a * b;
                            }
                            continue;
                        }
                        for (xv, dc, fc) in zip3(&mut xr[..], chunks(d, m), chunks(fr, m)) {
                            let mut s = *xv;
                            for (&a, &b) in zip(dc, fc) {
                                s = s + a * b;
                            }
                            *xv = s;
                        }
                    }
                }
            }
        }
    });
    Ok(dx)
}

/// The filter gradient of [`depthwise`]: -> `[kh,kw,c,m]`.
pub fn depthwise_backprop_filter<T: Float>(x: &[T], dy: &[T], g: &Geom) -> Result<Vec<T>> {
    let (c, m) = (g.c, g.o);
    let cm = c * m;
    let len = g.kh * g.kw * cm;
    let img = g.h * g.w * c;
    let orows = g.rows() * cm;
    // (no input pixels or no output rows: a zero gradient, without walking
    // a huge batch of empty images)
    if len == 0 || g.n == 0 || img == 0 || orows == 0 {
        return super::filled_vec(g.op, len, T::zero());
    }
    let per = g.n.div_ceil(super::workers::threads());
    let parts = super::workers::map(g.n.div_ceil(per), |part| {
        let mut df = super::filled_vec(g.op, len, T::zero())?;
        for n in part * per..((part + 1) * per).min(g.n) {
            let xi = &x[n * img..(n + 1) * img];
            let dyi = &dy[n * orows..(n + 1) * orows];
            for oh in 0..g.oh {
                for kh in 0..g.kh {
                    let Some(ih) = g.ih(oh, kh) else { continue };
                    for ow in 0..g.ow {
                        let d = &dyi[(oh * g.ow + ow) * cm..(oh * g.ow + ow + 1) * cm];
                        for kw in 0..g.kw {
                            let Some(iw) = g.iw(ow, kw) else { continue };
                            let xr = &xi[(ih * g.w + iw) * c..(ih * g.w + iw + 1) * c];
                            let fr = &mut df[(kh * g.kw + kw) * cm..(kh * g.kw + kw + 1) * cm];
                            if m == 1 {
                                // one filter per channel: a vectorised multiply-add along the channels
                                for (fv, &xv, &dv) in zip3(&mut fr[..], xr, d) {
                                    *fv = *fv + xv * dv;
                                }
                                continue;
                            }
                            for (fc, &xv, dc) in zip3(chunks_mut(fr, m), xr, chunks(d, m)) {
                                for (fv, &dv) in zip(&mut fc[..], dc) {
                                    *fv = *fv + xv * dv;
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(df)
    });
    let mut sum: Option<Vec<T>> = None;
    for part in parts {
        let part = part?;
        match &mut sum {
            Some(a) => {
                for (x, y) in zip(&mut a[..], &part) {
                    *x = *x + *y;
                }
            }
            None => sum = Some(part),
        }
    }
    sum.map_or_else(|| super::filled_vec(g.op, len, T::zero()), Ok)
}

/// The `k` in `0..k_max` with `start + k d - pad` in `0..n` (as a range).
pub(crate) fn window_range(start: usize, pad: usize, d: usize, n: usize, k_max: usize) -> std::ops::Range<usize> {
    let d = d.max(1);
    let lo = pad.saturating_sub(start).div_ceil(d).min(k_max);
    let hi = pad.saturating_add(n).saturating_sub(start).div_ceil(d).min(k_max);
    lo..hi.max(lo)
}
