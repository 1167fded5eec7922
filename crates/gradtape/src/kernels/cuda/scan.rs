//! Along one axis on the GPU: cumulative sums and products (`cumsum`,
//! `cumprod`, with TensorFlow's `exclusive` and `reverse` flags), and the
//! stable sorting permutation (`argsort`, which `sort` and `top_k` gather
//! with).
//!
//! One thread per line of the axis walks it in order, as the CPU's scan
//! does, adding or multiplying in the element type itself (the half types
//! rounded back after each step, as the CPU's half arithmetic; integers
//! wrapping): the results are the CPU's bit for bit. Consecutive threads
//! take consecutive lines, so a scan along any axis but the last reads
//! and writes coalesced; a scan along the last axis of few, long rows has
//! little parallelism (a parallel prefix would sum in another order, and
//! give other bits than the CPU).

//! `argsort` ranks each element by counting, one thread per element: the
//! elements of its line that sort before it (smaller, or equal and
//! earlier: a stable order, NaN after every number as on the CPU), which
//! is where its index goes. The count reads the whole line, `n²` compares
//! for a line of `n`, all in parallel: the CPU's order exactly, and no
//! merging passes, at the price of lines much longer than a few thousand
//! (a vocabulary's logits, sorted whole) costing more than a merge sort
//! would.

use super::launch::{alloc, contiguous, ct, lay, mem_of, ptr_of, BLOCK};
use super::runtime::grid_for;
use super::source::{compute, COMMON, WRAP};
use crate::error::Result;
use crate::tensor::{DType, Tensor};

/// The scan of `x` (read through its view) along the middle axis of
/// `[outer, n, inner]`: `prod` multiplies (else adds), `exclusive` writes
/// each line's running value before its element is folded in, `reverse`
/// walks each line from its end.
pub fn scan_source(t: &str, prod: bool) -> String {
    let (init, comb) = if prod { ("1", "gt_wmul") } else { ("0", "gt_wadd") };
    format!(
        "{COMMON}{WRAP}\ntypedef {t} T; typedef {c} C;\n\
         extern \"C\" __global__ void k(Lay lx, const T* x, T* y, long long outer, long long n, long long inner,\n\
             int exclusive, int reverse) {{\n\
           GT_LOOP(line, outer * inner) {{\n\
             long long o = line / inner, i = line - o * inner;\n\
             long long base = o * n * inner + i;\n\
             T acc = (T)(C){init};\n\
             for (long long s = 0; s < n; ++s) {{\n\
               long long at = base + (reverse ? n - 1 - s : s) * inner;\n\
               T next = (T){comb}((C)acc, (C)x[gt_at(lx, at)]);\n\
               y[at] = exclusive ? acc : next;\n\
               acc = next;\n\
             }}\n\
           }}\n\
         }}\n",
        c = compute(t),
    )
}

/// The stable sorting permutation of the lines of a contiguous
/// `[outer, n, inner]` along its middle axis: `y[o, r, j]` is the index
/// of the element of rank `r` in line `(o, j)`, ascending (NaN after every
/// number, as `ops::sorting::order`) or, with `descending`, in the
/// reversed order (NaN first), equal elements in their order either way.
pub fn argsort_source(t: &str) -> String {
    format!(
        "{COMMON}\ntypedef {t} T; typedef {c} C;\n\
         // -1, 0 or 1: a before, equal to, or after b (NaN after every number, equal to NaN)\n\
         __device__ __forceinline__ int gt_order(C a, C b) {{\n\
           bool na = a != a, nb = b != b;\n\
           if (na || nb) return (int)na - (int)nb;\n\
           return a < b ? -1 : (a > b ? 1 : 0);\n\
         }}\n\
         extern \"C\" __global__ void k(const T* x, long long* y, long long outer, long long n, long long inner, int descending) {{\n\
           GT_LOOP(e, outer * n * inner) {{\n\
             long long j = e % inner, q = e / inner;\n\
             long long i = q % n, o = q / n;\n\
             const T* line = x + o * n * inner + j;\n\
             C v = (C)line[i * inner];\n\
             long long rank = 0;\n\
             for (long long m = 0; m < n; ++m) {{\n\
               int c = gt_order((C)line[m * inner], v);\n\
               if (descending) c = -c;\n\
               rank += (c < 0 || (c == 0 && m < i)) ? 1 : 0;\n\
             }}\n\
             y[o * n * inner + rank * inner + j] = i;\n\
           }}\n\
         }}\n",
        c = compute(t),
    )
}

/// Every source of this file (for the NVRTC check).
pub fn all_sources() -> Vec<String> {
    let mut v = vec![];
    for t in ["float", "double", "int", "long long", "gt_f16", "gt_bf16"] {
        v.push(scan_source(t, false));
        v.push(scan_source(t, true));
        v.push(argsort_source(t));
    }
    v
}

/// `cumsum` (`prod` false) or `cumprod` of `x` along `axis`, as the CPU's
/// (the caller checked the axis; complex and bool tensors have no kernel).
pub(crate) fn scan(
    op: &'static str,
    x: &Tensor,
    axis: usize,
    exclusive: bool,
    reverse: bool,
    prod: bool,
) -> Result<Tensor> {
    let gpu = mem_of(x).1;
    gpu.bind_for(op)?;
    let t = ct(op, x)?;
    if t == "bool" {
        return Err(crate::kernels::gpu::no_kernel(op, x.device(), x.dtype()));
    }
    let shape = x.shape();
    let (outer, n) = (shape[..axis].iter().product::<usize>(), shape[axis]);
    let inner: usize = shape[axis + 1..].iter().product();
    let (y, py) = alloc(op, gpu, shape, x.dtype())?;
    if y.numel() == 0 {
        return Ok(y);
    }
    let lx = lay(op, gpu, x, shape)?;
    let (px, lines) = (ptr_of(x), outer * inner);
    let (outer, n, inner) = (outer as i64, n as i64, inner as i64);
    let (exclusive, reverse) = (i32::from(exclusive), i32::from(reverse));
    gpu.launch(
        op,
        &format!("scan|{t}|{prod}"),
        &|| scan_source(t, prod),
        grid_for(lines, BLOCK),
        BLOCK,
        &mut args![lx, px, py, outer, n, inner, exclusive, reverse],
    )?;
    Ok(y)
}

/// The indices that sort `x` along `axis` (`i64`, `x`'s shape), as the
/// CPU's `argsort` (the caller checked the axis and the dtype).
pub(crate) fn argsort(op: &'static str, x: &Tensor, axis: usize, descending: bool) -> Result<Tensor> {
    let gpu = mem_of(x).1;
    gpu.bind_for(op)?;
    let t = ct(op, x)?;
    let shape = x.shape();
    let (outer, n) = (shape[..axis].iter().product::<usize>(), shape[axis]);
    let inner: usize = shape[axis + 1..].iter().product();
    let (y, py) = alloc(op, gpu, shape, DType::I64)?;
    if y.numel() == 0 {
        return Ok(y);
    }
    let xc = contiguous(op, x)?;
    let (px, total) = (ptr_of(&xc), y.numel());
    let (outer, n, inner, descending) = (outer as i64, n as i64, inner as i64, i32::from(descending));
    gpu.launch(
        op,
        &format!("argsort|{t}"),
        &|| argsort_source(t),
        grid_for(total, BLOCK),
        BLOCK,
        &mut args![px, py, outer, n, inner, descending],
    )?;
    Ok(y)
}
