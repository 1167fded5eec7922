//! Ops called with operands that fit each other (conv input and filter
//! agreeing on channels, matmul's inner dims, index tensors of an integer
//! dtype, einsum operands shaped by the spec, ...), so that the kernels
//! themselves run, not only the argument checks. Sizes still come from the
//! case's size list, so huge and zero dims reach the kernels too.

use gradtape::{DType, PadMode, Result, Tensor};

use crate::case::{materialize_up_to, TSpec};
use crate::ops::{any_huge, first, heavy_matmul, same, want, Env, OpFn, EINSUM};

/// The most elements of a real operand made here.
const MAX_MADE: usize = 256;

impl Env<'_> {
    /// The case's dtype when differentiable-ish, else `a`'s.
    fn dt(&self) -> DType {
        self.a.dtype()
    }

    /// A tensor of `shape` (real when small, else a broadcast view), whose
    /// values depend on `salt`; when `a` is small and of the same dtype,
    /// `a`'s sum is added, so that tapes and accumulators watching `a`
    /// see it.
    fn make(&self, shape: &[usize], dtype: DType, salt: u64) -> Result<Tensor> {
        let spec = TSpec {
            dtype: Some(dtype),
            shape: Some(shape.to_vec()),
            seed: self.k.b.seed ^ salt.wrapping_mul(0x9E37_79B9),
            transposed: self.flag(2) && salt.is_multiple_of(2),
        };
        let t = materialize_up_to(&spec, None, MAX_MADE)?;
        if self.a.numel() <= 64 && self.a.dtype() == dtype && (dtype.is_float() || dtype.is_complex()) {
            t.add(&self.a.sum_all()?)
        } else {
            Ok(t)
        }
    }

    /// Size `i`, small most of the time (sizes are drawn mostly in 0..=4).
    fn s(&self, i: usize) -> usize {
        self.k.sizes.get(i).copied().unwrap_or(2)
    }

    /// A stride or dilation: 1 or 2, or the raw int when `flag(1)`.
    fn st(&self, i: usize) -> [i64; 2] {
        if self.flag(1) && self.flag(0) {
            self.pair(i)
        } else {
            [1 + self.int(i).rem_euclid(2), 1 + self.int(i + 1).rem_euclid(2)]
        }
    }

    fn idx(&self, shape: &[usize], salt: u64) -> Result<Tensor> {
        let d = if self.flag(1) { DType::I32 } else { DType::I64 };
        self.make(shape, d, salt)
    }
}

fn einsum_fit(e: &Env, n: usize) -> Result<Tensor> {
    let spec = EINSUM[e.k.c.seed as usize % EINSUM.len()];
    let inputs = spec.split("->").next().unwrap_or("");
    let ops: Vec<Tensor> = inputs
        .split(',')
        .take(n)
        .enumerate()
        .map(|(j, term)| {
            let term = term.replace("...", "@");
            let shape: Vec<usize> = term
                .chars()
                .map(|ch| if ch == '@' { e.s(7) } else { e.s((ch as usize) % 6) })
                .collect();
            e.make(&shape, e.dt(), j as u64)
        })
        .collect::<Result<_>>()?;
    let refs: Vec<&Tensor> = ops.iter().collect();
    if any_huge(&refs) {
        return Ok(e.a.clone());
    }
    Tensor::einsum(spec, &refs)
}

/// `[s0, s1, s2, s3]` and a filter `[s4, s5, s3, s6]`.
fn conv_operands(e: &Env) -> Result<(Tensor, Tensor)> {
    let x = e.make(&[e.s(0), e.s(1), e.s(2), e.s(3)], e.dt(), 1)?;
    // (a depthwise filter is [kh, kw, in, multiplier]: the same layout)
    let w = e.make(&[e.s(4), e.s(5), e.s(3), e.s(6)], e.dt(), 2)?;
    Ok((x, w))
}

