//! Keras's recurrent layers, `LSTM`, `GRU` and `Bidirectional`, against
//! Keras 3.15 (TensorFlow backend, f64; `tests/reference/keras_rnn.py`
//! prints the numbers below): the output and the gradients of the input
//! and of every weight (Keras's order), with sequence or last outputs,
//! going backwards, and the four merge modes; then the layers against
//! their cells run by hand, traced against eager, and bad input.

use gradtape::nn::{Bidirectional, Layer, Merge, Module, RecurrentBuilder, GRU, LSTM};
use gradtape::{function, DType, GradientTape, Result, Rng, Tensor};

use super::sums_util::{assert_same_outputs, check_against, init, Sums, Want};

fn f64_layer<L>(b: RecurrentBuilder<L>) -> RecurrentBuilder<L> {
    b.dtype(DType::F64)
}

/// The cases, in the reference's order.
fn layers(rng: &mut Rng) -> Result<Vec<Box<dyn Layer>>> {
    let lstm = |seq: bool, rng: &mut Rng| f64_layer(LSTM::builder(3, 4)).return_sequences(seq).build(rng);
    let mut out: Vec<Box<dyn Layer>> = vec![
        Box::new(lstm(false, rng)?),
        Box::new(
            f64_layer(LSTM::builder(3, 4))
                .return_sequences(true)
                .go_backwards(true)
                .build(rng)?,
        ),
        Box::new(f64_layer(GRU::builder(3, 4)).return_sequences(true).build(rng)?),
        Box::new(f64_layer(GRU::builder(3, 4)).go_backwards(true).build(rng)?),
    ];
    for merge in [Merge::Concat, Merge::Sum, Merge::Mul, Merge::Ave] {
        out.push(Box::new(Bidirectional::new(lstm(true, rng)?, lstm(true, rng)?, merge)));
    }
    let gru = |rng: &mut Rng| f64_layer(GRU::builder(3, 3)).build(rng);
    out.push(Box::new(Bidirectional::new(gru(rng)?, gru(rng)?, Merge::Concat)));
    Ok(out)
}

#[test]
fn recurrent_layers_match_keras() -> Result<()> {
    let want: [(Sums, &[Sums]); 9] = [
        // lstm
        (
            (-0.40493982124573136, -0.2114887429162809),
            &[
                (0.4073266977370656, 0.26654722858784274),
                (-0.08648307692006502, 0.1894528154642337),
                (0.35114087704056135, 0.009678369550796463),
                (0.8214108937462349, 0.5874555829107139),
            ],
        ),
        // lstm_seq_back
        (
            (-1.0841265979640333, -1.1100554350201173),
            &[
                (2.215243633055553, 1.2974875525899514),
                (-2.2029077665085603, -0.3703512175912178),
                (-0.8705477825600009, 0.5556398111164162),
                (3.2534695863997785, 2.4614533367755485),
            ],
        ),
        // gru_seq
        (
            (9.725159715904171, 3.692264681957396),
            &[
                (-2.029431007855869, -1.9297260474067846),
                (6.087458616911243, 3.3369487243934466),
                (4.733982218255454, 1.4618311011962222),
                (21.50746121351304, 17.67280001017373),
            ],
        ),
        // gru_back
        (
            (1.476931618079416, 0.39733633829480297),
            &[
                (-0.35110342071906503, -0.2911653082103919),
                (5.405094366265121, 2.5407039471361994),
                (2.3499080444272393, 0.5654175882663528),
                (5.076446964251345, 4.039151951126071),
            ],
        ),
        // bi_concat
        (
            (0.37807560131203255, -0.049312356383924505),
            &[
                (0.7105558381781223, 0.5675620347396909),
                (-3.325075716783328, 1.0506399060122995),
                (1.222411992422338, 0.009791785881308227),
                (1.6699815791229349, 1.2004111423351025),
                (-6.03981708362678, 0.054518280554844006),
                (0.5443558874615725, -0.6286998458810107),
                (1.714588750095891, 1.2728601835074302),
            ],
        ),
        // bi_sum
        (
            (0.37807560131203233, -0.019746732121018195),
            &[
                (0.45839562928316546, 0.2876359318870847),
                (5.675564616036403, 1.837448959381772),
                (1.641194174586632, 0.046322540635343835),
                (6.265788695674564, 4.322043050398879),
                (-1.2142608983777534, -0.1057164057668482),
                (-0.07576534931256124, -0.671982474498173),
                (3.476860855341587, 2.940590799346327),
            ],
        ),
        // bi_mul
        (
            (-0.47534250072271167, -0.20195179753368034),
            &[
                (-0.08210795095217031, -0.053857293250016626),
                (-0.6157461975519247, -0.06638506955417103),
                (-0.0653365918394469, -0.003160027051090206),
                (-0.40084870043316445, -0.253994216448001),
                (0.2883291274389036, 0.15501066753715553),
                (-0.01664517728078651, -0.04209093425414422),
                (0.07803523884174982, 0.09438034836484879),
            ],
        ),
        // bi_ave
        (
            (0.18903780065601616, -0.009873366060509097),
            &[
                (0.22919781464158273, 0.14381796594354235),
                (2.8377823080182014, 0.918724479690886),
                (0.820597087293316, 0.023161270317671918),
                (3.132894347837282, 2.1610215251994394),
                (-0.6071304491888767, -0.0528582028834241),
                (-0.03788267465628062, -0.3359912372490865),
                (1.7384304276707936, 1.4702953996731636),
            ],
        ),
        // bi_gru
        (
            (0.10642591257158623, -0.2565747546146586),
            &[
                (0.3003391851856696, 0.17400346339242434),
                (-2.793434226312376, -2.0905031388516764),
                (0.6466574179413667, 0.4858621554805071),
                (3.474930323372373, 2.7011428533480117),
                (5.007565214369187, 3.751356155644115),
                (-0.780660246473861, -0.5830259036789046),
                (5.3628403281921155, 4.032694610139944),
            ],
        ),
    ];
    let layers = layers(&mut Rng::new(0))?;
    assert_eq!(layers.len(), want.len());
    for (k, (layer, (y_want, grads_want))) in layers.iter().zip(want).enumerate() {
        let vars = layer.variables();
        for (i, v) in vars.iter().enumerate() {
            v.assign(&init(&v.shape(), 10.0 + i as f64, 0.4))?;
        }
        let x = init(&[2, 5, 3], 1.0, 1.0);
        let want = Want {
            shape: None,
            y: y_want,
            grads: grads_want,
        };
        check_against(&format!("case {k}"), &|x| layer.call(x), &x, &vars, &want, 1e-12)?;
    }
    Ok(())
}

