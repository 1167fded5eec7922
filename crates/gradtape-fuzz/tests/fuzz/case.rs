//! What one fuzz case is, how proptest draws it, and how its operands are
//! made into tensors (without ever allocating a huge buffer).

use gradtape::{Complex, DType, Result, Tensor};
use proptest::prelude::*;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use crate::ops::OPS;

/// Dimensions that overflow an element count, or make a shape far too large
/// for memory, alone or in pairs (2^32 x 2^32 wraps to 0 in 64 bits).
pub const HUGE: [usize; 11] = [
    1 << 31,
    1 << 32,
    (1 << 32) + 1,
    1 << 40,
    1 << 61,
    1 << 62,
    (1 << 62) + 1,
    1 << 63,
    i64::MAX as usize,
    usize::MAX - 1,
    usize::MAX,
];

/// Integers for axes, indices and strides: mostly small (in and out of
/// range, negative), sometimes extreme.
const EXTREME_INTS: [i64; 9] = [
    i64::MIN,
    i64::MAX,
    i32::MIN as i64,
    i32::MAX as i64,
    1 << 32,
    -(1 << 32),
    1 << 62,
    -(1 << 62),
    1 << 40,
];

/// Floats for values and scalar arguments.
const SPECIAL_F64: [f64; 14] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    2.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    1e30,
    -1e30,
    1e-310,
    f64::MAX,
    f64::MIN_POSITIVE,
];

pub const DTYPES: [DType; 9] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
    DType::Bool,
    DType::C64,
    DType::C128,
];

/// The most elements a real (non-view) operand may have.
pub const MAX_REAL: usize = 64;

/// One operand: its dtype and shape (or "those of operand `a`"), the seed of
/// its values, and whether it is made as a non-contiguous view.
#[derive(Debug, Clone)]
pub struct TSpec {
    pub dtype: Option<DType>,
    pub shape: Option<Vec<usize>>,
    pub seed: u64,
    pub transposed: bool,
}

/// One fuzz case: an op of [`OPS`], how it is run (`mode`, see
/// `run_case`), three operands and the op's other arguments.
#[derive(Debug, Clone)]
pub struct Case {
    pub op: usize,
    pub mode: u8,
    pub a: TSpec,
    pub b: TSpec,
    pub c: TSpec,
    /// A shape argument (reshape target, zeros' shape, ...).
    pub shape: Vec<usize>,
    /// Size arguments (pads, multiples, depth, counts, ...).
    pub sizes: Vec<usize>,
    /// Axes, indices, strides.
    pub ints: Vec<i64>,
    pub floats: Vec<f64>,
    pub dtype: DType,
    pub flags: [bool; 3],
}

fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![12 => 0usize..=4, 1 => proptest::sample::select(&HUGE[..])]
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(dim(), 0..=4)
}

fn int() -> impl Strategy<Value = i64> {
    prop_oneof![12 => -5i64..=5, 1 => proptest::sample::select(&EXTREME_INTS[..])]
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![2 => proptest::sample::select(&SPECIAL_F64[..]), 3 => -4.0f64..4.0]
}

fn dtype() -> impl Strategy<Value = DType> {
    prop_oneof![3 => Just(DType::F32), 3 => Just(DType::F64), 2 => proptest::sample::select(&DTYPES[..])]
}

fn tspec(own_shape: bool) -> impl Strategy<Value = TSpec> {
    let sh = if own_shape {
        shape().prop_map(Some).boxed()
    } else {
        prop_oneof![shape().prop_map(Some), Just(None)].boxed()
    };
    (
        prop_oneof![dtype().prop_map(Some), Just(None)],
        sh,
        any::<u64>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(dtype, shape, seed, transposed)| TSpec {
            dtype,
            shape,
            seed,
            transposed,
        })
}

/// The ops a campaign draws from: all of [`OPS`], or those whose names
/// contain one of the comma-separated words of `GRADTAPE_FUZZ_OPS` (e.g.
/// `attention,transformer`, to aim a campaign at one family).
fn drawn_ops() -> Vec<usize> {
    let words: Vec<String> = std::env::var("GRADTAPE_FUZZ_OPS")
        .map(|v| v.split(',').filter(|w| !w.is_empty()).map(str::to_string).collect())
        .unwrap_or_default();
    let picked: Vec<usize> = (0..OPS.len())
        .filter(|&i| words.is_empty() || words.iter().any(|w| OPS[i].0.contains(w.as_str())))
        .collect();
    assert!(!picked.is_empty(), "GRADTAPE_FUZZ_OPS={words:?} names no op");
    picked
}

