//! Confusion-matrix metrics: the weighted counts of true and false
//! positives and negatives at one or more thresholds, and what is built on
//! them (precision, recall, AUC, the value of one rate where another
//! reaches a target).
//!
//! A prediction is positive at threshold `t` when it is above `t`; a label
//! is positive when it is not 0. As Keras, thresholds spread evenly over
//! `[0, 1]` (three or more, `i / (n − 1)`) count by buckets, the
//! predictions first clipped to `[0, 1]` (a prediction of 0 is then never
//! positive, not even at threshold 0, and one above 1 is not positive at
//! threshold 1). Sample weights get a trailing axis, are rank-adjusted
//! against the labels and broadcast to the predictions (after `top_k` and
//! `class_id` select them), then, for AUC, are multiplied by the label
//! weights (one per column), or the columns are counted apart (AUC's
//! `multi_label`). The counts themselves, precision and recall are in
//! `precision.rs`; AUC and the metrics at a target rate in `auc.rs`.

use super::array::{divide_no_nan, mismatch, nonempty, same_rank, Arr};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Keras's stand-in for minus infinity: the threshold with `top_k` and the
/// value of the predictions it drops.
pub(super) const NEG_INF: f64 = -1e10;

/// The thresholds of a confusion metric and how predictions meet them.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Grid {
    pub t: Vec<f64>,
    /// `i / (n − 1)` for `n >= 3`: counted by buckets.
    pub even: bool,
    /// (Buckets only) the first and last thresholds are −ε and 1 + ε
    /// (AUC's): a prediction of 0 is positive at the first.
    pub epsilon: bool,
}

impl Grid {
    /// Thresholds given by the user: in `[0, 1]`, at least one.
    pub fn user(op: &'static str, t: &[f64]) -> Result<Grid> {
        check_thresholds(op, t)?;
        Ok(Grid {
            t: t.to_vec(),
            even: evenly_spread(t),
            epsilon: false,
        })
    }

    /// One threshold.
    pub fn one(t: f64) -> Grid {
        Grid {
            t: vec![t],
            even: false,
            epsilon: false,
        }
    }

    /// `n` thresholds from 0 to 1, evenly spread (`n >= 2`).
    pub fn even(n: usize) -> Grid {
        let mut t = vec![0.0];
        t.extend((0..n - 2).map(|i| (i + 1) as f64 / (n - 1) as f64));
        t.push(1.0);
        Grid {
            t,
            even: true,
            epsilon: false,
        }
    }

    pub fn len(&self) -> usize {
        self.t.len()
    }
}

pub(super) fn check_thresholds(op: &'static str, t: &[f64]) -> Result<()> {
    if t.is_empty() {
        return Err(Error::invalid(op, "needs at least one threshold"));
    }
    if let Some(bad) = t.iter().find(|t| !(0.0..=1.0).contains(*t)) {
        return Err(Error::invalid(
            op,
            format!("thresholds must lie in [0, 1], got {bad} in {t:?}"),
        ));
    }
    Ok(())
}

/// Keras's test for thresholds `i / (n − 1)` (float32's, to numpy's
/// `allclose` with `atol` 1e-7).
pub(super) fn evenly_spread(t: &[f64]) -> bool {
    let n = t.len();
    n >= 3
        && t.iter().enumerate().all(|(i, &x)| {
            let even = f64::from(i as f32 / (n - 1) as f32);
            (x - even).abs() <= 1e-7 + 1e-5 * even.abs()
        })
}

/// Weighted counts per threshold.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Counts {
    pub tp: Vec<f64>,
    pub fp: Vec<f64>,
    pub tn: Vec<f64>,
    pub fn_: Vec<f64>,
}

impl Counts {
    pub fn zeros(n: usize) -> Counts {
        Counts {
            tp: vec![0.0; n],
            fp: vec![0.0; n],
            tn: vec![0.0; n],
            fn_: vec![0.0; n],
        }
    }

    pub fn add(&mut self, o: &Counts) {
        for (a, b) in [
            (&mut self.tp, &o.tp),
            (&mut self.fp, &o.fp),
            (&mut self.tn, &o.tn),
            (&mut self.fn_, &o.fn_),
        ] {
            a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
        }
    }

