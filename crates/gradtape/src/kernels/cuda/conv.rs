//! Convolutions and pools on the GPU, NHWC data with HWIO filters as the
//! CPU kernels (`kernels::cpu::conv`, `kernels::cpu::pooling`) take them,
//! and NDHWC data with DHWIO filters for the 3-D ops (`kernels::cpu::conv3d`):
//! one set of kernels serves both ranks, their geometry ([`Geo`]) having a
//! depth, which is 1 for a 2-D op (a loop of one step).
//!
//! The dense convolution is im2col + a cuBLAS product: [`IM2COL`] lays the
//! windows of `x` out as the rows of a `[n·oh·ow, kh·kw·c]` matrix (zeros
//! where a window reaches into the padding), which one GEMM multiplies by
//! the filter seen as `[kh·kw·c, o]`. Its adjoints are the two other
//! products: the input gradient multiplies `dy` by the filter transposed
//! and folds the columns back with [`COL2IM`] (one thread per input
//! element gathering the window taps that read it: no atomics, the same
//! result on every run); the filter gradient is `colsᵀ · dy`, from the
//! forward pass's columns when the tape kept them.
//!
//! The depthwise convolution runs directly: one thread per output (the
//! forward pass) or per input element (its input gradient, gathering as
//! col2im does), and a block per filter element for the filter gradient
//! (a tree sum over the batch's outputs, no atomics).
//!
//! Pools run one thread per output element (max, average) or per input
//! element (the average's adjoint, gathering as col2im does); max
//! pooling's adjoint is a scatter-add at the recorded positions
//! (`index::scatter_add`).
//!
//! The half types (`f16`, `bf16`) give the CPU's values to rounding: the
//! CPU convolves and pools them as `f32` copies and rounds each output
//! once (`ops::nn::via_f32`; max pooling in the half type itself, a
//! maximum being exact). Here im2col only copies halves, the two products
//! whose every output is one dot product (the forward pass and the filter
//! gradient) run on the tensor cores accumulating in `f32` and rounding
//! once ([`matmul`]), and the kernels that sum (col2im, the average pool
//! and its adjoint) add in `f32` and round once, col2im reading the `f32`
//! columns of an `f32` product of `f32` copies (products of halves are
//! exact in `f32`: a half product would round each column before the
//! sum). Max pooling compares in `f32` (exact), and its adjoint adds its
//! cotangents in `f32` (windows overlap) before rounding once.

use std::sync::Arc;

use super::index;
use super::launch::{alloc, cast, ct, lay, matmul, mem_of, ptr_of, reshaped, BLOCK};
use super::runtime::grid_for;
use super::source::{compute, COMMON, LIMITS};
use crate::error::Result;
use crate::kernels::cpu::conv::Geom;
use crate::kernels::cpu::conv3d::Geom3;
use crate::tensor::{DType, Layout, Tensor};

/// The geometry as kernels read it (`struct Geo` in `GEO`): batch, input
/// depth, height, width and channels, window depth, height and width,
/// output channels (the multiplier for the depthwise kernels, 1 for
/// pools), output depth, height and width, strides, dilations, padding
/// before (front, top, left). A 2-D op has depth 1 throughout.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Geo {
    n: i64,
    d: i64,
    h: i64,
    w: i64,
    c: i64,
    kd: i64,
    kh: i64,
    kw: i64,
    o: i64,
    od: i64,
    oh: i64,
    ow: i64,
    sd: i64,
    sh: i64,
    sw: i64,
    dd: i64,
    dh: i64,
    dw: i64,
    pf: i64,
    pt: i64,
    pl: i64,
}

impl Geo {
    /// A 2-D geometry (depth 1).
    pub fn of(g: &Geom) -> Geo {
        let i = |v: usize| v as i64;
        Geo {
            n: i(g.n),
            d: 1,
            h: i(g.h),
            w: i(g.w),
            c: i(g.c),
            kd: 1,
            kh: i(g.kh),
            kw: i(g.kw),
            o: i(g.o),
            od: 1,
            oh: i(g.oh),
            ow: i(g.ow),
            sd: 1,
            sh: i(g.sh),
            sw: i(g.sw),
            dd: 1,
            dh: i(g.dh),
            dw: i(g.dw),
            pf: 0,
            pt: i(g.pt),
            pl: i(g.pl),
        }
    }

