//! Random programs, traced against eager: the differential test of the
//! compiler's passes acting together.
//!
//! The never-panic fuzz (`crates/gradtape-fuzz`) compares one op at a time,
//! traced and eager; the compiler's passes (fusion with its broadcast reads
//! and partial reductions, joined and diagonal products, hoisted
//! reductions, one-transpose, concatenations of reshapes, rematerialised
//! values) act on *neighbourhoods* of ops. Here a seeded generator writes
//! programs of 6 to 24 steps over three inputs, each step an op drawn from
//! a vocabulary of 82 (elementwise unary and binary ops with every
//! broadcast form, products with either operand transposed, reductions
//! over either axis with and without kept dims, reshapes, transposes,
//! slices, concatenations, splits, scans, softmax, LayerNorm, `where`,
//! expanded and broadcast dims, and ten motifs of models: a weight shared
//! by several products, an unrolled loop's products, a value split into
//! pieces used apart, a product by a diagonal, a dense layer with its
//! bias, a scale and shift before a ReLU and a product, multi-head
//! attention with its head split (causal or not, masked or not), an
//! embedding's gather, batched products with a transposed operand, an RMS
//! norm or a min; and, in [`more_ops`], convolutions and pooling,
//! padding, tiles and rolls, sorts, casts through a narrower float,
//! segment sums, `einsum`, normalisations, and `cond` and `while_loop`
//! deciding on the values; in [`third_ops`], Mish and hard SiLU, exact
//! powers, `where` with broadcast operands, softmax over a leading axis,
//! rotary positions and grouped-query attention; in [`fourth_ops`], every
//! traceable op the first three parts did not draw: the elementwise and
//! special functions left, integer, bitwise and boolean ops, sorted and
//! unsorted segment reductions, `gather_nd` and the scatters, dynamic
//! slices at offsets the values decide, the losses, linear algebra, complex
//! numbers and the FFTs, the 1-D, 3-D, transposed and separable
//! convolutions and pools, patches and resizes, the fused LSTM and GRU
//! sequences, `vmap` inside the function, a loop with a branch inside, and
//! the ops whose shapes the values decide) whose operands are any earlier
//! values. [`coverage`] checks that the traced graphs of the programs hold
//! every traceable op descriptor of the library but random draws and two
//! internal ops (its `NOT_DRAWN` says why). (The fourth part changed the
//! programs every seed draws: a failure of a seed before it replays with
//! the steps the failure printed, through [`check_steps`].) Each
//! program runs
//! - eagerly and as a traced [`function`], on its first inputs, on new
//!   values of the same shapes (the cached graph), and on inputs with
//!   another leading dim (a second trace);
//! - and, under a tape, differentiated: the gradient of a bounded loss
//!   over the last values w.r.t. the three inputs, eagerly and through the
//!   call.
//!
//! Values must agree within a few ulps of the output's scale (the compiler
//! may add in another order: a product's or a reduction's sums); NaN and
//! infinities where the eager run has them. A step whose operands do not
//! fit (shapes) is skipped, the same way in both runs, since shapes are
//! known when tracing. Nothing here has a value-dependent error.
//!
//! CI runs [`CASES`] programs from a fixed seed, at small and at larger
//! sizes (the larger ones reach the threaded and blocked kernels), in
//! `f32` or `f64`, and ([`half`]) programs in `f16` and `bf16`. A long
//! campaign: `GRADTAPE_PROGRAMS=20000 GRADTAPE_PROGRAMS_SEED=7 cargo test
//! --release --test function random_programs -- --nocapture`, with
//! `GRADTAPE_PROGRAMS_DTYPE=f16` (or `bf16`, `f32`, `f64`) to run every
//! program in one dtype. A failure names its seed and program index, and
//! prints the program.

use gradtape::{function, DType, GradientTape, Result, Tensor};

mod coverage;
mod fourth_ops;
mod half;
mod more_ops;
pub(crate) mod referees;
mod third_ops;
mod ties;
mod transforms;
use referees::{at_a_kink, differs, eager_oom, f32_noise, f64_noise, rounding};

/// Programs per CI run.
const CASES: usize = 160;

/// A deterministic generator (SplitMix64).
#[derive(Clone)]
pub(crate) struct Gen(pub(crate) u64);

