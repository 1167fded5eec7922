//! Traced against eager on transformer models of many shapes: a training
//! step (the loss and the gradient of every weight) run by `function`
//! must give the eager step's numbers. Each case draws its model from a
//! seeded generator, as a new user might write it:
//!
//! - a stack of `TransformerBlock`s (1 or 2; causal or not; GELU (either form), ReLU,
//!   tanh or sigmoid; with or without biases; heads of the default width
//!   or of `key_dim` 3; each of Llama's options or not: RMS norms, a
//!   gated feed-forward, rotary positions (even head widths), one
//!   key/value head for all query heads) and a `Dense` head;
//! - cross-attention (`MultiHeadAttention` from `[b, t, d]` queries to
//!   `[b, tk, d]` keys and values of another length) under a boolean mask
//!   that hides every key from a padded query,
//!   after a `LayerNorm`, with a residual;
//! - attention written by hand: one fused QKV product, `split`, reshapes
//!   and `permute`s into heads, `softmax` of the scaled scores (plus an
//!   additive causal mask), the heads merged back, an output projection,
//!   GELU and a residual.
//!
//! Sizes are small and odd on purpose (one time step, one head, widths
//! that no block size divides), f32 and f64. Every loss is a sum of
//! squares: a signed sum can cancel to far below its terms, and a tolerance
//! relative to it would then measure the cancellation, not the graph.
//! Tolerances, relative to the largest magnitude of each output: f64 1e-13
//! and f32 2e-6. Measured at most 2.2e-16 and 1.2e-7 over these 30 cases,
//! and 5.0e-16 and 1.9e-7 over the first 400 seeds, at 1, 2, 3 and 8
//! compute threads, and with `GRADTAPE_SGEMM=0`: the compiled graph
//! reassociates some sums, nothing more.

use gradtape::nn::{
    Activation, AttentionArgs, Dense, Layer, LayerNorm, Module, MultiHeadAttention, RotaryEmbedding, TransformerBlock,
};
use gradtape::{function, DType, GradientTape, Result, Rng, Tensor, Variable};

/// A xorshift generator for the cases' choices.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

/// One drawn model.
#[derive(Debug)]
struct Case {
    kind: usize,
    dtype: DType,
    b: usize,
    t: usize,
    tk: usize,
    d: usize,
    heads: usize,
    key_dim: usize,
    ff: usize,
    causal: bool,
    bias: bool,
    activation: usize,
    blocks: usize,
    /// Llama's options, a bit each: RMS norms, gated feed-forward, rotary
    /// positions, one key/value head
    llama: u64,
}

impl Case {
    fn draw(seed: u64) -> Case {
        let mut r = Draw(seed * 7919 + 17);
        for _ in 0..4 {
            r.below(2);
        }
        let heads = r.pick(&[1, 2, 3, 4]);
        let head_dim = r.pick(&[2, 4, 5, 8, 16]);
        Case {
            kind: r.below(3) as usize,
            dtype: r.pick(&[DType::F32, DType::F64]),
            b: 1 + r.below(3) as usize,
            t: 1 + r.below(20) as usize,
            tk: 1 + r.below(9) as usize,
            d: heads * head_dim,
            heads,
            key_dim: r.pick(&[head_dim, 3]),
            ff: r.pick(&[4, 7, 32, 64]),
            causal: r.below(2) == 0,
            bias: r.below(2) == 0,
            activation: r.below(5) as usize,
            blocks: 1 + r.below(2) as usize,
            llama: r.below(16),
        }
    }
}

type Loss = Box<dyn Fn(&Tensor, &Tensor) -> Result<Tensor> + Send + Sync>;

