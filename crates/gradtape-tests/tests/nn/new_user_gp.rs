//! Gaussian-process regression as a new user would write it, against
//! TensorFlow 2.21 / Keras 3.15.1 (`tests/reference/new_user_models4.py`
//! printed the numbers of `tests/data/new_user_models4.txt`): an ARD
//! squared-exponential kernel whose log length scales, log signal scale and
//! log noise variance are plain variables, fitted by the negative log
//! marginal likelihood: `cholesky`, two `triangular_solve`s for K⁻¹y, the
//! log-determinant from the factor's `diag_part`; the predictive mean by
//! `cholesky_solve` (TensorFlow's `tf.linalg.cholesky_solve`, which
//! gradtape lacked) and the predictive variance; Adam.
//!
//! Two steps eagerly and as a traced `function` (called twice, traced
//! once), in float64 at 1e-12 relative (see `new_user_util.rs`) and in
//! float32 against the same reference at `REL32`.

use std::f64::consts::PI;
use std::sync::Mutex;

use gradtape::optim::Adam;
use gradtape::{DType, GradientTape, Result, Tensor, Variable};

use super::new_user_rl::DATA;
use super::new_user_util::{fill, set_weights_as, train_both, update, Check, Stepper};

/// float32 against the float64 reference, relative to each vector's
/// largest element: rounding through the Cholesky factor of the 10x10
/// kernel matrix and its solves (observed up to 2e-6).
const REL32: f64 = 1e-5;

pub(super) struct Gp {
    log_ls: Variable,
    log_sf: Variable,
    log_sn: Variable,
    opt: Mutex<Adam>,
}

impl Gp {
    pub(super) fn new(dt: DType) -> Result<Gp> {
        let m = Gp {
            log_ls: Variable::new(Tensor::zeros(&[2], dt)),
            log_sf: Variable::new(Tensor::zeros(&[], dt)),
            log_sn: Variable::new(Tensor::zeros(&[], dt)),
            opt: Mutex::new(
                Adam::new(2f64.powi(-4))
                    .betas(0.875, 1.0 - 2f64.powi(-10))?
                    .epsilon(2f64.powi(-20))?,
            ),
        };
        set_weights_as(&m.vars(), 240.0, &[]);
        Ok(m)
    }

    /// The squared-exponential kernel between the rows of `a` [n, 2] and
    /// `b` [m, 2].
    fn kernel(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let ls = self.log_ls.read().exp()?;
        let d = a.expand_dims(1)?.sub(&b.expand_dims(0)?)?.div(&ls)?;
        let sf2 = self.log_sf.read().mul_scalar(2.0)?.exp()?;
        d.square()?.sum(&[-1], false)?.mul_scalar(-0.5)?.exp()?.mul(&sf2)
    }
}

impl Stepper for Gp {
    fn vars(&self) -> Vec<Variable> {
        vec![self.log_ls.clone(), self.log_sf.clone(), self.log_sn.clone()]
    }

    /// data: x [n, 2], y [n, 1], test points [m, 2]; outputs the Cholesky
    /// factor, the predictive mean and variance, the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let (x, y, xs) = (&data[0], &data[1], &data[2]);
        let n = x.shape()[0];
        let vars = self.vars();
        let tape = GradientTape::new();
        let out = tape.record(|| {
            let noise = self.log_sn.read().exp()?.add_scalar(2f64.powi(-20))?;
            let k = self.kernel(x, x)?.add(&Tensor::eye(n, x.dtype()).mul(&noise)?)?;
            let chol = k.cholesky()?;
            let a1 = chol.triangular_solve(y, true, false)?;
            let alpha = chol.triangular_solve(&a1, true, true)?;
            let alpha2 = chol.cholesky_solve(y)?;
            let logdet = chol.diag_part()?.log()?.sum_all()?.mul_scalar(2.0)?;
            let nll = y
                .mul(&alpha)?
                .sum_all()?
                .mul_scalar(0.5)?
                .add(&logdet.mul_scalar(0.5)?)?
                .add_scalar(0.5 * n as f64 * (2.0 * PI).ln())?;
            let ks = self.kernel(x, xs)?;
            let mean = ks.matmul_with(&alpha2, true, false)?;
            let v = chol.triangular_solve(&ks, true, false)?;
            let sf2 = self.log_sf.read().mul_scalar(2.0)?.exp()?;
            let var = sf2.sub(&v.square()?.sum(&[0], false)?)?;
            Ok(vec![chol, mean, var, nll])
        })?;
        let loss = out[3].clone();
        update(&tape, &loss, &vars, &self.opt, out)
    }
}

pub(super) fn gp_data(n: usize, m: usize) -> Vec<Tensor> {
    vec![
        fill(&[n, 2], 0.2, 3.0),
        fill(&[n, 1], 1.4, 2.0),
        fill(&[m, 2], 2.6, 3.0),
    ]
}

#[test]
fn gaussian_process_marginal_likelihood_fit_matches_tensorflow() -> Result<()> {
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    train_both(
        &mut c64,
        &mut c32,
        "gp",
        &["chol", "mean", "var", "loss"],
        Gp::new,
        &gp_data(10, 4),
    )?;
    c64.finish("gp f64", 300);
    c32.finish("gp f32", 300);
    Ok(())
}
