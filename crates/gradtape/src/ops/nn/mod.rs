//! Neural-network ops, one file per kind:
//!
//! - `softmax.rs`: `softmax`, `log_softmax`;
//! - `cross_entropy.rs`: `softmax_cross_entropy_with_logits` (dense labels),
//!   `sparse_softmax_cross_entropy_with_logits`,
//!   `sigmoid_cross_entropy_with_logits`;
//! - `bias.rs`: `bias_add`;
//! - `conv.rs`: `conv1d`, `conv2d`, `conv2d_transpose`, `depthwise_conv2d`
//!   and the backprop ops that are their gradients;
//! - `pool.rs`: `max_pool2d`, `avg_pool2d`, `avg_pool2d_grad` (and max
//!   pooling's gradient and argmax, internal ops);
//! - `ctc.rs`: `ctc_loss` (dense labels) and its gradient op;
//! - `norm.rs`: `moments`, `batch_normalization`, `layer_normalization`,
//!   `l2_loss`, `embedding_lookup` (compositions of other ops).
//!
//! Each op with a kernel of its own binds with an [`NnOp`](super::desc::NnOp)
//! descriptor, so that it can be traced into a graph and run again there.

mod bias;
mod conv;
mod cross_entropy;
mod ctc;
mod norm;
mod pool;
mod softmax;

pub use conv::Padding;
pub(crate) use ctc::ctc_loss_grad;
pub(crate) use pool::{max_pool2d_argmax, max_pool2d_with_argmax, max_pool_grad};
