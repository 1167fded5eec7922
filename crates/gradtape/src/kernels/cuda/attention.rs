//! Fused scaled dot-product attention on the GPU, forward and backward:
//! the CPU kernels' arithmetic (`kernels::cpu::attention`, whose module
//! docs name the terms: scores, probabilities, log-sum-exp, `D`) and their
//! layouts, so that the op gives the same packed rows (`[batch, tq, dv +
//! 1]`, each query row's output then its log-sum-exp) and the same
//! gradient blocks (`dq`, `dk`, `dv` per batch element) on either device.
//!
//! Each kernel gives one **warp** to one row and walks the other side in
//! tiles of 32, a lane per tile row: a lane computes one score (a dot
//! product over `d`) and its probability; the tile's probabilities then
//! reach every lane by shuffles, and each lane accumulates its own slice
//! of the output row (columns `lane`, `lane + 32`, … in registers: the
//! source is built per count of those columns). Nothing of size `[tq,
//! tk]` is held, and nothing is summed by atomics, so each run gives the
//! same numbers.
//! - The forward kernel (a warp per query row) keeps FlashAttention's
//!   online-softmax state (the running maximum and sum, the accumulator
//!   scaled to the maximum), as the CPU's `forward_online` does.
//! - The backward pass is two kernels. The first (a warp per query row)
//!   computes `D[i] = dO[i]·o[i]` into a scratch vector and `dq[i]`,
//!   recomputing each probability from the saved log-sum-exp; the second
//!   (a warp per key row) computes `dk[j]` and `dv[j]` over the query rows
//!   that see key `j`, recomputing the same probabilities.
//!
//! The mask is read in place through its broadcast view ([`Lay`] over the
//! scores' shape). Dropout's decisions are the CPU's bit for bit: the
//! counter-based generator (`kernels::cpu::counter`, SplitMix64's mixer)
//! ported as integer arithmetic, at the same flat index `(b·tq + i)·tk + j`.
//! Sums run in the element type (`float` or `double`) as on the CPU; their
//! order differs (and the GPU fuses multiply-adds), so values agree to
//! rounding. Fully masked rows follow the CPU: output 0, log-sum-exp `+inf`
//! (so that every recomputed probability is 0); a row that sees no key at
//! all (`tk = 0`) has log-sum-exp `-inf`; a row with a NaN score is NaN,
//! output and log-sum-exp (a NaN met while the running maximum is still
//! `-inf` is recorded by each lane and summed over the warp).

use super::launch::{alloc, contiguous, ct, filled, float_only, lay, mem_of, ptr_of};
use super::runtime::Gpu;
use super::source::{Lay, COMMON, LIMITS};
use crate::error::{Error, Result};
use crate::kernels::cpu::attention::Dims;
use crate::tensor::{Layout, Tensor};

/// Threads per block: four warps, four rows at a time.
const THREADS: u32 = 128;

/// Lanes per warp: the tile width and the stride of a lane's columns.
const WARP: usize = 32;

/// A call's sizes and attributes as the kernels read them (`struct Att`
/// in `PRELUDE`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Att {
    batch: i64,
    tq: i64,
    tk: i64,
    d: i64,
    dv: i64,
    scale: f64,
    rate: f64,
    keep: f64,
    key: u64,
    causal: i32,
    drop: i32,
}

impl Att {
    /// From the CPU kernels' sizes (the dropout's generator key, rate and
    /// kept factor included).
    pub fn of(dims: &Dims) -> Att {
        let i = |v: usize| v as i64;
        let (drop, key, rate) = match &dims.dropout {
            Some(dr) => (1, dr.key(), dr.rate()),
            None => (0, 0, 0.0),
        };
        Att {
            batch: i(dims.batch),
            tq: i(dims.tq),
            tk: i(dims.tk),
            d: i(dims.d),
            dv: i(dims.dv),
            scale: dims.scale,
            rate,
            keep: 1.0 / (1.0 - rate),
            key,
            causal: i32::from(dims.causal),
            drop,
        }
    }

