//! The executor's lent operands (`compile/exec.rs`, `Operands`): a node
//! reading a value that stays in its slot (a later node reads it too) or
//! a caller's input gets a handle that does not count, so the value looks
//! held alone although it is not. A fused kernel writes its output into
//! an input held alone; it must never write into a lent one. Each case
//! here would be written over if it did: a caller's input that nothing
//! else holds, and a product's output that a fused chain reads before a
//! second product reads it. Expected values: the same ops run eagerly
//! (the fused elementwise ops give the eager kernels' bits).

use gradtape::{function, Result, Tensor};

fn data(shape: &[usize], seed: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| ((i as f64 * 0.613 + seed).cos() * 1.3) as f32).collect();
    Tensor::from_vec(v, shape).unwrap()
}

fn bits(ts: &[Tensor]) -> Vec<Vec<u32>> {
    ts.iter()
        .map(|t| t.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect())
        .collect()
}

#[test]
fn a_callers_input_held_by_nothing_else_is_never_written() -> Result<()> {
    let f = function(|x: &Tensor| Ok(vec![x.mul_scalar(2.0)?.add_scalar(1.0)?.tanh()?]));
    let want: Vec<f32> = data(&[8, 50], 0.2).to_vec::<f32>()?;
    for call in 0..3 {
        // the argument is held by the call's argument alone
        let x = data(&[8, 50], 0.2);
        let got = f.call(&x)?;
        assert_eq!(x.to_vec::<f32>()?, want, "call {call}: the input changed");
        let eager = x.mul_scalar(2.0)?.add_scalar(1.0)?.tanh()?;
        assert_eq!(bits(&got), bits(&[eager]), "call {call}");
    }
    Ok(())
}

#[test]
fn a_value_a_fused_chain_reads_before_a_later_node_is_never_written() -> Result<()> {
    // h: a product's output, held by its slot alone; the fused chain reads
    // it (lent: a second product reads it later), then the second product
    let body = |(x, w, b, v): &(Tensor, Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let h = x.matmul(w)?;
        let a = h.add(b)?.sigmoid()?;
        let c = h.matmul(v)?;
        Ok(vec![a, c])
    };
    let f = function(body);
    let args = (
        data(&[6, 32], 0.1),
        data(&[32, 32], 0.7),
        data(&[32], 1.9),
        data(&[32, 5], 2.3),
    );
    let want = bits(&body(&args)?);
    for call in 0..3 {
        assert_eq!(bits(&f.call(&args)?), want, "call {call}");
    }
    Ok(())
}
