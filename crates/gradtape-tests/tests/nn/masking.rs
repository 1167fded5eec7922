//! Masks in the recurrent layers (Keras's `mask=`, `Embedding(mask_zero)`,
//! `Masking`) and the 1-D and 3-D pooling layers, against Keras 3.15
//! (TensorFlow backend, CPU): `tests/reference/keras_masking.py` prints
//! the numbers below (float64, but for the 3-D pools, which TensorFlow
//! computes in float32 only and which run here in f32 too). Each case's
//! output and the gradients of the input and of every weight (Keras's
//! order); then a masked step traced against eager, a masked GRU under the
//! finite-difference checker, what a mask does to the steps it hides, and
//! bad masks and sizes.

use gradtape::nn::{
    Bidirectional, Embedding, Layer, Masking, Merge, Module, Pool1D, Pool3D, PoolKind, RecurrentBuilder, SequenceLayer,
    GRU, LSTM,
};
use gradtape::{
    check_gradients, function, CheckOptions, DType, DataFormat, GradientTape, Padding, Result, Rng, Tensor,
};

use super::sums_util::{assert_same_outputs, check_against, close_sums, init, sin_weighted, wsum, Sums, Want};

/// A case as the script prints it: the output's shape, its sums, the
/// gradients' sums.
type Case = (&'static [usize], Sums, &'static [Sums]);

/// The script's mask of the `[2, 5, 3]` inputs: a right-padded row, and a
/// row with holes at its start, in its middle and at its end.
fn mask() -> Tensor {
    let m = [true, true, true, false, false, false, true, true, false, true];
    Tensor::from_vec(m.to_vec(), &[2, 5]).unwrap()
}

fn f64_layer<L>(b: RecurrentBuilder<L>) -> RecurrentBuilder<L> {
    b.dtype(DType::F64)
}

/// Sets `vars` to the script's weights, `init(shape, 10 + i, 0.4)`.
fn set_weights(vars: &[gradtape::Variable]) -> Result<()> {
    for (i, v) in vars.iter().enumerate() {
        v.assign(&init(&v.shape(), 10.0 + i as f64, 0.4))?;
    }
    Ok(())
}

/// The recurrent cases, in the script's order.
fn recurrent_layers(rng: &mut Rng) -> Result<Vec<Box<dyn SequenceLayer>>> {
    let lstm = |seq: bool, back: bool, rng: &mut Rng| {
        f64_layer(LSTM::builder(3, 4))
            .return_sequences(seq)
            .go_backwards(back)
            .build(rng)
    };
    let gru = |units, seq: bool, back: bool, rng: &mut Rng| {
        f64_layer(GRU::builder(3, units))
            .return_sequences(seq)
            .go_backwards(back)
            .build(rng)
    };
    Ok(vec![
        Box::new(lstm(false, false, rng)?),
        Box::new(lstm(true, false, rng)?),
        Box::new(lstm(true, true, rng)?),
        Box::new(lstm(false, true, rng)?),
        Box::new(gru(4, true, false, rng)?),
        Box::new(gru(4, false, true, rng)?),
        Box::new(Bidirectional::new(
            lstm(true, false, rng)?,
            lstm(true, false, rng)?,
            Merge::Concat,
        )),
        Box::new(Bidirectional::new(
            gru(3, false, false, rng)?,
            gru(3, false, false, rng)?,
            Merge::Sum,
        )),
        Box::new(Bidirectional::new(
            gru(3, true, false, rng)?,
            gru(3, true, false, rng)?,
            Merge::Mul,
        )),
    ])
}

