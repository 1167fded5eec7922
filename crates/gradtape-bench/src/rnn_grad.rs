//! rnn_grad: a 64-step tanh RNN (batch 32, 64 in, 128 hidden), gradient of
//! `mean(h_T²)` w.r.t. W, U, b. Many small ops.

use gradtape::{GradientTape, Result, Tensor};

use crate::{init, repeat, timeit, Report};

/// The workload of WORKLOADS.md; checksum `[loss, sum|dU|]`.
pub(crate) fn rnn_grad() -> Result<Report> {
    const ITERS: usize = 10;
    let x = init(&[64, 32, 64], 0.1, 0.5);
    let w = init(&[64, 128], 1.0, 1.0 / 8.0);
    let u = init(&[128, 128], 2.0, 0.5 / 128f64.sqrt());
    let b = Tensor::zeros(&[128], gradtape::DType::F32);
    let xs: Vec<Tensor> = (0..64)
        .map(|t| x.narrow(0, t, 1)?.reshape(&[32, 64]))
        .collect::<Result<_>>()?;
    let step = || -> Result<(f64, f64)> {
        let params = [w.stop_gradient(), u.stop_gradient(), b.stop_gradient()];
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(&params);
            let [w, u, b] = &params;
            let mut h = Tensor::zeros(&[32, 128], gradtape::DType::F32);
            for xt in &xs {
                h = xt.matmul(w)?.add(&h.matmul(u)?)?.add(b)?.tanh()?;
            }
            h.mul(&h)?.mean_all()
        })?;
        let [_, du, _] = tape.gradient(&loss, &params)?;
        let du = du.ok_or_else(|| gradtape::Error::InvalidArgument {
            op: "rnn_grad",
            msg: "no gradient for U".into(),
        })?;
        Ok((loss.item()?, du.abs()?.sum_all()?.item()?))
    };
    let (median_s, (loss, s)) = timeit(step, ITERS, 2)?;
    Ok(Report {
        median_s,
        iters: ITERS * repeat(),
        checksum: vec![loss, s],
    })
}
