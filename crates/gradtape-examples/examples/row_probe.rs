//! A probe of a transformer step's row kernels: LayerNorm over the last
//! axis, GELU (tanh and erf forms) and the sparse softmax cross-entropy,
//! each eagerly and as a traced `function`, forward and forward+backward
//! (the backward seeded with a fixed random cotangent), at the shapes of
//! `scripts/row_probe_torch.py` (its torch counterpart).
//!
//! ```text
//! cargo run --release -p gradtape-examples --example row_probe -- [REPS] [FILTER]
//! ```
//!
//! Prints one line per case: the median and minimum milliseconds, and the
//! GB/s of the minimum time for the bytes a one-pass kernel must move
//! (forward: read x, write y; backward: read x and dy, write dx; the
//! cross-entropy's forward reads the logits only). `ROW_PROBE_FLUSH=1`
//! writes 32 MB between calls (the operands out of the first two cache
//! levels, as in a training step); `ROW_PROBE_PROFILE=1` prints the traced
//! forward+backward's per-node profile. Not a test: numbers for notes.
use std::time::Instant;

use gradtape::{function, DType, GradientOptions, GradientTape, Result, Rng, Tensor};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn time(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<(f64, f64)> {
    for _ in 0..3 {
        f()?;
    }
    let mut t = Vec::new();
    // ROW_PROBE_FLUSH: 32 MB written between calls (the operands out of
    // the caches, as in a training step where they were made long before)
    let flush = std::env::var("ROW_PROBE_FLUSH").is_ok();
    let mut junk = if flush { vec![0u8; 32 << 20] } else { Vec::new() };
    for i in 0..reps {
        for b in junk.iter_mut().step_by(64) {
            *b = b.wrapping_add(i as u8);
        }
        let s = Instant::now();
        f()?;
        t.push(s.elapsed().as_secs_f64() * 1e3);
    }
    let min = t.iter().cloned().fold(f64::INFINITY, f64::min);
    Ok((median(t), min))
}

fn line(name: &str, bytes: f64, r: (f64, f64)) {
    println!(
        "{name:<44} median {:8.3} ms  min {:8.3} ms  {:6.1} GB/s",
        r.0,
        r.1,
        bytes / (r.1 * 1e-3) / 1e9
    );
}

type Op = dyn Fn(&[Tensor]) -> Result<Tensor> + Send + Sync;

/// Times `op` over `args` (the first `watched` watched) eagerly and traced,
/// forward and forward+backward with the cotangent `dy`.
#[allow(clippy::too_many_arguments)]
fn case(
    reps: usize,
    name: &str,
    args: Vec<Tensor>,
    watched: usize,
    dy: Tensor,
    op: std::sync::Arc<Op>,
    fw_bytes: f64,
    bw_bytes: f64,
) -> Result<()> {
    let fwd = {
        let op = op.clone();
        move |a: &Vec<Tensor>| op(a)
    };
    let both = {
        let op = op.clone();
        move |a: &Vec<Tensor>| -> Result<Vec<Tensor>> {
            let (xs, dy) = a.split_at(a.len() - 1);
            let tape = GradientTape::new();
            let y = tape.record(|| {
                for x in &xs[..watched] {
                    tape.watch(x);
                }
                op(xs)
            })?;
            let src: Vec<&Tensor> = xs[..watched].iter().collect();
            let opts = GradientOptions::default().output_gradients(vec![dy[0].clone()]);
            let g: Vec<Option<Tensor>> = tape.gradient_with(&y, &src[..], opts)?;
            let mut out = vec![y];
            out.extend(g.into_iter().flatten());
            Ok(out)
        }
    };
    let mut args2 = args.clone();
    args2.push(dy);
    line(
        &format!("{name} eager  fwd"),
        fw_bytes,
        time(reps, || fwd(&args).map(drop))?,
    );
    let tf = function(fwd.clone());
    line(
        &format!("{name} traced fwd"),
        fw_bytes,
        time(reps, || tf.call(&args).map(drop))?,
    );
    line(
        &format!("{name} eager  fwd+bwd"),
        fw_bytes + bw_bytes,
        time(reps, || both(&args2).map(drop))?,
    );
    let tb = function(both.clone());
    line(
        &format!("{name} traced fwd+bwd"),
        fw_bytes + bw_bytes,
        time(reps, || tb.call(&args2).map(drop))?,
    );
    if std::env::var("ROW_PROBE_PROFILE").is_ok() {
        let (done, lines) =
            gradtape::function::compile::profile(|| (0..10).try_for_each(|_| tb.call(&args2).map(drop)));
        done?;
        println!("{}", gradtape::function::compile::report(&lines, 10));
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let reps: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(30);
    let filter: String = args.get(2).cloned().unwrap_or_default();
    let mut rng = Rng::new(7);
    let f32b = 4.0;
    for &(m, n) in &[(1024usize, 256usize), (512, 384), (2048, 128), (64, 4096)] {
        let name = format!("layer_norm [{m},{n}]");
        if !name.contains(&filter) {
            continue;
        }
        let x = rng.normal(&[m, n], 0.5, 2.0, DType::F32)?;
        let g = rng.normal(&[n], 1.0, 0.1, DType::F32)?;
        let b = rng.normal(&[n], 0.0, 0.1, DType::F32)?;
        let dy = rng.normal(&[m, n], 0.0, 1.0, DType::F32)?;
        let e = (m * n) as f64 * f32b;
        case(
            reps,
            &name,
            vec![x, g, b],
            3,
            dy,
            std::sync::Arc::new(|a: &[Tensor]| a[0].layer_normalization(&[-1], Some(&a[1]), Some(&a[2]), 1e-5)),
            2.0 * e,
            3.0 * e,
        )?;
    }
    for &approx in &[true, false] {
        for &(m, n) in &[(1024usize, 1024usize), (512, 1536)] {
            let name = format!("gelu {} [{m},{n}]", if approx { "tanh" } else { "erf " });
            if !name.contains(&filter) {
                continue;
            }
            let x = rng.normal(&[m, n], 0.0, 1.5, DType::F32)?;
            let dy = rng.normal(&[m, n], 0.0, 1.0, DType::F32)?;
            let e = (m * n) as f64 * f32b;
            case(
                reps,
                &name,
                vec![x],
                1,
                dy,
                std::sync::Arc::new(move |a: &[Tensor]| a[0].gelu(approx)),
                2.0 * e,
                3.0 * e,
            )?;
        }
    }
    for &(m, n) in &[(1024usize, 65usize), (256, 8192)] {
        let name = format!("xent [{m},{n}]");
        if !name.contains(&filter) {
            continue;
        }
        let x = rng.normal(&[m, n], 0.0, 2.0, DType::F32)?;
        let labels = Tensor::from_vec((0..m).map(|i| ((i * 7919) % n) as i64).collect::<Vec<_>>(), &[m])?;
        let dy = rng.normal(&[m], 0.0, 1.0, DType::F32)?;
        let e = (m * n) as f64 * f32b;
        // the logits first (watched), then the labels
        case(
            reps,
            &name,
            vec![x, labels],
            1,
            dy,
            std::sync::Arc::new(|a: &[Tensor]| Tensor::sparse_softmax_cross_entropy_with_logits(&a[1], &a[0])),
            e,
            2.0 * e,
        )?;
    }
    Ok(())
}
