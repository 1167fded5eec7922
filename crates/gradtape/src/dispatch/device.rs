//! Device placement (`kernels::gpu::placement`): the one check every op with inputs makes before its
//! kernel runs. Ops run where their inputs live; inputs on two devices are
//! an [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) naming the op and both devices (no copy is
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
use crate::error::Result;
use crate::kernels::gpu;
use crate::tensor::{Device, Tensor};

/// How an op with a GPU kernel runs on its inputs' device: `None` when
/// every input is on the CPU (the caller runs its CPU kernel); otherwise
/// `cuda(device)` on a GPU, or `host(host copies)` uploaded back on an
/// emulated one, with the interpreters paused (the host code is the op's
/// own CPU code: nothing in it is recorded); an error when the inputs are
/// on two devices. (`kernels::gpu::offload_n_in` does the work.)
///
/// The work is compiled once ([`offload_n`]'s body, through `&mut dyn`);
/// only the two closures are the caller's own code.
#[inline]
pub(crate) fn offload(
    op: &'static str,
    inputs: &[&Tensor],
    cuda: impl FnOnce(Device) -> Result<Tensor>,
    host: impl FnOnce(&[Tensor]) -> Result<Tensor>,
) -> Option<Result<Tensor>> {
    let one = |t: Tensor| vec![t];
    let r = offload_n(op, inputs, |d| cuda(d).map(one), |h| host(h).map(one))?;
    Some(r.map(|mut v| v.swap_remove(0)))
}

/// [`offload`] for an op of two outputs, as a pair: the usual path (every
/// input on the CPU) builds no list of them, which a traced step would
/// allocate at every call.
#[inline]
pub(crate) fn offload_pair(
    op: &'static str,
    inputs: &[&Tensor],
    cuda: impl FnOnce(Device) -> Result<(Tensor, Tensor)>,
    host: impl FnOnce(&[Tensor]) -> Result<(Tensor, Tensor)>,
) -> Option<Result<(Tensor, Tensor)>> {
    let two = |(a, b): (Tensor, Tensor)| vec![a, b];
    let r = offload_n(op, inputs, |d| cuda(d).map(two), |h| host(h).map(two))?;
    Some(r.map(|mut v| {
        let b = v.pop().expect("two outputs");
        (v.pop().expect("two outputs"), b)
    }))
}

/// [`offload`] for an op of several outputs.
#[inline]
pub(crate) fn offload_n(
    op: &'static str,
    inputs: &[&Tensor],
    cuda: impl FnOnce(Device) -> Result<Vec<Tensor>>,
    host: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Option<Result<Vec<Tensor>>> {
    let (mut cuda, mut host) = (Some(cuda), Some(host));
    offload_n_dyn(
        op,
        inputs,
        &mut |d| cuda.take().expect("offload_n runs it once")(d),
        &mut |h| host.take().expect("offload_n runs it once")(h),
    )
}

#[inline(never)]
fn offload_n_dyn(
    op: &'static str,
    inputs: &[&Tensor],
    cuda: &mut dyn FnMut(Device) -> Result<Vec<Tensor>>,
    host: &mut dyn FnMut(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Option<Result<Vec<Tensor>>> {
    gpu::offload_n_in(op, inputs, cuda, |h| hidden(|| host(h)))
}

/// An op with no GPU kernel, on GPU inputs: `None` when every input is on
/// the CPU; else `host` (the op itself, on host copies, with every
/// interpreter paused) under soft device placement
/// (`crate::set_soft_device_placement`), its output copied back to the
/// inputs' device; an error naming the op without it. The caller binds
/// the output as it binds its own.
pub(crate) fn hosted(
    op: &'static str,
    inputs: &[&Tensor],
    host: impl FnOnce(&[Tensor]) -> Result<Tensor>,
) -> Option<Result<Tensor>> {
    gpu::hosted(op, inputs, |h| hidden(|| host(h)))
}

/// [`hosted`] for an op of two outputs: on a GPU, `host` on host
/// copies under soft device placement (`crate::set_soft_device_placement`),
/// its outputs copied back; an error naming the op without it.
pub(crate) fn hosted_pair(
    op: &'static str,
    inputs: &[&Tensor],
    host: impl FnOnce(&[Tensor]) -> Result<(Tensor, Tensor)>,
) -> Option<Result<(Tensor, Tensor)>> {
    let mut host = Some(host);
    let r = gpu::hosted_n_in(op, inputs, &mut |h| {
        let host = host.take().expect("hosted_pair runs its kernel once");
        hidden(|| host(h)).map(|(a, b)| vec![a, b])
    })?;
    Some(r.map(|mut v| {
        let b = v.pop().expect("two outputs");
        (v.pop().expect("two outputs"), b)
    }))
}

/// Runs `f` with every interpreter paused.
fn hidden<T>(f: impl FnOnce() -> T) -> T {
    paused(Kind::Trace, || paused(Kind::Tape, || paused(Kind::Forward, f)))
}
