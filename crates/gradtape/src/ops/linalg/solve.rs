//! Linear solves and the inverse (f32/f64, any leading batch dims):
//! triangular_solve, solve, inverse.
//!
//! The kernels (`kernels/cpu/decomp.rs`: triangular substitution, LU with
//! partial pivoting) work in f64 on one matrix at a time. The rules are
//! written with differentiable public ops (the solves again, matmul, a
//! constant mask), so second derivatives work.

use super::super::desc::LinalgOp;
use super::super::{bind, grads};
use super::decomp::{broadcast_pair, from_f64s, host_f64s, square};
use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::decomp;
use crate::tensor::{alloc, Tensor};

impl Tensor {
    /// Solves `op(T) X = B` for `X`, `T` the lower (`lower`) or upper
    /// triangle of `self` (`[..., n, n]`; the other triangle is not read),
    /// `op` the transpose when `adjoint`. `B` is `[..., n, m]`; batch dims
    /// broadcast. A zero on the diagonal gives infinities (no error), as in
    /// TensorFlow.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let l = Tensor::from_vec(vec![2.0f64, 0.0, 1.0, 2.0], &[2, 2])?;
    /// let b = Tensor::from_vec(vec![2.0f64, 5.0], &[2, 1])?;
    /// assert_eq!(l.triangular_solve(&b, true, false)?.to_vec::<f64>()?, vec![1.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn triangular_solve(&self, rhs: &Tensor, lower: bool, adjoint: bool) -> Result<Tensor> {
        let (a, b) = broadcast_pair("triangular_solve", self, rhs)?;
        let (nb, n) = square("triangular_solve", &a)?;
        let m = b.shape()[b.rank() - 1];
        let (av, mut bv) = (host_f64s("triangular_solve", &a)?, host_f64s("triangular_solve", &b)?);
        for i in 0..super::decomp::busy(nb, n) {
            decomp::triangular_solve(
                &av[i * n * n..(i + 1) * n * n],
                &mut bv[i * n * m..(i + 1) * n * m],
                n,
                m,
                lower,
                adjoint,
            );
        }
        let y = from_f64s(bv, b.shape(), b.dtype(), b.device())?;
        let saved = a.clone();
        Ok(bind(
            LinalgOp::TriangularSolve { lower, adjoint },
            &[&a, &b],
            y,
            move |c| {
                let (a, c) = (saved, c.clone());
                vjp(move |g, needs| {
                    let gb = a.triangular_solve(&g[0], lower, !adjoint)?;
                    let ga = needs[0]
                        .then(|| {
                            let full = if adjoint {
                                c.matmul_with(&gb, false, true)?
                            } else {
                                gb.matmul_with(&c, false, true)?
                            };
                            // (selected, not multiplied by a mask: the triangle
                            // the solve never read gets 0 even where `full`
                            // overflowed, as TensorFlow's `band_part`)
                            let (below, above) = if lower { (-1, 0) } else { (0, -1) };
                            full.neg()?
                                .band_part(below, above)
                                .map_err(|e| e.for_op("triangular_solve"))
                        })
                        .transpose()?;
                    Ok(grads![ga, Some(gb)])
                })
            },
        ))
    }

    /// Solves `A X = B` given `self`, the lower Cholesky factor `L` of `A =
    /// L Lᵀ` (`[..., n, n]`, from [`Tensor::cholesky`]; the upper triangle
    /// is not read), as TensorFlow's `tf.linalg.cholesky_solve(chol, rhs)`:
    /// two triangular solves, `L Y = B` then `Lᵀ X = Y`. `B` is `[..., n,
    /// m]`; batch dims broadcast. Differentiable in both (through the two
    /// solves).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// // A = [[4, 2], [2, 2]] = L Lᵀ with L = [[2, 0], [1, 1]]
    /// let a = Tensor::from_vec(vec![4.0f64, 2.0, 2.0, 2.0], &[2, 2])?;
    /// let b = Tensor::from_vec(vec![6.0f64, 4.0], &[2, 1])?;
    /// let x = a.cholesky()?.cholesky_solve(&b)?;
    /// assert_eq!(x.to_vec::<f64>()?, vec![1.0, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn cholesky_solve(&self, rhs: &Tensor) -> Result<Tensor> {
        self.triangular_solve(rhs, true, false)
            .and_then(|y| self.triangular_solve(&y, true, true))
            .map_err(|e| e.for_op("cholesky_solve"))
    }

    /// Solves `A X = B` by LU with partial pivoting: `self` is `[..., n, n]`,
    /// `B` is `[..., n, m]` (batch dims broadcast). An error if a matrix is
    /// singular.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![0.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let b = Tensor::from_vec(vec![2.0f64, 7.0], &[2, 1])?;
    /// assert_eq!(a.solve(&b)?.to_vec::<f64>()?, vec![1.0, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn solve(&self, rhs: &Tensor) -> Result<Tensor> {
        self.solve_with(rhs, false)
    }

    /// Solves `op(A) X = B`, `op` the transpose when `adjoint`. See
    /// [`solve`](Self::solve). d/dB = `op(A)⁻ᵀ G`; d/dA = `-op(d/dB · Xᵀ)`.
    pub fn solve_with(&self, rhs: &Tensor, adjoint: bool) -> Result<Tensor> {
        let (a, b) = broadcast_pair("solve", self, rhs)?;
        let (nb, n) = square("solve", &a)?;
        let m = b.shape()[b.rank() - 1];
        let (av, mut bv) = (host_f64s("solve", &a)?, host_f64s("solve", &b)?);
        for i in 0..super::decomp::busy(nb, n) {
            let f = decomp::lu(&av[i * n * n..(i + 1) * n * n], n);
            if f.singular {
                return Err(singular("solve", i, self.shape()));
            }
            f.solve(&mut bv[i * n * m..(i + 1) * n * m], m, adjoint);
        }
        let y = from_f64s(bv, b.shape(), b.dtype(), b.device())?;
        let saved = a.clone();
        Ok(bind(LinalgOp::Solve { adjoint }, &[&a, &b], y, move |x| {
            let (a, x) = (saved, x.clone());
            vjp(move |g, needs| {
                let gb = a.solve_with(&g[0], !adjoint)?;
                let ga = needs[0]
                    .then(|| {
                        if adjoint {
                            x.matmul_with(&gb, false, true)?.neg()
                        } else {
                            gb.matmul_with(&x, false, true)?.neg()
                        }
                    })
                    .transpose()?;
                Ok(grads![ga, Some(gb)])
            })
        }))
    }

    /// The inverse of each matrix of `[..., n, n]` (LU with partial
    /// pivoting). An error if a matrix is singular. d/dA = `-A⁻ᵀ G A⁻ᵀ`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![2.0f64, 0.0, 0.0, 4.0], &[2, 2])?;
    /// assert_eq!(a.inverse()?.to_vec::<f64>()?, vec![0.5, 0.0, 0.0, 0.25]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn inverse(&self) -> Result<Tensor> {
        let (nb, n) = square("inverse", self)?;
        let v = host_f64s("inverse", self)?;
        let mut out = alloc::try_vec("inverse", v.len())?;
        for i in 0..super::decomp::busy(nb, n) {
            let f = decomp::lu(&v[i * n * n..(i + 1) * n * n], n);
            if f.singular {
                return Err(singular("inverse", i, self.shape()));
            }
            let mut e = vec![0.0; n * n];
            for k in 0..n {
                e[k * n + k] = 1.0;
            }
            f.solve(&mut e, n, false);
            out.extend(e);
        }
        let y = from_f64s(out, self.shape(), self.dtype(), self.device())?;
        Ok(bind(LinalgOp::Inverse, &[self], y, |y| {
            let y = y.clone();
            vjp(move |g, _| {
                Ok(grads![Some(
                    y.matmul_with(&g[0], true, false)?.matmul_with(&y, false, true)?.neg()?
                )])
            })
        }))
    }
}

fn singular(op: &'static str, i: usize, shape: &[usize]) -> Error {
    Error::invalid(op, format!("matrix {i} of the batch (shape {shape:?}) is singular"))
}
