//! The op table: every public op family, each entry calling one op with the
//! case's operands and arguments, and checking the result's shape where the
//! op's documented rule predicts it (a wrong shape panics, and is reported).

use gradtape::{DType, PadMode, Padding, ResizeMethod, Result, Slice, Tensor};

use crate::case::Case;

/// The operands and arguments one op call sees.
pub struct Env<'a> {
    pub a: &'a Tensor,
    pub b: &'a Tensor,
    pub c: &'a Tensor,
    pub k: &'a Case,
}

impl Env<'_> {
    pub fn int(&self, i: usize) -> i64 {
        self.k.ints.get(i).copied().unwrap_or(0)
    }
    pub fn ax(&self, i: usize) -> isize {
        self.int(i) as isize
    }
    /// The first `n % 4` ints, as axes.
    pub fn axes(&self) -> Vec<isize> {
        let n = self.k.ints.len().min(1 + self.k.sizes.len() % 3);
        self.k.ints[..n].iter().map(|&v| v as isize).collect()
    }
    pub fn size(&self, i: usize) -> usize {
        self.k.sizes.get(i).copied().unwrap_or(1)
    }
    pub fn f(&self, i: usize) -> f64 {
        self.k.floats[i % self.k.floats.len()]
    }
    pub fn flag(&self, i: usize) -> bool {
        self.k.flags[i % 3]
    }
    pub fn pads(&self) -> Vec<(usize, usize)> {
        (0..self.a.rank())
            .map(|i| (self.size(2 * i), self.size(2 * i + 1)))
            .collect()
    }
    pub fn padding(&self) -> Padding {
        if self.flag(0) {
            Padding::Same
        } else {
            Padding::Valid
        }
    }
    pub fn pair(&self, i: usize) -> [i64; 2] {
        [self.int(i), self.int(i + 1)]
    }
    pub fn tri(&self, i: usize) -> [i64; 3] {
        [self.int(i), self.int(i + 1), self.int(i + 2)]
    }
    pub fn format(&self) -> gradtape::DataFormat {
        if self.flag(2) {
            gradtape::DataFormat::ChannelsFirst
        } else {
            gradtape::DataFormat::ChannelsLast
        }
    }
    pub fn slices(&self) -> Vec<Slice> {
        let n = self.k.ints.len() / 3;
        (0..n)
            .map(|i| {
                let v = |j: usize| self.int(3 * i + j) as isize;
                let opt = |j: usize| if v(j) == 0 && self.flag(j) { None } else { Some(v(j)) };
                Slice::new(opt(0), opt(1), v(2))
            })
            .collect()
    }
}

/// Asserts that an accepted result has shape `s`.
pub fn want(y: Result<Tensor>, s: &[usize]) -> Result<Tensor> {
    if let Ok(t) = &y {
        assert_eq!(t.shape(), s, "wrong result shape");
    }
    y
}

pub fn same(y: Result<Tensor>, x: &Tensor) -> Result<Tensor> {
    want(y, x.shape())
}

