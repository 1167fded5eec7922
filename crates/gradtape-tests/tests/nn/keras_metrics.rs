//! Every metric of `nn::metrics` against Keras 3.15.1's (TensorFlow 2.21
//! backend, `dtype="float64"` and floatx float64): the result after each
//! of several `update_state` calls (with no weights, per-sample and
//! per-element weights, scalar weights, labels of rank one more or one
//! less than the predictions), after `reset_state`, and after the first
//! update again, in f64 to 1e-12 of the result's magnitude (MeanIoU to
//! 1e-6: Keras divides in float32). The numbers are printed by
//! `tests/reference/keras_metrics.py` into `tests/data/keras_metrics.txt`.
//! Bad inputs, f32 and integer inputs, and the older API are checked
//! below without Keras.

use std::collections::BTreeSet;

use gradtape::nn::metrics::{self, *};
use gradtape::{DType, Result, Tensor};

use super::tf_util::{agrees, floats, magnitude, report};

/// The `k=v;k=v` options of a line.
pub(super) fn option<'a>(cfg: &'a str, key: &str) -> Option<&'a str> {
    cfg.split(';')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

pub(super) fn number(cfg: &str, key: &str) -> Option<f64> {
    option(cfg, key).filter(|v| *v != "None").map(|v| v.parse().unwrap())
}

/// An `AUC` from a line's options (every one Keras's scripts set: the
/// curve, summation, logits, thresholds, and the multi-label ones).
pub(super) fn auc(cfg: &str) -> Result<AUC> {
    let mut m = AUC::new()
        .curve(if option(cfg, "curve") == Some("PR") {
            AucCurve::PR
        } else {
            AucCurve::ROC
        })
        .summation_method(match option(cfg, "summation_method") {
            Some("minoring") => AucSummation::Minoring,
            Some("majoring") => AucSummation::Majoring,
            _ => AucSummation::Interpolation,
        })
        .from_logits(flag(cfg, "from_logits").unwrap_or(false))
        .multi_label(flag(cfg, "multi_label").unwrap_or(false));
    if let Some(n) = int(cfg, "num_labels") {
        m = m.num_labels(n)?;
    }
    if let Some(w) = list(cfg, "label_weights") {
        m = m.label_weights(&w)?;
    }
    if let Some(n) = int(cfg, "num_thresholds") {
        m = m.num_thresholds(n)?;
    }
    if let Some(t) = list(cfg, "thresholds") {
        m = m.thresholds(&t)?;
    }
    Ok(m)
}

pub(super) fn int(cfg: &str, key: &str) -> Option<usize> {
    option(cfg, key).filter(|v| *v != "None").map(|v| v.parse().unwrap())
}

pub(super) fn flag(cfg: &str, key: &str) -> Option<bool> {
    option(cfg, key).map(|v| v == "True")
}

pub(super) fn list(cfg: &str, key: &str) -> Option<Vec<f64>> {
    option(cfg, key).map(|v| floats(v).unwrap())
}

/// A metric under test: a reduction of values, or a [`Metric`].
enum Subject {
    Mean(Mean),
    Sum(Sum),
    Metric(Box<dyn Metric>),
}

impl Subject {
    fn update(&mut self, y_true: &Tensor, y_pred: Option<&Tensor>, w: Option<&Tensor>) -> Result<()> {
        match self {
            Subject::Mean(m) => m.update_state(y_true, w),
            Subject::Sum(m) => m.update_state(y_true, w),
            Subject::Metric(m) => m.update_state(y_true, y_pred.unwrap(), w),
        }
    }

    /// The result's shape and values.
    fn result(&self) -> (Vec<usize>, Vec<f64>) {
        match self {
            Subject::Mean(m) => (vec![], vec![m.result()]),
            Subject::Sum(m) => (vec![], vec![m.result()]),
            Subject::Metric(m) => (m.result().shape().to_vec(), m.values()),
        }
    }

    fn reset(&mut self) {
        match self {
            Subject::Mean(m) => m.reset(),
            Subject::Sum(m) => m.reset(),
            Subject::Metric(m) => m.reset_state(),
        }
    }
}

