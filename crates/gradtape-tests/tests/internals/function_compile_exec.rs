//! The unit tests of `src/function/compile/exec.rs`, moved out of the library.

use gradtape::__internals::function::compile::exec::Executable;
use gradtape::__internals::function::compile::exec::*;
use gradtape::__internals::function::compile::fuse::Fused;
use gradtape::__internals::function::compile::pair_products::PAIRS;
use gradtape::__internals::{OpInternals, TensorInternals};
use gradtape::DType;
use gradtape::Result;
use gradtape::Tensor;

/// `exp(sin(x) * 2) + 1`, traced and compiled: one fused node.
fn compiled() -> (Executable, Tensor) {
    let x = Tensor::from_vec((0..1000).map(|i| i as f64 * 1e-3).collect::<Vec<_>>(), &[1000]).unwrap();
    let f = gradtape::function(|x: &Tensor| x.sin()?.mul_scalar(2.0)?.exp()?.add_scalar(1.0));
    let c = f.concrete(&x).unwrap();
    (Executable::compile(c.graph(), &Default::default()).unwrap(), x)
}

/// A two-layer model's gradients with respect to its input and both
/// weights, compiled with products paired or not (`PAIRS`), and its
/// arguments: a batch of `b` rows of `d` features, weights `[d, h]` and
/// `[h, o]`.
fn gradients(pairs: bool, (b, d, h, o): (usize, usize, usize, usize)) -> (Executable, Vec<Tensor>) {
    let val = |n: usize, s: f32| (0..n).map(|i| ((i * 7919 % 101) as f32 - 50.0) * s).collect::<Vec<_>>();
    let args = vec![
        Tensor::from_vec(val(b * d, 0.01), &[b, d]).unwrap(),
        Tensor::from_vec(val(d * h, 0.003), &[d, h]).unwrap(),
        Tensor::from_vec(val(h * o, 0.002), &[h, o]).unwrap(),
    ];
    let f = gradtape::function(|(x, w1, w2): &(Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let tape = gradtape::GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(x);
            tape.watch(w1);
            tape.watch(w2);
            let y = x.matmul(w1)?.tanh()?.matmul(w2)?;
            y.mul(&y)?.sum_all()
        })?;
        let (gx, g1, g2) = tape.gradient(&loss, &(x.clone(), w1.clone(), w2.clone()))?;
        Ok(vec![gx.expect("x"), g1.expect("w1"), g2.expect("w2")])
    });
    let t = (args[0].clone(), args[1].clone(), args[2].clone());
    let c = f.concrete(&t).unwrap();
    let e = gradtape::__internals::scoped::with_flag(&PAIRS, pairs, || {
        Executable::compile(c.graph(), &Default::default()).unwrap()
    });
    (e, args)
}

#[test]
fn paired_products_give_the_bits_of_the_sequential_plan() {
    // (dX and dW of each layer pair; the second shape's weight
    // gradients are thin products with a long shared dimension, split
    // over it, and its input gradients go to the `gemm` crate)
    for dims in [(640, 96, 80, 48), (8192, 12, 16, 10)] {
        let (on, args) = gradients(true, dims);
        let (off, _) = gradients(false, dims);
        let paired = on.plan.steps.iter().filter(|s| s.paired.is_some()).count();
        if gradtape::__internals::kernels::cpu::workers::threads() > 1 {
            assert_eq!(paired, 2, "{dims:?}: {}", on.graph);
        }
        assert!(off.plan.steps.iter().all(|s| s.paired.is_none()));
        let want: Vec<Vec<u32>> = off
            .run(&args)
            .unwrap()
            .iter()
            .map(|t| t.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect())
            .collect();
        // (the trials run each pair together, or both ways, then as decided)
        for _ in 0..gradtape::__internals::function::compile::pair_products::RUNS_TO_DECIDE + 2 {
            let got: Vec<Vec<u32>> = on
                .run(&args)
                .unwrap()
                .iter()
                .map(|t| t.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect())
                .collect();
            assert!(got == want, "{dims:?}: the paired plan's gradients differ");
        }
        for s in on.plan.steps.iter().filter_map(|s| s.paired.as_deref()) {
            assert!(s.decision().is_some(), "{dims:?}: a pair is still on trial");
        }
    }
}

