//! Sparse gradients (IndexedSlices): the gradient of gather along axis 0 is
//! a set of rows, aggregated as TensorFlow does.

use gradtape::{DType, Error, Gradient, GradientTape, IndexedSlices, Result, Tensor, Variable};

fn idx(v: &[i64]) -> Tensor {
    Tensor::vector(v)
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// The example: three gathers of one table multiplied.
#[test]
fn product_of_gathers_has_a_sparse_gradient_with_duplicates_kept() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[4, 2])?;
    let tape = GradientTape::new();
    let f = tape.record(|| {
        tape.watch(&x);
        let a = x.gather(&idx(&[0, 1]), 0)?;
        let b = x.gather(&idx(&[2, 3]), 0)?;
        let c = x.gather(&idx(&[1, 3]), 0)?;
        a.mul(&b)?.mul(&c)?.sum_all()
    })?;
    let g = tape.sparse_gradient(&f, &x)?.expect("connected");
    let s = g.as_sparse().expect("three sparse terms stay sparse");
    // concatenated, not merged: six rows, indices 1 and 3 twice
    assert_eq!(s.values().shape(), &[6, 2]);
    assert_eq!(s.dense_shape(), &[4, 2]);
    assert_eq!(sorted(s.indices().to_vec_f64()), vec![0.0, 1.0, 1.0, 2.0, 3.0, 3.0]);
    assert_eq!(
        g.to_dense()?.to_vec::<f32>()?,
        vec![15.0, 24.0, 54.0, 76.0, 3.0, 8.0, 42.0, 64.0]
    );
    Ok(())
}

#[test]
fn plain_gradient_is_the_dense_form() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
    let tape = GradientTape::new();
    let f = tape.record(|| {
        tape.watch(&x);
        x.gather(&idx(&[2, 2, 0]), 0)?.square()?.sum_all()
    })?;
    let g = tape.gradient(&f, &x)?.unwrap();
    // rows: 0 once (2x), 2 twice (2 * 2x)
    assert_eq!(g.to_vec::<f64>()?, vec![2.0, 4.0, 0.0, 0.0, 20.0, 24.0]);
    Ok(())
}

#[test]
fn a_gather_of_a_gather_is_one_indexed_slices_with_composed_indices() -> Result<()> {
    let x = Tensor::from_vec((0..15).map(|v| v as f64).collect::<Vec<_>>(), &[5, 3])?;
    let tape = GradientTape::new();
    let f = tape.record(|| {
        tape.watch(&x);
        let inner = x.gather(&idx(&[4, 1, 0, 2]), 0)?;
        inner.gather(&idx(&[0, 2, 2]), 0)?.sum_all()
    })?;
    let g = tape.sparse_gradient(&f, &x)?.unwrap();
    let s = g.as_sparse().expect("gather of gather stays sparse");
    assert_eq!(s.indices().to_vec_f64(), vec![4.0, 0.0, 0.0]);
    assert_eq!(s.values().shape(), &[3, 3]);
    let mut want = vec![0.0; 15];
    want[12..15].copy_from_slice(&[1.0; 3]);
    want[0..3].copy_from_slice(&[2.0; 3]);
    assert_eq!(g.to_dense()?.to_vec::<f64>()?, want);
    Ok(())
}

#[test]
fn multi_dimensional_indices_flatten_and_compose() -> Result<()> {
    let x = Tensor::from_vec((0..8).map(|v| v as f64).collect::<Vec<_>>(), &[4, 2])?;
    let ids = Tensor::from_vec(vec![3i64, 1, 1, 0], &[2, 2])?;
    let tape = GradientTape::new();
    let f = tape.record(|| {
        tape.watch(&x);
        // [2, 2, 2] -> pick row 1 of the index matrix: params rows 1, 0
        let w = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
        x.gather(&ids, 0)?.gather(&idx(&[1]), 0)?.mul(&w)?.sum_all()
    })?;
    let g = tape.sparse_gradient(&f, &x)?.unwrap();
    let s = g.as_sparse().expect("sparse");
    assert_eq!(s.indices().to_vec_f64(), vec![1.0, 0.0]);
    assert_eq!(
        g.to_dense()?.to_vec::<f64>()?,
        vec![3.0, 4.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0]
    );
    Ok(())
}

