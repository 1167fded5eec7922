//! Never-panic property test for the elementwise, reduction and scan ops
//! (the issue-3 math ops and the older unary/binary/reduction ops): random
//! ranks (0-4), dims (0-4), dtypes (all), axes (in range, negative, out of
//! range, repeated) and scalars, drawn by a tiny deterministic LCG. Every
//! call runs under `catch_unwind`: it must not panic, and an `Ok` result must
//! have the shape and dtype the op's documented rule gives (and an op that
//! only takes some dtypes must not accept others).

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::shapes::{broadcast, norm_axes, reduced};
use gradtape::{DType, Result, Tensor};

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn shape(&mut self) -> Vec<usize> {
        let rank = self.below(5) as usize;
        (0..rank).map(|_| self.below(5) as usize).collect()
    }
    fn dtype(&mut self) -> DType {
        [DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool][self.below(5) as usize]
    }
    fn tensor(&mut self, shape: &[usize], dtype: DType) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n).map(|_| self.below(9) as f64 - 4.0).collect();
        Tensor::from_vec(v, shape).unwrap().cast(dtype).unwrap()
    }
    /// A shape that usually broadcasts against `s`, sometimes not.
    fn partner(&mut self, s: &[usize]) -> Vec<usize> {
        match self.below(4) {
            0 => self.shape(),
            1 => s.to_vec(),
            _ => {
                let drop = self.below(s.len() as u64 + 1) as usize;
                s[drop..]
                    .iter()
                    .map(|&d| if self.below(3) == 0 { 1 } else { d })
                    .collect()
            }
        }
    }
    fn axis(&mut self, rank: usize) -> isize {
        self.below(2 * rank as u64 + 5) as isize - rank as isize - 2
    }
    fn axes(&mut self, rank: usize) -> Vec<isize> {
        let k = self.below(4) as usize;
        (0..k).map(|_| self.axis(rank)).collect()
    }
}

#[derive(Clone, Copy)]
enum Accepts {
    Float,
    Int,
    Num,
    Bool,
    Any,
}

impl Accepts {
    fn ok(self, d: DType) -> bool {
        match self {
            Accepts::Float => d.is_float(),
            Accepts::Int => d.is_int(),
            Accepts::Num => d != DType::Bool,
            Accepts::Bool => d == DType::Bool,
            Accepts::Any => true,
        }
    }
}

const DRAWS: usize = 300;

/// Runs `f` under catch_unwind; panics are collected as failures.
fn guarded(failures: &mut Vec<String>, what: String, f: impl FnOnce() -> std::result::Result<(), String>) {
    match catch_unwind(AssertUnwindSafe(f)) {
        Err(_) => failures.push(format!("{what}: panicked")),
        Ok(Err(m)) => failures.push(format!("{what}: {m}")),
        Ok(Ok(())) => {}
    }
}

fn check(
    r: Result<Tensor>,
    shape: Option<Vec<usize>>,
    dtype: DType,
    accepted: bool,
) -> std::result::Result<(), String> {
    match (r, shape) {
        (Ok(y), Some(s)) if accepted => {
            if y.shape() != s.as_slice() || y.dtype() != dtype {
                return Err(format!("got {:?} {}, expected {s:?} {dtype}", y.shape(), y.dtype()));
            }
            Ok(())
        }
        (Ok(y), _) => Err(format!("accepted bad input, gave {:?} {}", y.shape(), y.dtype())),
        (Err(_), _) => Ok(()),
    }
}

type Unary = fn(&Tensor, f64) -> Result<Tensor>;

