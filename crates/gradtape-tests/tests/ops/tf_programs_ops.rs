//! The steps of `tf_programs.rs`'s programs in gradtape: each op name of
//! `tests/reference/tf_programs.py`'s `run_op` as the gradtape call that
//! does what TensorFlow's does, with the step's attributes.

use std::collections::HashMap;

use gradtape::{DType, Error, PadMode, Result, Slice, Tensor};

/// A step's attributes, `k=v;k=v` (`-` for none).
#[derive(Clone)]
pub struct Attrs(HashMap<String, String>);

impl Attrs {
    pub fn parse(s: &str) -> Attrs {
        Attrs(if s == "-" {
            HashMap::new()
        } else {
            s.split(';')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("bad attribute {kv}"));
                    (k.to_string(), v.to_string())
                })
                .collect()
        })
    }
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }
    pub fn str(&self, k: &str) -> &str {
        self.0.get(k).unwrap_or_else(|| panic!("no attribute {k}"))
    }
    pub fn ints(&self, k: &str) -> Vec<isize> {
        let v = self.str(k);
        if v.is_empty() {
            return Vec::new();
        }
        v.split(',')
            .map(|x| x.parse().unwrap_or_else(|_| panic!("bad int {x}")))
            .collect()
    }
    fn usizes(&self, k: &str) -> Vec<usize> {
        self.ints(k).into_iter().map(|v| v as usize).collect()
    }
    fn int(&self, k: &str) -> isize {
        self.ints(k)[0]
    }
    fn float(&self, k: &str) -> f64 {
        self.str(k).parse().unwrap_or_else(|_| panic!("bad float {k}"))
    }
    fn flag(&self, k: &str) -> bool {
        self.int(k) != 0
    }
}

pub fn dtype(name: &str) -> DType {
    match name {
        "f64" => DType::F64,
        "f32" => DType::F32,
        "i32" => DType::I32,
        "i64" => DType::I64,
        "bool" => DType::Bool,
        _ => panic!("no dtype {name}"),
    }
}

fn unary(op: &str, x: &Tensor) -> Option<Result<Tensor>> {
    Some(match op {
        "abs" => x.abs(),
        "neg" => x.neg(),
        "exp" => x.exp(),
        "log" => x.log(),
        "sqrt" => x.sqrt(),
        "rsqrt" => x.rsqrt(),
        "square" => x.square(),
        "sin" => x.sin(),
        "cos" => x.cos(),
        "tan" => x.tan(),
        "tanh" => x.tanh(),
        "sigmoid" => x.sigmoid(),
        "relu" => x.relu(),
        "relu6" => x.relu6(),
        "elu" => x.elu(),
        "selu" => x.selu(),
        "softplus" => x.softplus(),
        "softsign" => x.softsign(),
        "log1p" => x.log1p(),
        "expm1" => x.expm1(),
        "sign" => x.sign(),
        "floor" => x.floor(),
        "ceil" => x.ceil(),
        "round" => x.round(),
        "reciprocal" => x.reciprocal(),
        "asin" => x.asin(),
        "acos" => x.acos(),
        "atan" => x.atan(),
        "sinh" => x.sinh(),
        "cosh" => x.cosh(),
        "asinh" => x.asinh(),
        "acosh" => x.acosh(),
        "atanh" => x.atanh(),
        "erf" => x.erf(),
        "erfc" => x.erfc(),
        "lgamma" => x.lgamma(),
        "digamma" => x.digamma(),
        "gelu" => x.gelu(false),
        "gelu_tanh" => x.gelu(true),
        "silu" => x.silu(),
        "leaky_relu" => x.leaky_relu(0.2),
        "log_sigmoid" => x.log_sigmoid(),
        "mish" => x.mish(),
        "hard_sigmoid" => x.hard_sigmoid(),
        "hard_silu" => x.hard_silu(),
        "sparse_plus" => x.sparse_plus(),
        "is_nan" => x.is_nan(),
        "is_inf" => x.is_inf(),
        "is_finite" => x.is_finite(),
        "stop_gradient" => Ok(x.stop_gradient()),
        "logical_not" => x.logical_not(),
        _ => return None,
    })
}

