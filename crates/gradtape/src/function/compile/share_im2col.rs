//! Sharing a convolution's im2col matrix with its filter gradient.
//!
//! Eagerly, a dense `conv2d` keeps the im2col matrix its kernel built, and
//! the filter gradient on the tape (`cols^T @ dy`) reuses it instead of
//! building it again. A traced graph has the two as separate nodes,
//! `Conv2D(x, f)` and `Conv2DBackpropFilter(x, dy)`, so the gradient node
//! would build the matrix again on every run: twice the work of the eager
//! filter gradient.
//!
//! This pass (`share_im2col`) gives the pair back its sharing, for any
//! dense `f32` or `f64` convolution (any strides, padding and dilations):
//!
//! ```text
//! before:                                after:
//!   %2 = Conv2D(%x, %f)                    %2, %c = Conv2DKeepCols(%x, %f)
//!   ...                                    ...
//!   %9 = Conv2DBackpropFilter(%x, %8)      %9 = Conv2DBackpropFilterCols(%x, %8, %c)
//! ```
//!
//! In it the convolution becomes a
//! [`ConvKeepCols`] node with a second output, the matrix, and the filter
//! gradient of the same `x`, attributes and filter shape a
//! [`ConvBackpropFilterCols`] node that also reads it. The matrix lives from
//! the convolution to the gradient (as on the tape). When the kernel builds
//! no whole matrix (direct kernels, inputs convolved in chunks) the second
//! output is an empty tensor and the gradient computes from `x`, as before.
//! Either way the gradient is the same product over the same rows, so the
//! values are those of the traced graph, bit for bit.

use std::sync::Arc;

use super::pipeline::PassCx;
use crate::error::Result;
use crate::function::graph::Graph;
use crate::ops::desc::{ConvAttrs, DynOp, NnOp, Op, Outputs};
use crate::tensor::{DType, Tensor};

/// `conv2d(x, f)` and the im2col matrix of `x` (empty when the kernel built
/// none).
pub(crate) struct ConvKeepCols(pub(crate) ConvAttrs);

impl DynOp for ConvKeepCols {
    fn name(&self) -> &'static str {
        "Conv2DKeepCols"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let [x, f] = inputs else {
            return Err(crate::error::Error::invalid(
                "Conv2DKeepCols",
                format!("expects 2 inputs (x, filter), got {}", inputs.len()),
            ));
        };
        let (y, cols) = crate::ops::conv2d_with_cols(x, f, self.0)?;
        let cols = cols.unwrap_or_else(|| Tensor::zeros(&[0], x.dtype()));
        Ok(smallvec::smallvec![y, cols])
    }
    fn stateful(&self) -> bool {
        false
    }
    fn fmt_attrs(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[strides={:?}, padding={:?}, dilations={:?}]",
            self.0.strides, self.0.padding, self.0.dilations
        )
    }
}

/// `conv2d_backprop_filter(x, dy)` from the im2col matrix of `x` when it is
/// not empty: inputs `(x, dy, cols)`.
pub(crate) struct ConvBackpropFilterCols(pub(crate) ConvAttrs, pub(crate) [usize; 4]);

impl DynOp for ConvBackpropFilterCols {
    fn name(&self) -> &'static str {
        "Conv2DBackpropFilterCols"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let [x, dy, cols] = inputs else {
            return Err(crate::error::Error::invalid(
                "Conv2DBackpropFilterCols",
                format!("expects 3 inputs (x, dy, cols), got {}", inputs.len()),
            ));
        };
        let cols = (cols.numel() > 0).then_some(cols);
        let df = crate::ops::conv2d_backprop_filter_from_cols(x, &self.1, dy, self.0, cols)?;
        Ok(smallvec::smallvec![df])
    }
    fn stateful(&self) -> bool {
        false
    }
    fn fmt_attrs(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[sizes={:?}, strides={:?}, padding={:?}, dilations={:?}]",
            self.1, self.0.strides, self.0.padding, self.0.dilations
        )
    }
}

/// Pairs each dense `f32`/`f64` convolution with the first later filter
/// gradient of the same input, attributes and filter shape; returns how
/// many pairs now share their matrix.
pub(crate) fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    let mut pairs = 0;
    for i in 0..g.nodes.len() {
        let (Op::Nn(NnOp::Conv(a)), [x, f]) = (&g.nodes[i].op, &g.nodes[i].inputs[..]) else {
            continue;
        };
        let (a, x, f) = (*a, *x, *f);
        let dtype = g.values[x as usize].dtype;
        if a.depthwise || !matches!(dtype, DType::F32 | DType::F64) {
            continue;
        }
        let f_shape = g.values[f as usize].shape.to_vec();
        let y = g.nodes[i].outputs[0];
        if f_shape.len() != 4 || g.values[y as usize].shape.len() != 4 {
            continue;
        }
        let found = (i + 1..g.nodes.len()).find(|&j| {
            matches!(&g.nodes[j].op, Op::Nn(NnOp::ConvBackpropFilter(b, fs))
                if *b == a && fs[..] == f_shape[..] && g.nodes[j].inputs.first() == Some(&x))
        });
        let Some(j) = found else { continue };
        let Op::Nn(NnOp::ConvBackpropFilter(_, fs)) = g.nodes[j].op else {
            continue;
        };
        // the matrix: one row per output position, one column per filter
        // tap and input channel (a grouped convolution's filter has fewer
        // input channels than `x`: the matrix holds every group's taps)
        let ys = &g.values[y as usize].shape;
        let rows = ys[..3].iter().product::<usize>();
        let Some(&c) = g.values[x as usize].shape.get(3) else {
            continue;
        };
        let cols = g.add_value(dtype, &[rows, f_shape[..2].iter().product::<usize>() * c]);
        g.nodes[i].op = Op::Dyn(Arc::new(ConvKeepCols(a)));
        g.nodes[i].outputs.push(cols);
        g.nodes[j].op = Op::Dyn(Arc::new(ConvBackpropFilterCols(a, fs)));
        g.nodes[j].inputs.push(cols);
        pairs += 1;
    }
    pairs
}
