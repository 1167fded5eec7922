//! Convolutions and pools: every op through the gradient checker (first and
//! second order), then exact values against naive reference loops written
//! here (TensorFlow's padding rule re-derived independently), over every
//! padding / stride / dilation combination at small sizes.

use crate::common;

use common::*;
use gradtape::{GradientOptions, GradientTape, Padding, Result, Tensor};

use Padding::{Same, Valid};

fn table() -> Vec<Case> {
    let mut t = Vec::new();
    let one: &[(&str, Op, &[usize], &[usize])] = &[
        // conv2d (x, f)
        (
            "conv2d same s1",
            |x| sq(x[0].conv2d(&x[1], [1, 1], Same, [1, 1])),
            &[2, 5, 5, 2],
            &[3, 3, 2, 3],
        ),
        (
            "conv2d valid s2",
            |x| sq(x[0].conv2d(&x[1], [2, 2], Valid, [1, 1])),
            &[2, 6, 5, 2],
            &[3, 2, 2, 2],
        ),
        (
            "conv2d same s2 odd",
            |x| sq(x[0].conv2d(&x[1], [2, 2], Same, [1, 1])),
            &[1, 5, 7, 3],
            &[3, 3, 3, 2],
        ),
        (
            "conv2d same s3x1 even k",
            |x| sq(x[0].conv2d(&x[1], [3, 1], Same, [1, 1])),
            &[2, 7, 4, 1],
            &[2, 4, 1, 2],
        ),
        (
            "conv2d same dilation 2",
            |x| sq(x[0].conv2d(&x[1], [1, 1], Same, [2, 2])),
            &[1, 6, 6, 2],
            &[2, 2, 2, 2],
        ),
        (
            "conv2d valid s2 d2",
            |x| sq(x[0].conv2d(&x[1], [2, 1], Valid, [2, 2])),
            &[2, 7, 6, 1],
            &[2, 3, 1, 2],
        ),
        (
            "conv2d 1x1",
            |x| sq(x[0].conv2d(&x[1], [1, 1], Valid, [1, 1])),
            &[2, 3, 3, 2],
            &[1, 1, 2, 3],
        ),
        (
            "conv2d zero batch",
            |x| sq(x[0].conv2d(&x[1], [1, 1], Same, [1, 1])),
            &[0, 3, 3, 2],
            &[2, 2, 2, 2],
        ),
        (
            "conv2d f32 inside",
            |x| {
                sq(x[0]
                    .cast(gradtape::DType::F32)?
                    .conv2d(&x[1].cast(gradtape::DType::F32)?, [2, 2], Same, [1, 1])?
                    .cast(gradtape::DType::F64))
            },
            &[1, 4, 4, 2],
            &[3, 3, 2, 2],
        ),
        // conv2d_backprop_input (f, dy)
        (
            "conv2d_backprop_input same s2",
            |x| {
                sq(Tensor::conv2d_backprop_input(
                    &[2, 5, 5, 2],
                    &x[0],
                    &x[1],
                    [2, 2],
                    Same,
                    [1, 1],
                ))
            },
            &[3, 3, 2, 3],
            &[2, 3, 3, 3],
        ),
        (
            "conv2d_backprop_input valid d2",
            |x| {
                sq(Tensor::conv2d_backprop_input(
                    &[1, 6, 5, 2],
                    &x[0],
                    &x[1],
                    [1, 1],
                    Valid,
                    [2, 2],
                ))
            },
            &[2, 2, 2, 3],
            &[1, 4, 3, 3],
        ),
        // conv2d_backprop_filter (x, dy)
        (
            "conv2d_backprop_filter same s2",
            |x| {
                sq(Tensor::conv2d_backprop_filter(
                    &x[0],
                    &[3, 3, 2, 3],
                    &x[1],
                    [2, 2],
                    Same,
                    [1, 1],
                ))
            },
            &[2, 5, 5, 2],
            &[2, 3, 3, 3],
        ),
        (
            "conv2d_backprop_filter valid s1 d2",
            |x| {
                sq(Tensor::conv2d_backprop_filter(
                    &x[0],
                    &[2, 2, 2, 1],
                    &x[1],
                    [1, 1],
                    Valid,
                    [2, 2],
                ))
            },
            &[2, 5, 4, 2],
            &[2, 3, 2, 1],
        ),
        // conv2d_transpose (x, f[h, w, out, in])
        (
            "conv2d_transpose same s2",
            |x| sq(x[0].conv2d_transpose(&x[1], &[2, 6, 6, 3], [2, 2], Same, [1, 1])),
            &[2, 3, 3, 2],
            &[3, 3, 3, 2],
        ),
        (
            "conv2d_transpose valid s2 odd",
            |x| sq(x[0].conv2d_transpose(&x[1], &[1, 7, 5, 2], [2, 2], Valid, [1, 1])),
            &[1, 3, 2, 2],
            &[3, 2, 2, 2],
        ),
        // conv1d (x [n, w, c], f [k, c, o])
        (
            "conv1d same s2",
            |x| sq(x[0].conv1d(&x[1], 2, Same, 1)),
            &[2, 7, 3],
            &[3, 3, 2],
        ),
        (
            "conv1d valid d2",
            |x| sq(x[0].conv1d(&x[1], 1, Valid, 2)),
            &[2, 8, 2],
            &[3, 2, 2],
        ),
        // depthwise (x, f [h, w, c, m])
        (
            "depthwise_conv2d same s1 m2",
            |x| sq(x[0].depthwise_conv2d(&x[1], [1, 1], Same, [1, 1])),
            &[2, 4, 5, 2],
            &[3, 3, 2, 2],
        ),
        (
            "depthwise_conv2d valid s2 m1",
            |x| sq(x[0].depthwise_conv2d(&x[1], [2, 2], Valid, [1, 1])),
            &[2, 5, 6, 3],
            &[2, 3, 3, 1],
        ),
        (
            "depthwise_conv2d same d2",
            |x| sq(x[0].depthwise_conv2d(&x[1], [1, 1], Same, [2, 2])),
            &[1, 5, 5, 2],
            &[2, 2, 2, 3],
        ),
        (
            "depthwise_conv2d_backprop_input",
            |x| {
                sq(Tensor::depthwise_conv2d_backprop_input(
                    &[2, 5, 5, 2],
                    &x[0],
                    &x[1],
                    [2, 2],
                    Same,
                    [1, 1],
                ))
            },
            &[3, 3, 2, 2],
            &[2, 3, 3, 4],
        ),
        (
            "depthwise_conv2d_backprop_filter",
            |x| {
                sq(Tensor::depthwise_conv2d_backprop_filter(
                    &x[0],
                    &[2, 3, 2, 2],
                    &x[1],
                    [1, 2],
                    Valid,
                    [1, 1],
                ))
            },
            &[2, 4, 6, 2],
            &[2, 3, 2, 4],
        ),
    ];
    for &(name, f, a, b) in one {
        let c = case(name, f, &[(a, Any), (b, Any)]);
        t.push(if name.contains("f32") { c.loose() } else { c });
    }
    // pools: one input
    let pools: &[(&str, Op, &[usize], Dom)] = &[
        (
            "max_pool2d same 2x2 s2",
            |x| sq(x[0].max_pool2d([2, 2], [2, 2], Same)),
            &[1, 5, 5, 2],
            Distinct,
        ),
        (
            "max_pool2d valid 3x3 s1",
            |x| sq(x[0].max_pool2d([3, 3], [1, 1], Valid)),
            &[2, 4, 5, 1],
            Distinct,
        ),
        (
            "max_pool2d same 3x2 s2x1",
            |x| sq(x[0].max_pool2d([3, 2], [2, 1], Same)),
            &[1, 5, 3, 3],
            Distinct,
        ),
        (
            "max_pool2d zero batch",
            |x| sq(x[0].max_pool2d([2, 2], [2, 2], Same)),
            &[0, 4, 4, 2],
            Distinct,
        ),
        (
            "avg_pool2d same 2x2 s2",
            |x| sq(x[0].avg_pool2d([2, 2], [2, 2], Same)),
            &[2, 5, 5, 2],
            Any,
        ),
        (
            "avg_pool2d valid 3x3 s1",
            |x| sq(x[0].avg_pool2d([3, 3], [1, 1], Valid)),
            &[2, 4, 5, 1],
            Any,
        ),
        (
            "avg_pool2d same 3x3 s1",
            |x| sq(x[0].avg_pool2d([3, 3], [1, 1], Same)),
            &[1, 4, 3, 3],
            Any,
        ),
        (
            "avg_pool2d same 2x3 s2x3",
            |x| sq(x[0].avg_pool2d([2, 3], [2, 3], Same)),
            &[2, 5, 7, 2],
            Any,
        ),
        (
            "avg_pool2d_grad same",
            |x| sq(x[0].avg_pool2d_grad(&[2, 5, 5, 2], [3, 3], [2, 2], Same)),
            &[2, 3, 3, 2],
            Any,
        ),
        (
            "avg_pool2d_grad valid",
            |x| sq(x[0].avg_pool2d_grad(&[1, 5, 4, 3], [2, 2], [2, 1], Valid)),
            &[1, 2, 3, 3],
            Any,
        ),
    ];
    for &(name, f, s, d) in pools {
        t.push(case(name, f, &[(s, d)]));
    }
    // a small network: conv, relu, pool, conv, mean — second order through all of it
    t.push(case(
        "conv2d chain",
        |x| {
            let h = x[0]
                .conv2d(&x[1], [1, 1], Same, [1, 1])?
                .tanh()?
                .avg_pool2d([2, 2], [2, 2], Same)?;
            h.conv2d(&x[2], [1, 1], Valid, [1, 1])?.square()?.sum_all()
        },
        &[(&[2, 4, 4, 1], Any), (&[2, 2, 1, 2], Any), (&[2, 2, 2, 1], Any)],
    ));
    t
}