    /// A C initializer of these sizes (for the host checks).
    pub fn c_init(&self) -> String {
        format!(
            "{{{}LL, {}LL, {}LL, {}LL, {}LL, {:?}, {:?}, {:?}, {}ULL, {}, {}}}",
            self.batch,
            self.tq,
            self.tk,
            self.d,
            self.dv,
            self.scale,
            self.rate,
            self.keep,
            self.key,
            self.causal,
            self.drop
        )
    }
}

/// What the three kernels share: the warp's collectives (one lane on a
/// host, where the checks run the kernels as C++), the sizes, the
/// dropout's generator and the loop over rows, a warp each.
pub(crate) const PRELUDE: &str = r#"
#if defined(__CUDACC_RTC__) || defined(__CUDA_ARCH__)
#define GT_W 32
// (a maximum that every lane computes alike: NaN loses, as fmax)
template <typename T> __device__ __forceinline__ T gt_max2(T a, T b) { return (b > a || a != a) ? b : a; }
template <typename T> __device__ __forceinline__ T gt_wmax(T v) {
    for (int o = 16; o > 0; o >>= 1) v = gt_max2(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <typename T> __device__ __forceinline__ T gt_wsum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename T> __device__ __forceinline__ T gt_lane(T v, int l) { return __shfl_sync(0xffffffffu, v, l); }
#else
#define GT_W 1
template <typename T> static inline T gt_wmax(T v) { return v; }
template <typename T> static inline T gt_wsum(T v) { return v; }
template <typename T> static inline T gt_lane(T v, int) { return v; }
#endif
struct Att { long long batch, tq, tk, d, dv; double scale, rate, keep; unsigned long long key; int causal, drop; };
// SplitMix64's finaliser (kernels::cpu::counter::mix)
__device__ __forceinline__ unsigned long long gt_mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
// whether the probability at flat index `at` is kept (CounterRng::unit(at) >= rate)
__device__ __forceinline__ bool gt_kept(const Att& a, unsigned long long at) {
    unsigned long long bits = gt_mix(a.key + (at + 1ULL) * 0x9E3779B97F4A7C15ULL);
    return (double)(bits >> 11) * (1.0 / 9007199254740992.0) >= a.rate;
}
// how many keys query row `i` sees
__device__ __forceinline__ long long gt_keys(const Att& a, long long i) {
    return a.causal ? (i + 1 < a.tk ? i + 1 : a.tk) : a.tk;
}
template <typename T> __device__ __forceinline__ T gt_dot(const T* x, const T* y, long long n) {
    T s = (T)0;
    for (long long c = 0; c < n; ++c) s += x[c] * y[c];
    return s;
}
// where batch element `b`'s mask starts, and the strides of a query row and a key
__device__ __forceinline__ long long gt_mask_base(const Lay& l, const Att& a, long long b) { return gt_at(l, b * a.tq * a.tk); }
__device__ __forceinline__ long long gt_mask_row(const Lay& l) { return l.stride[l.rank - 2]; }
__device__ __forceinline__ long long gt_mask_col(const Lay& l) { return l.stride[l.rank - 1]; }
#define GT_WARPS(row, n) for (long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / GT_W; row < (n); row += (long long)gridDim.x * blockDim.x / GT_W)
"#;

/// The head of a source: the shared parts, the element type `T`, its
/// exponential and logarithm, and each lane's column counts over `d`
/// (`ND`) and `dv` (`NV`).
fn head(t: &str, nd: usize, nv: usize) -> String {
    let (exp, log) = if t == "float" { ("expf", "logf") } else { ("exp", "log") };
    format!(
        "{COMMON}{LIMITS}{PRELUDE}\ntypedef {t} T;\n#define ND {nd}\n#define NV {nv}\n\
         __device__ __forceinline__ T gt_exp(T x) {{ return {exp}(x); }}\n\
         __device__ __forceinline__ T gt_log(T x) {{ return {log}(x); }}\n"
    )
}

/// The forward pass, a warp per query row: `out[row] = (o, lse)` (rows of
/// `dv + 1`), `nv` columns of `o` per lane (`nv · lanes >= dv`).
pub fn forward_source(t: &str, nv: usize) -> String {
    format!(
        "{}\
extern \"C\" __global__ void k(const T* q, const T* kk, const T* v, const T* mask, Lay lm, T* out, Att a) {{
  const int lane = threadIdx.x % GT_W;
  const T sc = (T)a.scale, kf = (T)a.keep, ninf = gt_lowest<T>();
  const long long mr = mask ? gt_mask_row(lm) : 0, mc = mask ? gt_mask_col(lm) : 0;
  GT_WARPS(row, a.batch * a.tq) {{
    const long long b = row / a.tq, i = row - b * a.tq, n = gt_keys(a, i);
    const T* qi = q + row * a.d;
    const T* kb = kk + b * a.tk * a.d;
    const T* vb = v + b * a.tk * a.dv;
    const T* mi = mask ? mask + gt_mask_base(lm, a, b) + i * mr : mask;
    T acc[NV];
#pragma unroll
    for (int t = 0; t < NV; ++t) acc[t] = (T)0;
    T m = ninf, l = (T)0;
    // a NaN score met while the maximum is still -inf (nothing adds then,
    // and the maximum passes over NaN): the row is NaN, as the softmax's
    bool bad = false;
    for (long long j0 = 0; j0 < n; j0 += GT_W) {{
      const long long j = j0 + lane;
      T s = ninf;
      if (j < n) {{
        const T x = gt_dot(qi, kb + j * a.d, a.d);
        s = mi ? sc * x + mi[j * mc] : sc * x;
      }}
      const T bm = gt_wmax(s);
      if (bm > m) {{
        // a larger maximum: the state so far shrinks by e^(m - bm)
        const T shrink = gt_exp(m - bm);
        l *= shrink;
#pragma unroll
        for (int t = 0; t < NV; ++t) acc[t] *= shrink;
        m = bm;
      }}
      // (while every score so far is -inf, nothing adds)
      if (m > ninf) {{
        T p = j < n ? gt_exp(s - m) : (T)0;
        // (the sum is of the undropped probabilities)
        l += gt_wsum(p);
        if (a.drop && j < n) p = p * (gt_kept(a, (unsigned long long)(row * a.tk + j)) ? kf : (T)0);
        const long long cnt = n - j0 < GT_W ? n - j0 : GT_W;
        for (int jj = 0; jj < cnt; ++jj) {{
          const T pj = gt_lane(p, jj);
          const T* vj = vb + (j0 + jj) * a.dv;
#pragma unroll
          for (int t = 0; t < NV; ++t) {{
            const long long c = lane + (long long)t * GT_W;
            if (c < a.dv) acc[t] += pj * vj[c];
          }}
        }}
      }} else if (s != s) {{
        bad = true;
      }}
    }}
    T* o = out + row * (a.dv + 1);
    const bool nan_row = gt_wsum(bad ? (T)1 : (T)0) > (T)0;
    const T qnan = gt_highest<T>() - gt_highest<T>();
    const bool none = n == 0 || l == (T)0;
    const T inv = none ? (T)0 : (T)1 / l;
#pragma unroll
    for (int t = 0; t < NV; ++t) {{
      const long long c = lane + (long long)t * GT_W;
      if (c < a.dv) o[c] = nan_row ? qnan : (none ? (T)0 : acc[t] * inv);
    }}
    // no key: -inf; every key hidden: +inf (each recomputed probability 0);
    // a NaN score: NaN
    if (lane == 0) o[a.dv] = n == 0 ? ninf : (nan_row ? qnan : (l == (T)0 ? -ninf : m + gt_log(l)));
  }}
}}
",
        head(t, 1, nv)
    )
}

