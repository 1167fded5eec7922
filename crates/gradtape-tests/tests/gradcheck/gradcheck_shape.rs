//! Shape and indexing ops through the gradient checker (first and second
//! order; linear ops are composed with `square`), then exact values.

use crate::common;

use common::*;
use gradtape::{DType, GradientTape, PadMode, Result, Slice, Tensor};

fn s(start: Option<isize>, end: Option<isize>, step: isize) -> Slice {
    Slice::new(start, end, step)
}

fn table() -> Vec<Case> {
    let mut t = Vec::new();
    let two: &[(&str, Op, &[usize], &[usize])] = &[
        (
            "concat axis 0 [2,3]+[1,3]",
            |x| sq(Tensor::concat(&[&x[0], &x[1]], 0)),
            &[2, 3],
            &[1, 3],
        ),
        (
            "concat axis -1 [2,3]+[2,2]",
            |x| sq(Tensor::concat(&[&x[0], &x[1]], -1)),
            &[2, 3],
            &[2, 2],
        ),
        (
            "concat with itself",
            |x| sq(Tensor::concat(&[&x[0], &x[1], &x[0]], 1)),
            &[2, 1, 2],
            &[2, 3, 2],
        ),
        (
            "concat zero-size [0,3]+[2,3]",
            |x| sq(Tensor::concat(&[&x[0], &x[1]], 0)),
            &[0, 3],
            &[2, 3],
        ),
        (
            "concat of a transposed view",
            |x| sq(Tensor::concat(&[&x[0].transpose()?, &x[1]], 0)),
            &[3, 2],
            &[1, 3],
        ),
        (
            "stack axis 0",
            |x| sq(Tensor::stack(&[&x[0], &x[1]], 0)),
            &[2, 3],
            &[2, 3],
        ),
        (
            "stack axis -1",
            |x| sq(Tensor::stack(&[&x[0], &x[1]], -1)),
            &[2, 3],
            &[2, 3],
        ),
        ("stack scalars", |x| sq(Tensor::stack(&[&x[0], &x[1]], 0)), &[], &[]),
        (
            "scatter_nd updates [3]->[4] repeated",
            |x| sq(Tensor::scatter_nd(&idx(&[2, 0, 2], &[3, 1]), &x[0], &[4])?.add(&x[1])),
            &[3],
            &[4],
        ),
    ];
    for &(name, f, sa, sb) in two {
        t.push(case(name, f, &[(sa, Any), (sb, Any)]));
    }
    let one: &[(&str, Op, &[usize])] = &[
        (
            "unstack axis 1",
            |x| {
                let p = x[0].unstack(1)?;
                p[0].mul(&p[1])?.add(&p[2].square()?)
            },
            &[2, 3],
        ),
        (
            "unstack axis 0 of [3]",
            |x| {
                let p = x[0].unstack(0)?;
                p[0].mul(&p[2])?.sub(&p[1])
            },
            &[3],
        ),
        (
            "split 2 axis -1",
            |x| {
                let p = x[0].split(2, -1)?;
                p[0].mul(&p[1])
            },
            &[3, 4],
        ),
        (
            "split_sizes [1,0,2] axis 0",
            |x| {
                let p = x[0].split_sizes(&[1, 0, 2], 0)?;
                p[0].mul(&p[2].sum(&[0], true)?)?.add(&p[1].sum_all()?)
            },
            &[3, 2],
        ),
        // reshapes of strided views (views themselves where strides can
        // describe them: a head split of columns, a reversed axis)
        (
            "reshape of a column slice (head split)",
            |x| sq(x[0].narrow(1, 2, 4)?.reshape(&[2, 3, 2, 2])?.permute(&[0, 2, 1, 3])),
            &[6, 8],
        ),
        (
            "reshape of a reversed axis",
            |x| sq(x[0].strided_slice(&[Slice::rev(), Slice::all()])?.reshape(&[2, 3, 3])),
            &[6, 3],
        ),
        (
            "reshape of a transposed view (copied)",
            |x| sq(x[0].transpose()?.reshape(&[6])),
            &[2, 3],
        ),
        ("strided_slice ::-1", |x| sq(x[0].strided_slice(&[Slice::rev()])), &[5]),
        (
            "strided_slice 8:1:-3",
            |x| sq(x[0].strided_slice(&[s(Some(8), Some(1), -3)])),
            &[10],
        ),
        ("strided_slice ::2", |x| sq(x[0].strided_slice(&[Slice::step(2)])), &[5]),
        (
            "strided_slice [3,4] -1::-2, 1:",
            |x| sq(x[0].strided_slice(&[s(Some(-1), None, -2), s(Some(1), None, 1)])),
            &[3, 4],
        ),
        (
            "strided_slice [2,3,4] :, ::-1, 3:0:-2",
            |x| sq(x[0].strided_slice(&[Slice::all(), Slice::rev(), s(Some(3), Some(0), -2)])),
            &[2, 3, 4],
        ),
        (
            "strided_slice empty result",
            |x| {
                x[0].strided_slice(&[s(Some(1), Some(1), 1)])?
                    .sum_all()?
                    .add(&x[0].sin()?.sum_all()?)
            },
            &[4],
        ),
        (
            "strided_slice of a transposed view",
            |x| {
                sq(x[0]
                    .transpose()?
                    .strided_slice(&[s(None, None, -1), s(Some(0), Some(-1), 2)]))
            },
            &[3, 2],
        ),
        (
            "strided_slice twice (slice of a slice)",
            |x| sq(x[0].strided_slice(&[Slice::rev()])?.strided_slice(&[Slice::step(2)])),
            &[5],
        ),
        ("reverse [2,3] axis 0", |x| sq(x[0].reverse(&[0])), &[2, 3]),
        ("reverse [2,3] axes 0,1", |x| sq(x[0].reverse(&[0, -1])), &[2, 3]),
        ("reverse scalar", |x| sq(x[0].reverse(&[])), &[]),
        (
            "reverse [0,3]",
            |x| x[0].reverse(&[1])?.sum_all()?.add_scalar(1.0)?.square(),
            &[0, 3],
        ),
        ("reverse then matmul", |x| x[0].reverse(&[1])?.matmul(&x[0]), &[3, 3]),
        ("tile [2,3] x [2,1]", |x| sq(x[0].tile(&[2, 1])), &[2, 3]),
        ("tile [3] x [3]", |x| sq(x[0].tile(&[3])), &[3]),
        ("tile scalar", |x| sq(x[0].tile(&[])), &[]),
        (
            "tile [1,2] x [0,2]",
            |x| x[0].tile(&[0, 2])?.sum_all()?.add(&x[0].sin()?.sum_all()?),
            &[1, 2],
        ),
        ("repeat [2,3] 2 axis 1", |x| sq(x[0].repeat(2, 1)), &[2, 3]),
        ("repeat [2,3] 3 axis 0", |x| sq(x[0].repeat(3, 0)), &[2, 3]),
        ("repeat_each [3] [2,0,1]", |x| sq(x[0].repeat_each(&[2, 0, 1], 0)), &[3]),
        (
            "repeat_each [2,2] [1,3] axis 1",
            |x| sq(x[0].repeat_each(&[1, 3], 1)),
            &[2, 2],
        ),
        (
            "pad_with reflect [4] (2,3)",
            |x| sq(x[0].pad_with(&[(2, 3)], PadMode::Reflect)),
            &[4],
        ),
        (
            "pad_with reflect [3,4] (1,2),(2,0)",
            |x| sq(x[0].pad_with(&[(1, 2), (2, 0)], PadMode::Reflect)),
            &[3, 4],
        ),
        (
            "pad_with symmetric [3,2] (3,1),(2,2)",
            |x| sq(x[0].pad_with(&[(3, 1), (2, 2)], PadMode::Symmetric)),
            &[3, 2],
        ),
        (
            "pad_with constant 2.5",
            |x| sq(x[0].pad_with(&[(1, 1), (0, 2)], PadMode::Constant(2.5))),
            &[2, 3],
        ),
        (
            "gather_with batch_dims 1 axis 1",
            |x| sq(x[0].gather_with(&idx(&[2, 0, 1, 1, 0, 2], &[2, 3]), 1, 1)),
            &[2, 3],
        ),
        (
            "gather_with batch_dims 1 axis 2",
            |x| sq(x[0].gather_with(&idx(&[1, 1, 0, 0], &[2, 2]), 2, 1)),
            &[2, 3, 2],
        ),
        (
            "gather_with batch_dims 0 axis 1",
            |x| sq(x[0].gather_with(&idx(&[3, 0, 3], &[3]), 1, 0)),
            &[2, 4],
        ),
        (
            "gather_with batch_dims -1",
            |x| sq(x[0].gather_with(&idx(&[0, 0, 1, 0], &[2, 2]), 1, -1)),
            &[2, 2, 3],
        ),
        (
            "gather_nd full index",
            |x| sq(x[0].gather_nd(&idx(&[1, 0, 0, 2, 1, 0], &[3, 2]))),
            &[2, 3],
        ),
        (
            "gather_nd slices",
            |x| sq(x[0].gather_nd(&idx(&[1, 1, 0], &[3, 1]))),
            &[2, 3],
        ),
        (
            "gather_nd rank-3 indices",
            |x| sq(x[0].gather_nd(&idx(&[1, 0, 0, 1], &[2, 1, 2]))),
            &[2, 2, 2],
        ),
        (
            "gather_nd no indices",
            |x| {
                x[0].gather_nd(&idx(&[], &[0, 2]))?
                    .sum_all()?
                    .add(&x[0].sin()?.sum_all()?)
            },
            &[2, 3],
        ),
        (
            "scatter_nd updates slices",
            |x| sq(Tensor::scatter_nd(&idx(&[1, 1], &[2, 1]), &x[0], &[3, 2])),
            &[2, 2],
        ),
    ];
    for &(name, f, sh) in one {
        t.push(case(name, f, &[(sh, Any)]));
    }
    t
}

