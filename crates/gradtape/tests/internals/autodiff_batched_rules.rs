//! The batched rules of the math ops (elementwise, activations, atan2,
//! squared_difference, norm, scans) checked against row-by-row pulls: a
//! cotangent with one leading batch dim must give each row's plain result.

use std::rc::Rc;

use gradtape::__internals::autodiff::tape::{self, TapeCell};
use gradtape::ct;
use gradtape::Tensor;

/// Runs `f` on a fresh tape watching `xs` and returns the last op's rule
/// and output shape.
fn last_rule(xs: &[Tensor], f: &dyn Fn(&[Tensor]) -> gradtape::Result<Tensor>) -> (gradtape::VjpFn, Vec<usize>) {
    let cell = Rc::new(TapeCell {
        state: Default::default(),
        persistent: true,
        watch_accessed_variables: true,
        recording: Default::default(),
        used: Default::default(),
        entered: Default::default(),
        internal: false,
    });
    for x in xs {
        cell.state.borrow_mut().watch_id(x.id());
    }
    tape::push(&cell);
    let y = f(xs);
    tape::pop(&cell);
    let y = y.unwrap();
    let st = cell.state.borrow();
    let n = st.ops.len();
    (st.ops[n - 1].vjp.clone().unwrap(), y.shape().to_vec())
}

fn values(shape: &[usize], seed: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| 0.3 + 0.9 * ((i as f64) * 1.3 + seed).sin()).collect();
    Tensor::from_vec(v, shape).unwrap()
}

fn check(name: &str, xs: &[Tensor], f: &dyn Fn(&[Tensor]) -> gradtape::Result<Tensor>) {
    let (rule, yshape) = last_rule(xs, f);
    assert!(rule.is_batched(), "{name}: rule is not batched");
    let rows = 3;
    let mut bshape = vec![rows];
    bshape.extend_from_slice(&yshape);
    let g = values(&bshape, 0.7);
    let needs = vec![true; xs.len()];
    let batched = ct::with_batch_dims(1, || rule.call(std::slice::from_ref(&g), &needs)).unwrap();
    for r in 0..rows {
        let gr = g.narrow(0, r, 1).unwrap().reshape(&yshape).unwrap();
        let plain = rule.call(&[gr], &needs).unwrap();
        for (i, (b, p)) in batched.iter().zip(&plain).enumerate() {
            match (b, p) {
                (None, None) => {}
                (Some(b), Some(p)) => {
                    assert_eq!(&b.shape()[1..], xs[i].shape(), "{name}: input {i} shape");
                    let br = b.narrow(0, r, 1).unwrap().to_vec_f64();
                    let pv = p.to_vec_f64();
                    assert_eq!(br.len(), pv.len(), "{name}");
                    for (u, v) in br.iter().zip(&pv) {
                        assert!((u - v).abs() < 1e-12, "{name}: input {i} row {r}: {br:?} vs {pv:?}");
                    }
                }
                _ => panic!("{name}: input {i}: batched and plain disagree on None"),
            }
        }
    }
}

#[test]
fn batched_rules_match_row_by_row() {
    type F = fn(&[Tensor]) -> gradtape::Result<Tensor>;
    let unary: &[(&str, F)] = &[
        ("expm1", |x| x[0].expm1()),
        ("log1p", |x| x[0].log1p()),
        ("rsqrt", |x| x[0].abs()?.add_scalar(0.5)?.rsqrt()),
        ("reciprocal", |x| x[0].reciprocal()),
        ("erf", |x| x[0].erf()),
        ("erfc", |x| x[0].erfc()),
        ("floor", |x| x[0].floor()),
        ("tan", |x| x[0].tan()),
        ("asin", |x| x[0].mul_scalar(0.5)?.asin()),
        ("acos", |x| x[0].mul_scalar(0.5)?.acos()),
        ("atan", |x| x[0].atan()),
        ("sinh", |x| x[0].sinh()),
        ("cosh", |x| x[0].cosh()),
        ("asinh", |x| x[0].asinh()),
        ("acosh", |x| x[0].add_scalar(2.0)?.acosh()),
        ("atanh", |x| x[0].mul_scalar(0.5)?.atanh()),
        ("softplus", |x| x[0].softplus()),
        ("relu6", |x| x[0].mul_scalar(8.0)?.relu6()),
        ("leaky_relu", |x| x[0].leaky_relu(0.3)),
        ("elu", |x| x[0].elu()),
        ("selu", |x| x[0].selu()),
        ("clip_by_value", |x| x[0].clip_by_value(0.0, 0.8)),
        ("norm axis 1", |x| x[0].norm(&[1], false)),
        ("norm axes 0,2 keepdims", |x| x[0].norm(&[0, 2], true)),
        ("norm all", |x| x[0].norm(&[0, 1, 2], false)),
        ("cumsum", |x| x[0].cumsum(1, true, false)),
        ("cumsum reverse", |x| x[0].cumsum(-1, false, true)),
        ("cumprod", |x| x[0].cumprod(2, false, true)),
        ("cumprod zeros", |x| {
            let m = x[0].gt_scalar(0.0)?;
            Tensor::where_(&m, &x[0], &x[0].zeros_like())?
                .stop_gradient()
                .add(&x[0].mul_scalar(0.0)?)?
                .cumprod(1, true, false)
        }),
    ];
    for &(name, f) in unary {
        check(name, &[values(&[2, 3, 4], 0.1)], &f);
    }
    let binary: &[(&str, F)] = &[
        ("squared_difference", |x| x[0].squared_difference(&x[1])),
        ("atan2", |x| x[0].atan2(&x[1])),
    ];
    for &(name, f) in binary {
        for (sa, sb) in [
            (&[2, 3][..], &[2, 3][..]),
            (&[2, 3], &[3]),
            (&[2, 1], &[1, 3]),
            (&[], &[2, 3]),
        ] {
            check(
                &format!("{name} {sa:?} {sb:?}"),
                &[values(sa, 0.2), values(sb, 1.1)],
                &f,
            );
        }
    }
}
