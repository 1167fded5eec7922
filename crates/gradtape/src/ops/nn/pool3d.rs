//! 3-D max and average pooling on NDHWC data, TensorFlow's conventions
//! (`max_pool3d`, `avg_pool3d`), built as the 2-D pools of `pool.rs` are:
//! max pooling's gradient scatters to each window's first maximum (the
//! positions a node of their own, `MaxPool3DArgmax`, so traces find them
//! again), and its own gradient gathers there; average pooling is linear,
//! its gradient [`Tensor::avg_pool3d_grad`] spreads evenly, and that op's
//! gradient is the average pool again. Both have forward-mode rules (a
//! gather of the tangent at the maxima; the pool of the tangent). Half
//! types as in the 2-D pools: maxima in the half type, averages in `f32`.
//! (TensorFlow 2.21's CPU kernels take `bf16` here but not `f16`, which
//! only its GPU kernels take; both work here.)

use super::super::desc::{NnOp, Pool3Attrs};
use super::super::{bind_jvp, bind_nondiff, expect_float, grads, only, unsupported};
use super::pool::{max_pool_grad, max_pool_value, FLOATS};
use super::via_f32;
use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::conv::{positive, Padding};
use crate::kernels::cpu::conv3d::{self as k, Geom3};
use crate::kernels::cuda::Win;
use crate::tensor::dtype::with_types;
use crate::tensor::{with_float_dtype, Element, Tensor};

/// The pooling geometry of an NDHWC input shape `x`.
fn geom(op: &'static str, x: &[usize], p: Pool3Attrs) -> Result<Geom3> {
    if x.len() != 5 {
        return Err(Error::invalid(
            op,
            format!("needs an NDHWC input of rank 5, got shape {x:?}"),
        ));
    }
    let ks = positive(op, "ksize", p.ksize)?;
    let st = positive(op, "strides", p.strides)?;
    Geom3::new(op, x, ks, 1, st, [1, 1, 1], p.padding)
}

fn out_shape(g: &Geom3) -> [usize; 5] {
    [g.n, g.y[0], g.y[1], g.y[2], g.c]
}

/// Max pooling's output and the flat position of each window's maximum
/// (`i64`, one per output element), the latter a `MaxPool3DArgmax` node.
fn with_argmax(op: &'static str, x: &Tensor, p: Pool3Attrs) -> Result<(Tensor, Tensor)> {
    expect_float(op, x)?;
    let g = geom(op, x.shape(), p)?;
    let cpu = |x: &Tensor| -> Result<(Tensor, Tensor)> {
        // (a maximum is exact in every float type: half types need no f32 copy)
        let (y, arg) = with_float_dtype!(x.dtype(), T => {
            let (y, arg) = k::max_pool3d::<T>(&x.values::<T>(op)?, &g)?;
            (Tensor::from_storage(T::into_storage(y), &out_shape(&g)), arg)
        }, _ => return Err(unsupported(op, x.dtype(), FLOATS)));
        let ny = arg.len();
        Ok((y, Tensor::from_storage(i64::into_storage(arg), &[ny])))
    };
    // (the 2-D pools' GPU kernel, with a depth: `kernels::cuda::conv`)
    let (y, arg) = max_pool_value(op, x, Win::three(&g), cpu)?;
    Ok((y, bind_nondiff(NnOp::MaxPool3DArgmax(p), &[x], arg)))
}

/// The positions of [`with_argmax`] alone (a `MaxPool3DArgmax` node run again).
pub(crate) fn max_pool3d_argmax(x: &Tensor, p: Pool3Attrs) -> Result<Tensor> {
    Ok(with_argmax("max_pool3d", x, p)?.1)
}

/// 3-D average pooling (`grad` false) or its adjoint (`grad` true) with
/// geometry `g`, shaped `shape`; half types averaged in `f32`, rounded once.
fn avg_value(op: &'static str, x: &Tensor, g: &Geom3, grad: bool, shape: &[usize]) -> Result<Tensor> {
    if x.dtype().is_float()
        && let Some(r) = crate::dispatch::device::offload(
            op,
            &[x],
            |_| crate::kernels::cuda::avg_pool(op, x, &Win::three(g), grad),
            |h| avg_value(op, &h[0], g, grad, shape),
        )
    {
        return r;
    }
    if x.dtype().is_half() {
        return via_f32(&[x], |w| avg_value(op, &w[0], g, grad, shape));
    }
    with_types!(x.dtype(), T => {
        let v = x.values::<T>(op)?;
        let y = if grad { k::avg_pool3d_grad::<T>(&v, g)? } else { k::avg_pool3d::<T>(&v, g)? };
        Ok(Tensor::from_storage(T::into_storage(y), shape))
    }, [F32: f32, F64: f64], _ => Err(unsupported(op, x.dtype(), FLOATS)))
}

