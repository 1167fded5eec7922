use gradtape::{DType, GradientTape, Result, Tensor};
fn main() -> Result<()> {
    let x = Tensor::random_normal(&[1024, 256], 0.0, 1.0, DType::F32, 1)?;
    let g = Tensor::ones(&[256], DType::F32);
    let b = Tensor::zeros(&[256], DType::F32);
    let dy = Tensor::random_normal(&[1024, 256], 0.0, 1.0, DType::F32, 2)?;
    let h = Tensor::random_normal(&[1024, 1024], 0.0, 1.0, DType::F32, 3)?;
    let q = Tensor::random_normal(&[8, 4, 128, 64], 0.0, 1.0, DType::F32, 5)?;
    let k = Tensor::random_normal(&[8, 4, 128, 64], 0.0, 1.0, DType::F32, 6)?;
    let v = Tensor::random_normal(&[8, 4, 128, 64], 0.0, 1.0, DType::F32, 7)?;
    let dout = Tensor::random_normal(&[8, 4, 128, 64], 0.0, 1.0, DType::F32, 8)?;
    let a1 = Tensor::random_normal(&[1024, 1024], 0.0, 1.0, DType::F32, 5)?;
    let b1 = Tensor::random_normal(&[1024, 1024], 0.0, 1.0, DType::F32, 6)?;
    let which = std::env::args().nth(1).unwrap_or_default();
    let n: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let mut best = f64::MAX;
    for _ in 0..n {
        let t0 = std::time::Instant::now();
        if which == "ln" {
            let t = GradientTape::new();
            let y = t.record(|| {
                t.watch(&x);
                t.watch(&g);
                x.layer_normalization(&[-1], Some(&g), Some(&b), 1e-5)?
                    .mul(&dy)?
                    .sum_all()
            })?;
            let _gr = t.gradient(&y, &[&x, &g])?;
        } else if which == "attn" {
            q.scaled_dot_product_attention(&k, &v, None, true, Some(0.125))?;
        } else if which == "attng" {
            let t = GradientTape::new();
            let y = t.record(|| {
                t.watch(&q);
                t.watch(&k);
                t.watch(&v);
                q.scaled_dot_product_attention(&k, &v, None, true, Some(0.125))?
                    .mul(&dout)?
                    .sum_all()
            })?;
            let _gr = t.gradient(&y, &[&q, &k, &v])?;
        } else if which == "mm" {
            a1.matmul(&b1)?;
        } else if which == "mmt" {
            a1.matmul_with(&b1, true, false)?;
        } else if which == "shapes" {
            for (m, kk, nn) in [
                (128usize, 784usize, 512usize),
                (128, 512, 512),
                (128, 512, 10),
                (128, 10, 512),
                (6272, 144, 32),
                (25088, 9, 16),
                (1024, 1024, 256),
            ] {
                let a = Tensor::random_normal(&[m, kk], 0.0, 1.0, DType::F32, 5)?;
                let b = Tensor::random_normal(&[kk, nn], 0.0, 1.0, DType::F32, 6)?;
                let at = Tensor::random_normal(&[kk, m], 0.0, 1.0, DType::F32, 5)?;
                let bt = Tensor::random_normal(&[nn, kk], 0.0, 1.0, DType::F32, 6)?;
                for (name, f) in [("nn", 0), ("tn", 1), ("nt", 2)] {
                    let mut best = f64::MAX;
                    for _ in 0..(2_000_000_000 / (m * kk * nn)).clamp(20, 2000) {
                        let t0 = std::time::Instant::now();
                        match f {
                            0 => a.matmul(&b)?,
                            1 => at.matmul_with(&b, true, false)?,
                            _ => a.matmul_with(&bt, false, true)?,
                        };
                        best = best.min(t0.elapsed().as_secs_f64());
                    }
                    println!(
                        "{m}x{kk}x{nn} {name}: {:.3} ms {:.1} GF/s",
                        best * 1e3,
                        2.0 * (m * kk * nn) as f64 / best / 1e9
                    );
                }
            }
            break;
        } else if which == "gelu" {
            h.gelu(false)?;
        } else {
            h.gelu_grad()?;
        }
        best = best.min(t0.elapsed().as_secs_f64());
    }
    println!("{which} min {:.3} ms/iter", best * 1e3);
    Ok(())
}