/// A stacked model of the layers (a bidirectional LSTM of sequences, then
/// a GRU to the last step) trained one step traced and eagerly: the same
/// loss and gradients; and the LSTM layer from a given state is its cell
/// run by hand over the sequence.
#[test]
fn recurrent_layers_trace_as_eager_and_are_their_cells() -> Result<()> {
    let mut rng = Rng::new(1);
    let bi = Bidirectional::new(
        f64_layer(LSTM::builder(3, 4)).return_sequences(true).build(&mut rng)?,
        f64_layer(LSTM::builder(3, 4)).return_sequences(true).build(&mut rng)?,
        Merge::Concat,
    );
    let gru = f64_layer(GRU::builder(8, 2)).go_backwards(true).build(&mut rng)?;
    let mut vars = bi.variables();
    vars.extend(gru.variables());
    let x = rng.normal(&[3, 6, 3], 0.0, 1.0, DType::F64)?;
    let model = std::sync::Arc::new((bi, gru, vars));
    let step = {
        let model = model.clone();
        move |x: &Tensor| -> Result<Vec<Tensor>> {
            let (bi, gru, vars) = &*model;
            let tape = GradientTape::new();
            let loss = tape.record(|| gru.call(&bi.call(x)?)?.square()?.sum_all())?;
            let g = tape.gradient(&loss, vars)?;
            Ok(std::iter::once(loss).chain(g.into_iter().map(|g| g.unwrap())).collect())
        }
    };
    let eager = step(&x)?;
    let traced = function(step).call(&x)?;
    assert_eq!(eager.len(), 1 + 9);
    assert_same_outputs(&eager, &traced, 1e-13);
    // from a state, as the cell stepped by hand
    let lstm = f64_layer(LSTM::builder(3, 2)).build(&mut rng)?;
    let mut s = lstm.cell().zero_state(3)?;
    s.h = rng.normal(&[3, 2], 0.0, 1.0, DType::F64)?;
    let (y, last) = lstm.forward_from(&x, Some(s.clone()))?;
    for t in 0..6 {
        s = lstm.cell().step(&x.narrow(1, t, 1)?.squeeze(&[1])?, &s)?;
    }
    assert_eq!(y.to_vec::<f64>()?, s.h.to_vec::<f64>()?);
    assert_eq!(last.c.to_vec::<f64>()?, s.c.to_vec::<f64>()?);
    Ok(())
}

