//! 2-D max and average pooling on NHWC data, TensorFlow's conventions.
//!
//! Max pooling's gradient scatters the cotangent to the position of each
//! window's maximum (recorded by the forward pass; the first maximum on ties,
//! as TensorFlow): the op `MaxPoolGrad`, a scatter-add that runs images in
//! parallel, whose own gradient gathers at those positions, so second order
//! works. The positions are a tensor of their own (`MaxPoolArgmax`, `i64`,
//! not differentiable), an input of `MaxPoolGrad`: a trace records where they
//! came from, so a traced gradient finds each call's maxima (a graph then
//! runs the pooling kernel twice, once for the values and once for the
//! positions, and only when the gradient is used). Average pooling is linear: its
//! gradient [`Tensor::avg_pool2d_grad`] spreads each cotangent evenly over its
//! window, and that op's gradient is the average pool again.
//!
//! Half types (`f16`, `bf16`): a maximum is exact, so max pooling runs in
//! the half type itself; the averages and the gradients' sums run in `f32`
//! and are rounded once ([`super::via_f32`]), as TensorFlow's CPU kernels
//! accumulate half types. The GPU kernels (`kernels::cuda::conv`) compute
//! the same way, for every float type.

use super::super::desc::{NnOp, PoolAttrs};
use super::super::{bind, bind_nondiff, expect_float, grads, unsupported};
use super::via_f32;
use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::conv::{positive, Geom, Padding};
use crate::kernels::cpu::pooling as k;
use crate::kernels::cuda::Win;
use crate::tensor::dtype::with_types;
use crate::tensor::{with_float_dtype, Element, Tensor};

/// The pooling geometry of an NHWC input shape `x`.
fn geom(op: &'static str, x: &[usize], ksize: [i64; 2], strides: [i64; 2], padding: Padding) -> Result<Geom> {
    if x.len() != 4 {
        return Err(Error::invalid(
            op,
            format!("needs an NHWC input of rank 4, got shape {x:?}"),
        ));
    }
    let ks = positive(op, "ksize", ksize)?;
    let st = positive(op, "strides", strides)?;
    Geom::new(op, x, ks, 1, st, [1, 1], padding)
}

/// `s` as an array (an NHWC shape, rank already checked by [`geom`]).
fn rank4(op: &'static str, s: &[usize]) -> Result<[usize; 4]> {
    s.try_into()
        .map_err(|_| Error::invalid(op, format!("needs an NHWC shape of rank 4, got {s:?}")))
}

/// The gradient of max pooling (2-D for an NHWC `xshape`, 3-D for an NDHWC
/// one): `dy` (the pooled shape) added at the flat input positions `arg` of
/// each window's maximum, giving `xshape`.
pub(crate) fn max_pool_grad(dy: &Tensor, arg: &Tensor, xshape: &[usize]) -> Result<Tensor> {
    let desc = match xshape.len() {
        4 => NnOp::MaxPoolGrad(rank4("MaxPoolGrad", xshape)?),
        _ => NnOp::MaxPool3DGrad(xshape.try_into().map_err(|_| {
            Error::invalid(
                "MaxPoolGrad",
                format!("needs an input shape of rank 4 or 5, got {xshape:?}"),
            )
        })?),
    };
    let op = desc.name();
    let (n, ny) = (xshape.first().copied().unwrap_or(0), arg.numel());
    if dy.numel() != ny {
        return Err(Error::ShapeMismatch {
            op,
            lhs: dy.shape().to_vec(),
            rhs: arg.shape().to_vec(),
        });
    }
    let nx: usize = xshape.iter().product();
    let img = nx.checked_div(n).unwrap_or(0);
    let gpu = crate::dispatch::device::offload(
        op,
        &[dy, arg],
        |_| {
            if !dy.dtype().is_float() {
                return Err(crate::kernels::gpu::no_kernel(op, dy.device(), dy.dtype()));
            }
            crate::kernels::cuda::max_pool_grad(op, dy, arg, xshape)
        },
        |h| scatter_value(op, &h[0], &h[1].values::<i64>(op)?, n, img, xshape),
    );
    let dx = match gpu {
        Some(r) => r?,
        None => scatter_value(op, dy, &arg.values::<i64>(op)?, n, img, xshape)?,
    };
    // (the shape inline: a compiled step makes this op without a tape)
    let (argc, yshape) = (arg.clone(), crate::tensor::Shape::from(dy.shape()));
    Ok(bind(desc, &[dy, arg], dx, move |_| {
        vjp(move |g, _| {
            let ddy = g[0].reshape(&[nx])?.gather(&argc, 0)?.reshape(&yshape)?;
            Ok(grads![Some(ddy), None])
        })
    }))
}

