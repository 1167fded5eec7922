//! `hessian`: f = sum(tanh(W x)^2) for x of 128 elements; the Hessian
//! ([128, 128]) as the vectorized Jacobian of the gradient, nested tapes.

use gradtape::{GradientTape, Result, Tensor};

use crate::jacobian::missing;
use crate::{init, repeat, timeit, Report};

/// x = init([128],0.5,1), W = init([128,128],1,1/sqrt(128)); checksum sum(|H|).
pub(crate) fn run() -> Result<Report> {
    const ITERS: usize = 10;
    let x = init(&[128], 0.5, 1.0);
    let w = init(&[128, 128], 1.0, 1.0 / 128f64.sqrt());
    let step = || -> Result<Tensor> {
        let outer = GradientTape::new();
        let g = outer.record(|| {
            outer.watch(&x);
            let inner = GradientTape::new();
            let f = inner.record(|| {
                inner.watch(&x);
                w.matmul(&x.reshape(&[128, 1])?)?.tanh()?.square()?.sum_all()
            })?;
            missing(inner.gradient(&f, &x)?)
        })?;
        missing(outer.jacobian(&g, &x)?)
    };
    let (median_s, h) = timeit(step, ITERS, 2)?;
    Ok(Report {
        median_s,
        iters: ITERS * repeat(),
        checksum: vec![h.abs()?.sum_all()?.item()?],
    })
}
