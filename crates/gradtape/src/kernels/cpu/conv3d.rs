//! 3-D window kernels on NDHWC buffers: the dense 3-D convolution and its
//! two adjoints (im2col + GEMM, as the 2-D ones of [`super::conv`]), and
//! 3-D max and average pooling with the average pool's adjoint (max
//! pooling's gradient is the scatter of [`super::pooling::max_pool_grad`],
//! which does not care about the rank).
//!
//! Every kernel takes row-major slices and a [`Geom3`] validated by the op
//! layer, and returns a fresh row-major `Vec`. Output rows (or images, for
//! the scatters) run in parallel on the compute threads.

use super::conv::{images_per_chunk, out_dim, products, window_range, Padding};
use super::lockstep::{zip, zip4};
use crate::error::Result;
use crate::tensor::layout::checked_numel;
use crate::tensor::Float;

/// The geometry of one 3-D window op on NDHWC data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geom3 {
    /// The op the user called, for the kernels' errors.
    pub op: &'static str,
    /// Batch size.
    pub n: usize,
    /// Input depth, height, width.
    pub x: [usize; 3],
    /// Input channels.
    pub c: usize,
    /// Window depth, height, width.
    pub k: [usize; 3],
    /// Output channels (convolution); 1 for pools.
    pub o: usize,
    /// Groups of the convolution (1 for pools), as
    /// [`Geom::groups`](super::conv::Geom::groups): the filter is `[kd,
    /// kh, kw, c/groups, o]`.
    pub groups: usize,
    /// Output depth, height, width.
    pub y: [usize; 3],
    /// Strides per spatial axis.
    pub s: [usize; 3],
    /// Dilations per spatial axis.
    pub dil: [usize; 3],
    /// Padding before, per spatial axis.
    pub pad: [usize; 3],
}

impl Geom3 {
    /// The geometry of window `k` over an NDHWC input of shape `x` (rank 5,
    /// checked by the caller) with `o` output channels.
    pub fn new(
        op: &'static str,
        x: &[usize],
        k: [usize; 3],
        o: usize,
        strides: [usize; 3],
        dilations: [usize; 3],
        padding: Padding,
    ) -> Result<Geom3> {
        let mut y = [0; 3];
        let mut pad = [0; 3];
        for (a, what) in ["depth", "height", "width"].into_iter().enumerate() {
            (y[a], pad[a]) = out_dim(op, what, x[a + 1], k[a], strides[a], dilations[a], padding)?;
        }
        let g = Geom3 {
            op,
            n: x[0],
            x: [x[1], x[2], x[3]],
            c: x[4],
            k,
            o,
            groups: 1,
            y,
            s: strides,
            dil: dilations,
            pad,
        };
        // input, filter, output and one image's im2col matrix must have
        // valid sizes, so that the products below fit
        checked_numel(op, x)?;
        checked_numel(op, &[k[0], k[1], k[2], g.c, o])?;
        checked_numel(op, &[g.n, y[0], y[1], y[2], g.c, o])?;
        checked_numel(op, &[y[0], y[1], y[2], k[0], k[1], k[2], g.c])?;
        Ok(g)
    }

    /// This geometry with `groups` groups (`>= 1`, dividing `c` and `o`:
    /// the op layer checks).
    pub fn grouped(mut self, groups: usize) -> Geom3 {
        self.groups = groups.max(1);
        self
    }

    /// Elements of the filter: `kd * kh * kw * (c / groups) * o`.
    pub fn filter_len(&self) -> usize {
        self.kdim() / self.groups * self.o
    }

    /// The input index along axis `a` for output index `o` and window
    /// index `k`, if inside the input.
    #[inline]
    pub(crate) fn at(&self, a: usize, o: usize, k: usize) -> Option<usize> {
        o.saturating_mul(self.s[a])
            .saturating_add(k.saturating_mul(self.dil[a]))
            .checked_sub(self.pad[a])
            .filter(|&i| i < self.x[a])
    }

    /// The window indices along axis `a` that may land inside the input
    /// for output index `o` (at most the input's size plus one of them).
    #[inline]
    pub(crate) fn k_range(&self, a: usize, o: usize) -> std::ops::Range<usize> {
        window_range(
            o.saturating_mul(self.s[a]),
            self.pad[a],
            self.dil[a],
            self.x[a],
            self.k[a],
        )
    }

    /// Output positions of one image (rows of its im2col matrix).
    pub fn rows(&self) -> usize {
        self.y[0] * self.y[1] * self.y[2]
    }

    /// Elements of one input image.
    pub(crate) fn img(&self) -> usize {
        self.x[0] * self.x[1] * self.x[2] * self.c
    }

