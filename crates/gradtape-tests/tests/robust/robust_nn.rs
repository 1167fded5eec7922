//! Never-panic property test for the neural-network and random ops: random
//! ranks, dims, dtypes, axes and labels; every call returns an error or a
//! result of the documented shape and dtype.

use std::panic::{catch_unwind, AssertUnwindSafe};

use gradtape::{Complex, DType, Result, Tensor};

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
        self.next() % n.max(1)
    }
    fn coin(&mut self) -> bool {
        self.below(2) == 0
    }
    fn shape(&mut self) -> Vec<usize> {
        let r = self.below(5) as usize;
        (0..r).map(|_| self.below(5) as usize).collect()
    }
    fn dtype(&mut self) -> DType {
        [
            DType::F32,
            DType::F64,
            DType::I32,
            DType::I64,
            DType::Bool,
            DType::C64,
            DType::C128,
        ][self.below(7) as usize]
    }
    fn float_dtype(&mut self) -> DType {
        if self.below(5) == 0 {
            self.dtype()
        } else if self.coin() {
            DType::F32
        } else {
            DType::F64
        }
    }
    /// A tensor of `shape` and `dtype` with small values (ints in -1..=4).
    fn tensor(&mut self, shape: &[usize], dtype: DType) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n).map(|_| self.below(6) as f64 - 1.0).collect();
        match dtype {
            DType::F32 => Tensor::from_vec(v.iter().map(|&x| x as f32 * 0.7).collect(), shape),
            DType::F64 => Tensor::from_vec(v.iter().map(|&x| x * 0.7).collect(), shape),
            DType::I32 => Tensor::from_vec(v.iter().map(|&x| x as i32).collect(), shape),
            DType::I64 => Tensor::from_vec(v.iter().map(|&x| x as i64).collect(), shape),
            DType::Bool => Tensor::from_vec(v.iter().map(|&x| x > 1.0).collect(), shape),
            DType::C64 => Tensor::from_vec(v.iter().map(|&x| Complex::new(x as f32, 0.5)).collect(), shape),
            DType::C128 => Tensor::from_vec(v.iter().map(|&x| Complex::new(x, -0.5)).collect(), shape),
            DType::F16 => Tensor::from_vec(v.iter().map(|&x| gradtape::f16::from_f64(x * 0.7)).collect(), shape),
            DType::BF16 => Tensor::from_vec(v.iter().map(|&x| gradtape::bf16::from_f64(x * 0.7)).collect(), shape),
        }
        .unwrap()
    }
    fn axis(&mut self, rank: usize) -> isize {
        self.below(2 * rank as u64 + 3) as isize - rank as isize - 1
    }
    /// Usually a shape related to `s` (itself, a suffix, or with a 1), else random.
    fn related(&mut self, s: &[usize]) -> Vec<usize> {
        match self.below(4) {
            0 => s.to_vec(),
            1 => s[self.below(s.len() as u64 + 1) as usize..].to_vec(),
            2 => s.iter().map(|&d| if self.coin() { 1 } else { d }).collect(),
            _ => self.shape(),
        }
    }
}

fn norm(axis: isize, rank: usize) -> usize {
    if axis < 0 {
        (axis + rank as isize) as usize
    } else {
        axis as usize
    }
}

fn reduced(shape: &[usize], axes: &[isize], keep: bool) -> Vec<usize> {
    let ax: Vec<usize> = axes.iter().map(|&a| norm(a, shape.len())).collect();
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| if ax.contains(&i) { keep.then_some(1) } else { Some(d) })
        .collect()
}

