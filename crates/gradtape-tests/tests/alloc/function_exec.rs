//! The compiled graphs' executor: buffers written in place only when
//! nothing else holds them, allocations saved by it, and convolutions whose
//! filter gradients reuse the forward's im2col matrix.

use gradtape::{function, FunctionOptions, GradientTape, Padding, Result, Tensor, Variable};

use crate::common::values::{bits, init};
use crate::counting::{buffers_of, serial};

/// A dense layer, its activation and an affine map after it: a matmul
/// and one fused group of three ops over [24, 128] (12 KiB, below the
/// buffer cache's sizes, so each new buffer is one `malloc`; and not a
/// power of two, so never the size of a fused kernel's scratch vector:
/// those are grown to powers of two and shared by the threads, so a test
/// running beside this one could make this thread allocate one).
fn layer((a, w): &(Tensor, Tensor)) -> Result<Tensor> {
    a.matmul(w)?.tanh()?.mul_scalar(2.0)?.add_scalar(1.0)
}

#[test]
fn a_fused_group_writes_into_the_product_it_reads() -> Result<()> {
    let _serial = serial();
    let args = (init(&[24, 64], 0.1), init(&[64, 128], 0.7));
    let bytes = 24 * 128 * 4;
    let compiled = function(layer);
    let off = FunctionOptions {
        optimize: false,
        ..FunctionOptions::default()
    };
    let traced = gradtape::Function::with_options(layer, off);
    let c = compiled.concrete(&args)?;
    assert_eq!(c.optimized_graph().count("Fused"), 1, "{}", c.optimized_graph());
    let want = layer(&args)?;
    for _ in 0..2 {
        compiled.call(&args)?;
        traced.call(&args)?;
    }
    let (n_compiled, got) = buffers_of(bytes, || compiled.call(&args));
    let (n_traced, got_traced) = buffers_of(bytes, || traced.call(&args));
    // none: the group writes into the product's buffer, and that buffer
    // comes back from the last call's result, which the caller dropped
    // (the run's bin, `tensor::recycle`)
    assert_eq!(n_compiled, 0, "compiled");
    // the product and one per op
    assert_eq!(n_traced, 4, "as traced");
    assert_eq!(bits(&got?), bits(&want));
    assert_eq!(bits(&got_traced?), bits(&want));
    Ok(())
}

/// Two results of one product: the first written into the product's
/// buffer, the second computed from the product after that.
fn two_of((a, w): &(Tensor, Tensor)) -> Result<Vec<Tensor>> {
    let p = a.matmul(w)?;
    Ok(vec![p.tanh()?, p.mul_scalar(2.0)?.add_scalar(1.0)?])
}

#[test]
fn an_input_read_after_an_output_took_its_buffer_is_read_as_it_was() -> Result<()> {
    let _serial = serial();
    let args = (init(&[32, 64], 0.1), init(&[64, 128], 0.7));
    let f = function(two_of);
    let c = f.concrete(&args)?;
    let g = c.optimized_graph().to_string();
    // the program stores the first result before it reads the product again
    let listing = g.lines().find(|l| l.contains("Fused")).expect("one fused group");
    let (store, read_again) = (
        listing.find("out0 =").expect("a store"),
        listing.find("MulScalar").expect("2p"),
    );
    assert!(store < read_again, "{g}");
    let want = two_of(&args)?;
    for _ in 0..3 {
        let got = f.call(&args)?;
        assert_eq!(bits(&got[0]), bits(&want[0]));
        assert_eq!(bits(&got[1]), bits(&want[1]));
    }
    Ok(())
}

