//! Eigendecomposition of symmetric matrices, SVD, QR, LU and the matrix
//! exponential (f32/f64, any leading batch dims; kernels in f64 in
//! `kernels/cpu/eig.rs`).
//!
//! A decomposition has several outputs; each is bound as its own op with
//! the part of the gradient that its cotangent contributes (the gradients
//! are linear in the output cotangents, so the parts add up to the whole
//! rule, and an unused output costs its rule nothing). The rules are
//! TensorFlow's, written with differentiable ops (so they differentiate
//! again):
//!
//! - `eigh`: `Ā = V (diag(ē) + F ∘ (Vᵀ V̄)) Vᵀ`, `F_ij = 1 / (e_j - e_i)`,
//!   then folded onto the lower triangle (the only one read);
//! - `svd`: Townsend's formula with `F_ij = 1 / (s_j² - s_i²)` and the
//!   terms for the complements of `U` and `V`;
//! - `qr` (`m >= n`): Walter and Lehmann's formula, as TF's `_QrGrad`;
//! - `lu`: `Ā = Pᵀ L⁻ᵀ (tril₋₁(Lᵀ L̄) + triu(Ū Uᵀ)) U⁻ᵀ`;
//! - `matrix_exp`: the adjoint Fréchet derivative, read off the top right
//!   block of `exp([[Aᵀ, Ḡ], [0, Aᵀ]])`.
//!
//! Degenerate eigenvalues or singular values make `F` infinite: their
//! gradients are not defined (as in TensorFlow), and come out non-finite.
//! Eigenvectors and singular vectors are unique only up to sign; each is
//! signed so that its largest entry is positive.

use super::decomp::{busy, from_f64s, host_f64s};
use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::eig;
use crate::ops::desc::{DecompOp, Lazy, Op};
use crate::ops::{bind, expect_float, grads};
use crate::tensor::{DType, Tensor};

/// Checks a float `[..., m, n]` input; returns (batch count, m, n).
fn matrices(op: &'static str, a: &Tensor) -> Result<(usize, usize, usize)> {
    expect_float(op, a)?;
    let s = a.shape();
    let r = s.len();
    if r < 2 {
        return Err(Error::invalid(
            op,
            format!("needs matrices [..., m, n], got shape {s:?}"),
        ));
    }
    Ok((s[..r - 2].iter().product(), s[r - 2], s[r - 1]))
}

fn square(op: &'static str, a: &Tensor) -> Result<(usize, usize)> {
    let (b, m, n) = matrices(op, a)?;
    if m != n {
        return Err(Error::invalid(
            op,
            format!("needs square matrices [..., n, n], got shape {:?}", a.shape()),
        ));
    }
    Ok((b, n))
}

/// The batch shape of `a` followed by `tail`.
fn with_batch(a: &Tensor, tail: &[usize]) -> Vec<usize> {
    let mut s = a.shape()[..a.rank() - 2].to_vec();
    s.extend_from_slice(tail);
    s
}

/// `F_ij = 1 / (d_j - d_i)` off the diagonal, 0 on it (`d: [..., k]`);
/// the diagonal is kept away from `1/0` so that gradients of `F` stay
/// finite there.
fn inverse_gaps(d: &Tensor) -> Result<Tensor> {
    let k = d.shape()[d.rank() - 1];
    let gaps = d.expand_dims(-2)?.sub(&d.expand_dims(-1)?)?;
    let eye = Tensor::try_eye(k, DType::Bool)?.to(d.device())?;
    let safe = Tensor::where_(&eye, &gaps.scalar_like(1.0)?, &gaps)?;
    Tensor::where_(&eye, &gaps.scalar_like(0.0)?, &safe.reciprocal()?)
}

/// The bound output `k` of a decomposition of `a`.
fn output(a: &Tensor, op: DecompOp, y: Tensor, rule: impl FnOnce(&Tensor) -> crate::dispatch::VjpFn) -> Tensor {
    bind(Lazy(op.name(), move || Op::Decomp(op)), &[a], y, rule)
}

