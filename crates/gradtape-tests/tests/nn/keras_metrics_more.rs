//! AUC with `multi_label` (one curve per label, their mean, weighted by
//! `label_weights`) and with `label_weights` on one curve, and the IoUs of
//! chosen classes (`IoU`, `BinaryIoU`, `OneHotIoU`, `OneHotMeanIoU`),
//! against Keras 3.15.1's (TensorFlow 2.21 backend, `dtype="float64"`,
//! floatx float64): the result after each of several `update_state` calls
//! (no weights, per-sample, per-element and scalar weights), after
//! `reset_state`, and after the first update again; AUC in f64 to 1e-12
//! of the result's magnitude, the IoUs to 1e-6 (Keras divides in
//! float32). The numbers are printed by
//! `tests/reference/keras_metrics_more.py` into
//! `tests/data/keras_metrics_more.txt` (the format of
//! `keras_metrics.py`'s, parsed by `keras_metrics.rs`'s helpers). Bad
//! input, f32 and integer inputs, and the labels' curves one by one are
//! checked below without Keras.

use std::collections::BTreeSet;

use gradtape::nn::metrics::*;
use gradtape::{DType, Result, Tensor};

use super::keras_metrics::{auc, expected, flag, int, list, number, parse_updates, t64};
use super::tf_util::{agrees, magnitude, report};

fn ids(cfg: &str, key: &str) -> Option<Vec<usize>> {
    list(cfg, key).map(|v| v.iter().map(|&x| x as usize).collect())
}

fn subject(name: &str, cfg: &str) -> Result<Box<dyn Metric>> {
    let targets = || ids(cfg, "target_class_ids").unwrap();
    let classes = || int(cfg, "num_classes").unwrap();
    let ignore = int(cfg, "ignore_class").map(|c| c as i64);
    let m: Box<dyn Metric> = match name {
        "auc" => Box::new(auc(cfg)?),
        "io_u" => {
            let mut m = IoU::new(classes(), &targets())?
                .sparse_y_true(flag(cfg, "sparse_y_true").unwrap_or(true))
                .sparse_y_pred(flag(cfg, "sparse_y_pred").unwrap_or(true));
            if let Some(c) = ignore {
                m = m.ignore_class(c);
            }
            Box::new(m)
        }
        "binary_io_u" => Box::new(BinaryIoU::new(&targets(), number(cfg, "threshold").unwrap())?),
        "one_hot_io_u" => {
            let mut m =
                OneHotIoU::new(classes(), &targets())?.sparse_y_pred(flag(cfg, "sparse_y_pred").unwrap_or(false));
            if let Some(c) = ignore {
                m = m.ignore_class(c);
            }
            Box::new(m)
        }
        "one_hot_mean_io_u" => {
            let mut m = OneHotMeanIoU::new(classes())?.sparse_y_pred(flag(cfg, "sparse_y_pred").unwrap_or(false));
            if let Some(c) = ignore {
                m = m.ignore_class(c);
            }
            Box::new(m)
        }
        _ => panic!("no metric {name}"),
    };
    assert_eq!(m.name(), name);
    Ok(m)
}

#[test]
fn more_metrics_match_keras() -> Result<()> {
    let (mut bad, mut checked, mut names) = (Vec::new(), 0, BTreeSet::new());
    let mut multi = 0;
    for line in DATA.lines() {
        let [name, cfg, updates, results, reset] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        names.insert(name);
        multi += usize::from(flag(cfg, "multi_label") == Some(true));
        let rel = if name == "auc" { 1e-12 } else { 1e-6 };
        let updates = parse_updates(updates);
        let results: Vec<_> = results.split(';').map(expected).collect();
        let mut m = subject(name, cfg)?;
        let mut check = |what: String, m: &dyn Metric, (shape, want): &(Vec<usize>, Vec<f64>)| {
            checked += 1;
            let (got_shape, got) = (m.result().shape().to_vec(), m.values());
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
            m.update_state(t, p.as_ref().unwrap(), w.as_ref())?;
            check(format!("after update {}", i + 1), &*m, want);
        }
        m.reset_state();
        check("after reset".into(), &*m, &expected(reset));
        let (t, p, w) = &updates[0];
        m.update_state(t, p.as_ref().unwrap(), w.as_ref())?;
        check("after reset and update 1".into(), &*m, &results[0]);
    }
    assert_eq!(names.len(), 5, "{names:?}");
    assert!(multi >= 20, "{multi} multi-label lines");
    report(checked, 250, &bad);
    Ok(())
}

