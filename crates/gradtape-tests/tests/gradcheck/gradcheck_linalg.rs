//! Linear algebra through the gradient checker (first and second order),
//! then exact values against hand computations.
//!
//! Decompositions get well-conditioned matrices built inside the case from
//! an unconstrained input `M`: `M Mᵀ + 3I` (symmetric positive definite) for
//! cholesky, `M + 4I` (diagonally dominant: `|M| <= 1.3`) elsewhere.

use crate::common;

use common::*;
use gradtape::{DType, GradientTape, Result, Tensor};

/// `M Mᵀ + 3I` for `M: [..., n, n]`.
fn spd(m: &Tensor) -> Result<Tensor> {
    let n = m.shape()[m.rank() - 1];
    m.matmul_with(m, false, true)?
        .add(&Tensor::eye(n, DType::F64).mul_scalar(3.0)?)
}

/// `M + 4I` for `M: [..., n, n]`.
fn dom(m: &Tensor) -> Result<Tensor> {
    let n = m.shape()[m.rank() - 1];
    m.add(&Tensor::eye(n, DType::F64).mul_scalar(4.0)?)
}

fn table() -> Vec<Case> {
    let mut t = Vec::new();
    let two: &[(&str, Op, &[usize], &[usize])] = &[
        ("matvec [2,3]x[3]", |x| x[0].matvec(&x[1]), &[2, 3], &[3]),
        ("matvec batched [2,2,3]x[3]", |x| x[0].matvec(&x[1]), &[2, 2, 3], &[3]),
        (
            "matvec batch-broadcast [2,3]x[4,3]",
            |x| x[0].matvec(&x[1]),
            &[2, 3],
            &[4, 3],
        ),
        ("matvec [0,3]x[3]", |x| x[0].matvec(&x[1]), &[0, 3], &[3]),
        ("outer [3]x[2]", |x| x[0].outer(&x[1]), &[3], &[2]),
        ("outer [2,2]x[3]", |x| x[0].outer(&x[1]), &[2, 2], &[3]),
        ("outer []x[3]", |x| x[0].outer(&x[1]), &[], &[3]),
        ("outer [0]x[2]", |x| x[0].outer(&x[1]), &[0], &[2]),
        (
            "tensordot [2,3,4]x[4,3] axes [1,2]/[1,0]",
            |x| x[0].tensordot(&x[1], &[1, 2], &[1, 0]),
            &[2, 3, 4],
            &[4, 3],
        ),
        (
            "tensordot [2,3]x[3,2] axes [1]/[0]",
            |x| x[0].tensordot(&x[1], &[1], &[0]),
            &[2, 3],
            &[3, 2],
        ),
        (
            "tensordot [2]x[3] no axes",
            |x| x[0].tensordot(&x[1], &[], &[]),
            &[2],
            &[3],
        ),
        (
            "tensordot [3,2]x[2,3] axes [-1,0]/[0,-1]",
            |x| x[0].tensordot(&x[1], &[-1, 0], &[0, -1]),
            &[3, 2],
            &[2, 3],
        ),
        (
            "tensordot [0,3]x[3] axes [1]/[0]",
            |x| x[0].tensordot(&x[1], &[1], &[0]),
            &[0, 3],
            &[3],
        ),
        (
            "einsum ij,jk->ik",
            |x| Tensor::einsum("ij,jk->ik", &[&x[0], &x[1]]),
            &[2, 3],
            &[3, 4],
        ),
        (
            "einsum bij,bjk->bik",
            |x| Tensor::einsum("bij,bjk->bik", &[&x[0], &x[1]]),
            &[2, 2, 3],
            &[2, 3, 2],
        ),
        (
            "einsum i,j->ij",
            |x| Tensor::einsum("i,j->ij", &[&x[0], &x[1]]),
            &[3],
            &[2],
        ),
        (
            "einsum ij,ij->i",
            |x| Tensor::einsum("ij,ij->i", &[&x[0], &x[1]]),
            &[2, 3],
            &[2, 3],
        ),
        (
            "einsum ij,j->i",
            |x| Tensor::einsum("ij,j->i", &[&x[0], &x[1]]),
            &[2, 3],
            &[3],
        ),
        (
            "einsum ijk,kj->i (two contractions)",
            |x| Tensor::einsum("ijk,kj->i", &[&x[0], &x[1]]),
            &[2, 3, 2],
            &[2, 3],
        ),
        (
            "einsum bik,bjk->bji (transposed output)",
            |x| Tensor::einsum("bik,bjk->bji", &[&x[0], &x[1]]),
            &[2, 3, 2],
            &[2, 2, 2],
        ),
        (
            "einsum implicit ij,jk",
            |x| Tensor::einsum("ij,jk", &[&x[0], &x[1]]),
            &[2, 3],
            &[3, 2],
        ),
        (
            "einsum ii,j->ij (diagonal then outer)",
            |x| Tensor::einsum("ii,j->ij", &[&x[0], &x[1]]),
            &[3, 3],
            &[2],
        ),
        (
            "einsum ij,k-> (sums)",
            |x| Tensor::einsum("ij,k->", &[&x[0], &x[1]]),
            &[2, 3],
            &[2],
        ),
        (
            "einsum i,i-> (dot)",
            |x| Tensor::einsum("i,i->", &[&x[0], &x[1]]),
            &[4],
            &[4],
        ),
        (
            "einsum zero-size ij,jk->ik",
            |x| Tensor::einsum("ij,jk->ik", &[&x[0], &x[1]]),
            &[2, 0],
            &[0, 3],
        ),
    ];
    for &(name, f, sa, sb) in two {
        t.push(case(name, f, &[(sa, Any), (sb, Any)]));
    }
    // einsum over three and more operands, contracted in the cheapest order
    let many: &[(&str, Op, &[&[usize]])] = &[
        (
            "einsum ij,jk,kl->il (chain)",
            |x| Tensor::einsum("ij,jk,kl->il", &[&x[0], &x[1], &x[2]]),
            &[&[2, 3], &[3, 4], &[4, 2]],
        ),
        (
            "einsum abc,cd,bde->ae",
            |x| Tensor::einsum("abc,cd,bde->ae", &[&x[0], &x[1], &x[2]]),
            &[&[2, 3, 2], &[2, 2], &[3, 2, 2]],
        ),
        (
            "einsum i,i,i-> (triple product)",
            |x| Tensor::einsum("i,i,i->", &[&x[0], &x[1], &x[2]]),
            &[&[4], &[4], &[4]],
        ),
        (
            "einsum ...ij,jk,...k->...i (ellipsis broadcast)",
            |x| Tensor::einsum("...ij,jk,...k->...i", &[&x[0], &x[1], &x[2]]),
            &[&[2, 2, 3], &[3, 2], &[2, 1, 2]],
        ),
        (
            "einsum ii,ij,jk->k (diagonal)",
            |x| Tensor::einsum("ii,ij,jk->k", &[&x[0], &x[1], &x[2]]),
            &[&[2, 2], &[2, 3], &[3, 2]],
        ),
        (
            "einsum bij,bjk,bkl->bil (batched)",
            |x| Tensor::einsum("bij,bjk,bkl->bil", &[&x[0], &x[1], &x[2]]),
            &[&[2, 2, 3], &[2, 3, 2], &[2, 2, 2]],
        ),
        (
            "einsum ij,jk,kl,lm->im (four)",
            |x| sq(Tensor::einsum("ij,jk,kl,lm->im", &[&x[0], &x[1], &x[2], &x[3]])),
            &[&[2, 3], &[3, 2], &[2, 3], &[3, 2]],
        ),
        (
            "einsum ij,k,jl->ikl (outer inside)",
            |x| Tensor::einsum("ij,k,jl->ikl", &[&x[0], &x[1], &x[2]]),
            &[&[2, 3], &[2], &[3, 2]],
        ),
        (
            "einsum ij,jk,kl->il zero-size",
            |x| Tensor::einsum("ij,jk,kl->il", &[&x[0], &x[1], &x[2]]),
            &[&[2, 0], &[0, 3], &[3, 2]],
        ),
    ];
    for &(name, f, shapes) in many {
        let ins: Vec<(&[usize], Dom)> = shapes.iter().map(|&s| (s, Any)).collect();
        t.push(case(name, f, &ins));
    }
    let one: &[(&str, Op, &[usize])] = &[
        ("einsum ij->ji", |x| sq(Tensor::einsum("ij->ji", &[&x[0]])), &[2, 3]),
        ("einsum ii-> (trace)", |x| sq(Tensor::einsum("ii->", &[&x[0]])), &[3, 3]),
        (
            "einsum ii->i (diagonal)",
            |x| sq(Tensor::einsum("ii->i", &[&x[0]])),
            &[3, 3],
        ),
        ("einsum bii->b", |x| sq(Tensor::einsum("bii->b", &[&x[0]])), &[2, 3, 3]),
        ("einsum ij-> (sum)", |x| sq(Tensor::einsum("ij->", &[&x[0]])), &[2, 3]),
        (
            "einsum ijk->kj",
            |x| sq(Tensor::einsum("ijk->kj", &[&x[0]])),
            &[2, 3, 2],
        ),
        ("einsum iji->j", |x| sq(Tensor::einsum("iji->j", &[&x[0]])), &[2, 3, 2]),
        ("diag [3]", |x| sq(x[0].diag()), &[3]),
        ("diag [2,3]", |x| sq(x[0].diag()), &[2, 3]),
        ("diag [0]", |x| sq(x[0].diag()), &[0]),
        ("diag_part [3,3]", |x| sq(x[0].diag_part()), &[3, 3]),
        ("diag_part [2,3]", |x| sq(x[0].diag_part()), &[2, 3]),
        ("diag_part [2,4,3]", |x| sq(x[0].diag_part()), &[2, 4, 3]),
        (
            "diag_part of a transposed view",
            |x| sq(x[0].transpose()?.diag_part()),
            &[3, 2],
        ),
        ("trace [3,3]", |x| sq(x[0].trace()), &[3, 3]),
        ("trace [2,3,3]", |x| sq(x[0].trace()), &[2, 3, 3]),
        ("trace [0,0]", |x| x[0].trace()?.add_scalar(1.0)?.square(), &[0, 0]),
        ("band_part [3,4] (1,0)", |x| sq(x[0].band_part(1, 0)), &[3, 4]),
        ("tril [2,3,3]", |x| sq(x[0].tril()), &[2, 3, 3]),
        ("triu [3,3]", |x| sq(x[0].triu()), &[3, 3]),
        ("cholesky [3,3]", |x| spd(&x[0])?.cholesky(), &[3, 3]),
        ("cholesky [2,3,3]", |x| spd(&x[0])?.cholesky(), &[2, 3, 3]),
        ("cholesky [1,1]", |x| spd(&x[0])?.cholesky(), &[1, 1]),
        ("cholesky [0,0]", |x| spd(&x[0])?.cholesky(), &[0, 0]),
        ("inverse [3,3]", |x| dom(&x[0])?.inverse(), &[3, 3]),
        ("inverse [2,2,2]", |x| dom(&x[0])?.inverse(), &[2, 2, 2]),
        ("inverse [1,1]", |x| dom(&x[0])?.inverse(), &[1, 1]),
        ("det [3,3]", |x| dom(&x[0])?.det(), &[3, 3]),
        ("det [2,3,3]", |x| dom(&x[0])?.det(), &[2, 3, 3]),
        ("det [1,1]", |x| dom(&x[0])?.det(), &[1, 1]),
        (
            "det of a matrix with negative determinant",
            |x| dom(&x[0])?.reverse(&[0])?.det(),
            &[3, 3],
        ),
        ("logdet [3,3]", |x| dom(&x[0])?.logdet(), &[3, 3]),
        ("logdet [2,2,2]", |x| dom(&x[0])?.logdet(), &[2, 2, 2]),
        (
            "logdet negative determinant",
            |x| dom(&x[0])?.reverse(&[1])?.logdet(),
            &[3, 3],
        ),
        ("slogdet [3,3]", |x| dom(&x[0])?.slogdet().map(|p| p.1), &[3, 3]),
    ];
    for &(name, f, s) in one {
        t.push(case(name, f, &[(s, Any)]));
    }
    let solves: &[(&str, Op, &[usize], &[usize])] = &[
        (
            "triangular_solve lower [3,3] [3,2]",
            |x| dom(&x[0])?.triangular_solve(&x[1], true, false),
            &[3, 3],
            &[3, 2],
        ),
        (
            "triangular_solve upper [3,3] [3,2]",
            |x| dom(&x[0])?.triangular_solve(&x[1], false, false),
            &[3, 3],
            &[3, 2],
        ),
        (
            "triangular_solve lower adjoint [3,3] [3,1]",
            |x| dom(&x[0])?.triangular_solve(&x[1], true, true),
            &[3, 3],
            &[3, 1],
        ),
        (
            "triangular_solve upper adjoint [2,3,3] [2,3,2]",
            |x| dom(&x[0])?.triangular_solve(&x[1], false, true),
            &[2, 3, 3],
            &[2, 3, 2],
        ),
        (
            "triangular_solve batch-broadcast [2,3,3] [3,2]",
            |x| dom(&x[0])?.triangular_solve(&x[1], true, false),
            &[2, 3, 3],
            &[3, 2],
        ),
        (
            "triangular_solve [3,3] [3,0]",
            |x| sq(dom(&x[0])?.triangular_solve(&x[1], true, false)),
            &[3, 3],
            &[3, 0],
        ),
        (
            "cholesky_solve [3,3] [3,2]",
            |x| dom(&x[0])?.cholesky_solve(&x[1]),
            &[3, 3],
            &[3, 2],
        ),
        (
            "cholesky_solve of a cholesky [2,3,3] [3,1]",
            |x| spd(&x[0])?.cholesky()?.cholesky_solve(&x[1]),
            &[2, 3, 3],
            &[3, 1],
        ),
        ("solve [3,3] [3,2]", |x| dom(&x[0])?.solve(&x[1]), &[3, 3], &[3, 2]),
        (
            "solve [2,3,3] [2,3,1]",
            |x| dom(&x[0])?.solve(&x[1]),
            &[2, 3, 3],
            &[2, 3, 1],
        ),
        (
            "solve batch-broadcast [3,3] [2,3,2]",
            |x| dom(&x[0])?.solve(&x[1]),
            &[3, 3],
            &[2, 3, 2],
        ),
        (
            "solve_with adjoint [3,3] [3,2]",
            |x| dom(&x[0])?.solve_with(&x[1], true),
            &[3, 3],
            &[3, 2],
        ),
        (
            "solve [2,2] with a pivot swap",
            |x| dom(&x[0])?.permute(&[0, 1])?.reverse(&[0])?.solve(&x[1]),
            &[2, 2],
            &[2, 2],
        ),
    ];
    for &(name, f, sa, sb) in solves {
        t.push(case(name, f, &[(sa, Any), (sb, Any)]));
    }
    t
}

