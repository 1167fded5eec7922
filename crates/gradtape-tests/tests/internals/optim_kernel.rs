//! The unit tests of `src/optim/kernel.rs`, moved out of the library.

use gradtape::__internals::optim::kernel::*;
use gradtape::__internals::TensorInternals;
use gradtape::__internals::VariableInternals;
use gradtape::optim::{Adam, Optimizer, RmsProp};
use gradtape::GradientTape;
use gradtape::Result;
use gradtape::Tensor;
use gradtape::Variable;

fn addr(v: &Variable) -> usize {
    v.with_value_mut(|t| Ok(t.buffer::<f32>().as_ptr() as usize)).unwrap()
}

#[test]
fn updates_write_over_unshared_buffers() -> Result<()> {
    let n = 50_000;
    let w = Variable::new(Tensor::from_vec(vec![1.0f32; n], &[n])?);
    let x = Tensor::from_vec(vec![2.0f32; n], &[n])?;
    let mut opt = Adam::new(0.1);
    let mut rms = RmsProp::new(0.1).momentum(0.5)?.centered(true);
    let before = addr(&w);
    for step in 0..3 {
        let tape = GradientTape::new();
        let loss = tape.record(|| w.read().mul(&x)?.sum_all())?;
        let g = tape.gradient(&loss, std::slice::from_ref(&w))?.remove(0);
        if step == 0 {
            opt.apply_gradients([(g, &w)])?;
        } else {
            rms.apply_gradients([(g, &w)])?;
        }
        assert_eq!(addr(&w), before, "the variable's buffer is reused");
    }
    // the slots too
    let m = &opt.variables()[1];
    let m_addr = addr(m);
    opt.apply_gradients([(Some(x.clone()), &w)])?;
    assert_eq!(addr(m), m_addr);
    Ok(())
}

/// A rule and its CUDA form compute the same update: the CUDA C body
/// compiled as host C++ (g++), over random weights, slots and
/// gradients, against `apply` in `f64` and `f32`; and (with NVRTC)
/// the whole kernel compiles for the GPU.
fn cuda_form_agrees<R: ElemRule<K>, const K: usize>(name: &str, rule: &R) {
    let (body, params) = rule.cuda();
    let n = 40;
    let val = |i: usize, k: usize| ((i * 37 + k * 11) % 97) as f64 / 97.0 * 2.0 - 0.7;
    // (slots start non-negative: second moments and accumulators are)
    let inputs: Vec<(f64, [f64; 3], f64)> = (0..n)
        .map(|i| {
            (
                val(i, 0),
                [val(i, 1).abs(), val(i, 2).abs(), val(i, 3).abs()],
                val(i, 4),
            )
        })
        .collect();
    #[cfg(feature = "cuda")]
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        for t in ["float", "double"] {
            let src = gradtape::__internals::kernels::cuda::source::optimizer(t, K, body);
            if let Err(log) = gradtape::__internals::kernels::cuda::runtime::compile_with(
                &src,
                "--gpu-architecture=compute_90",
                false,
            ) {
                panic!("{name}: {log}");
            }
        }
    }
    let mut prog = String::from("#include <cmath>\n#include <cstdio>\nusing std::fmax; using std::sqrt;\n");
    for t in ["float", "double"] {
        prog += &format!(
            "static void run_{t}(double w0, double s0, double s1, double s2, double g0, const double* p) {{\n\
             typedef {t} T; const int K = {K}; T w = (T)w0, g = (T)g0; T s[3] = {{(T)s0, (T)s1, (T)s2}}; (void)K;\n\
             {{ {body} }}\n\
             printf(\"%a %a %a %a\\n\", (double)w, (double)s[0], (double)s[1], (double)s[2]); }}\n"
        );
    }
    let p: Vec<String> = params.iter().map(|x| format!("{x:e}")).collect();
    prog += &format!(
        "int main() {{ const double p[8] = {{{}}};\n",
        [p.clone(), vec!["0".into(); 8 - p.len()]].concat().join(", ")
    );
    for (w, s, g) in &inputs {
        for t in ["float", "double"] {
            prog += &format!("run_{t}({w:e}, {:e}, {:e}, {:e}, {g:e}, p);\n", s[0], s[1], s[2]);
        }
    }
    prog += "return 0; }\n";
    let Some(text) = crate::ops_math_cuda_expr::run_host_cxx(name, &prog, "") else {
        return;
    };
    let mut lines = text.lines();
    let parse = |l: &str| -> Vec<f64> { l.split(' ').map(hexf).collect() };
    for (w, s, g) in &inputs {
        // f32
        let mut wf = *w as f32;
        let mut sf: [f32; K] = std::array::from_fn(|k| s[k] as f32);
        rule.apply(&mut wf, &mut sf, *g as f32);
        let same = |a: f64, b: f64| a == b || (a.is_nan() && b.is_nan());
        let got = parse(lines.next().unwrap());
        assert!(same(got[0], wf as f64), "{name} f32: w {} vs {wf}", got[0]);
        for k in 0..K {
            assert!(same(got[1 + k], sf[k] as f64), "{name} f32: slot {k}");
        }
        // f64
        let mut wd = *w;
        let mut sd: [f64; K] = std::array::from_fn(|k| s[k]);
        rule.apply(&mut wd, &mut sd, *g);
        let got = parse(lines.next().unwrap());
        assert!(same(got[0], wd), "{name} f64: w {} vs {wd}", got[0]);
        for k in 0..K {
            assert!(same(got[1 + k], sd[k]), "{name} f64: slot {k}");
        }
    }
}

