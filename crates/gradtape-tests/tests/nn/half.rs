//! f16 and bf16 (issue 15.6): casts, display, elementwise ops, reductions,
//! matmul, conv2d, gradients, errors and dynamic loss scaling.
//!
//! Reference values are TensorFlow 2.21's (the peers' venv,
//! `~/.cache/gradtape-peers/bin/python`), given as bit patterns
//! (`tf.bitcast(t, tf.uint16)`); the inputs were made with NumPy
//! (`np.random.default_rng(0)`, `astype(np.float16)`) and are given as bits
//! too. Where TensorFlow's CPU kernels do not accumulate half sums in `f32`
//! (its `reduce_sum`/`reduce_mean`), the reference is JAX (0.4, same venv),
//! whose reductions of `float16` accumulate in `f32` as the issue asks;
//! each such test says what TensorFlow gives instead.

use crate::half_util::{bf16s, bits, check_half_gradient, f16s, lin, ulps};
use gradtape::optim::{LossScaleOptimizer, Optimizer, Sgd};
use gradtape::{bf16, f16, DType, GradientTape, Padding, Result, Tensor, Variable};

// ---------------------------------------------------------------- casts

/// `[0, -0, 1, 0.1, 1 + 2^-11 (a tie), 1 + 3·2^-11 (a tie), 65504, 65520,
/// 70000, 1e-8, 6e-8, 3e-8, 2^-25 (a tie at the smallest subnormal), 5.96e-8,
/// -1.5, π, 1e-5, 1/3, inf, 1 + 2^-8, 1 + 3·2^-8, 3e38]` as `f32`.
fn cast_inputs() -> Tensor {
    Tensor::vector(&[
        0.0f32,
        -0.0,
        1.0,
        0.1,
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        65504.0,
        65520.0,
        70000.0,
        1e-8,
        6e-8,
        3e-8,
        2f32.powi(-25),
        5.96e-8,
        -1.5,
        std::f32::consts::PI,
        1e-5,
        1.0 / 3.0,
        f32::INFINITY,
        1.0 + 2f32.powi(-8),
        1.0 + 3.0 * 2f32.powi(-8),
        3e38,
    ])
}

#[test]
fn f32_to_f16_and_bf16_round_to_nearest_even_as_tensorflow() {
    // tf.bitcast(tf.cast(tf.constant(xs, tf.float32), tf.float16), tf.uint16)
    let tf_f16: [u16; 22] = [
        0, 32768, 15360, 11878, 15360, 15362, 31743, 31744, 31744, 0, 1, 1, 0, 1, 48640, 16968, 168, 13653, 31744,
        15364, 15372, 31744,
    ];
    // ... tf.bfloat16
    let tf_bf16: [u16; 22] = [
        0, 32768, 16256, 15821, 16256, 16256, 18304, 18304, 18313, 12844, 13185, 13057, 13056, 13184, 49088, 16457,
        14120, 16043, 32640, 16256, 16258, 32610,
    ];
    let x = cast_inputs();
    let h = x.cast(DType::F16).unwrap();
    assert_eq!(h.dtype(), DType::F16);
    assert_eq!(bits(&h), tf_f16);
    assert_eq!(bits(&x.cast(DType::BF16).unwrap()), tf_bf16);
    // NaN stays NaN
    let nan = Tensor::scalar(f32::NAN);
    assert!(nan.cast(DType::F16).unwrap().to_scalar::<f16>().unwrap().is_nan());
    assert!(nan.cast(DType::BF16).unwrap().to_scalar::<bf16>().unwrap().is_nan());
}

#[test]
fn f64_and_integers_to_half_go_through_f32_as_tensorflow() {
    // 1 + 2^-11 + 2^-40 rounds to f32's 1 + 2^-11, a tie, to even: 1.0 in
    // f16; a direct rounding would give 1 + 2^-10. TF 2.21:
    // tf.cast(tf.constant([1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40], tf.float64), tf.float16)
    let x = Tensor::vector(&[
        1.0 + 2f64.powi(-11) + 2f64.powi(-40),
        1.0 + 2f64.powi(-8) + 2f64.powi(-40),
    ]);
    assert_eq!(bits(&x.cast(DType::F16).unwrap()), [15360, 15364]);
    assert_eq!(bits(&x.cast(DType::BF16).unwrap()), [16256, 16256]);
    // tf.cast(tf.constant([2049, 2051, 65519, 65520, -7], tf.int64), tf.float16)
    let i = Tensor::vector(&[2049i64, 2051, 65519, 65520, -7]);
    assert_eq!(bits(&i.cast(DType::F16).unwrap()), [26624, 26626, 31743, 31744, 50944]);
}