    /// Columns of the im2col matrix: `kd * kh * kw * c` (one block per
    /// group, as the 2-D matrix).
    pub fn kdim(&self) -> usize {
        self.k[0] * self.k[1] * self.k[2] * self.c
    }

    /// Whether im2col is the identity (1x1x1 window, stride 1, no padding).
    fn trivial(&self) -> bool {
        self.k == [1, 1, 1] && self.s == [1, 1, 1] && self.pad == [0, 0, 0]
    }

    /// Images per im2col chunk ([`images_per_chunk`]).
    fn chunk(&self) -> usize {
        images_per_chunk(self.rows(), self.kdim(), self.n)
    }

    /// The flat offset of input voxel `(i, j, l)` of image `n`, channel 0.
    #[inline]
    fn off(&self, n: usize, i: usize, j: usize, l: usize) -> usize {
        n * self.img() + ((i * self.x[1] + j) * self.x[2] + l) * self.c
    }

    /// Splits output row `r` (one `(n, od, oh)`, counted from image 0) into its parts.
    #[inline]
    fn split_row(&self, r: usize) -> (usize, usize, usize) {
        let oh = r % self.y[1];
        let od = (r / self.y[1]) % self.y[0];
        (r / (self.y[0] * self.y[1]), od, oh)
    }
}

/// The im2col rows of images `n0..` into `cols` (`nb * rows` rows of
/// `kdim`), writing every element (zeros where the window is outside);
/// with groups, each row is one block per group, as the 2-D matrix.
fn im2col<T: Float>(x: &[T], g: &Geom3, n0: usize, cols: &mut [T]) {
    let (kd, c) = (g.kdim(), g.c);
    let (cg, kg) = (c / g.groups, kd / g.groups);
    super::workers::for_each_chunk_mut(cols, (g.y[2] * kd).max(1), |r, row| {
        let (n, od, oh) = g.split_row(r);
        let n = n0 + n;
        for ow in 0..g.y[2] {
            let out = &mut row[ow * kd..(ow + 1) * kd];
            let mut t = 0;
            for a in 0..g.k[0] {
                let i = g.at(0, od, a);
                for b in 0..g.k[1] {
                    let j = g.at(1, oh, b);
                    for e in 0..g.k[2] {
                        let at = match (i, j, g.at(2, ow, e)) {
                            (Some(i), Some(j), Some(l)) => Some(g.off(n, i, j, l)),
                            _ => None,
                        };
                        for grp in 0..g.groups {
                            let dst = &mut out[grp * kg + t * cg..grp * kg + (t + 1) * cg];
                            match at {
                                Some(at) => dst.copy_from_slice(&x[at + grp * cg..at + (grp + 1) * cg]),
                                None => dst.fill(T::zero()),
                            }
                        }
                        t += 1;
                    }
                }
            }
        }
    });
}

/// Adds the im2col rows `cols` of images `n0..n0 + nb` into `dx` (the
/// adjoint of [`im2col`]). Input depth planes run in parallel (so a single
/// large volume is split too): each plane gathers from the output planes
/// whose windows reach it.
fn col2im<T: Float>(cols: &[T], g: &Geom3, n0: usize, nb: usize, dx: &mut [T]) {
    let (kd, c, img) = (g.kdim(), g.c, g.img());
    let (cg, kg) = (c / g.groups, kd / g.groups);
    let plane = g.x[1] * g.x[2] * c;
    if img == 0 || plane == 0 {
        return;
    }
    super::workers::for_each_chunk_mut(&mut dx[n0 * img..(n0 + nb) * img], plane, |p, dxp| {
        let (n, id) = (p / g.x[0], p % g.x[0]);
        let base = n * g.rows();
        for a in 0..g.k[0] {
            // the output plane od with od * s + a * dil - pad == id, if any
            let Some(t) = id.saturating_add(g.pad[0]).checked_sub(a.saturating_mul(g.dil[0])) else {
                break;
            };
            if t % g.s[0] != 0 || t / g.s[0] >= g.y[0] {
                continue;
            }
            let od = t / g.s[0];
            for oh in 0..g.y[1] {
                for b in 0..g.k[1] {
                    let Some(ih) = g.at(1, oh, b) else { continue };
                    for ow in 0..g.y[2] {
                        let r = base + (od * g.y[1] + oh) * g.y[2] + ow;
                        let row = &cols[r * kd..(r + 1) * kd];
                        for e in 0..g.k[2] {
                            let Some(iw) = g.at(2, ow, e) else { continue };
                            let t = (a * g.k[1] + b) * g.k[2] + e;
                            let at = (ih * g.x[2] + iw) * c;
                            for grp in 0..g.groups {
                                let src = &row[grp * kg + t * cg..grp * kg + (t + 1) * cg];
                                let dst = &mut dxp[at + grp * cg..at + (grp + 1) * cg];
                                for (d, s) in zip(&mut dst[..], src) {
                                    *d = *d + *s;
                                }
                            }
                        }
                    }
                }
            }
        }
    });
}

