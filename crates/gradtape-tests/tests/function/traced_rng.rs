//! A generator ([`Rng`]) draws the same stream in a traced function as
//! eagerly, as TensorFlow's `tf.random.Generator` in a `tf.function`.
//!
//! TensorFlow 2.21 (checked in the reference venv), the semantics these
//! tests hold gradtape to (the values themselves differ: TF's generator is
//! Philox, ours a SplitMix64 counter):
//!
//! ```python
//! g = tf.random.Generator.from_seed(1)
//! f = tf.function(lambda: g.normal([3]))
//! a, b = f(), f()
//! e = tf.random.Generator.from_seed(1)
//! a == e.normal([3]), b == e.normal([3])      # True, True (bit for bit)
//! g.state == e.state                          # True: [1537, 0, 0] both
//! # tf.cond(False, lambda: g.normal([2]), ...): g.state unchanged ([1, 0, 0])
//! # an unused draw g.normal([2]) in a tf.function: g advanced ([513, 0, 0])
//! # tf.while_loop of 3 iterations adding g.normal([]): the eager sum
//! #   (3.6963778 both), and g.state equal ([769, 0, 0] both)
//! ```
//!
//! (TensorFlow refuses a generator made inside a `tf.function`, a variable
//! made at each call; gradtape's traced code makes it again at each run,
//! as the eager code makes a new one at each call.)
//!
//! Each test failed before the generator's state was shared with the
//! graph (a traced draw took a seed mixed from the trace's seed and the
//! run's number: other values than eager, and the `Rng` stood still at the
//! position the trace left it).

use std::sync::{Arc, Mutex};

use gradtape::nn::{Dense, Dropout, Layer, Module};
use gradtape::optim::{Optimizer, Sgd};
use gradtape::{
    cond, function, while_loop, DType, Function, FunctionOptions, GradientTape, Result, Rng, Tensor, WhileOptions,
};

/// The bits of a float tensor's values, to compare bit for bit.
fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64().iter().map(|v| v.to_bits()).collect()
}

/// One draw of each kind from `rng`, concatenated (as f64: every dtype's
/// values are exact in f64), plus `x`.
fn draws(rng: &mut Rng, x: &Tensor) -> Result<Tensor> {
    let mut parts = vec![x.clone()];
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        parts.push(rng.uniform(&[5], -1.0, 2.0, dt)?.cast(DType::F64)?);
        parts.push(rng.normal(&[5], 0.5, 2.0, dt)?.cast(DType::F64)?);
        parts.push(rng.truncated_normal(&[5], 0.0, 1.0, dt)?.cast(DType::F64)?);
    }
    parts.push(rng.uniform(&[5], -3.0, 9.0, DType::I32)?.cast(DType::F64)?);
    parts.push(rng.uniform(&[5], 0.0, 1e12, DType::I64)?.cast(DType::F64)?);
    let refs: Vec<&Tensor> = parts.iter().collect();
    Tensor::concat(&refs, 0)
}

#[test]
fn every_draw_of_a_generator_is_the_eager_one_at_each_call() -> Result<()> {
    let x = Tensor::zeros(&[2], DType::F64);
    let rng = Arc::new(Mutex::new(Rng::new(11)));
    let f = function({
        let rng = rng.clone();
        move |x: &Tensor| draws(&mut rng.lock().unwrap(), x)
    });
    let mut eager = Rng::new(11);
    for call in 0..3 {
        let got = f.call(&x)?;
        let want = draws(&mut eager, &x)?;
        assert_eq!(bits(&got), bits(&want), "call {call}");
        assert_eq!(rng.lock().unwrap().position(), eager.position(), "call {call}");
    }
    assert_eq!(eager.position(), 3 * 14);
    assert_eq!(f.trace_count(), 1);
    // the graph says where its draws come from
    let listing = f.graph(&x)?.to_string();
    assert!(listing.contains("[the generator's next seed]"), "{listing}");
    Ok(())
}

