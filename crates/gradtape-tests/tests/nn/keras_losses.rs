//! Every loss of `nn::losses` against Keras 3.15's (TensorFlow backend,
//! float64): per-sample values, the four reductions, sample weights of
//! either rank, and the gradient with respect to the predictions, in f64
//! to 1e-12 of the result's magnitude. The cases (clipped probabilities, a
//! saturated logit, a zero vector for the cosine, labels that are and are
//! not binary for the hinges, label smoothing, focal exponents of 0, 1.5
//! and 2) are printed by `tests/reference/keras_losses.py` into
//! `tests/data/keras_losses.txt`; the traced function gives the same
//! numbers.

use gradtape::nn::losses::{Loss, Reduction};
use gradtape::{function, GradientTape, Result, Tensor};

use super::tf_util::{all_agree, floats, magnitude, report, weighted};

/// The `k=v;k=v` options of a line.
fn option(cfg: &str, key: &str) -> Option<String> {
    cfg.split(';')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.to_string())
}

fn loss_of(name: &str, cfg: &str) -> Loss {
    let f = |k: &str| {
        option(cfg, k)
            .unwrap_or_else(|| panic!("{name}: no {k}"))
            .parse::<f64>()
            .unwrap()
    };
    let b = |k: &str| option(cfg, k).unwrap_or_else(|| panic!("{name}: no {k}")) == "True";
    match name {
        "mean_squared_error" => Loss::MeanSquaredError,
        "mean_absolute_error" => Loss::MeanAbsoluteError,
        "mean_absolute_percentage_error" => Loss::MeanAbsolutePercentageError,
        "mean_squared_logarithmic_error" => Loss::MeanSquaredLogarithmicError,
        "huber" => Loss::Huber { delta: f("delta") },
        "log_cosh" => Loss::LogCosh,
        "poisson" => Loss::Poisson,
        "kl_divergence" => Loss::KLDivergence,
        "cosine_similarity" => Loss::CosineSimilarity {
            axis: option(cfg, "axis").unwrap().parse().unwrap(),
        },
        "binary_crossentropy" => Loss::BinaryCrossentropy {
            from_logits: b("from_logits"),
            label_smoothing: option(cfg, "label_smoothing").map_or(0.0, |v| v.parse().unwrap()),
        },
        "categorical_crossentropy" => Loss::CategoricalCrossentropy {
            from_logits: b("from_logits"),
            label_smoothing: option(cfg, "label_smoothing").map_or(0.0, |v| v.parse().unwrap()),
        },
        "binary_focal_crossentropy" => Loss::BinaryFocalCrossentropy {
            apply_class_balancing: b("apply_class_balancing"),
            alpha: f("alpha"),
            gamma: f("gamma"),
            from_logits: b("from_logits"),
            label_smoothing: f("label_smoothing"),
        },
        "categorical_focal_crossentropy" => Loss::CategoricalFocalCrossentropy {
            alpha: f("alpha"),
            gamma: f("gamma"),
            from_logits: b("from_logits"),
            label_smoothing: f("label_smoothing"),
        },
        "sparse_categorical_crossentropy" => Loss::SparseCategoricalCrossentropy {
            from_logits: b("from_logits"),
        },
        "hinge" => Loss::Hinge,
        "squared_hinge" => Loss::SquaredHinge,
        "categorical_hinge" => Loss::CategoricalHinge,
        _ => panic!("no loss {name}"),
    }
}

fn reduction_of(name: &str) -> Reduction {
    match name {
        "none" => Reduction::None,
        "sum" => Reduction::Sum,
        "sum_over_batch_size" => Reduction::SumOverBatchSize,
        "mean_with_sample_weight" => Reduction::MeanWithSampleWeight,
        _ => panic!("no reduction {name}"),
    }
}

fn shape_of(s: &str) -> Vec<usize> {
    s.split(',').map(|d| d.parse().unwrap()).collect()
}

#[test]
fn losses_match_keras() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    let mut names = std::collections::BTreeSet::new();
    for line in DATA.lines() {
        let [name, cfg, shape, y_true, y_pred, w, red, value, grad] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        names.insert(name);
        let shape = shape_of(shape);
        let loss = loss_of(name, cfg);
        let reduction = reduction_of(red);
        // sparse labels: the predictions' shape without the last axis
        let true_shape = &shape[..shape.len() - usize::from(name.starts_with("sparse"))];
        let y_true = Tensor::from_vec(floats(y_true).unwrap(), true_shape)?;
        let y_pred = Tensor::from_vec(floats(y_pred).unwrap(), &shape)?;
        let weights = (w != "none").then(|| {
            let (ws, wv) = w.split_once(':').unwrap();
            Tensor::from_vec(floats(wv).unwrap(), &shape_of(ws)).unwrap()
        });
        let value_and_grad = move |(t, p, w): &(Tensor, Tensor, Option<Tensor>)| -> Result<Vec<Tensor>> {
            let tape = GradientTape::new();
            let (v, s) = tape.record(|| {
                tape.watch(p);
                let v = loss.compute_weighted(t, p, w.as_ref(), reduction)?;
                let s = weighted(&v)?;
                Ok((v, s))
            })?;
            Ok(vec![v, tape.gradient(&s, std::slice::from_ref(p))?[0].clone().unwrap()])
        };
        let args = (y_true, y_pred, weights);
        let eager = value_and_grad(&args)?;
        let traced = function(value_and_grad).call(&args)?;
        for (how, got) in [("eager", &eager), ("traced", &traced)] {
            for ((what, got), want) in ["value", "grad"].iter().zip(got).zip([value, grad]) {
                checked += 1;
                let got = got.to_vec::<f64>()?;
                let want = floats(want).unwrap();
                if !all_agree(&got, &want, 1e-12, magnitude(&want)) {
                    bad.push(format!(
                        "{name} {cfg} {red} w={w} {how} {what}: got {got:?}, Keras {want:?}"
                    ));
                }
            }
        }
    }
    // every loss of Loss is in the data
    assert_eq!(names.len(), 17, "{names:?}");
    report(checked, 200, &bad);
    Ok(())
}

