//! Layers, initialisers, losses, metrics, schedules and the seeded
//! generator. Reference values are Keras 3.15.1's (TensorFlow 2.21 backend,
//! float64), printed by `tests/reference/layers.py`; every weight and input
//! there and here is `fill(shape, k)`.

use gradtape::nn::losses::{Loss, Reduction};
use gradtape::nn::{
    self, metrics, Activation, BatchNorm, Conv2D, Conv2DTranspose, Dense, Dropout, Embedding, GRUCell, Initializer,
    LSTMCell, LSTMState, Layer, LayerNorm, Module, Sequential, TransformerBlock,
};
use gradtape::optim::{Adam, CosineDecay, ExponentialDecay, LearningRateSchedule, Optimizer, Sgd};
use gradtape::{DType, GradientTape, Padding, Result, Rng, Tensor, Variable};

/// `0.5 sin(0.7 i + k)` over the row-major index `i`.
fn fill(shape: &[usize], k: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| 0.5 * (0.7 * i as f64 + k).sin()).collect();
    Tensor::from_vec(v, shape).unwrap()
}

fn assert_close(name: &str, got: &Tensor, want: &[f64], rtol: f64) {
    let got = got.to_vec_f64();
    assert_eq!(got.len(), want.len(), "{name}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= rtol * w.abs().max(1.0),
            "{name}[{i}]: got {g}, Keras {w}"
        );
    }
}

#[path = "../reference/keras_layers.rs"]
mod keras;
use keras::*;

#[test]
fn a_generator_advances_so_layers_get_different_weights() -> Result<()> {
    let mut rng = Rng::new(7);
    let a = Dense::new(4, 4, &mut rng)?;
    let b = Dense::new(4, 4, &mut rng)?;
    assert_ne!(a.kernel().read().to_vec::<f32>()?, b.kernel().read().to_vec::<f32>()?);
    // reproducible from the seed
    let mut again = Rng::new(7);
    let a2 = Dense::new(4, 4, &mut again)?;
    assert_eq!(a.kernel().read().to_vec::<f32>()?, a2.kernel().read().to_vec::<f32>()?);
    // permutations are permutations, and differ between draws
    let (p, q) = (rng.permutation(50)?, rng.permutation(50)?);
    assert_ne!(p, q);
    let mut s = p.clone();
    s.sort();
    assert_eq!(s, (0..50).collect::<Vec<_>>());
    // shuffled rows keep their contents
    let t = Tensor::from_vec((0..12).map(|i| i as f32).collect::<Vec<_>>(), &[6, 2])?;
    let sh = rng.shuffle_rows(&t)?.to_vec::<f32>()?;
    let mut rows: Vec<(i64, i64)> = sh.chunks(2).map(|c| (c[0] as i64, c[1] as i64)).collect();
    assert!(rows.iter().all(|(a, b)| b - a == 1));
    rows.sort();
    assert_eq!(rows, (0..6).map(|i| (2 * i, 2 * i + 1)).collect::<Vec<_>>());
    Ok(())
}

fn mean_std(t: &Tensor) -> (f64, f64) {
    let v = t.to_vec_f64();
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64;
    (m, var.sqrt())
}

