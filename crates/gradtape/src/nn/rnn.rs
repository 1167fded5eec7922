//! Recurrent layers over whole sequences, Keras's `LSTM`, `GRU` and
//! `Bidirectional`: a cell ([`LSTMCell`], [`GRUCell`]) run over the time
//! axis of `[batch, time, features]`, returning every step's output or the
//! last one.
//!
//! The layers own their cell, whose weights are named
//! `{layer}/lstm_cell/kernel` (Keras 3's paths) and laid out as Keras's,
//! so weights copy between the two. Each step is the cell's own
//! [`step`](LSTMCell::step): a traced function unrolls the loop (the
//! sequence length is part of the trace's signature). Masks (Keras's
//! `mask_zero` padding) are not supported: pad at the end and read the
//! output at each sequence's own length from `return_sequences`.

use super::{unique_name, GRUCell, LSTMCell, LSTMState, Layer, Module};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::random::Rng;
use crate::tensor::{DType, Tensor};

/// Options for an [`LSTM`] or a [`GRU`]; see [`LSTM::builder`].
pub struct RecurrentBuilder<L> {
    in_features: usize,
    units: usize,
    return_sequences: bool,
    go_backwards: bool,
    dtype: DType,
    name: Option<String>,
    layer: std::marker::PhantomData<L>,
}

impl<L> RecurrentBuilder<L> {
    fn new(in_features: usize, units: usize) -> Self {
        RecurrentBuilder {
            in_features,
            units,
            return_sequences: false,
            go_backwards: false,
            dtype: DType::F32,
            name: None,
            layer: std::marker::PhantomData,
        }
    }
    /// Whether the output is every step's, `[batch, time, units]`, or only
    /// the last step's, `[batch, units]` (default false, Keras's).
    pub fn return_sequences(mut self, on: bool) -> Self {
        self.return_sequences = on;
        self
    }
    /// Whether to read the sequence from its end (default false); the
    /// outputs come in that reversed order, as Keras's.
    pub fn go_backwards(mut self, on: bool) -> Self {
        self.go_backwards = on;
        self
    }
    /// The weights' dtype (default f32).
    pub fn dtype(mut self, d: DType) -> Self {
        self.dtype = d;
        self
    }
    /// The layer's name (default `lstm` or `gru`, made unique).
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = Some(n.into());
        self
    }

    /// The layer's name and its cell's.
    fn names(&self, base: &str, cell: &str) -> (String, String) {
        let name = self.name.clone().unwrap_or_else(|| unique_name(base));
        let cell = format!("{name}/{cell}");
        (name, cell)
    }

    fn options(&self, name: String) -> Options {
        Options {
            name,
            return_sequences: self.return_sequences,
            go_backwards: self.go_backwards,
        }
    }
}

impl RecurrentBuilder<LSTM> {
    /// Creates the layer, drawing the cell's weights from `rng` (as
    /// [`LSTMCell::with_dtype`]).
    pub fn build(self, rng: &mut Rng) -> Result<LSTM> {
        let (name, cell) = self.names("lstm", "lstm_cell");
        let cell = LSTMCell::named(Some(cell), self.in_features, self.units, self.dtype, rng)?;
        Ok(LSTM {
            cell,
            options: self.options(name),
        })
    }
}

impl RecurrentBuilder<GRU> {
    /// Creates the layer, drawing the cell's weights from `rng` (as
    /// [`GRUCell::with_dtype`]).
    pub fn build(self, rng: &mut Rng) -> Result<GRU> {
        let (name, cell) = self.names("gru", "gru_cell");
        let cell = GRUCell::named(Some(cell), self.in_features, self.units, self.dtype, rng)?;
        Ok(GRU {
            cell,
            options: self.options(name),
        })
    }
}

/// What the two layers share.
struct Options {
    name: String,
    return_sequences: bool,
    go_backwards: bool,
}

