//! Image resizes on the GPU (bilinear and nearest-neighbour, NHWC, with
//! TensorFlow's `align_corners` and `half_pixel_centers`) and their
//! transposes, as `kernels::cpu::resize` computes them.
//!
//! Every thread works out the input coordinates it needs from its output
//! index with the CPU's arithmetic (the scale from the host in the CPU's
//! type, each product rounded on its own, never contracted into a
//! multiply-add), so no table is uploaded and a traced step replays
//! unchanged. The forward passes run one thread per output element. The
//! transposes run one thread per input element and gather: the outputs
//! that read an input index along an axis are a contiguous run (the
//! coordinates never decrease with the output index), found by binary
//! search, and walked in the order the CPU's scatter adds them, so the sums
//! are the CPU's (in `f32` for the half types, rounded once, as the CPU's
//! `f32` copies), with no atomics.

use super::launch::{alloc, ct, lay, mem_of, ptr_of, BLOCK};
use super::runtime::grid_for;
use super::source::{compute, COMMON};
use crate::error::Result;
use crate::kernels::cpu::resize::{scale, Coords, Dims};
use crate::tensor::{DType, Tensor};

/// The sizes and coordinate rules of one resize as kernels read them
/// (`struct Rz` in [`PRELUDE`]): batch, input and output height and width,
/// channels, the two flags, and the scales from output to input (in the
/// CPU's type: `f32` for nearest-neighbour and the `f32`-computed types,
/// `f64` for `f64`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Rz {
    n: i64,
    ih: i64,
    iw: i64,
    oh: i64,
    ow: i64,
    c: i64,
    align: i32,
    half: i32,
    sy: f64,
    sx: f64,
}

impl Rz {
    /// The resize `d` with flags `co`, its scales in `f64` (`wide`) or `f32`.
    pub fn of(d: &Dims, co: Coords, wide: bool) -> Rz {
        let s = |i: usize, o: usize| {
            if wide {
                scale::<f64>(i, o, co.align_corners)
            } else {
                f64::from(scale::<f32>(i, o, co.align_corners))
            }
        };
        let i = |v: usize| v as i64;
        Rz {
            n: i(d.n),
            ih: i(d.ih),
            iw: i(d.iw),
            oh: i(d.oh),
            ow: i(d.ow),
            c: i(d.c),
            align: i32::from(co.align_corners),
            half: i32::from(co.half_pixel_centers),
            sy: s(d.ih, d.oh),
            sx: s(d.iw, d.ow),
        }
    }

    /// A C initializer (for the host checks).
    pub fn c_init(&self) -> String {
        format!(
            "{{{}LL, {}LL, {}LL, {}LL, {}LL, {}LL, {}, {}, {:?}, {:?}}}",
            self.n, self.ih, self.iw, self.oh, self.ow, self.c, self.align, self.half, self.sy, self.sx
        )
    }
}

/// The struct and the coordinate arithmetic of every resize kernel.
pub const PRELUDE: &str = r#"
struct Rz { long long n, ih, iw, oh, ow, c; int align, half; double sy, sx; };
// a product rounded on its own, never contracted into a multiply-add
#ifdef __CUDACC__
__device__ __forceinline__ float gt_rz_mul(float x, float y) { return __fmul_rn(x, y); }
__device__ __forceinline__ double gt_rz_mul(double x, double y) { return __dmul_rn(x, y); }
#else
static inline float gt_rz_mul(float x, float y) { return x * y; }
static inline double gt_rz_mul(double x, double y) { return x * y; }
#endif
__device__ __forceinline__ long long gt_rz_clamp(double v, long long n) { return (long long)fmin(fmax(v, 0.0), (double)(n - 1)); }
// bilinear: output index i of an axis of n inputs reads lo and hi, weights 1 - w and w
template <typename C> __device__ __forceinline__ void gt_lerp(long long i, C s, int half, long long n, long long* lo, long long* hi, C* w) {
    C ci = (C)i;
    C x = half ? gt_rz_mul(ci + (C)0.5, s) - (C)0.5 : gt_rz_mul(ci, s);
    C fl = (C)floor((double)x);
    *lo = gt_rz_clamp((double)fl, n);
    *hi = gt_rz_clamp(ceil((double)x), n);
    *w = x - fl;
}
// nearest: the input index output index i of an axis of n inputs copies (in f32)
__device__ __forceinline__ long long gt_near(long long i, float s, int half, int align, long long n) {
    float fi = (float)i;
    float x = half ? gt_rz_mul(fi + 0.5f, s) : gt_rz_mul(fi, s);
    return gt_rz_clamp(align ? (double)roundf(x) : floor((double)x), n);
}
// the first output index in [0, m) whose lerp has hi >= r (hi_ge) or lo > r: m if none
template <typename C> __device__ long long gt_first_lerp(long long m, C s, int half, long long n, long long r, int hi_ge) {
    long long a = 0, b = m;
    while (a < b) {
        long long mid = a + (b - a) / 2, lo, hi; C w;
        gt_lerp<C>(mid, s, half, n, &lo, &hi, &w);
        if (hi_ge ? hi >= r : lo > r) b = mid; else a = mid + 1;
    }
    return a;
}
// the first output index in [0, m) that copies an input index > r (strict) or >= r
__device__ long long gt_first_near(long long m, float s, int half, int align, long long n, long long r, int strict) {
    long long a = 0, b = m;
    while (a < b) {
        long long mid = a + (b - a) / 2, v = gt_near(mid, s, half, align, n);
        if (strict ? v > r : v >= r) b = mid; else a = mid + 1;
    }
    return a;
}
"#;