#[test]
fn elementwise_unary_ops_never_panic() {
    let ops: &[(&str, Accepts, Unary)] = &[
        ("neg", Accepts::Num, |x, _| x.neg()),
        ("abs", Accepts::Num, |x, _| x.abs()),
        ("sign", Accepts::Num, |x, _| x.sign()),
        ("exp", Accepts::Float, |x, _| x.exp()),
        ("log", Accepts::Float, |x, _| x.log()),
        ("sqrt", Accepts::Float, |x, _| x.sqrt()),
        ("square", Accepts::Num, |x, _| x.square()),
        ("sin", Accepts::Float, |x, _| x.sin()),
        ("cos", Accepts::Float, |x, _| x.cos()),
        ("tanh", Accepts::Float, |x, _| x.tanh()),
        ("sigmoid", Accepts::Float, |x, _| x.sigmoid()),
        ("relu", Accepts::Num, |x, _| x.relu()),
        ("pow_scalar", Accepts::Float, |x, c| x.pow_scalar(c)),
        ("mul_scalar", Accepts::Num, |x, c| x.mul_scalar(c)),
        ("div_scalar", Accepts::Num, |x, c| x.div_scalar(c)),
        ("add_scalar", Accepts::Num, |x, c| x.add_scalar(c)),
        ("sub_scalar", Accepts::Num, |x, c| x.sub_scalar(c)),
        ("expm1", Accepts::Float, |x, _| x.expm1()),
        ("log1p", Accepts::Float, |x, _| x.log1p()),
        ("rsqrt", Accepts::Float, |x, _| x.rsqrt()),
        ("reciprocal", Accepts::Float, |x, _| x.reciprocal()),
        ("tan", Accepts::Float, |x, _| x.tan()),
        ("asin", Accepts::Float, |x, _| x.asin()),
        ("acos", Accepts::Float, |x, _| x.acos()),
        ("atan", Accepts::Float, |x, _| x.atan()),
        ("sinh", Accepts::Float, |x, _| x.sinh()),
        ("cosh", Accepts::Float, |x, _| x.cosh()),
        ("asinh", Accepts::Float, |x, _| x.asinh()),
        ("acosh", Accepts::Float, |x, _| x.acosh()),
        ("atanh", Accepts::Float, |x, _| x.atanh()),
        ("erf", Accepts::Float, |x, _| x.erf()),
        ("erfc", Accepts::Float, |x, _| x.erfc()),
        ("floor", Accepts::Num, |x, _| x.floor()),
        ("ceil", Accepts::Num, |x, _| x.ceil()),
        ("round", Accepts::Num, |x, _| x.round()),
        ("softplus", Accepts::Float, |x, _| x.softplus()),
        ("softsign", Accepts::Float, |x, _| x.softsign()),
        ("relu6", Accepts::Float, |x, _| x.relu6()),
        ("leaky_relu", Accepts::Float, |x, c| x.leaky_relu(c)),
        ("elu", Accepts::Float, |x, _| x.elu()),
        ("selu", Accepts::Float, |x, _| x.selu()),
        ("gelu", Accepts::Float, |x, _| x.gelu(false)),
        ("gelu tanh", Accepts::Float, |x, _| x.gelu(true)),
        ("silu", Accepts::Float, |x, _| x.silu()),
        ("hard_sigmoid", Accepts::Float, |x, _| x.hard_sigmoid()),
        ("hard_silu", Accepts::Float, |x, _| x.hard_silu()),
        ("mish", Accepts::Float, |x, _| x.mish()),
        ("celu", Accepts::Float, |x, c| x.celu(c.abs() + 0.5)),
        ("relu_with", Accepts::Float, |x, c| {
            x.relu_with(c.abs(), Some(c.abs() + 1.0), c.abs() / 2.0)
        }),
        ("hard_tanh", Accepts::Float, |x, _| x.hard_tanh()),
        ("soft_shrink", Accepts::Float, |x, c| x.soft_shrink(c.abs())),
        ("hard_shrink", Accepts::Float, |x, c| x.hard_shrink(c.abs())),
        ("tanh_shrink", Accepts::Float, |x, _| x.tanh_shrink()),
        ("sparse_plus", Accepts::Float, |x, _| x.sparse_plus()),
        ("squareplus", Accepts::Float, |x, c| x.squareplus(c.abs())),
        ("clip_by_value", Accepts::Num, |x, c| x.clip_by_value(-c.abs(), c.abs())),
        ("logical_not", Accepts::Bool, |x, _| x.logical_not()),
        ("invert", Accepts::Int, |x, _| x.invert()),
    ];
    let mut rng = Lcg(7);
    let mut failures = Vec::new();
    for &(name, acc, f) in ops {
        for _ in 0..DRAWS {
            let (s, d) = (rng.shape(), rng.dtype());
            let x = rng.tensor(&s, d);
            let c = rng.below(7) as f64 - 3.0;
            guarded(&mut failures, format!("{name} {s:?} {d} c={c}"), || {
                check(f(&x, c), Some(s.clone()), d, acc.ok(d))
            });
        }
    }
    assert!(failures.is_empty(), "{}", failures[..failures.len().min(20)].join("\n"));
}

