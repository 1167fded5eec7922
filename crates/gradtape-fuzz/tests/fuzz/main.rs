//! Never-panic fuzz test of the whole public API (issue 11, item 7).
//!
//! **What it draws** (with proptest, `case.rs`): an op out of every public
//! op family (`ops.rs`: elementwise unary and binary ops and their scalar
//! forms, reductions, scans, shape ops, indexing, creation, matmul and
//! linear algebra, einsum, nn ops: softmax, cross-entropies, convolutions,
//! pools, norms), three operands of every dtype (f32, f64, f16, bf16, i32, i64, bool,
//! complex64, complex128) whose values include NaN, ±Inf, ±0, subnormals
//! and extreme integers, and whose shapes have zero-size dims and huge ones
//! (2^31 .. usize::MAX, alone or in pairs whose product wraps); the op's
//! other arguments are shapes and sizes of the same kind, axes, indices and
//! strides in and out of range (negative, i64::MIN/MAX), NaN/Inf scalars and
//! every dtype. An operand of at most 64 elements is a real tensor (made
//! from a transposed buffer one time in five: a non-contiguous view);
//! a larger one is a broadcast view of one value, so that nothing huge is
//! ever allocated: huge shapes must come back as `Error::ShapeOverflow` or
//! `Error::OutOfMemory`, which is what is tested.
//!
//! **How it runs the op** (`mode`): eagerly; under a persistent
//! `GradientTape` watching the operands, then `gradient` and (when small)
//! `jacobian`; under a `ForwardAccumulator` with a tangent, then `jvp`; on
//! a `Variable` read under a tape, with `assign`/`assign_add`/`assign_sub`;
//! traced by `function` and called over a sequence of argument sets
//! (other leading dims, `Option`/`Vec` structures, `None`-dim signatures;
//! `traced.rs`). Every accepted result is printed (`Display`, `Debug`) and
//! made contiguous.
//!
//! **What it asserts**: each call returns `Ok` with the shape the op's rule
//! gives (where that is predictable) or an `Err`; never a panic, an abort
//! or a crash. In the traced mode, each traced call agrees with the same
//! closure run eagerly on the same arguments: the same outcome, shape,
//! dtype and values (bit for bit, or within a tight tolerance where the
//! compiler sums in another order), and the same gradient of the result's
//! sum through the call. The cases run in child processes (this test binary
//! re-executed with `GRADTAPE_FUZZ_CHILD` set, for a batch of cases, under
//! a 2 GiB address-space cap so that "too large for memory" is
//! deterministic): a panic in a child is caught with `catch_unwind` and
//! reported with its case, shrunk by proptest; a child that dies (abort,
//! signal) or stops making progress is reported by the parent with the case
//! it was running, and the run goes on with the next case.
//!
//! **CI** runs a fixed seed and [`CI_CASES`] cases (well under a minute in
//! `cargo test --release`). **A long campaign**:
//!
//! ```text
//! GRADTAPE_FUZZ_CASES=200000 GRADTAPE_FUZZ_SEED=12345 \
//!     cargo test --release -p gradtape-fuzz --test fuzz -- --nocapture
//! ```
//!
//! (`GRADTAPE_FUZZ_SEED` is optional; `GRADTAPE_FUZZ_OPS=attention,norm`
//! draws only the ops whose names contain one of the words; a failure names
//! the seed and case index, and `GRADTAPE_FUZZ_FIRST=<index>` with `GRADTAPE_FUZZ_CASES=1`
//! replays one case; `GRADTAPE_FUZZ_MODE=5` runs every case in mode 5,
//! traced, which compares traced functions with eager calls.)

mod case;
mod extra;
mod fit;
mod ops;
mod run;
mod surfaces;
mod traced;

