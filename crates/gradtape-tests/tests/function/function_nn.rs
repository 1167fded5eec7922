//! Neural-network and linear-algebra ops traced into graph functions:
//! model steps (forward, loss, gradients; batch-norm statistics updated at
//! each call) compared with the same steps run eagerly, and the ops whose
//! traced form must follow each call's values rather than those of the
//! tracing call (max pooling's argmax, integer labels, the determinant's
//! sign). Reference values are the eager runs of the same code (the traced
//! graph must reproduce them); every op here would make tracing fail if it
//! had no descriptor.

use std::sync::Arc;

use gradtape::nn::{
    losses, Activation, BatchNorm, Conv2D, Dense, Embedding, Flatten, GRUCell, LSTMCell, Layer, LayerNorm, Module,
    Pool2D, PoolKind, Sequential,
};
use gradtape::{function, DType, GradientTape, Padding, Result, Rng, Tensor, Variable};

/// Asserts `a` and `b` agree elementwise to a relative `tol`.
fn close(what: &str, a: &Tensor, b: &Tensor, tol: f64) {
    assert_eq!(a.shape(), b.shape(), "{what}: shapes");
    let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: traced {x} vs eager {y}"
        );
    }
}

fn err(msg: String) -> gradtape::Error {
    gradtape::Error::InvalidArgument { op: "test", msg }
}

/// The loss and the gradient of every variable of `vars`.
fn loss_and_grads(vars: &[Variable], loss: impl FnOnce() -> Result<Tensor>) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let l = tape.record(loss)?;
    let mut out = vec![l.clone()];
    for (v, g) in vars.iter().zip(tape.gradient(&l, vars)?) {
        out.push(g.ok_or_else(|| err(format!("no gradient for {}", v.name())))?);
    }
    Ok(out)
}

fn convnet(seed: u64) -> Result<Sequential> {
    let mut rng = Rng::new(seed);
    Ok(Sequential::new()
        .add(
            Conv2D::builder(2, 3, [3, 3])
                .padding(Padding::Same)
                .activation(Activation::Relu)
                .dtype(DType::F64)
                .build(&mut rng)?,
        )
        .add(Pool2D::new(PoolKind::Max, [2, 2], [2, 2], Padding::Valid))
        .add(Conv2D::builder(3, 2, [2, 2]).dtype(DType::F64).build(&mut rng)?)
        .add(Pool2D::new(PoolKind::Avg, [2, 2], [1, 1], Padding::Same))
        .add(Flatten::new())
        .add(Dense::builder(8, 4).dtype(DType::F64).build(&mut rng)?))
}

#[test]
fn a_convnet_step_traced_gives_the_eager_loss_and_gradients() -> Result<()> {
    let model = Arc::new(convnet(3)?);
    let vars = model.trainable_variables();
    let step = {
        let (model, vars) = (model.clone(), vars.clone());
        move |x: &Tensor, labels: &Tensor| {
            loss_and_grads(&vars, || {
                losses::sparse_categorical_crossentropy(labels, &model.forward(x, true)?, true)
            })
        }
    };
    let step2 = step.clone();
    let f = function(move |(x, labels): &(Tensor, Tensor)| step2(x, labels));
    let mut rng = Rng::new(11);
    // new pixel values and labels at each call: the maxima of the pooling
    // windows move and the labels change, so a graph that froze either of
    // the tracing call's would give other gradients
    for k in 0..3i64 {
        let x = rng.normal(&[2, 6, 6, 2], 0.0, 1.0, DType::F64)?;
        let labels = Tensor::vector(&[k % 4, (k + 2) % 4]);
        let got = f.call(&(x.clone(), labels.clone()))?;
        let want = step(&x, &labels)?;
        assert_eq!(got.len(), 1 + vars.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            close(&format!("call {k} output {i}"), g, w, 1e-12);
        }
    }
    assert_eq!(f.trace_count(), 1);
    let x = Tensor::zeros(&[2, 6, 6, 2], DType::F64);
    let g = f.graph(&(x, Tensor::vector(&[0i64, 1])))?;
    for op in [
        "Conv2D",
        "BiasAdd",
        "MaxPool",
        "MaxPoolArgmax",
        "MaxPoolGrad",
        "AvgPool",
        "AvgPoolGrad",
        "Conv2DBackpropInput",
        "Conv2DBackpropFilter",
        "SparseSoftmaxCrossEntropyWithLogits",
    ] {
        assert!(g.count(op) >= 1, "no {op} node in\n{g}");
    }
    let listing = g.to_string();
    assert!(
        listing.contains("Conv2D[strides=[1, 1], padding=Same, dilations=[1, 1]]"),
        "{listing}"
    );
    assert!(
        listing.contains("MaxPool[ksize=[2, 2], strides=[2, 2], padding=Valid]"),
        "{listing}"
    );
    Ok(())
}