    /// A 3-D geometry.
    pub fn of3(g: &Geom3) -> Geo {
        let i = |v: usize| v as i64;
        Geo {
            n: i(g.n),
            d: i(g.x[0]),
            h: i(g.x[1]),
            w: i(g.x[2]),
            c: i(g.c),
            kd: i(g.k[0]),
            kh: i(g.k[1]),
            kw: i(g.k[2]),
            o: i(g.o),
            od: i(g.y[0]),
            oh: i(g.y[1]),
            ow: i(g.y[2]),
            sd: i(g.s[0]),
            sh: i(g.s[1]),
            sw: i(g.s[2]),
            dd: i(g.dil[0]),
            dh: i(g.dil[1]),
            dw: i(g.dil[2]),
            pf: i(g.pad[0]),
            pt: i(g.pad[1]),
            pl: i(g.pad[2]),
        }
    }

    /// A C initializer of this geometry (for the host checks).
    pub fn c_init(&self) -> String {
        let v = [
            self.n, self.d, self.h, self.w, self.c, self.kd, self.kh, self.kw, self.o, self.od, self.oh, self.ow,
            self.sd, self.sh, self.sw, self.dd, self.dh, self.dw, self.pf, self.pt, self.pl,
        ];
        format!("{{{}}}", v.map(|x| format!("{x}LL")).join(", "))
    }
}

/// A window op's geometry on the GPU: the kernels' [`Geo`], and whether
/// the op is 3-D (NDHWC data, DHWIO filters) or 2-D (NHWC, HWIO), which
/// sets the rank of the shapes it makes.
#[derive(Clone, Copy, Debug)]
pub struct Win {
    /// What the kernels read.
    pub geo: Geo,
    /// A 3-D op.
    pub three: bool,
    /// The dense convolution's groups (1: not grouped; `super::conv_groups`
    /// runs the others).
    pub groups: usize,
}

impl Win {
    /// A 2-D op's.
    pub fn two(g: &Geom) -> Win {
        Win {
            geo: Geo::of(g),
            three: false,
            groups: g.groups,
        }
    }

    /// A 3-D op's.
    pub fn three(g: &Geom3) -> Win {
        Win {
            geo: Geo::of3(g),
            three: true,
            groups: g.groups,
        }
    }

    /// `[n, (depth,) height, width, channels]` from the spatial sizes.
    fn shape(&self, n: i64, dhw: [i64; 3], ch: i64) -> Vec<usize> {
        let dims = if self.three { &dhw[..] } else { &dhw[1..] };
        std::iter::once(n)
            .chain(dims.iter().copied())
            .chain([ch])
            .map(|v| v as usize)
            .collect()
    }

    /// The input's shape.
    pub(super) fn x_shape(&self) -> Vec<usize> {
        let g = &self.geo;
        self.shape(g.n, [g.d, g.h, g.w], g.c)
    }

    /// The output's shape, with `ch` channels.
    pub(super) fn y_shape(&self, ch: i64) -> Vec<usize> {
        let g = &self.geo;
        self.shape(g.n, [g.od, g.oh, g.ow], ch)
    }

    /// The filter's shape (`c / groups` input channels).
    pub(super) fn f_shape(&self) -> Vec<usize> {
        let g = &self.geo;
        let mut s = self.shape(g.kd, [g.kd, g.kh, g.kw], g.c / self.groups.max(1) as i64);
        s.remove(0);
        s.push(g.o as usize);
        s
    }

    /// Input and output channels.
    pub(super) fn channels(&self) -> (usize, usize) {
        (self.geo.c as usize, self.geo.o as usize)
    }

    /// Rows of the im2col matrix: output positions of the whole batch.
    pub(super) fn rows(&self) -> usize {
        let g = &self.geo;
        (g.n * g.od * g.oh * g.ow) as usize
    }

    /// Columns of the im2col matrix: `kd·kh·kw·c`.
    pub(super) fn kdim(&self) -> usize {
        let g = &self.geo;
        (g.kd * g.kh * g.kw * g.c) as usize
    }
}

