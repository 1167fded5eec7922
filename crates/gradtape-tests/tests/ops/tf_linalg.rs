//! The linear-algebra ops against TensorFlow 2.21 (f64) on small
//! matrices (general, symmetric positive definite, tall, wide, batched,
//! the identity, near-singular): values and the gradients of a weighted
//! sum of the outputs. The numbers are TensorFlow's, printed by
//! `tests/reference/tf_linalg.py` into `tests/data/tf_linalg.txt`. The
//! sign-ambiguous factors (the SVD's U and V, eigenvectors) are left out
//! there; QR's signs are compared (this crate's follow LAPACK's, as
//! TensorFlow's).

use gradtape::{GradientTape, MatrixNorm, Result, Tensor};

use super::tf_util::{all_agree, floats, magnitude, report, weighted};

const DATA: &str = include_str!("../data/tf_linalg.txt");

fn op(name: &str, a: &[Tensor]) -> Result<Vec<Tensor>> {
    let one = |t: Result<Tensor>| t.map(|t| vec![t]);
    match name {
        "det" => one(a[0].det()),
        "slogdet" => {
            let (s, l) = a[0].slogdet()?;
            Ok(vec![s, l])
        }
        "inverse" => one(a[0].inverse()),
        "matrix_exp" => one(a[0].matrix_exp()),
        "trace" => one(a[0].trace()),
        "solve" => one(a[0].solve(&a[1])),
        "triangular_solve_lower" => one(a[0].triangular_solve(&a[1], true, false)),
        "triangular_solve_upper_adjoint" => one(a[0].triangular_solve(&a[1], false, true)),
        "cholesky" => one(a[0].cholesky()),
        "logdet" => one(a[0].logdet()),
        "eigh_values" => one(Ok(a[0].eigh()?.0)),
        "qr" => {
            let (q, r) = a[0].qr()?;
            Ok(vec![q, r])
        }
        "svd_values" => one(Ok(a[0].svd()?.0)),
        "pinv" => one(a[0].pinv(None)),
        "matrix_norm_fro" => one(a[0].matrix_norm(MatrixNorm::Fro)),
        "matrix_norm_one" => one(a[0].matrix_norm(MatrixNorm::One)),
        "matrix_norm_inf" => one(a[0].matrix_norm(MatrixNorm::Inf)),
        "matrix_norm_two" => one(a[0].matrix_norm(MatrixNorm::Two)),
        "matrix_norm_nuc" => one(a[0].matrix_norm(MatrixNorm::Nuc)),
        "lstsq" => one(a[0].lstsq(&a[1], 0.0)),
        "lstsq_l2" => one(a[0].lstsq(&a[1], 0.1)),
        "matmul" | "matmul_batched_broadcast" => one(a[0].matmul(&a[1])),
        _ => panic!("no op {name}"),
    }
}

#[test]
fn linalg_ops_match_tensorflow() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for line in DATA.lines() {
        let [name, shapes, inputs, outputs, grads] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        let xs: Vec<Tensor> = shapes
            .split(';')
            .zip(inputs.split(';'))
            .map(|(s, v)| {
                let shape: Vec<usize> = s.split('x').map(|d| d.parse().unwrap()).collect();
                Tensor::from_vec(floats(v).unwrap(), &shape)
            })
            .collect::<Result<_>>()?;
        let tape = GradientTape::new();
        let (ys, s) = tape.record(|| {
            tape.watch(&xs);
            let ys = op(name, &xs)?;
            let mut s = Tensor::scalar(0.0f64);
            for y in &ys {
                s = s.add(&weighted(y)?)?;
            }
            Ok((ys, s))
        })?;
        let g = tape.gradient(&s, &xs)?;
        // the near-singular matrix amplifies roundoff by its condition
        // number (1e7): its results agree to 1e-6 of their scale
        let rel = if inputs.contains("6.000001") { 1e-6 } else { 1e-11 };
        for (i, (y, w)) in ys.iter().zip(outputs.split(';')).enumerate() {
            checked += 1;
            let got = y.to_vec::<f64>()?;
            if !{
                let w = floats(w).unwrap();
                all_agree(&got, &w, rel, magnitude(&w))
            } {
                bad.push(format!("{name} {shapes} output {i}: got {got:?}, TensorFlow {w}"));
            }
        }
        for (i, (gi, w)) in g.iter().zip(grads.split(';')).enumerate() {
            checked += 1;
            let got = gi.as_ref().map(|t| t.to_vec::<f64>().unwrap());
            let ok = match (&got, floats(w)) {
                (Some(a), Some(b)) => all_agree(a, &b, rel, magnitude(&b)),
                (None, None) => true,
                (None, Some(b)) => b.iter().all(|&v| v == 0.0),
                (Some(_), None) => false,
            };
            if !ok {
                bad.push(format!("{name} {shapes} d/dx{i}: got {got:?}, TensorFlow {w}"));
            }
        }
    }
    report(checked, 150, &bad);
    Ok(())
}