pub fn case() -> impl Strategy<Value = Case> {
    (
        (proptest::sample::select(drawn_ops()), 0u8..6),
        (tspec(true), tspec(false), tspec(false)),
        (shape(), proptest::collection::vec(dim(), 0..=6)),
        (
            proptest::collection::vec(int(), 0..=6),
            proptest::collection::vec(float(), 3),
        ),
        (dtype(), any::<[bool; 3]>()),
    )
        .prop_map(
            |((op, mode), (a, b, c), (shape, sizes), (ints, floats), (dtype, flags))| Case {
                op,
                mode,
                a,
                b,
                c,
                shape,
                sizes,
                ints,
                floats,
                dtype,
                flags,
            },
        )
}

/// The value tree of case `index` of the campaign seeded with `seed`: the
/// same on every run, so that a child process and its parent agree.
pub fn case_tree(seed: u64, index: u64) -> impl ValueTree<Value = Case> {
    let mut bytes = [0u8; 32];
    let mut s = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for chunk in bytes.chunks_mut(8) {
        s = splitmix(s);
        chunk.copy_from_slice(&s.to_le_bytes());
    }
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    case().new_tree(&mut runner).expect("draw a case")
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `n` values for a tensor: small numbers, NaN, infinities, extremes.
fn values(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = splitmix(s);
            match s % 8 {
                0 => SPECIAL_F64[(s >> 8) as usize % SPECIAL_F64.len()],
                1 => EXTREME_INTS[(s >> 8) as usize % EXTREME_INTS.len()] as f64,
                _ => ((s >> 8) % 9) as f64 - 3.0,
            }
        })
        .collect()
}

fn real(dtype: DType, v: Vec<f64>, shape: &[usize]) -> Result<Tensor> {
    match dtype {
        DType::F32 => Tensor::from_vec(v.iter().map(|&x| x as f32).collect(), shape),
        DType::F64 => Tensor::from_vec(v, shape),
        DType::F16 => Tensor::from_vec(v.iter().map(|&x| gradtape::f16::from_f64(x)).collect(), shape),
        DType::BF16 => Tensor::from_vec(v.iter().map(|&x| gradtape::bf16::from_f64(x)).collect(), shape),
        DType::I32 => Tensor::from_vec(v.iter().map(|&x| x as i32).collect(), shape),
        DType::I64 => Tensor::from_vec(v.iter().map(|&x| x as i64).collect(), shape),
        DType::Bool => Tensor::from_vec(v.iter().map(|&x| x > 0.0).collect(), shape),
        DType::C64 => Tensor::from_vec(
            v.iter()
                .map(|&x| Complex::new(x as f32, (x * 0.5 - 1.0) as f32))
                .collect(),
            shape,
        ),
        DType::C128 => Tensor::from_vec(v.iter().map(|&x| Complex::new(x, 1.0 - x)).collect(), shape),
    }
}

/// The tensor an operand stands for: a real one when it has at most
/// [`MAX_REAL`] elements (made from a transposed buffer when `transposed`),
/// else a broadcast view of one value (no memory of its own), or the error
/// of making that view.
pub fn materialize(spec: &TSpec, like: Option<&Tensor>) -> Result<Tensor> {
    materialize_up_to(spec, like, MAX_REAL)
}

/// [`materialize`] with another cap on real tensors' element counts.
pub fn materialize_up_to(spec: &TSpec, like: Option<&Tensor>, max_real: usize) -> Result<Tensor> {
    let dtype = spec.dtype.or(like.map(|t| t.dtype())).unwrap_or(DType::F32);
    let shape: Vec<usize> = match (&spec.shape, like) {
        (Some(s), _) => s.clone(),
        (None, Some(t)) => t.shape().to_vec(),
        (None, None) => vec![],
    };
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    match n {
        Some(n) if n <= max_real => {
            let r = shape.len();
            if spec.transposed && r >= 2 {
                let mut t_shape = shape.clone();
                t_shape.swap(r - 2, r - 1);
                let mut perm: Vec<usize> = (0..r).collect();
                perm.swap(r - 2, r - 1);
                real(dtype, values(spec.seed, n), &t_shape)?.permute(&perm)
            } else {
                real(dtype, values(spec.seed, n), &shape)
            }
        }
        _ => real(dtype, values(spec.seed, 1), &[])?.broadcast_to(&shape),
    }
}
