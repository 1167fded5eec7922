//! CTC loss (connectionist temporal classification) with dense labels:
//! TensorFlow 2's `tf.nn.ctc_loss(labels, logits, label_length,
//! logit_length, logits_time_major, blank_index)`.
//!
//! One kernel runs the forward-backward algorithm in log space and gives
//! both the per-example losses and their gradient with respect to the
//! logits (`softmax - occupancy`, zero past each example's length), as
//! TensorFlow does; the rule scales that saved gradient by the cotangent.
//!
//! **Second derivatives are an error**, as in TensorFlow, whose fused
//! `CTCLoss` op disables them explicitly (`LookupError: Gradient explicitly
//! disabled`) and whose dense path returns NaN. The gradient, when it is
//! itself recorded (under an outer tape or in a trace), is the op
//! [`ctc_loss_grad`] (`CTCLossGrad`) recomputed from the logits, whose own
//! rule fails with an error naming `ctc_loss`; otherwise the saved gradient
//! is used directly.

use super::super::desc::NnOp;
use super::super::{bind, expect_float, grads, unsupported};
use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::ctc::{self as k, Example};
use crate::kernels::cpu::elementwise::cast;
use crate::tensor::dtype::with_types;
use crate::tensor::{alloc, DType, Element, Tensor};

const OP: &str = "ctc_loss";

/// An `i32`/`i64` tensor's values as `i64`, or an error naming `what`.
fn ints(t: &Tensor, what: &str) -> Result<Vec<i64>> {
    match t.dtype() {
        DType::I32 => alloc::try_collect(OP, t.values::<i32>(OP)?.iter().map(|&v| v as i64)),
        DType::I64 => alloc::try_collect(OP, t.values::<i64>(OP)?.iter().copied()),
        d => Err(Error::invalid(
            OP,
            format!("{what} must be i32 or i64, got {d} (shape {:?})", t.shape()),
        )),
    }
}

/// The checked arguments of one call: the labels of each example and the
/// sizes.
struct Checked {
    labels: Vec<Vec<usize>>,
    frames: Vec<usize>,
    t: usize,
    classes: usize,
}

/// Checks time-major `logits` `[frames, batch, classes]` and the rest.
fn check(
    labels: &Tensor,
    logits: &Tensor,
    label_length: &Tensor,
    logit_length: &Tensor,
    blank: usize,
) -> Result<Checked> {
    expect_float(OP, logits)?;
    let &[t, b, classes] = logits.shape() else {
        return Err(Error::invalid(
            OP,
            format!("logits must have rank 3, got shape {:?}", logits.shape()),
        ));
    };
    let &[_, lmax] = labels.shape() else {
        return Err(Error::invalid(
            OP,
            format!(
                "labels must be dense [batch, max_label_length], got shape {:?}",
                labels.shape()
            ),
        ));
    };
    for (what, s) in [
        ("labels", &labels.shape()[..1]),
        ("label_length", label_length.shape()),
        ("logit_length", logit_length.shape()),
    ] {
        if s != [b] {
            return Err(Error::invalid(
                OP,
                format!(
                    "{what} of shape {:?} does not match a batch of {b} (logits of shape {:?}, [frames, batch, classes])",
                    if what == "labels" { labels.shape() } else { s },
                    logits.shape()
                ),
            ));
        }
    }
    let (lab, ll, tl) = (
        ints(labels, "labels")?,
        ints(label_length, "label_length")?,
        ints(logit_length, "logit_length")?,
    );
    let mut out = Checked {
        labels: Vec::with_capacity(b),
        frames: Vec::with_capacity(b),
        t,
        classes,
    };
    for i in 0..b {
        let (n, f) = (ll[i], tl[i]);
        if f < 0 || f as u64 > t as u64 {
            return Err(Error::invalid(
                OP,
                format!(
                    "logit_length[{i}] = {f} is outside 0..={t} (logits of shape {:?})",
                    logits.shape()
                ),
            ));
        }
        if n < 0 || n as u64 > lmax as u64 {
            return Err(Error::invalid(
                OP,
                format!(
                    "label_length[{i}] = {n} is outside 0..={lmax} (labels of shape {:?})",
                    labels.shape()
                ),
            ));
        }
        if n > f {
            return Err(Error::invalid(
                OP,
                format!(
                    "label_length[{i}] = {n} is longer than logit_length[{i}] = {f}: not enough frames for the labels"
                ),
            ));
        }
        let row = &lab[i * lmax..i * lmax + n as usize];
        let mut seq = Vec::with_capacity(row.len());
        for (j, &l) in row.iter().enumerate() {
            if l < 0 || l as u64 >= classes as u64 || l as u64 == blank as u64 {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "labels[{i}, {j}] = {l} is not a class: it must lie in 0..{classes} and differ from the blank index {blank}"
                    ),
                ));
            }
            seq.push(l as usize);
        }
        out.labels.push(seq);
        out.frames.push(f as usize);
    }
    Ok(out)
}