/// A C99 hexadecimal float (`%a`).
fn hexf(s: &str) -> f64 {
    let (neg, s) = s.strip_prefix('-').map_or((false, s), |r| (true, r));
    if s.starts_with("nan") {
        return f64::NAN;
    }
    if s.starts_with("inf") {
        return if neg { f64::NEG_INFINITY } else { f64::INFINITY };
    }
    let s = s.strip_prefix("0x").expect("hex float");
    let (mant, exp) = s.split_once('p').expect("exponent");
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let mut v = u64::from_str_radix(int, 16).unwrap() as f64;
    let mut scale = 1.0 / 16.0;
    for c in frac.chars() {
        v += c.to_digit(16).unwrap() as f64 * scale;
        scale /= 16.0;
    }
    let v = v * 2f64.powi(exp.parse::<i32>().unwrap());
    if neg {
        -v
    } else {
        v
    }
}

#[test]
fn every_rules_cuda_form_computes_its_update() {
    cuda_form_agrees("sgd", &gradtape::__internals::optim::sgd::Plain { lr: 0.1 });
    for nesterov in [false, true] {
        cuda_form_agrees(
            "momentum",
            &gradtape::__internals::optim::sgd::Momentum {
                lr: 0.1,
                mu: 0.9,
                nesterov,
            },
        );
    }
    let adam = gradtape::__internals::optim::adam::Elem {
        alpha: 0.01,
        b1: 0.1,
        b2: 0.001,
        eps: 1e-7,
    };
    cuda_form_agrees::<_, 2>("adam", &adam);
    cuda_form_agrees::<_, 3>("amsgrad", &adam);
    let rms = gradtape::__internals::optim::rmsprop::RmsElem {
        lr: 0.01,
        rho: 0.9,
        eps: 1e-7,
        mu: 0.5,
    };
    cuda_form_agrees::<_, 1>("rmsprop", &rms);
    cuda_form_agrees::<_, 3>("rmsprop centered momentum", &rms);
    for centered in [false, true] {
        let r2 = gradtape::__internals::optim::rmsprop::Rms2 {
            e: gradtape::__internals::optim::rmsprop::RmsElem {
                lr: 0.01,
                rho: 0.9,
                eps: 1e-7,
                mu: 0.5,
            },
            centered,
        };
        cuda_form_agrees("rmsprop (2 slots)", &r2);
    }
    cuda_form_agrees(
        "adagrad",
        &gradtape::__internals::optim::rmsprop::AdagradElem { lr: 0.1, eps: 1e-7 },
    );
    use gradtape::__internals::optim::more::{AdadeltaElem, AdamaxElem, LionElem, NadamElem};
    cuda_form_agrees(
        "adamax",
        &AdamaxElem {
            alpha: 0.01,
            b1: 0.1,
            beta_2: 0.999,
            eps: 1e-7,
        },
    );
    cuda_form_agrees(
        "nadam",
        &NadamElem {
            lr: 0.01,
            b1: 0.1,
            b2: 0.001,
            cm: 0.8,
            cg: 0.2,
            bias_2: 0.01,
            eps: 1e-7,
        },
    );
    cuda_form_agrees(
        "lion",
        &LionElem {
            lr: 0.01,
            beta_1: 0.9,
            beta_2: 0.99,
        },
    );
    cuda_form_agrees(
        "adadelta",
        &AdadeltaElem {
            lr: 1.0,
            rho: 0.95,
            eps: 1e-6,
        },
    );
}
