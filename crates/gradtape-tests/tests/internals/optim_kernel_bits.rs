//! The optimizer update loops of `src/optim/kernel.rs` (f32, f64: runs of
//! `LANES` elements vectorised, a large variable spread over the threads,
//! a traced clipping's factor multiplied as the gradient is read) and
//! `src/optim/half_update.rs` (f16, bf16: blocks converted to f32 and
//! rounded per operation) against the reference, one element at a time on
//! one thread (`kernel::pass_elementwise`, run through `kernel::testing`;
//! a factor multiplied into the whole gradient first, as the `Mul` node of
//! a traced clipping made it): the same bits, for every rule.
//!
//! Both sides are the library's code as it compiles it (the optimizers'
//! `apply_gradients`), not copies instantiated in this unoptimised binary.
//! No external numbers: the reference is the definition of the bits
//! (the rules' values against Keras are `tests/nn/optimizers.rs`').

use gradtape::__internals::optim::kernel::{testing, LANES};
use gradtape::optim::{Adadelta, Adagrad, Adam, AdamW, Adamax, Lion, Nadam, Optimizer, RmsProp, Sgd};
use gradtape::{DType, Gradient, IndexedSlices, Tensor, Variable};

/// `kernel::TASK`, the elements of a task of a dense update spread over
/// the threads (a variable of at least two is spread).
const TASK: usize = 1 << 14;

/// `n` weights, gradients or slot values with the special values among
/// them (signed zeros, f16 and f32 subnormals, the largest finite f16,
/// infinities, NaN, ±1, -2) and ordinary values of scales 1e-5 to 1e3.
fn values(n: usize, seed: u64, dt: DType) -> Tensor {
    let special = [
        0.0,
        -0.0,
        6e-8,
        -3e-7,
        1e-40,
        65504.0,
        -65504.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1.0,
        -2.0,
    ];
    let v: Vec<f64> = (0..n as u64)
        .map(|i| match (i * 7 + seed) % 13 {
            k @ 0..=2 => special[((i / 13 + seed + k) % special.len() as u64) as usize],
            k => ((i as f64 * 0.731 + seed as f64).sin()) * 10f64.powi(k as i32 - 8),
        })
        .collect();
    Tensor::from_vec(v, &[n]).unwrap().cast(dt).unwrap()
}

/// An optimizer, boxed behind one `apply_gradients` call.
type Apply = Box<dyn FnMut(Vec<(Option<Gradient>, Variable)>) -> gradtape::Result<Vec<Variable>>>;

/// A function making a fresh optimizer.
type Make = Box<dyn Fn() -> Apply>;

/// Every rule of `optim` in its configurations (momentum, Nesterov,
/// AMSGrad, centred, weight decay), each made fresh by its function;
/// with `lazy`, sparse gradients update their rows only.
fn every_optimizer(lazy: bool) -> Vec<(&'static str, Make)> {
    fn boxed<O: Optimizer + 'static>(mut o: O) -> Apply {
        Box::new(move |pairs| {
            o.apply(pairs)?;
            Ok(o.variables())
        })
    }
    macro_rules! cases {
        ($($name:literal => $make:expr),* $(,)?) => {
            vec![$(($name, Box::new(move || boxed($make.lazy_sparse(lazy))) as Make)),*]
        };
    }
    cases![
        "adam" => Adam::new(1e-3),
        "adam amsgrad" => Adam::new(1e-3).amsgrad(true),
        "adamw" => AdamW::new(1e-3).weight_decay(0.01),
        "adamw amsgrad" => AdamW::new(1e-2).weight_decay(0.1).amsgrad(true),
        "sgd" => Sgd::new(0.1),
        "sgd wd" => Sgd::new(0.1).weight_decay(0.1),
        "sgd momentum" => Sgd::new(0.1).momentum(0.9).unwrap(),
        "sgd nesterov" => Sgd::new(0.1).momentum(0.9).unwrap().nesterov(true),
        "sgd momentum wd" => Sgd::new(0.1).momentum(0.9).unwrap().weight_decay(0.1),
        "rmsprop" => RmsProp::new(1e-2),
        "rmsprop momentum" => RmsProp::new(1e-2).momentum(0.5).unwrap(),
        "rmsprop centered" => RmsProp::new(1e-2).centered(true),
        "rmsprop centered momentum" => RmsProp::new(1e-2).centered(true).momentum(0.5).unwrap(),
        "adagrad" => Adagrad::new(1e-2),
        "adamax" => Adamax::new(1e-3),
        "nadam" => Nadam::new(1e-3),
        "lion" => Lion::new(1e-3),
        "lion wd" => Lion::new(1e-3).weight_decay(0.05),
        "adadelta" => Adadelta::new(1.0),
    ]
}