#[test]
fn any_dense_term_makes_the_sum_dense() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    let tape = GradientTape::new();
    let f = tape.record(|| {
        tape.watch(&x);
        x.gather(&idx(&[1]), 0)?.sum_all()?.add(&x.square()?.sum_all()?)
    })?;
    let g = tape.sparse_gradient(&f, &x)?.unwrap();
    assert!(!g.is_sparse());
    assert_eq!(g.to_dense()?.to_vec::<f64>()?, vec![2.0, 4.0, 7.0, 9.0]);
    Ok(())
}

#[test]
fn gather_along_another_axis_is_dense() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    let tape = GradientTape::new();
    let f = tape.record(|| {
        tape.watch(&x);
        x.gather(&idx(&[1]), 1)?.sum_all()
    })?;
    let g = tape.sparse_gradient(&f, &x)?.unwrap();
    assert!(!g.is_sparse());
    assert_eq!(g.to_dense()?.to_vec::<f64>()?, vec![0.0, 1.0, 0.0, 1.0]);
    Ok(())
}

/// An embedding table read from a variable: the gradient is rows only, and
/// an SGD step applies it without a dense delta.
#[test]
fn embedding_table_gradient_is_never_dense() -> Result<()> {
    let rows = 200_000;
    let table = Variable::new(Tensor::ones(&[rows, 16], DType::F32));
    let ids = Tensor::from_vec(vec![5i64, 199_999, 5], &[3])?;
    let tape = GradientTape::new();
    let loss = tape.record(|| table.read().gather(&ids, 0)?.mul_scalar(2.0)?.sum_all())?;
    let g = tape.sparse_gradient(&loss, &table)?.unwrap();
    let s = g.as_sparse().expect("a variable read passes sparse cotangents through");
    assert_eq!(s.values().shape(), &[3, 16]);
    assert_eq!(s.values().to_vec::<f32>()?, vec![2.0; 48]);
    table.scatter_sub(&s.scale(0.5)?)?;
    let v = table.read();
    let picked = v.gather(&Tensor::vector(&[5i64, 199_999, 0]), 0)?.to_vec::<f32>()?;
    assert_eq!(&picked[..16], &[-1.0; 16]); // twice: 1 - 2 * 1
    assert_eq!(&picked[16..32], &[0.0; 16]);
    assert_eq!(&picked[32..], &[1.0; 16]);
    Ok(())
}

/// Sparse aggregation is made of differentiable ops: a gradient through
/// sparse rows can be differentiated again.
#[test]
fn second_order_through_sparse_gradients() -> Result<()> {
    let x = Tensor::from_vec(vec![0.5f64, -1.0, 2.0, 3.0], &[2, 2])?;
    let outer = GradientTape::new();
    let inner = GradientTape::new();
    let g = outer.record(|| -> Result<Tensor> {
        outer.watch(&x);
        let f = inner.record(|| {
            inner.watch(&x);
            let a = x.gather(&idx(&[0]), 0)?;
            let b = x.gather(&idx(&[0]), 0)?;
            a.mul(&b)?.mul(&a)?.sum_all() // sum of x0^3
        })?;
        inner.gradient(&f, &x)?.unwrap().sum_all() // sum 3 x0^2
    })?;
    let h = outer.gradient(&g, &x)?.unwrap();
    assert_eq!(h.to_vec::<f64>()?, vec![3.0, -6.0, 0.0, 0.0]);
    Ok(())
}

#[test]
fn several_sources_mixing_sparse_dense_and_unconnected() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    let w = Tensor::scalar(3.0f64);
    let z = Tensor::scalar(1.0f64);
    let tape = GradientTape::new();
    let f = tape.record(|| {
        tape.watch(&(&x, &w, &z));
        x.gather(&idx(&[0]), 0)?.mul(&w)?.sum_all()
    })?;
    let (gx, gw, gz) = tape.sparse_gradient(&f, &(&x, &w, &z))?;
    assert!(gx.as_ref().unwrap().is_sparse());
    assert_eq!(gx.unwrap().to_dense()?.to_vec::<f64>()?, vec![3.0, 3.0, 0.0, 0.0]);
    assert_eq!(gw.unwrap().to_dense()?.to_scalar::<f64>()?, 3.0);
    assert!(gz.is_none());
    Ok(())
}

