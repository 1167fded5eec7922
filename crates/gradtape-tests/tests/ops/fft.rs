//! Fourier transforms: values and gradients against TensorFlow 2.21
//! (`tf.signal.rfft`, `fft2d`, `irfft`, `irfft2d`, printed by a script run
//! in the peers' venv), round trips, errors, and traced functions. The
//! finite-difference checks (first and second order) are in
//! `gradcheck_complex.rs`.

use gradtape::{function, Complex, GradientTape, Result, Tensor};

type C = Complex<f64>;

fn close_c(got: &[C], want: &[(f64, f64)], tol: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, &(re, im)) in got.iter().zip(want) {
        assert!(
            (g.re - re).abs() <= tol && (g.im - im).abs() <= tol,
            "{got:?} vs {want:?}"
        );
    }
}

fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol, "{got:?} vs {want:?}");
    }
}

fn z() -> Tensor {
    let re = Tensor::from_vec(vec![1.0f64, 2.0, -1.0, 0.5, 0.0, 3.0], &[2, 3]).unwrap();
    let im = Tensor::from_vec(vec![0.0f64, 1.0, 2.0, -1.0, 0.5, 0.25], &[2, 3]).unwrap();
    Tensor::complex(&re, &im).unwrap()
}

#[test]
fn transforms_match_tensorflow() -> Result<()> {
    let x = Tensor::vector(&[1.0f32, -2.0, 0.5, 3.0, 0.25]);
    let y = x.rfft(None)?.to_vec::<Complex<f32>>()?;
    let y: Vec<C> = y.iter().map(|c| C::new(c.re as f64, c.im as f64)).collect();
    close_c(
        &y,
        &[
            (2.75, 0.0),
            (-2.3723392486572266, 3.6093404293060303),
            (3.4973392486572266, -1.0551246404647827),
        ],
        1e-5,
    );
    close_c(
        &z().fft2d()?.to_vec::<C>()?,
        &[
            (5.5, 2.75),
            (-1.149519052838329, -2.875),
            (0.149519052838329, -2.875),
            (-1.5, 3.25),
            (0.4174682452694518, -5.321152422706632),
            (2.582531754730548, 5.071152422706632),
        ],
        1e-12,
    );
    close(
        &z().narrow(0, 0, 1)?.reshape(&[3])?.irfft(Some(4))?.to_vec::<f64>()?,
        &[1.0, 0.0, -1.0, 1.0],
        1e-12,
    );
    close(
        &z().irfft2d(Some([2, 4]))?.to_vec::<f64>()?,
        &[0.9375, -0.4375, -0.0625, 0.3125, 0.0625, 0.4375, -0.9375, 0.6875],
        1e-12,
    );
    Ok(())
}

#[test]
fn gradients_match_tensorflow() -> Result<()> {
    // d/dx real(Σ w ⊙ rfft(x))
    let x = Tensor::vector(&[1.0f64, -2.0, 0.5, 3.0]);
    let w = Tensor::vector(&[C::new(1.0, 2.0), C::new(-0.5, 0.25), C::new(3.0, -1.0)]);
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(&x);
        x.rfft(None)?.mul(&w)?.sum_all()?.real()
    })?;
    close(
        &tape.gradient(&l, &x)?.unwrap().to_vec::<f64>()?,
        &[3.5, -1.75, 4.5, -2.25],
        1e-12,
    );
    // d/dz Σ v ⊙ irfft(z, 4)
    let z0 = z().narrow(0, 0, 1)?.reshape(&[3])?;
    let v = Tensor::vector(&[1.0f64, -2.0, 0.5, 4.0]);
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(&z0);
        z0.irfft(Some(4))?.mul(&v)?.sum_all()
    })?;
    close_c(
        &tape.gradient(&l, &z0)?.unwrap().to_vec::<C>()?,
        &[(0.875, 0.0), (0.25, 3.0), (-0.125, 0.0)],
        1e-12,
    );
    Ok(())
}

#[test]
fn inverses_undo_the_transforms() -> Result<()> {
    let x = Tensor::from_vec((0..12).map(|i| (i as f64 * 0.7).sin()).collect(), &[3, 4])?;
    close(
        &x.rfft(None)?.irfft(Some(4))?.to_vec::<f64>()?,
        &x.to_vec::<f64>()?,
        1e-12,
    );
    close(
        &x.rfft2d(None)?.irfft2d(Some([3, 4]))?.to_vec::<f64>()?,
        &x.to_vec::<f64>()?,
        1e-12,
    );
    let back = z().fft()?.ifft()?.to_vec::<C>()?;
    let want: Vec<(f64, f64)> = z().to_vec::<C>()?.iter().map(|c| (c.re, c.im)).collect();
    close_c(&back, &want, 1e-12);
    let back = z().ifft2d()?.fft2d()?.to_vec::<C>()?;
    close_c(&back, &want, 1e-12);
    // empty axes stay empty
    assert_eq!(Tensor::zeros(&[2, 0], gradtape::DType::C64).fft()?.shape(), &[2, 0]);
    Ok(())
}

#[test]
fn bad_input_is_an_error_naming_the_op() {
    let err = |r: Result<Tensor>| r.unwrap_err().to_string();
    assert!(err(Tensor::vector(&[1.0f32]).fft()).contains("fft"));
    assert!(err(z().reshape(&[6]).unwrap().fft2d()).contains("fft2d"));
    assert!(err(z().rfft(None)).contains("rfft"));
    assert!(err(Tensor::vector(&[1.0f64]).irfft(None)).contains("irfft"));
    assert!(err(Tensor::scalar(1.0f64).rfft(None)).contains("rfft"));
    assert!(err(Tensor::vector(&[1i32, 2]).rfft(None)).contains("rfft"));
}

#[test]
fn transforms_trace_into_graph_nodes() -> Result<()> {
    let f = function(|x: &Tensor| x.rfft(None)?.mul(&x.rfft(None)?.conj()?)?.irfft(Some(4)));
    for k in 0..2 {
        let x = Tensor::vector(&[1.0f64 + k as f64, -2.0, 0.5, 3.0]);
        let eager = x.rfft(None)?.mul(&x.rfft(None)?.conj()?)?.irfft(Some(4))?;
        assert_eq!(f.call(&x)?.to_vec::<f64>()?, eager.to_vec::<f64>()?);
    }
    assert_eq!(f.trace_count(), 1);
    let listing = f.graph(&Tensor::vector(&[1.0f64, 2.0, 3.0, 4.0]))?.to_string();
    assert!(listing.contains("FFT") && listing.contains("IFFT"), "{listing}");
    Ok(())
}