const DATA: &str = include_str!("../data/keras_metrics_more.txt");

/// The new metrics, with simple options, for inputs `[2, 3]`.
fn new_metrics() -> Vec<(&'static str, Box<dyn Metric>)> {
    vec![
        ("AUC", Box::new(AUC::new().multi_label(true))),
        ("AUC", Box::new(AUC::new().label_weights(&[1.0, 2.0, 0.5]).unwrap())),
        ("IoU", Box::new(IoU::new(3, &[0, 2]).unwrap())),
        ("BinaryIoU", Box::new(BinaryIoU::default())),
        ("OneHotIoU", Box::new(OneHotIoU::new(3, &[1]).unwrap())),
        ("OneHotMeanIoU", Box::new(OneHotMeanIoU::new(3).unwrap())),
    ]
}

/// Shapes that do not fit, empty batches, class ids out of range and
/// label weights of the wrong length are errors naming the metric, and
/// leave the state as it was.
#[test]
fn bad_inputs_are_errors_and_change_nothing() -> Result<()> {
    let y = t64(&[1.0, 0.0, 2.0, 0.0, 1.0, 1.0], &[2, 3]);
    let p = t64(&[0.2, 0.7, 0.1, 0.9, 0.6, 0.3], &[2, 3]);
    let empty = Tensor::zeros(&[0, 3], DType::F64);
    let one_hot = t64(&[0.0, 1.0, 0.0, 1.0, 0.0, 0.0], &[2, 3]);
    let ids = t64(&[0.0, 1.0, 2.0, 2.0, 1.0, 0.0], &[2, 3]);
    let binary = t64(&[0.0, 1.0, 1.0, 0.0, 1.0, 0.0], &[2, 3]);
    for (ty, mut m) in new_metrics() {
        let good = match ty {
            "IoU" => &ids,
            "BinaryIoU" => &binary,
            "OneHotIoU" | "OneHotMeanIoU" => &one_hot,
            _ => &y,
        };
        let pred = if ty == "IoU" { &ids } else { &p };
        m.update_state(good, pred, None)?;
        let before = m.values();
        let mut fails = |t: &Tensor, q: &Tensor, w: Option<&Tensor>, parts: &[&str]| {
            let e = match m.update_state(t, q, w) {
                Ok(()) => panic!("{ty}: {:?} against {:?} accepted", t.shape(), q.shape()),
                Err(e) => e.to_string(),
            };
            assert!(e.contains(ty) && parts.iter().all(|s| e.contains(s)), "{ty}: {e}");
        };
        // sizes that do not fit (the IoUs flatten both sides, one-hot
        // ones after the arg-max)
        let (other, shape) = match ty {
            "OneHotIoU" | "OneHotMeanIoU" => (Tensor::zeros(&[3, 3], DType::F64), "[3, 3]"),
            _ => (Tensor::zeros(&[2, 2], DType::F64), "[2, 2]"),
        };
        fails(good, &other, None, &[shape]);
        fails(&empty, &empty, None, &["empty"]);
        let w = Tensor::vector(&[1.0f64, 2.0, 3.0, 4.0, 5.0]);
        fails(good, pred, Some(&w), &["[5]"]);
        let c = Tensor::vector(&[gradtape::Complex::new(1.0f64, 0.0); 6]);
        fails(good, &c, None, &[]);
        match ty {
            "AUC" => {
                // another number of labels, or (multi-label) another rank
                fails(&y.reshape(&[3, 2])?, &p.reshape(&[3, 2])?, None, &["[3, 2]"]);
                fails(&y.reshape(&[6])?, &p.reshape(&[6])?, None, &["[6]"]);
            }
            "IoU" => fails(
                &t64(&[0.0, 3.0], &[2]),
                &t64(&[0.0, 1.0], &[2]),
                None,
                &["3", "outside"],
            ),
            "BinaryIoU" => fails(
                &t64(&[0.0, -1.0], &[2]),
                &t64(&[0.1, 0.9], &[2]),
                None,
                &["-1", "outside"],
            ),
            _ => {
                // four scores per class for three classes: arg-max 3
                let four = t64(&[0.0, 0.0, 0.0, 1.0], &[1, 4]);
                fails(&four, &t64(&[0.1, 0.2, 0.3, 0.4], &[1, 4]), None, &["3", "outside"]);
            }
        }
        let after = m.values();
        assert!(
            before.iter().zip(&after).all(|(a, b)| agrees(*a, *b, 0.0, 0.0)),
            "{ty}: {before:?} -> {after:?}"
        );
    }
    Ok(())
}

