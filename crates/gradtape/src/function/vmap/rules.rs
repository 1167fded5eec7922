//! The batching rules, family by family.
//!
//! A rule gets a node's inputs as batched values (at least one batched,
//! each batched one with its batch axis at 0) and returns the node's
//! outputs for the whole batch, batch axis at 0, computed with ordinary
//! ops; or `None` when it does not cover the case (an op without a rule,
//! two batched operands where only one can be folded, an axis it cannot
//! place), which sends the node to the fallback loop. A rule never guesses:
//! where the attributes do not make sense for the shapes, it declines, and
//! the loop runs the op per example, which reports the error as the op
//! would.
//!
//! The rules, in short:
//!
//! - *elementwise* (unary and binary ops, comparisons, `Select`, casts,
//!   special functions): batched operands get unit dims after the batch
//!   axis up to the largest per-example rank, so that unbatched operands
//!   broadcast against them as they would against one example ("lift");
//! - *reductions, scans, softmax, argsort, `one_hot`, reverse, concat,
//!   stack, gather* (one batched operand): axes are normalised against one
//!   example's rank and shifted by one;
//! - *reshape, broadcast, slices, pads*: the batch dim is prepended to the
//!   target shape, spec or padding; a dynamic slice or update whose start
//!   every example shares gets a 0 in front of its start; `gather_nd` of a batched tensor gets
//!   each example's index prepended to its index tuples;
//! - *products*: a batched operand times an unbatched matrix is one
//!   product with the batch folded into the rows (of the left operand, or
//!   of the transposed right one); otherwise a batched (broadcasting)
//!   product of the lifted operands;
//! - *convolutions, pooling and image resizing* with only the input
//!   batched: the batch is folded into `N` (and into the sizes attribute of
//!   the gradients that have one);
//! - *linear algebra, decompositions, FFTs, attention, LayerNorm, the
//!   rotary embedding's rotation* on the innermost dims: the ops take
//!   leading batch dims already (LayerNorm's backward op sums `dgamma`,
//!   `dbeta` per example instead).
//!
//! Without a rule: dynamic slices and updates whose start is batched (a
//! block at a different place in each example: the loop keeps the op's
//! own check that each block fits), convolutions with a batched filter, their filter
//! gradients, max pooling's gradient and positions, gathers and scatters
//! where both operands are batched (`gather_nd` aside), segment, unique,
//! bincount, searchsorted, CTC, the 3-D filter gradient, control flow
//! (`cond`, `while_loop`: one branch or loop per example is what they
//! mean), and ops defined above the op layer other than calls.

use smallvec::SmallVec;

use super::interp::{move_axis, BVal};
use crate::error::Result;
use crate::ops::desc::{CreateOp, LinalgOp, NnOp, Op, Outputs, Reduce, ReduceKind, Scan, ShapeOp, SortOp};
use crate::ops::linalg::matmul::fold_rows;
use crate::tensor::Tensor;

type Rule = Result<Option<Outputs>>;

fn one(t: Result<Tensor>) -> Rule {
    t.map(|t| Some(smallvec::smallvec![t]))
}

/// `axis` (negative: from the end) as an index into `rank` dims.
fn norm(axis: isize, rank: usize) -> Option<usize> {
    let a = if axis < 0 { axis + rank as isize } else { axis };
    (0..rank as isize).contains(&a).then_some(a as usize)
}

/// `[b, shape...]`.
fn with_batch(b: usize, shape: &[usize]) -> SmallVec<[usize; 6]> {
    let mut s: SmallVec<[usize; 6]> = smallvec::smallvec![b];
    s.extend_from_slice(shape);
    s
}

/// The largest per-example rank of the inputs.
fn max_rank(ins: &[BVal]) -> usize {
    ins.iter().map(BVal::example_rank).max().unwrap_or(0)
}