fn subject(name: &str, cfg: &str) -> Result<Subject> {
    let m: Box<dyn Metric> = match name {
        "mean" => return Ok(Subject::Mean(Mean::default())),
        "sum" => return Ok(Subject::Sum(Sum::default())),
        "mean_squared_error" => Box::new(MeanSquaredError::new()),
        "mean_absolute_error" => Box::new(MeanAbsoluteError::new()),
        "root_mean_squared_error" => Box::new(RootMeanSquaredError::new()),
        "mean_absolute_percentage_error" => Box::new(MeanAbsolutePercentageError::new()),
        "mean_squared_logarithmic_error" => Box::new(MeanSquaredLogarithmicError::new()),
        "logcosh" => Box::new(LogCoshError::new()),
        "cosine_similarity" => Box::new(CosineSimilarity::new(int(cfg, "axis").map_or(-1, |a| a as isize))),
        "r2_score" => {
            let agg = match option(cfg, "class_aggregation") {
                None | Some("uniform_average") => R2Aggregation::UniformAverage,
                Some("variance_weighted_average") => R2Aggregation::VarianceWeightedAverage,
                Some(_) => R2Aggregation::None,
            };
            Box::new(R2Score::new(agg, int(cfg, "num_regressors").unwrap_or(0)))
        }
        "accuracy" => Box::new(Accuracy::new()),
        "binary_accuracy" => Box::new(BinaryAccuracy::new(number(cfg, "threshold").unwrap())?),
        "categorical_accuracy" => Box::new(CategoricalAccuracy::new()),
        "sparse_categorical_accuracy" => Box::new(SparseCategoricalAccuracy::default()),
        "top_k_categorical_accuracy" => Box::new(TopKCategoricalAccuracy::new(int(cfg, "k").unwrap())?),
        "sparse_top_k_categorical_accuracy" => Box::new(
            SparseTopKCategoricalAccuracy::new(int(cfg, "k").unwrap())?
                .from_sorted_ids(flag(cfg, "from_sorted_ids").unwrap_or(false)),
        ),
        "true_positives" | "false_positives" | "true_negatives" | "false_negatives" => {
            let t = list(cfg, "thresholds");
            macro_rules! count {
                ($ty:ident) => {
                    match t {
                        Some(t) => Box::new($ty::with_thresholds(&t)?) as Box<dyn Metric>,
                        None => Box::new($ty::new()),
                    }
                };
            }
            match name {
                "true_positives" => count!(TruePositives),
                "false_positives" => count!(FalsePositives),
                "true_negatives" => count!(TrueNegatives),
                _ => count!(FalseNegatives),
            }
        }
        "precision" | "recall" => {
            macro_rules! rate {
                ($ty:ident) => {{
                    let mut m = match list(cfg, "thresholds") {
                        Some(t) => $ty::with_thresholds(&t)?,
                        None => $ty::new(),
                    };
                    if let Some(k) = int(cfg, "top_k") {
                        m = m.top_k(k)?;
                    }
                    if let Some(c) = int(cfg, "class_id") {
                        m = m.class_id(c);
                    }
                    Box::new(m) as Box<dyn Metric>
                }};
            }
            if name == "precision" {
                rate!(Precision)
            } else {
                rate!(Recall)
            }
        }
        "auc" => Box::new(auc(cfg)?),
        "precision_at_recall" | "recall_at_precision" | "sensitivity_at_specificity" | "specificity_at_sensitivity" => {
            macro_rules! at {
                ($ty:ident, $key:literal) => {{
                    let mut m = $ty::new(number(cfg, $key).unwrap())?;
                    if let Some(n) = int(cfg, "num_thresholds") {
                        m = m.num_thresholds(n)?;
                    }
                    if let Some(c) = int(cfg, "class_id") {
                        m = m.class_id(c);
                    }
                    Box::new(m) as Box<dyn Metric>
                }};
            }
            match name {
                "precision_at_recall" => at!(PrecisionAtRecall, "recall"),
                "recall_at_precision" => at!(RecallAtPrecision, "precision"),
                "sensitivity_at_specificity" => at!(SensitivityAtSpecificity, "specificity"),
                _ => at!(SpecificityAtSensitivity, "sensitivity"),
            }
        }
        "f1_score" | "fbeta_score" => {
            let average = match option(cfg, "average") {
                Some("micro") => FScoreAverage::Micro,
                Some("macro") => FScoreAverage::Macro,
                Some("weighted") => FScoreAverage::Weighted,
                _ => FScoreAverage::None,
            };
            let threshold = number(cfg, "threshold");
            if name == "f1_score" {
                Box::new(F1Score::new(average, threshold)?)
            } else {
                Box::new(FBetaScore::new(average, number(cfg, "beta").unwrap(), threshold)?)
            }
        }
        "mean_io_u" => {
            let mut m = MeanIoU::new(int(cfg, "num_classes").unwrap())?
                .sparse_y_true(flag(cfg, "sparse_y_true").unwrap_or(true))
                .sparse_y_pred(flag(cfg, "sparse_y_pred").unwrap_or(true));
            if let Some(c) = int(cfg, "ignore_class") {
                m = m.ignore_class(c as i64);
            }
            Box::new(m)
        }
        _ => panic!("no metric {name}"),
    };
    assert_eq!(m.name(), name);
    Ok(Subject::Metric(m))
}