/// The blank index `blank_index` (negative counts from the end) checked
/// against `classes`.
fn blank_of(blank_index: i64, classes: usize, shape: &[usize]) -> Result<usize> {
    let c = classes as i64;
    let b = if blank_index < 0 { blank_index + c } else { blank_index };
    if (0..c).contains(&b) {
        Ok(b as usize)
    } else {
        Err(Error::invalid(
            OP,
            format!("blank_index {blank_index} is out of range for {classes} classes (logits of shape {shape:?})"),
        ))
    }
}

/// Runs the kernel on time-major logits: (losses, gradient).
/// Half logits run in `f32` (log-space sums of probabilities need its
/// range and precision) and both results are rounded once.
fn run(labels: &Tensor, logits: &Tensor, ll: &Tensor, tl: &Tensor, blank: usize) -> Result<(Tensor, Tensor)> {
    // no GPU kernel: on the CPU under soft device placement
    if let Some(r) = crate::dispatch::device::hosted_pair(OP, &[labels, logits, ll, tl], |h| {
        run(&h[0], &h[1], &h[2], &h[3], blank)
    }) {
        return r;
    }
    if logits.dtype().is_half() {
        let to = logits.dtype();
        let (loss, grad) = run(labels, &cast(logits, DType::F32)?, ll, tl, blank)?;
        return Ok((cast(&loss, to)?, cast(&grad, to)?));
    }
    let c = check(labels, logits, ll, tl, blank)?;
    let examples: Vec<Example<'_>> = c
        .labels
        .iter()
        .zip(&c.frames)
        .map(|(l, &f)| Example { labels: l, frames: f })
        .collect();
    let b = examples.len();
    with_types!(logits.dtype(), T => {
        let (loss, grad) = k::ctc_loss::<T>(OP, &logits.values::<T>(OP)?, &examples, c.t, c.classes, blank)?;
        Ok((
            Tensor::from_storage(T::into_storage(loss), &[b]),
            Tensor::from_storage(T::into_storage(grad), &[c.t, b, c.classes]),
        ))
    }, [F32: f32, F64: f64], _ => Err(unsupported(OP, logits.dtype(), "f32, f64, f16 or bf16")))
}

/// The gradient of the summed CTC losses with respect to time-major logits
/// (`[frames, batch, classes]`), recomputed: the op a recorded gradient of
/// [`Tensor::ctc_loss`] runs. Not differentiable: its rule is an error.
pub(crate) fn ctc_loss_grad(
    labels: &Tensor,
    logits: &Tensor,
    ll: &Tensor,
    tl: &Tensor,
    blank: usize,
) -> Result<Tensor> {
    let (_, grad) = run(labels, logits, ll, tl, blank)?;
    Ok(bind(NnOp::CtcLossGrad(blank), &[labels, logits, ll, tl], grad, |_| {
        vjp(|_, _| {
            Err(Error::invalid(
                OP,
                "the gradient of ctc_loss is not differentiable: second derivatives of ctc_loss are not supported (as in TensorFlow)",
            ))
        })
    }))
}

