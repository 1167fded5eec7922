//! Image resizing through the gradient checker: first and second order (the
//! gradient ops are differentiable, their gradients are the resizes), and
//! every case also as a traced function.

use crate::common;

use common::*;
use gradtape::ResizeMethod;

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