fn binary(op: &str, x: &Tensor, y: &Tensor) -> Option<Result<Tensor>> {
    Some(match op {
        "add" => x.add(y),
        "sub" => x.sub(y),
        "mul" => x.mul(y),
        "maximum" => x.maximum(y),
        "minimum" => x.minimum(y),
        "floor_div" => x.floor_div(y),
        "floor_mod" => x.floor_mod(y),
        "squared_difference" => x.squared_difference(y),
        // TensorFlow's truediv on floats, truncatediv on integers
        "div" | "truncate_div" => x.div(y),
        "pow" => x.pow(y),
        "atan2" => x.atan2(y),
        "xlogy" => Tensor::xlogy(x, y),
        "xlog1py" => Tensor::xlog1py(x, y),
        "divide_no_nan" => Tensor::divide_no_nan(x, y),
        "eq" => x.eq(y),
        "ne" => x.ne(y),
        "lt" => x.lt(y),
        "le" => x.le(y),
        "gt" => x.gt(y),
        "ge" => x.ge(y),
        "logical_and" => x.logical_and(y),
        "logical_or" => x.logical_or(y),
        "logical_xor" => x.logical_xor(y),
        _ => return None,
    })
}

fn reduction(op: &str, x: &Tensor, a: &Attrs) -> Option<Result<Tensor>> {
    const REDUCTIONS: [&str; 10] = [
        "sum",
        "mean",
        "max",
        "min",
        "prod",
        "logsumexp",
        "std",
        "variance",
        "any",
        "all",
    ];
    if !REDUCTIONS.contains(&op) {
        return None;
    }
    // (TensorFlow's `axis=None`: every axis)
    let axes: Vec<isize> = match a.str("axes") {
        "all" => (0..x.rank() as isize).collect(),
        _ => a.ints("axes"),
    };
    let keep = a.flag("keep");
    Some(match op {
        "sum" => x.sum(&axes, keep),
        "mean" => x.mean(&axes, keep),
        "max" => x.max(&axes, keep),
        "min" => x.min(&axes, keep),
        "prod" => x.prod(&axes, keep),
        "logsumexp" => x.logsumexp(&axes, keep),
        "std" => x.std(&axes, keep),
        "variance" => x.variance(&axes, keep),
        "any" => x.any(&axes, keep),
        "all" => x.all(&axes, keep),
        _ => return None,
    })
}

/// One of the `pick`-th outputs of a multi-output op, an error past them
/// (as Python's `IndexError`).
fn nth(op: &str, parts: Result<Vec<Tensor>>, pick: isize) -> Result<Tensor> {
    let parts = parts?;
    let n = parts.len();
    parts
        .into_iter()
        .nth(pick as usize)
        .ok_or_else(|| Error::InvalidArgument {
            op: "tf_programs",
            msg: format!("{op} gave {n} parts, no part {pick}"),
        })
}

fn slice_part(s: &str) -> Slice {
    let p: Vec<Option<isize>> = s
        .split(':')
        .map(|v| (v != "n").then(|| v.parse().expect("slice bound")))
        .collect();
    Slice::new(p[0], p[1], p[2].expect("slice step"))
}

fn i64_tensor(v: Vec<isize>, shape: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(v.into_iter().map(|i| i as i64).collect::<Vec<_>>(), shape)
}

