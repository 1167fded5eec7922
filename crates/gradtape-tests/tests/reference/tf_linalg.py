"""TensorFlow's values and gradients of the linear-algebra ops on small
matrices (general, symmetric positive definite, tall, wide, batched, the
identity, near-singular), for tests/ops/tf_linalg.rs.

Run: /work/refvenv/bin/python tf_linalg.py > ../data/tf_linalg.txt
(TensorFlow 2.21, f64, CPU.)

Each line: `op|shapes|inputs|outputs|grads`: per operand (`;`) its shape
(`x`-separated) and row-major values (`,`); per output (`;`) its values;
per operand the gradient of Σ_outputs Σ w[i] y[i], w[i] = 1 + i/2 (the
decompositions' sign-ambiguous factors, U and V of the SVD and the
eigenvectors, are neither compared nor in the loss).
"""
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(3)
A3 = np.round(rng.normal(0, 1, (3, 3)), 4)
S3 = A3 @ A3.T + np.eye(3)
T43 = np.round(rng.normal(0, 1, (4, 3)), 4)
W34 = np.round(rng.normal(0, 1, (3, 4)), 4)
B233 = np.round(rng.normal(0, 1, (2, 3, 3)), 4)
N3 = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0 + 1e-6], [1.0, 0.0, 1.0]])
I3 = np.eye(3)
R32 = np.round(rng.normal(0, 1, (3, 2)), 4)
R42 = np.round(rng.normal(0, 1, (4, 2)), 4)


def fmt(v):
    return "none" if v is None else ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


def case(name, f, arrays):
    vs = [tf.Variable(a) for a in arrays]
    with tf.GradientTape() as tape:
        ys = f(*vs)
        s = tf.constant(0.0, tf.float64)
        for y in ys:
            n = int(np.prod(y.shape))
            s += tf.reduce_sum(tf.reshape(y, [-1]) * tf.constant(1.0 + 0.5 * np.arange(n), tf.float64))
    gs = tape.gradient(s, vs)
    print(f"{name}|{';'.join('x'.join(map(str, a.shape)) for a in arrays)}|{';'.join(fmt(a) for a in arrays)}|"
          f"{';'.join(fmt(y.numpy()) for y in ys)}|{';'.join(fmt(None if g is None else g.numpy()) for g in gs)}")


for a in [A3, S3, B233, N3, I3]:
    case("det", lambda x: [tf.linalg.det(x)], [a])
    case("slogdet", lambda x: list(tf.linalg.slogdet(x)), [a])
    case("inverse", lambda x: [tf.linalg.inv(x)], [a])
    case("matrix_exp", lambda x: [tf.linalg.expm(x)], [a])
    case("trace", lambda x: [tf.linalg.trace(x)], [a])
    case("solve", lambda x, b: [tf.linalg.solve(x, b)], [a, R32 if a.ndim == 2 else np.stack([R32, R32])])
    case("triangular_solve_lower", lambda x, b: [tf.linalg.triangular_solve(x, b, lower=True)],
         [a, R32 if a.ndim == 2 else np.stack([R32, R32])])
    case("triangular_solve_upper_adjoint",
         lambda x, b: [tf.linalg.triangular_solve(x, b, lower=False, adjoint=True)],
         [a, R32 if a.ndim == 2 else np.stack([R32, R32])])
for a in [S3, I3]:
    case("cholesky", lambda x: [tf.linalg.cholesky(x)], [a])
    case("logdet", lambda x: [tf.linalg.logdet(x)], [a])
    case("eigh_values", lambda x: [tf.linalg.eigh(x)[0]], [a + a.T - np.diag(np.diag(a))])
for a in [A3, S3, T43, W34, B233]:
    case("qr", lambda x: list(tf.linalg.qr(x)), [a])
    case("svd_values", lambda x: [tf.linalg.svd(x, compute_uv=False)], [a])
    case("pinv", lambda x: [tf.linalg.pinv(x)], [a])
    for ord_name, ord in [("fro", "fro"), ("one", 1), ("inf", np.inf), ("two", 2), ("nuc", "nuclear")]:
        if ord == "nuclear":
            f = lambda x: [tf.reduce_sum(tf.linalg.svd(x, compute_uv=False), axis=-1)]
        else:
            f = lambda x, o=ord: [tf.norm(x, ord=o, axis=[-2, -1])]
        case(f"matrix_norm_{ord_name}", f, [a])
case("lstsq", lambda x, b: [tf.linalg.lstsq(x, b)], [T43, R42])
case("lstsq_l2", lambda x, b: [tf.linalg.lstsq(x, b, l2_regularizer=0.1)], [T43, R42])
case("matmul", lambda x, b: [tf.matmul(x, b)], [T43, A3])
case("matmul_batched_broadcast", lambda x, b: [tf.matmul(x, b)], [B233, A3])
