//! Fused elementwise kernels on a GPU: the graph compiler's fused programs
//! (`function::compile::kernel`) as one CUDA kernel each.
//!
//! This layer knows nothing of programs: the compiler hands it a
//! [`FusedKernel`], plain data made once per compiled graph. Its source is
//! [`source`]'s skeleton around the program's statements (CUDA C that the
//! compiler writes from the elementwise table's expressions,
//! `ops::math::cuda_expr`): one thread per element (grid-stride), inputs
//! read by index (`in0[i]`, a broadcast one by `in1[(i / q) % p]`, a
//! one-element one as `in2[0]` before the loop), every instruction a local
//! value, elementwise outputs stored as `outK[i] = ...`. Full sums add each
//! thread's elements in `double` (`sK += ...`), then a block adds its
//! threads' sums (a tree in shared memory, in `double`) and adds the
//! block's into a zeroed `double` accumulator with one `atomicAdd`; a
//! second small kernel converts each accumulator to the dtype.
//!
//! The skeleton is valid host C++ too (without `__CUDACC__` the loop runs
//! over every element and the sums add into the accumulator directly), so
//! that the compiler's tests can check a program's kernel body on the host
//! with the system C++ compiler.

// (without the `cuda` feature the kernel is built but never launched)
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use crate::tensor::DType;

/// Threads per block of a fused kernel (the block reduction's tree
/// assumes a power of two).
pub(crate) const BLOCK: u32 = 256;

/// One output of a [`FusedKernel`].
#[derive(Clone, Debug, PartialEq)]
pub enum FusedOut {
    /// An elementwise value of the group's shape (the next `outK`).
    Elementwise,
    /// A sum of all elements, of this shape (one element; the next `sK`).
    Sum(Vec<usize>),
}

/// A fused kernel, ready to launch: its CUDA source (from `source`) and
/// what it reads and makes.
#[derive(Clone, Debug)]
pub struct FusedKernel {
    /// The kernel's CUDA C (kernel `k`).
    pub source: String,
    /// The kernel cache's key for it (names the source, made once).
    pub(crate) key: String,
    /// `F32` or `F64`: every input's and output's.
    pub(crate) dtype: DType,
    /// The group's shape (of every elementwise output).
    pub(crate) shape: Vec<usize>,
    /// Per input, its number of elements.
    pub(crate) input_len: Vec<usize>,
    /// Per output, in order.
    pub outputs: Vec<FusedOut>,
}

impl FusedKernel {
    /// A kernel of `source`, keyed by a hash of it.
    pub(crate) fn new(
        source: String,
        dtype: DType,
        shape: Vec<usize>,
        input_len: Vec<usize>,
        outputs: Vec<FusedOut>,
    ) -> FusedKernel {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        source.hash(&mut h);
        let key = format!("fused|{:016x}|{}", h.finish(), source.len());
        FusedKernel {
            source,
            key,
            dtype,
            shape,
            input_len,
            outputs,
        }
    }

    /// Elements of the group.
    pub(crate) fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// How many full sums it makes.
    pub fn n_sums(&self) -> usize {
        self.outputs.iter().filter(|o| matches!(o, FusedOut::Sum(_))).count()
    }
}

/// The C type of a fused kernel's dtype (`F32`, `F64`).
pub(crate) fn fused_ctype(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::F32 => Some("float"),
        DType::F64 => Some("double"),
        _ => None,
    }
}

/// The source of a fused kernel of element type `t` over `n_inputs`
/// inputs (`in0`, ...), `n_outs` elementwise outputs (`out0`, ...) and
/// `n_sums` full sums (`s0`, ... : `double`s each thread adds into), with
/// `prelude` (the functions the statements call) first: `setup` runs once
/// per thread before the loop (splats), `body` once per element `i`.
/// The kernel is `k(const T* in0, ..., T* out0, ..., double* acc, long long n)`.
pub(crate) fn source(
    prelude: &str,
    t: &str,
    n_inputs: usize,
    n_outs: usize,
    n_sums: usize,
    setup: &str,
    body: &str,
) -> String {
    use std::fmt::Write as _;
    let mut params = String::new();
    for k in 0..n_inputs {
        let _ = write!(params, "const T* __restrict__ in{k}, ");
    }
    for k in 0..n_outs {
        let _ = write!(params, "T* __restrict__ out{k}, ");
    }
    let mut sums = String::new();
    let mut reduce = String::new();
    let mut host_reduce = String::new();
    for k in 0..n_sums {
        let _ = write!(sums, "double s{k} = 0; ");
        let _ = writeln!(
            reduce,
            "  gt_sh[threadIdx.x] = s{k}; __syncthreads();\n  \
             for (int h = blockDim.x / 2; h > 0; h >>= 1) {{ if (threadIdx.x < h) gt_sh[threadIdx.x] += gt_sh[threadIdx.x + h]; __syncthreads(); }}\n  \
             if (threadIdx.x == 0) atomicAdd(&acc[{k}], gt_sh[0]);\n  __syncthreads();"
        );
        let _ = write!(host_reduce, "acc[{k}] += s{k}; ");
    }
    let shared = if n_sums > 0 {
        format!("  __shared__ double gt_sh[{BLOCK}];\n")
    } else {
        String::new()
    };
    format!(
        "{prelude}\n{FUSED_COMMON}\ntypedef {t} T;\n\
         extern \"C\" __global__ void k({params}double* __restrict__ acc, long long n) {{\n  \
         (void)acc; {sums}\n{setup}\n  GT_FUSED_LOOP(i, n) {{\n{body}  }}\n\
         #ifdef __CUDACC__\n{shared}{reduce}#else\n  {host_reduce}\n#endif\n}}\n"
    )
}

