//! The CUDA C of the GPU kernels, as sources built per dtype and op (each
//! distinct source is compiled once per process, at its first use).
//!
//! Every kernel reads its inputs through a [`Lay`]: the view's shape,
//! strides and offset, so that a transposed, sliced or broadcast input is
//! read in place, as the CPU kernels read views; outputs are contiguous.
//! Kernels loop grid-stride, so any grid covers any size.

use crate::tensor::{DType, Layout};

/// The most dimensions a view read by a GPU kernel may have.
pub(crate) const MAX_RANK: usize = 8;

/// A view as kernels read it (`struct Lay` in `COMMON`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Lay {
    pub shape: [i64; MAX_RANK],
    pub stride: [i64; MAX_RANK],
    pub offset: i64,
    pub rank: i32,
    pub contig: i32,
}

impl Lay {
    /// The view `l` read over `shape` (its own, or one it broadcasts to:
    /// missing leading dims and stretched ones read with stride 0).
    /// `None` past [`MAX_RANK`] dims.
    pub fn of(l: &Layout, shape: &[usize]) -> Option<Lay> {
        let rank = shape.len();
        if rank > MAX_RANK {
            return None;
        }
        let strides = crate::tensor::layout::broadcast_strides(&l.shape, &l.strides, shape);
        let mut lay = Lay {
            shape: [1; MAX_RANK],
            stride: [0; MAX_RANK],
            offset: l.offset as i64,
            rank: rank as i32,
            contig: 0,
        };
        for d in 0..rank {
            lay.shape[d] = shape[d] as i64;
            lay.stride[d] = strides[d] as i64;
        }
        let same = l.shape.as_slice() == shape;
        lay.contig = i32::from(same && l.is_contiguous());
        Some(lay)
    }
}

impl Lay {
    /// A C initializer of this view (for the host checks).
    pub fn c_init(&self) -> String {
        let list = |v: &[i64]| v.iter().map(|x| format!("{x}LL")).collect::<Vec<_>>().join(", ");
        format!(
            "{{{{{}}}, {{{}}}, {}LL, {}, {}}}",
            list(&self.shape),
            list(&self.stride),
            self.offset,
            self.rank,
            self.contig
        )
    }
}

/// The C type of a dtype's elements, where GPU kernels handle it (the
/// half types as the storage structs of [`COMMON`]).
pub(crate) fn ctype(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::F16 => "gt_f16",
        DType::BF16 => "gt_bf16",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::Bool => "bool",
        _ => return None,
    })
}

/// The C type a kernel computes in for elements stored as `c`: `float`
/// for the half types (each function of `f32` rounded once to the half
/// type, as the CPU's half kernels compute), else `c` itself.
pub(crate) fn compute(c: &str) -> &str {
    match c {
        "gt_f16" | "gt_bf16" => "float",
        c => c,
    }
}

/// What every kernel source starts with: the view type and its walk, and
/// the half types as storage (`gt_f16`, `gt_bf16`: 16 bits, read as
/// `float` and written from any number through `float`, rounding to
/// nearest even as the `half` crate does; NaN stays NaN; device code only:
/// the host checks compile the other kernels as C++).
pub(crate) const COMMON: &str = r#"
#if defined(__CUDACC_RTC__) || defined(__CUDA_ARCH__)
struct gt_f16 {
    unsigned short b;
    __device__ __forceinline__ gt_f16() {}
    template <typename U> __device__ __forceinline__ explicit gt_f16(U u) {
        float f = (float)u;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(f));
    }
    __device__ __forceinline__ operator float() const {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
        return f;
    }
};
struct gt_bf16 {
    unsigned short b;
    __device__ __forceinline__ gt_bf16() {}
    template <typename U> __device__ __forceinline__ explicit gt_bf16(U u) {
        unsigned int x = __float_as_uint((float)u);
        if ((x & 0x7fffffffu) > 0x7f800000u) b = (unsigned short)((x >> 16) | 0x40u);
        else b = (unsigned short)(((x & 0x8000u) && (x & 0x17fffu)) ? (x >> 16) + 1u : (x >> 16));
    }
    __device__ __forceinline__ operator float() const { return __uint_as_float(((unsigned int)b) << 16); }
};
#endif
struct Lay { long long shape[8]; long long stride[8]; long long offset; int rank; int contig; };
__device__ __forceinline__ long long gt_at(const Lay& l, long long i) {
    if (l.contig) return l.offset + i;
    long long at = l.offset;
    for (int d = l.rank - 1; d >= 0; --d) {
        long long s = l.shape[d];
        long long q = i / s;
        at += (i - q * s) * l.stride[d];
        i = q;
    }
    return at;
}
#define GT_LOOP(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)
template <typename T> __device__ __forceinline__ bool gt_nan(T v) { return v != v; }
// a deferred check's failure (`Gpu::check_word`): the first one writes its
// site's code, the bad index and its bound; code 0 checks nothing
__device__ __forceinline__ void gt_index_error(unsigned long long* err, unsigned long long code, long long s, long long dim) {
    if (code != 0ULL && atomicCAS(err, 0ULL, code) == 0ULL) { err[1] = (unsigned long long)s; err[2] = (unsigned long long)dim; }
}
"#;

