//! Never-panic property test for the convolution and pooling ops: random
//! ranks, dims (zero included), dtypes, strides / dilations / window sizes
//! (zero and negative included), paddings and backprop shapes. Each call runs
//! under `catch_unwind`; an `Ok` result must have the input's dtype and the
//! shape TensorFlow's rule gives (re-derived here).

use std::panic::{catch_unwind, AssertUnwindSafe};

use gradtape::{DType, Padding, Result, Tensor};

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
    fn dims(&mut self, rank: usize) -> Vec<usize> {
        (0..rank).map(|_| self.below(5) as usize).collect()
    }
    fn dtype(&mut self) -> DType {
        // mostly floats, so that many calls get past the dtype check
        [
            DType::F32,
            DType::F64,
            DType::F64,
            DType::F32,
            DType::I32,
            DType::I64,
            DType::Bool,
        ][self.below(7) as usize]
    }
    fn padding(&mut self) -> Padding {
        if self.below(2) == 0 {
            Padding::Same
        } else {
            Padding::Valid
        }
    }
    fn pair(&mut self) -> [i64; 2] {
        // mostly valid values, sometimes 0 or negative
        let mut one = || {
            if self.below(6) == 0 {
                self.int(-2, 0)
            } else {
                self.int(1, 3)
            }
        };
        [one(), one()]
    }
    fn tensor(&mut self, shape: &[usize], dtype: DType) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n).map(|_| self.int(-4, 4) as f64 * 0.5).collect();
        Tensor::from_vec(v, shape).unwrap().cast(dtype).unwrap()
    }
    /// A shape of rank `want` most of the time, any rank 0-4 otherwise.
    fn shape(&mut self, want: usize) -> Vec<usize> {
        let r = if self.below(5) == 0 {
            self.below(5) as usize
        } else {
            want
        };
        self.dims(r)
    }
}

/// TensorFlow's output size of one dim; `None` when the op must fail.
fn tf_dim(input: usize, k: usize, s: i64, d: i64, p: Padding) -> Option<usize> {
    if s < 1 || d < 1 {
        return None;
    }
    let (s, d) = (s as usize, d as usize);
    match p {
        Padding::Same => Some(input.div_ceil(s)),
        Padding::Valid => {
            let eff = (k.checked_sub(1)?) * d + 1;
            (input >= eff).then(|| (input - eff) / s + 1)
        }
    }
}

/// The expected [n, oh, ow, _] of a window op, or `None`.
fn out4(x: &[usize], k: [usize; 2], s: [i64; 2], d: [i64; 2], p: Padding) -> Option<[usize; 3]> {
    Some([
        x[0],
        tf_dim(x[1], k[0], s[0], d[0], p)?,
        tf_dim(x[2], k[1], s[1], d[1], p)?,
    ])
}

/// Whether `c` input channels and a filter of `fc` in and `fo` out
/// channels make a (possibly grouped) dense convolution: `c` a multiple
/// `groups` of `fc`, `fo` a multiple of `groups`.
fn groups_fit(c: usize, fc: usize, fo: usize) -> bool {
    c == fc || (fc > 0 && c > 0 && c.is_multiple_of(fc) && fo.is_multiple_of(c / fc))
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64)
}

/// Runs `f` under catch_unwind; on `Ok`, checks the shape against `want`
/// (which must then be `Some`) and the dtype.
fn check(name: &str, i: usize, dtype: DType, want: Option<Vec<usize>>, f: impl FnOnce() -> Result<Tensor>) -> bool {
    let r = catch_unwind(AssertUnwindSafe(f));
    let r = r.unwrap_or_else(|_| panic!("{name}: draw {i} panicked"));
    if let Ok(y) = r {
        let want = want.unwrap_or_else(|| panic!("{name}: draw {i}: Ok({:?}) where an error was expected", y.shape()));
        assert_eq!(y.shape(), &want[..], "{name}: draw {i}: output shape");
        assert_eq!(y.dtype(), dtype, "{name}: draw {i}: output dtype");
        true
    } else {
        false
    }
}

const DRAWS: usize = 400;