/// Calls `visit(n0, nb, a)` for each chunk of `nb` images from image `n0`
/// of `x`, `a` their im2col rows (`nb * rows` x `kdim`; a slice of `x`
/// itself when im2col is the identity), built in one reused scratch.
fn each_im2col_chunk<T: Float>(x: &[T], g: &Geom3, mut visit: impl FnMut(usize, usize, &[T])) -> Result<()> {
    let (rows, kd) = (g.rows(), g.kdim());
    let (nc, trivial) = (g.chunk(), g.trivial());
    let mut cols = super::filled_vec(g.op, if trivial { 0 } else { nc * rows * kd }, T::zero())?;
    for n0 in (0..g.n).step_by(nc) {
        let nb = nc.min(g.n - n0);
        let len = nb * rows * kd;
        let a = if trivial {
            &x[n0 * rows * kd..][..len]
        } else {
            im2col(x, g, n0, &mut cols[..len]);
            &cols[..len]
        };
        visit(n0, nb, a);
    }
    super::recycle(cols);
    Ok(())
}

/// Dense conv3d: `x` `[n,d,h,w,c]`, `f` `[kd,kh,kw,c/groups,o]` -> `[n,od,oh,ow,o]`.
pub fn conv3d<T: Float>(x: &[T], f: &[T], g: &Geom3) -> Result<Vec<T>> {
    let (rows, kd, o) = (g.rows(), g.kdim(), g.o);
    let total = g.n * rows * o;
    let mut out = super::filled_vec(g.op, total, T::zero())?;
    if total == 0 || kd == 0 {
        return Ok(out);
    }
    let optr = out.as_mut_ptr();
    each_im2col_chunk(x, g, |n0, nb, a| {
        // SAFETY: rows n0*rows.. of `out` ((nb*rows) x o) lie inside it; a
        // distinct buffer, not otherwise borrowed while this runs.
        unsafe { products::forward((nb * rows, kd, o), g.groups, optr.add(n0 * rows * o), a, f) }
    })?;
    Ok(out)
}

/// The input gradient of [`conv3d`]: `dy` `[n,od,oh,ow,o]`, `f` -> `[n,d,h,w,c]`.
pub fn conv3d_backprop_input<T: Float>(dy: &[T], f: &[T], g: &Geom3) -> Result<Vec<T>> {
    let (rows, kd, o) = (g.rows(), g.kdim(), g.o);
    let mut dx = super::filled_vec(g.op, g.n * g.img(), T::zero())?;
    if dx.is_empty() || rows == 0 || o == 0 || kd == 0 {
        return Ok(dx);
    }
    let (nc, trivial) = (g.chunk(), g.trivial());
    let mut cols = super::filled_vec(g.op, if trivial { 0 } else { nc * rows * kd }, T::zero())?;
    for n0 in (0..g.n).step_by(nc) {
        let nb = nc.min(g.n - n0);
        let dyc = &dy[n0 * rows * o..(n0 + nb) * rows * o];
        let dst = if trivial {
            dx[n0 * rows * kd..].as_mut_ptr()
        } else {
            cols.as_mut_ptr()
        };
        // SAFETY: dst is (nb*rows) x kd inside its buffer (dx from row
        // n0*rows when trivial, else the scratch), written whole; distinct
        // allocations.
        unsafe { products::input((nb * rows, kd, o), g.groups, dst, dyc, f) }
        if !trivial {
            col2im(&cols[..nb * rows * kd], g, n0, nb, &mut dx);
        }
    }
    super::recycle(cols);
    Ok(dx)
}

/// The filter gradient of [`conv3d`]: `x` `[n,d,h,w,c]`, `dy` `[n,od,oh,ow,o]` -> `[kd,kh,kw,c/groups,o]`.
pub fn conv3d_backprop_filter<T: Float>(x: &[T], dy: &[T], g: &Geom3) -> Result<Vec<T>> {
    let (rows, kd, o) = (g.rows(), g.kdim(), g.o);
    let mut df = super::filled_vec(g.op, g.filter_len(), T::zero())?;
    if df.is_empty() || rows == 0 || g.n == 0 {
        return Ok(df);
    }
    each_im2col_chunk(x, g, |n0, nb, a| {
        let dyc = &dy[n0 * rows * o..(n0 + nb) * rows * o];
        // (accumulated after the first chunk)
        products::filter((nb * rows, kd, o), g.groups, &mut df, n0 > 0, a, dyc);
    })?;
    Ok(df)
}