/// `out[i] = (To)(f(x[at(i)]))` where `f` is the C expression `expr` of `v`
/// (`v` and the result in the `compute` types of `from` and `to`).
pub fn map(prelude: &str, from: &str, to: &str, expr: &str) -> String {
    let (cx, cy) = (compute(from), compute(to));
    format!(
        "{COMMON}{prelude}\ntypedef {from} SX; typedef {cx} TX; typedef {to} SY; typedef {cy} TY;\n\
         extern \"C\" __global__ void k(Lay lx, const SX* x, SY* y, long long n, double c0, double c1) {{\n\
         GT_LOOP(i, n) {{ TX v = (TX)x[gt_at(lx, i)]; y[i] = (SY)(TY)({expr}); }}\n}}\n"
    )
}

/// `out[i] = f(a[at(i)], b[at(i)])` where `f` is the C expression `expr`
/// of `a` and `b`.
pub fn zip(prelude: &str, from: &str, to: &str, expr: &str) -> String {
    let (cx, cy) = (compute(from), compute(to));
    format!(
        "{COMMON}{prelude}\ntypedef {from} SX; typedef {cx} TX; typedef {to} SY; typedef {cy} TY;\n\
         extern \"C\" __global__ void k(Lay la, const SX* pa, Lay lb, const SX* pb, SY* y, long long n) {{\n\
         GT_LOOP(i, n) {{ TX a = (TX)pa[gt_at(la, i)]; TX b = (TX)pb[gt_at(lb, i)]; y[i] = (SY)(TY)({expr}); }}\n}}\n"
    )
}

pub use super::{
    INT_ABS, INT_ADD, INT_ADD_C, INT_DIV, INT_DIV_C, INT_MAX, INT_MIN, INT_MUL, INT_MUL_C, INT_NEG, INT_RELU, INT_SIGN,
    INT_SQUARE, INT_SUB,
};

/// `out[i] = c[at(i)] ? a[at(i)] : b[at(i)]`.
pub(crate) fn select(t: &str) -> String {
    format!(
        "{COMMON}\ntypedef {t} T;\n\
         extern \"C\" __global__ void k(Lay lc, const bool* c, Lay la, const T* pa, Lay lb, const T* pb, T* y, long long n) {{\n\
         GT_LOOP(i, n) {{ y[i] = c[gt_at(lc, i)] ? pa[gt_at(la, i)] : pb[gt_at(lb, i)]; }}\n}}\n"
    )
}

/// `y[i] = v` (the value as a double, converted).
pub(crate) fn fill(t: &str) -> String {
    format!(
        "{COMMON}\ntypedef {t} T;\n\
         extern \"C\" __global__ void k(T* y, long long n, double v) {{ GT_LOOP(i, n) {{ y[i] = (T)v; }} }}\n"
    )
}

/// The C type a reduction of `t` elements accumulates in: `double` for
/// `f32` sums (one rounding at the end), `float` for the half types.
pub(crate) fn reduce_acc<'a>(t: &'a str, kind: &str) -> &'a str {
    match (t, kind) {
        ("float", "sum") => "double",
        _ => compute(t),
    }
}

