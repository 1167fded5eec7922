//! The half-precision elementwise kernels that compute in `f32` block by
//! block (one pass, no `f32` tensors) give the bits of the formula they
//! replaced: the `f32` function of the `f32` value, rounded once to the
//! half type (the one-input functions, as TensorFlow's half kernels), and
//! the half types' own arithmetic (`f16 + f16`, ...) for the two-input
//! ones; casts to and from `f32` as the `half` crate converts one value.
//! Every `f16` and `bf16` bit pattern (NaNs, infinities, subnormals) goes
//! through the one-input ops and the casts, in a tensor large enough to be
//! cut into parallel chunks and blocks, and in odd lengths (a partial
//! block, a scalar); random pairs through the broadcasting binary ops; and
//! every pattern through negation, `abs`, `square` and the ops with a
//! constant, against the half arithmetic they had run.

use gradtape::{bf16, f16, DType, Result, Tensor};

/// A half type under test: its bits and its scalar conversions.
trait H: gradtape::Element + Copy + std::ops::Add<Output = Self> + std::ops::Sub<Output = Self> {
    /// The quiet bit of a NaN.
    const QUIET: u16;
    fn bits(self) -> u16;
    fn of_bits(b: u16) -> Self;
    fn f32(self) -> f32;
    fn round(v: f32) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn is_nan(self) -> bool {
        self.f32().is_nan()
    }
}

macro_rules! half_type {
    ($t:ty, $q:expr) => {
        impl H for $t {
            const QUIET: u16 = $q;
            fn bits(self) -> u16 {
                self.to_bits()
            }
            fn of_bits(b: u16) -> Self {
                <$t>::from_bits(b)
            }
            fn f32(self) -> f32 {
                self.to_f32()
            }
            fn round(v: f32) -> Self {
                <$t>::from_f32(v)
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn div(self, o: Self) -> Self {
                self / o
            }
        }
    };
}
half_type!(f16, 0x0200);
half_type!(bf16, 0x0040);

/// The bits an `f32` computation gives for `v`: a signalling NaN comes out
/// of any `f32` arithmetic quiet (the one change from a kernel that
/// handed a half NaN through untouched, such as `maximum`'s).
fn quieted<T: H>(v: T) -> u16 {
    if v.is_nan() {
        v.bits() | T::QUIET
    } else {
        v.bits()
    }
}

/// Asserts `got` has `want`'s bits, naming the op and the first element
/// that differs (with its input bits).
fn same_bits<T: H>(what: &str, inputs: &[u16], got: &[T], want: &[u16]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad = (0..got.len()).filter(|&i| got[i].bits() != want[i]).collect::<Vec<_>>();
    if let Some(&i) = bad.first() {
        panic!(
            "{what} {:?}: {} elements differ; first at {i} (input {:#06x}): got {:#06x}, want {:#06x}",
            T::DTYPE,
            bad.len(),
            inputs.get(i).copied().unwrap_or(0),
            got[i].bits(),
            want[i]
        );
    }
}

type Op = fn(&Tensor) -> Result<Tensor>;

/// One-input ops computed through `f32`.
const UNARY: [(&str, Op); 10] = [
    ("relu", |x| x.relu()),
    ("exp", |x| x.exp()),
    ("tanh", |x| x.tanh()),
    ("gelu", |x| x.gelu(false)),
    ("gelu_tanh", |x| x.gelu(true)),
    ("sigmoid", |x| x.sigmoid()),
    ("sqrt", |x| x.sqrt()),
    ("log", |x| x.log()),
    ("erf", |x| x.erf()),
    ("softplus", |x| x.softplus()),
];

/// `op` of every bit pattern of `T`, as a tensor of `shape` (or the first
/// `n` patterns, a vector), against `op` of the `f32` values rounded once.
fn unary_all_bits<T: H>(n: usize, shape: &[usize]) -> Result<()> {
    let bits: Vec<u16> = (0..n).map(|i| (i as u32 * 0x9E37 % 65536) as u16).collect();
    let halves: Vec<T> = bits.iter().map(|&b| T::of_bits(b)).collect();
    let x = Tensor::from_vec(halves.clone(), shape)?;
    let x32 = Tensor::from_vec(halves.iter().map(|v| v.f32()).collect(), shape)?;
    for (name, op) in UNARY {
        let got = op(&x)?.to_vec::<T>()?;
        let want: Vec<u16> = op(&x32)?
            .to_vec::<f32>()?
            .into_iter()
            .map(|v| T::round(v).bits())
            .collect();
        same_bits(&format!("{name} of {shape:?}"), &bits, &got, &want);
    }
    // the casts: exact to f32 (a NaN quiet), rounded once from f32
    let to32 = x.cast(DType::F32)?.to_vec::<f32>()?;
    let want32: Vec<f32> = halves.iter().map(|v| v.f32()).collect();
    let differ =
        (0..n).find(|&i| to32[i].to_bits() != want32[i].to_bits() && !(to32[i].is_nan() && want32[i].is_nan()));
    assert_eq!(differ, None, "cast {:?} -> f32 {shape:?}", T::DTYPE);
    Ok(())
}

#[test]
fn every_half_bit_pattern_through_unary_ops_and_casts() -> Result<()> {
    // all 65536 patterns (a permutation: 0x9E37 is odd), parallel chunks
    unary_all_bits::<f16>(65536, &[256, 256])?;
    unary_all_bits::<bf16>(65536, &[256, 256])?;
    // a partial block, a short vector, a scalar-sized one
    for n in [1031, 7, 2] {
        unary_all_bits::<f16>(n, &[n])?;
        unary_all_bits::<bf16>(n, &[n])?;
    }
    Ok(())
}

/// `f32` bits that round to the half types in every way: random patterns
/// (NaNs, infinities, subnormals among them) and the ties either side.
fn f32_patterns(n: usize) -> Vec<f32> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let b = (s >> 32) as u32;
        out.push(f32::from_bits(b));
        // bf16 ties (low half 0x8000) and f16 ties (13 low bits 0x1000)
        out.push(f32::from_bits((b & 0xFFFF_0000) | 0x8000));
        out.push(f32::from_bits((b & 0xFFFF_E000) | 0x1000));
    }
    out.truncate(n);
    out
}

