//! The second half of the random programs' vocabulary: convolutions and
//! pooling over a value seen as an image, padding in its three modes,
//! tiles, repeats, reversals and rolls, more activations, products and
//! sorts along an axis, selections by an argmax, casts through a narrower
//! float, segment sums and scatters, `einsum`, moments and batch and L2
//! normalisation, `atan2` and `pow`, stacks, band parts, strided slices,
//! the control flow of a traced function (`cond` and `while_loop`
//! whose choices depend on the values), and the fused LSTM step. These reach the compiler's passes
//! the first half does not (pooling with its positions, a convolution's
//! matrix shared with its filter gradient) and the graph nodes of control
//! flow.

use gradtape::{cond, while_loop, DType, PadMode, Padding, Result, Slice, Tensor, WhileOptions};

use super::{fit, Step};

/// The first op of this half.
pub(super) const FIRST: usize = 40;

/// The number of ops in this half.
pub(super) const COUNT: usize = 20;

/// The op that casts through a narrower float.
pub(super) const NARROWING: usize = FIRST + 8;

/// `a` as one NHWC image: its rows the height and its columns the width
/// (one channel), or a rank-3 value's leading dim as the batch; `None`
/// for other ranks.
pub(super) fn image(a: &Tensor) -> Result<Option<Tensor>> {
    let sh = a.shape().to_vec();
    Ok(match sh.len() {
        2 => Some(a.reshape(&[1, sh[0], sh[1], 1])?),
        3 => Some(a.reshape(&[sh[0], sh[1], sh[2], 1])?),
        _ => None,
    })
}

/// An NHWC result back to rank 2: `[n·h, w·c]`.
fn flat(y: &Tensor) -> Result<Tensor> {
    let s = y.shape();
    y.reshape(&[s[0] * s[1], s[2] * s[3]])
}

/// `count` values made from `w` (its elements, repeated as needed), shaped
/// as `shape`: a filter that depends on an input.
fn filter_from(w: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let count: usize = shape.iter().product();
    let flat = w.reshape(&[w.numel()])?;
    let reps = count.div_ceil(w.numel().max(1)).max(1);
    flat.tile(&[reps])?.narrow(0, 0, count)?.mul_scalar(0.5)?.reshape(shape)
}

