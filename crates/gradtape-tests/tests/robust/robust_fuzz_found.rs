//! Regression tests for what the never-panic fuzz test (`crates/gradtape-fuzz/tests/fuzz/`)
//! found: each failed (hung, panicked or aborted) before its fix.

use std::sync::mpsc;
use std::time::Duration;

use gradtape::{DType, Tensor};

/// Runs `f` on another thread; fails if it does not finish in 20 s (the
/// bugs here were loops over 2^32 or more empty rows: effectively hangs).
fn within_time<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(v) => v,
        Err(e) => panic!("{what}: did not finish in 20 s ({e})"),
    }
}

/// Printing an empty tensor with a huge dim walked every empty row
/// (4 * 2^32 of them, writing `[]` each); it prints `[]` as NumPy and
/// TensorFlow do (`array([], shape=(4, 4294967296, 0), dtype=float32)`).
#[test]
fn display_of_an_empty_tensor_with_a_huge_dim() {
    let s = within_time("Display", || {
        let t = Tensor::try_zeros(&[4, 1 << 32, 0], DType::F32).unwrap();
        format!("{t}|{t:?}")
    });
    let one = "Tensor([], shape=[4, 4294967296, 0], dtype=f32)";
    assert_eq!(s, format!("{one}|{one}"));
    // a non-contiguous empty view, and one with the empty dim first
    let s = within_time("Display", || {
        let t = Tensor::try_zeros(&[1, 0, 1 << 40], DType::I32).unwrap();
        t.permute(&[2, 0, 1]).unwrap().to_string()
    });
    assert_eq!(s, "Tensor([], shape=[1099511627776, 1, 0], dtype=i32)");
}

/// `argmax`/`argmin` of a complex tensor hit `unreachable!()` (a panic);
/// complex numbers have no order, and TensorFlow has no complex ArgMax.
#[test]
fn argmax_of_complex_is_an_error() {
    let z = Tensor::complex(&Tensor::vector(&[1.0f32, 2.0]), &Tensor::vector(&[0.0f32, -1.0])).unwrap();
    for r in [z.argmax(0), z.argmin(-1)] {
        match r {
            Err(gradtape::Error::UnsupportedDType { .. }) => {}
            other => panic!("expected UnsupportedDType, got {other:?}"),
        }
    }
}

/// `unstack` of a huge dim, and `split` into a huge count, built a `Vec`
/// of that many entries infallibly ("capacity overflow" panic, or an
/// allocation-failure abort); they are `OutOfMemory` errors now.
#[test]
fn unstack_and_split_into_huge_counts_are_errors() {
    let r = within_time("unstack", || {
        let view = Tensor::scalar(1.0f32).broadcast_to(&[1 << 61, 2]).unwrap();
        view.unstack(0).map(|v| v.len())
    });
    match r {
        Err(gradtape::Error::OutOfMemory { op: "unstack", .. }) => {}
        other => panic!("unstack: expected OutOfMemory, got {other:?}"),
    }
    let empty = Tensor::try_zeros(&[4, 0], DType::F32).unwrap();
    match empty.split(1 << 62, 1) {
        Err(gradtape::Error::OutOfMemory { op: "split", .. }) => {}
        other => panic!("split: expected OutOfMemory, got {:?}", other.map(|v| v.len())),
    }
    // small counts still work
    assert_eq!(empty.split(3, 1).unwrap().len(), 3);
    assert_eq!(Tensor::vector(&[1.0f32, 2.0]).unstack(0).unwrap().len(), 2);
}

