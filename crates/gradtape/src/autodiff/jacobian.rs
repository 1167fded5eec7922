//! Options of the tape's Jacobians: [`JacobianOptions`].
//!
//! The Jacobians themselves are computed in the function layer
//! (`function/jacobian.rs`): vectorized, they are a use of
//! [`vmap`](crate::vmap())'s batching interpreter on the traced backward
//! pass, and vmap sits above the tape.

use crate::autodiff::backprop::Unconnected;

/// Options of [`jacobian_with`](crate::GradientTape::jacobian_with) and
/// [`batch_jacobian_with`](crate::GradientTape::batch_jacobian_with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JacobianOptions {
    /// What unconnected sources get: `None`, or zeros of shape
    /// `target.shape ++ source.shape`.
    pub unconnected: Unconnected,
    /// All rows at once, the backward pass batched by vmap (default
    /// `true`); else one backward pass per row, which needs a persistent
    /// tape.
    pub vectorized: bool,
    /// Non-vectorized only: how many rows run at a time, across threads
    /// (`None`: as many as there are rows).
    pub parallel_iterations: Option<usize>,
}

impl Default for JacobianOptions {
    fn default() -> Self {
        JacobianOptions {
            unconnected: Unconnected::None,
            vectorized: true,
            parallel_iterations: None,
        }
    }
}

impl JacobianOptions {
    /// Chooses what unconnected sources get.
    pub fn unconnected(mut self, u: Unconnected) -> Self {
        self.unconnected = u;
        self
    }

    /// Chooses between all rows at once (vmap of the backward pass) and one
    /// pass per row.
    pub fn vectorized(mut self, v: bool) -> Self {
        self.vectorized = v;
        self
    }

    /// Bounds how many rows a non-vectorized Jacobian runs at a time.
    pub fn parallel_iterations(mut self, n: usize) -> Self {
        self.parallel_iterations = Some(n);
        self
    }
}