/// A batched value with unit dims inserted after the batch axis up to
/// per-example rank `r`, so that unbatched operands broadcast against it as
/// against one example; an unbatched value as it is.
fn lift(v: &BVal, r: usize) -> Result<Tensor> {
    let er = v.example_rank();
    if !v.batched || er >= r {
        return Ok(v.t.clone());
    }
    let s = v.t.shape();
    let mut shape: SmallVec<[usize; 6]> = smallvec::smallvec![s[0]];
    shape.extend(std::iter::repeat_n(1, r - er));
    shape.extend_from_slice(&s[1..]);
    v.t.reshape(&shape)
}

/// The lifted tensors of all inputs.
fn lifted(ins: &[BVal]) -> Result<SmallVec<[Tensor; 3]>> {
    let r = max_rank(ins);
    ins.iter().map(|v| lift(v, r)).collect()
}

/// A batched value's tensor, or an unbatched one broadcast along a new
/// batch axis of `b` examples.
fn full(v: &BVal, b: usize) -> Result<Tensor> {
    if v.batched {
        Ok(v.t.clone())
    } else {
        v.t.expand_dims(0)?.broadcast_to(&with_batch(b, v.t.shape()))
    }
}

/// The full tensors of all inputs, when they have one per-example shape.
fn full_same(ins: &[BVal], b: usize) -> Result<Option<SmallVec<[Tensor; 3]>>> {
    if ins.windows(2).any(|w| w[0].example_shape() != w[1].example_shape()) {
        return Ok(None);
    }
    ins.iter().map(|v| full(v, b)).collect::<Result<_>>().map(Some)
}

/// The batched outputs of `op` for a node whose inputs `ins` include at
/// least one batched value; `None`: no rule covers it (the fallback loop
/// runs it).
pub(super) fn batch(op: &Op, ins: &[BVal], b: usize) -> Rule {
    match (op, ins) {
        (Op::Unary(u), [x]) => one(u.eval(&x.t)),
        (Op::Cast(d), [x]) => one(x.t.cast(*d)),
        (Op::Binary(f), [x, y]) => {
            use crate::ops::desc::Binary;
            if matches!(f, Binary::ReluGrad | Binary::TanhGrad | Binary::Complex) {
                // these take operands of one shape, except that the forward
                // value of a gradient (tanh's output, relu's input) may
                // broadcast against a batch of cotangents (as in a
                // vectorized Jacobian): no copy of it per example
                let value = match f {
                    Binary::TanhGrad => Some(x),
                    Binary::ReluGrad => Some(y),
                    _ => None,
                };
                if value.is_some_and(|v| !v.batched) && x.example_shape() == y.example_shape() {
                    return one(f.eval(&x.t, &y.t));
                }
                return match full_same(ins, b)? {
                    Some(t) => one(f.eval(&t[0], &t[1])),
                    None => Ok(None),
                };
            }
            let t = lifted(&[x.clone(), y.clone()])?;
            one(f.eval(&t[0], &t[1]))
        }
        (Op::Select, [_, _, _]) => {
            let t = lifted(ins)?;
            one(Tensor::where_(&t[0], &t[1], &t[2]))
        }
        (Op::Special(s), _) => {
            let t = lifted(ins)?;
            s.eval(&t).map(Some)
        }
        (Op::Reduce(r), [x]) => reduce(r, x),
        (Op::Scan(s), [x]) => match norm(s.axis, x.example_rank()) {
            Some(a) => one(Scan {
                axis: a as isize + 1,
                ..s.clone()
            }
            .eval(&x.t)),
            None => Ok(None),
        },
        (
            Op::MatMul {
                transpose_a,
                transpose_b,
            },
            [x, y],
        ) => matmul(x, y, *transpose_a, *transpose_b),
        (Op::Shape(s), _) => shape(s, ins, b),
        (Op::Nn(n), _) => nn(n, ins, b),
        (Op::Linalg(l), _) => linalg(l, ins, b),
        (Op::Decomp(d), [x]) if x.example_rank() >= 2 => d.eval(std::slice::from_ref(&x.t)).map(Some),
        (Op::Fft(f), [x]) if x.example_rank() >= f.rank as usize => f.eval(std::slice::from_ref(&x.t)).map(Some),
        (Op::Image(_), [x]) if x.example_rank() == 4 => fold_n(op, ins, 0, b),
        (Op::Sort(SortOp::ArgSort { axis, descending }), [x]) => match norm(*axis, x.example_rank()) {
            Some(a) => SortOp::ArgSort {
                axis: a as isize + 1,
                descending: *descending,
            }
            .eval(std::slice::from_ref(&x.t))
            .map(Some),
            None => Ok(None),
        },
        (
            Op::Create(CreateOp::OneHot {
                depth,
                on,
                off,
                axis,
                dtype,
            }),
            [x],
        ) => {
            let r = x.example_rank();
            let axis = match *axis {
                -1 => -1,
                a if a >= 0 && a as usize <= r => a + 1,
                _ => return Ok(None),
            };
            CreateOp::OneHot {
                depth: *depth,
                on: *on,
                off: *off,
                axis,
                dtype: *dtype,
            }
            .eval(std::slice::from_ref(&x.t))
            .map(Some)
        }
        _ => Ok(None),
    }
}

