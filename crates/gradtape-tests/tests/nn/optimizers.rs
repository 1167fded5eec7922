//! Optimizers against Keras 3 (TensorFlow 2.21 backend) and PyTorch: each
//! update rule for three steps in f64, Keras's sparse-gradient semantics,
//! the lazy sparse form against PyTorch's `SparseAdam`, `None` gradients,
//! slots, schedules and clipping (the sparse gradients' tests are in
//! `optimizers_sparse.rs`, which shares this file's helpers).
//!
//! The reference numbers come from `tests/reference/optimizers.py` (Keras
//! 3.15.1, TensorFlow 2.21.0, float64 variables and gradients, learning rate
//! given as a callable) and `tests/reference/sparse_adam_torch.py` (PyTorch 2.15, float64).

use gradtape::optim::{
    clip_by_global_norm, clip_by_norm, global_norm, Adadelta, Adagrad, Adam, AdamW, Adamax, Lion, Nadam, Optimizer,
    RmsProp, Sgd,
};
use gradtape::{DType, Gradient, GradientTape, Result, Tensor, Variable};

/// The hyper-parameters of the reference runs are dyadic (exact in
/// float32): Keras converts the learning rate, the momentum and the betas of
/// the bias correction to float32 tensors before casting them to float64,
/// so other values would bring float32 rounding into its float64 results.
pub(super) const LR: f64 = 0.125;
const LR_SMALL: f64 = 1.0 / 128.0;
const EPS: f64 = 1.0 / 1048576.0; // 2^-20
const BETA_2: f64 = 1.0 - 1.0 / 1024.0;

const W0: [f64; 6] = [0.5, -1.2, 2.0, 0.3, 0.0, -0.7];

/// The gradient of step `k`: `0.3 sin(1.3 i + 0.9 k) + 0.1 k cos(i)`.
pub(super) fn grad(k: usize) -> Vec<f64> {
    (0..6)
        .map(|i| 0.3 * (1.3 * i as f64 + 0.9 * k as f64).sin() + 0.1 * k as f64 * (i as f64).cos())
        .collect()
}

/// Large first, then small (so AMSGrad's v-hat differs from v).
fn shrinking(k: usize) -> Vec<f64> {
    grad(k)
        .into_iter()
        .map(|g| g * if k == 0 { 4.0 } else { 0.1 })
        .collect()
}

fn run(opt: &mut impl Optimizer, g: fn(usize) -> Vec<f64>) -> Result<Vec<f64>> {
    let w = Variable::builder(Tensor::from_vec(W0.to_vec(), &[2, 3])?)
        .name("w")
        .build();
    for k in 0..3 {
        opt.apply_gradients([(Some(Tensor::from_vec(g(k), &[2, 3])?), &w)])?;
    }
    w.read().to_vec::<f64>()
}

pub(super) fn assert_close(name: &str, got: &[f64], want: &[f64], rtol: f64) {
    assert_eq!(got.len(), want.len(), "{name}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= rtol * w.abs().max(1e-3),
            "{name}[{i}]: got {g}, Keras/PyTorch {w}"
        );
    }
}

