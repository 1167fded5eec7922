//! Keras's `Conv1D` (valid, same, causal; strides, dilations),
//! `DepthwiseConv2D`, `SeparableConv2D`, `Conv3D` and the global poolings against Keras 3.15
//! (TensorFlow backend, f64; `tests/reference/keras_conv_layers.py` prints
//! the numbers below): the output's shape and values and the gradients of
//! the input and of every weight; then causality, traced against eager,
//! and bad options.

use gradtape::nn::{
    Activation, Conv1D, Conv3D, DepthwiseConv2D, GlobalPooling, Layer, Module, PoolKind, SeparableConv2D,
};
use gradtape::{function, DType, GradientTape, Padding, Result, Rng, Tensor};

use super::sums_util::{assert_same_outputs, check_against, init, Sums, Want};

/// A layer and the shape of its input.
type Case = (Box<dyn Layer>, Vec<usize>);

/// The cases, in the reference's order.
fn layers(rng: &mut Rng) -> Result<Vec<Case>> {
    let f64c = |i, f, k| Conv1D::builder(i, f, k).dtype(DType::F64);
    let dw = |m, k| DepthwiseConv2D::builder(3, m, k).dtype(DType::F64);
    Ok(vec![
        (Box::new(f64c(3, 4, 3).build(rng)?), vec![2, 9, 3]),
        (
            Box::new(
                f64c(3, 4, 3)
                    .stride(2)
                    .padding(Padding::Same)
                    .activation(Activation::Tanh)
                    .build(rng)?,
            ),
            vec![2, 9, 3],
        ),
        (
            Box::new(f64c(3, 4, 3).causal(true).dilation_rate(2).build(rng)?),
            vec![2, 9, 3],
        ),
        (
            Box::new(f64c(3, 2, 4).causal(true).use_bias(false).build(rng)?),
            vec![1, 6, 3],
        ),
        (
            Box::new(dw(2, [3, 3]).strides([2, 2]).padding(Padding::Same).build(rng)?),
            vec![2, 5, 6, 3],
        ),
        (
            Box::new(dw(1, [2, 2]).activation(Activation::Relu).build(rng)?),
            vec![1, 4, 4, 3],
        ),
        (
            Box::new(
                SeparableConv2D::builder(3, 4, [3, 3])
                    .depth_multiplier(2)
                    .strides([2, 2])
                    .padding(Padding::Same)
                    .dtype(DType::F64)
                    .build(rng)?,
            ),
            vec![2, 5, 6, 3],
        ),
        (
            Box::new(
                SeparableConv2D::builder(3, 2, [2, 2])
                    .dilations([2, 2])
                    .activation(Activation::Tanh)
                    .use_bias(false)
                    .dtype(DType::F64)
                    .build(rng)?,
            ),
            vec![1, 5, 5, 3],
        ),
        (Box::new(GlobalPooling::new(PoolKind::Avg, 1)?), vec![2, 7, 3]),
        (Box::new(GlobalPooling::new(PoolKind::Max, 1)?), vec![2, 7, 3]),
        (
            Box::new(GlobalPooling::new(PoolKind::Avg, 2)?.keepdims(true)),
            vec![2, 4, 5, 3],
        ),
        (Box::new(GlobalPooling::new(PoolKind::Max, 2)?), vec![2, 4, 5, 3]),
        (Box::new(GlobalPooling::new(PoolKind::Avg, 3)?), vec![1, 3, 4, 2, 3]),
        (
            Box::new(Conv3D::builder(2, 3, [2, 2, 2]).dtype(DType::F64).build(rng)?),
            vec![1, 3, 4, 3, 2],
        ),
        (
            Box::new(
                Conv3D::builder(2, 2, [2, 3, 2])
                    .strides([1, 2, 1])
                    .padding(Padding::Same)
                    .activation(Activation::Relu)
                    .dtype(DType::F64)
                    .build(rng)?,
            ),
            vec![2, 3, 5, 4, 2],
        ),
    ])
}