/// The geometry struct and the window arithmetic every kernel here shares.
pub(crate) const GEO: &str = r#"
struct Geo { long long n, d, h, w, c, kd, kh, kw, o, od, oh, ow, sd, sh, sw, dd, dh, dw, pf, pt, pl; };
// how many taps of the window of output `o` along one dim (window size
// `k`, stride `s`, dilation `d`, padding before `p`) land inside an input
// of size `n`
__device__ __forceinline__ long long gt_count_valid(long long o, long long k, long long s, long long d, long long p, long long n) {
    long long c = 0;
    for (long long t = 0; t < k; ++t) { long long i = o * s + t * d - p; if (i >= 0 && i < n) ++c; }
    return c;
}
// the output index whose window's tap `k` reads input index `i` along one
// dim, or -1 (a tap before it, between strides, or past the output)
__device__ __forceinline__ long long gt_out_of(long long i, long long k, long long s, long long d, long long p, long long no) {
    long long t = i + p - k * d;
    if (t < 0 || t % s != 0 || t / s >= no) return -1;
    return t / s;
}
// an output element's position: channel `ci`, then `ox`, `oy`, `oz`, `b`
#define GT_SPLIT_OUT(i, ch) long long ci = (i) % (ch), r_ = (i) / (ch); long long ox = r_ % g.ow; r_ /= g.ow; long long oy = r_ % g.oh; r_ /= g.oh; long long oz = r_ % g.od, b = r_ / g.od;
// an input element's position: channel `ci`, then `ix`, `iy`, `iz`, `b`
#define GT_SPLIT_IN(i) long long ci = (i) % g.c, r_ = (i) / g.c; long long ix = r_ % g.w; r_ /= g.w; long long iy = r_ % g.h; r_ /= g.h; long long iz = r_ % g.d, b = r_ / g.d;
// the flat index of input element (b, iz, iy, ix, ci), and of output element (b, oz, oy, ox) times `ch` plus `j`
#define GT_X_AT(iz, iy, ix, ci) ((((b * g.d + (iz)) * g.h + (iy)) * g.w + (ix)) * g.c + (ci))
#define GT_Y_ROW(oz, oy, ox) (((b * g.od + (oz)) * g.oh + (oy)) * g.ow + (ox))
"#;

/// `cols[row, ((kz·kh + ky)·kw + kx)·c + ci] = x[b, oz·sd + kz·dd − pf,
/// oy·sh + ky·dh − pt, ox·sw + kx·dw − pl, ci]` (0 in the padding), `row
/// = ((b·od + oz)·oh + oy)·ow + ox`; `x` read through its view.
pub fn im2col_source(t: &str) -> String {
    format!(
        "{COMMON}{GEO}\ntypedef {t} T;\n\
         extern \"C\" __global__ void k(Lay lx, const T* x, T* cols, Geo g, long long total) {{\n\
           long long kdim = g.kd * g.kh * g.kw * g.c;\n\
           GT_LOOP(i, total) {{\n\
             long long row = i / kdim, col = i - row * kdim;\n\
             long long ci = col % g.c, tap = col / g.c;\n\
             long long kx = tap % g.kw; tap /= g.kw;\n\
             long long ky = tap % g.kh, kz = tap / g.kh;\n\
             long long ox = row % g.ow; row /= g.ow;\n\
             long long oy = row % g.oh; row /= g.oh;\n\
             long long oz = row % g.od, b = row / g.od;\n\
             long long iz = oz * g.sd + kz * g.dd - g.pf, iy = oy * g.sh + ky * g.dh - g.pt, ix = ox * g.sw + kx * g.dw - g.pl;\n\
             T v = (T)0;\n\
             if (iz >= 0 && iz < g.d && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) v = x[gt_at(lx, GT_X_AT(iz, iy, ix, ci))];\n\
             cols[i] = v;\n\
           }}\n\
         }}\n"
    )
}

/// The adjoint of im2col: `dx[b, iz, iy, ix, ci]` is the sum of the
/// columns of every window tap that reads it (contiguous `cols`, of the
/// `compute` type of `t`: `f32` columns for the half types, summed in
/// `f32` and rounded once).
pub fn col2im_source(t: &str) -> String {
    let c = compute(t);
    format!(
        "{COMMON}{GEO}\ntypedef {t} T; typedef {c} C;\n\
         extern \"C\" __global__ void k(const C* cols, T* dx, Geo g, long long total) {{\n\
           long long kdim = g.kd * g.kh * g.kw * g.c;\n\
           GT_LOOP(i, total) {{\n\
             GT_SPLIT_IN(i)\n\
             C acc = 0;\n\
             for (long long kz = 0; kz < g.kd; ++kz) {{\n\
               long long oz = gt_out_of(iz, kz, g.sd, g.dd, g.pf, g.od);\n\
               if (oz < 0) continue;\n\
               for (long long ky = 0; ky < g.kh; ++ky) {{\n\
                 long long oy = gt_out_of(iy, ky, g.sh, g.dh, g.pt, g.oh);\n\
                 if (oy < 0) continue;\n\
                 for (long long kx = 0; kx < g.kw; ++kx) {{\n\
                   long long ox = gt_out_of(ix, kx, g.sw, g.dw, g.pl, g.ow);\n\
                   if (ox < 0) continue;\n\
                   acc += cols[GT_Y_ROW(oz, oy, ox) * kdim + ((kz * g.kh + ky) * g.kw + kx) * g.c + ci];\n\
                 }}\n\
               }}\n\
             }}\n\
             dx[i] = (T)acc;\n\
           }}\n\
         }}\n"
    )
}