#[test]
fn the_compiled_graph_draws_the_eager_stream_too() -> Result<()> {
    // the draws feed fused elementwise work (f32 and half dtypes)
    let step = |rng: &mut Rng, x: &Tensor| -> Result<Tensor> {
        let a = rng.normal(&[64], 0.0, 1.0, DType::F32)?;
        let b = rng.uniform(&[64], 0.0, 1.0, DType::BF16)?.cast(DType::F32)?;
        x.mul(&a)?.add(&b)?.tanh()?.mul_scalar(3.0)
    };
    let x = Tensor::from_vec((0..64).map(|i| i as f32 * 0.1).collect(), &[64])?;
    let rng = Arc::new(Mutex::new(Rng::new(5)));
    let f = function({
        let rng = rng.clone();
        move |x: &Tensor| step(&mut rng.lock().unwrap(), x)
    });
    let mut eager = Rng::new(5);
    for call in 0..3 {
        assert_eq!(bits(&f.call(&x)?), bits(&step(&mut eager, &x)?), "call {call}");
    }
    assert_eq!(rng.lock().unwrap().position(), 6);
    Ok(())
}

/// A model of two dense layers with a dropout between them, and its
/// training step (SGD on a mean squared error).
struct Model {
    d1: Dense,
    drop: Dropout,
    d2: Dense,
    opt: Mutex<Sgd>,
}

impl Model {
    fn new(dtype: DType) -> Result<Model> {
        let mut rng = Rng::new(3);
        Ok(Model {
            d1: Dense::builder(4, 16).dtype(dtype).build(&mut rng)?,
            drop: Dropout::new(0.4, &mut rng)?,
            d2: Dense::builder(16, 2).dtype(dtype).build(&mut rng)?,
            opt: Mutex::new(Sgd::new(0.1)),
        })
    }

    fn variables(&self) -> Vec<gradtape::Variable> {
        let mut v = self.d1.variables();
        v.extend(self.d2.variables());
        v
    }

    fn step(&self, x: &Tensor, y: &Tensor) -> Result<(Tensor, Tensor)> {
        let vars = self.variables();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let h = self.drop.forward(&self.d1.forward(x, true)?.relu()?, true)?;
            self.d2.forward(&h, true)?.sub(y)?.square()?.mean_all()
        })?;
        let grads = tape.gradient(&loss, &vars)?;
        let g0 = grads[0].clone().expect("a gradient");
        self.opt.lock().unwrap().apply_gradients(grads.into_iter().zip(&vars))?;
        Ok((loss, g0))
    }
}

/// `steps` training steps of a traced [`Model`] against its eager twin:
/// the losses, the first kernel's gradients and the weights, equal (bit for
/// bit where `exact`, else within `1e-12` relative: the compiler may add in
/// another order); the losses, which differ from step to step.
fn train_against_eager(dtype: DType, optimize: bool, exact: bool) -> Result<Vec<f64>> {
    let x = Tensor::from_vec((0..32).map(|i| (0.37 * i as f64).sin()).collect(), &[8, 4])?.cast(dtype)?;
    let y = Tensor::from_vec((0..16).map(|i| (0.21 * i as f64).cos()).collect(), &[8, 2])?.cast(dtype)?;
    let eager = Model::new(dtype)?;
    let traced = Arc::new(Model::new(dtype)?);
    let opts = FunctionOptions {
        optimize,
        ..Default::default()
    };
    let f = Function::with_options(
        {
            let m = traced.clone();
            move |(x, y): &(Tensor, Tensor)| {
                let (l, g) = m.step(x, y)?;
                Ok(vec![l, g])
            }
        },
        opts,
    );
    let same = |a: &Tensor, b: &Tensor, what: &str| {
        if exact {
            assert_eq!(bits(a), bits(b), "{dtype} {what}");
        } else {
            for (u, v) in a.to_vec_f64().iter().zip(b.to_vec_f64()) {
                assert!((u - v).abs() <= 1e-12 * v.abs().max(1.0), "{dtype} {what}: {u} vs {v}");
            }
        }
    };
    let mut losses = Vec::new();
    for step in 0..5 {
        let got = f.call(&(x.clone(), y.clone()))?;
        let (loss, g0) = eager.step(&x, &y)?;
        same(&got[0], &loss, &format!("step {step}: loss"));
        same(&got[1], &g0, &format!("step {step}: the first kernel's gradient"));
        for (a, b) in traced.variables().iter().zip(eager.variables()) {
            same(&a.read(), &b.read(), &format!("step {step}: {}", b.name()));
        }
        losses.push(loss.item()?);
    }
    assert_eq!(f.trace_count(), 1);
    // the masks differ from step to step (else the test says little)
    assert!(losses.windows(2).all(|w| w[0] != w[1]), "{losses:?}");
    Ok(losses)
}

