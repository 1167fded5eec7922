//! Sorting, searching and segment ops: gradients through the checker (first
//! and second order; the traced mode too when enabled), then values and
//! gradients against TensorFlow 2.21, errors, and traced functions that
//! follow their integer inputs.

use crate::common;

use common::*;
use gradtape::{function, DType, GradientTape, Result, Tensor};

fn ids(v: &[i64]) -> Tensor {
    Tensor::vector(v)
}

fn table() -> Vec<Case> {
    let mut t = Vec::new();
    let one: &[(&str, Op, &[usize], Dom)] = &[
        ("sort axis 0 [5]", |x| sq(x[0].sort(0, false)), &[5], Distinct),
        (
            "sort descending axis 1 [3,4]",
            |x| sq(x[0].sort(1, true)),
            &[3, 4],
            Distinct,
        ),
        ("sort axis 0 [3,4]", |x| sq(x[0].sort(0, false)), &[3, 4], Distinct),
        ("sort empty [0,3]", |x| sq(x[0].sort(1, false)), &[0, 3], Any),
        (
            "take_along_axis axis 1",
            |x| sq(x[0].take_along_axis(&idx(&[2, 0, 0, 1, 1, 1], &[2, 3]), 1)),
            &[2, 3],
            Any,
        ),
        (
            "top_k 2 of [2,4]",
            |x| sq(x[0].top_k(2).map(|p| p.0)),
            &[2, 4],
            Distinct,
        ),
        (
            "boolean_mask rows",
            |x| sq(x[0].boolean_mask(&mask(&[true, false, true], &[3]))),
            &[3, 2],
            Any,
        ),
        (
            "boolean_mask elements",
            |x| sq(x[0].boolean_mask(&mask(&[false, true, true, false, true, false], &[3, 2]))),
            &[3, 2],
            Any,
        ),
        (
            "roll [2,3] by (1,-1)",
            |x| sq(x[0].roll(&[1, -1], &[0, 1])),
            &[2, 3],
            Any,
        ),
        ("roll by 0", |x| sq(x[0].roll(&[3], &[0])), &[3], Any),
        (
            "segment_sum [3,2]",
            |x| sq(x[0].segment_sum(&ids(&[0, 0, 2]))),
            &[3, 2],
            Any,
        ),
        (
            "segment_mean [3,2]",
            |x| sq(x[0].segment_mean(&ids(&[0, 0, 2]))),
            &[3, 2],
            Any,
        ),
        (
            "segment_max [5]",
            |x| sq(x[0].segment_max(&ids(&[0, 0, 0, 1, 1]))),
            &[5],
            Distinct,
        ),
        (
            "segment_min [5,2]",
            |x| sq(x[0].segment_min(&ids(&[0, 1, 1, 1, 3]))),
            &[5, 2],
            Distinct,
        ),
        (
            "segment_prod [4]",
            |x| sq(x[0].segment_prod(&ids(&[0, 0, 1, 1]))),
            &[4],
            Pos,
        ),
        (
            "unsorted_segment_sum with a dropped row",
            |x| sq(x[0].unsorted_segment_sum(&ids(&[1, 0, 1, -1]), 3)),
            &[4],
            Any,
        ),
        (
            "unsorted_segment_sum 2-D ids",
            |x| sq(x[0].unsorted_segment_sum(&idx(&[1, 0, 1, 1], &[2, 2]), 2)),
            &[2, 2, 3],
            Any,
        ),
        (
            "unsorted_segment_mean",
            |x| sq(x[0].unsorted_segment_mean(&ids(&[2, 0, 2, 2]), 3)),
            &[4, 2],
            Any,
        ),
        (
            "unsorted_segment_max",
            |x| sq(x[0].unsorted_segment_max(&ids(&[1, 0, 1, 1]), 2)),
            &[4],
            Distinct,
        ),
        (
            "unsorted_segment_min",
            |x| sq(x[0].unsorted_segment_min(&ids(&[1, 0, 1, 0]), 2)),
            &[4, 2],
            Distinct,
        ),
        (
            "unsorted_segment_prod",
            |x| sq(x[0].unsorted_segment_prod(&ids(&[1, 0, 1, -1]), 2)),
            &[4],
            Pos,
        ),
        (
            "dynamic_slice block",
            |x| sq(x[0].dynamic_slice(&ids(&[0, 1, 2]), &[2, 1, 2])),
            &[2, 3, 4],
            Any,
        ),
    ];
    for &(name, f, shape, dom) in one {
        t.push(case(name, f, &[(shape, dom)]));
    }
    let two: &[(&str, Op, &[usize], &[usize])] = &[
        (
            "tensor_scatter_nd_add rows",
            |x| sq(x[0].tensor_scatter_nd_add(&idx(&[2, 0, 2], &[3, 1]), &x[1])),
            &[3, 2],
            &[3, 2],
        ),
        (
            "tensor_scatter_nd_update elements",
            |x| sq(x[0].tensor_scatter_nd_update(&idx(&[1, 0, 0, 2], &[2, 2]), &x[1])),
            &[2, 3],
            &[2],
        ),
        (
            "dynamic_update_slice block",
            |x| sq(x[0].dynamic_update_slice(&x[1], &ids(&[1, 2]))),
            &[3, 4],
            &[2, 2],
        ),
    ];
    for &(name, f, a, b) in two {
        t.push(case(name, f, &[(a, Any), (b, Any)]));
    }
    t
}