#[test]
fn half_to_other_dtypes_as_tensorflow() {
    let h = Tensor::vector(&[2.7f32, -2.7, 0.5, 1000.0, -0.0])
        .cast(DType::F16)
        .unwrap();
    // tf.cast(tf.constant([2.7, -2.7, 0.5, 1000.0, -0.0], tf.float16), tf.int32 / tf.float64)
    assert_eq!(
        h.cast(DType::I32).unwrap().to_vec::<i32>().unwrap(),
        [2, -2, 0, 1000, 0]
    );
    let d = h.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
    assert_eq!(d, [2.69921875, -2.69921875, 0.5, 1000.0, -0.0]);
    assert!(d[4].is_sign_negative());
    // tf.cast(tf.constant([0.1, 1000.1, 3e-5], tf.float16), tf.bfloat16)
    let h = Tensor::vector(&[0.1f32, 1000.1, 3.0e-5]).cast(DType::F16).unwrap();
    assert_eq!(bits(&h.cast(DType::BF16).unwrap()), [15821, 17530, 14332]);
    // tf.cast(tf.constant([0.1, 1e5, 3e-5], tf.bfloat16), tf.float16): 1e5 overflows
    let b = Tensor::vector(&[0.1f32, 1e5, 3.0e-5]).cast(DType::BF16).unwrap();
    assert_eq!(bits(&b.cast(DType::F16).unwrap()), [11880, 31744, 504]);
}

#[test]
fn every_f16_and_bf16_value_survives_a_round_trip_through_wider_floats() {
    // f16 and bf16 values are exactly representable in f32 and f64, so
    // half -> f32/f64 -> half must give back every bit pattern (NaNs stay NaN)
    for (dtype, make) in [
        (DType::F16, f16s as fn(&[u16], &[usize]) -> Tensor),
        (DType::BF16, bf16s),
    ] {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let t = make(&all, &[all.len()]);
        for wide in [DType::F32, DType::F64] {
            let back = t.cast(wide).unwrap().cast(dtype).unwrap();
            let wide_vals = t.cast(wide).unwrap().to_vec_f64();
            for (k, (&b, &orig)) in bits(&back).iter().zip(&all).enumerate() {
                if wide_vals[k].is_nan() {
                    assert!(
                        b & 0x7fff > if dtype == DType::F16 { 0x7c00 } else { 0x7f80 },
                        "NaN lost"
                    );
                } else {
                    assert_eq!(b, orig, "{dtype} bits {orig:#06x} through {wide}");
                }
            }
        }
    }
}

// -------------------------------------------------------------- display

#[test]
#[allow(clippy::approx_constant)] // 3.14159: the value given to NumPy
fn display_writes_the_shortest_digits_that_read_back() {
    // NumPy's str(np.float16(v)) for [0.1, 1.5, 65504, 0.3333, -2, 1e-4,
    // 1000.1, 3.14159] gives 0.1 1.5 6.55e+04 0.3333 -2.0 0.0001 1e+03 3.14:
    // the same digits (65504 is the f16 nearest 65500), written in the
    // crate's (Rust's) float notation as for f32
    let h = Tensor::vector(&[0.1f32, 1.5, 65504.0, 0.3333, -2.0, 0.0001, 1000.1, 3.14159])
        .cast(DType::F16)
        .unwrap();
    assert_eq!(
        h.to_string(),
        "Tensor([0.1, 1.5, 65500.0, 0.3333, -2.0, 0.0001, 1000.0, 3.14], shape=[8], dtype=f16)"
    );
    // bf16: shortest digits too (ml_dtypes' str prints six significant
    // digits instead: 0.100098, 1.5, 3.14062, 100.5, -2)
    let b = Tensor::vector(&[0.1f32, 1.5, 3.14159, 100.3, -2.0])
        .cast(DType::BF16)
        .unwrap();
    assert_eq!(
        b.to_string(),
        "Tensor([0.1, 1.5, 3.14, 100.5, -2.0], shape=[5], dtype=bf16)"
    );
    let s = Tensor::vector(&[f32::INFINITY, f32::NAN]).cast(DType::F16).unwrap();
    assert_eq!(s.to_string(), "Tensor([inf, NaN], shape=[2], dtype=f16)");
}

// ---------------------------------------------------------- elementwise

/// `a = [0.1, 1.7, -2.3, 3.14159, 100.5, 0.0003]`,
/// `b = [0.3, -0.7, 4.1, 2.71828, 0.01, 7.0]` as `np.float16`.
const A: [u16; 6] = [11878, 16077, 49306, 16968, 22088, 3306];
const B: [u16; 6] = [13517, 47514, 17434, 16752, 8479, 18176];