impl Tensor {
    /// Eigenvalues (ascending, `[..., n]`) and eigenvectors (the columns of
    /// `[..., n, n]`) of symmetric matrices; only the lower triangle is read
    /// (`tf.linalg.eigh`). Differentiable (see the module docs).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![2.0f64, 1.0, 1.0, 2.0], &[2, 2])?;
    /// let (e, v) = a.eigh()?;
    /// assert!((e.to_vec::<f64>()?[0] - 1.0).abs() < 1e-14 && (e.to_vec::<f64>()?[1] - 3.0).abs() < 1e-14);
    /// assert_eq!(v.shape(), &[2, 2]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn eigh(&self) -> Result<(Tensor, Tensor)> {
        const OP: &str = "eigh";
        let (nb, n) = square(OP, self)?;
        let a = host_f64s(OP, self)?;
        let (mut es, mut vs) = (Vec::with_capacity(nb * n), Vec::with_capacity(nb * n * n));
        for b in 0..busy(nb, n) {
            let (e, v) = eig::eigh(&a[b * n * n..(b + 1) * n * n], n);
            es.extend(e);
            vs.extend(v);
        }
        let e = from_f64s(es, &with_batch(self, &[n]), self.dtype(), self.device())?;
        let v = from_f64s(vs, self.shape(), self.dtype(), self.device())?;
        let fold = |g: Tensor| -> Result<Tensor> {
            // onto the lower triangle: G + Gᵀ below, the diagonal once
            let s = g.add(&g.transpose()?)?;
            let half = s.diag_part()?.mul_scalar(0.5)?.diag()?;
            s.band_part(-1, 0)?.sub(&half)
        };
        let (e1, v1) = (e.clone(), v.clone());
        let eo = output(self, DecompOp::Eigh(0), e, move |_| {
            vjp(move |g, _| {
                let ga = v1.matmul(&g[0].diag()?)?.matmul_with(&v1, false, true)?;
                Ok(grads![Some(fold(ga)?)])
            })
        });
        let vo = output(self, DecompOp::Eigh(1), v, move |v| {
            let v = v.clone();
            vjp(move |g, _| {
                let inner = inverse_gaps(&e1)?.mul(&v.matmul_with(&g[0], true, false)?)?;
                let ga = v.matmul(&inner)?.matmul_with(&v, false, true)?;
                Ok(grads![Some(fold(ga)?)])
            })
        });
        Ok((eo, vo))
    }

    /// The thin singular value decomposition `A = U diag(s) Vᵀ` of
    /// `[..., m, n]` matrices: `s` (descending, `[..., k]`), `U`
    /// (`[..., m, k]`), `V` (`[..., n, k]`), `k = min(m, n)`
    /// (`tf.linalg.svd` with `full_matrices = false`; note the order `s, U,
    /// V`). Differentiable (see the module docs).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![3.0f64, 0.0, 0.0, -2.0], &[2, 2])?;
    /// let (s, _u, _v) = a.svd()?;
    /// assert_eq!(s.to_vec::<f64>()?, vec![3.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn svd(&self) -> Result<(Tensor, Tensor, Tensor)> {
        const OP: &str = "svd";
        let (nb, m, n) = matrices(OP, self)?;
        let k = m.min(n);
        let a = host_f64s(OP, self)?;
        let (mut ss, mut us, mut vs) = (Vec::new(), Vec::new(), Vec::new());
        // (k = 0: every output is empty, however many matrices)
        for b in 0..busy(nb, k) {
            let (s, u, v) = eig::svd(&a[b * m * n..(b + 1) * m * n], m, n);
            ss.extend(s);
            us.extend(u);
            vs.extend(v);
        }
        let dt = self.dtype();
        let s = from_f64s(ss, &with_batch(self, &[k]), dt, self.device())?;
        let u = from_f64s(us, &with_batch(self, &[m, k]), dt, self.device())?;
        let v = from_f64s(vs, &with_batch(self, &[n, k]), dt, self.device())?;
        let (s1, u1, v1) = (s.clone(), u.clone(), v.clone());
        let so = output(self, DecompOp::Svd(0), s.clone(), move |_| {
            vjp(move |g, _| Ok(grads![Some(u1.matmul(&g[0].diag()?)?.matmul_with(&v1, false, true)?)]))
        });
        // Ū's part: U (F ∘ (UᵀŪ - ŪᵀU)) S Vᵀ + (I - UUᵀ) Ū S⁻¹ Vᵀ
        let (s2, u2, v2) = (s.clone(), u.clone(), v.clone());
        let uo = output(self, DecompOp::Svd(1), u.clone(), move |_| {
            vjp(move |g, _| {
                let f = inverse_gaps(&s2.square()?)?;
                let utg = u2.matmul_with(&g[0], true, false)?;
                let j = f.mul(&utg.sub(&utg.transpose()?)?)?;
                let first = u2.matmul(&j)?.matmul(&s2.diag()?)?;
                let rest = g[0].sub(&u2.matmul(&utg)?)?.div(&s2.expand_dims(-2)?)?;
                Ok(grads![Some(first.add(&rest)?.matmul_with(&v2, false, true)?)])
            })
        });
        // V̄'s part: U S (F ∘ (VᵀV̄ - V̄ᵀV)) Vᵀ + U S⁻¹ V̄ᵀ (I - VVᵀ)
        let vo = output(self, DecompOp::Svd(2), v.clone(), move |_| {
            let s = s1;
            vjp(move |g, _| {
                let f = inverse_gaps(&s.square()?)?;
                let vtg = v.matmul_with(&g[0], true, false)?;
                let k = f.mul(&vtg.sub(&vtg.transpose()?)?)?;
                let first = s.diag()?.matmul(&k)?.matmul_with(&v, false, true)?;
                let rest = g[0].sub(&v.matmul(&vtg)?)?.div(&s.expand_dims(-2)?)?.transpose()?;
                Ok(grads![Some(u.matmul(&first.add(&rest)?)?)])
            })
        });
        Ok((so, uo, vo))
    }
}