/// `dtype:shape:values` (`-`: none).
pub(super) fn tensor(spec: &str) -> Option<Tensor> {
    if spec == "-" {
        return None;
    }
    let [dtype, shape, values] = spec.split(':').collect::<Vec<_>>()[..] else {
        panic!("bad tensor {spec}");
    };
    let shape: Vec<usize> = shape
        .split('x')
        .filter(|d| !d.is_empty())
        .map(|d| d.parse().unwrap())
        .collect();
    Some(match dtype {
        "i64" => Tensor::from_vec(values.split(',').map(|v| v.parse::<i64>().unwrap()).collect(), &shape).unwrap(),
        _ => Tensor::from_vec(floats(values).unwrap(), &shape).unwrap(),
    })
}

/// `shape:values`.
pub(super) fn expected(spec: &str) -> (Vec<usize>, Vec<f64>) {
    let (shape, values) = spec.split_once(':').unwrap();
    let shape = shape
        .split('x')
        .filter(|d| !d.is_empty())
        .map(|d| d.parse().unwrap())
        .collect();
    (shape, floats(values).unwrap())
}

pub(super) type Update = (Tensor, Option<Tensor>, Option<Tensor>);

/// The updates of a data line: `y_true y_pred weight` triples separated
/// by `;` (see [`tensor`]).
pub(super) fn parse_updates(updates: &str) -> Vec<Update> {
    updates
        .split(';')
        .map(|u| {
            let [t, p, w] = u.split(' ').collect::<Vec<_>>()[..] else {
                panic!("bad update {u}")
            };
            (tensor(t).unwrap(), tensor(p), tensor(w))
        })
        .collect()
}

#[test]
fn metrics_match_keras() -> Result<()> {
    let (mut bad, mut checked, mut names) = (Vec::new(), 0, BTreeSet::new());
    for line in DATA.lines() {
        let [name, cfg, updates, results, reset] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        names.insert(name);
        let rel = if name == "mean_io_u" { 1e-6 } else { 1e-12 };
        let updates = parse_updates(updates);
        let results: Vec<_> = results.split(';').map(expected).collect();
        let mut m = subject(name, cfg)?;
        let mut check = |what: String, m: &Subject, (shape, want): &(Vec<usize>, Vec<f64>)| {
            checked += 1;
            let (got_shape, got) = m.result();
            let ok = got_shape == *shape
                && got.len() == want.len()
                && got.iter().zip(want).all(|(g, w)| agrees(*g, *w, rel, magnitude(want)));
            if !ok {
                bad.push(format!(
                    "{name} {cfg} {what}: got {got:?} {got_shape:?}, Keras {want:?} {shape:?}"
                ));
            }
        };
        for (i, ((t, p, w), want)) in updates.iter().zip(&results).enumerate() {
            m.update(t, p.as_ref(), w.as_ref())?;
            check(format!("after update {}", i + 1), &m, want);
        }
        m.reset();
        check("after reset".into(), &m, &expected(reset));
        let (t, p, w) = &updates[0];
        m.update(t, p.as_ref(), w.as_ref())?;
        check("after reset and update 1".into(), &m, &results[0]);
    }
    // every metric is in the data
    assert_eq!(names.len(), 30, "{names:?}");
    report(checked, 400, &bad);
    Ok(())
}

