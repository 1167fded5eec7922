//! GradientTape behaviour: recording scopes, watching, gradient's cases,
//! one-shot vs persistent, higher orders, variables and threads.

use gradtape::{DType, Error, GradientOptions, GradientTape, Result, SourceRef, Tensor, Unconnected, Variable};

fn val(t: &Option<Tensor>) -> Vec<f64> {
    t.as_ref().expect("a gradient").to_vec_f64()
}

#[test]
fn guard_scope_and_reentry_continue_the_same_tape() -> Result<()> {
    let x = Tensor::scalar(2.0f64);
    let tape = GradientTape::new();
    let y = {
        let _rec = tape.enter()?;
        tape.watch(&x);
        x.square()?
    };
    assert!(!tape.is_recording());
    // ops outside any scope are not recorded
    let _ignored = y.mul_scalar(100.0)?;
    // entering again continues the tape: y's history is still there
    let z = tape.record(|| y.mul(&x))?; // z = x³
    assert_eq!(val(&tape.gradient(&z, &x)?), vec![12.0]);
    Ok(())
}

#[test]
fn entering_a_recording_tape_is_an_error() -> Result<()> {
    let tape = GradientTape::new();
    let r = tape.record(|| tape.record(|| Ok(())));
    assert_eq!(r, Err(Error::TapeAlreadyRecording));
    // the failed inner enter did not disturb the outer scope
    assert!(!tape.is_recording());
    Ok(())
}

#[test]
fn stop_recording_outside_a_scope_is_an_error() {
    let tape = GradientTape::new();
    let r = tape.stop_recording(|| Ok(()));
    assert_eq!(r, Err(Error::TapeNotRecording));
}

#[test]
fn integer_sources_are_allowed_and_get_no_gradient() -> Result<()> {
    let i = Tensor::vector(&[1i32, 2]);
    let x = Tensor::vector(&[1.0f32, 2.0]);
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&[&i]);
        tape.watch(&x);
        x.mul(&i.cast(DType::F32)?)
    })?;
    let [gi, gx] = tape.gradient(&y, &[&i, &x])?;
    assert!(gi.is_none());
    assert_eq!(val(&gx), vec![1.0, 2.0]);
    let gi = tape.gradient_with(&y, &i, GradientOptions::default().unconnected(Unconnected::Zero))?;
    let gi = gi.unwrap();
    assert_eq!((gi.dtype(), gi.shape()), (DType::I32, &[2usize][..]));
    Ok(())
}

#[test]
fn several_targets_are_summed_and_a_target_source_gets_ones() -> Result<()> {
    let x = Tensor::vector(&[1.0f64, 2.0]);
    let tape = GradientTape::persistent();
    let (a, b) = tape.record(|| {
        tape.watch(&x);
        Ok((x.square()?, x.mul_scalar(3.0)?))
    })?;
    assert_eq!(val(&tape.gradient([&a, &b], &x)?), vec![5.0, 7.0]);
    // the target is itself the source
    assert_eq!(val(&tape.gradient(&x, &x)?), vec![1.0, 1.0]);
    // x appears as a target and upstream of another target
    assert_eq!(val(&tape.gradient([&x, &a], &x)?), vec![3.0, 5.0]);
    Ok(())
}

#[test]
fn intermediates_can_be_sources_and_repeats_get_their_gradient_twice() -> Result<()> {
    let x = Tensor::scalar(3.0f64);
    let tape = GradientTape::persistent();
    let (h, y) = tape.record(|| {
        tape.watch(&x);
        let h = x.square()?; // 9
        let y = h.mul_scalar(2.0)?.add(&x)?; // 2h + x
        Ok((h, y))
    })?;
    // dy/dh = 2 (x held fixed), dy/dx = 4x + 1
    let [gh, gx] = tape.gradient(&y, &[&h, &x])?;
    assert_eq!(val(&gh), vec![2.0]);
    assert_eq!(val(&gx), vec![13.0]);
    let g = tape.gradient(&y, &vec![x.clone(), x.clone()])?;
    assert_eq!(g.len(), 2);
    assert_eq!(val(&g[0]), vec![13.0]);
    assert_eq!(val(&g[1]), vec![13.0]);
    // tuples keep their structure
    let (gx, [gh2]) = tape.gradient(&y, &(&x, [&h]))?;
    assert_eq!((val(&gx), val(&gh2)), (vec![13.0], vec![2.0]));
    Ok(())
}