/// The loops over a window's taps inside the input, for output element
/// `(b, oz, oy, ox)`: `body` sees `iz`, `iy`, `ix`.
fn taps(body: &str) -> String {
    format!(
        "for (long long kz = 0; kz < g.kd; ++kz) {{\n\
           long long iz = oz * g.sd + kz * g.dd - g.pf;\n\
           if (iz < 0 || iz >= g.d) continue;\n\
           for (long long ky = 0; ky < g.kh; ++ky) {{\n\
             long long iy = oy * g.sh + ky * g.dh - g.pt;\n\
             if (iy < 0 || iy >= g.h) continue;\n\
             for (long long kx = 0; kx < g.kw; ++kx) {{\n\
               long long ix = ox * g.sw + kx * g.dw - g.pl;\n\
               if (ix < 0 || ix >= g.w) continue;\n\
               {body}\n\
             }}\n\
           }}\n\
         }}\n"
    )
}

/// Max pool: each output the maximum of its window's valid inputs (the
/// first on ties; NaN skipped unless the window holds nothing else; −inf
/// and position 0 for a window of padding only) and its flat position in
/// `x`, as `kernels::cpu::pooling::max_pool` (and `conv3d::max_pool3d`).
pub fn max_pool_source(t: &str) -> String {
    let c = compute(t);
    let body = taps(
        "long long off = GT_X_AT(iz, iy, ix, ci);\n\
         C v = (C)x[gt_at(lx, off)];\n\
         if (first || v > m || (gt_nan(m) && !gt_nan(v))) { m = v; a = off; first = false; }",
    );
    format!(
        "{COMMON}{GEO}\ntypedef {t} T; typedef {c} C;\n{LIMITS}\n\
         extern \"C\" __global__ void k(Lay lx, const T* x, T* y, long long* arg, Geo g, long long total) {{\n\
           GT_LOOP(i, total) {{\n\
             GT_SPLIT_OUT(i, g.c)\n\
             bool first = true; C m = 0; long long a = 0;\n\
             {body}\
             if (first) {{ m = gt_lowest<C>(); a = 0; }}\n\
             y[i] = (T)m; arg[i] = a;\n\
           }}\n\
         }}\n"
    )
}

/// Average pool: each output the mean of its window's valid inputs.
pub fn avg_pool_source(t: &str) -> String {
    let c = compute(t);
    let body = taps("s += (C)x[gt_at(lx, GT_X_AT(iz, iy, ix, ci))];");
    format!(
        "{COMMON}{GEO}\ntypedef {t} T; typedef {c} C;\n\
         extern \"C\" __global__ void k(Lay lx, const T* x, T* y, Geo g, long long total) {{\n\
           GT_LOOP(i, total) {{\n\
             GT_SPLIT_OUT(i, g.c)\n\
             C s = 0;\n\
             {body}\
             long long cnt = gt_count_valid(oz, g.kd, g.sd, g.dd, g.pf, g.d) * gt_count_valid(oy, g.kh, g.sh, g.dh, g.pt, g.h)\n\
                 * gt_count_valid(ox, g.kw, g.sw, g.dw, g.pl, g.w);\n\
             y[i] = (T)(s * ((C)1 / (C)(cnt > 0 ? cnt : 1)));\n\
           }}\n\
         }}\n"
    )
}

