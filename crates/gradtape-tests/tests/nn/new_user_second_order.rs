//! Second-order training code a new user would write, against TensorFlow
//! 2.21 / Keras 3.15.1 in float64 (`tests/reference/new_user_models2.py`,
//! numbers in `tests/data/new_user_models2.txt`):
//!
//! - Newton's method for L2-regularised logistic regression: the Hessian a
//!   `jacobian` of the gradient taken on an inner tape, the step a `solve`;
//!   two steps, eagerly and as a traced `function` called twice; and the
//!   `hessian` helper at the first point;
//! - a Hessian-vector product of a small MLP's loss forward over reverse (a
//!   `ForwardAccumulator` watching the weights around the tape), eagerly
//!   and traced;
//! - per-example gradients of the same MLP: a `jacobian` of the vector of
//!   per-example losses (as TensorFlow's reference), and `vmap` of a
//!   closure that takes one example's gradient.
//!
//! Compared at 1e-12 relative (see `new_user_util.rs`).

use gradtape::nn::{Activation, Dense, Layer, Module};
use gradtape::{function, hessian, vmap, ForwardAccumulator, GradientTape, Result, Tensor, Unconnected, Variable};

use super::new_user_util::{all_some, dense, eager_vs_traced, fill, names, print_times, set_weights, Check};

const LAM: f64 = 0.0625;

fn newton_data() -> Result<(Tensor, Tensor)> {
    let x = fill(&[16, 5], 0.15, 3.0);
    let y = fill(&[16], 2.6, 1.0)
        .gt(&Tensor::scalar(0.0f64))?
        .cast(gradtape::DType::F64)?;
    Ok((x, y))
}

/// mean(softplus(X w) - y X w) + lam/2 |w|^2.
fn logistic(x: &Tensor, y: &Tensor, w: &Tensor) -> Result<Tensor> {
    let xw = x.matvec(w)?;
    xw.softplus()?
        .sub(&y.mul(&xw)?)?
        .mean_all()?
        .add(&w.square()?.sum_all()?.mul_scalar(LAM / 2.0)?)
}

/// f, g, H at w, then w <- w - H^-1 g.
fn newton_step(w: &Variable, x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    let outer = GradientTape::new();
    let (f, g) = outer.record(|| {
        let inner = GradientTape::new();
        let f = inner.record(|| logistic(x, y, &w.read()))?;
        let g = inner.gradient(&f, w)?.expect("df/dw");
        Ok((f, g))
    })?;
    let h = outer.jacobian(&g, w)?.expect("d2f/dw2");
    let step = h.solve(&g.expand_dims(-1)?)?.squeeze(&[-1])?;
    w.assign_sub(&step)?;
    Ok(vec![f, g, h, w.read()])
}

#[test]
fn newton_method_with_a_hessian_matches_tensorflow() -> Result<()> {
    let (x, y) = newton_data()?;
    let mut check = Check::new();
    for traced in [false, true] {
        let what = if traced { "traced" } else { "eager" };
        let w = Variable::new(fill(&[5], 0.55, 1.0));
        let f = {
            let w = w.clone();
            function(move |(x, y): &(Tensor, Tensor)| newton_step(&w, x, y))
        };
        for s in 1..=2 {
            let got = if traced {
                f.call(&(x.clone(), y.clone()))?
            } else {
                newton_step(&w, &x, &y)?
            };
            check.all(what, &names(&format!("newton{s}"), &["f", "g", "h", "w"], &[]), &got);
        }
        if traced {
            assert_eq!(f.trace_count(), 1);
        }
    }
    // the `hessian` helper at the first point, eagerly and traced
    let w0 = fill(&[5], 0.55, 1.0);
    let h = |(x, y, w): &(Tensor, Tensor, Tensor)| hessian(|w| logistic(x, y, w), w);
    let args = (x.clone(), y.clone(), w0.clone());
    check.one("eager hessian", "newton1_h", Some(&h(&args)?));
    check.one("traced hessian", "newton1_h", Some(&function(h).call(&args)?));
    check.finish("newton", 170);
    Ok(())
}

struct Mlp {
    l1: Dense,
    l2: Dense,
}

impl Mlp {
    fn new() -> Result<Mlp> {
        let m = Mlp {
            l1: dense(3, 4, Some(Activation::Tanh), true)?,
            l2: dense(4, 1, None, true)?,
        };
        set_weights(&m.vars(), 90.0);
        Ok(m)
    }

    fn vars(&self) -> Vec<Variable> {
        let mut v = self.l1.trainable_variables();
        v.extend(self.l2.trainable_variables());
        v
    }

    fn predict(&self, x: &Tensor) -> Result<Tensor> {
        self.l2.call(&self.l1.call(x)?)
    }
}

fn mlp_data() -> (Tensor, Tensor) {
    (fill(&[6, 3], 0.25, 2.0), fill(&[6, 1], 1.45, 1.0))
}

