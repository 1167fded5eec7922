//! The public surfaces outside the op library, as entries of the op table:
//! file formats (`.npy` headers and safetensors bytes made from the case,
//! well-formed or not), layer constructors and layers with the case's sizes
//! (huge ones included), `Rng` and mini-batches, optimizers with the case's
//! hyper-parameters, `cond` / `while_loop`, `gradients()`, functions
//! with `None`-dim signatures, and the data-parallel reductions over a fake
//! transport whose peers send what the case says (honest copies, bogus
//! lengths and row indices, NaN, a group of 0 or 2^40 ranks, failures). Each returns `Ok` or `Err`; a panic, abort
//! or a result that contradicts the input (a round trip that changes bits,
//! a permutation that is not one) is a failure.

use gradtape::distributed::{
    allreduce_gradients_with, broadcast_variables, AllreduceOptions, Buffer, BufferMut, Collectives,
    DistributedOptimizer,
};
use gradtape::nn::sampling::{categorical, sample_next};
use gradtape::nn::{
    sine_position_encoding, AttentionArgs, Dense, Embedding, GRUCell, KvCache, LSTMCell, Layer, LayerNorm,
    MultiHeadAttention, PositionalEmbedding, RMSNorm, RotaryEmbedding, TransformerBlock,
};
use gradtape::optim::{Adam, Optimizer, RmsProp, Sgd};
use gradtape::{cond, function, while_loop, DType, Function, FunctionOptions, Result, Rng, Tensor, TensorSpec};
use gradtape::{io, Gradient, IndexedSlices, Variable, WhileOptions};
use std::cell::Cell;

use crate::ops::{Env, OpFn};

/// A scalar standing for "accepted" (the entries that make no tensor).
fn done() -> Result<Tensor> {
    Ok(Tensor::scalar(0.0f32))
}

/// `.npy` descriptors, valid and not.
const DESCRS: [&str; 12] = [
    "<f4", "<f8", "<i8", "|b1", "<c16", ">f8", "", "é", "<f2", "<u4", "<f4'", "<<f4",
];

/// A `.npy` file made from the case: a header of a chosen descriptor,
/// order and shape text (tuples well-formed or not, extra or missing
/// keys), then payload bytes from the operand (too few, exact or extra).
fn npy_bytes(e: &Env) -> Vec<u8> {
    let descr = DESCRS[e.size(0) % DESCRS.len()];
    let dims: Vec<String> = e.k.shape.iter().map(usize::to_string).collect();
    let shape = match e.int(0).rem_euclid(6) {
        0 => format!("({},)", dims.join(", ")),
        1 => format!("({})", dims.join(", ")),
        2 => format!("(({}),)", dims.join(", ")),
        3 => "()".to_string(),
        4 => format!("({}, -1)", dims.join(", ")),
        _ => format!("[{}]", dims.join(", ")),
    };
    let order = if e.flag(0) { "False" } else { "True" };
    let header = match e.int(1).rem_euclid(5) {
        0 => format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}"),
        1 => format!("{{'descr': '{descr}', 'shape': {shape}}}"),
        2 => format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, 'x': 'shape': (1, 2)}}"),
        3 => format!("{{'shape': {shape}, 'fortran_order': {order}, 'descr': '{descr}'}}"),
        _ => format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}"),
    };
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    let len = header.len() as u16 + 1;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.push(b'\n');
    let payload = if e.a.numel() <= 64 {
        e.a.try_to_vec_f64().unwrap_or_default()
    } else {
        Vec::new()
    };
    let n = payload.len() * 8 + e.size(1) % 9;
    out.extend((0..n).map(|i| payload.get(i / 8).map_or(0x3f, |v| v.to_le_bytes()[i % 8])));
    out
}