/// The case's loss of `(x, y)` (`y` the keys and values of
/// cross-attention; unused by the others) and its weights.
fn model(c: &Case, rng: &mut Rng) -> Result<(Loss, Vec<Variable>)> {
    let activation = [
        Activation::Gelu,
        Activation::Relu,
        Activation::Tanh,
        Activation::Sigmoid,
        Activation::GeluTanh,
    ][c.activation];
    match c.kind {
        0 => {
            let blocks: Vec<TransformerBlock> = (0..c.blocks)
                .map(|_| {
                    let mut b = TransformerBlock::builder(c.d, c.heads, c.ff)
                        .key_dim(c.key_dim)
                        .causal(c.causal)
                        .use_bias(c.bias)
                        .activation(activation)
                        .rms_norm(c.llama & 1 != 0)
                        .gated_feed_forward(c.llama & 2 != 0)
                        .dtype(c.dtype);
                    if c.llama & 4 != 0 && c.key_dim.is_multiple_of(2) {
                        b = b.rotary_embedding(RotaryEmbedding::builder().build()?);
                    }
                    if c.llama & 8 != 0 {
                        b = b.num_key_value_heads(1);
                    }
                    b.build(rng)
                })
                .collect::<Result<_>>()?;
            let head = Dense::builder(c.d, 5).dtype(c.dtype).build(rng)?;
            let mut vars: Vec<Variable> = blocks.iter().flat_map(|b| b.variables()).collect();
            vars.extend(head.variables());
            let loss = move |x: &Tensor, _: &Tensor| {
                let mut h = x.clone();
                for b in &blocks {
                    h = b.call(&h)?;
                }
                let o = head.call(&h)?;
                o.mul(&o)?.mean_all()
            };
            Ok((Box::new(loss), vars))
        }
        1 => {
            let m = MultiHeadAttention::builder(c.heads, c.key_dim)
                .use_bias(c.bias)
                .dtype(c.dtype)
                .build(c.d, rng)?;
            let norm = LayerNorm::new(c.d, c.dtype)?;
            let mut vars = m.variables();
            vars.extend(norm.variables());
            // every query row sees its first key at least, but for the
            // last row of the first batch element when there are several
            // (a padded query: it sees no key, which Keras answers with
            // uniform probabilities)
            let (b, t, tk) = (c.b, c.t, c.tk);
            let mask: Vec<bool> = (0..b * t * tk)
                .map(|i| ((i * 7 + i / 3) % 5 != 0 || i % tk == 0) && (t == 1 || i / tk != t - 1))
                .collect();
            let mask = Tensor::from_vec(mask, &[b, t, tk])?;
            let loss = move |x: &Tensor, y: &Tensor| {
                let a = m.call_with(&norm.call(x)?, y, AttentionArgs::new().attention_mask(&mask))?;
                x.add(&a)?.tanh()?.square()?.sum_all()
            };
            Ok((Box::new(loss), vars))
        }
        _ => {
            let (d, heads, dtype, causal) = (c.d, c.heads, c.dtype, c.causal);
            let hd = d / heads;
            let w = Variable::new(rng.normal(&[d, 3 * d], 0.0, 0.3, dtype)?);
            let wo = Variable::new(rng.normal(&[d, d], 0.0, 0.3, dtype)?);
            let g = Variable::new(rng.normal(&[d], 1.0, 0.1, dtype)?);
            let vars = vec![w.clone(), wo.clone(), g.clone()];
            let loss = move |x: &Tensor, _: &Tensor| {
                let (b, t) = (x.shape()[0], x.shape()[1]);
                let flat = x.reshape(&[b * t, d])?;
                let qkv = flat.matmul(&w.read())?.reshape(&[b, t, 3 * d])?;
                let hs: Vec<Tensor> = qkv
                    .split(3, 2)?
                    .iter()
                    .map(|p| p.reshape(&[b, t, heads, hd])?.permute(&[0, 2, 1, 3]))
                    .collect::<Result<_>>()?;
                let scale = Tensor::scalar(1.0 / (hd as f64).sqrt()).cast(dtype)?;
                let mut s = hs[0].matmul_with(&hs[1], false, true)?.mul(&scale)?;
                if causal {
                    let m: Vec<f64> = (0..t * t).map(|i| if i % t > i / t { -1e9 } else { 0.0 }).collect();
                    s = s.add(&Tensor::from_vec(m, &[t, t])?.cast(dtype)?)?;
                }
                let o = s
                    .softmax(-1)?
                    .matmul(&hs[2])?
                    .permute(&[0, 2, 1, 3])?
                    .reshape(&[b * t, d])?;
                let o = o.matmul(&wo.read())?.mul(&g.read())?.gelu(false)?.add(&flat)?;
                o.mul(&o)?.mean_all()
            };
            Ok((Box::new(loss), vars))
        }
    }
}

#[test]
fn traced_training_steps_of_drawn_transformers_give_the_eager_numbers() -> Result<()> {
    let mut kinds = [0; 3];
    for seed in 0..30u64 {
        let c = Case::draw(seed);
        kinds[c.kind] += 1;
        let mut rng = Rng::new(seed);
        let (loss, vars) = model(&c, &mut rng)?;
        let x = rng.normal(&[c.b, c.t, c.d], 0.0, 1.0, c.dtype)?;
        let y = rng.normal(&[c.b, c.tk, c.d], 0.0, 1.0, c.dtype)?;
        let step = std::sync::Arc::new(move |x: &Tensor, y: &Tensor| -> Result<Vec<Tensor>> {
            let tape = GradientTape::new();
            let l = tape.record(|| loss(x, y))?;
            let mut out = vec![l.clone()];
            for (v, g) in vars.iter().zip(tape.gradient(&l, &vars[..])?) {
                out.push(g.unwrap_or_else(|| panic!("case {seed}: {} has no gradient", v.name())));
            }
            Ok(out)
        });
        let eager = step.clone();
        let traced = function(move |(x, y): &(Tensor, Tensor)| step(x, y));
        let want = eager(&x, &y)?;
        // twice: the first call traces and runs, the second only runs
        for call in 0..2 {
            let got = traced.call(&(x.clone(), y.clone()))?;
            assert_eq!(got.len(), want.len());
            let tol = if c.dtype == DType::F32 { 2e-6 } else { 1e-13 };
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.shape(), w.shape(), "case {seed} {c:?}: output {i}'s shape");
                let (g, w) = (g.to_vec_f64(), w.to_vec_f64());
                let scale = w.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
                for (k, (a, b)) in g.iter().zip(&w).enumerate() {
                    assert!(
                        (a - b).abs() <= tol * scale,
                        "case {seed} {c:?}, call {call}: output {i}[{k}] traced {a}, eager {b}"
                    );
                }
            }
        }
        assert_eq!(traced.trace_count(), 1, "case {seed}");
    }
    // the draw covers the three kinds of model
    assert!(kinds.iter().all(|&k| k >= 5), "{kinds:?}");
    Ok(())
}