#[test]
fn initialisers_have_keras_limits_and_variances() -> Result<()> {
    let mut rng = Rng::new(1);
    let shape = [200, 300];
    // uniform: limit sqrt(3 scale / n), so std limit / sqrt(3)
    for (init, var) in [
        (Initializer::GlorotUniform, 2.0 / 500.0),
        (Initializer::HeUniform, 2.0 / 200.0),
        (Initializer::LecunUniform, 1.0 / 200.0),
        (Initializer::GlorotNormal, 2.0 / 500.0),
        (Initializer::HeNormal, 2.0 / 200.0),
        (Initializer::LecunNormal, 1.0 / 200.0),
    ] {
        let w = init.init(&shape, DType::F64, &mut rng)?;
        let (m, s) = mean_std(&w);
        let want = f64::sqrt(var);
        assert!(
            m.abs() < 0.02 * want && (s - want).abs() < 0.02 * want,
            "{init:?}: mean {m}, std {s}, want {want}"
        );
        let max = w.to_vec_f64().iter().fold(0.0f64, |a, &b| a.max(b.abs()));
        let bound = match init {
            // uniform within the limit; truncated normal within 2 std of the untruncated one
            Initializer::GlorotUniform | Initializer::HeUniform | Initializer::LecunUniform => (3.0 * var).sqrt(),
            _ => 2.0 * want / 0.879_625_661_034_239_8,
        };
        assert!(max <= bound && max > 0.95 * bound, "{init:?}: max {max}, bound {bound}");
    }
    // conv kernels: fans multiply by the receptive field
    let k = Initializer::HeUniform.init(&[3, 3, 16, 32], DType::F32, &mut rng)?;
    let limit = (6.0f64 / (9.0 * 16.0)).sqrt() as f32;
    assert!(k.to_vec::<f32>()?.iter().all(|v| v.abs() <= limit));
    assert_eq!(
        Initializer::Constant(2.5)
            .init(&[2], DType::F32, &mut rng)?
            .to_vec::<f32>()?,
        vec![2.5, 2.5]
    );
    assert!(Initializer::Zeros.init(&[2], DType::I32, &mut rng).is_err());
    Ok(())
}

#[test]
fn orthogonal_matrices_are_orthogonal() -> Result<()> {
    let mut rng = Rng::new(3);
    for shape in [[6usize, 4], [4, 6], [5, 5]] {
        let q = Initializer::Orthogonal { gain: 2.0 }.init(&shape, DType::F64, &mut rng)?;
        // the smaller Gram matrix is gain² I
        let g = if shape[0] >= shape[1] {
            q.transpose()?.matmul(&q)?
        } else {
            q.matmul(&q.transpose()?)?
        };
        let n = shape[0].min(shape[1]);
        let want: Vec<f64> = (0..n * n).map(|i| if i / n == i % n { 4.0 } else { 0.0 }).collect();
        assert_close("orthogonal", &g, &want, 1e-12);
    }
    assert!(Initializer::Orthogonal { gain: 1.0 }
        .init(&[4], DType::F64, &mut rng)
        .is_err());
    Ok(())
}

#[test]
fn dense_computes_activation_of_affine_map_and_trains_on_the_tape() -> Result<()> {
    let d = Dense::from_weights("d", fill(&[3, 2], 1.0), Some(fill(&[2], 2.0)), Activation::Tanh)?;
    let x = fill(&[4, 3], 0.0);
    let want = x
        .matmul(&fill(&[3, 2], 1.0))?
        .add(&fill(&[2], 2.0))?
        .tanh()?
        .to_vec::<f64>()?;
    assert_close("dense", &d.forward(&x, false)?, &want, 1e-15);
    // rank-3 inputs map the last axis
    assert_eq!(d.forward(&fill(&[2, 5, 3], 0.0), false)?.shape(), &[2, 5, 2]);
    // gradients reach both variables through the tape (watched on read)
    let tape = GradientTape::new();
    let y = tape.record(|| d.forward(&x, true)?.sum_all())?;
    let g = tape.gradient(&y, &d.variables())?;
    assert!(g.iter().all(Option::is_some));
    // bad inputs are errors naming the layer
    let err = d.forward(&fill(&[4, 5], 0.0), false).unwrap_err();
    assert!(err.to_string().contains("Dense"), "{err}");
    assert!(d.forward(&Tensor::zeros(&[4, 3], DType::F32), false).is_err());
    assert!(Dense::from_weights("d", fill(&[3, 2], 1.0), Some(fill(&[3], 2.0)), Activation::Linear).is_err());
    Ok(())
}

