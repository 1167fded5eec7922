//! `Sequential`: layers applied one after the other.

use super::{unique_name, Layer, Module};
use crate::autodiff::variable::Variable;
use crate::error::Result;
use crate::tensor::Tensor;

/// Layers applied in order, Keras's `Sequential`. Its variables are its
/// layers' variables, layer by layer.
///
/// ```
/// use gradtape::nn::{Activation, Dense, Dropout, Layer, Module, Sequential};
/// use gradtape::{DType, Rng, Tensor};
/// let mut rng = Rng::new(0);
/// let model = Sequential::new()
///     .add(Dense::builder(4, 8).activation(Activation::Relu).build(&mut rng)?)
///     .add(Dropout::new(0.5, &mut rng)?)
///     .add(Dense::new(8, 2, &mut rng)?);
/// assert_eq!(model.variables().len(), 4);
/// assert_eq!(model.count_params(), 4 * 8 + 8 + 8 * 2 + 2);
/// let y = model.forward(&Tensor::ones(&[3, 4], DType::F32), false)?;
/// assert_eq!(y.shape(), &[3, 2]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Sequential {
    name: String,
    layers: Vec<Box<dyn Layer>>,
}

impl Default for Sequential {
    fn default() -> Self {
        Sequential::new()
    }
}

impl Sequential {
    /// An empty model (the identity) named `sequential` (made unique).
    pub fn new() -> Sequential {
        Sequential {
            name: unique_name("sequential"),
            layers: Vec::new(),
        }
    }

    /// Appends a layer (builder style).
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, layer: impl Layer + 'static) -> Sequential {
        self.layers.push(Box::new(layer));
        self
    }

    /// Appends a layer.
    pub fn push(&mut self, layer: impl Layer + 'static) {
        self.layers.push(Box::new(layer));
    }

    /// The layers, in order.
    pub fn layers(&self) -> &[Box<dyn Layer>] {
        &self.layers
    }
}

impl Module for Sequential {
    fn variables(&self) -> Vec<Variable> {
        self.layers.iter().flat_map(|l| l.variables()).collect()
    }
}

impl Layer for Sequential {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        let mut h = x.clone();
        for l in &self.layers {
            h = l.forward(&h, training)?;
        }
        Ok(h)
    }
}
