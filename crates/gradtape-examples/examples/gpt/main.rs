//! A character-level GPT trained on the repository's own documentation
//! (`docs/*.md` and `README.md` at the workspace root, read at run time:
//! no data file ships for it), then sampled from with a key/value cache.
//!
//! ```text
//! cargo run --release --example gpt                 # 500 steps: 20-45 s on 2 cores
//! cargo run --release --example gpt -- --eager      # every step op by op (no tracing)
//! cargo run --release --example gpt -- --steps 1000 --generate 600 --prompt "The tape"
//! cargo run --release --example gpt -- --width 256 --heads 8 --context 128 --batch 8
//! cargo run --release --example gpt -- --llama        # Llama's blocks instead of GPT-2's
//! cargo run --release --example gpt -- --profile      # then where a traced step's time goes
//! cargo run --release --example gpt -- --vocab 2048   # characters and the 1936 commonest words
//! ```
//!
//! (`--layers`, `--width`, `--heads`, `--context`, `--batch` and
//! `--dropout` change the model's shape from the one below.)
//!
//! `--vocab N` makes it a word-piece model: the tokens are the text's
//! characters plus its `N - characters` most frequent whole words (with
//! their leading space, as GPT-2's), other text spelled in characters (the
//! tokenizer is in `corpus.rs`). The text has about 4,000 distinct word
//! forms, so a larger `N` pads the vocabulary with ids no text uses: the
//! model then has the embedding table, logits and optimizer state of an
//! `N`-token vocabulary (what `--vocab 32768` measures), trained on the
//! words there are.
//!
//! The model is GPT-2's shape, small: token and learned position
//! embeddings, 2 pre-LayerNorm causal Transformer blocks (width 128, 4
//! heads, a GELU feed-forward of 4 × 128), a final LayerNorm and the output
//! projection tied to the token embedding (logits = h · tableᵀ), on windows
//! of 64 characters, 16 windows per batch. With `--llama` the blocks are
//! Llama's instead (`TransformerBlock::builder(..).llama()`: RMS norms,
//! rotary positions in the attention instead of learned ones, a SwiGLU
//! feed-forward of 4 × 128, no biases; 2 key/value heads for the 4 query
//! heads), and the final norm an RMS norm. It trains with AdamW (linear
//! warm-up then cosine decay, decoupled weight decay except on biases and
//! norms) on gradients clipped to global norm 1. The last 10 % of the text
//! (the end of the README) is held out for the validation loss. Everything is seeded.
//!
//! By default the training step (forward, loss, gradients, clipping, the
//! AdamW update) is one traced [`gradtape::function`]: traced at its first
//! call, then run as a graph. Every 10th step (9, 19, 29, ...) runs
//! eagerly instead, op by op under the tape, to time both the same way
//! while the machine does the same things: the median time per step of
//! each is printed. The two compute the same step, so which steps run
//! eagerly does not change the result beyond rounding. `--eager` (or
//! `Config::traced = false`) runs every step eagerly.
//!
//! It prints: the data and model sizes; a progress bar with the running
//! loss; the loss, learning rate and gradient norm every 50 steps; the
//! validation loss before and after; the time per step eagerly and traced;
//! the checkpoint (`target/gpt/gpt.safetensors`), loaded back into a fresh
//! model whose validation loss must equal the trained one's; and text
//! sampled from a prompt (temperature 0.8, top-k 10). Sampling uses one
//! [`KvCache`] per block: the prompt goes in once, then each new character
//! attends from its one position to the cached keys and values of those
//! before it. The caches have a fixed capacity (the context) and the
//! decoding step is a traced [`gradtape::function`]: the caches' index is a
//! tensor, so every one-character step runs the same graph (three traces
//! in all: the prompt, the refill and the one-character step). When the
//! window of 64 is full it slides: the last 32
//! characters are kept and fed again as a new prompt (positions restart at
//! 0), so the cost is one 32-position pass every 32 characters. The same
//! text is then generated again without the cache (the whole window rerun
//! at each character) to compare the time per character.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use gradtape::nn::{
    losses, Embedding, Initializer, KvCache, Layer, LayerNorm, Module, PositionalEmbedding, RMSNorm, TransformerBlock,
};
use gradtape::optim::{clip_gradients_by_global_norm, AdamW, CosineDecay, Optimizer};
use gradtape::{function, io, Error, GradientTape, Result, Rng, Tensor, Variable};
use indicatif::{ProgressBar, ProgressStyle};