/// Options out of range are errors naming the metric.
#[test]
fn bad_options_are_errors() -> Result<()> {
    let has = |e: gradtape::Error, parts: &[&str]| {
        let e = e.to_string();
        assert!(parts.iter().all(|p| e.contains(p)), "{e}");
    };
    has(
        AUC::new().num_labels(3).unwrap_err(),
        &["AUC", "num_labels", "multi_label"],
    );
    has(
        AUC::new().multi_label(true).num_labels(0).unwrap_err(),
        &["AUC", "num_labels"],
    );
    has(AUC::new().label_weights(&[]).unwrap_err(), &["AUC", "label_weights"]);
    has(AUC::new().label_weights(&[1.0, -0.5]).unwrap_err(), &["AUC", "-0.5"]);
    has(AUC::new().label_weights(&[f64::NAN]).unwrap_err(), &["AUC", "NaN"]);
    let three = AUC::new().multi_label(true).num_labels(3)?;
    has(
        three.clone().label_weights(&[1.0, 2.0]).unwrap_err(),
        &["AUC", "2 label_weights", "3"],
    );
    let weighted = AUC::new().multi_label(true).label_weights(&[1.0, 2.0])?;
    has(
        weighted.clone().num_labels(3).unwrap_err(),
        &["AUC", "2 label_weights", "3"],
    );
    // label weights of the wrong length meet the predictions at the update
    let (y, p) = (
        t64(&[1.0, 0.0, 0.0, 1.0, 1.0, 0.0], &[2, 3]),
        t64(&[0.2, 0.7, 0.1, 0.9, 0.6, 0.3], &[2, 3]),
    );
    let mut m = weighted;
    has(
        m.update_state(&y, &p, None).unwrap_err(),
        &["AUC", "2 label_weights", "[2, 3]"],
    );
    assert_eq!(m.result(), 0.0);
    m.update_state(&y.narrow(1, 0, 2)?, &p.narrow(1, 0, 2)?, None)?;
    let mut one = AUC::new().label_weights(&[1.0, 2.0])?;
    has(
        one.update_state(&y, &p, None).unwrap_err(),
        &["AUC", "label_weights", "[2, 3]"],
    );
    has(
        one.update_state(&y.reshape(&[6])?, &p.reshape(&[6])?, None)
            .unwrap_err(),
        &["AUC", "label_weights", "[6]"],
    );
    let mut three = three;
    has(
        three
            .update_state(&y.reshape(&[3, 2])?, &p.reshape(&[3, 2])?, None)
            .unwrap_err(),
        &["AUC", "[batch, 3]"],
    );
    has(IoU::new(0, &[0]).unwrap_err(), &["IoU", "num_classes"]);
    has(IoU::new(3, &[]).unwrap_err(), &["IoU", "target_class_ids"]);
    has(IoU::new(3, &[1, 3]).unwrap_err(), &["IoU", "3", "outside"]);
    has(BinaryIoU::new(&[2], 0.5).unwrap_err(), &["BinaryIoU", "2"]);
    has(BinaryIoU::new(&[0], f64::NAN).unwrap_err(), &["BinaryIoU", "threshold"]);
    has(
        BinaryIoU::new(&[0], f64::INFINITY).unwrap_err(),
        &["BinaryIoU", "threshold"],
    );
    has(OneHotIoU::new(3, &[5]).unwrap_err(), &["OneHotIoU", "5"]);
    has(OneHotMeanIoU::new(0).unwrap_err(), &["OneHotMeanIoU", "num_classes"]);
    // scores per class need an axis
    let e = OneHotIoU::new(2, &[0])?.update_state(&Tensor::scalar(1.0f64), &Tensor::scalar(1.0f64), None);
    has(e.unwrap_err(), &["OneHotIoU", "rank"]);
    Ok(())
}

