//! `jacobian`: y = tanh(W x + b) for x of 256 elements; the full Jacobian
//! dy/dx ([256, 256]) in one vectorized backward pass.

use gradtape::{GradientTape, Result, Tensor};

use crate::{init, repeat, timeit, Report};

/// x = init([256],0.5,1), W = init([256,256],1,1/16), b = init([256],2,0.1);
/// checksum sum(|J|).
pub(crate) fn run() -> Result<Report> {
    const ITERS: usize = 10;
    let x = init(&[256], 0.5, 1.0);
    let w = init(&[256, 256], 1.0, 1.0 / 16.0);
    let b = init(&[256], 2.0, 0.1);
    let step = || -> Result<Tensor> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x);
            w.matmul(&x.reshape(&[256, 1])?)?.reshape(&[256])?.add(&b)?.tanh()
        })?;
        missing(tape.jacobian(&y, &x)?)
    };
    let (median_s, j) = timeit(step, ITERS, 2)?;
    Ok(Report {
        median_s,
        iters: ITERS * repeat(),
        checksum: vec![j.abs()?.sum_all()?.item()?],
    })
}

pub(crate) fn missing(t: Option<Tensor>) -> Result<Tensor> {
    t.ok_or_else(|| gradtape::Error::InvalidArgument {
        op: "bench",
        msg: "no Jacobian reached the source".into(),
    })
}