    pub fn reset(&mut self) {
        *self = Counts::zeros(self.tp.len());
    }

    pub fn precision(&self) -> Vec<f64> {
        self.tp
            .iter()
            .zip(&self.fp)
            .map(|(&tp, &fp)| divide_no_nan(tp, tp + fp))
            .collect()
    }

    pub fn recall(&self) -> Vec<f64> {
        self.tp
            .iter()
            .zip(&self.fn_)
            .map(|(&tp, &f)| divide_no_nan(tp, tp + f))
            .collect()
    }

    pub fn specificity(&self) -> Vec<f64> {
        self.tn
            .iter()
            .zip(&self.fp)
            .map(|(&tn, &fp)| divide_no_nan(tn, tn + fp))
            .collect()
    }
}

/// What selects and transforms predictions before they are counted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Select {
    pub top_k: Option<usize>,
    pub class_id: Option<usize>,
    pub sigmoid: bool,
}

/// How the labels, the columns of `[batch, labels]` predictions, are
/// counted: together (every element one prediction, optionally weighted by
/// its label's weight) or apart (AUC's `multi_label`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Labels<'a> {
    /// One set of counts per label (the predictions must be `[batch,
    /// labels]`; the weights broadcast to them before the columns part).
    pub apart: bool,
    /// (Together only) weights per label, along the last axis, multiplying
    /// the sample weights.
    pub weights: Option<&'a [f64]>,
}

/// The counts of one batch (Keras's `update_confusion_matrix_variables`).
pub(super) fn count(
    op: &'static str,
    grid: &Grid,
    sel: Select,
    y_true: &Tensor,
    y_pred: &Tensor,
    w: Option<&Tensor>,
) -> Result<Counts> {
    let mut all = count_labels(op, grid, sel, Labels::default(), y_true, y_pred, w)?;
    Ok(all.swap_remove(0))
}

/// The counts of one batch: one set, or one per label (`labels.apart`).
pub(super) fn count_labels(
    op: &'static str,
    grid: &Grid,
    sel: Select,
    labels: Labels,
    y_true: &Tensor,
    y_pred: &Tensor,
    w: Option<&Tensor>,
) -> Result<Vec<Counts>> {
    let sample_weight_shape = w.map_or(&[][..], |w| w.shape());
    let (mut p, mut t) = same_rank(Arr::read(op, y_pred)?, Arr::read(op, y_true)?, true);
    if t.s != p.s {
        return Err(mismatch(op, y_true, y_pred));
    }
    nonempty(op, y_true, y_pred)?;
    if sel.sigmoid {
        p.v.iter_mut().for_each(|x| *x = 1.0 / (1.0 + (-*x).exp()));
    }
    // the weights' shape: a trailing 1 added, then adjusted to the labels'
    let w = match w {
        Some(w) => {
            let w = Arr::read(op, w)?.expanded();
            Some(
                same_rank(
                    Arr {
                        v: Vec::new(),
                        s: t.s.clone(),
                    },
                    w,
                    false,
                )
                .1,
            )
        }
        None => None,
    };
    let given = w.as_ref().map(|_| sample_weight_shape.to_vec());
    let classes = p.s.last().copied().unwrap_or(1);
    if let Some(k) = sel.top_k {
        if p.rank() == 0 || k > classes {
            return Err(Error::invalid(
                op,
                format!(
                    "top_k = {k} needs predictions with at least {k} classes, got shape {:?}",
                    y_pred.shape()
                ),
            ));
        }
        for row in p.v.chunks_mut(classes) {
            let mut order: Vec<usize> = (0..row.len()).collect();
            // largest first, the lower index first among equals (-0 = +0)
            let key = |x: f64| if x == 0.0 { 0.0 } else { x };
            order.sort_by(|&a, &b| key(row[b]).total_cmp(&key(row[a])).then(a.cmp(&b)));
            let mut keep = vec![false; row.len()];
            order[..k].iter().for_each(|&i| keep[i] = true);
            for (x, keep) in row.iter_mut().zip(keep) {
                if !keep {
                    *x = *x * 0.0 + NEG_INF;
                }
            }
        }
    }
    if let Some(c) = sel.class_id {
        if p.rank() < 2 || c >= classes {
            return Err(Error::invalid(
                op,
                format!(
                    "class_id {c} needs predictions [batch, classes] with more than {c} classes, got shape {:?}",
                    y_pred.shape()
                ),
            ));
        }
        let pick = |a: &Arr| Arr {
            v: a.v.iter().skip(c).step_by(classes).copied().collect(),
            s: [&a.s[..a.rank() - 1], &[1]].concat(),
        };
        (p, t) = (pick(&p), pick(&t));
    }
    let mut w = match w {
        Some(w) => w.broadcast_to(op, "sample_weight", given.as_deref().unwrap_or(&[]), &p.s)?,
        None => vec![1.0; p.v.len()],
    };
    let pos: Vec<bool> = t.v.iter().map(|&y| y != 0.0).collect();
    let tally = |p: &[f64], pos: &[bool], w: &[f64]| {
        if grid.even {
            by_buckets(grid, p, pos, w)
        } else {
            by_thresholds(grid, p, pos, w)
        }
    };
    if labels.apart {
        if p.rank() != 2 {
            return Err(Error::invalid(
                op,
                format!(
                    "multi_label needs predictions of shape [batch, labels], got y_pred of shape {:?}",
                    y_pred.shape()
                ),
            ));
        }
        let n = p.s[1];
        return Ok((0..n)
            .map(|c| {
                fn column<T: Copy>(v: &[T], c: usize, n: usize) -> Vec<T> {
                    v.iter().skip(c).step_by(n).copied().collect()
                }
                tally(&column(&p.v, c, n), &column(&pos, c, n), &column(&w, c, n))
            })
            .collect());
    }
    if let Some(lw) = labels.weights {
        let row = Arr {
            v: lw.to_vec(),
            s: vec![1, lw.len()],
        };
        let lw = row.broadcast_to(op, "label_weights", &[lw.len()], &p.s)?;
        w.iter_mut().zip(lw).for_each(|(w, l)| *w *= l);
    }
    Ok(vec![tally(&p.v, &pos, &w)])
}

