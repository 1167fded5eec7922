//! Traced functions: tracing, retracing, the graph, variables, gradients
//! inside and through calls.

use gradtape::{
    function, gradients, DType, Function, FunctionOptions, GradientTape, GradientsOptions, Result, Tensor, TensorSpec,
    Unconnected, Variable,
};

fn close(a: &Tensor, b: &[f64], tol: f64) {
    let a = a.to_vec_f64();
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?} vs {b:?}");
    }
}

#[test]
fn a_function_gives_the_eager_result_and_traces_once_per_signature() -> Result<()> {
    let f = function(|(x, y): &(Tensor, Tensor)| x.mul(y)?.sin()?.add(&x.exp()?));
    let eager = |x: &Tensor, y: &Tensor| x.mul(y)?.sin()?.add(&x.exp()?);
    for k in 0..3 {
        let x = Tensor::vector(&[0.5f64 + k as f64, -1.0, 2.0]);
        let y = Tensor::vector(&[1.5f64, 0.25 * k as f64, -3.0]);
        let got = f.call(&(x.clone(), y.clone()))?;
        assert_eq!(got.to_vec::<f64>()?, eager(&x, &y)?.to_vec::<f64>()?);
    }
    assert_eq!(f.trace_count(), 1);
    f.call(&(Tensor::vector(&[1.0f32]), Tensor::vector(&[2.0f32])))?;
    assert_eq!(f.trace_count(), 2);
    Ok(())
}

#[test]
fn the_graph_lists_each_op_once_without_dead_code() -> Result<()> {
    let f = function(|x: &Tensor| {
        let _dead = x.cos()?.exp()?;
        let a = x.mul(x)?;
        let b = x.mul(x)?; // the same as a
        a.add(&b)?.sum_all()
    });
    let g = f.graph(&Tensor::vector(&[1.0f32, 2.0]))?;
    assert_eq!(g.count("Mul"), 1, "{g}");
    assert_eq!(g.count("Cos"), 0, "{g}");
    assert_eq!(g.count("Exp"), 0, "{g}");
    let listing = g.to_string();
    assert!(listing.contains("Sum[axes=[0]]"), "{listing}");
    assert!(listing.starts_with("graph(%0: f32[2])"), "{listing}");
    Ok(())
}

#[test]
fn variables_are_read_and_written_at_each_call_in_program_order() -> Result<()> {
    let v = Variable::new(Tensor::scalar(1.0f64));
    let vc = v.clone();
    let f = function(move |x: &Tensor| {
        let before = vc.read();
        vc.assign_add(x)?;
        let after = vc.read();
        before.mul(&after)
    });
    // tracing does not write: only the run does, once
    let r = f.call(&Tensor::scalar(2.0f64))?;
    assert_eq!(r.to_scalar::<f64>()?, 3.0);
    assert_eq!(v.read().to_scalar::<f64>()?, 3.0);
    let r = f.call(&Tensor::scalar(1.0f64))?;
    assert_eq!(r.to_scalar::<f64>()?, 12.0);
    assert_eq!(v.read().to_scalar::<f64>()?, 4.0);
    // an outside assignment is seen by the next call
    v.assign(&Tensor::scalar(10.0f64))?;
    assert_eq!(f.call(&Tensor::scalar(0.0f64))?.to_scalar::<f64>()?, 100.0);
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn a_training_step_with_a_tape_inside_is_one_graph() -> Result<()> {
    let w = Variable::new(Tensor::vector(&[0.5f64, -0.5]));
    let wc = w.clone();
    let step = function(move |(x, y): &(Tensor, Tensor)| {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            x.matmul(&wc.read().reshape(&[2, 1])?)?
                .reshape(&[2])?
                .sub(y)?
                .square()?
                .sum_all()
        })?;
        let g = tape.gradient(&loss, &wc)?.expect("connected");
        wc.apply_gradient_descent(0.1, &g)?;
        Ok(loss)
    });
    let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    let y = Tensor::vector(&[1.0f64, 2.0]);
    // the same steps eagerly
    let we = Variable::new(Tensor::vector(&[0.5f64, -0.5]));
    for _ in 0..3 {
        let tape = GradientTape::new();
        let loss_e = tape.record(|| {
            x.matmul(&we.read().reshape(&[2, 1])?)?
                .reshape(&[2])?
                .sub(&y)?
                .square()?
                .sum_all()
        })?;
        let g = tape.gradient(&loss_e, &we)?.expect("connected");
        we.apply_gradient_descent(0.1, &g)?;
        let loss_t = step.call(&(x.clone(), y.clone()))?;
        assert_eq!(loss_t.to_scalar::<f64>()?, loss_e.to_scalar::<f64>()?);
        assert_eq!(w.read().to_vec::<f64>()?, we.read().to_vec::<f64>()?);
    }
    assert_eq!(step.trace_count(), 1);
    let g = step.graph(&(x, y))?;
    assert_eq!(g.count("ApplyGradientDescent"), 1, "{g}");
    assert_eq!(g.count("ReadVariable"), 1, "{g}");
    Ok(())
}

