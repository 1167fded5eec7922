//! Where a tensor's elements live: [`Device::Cpu`] (host memory, the
//! default) or [`Device::Cuda`] (an NVIDIA GPU's memory).
//!
//! A tensor on a GPU holds a [`DeviceBuffer`]: the device's memory, with
//! its dtype and length. Its layout (shape, strides, offset) is the same
//! kind of value as a host tensor's, so views (reshape, transpose, slices,
//! broadcasts) cost no copy on either side.
//!
//! Ops run where their inputs live; inputs on two devices are an error
//! naming the op and both devices (`dispatch::device` checks, once per op).
//! Reading values (`to_vec`, printing, `item`, checkpoints) copies to the
//! host.
//!
//! **Soft placement.** An op with no GPU kernel for its inputs (a matrix
//! decomposition, CTC, an FFT, integer or complex products, an output
//! whose shape depends on the values) runs on the CPU on host copies and
//! gives its outputs back on the inputs' GPU, as TensorFlow's soft device
//! placement does ([`set_soft_device_placement`], on by default; logged
//! once per op). The mechanism is in three places, so that an op reaches
//! it without code of its own: the generic host kernels (maps, zips,
//! selects, reductions, products) start with `kernels::gpu::hosted`; a GPU
//! kernel that finds it has no case for a dtype falls back in
//! `kernels::gpu::offload_n_in`; and the ops that read values on the host
//! (decompositions, `unique`, `argwhere`, ...) ask `dispatch::device::
//! hosted` or read through `kernels::gpu::host_f64s`.
//!
//! **The host emulator.** The GPU backend's kernels need a GPU, but what
//! sits above them (device placement, the mixed-device errors, the tape,
//! jacobians, traced functions, layers and optimizers on device tensors)
//! does not. [`emulate_cuda_on_host`] makes `Device::Cuda(n)` a device
//! whose memory is host memory and whose kernels are the CPU's, so that
//! all of it is tested in CI on machines without a GPU: an op with no GPU
//! kernel fails the same way under the emulator as on a GPU, and an op
//! with one runs the CPU kernel there. Only the CUDA kernels themselves
//! are left to the GPU check (`scripts/gpu-check.sh`).

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{DType, Storage};
use crate::error::{Error, Result};

/// A device that holds tensors and runs ops on them.
///
/// ```
/// use gradtape::{Device, Tensor};
/// let x = Tensor::vector(&[1.0f32, 2.0]);
/// assert_eq!(x.device(), Device::Cpu);
/// assert_eq!("cuda:1".parse::<Device>()?, Device::Cuda(1));
/// assert_eq!(Device::Cuda(0).to_string(), "cuda:0");
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// Host memory and the CPU kernels.
    #[default]
    Cpu,
    /// The NVIDIA GPU of this ordinal (as `nvidia-smi` numbers them).
    Cuda(usize),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl FromStr for Device {
    type Err = Error;

    /// `cpu`, `cuda` (GPU 0) or `cuda:N`.
    fn from_str(s: &str) -> Result<Device> {
        let bad = || {
            Error::invalid(
                "Device::from_str",
                format!("{s:?} is not a device (cpu, cuda or cuda:N)"),
            )
        };
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda(0)),
            _ => {
                let n = s
                    .strip_prefix("cuda:")
                    .or_else(|| s.strip_prefix("gpu:"))
                    .ok_or_else(bad)?;
                n.parse().map(Device::Cuda).map_err(|_| bad())
            }
        }
    }
}

impl Device {
    /// Whether this is a GPU.
    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

static EMULATE: AtomicBool = AtomicBool::new(false);
static TF32: AtomicBool = AtomicBool::new(false);
static SOFT: AtomicBool = AtomicBool::new(true);

/// Soft device placement, TensorFlow's `tf.config.
/// set_soft_device_placement` (on by default there and here): an op with
/// no kernel for a GPU (the matrix decompositions and solves, CTC, the
/// special functions of `special`) runs on the CPU for GPU inputs, which
/// are copied to the host, and its outputs are copied back to the inputs'
/// GPU, so a model that uses one still runs there; the first time an op
/// does so it is logged (`log::warn!`). Off, such an op is an error naming
/// it and the device. Inputs on two different devices are an error either
/// way.
///
/// ```
/// use gradtape::{Device, Tensor};
/// gradtape::emulate_cuda_on_host();
/// let a = Tensor::from_vec(vec![4.0f64, 2.0, 2.0, 3.0], &[2, 2])?.to(Device::Cuda(0))?;
/// gradtape::set_soft_device_placement(false);
/// assert!(a.cholesky().is_err());
/// gradtape::set_soft_device_placement(true);
/// let l = a.cholesky()?;
/// assert_eq!(l.device(), Device::Cuda(0));
/// assert_eq!(l.to_vec::<f64>()?[0], 2.0);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn set_soft_device_placement(on: bool) {
    SOFT.store(on, Ordering::Relaxed);
}