impl Gen {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(crate) fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

/// One step: an op and its operands (indices into the values so far,
/// taken modulo their count) and parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Step {
    op: usize,
    a: usize,
    b: usize,
    p: usize,
    q: usize,
    flag: bool,
}

/// The number of ops in [`apply`] (the last [`fourth_ops::COUNT`] of them
/// in [`fourth_ops`], the [`third_ops::COUNT`] before them in
/// [`third_ops`], the [`more_ops::COUNT`] before those in [`more_ops`]).
const OPS: usize = fourth_ops::FIRST + fourth_ops::COUNT;

/// The first of the ops of [`apply`] that are motifs of models.
const MOTIFS: usize = 30;

/// `b` shaped for an elementwise op with `a`: as it is (`how` 0), its
/// mean (a scalar), its sums down to `a`'s last dim (a row), its means
/// across its last dim kept (a column, where the leading dims agree), or
/// reshaped to `a`'s shape (same count).
fn fit(a: &Tensor, b: &Tensor, how: usize) -> Result<Tensor> {
    let (sa, sb) = (a.shape(), b.shape());
    match how % 5 {
        0 => Ok(b.clone()),
        1 => b.mean_all(),
        2 if sb.last() == sa.last() && sb.len() > 1 => b.sum(&(0..sb.len() as isize - 1).collect::<Vec<_>>(), false),
        3 if sa.len() >= 2 && sb.len() >= 2 && sb[..sb.len() - 1] == sa[..sa.len() - 1] => b.mean(&[-1], true),
        4 if a.numel() == b.numel() => b.reshape(sa),
        _ => Ok(b.clone()),
    }
}

