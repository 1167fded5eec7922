//! The CTC loss through the gradient checker: first order only, since its
//! gradient is not differentiable again (an error, as in TensorFlow; see
//! `tests/ops/ctc.rs`). Every case also runs as a traced function.

use crate::common;

use common::*;
use gradtape::{Result, Tensor};

fn i32s(v: &[i32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

/// Two examples: labels "1 2" in 5 frames and "3 3" (a repeat: needs a
/// blank between) in 4 of them.
fn two(x: &Tensor, time_major: bool, blank: i64) -> Result<Tensor> {
    let labels = i32s(&[1, 2, 3, 3], &[2, 2]);
    Tensor::ctc_loss(
        &labels,
        x,
        &i32s(&[2, 2], &[2]),
        &i32s(&[5, 4], &[2]),
        time_major,
        blank,
    )
}

fn table() -> Vec<Case> {
    let cases: &[(&str, Op, &[usize])] = &[
        ("ctc_loss time-major blank 0", |x| two(&x[0], true, 0), &[5, 2, 4]),
        (
            "ctc_loss time-major blank 0 squared",
            |x| sq(two(&x[0], true, 0)),
            &[5, 2, 4],
        ),
        (
            "ctc_loss blank last",
            |x| {
                let labels = i32s(&[1, 2, 0, 0, 0, 2], &[2, 3]);
                Tensor::ctc_loss(&labels, &x[0], &i32s(&[2, 3], &[2]), &i32s(&[4, 5], &[2]), true, -1)
            },
            &[5, 2, 4],
        ),
        (
            "ctc_loss blank middle",
            |x| {
                let labels = Tensor::from_vec(vec![0i64, 3, 3, 1], &[2, 2]).unwrap();
                let n = Tensor::from_vec(vec![2i64, 1], &[2]).unwrap();
                let t = Tensor::from_vec(vec![3i64, 2], &[2]).unwrap();
                Tensor::ctc_loss(&labels, &x[0], &n, &t, true, 2)
            },
            &[3, 2, 4],
        ),
        ("ctc_loss batch-major", |x| sq(two(&x[0], false, 0)), &[2, 5, 4]),
        (
            "ctc_loss empty labels",
            |x| {
                Tensor::ctc_loss(
                    &i32s(&[0, 0], &[2, 1]),
                    &x[0],
                    &i32s(&[0, 0], &[2]),
                    &i32s(&[3, 0], &[2]),
                    true,
                    0,
                )
            },
            &[3, 2, 3],
        ),
        (
            "ctc_loss long labels",
            |x| {
                Tensor::ctc_loss(
                    &i32s(&[1, 2, 1, 3, 3], &[1, 5]),
                    &x[0],
                    &i32s(&[5], &[1]),
                    &i32s(&[7], &[1]),
                    true,
                    0,
                )
            },
            &[7, 1, 4],
        ),
    ];
    cases
        .iter()
        .map(|&(name, f, s)| {
            let mut c = case(name, f, &[(s, Any)]);
            c.second_order = false;
            c
        })
        .collect()
}

#[test]
fn ctc_loss_passes_the_gradient_checker() {
    run_table(&table(), &["ctc_loss"], 7, 200);
}