/// The step `op` on `xs` with attributes `a`.
pub fn apply(op: &str, xs: &[&Tensor], a: &Attrs) -> Result<Tensor> {
    let x = xs[0];
    if let Some(y) = match xs.len() {
        1 => unary(op, x).or_else(|| reduction(op, x, a)),
        2 => binary(op, x, xs[1]),
        _ => None,
    } {
        return y;
    }
    match op {
        "norm" => x.norm(&[a.int("axis")], a.flag("keep")),
        "argmax" => x.argmax(a.int("axis")),
        "argmin" => x.argmin(a.int("axis")),
        "cast" => x.cast(dtype(a.str("to"))),
        "reshape" => x.reshape_inferred(&a.ints("shape")),
        "transpose" => x.permute(&a.usizes("perm")),
        "expand_dims" => x.expand_dims(a.int("axis")),
        "squeeze" => x.squeeze(&a.ints("axes")),
        "concat" => Tensor::concat(xs, a.int("axis")),
        "stack" => Tensor::stack(xs, a.int("axis")),
        "split" => nth(op, x.split(a.int("num") as usize, a.int("axis")), a.int("pick")),
        "split_sizes" => nth(op, x.split_sizes(&a.usizes("sizes"), a.int("axis")), a.int("pick")),
        "unstack" => nth(op, x.unstack(a.int("axis")), a.int("pick")),
        "slice" => x.slice(&a.usizes("begin"), &a.usizes("size")),
        "strided_slice" => {
            let s: Vec<Slice> = a
                .str("s")
                .split(',')
                .filter(|p| !p.is_empty())
                .map(slice_part)
                .collect();
            x.strided_slice(&s)
        }
        "gather" => {
            let idx = i64_tensor(a.ints("idx"), &a.usizes("ishape"))?;
            match a.int("batch") {
                0 => x.gather(&idx, a.int("axis")),
                b => x.gather_with(&idx, a.int("axis"), b),
            }
        }
        "tile" => x.tile(&a.usizes("mult")),
        "pad" => {
            let p = a.usizes("pads");
            let pairs: Vec<(usize, usize)> = p.chunks(2).map(|c| (c[0], c[1])).collect();
            let mode = match a.str("mode") {
                "CONSTANT" => PadMode::Constant(a.float("value")),
                "REFLECT" => PadMode::Reflect,
                _ => PadMode::Symmetric,
            };
            x.pad_with(&pairs, mode)
        }
        "reverse" => x.reverse(&a.ints("axes")),
        "roll" => x.roll(&a.ints("shift"), &a.ints("axes")),
        "broadcast_to" => x.broadcast_to(&a.usizes("shape")),
        "where" => Tensor::where_(x, xs[1], xs[2]),
        "matmul" => x.matmul_with(xs[1], a.flag("ta"), a.flag("tb")),
        "einsum" => Tensor::einsum(a.str("spec"), xs),
        "softmax" => x.softmax(a.int("axis")),
        "log_softmax" => x.log_softmax(a.int("axis")),
        "cumsum" => x.cumsum(a.int("axis"), a.flag("excl"), a.flag("rev")),
        "cumprod" => x.cumprod(a.int("axis"), a.flag("excl"), a.flag("rev")),
        "clip" => x.clip_by_value(a.float("lo"), a.float("hi")),
        "sort" => x.sort(a.int("axis"), a.flag("desc")),
        "argsort" => x.argsort(a.int("axis"), a.flag("desc")),
        "top_k_values" => Ok(x.top_k(a.int("k") as usize)?.0),
        "top_k_indices" => Ok(x.top_k(a.int("k") as usize)?.1),
        "one_hot" => x.one_hot(
            a.int("depth") as usize,
            a.float("on"),
            a.float("off"),
            a.int("axis"),
            dtype(a.str("to")),
        ),
        _ => more(op, xs, a)
            .or_else(|| activation(op, xs, a))
            .unwrap_or_else(|| segment(op, x, a)),
    }
}