#[test]
fn variables_are_collected_in_a_stable_named_order() -> Result<()> {
    nn::reset_names();
    let mut rng = Rng::new(0);
    let model = Sequential::new()
        .add(Dense::new(3, 4, &mut rng)?)
        .add(BatchNorm::new(4, DType::F32)?)
        .add(Dropout::new(0.1, &mut rng)?)
        .add(Dense::new(4, 2, &mut rng)?);
    let names = |vs: Vec<Variable>| vs.iter().map(|v| v.name().to_string()).collect::<Vec<_>>();
    assert_eq!(
        names(model.variables()),
        [
            "dense/kernel",
            "dense/bias",
            "batch_normalization/gamma",
            "batch_normalization/beta",
            "batch_normalization/moving_mean",
            "batch_normalization/moving_variance",
            "dense_1/kernel",
            "dense_1/bias"
        ]
    );
    assert_eq!(names(model.trainable_variables()).len(), 6);
    assert_eq!(
        names(model.non_trainable_variables()),
        ["batch_normalization/moving_mean", "batch_normalization/moving_variance"]
    );
    assert_eq!(model.count_params(), 3 * 4 + 4 + 4 * 4 + 4 * 2 + 2);
    Ok(())
}

#[test]
fn conv2d_is_the_conv_op_plus_bias() -> Result<()> {
    let c = Conv2D::builder(2, 3, [3, 3])
        .padding(Padding::Same)
        .dtype(DType::F64)
        .build(&mut Rng::new(0))?;
    c.kernel().assign(&fill(&[3, 3, 2, 3], 1.0))?;
    c.bias().unwrap().assign(&fill(&[3], 2.0))?;
    let x = fill(&[2, 5, 4, 2], 0.0);
    let want = x
        .conv2d(&fill(&[3, 3, 2, 3], 1.0), [1, 1], Padding::Same, [1, 1])?
        .bias_add(&fill(&[3], 2.0))?;
    assert_close("conv2d", &c.forward(&x, false)?, &want.to_vec::<f64>()?, 1e-15);
    assert!(c.forward(&fill(&[2, 5, 4, 3], 0.0), false).is_err());
    assert!(Conv2D::builder(2, 3, [0, 3]).build(&mut Rng::new(0)).is_err());
    Ok(())
}

#[test]
fn conv2d_transpose_matches_keras() -> Result<()> {
    for (pad, want, shape) in [
        (Padding::Same, &CONV_TRANSPOSE_SAME[..], [1, 6, 4, 3]),
        (Padding::Valid, &CONV_TRANSPOSE_VALID[..], [1, 7, 5, 3]),
    ] {
        let l = Conv2DTranspose::builder(2, 3, [3, 3])
            .strides([2, 2])
            .padding(pad)
            .dtype(DType::F64)
            .build(&mut Rng::new(0))?;
        l.kernel().assign(&fill(&[3, 3, 3, 2], 1.0))?;
        l.bias().unwrap().assign(&fill(&[3], 2.0))?;
        let y = l.forward(&fill(&[1, 3, 2, 2], 0.0), false)?;
        assert_eq!(y.shape(), &shape);
        assert_close("conv2d_transpose", &y, want, 1e-12);
    }
    Ok(())
}

#[test]
fn layer_norm_matches_keras() -> Result<()> {
    let l = LayerNorm::new(5, DType::F64)?;
    let v = l.variables();
    v[0].assign(&fill(&[5], 1.0).add_scalar(1.0)?)?;
    v[1].assign(&fill(&[5], 2.0))?;
    assert_close(
        "layer_norm",
        &l.forward(&fill(&[2, 5], 0.3), false)?,
        &LAYER_NORM,
        1e-12,
    );
    Ok(())
}

#[test]
fn batch_norm_trains_with_batch_statistics_and_infers_with_moving_ones() -> Result<()> {
    let l = BatchNorm::new(3, DType::F64)?;
    let v = l.variables();
    v[0].assign(&fill(&[3], 1.0).add_scalar(1.0)?)?;
    v[1].assign(&fill(&[3], 2.0))?;
    let x = fill(&[4, 3], 0.5).mul_scalar(3.0)?.add_scalar(1.0)?;
    // the statistics' update is not recorded: only gamma, beta and x get gradients
    let tape = GradientTape::new();
    let (y, loss) = tape.record(|| {
        tape.watch(&x);
        let y = l.forward(&x, true)?;
        let loss = y.mul(&fill(&[4, 3], 0.9))?.sum_all()?;
        Ok((y, loss))
    })?;
    assert_close("batch_norm train", &y, &BATCH_NORM_TRAIN, 1e-12);
    assert_close("moving mean", &l.moving_mean().read(), &BATCH_NORM_MOVING_MEAN, 1e-12);
    assert_close(
        "moving variance",
        &l.moving_variance().read(),
        &BATCH_NORM_MOVING_VARIANCE,
        1e-12,
    );
    assert_close("batch_norm infer", &l.forward(&x, false)?, &BATCH_NORM_INFER, 1e-12);
    let g = tape.gradient(&loss, &l.variables())?;
    let got: Vec<bool> = g.iter().map(Option::is_some).collect();
    assert_eq!(got, [true, true, false, false]);
    Ok(())
}

