//! Small dense matrix decompositions, in f64, one row-major `n x n` matrix at
//! a time: LU with partial pivoting, Cholesky, and forward/back substitution.
//!
//! The ops layer converts f32 inputs to f64 and back, so both dtypes share
//! one careful implementation (and f32 gains accuracy). These are O(n³)
//! textbook loops meant for the small and medium matrices of scientific
//! code; a batch of matrices runs matrix by matrix.

/// An LU factorisation `P A = L U` stored compactly: `lu` holds `U` on and
/// above the diagonal and the multipliers of `L` (unit diagonal) below it;
/// `perm[i]` is the row of `A` that ended in row `i`.
pub struct Lu {
    pub lu: Vec<f64>,
    pub perm: Vec<usize>,
    /// `+1` or `-1`: the sign of the permutation.
    pub sign: f64,
    /// Whether a pivot was zero (or negligible against the matrix's scale).
    pub singular: bool,
    pub n: usize,
}

/// Factorises the `n x n` row-major matrix `a`. Never fails: a singular
/// matrix is flagged (`singular`) and its factorisation is completed with the
/// zero pivots skipped, which still gives the right (zero) determinant.
pub fn lu(a: &[f64], n: usize) -> Lu {
    let mut m = a.to_vec();
    let mut perm: Vec<usize> = (0..n).collect();
    let mut sign = 1.0;
    let mut singular = false;
    let scale = m.iter().fold(0.0f64, |s, v| s.max(v.abs()));
    let tiny = scale * n as f64 * f64::EPSILON;
    for k in 0..n {
        // the pivot: the largest entry of column k at or below row k
        let mut p = k;
        let mut best = m[k * n + k].abs();
        for i in k + 1..n {
            let v = m[i * n + k].abs();
            if v > best {
                best = v;
                p = i;
            }
        }
        if p != k {
            for j in 0..n {
                m.swap(k * n + j, p * n + j);
            }
            perm.swap(k, p);
            sign = -sign;
        }
        let piv = m[k * n + k];
        if piv.abs() <= tiny || !piv.is_finite() {
            singular = true;
            if piv == 0.0 {
                continue;
            }
        }
        for i in k + 1..n {
            let f = m[i * n + k] / piv;
            m[i * n + k] = f;
            if f != 0.0 {
                for j in k + 1..n {
                    m[i * n + j] -= f * m[k * n + j];
                }
            }
        }
    }
    Lu {
        lu: m,
        perm,
        sign,
        singular,
        n,
    }
}

impl Lu {
    /// The determinant: the permutation's sign times the product of `U`'s diagonal.
    pub fn det(&self) -> f64 {
        let n = self.n;
        (0..n).fold(self.sign, |d, i| d * self.lu[i * n + i])
    }

    /// `(sign, log|det|)`; `(0, -inf)` for a singular matrix.
    pub fn slogdet(&self) -> (f64, f64) {
        let n = self.n;
        let mut sign = self.sign;
        let mut log = 0.0;
        for i in 0..n {
            let u = self.lu[i * n + i];
            if u == 0.0 {
                return (0.0, f64::NEG_INFINITY);
            }
            if u < 0.0 {
                sign = -sign;
            }
            log += u.abs().ln();
        }
        (sign, log)
    }

    /// Solves `A X = B` (or `Aᵀ X = B` when `transpose`) for the `n x m`
    /// row-major `b`, in place. The caller has checked `!singular`.
    pub fn solve(&self, b: &mut [f64], m: usize, transpose: bool) {
        let n = self.n;
        let lu = &self.lu;
        if !transpose {
            // P A = L U: A X = B  <=>  L U X = P B
            let pb: Vec<f64> = self.perm.iter().flat_map(|&r| b[r * m..(r + 1) * m].to_vec()).collect();
            b.copy_from_slice(&pb);
            // L y = P b (unit lower)
            for i in 0..n {
                for k in 0..i {
                    let f = lu[i * n + k];
                    if f != 0.0 {
                        for j in 0..m {
                            b[i * m + j] -= f * b[k * m + j];
                        }
                    }
                }
            }
            // U x = y
            for i in (0..n).rev() {
                for k in i + 1..n {
                    let f = lu[i * n + k];
                    if f != 0.0 {
                        for j in 0..m {
                            b[i * m + j] -= f * b[k * m + j];
                        }
                    }
                }
                let d = lu[i * n + i];
                for j in 0..m {
                    b[i * m + j] /= d;
                }
            }
        } else {
            // Aᵀ = Uᵀ Lᵀ P: Uᵀ z = B, Lᵀ w = z, X = Pᵀ w
            for i in 0..n {
                for k in 0..i {
                    let f = lu[k * n + i];
                    if f != 0.0 {
                        for j in 0..m {
                            b[i * m + j] -= f * b[k * m + j];
                        }
                    }
                }
                let d = lu[i * n + i];
                for j in 0..m {
                    b[i * m + j] /= d;
                }
            }
            for i in (0..n).rev() {
                for k in i + 1..n {
                    let f = lu[k * n + i];
                    if f != 0.0 {
                        for j in 0..m {
                            b[i * m + j] -= f * b[k * m + j];
                        }
                    }
                }
            }
            let mut x = vec![0.0; n * m];
            for (i, &r) in self.perm.iter().enumerate() {
                x[r * m..(r + 1) * m].copy_from_slice(&b[i * m..(i + 1) * m]);
            }
            b.copy_from_slice(&x);
        }
    }
}

/// The lower Cholesky factor of the `n x n` matrix `a` (only its lower
/// triangle is read). `Err(k)` when the leading `k+1` minor is not positive
/// definite.
pub fn cholesky(a: &[f64], n: usize) -> Result<Vec<f64>, usize> {
    let mut l = vec![0.0; n * n];
    for j in 0..n {
        let mut d = a[j * n + j];
        for k in 0..j {
            d -= l[j * n + k] * l[j * n + k];
        }
        if d <= 0.0 || !d.is_finite() {
            return Err(j);
        }
        let d = d.sqrt();
        l[j * n + j] = d;
        for i in j + 1..n {
            let mut s = a[i * n + j];
            for k in 0..j {
                s -= l[i * n + k] * l[j * n + k];
            }
            l[i * n + j] = s / d;
        }
    }
    Ok(l)
}

/// Solves `op(T) X = B` in place for the `n x m` row-major `b`, where `T` is
/// the lower (`lower`) or upper triangle of the `n x n` matrix `a` (the other
/// triangle is not read) and `op` transposes when `adjoint`. A zero on the
/// diagonal gives infinities, as a division by zero does (TF's behaviour).
pub fn triangular_solve(a: &[f64], b: &mut [f64], n: usize, m: usize, lower: bool, adjoint: bool) {
    // entry (i, k) of op(T)
    let t = |i: usize, k: usize| if adjoint { a[k * n + i] } else { a[i * n + k] };
    // op(T) is lower triangular iff exactly one of (lower, adjoint) holds
    let forward = lower != adjoint;
    let rows: Box<dyn Iterator<Item = usize>> = if forward {
        Box::new(0..n)
    } else {
        Box::new((0..n).rev())
    };
    for i in rows {
        let ks = if forward { 0..i } else { i + 1..n };
        for k in ks {
            let f = t(i, k);
            if f != 0.0 {
                for j in 0..m {
                    b[i * m + j] -= f * b[k * m + j];
                }
            }
        }
        let d = t(i, i);
        for j in 0..m {
            b[i * m + j] /= d;
        }
    }
}