/// safetensors bytes made from the case: an 8-byte header length (true,
/// short, long or huge), a JSON header naming one tensor with a dtype,
/// shape and offsets from the case, then data.
fn safetensors_bytes(e: &Env) -> Vec<u8> {
    let dtype = ["F32", "F64", "I64", "BOOL", "F16", "X9", ""][e.size(0) % 7];
    let shape: Vec<String> = e.k.shape.iter().map(usize::to_string).collect();
    let (lo, hi) = (e.size(1), e.size(2));
    let name = if e.flag(1) { "__metadata__" } else { "w" };
    let json = format!(
        "{{\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{lo},{hi}]}}}}",
        shape.join(",")
    );
    let len = match e.int(0).rem_euclid(4) {
        0 => json.len() as u64,
        1 => json.len() as u64 / 2,
        2 => json.len() as u64 + 7,
        _ => u64::MAX - e.int(1).unsigned_abs(),
    };
    let mut out = len.to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out.extend((0..(hi.min(256))).map(|i| i as u8));
    out
}

fn npy_read(e: &Env) -> Result<Tensor> {
    let t = io::npy_from_bytes(&npy_bytes(e))?;
    // an accepted file's tensor has the elements its header promises
    let _ = t.contiguous()?;
    Ok(t)
}

fn npy_round_trip(e: &Env) -> Result<Tensor> {
    let bytes = io::npy_to_bytes(e.a)?;
    let back = io::npy_from_bytes(&bytes)?;
    assert_eq!(back.shape(), e.a.shape(), "npy round trip: shape");
    assert_eq!(back.dtype(), e.a.dtype(), "npy round trip: dtype");
    if e.a.numel() <= 64 && !e.a.dtype().is_complex() {
        let (x, y) = (e.a.try_to_vec_f64()?, back.try_to_vec_f64()?);
        assert!(
            x.iter()
                .zip(&y)
                .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan())),
            "npy round trip changed values: {x:?} vs {y:?}"
        );
    }
    Ok(back)
}

fn safetensors_read(e: &Env) -> Result<Tensor> {
    let w = Variable::new(e.b.clone());
    io::safetensors_from_bytes(&safetensors_bytes(e), std::slice::from_ref(&w))?;
    Ok(w.read())
}

fn safetensors_round_trip(e: &Env) -> Result<Tensor> {
    let name = if e.flag(1) { "__metadata__" } else { "layer/w" };
    let w = Variable::builder(e.a.clone()).name(name).build();
    let bytes = io::safetensors_to_bytes(std::slice::from_ref(&w))?;
    let v = Variable::builder(e.a.zeros_like()).name(name).build();
    io::safetensors_from_bytes(&bytes, std::slice::from_ref(&v))?;
    assert_eq!(v.read().shape(), e.a.shape(), "safetensors round trip: shape");
    Ok(v.read())
}

fn rng(e: &Env) -> Rng {
    Rng::new(e.int(0) as u64)
}

fn layers(e: &Env) -> Result<Tensor> {
    let mut r = rng(e);
    let (i, u) = (e.size(0), e.size(1));
    let y = match e.int(1).rem_euclid(9) {
        0 => Dense::new(i, u, &mut r)?.forward(e.a, e.flag(0))?,
        1 => LayerNorm::new(i, e.k.dtype)?.forward(e.a, e.flag(0))?,
        2 => {
            let emb = Embedding::new(i, u, &mut r)?;
            emb.forward(e.a, e.flag(0))?
        }
        3 => {
            let cell = LSTMCell::with_dtype(i, u, e.k.dtype, &mut r)?;
            let s = cell.zero_state(e.size(2))?;
            cell.step(e.a, &s)?.h
        }
        4 => {
            let cell = GRUCell::with_dtype(i, u, e.k.dtype, &mut r)?;
            let h = cell.zero_state(e.size(2))?;
            cell.step(e.a, &h)?
        }
        // the sequence layers, on whatever the case's operand is
        6 => gradtape::nn::LSTM::builder(i, u)
            .return_sequences(e.flag(0))
            .go_backwards(e.flag(1))
            .dtype(e.k.dtype)
            .build(&mut r)?
            .forward(e.a, false)?,
        7 => {
            gradtape::nn::GRU::builder(i, u)
                .return_sequences(e.flag(0))
                .dtype(e.k.dtype)
                .build(&mut r)?
                .forward_from(e.a, e.flag(2).then(|| e.b.clone()))?
                .0
        }
        8 => {
            let seq = |r: &mut gradtape::Rng| {
                gradtape::nn::LSTM::builder(i, u)
                    .return_sequences(e.flag(0))
                    .dtype(e.k.dtype)
                    .build(r)
            };
            let merge = [
                gradtape::nn::Merge::Concat,
                gradtape::nn::Merge::Sum,
                gradtape::nn::Merge::Mul,
                gradtape::nn::Merge::Ave,
            ][e.size(3) % 4];
            gradtape::nn::Bidirectional::new(seq(&mut r)?, seq(&mut r)?, merge).forward(e.a, false)?
        }
        _ => gradtape::nn::BatchNorm::new(i, e.k.dtype)?.forward(e.a, e.flag(0))?,
    };
    Ok(y)
}