const REQUIRED: &[&str] = &[
    "conv2d same",
    "conv2d valid",
    "conv2d_backprop_input",
    "conv2d_backprop_filter",
    "conv2d_transpose",
    "conv1d",
    "depthwise_conv2d same",
    "depthwise_conv2d_backprop_input",
    "depthwise_conv2d_backprop_filter",
    "max_pool2d",
    "avg_pool2d",
    "avg_pool2d_grad",
];

#[test]
fn every_conv_op_passes_the_gradient_checker() {
    run_table(&table(), REQUIRED, 30, 3000);
}

// ---------------------------------------------------------------------------
// Naive references (f64, NHWC), TensorFlow's output size and padding split.

/// (output size, padding before) for one dim.
fn tf_dim(input: usize, k: usize, s: usize, d: usize, p: Padding) -> (usize, usize) {
    let eff = (k - 1) * d + 1;
    match p {
        Same => {
            let out = input.div_ceil(s);
            let need = (out as i64 - 1) * s as i64 + eff as i64 - input as i64;
            (out, (need.max(0) / 2) as usize)
        }
        Valid => ((input + s - eff) / s, 0),
    }
}

struct Sizes {
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    kh: usize,
    kw: usize,
    s: [usize; 2],
    d: [usize; 2],
    p: Padding,
}