#[test]
fn a_training_step_with_dropout_traced_is_the_eager_step_bit_for_bit() -> Result<()> {
    // the traced graph as it was recorded: the eager kernels, bit for bit
    for dtype in [DType::F32, DType::F64] {
        train_against_eager(dtype, false, true)?;
    }
    // compiled (fused, products joined): the same masks, up to rounding
    train_against_eager(DType::F64, true, false)?;
    Ok(())
}

#[test]
fn a_tape_around_a_traced_call_differentiates_the_mask_it_drew_and_advances_once() -> Result<()> {
    let layer = Arc::new(Dropout::new(0.5, &mut Rng::new(9))?);
    let twin = Dropout::new(0.5, &mut Rng::new(9))?;
    let f = function({
        let layer = layer.clone();
        move |x: &Tensor| layer.forward(x, true)?.mul(x)?.sum_all()
    });
    let x = Tensor::from_vec((1..=32).map(f64::from).collect(), &[32])?;
    for call in 0..3 {
        // traced: the gradient function is traced (once), its forward
        // half run: one mask drawn, at the stream's next position
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x);
            f.call(&x)
        })?;
        let g = tape.gradient(&y, &x)?.expect("dx");
        let tape = GradientTape::new();
        let want = tape.record(|| {
            tape.watch(&x);
            twin.forward(&x, true)?.mul(&x)?.sum_all()
        })?;
        let gw = tape.gradient(&want, &x)?.expect("dx");
        assert_eq!(bits(&y), bits(&want), "call {call}");
        assert_eq!(bits(&g), bits(&gw), "call {call}: gradient");
    }
    Ok(())
}

#[test]
fn a_generator_made_inside_the_traced_code_starts_again_at_each_call() -> Result<()> {
    let outer = Arc::new(Mutex::new(Rng::new(21)));
    let body = |outer: &mut Rng, x: &Tensor| -> Result<Tensor> {
        let mut local = Rng::new(4);
        let mut copy = outer.clone(); // copies, does not advance, `outer`
        let mut child = outer.split(); // advances `outer`
        let a = local.normal(&[3], 0.0, 1.0, DType::F64)?;
        let b = local.normal(&[3], 0.0, 1.0, DType::F64)?;
        let c = copy.uniform(&[3], 0.0, 1.0, DType::F64)?;
        let d = child.uniform(&[3], 0.0, 1.0, DType::F64)?;
        let e = outer.uniform(&[3], 0.0, 1.0, DType::F64)?;
        Tensor::concat(&[x, &a, &b, &c, &d, &e], 0)
    };
    let f = function({
        let outer = outer.clone();
        move |x: &Tensor| body(&mut outer.lock().unwrap(), x)
    });
    let x = Tensor::zeros(&[1], DType::F64);
    let mut eager = Rng::new(21);
    let mut runs = Vec::new();
    for call in 0..3 {
        let got = f.call(&x)?;
        assert_eq!(bits(&got), bits(&body(&mut eager, &x)?), "call {call}");
        assert_eq!(*outer.lock().unwrap(), eager, "call {call}");
        runs.push(got.to_vec_f64());
    }
    // the local generator draws the same at every call; the others do not
    assert_eq!(runs[0][1..7], runs[2][1..7]);
    assert_ne!(runs[0][7..], runs[1][7..]);
    Ok(())
}

