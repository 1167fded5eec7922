//! gradtape in one screen: the `tf.GradientTape` page's examples, then a
//! linear fit of y = 3x + 2 by gradient descent on two trainable variables.
//!
//! Run with `cargo run --release --example quickstart`.

use gradtape::{DType, GradientTape, Result, Tensor, Variable};

fn main() -> Result<()> {
    // y = x², dy/dx at 3
    let x = Tensor::scalar(3.0f32);
    let g = GradientTape::new();
    let y = g.record(|| {
        g.watch(&x);
        x.mul(&x)
    })?;
    println!("dy/dx of x*x at 3:            {}", g.gradient(&y, &x)?.unwrap());

    // nested tapes: second derivative
    let g = GradientTape::new();
    let dy_dx = g.record(|| {
        g.watch(&x);
        let gg = GradientTape::new();
        let y = gg.record(|| {
            gg.watch(&x);
            x.mul(&x)
        })?;
        Ok(gg.gradient(&y, &x)?.unwrap())
    })?;
    let d2y_dx2 = g.gradient(&dy_dx, &x)?.unwrap();
    println!("nested: dy/dx = {dy_dx}, d2y/dx2 = {d2y_dx2}");

    // a persistent tape answers several questions
    let g = GradientTape::persistent();
    let (y, z) = g.record(|| {
        g.watch(&x);
        let y = x.mul(&x)?;
        Ok((y.clone(), y.mul(&y)?))
    })?;
    println!("persistent: dz/dx = {}", g.gradient(&z, &x)?.unwrap());
    println!("persistent: dy/dx = {}", g.gradient(&y, &x)?.unwrap());
    drop(g);

    // watch only what you ask for
    let a = Variable::new(Tensor::scalar(2.0f32));
    let b = Variable::new(Tensor::scalar(5.0f32));
    let tape = GradientTape::persistent().watch_accessed_variables(false);
    let (ya, zb) = tape.record(|| {
        tape.watch(&a);
        Ok((a.read().pow_scalar(2.0)?, b.read().pow_scalar(3.0)?))
    })?;
    println!("selective: d(a²)/da = {}", tape.gradient(&ya, &a)?.unwrap());
    println!("selective: d(b³)/db = {:?} (b is not watched)", tape.gradient(&zb, &b)?);

    // stop_recording
    let x4 = Tensor::scalar(4.0f32);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x4);
        tape.stop_recording(|| x4.pow_scalar(2.0))
    })?;
    println!("stop_recording: dy/dx = {:?}", tape.gradient(&y, &x4)?);

    // reset: only what follows it is differentiated
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(&x);
        let first = x.mul_scalar(3.0)?;
        tape.reset();
        tape.watch(&x);
        first.add(&x.square()?)
    })?;
    println!(
        "reset: d(3x + x²)/dx after reset = {}",
        tape.gradient(&loss, &x)?.unwrap()
    );

    fit_a_line()
}

/// Fits `w·x + b` to points of `y = 3x + 2` by plain gradient descent.
fn fit_a_line() -> Result<()> {
    println!("\nfitting y = 3x + 2");
    let n = 64;
    let xs = Tensor::arange(-1.0, 1.0, 2.0 / n as f64, DType::F32)?;
    let ys = xs.mul_scalar(3.0)?.add_scalar(2.0)?;
    let w = Variable::builder(Tensor::scalar(0.0f32)).name("w").build();
    let b = Variable::builder(Tensor::scalar(0.0f32)).name("b").build();
    let lr = 0.05;
    for step in 0..=300 {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let pred = xs.mul(&w.read())?.add(&b.read())?;
            pred.sub(&ys)?.square()?.mean_all()
        })?;
        let [dw, db] = tape.gradient(&loss, &[&w, &b])?;
        w.assign_sub(&dw.unwrap().mul_scalar(lr)?)?;
        b.assign_sub(&db.unwrap().mul_scalar(lr)?)?;
        if step % 30 == 0 {
            println!("step {step:3}  loss {:.6}", loss.to_scalar::<f32>()?);
        }
    }
    println!(
        "fitted w = {:.4}, b = {:.4}",
        w.read().to_scalar::<f32>()?,
        b.read().to_scalar::<f32>()?
    );
    Ok(())
}