/// Bilinear resize: each output `t + (b − t)·wy` with `t = tl + (tr −
/// tl)·wx` (and `b` alike), `x` read through its view.
pub fn bilinear_source(t: &str) -> String {
    format!(
        "{COMMON}{PRELUDE}\ntypedef {t} T; typedef {c} C;\n\
         extern \"C\" __global__ void k(Lay lx, const T* x, T* y, Rz z, long long total) {{\n\
           GT_LOOP(e, total) {{\n\
             long long ch = e % z.c, q = e / z.c;\n\
             long long j = q % z.ow; q /= z.ow;\n\
             long long i = q % z.oh, b = q / z.oh;\n\
             long long ylo, yhi, xlo, xhi; C wy, wx;\n\
             gt_lerp<C>(i, (C)z.sy, z.half, z.ih, &ylo, &yhi, &wy);\n\
             gt_lerp<C>(j, (C)z.sx, z.half, z.iw, &xlo, &xhi, &wx);\n\
             long long top = b * z.ih + ylo, bot = b * z.ih + yhi;\n\
             C tl = (C)x[gt_at(lx, (top * z.iw + xlo) * z.c + ch)], tr = (C)x[gt_at(lx, (top * z.iw + xhi) * z.c + ch)];\n\
             C bl = (C)x[gt_at(lx, (bot * z.iw + xlo) * z.c + ch)], br = (C)x[gt_at(lx, (bot * z.iw + xhi) * z.c + ch)];\n\
             C tv = tl + gt_rz_mul(tr - tl, wx);\n\
             C bv = bl + gt_rz_mul(br - bl, wx);\n\
             y[e] = (T)(tv + gt_rz_mul(bv - tv, wy));\n\
           }}\n\
         }}\n",
        c = compute(t),
    )
}

/// The transpose of the bilinear resize: `dx[b, r, col, ch]` gathers
/// `dy · weight` from every output that reads it, in the CPU's order
/// (outputs row by row, then the four corners in turn).
pub fn bilinear_grad_source(t: &str) -> String {
    format!(
        "{COMMON}{PRELUDE}\ntypedef {t} T; typedef {c} C;\n\
         extern \"C\" __global__ void k(Lay ld, const T* dy, T* dx, Rz z, long long total) {{\n\
           C sy = (C)z.sy, sx = (C)z.sx;\n\
           GT_LOOP(e, total) {{\n\
             long long ch = e % z.c, q = e / z.c;\n\
             long long col = q % z.iw; q /= z.iw;\n\
             long long r = q % z.ih, b = q / z.ih;\n\
             long long i0 = gt_first_lerp<C>(z.oh, sy, z.half, z.ih, r, 1), i1 = gt_first_lerp<C>(z.oh, sy, z.half, z.ih, r, 0);\n\
             long long j0 = gt_first_lerp<C>(z.ow, sx, z.half, z.iw, col, 1), j1 = gt_first_lerp<C>(z.ow, sx, z.half, z.iw, col, 0);\n\
             C acc = 0;\n\
             for (long long i = i0; i < i1; ++i) {{\n\
               long long ylo, yhi; C wy;\n\
               gt_lerp<C>(i, sy, z.half, z.ih, &ylo, &yhi, &wy);\n\
               int ym = (ylo == r ? 1 : 0) | (yhi == r ? 2 : 0);\n\
               for (long long j = j0; j < j1; ++j) {{\n\
                 long long xlo, xhi; C wx;\n\
                 gt_lerp<C>(j, sx, z.half, z.iw, &xlo, &xhi, &wx);\n\
                 int xm = (xlo == col ? 1 : 0) | (xhi == col ? 2 : 0);\n\
                 if (ym == 0 || xm == 0) continue;\n\
                 C v = (C)dy[gt_at(ld, ((b * z.oh + i) * z.ow + j) * z.c + ch)];\n\
                 C oy = (C)1 - wy, ox = (C)1 - wx;\n\
                 if ((ym & 1) && (xm & 1)) acc = acc + gt_rz_mul(v, gt_rz_mul(oy, ox));\n\
                 if ((ym & 1) && (xm & 2)) acc = acc + gt_rz_mul(v, gt_rz_mul(oy, wx));\n\
                 if ((ym & 2) && (xm & 1)) acc = acc + gt_rz_mul(v, gt_rz_mul(wy, ox));\n\
                 if ((ym & 2) && (xm & 2)) acc = acc + gt_rz_mul(v, gt_rz_mul(wy, wx));\n\
               }}\n\
             }}\n\
             dx[e] = (T)acc;\n\
           }}\n\
         }}\n",
        c = compute(t),
    )
}