/// What every fused kernel's source has after the prelude: the loop over
/// the elements, and bits to `double` (for constants that have no
/// literal: infinities, NaN).
pub(crate) const FUSED_COMMON: &str = r#"#ifdef __CUDACC__
#define GT_FUSED_LOOP(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)
__device__ __forceinline__ double gt_from_bits(long long b) { return __longlong_as_double(b); }
#else
#include <cstring>
#define __global__
#define __restrict__
#define GT_FUSED_LOOP(i, n) for (long long i = 0; i < (n); ++i)
inline double gt_from_bits(long long b) { double d; memcpy(&d, &b, 8); return d; }
#endif
"#;

/// The kernel converting the `double` accumulators of sums to the dtype.
#[cfg(feature = "cuda")]
pub fn sums_source(t: &str) -> String {
    format!(
        "{FUSED_COMMON}\ntypedef {t} T;\n\
         extern \"C\" __global__ void k(const double* acc, T* y, long long n) {{ GT_FUSED_LOOP(i, n) {{ y[i] = (T)acc[i]; }} }}\n"
    )
}

/// Runs `kernel` on `inputs` (on one GPU; of its dtype and sizes): its
/// outputs in order, new contiguous tensors on that GPU.
#[cfg(feature = "cuda")]
pub(crate) fn run_fused(
    op: &'static str,
    kernel: &FusedKernel,
    inputs: &[crate::tensor::Tensor],
) -> crate::error::Result<Vec<crate::tensor::Tensor>> {
    use std::ffi::c_void;

    use super::launch::{alloc_on, contiguous, ptr_of, tensor_gpu};
    use super::runtime::{gpu, grid_for};
    use crate::error::Error;
    use crate::tensor::Tensor;

    let first = inputs
        .iter()
        .find(|t| t.device_buffer().is_some())
        .ok_or_else(|| Error::invalid(op, "a fused GPU kernel given no tensor on a GPU"))?;
    let g = gpu(op, tensor_gpu(first).ordinal)?;
    let t =
        fused_ctype(kernel.dtype).ok_or_else(|| crate::kernels::gpu::no_kernel(op, first.device(), kernel.dtype))?;
    if inputs.len() != kernel.input_len.len() {
        return Err(Error::invalid(
            op,
            format!("expects {} inputs, got {}", kernel.input_len.len(), inputs.len()),
        ));
    }
    let mut ins: Vec<Tensor> = Vec::with_capacity(inputs.len());
    for (i, (x, &want)) in inputs.iter().zip(&kernel.input_len).enumerate() {
        if x.dtype() != kernel.dtype || x.numel() != want || x.device() != first.device() {
            return Err(Error::invalid(
                op,
                format!(
                    "input {i} is {} {:?} on {}; the kernel was made for {} of {want} elements on {}",
                    x.dtype(),
                    x.shape(),
                    x.device(),
                    kernel.dtype,
                    first.device()
                ),
            ));
        }
        ins.push(contiguous(op, x)?);
    }
    let n = kernel.len();
    let n_sums = kernel.n_sums();
    let mut outs: Vec<Tensor> = Vec::with_capacity(kernel.outputs.len());
    let mut ptrs: Vec<u64> = ins.iter().map(ptr_of).collect();
    for o in &kernel.outputs {
        if let FusedOut::Elementwise = o {
            let (out, p) = alloc_on(op, g, &kernel.shape, kernel.dtype)?;
            ptrs.push(p);
            outs.push(out);
        }
    }
    // the sums' accumulators, zeroed
    let acc = (n_sums > 0)
        .then(|| super::launch::filled(op, &[n_sums], 0.0, DType::F64, g.ordinal))
        .transpose()?;
    let acc_ptr = acc.as_ref().map_or(0, ptr_of);
    ptrs.push(acc_ptr);
    let n_i = n as i64;
    let mut args: Vec<*mut c_void> = ptrs.iter().map(|p| p as *const u64 as *mut c_void).collect();
    args.push(&n_i as *const i64 as *mut c_void);
    g.launch(
        op,
        &kernel.key,
        &|| kernel.source.clone(),
        grid_for(n, BLOCK),
        BLOCK,
        &mut args,
    )?;
    // the outputs in order: elementwise ones made above, sums converted
    let mut elementwise = outs.into_iter();
    let mut result = Vec::with_capacity(kernel.outputs.len());
    let mut k = 0u64;
    for o in &kernel.outputs {
        match o {
            FusedOut::Elementwise => result.push(elementwise.next().expect("one tensor per elementwise output")),
            FusedOut::Sum(shape) => {
                let (out, y) = alloc_on(op, g, shape, kernel.dtype)?;
                let (from, one) = (acc_ptr + 8 * k, 1i64);
                let mut a: [*mut c_void; 3] = [
                    &from as *const u64 as *mut c_void,
                    &y as *const u64 as *mut c_void,
                    &one as *const i64 as *mut c_void,
                ];
                g.launch(op, &format!("fused_sums|{t}"), &|| sums_source(t), 1, 32, &mut a)?;
                result.push(out);
                k += 1;
            }
        }
    }
    // (the accumulators are freed on the stream, after the conversions)
    drop(acc);
    Ok(result)
}