#[test]
fn convolution_and_pooling_layers_match_keras() -> Result<()> {
    let want: [(&[usize], Sums, &[Sums]); 15] = [
        // Conv1D(4, 3)
        (
            &[2, 7, 4],
            (-16.935180860352578, 0.2939284355741404),
            &[
                (-0.3121839398935825, -2.6448736612650294),
                (21.19908859354495, 13.912703242576356),
                (2.5581039376996184, 0.3033766174944133),
            ],
        ),
        // Conv1D(4, 3, same, stride 2, tanh)
        (
            &[2, 5, 4],
            (-11.307665490546603, -3.72714568378602),
            &[
                (-2.1405531560490276, -3.3497907829983324),
                (2.8603515876018784, -4.7573257524791535),
                (15.298183796219318, 2.3106935441245158),
            ],
        ),
        // Conv1D(4, 3, causal, dilation 2)
        (
            &[2, 9, 4],
            (-22.188638987880022, -2.5014462080567768),
            &[
                (-2.3024984955470322, 4.289861715850597),
                (13.842723169417653, -1.5269162725830892),
                (3.5163886396212614, 0.622592108169139),
            ],
        ),
        // Conv1D(2, 4, causal, no bias)
        (
            &[1, 6, 2],
            (-2.9181680665155083, -1.675439023160358),
            &[
                (-5.066901245233297, -3.4025923395446833),
                (-5.922567492857453, -8.501320055924637),
            ],
        ),
        // DepthwiseConv2D(3, multiplier 2, same, stride 2)
        (
            &[2, 3, 3, 6],
            (-26.21663657363935, -1.8017961424426248),
            &[
                (-1.0653913490583253, -0.6198355836607835),
                (-7.657179782258375, -10.387900667679823),
                (12.423812771179547, 2.7700144309209866),
            ],
        ),
        // DepthwiseConv2D(2, valid, relu)
        (
            &[1, 3, 3, 3],
            (1.2251761436031123, 0.879477977051697),
            &[
                (-1.4214412352268062, -1.9190643664224314),
                (-2.2348878764696813, 1.2190788895743832),
                (5.235086935527743, 0.5772001404307414),
            ],
        ),
        // SeparableConv2D(4, 3, multiplier 2, same, stride 2)
        (
            &[2, 3, 3, 4],
            (1.3306018462018983, -0.1678284005312744),
            &[
                (-0.0714177477983069, 0.17760050596290888),
                (5.365827720707044, 0.7746877951582462),
                (-9.604185053468928, -1.0051536186386993),
                (3.5163886396212614, 0.622592108169139),
            ],
        ),
        // SeparableConv2D(2, 2, dilation 2, tanh, no bias)
        (
            &[1, 3, 3, 2],
            (-1.0624736471058112, -0.643894912990622),
            &[
                (2.9245658460188357, 0.3692752786548892),
                (-4.404638682704852, -1.7354374872796963),
                (2.719212509377901, 0.5642287664497879),
            ],
        ),
        // GlobalAveragePooling1D
        (
            &[2, 3],
            (0.5761542285516242, 0.05994844691330299),
            &[(1.4628668350160825, 0.2412812405422643)],
        ),
        // GlobalMaxPooling1D
        (
            &[2, 3],
            (5.768420572251386, 1.387180907003531),
            &[(1.4628668350160825, -0.37133420848499216)],
        ),
        // GlobalAveragePooling2D(keepdims)
        (
            &[2, 1, 1, 3],
            (0.04813617344703144, -0.028344511738971942),
            &[(1.4628668350160825, 0.02603355268710679)],
        ),
        // GlobalMaxPooling2D
        (
            &[2, 3],
            (5.911956371210708, 1.4424324453506157),
            &[(1.4628668350160825, 0.3580203013843746)],
        ),
        // GlobalAveragePooling3D
        (
            &[1, 3],
            (0.1550016160806819, 0.015432443696093149),
            &[(0.2985027474418894, 0.016824495117158035)],
        ),
        // Conv3D(3, 2)
        (
            &[1, 2, 3, 2, 3],
            (-12.903950191271116, -5.8217378667039545),
            &[
                (-1.1413876776761291, -13.172087758066127),
                (13.089537824136812, 38.39405458341932),
                (19.173035429838695, 1.8847066259601428),
            ],
        ),
        // Conv3D(2, (2, 3, 2), same, strides (1, 2, 1), relu)
        (
            &[2, 3, 3, 4, 2],
            (143.47802382447134, 80.73714054200761),
            &[
                (-3.410447313327422, -27.953506854954192),
                (-6.340646364745824, 2.429047546946925),
                (29.461953322875374, 1.5821612344562819),
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

/// A causal, dilated `Conv1D`: output `t` does not move when inputs after
/// `t` do; a small temporal network of the layers (causal convolutions,
/// a depthwise convolution on a 2-D map, global pooling) traced as eager.
#[test]
fn causal_convolutions_look_back_and_trace_as_eager() -> Result<()> {
    let mut rng = Rng::new(3);
    let conv = Conv1D::builder(2, 3, 3)
        .causal(true)
        .dilation_rate(2)
        .dtype(DType::F64)
        .build(&mut rng)?;
    let x = rng.normal(&[1, 8, 2], 0.0, 1.0, DType::F64)?;
    let y = conv.call(&x)?;
    assert_eq!(y.shape(), &[1, 8, 3]);
    // change steps 5.. of the input: outputs 0..5 stay
    let later = Tensor::concat(&[&x.narrow(1, 0, 5)?, &x.narrow(1, 5, 3)?.mul_scalar(7.0)?], 1)?;
    let y2 = conv.call(&later)?;
    assert_eq!(
        y.narrow(1, 0, 5)?.to_vec::<f64>()?,
        y2.narrow(1, 0, 5)?.to_vec::<f64>()?
    );
    assert_ne!(
        y.narrow(1, 5, 1)?.to_vec::<f64>()?,
        y2.narrow(1, 5, 1)?.to_vec::<f64>()?
    );

    let tcn = Conv1D::builder(3, 4, 2)
        .causal(true)
        .dilation_rate(3)
        .activation(Activation::Relu)
        .dtype(DType::F64)
        .build(&mut rng)?;
    let dw = DepthwiseConv2D::builder(4, 2, [2, 2])
        .padding(Padding::Same)
        .dtype(DType::F64)
        .build(&mut rng)?;
    let pool = GlobalPooling::new(PoolKind::Max, 2)?;
    let mut vars = conv.variables();
    vars.extend(tcn.variables());
    vars.extend(dw.variables());
    let model = std::sync::Arc::new((conv, tcn, dw, pool, vars));
    let step = {
        let model = model.clone();
        move |x: &Tensor| -> Result<Vec<Tensor>> {
            let (conv, tcn, dw, pool, vars) = &*model;
            let tape = GradientTape::new();
            let loss = tape.record(|| {
                let h = tcn.call(&conv.call(x)?)?; // [1, 8, 4]
                let map = h.reshape(&[1, 2, 4, 4])?;
                pool.call(&dw.call(&map)?)?.square()?.sum_all()
            })?;
            let g = tape.gradient(&loss, vars)?;
            Ok(std::iter::once(loss).chain(g.into_iter().map(|g| g.unwrap())).collect())
        }
    };
    let eager = step(&x)?;
    let traced = function(step).call(&x)?;
    assert_eq!(eager.len(), 7);
    assert_same_outputs(&eager, &traced, 1e-13);
    Ok(())
}

/// Bad options and inputs are errors naming the layer.
#[test]
fn convolution_layer_options_are_checked() -> Result<()> {
    let mut rng = Rng::new(4);
    let e = Conv1D::builder(2, 3, 3)
        .strides([1, 2])
        .build(&mut rng)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("conv1d") && e.contains("stride"), "{e}");
    assert!(Conv1D::builder(2, 3, 0).build(&mut rng).is_err());
    assert!(Conv1D::builder(2, 3, 3).dilation_rate(0).build(&mut rng).is_err());
    assert!(DepthwiseConv2D::builder(2, 0, [3, 3]).build(&mut rng).is_err());
    let e = SeparableConv2D::builder(2, 3, [3, 3])
        .depth_multiplier(0)
        .build(&mut rng)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("separable_conv2d") && e.contains("depth_multiplier"), "{e}");
    let e = GlobalPooling::new(PoolKind::Avg, 4).err().unwrap().to_string();
    assert!(e.contains("GlobalPooling"), "{e}");
    let conv = Conv1D::builder(2, 3, 3).build(&mut rng)?;
    let e = conv
        .call(&Tensor::zeros(&[1, 5, 4], DType::F32))
        .unwrap_err()
        .to_string();
    assert!(e.contains("Conv1D") && e.contains("[1, 5, 4]"), "{e}");
    // a kernel longer than the (valid) input: no output steps, or an error, never a panic
    if let Ok(y) = conv.call(&Tensor::zeros(&[1, 2, 2], DType::F32)) {
        assert_eq!(y.shape(), &[1, 0, 3]);
    }
    let e = GlobalPooling::new(PoolKind::Max, 2)?
        .call(&Tensor::zeros(&[2, 3, 4], DType::F32))
        .unwrap_err()
        .to_string();
    assert!(e.contains("GlobalPooling") && e.contains("rank 4"), "{e}");
    Ok(())
}

/// A separable and a 3-D convolution in a traced training step: the loss
/// and every gradient are the eager step's.
#[test]
fn separable_and_3d_convolutions_trace_as_eager() -> Result<()> {
    let mut rng = Rng::new(5);
    let sep = SeparableConv2D::builder(2, 3, [3, 3])
        .depth_multiplier(2)
        .strides([2, 1])
        .padding(Padding::Same)
        .activation(Activation::Tanh)
        .dtype(DType::F64)
        .build(&mut rng)?;
    let c3 = Conv3D::builder(3, 2, [2, 2, 2])
        .padding(Padding::Same)
        .dtype(DType::F64)
        .build(&mut rng)?;
    let mut vars = sep.variables();
    vars.extend(c3.variables());
    let x = rng.normal(&[2, 6, 5, 2], 0.0, 1.0, DType::F64)?;
    let model = std::sync::Arc::new((sep, c3, vars));
    let step = {
        let model = model.clone();
        move |x: &Tensor| -> Result<Vec<Tensor>> {
            let (sep, c3, vars) = &*model;
            let tape = GradientTape::new();
            let loss = tape.record(|| {
                let h = sep.call(x)?; // [2, 3, 5, 3]
                c3.call(&h.reshape(&[1, 2, 3, 5, 3])?)?.square()?.sum_all()
            })?;
            let g = tape.gradient(&loss, vars)?;
            Ok(std::iter::once(loss).chain(g.into_iter().map(|g| g.unwrap())).collect())
        }
    };
    let eager = step(&x)?;
    let traced = function(step).call(&x)?;
    assert_eq!(eager.len(), 1 + 5);
    assert_same_outputs(&eager, &traced, 1e-13);
    Ok(())
}