/// `concat` (and so `pad` with reflect/symmetric modes) of empty tensors
/// with a huge outer dim walked 2^40 empty rows; the decompositions walked
/// an empty batch of 2^60 matrices of size 0 one by one, and `det` of it
/// collected 2^62 ones infallibly.
#[test]
fn empty_tensors_with_huge_dims_are_not_walked() {
    let e = || Tensor::try_zeros(&[1 << 40, 3, 0], DType::F32).unwrap();
    let c = within_time("concat", move || {
        Tensor::concat(&[&e(), &e()], 2).map(|t| t.shape().to_vec())
    });
    assert_eq!(c.unwrap(), vec![1 << 40, 3, 0]);
    let p = within_time("pad_with", move || {
        let t = Tensor::try_zeros(&[1 << 40, 2, 0], DType::F64).unwrap();
        t.pad_with(&[(0, 0), (1, 1), (0, 0)], gradtape::PadMode::Symmetric)
            .map(|t| t.shape().to_vec())
    });
    assert_eq!(p.unwrap(), vec![1 << 40, 4, 0]);
    let shapes = within_time("decompositions", || {
        let a = Tensor::try_zeros(&[1 << 60, 0, 0], DType::F64).unwrap();
        let b = Tensor::try_zeros(&[1 << 60, 0, 2], DType::F64).unwrap();
        [
            a.cholesky(),
            a.inverse(),
            a.solve(&b),
            a.triangular_solve(&b, true, false),
        ]
        .map(|r| r.map(|t| t.shape().to_vec()))
    });
    assert_eq!(shapes[0].as_ref().unwrap(), &vec![1 << 60, 0, 0]);
    assert_eq!(shapes[1].as_ref().unwrap(), &vec![1 << 60, 0, 0]);
    assert_eq!(shapes[2].as_ref().unwrap(), &vec![1 << 60, 0, 2]);
    assert_eq!(shapes[3].as_ref().unwrap(), &vec![1 << 60, 0, 2]);
    // det of 2^62 empty matrices is 2^62 ones: too large for memory
    let d = within_time("det", || {
        Tensor::try_zeros(&[1 << 62, 0, 0], DType::F64)
            .unwrap()
            .det()
            .map(|_| ())
    });
    assert!(
        matches!(d, Err(gradtape::Error::OutOfMemory { op: "det", .. })),
        "{d:?}"
    );
    let d = within_time("slogdet", || {
        Tensor::try_zeros(&[1 << 62, 0, 0], DType::F64)
            .unwrap()
            .slogdet()
            .map(|_| ())
    });
    assert!(
        matches!(d, Err(gradtape::Error::OutOfMemory { op: "slogdet", .. })),
        "{d:?}"
    );
    // and the small case keeps TensorFlow's value: det of a 0x0 matrix is 1
    let one = Tensor::try_zeros(&[2, 0, 0], DType::F64).unwrap().det().unwrap();
    assert_eq!(one.to_vec::<f64>().unwrap(), vec![1.0, 1.0]);
}

/// The filter gradient of a depthwise convolution over a huge batch of
/// empty images walked the whole batch (2^32 images of no pixels); it is
/// the zero filter gradient at once.
#[test]
fn depthwise_filter_gradient_of_empty_images() {
    let g = within_time("depthwise_conv2d_backprop_filter", || {
        let x = Tensor::try_zeros(&[1 << 32, 0, 2, 1], DType::F32).unwrap();
        let dy = Tensor::try_zeros(&[1 << 32, 0, 2, 1], DType::F32).unwrap();
        Tensor::depthwise_conv2d_backprop_filter(&x, &[1, 1, 1, 1], &dy, [1, 1], gradtape::Padding::Same, [1, 1])
            .map(|t| (t.shape().to_vec(), t.to_vec::<f32>().unwrap()))
    });
    assert_eq!(g.unwrap(), (vec![1, 1, 1, 1], vec![0.0]));
}

