//! What the dense convolutions of every rank share (`conv.rs` for 1-D and
//! 2-D, `conv3d.rs` for 3-D): validated strides, dilations and padding, the
//! checks of operands and sizes, and the gradient rules of the three
//! bilinear ops of a convolution family, written once:
//!
//! - `y = fwd(x, f)`: `dx = bwd_input(g, f)`, `df = bwd_filter(x, g)`;
//! - `dx = bwd_input(dy, f)`: `df = bwd_filter(G, dy)`, `d dy = fwd(G, f)`;
//! - `df = bwd_filter(x, dy)`: `dx = bwd_input(dy, G)`, `d dy = fwd(x, G)`.
//!
//! Each rule calls the family's public-facing ops, so gradients of any
//! order work; being bilinear, each op also has a cheap forward-mode rule
//! (`op(t_a, b) + op(a, t_b)`), bound where the family asks for it.

use super::super::desc::NnOp;
use super::super::{bind, bind_jvp, expect_float, expect_same_dtype, grads, sum_terms};
use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::conv::{positive, Padding};
use crate::tensor::Tensor;

/// The strides, dilations (each `>= 1`) and padding of an `N`-d
/// convolution, validated.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window<const N: usize> {
    pub strides: [usize; N],
    pub dil: [usize; N],
    pub padding: Padding,
}

impl<const N: usize> Window<N> {
    pub fn new(op: &'static str, strides: [i64; N], padding: Padding, dilations: [i64; N]) -> Result<Self> {
        Ok(Window {
            strides: positive(op, "strides", strides)?,
            dil: positive(op, "dilations", dilations)?,
            padding,
        })
    }
}

/// Checks an input shape `x` and a filter shape `f` of rank `rank` (the
/// layouts named `layouts` in the error) and gives the number of groups.
/// Unless `grouped`, the input's channels (last dim) must equal the
/// filter's in-channels (its dim `rank - 2`): one group. A grouped
/// (dense) convolution takes, as TensorFlow's does, input channels `c`
/// that are a multiple `groups` of the filter's in-channels, and filter
/// out-channels (its last dim) that are a multiple of `groups`.
pub(super) fn check_operands(
    op: &'static str,
    x: &[usize],
    f: &[usize],
    rank: usize,
    layouts: &str,
    grouped: bool,
) -> Result<usize> {
    if x.len() != rank || f.len() != rank {
        return Err(Error::invalid(
            op,
            format!("needs {layouts}, both of rank {rank}, got shapes {x:?} and {f:?}"),
        ));
    }
    let (c, fc, o) = (x[rank - 1], f[rank - 2], f[rank - 1]);
    if c == fc {
        return Ok(1);
    }
    if !grouped {
        return Err(Error::ShapeMismatch {
            op,
            lhs: x.to_vec(),
            rhs: f.to_vec(),
        });
    }
    if fc == 0 || c == 0 || c % fc != 0 {
        return Err(Error::invalid(
            op,
            format!(
                "the input's {c} channels are not a multiple of the filter's {fc} input channels \
                 (a grouped convolution needs one), got input shape {x:?} and filter shape {f:?}"
            ),
        ));
    }
    let groups = c / fc;
    if o % groups != 0 {
        return Err(Error::invalid(
            op,
            format!(
                "the filter's {o} output channels are not a multiple of the {groups} groups \
                 ({c} input channels / {fc} filter input channels), got input shape {x:?} and filter shape {f:?}"
            ),
        ));
    }
    Ok(groups)
}

/// Both operands float, of one dtype.
pub(super) fn expect_floats(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    expect_float(op, a)?;
    expect_float(op, b)?;
    expect_same_dtype(op, a, b)
}

/// The output gradient `dy` has the forward output's shape `want`.
pub(super) fn check_dy(op: &'static str, dy: &Tensor, want: &[usize]) -> Result<()> {
    if dy.shape() != want {
        return Err(Error::ShapeMismatch {
            op,
            lhs: dy.shape().to_vec(),
            rhs: want.to_vec(),
        });
    }
    Ok(())
}

/// A size argument (`input_sizes`, `filter_sizes`) of `R` entries.
pub(super) fn sizes<const R: usize>(op: &'static str, what: &str, s: &[usize]) -> Result<[usize; R]> {
    <[usize; R]>::try_from(s).map_err(|_| Error::invalid(op, format!("{what} must have {R} entries, got {s:?}")))
}