/// NumPy broadcasting of two shapes; `None` when they do not broadcast.
fn bshape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let pad = |s: &[usize], i: usize| if i + s.len() >= r { s[i + s.len() - r] } else { 1 };
    (0..r)
        .map(|i| match (pad(a, i), pad(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// A binary op: when accepted, the operands broadcast and the result has
/// their broadcast shape.
pub fn binary(e: &Env, f: fn(&Tensor, &Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let y = f(e.a, e.b);
    if let Ok(t) = &y {
        let s = bshape(e.a.shape(), e.b.shape()).expect("accepted shapes that do not broadcast");
        assert_eq!(t.shape(), &s[..], "wrong broadcast shape");
    }
    y
}

fn norm_axis(ax: isize, r: usize) -> Option<usize> {
    let n = if ax < 0 { ax.checked_add(r as isize)? } else { ax };
    (0..r as isize).contains(&n).then_some(n as usize)
}

/// The shape of a reduction over `axes`; `None` when an axis is bad.
fn reduced(s: &[usize], axes: &[isize], keep: bool) -> Option<Vec<usize>> {
    let mut ax = Vec::new();
    for &a in axes {
        let n = norm_axis(a, s.len())?;
        if ax.contains(&n) {
            return None;
        }
        ax.push(n);
    }
    Some(
        (0..s.len())
            .filter_map(|i| match (ax.contains(&i), keep) {
                (false, _) => Some(s[i]),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect(),
    )
}

pub fn reduce(e: &Env, f: fn(&Tensor, &[isize], bool) -> Result<Tensor>) -> Result<Tensor> {
    let (axes, keep) = (e.axes(), e.flag(1));
    let y = f(e.a, &axes, keep);
    if let Ok(t) = &y {
        let s = reduced(e.a.shape(), &axes, keep).expect("accepted bad reduction axes");
        assert_eq!(t.shape(), &s[..], "wrong reduced shape");
    }
    y
}

pub fn first(v: Result<Vec<Tensor>>) -> Result<Tensor> {
    let v = v?;
    Ok(v.into_iter().next().unwrap_or_else(|| Tensor::scalar(0.0f32)))
}

pub fn pair_first(v: Result<(Tensor, Tensor)>) -> Result<Tensor> {
    let (x, y) = v?;
    let _ = format!("{y}");
    Ok(x)
}

pub const EINSUM: [&str; 22] = [
    "ij,jk->ik",
    "i,i->",
    "ii->i",
    "ij->ji",
    "...ij,...jk->...ik",
    "ijk,ikl->ijl",
    "i,j->ij",
    "ab,ab->",
    "->",
    "a->",
    "aa->",
    "i->j",
    ",->",
    "ij,jk",
    "iij->j",
    "ij->",
    "Ab,bC->AC",
    "i,i,i->i",
    "...->...",
    "a...b->b...a",
    "i,->i",
    "ij,ij->ij",
];

/// Whether `a @ b` (with the transposes) would be accepted and then run
/// for a long time: a contraction dim of 2^20 or more (possible on
/// broadcast views, which have no memory of their own) with a result small
/// enough to be allocated. That is valid work, just too much of it for a
/// fuzz case, so such calls are skipped.
pub fn heavy_matmul(a: &[usize], b: &[usize], ta: bool, tb: bool) -> bool {
    let (ra, rb) = (a.len(), b.len());
    if ra < 1 || rb < 1 {
        return false;
    }
    let (m, k) = match (ra, ta) {
        (1, _) => (1, a[0]),
        (_, false) => (a[ra - 2], a[ra - 1]),
        (_, true) => (a[ra - 1], a[ra - 2]),
    };
    let n = match (rb, tb) {
        (1, _) => 1,
        (_, false) => b[rb - 1],
        (_, true) => b[rb - 2],
    };
    let batch = |s: &[usize]| {
        s[..s.len().saturating_sub(2)]
            .iter()
            .try_fold(1usize, |p, &d| p.checked_mul(d))
    };
    let out = [batch(a), batch(b), Some(m), Some(n)]
        .into_iter()
        .try_fold(1usize, |p, d| p.checked_mul(d?));
    k >= 1 << 20 && out.is_some_and(|o| o <= 1 << 28)
}

/// Any operand of more than 2^28 elements (a broadcast view): einsum of
/// it may be valid and just very long, so the fuzz case skips it.
pub fn any_huge(ts: &[&Tensor]) -> bool {
    ts.iter().any(|t| t.numel() > 1 << 28)
}

/// One entry: the op's name and a call of it.
pub type OpFn = fn(&Env) -> Result<Tensor>;

macro_rules! unary {
    ($($name:ident),* $(,)?) => {
        [$((stringify!($name), (|e: &Env| same(e.a.$name(), e.a)) as OpFn)),*]
    };
}

macro_rules! binaries {
    ($($name:ident),* $(,)?) => {
        [$((stringify!($name), (|e: &Env| binary(e, |a, b| a.$name(b))) as OpFn)),*]
    };
}

macro_rules! reductions {
    ($($name:ident),* $(,)?) => {
        [$((stringify!($name), (|e: &Env| reduce(e, |a, ax, k| a.$name(ax, k))) as OpFn)),*]
    };
}

const UNARY: [(&str, OpFn); 38] = unary![
    abs,
    acos,
    acosh,
    asin,
    asinh,
    atan,
    atanh,
    ceil,
    cos,
    cosh,
    erf,
    erfc,
    exp,
    expm1,
    floor,
    log,
    log1p,
    neg,
    reciprocal,
    relu,
    relu6,
    round,
    rsqrt,
    sigmoid,
    sign,
    sin,
    sinh,
    softplus,
    softsign,
    sqrt,
    square,
    tan,
    tanh,
    elu,
    selu,
    silu,
    logical_not,
    conj,
];

const BINARY: [(&str, OpFn); 20] = binaries![
    add,
    sub,
    mul,
    div,
    pow,
    maximum,
    minimum,
    atan2,
    floor_div,
    floor_mod,
    squared_difference,
    eq,
    ne,
    lt,
    le,
    gt,
    ge,
    logical_and,
    logical_or,
    logical_xor,
];

const REDUCE: [(&str, OpFn); 11] = reductions![sum, mean, max, min, prod, logsumexp, variance, std, norm, all, any];

const OTHER: &[(&str, OpFn)] = &[
    // elementwise with arguments, scalar operands
    ("gelu", |e| same(e.a.gelu(e.flag(0)), e.a)),
    ("leaky_relu", |e| same(e.a.leaky_relu(e.f(0)), e.a)),
    ("clip_by_value", |e| same(e.a.clip_by_value(e.f(0), e.f(1)), e.a)),
    ("cast", |e| same(e.a.cast(e.k.dtype), e.a)),
    ("dropout", |e| same(e.a.dropout(e.f(0), e.int(0) as u64), e.a)),
    ("add_scalar", |e| same(e.a.add_scalar(e.f(0)), e.a)),
    ("sub_scalar", |e| same(e.a.sub_scalar(e.f(0)), e.a)),
    ("mul_scalar", |e| same(e.a.mul_scalar(e.f(0)), e.a)),
    ("div_scalar", |e| same(e.a.div_scalar(e.f(0)), e.a)),
    ("pow_scalar", |e| same(e.a.pow_scalar(e.f(0)), e.a)),
    ("gt_scalar", |e| same(e.a.gt_scalar(e.f(0)), e.a)),
    ("lt_scalar", |e| same(e.a.lt_scalar(e.f(0)), e.a)),
    ("scalar_like", |e| want(e.a.scalar_like(e.f(0)), &[])),
    ("real", |e| same(e.a.real(), e.a)),
    ("imag", |e| same(e.a.imag(), e.a)),
    ("angle", |e| same(e.a.angle(), e.a)),
    ("identity", |e| same(Ok(e.a.identity()), e.a)),
    ("stop_gradient", |e| same(Ok(e.a.stop_gradient()), e.a)),
    ("l2_loss", |e| want(e.a.l2_loss(), &[])),
    ("complex", |e| Tensor::complex(e.a, e.b)),
    ("where", |e| Tensor::where_(e.a, e.b, e.c)),
    ("where_gt", |e| Tensor::where_(&e.a.gt_scalar(0.0)?, e.b, e.c)),
    // reductions and scans
    ("sum_all", |e| want(e.a.sum_all(), &[])),
    ("mean_all", |e| want(e.a.mean_all(), &[])),
    ("max_all", |e| want(e.a.max_all(), &[])),
    ("min_all", |e| want(e.a.min_all(), &[])),
    ("argmax", |e| e.a.argmax(e.ax(0))),
    ("argmin", |e| e.a.argmin(e.ax(0))),
    ("moments", |e| pair_first(e.a.moments(&e.axes(), e.flag(1)))),
    ("cumsum", |e| same(e.a.cumsum(e.ax(0), e.flag(0), e.flag(1)), e.a)),
    ("cumprod", |e| same(e.a.cumprod(e.ax(0), e.flag(0), e.flag(1)), e.a)),
    ("sum_to_shape", |e| want(e.a.sum_to_shape(&e.k.shape), &e.k.shape)),
    // shape ops
    ("reshape", |e| want(e.a.reshape(&e.k.shape), &e.k.shape)),
    ("broadcast_to", |e| want(e.a.broadcast_to(&e.k.shape), &e.k.shape)),
    ("transpose", |e| e.a.transpose()),
    ("permute", |e| e.a.permute(&e.k.sizes)),
    ("expand_dims", |e| e.a.expand_dims(e.ax(0))),
    ("squeeze", |e| e.a.squeeze(&e.axes())),
    ("contiguous", |e| same(e.a.contiguous(), e.a)),
    ("slice", |e| {
        let r = e.a.rank();
        let begin: Vec<usize> = (0..r).map(|i| e.size(i)).collect();
        let size: Vec<usize> = (0..r).map(|i| e.size(r + i)).collect();
        want(e.a.slice(&begin, &size), &size)
    }),
    ("narrow", |e| e.a.narrow(e.ax(0), e.size(0), e.size(1))),
    // a block at a start held in a tensor: the case's ints as the start
    // (negative, past the end, huge), or any operand as one
    ("dynamic_slice", |e| {
        let r = e.a.rank();
        let start = Tensor::vector(&(0..r).map(|i| e.int(i)).collect::<Vec<i64>>());
        let size: Vec<usize> = (0..r).map(|i| e.size(i)).collect();
        want(e.a.dynamic_slice(&start, &size), &size)
    }),
    ("dynamic_slice_any", |e| e.a.dynamic_slice(e.b, &e.k.sizes)),
    ("dynamic_update_slice", |e| {
        let start = Tensor::vector(&(0..e.a.rank()).map(|i| e.int(i)).collect::<Vec<i64>>());
        same(e.a.dynamic_update_slice(e.b, &start), e.a)
    }),
    ("dynamic_update_slice_any", |e| e.a.dynamic_update_slice(e.b, e.c)),
    ("strided_slice", |e| e.a.strided_slice(&e.slices())),
    ("reverse", |e| same(e.a.reverse(&e.axes()), e.a)),
    ("tile", |e| {
        let s: Vec<usize> = e.a.shape().iter().zip(&e.k.sizes).map(|(d, m)| d * m).collect();
        let y = e.a.tile(&e.k.sizes);
        if y.is_ok() {
            want(y, &s)
        } else {
            y
        }
    }),
    ("repeat", |e| e.a.repeat(e.size(0), e.ax(0))),
    ("repeat_each", |e| e.a.repeat_each(&e.k.sizes, e.ax(0))),
    ("pad", |e| e.a.pad(&e.pads())),
    ("pad_reflect", |e| e.a.pad_with(&e.pads(), PadMode::Reflect)),
    ("pad_symmetric", |e| e.a.pad_with(&e.pads(), PadMode::Symmetric)),
    ("pad_constant", |e| e.a.pad_with(&e.pads(), PadMode::Constant(e.f(0)))),
    ("concat", |e| Tensor::concat(&[e.a, e.b], e.ax(0))),
    ("concat3", |e| Tensor::concat(&[e.a, e.b, e.c], e.ax(0))),
    ("concat0", |e| Tensor::concat(&[], e.ax(0))),
    ("stack", |e| Tensor::stack(&[e.a, e.b], e.ax(0))),
    ("unstack", |e| first(e.a.unstack(e.ax(0)))),
    ("split", |e| first(e.a.split(e.size(0), e.ax(0)))),
    ("split_sizes", |e| first(e.a.split_sizes(&e.k.sizes, e.ax(0)))),
    // indexing
    ("gather", |e| e.a.gather(e.b, e.ax(0))),
    ("gather_with", |e| e.a.gather_with(e.b, e.ax(0), e.ax(1))),
    ("gather_nd", |e| e.a.gather_nd(e.b)),
    ("scatter_nd", |e| {
        want(Tensor::scatter_nd(e.a, e.b, &e.k.shape), &e.k.shape)
    }),
    ("scatter_add", |e| e.a.scatter_add(e.b, e.ax(0), e.size(0))),
    ("one_hot", |e| {
        e.a.one_hot(e.size(0), e.f(0), e.f(1), e.ax(0), e.k.dtype)
    }),
    ("embedding_lookup", |e| e.a.embedding_lookup(e.b)),
    ("diag", |e| e.a.diag()),
    ("diag_part", |e| e.a.diag_part()),
    ("trace", |e| e.a.trace()),
    ("band_part", |e| same(e.a.band_part(e.ax(0), e.ax(1)), e.a)),
    ("tril", |e| same(e.a.tril(), e.a)),
    ("triu", |e| same(e.a.triu(), e.a)),
    // creation
    ("zeros", |e| want(Tensor::try_zeros(&e.k.shape, e.k.dtype), &e.k.shape)),
    ("ones", |e| want(Tensor::try_ones(&e.k.shape, e.k.dtype), &e.k.shape)),
    ("full", |e| {
        want(Tensor::try_full(&e.k.shape, e.f(0), e.k.dtype), &e.k.shape)
    }),
    ("zeros_like", |e| same(e.a.try_zeros_like(), e.a)),
    ("ones_like", |e| same(e.a.try_ones_like(), e.a)),
    ("full_like", |e| same(e.a.try_full_like(e.f(0)), e.a)),
    ("eye", |e| {
        want(Tensor::try_eye(e.size(0), e.k.dtype), &[e.size(0), e.size(0)])
    }),
    ("eye_rect", |e| {
        want(
            Tensor::try_eye_rect(e.size(0), e.size(1), e.k.dtype),
            &[e.size(0), e.size(1)],
        )
    }),
    ("arange", |e| Tensor::arange(e.f(0), e.f(1), e.f(2), e.k.dtype)),
    ("range", |e| Tensor::range(e.f(0), e.f(1), e.f(2), e.k.dtype)),
    ("linspace", |e| {
        want(Tensor::linspace(e.f(0), e.f(1), e.size(0), e.k.dtype), &[e.size(0)])
    }),
    ("random_uniform", |e| {
        want(
            Tensor::random_uniform(&e.k.shape, e.f(0), e.f(1), e.k.dtype, 7),
            &e.k.shape,
        )
    }),
    ("random_normal", |e| {
        want(
            Tensor::random_normal(&e.k.shape, e.f(0), e.f(1), e.k.dtype, 7),
            &e.k.shape,
        )
    }),
    ("truncated_normal", |e| {
        want(
            Tensor::truncated_normal(&e.k.shape, e.f(0), e.f(1), e.k.dtype, 7),
            &e.k.shape,
        )
    }),
    ("from_vec", |e| {
        let n = e.size(0).min(64);
        want(Tensor::from_vec(vec![1.5f64; n], &e.k.shape), &e.k.shape)
    }),
    // matmul and linear algebra
    ("matmul", |e| {
        if heavy_matmul(e.a.shape(), e.b.shape(), false, false) {
            return Ok(e.a.clone());
        }
        e.a.matmul(e.b)
    }),
    ("matmul_with", |e| {
        if heavy_matmul(e.a.shape(), e.b.shape(), e.flag(0), e.flag(1)) {
            return Ok(e.a.clone());
        }
        e.a.matmul_with(e.b, e.flag(0), e.flag(1))
    }),
    ("matvec", |e| {
        // (the product `matvec` makes: the vector as a column)
        let column: Vec<usize> = e.b.shape().iter().copied().chain([1]).collect();
        if heavy_matmul(e.a.shape(), &column, false, false) {
            return Ok(e.a.clone());
        }
        e.a.matvec(e.b)
    }),
    ("outer", |e| e.a.outer(e.b)),
    ("tensordot", |e| {
        if any_huge(&[e.a, e.b]) {
            return Ok(e.a.clone());
        }
        let n = e.k.ints.len() / 2;
        let (x, y): (Vec<isize>, Vec<isize>) = (0..n).map(|i| (e.ax(i), e.ax(n + i))).unzip();
        e.a.tensordot(e.b, &x, &y)
    }),
    ("cholesky", |e| same(e.a.cholesky(), e.a)),
    ("triangular_solve", |e| e.a.triangular_solve(e.b, e.flag(0), e.flag(1))),
    ("solve", |e| e.a.solve_with(e.b, e.flag(0))),
    ("inverse", |e| same(e.a.inverse(), e.a)),
    ("det", |e| e.a.det()),
    ("slogdet", |e| pair_first(e.a.slogdet())),
    ("logdet", |e| e.a.logdet()),
    ("einsum1", |e| {
        if any_huge(&[e.a]) {
            Ok(e.a.clone())
        } else {
            Tensor::einsum(EINSUM[e.k.a.seed as usize % EINSUM.len()], &[e.a])
        }
    }),
    ("einsum2", |e| {
        if any_huge(&[e.a, e.b]) {
            Ok(e.a.clone())
        } else {
            Tensor::einsum(EINSUM[e.k.a.seed as usize % EINSUM.len()], &[e.a, e.b])
        }
    }),
    ("einsum3", |e| {
        if any_huge(&[e.a, e.b, e.c]) {
            Ok(e.a.clone())
        } else {
            Tensor::einsum(EINSUM[e.k.a.seed as usize % EINSUM.len()], &[e.a, e.b, e.c])
        }
    }),
    // nn
    ("attention", |e| {
        e.a.scaled_dot_product_attention(e.b, e.c, None, e.flag(0), None)
    }),
    ("attention_masked", |e| {
        e.a.scaled_dot_product_attention(e.b, e.b, Some(e.c), e.flag(0), Some(e.f(0)))
    }),
    ("grouped_query_attention", |e| {
        let drop = e.flag(1).then(|| gradtape::AttentionDropout {
            rate: e.f(1),
            seed: e.k.a.seed,
        });
        e.a.grouped_query_attention(e.b, e.c, None, e.flag(0), Some(e.f(0)), drop)
    }),
    ("softmax", |e| same(e.a.softmax(e.ax(0)), e.a)),
    ("log_softmax", |e| same(e.a.log_softmax(e.ax(0)), e.a)),
    ("softmax_xent", |e| Tensor::softmax_cross_entropy_with_logits(e.b, e.a)),
    ("sparse_softmax_xent", |e| {
        Tensor::sparse_softmax_cross_entropy_with_logits(e.b, e.a)
    }),
    ("sigmoid_xent", |e| Tensor::sigmoid_cross_entropy_with_logits(e.b, e.a)),
    ("bias_add", |e| same(e.a.bias_add(e.b), e.a)),
    ("conv2d", |e| e.a.conv2d(e.b, e.pair(0), e.padding(), e.pair(2))),
    ("conv1d", |e| e.a.conv1d(e.b, e.int(0), e.padding(), e.int(1))),
    ("depthwise_conv2d", |e| {
        e.a.depthwise_conv2d(e.b, e.pair(0), e.padding(), e.pair(2))
    }),
    ("conv2d_transpose", |e| {
        e.a.conv2d_transpose(e.b, &e.k.shape, e.pair(0), e.padding(), e.pair(2))
    }),
    ("conv2d_backprop_input", |e| {
        Tensor::conv2d_backprop_input(&e.k.shape, e.a, e.b, e.pair(0), e.padding(), e.pair(2))
    }),
    ("conv2d_backprop_filter", |e| {
        Tensor::conv2d_backprop_filter(e.a, &e.k.shape, e.b, e.pair(0), e.padding(), e.pair(2))
    }),
    ("depthwise_backprop_input", |e| {
        Tensor::depthwise_conv2d_backprop_input(&e.k.shape, e.a, e.b, e.pair(0), e.padding(), e.pair(2))
    }),
    ("depthwise_backprop_filter", |e| {
        Tensor::depthwise_conv2d_backprop_filter(e.a, &e.k.shape, e.b, e.pair(0), e.padding(), e.pair(2))
    }),
    ("max_pool2d", |e| e.a.max_pool2d(e.pair(0), e.pair(2), e.padding())),
    ("avg_pool2d", |e| e.a.avg_pool2d(e.pair(0), e.pair(2), e.padding())),
    ("avg_pool2d_grad", |e| {
        e.a.avg_pool2d_grad(&e.k.shape, e.pair(0), e.pair(2), e.padding())
    }),
    ("resize_images", |e| {
        let m = if e.flag(0) {
            ResizeMethod::Bilinear
        } else {
            ResizeMethod::Nearest
        };
        e.a.resize_images([e.size(0), e.size(1)], m)
    }),
    ("resize_bilinear", |e| {
        e.a.resize_bilinear([e.size(0), e.size(1)], e.flag(1), e.flag(2))
    }),
    ("resize_bilinear_grad", |e| {
        e.a.resize_bilinear_grad([e.size(0), e.size(1)], e.flag(1), e.flag(2))
    }),
    ("resize_nearest_neighbor", |e| {
        e.a.resize_nearest_neighbor([e.size(0), e.size(1)], e.flag(1), e.flag(2))
    }),
    ("resize_nearest_neighbor_grad", |e| {
        e.a.resize_nearest_neighbor_grad([e.size(0), e.size(1)], e.flag(1), e.flag(2))
    }),
    ("resize_images_cubic_area", |e| {
        let m = if e.flag(0) {
            ResizeMethod::Bicubic
        } else {
            ResizeMethod::Area
        };
        e.a.resize_images([e.size(0), e.size(1)], m)
    }),
    ("crop_and_resize", |e| {
        let m = if e.flag(0) {
            ResizeMethod::Bilinear
        } else {
            ResizeMethod::Nearest
        };
        e.a.crop_and_resize(e.b, e.c, e.pair(0), m, e.f(0))
    }),
    ("extract_patches", |e| {
        e.a.extract_patches(e.pair(0), e.pair(2), e.pair(4), e.padding())
    }),
    ("ctc_loss", |e| {
        Tensor::ctc_loss(e.b, e.a, e.c, e.c, e.flag(0), e.int(0))
    }),
    ("conv3d", |e| {
        e.a.conv3d_with_format(e.b, e.tri(0), e.padding(), e.tri(3), e.format())
    }),
    ("conv3d_backprop_input", |e| {
        Tensor::conv3d_backprop_input(&e.k.shape, e.a, e.b, e.tri(0), e.padding(), e.tri(3))
    }),
    ("conv3d_backprop_filter", |e| {
        Tensor::conv3d_backprop_filter(e.a, &e.k.shape, e.b, e.tri(0), e.padding(), e.tri(3))
    }),
    ("max_pool3d", |e| {
        e.a.max_pool3d_with_format(e.tri(0), e.tri(3), e.padding(), e.format())
    }),
    ("avg_pool3d", |e| {
        e.a.avg_pool3d_with_format(e.tri(0), e.tri(3), e.padding(), e.format())
    }),
    ("avg_pool3d_grad", |e| {
        e.a.avg_pool3d_grad(&e.k.shape, e.tri(0), e.tri(3), e.padding())
    }),
    ("max_pool1d", |e| e.a.max_pool1d(e.int(0), e.int(1), e.padding())),
    ("avg_pool1d", |e| e.a.avg_pool1d(e.int(0), e.int(1), e.padding())),
    ("separable_conv2d", |e| {
        e.a.separable_conv2d(e.b, e.c, e.pair(0), e.padding(), e.pair(2))
    }),
    ("conv2d_with_format", |e| {
        e.a.conv2d_with_format(e.b, e.pair(0), e.padding(), e.pair(2), e.format())
    }),
    ("pool2d_with_format", |e| {
        if e.flag(1) {
            e.a.max_pool2d_with_format(e.pair(0), e.pair(2), e.padding(), e.format())
        } else {
            e.a.avg_pool2d_with_format(e.pair(0), e.pair(2), e.padding(), e.format())
        }
    }),
    ("bias_add_with_format", |e| e.a.bias_add_with_format(e.b, e.format())),
    ("batch_normalization", |e| {
        let off = e.flag(1).then_some(e.c);
        Tensor::batch_normalization(e.a, e.b, e.c, off, Some(e.b), e.f(0))
    }),
    ("rms_normalization", |e| {
        let g = e.flag(1).then_some(e.b);
        same(e.a.rms_normalization(&e.axes(), g, e.f(0)), e.a)
    }),
    ("l2_normalize", |e| same(e.a.l2_normalize(&e.axes(), e.f(0)), e.a)),
    ("weighted_xent", |e| {
        Tensor::weighted_cross_entropy_with_logits(e.b, e.a, e.f(0))
    }),
    ("log_poisson_loss", |e| Tensor::log_poisson_loss(e.b, e.a, e.flag(0))),
    ("layer_normalization", |e| {
        let g = e.flag(1).then_some(e.b);
        same(e.a.layer_normalization(&e.axes(), g, Some(e.c), e.f(0)), e.a)
    }),
];

/// Every op, by index (a case draws one).
pub static OPS: std::sync::LazyLock<Vec<(&'static str, OpFn)>> = std::sync::LazyLock::new(|| {
    UNARY
        .iter()
        .chain(BINARY.iter())
        .chain(REDUCE.iter())
        .chain(OTHER.iter())
        .chain(crate::fit::FIT.iter())
        .chain(crate::extra::EXTRA.iter())
        .chain(crate::surfaces::SURFACES.iter())
        .copied()
        .collect()
});

/// The dtypes `Variable` and tangents may take (differentiable ones).
pub fn differentiable(d: DType) -> bool {
    d.is_float() || d.is_complex()
}