/// Runs one step on the values so far; `Err` where the operands do not
/// fit (skipped by the caller).
fn apply(s: &Step, v: &[Tensor]) -> Result<Tensor> {
    let a = &v[s.a % v.len()];
    let b = &v[s.b % v.len()];
    let r = a.rank() as isize;
    let axis = |k: usize| -> isize { (k % a.rank().max(1)) as isize - if s.flag { r } else { 0 } };
    match s.op {
        0 => a.tanh(),
        1 => a.tanh()?.exp(),
        2 => a.sigmoid(),
        3 => a.relu(),
        4 => a.gelu(s.flag),
        5 => a.sin(),
        6 => a.square()?.tanh(),
        7 => a.abs()?.log1p(),
        8 => a.abs()?.add_scalar(1.0)?.sqrt(),
        9 => a.softplus(),
        10 => a.add(&fit(a, b, s.p)?),
        11 => a.sub(&fit(a, b, s.p)?),
        12 => a.mul(&fit(a, b, s.p)?),
        13 => a.div(&fit(a, b, s.p)?.square()?.add_scalar(1.0)?),
        14 => a.maximum(&fit(a, b, s.p)?),
        15 => a.minimum(&fit(a, b, s.p)?),
        16 => {
            // a product: b as it is or transposed, a transposed or not
            let (ta, tb) = (s.p % 2 == 1, s.q % 2 == 1);
            if a.rank() != 2 || b.rank() != 2 {
                return a.matmul(b);
            }
            let x = if ta { a.transpose()? } else { a.clone() };
            let y = if tb { b.transpose()? } else { b.clone() };
            x.matmul(&y)
        }
        17 => a.sum(&[axis(s.p)], s.flag),
        18 => a.mean(&[axis(s.p)], !s.flag),
        19 => a.max(&[axis(s.p)], s.flag),
        20 => a.logsumexp(&[axis(s.p)], s.flag),
        21 => match a.rank() {
            2 => a.transpose(),
            3 => a.permute(&[[0, 2, 1], [1, 0, 2], [2, 1, 0]][s.p % 3]),
            _ => a.expand_dims(0),
        },
        22 => {
            // reshape: flatten, fold the last dim in two, or merge the first two
            let sh = a.shape().to_vec();
            match s.p % 3 {
                0 => a.reshape(&[sh.iter().product::<usize>()]),
                1 => {
                    let last = *sh.last().unwrap_or(&1);
                    let f = [2usize, 3, 4]
                        .into_iter()
                        .find(|&f| last.is_multiple_of(f) && last > f)
                        .unwrap_or(1);
                    let mut t = sh[..sh.len().saturating_sub(1)].to_vec();
                    t.extend([f, last / f]);
                    a.reshape(&t)
                }
                _ if sh.len() >= 2 => {
                    let mut t = vec![sh[0] * sh[1]];
                    t.extend(&sh[2..]);
                    a.reshape(&t)
                }
                _ => a.expand_dims(-1),
            }
        }
        23 => {
            let ax = axis(s.q);
            let d = a.shape().get(ax.rem_euclid(r.max(1)) as usize).copied().unwrap_or(1);
            let start = s.p % d.max(1);
            let len = 1 + (s.p / 7) % (d - start).max(1);
            a.narrow(ax, start, len)
        }
        24 => Tensor::concat(&[a, &fit(a, b, 4)?], axis(s.q)),
        25 => {
            let ax = axis(s.q);
            let d = a.dim(ax)?;
            let n = if d % 2 == 0 && d > 1 { 2 } else { 1 };
            let parts = a.split(n, ax)?;
            Ok(parts[s.p % parts.len()].clone())
        }
        26 => a.cumsum(axis(s.p), s.flag, s.q % 2 == 1),
        27 => match s.flag {
            true => a.softmax(-1),
            false => a.log_softmax(-1),
        },
        28 => a.layer_normalization(&[-1], None, None, 1e-3),
        29 => {
            let other = fit(a, b, s.p)?;
            Tensor::where_(&a.gt_scalar(0.1)?, a, &other.broadcast_to(a.shape())?)
        }
        // motifs of models, which the pattern passes look for:
        30 => {
            // a shared weight (the third input) read by two products, as an
            // unrolled recurrence does (stacked products; its gradient a
            // sum of products), the second maybe through its transpose
            let w = &v[2];
            let h = a.matmul(w)?.tanh()?;
            let back = match s.flag {
                true => h.matmul(&w.transpose()?)?,
                false => h.matmul(&fit(&h, b, 4)?.transpose()?.matmul(&h)?)?,
            };
            a.matmul(w)?.add(&back.tanh()?.matmul(w)?)
        }
        31 => {
            // a value split into pieces that are used apart, maybe through
            // reshapes of the pieces: by `split` (its gradient is one
            // concatenation) or by `narrow`s (each piece's gradient is
            // padded back: the pads sum to a concatenation in the compiler)
            let ax = axis(s.q);
            let d = a.dim(ax)?;
            let n = [3usize, 2].into_iter().find(|&n| d.is_multiple_of(n)).unwrap_or(1);
            let parts = match s.p % 2 {
                0 => a.split(n, ax)?,
                _ => (0..n)
                    .map(|i| a.narrow(ax, i * (d / n), d / n))
                    .collect::<Result<Vec<_>>>()?,
            };
            // pieces whose last dim is folded in two (a head split): their
            // gradients are reshaped back before they are concatenated
            let flat = |p: &Tensor| {
                let sh = p.shape();
                match sh.last() {
                    Some(&c) if s.flag && c % 2 == 0 => {
                        let mut t = sh[..sh.len() - 1].to_vec();
                        t.extend([2, c / 2]);
                        p.reshape(&t)
                    }
                    _ => Ok(p.clone()),
                }
            };
            let mut acc = flat(&parts[0])?.sigmoid()?;
            for p in &parts[1..] {
                acc = acc.mul(&flat(p)?.tanh()?)?;
            }
            Ok(acc)
        }
        32 => {
            // a product by a diagonal matrix made from a row
            let k = *a.shape().last().unwrap_or(&0);
            if a.rank() != 2 || k > 512 {
                // (no eye of a flattened value's length)
                return Err(gradtape::Error::InvalidArgument {
                    op: "diagonal motif",
                    msg: format!("needs a matrix at most 512 wide, got {:?}", a.shape()),
                });
            }
            let row = fit(a, b, 2)?;
            let diag = Tensor::try_eye(k, a.dtype())?.mul(&row)?;
            a.matmul(&diag)
        }
        34 => {
            // an unrolled loop's products: three left operands known
            // before the loop by one weight (stacked into one product),
            // and each result by the weight transposed (one transposed
            // copy for all)
            let w = &v[2];
            let lefts = [a.clone(), a.sin()?, a.tanh()?];
            let mut acc: Option<Tensor> = None;
            for l in &lefts {
                let q = l.matmul(w)?.tanh()?.matmul(&w.transpose()?)?;
                acc = Some(match acc {
                    None => q,
                    Some(x) => x.add(&q)?,
                });
            }
            Ok(acc.expect("three terms"))
        }
        35 => {
            // a scale and shift before a ReLU and a product: the gradient's
            // kernel needs the shifted value again (recomputed, not read)
            let h = a.mul(&fit(a, b, 2)?)?.add(&fit(a, &v[1], 2)?)?;
            h.relu()?.matmul(&v[2])
        }
        33 => {
            // a layer: a product plus a bias, an activation, and the bias's
            // sum over the batch beside it (a gradient's shape)
            let w = &v[2];
            let z = a.matmul(w)?.add(&fit(&a.matmul(w)?, b, 2)?)?;
            let y = z.gelu(false)?;
            y.add(&y.sum(&[0], true)?.mul_scalar(1e-2)?)
        }
        36 => {
            // multi-head attention: a value's rows as positions, its last
            // dim split into heads ([.., t, h·d] to [.., h, t, d] and back),
            // causal or not, maybe with an additive mask and a scale of its
            // own; the keys and values made from `a` and `b`
            let sh = a.shape().to_vec();
            if !(2..=3).contains(&sh.len()) {
                return a.tanh();
            }
            let (t, c) = (sh[sh.len() - 2], sh[sh.len() - 1]);
            let lead = if sh.len() == 3 { sh[0] } else { 1 };
            let h = [2usize, 3]
                .into_iter()
                .find(|&h| c.is_multiple_of(h) && c > h)
                .unwrap_or(1);
            let heads = |x: &Tensor| x.reshape(&[lead, t, h, c / h])?.permute(&[0, 2, 1, 3]);
            let (q, k, w) = (heads(a)?, heads(&a.sin()?)?, heads(&fit(a, b, 4)?)?);
            let mask = match s.p % 3 {
                0 => {
                    // every fourth key hidden from a row, never all of a row's
                    let m: Vec<f64> = (0..t * t)
                        .map(|x| {
                            if x % t != x / t && (x / t + 3 * (x % t)) % 4 == 0 {
                                -1e4
                            } else {
                                0.0
                            }
                        })
                        .collect();
                    Some(Tensor::from_vec(m, &[t, t])?.cast(a.dtype())?)
                }
                _ => None,
            };
            let scale = (s.q % 2 == 1).then_some(0.3);
            let o = q.scaled_dot_product_attention(&k, &w, mask.as_ref(), s.flag, scale)?;
            o.permute(&[0, 2, 1, 3])?.reshape(&sh)
        }
        37 => {
            // an embedding: rows (or columns) of the weight picked by
            // indices that depend only on shapes, as token ids do
            let w = &v[2];
            let axis = (s.q % 2) as isize;
            let n = w.dim(axis)?;
            let rows = a.shape().first().copied().unwrap_or(1);
            let ids: Vec<i64> = (0..rows * 2).map(|i| ((i * 7 + s.p) % n) as i64).collect();
            let picked = w.gather(&Tensor::from_vec(ids, &[rows, 2])?, axis)?;
            match s.flag {
                true => picked.tanh(),
                false => picked.mul_scalar(0.5),
            }
        }
        38 => {
            // batched products with a transposed operand: scores of a batch
            // of short sequences (`x xᵀ`, the last dim folded into a few
            // rows), or a weight-gradient shape (`yᵀ tanh(y)`, the batch
            // moved inside)
            let x = match a.rank() {
                3 => a.clone(),
                2 => {
                    let (r0, c) = (a.shape()[0], a.shape()[1]);
                    let f = [4usize, 3, 2]
                        .into_iter()
                        .find(|&f| c.is_multiple_of(f) && c > f)
                        .unwrap_or(1);
                    a.reshape(&[r0, f, c / f])?
                }
                _ => return a.sin(),
            };
            // (a product of two large dims is skipped: chained, such
            // products grew a program past memory)
            let [d0, t, c] = [x.shape()[0], x.shape()[1], x.shape()[2]];
            let out = if s.flag { d0 * t * t } else { t * c * c };
            if out > 1 << 20 {
                return Err(gradtape::Error::InvalidArgument {
                    op: "batched products motif",
                    msg: format!("{out} elements from {:?}", x.shape()),
                });
            }
            match s.flag {
                true => x.matmul(&x.permute(&[0, 2, 1])?),
                false => {
                    let y = x.permute(&[1, 0, 2])?;
                    y.permute(&[0, 2, 1])?.matmul(&y.tanh()?)
                }
            }
        }
        39 => {
            // an RMS norm with a gain row (written out, or the op), or a
            // min over an axis
            match s.flag {
                true if s.q.is_multiple_of(2) => {
                    let ms = a.square()?.mean(&[-1], true)?.add_scalar(1e-5)?;
                    a.mul(&ms.rsqrt()?)?.mul(&fit(a, b, 2)?)
                }
                true => a.rms_normalization(&[-1], Some(&fit(a, b, 2)?), 1e-5),
                false => a.min(&[axis(s.p)], s.q % 2 == 1),
            }
        }
        op if op >= fourth_ops::FIRST => fourth_ops::apply(s, v),
        op if op >= third_ops::FIRST => third_ops::apply(s, v),
        _ => more_ops::apply(s, v),
    }
}

