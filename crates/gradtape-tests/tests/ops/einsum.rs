//! `einsum` over three and more operands: values against NumPy 2.4 /
//! TensorFlow 2.21, the contraction order (`einsum_path`) against NumPy's
//! `einsum_path(..., optimize="optimal")`, and errors.
//!
//! Operand `k` of `n` elements holds `sin(0.7 i + 1.3 k + 0.1)`; every
//! reference below is `numpy.einsum` on those inputs (NumPy 2.4.6, equal to
//! `tf.einsum` of TensorFlow 2.21 to 1e-13, which was checked at the same
//! time; the ellipsis case broadcasts a size-1 dim).
//! Gradients (first and second order) are in `gradcheck_linalg.rs`.

use gradtape::{Error, Result, Tensor};

fn input(shape: &[usize], k: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| (0.7 * i as f64 + 1.3 * k as f64 + 0.1).sin()).collect();
    Tensor::from_vec(v, shape).unwrap()
}

#[allow(clippy::type_complexity)]
const CASES: &[(&str, &[&[usize]], &[usize], &[f64])] = &[
    (
        "ij,jk,kl->il",
        &[&[2, 3], &[3, 4], &[4, 2]],
        &[2, 2],
        &[
            -0.38017940605975764,
            -0.14864499379241797,
            0.04510476676943369,
            -0.4873106502147748,
        ],
    ),
    (
        "abc,cd,bde->ae",
        &[&[2, 3, 4], &[4, 2], &[3, 2, 3]],
        &[2, 3],
        &[
            3.0985806514606167,
            2.2150775211630456,
            0.2897888211214753,
            -2.6868377217514894,
            -3.235455004242368,
            -2.2623872428590643,
        ],
    ),
    ("i,i,i->", &[&[5], &[5], &[5]], &[], &[0.0400224371531597]),
    (
        "...ij,jk,...k->...i",
        &[&[2, 3, 4], &[4, 5], &[2, 1, 5]],
        &[2, 2, 3],
        &[
            -0.8744512330580433,
            1.2667627706401365,
            -1.5126931325908815,
            1.583823757566238,
            -1.4719351235304916,
            1.1899565572443913,
            0.6830637065008194,
            -0.8712913996007938,
            0.9588367373718407,
            -0.9355833904103994,
            0.8042184066345662,
            -0.5799217086056854,
        ],
    ),
    (
        "ij,jk,kl,lm,mn->in",
        &[&[3, 4], &[4, 2], &[2, 5], &[5, 3], &[3, 2]],
        &[3, 2],
        &[
            0.20574016068796233,
            0.23816863391891469,
            -0.33657432439604995,
            -0.41505081107548714,
            0.4285155347948748,
            0.5439716594970265,
        ],
    ),
    (
        "ii,ij,jk->k",
        &[&[3, 3], &[3, 4], &[4, 2]],
        &[2],
        &[0.6608314024684951, 0.6597699331760527],
    ),
    (
        "ij,jk,kl",
        &[&[2, 3], &[3, 4], &[4, 2]],
        &[2, 2],
        &[
            -0.38017940605975764,
            -0.14864499379241797,
            0.04510476676943369,
            -0.4873106502147748,
        ],
    ),
    (
        "ba,cb,dc->ad",
        &[&[3, 2], &[2, 3], &[4, 2]],
        &[2, 4],
        &[
            0.7354725596066813,
            0.2844339758141259,
            -0.6387836991809145,
            -0.5015784563761809,
            0.6703141017550523,
            -0.5086847530422072,
            -0.8432334899780496,
            0.22204077886347018,
        ],
    ),
    (
        "bij,bjk,bkl->bil",
        &[&[2, 2, 3], &[2, 3, 2], &[2, 2, 2]],
        &[2, 2, 2],
        &[
            0.7104832466397244,
            1.276674808352193,
            -0.31855739384783865,
            -1.3673481910992815,
            -0.2901896290734616,
            -1.0587804746794105,
            -0.2859464559579678,
            0.9029587267603664,
        ],
    ),
    (
        "ab,bc,cd,de,ef,fg,gh,hi,ij,jk,kl,lm->am",
        &[
            &[2, 3],
            &[3, 2],
            &[2, 4],
            &[4, 2],
            &[2, 3],
            &[3, 2],
            &[2, 2],
            &[2, 3],
            &[3, 2],
            &[2, 4],
            &[4, 3],
            &[3, 2],
        ],
        &[2, 2],
        &[
            0.3839612386767336,
            0.19108602451942017,
            0.16168402500018844,
            0.07496462316558032,
        ],
    ),
    (
        "ij,k,jl->ikl",
        &[&[2, 3], &[2], &[3, 2]],
        &[2, 2, 2],
        &[
            -1.2299419894091612,
            -0.8110227171204974,
            -1.0773735213313929,
            -0.7104191971229535,
            0.4552569467245177,
            -0.4022280767909653,
            0.39878448254196874,
            -0.3523335923174787,
        ],
    ),
];