#[test]
fn a_pooling_window_of_2_pow_31_costs_what_the_input_costs() {
    // found by the fuzz campaign: the kernel walked every window position
    let x = Tensor::ones(&[1, 3, 3, 1], gradtape::DType::F32);
    let big = i32::MAX as i64;
    let start = std::time::Instant::now();
    let y = x.max_pool2d([big, 2], [1, 1], gradtape::Padding::Same).unwrap();
    assert_eq!(y.shape(), &[1, 3, 3, 1]);
    assert!(y.to_vec::<f32>().unwrap().iter().all(|&v| v == 1.0));
    let a = x.avg_pool2d([big, 2], [1, 1], gradtape::Padding::Same).unwrap();
    assert!(a.to_vec::<f32>().unwrap().iter().all(|&v| v == 1.0));
    // both huge: a clean error (the window's size overflows), at once
    assert!(x.max_pool2d([big, big], [1, 1], gradtape::Padding::Same).is_err());
    assert!(start.elapsed().as_secs() < 10);
}

/// The gradient of `sparse_softmax_cross_entropy_with_logits` built its
/// one-hot classes (`0..classes`) with an infallible `collect`: empty
/// logits with 2^61 classes panicked with "capacity overflow" (fuzz entry
/// `fit_sparse_xent`). Empty logits have an empty gradient now, at once,
/// and non-empty logits too large for memory are an `OutOfMemory` error.
#[test]
fn sparse_xent_gradient_of_empty_logits_with_huge_classes() {
    for classes in [1usize << 31, 1 << 61, usize::MAX / 2] {
        let r = within_time("sparse_xent", move || {
            let logits = Tensor::try_zeros(&[0, classes], DType::F32).unwrap();
            let labels = Tensor::try_zeros(&[0], DType::I64).unwrap();
            let tape = gradtape::GradientTape::new();
            let loss = tape.record(|| {
                tape.watch(&logits);
                Tensor::sparse_softmax_cross_entropy_with_logits(&labels, &logits)?.sum_all()
            })?;
            let g = tape.gradient(&loss, &[&logits])?;
            Ok::<_, gradtape::Error>(g[0].as_ref().map(|t| t.shape().to_vec()))
        });
        assert_eq!(r.unwrap(), Some(vec![0, classes]), "classes {classes}");
    }
    // a huge batch of rows with 2 classes: the forward pass is too large
    let r = within_time("sparse_xent", || {
        let logits = Tensor::scalar(0.5f32).broadcast_to(&[1 << 60, 2]).unwrap();
        let labels = Tensor::scalar(1i64).broadcast_to(&[1 << 60]).unwrap();
        Tensor::sparse_softmax_cross_entropy_with_logits(&labels, &logits).map(|_| ())
    });
    assert!(
        matches!(
            r,
            Err(gradtape::Error::OutOfMemory {
                op: "sparse_softmax_cross_entropy_with_logits",
                ..
            })
        ),
        "{r:?}"
    );
}