impl Tensor {
    /// CTC loss of each example: `-log p(labels | logits)`, summed over every
    /// alignment of the labels to the frames (blanks between and around
    /// them, repeats merged), as TensorFlow 2's `tf.nn.ctc_loss` with dense
    /// labels.
    ///
    /// - `logits`: `[frames, batch, classes]` (`f32`/`f64`, or `f16`/`bf16`
    ///   computed in `f32` and rounded once; unnormalised), or
    ///   `[batch, frames, classes]` when `logits_time_major` is false;
    /// - `labels`: `[batch, max_label_length]` (`i32`/`i64`), the first
    ///   `label_length[b]` entries of row `b` used, each a class other than
    ///   the blank (the rest is padding, ignored);
    /// - `label_length`, `logit_length`: `[batch]` (`i32`/`i64`); example `b`
    ///   uses frames `0..logit_length[b]`, which must be at least
    ///   `label_length[b]` (an error otherwise, as TensorFlow's `CTCLoss`);
    /// - `blank_index`: the blank class, negative counting from the end.
    ///
    /// Returns the losses `[batch]`. Labels that no alignment fits
    /// (repeats need a blank between them) give `+inf`. Differentiable in
    /// the logits, once: the gradient is `softmax - occupancy`, zero past
    /// each example's frames; asking for a second derivative is an error, as
    /// in TensorFlow.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// // two frames, one example, classes {blank, a}, uniform logits: the
    /// // label "a" is matched by "a a", "a -", "- a": p = 3/4
    /// let logits = Tensor::zeros(&[2, 1, 2], gradtape::DType::F64);
    /// let labels = Tensor::from_vec(vec![1i32], &[1, 1])?;
    /// let n = Tensor::vector(&[1i32]);
    /// let t = Tensor::vector(&[2i32]);
    /// let loss = Tensor::ctc_loss(&labels, &logits, &n, &t, true, 0)?;
    /// assert!((loss.to_vec::<f64>()?[0] + 0.75f64.ln()).abs() < 1e-12);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn ctc_loss(
        labels: &Tensor,
        logits: &Tensor,
        label_length: &Tensor,
        logit_length: &Tensor,
        logits_time_major: bool,
        blank_index: i64,
    ) -> Result<Tensor> {
        expect_float(OP, logits)?;
        if logits.rank() != 3 {
            return Err(Error::invalid(
                OP,
                format!("logits must have rank 3, got shape {:?}", logits.shape()),
            ));
        }
        let blank = blank_of(blank_index, logits.shape()[2], logits.shape())?;
        if !logits_time_major {
            let x = logits.permute(&[1, 0, 2])?;
            return Tensor::ctc_loss(labels, &x, label_length, logit_length, true, blank as i64);
        }
        let (loss, grad) = run(labels, logits, label_length, logit_length, blank)?;
        let (lab, x, ll, tl) = (
            labels.clone(),
            logits.clone(),
            label_length.clone(),
            logit_length.clone(),
        );
        Ok(bind(
            NnOp::CtcLoss(blank),
            &[labels, logits, label_length, logit_length],
            loss,
            move |_| {
                vjp(move |g, needs| {
                    if !needs[1] {
                        return Ok(grads![None, None, None, None]);
                    }
                    // recorded (outer tape, trace) or pushed through forward mode
                    // (a forward accumulator): recomputed from the logits by an
                    // op of its own; otherwise the gradient of the forward pass
                    let d = if crate::dispatch::differentiating() {
                        ctc_loss_grad(&lab, &x, &ll, &tl, blank)?
                    } else {
                        grad.clone()
                    };
                    let b = d.shape()[1];
                    Ok(grads![None, Some(g[0].reshape(&[1, b, 1])?.mul(&d)?), None, None])
                })
            },
        ))
    }
}