/// The adjoint of the average pool: `dx[b, iz, iy, ix, ci]` gathers each
/// window that reads it, its cotangent over the window's valid count.
pub fn avg_pool_grad_source(t: &str) -> String {
    let c = compute(t);
    format!(
        "{COMMON}{GEO}\ntypedef {t} T; typedef {c} C;\n\
         extern \"C\" __global__ void k(Lay ld, const T* dy, T* dx, Geo g, long long total) {{\n\
           GT_LOOP(i, total) {{\n\
             GT_SPLIT_IN(i)\n\
             C acc = 0;\n\
             for (long long kz = 0; kz < g.kd; ++kz) {{\n\
               long long oz = gt_out_of(iz, kz, g.sd, g.dd, g.pf, g.od);\n\
               if (oz < 0) continue;\n\
               long long cd = gt_count_valid(oz, g.kd, g.sd, g.dd, g.pf, g.d);\n\
               for (long long ky = 0; ky < g.kh; ++ky) {{\n\
                 long long oy = gt_out_of(iy, ky, g.sh, g.dh, g.pt, g.oh);\n\
                 if (oy < 0) continue;\n\
                 long long ch = cd * gt_count_valid(oy, g.kh, g.sh, g.dh, g.pt, g.h);\n\
                 for (long long kx = 0; kx < g.kw; ++kx) {{\n\
                   long long ox = gt_out_of(ix, kx, g.sw, g.dw, g.pl, g.ow);\n\
                   if (ox < 0) continue;\n\
                   long long cnt = ch * gt_count_valid(ox, g.kw, g.sw, g.dw, g.pl, g.w);\n\
                   C inv = (C)1 / (C)(cnt > 0 ? cnt : 1);\n\
                   acc += (C)dy[gt_at(ld, GT_Y_ROW(oz, oy, ox) * g.c + ci)] * inv;\n\
                 }}\n\
               }}\n\
             }}\n\
             dx[i] = (T)acc;\n\
           }}\n\
         }}\n"
    )
}

/// Depthwise convolution: `y[b, oy, ox, ci·m + j]` sums `x[b, iy, ix, ci]
/// · f[ky, kx, ci, j]` over the window's valid taps (`g.o` is the
/// multiplier `m`), one thread per output, in the `compute` type.
pub fn depthwise_source(t: &str) -> String {
    let c = compute(t);
    format!(
        "{COMMON}{GEO}\ntypedef {t} T; typedef {c} C;\n\
         extern \"C\" __global__ void k(Lay lx, const T* x, Lay lf, const T* f, T* y, Geo g, long long total) {{\n\
           long long cm = g.c * g.o;\n\
           GT_LOOP(i, total) {{\n\
             long long oc = i % cm, r = i / cm;\n\
             long long ci = oc / g.o;\n\
             long long ox = r % g.ow; r /= g.ow;\n\
             long long oy = r % g.oh, b = r / g.oh;\n\
             C acc = 0;\n\
             for (long long ky = 0; ky < g.kh; ++ky) {{\n\
               long long iy = oy * g.sh + ky * g.dh - g.pt;\n\
               if (iy < 0 || iy >= g.h) continue;\n\
               for (long long kx = 0; kx < g.kw; ++kx) {{\n\
                 long long ix = ox * g.sw + kx * g.dw - g.pl;\n\
                 if (ix < 0 || ix >= g.w) continue;\n\
                 acc += (C)x[gt_at(lx, ((b * g.h + iy) * g.w + ix) * g.c + ci)] * (C)f[gt_at(lf, (ky * g.kw + kx) * cm + oc)];\n\
               }}\n\
             }}\n\
             y[i] = (T)acc;\n\
           }}\n\
         }}\n"
    )
}

/// The depthwise convolution's input gradient: `dx[b, iy, ix, ci]`
/// gathers, from each output whose window reads it, `dy · f` over the
/// channel's `m` filters (no atomics).
pub fn depthwise_input_source(t: &str) -> String {
    let c = compute(t);
    format!(
        "{COMMON}{GEO}\ntypedef {t} T; typedef {c} C;\n\
         extern \"C\" __global__ void k(Lay ld, const T* dy, Lay lf, const T* f, T* dx, Geo g, long long total) {{\n\
           long long cm = g.c * g.o;\n\
           GT_LOOP(i, total) {{\n\
             long long ci = i % g.c, r = i / g.c;\n\
             long long ix = r % g.w; r /= g.w;\n\
             long long iy = r % g.h, b = r / g.h;\n\
             C acc = 0;\n\
             for (long long ky = 0; ky < g.kh; ++ky) {{\n\
               long long ty = iy + g.pt - ky * g.dh;\n\
               if (ty < 0) break;\n\
               if (ty % g.sh != 0) continue;\n\
               long long oy = ty / g.sh;\n\
               if (oy >= g.oh) continue;\n\
               for (long long kx = 0; kx < g.kw; ++kx) {{\n\
                 long long tx = ix + g.pl - kx * g.dw;\n\
                 if (tx < 0) break;\n\
                 if (tx % g.sw != 0) continue;\n\
                 long long ox = tx / g.sw;\n\
                 if (ox >= g.ow) continue;\n\
                 for (long long j = 0; j < g.o; ++j) {{\n\
                   long long oc = ci * g.o + j;\n\
                   acc += (C)dy[gt_at(ld, ((b * g.oh + oy) * g.ow + ox) * cm + oc)] * (C)f[gt_at(lf, (ky * g.kw + kx) * cm + oc)];\n\
                 }}\n\
               }}\n\
             }}\n\
             dx[i] = (T)acc;\n\
           }}\n\
         }}\n"
    )
}

