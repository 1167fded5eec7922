//! `cnn_step` of WORKLOADS.md: one SGD step of a small NHWC convnet.
//!
//! X `[32,28,28,1]`; conv 3x3 SAME 1->16 + bias, relu, maxpool 2x2; conv 3x3
//! SAME 16->32 + bias, relu, maxpool 2x2; flatten (NHWC order, 1568); dense
//! to 10 + bias; mean sparse softmax cross-entropy with labels `i % 10`;
//! gradients w.r.t. the six variables; SGD with lr 0.01. The checksum is the
//! first step's [loss, sum(|dK1|)].

use gradtape::{GradientTape, Padding, Result, Tensor, Variable};

use crate::traced::{measure, Mode, Timing};
use crate::{init, Report};

const BATCH: usize = 32;
const ITERS: usize = 10;

pub(crate) fn cnn_step(mode: Mode) -> Result<Report> {
    let x = init(&[BATCH, 28, 28, 1], 0.1, 0.5);
    let labels = crate::on_device(Tensor::from_vec(
        (0..BATCH as i64).map(|i| i % 10).collect::<Vec<_>>(),
        &[BATCH],
    )?);
    let params = [
        Variable::new(init(&[3, 3, 1, 16], 1.0, (2.0f64 / 9.0).sqrt())),
        Variable::new(crate::zeros(&[16])),
        Variable::new(init(&[3, 3, 16, 32], 2.0, (2.0f64 / 144.0).sqrt())),
        Variable::new(crate::zeros(&[32])),
        Variable::new(init(&[1568, 10], 3.0, (2.0f64 / 1568.0).sqrt())),
        Variable::new(crate::zeros(&[10])),
    ];
    let body = move |(x, labels): &(Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let p: Vec<Tensor> = params.iter().map(Variable::read).collect();
            let h = x.conv2d(&p[0], [1, 1], Padding::Same, [1, 1])?.add(&p[1])?.relu()?;
            let h = h.max_pool2d([2, 2], [2, 2], Padding::Valid)?;
            let h = h.conv2d(&p[2], [1, 1], Padding::Same, [1, 1])?.add(&p[3])?.relu()?;
            let h = h.max_pool2d([2, 2], [2, 2], Padding::Valid)?;
            let logits = h.reshape(&[BATCH, 1568])?.matmul(&p[4])?.add(&p[5])?;
            Tensor::sparse_softmax_cross_entropy_with_logits(labels, &logits)?.mean_all()
        })?;
        let grads = tape.gradient(&loss, &params[..])?;
        let mut dk1 = None;
        for (v, g) in params.iter().zip(grads) {
            let g = g.ok_or_else(|| gradtape::Error::InvalidArgument {
                op: "bench",
                msg: "no gradient reached a variable".into(),
            })?;
            if dk1.is_none() {
                dk1 = Some(g.abs()?.sum_all()?);
            }
            v.apply_gradient_descent(0.01, &g)?;
        }
        let dk1 = dk1.ok_or_else(|| gradtape::Error::InvalidArgument {
            op: "bench",
            msg: "no variables".into(),
        })?;
        Ok(vec![loss, dk1])
    };
    let timing = Timing::first(ITERS, 2);
    measure(mode, (x, labels), body, timing)
}
