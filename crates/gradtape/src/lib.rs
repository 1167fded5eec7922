//! # gradtape
//!
//! TensorFlow's eager automatic differentiation, `tf.GradientTape` and what
//! surrounds it, in pure Rust: an eager tensor runtime whose operations are
//! recorded on gradient tapes and differentiated in reverse mode, to any
//! order.
//!
//! ```
//! use gradtape::{GradientTape, Tensor};
//!
//! let x = Tensor::scalar(3.0f32);
//! let outer = GradientTape::new();
//! let inner = GradientTape::new();
//! let (dy_dx, d2y_dx2) = outer.record(|| {
//!     outer.watch(&x);
//!     let y = inner.record(|| {
//!         inner.watch(&x);
//!         x.mul(&x)
//!     })?;
//!     inner.gradient(&y, &x)
//! }).map(|dy_dx| {
//!     let dy_dx = dy_dx.unwrap();
//!     let d2 = outer.gradient(&dy_dx, &x).unwrap().unwrap();
//!     (dy_dx, d2)
//! })?;
//! assert_eq!(dy_dx.to_scalar::<f32>()?, 6.0);
//! assert_eq!(d2y_dx2.to_scalar::<f32>()?, 2.0);
//! # Ok::<(), gradtape::Error>(())
//! ```
//!
//! Every fallible call returns [`Result`]; the [`Error`] names the op and
//! the shapes or dtypes involved. Sizes are part of that: a shape whose
//! element count overflows is [`Error::ShapeOverflow`], a buffer that cannot
//! be allocated [`Error::OutOfMemory`]; only the documented sugar
//! (`Tensor::zeros` and the other constructors that have a `try_` form,
//! `to_vec_f64`, the operators) panics instead.
//!
//! Layers, each knowing only those below it: [`tensor`] and `kernels`
//! (values and raw compute, with [`error`]), `dispatch` (the one point every
//! op passes, where the transformations that watch ops register themselves
//! as interpreters), `ops` (the differentiable operations, methods on
//! [`Tensor`]), `autodiff` (tapes, forward mode, backprop, variables, the
//! checker), [`function`](mod@function) (traced graph functions); and for training,
//! on top of them: [`random`] (a seeded generator that advances), [`nn`]
//! (layers, initialisers, losses, metrics), [`optim`] (optimizers,
//! schedules, clipping), [`io`] (checkpoints, `.npy`) and [`distributed`]
//! (data-parallel training over MPI, feature `mpi`).

#![warn(missing_docs)]

pub mod distributed;
pub mod error;
pub mod function;
pub mod io;
pub mod nn;
pub mod optim;
pub mod random;
pub mod tensor;

mod autodiff;
mod dispatch;
mod kernels;
mod ops;
mod scoped;

pub use autodiff::backprop::Unconnected;
pub use autodiff::check::{check_gradients, CheckOptions, CheckReport};
pub use autodiff::custom::{custom_gradient, custom_gradient_with_variables, record_gradient, with_gradient_override};
pub use autodiff::forward::{ForwardAccumulator, ForwardGuard};
pub use autodiff::forward_helpers::{hessian, hvp, jvp, jvp_many};
pub use autodiff::functional::{
    grad, implicit_grad, implicit_value_and_grad, make_vjp, value_and_grad, Grad, ImplicitGrad, ImplicitValueAndGrad,
    ValueAndGrad, VariableGrads, VjpFunction,
};
pub use autodiff::gradient::{Gradient, IndexedSlices, SparseClosure, SparseGrads};
pub use autodiff::gradient_tape::{GradientOptions, GradientTape, RecordingGuard};
pub use autodiff::jacobian::JacobianOptions;
pub use autodiff::recompute::{recompute_grad, Recompute};
pub use autodiff::sources::{SourceRef, Sources, Targets};
pub use autodiff::variable::{Variable, VariableBuilder};
pub use dispatch::{vjp, Grads, VjpClosure, VjpFn};
pub use error::{Error, Result};
pub use function::{
    check_traced, cond, function, gradients, while_loop, CompileOptions, CompileStats, ConcreteFunction, Function,
    FunctionOptions, GradientsOptions, Graph, Leaf, TensorSpec, TensorStruct, TracedCheckOptions, TracedCheckReport,
    WhileOptions,
};
pub use function::{vmap, vmap_fallbacks, Vmap, VmapFallback};
pub use kernels::cpu::denormal::set_flush_denormals;
pub use ops::array::strided::{PadMode, Slice};
pub use ops::{AttentionDropout, DataFormat, EinsumPath, HiddenRows, MatrixNorm, Padding, ResizeMethod};
pub use ops::{SELU_ALPHA, SELU_SCALE};
pub use random::Rng;
pub use tensor::{
    allow_tf32, cuda_device_count, cuda_graph_launches, cuda_is_available, emulate_cuda_on_host,
    set_soft_device_placement, soft_device_placement, tf32_allowed, Device,
};
pub use tensor::{bf16, f16, Complex};
pub use tensor::{
    buffer_cache_bytes, clear_buffer_cache, set_buffer_cache_limit, DType, Element, Tensor, TensorId, WeakTensor,
};