/// The ops of `more` campaigns (`tf_programs.py`'s `draw_more_step`).
fn more(op: &str, xs: &[&Tensor], a: &Attrs) -> Option<Result<Tensor>> {
    let x = xs[0];
    let idx = || i64_tensor(a.ints("idx"), &a.usizes("ishape"));
    Some(match op {
        "gather_nd" => idx().and_then(|i| x.gather_nd(&i)),
        "scatter_nd" => idx().and_then(|i| Tensor::scatter_nd(&i, x, &a.usizes("shape"))),
        "tensor_scatter_add" => idx().and_then(|i| x.tensor_scatter_nd_add(&i, xs[1])),
        "tensor_scatter_update" => idx().and_then(|i| x.tensor_scatter_nd_update(&i, xs[1])),
        "l2_normalize" => x.l2_normalize(&a.ints("axes"), a.float("eps")),
        "band_part" => x.band_part(a.int("lower"), a.int("upper")),
        "boolean_mask" => x.boolean_mask(xs[1]),
        "argwhere" => x.argwhere(),
        "unique_values" => x.unique().map(|u| u.0),
        "unique_indices" => x.unique().map(|u| u.1),
        "searchsorted" => x.searchsorted(xs[1], a.flag("right")),
        "bincount" => x.bincount(xs.get(1).copied(), a.int("min") as usize),
        "trace" => x.trace(),
        "diag_part" => x.diag_part(),
        "l2_loss" => x.l2_loss(),
        _ => return None,
    })
}

/// The gates' scales of `lstm_cell`'s `z`, one per gate (i, f, g, o), as
/// `tf_programs.py`'s `LSTM_SCALES`.
const LSTM_SCALES: [f64; 4] = [1.0, -0.5, 2.0, 1.5];

/// The ops of `act` campaigns (`tf_programs.py`'s `draw_act_step`) that
/// take attributes or two operands.
fn activation(op: &str, xs: &[&Tensor], a: &Attrs) -> Option<Result<Tensor>> {
    let x = xs[0];
    Some(match op {
        "celu" => x.celu(a.float("alpha")),
        "relu_with" => x.relu_with(a.float("slope"), a.get("max").map(|_| a.float("max")), a.float("thr")),
        "squareplus" => x.squareplus(a.float("b")),
        "glu" => x.glu(-1),
        "lstm_cell" => lstm_cell(x, xs[1]),
        _ => return None,
    })
}

/// An LSTM step whose gates are `x` tiled 4 times along its last axis,
/// gate k scaled by `LSTM_SCALES[k]`, from the state `c`: `h` and `c'`
/// concatenated along the last axis.
fn lstm_cell(x: &Tensor, c: &Tensor) -> Result<Tensor> {
    let Some(&u) = x.shape().last() else {
        return Err(Error::InvalidArgument {
            op: "tf_programs",
            msg: "lstm_cell of a scalar".into(),
        });
    };
    let mut reps = vec![1; x.rank()];
    reps[x.rank() - 1] = 4;
    let scale: Vec<f64> = LSTM_SCALES.iter().flat_map(|&s| std::iter::repeat_n(s, u)).collect();
    let z = x
        .tile(&reps)?
        .mul(&Tensor::from_vec(scale, &[4 * u])?.cast(x.dtype())?)?;
    let (h, c1) = Tensor::lstm_cell(&z, c)?;
    Tensor::concat(&[&h, &c1], -1)
}

fn segment(op: &str, x: &Tensor, a: &Attrs) -> Result<Tensor> {
    let ids = a.ints("ids");
    let n = ids.len();
    let ids = i64_tensor(ids, &[n])?;
    if let Some(kind) = op.strip_prefix("segment_") {
        return match kind {
            "sum" => x.segment_sum(&ids),
            "mean" => x.segment_mean(&ids),
            "max" => x.segment_max(&ids),
            "min" => x.segment_min(&ids),
            _ => x.segment_prod(&ids),
        };
    }
    let num = a.int("num") as usize;
    match op.strip_prefix("usegment_").unwrap_or_else(|| panic!("no op {op}")) {
        "sum" => x.unsorted_segment_sum(&ids, num),
        "mean" => x.unsorted_segment_mean(&ids, num),
        "max" => x.unsorted_segment_max(&ids, num),
        "min" => x.unsorted_segment_min(&ids, num),
        _ => x.unsorted_segment_prod(&ids, num),
    }
}