const REQUIRED: &[&str] = &[
    "concat",
    "stack",
    "unstack",
    "split ",
    "split_sizes",
    "strided_slice",
    "reverse",
    "tile",
    "repeat ",
    "repeat_each",
    "pad_with reflect",
    "pad_with symmetric",
    "pad_with constant",
    "gather_with",
    "gather_nd",
    "scatter_nd",
];

#[test]
fn every_shape_op_passes_the_gradient_checker() {
    run_table(&table(), REQUIRED, 45, 600);
}

fn i64s(t: &Tensor) -> Vec<i64> {
    t.to_vec::<i64>().unwrap()
}

#[test]
fn strided_slice_matches_python_slicing() -> Result<()> {
    let x = Tensor::arange(0.0, 10.0, 1.0, DType::I64)?;
    // hand-written lists of Python's x[a:b:c] on range(10)
    type PySlice = (Option<isize>, Option<isize>, isize, &'static [i64]);
    let cases: &[PySlice] = &[
        (None, None, -1, &[9, 8, 7, 6, 5, 4, 3, 2, 1, 0]),
        (Some(8), Some(1), -3, &[8, 5, 2]),
        (Some(-2), None, -4, &[8, 4, 0]),
        (None, Some(-8), -1, &[9, 8, 7, 6, 5, 4, 3]),
        (Some(2), Some(7), 2, &[2, 4, 6]),
        (Some(-3), Some(100), 1, &[7, 8, 9]),
        (Some(100), Some(-100), -5, &[9, 4]),
        (Some(3), Some(3), 1, &[]),
        (Some(2), Some(5), -1, &[]),
        (Some(-100), Some(2), 1, &[0, 1]),
    ];
    for &(a, b, c, want) in cases {
        let y = x.strided_slice(&[Slice::new(a, b, c)])?;
        assert_eq!(i64s(&y), want, "{a:?}:{b:?}:{c}");
    }
    let m = Tensor::arange(0.0, 12.0, 1.0, DType::I64)?.reshape(&[3, 4])?;
    // m[::-1, 3:0:-2] = rows 2,1,0; cols 3,1
    let y = m.strided_slice(&[Slice::rev(), Slice::new(Some(3), Some(0), -2)])?;
    assert_eq!(y.shape(), &[3, 2]);
    assert_eq!(i64s(&y), vec![11, 9, 7, 5, 3, 1]);
    // gradient of sum(m[::-1, 3:0:-2] * w) puts w back in place
    let f = Tensor::arange(0.0, 12.0, 1.0, DType::F64)?.reshape(&[3, 4])?;
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&f);
        f.strided_slice(&[Slice::rev(), Slice::new(Some(3), Some(0), -2)])?
            .mul(&Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?)?
            .sum_all()
    })?;
    let g = tape.gradient(&y, &f)?.unwrap();
    assert_eq!(g.to_vec::<f64>()?, vec![0., 6., 0., 5., 0., 4., 0., 3., 0., 2., 0., 1.]);
    Ok(())
}