fn from_f32_rounds_once<T: H>() -> Result<()> {
    for n in [70_000, 1031, 3] {
        let v = f32_patterns(n);
        let got = Tensor::from_vec(v.clone(), &[n])?.cast(T::DTYPE)?.to_vec::<T>()?;
        let want: Vec<u16> = v.iter().map(|&x| T::round(x).bits()).collect();
        let inputs: Vec<u16> = v.iter().map(|x| (x.to_bits() >> 16) as u16).collect();
        same_bits(&format!("cast f32 -> half of {n}"), &inputs, &got, &want);
    }
    Ok(())
}

#[test]
fn f32_to_half_casts_round_as_the_half_crate() -> Result<()> {
    from_f32_rounds_once::<f16>()?;
    from_f32_rounds_once::<bf16>()
}

/// A two-input op and its former kernel: the half type's own arithmetic.
type Pair<T> = (&'static str, fn(&Tensor, &Tensor) -> Result<Tensor>, fn(T, T) -> T);

fn binary_ops<T: H>() -> [Pair<T>; 6] {
    [
        ("add", |a, b| a.add(b), |x, y| x + y),
        ("sub", |a, b| a.sub(b), |x, y| x - y),
        ("mul", |a, b| a.mul(b), |x, y| x.mul(y)),
        ("div", |a, b| a.div(b), |x, y| x.div(y)),
        (
            "maximum",
            |a, b| a.maximum(b),
            |x, y| if x.f32() >= y.f32() || x.is_nan() { x } else { y },
        ),
        (
            "minimum",
            |a, b| a.minimum(b),
            |x, y| if x.f32() <= y.f32() || x.is_nan() { x } else { y },
        ),
    ]
}

/// Random half pairs, `b` broadcast against `a` ([rows, cols]) as
/// `b_shape` says, through each binary op, against the former formula.
fn binary_random<T: H>(rows: usize, cols: usize, b_shape: &[usize], seed: u64) -> Result<()> {
    let mut s = seed;
    let mut next = || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 48) as u16
    };
    let a_bits: Vec<u16> = (0..rows * cols).map(|_| next()).collect();
    let nb: usize = b_shape.iter().product();
    let b_bits: Vec<u16> = (0..nb).map(|_| next()).collect();
    let (a, b): (Vec<T>, Vec<T>) = (
        a_bits.iter().map(|&v| T::of_bits(v)).collect(),
        b_bits.iter().map(|&v| T::of_bits(v)).collect(),
    );
    let (ta, tb) = (
        Tensor::from_vec(a.clone(), &[rows, cols])?,
        Tensor::from_vec(b.clone(), b_shape)?,
    );
    // b's element for a's element (r, c)
    let b_at = |r: usize, c: usize| match b_shape {
        [n] if *n == cols => b[c],
        [n, 1] if *n == rows => b[r],
        _ => b[r * cols + c],
    };
    for (name, op, old) in binary_ops::<T>() {
        for (x, y, swapped) in [(&ta, &tb, false), (&tb, &ta, true)] {
            let got = op(x, y)?.to_vec::<T>()?;
            let want: Vec<u16> = (0..rows * cols)
                .map(|i| {
                    let (u, v) = (a[i], b_at(i / cols, i % cols));
                    quieted(if swapped { old(v, u) } else { old(u, v) })
                })
                .collect();
            same_bits(
                &format!("{name} [{rows}, {cols}] with {b_shape:?} (swapped: {swapped})"),
                &a_bits,
                &got,
                &want,
            );
        }
    }
    Ok(())
}

