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
pub use ops::{AttentionDropout, DataFormat, EinsumPath, MatrixNorm, Padding, ResizeMethod};
pub use ops::{SELU_ALPHA, SELU_SCALE};
pub use random::Rng;
pub use tensor::{allow_tf32, cuda_device_count, cuda_is_available, emulate_cuda_on_host, tf32_allowed, Device};
pub use tensor::{bf16, f16, Complex};
pub use tensor::{
    buffer_cache_bytes, clear_buffer_cache, set_buffer_cache_limit, DType, Element, Tensor, TensorId, WeakTensor,
};

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