#[test]
fn tile_repeat_reverse_pad_values() -> Result<()> {
    let x = Tensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2])?;
    assert_eq!(i64s(&x.tile(&[1, 2])?), vec![1, 2, 1, 2, 3, 4, 3, 4]);
    assert_eq!(i64s(&x.tile(&[2, 1])?), vec![1, 2, 3, 4, 1, 2, 3, 4]);
    assert_eq!(i64s(&x.repeat(2, 0)?), vec![1, 2, 1, 2, 3, 4, 3, 4]);
    assert_eq!(i64s(&x.repeat(2, 1)?), vec![1, 1, 2, 2, 3, 3, 4, 4]);
    assert_eq!(x.repeat(0, 1)?.shape(), &[2, 0]);
    assert_eq!(i64s(&x.repeat_each(&[0, 3], 0)?), vec![3, 4, 3, 4, 3, 4]);
    assert_eq!(i64s(&x.reverse(&[0])?), vec![3, 4, 1, 2]);
    assert_eq!(i64s(&x.reverse(&[1])?.reverse(&[1])?), vec![1, 2, 3, 4]);
    // reflect on both axes: rows [3,4],[1,2],[3,4]; each row reflected by 1 on the left
    let r = x.pad_with(&[(1, 0), (1, 0)], PadMode::Reflect)?;
    assert_eq!(i64s(&r), vec![4, 3, 4, 2, 1, 2, 4, 3, 4]);
    let s = x.pad_with(&[(0, 0), (2, 2)], PadMode::Symmetric)?;
    assert_eq!(i64s(&s), vec![2, 1, 1, 2, 2, 1, 4, 3, 3, 4, 4, 3]);
    let c = x.pad_with(&[(0, 1), (0, 0)], PadMode::Constant(-1.0))?;
    assert_eq!(i64s(&c), vec![1, 2, 3, 4, -1, -1]);
    Ok(())
}