#[test]
fn a_branch_not_taken_does_not_advance_the_generator() -> Result<()> {
    let rng = Arc::new(Mutex::new(Rng::new(2)));
    let body = |rng: &Mutex<Rng>, p: &Tensor| -> Result<Tensor> {
        let before = rng.lock().unwrap().normal(&[2], 0.0, 1.0, DType::F64)?;
        let mid = cond(
            p,
            || rng.lock().unwrap().uniform(&[2], 0.0, 1.0, DType::F64),
            || Tensor::zeros(&[2], DType::F64).add_scalar(-1.0),
        )?;
        let after = rng.lock().unwrap().normal(&[2], 0.0, 1.0, DType::F64)?;
        Tensor::concat(&[&before, &mid, &after], 0)
    };
    let f = function({
        let rng = rng.clone();
        move |p: &Tensor| body(&rng, p)
    });
    let eager = Mutex::new(Rng::new(2));
    for (call, p) in [true, false, false, true, false].into_iter().enumerate() {
        let p = Tensor::scalar(p);
        assert_eq!(bits(&f.call(&p)?), bits(&body(&eager, &p)?), "call {call}");
        assert_eq!(*rng.lock().unwrap(), *eager.lock().unwrap(), "call {call}");
    }
    assert_eq!(eager.lock().unwrap().position(), 2 * 5 + 2);
    Ok(())
}

#[test]
fn a_loop_body_draws_at_each_iteration() -> Result<()> {
    let rng = Arc::new(Mutex::new(Rng::new(8)));
    let body = |rng: &Mutex<Rng>, n: &Tensor| -> Result<Tensor> {
        let (_, s) = while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(n),
            |(i, s): &(Tensor, Tensor)| {
                let z = rng.lock().unwrap().normal(&[3], 0.0, 1.0, DType::F64)?;
                Ok((i.add(&Tensor::scalar(1i64))?, s.mul_scalar(2.0)?.add(&z)?))
            },
            (Tensor::scalar(0i64), Tensor::zeros(&[3], DType::F64)),
            WhileOptions::default(),
        )?;
        let tail = rng.lock().unwrap().uniform(&[1], 0.0, 1.0, DType::F64)?;
        Tensor::concat(&[&s, &tail], 0)
    };
    let f = function({
        let rng = rng.clone();
        move |n: &Tensor| body(&rng, n)
    });
    let eager = Mutex::new(Rng::new(8));
    for (call, n) in [3i64, 0, 5, 1].into_iter().enumerate() {
        let n = Tensor::scalar(n);
        assert_eq!(bits(&f.call(&n)?), bits(&body(&eager, &n)?), "call {call}");
        assert_eq!(*rng.lock().unwrap(), *eager.lock().unwrap(), "call {call}");
    }
    assert_eq!(eager.lock().unwrap().position(), 3 + 5 + 1 + 4);
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn an_unused_draw_advances_the_generator_as_eagerly() -> Result<()> {
    let rng = Arc::new(Mutex::new(Rng::new(6)));
    let body = |rng: &Mutex<Rng>, x: &Tensor| -> Result<Tensor> {
        let mut r = rng.lock().unwrap();
        let _unused = r.normal(&[1000], 0.0, 1.0, DType::F32)?;
        x.add(&r.uniform(&[2], 0.0, 1.0, DType::F32)?)
    };
    let f = function({
        let rng = rng.clone();
        move |x: &Tensor| body(&rng, x)
    });
    let eager = Mutex::new(Rng::new(6));
    let x = Tensor::zeros(&[2], DType::F32);
    for call in 0..3 {
        assert_eq!(bits(&f.call(&x)?), bits(&body(&eager, &x)?), "call {call}");
    }
    assert_eq!(rng.lock().unwrap().position(), 6);
    Ok(())
}

