//! The functional API: grad, value_and_grad, make_vjp, implicit_grad,
//! implicit_value_and_grad. Expected values are derived by hand.

use gradtape::{
    grad, implicit_grad, implicit_value_and_grad, make_vjp, value_and_grad, DType, Error, GradientTape, Result, Tensor,
    Unconnected, Variable,
};

fn val(t: &Option<Tensor>) -> Vec<f64> {
    t.as_ref().expect("a gradient").to_vec_f64()
}

fn s(v: f64) -> Tensor {
    Tensor::scalar(v)
}

fn invalid_msg(e: Error) -> (&'static str, String) {
    match e {
        Error::InvalidArgument { op, msg } => (op, msg),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn the_same_tensor_twice_is_two_independent_parameters() -> Result<()> {
    // d(xy)/dx = y, d(xy)/dy = x; at (x, x) both are x
    let x = Tensor::vector(&[2.0f64, -3.0]);
    let g = grad(|a: &[Tensor]| a[0].mul(&a[1])).call(&[x.clone(), x.clone()])?;
    assert_eq!(g.len(), 2);
    assert_eq!(val(&g[0]), vec![2.0, -3.0]);
    assert_eq!(val(&g[1]), vec![2.0, -3.0]);
    // the tensor itself was not changed or watched by anything left over
    assert_eq!(x.to_vec::<f64>()?, vec![2.0, -3.0]);
    Ok(())
}

#[test]
fn params_choose_and_order_the_arguments() -> Result<()> {
    // f = x² y at (3, 2): df/dx = 2xy = 12, df/dy = x² = 9
    let f = |a: &[Tensor]| a[0].square()?.mul(&a[1]);
    let args = [s(3.0), s(2.0)];
    let all = grad(f).call(&args)?;
    assert_eq!((val(&all[0]), val(&all[1])), (vec![12.0], vec![9.0]));
    let only_y = grad(f).params(&[1]).call(&args)?;
    assert_eq!(only_y.len(), 1);
    assert_eq!(val(&only_y[0]), vec![9.0]);
    let swapped = grad(f).params(&[1, 0]).call(&args)?;
    assert_eq!((val(&swapped[0]), val(&swapped[1])), (vec![9.0], vec![12.0]));
    // the same position twice: the same gradient twice
    let twice = grad(f).params(&[0, 0]).call(&args)?;
    assert_eq!((val(&twice[0]), val(&twice[1])), (vec![12.0], vec![12.0]));
    Ok(())
}

#[test]
fn value_and_grad_returns_the_value() -> Result<()> {
    // f = sum(x * x) + 1 at [1, 2, 3]: value 15, gradient 2x
    let vg = value_and_grad(|a: &[Tensor]| a[0].mul(&a[0])?.sum_all()?.add_scalar(1.0));
    let (y, g) = vg.call(&[Tensor::vector(&[1.0f64, 2.0, 3.0])])?;
    assert_eq!(y.to_scalar::<f64>()?, 15.0);
    assert_eq!(val(&g[0]), vec![2.0, 4.0, 6.0]);
    Ok(())
}

#[test]
fn several_outputs_are_differentiated_through_their_sum() -> Result<()> {
    // outputs x² and 3x at x = 2: d(x² + 3x)/dx = 2x + 3 = 7
    let f = |a: &[Tensor]| Ok(vec![a[0].square()?, a[0].mul_scalar(3.0)?]);
    let (ys, g) = value_and_grad(f).call(&[s(2.0)])?;
    assert_eq!(ys.len(), 2);
    assert_eq!((ys[0].to_scalar::<f64>()?, ys[1].to_scalar::<f64>()?), (4.0, 6.0));
    assert_eq!(val(&g[0]), vec![7.0]);
    // an array of outputs works the same
    let g = grad(|a: &[Tensor]| Ok([a[0].square()?, a[0].mul_scalar(3.0)?])).call(&[s(2.0)])?;
    assert_eq!(val(&g[0]), vec![7.0]);
    Ok(())
}

#[test]
fn unconnected_and_integer_parameters() -> Result<()> {
    // f = x * cast(n) at x = 2, n = 3 (i64): df/dx = 3; n gets None
    let f = |a: &[Tensor]| a[0].mul(&a[1].cast(DType::F64)?);
    let g = grad(f).call(&[s(2.0), Tensor::scalar(3i64)])?;
    assert_eq!(val(&g[0]), vec![3.0]);
    assert!(g[1].is_none());
    // even with Unconnected::Zero an integer parameter gets None
    let g = grad(f)
        .unconnected(Unconnected::Zero)
        .call(&[s(2.0), Tensor::scalar(3i64)])?;
    assert!(g[1].is_none());
    // an unused float parameter: None, or zeros of its shape when asked
    let h = |a: &[Tensor]| a[0].square();
    let args = [s(2.0), Tensor::vector(&[1.0f64, 1.0])];
    let g = grad(h).call(&args)?;
    assert_eq!(val(&g[0]), vec![4.0]);
    assert!(g[1].is_none());
    let g = grad(h).unconnected(Unconnected::Zero).call(&args)?;
    let z = g[1].as_ref().expect("zeros");
    assert_eq!(z.shape(), &[2]);
    assert_eq!(z.to_vec::<f64>()?, vec![0.0, 0.0]);
    Ok(())
}

#[test]
fn a_parameter_index_out_of_range_is_an_error_naming_the_function() {
    let f = |a: &[Tensor]| a[0].square();
    let e = grad(f).params(&[0, 2]).call(&[s(1.0), s(2.0)]).unwrap_err();
    let (op, msg) = invalid_msg(e);
    assert_eq!(op, "grad");
    assert!(msg.contains("index 2") && msg.contains("2 arguments"), "{msg}");
    let e = value_and_grad(f).params(&[5]).call(&[s(1.0)]).unwrap_err();
    assert_eq!(invalid_msg(e).0, "value_and_grad");
}

#[test]
fn errors_of_the_function_pass_through() {
    let e = grad(|a: &[Tensor]| a[0].add(&a[1]))
        .call(&[Tensor::vector(&[1.0f64, 2.0]), Tensor::vector(&[1.0f64, 2.0, 3.0])])
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
}

#[test]
fn grad_of_grad_gives_the_second_derivative() -> Result<()> {
    // f = x³: f' = 3x² = 12, f'' = 6x = 12 at x = 2; f''' = 6
    let f = |a: &[Tensor]| a[0].pow_scalar(3.0);
    let df = grad(f);
    let d2f = grad(|a: &[Tensor]| Ok(df.call(a)?.into_iter().flatten().collect::<Vec<_>>()));
    let d3f = grad(|a: &[Tensor]| Ok(d2f.call(a)?.into_iter().flatten().collect::<Vec<_>>()));
    assert_eq!(val(&df.call(&[s(2.0)])?[0]), vec![12.0]);
    assert_eq!(val(&d2f.call(&[s(2.0)])?[0]), vec![12.0]);
    assert_eq!(val(&d3f.call(&[s(2.0)])?[0]), vec![6.0]);
    Ok(())
}

#[test]
fn an_outer_tape_sees_through_grad() -> Result<()> {
    // g(x) = d(x² y)/dx = 2xy; the outer tape takes dg/dx = 2y = 10 and dg/dy = 2x = 6
    let (x, y) = (s(3.0), s(5.0));
    let outer = GradientTape::persistent();
    let g = outer.record(|| {
        outer.watch(&[&x, &y]);
        let g = grad(|a: &[Tensor]| a[0].square()?.mul(&a[1]))
            .params(&[0])
            .call(&[x.clone(), y.clone()])?;
        Ok(g[0].clone().expect("connected"))
    })?;
    assert_eq!(g.to_scalar::<f64>()?, 30.0);
    assert_eq!(val(&outer.gradient(&g, &x)?), vec![10.0]);
    assert_eq!(val(&outer.gradient(&g, &y)?), vec![6.0]);
    Ok(())
}

#[test]
fn make_vjp_is_callable_several_times_with_any_cotangent() -> Result<()> {
    // y = x³ elementwise: vjp(dy) = dy * 3x²
    let x = Tensor::vector(&[1.0f64, 2.0, 3.0]);
    let (y, vjp) = make_vjp(|a: &[Tensor]| a[0].pow_scalar(3.0), std::slice::from_ref(&x))?;
    assert_eq!(y.to_vec::<f64>()?, vec![1.0, 8.0, 27.0]);
    assert_eq!(vjp.num_outputs(), 1);
    assert_eq!(
        val(&vjp.call(&[Tensor::vector(&[1.0f64, 1.0, 1.0])])?[0]),
        vec![3.0, 12.0, 27.0]
    );
    assert_eq!(
        val(&vjp.call(&[Tensor::vector(&[2.0f64, 0.0, -1.0])])?[0]),
        vec![6.0, 0.0, -27.0]
    );
    assert_eq!(
        val(&vjp.call(&[Tensor::vector(&[1.0f64, 1.0, 1.0])])?[0]),
        vec![3.0, 12.0, 27.0]
    );
    Ok(())
}

#[test]
fn make_vjp_with_several_outputs_and_arguments() -> Result<()> {
    // outputs (xy, x + y) at (2, 5) with cotangents (1, 10):
    // d/dx = y + 10 = 15, d/dy = x + 10 = 12
    let (ys, vjp) = make_vjp(
        |a: &[Tensor]| Ok(vec![a[0].mul(&a[1])?, a[0].add(&a[1])?]),
        &[s(2.0), s(5.0)],
    )?;
    assert_eq!((ys[0].to_scalar::<f64>()?, ys[1].to_scalar::<f64>()?), (10.0, 7.0));
    let d = vjp.call(&[s(1.0), s(10.0)])?;
    assert_eq!((val(&d[0]), val(&d[1])), (vec![15.0], vec![12.0]));
    // only the second output weighted: d/dx = d/dy = 1
    let d = vjp.call(&[s(0.0), s(1.0)])?;
    assert_eq!((val(&d[0]), val(&d[1])), (vec![1.0], vec![1.0]));
    // the same tensor for both arguments: two parameters
    let x = s(4.0);
    let (_, vjp) = make_vjp(|a: &[Tensor]| a[0].mul(&a[1]), &[x.clone(), x])?;
    let d = vjp.call(&[s(1.0)])?;
    assert_eq!((val(&d[0]), val(&d[1])), (vec![4.0], vec![4.0]));
    Ok(())
}

#[test]
fn make_vjp_checks_the_cotangents() -> Result<()> {
    let (_, vjp) = make_vjp(|a: &[Tensor]| a[0].square(), &[Tensor::vector(&[1.0f64, 2.0])])?;
    let (op, msg) = invalid_msg(vjp.call(&[]).unwrap_err());
    assert_eq!(op, "make_vjp");
    assert!(msg.contains("1 outputs") && msg.contains("0 cotangents"), "{msg}");
    let (op, msg) = invalid_msg(vjp.call(&[Tensor::vector(&[1.0f64, 2.0, 3.0])]).unwrap_err());
    assert_eq!(op, "make_vjp");
    assert!(msg.contains("[3]") && msg.contains("[2]"), "{msg}");
    let (_, msg) = invalid_msg(vjp.call(&[Tensor::vector(&[1.0f32, 2.0])]).unwrap_err());
    assert!(msg.contains("F32") && msg.contains("F64"), "{msg}");
    // the function still works after the failed calls
    assert_eq!(val(&vjp.call(&[Tensor::vector(&[1.0f64, 1.0])])?[0]), vec![2.0, 4.0]);
    Ok(())
}

#[test]
fn implicit_grad_pairs_gradients_with_variables_in_creation_order() -> Result<()> {
    let c = Variable::new(s(5.0)); // created first, read last
    let a = Variable::new(s(2.0));
    let frozen = Variable::builder(s(7.0)).trainable(false).build();
    let unused = Variable::new(s(1.0));
    // f = a² c x + frozen, at x = 3: df/dc = a² x = 12, df/da = 2 a c x = 60
    let f = |xs: &[Tensor]| a.read().square()?.mul(&xs[0])?.mul(&c.read())?.add(&frozen.read());
    let pairs = implicit_grad(f).call(&[s(3.0)])?;
    assert_eq!(pairs.len(), 2);
    assert_eq!(pairs[0].1.handle(), c.handle());
    assert_eq!(pairs[1].1.handle(), a.handle());
    assert_eq!(val(&pairs[0].0), vec![12.0]);
    assert_eq!(val(&pairs[1].0), vec![60.0]);
    let (y, pairs) = implicit_value_and_grad(f).call(&[s(3.0)])?;
    assert_eq!(y.to_scalar::<f64>()?, 67.0);
    assert_eq!(val(&pairs[1].0), vec![60.0]);
    let _ = unused;
    Ok(())
}

#[test]
fn implicit_grad_of_a_function_that_reads_no_variable_is_an_error() {
    let e = implicit_grad(|xs: &[Tensor]| xs[0].square())
        .call(&[s(1.0)])
        .unwrap_err();
    let (op, msg) = invalid_msg(e);
    assert_eq!(op, "implicit_grad");
    assert!(msg.contains("no trainable variable"), "{msg}");
    let frozen = Variable::builder(s(7.0)).trainable(false).build();
    let e = implicit_value_and_grad(|_: &[Tensor]| Ok(frozen.read()))
        .call(&[])
        .unwrap_err();
    assert_eq!(invalid_msg(e).0, "implicit_value_and_grad");
}

#[test]
fn implicit_grad_of_a_variable_read_but_unused_is_none() -> Result<()> {
    let a = Variable::new(s(2.0));
    let b = Variable::new(s(3.0));
    let pairs = implicit_grad(|_: &[Tensor]| {
        let _ = b.read();
        a.read().mul_scalar(4.0)
    })
    .call(&[])?;
    assert_eq!(pairs.len(), 2);
    assert_eq!(val(&pairs[0].0), vec![4.0]);
    assert!(pairs[1].0.is_none());
    Ok(())
}