#[test]
fn f16_elementwise_ops_match_tensorflow_bit_for_bit() -> Result<()> {
    let (a, b) = (f16s(&A, &[6]), f16s(&B, &[6]));
    let ten = Tensor::full(&[6], 10.0, DType::F16);
    // TF 2.21: A + B, A * B, A / B, tf.exp(A / 10), tf.tanh(A),
    // tf.sqrt(tf.abs(A)), tf.math.log(tf.abs(A))
    let cases: [(&str, Tensor, [u16; 6]); 7] = [
        ("add", a.add(&b)?, [13926, 15360, 16180, 17884, 22088, 18176]),
        ("mul", a.mul(&b)?, [10158, 48323, 51384, 18501, 15365, 6221]),
        ("div", a.div(&b)?, [13653, 49371, 47229, 15519, 28904, 719]),
        ("exp", a.div(&ten)?.exp()?, [15370, 15550, 14939, 15738, 30115, 15360]),
        ("tanh", a.tanh()?, [11873, 15228, 48087, 15352, 15360, 3306]),
        ("sqrt", a.abs()?.sqrt()?, [13583, 15671, 15889, 16151, 18691, 9327]),
        ("log", a.abs()?.log()?, [49307, 14399, 15018, 15508, 17564, 51214]),
    ];
    for (name, got, want) in cases {
        assert_eq!(got.dtype(), DType::F16, "{name}");
        assert_eq!(bits(&got), want, "{name}");
    }
    // tf.round / tf.floor of np.float16([0.5, 1.5, 2.5, -2.5, 2.6]): halves
    // to even, [0, 2, 2, -2, 3] and [0, 1, 2, -3, 2]
    let r = Tensor::vector(&[0.5f32, 1.5, 2.5, -2.5, 2.6]).cast(DType::F16)?;
    assert_eq!(r.round()?.to_vec_f64(), [0.0, 2.0, 2.0, -2.0, 3.0]);
    assert_eq!(r.floor()?.to_vec_f64(), [0.0, 1.0, 2.0, -3.0, 2.0]);
    assert_eq!(r.round()?.dtype(), DType::F16);
    // tf.sigmoid(A): TF's half kernel is not f32-then-round everywhere;
    // ours (stable form in f16 steps) is within one ulp of it
    let tf_sigmoid = [14387u16, 15044, 11731, 15275, 15360, 14336];
    for (g, w) in bits(&a.sigmoid()?).into_iter().zip(tf_sigmoid) {
        assert!(ulps(g, w) <= 1, "sigmoid {g} vs {w}");
    }
    Ok(())
}

#[test]
fn bf16_elementwise_ops_match_tensorflow_bit_for_bit() -> Result<()> {
    // A and B above cast to f32, then tf.cast(..., tf.bfloat16)
    let a = bf16s(&[15821, 16346, 49171, 16457, 17097, 14749], &[6]);
    let b = bf16s(&[16026, 48947, 16515, 16430, 15396, 16608], &[6]);
    let ten = Tensor::full(&[6], 10.0, DType::BF16);
    assert_eq!(bits(&a.add(&b)?), [16077, 16256, 16358, 16572, 17097, 16608]);
    assert_eq!(bits(&a.mul(&b)?), [15607, 49048, 49430, 16649, 16257, 15113]);
    assert_eq!(bits(&a.div(&ten)?.exp()?), [16257, 16280, 16204, 16303, 18103, 16256]);
    Ok(())
}

// ----------------------------------------------------------- reductions

/// `np.linspace(-3, 5, 24).astype(np.float16).reshape(4, 6)`.
const V: [u16; 24] = [
    49664, 49486, 49308, 49107, 48751, 48395, 47950, 47238, 45813, 12333, 14247, 15004, 15538, 15894, 16250, 16495,
    16673, 16851, 17030, 17208, 17386, 17486, 17575, 17664,
];

#[test]
fn sums_of_many_f16_values_accumulate_in_f32() -> Result<()> {
    // 10000 × f16(0.1) = 999.76 exactly; an f16 accumulator stalls at 256
    // (256 + 0.1 rounds back to 256). JAX: jnp.sum(jnp.full((10000,), 0.1,
    // jnp.float16)) = 1000.0 (bits 25552), the f16 nearest the exact sum;
    // TF 2.21's reduce_sum gives 997.0 (its Eigen reduction rounds partial
    // sums to f16)
    let s = Tensor::full(&[10000], 0.1, DType::F16).sum_all()?;
    assert_eq!(s.dtype(), DType::F16);
    assert_eq!(bits(&s), [25552]);
    // the mean of 10000 × 30000 is 30000, though the sum overflows f16:
    // JAX 30000.0; TF 2.21's reduce_mean gives inf (a half sum)
    let m = Tensor::full(&[10000], 30000.0, DType::F16).mean_all()?;
    assert_eq!(m.to_vec_f64(), [30000.0]);
    // the same over axes (JAX's jnp.sum / jnp.mean of V)
    let v = f16s(&V, &[4, 6]);
    assert_eq!(bits(&v.sum(&[0], false)?), [14382, 16295, 17052, 17586, 17942, 18298]);
    assert_eq!(bits(&v.sum(&[1], false)?), [51812, 46125, 18977, 20018]);
    assert_eq!(bits(&v.mean(&[0], false)?), [12334, 14247, 15004, 15538, 15894, 16250]);
    assert_eq!(bits(&v.mean(&[1], false)?), [49219, 43409, 16406, 17442]);
    // max is exact in any precision: TF 2.21's tf.reduce_max(V, 1)
    assert_eq!(bits(&v.max(&[1], false)?), [48395, 15004, 16851, 17664]);
    // bf16 sums accumulate in f32 too: 1000 ones are 1000 (a bf16
    // accumulator stalls at 256, where bf16's spacing becomes 2 and
    // 256 + 1 ties back to 256)
    let ones = Tensor::full(&[1000], 1.0, DType::BF16).sum_all()?;
    assert_eq!(ones.to_vec_f64(), [1000.0]);
    Ok(())
}

