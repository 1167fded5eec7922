//! Layers, initialisers, losses, metrics, schedules and the seeded
//! generator. Reference values are Keras 3.15.1's (TensorFlow 2.21 backend,
//! float64), printed by `tests/reference/layers.py`; every weight and input
//! there and here is `fill(shape, k)`.

use gradtape::nn::losses::{Loss, Reduction};
use gradtape::nn::{
    self, metrics, Activation, BatchNorm, Conv2D, Conv2DTranspose, Dense, Dropout, Embedding, GRUCell, Initializer,
    LSTMCell, LSTMState, Layer, LayerNorm, Module, Sequential,
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

const CONV_TRANSPOSE_SAME: [f64; 72] = [
    0.614360716089014,
    0.22038668966356134,
    -0.2852060989152648,
    0.3944342233305717,
    0.35065651833780775,
    -0.02099642498509141,
    0.7752887483980361,
    0.24807645284445826,
    -0.4367214313534044,
    0.156315215665497,
    0.4739682424224866,
    0.2590404655375346,
    0.6135727015768371,
    0.2149724460773212,
    -0.2862585714297262,
    0.3994906954242839,
    0.3534278590821152,
    -0.025110823342177277,
    0.7744212508478057,
    0.23731634814036426,
    -0.4395116623108979,
    0.16709455556830566,
    0.4855094697414396,
    0.25218438450065567,
    0.5961108276138514,
    0.2624783427895092,
    -0.2526478143965715,
    0.3634102473993749,
    0.30755212071825183,
    -0.00462511167355853,
    0.40316573680709067,
    0.06376041416550415,
    -0.1272537607323636,
    0.4625275150796503,
    0.219981919566349,
    -0.13351049313981028,
    0.440065206518214,
    0.26745128244991356,
    -0.09491172060914557,
    0.4120572141255567,
    0.1663527988212503,
    -0.10127056904430995,
    0.0814237779584368,
    0.06269404500413167,
    0.1941257026770194,
    0.7277245603659813,
    -0.07422110682578797,
    -0.4987172340830932,
    0.3133626331700895,
    0.16180567983646238,
    -0.004121709733386214,
    0.5485654542438774,
    0.12196661905599258,
    -0.2528671934805448,
    0.45530156685578665,
    0.34698088664342985,
    -0.08311324174519952,
    0.47869543196513864,
    0.17621805903138793,
    -0.16455524670012256,
    0.32320653725167026,
    0.11109715853553451,
    -0.031203178787396493,
    0.5900680557035026,
    0.16315624529604272,
    -0.28036802876186995,
    0.8381979205373911,
    0.47460694354251726,
    -0.42262512292528104,
    0.2276065438648474,
    0.48442285160182513,
    0.19130301744288636,
];
const CONV_TRANSPOSE_VALID: [f64; 105] = [
    0.614360716089014,
    0.22038668966356134,
    -0.2852060989152648,
    0.3944342233305717,
    0.35065651833780775,
    -0.02099642498509141,
    0.7752887483980361,
    0.24807645284445826,
    -0.4367214313534044,
    0.156315215665497,
    0.4739682424224866,
    0.2590404655375346,
    0.32586073775827507,
    -0.21690052495785994,
    -0.14535503757654084,
    0.6135727015768371,
    0.2149724460773212,
    -0.2862585714297262,
    0.3994906954242839,
    0.3534278590821152,
    -0.025110823342177277,
    0.7744212508478057,
    0.23731634814036426,
    -0.4395116623108979,
    0.16709455556830566,
    0.4855094697414396,
    0.25218438450065567,
    0.3119888934286597,
    -0.21475995941590398,
    -0.13075554162821196,
    0.5961108276138514,
    0.2624783427895092,
    -0.2526478143965715,
    0.3634102473993749,
    0.30755212071825183,
    -0.00462511167355853,
    0.40316573680709067,
    0.06376041416550415,
    -0.1272537607323636,
    0.4625275150796503,
    0.219981919566349,
    -0.13351049313981028,
    0.44640553083613554,
    0.2166277418613735,
    -0.1185287088988837,
    0.440065206518214,
    0.26745128244991356,
    -0.09491172060914557,
    0.4120572141255567,
    0.1663527988212503,
    -0.10127056904430995,
    0.0814237779584368,
    0.06269404500413167,
    0.1941257026770194,
    0.7277245603659813,
    -0.07422110682578797,
    -0.4987172340830932,
    0.6164622645761956,
    0.6396425971341468,
    -0.1447881899287996,
    0.3133626331700895,
    0.16180567983646238,
    -0.004121709733386214,
    0.5485654542438774,
    0.12196661905599258,
    -0.2528671934805448,
    0.45530156685578665,
    0.34698088664342985,
    -0.08311324174519952,
    0.47869543196513864,
    0.17621805903138793,
    -0.16455524670012256,
    0.4796162152417181,
    0.25896194570604425,
    -0.13734854595559728,
    0.32320653725167026,
    0.11109715853553451,
    -0.031203178787396493,
    0.5900680557035026,
    0.16315624529604272,
    -0.28036802876186995,
    0.8381979205373911,
    0.47460694354251726,
    -0.42262512292528104,
    0.2276065438648474,
    0.48442285160182513,
    0.19130301744288636,
    0.2923798475389344,
    -0.1605443793678873,
    -0.09271676125560502,
    0.32054270121736483,
    0.11504495131476143,
    -0.027197352634196023,
    0.5874819805767044,
    0.15827132354158824,
    -0.2794425060228637,
    0.8446591367567913,
    0.46288602008272245,
    -0.43307068288991046,
    0.23828884842519032,
    0.49358637190828764,
    0.18373570761333846,
    0.2806439391701348,
    -0.15696650716790816,
    -0.07976461145581973,
];
const LAYER_NORM: [f64; 10] = [
    -0.6343157918084183,
    1.3548145622447882,
    1.455569739847276,
    -0.1051076962342854,
    -1.5238009602695504,
    0.13448680768748655,
    -1.2993147062694668,
    -1.2103090303751904,
    -0.11691878882266549,
    0.7233409905253676,
];
const BATCH_NORM_TRAIN: [f64; 12] = [
    1.2372381161152028,
    1.6355397699774583,
    1.1623917243607944,
    1.3162885381674068,
    -0.5870737914830801,
    -1.93549248826427,
    -2.004354281633491,
    -1.8414032111448968,
    -0.8902423818132356,
    1.2694224810022439,
    1.6476969931181777,
    1.1522609416630472,
];
const BATCH_NORM_MOVING_MEAN: [f64; 3] = [0.011834188765000666, 0.013523233303910248, 0.013555246167951876];
const BATCH_NORM_MOVING_VARIANCE: [f64; 3] = [0.9994487409860976, 1.0020932484855192, 1.002159472018437];
const BATCH_NORM_INFER: [f64; 12] = [
    2.879732215651497,
    3.775051421226763,
    3.0855987680608434,
    2.956596296558795,
    1.3336213973715785,
    -0.3264565262463633,
    -0.27220567235237675,
    -0.04419684241044328,
    0.8247973343907675,
    2.911026439798635,
    3.7884055238459133,
    3.07444057480157,
];
const LSTM_H: [f64; 8] = [
    -0.028583895734002353,
    -0.10016528387993515,
    -0.10457007549284578,
    -0.07246809372952041,
    0.15607936769239064,
    0.12563264438579164,
    0.043269100707159815,
    -0.11608401881183104,
];
const LSTM_C: [f64; 8] = [
    -0.06293268659198831,
    -0.20314589357649154,
    -0.19429723769364915,
    -0.12812941606678566,
    0.5051213013965402,
    0.37943511711068856,
    0.10096533480711195,
    -0.21416465728603473,
];
const GRU_H: [f64; 8] = [
    0.011111228034050402,
    -0.2933716569356535,
    -0.43030581841008186,
    -0.34871657144208074,
    0.2913371526230989,
    0.12144018935551776,
    -0.10075157181622113,
    -0.23800564167307278,
];
const LOSSES: [f64; 12] = [
    2.6182102427211027,
    1.4338858938830077,
    0.7627754505600591,
    1.1077350114429838,
    1.0651464204290122,
    0.832006037494392,
    3.4559837619199727,
    3.3170468038455065,
    1.4634453868819917,
    3.4559837619199727,
    1.4634453868819917,
    7.854630728163308,
];
const HUBER_PER_SAMPLE: [f64; 3] = [0.8650031452818856, 0.7357844400781255, 0.6875387663201664];
const SCHEDULES: [f64; 24] = [
    0.10000000149011612,
    0.07429971545934677,
    0.05000000074505806,
    0.037149857729673386,
    0.009287464432418346,
    0.0019047086825594306,
    0.10000000149011612,
    0.10000000149011612,
    0.05000000074505806,
    0.05000000074505806,
    0.012500000186264515,
    0.0031250000465661287,
    0.10000000149011612,
    0.09509529173374176,
    0.07542957365512848,
    0.05499999597668648,
    0.010000000707805157,
    0.010000000707805157,
    0.009999999776482582,
    0.06400000303983688,
    0.0975528284907341,
    0.08535534143447876,
    0.0006155818700790405,
    0.0,
];

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
    let (p, q) = (rng.permutation(50), rng.permutation(50));
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
    Ok(())
}
