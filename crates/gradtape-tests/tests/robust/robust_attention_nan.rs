//! NaN through the fused attention (and, at the end, sampling from rows of
//! `-inf` logits): a query row with a NaN score (a NaN
//! in its query, in a key it sees, or in its mask) is NaN, output and
//! gradient, as the softmax over its scores is, and as PyTorch 2.x's
//! `F.scaled_dot_product_attention` gives (checked with torch 2 in the
//! reference environment: a query `[nan, 1, 1, 1]` against keys of ones
//! gives a row of NaN beside the other row's `[3, 4, 5]`; a mask of NaN
//! gives NaN everywhere; a mask of `-inf` gives zeros). Only a row whose
//! scores are all `-inf` (every key hidden) is 0.
//!
//! The bug this guards: the running maximum passes over NaN, so a row
//! whose every score was NaN (or NaN and `-inf`) kept a maximum of `-inf`
//! and was taken for a hidden row: zeros, and zero gradients, a silently
//! wrong number, on every path (the online kernel, the kernel on matrix
//! products, the unfused composite of forward mode and second order). A
//! NaN met in a block of keys before any finite score was dropped too.

use gradtape::{jvp, DType, GradientTape, Result, Tensor};

/// `[1, tq, w]` of `f(i)` in `dt`.
fn make(tq: usize, w: usize, dt: DType, f: impl Fn(usize) -> f64) -> Result<Tensor> {
    Tensor::from_vec((0..tq * w).map(f).collect::<Vec<f64>>(), &[1, tq, w])?.cast(dt)
}

fn rows(t: &Tensor) -> Vec<Vec<f64>> {
    let w = *t.shape().last().unwrap();
    t.to_vec_f64().chunks(w).map(<[f64]>::to_vec).collect()
}

/// The shapes of the three kernels' paths: the online kernel (narrow
/// heads, few keys; and more keys than one block of 64, so that a block
/// of only `-inf` and NaN comes before finite ones), and the kernel on
/// matrix products (heads and keys of 64 and more, in f64 on every CPU).
fn paths() -> Vec<(DType, usize, usize, usize)> {
    // (dtype, tk, d, dv)
    vec![
        (DType::F32, 3, 4, 3),
        (DType::F64, 3, 4, 3),
        (DType::F32, 150, 4, 3),
        (DType::F64, 150, 4, 3),
        (DType::F64, 100, 64, 64),
        (DType::F32, 100, 64, 64),
    ]
}

#[test]
fn a_nan_in_a_query_makes_its_row_nan_and_leaves_the_others() -> Result<()> {
    for (dt, tk, d, dv) in paths() {
        let what = format!("{dt} tk {tk} d {d} dv {dv}");
        let q = make(2, d, dt, |i| if i == 0 { f64::NAN } else { 0.1 * (i % 5) as f64 })?;
        let q_ok = make(2, d, dt, |i| 0.1 * (i % 5) as f64)?;
        let k = make(tk, d, dt, |i| ((i * 7) % 11) as f64 / 11.0)?;
        let v = make(tk, dv, dt, |i| ((i * 3) % 13) as f64 / 13.0)?;
        let o = q.scaled_dot_product_attention(&k, &v, None, false, None)?;
        let want = q_ok.scaled_dot_product_attention(&k, &v, None, false, None)?;
        let (o, want) = (rows(&o), rows(&want));
        assert!(o[0].iter().all(|x| x.is_nan()), "{what}: row 0 {:?}", &o[0][..3]);
        assert_eq!(o[1], want[1], "{what}: row 1");

        // its gradient: NaN, not the zeros of a hidden row
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&q);
            q.scaled_dot_product_attention(&k, &v, None, false, None)?.sum_all()
        })?;
        let g = rows(&tape.gradient(&y, &q)?.unwrap());
        assert!(
            g[0].iter().all(|x| x.is_nan()),
            "{what}: gradient of row 0 {:?}",
            &g[0][..3]
        );

        // forward mode (the unfused composite) agrees
        let (yf, _) = jvp(
            |p| p[0].scaled_dot_product_attention(&k, &v, None, false, None),
            std::slice::from_ref(&q),
            &[q.ones_like()],
        )?;
        let yf = rows(&yf);
        assert!(
            yf[0].iter().all(|x| x.is_nan()),
            "{what}: jvp's row 0 {:?}",
            &yf[0][..3]
        );
        assert!(yf[1].iter().all(|x| x.is_finite()), "{what}: jvp's row 1");
    }
    Ok(())
}