/// The bits of a tensor's values (NaNs as one value: the reference's and
/// the vector instructions' NaN payloads are not specified alike).
fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64()
        .into_iter()
        .map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() })
        .collect()
}

/// Runs `make`'s optimizer for three steps on a variable starting at
/// `w0` with the gradients `grads(step)`, `elementwise` (the reference)
/// or not, with every dense gradient multiplied by `scale`: the bits of
/// the weight and of every slot after.
fn three_steps(
    make: &dyn Fn() -> Apply,
    w0: &Tensor,
    grads: &dyn Fn(usize) -> Gradient,
    elementwise: bool,
    scale: Option<f64>,
) -> Vec<Vec<u64>> {
    testing(elementwise, scale, || {
        let v = Variable::new(w0.clone());
        let mut opt = make();
        let mut slots = Vec::new();
        for step in 0..3 {
            slots = opt(vec![(Some(grads(step)), v.clone())]).unwrap();
        }
        let mut out = vec![bits(&v.read())];
        // (the step counter is a slot too: it must agree as well)
        out.extend(slots.iter().map(|s| bits(&s.read())));
        out
    })
}

/// Asserts that `got` and `want` (a weight's and its slots' bits) agree,
/// naming the first difference; and that the updates moved most weights.
fn same(case: &str, got: &[Vec<u64>], want: &[Vec<u64>], w0: &Tensor, dense: bool) {
    assert_eq!(got.len(), want.len(), "{case}: slot count");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        if let Some(i) = g.iter().zip(w).position(|(a, b)| a != b) {
            panic!(
                "{case}: {} [{i}]: {:e} (fast) vs {:e} (elementwise)",
                if k == 0 {
                    "weight".to_string()
                } else {
                    format!("slot {k}")
                },
                f64::from_bits(g[i]),
                f64::from_bits(w[i])
            );
        }
    }
    // (the test can fail: most weights moved; sparse gradients touch rows only)
    if dense && got[0].len() >= 15 {
        let before = bits(w0);
        let moved = got[0].iter().zip(&before).filter(|(a, b)| a != b).count();
        assert!(
            moved * 2 > got[0].len(),
            "{case}: only {moved} of {} weights moved",
            got[0].len()
        );
    }
}

/// Dense gradients: every rule, in f32, f64, f16 and bf16, on lengths
/// around the runs of `LANES` and the threads' tasks (`TASK`; from two
/// tasks on a variable is spread over the threads), with and without a
/// factor on the gradients (0.37 and 3: products that round), NaN and
/// infinities in weights and gradients.
#[test]
fn every_rules_update_is_the_elementwise_bits_dense() {
    let lengths = [
        1,
        15,
        17,
        LANES - 1,
        LANES + 1,
        TASK - 1,
        TASK + 1,
        2 * TASK + 1,
        3 * TASK + 5,
    ];
    let makes = every_optimizer(false);
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for n in lengths {
            let w0 = values(n, 1, dt);
            let gs: Vec<Tensor> = (0..3).map(|s| values(n, 2 + s as u64, dt)).collect();
            let grads = |s: usize| Gradient::Dense(gs[s].clone());
            for (name, make) in &makes {
                for scale in [None, Some(0.37), Some(3.0)] {
                    let case = format!("{dt:?} {name} n={n} scale={scale:?}");
                    let got = three_steps(make.as_ref(), &w0, &grads, false, scale);
                    let want = three_steps(make.as_ref(), &w0, &grads, true, scale);
                    same(&case, &got, &want, &w0, true);
                }
            }
        }
    }
}

