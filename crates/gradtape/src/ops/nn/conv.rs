//! Convolutions on NHWC data with HWIO filters, TensorFlow's conventions:
//! conv1d, conv2d, conv2d_transpose, depthwise_conv2d, and the backprop ops
//! that are their gradients.
//!
//! Each convolution is a triple of ops, the forward op and its two adjoints
//! (input and filter gradients). All three are bilinear, and each one's rule
//! is written with the other two, as TensorFlow does, so gradients of any
//! order work:
//!
//! - `y = conv(x, f)`: `dx = backprop_input(g, f)`, `df = backprop_filter(x, g)`;
//! - `dx = backprop_input(dy, f)`: `d dy = conv(G, f)`, `df = backprop_filter(G, dy)`;
//! - `df = backprop_filter(x, dy)`: `dx = backprop_input(dy, G)`, `d dy = conv(x, G)`.
//!
//! Those rules, the operand checks and the attribute validation are
//! written once for every rank in `bilinear.rs` and shared with conv3d.
//!
//! A dense convolution may be grouped, as TensorFlow's: a filter with
//! `c / groups` input channels. The group count is not an attribute: each
//! op of the triple infers it from its shapes (input and filter), as
//! TensorFlow's `Conv2D` does, so the op descriptors (`ConvAttrs`) need
//! none and a traced graph's nodes infer the same groups when replayed.
//! Being bilinear, each op also has a cheap forward-mode rule, `op(t_a, b)
//! + op(a, t_b)`, so tangents do not go through the reverse-mode rules.
//!
//! The dense convolution runs as direct register-tiled kernels for `f32`
//! at stride 1 on AVX-512 CPUs (`kernels::cpu::direct_conv`) and as im2col +
//! GEMM otherwise (grouped ones always: one GEMM per group on column blocks
//! of one im2col matrix); the depthwise one as direct channel-vectorised
//! loops; all in parallel.

use super::super::desc::{ConvAttrs, NnOp};
use super::bilinear::{
    bind_filter, bind_fwd, bind_input, check_dy, check_operands, expect_floats, sizes, Conv, Window,
};
use super::via_f32;
use crate::error::{Error, Result};
pub use crate::kernels::cpu::conv::Padding;
use crate::kernels::cpu::conv::{self as k, Geom};
use crate::kernels::cuda::Win;
use crate::tensor::dtype::with_types;
use crate::tensor::{Float, Tensor};

/// Dense or depthwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dense,
    Depthwise,
}

/// The attributes of one convolution (validated).
#[derive(Debug, Clone, Copy)]
struct Cfg {
    kind: Kind,
    strides: [usize; 2],
    dil: [usize; 2],
    padding: Padding,
}

impl Cfg {
    fn new(op: &'static str, kind: Kind, strides: [i64; 2], padding: Padding, dilations: [i64; 2]) -> Result<Cfg> {
        let w = Window::new(op, strides, padding, dilations)?;
        Ok(Cfg {
            kind,
            strides: w.strides,
            dil: w.dil,
            padding,
        })
    }

    /// The geometry for input shape `x` and filter shape `f`, both checked
    /// (a dense convolution's groups inferred from them, as TensorFlow
    /// does: `bilinear::check_operands`).
    fn geom(&self, op: &'static str, x: &[usize], f: &[usize]) -> Result<Geom> {
        let groups = check_operands(
            op,
            x,
            f,
            4,
            "an NHWC input and an HWIO filter",
            self.kind == Kind::Dense,
        )?;
        Ok(Geom::new(op, x, [f[0], f[1]], f[3], self.strides, self.dil, self.padding)?.grouped(groups))
    }

    /// The descriptor's attributes.
    fn attrs(&self) -> ConvAttrs {
        ConvAttrs {
            depthwise: self.kind == Kind::Depthwise,
            strides: self.strides,
            dilations: self.dil,
            padding: self.padding,
        }
    }

    /// The output shape for geometry `g`.
    fn out_shape(&self, g: &Geom) -> [usize; 4] {
        let c = match self.kind {
            Kind::Dense => g.o,
            Kind::Depthwise => g.c * g.o,
        };
        [g.n, g.oh, g.ow, c]
    }
}

impl Conv for Cfg {
    const BACKPROP: &'static str = "conv backprop";
    const JVP: &'static str = "conv jvp";
    const HAS_JVP: bool = true;