/// Calls `tap(offset)` for each input voxel of output `(n, od, oh, ow)`'s
/// window that lies inside the input, in window order; returns how many.
#[inline]
fn window(g: &Geom3, (n, od, oh, ow): (usize, usize, usize, usize), mut tap: impl FnMut(usize)) -> usize {
    let mut count = 0;
    for a in g.k_range(0, od) {
        let Some(i) = g.at(0, od, a) else { continue };
        for b in g.k_range(1, oh) {
            let Some(j) = g.at(1, oh, b) else { continue };
            for e in g.k_range(2, ow) {
                let Some(l) = g.at(2, ow, e) else { continue };
                tap(g.off(n, i, j, l));
                count += 1;
            }
        }
    }
    count
}

/// The number of valid input voxels in output `(od, oh, ow)`'s window.
fn count(g: &Geom3, od: usize, oh: usize, ow: usize) -> usize {
    let along = |a: usize, o: usize| g.k_range(a, o).filter(|&k| g.at(a, o, k).is_some()).count();
    along(0, od) * along(1, oh) * along(2, ow)
}

/// 3-D max pool: the output `[n,od,oh,ow,c]` and the flat index into `x` of
/// each output's maximum (the first in window order on ties; NaN skipped
/// unless the window holds nothing else, as the 2-D pool does).
pub fn max_pool3d<T: Float>(x: &[T], g: &Geom3) -> Result<(Vec<T>, Vec<i64>)> {
    let (c, row) = (g.c, g.y[2] * g.c);
    let total = g.n * g.rows() * c;
    let mut y = super::filled_vec(g.op, total, T::neg_infinity())?;
    let mut arg = super::filled_vec(g.op, total, 0i64)?;
    if total == 0 {
        return Ok((y, arg));
    }
    super::workers::for_each_chunk2_mut(&mut y, row, &mut arg, row, |r, yr, ar| {
        let (n, od, oh) = g.split_row(r);
        for ow in 0..g.y[2] {
            let (yo, ao) = (&mut yr[ow * c..(ow + 1) * c], &mut ar[ow * c..(ow + 1) * c]);
            let mut first = true;
            window(g, (n, od, oh, ow), |off| {
                for (j, yv, av, &xv) in zip4(0.., &mut yo[..], &mut ao[..], &x[off..off + c]) {
                    let take = first || xv > *yv || (yv.is_nan() && !xv.is_nan());
                    if take {
                        *yv = xv;
                        *av = (off + j) as i64;
                    }
                }
                first = false;
            });
        }
    });
    Ok((y, arg))
}

/// 3-D average pool: each output the mean of its window's valid inputs.
pub fn avg_pool3d<T: Float>(x: &[T], g: &Geom3) -> Result<Vec<T>> {
    let (c, row) = (g.c, g.y[2] * g.c);
    let mut y = super::filled_vec(g.op, g.n * g.rows() * c, T::zero())?;
    if y.is_empty() {
        return Ok(y);
    }
    super::workers::for_each_chunk_mut(&mut y, row, |r, yr| {
        let (n, od, oh) = g.split_row(r);
        for ow in 0..g.y[2] {
            let yo = &mut yr[ow * c..(ow + 1) * c];
            let count = window(g, (n, od, oh, ow), |off| {
                for (yv, &xv) in zip(&mut yo[..], &x[off..off + c]) {
                    *yv = *yv + xv;
                }
            });
            let inv = T::one() / T::from(count.max(1)).unwrap_or_else(T::one);
            yo.iter_mut().for_each(|v| *v = *v * inv);
        }
    });
    Ok(y)
}

/// The adjoint of [`avg_pool3d`]: each `dy` element spread evenly over its
/// window's valid inputs; returns `[n,d,h,w,c]`.
pub fn avg_pool3d_grad<T: Float>(dy: &[T], g: &Geom3) -> Result<Vec<T>> {
    let (c, img) = (g.c, g.img());
    let mut dx = super::filled_vec(g.op, g.n * img, T::zero())?;
    if dx.is_empty() {
        return Ok(dx);
    }
    let per = g.rows() * c;
    super::workers::for_each_chunk_mut(&mut dx, img, |n, dxi| {
        for (r, d) in dy[n * per..(n + 1) * per].chunks_exact(c).enumerate() {
            let ow = r % g.y[2];
            let (_, od, oh) = g.split_row(r / g.y[2]);
            let inv = T::one() / T::from(count(g, od, oh, ow).max(1)).unwrap_or_else(T::one);
            window(g, (0, od, oh, ow), |off| {
                for (xv, &dv) in zip(&mut dxi[off..off + c][..], d) {
                    *xv = *xv + dv * inv;
                }
            });
        }
    });
    Ok(dx)
}
