//! The third part of the random programs' vocabulary: the ops whose CPU
//! kernels were rewritten last (vectorised or made single ops), each used
//! as a model uses it, so that their fused and threaded paths meet the
//! compiler's passes and the other ops' values: Mish and hard SiLU, powers
//! by the exponents that have exact forms (and by others), `where` with a
//! scalar, a row or a column operand read by broadcast, softmax,
//! log-softmax and log-sum-exp over a leading axis, rotary positions (the
//! op keras_hub's layer is now), and grouped-query attention, whose keys
//! and values are read per group of query heads without copies.

use gradtape::nn::{Layer, RotaryEmbedding};
use gradtape::{Result, Tensor};

use super::{fit, Step};

/// The first op of this part.
pub(super) const FIRST: usize = super::more_ops::FIRST + super::more_ops::COUNT;

/// The number of ops in this part.
pub(super) const COUNT: usize = 7;

/// Exponents of `pow_scalar`: those with exact forms first (0, 1, 2, 0.5,
/// -1 in every type; 3, -2, -0.5, 1.5 in `f32` through `f64`), then two
/// through the general power.
const EXPONENTS: [f64; 11] = [2.0, 0.5, -1.0, 3.0, -2.0, -0.5, 1.5, 0.0, 1.0, 2.5, -1.25];

/// `a` (rank 2 or 3) as `[lead, t, h, c / h]` heads: its rows the
/// positions, its last dim `h` heads of `c / h`; `None` where `c` has no
/// such split or the rank differs.
fn heads(a: &Tensor, h: usize) -> Result<Option<Tensor>> {
    let sh = a.shape().to_vec();
    if !(2..=3).contains(&sh.len()) {
        return Ok(None);
    }
    let (t, c) = (sh[sh.len() - 2], sh[sh.len() - 1]);
    if c == 0 || !c.is_multiple_of(h) {
        return Ok(None);
    }
    let lead = if sh.len() == 3 { sh[0] } else { 1 };
    Ok(Some(a.reshape(&[lead, t, h, c / h])?))
}

/// Runs op `s.op` (at least [`FIRST`]) on the values so far; `Err` where
/// the operands do not fit.
pub(super) fn apply(s: &Step, v: &[Tensor]) -> Result<Tensor> {
    let a = &v[s.a % v.len()];
    let b = &v[s.b % v.len()];
    match s.op - FIRST {
        0 => {
            // Mish or hard SiLU, alone or gating another value
            let act = match s.p % 2 {
                0 => a.mish()?,
                _ => a.mul_scalar(2.5)?.hard_silu()?,
            };
            match s.flag {
                true => act.mul(&fit(a, b, s.q)?),
                false => Ok(act),
            }
        }
        1 => {
            // a power: the exact forms on any value (integers) or on a
            // positive one (roots, negative powers)
            let c = EXPONENTS[s.p % EXPONENTS.len()];
            let base = match c.fract() == 0.0 && c >= 0.0 {
                true => a.clone(),
                false => a.abs()?.add_scalar(0.25)?,
            };
            base.pow_scalar(c)?.tanh()
        }
        2 => {
            // `where` with an operand read by broadcast: a scalar, a row
            // (sums down to the last dim) or a column (a kept mean), on
            // either side
            let cond = a.gt_scalar(0.1)?;
            let other = match s.p % 3 {
                0 => Tensor::full(&[], 0.25 * (s.q % 4) as f64 - 0.5, a.dtype()),
                1 => fit(a, b, 2)?,
                _ => fit(a, b, 3)?,
            };
            match s.flag {
                true => Tensor::where_(&cond, a, &other),
                false => Tensor::where_(&cond, &other, &a.sin()?),
            }
        }
        3 => {
            // softmax, log-softmax or log-sum-exp over the leading axis
            // (read in columns, in place), or over a middle one
            if a.rank() < 2 {
                return a.softmax(-1);
            }
            let ax = match a.rank() == 3 && s.flag {
                true => 1,
                false => 0,
            };
            match s.p % 3 {
                0 => a.softmax(ax),
                1 => a.log_softmax(ax),
                _ => a.logsumexp(&[ax], s.q % 2 == 1),
            }
        }
        4 => {
            // rotary positions over a value's rows, as heads of 2 or 4
            // features (keras_hub's `[batch, time, heads, dim]`), started
            // at position 0 or later (a decoder's cache)
            let h = [2usize, 1][s.q % 2];
            let Some(x) = heads(a, h)? else { return a.cos() };
            if !x.shape()[3].is_multiple_of(2) {
                return a.cos();
            }
            let rope = RotaryEmbedding::builder()
                .max_wavelength([10000.0, 16.0][s.p % 2])
                .build()?;
            let y = match s.flag {
                true => rope.call(&x)?,
                false => rope.call_at(&x, 3 + s.p % 5)?,
            };
            y.reshape(a.shape())
        }
        5 => {
            // grouped-query attention: 4 (or 2) query heads from `a`, 2
            // (or 1) key/value heads from the first half of `sin a` and of
            // `b` fitted to `a`, causal or not
            let (hq, hkv) = [(4usize, 2usize), (2, 1), (4, 1)][s.p % 3];
            let c = a.shape().last().copied().unwrap_or(0);
            let Some(q) = heads(a, hq)? else { return a.sigmoid() };
            let width = c / hq * hkv;
            let half = |x: &Tensor| -> Result<Option<Tensor>> { heads(&x.narrow(-1, 0, width)?, hkv) };
            let (Some(k), Some(w)) = (half(&a.sin()?)?, half(&fit(a, b, 4)?)?) else {
                return a.sigmoid();
            };
            let t = |x: Tensor| x.permute(&[0, 2, 1, 3]);
            let scale = (s.q % 2 == 1).then_some(0.4);
            let o = t(q)?.grouped_query_attention(&t(k)?, &t(w)?, None, s.flag, scale, None)?;
            o.permute(&[0, 2, 1, 3])?.reshape(a.shape())
        }
        6 => {
            // a softplus-gated residual through the exact square root
            // (pow 0.5) and reciprocal (pow -1), as an RMS-style scale
            let ms = a.square()?.mean(&[-1], true)?.add_scalar(1e-3)?;
            let scale = match s.flag {
                true => ms.pow_scalar(-0.5)?,
                false => ms.pow_scalar(0.5)?.pow_scalar(-1.0)?,
            };
            a.mul(&scale)?.add(&a.softplus()?.mul_scalar(0.1)?)
        }
        _ => unreachable!("{} ops in the third part", COUNT),
    }
}