#[test]
fn a_nan_mask_is_nan_and_a_mask_of_minus_infinity_is_zero() -> Result<()> {
    for (dt, tk, d, dv) in paths() {
        let what = format!("{dt} tk {tk} d {d} dv {dv}");
        let q = make(2, d, dt, |i| 0.1 * (i % 5) as f64)?;
        let k = make(tk, d, dt, |i| ((i * 7) % 11) as f64 / 11.0)?;
        let v = make(tk, dv, dt, |i| ((i * 3) % 13) as f64 / 13.0)?;
        // row 0: only -inf and one NaN in the first keys, then finite
        // scores after the first block of 64 (where there is one); row 1:
        // every key hidden
        let m: Vec<f64> = (0..2 * tk)
            .map(|x| {
                let (i, j) = (x / tk, x % tk);
                match (i, j) {
                    (0, 1) => f64::NAN,
                    (0, j) if j >= 64 => 0.0,
                    _ => f64::NEG_INFINITY,
                }
            })
            .collect();
        let mask = Tensor::from_vec(m, &[2, tk])?.cast(dt)?;
        let o = rows(&q.scaled_dot_product_attention(&k, &v, Some(&mask), false, None)?);
        assert!(o[0].iter().all(|x| x.is_nan()), "{what}: row 0 {:?}", &o[0][..3]);
        assert!(o[1].iter().all(|&x| x == 0.0), "{what}: row 1 {:?}", &o[1][..3]);

        let all_nan = Tensor::full(&[2, tk], f64::NAN, dt);
        let o = q.scaled_dot_product_attention(&k, &v, Some(&all_nan), false, None)?;
        assert!(o.to_vec_f64().iter().all(|x| x.is_nan()), "{what}: a mask of NaN");

        // a causal row whose one visible key has a NaN score
        let kn = make(tk, d, dt, |i| if i == 0 { f64::NAN } else { 1.0 })?;
        let o = rows(&q.scaled_dot_product_attention(&kn, &v, None, true, None)?);
        assert!(o.iter().flatten().all(|x| x.is_nan()), "{what}: causal with key 0 NaN");

        // the composite of forward mode: the same rows
        let (yf, _) = jvp(
            |p| p[0].scaled_dot_product_attention(&k, &v, Some(&mask), false, None),
            std::slice::from_ref(&q),
            &[q.ones_like()],
        )?;
        let yf = rows(&yf);
        assert!(
            yf[0].iter().all(|x| x.is_nan()),
            "{what}: jvp's row 0 {:?}",
            &yf[0][..3]
        );
        assert!(yf[1].iter().all(|&x| x == 0.0), "{what}: jvp's row 1 {:?}", &yf[1][..3]);
    }
    Ok(())
}

/// A row of logits entirely `-inf` has no token to draw: `sample_next`
/// refuses it whatever `top_k` is (greedy decoding, `top_k = Some(1)`,
/// returned token 0 for it, silently, where every other `top_k` and
/// `categorical` refuse).
#[test]
fn sampling_refuses_a_row_entirely_minus_infinity_for_every_top_k() -> Result<()> {
    use gradtape::nn::sampling::{categorical, sample_next};
    use gradtape::Rng;
    let logits = Tensor::from_vec(vec![0.5f32, 2.0, f32::NEG_INFINITY, f32::NEG_INFINITY], &[2, 2])?;
    let mut rng = Rng::new(3);
    for k in [Some(1), Some(2), Some(5), None] {
        let e = sample_next(&logits, 1.0, k, &mut rng).unwrap_err().to_string();
        assert!(
            e.contains("sample_next") && e.contains("entirely -inf"),
            "top_k {k:?}: {e}"
        );
    }
    assert!(categorical(&logits, 2, &mut rng).is_err());
    // the greedy path still takes the first maximum of a row with one
    let ok = Tensor::from_vec(vec![f32::NEG_INFINITY, 2.0, 2.0, f32::NEG_INFINITY], &[1, 4])?;
    assert_eq!(sample_next(&ok, 1.0, Some(1), &mut rng)?.to_vec::<i64>()?, vec![1]);
    Ok(())
}