#[test]
fn gradient_sum_rules() -> Result<()> {
    let a = IndexedSlices::new(Tensor::vector(&[1.0f64]).reshape(&[1, 1])?, idx(&[1]), &[3, 1])?;
    let b = IndexedSlices::new(Tensor::vector(&[2.0f64]).reshape(&[1, 1])?, idx(&[1]), &[3, 1])?;
    let s = Gradient::from(a.clone()).accumulate(Gradient::from(b))?;
    assert!(s.is_sparse());
    assert_eq!(s.to_dense()?.to_vec::<f64>()?, vec![0.0, 3.0, 0.0]);
    let d = Gradient::from(Tensor::vector(&[1.0f64, 1.0, 1.0]).reshape(&[3, 1])?).accumulate(Gradient::from(a))?;
    assert!(!d.is_sparse());
    assert_eq!(d.to_dense()?.to_vec::<f64>()?, vec![1.0, 2.0, 1.0]);
    assert_eq!(d.shape(), &[3, 1]);
    Ok(())
}

#[test]
fn indexed_slices_reject_inconsistent_parts() {
    let v = Tensor::ones(&[2, 3], DType::F32);
    let e = IndexedSlices::new(v.clone(), Tensor::vector(&[0.0f32, 1.0]), &[4, 3]).unwrap_err();
    assert!(
        e.to_string().contains("IndexedSlices") && e.to_string().contains("F32"),
        "{e}"
    );
    let e = IndexedSlices::new(v.clone(), idx(&[0, 1]), &[4, 2]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "IndexedSlices",
                ..
            }
        ),
        "{e}"
    );
    let e = IndexedSlices::new(v.clone(), idx(&[0, 4]), &[4, 3]).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { index: 4, dim: 4, .. }), "{e}");
    let e = IndexedSlices::new(v, idx(&[0, 1]), &[]).unwrap_err();
    assert!(e.to_string().contains("rank"), "{e}");
    let table = Variable::new(Tensor::zeros(&[3, 3], DType::F32));
    let rows = IndexedSlices::new(Tensor::ones(&[1, 2], DType::F32), idx(&[0]), &[3, 2]).unwrap();
    let e = table.scatter_sub(&rows).unwrap_err();
    assert!(matches!(e, Error::VariableMismatch { op: "scatter_sub", .. }), "{e}");
}

/// The sparse rule keeps the indices, never the params.
#[test]
fn the_rule_does_not_keep_the_table() -> Result<()> {
    let x = Tensor::ones(&[100, 4], DType::F32);
    let weak = x.downgrade();
    let tape = GradientTape::new();
    let f = tape.record(|| {
        tape.watch(&x);
        x.gather(&idx(&[1, 2]), 0)?.sum_all()
    })?;
    drop(x);
    assert!(!weak.is_alive(), "the tape keeps the gathered table alive");
    let _ = f;
    Ok(())
}