/// Bad inputs are errors naming the layer and the shapes.
#[test]
fn recurrent_layers_refuse_bad_input() -> Result<()> {
    let mut rng = Rng::new(2);
    let lstm = LSTM::builder(3, 2).build(&mut rng)?;
    for (x, what) in [
        (Tensor::zeros(&[2, 3], DType::F32), "[2, 3]"),
        (Tensor::zeros(&[2, 0, 3], DType::F32), "[2, 0, 3]"),
        (Tensor::zeros(&[2, 4, 5], DType::F32), "5"),
        (Tensor::zeros(&[2, 4, 3], DType::F64), "f64"),
    ] {
        let e = lstm.call(&x).unwrap_err().to_string();
        assert!(e.contains("LSTM") && e.contains(what), "{e}");
    }
    let e = GRU::builder(3, 0)
        .build(&mut rng)
        .err()
        .expect("zero units")
        .to_string();
    assert!(e.contains("units"), "{e}");
    // directions of different step counts cannot be merged
    let bi = Bidirectional::new(
        LSTM::builder(3, 2).return_sequences(true).build(&mut rng)?,
        LSTM::builder(3, 2).build(&mut rng)?,
        Merge::Sum,
    );
    let e = bi.call(&Tensor::zeros(&[2, 4, 3], DType::F32)).unwrap_err().to_string();
    assert!(e.contains("Bidirectional"), "{e}");
    Ok(())
}

/// Keras's `stateful=True`: chunks of a sequence through a stateful GRU
/// continue one another, eagerly and in a traced function (the state read
/// and written at each call, not frozen at the trace): the last chunk's
/// output is the whole sequence's; `reset_state` starts again from zeros;
/// the state is no weight; another batch size is an error naming the
/// layer; a state given to a stateful LSTM is used, and the call's last
/// state kept.
#[test]
fn stateful_layers_carry_their_state_across_calls() -> Result<()> {
    let rng = &mut Rng::new(3);
    let x = rng.normal(&[2, 6, 3], 0.0, 1.0, DType::F64)?;
    let gru = f64_layer(GRU::builder(3, 4)).stateful(2).build(rng)?;
    let plain = f64_layer(GRU::builder(3, 4)).build(rng)?;
    plain.set_weights(&gru.get_weights())?;
    assert_eq!(gru.variables().len(), 3, "the state is no weight");
    assert_eq!(gru.states().len(), 1);
    let whole = plain.call(&x)?.to_vec::<f64>()?;
    let g2 = std::sync::Arc::new(gru);
    let f = {
        let g = g2.clone();
        function(move |x: &Tensor| g.call(x))
    };
    for traced in [false, true] {
        let run = |x: &Tensor| if traced { f.call(x) } else { g2.call(x) };
        run(&x.narrow(1, 0, 2)?)?;
        run(&x.narrow(1, 2, 2)?)?;
        let last = run(&x.narrow(1, 4, 2)?)?.to_vec::<f64>()?;
        for (a, b) in last.iter().zip(&whole) {
            assert!((a - b).abs() <= 1e-14, "traced {traced}: {a} vs {b}");
        }
        assert_eq!(
            g2.states()[0].read().to_vec::<f64>()?,
            last,
            "the state is the last output"
        );
        g2.reset_state()?;
        assert!(g2.states()[0].read().to_vec::<f64>()?.iter().all(|&v| v == 0.0));
    }
    assert_eq!(f.trace_count(), 1);
    let e = g2.call(&x.narrow(0, 0, 1)?).unwrap_err().to_string();
    assert!(
        e.contains("GRU") && e.contains("batches of 2") && e.contains("[1, 6, 3]"),
        "{e}"
    );
    // a given state wins, and the call's last state is kept all the same
    let lstm = f64_layer(LSTM::builder(3, 4)).stateful(2).build(rng)?;
    let zero = lstm.cell().zero_state(2)?;
    let (_, s) = lstm.forward_from(&x, Some(zero))?;
    assert_eq!(lstm.states()[1].read().to_vec::<f64>()?, s.c.to_vec::<f64>()?);
    Ok(())
}
