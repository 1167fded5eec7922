//! A probe of the optimizer step over many variables: AdamW (the gpt
//! example's settings) over the 68 variables of the `gpt` example's model
//! at width 384, 4 blocks, context 64 (7.16 M `f32` weights), timed as
//!
//! - `a`: eager `apply`;  `d`: eager `clip_gradients_by_global_norm` then `apply`;
//! - `b`: the same traced in one `function` (`p`: then its per-node
//!   profile; `g`: its graph);  `e`: `apply` alone traced;
//! - `c`: eager `apply` on one tensor of the same total size;
//! - `x`: before each timed call, a pass over more memory than the
//!   last-level cache holds (as the forward and backward passes between
//!   two updates of a training step);
//! - `q`: the query, key and value kernels' gradients column slices of
//!   one `[w, 3w]` tensor (strided views, as the compiler's fused q/k/v
//!   product makes them).
//!
//! ```text
//! cargo run --release -p gradtape-examples --example optim_probe -- REPS MODES [WIDTH LAYERS CONTEXT]
//! cargo run --release -p gradtape-examples --example optim_probe -- 30 qabce
//! ```
use std::sync::Mutex;
use std::time::Instant;

use gradtape::optim::{clip_gradients_by_global_norm, AdamW, Optimizer};
use gradtape::{function, DType, Gradient, Result, Rng, Tensor, Variable};

fn shapes(width: usize, layers: usize, ctx: usize, vocab: usize) -> Vec<(String, Vec<usize>)> {
    let (w, h) = (width, 6);
    let kd = w / h;
    let mut v = vec![
        ("tok/embeddings".to_string(), vec![vocab, w]),
        ("pos/embeddings".into(), vec![ctx, w]),
    ];
    for l in 0..layers {
        let p = |s: &str| format!("block{l}/{s}");
        v.push((p("ln1/gamma"), vec![w]));
        v.push((p("ln1/beta"), vec![w]));
        for q in ["query", "key", "value"] {
            v.push((p(&format!("{q}/kernel")), vec![w, h, kd]));
            v.push((p(&format!("{q}/bias")), vec![h, kd]));
        }
        v.push((p("out/kernel"), vec![h, kd, w]));
        v.push((p("out/bias"), vec![w]));
        v.push((p("ln2/gamma"), vec![w]));
        v.push((p("ln2/beta"), vec![w]));
        v.push((p("fc1/kernel"), vec![w, 4 * w]));
        v.push((p("fc1/bias"), vec![4 * w]));
        v.push((p("fc2/kernel"), vec![4 * w, w]));
        v.push((p("fc2/bias"), vec![w]));
    }
    v.push(("final/gamma".into(), vec![w]));
    v.push(("final/beta".into(), vec![w]));
    v
}

