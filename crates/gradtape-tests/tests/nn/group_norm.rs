//! `GroupNorm` and `UpSampling2D` against Keras 3.15's
//! `GroupNormalization` and `UpSampling2D` (TensorFlow backend, f64;
//! PyTorch's `F.group_norm` agrees; `tests/reference/keras_norm_up.py`
//! prints the numbers below): the output and the gradients of the input
//! and the weights, for 2, 3, 1 (layer norm) and as many groups as
//! channels (instance norm), nearest and bilinear upsampling; then
//! traced against eager, f16 computed in f32, and bad input.

use gradtape::nn::{GroupNorm, Layer, Module, UpSampling2D};
use gradtape::{function, DType, GradientTape, ResizeMethod, Result, Rng, Tensor};

use super::sums_util::{assert_same_outputs, check_against, init, Sums, Want};

type Case = (Box<dyn Layer>, Vec<usize>);

fn layers() -> Result<Vec<Case>> {
    let gn = |c, g| GroupNorm::builder(c, g).dtype(DType::F64);
    Ok(vec![
        (Box::new(gn(6, 2).build()?), vec![2, 3, 4, 6]),
        (Box::new(gn(6, 3).epsilon(1e-5).build()?), vec![2, 5, 6]),
        (Box::new(gn(4, 1).center(false).build()?), vec![3, 4]),
        (Box::new(gn(4, 4).build()?), vec![2, 3, 3, 4]),
        (
            Box::new(UpSampling2D::new([2, 3], ResizeMethod::Nearest)?),
            vec![2, 2, 3, 2],
        ),
        (
            Box::new(UpSampling2D::new([2, 2], ResizeMethod::Bilinear)?),
            vec![1, 3, 4, 2],
        ),
    ])
}

#[test]
fn group_norm_and_upsampling_match_keras() -> Result<()> {
    let want: [(&[usize], Sums, &[Sums]); 6] = [
        // GroupNormalization(groups=2)
        (
            &[2, 3, 4, 6],
            (115.9757943101873, 11.409428246666979),
            &[
                (-1.6653345369377348e-15, 45.640691786377644),
                (2.0213686341329873, 0.2746447426646295),
                (12.104844445731441, 3.2415882679610792),
            ],
        ),
        // GroupNormalization(groups=3, eps 1e-5)
        (
            &[2, 5, 6],
            (48.32720002159536, 1.0642170668802537),
            &[
                (-1.4710455076283324e-15, 3.6305664021994946),
                (1.2093499605485114, 0.7743277584811068),
                (0.5376729129856685, 0.052950789256046044),
            ],
        ),
        // GroupNormalization(groups=1, no center)
        (
            &[3, 4],
            (0.4140762641475335, -0.025628208986677392),
            &[
                (1.5959455978986625e-16, 0.27566011067238044),
                (-0.5413829071826171, -0.5915797177008557),
            ],
        ),
        // GroupNormalization(groups=4) (instance norm)
        (
            &[2, 3, 3, 4],
            (49.63047679592372, 3.46151969756106),
            &[
                (4.440892098500626e-16, 9.328225527540642),
                (1.5089818599909135, 0.2976117759962399),
                (3.5163886396212622, 0.6225921081691388),
            ],
        ),
        // UpSampling2D((2, 3))
        (
            &[2, 4, 9, 2],
            (83.5547163576726, 27.491813898925752),
            &[(12.104844445731437, 0.929739924845661)],
        ),
        // UpSampling2D(2, bilinear)
        (
            &[1, 6, 8, 2],
            (55.7031446993351, 40.96629765658082),
            &[(19.917499803821556, 9.83439964863758)],
        ),
    ];
    let layers = layers()?;
    assert_eq!(layers.len(), want.len());
    for (k, ((layer, shape), (y_shape, y_want, grads_want))) in layers.iter().zip(want).enumerate() {
        let vars = layer.variables();
        for (i, v) in vars.iter().enumerate() {
            v.assign(&init(&v.shape(), 10.0 + i as f64, 0.4).add_scalar(1.0)?)?;
        }
        let x = init(shape, 1.0, 1.5).add_scalar(0.3)?;
        let want = Want {
            shape: Some(y_shape),
            y: y_want,
            grads: grads_want,
        };
        // TensorFlow's ResizeBilinear computes in float32 whatever the
        // dtype (its f64 value is checked against JAX's in ops/tf_image.rs)
        let tol = if k == 5 { 1e-7 } else { 1e-12 };
        check_against(&format!("case {k}"), &|x| layer.call(x), &x, &vars, &want, tol)?;
    }
    Ok(())
}

/// A decoder stage of a U-Net (upsample, group norm) traced as eager;
/// f16 group norm is the f32 one rounded (its statistics in f32); bad
/// input is an error.
#[test]
fn group_norm_traces_handles_f16_and_refuses_bad_input() -> Result<()> {
    let mut rng = Rng::new(7);
    let gn = GroupNorm::builder(4, 2).dtype(DType::F64).build()?;
    gn.variables()[0].assign(&rng.normal(&[4], 1.0, 0.2, DType::F64)?)?;
    let up = UpSampling2D::new([2, 2], ResizeMethod::Bilinear)?;
    let x = rng.normal(&[2, 3, 3, 4], 0.0, 1.0, DType::F64)?;
    let model = std::sync::Arc::new((gn, up));
    let step = {
        let model = model.clone();
        move |x: &Tensor| -> Result<Vec<Tensor>> {
            let (gn, up) = &*model;
            let vars = gn.variables();
            let tape = GradientTape::new();
            let loss = tape.record(|| gn.call(&up.call(x)?)?.tanh()?.square()?.sum_all())?;
            let g = tape.gradient(&loss, &vars)?;
            Ok(std::iter::once(loss).chain(g.into_iter().map(|g| g.unwrap())).collect())
        }
    };
    let eager = step(&x)?;
    let traced = function(step).call(&x)?;
    assert_same_outputs(&eager, &traced, 1e-13);
    // f16: values of 300 (whose squares overflow f16) normalise as in f32
    let big = rng.normal(&[2, 5, 4], 300.0, 40.0, DType::F32)?;
    let g32 = GroupNorm::builder(4, 2).build()?.call(&big)?;
    let g16 = GroupNorm::builder(4, 2)
        .dtype(DType::F16)
        .build()?
        .call(&big.cast(DType::F16)?)?;
    let (a, b) = (g32.to_vec::<f32>()?, g16.cast(DType::F32)?.to_vec::<f32>()?);
    assert!(
        a.iter().zip(&b).all(|(p, q)| q.is_finite() && (p - q).abs() < 0.02),
        "{a:?} vs {b:?}"
    );
    // bad input
    let gn = GroupNorm::builder(4, 2).build()?;
    let e = gn.call(&Tensor::zeros(&[2, 3, 5], DType::F32)).unwrap_err().to_string();
    assert!(e.contains("GroupNorm") && e.contains("[2, 3, 5]"), "{e}");
    assert!(UpSampling2D::new([0, 2], ResizeMethod::Nearest).is_err());
    let e = UpSampling2D::new([2, 2], ResizeMethod::Nearest)?
        .call(&Tensor::zeros(&[2, 3], DType::F32))
        .unwrap_err()
        .to_string();
    assert!(e.contains("UpSampling2D"), "{e}");
    Ok(())
}
