//! The digits example (`examples/digits.rs`) trained data-parallel over MPI:
//! every rank builds the model, rank 0's weights are broadcast, and each
//! rank takes its shard of every batch (rows `rank, rank + size, ...`);
//! a [`DistributedOptimizer`] over Adam averages the gradients, so all
//! replicas take the same steps. The loss of a shard is scaled so that the
//! average over the ranks is the mean over the whole batch: the step is the
//! one-process step on the whole batch, up to rounding (and dropout masks).
//!
//! ```text
//! cargo build --release --features mpi --example digits_mpi
//! mpirun -n 2 target/release/examples/digits_mpi        # as root: mpirun --allow-run-as-root -n 2 ...
//! mpirun -n 2 target/release/examples/digits_mpi --check-gradients
//! ```
//!
//! `--check-gradients` trains nothing: it checks, on every rank, that the
//! averaged gradients of the shards (dense: the model's; sparse: an
//! embedding lookup's `IndexedSlices`) equal the gradients of the whole
//! batch computed in one process, and that ranks passing different shapes
//! all get an error; it prints `gradient check passed` on success.

#[path = "digits.rs"]
#[allow(dead_code)]
mod digits;

use std::time::Instant;

use gradtape::distributed::{allreduce_gradients, broadcast_variables, BufferMut, Collectives, DistributedOptimizer};
use gradtape::nn::{losses, metrics, Layer, Module};
use gradtape::optim::{Adam, Optimizer};
use gradtape::{random, DType, Error, Gradient, GradientTape, Result, Rng, Tensor, Variable};
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator as _;

/// The rows of `rows` that rank `rank` of `size` takes.
fn shard(rows: &[i64], rank: usize, size: usize) -> Vec<i64> {
    rows.iter().skip(rank).step_by(size).copied().collect()
}

fn bad(op: &'static str, msg: &str) -> Error {
    Error::InvalidArgument { op, msg: msg.into() }
}

/// The loss of a shard of `n_shard` of a batch of `n_batch` rows, scaled
/// so that its average over `size` ranks is the batch's mean loss.
fn shard_loss(
    model: &impl Layer,
    x: &Tensor,
    y: &Tensor,
    training: bool,
    n_batch: usize,
    size: usize,
) -> Result<(Tensor, Tensor)> {
    let logits = model.forward(x, training)?;
    let mean = losses::sparse_categorical_crossentropy(y, &logits, true)?;
    let weight = (x.shape()[0] * size) as f64 / n_batch as f64;
    Ok((mean.mul_scalar(weight)?, logits))
}

