//! The 2-D convolutions and pools (NHWC) against TensorFlow 2.21 (f64):
//! SAME and VALID padding, strides, ties, infinities and NaN in the input;
//! values and the gradients of a weighted sum with respect to the input
//! and the filter. The numbers are TensorFlow's, printed by
//! `tests/reference/tf_conv.py` into `tests/data/tf_conv.txt`; a max
//! pool's gradient near a NaN differs by design ([`nan_window_only`]).

use gradtape::{GradientTape, Padding, Result, Tensor};

use super::tf_util::{all_agree, floats, magnitude, report, weighted};

#[test]
fn convolutions_and_pools_match_tensorflow() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for line in DATA.lines() {
        let [name, cfg, x, w, value, dx, dw] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        let c: Vec<&str> = cfg.split(',').collect();
        let (k, st): (usize, i64) = (c[0].parse().unwrap(), c[1].parse().unwrap());
        let pad = if c[3] == "SAME" { Padding::Same } else { Padding::Valid };
        let xv = floats(x).unwrap();
        let x = Tensor::from_vec(xv.clone(), &[1, 5, 6, 2])?;
        let w = floats(w).map(|v| {
            let out = if name == "depthwise_conv2d" { 1 } else { 3 };
            Tensor::from_vec(v, &[k, k, 2, out]).unwrap()
        });
        let tape = GradientTape::new();
        let (y, s) = tape.record(|| {
            tape.watch(&x);
            if let Some(w) = &w {
                tape.watch(w);
            }
            let ks = k as i64;
            let y = match name {
                "max_pool" => x.max_pool2d([ks, ks], [st, st], pad)?,
                "avg_pool" => x.avg_pool2d([ks, ks], [st, st], pad)?,
                "conv2d" => x.conv2d(w.as_ref().unwrap(), [st, st], pad, [1, 1])?,
                "depthwise_conv2d" => x.depthwise_conv2d(w.as_ref().unwrap(), [st, st], pad, [1, 1])?,
                _ => panic!("no op {name}"),
            };
            let s = weighted(&y)?;
            Ok((y, s))
        })?;
        let sources: Vec<Tensor> = std::iter::once(x.clone()).chain(w.clone()).collect();
        let mut g = tape.gradient(&s, &sources)?.into_iter();
        let (gx, gw) = (g.next().flatten(), g.next().flatten());
        let out = [("value", Some(y)), ("dx", gx), ("dfilter", gw)];
        for ((what, got), want) in out.into_iter().zip([value, dx, dw]) {
            checked += 1;
            let got = got.map(|t| t.to_vec::<f64>().unwrap());
            let want = floats(want);
            // a sum's roundoff is relative to the largest term
            let scale = want.as_deref().map_or(0.0, magnitude);
            let same = match (&got, &want) {
                (Some(g), Some(w)) => all_agree(g, w, 1e-12, scale),
                (None, None) => true,
                _ => false,
            };
            let by_design =
                name == "max_pool" && what == "dx" && nan_window_only(&xv, k, got.as_deref(), want.as_deref());
            if !same && !by_design {
                bad.push(format!("{name} {cfg} {what}: got {got:?}, TensorFlow {want:?}"));
            }
        }
    }
    report(checked, 100, &bad);
    Ok(())
}

const DATA: &str = include_str!("../data/tf_conv.txt");

/// A max pool's gradient where a window holds NaN: the pool's value skips
/// NaN (as TensorFlow's), and this crate sends the gradient to the element
/// whose value is output; TensorFlow's `MaxPoolGrad` recomputes its own
/// argmax, which takes the NaN. So the gradients may differ only within
/// `k` of the NaN, and carry the same total.
fn nan_window_only(x: &[f64], k: usize, got: Option<&[f64]>, want: Option<&[f64]>) -> bool {
    let (Some(got), Some(want)) = (got, want) else {
        return false;
    };
    let nans: Vec<usize> = (0..x.len()).filter(|&i| x[i].is_nan()).collect();
    // [1, 5, 6, 2]: (h, w, c) of a flat index
    let hwc = |i: usize| (i / 12, (i / 2) % 6, i % 2);
    let near = |i: usize| {
        let (h, w, c) = hwc(i);
        nans.iter().any(|&n| {
            let (nh, nw, nc) = hwc(n);
            c == nc && h.abs_diff(nh) < k && w.abs_diff(nw) < k
        })
    };
    let total = |v: &[f64]| v.iter().sum::<f64>();
    !nans.is_empty()
        && (total(got) - total(want)).abs() <= 1e-12 * total(want).abs()
        && got.iter().zip(want).enumerate().all(|(i, (a, b))| a == b || near(i))
}

/// A depthwise convolution of one filter per channel (multiplier 1, whose
/// gradients run channel-vectorised loops of their own) is a grouped
/// convolution of one group per channel: the same values and gradients,
/// to rounding, over channel counts on and off the vector width, strides,
/// padding and dilation.
#[test]
fn depthwise_multiplier_one_matches_grouped_conv() -> Result<()> {
    let mut rng = gradtape::Rng::new(3);
    for (c, s, pad, d) in [
        (16, 1, Padding::Same, 1),
        (19, 2, Padding::Same, 1),
        (8, 1, Padding::Valid, 2),
        (3, 2, Padding::Valid, 1),
    ] {
        let x = rng.normal(&[2, 9, 7, c], 0.0, 1.0, gradtape::DType::F32)?;
        let f = rng.normal(&[3, 3, c, 1], 0.0, 1.0, gradtape::DType::F32)?;
        let run = |grouped: bool| -> Result<Vec<Vec<f64>>> {
            let tape = GradientTape::new();
            tape.watch(&x);
            tape.watch(&f);
            let y = tape.record(|| {
                let y = if grouped {
                    x.conv2d(&f.reshape(&[3, 3, 1, c])?, [s, s], pad, [d, d])?
                } else {
                    x.depthwise_conv2d(&f, [s, s], pad, [d, d])?
                };
                y.clone().mul(&y)?.sum_all()?.add(&y.sin()?.sum_all()?)
            })?;
            let [dx, df] = tape.gradient(&y, &[&x, &f])?;
            Ok(vec![y.to_vec_f64(), dx.unwrap().to_vec_f64(), df.unwrap().to_vec_f64()])
        };
        let (want, got) = (run(true)?, run(false)?);
        for (w, g) in want.iter().zip(&got) {
            assert_eq!(w.len(), g.len());
            for (a, b) in w.iter().zip(g) {
                assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "c {c} s {s}: {a} vs {b}");
            }
        }
    }
    Ok(())
}