#[test]
fn masked_recurrent_layers_match_keras() -> Result<()> {
    let want: [Case; 9] = [
        // LSTM(4)
        (
            &[2, 4],
            (0.24067354263553364, -0.015901567131265913),
            &[
                (0.3735135002678089, 0.20712717121851956),
                (0.27309523527878105, 0.28084636032412114),
                (0.31219216497641233, -0.006622764840654414),
                (0.8578370343650691, 0.6191391365772885),
            ],
        ),
        // LSTM(4, return_sequences)
        (
            &[2, 5, 4],
            (3.1480547138055446, 1.352349409842533),
            &[
                (1.6176757317085633, 0.9112392049665852),
                (5.492198920254592, 3.1595562192564977),
                (1.999631897593692, -0.08164542302168151),
                (5.497891000138405, 3.770202662878559),
            ],
        ),
        // LSTM(4, return_sequences, go_backwards)
        (
            &[2, 5, 4],
            (0.7315316782891421, 0.14508559700085397),
            &[
                (1.1289530161670973, 0.4436215157439697),
                (1.4317810472650074, 1.1636602318609608),
                (0.2717059309630649, 0.12935493252174846),
                (2.9038327935844146, 2.045326269458479),
            ],
        ),
        // LSTM(4, go_backwards)
        (
            &[2, 4],
            (0.8832887760977618, 0.2351607131696726),
            &[
                (0.5045448301876121, 0.33426372697665707),
                (1.6065116314415961, 0.519884779132236),
                (-0.08381368838225128, 0.1480750438633181),
                (1.0524336928351552, 0.7594104612944722),
            ],
        ),
        // GRU(4, return_sequences)
        (
            &[2, 5, 4],
            (8.648252830886943, 3.7457959073267317),
            &[
                (-1.673663598480618, -1.337233576313165),
                (10.771093428960029, 8.380373018476865),
                (1.667732995441085, 0.5189157843528356),
                (15.727133723002774, 13.145162571702842),
            ],
        ),
        // GRU(4, go_backwards)
        (
            &[2, 4],
            (1.6135337397016507, 0.5317339684300183),
            &[
                (-0.3318004823882809, -0.23045180661233858),
                (5.114419329501143, 2.8055838625773895),
                (1.6237597650336562, 0.41973573232408995),
                (4.3195982381117, 3.495543667665266),
            ],
        ),
        // Bidirectional(LSTM(4, return_sequences), concat)
        (
            &[2, 5, 8],
            (0.3354126972657727, -0.09462182228594299),
            &[
                (0.18593968125572924, 0.10974988612796088),
                (-0.18659230361790224, 0.7315697634667812),
                (1.1988376547782718, -0.04097283022855038),
                (2.2673588890386416, 1.6220558409414525),
                (-3.5396965200399912, -0.3006270112102976),
                (-0.053321046534350075, -0.06267405759345504),
                (2.2684040562447723, 1.815333906093389),
            ],
        ),
        // Bidirectional(GRU(3), sum)
        (
            &[2, 3],
            (0.2183308861745677, 0.02568953902444758),
            &[
                (0.16695061417981893, 0.09816525364574494),
                (-0.4958552315294925, -0.3408808334062817),
                (0.2768411424241777, 0.20550777882506002),
                (1.9023873154687543, 1.500020245705378),
                (1.7880523020800143, 1.340789770933584),
                (-0.2123020275612021, -0.15796209360114544),
                (1.9957654268994771, 1.5119780502154514),
            ],
        ),
        // Bidirectional(GRU(3, return_sequences), mul)
        (
            &[2, 5, 3],
            (-0.36053413574801335, -0.193237045494228),
            &[
                (-0.09091277631179333, -0.06068414826180196),
                (-1.0008526788315932, -0.7782899720500401),
                (-0.08410974114321113, -0.06317477203349607),
                (-0.9621770823933107, -0.7623678320944118),
                (0.061662736007419235, 0.05721525276932843),
                (-0.13102219845470459, -0.09746358313271983),
                (1.9538282696719853, 1.451546721148793),
            ],
        ),
    ];
    let layers = recurrent_layers(&mut Rng::new(0))?;
    assert_eq!(layers.len(), want.len());
    let (x, m) = (init(&[2, 5, 3], 1.0, 1.0), mask());
    for (k, (layer, (shape, y, grads))) in layers.iter().zip(want).enumerate() {
        let vars = layer.variables();
        set_weights(&vars)?;
        let want = Want {
            shape: Some(shape),
            y,
            grads,
        };
        let f = |x: &Tensor| layer.forward_masked(x, Some(&m), false);
        check_against(&format!("case {k}"), &f, &x, &vars, &want, 1e-12)?;
    }
    Ok(())
}