const DATA: &str = include_str!("../data/keras_losses.txt");

/// Bad options and weights are errors naming the loss or the shapes.
#[test]
fn bad_loss_options_and_weights_are_errors() -> Result<()> {
    let y = Tensor::from_vec(vec![0.0f64, 1.0, 1.0, 0.0], &[2, 2])?;
    let p = Tensor::from_vec(vec![0.2f64, 0.7, 0.6, 0.1], &[2, 2])?;
    let focal = Loss::BinaryFocalCrossentropy {
        apply_class_balancing: false,
        alpha: 0.25,
        gamma: f64::NAN,
        from_logits: false,
        label_smoothing: 0.0,
    };
    let e = focal.call(&y, &p).unwrap_err().to_string();
    assert!(e.contains("binary_focal_crossentropy") && e.contains("gamma"), "{e}");
    let e = Loss::Poisson.call(&y, &p.reshape(&[4])?).unwrap_err().to_string();
    assert!(
        e.contains("poisson") && e.contains("[2, 2]") && e.contains("[4]"),
        "{e}"
    );
    let w = Tensor::vector(&[1.0f64, 2.0, 3.0]);
    let e = Loss::LogCosh
        .compute_weighted(&y, &p, Some(&w), Reduction::Sum)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("sample_weight") && e.contains("[3]") && e.contains("[2]"),
        "{e}"
    );
    // weights [2, 1] against per-sample losses [2]: Keras makes the losses
    // [2, 1] (its rank adjustment), weighted as by weights [2]
    let w1 = Tensor::from_vec(vec![1.0f64, 2.0], &[2, 1])?;
    let a = Loss::LogCosh.compute_weighted(&y, &p, Some(&w1), Reduction::None)?;
    let b = Loss::LogCosh.compute_weighted(&y, &p, Some(&w1.reshape(&[2])?), Reduction::None)?;
    assert_eq!(a.shape(), &[2, 1]);
    assert_eq!(a.to_vec::<f64>()?, b.to_vec::<f64>()?);
    Ok(())
}

/// Labels `[4]` against predictions `[4, 1]` (a `Dense(1)`'s), and `[4, 1]`
/// against `[4]`: Keras's rank adjustment makes both the `[4, 1]` against
/// `[4, 1]` loss, for every loss but the sparse cross-entropy (gradtape
/// refused them). Keras 3.15's numbers for `y = [0, 1, 1, 0]`, `p = [1/4,
/// 3/4, 1/2, 1/8]` (float64, printed by hand with `keras.losses.*()(y, p)`;
/// each of the three layouts gave the same); a length that differs is
/// still an error naming the shapes as given.
#[test]
fn labels_of_one_rank_less_are_adjusted_as_keras_does() -> Result<()> {
    let y = Tensor::vector(&[0.0f64, 1.0, 1.0, 0.0]);
    let p = Tensor::vector(&[0.25f64, 0.75, 0.5, 0.125]);
    let col = |t: &Tensor| t.reshape(&[4, 1]);
    let focal = Loss::BinaryFocalCrossentropy {
        apply_class_balancing: false,
        alpha: 0.25,
        gamma: 2.0,
        from_logits: false,
        label_smoothing: 0.0,
    };
    let bce = Loss::BinaryCrossentropy {
        from_logits: false,
        label_smoothing: 0.0,
    };
    let cases = [
        (Loss::MeanSquaredError, 0.09765625),
        (Loss::MeanAbsoluteError, 0.28125),
        (Loss::MeanSquaredLogarithmicError, 0.041064356855662905),
        (Loss::Huber { delta: 0.25 }, 0.041015625),
        // Keras's 0.0474415864747203 has float32's log 2 (see
        // keras_losses.py): mean(log(cosh(p - y))) in f64
        (Loss::LogCosh, 0.04744158837937462),
        (Loss::Poisson, 0.6514572299196055),
        (Loss::KLDivergence, 0.24520659399154657),
        (Loss::CosineSimilarity { axis: -1 }, -0.5),
        (bce, 0.35051067952200743),
        (Loss::Hinge, 0.78125),
        (Loss::SquaredHinge, 0.78515625),
        (Loss::CategoricalHinge, 0.78125),
        (focal, 0.05283337055155427),
    ];
    for (loss, want) in cases {
        for (t, q) in [(y.clone(), col(&p)?), (col(&y)?, p.clone()), (col(&y)?, col(&p)?)] {
            let got = loss.call(&t, &q)?.item()?;
            assert!(
                (got - want).abs() <= 1e-12 * want.abs(),
                "{loss:?} {:?} against {:?}: {got}, Keras {want}",
                t.shape(),
                q.shape()
            );
        }
    }
    let e = Loss::MeanSquaredError
        .call(&y.narrow(0, 0, 3)?, &col(&p)?)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("mean_squared_error") && e.contains("[3]") && e.contains("[4, 1]"),
        "{e}"
    );
    Ok(())
}