/// The backward pass's first kernel, a warp per query row: `D[row] =
/// dO·o` into `dd`, and `dq` into its block of `out` (`nd` columns per
/// lane).
pub fn grad_q_source(t: &str, nd: usize) -> String {
    format!(
        "{}\
extern \"C\" __global__ void k(const T* q, const T* kk, const T* v, const T* mask, Lay lm, const T* fwd, const T* g, T* out, T* dd, Att a) {{
  const int lane = threadIdx.x % GT_W;
  const T sc = (T)a.scale, kf = (T)a.keep;
  const long long mr = mask ? gt_mask_row(lm) : 0, mc = mask ? gt_mask_col(lm) : 0;
  const long long per = a.tq * a.d + a.tk * a.d + a.tk * a.dv;
  GT_WARPS(row, a.batch * a.tq) {{
    const long long b = row / a.tq, i = row - b * a.tq, n = gt_keys(a, i);
    const T* qi = q + row * a.d;
    const T* gi = g + row * a.dv;
    const T* oi = fwd + row * (a.dv + 1);
    const T* kb = kk + b * a.tk * a.d;
    const T* vb = v + b * a.tk * a.dv;
    const T* mi = mask ? mask + gt_mask_base(lm, a, b) + i * mr : mask;
    T part = (T)0;
    for (long long c = lane; c < a.dv; c += GT_W) part += gi[c] * oi[c];
    const T D = gt_wsum(part), lse = oi[a.dv];
    if (lane == 0) dd[row] = D;
    T acc[ND];
#pragma unroll
    for (int t = 0; t < ND; ++t) acc[t] = (T)0;
    for (long long j0 = 0; j0 < n; j0 += GT_W) {{
      const long long j = j0 + lane;
      T ds = (T)0;
      if (j < n) {{
        const T x = gt_dot(qi, kb + j * a.d, a.d);
        const T s = mi ? sc * x + mi[j * mc] : sc * x;
        const T p = gt_exp(s - lse);
        const T dp = gt_dot(gi, vb + j * a.dv, a.dv);
        const T f = a.drop ? (gt_kept(a, (unsigned long long)(row * a.tk + j)) ? kf : (T)0) : (T)1;
        ds = p * (dp * f - D) * sc;
      }}
      const long long cnt = n - j0 < GT_W ? n - j0 : GT_W;
      for (int jj = 0; jj < cnt; ++jj) {{
        const T dsj = gt_lane(ds, jj);
        const T* kj = kb + (j0 + jj) * a.d;
#pragma unroll
        for (int t = 0; t < ND; ++t) {{
          const long long c = lane + (long long)t * GT_W;
          if (c < a.d) acc[t] += dsj * kj[c];
        }}
      }}
    }}
    T* dq = out + b * per + i * a.d;
#pragma unroll
    for (int t = 0; t < ND; ++t) {{
      const long long c = lane + (long long)t * GT_W;
      if (c < a.d) dq[c] = acc[t];
    }}
  }}
}}
",
        head(t, nd, 1)
    )
}

