//! Times a sparse update of an embedding table: 1,024 rows of width 32
//! subtracted from a `vocab x 32` f32 table with `Variable::scatter_sub` and
//! `Variable::apply_sparse_gradient_descent`, at vocab 10k, 100k and 1M. The
//! update is written in place, so its cost should follow the rows, not the
//! vocab; for scale the table also shows a dense SGD step over the whole
//! table and the copy-on-write case (a read of the table still held).
//!
//! ```sh
//! cargo run --release --example sparse_update
//! ```

use std::time::Instant;

use gradtape::{DType, IndexedSlices, Result, Tensor, Variable};

const ROWS: usize = 1024;
const WIDTH: usize = 32;

/// The median time of `reps` runs of `f`, in microseconds.
fn median_us(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        f()?;
        t.push(start.elapsed().as_secs_f64() * 1e6);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[reps / 2])
}

fn main() -> Result<()> {
    println!("sparse update of {ROWS} rows x {WIDTH} (f32), median of repeated runs, microseconds\n");
    println!(
        "{:>9} | {:>12} | {:>12} | {:>12} | {:>19}",
        "vocab", "scatter_sub", "sparse SGD", "dense SGD", "scatter (read held)"
    );
    for vocab in [10_000usize, 100_000, 1_000_000] {
        let table = Variable::new(Tensor::random_uniform(&[vocab, WIDTH], -1.0, 1.0, DType::F32, 1)?);
        // distinct pseudo-random rows, some repeated
        let ids: Vec<i64> = (0..ROWS as u64)
            .map(|i| ((i * 2_654_435_761) % vocab as u64) as i64)
            .collect();
        let rows = IndexedSlices::new(
            Tensor::random_uniform(&[ROWS, WIDTH], -1e-3, 1e-3, DType::F32, 2)?,
            Tensor::vector(&ids),
            &[vocab, WIDTH],
        )?;
        let sub = median_us(200, || table.scatter_sub(&rows))?;
        let sgd = median_us(200, || table.apply_sparse_gradient_descent(0.1, &rows))?;
        let dense_grad = Tensor::random_uniform(&[vocab, WIDTH], -1e-3, 1e-3, DType::F32, 3)?;
        let dense = median_us(20, || table.apply_gradient_descent(0.1, &dense_grad))?;
        let held = median_us(10, || {
            let _read = table.read();
            table.scatter_sub(&rows)
        })?;
        println!("{vocab:>9} | {sub:>12.1} | {sgd:>12.1} | {dense:>12.1} | {held:>19.1}");
    }
    Ok(())
}