#[test]
fn lstm_and_gru_cells_match_keras() -> Result<()> {
    let (x, x2) = (fill(&[2, 3], 0.1), fill(&[2, 3], 0.9));
    let cell = LSTMCell::with_dtype(3, 4, DType::F64, &mut Rng::new(0))?;
    let v = cell.variables();
    v[0].assign(&fill(&[3, 16], 1.0))?;
    v[1].assign(&fill(&[4, 16], 2.0))?;
    v[2].assign(&fill(&[16], 3.0))?;
    let s = cell.step(
        &x,
        &LSTMState {
            h: fill(&[2, 4], 4.0),
            c: fill(&[2, 4], 5.0),
        },
    )?;
    let s = cell.step(&x2, &s)?;
    assert_close("lstm h", &s.h, &LSTM_H, 1e-12);
    assert_close("lstm c", &s.c, &LSTM_C, 1e-12);
    let gru = GRUCell::with_dtype(3, 4, DType::F64, &mut Rng::new(0))?;
    let v = gru.variables();
    v[0].assign(&fill(&[3, 12], 1.0))?;
    v[1].assign(&fill(&[4, 12], 2.0))?;
    v[2].assign(&fill(&[2, 12], 3.0))?;
    let h = gru.step(&x2, &gru.step(&x, &fill(&[2, 4], 4.0))?)?;
    assert_close("gru h", &h, &GRU_H, 1e-12);
    // run_sequence is the same two steps
    let xs = Tensor::stack(&[&x, &x2], 1)?;
    let (ys, last) = gru.run_sequence(&xs, fill(&[2, 4], 4.0))?;
    assert_eq!(ys.shape(), &[2, 2, 4]);
    assert_close("gru sequence", &last, &GRU_H, 1e-15);
    // a fresh LSTM cell's forget-gate bias is one (unit_forget_bias)
    let b = LSTMCell::new(3, 2, &mut Rng::new(0))?.variables()[2]
        .read()
        .to_vec::<f32>()?;
    assert_eq!(b, vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
    assert!(cell
        .step(
            &x,
            &LSTMState {
                h: fill(&[2, 3], 0.0),
                c: fill(&[2, 4], 0.0)
            }
        )
        .is_err());
    Ok(())
}

#[test]
fn embedding_gradients_are_sparse_and_update_only_their_rows() -> Result<()> {
    let emb = Embedding::new(50, 3, &mut Rng::new(0))?;
    let before = emb.table().read().to_vec::<f32>()?;
    let ids = Tensor::from_vec(vec![4i64, 9, 4, 7], &[2, 2])?;
    let mut opt = Sgd::new(0.5);
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        let e = emb.forward(&ids, true)?;
        assert_eq!(e.shape(), &[2, 2, 3]);
        e.sum_all()
    })?;
    let g = tape.sparse_gradient(&loss, emb.table())?.unwrap();
    assert!(g.is_sparse());
    opt.apply_gradients([(Some(g), emb.table())])?;
    let after = emb.table().read().to_vec::<f32>()?;
    for r in 0..50 {
        let d = after[3 * r] - before[3 * r];
        let want = match r {
            4 => -1.0, // looked up twice
            7 | 9 => -0.5,
            _ => 0.0,
        };
        assert_eq!(d, want, "row {r}");
    }
    assert!(emb.forward(&Tensor::vector(&[1.0f32]), false).is_err());
    assert!(emb.forward(&Tensor::vector(&[50i64]), false).is_err());
    Ok(())
}

