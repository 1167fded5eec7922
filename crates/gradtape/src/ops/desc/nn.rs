//! Descriptors of the neural-network ops: softmax and the cross-entropies,
//! `bias_add`, 2-D and 3-D convolutions and their gradients, 2-D and 3-D
//! pooling and their gradients, the CTC loss and its gradient.
//!
//! Normalisation (`moments`, `batch_normalization`, and
//! `layer_normalization` where it is not the fused [`NnOp::LayerNorm`]),
//! `conv1d`, `conv2d_transpose`, `separable_conv2d`, 1-D pooling and the
//! channels-first (`DataFormat::ChannelsFirst`) forms are compositions of
//! these and other ops and have no descriptor of their own. Max pooling's gradient reads where
//! each window's maximum was: that is its own node
//! ([`NnOp::MaxPoolArgmax`], not differentiable, `i64`), an input of
//! [`NnOp::MaxPoolGrad`], so a traced gradient looks the positions up again
//! at each run instead of freezing those of the tracing call.

use std::fmt;

use super::Outputs;
use crate::error::{Error, Result};
use crate::kernels::cpu::conv::Padding;
use crate::ops::nn::AttentionSpec;
use crate::tensor::Tensor;

/// The attributes of a 2-D convolution (dense or depthwise), validated.
/// A dense convolution's groups are no attribute: each node infers them
/// from its operands' shapes (input channels over the filter's input
/// channels), as TensorFlow's `Conv2D` does, so a replayed graph groups as
/// the traced call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvAttrs {
    /// Depthwise (`depthwise_conv2d`) rather than dense (`conv2d`).
    pub depthwise: bool,
    /// `[height, width]` strides, each `>= 1`.
    pub strides: [usize; 2],
    /// `[height, width]` dilations, each `>= 1`.
    pub dilations: [usize; 2],
    /// Padding mode.
    pub padding: Padding,
}

impl ConvAttrs {
    fn strides(&self) -> [i64; 2] {
        self.strides.map(|s| s as i64)
    }
    fn dilations(&self) -> [i64; 2] {
        self.dilations.map(|s| s as i64)
    }
}

/// The attributes of a 2-D pooling window, as the caller gave them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolAttrs {
    /// `[height, width]` of the window.
    pub ksize: [i64; 2],
    /// `[height, width]` strides.
    pub strides: [i64; 2],
    /// Padding mode.
    pub padding: Padding,
}

/// The attributes of a 3-D convolution, validated (groups inferred from
/// the shapes, as [`ConvAttrs`]').
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conv3Attrs {
    /// `[depth, height, width]` strides, each `>= 1`.
    pub strides: [usize; 3],
    /// `[depth, height, width]` dilations, each `>= 1`.
    pub dilations: [usize; 3],
    /// Padding mode.
    pub padding: Padding,
}

impl Conv3Attrs {
    fn strides(&self) -> [i64; 3] {
        self.strides.map(|s| s as i64)
    }
    fn dilations(&self) -> [i64; 3] {
        self.dilations.map(|s| s as i64)
    }
}

/// The attributes of a 3-D pooling window, as the caller gave them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pool3Attrs {
    /// `[depth, height, width]` of the window.
    pub ksize: [i64; 3],
    /// `[depth, height, width]` strides.
    pub strides: [i64; 3],
    /// Padding mode.
    pub padding: Padding,
}

