//! CUDA graphs: a run of kernels recorded once and replayed as one launch.
//!
//! A traced step on a GPU is a few dozen small kernels, and launching each
//! costs the host more than the GPU takes to run it: the step is bound by
//! launches. A *CUDA graph* removes that cost: the kernels a run enqueues
//! are **captured** (recorded, not run) into a graph, which is then
//! **replayed** with one call per step. The graph compiler's executor
//! (`function::compile::replay`) decides what to capture; this module is
//! the mechanism:
//!
//! - [`capture`] runs a closure with this thread's GPU work redirected to a
//!   capture stream of the GPU (other threads keep the GPU's own stream, so
//!   their work is not recorded), and returns the instantiated graph
//!   ([`GraphExec`]) or why it could not be made;
//! - while capturing, device memory allocated on this thread becomes the
//!   graph's own (allocated and freed inside each replay), and the capture
//!   fails unless all of it is freed by the end (a tensor of the run that
//!   outlives it would point into the graph's memory); memory made before
//!   the capture and dropped during it is freed after it;
//! - anything that needs the host to wait for the GPU or to hand it host
//!   memory (a copy to or from the host, a synchronisation: reading a value,
//!   uploading a constant) makes the capture fail, with the op named: such
//!   a run depends on data the graph could not replay;
//! - [`GraphExec::launch`] replays the graph on the GPU's own stream,
//!   ordered with everything else.
//!
//! [`copy`] is a device-to-device copy on the current stream (captured or
//! not), which the executor uses to move inputs into the buffers a graph
//! reads and results out of those it writes.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{result as drv, sys};

use super::runtime::{gpu, Gpu};
use crate::error::{Error, Result};
use crate::tensor::{Device, Mem, Tensor};

/// A capture in progress on this thread.
struct Capture {
    ordinal: usize,
    stream: sys::CUstream,
    /// device memory allocated during the capture and not yet freed
    live: HashSet<u64>,
    /// memory made before the capture and dropped during it (freed after)
    deferred: Vec<u64>,
    /// why the capture cannot succeed, once something found out
    failed: Option<String>,
    /// whether a kernel with a deferred check was recorded
    checks: bool,
}

thread_local! {
    static CAPTURE: RefCell<Option<Capture>> = const { RefCell::new(None) };
    /// this thread's capture stream per GPU (made at its first capture)
    static STREAMS: RefCell<Vec<(usize, sys::CUstream)>> = const { RefCell::new(Vec::new()) };
}

/// Graph memory still held when a failed capture ended: never freed by
/// its holders (the graph that owned it is gone).
static ORPHANS: Mutex<Vec<u64>> = Mutex::new(Vec::new());
static ANY_ORPHANS: AtomicBool = AtomicBool::new(false);

/// This thread's capture stream of `g`.
fn capture_stream(op: &'static str, g: &Gpu) -> Result<sys::CUstream> {
    if let Some(s) = STREAMS.with(|s| s.borrow().iter().find(|(o, _)| *o == g.ordinal).map(|&(_, s)| s)) {
        return Ok(s);
    }
    let s = drv::stream::create(drv::stream::StreamKind::NonBlocking)
        .map_err(|e| g.err(op, format!("cannot make a capture stream: {e:?}")))?;
    STREAMS.with(|v| v.borrow_mut().push((g.ordinal, s)));
    Ok(s)
}

/// Graph replays so far (all GPUs): a diagnostic, see
/// [`crate::tensor::device::cuda_graph_launches`].
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// How many CUDA graph replays this process has launched.
pub(crate) fn launches() -> u64 {
    LAUNCHES.load(Ordering::Relaxed)
}

/// The stream this thread's work on GPU `ordinal` goes to: the capture
/// stream while capturing on it, else `main`.
#[inline]
pub(crate) fn stream_for(ordinal: usize, main: sys::CUstream) -> sys::CUstream {
    CAPTURE
        .try_with(|c| match &*c.borrow() {
            Some(cap) if cap.ordinal == ordinal => cap.stream,
            _ => main,
        })
        .unwrap_or(main)
}

/// Whether this thread is capturing on GPU `ordinal`.
#[inline]
pub(crate) fn capturing(ordinal: usize) -> bool {
    CAPTURE
        .try_with(|c| c.borrow().as_ref().is_some_and(|cap| cap.ordinal == ordinal))
        .unwrap_or(false)
}

/// Notes memory allocated while capturing on `ordinal`.
pub(crate) fn allocated(ordinal: usize, ptr: u64) {
    let _ = CAPTURE.try_with(|c| {
        if let Some(cap) = c.borrow_mut().as_mut().filter(|cap| cap.ordinal == ordinal) {
            cap.live.insert(ptr);
        }
    });
}

