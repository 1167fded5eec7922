//! Recurrent layers over whole sequences, Keras's `LSTM`, `GRU` and
//! `Bidirectional`: a cell ([`LSTMCell`], [`GRUCell`]) run over the time
//! axis of `[batch, time, features]`, returning every step's output or the
//! last one.
//!
//! The layers own their cell, whose weights are named
//! `{layer}/lstm_cell/kernel` (Keras 3's paths) and laid out as Keras's,
//! so weights copy between the two. The inputs' projections `x W + b` of
//! all steps are one product (and their kernel's gradient one product
//! too); each step then adds the state's product and applies the gates,
//! as the cell's own [`step`](LSTMCell::step) does after its projection.
//! A traced function unrolls the loop (the sequence length is part of the
//! trace's signature).
//!
//! Masks, Keras's padding: each layer is a [`SequenceLayer`], whose
//! [`forward_masked`](SequenceLayer::forward_masked) takes a bool mask
//! `[batch, time]` (from [`Embedding::compute_mask`](super::Embedding::compute_mask)
//! with `mask_zero`, or from [`Masking`](super::Masking)). As in Keras 3,
//! at a masked step the state is carried over unchanged and the output is
//! the previous step's output (zeros before the first unmasked step), so
//! the last output is the last unmasked step's; a layer going backwards
//! reads the mask backwards with its inputs. [`Bidirectional`] outputs
//! zeros at masked steps when it returns sequences (Keras sets
//! `zero_output_for_mask` on its layers then). Each masked step is a
//! select ([`Tensor::where_`]) between the new state and the old, so the
//! gradients and traces are those of ordinary ops.
//!
//! Keras's `stateful=True` ([`RecurrentBuilder::stateful`]): the layer
//! keeps its last state in variables of its own (non-trainable, not among
//! its [`variables`](Module::variables), as Keras does not track them),
//! starts each call from them and writes the call's last state back, so
//! that consecutive batches continue one another (truncated
//! backpropagation through time: no gradient flows into a variable's
//! earlier value). In a traced function the reads and writes happen at
//! each call. `reset_state` zeros them.

use super::masking::check_mask;
use super::{unique_name, GRUCell, LSTMCell, LSTMState, Layer, Module, SequenceLayer};
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
    stateful: Option<usize>,
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
            stateful: None,
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
    /// Keras's `stateful=True` for batches of `batch_size` sequences: each
    /// call starts from the state the previous call ended in (zeros at
    /// first and after [`LSTM::reset_state`]), kept in non-trainable
    /// variables ([`LSTM::states`]); a call with another batch size is an
    /// error. A state given to `forward_from` is used instead, and the
    /// call's last state is kept all the same, as Keras's.
    ///
    /// ```
    /// use gradtape::nn::{Layer, LSTM};
    /// use gradtape::{DType, Rng};
    /// let mut rng = Rng::new(0);
    /// let lstm = LSTM::builder(3, 4).stateful(2).build(&mut rng)?;
    /// let x = rng.normal(&[2, 6, 3], 0.0, 1.0, DType::F32)?;
    /// // two chunks of 3 steps continue one another: the last output of the
    /// // whole sequence
    /// lstm.call(&x.narrow(1, 0, 3)?)?;
    /// let chunked = lstm.call(&x.narrow(1, 3, 3)?)?;
    /// lstm.reset_state()?;
    /// let whole = lstm.call(&x)?;
    /// assert_eq!(chunked.to_vec::<f32>()?, whole.to_vec::<f32>()?);
    /// assert!(lstm.call(&x.narrow(0, 0, 1)?).is_err()); // batch 1, not 2
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn stateful(mut self, batch_size: usize) -> Self {
        self.stateful = Some(batch_size);
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

    /// The options, with `n` state variables of `[batch, units]` when
    /// stateful (named `{name}/rnn_state_{i}`, Keras's `rnn_state`).
    fn options(&self, name: String, n: usize) -> Result<Options> {
        let states = match self.stateful {
            None => Vec::new(),
            Some(b) => (0..n)
                .map(|i| {
                    let zeros = Tensor::try_zeros(&[b, self.units], self.dtype)?;
                    Ok(Variable::builder(zeros)
                        .name(format!("{name}/rnn_state_{i}"))
                        .trainable(false)
                        .build())
                })
                .collect::<Result<_>>()?,
        };
        Ok(Options {
            name,
            return_sequences: self.return_sequences,
            go_backwards: self.go_backwards,
            states,
        })
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
            options: self.options(name, 2)?,
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
            options: self.options(name, 1)?,
        })
    }
}

/// What the two layers share.
struct Options {
    name: String,
    return_sequences: bool,
    go_backwards: bool,
    /// a stateful layer's carried state (empty otherwise)
    states: Vec<Variable>,
}

