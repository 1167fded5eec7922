//! Never-panic property test for the shape, indexing and linear-algebra ops:
//! random ranks (0-4), dims (0-4), dtypes, axes (including out-of-range and
//! negative ones) and indices (including out-of-range ones). Every call runs
//! under `catch_unwind`; it must return an `Err` or a result whose shape and
//! dtype are those the op's documented rule gives.

use std::panic::{catch_unwind, AssertUnwindSafe};

use gradtape::{DType, PadMode, Result, Slice, Tensor};

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// An integer in `lo..=hi`.
    fn int(&mut self, lo: isize, hi: isize) -> isize {
        lo + self.below((hi - lo + 1) as usize) as isize
    }
    fn coin(&mut self) -> bool {
        self.below(2) == 0
    }
    fn dtype(&mut self) -> DType {
        [DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool][self.below(5)]
    }
    fn shape(&mut self) -> Vec<usize> {
        let r = self.below(5);
        (0..r).map(|_| self.below(5)).collect()
    }
    /// A tensor of `shape` with small values (integers in -2..6).
    fn tensor(&mut self, shape: &[usize], dtype: DType) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|_| self.int(-2, 5) as f64 * if dtype.is_float() { 0.75 } else { 1.0 })
            .collect();
        let t = Tensor::from_vec(v, shape).unwrap();
        t.cast(dtype).unwrap()
    }
    fn any_tensor(&mut self) -> Tensor {
        let s = self.shape();
        let d = self.dtype();
        self.tensor(&s, d)
    }
    fn axis(&mut self, rank: usize) -> isize {
        self.int(-(rank as isize) - 2, rank as isize + 1)
    }
}

fn norm(axis: isize, rank: usize) -> usize {
    if axis < 0 {
        (axis + rank as isize) as usize
    } else {
        axis as usize
    }
}

/// NumPy broadcasting of shapes (the documented rule, written independently).
fn bshape(shapes: &[&[usize]]) -> Vec<usize> {
    let r = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    (0..r)
        .map(|i| {
            shapes
                .iter()
                .map(|s| if i + s.len() >= r { s[i + s.len() - r] } else { 1 })
                .fold(1, |a, d| if d == 1 { a } else { d })
        })
        .collect()
}

/// Python's `len(range(n)[start:end:step])`, by walking the indices.
fn py_len(sl: &Slice, n: usize) -> usize {
    let n = n as i128;
    let step = sl.step as i128;
    let norm = |v: isize, lo: i128, hi: i128| (if v < 0 { v as i128 + n } else { v as i128 }).clamp(lo, hi);
    (0..n)
        .filter(|&i| {
            if step > 0 {
                let a = sl.start.map_or(0, |v| norm(v, 0, n));
                let b = sl.end.map_or(n, |v| norm(v, 0, n));
                i >= a && i < b && (i - a) % step == 0
            } else {
                let a = sl.start.map_or(n - 1, |v| norm(v, -1, n - 1));
                let b = sl.end.map_or(-1, |v| norm(v, -1, n - 1));
                i <= a && i > b && (a - i) % (-step) == 0
            }
        })
        .count()
}

type Expect = Option<(Vec<usize>, DType)>;

/// Runs one draw: `op` must not panic; an Ok result must match `expect`
/// (None = only "no panic" is checked for this draw).
fn run(name: &str, draw: usize, op: impl FnOnce() -> Result<(Tensor, Expect)>) -> bool {
    match catch_unwind(AssertUnwindSafe(op)) {
        Err(_) => panic!("{name} panicked on draw {draw}"),
        Ok(Err(_)) => false,
        Ok(Ok((t, expect))) => {
            if let Some((shape, dtype)) = expect {
                assert_eq!(t.shape(), shape.as_slice(), "{name} draw {draw}: shape");
                assert_eq!(t.dtype(), dtype, "{name} draw {draw}: dtype");
            }
            // reading the values must not panic either
            let _ = t.to_vec_f64();
            true
        }
    }
}

fn shape_of(s: &[usize], d: DType) -> Expect {
    Some((s.to_vec(), d))
}