#[test]
fn output_gradients_weight_each_target() -> Result<()> {
    let x = Tensor::vector(&[1.0f32, 2.0]);
    let tape = GradientTape::new();
    let (a, b) = tape.record(|| {
        tape.watch(&x);
        Ok((x.square()?, x.sum_all()?))
    })?;
    let opts =
        GradientOptions::default().output_gradients(vec![Tensor::vector(&[1.0f32, 10.0]), Tensor::scalar(0.5f32)]);
    let g = tape.gradient_with([&a, &b], &x, opts)?;
    assert_eq!(val(&g), vec![2.5, 40.5]);
    Ok(())
}

#[test]
fn unconnected_sources_give_none_or_zeros_of_their_shape() -> Result<()> {
    let x = Tensor::vector(&[1.0f32, 2.0]);
    let c = Tensor::from_vec(vec![1.0f64; 6], &[2, 3])?;
    let v = Variable::new(Tensor::zeros(&[4], DType::F32));
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&x);
        tape.watch(&c);
        x.exp()
    })?;
    let gc = tape.gradient(&y, &c)?;
    assert!(gc.is_none());
    let opts = GradientOptions::default().unconnected(Unconnected::Zero);
    let (gc, gv) = tape.gradient_with(&y, &(&c, &v), opts)?;
    let (gc, gv) = (gc.unwrap(), gv.unwrap());
    assert_eq!((gc.shape(), gc.dtype()), (&[2usize, 3][..], DType::F64));
    assert_eq!(gc.to_vec::<f64>()?, vec![0.0; 6]);
    assert_eq!((gv.shape(), gv.dtype()), (&[4usize][..], DType::F32));
    Ok(())
}

#[test]
fn one_shot_tape_is_single_use() -> Result<()> {
    let x = Tensor::scalar(1.0f32);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        x.exp()
    })?;
    assert!(tape.gradient(&y, &x)?.is_some());
    let err = tape.gradient(&y, &x).unwrap_err();
    assert!(matches!(err, Error::TapeNotPersistent { .. }));
    assert!(err.to_string().contains("not persistent"), "{err}");
    // reset makes it usable again (as a fresh tape)
    tape.reset();
    assert!(tape.gradient(&y, &x)?.is_none());
    Ok(())
}

#[test]
fn gradient_inside_a_one_shot_scope_stops_recording() -> Result<()> {
    let x = Tensor::scalar(2.0f32);
    let tape = GradientTape::new();
    tape.record(|| {
        tape.watch(&x);
        let y = x.square()?;
        let g = tape.gradient(&y, &x)?;
        assert_eq!(val(&g), vec![4.0]);
        assert!(!tape.is_recording());
        Ok(())
    })?;
    Ok(())
}

#[test]
fn gradient_inside_a_persistent_scope_is_recorded() -> Result<()> {
    let x = Tensor::scalar(2.0f64);
    let tape = GradientTape::persistent();
    let dy = tape.record(|| {
        tape.watch(&x);
        let y = x.pow_scalar(3.0)?;
        Ok(tape.gradient(&y, &x)?.unwrap()) // 3x², recorded on this tape
    })?;
    assert_eq!(dy.to_scalar::<f64>()?, 12.0);
    assert_eq!(val(&tape.gradient(&dy, &x)?), vec![12.0]); // 6x
    Ok(())
}

#[test]
fn third_derivative_of_cube_is_six() -> Result<()> {
    let x = Tensor::scalar(1.7f64);
    let t1 = GradientTape::new();
    let t2 = GradientTape::new();
    let t3 = GradientTape::new();
    let d2 = t1.record(|| {
        t1.watch(&x);
        let d1 = t2.record(|| {
            t2.watch(&x);
            let y = t3.record(|| {
                t3.watch(&x);
                x.mul(&x)?.mul(&x)
            })?;
            Ok(t3.gradient(&y, &x)?.unwrap())
        })?;
        assert!((d1.to_scalar::<f64>()? - 3.0 * 1.7 * 1.7).abs() < 1e-12);
        Ok(t2.gradient(&d1, &x)?.unwrap())
    })?;
    assert!((d2.to_scalar::<f64>()? - 6.0 * 1.7).abs() < 1e-12);
    assert_eq!(val(&t1.gradient(&d2, &x)?), vec![6.0]);
    Ok(())
}

