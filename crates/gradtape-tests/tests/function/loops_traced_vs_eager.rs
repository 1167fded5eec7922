//! Traced `while_loop`s against the same closures run eagerly, in the
//! shapes the loop's gradient machinery (the history, the residual split
//! of `function/control/residuals.rs`, the reads moved in front of it by
//! `hoist.rs`) must get right: a loop nested in a loop's body whose trip
//! count is the outer counter (first and second order), `cond` in a loop
//! and a loop in a `cond`, carries of several dtypes (an integer counter,
//! an f32 carry beside an f64 one, a bool flag, a carry the body passes
//! through unused) under a persistent tape asked three times, a trip count
//! decided by the values with `maximum_iterations` (and zero iterations),
//! `argmax`/`gather`/`relu`/`where` in the body (integer and bool
//! residuals), `jacobian`, `batch_jacobian`, the Jacobian with respect to
//! a variable and a JVP of a loop reading a variable, `vmap` of a loop
//! with a `cond` reading a variable, and a dropout in a `cond` in a loop
//! (the gradient at `w = 1` is the value: only with the masks it drew).
//! Each compiled and as traced, to 1e-12 in f64 (the f32 carry to 1e-6)
//! against the eager tape, itself the loop of ops TensorFlow's
//! `tf.while_loop` unrolls to.
//!
//! A dropout in a loop nested in a differentiated loop's body is an error
//! (the outer body keeps the inner loop's history, whose length the
//! values decide, so the outer loop's gradient would run the body and its
//! draws again), not a gradient of other masks.

use gradtape::{
    cond, function, nn::Dropout, nn::Layer, while_loop, DType, Function, FunctionOptions, GradientTape, Result, Rng,
    Tensor, Variable, WhileOptions,
};

fn close(got: &[Tensor], want: &[Tensor], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.shape(), w.shape(), "{what} {k}");
        assert_eq!(g.dtype(), w.dtype(), "{what} {k}");
        let (g, w) = (g.to_vec_f64(), w.to_vec_f64());
        let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        let off = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(
            g.len() == w.len() && off <= tol * scale,
            "{what} {k}: {g:?} against {w:?}"
        );
    }
}

fn one() -> Tensor {
    Tensor::scalar(1i64)
}

/// Runs `f` eagerly, traced (compiled) and traced (not compiled): the
/// traced outputs must be eager's to `tol` (relative to each output's
/// scale), in shape and dtype.
fn check3<I, F>(f: F, args: &I, tol: f64, what: &str)
where
    I: gradtape::TensorStruct + Send + Sync + 'static,
    F: Fn(&I) -> Result<Vec<Tensor>> + Clone + Send + Sync + 'static,
{
    let want = f(args).expect("eager");
    let t = function(f.clone());
    let got = t.call(args).unwrap_or_else(|e| panic!("{what} traced: {e}"));
    close(&got, &want, tol, &format!("{what} compiled"));
    let opts = FunctionOptions {
        optimize: false,
        ..Default::default()
    };
    let u = Function::with_options(f, opts);
    let got = u.call(args).unwrap_or_else(|e| panic!("{what} uncompiled: {e}"));
    close(&got, &want, tol, &format!("{what} uncompiled"));
}

/// `sum(y_4)`: the outer step `i` runs an inner loop of `i` steps
/// `z -> sin(z) x` from `y`, then adds `y`; with its gradient.
fn nested(x: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(x);
        let (_, y) = while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(4i64)),
            |(i, y): &(Tensor, Tensor)| {
                let (_, z) = while_loop(
                    |(j, _): &(Tensor, Tensor)| j.lt(i),
                    |(j, z): &(Tensor, Tensor)| Ok((j.add(&one())?, z.sin()?.mul(x)?)),
                    (Tensor::scalar(0i64), y.clone()),
                    WhileOptions::default(),
                )?;
                Ok((i.add(&one())?, z.add(y)?))
            },
            (Tensor::scalar(0i64), x.clone()),
            WhileOptions::default(),
        )?;
        y.sum_all()
    })?;
    let g = tape.gradient(&y, x)?.expect("grad");
    Ok(vec![y, g])
}

#[test]
fn a_loop_in_a_loops_body_counting_to_the_outer_counter() {
    let x = Tensor::from_vec(vec![0.7f64, -1.3, 0.2], &[3]).unwrap();
    check3(nested, &x, 1e-12, "nested");
}