/// The transformer layers and helpers (issue 28): attention with a mask
/// and a cache, a block, positions, sampling; sizes and operands from the
/// case (huge, zero, mismatched), so most calls are argument errors.
fn transformer_layers(e: &Env) -> Result<Tensor> {
    let mut r = rng(e);
    let (heads, dim, feats) = (e.size(0), e.size(1), e.size(2));
    let dt = e.k.dtype;
    match e.int(1).rem_euclid(10) {
        7 => {
            // grouped, rotary attention (a Llama layer), and decoding
            let rope = RotaryEmbedding::builder()
                .max_wavelength(e.f(1))
                .scaling_factor(e.f(2))
                .build()?;
            let m = MultiHeadAttention::builder(heads, dim)
                .num_key_value_heads(e.size(3))
                .rotary_embedding(rope)
                .dtype(dt)
                .build(feats, &mut r)?;
            if e.flag(1) {
                let mut cache = KvCache::new();
                m.call_cached(e.a, &mut cache)?;
                m.call_cached(e.b, &mut cache)
            } else {
                m.call_with(e.a, e.b, AttentionArgs::new().use_causal_mask(e.flag(0)))
            }
        }
        8 => {
            let rope = RotaryEmbedding::builder()
                .max_wavelength(e.f(0))
                .sequence_axis(e.int(2) as isize)
                .feature_axis(e.int(3) as isize)
                .build()?;
            rope.call_at(e.a, e.size(4))
        }
        9 => RMSNorm::builder(feats)
            .epsilon(e.f(0))
            .dtype(dt)
            .build()?
            .forward(e.a, e.flag(0)),
        0 => {
            let m = MultiHeadAttention::builder(heads, dim)
                .dropout(e.f(0))
                .dtype(dt)
                .build(feats, &mut r)?;
            let args = AttentionArgs::new()
                .attention_mask(e.c)
                .use_causal_mask(e.flag(0))
                .training(e.flag(1));
            m.call_with(e.a, e.b, args)
        }
        1 => {
            let m = MultiHeadAttention::builder(heads, dim).dtype(dt).build(feats, &mut r)?;
            let args = AttentionArgs::new().key(e.c).use_causal_mask(e.flag(0));
            Ok(m.call_with_scores(e.a, e.b, args)?.1)
        }
        2 => {
            let m = MultiHeadAttention::builder(heads, dim).dtype(dt).build(feats, &mut r)?;
            let mut cache = KvCache::new();
            m.call_cached(e.a, &mut cache)?;
            m.call_cached(e.b, &mut cache)
        }
        3 => {
            let b = TransformerBlock::builder(feats, heads, e.size(3))
                .causal(e.flag(0))
                .dropout(e.f(0))
                .dtype(dt)
                .build(&mut r)?;
            b.forward(e.a, e.flag(1))
        }
        4 => {
            let p = PositionalEmbedding::builder(e.size(3), feats).dtype(dt).build(&mut r)?;
            p.forward_from(e.a, e.size(4))
        }
        5 => sine_position_encoding(e.size(3), feats, e.size(4), e.f(0), dt),
        _ => {
            if e.flag(0) {
                categorical(e.a, e.size(3), &mut r)
            } else {
                sample_next(e.a, e.f(0), e.flag(1).then(|| e.size(3)), &mut r)
            }
        }
    }
}