#[test]
fn gradients_inside_a_trace_follow_tf_gradients() -> Result<()> {
    // d/dx of sum(x^3) with grad_ys = 2: 6 x^2
    let f = function(|x: &Tensor| {
        let y = x.pow_scalar(3.0)?.sum_all()?;
        let opts = GradientsOptions {
            grad_ys: Some(vec![Tensor::scalar(2.0f64)]),
            ..Default::default()
        };
        Ok(gradients(&[y], x, opts)?.expect("connected"))
    });
    close(&f.call(&Tensor::vector(&[1.0f64, -2.0]))?, &[6.0, 24.0], 1e-12);
    close(&f.call(&Tensor::vector(&[0.5f64, 3.0]))?, &[1.5, 54.0], 1e-12);
    // stop_gradients: z = x * stop(x*x) -> dz/dx = x*x; unconnected sources
    let f = function(|(x, u): &(Tensor, Tensor)| {
        let s = x.mul(x)?;
        let z = x.mul(&s)?.sum_all()?;
        let opts = GradientsOptions {
            stop_gradients: vec![s],
            unconnected: Unconnected::Zero,
            ..Default::default()
        };
        let [gx, gu] = gradients(&[z], &[x, u], opts)?;
        Ok((gx.expect("x"), gu.expect("zeros")))
    });
    let (gx, gu) = f.call(&(Tensor::vector(&[2.0f64, 3.0]), Tensor::scalar(1.0f64)))?;
    assert_eq!(gx.to_vec::<f64>()?, vec![4.0, 9.0]);
    assert_eq!(gu.to_scalar::<f64>()?, 0.0);
    // outside a trace: an error
    let x = Tensor::scalar(1.0f64);
    assert!(gradients(std::slice::from_ref(&x), &x, GradientsOptions::default()).is_err());
    Ok(())
}

#[test]
fn a_function_under_a_tape_is_one_op_with_higher_derivatives() -> Result<()> {
    let f = function(|x: &Tensor| x.mul(x)?.mul(x)?.sin());
    let x = Tensor::scalar(0.7f64);
    let outer = GradientTape::new();
    let inner = GradientTape::new();
    let (d1, d2) = {
        let d1 = outer.record(|| {
            outer.watch(&x);
            let y = inner.record(|| {
                inner.watch(&x);
                f.call(&x)
            })?;
            Ok(inner.gradient(&y, &x)?.expect("connected"))
        })?;
        let d2 = outer.gradient(&d1, &x)?.expect("connected");
        (d1, d2)
    };
    // y = sin(x^3): y' = 3x^2 cos(x^3), y'' = 6x cos(x^3) - 9x^4 sin(x^3)
    let v = 0.7f64;
    let c = (v * v * v).cos();
    let s = (v * v * v).sin();
    close(&d1, &[3.0 * v * v * c], 1e-12);
    close(&d2, &[6.0 * v * c - 9.0 * v.powi(4) * s], 1e-12);
    Ok(())
}

#[test]
fn gradients_through_a_call_reach_variables_it_reads() -> Result<()> {
    let w = Variable::new(Tensor::vector(&[1.0f64, 2.0]));
    let wc = w.clone();
    let f = function(move |x: &Tensor| x.mul(&wc.read())?.square()?.sum_all());
    let x = Tensor::vector(&[3.0f64, -1.0]);
    let tape = GradientTape::new();
    let y = tape.record(|| f.call(&x))?;
    let gw = tape.gradient(&y, &w)?.expect("watched on read");
    // d/dw sum((x w)^2) = 2 x^2 w
    assert_eq!(gw.to_vec::<f64>()?, vec![18.0, 4.0]);
    Ok(())
}