// ----------------------------------------------------- matmul and conv

#[test]
fn f16_matmul_accumulates_in_f32_as_tensorflow() -> Result<()> {
    // rng.uniform(-2, 2, (4, 7)) and (7, 5), np.float16; TF 2.21's
    // tf.matmul(m1, m2) (equal to JAX's with preferred_element_type=f32,
    // rounded)
    let m1 = f16s(
        &[
            14434, 47966, 48984, 49084, 15619, 16027, 14035, 15192, 12694, 16118, 15630, 49141, 15800, 49014, 15193,
            48433, 15824, 12623, 47721, 46323, 49036, 48643, 14710, 14518, 14178, 46962, 16373, 16306,
        ],
        &[4, 7],
    );
    let m2 = f16s(
        &[
            14832, 14545, 14856, 46876, 48599, 15126, 11902, 47634, 43841, 15931, 16114, 47245, 13460, 47539, 13833,
            47408, 46832, 15935, 48222, 14306, 48808, 15699, 15512, 48172, 15878, 48912, 47423, 48536, 45659, 15550,
            48207, 48939, 46620, 48339, 48780,
        ],
        &[7, 5],
    );
    let want = [
        51150, 16322, 49903, 15441, 47581, 17877, 48343, 47188, 15363, 16346, 17884, 16405, 16683, 15997, 48351, 50329,
        50878, 50384, 49420, 16494,
    ];
    let y = m1.matmul(&m2)?;
    assert_eq!((y.dtype(), y.shape()), (DType::F16, &[4usize, 5][..]));
    assert_eq!(bits(&y), want);
    // bf16: the f32 product rounded once
    let (b1, b2) = (m1.cast(DType::BF16)?, m2.cast(DType::BF16)?);
    let y = b1.matmul(&b2)?;
    let exact = b1.cast(DType::F32)?.matmul(&b2.cast(DType::F32)?)?.cast(DType::BF16)?;
    assert_eq!(bits(&y), bits(&exact));
    Ok(())
}

#[test]
fn f16_conv2d_accumulates_in_f32_as_tensorflow() -> Result<()> {
    // rng.uniform(-1, 1, (1, 5, 5, 2)) and (3, 3, 2, 3), np.float16 (after
    // the matmul inputs); TF 2.21: tf.nn.conv2d(x, f, 1, "SAME"), which
    // equals the f32 convolution of the same values rounded to f16
    let x = f16s(
        &[
            12580, 46705, 13697, 47311, 15123, 46161, 47696, 13346, 15062, 44962, 15174, 35540, 45257, 13234, 15340,
            15151, 44317, 14368, 40263, 11137, 14483, 45430, 14209, 14018, 15082, 47657, 14164, 15063, 15229, 48068,
            14801, 15283, 15185, 47519, 15248, 14909, 14632, 43296, 47176, 14549, 15047, 46972, 11516, 44884, 15077,
            47962, 14189, 13138, 48012, 14084,
        ],
        &[1, 5, 5, 2],
    );
    let f = f16s(
        &[
            48062, 14369, 9864, 15070, 47857, 14710, 47855, 46331, 45174, 15221, 12279, 47031, 47138, 14902, 47203,
            47618, 46790, 12675, 12012, 14581, 12222, 46789, 45459, 14615, 13324, 15192, 46126, 11964, 12803, 14739,
            47532, 45564, 14991, 47952, 14634, 45418, 14663, 48087, 46162, 47806, 13538, 46909, 13948, 15130, 47609,
            14806, 47884, 45985, 45183, 42422, 15264, 14441, 46622, 46941,
        ],
        &[3, 3, 2, 3],
    );
    let want = [
        15003, 13673, 47863, 15159, 48710, 13782, 16241, 15878, 49554, 45557, 48703, 13408, 46849, 13957, 46937, 12489,
        16307, 47421, 49448, 15999, 15428, 48836, 16115, 46304, 14456, 15486, 15667, 47791, 14143, 47150, 48131, 13088,
        14190, 48640, 16243, 44548, 15201, 46646, 47456, 16155, 43909, 46824, 15446, 48455, 11886, 48135, 15786, 14896,
        49010, 16483, 15019, 49281, 16602, 15126, 15316, 16731, 49718, 48496, 49407, 16299, 14411, 15874, 48796, 49022,
        47157, 15431, 49277, 16460, 49061, 45073, 14453, 46721, 12326, 11440, 14389,
    ];
    let y = x.conv2d(&f, [1, 1], Padding::Same, [1, 1])?;
    assert_eq!((y.dtype(), y.shape()), (DType::F16, &[1usize, 5, 5, 3][..]));
    assert_eq!(bits(&y), want);
    // depthwise too: the f32 result rounded once
    let fd = f.slice_to_depthwise();
    let yd = x.depthwise_conv2d(&fd, [1, 1], Padding::Valid, [1, 1])?;
    let exact = x
        .cast(DType::F32)?
        .depthwise_conv2d(&fd.cast(DType::F32)?, [1, 1], Padding::Valid, [1, 1])?
        .cast(DType::F16)?;
    assert_eq!(bits(&yd), bits(&exact));
    Ok(())
}

