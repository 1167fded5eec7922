//! Spectral decompositions and the matrix exponential, in f64, one
//! row-major matrix at a time (as `decomp.rs`): the symmetric eigenproblem
//! and the SVD by Jacobi rotations (slower than LAPACK's divide and conquer
//! on large matrices, but simple and accurate to the last bits on the small
//! and medium ones of scientific code), Householder QR, and the exponential
//! by scaling and squaring with a degree-13 Padé approximant (Higham 2005).
//!
//! Jacobi sweeps and Householder reflections sum squares of the entries,
//! which leave `f64`'s range for entries beyond about 1e±154 (a matrix of
//! 1e-200s had singular values 0 and eigenvalues equal to its diagonal; one
//! of 1e160s, NaN). The three decompositions first divide the matrix by the
//! power of two nearest its largest magnitude ([`balanced`]) and multiply
//! the eigenvalues, singular values and `R` back: exact, so that a matrix
//! in the usual range gives the same bits as without the division.

/// Eigenvalues (ascending) and eigenvectors (the columns of the row-major
/// `n x n` result) of the symmetric matrix whose lower triangle is `a`'s
/// (the upper triangle is not read, as LAPACK's `syevd` with 'L').
pub fn eigh(a: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    let lower = (0..n).flat_map(|i| (0..=i).map(move |j| a[i * n + j]));
    let scale = power_of_two_near(lower.fold(0.0, |b: f64, x| b.max(x.abs())));
    let mut m = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            m[i * n + j] = a[i * n + j] / scale;
            m[j * n + i] = a[i * n + j] / scale;
        }
    }
    let mut v = vec![0.0; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    // cyclic Jacobi: rotate away each off-diagonal entry until none is left
    for _sweep in 0..100 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..i).map(move |j| (i, j)))
            .map(|(i, j)| m[i * n + j].powi(2))
            .sum();
        let diag: f64 = (0..n).map(|i| m[i * n + i].powi(2)).sum();
        if off <= f64::EPSILON.powi(2) * diag.max(f64::MIN_POSITIVE) || off == 0.0 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = m[p * n + q];
                if apq == 0.0 {
                    continue;
                }
                let (app, aqq) = (m[p * n + p], m[q * n + q]);
                let theta = (aqq - app) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (mkp, mkq) = (m[k * n + p], m[k * n + q]);
                    m[k * n + p] = c * mkp - s * mkq;
                    m[k * n + q] = s * mkp + c * mkq;
                }
                for k in 0..n {
                    let (mpk, mqk) = (m[p * n + k], m[q * n + k]);
                    m[p * n + k] = c * mpk - s * mqk;
                    m[q * n + k] = s * mpk + c * mqk;
                }
                for k in 0..n {
                    let (vkp, vkq) = (v[k * n + p], v[k * n + q]);
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| m[i * n + i].total_cmp(&m[j * n + j]));
    let vals = order.iter().map(|&i| m[i * n + i] * scale).collect();
    let mut vecs = vec![0.0; n * n];
    for (c, &i) in order.iter().enumerate() {
        // a deterministic sign: the largest entry of each vector positive
        let col: Vec<f64> = (0..n).map(|k| v[k * n + i]).collect();
        let big = col
            .iter()
            .copied()
            .fold(0.0f64, |b, x| if x.abs() > b.abs() { x } else { b });
        let sign = if big < 0.0 { -1.0 } else { 1.0 };
        for k in 0..n {
            vecs[k * n + c] = sign * col[k];
        }
    }
    (vals, vecs)
}

