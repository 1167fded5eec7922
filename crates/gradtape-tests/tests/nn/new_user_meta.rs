//! Two models whose training needs second-order gradients, as a new user
//! would write them from the docs, against TensorFlow 2.21 / Keras 3.15.1
//! (`tests/reference/new_user_models5.py` printed the numbers of
//! `tests/data/new_user_models5.txt`):
//!
//! - MAML on sine regression: a 1-8-1 tanh MLP written over its four
//!   weight tensors, two tasks `a sin(x + b)`; per task one inner SGD step
//!   (lr 1/4) from the support set's loss under an inner tape, *inside*
//!   the outer tape, so that the query loss at the adapted weights is
//!   differentiated through the inner gradient (second order); Adam on
//!   the mean query loss;
//! - a Hamiltonian neural network: `H(q, p)` a 2-16-1 tanh MLP, the
//!   vector field `(dH/dp, −dH/dq)` from an inner tape watching the
//!   states, MSE to a spring's field `(p, −q)`; Adam on the weights
//!   (through the gradient with respect to the inputs).
//!
//! Each runs two steps eagerly and as a traced `function`, in float64 at
//! 1e-12 relative (see `new_user_util.rs`) and float32 at `REL32`.

use std::sync::Mutex;

use gradtape::nn::{Activation, Dense, Layer, Module};
use gradtape::optim::Adam;
use gradtape::{DType, GradientTape, Result, Tensor, Variable};

use super::new_user_gpt::DATA;
use super::new_user_physics::dense;
use super::new_user_util::{adam, all_some, fill, set_weights_as, train_both, update, Check, Stepper};

/// float32 against the float64 reference, relative to each vector's
/// largest element: rounding, through two derivatives.
const REL32: f64 = 2e-5;

/// `mean((a - b)²)`.
fn mse(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.sub(b)?.square()?.mean_all()
}

// ---- 1. MAML ----------------------------------------------------------------------

pub(super) struct Maml {
    /// w1 [1, h], b1 [h], w2 [h, 1], b2 [1]
    w: Vec<Variable>,
    inner_lr: f64,
    /// the inner gradient taken as a constant (first-order MAML)
    first_order: bool,
    opt: Mutex<Adam>,
}

impl Maml {
    pub(super) fn new(dt: DType) -> Result<Maml> {
        Maml::sized(8, dt)
    }

    pub(super) fn sized(hidden: usize, dt: DType) -> Result<Maml> {
        let shapes: [&[usize]; 4] = [&[1, hidden], &[hidden], &[hidden, 1], &[1]];
        let m = Maml {
            w: shapes.iter().map(|s| Variable::new(Tensor::zeros(s, dt))).collect(),
            inner_lr: 0.25,
            first_order: false,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.w, 320.0, &[]);
        Ok(m)
    }

    /// The MLP at weights `w` on `x` `[n, 1]`.
    fn net(w: &[Tensor], x: &Tensor) -> Result<Tensor> {
        x.matmul(&w[0])?.add(&w[1])?.tanh()?.matmul(&w[2])?.add(&w[3])
    }

