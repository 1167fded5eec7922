//! `jacobian`: y = tanh(W x + b) for x of 256 elements; the full Jacobian
//! dy/dx ([256, 256]) in one vectorized backward pass.

use gradtape::{GradientTape, Result, Tensor};

use crate::traced::{measure, Mode, Timing};
use crate::{init, Report};

/// `x = init([256],0.5,1)`, `W = init([256,256],1,1/16)`, `b = init([256],2,0.1)`;
/// checksum sum(|J|).
pub(crate) fn run(mode: Mode) -> Result<Report> {
    let args = (
        init(&[256], 0.5, 1.0),
        init(&[256, 256], 1.0, 1.0 / 16.0),
        init(&[256], 2.0, 0.1),
    );
    let body = |(x, w, b): &(Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            w.matmul(&x.reshape(&[256, 1])?)?.reshape(&[256])?.add(b)?.tanh()
        })?;
        let j = missing(tape.jacobian(&y, x)?)?;
        Ok(vec![j.abs()?.sum_all()?])
    };
    let timing = Timing::last(10, 2);
    measure(mode, args, body, timing)
}

pub(crate) fn missing(t: Option<Tensor>) -> Result<Tensor> {
    t.ok_or_else(|| gradtape::Error::InvalidArgument {
        op: "bench",
        msg: "no Jacobian reached the source".into(),
    })
}