/// Reductions: axes shifted past the batch axis.
fn reduce(r: &Reduce, x: &BVal) -> Rule {
    let rank = x.example_rank();
    let axes: Option<SmallVec<[isize; 4]>> = r.axes.iter().map(|&a| norm(a, rank).map(|a| a as isize + 1)).collect();
    let Some(axes) = axes else { return Ok(None) };
    if matches!(r.kind, ReduceKind::ArgMax | ReduceKind::ArgMin) && axes.len() != 1 {
        return Ok(None);
    }
    one(Reduce::new(r.kind, &axes, r.keepdims).eval(&x.t))
}

/// Matrix products (operands of rank >= 2 per example).
fn matmul(x: &BVal, y: &BVal, ta: bool, tb: bool) -> Rule {
    let (rx, ry) = (x.example_rank(), y.example_rank());
    if rx < 2 || ry < 2 {
        return Ok(None);
    }
    if x.batched && !y.batched && ry == 2 {
        // one product: the examples' rows stacked
        let xt = if ta { x.t.transpose()? } else { x.t.clone() };
        return one(fold_rows(&xt, &y.t, tb));
    }
    if !x.batched && y.batched && rx == 2 {
        // op(x) op(y) = (op(y)ᵀ op(x)ᵀ)ᵀ: one product, the examples' columns
        // stacked as rows (a vectorized Jacobian's `Wᵀ g`)
        let yt = if tb { y.t.clone() } else { y.t.transpose()? };
        return one(fold_rows(&yt, &x.t, !ta)?.transpose());
    }
    let r = rx.max(ry);
    one(lift(x, r)?.matmul_with(&lift(y, r)?, ta, tb))
}

