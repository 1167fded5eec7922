//! `LSTMCell` and `GRUCell`, Keras's cells (weights laid out as Keras's, so
//! weights can be copied between the two), and running a cell over a
//! sequence.
//!
//! Each cell has a `kernel` `[in, k·units]` for the input, a
//! `recurrent_kernel` `[units, k·units]` for the state (orthogonal
//! initialisation) and a bias. LSTM gates are ordered input, forget, cell,
//! output (the forget gate's bias starts at one, Keras's
//! `unit_forget_bias`); GRU gates update, reset, candidate, with the reset
//! gate applied after the recurrent product (Keras's default
//! `reset_after=True`, bias `[2, 3·units]`: input bias, recurrent bias).

use super::{expect_float_dtype, expect_input, new_weight, unique_name, Initializer, Module};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::random::Rng;
use crate::tensor::alloc::try_filled;
use crate::tensor::layout::checked_numel;
use crate::tensor::{DType, Tensor};

/// `gates · units`, the width of a cell's kernels: an error for zero units
/// (Keras: "units must be positive") or a width whose `[in_features, width]`
/// or `[units, width]` kernel would overflow.
fn gate_width(op: &'static str, in_features: usize, units: usize, gates: usize) -> Result<usize> {
    if units == 0 {
        return Err(Error::invalid(op, "units must be a positive integer, got 0"));
    }
    let width = units.checked_mul(gates).ok_or_else(|| Error::ShapeOverflow {
        op,
        shape: vec![units, gates],
    })?;
    checked_numel(op, &[in_features, width])?;
    checked_numel(op, &[units, width])?;
    Ok(width)
}

/// An LSTM cell's state: output `h` and carry `c`, each `[batch, units]`.
#[derive(Clone, Debug)]
pub struct LSTMState {
    /// The output (hidden state).
    pub h: Tensor,
    /// The carry (cell state).
    pub c: Tensor,
}

/// The three weights of a cell.
struct CellWeights {
    name: String,
    units: usize,
    in_features: usize,
    kernel: Variable,
    recurrent: Variable,
    bias: Variable,
}

impl CellWeights {
    /// `base` made unique, or `exact` as given.
    #[allow(clippy::too_many_arguments)]
    fn new(
        base: &str,
        exact: Option<String>,
        in_features: usize,
        units: usize,
        gates: usize,
        bias: Tensor,
        dtype: DType,
        rng: &mut Rng,
    ) -> Result<Self> {
        expect_float_dtype("recurrent cell", dtype)?;
        let name = exact.unwrap_or_else(|| unique_name(base));
        let kernel = new_weight(
            &name,
            "kernel",
            &[in_features, gates * units],
            dtype,
            &Initializer::GlorotUniform,
            rng,
            true,
        )?;
        let recurrent = new_weight(
            &name,
            "recurrent_kernel",
            &[units, gates * units],
            dtype,
            &Initializer::Orthogonal { gain: 1.0 },
            rng,
            true,
        )?;
        let bias = Variable::builder(bias.cast(dtype)?)
            .name(format!("{name}/bias"))
            .build();
        Ok(CellWeights {
            name,
            units,
            in_features,
            kernel,
            recurrent,
            bias,
        })
    }

    fn variables(&self) -> Vec<Variable> {
        vec![self.kernel.clone(), self.recurrent.clone(), self.bias.clone()]
    }

    fn check(&self, op: &'static str, x: &Tensor, states: &[&Tensor]) -> Result<()> {
        expect_input(op, &self.name, x, Some(2), Some(self.in_features), self.kernel.dtype())?;
        self.check_states(op, x.shape()[0], states)
    }

    /// Checks a sequence `xs` `[batch, time, in]` and the states, and
    /// returns the input projection of every step at once, `xs W + bias`,
    /// time-major (`[time, batch, width]`): one product instead of one per
    /// step (and one for the kernel's gradient), each step's rows one
    /// contiguous block (read as they are by the step, and the steps'
    /// cotangents joined into one block by a concatenation along axis 0,
    /// the layout the products of the backward pass read).
    fn project(&self, op: &'static str, xs: &Tensor, states: &[&Tensor], bias: &Tensor) -> Result<Tensor> {
        expect_input(op, &self.name, xs, Some(3), Some(self.in_features), self.kernel.dtype())?;
        self.check_states(op, xs.shape()[0], states)?;
        let (b, t) = (xs.shape()[0], xs.shape()[1]);
        // (the loop's list of outputs, one per step: a sequence too long
        // for it is refused as the loop refuses it, before the product)
        crate::tensor::alloc::try_vec::<Tensor>("run_sequence", t)?;
        let width = self.kernel.shape()[1];
        xs.permute(&[1, 0, 2])?
            .reshape(&[t * b, self.in_features])?
            .matmul(&self.kernel.read())?
            .bias_add(bias)?
            .reshape(&[t, b, width])
    }