#[test]
fn dropout_drops_while_training_only() -> Result<()> {
    let d = Dropout::new(0.3, &mut Rng::new(0))?;
    let x = Tensor::ones(&[20000], DType::F64);
    let y = d.forward(&x, true)?.to_vec::<f64>()?;
    let dropped = y.iter().filter(|&&v| v == 0.0).count() as f64 / y.len() as f64;
    assert!((dropped - 0.3).abs() < 0.015, "{dropped}");
    assert!(y.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.7).abs() < 1e-12));
    assert_eq!(d.forward(&x, false)?.to_vec::<f64>()?, vec![1.0; 20000]);
    assert!(Dropout::new(1.0, &mut Rng::new(0)).is_err());
    Ok(())
}

#[test]
fn losses_match_keras() -> Result<()> {
    let y_true = fill(&[3, 4], 0.2).add_scalar(0.5)?;
    let probs = fill(&[3, 4], 1.1).abs()?.add_scalar(0.05)?;
    let logits = fill(&[3, 4], 2.3).mul_scalar(4.0)?;
    let labels = Tensor::vector(&[2i64, 0, 3]);
    let onehot = labels.one_hot(4, 1.0, 0.0, -1, DType::F64)?;
    let normalised = probs.div(&probs.sum(&[-1], true)?)?;
    let bce = |l, s| Loss::BinaryCrossentropy {
        from_logits: l,
        label_smoothing: s,
    };
    let cce = |l, s| Loss::CategoricalCrossentropy {
        from_logits: l,
        label_smoothing: s,
    };
    let got = [
        Loss::MeanSquaredError.call(&y_true, &logits)?,
        Loss::MeanAbsoluteError.call(&y_true, &logits)?,
        Loss::Huber { delta: 0.7 }.call(&y_true, &logits)?,
        bce(true, 0.0).call(&y_true, &logits)?,
        bce(true, 0.2).call(&y_true, &logits)?,
        bce(false, 0.0).call(&y_true, &probs.clip_by_value(0.0, 1.0)?)?,
        cce(true, 0.0).call(&onehot, &logits)?,
        cce(true, 0.1).call(&onehot, &logits)?,
        cce(false, 0.0).call(&onehot, &probs)?,
        Loss::SparseCategoricalCrossentropy { from_logits: true }.call(&labels, &logits)?,
        Loss::SparseCategoricalCrossentropy { from_logits: false }.call(&labels, &normalised)?,
        Loss::MeanSquaredError.compute(&y_true, &logits, Reduction::Sum)?,
    ];
    for (i, (g, w)) in got.iter().zip(LOSSES).enumerate() {
        assert_close(&format!("loss {i}"), g, &[w], 1e-12);
    }
    let per = Loss::Huber { delta: 0.7 }.compute(&y_true, &logits, Reduction::None)?;
    assert_close("huber per sample", &per, &HUBER_PER_SAMPLE, 1e-12);
    // labels with a trailing axis of 1 are accepted, as Keras
    let l2 = Loss::SparseCategoricalCrossentropy { from_logits: true }.call(&labels.reshape(&[3, 1])?, &logits)?;
    assert_close("sparse labels [n, 1]", &l2, &[LOSSES[9]], 1e-12);
    // mismatches are errors naming the loss
    let err = Loss::MeanSquaredError.call(&y_true, &fill(&[3, 5], 0.0)).unwrap_err();
    assert!(err.to_string().contains("mean_squared_error"), "{err}");
    assert!(bce(true, 1.5).call(&y_true, &logits).is_err());
    Ok(())
}

#[test]
fn losses_are_differentiable_on_the_tape() -> Result<()> {
    // d/dlogits of mean sparse softmax cross-entropy = (softmax - onehot) / n
    let logits = fill(&[2, 3], 0.4);
    let labels = Tensor::vector(&[1i64, 2]);
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(&logits);
        nn::losses::sparse_categorical_crossentropy(&labels, &logits, true)
    })?;
    let g = tape.gradient(&l, &logits)?.unwrap();
    let want = logits
        .softmax(-1)?
        .sub(&labels.one_hot(3, 1.0, 0.0, -1, DType::F64)?)?
        .div_scalar(2.0)?;
    assert_close("dloss", &g, &want.to_vec::<f64>()?, 1e-14);
    Ok(())
}