/// The value of [`max_pool_grad`]: `dy` added at the positions `idx`;
/// half types add in `f32` (windows overlap, so several cotangents may
/// meet in one element) and round once.
fn scatter_value(op: &'static str, dy: &Tensor, idx: &[i64], n: usize, img: usize, xshape: &[usize]) -> Result<Tensor> {
    if dy.dtype().is_half() {
        return via_f32(&[dy], |w| scatter_value(op, &w[0], idx, n, img, xshape));
    }
    with_types!(dy.dtype(), T => Ok(Tensor::from_storage(
        T::into_storage(k::max_pool_grad::<T>(op, &dy.values::<T>(op)?, idx, n, img)?),
        xshape,
    )), [F32: f32, F64: f64], _ => Err(unsupported(op, dy.dtype(), FLOATS)))
}

/// The dtypes the pools take.
pub(crate) const FLOATS: &str = "f32, f64, f16 or bf16";

/// Average pooling (`grad` false: `x` is the input) or its adjoint (`grad`
/// true: `x` is the pooled cotangent) with geometry `g`, shaped `shape`.
/// Half types are averaged in `f32` and rounded once.
fn avg_value(op: &'static str, x: &Tensor, g: &Geom, grad: bool, shape: &[usize]) -> Result<Tensor> {
    if x.dtype().is_float()
        && let Some(r) = crate::dispatch::device::offload(
            op,
            &[x],
            |_| crate::kernels::cuda::avg_pool(op, x, &Win::two(g), grad),
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
        let y = if grad { k::avg_pool_grad::<T>(&v, g)? } else { k::avg_pool::<T>(&v, g)? };
        Ok(Tensor::from_storage(T::into_storage(y), shape))
    }, [F32: f32, F64: f64], _ => Err(unsupported(op, x.dtype(), FLOATS)))
}

/// Max pooling's output and the flat position in `x` of each window's
/// maximum (`i64`, shape `[numel of the output]`), the latter offered to
/// traces as a `MaxPoolArgmax` node.
fn max_pool_with_argmax(op: &'static str, x: &Tensor, p: PoolAttrs) -> Result<(Tensor, Tensor)> {
    expect_float(op, x)?;
    let g = geom(op, x.shape(), p.ksize, p.strides, p.padding)?;
    let shape = [g.n, g.oh, g.ow, g.c];
    let cpu = |x: &Tensor| -> Result<(Tensor, Tensor)> {
        // (a maximum is exact in every float type: half types need no f32 copy)
        let (y, arg) = with_float_dtype!(x.dtype(), T => {
            let (y, arg) = k::max_pool::<T>(&x.values::<T>(op)?, &g)?;
            (Tensor::from_storage(T::into_storage(y), &shape), arg)
        }, _ => return Err(unsupported(op, x.dtype(), FLOATS)));
        let ny = arg.len();
        Ok((y, Tensor::from_storage(i64::into_storage(arg), &[ny])))
    };
    let (y, arg) = max_pool_value(op, x, Win::two(&g), cpu)?;
    Ok((y, bind_nondiff(NnOp::MaxPoolArgmax(p), &[x], arg)))
}

/// Max pooling's output and positions (of either rank: `win` says which)
/// on the GPU `x` lives on, through its kernel (every float type has
/// one), or through `cpu` (on `x`, or on its host copy on an emulated GPU).
pub(super) fn max_pool_value(
    op: &'static str,
    x: &Tensor,
    win: Win,
    cpu: impl Fn(&Tensor) -> Result<(Tensor, Tensor)>,
) -> Result<(Tensor, Tensor)> {
    let gpu = crate::dispatch::device::offload_pair(
        op,
        &[x],
        |_| crate::kernels::cuda::max_pool(op, x, &win),
        |h| cpu(&h[0]),
    );
    gpu.unwrap_or_else(|| cpu(x))
}