/// Sparse gradients (rows of a [rows, 9] variable, an index repeated,
/// rows far apart so the gaps between them are updated with zero
/// gradients in several pieces unless the update is lazy): every rule,
/// lazy and not, in the four dtypes, against the reference.
#[test]
fn every_rules_update_is_the_elementwise_bits_sparse() {
    let (rows, width) = (700, 9);
    for lazy in [false, true] {
        let makes = every_optimizer(lazy);
        for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let w0 = values(rows * width, 1, dt).reshape(&[rows, width]).unwrap();
            let idx = Tensor::vector(&[3i64, 650, 3, 0, 699, 120]);
            let vals: Vec<Tensor> = (0..3)
                .map(|s| values(6 * width, 2 + s as u64, dt).reshape(&[6, width]).unwrap())
                .collect();
            let grads =
                |s: usize| Gradient::Sparse(IndexedSlices::new(vals[s].clone(), idx.clone(), &[rows, width]).unwrap());
            for (name, make) in &makes {
                let case = format!("{dt:?} {name} sparse lazy={lazy}");
                let got = three_steps(make.as_ref(), &w0, &grads, false, None);
                let want = three_steps(make.as_ref(), &w0, &grads, true, None);
                same(&case, &got, &want, &w0, false);
                // (the listed rows moved)
                let before = bits(&w0);
                let row = |b: &[u64], r: usize| b[r * width..(r + 1) * width].to_vec();
                for r in [0, 3, 120, 650, 699] {
                    assert_ne!(row(&got[0], r), row(&before, r), "{case}: row {r} did not move");
                }
            }
        }
    }
}

/// The reference is what it claims: with `testing(true, ..)` an AdamW
/// step of a few f32 weights is the rule written out here, one element
/// at a time (Keras's AdamW: the decay, then the moments and the step,
/// in f32 as the variable's dtype), the gradient times the factor first.
#[test]
fn the_reference_is_adamw_written_out() {
    let w0 = [0.5f32, -1.5, 2.0, 0.0, 1e-3];
    let g = [0.1f32, -0.2, 3.0, 0.0, -1e-4];
    let (lr, wd, c) = (1e-2f64, 0.1f64, 0.37f64);
    let v = Variable::new(Tensor::vector(&w0));
    testing(true, Some(c), || {
        let mut opt = AdamW::new(lr).weight_decay(wd);
        opt.apply_gradients([(Some(Tensor::vector(&g)), &v)]).unwrap();
    });
    let got = v.read().to_vec::<f32>().unwrap();
    let alpha = (lr * (1.0f64 - 0.999).sqrt() / (1.0 - 0.9)) as f32;
    for i in 0..w0.len() {
        let gi = g[i] * c as f32;
        let mut w = w0[i];
        w -= w * wd as f32 * lr as f32;
        let m = 0.0 + (gi - 0.0) * (1.0 - 0.9f64) as f32;
        let v2 = 0.0 + (gi * gi - 0.0) * (1.0 - 0.999f64) as f32;
        w -= m * alpha / (v2.max(v2).sqrt() + 1e-7f64 as f32);
        assert_eq!(got[i].to_bits(), w.to_bits(), "[{i}]: {} vs {w}", got[i]);
    }
}

/// A variable of a batch: its starting value and its gradient at each of
/// three steps.
struct Member {
    w0: Tensor,
    grads: Vec<Gradient>,
}