#[test]
fn metrics_count_correct_predictions() -> Result<()> {
    let logits = Tensor::from_vec(vec![0.1f32, 0.9, 0.0, 0.7, 0.2, 0.1, 0.3, 0.3, 0.4], &[3, 3])?;
    assert_eq!(
        metrics::sparse_categorical_accuracy(&Tensor::vector(&[1i64, 0, 0]), &logits)?,
        2.0 / 3.0
    );
    assert!(metrics::sparse_categorical_accuracy(&Tensor::vector(&[1i64, 0]), &logits).is_err());
    let mut m = metrics::Mean::default();
    assert_eq!(m.result(), 0.0);
    m.update(1.0, 2.0);
    m.update(4.0, 1.0);
    assert_eq!(m.result(), 2.0);
    m.reset();
    assert_eq!(m.result(), 0.0);
    Ok(())
}

#[test]
fn schedules_match_keras() {
    // Keras evaluates schedules in float32
    let s: [&dyn LearningRateSchedule; 4] = [
        &ExponentialDecay::new(0.1, 7, 0.5),
        &ExponentialDecay::new(0.1, 7, 0.5).staircase(true),
        &CosineDecay::new(0.1, 20).alpha(0.1),
        &CosineDecay::new(0.01, 20).warmup(0.1, 5),
    ];
    let steps = [0u64, 3, 7, 10, 24, 40];
    let got: Vec<f64> = s.iter().flat_map(|f| steps.iter().map(|&t| f.lr(t))).collect();
    assert_close("schedules", &Tensor::vector(&got), &SCHEDULES, 1e-6);
}

#[test]
fn an_optimizer_follows_its_schedule() -> Result<()> {
    let w = Variable::new(Tensor::scalar(0.0f64));
    let mut opt = Sgd::new(ExponentialDecay::new(1.0, 1, 0.5));
    let mut lrs = Vec::new();
    for _ in 0..3 {
        lrs.push(opt.learning_rate());
        opt.apply_gradients([(Some(Tensor::scalar(-1.0f64)), &w)])?;
    }
    assert_eq!(lrs, vec![1.0, 0.5, 0.25]);
    assert_eq!(w.read().to_scalar::<f64>()?, 1.75);
    Ok(())
}

#[test]
fn a_small_model_learns_xor() -> Result<()> {
    let mut rng = Rng::new(0);
    let model = Sequential::new()
        .add(
            Dense::builder(2, 8)
                .activation(Activation::Tanh)
                .dtype(DType::F64)
                .build(&mut rng)?,
        )
        .add(Dense::builder(8, 1).dtype(DType::F64).build(&mut rng)?);
    let x = Tensor::from_vec(vec![0.0f64, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0], &[4, 2])?;
    let y = Tensor::from_vec(vec![0.0f64, 1.0, 1.0, 0.0], &[4, 1])?;
    let mut opt = Adam::new(0.05);
    let vars = model.trainable_variables();
    for _ in 0..300 {
        let tape = GradientTape::new();
        let loss = tape.record(|| nn::losses::binary_crossentropy(&y, &model.forward(&x, true)?, true))?;
        opt.minimize(&tape, &loss, &vars)?;
    }
    let p = model.forward(&x, false)?.sigmoid()?;
    assert_eq!(metrics::binary_accuracy(&y, &p, 0.5)?, 1.0);
    Ok(())
}