const REQUIRED: &[&str] = &[
    "matvec",
    "outer",
    "tensordot",
    "einsum",
    "diag ",
    "diag_part",
    "trace",
    "band_part",
    "tril",
    "triu",
    "cholesky",
    "triangular_solve",
    "cholesky_solve",
    "solve ",
    "solve_with",
    "inverse",
    "det ",
    "logdet",
    "slogdet",
];

#[test]
fn every_linalg_op_passes_the_gradient_checker() {
    run_table(&table(), REQUIRED, 70, 1500);
}

fn m(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol, "{a:?} vs {b:?}");
    }
}

#[test]
fn det_inverse_solve_of_known_matrices() -> Result<()> {
    // [[2,1,1],[1,3,2],[1,0,0]]: det = 2(0) - 1(0-2) + 1(0-3) = -1
    let a = m(&[2., 1., 1., 1., 3., 2., 1., 0., 0.], &[3, 3]);
    close(&a.det()?.to_vec::<f64>()?, &[-1.0], 1e-12);
    // inverse by cofactors: adj / det
    let inv = [0., 0., 1., -2., 1., 3., 3., -1., -5.];
    close(&a.inverse()?.to_vec::<f64>()?, &inv, 1e-12);
    let (sign, logabs) = a.slogdet()?;
    assert_eq!(sign.to_scalar::<f64>()?, -1.0);
    close(&[logabs.to_scalar::<f64>()?], &[0.0], 1e-12);
    // solve A x = [4, 6, 1] -> x = inv @ b = [1, 1, 1]
    let x = a.solve(&m(&[4., 6., 1.], &[3, 1]))?;
    close(&x.to_vec::<f64>()?, &[1., 1., 1.], 1e-12);
    // Aᵀ x = b: b = Aᵀ [1,2,3] = [2+2+3, 1+6, 1+4] = [7, 7, 5]
    let x = a.solve_with(&m(&[7., 7., 5.], &[3, 1]), true)?;
    close(&x.to_vec::<f64>()?, &[1., 2., 3.], 1e-12);
    // f32 batch: diag(2, 4) and [[0,1],[1,0]]
    let b = Tensor::from_vec(vec![2.0f32, 0., 0., 4., 0., 1., 1., 0.], &[2, 2, 2])?;
    assert_eq!(b.det()?.to_vec::<f32>()?, vec![8.0, -1.0]);
    assert_eq!(b.inverse()?.to_vec::<f32>()?, vec![0.5, 0., 0., 0.25, 0., 1., 1., 0.]);
    // empty matrices: det 1, log|det| 0
    assert_eq!(
        Tensor::zeros(&[2, 0, 0], DType::F64).det()?.to_vec::<f64>()?,
        vec![1.0, 1.0]
    );
    assert_eq!(Tensor::zeros(&[0, 0], DType::F64).logdet()?.to_scalar::<f64>()?, 0.0);
    // a singular matrix has determinant 0 and (sign 0, -inf)
    let s = m(&[1., 2., 2., 4.], &[2, 2]);
    assert_eq!(s.det()?.to_scalar::<f64>()?, 0.0);
    let (sign, logabs) = s.slogdet()?;
    assert_eq!(sign.to_scalar::<f64>()?, 0.0);
    assert_eq!(logabs.to_scalar::<f64>()?, f64::NEG_INFINITY);
    Ok(())
}