#[test]
fn a_retrace_and_a_nested_function_continue_the_stream() -> Result<()> {
    let rng = Arc::new(Mutex::new(Rng::new(13)));
    let inner = Arc::new(function({
        let rng = rng.clone();
        move |x: &Tensor| x.add(&rng.lock().unwrap().normal(x.shape(), 0.0, 1.0, DType::F64)?)
    }));
    let outer = function({
        let (rng, inner) = (rng.clone(), inner.clone());
        move |x: &Tensor| {
            let a = inner.call(x)?;
            let b = rng.lock().unwrap().uniform(x.shape(), 0.0, 1.0, DType::F64)?;
            inner.call(&a.add(&b)?)
        }
    });
    let mut eager = Rng::new(13);
    let mut want = |x: &Tensor| -> Result<Tensor> {
        let a = x.add(&eager.normal(x.shape(), 0.0, 1.0, DType::F64)?)?;
        let b = eager.uniform(x.shape(), 0.0, 1.0, DType::F64)?;
        let c = a.add(&b)?;
        c.add(&eager.normal(x.shape(), 0.0, 1.0, DType::F64)?)
    };
    // a new shape at the third call: traced again, from where the
    // generator stands
    for (call, n) in [2usize, 2, 3, 2, 3].into_iter().enumerate() {
        let x = Tensor::from_vec((0..n).map(|i| i as f64).collect(), &[n])?;
        assert_eq!(bits(&outer.call(&x)?), bits(&want(&x)?), "call {call}");
    }
    assert_eq!(outer.trace_count(), 2);
    assert_eq!(rng.lock().unwrap().position(), eager.position());
    Ok(())
}

#[test]
fn a_clone_is_an_independent_copy() {
    let mut a = Rng::new(1);
    a.next_u64();
    let mut b = a.clone();
    assert_eq!(a, b);
    assert_eq!(a.next_u64(), b.next_u64());
    a.next_u64();
    assert_eq!(a.position(), 3);
    assert_eq!(b.position(), 2);
    assert_ne!(a, b);
}

#[test]
fn shuffled_rows_are_the_eager_order_at_each_call_and_a_host_permutation_is_an_error() -> Result<()> {
    let t = Tensor::from_vec((0..24).map(f64::from).collect(), &[12, 2])?;
    let rng = Arc::new(Mutex::new(Rng::new(17)));
    let f = function({
        let rng = rng.clone();
        move |t: &Tensor| {
            let mut r = rng.lock().unwrap();
            let s = r.shuffle_rows(t)?;
            s.add(&r.uniform(&[1], 0.0, 1.0, DType::F64)?)
        }
    });
    let mut eager = Rng::new(17);
    let mut orders = Vec::new();
    for call in 0..3 {
        let want = eager
            .shuffle_rows(&t)?
            .add(&eager.uniform(&[1], 0.0, 1.0, DType::F64)?)?;
        let got = f.call(&t)?;
        assert_eq!(bits(&got), bits(&want), "call {call}");
        orders.push(got.to_vec_f64());
    }
    assert_ne!(orders[0], orders[1]);
    assert_eq!(*rng.lock().unwrap(), eager);
    // and differentiable through the node: the gradient of a weighted sum
    // is the weights in the drawn order
    let w = Tensor::from_vec((0..24).map(|i| i as f64 * 0.5).collect(), &[12, 2])?;
    let g = function({
        let rng = rng.clone();
        let w = w.clone();
        move |t: &Tensor| {
            let tape = GradientTape::new();
            let y = tape.record(|| {
                tape.watch(t);
                rng.lock().unwrap().shuffle_rows(t)?.mul(&w)?.sum_all()
            })?;
            Ok(vec![y.clone(), tape.gradient(&y, t)?.expect("dt")])
        }
    });
    let got = g.call(&t)?;
    let mut twin = eager.clone();
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&t);
        twin.shuffle_rows(&t)?.mul(&w)?.sum_all()
    })?;
    assert_eq!(bits(&got[0]), bits(&y));
    assert_eq!(bits(&got[1]), bits(&tape.gradient(&y, &t)?.expect("dt")));
    // a permutation made on the host would be frozen at trace time
    let p = function({
        let rng = rng.clone();
        move |t: &Tensor| {
            let order = rng.lock().unwrap().permutation(t.shape()[0])?;
            t.gather(
                &Tensor::from_vec(order.iter().map(|&i| i as i64).collect(), &[order.len()])?,
                0,
            )
        }
    });
    let e = p.call(&t).unwrap_err().to_string();
    assert!(e.contains("permutation") && e.contains("traced function"), "{e}");
    Ok(())
}