/// `Embedding(10, 3, mask_zero=True)` then `LSTM(4, return_sequences)`,
/// the mask from the embedding; gradients of the table and the LSTM's
/// weights (the ids have none).
#[test]
fn embedding_mask_zero_feeds_an_lstm_as_keras() -> Result<()> {
    let want: Case = (
        &[2, 5, 4],
        (-3.3280878283531026, 0.03460620684930585),
        &[
            (3.7761607497404626, 0.9231821586115092),
            (-0.5861900403869058, 0.3522797988398678),
            (6.089252687591916, 4.956441814946332),
        ],
    );
    // the script's first gradient is the table's
    let table_want = (6.743231829028159, 4.952247755882721);
    let mut rng = Rng::new(1);
    let emb = Embedding::builder(10, 3)
        .mask_zero(true)
        .dtype(DType::F64)
        .build(&mut rng)?;
    let lstm = f64_layer(LSTM::builder(3, 4)).return_sequences(true).build(&mut rng)?;
    let mut vars = emb.variables();
    vars.extend(lstm.variables());
    set_weights(&vars)?;
    let ids = Tensor::from_vec(vec![3i64, 5, 9, 0, 0, 0, 2, 7, 0, 1], &[2, 5])?;
    let m = emb.compute_mask(&ids)?.expect("mask_zero");
    assert_eq!(m.to_vec::<bool>()?, mask().to_vec::<bool>()?);
    let tape = GradientTape::new();
    let mut y = None;
    let loss = tape.record(|| {
        let out = lstm.forward_masked(&emb.call(&ids)?, Some(&m), false)?;
        y = Some(out.clone());
        sin_weighted(&out)
    })?;
    let grads = tape.gradient(&loss, &vars)?;
    let y = y.expect("recorded");
    assert_eq!(y.shape(), want.0);
    close_sums(wsum(&y), want.1, 1e-12, "y");
    close_sums(wsum(grads[0].as_ref().unwrap()), table_want, 1e-12, "table");
    for (i, (g, w)) in grads[1..].iter().zip(want.2).enumerate() {
        close_sums(wsum(g.as_ref().unwrap()), *w, 1e-12, &format!("lstm weight {i}"));
    }
    // without mask_zero there is no mask
    assert!(Embedding::new(10, 3, &mut rng)?.compute_mask(&ids)?.is_none());
    Ok(())
}

/// `Masking(0.5)` then `GRU(4)`: steps whose features are all 0.5 are
/// skipped (one feature alone at 0.5 is not), and their inputs get no
/// gradient.
#[test]
fn masking_feeds_a_gru_as_keras() -> Result<()> {
    let (y, grads): (Sums, &[Sums]) = (
        (2.606622902805718, 0.8745768168176071),
        &[
            (-0.3293760102942547, -0.1958044412201436),
            (-2.0085211200072894, -0.5734445382280224),
            (0.9826060806947124, 0.26338469124353675),
            (3.6758549859029976, 3.0637082335543364),
        ],
    );
    let mut v = init(&[2, 5, 3], 1.0, 1.0).to_vec::<f64>()?;
    for (b, t) in [(0, 3), (1, 1), (1, 4)] {
        v[(b * 5 + t) * 3..][..3].fill(0.5);
    }
    v[3] = 0.5; // [0, 1, 0]
    let x = Tensor::from_vec(v, &[2, 5, 3])?;
    let masking = Masking::new(0.5);
    let m = masking.compute_mask(&x)?;
    assert_eq!(
        m.to_vec::<bool>()?,
        vec![true, true, true, false, true, true, false, true, true, false]
    );
    let gru = f64_layer(GRU::builder(3, 4)).build(&mut Rng::new(2))?;
    let vars = gru.variables();
    set_weights(&vars)?;
    let f = |x: &Tensor| gru.forward_masked(&masking.call(x)?, Some(&masking.compute_mask(x)?), false);
    let want = Want {
        shape: Some(&[2, 4]),
        y,
        grads,
    };
    check_against("Masking -> GRU", &f, &x, &vars, &want, 1e-12)?;
    // the masked steps' inputs get no gradient
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(&x);
        f(&x)?.sum_all()
    })?;
    let g = tape.gradient(&loss, &x)?.unwrap().to_vec::<f64>()?;
    let masked = g[9..12].iter().chain(&g[18..21]).chain(&g[27..30]);
    assert!(masked.into_iter().all(|&v| v == 0.0), "{g:?}");
    assert!(g[3..6].iter().all(|&v| v != 0.0), "{g:?}");
    Ok(())
}

