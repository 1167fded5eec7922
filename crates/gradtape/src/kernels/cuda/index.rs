//! Index kernels on the GPU: gather along an axis (embedding lookups
//! included), scatter-add (its adjoint, segment sums, max pooling's
//! gradient), one-hot, and the copies into a region of a new tensor that
//! concatenation, padding and the strided-slice gradient are made of.
//!
//! Every kernel runs one thread per element it reads or writes (indices in
//! `long long`). An index out of range is an error, as on the CPU, but
//! found by the kernel: it skips the index (a gather reads 0, a scatter
//! drops it) and records it in its GPU's check word, which the next read
//! of a value reports (`Gpu::check_word`: the host never waits mid-step to
//! look at indices). Segment sums, which drop negative ids by design, do
//! not check. Scatter-add accumulates with
//! atomics, so the order of a repeated index's float sums may differ
//! between runs.

use super::launch::{alloc, ct, filled, lay, mem_of, ptr_of, BLOCK};
use super::runtime::grid_for;
use super::source::{compute, ctype, COMMON, WRAP};
use crate::error::Result;
use crate::tensor::{DType, Layout, Tensor};

/// `y[o, j, r] = p[o, idx[j], r]` (0 for an index outside `[0, dim)`, which
/// is reported through the deferred check when `code` is not 0), `p` read
/// through its view as `[outer, dim, inner]`.
pub fn gather_source(t: &str, it: &str) -> String {
    format!(
        "{COMMON}\ntypedef {t} T; typedef {it} I;\n\
         extern \"C\" __global__ void k(Lay lp, const T* p, const I* idx, T* y, long long nidx, long long dim, long long inner, long long total,\n\
             unsigned long long* err, unsigned long long code) {{\n\
           GT_LOOP(i, total) {{\n\
             long long r = i % inner, q = i / inner;\n\
             long long j = q % nidx, o = q / nidx;\n\
             long long s = (long long)idx[j];\n\
             bool ok = s >= 0 && s < dim;\n\
             if (!ok) gt_index_error(err, code, s, dim);\n\
             y[i] = ok ? p[gt_at(lp, (o * dim + s) * inner + r)] : (T)0;\n\
           }}\n\
         }}\n"
    )
}

/// Atomic `*p += v` by type.
const ATOMIC_ADD: &str = r#"
__device__ __forceinline__ void gt_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void gt_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void gt_add(int* p, int v) { atomicAdd(p, v); }
__device__ __forceinline__ void gt_add(long long* p, long long v) { atomicAdd((unsigned long long*)p, (unsigned long long)v); }
#if defined(__CUDACC_RTC__) || defined(__CUDA_ARCH__)
// the half types: a compare-and-swap of the aligned 32-bit word holding
// the element, each add rounded to the type (as the host's half adds)
template <typename H> __device__ __forceinline__ void gt_add_half(H* p, H v) {
    unsigned int* word = (unsigned int*)((unsigned long long)p & ~3ULL);
    unsigned int shift = ((unsigned long long)p & 2ULL) ? 16u : 0u;
    unsigned int old = *word, seen;
    do {
        seen = old;
        H cur; cur.b = (unsigned short)((seen >> shift) & 0xffffu);
        H sum((float)cur + (float)v);
        unsigned int next = (seen & ~(0xffffu << shift)) | ((unsigned int)sum.b << shift);
        old = atomicCAS(word, seen, next);
    } while (old != seen);
}
__device__ __forceinline__ void gt_add(gt_f16* p, gt_f16 v) { gt_add_half(p, v); }
__device__ __forceinline__ void gt_add(gt_bf16* p, gt_bf16 v) { gt_add_half(p, v); }
#endif
"#;