#[test]
fn every_sorting_and_segment_op_passes_the_gradient_checker() {
    run_table(
        &table(),
        &[
            "sort",
            "take_along_axis",
            "top_k",
            "boolean_mask",
            "roll",
            "segment_sum",
            "segment_mean",
            "segment_max",
            "segment_min",
            "segment_prod",
            "unsorted_segment_sum",
            "unsorted_segment_mean",
            "unsorted_segment_max",
            "unsorted_segment_min",
            "unsorted_segment_prod",
            "tensor_scatter_nd_add",
            "tensor_scatter_nd_update",
            "dynamic_slice",
            "dynamic_update_slice",
        ],
        23,
        150,
    );
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn i64s(t: &Tensor) -> Vec<i64> {
    t.to_vec::<i64>().unwrap()
}

// Expected values below: TensorFlow 2.21 (tf.argsort, tf.math.top_k,
// tf.unique, tf.searchsorted, tf.math.bincount, tf.where, tf.math.segment_*,
// tf.math.unsorted_segment_*, tf.roll, tf.boolean_mask,
// tf.tensor_scatter_nd_update), printed by a script run in the peers' venv.

#[test]
fn sorting_and_searching_values_match_tensorflow() -> Result<()> {
    let x = Tensor::vector(&[3.0f32, 1.0, 2.0, 1.0, 5.0]);
    assert_eq!(i64s(&x.argsort(0, false)?), [1, 3, 2, 0, 4]);
    assert_eq!(i64s(&x.argsort(0, true)?), [4, 0, 2, 1, 3]);
    let (v, i) = Tensor::vector(&[1.0f32, 5.0, 3.0, 5.0]).top_k(3)?;
    assert_eq!((f32s(&v), i64s(&i)), (vec![5.0, 5.0, 3.0], vec![1, 3, 2]));
    let (y, i) = Tensor::vector(&[4i32, 1, 4, 2, 1]).unique()?;
    assert_eq!((y.to_vec::<i32>()?, i64s(&i)), (vec![4, 1, 2], vec![0, 1, 0, 2, 1]));
    let (y, i) = Tensor::vector(&[f32::NAN, 1.0, f32::NAN, -0.0, 0.0]).unique()?;
    let y = f32s(&y);
    assert!(y[0].is_nan() && y[1] == 1.0 && y[2].is_nan() && y[3] == 0.0 && y[3].is_sign_negative());
    assert_eq!(i64s(&i), [0, 1, 2, 3, 3]);
    let s = Tensor::vector(&[1.0f32, 2.0, 2.0, 5.0]);
    let q = Tensor::vector(&[2.0f32, 0.0, 9.0]);
    assert_eq!(i64s(&s.searchsorted(&q, false)?), [1, 0, 4]);
    assert_eq!(i64s(&s.searchsorted(&q, true)?), [3, 0, 4]);
    let b = Tensor::vector(&[1i32, 3, 1]);
    assert_eq!(i64s(&b.bincount(None, 0)?), [0, 2, 0, 1]);
    let w = Tensor::vector(&[0.5f32, 1.0, 2.0]);
    assert_eq!(f32s(&b.bincount(Some(&w), 6)?), [0.0, 2.5, 0.0, 1.0, 0.0, 0.0]);
    let m = Tensor::from_vec(vec![true, false, false, true], &[2, 2])?;
    assert_eq!(i64s(&m.argwhere()?), [0, 0, 1, 1]);
    let r = Tensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3])?.roll(&[1, -1], &[0, 1])?;
    assert_eq!(r.to_vec::<i32>()?, [5, 6, 4, 2, 3, 1]);
    let sorted = f32s(&Tensor::vector(&[2.0f32, f32::NAN, -1.0]).sort(0, false)?);
    assert_eq!(sorted[..2], [-1.0, 2.0]);
    assert!(sorted[2].is_nan());
    Ok(())
}

