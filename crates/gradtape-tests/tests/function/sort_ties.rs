//! Ties in compiled graphs: sorts, `argsort` and `top_k` of keys with
//! equal elements, and scatters with duplicate indices, compiled (their
//! graphs are: their shapes follow from the inputs') against eager, values
//! and gradients, bit for bit.
//!
//! A sort's gradient routes each position's cotangent to the element its
//! order put there, so where keys tie, the order chosen decides which
//! element gets which cotangent. Eagerly the sorts are stable, as
//! TensorFlow's (`tf.sort`/`tf.argsort` keep equal keys in index order
//! ascending and descending, `tf.math.top_k` prefers the lower index:
//! TensorFlow 2.21 gives `argsort([1, 3, 1, 3, 1, 0])` = `[5, 0, 2, 4, 1,
//! 3]`, descending `[1, 3, 0, 2, 4, 5]`, `top_k(.., 4)` = `[1, 3, 0, 2]`);
//! a compiled graph runs the same kernels on the same bits, so it must
//! make the same choices: keys tied by a round trip through `f16` or
//! `bf16` (and NaN keys: last ascending, first descending), duplicate ids
//! summed by `unsorted_segment_sum` and `tensor_scatter_nd_add`, and
//! `tensor_scatter_nd_update`'s last duplicate winning.
//!
//! (Keys that tie only up to rounding are another matter: a compiled
//! graph that adds a sum in another order may order them the other way,
//! and either gradient is right: see `random_programs/ties.rs`.)

use gradtape::{function, CompileStats, DType, GradientTape, Result, Tensor};

use super::aliasing::{bits, Gen};

/// One drawn case: the shape, the sort's axis and direction, `top_k`'s
/// `k`, the narrow dtype of the round trip, where keys are NaN, and the
/// segment ids and scatter indices (with duplicates).
#[derive(Clone, Debug)]
struct Case {
    shape: Vec<usize>,
    axis: isize,
    descending: bool,
    k: usize,
    narrow: DType,
    nan_at: Vec<usize>,
    ids: Vec<i64>,
    segments: usize,
    dtype: DType,
}

impl Case {
    fn draw(g: &mut Gen) -> Case {
        let rank = 2 + g.below(2);
        let shape: Vec<usize> = (0..rank).map(|_| 1 + g.below(6)).collect();
        let n = shape[rank - 1];
        let numel: usize = shape.iter().product();
        let rows = shape[0];
        let segments = 1 + g.below(3);
        Case {
            axis: [0, -1, 1][g.below(3)] as isize,
            descending: g.coin(),
            k: g.below(n + 1),
            narrow: [DType::F16, DType::BF16][g.below(2)],
            // (one case in three has a NaN key or two)
            nan_at: match g.below(3) {
                0 => (0..1 + g.below(2)).map(|_| g.below(numel)).collect(),
                _ => Vec::new(),
            },
            // duplicates: more rows than segments, and every row's id drawn
            ids: (0..rows).map(|_| g.below(segments) as i64).collect(),
            segments,
            dtype: [DType::F32, DType::F64][g.below(2)],
            shape,
        }
    }

    /// `1 + x·w` through the narrow dtype and back: `x`'s 256 levels come
    /// to about 16 keys (`w` spreads them over 16 of the narrow dtype's
    /// steps near 1: 2^-7 in `bf16`, 2^-10 in `f16`).
    fn keys(&self, x: &Tensor) -> Result<Tensor> {
        let w = if self.narrow == DType::BF16 { 0.03 } else { 0.03 / 8.0 };
        x.mul_scalar(w)?.add_scalar(1.0)?.cast(self.narrow)?.cast(x.dtype())
    }

    /// How many neighbours of the sorted keys of `x` are equal along the
    /// sort's axis.
    fn ties(&self, x: &Tensor) -> Result<usize> {
        let s = self.keys(x)?.sort(self.axis, false)?;
        let d = s.dim(self.axis)?;
        if d < 2 {
            return Ok(0);
        }
        let eq = s.narrow(self.axis, 1, d - 1)?.eq(&s.narrow(self.axis, 0, d - 1)?)?;
        Ok(eq.cast(DType::F64)?.sum_all()?.item()? as usize)
    }