/// Keras 3.15.1 (TF 2.21.0), float64: w after three steps.
const KERAS: &[(&str, [f64; 6])] = &[
    (
        "sgd",
        [
            0.39660595473103705,
            -1.2882726584076831,
            2.0451136537364305,
            0.4209228302706711,
            0.039835281830140165,
            -0.786237328866961,
        ],
    ),
    (
        "sgd_momentum",
        [
            0.3599655405088853,
            -1.379992414926574,
            2.0294599179893082,
            0.5067512627388348,
            0.1073148834000469,
            -0.8320636645564055,
        ],
    ),
    (
        "sgd_nesterov",
        [
            0.27407580267631165,
            -1.4457660214684356,
            2.0708910819770754,
            0.6018301851671517,
            0.1337358048051812,
            -0.9017930353538159,
        ],
    ),
    (
        "sgd_weight_decay",
        [
            0.3853056656023879,
            -1.2595148052231266,
            1.998761374832418,
            0.4131564309930729,
            0.03920245437901639,
            -0.7695423696388892,
        ],
    ),
    (
        "sgd_clipvalue",
        [0.484375, -1.2234375, 2.0078125, 0.3234375, 0.0078125, -0.7234375],
    ),
    (
        "adam",
        [
            0.4873528090236476,
            -1.2227747687976278,
            1.9970631126548806,
            0.32313512310382964,
            0.019088758486761226,
            -0.7219572952656442,
        ],
    ),
    (
        "adam_betas",
        [
            0.48533796038289584,
            -1.2220014615179733,
            2.0013709544092695,
            0.3235404256961331,
            0.01614665609477039,
            -0.7229704698208458,
        ],
    ),
    (
        "adam_clipnorm",
        [
            0.4873174792112223,
            -1.2220980234875882,
            1.9944345492403874,
            0.32337756909746085,
            0.018771732073115784,
            -0.7224544970686247,
        ],
    ),
    (
        "adam_global_clipnorm",
        [
            0.4873174792112223,
            -1.2220980234875882,
            1.9944345492403874,
            0.32337756909746085,
            0.018771732073115784,
            -0.7224544970686247,
        ],
    ),
    (
        "adamw",
        [
            0.48589514784006926,
            -1.2192396914992913,
            1.9912243950825872,
            0.32223440091000183,
            0.019066548007154356,
            -0.7198865842502167,
        ],
    ),
    (
        "rmsprop",
        [
            0.4592643785756079,
            -1.245179647515266,
            2.013227485079825,
            0.35655570049765356,
            0.026211740290945102,
            -0.7604145497885842,
        ],
    ),
    (
        "rmsprop_momentum",
        [
            0.4482162106614219,
            -1.2699160706828565,
            2.0045275077214777,
            0.3830674166280244,
            0.047597429777396914,
            -0.7878003179619171,
        ],
    ),
    (
        "rmsprop_centered",
        [
            0.45518571173870026,
            -1.2503030837214575,
            2.0128061774112056,
            0.3636167279411872,
            0.028592838685184432,
            -0.7668931769066395,
        ],
    ),
    (
        "rmsprop_momentum_centered",
        [
            0.44337478077796744,
            -1.2773496453110709,
            2.0029640557616606,
            0.39254315399986506,
            0.05170440667855139,
            -0.7964762741427645,
        ],
    ),
    (
        "adagrad",
        [
            0.32517771995053646,
            -1.3742169695608821,
            2.0776217260993337,
            0.5172256375417037,
            0.08980927763975448,
            -0.8739973431555084,
        ],
    ),
    (
        "adamax",
        [
            0.4911126670122195,
            -1.2215374174534683,
            1.9955380407532686,
            0.320340650135552,
            0.016052242648382672,
            -0.7185299710213094,
        ],
    ),
    (
        "nadam",
        [
            0.48423686687980666,
            -1.2181360514821022,
            2.004255457393622,
            0.3221930583778874,
            0.0113814822310741,
            -0.7234782273775695,
        ],
    ),
    (
        "adadelta",
        [
            0.31199531997454477,
            -1.4168824430599725,
            2.1188723279207204,
            0.5897792778067413,
            0.10396861450448186,
            -0.9520291020141789,
        ],
    ),
    (
        "lion",
        [0.484375, -1.2234375, 2.0078125, 0.3234375, 0.0234375, -0.7234375],
    ),
    (
        "lion_weight_decay",
        [
            0.47856900095939636,
            -1.2093384265899658,
            1.984496831893921,
            0.31984415650367737,
            0.02334606647491455,
            -0.7151749432086945,
        ],
    ),
    (
        "nadam_f64",
        [
            0.48423686642938024,
            -1.2181360517327053,
            2.0042554577435974,
            0.3221930588038956,
            0.011381482249624805,
            -0.7234782278771918,
        ],
    ),
    (
        "adam_defaults",
        [
            0.4984041546733952,
            -1.202921778104329,
            1.9995901970899423,
            0.30295312946720926,
            0.002466567484226601,
            -0.7027942751977716,
        ],
    ),
    (
        "adam_shrinking",
        [
            0.4873607501789533,
            -1.2172109599194392,
            1.9836663951913998,
            0.3176047851723049,
            0.016979298300198516,
            -0.7186293062838359,
        ],
    ),
    (
        "adam_amsgrad_shrinking",
        [
            0.4873607501789533,
            -1.217207686609366,
            1.9836674310424265,
            0.3176047851723049,
            0.01697356107651566,
            -0.7186293062838359,
        ],
    ),
];

fn keras(name: &str) -> [f64; 6] {
    KERAS.iter().find(|(n, _)| *n == name).expect("a reference value").1
}

