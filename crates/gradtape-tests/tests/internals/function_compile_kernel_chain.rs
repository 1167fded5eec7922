//! The unit tests of `src/function/compile/kernel/chain.rs`, moved out of the library.

use crate::function_compile_kernel_testing as testing;
use gradtape::__internals::function::compile::kernel::chain::*;
use gradtape::__internals::function::compile::kernel::Instr;
use gradtape::__internals::function::compile::kernel::{Output, Program};
use gradtape::__internals::ops::desc::Binary;
use gradtape::Tensor;
use Binary::{Add, Mul, Sub};

/// Three chains: `(x - y) * z` into a fresh register; `z - x * r5`
/// over `r5` (its second input); `r3 * y + z` over `r3` (its first,
/// a register of its own, not an input read in place); and pairs that
/// stay apart because their first result is read again.
fn program(len: usize) -> Program {
    use Instr::*;
    testing::program(
        len,
        3,
        vec![
            Load { dst: 0, input: 0 },
            Load { dst: 1, input: 1 },
            Load { dst: 2, input: 2 },
            Binary {
                op: Sub,
                dst: 3,
                a: 0,
                b: 1,
            },
            Binary {
                op: Mul,
                dst: 4,
                a: 3,
                b: 2,
            },
            Store { out: 0, src: 4 },
            Binary {
                op: Add,
                dst: 3,
                a: 0,
                b: 2,
            },
            Binary {
                op: Mul,
                dst: 5,
                a: 3,
                b: 1,
            },
            Store { out: 2, src: 3 },
            Binary {
                op: Mul,
                dst: 4,
                a: 0,
                b: 5,
            },
            Binary {
                op: Sub,
                dst: 5,
                a: 2,
                b: 4,
            },
            Store { out: 1, src: 5 },
            Binary {
                op: Mul,
                dst: 3,
                a: 0,
                b: 0,
            },
            Store { out: 3, src: 3 },
            Binary {
                op: Mul,
                dst: 4,
                a: 3,
                b: 1,
            },
            Binary {
                op: Add,
                dst: 3,
                a: 4,
                b: 2,
            },
            Store { out: 4, src: 3 },
        ],
        6,
        vec![Output::Elementwise; 5],
    )
}

#[test]
fn arithmetic_pairs_merge_where_the_first_result_dies() {
    let mut p = program(8);
    assert_eq!(merge_chains(&mut p.body), 3);
    use Instr::*;
    assert_eq!(
        p.body[3..],
        [
            Chain {
                op1: Sub,
                op2: Mul,
                swap: false,
                dst: 4,
                a: 0,
                b: 1,
                c: 2
            },
            Store { out: 0, src: 4 },
            Binary {
                op: Add,
                dst: 3,
                a: 0,
                b: 2
            },
            Binary {
                op: Mul,
                dst: 5,
                a: 3,
                b: 1
            },
            Store { out: 2, src: 3 },
            Chain {
                op1: Mul,
                op2: Sub,
                swap: true,
                dst: 5,
                a: 0,
                b: 5,
                c: 2
            },
            Store { out: 1, src: 5 },
            Binary {
                op: Mul,
                dst: 3,
                a: 0,
                b: 0
            },
            Store { out: 3, src: 3 },
            Chain {
                op1: Mul,
                op2: Add,
                swap: false,
                dst: 3,
                a: 3,
                b: 1,
                c: 2
            },
            Store { out: 4, src: 3 },
        ]
    );
    assert!(format!("{p}").contains("r5 = Sub(r2, Mul(r0, r5))\n"), "{p}");
}

#[test]
fn a_chain_gives_the_bits_of_its_two_instructions() {
    for len in [1usize, 5, 256, 1000, 4099, 100_003] {
        let xs: Vec<Tensor> = (0..3)
            .map(|k| {
                let v: Vec<f32> = (0..len)
                    .map(|i| ((i * (k + 2)) as f32 * 0.37).sin() * 1.7 + k as f32)
                    .collect();
                Tensor::from_vec(v, &[len]).unwrap()
            })
            .collect();
        let plain = program(len);
        let mut merged = plain.clone();
        assert_eq!(merge_chains(&mut merged.body), 3);
        let out = testing::same_bits(&plain, &merged, &xs);
        assert_eq!(out.len(), 5);
        // and they are the values named
        let v: Vec<Vec<f32>> = xs.iter().map(|t| t.to_vec::<f32>().unwrap()).collect();
        for i in (0..len).step_by(97) {
            let (x, y, z) = (v[0][i], v[1][i], v[2][i]);
            assert_eq!(out[0][i], (x - y) * z, "{len} {i}");
            assert_eq!(out[1][i], z - x * ((x + z) * y), "{len} {i}");
            assert_eq!(out[4][i], x * x * y + z, "{len} {i}");
        }
    }
    // the scalar form
    assert_eq!(one(&Mul, &Sub, true, 2.0f64, 3.0, 10.0), 4.0);
    assert_eq!(one(&Sub, &Add, false, 2.0f64, 3.0, 10.0), 9.0);
}