/// Layers and losses are compositions of ops: their gradients (first and
/// second order) pass the finite-difference checker, inputs and states
/// alike.
#[test]
fn gradients_through_layers_and_losses_pass_the_checker() -> Result<()> {
    use gradtape::{check_gradients, CheckOptions};
    let opts = CheckOptions::default();
    let mut rng = Rng::new(4);
    let lstm = LSTMCell::with_dtype(3, 2, DType::F64, &mut rng)?;
    check_gradients(
        |xs| {
            let s = lstm.step(
                &xs[0],
                &LSTMState {
                    h: xs[1].clone(),
                    c: xs[2].clone(),
                },
            )?;
            s.h.add(&s.c.mul_scalar(0.5)?)?.sum_all()
        },
        &[fill(&[2, 3], 0.1), fill(&[2, 2], 0.2), fill(&[2, 2], 0.3)],
        &opts,
    )?;
    let gru = GRUCell::with_dtype(3, 2, DType::F64, &mut rng)?;
    check_gradients(
        |xs| gru.step(&xs[0], &xs[1])?.square()?.sum_all(),
        &[fill(&[2, 3], 0.4), fill(&[2, 2], 0.5)],
        &opts,
    )?;
    let ln = LayerNorm::new(4, DType::F64)?;
    check_gradients(
        |xs| ln.forward(&xs[0], true)?.mul(&fill(&[3, 4], 0.6))?.sum_all(),
        &[fill(&[3, 4], 0.7)],
        &opts,
    )?;
    let up = Conv2DTranspose::builder(2, 1, [2, 2])
        .strides([2, 2])
        .dtype(DType::F64)
        .build(&mut rng)?;
    check_gradients(
        |xs| up.forward(&xs[0], true)?.tanh()?.sum_all(),
        &[fill(&[1, 2, 2, 2], 0.8)],
        &opts,
    )?;
    let y = fill(&[2, 3], 0.9).add_scalar(0.5)?;
    check_gradients(
        |xs| {
            Loss::BinaryCrossentropy {
                from_logits: true,
                label_smoothing: 0.1,
            }
            .call(&y, &xs[0])
        },
        &[fill(&[2, 3], 1.0)],
        &opts,
    )?;
    // inside Huber's quadratic and linear parts, away from the kink at ±delta
    check_gradients(
        |xs| Loss::Huber { delta: 0.3 }.call(&y, &xs[0]),
        &[fill(&[2, 3], 1.1).mul_scalar(2.0)?],
        &opts,
    )?;
    // the smooth losses of Keras's list, where they are smooth: positive
    // predictions (Poisson, KL, the logarithmic error), probabilities
    // inside (0, 1) for the focal losses, margins away from the hinge
    let positive = fill(&[2, 3], 1.2).abs()?.add_scalar(0.2)?;
    let probabilities = fill(&[2, 3], 1.3).sigmoid()?;
    let labels = Tensor::from_vec(vec![1.0, 0.0, 1.0, 0.0, 0.0, 1.0], &[2, 3])?;
    let smooth = [
        (Loss::MeanSquaredLogarithmicError, &positive),
        (Loss::LogCosh, &y),
        (Loss::CosineSimilarity { axis: -1 }, &y),
        (Loss::CosineSimilarity { axis: 0 }, &y),
        (Loss::Poisson, &positive),
        (Loss::KLDivergence, &probabilities),
        (
            Loss::BinaryFocalCrossentropy {
                apply_class_balancing: true,
                alpha: 0.3,
                gamma: 2.0,
                from_logits: true,
                label_smoothing: 0.1,
            },
            &labels,
        ),
        (
            Loss::CategoricalFocalCrossentropy {
                alpha: 0.25,
                gamma: 1.5,
                from_logits: true,
                label_smoothing: 0.0,
            },
            &labels,
        ),
    ];
    for (loss, target) in smooth {
        let x = if matches!(loss, Loss::KLDivergence) {
            &probabilities
        } else {
            &positive
        };
        check_gradients(|xs| loss.call(target, &xs[0]), &[x.mul_scalar(0.9)?], &opts)
            .unwrap_or_else(|e| panic!("{loss:?}: {e}"));
    }
    // the squared hinge's margins 1 − y·p, all positive here
    check_gradients(
        |xs| Loss::SquaredHinge.call(&labels, &xs[0]),
        &[fill(&[2, 3], 1.4).mul_scalar(0.3)?],
        &opts,
    )?;
    // the Keras layers of this file's neighbours, through their inputs
    use gradtape::nn::{Bidirectional, Conv1D, Conv3D, GroupNorm, Merge, SeparableConv2D, UpSampling2D, GRU, LSTM};
    let f64_layers: Vec<(Box<dyn Layer>, Vec<usize>)> = vec![
        (
            Box::new(GroupNorm::builder(4, 2).dtype(DType::F64).build()?),
            vec![2, 3, 4],
        ),
        (
            Box::new(
                Conv1D::builder(2, 3, 3)
                    .causal(true)
                    .dilation_rate(2)
                    .dtype(DType::F64)
                    .build(&mut rng)?,
            ),
            vec![1, 5, 2],
        ),
        (
            Box::new(
                SeparableConv2D::builder(2, 3, [2, 2])
                    .depth_multiplier(2)
                    .padding(Padding::Same)
                    .dtype(DType::F64)
                    .build(&mut rng)?,
            ),
            vec![1, 3, 3, 2],
        ),
        (
            Box::new(Conv3D::builder(2, 2, [2, 2, 2]).dtype(DType::F64).build(&mut rng)?),
            vec![1, 3, 3, 2, 2],
        ),
        (
            Box::new(UpSampling2D::new([2, 2], gradtape::ResizeMethod::Bilinear)?),
            vec![1, 2, 3, 2],
        ),
        (
            Box::new(Bidirectional::new(
                LSTM::builder(2, 2)
                    .return_sequences(true)
                    .dtype(DType::F64)
                    .build(&mut rng)?,
                GRU::builder(2, 2)
                    .return_sequences(true)
                    .dtype(DType::F64)
                    .build(&mut rng)?,
                Merge::Mul,
            )),
            vec![2, 3, 2],
        ),
    ];
    for (layer, shape) in &f64_layers {
        check_gradients(
            |xs| layer.call(&xs[0])?.tanh()?.sum_all(),
            &[fill(shape, 1.5).add_scalar(0.1)?],
            &opts,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", layer.name()));
    }
    Ok(())
}

/// A model of several layers fed a wrong input: the error names the
/// layer instance (as Keras's "Input 0 of layer "dense_1" is
/// incompatible"), the shape or dtype expected and the one given.
#[test]
fn layer_input_errors_name_the_layer_and_what_it_expected() -> Result<()> {
    let mut rng = Rng::new(0);
    let hidden = Dense::builder(4, 6).name("hidden").build(&mut rng)?;
    let msg = hidden
        .forward(&Tensor::zeros(&[3, 5], DType::F32), false)
        .unwrap_err()
        .to_string();
    for part in ["Dense", "'hidden'", "last dimension is 4", "[3, 5]"] {
        assert!(msg.contains(part), "{part:?} not in {msg:?}");
    }
    let msg = hidden
        .forward(&Tensor::zeros(&[3, 4], DType::F64), false)
        .unwrap_err()
        .to_string();
    for part in ["'hidden'", "f32 weights", "f64 input", "[3, 4]"] {
        assert!(msg.contains(part), "{part:?} not in {msg:?}");
    }
    let conv = Conv2D::builder(3, 4, [3, 3]).name("stem").build(&mut rng)?;
    let msg = conv
        .forward(&Tensor::zeros(&[2, 8, 8], DType::F32), false)
        .unwrap_err()
        .to_string();
    for part in ["Conv2D", "'stem'", "rank 4 whose last dimension is 3", "[2, 8, 8]"] {
        assert!(msg.contains(part), "{part:?} not in {msg:?}");
    }
    let bn = BatchNorm::builder(6).name("bn").build()?;
    let msg = bn
        .forward(&Tensor::zeros(&[4, 5], DType::F32), true)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("'bn'") && msg.contains("last dimension is 6"), "{msg}");
    // a block fed another dtype says so itself, not through its first norm
    let block = TransformerBlock::builder(8, 2, 16).name("enc0").build(&mut rng)?;
    let msg = block
        .forward(&Tensor::zeros(&[1, 5, 8], DType::F64), false)
        .unwrap_err()
        .to_string();
    for part in ["TransformerBlock", "'enc0'", "f32 weights", "f64 input"] {
        assert!(msg.contains(part), "{part:?} not in {msg:?}");
    }
    Ok(())
}