/// Embedding, LSTM and GRU cells, Dense, LayerNorm and BatchNorm (training:
/// its moving statistics are assigned at each call), three losses.
struct SeqModel {
    emb: Embedding,
    lstm: LSTMCell,
    gru: GRUCell,
    dense: Dense,
    ln: LayerNorm,
    bn: BatchNorm,
    head: Dense,
}

impl SeqModel {
    fn new(seed: u64) -> Result<SeqModel> {
        let mut rng = Rng::new(seed);
        Ok(SeqModel {
            emb: Embedding::with_init(5, 3, gradtape::nn::Initializer::GlorotUniform, DType::F64, &mut rng)?,
            lstm: LSTMCell::with_dtype(3, 4, DType::F64, &mut rng)?,
            gru: GRUCell::with_dtype(3, 2, DType::F64, &mut rng)?,
            dense: Dense::builder(6, 5)
                .activation(Activation::Tanh)
                .dtype(DType::F64)
                .build(&mut rng)?,
            ln: LayerNorm::new(5, DType::F64)?,
            bn: BatchNorm::new(5, DType::F64)?,
            head: Dense::builder(5, 3).dtype(DType::F64).build(&mut rng)?,
        })
    }

    fn trainable(&self) -> Vec<Variable> {
        let mut v = self.emb.trainable_variables();
        v.extend(self.lstm.trainable_variables());
        v.extend(self.gru.trainable_variables());
        v.extend(self.dense.trainable_variables());
        v.extend(self.ln.trainable_variables());
        v.extend(self.bn.trainable_variables());
        v.extend(self.head.trainable_variables());
        v
    }

    /// Loss: categorical (logits) + binary (logits) + mean squared error.
    fn loss(&self, ids: &Tensor, onehot: &Tensor, target: &Tensor) -> Result<Tensor> {
        let e = self.emb.forward(ids, true)?; // [batch, time, 3]
        let batch = ids.shape()[0];
        let (_, s) = self.lstm.run_sequence(&e, self.lstm.zero_state(batch)?)?;
        let (_, h) = self.gru.run_sequence(&e, self.gru.zero_state(batch)?)?;
        let z = Tensor::concat(&[&s.h, &h], -1)?;
        let z = self.dense.forward(&z, true)?;
        let z = self.ln.forward(&z, true)?;
        let z = self.bn.forward(&z, true)?;
        let logits = self.head.forward(&z, true)?;
        losses::categorical_crossentropy(onehot, &logits, true)?
            .add(&losses::binary_crossentropy(onehot, &logits, true)?)?
            .add(&losses::mean_squared_error(target, &logits)?)
    }
}