trait Depthwise {
    fn slice_to_depthwise(&self) -> Tensor;
}
impl Depthwise for Tensor {
    /// The first output channel of an HWIO filter as a `[3, 3, 2, 1]`
    /// depthwise filter.
    fn slice_to_depthwise(&self) -> Tensor {
        let v = self.to_vec::<f16>().unwrap();
        Tensor::from_vec(v.into_iter().step_by(3).collect(), &[3, 3, 2, 1]).unwrap()
    }
}

// ------------------------------------------------------------ gradients

#[test]
fn half_gradients_agree_with_f64_gradients() {
    for dtype in [DType::F16, DType::BF16] {
        // elementwise chain
        check_half_gradient(
            dtype,
            |x| {
                x[0].tanh()?
                    .mul(&x[0].square()?)?
                    .add(&x[0].div_scalar(4.0)?.exp()?)?
                    .sum_all()
            },
            &[lin(12, -2.0, 2.5, &[3, 4])],
        );
        // broadcasting binary ops and a mean
        check_half_gradient(
            dtype,
            |x| x[0].mul(&x[1])?.sub(&x[1].sigmoid()?)?.mean(&[0], false)?.sum_all(),
            &[lin(12, -1.0, 1.5, &[3, 4]), lin(4, 0.5, 2.0, &[4])],
        );
        // matmul
        check_half_gradient(
            dtype,
            |x| x[0].matmul(&x[1])?.square()?.sum_all(),
            &[lin(6, -1.0, 1.0, &[2, 3]), lin(12, -0.5, 1.0, &[3, 4])],
        );
        // conv2d
        check_half_gradient(
            dtype,
            |x| x[0].conv2d(&x[1], [1, 1], Padding::Same, [1, 1])?.square()?.sum_all(),
            &[lin(18, -1.0, 1.0, &[1, 3, 3, 2]), lin(8, -0.5, 0.5, &[2, 2, 2, 1])],
        );
    }
}

#[test]
fn half_second_derivatives() -> Result<()> {
    // d²/dx² x³ = 6x, exact in f16 for these x
    let x = Tensor::vector(&[0.5f32, -1.25, 3.0]).cast(DType::F16)?;
    let outer = GradientTape::new();
    let g = outer.record(|| {
        outer.watch(&x);
        let inner = GradientTape::new();
        let y = inner.record(|| {
            inner.watch(&x);
            x.mul(&x)?.mul(&x)?.sum_all()
        })?;
        inner.gradient(&y, &x)?.unwrap().sum_all()
    })?;
    let h = outer.gradient(&g, &x)?.unwrap();
    assert_eq!(h.dtype(), DType::F16);
    assert_eq!(h.to_vec_f64(), [3.0, -7.5, 18.0]);
    Ok(())
}

// --------------------------------------------------------------- errors

#[test]
fn mixing_dtypes_and_unsupported_ops_are_errors_naming_op_and_dtypes() {
    let h = Tensor::vector(&[1.0f32, 2.0]).cast(DType::F16).unwrap();
    let b = h.cast(DType::BF16).unwrap();
    let f = Tensor::vector(&[1.0f32, 2.0]);
    let e = h.add(&f).unwrap_err().to_string();
    assert!(e.contains("add") && e.contains("f16") && e.contains("f32"), "{e}");
    let m = h.reshape(&[1, 2]).unwrap();
    let e = m.matmul(&b.reshape(&[2, 1]).unwrap()).unwrap_err().to_string();
    assert!(e.contains("matmul") && e.contains("f16") && e.contains("bf16"), "{e}");
    // complex numbers have f32 or f64 parts (TF has no complex32 either)
    let e = Tensor::complex(&h, &h).unwrap_err().to_string();
    assert!(e.contains("f16"), "{e}");
    // NumPy has no bfloat16
    let e = gradtape::io::npy_to_bytes(&b).unwrap_err().to_string();
    assert!(e.contains("bf16"), "{e}");
    // an f16 .npy round trip works
    let back = gradtape::io::npy_from_bytes(&gradtape::io::npy_to_bytes(&h).unwrap()).unwrap();
    assert_eq!((back.dtype(), bits(&back)), (DType::F16, bits(&h)));
}

