//! What the differential tests against TensorFlow share (`tf_*.rs`): the
//! data files' numbers, the weighted loss whose gradients they compare,
//! and the comparison itself.

use gradtape::{Complex, Result, Tensor};

/// A list of floats (`,`-separated, as Python's `repr`), or `None` for
/// `none` (no gradient).
pub fn floats(s: &str) -> Option<Vec<f64>> {
    (s != "none").then(|| {
        s.split(',')
            .map(|v| v.parse().unwrap_or_else(|_| panic!("bad number {v}")))
            .collect()
    })
}

/// `Σ w[i] y[i]` over the flattened `y`, `w[i] = 1 + i/2`: the loss whose
/// gradients the reference scripts print.
pub fn weighted(y: &Tensor) -> Result<Tensor> {
    let w: Vec<f64> = (0..y.numel()).map(|i| 1.0 + 0.5 * i as f64).collect();
    y.reshape(&[y.numel()])?
        .mul(&Tensor::vector(&w).cast(y.dtype())?)?
        .sum_all()
}

/// Whether `got` is TensorFlow's `want`: both NaN, equal (zeros of either
/// sign alike), or within `rel` of `|want|` or of `scale` (the magnitude
/// of a result whose near-zero elements carry its roundoff), whichever is
/// larger. An infinite `want` is only agreed with exactly (`rel · inf`
/// would let any finite number pass).
pub fn agrees(got: f64, want: f64, rel: f64, scale: f64) -> bool {
    (got.is_nan() && want.is_nan())
        || got == want
        || (want.is_finite() && (got - want).abs() <= rel * want.abs().max(scale))
}

/// [`agrees`] element by element, of equal lengths.
pub fn all_agree(got: &[f64], want: &[f64], rel: f64, scale: f64) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(a, b)| agrees(*a, *b, rel, scale))
}

/// Fails unless more than `min` comparisons were made (the data file was
/// read) and none of them differed, listing every difference.
pub fn report(checked: usize, min: usize, bad: &[String]) {
    assert!(checked > min, "{checked} comparisons");
    assert!(
        bad.is_empty(),
        "{} differences from TensorFlow:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// The largest finite magnitude in `v` (0 if none): the scale of a
/// result's roundoff, for [`agrees`].
pub fn magnitude(v: &[f64]) -> f64 {
    v.iter().filter(|x| x.is_finite()).fold(0.0f64, |m, x| m.max(x.abs()))
}

/// The complex numbers of a reference line, `re,im;re,im;...`.
pub fn complexes(s: &str) -> Vec<Complex<f64>> {
    s.split(';')
        .map(|p| {
            let (re, im) = p.split_once(',').expect("re,im");
            Complex::new(re.parse().unwrap(), im.parse().unwrap())
        })
        .collect()
}
