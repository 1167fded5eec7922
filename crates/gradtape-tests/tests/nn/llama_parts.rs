//! The parts of a Llama-style block: `rms_normalization` and `RMSNorm`,
//! grouped-query attention (the op and `MultiHeadAttention` with fewer
//! key/value heads), and `RotaryEmbedding`, against Keras, PyTorch and
//! keras_hub (`tests/reference/llama_parts.py` prints every number below),
//! then a whole block built from them: traced as eager, decoded with a
//! cache as the full causal call, trained until its loss falls; and
//! `TransformerBlock`'s Llama form, against keras_hub's
//! `LlamaTransformerDecoder` and against that block.

use gradtape::nn::{
    AttentionArgs, Dense, KvCache, Layer, Module, MultiHeadAttention, RMSNorm, RotaryEmbedding, TransformerBlock,
};
use gradtape::optim::{Adam, Optimizer};
use std::sync::Arc;

use gradtape::{function, DType, GradientTape, Result, Rng, Tensor, Variable};

use super::sums_util::{check_against, close_sums as close, init, sin_weighted, wsum, Want};

/// The value of `f` at `xs` and the gradients of its `sin_weighted` loss.
fn value_and_grads(xs: &[Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) -> Result<(Tensor, Vec<Tensor>)> {
    let tape = GradientTape::new();
    let mut y = None;
    let loss = tape.record(|| {
        tape.watch(xs);
        let out = f(xs)?;
        y = Some(out.clone());
        sin_weighted(&out)
    })?;
    let g = tape.gradient(&loss, xs)?;
    Ok((y.unwrap(), g.into_iter().map(|g| g.unwrap()).collect()))
}

use super::sums_util::Sums;
/// An RMS case: shape, axes, the scale's shape, epsilon, and y, dx, dscale.
type RmsCase<'a> = (&'a [usize], &'a [isize], &'a [usize], f64, [Sums; 3]);
/// A GQA case: q, k, v shapes, the mask, causal, and out, dq, dk, dv.
type GqaCase<'a> = ([&'a [usize]; 3], Option<&'a Tensor>, bool, [Sums; 4]);

/// Keras's `ops.rms_normalization` (TF backend, f64; PyTorch's
/// `F.rms_norm` agrees to 1e-14): values and gradients, in f64, f32, bf16
/// (computed in f32) and traced.
#[test]
fn rms_normalization_matches_keras() -> Result<()> {
    let cases: [RmsCase; 2] = [
        (
            &[3, 5, 8],
            &[-1],
            &[8],
            1e-6,
            [
                (0.9395242549646512, 1.3511266699123197),
                (-1.7764104085415275, 31.39015752867933),
                (0.7489431636794188, -0.15210137000150692),
            ],
        ),
        (
            &[2, 3, 4],
            &[1, 2],
            &[3, 4],
            0.1,
            [
                (5.336023568945434, 0.4774036583425052),
                (11.921159030584597, 9.741095805929088),
                (2.7194197035829317, 1.3741545689455308),
            ],
        ),
    ];
    for (xs, axes, ss, eps, want) in cases {
        let x = init(xs, 1.0, 1.5);
        let s = init(ss, 2.0, 0.5).add_scalar(1.0)?;
        let f = move |a: &[Tensor]| a[0].rms_normalization(axes, Some(&a[1]), eps);
        for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5)] {
            let args = [x.cast(dt)?, s.cast(dt)?];
            let (y, g) = value_and_grads(&args, f)?;
            let what = format!("{xs:?} axes {axes:?} {dt}");
            close(wsum(&y), want[0], tol, &format!("{what}: y"));
            close(wsum(&g[0]), want[1], tol, &format!("{what}: dx"));
            close(wsum(&g[1]), want[2], tol, &format!("{what}: dscale"));
            // traced: the same values and gradients
            let step = function(move |a: &Vec<Tensor>| {
                let (y, g) = value_and_grads(a, f)?;
                Ok(vec![y, g[0].clone(), g[1].clone()])
            });
            let t = step.call(&args.to_vec())?;
            for (got, w) in t.iter().zip([&y, &g[0], &g[1]]) {
                close(wsum(got), wsum(w), tol * 1e-2, &format!("{what}: traced"));
            }
        }
        // bf16 is computed in f32 and rounded once
        let yh = x
            .cast(DType::BF16)?
            .rms_normalization(axes, Some(&s.cast(DType::BF16)?), eps)?;
        assert_eq!(yh.dtype(), DType::BF16);
        close(wsum(&yh), want[0], 2e-2, "bf16");
    }
    // f16 squares past 65504 would overflow: computed in f32, they do not
    let big = Tensor::from_vec(vec![300.0f64, -400.0], &[1, 2])?.cast(DType::F16)?;
    let y = big.rms_normalization(&[-1], None, 1e-6)?.to_vec_f64();
    let r = (2.0f64).sqrt() / 5.0;
    assert!((y[0] - 3.0 * r).abs() < 2e-3 && (y[1] + 4.0 * r).abs() < 2e-3, "{y:?}");
    Ok(())
}