/// Values from TensorFlow 2.21: `v = tf.Variable(reshape(arange(10.), [5, 2]))`
/// (float64); `old = v.read_value()`;
/// `v.scatter_add(IndexedSlices([[1, 2], [10, 20], [100, 200]], [3, 0, 3]))`
/// -> `[10, 21, 2, 3, 4, 5, 107, 209, 8, 9]` (duplicates accumulate), `old`
/// unchanged; then `v.scatter_sub(IndexedSlices([[1, 1], [2, 2]], [4, 4]))`
/// -> `[10, 21, 2, 3, 4, 5, 107, 209, 5, 6]`.
#[test]
fn scatter_updates_accumulate_duplicates_and_leave_earlier_reads_alone() -> Result<()> {
    let v = Variable::new(Tensor::from_vec((0..10).map(|x| x as f64).collect(), &[5, 2])?);
    let old = v.read();
    let add = IndexedSlices::new(
        Tensor::from_vec(vec![1.0f64, 2.0, 10.0, 20.0, 100.0, 200.0], &[3, 2])?,
        idx(&[3, 0, 3]),
        &[5, 2],
    )?;
    v.scatter_add(&add)?;
    assert_eq!(
        v.read().to_vec::<f64>()?,
        vec![10.0, 21.0, 2.0, 3.0, 4.0, 5.0, 107.0, 209.0, 8.0, 9.0]
    );
    assert_eq!(old.to_vec::<f64>()?, (0..10).map(|x| x as f64).collect::<Vec<_>>());
    let sub = IndexedSlices::new(
        Tensor::from_vec(vec![1.0f64, 1.0, 2.0, 2.0], &[2, 2])?,
        idx(&[4, 4]),
        &[5, 2],
    )?;
    v.scatter_sub(&sub)?;
    assert_eq!(
        v.read().to_vec::<f64>()?,
        vec![10.0, 21.0, 2.0, 3.0, 4.0, 5.0, 107.0, 209.0, 5.0, 6.0]
    );
    // integer tables wrap, as integer arithmetic does elsewhere
    let c = Variable::new(Tensor::from_vec(vec![i32::MAX, 0], &[2, 1])?);
    c.scatter_add(&IndexedSlices::new(
        Tensor::from_vec(vec![1i32], &[1, 1])?,
        idx(&[0]),
        &[2, 1],
    )?)?;
    assert_eq!(c.read().to_vec::<i32>()?, vec![i32::MIN, 0]);
    Ok(())
}

/// TensorFlow 2.21: `w = tf.Variable(reshape(arange(10.), [5, 2]))`;
/// `tf.keras.optimizers.SGD(0.5).apply_gradients([(IndexedSlices([[1, 2],
/// [4, 8], [1, 1]], [1, 1, 4], [5, 2]), w)])` -> `[0, 1, -0.5, -2, 4, 5, 6,
/// 7, 7.5, 8.5]`.
#[test]
fn a_sparse_sgd_step_needs_no_rebuild_by_hand() -> Result<()> {
    let g = IndexedSlices::new(
        Tensor::from_vec(vec![1.0f64, 2.0, 4.0, 8.0, 1.0, 1.0], &[3, 2])?,
        idx(&[1, 1, 4]),
        &[5, 2],
    )?;
    let want = vec![0.0, 1.0, -0.5, -2.0, 4.0, 5.0, 6.0, 7.0, 7.5, 8.5];
    let start = || Tensor::from_vec((0..10).map(|x| x as f64).collect(), &[5, 2]);
    let w = Variable::new(start()?);
    w.apply_sparse_gradient_descent(0.5, &g)?;
    assert_eq!(w.read().to_vec::<f64>()?, want);
    let w = Variable::new(start()?);
    w.scatter_sub(&g.scale(0.5)?)?;
    assert_eq!(w.read().to_vec::<f64>()?, want);
    // f32 too; the wrong dense shape is an error naming the op
    let w32 = Variable::new(start()?.cast(DType::F32)?);
    let g32 = IndexedSlices::new(g.values().cast(DType::F32)?, g.indices().clone(), &[5, 2])?;
    w32.apply_sparse_gradient_descent(0.5, &g32)?;
    assert_eq!(w32.read().to_vec_f64(), want);
    let e = w.apply_sparse_gradient_descent(0.5, &g32).unwrap_err();
    assert!(
        matches!(
            e,
            Error::VariableMismatch {
                op: "apply_sparse_gradient_descent",
                ..
            }
        ),
        "{e}"
    );
    // integer tables take an exact learning rate only
    let wi = Variable::new(Tensor::from_vec(vec![5i64, 5], &[2, 1])?);
    let gi = IndexedSlices::new(Tensor::from_vec(vec![2i64], &[1, 1])?, idx(&[1]), &[2, 1])?;
    wi.apply_sparse_gradient_descent(2.0, &gi)?;
    assert_eq!(wi.read().to_vec::<i64>()?, vec![5, 1]);
    assert!(wi.apply_sparse_gradient_descent(0.5, &gi).is_err());
    Ok(())
}