/// The crate's internals, for the test binaries (`tests/internals` of
/// `crates/gradtape-tests` holds the tests that were unit tests of the
/// library, so that `cargo test` compiles the library once): not API, no
/// stability, hidden from the docs. Each module mirrors the crate module of its path, re-exporting its
/// `pub` items; an item is `pub` there only where a test names it.
#[doc(hidden)]
pub mod __internals {
    use std::borrow::Cow;

    use crate::function::graph::RunPlan;
    use crate::ops::desc::{DynOp, Op};
    use crate::tensor::layout::Layout;
    use crate::{DType, Element, Graph, Result, Tensor, Variable, VjpFn};

    /// `dispatch::bind` for an op named by a string: offers it to the
    /// listening interpreters and returns its output.
    pub fn bind(op: &'static str, inputs: &[&Tensor], output: Tensor, rule: impl FnOnce(&Tensor) -> VjpFn) -> Tensor {
        crate::dispatch::bind(op, inputs, output, rule)
    }

    /// The crate-private methods of [`Tensor`] the tests call.
    pub trait TensorInternals {
        /// `Tensor::alias`.
        fn alias(&self) -> Tensor;
        /// `Tensor::layout`.
        fn layout(&self) -> &Layout;
        /// `Tensor::buffer`.
        fn buffer<T: Element>(&self) -> &[T];
        /// `Tensor::values`.
        fn values<T: Element>(&self, op: &'static str) -> Result<Cow<'_, [T]>>;
    }

    impl TensorInternals for Tensor {
        fn alias(&self) -> Tensor {
            Tensor::alias(self)
        }
        fn layout(&self) -> &Layout {
            Tensor::layout(self)
        }
        fn buffer<T: Element>(&self) -> &[T] {
            Tensor::buffer(self)
        }
        fn values<T: Element>(&self, op: &'static str) -> Result<Cow<'_, [T]>> {
            Tensor::values(self, op)
        }
    }

    /// The crate-private methods of [`Variable`] the tests call.
    pub trait VariableInternals {
        /// `Variable::current`.
        fn current(&self) -> Tensor;
        /// `Variable::with_value_mut`.
        fn with_value_mut<R>(&self, f: impl FnOnce(&mut Tensor) -> Result<R>) -> Result<R>;
    }

    impl VariableInternals for Variable {
        fn current(&self) -> Tensor {
            Variable::current(self)
        }
        fn with_value_mut<R>(&self, f: impl FnOnce(&mut Tensor) -> Result<R>) -> Result<R> {
            Variable::with_value_mut(self, f)
        }
    }

    /// The crate-private methods of [`Graph`] the tests call.
    pub trait GraphInternals {
        /// `Graph::add_value`.
        fn add_value(&mut self, dtype: DType, shape: &[usize]) -> crate::function::ValueId;
        /// `Graph::run`.
        fn run(&self, args: &[Tensor], plan: &RunPlan) -> Result<Vec<Tensor>>;
        /// `Graph::verify`.
        fn verify(&self) -> Result<()>;
    }

    impl GraphInternals for Graph {
        fn add_value(&mut self, dtype: DType, shape: &[usize]) -> crate::function::ValueId {
            Graph::add_value(self, dtype, shape)
        }
        fn run(&self, args: &[Tensor], plan: &RunPlan) -> Result<Vec<Tensor>> {
            Graph::run(self, args, plan)
        }
        fn verify(&self) -> Result<()> {
            Graph::verify(self)
        }
    }