/// The layer: Keras's `RMSNormalization` (a `scale` of ones, epsilon
/// 1e-6); bad input names the op or the layer.
#[test]
fn rms_norm_layer_and_bad_input() -> Result<()> {
    let norm = RMSNorm::builder(8).dtype(DType::F64).name("rms").build()?;
    assert_eq!(norm.variables()[0].name(), "rms/scale");
    let x = init(&[3, 5, 8], 1.0, 1.5);
    norm.scale().assign(&init(&[8], 2.0, 0.5).add_scalar(1.0)?)?;
    close(
        wsum(&norm.call(&x)?),
        (0.9395242549646512, 1.3511266699123197),
        1e-12,
        "layer",
    );
    let err = |r: Result<Tensor>, op: &str| {
        let e = r.expect_err("an error").to_string();
        assert!(e.contains(op), "{e}");
    };
    err(norm.call(&init(&[3, 5, 7], 1.0, 1.0)), "RMSNorm");
    err(norm.call(&x.cast(DType::F32)?), "RMSNorm");
    err(x.rms_normalization(&[3], None, 1e-6), "rms_normalization");
    err(x.rms_normalization(&[-1], None, -1.0), "rms_normalization");
    err(
        x.rms_normalization(&[-1], Some(&init(&[5], 0.0, 1.0)), 1e-6),
        "rms_normalization",
    );
    err(
        Tensor::vector(&[1i32, 2]).rms_normalization(&[-1], None, 1e-6),
        "rms_normalization",
    );
    Ok(())
}

/// PyTorch's `scaled_dot_product_attention(..., enable_gqa=True)` (f64):
/// values and the gradients of q, k and v (k's and v's summed over each
/// group of query heads), with and without a causal or bool mask.
#[test]
fn grouped_query_attention_matches_pytorch() -> Result<()> {
    let small: [&[usize]; 3] = [&[2, 4, 5, 6], &[2, 2, 7, 6], &[2, 2, 7, 3]];
    let keep: Vec<bool> = (0..35).map(|n| ((n / 7) * 3 + (n % 7) * 5) % 4 != 0).collect();
    let mask = Tensor::from_vec(keep, &[5, 7])?;
    let cases: [GqaCase; 3] = [
        (
            small,
            None,
            false,
            [
                (-0.9117083200374152, -0.6565783296867604),
                (0.816692893734806, 0.09415997993546166),
                (-3.3306690738754696e-16, -6.592580866111145),
                (1.8284454377435813, -12.330607243962843),
            ],
        ),
        (
            [&[1, 6, 5, 4], &[1, 1, 5, 4], &[1, 1, 5, 4]],
            None,
            true,
            [
                (-33.59174726595465, -1.89176451107747),
                (0.6461840258925234, 8.89499067458728),
                (5.204170427930421e-16, -1.2715047818734904),
                (1.8284454377435788, -0.41618109214633203),
            ],
        ),
        (
            small,
            Some(&mask),
            false,
            [
                (-0.4896770287284089, -1.4619573143761597),
                (0.6784581770811666, -0.01954428492946919),
                (-4.440892098500626e-16, -6.010845517064453),
                (1.8284454377435793, -12.006734917396285),
            ],
        ),
    ];
    for (shapes, mask, causal, want) in cases {
        let qkv = [
            init(shapes[0], 1.0, 0.8),
            init(shapes[1], 2.0, 0.9),
            init(shapes[2], 3.0, 1.0),
        ];
        let f = |a: &[Tensor]| a[0].grouped_query_attention(&a[1], &a[2], mask, causal, None, None);
        let (o, g) = value_and_grads(&qkv, f)?;
        let what = format!("{shapes:?} causal {causal} mask {}", mask.is_some());
        close(wsum(&o), want[0], 1e-12, &format!("{what}: out"));
        for (i, name) in ["dq", "dk", "dv"].iter().enumerate() {
            close(wsum(&g[i]), want[i + 1], 1e-12, &format!("{what}: {name}"));
        }
        assert_eq!((g[1].shape(), g[2].shape()), (shapes[1], shapes[2]));
    }
    // bad shapes name the op
    let q = init(&[1, 4, 3, 2], 0.0, 1.0);
    for (k, v) in [
        (init(&[1, 3, 3, 2], 0.0, 1.0), init(&[1, 3, 3, 2], 0.0, 1.0)),
        (init(&[1, 2, 3, 2], 0.0, 1.0), init(&[1, 1, 3, 2], 0.0, 1.0)),
        (init(&[3, 2], 0.0, 1.0), init(&[3, 2], 0.0, 1.0)),
        (init(&[1, 0, 3, 2], 0.0, 1.0), init(&[1, 0, 3, 2], 0.0, 1.0)),
    ] {
        let e = q
            .grouped_query_attention(&k, &v, None, false, None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("grouped_query_attention"), "{e}");
    }
    Ok(())
}

