//! Two models a new user would write, against TensorFlow 2.21 / Keras
//! 3.15.1 (`tests/reference/new_user_models4.py` printed the numbers of
//! `tests/data/new_user_models4.txt`):
//!
//! - a stateful character LSTM trained by truncated backpropagation
//!   through time: `Embedding` → `LSTM` from the carried state
//!   (`forward_from`) → `Dense` logits, sparse softmax cross-entropy; the
//!   final (h, c) written to two non-trainable variables after each chunk
//!   and read by the next (no gradient across chunks); three chunks of a
//!   batch of texts, so in the traced runs the state crosses graph calls
//!   through the variables; Adam. Again with Keras's `stateful=True`
//!   (`LSTM::builder(..).stateful(batch)`, which gradtape lacked: the
//!   layer carries the state itself);
//! - a mixture-of-experts layer: a gate, `top_k` (k = 2) routing with a
//!   softmax over the chosen logits, the chosen experts' stacked weights
//!   `gather`ed per token and applied by `einsum`, the routing weights
//!   scattered back to a dense [tokens, experts] matrix (`scatter_nd`) and
//!   the routes per expert counted by `tensor_scatter_nd_add` for a
//!   load-balancing loss; Adam. The routing changes between the steps.
//!
//! Each runs eagerly and as a traced `function` (traced once), in float64
//! at 1e-12 relative (see `new_user_util.rs`) and in float32 against the
//! same reference at `REL32`.

use std::sync::{Arc, Mutex};

use gradtape::nn::{Dense, Embedding, LSTMState, Layer, Module, LSTM};
use gradtape::optim::Adam;
use gradtape::{function, DType, GradientTape, Result, Rng, Slice, Tensor, Variable};

use super::new_user_physics::dense;
use super::new_user_rl::DATA;
use super::new_user_util::{adam, names, set_weights_as, train_both, update, Check, Stepper};

/// float32 against the float64 reference, relative to each vector's
/// largest element: rounding (observed up to 4e-7).
const REL32: f64 = 2e-6;

// ---- 1. Stateful char-LSTM, truncated BPTT -----------------------------------------

pub(super) struct CharLstm {
    /// the layer carries its state (Keras's `stateful=True`), not `h`, `c`
    stateful: bool,
    emb: Embedding,
    lstm: LSTM,
    head: Dense,
    h: Variable,
    c: Variable,
    opt: Mutex<Adam>,
}

impl CharLstm {
    pub(super) fn sized(
        vocab: usize,
        dim: usize,
        units: usize,
        batch: usize,
        stateful: bool,
        dt: DType,
    ) -> Result<CharLstm> {
        let rng = &mut Rng::new(0);
        let lstm = LSTM::builder(dim, units).return_sequences(true).dtype(dt);
        let lstm = if stateful { lstm.stateful(batch) } else { lstm };
        let m = CharLstm {
            stateful,
            emb: Embedding::builder(vocab, dim).dtype(dt).build(rng)?,
            lstm: lstm.build(rng)?,
            head: dense(units, vocab, None, dt)?,
            h: Variable::new(Tensor::zeros(&[batch, units], dt)),
            c: Variable::new(Tensor::zeros(&[batch, units], dt)),
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 260.0, &[]);
        Ok(m)
    }

    /// The carried state's `h`.
    fn carried_h(&self) -> Tensor {
        if self.stateful {
            self.lstm.states()[0].read()
        } else {
            self.h.read()
        }
    }
}

impl Stepper for CharLstm {
    fn vars(&self) -> Vec<Variable> {
        [&self.emb as &dyn Layer, &self.lstm, &self.head]
            .iter()
            .flat_map(|l| l.trainable_variables())
            .collect()
    }

    /// data: a chunk's input ids [b, t] and target ids [b, t] (i64);
    /// outputs the final state (h, c) and the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let (state, loss) = tape.record(|| {
            // a stateful layer starts from its own state
            let carried = (!self.stateful).then(|| LSTMState {
                h: self.h.read(),
                c: self.c.read(),
            });
            let (seq, state) = self.lstm.forward_from(&self.emb.call(&data[0])?, carried)?;
            let logits = self.head.call(&seq)?;
            let loss = Tensor::sparse_softmax_cross_entropy_with_logits(&data[1], &logits)?.mean_all()?;
            Ok((state, loss))
        })?;
        if !self.stateful {
            self.h.assign(&state.h)?;
            self.c.assign(&state.c)?;
        }
        update(&tape, &loss, &vars, &self.opt, vec![state.h, state.c, loss.clone()])
    }
}