/// `y[o, idx[j], r] += u[o, j, r]` into a zeroed `y` `[outer, dim, inner]`
/// (indices outside `[0, dim)`, negative segment ids among them, dropped),
/// `u` read through its view.
pub fn scatter_add_source(t: &str, it: &str) -> String {
    format!(
        "{COMMON}{ATOMIC_ADD}\ntypedef {t} T; typedef {it} I;\n\
         extern \"C\" __global__ void k(Lay lu, const T* u, const I* idx, T* y, long long nidx, long long dim, long long inner, long long total,\n\
             unsigned long long* err, unsigned long long code) {{\n\
           GT_LOOP(i, total) {{\n\
             long long r = i % inner, q = i / inner;\n\
             long long j = q % nidx, o = q / nidx;\n\
             long long s = (long long)idx[j];\n\
             if (s >= 0 && s < dim) gt_add(&y[(o * dim + s) * inner + r], u[gt_at(lu, i)]);\n\
             else gt_index_error(err, code, s, dim);\n\
           }}\n\
         }}\n"
    )
}

/// `y[at_y(i)] = x[at_x(i)]`: `x` copied into the region of `y` that the
/// view `ly` (of `x`'s shape) covers.
pub fn copy_source(t: &str) -> String {
    format!(
        "{COMMON}\ntypedef {t} T;\n\
         extern \"C\" __global__ void k(Lay lx, const T* x, Lay ly, T* y, long long total) {{\n\
           GT_LOOP(i, total) {{ y[gt_at(ly, i)] = x[gt_at(lx, i)]; }}\n\
         }}\n"
    )
}

/// `y[o, d, r] = idx[o, r] == d ? on : off`, `y` `[outer, depth, inner]`.
pub fn one_hot_source(t: &str, it: &str) -> String {
    format!(
        "{COMMON}\ntypedef {t} T; typedef {it} I;\n\
         extern \"C\" __global__ void k(const I* idx, T* y, long long depth, long long inner, double on, double off, long long total) {{\n\
           GT_LOOP(i, total) {{\n\
             long long r = i % inner, q = i / inner;\n\
             long long d = q % depth, o = q / depth;\n\
             y[i] = (T)((long long)idx[o * inner + r] == d ? on : off);\n\
           }}\n\
         }}\n"
    )
}

/// `y[i]`: the flat offset (in slices of the trailing dims) of the
/// `K`-tuple `idx[i, ..]` into the leading dims `dims.shape[..K]`, each
/// coordinate checked (the first one out of range reported through the
/// deferred check, and `-1` written, which the gather or scatter that
/// reads it skips).
pub fn nd_offsets_source(it: &str) -> String {
    format!(
        "{COMMON}\ntypedef {it} I;\n\
         extern \"C\" __global__ void k(const I* idx, long long* y, long long count, long long kk, Lay dims,\n\
             unsigned long long* err, unsigned long long code) {{\n\
           GT_LOOP(i, count) {{\n\
             long long o = 0; bool ok = true;\n\
             for (long long d = 0; d < kk; ++d) {{\n\
               long long v = (long long)idx[i * kk + d], n = dims.shape[d];\n\
               if (ok && (v < 0 || v >= n)) {{ gt_index_error(err, code, v, n); ok = false; }}\n\
               o = o * n + v;\n\
             }}\n\
             y[i] = ok ? o : -1;\n\
           }}\n\
         }}\n"
    )
}

/// A segment product, maximum or minimum (`kind`: `prod`, `max`, `min`)
/// of the rows of `d` (`[rows, inner]`, read through its view): output
/// element `(s, r)` folds, in row order, the rows `rows[starts[s]..
/// starts[s + 1]]` of segment `s` into `init`, each step rounded to `T`
/// (as the CPU folds in the element type; products wrap for integers; a
/// NaN wins a maximum or minimum), and an empty segment is `empty`
/// (`init` and `empty` C literals of `T`'s compute type).
pub fn segment_source(t: &str, kind: &str, init: &str, empty: &str) -> String {
    let comb = match kind {
        "prod" => "gt_wmul(a, x)",
        "max" => "(x > a || x != x) ? x : a",
        _ => "(x < a || x != x) ? x : a",
    };
    format!(
        "{COMMON}{WRAP}\ntypedef {t} T; typedef {c} C;\n\
         extern \"C\" __global__ void k(Lay ld, const T* d, const long long* starts, const long long* rows, T* y, long long num, long long inner) {{\n\
           GT_LOOP(e, num * inner) {{\n\
             long long s = e / inner, r = e - s * inner;\n\
             long long a0 = starts[s], a1 = starts[s + 1];\n\
             if (a0 == a1) {{ y[e] = (T)(C)({empty}); continue; }}\n\
             T acc = (T)(C)({init});\n\
             for (long long p = a0; p < a1; ++p) {{\n\
               C a = (C)acc, x = (C)d[gt_at(ld, rows[p] * inner + r)];\n\
               acc = (T)({comb});\n\
             }}\n\
             y[e] = acc;\n\
           }}\n\
         }}\n",
        c = compute(t),
    )
}