/// The rest of `nn` and `optim` (the conv and pooling layers, `Flatten`,
/// `Dropout`, `Sequential`, initialisers, losses, metrics, clipping,
/// schedules), with the case's sizes and operands.
fn nn_more(e: &Env) -> Result<Tensor> {
    use gradtape::nn::{losses, metrics, Conv2D, Conv2DTranspose, Dropout, Flatten, Initializer, Pool2D, PoolKind};
    use gradtape::optim::{
        clip_by_global_norm, clip_by_norm, CosineDecay, ExponentialDecay, LearningRateSchedule, Warmup,
    };
    let mut r = rng(e);
    let (i, f) = (e.size(0), e.size(1));
    let kernel = [e.size(2), e.size(3)];
    let dt = e.k.dtype;
    let pad = if e.flag(0) {
        gradtape::Padding::Same
    } else {
        gradtape::Padding::Valid
    };
    match e.int(1).rem_euclid(11) {
        0 => Conv2D::builder(i, f, kernel)
            .strides(e.pair(2))
            .padding(pad)
            .dilations(e.pair(4))
            .build(&mut r)?
            .forward(e.a, e.flag(1)),
        1 => Conv2DTranspose::builder(i, f, kernel)
            .strides(e.pair(2))
            .padding(pad)
            .build(&mut r)?
            .forward(e.a, e.flag(1)),
        2 => {
            let kind = if e.flag(1) { PoolKind::Max } else { PoolKind::Avg };
            Pool2D::new(kind, e.pair(2), e.pair(4), pad).forward(e.a, false)
        }
        3 => Flatten::new().forward(e.a, false),
        4 => Dropout::new(e.f(0), &mut r)?.forward(e.a, e.flag(1)),
        5 => {
            let init = match e.int(2).rem_euclid(6) {
                0 => Initializer::Constant(e.f(0)),
                1 => Initializer::RandomUniform { lo: e.f(0), hi: e.f(1) },
                2 => Initializer::TruncatedNormal {
                    mean: e.f(0),
                    std: e.f(1),
                },
                3 => Initializer::Orthogonal { gain: e.f(0) },
                4 => Initializer::HeNormal,
                _ => Initializer::GlorotUniform,
            };
            init.init(&e.k.shape, dt, &mut r)
        }
        6 => {
            let (ls, f) = (e.f(0), e.flag(1));
            let loss = match e.int(2).rem_euclid(17) {
                0 => losses::Loss::MeanSquaredError,
                1 => losses::Loss::Huber { delta: e.f(0) },
                2 => losses::Loss::BinaryCrossentropy {
                    from_logits: f,
                    label_smoothing: ls,
                },
                3 => losses::Loss::CategoricalCrossentropy {
                    from_logits: f,
                    label_smoothing: ls,
                },
                4 => losses::Loss::SparseCategoricalCrossentropy { from_logits: f },
                5 => losses::Loss::MeanAbsolutePercentageError,
                6 => losses::Loss::MeanSquaredLogarithmicError,
                7 => losses::Loss::LogCosh,
                8 => losses::Loss::CosineSimilarity {
                    axis: e.int(4) as isize,
                },
                9 => losses::Loss::Poisson,
                10 => losses::Loss::KLDivergence,
                11 => losses::Loss::Hinge,
                12 => losses::Loss::SquaredHinge,
                13 => losses::Loss::CategoricalHinge,
                14 => losses::Loss::BinaryFocalCrossentropy {
                    apply_class_balancing: e.flag(2),
                    alpha: e.f(1),
                    gamma: e.f(0),
                    from_logits: f,
                    label_smoothing: ls,
                },
                15 => losses::Loss::CategoricalFocalCrossentropy {
                    alpha: e.f(1),
                    gamma: e.f(0),
                    from_logits: f,
                    label_smoothing: ls,
                },
                _ => losses::Loss::MeanAbsoluteError,
            };
            let red = match e.int(3).rem_euclid(4) {
                0 => losses::Reduction::None,
                1 => losses::Reduction::Sum,
                2 => losses::Reduction::MeanWithSampleWeight,
                _ => losses::Reduction::SumOverBatchSize,
            };
            // sample weights: the third operand, whatever its shape
            let weights = e.flag(2).then_some(e.c);
            loss.compute_weighted(e.b, e.a, weights, red)
        }
        7 => {
            let v = match e.int(2).rem_euclid(3) {
                0 => metrics::sparse_categorical_accuracy(e.b, e.a)?,
                1 => metrics::categorical_accuracy(e.b, e.a)?,
                _ => metrics::binary_accuracy(e.b, e.a, e.f(0))?,
            };
            Tensor::scalar(v).cast(DType::F32)
        }
        8 => {
            let axes = e.axes();
            clip_by_norm(e.a, e.f(0), e.flag(1).then_some(&axes[..]))
        }
        9 => {
            let (clipped, norm) = clip_by_global_norm(&[Some(e.a.clone()), None, Some(e.b.clone())], e.f(0))?;
            assert_eq!(clipped.len(), 3, "clip_by_global_norm lost an entry");
            Ok(norm)
        }
        _ => {
            let lr = match e.int(2).rem_euclid(3) {
                0 => ExponentialDecay::new(e.f(0), e.size(2) as u64, e.f(1))
                    .staircase(e.flag(1))
                    .lr(e.int(3) as u64),
                1 => CosineDecay::new(e.f(0), e.size(2) as u64)
                    .alpha(e.f(1))
                    .warmup(e.f(2), e.size(3) as u64)
                    .lr(e.int(3) as u64),
                _ => Warmup::new(
                    ExponentialDecay::new(e.f(0), e.size(2) as u64, e.f(1)),
                    e.f(2),
                    e.size(3) as u64,
                )
                .lr(e.int(3) as u64),
            };
            Tensor::scalar(lr).cast(DType::F32)
        }
    }
}

