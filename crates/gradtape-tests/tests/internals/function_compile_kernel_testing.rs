//! Test helpers: hand-written programs, and comparing two programs' bits
//! (the `testing` module of `src/function/compile/kernel.rs`, moved out of
//! the library).

use gradtape::__internals::function::compile::kernel::*;
use gradtape::DType;
use gradtape::Tensor;

/// An `f32` program of `len` elements over `n_inputs` full-size inputs,
/// with `n_regs` registers and `outputs`.
pub fn program(len: usize, n_inputs: usize, body: Vec<Instr>, n_regs: usize, outputs: Vec<Output>) -> Program {
    Program {
        dtype: DType::F32,
        len,
        shape: vec![len],
        input_len: vec![len; n_inputs],
        splats: vec![],
        body,
        n_regs,
        outputs,
        scalar: Default::default(),
    }
}

/// Runs both programs on `inputs` and checks that every output has the
/// same bits; returns the outputs' values.
pub fn same_bits(a: &Program, b: &Program, inputs: &[Tensor]) -> Vec<Vec<f32>> {
    let (want, got) = (a.run(inputs).unwrap(), b.run(inputs).unwrap());
    assert_eq!(want.len(), got.len());
    let vals = |o: &Outs| -> Vec<Vec<f32>> { o.iter().map(|t| t.to_vec::<f32>().unwrap()).collect() };
    let (want, got) = (vals(&want), vals(&got));
    for (k, (w, g)) in want.iter().zip(&got).enumerate() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(w), bits(g), "output {k} of {} elements", a.len);
    }
    got
}
