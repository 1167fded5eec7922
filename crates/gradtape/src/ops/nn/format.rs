//! Channels-first data (`NCW`, `NCHW`, `NCDHW`), TensorFlow's
//! `data_format` argument, and `separable_conv2d`.
//!
//! The kernels work on channels-last data only. A channels-first call
//! transposes its input to channels-last, runs the channels-last op and
//! transposes the result back (TensorFlow's CPU kernels do the same for
//! several of these ops). The transposes are differentiable views, so
//! gradients, higher orders and traces work as for the channels-last ops;
//! the cost is a copy of the input when the kernel reads it and a strided
//! result. Filters keep their layout (HWIO, DHWIO) in both formats, as in
//! TensorFlow.

use super::super::expect_same_dtype;
use crate::error::{Error, Result};
use crate::kernels::cpu::conv::Padding;
use crate::tensor::Tensor;

/// Where the channels of an image batch lie: TensorFlow's `data_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DataFormat {
    /// Channels last: `NWC`, `NHWC`, `NDHWC` (TensorFlow's default).
    #[default]
    ChannelsLast,
    /// Channels first: `NCW`, `NCHW`, `NCDHW`.
    ChannelsFirst,
}

impl DataFormat {
    /// TensorFlow's name of this format for data of rank `rank` (3, 4 or 5).
    fn name(self, rank: usize) -> &'static str {
        match (self, rank) {
            (DataFormat::ChannelsLast, 3) => "NWC",
            (DataFormat::ChannelsLast, 4) => "NHWC",
            (DataFormat::ChannelsLast, _) => "NDHWC",
            (DataFormat::ChannelsFirst, 3) => "NCW",
            (DataFormat::ChannelsFirst, 4) => "NCHW",
            (DataFormat::ChannelsFirst, _) => "NCDHW",
        }
    }
}

/// `x` (of rank `rank` in `format`) as channels-last.
fn to_last(op: &'static str, x: &Tensor, rank: usize, format: DataFormat) -> Result<Tensor> {
    if x.rank() != rank {
        return Err(Error::invalid(
            op,
            format!(
                "needs an {} input of rank {rank}, got shape {:?}",
                format.name(rank),
                x.shape()
            ),
        ));
    }
    match format {
        DataFormat::ChannelsLast => Ok(x.clone()),
        DataFormat::ChannelsFirst => {
            let perm: Vec<usize> = std::iter::once(0).chain(2..rank).chain([1]).collect();
            x.permute(&perm)
        }
    }
}

/// A channels-last `y` back in `format`.
fn from_last(y: Tensor, format: DataFormat) -> Result<Tensor> {
    match format {
        DataFormat::ChannelsLast => Ok(y),
        DataFormat::ChannelsFirst => {
            let r = y.rank();
            let perm: Vec<usize> = [0, r - 1].into_iter().chain(1..r - 1).collect();
            y.permute(&perm)
        }
    }
}

/// The channels-last op `op_last` run on `x`, data of rank `rank` in
/// `format` (checked, under `op`'s name): `x` transposed to channels-last,
/// `op_last` on it, and its result transposed back. Every channels-first
/// form below is this one transpose-around.
fn via_channels_last(
    op: &'static str,
    x: &Tensor,
    rank: usize,
    format: DataFormat,
    op_last: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let x = to_last(op, x, rank, format)?;
    from_last(op_last(&x)?, format)
}