    /// The program: the keys (`keys`: ties)
    /// with NaNs added; their order, sorted keys times `u`, `top_k` of the
    /// keys times `u`'s first `k` columns, `x·u` summed into segments and
    /// scattered (added and updated) at duplicate rows; a loss of them
    /// (NaNs masked); and the loss's gradients w.r.t. `x` and `u`.
    fn run(&self, xu: &[Tensor]) -> Result<Vec<Tensor>> {
        let (x, u) = (&xu[0], &xu[1]);
        let tape = GradientTape::new();
        let mut out = tape.record(|| {
            tape.watch(x);
            tape.watch(u);
            let nan: Vec<f64> = (0..x.numel())
                .map(|i| if self.nan_at.contains(&i) { f64::NAN } else { 0.0 })
                .collect();
            let nan = Tensor::from_vec(nan, x.shape())?.cast(x.dtype())?;
            let keys = self.keys(x)?.add(&nan)?;
            let order = keys.argsort(self.axis, self.descending)?;
            let sorted = keys.sort(self.axis, self.descending)?.mul(u)?;
            let (top, top_idx) = keys.top_k(self.k)?;
            let top = top.mul(&u.narrow(-1, 0, self.k)?)?;
            let xu = x.mul(u)?;
            let ids = Tensor::vector(&self.ids);
            let seg = xu.unsorted_segment_sum(&ids, self.segments)?;
            let at = ids.reshape(&[self.ids.len(), 1])?;
            let mut big = self.shape.clone();
            big[0] = self.segments;
            let base = Tensor::try_ones(&big, x.dtype())?;
            let added = base.tensor_scatter_nd_add(&at, &xu)?;
            let updated = base.tensor_scatter_nd_update(&at, &xu.sin()?)?;
            let finite = |t: &Tensor| Tensor::where_(&t.is_nan()?, &t.zeros_like(), t);
            let mut loss = finite(&sorted)?.tanh()?.sum_all()?;
            for t in [&top, &seg, &added, &updated] {
                loss = loss.add(&finite(t)?.tanh()?.sum_all()?)?;
            }
            Ok(vec![loss, order, sorted, top, top_idx, seg, added, updated])
        })?;
        for g in tape.gradient(&out[0], &[x, u])? {
            out.push(g.ok_or_else(|| gradtape::Error::InvalidArgument {
                op: "sort_ties",
                msg: "no gradient".into(),
            })?);
        }
        Ok(out)
    }
}

/// Drawn cases, each traced and compiled once and called on three sets of
/// inputs of its shape (the cached graph, its buffers reused): every
/// output but the loss (a sum a fused kernel may add in another order) has
/// eager's bits, orders and gradients included, and the graph is compiled.
#[test]
fn ties_in_sorts_and_scatters_compiled_give_eagers_bits() -> Result<()> {
    let mut g = Gen(0x7135);
    // calls whose keys tie along the sort's axis (the premise)
    let mut tied = 0;
    for c in 0..60 {
        let case = Case::draw(&mut g);
        let f = {
            let case = case.clone();
            function(move |xu: &Vec<Tensor>| case.run(xu))
        };
        for call in 0..3 {
            let xu = vec![g.tensor(&case.shape, case.dtype)?, g.tensor(&case.shape, case.dtype)?];
            let (got, want) = (f.call(&xu)?, case.run(&xu)?);
            tied += usize::from(case.ties(&xu[0])? > 0);
            let stats = f.concrete(&xu)?.compile_stats();
            assert_ne!(stats, CompileStats::default(), "case {c} not compiled: {case:?}");
            let scale = want[0].to_vec_f64()[0].abs() + 1.0;
            let loss = (got[0].to_vec_f64()[0] - want[0].to_vec_f64()[0]).abs();
            assert!(
                loss <= 1e-5 * scale,
                "case {c}, call {call}: loss {got:?} against {want:?}"
            );
            for (j, (a, b)) in got.iter().zip(&want).enumerate().skip(1) {
                assert_eq!(
                    (a.dtype(), a.shape(), bits(a)),
                    (b.dtype(), b.shape(), bits(b)),
                    "case {c}, call {call}, output {j}: {case:?}\ncompiled {a:?}\neager {b:?}"
                );
            }
        }
    }
    assert!(tied >= 90, "{tied} of 180 calls with tied keys");
    Ok(())
}

/// The premise of the cases: the round trip through `f16` ties keys that
/// differ (so the orders above are chosen among equal keys), and a
/// stable order of them, as TensorFlow's, is what eager gives.
#[test]
fn the_keys_tie_and_eager_keeps_their_index_order() -> Result<()> {
    let x = Tensor::vector(&[1.0001f64, 1.0002, 0.5, 1.0003]);
    let keys = x.cast(DType::F16)?.cast(DType::F64)?;
    assert_eq!(keys.to_vec::<f64>()?, vec![1.0, 1.0, 0.5, 1.0]);
    // (TensorFlow 2.21: tf.argsort(.., stable=True) and tf.math.top_k)
    assert_eq!(keys.argsort(0, false)?.to_vec::<i64>()?, vec![2, 0, 1, 3]);
    assert_eq!(keys.argsort(0, true)?.to_vec::<i64>()?, vec![0, 1, 3, 2]);
    assert_eq!(keys.top_k(2)?.1.to_vec::<i64>()?, vec![0, 1]);
    let t = Tensor::vector(&[1.0f64, 3.0, 1.0, 3.0, 1.0, 0.0]);
    assert_eq!(t.argsort(0, false)?.to_vec::<i64>()?, vec![5, 0, 2, 4, 1, 3]);
    assert_eq!(t.argsort(0, true)?.to_vec::<i64>()?, vec![1, 3, 0, 2, 4, 5]);
    assert_eq!(t.top_k(4)?.1.to_vec::<i64>()?, vec![1, 3, 0, 2]);
    Ok(())
}