/// How a reduction combines (`a` the running value, `b` the next): sums
/// and products through [`WRAP`]'s functions (integers wrap, as on the CPU).
pub(crate) fn combine(kind: &str) -> (&'static str, &'static str) {
    match kind {
        "sum" => ("0", "gt_wadd(a, b)"),
        "prod" => ("1", "gt_wmul(a, b)"),
        // NaN wins, as on the CPU
        "max" => ("gt_lowest<T>()", "(gt_nan(a) || a >= b) ? a : b"),
        _ => ("gt_highest<T>()", "(gt_nan(a) || a <= b) ? a : b"),
    }
}

/// Rows of `r` contiguous elements of type `t` reduced to one each, of
/// type `out`: a block per row. `ACC` accumulates (`double` for `f32`
/// sums: one rounding at the end).
pub fn reduce_rows(t: &str, out: &str, acc: &str, kind: &str) -> String {
    let (init, comb) = combine(kind);
    format!(
        "{COMMON}\ntypedef {t} T; typedef {out} TO; typedef {acc} ACC;\n{LIMITS}{WRAP}\n\
         __device__ __forceinline__ ACC gt_comb(ACC a, ACC b) {{ return {comb}; }}\n\
         extern \"C\" __global__ void k(const T* x, TO* y, long long rows, long long r) {{\n\
           __shared__ ACC sh[256];\n\
           for (long long row = blockIdx.x; row < rows; row += gridDim.x) {{\n\
             ACC acc = (ACC)({init_t});\n\
             for (long long j = threadIdx.x; j < r; j += blockDim.x) acc = gt_comb(acc, (ACC)x[row * r + j]);\n\
             sh[threadIdx.x] = acc; __syncthreads();\n\
             for (int s = blockDim.x / 2; s > 0; s >>= 1) {{\n\
               if (threadIdx.x < s) sh[threadIdx.x] = gt_comb(sh[threadIdx.x], sh[threadIdx.x + s]);\n\
               __syncthreads();\n\
             }}\n\
             if (threadIdx.x == 0) y[row] = (TO)sh[0];\n\
             __syncthreads();\n\
           }}\n\
         }}\n",
        init_t = init.replace("<T>", "<ACC>"),
    )
}

/// The index of the largest (`largest`) or smallest element of each row
/// of `r` contiguous elements of type `t`, as `long long`, by the CPU's
/// rules: the first index on ties, NaN skipped, 0 for a row of NaN only.
/// A block per row: each thread keeps the best of its elements (met in
/// index order), then the block combines them in pairs ([`ARG_WINS`]).
pub fn arg_rows(t: &str, largest: bool) -> String {
    format!(
        "{COMMON}\ntypedef {t} T; typedef {c} C;\n#define GT_BETTER(a, b) ((a) {cmp} (b))\n{ARG_WINS}\n\
         extern \"C\" __global__ void k(const T* x, long long* y, long long rows, long long r) {{\n\
           __shared__ C sv[256]; __shared__ long long si[256];\n\
           for (long long row = blockIdx.x; row < rows; row += gridDim.x) {{\n\
             C bv = (C)0; long long bi = -1;\n\
             for (long long j = threadIdx.x; j < r; j += blockDim.x) {{\n\
               C v = (C)x[row * r + j];\n\
               if (gt_arg_wins(v, j, bv, bi)) {{ bv = v; bi = j; }}\n\
             }}\n\
             sv[threadIdx.x] = bv; si[threadIdx.x] = bi; __syncthreads();\n\
             for (int s = blockDim.x / 2; s > 0; s >>= 1) {{\n\
               if (threadIdx.x < s && gt_arg_wins(sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x])) {{\n\
                 sv[threadIdx.x] = sv[threadIdx.x + s]; si[threadIdx.x] = si[threadIdx.x + s];\n\
               }}\n\
               __syncthreads();\n\
             }}\n\
             if (threadIdx.x == 0) y[row] = si[0] < 0 ? 0 : si[0];\n\
             __syncthreads();\n\
           }}\n\
         }}\n",
        c = compute(t),
        cmp = if largest { ">" } else { "<" },
    )
}