pub const FIT: &[(&str, OpFn)] = &[
    ("fit_logical_and", |e| {
        e.a.cast(DType::Bool)?.logical_and(&e.b.cast(DType::Bool)?)
    }),
    ("fit_logical_not", |e| same(e.a.cast(DType::Bool)?.logical_not(), e.a)),
    ("fit_all", |e| e.a.cast(DType::Bool)?.all(&e.axes(), e.flag(0))),
    ("fit_any", |e| e.a.cast(DType::Bool)?.any(&e.axes(), e.flag(0))),
    ("fit_where", |e| {
        Tensor::where_(&e.c.cast(DType::Bool)?, e.a, &e.b.cast(e.a.dtype())?)
    }),
    ("fit_binary", |e| e.a.add(&e.b.cast(e.a.dtype())?)),
    ("fit_concat", |e| {
        Tensor::concat(&[e.a, &e.b.cast(e.a.dtype())?], e.ax(0))
    }),
    ("fit_stack", |e| Tensor::stack(&[e.a, &e.b.cast(e.a.dtype())?], e.ax(0))),
    ("fit_split", |e| {
        let ax = e.ax(0);
        let d = e.a.dim(ax)?;
        let n = if d == 0 { 1 } else { [1, d][usize::from(e.flag(0))] };
        first(e.a.split(n, ax))
    }),
    ("fit_split_sizes", |e| {
        let ax = e.ax(0);
        let d = e.a.dim(ax)?;
        first(e.a.split_sizes(&[d / 2, d - d / 2], ax))
    }),
    ("fit_gather", |e| {
        e.a.gather(&e.idx(&[e.s(0), e.s(1)][..e.s(2) % 3], 1)?, e.ax(0))
    }),
    ("fit_gather_with", |e| {
        let i = e.idx(&[e.a.shape().first().copied().unwrap_or(1), e.s(0)], 1)?;
        e.a.gather_with(&i, e.ax(0), e.ax(1).rem_euclid(2))
    }),
    ("fit_gather_nd", |e| {
        e.a.gather_nd(&e.idx(&[e.s(0), e.s(1).min(e.a.rank())], 1)?)
    }),
    ("fit_scatter_nd", |e| {
        let k = e.s(1).min(e.k.shape.len());
        let i = e.idx(&[e.s(0), k], 1)?;
        let mut us = vec![e.s(0)];
        us.extend_from_slice(&e.k.shape[k..]);
        want(Tensor::scatter_nd(&i, &e.make(&us, e.dt(), 2)?, &e.k.shape), &e.k.shape)
    }),
    ("fit_scatter_add", |e| {
        e.a.scatter_add(&e.idx(&e.a.shape()[..1.min(e.a.rank())], 1)?, 0, e.s(0))
    }),
    ("fit_one_hot", |e| {
        let i = e.idx(&[e.s(0), e.s(1)], 1)?;
        i.one_hot(e.s(2), e.f(0), e.f(1), e.ax(0).rem_euclid(4) - 1, e.k.dtype)
    }),
    ("fit_embedding", |e| e.a.embedding_lookup(&e.idx(&[e.s(0)], 1)?)),
    ("fit_sparse_xent", |e| {
        let r = e.a.rank();
        let labels = e.idx(&e.a.shape()[..r.saturating_sub(1)], 1)?;
        Tensor::sparse_softmax_cross_entropy_with_logits(&labels, e.a)
    }),
    ("fit_softmax_xent", |e| {
        Tensor::softmax_cross_entropy_with_logits(&e.a.softmax(-1)?, e.a)
    }),
    ("fit_bias_add", |e| {
        let last = e.a.shape().last().copied().unwrap_or(0);
        same(e.a.bias_add(&e.make(&[last], e.dt(), 1)?), e.a)
    }),
    ("fit_matmul", |e| {
        let a = e.make(&[e.s(3), e.s(0), e.s(1)][3 - 2 - usize::from(e.flag(0))..], e.dt(), 1)?;
        let b = e.make(&[e.s(1), e.s(2)], e.dt(), 2)?;
        if heavy_matmul(a.shape(), b.shape(), false, false) {
            return Ok(a);
        }
        a.matmul(&b)
    }),
    ("fit_matvec", |e| {
        let (m, v) = (e.make(&[e.s(0), e.s(1)], e.dt(), 1)?, e.make(&[e.s(1)], e.dt(), 2)?);
        if heavy_matmul(m.shape(), v.shape(), false, false) {
            return Ok(m);
        }
        m.matvec(&v)
    }),
    ("fit_square_linalg", |e| {
        let n = e.s(0);
        let a = e.make(&[e.s(1), n, n][usize::from(e.flag(0))..], e.dt(), 1)?;
        let b = e.make(&[n, e.s(2)], e.dt(), 2)?;
        match e.int(0).rem_euclid(7) {
            0 => a.solve(&b),
            1 => a.triangular_solve(&b, e.flag(1), e.flag(2)),
            2 => a.cholesky(),
            3 => a.inverse(),
            4 => a.det(),
            5 => a.logdet(),
            _ => a.matmul(&a.transpose()?)?.add(&Tensor::try_eye(n, e.dt())?)?.cholesky(),
        }
    }),
    ("fit_einsum2", |e| einsum_fit(e, 2)),
    ("fit_einsum3", |e| einsum_fit(e, 3)),
    ("fit_conv2d", |e| {
        let (x, w) = conv_operands(e)?;
        x.conv2d(&w, e.st(0), e.padding(), e.st(2))
    }),
    ("fit_depthwise", |e| {
        let (x, w) = conv_operands(e)?;
        x.depthwise_conv2d(&w, e.st(0), e.padding(), e.st(2))
    }),
    ("fit_conv1d", |e| {
        let x = e.make(&[e.s(0), e.s(1), e.s(2)], e.dt(), 1)?;
        let w = e.make(&[e.s(3), e.s(2), e.s(4)], e.dt(), 2)?;
        x.conv1d(&w, e.st(0)[0], e.padding(), e.st(2)[0])
    }),
    ("fit_conv_backprop", |e| {
        let (x, w) = conv_operands(e)?;
        let y = x.conv2d(&w, e.st(0), e.padding(), e.st(2))?;
        let dx = Tensor::conv2d_backprop_input(x.shape(), &w, &y, e.st(0), e.padding(), e.st(2))?;
        let dw = Tensor::conv2d_backprop_filter(&x, w.shape(), &y, e.st(0), e.padding(), e.st(2))?;
        want(Ok(dw), w.shape())?;
        want(Ok(dx), x.shape())
    }),
    ("fit_conv_transpose", |e| {
        let (x, w) = conv_operands(e)?;
        let y = x.conv2d(&w, e.st(0), e.padding(), e.st(2))?;
        want(
            y.conv2d_transpose(&w, x.shape(), e.st(0), e.padding(), e.st(2)),
            x.shape(),
        )
    }),
    ("fit_pool", |e| {
        let x = e.make(&[e.s(0), e.s(1), e.s(2), e.s(3)], e.dt(), 1)?;
        let k = [1 + e.int(2).rem_euclid(3), 1 + e.int(3).rem_euclid(3)];
        if e.flag(1) {
            x.max_pool2d(k, e.st(0), e.padding())
        } else {
            let y = x.avg_pool2d(k, e.st(0), e.padding())?;
            want(y.avg_pool2d_grad(x.shape(), k, e.st(0), e.padding()), x.shape())
        }
    }),
    ("fit_resize", |e| {
        let x = e.make(&[e.s(0), e.s(1), e.s(2), e.s(3)], e.dt(), 1)?;
        let (size, orig) = ([e.s(4), e.s(5)], [x.shape()[1], x.shape()[2]]);
        let (ac, hp) = (e.flag(1), !e.flag(1) && e.flag(0));
        if e.flag(0) {
            let y = x.resize_bilinear(size, ac, hp)?;
            want(y.resize_bilinear_grad(orig, ac, hp), x.shape())
        } else {
            let y = x.resize_nearest_neighbor(size, ac, hp)?;
            want(y.resize_nearest_neighbor_grad(orig, ac, hp), x.shape())
        }
    }),
    ("fit_ctc", |e| {
        let (t, b, c, l) = (e.s(0), e.s(1), e.s(2).saturating_add(1), e.s(3));
        if b.saturating_mul(l.max(1)) > MAX_MADE {
            return Err(gradtape::Error::InvalidArgument {
                op: "fit_ctc",
                msg: "too many labels to make".into(),
            });
        }
        let x = e.make(&[t, b, c], e.dt(), 1)?;
        let labels: Vec<i64> = (0..b * l).map(|i| 1 + (i as i64 * 7) % (c as i64 - 1).max(1)).collect();
        let labels = Tensor::from_vec(labels, &[b, l])?;
        let n = Tensor::from_vec(vec![l.min(t) as i64; b], &[b])?;
        let f = Tensor::from_vec(vec![t as i64; b], &[b])?;
        want(Tensor::ctc_loss(&labels, &x, &n, &f, true, 0), &[b])
    }),
    ("fit_conv3d", |e| {
        let x = e.make(&[e.s(0), e.s(1), e.s(2), e.s(3), e.s(4)], e.dt(), 1)?;
        let w = e.make(&[e.s(5), e.s(6), e.s(5), e.s(4), e.s(1)], e.dt(), 2)?;
        let (s, d) = ([e.st(0)[0], e.st(0)[1], 1], [1, e.st(2)[0], e.st(2)[1]]);
        let y = x.conv3d(&w, s, e.padding(), d)?;
        let dx = Tensor::conv3d_backprop_input(x.shape(), &w, &y, s, e.padding(), d)?;
        let dw = Tensor::conv3d_backprop_filter(&x, w.shape(), &y, s, e.padding(), d)?;
        want(Ok(dw), w.shape())?;
        want(Ok(dx), x.shape())
    }),
    ("fit_pool3d", |e| {
        let x = e.make(&[e.s(0), e.s(1), e.s(2), e.s(3), e.s(4)], e.dt(), 1)?;
        let k = [1 + e.int(2).rem_euclid(3), 1 + e.int(3).rem_euclid(3), 2];
        let s = [e.st(0)[0], e.st(0)[1], 1];
        if e.flag(1) {
            x.max_pool3d(k, s, e.padding())
        } else {
            let y = x.avg_pool3d(k, s, e.padding())?;
            want(y.avg_pool3d_grad(x.shape(), k, s, e.padding()), x.shape())
        }
    }),
    ("fit_separable", |e| {
        let (x, w) = conv_operands(e)?;
        let p = e.make(&[1, 1, w.shape()[2].saturating_mul(w.shape()[3]), e.s(5)], e.dt(), 3)?;
        x.separable_conv2d(&w, &p, e.st(0), e.padding(), e.st(2))
    }),
    ("fit_norms", |e| {
        let last = e.a.shape().last().copied().unwrap_or(1);
        let g = e.make(&[last], e.dt(), 1)?;
        if e.flag(0) {
            same(e.a.layer_normalization(&[-1], Some(&g), Some(&g), e.f(0).abs()), e.a)
        } else {
            let (m, v) = e.a.moments(&[0], false)?;
            same(Tensor::batch_normalization(e.a, &m, &v, Some(&g), Some(&g), 1e-3), e.a)
        }
    }),
    ("fit_pad_mode", |e| {
        let pads: Vec<(usize, usize)> = e.a.shape().iter().map(|&d| (d.min(e.s(0)), d.min(e.s(1)))).collect();
        let mode = if e.flag(0) {
            PadMode::Reflect
        } else {
            PadMode::Symmetric
        };
        e.a.pad_with(&pads, mode)
    }),
    ("fit_tile", |e| {
        let m: Vec<usize> = (0..e.a.rank()).map(|i| e.s(i)).collect();
        e.a.tile(&m)
    }),
    ("fit_reshape", |e| {
        let n = e.a.numel();
        let s = if e.flag(0) { vec![n] } else { vec![1, n, 1] };
        want(e.a.reshape(&s), &s)
    }),
    ("fit_from_vec", |e| {
        let n: usize = e.k.shape.iter().product::<usize>().min(4096);
        Tensor::from_vec(vec![0.5f32; n], &e.k.shape)
    }),
    ("fit_cumsum", |e| {
        same(
            e.a.cumsum(e.ax(0).rem_euclid(e.a.rank().max(1) as isize), e.flag(0), e.flag(1)),
            e.a,
        )
    }),
    ("fit_attention", |e| {
        // q [b, tq, d], k [b, tk, d], v [b, tk, dv]; a mask (bool or of
        // the dtype, broadcasting), causal or not, any scale and dropout
        let (b, tq, tk, d, dv) = (e.s(0), e.s(1), e.s(2), e.s(3), e.s(4));
        let q = e.make(&[b, tq, d], e.dt(), 1)?;
        let k = e.make(&[b, tk, d], e.dt(), 2)?;
        let v = e.make(&[b, tk, dv], e.dt(), 3)?;
        let mask = match e.int(0).rem_euclid(4) {
            0 => None,
            1 => Some(e.make(&[tq, tk], DType::Bool, 4)?),
            2 => Some(e.make(&[b, 1, tk], DType::Bool, 4)?),
            _ => Some(e.make(&[b, tq, tk], e.dt(), 4)?),
        };
        let scale = e.flag(1).then(|| e.f(0));
        let y = if e.int(1).rem_euclid(3) == 0 {
            let drop = gradtape::AttentionDropout {
                rate: e.f(1),
                seed: e.int(2) as u64,
            };
            q.scaled_dot_product_attention_dropout(&k, &v, mask.as_ref(), e.flag(0), scale, drop)
        } else {
            q.scaled_dot_product_attention(&k, &v, mask.as_ref(), e.flag(0), scale)
        };
        want(y, &[b, tq, dv])
    }),
];
