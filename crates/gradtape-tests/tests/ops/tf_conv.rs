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