/// The backward pass's second kernel, a warp per key row: `dk` and `dv`
/// into their blocks of `out`, over the query rows that see the key
/// (`nd` and `nv` columns per lane), with the first kernel's `D`.
pub fn grad_kv_source(t: &str, nd: usize, nv: usize) -> String {
    format!(
        "{}\
extern \"C\" __global__ void k(const T* q, const T* kk, const T* v, const T* mask, Lay lm, const T* fwd, const T* g, const T* dd, T* out, Att a) {{
  const int lane = threadIdx.x % GT_W;
  const T sc = (T)a.scale, kf = (T)a.keep;
  const long long mr = mask ? gt_mask_row(lm) : 0, mc = mask ? gt_mask_col(lm) : 0;
  const long long per = a.tq * a.d + a.tk * a.d + a.tk * a.dv;
  GT_WARPS(row, a.batch * a.tk) {{
    const long long b = row / a.tk, j = row - b * a.tk;
    const T* kj = kk + row * a.d;
    const T* vj = v + row * a.dv;
    const T* mj = mask ? mask + gt_mask_base(lm, a, b) + j * mc : mask;
    T ak[ND], av[NV];
#pragma unroll
    for (int t = 0; t < ND; ++t) ak[t] = (T)0;
#pragma unroll
    for (int t = 0; t < NV; ++t) av[t] = (T)0;
    // (causal: the rows i >= j see key j)
    for (long long i0 = a.causal ? j : 0; i0 < a.tq; i0 += GT_W) {{
      const long long i = i0 + lane;
      T pf = (T)0, ds = (T)0;
      if (i < a.tq) {{
        const long long r = b * a.tq + i;
        const T x = gt_dot(q + r * a.d, kj, a.d);
        const T s = mj ? sc * x + mj[i * mr] : sc * x;
        const T p = gt_exp(s - fwd[r * (a.dv + 1) + a.dv]);
        const T dp = gt_dot(g + r * a.dv, vj, a.dv);
        const T f = a.drop ? (gt_kept(a, (unsigned long long)(r * a.tk + j)) ? kf : (T)0) : (T)1;
        pf = p * f;
        ds = p * (dp * f - dd[r]) * sc;
      }}
      const long long cnt = a.tq - i0 < GT_W ? a.tq - i0 : GT_W;
      for (int ii = 0; ii < cnt; ++ii) {{
        const T pfi = gt_lane(pf, ii), dsi = gt_lane(ds, ii);
        const long long r = b * a.tq + i0 + ii;
        const T* gi = g + r * a.dv;
        const T* qi = q + r * a.d;
#pragma unroll
        for (int t = 0; t < NV; ++t) {{
          const long long c = lane + (long long)t * GT_W;
          if (c < a.dv) av[t] += pfi * gi[c];
        }}
#pragma unroll
        for (int t = 0; t < ND; ++t) {{
          const long long c = lane + (long long)t * GT_W;
          if (c < a.d) ak[t] += dsi * qi[c];
        }}
      }}
    }}
    T* dk = out + b * per + a.tq * a.d + j * a.d;
    T* dvj = out + b * per + a.tq * a.d + a.tk * a.d + j * a.dv;
#pragma unroll
    for (int t = 0; t < ND; ++t) {{
      const long long c = lane + (long long)t * GT_W;
      if (c < a.d) dk[c] = ak[t];
    }}
#pragma unroll
    for (int t = 0; t < NV; ++t) {{
      const long long c = lane + (long long)t * GT_W;
      if (c < a.dv) dvj[c] = av[t];
    }}
  }}
}}
",
        head(t, nd, nv)
    )
}