impl Sizes {
    fn out(&self) -> (usize, usize, usize, usize) {
        let (oh, pt) = tf_dim(self.h, self.kh, self.s[0], self.d[0], self.p);
        let (ow, pl) = tf_dim(self.w, self.kw, self.s[1], self.d[1], self.p);
        (oh, ow, pt, pl)
    }
    /// Calls `f(n, oh, ow, kh, kw, ih, iw)` for every in-range tap.
    fn taps(&self, mut f: impl FnMut(usize, usize, usize, usize, usize, usize, usize)) {
        let (oh_n, ow_n, pt, pl) = self.out();
        for n in 0..self.n {
            for oh in 0..oh_n {
                for ow in 0..ow_n {
                    for kh in 0..self.kh {
                        for kw in 0..self.kw {
                            let ih = (oh * self.s[0] + kh * self.d[0]) as i64 - pt as i64;
                            let iw = (ow * self.s[1] + kw * self.d[1]) as i64 - pl as i64;
                            if ih >= 0 && iw >= 0 && (ih as usize) < self.h && (iw as usize) < self.w {
                                f(n, oh, ow, kh, kw, ih as usize, iw as usize);
                            }
                        }
                    }
                }
            }
        }
    }
}

fn vals(n: usize, k: f64) -> Vec<f64> {
    (0..n)
        .map(|i| ((0.61 * i as f64 + k).sin() * 4.0).round() / 4.0)
        .collect()
}

fn close(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-9 * (1.0 + y.abs()),
            "{what}: element {i}: {x} vs {y}"
        );
    }
}