#[path = "corpus.rs"]
mod corpus;
#[path = "generate.rs"]
mod generate;
pub use corpus::{random_batch, windows, Corpus};
pub use generate::{generate, Decode};

/// The workspace root, whose Markdown files are the training text.
pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../");

fn invalid(msg: String) -> Error {
    Error::InvalidArgument { op: "gpt", msg }
}

/// What a run does.
#[derive(Clone, Debug)]
pub struct Config {
    /// Transformer blocks.
    pub layers: usize,
    /// The model width (embedding size).
    pub width: usize,
    pub heads: usize,
    /// The context: characters per window, and positions in the model.
    pub context: usize,
    pub batch_size: usize,
    /// Tokens in the vocabulary (`--vocab N`): the characters plus the
    /// most frequent words, padded with unused ids past the text's words
    /// (see [`Corpus`]); `None`: the characters.
    pub vocab: Option<usize>,
    /// Dropout in the blocks while training (0: none).
    pub dropout: f64,
    /// Llama's blocks (RMS norms, rotary positions, SwiGLU, grouped
    /// key/value heads) instead of GPT-2's.
    pub llama: bool,
    pub steps: usize,
    /// The peak learning rate, reached after `warmup_steps`, then cosine
    /// decay to a tenth of it at the last step.
    pub learning_rate: f64,
    pub warmup_steps: usize,
    pub weight_decay: f64,
    /// The global norm the gradients are clipped to.
    pub clip_norm: f64,
    /// Run the training step as a traced function (else every step eagerly).
    pub traced: bool,
    /// With `traced`, one step in this many runs eagerly (steps `n - 1`,
    /// `2n - 1`, ...), to time both ways (0: none).
    pub eager_every: usize,
    /// Print the loss every this many steps (0: never).
    pub log_every: usize,
    /// After training, print where five traced steps spent their time,
    /// per kind of graph node (`--profile`).
    pub profile: bool,
    /// Characters to generate at the end.
    pub generate: usize,
    pub prompt: String,
    pub temperature: f64,
    pub top_k: Option<usize>,
    pub seed: u64,
    /// Show the progress bar and print the results.
    pub verbose: bool,
    /// Where the checkpoint goes.
    pub out_dir: PathBuf,
}

impl Config {
    /// Fails, naming the option, on a configuration no run can use: no
    /// context or batch (windows of 0 tokens, a mean over no tokens), a
    /// learning rate, weight decay or clipping norm that is not a finite
    /// number, a clipping norm that is not positive, a sampling
    /// temperature that is not positive. The layers check their own
    /// arguments (width, heads, dropout) when the model is built.
    pub fn check(&self) -> Result<()> {
        if self.context == 0 {
            return Err(invalid("--context must be at least 1".into()));
        }
        if self.batch_size == 0 {
            return Err(invalid("--batch must be at least 1".into()));
        }
        for (name, v) in [
            ("--lr", self.learning_rate),
            ("the weight decay", self.weight_decay),
            ("the clipping norm", self.clip_norm),
            ("the temperature", self.temperature),
        ] {
            if !v.is_finite() {
                return Err(invalid(format!("{name} must be a finite number, got {v}")));
            }
        }
        if self.clip_norm <= 0.0 {
            return Err(invalid(format!(
                "the clipping norm must be positive, got {}",
                self.clip_norm
            )));
        }
        if self.temperature <= 0.0 {
            return Err(invalid(format!(
                "the temperature must be positive, got {}",
                self.temperature
            )));
        }
        Ok(())
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            layers: 2,
            width: 128,
            heads: 4,
            context: 64,
            batch_size: 16,
            vocab: None,
            dropout: 0.0,
            llama: false,
            steps: 500,
            learning_rate: 3e-3,
            warmup_steps: 50,
            weight_decay: 0.01,
            clip_norm: 1.0,
            traced: true,
            eager_every: 10,
            log_every: 50,
            profile: false,
            generate: 400,
            prompt: "The tape ".into(),
            temperature: 0.8,
            top_k: Some(10),
            seed: 0,
            verbose: true,
            out_dir: PathBuf::from("target/gpt"),
        }
    }
}

