//! `TransformerBlock::forward_with_padding`: a padded batch gives, at its
//! real positions, what each sequence gives alone (causal blocks and
//! bidirectional ones, f64), whatever the padding holds; no gradient
//! reaches the padding from the real positions; traced as eager; first and
//! second derivatives against finite differences; bad masks are errors.

use gradtape::nn::{Layer, TransformerBlock};
use gradtape::{check_gradients, function, CheckOptions, DType, GradientTape, Result, Rng, Tensor};

/// Two sequences of 5 positions, the second padded after 3.
fn batch(rng: &mut Rng) -> Result<(Tensor, Tensor, [usize; 2])> {
    let x = rng.normal(&[2, 5, 6], 0.0, 1.0, DType::F64)?;
    let lens = [5, 3];
    let real: Vec<bool> = (0..10).map(|i| i % 5 < lens[i / 5]).collect();
    Ok((x, Tensor::from_vec(real, &[2, 5])?, lens))
}

fn close(a: &Tensor, b: &Tensor, what: &str) -> Result<()> {
    let (a, b) = (a.to_vec::<f64>()?, b.to_vec::<f64>()?);
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{what}[{i}]: {x} vs {y}");
    }
    Ok(())
}

#[test]
fn padded_positions_change_nothing_at_the_real_ones() -> Result<()> {
    for causal in [false, true] {
        let mut rng = Rng::new(3);
        let block = TransformerBlock::builder(6, 2, 12)
            .causal(causal)
            .dtype(DType::F64)
            .build(&mut rng)?;
        let (x, real, lens) = batch(&mut rng)?;
        let y = block.forward_with_padding(&x, &real, false)?;
        // each sequence alone, unpadded
        for (s, &len) in lens.iter().enumerate() {
            let alone = block.forward(&x.narrow(0, s, 1)?.narrow(1, 0, len)?, false)?;
            let padded = y.narrow(0, s, 1)?.narrow(1, 0, len)?;
            close(&padded, &alone, &format!("causal {causal}, sequence {s}"))?;
        }
        // other values in the padding: the same real outputs
        let noise = rng.normal(&[2, 5, 6], 0.0, 100.0, DType::F64)?;
        let hide = real.logical_not()?.expand_dims(2)?;
        let x2 = Tensor::where_(&hide, &noise, &x)?;
        let y2 = block.forward_with_padding(&x2, &real, false)?;
        close(
            &y2.narrow(0, 1, 1)?.narrow(1, 0, 3)?,
            &y.narrow(0, 1, 1)?.narrow(1, 0, 3)?,
            "other padding",
        )?;
        // no gradient reaches the padding from the real positions
        let tape = GradientTape::new();
        let weights = real.cast(DType::F64)?.expand_dims(2)?;
        let loss = tape.record(|| {
            tape.watch(&x);
            block
                .forward_with_padding(&x, &real, false)?
                .square()?
                .mul(&weights)?
                .sum_all()
        })?;
        let g = tape.gradient(&loss, &x)?.unwrap();
        let g_pad = g.narrow(0, 1, 1)?.narrow(1, 3, 2)?.to_vec::<f64>()?;
        assert!(g_pad.iter().all(|&v| v == 0.0), "causal {causal}: {g_pad:?}");
        assert!(g
            .narrow(0, 1, 1)?
            .narrow(1, 0, 3)?
            .to_vec::<f64>()?
            .iter()
            .any(|&v| v != 0.0));
        // traced: the same loss and gradient
        let step = {
            let block = TransformerBlock::builder(6, 2, 12)
                .causal(causal)
                .dtype(DType::F64)
                .build(&mut Rng::new(3))?;
            let (real, weights) = (real.clone(), weights.clone());
            function(move |x: &Tensor| {
                let tape = GradientTape::new();
                let loss = tape.record(|| {
                    tape.watch(x);
                    block
                        .forward_with_padding(x, &real, false)?
                        .square()?
                        .mul(&weights)?
                        .sum_all()
                })?;
                Ok((loss.clone(), tape.gradient(&loss, x)?.unwrap()))
            })
        };
        let (tl, tg) = step.call(&x)?;
        close(&tl, &loss, "traced loss")?;
        close(&tg, &g, "traced gradient")?;
    }
    Ok(())
}

#[test]
fn padded_blocks_differentiate_and_refuse_bad_masks() -> Result<()> {
    let mut rng = Rng::new(5);
    let block = TransformerBlock::builder(4, 2, 6)
        .causal(true)
        .dtype(DType::F64)
        .build(&mut rng)?;
    let x = rng.normal(&[2, 3, 4], 0.0, 1.0, DType::F64)?;
    let real = Tensor::from_vec(vec![true, true, true, true, false, false], &[2, 3])?;
    let f = |t: &[Tensor]| block.forward_with_padding(&t[0], &real, false)?.tanh()?.sum_all();
    let report = check_gradients(f, std::slice::from_ref(&x), &CheckOptions::default())?;
    assert!(report.compared > 0, "{report:?}");
    for bad in [
        Tensor::from_vec(vec![true; 3], &[1, 3])?,
        Tensor::ones(&[2, 3], DType::F64),
        Tensor::from_vec(vec![true; 18], &[2, 3, 3])?,
    ] {
        let e = block.forward_with_padding(&x, &bad, false).unwrap_err();
        assert!(e.to_string().contains("TransformerBlock"), "{e}");
    }
    Ok(())
}
