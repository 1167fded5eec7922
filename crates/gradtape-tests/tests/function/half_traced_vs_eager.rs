//! f16 and bf16 through a traced, compiled function (the fused kernels of
//! half ops, `kernels/cpu/half_block.rs`) against the same closure run
//! eagerly, bit for bit: a chain of elementwise ops with a broadcast bias,
//! a cast through f32 and back, `maximum` and a division, and the chain's
//! gradient, at zeros of both signs, the largest finite halves, subnormals,
//! infinities and NaN, and on an empty tensor. Eager rounds each op's
//! result to the half type; a fused kernel must round at the same places.

use gradtape::{function, DType, GradientTape, Result, Tensor};

fn half_chain(x: &Tensor, b: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let (y, z) = tape.record(|| {
        tape.watch(x);
        let a = x.add(b)?.mul(x)?;
        let c = a.exp()?.tanh()?.add(&a.sigmoid()?)?.relu()?;
        let d = c.mul_scalar(3.0)?.sub(&x.abs()?.sqrt()?)?;
        let e = d.cast(DType::F32)?.mul_scalar(0.5)?.cast(x.dtype())?;
        let f = e.maximum(x)?.div(&b.add_scalar(2.0)?)?;
        Ok((f.clone(), f.sum_all()?))
    })?;
    let g = tape.gradient(&z, x)?.expect("g");
    Ok(vec![y, z, g])
}

#[test]
fn halves_through_a_compiled_function_round_as_eager() {
    for dt in [DType::F16, DType::BF16] {
        let vals: Vec<f64> = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            3.0,
            -2.5,
            65504.0,
            -65504.0,
            1e-5,
            6e-8,
            -6e-8,
            10.0,
            11.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            0.1,
            0.2,
            0.3,
            7.7,
            -7.7,
            100.0,
            1e4,
        ];
        let n = vals.len();
        let x = Tensor::from_vec(vals, &[2, n / 2]).unwrap().cast(dt).unwrap();
        let b = Tensor::from_vec((0..n / 2).map(|i| 0.25 * i as f64 - 1.0).collect(), &[n / 2])
            .unwrap()
            .cast(dt)
            .unwrap();
        let want = half_chain(&x, &b).unwrap();
        let f = function(|(x, b): &(Tensor, Tensor)| half_chain(x, b));
        let got = f.call(&(x.clone(), b.clone())).unwrap();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.dtype(), w.dtype());
            let (gv, wv) = (g.to_vec_f64(), w.to_vec_f64());
            for (i, (a, c)) in gv.iter().zip(&wv).enumerate() {
                assert!(
                    a.to_bits() == c.to_bits() || (a.is_nan() && c.is_nan()),
                    "{dt:?} out {k} [{i}]: {a} vs {c}\n{gv:?}\n{wv:?}"
                );
            }
        }
        // empty
        let e = Tensor::zeros(&[0, 3], dt);
        let eb = Tensor::zeros(&[3], dt);
        let want = half_chain(&e, &eb).unwrap();
        let got = f.call(&(e.clone(), eb.clone())).unwrap();
        assert_eq!(got[0].shape(), want[0].shape());
        assert_eq!(got[1].to_vec_f64(), want[1].to_vec_f64());
    }
}
