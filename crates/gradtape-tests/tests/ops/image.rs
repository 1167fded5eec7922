//! Image resizing: values and gradients against TensorFlow 2.21, and the
//! errors of bad arguments.
//!
//! Every reference number below was computed with TensorFlow 2.21
//! (`tf.raw_ops.ResizeBilinear` / `ResizeNearestNeighbor` with the flags of
//! each case, `tf.image.resize` for `resize_images`), on `float32` inputs
//! `x[i] = sin(1.3 i + 0.2)` (flat NHWC index `i`); the gradients are those
//! of `sum(y * w)` with `w[i] = cos(0.7 i)`, from `tf.GradientTape`.

use gradtape::{DType, Error, GradientTape, ResizeMethod, Result, Tensor};

fn inp(shape: &[usize], d: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| (1.3 * i as f64 + 0.2).sin()).collect();
    Tensor::from_vec(v, shape).unwrap().cast(d).unwrap()
}

fn weights(shape: &[usize], d: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| (0.7 * i as f64).cos()).collect();
    Tensor::from_vec(v, shape).unwrap().cast(d).unwrap()
}

fn close(name: &str, got: &Tensor, want: &[f64], tol: f64) {
    let got = got.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
    assert_eq!(got.len(), want.len(), "{name}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{name}[{i}]: got {g}, TensorFlow {w}"
        );
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Bilinear,
    Nearest,
}

/// The resize of `inp(shape)` and the gradient of `sum(resize * w)`,
/// compared with TensorFlow in `d`.
fn check(
    name: &str,
    kind: Kind,
    shape: &[usize],
    size: [usize; 2],
    (align, hpc): (bool, bool),
    y_ref: &[f64],
    dx_ref: &[f64],
) {
    for d in [DType::F32, DType::F64] {
        let x = inp(shape, d);
        let tape = GradientTape::new();
        let y = tape
            .record(|| -> Result<Tensor> {
                tape.watch(&x);
                match kind {
                    Kind::Bilinear => x.resize_bilinear(size, align, hpc),
                    Kind::Nearest => x.resize_nearest_neighbor(size, align, hpc),
                }
            })
            .unwrap();
        assert_eq!(y.dtype(), d);
        assert_eq!(y.shape(), &[shape[0], size[0], size[1], shape[3]]);
        let s = tape.record(|| y.mul(&weights(y.shape(), d))?.sum_all()).unwrap();
        let dx = tape.gradient(&s, &x).unwrap().unwrap();
        close(&format!("{name} {d} y"), &y, y_ref, 2e-6);
        close(&format!("{name} {d} dx"), &dx, dx_ref, 2e-6);
    }
}