/// The loss, then per weight its gradient and H v, forward over reverse.
fn hvp_all(m: &Mlp, x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    let vars = m.vars();
    let tangents: Vec<Tensor> = vars
        .iter()
        .enumerate()
        .map(|(j, v)| fill(&v.shape(), 95.0 + j as f64, 1.0))
        .collect();
    let acc = ForwardAccumulator::watching(&vars, &tangents)?;
    let (loss, grads) = acc.record(|| {
        let tape = GradientTape::new();
        let loss = tape.record(|| m.predict(x)?.sub(y)?.square()?.mean_all())?;
        let grads = all_some(tape.gradient(&loss, &vars)?, "hvp");
        Ok((loss, grads))
    })?;
    let hv = acc.jvp_with(&grads, Unconnected::Zero)?;
    let mut out = vec![loss];
    for (g, h) in grads.into_iter().zip(hv) {
        out.push(g);
        out.push(h.expect("zeros for unconnected"));
    }
    Ok(out)
}

fn hvp_names() -> Vec<String> {
    let mut n = vec!["hvp_loss".to_string()];
    for j in 0..4 {
        n.push(format!("hvp_grad{j}"));
        n.push(format!("hvp{j}"));
    }
    n
}

#[test]
fn hessian_vector_product_forward_over_reverse_matches_tensorflow() -> Result<()> {
    let (x, y) = mlp_data();
    let m = std::sync::Arc::new(Mlp::new()?);
    let mut check = Check::new();
    check.all("eager", &hvp_names(), &hvp_all(&m, &x, &y)?);
    let f = {
        let m = m.clone();
        function(move |(x, y): &(Tensor, Tensor)| hvp_all(&m, x, y))
    };
    for _ in 0..2 {
        check.all("traced", &hvp_names(), &f.call(&(x.clone(), y.clone()))?);
    }
    check.finish("hvp", 40);
    Ok(())
}

/// Per-example gradients as a jacobian of the per-example losses.
fn per_example_jacobian(m: &Mlp, x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    let vars = m.vars();
    let tape = GradientTape::new();
    let losses = tape.record(|| m.predict(x)?.sub(y)?.square()?.squeeze(&[1]))?;
    Ok(all_some(tape.jacobian(&losses, &vars)?, "per-example jacobian"))
}

#[test]
fn per_example_gradients_match_tensorflow() -> Result<()> {
    let (x, y) = mlp_data();
    let m = std::sync::Arc::new(Mlp::new()?);
    let want: Vec<String> = (0..4).map(|j| format!("per_example{j}")).collect();
    let mut check = Check::new();
    check.all("eager jacobian", &want, &per_example_jacobian(&m, &x, &y)?);
    let f = {
        let m = m.clone();
        function(move |(x, y): &(Tensor, Tensor)| per_example_jacobian(&m, x, y))
    };
    for _ in 0..2 {
        check.all("traced jacobian", &want, &f.call(&(x.clone(), y.clone()))?);
    }
    // vmap of one example's gradient: the closure sees x [3] and y [1]
    let per_example = {
        let m = m.clone();
        vmap(
            move |a: &[Tensor]| {
                let vars = m.vars();
                let tape = GradientTape::new();
                let loss = tape.record(|| m.predict(&a[0].expand_dims(0)?)?.sub(&a[1])?.square()?.sum_all())?;
                Ok(all_some(tape.gradient(&loss, &vars)?, "vmap of grad"))
            },
            &[Some(0)],
            &[Some(0)],
        )
    };
    for _ in 0..2 {
        check.all("vmap of grad", &want, &per_example.call(&[x.clone(), y.clone()])?);
    }
    assert_eq!(per_example.trace_count(), 1);
    check.finish("per-example", 150);
    Ok(())
}

/// Eager and traced time (a release-mode measurement, printed; run with
/// `--ignored --nocapture`).
#[test]
#[ignore]
fn second_order_eager_vs_traced_time() -> Result<()> {
    let (x, y) = newton_data()?;
    let w = Variable::new(fill(&[5], 0.55, 1.0));
    let w2 = Variable::new(fill(&[5], 0.55, 1.0));
    let f = function(move |(x, y): &(Tensor, Tensor)| newton_step(&w2, x, y));
    let data = (x.clone(), y.clone());
    let (eager, traced) = eager_vs_traced(200, || newton_step(&w, &x, &y).map(drop), || f.call(&data).map(drop));
    print_times("newton", "16 x 5 logistic regression", eager, traced);
    let (x, y) = mlp_data();
    let m = std::sync::Arc::new(Mlp::new()?);
    let mc = m.clone();
    let f = function(move |(x, y): &(Tensor, Tensor)| hvp_all(&mc, x, y));
    let data = (x.clone(), y.clone());
    let (eager, traced) = eager_vs_traced(200, || hvp_all(&m, &x, &y).map(drop), || f.call(&data).map(drop));
    print_times("hvp", "MLP 3 -> 4 -> 1, batch 6", eager, traced);
    let mc = m.clone();
    let f = function(move |(x, y): &(Tensor, Tensor)| per_example_jacobian(&mc, x, y));
    let (eager, traced) = eager_vs_traced(
        200,
        || per_example_jacobian(&m, &x, &y).map(drop),
        || f.call(&data).map(drop),
    );
    print_times("per-example jacobian", "MLP 3 -> 4 -> 1, batch 6", eager, traced);
    Ok(())
}
