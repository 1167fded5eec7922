//! The CUDA backend (feature `cuda`): the runtime ([`runtime`]: GPUs,
//! memory, NVRTC, launches), the kernels' CUDA C ([`source`]) and their
//! entry points ([`launch`]); the graph compiler's fused elementwise
//! programs run as kernels of [`fused`]; fused attention is [`attention`]'s.
//! Without the feature, the same entry points answer that the build has no
//! CUDA.

/// `Variable::apply_gradient_descent`'s step on a GPU, as an optimizer
/// rule's CUDA form (`w`, `g`, `p[0]` the learning rate): the product
/// rounded before the difference, as the CPU's `w - lr·g` (no fused
/// multiply-add).
pub(crate) const GRADIENT_DESCENT: &str =
    "w = w - (sizeof(T) == 4 ? (T)__fmul_rn((float)p[0], (float)g) : (T)__dmul_rn(p[0], (double)g));";

/// Kernel arguments: pointers to each value, in the kernel's order.
#[cfg(feature = "cuda")]
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        [$(&$a as *const _ as *mut std::ffi::c_void),*]
    };
}

#[cfg(feature = "cuda")]
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod attention;
#[cfg(feature = "cuda")]
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod conv;
#[cfg(feature = "cuda")]
mod conv_groups;
pub(crate) mod fused;
#[cfg(feature = "cuda")]
pub(crate) mod graph;
#[cfg(feature = "cuda")]
pub(crate) mod index;
#[cfg(feature = "cuda")]
mod launch;
#[cfg(feature = "cuda")]
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod resize;
#[cfg(feature = "cuda")]
pub(crate) mod runtime;
#[cfg(feature = "cuda")]
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod scan;
#[cfg(feature = "cuda")]
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod source;

/// The integer ops' C expressions (of `a` and `b`, of type `TX`: `int` or
/// `long long`), as the CPU computes them: sums, differences and
/// products wrap (computed unsigned, where overflow is defined, and
/// converted back: two's complement), the rest exact.
pub const INT_ADD: &str = "(TX)((unsigned long long)a + (unsigned long long)b)";
/// See [`INT_ADD`].
pub const INT_SUB: &str = "(TX)((unsigned long long)a - (unsigned long long)b)";
/// See [`INT_ADD`].
pub const INT_MUL: &str = "(TX)((unsigned long long)a * (unsigned long long)b)";
/// See [`INT_ADD`].
pub const INT_MAX: &str = "(a >= b ? a : b)";
/// See [`INT_ADD`].
pub const INT_MIN: &str = "(a <= b ? a : b)";
/// One-input integer ops' C expressions (of `v`, of type `TX`, and the
/// attribute `c0`), wrapping as [`INT_ADD`]: `-v`, `|v|` (the most
/// negative value stays itself), `v²`, the sign, relu, `v + c0`, `v · c0`.
pub const INT_NEG: &str = "(TX)(0ULL - (unsigned long long)v)";
/// See [`INT_NEG`].
pub const INT_ABS: &str = "(v < 0 ? (TX)(0ULL - (unsigned long long)v) : v)";
/// See [`INT_NEG`].
pub const INT_SQUARE: &str = "(TX)((unsigned long long)v * (unsigned long long)v)";
/// See [`INT_NEG`].
pub const INT_SIGN: &str = "(TX)((v > 0) - (v < 0))";
/// See [`INT_NEG`].
pub const INT_RELU: &str = "(v < 0 ? (TX)0 : v)";
/// See [`INT_NEG`].
pub const INT_ADD_C: &str = "(TX)((unsigned long long)v + (unsigned long long)(TX)c0)";
/// See [`INT_NEG`].
pub const INT_MUL_C: &str = "(TX)((unsigned long long)v * (unsigned long long)(TX)c0)";
/// Integer division truncating toward zero, `MIN / -1` wrapping to `MIN`
/// (C leaves it undefined), as the CPU's `wrapping_div`; the divisor is
/// never 0 (the callers check): `a / b`.
pub const INT_DIV: &str = "(b == (TX)-1 ? (TX)(0ULL - (unsigned long long)a) : a / b)";
/// [`INT_DIV`] by the attribute `c0`: `v / c0`.
pub const INT_DIV_C: &str = "((TX)c0 == (TX)-1 ? (TX)(0ULL - (unsigned long long)v) : v / (TX)c0)";

