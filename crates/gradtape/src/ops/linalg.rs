//! Matrix products.

use super::{bind_jvp, grads, sum_terms};
use crate::autodiff::tape::vjp;
use crate::error::Result;
use crate::kernels::cpu::matmul::matmul;
use crate::tensor::Tensor;

impl Tensor {
    /// Matrix product of the last two dims, batch dims broadcasting.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let i = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0], &[2, 2])?;
    /// assert_eq!(a.matmul(&i)?.to_vec::<f32>()?, a.to_vec::<f32>()?);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.matmul_with(rhs, false, false)
    }

    /// `op(a) @ op(b)`, `op` transposing the last two dims when its flag is
    /// set (no copy is made either way).
    ///
    /// Rule, for `C = op(A) op(B)` and cotangent `G`:
    /// `A B  -> (G Bᵀ, Aᵀ G)`, `A Bᵀ -> (G B, Gᵀ A)`,
    /// `Aᵀ B -> (B Gᵀ, A G)`, `Aᵀ Bᵀ -> (Bᵀ Gᵀ, Gᵀ Aᵀ)`;
    /// each then summed back over broadcast batch dims.
    pub fn matmul_with(&self, rhs: &Tensor, ta: bool, tb: bool) -> Result<Tensor> {
        let y = matmul(self, rhs, ta, tb)?;
        let (a, b) = (self.clone(), rhs.clone());
        Ok(bind_jvp(
            "MatMul",
            &[self, rhs],
            y,
            move |_| {
                vjp(move |g, needs| {
                    let g = &g[0];
                    let ga = needs[0]
                        .then(|| {
                            match (ta, tb) {
                                (false, false) => g.matmul_with(&b, false, true),
                                (false, true) => g.matmul_with(&b, false, false),
                                (true, false) => b.matmul_with(g, false, true),
                                (true, true) => b.matmul_with(g, true, true),
                            }?
                            .sum_to_shape(a.shape())
                        })
                        .transpose()?;
                    let gb = needs[1]
                        .then(|| {
                            match (ta, tb) {
                                (false, false) => a.matmul_with(g, true, false),
                                (false, true) => g.matmul_with(&a, true, false),
                                (true, false) => a.matmul_with(g, false, false),
                                (true, true) => g.matmul_with(&a, true, true),
                            }?
                            .sum_to_shape(b.shape())
                        })
                        .transpose()?;
                    Ok(grads![ga, gb])
                })
            },
            |t, _| {
                sum_terms([
                    t[0].as_ref().map(|da| da.matmul_with(rhs, ta, tb)).transpose(),
                    t[1].as_ref().map(|db| self.matmul_with(db, ta, tb)).transpose(),
                ])
            },
        ))
    }
}
