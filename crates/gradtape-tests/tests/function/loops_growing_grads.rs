//! A differentiated `while_loop` whose carried tensor changes shape from
//! one iteration to the next (a shape invariant lets it): a tensor grown
//! by a concatenation each step, or rows accumulated into a `[None, 2]`
//! carry (TensorFlow's `TensorArray` written per step and stacked after).
//! Eagerly, traced (compiled and not), to the second order, for zero
//! iterations and a `max_iterations` cut, against TensorFlow.
//!
//! Before, the traced loop was an error: its gradient kept each variable's
//! value at every iteration as one stacked tensor, which rows of different
//! shapes cannot make (gradtape's `function/control/ragged.rs` keeps
//! them as a list).
//!
//! References: TensorFlow 2.21, float64, eager and in `tf.function` (the
//! same digits to 1e-15):
//!
//! ```python
//! def growing(x, n, maxit=None):
//!     with tf.GradientTape() as t2:
//!         t2.watch(x)
//!         with tf.GradientTape() as tape:
//!             tape.watch(x)
//!             _, z = tf.while_loop(lambda i, z: i < n,
//!                 lambda i, z: (i + 1, tf.concat([tf.sin(z), x * tf.reduce_sum(z)], 0)),
//!                 (tf.constant(0, tf.int64), x),
//!                 shape_invariants=(tf.TensorShape([]), tf.TensorShape([None])),
//!                 maximum_iterations=maxit)
//!             y = tf.reduce_sum(z ** 2)
//!         g = tape.gradient(y, x)
//!         gs = tf.reduce_sum(g * tf.constant([0.3, -0.8], tf.float64))
//!     return y, g, t2.gradient(gs, x)
//! # x = [0.7, -1.3]; n = 3, 0, and 3 with maximum_iterations=2
//!
//! def accumulate(x, w, n):
//!     with tf.GradientTape(persistent=True) as tape:
//!         tape.watch([x, w])
//!         def body(i, y, ta):
//!             y = tf.tanh(y * w + 0.1)
//!             return i + 1, y, ta.write(tf.cast(i, tf.int32), y)
//!         _, y, ta = tf.while_loop(lambda i, y, ta: i < n, body,
//!             (tf.constant(0, tf.int64), x,
//!              tf.TensorArray(tf.float64, size=0, dynamic_size=True, element_shape=[2])))
//!         acc = ta.stack()
//!         s = tf.reduce_sum(acc ** 3) + tf.reduce_sum(acc) ** 2
//!     return s, tape.gradient(s, x), tape.gradient(s, w)
//! # x = [0.7, -1.3], w = 0.9, n = 4
//! ```

use gradtape::{function, DType, Function, FunctionOptions, GradientTape, Result, Tensor, TensorSpec, WhileOptions};

/// TensorFlow's `growing` at `n` = 3: the value, the gradient, and the
/// gradient of `<g, [0.3, -0.8]>`.
const TF_GROW_3: [&[f64]; 3] = [
    &[1.4398129103092154],
    &[-0.4614409912471238, -2.11705892797006],
    &[-0.8900674303300573, -2.3995773989768443],
];
/// The same at `n` = 0 (the loop does not run: `sum(x^2)`).
const TF_GROW_0: [&[f64]; 3] = [&[2.18], &[1.4, -2.6], &[0.6, -1.6]];
/// The same at `n` = 3 with `maximum_iterations` = 2.
const TF_GROW_MAX2: [&[f64]; 3] = [
    &[1.699576451036584],
    &[-0.7146621981265104, -2.841443685068886],
    &[-2.2379492790936117, -4.441094596690757],
];
/// TensorFlow's `accumulate`: the value, the gradients with respect to
/// `x` and `w`.
const TF_ACC: [&[f64]; 3] = [
    &[0.16444035325984876],
    &[2.135092365450352, 1.5251831775422138],
    &[-0.3421774159122653],
];

fn one() -> Tensor {
    Tensor::scalar(1i64)
}