#[test]
fn a_recurrent_model_with_normalisation_traced_gives_the_eager_steps() -> Result<()> {
    // two identical models: one stepped eagerly, one through a function
    let (eager, traced) = (SeqModel::new(5)?, Arc::new(SeqModel::new(5)?));
    let (ve, vt) = (eager.trainable(), traced.trainable());
    let m = traced.clone();
    let f = function(move |(ids, onehot, target): &(Tensor, Tensor, Tensor)| {
        loss_and_grads(&m.trainable(), || m.loss(ids, onehot, target))
    });
    let mut rng = Rng::new(2);
    for k in 0..3i64 {
        let ids = Tensor::from_vec(vec![k % 5, 1, 4, (k + 2) % 5, 0, 3], &[3, 2])?;
        let classes = Tensor::vector(&[k % 3, 2, (k + 1) % 3]);
        let onehot = classes.one_hot(3, 1.0, 0.0, -1, DType::F64)?;
        let target = rng.normal(&[3, 3], 0.0, 1.0, DType::F64)?;
        let want = loss_and_grads(&ve, || eager.loss(&ids, &onehot, &target))?;
        let got = f.call(&(ids, onehot, target))?;
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            close(&format!("step {k} output {i}"), g, w, 1e-12);
        }
        // the batch statistics were folded into the moving averages at this call
        close(
            "moving mean",
            &traced.bn.moving_mean().read(),
            &eager.bn.moving_mean().read(),
            1e-12,
        );
        close(
            "moving variance",
            &traced.bn.moving_variance().read(),
            &eager.bn.moving_variance().read(),
            1e-12,
        );
        // SGD on both, outside the function
        for (v, g) in ve.iter().zip(&want[1..]).chain(vt.iter().zip(&got[1..])) {
            v.apply_gradient_descent(0.1, g)?;
        }
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn max_pool_gradients_follow_each_calls_maxima() -> Result<()> {
    let f = function(|x: &Tensor| {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            x.max_pool2d([2, 2], [2, 2], Padding::Valid)?.sum_all()
        })?;
        tape.gradient(&y, x)?.ok_or_else(|| err("no gradient".into()))
    });
    // traced with the maximum first, called with it last
    let a = Tensor::from_vec(vec![4.0f64, 1.0, 2.0, 3.0], &[1, 2, 2, 1])?;
    let b = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[1, 2, 2, 1])?;
    assert_eq!(f.call(&a)?.to_vec::<f64>()?, vec![1.0, 0.0, 0.0, 0.0]);
    assert_eq!(f.call(&b)?.to_vec::<f64>()?, vec![0.0, 0.0, 0.0, 1.0]);
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn sparse_cross_entropy_gradients_follow_each_calls_labels() -> Result<()> {
    let f = function(|(labels, logits): &(Tensor, Tensor)| {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(logits);
            Tensor::sparse_softmax_cross_entropy_with_logits(labels, logits)?.sum_all()
        })?;
        tape.gradient(&y, logits)?.ok_or_else(|| err("no gradient".into()))
    });
    let logits = Tensor::zeros(&[1, 2], DType::F64);
    // softmax of zeros is [0.5, 0.5]; the gradient is softmax - one_hot
    let g0 = f.call(&(Tensor::vector(&[0i32]), logits.clone()))?;
    let g1 = f.call(&(Tensor::vector(&[1i32]), logits))?;
    assert_eq!(g0.to_vec::<f64>()?, vec![-0.5, 0.5]);
    assert_eq!(g1.to_vec::<f64>()?, vec![0.5, -0.5]);
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn slogdet_sign_and_solves_are_traced_nodes() -> Result<()> {
    let f = function(|a: &Tensor| {
        let (sign, logabs) = a.slogdet()?;
        let l = a
            .matmul_with(a, true, false)?
            .add(&Tensor::eye(2, DType::F64))?
            .cholesky()?;
        let b = Tensor::from_vec(vec![1.0f64, 2.0], &[2, 1])?;
        let x = l.triangular_solve(&b, true, false)?;
        let y = a.solve(&b)?.add(&a.inverse()?.matmul(&b)?)?;
        let t = Tensor::einsum("ii->", &[a])?;
        Ok(vec![sign, logabs, a.det()?, x, y, t])
    });
    let pos = Tensor::from_vec(vec![2.0f64, 1.0, 1.0, 3.0], &[2, 2])?;
    let neg = Tensor::from_vec(vec![1.0f64, 3.0, 2.0, 1.0], &[2, 2])?;
    f.call(&pos)?;
    let got = f.call(&neg)?;
    // det(neg) = 1 - 6 = -5
    assert_eq!(got[0].to_scalar::<f64>()?, -1.0);
    assert!((got[1].to_scalar::<f64>()? - 5f64.ln()).abs() < 1e-12);
    assert!((got[2].to_scalar::<f64>()? + 5.0).abs() < 1e-12);
    let eager = [
        neg.matmul_with(&neg, true, false)?
            .add(&Tensor::eye(2, DType::F64))?
            .cholesky()?
            .triangular_solve(&Tensor::from_vec(vec![1.0f64, 2.0], &[2, 1])?, true, false)?,
        neg.solve(&Tensor::from_vec(vec![1.0f64, 2.0], &[2, 1])?)?
            .mul_scalar(2.0)?,
    ];
    close("triangular_solve", &got[3], &eager[0], 1e-12);
    close("solve + inverse", &got[4], &eager[1], 1e-12);
    assert_eq!(got[5].to_scalar::<f64>()?, 2.0);
    assert_eq!(f.trace_count(), 1);
    let g = f.graph(&pos)?;
    for op in [
        "LogMatrixDeterminantSign",
        "LogMatrixDeterminant",
        "MatrixDeterminant",
        "Cholesky",
        "MatrixTriangularSolve",
        "MatrixSolve",
        "MatrixInverse",
        "MatrixDiagPart",
    ] {
        assert!(g.count(op) >= 1, "no {op} node in\n{g}");
    }
    assert!(
        g.to_string()
            .contains("MatrixTriangularSolve[lower=true, adjoint=false]"),
        "{g}"
    );
    Ok(())
}