/// The depthwise convolution's filter gradient: a block per filter
/// element `(ky, kx, ci, j)`, its threads summing `x · dy` over the
/// batch's outputs (strided), then the block's partial sums as a tree.
pub fn depthwise_filter_source(t: &str) -> String {
    let c = compute(t);
    format!(
        "{COMMON}{GEO}\ntypedef {t} T; typedef {c} C;\n\
         extern \"C\" __global__ void k(Lay lx, const T* x, Lay ld, const T* dy, T* df, Geo g, long long total) {{\n\
           __shared__ C sh[256];\n\
           long long cm = g.c * g.o, outs = g.n * g.oh * g.ow;\n\
           for (long long e = blockIdx.x; e < total; e += gridDim.x) {{\n\
             long long oc = e % cm, tap = e / cm;\n\
             long long ci = oc / g.o, kx = tap % g.kw, ky = tap / g.kw;\n\
             C acc = 0;\n\
             for (long long q = threadIdx.x; q < outs; q += blockDim.x) {{\n\
               long long ox = q % g.ow, r = q / g.ow;\n\
               long long oy = r % g.oh, b = r / g.oh;\n\
               long long iy = oy * g.sh + ky * g.dh - g.pt, ix = ox * g.sw + kx * g.dw - g.pl;\n\
               if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;\n\
               acc += (C)x[gt_at(lx, ((b * g.h + iy) * g.w + ix) * g.c + ci)] * (C)dy[gt_at(ld, q * cm + oc)];\n\
             }}\n\
             sh[threadIdx.x] = acc; __syncthreads();\n\
             for (int s = blockDim.x / 2; s > 0; s >>= 1) {{\n\
               if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];\n\
               __syncthreads();\n\
             }}\n\
             if (threadIdx.x == 0) df[e] = (T)sh[0];\n\
             __syncthreads();\n\
           }}\n\
         }}\n"
    )
}

/// Every source of this file (for the NVRTC check).
pub fn all_sources() -> Vec<String> {
    let mut v = vec![];
    for t in ["float", "double", "gt_f16", "gt_bf16"] {
        v.push(im2col_source(t));
        v.push(col2im_source(t));
        v.push(max_pool_source(t));
        v.push(avg_pool_source(t));
        v.push(avg_pool_grad_source(t));
        v.push(depthwise_source(t));
        v.push(depthwise_input_source(t));
        v.push(depthwise_filter_source(t));
    }
    v
}

/// A view of a fresh contiguous tensor as another shape of its elements.
pub(super) fn view_as(t: &Tensor, shape: &[usize]) -> Tensor {
    Tensor::device_view(
        Arc::clone(t.device_buffer().expect("on a GPU")),
        Layout::contiguous(shape),
    )
}

/// The error of an op given no float type (`f32`, `f64`, `f16`, `bf16`).
pub(super) fn floats(op: &'static str, x: &Tensor) -> Result<()> {
    if x.dtype().is_float() {
        Ok(())
    } else {
        Err(crate::kernels::gpu::no_kernel(op, x.device(), x.dtype()))
    }
}

/// The im2col matrix `[n·od·oh·ow, kd·kh·kw·c]` of `x`.
pub(super) fn im2col(op: &'static str, x: &Tensor, g: &Win) -> Result<Tensor> {
    let gpu = mem_of(x).1;
    let t = ct(op, x)?;
    let (cols, pc) = alloc(op, gpu, &[g.rows(), g.kdim()], x.dtype())?;
    let lx = lay(op, gpu, x, x.shape())?;
    let (px, geo, total) = (ptr_of(x), g.geo, cols.numel() as i64);
    gpu.launch(
        op,
        &format!("im2col|{t}"),
        &|| im2col_source(t),
        grid_for(total as usize, BLOCK),
        BLOCK,
        &mut args![lx, px, pc, geo, total],
    )?;
    Ok(cols)
}

