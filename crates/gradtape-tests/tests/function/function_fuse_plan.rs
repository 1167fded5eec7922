//! A fused kernel's call plan (`compile/kernel/prepared.rs`: what its
//! runs work out from the program alone, made at its first run and kept)
//! against calls whose inputs differ in everything the plan leaves to
//! each run: one compiled function called, one call after another, with a
//! contiguous input and then a view of the same shape (read in place as
//! rows), a bias of `[n]` and then one of `[rows, 1]` (another broadcast),
//! `f32` and then `f64`, one element, and the first inputs again. Each
//! call's values must be the eager ops' bits (the fused elementwise ops
//! compute what the eager kernels compute, element by element), and the
//! last call the first call's: a plan made for one call and kept (a
//! stale layout, a gather read as a load, a donor whose register was
//! thought to read in place) would change them.

use gradtape::{function, DType, Result, Tensor};

use super::function_fuse_views::all_bits;

/// Deterministic data of `shape` in `dtype`.
fn data(shape: &[usize], seed: f64, dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| (i as f64 * 0.731 + seed).sin() * 1.5).collect();
    Tensor::from_vec(v, shape).unwrap().cast(dtype).unwrap()
}

/// The step: a product whose output (held by nothing else) a fused
/// kernel may write in place, a bias broadcast into it, and a second
/// chain reading `x` and the bias.
fn step(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Vec<Tensor>> {
    let h = x.matmul(w)?;
    Ok(vec![h.add(b)?.tanh()?, x.mul_scalar(0.5)?.sub(b)?.mul(x)?.exp()?])
}

#[test]
fn one_compiled_function_over_other_layouts_broadcasts_and_dtypes_gives_eager_bits_each_call() -> Result<()> {
    let f = function(|(x, w, b): &(Tensor, Tensor, Tensor)| step(x, w, b));
    let (rows, n) = (6, 40);
    let calls: Vec<(&str, Tensor, Tensor, Tensor)> = vec![
        (
            "contiguous, bias [n]",
            data(&[rows, n], 0.3, DType::F32),
            data(&[n, n], 0.9, DType::F32),
            data(&[n], 1.7, DType::F32),
        ),
        (
            "x a column slice (rows read in place), bias [n]",
            data(&[rows, 3 * n], 0.5, DType::F32).narrow(1, n, n)?,
            data(&[n, n], 1.1, DType::F32),
            data(&[n], 2.1, DType::F32),
        ),
        (
            "bias [rows, 1]",
            data(&[rows, n], 0.7, DType::F32),
            data(&[n, n], 1.3, DType::F32),
            data(&[rows, 1], 2.5, DType::F32),
        ),
        (
            "f64",
            data(&[rows, n], 0.3, DType::F64),
            data(&[n, n], 0.9, DType::F64),
            data(&[n], 1.7, DType::F64),
        ),
        (
            "one element",
            data(&[1, 1], 0.3, DType::F32),
            data(&[1, 1], 0.9, DType::F32),
            data(&[1], 1.7, DType::F32),
        ),
        (
            "wide (tasks over the threads), bias [n]",
            data(&[64, 1024], 0.2, DType::F32),
            data(&[1024, 1024], 0.4, DType::F32).mul_scalar(0.03)?,
            data(&[1024], 0.6, DType::F32),
        ),
    ];
    let mut first = None;
    for (name, x, w, b) in calls.iter() {
        let want = step(x, w, b)?;
        // twice: the second call runs in the first one's memory, its
        // kernels' plans made
        for k in 0..2 {
            let got = f.call(&(x.clone(), w.clone(), b.clone()))?;
            assert_eq!(all_bits(&got), all_bits(&want), "{name}, call {k}");
            first.get_or_insert_with(|| all_bits(&got));
        }
    }
    // the first inputs again, after the others' plans
    let (_, x, w, b) = &calls[0];
    let again = f.call(&(x.clone(), w.clone(), b.clone()))?;
    assert_eq!(Some(all_bits(&again)), first);
    Ok(())
}

/// Traced functions of one elementwise op each (a fused group of one op,
/// run in one pass: `Prepared::one_pass`) and of two sibling ops, on
/// lengths around the one-pass pieces and large enough to split over the
/// threads, contiguous and as a view (read as rows: the registers' path),
/// with the input held by the caller (new buffers) and moved into the call
/// (its buffer taken: the registers' path): the eager ops' bits each call.
#[test]
fn one_op_functions_give_eager_bits_on_every_path() -> Result<()> {
    let exp = function(|x: &Tensor| x.exp());
    let tanh = function(|x: &Tensor| x.tanh());
    let relu = function(|x: &Tensor| x.relu());
    let mul = function(|(a, b): &(Tensor, Tensor)| a.mul(b));
    let siblings = function(|x: &Tensor| Ok(vec![x.sin()?, x.sigmoid()?]));
    for dtype in [DType::F32, DType::F64] {
        for n in [7, 7935, 7937, 23_813, 131_073, 400_000] {
            let x = data(&[n], 0.4, dtype);
            let y = data(&[n], 1.9, dtype);
            let view = data(&[n, 3], 0.8, dtype).narrow(1, 1, 1)?;
            for x in [x.clone(), view] {
                let at = format!("{dtype} n={n} {:?}", x.shape());
                for k in 0..2 {
                    assert_eq!(all_bits(&[exp.call(&x)?]), all_bits(&[x.exp()?]), "exp {at} call {k}");
                    assert_eq!(all_bits(&[tanh.call(&x)?]), all_bits(&[x.tanh()?]), "tanh {at}");
                    assert_eq!(all_bits(&[relu.call(&x)?]), all_bits(&[x.relu()?]), "relu {at}");
                    let want = all_bits(&[x.sin()?, x.sigmoid()?]);
                    assert_eq!(all_bits(&siblings.call(&x)?), want, "sin, sigmoid {at}");
                }
            }
            let want = all_bits(&[x.mul(&y)?]);
            assert_eq!(
                all_bits(&[mul.call(&(x.clone(), y.clone()))?]),
                want,
                "mul {dtype} n={n}"
            );
            // moved in: nothing else holds them, so the output may take a buffer
            let (a, b) = (x.mul_scalar(1.0)?, y.mul_scalar(1.0)?);
            assert_eq!(all_bits(&[mul.call(&(a, b))?]), want, "mul in place {dtype} n={n}");
            let want = all_bits(&[x.exp()?]);
            assert_eq!(
                all_bits(&[exp.call(&x.mul_scalar(1.0)?)?]),
                want,
                "exp in place {dtype} n={n}"
            );
        }
    }
    Ok(())
}

/// Traced functions of one elementwise op with a broadcast operand (a
/// fused group of one op whose bias row, column or scalar is read in
/// place, run in one pass: `Prepared::one_pass`), and a bias add followed
/// by a ReLU (two ops: the registers' path), over row lengths 1, 7, 64
/// and 1000 with totals around the one-pass pieces and past the threads'
/// split, in `f32` and `f64`, with `x` held by the caller (new buffers)
/// and moved into the call (its buffer taken): the eager broadcasting
/// ops' bits each call (the fused ops compute what the eager kernels
/// compute, element by element).
#[test]
fn bias_column_and_scalar_functions_give_eager_bits() -> Result<()> {
    type Op = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let eager: [(&str, Op); 5] = [
        ("x + b", |x, b| x.add(b)),
        ("b - x", |x, b| b.sub(x)),
        ("x * b", |x, b| x.mul(b)),
        ("maximum(x, b)", |x, b| x.maximum(b)),
        ("relu(x + b)", |x, b| x.add(b)?.relu()),
    ];
    // (one traced function per op, each tracing its op)
    let traced: Vec<_> = eager
        .iter()
        .map(|&(_, op)| function(move |(x, b): &(Tensor, Tensor)| op(x, b)))
        .collect();
    for dtype in [DType::F32, DType::F64] {
        for n in [1, 7, 64, 1000] {
            for total in [300, 4095, 5121, 16_385, 131_073] {
                let m = usize::div_ceil(total, n);
                let x = data(&[m, n], 0.4, dtype);
                for b in [data(&[n], 1.3, dtype), data(&[m, 1], 2.3, dtype), data(&[], 0.9, dtype)] {
                    for ((name, op), f) in eager.iter().zip(&traced) {
                        let at = format!("{name} {dtype} x {:?} b {:?}", x.shape(), b.shape());
                        let want = all_bits(&[op(&x, &b)?]);
                        for k in 0..2 {
                            assert_eq!(all_bits(&[f.call(&(x.clone(), b.clone()))?]), want, "{at} call {k}");
                        }
                        let moved = f.call(&(x.mul_scalar(1.0)?, b.clone()))?;
                        assert_eq!(all_bits(&[moved]), want, "{at} in place");
                    }
                }
            }
        }
    }
    Ok(())
}