/// The C literals of a segment reduction's start and empty values for
/// dtype `dtype` (`kind`: `prod`, `max`, `min`; `sorted` max and min
/// give 0 for an empty segment, the unsorted ones the dtype's lowest or
/// highest finite value, as TensorFlow).
pub fn segment_values(dtype: DType, kind: &str, sorted: bool) -> Option<(String, String)> {
    let (lo, hi) = match dtype {
        DType::F32 => (
            format!("{:?}", f64::from(f32::MIN)),
            format!("{:?}", f64::from(f32::MAX)),
        ),
        DType::F64 => (format!("{:?}", f64::MIN), format!("{:?}", f64::MAX)),
        DType::F16 => (
            format!("{:?}", half::f16::MIN.to_f64()),
            format!("{:?}", half::f16::MAX.to_f64()),
        ),
        DType::BF16 => (
            format!("{:?}", half::bf16::MIN.to_f64()),
            format!("{:?}", half::bf16::MAX.to_f64()),
        ),
        DType::I32 => ("(-2147483647 - 1)".into(), "2147483647".into()),
        DType::I64 => ("(-9223372036854775807LL - 1)".into(), "9223372036854775807LL".into()),
        _ => return None,
    };
    // (the sorted max / min of floats start from -inf / +inf, as the CPU's)
    let inf = "__longlong_as_double(0x7ff0000000000000LL)";
    let float = matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
    let init = match kind {
        "prod" => "1".to_string(),
        "max" if sorted && float => format!("(-{inf})"),
        "max" => lo,
        _ if sorted && float => inf.to_string(),
        _ => hi,
    };
    let empty = if sorted && kind != "prod" {
        "0".to_string()
    } else {
        init.clone()
    };
    Some((init, empty))
}

/// `y[at[2p] · inner + r] = u[at[2p + 1] · inner + r]`: the slices of
/// `u` (read through its view) written over a copy of the original, each
/// to its own slice (`at` pairs, one per distinct destination).
pub fn scatter_update_source(t: &str) -> String {
    format!(
        "{COMMON}\ntypedef {t} T;\n\
         extern \"C\" __global__ void k(Lay lu, const T* u, const long long* at, T* y, long long count, long long inner) {{\n\
           GT_LOOP(e, count * inner) {{\n\
             long long p = e / inner, r = e - p * inner;\n\
             y[at[2 * p] * inner + r] = u[gt_at(lu, at[2 * p + 1] * inner + r)];\n\
           }}\n\
         }}\n"
    )
}

/// Every source of this file (for the NVRTC check).
pub fn all_sources() -> Vec<String> {
    let mut v = vec![nd_offsets_source("int"), nd_offsets_source("long long")];
    for t in ["float", "double", "int", "long long", "bool", "gt_f16", "gt_bf16"] {
        v.push(scatter_update_source(t));
    }
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64] {
        let t = super::source::ctype(dtype).expect("a kernel type");
        for kind in ["prod", "max", "min"] {
            for sorted in [false, true] {
                let (init, empty) = segment_values(dtype, kind, sorted).expect("a numeric dtype");
                v.push(segment_source(t, kind, &init, &empty));
            }
        }
    }
    for t in ["float", "double", "int", "long long", "bool", "gt_f16", "gt_bf16"] {
        v.push(copy_source(t));
        for it in ["int", "long long"] {
            v.push(gather_source(t, it));
            v.push(one_hot_source(t, it));
            if t != "bool" {
                v.push(scatter_add_source(t, it));
            }
        }
    }
    v
}