/// One convolution family (its attributes are `Self`): the forward op and
/// its two adjoints, each checking its operands and binding itself.
pub(super) trait Conv: Copy + Send + Sync + 'static {
    /// The op name the gradient rules run under.
    const BACKPROP: &'static str;
    /// The op name the forward-mode rules run under.
    const JVP: &'static str;
    /// Whether the ops bind forward-mode rules.
    const HAS_JVP: bool;

    /// `y = x * f`.
    fn fwd(self, op: &'static str, x: &Tensor, f: &Tensor) -> Result<Tensor>;
    /// The input gradient: `dy` and `f` -> `xs`.
    fn bwd_input(self, op: &'static str, xs: &[usize], f: &Tensor, dy: &Tensor) -> Result<Tensor>;
    /// The filter gradient: `x` and `dy` -> `fs` (`cols`: `x`'s im2col
    /// matrix, when the forward pass kept it).
    fn bwd_filter(
        self,
        op: &'static str,
        x: &Tensor,
        fs: &[usize],
        dy: &Tensor,
        cols: Option<&Tensor>,
    ) -> Result<Tensor>;
}

/// `y = fwd(x, f)` (already computed) bound with its rules; `cols` is the
/// forward pass's im2col matrix, offered to the filter gradient.
pub(super) fn bind_fwd<C: Conv>(c: C, desc: NnOp, x: &Tensor, f: &Tensor, y: Tensor, cols: Option<Tensor>) -> Tensor {
    let (xc, fc) = (x.clone(), f.clone());
    let rule = move |_: &Tensor| {
        vjp(move |g, needs| {
            let dx = needs[0]
                .then(|| c.bwd_input(C::BACKPROP, xc.shape(), &fc, &g[0]))
                .transpose()?;
            let df = needs[1]
                .then(|| c.bwd_filter(C::BACKPROP, &xc, fc.shape(), &g[0], cols.as_ref()))
                .transpose()?;
            Ok(grads![dx, df])
        })
    };
    if !C::HAS_JVP {
        return bind(desc, &[x, f], y, rule);
    }
    bind_jvp(desc, &[x, f], y, rule, |t, _| {
        sum_terms([
            t[0].as_ref().map(|tx| c.fwd(C::JVP, tx, f)).transpose(),
            t[1].as_ref().map(|tf| c.fwd(C::JVP, x, tf)).transpose(),
        ])
    })
}

/// `y = bwd_input(dy, f)` of shape `xs` (already computed) bound with its
/// rules.
pub(super) fn bind_input<C: Conv>(c: C, desc: NnOp, xs: &[usize], f: &Tensor, dy: &Tensor, y: Tensor) -> Tensor {
    let (fc, dyc) = (f.clone(), dy.clone());
    let rule = move |_: &Tensor| {
        vjp(move |g, needs| {
            let df = needs[0]
                .then(|| c.bwd_filter(C::BACKPROP, &g[0], fc.shape(), &dyc, None))
                .transpose()?;
            let ddy = needs[1].then(|| c.fwd(C::BACKPROP, &g[0], &fc)).transpose()?;
            Ok(grads![df, ddy])
        })
    };
    if !C::HAS_JVP {
        return bind(desc, &[f, dy], y, rule);
    }
    bind_jvp(desc, &[f, dy], y, rule, |t, _| {
        sum_terms([
            t[0].as_ref().map(|tf| c.bwd_input(C::JVP, xs, tf, dy)).transpose(),
            t[1].as_ref().map(|td| c.bwd_input(C::JVP, xs, f, td)).transpose(),
        ])
    })
}

/// `y = bwd_filter(x, dy)` of shape `fs` (already computed) bound with its
/// rules.
pub(super) fn bind_filter<C: Conv>(c: C, desc: NnOp, x: &Tensor, fs: &[usize], dy: &Tensor, y: Tensor) -> Tensor {
    let (xc, dyc) = (x.clone(), dy.clone());
    let rule = move |_: &Tensor| {
        vjp(move |g, needs| {
            let dx = needs[0]
                .then(|| c.bwd_input(C::BACKPROP, xc.shape(), &g[0], &dyc))
                .transpose()?;
            let ddy = needs[1].then(|| c.fwd(C::BACKPROP, &xc, &g[0])).transpose()?;
            Ok(grads![dx, ddy])
        })
    };
    if !C::HAS_JVP {
        return bind(desc, &[x, dy], y, rule);
    }
    bind_jvp(desc, &[x, dy], y, rule, |t, _| {
        sum_terms([
            t[0].as_ref()
                .map(|tx| c.bwd_filter(C::JVP, tx, fs, dy, None))
                .transpose(),
            t[1].as_ref()
                .map(|td| c.bwd_filter(C::JVP, x, fs, td, None))
                .transpose(),
        ])
    })
}
