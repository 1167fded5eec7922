//! Shape, index and creation ops in traced functions: each is a graph node
//! that follows its inputs (integer inputs included: the gradient-check
//! tables' traced mode moves only float inputs), and random draws follow
//! TensorFlow's semantics (seeded draws are stateless, draws from a
//! generator are the generator's stream, as eagerly).

use std::sync::Mutex;

use gradtape::nn::{Dropout, Layer};
use gradtape::{function, DType, Result, Rng, Slice, Tensor};

fn ints(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

#[test]
fn one_hot_follows_its_indices_at_each_call() -> Result<()> {
    let f = function(|i: &Tensor| i.one_hot(4, 1.0, -1.0, -1, DType::F32));
    for idx in [[0i64, 3, 1], [2, 2, 0], [3, 9, -1]] {
        let i = ints(&idx, &[3]);
        let got = f.call(&i)?;
        let want = i.one_hot(4, 1.0, -1.0, -1, DType::F32)?;
        assert_eq!(got.to_vec::<f32>()?, want.to_vec::<f32>()?, "indices {idx:?}");
    }
    assert_eq!(f.trace_count(), 1);
    let g = f.graph(&ints(&[0, 1, 2], &[3]))?;
    assert!(
        g.to_string().contains("OneHot[depth=4, on=1, off=-1, axis=-1, f32]"),
        "{g}"
    );
    Ok(())
}

#[test]
fn gather_with_batch_dims_and_gather_nd_follow_their_indices() -> Result<()> {
    let x = Tensor::from_vec((0..24).map(f64::from).collect(), &[2, 3, 4])?;
    let f = function(|(x, i): &(Tensor, Tensor)| {
        x.gather_with(i, 2, 1)?
            .add(&x.gather_nd(&i.slice(&[0, 0], &[2, 2])?)?.sum_all()?)
    });
    let eager = |x: &Tensor, i: &Tensor| {
        x.gather_with(i, 2, 1)?
            .add(&x.gather_nd(&i.slice(&[0, 0], &[2, 2])?)?.sum_all()?)
    };
    for idx in [[0i64, 1, 3, 1, 2, 0], [1, 0, 2, 0, 2, 1]] {
        let i = ints(&idx, &[2, 3]);
        let got = f.call(&(x.clone(), i.clone()))?;
        assert_eq!(got.to_vec::<f64>()?, eager(&x, &i)?.to_vec::<f64>()?, "indices {idx:?}");
    }
    assert_eq!(f.trace_count(), 1);
    // an index out of range at run time is the op's error, not a wrong read
    let bad = ints(&[0, 1, 7, 1, 2, 0], &[2, 3]);
    let err = f.call(&(x.clone(), bad)).unwrap_err().to_string();
    assert!(err.contains("out of range") || err.contains("7"), "{err}");
    Ok(())
}

#[test]
fn scatter_nd_strided_slice_and_reverse_are_graph_nodes() -> Result<()> {
    let f = function(|(u, i): &(Tensor, Tensor)| {
        let s = Tensor::scatter_nd(i, u, &[5])?;
        s.strided_slice(&[Slice::new(Some(4), None, -2)])?.reverse(&[0])
    });
    let eager = |u: &Tensor, i: &Tensor| {
        Tensor::scatter_nd(i, u, &[5])?
            .strided_slice(&[Slice::new(Some(4), None, -2)])?
            .reverse(&[0])
    };
    let u = Tensor::vector(&[1.0f64, 2.0, 3.0]);
    for idx in [[4i64, 0, 2], [1, 1, 3]] {
        let i = ints(&idx, &[3, 1]);
        assert_eq!(
            f.call(&(u.clone(), i.clone()))?.to_vec::<f64>()?,
            eager(&u, &i)?.to_vec::<f64>()?
        );
    }
    let listing = f.graph(&(u.clone(), ints(&[0, 1, 2], &[3, 1])))?.to_string();
    for op in [
        "ScatterNd[shape=[5]]",
        "StridedSlice[spec=[(4, -2, 3)]]",
        "ReverseV2[axes=[0]]",
    ] {
        assert!(listing.contains(op), "{op} missing in\n{listing}");
    }
    Ok(())
}

#[test]
fn seeded_draws_repeat_and_generator_draws_are_fresh_at_each_run() -> Result<()> {
    let rng = Mutex::new(Rng::new(7));
    let f = function(move |x: &Tensor| {
        let fresh = rng.lock().unwrap().uniform(&[4], 0.0, 1.0, DType::F64)?;
        let fixed = Tensor::random_normal(&[4], 0.0, 1.0, DType::F64, 11)?;
        Tensor::concat(&[&x.add(&fresh)?, &x.add(&fixed)?], 0)
    });
    let x = Tensor::zeros(&[4], DType::F64);
    let runs: Vec<Vec<f64>> = (0..3).map(|_| f.call(&x)?.to_vec::<f64>()).collect::<Result<_>>()?;
    assert_eq!(f.trace_count(), 1);
    let seeded = Tensor::random_normal(&[4], 0.0, 1.0, DType::F64, 11)?.to_vec::<f64>()?;
    for r in &runs {
        assert_eq!(&r[4..], &seeded[..], "a seeded draw is the same at every run");
        assert!(r[..4].iter().all(|v| (0.0..1.0).contains(v)), "{r:?}");
    }
    // a generator draw is the eager stream's next one at each run (see
    // `traced_rng` for the rest)
    let mut eager = Rng::new(7);
    for r in &runs {
        assert_eq!(r[..4], eager.uniform(&[4], 0.0, 1.0, DType::F64)?.to_vec::<f64>()?);
    }
    assert_ne!(runs[0][..4], runs[1][..4], "a generator draw is fresh at each run");
    assert_ne!(runs[1][..4], runs[2][..4], "a generator draw is fresh at each run");
    let listing = f.graph(&x)?.to_string();
    assert!(
        listing.contains("RandomUniform[f64[4], 0, 1, seed=") && listing.contains("[the generator's next seed]"),
        "{listing}"
    );
    assert!(
        listing.contains("RandomStandardNormal[f64[4], 0, 1, seed=11]"),
        "{listing}"
    );
    Ok(())
}

#[test]
fn a_dropout_layer_draws_a_new_mask_at_each_run() -> Result<()> {
    let layer = Dropout::new(0.5, &mut Rng::new(3))?;
    let f = function(move |x: &Tensor| layer.forward(x, true));
    let x = Tensor::ones(&[64], DType::F32);
    let a = f.call(&x)?.to_vec::<f32>()?;
    let b = f.call(&x)?.to_vec::<f32>()?;
    assert!(a.iter().chain(&b).all(|&v| v == 0.0 || v == 2.0), "{a:?}");
    assert_ne!(a, b);
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn a_strided_spec_replayed_on_a_tensor_it_does_not_fit_is_an_error() -> Result<()> {
    // the graph's spec is resolved for the traced shape; a call with another
    // shape retraces, so the replay check guards only direct misuse: the op
    // itself must refuse a spec that reads outside the tensor
    let x = Tensor::vector(&[1.0f64, 2.0, 3.0]);
    let y = x.strided_slice(&[Slice::new(Some(10), Some(-10), -4)])?;
    assert_eq!(y.to_vec::<f64>()?, vec![3.0]);
    let f = function(|x: &Tensor| x.strided_slice(&[Slice::new(Some(-1), None, -2)]));
    assert_eq!(f.call(&x)?.to_vec::<f64>()?, vec![3.0, 1.0]);
    assert_eq!(
        f.call(&Tensor::vector(&[1.0f64, 2.0, 3.0, 4.0]))?.to_vec::<f64>()?,
        vec![4.0, 2.0]
    );
    assert_eq!(f.trace_count(), 2);
    Ok(())
}