#[test]
fn segment_values_match_tensorflow() -> Result<()> {
    let d = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
    let s = ids(&[0, 0, 2]);
    assert_eq!(f32s(&d.segment_sum(&s)?), [4.0, 6.0, 0.0, 0.0, 5.0, 6.0]);
    assert_eq!(f32s(&d.segment_max(&s)?), [3.0, 4.0, 0.0, 0.0, 5.0, 6.0]);
    assert_eq!(f32s(&d.segment_min(&s)?), [1.0, 2.0, 0.0, 0.0, 5.0, 6.0]);
    assert_eq!(f32s(&d.segment_prod(&s)?), [3.0, 8.0, 1.0, 1.0, 5.0, 6.0]);
    assert_eq!(f32s(&d.segment_mean(&s)?), [2.0, 3.0, 0.0, 0.0, 5.0, 6.0]);
    let x = Tensor::vector(&[1.0f32, 2.0, 3.0, 4.0]);
    let u = ids(&[1, 0, 1, -1]);
    assert_eq!(f32s(&x.unsorted_segment_sum(&u, 3)?), [2.0, 4.0, 0.0]);
    assert_eq!(f32s(&x.unsorted_segment_max(&u, 3)?), [2.0, 3.0, f32::MIN]);
    assert_eq!(f32s(&x.unsorted_segment_min(&u, 3)?), [2.0, 1.0, f32::MAX]);
    assert_eq!(f32s(&x.unsorted_segment_prod(&u, 3)?), [2.0, 3.0, 1.0]);
    assert_eq!(f32s(&x.unsorted_segment_mean(&u, 3)?), [2.0, 2.0, 0.0]);
    let xi = Tensor::vector(&[1i32, 2]);
    assert_eq!(
        xi.unsorted_segment_max(&ids(&[0, 0]), 2)?.to_vec::<i32>()?,
        [2, i32::MIN]
    );
    Ok(())
}

fn grad_of(x: &Tensor, f: impl Fn(&Tensor) -> Result<Tensor>, w: &[f32]) -> Result<Vec<f32>> {
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(x);
        f(x)?.mul(&Tensor::vector(w))?.sum_all()
    })?;
    Ok(f32s(&tape.gradient(&l, x)?.unwrap()))
}