/// The thin SVD of the row-major `m x n` matrix `a`: singular values
/// (descending, `k = min(m, n)`), `U` (`m x k`) and `V` (`n x k`), by
/// one-sided Jacobi on the columns (of `aᵀ` when `m < n`).
pub fn svd(a: &[f64], m: usize, n: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    if m < n {
        let mut t = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                t[j * m + i] = a[i * n + j];
            }
        }
        let (s, u, v) = svd(&t, n, m);
        return (s, v, u);
    }
    // columns of w (m x n) become orthogonal: w = a v
    let (mut w, scale) = balanced(a);
    let mut v = vec![0.0; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    for _sweep in 0..100 {
        let mut rotated = false;
        for p in 0..n {
            for q in p + 1..n {
                let (mut alpha, mut beta, mut gamma) = (0.0, 0.0, 0.0);
                for k in 0..m {
                    let (x, y) = (w[k * n + p], w[k * n + q]);
                    alpha += x * x;
                    beta += y * y;
                    gamma += x * y;
                }
                if gamma == 0.0 || gamma.abs() <= f64::EPSILON * (alpha * beta).sqrt() {
                    continue;
                }
                rotated = true;
                let zeta = (beta - alpha) / (2.0 * gamma);
                let t = zeta.signum() / (zeta.abs() + (1.0 + zeta * zeta).sqrt());
                let t = if zeta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (1.0 + t * t).sqrt();
                let s = c * t;
                for k in 0..m {
                    let (x, y) = (w[k * n + p], w[k * n + q]);
                    w[k * n + p] = c * x - s * y;
                    w[k * n + q] = s * x + c * y;
                }
                for k in 0..n {
                    let (x, y) = (v[k * n + p], v[k * n + q]);
                    v[k * n + p] = c * x - s * y;
                    v[k * n + q] = s * x + c * y;
                }
            }
        }
        if !rotated {
            break;
        }
    }
    let norms: Vec<f64> = (0..n)
        .map(|j| (0..m).map(|k| w[k * n + j].powi(2)).sum::<f64>().sqrt())
        .collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| norms[j].total_cmp(&norms[i]));
    let s: Vec<f64> = order.iter().map(|&j| norms[j] * scale).collect();
    let mut u = vec![0.0; m * n];
    let mut vs = vec![0.0; n * n];
    for (c, &j) in order.iter().enumerate() {
        // the sign: the largest entry of each right vector positive
        let big = (0..n)
            .map(|k| v[k * n + j])
            .fold(0.0f64, |b, x| if x.abs() > b.abs() { x } else { b });
        let sign = if big < 0.0 { -1.0 } else { 1.0 };
        for k in 0..n {
            vs[k * n + c] = sign * v[k * n + j];
        }
        for k in 0..m {
            u[k * n + c] = if norms[j] > 0.0 {
                sign * w[k * n + j] / norms[j]
            } else {
                0.0
            };
        }
    }
    complete_zero_columns(&mut u, m, n, &s);
    (s, u, vs)
}

/// `a` divided by [`power_of_two_near`] its largest magnitude, and that
/// power of two.
fn balanced(a: &[f64]) -> (Vec<f64>, f64) {
    let scale = power_of_two_near(a.iter().fold(0.0, |b: f64, x| b.max(x.abs())));
    (a.iter().map(|x| x / scale).collect(), scale)
}

/// The power of two `2^e` with `2^e <= big < 2^(e+1)` (`e` at least -1022,
/// so that dividing by it is exact); 1 for a `big` that is 0, infinite or
/// NaN (nothing to scale, or nothing a scale could save).
fn power_of_two_near(big: f64) -> f64 {
    if big == 0.0 || !big.is_finite() {
        return 1.0;
    }
    let e = ((big.to_bits() >> 52) & 0x7ff) as i64 - 1023;
    f64::from_bits(((e.max(-1022) + 1023) as u64) << 52)
}

/// Replaces the columns of `u` (`m x n`) that belong to zero singular
/// values by unit vectors orthogonal to the others (Gram–Schmidt against
/// the unit basis), so that `u` keeps orthonormal columns.
fn complete_zero_columns(u: &mut [f64], m: usize, n: usize, s: &[f64]) {
    for c in 0..n {
        if s[c] > 0.0 {
            continue;
        }
        for e in 0..m {
            let mut x = vec![0.0; m];
            x[e] = 1.0;
            for d in 0..n {
                if d == c || (s[d] == 0.0 && d > c) {
                    continue;
                }
                let dot: f64 = (0..m).map(|k| u[k * n + d] * x[k]).sum();
                for k in 0..m {
                    x[k] -= dot * u[k * n + d];
                }
            }
            let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
            if norm > 1e-8 {
                for k in 0..m {
                    u[k * n + c] = x[k] / norm;
                }
                break;
            }
        }
    }
}