    fn fwd(self, op: &'static str, x: &Tensor, f: &Tensor) -> Result<Tensor> {
        fwd(op, x, f, self)
    }

    fn bwd_input(self, op: &'static str, xs: &[usize], f: &Tensor, dy: &Tensor) -> Result<Tensor> {
        bwd_input(op, xs, f, dy, self)
    }

    fn bwd_filter(
        self,
        op: &'static str,
        x: &Tensor,
        fs: &[usize],
        dy: &Tensor,
        cols: Option<&Tensor>,
    ) -> Result<Tensor> {
        bwd_filter(op, x, fs, dy, self, cols)
    }
}

fn run<T: Float>(
    op: &'static str,
    f: impl FnOnce(&[T], &[T]) -> Result<Vec<T>>,
    a: &Tensor,
    b: &Tensor,
    shape: &[usize],
) -> Result<Tensor> {
    let (av, bv) = (a.values::<T>(op)?, b.values::<T>(op)?);
    Ok(Tensor::from_storage(T::into_storage(f(&av, &bv)?), shape))
}

/// Zeros of `shape` when the result of a bilinear convolution op is empty
/// or one of its operands `a`, `b` is: the result is all zeros then, and it
/// comes at once, without reading (or materialising a broadcast view of)
/// the other operand, or walking its huge dims (a conv with 2^31 output
/// channels of an empty input looped for a very long time).
fn zeros_if_empty(op: &'static str, shape: &[usize], a: &Tensor, b: &Tensor) -> Result<Option<Tensor>> {
    if shape.contains(&0) || a.numel() == 0 || b.numel() == 0 {
        return Tensor::zeros_on(shape, a.dtype(), a.device())
            .map(Some)
            .map_err(|e| e.for_op(op));
    }
    Ok(None)
}

/// A convolution op on a GPU (`None` for operands on the CPU): `cuda`
/// there, or `host` on host copies on an emulated GPU. Every float type
/// has a GPU kernel, dense and depthwise (the half types give the CPU's
/// `f32`-accumulated values to rounding: `kernels::cuda::conv`).
fn on_gpu(
    op: &'static str,
    inputs: &[&Tensor],
    host: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
    cuda: impl FnOnce() -> Result<Vec<Tensor>>,
) -> Option<Result<Vec<Tensor>>> {
    if !inputs.iter().all(|t| t.dtype().is_float()) {
        return None;
    }
    crate::dispatch::device::offload_n(op, inputs, |_| cuda(), host)
}

/// Zeros of `shape` on `like`'s device.
fn gpu_zeros(op: &'static str, shape: &[usize], like: &Tensor) -> Result<Tensor> {
    crate::kernels::gpu::filled(op, shape, 0.0, like.dtype(), like.device())
}

/// The forward convolution's value (operands checked by the caller), and
/// the dense kernel's im2col matrix. Half operands are convolved as `f32`
/// copies (an `f32` accumulator, as TensorFlow's CPU kernels for half
/// types) and the result rounded back.
fn fwd_value(op: &'static str, x: &Tensor, f: &Tensor, cfg: Cfg) -> Result<(Tensor, Option<Tensor>)> {
    let g = cfg.geom(op, x.shape(), f.shape())?;
    let shape = cfg.out_shape(&g);
    if let Some(r) = on_gpu(
        op,
        &[x, f],
        |h| {
            let (y, cols) = fwd_value(op, &h[0], &h[1], cfg)?;
            Ok(std::iter::once(y).chain(cols).collect())
        },
        || {
            if shape.contains(&0) || x.numel() == 0 || f.numel() == 0 {
                return Ok(vec![gpu_zeros(op, &shape, x)?]);
            }
            if cfg.kind == Kind::Depthwise {
                return Ok(vec![crate::kernels::cuda::depthwise(op, 0, x, f, &g)?]);
            }
            let (y, cols) = crate::kernels::cuda::conv(op, x, f, &Win::two(&g))?;
            Ok(vec![y, cols])
        },
    ) {
        let mut v = r?;
        let y = v.remove(0);
        return Ok((y, v.pop()));
    }
    // the dense im2col forward keeps its im2col matrix for the filter
    // gradient (as PyTorch's unfolded convolution does): dropped unused when
    // no tape records this op, freed when the rule has run on a
    // non-persistent tape (the direct kernels build none)
    if let Some(z) = zeros_if_empty(op, &shape, x, f)? {
        return Ok((z, None));
    }
    Ok(with_types!(x.dtype(), T => match cfg.kind {
        Kind::Dense => {
            let (xv, fv) = (x.values::<T>(op)?, f.values::<T>(op)?);
            let (y, cols) = k::conv2d_keep(&xv, &fv, &g, true)?;
            let cols = cols.map(|c| Tensor::from_storage(<T as crate::tensor::Element>::into_storage(c), &[g.n * g.rows(), g.kdim()]));
            (Tensor::from_storage(<T as crate::tensor::Element>::into_storage(y), &shape), cols)
        }
        Kind::Depthwise => (run::<T>(op, |a, b| k::depthwise(a, b, &g), x, f, &shape)?, None),
    }, [F32: f32, F64: f64], _ => {
        (via_f32(&[x, f], |w| Ok(fwd_value(op, &w[0], &w[1], cfg)?.0))?, None)
    }))
}