// bilinear_hpc: (1, 3, 4, 2) -> (5, 3)
const BILINEAR_HPC_Y: &[f64] = &[
    2.2138913e-01,
    6.9486630e-01,
    -2.1888819e-01,
    -2.0671362e-01,
    6.9567138e-01,
    1.7118695e-01,
    -1.3528679e-01,
    2.7320039e-01,
    -3.1299561e-02,
    -1.3386217e-01,
    2.6642042e-01,
    2.8763241e-01,
    -6.7030060e-01,
    -3.5929841e-01,
    2.5008333e-01,
    -2.4585009e-02,
    -3.7745589e-01,
    4.6230060e-01,
    5.0280094e-02,
    -3.1876624e-01,
    6.3014835e-02,
    1.3074432e-01,
    -3.1428897e-01,
    -2.2900420e-01,
    5.3066695e-01,
    -2.9174480e-01,
    -6.1697423e-02,
    2.3429717e-01,
    -2.7217770e-01,
    -6.8987375e-01,
];
const BILINEAR_HPC_DX: &[f64] = &[
    5.8820301e-01,
    7.3062474e-01,
    4.3529391e-01,
    1.9365950e-01,
    2.3600654e-01,
    -9.3204059e-02,
    -4.0823430e-01,
    -7.0369381e-01,
    -2.6301610e-01,
    -4.8001420e-01,
    -3.3535573e-01,
    -2.4051644e-01,
    -2.6218840e-01,
    -6.4885855e-02,
    1.0282069e-01,
    3.9813909e-01,
    1.1581857e-01,
    5.5424130e-01,
    4.6236110e-01,
    4.5013690e-01,
    4.6579975e-01,
    2.6688570e-01,
    1.3301192e-01,
    -3.6201501e-01,
];
// bilinear_align: (1, 3, 4, 1) -> (5, 7)
const BILINEAR_ALIGN_Y: &[f64] = &[
    1.9866933e-01,
    5.9808218e-01,
    9.9749500e-01,
    6.6624159e-01,
    3.3498815e-01,
    -2.4164447e-01,
    -8.1827712e-01,
    -2.8704756e-01,
    2.0706245e-01,
    7.0117247e-01,
    6.8167281e-01,
    6.6217315e-01,
    1.5763095e-01,
    -3.4691134e-01,
    -7.7276450e-01,
    -1.8395728e-01,
    4.0484992e-01,
    6.9710410e-01,
    9.8935825e-01,
    5.5690634e-01,
    1.2445442e-01,
    -8.4776998e-01,
    -4.7720680e-01,
    -1.0664359e-01,
    3.4203613e-01,
    7.9071587e-01,
    6.6019529e-01,
    5.2967471e-01,
    -9.2277545e-01,
    -7.7045631e-01,
    -6.1813712e-01,
    -1.3031840e-02,
    5.9207350e-01,
    7.6348424e-01,
    9.3489504e-01,
];
const BILINEAR_ALIGN_DX: &[f64] = &[
    1.6695688e+00,
    1.1822616e+00,
    -1.5275333e+00,
    -1.5621722e+00,
    -1.3860775e+00,
    4.2509365e-01,
    2.0928233e+00,
    6.0288090e-01,
    2.8638664e-01,
    -1.7821300e+00,
    -1.4257420e+00,
    7.1142012e-01,
];
// bilinear_legacy: (2, 3, 4, 1) -> (2, 6)
const BILINEAR_LEGACY_Y: &[f64] = &[
    1.9866933e-01,
    7.3121977e-01,
    7.7665937e-01,
    3.3498815e-01,
    -4.3385544e-01,
    -8.1827712e-01,
    -8.4776998e-01,
    -3.5368571e-01,
    1.9247624e-01,
    7.9071587e-01,
    6.1668849e-01,
    5.2967471e-01,
    -9.1906853e-02,
    -6.8667895e-01,
    -8.0089849e-01,
    -4.3456563e-01,
    3.5619387e-01,
    7.5157344e-01,
    8.5626835e-01,
    4.1718122e-01,
    -1.1841911e-01,
    -7.5053263e-01,
    -6.4962482e-01,
    -5.9917092e-01,
];
const BILINEAR_LEGACY_DX: &[f64] = &[
    1.2549474e+00,
    6.2320626e-01,
    -7.6226443e-01,
    -1.5646050e+00,
    -2.1404502e-01,
    3.2069272e-01,
    7.5484067e-01,
    3.2798770e-01,
    -2.1404502e-01,
    3.2069272e-01,
    7.5484067e-01,
    3.2798770e-01,
    -8.3519584e-01,
    -1.2520986e+00,
    -7.1801084e-01,
    9.2140687e-01,
    6.2350881e-01,
    2.9316214e-01,
    -4.0282810e-01,
    -7.7971745e-01,
    6.2350881e-01,
    2.9316214e-01,
    -4.0282810e-01,
    -7.7971745e-01,
];
// nearest_hpc: (1, 3, 5, 1) -> (7, 2)
const NEAREST_HPC_Y: &[f64] = &[
    9.9749500e-01,
    -8.1827712e-01,
    9.9749500e-01,
    -8.1827712e-01,
    9.8935825e-01,
    -9.2277545e-01,
    9.8935825e-01,
    -9.2277545e-01,
    9.8935825e-01,
    -9.2277545e-01,
    9.3489504e-01,
    -9.8406500e-01,
    9.3489504e-01,
    -9.8406500e-01,
];
const NEAREST_HPC_DX: &[f64] = &[
    0.0000000e+00,
    1.1699672e+00,
    0.0000000e+00,
    2.5999612e-01,
    0.0000000e+00,
    0.0000000e+00,
    -6.5691733e-01,
    0.0000000e+00,
    2.4991429e-01,
    0.0000000e+00,
    0.0000000e+00,
    2.3461360e-01,
    0.0000000e+00,
    -7.9434776e-01,
    0.0000000e+00,
];
// nearest_align: (1, 3, 5, 1) -> (7, 2)
const NEAREST_ALIGN_Y: &[f64] = &[
    1.9866933e-01,
    -7.7276450e-01,
    1.9866933e-01,
    -7.7276450e-01,
    4.0484992e-01,
    -6.1813712e-01,
    4.0484992e-01,
    -6.1813712e-01,
    4.0484992e-01,
    -6.1813712e-01,
    5.9207350e-01,
    -4.3456563e-01,
    5.9207350e-01,
    -4.3456563e-01,
];
const NEAREST_ALIGN_DX: &[f64] = &[
    1.1699672e+00,
    0.0000000e+00,
    0.0000000e+00,
    0.0000000e+00,
    2.5999612e-01,
    -6.5691733e-01,
    0.0000000e+00,
    0.0000000e+00,
    0.0000000e+00,
    2.4991429e-01,
    2.3461360e-01,
    0.0000000e+00,
    0.0000000e+00,
    0.0000000e+00,
    -7.9434776e-01,
];
// nearest_legacy: (1, 3, 5, 1) -> (7, 2)
const NEAREST_LEGACY_Y: &[f64] = &[
    1.9866933e-01,
    3.3498815e-01,
    1.9866933e-01,
    3.3498815e-01,
    1.9866933e-01,
    3.3498815e-01,
    4.0484992e-01,
    1.2445442e-01,
    4.0484992e-01,
    1.2445442e-01,
    5.9207350e-01,
    -9.1906853e-02,
    5.9207350e-01,
    -9.1906853e-02,
];
const NEAREST_LEGACY_DX: &[f64] = &[
    2.2774482e-01,
    0.0000000e+00,
    -6.7646056e-01,
    0.0000000e+00,
    0.0000000e+00,
    2.8530505e-01,
    0.0000000e+00,
    1.1863710e+00,
    0.0000000e+00,
    0.0000000e+00,
    2.3461360e-01,
    0.0000000e+00,
    -7.9434776e-01,
    0.0000000e+00,
    0.0000000e+00,
];
const IMAGE_RESIZE_BILINEAR: &[f64] = &[
    -8.1691876e-02,
    5.9358698e-01,
    2.5497410e-01,
    -8.7912813e-02,
    -1.0164531e-01,
    -1.6118146e-01,
    -2.3177193e-01,
    1.2470508e-01,
    6.3337731e-01,
    2.8123417e-01,
    3.9679796e-01,
    -3.8250774e-01,
    -3.0196774e-01,
    -7.2234690e-02,
    1.6247764e-02,
    1.6957662e-01,
    2.9825890e-01,
    3.3526063e-02,
    -4.8498335e-01,
    -5.3787863e-01,
];
const IMAGE_RESIZE_NEAREST: &[f64] = &[
    1.9866933e-01,
    9.9749500e-01,
    3.3498815e-01,
    -8.1827712e-01,
    -7.7276450e-01,
    4.0484992e-01,
    -7.7276450e-01,
    4.0484992e-01,
    9.8935825e-01,
    1.2445442e-01,
    8.3665562e-01,
    -3.0396461e-01,
    -9.9927598e-01,
    -2.3064570e-01,
    8.7588108e-01,
    6.9924003e-01,
    8.7588108e-01,
    6.9924003e-01,
    -5.0178927e-01,
    -9.6769613e-01,
];
const IMAGE_RESIZE_NEAREST_I32: &[i32] = &[0, 3, 10, 0, 3, 10, 6, 9, 5, 1, 4, 0, 1, 4, 0];
const IMAGE_RESIZE_BILINEAR_I32: &[f64] = &[
    1.1666667e+00,
    5.0000000e+00,
    8.8333340e+00,
    2.8333333e+00,
    5.1999998e+00,
    7.5666666e+00,
    5.3333330e+00,
    5.5000000e+00,
    5.6666660e+00,
    3.4333329e+00,
    5.8000002e+00,
    2.6666653e+00,
    2.1666667e+00,
    6.0000000e+00,
    6.6666603e-01,
];