/// The bench's `mlp_step` and `cnn_step` (smaller batch): forward, loss,
/// gradients and the SGD update inside one traced function, stepped beside
/// the same step run eagerly on a copy of the weights.
#[test]
fn the_bench_model_steps_trace_with_their_sgd_update() -> Result<()> {
    type Step = fn(&Tensor, &Tensor, &[Tensor]) -> Result<Tensor>;
    let mlp: Step = |x, y, p| {
        let h = x.matmul(&p[0])?.bias_add(&p[1])?.relu()?;
        let h = h.matmul(&p[2])?.bias_add(&p[3])?.relu()?;
        let logits = h.matmul(&p[4])?.bias_add(&p[5])?;
        Tensor::sparse_softmax_cross_entropy_with_logits(y, &logits)?.mean_all()
    };
    let cnn: Step = |x, y, p| {
        let h = x.conv2d(&p[0], [1, 1], Padding::Same, [1, 1])?.add(&p[1])?.relu()?;
        let h = h.max_pool2d([2, 2], [2, 2], Padding::Valid)?;
        let h = h.conv2d(&p[2], [1, 1], Padding::Same, [1, 1])?.add(&p[3])?.relu()?;
        let h = h.max_pool2d([2, 2], [2, 2], Padding::Valid)?;
        let logits = h.reshape(&[x.shape()[0], 4 * 4 * 3])?.matmul(&p[4])?.add(&p[5])?;
        Tensor::sparse_softmax_cross_entropy_with_logits(y, &logits)?.mean_all()
    };
    let mut rng = Rng::new(9);
    let mut shapes_of = |shapes: &[&[usize]]| -> Result<Vec<Tensor>> {
        shapes.iter().map(|s| rng.normal(s, 0.0, 0.3, DType::F32)).collect()
    };
    let cases: [(Step, Vec<Tensor>, Vec<usize>); 2] = [
        (
            mlp,
            shapes_of(&[&[6, 8], &[8], &[8, 8], &[8], &[8, 4], &[4]])?,
            vec![5, 6],
        ),
        (
            cnn,
            shapes_of(&[&[3, 3, 1, 2], &[2], &[3, 3, 2, 3], &[3], &[48, 4], &[4]])?,
            vec![5, 16, 16, 1],
        ),
    ];
    for (step, init, xshape) in cases {
        let fresh = || -> Vec<Variable> { init.iter().map(|t| Variable::new(t.clone())).collect() };
        let (eager, traced) = (fresh(), fresh());
        let run = move |vars: &[Variable], x: &Tensor, y: &Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            let loss = tape.record(|| step(x, y, &vars.iter().map(Variable::read).collect::<Vec<_>>()))?;
            for (v, g) in vars.iter().zip(tape.gradient(&loss, vars)?) {
                v.apply_gradient_descent(0.1, &g.ok_or_else(|| err("no gradient".into()))?)?;
            }
            Ok(loss)
        };
        let tv = traced.clone();
        let f = function(move |(x, y): &(Tensor, Tensor)| run(&tv, x, y));
        for k in 0..3i64 {
            let x = rng.normal(&xshape, 0.5, 1.0, DType::F32)?;
            let y = Tensor::vector(&[k % 4, 1, 2, 3, (k + 1) % 4]);
            let want = run(&eager, &x, &y)?;
            let got = f.call(&(x, y))?;
            close(&format!("loss {k}"), &got, &want, 1e-5);
            for (a, b) in traced.iter().zip(&eager) {
                close(&format!("weights after step {k}"), &a.read(), &b.read(), 1e-5);
            }
        }
        assert_eq!(f.trace_count(), 1);
    }
    Ok(())
}

/// A causal self-attention block as a GPT writes it (one QKV projection
/// split in three, heads by reshape and permute, the fused attention op,
/// heads merged, an output projection) and its weight gradients: `[0]` the
/// loss, then the gradients of `wqkv` and `wo`.
fn attention_block_step((x, wqkv, wo): &(Tensor, Tensor, Tensor), heads: usize) -> Result<Vec<Tensor>> {
    let (b, t, width) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let hd = width / heads;
    let (wqkv, wo) = (wqkv.stop_gradient(), wo.stop_gradient());
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(&wqkv);
        tape.watch(&wo);
        let qkv = x.reshape(&[b * t, width])?.matmul(&wqkv)?.split(3, -1)?;
        let split = |v: &Tensor| v.reshape(&[b, t, heads, hd])?.permute(&[0, 2, 1, 3]);
        let (q, k, v) = (split(&qkv[0])?, split(&qkv[1])?, split(&qkv[2])?);
        let a = q.scaled_dot_product_attention(&k, &v, None, true, None)?;
        let merged = a.permute(&[0, 2, 1, 3])?.reshape(&[b * t, width])?;
        merged.matmul(&wo)?.square()?.mean_all()
    })?;
    let g = tape.gradient(&loss, &[wqkv.clone(), wo.clone()][..])?;
    Ok(vec![
        loss,
        g[0].clone().expect("connected"),
        g[1].clone().expect("connected"),
    ])
}