#[test]
fn pooling_layers_match_keras() -> Result<()> {
    let want: [Case; 9] = [
        // MaxPooling3D(2)
        (
            &[2, 2, 2, 2, 3],
            (46.04874300956726, 9.221068782369436),
            &[(9.615486957132816, -0.44791551455506307)],
        ),
        // MaxPooling3D((2, 3, 1), strides (1, 2, 1), same)
        (
            &[1, 3, 3, 4, 2],
            (57.01627929136157, 3.624773670528754),
            &[(3.5163884982466698, -0.25612497640963827)],
        ),
        // AveragePooling3D(2, same)
        (
            &[2, 2, 3, 2, 2],
            (0.2742801383137703, 0.8314787298140209),
            &[(9.615486957132816, 12.804436951973585)],
        ),
        // AveragePooling3D((1, 2, 2), strides 1, channels_first)
        (
            &[1, 2, 3, 3, 2],
            (2.665462389588356, -0.5161884724252067),
            &[(19.173035319894552, -0.7301761537999439)],
        ),
        // MaxPooling3D(2, same, channels_first)
        (
            &[1, 2, 2, 3, 2],
            (9.17661514878273, 5.7511397513433895),
            &[(17.021724820137024, 2.2149404005828495)],
        ),
        // MaxPooling1D(2)
        (
            &[2, 3, 3],
            (6.631335241207235, 4.087855221359774),
            &[(11.774868742516055, 3.5459041159723714)],
        ),
        // MaxPooling1D(3, strides 2, same)
        (
            &[2, 4, 3],
            (10.91837203456735, 7.528563747420209),
            &[(17.021724870552532, 0.624035069563124)],
        ),
        // AveragePooling1D(3, strides 1)
        (
            &[2, 5, 3],
            (-1.3451589136968098, -2.7051778483424602),
            &[(19.812778926632816, 9.412376790939764)],
        ),
        // AveragePooling1D(2, same, channels_first)
        (
            &[2, 3, 4],
            (1.8783137478799663, 0.636550918330899),
            &[(17.02172487055253, 5.599165426861876)],
        ),
    ];
    let first = DataFormat::ChannelsFirst;
    let p3 = |kind, size| Pool3D::builder(kind, size);
    let p1 = |kind, size| Pool1D::builder(kind, size);
    let layers: Vec<(Box<dyn Layer>, Vec<usize>)> = vec![
        (Box::new(p3(PoolKind::Max, [2; 3]).build()?), vec![2, 4, 5, 4, 3]),
        (
            Box::new(
                p3(PoolKind::Max, [2, 3, 1])
                    .strides([1, 2, 1])
                    .padding(Padding::Same)
                    .build()?,
            ),
            vec![1, 3, 5, 4, 2],
        ),
        (
            Box::new(p3(PoolKind::Avg, [2; 3]).padding(Padding::Same).build()?),
            vec![2, 3, 5, 3, 2],
        ),
        (
            Box::new(
                p3(PoolKind::Avg, [1, 2, 2])
                    .strides([1; 3])
                    .data_format(first)
                    .build()?,
            ),
            vec![1, 2, 3, 4, 3],
        ),
        (
            Box::new(
                p3(PoolKind::Max, [2; 3])
                    .padding(Padding::Same)
                    .data_format(first)
                    .build()?,
            ),
            vec![1, 2, 3, 5, 3],
        ),
        (Box::new(p1(PoolKind::Max, 2).build()?), vec![2, 7, 3]),
        (
            Box::new(p1(PoolKind::Max, 3).stride(2).padding(Padding::Same).build()?),
            vec![2, 8, 3],
        ),
        (Box::new(p1(PoolKind::Avg, 3).stride(1).build()?), vec![2, 7, 3]),
        (
            Box::new(p1(PoolKind::Avg, 2).padding(Padding::Same).data_format(first).build()?),
            vec![2, 3, 7],
        ),
    ];
    for (k, ((layer, shape), (y_shape, y, grads))) in layers.iter().zip(want).enumerate() {
        let want = Want {
            shape: Some(y_shape),
            y,
            grads,
        };
        let x = init(shape, 1.0, 1.0);
        // the 3-D cases in f32, as the reference
        let (dtype, tol) = if shape.len() == 5 {
            (DType::F32, 1e-6)
        } else {
            (DType::F64, 1e-12)
        };
        let f = |x: &Tensor| layer.call(&x.cast(dtype)?)?.cast(DType::F64);
        check_against(&format!("pool case {k}"), &f, &x, &[], &want, tol)?;
    }
    Ok(())
}

