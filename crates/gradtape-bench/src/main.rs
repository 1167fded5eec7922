//! The workloads of `shared/bench/WORKLOADS.md` on gradtape.
//!
//! ```text
//! cargo run --release -p gradtape-bench -- scalar_chain elementwise
//! cargo run --release -p gradtape-bench            # every workload, both modes
//! cargo run --release -p gradtape-bench -- --traced mlp_step   # traced only
//! cargo run --release -p gradtape-bench -- --eager             # eager only
//! ```
//!
//! Each workload runs in two modes (see [`traced`]): eagerly (impl
//! `gradtape`) and as one traced graph function call per step (impl
//! `gradtape-traced`); by default both, one after the other, so that one
//! run compares them. Prints one JSON line per workload and mode, in the
//! peers' format:
//!
//! ```text
//! {"impl": "gradtape", "workload": "scalar_chain", "median_s": 0.0001, "iters": 20, "checksum": [0.6, 1.1]}
//! {"impl": "gradtape-traced", "workload": "scalar_chain", "median_s": 0.00005, "iters": 20, "checksum": [0.6, 1.1]}
//! ```
//!
//! A workload that cannot be traced (an op without a graph descriptor yet)
//! prints an `"unsupported"` line for `gradtape-traced` naming the error,
//! and the run goes on. When both modes run, a traced checksum that differs
//! from the eager one (by more than compare.py's 1e-3 relative) is reported
//! on stderr and makes the exit status 1.
//!
//! Conventions follow the peers (`shared/bench/peers/torch_eager.py` and
//! `peers/rust/src/lib.rs`): inputs come from the `init` formula (computed in
//! f64, stored as f32), each workload runs its warm-up steps and then its
//! timed steps, `median_s` is numpy's median of the timed steps (mean of the
//! two middle values for an even count), and the checksum is taken from the
//! last step's output (the first step's for training workloads). The output
//! of a step is dropped outside the timed region.
//!
//! Workloads are a table of name -> function ([`WORKLOADS`]); a known workload
//! that is not implemented yet prints an `"unsupported"` line (as the peers
//! do) so that a comparison run still shows the others. An unknown name is an
//! error (stderr, exit status 2) before anything runs, as is an unknown flag.
//!
//! Threads: gradtape's kernels run on its compute pool, one thread per core
//! of the machine (`GRADTAPE_NUM_THREADS` overrides).
//!
//! For profiling (build it with line tables: `cargo run --profile
//! profiling -p gradtape-bench -- WORKLOAD`), `GRADTAPE_BENCH_REPEAT=N`
//! runs N times as many timed steps
//! (the JSON line reports the count actually timed), and
//! `GRADTAPE_BENCH_ALLOCS=1` adds the heap allocations per timed step to each
//! line (`"allocs_per_step"`, see [`allocs`]). `GRADTAPE_BENCH_CPU=1` times
//! the calling thread's CPU time instead of wall time (with
//! `GRADTAPE_NUM_THREADS=1`: for comparing builds on a busy machine).

mod allocs;
mod cnn_step;
mod hessian;
mod jacobian;
mod mlp_step;
#[cfg(feature = "mpi")]
mod mpi_step;
mod rnn_grad;
mod traced;
mod transformer_step;

use std::process::ExitCode;
use std::time::Instant;

use gradtape::{GradientTape, Result, Tensor};
use traced::{measure, Mode, Timing};

#[global_allocator]
static ALLOC: allocs::Counting = allocs::Counting;

/// What one workload reports.
struct Report {
    median_s: f64,
    iters: usize,
    checksum: Vec<f64>,
    /// heap allocations per timed step (see [`allocs`])
    allocs_per_step: f64,
}

/// A workload: its name in WORKLOADS.md and its runner (`None`: not yet implemented).
struct Workload {
    name: &'static str,
    run: Option<fn(Mode) -> Result<Report>>,
}