fn combos() -> Vec<Sizes> {
    let mut v = Vec::new();
    for p in [Same, Valid] {
        for s in [[1, 1], [2, 2], [3, 1], [1, 2]] {
            for d in [[1, 1], [2, 2], [1, 3]] {
                for (h, w, kh, kw) in [(5, 6, 3, 3), (4, 4, 2, 2), (7, 3, 1, 2), (1, 5, 1, 3)] {
                    let s_ = Sizes {
                        n: 2,
                        h,
                        w,
                        c: 2,
                        kh,
                        kw,
                        s,
                        d,
                        p,
                    };
                    if p == Valid && (h < (kh - 1) * d[0] + 1 || w < (kw - 1) * d[1] + 1) {
                        continue;
                    }
                    v.push(s_);
                }
            }
        }
    }
    v
}

#[test]
fn conv2d_and_its_adjoints_match_naive_loops() {
    let o = 3;
    for z in combos() {
        let (oh, ow, _, _) = z.out();
        let (xs, fs, ys) = ([z.n, z.h, z.w, z.c], [z.kh, z.kw, z.c, o], [z.n, oh, ow, o]);
        let xv = vals(xs.iter().product(), 0.3);
        let fv = vals(fs.iter().product(), 1.1);
        let dyv = vals(ys.iter().product(), 2.7);
        let xi = |n: usize, h: usize, w: usize, c: usize| ((n * z.h + h) * z.w + w) * z.c + c;
        let fi = |kh: usize, kw: usize, c: usize, q: usize| ((kh * z.kw + kw) * z.c + c) * o + q;
        let yi = |n: usize, h: usize, w: usize, q: usize| ((n * oh + h) * ow + w) * o + q;
        let (mut y, mut dx, mut df) = (vec![0.0; dyv.len()], vec![0.0; xv.len()], vec![0.0; fv.len()]);
        z.taps(|n, a, b, kh, kw, ih, iw| {
            for c in 0..z.c {
                for q in 0..o {
                    y[yi(n, a, b, q)] += xv[xi(n, ih, iw, c)] * fv[fi(kh, kw, c, q)];
                    dx[xi(n, ih, iw, c)] += dyv[yi(n, a, b, q)] * fv[fi(kh, kw, c, q)];
                    df[fi(kh, kw, c, q)] += xv[xi(n, ih, iw, c)] * dyv[yi(n, a, b, q)];
                }
            }
        });
        let (s, d) = ([z.s[0] as i64, z.s[1] as i64], [z.d[0] as i64, z.d[1] as i64]);
        let what = format!("x {xs:?} f {fs:?} s {s:?} d {d:?} {:?}", z.p);
        for f32_ in [false, true] {
            let t = |v: &[f64], sh: &[usize]| {
                let t = Tensor::from_vec(v.to_vec(), sh).unwrap();
                if f32_ {
                    t.cast(gradtape::DType::F32).unwrap()
                } else {
                    t
                }
            };
            let (x, f, dy) = (t(&xv, &xs), t(&fv, &fs), t(&dyv, &ys));
            let got = x.conv2d(&f, s, z.p, d).unwrap();
            assert_eq!(got.shape(), &ys, "{what}");
            let tol = |a: &Tensor| a.cast(gradtape::DType::F64).unwrap().to_vec::<f64>().unwrap();
            let cmp = |a: &[f64], b: &[f64], w: &str| {
                if f32_ {
                    for (i, (p, q)) in a.iter().zip(b).enumerate() {
                        assert!((p - q).abs() <= 1e-4 * (1.0 + q.abs()), "{w} f32 {i}: {p} vs {q}");
                    }
                } else {
                    close(a, b, w)
                }
            };
            cmp(&tol(&got), &y, &format!("conv2d {what}"));
            let gx = Tensor::conv2d_backprop_input(&xs, &f, &dy, s, z.p, d).unwrap();
            cmp(&tol(&gx), &dx, &format!("backprop_input {what}"));
            let gf = Tensor::conv2d_backprop_filter(&x, &fs, &dy, s, z.p, d).unwrap();
            cmp(&tol(&gf), &df, &format!("backprop_filter {what}"));
            // conv2d_transpose is backprop_input with the filter read as [h, w, out, in]
            let tr = dy.conv2d_transpose(&f, &xs, s, z.p, d).unwrap();
            cmp(&tol(&tr), &dx, &format!("conv2d_transpose {what}"));
        }
        // the tape gives the same adjoints
        let (x, f, dy) = (
            Tensor::from_vec(xv.clone(), &xs).unwrap(),
            Tensor::from_vec(fv.clone(), &fs).unwrap(),
            Tensor::from_vec(dyv.clone(), &ys).unwrap(),
        );
        let tape = GradientTape::new();
        let l = tape
            .record(|| {
                tape.watch(&[x.clone(), f.clone()]);
                x.conv2d(&f, s, z.p, d)?.mul(&dy)?.sum_all()
            })
            .unwrap();
        let g = tape.gradient(&l, &[x.clone(), f.clone()]).unwrap();
        close(
            &g[0].as_ref().unwrap().to_vec::<f64>().unwrap(),
            &dx,
            &format!("tape dx {what}"),
        );
        close(
            &g[1].as_ref().unwrap().to_vec::<f64>().unwrap(),
            &df,
            &format!("tape df {what}"),
        );
    }
}