// -------------------------------------------------------- loss scaling

#[test]
fn an_overflowing_step_is_skipped_and_the_scale_halves() -> Result<()> {
    // f32 master weight, f16 compute: loss = Σ 4·w; its scaled gradient in
    // f16 is 4·2^15 = 131072 > 65504 (inf), then 4·2^14 = 65536 (rounds to
    // inf), then 4·2^13 = 32768 (finite)
    let w = Variable::new(Tensor::vector(&[1.0f32, 2.0]));
    let x = Tensor::full(&[2], 4.0, DType::F16);
    let mut opt = LossScaleOptimizer::new(Sgd::new(0.125));
    assert_eq!(opt.loss_scale(), 32768.0);
    let step = |opt: &mut LossScaleOptimizer<Sgd>| -> Result<()> {
        let tape = GradientTape::new();
        let loss = tape.record(|| w.read().cast(DType::F16)?.mul(&x)?.sum_all()?.cast(DType::F32))?;
        opt.minimize(&tape, &loss, std::slice::from_ref(&w))
    };
    step(&mut opt)?;
    assert!(opt.last_step_skipped());
    assert_eq!(opt.loss_scale(), 16384.0);
    assert_eq!(w.read().to_vec::<f32>()?, [1.0, 2.0]);
    assert_eq!(opt.iterations(), 0);
    step(&mut opt)?;
    assert!(opt.last_step_skipped());
    assert_eq!(opt.loss_scale(), 8192.0);
    step(&mut opt)?;
    assert!(!opt.last_step_skipped());
    assert_eq!(opt.loss_scale(), 8192.0);
    assert_eq!(opt.iterations(), 1);
    // the unscaled gradient is 4: w - 0.125·4
    assert_eq!(w.read().to_vec::<f32>()?, [0.5, 1.5]);
    Ok(())
}

#[test]
fn the_scale_doubles_after_the_growth_steps_and_state_is_checkpointable() -> Result<()> {
    let w = Variable::new(Tensor::scalar(0.0f32));
    let mut opt = LossScaleOptimizer::new(Sgd::new(1.0))
        .initial_scale(4.0)?
        .dynamic_growth_steps(3)?;
    let g = |v: f32| [(Some(Tensor::scalar(v)), &w)];
    opt.apply_gradients(g(4.0))?; // unscaled 1
    opt.apply_gradients(g(4.0))?;
    assert_eq!((opt.loss_scale(), opt.good_steps()), (4.0, 2));
    opt.apply_gradients(g(4.0))?;
    assert_eq!((opt.loss_scale(), opt.good_steps()), (8.0, 0));
    assert_eq!(w.read().to_scalar::<f32>()?, -3.0);
    opt.apply_gradients(g(f32::NAN))?;
    assert_eq!((opt.loss_scale(), opt.good_steps()), (4.0, 0));
    assert_eq!(w.read().to_scalar::<f32>()?, -3.0);
    // the scale and the count are among the variables (a checkpoint holds them)
    let names: Vec<String> = opt.variables().iter().map(|v| v.name().to_string()).collect();
    assert!(names.iter().any(|n| n.ends_with("/loss_scale")), "{names:?}");
    assert!(names.iter().any(|n| n.ends_with("/loss_scale_steps")), "{names:?}");
    assert!(LossScaleOptimizer::new(Sgd::new(1.0)).initial_scale(0.0).is_err());
    assert!(LossScaleOptimizer::new(Sgd::new(1.0)).dynamic_growth_steps(0).is_err());
    Ok(())
}

/// A least-squares fit `y = x·w` with f32 master weights computed in f16;
/// the loss is multiplied by `tiny` (as a loss averaged over many examples
/// and outputs is small), which makes the f16 gradients underflow unless the
/// loss is scaled. Returns the losses (f32, unscaled by `tiny`).
fn train(tiny: f32, scaled: bool, steps: usize) -> Result<Vec<f32>> {
    // columns orthogonal, so plain gradient descent converges fast
    let x = Tensor::from_vec(
        vec![
            1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, -1.0, 0.5, -0.5, -1.0, 0.5, 0.25, 1.0, -0.5, -1.0,
        ],
        &[8, 2],
    )?
    .cast(DType::F16)?;
    let truth = Tensor::vector(&[1.5f32, -0.5]).reshape(&[2, 1])?;
    let y = x.cast(DType::F32)?.matmul(&truth)?;
    let w = Variable::new(Tensor::zeros(&[2, 1], DType::F32));
    let lr = 0.5 / tiny as f64;
    let mut plain = Sgd::new(lr);
    let mut opt = LossScaleOptimizer::new(Sgd::new(lr));
    let mut losses = Vec::new();
    for _ in 0..steps {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let pred = x.matmul(&w.read().cast(DType::F16)?)?.cast(DType::F32)?;
            pred.sub(&y)?.square()?.mean_all()?.mul_scalar(tiny as f64)
        })?;
        losses.push(loss.to_scalar::<f32>()? / tiny);
        if scaled {
            opt.minimize(&tape, &loss, std::slice::from_ref(&w))?;
        } else {
            plain.minimize(&tape, &loss, std::slice::from_ref(&w))?;
        }
    }
    Ok(losses)
}