type Binary = fn(&Tensor, &Tensor) -> Result<Tensor>;

#[test]
fn elementwise_binary_ops_never_panic() {
    // (name, accepted dtypes, output dtype: None = the input's)
    let ops: &[(&str, Accepts, Option<DType>, Binary)] = &[
        ("add", Accepts::Num, None, |a, b| a.add(b)),
        ("sub", Accepts::Num, None, |a, b| a.sub(b)),
        ("mul", Accepts::Num, None, |a, b| a.mul(b)),
        ("div", Accepts::Num, None, |a, b| a.div(b)),
        ("pow", Accepts::Num, None, |a, b| a.pow(b)),
        ("bitwise_and", Accepts::Int, None, |a, b| a.bitwise_and(b)),
        ("bitwise_or", Accepts::Int, None, |a, b| a.bitwise_or(b)),
        ("bitwise_xor", Accepts::Int, None, |a, b| a.bitwise_xor(b)),
        ("left_shift", Accepts::Int, None, |a, b| a.left_shift(b)),
        ("right_shift", Accepts::Int, None, |a, b| a.right_shift(b)),
        ("maximum", Accepts::Num, None, |a, b| a.maximum(b)),
        ("minimum", Accepts::Num, None, |a, b| a.minimum(b)),
        ("eq", Accepts::Any, Some(DType::Bool), |a, b| a.eq(b)),
        ("ne", Accepts::Any, Some(DType::Bool), |a, b| a.ne(b)),
        ("lt", Accepts::Any, Some(DType::Bool), |a, b| a.lt(b)),
        ("le", Accepts::Any, Some(DType::Bool), |a, b| a.le(b)),
        ("gt", Accepts::Any, Some(DType::Bool), |a, b| a.gt(b)),
        ("ge", Accepts::Any, Some(DType::Bool), |a, b| a.ge(b)),
        ("squared_difference", Accepts::Num, None, |a, b| a.squared_difference(b)),
        ("atan2", Accepts::Float, None, |a, b| a.atan2(b)),
        ("floor_div", Accepts::Num, None, |a, b| a.floor_div(b)),
        ("floor_mod", Accepts::Num, None, |a, b| a.floor_mod(b)),
        ("logical_and", Accepts::Bool, None, |a, b| a.logical_and(b)),
        ("logical_or", Accepts::Bool, None, |a, b| a.logical_or(b)),
        ("logical_xor", Accepts::Bool, None, |a, b| a.logical_xor(b)),
        ("where_ (a as cond)", Accepts::Bool, None, |a, b| {
            Tensor::where_(a, b, b)
        }),
    ];
    let mut rng = Lcg(11);
    let mut failures = Vec::new();
    for &(name, acc, out, f) in ops {
        for _ in 0..DRAWS {
            let sa = rng.shape();
            let sb = rng.partner(&sa);
            let da = rng.dtype();
            let db = if rng.below(4) == 0 { rng.dtype() } else { da };
            let (a, b) = (rng.tensor(&sa, da), rng.tensor(&sb, db));
            guarded(&mut failures, format!("{name} {sa:?} {da} / {sb:?} {db}"), || {
                if name.starts_with("where_") {
                    // cond must be bool; the values take b's dtype
                    return check(f(&a, &b), broadcast(&sa, &sb), db, da == DType::Bool);
                }
                check(
                    f(&a, &b),
                    broadcast(&sa, &sb),
                    out.unwrap_or(da),
                    acc.ok(da) && da == db,
                )
            });
        }
    }
    assert!(failures.is_empty(), "{}", failures[..failures.len().min(20)].join("\n"));
}

type Reduce = fn(&Tensor, &[isize], bool) -> Result<Tensor>;

