//! The losses and normalisations against TensorFlow 2.21 and Keras 3.15
//! (f64) on rows with extreme logits (±inf, NaN, huge), constant rows,
//! zeros and ties: values and the gradients of a weighted sum, for every
//! operand. The numbers are TensorFlow's, printed by
//! `tests/reference/tf_nn.py` into `tests/data/tf_nn.txt`; deliberate
//! differences are listed in [`KNOWN`] with their reasons.

use gradtape::{DType, GradientTape, Result, Tensor};

use super::tf_util::{agrees, floats, magnitude, report, weighted};

const DATA: &str = include_str!("../data/tf_nn.txt");

fn op(name: &str, a: &[Tensor]) -> Result<Tensor> {
    match name {
        "softmax_xent" => Tensor::softmax_cross_entropy_with_logits(&a[0], &a[1]),
        "sparse_xent" => Tensor::sparse_softmax_cross_entropy_with_logits(&a[0].cast(DType::I64)?, &a[1]),
        "l2_normalize" => a[0].l2_normalize(&[-1], 1e-12),
        "layer_normalization" => a[0].layer_normalization(&[-1], None, None, 1e-3),
        "rms_normalization" => a[0].rms_normalization(&[-1], None, 1e-6),
        "moments_mean" => Ok(a[0].moments(&[1], false)?.0),
        "moments_variance" => Ok(a[0].moments(&[1], false)?.1),
        "sigmoid_xent" => Tensor::sigmoid_cross_entropy_with_logits(&a[0], &a[1]),
        "weighted_xent" => Tensor::weighted_cross_entropy_with_logits(&a[0], &a[1], 3.0),
        "log_poisson" => Tensor::log_poisson_loss(&a[0], &a[1], false),
        "log_poisson_full" => Tensor::log_poisson_loss(&a[0], &a[1], true),
        _ => panic!("no op {name}"),
    }
}

#[test]
fn losses_and_normalisations_match_tensorflow() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for line in DATA.lines() {
        let [name, shape, inputs, value, grads] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        let shape: Vec<usize> = shape.split(',').map(|d| d.parse().unwrap()).collect();
        let raw: Vec<Vec<f64>> = inputs.split(';').map(|s| floats(s).unwrap()).collect();
        let xs: Vec<Tensor> = raw
            .iter()
            .map(|v| {
                // sparse labels: one per row
                let s = if v.len() == shape.iter().product::<usize>() {
                    shape.clone()
                } else {
                    vec![v.len()]
                };
                Tensor::from_vec(v.clone(), &s)
            })
            .collect::<Result<_>>()?;
        let diff: Vec<Tensor> = if name == "sparse_xent" {
            vec![xs[1].clone()]
        } else {
            xs.clone()
        };
        let tape = GradientTape::new();
        let (y, s) = tape.record(|| {
            tape.watch(&diff);
            let y = op(name, &xs)?;
            let s = weighted(&y)?;
            Ok((y, s))
        })?;
        let mut g: Vec<Option<Tensor>> = tape.gradient(&s, &diff)?;
        if name == "sparse_xent" {
            g.insert(0, None);
        }
        let mut compare = |what: String, got: Option<Vec<f64>>, want: Option<Vec<f64>>| {
            checked += 1;
            let at = &raw;
            match (&got, &want) {
                (Some(gv), Some(wv)) => {
                    // a row op's roundoff is relative to the row's largest
                    // finite magnitude (TensorFlow gives 7e-15 for a layer
                    // norm's middle gradient of a constant row, this crate 0)
                    let rows = shape.len() == 2;
                    let scale = if rows { magnitude(wv) } else { 0.0 };
                    for (i, (a, b)) in gv.iter().zip(wv).enumerate() {
                        if !agrees(*a, *b, 1e-12, scale) && !known(name, &what, at, i) {
                            // the operands of element i (of its row for row ops)
                            let inputs: Vec<f64> = if rows {
                                at[at.len() - 1].clone()
                            } else {
                                at.iter().map(|v| v[i]).collect()
                            };
                            bad.push(format!(
                                "{name} {what} [{i}] at {inputs:?}: got {a:e}, TensorFlow {b:e}"
                            ));
                        }
                    }
                }
                (None, None) => {}
                (None, Some(v)) | (Some(v), None) if v.iter().all(|&x| x == 0.0) => {}
                _ if known(name, &what, at, 0) => {}
                _ => bad.push(format!("{name} {what}: got {got:?}, TensorFlow {want:?}")),
            }
        };
        compare("value".into(), Some(y.to_vec::<f64>()?), floats(value));
        for (i, w) in grads.split(';').enumerate() {
            compare(
                format!("d/dx{i}"),
                g[i].as_ref().map(|t| t.to_vec::<f64>().unwrap()),
                floats(w),
            );
        }
    }
    report(checked, 400, &bad);
    Ok(())
}