#[test]
fn many_operand_values_match_numpy() -> Result<()> {
    for &(spec, shapes, out, want) in CASES {
        let ops: Vec<Tensor> = shapes.iter().enumerate().map(|(k, s)| input(s, k)).collect();
        let refs: Vec<&Tensor> = ops.iter().collect();
        let y = Tensor::einsum(spec, &refs)?;
        assert_eq!(y.shape(), out, "{spec}");
        for (i, (a, b)) in y.to_vec::<f64>()?.iter().zip(want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-13 * (1.0 + b.abs()),
                "{spec}[{i}]: {a} vs NumPy {b}"
            );
        }
    }
    Ok(())
}

#[test]
fn the_chain_is_contracted_in_the_cheap_order() -> Result<()> {
    // NumPy: np.einsum_path("ij,jk,kl->il", A, B, C, optimize="optimal")[0]
    // is ['einsum_path', (0, 1), (0, 1)] for A[10,1000] B[1000,10] C[10,1000]
    let p = Tensor::einsum_path("ij,jk,kl->il", &[&[10, 1000], &[1000, 10], &[10, 1000]])?;
    assert_eq!(p.steps, vec![(0, 1), (0, 1)]);
    // (A B): 10·1000·10, then (AB) C: 10·10·1000; B C first would take 10⁷
    assert_eq!(p.flops, 200_000);
    assert_eq!(p.naive_flops, 10 * 1000 * 10 * 1000);
    // and ['einsum_path', (1, 2), (0, 1)] for B[1000,10] C[10,1000] B
    let p = Tensor::einsum_path("ij,jk,kl->il", &[&[1000, 10], &[10, 1000], &[1000, 10]])?;
    assert_eq!(p.steps, vec![(1, 2), (0, 1)]);
    assert_eq!(p.flops, 200_000);
    // ['einsum_path', (0, 1), (0, 1), (0, 1)]: (AB)(CD), 600 + 600 + 12
    let p = Tensor::einsum_path("ab,bc,cd,de->ae", &[&[2, 100], &[100, 3], &[3, 100], &[100, 2]])?;
    assert_eq!(p.steps, vec![(0, 1), (0, 1), (0, 1)]);
    assert_eq!(p.flops, 1212);
    // one operand: nothing to pair; two: one step
    assert!(Tensor::einsum_path("ii->i", &[&[3, 3]])?.steps.is_empty());
    assert_eq!(Tensor::einsum_path("ij,jk", &[&[2, 3], &[3, 4]])?.steps, vec![(0, 1)]);
    Ok(())
}

#[test]
fn the_cheap_order_gives_the_same_values_as_the_matmul_chain() -> Result<()> {
    // the cheap order of both shapes above, against matmuls in the given order
    for shapes in [[[10usize, 40], [40, 3], [3, 40]], [[40, 3], [3, 40], [40, 3]]] {
        let (a, b, c) = (input(&shapes[0], 0), input(&shapes[1], 1), input(&shapes[2], 2));
        let y = Tensor::einsum("ij,jk,kl->il", &[&a, &b, &c])?.to_vec::<f64>()?;
        let want = a.matmul(&b)?.matmul(&c)?.to_vec::<f64>()?;
        for (u, v) in y.iter().zip(&want) {
            assert!((u - v).abs() < 1e-12 * (1.0 + v.abs()), "{u} vs {v}");
        }
    }
    Ok(())
}

#[test]
fn many_operand_errors_name_the_spec_and_shapes() {
    let (a, b) = (input(&[2, 3], 0), input(&[3, 4], 1));
    // a shared letter with different sizes in the third operand
    let e = Tensor::einsum("ij,jk,kl->il", &[&a, &b, &a]).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "einsum", .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("letter 'k' is 4 in operand 1 (shape [3, 4]) but 2 in operand 2 (shape [2, 3])"),
        "{msg}"
    );
    // terms and operands disagree
    let e = Tensor::einsum("ij,jk,kl->il", &[&a, &b]).unwrap_err();
    assert!(e.to_string().contains("3 input terms for 2 operands"), "{e}");
    // no operands at all
    let e = Tensor::einsum("->", &[]).unwrap_err();
    assert!(e.to_string().contains("at least one operand"), "{e}");
    // dtypes must agree across all operands
    let c32 = input(&[4, 2], 2).cast(gradtape::DType::F32).unwrap();
    let e = Tensor::einsum("ij,jk,kl->il", &[&a, &b, &c32]).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "einsum", .. }), "{e:?}");
    // bool operands are refused (integers are TensorFlow's: tf_integer.rs)
    let i = Tensor::from_vec(vec![true; 6], &[2, 3]).unwrap();
    let e = Tensor::einsum("ij,ij,ij->", &[&i, &i, &i]).unwrap_err();
    assert!(matches!(e, Error::UnsupportedDType { op: "einsum", .. }), "{e:?}");
    // the path reports the same errors from shapes alone
    let e = Tensor::einsum_path("ij,jk,kl->il", &[&[2, 3], &[3, 4], &[2, 3]]).unwrap_err();
    assert!(e.to_string().contains("letter 'k' is 4 in operand 1"), "{e:?}");
    let e = Tensor::einsum_path("ij,jk->q", &[&[2, 3], &[3, 4]]).unwrap_err();
    assert!(e.to_string().contains("in no input"), "{e}");
}