fn check(name: &str, mut opt: impl Optimizer) -> Result<()> {
    let g = if name.ends_with("shrinking") { shrinking } else { grad };
    assert_close(name, &run(&mut opt, g)?, &keras(name), 1e-12);
    Ok(())
}

#[test]
fn sgd_matches_keras() -> Result<()> {
    check("sgd", Sgd::new(LR))?;
    check("sgd_momentum", Sgd::new(LR).momentum(0.875)?)?;
    check("sgd_nesterov", Sgd::new(LR).momentum(0.875)?.nesterov(true))?;
    check("sgd_weight_decay", Sgd::new(LR).weight_decay(0.0625))?;
    check("sgd_clipvalue", Sgd::new(LR).clipvalue(0.0625)?)?;
    Ok(())
}

pub(super) fn adam() -> Result<Adam> {
    Adam::new(LR_SMALL).betas(0.875, BETA_2)?.epsilon(EPS)
}

#[test]
fn adam_and_adamw_match_keras() -> Result<()> {
    check("adam", adam()?)?;
    check(
        "adam_betas",
        Adam::new(LR_SMALL).betas(0.5, 0.75)?.epsilon(1.0 / 1024.0)?,
    )?;
    check("adam_shrinking", adam()?)?;
    check("adam_amsgrad_shrinking", adam()?.amsgrad(true))?;
    check("adam_clipnorm", adam()?.clipnorm(0.125)?)?;
    check("adam_global_clipnorm", adam()?.global_clipnorm(0.125)?)?;
    check(
        "adamw",
        AdamW::new(LR_SMALL)
            .betas(0.875, BETA_2)?
            .epsilon(EPS)?
            .weight_decay(0.125),
    )?;
    // AMSGrad must differ from Adam once v decreases
    assert!(keras("adam_shrinking")[1] != keras("adam_amsgrad_shrinking")[1]);
    // Keras's defaults (lr 0.001, betas 0.9 and 0.999, eps 1e-7): Keras
    // takes the betas of the bias correction as float32 (0.999f32 =
    // 0.99900001287), so its 1 − β₂ᵗ is off by ~1.3e-5 relative and the
    // step by half that
    assert_close(
        "adam_defaults",
        &run(&mut Adam::new(0.001), grad)?,
        &keras("adam_defaults"),
        1e-5,
    );
    Ok(())
}

/// Adamax, Nadam, Adadelta and Lion (Keras's update order; Nadam's
/// product of momentum factors is Keras's variable, recomputed per step).
#[test]
fn adamax_nadam_adadelta_and_lion_match_keras() -> Result<()> {
    check("adamax", Adamax::new(LR_SMALL).betas(0.875, BETA_2)?.epsilon(EPS)?)?;
    // Nadam: Keras's own product of momentum factors carries a float32
    // 0.96 (1e-9 relative); its formula in f64 is the referee
    let nadam = || Nadam::new(LR_SMALL).betas(0.875, BETA_2)?.epsilon(EPS);
    assert_close("nadam", &run(&mut nadam()?, grad)?, &keras("nadam_f64"), 1e-12);
    assert_close("nadam", &run(&mut nadam()?, grad)?, &keras("nadam"), 1e-8);
    check("adadelta", Adadelta::new(1.0).rho(0.875)?.epsilon(1.0 / 1024.0)?)?;
    check("lion", Lion::new(LR_SMALL).betas(0.875, 0.96875)?)?;
    check(
        "lion_weight_decay",
        Lion::new(LR_SMALL).betas(0.875, 0.96875)?.weight_decay(0.5),
    )?;
    // bad hyper-parameters are errors naming the optimizer
    let e = Lion::new(0.1).betas(1.0, 0.5).err().unwrap().to_string();
    assert!(e.contains("lion") && e.contains("betas"), "{e}");
    assert!(Adadelta::new(0.1).rho(-0.5).is_err());
    assert!(Nadam::new(0.1).epsilon(f64::NAN).is_err());
    Ok(())
}

#[test]
fn rmsprop_and_adagrad_match_keras() -> Result<()> {
    let rms = || RmsProp::new(LR_SMALL).rho(0.875)?.epsilon(EPS);
    check("rmsprop", rms()?)?;
    check("rmsprop_momentum", rms()?.momentum(0.5)?)?;
    check("rmsprop_centered", rms()?.centered(true))?;
    check("rmsprop_momentum_centered", rms()?.momentum(0.5)?.centered(true))?;
    check(
        "adagrad",
        Adagrad::new(LR).initial_accumulator_value(0.125)?.epsilon(EPS)?,
    )?;
    Ok(())
}