/// The model: token and (GPT-2's) learned position embeddings, causal
/// pre-norm blocks, a final norm and the tied output projection.
pub struct Gpt {
    tokens: Embedding,
    /// none in Llama's model, whose positions are rotary, in the blocks
    positions: Option<PositionalEmbedding>,
    context: usize,
    blocks: Vec<TransformerBlock>,
    /// LayerNorm, or RMSNorm in Llama's model
    norm: Box<dyn Layer>,
    vocab: usize,
}

impl Gpt {
    /// A model for `vocab` characters with `cfg`'s shape, its weights drawn
    /// from `rng`. The layers have fixed names, so that a model built again
    /// loads the checkpoint of another.
    pub fn new(cfg: &Config, vocab: usize, rng: &mut Rng) -> Result<Gpt> {
        let init = Initializer::RandomNormal { mean: 0.0, std: 0.02 };
        let tokens = Embedding::builder(vocab, cfg.width)
            .initializer(init.clone())
            .name("gpt/tokens")
            .build(rng)?;
        let positions = (!cfg.llama)
            .then(|| {
                PositionalEmbedding::builder(cfg.context, cfg.width)
                    .initializer(init)
                    .name("gpt/positions")
                    .build(rng)
            })
            .transpose()?;
        let blocks = (0..cfg.layers)
            .map(|i| {
                let block = TransformerBlock::builder(cfg.width, cfg.heads, 4 * cfg.width);
                let block = if cfg.llama {
                    // grouped key/value heads where the heads split evenly
                    let kv = if cfg.heads.is_multiple_of(2) {
                        cfg.heads / 2
                    } else {
                        cfg.heads
                    };
                    block.llama().num_key_value_heads(kv)
                } else {
                    block.causal(true)
                };
                block.dropout(cfg.dropout).name(format!("gpt/block_{i}")).build(rng)
            })
            .collect::<Result<_>>()?;
        let norm: Box<dyn Layer> = if cfg.llama {
            Box::new(RMSNorm::builder(cfg.width).name("gpt/final_norm").build()?)
        } else {
            Box::new(LayerNorm::builder(cfg.width).name("gpt/final_norm").build()?)
        };
        Ok(Gpt {
            tokens,
            positions,
            context: cfg.context,
            blocks,
            norm,
            vocab,
        })
    }

    /// The positions the model covers.
    pub fn context(&self) -> usize {
        self.context
    }

    pub fn variables(&self) -> Vec<Variable> {
        let mut v = self.tokens.variables();
        if let Some(p) = &self.positions {
            v.extend(p.variables());
        }
        self.blocks.iter().for_each(|b| v.extend(b.variables()));
        v.extend(self.norm.variables());
        v
    }

    pub fn count_params(&self) -> usize {
        self.variables()
            .iter()
            .map(|v| v.shape().iter().product::<usize>())
            .sum()
    }

    /// Logits `[batch, t, vocab]` of the ids `[batch, t]` at positions
    /// `start..start + t`. With `caches` (one per block; inference) the
    /// positions attend to the cached keys and values too and are added to
    /// them.
    pub fn logits(&self, ids: &Tensor, start: usize, caches: Option<&mut [KvCache]>, training: bool) -> Result<Tensor> {
        let mut h = self.tokens.call(ids)?;
        if let Some(p) = &self.positions {
            // caches of fixed capacity hold the position as a tensor (one
            // trace for every position): the table's rows sliced there
            let index = caches.as_ref().and_then(|c| c.first()).and_then(KvCache::index);
            h = match index {
                Some(i) => {
                    let at = Tensor::stack(&[i, &i.try_zeros_like()?], 0)?;
                    let table = p.table().read();
                    h.add(&table.dynamic_slice(&at, &[ids.shape()[1], table.shape()[1]])?)?
                }
                None => p.add_to(&h, start)?,
            };
        }
        match caches {
            Some(caches) => {
                for (block, cache) in self.blocks.iter().zip(caches) {
                    h = block.call_cached(&h, cache)?;
                }
            }
            None => {
                for block in &self.blocks {
                    h = block.forward(&h, training)?;
                }
            }
        }
        self.tokens.attend(&self.norm.call(&h)?)
    }