const DATA: &str = include_str!("../data/keras_metrics.txt");

pub(super) fn t64(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

/// Every metric, with its default options.
fn every_metric() -> Vec<(&'static str, Box<dyn Metric>)> {
    vec![
        ("MeanSquaredError", Box::new(MeanSquaredError::new())),
        ("MeanAbsoluteError", Box::new(MeanAbsoluteError::new())),
        ("RootMeanSquaredError", Box::new(RootMeanSquaredError::new())),
        (
            "MeanAbsolutePercentageError",
            Box::new(MeanAbsolutePercentageError::new()),
        ),
        (
            "MeanSquaredLogarithmicError",
            Box::new(MeanSquaredLogarithmicError::new()),
        ),
        ("LogCoshError", Box::new(LogCoshError::new())),
        ("CosineSimilarity", Box::new(CosineSimilarity::default())),
        ("R2Score", Box::new(R2Score::default())),
        ("Accuracy", Box::new(Accuracy::new())),
        ("BinaryAccuracy", Box::new(BinaryAccuracy::default())),
        ("CategoricalAccuracy", Box::new(CategoricalAccuracy::new())),
        (
            "SparseCategoricalAccuracy",
            Box::new(SparseCategoricalAccuracy::default()),
        ),
        ("TopKCategoricalAccuracy", Box::new(TopKCategoricalAccuracy::default())),
        (
            "SparseTopKCategoricalAccuracy",
            Box::new(SparseTopKCategoricalAccuracy::default()),
        ),
        ("TruePositives", Box::new(TruePositives::new())),
        ("FalsePositives", Box::new(FalsePositives::new())),
        ("TrueNegatives", Box::new(TrueNegatives::new())),
        ("FalseNegatives", Box::new(FalseNegatives::new())),
        ("Precision", Box::new(Precision::new())),
        ("Recall", Box::new(Recall::new())),
        ("AUC", Box::new(AUC::new())),
        ("PrecisionAtRecall", Box::new(PrecisionAtRecall::new(0.5).unwrap())),
        ("RecallAtPrecision", Box::new(RecallAtPrecision::new(0.5).unwrap())),
        (
            "SensitivityAtSpecificity",
            Box::new(SensitivityAtSpecificity::new(0.5).unwrap()),
        ),
        (
            "SpecificityAtSensitivity",
            Box::new(SpecificityAtSensitivity::new(0.5).unwrap()),
        ),
        (
            "FBetaScore",
            Box::new(FBetaScore::new(FScoreAverage::Macro, 2.0, None).unwrap()),
        ),
        ("F1Score", Box::new(F1Score::default())),
        ("MeanIoU", Box::new(MeanIoU::new(3).unwrap())),
    ]
}

/// Shapes that do not fit, and empty batches, are errors naming the metric
/// and the shapes, and leave the state as it was.
#[test]
fn bad_shapes_and_empty_batches_are_errors() -> Result<()> {
    let y = t64(&[1.0, 0.0, 2.0, 0.0, 1.0, 1.0], &[2, 3]);
    let p = t64(&[0.2, 0.7, 0.1, 0.9, 0.6, 0.3], &[2, 3]);
    let labels = Tensor::vector(&[1i64, 0]);
    let empty = Tensor::zeros(&[0, 3], DType::F64);
    for (ty, mut m) in every_metric() {
        let sparse = ty.starts_with("Sparse");
        let good = if sparse { &labels } else { &y };
        m.update_state(good, &p, None)?;
        let before = m.values();
        // (MeanIoU flattens both sides: only their sizes must agree)
        let (other, shape) = match ty {
            "MeanIoU" => (Tensor::zeros(&[2, 2], DType::F64), "[2, 2]"),
            _ => (p.reshape(&[3, 2])?, "[3, 2]"),
        };
        let e = m.update_state(good, &other, None).unwrap_err().to_string();
        assert!(e.contains(ty) && e.contains(shape), "{ty}: {e}");
        let e = m.update_state(&empty, &empty, None).unwrap_err().to_string();
        assert!(e.contains(ty), "{ty}: {e}");
        if ty != "MeanIoU" {
            // weights that do not broadcast (MeanIoU flattens them)
            let w = Tensor::vector(&[1.0f64, 2.0, 3.0, 4.0, 5.0]);
            let e = m.update_state(good, &p, Some(&w)).unwrap_err().to_string();
            assert!(e.contains(ty) && e.contains("[5]"), "{ty}: {e}");
        }
        let e = m.update_state(good, &Tensor::vector(&[gradtape::Complex::new(1.0f64, 0.0); 6]), None);
        assert!(e.unwrap_err().to_string().contains(ty), "{ty}");
        let after = m.values();
        assert!(
            before.iter().zip(&after).all(|(a, b)| agrees(*a, *b, 0.0, 0.0)),
            "{ty}: {before:?} -> {after:?}"
        );
    }
    // the reductions
    let e = Mean::default()
        .update_state(&Tensor::zeros(&[0], DType::F64), None)
        .unwrap_err();
    assert!(e.to_string().contains("Mean"), "{e}");
    let e = Sum::default()
        .update_state(&y, Some(&Tensor::vector(&[1.0f64, 2.0, 3.0])))
        .unwrap_err();
    assert!(e.to_string().contains("Sum") && e.to_string().contains("[3]"), "{e}");
    Ok(())
}

/// Bad options, labels out of range, and inputs Keras refuses.
#[test]
fn bad_options_and_labels_are_errors() -> Result<()> {
    let msg = |e: gradtape::Error| e.to_string();
    let has = |e: String, parts: &[&str]| assert!(parts.iter().all(|p| e.contains(p)), "{e}");
    has(
        msg(Precision::with_thresholds(&[0.5, 1.5]).unwrap_err()),
        &["Precision", "1.5"],
    );
    has(msg(Recall::with_thresholds(&[-0.1]).unwrap_err()), &["Recall", "-0.1"]);
    has(
        msg(TruePositives::with_thresholds(&[f64::NAN]).unwrap_err()),
        &["TruePositives", "NaN"],
    );
    has(
        msg(FalseNegatives::with_thresholds(&[]).unwrap_err()),
        &["FalseNegatives"],
    );
    has(msg(AUC::new().thresholds(&[0.2, 2.0]).unwrap_err()), &["AUC", "2"]);
    has(
        msg(AUC::new().num_thresholds(1).unwrap_err()),
        &["AUC", "num_thresholds"],
    );
    has(
        msg(TopKCategoricalAccuracy::new(0).unwrap_err()),
        &["TopKCategoricalAccuracy", "k"],
    );
    has(
        msg(SparseTopKCategoricalAccuracy::new(0).unwrap_err()),
        &["SparseTopKCategoricalAccuracy"],
    );
    has(msg(Precision::new().top_k(0).unwrap_err()), &["Precision", "top_k"]);
    has(
        msg(PrecisionAtRecall::new(1.5).unwrap_err()),
        &["PrecisionAtRecall", "1.5"],
    );
    has(
        msg(RecallAtPrecision::new(0.5)?.num_thresholds(0).unwrap_err()),
        &["RecallAtPrecision"],
    );
    has(msg(BinaryAccuracy::new(f64::NAN).unwrap_err()), &["BinaryAccuracy"]);
    has(
        msg(FBetaScore::new(FScoreAverage::Micro, 0.0, None).unwrap_err()),
        &["FBetaScore", "beta"],
    );
    has(
        msg(F1Score::new(FScoreAverage::Macro, Some(0.0)).unwrap_err()),
        &["F1Score", "threshold"],
    );
    has(msg(MeanIoU::new(0).unwrap_err()), &["MeanIoU", "num_classes"]);

    let y = t64(&[1.0, 0.0, 0.0, 0.0, 1.0, 0.0], &[2, 3]);
    let p = t64(&[0.2, 0.7, 0.1, 0.9, 0.6, 0.3], &[2, 3]);
    // labels outside num_classes (but an ignored class may be any value)
    let mut iou = MeanIoU::new(3)?;
    let e = iou
        .update_state(&Tensor::vector(&[0i64, 3]), &Tensor::vector(&[0i64, 1]), None)
        .unwrap_err();
    has(msg(e), &["MeanIoU", "3", "outside"]);
    let e = iou
        .update_state(&Tensor::vector(&[0i64, 1]), &Tensor::vector(&[-1i64, 1]), None)
        .unwrap_err();
    has(msg(e), &["MeanIoU", "-1"]);
    assert_eq!(iou.result(), 0.0);
    let mut iou = MeanIoU::new(3)?.ignore_class(255);
    iou.update_state(&Tensor::vector(&[0i64, 255]), &Tensor::vector(&[0i64, 7]), None)?;
    assert!((iou.result() - 1.0).abs() < 1e-6);
    // class_id and top_k beyond the classes
    let e = Precision::new().class_id(3).update_state(&y, &p, None).unwrap_err();
    has(msg(e), &["Precision", "class_id 3", "[2, 3]"]);
    let e = Recall::new().top_k(4)?.update_state(&y, &p, None).unwrap_err();
    has(msg(e), &["Recall", "top_k = 4", "[2, 3]"]);
    let e = PrecisionAtRecall::new(0.5)?
        .class_id(0)
        .update_state(&y.reshape(&[6])?, &p.reshape(&[6])?, None);
    has(msg(e.unwrap_err()), &["PrecisionAtRecall", "class_id"]);
    // inputs of the wrong rank, or a changed number of classes
    let e = F1Score::default()
        .update_state(&y.reshape(&[6])?, &p.reshape(&[6])?, None)
        .unwrap_err();
    has(msg(e), &["F1Score", "[6]"]);
    let mut r2 = R2Score::default();
    r2.update_state(&y, &p, None)?;
    let e = r2
        .update_state(&y.reshape(&[3, 2])?, &p.reshape(&[3, 2])?, None)
        .unwrap_err();
    has(msg(e), &["R2Score", "3 outputs", "[3, 2]"]);
    let e = TopKCategoricalAccuracy::new(1)?.update_state(&y.reshape(&[6])?, &p.reshape(&[6])?, None);
    has(msg(e.unwrap_err()), &["TopKCategoricalAccuracy", "[6]"]);
    let e = CosineSimilarity::new(2).update_state(&y, &p, None).unwrap_err();
    has(msg(e), &["CosineSimilarity", "axis 2"]);
    // per-element weights where the values are per sample: Keras refuses them too
    let e = MeanSquaredError::new().update_state(&y, &p, Some(&p)).unwrap_err();
    has(msg(e), &["MeanSquaredError", "sample_weight", "[2, 3]", "[2]"]);
    // one value per update (rank-1 inputs) with weights per element: as Keras
    let e = MeanSquaredError::new().update_state(&p.reshape(&[6])?, &p.reshape(&[6])?, Some(&p.reshape(&[6])?));
    has(msg(e.unwrap_err()), &["MeanSquaredError", "sample_weight"]);
    let e = F1Score::default()
        .update_state(&y, &p, Some(&Tensor::scalar(2.0f64)))
        .unwrap_err();
    has(msg(e), &["F1Score", "sample_weight"]);
    Ok(())
}

/// f32 and f64 predictions, float and integer labels give one result (on
/// values exact in both).
#[test]
fn f32_f64_and_integer_inputs_agree() -> Result<()> {
    let labels = [1.0, 0.0, 2.0, 2.0];
    let probs = [0.25, 0.5, 0.25, 0.75, 0.125, 0.125, 0.0, 0.25, 0.75, 0.5, 0.375, 0.125];
    let one_hot: Vec<f64> = labels
        .iter()
        .flat_map(|&l| (0..3).map(move |c| f64::from(u8::from(c as f64 == l))))
        .collect();
    let w = [1.0, 0.5, 2.0, 0.0];
    let inputs = |dt: DType, int_labels: bool| -> Result<[Tensor; 4]> {
        Ok([
            if int_labels {
                Tensor::vector(&labels.map(|l| l as i64))
            } else {
                Tensor::vector(&labels).cast(dt)?
            },
            t64(&one_hot, &[4, 3]).cast(dt)?,
            t64(&probs, &[4, 3]).cast(dt)?,
            Tensor::vector(&w).cast(dt)?,
        ])
    };
    let run = |[l, oh, p, w]: &[Tensor; 4]| -> Result<Vec<Vec<f64>>> {
        let mut out = Vec::new();
        for (ty, mut m) in every_metric() {
            let y = if ty.starts_with("Sparse") { l } else { oh };
            let sw = (ty != "MeanIoU").then_some(w);
            m.update_state(y, p, sw)?;
            out.push(m.values());
        }
        Ok(out)
    };
    let want = run(&inputs(DType::F64, false)?)?;
    assert_eq!(run(&inputs(DType::F32, false)?)?, want);
    assert_eq!(run(&inputs(DType::F32, true)?)?, want);
    // integer class ids for MeanIoU and Accuracy
    let mut iou = (MeanIoU::new(3)?, MeanIoU::new(3)?);
    iou.0.update_state(
        &Tensor::vector(&[0i64, 1, 2, 2]),
        &Tensor::vector(&[0i32, 2, 2, 1]),
        None,
    )?;
    iou.1.update_state(
        &Tensor::vector(&[0.0f32, 1.0, 2.0, 2.0]),
        &Tensor::vector(&[0.0f64, 2.0, 2.0, 1.0]),
        None,
    )?;
    assert_eq!(iou.0.result(), iou.1.result());
    Ok(())
}

/// A training loop's list of metrics, and the API older than `Metric`.
#[test]
fn metric_lists_and_the_older_api() -> Result<()> {
    let y = t64(&[1.0, 0.0, 1.0, 1.0], &[4]);
    let p = t64(&[0.8, 0.4, 0.3, 0.9], &[4]);
    let mut list: Vec<Box<dyn Metric>> = vec![
        Box::new(BinaryAccuracy::default()),
        Box::new(Precision::with_thresholds(&[0.25, 0.5])?),
        Box::new(AUC::new()),
    ];
    for _ in 0..2 {
        for m in &mut list {
            m.update_state(&y, &p, None)?;
        }
    }
    let shown: Vec<String> = list.iter().map(|m| format!("{}={:?}", m.name(), m.values())).collect();
    assert_eq!(shown[..2], ["binary_accuracy=[0.75]", "precision=[0.75, 1.0]"]);
    assert_eq!(list[1].result().shape(), &[2]);
    assert!(agrees(list[2].values()[0], 2.0 / 3.0, 1e-12, 1.0));
    list.iter_mut().for_each(|m| m.reset_state());
    assert!(list.iter().all(|m| m.values().iter().all(|&v| v == 0.0)));

    // Mean::update and SparseCategoricalAccuracy::update as before
    let mut mean = Mean::default();
    mean.update(1.0, 2.0);
    mean.update(4.0, 1.0);
    assert_eq!(mean.result(), 2.0);
    let logits = t64(&[0.1, 2.0, 3.0, 0.5], &[2, 2]);
    let mut acc = SparseCategoricalAccuracy::default();
    acc.update(&Tensor::vector(&[1i64, 1]), &logits)?;
    let copy = acc;
    assert_eq!(copy, acc);
    acc.update(&Tensor::from_vec(vec![1i64, 0], &[2, 1])?, &logits)?;
    acc.update(&Tensor::zeros(&[0], DType::I64), &Tensor::zeros(&[0, 2], DType::F64))?; // nothing
    assert_eq!(acc.result(), 0.75);
    assert_ne!(copy, acc);
    assert!(acc.update(&Tensor::vector(&[1i64]), &logits).is_err());
    acc.reset();
    assert_eq!(acc.result(), 0.0);
    assert_eq!(
        metrics::sparse_categorical_accuracy(&Tensor::vector(&[1i64, 1]), &logits)?,
        0.5
    );
    Ok(())
}