/// Whether candidate `(v, i)` beats the best so far `(bv, bi)` of an
/// arg-extremum (`GT_BETTER` the strict order): a candidate with no index
/// (`i < 0`) or a NaN value never does; anything beats no best
/// (`bi < 0`); else the better value, or the smaller index of an equal one.
pub const ARG_WINS: &str =
    "template <typename C> __device__ __forceinline__ bool gt_arg_wins(C v, long long i, C bv, long long bi) {\n\
  if (i < 0 || v != v) return false;\n\
  return bi < 0 || GT_BETTER(v, bv) || (v == bv && i < bi);\n\
}";

/// The first pass of a reduction of few long rows: row `row`'s elements
/// split over `parts` blocks, block `(row, b)` reducing every
/// `parts`-th stretch of 256 into `partial[row * parts + b]` (type `ACC`);
/// [`reduce_rows`] then reduces the partials.
pub(crate) fn reduce_split(t: &str, acc: &str, kind: &str) -> String {
    let (init, comb) = combine(kind);
    format!(
        "{COMMON}\ntypedef {t} T; typedef {acc} ACC;\n{LIMITS}{WRAP}\n\
         __device__ __forceinline__ ACC gt_comb(ACC a, ACC b) {{ return {comb}; }}\n\
         extern \"C\" __global__ void k(const T* x, ACC* partial, long long rows, long long r, long long parts) {{\n\
           __shared__ ACC sh[256];\n\
           for (long long id = blockIdx.x; id < rows * parts; id += gridDim.x) {{\n\
             long long row = id / parts, b = id % parts;\n\
             ACC acc = (ACC)({init_t});\n\
             for (long long j = b * blockDim.x + threadIdx.x; j < r; j += parts * blockDim.x) acc = gt_comb(acc, (ACC)x[row * r + j]);\n\
             sh[threadIdx.x] = acc; __syncthreads();\n\
             for (int s = blockDim.x / 2; s > 0; s >>= 1) {{\n\
               if (threadIdx.x < s) sh[threadIdx.x] = gt_comb(sh[threadIdx.x], sh[threadIdx.x + s]);\n\
               __syncthreads();\n\
             }}\n\
             if (threadIdx.x == 0) partial[id] = sh[0];\n\
             __syncthreads();\n\
           }}\n\
         }}\n",
        init_t = init.replace("<T>", "<ACC>"),
    )
}

/// `a + b` and `a · b`, integers wrapping as the CPU's `add_wrap` and
/// `mul_wrap` (computed unsigned, where overflow is defined: C leaves a
/// signed overflow undefined).
pub(crate) const WRAP: &str = r#"
template <typename T> __device__ __forceinline__ T gt_wadd(T a, T b) { return a + b; }
template <typename T> __device__ __forceinline__ T gt_wmul(T a, T b) { return a * b; }
template <> __device__ __forceinline__ int gt_wadd<int>(int a, int b) { return (int)((unsigned int)a + (unsigned int)b); }
template <> __device__ __forceinline__ int gt_wmul<int>(int a, int b) { return (int)((unsigned int)a * (unsigned int)b); }
template <> __device__ __forceinline__ long long gt_wadd<long long>(long long a, long long b) { return (long long)((unsigned long long)a + (unsigned long long)b); }
template <> __device__ __forceinline__ long long gt_wmul<long long>(long long a, long long b) { return (long long)((unsigned long long)a * (unsigned long long)b); }
"#;

/// Extreme values by type, for max and min.
pub(crate) const LIMITS: &str = r#"
template <typename T> __device__ __forceinline__ T gt_lowest();
template <typename T> __device__ __forceinline__ T gt_highest();
template <> __device__ __forceinline__ float gt_lowest<float>() { return -__int_as_float(0x7f800000); }
template <> __device__ __forceinline__ float gt_highest<float>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double gt_lowest<double>() { return -__longlong_as_double(0x7ff0000000000000LL); }
template <> __device__ __forceinline__ double gt_highest<double>() { return __longlong_as_double(0x7ff0000000000000LL); }
template <> __device__ __forceinline__ int gt_lowest<int>() { return -2147483647 - 1; }
template <> __device__ __forceinline__ int gt_highest<int>() { return 2147483647; }
template <> __device__ __forceinline__ long long gt_lowest<long long>() { return -9223372036854775807LL - 1; }
template <> __device__ __forceinline__ long long gt_highest<long long>() { return 9223372036854775807LL; }
template <> __device__ __forceinline__ bool gt_lowest<bool>() { return false; }
template <> __device__ __forceinline__ bool gt_highest<bool>() { return true; }
"#;