/// The input gradient of a dense convolution with 2^31 output channels of
/// an empty input (and its relatives: the transposed and depthwise
/// convolutions, and the gradient through a tape) must come back at once
/// with the empty input's shape, without walking the channels.
#[test]
fn conv_input_gradients_of_empty_inputs_with_huge_channels() {
    const O: usize = 1 << 31;
    let r = within_time("conv2d_backprop_input", || {
        let w = Tensor::scalar(1.0f32).broadcast_to(&[1, 1, 1, O]).unwrap();
        let dy = Tensor::try_zeros(&[0, 3, 3, O], DType::F32).unwrap();
        let dx = Tensor::conv2d_backprop_input(&[0, 3, 3, 1], &w, &dy, [1, 1], gradtape::Padding::Same, [1, 1])?;
        let dw = Tensor::scalar(0.0f32).broadcast_to(&[2, 2, 1, O]).unwrap();
        let dy = Tensor::try_zeros(&[2, 0, 4, O], DType::F32).unwrap();
        let dx2 = Tensor::conv2d_backprop_input(&[2, 0, 4, 1], &dw, &dy, [1, 1], gradtape::Padding::Same, [1, 1])?;
        Ok::<_, gradtape::Error>((dx.shape().to_vec(), dx2.shape().to_vec()))
    });
    assert_eq!(r.unwrap(), (vec![0, 3, 3, 1], vec![2, 0, 4, 1]));
    let r = within_time("conv2d_transpose", || {
        let x = Tensor::try_zeros(&[0, 3, 3, 1], DType::F64).unwrap();
        let w = Tensor::scalar(1.0f64).broadcast_to(&[1, 1, O, 1]).unwrap();
        x.conv2d_transpose(&w, &[0, 3, 3, O], [1, 1], gradtape::Padding::Valid, [1, 1])
            .map(|t| t.shape().to_vec())
    });
    assert_eq!(r.unwrap(), vec![0, 3, 3, O]);
    let r = within_time("depthwise_conv2d_backprop_input", || {
        let w = Tensor::scalar(1.0f32).broadcast_to(&[1, 1, 1, O]).unwrap();
        let dy = Tensor::try_zeros(&[0, 3, 3, O], DType::F32).unwrap();
        Tensor::depthwise_conv2d_backprop_input(&[0, 3, 3, 1], &w, &dy, [1, 1], gradtape::Padding::Same, [1, 1])
            .map(|t| t.shape().to_vec())
    });
    assert_eq!(r.unwrap(), vec![0, 3, 3, 1]);
    let r = within_time("conv2d gradient", || {
        let x = Tensor::try_zeros(&[0, 3, 3, 1], DType::F32).unwrap();
        let w = Tensor::scalar(1.0f32).broadcast_to(&[2, 2, 1, O]).unwrap();
        let tape = gradtape::GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x);
            x.conv2d(&w, [1, 1], gradtape::Padding::Same, [1, 1])?.sum_all()
        })?;
        let g = tape.gradient(&y, &[&x])?;
        Ok::<_, gradtape::Error>(g[0].as_ref().map(|t| t.shape().to_vec()))
    });
    assert_eq!(r.unwrap(), Some(vec![0, 3, 3, 1]));
}

/// `Tensor::linspace` inside a traced function was refused ("computed
/// inside the traced function by an op that bypasses tracing"): it made
/// its tensor without registering it as a constant (as `arange` does).
/// The traced fuzz mode found it (eager gave `[0.0]` for `linspace(0, 0,
/// 1)`, the traced call an error).
#[test]
fn linspace_inside_a_traced_function() -> gradtape::Result<()> {
    let x = Tensor::scalar(1.0f32);
    let g = gradtape::function(|_: &Tensor| Tensor::linspace(0.0, 0.0, 1, DType::F32));
    assert_eq!(g.call(&x)?.to_vec::<f32>()?, vec![0.0]);
    let f = gradtape::function(|x: &Tensor| Tensor::linspace(0.0, 1.0, 3, DType::F64)?.add(&x.cast(DType::F64)?));
    assert_eq!(f.call(&x)?.to_vec::<f64>()?, vec![1.0, 1.5, 2.0]);
    assert_eq!(f.call(&Tensor::scalar(2.0f32))?.to_vec::<f64>()?, vec![2.0, 2.5, 3.0]);
    Ok(())
}

/// A traced batch normalization whose mean is also its scale compiled to a
/// fused kernel whose chained instruction wrote over both operands of its
/// first op (`t = m * m` over `m`), which the chain's registers do not
/// allow: a panic in the compiler (`regs.rs`: `dst != c && !(dst == a &&
/// dst == b)`). Found by the traced fuzz mode; the expected value is the
/// eager one.
#[test]
fn traced_batch_norm_with_its_mean_as_scale() -> gradtape::Result<()> {
    let body = |(x, m, v): &(Tensor, Tensor, Tensor)| Tensor::batch_normalization(x, m, v, None, Some(m), 0.0);
    let args = (
        Tensor::vector(&[0.0f32, 3.0]),
        Tensor::scalar(0.0f32),
        Tensor::scalar(0.0f32),
    );
    let want = body(&args)?.to_vec::<f32>()?;
    let f = gradtape::function(body);
    let got = f.call(&args)?.to_vec::<f32>()?;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&want), "traced {got:?}, eager {want:?}");
    Ok(())
}