    /// The mean cross-entropy of predicting `targets` from `ids`.
    pub fn loss(&self, ids: &Tensor, targets: &Tensor, training: bool) -> Result<Tensor> {
        let logits = self.logits(ids, 0, None, training)?;
        let n = ids.shape().iter().product::<usize>();
        losses::sparse_categorical_crossentropy(&targets.reshape(&[n])?, &logits.reshape(&[n, self.vocab])?, true)
    }

    /// The loss on `(x, y)` at inference, in batches of 16 windows (the
    /// token-weighted mean).
    pub fn evaluate(&self, x: &Tensor, y: &Tensor) -> Result<f64> {
        let n = x.shape()[0];
        let mut total = 0.0;
        for start in (0..n).step_by(16) {
            let len = 16.min(n - start);
            total += self
                .loss(&x.narrow(0, start, len)?, &y.narrow(0, start, len)?, false)?
                .item()?
                * len as f64;
        }
        Ok(total / n as f64)
    }
}

/// One training step: the loss, its gradients (the embedding's sparse
/// rows kept sparse), clipped to global norm `clip`, and the AdamW update.
/// Returns the loss and the gradients' global norm before clipping.
pub fn train_step(
    model: &Gpt,
    vars: &[Variable],
    opt: &Mutex<AdamW>,
    clip: f64,
    x: &Tensor,
    y: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let tape = GradientTape::new();
    let loss = tape.record(|| model.loss(x, y, true))?;
    let grads = tape.sparse_gradient(&loss, vars)?;
    let (grads, norm) = clip_gradients_by_global_norm(&grads, clip)?;
    let mut opt = opt.lock().unwrap_or_else(|e| e.into_inner());
    opt.apply(grads.into_iter().zip(vars.iter().cloned()).collect())?;
    Ok((loss, norm))
}

/// AdamW with `cfg`'s schedule: linear warm-up to the peak, then cosine
/// decay to a tenth of it; no weight decay on biases and norms.
pub fn optimizer(cfg: &Config) -> AdamW {
    let warmup = cfg.warmup_steps.max(1);
    let decay = cfg.steps.saturating_sub(warmup).max(1);
    let schedule = CosineDecay::new(cfg.learning_rate / warmup as f64, decay as u64)
        .warmup(cfg.learning_rate, warmup as u64)
        .alpha(0.1);
    AdamW::new(schedule)
        .weight_decay(cfg.weight_decay)
        .exclude_from_weight_decay(&["bias", "gamma", "beta", "scale"])
        .with_name("adamw")
}

/// The median of `v` (0 when empty).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The first step's loss eagerly and traced, each on a model built from
/// `cfg.seed` with a fresh optimizer, on the same batch; and the largest
/// difference between the two models' weights after it.
pub fn first_step_eager_and_traced(cfg: &Config) -> Result<(f64, f64, f64)> {
    let corpus = Corpus::load(cfg.vocab)?;
    let (x, y) = random_batch(&corpus.train, cfg.batch_size, cfg.context, &mut Rng::new(cfg.seed))?;
    let eager = Gpt::new(cfg, corpus.vocab(), &mut Rng::new(cfg.seed))?;
    let eager_vars = eager.variables();
    let (eager_loss, _) = train_step(&eager, &eager_vars, &Mutex::new(optimizer(cfg)), cfg.clip_norm, &x, &y)?;
    let traced = Arc::new(Gpt::new(cfg, corpus.vocab(), &mut Rng::new(cfg.seed))?);
    let traced_vars = traced.variables();
    let step = {
        let (model, vars, opt, clip) = (
            traced.clone(),
            traced_vars.clone(),
            Mutex::new(optimizer(cfg)),
            cfg.clip_norm,
        );
        function(move |(x, y): &(Tensor, Tensor)| train_step(&model, &vars, &opt, clip, x, y))
    };
    let (traced_loss, _) = step.call(&(x, y))?;
    let mut worst = 0.0f64;
    for (a, b) in eager_vars.iter().zip(&traced_vars) {
        for (p, q) in a.read().to_vec_f64().iter().zip(b.read().to_vec_f64()) {
            worst = worst.max((p - q).abs());
        }
    }
    Ok((eager_loss.item()?, traced_loss.item()?, worst))
}