/// The forward convolution `x * f`.
fn fwd(op: &'static str, x: &Tensor, f: &Tensor, cfg: Cfg) -> Result<Tensor> {
    expect_floats(op, x, f)?;
    let (y, cols) = fwd_value(op, x, f, cfg)?;
    Ok(bind_fwd(cfg, NnOp::Conv(cfg.attrs()), x, f, y, cols))
}

/// The input gradient's value (checked by the caller; half types as in
/// [`fwd_value`]).
fn bwd_input_value(op: &'static str, xs: [usize; 4], f: &Tensor, dy: &Tensor, cfg: Cfg) -> Result<Tensor> {
    let g = cfg.geom(op, &xs, f.shape())?;
    if let Some(r) = on_gpu(
        op,
        &[f, dy],
        |h| Ok(vec![bwd_input_value(op, xs, &h[0], &h[1], cfg)?]),
        || {
            if xs.contains(&0) || f.numel() == 0 || dy.numel() == 0 {
                return Ok(vec![gpu_zeros(op, &xs, f)?]);
            }
            if cfg.kind == Kind::Depthwise {
                return Ok(vec![crate::kernels::cuda::depthwise(op, 1, dy, f, &g)?]);
            }
            Ok(vec![crate::kernels::cuda::conv_backprop_input(
                op,
                dy,
                f,
                &Win::two(&g),
            )?])
        },
    ) {
        return r.map(|mut v| v.remove(0));
    }
    if let Some(z) = zeros_if_empty(op, &xs, f, dy)? {
        return Ok(z);
    }
    Ok(with_types!(f.dtype(), T => match cfg.kind {
        Kind::Dense => run::<T>(op, |d, w| k::conv2d_backprop_input(d, w, &g), dy, f, &xs)?,
        Kind::Depthwise => run::<T>(op, |d, w| k::depthwise_backprop_input(d, w, &g), dy, f, &xs)?,
    }, [F32: f32, F64: f64], _ => {
        via_f32(&[f, dy], |w| bwd_input_value(op, xs, &w[0], &w[1], cfg))?
    }))
}

/// The input gradient: `dy` [n,oh,ow,out] and `f` -> [n,h,w,c] = `input_sizes`.
fn bwd_input(op: &'static str, input_sizes: &[usize], f: &Tensor, dy: &Tensor, cfg: Cfg) -> Result<Tensor> {
    expect_floats(op, f, dy)?;
    let xs = sizes::<4>(op, "input_sizes", input_sizes)?;
    let g = cfg.geom(op, &xs, f.shape())?;
    check_dy(op, dy, &cfg.out_shape(&g))?;
    let y = bwd_input_value(op, xs, f, dy, cfg)?;
    Ok(bind_input(cfg, NnOp::ConvBackpropInput(cfg.attrs(), xs), &xs, f, dy, y))
}

