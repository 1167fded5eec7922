//! 3-D convolution on NDHWC data with DHWIO filters (TensorFlow's
//! `conv3d`), and its two adjoints `conv3d_backprop_input` and
//! `conv3d_backprop_filter` (TensorFlow's `Conv3DBackpropInputV2` and
//! `Conv3DBackpropFilterV2`), grouped where the filter has fewer input
//! channels than the input (as the 2-D ones, `conv.rs`).
//!
//! As for the 2-D convolution (`conv.rs`), the three ops are bilinear and
//! each one's gradient rule is written with the other two (the rules of
//! both ranks are one generic set, in `bilinear.rs`), so gradients of any
//! order work; being bilinear, each also has a cheap forward-mode rule
//! (`op(t_a, b) + op(a, t_b)`). The kernels are im2col + GEMM
//! (`kernels::cpu::conv3d`). Dilations are supported on every axis
//! (TensorFlow's CPU kernel accepts only 1 there; its GPU kernel and
//! `tf.nn.convolution` accept them). Half types (`f16`, `bf16`) are
//! convolved as `f32` copies and rounded once, as the 2-D convolution
//! (TensorFlow's CPU kernels accumulate them in `f32` too).

use super::super::desc::{Conv3Attrs, NnOp};
use super::super::unsupported;
use super::bilinear::{
    bind_filter, bind_fwd, bind_input, check_dy, check_operands, expect_floats, sizes, Conv, Window,
};
use super::via_f32;
use crate::error::Result;
use crate::kernels::cpu::conv::Padding;
use crate::kernels::cpu::conv3d::{self as k, Geom3};
use crate::kernels::cuda::Win;
use crate::tensor::dtype::with_types;
use crate::tensor::{Float, Tensor};

/// The attributes of one 3-D convolution (validated).
type Cfg = Window<3>;

impl Window<3> {
    /// The geometry for input shape `x` and filter shape `f`, both checked.
    /// (Groups inferred from the shapes, as the 2-D convolution's.)
    fn geom(&self, op: &'static str, x: &[usize], f: &[usize]) -> Result<Geom3> {
        let groups = check_operands(op, x, f, 5, "an NDHWC input and a DHWIO filter", true)?;
        Ok(Geom3::new(op, x, [f[0], f[1], f[2]], f[4], self.strides, self.dil, self.padding)?.grouped(groups))
    }

    fn attrs(&self) -> Conv3Attrs {
        Conv3Attrs {
            strides: self.strides,
            dilations: self.dil,
            padding: self.padding,
        }
    }
}

impl Conv for Cfg {
    const BACKPROP: &'static str = "conv3d backprop";
    const JVP: &'static str = "conv3d jvp";
    const HAS_JVP: bool = true;

    fn fwd(self, op: &'static str, x: &Tensor, f: &Tensor) -> Result<Tensor> {
        fwd(op, x, f, self)
    }

    fn bwd_input(self, op: &'static str, xs: &[usize], f: &Tensor, dy: &Tensor) -> Result<Tensor> {
        bwd_input(op, xs, f, dy, self)
    }

    fn bwd_filter(self, op: &'static str, x: &Tensor, fs: &[usize], dy: &Tensor, _: Option<&Tensor>) -> Result<Tensor> {
        bwd_filter(op, x, fs, dy, self)
    }
}

fn out_shape(g: &Geom3) -> [usize; 5] {
    [g.n, g.y[0], g.y[1], g.y[2], g.o]
}