/// A program: its steps, then the values it returns (the last value, and a
/// bounded loss over the last three).
fn run(steps: &[Step], inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let mut v: Vec<Tensor> = inputs.to_vec();
    for s in steps {
        if let Ok(t) = apply(s, &v) {
            v.push(t);
        }
    }
    let mut loss = Tensor::scalar(0.0f64).cast(inputs[0].dtype())?;
    for t in v.iter().rev().take(3) {
        loss = loss.add(&t.tanh()?.mul_scalar(0.5)?.sum_all()?)?;
    }
    Ok(vec![v.last().expect("inputs").clone(), loss])
}

/// [`run`] with its loss's gradients w.r.t. the inputs taken inside (a
/// training step's shape: the tape inside the traced function): the last
/// value, the loss, then one gradient per input (zeros where none).
fn run_with_gradients(steps: &[Step], inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let out = tape.record(|| {
        for x in inputs {
            tape.watch(x);
        }
        run(steps, inputs)
    })?;
    let grads = tape.gradient(&out[1], inputs)?;
    let mut all = out;
    for (g, x) in grads.into_iter().zip(inputs) {
        all.push(match g {
            Some(g) => g,
            None => x.try_zeros_like()?,
        });
    }
    Ok(all)
}

thread_local! {
    /// Rewrites per compiler pass over the graphs this thread's programs
    /// compiled (their forward graphs and their traced training steps):
    /// each test runs on a thread of its own, so each counts its own.
    static PASS_COUNTS: std::cell::RefCell<Vec<(&'static str, usize)>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn count_passes(stats: &gradtape::CompileStats) {
    PASS_COUNTS.with_borrow_mut(|all| {
        for &(name, n) in &stats.passes {
            match all.iter_mut().find(|(k, _)| *k == name) {
                Some((_, c)) => *c += n,
                None => all.push((name, n)),
            }
        }
    });
}

/// The steps of a program; with `lean`, half of them motifs of models
/// (the ops from [`MOTIFS`] on, which the pattern passes look for).
fn draw_program(g: &mut Gen, lean: bool) -> Vec<Step> {
    let n = 6 + g.below(19);
    (0..n)
        .map(|_| Step {
            op: match lean && g.coin() {
                true => MOTIFS + g.below(OPS - MOTIFS),
                false => g.below(OPS),
            },
            // operands lean to the recent values, as real programs do
            a: usize::MAX - g.below(4),
            b: g.below(64),
            p: g.below(1 << 16),
            q: g.below(1 << 16),
            flag: g.coin(),
        })
        .collect()
}

/// The inputs of one call: `[b, n]`, `[b, n]`, `[n, m]`, values from `seed`.
fn inputs(g: &mut Gen, dtype: DType, b: usize, n: usize, m: usize) -> Result<Vec<Tensor>> {
    [[b, n], [b, n], [n, m]]
        .iter()
        .map(|s| {
            let v: Vec<f64> = (0..s[0] * s[1])
                .map(|_| (g.below(2001) as f64 - 1000.0) / 400.0)
                .collect();
            Tensor::from_vec(v, s)?.cast(dtype)
        })
        .collect()
}

/// A run of a traced program on its inputs.
type Call<'a> = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + 'a;

/// Runs the traced program, its training step and its gradient (`runs`),
/// traced on `x`, once on NaN inputs of `x`'s shapes, and forgets what
/// they give: every buffer those runs leave for the compiled graphs' next
/// runs to reuse holds NaN (or what NaN gives), so a kernel that reads its
/// output before writing it (`0·c + a·b`, an accumulation begun on the old
/// contents) turns the calls checked after it to NaN, where old finite
/// values would have been multiplied by 0 unseen.
fn poison(x: &[Tensor], runs: &[&Call<'_>]) {
    let Ok(nan) = x.iter().map(|t| t.add_scalar(f64::NAN)).collect::<Result<Vec<_>>>() else {
        return;
    };
    for run in runs {
        let _ = run(&nan);
    }
}

/// The gradient of `run`'s loss w.r.t. the inputs, through `call`.
fn gradient(inputs: &[Tensor], call: impl Fn(&[Tensor]) -> Result<Vec<Tensor>>) -> Result<Vec<Option<Tensor>>> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        for x in inputs {
            tape.watch(x);
        }
        Ok(call(inputs)?[1].clone())
    })?;
    tape.gradient(&loss, inputs)
}