/// `t` gathered at the flat positions `arg`, shaped `yshape`.
fn gather_at(t: &Tensor, arg: &Tensor, yshape: &[usize]) -> Result<Tensor> {
    t.reshape(&[t.numel()])?.gather(arg, 0)?.reshape(yshape)
}

impl Tensor {
    /// 3-D max pooling of an NDHWC tensor `[n, d, h, w, c]` over windows
    /// `ksize = [kd, kh, kw]` moved by `strides`, giving `[n, od, oh, ow,
    /// c]` with sizes as for [`conv3d`](Self::conv3d); padding never wins a
    /// window. The gradient goes to the first maximum of each window (in
    /// depth, row, column order); NaN is treated as in
    /// [`max_pool2d`](Self::max_pool2d).
    ///
    /// ```
    /// use gradtape::{Padding, Tensor};
    /// let x = Tensor::from_vec((0..8).map(|v| v as f32).collect(), &[1, 2, 2, 2, 1])?;
    /// let y = x.max_pool3d([2, 2, 2], [2, 2, 2], Padding::Valid)?;
    /// assert_eq!(y.shape(), &[1, 1, 1, 1, 1]);
    /// assert_eq!(y.to_vec::<f32>()?, vec![7.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn max_pool3d(&self, ksize: [i64; 3], strides: [i64; 3], padding: Padding) -> Result<Tensor> {
        let p = Pool3Attrs {
            ksize,
            strides,
            padding,
        };
        let (y, arg) = with_argmax("max_pool3d", self, p)?;
        let (xshape, yshape) = (self.shape().to_vec(), y.shape().to_vec());
        let arg2 = arg.clone();
        Ok(bind_jvp(
            NnOp::MaxPool3D(p),
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(max_pool_grad(&g[0], &arg, &xshape)?)])),
            move |t, _| gather_at(only(t)?, &arg2, &yshape),
        ))
    }

    /// 3-D average pooling of an NDHWC tensor, windows and strides as
    /// [`max_pool3d`](Self::max_pool3d). With `Padding::Same` each output is
    /// the mean of its window's valid (non-padding) elements only, as in
    /// TensorFlow.
    ///
    /// ```
    /// use gradtape::{Padding, Tensor};
    /// let x = Tensor::from_vec((0..8).map(|v| v as f64).collect(), &[1, 2, 2, 2, 1])?;
    /// let y = x.avg_pool3d([2, 2, 2], [2, 2, 2], Padding::Same)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![3.5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn avg_pool3d(&self, ksize: [i64; 3], strides: [i64; 3], padding: Padding) -> Result<Tensor> {
        const OP: &str = "avg_pool3d";
        expect_float(OP, self)?;
        let p = Pool3Attrs {
            ksize,
            strides,
            padding,
        };
        let g = geom(OP, self.shape(), p)?;
        let y = avg_value(OP, self, &g, false, &out_shape(&g))?;
        let xshape = self.shape().to_vec();
        Ok(bind_jvp(
            NnOp::AvgPool3D(p),
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].avg_pool3d_grad(&xshape, ksize, strides, padding)?)])),
            |t, _| only(t)?.avg_pool3d(ksize, strides, padding),
        ))
    }

    /// The gradient of [`avg_pool3d`](Self::avg_pool3d) for an input of
    /// shape `input_shape`: `self` is the cotangent of the pooled output,
    /// each element spread evenly over the valid elements of its window.
    /// Linear; its own gradient is `avg_pool3d`.
    ///
    /// ```
    /// use gradtape::{Padding, Tensor};
    /// let g = Tensor::from_vec(vec![8.0f64], &[1, 1, 1, 1, 1])?;
    /// let dx = g.avg_pool3d_grad(&[1, 2, 2, 2, 1], [2, 2, 2], [2, 2, 2], Padding::Valid)?;
    /// assert_eq!(dx.to_vec::<f64>()?, vec![1.0; 8]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn avg_pool3d_grad(
        &self,
        input_shape: &[usize],
        ksize: [i64; 3],
        strides: [i64; 3],
        padding: Padding,
    ) -> Result<Tensor> {
        const OP: &str = "avg_pool3d_grad";
        expect_float(OP, self)?;
        let p = Pool3Attrs {
            ksize,
            strides,
            padding,
        };
        let g = geom(OP, input_shape, p)?;
        let want = out_shape(&g);
        if self.shape() != want {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: want.to_vec(),
            });
        }
        let sizes: [usize; 5] = [g.n, g.x[0], g.x[1], g.x[2], g.c];
        let y = avg_value(OP, self, &g, true, &sizes)?;
        Ok(bind_jvp(
            NnOp::AvgPool3DGrad(p, sizes),
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].avg_pool3d(ksize, strides, padding)?)])),
            |t, _| only(t)?.avg_pool3d_grad(&sizes, ksize, strides, padding),
        ))
    }
}
