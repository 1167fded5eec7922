//! The device side of every backend function: moving tensors between host
//! and device, filling, making contiguous, and the check that keeps CPU
//! kernels off device memory. Each function takes the emulated device's
//! path (host memory, CPU code; see `tensor::device`) or the CUDA one
//! (`kernels::cuda`).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::tensor::{DType, Device, DeviceBuffer, Element, Layout, Mem, Storage, Tensor};

use super::cuda;

/// Fails for a tensor on a device: the CPU kernel of `op` was about to
/// read it, so `op` has no kernel for that device.
#[inline]
pub(crate) fn expect_host(op: &'static str, t: &Tensor) -> Result<()> {
    match t.device_buffer() {
        None => Ok(()),
        Some(b) => Err(no_kernel(op, b.device, t.dtype())),
    }
}

/// The error of an op with no kernel on `device`.
pub(crate) fn no_kernel(op: &'static str, device: Device, dtype: DType) -> Error {
    Error::Device {
        op,
        device,
        msg: format!(
            "no kernel for {dtype} tensors on this device yet (move the inputs to the CPU with .to(Device::Cpu))"
        ),
    }
}

/// The host copy of a tensor on a device, contiguous (the tensor itself
/// when it is on the CPU).
pub(crate) fn to_host(op: &'static str, t: &Tensor) -> Result<Tensor> {
    let Some(b) = t.device_buffer() else {
        return Ok(t.clone());
    };
    match &b.mem {
        Mem::Host(s) => {
            // a host tensor of the whole buffer, viewed as the tensor is
            let whole = Tensor::from_storage(s.clone(), &[s.len()]);
            let view = whole.view(t.layout().clone());
            view.contiguous_copy(op)
        }
        #[cfg(feature = "cuda")]
        Mem::Cuda(_) => cuda::download(op, t),
    }
}

/// A copy of a host tensor on `device` (contiguous).
pub(crate) fn upload(op: &'static str, t: &Tensor, device: Device) -> Result<Tensor> {
    debug_assert!(t.device_buffer().is_none());
    let Device::Cuda(ordinal) = device else {
        return Ok(t.clone());
    };
    if crate::tensor::device::emulated() {
        let host = t.contiguous_copy(op)?;
        let storage: Storage = host.storage_clone();
        return Ok(Tensor::from_device_buffer(
            DeviceBuffer {
                device,
                dtype: t.dtype(),
                len: storage.len(),
                mem: Mem::Host(storage),
            },
            t.shape(),
        ));
    }
    cuda::upload(op, t, ordinal)
}

/// `t` on `device`: itself if it is there, else a copy. Inside a trace,
/// a copy of a constant is a constant (of the graph, on that device).
pub(crate) fn to_device(op: &'static str, t: &Tensor, device: Device) -> Result<Tensor> {
    if t.device() == device {
        return Ok(t.clone());
    }
    t.expect_readable(op)?;
    let host = to_host(op, t)?;
    let y = upload(op, &host, device)?;
    crate::tensor::observe::constant(&y);
    Ok(y)
}

/// `value` everywhere, a new contiguous tensor of `shape` on `device`.
pub(crate) fn filled(op: &'static str, shape: &[usize], value: f64, dtype: DType, device: Device) -> Result<Tensor> {
    let Device::Cuda(ordinal) = device else {
        return Tensor::filled(op, shape, value, dtype);
    };
    let y = if crate::tensor::device::emulated() {
        upload(op, &Tensor::filled(op, shape, value, dtype)?, device)?
    } else {
        cuda::filled(op, shape, value, dtype, ordinal)?
    };
    crate::tensor::observe::constant(&y);
    Ok(y)
}

/// A contiguous copy of a tensor on a device (the tensor itself when it is
/// contiguous from offset 0 and covers its buffer).
pub(crate) fn contiguous(op: &'static str, t: &Tensor) -> Result<Tensor> {
    let Some(b) = t.device_buffer() else {
        return t.contiguous_copy(op);
    };
    let l = t.layout();
    if l.is_contiguous() && l.offset == 0 && b.len == l.numel() {
        return Ok(t.clone());
    }
    match &b.mem {
        Mem::Host(_) => upload(op, &to_host(op, t)?, b.device),
        #[cfg(feature = "cuda")]
        Mem::Cuda(_) => cuda::contiguous(op, t),
    }
}

/// A device tensor viewing the same buffer as `t` with another layout.
#[allow(dead_code)]
pub(crate) fn view(t: &Tensor, layout: Layout) -> Option<Tensor> {
    t.device_buffer().map(|b| Tensor::device_view(Arc::clone(b), layout))
}

impl Tensor {
    /// A contiguous host copy (the tensor itself when already contiguous).
    fn contiguous_copy(&self, op: &'static str) -> Result<Tensor> {
        if self.is_contiguous() && self.layout().offset == 0 && self.host_len() == self.numel() {
            return Ok(self.clone());
        }
        crate::tensor::with_dtype!(self.dtype(), T => Ok(Tensor::from_storage(
            T::into_storage(self.owned_values::<T>(op)?),
            self.shape(),
        )))
    }
}
