//! Neural-network ops, one file per kind:
//!
//! - `attention.rs`: `scaled_dot_product_attention` (fused, with its
//!   fused backward op);
//! - `gqa.rs`: `grouped_query_attention` (fewer key/value heads than
//!   query heads, through the fused op);
//! - `softmax.rs`: `softmax`, `log_softmax`;
//! - `cross_entropy.rs`: `softmax_cross_entropy_with_logits` (dense labels),
//!   `sparse_softmax_cross_entropy_with_logits`,
//!   `sigmoid_cross_entropy_with_logits`;
//! - `bias.rs`: `bias_add`;
//! - `conv.rs`: `conv1d`, `conv2d`, `conv2d_transpose`, `depthwise_conv2d`
//!   and the backprop ops that are their gradients;
//! - `conv3d.rs`: `conv3d` and its two backprop ops;
//! - `bilinear.rs`: what the dense convolutions of every rank share (checks
//!   of attributes and operands, the gradient and tangent rules of their
//!   three bilinear ops);
//! - `pool.rs`: `max_pool2d`, `avg_pool2d`, `avg_pool2d_grad` (and max
//!   pooling's gradient and argmax, internal ops), `max_pool1d` and
//!   `avg_pool1d` (the 2-D pools over a height of 1);
//! - `pool3d.rs`: `max_pool3d`, `avg_pool3d`, `avg_pool3d_grad`;
//! - `format.rs`: [`DataFormat`] and the channels-first (`NCHW`, `NCDHW`)
//!   forms of the convolutions, pools and `bias_add` (transposes around
//!   the channels-last ops), and `separable_conv2d` (depthwise then 1x1);
//! - `ctc.rs`: `ctc_loss` (dense labels) and its gradient op;
//! - `norm.rs`: `moments`, `batch_normalization`, `layer_normalization`,
//!   `rms_normalization`, `l2_loss`, `embedding_lookup` (compositions of
//!   other ops);
//! - `layer_norm.rs`: `layer_normalization` over trailing axes as one op
//!   (`LayerNorm`, fused), with its fused backward op;
//! - `lstm_cell.rs`: `lstm_cell`, an LSTM step's gates and state update as
//!   one op (`LstmCell`, fused), with its fused backward op;
//! - `lstm_sequence.rs`: `lstm_sequence`, an LSTM's recurrence over a whole
//!   sequence as one op (`LstmSequence`), with its fused backward op (the
//!   recurrent kernel's gradient one product over all steps);
//! - `gru_sequence.rs`: `gru_sequence`, a GRU's recurrence over a whole
//!   sequence as one op (`GruSequence`), with its fused backward op;
//!   `gru_steps.rs` the same with differentiable ops (the step that
//!   defines it, the second order, the JVP);
//! - `rotary.rs`: the rotary position embedding's rotation as one op
//!   (`Rotary`, its own transpose for the gradient);
//! - `recurrence.rs`: what the two recurrences share (the packed parts,
//!   the step loops' products, how the ops are recorded, so that parts
//!   without a cotangent cost nothing).
//!
//! Each op with a kernel of its own binds with an [`NnOp`](super::desc::NnOp)
//! descriptor, so that it can be traced into a graph and run again there.

mod attention;
mod bias;
mod bilinear;
mod conv;
mod conv3d;
mod cross_entropy;
mod ctc;
mod format;
mod gqa;
mod gru_sequence;
mod gru_steps;
mod layer_norm;
mod lstm_cell;
mod lstm_sequence;
mod norm;
mod pool;
mod pool3d;
mod recurrence;
mod rotary;
mod softmax;

pub(crate) use attention::{
    attention_grad_into, attention_grad_packed, attention_packed, causal_band, Spec as AttentionSpec,
};
pub use attention::{AttentionDropout, HiddenRows};
pub use conv::Padding;
pub(crate) use conv::{conv2d_backprop_filter_from_cols, conv2d_with_cols};
pub(crate) use cross_entropy::{sparse_xent_and_softmax, sparse_xent_grad, sparse_xent_grad_from_softmax};
pub(crate) use ctc::ctc_loss_grad;
pub use format::DataFormat;
pub(crate) use gqa::grouped;
pub(crate) use gru_sequence::{gru_sequence_grad_flat, gru_sequence_packed, gru_step};
pub(crate) use layer_norm::{
    grad_kernel as layer_norm_grad_kernel, layer_norm, layer_norm_grad, layer_norm_grad_batched,
};
pub(crate) use lstm_cell::{lstm_cell_grad_flat, lstm_cell_packed};
pub(crate) use lstm_sequence::{lstm_sequence_grad_flat, lstm_sequence_packed};
pub(crate) use pool::{max_pool2d_argmax, max_pool2d_with_argmax, max_pool_grad};
pub(crate) use pool3d::max_pool3d_argmax;
pub(crate) use rotary::rotary;

use crate::error::Result;
use crate::kernels::cpu::elementwise::cast;
use crate::tensor::{DType, Tensor};

/// Runs the `f32` computation `f` on `f32` copies of half-precision
/// (`f16`/`bf16`) operands and rounds its result back to their dtype once:
/// how the window ops (convolutions, pools, resizes, CTC) handle half
/// types, as TensorFlow's CPU kernels do (an `f32` accumulator; one
/// rounding of each output). The casts are raw (not recorded): the op that
/// calls this binds the half result with its own rule. The operands are
/// already checked to share one half dtype.
pub(crate) fn via_f32(operands: &[&Tensor], f: impl FnOnce(&[Tensor]) -> Result<Tensor>) -> Result<Tensor> {
    let to = operands.first().map_or(DType::F32, |t| t.dtype());
    let wide = operands
        .iter()
        .map(|t| cast(t, DType::F32))
        .collect::<Result<Vec<_>>>()?;
    cast(&f(&wide)?, to)
}