use std::io::{BufRead, BufReader, Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use proptest::strategy::ValueTree;

/// Set in a child process: `<seed> <first case> <count>`.
const CHILD: &str = "GRADTAPE_FUZZ_CHILD";
/// Cases run by CI (with [`CI_SEED`]).
const CI_CASES: u64 = 50_000;
const CI_SEED: u64 = 0x6772_6164_7461_7065;
/// Cases per child process.
const BATCH: u64 = 10_000;
/// A child that starts no new case for this long is reported as hung.
const HANG: Duration = Duration::from_secs(15);
/// The children's address-space cap, in KiB (2 GiB): a buffer over about
/// 1.5 GiB is refused (`OutOfMemory`) instead of being filled for seconds.
const CAP_KIB: u64 = 2 << 20;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

#[test]
fn fuzz_never_panics() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
        return;
    }
    let cases = env_u64("GRADTAPE_FUZZ_CASES").unwrap_or(CI_CASES);
    let seed = env_u64("GRADTAPE_FUZZ_SEED").unwrap_or(CI_SEED);
    let first = env_u64("GRADTAPE_FUZZ_FIRST").unwrap_or(0);
    let end = first + cases;
    let t0 = Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let mut stats = vec![[0u64; 2]; ops::OPS.len()];
    let mut next = first;
    while next < end {
        let count = BATCH.min(end - next);
        next = run_batch(seed, next, count, &mut failures, &mut stats);
    }
    let secs = t0.elapsed().as_secs_f64();
    let (ok, err) = stats.iter().fold((0, 0), |(a, b), s| (a + s[0], b + s[1]));
    println!(
        "fuzz: {cases} cases (seed {seed:#x}, from {first}) in {secs:.1} s: {} failures; \
         op calls accepted {ok}, refused {err}",
        failures.len()
    );
    if std::env::var_os("GRADTAPE_FUZZ_STATS").is_some() {
        for (i, (name, _)) in ops::OPS.iter().enumerate() {
            println!("  {name:>28}: {:>7} accepted {:>7} refused", stats[i][0], stats[i][1]);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} fuzz cases failed (seed {seed:#x}):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Runs cases `first..first + count` in a child process; returns the next
/// case to run (after the batch, or after the case the child died on).
fn run_batch(seed: u64, first: u64, count: u64, failures: &mut Vec<String>, stats: &mut [[u64; 2]]) -> u64 {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {CAP_KIB} && exec \"$0\" \"$@\""))
        .arg(exe)
        .args(["fuzz_never_panics", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, format!("{seed} {first} {count}"))
        // (each malloc arena reserves 64 MiB of the capped address space)
        .env("MALLOC_ARENA_MAX", "2")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the fuzz child process");
    let (tx, rx) = mpsc::channel::<String>();
    let out = child.stdout.take().expect("child stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut err = child.stderr.take().expect("child stderr");
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut started: Option<u64> = None;
    let mut done = false;
    let mut hung = false;
    loop {
        match rx.recv_timeout(HANG) {
            Ok(line) => {
                if let Some(i) = line.strip_prefix("@start ") {
                    started = i.parse().ok();
                } else if let Some(f) = line.strip_prefix("@fail ") {
                    failures.push(format!("panic in case {}", f.replace('\u{1}', "\n")));
                } else if let Some(f) = line.strip_prefix("@shrunk ") {
                    if let Some(last) = failures.last_mut() {
                        last.push_str(&format!("\n  shrunk {}", f.replace('\u{1}', "\n")));
                    }
                } else if let Some(s) = line.strip_prefix("@stats ") {
                    let v: Vec<u64> = s.split(' ').filter_map(|x| x.parse().ok()).collect();
                    if let [op, ok, err] = v[..] {
                        stats[op as usize][0] += ok;
                        stats[op as usize][1] += err;
                    }
                } else if line == "@done" {
                    done = true;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                hung = true;
                let _ = child.kill();
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait().expect("wait for the fuzz child");
    let stderr = err_thread.join().unwrap_or_default();
    if done && status.success() {
        return first + count;
    }
    let at = started.unwrap_or(first);
    let what = if hung {
        format!("no progress for {} s (killed)", HANG.as_secs())
    } else {
        format!("the child process died ({status})")
    };
    let case = case::case_tree(seed, at).current();
    let tail: String = {
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(8)..].join("\n    ")
    };
    failures.push(format!(
        "case {at} (seed {seed:#x}): {what} in op {:?}\n  case: {case:?}\n  stderr:\n    {tail}",
        ops::OPS[case.op].0
    ));
    at + 1
}

/// The message and location of the last panic, set by the child's hook.
static LAST_PANIC: Mutex<String> = Mutex::new(String::new());

/// Runs one case; the panic's message when it panics.
fn panics(case: &case::Case) -> Option<String> {
    LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let r = catch_unwind(AssertUnwindSafe(|| run::run_case(case)));
    r.err()
        .map(|_| std::mem::take(&mut *LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner())))
}

/// The child: runs its batch, one line per case started and per panic.
fn child(spec: &str) {
    let v: Vec<u64> = spec.split(' ').filter_map(|s| s.parse().ok()).collect();
    let [seed, first, count] = v[..] else {
        panic!("bad {CHILD}: {spec:?}")
    };
    std::panic::set_hook(Box::new(|info| {
        let mut m = LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner());
        *m = info.to_string();
    }));
    let out = std::io::stdout();
    let say = |s: String| {
        let mut o = out.lock();
        let _ = writeln!(o, "{}", s.replace('\n', "\u{1}"));
        let _ = o.flush();
    };
    for i in first..first + count {
        say(format!("@start {i}"));
        let mut tree = case::case_tree(seed, i);
        let case = tree.current();
        let Some(msg) = panics(&case) else { continue };
        let op = ops::OPS[case.op].0;
        // shrink with proptest: simplify while it still panics
        say(format!("@fail {i} (seed {seed:#x}) op {op:?}: {msg}\n  case: {case:?}"));
        let (mut small, mut small_msg) = (case.clone(), msg);
        let mut steps = 0;
        let mut more = tree.simplify();
        while more && steps < 400 {
            steps += 1;
            match panics(&tree.current()) {
                Some(m) => {
                    (small, small_msg) = (tree.current(), m);
                    more = tree.simplify();
                }
                None => more = tree.complicate(),
            }
        }
        say(format!(
            "@shrunk (op {:?}): {small_msg}\n  {small:?}",
            ops::OPS[small.op].0
        ));
    }
    let stats = run::STATS.lock().unwrap_or_else(|p| p.into_inner());
    for (op, [ok, err]) in stats.iter().enumerate() {
        say(format!("@stats {op} {ok} {err}"));
    }
    say("@done".into());
}