/// What freeing `ptr` on `ordinal` does: `Some(stream)` to free it there
/// (`main` when not capturing; the capture stream for graph memory, the
/// free recorded), `None` to leave it (memory made before the capture, freed
/// after it; or an orphan of a failed capture).
pub(crate) fn freeing(ordinal: usize, ptr: u64, main: sys::CUstream) -> Option<sys::CUstream> {
    if ANY_ORPHANS.load(Ordering::Relaxed) && ORPHANS.lock().is_ok_and(|o| o.contains(&ptr)) {
        return None;
    }
    CAPTURE
        .try_with(|c| match c.borrow_mut().as_mut() {
            Some(cap) if cap.ordinal == ordinal => {
                if cap.live.remove(&ptr) {
                    Some(cap.stream)
                } else {
                    cap.deferred.push(ptr);
                    None
                }
            }
            _ => Some(main),
        })
        .unwrap_or(Some(main))
}

/// Notes a kernel with a deferred check (`Gpu::check_word`) recorded
/// while capturing on `ordinal`: each replay marks the check pending.
pub(crate) fn checked(ordinal: usize) {
    let _ = CAPTURE.try_with(|c| {
        if let Some(cap) = c.borrow_mut().as_mut().filter(|cap| cap.ordinal == ordinal) {
            cap.checks = true;
        }
    });
}

/// Fails when capturing on `ordinal`: `op` needs the host to wait for the
/// GPU (or to hand it host memory), which a graph cannot replay.
pub(crate) fn forbid(op: &'static str, ordinal: usize) -> Result<()> {
    if !capturing(ordinal) {
        return Ok(());
    }
    let why = format!("{op} needs the host (a copy to or from it, or a wait), which a CUDA graph cannot replay");
    let _ = CAPTURE.try_with(|c| {
        if let Some(cap) = c.borrow_mut().as_mut() {
            cap.failed.get_or_insert_with(|| why.clone());
        }
    });
    Err(Error::Device {
        op,
        device: Device::Cuda(ordinal),
        msg: why,
    })
}

/// An instantiated graph of one GPU, replayed by [`launch`](Self::launch).
pub(crate) struct GraphExec {
    exec: sys::CUgraphExec,
    gpu: &'static Gpu,
    /// whether it holds kernels with deferred checks
    checks: bool,
}

// SAFETY: a graph exec may be launched from any thread once the context is
// current there (`gpu()` makes it so).
unsafe impl Send for GraphExec {}
unsafe impl Sync for GraphExec {}

impl GraphExec {
    /// Replays the graph on its GPU's stream.
    pub(crate) fn launch(&self, op: &'static str) -> Result<()> {
        let g = gpu(op, self.gpu.ordinal)?;
        // SAFETY: a live exec of this GPU's context
        unsafe { sys::cuGraphLaunch(self.exec, g.stream) }
            .result()
            .map_err(|e| g.err(op, format!("cuGraphLaunch failed: {e:?}")))?;
        LAUNCHES.fetch_add(1, Ordering::Relaxed);
        if self.checks {
            g.check_pending();
        }
        Ok(())
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        if gpu("cuda_graph", self.gpu.ordinal).is_ok() {
            // SAFETY: destroyed once; replays already enqueued keep running
            let _ = unsafe { sys::cuGraphExecDestroy(self.exec) };
        }
    }
}