#[test]
fn adam_in_f32_matches_keras() -> Result<()> {
    // Keras, float32 variable, learning rate 0.01 (a float32 variable), its
    // defaults otherwise. Keras computes the bias correction 1 − 0.999ᵗ in
    // float32 (relative error ~1e-5 from cancellation); gradtape computes
    // the step constants in float64, hence the tolerance.
    let want = [
        0.4840415418148041,
        -1.2292178869247437,
        1.9959019422531128,
        0.32953131198883057,
        0.02466565929353237,
        -0.727942705154419,
    ];
    let w0: Vec<f32> = W0.iter().map(|&x| x as f32).collect();
    let w = Variable::new(Tensor::from_vec(w0, &[2, 3])?);
    let mut opt = Adam::new(0.01);
    for k in 0..3 {
        let g: Vec<f32> = grad(k).into_iter().map(|x| x as f32).collect();
        opt.apply_gradients([(Some(Tensor::from_vec(g, &[2, 3])?), &w)])?;
    }
    let got: Vec<f64> = w.read().to_vec::<f32>()?.into_iter().map(f64::from).collect();
    assert_close("adam f32", &got, &want, 2e-5);
    Ok(())
}

#[test]
fn none_gradients_are_skipped_and_all_none_is_an_error() -> Result<()> {
    let a = Variable::builder(Tensor::scalar(1.0f32)).name("a").build();
    let b = Variable::builder(Tensor::scalar(1.0f32)).name("b").build();
    let vars = vec![a.clone(), b.clone()];
    let tape = GradientTape::new();
    let loss = tape.record(|| a.read().mul_scalar(3.0))?;
    let grads = tape.gradient(&loss, &vars)?;
    let mut opt = Sgd::new(0.1);
    opt.apply_gradients(grads.into_iter().zip(&vars))?;
    assert_eq!(opt.skipped(), &["b".to_string()]);
    assert!((a.read().to_scalar::<f32>()? - 0.7).abs() < 1e-7);
    assert_eq!(b.read().to_scalar::<f32>()?, 1.0);
    assert_eq!(opt.iterations(), 1);
    let err = opt.apply_gradients([(None::<Tensor>, &a), (None, &b)]).unwrap_err();
    assert!(
        err.to_string().contains("no gradients provided for any variable"),
        "{err}"
    );
    assert!(
        err.to_string().contains("\"a\"") && err.to_string().contains("\"b\""),
        "{err}"
    );
    assert_eq!(opt.iterations(), 1, "a failed call does not count");
    // an empty list is a no-op, as in Keras
    opt.apply_gradients(std::iter::empty::<(Option<Tensor>, &Variable)>())?;
    assert_eq!(opt.iterations(), 1);
    Ok(())
}

#[test]
fn mismatched_gradients_and_integer_variables_are_errors() -> Result<()> {
    let w = Variable::builder(Tensor::zeros(&[2], DType::F32)).name("w").build();
    let mut opt = Adam::new(0.1);
    let err = opt
        .apply_gradients([(Some(Tensor::zeros(&[3], DType::F32)), &w)])
        .unwrap_err();
    assert!(
        err.to_string().contains("apply_gradients") && err.to_string().contains("'w'"),
        "{err}"
    );
    assert!(opt
        .apply_gradients([(Some(Tensor::zeros(&[2], DType::F64)), &w)])
        .is_err());
    let i = Variable::new(Tensor::vector(&[1i64]));
    assert!(opt.apply_gradients([(Some(Tensor::vector(&[1i64])), &i)]).is_err());
    assert!(Sgd::new(0.1).momentum(1.5).is_err());
    assert!(Adam::new(0.1).clipnorm(0.0).is_err());
    Ok(())
}

#[test]
fn slots_are_named_built_up_front_and_counted() -> Result<()> {
    let w = Variable::builder(Tensor::zeros(&[2, 2], DType::F32))
        .name("dense/kernel")
        .build();
    let mut opt = Adam::new(0.01).amsgrad(true).with_name("opt");
    opt.build(std::slice::from_ref(&w))?;
    let names: Vec<String> = opt.variables().iter().map(|v| v.name().to_string()).collect();
    assert_eq!(
        names,
        [
            "opt/iterations",
            "opt/dense/kernel/m",
            "opt/dense/kernel/v",
            "opt/dense/kernel/vhat"
        ]
    );
    assert!(opt.variables().iter().all(|v| !v.trainable()));
    let acc = Adagrad::new(0.1).initial_accumulator_value(0.5)?;
    let mut acc = acc;
    acc.build(std::slice::from_ref(&w))?;
    assert_eq!(acc.variables()[1].read().to_vec::<f32>()?, vec![0.5; 4]);
    Ok(())
}