#[test]
fn ops_on_another_thread_are_not_recorded_here() -> Result<()> {
    let x = Tensor::scalar(2.0f32);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        let x2 = x.clone();
        Ok(std::thread::spawn(move || x2.square().unwrap()).join().unwrap())
    })?;
    assert!(tape.gradient(&y, &x)?.is_none());
    Ok(())
}

#[test]
fn comparisons_and_integer_outputs_are_not_differentiable() -> Result<()> {
    let x = Tensor::vector(&[1.0f32, -2.0]);
    let tape = GradientTape::persistent();
    let (m, i) = tape.record(|| {
        tape.watch(&x);
        Ok((x.gt_scalar(0.0)?, x.cast(DType::I64)?))
    })?;
    assert_eq!(m.to_vec::<bool>()?, vec![true, false]);
    assert!(tape.gradient(&m, &x)?.is_none());
    assert!(tape.gradient(&i, &x)?.is_none());
    Ok(())
}

#[test]
fn trainable_variables_are_watched_on_read_and_listed_in_creation_order() -> Result<()> {
    let b = Variable::builder(Tensor::scalar(1.0f32)).name("b").build();
    let a = Variable::builder(Tensor::scalar(3.0f32)).name("a").build();
    let frozen = Variable::builder(Tensor::scalar(5.0f32)).trainable(false).build();
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        // read a before b: the list is still in creation order (b, a)
        let p = a.read().mul(&b.read())?;
        p.mul(&frozen.read())
    })?;
    let names: Vec<String> = tape.watched_variables().iter().map(|v| v.name().to_string()).collect();
    assert_eq!(names, vec!["b", "a"]);
    let [ga, gb, gf] = tape.gradient(&y, &[&a, &b, &frozen])?;
    assert_eq!(val(&ga), vec![5.0]);
    assert_eq!(val(&gb), vec![15.0]);
    assert!(gf.is_none(), "a non-trainable variable is not watched automatically");
    // but it can be watched by hand
    let t2 = GradientTape::new();
    let y = t2.record(|| {
        t2.watch(&frozen);
        frozen.read().square()
    })?;
    assert_eq!(val(&t2.gradient(&y, &frozen)?), vec![10.0]);
    Ok(())
}

#[test]
fn variables_assign_and_check_shapes() -> Result<()> {
    let v = Variable::new(Tensor::vector(&[1.0f32, 2.0]));
    v.assign_add(&Tensor::vector(&[1.0f32, 1.0]))?;
    assert_eq!(v.read().to_vec::<f32>()?, vec![2.0, 3.0]);
    v.assign_sub(&Tensor::vector(&[0.5f32, 0.5]))?;
    assert_eq!(v.read().to_vec::<f32>()?, vec![1.5, 2.5]);
    v.assign(&Tensor::vector(&[7.0f32, 8.0]))?;
    assert_eq!(v.read().to_vec::<f32>()?, vec![7.0, 8.0]);
    assert!(v.assign(&Tensor::vector(&[1.0f32])).is_err());
    assert!(v.assign(&Tensor::vector(&[1.0f64, 2.0])).is_err());
    Ok(())
}