#[test]
fn shape_and_index_ops_never_panic() {
    let mut g = Lcg(0x5eed);
    let mut oks = 0usize;
    const DRAWS: usize = 300;
    for draw in 0..DRAWS {
        let x = g.any_tensor();
        let (s, d, r) = (x.shape().to_vec(), x.dtype(), x.rank());
        let ax = g.axis(r);
        let valid = ax >= -(r as isize) && ax < r as isize;
        // pre-existing ops
        let shp = g.shape();
        oks += run("reshape", draw, || Ok((x.reshape(&shp)?, shape_of(&shp, d)))) as usize;
        let perm: Vec<usize> = (0..r + g.below(2)).map(|_| g.below(r + 1)).collect();
        oks += run("permute", draw, || {
            let y = x.permute(&perm)?;
            Ok((y, shape_of(&perm.iter().map(|&p| s[p]).collect::<Vec<_>>(), d)))
        }) as usize;
        oks += run("transpose", draw, || {
            let mut e = s.clone();
            let n = e.len();
            let y = x.transpose()?;
            e.swap(n - 2, n - 1);
            Ok((y, shape_of(&e, d)))
        }) as usize;
        oks += run("expand_dims", draw, || {
            let y = x.expand_dims(ax)?;
            let mut e = s.clone();
            e.insert(
                if ax < 0 {
                    (ax + r as isize + 1) as usize
                } else {
                    ax as usize
                },
                1,
            );
            Ok((y, shape_of(&e, d)))
        }) as usize;
        oks += run("squeeze", draw, || {
            let y = x.squeeze(&[ax])?;
            let mut e = s.clone();
            e.remove(norm(ax, r));
            Ok((y, shape_of(&e, d)))
        }) as usize;
        let begin: Vec<usize> = (0..r).map(|_| g.below(4)).collect();
        let size: Vec<usize> = (0..r).map(|_| g.below(4)).collect();
        oks += run("slice", draw, || Ok((x.slice(&begin, &size)?, shape_of(&size, d)))) as usize;
        let (st, ln) = (g.below(4), g.below(4));
        oks += run("narrow", draw, || {
            let y = x.narrow(ax, st, ln)?;
            let mut e = s.clone();
            e[norm(ax, r)] = ln;
            Ok((y, shape_of(&e, d)))
        }) as usize;
        let pads: Vec<(usize, usize)> = (0..r + usize::from(g.below(8) == 0))
            .map(|_| (g.below(3), g.below(3)))
            .collect();
        let padded: Vec<usize> = s.iter().zip(&pads).map(|(n, p)| n + p.0 + p.1).collect();
        oks += run("pad", draw, || Ok((x.pad(&pads)?, shape_of(&padded, d)))) as usize;
        oks += run("broadcast_to", draw, || Ok((x.broadcast_to(&shp)?, shape_of(&shp, d)))) as usize;
        let ishape = g.shape();
        let idt = [DType::I32, DType::I64, DType::F32][g.below(3)];
        let ind = g.tensor(&ishape, idt);
        oks += run("gather", draw, || {
            let y = x.gather(&ind, ax)?;
            let a = norm(ax, r);
            let e = [&s[..a], &ishape[..], &s[a + 1..]].concat();
            Ok((y, shape_of(&e, d)))
        }) as usize;
        let dim = g.below(5);
        oks += run("scatter_add", draw, || {
            let y = x.scatter_add(&ind, ax, dim)?;
            // the axis is the output's, of rank r - ind.rank() + 1
            let a = norm(ax, (r + 1).saturating_sub(ind.rank()));
            let e = [&s[..a], &[dim][..], &s[a + ind.rank()..]].concat();
            Ok((y, shape_of(&e, d)))
        }) as usize;
        let cs = g.shape();
        let c = g.tensor(&cs, DType::Bool);
        let (bsh, bdt) = (g.shape(), if g.coin() { d } else { g.dtype() });
        let b = g.tensor(&bsh, bdt);
        oks += run("where_", draw, || {
            let y = Tensor::where_(&c, &x, &b)?;
            Ok((y, shape_of(&bshape(&[c.shape(), &s, b.shape()]), d)))
        }) as usize;

        // joins
        let other = if g.coin() {
            let mut o = s.clone();
            if valid {
                o[norm(ax, r)] = g.below(4);
            }
            let odt = if g.below(6) == 0 { g.dtype() } else { d };
            g.tensor(&o, odt)
        } else {
            g.any_tensor()
        };
        oks += run("concat", draw, || {
            let y = Tensor::concat(&[&x, &other], ax)?;
            let mut e = s.clone();
            let a = norm(ax, r);
            e[a] += other.shape()[a];
            Ok((y, shape_of(&e, d)))
        }) as usize;
        let sax = g.axis(r + 1);
        oks += run("stack", draw, || {
            let y = Tensor::stack(&[&x, &other, &x], sax)?;
            let mut e = s.clone();
            e.insert(norm(sax, r + 1), 3);
            Ok((y, shape_of(&e, d)))
        }) as usize;
        oks += run("unstack", draw, || {
            let parts = x.unstack(ax)?;
            let a = norm(ax, r);
            assert_eq!(parts.len(), s[a], "unstack count");
            let mut e = s.clone();
            e.remove(a);
            for p in &parts {
                assert_eq!(p.shape(), e.as_slice());
            }
            Ok((x.clone(), None))
        }) as usize;
        let count = g.below(4);
        oks += run("split", draw, || {
            let parts = x.split(count, ax)?;
            let a = norm(ax, r);
            assert_eq!(parts.len(), count);
            for p in &parts {
                assert_eq!(p.shape()[a] * count, s[a]);
            }
            Ok((x.clone(), None))
        }) as usize;
        let sizes: Vec<usize> = (0..g.below(4)).map(|_| g.below(3)).collect();
        oks += run("split_sizes", draw, || {
            let parts = x.split_sizes(&sizes, ax)?;
            let a = norm(ax, r);
            for (p, &n) in parts.iter().zip(&sizes) {
                assert_eq!(p.shape()[a], n);
            }
            Ok((x.clone(), None))
        }) as usize;

        // strided and friends
        let slices: Vec<Slice> = (0..g.below(r + 2))
            .map(|_| {
                let bound = |g: &mut Lcg| match g.below(12) {
                    0 => Some(isize::MIN),
                    1 => Some(isize::MAX),
                    2..=6 => Some(g.int(-7, 7)),
                    _ => None,
                };
                let step = match g.below(16) {
                    0 => isize::MIN,
                    1 => isize::MAX,
                    _ => g.int(-3, 3),
                };
                Slice::new(bound(&mut g), bound(&mut g), step)
            })
            .collect();
        oks += run("strided_slice", draw, || {
            let y = x.strided_slice(&slices)?;
            let e: Vec<usize> = (0..r)
                .map(|i| slices.get(i).map_or(s[i], |sl| py_len(sl, s[i])))
                .collect();
            Ok((y, shape_of(&e, d)))
        }) as usize;
        let raxes: Vec<isize> = (0..g.below(3)).map(|_| g.axis(r)).collect();
        oks += run("reverse", draw, || Ok((x.reverse(&raxes)?, shape_of(&s, d)))) as usize;
        let mult: Vec<usize> = (0..r + usize::from(g.below(8) == 0))
            .map(|_| if g.below(20) == 0 { usize::MAX } else { g.below(3) })
            .collect();
        oks += run("tile", draw, || {
            let y = x.tile(&mult)?;
            Ok((
                y,
                shape_of(&s.iter().zip(&mult).map(|(a, b)| a * b).collect::<Vec<_>>(), d),
            ))
        }) as usize;
        let reps = if g.below(20) == 0 { usize::MAX } else { g.below(3) };
        oks += run("repeat", draw, || {
            let y = x.repeat(reps, ax)?;
            let mut e = s.clone();
            e[norm(ax, r)] *= reps;
            Ok((y, shape_of(&e, d)))
        }) as usize;
        let counts: Vec<usize> = (0..g.below(5)).map(|_| g.below(3)).collect();
        oks += run("repeat_each", draw, || {
            let y = x.repeat_each(&counts, ax)?;
            let mut e = s.clone();
            e[norm(ax, r)] = counts.iter().sum();
            Ok((y, shape_of(&e, d)))
        }) as usize;
        let mode = [
            PadMode::Constant(0.0),
            PadMode::Constant(2.0),
            PadMode::Reflect,
            PadMode::Symmetric,
        ][g.below(4)];
        oks += run("pad_with", draw, || {
            Ok((x.pad_with(&pads, mode)?, shape_of(&padded, d)))
        }) as usize;

        // n-d indexing
        let k = g.below(r + 2);
        let mut nshape = g.shape();
        nshape.truncate(2);
        nshape.push(k);
        let ndt = [DType::I32, DType::I64, DType::F64][g.below(3)];
        let nd = g.tensor(&nshape, ndt);
        oks += run("gather_nd", draw, || {
            let y = x.gather_nd(&nd)?;
            let e = [&nshape[..nshape.len() - 1], &s[k..]].concat();
            Ok((y, shape_of(&e, d)))
        }) as usize;
        let target = g.shape();
        let upd_shape: Vec<usize> = [&nshape[..nshape.len() - 1], &target[k.min(target.len())..]].concat();
        let udt = if g.below(4) == 0 { g.dtype() } else { DType::F64 };
        let upd = g.tensor(&upd_shape, udt);
        oks += run("scatter_nd", draw, || {
            let y = Tensor::scatter_nd(&nd, &upd, &target)?;
            Ok((y, shape_of(&target, upd.dtype())))
        }) as usize;
        let bd = g.int(-2, 3);
        let mut bshape_i: Vec<usize> = s[..(bd.max(0) as usize).min(r)].to_vec();
        bshape_i.extend((0..g.below(3)).map(|_| g.below(4)));
        let bdt = if g.below(5) == 0 { DType::Bool } else { DType::I64 };
        let bi = g.tensor(&bshape_i, bdt);
        oks += run("gather_with", draw, || {
            let y = x.gather_with(&bi, ax, bd)?;
            let a = norm(ax, r);
            let b = if bd < 0 {
                (bd + bi.rank() as isize) as usize
            } else {
                bd as usize
            };
            let e = [&s[..a], &bi.shape()[b..], &s[a + 1..]].concat();
            Ok((y, shape_of(&e, d)))
        }) as usize;
        let depth = if g.below(20) == 0 { usize::MAX } else { g.below(4) };
        let oax = g.int(-2, r as isize + 1);
        let odt = g.dtype();
        oks += run("one_hot", draw, || {
            let y = x.one_hot(depth, 1.0, 0.0, oax, odt)?;
            let mut e = s.clone();
            e.insert(if oax == -1 { r } else { oax as usize }, depth);
            Ok((y, shape_of(&e, odt)))
        }) as usize;
        let n = g.below(4);
        oks += run("eye", draw, || Ok((Tensor::eye(n, d), shape_of(&[n, n], d)))) as usize;
        oks += run("linspace", draw, || {
            Ok((Tensor::linspace(-1.0, 2.0, n, d)?, shape_of(&[n], d)))
        }) as usize;
    }
    // the draws must exercise the success paths too, not only the errors
    assert!(oks > DRAWS * 8, "only {oks} successful calls");
}