#[test]
fn values_still_held_elsewhere_are_never_written() -> Result<()> {
    let _serial = serial();
    // the product is returned *and* read by the fused group: kept as made
    let f = function(|(a, w): &(Tensor, Tensor)| {
        let p = a.matmul(w)?;
        let y = p.tanh()?.mul_scalar(2.0)?;
        Ok(vec![p, y])
    });
    let args = (init(&[32, 64], 0.2), init(&[64, 128], 0.9));
    let p = args.0.matmul(&args.1)?;
    let y = p.tanh()?.mul_scalar(2.0)?;
    for _ in 0..3 {
        let got = f.call(&args)?;
        assert_eq!(bits(&got[0]), bits(&p));
        assert_eq!(bits(&got[1]), bits(&y));
    }
    // an argument the caller holds (read last by the group) is not written
    let g = function(|x: &Tensor| x.sin()?.mul_scalar(3.0)?.exp());
    let x = init(&[4096], 0.3);
    let before = bits(&x);
    let got = g.call(&x)?;
    assert_eq!(bits(&x), before);
    assert_eq!(bits(&got), bits(&x.sin()?.mul_scalar(3.0)?.exp()?));
    // nor a second handle on it, taken before the call
    let x2 = x.clone();
    let again = g.call(&x2)?;
    assert_eq!(bits(&x), before);
    assert_eq!(bits(&again), bits(&got));
    Ok(())
}

/// A convolution and its filter gradient, taken on a tape inside the
/// traced function, as the `cnn_step` bench does.
fn conv_grad((x, k): &(Tensor, Tensor)) -> Result<Vec<Tensor>> {
    let k = k.stop_gradient();
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(&k);
        x.conv2d(&k, [1, 1], Padding::Same, [1, 1])?.relu()?.sum_all()
    })?;
    let dk = tape.gradient(&loss, &k)?.expect("connected");
    Ok(vec![loss, dk])
}

#[test]
fn a_filter_gradient_reuses_the_forward_im2col_matrix() -> Result<()> {
    let _serial = serial();
    let args = (init(&[4, 9, 9, 3], 0.4), init(&[3, 3, 3, 5], 1.3));
    let f = function(conv_grad);
    let c = f.concrete(&args)?;
    let g = c.optimized_graph();
    assert_eq!(c.compile_stats().kept, 1, "{g}");
    assert_eq!(g.count("Conv2DKeepCols"), 1, "{g}");
    assert_eq!(g.count("Conv2DBackpropFilterCols"), 1, "{g}");
    assert_eq!(g.count("Conv2D") + g.count("Conv2DBackpropFilter"), 0, "{g}");
    // the eager step's values (its tape reuses the matrix too), bit for bit
    let want = conv_grad(&args)?;
    for _ in 0..2 {
        let got = f.call(&args)?;
        assert_eq!(bits(&got[0]), bits(&want[0]));
        assert_eq!(bits(&got[1]), bits(&want[1]));
    }
    // another filter shape: a new trace, and the same agreement
    let args = (init(&[2, 6, 7, 2], 0.1), init(&[2, 3, 2, 4], 0.8));
    let got = f.call(&args)?;
    let want = conv_grad(&args)?;
    assert_eq!(bits(&got[1]), bits(&want[1]));
    Ok(())
}

#[test]
fn a_fixed_signature_refuses_other_dtypes_with_an_error() {
    let _serial = serial();
    let opts = FunctionOptions {
        input_signature: Some(vec![
            gradtape::TensorSpec::new(gradtape::DType::F32, &[Some(32), Some(64)]),
            gradtape::TensorSpec::new(gradtape::DType::F32, &[Some(64), Some(128)]),
        ]),
        ..FunctionOptions::default()
    };
    let f = gradtape::Function::with_options(layer, opts);
    let args = (init(&[32, 64], 0.1), init(&[64, 128], 0.7));
    f.call(&args).unwrap();
    let bad = (Tensor::zeros(&[32, 64], gradtape::DType::F64), init(&[64, 128], 0.7));
    let err = f.call(&bad).unwrap_err().to_string();
    assert!(
        err.contains("f64") || err.contains("F64") || err.contains("signature"),
        "{err}"
    );
}