#[test]
fn weight_decay_can_exclude_variables_by_name() -> Result<()> {
    let k = Variable::builder(Tensor::vector(&[1.0f64]))
        .name("dense/kernel")
        .build();
    let b = Variable::builder(Tensor::vector(&[1.0f64])).name("dense/bias").build();
    let mut opt = Sgd::new(0.5).weight_decay(0.2).exclude_from_weight_decay(&["bias"]);
    let zero = || Some(Tensor::vector(&[0.0f64]));
    opt.apply_gradients([(zero(), &k), (zero(), &b)])?;
    assert_eq!(k.read().to_vec::<f64>()?, vec![0.9]);
    assert_eq!(b.read().to_vec::<f64>()?, vec![1.0]);
    Ok(())
}

#[test]
fn the_update_writes_in_place_when_nothing_else_holds_the_buffer() -> Result<()> {
    // a held read keeps its old value (copy on write) ...
    let w = Variable::new(Tensor::from_vec(vec![1.0f32; 4096], &[4096])?);
    let held = w.read();
    let mut opt = Adam::new(0.1);
    opt.apply_gradients([(Some(Tensor::ones(&[4096], DType::F32)), &w)])?;
    assert!(held.to_vec::<f32>()?.iter().all(|&v| v == 1.0));
    assert!(w.read().to_vec::<f32>()?.iter().all(|&v| (v - 0.9).abs() < 1e-6));
    Ok(())
}

#[test]
fn clip_by_norm_and_global_norm_follow_tensorflow() -> Result<()> {
    // tf.clip_by_norm([[3, 4], [0, 12]], 5.0, axes=[1]) = [[3, 4], [0, 5]]
    let t = Tensor::from_vec(vec![3.0f64, 4.0, 0.0, 12.0], &[2, 2])?;
    assert_eq!(
        clip_by_norm(&t, 5.0, Some(&[1]))?.to_vec::<f64>()?,
        vec![3.0, 4.0, 0.0, 5.0]
    );
    // norm 13 over everything: scaled by 5 / 13
    let c = clip_by_norm(&t, 5.0, None)?.to_vec::<f64>()?;
    assert_close("clip_by_norm", &c, &[15.0 / 13.0, 20.0 / 13.0, 0.0, 60.0 / 13.0], 1e-15);
    // the gradient of clip_by_norm at zero is finite (TF's double where)
    let z = Tensor::zeros(&[3], DType::F64);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&z);
        clip_by_norm(&z, 1.0, None)?.sum_all()
    })?;
    let g = tape.gradient(&y, &z)?.unwrap();
    assert_eq!(g.to_vec::<f64>()?, vec![1.0; 3]);
    // tf.clip_by_global_norm([[1, 2], None, [2]], 1.5): norm 3, scale 0.5
    let ts = vec![
        Some(Tensor::vector(&[1.0f64, 2.0])),
        None,
        Some(Tensor::vector(&[2.0f64])),
    ];
    let (c, n) = clip_by_global_norm(&ts, 1.5)?;
    assert_eq!(n.to_scalar::<f64>()?, 3.0);
    assert_eq!(c[0].as_ref().unwrap().to_vec::<f64>()?, vec![0.5, 1.0]);
    assert!(c[1].is_none());
    assert_eq!(global_norm(&ts)?.to_scalar::<f64>()?, 3.0);
    // an infinite norm gives NaN everywhere, as TF
    let (c, _) = clip_by_global_norm(&[Some(Tensor::vector(&[f64::INFINITY, 1.0]))], 1.0)?;
    assert!(c[0].as_ref().unwrap().to_vec::<f64>()?.iter().all(|v| v.is_nan()));
    assert!(clip_by_norm(&t, -1.0, None).is_err());
    Ok(())
}