#[test]
fn reductions_never_panic() {
    // (name, accepted dtypes, output dtype: None = the input's)
    let ops: &[(&str, Accepts, Option<DType>, Reduce)] = &[
        ("sum", Accepts::Num, None, |x, a, k| x.sum(a, k)),
        ("mean", Accepts::Num, None, |x, a, k| x.mean(a, k)),
        ("max", Accepts::Num, None, |x, a, k| x.max(a, k)),
        ("min", Accepts::Num, None, |x, a, k| x.min(a, k)),
        ("prod", Accepts::Num, None, |x, a, k| x.prod(a, k)),
        ("logsumexp", Accepts::Float, None, |x, a, k| x.logsumexp(a, k)),
        ("variance", Accepts::Float, None, |x, a, k| x.variance(a, k)),
        ("std", Accepts::Float, None, |x, a, k| x.std(a, k)),
        ("norm", Accepts::Float, None, |x, a, k| x.norm(a, k)),
        ("all", Accepts::Bool, None, |x, a, k| x.all(a, k)),
        ("any", Accepts::Bool, None, |x, a, k| x.any(a, k)),
    ];
    let mut rng = Lcg(13);
    let mut failures = Vec::new();
    for &(name, acc, out, f) in ops {
        for _ in 0..DRAWS {
            let (s, d) = (rng.shape(), rng.dtype());
            let x = rng.tensor(&s, d);
            let axes = rng.axes(s.len());
            let keep = rng.below(2) == 0;
            guarded(
                &mut failures,
                format!("{name} {s:?} {d} axes={axes:?} keep={keep}"),
                || {
                    let want = norm_axes(&axes, s.len()).map(|a| reduced(&s, &a, keep));
                    check(f(&x, &axes, keep), want, out.unwrap_or(d), acc.ok(d))
                },
            );
        }
    }
    // the `_all` forms: a scalar
    type All = fn(&Tensor) -> Result<Tensor>;
    let alls: &[(&str, Accepts, All)] = &[
        ("sum_all", Accepts::Num, Tensor::sum_all),
        ("mean_all", Accepts::Num, Tensor::mean_all),
        ("max_all", Accepts::Num, Tensor::max_all),
        ("min_all", Accepts::Num, Tensor::min_all),
    ];
    for &(name, acc, f) in alls {
        for _ in 0..DRAWS {
            let (s, d) = (rng.shape(), rng.dtype());
            let x = rng.tensor(&s, d);
            guarded(&mut failures, format!("{name} {s:?} {d}"), || {
                check(f(&x), Some(vec![]), d, acc.ok(d))
            });
        }
    }
    assert!(failures.is_empty(), "{}", failures[..failures.len().min(20)].join("\n"));
}

#[test]
fn scans_and_arg_reductions_never_panic() {
    let mut rng = Lcg(17);
    let mut failures = Vec::new();
    for name in ["cumsum", "cumprod", "argmax", "argmin"] {
        for _ in 0..DRAWS {
            let (s, d) = (rng.shape(), rng.dtype());
            let x = rng.tensor(&s, d);
            let axis = rng.axis(s.len());
            let (ex, rev) = (rng.below(2) == 0, rng.below(2) == 0);
            guarded(&mut failures, format!("{name} {s:?} {d} axis={axis}"), || {
                let a = norm_axes(&[axis], s.len());
                match name {
                    "cumsum" => check(x.cumsum(axis, ex, rev), a.map(|_| s.clone()), d, d != DType::Bool),
                    "cumprod" => check(x.cumprod(axis, ex, rev), a.map(|_| s.clone()), d, d != DType::Bool),
                    _ => {
                        let r = if name == "argmax" {
                            x.argmax(axis)
                        } else {
                            x.argmin(axis)
                        };
                        let nonempty = a.as_ref().is_some_and(|a| s[a[0]] > 0);
                        let want = a.map(|a| reduced(&s, &a, false));
                        let r = r.and_then(|y| {
                            // every index is within the axis
                            let n = s[norm_axes(&[axis], s.len()).unwrap()[0]] as i64;
                            assert!(y.to_vec::<i64>()?.iter().all(|&i| (0..n).contains(&i)));
                            Ok(y)
                        });
                        check(r, want, DType::I64, d != DType::Bool && nonempty)
                    }
                }
            });
        }
    }
    assert!(failures.is_empty(), "{}", failures[..failures.len().min(20)].join("\n"));
}