#[test]
fn a_model_computed_in_f16_trains_with_loss_scaling() -> Result<()> {
    // a loss of ordinary size trains with or without scaling
    let l = train(1.0, true, 30)?;
    assert!(l[29] < 1e-3 * l[0], "{l:?}");
    // a loss times 1e-8: its f16 gradients (5e-9 and below, under half the
    // smallest f16 subnormal, 3e-8) underflow to 0 unscaled, so nothing
    // moves; scaled by 2^15 they are ordinary numbers, and training works
    let unscaled = train(1e-8, false, 30)?;
    assert_eq!(unscaled[29], unscaled[0], "{unscaled:?}");
    let scaled = train(1e-8, true, 30)?;
    assert!(scaled[29] < 1e-2 * scaled[0], "{scaled:?}");
    Ok(())
}

// ------------------------------------------------- one rounding from f32

/// Every f16 bit pattern (`f16`) or bf16 bit pattern (`bf16`) as a tensor.
fn every_half(dt: DType) -> Tensor {
    let all: Vec<u16> = (0..=u16::MAX).collect();
    match dt {
        DType::F16 => f16s(&all, &[all.len()]),
        _ => bf16s(&all, &[all.len()]),
    }
}

/// The elements (as bit patterns) where `f` of a half tensor differs from
/// `f` of its `f32` copy rounded once to the half dtype (NaNs all alike).
fn double_roundings(x: &Tensor, f: &dyn Fn(&Tensor) -> Result<Tensor>) -> Result<Vec<u16>> {
    let got = bits(&f(x)?);
    let want = bits(&f(&x.cast(DType::F32)?)?.cast(x.dtype())?);
    let nan = |b: u16| match x.dtype() {
        DType::F16 => f16::from_bits(b).is_nan(),
        _ => bf16::from_bits(b).is_nan(),
    };
    Ok((0..got.len())
        .filter(|&i| got[i] != want[i] && !(nan(got[i]) && nan(want[i])))
        .map(|i| i as u16)
        .collect())
}

#[test]
fn half_unary_ops_round_once_from_f32_over_every_value() -> Result<()> {
    // The half kernels compute in f32 and round once, as TensorFlow's (TF
    // 2.21: for rsqrt, sqrt, exp, expm1, log, log1p, sin, cos, tan, sinh,
    // cosh, tanh, asinh, acosh, erf, erfc, reciprocal, square its f16 and
    // bf16 results equal its f32 results cast, over all 65536 patterns):
    // so each half op must give exactly the f32 op's result rounded once.
    type F = fn(&Tensor) -> Result<Tensor>;
    let ops: &[(&str, F)] = &[
        ("neg", |x| x.neg()),
        ("abs", |x| x.abs()),
        ("sign", |x| x.sign()),
        ("square", |x| x.square()),
        ("sqrt", |x| x.sqrt()),
        ("rsqrt", |x| x.rsqrt()),
        ("reciprocal", |x| x.reciprocal()),
        ("exp", |x| x.exp()),
        ("expm1", |x| x.expm1()),
        ("log", |x| x.log()),
        ("log1p", |x| x.log1p()),
        ("sin", |x| x.sin()),
        ("cos", |x| x.cos()),
        ("tan", |x| x.tan()),
        ("asin", |x| x.asin()),
        ("acos", |x| x.acos()),
        ("atan", |x| x.atan()),
        ("sinh", |x| x.sinh()),
        ("cosh", |x| x.cosh()),
        ("tanh", |x| x.tanh()),
        ("asinh", |x| x.asinh()),
        ("acosh", |x| x.acosh()),
        ("atanh", |x| x.atanh()),
        ("erf", |x| x.erf()),
        ("erfc", |x| x.erfc()),
        ("floor", |x| x.floor()),
        ("ceil", |x| x.ceil()),
        ("round", |x| x.round()),
        ("sigmoid", |x| x.sigmoid()),
        ("relu", |x| x.relu()),
        ("relu6", |x| x.relu6()),
        ("elu", |x| x.elu()),
        ("selu", |x| x.selu()),
        ("softplus", |x| x.softplus()),
        ("softsign", |x| x.softsign()),
        ("pow_scalar 2", |x| x.pow_scalar(2.0)),
        ("pow_scalar 0.5", |x| x.pow_scalar(0.5)),
        ("mul_scalar 0.25", |x| x.mul_scalar(0.25)),
        ("lgamma", |x| x.lgamma()),
        ("digamma", |x| x.digamma()),
        ("erfinv", |x| x.erfinv()),
        ("ndtri", |x| x.ndtri()),
        ("bessel_i0e", |x| x.bessel_i0e()),
        ("bessel_i1e", |x| x.bessel_i1e()),
    ];
    // (the reference's f32 -> bf16 cast must round to nearest even from all
    // of the f32's bits: it once took half's f64 -> bf16, which drops the
    // f64's low 32 bits, so tan(248) = 0xbe408002 became 0xbe40)
    let mut bad = Vec::new();
    for dt in [DType::F16, DType::BF16] {
        let x = every_half(dt);
        for (name, f) in ops {
            let d = double_roundings(&x, f)?;
            if !d.is_empty() {
                bad.push(format!(
                    "{dt:?} {name}: {} values, e.g. bits {:?}",
                    d.len(),
                    &d[..d.len().min(4)]
                ));
            }
        }
    }
    // f32 0xbe408002 (tan(248)) is just above a bf16 tie: 0xbe41 (TF 2.21:
    // tf.cast(tf.bitcast(0xbe408002, tf.float32), tf.bfloat16))
    let t = Tensor::vector(&[f32::from_bits(0xbe408002)]).cast(DType::BF16)?;
    assert_eq!(bits(&t), [0xbe41]);
    assert!(bad.is_empty(), "not rounded once from f32:\n{}", bad.join("\n"));
    Ok(())
}