/// Every workload of WORKLOADS.md, in its order, then gradtape's own.
const WORKLOADS: &[Workload] = &[
    Workload {
        name: "scalar_chain",
        run: Some(scalar_chain),
    },
    Workload {
        name: "mlp_step",
        run: Some(mlp_step::mlp_step),
    },
    Workload {
        name: "jacobian",
        run: Some(jacobian::run),
    },
    Workload {
        name: "hessian",
        run: Some(hessian::run),
    },
    Workload {
        name: "elementwise",
        run: Some(elementwise),
    },
    Workload {
        name: "cnn_step",
        run: Some(cnn_step::cnn_step),
    },
    Workload {
        name: "rnn_grad",
        run: Some(rnn_grad::rnn_grad),
    },
    Workload {
        name: "transformer_step",
        run: Some(transformer_step::transformer_step),
    },
    // gradtape's own, beyond WORKLOADS.md: mlp_step through the layer and
    // optimizer API (with SGD, then with Adam)
    Workload {
        name: "mlp_step_layers",
        run: Some(mlp_step::mlp_step_layers),
    },
    Workload {
        name: "mlp_step_adam",
        run: Some(mlp_step::mlp_step_adam),
    },
    // transformer_step at the shape of issue 28's char-level GPT
    Workload {
        name: "gpt_small",
        run: Some(transformer_step::gpt_small),
    },
    // mlp_step_adam data-parallel over MPI (feature `mpi`; run under mpirun)
    #[cfg(feature = "mpi")]
    Workload {
        name: "mlp_step_adam_mpi",
        run: Some(mpi_step::mlp_step_adam_mpi),
    },
];

/// What the next JSON line adds, and whether this process prints it (a
/// workload over MPI prints on rank 0 only); reset after each line.
static EXTRA: std::sync::Mutex<(bool, Vec<(&str, f64)>)> = std::sync::Mutex::new((true, Vec::new()));

/// Sets [`EXTRA`] for the next line.
#[cfg(feature = "mpi")]
fn set_extra(print: bool, fields: Vec<(&'static str, f64)>) {
    if let Ok(mut e) = EXTRA.lock() {
        *e = (print, fields);
    }
}

// ---------------------------------------------------------------------------
// Shared helpers: inputs, timing, JSON.

/// The device the workloads run on (`--device cuda:0`; the CPU by default).
static DEVICE: std::sync::OnceLock<gradtape::Device> = std::sync::OnceLock::new();

/// The device the workloads run on.
pub(crate) fn device() -> gradtape::Device {
    DEVICE.get().copied().unwrap_or_default()
}

/// `t` on the workloads' device.
pub(crate) fn on_device(t: Tensor) -> Tensor {
    t.to(device()).expect("the device was checked at start")
}

/// Zeros of `shape` (f32) on the workloads' device.
pub(crate) fn zeros(shape: &[usize]) -> Tensor {
    on_device(Tensor::zeros(shape, gradtape::DType::F32))
}

/// `init(shape, k, scale)[i] = scale * sin(0.37 * i + k)`, computed in f64 and
/// stored as f32, `i` being the row-major flat index (on the workloads' device).
fn init(shape: &[usize], k: f64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|i| (scale * (0.37 * i as f64 + k).sin()) as f32).collect();
    on_device(Tensor::from_vec(data, shape).expect("numel matches shape"))
}

/// Median as numpy computes it (mean of the two middle values for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `step` `warmup` times, then `iters` timed times; returns the median
/// wall time of one step, the output of the last one and the allocations
/// per timed step (those of dropping the previous output included).
fn timeit<T>(mut step: impl FnMut() -> Result<T>, iters: usize, warmup: usize) -> Result<(f64, T, f64)> {
    let iters = iters * repeat();
    let mut out = None;
    for _ in 0..warmup {
        out = Some(step()?);
    }
    let mut times = Vec::with_capacity(iters);
    let allocs_before = allocs::count();
    let mut trace = allocs::trace_wanted();
    for _ in 0..iters {
        allocs::set_tracing(trace);
        let (t, c) = (Instant::now(), cpu_time());
        let o = step()?;
        times.push(match (c, cpu_time()) {
            (Some(a), Some(b)) => b - a,
            _ => t.elapsed().as_secs_f64(),
        });
        allocs::set_tracing(false);
        trace = false;
        // the previous output drops here, outside the timed region
        out = Some(o);
    }
    let allocs = (allocs::count() - allocs_before) as f64 / iters as f64;
    Ok((median(times), out.expect("at least one step"), allocs))
}

