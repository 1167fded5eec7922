//! The convolutions and pools beyond `tf_conv.rs` against TensorFlow 2.21
//! (f64): `conv1d`, `conv3d`, `conv2d_transpose` (to the smallest and the
//! largest output shape a stride allows), `separable_conv2d`, dilated
//! `conv1d`, `conv2d`, `depthwise_conv2d` and `conv3d`, and the 1-D and
//! 3-D max and average pools; SAME and VALID padding, strides, odd sizes
//! where SAME pads more after than before, ties. Values and the gradients
//! of a weighted sum with respect to every input. The numbers are printed
//! by `tests/reference/tf_conv_more.py` into `tests/data/tf_conv_more.txt`:
//! TensorFlow's, except where its CPU kernels refuse (dilated gradients,
//! dilated `Conv3D`, f64 3-D pools), where JAX in f64 referees, as each
//! line's source says (the script checks JAX against TensorFlow wherever
//! both answer). TensorFlow's 3-D max pool gradient on ties differs by
//! design ([`every_tie`]).

use gradtape::{GradientTape, Padding, Result, Tensor};

use super::tf_util::{all_agree, floats, magnitude, report, weighted};

const DATA: &str = include_str!("../data/tf_conv_more.txt");

/// A line's `config`: window or filter size, strides, dilations, padding
/// and (`conv2d_transpose`) the output shape.
struct Cfg {
    k: Vec<i64>,
    s: Vec<i64>,
    d: Vec<i64>,
    pad: Padding,
    out: Vec<usize>,
}

fn dims<T: std::str::FromStr>(v: &str) -> Vec<T> {
    v.split('x')
        .map(|d| d.parse().unwrap_or_else(|_| panic!("bad size {v}")))
        .collect()
}

fn config(cfg: &str) -> Cfg {
    let mut c = Cfg {
        k: vec![],
        s: vec![],
        d: vec![],
        pad: Padding::Valid,
        out: vec![],
    };
    for kv in cfg.split(';') {
        let (key, v) = kv.split_once('=').expect("key=value");
        match key {
            "k" => c.k = dims(v),
            "s" => c.s = dims(v),
            "d" => c.d = dims(v),
            "p" => c.pad = if v == "SAME" { Padding::Same } else { Padding::Valid },
            "out" => c.out = dims(v),
            _ => panic!("bad config {cfg}"),
        }
    }
    c
}

fn two(v: &[i64]) -> [i64; 2] {
    v.try_into().expect("two sizes")
}

fn three(v: &[i64]) -> [i64; 3] {
    v.try_into().expect("three sizes")
}

fn op(name: &str, c: &Cfg, xs: &[Tensor]) -> Result<Tensor> {
    let x = &xs[0];
    match name {
        "conv1d" => x.conv1d(&xs[1], c.s[0], c.pad, c.d[0]),
        "conv2d" => x.conv2d(&xs[1], two(&c.s), c.pad, two(&c.d)),
        "depthwise_conv2d" => x.depthwise_conv2d(&xs[1], two(&c.s), c.pad, two(&c.d)),
        "separable_conv2d" => x.separable_conv2d(&xs[1], &xs[2], two(&c.s), c.pad, two(&c.d)),
        "conv3d" => x.conv3d(&xs[1], three(&c.s), c.pad, three(&c.d)),
        "conv2d_transpose" => x.conv2d_transpose(&xs[1], &c.out, two(&c.s), c.pad, two(&c.d)),
        "max_pool1d" => x.max_pool1d(c.k[0], c.s[0], c.pad),
        "avg_pool1d" => x.avg_pool1d(c.k[0], c.s[0], c.pad),
        "max_pool3d" => x.max_pool3d(three(&c.k), three(&c.s), c.pad),
        "avg_pool3d" => x.avg_pool3d(three(&c.k), three(&c.s), c.pad),
        _ => panic!("no op {name}"),
    }
}

#[test]
fn more_convolutions_and_pools_match_tensorflow() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for line in DATA.lines() {
        let [name, cfg, inputs, value, grads, src] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        let c = config(cfg);
        let xs: Vec<Tensor> = inputs
            .split('/')
            .map(|t| {
                let (shape, v) = t.split_once(':').expect("shape:values");
                Tensor::from_vec(floats(v).unwrap(), &dims::<usize>(shape)).unwrap()
            })
            .collect();
        let tape = GradientTape::new();
        let (y, s) = tape.record(|| {
            for x in &xs {
                tape.watch(x);
            }
            let y = op(name, &c, &xs)?;
            let s = weighted(&y)?;
            Ok((y, s))
        })?;
        let g = tape.gradient(&s, &xs)?;
        let outputs = y.numel();
        let wants: Vec<&str> = std::iter::once(value).chain(grads.split('/')).collect();
        assert_eq!(wants.len(), xs.len() + 1, "{name}: a gradient per input");
        let gots = std::iter::once(Some(y)).chain(g);
        for (i, (got, want)) in gots.zip(wants).enumerate() {
            checked += 1;
            let what = if i == 0 {
                "value".to_string()
            } else {
                format!("d input {}", i - 1)
            };
            let got = got.map(|t| t.to_vec::<f64>().unwrap());
            let want = floats(want).unwrap();
            // a sum's roundoff is relative to its largest term
            let same = got
                .as_deref()
                .is_some_and(|g| all_agree(g, &want, 1e-12, magnitude(&want)));
            let by_design = name == "max_pool3d" && i == 1 && every_tie(&xs[0], outputs, got.as_deref(), &want);
            if !same && !by_design {
                bad.push(format!("{name} {cfg} {what} ({src}): got {got:?}, want {want:?}"));
            }
        }
    }
    report(checked, 250, &bad);
    Ok(())
}

/// A 3-D max pool's gradient where windows hold ties: this crate sends
/// each window's cotangent to its first maximum (as its 2-D pool, as
/// TensorFlow's `MaxPoolGrad`, and as JAX's `reduce_window` gradient,
/// which give the same numbers here); TensorFlow's `MaxPool3DGrad` adds it
/// to every element equal to the maximum, so its gradient's total exceeds
/// the cotangent's. So the gradients may differ only where TensorFlow's is
/// the larger, at an element tied with one that took a gradient here, and
/// this crate's total is the cotangent's.
fn every_tie(x: &Tensor, outputs: usize, got: Option<&[f64]>, want: &[f64]) -> bool {
    let (Some(got), Ok(x)) = (got, x.to_vec::<f64>()) else {
        return false;
    };
    let winners: Vec<f64> = (0..x.len()).filter(|&i| got[i] != 0.0).map(|i| x[i]).collect();
    // each output's cotangent w[i] = 1 + i/2 sent once (sums of halves: exact)
    let cotangents: f64 = (0..outputs).map(|i| 1.0 + 0.5 * i as f64).sum();
    got.len() == want.len()
        && got.iter().sum::<f64>() == cotangents
        && (0..x.len()).any(|i| got[i] != want[i])
        && (0..x.len()).all(|i| got[i] == want[i] || (want[i] > got[i] && winners.contains(&x[i])))
}