/// Shape ops.
fn shape(s: &ShapeOp, ins: &[BVal], b: usize) -> Rule {
    match (s, ins) {
        (ShapeOp::Reshape(dims), [x]) => one(x.t.reshape(&with_batch(b, dims))),
        (ShapeOp::Transpose(perm), [x]) => {
            let mut p: SmallVec<[usize; 6]> = smallvec::smallvec![0];
            p.extend(perm.iter().map(|&a| a + 1));
            one(x.t.permute(&p))
        }
        (ShapeOp::BroadcastTo(dims), [x]) => {
            if x.example_rank() > dims.len() {
                return Ok(None);
            }
            one(lift(x, dims.len())?.broadcast_to(&with_batch(b, dims)))
        }
        (ShapeOp::Contiguous, [x]) => one(x.t.contiguous()),
        (ShapeOp::Identity, [x]) => one(Ok(x.t.identity())),
        (ShapeOp::StopGradient, [x]) => one(Ok(x.t.stop_gradient())),
        (ShapeOp::FullLike(v), [x]) => one(x.t.try_full_like(v.0)),
        (ShapeOp::Slice(begin, size), [x]) => {
            let mut bg: SmallVec<[usize; 6]> = smallvec::smallvec![0];
            bg.extend_from_slice(begin);
            one(x.t.slice(&bg, &with_batch(b, size)))
        }
        (ShapeOp::Pad(p), [x]) => {
            let mut pads: SmallVec<[(usize, usize); 6]> = smallvec::smallvec![(0, 0)];
            pads.extend_from_slice(p);
            one(x.t.pad(&pads))
        }
        (ShapeOp::StridedSlice(spec), [x]) => {
            let mut sp = vec![(0, 1, b)];
            sp.extend_from_slice(spec);
            one(crate::ops::strided::strided_replay(&x.t, &sp))
        }
        (ShapeOp::StridedSliceGrad(dims, spec), [x]) => {
            let mut sp = vec![(0, 1, b)];
            sp.extend_from_slice(spec);
            one(crate::ops::strided::strided_embed(&x.t, &with_batch(b, dims), sp))
        }
        (ShapeOp::Reverse(axes), [x]) => {
            let a: SmallVec<[isize; 4]> = axes.iter().map(|&a| a as isize + 1).collect();
            one(x.t.reverse(&a))
        }
        (ShapeOp::Concat(axis), _) if !ins.is_empty() => {
            let Some(a) = norm(*axis, ins[0].example_rank()) else {
                return Ok(None);
            };
            let ts: Vec<Tensor> = ins.iter().map(|v| full(v, b)).collect::<Result<_>>()?;
            let refs: Vec<&Tensor> = ts.iter().collect();
            one(Tensor::concat(&refs, a as isize + 1))
        }
        (ShapeOp::Stack, _) if !ins.is_empty() => {
            let ts: Vec<Tensor> = ins.iter().map(|v| full(v, b)).collect::<Result<_>>()?;
            let refs: Vec<&Tensor> = ts.iter().collect();
            one(Tensor::stack(&refs, 1))
        }
        (ShapeOp::Gather(axis), [x, i]) => {
            let Some(a) = norm(*axis, x.example_rank()) else {
                return Ok(None);
            };
            match (x.batched, i.batched) {
                (true, false) => one(x.t.gather(&i.t, a as isize + 1)),
                // the indices' batch axis lands at `a`: moved to the front
                (false, true) => one(move_axis(&x.t.gather(&i.t, a as isize)?, a, 0)),
                _ => Ok(None),
            }
        }
        (ShapeOp::GatherNd, [x, i]) => {
            if !x.batched {
                // one tuple list per example, into the shared tensor
                return one(x.t.gather_nd(&i.t));
            }
            let ir = i.example_rank();
            if ir == 0 {
                return Ok(None);
            }
            // each tuple gets its example's index in front
            let idx = full(i, b)?;
            let mut col_to: SmallVec<[usize; 6]> = idx.shape().into();
            col_to[ir] = 1;
            let mut col_shape: SmallVec<[usize; 6]> = smallvec::smallvec![1; ir + 1];
            col_shape[0] = b;
            let col = Tensor::arange(0.0, b as f64, 1.0, idx.dtype())?
                .reshape(&col_shape)?
                .broadcast_to(&col_to)?;
            one(x.t.gather_nd(&Tensor::concat(&[&col, &idx], -1)?))
        }
        // One start for the whole batch: the block spans the batch axis.
        // Where the op refuses (a start that is no integer vector, a block
        // that does not fit), the rule declines and the loop reports the
        // example's error, with the example's shapes.
        (ShapeOp::DynamicSlice(sizes), [x, start]) if !start.batched => Ok(x
            .t
            .dynamic_slice(&batch_start(&start.t), &with_batch(b, sizes))
            .ok()
            .map(|t| smallvec::smallvec![t])),
        (ShapeOp::DynamicUpdateSlice, [x, u, start]) if !start.batched => {
            let (x, u) = (full(x, b)?, full(u, b)?);
            Ok(x.dynamic_update_slice(&u, &batch_start(&start.t))
                .ok()
                .map(|t| smallvec::smallvec![t]))
        }
        (ShapeOp::ScatterAdd(axis, dim), [x, i]) if *axis >= 0 && x.batched && !i.batched => {
            one(x.t.scatter_add(&i.t, axis + 1, *dim))
        }
        _ => Ok(None),
    }
}

