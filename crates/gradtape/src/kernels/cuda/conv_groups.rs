//! Grouped dense convolutions on the GPU (2-D and 3-D): TensorFlow's
//! grouped `conv2d` / `conv3d`, whose filter `[(kd,)kh,kw,c/groups,o]`
//! has fewer input channels than the input; group `i` reads input
//! channels `[i·c/groups, (i+1)·c/groups)` and writes output channels
//! `[i·o/groups, (i+1)·o/groups)`.
//!
//! They run as the dense ones ([`super::conv`]: im2col, cuBLAS, col2im),
//! with one strided-batched GEMM over the groups where the dense
//! convolution has one GEMM. Its operands are views, read in place:
//!
//! - the im2col matrix is regrouped once (a permuting copy) from im2col's
//!   `(tap, channel)` columns to `(group, tap, channel in group)` columns,
//!   the layout the CPU kernels build (`kernels::cpu::conv`), so group `i`'s
//!   matrix is column block `i` (batch stride `kdim/groups`, leading dim
//!   `kdim`), and the matrix kept for the filter gradient is the CPU's;
//! - the filter `[taps·c/groups, o]` is group `i`'s column block `i`
//!   (batch stride `o/groups`, leading dim `o`), and so is `dy`.
//!
//! The batched products give `[groups, rows, o/groups]` (and so on), which
//! a permuting copy puts back in the channels-last order.

use std::sync::Arc;

use super::conv::{im2col, view_as, Win};
use super::launch::{matmul, permuted, reshaped};
use crate::error::Result;
use crate::tensor::{Layout, Tensor};

/// Group counts and sizes: `(groups, taps, c/groups, kdim/groups,
/// o/groups)`.
fn dims(g: &Win) -> (usize, usize, usize, usize, usize) {
    let ((c, o), k) = (g.channels(), g.kdim());
    let n = g.groups;
    (n, k / c.max(1), c / n, k / n, o / n)
}

/// A strided view of the contiguous tensor `t` (offset 0).
fn strided(t: &Tensor, shape: &[usize], strides: &[isize]) -> Tensor {
    Tensor::device_view(
        Arc::clone(t.device_buffer().expect("on a GPU")),
        Layout {
            shape: shape.into(),
            strides: strides.into(),
            offset: t.layout().offset,
        },
    )
}

/// The `[rows, cols]` matrix `m` (made contiguous) seen as `groups` column
/// blocks `[groups, rows, cols/groups]`.
fn blocks(op: &'static str, m: &Tensor, rows: usize, cols: usize, groups: usize) -> Result<Tensor> {
    let m = reshaped(op, m, &[rows, cols])?;
    let w = cols / groups;
    Ok(strided(&m, &[groups, rows, w], &[w as isize, cols as isize, 1]))
}

/// The im2col matrix of `x` with its columns in groups: `[rows, kdim]`,
/// row `r`'s block `i` holding group `i`'s taps over its channels.
fn grouped_cols(op: &'static str, x: &Tensor, g: &Win) -> Result<Tensor> {
    let (n, taps, cg, _, _) = dims(g);
    let rows = g.rows();
    let cols = reshaped(op, &im2col(op, x, g)?, &[rows, taps, n, cg])?;
    let cols = permuted(op, &cols, &[0, 2, 1, 3])?;
    reshaped(op, &cols, &[rows, g.kdim()])
}

/// The grouped forward convolution: `(y, cols)`, as [`super::conv::conv`].
pub(super) fn conv(op: &'static str, x: &Tensor, f: &Tensor, g: &Win) -> Result<(Tensor, Tensor)> {
    let (n, _, _, kg, og) = dims(g);
    let (rows, o) = (g.rows(), g.channels().1);
    let cols = grouped_cols(op, x, g)?;
    let a = blocks(op, &cols, rows, g.kdim(), n)?;
    let fm = blocks(op, f, kg, o, n)?;
    let y = matmul(op, &a, &fm, false, false, &[n, rows, og])?;
    let y = permuted(op, &y, &[1, 0, 2])?;
    Ok((view_as(&y, &g.y_shape(o as i64)), cols))
}

/// The grouped input gradient's im2col matrix (im2col's column order, for
/// col2im): `dy` and `f` (of one float type, `f32` for half operands).
pub(super) fn input_cols(op: &'static str, dy: &Tensor, f: &Tensor, g: &Win) -> Result<Tensor> {
    let (n, taps, cg, kg, _) = dims(g);
    let (rows, o) = (g.rows(), g.channels().1);
    let dym = blocks(op, dy, rows, o, n)?;
    let fm = blocks(op, f, kg, o, n)?;
    let dcols = matmul(op, &dym, &fm, false, true, &[n, rows, kg])?;
    let dcols = reshaped(op, &dcols, &[n, rows, taps, cg])?;
    permuted(op, &dcols, &[1, 2, 0, 3])
}

/// The grouped filter gradient, from `x` or its grouped im2col matrix
/// `cols` (the forward pass's, when kept).
pub(super) fn backprop_filter(
    op: &'static str,
    x: &Tensor,
    cols: Option<&Tensor>,
    dy: &Tensor,
    g: &Win,
) -> Result<Tensor> {
    let (n, _, _, kg, og) = dims(g);
    let (rows, o) = (g.rows(), g.channels().1);
    let cols = match cols {
        Some(c) => c.clone(),
        None => grouped_cols(op, x, g)?,
    };
    let a = blocks(op, &cols, rows, g.kdim(), n)?;
    let dym = blocks(op, dy, rows, o, n)?;
    let df = matmul(op, &a, &dym, true, false, &[n, kg, og])?;
    let df = permuted(op, &df, &[1, 0, 2])?;
    Ok(view_as(&df, &g.f_shape()))
}