#[test]
fn bilinear_matches_tensorflow() {
    check(
        "bilinear hpc",
        Kind::Bilinear,
        &[1, 3, 4, 2],
        [5, 3],
        (false, true),
        BILINEAR_HPC_Y,
        BILINEAR_HPC_DX,
    );
    check(
        "bilinear align",
        Kind::Bilinear,
        &[1, 3, 4, 1],
        [5, 7],
        (true, false),
        BILINEAR_ALIGN_Y,
        BILINEAR_ALIGN_DX,
    );
    check(
        "bilinear legacy",
        Kind::Bilinear,
        &[2, 3, 4, 1],
        [2, 6],
        (false, false),
        BILINEAR_LEGACY_Y,
        BILINEAR_LEGACY_DX,
    );
}

#[test]
fn nearest_matches_tensorflow() {
    check(
        "nearest hpc",
        Kind::Nearest,
        &[1, 3, 5, 1],
        [7, 2],
        (false, true),
        NEAREST_HPC_Y,
        NEAREST_HPC_DX,
    );
    check(
        "nearest align",
        Kind::Nearest,
        &[1, 3, 5, 1],
        [7, 2],
        (true, false),
        NEAREST_ALIGN_Y,
        NEAREST_ALIGN_DX,
    );
    check(
        "nearest legacy",
        Kind::Nearest,
        &[1, 3, 5, 1],
        [7, 2],
        (false, false),
        NEAREST_LEGACY_Y,
        NEAREST_LEGACY_DX,
    );
}

