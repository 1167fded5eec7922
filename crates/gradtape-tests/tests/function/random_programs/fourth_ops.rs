//! The fourth part of the random programs' vocabulary: the traceable ops
//! the first three parts never drew (listed by descriptor in
//! [`super`]'s docs), each used as a model uses it, so that a traced
//! graph holding them meets the compiler's passes (fusion of the
//! elementwise ones, folding and common subexpressions of the index
//! ops, the shape plans of the rest) against eager, values, gradients
//! and forward mode:
//!
//! - the elementwise ops left: the inverse and hyperbolic trigonometry,
//!   `erfc`, the shrinks, hard activations, `glu`, `celu`,
//!   `squared_difference`, `neg`, `reciprocal`, `log`;
//! - the special functions (`lgamma`, `digamma`, `polygamma`, `igamma`
//!   and `igammac`, `betainc`, `erfinv`, `ndtri`, the scaled Bessel
//!   functions);
//! - the integer and boolean ops: `floor`, `ceil`, `round`, `sign`,
//!   `floor_div` and `floor_mod`, casts to `i32` and `i64`, bitwise ops,
//!   shifts and `invert`, every comparison, the logical ops, `any` and
//!   `all`, `argmin`;
//! - the segment reductions (sorted, with empty segments, and unsorted
//!   products, extrema and means);
//! - the index ops: `gather_nd`, `scatter_nd`, `tensor_scatter_nd_update`,
//!   `gather` with batch dims, `embedding_lookup`, `scatter_add`,
//!   `dynamic_slice` and `dynamic_update_slice` at offsets the values
//!   decide, `searchsorted`;
//! - the losses (`sparse_`, `softmax_` and `sigmoid_cross_entropy`, the
//!   weighted one, `log_poisson_loss`, `l2_loss`) and `bias_add`;
//! - linear algebra on a positive definite matrix made from a value
//!   (Cholesky, solves, inverse, determinants, eigenvalues, singular
//!   values, QR, `matrix_exp`, `pinv`, `lstsq`, norms, `trace`, `diag`);
//! - complex numbers and the FFTs (`complex`, `fft`, `ifft`, `rfft`,
//!   `irfft`, `abs`, `angle`, `real`, `imag`, `conj`);
//! - the other convolutions and pools (1-D, 3-D, transposed, separable),
//!   `extract_patches`, nearest, bicubic and area resizes,
//!   `crop_and_resize`;
//! - the fused LSTM and GRU recurrences over a sequence;
//! - `vmap` inside a traced function, and a `while_loop` of two carries
//!   with a `cond` in its body;
//! - the ops whose output shape the values decide (`unique`, `bincount`,
//!   `boolean_mask`, `argwhere`): a traced graph must not keep the shapes
//!   of its first call.

use gradtape::{cond, vmap, while_loop, DType, Padding, ResizeMethod, Result, Tensor, WhileOptions};

use super::more_ops::image;
use super::{fit, Step};

/// The first op of this part.
pub(super) const FIRST: usize = super::third_ops::FIRST + super::third_ops::COUNT;

/// The number of ops in this part.
pub(super) const COUNT: usize = 15;

/// The op whose results' shapes the values decide (`unique`, `bincount`,
/// `boolean_mask`, `argwhere`).
pub(super) const VALUE_SHAPES: usize = FIRST + 14;

/// Whether a step is the CTC loss (differentiable once only).
pub(super) fn is_ctc(s: &Step) -> bool {
    s.op == FIRST + 6 && s.p % 8 == 7
}

/// An `[n, n]` positive definite matrix made from a rank-2 `a` (`[r, c]`):
/// `a aᵀ / c + I` (`n = r`); `None` for other ranks or past 64 rows.
fn spd(a: &Tensor) -> Result<Option<Tensor>> {
    if a.rank() != 2 || a.shape()[0] > 64 || a.shape()[1] == 0 {
        return Ok(None);
    }
    let (r, c) = (a.shape()[0], a.shape()[1]);
    let m = a.matmul(&a.transpose()?)?.div_scalar(c as f64)?;
    Ok(Some(m.add(&Tensor::try_eye(r, a.dtype())?)?))
}

