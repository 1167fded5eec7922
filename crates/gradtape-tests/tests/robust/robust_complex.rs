//! Never-panic property test with complex numbers in the mix: random ranks
//! (0-4), dims (0-4), dtypes (every one, complex64/complex128 drawn most
//! often), axes (out of range and negative included) and indices (out of
//! range included) into every op; each call runs under `catch_unwind`.
//! The test asserts that no call panics, and that an `Ok` result has the
//! shape and dtype the op's documented rule gives. Every differentiable
//! result is also differentiated on a tape (no panic; each gradient has its
//! source's shape and dtype).

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::shapes::{broadcast, norm_axes, reduced};
use gradtape::{Complex, DType, GradientTape, Result, Tensor};

/// A small deterministic LCG (Knuth's MMIX constants).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
    fn unit(&mut self) -> f64 {
        self.next() as f64 / (1u64 << 31) as f64
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

const ALL: [DType; 7] = [
    DType::F32,
    DType::F64,
    DType::I32,
    DType::I64,
    DType::Bool,
    DType::C64,
    DType::C128,
];

fn dtype(r: &mut Lcg) -> DType {
    // complex half the time
    if r.coin() {
        if r.coin() {
            DType::C64
        } else {
            DType::C128
        }
    } else {
        ALL[r.below(ALL.len())]
    }
}

fn shape(r: &mut Lcg) -> Vec<usize> {
    let rank = r.below(5);
    (0..rank).map(|_| r.below(5)).collect()
}

/// Values in [-3, 3] (zeros fairly often, for abs/angle/log/div at 0).
fn value(r: &mut Lcg) -> f64 {
    if r.below(6) == 0 {
        0.0
    } else {
        ((r.unit() * 12.0 - 6.0).round() / 2.0).clamp(-3.0, 3.0)
    }
}

fn tensor(r: &mut Lcg, dt: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let re: Vec<f64> = (0..n).map(|_| value(r)).collect();
    let im: Vec<f64> = (0..n).map(|_| value(r)).collect();
    match dt {
        DType::C64 | DType::C128 => {
            let v: Vec<Complex<f64>> = re.iter().zip(&im).map(|(&a, &b)| Complex::new(a, b)).collect();
            let t = Tensor::from_vec(v, shape).unwrap();
            if dt == DType::C64 {
                t.cast(DType::C64).unwrap()
            } else {
                t
            }
        }
        _ => Tensor::from_vec(re, shape).unwrap().cast(dt).unwrap(),
    }
}

/// A shape that broadcasts with `s` most of the time (sometimes not).
fn partner_shape(r: &mut Lcg, s: &[usize]) -> Vec<usize> {
    match r.below(4) {
        0 => shape(r),
        1 => s.to_vec(),
        2 => s[r.below(s.len() + 1)..].to_vec(),
        _ => s.iter().map(|&d| if r.coin() { 1 } else { d }).collect(),
    }
}

fn axis(r: &mut Lcg, rank: usize) -> isize {
    r.range(-(rank as i64) - 2, rank as i64 + 1) as isize
}

fn axes(r: &mut Lcg, rank: usize) -> Vec<isize> {
    (0..r.below(rank + 2)).map(|_| axis(r, rank)).collect()
}

type OpFn = Box<dyn Fn(&[Tensor]) -> Result<Tensor>>;

/// One call: its inputs, the op (attributes captured), and the (shape,
/// dtype) its rule promises for an `Ok` result, if known.
struct Call {
    inputs: Vec<Tensor>,
    op: OpFn,
    want: Option<(Vec<usize>, DType)>,
}

type Draw = fn(&mut Lcg) -> Call;

fn unary(r: &mut Lcg, f: fn(&Tensor) -> Result<Tensor>, out_dtype: fn(DType) -> DType) -> Call {
    let s = shape(r);
    let x = {
        let d = dtype(r);
        tensor(r, d, &s)
    };
    let want = Some((s, out_dtype(x.dtype())));
    Call {
        op: Box::new(move |x: &[Tensor]| f(&x[0])),
        inputs: vec![x],
        want,
    }
}

fn binary(r: &mut Lcg, f: fn(&Tensor, &Tensor) -> Result<Tensor>, out_dtype: fn(DType) -> DType) -> Call {
    let sa = shape(r);
    let sb = partner_shape(r, &sa);
    let da = dtype(r);
    let db = if r.below(4) == 0 { dtype(r) } else { da };
    let (a, b) = (tensor(r, da, &sa), tensor(r, db, &sb));
    let want = broadcast(&sa, &sb).map(|s| (s, out_dtype(da)));
    Call {
        op: Box::new(move |x: &[Tensor]| f(&x[0], &x[1])),
        inputs: vec![a, b],
        want,
    }
}

fn same(d: DType) -> DType {
    d
}
fn real_part(d: DType) -> DType {
    d.real_dtype()
}
fn boolean(_: DType) -> DType {
    DType::Bool
}

fn draws() -> Vec<(&'static str, Draw)> {
    vec![
        ("neg", |r| unary(r, Tensor::neg, same)),
        ("abs", |r| unary(r, Tensor::abs, real_part)),
        ("sign", |r| unary(r, Tensor::sign, same)),
        ("square", |r| unary(r, Tensor::square, same)),
        ("sqrt", |r| unary(r, Tensor::sqrt, same)),
        ("exp", |r| unary(r, Tensor::exp, same)),
        ("log", |r| unary(r, Tensor::log, same)),
        ("sin", |r| unary(r, Tensor::sin, same)),
        ("cos", |r| unary(r, Tensor::cos, same)),
        ("tanh", |r| unary(r, Tensor::tanh, same)),
        ("sigmoid", |r| unary(r, Tensor::sigmoid, same)),
        ("relu", |r| unary(r, Tensor::relu, same)),
        ("conj", |r| unary(r, Tensor::conj, same)),
        ("real", |r| unary(r, Tensor::real, real_part)),
        ("imag", |r| unary(r, Tensor::imag, real_part)),
        ("angle", |r| unary(r, Tensor::angle, real_part)),
        ("identity", |r| unary(r, |x| Ok(x.identity()), same)),
        ("stop_gradient", |r| unary(r, |x| Ok(x.stop_gradient()), same)),
        ("contiguous", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let rev: Vec<usize> = (0..s.len()).rev().collect();
            Call {
                want: Some((s.iter().rev().copied().collect(), x.dtype())),
                op: Box::new(move |x: &[Tensor]| x[0].permute(&rev)?.contiguous()),
                inputs: vec![x],
            }
        }),
        ("pow_scalar", |r| unary(r, |x| x.pow_scalar(1.5), same)),
        ("mul_scalar", |r| unary(r, |x| x.mul_scalar(-2.5), same)),
        ("div_scalar", |r| unary(r, |x| x.div_scalar(0.0), same)),
        ("div_scalar 2", |r| unary(r, |x| x.div_scalar(2.0), same)),
        ("add_scalar", |r| unary(r, |x| x.add_scalar(1.5), same)),
        ("sub_scalar", |r| unary(r, |x| x.sub_scalar(1.5), same)),
        ("sum_all", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            Call {
                op: Box::new(|x: &[Tensor]| x[0].sum_all()),
                want: Some((vec![], x.dtype())),
                inputs: vec![x],
            }
        }),
        ("mean_all", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            Call {
                op: Box::new(|x: &[Tensor]| x[0].mean_all()),
                want: Some((vec![], x.dtype())),
                inputs: vec![x],
            }
        }),
        ("add", |r| binary(r, Tensor::add, same)),
        ("sub", |r| binary(r, Tensor::sub, same)),
        ("mul", |r| binary(r, Tensor::mul, same)),
        ("div", |r| binary(r, Tensor::div, same)),
        ("pow", |r| binary(r, Tensor::pow, same)),
        ("maximum", |r| binary(r, Tensor::maximum, same)),
        ("minimum", |r| binary(r, Tensor::minimum, same)),
        ("eq", |r| binary(r, Tensor::eq, boolean)),
        ("ne", |r| binary(r, Tensor::ne, boolean)),
        ("lt", |r| binary(r, Tensor::lt, boolean)),
        ("le", |r| binary(r, Tensor::le, boolean)),
        ("gt", |r| binary(r, Tensor::gt, boolean)),
        ("ge", |r| binary(r, Tensor::ge, boolean)),
        ("complex", |r| {
            binary(r, Tensor::complex, |d| d.complex_dtype().unwrap_or(DType::C128))
        }),
        ("where", |r| {
            let sa = shape(r);
            let sb = partner_shape(r, &sa);
            let sc = partner_shape(r, &sa);
            let d = dtype(r);
            let cd = if r.below(5) == 0 { dtype(r) } else { DType::Bool };
            let (c, a, b) = (tensor(r, cd, &sc), tensor(r, d, &sa), tensor(r, d, &sb));
            let want = broadcast(&sa, &sb).and_then(|s| broadcast(&s, &sc)).map(|s| (s, d));
            Call {
                op: Box::new(|x: &[Tensor]| Tensor::where_(&x[0], &x[1], &x[2])),
                inputs: vec![c, a, b],
                want,
            }
        }),
        ("sum", |r| reduction(r, |x, a, k| x.sum(a, k))),
        ("mean", |r| reduction(r, |x, a, k| x.mean(a, k))),
        ("max", |r| reduction(r, |x, a, k| x.max(a, k))),
        ("min", |r| reduction(r, |x, a, k| x.min(a, k))),
        ("sum_to_shape", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let to = partner_shape(r, &s);
            let want = broadcast(&s, &to).filter(|b| *b == s).map(|_| (to.clone(), x.dtype()));
            Call {
                op: Box::new(move |x: &[Tensor]| x[0].sum_to_shape(&to)),
                inputs: vec![x],
                want,
            }
        }),
        ("matmul", |r| {
            let (m, k, n) = (r.below(4), r.below(4), r.below(4));
            let k2 = if r.below(5) == 0 { r.below(4) } else { k };
            let (ta, tb) = (r.coin(), r.coin());
            let bsa: Vec<usize> = (0..r.below(3)).map(|_| r.below(3)).collect();
            let bsb = partner_shape(r, &bsa);
            let mut sa = bsa.clone();
            sa.extend(if ta { [k, m] } else { [m, k] });
            let mut sb = bsb.clone();
            sb.extend(if tb { [n, k2] } else { [k2, n] });
            if r.below(6) == 0 {
                sa.truncate(r.below(2));
            }
            let d = dtype(r);
            let db = if r.below(5) == 0 { dtype(r) } else { d };
            let (a, b) = (tensor(r, d, &sa), tensor(r, db, &sb));
            let want = broadcast(&bsa, &bsb).map(|mut s| {
                s.extend([m, n]);
                (s, d)
            });
            Call {
                op: Box::new(move |x: &[Tensor]| x[0].matmul_with(&x[1], ta, tb)),
                inputs: vec![a, b],
                want,
            }
        }),
        ("cast", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let to = ALL[r.below(ALL.len())];
            Call {
                op: Box::new(move |x: &[Tensor]| x[0].cast(to)),
                want: Some((s, to)),
                inputs: vec![x],
            }
        }),
        ("reshape", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let to = if r.coin() {
                s.iter().rev().copied().collect()
            } else {
                shape(r)
            };
            Call {
                want: Some((to.clone(), x.dtype())),
                op: Box::new(move |x: &[Tensor]| x[0].reshape(&to)),
                inputs: vec![x],
            }
        }),
        ("transpose", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let mut t = s.clone();
            let n = t.len();
            if n >= 2 {
                t.swap(n - 2, n - 1);
            }
            Call {
                op: Box::new(|x: &[Tensor]| x[0].transpose()),
                want: Some((t, x.dtype())),
                inputs: vec![x],
            }
        }),
        ("permute", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let mut p: Vec<usize> = (0..s.len()).collect();
            for i in (1..p.len()).rev() {
                p.swap(i, r.below(i + 1));
            }
            if r.below(4) == 0 && !p.is_empty() {
                p[0] = r.below(6);
            }
            let want = Some((p.iter().map(|&i| s.get(i).copied().unwrap_or(0)).collect(), x.dtype()));
            Call {
                op: Box::new(move |x: &[Tensor]| x[0].permute(&p)),
                want,
                inputs: vec![x],
            }
        }),
        ("broadcast_to", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let to = partner_shape(r, &s);
            Call {
                want: Some((to.clone(), x.dtype())),
                op: Box::new(move |x: &[Tensor]| x[0].broadcast_to(&to)),
                inputs: vec![x],
            }
        }),
        ("expand_dims", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let a = axis(r, s.len() + 1);
            let mut t = s.clone();
            let n = if a < 0 { a + s.len() as isize + 1 } else { a };
            if (0..=s.len() as isize).contains(&n) {
                t.insert(n as usize, 1);
            }
            Call {
                op: Box::new(move |x: &[Tensor]| x[0].expand_dims(a)),
                want: Some((t, x.dtype())),
                inputs: vec![x],
            }
        }),
        ("squeeze", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let t: Vec<usize> = s.iter().copied().filter(|&d| d != 1).collect();
            Call {
                op: Box::new(|x: &[Tensor]| x[0].squeeze(&[])),
                want: Some((t, x.dtype())),
                inputs: vec![x],
            }
        }),
        ("squeeze axes", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let ax = axes(r, s.len());
            Call {
                op: Box::new(move |x: &[Tensor]| x[0].squeeze(&ax)),
                want: None,
                inputs: vec![x],
            }
        }),
        ("slice", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let begin: Vec<usize> = s.iter().map(|&d| r.below(d + 2)).collect();
            let size: Vec<usize> = s.iter().map(|&d| r.below(d + 2)).collect();
            Call {
                want: Some((size.clone(), x.dtype())),
                op: Box::new(move |x: &[Tensor]| x[0].slice(&begin, &size)),
                inputs: vec![x],
            }
        }),
        ("narrow", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let a = axis(r, s.len());
            let (start, len) = (r.below(4), r.below(4));
            Call {
                op: Box::new(move |x: &[Tensor]| x[0].narrow(a, start, len)),
                want: None,
                inputs: vec![x],
            }
        }),
        ("pad", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let n = if r.below(6) == 0 { r.below(5) } else { s.len() };
            let pads: Vec<(usize, usize)> = (0..n).map(|_| (r.below(3), r.below(3))).collect();
            let t: Vec<usize> = s.iter().zip(&pads).map(|(d, p)| d + p.0 + p.1).collect();
            Call {
                op: Box::new(move |x: &[Tensor]| x[0].pad(&pads)),
                want: Some((t, x.dtype())),
                inputs: vec![x],
            }
        }),
        ("gather", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let a = axis(r, s.len());
            let is = shape(r);
            let n: usize = is.iter().product();
            let iv: Vec<i64> = (0..n).map(|_| r.range(-1, 4)).collect();
            let idx = Tensor::from_vec(iv, &is).unwrap();
            let idx = if r.below(6) == 0 {
                let d = dtype(r);
                idx.cast(d).unwrap_or(idx)
            } else {
                idx
            };
            let want = norm_axes(&[a], s.len()).map(|ax| {
                let mut t = s[..ax[0]].to_vec();
                t.extend_from_slice(&is);
                t.extend_from_slice(&s[ax[0] + 1..]);
                (t, x.dtype())
            });
            Call {
                op: Box::new(move |x: &[Tensor]| x[0].gather(&x[1], a)),
                want,
                inputs: vec![x, idx],
            }
        }),
        ("scatter_add", |r| {
            let s = shape(r);
            let x = {
                let d = dtype(r);
                tensor(r, d, &s)
            };
            let a = axis(r, s.len());
            let n = s
                .get(norm_axes(&[a], s.len()).map_or(0, |v| v[0]))
                .copied()
                .unwrap_or(0);
            let iv: Vec<i64> = (0..n).map(|_| r.range(-1, 4)).collect();
            let idx = Tensor::from_vec(iv, &[n]).unwrap();
            let dim = r.below(5);
            let want = norm_axes(&[a], s.len()).map(|ax| {
                let mut t = s.clone();
                t[ax[0]] = dim;
                (t, x.dtype())
            });
            Call {
                op: Box::new(move |x: &[Tensor]| x[0].scatter_add(&x[1], a, dim)),
                want,
                inputs: vec![x, idx],
            }
        }),
    ]
}