#[test]
fn a_fixed_signature_serves_every_fitting_call_and_rejects_others() -> Result<()> {
    let opts = FunctionOptions {
        input_signature: Some(vec![TensorSpec::new(DType::F64, &[None, Some(2)])]),
        ..Default::default()
    };
    let f = Function::with_options(|x: &Tensor| x.sum(&[1], false), opts);
    for n in 1..4 {
        let x = Tensor::ones(&[n, 2], DType::F64);
        assert_eq!(f.call(&x)?.to_vec::<f64>()?, vec![2.0; n]);
    }
    assert_eq!(f.trace_count(), 1);
    let e = f.call(&Tensor::ones(&[2, 3], DType::F64)).unwrap_err().to_string();
    assert!(e.contains("does not fit the signature"), "{e}");
    Ok(())
}

#[test]
fn a_retracing_storm_can_be_made_an_error() -> Result<()> {
    let opts = FunctionOptions {
        max_traces: Some(2),
        ..Default::default()
    };
    let f = Function::with_options(|x: &Tensor| x.neg(), opts);
    f.call(&Tensor::ones(&[1], DType::F32))?;
    f.call(&Tensor::ones(&[2], DType::F32))?;
    let e = f.call(&Tensor::ones(&[3], DType::F32)).unwrap_err().to_string();
    assert!(e.contains("max_traces"), "{e}");
    Ok(())
}

/// `tanh(W x + b)` as a function of `x` and of variables.
fn layer() -> (Variable, Variable) {
    let w = Variable::new(Tensor::from_vec(vec![0.5f64, -1.0, 2.0, 0.25, 1.5, -0.75], &[3, 2]).unwrap());
    let b = Variable::new(Tensor::vector(&[0.1f64, -0.2, 0.3]));
    (w, b)
}

fn eager_layer(w: &Variable, b: &Variable, x: &Tensor) -> Result<Tensor> {
    w.read()
        .matmul(&x.reshape(&[2, 1])?)?
        .reshape(&[3])?
        .add(&b.read())?
        .tanh()
}

#[test]
fn jacobian_hessian_and_hvp_go_through_a_call() -> Result<()> {
    let (w, b) = layer();
    let (wc, bc) = (w.clone(), b.clone());
    let f = function(move |x: &Tensor| eager_layer(&wc, &bc, x));
    let x = Tensor::vector(&[0.3f64, -0.8]);
    // Jacobian through the call vs eager, vectorized and row by row
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&x);
        f.call(&x)
    })?;
    let j_traced = tape.jacobian(&y, &x)?.expect("connected");
    let tape_e = GradientTape::persistent();
    let ye = tape_e.record(|| {
        tape_e.watch(&x);
        eager_layer(&w, &b, &x)
    })?;
    let j_eager = tape_e.jacobian(&ye, &x)?.expect("connected");
    assert_eq!(j_traced.shape(), &[3, 2]);
    close(&j_traced, &j_eager.to_vec_f64(), 1e-14);
    // Hessian (nested tapes) and hvp (forward over reverse) of a scalar of it
    let (wc, bc) = (w.clone(), b.clone());
    let g = function(move |x: &Tensor| eager_layer(&wc, &bc, x)?.square()?.sum_all());
    let h_traced = gradtape::hessian(|x| g.call(x), &x)?;
    let h_eager = gradtape::hessian(|x| eager_layer(&w, &b, x)?.square()?.sum_all(), &x)?;
    close(&h_traced, &h_eager.to_vec_f64(), 1e-12);
    let v = Tensor::vector(&[1.0f64, -2.0]);
    let hv_traced = gradtape::hvp(|x| g.call(x), &x, &v)?;
    let hv_eager = gradtape::hvp(|x| eager_layer(&w, &b, x)?.square()?.sum_all(), &x, &v)?;
    close(&hv_traced, &hv_eager.to_vec_f64(), 1e-12);
    Ok(())
}

