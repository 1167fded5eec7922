//! Image resizing through the gradient checker: first and second order (the
//! gradient ops are differentiable, their gradients are the resizes), and
//! every case also as a traced function.

use crate::common;

use common::*;
use gradtape::{ResizeMethod, Tensor};

fn table() -> Vec<Case> {
    let mut t = Vec::new();
    let ops: &[(&str, Op, &[usize])] = &[
        // TF2 sampling (half-pixel centers): up, down, mixed, one image
        (
            "resize_images bilinear up",
            |x| sq(x[0].resize_images([5, 7], ResizeMethod::Bilinear)),
            &[2, 3, 4, 2],
        ),
        (
            "resize_images bilinear down",
            |x| sq(x[0].resize_images([2, 3], ResizeMethod::Bilinear)),
            &[1, 5, 7, 1],
        ),
        (
            "resize_images bilinear rank 3",
            |x| sq(x[0].resize_images([4, 2], ResizeMethod::Bilinear)),
            &[3, 5, 2],
        ),
        (
            "resize_images nearest up",
            |x| sq(x[0].resize_images([5, 7], ResizeMethod::Nearest)),
            &[2, 3, 4, 2],
        ),
        (
            "resize_images nearest down",
            |x| sq(x[0].resize_images([2, 3], ResizeMethod::Nearest)),
            &[1, 5, 7, 1],
        ),
        (
            "resize_images nearest rank 3",
            |x| sq(x[0].resize_images([4, 2], ResizeMethod::Nearest)),
            &[3, 5, 2],
        ),
        (
            "resize_images bilinear zero batch",
            |x| sq(x[0].resize_images([3, 3], ResizeMethod::Bilinear)),
            &[0, 2, 2, 1],
        ),
        // TF1 flags
        (
            "resize_bilinear align_corners",
            |x| sq(x[0].resize_bilinear([5, 3], true, false)),
            &[1, 3, 4, 2],
        ),
        (
            "resize_bilinear legacy",
            |x| sq(x[0].resize_bilinear([5, 3], false, false)),
            &[2, 3, 4, 1],
        ),
        (
            "resize_bilinear to 1x1 align_corners",
            |x| sq(x[0].resize_bilinear([1, 1], true, false)),
            &[1, 3, 2, 1],
        ),
        (
            "resize_nearest_neighbor align_corners",
            |x| sq(x[0].resize_nearest_neighbor([5, 3], true, false)),
            &[1, 3, 4, 2],
        ),
        (
            "resize_nearest_neighbor legacy",
            |x| sq(x[0].resize_nearest_neighbor([2, 6], false, false)),
            &[2, 3, 4, 1],
        ),
        // the gradient ops themselves
        (
            "resize_bilinear_grad half_pixel",
            |x| sq(x[0].resize_bilinear_grad([3, 4], false, true)),
            &[2, 5, 7, 2],
        ),
        (
            "resize_bilinear_grad align_corners",
            |x| sq(x[0].resize_bilinear_grad([4, 3], true, false)),
            &[1, 2, 5, 1],
        ),
        (
            "resize_nearest_neighbor_grad half_pixel",
            |x| sq(x[0].resize_nearest_neighbor_grad([3, 4], false, true)),
            &[2, 5, 7, 2],
        ),
        (
            "resize_nearest_neighbor_grad legacy",
            |x| sq(x[0].resize_nearest_neighbor_grad([5, 3], false, false)),
            &[1, 2, 4, 1],
        ),
    ];
    for &(name, f, s) in ops {
        t.push(case(name, f, &[(s, Any)]));
    }
    // a chain: resize, nonlinearity, resize back (second order through both rules)
    t.push(case(
        "resize_images chain",
        |x| {
            let h = x[0].resize_images([5, 5], ResizeMethod::Bilinear)?.tanh()?;
            h.resize_images([2, 3], ResizeMethod::Nearest)?.mul(&x[1])?.sum_all()
        },
        &[(&[1, 3, 3, 2], Any), (&[1, 2, 3, 2], Any)],
    ));
    t
}

const REQUIRED: &[&str] = &[
    "resize_images bilinear",
    "resize_images nearest",
    "resize_bilinear align_corners",
    "resize_nearest_neighbor align_corners",
    "resize_bilinear_grad",
    "resize_nearest_neighbor_grad",
];

#[test]
fn every_resize_op_passes_the_gradient_checker() {
    run_table(&table(), REQUIRED, 17, 1200);
}

// ---- crop_and_resize, extract_patches, bicubic and area resizing ----

/// Irregular box edges (`[3, 4]`): inside, flipped, overhanging.
const CORNERS: [f64; 12] = [
    0.113, 0.207, 0.791, 0.853, 0.682, 0.061, 0.237, 0.719, -0.112, 0.351, 0.907, 1.063,
];