#[test]
fn resize_images_matches_tf_image_resize() {
    // one image [h, w, c]: the result has no batch dimension either
    let x = inp(&[3, 4, 2], DType::F32);
    let y = x.resize_images([2, 5], ResizeMethod::Bilinear).unwrap();
    assert_eq!(y.shape(), &[2, 5, 2]);
    close("resize_images bilinear", &y, IMAGE_RESIZE_BILINEAR, 2e-6);
    let y = x.resize_images([2, 5], ResizeMethod::Nearest).unwrap();
    assert_eq!(y.shape(), &[2, 5, 2]);
    close("resize_images nearest", &y, IMAGE_RESIZE_NEAREST, 1e-7);
    // integers: nearest keeps i32, bilinear gives f32 (as tf.image.resize)
    let v: Vec<i32> = (0..12).map(|i| i * 7 % 11).collect();
    let xi = Tensor::from_vec(v, &[1, 3, 4, 1]).unwrap();
    let yi = xi.resize_images([5, 3], ResizeMethod::Nearest).unwrap();
    assert_eq!(yi.dtype(), DType::I32);
    assert_eq!(yi.to_vec::<i32>().unwrap(), IMAGE_RESIZE_NEAREST_I32);
    let yf = xi.resize_images([5, 3], ResizeMethod::Bilinear).unwrap();
    assert_eq!(yf.dtype(), DType::F32);
    close("resize_images bilinear i32", &yf, IMAGE_RESIZE_BILINEAR_I32, 2e-6);
    // i64 too
    let y64 = xi
        .cast(DType::I64)
        .unwrap()
        .resize_images([5, 3], ResizeMethod::Nearest)
        .unwrap();
    assert_eq!(
        y64.cast(DType::I32).unwrap().to_vec::<i32>().unwrap(),
        IMAGE_RESIZE_NEAREST_I32
    );
}

#[test]
fn same_size_half_pixel_resize_is_the_identity_and_empty_batches_work() {
    let x = inp(&[2, 3, 4, 2], DType::F64);
    for m in [ResizeMethod::Bilinear, ResizeMethod::Nearest] {
        let y = x.resize_images([3, 4], m).unwrap();
        assert_eq!(y.to_vec::<f64>().unwrap(), x.to_vec::<f64>().unwrap());
    }
    let e = Tensor::zeros(&[0, 3, 4, 2], DType::F32);
    let y = e.resize_images([5, 6], ResizeMethod::Bilinear).unwrap();
    assert_eq!(y.shape(), &[0, 5, 6, 2]);
    let g = y.resize_bilinear_grad([3, 4], false, true).unwrap();
    assert_eq!(g.shape(), &[0, 3, 4, 2]);
}

fn invalid(r: Result<Tensor>, op: &str, words: &[&str]) {
    match r {
        Err(e @ Error::InvalidArgument { .. })
        | Err(e @ Error::UnsupportedDType { .. })
        | Err(e @ Error::ShapeOverflow { .. }) => {
            let s = e.to_string();
            assert!(s.contains(op), "{s:?} should name {op}");
            for w in words {
                assert!(s.contains(w), "{s:?} should mention {w:?}");
            }
        }
        other => panic!("{op}: expected an error, got {other:?}"),
    }
}