/// The C type of integer indices (or the error of an op with none for them).
fn index_type(op: &'static str, idx: &Tensor) -> Result<&'static str> {
    match idx.dtype() {
        DType::I32 => Ok("int"),
        DType::I64 => Ok("long long"),
        d => Err(crate::error::Error::UnsupportedDType {
            op,
            dtype: d,
            expected: "i32 or i64 indices",
        }),
    }
}

/// `params` gathered along `axis` at `idx`, shaped `out_shape`; an index
/// out of range is the error of the next read (`Gpu::check_word`, the
/// CPU's `IndexOutOfRange` over `params`' shape).
pub(crate) fn gather(
    op: &'static str,
    params: &Tensor,
    idx: &Tensor,
    axis: usize,
    out_shape: &[usize],
) -> Result<Tensor> {
    let g = mem_of(params).1;
    g.bind_for(op)?;
    let (t, it) = (ct(op, params)?, index_type(op, idx)?);
    let ps = params.shape();
    let (dim, inner) = (ps[axis] as i64, ps[axis + 1..].iter().product::<usize>() as i64);
    let (y, py) = alloc(op, g, out_shape, params.dtype())?;
    let total = y.numel() as i64;
    if total == 0 {
        return Ok(y);
    }
    let idx = super::launch::contiguous(op, idx)?;
    let lp = lay(op, g, params, ps)?;
    let (pp, pi, nidx) = (ptr_of(params), ptr_of(&idx) + elem_offset(&idx), idx.numel() as i64);
    let (err, code) = g.check_word(op, ps)?;
    g.launch(
        op,
        &format!("gather|{t}|{it}"),
        &|| gather_source(t, it),
        grid_for(total as usize, BLOCK),
        BLOCK,
        &mut args![lp, pp, pi, py, nidx, dim, inner, total, err, code],
    )?;
    Ok(y)
}

/// The flat offsets (`i64`, `[count]`) of the `K`-tuples of `idx`
/// (`[.., K]`) into the leading dims of `shape`, checked against them
/// (`shape` is what the error names).
fn nd_offsets(op: &'static str, idx: &Tensor, shape: &[usize], k: usize) -> Result<Tensor> {
    let g = mem_of(idx).1;
    g.bind_for(op)?;
    let it = index_type(op, idx)?;
    let count = idx.numel().checked_div(k).unwrap_or(0);
    let (y, py) = alloc(op, g, &[count], DType::I64)?;
    if count == 0 || k == 0 {
        return if k == 0 {
            filled(op, &[count], 0.0, DType::I64, g.ordinal)
        } else {
            Ok(y)
        };
    }
    let idx = super::launch::contiguous(op, idx)?;
    let dims = super::source::Lay::of(&Layout::contiguous(&shape[..k]), &shape[..k])
        .ok_or_else(|| g.err(op, "more than 8 indexed dims are not supported on the GPU"))?;
    let (pi, count_i, kk) = (ptr_of(&idx) + elem_offset(&idx), count as i64, k as i64);
    let (err, code) = g.check_word(op, shape)?;
    g.launch(
        op,
        &format!("nd_offsets|{it}"),
        &|| nd_offsets_source(it),
        grid_for(count, BLOCK),
        BLOCK,
        &mut args![pi, py, count_i, kk, dims, err, code],
    )?;
    Ok(y)
}

/// `params` gathered at the `K`-tuples of `idx` (`gather_nd`): its
/// leading `k` dims flattened into one, gathered at the tuples' flat
/// offsets, shaped `out_shape`.
pub(crate) fn gather_nd(
    op: &'static str,
    params: &Tensor,
    idx: &Tensor,
    k: usize,
    out_shape: &[usize],
) -> Result<Tensor> {
    let g = mem_of(params).1;
    g.bind_for(op)?;
    let ps = params.shape();
    let flat = nd_offsets(op, idx, ps, k)?;
    let rows: usize = ps[..k].iter().product();
    let inner: usize = ps[k..].iter().product();
    let p2 = super::launch::reshaped(op, params, &[rows, inner])?;
    gather(op, &p2, &flat, 0, out_shape)
}

/// Zeros of `shape` with the slices of `updates` added at the `K`-tuples
/// of `idx` (`scatter_nd`; repeated tuples add up, in any order).
pub(crate) fn scatter_nd(
    op: &'static str,
    updates: &Tensor,
    idx: &Tensor,
    k: usize,
    shape: &[usize],
) -> Result<Tensor> {
    let flat = nd_offsets(op, idx, shape, k)?;
    let rows: usize = shape[..k].iter().product();
    let inner: usize = shape[k..].iter().product();
    scatter_add(op, updates, &flat, 1, flat.numel(), inner, rows, shape, None)
}

/// A segment product, maximum or minimum (`kind`) of the rows of `data`
/// (its first dims flattened to `rows`, the rest `inner`) into `num`
/// segments: `ids` are the rows' segment ids read on the host (negative
/// ones dropped), grouped here by segment in row order and uploaded, so
/// that each output folds its rows in the CPU's order. `sorted`: the
/// sorted ops' empty segments give 0.
pub(crate) fn segment_reduce(
    op: &'static str,
    data: &Tensor,
    ids: &[i64],
    num: usize,
    kind: &str,
    sorted: bool,
    out_shape: &[usize],
) -> Result<Tensor> {
    let g = mem_of(data).1;
    g.bind_for(op)?;
    let t = ct(op, data)?;
    let (init, empty) = segment_values(data.dtype(), kind, sorted)
        .ok_or_else(|| crate::kernels::gpu::no_kernel(op, data.device(), data.dtype()))?;
    let (y, py) = alloc(op, g, out_shape, data.dtype())?;
    if y.numel() == 0 {
        return Ok(y);
    }
    // the rows of each segment, in row order (a counting sort by id)
    let mut starts = vec![0i64; num + 1];
    for &s in ids.iter().filter(|&&s| s >= 0) {
        starts[s as usize + 1] += 1;
    }
    for s in 0..num {
        starts[s + 1] += starts[s];
    }
    let mut next: Vec<i64> = starts[..num].to_vec();
    let mut rows = vec![0i64; starts[num] as usize];
    for (i, &s) in ids.iter().enumerate().filter(|&(_, &s)| s >= 0) {
        rows[next[s as usize] as usize] = i as i64;
        next[s as usize] += 1;
    }
    let up = |v: Vec<i64>| {
        let n = v.len().max(1);
        let mut v = v;
        v.resize(n, 0);
        super::launch::upload(op, &Tensor::from_vec(v, &[n])?, g.ordinal)
    };
    let (starts_d, rows_d) = (up(starts)?, up(rows)?);
    let inner = (y.numel() / num) as i64;
    let ld = lay(op, g, data, data.shape())?;
    let (pd, ps, pr, num_i) = (ptr_of(data), ptr_of(&starts_d), ptr_of(&rows_d), num as i64);
    g.launch(
        op,
        &format!("segment|{t}|{kind}|{sorted}"),
        &|| segment_source(t, kind, &init, &empty),
        grid_for(y.numel(), BLOCK),
        BLOCK,
        &mut args![ld, pd, ps, pr, py, num_i, inner],
    )?;
    Ok(y)
}

/// A copy of `x` with the slices at the flat offsets `offsets` (in slices
/// of `inner` elements, read on the host) replaced by the slices of
/// `updates` in order, the last of a repeated offset winning
/// (`tensor_scatter_nd_update`): only the winners are written, so no two
/// threads write one element.
pub(crate) fn scatter_update(
    op: &'static str,
    x: &Tensor,
    updates: &Tensor,
    offsets: &[usize],
    inner: usize,
) -> Result<Tensor> {
    let g = mem_of(x).1;
    g.bind_for(op)?;
    let t = ct(op, x)?;
    // a fresh copy of x to write into
    let y = super::launch::cast(op, x, x.dtype())?;
    let mut last = std::collections::HashMap::with_capacity(offsets.len());
    for (j, &o) in offsets.iter().enumerate() {
        last.insert(o, j);
    }
    let mut at: Vec<i64> = Vec::with_capacity(2 * last.len());
    for (&o, &j) in &last {
        at.extend([o as i64, j as i64]);
    }
    let count = last.len();
    if count == 0 || inner == 0 {
        return Ok(y);
    }
    let at_d = super::launch::upload(op, &Tensor::from_vec(at, &[2 * count])?, g.ordinal)?;
    let lu = lay(op, g, updates, updates.shape())?;
    let (pu, pa, py, count_i, inner_i) = (ptr_of(updates), ptr_of(&at_d), ptr_of(&y), count as i64, inner as i64);
    g.launch(
        op,
        &format!("scatter_update|{t}"),
        &|| scatter_update_source(t),
        grid_for(count * inner, BLOCK),
        BLOCK,
        &mut args![lu, pu, pa, py, count_i, inner_i],
    )?;
    Ok(y)
}

/// The byte offset of a contiguous tensor's first element in its buffer.
fn elem_offset(t: &Tensor) -> u64 {
    (t.layout().offset * t.dtype().size_in_bytes()) as u64
}

/// Zeros of `out_shape` (`[outer, dim, inner]` flattened) with `updates`
/// (`[outer, nidx, inner]` as it is viewed) added at the indices `idx`
/// (`nidx` of them; ones outside `[0, dim)` dropped, and, where `checked`
/// gives the shape an error names, the error of the next read: see
/// `Gpu::check_word`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn scatter_add(
    op: &'static str,
    updates: &Tensor,
    idx: &Tensor,
    outer: usize,
    nidx: usize,
    inner: usize,
    dim: usize,
    out_shape: &[usize],
    checked: Option<&[usize]>,
) -> Result<Tensor> {
    let g = mem_of(updates).1;
    g.bind_for(op)?;
    let (t, it) = (ct(op, updates)?, index_type(op, idx)?);
    if updates.dtype() == DType::Bool {
        return Err(crate::kernels::gpu::no_kernel(op, updates.device(), updates.dtype()));
    }
    let y = filled(op, out_shape, 0.0, updates.dtype(), g.ordinal)?;
    let total = (outer * nidx * inner) as i64;
    if total == 0 || y.numel() == 0 {
        return Ok(y);
    }
    let idx = super::launch::contiguous(op, idx)?;
    let lu = lay(op, g, updates, updates.shape())?;
    let (pu, pi, py) = (ptr_of(updates), ptr_of(&idx) + elem_offset(&idx), ptr_of(&y));
    let (nidx, dim, inner) = (nidx as i64, dim as i64, inner as i64);
    let (err, code) = match checked {
        Some(shape) => g.check_word(op, shape)?,
        None => (0, 0),
    };
    g.launch(
        op,
        &format!("scatter_add|{t}|{it}"),
        &|| scatter_add_source(t, it),
        grid_for(total as usize, BLOCK),
        BLOCK,
        &mut args![lu, pu, pi, py, nidx, dim, inner, total, err, code],
    )?;
    Ok(y)
}

