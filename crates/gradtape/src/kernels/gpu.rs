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

/// The start of the message of [`no_kernel`]'s errors.
const NO_KERNEL: &str = "no kernel for ";

/// The error of an op with no kernel on `device`.
pub(crate) fn no_kernel(op: &'static str, device: Device, dtype: DType) -> Error {
    Error::Device {
        op,
        device,
        msg: format!(
            "{NO_KERNEL}{dtype} tensors on this device (move the inputs to the CPU with .to(Device::Cpu), or turn soft device placement on)"
        ),
    }
}

/// Whether `e` is [`no_kernel`]'s error.
fn is_no_kernel(e: &Error) -> bool {
    matches!(e, Error::Device { msg, .. } if msg.starts_with(NO_KERNEL))
}

/// A CPU kernel of `op` reached with inputs on a device, for which the op
/// has no kernel there: `None` when every input is on the CPU (the usual
/// path: one read per input); otherwise `kernel` on host copies, its
/// output moved to the inputs' device, under soft device placement
/// ([`soft_placed`]; else the error of an op with no kernel there). The
/// generic host kernels (elementwise maps and zips, selects, reductions,
/// concatenations, products) start with it, so every op built on them
/// runs for GPU inputs, through the GPU's kernel where the op has one
/// ([`offload_n_in`]) and here where it has not.
#[inline]
pub(crate) fn hosted(
    op: &'static str,
    inputs: &[&Tensor],
    kernel: impl FnOnce(&[Tensor]) -> Result<Tensor>,
) -> Option<Result<Tensor>> {
    if inputs.iter().all(|t| t.device_buffer().is_none()) {
        return None;
    }
    // (the rest through one body for every kernel: see `emulate`)
    let mut kernel = Some(kernel);
    hosted_one(op, inputs, &mut |h| {
        kernel.take().expect("hosted runs its kernel once")(h)
    })
}

/// [`hosted`] past its check, for every kernel.
#[inline(never)]
fn hosted_one(
    op: &'static str,
    inputs: &[&Tensor],
    kernel: &mut dyn FnMut(&[Tensor]) -> Result<Tensor>,
) -> Option<Result<Tensor>> {
    let r = hosted_n_in(op, inputs, &mut |h| kernel(h).map(|t| vec![t]))?;
    Some(r.map(|mut v| v.swap_remove(0)))
}

/// `t` where a CPU kernel of `op`, which has none for GPUs, can read it:
/// `t` itself on the CPU; on a device, a host copy when soft placement
/// allows it ([`soft_placed`]). The kernel's outputs go back with
/// [`upload`].
pub(crate) fn host_input(op: &'static str, t: &Tensor) -> Result<Tensor> {
    let Some(b) = t.device_buffer() else {
        return Ok(t.clone());
    };
    soft_placed(op, b.device, t.dtype())?;
    to_host(op, t)
}

/// `t`'s values as `f64` for a host kernel or check of `op`, which has no
/// GPU kernel: a GPU tensor is copied to the host under soft device
/// placement ([`host_input`]; an error naming `op` without it). The
/// matrix decompositions and solves read their inputs so, and give their
/// results back on `t`'s device.
pub(crate) fn host_f64s(op: &'static str, t: &Tensor) -> Result<Vec<f64>> {
    host_input(op, t)?.f64_values(op)
}