/// `sum(z^2)` after `n` steps (at most `max`) of the loop making `z`
/// `[sin z, x sum z]` from `z = x` (its length doubles each step).
fn grown(x: &Tensor, n: &Tensor, max: Option<usize>) -> Result<Tensor> {
    let opts = WhileOptions {
        max_iterations: max,
        shape_invariants: Some(vec![
            TensorSpec::new(DType::I64, &[]),
            TensorSpec::new(DType::F64, &[None]),
        ]),
    };
    let (_, z) = gradtape::while_loop(
        |(i, _): &(Tensor, Tensor)| i.lt(n),
        |(i, z): &(Tensor, Tensor)| {
            let next = Tensor::concat(&[&z.sin()?, &x.mul(&z.sum_all()?)?], 0)?;
            Ok((i.add(&one())?, next))
        },
        (Tensor::scalar(0i64), x.clone()),
        opts,
    )?;
    z.square()?.sum_all()
}

/// `sum(z^2)` where each of `n` steps (at most `max`) makes `z`
/// `[sin z, x sum z]`, its gradient `g` and the gradient of `<g, c>`.
fn growing(x: &Tensor, n: &Tensor, max: Option<usize>) -> Result<Vec<Tensor>> {
    let outer = GradientTape::new();
    let (y, g) = outer.record(|| {
        outer.watch(x);
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            grown(x, n, max)
        })?;
        let g = tape.gradient(&y, x)?.expect("dx");
        let gs = g.mul(&Tensor::from_vec(vec![0.3f64, -0.8], &[2])?)?.sum_all()?;
        Ok((y, (g, gs)))
    })?;
    let (g, gs) = g;
    let h = outer.gradient(&gs, x)?.expect("d2x");
    Ok(vec![y, g, h])
}

/// `sum(acc^3) + sum(acc)^2` where each of `n` steps appends the row
/// `y = tanh(y w + 0.1)` to `acc` (a `[None, 2]` carry), with its
/// gradients with respect to `x` (the first `y`) and `w`.
fn accumulate(x: &Tensor, w: &Tensor, n: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let s = tape.record(|| {
        tape.watch(x);
        tape.watch(w);
        let opts = WhileOptions {
            shape_invariants: Some(vec![
                TensorSpec::new(DType::I64, &[]),
                TensorSpec::new(DType::F64, &[Some(2)]),
                TensorSpec::new(DType::F64, &[None, Some(2)]),
            ]),
            ..Default::default()
        };
        let (_, _, acc) = gradtape::while_loop(
            |(i, _, _): &(Tensor, Tensor, Tensor)| i.lt(n),
            |(i, y, acc): &(Tensor, Tensor, Tensor)| {
                let y = y.mul(w)?.add_scalar(0.1)?.tanh()?;
                let acc = Tensor::concat(&[acc, &y.reshape(&[1, 2])?], 0)?;
                Ok((i.add(&one())?, y, acc))
            },
            (Tensor::scalar(0i64), x.clone(), Tensor::zeros(&[0, 2], DType::F64)),
            opts,
        )?;
        acc.pow_scalar(3.0)?.sum_all()?.add(&acc.sum_all()?.square()?)
    })?;
    // (eagerly, a loop that does not run leaves s unconnected)
    let gx = tape.gradient(&s, x)?.unwrap_or_else(|| x.zeros_like());
    let gw = tape.gradient(&s, w)?.unwrap_or_else(|| w.zeros_like());
    Ok(vec![s, gx, gw])
}

fn assert_close(got: &[Tensor], want: &[&[f64]], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.to_vec_f64();
        assert_eq!(g.len(), w.len(), "{what} output {k}");
        for (a, b) in g.iter().zip(w.iter()) {
            assert!(
                (a - b).abs() <= 1e-13 * b.abs().max(1.0),
                "{what} output {k}: {g:?} against {w:?}"
            );
        }
    }
}

/// A way to run a test's function.
type Run<A> = Box<dyn Fn(&A) -> Result<Vec<Tensor>>>;