/// Copies `x` into the region of `y` (a fresh contiguous tensor) that
/// `region` (a view of `y`'s buffer of `x`'s shape) covers.
fn copy_into(op: &'static str, x: &Tensor, y: &Tensor, region: &Layout) -> Result<()> {
    let g = mem_of(y).1;
    let t = ct(op, x)?;
    let total = x.numel() as i64;
    if total == 0 {
        return Ok(());
    }
    let lx = lay(op, g, x, x.shape())?;
    let ly = super::source::Lay::of(region, x.shape())
        .ok_or_else(|| g.err(op, "views of more than 8 dims are not supported on the GPU"))?;
    let (px, py) = (ptr_of(x), ptr_of(y));
    g.launch(
        op,
        &format!("copy|{t}"),
        &|| copy_source(t),
        grid_for(total as usize, BLOCK),
        BLOCK,
        &mut args![lx, px, ly, py, total],
    )
}

/// `tensors` (one dtype, on one GPU) joined along `axis` into `shape`.
pub(crate) fn concat(op: &'static str, tensors: &[&Tensor], axis: usize, shape: &[usize]) -> Result<Tensor> {
    let g = mem_of(tensors[0]).1;
    g.bind_for(op)?;
    let (y, _) = alloc(op, g, shape, tensors[0].dtype())?;
    let strides = crate::tensor::layout::contiguous_strides(shape);
    let mut at = 0usize;
    for t in tensors {
        let region = Layout {
            shape: t.shape().into(),
            strides: strides.clone(),
            offset: if t.numel() == 0 { 0 } else { at * strides[axis] as usize },
        };
        copy_into(op, t, &y, &region)?;
        at += t.shape()[axis];
    }
    Ok(y)
}