#[test]
fn cholesky_and_triangular_solve_values() -> Result<()> {
    // [[4,12,-16],[12,37,-43],[-16,-43,98]] = L Lᵀ, L = [[2,0,0],[6,1,0],[-8,5,3]]
    let a = m(&[4., 12., -16., 12., 37., -43., -16., -43., 98.], &[3, 3]);
    let l = a.cholesky()?;
    close(&l.to_vec::<f64>()?, &[2., 0., 0., 6., 1., 0., -8., 5., 3.], 1e-12);
    // L x = [2, 7, 0] -> x = [1, 1, 1]
    let x = l.triangular_solve(&m(&[2., 7., 0.], &[3, 1]), true, false)?;
    close(&x.to_vec::<f64>()?, &[1., 1., 1.], 1e-12);
    // Lᵀ x = [2+6-8, 1+5, 3] = [0, 6, 3] for x = [1, 1, 1]
    let x = l.triangular_solve(&m(&[0., 6., 3.], &[3, 1]), true, true)?;
    close(&x.to_vec::<f64>()?, &[1., 1., 1.], 1e-12);
    // upper: only the upper triangle of the matrix is read
    let u = m(&[1., 2., 99., 4.], &[2, 2]); // [[1,2],[.,4]] x = [3, 4] -> x = [1, 1]
    close(
        &u.triangular_solve(&m(&[3., 4.], &[2, 1]), false, false)?
            .to_vec::<f64>()?,
        &[1., 1.],
        1e-12,
    );
    Ok(())
}