/// The traced fuzz's value checks (traced against eager, bit for bit):
/// - a constant's transpose was folded into a row-major copy, so the
///   product after it summed in another order than eager's (the `gemm`
///   crate's order depends on the layout), 6 away from eager by
///   cancellation; a reshape to its own shape copied eagerly but not in a
///   compiled graph, the same way (`tensordot` with no axes);
/// - `neg(0)` was `+0` (TensorFlow: `-0`), in the kernels and the fused
///   lanes alike, and `|-0|` was `-0`; a compiled graph that kept a `neg`
///   out of a product then gave another zero than eager (`xlog1py`);
/// - `x · 1`, `x / 1` and `x^1` were dropped for complex `x`, but eager
///   computes them as complex products and powers (`(4 + i)^1` is
///   `3.9999998 + i` in f32, as in TensorFlow).
///
/// Expected signs and values from TensorFlow 2.21.
#[test]
fn traced_values_equal_eager_bits_where_layouts_and_zeros_differ() -> gradtape::Result<()> {
    use gradtape::{Complex, Function, FunctionOptions};
    let bits = |t: &Tensor| -> Vec<u64> { t.to_vec_f64().iter().map(|v| v.to_bits()).collect() };
    // a transposed constant times a constant, with cancellation
    let a = Tensor::from_vec(vec![3.0f32, 1.0, -9.223372e18, -3.0], &[1, 4])?;
    let b_rows = Tensor::from_vec(vec![2.0f32, -9.223372e18, -1.0, 2.0, 1.0, 1.0, 1.0, 1.0], &[2, 4])?;
    let eager = a.matmul(&b_rows.permute(&[1, 0])?)?;
    let f = gradtape::function(move |_x: &Tensor| a.matmul(&b_rows.permute(&[1, 0])?));
    let traced = f.call(&Tensor::scalar(0.0f32))?;
    assert_eq!(bits(&traced), bits(&eager), "folded product {traced} vs eager {eager}");
    // tensordot with no axes of a transposed operand (TF: [0, 0, 0, 0, 1, -2, 0, -2, 4], -0 at 5 and 7)
    let x = Tensor::from_vec(vec![0.0f32, 1.0, -2.0], &[3, 1])?.permute(&[1, 0])?;
    let eager = x.tensordot(&x, &[], &[])?;
    let traced = gradtape::function(|x: &Tensor| x.tensordot(x, &[], &[])).call(&x)?;
    assert_eq!(bits(&traced), bits(&eager), "tensordot {traced} vs eager {eager}");
    // signed zeros: neg, abs, xlog1py (TF: -0, +0, 2, -3 | +0, +0 | +0, -0)
    let z = Tensor::vector(&[0.0f32, -0.0, -2.0, 3.0]);
    let signs = |t: &Tensor| {
        t.to_vec::<f32>()
            .map(|v| v.iter().map(|x| x.is_sign_negative()).collect::<Vec<_>>())
    };
    assert_eq!(signs(&z.neg()?)?, vec![true, false, false, true]);
    assert_eq!(signs(&z.abs()?)?, vec![false, false, false, false]);
    let (p, q) = (Tensor::vector(&[-27.4f32, 3.0]), Tensor::vector(&[-0.0f32, -0.0]));
    assert_eq!(signs(&Tensor::xlog1py(&p, &q)?)?, vec![false, true]);
    let g = gradtape::function(|(p, q): &(Tensor, Tensor)| Tensor::xlog1py(p, &q.neg()?.neg()?));
    assert_eq!(signs(&g.call(&(p, q))?)?, vec![false, true]);
    // complex by a real scalar: TF's products (Annex G infinities)
    let inf = f32::INFINITY;
    let c = Tensor::vector(&[
        Complex::new(inf, inf),
        Complex::new(inf, 1.0),
        Complex::new(4.0f32, 1.0),
    ]);
    let parts = |t: &Tensor| -> gradtape::Result<Vec<(f32, f32)>> {
        Ok(t.to_vec::<Complex<f32>>()?.iter().map(|z| (z.re, z.im)).collect())
    };
    let shows = |v: Vec<(f32, f32)>| format!("{v:?}");
    assert_eq!(
        shows(parts(&c.mul_scalar(2.0)?)?),
        "[(inf, inf), (inf, NaN), (8.0, 2.0)]"
    );
    assert_eq!(
        shows(parts(&c.div_scalar(2.0)?)?),
        "[(inf, inf), (inf, NaN), (2.0, 0.5)]"
    );
    assert_eq!(shows(parts(&c.narrow(0, 0, 2)?.mean(&[0], false)?)?), "[(inf, inf)]");
    for (name, op) in [
        (
            "mul_scalar",
            (|z: &Tensor| z.mul_scalar(1.0)) as fn(&Tensor) -> gradtape::Result<Tensor>,
        ),
        ("div_scalar", |z| z.div_scalar(1.0)),
        ("pow_scalar", |z| z.pow_scalar(1.0)),
    ] {
        let eager = op(&c)?;
        let f = Function::with_options(move |z: &Tensor| op(z), FunctionOptions::default());
        assert_eq!(
            shows(parts(&f.call(&c)?)?),
            shows(parts(&eager)?),
            "{name}: traced vs eager"
        );
    }
    // (4 + i)^1 in f32: TF gives 3.9999998 + i
    let w = Tensor::scalar(Complex::new(4.0f32, 1.0)).pow_scalar(1.0)?;
    assert_eq!(w.to_vec::<Complex<f32>>()?[0], Complex::new(3.9999998f32, 1.0));
    Ok(())
}