#[test]
fn segment_and_scatter_gradients_match_tensorflow() -> Result<()> {
    // ties share the cotangent of a max
    let x = Tensor::vector(&[2.0f32, 2.0, 1.0, 3.0, 3.0]);
    let g = grad_of(&x, |x| x.segment_max(&ids(&[0, 0, 0, 1, 1])), &[1.0, 10.0])?;
    assert_eq!(g, [0.5, 0.5, 0.0, 5.0, 5.0]);
    // a product with one zero sends the others' product to it; two zeros: 0
    let x = Tensor::vector(&[2.0f32, 0.0, 3.0, 0.0, 0.0, 4.0, 5.0]);
    let p = x.segment_prod(&ids(&[0, 0, 0, 1, 1, 2, 2]))?;
    assert_eq!(f32s(&p), [0.0, 0.0, 20.0]);
    let g = grad_of(
        &x,
        |x| x.segment_prod(&ids(&[0, 0, 0, 1, 1, 2, 2])),
        &[1.0, 10.0, 100.0],
    )?;
    assert_eq!(g, [0.0, 6.0, 0.0, 0.0, 0.0, 500.0, 400.0]);
    // duplicates: the last update wins; every duplicate gets the cotangent
    let t = Tensor::vector(&[1.0f32, 2.0, 3.0]);
    let u = Tensor::vector(&[7.0f32, 8.0]);
    let i = idx(&[1, 1], &[2, 1]);
    assert_eq!(f32s(&t.tensor_scatter_nd_update(&i, &u)?), [1.0, 8.0, 3.0]);
    let w = Tensor::vector(&[1.0f32, 10.0, 100.0]);
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(&t);
        tape.watch(&u);
        t.tensor_scatter_nd_update(&i, &u)?.mul(&w)?.sum_all()
    })?;
    let g = tape.gradient(&l, &[&t, &u])?;
    assert_eq!(f32s(g[0].as_ref().unwrap()), [1.0, 0.0, 100.0]);
    assert_eq!(f32s(g[1].as_ref().unwrap()), [10.0, 10.0]);
    Ok(())
}

#[test]
fn bad_input_is_an_error_naming_the_op() {
    let x = Tensor::vector(&[1.0f32, 2.0, 3.0]);
    let err = |r: Result<Tensor>| r.unwrap_err().to_string();
    assert!(err(x.segment_sum(&ids(&[1, 0, 1]))).contains("segment_sum"));
    assert!(err(x.segment_sum(&ids(&[0, 1]))).contains("segment_sum"));
    assert!(err(x.segment_max(&ids(&[-1, 0, 0]))).contains("segment_max"));
    assert!(err(x.unsorted_segment_sum(&ids(&[0, 3, 1]), 3)).contains("unsorted_segment_sum"));
    assert!(err(x.unsorted_segment_sum(&Tensor::vector(&[0.0f32, 1.0, 1.0]), 3)).contains("unsorted_segment_sum"));
    assert!(err(ids(&[1, -2]).bincount(None, 0)).contains("bincount"));
    assert!(x.top_k(4).unwrap_err().to_string().contains("top_k"));
    assert!(err(x.boolean_mask(&mask(&[true, false], &[2]))).contains("boolean_mask"));
    assert!(err(x.boolean_mask(&Tensor::vector(&[1i64, 0, 1]))).contains("boolean_mask"));
    assert!(err(x.argsort(1, false)).contains("argsort"));
    assert!(err(x.sort(-2, false)).contains("sort"));
    assert!(err(x.roll(&[1, 1], &[0])).contains("roll"));
    assert!(err(x.take_along_axis(&idx(&[0, 5, 1], &[3]), 0)).contains("take_along_axis"));
    assert!(
        err(x.tensor_scatter_nd_update(&idx(&[3], &[1, 1]), &Tensor::vector(&[1.0f32])))
            .contains("tensor_scatter_nd_update")
    );
    assert!(
        err(x.tensor_scatter_nd_update(&idx(&[0], &[1, 1]), &Tensor::vector(&[1.0f32, 2.0])))
            .contains("tensor_scatter_nd_update")
    );
    assert!(err(x.searchsorted(&Tensor::vector(&[1.0f64]), false)).contains("searchsorted"));
    let (v, _) = Tensor::from_vec(Vec::<f32>::new(), &[0]).unwrap().unique().unwrap();
    assert_eq!(v.shape(), &[0]);
    assert!(err(Tensor::scalar(1.0f32).unique().map(|p| p.0)).contains("unique"));
}