impl Options {
    /// The state to start from: `given`, else a stateful layer's carried
    /// state (checked against the batch of `xs`), else `None` (zeros).
    fn initial(&self, op: &'static str, xs: &Tensor, given: Option<Vec<Tensor>>) -> Result<Option<Vec<Tensor>>> {
        let Some(first) = self.states.first() else {
            return Ok(given);
        };
        let want = first.shape()[0];
        if xs.shape()[0] != want {
            return Err(Error::invalid(
                op,
                format!(
                    "layer {}: a stateful layer built for batches of {want} sequences got inputs of shape {:?}",
                    self.name,
                    xs.shape()
                ),
            ));
        }
        Ok(Some(
            given.unwrap_or_else(|| self.states.iter().map(Variable::read).collect()),
        ))
    }

    /// Keeps `last` as a stateful layer's state.
    fn keep(&self, last: &[&Tensor]) -> Result<()> {
        self.states.iter().zip(last).try_for_each(|(v, t)| v.assign(t))
    }

    /// Zeros a stateful layer's state.
    fn reset(&self) -> Result<()> {
        self.states
            .iter()
            .try_for_each(|v| v.assign(&Tensor::try_zeros(&v.shape(), v.dtype())?))
    }

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

    /// `mask` checked against the inputs `x` (before any reversal), in
    /// reading order.
    fn mask(&self, op: &'static str, x: &Tensor, mask: &Tensor) -> Result<Tensor> {
        check_mask(op, x, mask)?;
        if self.go_backwards {
            mask.reverse(&[1])
        } else {
            Ok(mask.clone())
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

/// Keras's masked loop: `step` (the input of a step and the states give
/// the new states, the first of which is the output) over the steps of
/// `xs` (time-major: `[time, batch, in]`), where `mask` (bool `[batch,
/// time]`, both in
/// reading order) is false keeping the states and repeating the previous
/// output (zeros before the first unmasked step). The outputs `[batch,
/// time, units]` and the last states.
fn masked_steps(
    xs: &Tensor,
    mask: &Tensor,
    mut states: Vec<Tensor>,
    step: impl Fn(&Tensor, &[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<(Tensor, Vec<Tensor>)> {
    let mut prev = states[0].try_zeros_like()?;
    let mut outs = crate::tensor::alloc::try_vec("run_sequence", xs.shape()[0])?;
    for (x, m) in xs.unstack(0)?.iter().zip(mask.unstack(1)?) {
        let keep = m.expand_dims(-1)?;
        let new = step(x, &states)?;
        prev = Tensor::where_(&keep, &new[0], &prev)?;
        states = new
            .iter()
            .zip(&states)
            .map(|(n, old)| Tensor::where_(&keep, n, old))
            .collect::<Result<_>>()?;
        outs.push(prev.clone());
    }
    let refs: Vec<&Tensor> = outs.iter().collect();
    Ok((Tensor::stack(&refs, 1)?, states))
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
        self.forward_from_masked(x, state, None)
    }

    /// [`forward_from`](Self::forward_from) skipping the steps where
    /// `mask` (bool `[batch, time]`) is false, as
    /// [`forward_masked`](SequenceLayer::forward_masked): the output and
    /// the state after the last unmasked step.
    ///
    /// ```
    /// use gradtape::nn::LSTM;
    /// use gradtape::{DType, Rng, Tensor};
    /// let mut rng = Rng::new(0);
    /// let lstm = LSTM::builder(3, 2).build(&mut rng)?;
    /// let x = rng.normal(&[1, 4, 3], 0.0, 1.0, DType::F32)?;
    /// let mask = Tensor::from_vec(vec![true, true, false, false], &[1, 4])?;
    /// let (y, s) = lstm.forward_from_masked(&x, None, Some(&mask))?;
    /// let (y2, s2) = lstm.forward_from(&x.narrow(1, 0, 2)?, None)?; // the first two steps alone
    /// assert_eq!(y.to_vec::<f32>()?, y2.to_vec::<f32>()?);
    /// assert_eq!(s.c.to_vec::<f32>()?, s2.c.to_vec::<f32>()?);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn forward_from_masked(
        &self,
        x: &Tensor,
        state: Option<LSTMState>,
        mask: Option<&Tensor>,
    ) -> Result<(Tensor, LSTMState)> {
        const OP: &str = "LSTM";
        let xs = self.options.input(OP, x)?;
        let state = match self.options.initial(OP, &xs, state.map(|s| vec![s.h, s.c]))? {
            Some(s) => {
                let [h, c]: [Tensor; 2] = s.try_into().expect("two states");
                LSTMState { h, c }
            }
            None => self.cell.zero_state(xs.shape()[0])?,
        };
        let (ys, last) = match mask {
            None => self.cell.run_sequence(&xs, state)?,
            Some(m) => {
                let m = self.options.mask(OP, x, m)?;
                let xw = self.cell.project(&xs, &state)?;
                let (ys, s) = masked_steps(&xw, &m, vec![state.h, state.c], |xw, s| {
                    let n = self.cell.step_projected(
                        xw,
                        &LSTMState {
                            h: s[0].clone(),
                            c: s[1].clone(),
                        },
                    )?;
                    Ok(vec![n.h, n.c])
                })?;
                let [h, c]: [Tensor; 2] = s.try_into().expect("two states");
                (ys, LSTMState { h, c })
            }
        };
        self.options.keep(&[&last.h, &last.c])?;
        Ok((self.options.output(ys)?, last))
    }

    /// A stateful layer's state variables, `[h, c]` (`[batch, units]`
    /// each), empty unless [`stateful`](RecurrentBuilder::stateful).
    pub fn states(&self) -> &[Variable] {
        &self.options.states
    }

    /// Zeros a stateful layer's state (Keras's `reset_state()`); nothing
    /// otherwise.
    pub fn reset_state(&self) -> Result<()> {
        self.options.reset()
    }
}

impl Module for LSTM {
    fn variables(&self) -> Vec<Variable> {
        self.cell.variables()
    }

    /// The weights and a stateful layer's state.
    fn move_to(&self, device: crate::tensor::Device) -> Result<()> {
        (self.variables().iter())
            .chain(&self.options.states)
            .try_for_each(|v| v.move_to(device))
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

impl SequenceLayer for LSTM {
    fn forward_masked(&self, x: &Tensor, mask: Option<&Tensor>, _training: bool) -> Result<Tensor> {
        Ok(self.forward_from_masked(x, None, mask)?.0)
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
        self.forward_from_masked(x, h, None)
    }

    /// [`forward_from`](Self::forward_from) skipping the steps where
    /// `mask` (bool `[batch, time]`) is false, as
    /// [`forward_masked`](SequenceLayer::forward_masked).
    pub fn forward_from_masked(
        &self,
        x: &Tensor,
        h: Option<Tensor>,
        mask: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        const OP: &str = "GRU";
        let xs = self.options.input(OP, x)?;
        let h = match self.options.initial(OP, &xs, h.map(|h| vec![h]))? {
            Some(mut s) => s.pop().expect("one state"),
            None => self.cell.zero_state(xs.shape()[0])?,
        };
        let (ys, last) = match mask {
            None => self.cell.run_sequence(&xs, h)?,
            Some(m) => {
                let m = self.options.mask(OP, x, m)?;
                let xw = self.cell.project(&xs, &h)?;
                let (ys, mut s) = masked_steps(&xw, &m, vec![h], |xw, s| {
                    Ok(vec![self.cell.step_projected(xw, &s[0])?])
                })?;
                (ys, s.pop().expect("one state"))
            }
        };
        self.options.keep(&[&last])?;
        Ok((self.options.output(ys)?, last))
    }

    /// A stateful layer's state variable, `[h]` (`[batch, units]`), empty
    /// unless [`stateful`](RecurrentBuilder::stateful).
    pub fn states(&self) -> &[Variable] {
        &self.options.states
    }

    /// Zeros a stateful layer's state (Keras's `reset_state()`); nothing
    /// otherwise.
    pub fn reset_state(&self) -> Result<()> {
        self.options.reset()
    }
}

impl Module for GRU {
    fn variables(&self) -> Vec<Variable> {
        self.cell.variables()
    }

    /// The weights and a stateful layer's state.
    fn move_to(&self, device: crate::tensor::Device) -> Result<()> {
        (self.variables().iter())
            .chain(&self.options.states)
            .try_for_each(|v| v.move_to(device))
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

impl SequenceLayer for GRU {
    fn forward_masked(&self, x: &Tensor, mask: Option<&Tensor>, _training: bool) -> Result<Tensor> {
        Ok(self.forward_from_masked(x, None, mask)?.0)
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
/// reversed back, so that step `t` of both directions lines up. Given a
/// mask ([`forward_masked`](SequenceLayer::forward_masked)), each
/// direction reads it in its own order, and sequence outputs are zero at
/// the masked steps, as Keras's.
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
    forward: Box<dyn SequenceLayer>,
    backward: Box<dyn SequenceLayer>,
    merge: Merge,
}

impl Bidirectional {
    /// The two directions, merged by `merge`.
    pub fn new(
        forward: impl SequenceLayer + 'static,
        backward: impl SequenceLayer + 'static,
        merge: Merge,
    ) -> Bidirectional {
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
        self.forward_masked(x, None, training)
    }
}

impl SequenceLayer for Bidirectional {
    fn forward_masked(&self, x: &Tensor, mask: Option<&Tensor>, training: bool) -> Result<Tensor> {
        const OP: &str = "Bidirectional";
        if x.rank() != 3 {
            return Err(Error::invalid(
                OP,
                format!("expected inputs [batch, time, features], got shape {:?}", x.shape()),
            ));
        }
        if let Some(m) = mask {
            check_mask(OP, x, m)?;
        }
        let reversed = mask.map(|m| m.reverse(&[1])).transpose()?;
        let mut f = self.forward.forward_masked(x, mask, training)?;
        let mut b = self
            .backward
            .forward_masked(&x.reverse(&[1])?, reversed.as_ref(), training)?;
        if b.rank() == 3 {
            b = b.reverse(&[1])?;
        }
        if let Some(m) = mask {
            // Keras's `zero_output_for_mask` for sequences
            let keep = m.expand_dims(-1)?;
            for y in [&mut f, &mut b] {
                if y.rank() == 3 {
                    *y = Tensor::where_(&keep, y, &y.scalar_like(0.0)?)?;
                }
            }
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