/// A function made with `optimize: false` still had its symbolic gradient
/// compiled, so its gradient added in another order than the eager tape's:
/// with a variance that overflows f32 (a value of 1e30), the fused sum's
/// rounding left a non-zero that became `inf · 0 = NaN` where the tape
/// gives 0 (found by the traced fuzz, `batch_normalization`). The gradient
/// graphs now follow the function's `optimize`: not compiled, they run
/// the tape's ops in its order, bit for bit.
#[test]
fn uncompiled_functions_have_uncompiled_gradients() -> gradtape::Result<()> {
    use gradtape::{Function, FunctionOptions, GradientTape};
    let a = Tensor::from_vec(vec![0.0f32, -3.0, 1.0, 1e30], &[4, 1])?;
    let body = |a: &Tensor| -> gradtape::Result<Tensor> {
        let (m, v) = a.moments(&[0], false)?;
        let g = Tensor::vector(&[1e30f32]);
        Tensor::batch_normalization(a, &m, &v, Some(&g), Some(&g), 1e-3)?.sum_all()
    };
    let grad = |run: &dyn Fn(&Tensor) -> gradtape::Result<Tensor>| -> gradtape::Result<Vec<u32>> {
        let tape = GradientTape::new();
        tape.watch(&a);
        let y = tape.record(|| run(&a))?;
        let g = tape.gradient(&y, &a)?.expect("connected");
        Ok(g.to_vec::<f32>()?.iter().map(|v| v.to_bits()).collect())
    };
    let eager = grad(&body)?;
    let f = Function::with_options(
        body,
        FunctionOptions {
            optimize: false,
            ..Default::default()
        },
    );
    let traced = grad(&|x| f.call(x))?;
    assert_eq!(traced, eager, "uncompiled gradient vs the tape's");
    assert!(eager.iter().all(|&b| f32::from_bits(b) == 0.0), "{eager:?}");
    Ok(())
}