/// A training step through masked layers (a bidirectional LSTM of
/// sequences, then a GRU going backwards to its last step), traced with
/// the mask as an input, against the eager step, for two masks on one
/// trace.
#[test]
fn masked_layers_trace_as_eager() -> Result<()> {
    let mut rng = Rng::new(3);
    let bi = Bidirectional::new(
        f64_layer(LSTM::builder(3, 4)).return_sequences(true).build(&mut rng)?,
        f64_layer(LSTM::builder(3, 4)).return_sequences(true).build(&mut rng)?,
        Merge::Concat,
    );
    let gru = f64_layer(GRU::builder(8, 2)).go_backwards(true).build(&mut rng)?;
    let mut vars = bi.variables();
    vars.extend(gru.variables());
    let model = std::sync::Arc::new((bi, gru, vars));
    let step = {
        let model = model.clone();
        move |(x, m): &(Tensor, Tensor)| -> Result<Vec<Tensor>> {
            let (bi, gru, vars) = &*model;
            let tape = GradientTape::persistent();
            let loss = tape.record(|| {
                tape.watch(x);
                let h = bi.forward_masked(x, Some(m), true)?;
                gru.forward_masked(&h, Some(m), true)?.square()?.sum_all()
            })?;
            let mut out = vec![loss.clone(), tape.gradient(&loss, x)?.unwrap()];
            out.extend(tape.gradient(&loss, vars)?.into_iter().map(|g| g.unwrap()));
            Ok(out)
        }
    };
    let traced = function(step.clone());
    let x = rng.normal(&[3, 6, 3], 0.0, 1.0, DType::F64)?;
    let masks = [
        [true, true, true, true, false, false],
        [false, true, true, false, true, true],
        [true; 6],
    ]
    .concat();
    let other = [[true; 6], [true, false, true, false, true, false], [false; 6]].concat();
    for m in [masks, other] {
        let m = Tensor::from_vec(m, &[3, 6])?;
        let args = (x.clone(), m);
        let eager = step(&args)?;
        assert_eq!(eager.len(), 2 + 9);
        assert_same_outputs(&eager, &traced.call(&args)?, 1e-13);
    }
    Ok(())
}

/// The finite-difference checker (first and second order, and the
/// batched Jacobian) through a masked GRU returning sequences, in f64.
#[test]
fn masked_gru_passes_the_gradient_checker() -> Result<()> {
    let mut rng = Rng::new(4);
    let gru = f64_layer(GRU::builder(2, 3)).return_sequences(true).build(&mut rng)?;
    let back = f64_layer(GRU::builder(2, 3)).go_backwards(true).build(&mut rng)?;
    let m = Tensor::from_vec(vec![true, false, true, true, false, true, true, false], &[2, 4])?;
    let x = rng.normal(&[2, 4, 2], 0.0, 1.0, DType::F64)?;
    for layer in [&gru, &back] {
        let f = |xs: &[Tensor]| layer.forward_masked(&xs[0], Some(&m), false)?.tanh()?.sum_all();
        let report = check_gradients(f, std::slice::from_ref(&x), &CheckOptions::default())?;
        assert!(report.max_err_first < 1e-6, "{report:?}");
    }
    Ok(())
}

