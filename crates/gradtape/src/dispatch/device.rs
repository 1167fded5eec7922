//! Device placement: the one check every op with inputs makes before its
//! kernel runs. Ops run where their inputs live; inputs on two devices are
//! an [`Error::DeviceMismatch`] naming the op and both devices (no copy is
//! made behind the caller's back, as TensorFlow and PyTorch refuse it).
//!
//! An op with a GPU kernel runs through [`offload`]: on the inputs' device
//! when they are all on one GPU, through the CUDA kernel there, or through
//! the op's own CPU code on host copies when that GPU is emulated
//! (`tensor::device`).
//!
//! The check costs one read per input on the usual path (every input on
//! the CPU): a host tensor's data is never a device buffer.

use super::{paused, Kind};
use crate::error::{Error, Result};
use crate::kernels::gpu;
use crate::tensor::{Device, Mem, Tensor};

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

/// How an op with a GPU kernel runs on its inputs' device: `None` when
/// every input is on the CPU (the caller runs its CPU kernel); otherwise
/// `cuda(device)` on a GPU, or `host(host copies)` uploaded back on an
/// emulated one; an error when the inputs are on two devices.
#[inline]
pub(crate) fn offload(
    op: &'static str,
    inputs: &[&Tensor],
    cuda: impl FnOnce(Device) -> Result<Tensor>,
    host: impl FnOnce(&[Tensor]) -> Result<Tensor>,
) -> Option<Result<Tensor>> {
    let device = match placement(op, inputs) {
        Ok(None) => return None,
        Ok(Some(d)) => d,
        Err(e) => return Some(Err(e)),
    };
    Some(if is_emulated(inputs) {
        emulate(op, inputs, device, |h| Ok(vec![host(h)?])).map(|mut v| v.remove(0))
    } else {
        cuda(device)
    })
}

/// [`offload`] for an op of several outputs.
pub(crate) fn offload_n(
    op: &'static str,
    inputs: &[&Tensor],
    cuda: impl FnOnce(Device) -> Result<Vec<Tensor>>,
    host: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Option<Result<Vec<Tensor>>> {
    let device = match placement(op, inputs) {
        Ok(None) => return None,
        Ok(Some(d)) => d,
        Err(e) => return Some(Err(e)),
    };
    Some(if is_emulated(inputs) {
        emulate(op, inputs, device, host)
    } else {
        cuda(device)
    })
}

/// Whether the device tensors among `inputs` are on an emulated GPU.
fn is_emulated(inputs: &[&Tensor]) -> bool {
    inputs
        .iter()
        .find_map(|t| t.device_buffer())
        .is_some_and(|b| matches!(b.mem, Mem::Host(_)))
}

/// Runs `host` on host copies of `inputs` and moves its outputs to `device`.
fn emulate(
    op: &'static str,
    inputs: &[&Tensor],
    device: Device,
    host: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<Vec<Tensor>> {
    let copies = inputs.iter().map(|t| gpu::to_host(op, t)).collect::<Result<Vec<_>>>()?;
    let outs = paused(Kind::Trace, || {
        paused(Kind::Tape, || paused(Kind::Forward, || host(&copies)))
    })?;
    outs.iter().map(|t| gpu::upload(op, t, device)).collect()
}