#[test]
fn linalg_ops_never_panic() {
    let mut g = Lcg(0xdec0de);
    let mut oks = 0usize;
    const DRAWS: usize = 300;
    for draw in 0..DRAWS {
        // square-ish matrices most of the time
        let mut s = g.shape();
        if g.below(4) != 0 && s.len() >= 2 {
            let n = s.len();
            s[n - 1] = s[n - 2];
        }
        let d = if g.below(4) == 0 { g.dtype() } else { DType::F64 };
        let a = g.tensor(&s, d);
        let r = s.len();
        let batch = s[..r.saturating_sub(2)].to_vec();
        let mut bs = g.shape();
        if g.coin() && r >= 1 {
            bs = s.clone();
            let n = bs.len();
            bs[n - 1] = g.below(3);
        }
        let bdt = if g.below(6) == 0 { g.dtype() } else { d };
        let b = g.tensor(&bs, bdt);
        oks += run("cholesky", draw, || Ok((a.cholesky()?, shape_of(&s, d)))) as usize;
        oks += run("inverse", draw, || Ok((a.inverse()?, shape_of(&s, d)))) as usize;
        oks += run("det", draw, || Ok((a.det()?, shape_of(&batch, d)))) as usize;
        oks += run("slogdet", draw, || {
            let (sign, l) = a.slogdet()?;
            assert_eq!(sign.shape(), batch.as_slice());
            Ok((l, shape_of(&batch, d)))
        }) as usize;
        let solved = |b: &Tensor| -> Vec<usize> {
            let bb = &b.shape()[..b.rank().saturating_sub(2)];
            let mut e = bshape(&[&batch, bb]);
            e.extend_from_slice(&b.shape()[b.rank().saturating_sub(2)..]);
            e
        };
        oks += run("solve", draw, || Ok((a.solve(&b)?, shape_of(&solved(&b), d)))) as usize;
        let (lower, adj) = (g.coin(), g.coin());
        oks += run("triangular_solve", draw, || {
            Ok((a.triangular_solve(&b, lower, adj)?, shape_of(&solved(&b), d)))
        }) as usize;
        oks += run("matvec", draw, || {
            let y = a.matvec(&b)?;
            let mut e = bshape(&[&batch, &bs[..bs.len() - 1]]);
            e.push(s[r - 2]);
            Ok((y, shape_of(&e, d)))
        }) as usize;
        oks += run("outer", draw, || {
            Ok((a.outer(&b)?, shape_of(&[&s[..], &bs[..]].concat(), d)))
        }) as usize;
        let (ta, tb) = (g.axis(r), g.axis(bs.len()));
        oks += run("tensordot", draw, || {
            let y = a.tensordot(&b, &[ta], &[tb])?;
            let (i, j) = (norm(ta, r), norm(tb, bs.len()));
            let e: Vec<usize> = (0..r)
                .filter(|&q| q != i)
                .map(|q| s[q])
                .chain((0..bs.len()).filter(|&q| q != j).map(|q| bs[q]))
                .collect();
            Ok((y, shape_of(&e, d)))
        }) as usize;
        let specs = [
            "ij,jk->ik",
            "ij->ji",
            "ii->",
            "ii->i",
            "ij,ij->i",
            "i,j->ij",
            "bij,bjk->bik",
            "ijk->kj",
            "ij->",
            "ab,b",
            "ii,ij->j",
        ];
        let spec = specs[g.below(specs.len())];
        oks += run("einsum", draw, || {
            let ops: Vec<&Tensor> = if spec.contains(',') { vec![&a, &b] } else { vec![&a] };
            Ok((Tensor::einsum(spec, &ops)?, None))
        }) as usize;
        oks += run("diag", draw, || {
            let y = a.diag()?;
            let mut e = s.clone();
            e.push(s[r - 1]);
            Ok((y, shape_of(&e, d)))
        }) as usize;
        oks += run("diag_part", draw, || {
            let y = a.diag_part()?;
            let mut e = batch.clone();
            e.push(s[r - 1].min(s[r - 2]));
            Ok((y, shape_of(&e, d)))
        }) as usize;
        oks += run("trace", draw, || Ok((a.trace()?, shape_of(&batch, d)))) as usize;
        let (lo, hi) = (g.int(-2, 3), g.int(-2, 3));
        oks += run("band_part", draw, || Ok((a.band_part(lo, hi)?, shape_of(&s, d)))) as usize;
    }
    assert!(oks > DRAWS * 2, "only {oks} successful calls");
}