/// Counts at each threshold, comparing every prediction with it.
fn by_thresholds(grid: &Grid, p: &[f64], pos: &[bool], w: &[f64]) -> Counts {
    let mut c = Counts::zeros(grid.len());
    for (i, &th) in grid.t.iter().enumerate() {
        for ((&p, &y), &w) in p.iter().zip(pos).zip(w) {
            let slot = match (y, p > th) {
                (true, true) => &mut c.tp,
                (false, true) => &mut c.fp,
                (false, false) => &mut c.tn,
                (true, false) => &mut c.fn_,
            };
            slot[i] += w;
        }
    }
    c
}

/// Counts at evenly spread thresholds: each prediction (clipped to
/// `[0, 1]`) falls in bucket `ceil(p (n − 1)) − 1`, positive at the
/// thresholds up to it.
fn by_buckets(grid: &Grid, p: &[f64], pos: &[bool], w: &[f64]) -> Counts {
    let n = grid.len();
    let (mut tp, mut fp) = (vec![0.0; n], vec![0.0; n]);
    let (mut total_t, mut total_f) = (0.0, 0.0);
    for ((&p, &y), &w) in p.iter().zip(pos).zip(w) {
        let (t, f) = if y { (w, 0.0) } else { (0.0, w) };
        total_t += t;
        total_f += f;
        if p.is_nan() {
            continue;
        }
        let mut b = (p.clamp(0.0, 1.0) * (n - 1) as f64).ceil() - 1.0;
        if grid.epsilon {
            b = b.max(0.0);
        }
        if b >= 0.0 && b < n as f64 {
            tp[b as usize] += t;
            fp[b as usize] += f;
        }
    }
    for i in (0..n - 1).rev() {
        tp[i] += tp[i + 1];
        fp[i] += fp[i + 1];
    }
    Counts {
        tn: fp.iter().map(|fp| total_f - fp).collect(),
        fn_: tp.iter().map(|tp| total_t - tp).collect(),
        tp,
        fp,
    }
}

/// A result: the value, or one per threshold.
pub(super) fn per_threshold(v: Vec<f64>) -> Tensor {
    if v.len() == 1 {
        Tensor::scalar(v[0])
    } else {
        Tensor::vector(&v)
    }
}