/// The dense convolution (2-D or 3-D) of `x` `[n,(d,)h,w,c]` and `f`
/// `[(kd,)kh,kw,c,o]` (of one float type, on one GPU; the caller checked
/// the shapes and that nothing is empty): `(y [n,(od,)oh,ow,o], cols)`,
/// `cols` the im2col matrix for the filter gradient.
pub(crate) fn conv(op: &'static str, x: &Tensor, f: &Tensor, g: &Win) -> Result<(Tensor, Tensor)> {
    let gpu = mem_of(x).1;
    gpu.bind_for(op)?;
    floats(op, x)?;
    if g.groups > 1 {
        return super::conv_groups::conv(op, x, f, g);
    }
    let cols = im2col(op, x, g)?;
    let o = g.geo.o as usize;
    let fm = reshaped(op, f, &[g.kdim(), o])?;
    let y = matmul(op, &cols, &fm, false, false, &[g.rows(), o])?;
    Ok((view_as(&y, &g.y_shape(g.geo.o)), cols))
}

/// The input gradient of [`conv`]: `dy` `[n,(od,)oh,ow,o]`, `f` ->
/// `[n,(d,)h,w,c]`. Half operands multiply as `f32` copies, so that
/// col2im sums `f32` columns and rounds each element once.
pub(crate) fn conv_backprop_input(op: &'static str, dy: &Tensor, f: &Tensor, g: &Win) -> Result<Tensor> {
    let gpu = mem_of(dy).1;
    gpu.bind_for(op)?;
    floats(op, dy)?;
    let (dy_c, f_c) = if dy.dtype().is_half() {
        (cast(op, dy, DType::F32)?, cast(op, f, DType::F32)?)
    } else {
        (dy.clone(), f.clone())
    };
    let dcols = if g.groups > 1 {
        super::conv_groups::input_cols(op, &dy_c, &f_c, g)?
    } else {
        let o = g.geo.o as usize;
        let dym = reshaped(op, &dy_c, &[g.rows(), o])?;
        let fm = reshaped(op, &f_c, &[g.kdim(), o])?;
        matmul(op, &dym, &fm, false, true, &[g.rows(), g.kdim()])?
    };
    col2im(op, &dcols, dy.dtype(), g)
}

/// The input gradient of `dtype` folded back from its im2col matrix
/// `dcols` (contiguous, of the `compute` type of `dtype`).
fn col2im(op: &'static str, dcols: &Tensor, dtype: DType, g: &Win) -> Result<Tensor> {
    let gpu = mem_of(dcols).1;
    let t = super::source::ctype(dtype).ok_or_else(|| crate::kernels::gpu::no_kernel(op, dcols.device(), dtype))?;
    let (dx, pdx) = alloc(op, gpu, &g.x_shape(), dtype)?;
    let (pc, geo, total) = (ptr_of(dcols), g.geo, dx.numel() as i64);
    gpu.launch(
        op,
        &format!("col2im|{t}"),
        &|| col2im_source(t),
        grid_for(total as usize, BLOCK),
        BLOCK,
        &mut args![pc, pdx, geo, total],
    )?;
    Ok(dx)
}

/// The filter gradient of [`conv`]: `x` `[n,(d,)h,w,c]` (or its im2col
/// matrix `cols`, when the forward pass kept it) and `dy`
/// `[n,(od,)oh,ow,o]` -> `[(kd,)kh,kw,c,o]`.
pub(crate) fn conv_backprop_filter(
    op: &'static str,
    x: &Tensor,
    cols: Option<&Tensor>,
    dy: &Tensor,
    g: &Win,
) -> Result<Tensor> {
    let gpu = mem_of(dy).1;
    gpu.bind_for(op)?;
    floats(op, dy)?;
    if g.groups > 1 {
        return super::conv_groups::backprop_filter(op, x, cols, dy, g);
    }
    let cols = match cols {
        Some(c) => c.clone(),
        None => im2col(op, x, g)?,
    };
    let o = g.geo.o as usize;
    let dym = reshaped(op, dy, &[g.rows(), o])?;
    let df = matmul(op, &cols, &dym, true, false, &[g.kdim(), o])?;
    Ok(view_as(&df, &g.f_shape()))
}

/// Max pooling (2-D or 3-D): `(y [n,(od,)oh,ow,c], positions)`, the flat
/// position in `x` of each window's maximum (`i64`, `[numel of y]`).
pub(crate) fn max_pool(op: &'static str, x: &Tensor, g: &Win) -> Result<(Tensor, Tensor)> {
    let gpu = mem_of(x).1;
    gpu.bind_for(op)?;
    floats(op, x)?;
    let t = ct(op, x)?;
    let (y, py) = alloc(op, gpu, &g.y_shape(g.geo.c), x.dtype())?;
    let (arg, pa) = alloc(op, gpu, &[y.numel()], DType::I64)?;
    if y.numel() == 0 {
        return Ok((y, arg));
    }
    let lx = lay(op, gpu, x, x.shape())?;
    let (px, geo, total) = (ptr_of(x), g.geo, y.numel() as i64);
    gpu.launch(
        op,
        &format!("max_pool|{t}"),
        &|| max_pool_source(t),
        grid_for(total as usize, BLOCK),
        BLOCK,
        &mut args![lx, px, py, pa, geo, total],
    )?;
    Ok((y, arg))
}

