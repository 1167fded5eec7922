//! rnn_grad: a 64-step tanh RNN (batch 32, 64 in, 128 hidden), gradient of
//! `mean(h_T²)` w.r.t. W, U, b. Many small ops.

use gradtape::{GradientTape, Result, Tensor};

use crate::traced::{measure, Mode, Timing};
use crate::{init, Report};

/// The workload of WORKLOADS.md; checksum `[loss, sum|dU|]`.
pub(crate) fn rnn_grad(mode: Mode) -> Result<Report> {
    let x = init(&[64, 32, 64], 0.1, 0.5);
    let w = init(&[64, 128], 1.0, 1.0 / 8.0);
    let u = init(&[128, 128], 2.0, 0.5 / 128f64.sqrt());
    let b = crate::zeros(&[128]);
    // the time steps' inputs, sliced once outside the timed steps
    let xs: Vec<Tensor> = (0..64)
        .map(|t| x.narrow(0, t, 1)?.reshape(&[32, 64]))
        .collect::<Result<_>>()?;
    let body = |(xs, params): &(Vec<Tensor>, [Tensor; 3])| -> Result<Vec<Tensor>> {
        let params = params.each_ref().map(Tensor::stop_gradient);
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(&params);
            let [w, u, b] = &params;
            let mut h = crate::zeros(&[32, 128]);
            for xt in xs {
                h = xt.matmul(w)?.add(&h.matmul(u)?)?.add(b)?.tanh()?;
            }
            h.mul(&h)?.mean_all()
        })?;
        let [_, du, _] = tape.gradient(&loss, &params)?;
        let du = du.ok_or_else(|| gradtape::Error::InvalidArgument {
            op: "rnn_grad",
            msg: "no gradient for U".into(),
        })?;
        Ok(vec![loss, du.abs()?.sum_all()?])
    };
    let timing = Timing::last(10, 2);
    measure(mode, (xs, [w, u, b]), body, timing)
}