impl Options {
    /// `x` checked to be `[batch, time >= 1, features]`, reversed in time
    /// when going backwards.
    fn input(&self, op: &'static str, x: &Tensor) -> Result<Tensor> {
        if x.rank() != 3 || x.shape()[1] == 0 {
            return Err(Error::invalid(
                op,
                format!(
                    "expected inputs [batch, time >= 1, features], got shape {:?}",
                    x.shape()
                ),
            ));
        }
        if self.go_backwards {
            x.reverse(&[1])
        } else {
            Ok(x.clone())
        }
    }

    /// Every output, or the last.
    fn output(&self, ys: Tensor) -> Result<Tensor> {
        if self.return_sequences {
            return Ok(ys);
        }
        let t = ys.shape()[1];
        ys.narrow(1, t - 1, 1)?.squeeze(&[1])
    }
}

/// Keras's `LSTM` layer: an [`LSTMCell`] over the sequence, from a zero
/// state (or a given one, [`forward_from`](Self::forward_from)).
///
/// ```
/// use gradtape::nn::{Layer, LSTM};
/// use gradtape::{DType, Rng};
/// let mut rng = Rng::new(0);
/// let lstm = LSTM::builder(3, 5).return_sequences(true).build(&mut rng)?;
/// let x = rng.normal(&[2, 7, 3], 0.0, 1.0, DType::F32)?;
/// assert_eq!(lstm.call(&x)?.shape(), &[2, 7, 5]);
/// let last = LSTM::builder(3, 5).build(&mut rng)?;
/// assert_eq!(last.call(&x)?.shape(), &[2, 5]);
/// assert_eq!(last.cell().name(), "lstm_1/lstm_cell");
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct LSTM {
    cell: LSTMCell,
    options: Options,
}

impl LSTM {
    /// Starts a layer from `in_features` to `units`.
    pub fn builder(in_features: usize, units: usize) -> RecurrentBuilder<LSTM> {
        RecurrentBuilder::new(in_features, units)
    }

    /// The cell (its weights, its single step).
    pub fn cell(&self) -> &LSTMCell {
        &self.cell
    }

    /// The layer over `x` `[batch, time, features]` from `state` (zeros
    /// when `None`): the output, as [`Layer::forward`]'s, and the last
    /// state (Keras's `return_state=True`).
    pub fn forward_from(&self, x: &Tensor, state: Option<LSTMState>) -> Result<(Tensor, LSTMState)> {
        let x = self.options.input("LSTM", x)?;
        let state = match state {
            Some(s) => s,
            None => self.cell.zero_state(x.shape()[0])?,
        };
        let (ys, last) = self.cell.run_sequence(&x, state)?;
        Ok((self.options.output(ys)?, last))
    }
}

impl Module for LSTM {
    fn variables(&self) -> Vec<Variable> {
        self.cell.variables()
    }
}

impl Layer for LSTM {
    fn name(&self) -> &str {
        &self.options.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        Ok(self.forward_from(x, None)?.0)
    }
}

/// Keras's `GRU` layer (`reset_after=True`): a [`GRUCell`] over the
/// sequence, from a zero state (or a given one).
///
/// ```
/// use gradtape::nn::{Layer, GRU};
/// use gradtape::{DType, Rng};
/// let mut rng = Rng::new(0);
/// let gru = GRU::builder(3, 4).go_backwards(true).build(&mut rng)?;
/// let x = rng.normal(&[2, 6, 3], 0.0, 1.0, DType::F32)?;
/// let (y, h) = gru.forward_from(&x, None)?;
/// assert_eq!(y.to_vec::<f32>()?, h.to_vec::<f32>()?); // the last output is the state
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct GRU {
    cell: GRUCell,
    options: Options,
}

impl GRU {
    /// Starts a layer from `in_features` to `units`.
    pub fn builder(in_features: usize, units: usize) -> RecurrentBuilder<GRU> {
        RecurrentBuilder::new(in_features, units)
    }