/// `x` padded with `pads[d]` zeros before and after each dim `d`, giving `shape`.
pub(crate) fn pad(op: &'static str, x: &Tensor, pads: &[(usize, usize)], shape: &[usize]) -> Result<Tensor> {
    let g = mem_of(x).1;
    g.bind_for(op)?;
    let y = filled(op, shape, 0.0, x.dtype(), g.ordinal)?;
    let strides = crate::tensor::layout::contiguous_strides(shape);
    let offset = pads.iter().zip(strides.iter()).map(|(p, &s)| p.0 * s as usize).sum();
    let region = Layout {
        shape: x.shape().into(),
        strides,
        offset: if x.numel() == 0 { 0 } else { offset },
    };
    copy_into(op, x, &y, &region)?;
    Ok(y)
}

/// Zeros of `shape` with `x` written at the strided positions `spec`
/// (`(start, step, count)` per dim), the strided slice's adjoint.
pub(crate) fn strided_embed(
    op: &'static str,
    x: &Tensor,
    shape: &[usize],
    spec: &[(usize, isize, usize)],
) -> Result<Tensor> {
    let g = mem_of(x).1;
    g.bind_for(op)?;
    let y = filled(op, shape, 0.0, x.dtype(), g.ordinal)?;
    if x.numel() == 0 {
        return Ok(y);
    }
    let cs = crate::tensor::layout::contiguous_strides(shape);
    let offset: usize = spec.iter().zip(cs.iter()).map(|(s, &c)| s.0 * c as usize).sum();
    let region = Layout {
        shape: x.shape().into(),
        strides: spec.iter().zip(cs.iter()).map(|(s, &c)| s.1 * c).collect(),
        offset,
    };
    copy_into(op, x, &y, &region)?;
    Ok(y)
}