/// `kernel(a, b)` on the values of `a` and `b`, shaped `shape` (half
/// types computed in `f32` and rounded once, as the 2-D convolution).
fn run(op: &'static str, a: &Tensor, b: &Tensor, shape: &[usize], g: &Geom3, kernel: Kernel) -> Result<Tensor> {
    // on a GPU: im2col and cuBLAS, as the 2-D convolution
    // (`kernels::cuda::conv`; the filter gradient makes its im2col matrix
    // again rather than keep the forward pass's)
    let gpu = crate::dispatch::device::offload(
        op,
        &[a, b],
        |_| {
            if shape.contains(&0) || a.numel() == 0 || b.numel() == 0 {
                return crate::kernels::gpu::filled(op, shape, 0.0, a.dtype(), a.device());
            }
            let w = Win::three(g);
            match kernel {
                Kernel::Fwd => Ok(crate::kernels::cuda::conv(op, a, b, &w)?.0),
                Kernel::Input => crate::kernels::cuda::conv_backprop_input(op, a, b, &w),
                Kernel::Filter => crate::kernels::cuda::conv_backprop_filter(op, a, None, b, &w),
            }
        },
        |h| run(op, &h[0], &h[1], shape, g, kernel),
    );
    if let Some(r) = gpu {
        return r;
    }
    fn go<T: Float>(
        op: &'static str,
        a: &Tensor,
        b: &Tensor,
        shape: &[usize],
        g: &Geom3,
        kernel: Kernel,
    ) -> Result<Tensor> {
        let (av, bv) = (a.values::<T>(op)?, b.values::<T>(op)?);
        let y = match kernel {
            Kernel::Fwd => k::conv3d(&av, &bv, g)?,
            Kernel::Input => k::conv3d_backprop_input(&av, &bv, g)?,
            Kernel::Filter => k::conv3d_backprop_filter(&av, &bv, g)?,
        };
        Ok(Tensor::from_storage(T::into_storage(y), shape))
    }
    if a.dtype().is_half() {
        return via_f32(&[a, b], |w| run(op, &w[0], &w[1], shape, g, kernel));
    }
    with_types!(a.dtype(), T => go::<T>(op, a, b, shape, g, kernel),
        [F32: f32, F64: f64], _ => Err(unsupported(op, a.dtype(), "f32, f64, f16 or bf16")))
}

#[derive(Clone, Copy)]
enum Kernel {
    Fwd,
    Input,
    Filter,
}

/// The forward convolution `x * f`.
fn fwd(op: &'static str, x: &Tensor, f: &Tensor, cfg: Cfg) -> Result<Tensor> {
    expect_floats(op, x, f)?;
    let g = cfg.geom(op, x.shape(), f.shape())?;
    let y = run(op, x, f, &out_shape(&g), &g, Kernel::Fwd)?;
    Ok(bind_fwd(cfg, NnOp::Conv3D(cfg.attrs()), x, f, y, None))
}

/// The input gradient: `dy` [n,od,oh,ow,o] and `f` -> `input_sizes` [n,d,h,w,c].
fn bwd_input(op: &'static str, input_sizes: &[usize], f: &Tensor, dy: &Tensor, cfg: Cfg) -> Result<Tensor> {
    expect_floats(op, f, dy)?;
    let xs = sizes::<5>(op, "input_sizes", input_sizes)?;
    let g = cfg.geom(op, &xs, f.shape())?;
    check_dy(op, dy, &out_shape(&g))?;
    let y = run(op, dy, f, &xs, &g, Kernel::Input)?;
    Ok(bind_input(
        cfg,
        NnOp::Conv3DBackpropInput(cfg.attrs(), xs),
        &xs,
        f,
        dy,
        y,
    ))
}

/// The filter gradient: `x` and `dy` -> `filter_sizes` [kd,kh,kw,c,o].
fn bwd_filter(op: &'static str, x: &Tensor, filter_sizes: &[usize], dy: &Tensor, cfg: Cfg) -> Result<Tensor> {
    expect_floats(op, x, dy)?;
    let fs = sizes::<5>(op, "filter_sizes", filter_sizes)?;
    let g = cfg.geom(op, x.shape(), &fs)?;
    check_dy(op, dy, &out_shape(&g))?;
    let y = run(op, x, dy, &fs, &g, Kernel::Filter)?;
    Ok(bind_filter(
        cfg,
        NnOp::Conv3DBackpropFilter(cfg.attrs(), fs),
        x,
        &fs,
        dy,
        y,
    ))
}

