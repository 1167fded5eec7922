//! The unit tests of `src/function/compile/kernel/sums.rs`, moved out of the library.

use crate::function_compile_kernel_testing as testing;
use gradtape::__internals::function::compile::kernel::sums::*;
use gradtape::__internals::function::compile::kernel::Instr;
use gradtape::__internals::function::compile::kernel::CHUNK;
use gradtape::__internals::function::compile::kernel::{Output, Program};
use gradtape::__internals::ops::desc::{Binary as B, Unary as U};
use gradtape::Tensor;

/// `out0 = a * b` (also summed), `sum1 += |a * b|`, `sum2 += exp(b)`
/// and `sum3 += -a` (whose register held `a - b` first), over `len`.
fn program(len: usize) -> Program {
    use Instr::*;
    testing::program(
        len,
        2,
        vec![
            Load { dst: 0, input: 0 },
            Load { dst: 1, input: 1 },
            Binary {
                op: B::Mul,
                dst: 2,
                a: 0,
                b: 1,
            },
            Store { out: 0, src: 2 },
            Accumulate { acc: 0, src: 2 },
            Unary {
                op: U::Abs,
                dst: 3,
                a: 2,
            },
            Accumulate { acc: 1, src: 3 },
            Unary {
                op: U::Exp,
                dst: 2,
                a: 1,
            },
            Accumulate { acc: 2, src: 2 },
            Binary {
                op: B::Sub,
                dst: 3,
                a: 0,
                b: 1,
            },
            Unary {
                op: U::Neg,
                dst: 3,
                a: 0,
            },
            Accumulate { acc: 3, src: 3 },
        ],
        4,
        vec![
            Output::Elementwise,
            Output::Sum(vec![]),
            Output::Sum(vec![]),
            Output::Sum(vec![]),
            Output::Sum(vec![]),
        ],
    )
}

#[test]
fn sums_merge_into_the_cheap_op_before_them() {
    let mut p = program(8);
    assert_eq!(merge_sums(&mut p.body), 3);
    use Instr::*;
    assert_eq!(
        p.body[2..],
        [
            // kept: stored and read again
            BinarySum {
                op: B::Mul,
                dst: Some(2),
                a: 0,
                b: 1,
                acc: 0
            },
            Store { out: 0, src: 2 },
            // read by nothing else: not kept
            UnarySum {
                op: U::Abs,
                dst: None,
                a: 2,
                acc: 1
            },
            // exp has no element function: left alone
            Unary {
                op: U::Exp,
                dst: 2,
                a: 1
            },
            Accumulate { acc: 2, src: 2 },
            // the sum reads the later value of r3, not the difference
            Binary {
                op: B::Sub,
                dst: 3,
                a: 0,
                b: 1
            },
            UnarySum {
                op: U::Neg,
                dst: None,
                a: 0,
                acc: 3
            },
        ]
    );
    let text = format!("{p}");
    assert!(
        text.contains("r2 = sum0 += Mul(r0, r1)\n") && text.contains("\nsum1 += Abs(r2)\n"),
        "{text}"
    );
}

#[test]
fn merged_sums_give_the_bits_of_the_separate_passes() {
    // lengths around the runs and registers, and one spread over tasks
    for len in [1usize, 3, 255, 256, 300, 1024, 5000, 300_001] {
        let a: Vec<f32> = (0..len).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
        let b: Vec<f32> = (0..len).map(|i| ((i as f32) * 0.11).cos() - 0.2).collect();
        let inputs = [
            Tensor::from_vec(a, &[len]).unwrap(),
            Tensor::from_vec(b, &[len]).unwrap(),
        ];
        let plain = program(len);
        let mut merged = plain.clone();
        assert_eq!(merge_sums(&mut merged.body), 3);
        let got = testing::same_bits(&plain, &merged, &inputs);
        assert_eq!(got.len(), 5);
        // and the values are the sums they name
        let (a, b) = (inputs[0].to_vec::<f32>().unwrap(), inputs[1].to_vec::<f32>().unwrap());
        let exact: f64 = a.iter().zip(&b).map(|(&x, &y)| (x * y) as f64).sum();
        let s0 = got[1][0] as f64;
        assert!(
            (s0 - exact).abs() <= 1e-5 * (1.0 + exact.abs()) + 1e-6 * len as f64,
            "{len}: {s0} vs {exact}"
        );
        let neg: f64 = a.iter().map(|&x| -(x as f64)).sum();
        let s3 = got[4][0] as f64;
        assert!(
            (s3 - neg).abs() <= 1e-5 * (1.0 + neg.abs()) + 1e-6 * len as f64,
            "{len}: {s3} vs {neg}"
        );
    }
}

#[test]
fn whole_chunk_sums_give_the_bits_of_the_general_one() {
    for n in [1usize, 255, 256, 300, 512, 700, 1024, 1025, 1500, 2048] {
        let xs: Vec<f32> = (0..n)
            .map(|i| ((i as f32 * 0.37).sin() * 1e3 + 1e-3 * i as f32) * if i % 7 == 0 { -1e4 } else { 1.0 })
            .collect();
        let mut want = [0.25f64; 8];
        for piece in xs.chunks(CHUNK) {
            add_lanes(&mut want, &chunk_lanes(piece));
        }
        let mut got = [0.25f64; 8];
        add_chunk_sums(&xs, &mut got);
        assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits), "{n}");
        // within three f32 roundings of each term of the exact sum
        let (got, exact) = (lanes_total(&got), 2.0 + xs.iter().map(|&v| v as f64).sum::<f64>());
        let scale: f64 = xs.iter().map(|&v| (v as f64).abs()).sum();
        assert!(
            (got - exact).abs() <= 3.0 * f32::EPSILON as f64 * scale,
            "{n}: {got} vs {exact}"
        );
    }
    // the lanes of a run: column k of the run in lane k % 8
    let xs: Vec<f32> = (0..CHUNK).map(|i| if i % 64 == 9 { 1.0 } else { 0.0 }).collect();
    assert_eq!(chunk_lanes(&xs), [0.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    // (a chunk summing to -0 gives +0: its columns start from +0)
    let mut got = [-0.0f64; 8];
    add_chunk_sums(&[-0.0f32; 1024], &mut got);
    assert_eq!(lanes_total(&got).to_bits(), 0.0f64.to_bits());
}