/// A view whose rows are broadcasts (inner stride 0) copies as fills, row
/// by row (the copy of a broadcast of 2^30 bools took an index per element,
/// seconds: fuzz seed 383802, case 235340, a split of a broadcast traced,
/// ran past the 15 s limit); the values, in every layout of such rows:
/// a scalar broadcast, a column broadcast along rows, a broadcast middle
/// dim, a transposed broadcast, and a slice of one.
#[test]
fn copies_of_broadcast_rows_hold_the_broadcast_values() -> Result<()> {
    let col = Tensor::from_vec(vec![1i64, -2, 3], &[3, 1])?;
    let got = col.broadcast_to(&[3, 4])?.contiguous()?;
    assert_eq!(got.to_vec::<i64>()?, vec![1, 1, 1, 1, -2, -2, -2, -2, 3, 3, 3, 3]);
    let b = Tensor::from_vec(vec![true, false], &[2, 1, 1])?.broadcast_to(&[2, 3, 5])?;
    let got = b.contiguous()?.to_vec::<bool>()?;
    assert_eq!(got, (0..30).map(|i| i < 15).collect::<Vec<_>>());
    let s = Tensor::scalar(2.5f32).broadcast_to(&[7])?.contiguous()?;
    assert_eq!(s.to_vec::<f32>()?, vec![2.5; 7]);
    // [2, 1] broadcast to [2, 3] and transposed: rows of the copy are
    // columns of the view, each a run of the buffer (stride 1), not 0
    let t = Tensor::from_vec(vec![4.0f64, 5.0], &[2, 1])?
        .broadcast_to(&[2, 3])?
        .transpose()?;
    assert_eq!(t.contiguous()?.to_vec::<f64>()?, vec![4.0, 5.0, 4.0, 5.0, 4.0, 5.0]);
    // a slice of a broadcast row, one row of a broadcast matrix
    let m = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[1, 3])?.broadcast_to(&[4, 3])?;
    let sl = m.transpose()?.narrow(0, 1, 2)?.contiguous()?;
    assert_eq!(
        sl.to_vec::<f32>()?,
        vec![2.0; 4].into_iter().chain(vec![3.0; 4]).collect::<Vec<_>>()
    );
    Ok(())
}