/// Multi-label AUC is the mean of the labels' own AUCs (weighted by the
/// label weights), and label weights on one curve scale the counts.
#[test]
fn labels_one_by_one() -> Result<()> {
    let y = t64(
        &[
            1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0,
        ],
        &[5, 3],
    );
    let p = t64(
        &[
            0.8, 0.3, 0.1, 0.4, 0.6, 0.7, 0.35, 0.9, 0.2, 0.5, 0.45, 0.65, 0.7, 0.05, 0.3,
        ],
        &[5, 3],
    );
    let w = t64(&[1.0, 0.5, 2.0, 0.0, 1.5], &[5]);
    for curve in [AucCurve::ROC, AucCurve::PR] {
        let mut areas = Vec::new();
        for c in 0..3 {
            let col = |t: &Tensor| t.narrow(1, c, 1);
            let mut one = AUC::new().curve(curve);
            one.update_state(&col(&y)?, &col(&p)?, Some(&w))?;
            areas.push(one.result());
        }
        let mut all = AUC::new().curve(curve).multi_label(true);
        all.update_state(&y, &p, Some(&w))?;
        assert!(agrees(all.result(), areas.iter().sum::<f64>() / 3.0, 1e-12, 1.0));
        let lw = [0.5, 2.0, 1.0];
        let mut weighted = AUC::new().curve(curve).multi_label(true).label_weights(&lw)?;
        weighted.update_state(&y, &p, Some(&w))?;
        let want = areas.iter().zip(lw).map(|(a, w)| a * w).sum::<f64>() / 3.5;
        assert!(agrees(weighted.result(), want, 1e-12, 1.0));
        // one curve: weights per label are weights per element
        let mut by_label = AUC::new().curve(curve).label_weights(&lw)?;
        by_label.update_state(&y, &p, Some(&w))?;
        let per_element: Vec<f64> = (0..15).map(|i| [1.0, 0.5, 2.0, 0.0, 1.5][i / 3] * lw[i % 3]).collect();
        let mut plain = AUC::new().curve(curve);
        plain.update_state(&y, &p, Some(&t64(&per_element, &[5, 3])))?;
        assert!(agrees(by_label.result(), plain.result(), 1e-12, 1.0));
    }
    // turning multi_label off forgets num_labels
    let mut m = AUC::new().multi_label(true).num_labels(4)?.multi_label(false);
    m.update_state(&y, &p, None)?;
    assert!(m.result() > 0.0);
    Ok(())
}

/// f32 and f64 predictions, float and integer labels give one result.
#[test]
fn f32_and_integer_inputs_agree() -> Result<()> {
    let probs = [0.25, 0.5, 0.25, 0.75, 0.125, 0.125, 0.0, 0.25, 0.75, 0.5, 0.375, 0.125];
    let labels = [1.0, 0.0, 2.0, 2.0];
    let one_hot: Vec<f64> = labels
        .iter()
        .flat_map(|&l| (0..3).map(move |c| f64::from(u8::from(c as f64 == l))))
        .collect();
    let run = |dt: DType| -> Result<Vec<Vec<f64>>> {
        let (oh, p) = (t64(&one_hot, &[4, 3]).cast(dt)?, t64(&probs, &[4, 3]).cast(dt)?);
        let w = Tensor::vector(&[1.0, 0.5, 2.0, 0.0]).cast(dt)?;
        let mut out = Vec::new();
        for (ty, mut m) in new_metrics() {
            match ty {
                "IoU" => m.update_state(&Tensor::vector(&labels).cast(dt)?, &p.argmax(-1)?, None)?,
                "BinaryIoU" => m.update_state(&oh.cast(if dt == DType::F32 { DType::I64 } else { dt })?, &p, None)?,
                _ => m.update_state(&oh, &p, Some(&w))?,
            }
            out.push(m.values());
        }
        Ok(out)
    };
    assert_eq!(run(DType::F32)?, run(DType::F64)?);
    // BinaryIoU compares in float32: just below 0.3 in f64 is 0.3 in f32
    let mut b = BinaryIoU::new(&[1], 0.3)?;
    b.update_state(&Tensor::vector(&[1i64, 0]), &Tensor::vector(&[0.3 - 1e-9, 0.1]), None)?;
    assert!(agrees(b.result(), 1.0, 1e-6, 1.0));
    let names: Vec<String> = new_metrics().iter().map(|(_, m)| m.name().to_string()).collect();
    assert_eq!(
        names,
        ["auc", "auc", "io_u", "binary_io_u", "one_hot_io_u", "one_hot_mean_io_u"]
    );
    Ok(())
}