fn train(world: &SimpleCommunicator) -> Result<()> {
    let (rank, size) = (world.this_rank(), world.num_ranks());
    let cfg = digits::Config::default();
    let (x, y) = digits::load_digits(digits::DATA)?;
    let n = x.shape()[0];
    // the same split and batch order on every rank
    let mut data_rng = Rng::new(cfg.seed);
    let order: Vec<i64> = data_rng.permutation(n)?.into_iter().map(|i| i as i64).collect();
    let n_test = n / 5;
    let (test_idx, train_idx) = order.split_at(n_test);
    let (x_test, y_test) = (
        x.gather(&Tensor::vector(test_idx), 0)?,
        y.gather(&Tensor::vector(test_idx), 0)?,
    );
    let (x_train, y_train) = (
        x.gather(&Tensor::vector(train_idx), 0)?,
        y.gather(&Tensor::vector(train_idx), 0)?,
    );

    // each rank its own initial weights and dropout masks; rank 0's weights win
    gradtape::nn::reset_names();
    let model = digits::build_model(&mut Rng::new(cfg.seed + 1 + rank as u64))?;
    broadcast_variables(world, &model.variables(), 0)?;
    let vars = model.trainable_variables();
    let mut opt = DistributedOptimizer::new(Adam::new(cfg.learning_rate).with_name("adam"), world.duplicate());
    if rank == 0 {
        println!(
            "digits_mpi: {size} ranks, {} train / {n_test} test images, {} epochs of batches of {} ({} per rank)",
            n - n_test,
            cfg.epochs,
            cfg.batch_size,
            cfg.batch_size / size
        );
    }
    let start = Instant::now();
    for epoch in 1..=cfg.epochs {
        // [loss · rows, correct, rows] of this rank's shards, summed over ranks
        let mut sums = [0.0f64; 3];
        for rows in random::batches(n - n_test, cfg.batch_size, Some(&mut data_rng))? {
            let mine = shard(&rows, rank, size);
            if mine.is_empty() {
                return Err(bad("digits_mpi", "a batch smaller than the number of ranks"));
            }
            let idx = Tensor::vector(&mine);
            let (xb, yb) = (x_train.gather(&idx, 0)?, y_train.gather(&idx, 0)?);
            let tape = GradientTape::new();
            let (loss, logits) = tape.record(|| shard_loss(&model, &xb, &yb, true, rows.len(), size))?;
            opt.minimize(&tape, &loss, &vars)?;
            let mut acc = metrics::SparseCategoricalAccuracy::default();
            acc.update(&yb, &logits)?;
            // undo the shard weight: loss · rows of the shard
            sums[0] += loss.item()? * rows.len() as f64 / size as f64;
            sums[1] += acc.result() * mine.len() as f64;
            sums[2] += mine.len() as f64;
        }
        world.all_reduce_sum(BufferMut::F64(&mut sums))?;
        if rank == 0 {
            let test = digits::accuracy(&model, &x_test, &y_test)?;
            println!(
                "epoch {epoch:>2}: loss {:.4}, train accuracy {:.2} %, test accuracy {:.2} %",
                sums[0] / sums[2],
                100.0 * sums[1] / sums[2],
                100.0 * test
            );
        }
    }
    let test = digits::accuracy(&model, &x_test, &y_test)?;
    // the replicas must have stayed equal: compare everyone's accuracy
    let mut all = [test];
    world.all_reduce_sum(BufferMut::F64(&mut all))?;
    if (all[0] / size as f64 - test).abs() > 1e-12 {
        return Err(bad("digits_mpi", "the ranks' models diverged"));
    }
    if rank == 0 {
        let t = opt.last_traffic();
        println!(
            "trained in {:.2} s on {size} ranks: test accuracy {:.2} % ({} bytes all-reduced per step in {} collective calls)",
            start.elapsed().as_secs_f64(),
            100.0 * test,
            t.allreduce_bytes,
            t.calls
        );
    }
    Ok(())
}

/// Largest `|a - b|` over two gradient lists (densified), and largest `|b|`.
fn max_diff(a: &[Option<Gradient>], b: &[Option<Gradient>]) -> Result<(f64, f64)> {
    let (mut diff, mut scale) = (0.0f64, 0.0f64);
    if a.len() != b.len() {
        return Err(bad("check", "gradient lists of different lengths"));
    }
    for (a, b) in a.iter().zip(b) {
        let (Some(a), Some(b)) = (a, b) else {
            return Err(bad("check", "a missing gradient"));
        };
        let (a, b) = (a.to_dense()?.to_vec_f64(), b.to_dense()?.to_vec_f64());
        if a.len() != b.len() {
            return Err(bad("check", "gradients of different sizes"));
        }
        for (x, y) in a.iter().zip(&b) {
            diff = diff.max((x - y).abs());
            scale = scale.max(y.abs());
        }
    }
    Ok((diff, scale))
}