/// Box edges from `v` (`[n, 4]`, values in about [-1.3, 1.3]): within
/// about 0.25 of [`CORNERS`] (so a few samples fall outside the image,
/// none on a pixel).
fn boxes_from(v: &Tensor) -> gradtape::Result<Tensor> {
    let n = v.shape()[0];
    let base: Vec<f64> = CORNERS.iter().cycle().take(4 * n).copied().collect();
    Tensor::from_vec(base, &[n, 4])?.add(&v.mul_scalar(0.19)?)
}

fn fixed_boxes() -> Tensor {
    Tensor::from_vec(CORNERS.to_vec(), &[3, 4]).unwrap()
}

fn more_table() -> Vec<Case> {
    let mut t = Vec::new();
    // image and boxes together (second order: the interpolation's cross
    // terms in the boxes, the image linearly)
    t.push(case(
        "crop_and_resize bilinear image and boxes",
        |x| {
            let idx = idx(&[1, 0, 1], &[3]);
            sq(x[0].crop_and_resize(&boxes_from(&x[1])?, &idx, [4, 3], ResizeMethod::Bilinear, 0.3))
        },
        &[(&[2, 5, 6, 2], Any), (&[3, 4], Any)],
    ));
    t.push(case(
        "crop_and_resize bilinear one row and one column",
        |x| {
            let idx = idx(&[0, 0], &[2]);
            let b = boxes_from(&x[1])?;
            let a = x[0].crop_and_resize(&b, &idx, [1, 4], ResizeMethod::Bilinear, 0.0)?;
            let c = x[0].crop_and_resize(&b, &idx, [3, 1], ResizeMethod::Bilinear, -0.5)?;
            a.square()?.sum_all()?.add(&c.mul(&c.sin()?)?.sum_all()?)
        },
        &[(&[1, 4, 5, 1], Any), (&[2, 4], Any)],
    ));
    // nearest: the image only (TensorFlow's box gradient of a nearest
    // crop is the bilinear one, not the derivative; see tf_image_more.rs)
    t.push(case(
        "crop_and_resize nearest image",
        |x| {
            let idx = idx(&[0, 1, 1], &[3]);
            sq(x[0].crop_and_resize(&fixed_boxes(), &idx, [3, 4], ResizeMethod::Nearest, 0.0))
        },
        &[(&[2, 4, 5, 2], Any)],
    ));
    let one: &[(&str, Op, &[usize])] = &[
        (
            "extract_patches valid",
            |x| sq(x[0].extract_patches([2, 3], [1, 2], [1, 1], gradtape::Padding::Valid)),
            &[2, 4, 5, 2],
        ),
        (
            "extract_patches same dilated",
            |x| sq(x[0].extract_patches([2, 2], [2, 1], [2, 2], gradtape::Padding::Same)),
            &[1, 5, 4, 2],
        ),
        (
            "extract_patches overlapping",
            |x| sq(x[0].extract_patches([3, 3], [1, 1], [1, 1], gradtape::Padding::Same)),
            &[1, 3, 3, 1],
        ),
        (
            "resize_images bicubic up",
            |x| sq(x[0].resize_images([5, 7], ResizeMethod::Bicubic)),
            &[2, 3, 4, 2],
        ),
        (
            "resize_images bicubic down",
            |x| sq(x[0].resize_images([2, 3], ResizeMethod::Bicubic)),
            &[1, 5, 7, 1],
        ),
        (
            "resize_images bicubic rank 3",
            |x| sq(x[0].resize_images([4, 2], ResizeMethod::Bicubic)),
            &[3, 5, 2],
        ),
        (
            "resize_images area up",
            |x| sq(x[0].resize_images([5, 7], ResizeMethod::Area)),
            &[2, 3, 4, 2],
        ),
        (
            "resize_images area down",
            |x| sq(x[0].resize_images([2, 3], ResizeMethod::Area)),
            &[1, 5, 7, 1],
        ),
        (
            "resize_images area rank 3 mixed",
            |x| sq(x[0].resize_images([7, 2], ResizeMethod::Area)),
            &[3, 5, 2],
        ),
        (
            "resize_images bicubic zero batch",
            |x| sq(x[0].resize_images([3, 3], ResizeMethod::Bicubic)),
            &[0, 2, 2, 1],
        ),
    ];
    for &(name, f, s) in one {
        t.push(case(name, f, &[(s, Any)]));
    }
    t
}

#[test]
fn crops_patches_and_cubic_area_resizes_pass_the_gradient_checker() {
    run_table(
        &more_table(),
        &[
            "crop_and_resize bilinear",
            "crop_and_resize nearest",
            "extract_patches",
            "resize_images bicubic",
            "resize_images area",
        ],
        13,
        900,
    );
}