/// Sets `vars[i]` to `init(shape, 10 + i, 0.4)`, as the reference does.
fn set_weights(vars: &[Variable]) -> Result<()> {
    for (i, v) in vars.iter().enumerate() {
        v.assign(&init(&v.shape(), 10.0 + i as f64, 0.4).cast(v.dtype())?)?;
    }
    Ok(())
}

/// Keras's `GroupQueryAttention(head_dim=4, num_query_heads=4,
/// num_key_value_heads=2)` in f64 as `MultiHeadAttention` with 2
/// key/value heads: cross-attention and causal self-attention, the output
/// and the gradients of the inputs and of the 8 weights (Keras's order).
#[test]
fn grouped_attention_layer_matches_keras() -> Result<()> {
    let cross: [Sums; 11] = [
        (-12.341629804310994, -0.34828395280963004),
        (0.00937286868702502, 0.5997636450521513),
        (0.016796598828608525, 0.12290082683207111),
        (-0.07680487602166274, -0.008717079558178178),
        (0.002056461074076247, -0.004062737956305249),
        (-0.7167786655920615, -0.2743414095913334),
        (-1.6696713456276768e-16, -9.023836788374969e-17),
        (1.4150480084242805, -2.762457144305411),
        (-0.20285454644072082, -0.06821240316427672),
        (15.041733348485563, 2.5316271311482614),
        (0.5376729129856692, 0.05295078925604613),
    ];
    let causal: [Sums; 10] = [
        (-12.079932405798022, -0.1294682982857735),
        (-0.21000115496987648, 1.4083619011965718),
        (-0.035601725468218284, 0.0019512511388691863),
        (0.005573544038645704, 0.04278513550654839),
        (0.3039055132907284, -0.766723803237373),
        (1.3660947373317356e-16, 3.5683503902394484e-17),
        (1.7980913368129983, -0.7598169958650813),
        (-0.20285454644071793, -0.06821240316427533),
        (10.743178513347804, 1.6094564040000658),
        (0.5376729129856692, 0.05295078925604613),
    ];
    for is_causal in [false, true] {
        let mha = MultiHeadAttention::builder(4, 4)
            .num_key_value_heads(2)
            .dtype(DType::F64)
            .build(6, &mut Rng::new(0))?;
        assert_eq!(mha.variables()[2].shape(), vec![6, 2, 4]);
        set_weights(&mha.variables())?;
        let query = init(&[2, 5, 6], 1.0, 1.0);
        let value = if is_causal {
            query.clone()
        } else {
            init(&[2, 7, 6], 2.0, 1.0)
        };
        let vars = mha.variables();
        let tape = GradientTape::persistent();
        let mut y = None;
        let loss = tape.record(|| {
            tape.watch(&[query.clone(), value.clone()]);
            let out = mha.call_with(&query, &value, AttentionArgs::new().use_causal_mask(is_causal))?;
            y = Some(out.clone());
            sin_weighted(&out)
        })?;
        let inputs = if is_causal { vec![query] } else { vec![query, value] };
        let mut grads = tape.gradient(&loss, &inputs)?;
        grads.extend(tape.gradient(&loss, &vars)?);
        let want: &[Sums] = if is_causal { &causal } else { &cross };
        close(
            wsum(y.as_ref().unwrap()),
            want[0],
            1e-12,
            &format!("causal {is_causal}: y"),
        );
        for (i, (g, w)) in grads.iter().zip(&want[1..]).enumerate() {
            let g = g.as_ref().expect("a gradient");
            close(wsum(g), *w, 1e-12, &format!("causal {is_causal}: grad {i}"));
        }
        assert_eq!(grads.len(), want.len() - 1);
    }
    Ok(())
}