/// Where this crate deliberately differs from TensorFlow: (op, what,
/// which inputs and element, why).
type Known = (&'static str, &'static str, fn(&[Vec<f64>], usize) -> bool, &'static str);
const KNOWN: &[Known] = &[
    (
        "moments_variance",
        "d/dx0",
        |at, _| at[0].iter().any(|v| v.is_infinite()),
        "the variance of a row holding ±inf is NaN, and so is this crate's gradient; TensorFlow's is ±inf at the finite elements",
    ),
    (
        "weighted_xent",
        "value",
        |at, i| at[0][i] == 0.0 && at[1][i] == -30.0,
        "softplus(-30) = 9.3576e-14, which this crate gives; TensorFlow's (1 - z)·x + ... cancels: -30 + (30 + 9.36e-14) = 9.237e-14",
    ),
    (
        "weighted_xent",
        "value",
        |at, i| at[0][i] != 0.0 && at[1][i] == f64::NEG_INFINITY,
        "-z·log σ(-inf) = inf; TensorFlow's (1 - z)·x is 0 · -inf = NaN at z = 1 and adds -inf + inf elsewhere",
    ),
    (
        "weighted_xent",
        "d/dx1",
        |at, i| at[1][i] == 0.0,
        "the derivative at x = 0 is (1 - z)/2 - pos_weight·z/2; TensorFlow's formula differentiates |x| and max(-x, 0) at their kinks, and gives 1 - z",
    ),
    (
        "log_poisson_full",
        "d/dx0",
        |at, i| at[0][i] == 0.0,
        "the Stirling term is 0 for targets <= 1; TensorFlow's where() takes the gradient of log(0) from the branch it does not take (0 · inf = NaN)",
    ),
];

fn known(name: &str, what: &str, at: &[Vec<f64>], i: usize) -> bool {
    KNOWN
        .iter()
        .any(|(n, w, which, _)| *n == name && *w == what && which(at, i))
}

/// The three composites added for TensorFlow users (`l2_normalize`, the
/// weighted cross-entropy, the Poisson loss) traced as eager: values and
/// both gradients on the data's grids, to 1e-12.
#[test]
fn new_losses_traced_equal_eager() -> Result<()> {
    let step = |name: &'static str| {
        move |a: &Vec<Tensor>| -> Result<Vec<Tensor>> {
            let tape = GradientTape::new();
            let (y, s) = tape.record(|| {
                tape.watch(a);
                let y = op(name, a)?;
                let s = weighted(&y)?;
                Ok((y, s))
            })?;
            let g = tape.gradient(&s, a)?;
            Ok(std::iter::once(y).chain(g.into_iter().flatten()).collect())
        }
    };
    let mut seen = 0;
    for line in DATA.lines() {
        let [name, shape, inputs, ..] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        let name: &'static str = match name {
            "l2_normalize" => "l2_normalize",
            "weighted_xent" => "weighted_xent",
            "log_poisson_full" => "log_poisson_full",
            _ => continue,
        };
        let shape: Vec<usize> = shape.split(',').map(|d| d.parse().unwrap()).collect();
        let args: Vec<Tensor> = inputs
            .split(';')
            .map(|v| Tensor::from_vec(floats(v).unwrap(), &shape))
            .collect::<Result<_>>()?;
        let eager = step(name)(&args)?;
        let traced = gradtape::function(step(name)).call(&args)?;
        assert_eq!(eager.len(), traced.len(), "{name}");
        for (e, t) in eager.iter().zip(&traced) {
            let (e, t) = (e.to_vec::<f64>()?, t.to_vec::<f64>()?);
            assert!(
                e.iter().zip(&t).all(|(a, b)| agrees(*b, *a, 1e-12, 0.0)),
                "{name}: traced {t:?}, eager {e:?}"
            );
        }
        seen += 1;
    }
    assert!(seen > 10, "{seen} cases");
    Ok(())
}
