//! `BatchNorm` on other axes than the last (`BatchNormBuilder::axis`,
//! `axes`) against Keras 3.15's `BatchNormalization(axis=...)` (TensorFlow
//! backend, f64, momentum 0.9; `tests/reference/keras_batch_norm_axis.py`
//! prints the numbers below): channels first (`[N, C, H, W]`, axis 1), a
//! `[batch, time, features]` input on axis -1 and on axis 1, and two
//! feature axes (Keras 2's `axis=[1, 2]`, which Keras 3 does not take:
//! the script computes it with `tf.nn.moments` and
//! `tf.nn.batch_normalization`). Each: a training call (output,
//! gradients of the input, gamma and beta, the moving statistics it
//! leaves), then an inference call with those statistics; traced steps
//! against eager ones; bad axes; the default layer's checkpoint names and
//! shapes unchanged.

use gradtape::nn::{BatchNorm, Layer, Module};
use gradtape::{function, DType, GradientTape, Result, Tensor, Variable};

use super::sums_util::{check_against, init, sin_weighted, Sums, Want};

type Step = (Sums, &'static [Sums]);

struct Case {
    shape: Vec<usize>,
    axes: &'static [isize],
    features: usize,
    /// the training call: output, gradients of x, gamma, beta
    train: Step,
    moving_mean: &'static [f64],
    moving_variance: &'static [f64],
    /// the inference call after it
    infer: Step,
}

fn cases() -> Vec<Case> {
    vec![
        // BatchNormalization(axis=1, momentum=0.9): [2, 3, 4, 5]
        Case {
            shape: vec![2, 3, 4, 5],
            axes: &[1],
            features: 3,
            train: (
                (77.34103755699525, -1.4525755316684519),
                &[
                    (4.107825191113079e-15, 11.32411730442145),
                    (1.2102590886072453, 0.3411349870807464),
                    (1.828445437743568, -5.50386209586621),
                ],
            ),
            moving_mean: &[0.7366247165724723, 0.8616833417243122, 0.9940889335213681],
            moving_variance: &[1.1771998020015346, 1.265342155577327, 1.3387276727889854],
            infer: (
                (37.360529133772104, -0.8841758437333265),
                &[
                    (6.3508047016582125, 37.726177608979306),
                    (5.371175013280888, 3.6248224337728443),
                    (1.828445437743568, -5.50386209586621),
                ],
            ),
        },
        // BatchNormalization(axis=-1, momentum=0.9): [4, 5, 3]
        Case {
            shape: vec![4, 5, 3],
            axes: &[-1],
            features: 3,
            train: (
                (38.67051877849764, -1.4918703174558599),
                &[
                    (9.992007221626409e-16, 20.331274969871036),
                    (-2.603286469406126, -0.2227131380301377),
                    (0.5376729129856666, 0.035112126825022086),
                ],
            ),
            moving_mean: &[0.74890590511093, 0.8683421952206112, 0.9961235799573454],
            moving_variance: &[1.1617108149896476, 1.2712651219529476, 1.3454245892398404],
            infer: (
                (21.186803368521108, -1.548115693201962),
                &[
                    (0.3503399141890479, 19.324191322496095),
                    (-2.6769231541395864, -0.2236813454835323),
                    (0.5376729129856666, 0.035112126825022086),
                ],
            ),
        },
        // BatchNormalization(axis=1, momentum=0.9): [4, 5, 3]
        Case {
            shape: vec![4, 5, 3],
            axes: &[1],
            features: 5,
            train: (
                (44.672920841209354, 1.1088720281643414),
                &[
                    (2.609024107869118e-15, 19.163833404253925),
                    (-0.9788528013888533, -2.1676272106526704),
                    (0.5376729129856674, -0.06293919502100556),
                ],
            ),
            moving_mean: &[
                0.7633566005142886,
                0.9573180781647572,
                1.0524307423167394,
                1.0722211890128914,
                1.1156647838945426,
            ],
            moving_variance: &[
                1.1505566671884855,
                1.183158982696735,
                1.3062865020392915,
                1.348644373305236,
                1.2600269545127665,
            ],
            infer: (
                (24.310970041720964, 0.18068477900413685),
                &[
                    (0.3895794332501265, 18.59969308839151),
                    (-2.0008036389797272, -2.032413394391069),
                    (0.5376729129856674, -0.06293919502100556),
                ],
            ),
        },
        // axes [1, 2] (tf.nn.moments over axis 0, tf.nn.batch_normalization): [2, 3, 4]
        Case {
            shape: vec![2, 3, 4],
            axes: &[1, 2],
            features: 12,
            train: (
                (25.564714843060102, 17.672461432037494),
                &[
                    (-8.881784197001252e-16, 2.8290608757695415),
                    (-2.2250885288002635, 0.1631761400553057),
                    (17.02172487055253, 9.166930236572192),
                ],
            ),
            moving_mean: &[
                0.7439366674153497,
                0.8990738553593122,
                1.0583967518992894,
                1.2003417504060894,
                1.305697261225908,
                1.3602039102143253,
                1.3564844781330099,
                1.2950423726655222,
                1.1841934945489405,
                1.0389407194207492,
                0.8789433289829776,
                0.725856219449688,
            ],
            moving_variance: &[
                1.1931504688458234,
                1.2750902433778242,
                1.2986517329984166,
                1.2797447795452461,
                1.2390721057640397,
                1.1898369739624928,
                1.1319294355886194,
                1.0554842794643031,
                0.9514758801223442,
                0.8230726101352117,
                0.6909139394487712,
                0.5886114341851951,
            ],
            infer: (
                (9.832134982050597, 5.463455367938008),
                &[
                    (17.1625425315777, 14.293162089987),
                    (-12.083979265219638, -7.303329399915099),
                    (17.02172487055253, 9.166930236572192),
                ],
            ),
        },
    ]
}

/// The layer of `c`, its weights set as the script's:
/// `init([F], 10 + i, 0.4) + 1` for gamma, beta, moving mean, moving
/// variance.
fn layer(c: &Case) -> Result<BatchNorm> {
    let bn = BatchNorm::builder(c.features)
        .axes(c.axes)
        .momentum(0.9)
        .dtype(DType::F64)
        .build()?;
    for (i, v) in bn.variables().iter().enumerate() {
        v.assign(&init(&[c.features], 10.0 + i as f64, 0.4).add_scalar(1.0)?)?;
    }
    Ok(bn)
}

fn input(c: &Case) -> Result<Tensor> {
    init(&c.shape, 1.0, 1.5).add_scalar(0.3)
}

fn close(what: &str, got: &Variable, want: &[f64]) {
    let g = got.read().to_vec_f64();
    assert_eq!(g.len(), want.len(), "{what}");
    for (a, b) in g.iter().zip(want) {
        assert!(
            (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
            "{what}: {g:?} against {want:?}"
        );
    }
}

#[test]
fn batch_norm_on_other_axes_matches_keras() -> Result<()> {
    for c in cases() {
        let bn = layer(&c)?;
        let x = input(&c)?;
        let what = format!("axes {:?} on {:?}", c.axes, c.shape);
        let vars = bn.trainable_variables();
        let train = |x: &Tensor| bn.forward(x, true);
        let want = |(y, grads): Step| Want { shape: None, y, grads };
        check_against(&format!("{what}, training"), &train, &x, &vars, &want(c.train), 1e-10)?;
        close(&format!("{what}: moving mean"), bn.moving_mean(), c.moving_mean);
        close(
            &format!("{what}: moving variance"),
            bn.moving_variance(),
            c.moving_variance,
        );
        let infer = |x: &Tensor| bn.forward(x, false);
        check_against(&format!("{what}, inference"), &infer, &x, &vars, &want(c.infer), 1e-10)?;
    }
    Ok(())
}

/// The same training steps traced (the tape inside the function, the
/// moving statistics assigned by the graph) give the eager steps'
/// outputs, gradients and statistics, and inference too.
#[test]
fn batch_norm_on_other_axes_traced_equals_eager() -> Result<()> {
    for c in cases() {
        let (eager, traced) = (layer(&c)?, std::sync::Arc::new(layer(&c)?));
        let x = input(&c)?;
        let step = |bn: &BatchNorm, x: &Tensor, training: bool| -> Result<Vec<Tensor>> {
            let vars = bn.trainable_variables();
            let tape = GradientTape::persistent();
            let loss = tape.record(|| {
                tape.watch(x);
                sin_weighted(&bn.forward(x, training)?)
            })?;
            let mut out = vec![loss.clone()];
            out.extend(tape.gradient(&loss, std::slice::from_ref(x))?.into_iter().flatten());
            out.extend(tape.gradient(&loss, &vars)?.into_iter().flatten());
            Ok(out)
        };
        for training in [true, true, false] {
            let t = traced.clone();
            let f = function(move |x: &Tensor| step(&t, x, training));
            let (want, got) = (step(&eager, &x, training)?, f.call(&x)?);
            assert_eq!(want.len(), 4);
            for (w, g) in want.iter().zip(&got) {
                let (w, g) = (w.to_vec_f64(), g.to_vec_f64());
                assert!(
                    w.iter().zip(&g).all(|(a, b)| (a - b).abs() <= 1e-12 * (1.0 + a.abs())),
                    "axes {:?}, training {training}: {w:?} against {g:?}",
                    c.axes
                );
            }
            close(
                "traced moving mean",
                traced.moving_mean(),
                &eager.moving_mean().read().to_vec_f64(),
            );
            close(
                "traced moving variance",
                traced.moving_variance(),
                &eager.moving_variance().read().to_vec_f64(),
            );
        }
    }
    Ok(())
}

#[test]
fn batch_norm_axes_are_checked_and_the_default_is_unchanged() -> Result<()> {
    let x = init(&[2, 3, 4], 1.0, 1.0);
    let err = |bn: BatchNorm| bn.forward(&x, true).unwrap_err().to_string();
    let b = |f: usize| BatchNorm::builder(f).dtype(DType::F64).name("bn");
    let e = err(b(3).axis(3).build()?);
    assert!(
        e.contains("BatchNorm") && e.contains("axis 3") && e.contains("out of range") && e.contains("[2, 3, 4]"),
        "{e}"
    );
    let e = err(b(9).axes(&[1, -2]).build()?);
    assert!(e.contains("repeated"), "{e}");
    let e = err(b(4).axis(1).build()?);
    assert!(
        e.contains("normalises 4 features on axes [1]") && e.contains("[2, 3, 4]"),
        "{e}"
    );
    assert!(b(3).axes(&[]).build().is_err());
    // channels last by default: its variables' names and shapes as before
    let bn = b(4).build()?;
    let vars: Vec<(String, Vec<usize>)> = bn
        .variables()
        .iter()
        .map(|v| (v.name().to_string(), v.shape().to_vec()))
        .collect();
    let want: Vec<(String, Vec<usize>)> = ["gamma", "beta", "moving_mean", "moving_variance"]
        .iter()
        .map(|p| (format!("bn/{p}"), vec![4]))
        .collect();
    assert_eq!(vars, want);
    // axis -1 and axis 2 (the same axis of a rank-3 input) agree, value for value
    let last = b(4).axis(2).build()?;
    assert_eq!(bn.forward(&x, true)?.to_vec_f64(), last.forward(&x, true)?.to_vec_f64());
    Ok(())
}