/// keras_hub's `RotaryEmbedding`, by its formula in f64 (the layer itself
/// computes its angles in f32 and agrees to 5e-8): two layouts, a start
/// index, a wavelength and a scaling factor of their own.
#[test]
fn rotary_embedding_matches_keras_hub() -> Result<()> {
    let rope = RotaryEmbedding::builder().build()?;
    let y = rope.call(&init(&[2, 5, 3, 8], 1.0, 1.0))?;
    close(wsum(&y), (3.8186148996415508, -0.16302363456472208), 1e-12, "axis 1");
    let rope = RotaryEmbedding::builder()
        .sequence_axis(2)
        .max_wavelength(100.0)
        .scaling_factor(2.0)
        .build()?;
    let y = rope.call_at(&init(&[1, 2, 6, 4], 1.0, 1.0), 3)?;
    close(
        wsum(&y),
        (-0.6404055612860797, 0.5489691064708697),
        1e-12,
        "axis 2 from 3",
    );
    // a sequence axis after the features: the same as moving it before
    let x = init(&[2, 4, 3], 0.5, 1.0); // [batch, features, time]
    let moved = RotaryEmbedding::builder()
        .sequence_axis(2)
        .feature_axis(1)
        .build()?
        .call(&x)?;
    let plain = rope_default(&x.permute(&[0, 2, 1])?)?.permute(&[0, 2, 1])?;
    assert_eq!(moved.to_vec::<f64>()?, plain.to_vec::<f64>()?);
    Ok(())
}

fn rope_default(x: &Tensor) -> Result<Tensor> {
    RotaryEmbedding::builder().build()?.call(x)
}

/// A Llama-style block of the layers above: pre-RMSNorm, causal
/// attention with 4 query heads, 2 key/value heads and rotary positions,
/// and a SwiGLU MLP.
struct Block {
    norm1: RMSNorm,
    attn: MultiHeadAttention,
    norm2: RMSNorm,
    gate: Dense,
    up: Dense,
    down: Dense,
}

impl Block {
    fn new(width: usize, dtype: DType, rng: &mut Rng) -> Result<Block> {
        let rope = RotaryEmbedding::builder().build()?;
        let dense = |i: usize, o: usize, rng: &mut Rng| Dense::builder(i, o).use_bias(false).dtype(dtype).build(rng);
        Ok(Block {
            norm1: RMSNorm::builder(width).dtype(dtype).build()?,
            attn: MultiHeadAttention::builder(4, width / 4)
                .num_key_value_heads(2)
                .rotary_embedding(rope)
                .use_bias(false)
                .dtype(dtype)
                .build(width, rng)?,
            norm2: RMSNorm::builder(width).dtype(dtype).build()?,
            gate: dense(width, 2 * width, rng)?,
            up: dense(width, 2 * width, rng)?,
            down: dense(2 * width, width, rng)?,
        })
    }

    fn mlp(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.norm2.call(x)?;
        self.down.call(&self.gate.call(&h)?.silu()?.mul(&self.up.call(&h)?)?)
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.norm1.call(x)?;
        let x = x.add(
            &self
                .attn
                .call_with(&h, &h, AttentionArgs::new().use_causal_mask(true))?,
        )?;
        x.add(&self.mlp(&x)?)
    }