#[test]
fn traced_functions_follow_the_ids_and_indices_they_are_given() -> Result<()> {
    let f = function(|(x, s, k): &(Tensor, Tensor, Tensor)| {
        let seg = x.unsorted_segment_max(s, 3)?;
        let picked = x.take_along_axis(k, 0)?;
        Tensor::concat(
            &[&seg, &picked.sort(0, true)?, &x.argsort(0, false)?.cast(DType::F64)?],
            0,
        )
    });
    let eager = |x: &Tensor, s: &Tensor, k: &Tensor| {
        let seg = x.unsorted_segment_max(s, 3)?;
        let picked = x.take_along_axis(k, 0)?;
        Tensor::concat(
            &[&seg, &picked.sort(0, true)?, &x.argsort(0, false)?.cast(DType::F64)?],
            0,
        )
    };
    let x = Tensor::vector(&[0.5f64, -1.0, 2.0, 1.5]);
    for (s, k) in [([0i64, 1, 2, 2], [3i64, 0, 0, 1]), ([2, 2, -1, 0], [1, 1, 2, 3])] {
        let (s, k) = (ids(&s), ids(&k));
        let got = f.call(&(x.clone(), s.clone(), k.clone()))?;
        assert_eq!(got.to_vec::<f64>()?, eager(&x, &s, &k)?.to_vec::<f64>()?);
    }
    let x2 = Tensor::vector(&[3.0f64, 2.0, 1.0, 0.0]);
    let (s, k) = (ids(&[0, 0, 1, 1]), ids(&[0, 1, 2, 3]));
    assert_eq!(
        f.call(&(x2.clone(), s.clone(), k.clone()))?.to_vec::<f64>()?,
        eager(&x2, &s, &k)?.to_vec::<f64>()?
    );
    assert_eq!(f.trace_count(), 1);
    let listing = f.graph(&(x, s, k))?.to_string();
    assert!(
        listing.contains("UnsortedSegmentMax[num_segments=3]") && listing.contains("ArgSort[axis=0"),
        "{listing}"
    );
    Ok(())
}

#[test]
fn jacobians_and_forward_mode_go_through_segments_and_sorts() -> Result<()> {
    use gradtape::jvp;
    let x = Tensor::vector(&[0.5f64, -1.0, 2.0, 1.5, 0.25]);
    let s = ids(&[0, 0, 1, 1, -1]);
    let f = |x: &Tensor| -> Result<Tensor> {
        let m = x.unsorted_segment_max(&s, 2)?;
        let p = x.unsorted_segment_prod(&s, 2)?;
        Tensor::concat(&[&m, &p, &x.sort(0, true)?.narrow(0, 0, 2)?], 0)
    };
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&x);
        f(&x)
    })?;
    let jac = tape.jacobian(&y, &x)?.unwrap().to_vec::<f64>()?;
    // row by row with plain gradients
    for r in 0..6 {
        let tape = GradientTape::new();
        let yr = tape.record(|| {
            tape.watch(&x);
            f(&x)?.narrow(0, r, 1)?.sum_all()
        })?;
        let g = tape.gradient(&yr, &x)?.unwrap().to_vec::<f64>()?;
        assert_eq!(&jac[r * 5..(r + 1) * 5], &g[..], "row {r}");
    }
    // forward mode: J u
    let u = Tensor::vector(&[1.0f64, 2.0, 3.0, 4.0, 5.0]);
    let (_, t) = jvp(|p| f(&p[0]), std::slice::from_ref(&x), std::slice::from_ref(&u))?;
    let uv = u.to_vec::<f64>()?;
    let want: Vec<f64> = (0..6).map(|r| (0..5).map(|c| jac[r * 5 + c] * uv[c]).sum()).collect();
    assert_eq!(t.to_vec::<f64>()?, want);
    Ok(())
}