#[test]
fn join_and_split_values() -> Result<()> {
    let a = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?;
    let b = Tensor::from_vec(vec![5i32, 6], &[2, 1])?;
    let c = Tensor::concat(&[&a, &b], 1)?;
    assert_eq!(c.to_vec::<i32>()?, vec![1, 2, 5, 3, 4, 6]);
    let s = Tensor::stack(&[&a, &a], 1)?;
    assert_eq!(s.shape(), &[2, 2, 2]);
    assert_eq!(s.to_vec::<i32>()?, vec![1, 2, 1, 2, 3, 4, 3, 4]);
    let cols = c.unstack(1)?;
    assert_eq!(cols.len(), 3);
    assert_eq!(cols[2].to_vec::<i32>()?, vec![5, 6]);
    let parts = c.split_sizes(&[2, 1], 1)?;
    assert_eq!(parts[0].to_vec::<i32>()?, vec![1, 2, 3, 4]);
    assert_eq!(parts[1].to_vec::<i32>()?, vec![5, 6]);
    let bools = Tensor::concat(&[&Tensor::vector(&[true]), &Tensor::vector(&[false, true])], 0)?;
    assert_eq!(bools.to_vec::<bool>()?, vec![true, false, true]);
    Ok(())
}

#[test]
fn index_ops_values() -> Result<()> {
    let x = Tensor::from_vec((0..24).map(|v| v as f64).collect(), &[2, 3, 4])?;
    // gather_nd with pairs: x[1,2,:] and x[0,0,:]
    let g = x.gather_nd(&Tensor::from_vec(vec![1i32, 2, 0, 0], &[2, 2])?)?;
    assert_eq!(g.to_vec::<f64>()?, vec![20., 21., 22., 23., 0., 1., 2., 3.]);
    // batch_dims 1: for batch b, out[b, :, j] = x[b, :, idx[b, j]]
    let i = Tensor::from_vec(vec![3i64, 0, 1, 1], &[2, 2])?;
    let y = x.gather_with(&i, 2, 1)?;
    assert_eq!(y.shape(), &[2, 3, 2]);
    assert_eq!(
        y.to_vec::<f64>()?,
        vec![3., 0., 7., 4., 11., 8., 13., 13., 17., 17., 21., 21.]
    );
    // batch_dims 0 equals gather
    let i0 = Tensor::vector(&[2i64, 0]);
    assert_eq!(
        x.gather_with(&i0, 1, 0)?.to_vec::<f64>()?,
        x.gather(&i0, 1)?.to_vec::<f64>()?
    );
    // scatter_nd sums duplicates
    let s = Tensor::scatter_nd(
        &Tensor::from_vec(vec![0i64, 1, 0, 1, 1, 0], &[3, 2])?,
        &Tensor::vector(&[1.0f32, 2.0, 4.0]),
        &[2, 2],
    )?;
    assert_eq!(s.to_vec::<f32>()?, vec![0.0, 3.0, 4.0, 0.0]);
    // one_hot: axis -1, axis 0, out-of-range rows of `off`
    let h = Tensor::vector(&[1i32, -1, 3]).one_hot(3, 5.0, -1.0, -1, DType::I64)?;
    assert_eq!(i64s(&h), vec![-1, 5, -1, -1, -1, -1, -1, -1, -1]);
    let h = Tensor::vector(&[0i64, 2]).one_hot(3, 1.0, 0.0, 0, DType::F32)?;
    assert_eq!(h.shape(), &[3, 2]);
    assert_eq!(h.to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
    assert_eq!(
        Tensor::scalar(1i64)
            .one_hot(2, 1.0, 0.0, -1, DType::Bool)?
            .to_vec::<bool>()?,
        vec![false, true]
    );
    // creation
    assert_eq!(Tensor::eye(2, DType::F64).to_vec::<f64>()?, vec![1., 0., 0., 1.]);
    assert_eq!(
        Tensor::linspace(1.0, 2.0, 3, DType::F32)?.to_vec::<f32>()?,
        vec![1.0, 1.5, 2.0]
    );
    assert_eq!(Tensor::linspace(3.0, 9.0, 1, DType::F64)?.to_vec::<f64>()?, vec![3.0]);
    assert_eq!(Tensor::linspace(3.0, 9.0, 0, DType::F64)?.shape(), &[0]);
    assert_eq!(
        Tensor::range(0.0, 1.0, 0.25, DType::F64)?.to_vec::<f64>()?,
        vec![0., 0.25, 0.5, 0.75]
    );
    Ok(())
}

/// Reshapes of slices, reversals, transposes and broadcasts (views where
/// strides can describe the result) give the elements of a reshape of the
/// same view made contiguous first, and so do ops that read them.
#[test]
fn reshapes_of_views_match_reshapes_of_copies() -> Result<()> {
    let x = Tensor::arange(0.0, 96.0, 1.0, DType::F32)?.reshape(&[8, 12])?;
    let views = [
        x.narrow(1, 4, 4)?,
        x.narrow(0, 2, 4)?,
        x.strided_slice(&[Slice::rev(), Slice::step(3)])?,
        x.transpose()?,
        x.narrow(1, 5, 1)?.broadcast_to(&[8, 6])?,
    ];
    for v in &views {
        let n = v.numel();
        let c = v.contiguous()?;
        for shape in [
            vec![n],
            vec![2, n / 2],
            vec![v.shape()[0] / 2, 2, v.shape()[1]],
            vec![1, n, 1],
        ] {
            let (a, b) = (v.reshape(&shape)?, c.reshape(&shape)?);
            assert_eq!(a.shape(), &shape[..]);
            assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?, "{:?} as {shape:?}", v.shape());
            // read by a product, a reduction and an elementwise op
            let m = a.reshape(&[n / 2, 2])?;
            let mc = b.reshape(&[n / 2, 2])?;
            assert_eq!(
                m.matmul(&m.transpose()?)?.to_vec::<f32>()?,
                mc.matmul(&mc.transpose()?)?.to_vec::<f32>()?
            );
            assert_eq!(
                a.sum(&[0], false)?.to_vec::<f32>()?,
                b.sum(&[0], false)?.to_vec::<f32>()?
            );
            assert_eq!(a.exp()?.to_vec::<f32>()?, b.exp()?.to_vec::<f32>()?);
        }
    }
    Ok(())
}