fn check_gradients(world: &SimpleCommunicator) -> Result<bool> {
    let (rank, size) = (world.this_rank(), world.num_ranks());
    let (x, y) = digits::load_digits(digits::DATA)?;
    let batch: Vec<i64> = (0..32).collect();
    let mine = shard(&batch, rank, size);
    let (xb, yb) = (
        x.gather(&Tensor::vector(&batch), 0)?,
        y.gather(&Tensor::vector(&batch), 0)?,
    );
    let (xs, ys) = (
        x.gather(&Tensor::vector(&mine), 0)?,
        y.gather(&Tensor::vector(&mine), 0)?,
    );
    gradtape::nn::reset_names();
    let model = digits::build_model(&mut Rng::new(7 + rank as u64))?;
    broadcast_variables(world, &model.variables(), 0)?;
    let vars = model.trainable_variables();
    // dense: the model's gradients (no dropout), shards averaged vs whole batch
    let grads = |xb: &Tensor, yb: &Tensor, weight_size: usize| -> Result<Vec<Option<Gradient>>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| Ok(shard_loss(&model, xb, yb, false, batch.len(), weight_size)?.0))?;
        tape.sparse_gradient(&loss, &vars)
    };
    let averaged = allreduce_gradients(world, &grads(&xs, &ys, size)?)?;
    let whole = grads(&xb, &yb, 1)?;
    let (dense_diff, dense_scale) = max_diff(&averaged, &whole)?;

    // sparse: an embedding table's rows, looked up by each example's label
    let table = Variable::new(Tensor::from_vec(
        (0..50 * 8)
            .map(|i| ((i * 37 % 101) as f64 / 50.0 - 1.0) * (1.0 + rank as f64))
            .collect::<Vec<f64>>(),
        &[50, 8],
    )?);
    broadcast_variables(world, std::slice::from_ref(&table), 0)?;
    let ids = |rows: &[i64]| Tensor::vector(&rows.iter().map(|&i| i * 7 % 50).collect::<Vec<_>>());
    let sparse = |rows: &[i64], weight_size: usize| -> Result<Vec<Option<Gradient>>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let e = table.read().gather(&ids(rows), 0)?;
            e.square()?
                .sum_all()?
                .mul_scalar(weight_size as f64 / batch.len() as f64)
        })?;
        tape.sparse_gradient(&loss, std::slice::from_ref(&table))
    };
    let averaged_sparse = allreduce_gradients(world, &sparse(&mine, size)?)?;
    let rows = match &averaged_sparse[0] {
        Some(Gradient::Sparse(s)) => s.indices().numel(),
        _ => return Err(bad("check", "the averaged embedding gradient is not sparse")),
    };
    let (sparse_diff, sparse_scale) = max_diff(&averaged_sparse, &sparse(&batch, 1)?)?;

    // ranks passing different shapes: an error on every rank, not a hang
    let odd = Tensor::zeros(&[3 + rank.min(1)], DType::F32);
    let mismatch = allreduce_gradients(world, &[Some(Gradient::Dense(odd))]);

    let dense_ok = dense_diff <= 1e-5 * dense_scale;
    let sparse_ok = sparse_diff <= 1e-12 * sparse_scale && rows == batch.len();
    let mismatch_ok = size == 1 || mismatch.is_err();
    println!(
        "rank {rank}/{size}: dense max|diff| {dense_diff:.3e} (max|g| {dense_scale:.3e}) {}; \
         sparse max|diff| {sparse_diff:.3e} (max|g| {sparse_scale:.3e}, {rows} rows) {}; mismatch: {}",
        if dense_ok { "ok" } else { "FAILED" },
        if sparse_ok { "ok" } else { "FAILED" },
        match &mismatch {
            Err(e) => e.to_string(),
            Ok(_) if size == 1 => "n/a on 1 rank".into(),
            Ok(_) => "FAILED: no error".into(),
        }
    );
    Ok(dense_ok && sparse_ok && mismatch_ok)
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let universe = mpi::initialize().ok_or("MPI was already initialised")?;
    let world = universe.world();
    if std::env::args().any(|a| a == "--check-gradients") {
        let ok = check_gradients(&world)?;
        let mut all = [i32::from(ok)];
        world.all_reduce_sum(BufferMut::I32(&mut all))?;
        if all[0] as usize != world.num_ranks() {
            return Err("gradient check failed".into());
        }
        println!("rank {}: gradient check passed", world.this_rank());
    } else {
        train(&world)?;
    }
    Ok(())
}