#[cfg(feature = "cuda")]
pub(crate) use attention::{backward as attention_backward, forward as attention_forward};
#[cfg(feature = "cuda")]
pub(crate) use conv::{
    avg_pool, conv, conv_backprop_filter, conv_backprop_input, depthwise, max_pool, max_pool_grad, Win,
};
#[cfg(feature = "cuda")]
pub(crate) use fused::run_fused;
#[cfg(feature = "cuda")]
pub(crate) use index::{
    concat, gather, gather_nd, one_hot, pad, scatter_add, scatter_nd, scatter_update, segment_reduce, strided_embed,
};
#[cfg(feature = "cuda")]
pub(crate) use launch::*;
#[cfg(feature = "cuda")]
pub(crate) use resize::{resize, Which as ResizeWhich};
#[cfg(feature = "cuda")]
pub(crate) use runtime::{device_count, CudaMem};
#[cfg(feature = "cuda")]
pub(crate) use scan::{argsort, scan};

#[cfg(not(feature = "cuda"))]
mod absent {
    use crate::error::{Error, Result};
    use crate::tensor::{DType, Device, Tensor};

    fn absent(op: &'static str, ordinal: usize) -> Error {
        Error::Device {
            op,
            device: Device::Cuda(ordinal),
            msg: "this build of gradtape has no GPU support (build it with the `cuda` feature)".into(),
        }
    }

    pub(crate) fn device_count() -> Result<usize> {
        Err(absent("cuda_device_count", 0))
    }

    pub(crate) fn upload(op: &'static str, _: &Tensor, ordinal: usize) -> Result<Tensor> {
        Err(absent(op, ordinal))
    }

    pub(crate) fn filled(op: &'static str, _: &[usize], _: f64, _: DType, ordinal: usize) -> Result<Tensor> {
        Err(absent(op, ordinal))
    }