/// A neural-network op. Inputs are listed in the order the op's node reads
/// them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NnOp {
    /// `softmax(x, axis)`, the axis normalised (`>= 0`).
    Softmax(isize),
    /// `log_softmax(x, axis)`, the axis normalised.
    LogSoftmax(isize),
    /// `sparse_softmax_cross_entropy_with_logits(labels, logits)`.
    SparseSoftmaxCrossEntropy,
    /// Its gradient with respect to the logits `(labels, logits, g)`: `g[..,
    /// None] · (softmax(logits) − one_hot(labels))` (differentiable again).
    SparseSoftmaxCrossEntropyGrad,
    /// `sigmoid_cross_entropy_with_logits(labels, logits)`.
    SigmoidCrossEntropy,
    /// `bias_add(x, bias)`.
    BiasAdd,
    /// A convolution `(x, filter)`.
    Conv(ConvAttrs),
    /// A convolution's input gradient `(filter, dy)`, of the given input
    /// sizes (NHWC).
    ConvBackpropInput(ConvAttrs, [usize; 4]),
    /// A convolution's filter gradient `(x, dy)`, of the given filter sizes
    /// (HWIO).
    ConvBackpropFilter(ConvAttrs, [usize; 4]),
    /// `max_pool2d(x)`.
    MaxPool(PoolAttrs),
    /// The flat position in `x` of each window's maximum (`i64`, the pooled
    /// shape flattened); not differentiable.
    MaxPoolArgmax(PoolAttrs),
    /// Max pooling's gradient `(dy, argmax)`: `dy` added at the positions,
    /// giving the input shape.
    MaxPoolGrad([usize; 4]),
    /// `avg_pool2d(x)`.
    AvgPool(PoolAttrs),
    /// `avg_pool2d_grad(dy)` for the given input shape.
    AvgPoolGrad(PoolAttrs, [usize; 4]),
    /// `ctc_loss(labels, logits, label_length, logit_length)`, time-major
    /// logits, with the given blank index (`>= 0`).
    CtcLoss(usize),
    /// The gradient of the summed CTC losses with respect to the logits
    /// (same inputs); not differentiable again.
    CtcLossGrad(usize),
    /// `conv3d(x, filter)`.
    Conv3D(Conv3Attrs),
    /// `conv3d_backprop_input(filter, dy)`, of the given input sizes (NDHWC).
    Conv3DBackpropInput(Conv3Attrs, [usize; 5]),
    /// `conv3d_backprop_filter(x, dy)`, of the given filter sizes (DHWIO).
    Conv3DBackpropFilter(Conv3Attrs, [usize; 5]),
    /// `max_pool3d(x)`.
    MaxPool3D(Pool3Attrs),
    /// The flat position in `x` of each 3-D window's maximum (`i64`); not
    /// differentiable.
    MaxPool3DArgmax(Pool3Attrs),
    /// 3-D max pooling's gradient `(dy, argmax)`, giving the input shape.
    MaxPool3DGrad([usize; 5]),
    /// `avg_pool3d(x)`.
    AvgPool3D(Pool3Attrs),
    /// `avg_pool3d_grad(dy)` for the given input shape.
    AvgPool3DGrad(Pool3Attrs, [usize; 5]),
    /// Fused scaled dot-product attention `(q, k, v[, additive mask])`: the
    /// packed rows `[..., tq, dv + 1]` (each output row, then its
    /// log-sum-exp), kept whole by the compiler.
    Attention {
        /// Query `i` sees keys `j <= i` only.
        causal: bool,
        /// The factor of `q·k`.
        scale: super::F64,
        /// The dropout rate of the probabilities; above 0, the last input
        /// is the seed (an `i64` scalar).
        dropout: super::F64,
        /// What the rows that see no key give.
        hidden: crate::ops::nn::HiddenRows,
    },
    /// Attention's fused backward pass `(q, k, v, packed rows, output
    /// cotangent[, mask])`: `dq`, `dk`, `dv` flattened per batch element
    /// (differentiable again, through the unfused composite).
    AttentionGrad {
        /// As [`NnOp::Attention`].
        causal: bool,
        /// As [`NnOp::Attention`].
        scale: super::F64,
        /// As [`NnOp::Attention`].
        dropout: super::F64,
        /// As [`NnOp::Attention`].
        hidden: crate::ops::nn::HiddenRows,
    },
    /// One LSTM step's gates and state update `(z, c)` (`lstm_cell`): `h`
    /// then `c'` packed along axis 0.
    LstmCell,
    /// `LstmCell`'s fused backward pass `(z, c, packed cotangent)`: `dz`
    /// then `dc`, flattened (differentiable again, by a VJP written with
    /// differentiable ops).
    LstmCellGrad,
    /// An LSTM's recurrence over a sequence `(xw, recurrent kernel, h0,
    /// c0)` (`lstm_sequence`): every step's `h`, `c` and gates' `z`,
    /// packed flat.
    LstmSequence,
    /// `LstmSequence`'s fused backward pass `(kernel, h0, c0, hs, cs, zs,
    /// their cotangents)` (the packed output's parts; an absent cotangent
    /// is an empty vector): `dxw`, `dW`, `dh0`, `dc0`, flattened
    /// (differentiable again, by a VJP written with differentiable ops).
    LstmSequenceGrad,
    /// A GRU's recurrence over a sequence `(xw, recurrent kernel,
    /// recurrent bias, h0)` (`gru_sequence`): every step's `h` and its
    /// `[z, r, h̃, m_h]`, packed flat.
    GruSequence,
    /// `GruSequence`'s fused backward pass `(kernel, h0, hs, gates, their
    /// cotangents)` (an absent cotangent is an empty vector): `dxw`, `dR`,
    /// `db`, `dh0`, flattened (differentiable again).
    GruSequenceGrad,
    /// Fused layer normalisation over the last `axes` dims `(x[, gamma][,
    /// beta])`, `gamma` and `beta` vectors of those dims' size.
    LayerNorm {
        /// How many trailing dims are normalised.
        axes: usize,
        /// Added to the variance.
        eps: super::F64,
        /// Whether `gamma` is an input.
        gamma: bool,
        /// Whether `beta` is an input.
        beta: bool,
    },
    /// LayerNorm's fused backward pass `(x[, gamma], dy)`: `dx`, `dgamma`,
    /// `dbeta` in one vector (differentiable again).
    LayerNormGrad {
        /// As [`NnOp::LayerNorm`].
        axes: usize,
        /// As [`NnOp::LayerNorm`].
        eps: super::F64,
        /// As [`NnOp::LayerNorm`].
        gamma: bool,
    },
    /// The rotary position embedding's rotation `(x, cos, sin)` of the
    /// halves of `x`'s last axis (`ops::nn::rotary`), by the tables
    /// (`[positions, features / 2]`, constants) of the positions along
    /// the axis `seq_from_end + 1` before the last.
    Rotary {
        /// Axes between the positions' axis and the last one.
        seq_from_end: usize,
        /// Rotates by `−θ` (the transpose: the gradient).
        inverse: bool,
    },
}