#[test]
fn half_rsqrt_and_sigmoid_match_tensorflow_on_64_values() -> Result<()> {
    // TF 2.21: tf.math.rsqrt / tf.sigmoid of 64 f16 values
    // np.linspace(0.05, 8, 64).astype(np.float16) (and the same cast to
    // bf16), as bits; TF's rsqrt is its f32 rsqrt rounded once
    let x32: Vec<f32> = (0..64)
        .map(|i| (0.05 + (8.0 - 0.05) * i as f64 / 63.0) as f32)
        .collect();
    let xh = Tensor::vector(&x32).cast(DType::F16)?;
    let xb = Tensor::vector(&x32).cast(DType::BF16)?;
    assert_eq!(bits(&xh.rsqrt()?), TF_RSQRT_F16);
    assert_eq!(bits(&xb.rsqrt()?), TF_RSQRT_BF16);
    // TF's half sigmoid is computed in half steps (not f32 rounded once):
    // ours is within one ulp of it
    for (g, w) in bits(&xh.sigmoid()?).into_iter().zip(TF_SIGMOID_F16) {
        assert!(ulps(g, w) <= 1, "sigmoid {g} vs {w}");
    }
    Ok(())
}
/// TF 2.21 bits for `half_rsqrt_and_sigmoid_match_tensorflow_on_64_values`.
const TF_RSQRT_F16: [u16; 64] = [
    17529, 16580, 16198, 15900, 15711, 15577, 15476, 15396, 15302, 15193, 15100, 15020, 14949, 14887, 14832, 14781,
    14736, 14694, 14656, 14621, 14588, 14559, 14530, 14504, 14479, 14456, 14434, 14413, 14394, 14375, 14358, 14341,
    14313, 14283, 14254, 14226, 14199, 14174, 14149, 14125, 14102, 14080, 14059, 14038, 14019, 13999, 13981, 13963,
    13946, 13928, 13912, 13897, 13881, 13866, 13851, 13837, 13823, 13810, 13797, 13784, 13772, 13760, 13748, 13736,
];
/// (bf16 rsqrt)
const TF_RSQRT_BF16: [u16; 64] = [
    16527, 16409, 16361, 16324, 16300, 16283, 16270, 16260, 16248, 16235, 16223, 16214, 16205, 16197, 16190, 16184,
    16178, 16173, 16168, 16163, 16159, 16156, 16152, 16149, 16146, 16143, 16140, 16138, 16135, 16133, 16131, 16129,
    16125, 16121, 16118, 16114, 16111, 16108, 16105, 16102, 16099, 16096, 16093, 16091, 16088, 16086, 16084, 16082,
    16079, 16077, 16075, 16073, 16071, 16069, 16067, 16066, 16064, 16062, 16061, 16059, 16057, 16056, 16054, 16053,
];
/// (f16 sigmoid)
const TF_SIGMOID_F16: [u16; 64] = [
    14361, 14426, 14490, 14552, 14612, 14672, 14728, 14782, 14833, 14881, 14925, 14967, 15006, 15041, 15074, 15103,
    15131, 15155, 15177, 15197, 15215, 15231, 15245, 15258, 15270, 15280, 15289, 15297, 15305, 15311, 15317, 15322,
    15326, 15330, 15334, 15337, 15339, 15342, 15344, 15346, 15348, 15349, 15350, 15351, 15352, 15353, 15354, 15355,
    15355, 15356, 15356, 15357, 15357, 15358, 15358, 15358, 15358, 15359, 15359, 15359, 15359, 15360, 15358, 15360,
];