#[test]
fn known_gradients_of_det_inverse_and_logdet() -> Result<()> {
    // d det / dA = det · A⁻ᵀ; for A = [[1,2],[3,4]]: det -2, A⁻¹ = [[-2,1],[1.5,-0.5]]
    // so the gradient is -2 · [[-2,1.5],[1,-0.5]] = [[4,-3],[-2,1]] (the cofactor matrix)
    let a = m(&[1., 2., 3., 4.], &[2, 2]);
    let tape = GradientTape::persistent();
    let (d, ld, tr) = tape.record(|| -> Result<_> {
        tape.watch(&a);
        Ok((a.det()?, a.logdet()?, a.inverse()?.trace()?))
    })?;
    close(
        &tape.gradient(&d, &a)?.unwrap().to_vec::<f64>()?,
        &[4., -3., -2., 1.],
        1e-12,
    );
    // d log|det| / dA = A⁻ᵀ
    close(
        &tape.gradient(&ld, &a)?.unwrap().to_vec::<f64>()?,
        &[-2., 1.5, 1., -0.5],
        1e-12,
    );
    // d tr(A⁻¹) / dA = -(A⁻²)ᵀ; A⁻² = [[5.5,-2.5],[-3.75,1.75]]
    close(
        &tape.gradient(&tr, &a)?.unwrap().to_vec::<f64>()?,
        &[-5.5, 3.75, 2.5, -1.75],
        1e-12,
    );
    Ok(())
}