fn reduction(r: &mut Lcg, f: fn(&Tensor, &[isize], bool) -> Result<Tensor>) -> Call {
    let s = shape(r);
    let x = {
        let d = dtype(r);
        tensor(r, d, &s)
    };
    let ax = axes(r, s.len());
    let keep = r.coin();
    let want = norm_axes(&ax, s.len()).map(|a| (reduced(&s, &a, keep), x.dtype()));
    Call {
        op: Box::new(move |x: &[Tensor]| f(&x[0], &ax, keep)),
        inputs: vec![x],
        want,
    }
}

#[test]
fn every_op_with_complex_in_the_mix_never_panics() {
    let mut failures = Vec::new();
    let (mut oks, mut checked, mut grads) = (0usize, 0usize, 0usize);
    for (k, (name, draw)) in draws().into_iter().enumerate() {
        for i in 0..200u64 {
            let seed = 0x9e3779b97f4a7c15u64.wrapping_mul(k as u64 * 1000 + i + 1);
            let call = match catch_unwind(AssertUnwindSafe(|| draw(&mut Lcg(seed)))) {
                Ok(c) => c,
                Err(_) => {
                    failures.push(format!("{name} seed {seed}: drawing the inputs panicked"));
                    continue;
                }
            };
            let desc = call
                .inputs
                .iter()
                .map(|t| format!("{}{:?}", t.dtype(), t.shape()))
                .collect::<Vec<_>>()
                .join(", ");
            let out = match catch_unwind(AssertUnwindSafe(|| (call.op)(&call.inputs))) {
                Ok(out) => out,
                Err(_) => {
                    failures.push(format!("{name}({desc}): panicked"));
                    continue;
                }
            };
            let Ok(y) = out else { continue };
            oks += 1;
            if let Some((s, d)) = &call.want {
                checked += 1;
                if y.shape() != s.as_slice() || y.dtype() != *d {
                    failures.push(format!(
                        "{name}({desc}): got {}{:?}, rule says {d}{s:?}",
                        y.dtype(),
                        y.shape()
                    ));
                }
            }
            // reading and printing never panic either
            if catch_unwind(AssertUnwindSafe(|| (y.to_string(), y.to_vec_f64(), y.item().ok()))).is_err() {
                failures.push(format!("{name}({desc}): display/read panicked"));
            }
            match gradient_of(&call) {
                Ok(true) => grads += 1,
                Ok(false) => {}
                Err(m) => failures.push(format!("{name}({desc}) gradient: {m}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        oks > 3000 && checked > 2500 && grads > 1500,
        "too few successful calls: {oks} ok, {checked} checked, {grads} differentiated"
    );
}

/// Re-runs the op under a tape watching its inputs and asks for the
/// gradient of its output: no panic, and each gradient has its source's
/// shape and dtype. `Ok(true)` when gradients were computed.
fn gradient_of(call: &Call) -> std::result::Result<bool, String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| -> std::result::Result<bool, String> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            for x in &call.inputs {
                tape.watch(x);
            }
            (call.op)(&call.inputs)
        });
        let Ok(y) = y else { return Ok(false) };
        if !y.dtype().is_differentiable() {
            return Ok(false);
        }
        let Ok(gs) = tape.gradient(&y, &call.inputs) else {
            return Ok(false);
        };
        for (g, x) in gs.iter().zip(&call.inputs) {
            if let Some(g) = g
                && (g.shape() != x.shape() || g.dtype() != x.dtype())
            {
                return Err(format!(
                    "gradient {}{:?} for source {}{:?}",
                    g.dtype(),
                    g.shape(),
                    x.dtype(),
                    x.shape()
                ));
            }
        }
        Ok(true)
    }));
    outcome.unwrap_or_else(|_| Err("panicked".into()))
}
