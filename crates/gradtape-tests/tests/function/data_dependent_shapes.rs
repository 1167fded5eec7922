//! Traced functions whose inner shapes the values decide (`boolean_mask`,
//! `unique`, `argwhere`, `bincount`): a call whose values give another
//! count than the traced call's must give eager's values, not the traced
//! shapes' (a mean divided by the traced count, a gradient broadcast to
//! the traced length).

use gradtape::{function, GradientTape, Result, Tensor};

fn masked_mean(x: &Tensor) -> Result<Tensor> {
    x.boolean_mask(&x.gt_scalar(0.0)?)?.tanh()?.mean_all()
}

#[test]
fn a_masked_mean_traced_follows_the_count_of_each_call() -> Result<()> {
    let f = function(masked_mean);
    let a = Tensor::vector(&[1.0f64, -1.0, 2.0, -3.0]);
    let b = Tensor::vector(&[1.0f64, 2.0, 3.0, -3.0]);
    for x in [&a, &b, &a] {
        let want = masked_mean(x)?.item()?;
        let got = f.call(x)?.item()?;
        assert_eq!(got, want, "{:?}", x.to_vec_f64());
        let grad = |call: &dyn Fn(&Tensor) -> Result<Tensor>| -> Result<Vec<f64>> {
            let tape = GradientTape::new();
            let y = tape.record(|| {
                tape.watch(x);
                call(x)
            })?;
            Ok(tape.gradient(&y, &[x])?[0].as_ref().expect("connected").to_vec_f64())
        };
        assert_eq!(grad(&|x| f.call(x))?, grad(&|x| masked_mean(x))?);
    }
    Ok(())
}

/// `unique`, `bincount` and the sorted segment sums: each count read from
/// the values, each call's own.
#[test]
fn unique_bincount_and_segments_traced_follow_each_call() -> Result<()> {
    fn counts(x: &Tensor) -> Result<Tensor> {
        let steps = x.floor()?;
        let (u, _) = steps.unique()?;
        let ids = steps.relu()?.cast(gradtape::DType::I64)?;
        let bins = ids.bincount(None, 1)?.cast(x.dtype())?;
        let segs = x.segment_sum(&ids)?;
        u.mean_all()?.add(&bins.mean_all()?)?.add(&segs.mean_all()?)
    }
    let f = function(counts);
    // 2 distinct steps, 2 bins, 2 segments; then 4 of each
    let a = Tensor::vector(&[0.5f64, 0.25, 1.5, 1.75]);
    let b = Tensor::vector(&[0.5f64, 1.5, 2.5, 3.25]);
    for x in [&a, &b, &a] {
        assert_eq!(f.call(x)?.item()?, counts(x)?.item()?, "{:?}", x.to_vec_f64());
    }
    Ok(())
}

/// A training step whose loss is the mean over the examples a mask keeps
/// (`tf.boolean_mask(per_example, mask)`, as TensorFlow code often does):
/// the count changes before the update writes the weight, so each call
/// whose count differs from the trace's is traced again, and the weight
/// follows eager's twin step for step.
#[test]
fn a_training_step_on_a_masked_loss_follows_eager_as_counts_change() -> Result<()> {
    fn step(w: &gradtape::Variable, (x, y): &(Tensor, Tensor)) -> Result<Tensor> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let per = x.mul(&w.read())?.sub(y)?.square()?;
            per.boolean_mask(&y.gt_scalar(0.0)?)?.mean_all()
        })?;
        let g = tape.gradient(&loss, w)?.expect("w is read");
        w.assign_sub(&g.mul_scalar(0.1)?)?;
        Ok(loss)
    }
    let (w, twin) = (
        gradtape::Variable::new(Tensor::scalar(0.5f64)),
        gradtape::Variable::new(Tensor::scalar(0.5f64)),
    );
    let f = {
        let w = w.clone();
        function(move |xy: &(Tensor, Tensor)| step(&w, xy))
    };
    let x = Tensor::vector(&[1.0f64, 2.0, -1.0, 0.5]);
    // kept: 2, 3, 2, 1 examples
    for y in [
        [1.0, -1.0, 2.0, -1.0],
        [1.0, 3.0, 2.0, -1.0],
        [1.0, 3.0, -2.0, -1.0],
        [-1.0, -3.0, -2.0, 4.0],
    ] {
        let y = Tensor::vector(&y);
        let want = step(&twin, &(x.clone(), y.clone()))?.item()?;
        assert_eq!(f.call(&(x.clone(), y))?.item()?, want);
        assert_eq!(w.read().item()?, twin.read().item()?);
    }
    Ok(())
}

/// A function that writes a variable before the shape its values decide
/// is not traced again (those writes ran already): a call whose mask keeps
/// another count is an error naming the op and both shapes, never the
/// traced count's numbers.
#[test]
fn a_changed_count_in_a_function_that_writes_state_is_an_error() -> Result<()> {
    let v = gradtape::Variable::new(Tensor::scalar(0.0f64));
    let w = v.clone();
    let f = function(move |x: &Tensor| {
        w.assign_add(&Tensor::scalar(1.0f64))?;
        masked_mean(x)
    });
    let a = Tensor::vector(&[1.0f64, -1.0, 2.0, -3.0]);
    let b = Tensor::vector(&[1.0f64, 2.0, 3.0, -3.0]);
    assert_eq!(f.call(&a)?.item()?, masked_mean(&a)?.item()?);
    let e = f.call(&b).expect_err("the traced count's mean").to_string();
    assert!(
        e.contains("Where") && e.contains("[3, 1]") && e.contains("[2, 1]"),
        "{e}"
    );
    Ok(())
}

/// A step the traced code took by a masked value's shape alone (its
/// values unused, so dead in the graph): a call whose mask keeps another
/// count takes the other step, as eager does (seed 5703's `bf16` program
/// 507: a `unique` whose count decided whether a later `complex` fitted).
#[test]
fn a_step_decided_by_a_count_alone_follows_each_call() -> Result<()> {
    fn by_count(x: &Tensor) -> Result<Tensor> {
        let kept = x.boolean_mask(&x.gt_scalar(0.0)?)?;
        match kept.shape()[0] {
            2 => x.sin(),
            _ => x.cos(),
        }
    }
    let f = function(by_count);
    let a = Tensor::vector(&[1.0f64, -1.0, 2.0, -3.0]);
    let b = Tensor::vector(&[1.0f64, 2.0, 3.0, -3.0]);
    for x in [&a, &b, &a] {
        assert_eq!(
            f.call(x)?.to_vec_f64(),
            by_count(x)?.to_vec_f64(),
            "{:?}",
            x.to_vec_f64()
        );
    }
    Ok(())
}