/// The compiler fused a lone broadcast of one value into a kernel that
/// wrote every element: a product of an empty matrix with a `[1, 2^40]`
/// broadcast (a view eagerly) was "out of memory" traced (the traced fuzz
/// found it with 2^31 columns: 8 GiB). A group with no arithmetic is no
/// longer a kernel: the broadcast stays a view, as in eager runs.
#[test]
fn a_traced_broadcast_that_feeds_a_product_stays_a_view() -> gradtape::Result<()> {
    let wide = 1usize << 40;
    let run = move |x: &Tensor| -> gradtape::Result<Tensor> {
        let b = x.broadcast_to(&[1, wide])?;
        Tensor::zeros(&[0, 1], DType::F32).matmul(&b)
    };
    let x = Tensor::scalar(f32::NEG_INFINITY);
    assert_eq!(run(&x)?.shape(), &[0, wide]);
    let f = gradtape::function(run);
    assert_eq!(f.call(&x)?.shape(), &[0, wide]);
    let c = f.concrete(&x)?;
    assert_eq!(c.optimized_graph().count("Fused"), 0, "{}", c.optimized_graph());
    Ok(())
}

/// The gradients w.r.t. `a` and `b` of the sum of `body(a, b, c)`, run
/// eagerly or through `f` (the same body traced), unconnected ones zero.
fn where_grads(
    traced: bool,
    f: &gradtape::Function<
        (Tensor, Tensor, Tensor),
        Tensor,
        impl Fn(&(Tensor, Tensor, Tensor)) -> gradtape::Result<Tensor> + Send + Sync + 'static,
    >,
    body: fn(&(Tensor, Tensor, Tensor)) -> gradtape::Result<Tensor>,
    args: &(Tensor, Tensor, Tensor),
) -> gradtape::Result<Vec<Option<Tensor>>> {
    use gradtape::{GradientOptions, GradientTape, Unconnected};
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(&args.0);
        tape.watch(&args.1);
        match traced {
            true => f.call(args)?.sum_all(),
            false => body(args)?.sum_all(),
        }
    })?;
    let opts = GradientOptions::default().unconnected(Unconnected::Zero);
    Ok(tape
        .gradient_with(&l, &[args.0.clone(), args.1.clone()], opts)?
        .to_vec())
}

/// Differentiating through a traced function's call filled every missing
/// cotangent with a buffer of zeros, the saved values' too, which the pull
/// then never read: `where(c, a, b)` with `c` a bool broadcast view of
/// `[2^40, 1]` and `a`, `b` empty made a terabyte of zeros for `c` and the
/// gradient was refused (`zeros: out of memory`) where the eager gradient
/// is computed (fuzz seed 1001, case 232774, at `[2^31, 1]`). Only the
/// cotangents the pull reads are made now, and an integer or bool
/// value's zero is a broadcast view.
#[test]
fn a_call_s_gradient_makes_no_zeros_for_its_saved_values() -> gradtape::Result<()> {
    let c = Tensor::from_vec(vec![true], &[1, 1])?.broadcast_to(&[1 << 40, 1])?;
    let args = (Tensor::zeros(&[0], DType::F32), Tensor::zeros(&[0], DType::F32), c);
    let body: fn(&(Tensor, Tensor, Tensor)) -> gradtape::Result<Tensor> = |(a, b, c)| Tensor::where_(c, a, b);
    assert_eq!(body(&args)?.shape(), &[1 << 40, 0]);
    let f = gradtape::function(body);
    for traced in [false, true] {
        let g = where_grads(traced, &f, body, &args)?;
        let shapes: Vec<_> = g.iter().map(|g| g.as_ref().map(|t| t.shape().to_vec())).collect();
        assert_eq!(shapes, vec![Some(vec![0]), Some(vec![0])], "traced {traced}");
    }
    // and with values: a small condition, through the call and eagerly;
    // rows 0 and 2 take a (2a each), row 1 takes b (2b)
    let c = Tensor::from_vec(vec![true, false, true], &[3, 1])?;
    let args = (Tensor::vector(&[1.0f64, 2.0]), Tensor::vector(&[3.0f64, 4.0]), c);
    let body: fn(&(Tensor, Tensor, Tensor)) -> gradtape::Result<Tensor> = |(a, b, c)| Tensor::where_(c, a, b)?.square();
    let f = gradtape::function(body);
    for traced in [false, true] {
        let g = where_grads(traced, &f, body, &args)?;
        let values: Vec<Vec<f64>> = g
            .iter()
            .map(|g| g.as_ref().unwrap().to_vec::<f64>())
            .collect::<gradtape::Result<_>>()?;
        assert_eq!(values, vec![vec![4.0, 8.0], vec![6.0, 8.0]], "traced {traced}");
    }
    Ok(())
}

