//! Where a compiled graph's time goes: wall time per node, summed over the
//! runs inside [`profile`], grouped by the node's op and output shape.
//!
//! A traced step's time is spent in its nodes (a product, a fused
//! elementwise kernel, a gather); this is the listing to read before
//! optimising one, as `torch.profiler` and TensorBoard's op profile are in
//! the peers. While no profile is taken the executor pays one relaxed
//! atomic load per node.
//!
//! Two products the executor runs at the same time (one per thread, see
//! the pair trials in `exec`) are timed together, under both names joined
//! by ` || `.
//!
//! ```
//! use gradtape::{function, function::compile::profile, Tensor};
//! let f = function(|x: &Tensor| x.matmul(x)?.tanh()?.sum_all());
//! let x = Tensor::ones(&[64, 64], gradtape::DType::F32);
//! f.call(&x)?; // traced and compiled outside the profile
//! let (y, lines) = profile(|| f.call(&x));
//! y?;
//! assert!(lines.iter().any(|l| l.op == "MatMul" && l.shape == [64, 64] && l.calls == 1));
//! assert!(lines.iter().any(|l| l.op.starts_with("Fused[") && l.shape.is_empty()));
//! let total: std::time::Duration = lines.iter().map(|l| l.total).sum();
//! assert!(lines.iter().all(|l| l.total <= total));
//! # Ok::<(), gradtape::Error>(())
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The time of the nodes of one op and output shape, summed over the
/// profiled runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileLine {
    /// The node's op as in a graph listing, with its attributes (without
    /// a fused kernel's program): `MatMul`,
    /// `Fused[6 ops, f32 x [64, 64]]`, or two ops joined by ` || ` for a
    /// pair run at the same time.
    pub op: String,
    /// The shape of the node's first output (empty for a scalar or a node
    /// with no outputs).
    pub shape: Vec<usize>,
    /// How many times such a node ran.
    pub calls: u64,
    /// Their summed wall time.
    pub total: Duration,
}

/// A table of `lines` taken over `runs` runs, per run: a first line with
/// the time in nodes, then one line per op and shape, most time first
/// (milliseconds, share, calls, op, shape).
///
/// ```
/// use gradtape::function::compile::{report, ProfileLine};
/// let line = ProfileLine { op: "MatMul".into(), shape: vec![4, 4], calls: 10, total: std::time::Duration::from_millis(6) };
/// let text = report(&[line], 2);
/// assert!(text.starts_with("profile, per step: 3.00 ms in nodes"));
/// assert!(text.contains("  3.000 ms 100.0 %    5x  MatMul [4, 4]"));
/// ```
pub fn report(lines: &[ProfileLine], runs: u32) -> String {
    let runs = runs.max(1);
    let total: Duration = lines.iter().map(|l| l.total).sum();
    let mut out = format!(
        "profile, per step: {:.2} ms in nodes\n",
        total.as_secs_f64() * 1e3 / f64::from(runs)
    );
    for l in lines {
        let ms = l.total.as_secs_f64() * 1e3 / f64::from(runs);
        let share = 100.0 * l.total.as_secs_f64() / total.as_secs_f64().max(1e-12);
        out += &format!(
            "{ms:9.3} ms {share:5.1} % {:>4}x  {} {:?}\n",
            l.calls / u64::from(runs),
            l.op,
            l.shape
        );
    }
    out
}

/// Whether a profile is being taken (read by the executor per node).
static ON: AtomicBool = AtomicBool::new(false);

/// The lines of the profile being taken, by op and shape.
type Lines = HashMap<(String, Vec<usize>), (u64, Duration)>;

/// The profile being taken (`None` while none is).
static LINES: Mutex<Option<Lines>> = Mutex::new(None);

/// Runs `f` and returns its result with the time spent in each kind of
/// node of the compiled graphs it ran (on any thread), most time first.
/// Eager ops and tracing are not timed. Profiles do not nest: an inner
/// `profile` takes the nodes it runs, and the outer one stops with it.
pub fn profile<R>(f: impl FnOnce() -> R) -> (R, Vec<ProfileLine>) {
    *LINES.lock().unwrap_or_else(|e| e.into_inner()) = Some(HashMap::new());
    ON.store(true, Ordering::Relaxed);
    let r = f();
    ON.store(false, Ordering::Relaxed);
    let lines = LINES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_default();
    let mut lines: Vec<ProfileLine> = lines
        .into_iter()
        .map(|((op, shape), (calls, total))| ProfileLine {
            op,
            shape,
            calls,
            total,
        })
        .collect();
    lines.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.op.cmp(&b.op)));
    (r, lines)
}

/// The start of a node's timing, when a profile is being taken.
pub(crate) fn start() -> Option<Instant> {
    ON.load(Ordering::Relaxed).then(Instant::now)
}

/// How a profile names `op`: as a graph listing does, with its
/// attributes but without a fused kernel's program.
pub(crate) fn label(op: &crate::ops::desc::Op) -> String {
    let mut s = op.to_string();
    if let Some(k) = s.find(" {") {
        s.truncate(k);
    }
    s
}

/// Adds the time since `t0` to the line of `op` and `shape`.
pub(crate) fn record(t0: Option<Instant>, op: impl FnOnce() -> String, shape: &[usize]) {
    let Some(t0) = t0 else { return };
    let dt = t0.elapsed();
    if let Some(lines) = LINES.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        let line = lines.entry((op(), shape.to_vec())).or_default();
        line.0 += 1;
        line.1 += dt;
    }
}