/// The functional transformations on a small function of the operands:
/// `hessian`, `hvp`, `jvp`, `grad`, `vmap` (any axes), `make_vjp` (any
/// cotangents), `recompute_grad`, `custom_gradient` with a backward that
/// returns too few or misshapen gradients, and the two checkers with any
/// tolerances.
fn transforms(e: &Env) -> Result<Tensor> {
    use gradtape::{check_gradients, check_traced, custom_gradient, grad, hessian, hvp, jvp, make_vjp, recompute_grad};
    use gradtape::{vmap, CheckOptions, TracedCheckOptions};
    let f = |x: &Tensor| x.sin()?.mul(x)?.sum_all();
    let g = |xs: &[Tensor]| xs[0].mul(&xs[1])?.tanh()?.sum_all();
    let (a, b) = (e.a.clone(), e.b.clone());
    match e.int(1).rem_euclid(10) {
        0 => hessian(f, e.a),
        1 => hvp(f, e.a, e.b),
        2 => Ok(jvp(|p| f(&p[0]), std::slice::from_ref(e.a), std::slice::from_ref(e.b))?.1),
        3 => first_some(grad(g).call(&[a, b])?),
        4 => {
            let axis = |i: usize| (e.int(i) >= 0).then(|| e.int(i) as usize);
            let v = vmap(
                |xs: &[Tensor]| Ok(vec![xs[0].sin()?.mul(&xs[1])?]),
                &[axis(2), axis(3)],
                &[axis(4)],
            );
            Ok(v.call(&[a, b])?.remove(0))
        }
        5 => {
            let (y, vjp) = make_vjp(|p: &[Tensor]| f(&p[0]), std::slice::from_ref(e.a))?;
            let _ = y;
            first_some(vjp.call(std::slice::from_ref(e.c))?)
        }
        6 => Ok(recompute_grad(|xs: &[Tensor]| Ok(vec![xs[0].exp()?.mul(&xs[1])?]))
            .call(&[a, b])?
            .remove(0)),
        7 => {
            let tape = gradtape::GradientTape::new();
            let bad = e.flag(1);
            let c = e.c.clone();
            let y = tape.record(|| {
                tape.watch(e.a);
                let ys = custom_gradient("fuzz_custom", std::slice::from_ref(e.a), |xs| {
                    let y = xs[0].square()?;
                    let back = move |dy: &[Tensor]| {
                        Ok(if bad {
                            vec![Some(c.clone()), None]
                        } else {
                            vec![Some(dy[0].mul(&c)?)]
                        })
                    };
                    Ok((vec![y], back))
                })?;
                Ok(ys[0].clone())
            })?;
            Ok(tape.gradient(&y, e.a)?.unwrap_or_else(|| Tensor::scalar(0.0f32)))
        }
        8 => {
            let opts = CheckOptions {
                eps: e.f(0),
                atol: e.f(1),
                rtol: e.f(2),
                second_order: e.flag(1),
            };
            let r = check_gradients(|p: &[Tensor]| f(&p[0]), std::slice::from_ref(e.a), &opts)?;
            Tensor::scalar(r.compared as f64).cast(DType::F32)
        }
        _ => {
            let opts = TracedCheckOptions {
                rtol: e.f(0),
                second_order: e.flag(1),
            };
            let r = check_traced(g, &[a, b], &opts)?;
            Tensor::scalar(r.values as f64).cast(DType::F32)
        }
    }
}