/// The three ways to run `f`: eagerly, traced and compiled, traced as is.
fn modes<A: gradtape::TensorStruct + Clone + Send + Sync + 'static>(
    f: fn(&A) -> Result<Vec<Tensor>>,
) -> Vec<(&'static str, Run<A>)> {
    let plain = FunctionOptions {
        optimize: false,
        ..Default::default()
    };
    let compiled = function(f);
    let traced = Function::with_options(f, plain);
    vec![
        ("eager", Box::new(f)),
        ("compiled", Box::new(move |a: &A| compiled.call(a))),
        ("traced", Box::new(move |a: &A| traced.call(a))),
    ]
}

#[test]
fn a_loop_growing_its_variable_differentiates_twice_traced_as_tensorflow() -> Result<()> {
    let x = Tensor::from_vec(vec![0.7f64, -1.3], &[2])?;
    // (a graph per count: the loop's output, which the gradient's seed
    // takes its shape from, changes shape with it; twice each)
    for (n, want) in [(3i64, TF_GROW_3), (0, TF_GROW_0)] {
        for (mode, run) in modes(|(x, n): &(Tensor, Tensor)| growing(x, n, None)) {
            for call in 0..2 {
                let got = run(&(x.clone(), Tensor::scalar(n)))?;
                assert_close(&got, &want, &format!("{mode} n = {n} call {call}"));
            }
        }
    }
    for (mode, run) in modes(|(x, n): &(Tensor, Tensor)| growing(x, n, Some(2))) {
        let got = run(&(x.clone(), Tensor::scalar(3i64)))?;
        assert_close(&got, &TF_GROW_MAX2, &format!("{mode} max_iterations 2"));
    }
    Ok(())
}

#[test]
fn rows_accumulated_in_a_loop_differentiate_traced_as_a_tensorflow_tensor_array() -> Result<()> {
    let (x, w) = (Tensor::from_vec(vec![0.7f64, -1.3], &[2])?, Tensor::scalar(0.9f64));
    for (mode, run) in modes(|(x, w, n): &(Tensor, Tensor, Tensor)| accumulate(x, w, n)) {
        let got = run(&(x.clone(), w.clone(), Tensor::scalar(4i64)))?;
        assert_close(&got, &TF_ACC, mode);
    }
    // no row (a graph of its own): s = 0, and no gradient reaches x or w
    // (zeros here; TensorFlow says unconnected)
    for (mode, run) in modes(|(x, w, n): &(Tensor, Tensor, Tensor)| accumulate(x, w, n)) {
        let got = run(&(x.clone(), w.clone(), Tensor::scalar(0i64)))?;
        assert_close(&got, &[&[0.0], &[0.0, 0.0], &[0.0]], &format!("{mode} no row"));
    }
    Ok(())
}

/// The checks that stay: a body changing a shape no invariant lets vary,
/// or a dtype, is an error naming the loop, traced and differentiated.
#[test]
fn a_shape_or_dtype_change_the_invariants_do_not_allow_stays_an_error() -> Result<()> {
    let x = Tensor::from_vec(vec![0.7f64, -1.3], &[2])?;
    let bad = |spec: Vec<TensorSpec>, cast: bool| {
        let f = function(move |x: &Tensor| {
            let tape = GradientTape::new();
            let y = tape.record(|| {
                tape.watch(x);
                let opts = WhileOptions {
                    shape_invariants: Some(spec.clone()),
                    ..Default::default()
                };
                let (_, z) = gradtape::while_loop(
                    |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(2i64)),
                    |(i, z): &(Tensor, Tensor)| {
                        let next = Tensor::concat(&[z, &z.sin()?], 0)?;
                        let next = if cast { next.cast(DType::F32)? } else { next };
                        Ok((i.add(&one())?, next))
                    },
                    (Tensor::scalar(0i64), x.clone()),
                    opts,
                )?;
                z.sum_all()
            })?;
            Ok(tape.gradient(&y, x)?.expect("dx"))
        });
        f.call(&x)
            .expect_err("a change the invariants do not allow")
            .to_string()
    };
    let fixed = vec![
        TensorSpec::new(DType::I64, &[]),
        TensorSpec::new(DType::F64, &[Some(2)]),
    ];
    let msg = bad(fixed, false);
    assert!(msg.contains("while_loop") && msg.contains("[2] to [4]"), "{msg}");
    let any = vec![TensorSpec::new(DType::I64, &[]), TensorSpec::new(DType::F64, &[None])];
    let msg = bad(any, true);
    assert!(msg.contains("while_loop") && msg.contains("F32"), "{msg}");
    Ok(())
}