#[test]
fn conv_ops_never_panic() {
    let mut g = Lcg(0x5eed_c0de);
    let mut oks = [0usize; 8];
    for i in 0..DRAWS {
        let dt = g.dtype();
        let dt2 = if g.below(8) == 0 { g.dtype() } else { dt };
        let xs = g.shape(4);
        let mut fs = g.shape(4);
        if xs.len() == 4 && fs.len() == 4 && g.below(4) != 0 {
            fs[2] = xs[3]; // usually matching channels
        }
        let (s, d, p) = (g.pair(), g.pair(), g.padding());
        let (x, f) = (g.tensor(&xs, dt), g.tensor(&fs, dt2));
        let shapes_ok = is_float(dt) && xs.len() == 4 && fs.len() == 4 && groups_fit(xs[3], fs[2], fs[3]);
        // `of`: geometry for the ops that read the filter tensor (dtypes must agree)
        let o = if shapes_ok {
            out4(&xs, [fs[0], fs[1]], s, d, p)
        } else {
            None
        };
        let of = o.filter(|_| dt == dt2);
        // conv2d / depthwise
        let want = of.map(|o| vec![o[0], o[1], o[2], fs[3]]);
        oks[0] += check("conv2d", i, dt, want, || x.conv2d(&f, s, p, d)) as usize;
        // (a depthwise filter's in-channels are the input's: no groups)
        let exact = xs.len() == 4 && fs.len() == 4 && xs[3] == fs[2];
        let want = of.filter(|_| exact).map(|o| vec![o[0], o[1], o[2], fs[2] * fs[3]]);
        oks[1] += check("depthwise_conv2d", i, dt, want, || x.depthwise_conv2d(&f, s, p, d)) as usize;
        // backprop ops: out_backprop usually of the right shape
        let dyshape = match (o, g.below(3)) {
            (Some(o), 0 | 1) => vec![o[0], o[1], o[2], fs.get(3).copied().unwrap_or(0)],
            _ => g.shape(4),
        };
        let dy = g.tensor(&dyshape, dt);
        let ok_dy = o.is_some_and(|o| dyshape == [o[0], o[1], o[2], fs[3]]);
        let want = (ok_dy && dt == dt2).then(|| xs.clone());
        oks[2] += check("conv2d_backprop_input", i, dt, want.clone(), || {
            Tensor::conv2d_backprop_input(&xs, &f, &dy, s, p, d)
        }) as usize;
        oks[3] += check("conv2d_transpose", i, dt, want, || {
            dy.conv2d_transpose(&f, &xs, s, p, d)
        }) as usize;
        let want = ok_dy.then(|| fs.clone());
        oks[4] += check("conv2d_backprop_filter", i, dt, want, || {
            Tensor::conv2d_backprop_filter(&x, &fs, &dy, s, p, d)
        }) as usize;
        let okdw = exact && o.is_some_and(|o| dyshape == [o[0], o[1], o[2], fs[2] * fs[3]]);
        check(
            "depthwise_conv2d_backprop_input",
            i,
            dt,
            (okdw && dt == dt2).then(|| xs.clone()),
            || Tensor::depthwise_conv2d_backprop_input(&xs, &f, &dy, s, p, d),
        );
        check(
            "depthwise_conv2d_backprop_filter",
            i,
            dt,
            okdw.then(|| fs.clone()),
            || Tensor::depthwise_conv2d_backprop_filter(&x, &fs, &dy, s, p, d),
        );
        // conv1d
        let xs1 = g.shape(3);
        let mut fs1 = g.shape(3);
        if xs1.len() == 3 && fs1.len() == 3 && g.below(4) != 0 {
            fs1[1] = xs1[2];
        }
        let (x1, f1) = (g.tensor(&xs1, dt), g.tensor(&fs1, dt2));
        let (s1, d1) = (g.pair()[0], g.pair()[0]);
        let ok1 = is_float(dt) && dt == dt2 && xs1.len() == 3 && fs1.len() == 3 && groups_fit(xs1[2], fs1[1], fs1[2]);
        let want = ok1
            .then(|| tf_dim(xs1[1], fs1[0], s1, d1, p).map(|w| vec![xs1[0], w, fs1[2]]))
            .flatten();
        oks[5] += check("conv1d", i, dt, want, || x1.conv1d(&f1, s1, p, d1)) as usize;
    }
    // the draws reach the success paths too
    assert!(oks.iter().take(6).all(|&k| k > 10), "successful calls per op: {oks:?}");
}

#[test]
fn pool_ops_never_panic() {
    let mut g = Lcg(0x9001);
    let mut oks = [0usize; 3];
    for i in 0..DRAWS {
        let dt = g.dtype();
        let xs = g.shape(4);
        let (k, s, p) = (g.pair(), g.pair(), g.padding());
        let x = g.tensor(&xs, dt);
        let ok = is_float(dt) && xs.len() == 4 && k.iter().all(|&v| v >= 1);
        let o = if ok {
            out4(&xs, [k[0] as usize, k[1] as usize], s, [1, 1], p)
        } else {
            None
        };
        let want = o.map(|o| vec![o[0], o[1], o[2], xs[3]]);
        oks[0] += check("max_pool2d", i, dt, want.clone(), || x.max_pool2d(k, s, p)) as usize;
        oks[1] += check("avg_pool2d", i, dt, want, || x.avg_pool2d(k, s, p)) as usize;
        let gshape = match (o, g.below(3)) {
            (Some(o), 0 | 1) => vec![o[0], o[1], o[2], xs[3]],
            _ => g.shape(4),
        };
        let gy = g.tensor(&gshape, dt);
        let want = o.filter(|o| gshape == [o[0], o[1], o[2], xs[3]]).map(|_| xs.clone());
        oks[2] += check("avg_pool2d_grad", i, dt, want, || gy.avg_pool2d_grad(&xs, k, s, p)) as usize;
    }
    assert!(oks.iter().all(|&k| k > 20), "successful calls per op: {oks:?}");
}