/// Variables of every length class of `batch.rs`'s cuts (1, 15, around
/// `LANES` and `TASK`, several tasks), `dts[k % dts.len()]` the dtype of
/// the `k`-th; then, in `dts[0]`, a `[700, 9]` table with a sparse
/// gradient (an index repeated, rows far apart), a `[300, 96]` weight
/// whose gradient is a column slice of a `[300, 288]` tensor (a strided
/// view whose rows the update reads in place), a `[40, 20]` one sliced
/// from `[40, 60]` (rows too short: gathered) and a `[64, 70]` one whose
/// gradient is a transposed view.
fn members(dts: &[DType]) -> Vec<Member> {
    let lengths = [1, 15, LANES + 1, TASK - 1, TASK + 1, 17, 3 * TASK + 5, 2 * TASK + 1];
    let mut out: Vec<Member> = lengths
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let dt = dts[k % dts.len()];
            Member {
                w0: values(n, 1 + k as u64, dt),
                grads: (0..3)
                    .map(|s| Gradient::Dense(values(n, 20 + 3 * k as u64 + s, dt)))
                    .collect(),
            }
        })
        .collect();
    let dt = dts[0];
    let (rows, width) = (700, 9);
    let idx = Tensor::vector(&[3i64, 650, 3, 0, 699, 120]);
    out.push(Member {
        w0: values(rows * width, 5, dt).reshape(&[rows, width]).unwrap(),
        grads: (0..3)
            .map(|s| {
                let v = values(6 * width, 40 + s, dt).reshape(&[6, width]).unwrap();
                Gradient::Sparse(IndexedSlices::new(v, idx.clone(), &[rows, width]).unwrap())
            })
            .collect(),
    });
    let sliced = |r: usize, c: usize, seed: u64| Member {
        w0: values(r * c, seed, dt).reshape(&[r, c]).unwrap(),
        grads: (0..3)
            .map(|s| {
                let whole = values(r * 3 * c, seed + 10 + s, dt).reshape(&[r, 3 * c]).unwrap();
                let g = whole.narrow(1, c, c).unwrap();
                assert!(!g.is_contiguous());
                Gradient::Dense(g)
            })
            .collect(),
    };
    out.push(sliced(300, 96, 50));
    out.push(sliced(40, 20, 60));
    out.push(Member {
        w0: values(64 * 70, 70, dt).reshape(&[64, 70]).unwrap(),
        grads: (0..3)
            .map(|s| {
                let g = values(64 * 70, 80 + s, dt)
                    .reshape(&[70, 64])
                    .unwrap()
                    .transpose()
                    .unwrap();
                assert!(!g.is_contiguous());
                Gradient::Dense(g)
            })
            .collect(),
    });
    out
}

/// Three steps of `make`'s optimizer over `members`: `together`, one
/// optimizer and one `apply_gradients` call with every variable (the
/// batched pass); else one optimizer per variable, each called alone.
/// The bits of each variable and its slots, per member.
fn steps_of(
    make: &dyn Fn() -> Apply,
    members: &[Member],
    together: bool,
    elementwise: bool,
    scale: Option<f64>,
) -> Vec<Vec<Vec<u64>>> {
    testing(elementwise, scale, || {
        let vars: Vec<Variable> = members.iter().map(|m| Variable::new(m.w0.clone())).collect();
        let pairs = |step: usize, which: &mut dyn Iterator<Item = usize>| -> Vec<(Option<Gradient>, Variable)> {
            which
                .map(|i| (Some(members[i].grads[step].clone()), vars[i].clone()))
                .collect()
        };
        // per member, its slots (the optimizers' variables but the counters)
        let slots: Vec<Vec<Variable>> = if together {
            let mut opt = make();
            let mut all = Vec::new();
            for step in 0..3 {
                all = opt(pairs(step, &mut (0..members.len()))).unwrap();
            }
            let k = (all.len() - 1) / members.len();
            all[1..].chunks(k.max(1)).map(|c| c[..k].to_vec()).collect()
        } else {
            (0..members.len())
                .map(|i| {
                    let mut opt = make();
                    let mut all = Vec::new();
                    for step in 0..3 {
                        all = opt(pairs(step, &mut std::iter::once(i))).unwrap();
                    }
                    all[1..].to_vec()
                })
                .collect()
        };
        vars.iter()
            .zip(slots.iter().chain(std::iter::repeat(&Vec::new())))
            .map(|(v, s)| {
                std::iter::once(bits(&v.read()))
                    .chain(s.iter().map(|s| bits(&s.read())))
                    .collect()
            })
            .collect()
    })
}

