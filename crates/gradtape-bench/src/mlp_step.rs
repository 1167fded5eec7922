//! mlp_step: one SGD step of a 784-512-512-10 ReLU network on a batch of 128,
//! mean sparse softmax cross-entropy, with `Variable`s and a `GradientTape`.

use gradtape::{GradientTape, Result, Tensor, Variable};

use crate::{init, repeat, timeit, Report};

/// Labels `i % 10` for a batch of `n`.
fn labels(n: usize) -> Tensor {
    Tensor::vector(&(0..n as i64).map(|i| i % 10).collect::<Vec<_>>())
}

/// The workload of WORKLOADS.md; checksum `[loss, sum|dW1|]` of the first step.
pub(crate) fn mlp_step() -> Result<Report> {
    const ITERS: usize = 20;
    let x = init(&[128, 784], 0.1, 0.5);
    let y = labels(128);
    let params: Vec<Variable> = vec![
        Variable::new(init(&[784, 512], 1.0, (2.0f64 / 784.0).sqrt())),
        Variable::new(Tensor::zeros(&[512], gradtape::DType::F32)),
        Variable::new(init(&[512, 512], 2.0, (2.0f64 / 512.0).sqrt())),
        Variable::new(Tensor::zeros(&[512], gradtape::DType::F32)),
        Variable::new(init(&[512, 10], 3.0, (2.0f64 / 512.0).sqrt())),
        Variable::new(Tensor::zeros(&[10], gradtape::DType::F32)),
    ];
    let step = || -> Result<(f64, f64)> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let p: Vec<Tensor> = params.iter().map(Variable::read).collect();
            let h = x.matmul(&p[0])?.bias_add(&p[1])?.relu()?;
            let h = h.matmul(&p[2])?.bias_add(&p[3])?.relu()?;
            let logits = h.matmul(&p[4])?.bias_add(&p[5])?;
            Tensor::sparse_softmax_cross_entropy_with_logits(&y, &logits)?.mean_all()
        })?;
        let grads = tape.gradient(&loss, &params[..])?;
        let mut first = None;
        for (v, g) in params.iter().zip(grads) {
            let g = g.ok_or_else(|| gradtape::Error::InvalidArgument {
                op: "mlp_step",
                msg: "no gradient for a variable".into(),
            })?;
            v.apply_gradient_descent(0.01, &g)?;
            if first.is_none() {
                first = Some(g);
            }
        }
        let dw1 = first.ok_or_else(|| gradtape::Error::InvalidArgument {
            op: "mlp_step",
            msg: "no variables".into(),
        })?;
        Ok((loss.item()?, dw1.abs()?.sum_all()?.item()?))
    };
    let (loss, s) = step()?;
    let (median_s, _) = timeit(step, ITERS, 2)?;
    Ok(Report {
        median_s,
        iters: ITERS * repeat(),
        checksum: vec![loss, s],
    })
}