/// The filter gradient: `x` and `dy` -> [kh,kw,c,out] = `filter_sizes`;
/// `cols`, when given, is `x`'s im2col matrix kept by the forward pass.
fn bwd_filter(
    op: &'static str,
    x: &Tensor,
    filter_sizes: &[usize],
    dy: &Tensor,
    cfg: Cfg,
    cols: Option<&Tensor>,
) -> Result<Tensor> {
    expect_floats(op, x, dy)?;
    let fs = sizes::<4>(op, "filter_sizes", filter_sizes)?;
    let g = cfg.geom(op, x.shape(), &fs)?;
    check_dy(op, dy, &cfg.out_shape(&g))?;
    let y = bwd_filter_value(op, x, fs, dy, cfg, cols)?;
    Ok(bind_filter(
        cfg,
        NnOp::ConvBackpropFilter(cfg.attrs(), fs),
        x,
        &fs,
        dy,
        y,
    ))
}

/// The filter gradient's value (checked by the caller; half types as in
/// [`fwd_value`]).
fn bwd_filter_value(
    op: &'static str,
    x: &Tensor,
    fs: [usize; 4],
    dy: &Tensor,
    cfg: Cfg,
    cols: Option<&Tensor>,
) -> Result<Tensor> {
    let g = cfg.geom(op, x.shape(), &fs)?;
    let gpu_cols = cols.filter(|c| c.dtype() == x.dtype() && c.shape() == [g.n * g.rows(), g.kdim()]);
    // (no `Vec` of the inputs: a traced step runs this at every call)
    let both = [x, dy, gpu_cols.unwrap_or(x)];
    let ins = &both[..2 + usize::from(gpu_cols.is_some())];
    if let Some(r) = on_gpu(
        op,
        ins,
        |h| Ok(vec![bwd_filter_value(op, &h[0], fs, &h[1], cfg, h.get(2))?]),
        || {
            if fs.contains(&0) || x.numel() == 0 || dy.numel() == 0 {
                return Ok(vec![gpu_zeros(op, &fs, x)?]);
            }
            if cfg.kind == Kind::Depthwise {
                return Ok(vec![crate::kernels::cuda::depthwise(op, 2, x, dy, &g)?]);
            }
            Ok(vec![crate::kernels::cuda::conv_backprop_filter(
                op,
                x,
                gpu_cols,
                dy,
                &Win::two(&g),
            )?])
        },
    ) {
        return r.map(|mut v| v.remove(0));
    }
    if let Some(z) = zeros_if_empty(op, &fs, x, dy)? {
        return Ok(z);
    }
    Ok(with_types!(x.dtype(), T => match (cfg.kind, cols) {
        (Kind::Dense, Some(c)) if c.dtype() == x.dtype() => run::<T>(op, |a, d| k::conv2d_backprop_filter_cols(a, d, &g), c, dy, &fs)?,
        (Kind::Dense, _) => run::<T>(op, |a, d| k::conv2d_backprop_filter(a, d, &g), x, dy, &fs)?,
        (Kind::Depthwise, _) => run::<T>(op, |a, d| k::depthwise_backprop_filter(a, d, &g), x, dy, &fs)?,
    }, [F32: f32, F64: f64], _ => {
        via_f32(&[x, dy], |w| bwd_filter_value(op, &w[0], fs, &w[1], cfg, None))?
    }))
}

/// The validated attributes of a dense convolution node.
fn dense_cfg(op: &'static str, a: ConvAttrs) -> Result<Cfg> {
    if a.depthwise {
        return Err(Error::invalid(op, "expects a dense convolution, got a depthwise one"));
    }
    Cfg::new(
        op,
        Kind::Dense,
        a.strides.map(|s| s as i64),
        a.padding,
        a.dilations.map(|d| d as i64),
    )
}

/// For the graph compiler: a dense `conv2d`'s value, and the im2col matrix
/// its kernel built (`None` when it built none: direct kernels, inputs
/// convolved in chunks, empty shapes), which
/// [`conv2d_backprop_filter_from_cols`] reuses as the tape's rule does.
/// Records nothing (a compiled graph runs under no tape).
pub(crate) fn conv2d_with_cols(x: &Tensor, f: &Tensor, a: ConvAttrs) -> Result<(Tensor, Option<Tensor>)> {
    const OP: &str = "conv2d";
    expect_floats(OP, x, f)?;
    fwd_value(OP, x, f, dense_cfg(OP, a)?)
}