/// Nearest-neighbour resize: each output copies its input pixel (any
/// element type).
pub fn nearest_source(t: &str) -> String {
    format!(
        "{COMMON}{PRELUDE}\ntypedef {t} T;\n\
         extern \"C\" __global__ void k(Lay lx, const T* x, T* y, Rz z, long long total) {{\n\
           float sy = (float)z.sy, sx = (float)z.sx;\n\
           GT_LOOP(e, total) {{\n\
             long long ch = e % z.c, q = e / z.c;\n\
             long long j = q % z.ow; q /= z.ow;\n\
             long long i = q % z.oh, b = q / z.oh;\n\
             long long r = gt_near(i, sy, z.half, z.align, z.ih), col = gt_near(j, sx, z.half, z.align, z.iw);\n\
             y[e] = x[gt_at(lx, ((b * z.ih + r) * z.iw + col) * z.c + ch)];\n\
           }}\n\
         }}\n"
    )
}

/// The transpose of the nearest-neighbour resize: `dx[b, r, col, ch]`
/// sums the outputs copied from it, row by row as the CPU adds them.
pub fn nearest_grad_source(t: &str) -> String {
    format!(
        "{COMMON}{PRELUDE}\ntypedef {t} T; typedef {c} C;\n\
         extern \"C\" __global__ void k(Lay ld, const T* dy, T* dx, Rz z, long long total) {{\n\
           float sy = (float)z.sy, sx = (float)z.sx;\n\
           GT_LOOP(e, total) {{\n\
             long long ch = e % z.c, q = e / z.c;\n\
             long long col = q % z.iw; q /= z.iw;\n\
             long long r = q % z.ih, b = q / z.ih;\n\
             long long i0 = gt_first_near(z.oh, sy, z.half, z.align, z.ih, r, 0), i1 = gt_first_near(z.oh, sy, z.half, z.align, z.ih, r, 1);\n\
             long long j0 = gt_first_near(z.ow, sx, z.half, z.align, z.iw, col, 0), j1 = gt_first_near(z.ow, sx, z.half, z.align, z.iw, col, 1);\n\
             C acc = 0;\n\
             for (long long i = i0; i < i1; ++i)\n\
               for (long long j = j0; j < j1; ++j) acc = acc + (C)dy[gt_at(ld, ((b * z.oh + i) * z.ow + j) * z.c + ch)];\n\
             dx[e] = (T)acc;\n\
           }}\n\
         }}\n",
        c = compute(t),
    )
}

/// Every source of this file (for the NVRTC check).
pub fn all_sources() -> Vec<String> {
    let mut v = vec![];
    for t in ["float", "double", "gt_f16", "gt_bf16"] {
        v.push(bilinear_source(t));
        v.push(bilinear_grad_source(t));
        v.push(nearest_grad_source(t));
    }
    for t in ["float", "double", "int", "long long", "gt_f16", "gt_bf16"] {
        v.push(nearest_source(t));
    }
    v
}

/// Which resize [`resize`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Which {
    /// Bilinear, `x` the images.
    Bilinear,
    /// The transpose of bilinear, `x` the resized cotangent.
    BilinearGrad,
    /// Nearest-neighbour, `x` the images (any dtype with a kernel).
    Nearest,
    /// The transpose of nearest-neighbour, `x` the resized cotangent.
    NearestGrad,
}

/// The resize `which` of `x` on its GPU, of sizes `d` (`[n, ih, iw, c]` to
/// `[n, oh, ow, c]`) and flags `co`, as the CPU's kernel (the caller
/// checked the sizes and the dtype).
pub(crate) fn resize(op: &'static str, x: &Tensor, which: Which, d: Dims, co: Coords) -> Result<Tensor> {
    let gpu = mem_of(x).1;
    gpu.bind_for(op)?;
    let t = ct(op, x)?;
    let forward = matches!(which, Which::Bilinear | Which::Nearest);
    let shape = if forward {
        [d.n, d.oh, d.ow, d.c]
    } else {
        [d.n, d.ih, d.iw, d.c]
    };
    let (y, py) = alloc(op, gpu, &shape, x.dtype())?;
    if y.numel() == 0 {
        return Ok(y);
    }
    let wide = x.dtype() == DType::F64 && matches!(which, Which::Bilinear | Which::BilinearGrad);
    let (lx, px, z, total) = (
        lay(op, gpu, x, x.shape())?,
        ptr_of(x),
        Rz::of(&d, co, wide),
        y.numel() as i64,
    );
    let (name, src): (&str, fn(&str) -> String) = match which {
        Which::Bilinear => ("bilinear", bilinear_source),
        Which::BilinearGrad => ("bilinear_grad", bilinear_grad_source),
        Which::Nearest => ("nearest", nearest_source),
        Which::NearestGrad => ("nearest_grad", nearest_grad_source),
    };
    gpu.launch(
        op,
        &format!("resize_{name}|{t}"),
        &|| src(t),
        grid_for(total as usize, BLOCK),
        BLOCK,
        &mut args![lx, px, py, z, total],
    )?;
    Ok(y)
}