#[test]
fn random_half_pairs_through_broadcasting_binary_ops() -> Result<()> {
    for (rows, cols, seed) in [(300, 257, 1), (128, 256, 2), (3, 5, 3)] {
        for b_shape in [vec![cols], vec![rows, 1], vec![rows, cols]] {
            binary_random::<f16>(rows, cols, &b_shape, seed)?;
            binary_random::<bf16>(rows, cols, &b_shape, seed + 10)?;
        }
    }
    Ok(())
}

/// A one-input op with a constant and its former kernel: the half type's
/// own arithmetic with the constant rounded to the half type (through
/// `f32`, as `Element::from_f64` rounds it).
type WithConst<T> = (&'static str, fn(&Tensor, f64) -> Result<Tensor>, fn(T, T) -> T);

fn scalar_ops<T: H>() -> [WithConst<T>; 6] {
    [
        ("neg", |x, _| x.neg(), |x, _| T::round(-x.f32())),
        ("abs", |x, _| x.abs(), |x, _| T::round(x.f32().abs())),
        ("square", |x, _| x.square(), |x, _| x.mul(x)),
        ("mul_scalar", |x, c| x.mul_scalar(c), |x, c| x.mul(c)),
        ("div_scalar", |x, c| x.div_scalar(c), |x, c| x.div(c)),
        ("add_scalar", |x, c| x.add_scalar(c), |x, c| x + c),
    ]
}

/// Every bit pattern of `T` through the ops with a constant (which went
/// from the half crate's arithmetic per element to `f32` blocks), against
/// that arithmetic: constants exact in the half types, inexact ones
/// (rounded first), one that is a subnormal `f16` and one past `f16`'s
/// range.
fn scalar_all_bits<T: H>(n: usize, shape: &[usize]) -> Result<()> {
    let bits: Vec<u16> = (0..n).map(|i| (i as u32 * 0x9E37 % 65536) as u16).collect();
    let halves: Vec<T> = bits.iter().map(|&b| T::of_bits(b)).collect();
    let x = Tensor::from_vec(halves.clone(), shape)?;
    for c in [2.0, -0.5, 0.1, 1.0 / 3.0, 0.1767766952966369, 3e-6, 7e4] {
        let ch = <T as gradtape::Element>::from_f64(c);
        for (name, op, old) in scalar_ops::<T>() {
            let got = op(&x, c)?.to_vec::<T>()?;
            let want: Vec<u16> = halves.iter().map(|&v| quieted(old(v, ch))).collect();
            same_bits(&format!("{name}({c}) of {shape:?}"), &bits, &got, &want);
        }
    }
    Ok(())
}

#[test]
fn every_half_bit_pattern_through_ops_with_a_constant() -> Result<()> {
    scalar_all_bits::<f16>(65536, &[256, 256])?;
    scalar_all_bits::<bf16>(65536, &[256, 256])?;
    for n in [1031, 2] {
        scalar_all_bits::<f16>(n, &[n])?;
        scalar_all_bits::<bf16>(n, &[n])?;
    }
    Ok(())
}

/// Softmax and log-softmax of a half tensor are computed in `f32` and
/// rounded once (they had run in half arithmetic, their row sums rounded
/// as they grew): the bits of the `f32` op of the `f32` values rounded,
/// each within half an ulp (and a little) of the `f64` value; the same
/// bits and gradients from a traced function as eagerly (the conversions
/// are inside the op: a trace records the op alone).
fn half_softmax<T: H>() -> Result<()> {
    let n = 8 * 37;
    let x64: Vec<f64> = (0..n).map(|i| 3.0 * (0.37 * i as f64).sin()).collect();
    let x = Tensor::from_vec(x64, &[8, 37])?.cast(T::DTYPE)?;
    let x32 = x.cast(DType::F32)?;
    let ulp = if T::DTYPE == DType::F16 {
        2f64.powi(-11)
    } else {
        2f64.powi(-8)
    };
    type Soft = fn(&Tensor) -> Result<Tensor>;
    let ops: [(&str, Soft); 2] = [("softmax", |x| x.softmax(-1)), ("log_softmax", |x| x.log_softmax(-1))];
    for (name, op) in ops {
        let got = op(&x)?;
        assert_eq!(got.dtype(), T::DTYPE);
        let want = op(&x32)?.cast(T::DTYPE)?;
        let bits = |t: &Tensor| t.to_vec::<T>().unwrap().iter().map(|v| v.bits()).collect::<Vec<_>>();
        same_bits(&format!("{name} [8, 37]"), &[], &got.to_vec::<T>()?, &bits(&want));
        let exact = op(&x.cast(DType::F64)?)?.to_vec_f64();
        for (i, (a, w)) in got.to_vec_f64().iter().zip(&exact).enumerate() {
            assert!(
                (a - w).abs() <= 1.01 * ulp * w.abs(),
                "{name} {:?} element {i}: {a} against {w}",
                T::DTYPE
            );
        }
        let grad = move |x: &Tensor| -> Result<Vec<Tensor>> {
            let tape = gradtape::GradientTape::new();
            let y = tape.record(|| {
                tape.watch(x);
                op(x)?.square()?.sum_all()
            })?;
            Ok(vec![y.clone(), tape.gradient(&y, x)?.expect("connected")])
        };
        let f = gradtape::function(move |x: &Tensor| grad(x));
        let (traced, eager) = (f.call(&x)?, grad(&x)?);
        for (t, e) in traced.iter().zip(&eager) {
            assert_eq!(t.dtype(), T::DTYPE);
            same_bits(&format!("traced {name}"), &[], &t.to_vec::<T>()?, &bits(e));
        }
    }
    Ok(())
}

#[test]
fn half_softmax_computes_in_f32_and_rounds_once() -> Result<()> {
    half_softmax::<f16>()?;
    half_softmax::<bf16>()
}

/// `bias_add` of half tensors (which had run the half addition per
/// element, 20x slower than now) gives the half type's own sums: random
/// bit patterns, rows of a length that leaves a partial block.
fn half_bias_add<T: H>(rows: usize, cols: usize) -> Result<()> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 48) as u16
    };
    let x: Vec<T> = (0..rows * cols).map(|_| T::of_bits(next())).collect();
    let b: Vec<T> = (0..cols).map(|_| T::of_bits(next())).collect();
    let got = Tensor::from_vec(x.clone(), &[rows, cols])?
        .bias_add(&Tensor::from_vec(b.clone(), &[cols])?)?
        .to_vec::<T>()?;
    let want: Vec<u16> = (0..rows * cols).map(|i| quieted(x[i] + b[i % cols])).collect();
    let inputs: Vec<u16> = x.iter().map(|v| v.bits()).collect();
    same_bits(&format!("bias_add [{rows}, {cols}]"), &inputs, &got, &want);
    Ok(())
}

#[test]
fn half_bias_add_adds_in_the_half_type() -> Result<()> {
    for (rows, cols) in [(300, 517), (3, 5)] {
        half_bias_add::<f16>(rows, cols)?;
        half_bias_add::<bf16>(rows, cols)?;
    }
    Ok(())
}
