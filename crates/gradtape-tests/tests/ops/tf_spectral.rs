//! The discrete Fourier transforms against TensorFlow 2.21 (complex128 and
//! f64): `fft`, `ifft`, `fft2d`, `ifft2d`, `rfft`, `irfft`, `rfft2d` and
//! `irfft2d` over prime, odd and even lengths, batches and length 1, with
//! `fft_length` shorter and longer than the input, and half spectra whose
//! zero and Nyquist frequencies carry imaginary parts; values and the
//! reverse-mode gradients seeded with a complex cotangent (TensorFlow's
//! convention, as in `tf_complex.rs`). The numbers are TensorFlow's,
//! printed by `tests/reference/tf_spectral.py` into
//! `tests/data/tf_spectral.txt`. Where `fft_length` crops the input,
//! TensorFlow's own gradient of the real transforms fails or is wrong, and
//! the file holds TensorFlow's gradient of the cropping spelled out
//! (`tf-cropped`, see the script); this crate's gradient is compared with
//! that. (The 3-D transforms are tested in `tf_image_more.rs`.)

use gradtape::{Complex, DType, GradientOptions, GradientTape, Result, Tensor};

use super::tf_util::{agrees, complexes, report};

type C = Complex<f64>;

const DATA: &str = include_str!("../data/tf_spectral.txt");

fn op(name: &str, x: &Tensor, n: Option<&[usize]>) -> Result<Tensor> {
    let one = || n.map(|n| n[0]);
    let two = || n.map(|n| [n[0], n[1]]);
    match name {
        "fft" => x.fft(),
        "ifft" => x.ifft(),
        "fft2d" => x.fft2d(),
        "ifft2d" => x.ifft2d(),
        "rfft" => x.rfft(one()),
        "irfft" => x.irfft(one()),
        "rfft2d" => x.rfft2d(two()),
        "irfft2d" => x.irfft2d(two()),
        _ => panic!("no op {name}"),
    }
}

/// A tensor's values as complex numbers (real ones with zero imaginary
/// parts).
fn values(t: &Tensor) -> Result<Vec<C>> {
    if t.dtype().is_complex() {
        t.to_vec::<C>()
    } else {
        Ok(t.to_vec::<f64>()?.into_iter().map(|v| C::new(v, 0.0)).collect())
    }
}

/// Both parts agree within 1e-12 of the largest modulus of the result: a
/// transform's roundoff is relative to its largest term.
fn all_close(got: &[C], want: &[C]) -> bool {
    let scale = want.iter().fold(0.0f64, |m, z| m.max(z.norm()));
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(a, b)| agrees(a.re, b.re, 1e-12, scale) && agrees(a.im, b.im, 1e-12, scale))
}

#[test]
fn fourier_transforms_match_tensorflow() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for line in DATA.lines() {
        let [name, shape, length, x, value, grad, src] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        let shape: Vec<usize> = shape.split('x').map(|d| d.parse().unwrap()).collect();
        let n: Option<Vec<usize>> = (length != "none").then(|| length.split(',').map(|v| v.parse().unwrap()).collect());
        let xs = complexes(x);
        // the real transforms take a real signal
        let x = if name.starts_with("rfft") {
            Tensor::from_vec(xs.iter().map(|z| z.re).collect::<Vec<_>>(), &shape)?
        } else {
            Tensor::from_vec(xs, &shape)?
        };
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x);
            op(name, &x, n.as_deref())
        })?;
        // the cotangent: complex for a complex y, real for a real one
        let k = y.numel();
        let w = if y.dtype().is_complex() {
            let w: Vec<C> = (0..k)
                .map(|i| C::new(1.0 + 0.5 * i as f64, -0.5 * (i % 3) as f64))
                .collect();
            Tensor::from_vec(w, y.shape())?
        } else {
            let w: Vec<f64> = (0..k).map(|i| 1.0 + 0.5 * i as f64).collect();
            Tensor::from_vec(w, y.shape())?.cast(y.dtype())?
        };
        let g = tape
            .gradient_with(&y, &x, GradientOptions::default().output_gradients(vec![w]))?
            .expect("a gradient");
        assert_eq!(g.dtype(), x.dtype(), "{name}: the gradient's dtype");
        assert_eq!(y.dtype() == DType::F64, name.starts_with("irfft"), "{name}: the dtype");
        for (what, got, want) in [
            ("value", values(&y)?, complexes(value)),
            ("grad", values(&g)?, complexes(grad)),
        ] {
            checked += 1;
            if !all_close(&got, &want) {
                bad.push(format!(
                    "{name} {shape:?} fft_length {length} {what} ({src}): got {got:?}, TensorFlow {want:?}"
                ));
            }
        }
    }
    report(checked, 200, &bad);
    Ok(())
}