/// With `GRADTAPE_BENCH_CPU=1` (Linux), the calling thread's CPU time in
/// seconds (`CLOCK_THREAD_CPUTIME_ID`), which a busy machine inflates less
/// than wall time; meaningful with `GRADTAPE_NUM_THREADS=1` only. `None`
/// otherwise.
fn cpu_time() -> Option<f64> {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*WANTED.get_or_init(|| std::env::var("GRADTAPE_BENCH_CPU").is_ok_and(|v| v == "1")) {
        return None;
    }
    thread_cpu_time()
}

#[cfg(target_os = "linux")]
fn thread_cpu_time() -> Option<f64> {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec (two 64-bit fields on
    // 64-bit Linux); the C library is linked by std.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then_some(ts.sec as f64 + ts.nsec as f64 * 1e-9)
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu_time() -> Option<f64> {
    None
}

/// The `GRADTAPE_BENCH_REPEAT` multiplier of timed steps (1 when unset).
fn repeat() -> usize {
    std::env::var("GRADTAPE_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A JSON number; Rust's `Display` for f64 is the shortest round-trip form and
/// never uses exponent notation. Non-finite values are written as Python's
/// `json.dumps` writes them (`NaN`, `Infinity`).
fn json_num(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        let s = format!("{x}");
        if s.contains('.') {
            s
        } else {
            format!("{s}.0")
        }
    }
}

fn emit(mode: Mode, name: &str, r: &Report) {
    let (print, extra) = EXTRA
        .lock()
        .map(|mut e| std::mem::replace(&mut *e, (true, Vec::new())))
        .unwrap_or((true, Vec::new()));
    if !print {
        return;
    }
    let cs: Vec<String> = r.checksum.iter().map(|&c| json_num(c)).collect();
    let mut extra = extra;
    if allocs::enabled() {
        extra.push(("allocs_per_step", r.allocs_per_step));
    }
    let extra: String = extra
        .iter()
        .map(|(k, v)| format!(", {}: {}", json_str(k), json_num(*v)))
        .collect();
    let extra = if device().is_cuda() {
        format!("{extra}, \"device\": {}", json_str(&device().to_string()))
    } else {
        extra
    };
    println!(
        "{{\"impl\": {}, \"workload\": {}, \"median_s\": {}, \"iters\": {}, \"checksum\": [{}]{extra}}}",
        json_str(mode.impl_name()),
        json_str(name),
        json_num(r.median_s),
        r.iters,
        cs.join(", ")
    );
}

fn emit_unsupported(mode: Mode, name: &str, reason: &str) {
    println!(
        "{{\"impl\": {}, \"workload\": {}, \"unsupported\": {}}}",
        json_str(mode.impl_name()),
        json_str(name),
        json_str(reason)
    );
}

/// The gradient of `y` w.r.t. `x` on `tape`, an error if none reaches `x`.
fn grad_of(tape: &GradientTape, y: &Tensor, x: &Tensor) -> Result<Tensor> {
    tape.gradient(y, x)?.ok_or_else(|| gradtape::Error::InvalidArgument {
        op: "bench",
        msg: "no gradient reached the source".into(),
    })
}

// ---------------------------------------------------------------------------
// Workloads.

/// x = 0.5 (watched); y = x; 1000 times y = y * 1.0001 + 0.001; dy/dx.
/// 2000 recorded ops per step: the per-op overhead of the framework.
fn scalar_chain(mode: Mode) -> Result<Report> {
    let body = |x: &Tensor| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            let mut y = x.clone();
            for _ in 0..1000 {
                y = y.mul_scalar(1.0001)?.add_scalar(0.001)?;
            }
            Ok(y)
        })?;
        let d = grad_of(&tape, &y, x)?;
        Ok(vec![y, d])
    };
    let timing = Timing::last(20, 3);
    measure(mode, Tensor::scalar(0.5f32), body, timing)
}