#[test]
fn a_plan_moves_values_at_their_last_read() {
    let (e, _) = compiled();
    let plan = Plan::new(&e.graph, true);
    let fused: Vec<&Step> = e
        .graph
        .nodes
        .iter()
        .zip(&plan.steps)
        .filter(|(n, _)| n.op.as_dyn::<Fused>().is_some())
        .map(|(_, s)| s)
        .collect();
    assert_eq!(fused.len(), 1);
    // the graph input is read last here, and moved (the caller still
    // holds it, so it is never written)
    assert!(fused[0].reads[0].last);
    assert!(fused[0].writes[0].is_some());
}

#[test]
fn runs_reuse_dead_tensors_never_one_the_caller_holds_and_hold_a_bounded_number() {
    let (e, x) = compiled();
    let args = std::slice::from_ref(&x);
    let first = e.run(args).unwrap();
    let want = first[0].to_vec::<f64>().unwrap();
    let second = e.run(args).unwrap();
    let p2 = second[0].buffer::<f64>().as_ptr();
    assert_ne!(
        p2,
        first[0].buffer::<f64>().as_ptr(),
        "the caller holds the first result"
    );
    drop(second);
    // dropped by the caller: the next run writes its result there
    let third = e.run(args).unwrap();
    assert_eq!(third[0].buffer::<f64>().as_ptr(), p2);
    for _ in 0..20 {
        let again = e.run(args).unwrap();
        assert_eq!(again[0].to_vec::<f64>().unwrap(), want);
        let held = e.plan.reuse.lock().unwrap().bin.len();
        assert!(held <= e.graph.values.len() + e.graph.outputs.len(), "{held}");
    }
    // the results the caller kept are as they were made
    assert_eq!(first[0].to_vec::<f64>().unwrap(), want);
    assert_eq!(third[0].to_vec::<f64>().unwrap(), want);
    // the input was never written
    assert_eq!(x.to_vec::<f64>().unwrap()[1], 1e-3);
}

#[test]
fn a_fused_node_writes_into_a_buffer_held_alone_and_never_a_shared_one() {
    let (e, x) = compiled();
    let want: Vec<f64> = x
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|v| (v.sin() * 2.0).exp() + 1.0)
        .collect();
    // shared: the caller holds x, which stays as it was
    let before = x.to_vec::<f64>().unwrap();
    let y = e.run(std::slice::from_ref(&x)).unwrap();
    assert_eq!(x.to_vec::<f64>().unwrap(), before);
    assert_eq!(y[0].to_vec::<f64>().unwrap(), want);
    // held alone: the program writes into its buffer
    let node = e.graph.nodes.iter().find(|n| n.op.as_dyn::<Fused>().is_some()).unwrap();
    let p = fused_program(&node.op).unwrap();
    let mut alone = [Tensor::from_vec(before.clone(), &[1000]).unwrap()];
    let ptr = alone[0].buffer::<f64>().as_ptr();
    let id = alone[0].id();
    let out = p.run_in_place(&mut alone).unwrap();
    assert_eq!(out[0].buffer::<f64>().as_ptr(), ptr, "written in place");
    assert_ne!(out[0].id(), id, "a new value has a new id");
    assert_eq!(out[0].to_vec::<f64>().unwrap(), want);
    // a second handle: a new buffer, the input unchanged
    let held = Tensor::from_vec(before.clone(), &[1000]).unwrap();
    let mut shared = [held.clone()];
    let out = p.run_in_place(&mut shared).unwrap();
    assert_ne!(out[0].buffer::<f64>().as_ptr(), held.buffer::<f64>().as_ptr());
    assert_eq!(held.to_vec::<f64>().unwrap(), before);
    assert_eq!(out[0].to_vec::<f64>().unwrap(), want);
    // a view sharing the buffer: not written either
    let base = Tensor::from_vec(before.clone(), &[1000]).unwrap();
    let mut view = [base.reshape(&[1000]).unwrap().alias()];
    let out = p.run_in_place(&mut view).unwrap();
    assert_eq!(base.to_vec::<f64>().unwrap(), before);
    assert_eq!(out[0].to_vec::<f64>().unwrap(), want);
    // wrong dtype: an error naming the kernel
    let mut bad = [Tensor::zeros(&[1000], DType::F32)];
    let err = p.run_in_place(&mut bad).unwrap_err().to_string();
    assert!(err.contains("Fused"), "{err}");
}