#[test]
fn depthwise_and_its_adjoints_match_naive_loops() {
    let m = 2;
    for z in combos() {
        let (oh, ow, _, _) = z.out();
        let cm = z.c * m;
        let (xs, fs, ys) = ([z.n, z.h, z.w, z.c], [z.kh, z.kw, z.c, m], [z.n, oh, ow, cm]);
        let xv = vals(xs.iter().product(), 0.2);
        let fv = vals(fs.iter().product(), 1.4);
        let dyv = vals(ys.iter().product(), 2.1);
        let xi = |n: usize, h: usize, w: usize, c: usize| ((n * z.h + h) * z.w + w) * z.c + c;
        let fi = |kh: usize, kw: usize, c: usize, q: usize| ((kh * z.kw + kw) * z.c + c) * m + q;
        let yi = |n: usize, h: usize, w: usize, c: usize, q: usize| ((n * oh + h) * ow + w) * cm + c * m + q;
        let (mut y, mut dx, mut df) = (vec![0.0; dyv.len()], vec![0.0; xv.len()], vec![0.0; fv.len()]);
        z.taps(|n, a, b, kh, kw, ih, iw| {
            for c in 0..z.c {
                for q in 0..m {
                    y[yi(n, a, b, c, q)] += xv[xi(n, ih, iw, c)] * fv[fi(kh, kw, c, q)];
                    dx[xi(n, ih, iw, c)] += dyv[yi(n, a, b, c, q)] * fv[fi(kh, kw, c, q)];
                    df[fi(kh, kw, c, q)] += xv[xi(n, ih, iw, c)] * dyv[yi(n, a, b, c, q)];
                }
            }
        });
        let (s, d) = ([z.s[0] as i64, z.s[1] as i64], [z.d[0] as i64, z.d[1] as i64]);
        let what = format!("x {xs:?} f {fs:?} s {s:?} d {d:?} {:?}", z.p);
        let (x, f, dyt) = (
            Tensor::from_vec(xv.clone(), &xs).unwrap(),
            Tensor::from_vec(fv.clone(), &fs).unwrap(),
            Tensor::from_vec(dyv.clone(), &ys).unwrap(),
        );
        let got = x.depthwise_conv2d(&f, s, z.p, d).unwrap();
        assert_eq!(got.shape(), &ys, "{what}");
        close(&got.to_vec::<f64>().unwrap(), &y, &format!("depthwise {what}"));
        let gx = Tensor::depthwise_conv2d_backprop_input(&xs, &f, &dyt, s, z.p, d).unwrap();
        close(&gx.to_vec::<f64>().unwrap(), &dx, &format!("depthwise input {what}"));
        let gf = Tensor::depthwise_conv2d_backprop_filter(&x, &fs, &dyt, s, z.p, d).unwrap();
        close(&gf.to_vec::<f64>().unwrap(), &df, &format!("depthwise filter {what}"));
    }
}