    /// The cell.
    pub fn cell(&self) -> &GRUCell {
        &self.cell
    }

    /// The layer over `x` from state `h` (zeros when `None`): the output
    /// and the last state.
    pub fn forward_from(&self, x: &Tensor, h: Option<Tensor>) -> Result<(Tensor, Tensor)> {
        let x = self.options.input("GRU", x)?;
        let h = match h {
            Some(h) => h,
            None => self.cell.zero_state(x.shape()[0])?,
        };
        let (ys, last) = self.cell.run_sequence(&x, h)?;
        Ok((self.options.output(ys)?, last))
    }
}

impl Module for GRU {
    fn variables(&self) -> Vec<Variable> {
        self.cell.variables()
    }
}

impl Layer for GRU {
    fn name(&self) -> &str {
        &self.options.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        Ok(self.forward_from(x, None)?.0)
    }
}

/// How [`Bidirectional`] merges its two directions' outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Merge {
    /// Side by side along the features (Keras's default `"concat"`).
    #[default]
    Concat,
    /// Their sum.
    Sum,
    /// Their elementwise product.
    Mul,
    /// Their mean.
    Ave,
}

/// Keras's `Bidirectional`: one layer over the sequence, another over the
/// reversed sequence, their outputs merged. The backward layer is a plain
/// recurrent layer (it is given the sequence reversed, as Keras's copy
/// with `go_backwards=True` reads it); with sequence outputs its output is
/// reversed back, so that step `t` of both directions lines up.
///
/// ```
/// use gradtape::nn::{Bidirectional, Layer, Merge, Module, LSTM};
/// use gradtape::{DType, Rng};
/// let mut rng = Rng::new(0);
/// let fwd = LSTM::builder(3, 4).return_sequences(true).build(&mut rng)?;
/// let bwd = LSTM::builder(3, 4).return_sequences(true).build(&mut rng)?;
/// let bi = Bidirectional::new(fwd, bwd, Merge::Concat);
/// let x = rng.normal(&[2, 5, 3], 0.0, 1.0, DType::F32)?;
/// assert_eq!(bi.call(&x)?.shape(), &[2, 5, 8]);
/// assert_eq!(bi.variables().len(), 6);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Bidirectional {
    name: String,
    forward: Box<dyn Layer>,
    backward: Box<dyn Layer>,
    merge: Merge,
}

impl Bidirectional {
    /// The two directions, merged by `merge`.
    pub fn new(forward: impl Layer + 'static, backward: impl Layer + 'static, merge: Merge) -> Bidirectional {
        Bidirectional {
            name: unique_name("bidirectional"),
            forward: Box::new(forward),
            backward: Box::new(backward),
            merge,
        }
    }
}

impl Module for Bidirectional {
    /// The forward layer's, then the backward one's (Keras's order).
    fn variables(&self) -> Vec<Variable> {
        let mut v = self.forward.variables();
        v.extend(self.backward.variables());
        v
    }
}

impl Layer for Bidirectional {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        const OP: &str = "Bidirectional";
        if x.rank() != 3 {
            return Err(Error::invalid(
                OP,
                format!("expected inputs [batch, time, features], got shape {:?}", x.shape()),
            ));
        }
        let f = self.forward.forward(x, training)?;
        let mut b = self.backward.forward(&x.reverse(&[1])?, training)?;
        if b.rank() == 3 {
            b = b.reverse(&[1])?;
        }
        if f.shape()[..f.rank() - 1] != b.shape()[..b.rank().saturating_sub(1)] {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: f.shape().to_vec(),
                rhs: b.shape().to_vec(),
            });
        }
        match self.merge {
            Merge::Concat => Tensor::concat(&[&f, &b], -1),
            Merge::Sum => f.add(&b),
            Merge::Mul => f.mul(&b),
            Merge::Ave => f.add(&b)?.mul_scalar(0.5),
        }
    }
}