#[test]
fn bad_arguments_are_errors() {
    let x = inp(&[1, 3, 4, 2], DType::F32);
    // ranks
    invalid(
        inp(&[3, 4], DType::F32).resize_images([2, 2], ResizeMethod::Bilinear),
        "resize_images",
        &["[3, 4]"],
    );
    invalid(
        inp(&[1, 1, 3, 4, 2], DType::F32).resize_images([2, 2], ResizeMethod::Nearest),
        "resize_images",
        &["[1, 1, 3, 4, 2]"],
    );
    invalid(
        inp(&[3, 4, 2], DType::F32).resize_bilinear([2, 2], false, true),
        "resize_bilinear",
        &["rank 4", "[3, 4, 2]"],
    );
    // sizes of zero, output and input
    invalid(
        x.resize_images([0, 3], ResizeMethod::Bilinear),
        "resize_images",
        &["[0, 3]", "positive"],
    );
    invalid(
        x.resize_nearest_neighbor([3, 0], false, true),
        "resize_nearest_neighbor",
        &["[3, 0]"],
    );
    invalid(
        Tensor::zeros(&[1, 0, 3, 1], DType::F32).resize_images([2, 2], ResizeMethod::Bilinear),
        "resize_images",
        &["[1, 0, 3, 1]", "height"],
    );
    invalid(
        Tensor::zeros(&[1, 2, 3, 0], DType::F64).resize_bilinear([2, 2], false, true),
        "resize_bilinear",
        &["channel"],
    );
    // both flags
    invalid(
        x.resize_bilinear([2, 2], true, true),
        "resize_bilinear",
        &["align_corners", "half_pixel_centers"],
    );
    invalid(
        x.resize_nearest_neighbor([2, 2], true, true),
        "resize_nearest_neighbor",
        &["align_corners"],
    );
    // dtypes
    let b = Tensor::from_vec(vec![true; 4], &[1, 2, 2, 1]).unwrap();
    invalid(
        b.resize_images([3, 3], ResizeMethod::Nearest),
        "resize_images",
        &["bool"],
    );
    invalid(b.resize_bilinear([3, 3], false, true), "resize_bilinear", &["bool"]);
    let xi = Tensor::from_vec(vec![1i32, 2, 3, 4], &[1, 2, 2, 1]).unwrap();
    invalid(xi.resize_bilinear([3, 3], false, true), "resize_bilinear", &["i32"]);
    invalid(
        xi.resize_nearest_neighbor_grad([3, 3], false, true),
        "resize_nearest_neighbor_grad",
        &["i32"],
    );
    // gradient ops: rank, original size
    invalid(
        inp(&[2, 2], DType::F64).resize_bilinear_grad([3, 3], false, true),
        "resize_bilinear_grad",
        &["[2, 2]"],
    );
    invalid(
        x.resize_bilinear_grad([0, 3], false, true),
        "resize_bilinear_grad",
        &["original size"],
    );
    // a size too large for any shape is an error, not an abort
    invalid(
        x.resize_images([usize::MAX / 2, 3], ResizeMethod::Nearest),
        "resize_images",
        &[],
    );
    match x.resize_bilinear([1 << 40, 1 << 20], false, true) {
        Err(Error::OutOfMemory { op, .. }) | Err(Error::ShapeOverflow { op, .. }) => assert_eq!(op, "resize_bilinear"),
        other => panic!("expected an allocation error, got {other:?}"),
    }
}

#[test]
fn integer_nearest_is_not_differentiable_but_traces() {
    let xi = Tensor::from_vec(vec![1i64, 2, 3, 4], &[1, 2, 2, 1]).unwrap();
    let f = gradtape::function(|x: &Tensor| x.resize_images([3, 3], ResizeMethod::Nearest));
    let y = f.call(&xi).unwrap();
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![1, 2, 2, 3, 4, 4, 3, 4, 4]);
    let other = Tensor::from_vec(vec![5i64, 6, 7, 8], &[1, 2, 2, 1]).unwrap();
    assert_eq!(
        f.call(&other).unwrap().to_vec::<i64>().unwrap(),
        vec![5, 6, 6, 7, 8, 8, 7, 8, 8]
    );
    assert_eq!(f.trace_count(), 1);
}
