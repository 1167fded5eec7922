//! Matrix products.

use super::super::desc::Op;
use super::super::{bind_jvp, grads, sum_terms};
use crate::dispatch::vjp;
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
    /// Eagerly, with nothing recording the rule's own ops, the two
    /// products of an `f32` rule run as one job of two tasks, each whole on
    /// one thread, where that was measured to pay (`matmul_pair`): the
    /// same bits as one after the other, without a fork and join per
    /// product or every thread packing the shared operand.
    pub fn matmul_with(&self, rhs: &Tensor, ta: bool, tb: bool) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::super::complex::matmul_with(self, rhs, ta, tb);
        }
        // (one thread-local bit first: the per-op path asks the trace
        // nothing when no trace listens)
        let placeholder = crate::dispatch::listens(crate::dispatch::Kind::Trace)
            && self.dtype().is_float()
            && self.device() == rhs.device()
            && (crate::tensor::observe::placeholder(self) || crate::tensor::observe::placeholder(rhs));
        let y = if placeholder {
            // a trace that wants only its graph never reads this product
            PLACEHOLDERS.with(|c| c.set(c.get() + 1));
            let shape = crate::kernels::cpu::matmul::matmul_shape(self, rhs, ta, tb)?;
            crate::kernels::gpu::filled("matmul", &shape, 0.0, self.dtype(), self.device())?
        } else {
            match crate::dispatch::device::offload(
                "matmul",
                &[self, rhs],
                |_| {
                    let shape = crate::kernels::cpu::matmul::matmul_shape(self, rhs, ta, tb)?;
                    crate::kernels::cuda::matmul("matmul", self, rhs, ta, tb, &shape)
                },
                |h| matmul(&h[0], &h[1], ta, tb),
            ) {
                Some(r) => r?,
                None => matmul(self, rhs, ta, tb)?,
            }
        };
        let (a, b) = (self.clone(), rhs.clone());
        Ok(bind_jvp(
            Op::MatMul {
                transpose_a: ta,
                transpose_b: tb,
            },
            &[self, rhs],
            y,
            move |_| {
                vjp(move |g, needs| {
                    let g = &g[0];
                    let da = || match (ta, tb) {
                        (false, false) => mm(g, false, &b, true),
                        (false, true) => mm(g, false, &b, false),
                        (true, false) => mm(&b, false, g, true),
                        (true, true) => mm(&b, true, g, true),
                    };
                    let db = || match (ta, tb) {
                        (false, false) => mm(&a, true, g, false),
                        (false, true) => mm(g, true, &a, false),
                        (true, false) => mm(&a, false, g, false),
                        (true, true) => mm(g, true, &a, true),
                    };
                    let (ga, gb) = if needs[0] && needs[1] && super::matmul_pair::worth(&a, &b, g, ta) {
                        // both products at once, one per thread (same bits)
                        let (ga, gb) = super::matmul_pair::both(da, db);
                        (Some(ga?.sum_to_shape(a.shape())?), Some(gb?.sum_to_shape(b.shape())?))
                    } else {
                        let ga = needs[0].then(|| da()?.sum_to_shape(a.shape())).transpose()?;
                        (ga, needs[1].then(|| db()?.sum_to_shape(b.shape())).transpose()?)
                    };
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

/// `op(x) @ op(y)` for a rule: when one operand is a matrix and the other
/// has batch dims (a batch sharing one weight), the batch dims are folded
/// into the rows of one large product instead of one small product per
/// batch entry.
fn mm(x: &Tensor, tx: bool, y: &Tensor, ty: bool) -> Result<Tensor> {
    if y.rank() == 2 && x.rank() > 2 {
        let x = if tx { x.transpose()? } else { x.clone() };
        return fold_rows(&x, y, ty);
    }
    if x.rank() == 2 && y.rank() > 2 {
        // op(x) op(y) = (op(y)ᵀ op(x)ᵀ)ᵀ
        let yt = if ty { y.clone() } else { y.transpose()? };
        return fold_rows(&yt, x, !tx)?.transpose();
    }
    x.matmul_with(y, tx, ty)
}

/// `x @ op(w)` for a matrix `w`, with all leading dims of `x` as rows (also
/// vmap's batching rule of a product with one operand shared).
pub(crate) fn fold_rows(x: &Tensor, w: &Tensor, tw: bool) -> Result<Tensor> {
    let s = x.shape();
    let r = s.len();
    let rows: usize = s[..r - 1].iter().product();
    let out = x.reshape(&[rows, s[r - 1]])?.matmul_with(w, false, tw)?;
    let mut shape = s[..r - 1].to_vec();
    shape.push(out.shape()[1]);
    out.reshape(&shape)
}

thread_local! {
    /// Products made placeholders on this thread (for the tests).
    static PLACEHOLDERS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many products on this thread were placeholders of a trace that
/// wants only its graph, not computed.
pub(crate) fn placeholders() -> usize {
    PLACEHOLDERS.with(std::cell::Cell::get)
}
