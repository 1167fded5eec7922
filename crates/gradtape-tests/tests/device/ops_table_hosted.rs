//! Ops with no GPU kernel, which run on the CPU for GPU inputs under soft
//! device placement (`gradtape::set_soft_device_placement`, on by
//! default, as in TensorFlow): the matrix decompositions, solves and
//! functions of matrices, CTC, and the special functions computed in f64
//! on the host. Each case's value and tape gradient must come back on the
//! GPU and equal the CPU's. The composites among them (the gradients'
//! masks, `lstsq`'s ridge, `pinv`'s cut-off) make constants of their own,
//! which must be made on their input's device.
//!
//! Kept out of `ops_table::cases` (the half-type run): these ops compute in
//! f64 on the host whatever their dtype, and the test that runs these cases
//! also turns soft placement off, which must not race the other tables.

use super::{case, Case, Domain};
use gradtape::MatrixNorm;
use gradtape::{Result, Tensor};

const SQ: &[&[usize]] = &[&[2, 3, 3]];

/// `x xᵀ + 3 I` for `x: [.., n, n]`: symmetric positive definite.
fn spd(x: &Tensor) -> Result<Tensor> {
    let n = x.shape()[x.rank() - 1];
    let eye = Tensor::eye(n, x.dtype()).to(x.device())?.mul_scalar(3.0)?;
    x.matmul_with(x, false, true)?.add(&eye)
}

/// The cases.
pub fn cases() -> Vec<Case> {
    use Domain::*;
    vec![
        case("cholesky", |x| spd(&x[0])?.cholesky(), SQ, Any, true),
        case("det", |x| spd(&x[0])?.det(), SQ, Any, true),
        case("logdet", |x| spd(&x[0])?.logdet(), SQ, Any, true),
        case("slogdet_sign", |x| Ok(x[0].slogdet()?.0), SQ, Any, false),
        case("inverse", |x| spd(&x[0])?.inverse(), SQ, Any, true),
        case("solve", |x| spd(&x[0])?.solve(&x[1]), &[&[2, 3, 3], &[3, 2]], Any, true),
        case(
            "triangular_solve",
            |x| {
                let l = spd(&x[0])?.cholesky()?;
                l.triangular_solve(&x[1], true, true)
            },
            &[&[3, 3], &[2, 3, 2]],
            Any,
            true,
        ),
        case("eigh_values", |x| Ok(spd(&x[0])?.eigh()?.0), SQ, Any, true),
        case(
            "eigh_vectors_squared",
            |x| spd(&x[0])?.eigh()?.1.square(),
            SQ,
            Any,
            true,
        ),
        case("svd_values", |x| Ok(x[0].svd()?.0), &[&[2, 4, 3]], Any, true),
        case("svd_u_squared", |x| x[0].svd()?.1.square(), &[&[2, 4, 3]], Any, true),
        case("qr_r", |x| Ok(x[0].qr()?.1), &[&[4, 3]], Any, true),
        case("lu_u", |x| Ok(x[0].lu()?.1), SQ, Any, true),
        case("matrix_exp", |x| x[0].mul_scalar(0.3)?.matrix_exp(), SQ, Any, true),
        case(
            "lstsq_ridge",
            |x| x[0].lstsq(&x[1], 0.5),
            &[&[5, 3], &[5, 2]],
            Any,
            true,
        ),
        case("pinv", |x| x[0].pinv(None), &[&[4, 3]], Any, true),
        case("matrix_norm_nuc", |x| x[0].matrix_norm(MatrixNorm::Nuc), SQ, Any, true),
        case(
            "igamma",
            |x| Tensor::igamma(&x[0], &x[1]),
            &[&[3, 4], &[4]],
            Positive,
            true,
        ),
        case(
            "betainc",
            |x| Tensor::betainc(&x[0], &x[1], &x[2].mul_scalar(0.3)?),
            &[&[3], &[3], &[3]],
            Positive,
            false,
        ),
        case("erfinv", |x| x[0].erfinv(), &[&[3, 4]], Unit, true),
        case("lgamma", |x| x[0].lgamma(), &[&[3, 4]], Positive, true),
        case(
            "ctc_loss",
            |x| {
                // logits [time 6, batch 2, classes 4], blank 0
                let d = x[0].device();
                let labels = Tensor::from_vec(vec![1i32, 2, 2, 3, 1, 0], &[2, 3])?.to(d)?;
                let ll = Tensor::from_vec(vec![3i32, 2], &[2])?.to(d)?;
                let tl = Tensor::from_vec(vec![6i32, 5], &[2])?.to(d)?;
                Tensor::ctc_loss(&labels, &x[0], &ll, &tl, true, 0)
            },
            &[&[6, 2, 4]],
            Any,
            true,
        ),
    ]
}