/// A dynamic slice's start `[r]` with a 0 in front, for the batch axis,
/// in its own dtype; a start that cannot take one (not a vector) as it
/// is, for the op to refuse.
fn batch_start(start: &Tensor) -> Tensor {
    let zero = Tensor::zeros_on(&[1], start.dtype(), start.device());
    match zero.and_then(|z| Tensor::concat(&[&z, start], 0)) {
        Ok(s) => s,
        // not a vector (or no integers): the op refuses it as it is
        Err(_) => start.clone(),
    }
}

/// `op` with the batch folded into dim 0 (`N`) of input `i`, the only
/// batched input; each output unfolded (`N` kept per example).
fn fold_n(op: &Op, ins: &[BVal], i: usize, b: usize) -> Rule {
    if b == 0 || ins.iter().enumerate().any(|(j, v)| v.batched != (j == i)) {
        return Ok(None);
    }
    let s = ins[i].t.shape();
    if s.len() < 2 {
        return Ok(None);
    }
    let n = s[1];
    let mut folded: SmallVec<[usize; 6]> = smallvec::smallvec![b * n];
    folded.extend_from_slice(&s[2..]);
    let mut args: SmallVec<[Tensor; 2]> = ins.iter().map(|v| v.t.clone()).collect();
    args[i] = ins[i].t.reshape(&folded)?;
    let ys = op.eval(&args)?;
    ys.into_iter()
        .map(|y| {
            let mut u: SmallVec<[usize; 6]> = smallvec::smallvec![b, n];
            u.extend_from_slice(&y.shape()[1..]);
            y.reshape(&u)
        })
        .collect::<Result<_>>()
        .map(Some)
}

/// `sizes` with its first dim (`N`) times `b`.
fn times_b<const K: usize>(sizes: &[usize; K], b: usize) -> [usize; K] {
    let mut s = *sizes;
    s[0] *= b;
    s
}