/// What a mask does: an all-true mask is no mask; a masked step repeats
/// the last output and keeps the state (so a right-padded row is its
/// unpadded prefix), a fully masked row gives zeros; with sequences a
/// `Bidirectional` outputs zeros at masked steps; masked inputs get no
/// gradient.
#[test]
fn masks_skip_the_steps_they_hide() -> Result<()> {
    let mut rng = Rng::new(5);
    let x = rng.normal(&[2, 5, 3], 0.0, 1.0, DType::F64)?;
    let lstm = f64_layer(LSTM::builder(3, 2)).return_sequences(true).build(&mut rng)?;
    let all = Tensor::from_vec(vec![true; 10], &[2, 5])?;
    assert_eq!(
        lstm.forward_masked(&x, Some(&all), false)?.to_vec::<f64>()?,
        lstm.call(&x)?.to_vec::<f64>()?
    );
    let m = Tensor::from_vec([[true, true, false, false, false], [false; 5]].concat(), &[2, 5])?;
    let s0 = lstm.cell().zero_state(2)?;
    let (y, last) = lstm.forward_from_masked(&x, Some(s0.clone()), Some(&m))?;
    let (y2, last2) = lstm.forward_from(&x.narrow(0, 0, 1)?.narrow(1, 0, 2)?, None)?;
    let row0 = y.narrow(0, 0, 1)?;
    // (rows of a batch of two against a batch of one: equal up to rounding)
    assert_same_outputs(&[row0.narrow(1, 0, 2)?], std::slice::from_ref(&y2), 1e-14);
    for t in 2..5 {
        assert_same_outputs(&[row0.narrow(1, t, 1)?], &[y2.narrow(1, 1, 1)?], 1e-14);
    }
    assert_same_outputs(&[last.c.narrow(0, 0, 1)?], &[last2.c], 1e-14);
    assert!(y.narrow(0, 1, 1)?.to_vec::<f64>()?.iter().all(|&v| v == 0.0));
    assert!(last.h.narrow(0, 1, 1)?.to_vec::<f64>()?.iter().all(|&v| v == 0.0));
    // Bidirectional: zeros at the masked steps
    let bi = Bidirectional::new(
        f64_layer(GRU::builder(3, 2)).return_sequences(true).build(&mut rng)?,
        f64_layer(GRU::builder(3, 2)).return_sequences(true).build(&mut rng)?,
        Merge::Concat,
    );
    let m = Tensor::from_vec([[true, false, true, true, false], [true; 5]].concat(), &[2, 5])?;
    let y = bi.forward_masked(&x, Some(&m), false)?.to_vec::<f64>()?;
    for t in [1, 4] {
        assert!(y[t * 4..][..4].iter().all(|&v| v == 0.0), "{y:?}");
    }
    assert!(y[20..].iter().all(|&v| v != 0.0));
    // no gradient for the masked inputs
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(&x);
        bi.forward_masked(&x, Some(&m), false)?.sum_all()
    })?;
    let g = tape.gradient(&loss, &x)?.unwrap().to_vec::<f64>()?;
    assert!(g[3..6].iter().chain(&g[12..15]).all(|&v| v == 0.0), "{g:?}");
    Ok(())
}