/// The first gradient of a list (a scalar 0 when none).
fn first_some(g: Vec<Option<Tensor>>) -> Result<Tensor> {
    Ok(g.into_iter().flatten().next().unwrap_or_else(|| Tensor::scalar(0.0f32)))
}

fn random(e: &Env) -> Result<Tensor> {
    let mut r = rng(e);
    match e.int(1).rem_euclid(5) {
        0 => r.normal(&e.k.shape, e.f(0), e.f(1), e.k.dtype),
        1 => r.uniform(&e.k.shape, e.f(0), e.f(1), e.k.dtype),
        2 => r.truncated_normal(&e.k.shape, e.f(0), e.f(1), e.k.dtype),
        3 => {
            let n = e.size(0);
            let p = r.permutation(n)?;
            let mut seen = vec![false; n];
            for &i in &p {
                assert!(i < n && !seen[i], "permutation({n}) is not one: {p:?}");
                seen[i] = true;
            }
            done()
        }
        _ => {
            let (n, b) = (e.size(0), e.size(1));
            let parts = gradtape::random::batches(n, b, e.flag(0).then_some(&mut r))?;
            let total: usize = parts.iter().map(Vec::len).sum();
            assert_eq!(total, n, "batches({n}, {b}) lose rows");
            done()
        }
    }
}

fn optimizer(e: &Env) -> Result<Tensor> {
    let w = Variable::new(e.a.clone());
    let lr = e.f(0);
    let mut opt: Box<dyn Optimizer> = match e.int(1).rem_euclid(7) {
        0 => Box::new(Sgd::new(lr)),
        1 => Box::new(Adam::new(lr)),
        2 => Box::new(gradtape::optim::Adamax::new(lr)),
        3 => Box::new(gradtape::optim::Nadam::new(lr)),
        4 => Box::new(gradtape::optim::Adadelta::new(lr)),
        5 => Box::new(gradtape::optim::Lion::new(lr).weight_decay(e.f(1))),
        _ => Box::new(RmsProp::new(lr)),
    };
    opt.apply(vec![(Some(e.b.clone().into()), w.clone())])?;
    let v = w.read();
    assert_eq!(v.shape(), e.a.shape(), "an update changed the variable's shape");
    Ok(v)
}

fn control(e: &Env) -> Result<Tensor> {
    let pred = e.c.clone();
    let traced = e.flag(2);
    let body = move |(a, b): &(Tensor, Tensor)| -> Result<Tensor> {
        if uses_cond(b) {
            cond(&pred, || a.mul(b), || a.sub(b))
        } else {
            let n = Tensor::scalar(3i64);
            let out = while_loop(
                |s: &(Tensor, Tensor)| s.0.lt(&n),
                |s: &(Tensor, Tensor)| Ok((s.0.add(&Tensor::scalar(1i64))?, s.1.mul(b)?)),
                (Tensor::scalar(0i64), a.clone()),
                WhileOptions::default(),
            )?;
            Ok(out.1)
        }
    };
    let args = (e.a.clone(), e.b.clone());
    if traced {
        function(body).call(&args)
    } else {
        body(&args)
    }
}