/// For the graph compiler: `conv2d_backprop_filter(x, dy)` of the given
/// filter sizes, from `cols`, `x`'s im2col matrix kept by
/// [`conv2d_with_cols`], when given and of the right shape and dtype (from
/// `x` otherwise). Records nothing.
pub(crate) fn conv2d_backprop_filter_from_cols(
    x: &Tensor,
    filter_sizes: &[usize],
    dy: &Tensor,
    a: ConvAttrs,
    cols: Option<&Tensor>,
) -> Result<Tensor> {
    const OP: &str = "conv2d_backprop_filter";
    expect_floats(OP, x, dy)?;
    let cfg = dense_cfg(OP, a)?;
    let fs = sizes::<4>(OP, "filter_sizes", filter_sizes)?;
    let g = cfg.geom(OP, x.shape(), &fs)?;
    check_dy(OP, dy, &cfg.out_shape(&g))?;
    let cols = cols.filter(|c| c.dtype() == x.dtype() && c.shape() == [g.n * g.rows(), g.kdim()]);
    bwd_filter_value(OP, x, fs, dy, cfg, cols)
}

impl Tensor {
    /// 2-D convolution (cross-correlation, as TensorFlow's `conv2d`) of an
    /// NHWC input `[n, h, w, c]` with an HWIO filter `[kh, kw, c, out]`,
    /// giving `[n, oh, ow, out]`. `strides` and `dilations` are `[height,
    /// width]`, each `>= 1`. `Padding::Same` gives `oh = ceil(h / stride)`
    /// with the smaller half of the padding on top/left, `Padding::Valid`
    /// uses no padding.
    ///
    /// A filter with fewer input channels than the input, `[kh, kw, c /
    /// groups, out]` with `out` a multiple of `groups`, makes a grouped
    /// convolution, as TensorFlow's: group `i` convolves input channels
    /// `[i·c/groups, (i+1)·c/groups)` into output channels
    /// `[i·out/groups, (i+1)·out/groups)`. The groups come from the shapes
    /// (so do those of the backprop ops and
    /// [`conv2d_transpose`](Self::conv2d_transpose)); channels that are
    /// not such multiples are an error naming both shapes.
    ///
    /// Gradients: [`conv2d_backprop_input`](Self::conv2d_backprop_input) and
    /// [`conv2d_backprop_filter`](Self::conv2d_backprop_filter).
    ///
    /// ```
    /// use gradtape::{Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 2, 2, 1])?;
    /// let f = Tensor::ones(&[2, 2, 1, 1], gradtape::DType::F32);
    /// let y = x.conv2d(&f, [1, 1], Padding::Valid, [1, 1])?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![10.0]);
    /// let y = x.conv2d(&f, [1, 1], Padding::Same, [1, 1])?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![10.0, 6.0, 7.0, 4.0]);
    ///
    /// // two groups: 4 input channels, a filter of 2 in, 2 out (one per group)
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 10.0, 20.0], &[1, 1, 1, 4])?;
    /// let f = Tensor::from_vec(vec![1.0f32, 0.0, 1.0, 0.0], &[1, 1, 2, 2])?;
    /// let y = x.conv2d(&f, [1, 1], Padding::Valid, [1, 1])?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![1.0 + 2.0, 0.0]);
    /// let bad = Tensor::ones(&[1, 1, 3, 2], gradtape::DType::F32);
    /// assert!(x.conv2d(&bad, [1, 1], Padding::Valid, [1, 1]).is_err()); // 4 % 3 != 0
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn conv2d(&self, filter: &Tensor, strides: [i64; 2], padding: Padding, dilations: [i64; 2]) -> Result<Tensor> {
        const OP: &str = "conv2d";
        fwd(
            OP,
            self,
            filter,
            Cfg::new(OP, Kind::Dense, strides, padding, dilations)?,
        )
    }

    /// The gradient of [`conv2d`](Self::conv2d) with respect to its input:
    /// `out_backprop` `[n, oh, ow, out]` and `filter` `[kh, kw, c, out]` give
    /// a tensor of shape `input_sizes = [n, h, w, c]` (TensorFlow's
    /// `conv2d_backprop_input`). Differentiable in `filter` and `out_backprop`.
    ///
    /// ```
    /// use gradtape::{DType, Padding, Tensor};
    /// let f = Tensor::ones(&[2, 2, 1, 1], DType::F64);
    /// let dy = Tensor::ones(&[1, 1, 1, 1], DType::F64);
    /// let dx = Tensor::conv2d_backprop_input(&[1, 2, 2, 1], &f, &dy, [1, 1], Padding::Valid, [1, 1])?;
    /// assert_eq!(dx.to_vec::<f64>()?, vec![1.0; 4]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn conv2d_backprop_input(
        input_sizes: &[usize],
        filter: &Tensor,
        out_backprop: &Tensor,
        strides: [i64; 2],
        padding: Padding,
        dilations: [i64; 2],
    ) -> Result<Tensor> {
        const OP: &str = "conv2d_backprop_input";
        let cfg = Cfg::new(OP, Kind::Dense, strides, padding, dilations)?;
        bwd_input(OP, input_sizes, filter, out_backprop, cfg)
    }

    /// The gradient of [`conv2d`](Self::conv2d) with respect to its filter:
    /// `input` `[n, h, w, c]` and `out_backprop` `[n, oh, ow, out]` give a
    /// tensor of shape `filter_sizes = [kh, kw, c, out]` (TensorFlow's
    /// `conv2d_backprop_filter`). Differentiable in `input` and `out_backprop`.
    ///
    /// ```
    /// use gradtape::{DType, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[1, 2, 2, 1])?;
    /// let dy = Tensor::ones(&[1, 1, 1, 1], DType::F64);
    /// let df = Tensor::conv2d_backprop_filter(&x, &[2, 2, 1, 1], &dy, [1, 1], Padding::Valid, [1, 1])?;
    /// assert_eq!(df.to_vec::<f64>()?, vec![1.0, 2.0, 3.0, 4.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn conv2d_backprop_filter(
        input: &Tensor,
        filter_sizes: &[usize],
        out_backprop: &Tensor,
        strides: [i64; 2],
        padding: Padding,
        dilations: [i64; 2],
    ) -> Result<Tensor> {
        const OP: &str = "conv2d_backprop_filter";
        let cfg = Cfg::new(OP, Kind::Dense, strides, padding, dilations)?;
        bwd_filter(OP, input, filter_sizes, out_backprop, cfg, None)
    }

    /// Transposed 2-D convolution, TensorFlow's `conv2d_transpose`: `self`
    /// `[n, h, w, in]`, `filter` `[kh, kw, out, in]` (height, width, output
    /// channels, input channels), and the requested `output_shape` `[n, oh,
    /// ow, out]`; `self` must have the shape `conv2d` would give for an input
    /// of `output_shape` with these strides, padding and dilations. It is the
    /// gradient of that `conv2d` with respect to its input.
    ///
    /// ```
    /// use gradtape::{DType, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[1, 1, 2, 1])?;
    /// let f = Tensor::ones(&[1, 2, 1, 1], DType::F32);
    /// let y = x.conv2d_transpose(&f, &[1, 1, 4, 1], [1, 2], Padding::Valid, [1, 1])?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 1.0, 2.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn conv2d_transpose(
        &self,
        filter: &Tensor,
        output_shape: &[usize],
        strides: [i64; 2],
        padding: Padding,
        dilations: [i64; 2],
    ) -> Result<Tensor> {
        const OP: &str = "conv2d_transpose";
        let cfg = Cfg::new(OP, Kind::Dense, strides, padding, dilations)?;
        bwd_input(OP, output_shape, filter, self, cfg)
    }

    /// 1-D convolution, TensorFlow's `conv1d`: input `[n, w, c]` (NWC),
    /// filter `[kw, c, out]` (WIO), output `[n, ow, out]`; a filter `[kw,
    /// c / groups, out]` makes a grouped one, as [`conv2d`](Self::conv2d).
    /// Runs as a [`conv2d`](Self::conv2d) over a height of 1.
    ///
    /// ```
    /// use gradtape::{DType, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[1, 4, 1])?;
    /// let f = Tensor::from_vec(vec![1.0f64, -1.0], &[2, 1, 1])?;
    /// let y = x.conv1d(&f, 1, Padding::Valid, 1)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![-1.0, -1.0, -1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn conv1d(&self, filter: &Tensor, stride: i64, padding: Padding, dilation: i64) -> Result<Tensor> {
        const OP: &str = "conv1d";
        check_operands(
            OP,
            self.shape(),
            filter.shape(),
            3,
            "an NWC input and a WIO filter",
            true,
        )?;
        expect_floats(OP, self, filter)?;
        let cfg = Cfg::new(OP, Kind::Dense, [1, stride], padding, [1, dilation])?;
        // validate before recording the reshapes
        cfg.geom(
            OP,
            &[self.shape()[0], 1, self.shape()[1], self.shape()[2]],
            &[1, filter.shape()[0], filter.shape()[1], filter.shape()[2]],
        )?;
        fwd(OP, &self.expand_dims(1)?, &filter.expand_dims(0)?, cfg)?.squeeze(&[1])
    }

    /// Depthwise 2-D convolution, TensorFlow's `depthwise_conv2d`: input `[n,
    /// h, w, c]`, filter `[kh, kw, c, m]`; each input channel is convolved
    /// with its own `m` filters, giving `[n, oh, ow, c * m]` (channel `k * m +
    /// j` from input channel `k` and filter `j`). Strides, padding and
    /// dilations as [`conv2d`](Self::conv2d).
    ///
    /// ```
    /// use gradtape::{DType, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 10.0, 2.0, 20.0], &[1, 1, 2, 2])?;
    /// let f = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 2, 2, 1])?;
    /// let y = x.depthwise_conv2d(&f, [1, 1], Padding::Valid, [1, 1])?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![1.0 * 1.0 + 2.0 * 3.0, 10.0 * 2.0 + 20.0 * 4.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn depthwise_conv2d(
        &self,
        filter: &Tensor,
        strides: [i64; 2],
        padding: Padding,
        dilations: [i64; 2],
    ) -> Result<Tensor> {
        const OP: &str = "depthwise_conv2d";
        fwd(
            OP,
            self,
            filter,
            Cfg::new(OP, Kind::Depthwise, strides, padding, dilations)?,
        )
    }

    /// The gradient of [`depthwise_conv2d`](Self::depthwise_conv2d) with
    /// respect to its input, of shape `input_sizes`; differentiable in
    /// `filter` and `out_backprop`.
    ///
    /// ```
    /// use gradtape::{DType, Padding, Tensor};
    /// let f = Tensor::ones(&[1, 1, 2, 1], DType::F64);
    /// let dy = Tensor::from_vec(vec![3.0f64, 4.0], &[1, 1, 1, 2])?;
    /// let dx = Tensor::depthwise_conv2d_backprop_input(&[1, 1, 1, 2], &f, &dy, [1, 1], Padding::Valid, [1, 1])?;
    /// assert_eq!(dx.to_vec::<f64>()?, vec![3.0, 4.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn depthwise_conv2d_backprop_input(
        input_sizes: &[usize],
        filter: &Tensor,
        out_backprop: &Tensor,
        strides: [i64; 2],
        padding: Padding,
        dilations: [i64; 2],
    ) -> Result<Tensor> {
        const OP: &str = "depthwise_conv2d_backprop_input";
        let cfg = Cfg::new(OP, Kind::Depthwise, strides, padding, dilations)?;
        bwd_input(OP, input_sizes, filter, out_backprop, cfg)
    }

    /// The gradient of [`depthwise_conv2d`](Self::depthwise_conv2d) with
    /// respect to its filter, of shape `filter_sizes`; differentiable in
    /// `input` and `out_backprop`.
    ///
    /// ```
    /// use gradtape::{DType, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![5.0f64, 6.0], &[1, 1, 1, 2])?;
    /// let dy = Tensor::ones(&[1, 1, 1, 2], DType::F64);
    /// let df = Tensor::depthwise_conv2d_backprop_filter(&x, &[1, 1, 2, 1], &dy, [1, 1], Padding::Valid, [1, 1])?;
    /// assert_eq!(df.to_vec::<f64>()?, vec![5.0, 6.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn depthwise_conv2d_backprop_filter(
        input: &Tensor,
        filter_sizes: &[usize],
        out_backprop: &Tensor,
        strides: [i64; 2],
        padding: Padding,
        dilations: [i64; 2],
    ) -> Result<Tensor> {
        const OP: &str = "depthwise_conv2d_backprop_filter";
        let cfg = Cfg::new(OP, Kind::Depthwise, strides, padding, dilations)?;
        bwd_filter(OP, input, filter_sizes, out_backprop, cfg, None)
    }
}
