//! The unit tests of `src/function/compile/kernel/cost.rs`: a fused
//! kernel of costly functions is split over the threads from fewer
//! elements than one of cheap passes, never one with sums, and gives the
//! same bits as the eager ops either way.

use crate::function_compile_kernel_testing as testing;
use gradtape::__internals::function::compile::kernel::{Instr, Output, Program};
use gradtape::__internals::ops::desc::{Binary as B, Unary as U};
use gradtape::{DType, Tensor};

/// Half of the kernels' `PAR_MIN` (the fewest elements a task of a cheap
/// program takes).
const BASE: usize = 1 << 14;

/// `out0 = x + y`: two loads, an addition, a store.
fn cheap(len: usize) -> Program {
    use Instr::*;
    let body = vec![
        Load { dst: 0, input: 0 },
        Load { dst: 1, input: 1 },
        Binary {
            op: B::Add,
            dst: 2,
            a: 0,
            b: 1,
        },
        Store { out: 0, src: 2 },
    ];
    testing::program(len, 2, body, 3, vec![Output::Elementwise])
}

/// An LSTM cell's gates: `i = σ(a)`, `f = σ(b)`, `g = tanh(c)`,
/// `c' = f·c0 + i·g`, `h = σ(d)·tanh(c')`; outputs `c'` and `h` (with
/// `sum` true, also the sum of `h`).
fn gates(len: usize, sum: bool) -> Program {
    use Instr::*;
    // (an instruction never writes a register it reads: the allocator's rule)
    let un = |op, dst, a| Unary { op, dst, a };
    let bin = |op, dst, a, b| Binary { op, dst, a, b };
    let mut body = vec![
        Load { dst: 0, input: 0 },
        un(U::Sigmoid, 1, 0),
        Load { dst: 2, input: 1 },
        un(U::Sigmoid, 3, 2),
        Load { dst: 4, input: 4 },
        bin(B::Mul, 5, 3, 4),
        Load { dst: 2, input: 2 },
        un(U::Tanh, 6, 2),
        bin(B::Mul, 7, 1, 6),
        bin(B::Add, 0, 5, 7),
        Store { out: 0, src: 0 },
        Load { dst: 2, input: 3 },
        un(U::Sigmoid, 3, 2),
        un(U::Tanh, 4, 0),
        bin(B::Mul, 1, 3, 4),
        Store { out: 1, src: 1 },
    ];
    let mut outputs = vec![Output::Elementwise, Output::Elementwise];
    if sum {
        body.push(Accumulate { acc: 0, src: 1 });
        outputs.push(Output::Sum(vec![]));
    }
    testing::program(len, 5, body, 8, outputs)
}

#[test]
fn costly_programs_split_from_fewer_elements_and_programs_with_sums_never_earlier() {
    let (cheap, costly, summed) = (cheap(4096), gates(4096, false), gates(4096, true));
    assert!(
        costly.cost() > 4 * cheap.cost(),
        "{} vs {}",
        costly.cost(),
        cheap.cost()
    );
    assert_eq!(cheap.min_task(BASE), BASE);
    let t = costly.min_task(BASE);
    // a handful of chunks: an LSTM step's [32, 128] gates take two tasks
    assert!((2048..=4096 / 2).contains(&t), "{t}");
    assert_eq!(summed.min_task(BASE), BASE, "a sum's bits must not depend on the size");
}

#[test]
fn split_gates_give_the_bits_of_the_eager_ops() {
    // 4096 and 12345 elements: two and several tasks where two threads run
    for len in [4096usize, 12345] {
        let inputs: Vec<Tensor> = (0..5)
            .map(|k| {
                let v: Vec<f32> = (0..len).map(|i| ((i * 7 + k * 13) % 97) as f32 / 16.0 - 3.0).collect();
                Tensor::from_vec(v, &[len]).unwrap()
            })
            .collect();
        let got = gates(len, false).run(&inputs).unwrap();
        let [a, b, c, d, c0] = &inputs[..] else { unreachable!() };
        let c1 = b
            .sigmoid()
            .unwrap()
            .mul(c0)
            .unwrap()
            .add(&a.sigmoid().unwrap().mul(&c.tanh().unwrap()).unwrap())
            .unwrap();
        let h = d.sigmoid().unwrap().mul(&c1.tanh().unwrap()).unwrap();
        let bits = |t: &Tensor| {
            t.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&got[0]), bits(&c1), "c' over {len}");
        assert_eq!(bits(&got[1]), bits(&h), "h over {len}");
        assert_eq!(got[1].dtype(), DType::F32);
    }
}