#[test]
fn conv1d_matches_a_naive_loop() {
    for p in [Same, Valid] {
        for s in [1usize, 2, 3] {
            for d in [1usize, 2] {
                let (n, w, c, k, o) = (2, 7, 2, 3, 2);
                let (ow, pl) = tf_dim(w, k, s, d, p);
                let xv = vals(n * w * c, 0.5);
                let fv = vals(k * c * o, 0.9);
                let mut y = vec![0.0; n * ow * o];
                for b in 0..n {
                    for j in 0..ow {
                        for t in 0..k {
                            let i = (j * s + t * d) as i64 - pl as i64;
                            if i < 0 || i as usize >= w {
                                continue;
                            }
                            for ci in 0..c {
                                for q in 0..o {
                                    y[(b * ow + j) * o + q] +=
                                        xv[(b * w + i as usize) * c + ci] * fv[(t * c + ci) * o + q];
                                }
                            }
                        }
                    }
                }
                let x = Tensor::from_vec(xv, &[n, w, c]).unwrap();
                let f = Tensor::from_vec(fv, &[k, c, o]).unwrap();
                let got = x.conv1d(&f, s as i64, p, d as i64).unwrap();
                assert_eq!(got.shape(), &[n, ow, o]);
                close(&got.to_vec::<f64>().unwrap(), &y, &format!("conv1d s {s} d {d} {p:?}"));
            }
        }
    }
}

#[test]
fn pools_match_naive_loops() {
    for p in [Same, Valid] {
        for s in [[1, 1], [2, 2], [3, 2]] {
            for (h, w, kh, kw) in [(5, 6, 3, 3), (4, 4, 2, 2), (7, 3, 1, 2), (2, 5, 3, 3)] {
                let z = Sizes {
                    n: 2,
                    h,
                    w,
                    c: 3,
                    kh,
                    kw,
                    s,
                    d: [1, 1],
                    p,
                };
                if p == Valid && (h < kh || w < kw) {
                    continue;
                }
                let (oh, ow, _, _) = z.out();
                let c = z.c;
                let xv = vals(z.n * h * w * c, 0.7); // quarter steps: ties happen
                let gv = vals(z.n * oh * ow * c, 1.9);
                let ny = z.n * oh * ow * c;
                let (mut mx, mut arg, mut sum, mut cnt) = (
                    vec![f64::NEG_INFINITY; ny],
                    vec![usize::MAX; ny],
                    vec![0.0; ny],
                    vec![0.0; ny],
                );
                z.taps(|n, a, b, _, _, ih, iw| {
                    for ci in 0..c {
                        let (yi, xi) = (((n * oh + a) * ow + b) * c + ci, ((n * h + ih) * w + iw) * c + ci);
                        if xv[xi] > mx[yi] {
                            mx[yi] = xv[xi];
                            arg[yi] = xi;
                        }
                        sum[yi] += xv[xi];
                        cnt[yi] += 1.0;
                    }
                });
                let avg: Vec<f64> = sum.iter().zip(&cnt).map(|(s, c)| s / c).collect();
                let mut dmax = vec![0.0; xv.len()];
                let mut davg = vec![0.0; xv.len()];
                for (yi, &a) in arg.iter().enumerate() {
                    dmax[a] += gv[yi];
                }
                z.taps(|n, a, b, _, _, ih, iw| {
                    for ci in 0..c {
                        let yi = ((n * oh + a) * ow + b) * c + ci;
                        davg[((n * h + ih) * w + iw) * c + ci] += gv[yi] / cnt[yi];
                    }
                });
                let what = format!("x [2,{h},{w},3] k [{kh},{kw}] s {s:?} {p:?}");
                let x = Tensor::from_vec(xv.clone(), &[z.n, h, w, c]).unwrap();
                let g = Tensor::from_vec(gv.clone(), &[z.n, oh, ow, c]).unwrap();
                let (k2, s2) = ([kh as i64, kw as i64], [s[0] as i64, s[1] as i64]);
                let tape = GradientTape::persistent();
                let (ym, ya) = tape
                    .record(|| {
                        tape.watch(&x);
                        Ok::<_, gradtape::Error>((x.max_pool2d(k2, s2, p)?, x.avg_pool2d(k2, s2, p)?))
                    })
                    .unwrap();
                assert_eq!(ym.shape(), &[z.n, oh, ow, c], "{what}");
                close(&ym.to_vec::<f64>().unwrap(), &mx, &format!("max_pool {what}"));
                close(&ya.to_vec::<f64>().unwrap(), &avg, &format!("avg_pool {what}"));
                let gm = grad_weighted(&tape, &ym, &x, &g).unwrap();
                close(&gm, &dmax, &format!("max_pool grad (first max wins ties) {what}"));
                let ga = grad_weighted(&tape, &ya, &x, &g).unwrap();
                close(&ga, &davg, &format!("avg_pool grad {what}"));
                // f32 agrees
                let y32 = x.cast(gradtape::DType::F32).unwrap().max_pool2d(k2, s2, p).unwrap();
                close(
                    &y32.cast(gradtape::DType::F64).unwrap().to_vec::<f64>().unwrap(),
                    &mx,
                    &what,
                );
            }
        }
    }
}