impl Tensor {
    /// The thin QR decomposition `A = Q R` of `[..., m, n]` matrices: `Q`
    /// (`[..., m, k]`, orthonormal columns) and `R` (`[..., k, n]`, upper
    /// triangular), `k = min(m, n)` (`tf.linalg.qr`; `R`'s diagonal may be
    /// negative, as LAPACK's). Differentiable (a wide matrix, `m < n`, as
    /// TensorFlow's `qr_grad`: by splitting `A = [X | Y]`).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![3.0f64, 1.0, 4.0, 2.0], &[2, 2])?;
    /// let (q, r) = a.qr()?;
    /// let back = q.matmul(&r)?.to_vec::<f64>()?;
    /// assert!(back.iter().zip([3.0, 1.0, 4.0, 2.0]).all(|(x, y)| (x - y).abs() < 1e-14));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn qr(&self) -> Result<(Tensor, Tensor)> {
        const OP: &str = "qr";
        let (nb, m, n) = matrices(OP, self)?;
        let k = m.min(n);
        let a = host_f64s(OP, self)?;
        let (mut qs, mut rs) = (Vec::new(), Vec::new());
        for b in 0..busy(nb, k) {
            let (q, r) = eig::qr(&a[b * m * n..(b + 1) * m * n], m, n);
            qs.extend(q);
            rs.extend(r);
        }
        let q = from_f64s(qs, &with_batch(self, &[m, k]), self.dtype(), self.device())?;
        let r = from_f64s(rs, &with_batch(self, &[k, n]), self.dtype(), self.device())?;
        // x R⁻ᵀ
        let solve_rt = |x: &Tensor, r: &Tensor| -> Result<Tensor> {
            r.triangular_solve(&x.transpose()?, false, false)?.transpose()
        };
        // the square/tall rule, split by cotangent (each part linear in its
        // own): Q̄'s part Q tril(QᵀQ̄ - Q̄ᵀQ) R⁻ᵀ + (Q̄ - Q QᵀQ̄) R⁻ᵀ, and R̄'s
        // part Q (R̄ + tril(R R̄ᵀ - R̄ Rᵀ) R⁻ᵀ)
        let q_part = move |q: &Tensor, r: &Tensor, dq: &Tensor| -> Result<Tensor> {
            let qdq = q.matmul_with(dq, true, false)?;
            let low = qdq.sub(&qdq.transpose()?)?.band_part(-1, 0)?;
            let a = q.matmul(&solve_rt(&low, r)?)?;
            let b = solve_rt(&dq.sub(&q.matmul(&qdq)?)?, r)?;
            a.add(&b)
        };
        let r_part = move |q: &Tensor, r: &Tensor, dr: &Tensor| -> Result<Tensor> {
            let rdr = r.matmul_with(dr, false, true)?;
            let low = rdr.sub(&rdr.transpose()?)?.band_part(-1, 0)?;
            q.matmul(&dr.add(&solve_rt(&low, r)?)?)
        };
        // A wide matrix (m < n, as TF's qr_grad): A = [X | Y] with X the
        // first m columns, R = [U | V]; X = Q U is a square QR and Y = Q V,
        // so Ȳ = Q V̄, and X̄ is the square rule with Q̄ + Y V̄ᵀ and Ū. Here
        // R's cotangent [Ū | V̄] gives X̄ = (Q̄ part of Y V̄ᵀ) + (R̄ part of
        // Ū) and Ȳ; Q's cotangent gives X̄ = its Q̄ part and Ȳ = 0.
        let wide = m < n;
        let x = self.clone();
        let (q1, r1) = (q.clone(), r.clone());
        let qo = output(self, DecompOp::Qr(0), q.clone(), move |_| {
            vjp(move |g, _| {
                if !wide {
                    return Ok(grads![Some(q_part(&q1, &r1, &g[0])?)]);
                }
                let u = r1.narrow(-1, 0, m)?;
                let dx = q_part(&q1, &u, &g[0])?;
                let dy = Tensor::zeros_on(&with_batch(&x, &[m, n - m]), dx.dtype(), dx.device())?;
                Ok(grads![Some(Tensor::concat(&[&dx, &dy], -1)?)])
            })
        });
        let x = self.clone();
        let ro = output(self, DecompOp::Qr(1), r.clone(), move |_| {
            vjp(move |g, _| {
                if !wide {
                    return Ok(grads![Some(r_part(&q, &r, &g[0])?)]);
                }
                let u = r.narrow(-1, 0, m)?;
                let (du, dv) = (g[0].narrow(-1, 0, m)?, g[0].narrow(-1, m, n - m)?);
                let y = x.narrow(-1, m, n - m)?;
                let dx = q_part(&q, &u, &y.matmul_with(&dv, false, true)?)?.add(&r_part(&q, &u, &du)?)?;
                let dy = q.matmul(&dv)?;
                Ok(grads![Some(Tensor::concat(&[&dx, &dy], -1)?)])
            })
        });
        Ok((qo, ro))
    }

    /// The LU decomposition with partial pivoting of square matrices:
    /// `L` (unit lower triangular), `U` (upper triangular) and the row
    /// permutation `p` (`i64`, `[..., n]`) with `A[p] = L U`, i.e. row `i`
    /// of `L U` is row `p[i]` of `A`. Differentiable in `L` and `U` (for
    /// an invertible `A`).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let (l, u, p) = a.lu()?;
    /// assert_eq!(p.to_vec::<i64>()?, vec![1, 0]);
    /// assert_eq!(l.matmul(&u)?.to_vec::<f64>()?, vec![3.0, 4.0, 1.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn lu(&self) -> Result<(Tensor, Tensor, Tensor)> {
        const OP: &str = "lu";
        let (nb, n) = square(OP, self)?;
        let a = host_f64s(OP, self)?;
        let (mut ls, mut us, mut ps) = (Vec::new(), Vec::new(), Vec::new());
        for b in 0..busy(nb, n) {
            let f = crate::kernels::cpu::decomp::lu(&a[b * n * n..(b + 1) * n * n], n);
            for i in 0..n {
                for j in 0..n {
                    let x = f.lu[i * n + j];
                    ls.push(if i == j {
                        1.0
                    } else if j < i {
                        x
                    } else {
                        0.0
                    });
                    us.push(if j >= i { x } else { 0.0 });
                }
            }
            ps.extend(f.perm.iter().map(|&p| p as i64));
        }
        let l = from_f64s(ls, self.shape(), self.dtype(), self.device())?;
        let u = from_f64s(us, self.shape(), self.dtype(), self.device())?;
        let p = crate::kernels::gpu::upload(OP, &Tensor::from_vec(ps, &with_batch(self, &[n]))?, self.device())?;
        let p = crate::ops::bind_nondiff(Op::Decomp(DecompOp::Lu(2)), &[self], p);
        // Ā = Pᵀ L⁻ᵀ M U⁻ᵀ; `Pᵀ X` puts row i of X back at row p[i]
        let back = |m: &Tensor, l: &Tensor, u: &Tensor, p: &Tensor| -> Result<Tensor> {
            let x = l.triangular_solve(m, true, true)?;
            let ap = u.triangular_solve(&x.transpose()?, false, false)?.transpose()?;
            let inv = p.argsort(-1, false)?;
            ap.take_along_axis(&inv.expand_dims(-1)?.broadcast_to(ap.shape())?, -2)
        };
        let (l1, u1, p1) = (l.clone(), u.clone(), p.clone());
        let lo = output(self, DecompOp::Lu(0), l.clone(), move |_| {
            vjp(move |g, _| {
                let m = l1.matmul_with(&g[0], true, false)?.band_part(-1, 0)?;
                let m = m.sub(&m.diag_part()?.diag()?)?;
                Ok(grads![Some(back(&m, &l1, &u1, &p1)?)])
            })
        });
        let p2 = p.clone();
        let uo = output(self, DecompOp::Lu(1), u.clone(), move |_| {
            vjp(move |g, _| {
                let m = g[0].matmul_with(&u, false, true)?.band_part(0, -1)?;
                Ok(grads![Some(back(&m, &l, &u, &p2)?)])
            })
        });
        Ok((lo, uo, p))
    }

    /// The matrix exponential of square matrices (`tf.linalg.expm`), by
    /// scaling and squaring with a Padé approximant. Differentiable: the
    /// gradient is the adjoint Fréchet derivative (see the module docs).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![0.0f64, 1.0, 0.0, 0.0], &[2, 2])?;
    /// assert_eq!(a.matrix_exp()?.to_vec::<f64>()?, vec![1.0, 1.0, 0.0, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn matrix_exp(&self) -> Result<Tensor> {
        const OP: &str = "matrix_exp";
        let (nb, n) = square(OP, self)?;
        let a = host_f64s(OP, self)?;
        let mut out = Vec::with_capacity(a.len());
        for b in 0..busy(nb, n) {
            let e = eig::expm(&a[b * n * n..(b + 1) * n * n], n).ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!("matrix {b} of shape {:?} has non-finite entries", self.shape()),
                )
            })?;
            out.extend(e);
        }
        let y = from_f64s(out, self.shape(), self.dtype(), self.device())?;
        let x = self.clone();
        Ok(bind(Op::Decomp(DecompOp::MatrixExp), &[self], y, move |_| {
            vjp(move |g, _| {
                let at = x.transpose()?;
                let top = Tensor::concat(&[&at, &g[0]], -1)?;
                let bottom = Tensor::concat(&[&at.try_zeros_like()?, &at], -1)?;
                let big = Tensor::concat(&[&top, &bottom], -2)?.matrix_exp()?;
                let r = big.rank();
                let mut begin = vec![0; r];
                begin[r - 1] = n;
                let mut size = big.shape().to_vec();
                size[r - 2] = n;
                size[r - 1] = n;
                Ok(grads![Some(big.slice(&begin, &size)?)])
            })
        }))
    }
}