/// [`nested`]'s value, gradient and the gradient of the gradient's sum.
fn second_order_nested(x: &Tensor) -> Result<Vec<Tensor>> {
    let outer = GradientTape::new();
    let (v, g) = outer.record(|| {
        outer.watch(x);
        let r = nested(x)?;
        Ok((r[0].clone(), r[1].sum_all()?))
    })?;
    let gg = outer.gradient(&g, x)?.expect("gg");
    Ok(vec![v, g, gg])
}

#[test]
fn a_nested_loop_to_second_order() {
    let x = Tensor::from_vec(vec![0.7f64, -1.3, 0.2], &[3]).unwrap();
    check3(second_order_nested, &x, 1e-12, "nested 2nd");
}

/// Four steps of a loop carrying an i64 counter, an f64 value, an f32
/// value, an unused f64 carry and a bool flag: a `cond` on the flag, and a
/// loop in a `cond` (from the third step on); two losses on a persistent
/// tape, differentiated one by one and together.
fn mixed(x: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let (a, b) = tape.record(|| {
        tape.watch(x);
        let x32 = x.cast(DType::F32)?;
        let (_, y, y32, unused, _flag) = while_loop(
            |(i, _, _, _, _): &(Tensor, Tensor, Tensor, Tensor, Tensor)| i.lt(&Tensor::scalar(4i64)),
            |(i, y, y32, u, flag): &(Tensor, Tensor, Tensor, Tensor, Tensor)| {
                let y = cond(&flag.clone(), || y.sin()?.mul(x), || y.cos()?.add(x))?;
                let y32 = y32.mul(y32)?.mul_scalar(0.5)?.add(&x32)?;
                let flag = flag.logical_not()?;
                let y = cond(
                    &i.gt(&Tensor::scalar(1i64))?,
                    || {
                        let (_, z) = while_loop(
                            |(k, _): &(Tensor, Tensor)| k.lt(i),
                            |(k, z): &(Tensor, Tensor)| Ok((k.add(&one())?, z.tanh()?.mul(x)?)),
                            (Tensor::scalar(0i64), y.clone()),
                            WhileOptions::default(),
                        )?;
                        Ok(z)
                    },
                    || Ok(y.clone()),
                )?;
                Ok((i.add(&one())?, y, y32, u.clone(), flag))
            },
            (
                Tensor::scalar(0i64),
                x.clone(),
                x32.clone(),
                x.mul_scalar(3.0)?,
                Tensor::scalar(true),
            ),
            WhileOptions::default(),
        )?;
        Ok((y.sum_all()?.add(&unused.sum_all()?)?, y32.cast(DType::F64)?.sum_all()?))
    })?;
    let ga = tape.gradient(&a, x)?.expect("ga");
    let gb = tape.gradient(&b, x)?.expect("gb");
    let gab = tape.gradient(&[a.clone(), b.clone()], x)?.expect("gab");
    Ok(vec![a, b, ga, gb, gab])
}

#[test]
fn carries_of_several_dtypes_conds_both_ways_and_a_persistent_tape() {
    let x = Tensor::from_vec(vec![0.7f64, -1.3, 0.2], &[3]).unwrap();
    check3(mixed, &x, 1e-6, "mixed");
}

/// Steps while `sum(y) < 50`, at most 6: each step picks `y`'s largest
/// element (`argmax`, `gather`) and mixes `relu`, `abs` and `where`.
fn valued(x: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(x);
        let opts = WhileOptions {
            max_iterations: Some(6),
            ..Default::default()
        };
        let (y,) = while_loop(
            |(y,): &(Tensor,)| y.sum_all()?.lt_scalar(50.0),
            |(y,): &(Tensor,)| {
                let idx = y.argmax(0)?;
                let picked = y.gather(&idx.reshape(&[1])?, 0)?;
                let r = y.relu()?.add(&y.abs()?.mul(&picked)?)?.add_scalar(0.3)?;
                Ok((Tensor::where_(&y.gt_scalar(0.0)?, &r, &y.mul_scalar(-0.5)?)?,))
            },
            (x.clone(),),
            opts,
        )?;
        y.sum_all()
    })?;
    let g = tape.gradient(&y, x)?.expect("grad");
    Ok(vec![y, g])
}

#[test]
fn a_count_the_values_decide_with_maximum_iterations() {
    for xs in [
        vec![0.7f64, -1.3, 0.2],
        vec![100.0, 1.0, 2.0],
        vec![0.01, 0.02, -0.03],
        vec![-5.0, -6.0, -7.0],
    ] {
        let x = Tensor::from_vec(xs, &[3]).unwrap();
        check3(valued, &x, 1e-12, "valued");
    }
}