/// Chunk `k` (of length `t`) of `ids`: inputs `ids[:, tk..tk+t]`, targets
/// one step later.
pub(super) fn chunk(ids: &Tensor, k: usize, t: usize) -> Result<Vec<Tensor>> {
    let s = |a: usize| {
        [
            Slice::all(),
            Slice::range((t * k + a) as isize, (t * k + a + t) as isize),
        ]
    };
    Ok(vec![ids.strided_slice(&s(0))?, ids.strided_slice(&s(1))?])
}

fn char_ids() -> Result<Tensor> {
    let ids: Vec<i64> = vec![
        1, 4, 2, 7, 7, 0, 3, 5, 6, 1, 2, 4, 3, //
        5, 5, 0, 2, 6, 3, 1, 7, 4, 0, 6, 2, 1,
    ];
    Tensor::from_vec(ids, &[2, 13])
}

#[test]
fn stateful_char_lstm_truncated_bptt_matches_tensorflow() -> Result<()> {
    let ids = char_ids()?;
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    for (dt, stateful, traced) in ways() {
        let way = if traced { "traced" } else { "eager" };
        let what = format!("{way} {dt:?}{}", if stateful { " stateful" } else { "" });
        let check = if dt == DType::F64 { &mut c64 } else { &mut c32 };
        let m = Arc::new(CharLstm::sized(8, 4, 6, 2, stateful, dt)?);
        let f = {
            let m = m.clone();
            function(move |d: &Vec<Tensor>| Ok(m.step(d)?.into_iter().flatten().collect::<Vec<_>>()))
        };
        let n = m.vars().len();
        for s in 1..=3 {
            let data = chunk(&ids, s - 1, 4)?;
            let got = if traced {
                f.call(&data)?.into_iter().map(Some).collect()
            } else {
                m.step(&data)?
            };
            let want = names(&format!("charlstm{s}"), &["h", "c", "loss"], &[("grad", n)]);
            check.all_optional(&what, &want, &got);
        }
        if traced {
            // the chunks have one shape: one graph, the state crossing
            // its calls through the variables
            assert_eq!(f.trace_count(), 1, "{what}");
        }
        check.vars(&what, "charlstm_weight", &m.vars());
        // the carried state is the last chunk's
        check.one(&what, "charlstm3_h", Some(&m.carried_h()));
        if stateful {
            // a batch of another size is refused, naming the layer's
            let e = m.lstm.call(&Tensor::zeros(&[3, 4, 4], dt)).unwrap_err().to_string();
            assert!(
                e.contains("LSTM") && e.contains("batches of 2") && e.contains("[3, 4, 4]"),
                "{e}"
            );
            m.lstm.reset_state()?;
            assert!(m.carried_h().to_vec_f64().iter().all(|&v| v == 0.0));
        }
    }
    c64.finish("charlstm f64", 3000);
    c32.finish("charlstm f32", 3000);
    Ok(())
}

/// (dtype, stateful, traced) for every way the char-LSTM runs.
fn ways() -> Vec<(DType, bool, bool)> {
    let mut v = Vec::new();
    for dt in [DType::F64, DType::F32] {
        for stateful in [false, true] {
            for traced in [false, true] {
                v.push((dt, stateful, traced));
            }
        }
    }
    v
}

// ---- 2. Mixture of experts -----------------------------------------------------------

pub(super) struct Moe {
    gate: Dense,
    w1: Variable,
    b1: Variable,
    w2: Variable,
    k: usize,
    opt: Mutex<Adam>,
}

impl Moe {
    pub(super) fn new(dt: DType) -> Result<Moe> {
        Moe::sized(4, 4, 8, 2, dt)
    }

    pub(super) fn sized(d: usize, experts: usize, hidden: usize, k: usize, dt: DType) -> Result<Moe> {
        let m = Moe {
            gate: Dense::builder(d, experts)
                .use_bias(false)
                .dtype(dt)
                .build(&mut Rng::new(0))?,
            w1: Variable::new(Tensor::zeros(&[experts, d, hidden], dt)),
            b1: Variable::new(Tensor::zeros(&[experts, hidden], dt)),
            w2: Variable::new(Tensor::zeros(&[experts, hidden, d], dt)),
            k,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 270.0, &[]);
        Ok(m)
    }