/// Which control-flow form [`control`] takes: by the operand's rank.
fn uses_cond(b: &Tensor) -> bool {
    b.rank().is_multiple_of(2)
}

fn traced_gradients(e: &Env) -> Result<Tensor> {
    let f = function(|(a, b): &(Tensor, Tensor)| {
        let y = a.mul(b)?.sum_all()?;
        let g = gradtape::gradients(&[y], a, gradtape::GradientsOptions::default())?;
        // (the checked form: `zeros_like` panics where memory runs out)
        match g {
            Some(g) => Ok(g),
            None => a.try_zeros_like(),
        }
    });
    f.call(&(e.a.clone(), e.b.clone()))
}

fn signature(e: &Env) -> Result<Tensor> {
    let spec: Vec<Option<usize>> =
        e.k.shape
            .iter()
            .enumerate()
            .map(|(i, &d)| (!e.k.flags[i % 3]).then_some(d))
            .collect();
    let opts = FunctionOptions {
        input_signature: Some(vec![TensorSpec::new(e.k.dtype, &spec)]),
        max_traces: Some(2),
        ..Default::default()
    };
    let f = Function::with_options(|x: &Tensor| x.mul(x)?.mean_all(), opts);
    let y = f.call(e.a)?;
    // a fitting call gives the eager value
    if e.a.numel() <= 64 && e.a.dtype() == DType::F64 {
        let want = e.a.mul(e.a)?.mean_all()?;
        let (p, q) = (y.to_scalar::<f64>()?, want.to_scalar::<f64>()?);
        assert!(
            p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()),
            "{p} vs eager {q}"
        );
    }
    Ok(y)
}

/// A transport whose peers do what the case says: `ranks` of them (maybe
/// 0 or huge), this process at `rank` (maybe outside), and at call number
/// `lie_at` every other rank's words (or this rank's sum) become `lie`;
/// a call may fail (`fail_at`).
struct FakePeers {
    ranks: usize,
    rank: usize,
    lie_at: usize,
    lie: i64,
    fail_at: usize,
    calls: Cell<usize>,
}

impl FakePeers {
    fn from_case(e: &Env) -> FakePeers {
        let ranks = match e.int(2).rem_euclid(4) {
            0 => 1 + e.size(0) % 4,
            1 => e.size(0),
            _ => 2,
        };
        let rank = if e.flag(1) { e.size(1) } else { 0 };
        FakePeers {
            ranks,
            rank,
            lie_at: e.int(3).rem_euclid(6) as usize,
            lie: e.int(4),
            fail_at: if e.flag(2) {
                e.int(5).rem_euclid(6) as usize
            } else {
                usize::MAX
            },
            calls: Cell::new(0),
        }
    }

    /// The call's number, or the transport's failure.
    fn call(&self) -> Result<usize> {
        let n = self.calls.get();
        self.calls.set(n + 1);
        if n == self.fail_at {
            return Err(gradtape::Error::InvalidArgument {
                op: "FakePeers",
                msg: "the link dropped".into(),
            });
        }
        Ok(n)
    }
}

/// Fills `r` with `lie` (as each type takes it).
fn fill(r: BufferMut<'_>, lie: i64) {
    match r {
        BufferMut::F32(r) => r.fill(lie as f32),
        BufferMut::F64(r) => r.fill(f64::from_bits(lie as u64)),
        BufferMut::I32(r) => r.fill(lie as i32),
        BufferMut::I64(r) => r.fill(lie),
    }
}

impl Collectives for FakePeers {
    fn this_rank(&self) -> usize {
        self.rank
    }

    fn num_ranks(&self) -> usize {
        self.ranks
    }

    fn all_reduce_sum(&self, buf: BufferMut<'_>) -> Result<()> {
        if self.call()? == self.lie_at {
            fill(buf, self.lie);
        }
        Ok(())
    }