impl Tensor {
    /// 3-D convolution (cross-correlation, as TensorFlow's `conv3d`) of an
    /// NDHWC input `[n, d, h, w, c]` with a DHWIO filter `[kd, kh, kw, c,
    /// out]`, giving `[n, od, oh, ow, out]`. `strides` and `dilations` are
    /// `[depth, height, width]`, each `>= 1`; padding per axis as in
    /// [`conv2d`](Self::conv2d). (TensorFlow's CPU kernel rejects
    /// dilations other than 1; here they work on every axis.) A filter
    /// `[kd, kh, kw, c / groups, out]` makes a grouped convolution, as
    /// [`conv2d`](Self::conv2d)'s (TensorFlow runs those under XLA only on
    /// a CPU).
    ///
    /// Gradients: [`conv3d_backprop_input`](Self::conv3d_backprop_input)
    /// and [`conv3d_backprop_filter`](Self::conv3d_backprop_filter).
    ///
    /// ```
    /// use gradtape::{DType, Padding, Tensor};
    /// let x = Tensor::from_vec((1..=8).map(|v| v as f32).collect(), &[1, 2, 2, 2, 1])?;
    /// let f = Tensor::ones(&[2, 2, 2, 1, 1], DType::F32);
    /// let y = x.conv3d(&f, [1, 1, 1], Padding::Valid, [1, 1, 1])?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![36.0]);
    /// let y = x.conv3d(&f, [1, 1, 1], Padding::Same, [1, 1, 1])?;
    /// assert_eq!(y.shape(), &[1, 2, 2, 2, 1]);
    /// assert_eq!(y.to_vec::<f32>()?[7], 8.0);
    /// // two groups of one channel each
    /// let x = Tensor::from_vec(vec![1.0f32, 10.0], &[1, 1, 1, 1, 2])?;
    /// let f = Tensor::from_vec(vec![2.0f32, 3.0], &[1, 1, 1, 1, 2])?;
    /// let y = x.conv3d(&f, [1, 1, 1], Padding::Valid, [1, 1, 1])?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![2.0, 30.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn conv3d(&self, filter: &Tensor, strides: [i64; 3], padding: Padding, dilations: [i64; 3]) -> Result<Tensor> {
        const OP: &str = "conv3d";
        fwd(OP, self, filter, Cfg::new(OP, strides, padding, dilations)?)
    }

    /// The gradient of [`conv3d`](Self::conv3d) with respect to its input:
    /// `out_backprop` `[n, od, oh, ow, out]` and `filter` `[kd, kh, kw, c,
    /// out]` give a tensor of shape `input_sizes = [n, d, h, w, c]`.
    /// Differentiable in `filter` and `out_backprop`.
    ///
    /// ```
    /// use gradtape::{DType, Padding, Tensor};
    /// let f = Tensor::ones(&[2, 1, 1, 1, 1], DType::F64);
    /// let dy = Tensor::from_vec(vec![3.0f64], &[1, 1, 1, 1, 1])?;
    /// let dx = Tensor::conv3d_backprop_input(&[1, 2, 1, 1, 1], &f, &dy, [1, 1, 1], Padding::Valid, [1, 1, 1])?;
    /// assert_eq!(dx.to_vec::<f64>()?, vec![3.0, 3.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn conv3d_backprop_input(
        input_sizes: &[usize],
        filter: &Tensor,
        out_backprop: &Tensor,
        strides: [i64; 3],
        padding: Padding,
        dilations: [i64; 3],
    ) -> Result<Tensor> {
        const OP: &str = "conv3d_backprop_input";
        bwd_input(
            OP,
            input_sizes,
            filter,
            out_backprop,
            Cfg::new(OP, strides, padding, dilations)?,
        )
    }

    /// The gradient of [`conv3d`](Self::conv3d) with respect to its filter:
    /// `input` `[n, d, h, w, c]` and `out_backprop` `[n, od, oh, ow, out]`
    /// give a tensor of shape `filter_sizes = [kd, kh, kw, c, out]`.
    /// Differentiable in `input` and `out_backprop`.
    ///
    /// ```
    /// use gradtape::{DType, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f64, 2.0], &[1, 2, 1, 1, 1])?;
    /// let dy = Tensor::ones(&[1, 1, 1, 1, 1], DType::F64);
    /// let df = Tensor::conv3d_backprop_filter(&x, &[2, 1, 1, 1, 1], &dy, [1, 1, 1], Padding::Valid, [1, 1, 1])?;
    /// assert_eq!(df.to_vec::<f64>()?, vec![1.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn conv3d_backprop_filter(
        input: &Tensor,
        filter_sizes: &[usize],
        out_backprop: &Tensor,
        strides: [i64; 3],
        padding: Padding,
        dilations: [i64; 3],
    ) -> Result<Tensor> {
        const OP: &str = "conv3d_backprop_filter";
        bwd_filter(
            OP,
            input,
            filter_sizes,
            out_backprop,
            Cfg::new(OP, strides, padding, dilations)?,
        )
    }
}
