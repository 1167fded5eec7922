//! `hessian`: f = sum(tanh(W x)^2) for x of 128 elements; the Hessian
//! ([128, 128]) as the vectorized Jacobian of the gradient, nested tapes.

use gradtape::{GradientTape, Result, Tensor};

use crate::jacobian::missing;
use crate::traced::{measure, Mode, Timing};
use crate::{init, Report};

/// `x = init([128],0.5,1)`, `W = init([128,128],1,1/sqrt(128))`; checksum `sum(|H|)`.
pub(crate) fn run(mode: Mode) -> Result<Report> {
    let args = (init(&[128], 0.5, 1.0), init(&[128, 128], 1.0, 1.0 / 128f64.sqrt()));
    let body = |(x, w): &(Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let outer = GradientTape::new();
        let g = outer.record(|| {
            outer.watch(x);
            let inner = GradientTape::new();
            let f = inner.record(|| {
                inner.watch(x);
                w.matmul(&x.reshape(&[128, 1])?)?.tanh()?.square()?.sum_all()
            })?;
            missing(inner.gradient(&f, x)?)
        })?;
        let h = missing(outer.jacobian(&g, x)?)?;
        Ok(vec![h.abs()?.sum_all()?])
    };
    let timing = Timing::last(10, 2);
    measure(mode, args, body, timing)
}
