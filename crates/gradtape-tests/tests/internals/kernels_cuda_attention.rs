//! The fused attention kernels of `src/kernels/cuda/attention.rs`: their
//! sources compile with NVRTC (`f32` and `f64`), and, run as host C++ (one
//! lane per warp: `kernels_cuda_source_host`), they give the CPU's online
//! kernels' packed rows and gradients in `f64`: causal rows with fewer and
//! more keys than queries, masks broadcast over heads (with a row that
//! sees no key) and over query rows, dropout (the same decisions).
use crate::kernels_cuda_source_host as host;
use gradtape::__internals::kernels::cpu::attention::{backward_online, forward_online, Dims, Dropout, Mask};
use gradtape::__internals::kernels::cpu::attention_gemm::Batch;
use gradtape::__internals::kernels::cuda::attention::*;
use gradtape::__internals::kernels::cuda::source::Lay;
use gradtape::__internals::tensor::layout::Layout;

#[test]
fn attention_sources_compile_with_nvrtc() {
    // SAFETY: only looks the library up
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("skipped: NVRTC (libnvrtc.so) not found; set LD_LIBRARY_PATH to its folder to check the kernels");
        return;
    }
    let sources = all_sources();
    for t in ["float", "double"] {
        assert!(sources.iter().any(|s| s.contains(&format!("typedef {t} T;"))));
    }
    for src in &sources {
        if let Err(log) =
            gradtape::__internals::kernels::cuda::runtime::compile_with(src, "--gpu-architecture=compute_90", false)
        {
            panic!("{log}\nsource:\n{src}");
        }
    }
    println!("compiled {} attention sources with NVRTC", sources.len());
}

fn vals(n: usize, k: f64) -> Vec<f64> {
    (0..n).map(|i| (0.37 * i as f64 + k).sin() * 1.3).collect()
}

/// `static double name[] = {..};`, infinities included.
fn array(name: &str, v: &[f64]) -> String {
    let items: Vec<String> = v
        .iter()
        .map(|&x| match x {
            f64::INFINITY => "INFINITY".into(),
            f64::NEG_INFINITY => "-INFINITY".into(),
            x if x.is_nan() => "NAN".into(),
            x => format!("{x:?}"),
        })
        .collect();
    let items = if items.is_empty() { vec!["0".into()] } else { items };
    format!("static double {name}[] = {{{}}};\n", items.join(", "))
}

fn close(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let ok = x == y || (x - y).abs() <= 1e-12 * (1.0 + y.abs());
        assert!(ok, "{what} [{i}]: {x} (kernel) vs {y} (CPU)");
    }
}

/// How a case's mask broadcasts over the batch dims `[b1, b2]`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Masked {
    No,
    /// `[b1, 1, tq, tk]`: over the heads, with -inf entries and batch
    /// element 0's query row 1 hidden from every key
    OverHeads,
    /// `[b1, 1, 1, tk]`: a key padding mask, over heads and query rows
    Keys,
}

struct Case {
    b: [usize; 2],
    tq: usize,
    tk: usize,
    d: usize,
    dv: usize,
    causal: bool,
    masked: Masked,
    dropout: Option<Dropout>,
}

impl Case {
    fn dims(&self) -> Dims {
        Dims {
            batch: self.b[0] * self.b[1],
            tq: self.tq,
            tk: self.tk,
            d: self.d,
            dv: self.dv,
            scale: 0.45,
            causal: self.causal,
            dropout: self.dropout,
        }
    }

    /// The mask's values, its shape and the CPU kernels' view of it.
    fn mask(&self) -> Option<(Vec<f64>, Vec<usize>)> {
        let [b1, _] = self.b;
        let (tq, tk) = (self.tq, self.tk);
        match self.masked {
            Masked::No => None,
            Masked::OverHeads => {
                let mut m = vals(b1 * tq * tk, 5.0);
                for (i, x) in m.iter_mut().enumerate() {
                    if i % 5 == 2 || (i < tq * tk && i / tk == 1) {
                        *x = f64::NEG_INFINITY;
                    }
                }
                Some((m, vec![b1, 1, tq, tk]))
            }
            Masked::Keys => {
                let mut m = vec![0.0; b1 * tk];
                for (i, x) in m.iter_mut().enumerate() {
                    if i % tk >= tk - 1 - i / tk {
                        *x = f64::NEG_INFINITY;
                    }
                }
                Some((m, vec![b1, 1, 1, tk]))
            }
        }
    }
}

/// The CPU's view of a mask of `shape` (`[b1, 1, r, c]`) over the batch
/// `[b1, b2]`.
fn cpu_mask<'a>(m: &'a [f64], shape: &[usize], b2: usize) -> Mask<'a, f64> {
    let (r, c) = (shape[2], shape[3]);
    Mask {
        data: m,
        batch: Batch {
            dims: vec![(shape[0], r * c), (b2, 0)].into(),
            base: 0,
        },
        row: if r == 1 { 0 } else { c },
        col: 1,
    }
}