#[test]
fn an_attention_layer_drops_the_eager_probabilities_in_a_traced_call() -> Result<()> {
    use gradtape::nn::MultiHeadAttention;
    let layer = |seed| {
        MultiHeadAttention::builder(2, 4)
            .dropout(0.3)
            .dtype(DType::F64)
            .build(8, &mut Rng::new(seed))
    };
    let x = Rng::new(1).normal(&[2, 5, 8], 0.0, 1.0, DType::F64)?;
    // the traced graph bit for bit; compiled, up to the rounding of its
    // fused kernels (other masks would be far off)
    for optimize in [false, true] {
        let traced = Arc::new(layer(31)?);
        let eager = layer(31)?;
        let opts = FunctionOptions {
            optimize,
            ..Default::default()
        };
        let m = traced.clone();
        let f = Function::with_options(
            move |x: &Tensor| {
                let tape = GradientTape::new();
                let y = tape.record(|| {
                    tape.watch(x);
                    m.forward(x, true)?.square()?.sum_all()
                })?;
                Ok(vec![y.clone(), tape.gradient(&y, x)?.expect("dx")])
            },
            opts,
        );
        let mut values = Vec::new();
        for call in 0..3 {
            let got = f.call(&x)?;
            let tape = GradientTape::new();
            let y = tape.record(|| {
                tape.watch(&x);
                eager.forward(&x, true)?.square()?.sum_all()
            })?;
            let g = tape.gradient(&y, &x)?.expect("dx");
            for (what, a, b) in [("value", &got[0], &y), ("gradient", &got[1], &g)] {
                if optimize {
                    for (u, v) in a.to_vec_f64().iter().zip(b.to_vec_f64()) {
                        assert!(
                            (u - v).abs() <= 1e-12 * v.abs().max(1.0),
                            "call {call} {what}: {u} vs {v}"
                        );
                    }
                } else {
                    assert_eq!(bits(a), bits(b), "call {call} {what}");
                }
            }
            values.push(y.item()?);
        }
        assert!(values[0] != values[1] && values[1] != values[2], "{values:?}");
    }
    Ok(())
}

#[test]
fn a_second_order_gradient_through_a_traced_call_recomputes_the_masks_it_drew() -> Result<()> {
    // the second derivative reaches the call's saved values: the forward
    // graph is run again for it, and must draw what the first run drew
    // (it drew another mask, and advanced the generator twice)
    let layer = Arc::new(Dropout::new(0.5, &mut Rng::new(9))?);
    let twin = Dropout::new(0.5, &mut Rng::new(9))?;
    let f = function({
        let layer = layer.clone();
        move |x: &Tensor| layer.forward(x, true)?.mul(x)?.mul(x)?.sum_all()
    });
    let x = Tensor::from_vec((1..=32).map(f64::from).collect(), &[32])?;
    let run = |g: &dyn Fn(&Tensor) -> Result<Tensor>| -> Result<Vec<Vec<u64>>> {
        let outer = GradientTape::new();
        let (y, d1) = outer.record(|| {
            outer.watch(&x);
            let inner = GradientTape::new();
            let y = inner.record(|| {
                inner.watch(&x);
                g(&x)
            })?;
            Ok((y.clone(), inner.gradient(&y, &x)?.expect("d1").sum_all()?))
        })?;
        let d2 = outer.gradient(&d1, &x)?.expect("d2");
        Ok(vec![bits(&y), bits(&d1), bits(&d2)])
    };
    for call in 0..3 {
        let traced = run(&|x| f.call(x))?;
        let eager = run(&|x| twin.forward(x, true)?.mul(x)?.mul(x)?.sum_all())?;
        assert_eq!(traced, eager, "call {call}: value, first and second derivatives");
    }
    Ok(())
}