    /// The new positions `x` after those in `cache`.
    fn decode(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let x = x.add(&self.attn.call_cached(&self.norm1.call(x)?, cache)?)?;
        x.add(&self.mlp(&x)?)
    }
}

impl Module for Block {
    fn variables(&self) -> Vec<Variable> {
        let layers: [&dyn Module; 6] = [&self.norm1, &self.attn, &self.norm2, &self.gate, &self.up, &self.down];
        layers.iter().flat_map(|l| l.variables()).collect()
    }
}

/// The block: traced as eager (values and every gradient), decoded with a
/// (grouped, so half-size) cache as the full causal call, positions
/// mattering (a permuted input is not a permuted output), and trained:
/// its loss falls.
#[test]
fn llama_block_traces_decodes_and_trains() -> Result<()> {
    let mut rng = Rng::new(3);
    let block = Arc::new(Block::new(16, DType::F64, &mut rng)?);
    let vars = block.variables();
    assert_eq!(vars.len(), 9);
    let x = rng.normal(&[2, 6, 16], 0.0, 1.0, DType::F64)?;
    let target = rng.normal(&[2, 6, 16], 0.0, 1.0, DType::F64)?;
    let step = |block: &Block, target: &Tensor, x: &Tensor| -> Result<Vec<Tensor>> {
        let vars = block.variables();
        let tape = GradientTape::new();
        let loss = tape.record(|| block.forward(x)?.sub(target)?.square()?.mean_all())?;
        let g = tape.gradient(&loss, &vars)?;
        Ok(std::iter::once(loss).chain(g.into_iter().map(|g| g.unwrap())).collect())
    };
    let eager = step(&block, &target, &x)?;
    let (b, t) = (block.clone(), target.clone());
    let traced = function(move |x: &Tensor| step(&b, &t, x)).call(&x)?;
    for (i, (t, e)) in traced.iter().zip(&eager).enumerate() {
        let (t, e) = (t.to_vec::<f64>()?, e.to_vec::<f64>()?);
        let worst = t
            .iter()
            .zip(&e)
            .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
            .fold(0.0, f64::max);
        assert!(worst < 1e-12, "output {i}: {worst}");
    }
    // decoding: a prompt of 4, then one position at a time
    let full = block.forward(&x)?;
    let mut cache = KvCache::new();
    let mut parts = vec![block.decode(&x.narrow(1, 0, 4)?, &mut cache)?];
    for p in 4..6 {
        parts.push(block.decode(&x.narrow(1, p, 1)?, &mut cache)?);
    }
    assert_eq!(cache.keys().unwrap().shape(), &[2, 2, 6, 4]);
    let stepped = Tensor::concat(&parts.iter().collect::<Vec<_>>(), 1)?;
    let (a, b) = (stepped.to_vec::<f64>()?, full.to_vec::<f64>()?);
    assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() < 1e-12));
    // rotary positions: swapping two positions changes the others' outputs
    let swapped = Tensor::concat(&[&x.narrow(1, 1, 1)?, &x.narrow(1, 0, 1)?, &x.narrow(1, 2, 4)?], 1)?;
    let ys = block.forward(&swapped)?.narrow(1, 5, 1)?.to_vec::<f64>()?;
    let y = full.narrow(1, 5, 1)?.to_vec::<f64>()?;
    assert!(ys.iter().zip(&y).any(|(p, q)| (p - q).abs() > 1e-6));
    // training
    let mut opt = Adam::new(0.01);
    let first = eager[0].item()?;
    for _ in 0..60 {
        let tape = GradientTape::new();
        let loss = tape.record(|| block.forward(&x)?.sub(&target)?.square()?.mean_all())?;
        opt.minimize(&tape, &loss, &vars)?;
    }
    let last = block.forward(&x)?.sub(&target)?.square()?.mean_all()?.item()?;
    assert!(last < 0.5 * first, "{first} -> {last}");
    Ok(())
}