fn opt() -> AdamW {
    AdamW::new(1e-3)
        .weight_decay(0.01)
        .exclude_from_weight_decay(&["bias", "gamma", "beta", "scale"])
        .with_name("adamw")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// With mode `x`, a pass over this many bytes before each timed call:
/// more than the machine's last-level cache (480 MiB on the project's
/// Xeon), so the update reads its operands from memory, as in a training
/// step whose forward and backward passes came between two updates.
const EVICT_BYTES: usize = 640 << 20;

fn time(reps: usize, evict: bool, mut f: impl FnMut() -> Result<()>) -> Result<(f64, f64)> {
    for _ in 0..3 {
        f()?;
    }
    let mut t = Vec::new();
    let mut junk = if evict { vec![1u8; EVICT_BYTES] } else { Vec::new() };
    for r in 0..reps {
        for x in junk.iter_mut().step_by(64) {
            *x = x.wrapping_add(r as u8);
        }
        std::hint::black_box(&junk);
        let s = Instant::now();
        f()?;
        t.push(s.elapsed().as_secs_f64() * 1e3);
    }
    let min = t.iter().cloned().fold(f64::INFINITY, f64::min);
    Ok((median(t), min))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let reps: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(30);
    let which: String = args.get(2).cloned().unwrap_or("abcde".into());
    let width: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(384);
    let layers: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(4);
    let ctx: usize = args.get(5).and_then(|s| s.parse().ok()).unwrap_or(64);
    let sh = shapes(width, layers, ctx, 100);
    let mut rng = Rng::new(1);
    let vars: Vec<Variable> = sh
        .iter()
        .map(|(n, s)| {
            Variable::builder(rng.normal(s, 0.0, 0.02, DType::F32).unwrap())
                .name(n.clone())
                .build()
        })
        .collect();
    let strided = which.contains('q');
    let evict = which.contains('x');
    let grads: Vec<Tensor> = sh
        .iter()
        .map(|(n, s)| {
            // the compiler's fused q/k/v product: each kernel's gradient a column slice of one [w, 3w]
            if strided && (n.ends_with("query/kernel") || n.ends_with("key/kernel") || n.ends_with("value/kernel")) {
                let whole = rng.normal(&[width, 3 * width], 0.0, 0.01, DType::F32).unwrap();
                let k = if n.ends_with("query/kernel") {
                    0
                } else if n.ends_with("key/kernel") {
                    1
                } else {
                    2
                };
                let g = whole.narrow(1, k * width, width).unwrap().reshape(s).unwrap();
                assert!(!g.is_contiguous());
                g
            } else {
                rng.normal(s, 0.0, 0.01, DType::F32).unwrap()
            }
        })
        .collect();
    let total: usize = sh.iter().map(|(_, s)| s.iter().product::<usize>()).sum();
    println!("{} variables, {} elements", vars.len(), total);
    if which.contains('a') {
        let mut o = opt();
        let r = time(reps, evict, || {
            o.apply(
                grads
                    .iter()
                    .cloned()
                    .map(Gradient::from)
                    .map(Some)
                    .zip(vars.iter().cloned())
                    .collect(),
            )
        })?;
        println!("a eager AdamW 68 vars:          median {:.2} ms  min {:.2}", r.0, r.1);
    }
    if which.contains('d') {
        let mut o = opt();
        let r = time(reps, evict, || {
            let g: Vec<Option<Gradient>> = grads.iter().cloned().map(Gradient::from).map(Some).collect();
            let (g, _) = clip_gradients_by_global_norm(&g, 1.0)?;
            o.apply(g.into_iter().zip(vars.iter().cloned()).collect())
        })?;
        println!("d eager clip+AdamW 68 vars:     median {:.2} ms  min {:.2}", r.0, r.1);
    }
    if which.contains('b') {
        let o = Mutex::new(opt());
        let vs = vars.clone();
        let f = function(move |g: &Vec<Tensor>| {
            let g: Vec<Option<Gradient>> = g.iter().cloned().map(Gradient::from).map(Some).collect();
            let (g, norm) = clip_gradients_by_global_norm(&g, 1.0)?;
            o.lock()
                .unwrap()
                .apply(g.into_iter().zip(vs.iter().cloned()).collect())?;
            Ok(norm)
        });
        let r = time(reps, evict, || f.call(&grads).map(|_| ()))?;
        println!("b traced clip+AdamW 68 vars:    median {:.2} ms  min {:.2}", r.0, r.1);
        if which.contains('p') {
            let (done, lines) =
                gradtape::function::compile::profile(|| (0..10).try_for_each(|_| f.call(&grads).map(drop)));
            done?;
            println!("{}", gradtape::function::compile::report(&lines, 10));
        }
        if which.contains('g') {
            println!("{}", f.graph(&grads)?);
        }
    }
    if which.contains('e') {
        let o = Mutex::new(opt());
        let vs = vars.clone();
        let f = function(move |g: &Vec<Tensor>| {
            let g: Vec<Option<Gradient>> = g.iter().cloned().map(Gradient::from).map(Some).collect();
            o.lock()
                .unwrap()
                .apply(g.into_iter().zip(vs.iter().cloned()).collect())?;
            Ok(Tensor::scalar(0.0f32))
        });
        let r = time(reps, evict, || f.call(&grads).map(|_| ()))?;
        println!("e traced AdamW 68 vars:         median {:.2} ms  min {:.2}", r.0, r.1);
    }
    if which.contains('c') {
        let v = Variable::builder(rng.normal(&[total], 0.0, 0.02, DType::F32)?)
            .name("w".to_string())
            .build();
        let g = rng.normal(&[total], 0.0, 0.01, DType::F32)?;
        let mut o = opt();
        let r = time(reps, evict, || o.apply_gradients([(Some(g.clone()), &v)]))?;
        println!("c eager AdamW one tensor:       median {:.2} ms  min {:.2}", r.0, r.1);
    }
    Ok(())
}