impl NnOp {
    /// The op's name, as recorded on tapes.
    pub fn name(&self) -> &'static str {
        match self {
            NnOp::Softmax(_) => "Softmax",
            NnOp::LogSoftmax(_) => "LogSoftmax",
            NnOp::SparseSoftmaxCrossEntropy => "SparseSoftmaxCrossEntropyWithLogits",
            NnOp::SparseSoftmaxCrossEntropyGrad => "SparseSoftmaxCrossEntropyWithLogitsGrad",
            NnOp::SigmoidCrossEntropy => "SigmoidCrossEntropyWithLogits",
            NnOp::BiasAdd => "BiasAdd",
            NnOp::Conv(c) if c.depthwise => "DepthwiseConv2dNative",
            NnOp::Conv(_) => "Conv2D",
            NnOp::ConvBackpropInput(c, _) if c.depthwise => "DepthwiseConv2dNativeBackpropInput",
            NnOp::ConvBackpropInput(..) => "Conv2DBackpropInput",
            NnOp::ConvBackpropFilter(c, _) if c.depthwise => "DepthwiseConv2dNativeBackpropFilter",
            NnOp::ConvBackpropFilter(..) => "Conv2DBackpropFilter",
            NnOp::MaxPool(_) => "MaxPool",
            NnOp::MaxPoolArgmax(_) => "MaxPoolArgmax",
            NnOp::MaxPoolGrad(_) => "MaxPoolGrad",
            NnOp::AvgPool(_) => "AvgPool",
            NnOp::AvgPoolGrad(..) => "AvgPoolGrad",
            NnOp::CtcLoss(_) => "CTCLoss",
            NnOp::CtcLossGrad(_) => "CTCLossGrad",
            NnOp::Conv3D(_) => "Conv3D",
            NnOp::Conv3DBackpropInput(..) => "Conv3DBackpropInputV2",
            NnOp::Conv3DBackpropFilter(..) => "Conv3DBackpropFilterV2",
            NnOp::MaxPool3D(_) => "MaxPool3D",
            NnOp::MaxPool3DArgmax(_) => "MaxPool3DArgmax",
            NnOp::MaxPool3DGrad(_) => "MaxPool3DGrad",
            NnOp::AvgPool3D(_) => "AvgPool3D",
            NnOp::AvgPool3DGrad(..) => "AvgPool3DGrad",
            NnOp::Attention { .. } => "Attention",
            NnOp::AttentionGrad { .. } => "AttentionGrad",
            NnOp::LstmCell => "LstmCell",
            NnOp::LstmCellGrad => "LstmCellGrad",
            NnOp::LstmSequence => "LstmSequence",
            NnOp::LstmSequenceGrad => "LstmSequenceGrad",
            NnOp::GruSequence => "GruSequence",
            NnOp::GruSequenceGrad => "GruSequenceGrad",
            NnOp::LayerNorm { .. } => "LayerNorm",
            NnOp::LayerNormGrad { .. } => "LayerNormGrad",
            NnOp::Rotary { .. } => "Rotary",
        }
    }

    /// Runs the op again through its public method.
    pub fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let y = match (self, inputs) {
            (NnOp::Softmax(a), [x]) => x.softmax(*a)?,
            (NnOp::LogSoftmax(a), [x]) => x.log_softmax(*a)?,
            (NnOp::SparseSoftmaxCrossEntropy, [labels, logits]) => {
                Tensor::sparse_softmax_cross_entropy_with_logits(labels, logits)?
            }
            (NnOp::SparseSoftmaxCrossEntropyGrad, [labels, logits, g]) => {
                crate::ops::nn::sparse_xent_grad(labels, logits, g)?
            }
            (NnOp::SigmoidCrossEntropy, [labels, logits]) => Tensor::sigmoid_cross_entropy_with_logits(labels, logits)?,
            (NnOp::BiasAdd, [x, b]) => x.bias_add(b)?,
            (NnOp::Conv(c), [x, f]) if c.depthwise => x.depthwise_conv2d(f, c.strides(), c.padding, c.dilations())?,
            (NnOp::Conv(c), [x, f]) => x.conv2d(f, c.strides(), c.padding, c.dilations())?,
            (NnOp::ConvBackpropInput(c, s), [f, dy]) if c.depthwise => {
                Tensor::depthwise_conv2d_backprop_input(s, f, dy, c.strides(), c.padding, c.dilations())?
            }
            (NnOp::ConvBackpropInput(c, s), [f, dy]) => {
                Tensor::conv2d_backprop_input(s, f, dy, c.strides(), c.padding, c.dilations())?
            }
            (NnOp::ConvBackpropFilter(c, s), [x, dy]) if c.depthwise => {
                Tensor::depthwise_conv2d_backprop_filter(x, s, dy, c.strides(), c.padding, c.dilations())?
            }
            (NnOp::ConvBackpropFilter(c, s), [x, dy]) => {
                Tensor::conv2d_backprop_filter(x, s, dy, c.strides(), c.padding, c.dilations())?
            }
            (NnOp::MaxPool(p), [x]) => x.max_pool2d(p.ksize, p.strides, p.padding)?,
            (NnOp::MaxPoolArgmax(p), [x]) => crate::ops::nn::max_pool2d_argmax(x, *p)?,
            (NnOp::MaxPoolGrad(s), [dy, arg]) => crate::ops::nn::max_pool_grad(dy, arg, s)?,
            (NnOp::AvgPool(p), [x]) => x.avg_pool2d(p.ksize, p.strides, p.padding)?,
            (NnOp::AvgPoolGrad(p, s), [dy]) => dy.avg_pool2d_grad(s, p.ksize, p.strides, p.padding)?,
            (NnOp::CtcLoss(b), [labels, x, ll, tl]) => Tensor::ctc_loss(labels, x, ll, tl, true, *b as i64)?,
            (NnOp::CtcLossGrad(b), [labels, x, ll, tl]) => crate::ops::nn::ctc_loss_grad(labels, x, ll, tl, *b)?,
            (NnOp::Conv3D(c), [x, f]) => x.conv3d(f, c.strides(), c.padding, c.dilations())?,
            (NnOp::Conv3DBackpropInput(c, s), [f, dy]) => {
                Tensor::conv3d_backprop_input(s, f, dy, c.strides(), c.padding, c.dilations())?
            }
            (NnOp::Conv3DBackpropFilter(c, s), [x, dy]) => {
                Tensor::conv3d_backprop_filter(x, s, dy, c.strides(), c.padding, c.dilations())?
            }
            (NnOp::MaxPool3D(p), [x]) => x.max_pool3d(p.ksize, p.strides, p.padding)?,
            (NnOp::MaxPool3DArgmax(p), [x]) => crate::ops::nn::max_pool3d_argmax(x, *p)?,
            (NnOp::MaxPool3DGrad(s), [dy, arg]) => crate::ops::nn::max_pool_grad(dy, arg, s)?,
            (NnOp::AvgPool3D(p), [x]) => x.avg_pool3d(p.ksize, p.strides, p.padding)?,
            (NnOp::AvgPool3DGrad(p, s), [dy]) => dy.avg_pool3d_grad(s, p.ksize, p.strides, p.padding)?,
            (
                NnOp::Attention {
                    causal,
                    scale,
                    dropout,
                    hidden,
                },
                [q, k, v, rest @ ..],
            ) => {
                let a = AttentionSpec::from_operands(self.name(), rest, *causal, scale.0, dropout.0, *hidden)?;
                crate::ops::nn::attention_packed(q, k, v, &a)?
            }
            (
                NnOp::AttentionGrad {
                    causal,
                    scale,
                    dropout,
                    hidden,
                },
                [q, k, v, p, g, rest @ ..],
            ) => {
                let a = AttentionSpec::from_operands(self.name(), rest, *causal, scale.0, dropout.0, *hidden)?;
                crate::ops::nn::attention_grad_packed(q, k, v, &a, p, g)?
            }
            (NnOp::LstmCell, [z, c]) => crate::ops::nn::lstm_cell_packed(z, c)?,
            (NnOp::LstmCellGrad, [z, c, g]) => crate::ops::nn::lstm_cell_grad_flat(z, c, g)?,
            (NnOp::LstmSequence, [xw, w, h0, c0]) => crate::ops::nn::lstm_sequence_packed(xw, w, h0, c0)?,
            (NnOp::LstmSequenceGrad, [w, h0, c0, hs, cs, zs, gh, gc, gz]) => {
                crate::ops::nn::lstm_sequence_grad_flat(w, h0, c0, [hs, cs, zs], [gh, gc, gz])?
            }
            (NnOp::GruSequence, [xw, w, b, h0]) => crate::ops::nn::gru_sequence_packed(xw, w, b, h0)?,
            (NnOp::GruSequenceGrad, [w, h0, hs, gs, gh, gg]) => {
                crate::ops::nn::gru_sequence_grad_flat(w, h0, hs, gs, gh, gg)?
            }
            (NnOp::LayerNorm { axes, eps, gamma, beta }, [x, rest @ ..])
                if rest.len() == *gamma as usize + *beta as usize =>
            {
                let (g, b) = (gamma.then(|| &rest[0]), beta.then(|| &rest[*gamma as usize]));
                crate::ops::nn::layer_norm(x, g, b, *axes, eps.0)?
            }
            (NnOp::LayerNormGrad { axes, eps, gamma }, [x, rest @ ..]) if rest.len() == 1 + *gamma as usize => {
                let g = gamma.then(|| &rest[0]);
                crate::ops::nn::layer_norm_grad(x, g, &rest[*gamma as usize], *axes, eps.0)?
            }
            (NnOp::Rotary { seq_from_end, inverse }, [x, cos, sin]) => {
                crate::ops::nn::rotary(x, cos, sin, *seq_from_end, *inverse)?
            }
            _ => {
                return Err(Error::invalid(
                    self.name(),
                    format!("got {} inputs, which is not this op's arity", inputs.len()),
                ))
            }
        };
        Ok(smallvec::smallvec![y])
    }

    pub(crate) fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let conv = |f: &mut fmt::Formatter<'_>, c: &ConvAttrs| {
            write!(
                f,
                "strides={:?}, padding={:?}, dilations={:?}",
                c.strides, c.padding, c.dilations
            )
        };
        let conv3 = |f: &mut fmt::Formatter<'_>, c: &Conv3Attrs| {
            write!(
                f,
                "strides={:?}, padding={:?}, dilations={:?}",
                c.strides, c.padding, c.dilations
            )
        };
        let pool3 = |f: &mut fmt::Formatter<'_>, p: &Pool3Attrs| {
            write!(
                f,
                "ksize={:?}, strides={:?}, padding={:?}",
                p.ksize, p.strides, p.padding
            )
        };
        let pool = |f: &mut fmt::Formatter<'_>, p: &PoolAttrs| {
            write!(
                f,
                "ksize={:?}, strides={:?}, padding={:?}",
                p.ksize, p.strides, p.padding
            )
        };
        match self {
            NnOp::Softmax(a) | NnOp::LogSoftmax(a) => write!(f, "[axis={a}]"),
            NnOp::Attention {
                causal,
                scale,
                dropout,
                hidden,
            }
            | NnOp::AttentionGrad {
                causal,
                scale,
                dropout,
                hidden,
            } => {
                write!(f, "[causal={causal}, scale={scale}, dropout={dropout}")?;
                if *hidden != crate::ops::nn::HiddenRows::Zeros {
                    write!(f, ", hidden={hidden:?}")?;
                }
                f.write_str("]")
            }
            NnOp::LayerNorm { axes, eps, gamma, beta } => {
                write!(f, "[axes={axes}, eps={eps}, gamma={gamma}, beta={beta}]")
            }
            NnOp::LayerNormGrad { axes, eps, gamma } => write!(f, "[axes={axes}, eps={eps}, gamma={gamma}]"),
            NnOp::Rotary { seq_from_end, inverse } => write!(f, "[seq_from_end={seq_from_end}, inverse={inverse}]"),
            NnOp::SparseSoftmaxCrossEntropy
            | NnOp::SparseSoftmaxCrossEntropyGrad
            | NnOp::SigmoidCrossEntropy
            | NnOp::BiasAdd
            | NnOp::LstmCell
            | NnOp::LstmCellGrad
            | NnOp::LstmSequence
            | NnOp::LstmSequenceGrad
            | NnOp::GruSequence
            | NnOp::GruSequenceGrad => Ok(()),
            NnOp::Conv(c) => {
                f.write_str("[")?;
                conv(f, c)?;
                f.write_str("]")
            }
            NnOp::ConvBackpropInput(c, s) | NnOp::ConvBackpropFilter(c, s) => {
                write!(f, "[sizes={s:?}, ")?;
                conv(f, c)?;
                f.write_str("]")
            }
            NnOp::MaxPool(p) | NnOp::MaxPoolArgmax(p) | NnOp::AvgPool(p) => {
                f.write_str("[")?;
                pool(f, p)?;
                f.write_str("]")
            }
            NnOp::MaxPoolGrad(s) => write!(f, "[input_shape={s:?}]"),
            NnOp::CtcLoss(b) | NnOp::CtcLossGrad(b) => write!(f, "[blank_index={b}]"),
            NnOp::AvgPoolGrad(p, s) => {
                write!(f, "[input_shape={s:?}, ")?;
                pool(f, p)?;
                f.write_str("]")
            }
            NnOp::Conv3D(c) => {
                f.write_str("[")?;
                conv3(f, c)?;
                f.write_str("]")
            }
            NnOp::Conv3DBackpropInput(c, s) | NnOp::Conv3DBackpropFilter(c, s) => {
                write!(f, "[sizes={s:?}, ")?;
                conv3(f, c)?;
                f.write_str("]")
            }
            NnOp::MaxPool3D(p) | NnOp::MaxPool3DArgmax(p) | NnOp::AvgPool3D(p) => {
                f.write_str("[")?;
                pool3(f, p)?;
                f.write_str("]")
            }
            NnOp::MaxPool3DGrad(s) => write!(f, "[input_shape={s:?}]"),
            NnOp::AvgPool3DGrad(p, s) => {
                write!(f, "[input_shape={s:?}, ")?;
                pool3(f, p)?;
                f.write_str("]")
            }
        }
    }
}