/// What a run measured.
pub struct Outcome {
    pub corpus: Corpus,
    /// The trained model.
    pub model: Arc<Gpt>,
    /// The training loss at each step.
    pub losses: Vec<f64>,
    pub initial_valid_loss: f64,
    pub valid_loss: f64,
    /// The validation loss of a fresh model loaded from the checkpoint.
    pub reloaded_valid_loss: f64,
    /// Median milliseconds per step eagerly and traced (the call that
    /// traces excluded), where steps ran that way.
    pub eager_ms: Option<f64>,
    pub traced_ms: Option<f64>,
    pub trace_count: usize,
    pub checkpoint: PathBuf,
    /// The generated text (the prompt not included).
    pub sample: String,
}

/// Trains, evaluates, checkpoints, reloads and generates.
pub fn train(cfg: &Config) -> Result<Outcome> {
    cfg.check()?;
    let corpus = Corpus::load(cfg.vocab)?;
    let (valid_x, valid_y) = windows(&corpus.valid, cfg.context)?;
    let mut rng = Rng::new(cfg.seed);
    let model = Arc::new(Gpt::new(cfg, corpus.vocab(), &mut rng)?);
    let vars = model.variables();
    let opt = Arc::new(Mutex::new(optimizer(cfg)));
    if cfg.verbose {
        println!(
            "gpt: {} tokens of Markdown ({} to train on, {} held out), a vocabulary of {} ({} characters, {} words, {} unused)",
            corpus.train.len() + corpus.valid.len(),
            corpus.train.len(),
            corpus.valid.len(),
            corpus.vocab(),
            corpus.chars.len(),
            corpus.words.len(),
            corpus.unused()
        );
        println!(
            "model: {} blocks, width {}, {} heads, context {}, {} weights; {} steps of {} windows, AdamW {:.0e} (warm-up {}), clip {}; {}",
            cfg.layers,
            cfg.width,
            cfg.heads,
            cfg.context,
            model.count_params(),
            cfg.steps,
            cfg.batch_size,
            cfg.learning_rate,
            cfg.warmup_steps,
            cfg.clip_norm,
            if cfg.traced {
                match cfg.eager_every {
                    0 => "every step traced".to_string(),
                    n => format!("traced, one step in {n} eager (to time both)"),
                }
            } else {
                "every step eager".into()
            }
        );
    }
    let initial_valid_loss = model.evaluate(&valid_x, &valid_y)?;
    if cfg.verbose {
        println!(
            "validation loss before training {initial_valid_loss:.4} (uniform: ln {} = {:.4})",
            corpus.vocab(),
            (corpus.vocab() as f64).ln()
        );
    }

    let traced_step = {
        let (model, vars, opt, clip) = (model.clone(), vars.clone(), opt.clone(), cfg.clip_norm);
        function(move |(x, y): &(Tensor, Tensor)| train_step(&model, &vars, &opt, clip, x, y))
    };
    let bar = if cfg.verbose {
        let style = ProgressStyle::with_template("[{bar:30}] {pos:>4}/{len} {elapsed} {msg}")
            .map_err(|e| invalid(e.to_string()))?
            .progress_chars("=> ");
        ProgressBar::new(cfg.steps as u64).with_style(style)
    } else {
        ProgressBar::hidden()
    };
    let (mut eager_times, mut traced_times) = (Vec::new(), Vec::new());
    let mut losses = Vec::with_capacity(cfg.steps);
    let started = Instant::now();
    for step in 0..cfg.steps {
        let (x, y) = random_batch(&corpus.train, cfg.batch_size, cfg.context, &mut rng)?;
        let lr = opt.lock().unwrap_or_else(|e| e.into_inner()).learning_rate();
        let eager = !cfg.traced || (cfg.eager_every > 0 && step % cfg.eager_every == cfg.eager_every - 1);
        let t = Instant::now();
        let (loss, norm) = if eager {
            train_step(&model, &vars, &opt, cfg.clip_norm, &x, &y)?
        } else {
            traced_step.call(&(x, y))?
        };
        let loss = loss.item()?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if eager {
            eager_times.push(ms);
        } else {
            traced_times.push(ms);
        }
        if !loss.is_finite() {
            return Err(invalid(format!("the loss is {loss} at step {step}")));
        }
        losses.push(loss);
        let recent = &losses[losses.len().saturating_sub(20)..];
        bar.set_message(format!("loss {:.4}", recent.iter().sum::<f64>() / recent.len() as f64));
        bar.inc(1);
        if cfg.verbose && cfg.log_every > 0 && (step % cfg.log_every == 0 || step + 1 == cfg.steps) {
            let line = format!(
                "step {step:>4}: loss {loss:.4}, lr {lr:.2e}, gradient norm {:.3}, {ms:.1} ms ({})",
                norm.item()?,
                if eager { "eager" } else { "traced" }
            );
            // above the bar on a terminal; plain lines when piped
            if bar.is_hidden() {
                println!("{line}");
            } else {
                bar.println(line);
            }
        }
    }
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let valid_loss = model.evaluate(&valid_x, &valid_y)?;
    // the call that traced is not a step's time
    let eager_ms = (!eager_times.is_empty()).then(|| median(&eager_times));
    let traced_ms = (traced_times.len() > 1).then(|| median(&traced_times[1..]));
    if cfg.verbose {
        println!("trained in {seconds:.1} s: validation loss {valid_loss:.4}");
        let show = |ms: Option<f64>, n: usize| ms.map_or("-".to_string(), |ms| format!("{ms:.1} ms ({n} steps)"));
        println!(
            "time per step (median): eager {}, traced {}{}",
            show(eager_ms, eager_times.len()),
            show(traced_ms, traced_times.len().saturating_sub(1)),
            traced_times.first().map_or(String::new(), |t| format!(
                "; the first traced call (tracing) {t:.0} ms"
            ))
        );
    }

    if cfg.profile && cfg.traced {
        // (a batch from its own generator, and the weights put back after
        // the five profiled steps, which train: the rest of the run, the
        // checkpoint included, is as without)
        let batch = random_batch(&corpus.train, cfg.batch_size, cfg.context, &mut Rng::new(cfg.seed + 2))?;
        let trained: Vec<Tensor> = vars.iter().map(|v| v.read()).collect();
        let t = Instant::now();
        let (done, lines) =
            gradtape::function::compile::profile(|| (0..5).try_for_each(|_| traced_step.call(&batch).map(drop)));
        // (the steps' wall time beside the time in their nodes: what is
        // left is the executor's own, between the nodes)
        let wall = t.elapsed().as_secs_f64() * 1e3 / 5.0;
        done?;
        for (v, w) in vars.iter().zip(&trained) {
            v.assign(w)?;
        }
        // (the 25 kinds of node that took most time, then the rest's sum)
        let text = gradtape::function::compile::report(&lines, 5);
        println!("profiled steps: {wall:.2} ms a step, wall time");
        text.lines().take(26).for_each(|l| println!("{l}"));
        if lines.len() > 25 {
            let ms: f64 = lines[25..].iter().map(|l| l.total.as_secs_f64() * 1e3 / 5.0).sum();
            println!("{ms:9.3} ms in the {} other kinds of node", lines.len() - 25);
        }
    }

    // checkpoint: the weights, loaded back into a model built with other
    // random weights (the optimizer's state is not saved)
    std::fs::create_dir_all(&cfg.out_dir).map_err(|e| invalid(format!("{}: {e}", cfg.out_dir.display())))?;
    let checkpoint = cfg.out_dir.join("gpt.safetensors");
    io::save_safetensors(&checkpoint, &vars)?;
    let fresh = Gpt::new(cfg, corpus.vocab(), &mut Rng::new(cfg.seed + 1))?;
    let unused = io::load_safetensors(&checkpoint, &fresh.variables())?;
    if !unused.is_empty() {
        return Err(invalid(format!("checkpoint entries not loaded: {unused:?}")));
    }
    let reloaded_valid_loss = fresh.evaluate(&valid_x, &valid_y)?;
    if cfg.verbose {
        println!(
            "checkpoint {} ({} tensors) loaded into a fresh model: validation loss {reloaded_valid_loss:.4}",
            checkpoint.display(),
            vars.len()
        );
    }

    // generation, with the caches and then (to time it) without
    let prompt = corpus.encode(&cfg.prompt)?;
    // the characters and the milliseconds per character of one way
    let timed = |decode: Decode| -> Result<(Vec<i64>, f64)> {
        let t = Instant::now();
        let (ids, _) = generate(
            &model,
            &prompt,
            cfg.generate,
            cfg.temperature,
            cfg.top_k,
            &mut Rng::new(cfg.seed),
            decode,
        )?;
        Ok((ids, t.elapsed().as_secs_f64() * 1e3 / cfg.generate.max(1) as f64))
    };
    let (ids, cached_ms) = timed(Decode::Traced)?;
    let sample = corpus.decode(&ids);
    if cfg.verbose {
        println!(
            "\n{} {} after {:?} (temperature {}, top-k {:?}):\n\n{}{sample}\n",
            cfg.generate,
            if cfg.vocab.is_some() { "tokens" } else { "characters" },
            cfg.prompt,
            cfg.temperature,
            cfg.top_k,
            cfg.prompt
        );
        let (rerun, full_ms) = timed(Decode::Rerun)?;
        println!(
            "time per character: {cached_ms:.2} ms with the key/value caches (traced), {full_ms:.2} ms rerunning the window ({})",
            if rerun == ids {
                "the same text"
            } else {
                "a different text: rounding changed a draw"
            }
        );
    }
    let trace_count = traced_step.trace_count();
    drop(traced_step);
    Ok(Outcome {
        corpus,
        model,
        losses,
        initial_valid_loss,
        valid_loss,
        reloaded_valid_loss,
        eager_ms,
        traced_ms,
        trace_count,
        checkpoint,
        sample,
    })
}