    fn all_gather(&self, send: Buffer<'_>, counts: &[usize], recv: BufferMut<'_>) -> Result<()> {
        let call = self.call()?;
        // the library must ask for what it says: one count per rank, a
        // receive buffer of their sum
        assert_eq!(counts.len(), self.ranks, "all_gather: one count per rank");
        assert_eq!(
            recv.len(),
            counts.iter().sum::<usize>(),
            "all_gather: recv holds the counts' sum"
        );
        let lie = call == self.lie_at;
        macro_rules! gather {
            ($s:expr, $r:expr, $v:expr) => {{
                let n = $s.len().min($r.len());
                $r[..n].copy_from_slice(&$s[..n]);
                for chunk in $r[n..].chunks_mut($s.len().max(1)) {
                    if lie {
                        chunk.fill($v);
                    } else {
                        chunk.copy_from_slice(&$s[..chunk.len()]);
                    }
                }
            }};
        }
        match (send, recv) {
            (Buffer::F32(s), BufferMut::F32(r)) => gather!(s, r, self.lie as f32),
            (Buffer::F64(s), BufferMut::F64(r)) => gather!(s, r, f64::from_bits(self.lie as u64)),
            (Buffer::I32(s), BufferMut::I32(r)) => gather!(s, r, self.lie as i32),
            (Buffer::I64(s), BufferMut::I64(r)) => gather!(s, r, self.lie),
            _ => {
                return Err(gradtape::Error::InvalidArgument {
                    op: "FakePeers",
                    msg: "buffers of two types".into(),
                })
            }
        }
        Ok(())
    }

    fn broadcast(&self, buf: BufferMut<'_>, _root: usize) -> Result<()> {
        if self.call()? == self.lie_at {
            fill(buf, self.lie);
        }
        Ok(())
    }
}

/// Data-parallel reductions, broadcasts and a distributed optimizer step
/// over [`FakePeers`], with a dense gradient (`a`) and, when `b` is an
/// integer vector, sparse rows of `a` at `b`'s indices.
fn distributed(e: &Env) -> Result<Tensor> {
    let peers = FakePeers::from_case(e);
    let dense = Gradient::Dense(e.a.clone());
    let sparse = |n: usize| -> Result<Gradient> {
        let mut dense_shape = e.a.shape().to_vec();
        if let Some(d) = dense_shape.first_mut() {
            *d = n;
        }
        Ok(Gradient::Sparse(IndexedSlices::new(
            e.a.clone(),
            e.b.clone(),
            &dense_shape,
        )?))
    };
    match e.int(1).rem_euclid(3) {
        0 => {
            let mut grads = vec![Some(dense)];
            if e.b.dtype().is_int() {
                grads.push(Some(sparse(e.size(2))?));
            }
            let opts = AllreduceOptions {
                average: e.flag(0),
                sparse_as_dense: e.k.flags[0] && e.k.flags[1],
            };
            let (out, _) = allreduce_gradients_with(&peers, &grads, &opts)?;
            assert_eq!(out.len(), grads.len(), "allreduce_gradients: one result per gradient");
            match &out[0] {
                Some(g) => g.to_dense(),
                None => done(),
            }
        }
        1 => {
            let v = Variable::new(e.a.clone());
            broadcast_variables(&peers, std::slice::from_ref(&v), e.size(3))?;
            let y = v.read();
            assert_eq!(y.shape(), e.a.shape(), "a broadcast changed the variable's shape");
            Ok(y)
        }
        _ => {
            let v = Variable::new(e.a.clone());
            let mut opt = DistributedOptimizer::new(Sgd::new(e.f(0)), peers);
            opt.apply(vec![(Some(e.b.clone().into()), v.clone())])?;
            Ok(v.read())
        }
    }
}

/// The surfaces, as op-table entries.
pub static SURFACES: &[(&str, OpFn)] = &[
    ("npy_read", npy_read),
    ("npy_round_trip", npy_round_trip),
    ("safetensors_read", safetensors_read),
    ("safetensors_round_trip", safetensors_round_trip),
    ("layers", layers),
    ("transformer_layers", transformer_layers),
    ("nn_more", nn_more),
    ("transforms", transforms),
    ("random", random),
    ("optimizer", optimizer),
    ("control", control),
    ("traced_gradients", traced_gradients),
    ("signature", signature),
    ("distributed", distributed),
];