/// The start of a kernel over rows of `r` logits, a block per row: the
/// loop over rows, and in it the row's max `m` (NaN wins; 0 for a row of
/// `-inf`) and the sum `s` of `exp(x - m)` in `double`.
fn row_max_and_sum(exp: &str) -> String {
    format!(
        "__shared__ T shm[256]; __shared__ double shs[256];\n\
           for (long long row = blockIdx.x; row < rows; row += gridDim.x) {{\n\
             T m = gt_lowest<T>();\n\
             for (long long j = threadIdx.x; j < r; j += blockDim.x) {{ T v = x[row * r + j]; m = (gt_nan(m) || m >= v) ? m : v; }}\n\
             shm[threadIdx.x] = m; __syncthreads();\n\
             for (int s = blockDim.x / 2; s > 0; s >>= 1) {{\n\
               if (threadIdx.x < s) {{ T a = shm[threadIdx.x], b = shm[threadIdx.x + s]; shm[threadIdx.x] = (gt_nan(a) || a >= b) ? a : b; }}\n\
               __syncthreads();\n\
             }}\n\
             m = shm[0];\n\
             if (m == gt_lowest<T>()) m = 0;\n\
             double acc = 0;\n\
             for (long long j = threadIdx.x; j < r; j += blockDim.x) acc += (double){exp}(x[row * r + j] - m);\n\
             shs[threadIdx.x] = acc; __syncthreads();\n\
             for (int s = blockDim.x / 2; s > 0; s >>= 1) {{\n\
               if (threadIdx.x < s) shs[threadIdx.x] += shs[threadIdx.x + s];\n\
               __syncthreads();\n\
             }}\n\
             double s = shs[0];\n"
    )
}

/// Softmax (or log-softmax) of rows of `r` contiguous elements: a block
/// per row (the row's max, then the sum of exponentials, in `double` for
/// `f32`'s sum as for the reductions).
pub(crate) fn softmax_rows(t: &str, log: bool) -> String {
    let (exp, lg) = if t == "float" { ("expf", "logf") } else { ("exp", "log") };
    let write = if log {
        format!("y[row * r + j] = (T)((double)(x[row * r + j] - m) - {lg}(s));")
    } else {
        format!("y[row * r + j] = (T)((double){exp}(x[row * r + j] - m) / s);")
    };
    format!(
        "{COMMON}\ntypedef {t} T;\n{LIMITS}\n\
         extern \"C\" __global__ void k(const T* x, T* y, long long rows, long long r) {{\n\
{rows}for (long long j = threadIdx.x; j < r; j += blockDim.x) {{ {write} }}\n\
             __syncthreads();\n\
           }}\n\
         }}\n",
        rows = row_max_and_sum(exp)
    )
}

/// Sparse softmax cross-entropy of rows of `r` logits against integer
/// labels `lab` (type `L`): `loss[row] = logsumexp(x) - x[label]` and
/// the softmax `p[row, j]` (written to `grad`: the rule's `p - onehot`
/// is ops). A label outside `[0, r)` gives NaN for its row (the op checks
/// the labels on the host first, so it never reaches here).
pub(crate) fn sparse_xent_rows(t: &str, label: &str) -> String {
    let (exp, lg) = if t == "float" { ("expf", "logf") } else { ("exp", "log") };
    format!(
        "{COMMON}\ntypedef {t} T; typedef {label} L;\n{LIMITS}\n\
         extern \"C\" __global__ void k(const T* x, const L* lab, T* loss, T* grad, long long rows, long long r,\n\
             unsigned long long* err, unsigned long long code) {{\n\
{rows}long long l = (long long)lab[row];\n\
             bool ok = l >= 0 && l < r;\n\
             if (!ok && threadIdx.x == 0) gt_index_error(err, code, l, r);\n\
             double nan = __longlong_as_double(0x7ff8000000000000LL);\n\
             for (long long j = threadIdx.x; j < r; j += blockDim.x) {{\n\
               grad[row * r + j] = (T)(ok ? (double){exp}(x[row * r + j] - m) / s : nan);\n\
             }}\n\
             if (threadIdx.x == 0) loss[row] = (T)(ok ? {lg}(s) - (double)(x[row * r + l] - m) : nan);\n\
             __syncthreads();\n\
           }}\n\
         }}\n",
        rows = row_max_and_sum(exp)
    )
}

