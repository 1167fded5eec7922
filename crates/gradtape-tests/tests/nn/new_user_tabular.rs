//! A tabular model a new user would write, against TensorFlow 2.21 / Keras
//! 3.15.1 (`tests/reference/new_user_models3.py`, numbers in
//! `tests/data/new_user_models3.txt`): two categorical columns through
//! `Embedding`s (5 values in 3 dims, 4 in 2; ids repeated within the
//! batch, so the sparse gradients sum per row) concatenated with 3 numeric
//! features, Dense(8->6, no bias), `BatchNorm` in training mode (momentum
//! 7/8, epsilon 1e-3), relu, Dense(6->1) logit, binary cross-entropy from
//! logits; Adam. Two steps eagerly and as a traced `function` (called
//! twice, traced once), in float64 at 1e-12 relative (see
//! `new_user_util.rs`) and float32 against the same reference at `REL32`;
//! then the moving statistics, and inference (the moving statistics,
//! unchanged by it), eager and traced.

use std::sync::Mutex;

use gradtape::nn::{BatchNorm, Dense, Embedding, Initializer, Layer};
use gradtape::optim::Adam;
use gradtape::{function, DType, GradientTape, Result, Rng, Tensor, Variable};

use super::new_user_physics::dense;
use super::new_user_util::{adam, fill, set_weights_as, train_both, update, Check, Stepper};

const DATA: &str = include_str!("../data/new_user_models3.txt");

/// float32 against the float64 reference, relative to each vector's
/// largest element.
const REL32: f64 = 1e-4;

struct Tabular {
    e1: Embedding,
    e2: Embedding,
    d1: Dense,
    bn: BatchNorm,
    d2: Dense,
    opt: Mutex<Adam>,
}

impl Tabular {
    fn new(dt: DType) -> Result<Tabular> {
        let rng = &mut Rng::new(0);
        let m = Tabular {
            e1: Embedding::with_init(5, 3, Initializer::Zeros, dt, rng)?,
            e2: Embedding::with_init(4, 2, Initializer::Zeros, dt, rng)?,
            d1: Dense::builder(8, 6).use_bias(false).dtype(dt).build(rng)?,
            bn: BatchNorm::builder(6).momentum(0.875).epsilon(1e-3).dtype(dt).build()?,
            d2: dense(6, 1, None, dt)?,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 110.0, &[3]);
        Ok(m)
    }

    /// The logits and the loss of a batch `data` = (category 1, category 2,
    /// numeric features, labels).
    fn forward(&self, data: &[Tensor], training: bool) -> Result<(Tensor, Tensor)> {
        let h = Tensor::concat(
            &[
                &self.e1.forward(&data[0], training)?,
                &self.e2.forward(&data[1], training)?,
                &data[2],
            ],
            1,
        )?;
        let h = self.bn.forward(&self.d1.forward(&h, training)?, training)?.relu()?;
        let logits = self.d2.forward(&h, training)?;
        let loss = Tensor::sigmoid_cross_entropy_with_logits(&data[3], &logits)?.mean_all()?;
        Ok((logits, loss))
    }
}

impl Stepper for Tabular {
    fn vars(&self) -> Vec<Variable> {
        let layers: [&dyn Layer; 5] = [&self.e1, &self.e2, &self.d1, &self.bn, &self.d2];
        layers.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let (logits, loss) = tape.record(|| self.forward(data, true))?;
        update(&tape, &loss, &vars, &self.opt, vec![logits, loss.clone()])
    }
}

#[test]
fn tabular_embeddings_batch_norm_match_tensorflow() -> Result<()> {
    let c1 = Tensor::vector(&[0i64, 3, 1, 3, 4, 0, 3, 2]);
    let c2 = Tensor::vector(&[1i64, 1, 0, 3, 2, 1, 0, 1]);
    let num = fill(&[8, 3], 2.6, 2.0);
    let y = Tensor::from_vec(vec![1.0f64, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0], &[8, 1])?;
    let data = [c1, c2, num, y];
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    let runs = train_both(&mut c64, &mut c32, "tabular", &["logits", "loss"], Tabular::new, &data)?;
    for (what, m) in runs.models {
        let check = if what.ends_with("F64") { &mut c64 } else { &mut c32 };
        check.one(&what, "tabular_moving_mean", Some(&m.bn.moving_mean().read()));
        check.one(&what, "tabular_moving_variance", Some(&m.bn.moving_variance().read()));
        let data: Vec<Tensor> = data
            .iter()
            .map(|t| {
                if t.dtype().is_float() {
                    t.cast(m.bn.moving_mean().dtype())
                } else {
                    Ok(t.clone())
                }
            })
            .collect::<Result<_>>()?;
        let before = m.bn.moving_mean().read().to_vec_f64();
        let (logits, loss) = if what.starts_with("traced") {
            // the training flag a static argument, as a Python bool given
            // to a tf.function
            let mi = m.clone();
            let f = function(move |(d, training): &(Vec<Tensor>, bool)| {
                let (l, s) = mi.forward(d, *training)?;
                Ok(vec![l, s])
            });
            let out = f.call(&(data.clone(), false))?;
            assert_eq!(f.trace_count(), 1);
            (out[0].clone(), out[1].clone())
        } else {
            m.forward(&data, false)?
        };
        check.one(&what, "tabular_inference_logits", Some(&logits));
        check.one(&what, "tabular_inference_loss", Some(&loss));
        assert_eq!(
            before,
            m.bn.moving_mean().read().to_vec_f64(),
            "{what}: inference moved the mean"
        );
    }
    c64.finish("tabular f64", 300);
    c32.finish("tabular f32", 300);
    Ok(())
}
