//! Keras's grouped convolution layers (`groups=` on `Conv1D`, `Conv2D`,
//! `Conv3D`) against Keras 3.15 with the same weights (TensorFlow backend,
//! f64; `tests/reference/keras_conv_groups.py` prints the numbers below):
//! the output's shape and values and the gradients of the input and of
//! every weight; then a grouped model traced as eager, and bad options.

use gradtape::nn::{Activation, Conv1D, Conv2D, Conv3D, Layer, Module};
use gradtape::{function, DType, GradientTape, Padding, Result, Rng, Tensor};

use super::sums_util::{assert_same_outputs, check_against, init, Sums, Want};

/// A layer and the shape of its input.
type Case = (Box<dyn Layer>, Vec<usize>);

/// The cases, in the reference's order.
fn layers(rng: &mut Rng) -> Result<Vec<Case>> {
    let c2 = |i, f, k| Conv2D::builder(i, f, k).dtype(DType::F64);
    let c1 = |i, f, k| Conv1D::builder(i, f, k).dtype(DType::F64);
    Ok(vec![
        (Box::new(c2(4, 6, [3, 3]).groups(2).build(rng)?), vec![2, 5, 5, 4]),
        (
            Box::new(
                c2(8, 8, [2, 3])
                    .groups(4)
                    .strides([2, 2])
                    .padding(Padding::Same)
                    .activation(Activation::Relu)
                    .build(rng)?,
            ),
            vec![1, 6, 7, 8],
        ),
        (
            Box::new(
                c2(6, 4, [2, 2])
                    .groups(2)
                    .dilations([2, 2])
                    .use_bias(false)
                    .build(rng)?,
            ),
            vec![1, 6, 6, 6],
        ),
        (
            Box::new(
                c1(6, 6, 3)
                    .groups(3)
                    .padding(Padding::Same)
                    .dilation_rate(2)
                    .build(rng)?,
            ),
            vec![2, 9, 6],
        ),
        (Box::new(c1(4, 4, 2).groups(2).causal(true).build(rng)?), vec![1, 7, 4]),
        (
            Box::new(
                Conv3D::builder(4, 4, [2, 2, 2])
                    .groups(2)
                    .dtype(DType::F64)
                    .build(rng)?,
            ),
            vec![1, 3, 4, 3, 4],
        ),
    ])
}

#[test]
fn grouped_convolution_layers_match_keras() -> Result<()> {
    let want: [(&[usize], Sums, &[Sums]); 6] = [
        // Conv2D(6, 3, groups 2)
        (
            &[2, 3, 3, 6],
            (-18.50594993222876, -10.290593747298175),
            &[
                (-4.059990766747445, 0.7706232201043042),
                (-73.5106659210555, -50.26226863726859),
                (12.423812771179547, 2.7700144309209866),
            ],
        ),
        // Conv2D(8, (2, 3), groups 4, same, strides 2, relu)
        (
            &[1, 3, 4, 8],
            (8.522683085089474, 2.2173883573715347),
            &[
                (-0.04541589532140966, -0.5828202678547123),
                (26.207348844087537, -20.306106905754667),
                (10.030450666029418, 5.165517563510769),
            ],
        ),
        // Conv2D(4, 2, groups 2, dilation 2, no bias)
        (
            &[1, 4, 4, 4],
            (-14.210801185667796, -0.5549376562189163),
            &[
                (0.015270857576886065, -0.20584548033847927),
                (20.964560138977834, -4.318101260633312),
            ],
        ),
        // Conv1D(6, 3, groups 3, same, dilation 2)
        (
            &[2, 9, 6],
            (-22.18601067435505, -2.3295640746736557),
            &[
                (3.3285245454108052, -7.781347721460008),
                (-15.475757210402287, -7.447877430419894),
                (12.423812771179547, 2.7700144309209866),
            ],
        ),
        // Conv1D(4, 2, groups 2, causal)
        (
            &[1, 7, 4],
            (-10.361418370057766, -6.818950771205779),
            &[
                (0.6884776157498308, 1.0836761723287156),
                (2.54301603746338, 0.470651498931466),
                (19.238541447262932, 2.9104464147902998),
            ],
        ),
        // Conv3D(4, 2, groups 2)
        (
            &[1, 2, 3, 2, 4],
            (-8.544643277333941, 9.018430013669523),
            &[
                (-1.3018897353118284, -4.100080336016332),
                (-6.803736796524668, 5.219863073899904),
                (9.615487027221096, 1.3106781374348984),
            ],
        ),
    ];
    let layers = layers(&mut Rng::new(0))?;
    assert_eq!(layers.len(), want.len());
    for (k, ((layer, shape), (y_shape, y_want, grads_want))) in layers.iter().zip(want).enumerate() {
        let vars = layer.variables();
        for (i, v) in vars.iter().enumerate() {
            v.assign(&init(&v.shape(), 10.0 + i as f64, 0.4))?;
        }
        let x = init(shape, 1.0, 1.0);
        let want = Want {
            shape: Some(y_shape),
            y: y_want,
            grads: grads_want,
        };
        check_against(&format!("case {k}"), &|x| layer.call(x), &x, &vars, &want, 1e-12)?;
    }
    Ok(())
}