/// Collects the warnings logged through the `log` crate.
struct Capture(std::sync::Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record) {
        self.0.lock().unwrap().push(format!("{}", r.args()));
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(std::sync::Mutex::new(Vec::new()));

#[test]
fn skipped_variables_are_named_in_a_warning_once() -> Result<()> {
    let _ = log::set_logger(&CAPTURE);
    log::set_max_level(log::LevelFilter::Warn);
    let a = Variable::builder(Tensor::scalar(1.0f32)).name("warned/a").build();
    let b = Variable::builder(Tensor::scalar(1.0f32)).name("warned/b").build();
    let mut opt = Sgd::new(0.1).with_name("sgd_warning_test");
    for _ in 0..3 {
        opt.apply_gradients([(Some(Tensor::scalar(1.0f32)), &a), (None, &b)])?;
    }
    let mine: Vec<String> = CAPTURE
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.starts_with("sgd_warning_test"))
        .cloned()
        .collect();
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert!(
        mine[0].contains("gradients do not exist for variables [\"warned/b\"]"),
        "{}",
        mine[0]
    );
    Ok(())
}

/// A learning rate (constant, or from a schedule at some step) or a weight
/// decay that is NaN or infinite is refused when the step runs, naming the
/// optimizer and the step, and nothing is updated: before, every weight
/// became NaN or ±inf without a word. Eagerly and in a traced step alike.
#[test]
fn non_finite_learning_rates_and_decays_are_errors() -> Result<()> {
    use gradtape::optim::LearningRateSchedule;
    /// finite for two steps, then a 0/0 (a warm-up over 0 steps, say)
    struct Broken;
    impl LearningRateSchedule for Broken {
        fn lr(&self, step: u64) -> f64 {
            let warm = step.saturating_sub(2) as f64;
            if step < 2 {
                0.5
            } else {
                warm * 0.0 / 0.0
            }
        }
    }
    let g = || Some(Gradient::from(Tensor::vector(&[1.0f64, -1.0])));
    for lr in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let w = Variable::new(Tensor::vector(&[1.0f64, 2.0]));
        let e = Sgd::new(lr).apply(vec![(g(), w.clone())]).unwrap_err().to_string();
        assert!(e.contains("learning rate at step 0") && e.contains("sgd"), "{e}");
        assert_eq!(w.read().to_vec::<f64>()?, vec![1.0, 2.0], "nothing is updated");
    }
    // a negative rate is allowed (ascent), as in Keras
    let w = Variable::new(Tensor::vector(&[1.0f64, 2.0]));
    Sgd::new(-1.0).apply(vec![(g(), w.clone())])?;
    assert_eq!(w.read().to_vec::<f64>()?, vec![2.0, 1.0]);
    // a schedule that breaks at step 2
    let w = Variable::new(Tensor::vector(&[1.0f64, 2.0]));
    let mut adam = Adam::new(Broken);
    adam.apply(vec![(g(), w.clone())])?;
    adam.apply(vec![(g(), w.clone())])?;
    let before = w.read().to_vec::<f64>()?;
    let e = adam.apply(vec![(g(), w.clone())]).unwrap_err().to_string();
    assert!(e.contains("learning rate at step 2") && e.contains("NaN"), "{e}");
    assert_eq!(w.read().to_vec::<f64>()?, before);
    assert_eq!(adam.iterations(), 2, "the failed step is not counted");
    // a NaN weight decay
    let w = Variable::new(Tensor::vector(&[1.0f64, 2.0]));
    let e = AdamW::new(0.1)
        .weight_decay(f64::NAN)
        .apply(vec![(g(), w.clone())])
        .unwrap_err();
    assert!(e.to_string().contains("weight decay"), "{e}");
    assert_eq!(w.read().to_vec::<f64>()?, vec![1.0, 2.0]);
    // inside a traced step: the error comes out of the call
    let w = Variable::new(Tensor::vector(&[1.0f64, 2.0]));
    let opt = std::sync::Mutex::new(Sgd::new(Broken));
    let step = {
        let w = w.clone();
        gradtape::function(move |x: &Tensor| {
            let tape = GradientTape::new();
            let loss = tape.record(|| w.read().mul(x)?.sum_all())?;
            let dw = tape.gradient(&loss, &w)?;
            opt.lock().unwrap().apply(vec![(dw.map(Gradient::from), w.clone())])
        })
    };
    let x = Tensor::vector(&[1.0f64, 1.0]);
    step.call(&x)?;
    step.call(&x)?;
    assert_eq!(w.read().to_vec::<f64>()?, vec![0.0, 1.0]);
    let e = step.call(&x).unwrap_err().to_string();
    assert!(e.contains("learning rate at step 2"), "{e}");
    assert_eq!(w.read().to_vec::<f64>()?, vec![0.0, 1.0]);
    Ok(())
}