/// A structure of tensors and variables as a function's argument.
struct Batch {
    x: Tensor,
    y: Tensor,
    w: Variable,
}

impl gradtape::TensorStruct for Batch {
    fn leaves<'a>(&'a self, out: &mut Vec<gradtape::Leaf<'a>>) {
        self.x.leaves(out);
        self.y.leaves(out);
        self.w.leaves(out);
    }
    fn rebuild(&self, t: &mut dyn Iterator<Item = Tensor>) -> Result<Self> {
        Ok(Batch {
            x: self.x.rebuild(t)?,
            y: self.y.rebuild(t)?,
            w: self.w.rebuild(t)?,
        })
    }
}

#[test]
fn a_struct_of_tensors_and_variables_is_an_argument_and_variables_are_part_of_the_signature() -> Result<()> {
    let f = function(|b: &Batch| b.x.mul(&b.w.read())?.sub(&b.y)?.square()?.sum_all());
    let w1 = Variable::new(Tensor::vector(&[2.0f64, 3.0]));
    let w2 = Variable::new(Tensor::vector(&[1.0f64, 1.0]));
    let batch = |w: &Variable| Batch {
        x: Tensor::vector(&[1.0f64, 2.0]),
        y: Tensor::vector(&[0.0f64, 1.0]),
        w: w.clone(),
    };
    assert_eq!(f.call(&batch(&w1))?.to_scalar::<f64>()?, 4.0 + 25.0);
    assert_eq!(f.call(&batch(&w2))?.to_scalar::<f64>()?, 1.0 + 1.0);
    // another variable is another signature: two traces
    assert_eq!(f.trace_count(), 2);
    w1.assign(&Tensor::vector(&[0.0f64, 0.5]))?;
    assert_eq!(f.call(&batch(&w1))?.to_scalar::<f64>()?, 0.0);
    assert_eq!(f.trace_count(), 2);
    Ok(())
}

#[test]
fn a_function_called_inside_another_is_one_call_node() -> Result<()> {
    let inner = std::sync::Arc::new(function(|x: &Tensor| x.exp()?.mul(x)));
    let i2 = inner.clone();
    let outer = function(move |x: &Tensor| {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            i2.call(&x.sin()?)?.sum_all()
        })?;
        Ok(tape.gradient(&y, x)?.expect("connected"))
    });
    let x = Tensor::vector(&[0.2f64, 1.0]);
    let g = outer.call(&x)?;
    // d/dx sum(s e^s), s = sin x: (1 + s) e^s cos x
    let want: Vec<f64> = [0.2f64, 1.0]
        .iter()
        .map(|&v| (1.0 + v.sin()) * v.sin().exp() * v.cos())
        .collect();
    close(&g, &want, 1e-14);
    let graph = outer.graph(&x)?;
    assert!(graph.count("Call") >= 2, "forward and gradient calls: {graph}");
    Ok(())
}

