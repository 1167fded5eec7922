//! The CUDA runtime under the GPU kernels: one context, stream, cuBLAS
//! handle and kernel cache per GPU, device memory, copies, NVRTC
//! compilation and launches, on cudarc's thin `result` layer (raw device
//! pointers; the typed `safe` layer's per-buffer event tracking is work
//! every op would pay for nothing: all of a GPU's work goes to one stream,
//! in order).
//!
//! Everything is loaded at first use: the driver (`libcuda`), NVRTC and
//! cuBLAS are found at run time (cudarc's `dynamic-loading`), and a missing
//! one is an [`Error::Device`] naming it, never a panic. Kernels are CUDA C
//! compiled by NVRTC for the GPU's own architecture (a cubin: no PTX JIT,
//! whose PTX version an older driver may not know), cached by their source.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::{result as drv, sys};
use cudarc::nvrtc::{result as rtc, sys as rtc_sys};

use crate::error::{Error, Result};
use crate::tensor::Device;

/// The most GPUs one process drives.
const MAX_GPUS: usize = 16;

/// One GPU's context, stream, cuBLAS handle and compiled kernels.
pub(crate) struct Gpu {
    pub(crate) ordinal: usize,
    ctx: sys::CUcontext,
    pub(crate) stream: sys::CUstream,
    pub(crate) blas: Mutex<blas_sys::cublasHandle_t>,
    arch: (i32, i32),
    kernels: Mutex<HashMap<String, Kernel>>,
    /// the deferred checks' word (see [`check_word`](Self::check_word)):
    /// device memory of three `u64`s, the failed site's code (0: none),
    /// the bad index and the size it exceeds
    checks: u64,
    /// whether a kernel that checks may have run since the last read
    pending: AtomicBool,
    /// the checking sites (op and the checked operand's shape), by code - 1
    sites: Mutex<Vec<(&'static str, Vec<usize>)>>,
}

/// A compiled kernel (its module stays loaded for the process).
#[derive(Clone, Copy)]
struct Kernel(sys::CUfunction);

// SAFETY: the driver's handles may be used from any thread once the
// context is current there (`Gpu::bind` makes it so before every call);
// the cuBLAS handle is behind a mutex.
unsafe impl Send for Gpu {}
unsafe impl Sync for Gpu {}
unsafe impl Send for Kernel {}

static GPUS: [OnceLock<std::result::Result<Gpu, String>>; MAX_GPUS] = [const { OnceLock::new() }; MAX_GPUS];

fn err(op: &'static str, ordinal: usize, msg: impl Into<String>) -> Error {
    Error::Device {
        op,
        device: Device::Cuda(ordinal),
        msg: msg.into(),
    }
}

/// Whether the CUDA driver library can be loaded.
fn driver_present() -> bool {
    // SAFETY: only looks the library up (cudarc's loader)
    unsafe { sys::is_culib_present() }
}

/// The number of GPUs the driver reports.
pub(crate) fn device_count() -> Result<usize> {
    if !driver_present() {
        return Err(err(
            "cuda_device_count",
            0,
            "the CUDA driver (libcuda.so) was not found: no NVIDIA GPU driver is installed here",
        ));
    }
    drv::init().map_err(|e| err("cuda_device_count", 0, format!("cuInit failed: {e:?}")))?;
    let n = drv::device::get_count().map_err(|e| err("cuda_device_count", 0, format!("{e:?}")))?;
    Ok(n.max(0) as usize)
}

/// The GPU of `ordinal`, set up at first use (and bound to this thread).
pub(crate) fn gpu(op: &'static str, ordinal: usize) -> Result<&'static Gpu> {
    let slot = GPUS
        .get(ordinal)
        .ok_or_else(|| err(op, ordinal, format!("at most {MAX_GPUS} GPUs are supported")))?;
    let g = slot
        .get_or_init(|| Gpu::open(ordinal))
        .as_ref()
        .map_err(|m| err(op, ordinal, m.clone()))?;
    g.bind(op)?;
    Ok(g)
}

impl Gpu {
    fn open(ordinal: usize) -> std::result::Result<Gpu, String> {
        let n = device_count().map_err(|e| e.to_string())?;
        if ordinal >= n {
            return Err(format!("no such GPU: the driver reports {n}"));
        }
        // SAFETY: plain driver calls on a device that exists; the primary
        // context is retained for the process
        unsafe {
            let dev = drv::device::get(ordinal as i32).map_err(|e| format!("{e:?}"))?;
            let ctx = drv::primary_ctx::retain(dev).map_err(|e| format!("{e:?}"))?;
            drv::ctx::set_current(ctx).map_err(|e| format!("{e:?}"))?;
            let stream = drv::stream::create(drv::stream::StreamKind::NonBlocking).map_err(|e| format!("{e:?}"))?;
            let major = drv::device::get_attribute(
                dev,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            )
            .map_err(|e| format!("{e:?}"))?;
            let minor = drv::device::get_attribute(
                dev,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            )
            .map_err(|e| format!("{e:?}"))?;
            if !blas_sys::is_culib_present() {
                return Err("cuBLAS (libcublas.so) was not found; add its folder to LD_LIBRARY_PATH".into());
            }
            // Freed memory stays in the stream-ordered pool: by default the
            // pool returns it to the driver at every synchronisation (each
            // `item()`), and the next step's allocations map it again, tens
            // of microseconds each.
            let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
            sys::cuDeviceGetDefaultMemPool(&mut pool, dev)
                .result()
                .map_err(|e| format!("cuDeviceGetDefaultMemPool failed: {e:?}"))?;
            let mut keep = u64::MAX;
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut keep as *mut u64 as *mut c_void,
            )
            .result()
            .map_err(|e| format!("cuMemPoolSetAttribute failed: {e:?}"))?;
            let handle = blas::create_handle().map_err(|e| format!("cublasCreate failed: {e:?}"))?;
            blas::set_stream(handle, stream as _).map_err(|e| format!("cublasSetStream failed: {e:?}"))?;
            let checks = drv::malloc_sync(24).map_err(|e| format!("cannot allocate device memory: {e:?}"))?;
            drv::memset_d8_sync(checks, 0, 24).map_err(|e| format!("{e:?}"))?;
            Ok(Gpu {
                ordinal,
                ctx,
                stream,
                blas: Mutex::new(handle),
                arch: (major, minor),
                kernels: Mutex::new(HashMap::new()),
                checks,
                pending: AtomicBool::new(false),
                sites: Mutex::new(Vec::new()),
            })
        }
    }

    /// Makes this GPU's context current on the calling thread.
    fn bind(&self, op: &'static str) -> Result<()> {
        thread_local! {
            static CURRENT: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
        }
        if CURRENT.with(|c| c.get()) == self.ordinal {
            return Ok(());
        }
        // SAFETY: the context was retained in `open` and is never released
        unsafe { drv::ctx::set_current(self.ctx) }.map_err(|e| err(op, self.ordinal, format!("{e:?}")))?;
        CURRENT.with(|c| c.set(self.ordinal));
        Ok(())
    }

    pub(crate) fn err(&self, op: &'static str, msg: impl Into<String>) -> Error {
        err(op, self.ordinal, msg)
    }

    /// The stream this thread's work goes to: the GPU's own, or the
    /// capture stream while this thread records a CUDA graph
    /// ([`graph`](super::graph)).
    #[inline]
    pub(crate) fn stream_now(&self) -> sys::CUstream {
        super::graph::stream_for(self.ordinal, self.stream)
    }

    /// This GPU's cuBLAS handle, held (one thread's calls at a time) and
    /// set to this thread's stream ([`stream_now`](Self::stream_now)) until
    /// the guard goes.
    pub(crate) fn blas_on(&self, op: &'static str) -> Result<BlasGuard<'_>> {
        let lock = self.blas.lock().map_err(|_| self.err(op, "cuBLAS handle poisoned"))?;
        let handle = *lock;
        let stream = self.stream_now();
        let moved = stream != self.stream;
        if moved {
            // SAFETY: a live handle, held; the stream is this GPU's
            unsafe { blas::set_stream(handle, stream as _) }
                .map_err(|e| self.err(op, format!("cublasSetStream failed: {e:?}")))?;
        }
        Ok(BlasGuard {
            handle,
            main: moved.then_some(self.stream),
            _lock: lock,
        })
    }

    /// `bytes` of device memory (stream-ordered: freed on the same stream).
    pub(crate) fn alloc(&'static self, op: &'static str, bytes: usize) -> Result<CudaMem> {
        let ptr = if bytes == 0 {
            0
        } else {
            // SAFETY: the stream is this GPU's; the memory is only used on it
            let ptr = unsafe { drv::malloc_async(self.stream_now(), bytes) }
                .map_err(|e| self.err(op, format!("cannot allocate {bytes} bytes of device memory: {e:?}")))?;
            super::graph::allocated(self.ordinal, ptr);
            ptr
        };
        Ok(CudaMem { ptr, bytes, gpu: self })
    }

    /// Copies host `src` into `dst` (which holds at least as many bytes).
    pub(crate) fn upload<T>(&self, op: &'static str, dst: &CudaMem, src: &[T]) -> Result<()> {
        assert!(
            std::mem::size_of_val(src) <= dst.bytes,
            "gradtape internal error: upload past a buffer"
        );
        super::graph::forbid(op, self.ordinal)?;
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst` holds the bytes; the copy is synchronous with
        // respect to the host buffer (waited for below)
        unsafe {
            drv::memcpy_htod_async(dst.ptr, src, self.stream).map_err(|e| self.err(op, format!("{e:?}")))?;
        }
        // (a wait that leaves the deferred checks to the next read)
        // SAFETY: the stream is live
        unsafe { drv::stream::synchronize(self.stream) }.map_err(|e| self.err(op, format!("{e:?}")))
    }

    /// Copies `src` (which holds at least `dst`'s bytes) to the host.
    pub(crate) fn download<T>(&self, op: &'static str, dst: &mut [T], src: u64) -> Result<()> {
        super::graph::forbid(op, self.ordinal)?;
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: the caller's `src` holds the bytes; waited for below
        unsafe {
            drv::memcpy_dtoh_async(dst, src, self.stream).map_err(|e| self.err(op, format!("{e:?}")))?;
        }
        self.sync(op)
    }

    /// Waits for all work queued on this GPU; then reports what a checking
    /// kernel found since the last wait (see [`check_word`](Self::check_word)).
    pub(crate) fn sync(&self, op: &'static str) -> Result<()> {
        super::graph::forbid(op, self.ordinal)?;
        let pending = self.pending.swap(false, Ordering::AcqRel);
        let mut word = [0u64; 3];
        if pending {
            // (queued before the wait: one round trip for both)
            // SAFETY: the word is this GPU's; `word` outlives the wait below
            unsafe { drv::memcpy_dtoh_async(&mut word, self.checks, self.stream) }
                .map_err(|e| self.err(op, format!("{e:?}")))?;
        }
        // SAFETY: the stream is live
        unsafe { drv::stream::synchronize(self.stream) }.map_err(|e| self.err(op, format!("{e:?}")))?;
        if word[0] == 0 {
            return Ok(());
        }
        // SAFETY: as above
        unsafe { drv::memset_d8_sync(self.checks, 0, 24) }.map_err(|e| self.err(op, format!("{e:?}")))?;
        let sites = self.sites.lock().map_err(|_| self.err(op, "check sites poisoned"))?;
        let (site, shape) = sites.get(word[0] as usize - 1).cloned().unwrap_or((op, Vec::new()));
        Err(Error::IndexOutOfRange {
            op: site,
            index: word[1] as i64,
            dim: word[2] as usize,
            shape,
        })
    }

    /// A **deferred check** for a kernel of `op` (over an operand of
    /// `shape`): the address of this GPU's check word and the site's code.
    /// A kernel that finds a bad index (a label out of range) writes the
    /// code, the index and its bound there, once, and carries on (its
    /// outputs NaN); the next wait for the GPU ([`sync`](Self::sync): every
    /// read of a value) returns the error the CPU would have, naming `op`.
    /// So the host never waits mid-step to check indices, and a CUDA graph
    /// replays the check with the kernel.
    pub(crate) fn check_word(&self, op: &'static str, shape: &[usize]) -> Result<(u64, u64)> {
        let mut sites = self.sites.lock().map_err(|_| self.err(op, "check sites poisoned"))?;
        let code = match sites.iter().position(|(o, s)| *o == op && s[..] == *shape) {
            Some(i) => i + 1,
            None => {
                sites.push((op, shape.to_vec()));
                sites.len()
            }
        };
        self.pending.store(true, Ordering::Release);
        super::graph::checked(self.ordinal);
        Ok((self.checks, code as u64))
    }

    /// Marks a check as pending (a replayed graph holds checking kernels).
    pub(crate) fn check_pending(&self) {
        self.pending.store(true, Ordering::Release);
    }

    /// The kernel `k` of the source `source()` makes, compiled at its first
    /// use and cached under `key` (which names the source: its kind, types
    /// and expression, cheaper to make and hash than the source itself).
    fn kernel(&self, op: &'static str, key: &str, source: &dyn Fn() -> String) -> Result<Kernel> {
        let poisoned = || self.err(op, "kernel cache poisoned");
        if let Some(&k) = self.kernels.lock().map_err(|_| poisoned())?.get(key) {
            return Ok(k);
        }
        let cubin = compile(&source(), self.arch).map_err(|m| self.err(op, m))?;
        let cname = CString::new("k").map_err(|_| self.err(op, "bad kernel name"))?;
        // SAFETY: a cubin NVRTC made for this GPU; the module stays loaded
        let f = unsafe {
            let module = drv::module::load_data(cubin.as_ptr() as *const c_void)
                .map_err(|e| self.err(op, format!("loading a compiled kernel failed: {e:?}")))?;
            drv::module::get_function(module, cname).map_err(|e| self.err(op, format!("{e:?}")))?
        };
        let k = Kernel(f);
        self.kernels.lock().map_err(|_| poisoned())?.insert(key.to_string(), k);
        Ok(k)
    }

    /// Launches the kernel `k` of the source `source()` makes (cached
    /// under `key`: see [`kernel`](Self::kernel)) on `grid` blocks of
    /// `block` threads (kernels loop grid-stride, so any grid covers any
    /// size), with `args` (pointers to each argument's value, in order).
    pub(crate) fn launch(
        &self,
        op: &'static str,
        key: &str,
        source: &dyn Fn() -> String,
        grid: u32,
        block: u32,
        args: &mut [*mut c_void],
    ) -> Result<()> {
        let k = self.kernel(op, key, source)?;
        if grid == 0 {
            return Ok(());
        }
        // SAFETY: the arguments match the kernel's parameters (each caller
        // passes them in the order of its source); memory is this GPU's
        unsafe { drv::launch_kernel(k.0, (grid, 1, 1), (block, 1, 1), 0, self.stream_now(), args) }
            .map_err(|e| self.err(op, format!("kernel launch failed: {e:?}")))
    }
}

/// Grid size for `n` elements, blocks of `block` (capped: kernels loop).
pub(crate) fn grid_for(n: usize, block: u32) -> u32 {
    n.div_ceil(block as usize).min(65_535 * 8) as u32
}

/// Compiles CUDA C `source` to a cubin for `arch` with NVRTC.
pub(crate) fn compile(source: &str, arch: (i32, i32)) -> std::result::Result<Vec<u8>, String> {
    compile_with(source, &format!("--gpu-architecture=sm_{}{}", arch.0, arch.1), true)
}

/// Compiles `source` with NVRTC under `arch_flag`, returning the cubin
/// (`cubin`) or the PTX; an error carries NVRTC's log.
pub fn compile_with(source: &str, arch_flag: &str, cubin: bool) -> std::result::Result<Vec<u8>, String> {
    // SAFETY: only looks the library up
    if !unsafe { rtc_sys::is_culib_present() } {
        return Err("NVRTC (libnvrtc.so) was not found; add its folder to LD_LIBRARY_PATH".into());
    }
    let src = CString::new(source).map_err(|_| "a kernel source holds a NUL byte".to_string())?;
    let prog = rtc::create_program(&src, None).map_err(|e| format!("nvrtcCreateProgram: {e:?}"))?;
    let opts = [arch_flag.to_string(), "--std=c++17".to_string()];
    // SAFETY: `prog` is live until destroyed below
    unsafe {
        let compiled = rtc::compile_program(prog, &opts);
        let out = match compiled {
            Err(e) => {
                let log = rtc::get_program_log(prog)
                    .map(|l| {
                        let bytes: Vec<u8> = l.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
                        String::from_utf8_lossy(&bytes).into_owned()
                    })
                    .unwrap_or_default();
                Err(format!("NVRTC could not compile a kernel ({e:?}):\n{log}"))
            }
            Ok(()) if cubin => {
                let mut size = 0usize;
                rtc_sys::nvrtcGetCUBINSize(prog, &mut size)
                    .result()
                    .map_err(|e| format!("nvrtcGetCUBINSize: {e:?}"))?;
                let mut buf = vec![0u8; size];
                rtc_sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut _)
                    .result()
                    .map_err(|e| format!("nvrtcGetCUBIN: {e:?}"))?;
                Ok(buf)
            }
            Ok(()) => rtc::get_ptx(prog)
                .map(|p| p.iter().map(|&c| c as u8).collect())
                .map_err(|e| format!("nvrtcGetPTX: {e:?}")),
        };
        let _ = rtc::destroy_program(prog);
        out
    }
}

/// Device memory of one GPU, freed (on its stream) when dropped.
pub(crate) struct CudaMem {
    pub(crate) ptr: u64,
    pub(crate) bytes: usize,
    pub(crate) gpu: &'static Gpu,
}

impl Drop for CudaMem {
    fn drop(&mut self) {
        if self.ptr != 0
            && self.gpu.bind("free").is_ok()
            && let Some(stream) = super::graph::freeing(self.gpu.ordinal, self.ptr, self.gpu.stream)
        {
            // SAFETY: allocated on this GPU, freed once; later work on the
            // stream cannot use it (nothing holds the pointer)
            let _ = unsafe { drv::free_async(self.ptr, stream) };
        }
    }
}

/// A held cuBLAS handle (see [`Gpu::blas_on`]).
pub(crate) struct BlasGuard<'a> {
    pub(crate) handle: blas_sys::cublasHandle_t,
    /// the GPU's own stream, to set back, when the handle was moved
    main: Option<sys::CUstream>,
    _lock: std::sync::MutexGuard<'a, blas_sys::cublasHandle_t>,
}

impl Drop for BlasGuard<'_> {
    fn drop(&mut self) {
        if let Some(main) = self.main {
            // SAFETY: the handle is still held (the lock drops after this)
            let _ = unsafe { blas::set_stream(self.handle, main as _) };
        }
    }
}
