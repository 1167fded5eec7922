//! Layers without weights: `Dropout`, `Flatten`, pooling, upsampling.

use std::sync::Mutex;

use super::{unique_name, Layer, Module};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::ops::Padding;
use crate::random::Rng;
use crate::tensor::Tensor;

/// Dropout, Keras's `Dropout`: while training each element is zeroed with
/// probability `rate` and the others scaled by `1 / (1 − rate)`; at
/// inference the identity. The layer owns a generator split off the one it
/// was built with, so each training call draws a new mask; a traced step
/// draws at each run the mask the eager step would (see [`crate::random`]).
///
/// ```
/// use gradtape::{nn::{Dropout, Layer}, DType, Rng, Tensor};
/// let d = Dropout::new(0.5, &mut Rng::new(0))?;
/// let x = Tensor::ones(&[1000], DType::F32);
/// let a = d.forward(&x, true)?.to_vec::<f32>()?;
/// let b = d.forward(&x, true)?.to_vec::<f32>()?;
/// assert!(a.iter().all(|&v| v == 0.0 || v == 2.0));
/// assert_ne!(a, b);                                        // a new mask each call
/// assert_eq!(d.forward(&x, false)?.to_vec::<f32>()?, vec![1.0; 1000]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Dropout {
    name: String,
    rate: f64,
    rng: Mutex<Rng>,
}

impl Dropout {
    /// A dropout layer; `rate` must lie in `[0, 1)`.
    pub fn new(rate: f64, rng: &mut Rng) -> Result<Dropout> {
        if !(0.0..1.0).contains(&rate) {
            return Err(Error::invalid(
                "Dropout",
                format!("rate must lie in [0, 1), got {rate}"),
            ));
        }
        Ok(Dropout {
            name: unique_name("dropout"),
            rate,
            rng: Mutex::new(rng.split()),
        })
    }
}

impl Module for Dropout {
    fn variables(&self) -> Vec<Variable> {
        Vec::new()
    }
}

impl Layer for Dropout {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        if !training || self.rate == 0.0 {
            return Ok(x.clone());
        }
        // (a draw of the layer's stream: in a traced step, at each run)
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        rng.draw(|seed| x.dropout(self.rate, seed))
    }
}

/// Flattens every axis after the first: `[n, ...]` to `[n, prod(...)]`
/// (row-major, so an NHWC feature map flattens in NHWC order).
///
/// ```
/// use gradtape::{nn::{Flatten, Layer}, DType, Tensor};
/// let y = Flatten::new().forward(&Tensor::zeros(&[2, 3, 4], DType::F32), false)?;
/// assert_eq!(y.shape(), &[2, 12]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Flatten {
    name: String,
}

impl Default for Flatten {
    fn default() -> Self {
        Flatten::new()
    }
}

impl Flatten {
    /// A flatten layer.
    pub fn new() -> Flatten {
        Flatten {
            name: unique_name("flatten"),
        }
    }
}

impl Module for Flatten {
    fn variables(&self) -> Vec<Variable> {
        Vec::new()
    }
}

impl Layer for Flatten {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        if x.rank() == 0 {
            return Err(Error::invalid("Flatten", "needs an input of rank >= 1, got a scalar"));
        }
        let n = x.shape()[0];
        x.reshape(&[n, x.shape()[1..].iter().product()])
    }
}

/// Max or average pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// The window's maximum.
    Max,
    /// The window's mean (padding excluded).
    Avg,
}

/// 2-D pooling of NHWC inputs, Keras's `MaxPooling2D` / `AveragePooling2D`.
///
/// ```
/// use gradtape::{nn::{Layer, Pool2D, PoolKind}, DType, Padding, Tensor};
/// let p = Pool2D::new(PoolKind::Max, [2, 2], [2, 2], Padding::Valid);
/// let y = p.forward(&Tensor::ones(&[1, 4, 4, 3], DType::F32), false)?;
/// assert_eq!(y.shape(), &[1, 2, 2, 3]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Pool2D {
    name: String,
    kind: PoolKind,
    size: [i64; 2],
    strides: [i64; 2],
    padding: Padding,
}

impl Pool2D {
    /// A pooling layer with window `size` and `strides` (`[height, width]`).
    pub fn new(kind: PoolKind, size: [i64; 2], strides: [i64; 2], padding: Padding) -> Pool2D {
        let base = match kind {
            PoolKind::Max => "max_pooling2d",
            PoolKind::Avg => "average_pooling2d",
        };
        Pool2D {
            name: unique_name(base),
            kind,
            size,
            strides,
            padding,
        }
    }
}

impl Module for Pool2D {
    fn variables(&self) -> Vec<Variable> {
        Vec::new()
    }
}

impl Layer for Pool2D {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        match self.kind {
            PoolKind::Max => x.max_pool2d(self.size, self.strides, self.padding),
            PoolKind::Avg => x.avg_pool2d(self.size, self.strides, self.padding),
        }
    }
}

/// Upsampling of NHWC images by whole factors, Keras's `UpSampling2D`:
/// nearest (each pixel repeated `factor` times along each axis, the
/// default) or bilinear, bicubic or area ([`Tensor::resize_images`],
/// half-pixel centres, as Keras's `ops.image.resize`).
///
/// ```
/// use gradtape::nn::{Layer, UpSampling2D};
/// use gradtape::{ResizeMethod, Tensor};
/// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[1, 1, 2, 1])?;
/// let up = UpSampling2D::new([2, 2], ResizeMethod::Nearest)?;
/// assert_eq!(up.call(&x)?.to_vec::<f32>()?, vec![1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct UpSampling2D {
    name: String,
    size: [usize; 2],
    interpolation: crate::ops::ResizeMethod,
}

impl UpSampling2D {
    /// Upsampling by `size` (`[height, width]` factors, each >= 1).
    pub fn new(size: [usize; 2], interpolation: crate::ops::ResizeMethod) -> Result<UpSampling2D> {
        if size.contains(&0) {
            return Err(Error::invalid(
                "UpSampling2D",
                format!("the factors must be >= 1, got {size:?}"),
            ));
        }
        Ok(UpSampling2D {
            name: unique_name("up_sampling2d"),
            size,
            interpolation,
        })
    }
}

impl Module for UpSampling2D {
    fn variables(&self) -> Vec<Variable> {
        Vec::new()
    }
}

impl Layer for UpSampling2D {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        if x.rank() != 4 {
            return Err(Error::invalid(
                "UpSampling2D",
                format!(
                    "expected NHWC images [batch, height, width, channels], got shape {:?}",
                    x.shape()
                ),
            ));
        }
        let [fh, fw] = self.size;
        match self.interpolation {
            crate::ops::ResizeMethod::Nearest => x.repeat(fh, 1)?.repeat(fw, 2),
            // (bicubic and area resize like bilinear, through `resize_images`)
            m @ (crate::ops::ResizeMethod::Bilinear
            | crate::ops::ResizeMethod::Bicubic
            | crate::ops::ResizeMethod::Area) => {
                let s = x.shape();
                let h = s[1].checked_mul(fh);
                let w = s[2].checked_mul(fw);
                match (h, w) {
                    (Some(h), Some(w)) => x.resize_images([h, w], m),
                    _ => Err(Error::ShapeOverflow {
                        op: "UpSampling2D",
                        shape: vec![s[1], fh, s[2], fw],
                    }),
                }
            }
        }
    }
}