/// Max pooling's output and positions from one pass (the graph
/// compiler's merged `MaxPool` and `MaxPoolArgmax` nodes; nothing is
/// recorded for the output).
pub(crate) fn max_pool2d_with_argmax(x: &Tensor, p: PoolAttrs) -> Result<(Tensor, Tensor)> {
    max_pool_with_argmax("max_pool2d", x, p)
}

/// The positions of [`max_pool_with_argmax`] alone (a `MaxPoolArgmax`
/// node run again).
pub(crate) fn max_pool2d_argmax(x: &Tensor, p: PoolAttrs) -> Result<Tensor> {
    Ok(max_pool_with_argmax("max_pool2d", x, p)?.1)
}

impl Tensor {
    /// Max pooling of an NHWC tensor `[n, h, w, c]` over windows `ksize =
    /// [kh, kw]` moved by `strides = [sh, sw]`, giving `[n, oh, ow, c]` with
    /// `oh`, `ow` as for [`conv2d`](Self::conv2d); padding never wins a
    /// window. The gradient goes to the first maximum of each window.
    ///
    /// NaN is skipped, as TensorFlow does by default (PyTorch and JAX
    /// propagate it instead): a window's output is the maximum of its other
    /// elements, and the gradient goes to that element. Two departures, both
    /// artifacts of TensorFlow's CPU kernels: a window of NaN only gives NaN
    /// (TensorFlow gives the lowest finite value, as it does for a window of
    /// `-inf`, which here gives `-inf`), and where a NaN leads a window
    /// TensorFlow sends the gradient to the NaN rather than to the maximum
    /// it output.
    ///
    /// ```
    /// use gradtape::{Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 5.0, 3.0, 2.0, 0.0, 4.0], &[1, 2, 3, 1])?;
    /// let y = x.max_pool2d([2, 2], [2, 2], Padding::Same)?;
    /// assert_eq!(y.shape(), &[1, 1, 2, 1]);
    /// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 4.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn max_pool2d(&self, ksize: [i64; 2], strides: [i64; 2], padding: Padding) -> Result<Tensor> {
        let p = PoolAttrs {
            ksize,
            strides,
            padding,
        };
        let (y, arg) = max_pool_with_argmax("max_pool2d", self, p)?;
        let xshape = rank4("max_pool2d", self.shape())?;
        Ok(bind(NnOp::MaxPool(p), &[self], y, move |_| {
            vjp(move |g, _| Ok(grads![Some(max_pool_grad(&g[0], &arg, &xshape)?)]))
        }))
    }

    /// Average pooling of an NHWC tensor `[n, h, w, c]`, windows and strides
    /// as [`max_pool2d`](Self::max_pool2d). With `Padding::Same` each output
    /// is the mean of the window's valid (non-padding) elements only, as in
    /// TensorFlow.
    ///
    /// ```
    /// use gradtape::{Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[1, 2, 3, 1])?;
    /// let y = x.avg_pool2d([2, 2], [2, 2], Padding::Same)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![3.0, 4.5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn avg_pool2d(&self, ksize: [i64; 2], strides: [i64; 2], padding: Padding) -> Result<Tensor> {
        const OP: &str = "avg_pool2d";
        expect_float(OP, self)?;
        let g = geom(OP, self.shape(), ksize, strides, padding)?;
        let shape = [g.n, g.oh, g.ow, g.c];
        let y = avg_value(OP, self, &g, false, &shape)?;
        let xshape = self.shape().to_vec();
        let p = PoolAttrs {
            ksize,
            strides,
            padding,
        };
        Ok(bind(NnOp::AvgPool(p), &[self], y, move |_| {
            vjp(move |g, _| Ok(grads![Some(g[0].avg_pool2d_grad(&xshape, ksize, strides, padding)?)]))
        }))
    }

    /// The gradient of [`avg_pool2d`](Self::avg_pool2d) for an input of shape
    /// `input_shape`: `self` is the cotangent of the pooled output, and each
    /// of its elements is spread evenly over the valid elements of its
    /// window. Linear; its own gradient is `avg_pool2d`.
    ///
    /// ```
    /// use gradtape::{Padding, Tensor};
    /// let g = Tensor::from_vec(vec![4.0f64, 6.0], &[1, 1, 2, 1])?;
    /// let dx = g.avg_pool2d_grad(&[1, 2, 3, 1], [2, 2], [2, 2], Padding::Same)?;
    /// assert_eq!(dx.to_vec::<f64>()?, vec![1.0, 1.0, 3.0, 1.0, 1.0, 3.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn avg_pool2d_grad(
        &self,
        input_shape: &[usize],
        ksize: [i64; 2],
        strides: [i64; 2],
        padding: Padding,
    ) -> Result<Tensor> {
        const OP: &str = "avg_pool2d_grad";
        expect_float(OP, self)?;
        let g = geom(OP, input_shape, ksize, strides, padding)?;
        let want = [g.n, g.oh, g.ow, g.c];
        if self.shape() != want {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: want.to_vec(),
            });
        }
        let xshape = input_shape.to_vec();
        let y = avg_value(OP, self, &g, true, &xshape)?;
        let p = PoolAttrs {
            ksize,
            strides,
            padding,
        };
        let sizes = rank4(OP, input_shape)?;
        Ok(bind(NnOp::AvgPoolGrad(p, sizes), &[self], y, move |_| {
            vjp(move |g, _| Ok(grads![Some(g[0].avg_pool2d(ksize, strides, padding)?)]))
        }))
    }
}