/// One-hot rows of integer `idx` (depth inserted at `axis`), `on` where
/// the index is, `off` elsewhere (an index outside `[0, depth)` gives a
/// row of `off`), of `dtype`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn one_hot(
    op: &'static str,
    idx: &Tensor,
    depth: usize,
    axis: usize,
    on: f64,
    off: f64,
    shape: &[usize],
    dtype: DType,
) -> Result<Tensor> {
    let g = mem_of(idx).1;
    g.bind_for(op)?;
    let it = index_type(op, idx)?;
    let t = ctype(dtype).ok_or_else(|| crate::kernels::gpu::no_kernel(op, idx.device(), dtype))?;
    let (y, py) = alloc(op, g, shape, dtype)?;
    let total = y.numel() as i64;
    if total == 0 {
        return Ok(y);
    }
    let idx = super::launch::contiguous(op, idx)?;
    let inner = idx.shape()[axis..].iter().product::<usize>() as i64;
    let (pi, depth) = (ptr_of(&idx) + elem_offset(&idx), depth as i64);
    g.launch(
        op,
        &format!("one_hot|{t}|{it}"),
        &|| one_hot_source(t, it),
        grid_for(total as usize, BLOCK),
        BLOCK,
        &mut args![pi, py, depth, inner, on, off, total],
    )?;
    Ok(y)
}