/// The hinge losses made their zeros with the panicking `zeros_like`: a
/// label tensor that is a broadcast view of 2^31 elements aborted the call
/// (`zeros_like: out of memory`) instead of refusing it (fuzz seed 880003,
/// case 98903, shrunk to `SquaredHinge` of an f32 `[2^31]` view); the
/// gradient of `sign` and the `clip_by_norm`, Huber, MAPE and MSLE helpers
/// made theirs the same way. Here at 2^40 elements (4 TiB of f32), which
/// no machine allocates: an error, or a result, never a panic.
#[test]
fn losses_of_huge_broadcast_labels_are_errors_not_panics() {
    use gradtape::nn::losses::{Loss, Reduction};
    let huge = |v: f32| {
        Tensor::from_vec(vec![v], &[1])
            .and_then(|t| t.broadcast_to(&[1 << 40]))
            .expect("a broadcast view")
    };
    let (y_true, y_pred) = (huge(1.0), huge(0.5));
    for loss in [
        Loss::Hinge,
        Loss::SquaredHinge,
        Loss::CategoricalHinge,
        Loss::Huber { delta: 1.0 },
        Loss::MeanAbsolutePercentageError,
        Loss::MeanSquaredLogarithmicError,
    ] {
        let got = std::panic::catch_unwind(|| loss.compute_weighted(&y_true, &y_pred, None, Reduction::Sum));
        match got {
            Ok(Err(e)) => assert!(e.to_string().contains("memory"), "{loss:?}: {e}"),
            Ok(Ok(v)) => panic!("{loss:?}: a value of shape {:?} from 4 TiB of labels", v.shape()),
            Err(_) => panic!("{loss:?} panicked"),
        }
    }
}

/// The gradients of `cholesky` and `triangular_solve` build an `n x n`
/// mask; for an empty batch of huge matrices (`[0, 2^31, 2^31]`, no
/// element, a valid shape) that mask (2^62 values) panicked with
/// "capacity overflow" (fuzz seed 4504 in mode 5, case 382887, shrunk to
/// `cholesky` of an f32 `[0, 2^31, 2^31]` under a tape). Now an error
/// naming the op (the mask cannot be allocated), never a panic.
#[test]
fn gradients_of_empty_batches_of_huge_triangular_matrices_are_errors_not_panics() {
    let n = 1usize << 31;
    let run = |solve: bool| -> gradtape::Result<Option<Tensor>> {
        let a = Tensor::try_zeros(&[0, n, n], DType::F32)?;
        let tape = gradtape::GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&a);
            if solve {
                let b = Tensor::try_zeros(&[0, n, 1], DType::F32)?;
                a.triangular_solve(&b, true, false)
            } else {
                a.cholesky()
            }
        })?;
        tape.gradient(&y, &a)
    };
    for (solve, op) in [(false, "cholesky"), (true, "triangular_solve")] {
        match std::panic::catch_unwind(|| run(solve)) {
            Ok(Err(e)) => assert!(
                e.to_string().contains(op) && e.to_string().contains("memory"),
                "{op}: {e}"
            ),
            Ok(Ok(g)) => {
                let g = g.expect("a gradient");
                assert_eq!(g.shape(), &[0, n, n][..], "{op}");
            }
            Err(_) => panic!("{op}'s gradient panicked"),
        }
    }
}
