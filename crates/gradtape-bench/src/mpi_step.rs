//! mlp_step_adam data-parallel over MPI (feature `mpi`): each rank takes
//! its equal shard of the 128-row batch and a `DistributedOptimizer` over
//! Adam averages the gradients (one fused f32 all-reduce of the 669,706
//! weights per step). Run it under `mpirun` to compare ranks:
//!
//! ```text
//! cargo build --release -p gradtape-bench --features mpi
//! GRADTAPE_NUM_THREADS=1 mpirun -n 1 target/release/gradtape-bench mlp_step_adam_mpi
//! GRADTAPE_NUM_THREADS=1 mpirun -n 2 target/release/gradtape-bench mlp_step_adam_mpi
//! ```
//!
//! Only rank 0 prints; its line adds `ranks`, `allreduce_bytes` (per step
//! and rank) and `apply_median_s`, the median time of the optimizer's
//! `apply` (the averaging, with its wait for the other ranks, and Adam's
//! update). The checksum is the first step's `[loss of rank 0's
//! shard, sum|dW1|]` of rank 0 (before averaging), so it matches
//! mlp_step_adam's only on one rank.

use gradtape::distributed::{broadcast_variables, Collectives, DistributedOptimizer};
use gradtape::nn::{losses, Layer, Module};
use gradtape::optim::{Adam, Optimizer};
use gradtape::{GradientTape, Result, Tensor, Variable};

use crate::mlp_step::{labels, layers_model};
use crate::{init, median, repeat, set_extra, timeit, Report};

/// One step; returns `(loss, sum|dW1|)` and pushes the time spent in
/// `apply` (averaging and update) onto `apply_s`.
fn step(
    model: &gradtape::nn::Sequential,
    vars: &[Variable],
    opt: &mut impl Optimizer,
    x: &Tensor,
    y: &Tensor,
    apply_s: &mut Vec<f64>,
) -> Result<(f64, f64)> {
    let tape = GradientTape::new();
    let loss = tape.record(|| losses::sparse_categorical_crossentropy(y, &model.forward(x, true)?, true))?;
    let grads = tape.sparse_gradient(&loss, vars)?;
    let dw1 = grads[0].clone().map(|g| g.to_dense()).transpose()?;
    let t = std::time::Instant::now();
    opt.apply(grads.into_iter().zip(vars.iter().cloned()).collect())?;
    apply_s.push(t.elapsed().as_secs_f64());
    let s = match dw1 {
        Some(g) => g.abs()?.sum_all()?.item()?,
        None => f64::NAN,
    };
    Ok((loss.item()?, s))
}

pub(crate) fn mlp_step_adam_mpi(mode: crate::traced::Mode) -> Result<Report> {
    if mode != crate::traced::Mode::Eager {
        return Err(gradtape::Error::InvalidArgument {
            op: "mlp_step_adam_mpi",
            msg: "runs eagerly only".into(),
        });
    }
    const ITERS: usize = 20;
    const BATCH: usize = 128;
    let universe = mpi::initialize().ok_or_else(|| gradtape::Error::InvalidArgument {
        op: "mlp_step_adam_mpi",
        msg: "MPI was already initialised".into(),
    })?;
    let world = universe.world();
    let (rank, size) = (world.this_rank(), world.num_ranks());
    if !BATCH.is_multiple_of(size) {
        return Err(gradtape::Error::InvalidArgument {
            op: "mlp_step_adam_mpi",
            msg: format!("{size} ranks do not divide the batch of {BATCH}"),
        });
    }
    let rows = BATCH / size;
    let mine = Tensor::vector(&((rank * rows) as i64..((rank + 1) * rows) as i64).collect::<Vec<_>>());
    let x = init(&[BATCH, 784], 0.1, 0.5).gather(&mine, 0)?;
    let y = labels(BATCH).gather(&mine, 0)?;
    let model = layers_model()?;
    let vars = model.trainable_variables();
    broadcast_variables(&world, &vars, 0)?;
    let mut opt = DistributedOptimizer::new(Adam::new(0.001), universe.world());
    let mut apply_s = Vec::new();
    let (loss, s) = step(&model, &vars, &mut opt, &x, &y, &mut apply_s)?;
    let (median_s, _, allocs_per_step) = timeit(|| step(&model, &vars, &mut opt, &x, &y, &mut apply_s), ITERS, 2)?;
    // the timed steps' share
    let timed = apply_s.split_off(apply_s.len() - ITERS * repeat());
    let traffic = opt.last_traffic();
    set_extra(
        rank == 0,
        vec![
            ("ranks", size as f64),
            ("allreduce_bytes", traffic.allreduce_bytes as f64),
            ("apply_median_s", median(timed)),
        ],
    );
    Ok(Report {
        median_s,
        iters: ITERS * repeat(),
        checksum: vec![loss, s],
        allocs_per_step,
    })
}