    /// The crate-private methods of [`Op`] the tests call.
    pub trait OpInternals {
        /// `Op::as_dyn`.
        fn as_dyn<T: DynOp>(&self) -> Option<&T>;
    }

    impl OpInternals for Op {
        fn as_dyn<T: DynOp>(&self) -> Option<&T> {
            Op::as_dyn(self)
        }
    }

    pub mod autodiff {
        pub mod forward {
            pub use crate::autodiff::forward::*;
        }
        pub mod tape {
            pub use crate::autodiff::tape::*;
        }
        pub mod variable {
            pub use crate::autodiff::variable::*;
        }
    }
    pub mod dispatch {
        pub use crate::dispatch::*;
    }
    pub mod function {
        pub mod compile {
            pub mod diag_matmul {
                pub use crate::function::compile::diag_matmul::*;
            }
            pub mod exec {
                pub use crate::function::compile::exec::*;
            }
            pub mod fold {
                pub use crate::function::compile::fold::*;
            }
            pub mod fuse {
                pub use crate::function::compile::fuse::*;
            }
            pub mod kernel {
                pub use crate::function::compile::kernel::*;
                pub mod chain {
                    pub use crate::function::compile::kernel::chain::*;
                }
                pub mod epilogue {
                    pub use crate::function::compile::kernel::epilogue::*;
                }
                pub mod regs {
                    pub use crate::function::compile::kernel::regs::*;
                }
                pub mod scratch {
                    pub use crate::function::compile::kernel::scratch::*;
                }
                pub mod sums {
                    pub use crate::function::compile::kernel::sums::*;
                }
            }
            pub mod concat_of_reshapes {
                pub use crate::function::compile::concat_of_reshapes::*;
            }
            pub mod grads_into_concat {
                pub use crate::function::compile::grads_into_concat::*;
            }
            pub mod pads_to_concat {
                pub use crate::function::compile::pads_to_concat::*;
            }
            pub mod pair_products {
                pub use crate::function::compile::pair_products::*;
            }
            pub mod pipeline {
                pub use crate::function::compile::pipeline::*;
            }
            pub mod sharing {
                pub use crate::function::compile::sharing::*;
            }
            pub mod simplify {
                pub use crate::function::compile::simplify::*;
            }
        }
        pub mod control {
            pub use crate::function::control::*;
        }
        pub mod graph {
            pub use crate::function::graph::*;
        }
        pub mod jacobian {
            pub use crate::function::jacobian::*;
        }
        pub mod passes {
            pub use crate::function::passes::*;
        }
        pub mod sizes {
            pub use crate::function::sizes::*;
        }
        pub mod verify {
            pub use crate::function::verify::*;
        }
    }
    pub mod kernels {
        pub mod cpu {
            pub mod arg_extremum {
                pub use crate::kernels::cpu::arg_extremum::in_place_calls;
            }
            pub mod softmax_columns {
                pub use crate::kernels::cpu::softmax_columns::calls;
            }
            pub mod attention {
                pub use crate::kernels::cpu::attention::*;
            }
            pub mod attention_gemm {
                pub use crate::kernels::cpu::attention_gemm::*;
            }
            pub mod causal_tiles {
                pub use crate::kernels::cpu::causal_tiles::{products, runs_f32};
            }
            pub mod attention_rows {
                pub use crate::kernels::cpu::attention_rows::{dot, exp_sum, probs_and_ds, row_max, vector_rows, zero};
            }
            pub mod complex_fns {
                pub use crate::kernels::cpu::complex_fns::*;
            }
            pub mod counter {
                pub use crate::kernels::cpu::counter::CounterRng;
            }
            pub mod lockstep {
                pub use crate::kernels::cpu::lockstep::*;
            }
            pub mod layer_norm {
                pub use crate::kernels::cpu::layer_norm::{backward, forward};
            }
            pub mod scratch {
                pub use crate::kernels::cpu::scratch::*;
            }
            pub mod conv {
                pub use crate::kernels::cpu::conv::*;
            }
            pub mod decomp {
                pub use crate::kernels::cpu::decomp::*;
            }
            pub mod eig {
                pub use crate::kernels::cpu::eig::*;
            }
            pub mod erf {
                pub use crate::kernels::cpu::erf::*;
            }
            pub mod index {
                pub use crate::kernels::cpu::index::*;
            }
            pub mod math {
                pub use crate::kernels::cpu::math::*;
            }
            pub mod matmul {
                pub use crate::kernels::cpu::matmul::*;
            }
            pub mod narrow_matmul {
                pub use crate::kernels::cpu::narrow_matmul::*;
            }
            pub mod resize {
                pub use crate::kernels::cpu::resize::{Coords, Dims};
            }
            pub mod conv3d {
                pub use crate::kernels::cpu::conv3d::*;
            }
            pub mod pooling {
                pub use crate::kernels::cpu::pooling::*;
            }
            pub mod reduce {
                pub use crate::kernels::cpu::reduce::*;
            }
            pub mod sgemm {
                pub use crate::kernels::cpu::sgemm::*;
            }
            pub mod workers {
                pub use crate::kernels::cpu::workers::*;
            }
        }
        pub mod cuda {
            #[cfg(feature = "cuda")]
            pub mod attention {
                pub use crate::kernels::cuda::attention::*;
            }
            #[cfg(feature = "cuda")]
            pub mod conv {
                pub use crate::kernels::cuda::conv::*;
            }
            pub mod fused {
                pub use crate::kernels::cuda::fused::*;
            }
            #[cfg(feature = "cuda")]
            pub mod index {
                pub use crate::kernels::cuda::index::*;
            }
            #[cfg(feature = "cuda")]
            pub mod runtime {
                pub use crate::kernels::cuda::runtime::*;
            }
            #[cfg(feature = "cuda")]
            pub mod resize {
                pub use crate::kernels::cuda::resize::*;
            }
            #[cfg(feature = "cuda")]
            pub mod scan {
                pub use crate::kernels::cuda::scan::*;
            }
            #[cfg(feature = "cuda")]
            pub mod source {
                pub use crate::kernels::cuda::source::*;
            }
        }
    }
    pub mod ops {
        pub mod array {
            pub mod join {
                pub use crate::ops::array::join::*;
            }
        }
        pub mod desc {
            pub use crate::ops::desc::*;
            pub mod elementwise {
                pub use crate::ops::desc::elementwise::*;
            }
        }
        pub mod linalg {
            pub mod einsum_path {
                pub use crate::ops::linalg::einsum_path::*;
            }
            pub mod matmul_pair {
                pub use crate::ops::linalg::matmul_pair::{pairs_run, MIN_DIM, MIN_FLOPS, PAIRS};
            }
        }
        pub mod math {
            pub mod binary {
                pub use crate::ops::math::binary::*;
            }
            pub mod cuda_expr {
                pub use crate::ops::math::cuda_expr::*;
            }
            pub mod gelu_slope {
                pub use crate::ops::math::gelu_slope::slopes_kept;
            }
            pub mod igamma {
                pub use crate::ops::math::igamma::*;
            }
            pub mod igamma_temme {
                pub use crate::ops::math::igamma_temme::*;
            }
            pub mod table {
                pub use crate::ops::math::table::*;
            }
        }
        pub mod random {
            pub use crate::ops::random::{dropout_mask, keep_from};
        }
        pub mod sorting {
            pub mod sort {
                pub use crate::ops::sorting::sort::*;
            }
        }
    }
    pub mod optim {
        pub mod adam {
            pub use crate::optim::adam::*;
        }
        pub mod half_update {
            pub use crate::optim::half_update::{bf16_round_bits, f16_round_bits};
        }
        pub mod kernel {
            pub use crate::optim::kernel::*;
        }
        pub mod more {
            pub use crate::optim::more::*;
        }
        pub mod rmsprop {
            pub use crate::optim::rmsprop::*;
        }
        pub mod sgd {
            pub use crate::optim::sgd::*;
        }
    }
    pub mod scoped {
        pub use crate::scoped::*;
    }
    pub mod tensor {
        pub mod alloc {
            pub use crate::tensor::alloc::*;
        }
        pub mod layout {
            pub use crate::tensor::layout::*;
        }
        pub mod pool {
            pub use crate::tensor::pool::*;
        }
        pub mod recycle {
            pub use crate::tensor::recycle::*;
        }
    }
}

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