/// `Config::default()` with the command line's options.
fn parse_args() -> std::result::Result<Config, String> {
    let mut cfg = Config::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--eager" => cfg.traced = false,
            "--steps" => cfg.steps = value("--steps")?.parse().map_err(|e| format!("--steps: {e}"))?,
            "--generate" => cfg.generate = value("--generate")?.parse().map_err(|e| format!("--generate: {e}"))?,
            "--lr" => cfg.learning_rate = value("--lr")?.parse().map_err(|e| format!("--lr: {e}"))?,
            "--seed" => cfg.seed = value("--seed")?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--prompt" => cfg.prompt = value("--prompt")?,
            "--layers" => cfg.layers = value("--layers")?.parse().map_err(|e| format!("--layers: {e}"))?,
            "--width" => cfg.width = value("--width")?.parse().map_err(|e| format!("--width: {e}"))?,
            "--heads" => cfg.heads = value("--heads")?.parse().map_err(|e| format!("--heads: {e}"))?,
            "--context" => cfg.context = value("--context")?.parse().map_err(|e| format!("--context: {e}"))?,
            "--batch" => cfg.batch_size = value("--batch")?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--vocab" => cfg.vocab = Some(value("--vocab")?.parse().map_err(|e| format!("--vocab: {e}"))?),
            "--dropout" => cfg.dropout = value("--dropout")?.parse().map_err(|e| format!("--dropout: {e}"))?,
            "--llama" => cfg.llama = true,
            "--profile" => cfg.profile = true,
            _ => {
                return Err(format!(
                "unknown argument {a:?}; options: --eager, --steps N, --lr RATE, --generate N, --seed N, --prompt TEXT, \
                 --layers N, --width N, --heads N, --context N, --batch N, --vocab N, --dropout RATE, --llama, --profile"
            ))
            }
        }
    }
    Ok(cfg)
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let cfg = parse_args()?;
    let out = train(&cfg)?;
    if out.reloaded_valid_loss != out.valid_loss {
        return Err(format!(
            "the reloaded model's validation loss {} differs from the trained model's {}",
            out.reloaded_valid_loss, out.valid_loss
        )
        .into());
    }
    if cfg.traced && out.trace_count > 1 {
        return Err(format!("the step was traced {} times, expected once", out.trace_count).into());
    }
    Ok(())
}
