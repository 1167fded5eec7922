//! A `Dense` layer with each of Keras's activations that `nn::Activation`
//! gained with `activation_more.rs` (and `softsign`, `log_sigmoid`,
//! `log_softmax`) against Keras 3's `Dense(4, activation=name)` in f64 on
//! the same weights, eager and traced: `tests/data/keras_dense_activations.txt`,
//! printed by `tests/reference/tf_activations_more.py`.

use gradtape::nn::{Activation, Dense, Layer};
use gradtape::{function, Result, Tensor};

use super::tf_util::floats;

const DATA: &str = include_str!("../data/keras_dense_activations.txt");

/// Keras's name (and the script's `relu_args`) as an `Activation`.
fn activation(name: &str) -> Activation {
    match name {
        "hard_sigmoid" => Activation::HardSigmoid,
        "hard_silu" | "hard_swish" => Activation::HardSilu,
        "mish" => Activation::Mish,
        "celu" => Activation::Celu(1.0),
        "exponential" => Activation::Exponential,
        "hard_tanh" => Activation::HardTanh,
        "soft_shrink" => Activation::SoftShrink(0.5),
        "hard_shrink" => Activation::HardShrink(0.5),
        "tanh_shrink" => Activation::TanhShrink,
        "glu" => Activation::Glu,
        "sparse_plus" => Activation::SparsePlus,
        "squareplus" => Activation::Squareplus(4.0),
        "softsign" => Activation::Softsign,
        "log_sigmoid" => Activation::LogSigmoid,
        "log_softmax" => Activation::LogSoftmax,
        "relu_args" => Activation::ReluWith {
            negative_slope: 0.25,
            max_value: Some(2.5),
            threshold: 0.5,
        },
        _ => panic!("no activation {name}"),
    }
}

#[test]
fn dense_with_each_new_keras_activation_matches_keras() -> Result<()> {
    let mut lines = DATA.lines().map(|l| l.split('|').collect::<Vec<_>>());
    let mut take = |what: &str| {
        let l = lines.next().unwrap();
        assert_eq!(l[0], what);
        floats(l[1]).unwrap()
    };
    let x = Tensor::from_vec(take("x"), &[3, 5])?;
    let kernel = Tensor::from_vec(take("kernel"), &[5, 4])?;
    let bias = Tensor::vector(&take("bias"));
    let mut checked = 0;
    for l in lines {
        let (name, want) = (l[0], floats(l[2]).unwrap());
        let layer = std::sync::Arc::new(Dense::from_weights(
            "fc",
            kernel.clone(),
            Some(bias.clone()),
            activation(name),
        )?);
        let eager = layer.forward(&x, false)?;
        let traced = {
            let layer = layer.clone();
            function(move |x: &Tensor| layer.forward(x, false)).call(&x)?
        };
        let shape: Vec<usize> = l[1].split('x').map(|d| d.parse().unwrap()).collect();
        for (run, y) in [("eager", &eager), ("traced", &traced)] {
            assert_eq!(y.shape(), &shape[..], "{name} {run}");
            for (i, (&a, &b)) in y.to_vec::<f64>()?.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-13 * b.abs().max(1.0),
                    "{name} {run} #{i}: got {a:e}, Keras {b:e}"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * (16 * 12 + 6));
    Ok(())
}

#[test]
fn bad_activation_parameters_are_errors_naming_the_op() -> Result<()> {
    let x = Tensor::vector(&[1.0f64, -2.0, 3.0]);
    for (act, op) in [
        (Activation::Celu(0.0), "celu"),
        (Activation::Celu(f64::NAN), "celu"),
        (Activation::SoftShrink(-0.5), "soft_shrink"),
        (Activation::HardShrink(f64::NAN), "hard_shrink"),
        (Activation::Squareplus(-1.0), "squareplus"),
        (
            Activation::ReluWith {
                negative_slope: -0.1,
                max_value: None,
                threshold: 0.0,
            },
            "relu",
        ),
        (
            Activation::ReluWith {
                negative_slope: 0.0,
                max_value: Some(-1.0),
                threshold: 0.0,
            },
            "relu",
        ),
        (
            Activation::ReluWith {
                negative_slope: 0.0,
                max_value: None,
                threshold: -1.0,
            },
            "relu",
        ),
        (Activation::Glu, "glu"),
    ] {
        let e = act.apply(&x).expect_err(op).to_string();
        assert!(e.contains(op), "{act:?}: {e}");
    }
    assert!(x
        .hard_tanh_range(1.0, -1.0)
        .unwrap_err()
        .to_string()
        .contains("hard_tanh"));
    assert!(Tensor::vector(&[1i32, 2])
        .mish()
        .unwrap_err()
        .to_string()
        .contains("mish"));
    Ok(())
}