    /// The inner (support) loss and the outer (query) loss of task `t`
    /// of `data` (support x, y, query x, y, each `[tasks, n, 1]`), under
    /// whatever outer tape records.
    fn task(&self, data: &[Tensor], t: usize) -> Result<(Tensor, Tensor)> {
        let part = |k: usize| -> Result<Tensor> {
            let d = &data[k];
            d.narrow(0, t, 1)?.reshape(&d.shape()[1..])
        };
        let inner = GradientTape::new();
        let (w, loss) = inner.record(|| {
            let w: Vec<Tensor> = self.w.iter().map(Variable::read).collect();
            let loss = mse(&Maml::net(&w, &part(0)?)?, &part(1)?)?;
            Ok((w, loss))
        })?;
        let g = all_some(inner.gradient(&loss, &self.w)?, "MAML inner step");
        let fast = w
            .iter()
            .zip(&g)
            .map(|(w, g)| {
                let g = if self.first_order { g.stop_gradient() } else { g.clone() };
                w.sub(&g.mul_scalar(self.inner_lr)?)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((loss, mse(&Maml::net(&fast, &part(2)?)?, &part(3)?)?))
    }
}

impl Stepper for Maml {
    fn vars(&self) -> Vec<Variable> {
        self.w.clone()
    }

    /// outputs the inner losses, the query losses and their mean.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let tape = GradientTape::new();
        let outs = tape.record(|| {
            let (inner, outer): (Vec<Tensor>, Vec<Tensor>) = (0..data[0].shape()[0])
                .map(|t| self.task(data, t))
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .unzip();
            let inner = Tensor::stack(&inner.iter().collect::<Vec<_>>(), 0)?;
            let outer = Tensor::stack(&outer.iter().collect::<Vec<_>>(), 0)?;
            let loss = outer.mean_all()?;
            Ok(vec![inner, outer, loss])
        })?;
        let loss = outs[2].clone();
        update(&tape, &loss, &self.w, &self.opt, outs)
    }
}

/// Support x, y and query x, y (`[2, n, 1]` each) of two tasks
/// `a sin(x + b)`.
pub(super) fn sine_tasks(n: usize) -> Result<Vec<Tensor>> {
    let a = Tensor::from_vec(vec![1.0, 0.5], &[2, 1, 1])?;
    let b = Tensor::from_vec(vec![0.25, 1.5], &[2, 1, 1])?;
    let y = |x: &Tensor| x.add(&b)?.sin()?.mul(&a);
    let (xs, xq) = (fill(&[2, n, 1], 0.2, 6.0), fill(&[2, n, 1], 1.3, 6.0));
    let (ys, yq) = (y(&xs)?, y(&xq)?);
    Ok(vec![xs, ys, xq, yq])
}

#[test]
fn maml_second_order_through_the_inner_step_matches_tensorflow() -> Result<()> {
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    let tasks = sine_tasks(5)?;
    train_both(
        &mut c64,
        &mut c32,
        "maml",
        &["inner", "outer", "loss"],
        Maml::new,
        &tasks,
    )?;
    // the second-order term is there: first-order MAML (the inner
    // gradient a constant) gives another outer gradient
    let full = all_some(Maml::new(DType::F64)?.step(&tasks)?, "MAML");
    let first = all_some(
        Maml {
            first_order: true,
            ..Maml::new(DType::F64)?
        }
        .step(&tasks)?,
        "first-order MAML",
    );
    let (f, g) = (full[3].to_vec_f64(), first[3].to_vec_f64());
    let diff = f.iter().zip(&g).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(diff > 1e-3, "first-order MAML's gradient {g:?} is the full one's {f:?}");
    c64.finish("maml f64", 160);
    c32.finish("maml f32", 160);
    Ok(())
}

// ---- 2. Hamiltonian neural network ----------------------------------------------------

pub(super) struct Hnn {
    l1: Dense,
    l2: Dense,
    opt: Mutex<Adam>,
}

impl Hnn {
    fn new(dt: DType) -> Result<Hnn> {
        Hnn::sized(16, dt)
    }

    pub(super) fn sized(hidden: usize, dt: DType) -> Result<Hnn> {
        let m = Hnn {
            l1: dense(2, hidden, Some(Activation::Tanh), dt)?,
            l2: dense(hidden, 1, None, dt)?,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 330.0, &[]);
        Ok(m)
    }

    /// The learned field `(dH/dp, −dH/dq)` at states `x` `[n, 2]`.
    fn field(&self, x: &Tensor) -> Result<Tensor> {
        let inner = GradientTape::new();
        let h = inner.record(|| {
            inner.watch(x);
            self.l2.forward(&self.l1.forward(x, true)?, true)?.sum_all()
        })?;
        let dh = inner.gradient(&h, x)?.expect("H depends on the states");
        Tensor::concat(&[&dh.narrow(1, 1, 1)?, &dh.narrow(1, 0, 1)?.neg()?], 1)
    }
}

impl Stepper for Hnn {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.l1.trainable_variables();
        v.extend(self.l2.trainable_variables());
        v
    }

    /// data: states [n, 2] and the true field [n, 2]; outputs the field
    /// and the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let (field, loss) = tape.record(|| {
            let field = self.field(&data[0])?;
            let loss = mse(&field, &data[1])?;
            Ok((field, loss))
        })?;
        update(&tape, &loss, &vars, &self.opt, vec![field, loss.clone()])
    }
}

/// States `(q, p)` and a spring's field `(p, −q)` there.
pub(super) fn spring(n: usize) -> Result<[Tensor; 2]> {
    let x = fill(&[n, 2], 0.6, 3.0);
    let dx = Tensor::concat(&[&x.narrow(1, 1, 1)?, &x.narrow(1, 0, 1)?.neg()?], 1)?;
    Ok([x, dx])
}

#[test]
fn hamiltonian_network_trained_through_its_input_gradient_matches_tensorflow() -> Result<()> {
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    train_both(&mut c64, &mut c32, "hnn", &["field", "loss"], Hnn::new, &spring(8)?)?;
    c64.finish("hnn f64", 200);
    c32.finish("hnn f32", 200);
    Ok(())
}