fn cases() -> Vec<Case> {
    let mut v = vec![];
    for &(b, tq, tk, d, dv) in &[
        ([2, 3], 5, 7, 4, 3),
        ([1, 2], 9, 4, 3, 5),
        ([2, 2], 3, 40, 6, 2),
        ([1, 1], 33, 35, 2, 3),
    ] {
        for (causal, masked, dropout) in [
            (false, Masked::No, None),
            (true, Masked::OverHeads, None),
            (false, Masked::OverHeads, Some(Dropout::new(11, 0.3))),
            (true, Masked::Keys, Some(Dropout::new(7, 0.5))),
            (true, Masked::No, Some(Dropout::new(3, 0.2))),
        ] {
            v.push(Case {
                b,
                tq,
                tk,
                d,
                dv,
                causal,
                masked,
                dropout,
            });
        }
    }
    v
}

#[test]
fn attention_kernels_agree_with_the_cpu_kernels_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    let cases = cases();
    // (one lane per warp on the host: a lane holds every column)
    let nd = cases.iter().map(|c| c.d).max().unwrap();
    let nv = cases.iter().map(|c| c.dv).max().unwrap();
    let (mut fwd_body, mut q_body, mut kv_body) = (String::new(), String::new(), String::new());
    let mut want = vec![];
    for c in &cases {
        let dims = c.dims();
        let n = dims.batch;
        let (q, k, v, g) = (
            vals(n * c.tq * c.d, 1.0),
            vals(n * c.tk * c.d, 2.0),
            vals(n * c.tk * c.dv, 3.0),
            vals(n * c.tq * c.dv, 4.0),
        );
        let mask = c.mask();
        let cm = mask.as_ref().map(|(m, s)| cpu_mask(m, s, c.b[1]));
        let fwd = forward_online("t", &dims, &q, &k, &v, cm.as_ref()).unwrap();
        let grads = backward_online("t", &dims, &q, &k, &v, cm.as_ref(), &fwd, &g).unwrap();
        let scores = [c.b[0], c.b[1], c.tq, c.tk];
        let (lm, mdecl, mname) = match &mask {
            Some((m, s)) => (
                Lay::of(&Layout::contiguous(s), &scores).unwrap(),
                array("mask", m),
                "mask",
            ),
            None => (
                Lay::of(&Layout::contiguous(&[1, 1]), &[1, 1]).unwrap(),
                String::new(),
                "(const double*)0",
            ),
        };
        let common = format!(
            "{}{}{}{}{mdecl}Lay lm = {}; Att a = {};\n",
            array("q", &q),
            array("kk", &k),
            array("v", &v),
            array("g", &g),
            lm.c_init(),
            Att::of(&dims).c_init()
        );
        let (nf, ng, nr) = (fwd.len(), grads.len(), n * c.tq);
        fwd_body += &format!(
            "{{\n{common}static double out[{nf}];\nk(q, kk, v, {mname}, lm, out, a);\ngt_put(out, {nf});\n}}\n"
        );
        q_body += &format!(
            "{{\n{common}{}static double out[{ng}]; static double dd[{nr}];\n\
             k(q, kk, v, {mname}, lm, fwd, g, out, dd, a);\ngt_put(dd, {nr}); gt_put(out, {ng});\n}}\n",
            array("fwd", &fwd)
        );
        want.push((c, fwd, grads, common, mname));
    }
    let got_fwd = host::run(&forward_source("double", nv), &fwd_body).unwrap();
    // the first backward kernel's D and dq blocks, then the second's dk
    // and dv blocks (from that D)
    let got_q = host::run(&grad_q_source("double", nd), &q_body).unwrap();
    let mut at_q = 0;
    let mut firsts = vec![];
    for (c, fwd, grads, common, mname) in &want {
        let nr = c.dims().batch * c.tq;
        let dd = &got_q[at_q..at_q + nr];
        let out = &got_q[at_q + nr..at_q + nr + grads.len()];
        at_q += nr + grads.len();
        firsts.push(out);
        let ng = grads.len();
        kv_body += &format!(
            "{{\n{common}{}{}static double out[{ng}];\n\
             k(q, kk, v, {mname}, lm, fwd, g, dd, out, a);\n\
             gt_put(out, {ng});\n}}\n",
            array("fwd", fwd),
            array("dd", dd),
        );
    }
    let got_kv = host::run(&grad_kv_source("double", nd, nv), &kv_body).unwrap();
    let (mut at_f, mut at_kv) = (0, 0);
    for ((c, fwd, grads, _, _), first) in want.iter().zip(firsts) {
        let what = format!(
            "{:?} tq {} tk {} d {} dv {} causal {} mask {:?} dropout {}",
            c.b,
            c.tq,
            c.tk,
            c.d,
            c.dv,
            c.causal,
            c.masked,
            c.dropout.is_some()
        );
        close(&got_fwd[at_f..at_f + fwd.len()], fwd, &format!("forward {what}"));
        at_f += fwd.len();
        if c.masked == Masked::OverHeads {
            // batch element 0's row 1 sees no key: zeros and +inf
            let row = &fwd[c.dv + 1..2 * (c.dv + 1)];
            assert!(
                row[..c.dv].iter().all(|&x| x == 0.0) && row[c.dv] == f64::INFINITY,
                "{what}: {row:?}"
            );
        }
        let second = &got_kv[at_kv..at_kv + grads.len()];
        at_kv += grads.len();
        let (nq, per) = (c.tq * c.d, c.tq * c.d + c.tk * c.d + c.tk * c.dv);
        for b in 0..c.dims().batch {
            let w = &grads[b * per..(b + 1) * per];
            close(&first[b * per..][..nq], &w[..nq], &format!("dq of batch {b}: {what}"));
            close(
                &second[b * per..(b + 1) * per][nq..],
                &w[nq..],
                &format!("dk, dv of batch {b}: {what}"),
            );
        }
    }
    println!("{} cases agree with the CPU kernels", want.len());
}

