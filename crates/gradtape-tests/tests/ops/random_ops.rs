//! Seeded random tensors: reproducibility, independence from how the work
//! is split, moments of large samples, the truncation bound, errors.

use gradtape::{DType, Error, Result, Tensor};

fn stats(v: &[f64]) -> (f64, f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n;
    let k = v.iter().map(|x| (x - m).powi(4)).sum::<f64>() / n / (var * var);
    (m, var, k)
}

const N: usize = 1_000_000;

#[test]
fn reproducible_and_split_independent() -> Result<()> {
    for dt in [DType::F32, DType::F64, DType::I32, DType::I64] {
        let a = Tensor::random_uniform(&[300, 200], -3.0, 5.0, dt, 11)?;
        let b = Tensor::random_uniform(&[300, 200], -3.0, 5.0, dt, 11)?;
        assert_eq!(a.dtype(), dt);
        assert_eq!(a.to_vec_f64(), b.to_vec_f64());
        assert_ne!(
            a.to_vec_f64(),
            Tensor::random_uniform(&[300, 200], -3.0, 5.0, dt, 12)?.to_vec_f64()
        );
        // element i depends on the seed and i only: a small draw (one thread)
        // is the prefix of a large one (filled in parallel chunks)
        let small = Tensor::random_uniform(&[100], -3.0, 5.0, dt, 11)?.to_vec_f64();
        assert_eq!(small[..], a.to_vec_f64()[..100]);
    }
    for f in [Tensor::random_normal, Tensor::truncated_normal] {
        let a = f(&[N], 1.0, 2.0, DType::F64, 3)?.to_vec::<f64>()?;
        let b = f(&[7], 1.0, 2.0, DType::F64, 3)?.to_vec::<f64>()?;
        assert_eq!(a[..7], b[..]);
        assert_eq!(a, f(&[N], 1.0, 2.0, DType::F64, 3)?.to_vec::<f64>()?);
        assert_ne!(a[..7], f(&[7], 1.0, 2.0, DType::F64, 4)?.to_vec::<f64>()?[..]);
        // f32 is the f64 draw rounded
        let c = f(&[7], 1.0, 2.0, DType::F32, 3)?.to_vec::<f32>()?;
        for (x, y) in c.iter().zip(&b) {
            assert_eq!(*x, *y as f32);
        }
    }
    assert_eq!(
        Tensor::random_normal(&[0, 3], 0.0, 1.0, DType::F32, 0)?.shape(),
        &[0, 3]
    );
    assert_eq!(
        Tensor::random_uniform(&[], 0.0, 1.0, DType::F32, 0)?.shape(),
        &[] as &[usize]
    );
    Ok(())
}

#[test]
fn uniform_moments() -> Result<()> {
    let v = Tensor::random_uniform(&[N], 0.0, 1.0, DType::F64, 1)?.to_vec::<f64>()?;
    assert!(v.iter().all(|x| (0.0..1.0).contains(x)));
    let (m, var, _) = stats(&v);
    // sd of the mean: sqrt(1/12/N) = 2.9e-4; of the variance about 7.5e-5; 5 sd
    assert!((m - 0.5).abs() < 1.5e-3, "mean {m}");
    assert!((var - 1.0 / 12.0).abs() < 4e-4, "var {var}");
    // f32 in [-2, 6)
    let v = Tensor::random_uniform(&[N], -2.0, 6.0, DType::F32, 2)?.to_vec_f64();
    assert!(v.iter().all(|x| (-2.0..6.0).contains(x)));
    let (m, var, _) = stats(&v);
    assert!((m - 2.0).abs() < 8.0 * 1.5e-3, "mean {m}");
    assert!((var - 64.0 / 12.0).abs() < 64.0 * 4e-4, "var {var}");
    // integers: each of 0..5 with frequency 1/5 (sd 4e-4)
    let v = Tensor::random_uniform(&[N], 0.0, 5.0, DType::I64, 3)?.to_vec::<i64>()?;
    for k in 0..5 {
        let f = v.iter().filter(|&&x| x == k).count() as f64 / N as f64;
        assert!((f - 0.2).abs() < 2e-3, "frequency of {k}: {f}");
    }
    assert!(v.iter().all(|x| (0..5).contains(x)));
    Ok(())
}

#[test]
fn normal_moments() -> Result<()> {
    let v = Tensor::random_normal(&[N], 3.0, 2.0, DType::F64, 5)?.to_vec::<f64>()?;
    let (m, var, kurt) = stats(&v);
    // sd of the mean 2e-3, of the variance 4·sqrt(2/N) = 5.7e-3, of the kurtosis sqrt(24/N) = 4.9e-3
    assert!((m - 3.0).abs() < 1e-2, "mean {m}");
    assert!((var - 4.0).abs() < 3e-2, "var {var}");
    assert!((kurt - 3.0).abs() < 2.5e-2, "kurtosis {kurt}");
    // the fraction beyond 2 sd is 4.55%
    let out = v.iter().filter(|x| (*x - 3.0).abs() > 4.0).count() as f64 / N as f64;
    assert!((out - 0.0455).abs() < 1.1e-3, "tail {out}");
    Ok(())
}

#[test]
fn truncated_normal_bound_and_moments() -> Result<()> {
    let v = Tensor::truncated_normal(&[N], -1.0, 0.5, DType::F64, 8)?.to_vec::<f64>()?;
    assert!(v.iter().all(|x| (x + 1.0).abs() <= 1.0), "a value beyond 2 sd");
    let (m, var, _) = stats(&v);
    // standard normal truncated to [-2, 2]: variance 1 - 4φ(2)/(Φ(2) - Φ(-2)) = 0.773741
    let expected = 0.25 * (1.0 - 4.0 * 0.053_990_966_5 / 0.954_499_736_1);
    assert!((m + 1.0).abs() < 5e-3 * 0.5, "mean {m}");
    assert!((var - expected).abs() < 0.25 * 4e-3, "var {var} vs {expected}");
    // the tail near the bound is populated (not clipped to the bound)
    assert!(v.iter().any(|x| (x + 1.0).abs() > 0.99));
    let f = Tensor::truncated_normal(&[N], 0.0, 1.0, DType::F32, 9)?.to_vec::<f32>()?;
    assert!(f.iter().all(|x| x.abs() <= 2.0));
    Ok(())
}

#[test]
fn random_errors() {
    let inv = |r: Result<Tensor>, op: &str| {
        let e = r.unwrap_err();
        assert!(e.to_string().starts_with(op), "{e}");
    };
    inv(Tensor::random_uniform(&[2], 1.0, 1.0, DType::F32, 0), "random_uniform");
    inv(
        Tensor::random_uniform(&[2], 0.0, f64::INFINITY, DType::F32, 0),
        "random_uniform",
    );
    inv(Tensor::random_uniform(&[2], 0.2, 0.7, DType::I32, 0), "random_uniform");
    inv(Tensor::random_uniform(&[2], 0.0, 1e12, DType::I32, 0), "random_uniform");
    assert!(matches!(
        Tensor::random_uniform(&[2], 0.0, 1.0, DType::Bool, 0).unwrap_err(),
        Error::UnsupportedDType { .. }
    ));
    inv(Tensor::random_normal(&[2], 0.0, -1.0, DType::F32, 0), "random_normal");
    inv(
        Tensor::random_normal(&[2], f64::NAN, 1.0, DType::F32, 0),
        "random_normal",
    );
    assert!(matches!(
        Tensor::truncated_normal(&[2], 0.0, 1.0, DType::I64, 0).unwrap_err(),
        Error::UnsupportedDType {
            op: "truncated_normal",
            ..
        }
    ));
}