/// loss = sum(exp(sin(x)) * x) over 4M elements, and dloss/dx: memory bandwidth.
fn elementwise(mode: Mode) -> Result<Report> {
    let body = |x0: &Tensor| -> Result<Vec<Tensor>> {
        // a fresh tensor (new id) on x0's storage, as torch's `x0.clone()` without the copy
        let x = x0.stop_gradient();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(&x);
            x.sin()?.exp()?.mul(&x)?.sum_all()
        })?;
        let g = grad_of(&tape, &loss, &x)?;
        Ok(vec![loss, g.abs()?.sum_all()?])
    };
    let timing = Timing::last(10, 2);
    measure(mode, init(&[4194304], 0.0, 1.0), body, timing)
}

// ---------------------------------------------------------------------------

/// Whether two checksums agree as compare.py requires (1e-3 relative).
fn agree(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-3 * x.abs().max(y.abs()).max(1e-6))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let modes: &[Mode] = match (
        args.iter().any(|a| a == "--eager"),
        args.iter().any(|a| a == "--traced"),
    ) {
        (true, false) => &[Mode::Eager],
        (false, true) => &[Mode::Traced],
        _ => &[Mode::Eager, Mode::Traced],
    };
    let mut device_arg: Option<String> = None;
    let mut rest: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--device" {
            device_arg = it.next().cloned();
        } else if let Some(d) = a.strip_prefix("--device=") {
            device_arg = Some(d.to_string());
        } else {
            rest.push(a.clone());
        }
    }
    let args = rest;
    if let Some(d) = device_arg {
        let device = match d.parse::<gradtape::Device>() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("gradtape-bench: {e}");
                return ExitCode::from(2);
            }
        };
        if let Err(e) = Tensor::scalar(0.0f32).to(device) {
            eprintln!("gradtape-bench: {e}");
            return ExitCode::from(2);
        }
        let _ = DEVICE.set(device);
    }
    if let Some(f) = args
        .iter()
        .find(|a| a.starts_with("--") && *a != "--eager" && *a != "--traced")
    {
        eprintln!("gradtape-bench: unknown flag {f:?}; flags: --eager, --traced (default: both), --device DEVICE (cpu, cuda:N)");
        return ExitCode::from(2);
    }
    let wanted: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    for w in &wanted {
        if !WORKLOADS.iter().any(|k| k.name == w.as_str()) {
            let known: Vec<&str> = WORKLOADS.iter().map(|k| k.name).collect();
            eprintln!("gradtape-bench: unknown workload {w:?}; known: {}", known.join(" "));
            return ExitCode::from(2);
        }
    }
    let mut failed = false;
    for w in WORKLOADS {
        if !wanted.is_empty() && !wanted.iter().any(|n| n.as_str() == w.name) {
            continue;
        }
        let mut eager_checksum: Option<Vec<f64>> = None;
        for &mode in modes {
            let Some(run) = w.run else {
                emit_unsupported(mode, w.name, "not implemented in gradtape-bench yet");
                continue;
            };
            match run(mode) {
                Ok(r) => {
                    emit(mode, w.name, &r);
                    match (&eager_checksum, mode) {
                        (None, Mode::Eager) => eager_checksum = Some(r.checksum.clone()),
                        (Some(e), Mode::Traced) if !agree(e, &r.checksum) => {
                            eprintln!(
                                "gradtape-bench: {}: traced checksum {:?} differs from eager {:?}",
                                w.name, r.checksum, e
                            );
                            failed = true;
                        }
                        _ => {}
                    }
                }
                // an op with no graph descriptor yet fails the trace: say so
                // in the output (as the peers report what they cannot run)
                // and go on with the other workloads
                Err(e) if mode == Mode::Traced => {
                    eprintln!("gradtape-bench: {} (traced): {e}", w.name);
                    emit_unsupported(mode, w.name, &format!("traced: {e}"));
                }
                Err(e) => {
                    eprintln!("gradtape-bench: {}: {e}", w.name);
                    failed = true;
                }
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