/// Runs program `k` of `seed`, in `dtype` where given (else in the
/// campaign's, else in one drawn); panics with the program on a
/// difference.
fn check_program(seed: u64, k: usize, large: bool, lean: bool, dtype: Option<DType>) {
    let mut g = Gen(seed ^ (k as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let steps = draw_program(&mut g, lean);
    // (f32 for one in three, or for half of those leaning to motifs: some
    // passes take f32 products only)
    let drawn = if g.below(if lean { 2 } else { 3 }) == 0 {
        DType::F32
    } else {
        DType::F64
    };
    let dtype = dtype.or_else(campaign_dtype).unwrap_or(drawn);
    let (b, n, m) = match large {
        false => (1 + g.below(5), 2 + g.below(6), 1 + g.below(6)),
        true => (64 + g.below(200), 32 + g.below(300), 16 + g.below(100)),
    };
    check_steps(
        &format!("random program {k} of seed {seed}"),
        &steps,
        dtype,
        (b, n, m),
        g,
    );
}

/// Checks `steps` on inputs of `dtype` and sizes `(b, n, m)` drawn from `g`.
fn check_steps(label: &str, steps: &[Step], dtype: DType, (b, n, m): (usize, usize, usize), mut g: Gen) {
    let tol = match dtype {
        DType::F64 => 1e-11,
        DType::F32 => 2e-5,
        // (four units of roundoff: sums in another order round apart)
        DType::F16 => 4.0 * (-11f64).exp2(),
        _ => 4.0 * (-8f64).exp2(),
    };
    let steps = steps.to_vec();
    let body = {
        let steps = steps.clone();
        move |x: &Vec<Tensor>| run(&steps, x)
    };
    let f = function(body.clone());
    let step = {
        let steps = steps.clone();
        move |x: &Vec<Tensor>| run_with_gradients(&steps, x)
    };
    let fs = function(step.clone());
    let fail = |what: &str, why: String| -> ! {
        panic!("{label} ({dtype}, b {b}, n {n}, m {m}): {what}: {why}\nsteps: {steps:?}")
    };
    // the first inputs, new values of the same shapes, another leading dim
    let b2 = b + 1 + g.below(3);
    let calls = [
        inputs(&mut g, dtype, b, n, m),
        inputs(&mut g, dtype, b, n, m),
        inputs(&mut g, dtype, b2, n, m),
    ];
    let first = calls[0].as_ref().expect("inputs").clone();
    for (c, x) in calls.into_iter().enumerate() {
        let x = x.expect("inputs");
        if c == 1 {
            // (after the graphs were traced on the first, finite, inputs)
            poison(
                &first,
                &[&|x| f.call(&x.to_vec()), &|x| fs.call(&x.to_vec()), &|x| {
                    gradient(x, |x| f.call(&x.to_vec())).map(|_| vec![])
                }],
            );
        }
        // (measured once, when a first difference asks for it)
        let measured = std::cell::OnceCell::new();
        let noise = || {
            *measured.get_or_init(|| {
                let of_f32 = match dtype {
                    DType::F32 => f32_noise(&steps, &x),
                    _ => x
                        .iter()
                        .map(|t| t.cast(DType::F32))
                        .collect::<Result<Vec<_>>>()
                        .map_or(0.0, |x| f32_noise(&steps, &x)),
                };
                // (in f64 also its own condition, in the f32 measure's
                // units: `rounding` scales the noise down by 2^-29)
                match dtype {
                    DType::F64 => of_f32.max(f64_noise(&steps, &x) * 29f64.exp2()),
                    _ => of_f32,
                }
            })
        };
        // the traced graph's sort orders, for a difference at a near-tie
        // (see `ties`): of `run`, or of `run_with_gradients`
        let orders = |grads: bool| {
            let s = steps.clone();
            let program = move |x: &[Tensor]| if grads { run_with_gradients(&s, x) } else { run(&s, x) };
            ties::traced_orders(program, if grads { 2 + x.len() } else { 2 }, &x)
        };
        let want = body(&x);
        let got = f.call(&x);
        let (want, got) = match (want, got) {
            (Ok(w), Ok(g)) => (w, g),
            // (a value eager had to make and the compiled graph fused
            // away: the traced call needs less memory; see `eager_oom`)
            (Err(e), Ok(_)) if eager_oom(&e) => continue,
            (Err(e), Ok(_)) => fail(&format!("call {c}"), format!("eager refused ({e}), traced ran")),
            (Ok(_), Err(e)) => fail(&format!("call {c}"), format!("traced refused ({e}), eager ran")),
            (Err(_), Err(_)) => continue,
        };
        if let Ok(cf) = f.concrete(&x) {
            count_passes(&cf.compile_stats());
        }
        // the program in f64, the referee of f32 differences (computed
        // when one is seen)
        let exact = || body(&x.iter().map(|t| t.cast(DType::F64)).collect::<Result<Vec<_>>>()?);
        for (j, (gv, wv)) in got.iter().zip(&want).enumerate() {
            if let Some(why) = differs(gv, wv, tol)
                && !rounding(dtype, gv, wv, exact().ok().map(|e| e[j].clone()), noise())
                && !at_a_kink(gv, wv, tol, &x, |m| body(&m.to_vec()).ok().map(|o| o[j].clone()))
                && !ties::at_a_tie(gv, tol, orders(false), || body(&x).ok().map(|o| o[j].clone()))
            {
                fail(&format!("call {c}, output {j}"), why);
            }
        }
        // the traced training step: values and gradients from one graph
        let (want_s, got_s) = (step(&x), fs.call(&x));
        match (&want_s, &got_s) {
            (Ok(w), Ok(gs)) => {
                if let Ok(cf) = fs.concrete(&x) {
                    count_passes(&cf.compile_stats());
                }
                let exact = || step(&x.iter().map(|t| t.cast(DType::F64)).collect::<Result<Vec<_>>>()?);
                for (j, (gv, wv)) in gs.iter().zip(w).enumerate() {
                    let t = if j < 2 { tol } else { tol * 10.0 };
                    if let Some(why) = differs(gv, wv, t)
                        && !rounding(dtype, gv, wv, exact().ok().map(|e| e[j].clone()), noise())
                        && !at_a_kink(gv, wv, t, &x, |m| step(&m.to_vec()).ok().map(|o| o[j].clone()))
                        && !ties::at_a_tie(gv, t, orders(true), || step(&x).ok().map(|o| o[j].clone()))
                    {
                        fail(&format!("call {c}, training step output {j}"), why);
                    }
                }
            }
            (Err(_), Err(_)) => {}
            (Err(e), Ok(_)) if eager_oom(e) => {}
            _ => fail(
                &format!("call {c}, training step"),
                format!("traced {:?}, eager {:?}", got_s.as_ref().err(), want_s.as_ref().err()),
            ),
        }
        // gradients (the loss is finite where the values are)
        if !want[1].to_vec_f64()[0].is_finite() {
            continue;
        }
        let ge = gradient(&x, |x| body(&x.to_vec()));
        let gt = gradient(&x, |x| f.call(&x.to_vec()));
        match (ge, gt) {
            (Ok(ge), Ok(gt)) => {
                for (i, (a, e)) in gt.iter().zip(&ge).enumerate() {
                    match (a, e) {
                        (Some(a), Some(e)) => {
                            if let Some(why) = differs(a, e, tol * 10.0) {
                                let x64: Result<Vec<Tensor>> = x.iter().map(|t| t.cast(DType::F64)).collect();
                                let exact = x64.and_then(|x| gradient(&x, |x| body(&x.to_vec())));
                                let exact = exact.ok().and_then(|g| g[i].clone());
                                let kink = || {
                                    at_a_kink(a, e, tol * 10.0, &x, |m| {
                                        gradient(m, |m| body(&m.to_vec())).ok().and_then(|g| g[i].clone())
                                    })
                                };
                                let tie = || {
                                    ties::at_a_tie(a, tol * 10.0, orders(false), || {
                                        gradient(&x, |x| body(&x.to_vec())).ok().and_then(|g| g[i].clone())
                                    })
                                };
                                if !rounding(dtype, a, e, exact, noise()) && !kink() && !tie() {
                                    fail(&format!("call {c}, gradient {i}"), why);
                                }
                            }
                        }
                        (None, None) => {}
                        _ => fail(&format!("call {c}, gradient {i}"), format!("{a:?} against {e:?}")),
                    }
                }
            }
            (Err(_), Err(_)) => {}
            (Err(e), Ok(_)) if eager_oom(&e) => {}
            (ge, gt) => fail(&format!("call {c}, gradients"), format!("traced {gt:?}, eager {ge:?}")),
        }
    }
}

/// The dtype of every program of a campaign, where
/// `GRADTAPE_PROGRAMS_DTYPE` names one (`f16`, `bf16`, `f32` or `f64`;
/// see [`half`] for the half types).
fn campaign_dtype() -> Option<DType> {
    match std::env::var("GRADTAPE_PROGRAMS_DTYPE").ok()?.as_str() {
        "f16" => Some(DType::F16),
        "bf16" => Some(DType::BF16),
        "f32" => Some(DType::F32),
        "f64" => Some(DType::F64),
        _ => None,
    }
}

/// The campaign's seed and size, and whether its programs lean to motifs
/// (`GRADTAPE_PROGRAMS_LEAN=1`, as [`draw_program`]), from the environment
/// (`GRADTAPE_PROGRAMS_ONLY=k` reruns program `k` alone).
fn campaign() -> (u64, std::ops::Range<usize>, bool) {
    let var = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    let seed = var("GRADTAPE_PROGRAMS_SEED").unwrap_or(0x5eed);
    let n = var("GRADTAPE_PROGRAMS").map_or(CASES, |n| n as usize);
    let lean = var("GRADTAPE_PROGRAMS_LEAN") == Some(1);
    match var("GRADTAPE_PROGRAMS_ONLY") {
        Some(k) => (seed, k as usize..k as usize + 1, lean),
        None => (seed, 0..n, lean),
    }
}

#[test]
fn small_random_programs_traced_equal_eager() {
    let (seed, range, lean) = campaign();
    for k in range {
        check_program(seed, k, false, lean, None);
    }
}

#[test]
fn larger_random_programs_traced_equal_eager() {
    let (seed, range, lean) = campaign();
    // fewer: each runs the threaded kernels on up to ~250 x 330 values
    let range = match range.len() {
        1 => range,
        n => 0..n.div_ceil(4),
    };
    for k in range {
        check_program(seed.wrapping_add(1), k, true, lean, None);
    }
    report_passes();
}

/// Prints this thread's rewrites per pass so far (`--nocapture` shows
/// them), and returns them.
fn report_passes() -> Vec<(&'static str, usize)> {
    let all = PASS_COUNTS.with_borrow(Vec::clone);
    eprintln!("random programs: rewrites per compiler pass: {all:?}");
    all
}