/// Every source of this file in both float types, at a few column counts
/// (for the NVRTC check).
pub fn all_sources() -> Vec<String> {
    let mut v = vec![];
    for t in ["float", "double"] {
        for n in [1, 2, 5] {
            v.push(forward_source(t, n));
            v.push(grad_q_source(t, n));
            v.push(grad_kv_source(t, n, 3));
        }
    }
    v
}

/// Columns per lane for a width.
fn per_lane(width: usize) -> usize {
    width.div_ceil(WARP).max(1)
}

/// Blocks for `rows` rows, a warp each (the kernels loop over the rest).
fn grid(rows: usize) -> u32 {
    let warps = (THREADS as usize) / WARP;
    rows.div_ceil(warps).min(65_535 * 8) as u32
}

/// The inputs as the kernels read them: `q`, `k`, `v` contiguous, the
/// mask's pointer and view over the scores' shape (a null pointer and a
/// placeholder without one).
struct Operands {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Option<Tensor>,
    lm: Lay,
}

impl Operands {
    fn of(
        op: &'static str,
        g: &Gpu,
        dims: &Dims,
        batch: &[usize],
        qkv: [&Tensor; 3],
        mask: Option<&Tensor>,
    ) -> Result<Operands> {
        let [q, k, v] = qkv;
        let lm = match mask {
            Some(m) => {
                if m.dtype() != q.dtype() {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "the mask must be additive, of {}, on the GPU; got {}",
                            q.dtype(),
                            m.dtype()
                        ),
                    ));
                }
                let scores: Vec<usize> = batch.iter().copied().chain([dims.tq, dims.tk]).collect();
                lay(op, g, m, &scores)?
            }
            None => Lay::of(&Layout::contiguous(&[1, 1]), &[1, 1]).expect("rank 2"),
        };
        Ok(Operands {
            q: contiguous(op, q)?,
            k: contiguous(op, k)?,
            v: contiguous(op, v)?,
            mask: mask.cloned(),
            lm,
        })
    }

    fn mask_ptr(&self) -> u64 {
        self.mask.as_ref().map_or(0, ptr_of)
    }
}