#[test]
fn einsum_agrees_with_matmul_and_hand_results() -> Result<()> {
    let a = m(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let b = m(&[1., 0., 2., 1., 0., 3.], &[3, 2]);
    // a @ b = [[1+4+0, 0+2+9], [4+10+0, 0+5+18]] = [[5, 11], [14, 23]]
    assert_eq!(
        Tensor::einsum("ij,jk->ik", &[&a, &b])?.to_vec::<f64>()?,
        vec![5., 11., 14., 23.]
    );
    assert_eq!(
        Tensor::einsum("ij,jk->ki", &[&a, &b])?.to_vec::<f64>()?,
        vec![5., 14., 11., 23.]
    );
    assert_eq!(
        Tensor::einsum("ij->ji", &[&a])?.to_vec::<f64>()?,
        vec![1., 4., 2., 5., 3., 6.]
    );
    assert_eq!(Tensor::einsum("ij->j", &[&a])?.to_vec::<f64>()?, vec![5., 7., 9.]);
    assert_eq!(Tensor::einsum("ij->", &[&a])?.to_scalar::<f64>()?, 21.0);
    let v = m(&[1., 2.], &[2]);
    let w = m(&[3., 4., 5.], &[3]);
    assert_eq!(
        Tensor::einsum("i,j->ij", &[&v, &w])?.to_vec::<f64>()?,
        vec![3., 4., 5., 6., 8., 10.]
    );
    assert_eq!(Tensor::einsum("i,i->", &[&v, &v])?.to_scalar::<f64>()?, 5.0);
    let sq3 = m(&[1., 2., 3., 4., 5., 6., 7., 8., 9.], &[3, 3]);
    assert_eq!(Tensor::einsum("ii->", &[&sq3])?.to_scalar::<f64>()?, 15.0);
    assert_eq!(Tensor::einsum("ii->i", &[&sq3])?.to_vec::<f64>()?, vec![1., 5., 9.]);
    // batched: each batch against matmul
    let x = Tensor::arange(0.0, 12.0, 1.0, DType::F64)?.reshape(&[2, 2, 3])?;
    let y = Tensor::arange(1.0, 13.0, 1.0, DType::F64)?.reshape(&[2, 3, 2])?;
    assert_eq!(
        Tensor::einsum("bij,bjk->bik", &[&x, &y])?.to_vec::<f64>()?,
        x.matmul(&y)?.to_vec::<f64>()?
    );
    // ellipses: batched matmul with broadcasting, and a summed-out ellipsis
    let z = Tensor::arange(0.0, 6.0, 1.0, DType::F64)?.reshape(&[3, 2])?;
    let e = Tensor::einsum(
        "...ij,...jk->...ik",
        &[&x.reshape(&[2, 1, 2, 3])?, &y.reshape(&[1, 2, 3, 2])?],
    )?;
    assert_eq!(e.shape(), &[2, 2, 2, 2]);
    let xb = x.reshape(&[2, 1, 2, 3])?.broadcast_to(&[2, 2, 2, 3])?;
    let yb = y.reshape(&[1, 2, 3, 2])?.broadcast_to(&[2, 2, 3, 2])?;
    assert_eq!(e.to_vec::<f64>()?, xb.matmul(&yb)?.to_vec::<f64>()?);
    assert_eq!(Tensor::einsum("...j->j", &[&z])?.to_vec::<f64>()?, vec![6.0, 9.0]);
    assert_eq!(Tensor::einsum("i...->...", &[&z])?.to_vec::<f64>()?, vec![6.0, 9.0]);
    assert_eq!(Tensor::einsum("...", &[&z])?.to_vec::<f64>()?, z.to_vec::<f64>()?);
    // tensordot and matvec agree with hand results too
    assert_eq!(a.matvec(&w)?.to_vec::<f64>()?, vec![3. + 8. + 15., 12. + 20. + 30.]);
    assert_eq!(a.tensordot(&b, &[1], &[0])?.to_vec::<f64>()?, vec![5., 11., 14., 23.]);
    assert_eq!(a.tensordot(&a, &[0, 1], &[0, 1])?.to_scalar::<f64>()?, 91.0);
    Ok(())
}

#[test]
fn diag_trace_band_values() -> Result<()> {
    let v = Tensor::vector(&[1.0f32, 2.0, 3.0]);
    assert_eq!(v.diag()?.to_vec::<f32>()?, vec![1., 0., 0., 0., 2., 0., 0., 0., 3.]);
    let a = Tensor::from_vec((1..=12).collect::<Vec<i64>>(), &[3, 4])?;
    assert_eq!(a.diag_part()?.to_vec::<i64>()?, vec![1, 6, 11]);
    assert_eq!(a.transpose()?.diag_part()?.to_vec::<i64>()?, vec![1, 6, 11]);
    assert_eq!(a.trace()?.to_scalar::<i64>()?, 18);
    assert_eq!(
        a.band_part(0, 1)?.to_vec::<i64>()?,
        vec![1, 2, 0, 0, 0, 6, 7, 0, 0, 0, 11, 12]
    );
    assert_eq!(a.tril()?.to_vec::<i64>()?, vec![1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0]);
    assert_eq!(
        Tensor::eye_rect(2, 3, DType::I32).to_vec::<i32>()?,
        vec![1, 0, 0, 0, 1, 0]
    );
    Ok(())
}