/// `(x, c) -> (x * 0.5 + c, x, c, x * 0.5 + c)` on `[256]` f64, traced and
/// compiled (one fused kernel for the sum; `x` and `c` also returned as
/// they are, the sum twice), and its inputs.
fn pass_through() -> (Executable, [Tensor; 2]) {
    let x = Tensor::from_vec((0..256).map(|i| (i as f64 * 0.3).sin()).collect::<Vec<_>>(), &[256]).unwrap();
    let c = Tensor::from_vec((0..256).map(|i| (i as f64 * 0.7).cos()).collect::<Vec<_>>(), &[256]).unwrap();
    let f = gradtape::function(|(x, c): &(Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let s = x.mul_scalar(0.5)?.add(c)?;
        Ok(vec![s.clone(), x.clone(), c.clone(), s])
    });
    let e = Executable::compile(
        f.concrete(&(x.clone(), c.clone())).unwrap().graph(),
        &Default::default(),
    )
    .unwrap();
    (e, [x, c])
}

/// A loop's iterations run a compiled body through `Repeat`: the loop
/// variables moved in, the captures borrowed. A moved input that nothing
/// else holds is written in place at its last read; a borrowed one never
/// (the caller holds it); an input returned as it is comes back as the
/// same tensor (moved: the same buffer); a value returned twice is in both
/// outputs; the values are `run`'s (expected values: computed here in
/// f64, `x * 0.5 + c`, the one rounding of each op).
#[test]
fn repeated_runs_write_moved_inputs_in_place_and_never_borrowed_ones() {
    let (e, [x, c]) = pass_through();
    let (xs, cs) = (x.to_vec::<f64>().unwrap(), c.to_vec::<f64>().unwrap());
    let want: Vec<f64> = xs.iter().zip(&cs).map(|(a, b)| a * 0.5 + b).collect();
    let by_run = e.run(&[x.clone(), c.clone()]).unwrap();
    assert_eq!(by_run[0].to_vec::<f64>().unwrap(), want);
    let mut r = Repeat::new(&e);
    for _ in 0..3 {
        // a copy of x held by nothing else, moved in
        let own = Tensor::from_vec(xs.clone(), &[256]).unwrap();
        let ptr = own.buffer::<f64>().as_ptr();
        let mut out = Vec::new();
        let mut moved = vec![own];
        r.run(
            Args {
                moved: &mut moved,
                borrowed: [&[], std::slice::from_ref(&c)],
            },
            &mut out,
        )
        .unwrap();
        assert!(moved.is_empty(), "the moved inputs are taken");
        assert_eq!(out.len(), 4);
        // x is returned too, so the sum is not written into its buffer;
        // x itself comes back as it went in
        assert_eq!(out[1].buffer::<f64>().as_ptr(), ptr, "x returned as it was");
        assert_eq!(out[1].to_vec::<f64>().unwrap(), xs);
        assert_eq!(out[0].to_vec::<f64>().unwrap(), want);
        assert_eq!(out[3].to_vec::<f64>().unwrap(), want);
        assert_eq!(out[2].to_vec::<f64>().unwrap(), cs);
        assert_eq!(c.to_vec::<f64>().unwrap(), cs, "a borrowed input is never written");
    }
    // x not returned: its buffer, held by the run alone, takes the sum
    let f = gradtape::function(|(x, c): &(Tensor, Tensor)| x.mul_scalar(0.5)?.add(c));
    let e = Executable::compile(
        f.concrete(&(x.clone(), c.clone())).unwrap().graph(),
        &Default::default(),
    )
    .unwrap();
    let mut r = Repeat::new(&e);
    let own = Tensor::from_vec(xs.clone(), &[256]).unwrap();
    let ptr = own.buffer::<f64>().as_ptr();
    let mut out = Vec::new();
    let args = Args {
        moved: &mut vec![own],
        borrowed: [std::slice::from_ref(&c), &[]],
    };
    r.run(args, &mut out).unwrap();
    assert_eq!(out[0].buffer::<f64>().as_ptr(), ptr, "written in place");
    assert_eq!(out[0].to_vec::<f64>().unwrap(), want);
    assert_eq!(c.to_vec::<f64>().unwrap(), cs);
    // held by the caller too: a new buffer, x as it was
    let args = Args {
        moved: &mut vec![x.clone()],
        borrowed: [std::slice::from_ref(&c), &[]],
    };
    out.clear();
    r.run(args, &mut out).unwrap();
    assert_ne!(out[0].buffer::<f64>().as_ptr(), x.buffer::<f64>().as_ptr());
    assert_eq!(x.to_vec::<f64>().unwrap(), xs);
    assert_eq!(out[0].to_vec::<f64>().unwrap(), want);
    // too few inputs: an error naming the counts, not a panic
    let args = Args {
        moved: &mut vec![x.clone()],
        borrowed: [&[], &[]],
    };
    let err = r.run(args, &mut out).unwrap_err().to_string();
    assert!(err.contains("takes 2 inputs, got 1"), "{err}");
}