/// The block traced equals it eager, at every head width the attention
/// kernels choose between: 4 (the online kernel), 8, 16 and 32 (the
/// products' small kernel where the CPU has it) and 64 (the `gemm` crate),
/// over 70 positions (a second block of keys, rows not a multiple of 4),
/// in `f32` and `f64`; the traced graph keeps the fused op.
#[test]
fn an_attention_block_traced_equals_it_eager_at_every_head_width() -> Result<()> {
    for (heads, hd) in [(2, 4), (3, 8), (2, 16), (2, 32), (1, 64)] {
        for dtype in [DType::F32, DType::F64] {
            let width = heads * hd;
            let args = (
                Tensor::random_normal(&[2, 70, width], 0.0, 1.0, dtype, 1)?,
                Tensor::random_normal(&[width, 3 * width], 0.0, 0.3, dtype, 2)?,
                Tensor::random_normal(&[width, width], 0.0, 0.3, dtype, 3)?,
            );
            let f = function(move |a: &(Tensor, Tensor, Tensor)| attention_block_step(a, heads));
            let c = f.concrete(&args)?;
            let g = c.optimized_graph();
            assert_eq!(g.count("Attention"), 1, "{g}");
            let (traced, eager) = (f.call(&args)?, attention_block_step(&args, heads)?);
            let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
            for (i, (t, e)) in traced.iter().zip(&eager).enumerate() {
                close(&format!("heads {heads} of {hd}, {dtype:?}, output {i}"), t, e, tol);
            }
        }
    }
    Ok(())
}

/// A grouped convolution (a filter of `c / groups` input channels) and
/// its gradients taken on a tape inside a traced function: the graph's
/// nodes infer the groups from their shapes at each run, the im2col
/// matrix is shared with the filter gradient as for a dense one (every
/// pass verified: `GRADTAPE_VERIFY_PASSES`), and the values are the eager
/// step's, bit for bit; then other groups (a new trace) and a grouped 3-D
/// convolution.
#[test]
fn grouped_convolutions_trace_as_eager() -> Result<()> {
    fn step((x, k): &(Tensor, Tensor)) -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(x);
            tape.watch(k);
            let y = if x.rank() == 4 {
                x.conv2d(k, [1, 1], Padding::Same, [1, 1])?
            } else {
                x.conv3d(k, [1, 2, 1], Padding::Valid, [1, 1, 1])?
            };
            y.tanh()?.square()?.sum_all()
        })?;
        let (dx, dk) = tape.gradient(&loss, &(x.clone(), k.clone()))?;
        Ok(vec![loss, dx.expect("x"), dk.expect("k")])
    }
    let mut rng = Rng::new(11);
    let mut normal = |s: &[usize]| rng.normal(s, 0.0, 1.0, DType::F32);
    let f = function(step);
    let args = (normal(&[2, 6, 5, 4])?, normal(&[3, 3, 2, 6])?); // 2 groups
    let c = f.concrete(&args)?;
    let g = c.optimized_graph();
    assert_eq!(c.compile_stats().kept, 1, "{g}");
    assert_eq!(g.count("Conv2DKeepCols"), 1, "{g}");
    assert_eq!(g.count("Conv2DBackpropFilterCols"), 1, "{g}");
    // the matrix: 2·6·5 output positions by 3·3 taps of all 4 channels
    // (both groups' blocks), as the kernel builds it
    assert!(g.to_string().contains("f32[60, 36] = Conv2DKeepCols"), "{g}");
    let bits = |t: &Tensor| {
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    let want = step(&args)?;
    for _ in 0..2 {
        let got = f.call(&args)?;
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(a.shape(), b.shape(), "output {i}");
            assert_eq!(bits(a), bits(b), "output {i}");
        }
    }
    // 4 groups of one channel, and a grouped 3-D convolution
    for args in [
        (normal(&[1, 5, 5, 4])?, normal(&[2, 2, 1, 8])?),
        (normal(&[1, 4, 3, 3, 4])?, normal(&[2, 2, 2, 2, 6])?),
    ] {
        let (got, want) = (f.call(&args)?, step(&args)?);
        assert_eq!(got[2].shape(), args.1.shape());
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            close(&format!("output {i}"), a, b, 1e-6);
        }
    }
    Ok(())
}