#[test]
fn gradient_descent_steps_update_variables() -> Result<()> {
    // small (one thread) and large (parallel chunks), f32 and f64
    for n in [3usize, 100_003] {
        let x0: Vec<f64> = (0..n).map(|i| (i % 7) as f64 - 3.0).collect();
        let g: Vec<f64> = (0..n).map(|i| (i % 5) as f64 * 0.5).collect();
        let want: Vec<f64> = x0.iter().zip(&g).map(|(x, g)| x - 0.25 * g).collect();
        let v = Variable::new(Tensor::from_vec(x0.clone(), &[n])?);
        v.apply_gradient_descent(0.25, &Tensor::from_vec(g.clone(), &[n])?)?;
        assert_eq!(v.read().to_vec::<f64>()?, want);
        let x32: Vec<f32> = x0.iter().map(|&x| x as f32).collect();
        let v = Variable::new(Tensor::from_vec(x32, &[n])?);
        // a value read before the step keeps its old elements
        let before = v.read();
        let g32: Vec<f32> = g.iter().map(|&x| x as f32).collect();
        v.apply_gradient_descent(0.25, &Tensor::from_vec(g32.clone(), &[n])?)?;
        let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        assert_eq!(before.to_vec::<f32>()?, f32s(&x0));
        assert_eq!(v.read().to_vec::<f32>()?, f32s(&want));
        // again with nothing else holding the value (updated in place)
        drop(before);
        v.apply_gradient_descent(-0.25, &Tensor::from_vec(g32, &[n])?)?;
        assert_eq!(v.read().to_vec::<f32>()?, f32s(&x0));
    }
    // a strided (transposed) gradient, and dtypes without the fused path
    let v = Variable::new(Tensor::from_vec(vec![0.0f32; 6], &[2, 3])?);
    let g = Tensor::from_vec((0..6).map(|i| i as f32).collect::<Vec<_>>(), &[3, 2])?.transpose()?;
    v.apply_gradient_descent(1.0, &g)?;
    assert_eq!(v.read().to_vec::<f32>()?, vec![-0.0, -2.0, -4.0, -1.0, -3.0, -5.0]);
    let v = Variable::new(Tensor::vector(&[10i64, 20]));
    v.apply_gradient_descent(2.0, &Tensor::vector(&[1i64, 3]))?;
    assert_eq!(v.read().to_vec::<i64>()?, vec![8, 14]);
    // shape and dtype mismatches are errors that name the op
    let v = Variable::new(Tensor::vector(&[1.0f32, 2.0]));
    let e = v.apply_gradient_descent(0.1, &Tensor::vector(&[1.0f32])).unwrap_err();
    assert!(
        matches!(
            e,
            Error::VariableMismatch {
                op: "apply_gradient_descent",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(v.apply_gradient_descent(0.1, &Tensor::vector(&[1.0f64, 2.0])).is_err());
    assert_eq!(v.read().to_vec::<f32>()?, vec![1.0, 2.0]);
    Ok(())
}

#[test]
fn variables_are_shared_across_threads() -> Result<()> {
    let v = Variable::new(Tensor::scalar(0.0f64));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let v = v.clone();
            std::thread::spawn(move || {
                for _ in 0..25 {
                    v.assign_add(&Tensor::scalar(1.0f64)).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // assign_add is atomic: no update is lost
    assert_eq!(v.read().to_scalar::<f64>()?, 100.0);
    // a tape on another thread differentiates w.r.t. the shared variable
    let v2 = v.clone();
    let g = std::thread::spawn(move || {
        let tape = GradientTape::new();
        let y = tape.record(|| v2.read().mul_scalar(3.0)).unwrap();
        tape.gradient(&y, &v2).unwrap().unwrap().to_scalar::<f64>().unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(g, 3.0);
    Ok(())
}

#[test]
fn a_source_neither_watched_nor_recorded_gets_no_gradient_from_the_ops_that_read_it() -> Result<()> {
    // TF 2.21: tape.watch(a); y = a * b; tape.gradient(y, [a, b]) is [3, None]
    // (b, a constant never watched, was given a's value, 2)
    let a = Tensor::scalar(2.0f64);
    let b = Tensor::scalar(3.0f64);
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&a);
        a.mul(&b)
    })?;
    let [ga, gb] = tape.gradient(&y, &[&a, &b])?;
    assert_eq!(val(&ga), vec![3.0]);
    assert!(gb.is_none());
    // Unconnected::Zero gives it zeros (TF: 0.0)
    let opts = GradientOptions::default().unconnected(Unconnected::Zero);
    assert_eq!(val(&tape.gradient_with(&y, &b, opts)?), vec![0.0]);
    // a value made by a recorded op is on the tape: it gets its gradient
    let c = tape.record(|| a.mul_scalar(1.5))?;
    let z = tape.record(|| c.mul(&b))?;
    assert_eq!(val(&tape.gradient(&z, &c)?), vec![3.0]);
    // a target that is itself a source still gets its seed (TF: 1.0)
    assert_eq!(val(&tape.gradient(&b, &b)?), vec![1.0]);
    // a trainable variable read under watch_accessed_variables=False, beside
    // a watched tensor (TF: None)
    let v = Variable::new(Tensor::scalar(4.0f64));
    let tape = GradientTape::new().watch_accessed_variables(false);
    let y = tape.record(|| {
        tape.watch(&a);
        a.mul(&v.read())
    })?;
    let [ga, gv] = tape.gradient(&y, &[SourceRef::Tensor(&a), SourceRef::Variable(&v)])?;
    assert_eq!(val(&ga), vec![4.0]);
    assert!(gv.is_none());
    Ok(())
}