    /// The chosen experts [n, k], the dense routing matrix [n, E], the
    /// layer's output [n, d] and the loss against `y`.
    fn forward(&self, x: &Tensor, y: &Tensor) -> Result<[Tensor; 4]> {
        let (n, e, k) = (x.shape()[0], self.w1.shape()[0], self.k);
        let logits = self.gate.call(x)?;
        let (vals, idx) = logits.top_k(k)?;
        let gates = vals.softmax(-1)?;
        let h = Tensor::einsum("nd,nkdh->nkh", &[x, &self.w1.read().gather(&idx, 0)?])?
            .add(&self.b1.read().gather(&idx, 0)?)?
            .relu()?;
        let yk = Tensor::einsum("nkh,nkho->nko", &[&h, &self.w2.read().gather(&idx, 0)?])?;
        let out = gates.expand_dims(-1)?.mul(&yk)?.sum(&[1], false)?;
        let rows = Tensor::arange(0.0, n as f64, 1.0, DType::I64)?
            .reshape(&[n, 1])?
            .broadcast_to(&[n, k])?;
        let at = Tensor::stack(&[&rows, &idx], -1)?;
        let comb = Tensor::scatter_nd(&at, &gates, &[n, e])?;
        let counts = Tensor::zeros(&[e], x.dtype())
            .tensor_scatter_nd_add(&idx.reshape(&[n * k, 1])?, &Tensor::ones(&[n * k], x.dtype()))?;
        let load = counts.div_scalar((n * k) as f64)?;
        let balance = comb.mean(&[0], false)?.mul(&load)?.sum_all()?.mul_scalar(e as f64)?;
        let loss = out.sub(y)?.square()?.mean_all()?.add(&balance.mul_scalar(0.125)?)?;
        Ok([idx, comb, out, loss])
    }
}

impl Stepper for Moe {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.gate.trainable_variables();
        v.extend([self.w1.clone(), self.b1.clone(), self.w2.clone()]);
        v
    }

    /// data: tokens [n, d], targets [n, d].
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let out = tape.record(|| self.forward(&data[0], &data[1]))?;
        let loss = out[3].clone();
        update(&tape, &loss, &vars, &self.opt, out.into())
    }
}

#[test]
fn mixture_of_experts_top_k_routing_matches_tensorflow() -> Result<()> {
    use super::new_user_util::fill;
    let x = fill(&[6, 4], 0.9, 2.0);
    let y = fill(&[6, 4], 2.7, 1.0);
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    train_both(
        &mut c64,
        &mut c32,
        "moe",
        &["idx", "comb", "out", "loss"],
        Moe::new,
        &[x, y],
    )?;
    c64.finish("moe f64", 400);
    c32.finish("moe f32", 400);
    Ok(())
}

/// The traced MoE step (`top_k` routing, `gather`s of the chosen experts'
/// weights, `scatter_nd` and `tensor_scatter_nd_add` of the routes, Adam)
/// is compiled, its graph's shapes following from the inputs' (it ran as
/// traced, unfused, while graphs with sorts and scatters were not
/// compiled), and gives eager's numbers over three steps whose routing
/// changes: the chosen experts exactly, the rest within 1e-12 of each
/// output's scale (a fused kernel may add a sum in another order).
#[test]
fn mixture_of_experts_step_is_compiled_and_gives_eagers_numbers() -> Result<()> {
    use super::new_user_util::fill;
    let data = [fill(&[24, 8], 0.9, 2.0), fill(&[24, 8], 2.7, 1.0)];
    let (eager, traced) = (
        Moe::sized(8, 6, 16, 2, DType::F64)?,
        Arc::new(Moe::sized(8, 6, 16, 2, DType::F64)?),
    );
    let f = {
        let m = traced.clone();
        function(move |d: &Vec<Tensor>| Ok(m.step(d)?.into_iter().flatten().collect::<Vec<_>>()))
    };
    let mut routes = Vec::new();
    for s in 0..3 {
        let (got, want) = (f.call(&data.to_vec())?, eager.step(&data)?);
        assert_eq!(got.len(), want.len());
        for (j, (g, w)) in got.iter().zip(want.iter().flatten()).enumerate() {
            let (g, w) = (g.to_vec_f64(), w.to_vec_f64());
            let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let tol = if j == 0 { 0.0 } else { 1e-12 * (1.0 + scale) };
            let off = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(
                g.len() == w.len() && off <= tol,
                "step {s}, output {j}: {g:?} against {w:?}"
            );
        }
        routes.push(got[0].to_vec::<i64>()?);
    }
    // (the premise: the routing changes between the steps)
    assert!(routes.windows(2).any(|r| r[0] != r[1]), "{routes:?}");
    for (a, b) in traced.vars().iter().zip(eager.vars()) {
        let (a, b) = (a.read().to_vec_f64(), b.read().to_vec_f64());
        assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-12 * (1.0 + y.abs())));
    }
    let c = f.concrete(&data.to_vec())?;
    let stats = c.compile_stats();
    assert!(stats.fused > 0 && stats.nodes_after < stats.nodes_before, "{stats:?}");
    assert_eq!(f.trace_count(), 1);
    Ok(())
}