/// `TransformerBlock::builder(8, 4, 12).llama().num_key_value_heads(2)`
/// against keras_hub 0.32's `LlamaTransformerDecoder` (same options,
/// epsilon 1e-5), whose norms, gate and softmax are computed in f32 (its
/// own casts), so it ran in f32 and the sums agree to f32's roundoff:
/// the output and the gradients of the input and of the 9 weights
/// (keras_hub's order, the attention's first).
#[test]
fn llama_transformer_block_matches_keras_hub() -> Result<()> {
    let y_want = (0.602300651371479, -2.135086160436169);
    let grads_want: [Sums; 10] = [
        (9.91089874599129, 38.97261288235896),
        (-0.004035003825606509, -0.0032755423636506666),
        (-0.001971731011508382, -0.0012915465137197748),
        (0.9021849185228348, -0.34114645321082593),
        (2.275950115174055, 0.18169694124523827),
        (-0.3605782203376293, -0.07414881778104793),
        (0.12909465021220967, 0.08339974503076025),
        (0.038226298634981504, -0.020690466657297152),
        (0.5398529110789241, -0.6692624020976334),
        (0.05159360822290182, 0.019964579433761155),
    ];
    for dtype in [DType::F64, DType::F32] {
        let block = TransformerBlock::builder(8, 4, 12)
            .llama()
            .num_key_value_heads(2)
            .dtype(dtype)
            .build(&mut Rng::new(0))?;
        let ours = block.variables();
        // keras_hub's order: q, k, v, output, first norm, intermediate,
        // gate, output dense, second norm
        let keras: Vec<Variable> = [1, 2, 3, 4, 0, 6, 7, 8, 5].iter().map(|&i| ours[i].clone()).collect();
        set_weights(&keras)?;
        let x = init(&[2, 5, 8], 1.0, 1.0).cast(dtype)?;
        let want = Want {
            shape: None,
            y: y_want,
            grads: &grads_want,
        };
        check_against(&format!("{dtype}"), &|x| block.call(x), &x, &keras, &want, 2e-5)?;
    }
    Ok(())
}

/// `TransformerBlock`'s Llama form is the block of parts above (given
/// its weights): the same outputs in f64, whole and decoded with a cache,
/// and the same gradients.
#[test]
fn llama_transformer_block_is_the_block_of_parts() -> Result<()> {
    let mut rng = Rng::new(5);
    let parts = Block::new(16, DType::F64, &mut rng)?;
    let block = TransformerBlock::builder(16, 4, 32)
        .llama()
        .num_key_value_heads(2)
        .layer_norm_epsilon(1e-6)
        .dtype(DType::F64)
        .build(&mut rng)?;
    let (pv, bv) = (parts.variables(), block.variables());
    // the parts' order ends gate, up, down; the block's up, gate, down
    let order = [0, 1, 2, 3, 4, 5, 7, 6, 8];
    assert_eq!(bv.len(), order.len());
    for (p, &b) in pv.iter().zip(&order) {
        bv[b].assign(&p.read())?;
    }
    let x = rng.normal(&[2, 6, 16], 0.0, 1.0, DType::F64)?;
    let same = |a: &Tensor, b: &Tensor, what: &str| {
        let (a, b) = (a.to_vec::<f64>().unwrap(), b.to_vec::<f64>().unwrap());
        assert_eq!(a.len(), b.len(), "{what}");
        assert!(
            a.iter().zip(&b).all(|(p, q)| (p - q).abs() <= 1e-13 * (1.0 + q.abs())),
            "{what}"
        );
    };
    same(&block.call(&x)?, &parts.forward(&x)?, "forward");
    let (mut c1, mut c2) = (KvCache::new(), KvCache::new());
    for (start, len) in [(0, 4), (4, 1), (5, 1)] {
        let xs = x.narrow(1, start, len)?;
        same(
            &block.call_cached(&xs, &mut c1)?,
            &parts.decode(&xs, &mut c2)?,
            "decode",
        );
    }
    let grads = |f: &dyn Fn() -> Result<Tensor>, vars: &[Variable]| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| sin_weighted(&f()?))?;
        Ok(tape.gradient(&loss, vars)?.into_iter().map(|g| g.unwrap()).collect())
    };
    let gb = grads(&|| block.call(&x), &bv)?;
    let gp = grads(&|| parts.forward(&x), &pv)?;
    for (p, &b) in gp.iter().zip(&order) {
        same(&gb[b], p, &format!("gradient of weight {b}"));
    }
    Ok(())
}