/// d/dx of `y` weighted by the output gradient `g`, as a dense vector.
fn grad_weighted(tape: &GradientTape, y: &Tensor, x: &Tensor, g: &Tensor) -> Result<Vec<f64>> {
    let opts = GradientOptions::default().output_gradients(vec![g.clone()]);
    let d = tape.gradient_with(y, x, opts)?;
    d.ok_or_else(|| gradtape::Error::GradientCheck("no gradient".into()))?
        .to_vec::<f64>()
}

#[test]
fn max_pool_ties_go_to_the_first_maximum() {
    // every element equal: the whole gradient lands on each window's first element
    let x = Tensor::full(&[1, 4, 4, 1], 2.0, gradtape::DType::F64);
    let tape = GradientTape::new();
    let y = tape
        .record(|| {
            tape.watch(&x);
            x.max_pool2d([2, 2], [2, 2], Valid)?.sum_all()
        })
        .unwrap();
    let g = tape.gradient(&y, &x).unwrap().unwrap().to_vec::<f64>().unwrap();
    let mut want = vec![0.0; 16];
    for i in [0, 2, 8, 10] {
        want[i] = 1.0;
    }
    assert_eq!(g, want);
}

#[test]
fn hand_computed_values() {
    // 3x3 input 1..9, 2x2 filter [[1,0],[0,-1]] stride 1 SAME: pad only after
    let x = Tensor::from_vec((1..=9).map(f64::from).collect(), &[1, 3, 3, 1]).unwrap();
    let f = Tensor::from_vec(vec![1.0f64, 0.0, 0.0, -1.0], &[2, 2, 1, 1]).unwrap();
    let y = x.conv2d(&f, [1, 1], Same, [1, 1]).unwrap();
    // y[i,j] = x[i,j] - x[i+1,j+1] (0 outside)
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![-4., -4., 3., -4., -4., 6., 7., 8., 9.]);
    // stride 2 SAME on 3x3 with a 2x2 filter: out 2x2, pad_total 1 -> 0 before
    let y2 = x.conv2d(&f, [2, 2], Same, [1, 1]).unwrap();
    assert_eq!(y2.to_vec::<f64>().unwrap(), vec![-4., 3., 7., 9.]);
    // 3x3 filter of ones, dilation 2 on a 5x5 VALID: sum of the 9 positions (even rows/cols)
    let x5 = Tensor::from_vec((0..25).map(f64::from).collect(), &[1, 5, 5, 1]).unwrap();
    let ones = Tensor::ones(&[3, 3, 1, 1], gradtape::DType::F64);
    let yd = x5.conv2d(&ones, [1, 1], Valid, [2, 2]).unwrap();
    assert_eq!(yd.to_vec::<f64>().unwrap(), vec![(0. + 2. + 4.) * 3. + 30. * 3.]);
    // SAME 3x3 stride 2 on 4x4: out 2, pad_total 1: 0 top, 1 bottom
    let x4 = Tensor::from_vec((0..16).map(f64::from).collect(), &[1, 4, 4, 1]).unwrap();
    let y4 = x4.conv2d(&ones, [2, 2], Same, [1, 1]).unwrap();
    let s =
        |r: &[usize], c: &[usize]| -> f64 { r.iter().flat_map(|&i| c.iter().map(move |&j| (i * 4 + j) as f64)).sum() };
    assert_eq!(
        y4.to_vec::<f64>().unwrap(),
        vec![
            s(&[0, 1, 2], &[0, 1, 2]),
            s(&[0, 1, 2], &[2, 3]),
            s(&[2, 3], &[0, 1, 2]),
            s(&[2, 3], &[2, 3])
        ]
    );
    // avg pool SAME 3x3 stride 1 on 2x2: every window sees all 4 -> mean 2.5
    let x2 = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[1, 2, 2, 1]).unwrap();
    assert_eq!(
        x2.avg_pool2d([3, 3], [1, 1], Same).unwrap().to_vec::<f64>().unwrap(),
        vec![2.5; 4]
    );
}