/// Concatenations of views (transposed, reversed, broadcast, sliced; each
/// copied straight into its place) give the concatenations of the views
/// made contiguous first, along every axis.
#[test]
fn concatenations_of_views_match_those_of_copies() -> Result<()> {
    let x = Tensor::arange(0.0, 60.0, 1.0, DType::F32)?.reshape(&[3, 4, 5])?;
    let views = [
        x.clone(),
        x.permute(&[2, 1, 0])?.permute(&[2, 1, 0])?.contiguous()?,
        x.strided_slice(&[Slice::rev(), Slice::all(), Slice::step(1)])?,
        x.narrow(2, 0, 1)?.broadcast_to(&[3, 4, 5])?,
        Tensor::arange(100.0, 160.0, 1.0, DType::F32)?
            .reshape(&[5, 4, 3])?
            .permute(&[2, 1, 0])?,
    ];
    for axis in 0..3 {
        for a in &views {
            for b in &views {
                // a part sliced along the axis, so the parts differ in size there
                let b = b.narrow(axis as isize, 1, 2)?;
                let got = Tensor::concat(&[a, &b, a], axis as isize)?;
                let (ac, bc) = (a.contiguous()?, b.contiguous()?);
                let want = Tensor::concat(&[&ac, &bc, &ac], axis as isize)?;
                assert_eq!(got.shape(), want.shape());
                assert_eq!(got.to_vec::<f32>()?, want.to_vec::<f32>()?, "axis {axis}");
            }
        }
    }
    Ok(())
}
