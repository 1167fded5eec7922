//! Grouped convolutions against TensorFlow 2.21: conv1d, conv2d, conv3d
//! and conv2d_transpose with a filter of fewer input channels than the
//! input (2 and 4 groups, and 8 in a few cases), SAME and VALID padding,
//! strides and dilations, in `f32` and `f64`: values, and the gradients of
//! a weighted sum with respect to the input and the filter (so the grouped
//! `*_backprop_input` and `*_backprop_filter` ops too). The numbers are
//! TensorFlow's (under XLA on the CPU, where its eager kernels refuse
//! grouped gradients and grouped 3-D convolutions), printed by
//! `tests/reference/tf_conv_groups.py` into `tests/data/tf_conv_groups.txt`.

use gradtape::{DType, GradientTape, Padding, Result, Tensor};

use super::tf_util::{all_agree, floats, magnitude, report, weighted};

/// A `;`-separated list of sizes (`none`: empty).
fn dims(s: &str) -> Vec<usize> {
    if s == "none" {
        return vec![];
    }
    s.split(';').map(|v| v.parse().unwrap()).collect()
}

/// The op of one line on `x` and `f`.
fn apply(op: &str, x: &Tensor, f: &Tensor, st: &[i64], dil: &[i64], pad: Padding, out: &[usize]) -> Result<Tensor> {
    match op {
        "conv1d" => x.conv1d(f, st[0], pad, dil[0]),
        "conv2d" => x.conv2d(f, [st[0], st[1]], pad, [dil[0], dil[1]]),
        "conv3d" => x.conv3d(f, [st[0], st[1], st[2]], pad, [dil[0], dil[1], dil[2]]),
        "conv2d_transpose" => x.conv2d_transpose(f, out, [st[0], st[1]], pad, [dil[0], dil[1]]),
        _ => panic!("no op {op}"),
    }
}

#[test]
fn grouped_convolutions_match_tensorflow() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    let mut groups_seen = std::collections::BTreeSet::new();
    for line in DATA.lines() {
        let [op, dt, xs, fs, st, dil, pad, out, x, f, value, dx, df] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        let (xs, fs, out) = (dims(xs), dims(fs), dims(out));
        let ints = |s: &str| dims(s).into_iter().map(|v| v as i64).collect::<Vec<_>>();
        let (st, dil) = (ints(st), ints(dil));
        let pad = if pad == "SAME" { Padding::Same } else { Padding::Valid };
        let dtype = if dt == "float32" { DType::F32 } else { DType::F64 };
        // the transpose's groups are its output's channels over the filter's
        let c = if op == "conv2d_transpose" {
            out[3]
        } else {
            xs[xs.len() - 1]
        };
        groups_seen.insert(c / fs[fs.len() - 2]);
        let x = Tensor::from_vec(floats(x).unwrap(), &xs)?.cast(dtype)?;
        let f = Tensor::from_vec(floats(f).unwrap(), &fs)?.cast(dtype)?;
        let tape = GradientTape::new();
        let (y, s) = tape.record(|| {
            tape.watch(&x);
            tape.watch(&f);
            let y = apply(op, &x, &f, &st, &dil, pad, &out)?;
            let s = weighted(&y)?;
            Ok((y, s))
        })?;
        let g = tape.gradient(&s, &[x.clone(), f.clone()])?;
        // f32: TensorFlow's and these sums round in another order
        let rel = if dtype == DType::F32 { 2e-5 } else { 1e-12 };
        let results = [("value", Some(y)), ("dx", g[0].clone()), ("dfilter", g[1].clone())];
        for ((what, got), want) in results.into_iter().zip([value, dx, df]) {
            checked += 1;
            assert_eq!(got.as_ref().map(|t| t.dtype()), Some(dtype), "{op} {what}");
            let got = got.map(|t| t.to_vec_f64()).unwrap_or_default();
            let want = floats(want).unwrap();
            if !all_agree(&got, &want, rel, magnitude(&want)) {
                bad.push(format!(
                    "{op} {dt} x {xs:?} f {fs:?} {what}: got {got:?}, TensorFlow {want:?}"
                ));
            }
        }
    }
    report(checked, 80, &bad);
    assert!(groups_seen.is_superset(&[2, 4].into()), "groups {groups_seen:?}");
    Ok(())
}

const DATA: &str = include_str!("../data/tf_conv_groups.txt");