/// Runs op `s.op` (at least [`FIRST`]) on the values so far; `Err` where
/// the operands do not fit.
pub(super) fn apply(s: &Step, v: &[Tensor]) -> Result<Tensor> {
    let a = &v[s.a % v.len()];
    let b = &v[s.b % v.len()];
    let r = a.rank() as isize;
    let axis = |k: usize| -> isize { (k % a.rank().max(1)) as isize - if s.flag { r } else { 0 } };
    let padding = if s.q.is_multiple_of(2) {
        Padding::Same
    } else {
        Padding::Valid
    };
    let stride = 1 + (s.p / 3 % 2) as i64;
    match s.op - FIRST {
        0 => {
            // a convolution layer: a filter from the weight input, a bias,
            // a ReLU (its filter gradient shares the input's matrix)
            let Some(x) = image(a)? else { return a.sin() };
            let k = 1 + s.p % 3;
            let f = filter_from(&v[2], &[k, k, 1, 2])?;
            let dil = if s.flag { 2 } else { 1 };
            let y = x.conv2d(&f, [stride, stride], padding, [dil, dil])?;
            flat(&y.add(&fit(&y, b, 1)?)?.relu()?)
        }
        1 => {
            // pooling: max (its gradient reads the positions) or average
            let Some(x) = image(a)? else { return a.cos() };
            let k = 2 + (s.p % 2) as i64;
            let y = match s.flag {
                true => x.max_pool2d([k, k], [stride, stride], padding)?,
                false => x.avg_pool2d([k, k], [stride, stride], padding)?,
            };
            flat(&y.tanh()?)
        }
        2 => {
            // padding along one axis, in one of the three modes
            let mode = match s.p % 3 {
                0 => PadMode::Constant(0.25),
                1 => PadMode::Reflect,
                _ => PadMode::Symmetric,
            };
            let ax = axis(s.q).rem_euclid(r.max(1)) as usize;
            let mut pads = vec![(0, 0); a.rank()];
            if let Some(p) = pads.get_mut(ax) {
                *p = (s.q / 2 % 3, s.q / 6 % 2);
            }
            a.pad_with(&pads, mode)?
                .mul(&a.pad_with(&pads, PadMode::Constant(1.0))?)
        }
        3 => match s.p % 4 {
            0 => {
                let mut m = vec![1; a.rank()];
                if let Some(x) = m.last_mut() {
                    *x = 2;
                }
                a.tile(&m)?.sin()
            }
            1 => a.repeat(2, axis(s.q))?.tanh(),
            2 => a.reverse(&[axis(s.q)])?.mul(a),
            _ => a.roll(&[1 + (s.q % 3) as isize], &[axis(s.q / 3)])?.sub(a),
        },
        4 => {
            // more activations
            match s.p % 10 {
                0 => a.leaky_relu(0.2),
                1 => a.elu(),
                2 => a.selu(),
                3 => a.silu(),
                4 => a.relu6(),
                5 => a.softsign(),
                6 => a.erf(),
                7 => a.tanh()?.expm1(),
                8 => a.clip_by_value(-0.5, 0.7),
                _ => a.log_sigmoid(),
            }
        }
        5 => {
            // products along an axis, of values near one
            let x = a.tanh()?.mul_scalar(0.5)?.add_scalar(1.0)?;
            match s.flag {
                true => x.cumprod(axis(s.p), s.q % 2 == 1, s.q / 2 % 2 == 1),
                false => x.prod(&[axis(s.p)], s.q % 2 == 1),
            }
        }
        6 => {
            // sorted along the last axis, or its largest two (in the
            // order a referee gives, if it does: see `ties`)
            let k = a.shape().last().copied().unwrap_or(0).min(2);
            match (s.flag, super::ties::order(a, !s.flag || s.p % 2 == 1)?) {
                (true, None) => a.sort(-1, s.p % 2 == 1)?.mul(a),
                (false, None) => Ok(a.top_k(k)?.0),
                (true, Some(o)) => a.take_along_axis(&o, -1)?.mul(a),
                (false, Some(o)) => a.take_along_axis(&o.narrow(-1, 0, k)?, -1),
            }
        }
        7 => {
            // a selection by the argmax: a one-hot row picks each row's
            // largest element of `b`
            let last = a.shape().last().copied().unwrap_or(0);
            let pick = a.argmax(-1)?.one_hot(last, 1.0, 0.0, -1, a.dtype())?;
            pick.mul(&fit(a, b, 4)?)?.sum(&[-1], s.flag)
        }
        8 => {
            // through a narrower float and back (mixed precision)
            let narrow = [DType::F32, DType::BF16, DType::F16][s.p % 3];
            a.mul_scalar(1.5)?.cast(narrow)?.cast(a.dtype())?.tanh()
        }
        9 => {
            // rows summed into segments, or scattered into a larger value
            let rows = a.shape().first().copied().unwrap_or(1);
            let segs = 1 + s.p % 3;
            match s.flag {
                true => {
                    let ids: Vec<i64> = (0..rows).map(|i| ((i * 5 + s.q) % segs) as i64).collect();
                    a.unsorted_segment_sum(&Tensor::from_vec(ids, &[rows])?, segs)
                }
                false => {
                    let ids: Vec<i64> = (0..rows).map(|i| ((i + s.q) % (rows + 1)) as i64).collect();
                    let mut sh = a.shape().to_vec();
                    if let Some(x) = sh.first_mut() {
                        *x += 1;
                    }
                    let base = Tensor::try_ones(&sh, a.dtype())?;
                    base.tensor_scatter_nd_add(&Tensor::from_vec(ids, &[rows, 1])?, a)
                }
            }
        }
        10 => {
            if a.rank() != 2 {
                return Tensor::einsum("...->...", &[a]);
            }
            match s.p % 4 {
                0 => Tensor::einsum("ij->ji", &[a]),
                1 => Tensor::einsum("ij,ij->i", &[a, &fit(a, b, 4)?]),
                2 => Tensor::einsum("ij,jk->ik", &[a, &v[2]]),
                _ => Tensor::einsum("ij,kj->ik", &[a, &a.tanh()?]),
            }
        }
        11 => {
            let ax = axis(s.q);
            match s.p % 3 {
                0 => {
                    let (mean, var) = a.moments(&[ax], true)?;
                    Tensor::batch_normalization(a, &mean, &var, None, Some(&fit(a, b, 1)?), 1e-3)
                }
                1 => a.l2_normalize(&[ax], 1e-6),
                _ => {
                    let (mean, var) = a.moments(&[ax], s.flag)?;
                    // (a variance zero up to rounding: see the referee)
                    let var = super::referees::snap_rounding_zero(a, &[ax], s.flag, &var)?;
                    mean.add(&var.sqrt()?)
                }
            }
        }
        12 => {
            let other = fit(a, b, s.p)?;
            match s.flag {
                // (both moved: `atan2` at the origin takes every value
                // within rounding, a mean that cancels to 1e-16 eagerly and
                // to -1e-16 traced gave 0 and π; and on its branch cut it
                // gives ±π by the sign of a zero, which a product of one
                // term by a GEMM (+0) and by a multiply (-0) differ in. A
                // sum with a nonzero offset is never -0.)
                true => a.add_scalar(0.37)?.atan2(&other.add_scalar(0.37)?),
                false => a.abs()?.add_scalar(0.5)?.pow(&other.tanh()?.mul_scalar(2.0)?),
            }
        }
        13 => {
            let ax = (s.p % (a.rank() + 1)) as isize;
            let st = Tensor::stack(&[a, &a.sin()?], ax)?;
            let parts = st.unstack(ax)?;
            parts[0].mul(&parts[1])?.add(&st.sum(&[ax], false)?)
        }
        14 => {
            if a.rank() < 2 {
                return a.exp();
            }
            match s.p % 3 {
                0 => a.tril(),
                1 => a.triu(),
                _ => a.band_part((s.q % 3) as isize - 1, (s.q / 3 % 2) as isize),
            }
        }
        15 => {
            // every other element along an axis, maybe backwards
            let ax = axis(s.q).rem_euclid(r.max(1)) as usize;
            let mut sl = vec![Slice::new(None, None, 1); a.rank()];
            if let Some(x) = sl.get_mut(ax) {
                *x = match s.flag {
                    true => Slice::new(None, None, -2),
                    false => Slice::new(Some((s.p % 2) as isize), None, 2),
                };
            }
            a.strided_slice(&sl)
        }
        16 => {
            // a branch chosen by the values (both branches traced); the
            // threshold away from the values that come out whole, or zero
            // within rounding (a normalised row's sum, 9e-16 eagerly and
            // below 0 traced, chose the other branch)
            let pred = a.sum_all()?.gt_scalar(0.0371)?;
            let other = fit(a, b, 4)?;
            cond(
                &pred,
                || a.tanh()?.mul(&other),
                || a.mul_scalar(0.5)?.sub(&other.sin()?),
            )
        }
        17 => {
            // a loop whose trip count depends on the values
            let start = a.tanh()?;
            let limit = 1.0371 + (s.p % 4) as f64;
            let out = while_loop(
                |x: &Vec<Tensor>| x[0].abs()?.mean_all()?.lt_scalar(limit),
                |x: &Vec<Tensor>| Ok(vec![x[0].mul_scalar(1.5)?.add(&x[0].sin()?.mul_scalar(0.1)?)?]),
                vec![start],
                WhileOptions {
                    max_iterations: Some(4),
                    ..WhileOptions::default()
                },
            )?;
            Ok(out[0].clone())
        }
        18 => {
            // a depthwise convolution (one filter per channel: the image's
            // columns as channels), or a bilinear resize
            let sh = a.shape().to_vec();
            if sh.len() != 2 {
                return a.square();
            }
            match s.flag {
                true => {
                    let x = a.reshape(&[1, sh[0], 1, sh[1]])?;
                    let k = 1 + s.p % 2;
                    let f = filter_from(&v[2], &[k, 1, sh[1], 1])?;
                    flat(&x.depthwise_conv2d(&f, [1, 1], padding, [1, 1])?)
                }
                false => {
                    let x = a.reshape(&[1, sh[0], sh[1], 1])?;
                    let size = [sh[0] + 1 + s.q % 3, 1 + sh[1] / 2];
                    flat(&x.resize_bilinear(size, !s.p.is_multiple_of(2), s.p.is_multiple_of(2))?)
                }
            }
        }
        19 => {
            // the fused LSTM step: gates from `a` tiled 4 times along its
            // last dim (biased apart), the state `b` fitted to `a`
            if a.rank() == 0 {
                return a.sigmoid();
            }
            let mut reps = vec![1; a.rank()];
            reps[a.rank() - 1] = 4;
            let z = a.tile(&reps)?.add_scalar(0.1 * (s.p % 5) as f64 - 0.2)?;
            let c = fit(a, b, s.q)?;
            if c.shape() != a.shape() {
                return a.sigmoid()?.mul(&a.tanh()?);
            }
            let (h, c1) = Tensor::lstm_cell(&z, &c)?;
            match s.flag {
                true => h.add(&c1.mul_scalar(0.5)?),
                false => h.mul(a),
            }
        }
        _ => unreachable!("{} ops in the second half", COUNT),
    }
}