/// `h_3` of `h_{t+1} = tanh(h_t W)`, `W` a variable: its Jacobian and
/// batch Jacobian with respect to `h0`, its Jacobian with respect to `W`,
/// and its JVP along ones.
fn rnn_jac(w: &Variable, h0: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let h = tape.record(|| {
        tape.watch(h0);
        let (_, h) = while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(3i64)),
            |(i, h): &(Tensor, Tensor)| Ok((i.add(&one())?, h.matmul(&w.read())?.tanh()?)),
            (Tensor::scalar(0i64), h0.clone()),
            WhileOptions::default(),
        )?;
        Ok(h)
    })?;
    let j = tape.jacobian(&h, h0)?.expect("j");
    let bj = tape.batch_jacobian(&h, h0)?.expect("bj");
    let jw = tape.jacobian(&h, w)?.expect("jw");
    let (_, t) = gradtape::jvp(
        |p| {
            let (_, h) = while_loop(
                |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(3i64)),
                |(i, h): &(Tensor, Tensor)| Ok((i.add(&one())?, h.matmul(&w.read())?.tanh()?)),
                (Tensor::scalar(0i64), p[0].clone()),
                WhileOptions::default(),
            )?;
            Ok(h)
        },
        std::slice::from_ref(h0),
        &[h0.ones_like()],
    )?;
    Ok(vec![h, j, bj, jw, t])
}

#[test]
fn jacobians_and_a_jvp_of_a_loop_reading_a_variable() {
    let w = Variable::new(Tensor::from_vec((0..9).map(|i| 0.3 * (i as f64 * 0.7).sin()).collect(), &[3, 3]).unwrap());
    let h0 = Tensor::from_vec((0..6).map(|i| 0.5 * (i as f64 * 1.3).cos()).collect(), &[2, 3]).unwrap();
    let want = rnn_jac(&w, &h0).unwrap();
    let w2 = w.clone();
    let f = function(move |h0: &Tensor| rnn_jac(&w2, h0));
    let got = f.call(&h0).unwrap();
    close(&got, &want, 1e-12, "rnn jac");
}

/// `vmap` of three steps of `y -> cond(sum(y) > 0, sin(y w), cos(y))`,
/// `w` a variable, against the rows one by one.
#[test]
fn vmap_of_a_loop_with_a_cond_reading_a_variable() {
    let w = Variable::new(Tensor::scalar(0.8f64));
    let w2 = w.clone();
    let body = move |a: &[Tensor]| -> Result<Vec<Tensor>> {
        let x = &a[0];
        let (_, y) = while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(3i64)),
            |(i, y): &(Tensor, Tensor)| {
                let y = cond(&y.sum_all()?.gt_scalar(0.0)?, || y.mul(&w2.read())?.sin(), || y.cos())?;
                Ok((i.add(&one())?, y))
            },
            (Tensor::scalar(0i64), x.clone()),
            WhileOptions::default(),
        )?;
        Ok(vec![y])
    };
    let xs = Tensor::from_vec(vec![0.7f64, -1.3, 0.2, 2.0, -0.1, 0.4], &[3, 2]).unwrap();
    let v = gradtape::vmap(body.clone(), &[Some(0)], &[Some(0)]);
    let got = v.call(std::slice::from_ref(&xs)).unwrap();
    let rows: Vec<Tensor> = (0..3)
        .map(|r| body(&[xs.narrow(0, r, 1).unwrap().reshape(&[2]).unwrap()]).unwrap()[0].clone())
        .collect();
    let refs: Vec<&Tensor> = rows.iter().collect();
    let want = Tensor::stack(&refs, 0).unwrap();
    close(&got, &[want], 1e-12, "vmap");
}

/// `f(x, w, dropout)`'s value and gradient with respect to `w`, traced,
/// called twice at `w = 1` on `x = [1, .., 64]`: the gradient must be the
/// value (`f` is linear in `w` at the masks the value used), and each
/// value is passed to `check`.
fn gradient_is_the_value_at_one(
    what: &'static str,
    f: impl Fn(&Tensor, &Tensor, &Dropout) -> Result<Tensor> + Send + Sync + 'static,
    check: impl Fn(f64),
) {
    let d = std::sync::Arc::new(Dropout::new(0.5, &mut Rng::new(7)).unwrap());
    let f = function(move |(x, w): &(Tensor, Tensor)| {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(w);
            f(x, w, &d)?.sum_all()
        })?;
        let g = tape.gradient(&y, w)?.expect("grad");
        Ok(vec![y, g])
    });
    let x = Tensor::from_vec((0..64).map(|i| 1.0 + i as f64).collect(), &[64]).unwrap();
    for _ in 0..2 {
        let r = f.call(&(x.clone(), Tensor::scalar(1.0f64))).expect(what);
        check(r[0].to_scalar::<f64>().unwrap());
        close(
            &[r[1].clone()],
            &[r[0].clone()],
            0.0,
            "the gradient at w = 1 is the value",
        );
    }
}

