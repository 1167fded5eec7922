//! Fused programs with a broadcast operand run in one pass
//! (`Prepared::one_pass` in `src/function/compile/kernel/prepared.rs`):
//! a bias row `[n]` added to `[m, n]` (a gather of period `n`), a column
//! `[m, 1]` (each element repeated `n` times), and a scalar (a splat, or a
//! gather of one element). Which such programs are recognised, and that
//! they give the eager broadcasting op's bits (`Binary::eval` on the
//! tensors in their own shapes: `kernels::cpu::elementwise::zip_slices`)
//! at row lengths 1, 7, 64 and 1000, with totals around the one-pass
//! pieces (`one_pass_width`), in `f32` and `f64`, into new buffers and in
//! place (the full operand's buffer taken: the registers' path).

use crate::function_compile_kernel_testing as testing;
use gradtape::__internals::function::compile::kernel::{one_pass_width, Instr, Output, Program, Splat};
use gradtape::__internals::ops::desc::Binary as B;
use gradtape::{DType, Tensor};

/// How the second operand is broadcast.
#[derive(Clone, Copy, Debug)]
enum Bcast {
    /// a row `[n]` into `[m, n]`
    Row,
    /// a column `[m, 1]` into `[m, n]`
    Column,
    /// one element, splatted into a register before the pieces
    Splat,
    /// one element, read by a gather (`q` = every element, `p = 1`)
    Scalar,
}

/// `out = op(x, y)` (or `op(y, x)` where `swap`) over `[m, n]`, `x` full
/// and `y` broadcast as `how`.
fn program(dtype: DType, (m, n): (usize, usize), op: B, how: Bcast, swap: bool) -> Program {
    use Instr::*;
    let len = m * n;
    let y_len = match how {
        Bcast::Row => n,
        Bcast::Column => m,
        Bcast::Splat | Bcast::Scalar => 1,
    };
    let (a, b) = if swap { (1, 0) } else { (0, 1) };
    let mut body = vec![Load { dst: 0, input: 0 }];
    let mut splats = vec![];
    match how {
        Bcast::Row => body.push(Gather {
            dst: 1,
            input: 1,
            q: 1,
            p: n,
        }),
        Bcast::Column => body.push(Gather {
            dst: 1,
            input: 1,
            q: n,
            p: m,
        }),
        Bcast::Scalar => body.push(Gather {
            dst: 1,
            input: 1,
            q: len,
            p: 1,
        }),
        Bcast::Splat => splats.push((1, Splat::Input(1))),
    }
    body.push(Binary { op, dst: 2, a, b });
    body.push(Store { out: 0, src: 2 });
    Program {
        dtype,
        shape: vec![m, n],
        input_len: vec![len, y_len],
        splats,
        ..testing::program(len, 2, body, 3, vec![Output::Elementwise])
    }
}

/// The broadcast operand's shape.
fn y_shape(how: Bcast, (m, n): (usize, usize)) -> Vec<usize> {
    match how {
        Bcast::Row => vec![n],
        Bcast::Column => vec![m, 1],
        Bcast::Splat | Bcast::Scalar => vec![],
    }
}

/// `function_compile_kernel_one_pass`'s values (signed zeros, and past
/// the first few hundred a NaN and infinities) in `shape`.
fn data(shape: &[usize], seed: f64, dtype: DType) -> Tensor {
    let n = shape.iter().product();
    super::function_compile_kernel_one_pass::data(n, seed, dtype)
        .reshape(shape)
        .unwrap()
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn programs_with_a_broadcast_operand_run_in_one_pass() {
    use Instr::*;
    for how in [Bcast::Row, Bcast::Column, Bcast::Splat, Bcast::Scalar] {
        for swap in [false, true] {
            let p = program(DType::F32, (40, 64), B::Add, how, swap);
            assert!(p.one_pass(), "{how:?} swap={swap}");
        }
    }
    // a constant splatted: one pass too
    let mut p = program(DType::F32, (40, 64), B::Mul, Bcast::Splat, false);
    p.splats[0].1 = Splat::Value(0.5);
    assert!(p.one_pass());
    // not one pass: an op reading the result of an op on the broadcast row
    let mut p = program(DType::F32, (40, 64), B::Add, Bcast::Row, false);
    p.body.insert(
        2,
        Unary {
            op: gradtape::__internals::ops::desc::Unary::Exp,
            dst: 1,
            a: 1,
        },
    );
    assert!(!p.one_pass());
    // nor a bias add whose result is also summed
    let mut p = program(DType::F32, (40, 64), B::Add, Bcast::Row, false);
    p.body.push(Accumulate { acc: 0, src: 2 });
    p.outputs.push(Output::Sum(vec![]));
    assert!(!p.one_pass());
}

#[test]
fn broadcast_one_pass_runs_give_the_eager_bits() {
    let w = one_pass_width::<f32>(3, 1 << 20);
    let w64 = one_pass_width::<f64>(3, 1 << 20);
    let ops = [B::Add, B::Sub, B::Mul, B::Div, B::Maximum, B::Pow];
    for dtype in [DType::F32, DType::F64] {
        for n in [1, 7, 64, 1000] {
            // rows so that the totals fall around the pieces' bounds (and
            // past the threads' split), and a few rows
            let mut ms: Vec<usize> = [w - 1, w, w + 1, 3 * w + 5, w64 + 3, 131_073]
                .iter()
                .map(|&t| t.div_ceil(n))
                .collect();
            ms.extend([1, 3]);
            for &m in &ms {
                let x = data(&[m, n], 0.3, dtype);
                for how in [Bcast::Row, Bcast::Column, Bcast::Splat, Bcast::Scalar] {
                    let y = data(&y_shape(how, (m, n)), 1.7, dtype);
                    for op in &ops {
                        for swap in [false, true] {
                            let p = program(dtype, (m, n), op.clone(), how, swap);
                            assert!(p.one_pass());
                            let want = match swap {
                                false => op.eval(&x, &y).unwrap(),
                                true => op.eval(&y, &x).unwrap(),
                            };
                            assert_eq!(want.shape(), &[m, n]);
                            let want = bits(&want);
                            let at = format!("{op:?} {how:?} swap={swap} {dtype} [{m}, {n}]");
                            for run in 0..2 {
                                let got = p.run(&[x.clone(), y.clone()]).unwrap();
                                assert_eq!(got[0].shape(), &[m, n], "{at}");
                                assert_eq!(bits(&got[0]), want, "{at} run {run}");
                            }
                            // in place: the full operand's buffer
                            let mut held = [x.mul_scalar(1.0).unwrap(), y.clone()];
                            let got = p.run_in_place(&mut held).unwrap();
                            assert_eq!(bits(&got[0]), want, "{at} in place");
                        }
                    }
                }
            }
        }
    }
}