/// Runs one draw of op number `k`; returns (result, expected shape, expected dtype).
fn draw(g: &mut Lcg, k: usize) -> (Result<Tensor>, Vec<usize>, DType) {
    let s = g.shape();
    let dt = g.float_dtype();
    let x = g.tensor(&s, dt);
    let r = s.len();
    match k {
        0 | 1 => {
            let a = g.axis(r);
            let y = if k == 0 { x.softmax(a) } else { x.log_softmax(a) };
            (y, s, dt)
        }
        2 => {
            let ls = if g.coin() && r > 0 {
                s[..r - 1].to_vec()
            } else {
                g.shape()
            };
            let ldt = [DType::I32, DType::I64, g.dtype()][g.below(3) as usize];
            let labels = g.tensor(&ls, ldt);
            let out = if r > 0 { s[..r - 1].to_vec() } else { vec![] };
            (Tensor::sparse_softmax_cross_entropy_with_logits(&labels, &x), out, dt)
        }
        3 | 4 => {
            let ls = g.related(&s);
            let ldt = g.float_dtype();
            let labels = g.tensor(&ls, ldt);
            if k == 3 {
                let out = if r > 0 { s[..r - 1].to_vec() } else { vec![] };
                (Tensor::softmax_cross_entropy_with_logits(&labels, &x), out, dt)
            } else {
                (Tensor::sigmoid_cross_entropy_with_logits(&labels, &x), s, dt)
            }
        }
        5 => {
            let bs = if g.coin() && r > 0 { vec![s[r - 1]] } else { g.shape() };
            let bdt = g.float_dtype();
            let b = g.tensor(&bs, bdt);
            (x.bias_add(&b), s, dt)
        }
        6 => {
            let axes: Vec<isize> = (0..g.below(3)).map(|_| g.axis(r)).collect();
            let keep = g.coin();
            let out = reduced(&s, &axes, keep);
            let y = x.moments(&axes, keep).map(|(m, v)| {
                assert_eq!(m.shape(), v.shape());
                v
            });
            (y, out, dt)
        }
        7 => {
            let ps: Vec<Tensor> = (0..4)
                .map(|_| {
                    let ps = g.related(&s);
                    let pdt = if g.below(6) == 0 { g.dtype() } else { dt };
                    g.tensor(&ps, pdt)
                })
                .collect();
            let eps = [0.0, 1e-3, -1.0, f64::NAN][g.below(4) as usize];
            let off = g.coin().then_some(&ps[2]);
            let sc = g.coin().then_some(&ps[3]);
            (Tensor::batch_normalization(&x, &ps[0], &ps[1], off, sc, eps), s, dt)
        }
        8 => {
            let axes: Vec<isize> = (0..g.below(3)).map(|_| g.axis(r)).collect();
            let gs = g.related(&s);
            let gamma = g.tensor(&gs, dt);
            (
                x.layer_normalization(&axes, g.coin().then_some(&gamma), None, 1e-3),
                s,
                dt,
            )
        }
        9 => {
            let rate = [0.0, 0.3, 0.99, 1.0, -0.5, f64::NAN][g.below(6) as usize];
            (x.dropout(rate, g.next()), s, dt)
        }
        10 => (x.l2_loss(), vec![], dt),
        11 => {
            let is = g.shape();
            let idt = [DType::I32, DType::I64, g.dtype()][g.below(3) as usize];
            let ids = g.tensor(&is, idt);
            let mut out = is.clone();
            if r > 0 {
                out.extend_from_slice(&s[1..]);
            }
            (x.embedding_lookup(&ids), out, dt)
        }
        _ => {
            let rdt = g.dtype();
            let (a, b) = (
                [-1.0, 0.0, 2.5, f64::NAN][g.below(4) as usize],
                [1.0, -1.0, 3.0][g.below(3) as usize],
            );
            let seed = g.next();
            let y = match g.below(3) {
                0 => Tensor::random_uniform(&s, a, b, rdt, seed),
                1 => Tensor::random_normal(&s, a, b, rdt, seed),
                _ => Tensor::truncated_normal(&s, a, b, rdt, seed),
            };
            (y, s, rdt)
        }
    }
}

#[test]
fn nn_ops_never_panic() {
    const OPS: usize = 13;
    let mut g = Lcg(0x5eed);
    let mut ok = [0usize; OPS];
    for (k, successes) in ok.iter_mut().enumerate() {
        for i in 0..300 {
            let outcome = catch_unwind(AssertUnwindSafe(|| draw(&mut g, k)));
            let (res, shape, dtype) = outcome.unwrap_or_else(|_| panic!("op {k} panicked at draw {i}"));
            if let Ok(y) = res {
                assert_eq!(y.shape(), &shape[..], "op {k} draw {i}: shape");
                assert_eq!(y.dtype(), dtype, "op {k} draw {i}: dtype");
                *successes += 1;
            }
        }
    }
    // every op succeeded on some draws (the generator is not all errors)
    assert!(ok.iter().all(|&n| n > 0), "successes per op: {ok:?}");
}