impl Tensor {
    /// [`conv2d`](Self::conv2d) on data in `format`: `[n, h, w, c]`
    /// (`ChannelsLast`) or `[n, c, h, w]` (`ChannelsFirst`, giving `[n, out,
    /// oh, ow]`). The filter is HWIO in both; `strides` and `dilations` are
    /// `[height, width]`. Channels-first runs as transposes around the
    /// channels-last op.
    ///
    /// ```
    /// use gradtape::{DataFormat, DType, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0, 40.0], &[1, 2, 2, 2])?; // NCHW
    /// let f = Tensor::ones(&[2, 2, 2, 1], DType::F32);
    /// let y = x.conv2d_with_format(&f, [1, 1], Padding::Valid, [1, 1], DataFormat::ChannelsFirst)?;
    /// assert_eq!(y.shape(), &[1, 1, 1, 1]);
    /// assert_eq!(y.to_vec::<f32>()?, vec![110.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn conv2d_with_format(
        &self,
        filter: &Tensor,
        strides: [i64; 2],
        padding: Padding,
        dilations: [i64; 2],
        format: DataFormat,
    ) -> Result<Tensor> {
        via_channels_last("conv2d", self, 4, format, |x| {
            x.conv2d(filter, strides, padding, dilations)
        })
    }

    /// [`max_pool2d`](Self::max_pool2d) on data in `format` (`NHWC` or
    /// `NCHW`); `ksize` and `strides` are `[height, width]`. Channels-first
    /// runs as transposes around the channels-last op.
    ///
    /// ```
    /// use gradtape::{DataFormat, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 5.0, 3.0, 2.0, -1.0, -5.0, -3.0, -2.0], &[1, 2, 2, 2])?; // NCHW
    /// let y = x.max_pool2d_with_format([2, 2], [2, 2], Padding::Valid, DataFormat::ChannelsFirst)?;
    /// assert_eq!(y.shape(), &[1, 2, 1, 1]);
    /// assert_eq!(y.to_vec::<f32>()?, vec![5.0, -1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn max_pool2d_with_format(
        &self,
        ksize: [i64; 2],
        strides: [i64; 2],
        padding: Padding,
        format: DataFormat,
    ) -> Result<Tensor> {
        via_channels_last("max_pool2d", self, 4, format, |x| x.max_pool2d(ksize, strides, padding))
    }

    /// [`avg_pool2d`](Self::avg_pool2d) on data in `format` (`NHWC` or
    /// `NCHW`). Channels-first runs as transposes around the channels-last
    /// op.
    ///
    /// ```
    /// use gradtape::{DataFormat, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f64, 5.0, 3.0, 2.0, -1.0, -5.0, -3.0, -2.0], &[1, 2, 2, 2])?; // NCHW
    /// let y = x.avg_pool2d_with_format([2, 2], [2, 2], Padding::Valid, DataFormat::ChannelsFirst)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![2.75, -2.75]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn avg_pool2d_with_format(
        &self,
        ksize: [i64; 2],
        strides: [i64; 2],
        padding: Padding,
        format: DataFormat,
    ) -> Result<Tensor> {
        via_channels_last("avg_pool2d", self, 4, format, |x| x.avg_pool2d(ksize, strides, padding))
    }

    /// [`bias_add`](Self::bias_add) with the channels in `format`:
    /// `ChannelsLast` adds along the last axis, `ChannelsFirst` along axis 1
    /// (`x` of rank 2 or more; TensorFlow's `data_format="NCHW"`, which it
    /// applies to every rank). Channels-first runs as transposes around the
    /// channels-last op.
    ///
    /// ```
    /// use gradtape::{DataFormat, Tensor};
    /// let x = Tensor::zeros(&[1, 2, 2], gradtape::DType::F32);
    /// let y = x.bias_add_with_format(&Tensor::vector(&[1.0f32, 2.0]), DataFormat::ChannelsFirst)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 1.0, 2.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn bias_add_with_format(&self, bias: &Tensor, format: DataFormat) -> Result<Tensor> {
        const OP: &str = "bias_add";
        match format {
            DataFormat::ChannelsLast => self.bias_add(bias),
            DataFormat::ChannelsFirst => {
                expect_same_dtype(OP, self, bias)?;
                if self.rank() < 2 || bias.rank() != 1 || bias.shape()[0] != self.shape()[1] {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "channels-first needs an input of rank >= 2 whose dim 1 equals the \
                             length of a vector bias, got shapes {:?} and {:?}",
                            self.shape(),
                            bias.shape()
                        ),
                    ));
                }
                via_channels_last(OP, self, self.rank(), format, |x| x.bias_add(bias))
            }
        }
    }

    /// [`conv3d`](Self::conv3d) on data in `format`: `[n, d, h, w, c]`
    /// (`ChannelsLast`) or `[n, c, d, h, w]` (`ChannelsFirst`, giving `[n,
    /// out, od, oh, ow]`). The filter is DHWIO in both. Channels-first runs
    /// as transposes around the channels-last op.
    ///
    /// ```
    /// use gradtape::{DataFormat, DType, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f64, 2.0, 10.0, 20.0], &[1, 2, 2, 1, 1])?; // NCDHW
    /// let f = Tensor::ones(&[1, 1, 1, 2, 3], DType::F64);
    /// let y = x.conv3d_with_format(&f, [1, 1, 1], Padding::Valid, [1, 1, 1], DataFormat::ChannelsFirst)?;
    /// assert_eq!(y.shape(), &[1, 3, 2, 1, 1]);
    /// assert_eq!(y.to_vec::<f64>()?, vec![11.0, 22.0, 11.0, 22.0, 11.0, 22.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn conv3d_with_format(
        &self,
        filter: &Tensor,
        strides: [i64; 3],
        padding: Padding,
        dilations: [i64; 3],
        format: DataFormat,
    ) -> Result<Tensor> {
        via_channels_last("conv3d", self, 5, format, |x| {
            x.conv3d(filter, strides, padding, dilations)
        })
    }

    /// [`max_pool3d`](Self::max_pool3d) on data in `format` (`NDHWC` or
    /// `NCDHW`). Channels-first runs as transposes around the channels-last
    /// op.
    ///
    /// ```
    /// use gradtape::{DataFormat, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 4.0, -1.0, -4.0], &[1, 2, 2, 1, 1])?; // NCDHW
    /// let y = x.max_pool3d_with_format([2, 1, 1], [1, 1, 1], Padding::Valid, DataFormat::ChannelsFirst)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![4.0, -1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn max_pool3d_with_format(
        &self,
        ksize: [i64; 3],
        strides: [i64; 3],
        padding: Padding,
        format: DataFormat,
    ) -> Result<Tensor> {
        via_channels_last("max_pool3d", self, 5, format, |x| x.max_pool3d(ksize, strides, padding))
    }

    /// [`avg_pool3d`](Self::avg_pool3d) on data in `format` (`NDHWC` or
    /// `NCDHW`). Channels-first runs as transposes around the channels-last
    /// op.
    ///
    /// ```
    /// use gradtape::{DataFormat, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f64, 4.0, -1.0, -4.0], &[1, 2, 2, 1, 1])?; // NCDHW
    /// let y = x.avg_pool3d_with_format([2, 1, 1], [1, 1, 1], Padding::Valid, DataFormat::ChannelsFirst)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![2.5, -2.5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn avg_pool3d_with_format(
        &self,
        ksize: [i64; 3],
        strides: [i64; 3],
        padding: Padding,
        format: DataFormat,
    ) -> Result<Tensor> {
        via_channels_last("avg_pool3d", self, 5, format, |x| x.avg_pool3d(ksize, strides, padding))
    }

    /// [`conv1d`](Self::conv1d) on data in `format`: `[n, w, c]` (`NWC`) or
    /// `[n, c, w]` (`NCW`, giving `[n, out, ow]`); the filter is `[kw, c,
    /// out]` in both. Channels-first runs as transposes around the
    /// channels-last op.
    ///
    /// ```
    /// use gradtape::{DataFormat, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 10.0, 20.0, 30.0], &[1, 2, 3])?; // NCW
    /// let f = Tensor::from_vec(vec![1.0f64, 1.0, 0.0, 0.0], &[2, 2, 1])?;
    /// let y = x.conv1d_with_format(&f, 1, Padding::Valid, 1, DataFormat::ChannelsFirst)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![11.0, 22.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn conv1d_with_format(
        &self,
        filter: &Tensor,
        stride: i64,
        padding: Padding,
        dilation: i64,
        format: DataFormat,
    ) -> Result<Tensor> {
        via_channels_last("conv1d", self, 3, format, |x| {
            x.conv1d(filter, stride, padding, dilation)
        })
    }

    /// [`max_pool1d`](Self::max_pool1d) on data in `format` (`NWC` or
    /// `NCW`). Channels-first runs as transposes around the channels-last
    /// op.
    ///
    /// ```
    /// use gradtape::{DataFormat, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 3.0, -1.0, -3.0], &[1, 2, 2])?; // NCW
    /// let y = x.max_pool1d_with_format(2, 1, Padding::Valid, DataFormat::ChannelsFirst)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![3.0, -1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn max_pool1d_with_format(
        &self,
        ksize: i64,
        stride: i64,
        padding: Padding,
        format: DataFormat,
    ) -> Result<Tensor> {
        via_channels_last("max_pool1d", self, 3, format, |x| x.max_pool1d(ksize, stride, padding))
    }

    /// [`avg_pool1d`](Self::avg_pool1d) on data in `format` (`NWC` or
    /// `NCW`). Channels-first runs as transposes around the channels-last
    /// op.
    ///
    /// ```
    /// use gradtape::{DataFormat, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f64, 3.0, -1.0, -3.0], &[1, 2, 2])?; // NCW
    /// let y = x.avg_pool1d_with_format(2, 1, Padding::Valid, DataFormat::ChannelsFirst)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![2.0, -2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn avg_pool1d_with_format(
        &self,
        ksize: i64,
        stride: i64,
        padding: Padding,
        format: DataFormat,
    ) -> Result<Tensor> {
        via_channels_last("avg_pool1d", self, 3, format, |x| x.avg_pool1d(ksize, stride, padding))
    }

    /// [`separable_conv2d`](Self::separable_conv2d) on data in `format`
    /// (`NHWC` or `NCHW`); the filters keep their layouts. Channels-first
    /// runs as transposes around the channels-last op.
    ///
    /// ```
    /// use gradtape::{DataFormat, DType, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 10.0, 20.0], &[1, 2, 1, 2])?; // NCHW
    /// let dw = Tensor::ones(&[1, 2, 2, 1], DType::F32);
    /// let pw = Tensor::from_vec(vec![1.0f32, -1.0], &[1, 1, 2, 1])?;
    /// let y = x.separable_conv2d_with_format(&dw, &pw, [1, 1], Padding::Valid, [1, 1], DataFormat::ChannelsFirst)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![3.0 - 30.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn separable_conv2d_with_format(
        &self,
        depthwise_filter: &Tensor,
        pointwise_filter: &Tensor,
        strides: [i64; 2],
        padding: Padding,
        dilations: [i64; 2],
        format: DataFormat,
    ) -> Result<Tensor> {
        via_channels_last("separable_conv2d", self, 4, format, |x| {
            x.separable_conv2d(depthwise_filter, pointwise_filter, strides, padding, dilations)
        })
    }

    /// Separable 2-D convolution, TensorFlow's `separable_conv2d`: a
    /// [`depthwise_conv2d`](Self::depthwise_conv2d) of the NHWC input `[n,
    /// h, w, c]` with `depthwise_filter` `[kh, kw, c, m]` (strides, padding
    /// and dilations apply to it), then a 1x1 [`conv2d`](Self::conv2d)
    /// (stride 1, VALID) with `pointwise_filter` `[1, 1, c * m, out]`,
    /// giving `[n, oh, ow, out]`. A composite of those two ops. TensorFlow
    /// rejects strides above 1 together with dilations above 1; here that
    /// combination is the depthwise convolution with both.
    ///
    /// ```
    /// use gradtape::{DType, Padding, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 10.0, 2.0, 20.0], &[1, 1, 2, 2])?;
    /// let dw = Tensor::ones(&[1, 2, 2, 1], DType::F32);
    /// let pw = Tensor::from_vec(vec![1.0f32, -1.0], &[1, 1, 2, 1])?;
    /// let y = x.separable_conv2d(&dw, &pw, [1, 1], Padding::Valid, [1, 1])?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![3.0 - 30.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn separable_conv2d(
        &self,
        depthwise_filter: &Tensor,
        pointwise_filter: &Tensor,
        strides: [i64; 2],
        padding: Padding,
        dilations: [i64; 2],
    ) -> Result<Tensor> {
        const OP: &str = "separable_conv2d";
        let (ds, ps) = (depthwise_filter.shape(), pointwise_filter.shape());
        let channels = (ds.len() == 4).then(|| ds[2].checked_mul(ds[3])).flatten();
        if ps.len() != 4 || ps[0] != 1 || ps[1] != 1 || Some(ps[2]) != channels {
            return Err(Error::invalid(
                OP,
                format!(
                    "needs a pointwise filter of shape [1, 1, in_channels * multiplier, out] for the \
                     depthwise filter of shape {ds:?}, got {ps:?}"
                ),
            ));
        }
        if self.rank() != 4 || ds[2] != self.shape()[3] {
            return Err(Error::invalid(
                OP,
                format!(
                    "needs an NHWC input of rank 4 whose channels match the depthwise filter's dim 2, \
                     got shapes {:?} and {ds:?}",
                    self.shape()
                ),
            ));
        }
        self.depthwise_conv2d(depthwise_filter, strides, padding, dilations)?
            .conv2d(pointwise_filter, [1, 1], Padding::Valid, [1, 1])
    }
}
