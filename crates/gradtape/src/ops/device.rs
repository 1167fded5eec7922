//! Moving tensors between devices ([`Tensor::to`]).

use std::fmt;
use std::sync::Arc;

use crate::dispatch::{bind, bind_untraced, listens, vjp, Kind, Operands};
use crate::error::Result;
use crate::kernels::gpu;
use crate::ops::desc::{DynOp, Op, Outputs};
use crate::ops::grads;
use crate::tensor::{Device, Tensor};

impl Tensor {
    /// This tensor on `device`: itself (the same tensor, same id) when it
    /// is there already, else a copy. Differentiable: the gradient goes
    /// back to the source's device.
    ///
    /// On a machine without a GPU (or a build without the `cuda` feature)
    /// moving to `Device::Cuda(n)` is an error saying so, never a panic.
    ///
    /// ```
    /// use gradtape::{Device, Tensor};
    /// let x = Tensor::vector(&[1.0f32, 2.0]);
    /// assert_eq!(x.to(Device::Cpu)?.id(), x.id());
    /// match x.to(Device::Cuda(0)) {
    ///     Ok(g) => assert_eq!(g.device(), Device::Cuda(0)),
    ///     Err(e) => println!("no GPU here: {e}"),
    /// }
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn to(&self, device: Device) -> Result<Tensor> {
        const OP: &str = "to";
        let from = self.device();
        if from == device {
            return Ok(self.clone());
        }
        if listens(Kind::Trace) {
            // a constant (made inside the function from data) moves as a
            // constant of the graph; a value the graph computes cannot
            if !crate::tensor::observe::unreadable(self) {
                return gpu::to_device(OP, self, device);
            }
            // a value the graph computes: the copy is a node of it, whose
            // traced output stands for the values (zeros: never read)
            let zeros = Tensor::filled(OP, self.shape(), 0.0, self.dtype())?;
            let y = gpu::upload(OP, &zeros, device)?;
            return Ok(bind(Op::Dyn(Arc::new(ToDevice(device))), &[self], y, move |_| {
                vjp(move |g, _| Ok(grads![Some(g[0].to(from)?)]))
            }));
        }
        self.expect_readable(OP)?;
        let y = gpu::to_device(OP, self, device)?;
        let mut make = move || vjp(move |g, _| Ok(grads![Some(g[0].to(from)?)]));
        bind_untraced(
            OP,
            Operands::Tensors(&[self]),
            std::slice::from_ref(&y),
            &mut make,
            Some(&|t, _| crate::ops::only(t)?.to(device)),
        );
        Ok(y)
    }

    /// This tensor on the CPU ([`to(Device::Cpu)`](Self::to)).
    pub fn cpu(&self) -> Result<Tensor> {
        self.to(Device::Cpu)
    }
}

/// A copy to another device as a node of a traced graph (of a value the
/// graph computes: a dropout's mask drawn on the host at each run, moved to
/// the GPU its input is on).
struct ToDevice(Device);

impl DynOp for ToDevice {
    fn name(&self) -> &'static str {
        "ToDevice"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        Ok(smallvec::smallvec![gpu::to_device("to", &inputs[0], self.0)?])
    }
    fn stateful(&self) -> bool {
        false
    }
    fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}]", self.0)
    }
}