/// Masks of the wrong shape or dtype, and pooling sizes that cannot work,
/// are errors naming the layer.
#[test]
fn bad_masks_and_pool_sizes_are_errors_naming_the_layer() -> Result<()> {
    let mut rng = Rng::new(6);
    let x = Tensor::zeros(&[2, 5, 3], DType::F32);
    let layers: Vec<(Box<dyn SequenceLayer>, &str)> = vec![
        (Box::new(LSTM::builder(3, 2).build(&mut rng)?), "LSTM"),
        (Box::new(GRU::builder(3, 2).go_backwards(true).build(&mut rng)?), "GRU"),
        (
            Box::new(Bidirectional::new(
                LSTM::builder(3, 2).build(&mut rng)?,
                LSTM::builder(3, 2).build(&mut rng)?,
                Merge::Sum,
            )),
            "Bidirectional",
        ),
    ];
    let bad = [
        Tensor::from_vec(vec![true; 8], &[2, 4])?,
        Tensor::from_vec(vec![true; 10], &[2, 5, 1])?,
        Tensor::from_vec(vec![true; 5], &[5])?,
        Tensor::ones(&[2, 5], DType::F32),
        Tensor::ones(&[2, 5], DType::I64),
    ];
    for (layer, name) in &layers {
        for m in &bad {
            let e = layer.forward_masked(&x, Some(m), false).unwrap_err().to_string();
            assert!(e.contains(name) && e.contains("mask"), "{e}");
        }
        // a good mask works
        layer.forward_masked(&x, Some(&mask()), false)?;
    }
    let e = Masking::new(0.0)
        .compute_mask(&Tensor::zeros(&[4], DType::F32))
        .unwrap_err();
    assert!(e.to_string().contains("Masking"), "{e}");
    let emb = Embedding::builder(4, 2).mask_zero(true).build(&mut rng)?;
    let e = emb.compute_mask(&Tensor::zeros(&[2, 3], DType::F32)).unwrap_err();
    assert!(e.to_string().contains("Embedding"), "{e}");
    // pooling: zero sizes when built, windows too large for the input
    for (e, name) in [
        (Pool3D::builder(PoolKind::Max, [2, 0, 2]).build().err(), "MaxPooling3D"),
        (
            Pool3D::builder(PoolKind::Avg, [2; 3]).strides([1, 1, 0]).build().err(),
            "AveragePooling3D",
        ),
        (Pool1D::builder(PoolKind::Max, 0).build().err(), "MaxPooling1D"),
        (
            Pool1D::builder(PoolKind::Avg, 2).stride(0).build().err(),
            "AveragePooling1D",
        ),
        (
            Pool1D::builder(PoolKind::Avg, usize::MAX).build().err(),
            "AveragePooling1D",
        ),
    ] {
        let e = e.expect("an error").to_string();
        assert!(e.contains(name), "{e}");
    }
    let v = Tensor::zeros(&[1, 3, 4, 4, 2], DType::F32);
    let too_big = Pool3D::builder(PoolKind::Max, [4, 2, 2]).build()?;
    let e = too_big.call(&v).unwrap_err().to_string();
    assert!(e.contains("MaxPooling3D") && e.contains("pool size"), "{e}");
    // with `Same` padding a large window is fine, as Keras
    let same = Pool3D::builder(PoolKind::Max, [4, 2, 2])
        .padding(Padding::Same)
        .build()?;
    assert_eq!(same.call(&v)?.shape(), &[1, 1, 2, 2, 2]);
    let first = Pool1D::builder(PoolKind::Avg, 5)
        .data_format(DataFormat::ChannelsFirst)
        .build()?;
    let e = first
        .call(&Tensor::zeros(&[1, 8, 4], DType::F32))
        .unwrap_err()
        .to_string();
    assert!(e.contains("AveragePooling1D"), "{e}");
    for (layer, shape) in [
        (Box::new(too_big) as Box<dyn Layer>, vec![1, 3, 4, 4]),
        (Box::new(first), vec![1, 8, 4, 1]),
    ] {
        let e = layer.call(&Tensor::zeros(&shape, DType::F32)).unwrap_err().to_string();
        assert!(e.contains("Pooling") && e.contains("rank"), "{e}");
    }
    let e = Pool1D::builder(PoolKind::Max, 2)
        .build()?
        .call(&Tensor::zeros(&[1, 4, 2], DType::I64))
        .unwrap_err()
        .to_string();
    assert!(e.contains("MaxPooling1D"), "{e}");
    Ok(())
}