#[test]
fn segment_prod_is_exact_at_zeros_to_second_order() -> Result<()> {
    use gradtape::{check_gradients, hessian, CheckOptions};
    // segments with 0, 1 and 2 zeros (and 3 zeros): the products are
    // polynomials, so central differences of the gradient are exact up to
    // rounding and the checker compares first and second order tightly
    let x = Tensor::vector(&[3.0f64, 0.0, 0.0, 2.0, 0.0, 5.0, 4.0, 0.0, 0.0, 0.0, 1.5, -2.0, 0.5]);
    let opts = CheckOptions::default();
    let sorted = |x: &[Tensor]| sq(x[0].segment_prod(&ids(&[0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 4, 4, 4])));
    let r = check_gradients(sorted, std::slice::from_ref(&x), &opts)?;
    assert!(r.max_err_second.is_some());
    // unsorted: the segments interleaved, a dropped row, an empty segment
    let unsorted = |x: &[Tensor]| sq(x[0].unsorted_segment_prod(&ids(&[2, 0, 2, 0, 1, 3, 1, 5, 3, 3, -1, 0, 1]), 6));
    check_gradients(unsorted, std::slice::from_ref(&x), &opts)?;
    // 2-D data and 2-D ids
    let x2 = Tensor::from_vec(vec![0.0f64, 1.5, 0.0, 2.0, -1.0, 0.0, 0.0, 0.5], &[2, 2, 2])?;
    let two_d = |x: &[Tensor]| sq(x[0].unsorted_segment_prod(&idx(&[1, 1, 0, 1], &[2, 2]), 2));
    check_gradients(two_d, &[x2], &opts)?;
    // exact Hessian of y = p0 + 2 p1 + 3 p2 (p = segment_prod(x, [0,0,0,1,1,2,2]))
    // at [3, 0, 0, 2, 0, 5, 4], by hand: H[1,2] = x0 = 3, H[3,4] = 2, H[5,6] =
    // 3, the rest 0; so H·e2 = [0, 3, 0, 0, 0, 0, 0] (TF 2.21 gives 0 for the
    // two-zero segment; JAX refuses scatter_mul gradients)
    let x = Tensor::vector(&[3.0f64, 0.0, 0.0, 2.0, 0.0, 5.0, 4.0]);
    let w = Tensor::vector(&[1.0f64, 2.0, 3.0]);
    for unsorted in [false, true] {
        let h = hessian(
            |x| {
                let s = ids(&[0, 0, 0, 1, 1, 2, 2]);
                let p = if unsorted {
                    x.unsorted_segment_prod(&s, 3)?
                } else {
                    x.segment_prod(&s)?
                };
                p.mul(&w)?.sum_all()
            },
            &x,
        )?;
        let mut want = vec![0.0; 49];
        for (i, j, v) in [(1, 2, 3.0), (3, 4, 2.0), (5, 6, 3.0)] {
            want[i * 7 + j] = v;
            want[j * 7 + i] = v;
        }
        assert_eq!(h.to_vec::<f64>()?, want, "unsorted: {unsorted}");
    }
    // first order at the same point: TF 2.21 tf.math.segment_prod gradient
    // (hand-checked: products of the other rows)
    let g = grad_of(
        &Tensor::vector(&[3.0f32, 0.0, 0.0, 2.0, 0.0, 5.0, 4.0]),
        |x| x.segment_prod(&ids(&[0, 0, 0, 1, 1, 2, 2])),
        &[1.0, 2.0, 3.0],
    )?;
    assert_eq!(g, [0.0, 0.0, 0.0, 0.0, 4.0, 12.0, 15.0]);
    Ok(())
}

