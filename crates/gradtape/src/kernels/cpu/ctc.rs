//! Connectionist temporal classification: the loss of each example and its
//! gradient with respect to the logits, by the forward-backward algorithm in
//! log space (Graves et al., 2006). Examples run in parallel; the
//! arithmetic is `f64` whatever the logits' dtype.

use super::workers;
use crate::error::Result;
use crate::tensor::{alloc, Float};

/// One example: its labels (already checked: each in `0..classes`, none the
/// blank) and its number of frames.
pub(crate) struct Example<'a> {
    pub labels: &'a [usize],
    pub frames: usize,
}

/// `log(exp(a) + exp(b))`, exact for infinite arguments.
#[inline]
fn log_add(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY {
        hi
    } else {
        hi + (lo - hi).exp().ln_1p()
    }
}

/// The loss and the gradient (`[frames_max, classes]`, row `t` for frame
/// `t`, zero past `frames`) of one example whose logits are `x(t, c)`.
///
/// The label is extended with blanks, `S = 2 L + 1` states; `alpha[t][s]`
/// is the log probability of the prefixes ending in state `s` at frame `t`
/// and `beta[t][s]` that of the suffixes starting there (both including
/// frame `t`'s emission). The loss is `-log p`, `log p` the sum of `alpha`
/// over the last two states at the last frame; the gradient is
/// `softmax - occupancy`, where the occupancy of class `c` at `t` sums
/// `exp(alpha + beta - emission - log p)` over the states of class `c`.
/// When no path fits (repeated labels need blanks between them) the loss is
/// `+inf` and the gradient the softmax alone, as TensorFlow's `CTCLoss`.
fn example(
    op: &'static str,
    ex: &Example<'_>,
    x: impl Fn(usize, usize) -> f64,
    frames_max: usize,
    classes: usize,
    blank: usize,
) -> Result<(f64, Vec<f64>)> {
    let (t_len, c) = (ex.frames, classes);
    let mut grad = alloc::try_filled(op, frames_max * c, 0.0f64)?;
    if t_len == 0 {
        // only the empty label can be matched by no frames (checked before)
        return Ok((0.0, grad));
    }
    // log-softmax of each frame
    let mut lp = alloc::try_filled(op, t_len * c, 0.0f64)?;
    for t in 0..t_len {
        let row = &mut lp[t * c..(t + 1) * c];
        for (k, v) in row.iter_mut().enumerate() {
            *v = x(t, k);
        }
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let z = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        row.iter_mut().for_each(|v| *v -= z);
    }
    let s_len = 2 * ex.labels.len() + 1;
    let state = |s: usize| if s.is_multiple_of(2) { blank } else { ex.labels[s / 2] };
    // a skip from s - 2 to s: s is a label that differs from the previous one
    let skip = |s: usize| s % 2 == 1 && s >= 2 && state(s) != state(s - 2);
    let ninf = f64::NEG_INFINITY;
    let mut alpha = alloc::try_filled(op, t_len * s_len, ninf)?;
    let mut beta = alloc::try_filled(op, t_len * s_len, ninf)?;
    alpha[0] = lp[blank];
    if s_len > 1 {
        alpha[1] = lp[state(1)];
    }
    for t in 1..t_len {
        let (prev, cur) = alpha.split_at_mut(t * s_len);
        let prev = &prev[(t - 1) * s_len..];
        for s in 0..s_len {
            let mut a = prev[s];
            if s >= 1 {
                a = log_add(a, prev[s - 1]);
            }
            if skip(s) {
                a = log_add(a, prev[s - 2]);
            }
            cur[s] = a + lp[t * c + state(s)];
        }
    }
    let last = t_len - 1;
    beta[last * s_len + s_len - 1] = lp[last * c + state(s_len - 1)];
    if s_len > 1 {
        beta[last * s_len + s_len - 2] = lp[last * c + state(s_len - 2)];
    }
    for t in (0..last).rev() {
        let (cur, next) = beta.split_at_mut((t + 1) * s_len);
        let (cur, next) = (&mut cur[t * s_len..], &next[..s_len]);
        for s in 0..s_len {
            let mut b = next[s];
            if s + 1 < s_len {
                b = log_add(b, next[s + 1]);
            }
            if s + 2 < s_len && skip(s + 2) {
                b = log_add(b, next[s + 2]);
            }
            cur[s] = b + lp[t * c + state(s)];
        }
    }
    let end = &alpha[last * s_len..];
    let log_p = if s_len > 1 {
        log_add(end[s_len - 1], end[s_len - 2])
    } else {
        end[0]
    };
    for t in 0..t_len {
        let g = &mut grad[t * c..(t + 1) * c];
        for (k, v) in g.iter_mut().enumerate() {
            *v = lp[t * c + k].exp();
        }
        if log_p == ninf {
            continue;
        }
        for s in 0..s_len {
            let k = state(s);
            let occ = alpha[t * s_len + s] + beta[t * s_len + s] - lp[t * c + k] - log_p;
            g[k] -= occ.exp();
        }
    }
    Ok((-log_p, grad))
}

/// The losses (`[batch]`) and gradients (`[frames, batch, classes]`) of
/// time-major logits `x` (`[frames, batch, classes]`, contiguous).
pub(crate) fn ctc_loss<T: Float>(
    op: &'static str,
    x: &[T],
    examples: &[Example<'_>],
    frames: usize,
    classes: usize,
    blank: usize,
) -> Result<(Vec<T>, Vec<T>)> {
    let batch = examples.len();
    let per = workers::map(batch, |b| {
        let at = |t: usize, k: usize| x[(t * batch + b) * classes + k].to_f64();
        example(op, &examples[b], at, frames, classes, blank)
    });
    let mut loss = alloc::try_vec(op, batch)?;
    let mut grad = alloc::try_filled(op, frames * batch * classes, T::zero())?;
    for (b, r) in per.into_iter().enumerate() {
        let (l, g) = r?;
        loss.push(T::from_f64(l));
        for t in 0..frames {
            let dst = &mut grad[(t * batch + b) * classes..][..classes];
            for (d, &v) in dst.iter_mut().zip(&g[t * classes..(t + 1) * classes]) {
                *d = T::from_f64(v);
            }
        }
    }
    Ok((loss, grad))
}