    // (never reached: without the feature every device tensor is on an
    // emulated GPU, whose ops take the host path)
    pub(crate) fn unary(op: &'static str, _: &Tensor, _: &str, _: &str, _: [f64; 2]) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn binary(
        op: &'static str,
        _: &Tensor,
        _: &Tensor,
        _: &[usize],
        _: &str,
        _: &str,
        _: DType,
    ) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn map_bool(op: &'static str, _: &Tensor, _: &str) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn cast(op: &'static str, _: &Tensor, _: DType) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn select(op: &'static str, _: &Tensor, _: &Tensor, _: &Tensor, _: &[usize]) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn reduce(op: &'static str, _: &str, _: &Tensor, _: &[usize]) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn arg_extremum(op: &'static str, _: &Tensor, _: usize, _: bool) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn scan(op: &'static str, _: &Tensor, _: usize, _: bool, _: bool, _: bool) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn argsort(op: &'static str, _: &Tensor, _: usize, _: bool) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    /// Which resize (nothing runs without the feature).
    #[derive(Clone, Copy, Debug)]
    pub(crate) enum ResizeWhich {
        Bilinear,
        BilinearGrad,
        Nearest,
        NearestGrad,
    }

    pub(crate) fn resize(
        op: &'static str,
        _: &Tensor,
        _: ResizeWhich,
        _: crate::kernels::cpu::resize::Dims,
        _: crate::kernels::cpu::resize::Coords,
    ) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn int_map(op: &'static str, _: &Tensor, _: &str, _: f64) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn depthwise(op: &'static str, _: u8, _: &Tensor, _: &Tensor, _: &Geom) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn softmax(op: &'static str, _: &Tensor, _: usize, _: bool) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn sparse_xent(op: &'static str, _: &Tensor, _: &Tensor) -> Result<(Tensor, Tensor)> {
        Err(absent(op, 0))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn optimizer_update(
        op: &'static str,
        _: &Tensor,
        _: &[&Tensor],
        _: &Tensor,
        _: &str,
        _: &[f64],
        _: f64,
        _: f64,
    ) -> Result<Vec<Tensor>> {
        Err(absent(op, 0))
    }

    pub(crate) fn matmul(op: &'static str, _: &Tensor, _: &Tensor, _: bool, _: bool, _: &[usize]) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn run_fused(op: &'static str, _: &super::fused::FusedKernel, _: &[Tensor]) -> Result<Vec<Tensor>> {
        Err(absent(op, 0))
    }

    use crate::kernels::cpu::attention::Dims;

    pub(crate) fn attention_forward(
        op: &'static str,
        _: &Dims,
        _: &[usize],
        _: &Tensor,
        _: &Tensor,
        _: &Tensor,
        _: Option<&Tensor>,
    ) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention_backward(
        op: &'static str,
        _: &Dims,
        _: &[usize],
        _: &Tensor,
        _: &Tensor,
        _: &Tensor,
        _: Option<&Tensor>,
        _: &Tensor,
        _: &Tensor,
    ) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    use crate::kernels::cpu::conv::Geom;
    use crate::kernels::cpu::conv3d::Geom3;

    /// A window op's geometry (nothing without the feature).
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Win;

    impl Win {
        pub(crate) fn two(_: &Geom) -> Win {
            Win
        }

        pub(crate) fn three(_: &Geom3) -> Win {
            Win
        }
    }

    pub(crate) fn conv(op: &'static str, _: &Tensor, _: &Tensor, _: &Win) -> Result<(Tensor, Tensor)> {
        Err(absent(op, 0))
    }

    pub(crate) fn conv_backprop_input(op: &'static str, _: &Tensor, _: &Tensor, _: &Win) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn conv_backprop_filter(
        op: &'static str,
        _: &Tensor,
        _: Option<&Tensor>,
        _: &Tensor,
        _: &Win,
    ) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn max_pool(op: &'static str, _: &Tensor, _: &Win) -> Result<(Tensor, Tensor)> {
        Err(absent(op, 0))
    }

    pub(crate) fn max_pool_grad(op: &'static str, _: &Tensor, _: &Tensor, _: &[usize]) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn avg_pool(op: &'static str, _: &Tensor, _: &Win, _: bool) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn gather(op: &'static str, _: &Tensor, _: &Tensor, _: usize, _: &[usize]) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn scatter_add(
        op: &'static str,
        _: &Tensor,
        _: &Tensor,
        _: usize,
        _: usize,
        _: usize,
        _: usize,
        _: &[usize],
        _: Option<&[usize]>,
    ) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn segment_reduce(
        op: &'static str,
        _: &Tensor,
        _: &[i64],
        _: usize,
        _: &str,
        _: bool,
        _: &[usize],
    ) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn scatter_update(op: &'static str, _: &Tensor, _: &Tensor, _: &[usize], _: usize) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn gather_nd(op: &'static str, _: &Tensor, _: &Tensor, _: usize, _: &[usize]) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn scatter_nd(op: &'static str, _: &Tensor, _: &Tensor, _: usize, _: &[usize]) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn concat(op: &'static str, _: &[&Tensor], _: usize, _: &[usize]) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn pad(op: &'static str, _: &Tensor, _: &[(usize, usize)], _: &[usize]) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    pub(crate) fn strided_embed(
        op: &'static str,
        _: &Tensor,
        _: &[usize],
        _: &[(usize, isize, usize)],
    ) -> Result<Tensor> {
        Err(absent(op, 0))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn one_hot(
        op: &'static str,
        _: &Tensor,
        _: usize,
        _: usize,
        _: f64,
        _: f64,
        _: &[usize],
        _: DType,
    ) -> Result<Tensor> {
        Err(absent(op, 0))
    }
}
#[cfg(not(feature = "cuda"))]
pub(crate) use absent::*;