/// Forward mode through the growing loop: the tangent of `sum(z^2)` along
/// `t` is `<g, t>`, `g` TensorFlow's gradient (`TF_GROW_3`).
#[test]
fn a_loop_growing_its_variable_has_its_tangent_traced() -> Result<()> {
    let jvp = |x: &Tensor| -> Result<Vec<Tensor>> {
        let acc = gradtape::ForwardAccumulator::new();
        acc.watch(x, &Tensor::from_vec(vec![0.3f64, -0.8], &[2])?)?;
        let y = acc.record(|| grown(x, &Tensor::scalar(3i64), None))?;
        Ok(vec![y.clone(), acc.jvp(&y)?.expect("tangent")])
    };
    let x = Tensor::from_vec(vec![0.7f64, -1.3], &[2])?;
    let g = TF_GROW_3[1];
    let want: [&[f64]; 2] = [TF_GROW_3[0], &[0.3 * g[0] - 0.8 * g[1]]];
    for (mode, run) in modes(jvp) {
        assert_close(&run(&x)?, &want, mode);
    }
    Ok(())
}

/// Forward over reverse through the growing loop: the tangent along `c` of
/// the gradient is the Hessian times `c`, TensorFlow's gradient of `<g, c>`
/// (`TF_GROW_3`, the Hessian being symmetric).
#[test]
fn a_loop_growing_its_variable_has_its_hessian_vector_product_traced() -> Result<()> {
    let hvp = |x: &Tensor| -> Result<Vec<Tensor>> {
        let acc = gradtape::ForwardAccumulator::new();
        acc.watch(x, &Tensor::from_vec(vec![0.3f64, -0.8], &[2])?)?;
        let g = acc.record(|| {
            let tape = GradientTape::new();
            let y = tape.record(|| {
                tape.watch(x);
                grown(x, &Tensor::scalar(3i64), None)
            })?;
            Ok(tape.gradient(&y, x)?.expect("dx"))
        })?;
        Ok(vec![g.clone(), acc.jvp(&g)?.expect("tangent")])
    };
    let x = Tensor::from_vec(vec![0.7f64, -1.3], &[2])?;
    for (mode, run) in modes(hvp) {
        assert_close(&run(&x)?, &TF_GROW_3[1..], mode);
    }
    Ok(())
}

/// A body that changes a variable's shape and draws fresh numbers cannot
/// keep residuals (their shapes change too): its gradient would run it
/// again, an error naming the loop and saying why.
#[test]
fn a_growing_loop_with_a_dropout_is_an_error_naming_the_loop() -> Result<()> {
    use gradtape::nn::{Dropout, Layer};
    let d = std::sync::Arc::new(Dropout::new(0.5, &mut gradtape::Rng::new(3))?);
    let f = function(move |x: &Tensor| {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            let opts = WhileOptions {
                shape_invariants: Some(vec![
                    TensorSpec::new(DType::I64, &[]),
                    TensorSpec::new(DType::F64, &[None]),
                ]),
                ..Default::default()
            };
            let (_, z) = gradtape::while_loop(
                |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(2i64)),
                |(i, z): &(Tensor, Tensor)| Ok((i.add(&one())?, Tensor::concat(&[z, &d.forward(x, true)?], 0)?)),
                (Tensor::scalar(0i64), x.clone()),
                opts,
            )?;
            z.sum_all()
        })?;
        Ok(tape.gradient(&y, x)?.expect("dx"))
    });
    let x = Tensor::from_vec(vec![0.7f64, -1.3], &[2])?;
    let msg = f.call(&x).expect_err("a body that would run again").to_string();
    assert!(
        msg.contains("while_loop") && msg.contains("changes shape") && msg.contains("random"),
        "{msg}"
    );
    Ok(())
}