/// `einsum` of a small operand with a large one whose free letters come
/// before its contracted ones (a mixture of experts' `"nd,nkdh->nkh"`,
/// per-head projections `"bqd,bhde->bhqe"`) takes those letters as batch
/// letters, broadcasting the small operand, instead of permuting the large
/// one into a copy: the traced graph (forward and gradient) holds no value
/// of the permuted shape, and values and gradients equal this test's own
/// loops (sums of products in f64, to 1e-13).
#[test]
fn a_large_operands_leading_free_letters_become_batch_letters() -> Result<()> {
    // (spec, small shape, large shape, permuted shape that was copied)
    type Case = (&'static str, [usize; 3], [usize; 4], [usize; 4]);
    let cases: [Case; 2] = [
        ("nd,nkdh->nkh", [6, 4, 0], [6, 3, 4, 5], [6, 4, 3, 5]),
        ("bqd,bhde->bhqe", [2, 3, 4], [2, 5, 4, 7], [2, 4, 5, 7]),
    ];
    for (spec, sa, sb, permuted) in cases {
        let sa: Vec<usize> = sa.into_iter().filter(|&n| n > 0).collect();
        let (a, b) = (input(&sa, 0), input(&sb, 1));
        let (av, bv) = (a.to_vec::<f64>()?, b.to_vec::<f64>()?);
        // out[i, j, q, e] = Σ_d a[i, q, d] b[i, j, d, e] (q of size 1 for the first spec)
        let q = if sa.len() == 2 { 1 } else { sa[1] };
        let (n, jn, dn, en) = (sb[0], sb[1], sb[2], sb[3]);
        let out_shape: Vec<usize> = if q == 1 { vec![n, jn, en] } else { vec![n, jn, q, en] };
        let weight = input(&out_shape, 2);
        let wv = weight.to_vec::<f64>()?;
        let (mut want, mut ga, mut gb) = (vec![0.0; wv.len()], vec![0.0; av.len()], vec![0.0; bv.len()]);
        for i in 0..n {
            for j in 0..jn {
                for r in 0..q {
                    for e in 0..en {
                        let o = ((i * jn + j) * q + r) * en + e;
                        for d in 0..dn {
                            let (ai, bi) = ((i * q + r) * dn + d, ((i * jn + j) * dn + d) * en + e);
                            want[o] += av[ai] * bv[bi];
                            ga[ai] += wv[o] * bv[bi];
                            gb[bi] += wv[o] * av[ai];
                        }
                    }
                }
            }
        }
        let step = move |(a, b): &(Tensor, Tensor)| -> Result<Vec<Tensor>> {
            let tape = gradtape::GradientTape::new();
            let y = tape.record(|| {
                tape.watch(a);
                tape.watch(b);
                Tensor::einsum(spec, &[a, b])
            })?;
            let loss = tape.record(|| y.mul(&weight)?.sum_all())?;
            let g = tape.gradient(&loss, &[a.clone(), b.clone()])?;
            Ok(vec![y, g[0].clone().expect("a"), g[1].clone().expect("b")])
        };
        let f = gradtape::function(step.clone());
        let args = (a.clone(), b.clone());
        for (how, got) in [("eager", step(&args)?), ("traced", f.call(&args)?)] {
            for (k, (t, w)) in got.iter().zip([&want, &ga, &gb]).enumerate() {
                let t = t.to_vec::<f64>()?;
                assert_eq!(t.len(), w.len(), "{spec} {how} output {k}");
                for (x, y) in t.iter().zip(w.iter()) {
                    assert!(
                        (x - y).abs() <= 1e-13 * (1.0 + y.abs()),
                        "{spec} {how} output {k}: {x} vs {y}"
                    );
                }
            }
        }
        let graph = f.concrete(&args)?.graph().to_string();
        let copied = format!("{permuted:?}");
        assert!(
            !graph.contains(&copied),
            "{spec}: a value of shape {copied} in\n{graph}"
        );
        assert!(
            graph.contains(&format!("{sb:?}")),
            "{spec}: the listing names shapes:\n{graph}"
        );
    }
    Ok(())
}
