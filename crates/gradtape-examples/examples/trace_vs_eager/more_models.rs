//! The harness's larger models: GPTs of `TransformerBlock`s, an
//! encoder-decoder with cross-attention, an MLP with a `cond`, a neural ODE
//! and a loop without a tape (the rest, and the harness, are in `main.rs`).

use super::*;

// ---- transformers ----------------------------------------------------------

pub(super) struct Gpt {
    embed: Embedding,
    pos: Variable,
    blocks: Vec<TransformerBlock>,
    opt: Mutex<Adam>,
}

impl Model for Gpt {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.embed.variables();
        v.push(self.pos.clone());
        for b in &self.blocks {
            v.extend(b.variables());
        }
        v
    }
    /// data: tokens [batch, t], next tokens [batch, t]
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let mut h = self.embed.call(&d[0])?.add(&self.pos.read())?;
            for b in &self.blocks {
                h = b.call(&h)?;
            }
            // (the output projection tied to the embedding)
            let table = &self.embed.variables()[0];
            let logits = h.matmul_with(&table.read(), false, true)?;
            losses::sparse_categorical_crossentropy(&d[1], &logits, true)
        })?;
        apply(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

fn tokens(rng: &mut Rng, batch: usize, t: usize, vocab: usize) -> Result<Tensor> {
    labels(rng, batch * t, vocab)?.reshape(&[batch, t])
}

pub(super) fn gpt(
    batch: usize,
    t: usize,
    width: usize,
    heads: usize,
    blocks: usize,
) -> Result<(impl Fn() -> Result<Gpt>, Vec<Tensor>)> {
    let vocab = 64;
    let mut rng = Rng::new(16);
    let data = vec![tokens(&mut rng, batch, t, vocab)?, tokens(&mut rng, batch, t, vocab)?];
    let build = move || {
        let rng = &mut Rng::new(6);
        Ok(Gpt {
            embed: Embedding::new(vocab, width, rng)?,
            pos: Variable::new(rng.normal(&[t, width], 0.0, 0.02, F)?),
            blocks: (0..blocks)
                .map(|_| {
                    TransformerBlock::builder(width, heads, 4 * width)
                        .causal(true)
                        .build(rng)
                })
                .collect::<Result<_>>()?,
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    Ok((build, data))
}

pub(super) struct EncDec {
    embed: Embedding,
    enc: TransformerBlock,
    dec: TransformerBlock,
    opt: Mutex<Adam>,
}

impl Model for EncDec {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.embed.variables();
        v.extend(self.enc.variables());
        v.extend(self.dec.variables());
        v
    }
    /// data: source tokens [batch, s], target inputs [batch, t], targets
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let mem = self.enc.call(&self.embed.call(&d[0])?)?;
            let h = self
                .dec
                .call_with(&self.embed.call(&d[1])?, BlockArgs::new().encoder(&mem))?;
            let table = &self.embed.variables()[0];
            let logits = h.matmul_with(&table.read(), false, true)?;
            losses::sparse_categorical_crossentropy(&d[2], &logits, true)
        })?;
        apply(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

pub(super) fn encdec(
    batch: usize,
    s: usize,
    t: usize,
    width: usize,
    heads: usize,
) -> Result<(impl Fn() -> Result<EncDec>, Vec<Tensor>)> {
    let vocab = 48;
    let mut rng = Rng::new(17);
    let data = vec![
        tokens(&mut rng, batch, s, vocab)?,
        tokens(&mut rng, batch, t, vocab)?,
        tokens(&mut rng, batch, t, vocab)?,
    ];
    let build = move || {
        let rng = &mut Rng::new(7);
        Ok(EncDec {
            embed: Embedding::new(vocab, width, rng)?,
            enc: TransformerBlock::builder(width, heads, 2 * width).build(rng)?,
            dec: TransformerBlock::builder(width, heads, 2 * width)
                .causal(true)
                .cross_attention(width)
                .build(rng)?,
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    Ok((build, data))
}

// ---- cond ------------------------------------------------------------------

pub(super) struct CondMlp {
    layers: [Dense; 3],
    opt: Mutex<Sgd>,
}

impl Model for CondMlp {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.layers[0], &self.layers[1], &self.layers[2]])
    }
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let h = self.layers[0].call(&d[0])?;
            let p = h.mean_all()?.gt_scalar(0.0)?;
            let z = self.layers[1].call(&h)?;
            let h = cond(&p, || z.relu(), || z.tanh())?;
            let logits = self.layers[2].call(&h)?;
            losses::sparse_categorical_crossentropy(&d[1], &logits, true)
        })?;
        apply(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

pub(super) fn cond_mlp(batch: usize, width: usize) -> Result<(impl Fn() -> Result<CondMlp>, Vec<Tensor>)> {
    let mut rng = Rng::new(18);
    let data = vec![rng.normal(&[batch, 32], 0.0, 1.0, F)?, labels(&mut rng, batch, 10)?];
    let build = move || {
        let rng = &mut Rng::new(8);
        Ok(CondMlp {
            layers: [
                dense(32, width, Activation::Linear, rng)?,
                dense(width, width, Activation::Linear, rng)?,
                dense(width, 10, Activation::Linear, rng)?,
            ],
            opt: Mutex::new(Sgd::new(0.05)),
        })
    };
    Ok((build, data))
}

// ---- neural ODE ------------------------------------------------------------

pub(super) struct Ode {
    f: (Dense, Dense),
    opt: Mutex<Adam>,
}

impl Model for Ode {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.f.0, &self.f.1])
    }
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let y = while_loop(
                |v: &Vec<Tensor>| v[0].lt_scalar(8.0),
                |v: &Vec<Tensor>| {
                    let dy = self.f.1.call(&self.f.0.call(&v[1])?)?;
                    Ok(vec![v[0].add_scalar(1.0)?, v[1].add(&dy.mul_scalar(0.125)?)?])
                },
                vec![Tensor::scalar(0i64), d[0].clone()],
                WhileOptions::default(),
            )?;
            losses::mean_squared_error(&d[1], &y[1])
        })?;
        apply(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

pub(super) fn ode(batch: usize, hidden: usize) -> Result<(impl Fn() -> Result<Ode>, Vec<Tensor>)> {
    let mut rng = Rng::new(19);
    let data = vec![
        rng.normal(&[batch, 4], 0.0, 1.0, F)?,
        rng.normal(&[batch, 4], 0.0, 1.0, F)?,
    ];
    let build = move || {
        let rng = &mut Rng::new(9);
        Ok(Ode {
            f: (
                dense(4, hidden, Activation::Tanh, rng)?,
                dense(hidden, 4, Activation::Linear, rng)?,
            ),
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    Ok((build, data))
}

// ---- a loop without a tape --------------------------------------------------

/// An RNN's recurrence run forward only (no tape, no update): a
/// `while_loop` on a counter and a state, each iteration `h = tanh(h U + b)`
/// until the count is reached; the step returns the final state. What a
/// traced loop pays per iteration with nothing to differentiate.
pub(super) struct CountLoop {
    u: Variable,
    b: Variable,
}

impl Model for CountLoop {
    fn vars(&self) -> Vec<Variable> {
        vec![self.u.clone(), self.b.clone()]
    }
    /// data: the initial state [batch, units], the iteration count (i64)
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let out = while_loop(
            |v: &Vec<Tensor>| v[0].lt(&d[1]),
            |v: &Vec<Tensor>| {
                let h = v[1].matmul(&self.u.read())?.add(&self.b.read())?.tanh()?;
                Ok(vec![v[0].add_scalar(1.0)?, h])
            },
            vec![Tensor::scalar(0i64), d[0].clone()],
            WhileOptions::default(),
        )?;
        Ok(vec![out[1].clone()])
    }
}

pub(super) fn count_loop(batch: usize, units: usize, t: i64) -> Result<(impl Fn() -> Result<CountLoop>, Vec<Tensor>)> {
    let mut rng = Rng::new(21);
    let data = vec![rng.normal(&[batch, units], 0.0, 1.0, F)?, Tensor::scalar(t)];
    let build = move || {
        let rng = &mut Rng::new(5);
        Ok(CountLoop {
            u: Variable::new(rng.normal(&[units, units], 0.0, 1.0 / (units as f64).sqrt(), F)?),
            b: Variable::new(rng.normal(&[units], 0.0, 0.1, F)?),
        })
    };
    Ok((build, data))
}
