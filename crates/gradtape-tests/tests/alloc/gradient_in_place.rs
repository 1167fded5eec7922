//! Two gradients written into buffers they already own, where a language
//! model's step made new ones of its largest sizes (the `gpt` example at
//! `--vocab 32768`: `[1024, 32768]` logits, a `[32768, 256]` tied table):
//!
//! - the sparse cross-entropy's gradient, written over the softmax its
//!   forward pass kept (no second buffer of the logits' size);
//! - a tied embedding table's gradient, the lookup's rows added into the
//!   output projection's dense gradient (no zero table, scatter and sum).
//!
//! Each is counted with the buffer cache off (so that every buffer of the
//! size is one `malloc`) at two shapes and dtypes, and its values checked
//! bit for bit against the way that allocates: a persistent tape's second
//! call of the cross-entropy's rule (the softmax then spent: from the
//! logits), and the two terms' gradients taken apart and summed densely.

use gradtape::{set_buffer_cache_limit, DType, GradientTape, Result, Tensor, Variable};

use crate::common::values::bits;
use crate::counting::{buffers_of, serial};

/// Deterministic values in about `[-scale, scale]`.
fn values(n: usize, scale: f64, seed: f64) -> Vec<f64> {
    (0..n).map(|i| (0.37 * i as f64 + seed).sin() * scale).collect()
}

/// Labels in `0..classes`, repeats included.
fn labels(rows: usize, classes: usize) -> Vec<i64> {
    (0..rows).map(|r| ((r * 7919 + 3) % classes) as i64).collect()
}

/// Restores the cache's default limit when dropped.
struct CacheOff;
impl CacheOff {
    fn new() -> CacheOff {
        set_buffer_cache_limit(0);
        CacheOff
    }
}
impl Drop for CacheOff {
    fn drop(&mut self) {
        set_buffer_cache_limit(256 << 20);
    }
}

fn xent_case(rows: usize, classes: usize, dtype: DType) -> Result<()> {
    let _off = CacheOff::new();
    let x = Variable::new(Tensor::from_vec(values(rows * classes, 4.0, 0.5), &[rows, classes])?.cast(dtype)?);
    let y = Tensor::from_vec(labels(rows, classes), &[rows])?;
    let tape = GradientTape::persistent();
    let loss = tape.record(|| Tensor::sparse_softmax_cross_entropy_with_logits(&y, &x.read())?.mean_all())?;
    let bytes = rows * classes * dtype.size_in_bytes();
    let (n, first) = buffers_of(bytes, || tape.gradient(&loss, &x));
    // the gradient is the kept softmax's buffer, rewritten
    assert_eq!(n, 0, "[{rows}, {classes}] {dtype:?}: buffers of the logits' size");
    // the rule again: the softmax is spent, so from the logits (a new
    // buffer), the same bits
    let (n2, second) = buffers_of(bytes, || tape.gradient(&loss, &x));
    assert_eq!(n2, 1, "the second call computes from the logits");
    let (first, second) = (first?.expect("a gradient"), second?.expect("a gradient"));
    assert_eq!(bits(&first), bits(&second));
    // and the composite's values (softmax − one_hot) / rows
    let p = x.read().softmax(-1)?.to_vec_f64();
    let want: Vec<f64> = (0..rows * classes)
        .map(|i| (p[i] - f64::from(labels(rows, classes)[i / classes] == (i % classes) as i64)) / rows as f64)
        .collect();
    let tol = if dtype == DType::F32 { 1e-7 } else { 1e-15 };
    for (g, w) in first.to_vec_f64().iter().zip(&want) {
        assert!((g - w).abs() <= tol, "{g} vs {w}");
    }
    Ok(())
}

#[test]
fn the_sparse_cross_entropy_gradient_is_written_over_its_kept_softmax() -> Result<()> {
    let _serial = serial();
    xent_case(37, 1531, DType::F32)?;
    xent_case(9, 4099, DType::F64)
}

/// The tied table's gradient (lookup rows + projection) and that of the
/// two terms apart, summed densely.
fn tied_case(vocab: usize, width: usize, dtype: DType) -> Result<()> {
    let _off = CacheOff::new();
    let table = Variable::new(Tensor::from_vec(values(vocab * width, 0.5, 1.5), &[vocab, width])?.cast(dtype)?);
    // 40 ids with repeats: a row's lookups add in their order
    let ids = Tensor::from_vec(labels(40, vocab / 3), &[40])?;
    let lookup = |t: &Tensor| t.embedding_lookup(&ids);
    let project = |h: &Tensor, t: &Tensor| h.tanh()?.matmul_with(t, false, true)?.mul(&h.sum(&[-1], true)?.sin()?);
    let tape = GradientTape::new();
    let loss = tape.record(|| project(&lookup(&table.read())?, &table.read())?.sum_all())?;
    let bytes = vocab * width * dtype.size_in_bytes();
    let (n, tied) = buffers_of(bytes, || tape.sparse_gradient(&loss, &table));
    // the projection's gradient alone: the rows go into it
    assert_eq!(n, 1, "[{vocab}, {width}] {dtype:?}: buffers of the table's size");
    let tied = tied?.expect("a gradient").into_dense()?;
    // apart: the lookup's rows (the projection's table a constant) and
    // the projection's (the looked-up rows a constant)
    let h = lookup(&table.read())?;
    let t1 = GradientTape::new();
    let l1 = t1.record(|| project(&lookup(&table.read())?, &table.read().stop_gradient())?.sum_all())?;
    let rows = t1.sparse_gradient(&l1, &table)?.expect("rows");
    let t2 = GradientTape::new();
    let l2 = t2.record(|| project(&h, &table.read())?.sum_all())?;
    let dense = t2.gradient(&l2, &table)?.expect("a gradient");
    assert!(rows.is_sparse());
    let want = dense.add(&rows.to_dense()?)?;
    assert_eq!(bits(&tied), bits(&want));
    Ok(())
}

#[test]
fn a_tied_tables_lookup_rows_are_added_into_its_dense_gradient() -> Result<()> {
    let _serial = serial();
    tied_case(4099, 24, DType::F32)?;
    tied_case(1031, 8, DType::F64)
}