/// Whether [`set_soft_device_placement`] is on.
pub fn soft_device_placement() -> bool {
    SOFT.load(Ordering::Relaxed)
}

/// Lets `f32` matrix products on a GPU use TF32 tensor cores (inputs
/// rounded to 10 mantissa bits, accumulation in `f32`: several times
/// faster, about 1e-3 relative error), as `torch.backends.cuda.matmul.
/// allow_tf32` does. Off by default: products are plain `f32`, matching
/// the CPU to rounding.
///
/// ```
/// gradtape::allow_tf32(false);
/// assert!(!gradtape::tf32_allowed());
/// ```
pub fn allow_tf32(on: bool) {
    TF32.store(on, Ordering::Relaxed);
}

/// Whether [`allow_tf32`] is on.
pub fn tf32_allowed() -> bool {
    TF32.load(Ordering::Relaxed)
}

/// Makes `Device::Cuda(n)` (every `n`) an emulated device in this process:
/// host memory and the CPU's kernels behind the GPU's dispatch (see the
/// module docs). For tests of everything above the kernels on machines
/// without a GPU; call it before making any tensor on a GPU.
///
/// ```
/// use gradtape::{Device, Tensor};
/// gradtape::emulate_cuda_on_host();
/// let x = Tensor::vector(&[1.0f32, 4.0]).to(Device::Cuda(0))?;
/// let y = x.sqrt()?;
/// assert_eq!(y.device(), Device::Cuda(0));
/// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 2.0]);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[doc(hidden)]
pub fn emulate_cuda_on_host() {
    EMULATE.store(true, Ordering::Relaxed);
}

/// Whether GPUs are emulated on the host ([`emulate_cuda_on_host`]).
pub(crate) fn emulated() -> bool {
    EMULATE.load(Ordering::Relaxed)
}

/// Whether a GPU can hold tensors here: the CUDA driver loads and reports
/// at least one device (or GPUs are emulated). Never panics: a machine
/// without CUDA, or a build without the `cuda` feature, answers `false`.
///
/// ```
/// if gradtape::cuda_is_available() {
///     let x = gradtape::Tensor::scalar(2.0f32).to(gradtape::Device::Cuda(0))?;
///     assert_eq!(x.to_scalar::<f32>()?, 2.0);
/// }
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn cuda_is_available() -> bool {
    cuda_device_count().is_ok_and(|n| n > 0)
}

/// How many CUDA graph replays this process has launched: a compiled
/// graph ([`function`](crate::function())) whose inputs and variables live on
/// one GPU is recorded as a CUDA graph at its second run and replayed as
/// one launch from then on (unless it cannot be: a random op, a value read
/// on the host). A diagnostic, for tests and profiles; always 0 without a
/// GPU.
///
/// ```
/// let before = gradtape::cuda_graph_launches();
/// assert!(gradtape::cuda_graph_launches() >= before);
/// ```
pub fn cuda_graph_launches() -> u64 {
    #[cfg(feature = "cuda")]
    return crate::kernels::cuda::graph::launches();
    #[cfg(not(feature = "cuda"))]
    0
}

/// How many GPUs the CUDA driver reports; an error naming the cause where
/// there is no driver (or the build has no `cuda` feature).
pub fn cuda_device_count() -> Result<usize> {
    if emulated() {
        return Ok(1);
    }
    crate::kernels::cuda::device_count()
}

/// A tensor's elements in a device's memory.
pub(crate) struct DeviceBuffer {
    pub(crate) device: Device,
    pub(crate) dtype: DType,
    /// Elements.
    pub(crate) len: usize,
    pub(crate) mem: Mem,
}

/// The memory behind a [`DeviceBuffer`].
pub(crate) enum Mem {
    /// An emulated GPU's memory (host memory).
    Host(Storage),
    /// A GPU's memory.
    #[cfg(feature = "cuda")]
    Cuda(crate::kernels::cuda::CudaMem),
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceBuffer({}, {} x {})", self.device, self.len, self.dtype)
    }
}