/// `sum_t drop_t(x) w` over 5 steps, the dropout in a `cond` in the body.
#[test]
fn a_dropout_in_a_cond_in_a_loop_is_differentiated_at_its_masks() {
    let f = |x: &Tensor, w: &Tensor, d: &Dropout| {
        let (_, y) = while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(5i64)),
            |(i, y): &(Tensor, Tensor)| {
                let step = cond(&w.gt_scalar(0.0)?, || d.forward(x, true)?.mul(w), || x.mul(w))?;
                Ok((i.add(&one())?, y.add(&step)?))
            },
            (Tensor::scalar(0i64), x.zeros_like()),
            WhileOptions::default(),
        )?;
        Ok(y)
    };
    gradient_is_the_value_at_one("the cond in the loop", f, |_| ());
}

/// A dropout in a loop nested in the differentiated loop's body: the
/// gradient uses the masks the value used (`d/dw sum drop(x) w` is the
/// value at `w = 1`); it was an error, the inner loop keeping no history
/// (`nested_loop_effects.rs` has more).
#[test]
fn a_dropout_in_a_nested_loop_is_differentiated_at_its_masks() {
    let f = |x: &Tensor, w: &Tensor, d: &Dropout| {
        let (_, y) = while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(3i64)),
            |(i, y): &(Tensor, Tensor)| {
                let (_, z) = while_loop(
                    |(j, _): &(Tensor, Tensor)| j.lt(&Tensor::scalar(2i64)),
                    |(j, z): &(Tensor, Tensor)| Ok((j.add(&one())?, z.add(&d.forward(x, true)?.mul(w)?)?)),
                    (Tensor::scalar(0i64), y.clone()),
                    WhileOptions::default(),
                )?;
                Ok((i.add(&one())?, z))
            },
            (Tensor::scalar(0i64), x.zeros_like()),
            WhileOptions::default(),
        )?;
        Ok(y)
    };
    // kept entries are doubled (1/(1 - 0.5)), so the sum is even
    gradient_is_the_value_at_one("the nested dropout", f, |y| assert!(y > 0.0 && y % 2.0 == 0.0, "{y}"));
}

/// `sum(z_3^2)` where each step makes `z` `[sin(z), x sum(z)]` (its
/// length grows by 2: a shape invariant lets it), with the gradient.
fn growing(x: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(x);
        let opts = WhileOptions {
            shape_invariants: Some(vec![
                gradtape::TensorSpec::new(DType::I64, &[]),
                gradtape::TensorSpec::new(DType::F64, &[None]),
            ]),
            ..Default::default()
        };
        let (_, z) = while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(3i64)),
            |(i, z): &(Tensor, Tensor)| {
                let next = Tensor::concat(&[&z.sin()?, &x.mul(&z.sum_all()?)?], 0)?;
                Ok((i.add(&one())?, next))
            },
            (Tensor::scalar(0i64), x.clone()),
            opts,
        )?;
        z.square()?.sum_all()
    })?;
    let g = tape.gradient(&y, x)?.expect("dx");
    Ok(vec![y, g])
}

/// A differentiated traced loop whose variable changes shape: traced as
/// eagerly (it was an error naming the loop: its history, one stacked
/// tensor per variable, could not hold the rows; `loops_growing_grads.rs`
/// checks such loops against TensorFlow).
#[test]
fn a_differentiated_loop_whose_variable_grows_is_traced_as_eagerly() -> Result<()> {
    let x = Tensor::from_vec(vec![0.7f64, -1.3], &[2])?;
    let eager = growing(&x)?;
    assert_eq!(eager[1].shape(), &[2]);
    let traced = function(growing).call(&x)?;
    for (t, e) in traced.iter().zip(&eager) {
        for (a, b) in t.to_vec_f64().iter().zip(e.to_vec_f64()) {
            assert!((a - b).abs() <= 1e-13 * b.abs().max(1.0), "{traced:?} vs {eager:?}");
        }
    }
    Ok(())
}