/// Many variables of mixed lengths, dense (contiguous and strided) and
/// sparse, updated by one `apply_gradients` call (one pass over all of
/// them, cut into tasks that span variables: `src/optim/batch.rs`) give
/// the bits of each updated alone by the reference, for every rule, in
/// each dtype and in a batch of the four dtypes mixed, with and without a
/// factor on the dense gradients (a traced step's folded clipping), lazy
/// and not.
#[test]
fn many_variables_updated_together_are_each_alone_bits() {
    let batches: [&[DType]; 5] = [
        &[DType::F32],
        &[DType::F64],
        &[DType::F16],
        &[DType::BF16],
        &[DType::F32, DType::F64, DType::BF16, DType::F16],
    ];
    for dts in batches {
        let ms = members(dts);
        for lazy in [false, true] {
            for (name, make) in &every_optimizer(lazy) {
                for scale in [None, Some(0.37)] {
                    let got = steps_of(make.as_ref(), &ms, true, false, scale);
                    let want = steps_of(make.as_ref(), &ms, false, true, scale);
                    assert_eq!(got.len(), ms.len());
                    for (i, m) in ms.iter().enumerate() {
                        let case = format!(
                            "{dts:?} {name} lazy={lazy} scale={scale:?} member {i} {:?}",
                            m.w0.shape()
                        );
                        // (whether most weights moved is checked on the
                        // dense f32 and f64 ones past one run; half
                        // weights of 1e3 and more are beyond a step of
                        // 1e-3, so there at least a quarter)
                        let dense = matches!(m.grads[0], Gradient::Dense(_)) && m.w0.numel() > LANES;
                        let wide = matches!(m.w0.dtype(), DType::F32 | DType::F64);
                        same(&case, &got[i], &want[i], &m.w0, dense && wide);
                        if dense && !wide {
                            let before = bits(&m.w0);
                            let moved = got[i][0].iter().zip(&before).filter(|(a, b)| a != b).count();
                            assert!(moved * 4 > before.len(), "{case}: only {moved} weights moved");
                        }
                    }
                }
            }
        }
    }
}

/// A variable listed twice in one call (its two gradients applied one
/// after the other, as Keras does) is updated twice, in order, as the
/// reference does: the batch runs such a call one variable at a time.
#[test]
fn a_variable_listed_twice_is_updated_twice_in_order() {
    let w0 = values(3 * TASK + 5, 1, DType::F32);
    let other = values(100, 2, DType::F32);
    let (ga, gb, gc) = (
        values(3 * TASK + 5, 3, DType::F32),
        values(3 * TASK + 5, 4, DType::F32),
        values(100, 5, DType::F32),
    );
    for (name, make) in &every_optimizer(false) {
        let run = |elementwise: bool| {
            testing(elementwise, None, || {
                let (v, u) = (Variable::new(w0.clone()), Variable::new(other.clone()));
                let mut opt = make();
                opt(vec![
                    (Some(Gradient::Dense(ga.clone())), v.clone()),
                    (Some(Gradient::Dense(gc.clone())), u.clone()),
                    (Some(Gradient::Dense(gb.clone())), v.clone()),
                ])
                .unwrap();
                vec![bits(&v.read()), bits(&u.read())]
            })
        };
        same(&format!("{name} listed twice"), &run(false), &run(true), &w0, true);
    }
}