/// A rank-2 view of any result: `[first dim, the rest]`.
fn flat(y: &Tensor) -> Result<Tensor> {
    let s = y.shape();
    match s.len() {
        0 => y.reshape(&[1, 1]),
        1 => y.reshape(&[1, s[0]]),
        _ => y.reshape(&[s[0], s[1..].iter().product()]),
    }
}

/// `count` values made from `w`, shaped as `shape` (a filter that depends
/// on an input).
fn filter_from(w: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let count: usize = shape.iter().product();
    let flat = w.reshape(&[w.numel()])?;
    let reps = count.div_ceil(w.numel().max(1)).max(1);
    flat.tile(&[reps])?.narrow(0, 0, count)?.mul_scalar(0.5)?.reshape(shape)
}

/// Integer ids `(i·step + off) mod n` for `count` positions, as `i64`.
fn ids(count: usize, step: usize, off: usize, n: usize, shape: &[usize]) -> Result<Tensor> {
    let v: Vec<i64> = (0..count).map(|i| ((i * step + off) % n.max(1)) as i64).collect();
    Tensor::from_vec(v, shape)
}

/// Runs op `s.op` (at least [`FIRST`]) on the values so far; `Err` where
/// the operands do not fit. An op that refuses a half type (linear
/// algebra, special functions, complex numbers) runs as mixed precision
/// does: on its operands cast to `f32`, its result cast back, so that a
/// half program applies the same steps as an `f64` one.
pub(super) fn apply(s: &Step, v: &[Tensor]) -> Result<Tensor> {
    let dtype = v[s.a % v.len()].dtype();
    match apply_in(s, v) {
        Err(_) if dtype == DType::F16 || dtype == DType::BF16 => {
            let used = [s.a % v.len(), s.b % v.len(), 1, 2];
            let wide = v
                .iter()
                .enumerate()
                .map(|(i, t)| match used.contains(&i) {
                    true => t.cast(DType::F32),
                    false => Ok(t.clone()),
                })
                .collect::<Result<Vec<_>>>()?;
            apply_in(s, &wide)?.cast(dtype)
        }
        r => r,
    }
}