/// Average pooling, 2-D or 3-D (`grad` false: `x` is the input, the
/// result `[n,(od,)oh,ow,c]`) or its adjoint (`grad` true: `x` is the
/// pooled cotangent, the result `[n,(d,)h,w,c]`).
pub(crate) fn avg_pool(op: &'static str, x: &Tensor, g: &Win, grad: bool) -> Result<Tensor> {
    let gpu = mem_of(x).1;
    gpu.bind_for(op)?;
    floats(op, x)?;
    let t = ct(op, x)?;
    let shape = if grad { g.x_shape() } else { g.y_shape(g.geo.c) };
    let (y, py) = alloc(op, gpu, &shape, x.dtype())?;
    if y.numel() == 0 {
        return Ok(y);
    }
    let lx = lay(op, gpu, x, x.shape())?;
    let (px, geo, total) = (ptr_of(x), g.geo, y.numel() as i64);
    let (key, src): (String, fn(&str) -> String) = if grad {
        (format!("avg_pool_grad|{t}"), avg_pool_grad_source)
    } else {
        (format!("avg_pool|{t}"), avg_pool_source)
    };
    gpu.launch(
        op,
        &key,
        &|| src(t),
        grid_for(total as usize, BLOCK),
        BLOCK,
        &mut args![lx, px, py, geo, total],
    )?;
    Ok(y)
}

/// Max pooling's adjoint: `dy` added at the flat positions `arg` of
/// zeros of `xshape` (half cotangents added as `f32` copies, the sums
/// rounded once).
pub(crate) fn max_pool_grad(op: &'static str, dy: &Tensor, arg: &Tensor, xshape: &[usize]) -> Result<Tensor> {
    if dy.dtype().is_half() {
        let wide = max_pool_grad(op, &cast(op, dy, DType::F32)?, arg, xshape)?;
        return cast(op, &wide, dy.dtype());
    }
    let nx: usize = xshape.iter().product();
    let flat = reshaped(op, dy, &[dy.numel()])?;
    let out = index::scatter_add(op, &flat, arg, 1, arg.numel(), 1, nx, &[nx], None)?;
    Ok(view_as(&out, xshape))
}

/// The depthwise convolution (`which`: 0 the forward pass, 1 the input
/// gradient, 2 the filter gradient) of `a` and `b` (`x` and `f`, `dy` and
/// `f`, `x` and `dy`), as `kernels::cpu::conv::depthwise` and its adjoints.
pub(crate) fn depthwise(op: &'static str, which: u8, a: &Tensor, b: &Tensor, g: &Geom) -> Result<Tensor> {
    let gpu = mem_of(a).1;
    gpu.bind_for(op)?;
    floats(op, a)?;
    let t = ct(op, a)?;
    let shape = match which {
        0 => [g.n, g.oh, g.ow, g.c * g.o],
        1 => [g.n, g.h, g.w, g.c],
        _ => [g.kh, g.kw, g.c, g.o],
    };
    let (y, py) = alloc(op, gpu, &shape, a.dtype())?;
    if y.numel() == 0 {
        return Ok(y);
    }
    let (la, lb) = (lay(op, gpu, a, a.shape())?, lay(op, gpu, b, b.shape())?);
    let (pa, pb, geo, total) = (ptr_of(a), ptr_of(b), Geo::of(g), y.numel() as i64);
    let (key, src, grid): (String, fn(&str) -> String, u32) = match which {
        0 => (
            format!("depthwise|{t}"),
            depthwise_source,
            grid_for(total as usize, BLOCK),
        ),
        1 => (
            format!("depthwise_input|{t}"),
            depthwise_input_source,
            grid_for(total as usize, BLOCK),
        ),
        _ => (
            format!("depthwise_filter|{t}"),
            depthwise_filter_source,
            (total as usize).min(65_535 * 8) as u32,
        ),
    };
    gpu.launch(
        op,
        &key,
        &|| src(t),
        grid,
        BLOCK,
        &mut args![la, pa, lb, pb, py, geo, total],
    )?;
    Ok(y)
}