    fn check_states(&self, op: &'static str, batch: usize, states: &[&Tensor]) -> Result<()> {
        let dtype = self.kernel.dtype();
        for s in states {
            if s.shape() != [batch, self.units] || s.dtype() != dtype {
                return Err(Error::invalid(
                    op,
                    format!(
                        "the state must be [{}, {}] of dtype {dtype}, got {:?} of dtype {}",
                        batch,
                        self.units,
                        s.shape(),
                        s.dtype()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Zeros `[batch, units]`.
    fn zeros(&self, batch: usize) -> Result<Tensor> {
        Tensor::zeros_on(&[batch, self.units], self.kernel.dtype(), self.kernel.device())
    }
}

/// A long short-term memory cell, Keras's `LSTMCell`.
///
/// ```
/// use gradtape::{nn::{LSTMCell, Module}, DType, Rng, Tensor};
/// let cell = LSTMCell::new(3, 5, &mut Rng::new(0))?;
/// let s0 = cell.zero_state(2)?;
/// let s1 = cell.step(&Tensor::ones(&[2, 3], DType::F32), &s0)?;
/// assert_eq!(s1.h.shape(), &[2, 5]);
/// let (ys, last) = cell.run_sequence(&Tensor::ones(&[2, 7, 3], DType::F32), s0)?;
/// assert_eq!(ys.shape(), &[2, 7, 5]);
/// assert_eq!(cell.variables().len(), 3);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct LSTMCell(CellWeights);

impl LSTMCell {
    /// An f32 cell from `in_features` to `units`.
    pub fn new(in_features: usize, units: usize, rng: &mut Rng) -> Result<LSTMCell> {
        LSTMCell::with_dtype(in_features, units, DType::F32, rng)
    }

    /// A cell of the given float dtype.
    ///
    /// Zero `units`, or sizes whose kernels cannot be shaped or allocated,
    /// are errors:
    ///
    /// ```
    /// use gradtape::{nn::LSTMCell, DType, Rng};
    /// assert!(LSTMCell::with_dtype(3, 0, DType::F32, &mut Rng::new(0)).is_err());
    /// assert!(LSTMCell::with_dtype(3, 1 << 60, DType::F32, &mut Rng::new(0)).is_err());
    /// ```
    pub fn with_dtype(in_features: usize, units: usize, dtype: DType, rng: &mut Rng) -> Result<LSTMCell> {
        LSTMCell::named(None, in_features, units, dtype, rng)
    }

    /// A cell named `name` (else `lstm_cell`, made unique).
    pub(super) fn named(
        name: Option<String>,
        in_features: usize,
        units: usize,
        dtype: DType,
        rng: &mut Rng,
    ) -> Result<LSTMCell> {
        const OP: &str = "LSTMCell";
        expect_float_dtype(OP, dtype)?;
        let width = gate_width(OP, in_features, units, 4)?;
        let mut b = try_filled(OP, width, 0.0f64)?;
        b[units..2 * units].iter_mut().for_each(|v| *v = 1.0);
        let bias = Tensor::from_vec(b, &[width])?;
        Ok(LSTMCell(CellWeights::new(
            "lstm_cell",
            name,
            in_features,
            units,
            4,
            bias,
            dtype,
            rng,
        )?))
    }

    /// The cell's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The zero state for a batch (an error when `[batch, units]` cannot
    /// be shaped or allocated).
    pub fn zero_state(&self, batch: usize) -> Result<LSTMState> {
        Ok(LSTMState {
            h: self.0.zeros(batch)?,
            c: self.0.zeros(batch)?,
        })
    }

    /// One step: input `x` `[batch, in]` and the previous state give the
    /// next state (its `h` is the output).
    pub fn step(&self, x: &Tensor, state: &LSTMState) -> Result<LSTMState> {
        let w = &self.0;
        w.check("LSTMCell", x, &[&state.h, &state.c])?;
        self.step_projected(&x.matmul(&w.kernel.read())?.bias_add(&w.bias.read())?, state)
    }

    /// The input projections `xs W + b` of a sequence `xs` `[batch, time,
    /// in]` (checked, with the state), time-major (`[time, batch, 4
    /// units]`), for [`step_projected`](Self::step_projected).
    pub(super) fn project(&self, xs: &Tensor, state: &LSTMState) -> Result<Tensor> {
        let w = &self.0;
        w.project("LSTMCell", xs, &[&state.h, &state.c], &w.bias.read())
    }

    /// One step from the input's projection `xw = x W + b` `[batch, 4 units]`.
    pub(super) fn step_projected(&self, xw: &Tensor, state: &LSTMState) -> Result<LSTMState> {
        let z = xw.add(&state.h.matmul(&self.0.recurrent.read())?)?;
        let (h, c) = Tensor::lstm_cell(&z, &state.c)?;
        Ok(LSTMState { h, c })
    }

    /// Runs the cell over `xs` `[batch, time, in]` from `state`: the
    /// outputs `[batch, time, units]` and the last state.
    ///
    /// The steps run as one op, [`Tensor::lstm_sequence`] (one op each way
    /// under a tape or in a trace, the recurrent kernel's gradient one
    /// product over all steps).
    pub fn run_sequence(&self, xs: &Tensor, state: LSTMState) -> Result<(Tensor, LSTMState)> {
        let xw = self.project(xs, &state)?;
        let t = xw.shape()[0];
        if t == 0 {
            return Err(Error::invalid("run_sequence", "the sequence has no time steps"));
        }
        let (hs, cs) = Tensor::lstm_sequence(&xw, &self.0.recurrent.read(), &state.h, &state.c)?;
        let last = |x: &Tensor| x.narrow(0, t - 1, 1)?.squeeze(&[0]);
        let state = LSTMState {
            h: last(&hs)?,
            c: last(&cs)?,
        };
        Ok((hs.permute(&[1, 0, 2])?, state))
    }
}

impl Module for LSTMCell {
    fn variables(&self) -> Vec<Variable> {
        self.0.variables()
    }
}

/// A gated recurrent unit cell, Keras's `GRUCell` (`reset_after=True`).
///
/// ```
/// use gradtape::{nn::GRUCell, DType, Rng, Tensor};
/// let cell = GRUCell::new(3, 4, &mut Rng::new(0))?;
/// let h = cell.step(&Tensor::ones(&[2, 3], DType::F32), &cell.zero_state(2)?)?;
/// assert_eq!(h.shape(), &[2, 4]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct GRUCell(CellWeights);

impl GRUCell {
    /// An f32 cell from `in_features` to `units`.
    pub fn new(in_features: usize, units: usize, rng: &mut Rng) -> Result<GRUCell> {
        GRUCell::with_dtype(in_features, units, DType::F32, rng)
    }

    /// A cell of the given float dtype.
    pub fn with_dtype(in_features: usize, units: usize, dtype: DType, rng: &mut Rng) -> Result<GRUCell> {
        GRUCell::named(None, in_features, units, dtype, rng)
    }

    /// A cell named `name` (else `gru_cell`, made unique).
    pub(super) fn named(
        name: Option<String>,
        in_features: usize,
        units: usize,
        dtype: DType,
        rng: &mut Rng,
    ) -> Result<GRUCell> {
        const OP: &str = "GRUCell";
        expect_float_dtype(OP, dtype)?;
        let width = gate_width(OP, in_features, units, 3)?;
        let bias = Tensor::try_zeros(&[2, width], dtype)?;
        Ok(GRUCell(CellWeights::new(
            "gru_cell",
            name,
            in_features,
            units,
            3,
            bias,
            dtype,
            rng,
        )?))
    }

    /// The cell's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The zero state `[batch, units]` (an error when it cannot be shaped
    /// or allocated).
    pub fn zero_state(&self, batch: usize) -> Result<Tensor> {
        self.0.zeros(batch)
    }

    /// One step: input `x` `[batch, in]` and state `h` `[batch, units]`
    /// give the next state (also the output).
    pub fn step(&self, x: &Tensor, h: &Tensor) -> Result<Tensor> {
        let w = &self.0;
        w.check("GRUCell", x, &[h])?;
        let b = w.bias.read().unstack(0)?;
        self.step_projected(&x.matmul(&w.kernel.read())?.bias_add(&b[0])?, h)
    }

    /// The input projections `xs W + b_in` of a sequence `xs` `[batch,
    /// time, in]` (checked, with the state), time-major (`[time, batch, 3
    /// units]`), for [`step_projected`](Self::step_projected).
    pub(super) fn project(&self, xs: &Tensor, h: &Tensor) -> Result<Tensor> {
        let w = &self.0;
        let b = w.bias.read().unstack(0)?;
        w.project("GRUCell", xs, &[h], &b[0])
    }

    /// One step from the input's projection `xw = x W + b_in` `[batch, 3
    /// units]`.
    pub(super) fn step_projected(&self, xw: &Tensor, h: &Tensor) -> Result<Tensor> {
        let w = &self.0;
        let b = w.bias.read().unstack(0)?;
        Ok(crate::ops::gru_step(xw, h, &w.recurrent.read(), &b[1])?.0)
    }

    /// Runs the cell over `xs` `[batch, time, in]` from `h`: the outputs
    /// `[batch, time, units]` and the last state.
    ///
    /// The steps run as one op, [`Tensor::gru_sequence`] (one op each way
    /// under a tape or in a trace, the recurrent kernel's gradient one
    /// product over all steps).
    pub fn run_sequence(&self, xs: &Tensor, h: Tensor) -> Result<(Tensor, Tensor)> {
        let xw = self.project(xs, &h)?;
        let t = xw.shape()[0];
        if t == 0 {
            return Err(Error::invalid("run_sequence", "the sequence has no time steps"));
        }
        let w = &self.0;
        let b = w.bias.read().unstack(0)?;
        let hs = Tensor::gru_sequence(&xw, &w.recurrent.read(), &b[1], &h)?;
        let last = hs.narrow(0, t - 1, 1)?.squeeze(&[0])?;
        Ok((hs.permute(&[1, 0, 2])?, last))
    }
}

impl Module for GRUCell {
    fn variables(&self) -> Vec<Variable> {
        self.0.variables()
    }
}
