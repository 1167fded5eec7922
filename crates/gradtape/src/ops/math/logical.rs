//! Logical ops on bool tensors, broadcasting: `logical_and`, `logical_or`,
//! `logical_xor`, `logical_not` (not differentiable: bound for traces only).

use crate::error::Result;
use crate::kernels::cpu::elementwise::{map, zip};
use crate::ops::desc::{Binary, Unary};
use crate::ops::{bind_nondiff, unsupported};
use crate::tensor::{DType, Tensor};

fn expect_bool(op: &'static str, t: &Tensor) -> Result<()> {
    if t.dtype() == DType::Bool {
        Ok(())
    } else {
        Err(unsupported(op, t.dtype(), "bool"))
    }
}

impl Tensor {
    /// `a && b` elementwise on bool tensors, broadcasting.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let r = Tensor::vector(&[true, false]).logical_and(&Tensor::scalar(true))?;
    /// assert_eq!(r.to_vec::<bool>()?, vec![true, false]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn logical_and(&self, rhs: &Tensor) -> Result<Tensor> {
        self.logical("logical_and", Binary::LogicalAnd, rhs, |x, y| x && y)
    }

    /// `a || b` elementwise on bool tensors, broadcasting.
    pub fn logical_or(&self, rhs: &Tensor) -> Result<Tensor> {
        self.logical("logical_or", Binary::LogicalOr, rhs, |x, y| x || y)
    }

    /// `a != b` (exclusive or) elementwise on bool tensors, broadcasting.
    pub fn logical_xor(&self, rhs: &Tensor) -> Result<Tensor> {
        self.logical("logical_xor", Binary::LogicalXor, rhs, |x, y| x != y)
    }

    /// `!a` elementwise on a bool tensor.
    ///
    /// ```
    /// let r = gradtape::Tensor::vector(&[true, false]).logical_not()?;
    /// assert_eq!(r.to_vec::<bool>()?, vec![false, true]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn logical_not(&self) -> Result<Tensor> {
        expect_bool("logical_not", self)?;
        let on_gpu = crate::dispatch::device::offload(
            "logical_not",
            &[self],
            |_| crate::kernels::cuda::map_bool("logical_not", self, &super::cuda_expr::logical_not_expr("v")),
            |h| map::<bool, bool>("logical_not", &h[0], |v| !v),
        );
        let y = match on_gpu {
            Some(r) => r?,
            None => map::<bool, bool>("logical_not", self, |v| !v)?,
        };
        Ok(bind_nondiff(Unary::LogicalNot, &[self], y))
    }

    // (`f` a closure type, not a `fn` pointer: the kernel's loop is then
    // compiled per op, with `f` inlined, not an indirect call per element)
    fn logical(
        &self,
        op: &'static str,
        desc: Binary,
        rhs: &Tensor,
        f: impl Fn(bool, bool) -> bool + Sync + Copy,
    ) -> Result<Tensor> {
        expect_bool(op, self)?;
        expect_bool(op, rhs)?;
        let on_gpu = crate::dispatch::device::offload(
            op,
            &[self, rhs],
            |_| {
                let shape = crate::tensor::layout::broadcast_shapes(op, self.shape(), rhs.shape())?;
                let expr = super::cuda_expr::logical_expr(&desc, "a", "b")
                    .ok_or_else(|| crate::kernels::gpu::no_kernel(op, self.device(), self.dtype()))?;
                crate::kernels::cuda::binary(op, self, rhs, &shape, "", &expr, crate::tensor::DType::Bool)
            },
            |h| zip::<bool, bool, bool>(op, &h[0], &h[1], f),
        );
        let y = match on_gpu {
            Some(r) => r?,
            None => zip::<bool, bool, bool>(op, self, rhs, f)?,
        };
        Ok(bind_nondiff(desc, &[self, rhs], y))
    }
}