/// A 1-D pool of an NWC tensor run as the 2-D pool `pool2d` over a height
/// of 1, after checking the arguments under the 1-D op's name.
fn pool1d(
    op: &'static str,
    x: &Tensor,
    ksize: i64,
    stride: i64,
    padding: Padding,
    pool2d: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    if x.rank() != 3 {
        return Err(Error::invalid(
            op,
            format!("needs an NWC input of rank 3, got shape {:?}", x.shape()),
        ));
    }
    expect_float(op, x)?;
    positive(op, "ksize", [ksize])?;
    positive(op, "stride", [stride])?;
    let s = x.shape();
    geom(op, &[s[0], 1, s[1], s[2]], [1, ksize], [1, stride], padding)?;
    pool2d(&x.expand_dims(1)?)?.squeeze(&[1])
}

impl Tensor {
    /// 1-D max pooling of an NWC tensor `[n, w, c]` over windows of `ksize`
    /// elements moved by `stride`, giving `[n, ow, c]` (`ow` as for
    /// [`conv1d`](Self::conv1d)), TensorFlow's `max_pool1d`. It runs as
    /// [`max_pool2d`](Self::max_pool2d) over a height of 1, so ties, NaN
    /// and the gradient behave as there.
    ///
    /// ```
    /// use gradtape::{Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 5.0, 3.0, 2.0, 4.0], &[1, 5, 1])?;
    /// let y = x.max_pool1d(2, 2, Padding::Same)?;
    /// assert_eq!(y.shape(), &[1, 3, 1]);
    /// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 3.0, 4.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn max_pool1d(&self, ksize: i64, stride: i64, padding: Padding) -> Result<Tensor> {
        pool1d("max_pool1d", self, ksize, stride, padding, |x| {
            x.max_pool2d([1, ksize], [1, stride], padding)
        })
    }

    /// 1-D average pooling of an NWC tensor `[n, w, c]`, windows as
    /// [`max_pool1d`](Self::max_pool1d); with `Padding::Same` each output
    /// is the mean of its window's valid elements, as in TensorFlow. It
    /// runs as [`avg_pool2d`](Self::avg_pool2d) over a height of 1.
    ///
    /// ```
    /// use gradtape::{Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f64, 5.0, 3.0, 2.0, 4.0], &[1, 5, 1])?;
    /// let y = x.avg_pool1d(2, 2, Padding::Same)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![3.0, 2.5, 4.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn avg_pool1d(&self, ksize: i64, stride: i64, padding: Padding) -> Result<Tensor> {
        pool1d("avg_pool1d", self, ksize, stride, padding, |x| {
            x.avg_pool2d([1, ksize], [1, stride], padding)
        })
    }
}