#[test]
fn forward_mode_of_segment_max_min_gives_empty_segments_a_zero_tangent() -> Result<()> {
    // JAX (float64): jax.jvp of jax.ops.segment_max / segment_min with ids
    // [0, 0, 2], 3 segments, x = [1, 3, 2], tangent ones: [1, 0, 1] (the
    // empty segment's value is a constant fill). TF 2.21's
    // ForwardAccumulator gives NaN there (its double VJP of the same rule).
    let x = Tensor::vector(&[1.0f64, 3.0, 2.0]);
    let t = Tensor::vector(&[1.0f64, 1.0, 1.0]);
    let s = ids(&[0, 0, 2]);
    type SegmentFn<'a> = &'a dyn Fn(&Tensor) -> Result<Tensor>;
    let fs: [SegmentFn; 4] = [
        &|x| x.segment_max(&s),
        &|x| x.segment_min(&s),
        &|x| x.unsorted_segment_max(&s, 3),
        &|x| x.unsorted_segment_min(&s, 3),
    ];
    for (k, f) in fs.iter().enumerate() {
        let (_, dy) = gradtape::jvp(|p| f(&p[0]), std::slice::from_ref(&x), std::slice::from_ref(&t))?;
        assert_eq!(dy.to_vec::<f64>()?, [1.0, 0.0, 1.0], "case {k}");
    }
    Ok(())
}

#[test]
fn empty_segment_fills_match_tensorflow_for_every_dtype() -> Result<()> {
    // TF 2.21: tf.math.unsorted_segment_max/min([1, 2, 3], [0, 0, 2], 3) and
    // tf.math.segment_max/min(...) per dtype: the unsorted forms fill the
    // dtype's lowest / highest finite value (f16 ∓65504, bf16 ∓3.38953e38,
    // f32 ∓3.4028235e38, f64 ∓1.79769313e308, i32/i64 MIN/MAX), the sorted
    // ones 0
    let lim: [(DType, f64, f64); 6] = [
        (DType::F16, -65504.0, 65504.0),
        (DType::BF16, -3.3895313892515355e38, 3.3895313892515355e38),
        (DType::F32, f32::MIN as f64, f32::MAX as f64),
        (DType::F64, f64::MIN, f64::MAX),
        (DType::I32, i32::MIN as f64, i32::MAX as f64),
        (DType::I64, i64::MIN as f64, i64::MAX as f64),
    ];
    let s = ids(&[0, 0, 2]);
    for (dt, lo, hi) in lim {
        let x = Tensor::vector(&[1.0f64, 2.0, 3.0]).cast(dt)?;
        let f = |t: Tensor| t.to_vec_f64();
        assert_eq!(f(x.unsorted_segment_max(&s, 3)?), [2.0, lo, 3.0], "{dt:?}");
        assert_eq!(f(x.unsorted_segment_min(&s, 3)?), [1.0, hi, 3.0], "{dt:?}");
        assert_eq!(f(x.segment_max(&s)?), [2.0, 0.0, 3.0], "{dt:?}");
        assert_eq!(f(x.segment_min(&s)?), [1.0, 0.0, 3.0], "{dt:?}");
    }
    // the integer fills exactly
    let xi = Tensor::vector(&[1i64, 2]);
    assert_eq!(
        xi.unsorted_segment_max(&ids(&[0, 0]), 2)?.to_vec::<i64>()?,
        [2, i64::MIN]
    );
    assert_eq!(
        xi.unsorted_segment_min(&ids(&[0, 0]), 2)?.to_vec::<i64>()?,
        [1, i64::MAX]
    );
    Ok(())
}