/// Neural-network ops.
fn nn(n: &NnOp, ins: &[BVal], b: usize) -> Rule {
    match (n, ins) {
        (NnOp::Softmax(a) | NnOp::LogSoftmax(a), [x]) => {
            let Some(a) = norm(*a, x.example_rank()) else {
                return Ok(None);
            };
            let a = a as isize + 1;
            let op = if matches!(n, NnOp::Softmax(_)) {
                NnOp::Softmax(a)
            } else {
                NnOp::LogSoftmax(a)
            };
            op.eval(std::slice::from_ref(&x.t)).map(Some)
        }
        (NnOp::BiasAdd, [x, bias]) => {
            if !bias.batched {
                one(x.t.bias_add(&bias.t))
            } else if bias.example_rank() == 1 && x.example_rank() >= 1 {
                one(x.t.add(&lift(bias, x.example_rank())?))
            } else {
                Ok(None)
            }
        }
        (NnOp::SparseSoftmaxCrossEntropy, [labels, logits]) => {
            let (l, z) = (full(labels, b)?, full(logits, b)?);
            n.eval(&[l, z]).map(Some)
        }
        (NnOp::SparseSoftmaxCrossEntropyGrad, [labels, logits, g]) => {
            let (l, z, g) = (full(labels, b)?, full(logits, b)?, full(g, b)?);
            n.eval(&[l, z, g]).map(Some)
        }
        (NnOp::SigmoidCrossEntropy, _) => match full_same(ins, b)? {
            Some(t) => n.eval(&t).map(Some),
            None => Ok(None),
        },
        (NnOp::Conv(_) | NnOp::Conv3D(_), [_, _]) => fold_n(&Op::Nn(n.clone()), ins, 0, b),
        (NnOp::MaxPool(_) | NnOp::AvgPool(_) | NnOp::MaxPool3D(_) | NnOp::AvgPool3D(_), [_]) => {
            fold_n(&Op::Nn(n.clone()), ins, 0, b)
        }
        (NnOp::ConvBackpropInput(c, s), [_, _]) => {
            fold_n(&Op::Nn(NnOp::ConvBackpropInput(*c, times_b(s, b))), ins, 1, b)
        }
        (NnOp::Conv3DBackpropInput(c, s), [_, _]) => {
            fold_n(&Op::Nn(NnOp::Conv3DBackpropInput(*c, times_b(s, b))), ins, 1, b)
        }
        (NnOp::AvgPoolGrad(p, s), [_]) => fold_n(&Op::Nn(NnOp::AvgPoolGrad(*p, times_b(s, b))), ins, 0, b),
        (NnOp::AvgPool3DGrad(p, s), [_]) => fold_n(&Op::Nn(NnOp::AvgPool3DGrad(*p, times_b(s, b))), ins, 0, b),
        // (with dropout, the decisions depend on the flat batch index: the
        // per-example loop keeps each example's)
        (NnOp::Attention { dropout, .. } | NnOp::AttentionGrad { dropout, .. }, _) if dropout.0 > 0.0 => Ok(None),
        (NnOp::Attention { .. }, [_, _, _] | [_, _, _, _])
        | (NnOp::AttentionGrad { .. }, [_, _, _, _, _] | [_, _, _, _, _, _]) => attention(n, ins, b),
        (NnOp::LayerNorm { .. } | NnOp::LayerNormGrad { .. }, _) => layer_norm(n, ins, b),
        // (the position axis counts from the end: the batch dim in front
        // changes nothing; batched tables go to the loop)
        (NnOp::Rotary { .. }, [x, cos, sin]) if x.batched && !cos.batched && !sin.batched => {
            n.eval(&[x.t.clone(), cos.t.clone(), sin.t.clone()]).map(Some)
        }
        (NnOp::LstmCell, [_, _]) | (NnOp::LstmCellGrad, [_, _, _]) => lstm_cell(n, ins, b),
        _ => Ok(None),
    }
}

/// LayerNorm and its backward op normalise trailing dims: the batch is one
/// more leading dim. Shared `gamma` and `beta` (vectors of the normalised
/// size) go to the ops as they are; batched ones broadcast from `[b, 1..,
/// normalised dims]`, through the composite forward and a backward that
/// sums `dgamma`, `dbeta` per example.
fn layer_norm(n: &NnOp, ins: &[BVal], b: usize) -> Rule {
    let x = full(&ins[0], b)?;
    let r = x.rank();
    let (k, eps, has_gamma) = match n {
        NnOp::LayerNorm { axes, eps, gamma, .. } | NnOp::LayerNormGrad { axes, eps, gamma } => (*axes, eps.0, *gamma),
        _ => return Ok(None),
    };
    if k + 1 > r {
        return Ok(None);
    }
    let tail = x.shape()[r - k..].to_vec();
    // a parameter (a vector of the normalised size, or `b` of them) shaped
    // to broadcast against `x`
    let lifted = |p: &BVal| -> Result<Tensor> {
        if p.batched {
            let mut s = vec![b];
            s.extend(std::iter::repeat_n(1, r - 1 - k));
            s.extend(&tail);
            p.t.reshape(&s)
        } else {
            p.t.reshape(&tail)
        }
    };
    match n {
        NnOp::LayerNorm { beta, .. } => {
            let params = &ins[1..];
            if params.iter().all(|p| !p.batched) {
                let mut args = vec![x];
                args.extend(params.iter().map(|p| p.t.clone()));
                return n.eval(&args).map(Some);
            }
            let g = has_gamma.then(|| lifted(&params[0])).transpose()?;
            let bt = beta.then(|| lifted(&params[has_gamma as usize])).transpose()?;
            let axes: Vec<isize> = (r - k..r).map(|a| a as isize).collect();
            one(x.layer_normalization(&axes, g.as_ref(), bt.as_ref(), eps))
        }
        _ => {
            let dy = full(&ins[ins.len() - 1], b)?;
            let g = match has_gamma.then(|| &ins[1]) {
                Some(p) if p.batched => Some(p.t.reshape(&[b, 1, p.t.numel() / b.max(1)])?),
                Some(p) => Some(p.t.clone()),
                None => None,
            };
            one(crate::ops::layer_norm_grad_batched(&x, g.as_ref(), &dy, k, eps))
        }
    }
}