/// The thin QR of the row-major `m x n` matrix `a` by Householder
/// reflections: `Q` (`m x k`, orthonormal columns) and `R` (`k x n`, upper
/// triangular), `k = min(m, n)`, with LAPACK's signs (`geqrf`'s
/// reflectors, as TensorFlow's): a column already zero below the diagonal
/// (the last of a square matrix) is not reflected, so `R`'s diagonal keeps
/// its sign there; elsewhere it is `-sign(a_jj)·‖column‖` (negative for
/// `a_jj = 0`).
pub fn qr(a: &[f64], m: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let k = m.min(n);
    let (mut r, scale) = balanced(a);
    let mut vs: Vec<Vec<f64>> = Vec::with_capacity(k);
    for j in 0..k {
        let below = (j + 1..m).map(|i| r[i * n + j].powi(2)).sum::<f64>();
        let mut v: Vec<f64> = (j..m).map(|i| r[i * n + j]).collect();
        if below == 0.0 {
            // (LAPACK's dlarfg: tau = 0, the reflector is the identity)
            vs.push(vec![0.0; m - j]);
            continue;
        }
        let norm = (v[0] * v[0] + below).sqrt();
        let alpha = if v[0] < 0.0 { norm } else { -norm };
        v[0] -= alpha;
        let vn = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        for x in &mut v {
            *x /= vn;
        }
        for c in j..n {
            let dot: f64 = (j..m).map(|i| v[i - j] * r[i * n + c]).sum();
            for i in j..m {
                r[i * n + c] -= 2.0 * v[i - j] * dot;
            }
        }
        vs.push(v);
    }
    // Q = H_0 H_1 ... H_{k-1} applied to the first k unit columns
    let mut q = vec![0.0; m * k];
    for i in 0..k {
        q[i * k + i] = 1.0;
    }
    for j in (0..k).rev() {
        let v = &vs[j];
        for c in 0..k {
            let dot: f64 = (j..m).map(|i| v[i - j] * q[i * k + c]).sum();
            for i in j..m {
                q[i * k + c] -= 2.0 * v[i - j] * dot;
            }
        }
    }
    let mut rr = vec![0.0; k * n];
    for i in 0..k {
        for c in i..n {
            rr[i * n + c] = r[i * n + c] * scale;
        }
    }
    (q, rr)
}

fn matmul(a: &[f64], b: &[f64], n: usize) -> Vec<f64> {
    let mut c = vec![0.0; n * n];
    for i in 0..n {
        for k in 0..n {
            let aik = a[i * n + k];
            if aik == 0.0 {
                continue;
            }
            for j in 0..n {
                c[i * n + j] += aik * b[k * n + j];
            }
        }
    }
    c
}

/// `exp(a)` of the row-major `n x n` matrix `a` (Higham's scaling and
/// squaring with the degree-13 Padé approximant). `None` if the Padé
/// denominator is singular (a non-finite input).
pub fn expm(a: &[f64], n: usize) -> Option<Vec<f64>> {
    const B: [f64; 14] = [
        64764752532480000.0,
        32382376266240000.0,
        7771770303897600.0,
        1187353796428800.0,
        129060195264000.0,
        10559470521600.0,
        670442572800.0,
        33522128640.0,
        1323241920.0,
        40840800.0,
        960960.0,
        16380.0,
        182.0,
        1.0,
    ];
    const THETA13: f64 = 5.371920351148152;
    if n == 0 {
        return Some(Vec::new());
    }
    let norm1 = (0..n)
        .map(|j| (0..n).map(|i| a[i * n + j].abs()).sum::<f64>())
        .fold(0.0, f64::max);
    if !norm1.is_finite() {
        return None;
    }
    let s = if norm1 > THETA13 {
        (norm1 / THETA13).log2().ceil() as i32
    } else {
        0
    };
    let scale = 0.5f64.powi(s);
    let a: Vec<f64> = a.iter().map(|x| x * scale).collect();
    let ident: Vec<f64> = (0..n * n).map(|i| if i % (n + 1) == 0 { 1.0 } else { 0.0 }).collect();
    let a2 = matmul(&a, &a, n);
    let a4 = matmul(&a2, &a2, n);
    let a6 = matmul(&a4, &a2, n);
    let lin = |c6: f64, c4: f64, c2: f64, c0: f64| -> Vec<f64> {
        (0..n * n)
            .map(|i| c6 * a6[i] + c4 * a4[i] + c2 * a2[i] + c0 * ident[i])
            .collect()
    };
    let u_inner = {
        let hi = lin(B[13], B[11], B[9], 0.0);
        let t = matmul(&a6, &hi, n);
        let lo = lin(B[7], B[5], B[3], B[1]);
        let sum: Vec<f64> = t.iter().zip(&lo).map(|(x, y)| x + y).collect();
        matmul(&a, &sum, n)
    };
    let v = {
        let hi = lin(B[12], B[10], B[8], 0.0);
        let t = matmul(&a6, &hi, n);
        let lo = lin(B[6], B[4], B[2], B[0]);
        t.iter().zip(&lo).map(|(x, y)| x + y).collect::<Vec<f64>>()
    };
    // (V - U) X = (V + U)
    let p: Vec<f64> = v.iter().zip(&u_inner).map(|(v, u)| v + u).collect();
    let q: Vec<f64> = v.iter().zip(&u_inner).map(|(v, u)| v - u).collect();
    let lu = super::decomp::lu(&q, n);
    if lu.singular {
        return None;
    }
    let mut x = p;
    lu.solve(&mut x, n, false);
    for _ in 0..s {
        x = matmul(&x, &x, n);
    }
    Some(x)
}