/// The dropout decisions are the CPU's bit for bit: the generator's key
/// and rate reach the kernels, whose `gt_kept` matches `Dropout::factor`.
#[test]
fn dropout_decisions_match_the_cpu_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    let dr = Dropout::new(0xDEAD_BEEF_1234, 0.37);
    let dims = Dims {
        batch: 1,
        tq: 1,
        tk: 1,
        d: 1,
        dv: 1,
        scale: 1.0,
        causal: false,
        dropout: Some(dr),
    };
    let n = 4096;
    let body = format!(
        "Att a = {};\nstatic double f[{n}];\nfor (long long i = 0; i < {n}; ++i) f[i] = gt_kept(a, (unsigned long long)(i * 977)) ? a.keep : 0.0;\ngt_put(f, {n});",
        Att::of(&dims).c_init()
    );
    let got = host::run(&forward_source("double", 1), &body).unwrap();
    let want: Vec<f64> = (0..n).map(|i| dr.factor(i * 977)).collect();
    assert_eq!(got, want);
    let kept = want.iter().filter(|&&x| x > 0.0).count() as f64 / n as f64;
    assert!((kept - 0.63).abs() < 0.03, "{kept}");
}

/// A row with a NaN score is NaN (output and log-sum-exp) on the GPU's
/// forward kernel as on the CPU's: the warp's running maximum passes over
/// NaN, so a NaN met while it is still `-inf` must be recorded (it was
/// lost, and the row taken for a hidden one: zeros). Rows: NaN among
/// `-inf` in the mask; every key hidden (zeros, `+inf`); finite; a NaN
/// among finite scores.
#[test]
fn a_nan_score_makes_the_row_nan_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    let (tq, tk, d, dv) = (4, 5, 2, 3);
    let dims = Dims {
        batch: 1,
        tq,
        tk,
        d,
        dv,
        scale: 0.45,
        causal: false,
        dropout: None,
    };
    let (q, k, v) = (vals(tq * d, 1.0), vals(tk * d, 2.0), vals(tk * dv, 3.0));
    let (nan, ninf) = (f64::NAN, f64::NEG_INFINITY);
    #[rustfmt::skip]
    let m = vec![
        ninf, ninf, nan, ninf, ninf,
        ninf, ninf, ninf, ninf, ninf,
        0.0, 0.5, 0.0, -1.0, 0.0,
        0.0, nan, 0.0, 0.0, 0.0,
    ];
    let shape = [1, 1, tq, tk];
    let cm = cpu_mask(&m, &shape, 1);
    let fwd = forward_online("t", &dims, &q, &k, &v, Some(&cm)).unwrap();
    let lm = Lay::of(&Layout::contiguous(&shape), &[1, 1, tq, tk]).unwrap();
    let n = fwd.len();
    let body = format!(
        "{{\n{}{}{}{}Lay lm = {}; Att a = {};\nstatic double out[{n}];\nk(q, kk, v, mask, lm, out, a);\ngt_put(out, {n});\n}}\n",
        array("q", &q),
        array("kk", &k),
        array("v", &v),
        array("mask", &m),
        lm.c_init(),
        Att::of(&dims).c_init()
    );
    let got = host::run(&forward_source("double", dv), &body).unwrap();
    let w = dv + 1;
    for (r, want) in [(0, "NaN"), (1, "hidden"), (2, "finite"), (3, "NaN")] {
        let (g, c) = (&got[r * w..][..w], &fwd[r * w..][..w]);
        match want {
            "NaN" => assert!(
                g.iter().chain(c).all(|x| x.is_nan()),
                "row {r}: {g:?} (kernel), {c:?} (CPU)"
            ),
            "hidden" => {
                assert_eq!(g, c, "row {r}");
                assert!(
                    g[..dv].iter().all(|&x| x == 0.0) && g[dv] == f64::INFINITY,
                    "row {r}: {g:?}"
                );
            }
            _ => close(g, c, &format!("row {r}")),
        }
    }
}