/// The LSTM step and its backward op take any leading dims but pack their
/// halves along the first: the batch dim goes in front of the operands
/// (shared ones broadcast), the packed halves `[2·b·d0, ..]` are moved
/// behind it (`[b, 2·d0, ..]`, each example's packing), the backward's
/// packed cotangent the other way, and its flat `dz`, `dc` become `[b,
/// nz + nc]`.
fn lstm_cell(n: &NnOp, ins: &[BVal], b: usize) -> Rule {
    let (z, c) = (full(&ins[0], b)?, full(&ins[1], b)?);
    let cs = c.shape().to_vec();
    let mut two_b = vec![2];
    two_b.extend(&cs);
    let mut b_two = vec![b, 2];
    b_two.extend(&cs[1..]);
    let mut packed = cs.clone();
    packed[0] *= 2;
    let mut per_example = cs.clone();
    per_example[1] *= 2;
    let mut swap: Vec<usize> = (0..two_b.len()).collect();
    swap.swap(0, 1);
    if matches!(n, NnOp::LstmCell) {
        let p = n.eval(&[z, c])?.swap_remove(0);
        return one(p.reshape(&two_b)?.permute(&swap)?.reshape(&per_example));
    }
    let g = full(&ins[2], b)?.reshape(&b_two)?.permute(&swap)?.reshape(&packed)?;
    let (nz, nc) = (z.numel(), c.numel());
    let flat = n.eval(&[z, c, g])?.swap_remove(0);
    let per = |t: Tensor| t.reshape(&[b, t.numel() / b.max(1)]);
    let dz = per(flat.narrow(0, 0, nz)?)?;
    let dc = per(flat.narrow(0, nz, nc)?)?;
    one(Tensor::concat(&[&dz, &dc], 1))
}

/// Attention and its backward op take leading dims: the tensor operands
/// get the batch dim in front (shared ones broadcast); the mask, which
/// broadcasts against the scores from the right, keeps its shape when
/// shared and is lifted past the per-example dims when batched.
fn attention(n: &NnOp, ins: &[BVal], b: usize) -> Rule {
    let tensors = if matches!(n, NnOp::Attention { .. }) { 3 } else { 5 };
    let r = ins[0].example_rank();
    let mut args: SmallVec<[Tensor; 6]> = ins[..tensors].iter().map(|v| full(v, b)).collect::<Result<_>>()?;
    if let Some(m) = ins.get(tensors) {
        if m.example_rank() > r {
            return Ok(None);
        }
        args.push(lift(m, r)?);
    }
    n.eval(&args).map(Some)
}

/// Linear algebra: the ops take leading batch dims.
fn linalg(l: &LinalgOp, ins: &[BVal], b: usize) -> Rule {
    match (l, ins) {
        (
            LinalgOp::Cholesky
            | LinalgOp::Inverse
            | LinalgOp::Det
            | LinalgOp::LogAbsDet
            | LinalgOp::DetSign
            | LinalgOp::DiagPart,
            [x],
        ) if x.example_rank() >= 2 => l.eval(std::slice::from_ref(&x.t)).map(Some),
        (LinalgOp::Solve { .. } | LinalgOp::TriangularSolve { .. }, [a, r])
            if a.example_rank() == 2 && r.example_rank() == 2 =>
        {
            l.eval(&[full(a, b)?, full(r, b)?]).map(Some)
        }
        _ => Ok(None),
    }
}