/// A model of grouped layers (2-D, then 1-D and 3-D views of its
/// features) in a traced training step: the loss and every gradient are
/// the eager step's.
#[test]
fn a_grouped_model_traces_as_eager() -> Result<()> {
    let mut rng = Rng::new(7);
    let a = Conv2D::builder(4, 8, [3, 3])
        .groups(2)
        .padding(Padding::Same)
        .activation(Activation::Tanh)
        .dtype(DType::F64)
        .build(&mut rng)?;
    let b = Conv2D::builder(8, 8, [2, 2])
        .groups(4)
        .strides([2, 2])
        .dtype(DType::F64)
        .build(&mut rng)?;
    let c = Conv1D::builder(8, 4, 3)
        .groups(2)
        .causal(true)
        .dtype(DType::F64)
        .build(&mut rng)?;
    let d = Conv3D::builder(4, 2, [2, 1, 1])
        .groups(2)
        .dtype(DType::F64)
        .build(&mut rng)?;
    let mut vars = a.variables();
    for l in [&b as &dyn Module, &c, &d] {
        vars.extend(l.variables());
    }
    let x = rng.normal(&[2, 6, 6, 4], 0.0, 1.0, DType::F64)?;
    let model = std::sync::Arc::new((a, b, c, d, vars));
    let step = {
        let model = model.clone();
        move |x: &Tensor| -> Result<Vec<Tensor>> {
            let (a, b, c, d, vars) = &*model;
            let tape = GradientTape::new();
            let loss = tape.record(|| {
                let h = b.call(&a.call(x)?)?; // [2, 3, 3, 8]
                let h = c.call(&h.reshape(&[2, 9, 8])?)?; // [2, 9, 4]
                d.call(&h.reshape(&[2, 3, 3, 1, 4])?)?.square()?.sum_all()
            })?;
            let g = tape.gradient(&loss, vars)?;
            Ok(std::iter::once(loss).chain(g.into_iter().map(|g| g.unwrap())).collect())
        }
    };
    let eager = step(&x)?;
    let traced = function(step).call(&x)?;
    assert_eq!(eager.len(), 1 + 8);
    assert_same_outputs(&eager, &traced, 1e-13);
    Ok(())
}

/// Groups that do not divide the channels or the filters, or zero, are
/// errors naming the layer; so is an input of the wrong channel count.
#[test]
fn grouped_layer_options_are_checked() -> Result<()> {
    let mut rng = Rng::new(8);
    let msg = |r: Result<Conv2D>| r.err().expect("an error").to_string();
    let e = msg(Conv2D::builder(6, 4, [3, 3]).groups(4).build(&mut rng));
    assert!(
        e.contains("conv2d") && e.contains("groups=4") && e.contains("6 input channels"),
        "{e}"
    );
    let e = msg(Conv2D::builder(6, 4, [3, 3]).groups(3).build(&mut rng));
    assert!(e.contains("conv2d") && e.contains("4 filters"), "{e}");
    assert!(Conv2D::builder(6, 4, [3, 3]).groups(0).build(&mut rng).is_err());
    let e = Conv1D::builder(4, 6, 3)
        .groups(4)
        .build(&mut rng)
        .err()
        .expect("an error")
        .to_string();
    assert!(e.contains("conv1d") && e.contains("groups=4"), "{e}");
    let e = Conv3D::builder(4, 6, [2, 2, 2])
        .groups(4)
        .build(&mut rng)
        .err()
        .expect("an error")
        .to_string();
    assert!(e.contains("conv3d") && e.contains("groups=4"), "{e}");
    // the kernel is [3, 3, 3, 4]: 6 input channels, not 9
    let conv = Conv2D::builder(6, 4, [3, 3]).groups(2).build(&mut rng)?;
    assert_eq!(conv.kernel().shape(), vec![3, 3, 3, 4]);
    let e = conv
        .call(&Tensor::zeros(&[1, 5, 5, 9], DType::F32))
        .unwrap_err()
        .to_string();
    assert!(e.contains("Conv2D") && e.contains("[1, 5, 5, 9]"), "{e}");
    Ok(())
}