/// Global pooling over masked sequences, against Keras 3.15.1's
/// `GlobalAveragePooling1D()(x, mask=m)` (f64, `x = fill([3, 4, 2], 0.2)`,
/// the numbers printed with the calls at the end of this comment): the mean over
/// the kept steps, NaN for a row with none (Keras's 0 / 0); the maximum
/// ignores the mask, as Keras's `GlobalMaxPooling1D`, whose `call` takes
/// none. (Keras: `layers.GlobalAveragePooling1D(dtype="float64")(x,
/// mask=m)` and `layers.GlobalMaxPooling1D(dtype="float64")(x)`.)
#[test]
fn global_pooling_over_masked_steps_matches_keras() -> Result<()> {
    use gradtape::nn::{GlobalPooling, PoolKind, SequenceLayer};
    let x: Vec<f64> = (0..24).map(|i| 0.5 * (0.7 * i as f64 + 0.2).sin()).collect();
    let x = Tensor::from_vec(x, &[3, 4, 2])?;
    let keep = [
        true, true, false, false, true, false, true, true, false, false, false, false,
    ];
    let m = Tensor::from_vec(keep.to_vec(), &[3, 4])?;
    let avg = GlobalPooling::new(PoolKind::Avg, 1)?;
    let want = [
        0.2995607334591416,
        0.3822580304510509,
        -0.04570436540483519,
        -0.10284343411255148,
    ];
    let got = avg.forward_masked(&x, Some(&m), false)?.to_vec::<f64>()?;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-15, "avg[{i}]: {g} vs Keras's {w}");
    }
    assert!(got[4].is_nan() && got[5].is_nan(), "a fully masked row: {got:?}");
    let kept = GlobalPooling::new(PoolKind::Avg, 1)?.keepdims(true);
    assert_eq!(kept.forward_masked(&x, Some(&m), false)?.shape(), &[3, 1, 2]);
    let max = GlobalPooling::new(PoolKind::Max, 1)?;
    let want_max = [
        0.4997868015207526,
        0.39166345481374165,
        0.39683393192457656,
        0.499470670919886,
        0.49901332635818085,
        0.40189221327580993,
    ];
    let got = max.forward_masked(&x, Some(&m), false)?.to_vec::<f64>()?;
    assert!(got.iter().zip(want_max).all(|(g, w)| (g - w).abs() <= 1e-15), "{got:?}");
    // the masked average's gradient by finite differences (rows with a
    // kept step), and traced against eager
    let (x2, m2) = (x.narrow(0, 0, 2)?, m.narrow(0, 0, 2)?);
    let f = |t: &[Tensor]| {
        avg.forward_masked(&t[0], Some(&m2), false)?
            .mul(&t[0].narrow(1, 0, 1)?.squeeze(&[1])?)?
            .sum_all()
    };
    let report = gradtape::check_gradients(f, std::slice::from_ref(&x2), &gradtape::CheckOptions::default())?;
    assert!(report.compared > 0, "{report:?}");
    let traced = {
        let (m2, avg) = (m2.clone(), GlobalPooling::new(PoolKind::Avg, 1)?);
        gradtape::function(move |x: &Tensor| avg.forward_masked(x, Some(&m2), false))
    };
    assert_eq!(
        traced.call(&x2)?.to_vec::<f64>()?,
        avg.forward_masked(&x2, Some(&m2), false)?.to_vec::<f64>()?
    );
    // a mask of the wrong shape, and masks over 2-D pooling, are errors
    assert!(avg.forward_masked(&x, Some(&m.narrow(1, 0, 3)?), false).is_err());
    let x2 = Tensor::zeros(&[3, 4, 4, 2], gradtape::DType::F64);
    assert!(GlobalPooling::new(PoolKind::Avg, 2)?
        .forward_masked(&x2, Some(&m), false)
        .is_err());
    Ok(())
}