/// Captures the GPU work `run` enqueues on this thread into a graph of GPU
/// `ordinal` (see the module docs), returning `run`'s result and the graph,
/// or why there is none (`Err` of the second: `run`'s own result is still
/// returned, made of tensors whose memory the failed capture freed: use
/// them for nothing but dropping).
pub(crate) fn capture<R>(op: &'static str, ordinal: usize, run: impl FnOnce() -> R) -> Result<(R, Result<GraphExec>)> {
    let g = gpu(op, ordinal)?;
    if capturing(ordinal) {
        return Err(g.err(op, "a CUDA graph capture is already in progress on this thread"));
    }
    let stream = capture_stream(op, g)?;
    // SAFETY: this thread's capture stream of a live context, idle
    unsafe { sys::cuStreamBeginCapture_v2(stream, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED) }
        .result()
        .map_err(|e| g.err(op, format!("cuStreamBeginCapture failed: {e:?}")))?;
    CAPTURE.with(|c| {
        *c.borrow_mut() = Some(Capture {
            ordinal,
            stream,
            live: HashSet::new(),
            deferred: Vec::new(),
            failed: None,
            checks: false,
        })
    });
    let r = run();
    let cap = CAPTURE
        .with(|c| c.borrow_mut().take())
        .expect("the capture state was set above");
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: ends the capture begun above (also when it was invalidated)
    let ended = unsafe { sys::cuStreamEndCapture(stream, &mut graph) }.result();
    let made = (|| {
        if let Some(why) = &cap.failed {
            return Err(g.err(op, why.clone()));
        }
        ended.map_err(|e| g.err(op, format!("the CUDA graph capture failed: {e:?}")))?;
        if !cap.live.is_empty() {
            return Err(g.err(
                op,
                format!(
                    "{} buffers made during the capture outlive it; a CUDA graph must free what it makes",
                    cap.live.len()
                ),
            ));
        }
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: a graph just captured on this context
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) }
            .result()
            .map_err(|e| g.err(op, format!("cuGraphInstantiate failed: {e:?}")))?;
        Ok(GraphExec {
            exec,
            gpu: g,
            checks: cap.checks,
        })
    })();
    if made.is_err() && !cap.live.is_empty() {
        // (their holders must not free them: the graph that owned them is gone)
        if let Ok(mut o) = ORPHANS.lock() {
            o.extend(cap.live.iter().copied());
            ANY_ORPHANS.store(true, Ordering::Relaxed);
        }
    }
    if !graph.is_null() {
        // SAFETY: the template is not needed once instantiated (or failed)
        let _ = unsafe { sys::cuGraphDestroy(graph) };
    }
    for ptr in cap.deferred {
        // SAFETY: memory of this GPU that nothing holds any more
        let _ = unsafe { drv::free_async(ptr, g.stream) };
    }
    Ok((r, made))
}

/// Copies `bytes` from device address `src` to `dst` of GPU `ordinal`, on
/// this thread's stream (recorded when capturing).
pub(crate) fn copy(op: &'static str, ordinal: usize, dst: u64, src: u64, bytes: usize) -> Result<()> {
    let g = gpu(op, ordinal)?;
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: both ranges are live device memory of this GPU (the callers'
    // tensors), ordered on the stream
    unsafe { drv::memcpy_dtod_async(dst, src, bytes, g.stream_now()) }.map_err(|e| g.err(op, format!("{e:?}")))
}

/// Whether this thread is capturing a graph (on any GPU).
pub(crate) fn capturing_any() -> bool {
    CAPTURE.try_with(|c| c.borrow().is_some()).unwrap_or(false)
}

/// The GPU of a tensor in a GPU's memory (not an emulated GPU's).
pub(crate) fn gpu_of(t: &Tensor) -> Option<usize> {
    match t.device_buffer().map(|b| &b.mem) {
        Some(Mem::Cuda(m)) => Some(m.gpu.ordinal),
        _ => None,
    }
}

/// Whether `a` and `b` are the same elements of the same device buffer
/// (so hold the same values: device buffers are never written after the
/// kernel that makes them).
pub(crate) fn same_buffer(a: &Tensor, b: &Tensor) -> bool {
    match (a.device_buffer(), b.device_buffer()) {
        (Some(x), Some(y)) => Arc::ptr_eq(x, y) && a.layout() == b.layout(),
        _ => false,
    }
}

/// A new contiguous tensor of `t`'s shape and dtype on its GPU
/// (uninitialised).
pub(crate) fn empty_like(op: &'static str, t: &Tensor) -> Result<Tensor> {
    let g = super::launch::tensor_gpu(t);
    Ok(super::launch::alloc_on(op, g, t.shape(), t.dtype())?.0)
}

/// A new contiguous tensor of `shape` and `dtype` on GPU `ordinal`
/// (uninitialised).
pub(crate) fn empty(op: &'static str, ordinal: usize, shape: &[usize], dtype: crate::tensor::DType) -> Result<Tensor> {
    Ok(super::launch::alloc_on(op, gpu(op, ordinal)?, shape, dtype)?.0)
}

/// Copies the values of `src` into `dst` (a contiguous tensor of the same
/// shape and dtype on the same GPU, covering its buffer), on this thread's
/// stream: a view is made contiguous first.
pub(crate) fn copy_tensor(op: &'static str, dst: &Tensor, src: &Tensor) -> Result<()> {
    let src = super::launch::contiguous(op, src)?;
    let g = super::launch::tensor_gpu(dst);
    let bytes = dst.numel() * dst.dtype().size_in_bytes();
    let (d, s) = (super::launch::ptr_of(dst), super::launch::ptr_of(&src));
    let s = s + (src.layout().offset * src.dtype().size_in_bytes()) as u64;
    copy(op, g.ordinal, d, s, bytes)
}