/// [`apply`] in the operands' own type.
fn apply_in(s: &Step, v: &[Tensor]) -> Result<Tensor> {
    let a = &v[s.a % v.len()];
    let b = &v[s.b % v.len()];
    let r = a.rank() as isize;
    let axis = |k: usize| -> isize { (k % a.rank().max(1)) as isize - if s.flag { r } else { 0 } };
    match s.op - FIRST {
        0 => {
            // the elementwise ops left, on arguments inside their domains
            let t = a.tanh()?;
            match s.p % 20 {
                0 => t.mul_scalar(1.2)?.tan(),
                1 => t.mul_scalar(0.9)?.asin(),
                2 => t.mul_scalar(0.9)?.acos(),
                3 => a.atan(),
                4 => t.mul_scalar(2.0)?.sinh()?.add(&t.cosh()?),
                5 => a.asinh(),
                6 => a.abs()?.add_scalar(1.1)?.acosh(),
                7 => t.mul_scalar(0.9)?.atanh(),
                8 => a.erfc(),
                9 => a.tanh_shrink(),
                10 => a.square()?.add_scalar(1.0)?.reciprocal(),
                11 => a.abs()?.add_scalar(0.5)?.log(),
                12 => a.neg()?.mul(&fit(a, b, s.q)?),
                13 => a.squared_difference(&fit(a, b, s.q)?)?.tanh(),
                14 => a.celu(0.5 + (s.q % 3) as f64 * 0.5),
                15 => a.hard_sigmoid()?.add(&a.hard_tanh()?),
                16 => a.soft_shrink(0.3)?.add(&a.hard_shrink(0.4)?),
                17 => a.squareplus(1.0 + (s.q % 2) as f64)?.add(&a.sparse_plus()?),
                18 => match a.shape().last() {
                    Some(&c) if c % 2 == 0 && c > 0 => a.glu(-1),
                    _ => a.softsign(),
                },
                _ => a.mul_scalar(3.0)?.hard_silu()?.sub(&a.elu()?),
            }
        }
        1 => {
            // the special functions, on arguments inside their domains
            let pos = a.abs()?.add_scalar(0.5)?;
            let unit = a.sigmoid()?.mul_scalar(0.98)?.add_scalar(0.01)?;
            let other = fit(a, b, s.q)?.abs()?.add_scalar(0.1)?;
            match s.p % 10 {
                0 => pos.lgamma(),
                1 => pos.digamma(),
                2 => Tensor::polygamma(&Tensor::full(&[], (1 + s.q % 2) as f64, a.dtype()), &pos),
                3 => Tensor::igamma(&pos, &other),
                4 => Tensor::igammac(&pos, &other),
                5 => Tensor::betainc(&pos, &other.add_scalar(0.4)?, &unit),
                6 => unit.mul_scalar(2.0)?.add_scalar(-1.0)?.erfinv(),
                7 => unit.ndtri(),
                8 => a.bessel_i0e(),
                _ => a.bessel_i1e(),
            }
        }
        2 => {
            // integer and boolean ops: a value's steps (floor, ceil,
            // round, casts to integers, bitwise ops) and comparisons pick
            // or scale the value itself, so its gradient flows around them
            let other = fit(a, b, s.q)?;
            let shifted = a.mul_scalar(3.0)?.add_scalar(0.0371)?;
            match s.p % 12 {
                0 => shifted.floor()?.mul(a),
                1 => shifted.ceil()?.add(&shifted.round()?)?.mul(&a.sin()?),
                2 => a.sign()?.mul(&other),
                3 => shifted.floor_mod(&Tensor::full(&[], 0.7, a.dtype()))?.add(a),
                4 => shifted.floor_div(&other.abs()?.add_scalar(0.6)?)?.mul(a),
                5 => {
                    // through i32 and i64: bitwise and, or, xor, shifts
                    let i = shifted.cast(DType::I32)?;
                    let m = Tensor::full(&[], 5.0, DType::I32);
                    let j = i
                        .bitwise_and(&m)?
                        .bitwise_or(&i.right_shift(&Tensor::full(&[], 1.0, DType::I32))?)?;
                    let k = j.bitwise_xor(&i.left_shift(&Tensor::full(&[], 2.0, DType::I32))?)?;
                    let l = k.cast(DType::I64)?.invert()?;
                    l.cast(a.dtype())?.mul_scalar(0.01)?.mul(a)
                }
                6 => {
                    let c = match s.q % 6 {
                        0 => a.eq(&other)?,
                        1 => a.ne(&other)?,
                        2 => a.lt(&other)?,
                        3 => a.le(&other)?,
                        4 => a.ge(&other)?,
                        _ => a.gt(&other)?,
                    };
                    Tensor::where_(&c, &a.sin()?, &other.broadcast_to(a.shape())?)
                }
                7 => {
                    let (x, y) = (a.gt_scalar(0.0371)?, other.lt_scalar(-0.1)?);
                    let c = match s.q % 4 {
                        0 => x.logical_and(&y)?,
                        1 => x.logical_or(&y)?,
                        2 => x.logical_xor(&y)?,
                        _ => x.logical_not()?,
                    };
                    Tensor::where_(&c, a, &a.mul_scalar(-0.5)?)
                }
                8 => {
                    // rows (or columns) any/all of whose elements pass
                    let c = a.gt_scalar(-0.2371)?;
                    let ax = axis(s.q);
                    let m = match s.flag {
                        true => c.any(&[ax], true)?,
                        false => c.all(&[ax], true)?,
                    };
                    m.cast(a.dtype())?.add_scalar(0.5)?.mul(a)
                }
                9 => {
                    let last = a.shape().last().copied().unwrap_or(0);
                    let pick = a.argmin(-1)?.one_hot(last, 1.0, 0.0, -1, a.dtype())?;
                    pick.mul(&fit(a, b, 4)?)?.sum(&[-1], s.flag)
                }
                10 => shifted.cast(DType::I64)?.cast(a.dtype())?.add(&a.tanh()?),
                _ => a
                    .is_finite()?
                    .logical_and(&a.is_nan()?.logical_not()?)?
                    .cast(a.dtype())?
                    .mul(a),
            }
        }
        3 => {
            // rows into segments: sorted ids with gaps (empty segments),
            // or unsorted ones, reduced by a sum, product, max, min or mean
            let rows = a.shape().first().copied().unwrap_or(1);
            if a.rank() == 0 {
                return a.cos();
            }
            let x = match s.p % 5 == 1 {
                true => a.tanh()?.mul_scalar(0.5)?.add_scalar(1.0)?,
                false => a.clone(),
            };
            let segs = 1 + s.q % 4;
            match s.flag {
                true => {
                    // sorted: each id repeated, every other skipped
                    let sorted: Vec<i64> = (0..rows).map(|i| (2 * i * segs / rows.max(1)) as i64).collect();
                    let ids = Tensor::from_vec(sorted, &[rows])?;
                    match s.p % 5 {
                        0 => x.segment_sum(&ids),
                        1 => x.segment_prod(&ids),
                        2 => x.segment_max(&ids),
                        3 => x.segment_min(&ids),
                        _ => x.segment_mean(&ids),
                    }
                }
                false => {
                    let ids = ids(rows, 5, s.q, segs + 1, &[rows])?;
                    let n = segs + 2;
                    match s.p % 5 {
                        0 => x.unsorted_segment_mean(&ids, n),
                        1 => x.unsorted_segment_prod(&ids, n),
                        2 => x.unsorted_segment_max(&ids, n),
                        3 => x.unsorted_segment_min(&ids, n),
                        _ => x.unsorted_segment_mean(&ids, n),
                    }
                }
            }
        }
        4 => {
            // the index ops, at indices the shapes decide (with repeats)
            if a.rank() != 2 || a.numel() == 0 {
                return a.exp();
            }
            let (n0, n1) = (a.shape()[0], a.shape()[1]);
            let k = 1 + s.q % 5;
            match s.p % 7 {
                0 => {
                    let pairs: Vec<i64> = (0..k)
                        .flat_map(|i| [((i * 3 + s.q) % n0) as i64, ((i * 7 + s.q / 5) % n1) as i64])
                        .collect();
                    a.gather_nd(&Tensor::from_vec(pairs, &[k, 2])?)?.sin()
                }
                1 => {
                    // rows added into a larger zero value (repeats summed)
                    let m = k.min(n0);
                    let rows = ids(m, 3, s.q, n0 + 1, &[m, 1])?;
                    Tensor::scatter_nd(&rows, &a.narrow(0, 0, m)?, &[n0 + 1, n1])
                }
                2 => {
                    // distinct rows updated (duplicates are unordered)
                    let m = k.min(n0);
                    let rows = ids(m, 1, s.q, n0, &[m, 1])?;
                    a.tensor_scatter_nd_update(&rows, &fit(a, b, 4)?.narrow(0, 0, m)?.tanh()?)
                }
                3 => {
                    // each row its own columns (batch dims 1)
                    let cols = ids(n0 * 2, 5, s.q, n1, &[n0, 2])?;
                    a.gather_with(&cols, 1, 1)
                }
                4 => {
                    let rows = ids(k * 2, 3, s.q, n0, &[k, 2])?;
                    a.embedding_lookup(&rows)?.sum(&[1], false)
                }
                5 => {
                    let rows = ids(n0, 2, s.q, n0 + 1, &[n0])?;
                    a.scatter_add(&rows, 0, n0 + 1)
                }
                _ => {
                    // where each of `b`'s elements would go in `a`'s rows
                    // sorted, picked back from the sorted rows
                    let sorted = a.sort(-1, false)?;
                    let q = fit(a, b, 4)?.add_scalar(0.0371)?;
                    let at = sorted.searchsorted(&q, s.flag)?;
                    let at = at.minimum(&Tensor::full(&[], (n1 - 1) as f64, DType::I64))?;
                    sorted.take_along_axis(&at, -1)?.mul(&q)
                }
            }
        }
        5 => {
            // a window whose offsets the values decide (the argmax of the
            // column sums, wrapped so that the window fits: a window past
            // the end is an error of the values, by design), read or written
            if a.rank() != 2 || a.numel() == 0 {
                return a.sigmoid();
            }
            let (n0, n1) = (a.shape()[0], a.shape()[1]);
            let w = [1 + s.q % n0, 1 + (s.q / 3) % n1];
            let room = Tensor::full(&[], (n1 - w[1] + 1) as f64, DType::I64);
            let col = a.sum(&[0], false)?.argmax(0)?.floor_mod(&room)?;
            let row = Tensor::full(&[], (s.p % (n0 - w[0] + 1)) as f64, DType::I64);
            let start = Tensor::stack(&[&row, &col], 0)?;
            match s.flag {
                true => a.dynamic_slice(&start, &w)?.tanh(),
                false => {
                    let u = fit(a, b, 4)?.narrow(0, 0, w[0])?.narrow(1, 0, w[1])?;
                    a.dynamic_update_slice(&u.sin()?, &start)
                }
            }
        }
        6 => {
            // losses over a value's rows as logits, and `bias_add`
            if a.rank() != 2 {
                return a.softplus();
            }
            let (n0, n1) = (a.shape()[0], a.shape()[1]);
            let other = fit(a, b, 4)?;
            match s.p % 8 {
                7 => {
                    // CTC over the rows as frames (one example, the
                    // columns as classes, 0 the blank)
                    if n1 < 2 || n0 == 0 {
                        return a.softplus();
                    }
                    let len = 1 + s.q % n0.min(3);
                    let labels: Vec<i64> = (0..len).map(|i| (1 + (i + s.q) % (n1 - 1)) as i64).collect();
                    let labels = Tensor::from_vec(labels, &[1, len])?;
                    let lens = (Tensor::vector(&[len as i64]), Tensor::vector(&[n0 as i64]));
                    Tensor::ctc_loss(&labels, &a.reshape(&[n0, 1, n1])?, &lens.0, &lens.1, true, 0)
                }
                0 => {
                    let labels = ids(n0, 3, s.q, n1, &[n0])?;
                    Tensor::sparse_softmax_cross_entropy_with_logits(&labels, a)
                }
                1 => Tensor::softmax_cross_entropy_with_logits(&other.softmax(-1)?, a),
                2 => Tensor::sigmoid_cross_entropy_with_logits(&other.sigmoid()?, a),
                3 => Tensor::weighted_cross_entropy_with_logits(&other.sigmoid()?, a, 0.5 + (s.q % 3) as f64),
                4 => Tensor::log_poisson_loss(&other.abs()?, a, s.flag),
                5 => a.l2_loss()?.add(&other.l2_loss()?.mul_scalar(0.5)?),
                _ => a.bias_add(&fit(a, b, 2)?)?.relu(),
            }
        }
        7 => {
            // linear algebra on `a aᵀ / c + I`
            let Some(m) = spd(a)? else { return a.square() };
            let rhs = match a.rank() == 2 {
                true => a.clone(),
                false => return a.square(),
            };
            match s.p % 15 {
                14 => {
                    // L U = P m, read through the permutation's rows
                    let (l, u, perm) = m.lu()?;
                    l.matmul(&u)?.add(&m.gather(&perm, 0)?)
                }
                0 => m.cholesky(),
                1 => m.solve(&rhs),
                2 => m.cholesky()?.triangular_solve(&rhs, true, s.flag),
                3 => m.inverse(),
                4 => m.mul_scalar(0.5)?.det(),
                5 => {
                    let (sign, logabs) = m
                        .sub(&Tensor::try_eye(m.shape()[0], m.dtype())?.mul_scalar(1.5)?)?
                        .slogdet()?;
                    sign.mul(&logabs)
                }
                6 => m.logdet()?.add(&m.trace()?),
                7 => m.eigh()?.0.log(),
                8 => m.svd()?.1.sqrt(),
                9 => {
                    // R's diagonal up to sign, and Q R = m
                    let (q, rr) = m.qr()?;
                    q.matmul(&rr)?.add(&rr.diag_part()?.abs()?)
                }
                10 => m.mul_scalar(-0.1)?.matrix_exp(),
                11 => m.pinv(None)?.add(&m.cholesky_solve(&m.diag_part()?.diag()?)?),
                12 => m
                    .lstsq(&rhs, 0.0)?
                    .add(&rhs.matmul(&rhs.transpose()?)?.norm(&[-1], true)?),
                _ => m
                    .matvec(&m.diag_part()?)?
                    .outer(&m.diag_part()?)?
                    .tensordot(&m, &[1], &[0]),
            }
        }
        8 => {
            // complex numbers and the FFTs, back to a real value
            let other = fit(a, b, 4)?;
            let z = Tensor::complex(a, &other)?;
            match s.p % 9 {
                7 => z.fft2d()?.abs()?.add(&z.ifft2d()?.real()?),
                8 => match z.rank() {
                    3 => z.fft3d()?.mul(&z.ifft3d()?)?.real(),
                    _ => z.expand_dims(0)?.fft3d()?.imag()?.reshape(a.shape()),
                },
                0 => z.fft()?.abs(),
                1 => z.ifft()?.real()?.add(&z.fft()?.imag()?),
                2 => z.mul(&z.conj()?)?.real()?.sqrt()?.add(&z.add_scalar(0.37)?.angle()?),
                3 => match a.shape().last() {
                    Some(&c) if c > 1 => a.rfft(None)?.abs(),
                    _ => a.cos(),
                },
                4 => match a.shape().last() {
                    Some(&c) if c > 1 => a.rfft(None)?.irfft(Some(c)),
                    _ => a.cos(),
                },
                5 => z.exp()?.mul(&z)?.imag(),
                _ => z.fft()?.mul(&z.fft()?.conj()?)?.ifft()?.real(),
            }
        }
        9 => {
            // the other convolutions and pools
            let Some(x) = image(a)? else { return a.tanh() };
            let (n, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2]);
            let padding = if s.q.is_multiple_of(2) {
                Padding::Same
            } else {
                Padding::Valid
            };
            let k = 1 + s.q / 2 % 3;
            match s.p % 9 {
                0 => {
                    let f = filter_from(&v[2], &[k, 1, 2])?;
                    flat(
                        &x.reshape(&[n * h, w, 1])?
                            .conv1d(&f, 1 + (s.p / 9 % 2) as i64, padding, 1)?,
                    )
                }
                1 => {
                    let f = filter_from(&v[2], &[k, k, 2, 1])?;
                    let st = 1 + s.p / 9 % 2;
                    let out = [n, h * st, w * st, 2];
                    flat(&x.conv2d_transpose(&f, &out, [st as i64, st as i64], Padding::Same, [1, 1])?)
                }
                2 => {
                    let f = filter_from(&v[2], &[1, k, k, 1, 2])?;
                    flat(&x.reshape(&[1, n, h, w, 1])?.conv3d(&f, [1, 1, 1], padding, [1, 1, 1])?)
                }
                3 => {
                    let x5 = x.reshape(&[1, n, h, w, 1])?;
                    let kk = 1 + (s.q % 2) as i64;
                    flat(&match s.flag {
                        true => x5.max_pool3d([1, kk, kk], [1, kk, 1], padding)?,
                        false => x5.avg_pool3d([1, kk, kk], [1, 1, kk], padding)?,
                    })
                }
                4 => {
                    let x3 = x.reshape(&[n * h, w, 1])?;
                    let kk = 1 + (s.q % 3) as i64;
                    flat(&match s.flag {
                        true => x3.max_pool1d(kk, 1 + (s.p / 9 % 2) as i64, padding)?,
                        false => x3.avg_pool1d(kk, 1, padding)?,
                    })
                }
                5 => {
                    let dw = filter_from(&v[2], &[k, k, 1, 2])?;
                    let pw = filter_from(&v[1], &[1, 1, 2, 3])?;
                    flat(&x.separable_conv2d(&dw, &pw, [1, 1], padding, [1, 1])?)
                }
                6 => {
                    let kk = 1 + (s.q % 2) as i64;
                    flat(&x.extract_patches([kk, 2], [1, 1 + (s.p / 9 % 2) as i64], [1, 1], padding)?)
                }
                7 => {
                    let size = [h + 1 + s.q % 3, 1 + w / 2];
                    flat(&match s.q / 3 % 3 {
                        0 => x.resize_nearest_neighbor(size, s.flag && size[0] > 1 && h > 1, !s.flag)?,
                        1 => x.resize_images(size, ResizeMethod::Bicubic)?,
                        _ => x.resize_images(size, ResizeMethod::Area)?,
                    })
                }
                _ => {
                    // boxes inside and past the image (extrapolated)
                    let boxes =
                        Tensor::from_vec(vec![0.1, 0.2, 0.8, 0.9, -0.2, 0.0, 0.6, 1.3], &[2, 4])?.cast(a.dtype())?;
                    let which = Tensor::from_vec(vec![0i32, n.saturating_sub(1) as i32], &[2])?;
                    let method = if s.flag {
                        ResizeMethod::Bilinear
                    } else {
                        ResizeMethod::Nearest
                    };
                    flat(&x.crop_and_resize(&boxes, &which, [2, 3], method, 0.25)?)
                }
            }
        }
        10 => {
            // the fused recurrences over a value's rows as time (batch 1)
            if a.rank() != 2 || a.shape()[0] == 0 {
                return a.sin();
            }
            let (t, c) = (a.shape()[0], a.shape()[1]);
            let u = 1 + s.q % 3;
            let gates = if s.flag { 4 } else { 3 };
            let proj = filter_from(&v[2], &[c, gates * u])?;
            let xw = a.matmul(&proj)?.reshape(&[t, 1, gates * u])?;
            let rec = filter_from(&v[1], &[u, gates * u])?;
            let h0 = fit(a, b, 1)?.tanh()?.broadcast_to(&[1, u])?;
            match s.flag {
                true => {
                    let (hs, cs) = Tensor::lstm_sequence(&xw, &rec, &h0, &h0.mul_scalar(0.5)?)?;
                    hs.add(&cs.mul_scalar(0.1)?)?.reshape(&[t, u])
                }
                false => {
                    let bias = filter_from(b, &[3 * u])?;
                    Tensor::gru_sequence(&xw, &rec, &bias, &h0)?.reshape(&[t, u])
                }
            }
        }
        11 => {
            // `vmap` inside the function: a row-wise program mapped over
            // the leading axis (the weight shared or not)
            if a.rank() < 1 || a.shape()[0] == 0 {
                return a.sin();
            }
            let other = fit(a, b, 4)?;
            let which = s.p % 3;
            let f = vmap(
                move |x: &[Tensor]| {
                    let y = match which {
                        0 => x[0].softmax(-1)?.mul(&x[1])?,
                        1 => x[0].tanh()?.cumsum(-1, false, false)?.add(&x[1].sin()?)?,
                        _ => x[0].mul(&x[1])?.sum_all()?.tanh()?.mul(&x[0])?,
                    };
                    Ok(vec![y])
                },
                &[Some(0), if s.flag { Some(0) } else { None }],
                &[Some(0)],
            );
            let second = match s.flag {
                true => other,
                false => other.narrow(0, 0, 1)?.reshape(&a.shape()[1..])?,
            };
            Ok(f.call(&[a.clone(), second])?.remove(0))
        }
        12 => {
            // a loop of two carries of different shapes, a branch inside
            let start = a.tanh()?;
            let acc = start.sum_all()?;
            let limit = 0.5371 + (s.p % 3) as f64;
            let out = while_loop(
                |x: &Vec<Tensor>| x[1].abs()?.lt_scalar(limit * (1 + x[0].numel()) as f64),
                |x: &Vec<Tensor>| {
                    let y = cond(
                        &x[1].gt_scalar(0.0)?,
                        || x[0].mul_scalar(1.25)?.sin(),
                        || x[0].mul_scalar(-1.5)?.tanh(),
                    )?;
                    Ok(vec![y.clone(), x[1].add(&y.sum_all()?)?.add_scalar(0.1)?])
                },
                vec![start, acc],
                WhileOptions {
                    max_iterations: Some(3 + s.q % 3),
                    ..WhileOptions::default()
                },
            )?;
            out[0].add(&out[1])
        }
        13 => {
            // norms and moments of other kinds
            let ax = axis(s.q);
            match s.p % 4 {
                0 => a.norm(&[ax], s.flag)?.add_scalar(0.1)?.sqrt(),
                1 => a.variance(&[ax], s.flag),
                2 => super::referees::std_snapped(a, &[ax], s.flag)?.add_scalar(0.1)?.log(),
                _ => a.prod(&[ax], s.flag)?.tanh(),
            }
        }
        14 => {
            // shapes the values decide: the distinct steps of a value, a
            // count per step, the elements a mask keeps, their positions
            let steps = a.mul_scalar(2.0)?.add_scalar(0.0371)?.floor()?;
            match s.p % 4 {
                0 => {
                    let (u, _) = steps.reshape(&[steps.numel()])?.unique()?;
                    u.tanh()
                }
                1 => {
                    let i = steps
                        .add_scalar(6.0)?
                        .relu()?
                        .cast(DType::I64)?
                        .reshape(&[steps.numel()])?;
                    i.bincount(None, 4)?.cast(a.dtype())
                }
                2 => a.boolean_mask(&a.gt_scalar(0.0371)?),
                _ => a.gt_scalar(0.0371)?.argwhere()?.cast(a.dtype()),
            }
        }
        _ => unreachable!("{} ops in the fourth part", COUNT),
    }
}