/// One optimizer step for `K` slots: `w`, `s[K]` and `g` read per
/// element, the weight decay (`w -= w * wd * lr`, as Keras), then `body`
/// (an `ElemRule`'s CUDA form: statements over `w`, `s`, `g` and the
/// parameters `p[0..6]`), the new values written to fresh buffers.
pub fn optimizer(t: &str, k: usize, body: &str) -> String {
    format!(
        "{COMMON}\ntypedef {t} T;\n#define K {k}\n\
         extern \"C\" __global__ void k(const T* wi, T* wo, const T* s0i, T* s0o, const T* s1i, T* s1o, const T* s2i, T* s2o,\n\
             const T* gi, long long n, double p0, double p1, double p2, double p3, double p4, double p5, double wd, double lr) {{\n\
           const double p[6] = {{p0, p1, p2, p3, p4, p5}};\n\
           const T* si[3] = {{s0i, s1i, s2i}}; T* so[3] = {{s0o, s1o, s2o}};\n\
           GT_LOOP(i, n) {{\n\
             T w = wi[i], g = gi[i]; T s[K > 0 ? K : 1];\n\
             for (int k = 0; k < K; ++k) s[k] = si[k][i];\n\
             if (wd != 0) w = w - w * (T)wd * (T)lr;\n\
             {{ {body} }}\n\
             wo[i] = w;\n\
             for (int k = 0; k < K; ++k) so[k][i] = s[k];\n\
           }}\n\
         }}\n"
    )
}

/// Every fixed kernel source (for the NVRTC check in CI: the generated
/// elementwise ones are checked by `cuda_expr`'s tests).
pub fn all_fixed() -> Vec<String> {
    let mut out = Vec::new();
    for t in ["float", "double", "int", "long long", "bool", "gt_f16", "gt_bf16"] {
        out.push(fill(t));
        out.push(select(t));
        out.push(map("", t, t, "v"));
        for to in ["float", "double", "long long", "bool", "gt_f16", "gt_bf16"] {
            out.push(map("", t, to, "v"));
        }
        out.push(zip("", t, t, "a + b"));
        if t != "bool" {
            out.push(arg_rows(t, true));
            out.push(arg_rows(t, false));
        }
        if t == "int" || t == "long long" {
            for e in [INT_ADD, INT_SUB, INT_MUL, INT_MAX, INT_MIN, INT_DIV] {
                out.push(zip("", t, t, e));
            }
            for e in [
                INT_NEG, INT_ABS, INT_SQUARE, INT_SIGN, INT_RELU, INT_ADD_C, INT_MUL_C, INT_DIV_C,
            ] {
                out.push(map("", t, t, e));
            }
        }
        for kind in ["sum", "prod", "max", "min"] {
            let acc = reduce_acc(t, kind);
            out.push(reduce_rows(t, t, acc, kind));
            out.push(reduce_split(t, acc, kind));
            out.push(reduce_rows(acc, t, acc, kind));
        }
    }
    out.extend(super::conv::all_sources());
    out.extend(super::index::all_sources());
    out.extend(super::scan::all_sources());
    out.extend(super::resize::all_sources());
    for t in ["float", "double"] {
        out.push(softmax_rows(t, false));
        out.push(softmax_rows(t, true));
        for l in ["int", "long long"] {
            out.push(sparse_xent_rows(t, l));
        }
        out.push(optimizer(t, 0, super::GRADIENT_DESCENT));
    }
    out
}