/// Whether `op`, which has no kernel for `device`, may run on the CPU for
/// inputs there: `Ok` under soft device placement
/// ([`crate::set_soft_device_placement`]; logged the first time `op` runs
/// so), else the error of an op with no kernel there.
pub(crate) fn soft_placed(op: &'static str, device: Device, dtype: DType) -> Result<()> {
    if !crate::tensor::device::soft_device_placement() {
        return Err(no_kernel(op, device, dtype));
    }
    static LOGGED: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    if let Ok(mut seen) = LOGGED.lock()
        && !seen.contains(&op)
    {
        seen.push(op);
        log::warn!(
            "{op} has no kernel for {dtype} tensors on {device}: it runs on the CPU, its inputs copied there and its outputs back (soft device placement)"
        );
    }
    Ok(())
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

/// The device of `inputs`' GPU tensors: `None` when every input is on the
/// CPU (the op runs its CPU kernel), `Some(device)` when every input is on
/// that device, an error naming `op` when they are on two.
#[inline]
pub(crate) fn placement(op: &'static str, inputs: &[&Tensor]) -> Result<Option<Device>> {
    if inputs.iter().all(|t| t.device_buffer().is_none()) {
        return Ok(None);
    }
    let first = inputs[0].device();
    for t in &inputs[1..] {
        let d = t.device();
        if d != first {
            return Err(Error::DeviceMismatch { op, lhs: first, rhs: d });
        }
    }
    Ok(Some(first))
}

/// How an op with a GPU kernel runs on its inputs' device (the ops call
/// it through `dispatch::device::offload`, which hides the interpreters
/// from the host code of an emulated GPU; a kernel whose host code is
/// kernels alone may call it directly): `None` when
/// every input is on the CPU (the caller runs its CPU kernel); otherwise
/// `cuda(device)` on a GPU, or `host(host copies)` uploaded back on an
/// emulated one; an error when the inputs are on two devices. Where
/// `cuda` finds it has no kernel for the inputs (a dtype or attribute it
/// lacks), `host` runs on a GPU too under soft device placement.
#[inline]
pub(crate) fn offload_in(
    op: &'static str,
    inputs: &[&Tensor],
    cuda: impl FnOnce(Device) -> Result<Tensor>,
    host: impl FnOnce(&[Tensor]) -> Result<Tensor>,
) -> Option<Result<Tensor>> {
    let r = offload_n_in(op, inputs, |d| cuda(d).map(|t| vec![t]), |h| host(h).map(|t| vec![t]))?;
    Some(r.map(|mut v| v.swap_remove(0)))
}

/// [`offload`] for an op of several outputs.
pub(crate) fn offload_n_in(
    op: &'static str,
    inputs: &[&Tensor],
    cuda: impl FnOnce(Device) -> Result<Vec<Tensor>>,
    host: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Option<Result<Vec<Tensor>>> {
    let device = match placement(op, inputs).transpose()? {
        Ok(d) => d,
        Err(e) => return Some(Err(e)),
    };
    let mut host = Some(host);
    let mut host = |h: &[Tensor]| host.take().expect("offload runs its host kernel once")(h);
    if is_emulated(inputs) {
        return Some(emulate(op, inputs, device, &mut host));
    }
    // a GPU kernel that turns out to have no case for these dtypes or
    // attributes: the host's, under soft device placement
    Some(match cuda(device) {
        Err(e) if is_no_kernel(&e) && crate::tensor::device::soft_device_placement() => {
            soft_placed(op, device, inputs[0].dtype()).and_then(|()| emulate(op, inputs, device, &mut host))
        }
        r => r,
    })
}

/// Whether the device tensors among `inputs` are on an emulated GPU.
fn is_emulated(inputs: &[&Tensor]) -> bool {
    inputs
        .iter()
        .find_map(|t| t.device_buffer())
        .is_some_and(|b| matches!(b.mem, Mem::Host(_)))
}

/// [`offload_n_in`] for an op with no GPU kernel: `None` when every input
/// is on the CPU; otherwise `host` on host copies, its outputs moved to the
/// inputs' device, where soft placement allows it ([`soft_placed`]).
pub(crate) fn hosted_n_in(
    op: &'static str,
    inputs: &[&Tensor],
    host: &mut dyn FnMut(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Option<Result<Vec<Tensor>>> {
    let device = match placement(op, inputs).transpose()? {
        Ok(d) => d,
        Err(e) => return Some(Err(e)),
    };
    Some(soft_placed(op, device, inputs[0].dtype()).and_then(|()| emulate(op, inputs, device, host)))
}

/// Runs `host` on host copies of `inputs` and moves its outputs to `device`.
/// (`host` is a trait object here and in [`hosted_n_in`], and [`hosted`]
/// hands its kernel over as one: every elementwise map and zip, reduction
/// and product starts with `hosted`, and generic over the kernel, these
/// bodies were compiled some 400 times, a twentieth of the library's code.)
#[inline(never)]
fn emulate(
    op: &'static str,
    inputs: &[&Tensor],
    device: Device,
    host: &mut dyn FnMut(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<Vec<Tensor>> {
    let copies = inputs.iter().map(|t| to_host(op, t)).collect::<Result<Vec<_>>>()?;
    let outs = host(&copies)?;
    outs.iter().map(|t| upload(op, t, device)).collect()
}