/// Three calls of a training step that updates two weights and then sums
/// the absolute values of the first one's gradient (the bench's
/// checksum), compiled or as traced: its optimised listing, the calls'
/// results and the variables after them.
fn sgd_steps(optimize: bool, x: &Tensor) -> Result<(String, Vec<Vec<Tensor>>, [Variable; 2])> {
    let vars = [Variable::new(init(&[64, 48], 0.3)), Variable::new(init(&[48, 8], 0.7))];
    let [w1, w2] = vars.clone();
    let step = move |x: &Tensor| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| x.matmul(&w1.read())?.tanh()?.matmul(&w2.read())?.sum_all())?;
        let (g1, g2) = tape.gradient(&loss, &(w1.clone(), w2.clone()))?;
        let (g1, g2) = (g1.expect("w1"), g2.expect("w2"));
        w1.apply_gradient_descent(0.01, &g1)?;
        w2.apply_gradient_descent(0.01, &g2)?;
        Ok(vec![loss, g1.abs()?.sum_all()?])
    };
    let options = FunctionOptions {
        optimize,
        ..FunctionOptions::default()
    };
    let f = gradtape::Function::with_options(step, options);
    let listing = f.concrete(x)?.optimized_graph().to_string();
    let results = (0..3).map(|_| f.call(x)).collect::<Result<_>>()?;
    Ok((listing, results, vars))
}

#[test]
fn a_reduction_of_a_gradient_runs_before_the_variable_updates_with_the_same_values() -> Result<()> {
    let _serial = serial();
    let x = init(&[32, 64], 0.1);
    let (listing, got, vars) = sgd_steps(true, &x)?;
    let (_, want, vars_traced) = sgd_steps(false, &x)?;
    let at = |pat: &str| listing.lines().position(|l| l.contains(pat)).expect(pat);
    assert!(at("Abs") < at("ApplyGradientDescent"), "{listing}");
    for (got, want) in got.iter().zip(&want) {
        // (the sums, fused, add in another order)
        for (g, w) in got.iter().zip(want) {
            let (a, b) = (g.to_scalar::<f32>()?, w.to_scalar::<f32>()?);
            assert!((a - b).abs() <= 1e-5 * b.abs(), "{a} vs {b}");
        }
    }
    for (v, w) in vars.iter().zip(&vars_traced) {
        assert_eq!(bits(&v.read()), bits(&w.read()), "the variables' values");
    }
    Ok(())
}

/// A fused sum of squares and a scaling of the middle third of a joined
/// product's columns (rows of 40 of 120: the key weights' gradient of
/// joined query/key/value products, as the global-norm clipping reads it).
fn sliced((x,): &(Tensor,)) -> Result<Vec<Tensor>> {
    let k = x.narrow(1, 40, 40)?;
    Ok(vec![k.square()?.sum_all()?, k.mul_scalar(0.5)?.sum_all()?])
}

#[test]
fn a_fused_kernel_reads_a_column_slice_where_it_lies() -> Result<()> {
    let _serial = serial();
    // [24, 40] f32 of a [24, 120] argument: 3840 bytes, below the buffer
    // cache's sizes and not a power of two (see `layer`), so a copy of
    // the slice would be one `malloc` of this size
    let args = (init(&[24, 120], 0.3),);
    let bytes = 24 * 40 * 4;
    let f = function(sliced);
    let g = f.concrete(&args)?.optimized_graph().to_string();
    assert!(g.contains("Fused"), "{g}");
    for _ in 0..2 {
        f.call(&args)?;
    }
    let (n, got) = buffers_of(bytes, || f.call(&args));
    // none: the kernel reads the slice's rows in the argument's buffer
    // (a copy of the slice had been one buffer a call)
    assert_eq!(n, 0, "{g}");
    // the bits of the same program over a contiguous copy of the slice
    let copy = Tensor::from_vec(args.0.narrow(1, 40, 40)?.to_vec::<f32>()?, &[24, 40])?;
    let h = function(|(k,): &(Tensor,)| Ok(vec![k.square()?.sum_all()?, k.mul_scalar(0.5)?.sum_all()?]));
    let want = h.call(&(copy,))?;
    for (a, b) in got?.iter().zip(&want) {
        assert_eq!(bits(a), bits(b));
    }
    Ok(())
}