/// The forward pass on the GPU: the packed rows `[batch..., tq, dv + 1]`
/// (output, then log-sum-exp) of `q [batch..., tq, d]`, `k`, `v` (`f32` or
/// `f64`, on one GPU) and the additive mask broadcasting to the scores
/// `[batch..., tq, tk]`.
pub(crate) fn forward(
    op: &'static str,
    dims: &Dims,
    batch: &[usize],
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
) -> Result<Tensor> {
    let g = mem_of(q).1;
    g.bind_for(op)?;
    float_only(op, q)?;
    let t = ct(op, q)?;
    let shape: Vec<usize> = batch.iter().copied().chain([dims.tq, dims.dv + 1]).collect();
    let rows = dims.batch * dims.tq;
    if dims.dv == 0 && rows > 0 {
        // (no output columns: the log-sum-exp is left 0, as on the CPU)
        return filled(op, &shape, 0.0, q.dtype(), g.ordinal);
    }
    let (out, po) = alloc(op, g, &shape, q.dtype())?;
    if rows == 0 {
        return Ok(out);
    }
    let x = Operands::of(op, g, dims, batch, [q, k, v], mask)?;
    let (pq, pk, pv, pm, lm) = (ptr_of(&x.q), ptr_of(&x.k), ptr_of(&x.v), x.mask_ptr(), x.lm);
    let a = Att::of(dims);
    let nv = per_lane(dims.dv);
    g.launch(
        op,
        &format!("attention|{t}|{nv}"),
        &|| forward_source(t, nv),
        grid(rows),
        THREADS,
        &mut args![pq, pk, pv, pm, lm, po, a],
    )?;
    Ok(out)
}

/// The backward pass on the GPU: `[batch..., tq·d + tk·d + tk·dv]`, each
/// batch element's `dq`, `dk` and `dv`, from the forward pass's packed
/// rows and the output's cotangent `dout [batch..., tq, dv]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward(
    op: &'static str,
    dims: &Dims,
    batch: &[usize],
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    packed: &Tensor,
    dout: &Tensor,
) -> Result<Tensor> {
    let g = mem_of(q).1;
    g.bind_for(op)?;
    float_only(op, q)?;
    let t = ct(op, q)?;
    let per = dims.tq * dims.d + dims.tk * dims.d + dims.tk * dims.dv;
    let shape: Vec<usize> = batch.iter().copied().chain([per]).collect();
    if dims.batch * per == 0 {
        return Ok(alloc(op, g, &shape, q.dtype())?.0);
    }
    if dims.dv == 0 || dims.tq == 0 || dims.tk == 0 {
        // an empty output, or no query or no key: every gradient 0
        return filled(op, &shape, 0.0, q.dtype(), g.ordinal);
    }
    let (out, po) = alloc(op, g, &shape, q.dtype())?;
    let x = Operands::of(op, g, dims, batch, [q, k, v], mask)?;
    let (fwd, gc) = (contiguous(op, packed)?, contiguous(op, dout)?);
    let (dd, pd) = alloc(op, g, &[dims.batch * dims.tq], q.dtype())?;
    let (pq, pk, pv, pm, lm) = (ptr_of(&x.q), ptr_of(&x.k), ptr_of(&x.v), x.mask_ptr(), x.lm);
    let (pf, pg) = (ptr_of(&fwd), ptr_of(&gc));
    let a = Att::of(dims);
    let (nd, nv) = (per_lane(dims.d), per_lane(dims.dv));
    g.launch(
        op,
        &format!("attention_dq|{t}|{nd}"),
        &|| grad_q_source(t, nd),
        grid(dims.batch * dims.tq),
        THREADS,
        &mut args![pq, pk, pv, pm, lm, pf, pg, po, pd, a],
    )?;
    g.launch(
        op,
        &format!("attention_dkv|{t}|{nd}|{nv}"),
        &|| grad_kv_source(t, nd, nv),
        grid(dims.batch * dims.tk),
        THREADS,
        &mut args![pq, pk, pv, pm, lm, pf, pg, pd, po, a],
    )?;
    // (freed on the stream, after the kernels)
    drop(dd);
    Ok(out)
}