/// `dynamic_slice` and `dynamic_update_slice` against JAX 0.10
/// (`jax.lax.dynamic_slice` / `dynamic_update_slice` in float64, printed
/// by a script run in the reference venv): values, and the gradients of
/// `Σ w · dynamic_update_slice(x, u, (1, 1, 0))` with `w = 1 + k/2`;
/// where JAX clamps a start so the block fits, these refuse it, naming the
/// op and the shapes; and a traced function of the start serves every
/// start from one trace.
#[test]
fn dynamic_slices_match_jax_refuse_blocks_past_the_end_and_trace_once() -> Result<()> {
    let x = Tensor::from_vec((0..24).map(f64::from).collect::<Vec<_>>(), &[2, 3, 4])?;
    let u = Tensor::from_vec((1..7).map(|v| -f64::from(v)).collect::<Vec<_>>(), &[1, 2, 3])?;
    let at = ids(&[1, 1, 0]);
    let y = x.dynamic_update_slice(&u, &at)?;
    let want = [
        0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15., -1., -2., -3., 19., -4., -5., -6., 23.,
    ];
    assert_eq!(y.to_vec::<f64>()?, want);
    let s = x.dynamic_slice(&ids(&[0, 1, 2]), &[2, 2, 2])?;
    assert_eq!(s.to_vec::<f64>()?, [6., 7., 10., 11., 18., 19., 22., 23.]);
    // i32 starts too
    let at32 = Tensor::vector(&[1i32, 1, 0]);
    assert_eq!(x.dynamic_update_slice(&u, &at32)?.to_vec::<f64>()?, want);
    let w = Tensor::from_vec(
        (0..24).map(|k| 1.0 + f64::from(k) * 0.5).collect::<Vec<_>>(),
        &[2, 3, 4],
    )?;
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(&x);
        tape.watch(&u);
        x.dynamic_update_slice(&u, &at)?.mul(&w)?.sum_all()
    })?;
    let g = tape.gradient(&loss, &[&x, &u])?;
    let gx = g[0].as_ref().expect("dx").to_vec::<f64>()?;
    assert_eq!(
        gx,
        [
            1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 8.5, 0.0, 0.0, 0.0, 10.5, 0.0,
            0.0, 0.0, 12.5
        ]
    );
    assert_eq!(
        g[1].as_ref().expect("du").to_vec::<f64>()?,
        [9.0, 9.5, 10.0, 11.0, 11.5, 12.0]
    );

    // errors: past the end (JAX would clamp to (1, 1, 1)), negative,
    // a start of the wrong length or dtype, an update of another rank or
    // dtype, sizes of another rank
    let bad: Vec<(Result<Tensor>, &str)> = vec![
        (
            x.dynamic_update_slice(&u, &ids(&[1, 1, 2])),
            "[1, 2, 3] at start [1, 1, 2]",
        ),
        (x.dynamic_update_slice(&u, &ids(&[-1, 0, 0])), "at start [-1, 0, 0]"),
        (x.dynamic_update_slice(&u, &ids(&[1, 1])), "a vector of 3 integers"),
        (
            x.dynamic_update_slice(&u, &Tensor::vector(&[1.0f64, 1.0, 0.0])),
            "a vector of 3 integers",
        ),
        (x.dynamic_update_slice(&u.reshape(&[2, 3])?, &at), "rank"),
        (x.dynamic_update_slice(&u.cast(DType::F32)?, &at), "f32"),
        (
            x.dynamic_slice(&ids(&[0, 2, 0]), &[2, 2, 4]),
            "[2, 2, 4] at start [0, 2, 0]",
        ),
        (x.dynamic_slice(&at, &[2, 2]), "2 sizes"),
    ];
    for (i, (r, want)) in bad.into_iter().enumerate() {
        let e = r.expect_err("refused").to_string();
        assert!(e.contains("dynamic_") && e.contains(want), "case {i}: {e}");
    }

    // traced: the start is an input, one trace for every start; past the
    // end the compiled step refuses it as the eager op does
    let f = function(|(x, u, at): &(Tensor, Tensor, Tensor)| {
        let y = x.dynamic_update_slice(u, at)?;
        Ok((y.clone(), y.dynamic_slice(at, &[1, 2, 3])?.sum_all()?))
    });
    for start in [[1i64, 1, 0], [0, 0, 1], [1, 0, 0], [0, 1, 1]] {
        let at = ids(&start);
        let (y, s) = f.call(&(x.clone(), u.clone(), at.clone()))?;
        assert_eq!(y.to_vec::<f64>()?, x.dynamic_update_slice(&u, &at)?.to_vec::<f64>()?);
        assert_eq!(s.item()?, -21.0);
    }
    assert_eq!(f.trace_count(), 1);
    let e = f
        .call(&(x.clone(), u.clone(), ids(&[1, 2, 0])))
        .unwrap_err()
        .to_string();
    assert!(e.contains("dynamic_update_slice") && e.contains("does not fit"), "{e}");
    Ok(())
}