#[test]
fn calling_with_wrong_arguments_is_an_error() -> Result<()> {
    let f = function(|xs: &Vec<Tensor>| xs[0].add(&xs[1]));
    // a closure error surfaces at trace time with its own op name
    let e = f
        .call(&vec![Tensor::vector(&[1.0f32]), Tensor::vector(&[1.0f64])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("add") && e.contains("dtype"), "{e}");
    // an op that cannot be traced yet is an error naming it, never a frozen value
    let opts = FunctionOptions {
        input_signature: Some(vec![TensorSpec::new(DType::F32, &[Some(2)]); 2]),
        ..Default::default()
    };
    let g = Function::with_options(|xs: &Vec<Tensor>| xs[0].add(&xs[1]), opts);
    let e = g.call(&vec![Tensor::vector(&[1.0f32, 2.0])]).unwrap_err().to_string();
    assert!(e.contains("takes 2 tensors"), "{e}");
    Ok(())
}

#[test]
fn reading_a_traced_value_is_an_error_and_the_traced_checker_finds_frozen_values() -> Result<()> {
    // a Rust decision on a traced value cannot be made at trace time
    let f = function(|x: &Tensor| {
        if x.sum_all()?.to_scalar::<f64>()? > 0.0 {
            x.exp()
        } else {
            x.neg()
        }
    });
    let e = f.call(&Tensor::vector(&[1.0f64])).unwrap_err().to_string();
    assert!(e.contains("inside a traced function"), "{e}");
    // constants made inside are readable
    let g = function(|x: &Tensor| {
        let c = Tensor::scalar(2.0f64);
        x.mul_scalar(c.to_scalar::<f64>()?)
    });
    assert_eq!(g.call(&Tensor::scalar(3.0f64))?.to_scalar::<f64>()?, 6.0);
    // the checker passes for a traceable op and fails for one whose value
    // would be frozen (made with a constructor from a value read on the
    // host: the read itself is refused while tracing)
    let x = Tensor::vector(&[0.3f64, -1.2, 2.0]);
    let ok = gradtape::check_traced(
        |xs: &[Tensor]| xs[0].sin()?.mul(&xs[0]),
        std::slice::from_ref(&x),
        &gradtape::TracedCheckOptions::default(),
    )?;
    assert_eq!(ok.values, 3);
    assert!(ok.gradients >= 9, "{ok:?}");
    let frozen = |xs: &[Tensor]| xs[0].add(&Tensor::from_vec(xs[0].try_to_vec_f64()?, xs[0].shape())?);
    let e = gradtape::check_traced(frozen, &[x], &gradtape::TracedCheckOptions::default()).unwrap_err();
    assert!(e.to_string().contains("traced"), "{e}");
    Ok(())
}

/// A trace keeps no value alive that no gradient rule needs: the tensors
/// an op makes while tracing are the example values of the graph, and
/// they are freed as the closure drops them, as eagerly (before, the
/// trace held every value to its end, which made tracing the peak of a
/// GPT training run's memory).
#[test]
fn tracing_frees_the_values_nothing_needs() -> Result<()> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let inside = seen.clone();
    let f = function(move |x: &Tensor| {
        // `add_scalar`'s rule keeps nothing: only this closure holds `a`
        let a = x.add_scalar(1.0)?;
        let b = a.add_scalar(2.0)?;
        inside.lock().unwrap().push(a.ref_count());
        drop(a);
        b.sum_all()
    });
    let x = Tensor::vector(&[1.0f32, 2.0]);
    assert_eq!(f.call(&x)?.item()?, 9.0);
    assert_eq!(*seen.lock().unwrap(), vec![1], "the trace holds the intermediate");
    Ok(())
}

#[test]
fn functions_take_and_return_tuples_of_up_to_twelve() -> Result<()> {
    // (a new user's training step returned nine values: loss, metrics and
    // gradients; tuples stopped at six)
    type Nine = (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor);
    let body = |x: &Tensor| -> Result<Nine> {
        Ok((
            x.sin()?,
            x.cos()?,
            x.exp()?,
            x.square()?,
            x.neg()?,
            x.abs()?,
            x.tanh()?,
            x.sum_all()?,
            x.mul_scalar(3.0)?,
        ))
    };
    let f = function(body);
    let x = Tensor::vector(&[0.5f64, -1.25, 2.0]);
    let (got, want) = (f.call(&x)?, body(&x)?);
    assert_eq!(got.8.to_vec::<f64>()?, want.8.to_vec::<f64>()?);
    assert_eq!(got.0.to_vec::<f64>()?, want.0.to_vec::<f64>()?);
    assert_eq!(got.7.to_vec::<f64>()?, want.7.to_vec::<f64>()?);
    // twelve inputs
    type Twelve = (
        Tensor,
        Tensor,
        Tensor,
        Tensor,
        Tensor,
        Tensor,
        Tensor,
        Tensor,
        Tensor,
        Tensor,
        Tensor,
        Tensor,
    );
    let g = function(|a: &Twelve| a.0.add(&a.11)?.mul(&a.5));
    let t = |v: f64| Tensor::scalar(v);
    let args = (
        t(1.0),
        t(2.0),
        t(3.0),
        t(4.0),
        t(5.0),
        t(6.0),
        t(7.0),
        t(8.0),
        t(9.0),
        t(10.0),
        t(11.0),
        t(12.0),
    );
    assert_eq!(g.call(&args)?.to_vec::<f64>()?, vec![78.0]);
    Ok(())
}
