//! The per-family table of ops and the dtypes they accept, `docs/dtypes.md`,
//! is generated here: every public op is called on valid inputs of each
//! dtype, and the table of those that succeed must equal the committed file
//! (so the docs cannot drift from the code). After changing an op, run
//! `GRADTAPE_BLESS=1 cargo test --release --test ops dtype_table` to
//! rewrite it. A refusal must be an `Err` (never a panic).

use std::panic::{catch_unwind, AssertUnwindSafe};

use gradtape::{DType, DataFormat, MatrixNorm, PadMode, Padding, ResizeMethod, Result, Slice, Tensor};

const DTYPES: [DType; 9] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
    DType::Bool,
    DType::C64,
    DType::C128,
];

type Probe = fn(DType) -> Result<Tensor>;

/// A `[2, 2]` well-conditioned, positive-definite matrix `[[2, 1], [1, 3]]`
/// in `d` (for the ops that need one).
fn m(d: DType) -> Tensor {
    Tensor::from_vec(vec![2.0f64, 1.0, 1.0, 3.0], &[2, 2])
        .unwrap()
        .cast(d)
        .unwrap()
}

/// `[0.5, 0.25, 0.75]` in `d` (values inside every function's domain).
fn v(d: DType) -> Tensor {
    Tensor::vector(&[0.5f64, 0.25, 0.75]).cast(d).unwrap()
}

/// An NHWC image `[1, 4, 4, 1]` in `d`.
fn img(d: DType) -> Tensor {
    Tensor::from_vec((0..16).map(|i| i as f64 * 0.1).collect(), &[1, 4, 4, 1])
        .unwrap()
        .cast(d)
        .unwrap()
}

fn idx(v: &[i64]) -> Tensor {
    Tensor::vector(v)
}

/// Joins two probes of one row: both must succeed (`and` is not an op, so
/// a row lists only the dtypes its ops accept).
trait And {
    fn and(self, other: &Tensor) -> Result<Tensor>;
}

impl And for Tensor {
    fn and(self, _other: &Tensor) -> Result<Tensor> {
        Ok(self)
    }
}

fn first<A, B>(p: Result<(A, B)>) -> Result<A> {
    p.map(|p| p.0)
}

fn families() -> Vec<(&'static str, Vec<(&'static str, Probe)>)> {
    vec![
        (
            "Elementwise, one input",
            vec![
                ("neg", |d| v(d).neg()),
                ("abs", |d| v(d).abs()),
                ("sign", |d| v(d).sign()),
                ("square", |d| v(d).square()),
                ("sqrt", |d| v(d).sqrt()),
                ("rsqrt", |d| v(d).rsqrt()),
                ("reciprocal", |d| v(d).reciprocal()),
                ("exp", |d| v(d).exp()),
                ("expm1", |d| v(d).expm1()),
                ("log", |d| v(d).log()),
                ("log1p", |d| v(d).log1p()),
                ("sin / cos / tan", |d| v(d).sin()?.and(&v(d).cos()?)?.and(&v(d).tan()?)),
                ("asin / acos / atan", |d| {
                    v(d).asin()?.and(&v(d).acos()?)?.and(&v(d).atan()?)
                }),
                ("sinh / cosh / tanh", |d| {
                    v(d).sinh()?.and(&v(d).cosh()?)?.and(&v(d).tanh()?)
                }),
                ("asinh / atanh", |d| v(d).asinh()?.and(&v(d).atanh()?)),
                ("acosh", |d| v(d).add_scalar(1.0)?.acosh()),
                ("erf / erfc", |d| v(d).erf()?.and(&v(d).erfc()?)),
                ("floor / ceil / round", |d| {
                    v(d).floor()?.and(&v(d).ceil()?)?.and(&v(d).round()?)
                }),
                ("sigmoid", |d| v(d).sigmoid()),
                ("relu / relu6", |d| v(d).relu()?.and(&v(d).relu6()?)),
                ("leaky_relu", |d| v(d).leaky_relu(0.2)),
                ("elu / selu", |d| v(d).elu()?.and(&v(d).selu()?)),
                ("softplus / softsign", |d| v(d).softplus()?.and(&v(d).softsign()?)),
                ("gelu / silu", |d| v(d).gelu(false)?.and(&v(d).silu()?)),
                ("clip_by_value", |d| v(d).clip_by_value(0.0, 0.5)),
                ("add/sub/mul/div_scalar", |d| {
                    v(d).add_scalar(1.0)?.sub_scalar(1.0)?.mul_scalar(2.0)?.div_scalar(2.0)
                }),
                ("pow_scalar", |d| v(d).pow_scalar(2.0)),
                ("logical_not", |d| v(d).logical_not()),
                ("real / imag / conj / angle", |d| {
                    v(d).real()?
                        .and(&v(d).imag()?)?
                        .and(&v(d).conj()?.real()?)?
                        .and(&v(d).angle()?)
                }),
                ("cast", |d| v(d).cast(DType::F64)),
                ("is_nan / is_finite / is_inf", |d| {
                    v(d).is_nan()?
                        .logical_or(&v(d).is_finite()?)?
                        .logical_or(&v(d).is_inf()?)
                }),
            ],
        ),
        (
            "Elementwise, two inputs (broadcasting)",
            vec![
                ("add / sub / mul", |d| v(d).add(&v(d))?.sub(&v(d))?.mul(&v(d))),
                ("div", |d| v(d).div(&v(d))),
                ("pow", |d| v(d).pow(&v(d))),
                ("maximum / minimum", |d| v(d).maximum(&v(d))?.minimum(&v(d))),
                ("clip_by_tensors", |d| v(d).clip_by_tensors(&v(d), &v(d))),
                ("squared_difference", |d| v(d).squared_difference(&v(d))),
                ("atan2", |d| v(d).atan2(&v(d))),
                ("floor_div / floor_mod", |d| {
                    v(d).floor_div(&v(d).add_scalar(1.0)?)?
                        .and(&v(d).floor_mod(&v(d).add_scalar(1.0)?)?)
                }),
                ("eq / ne", |d| v(d).eq(&v(d))?.logical_and(&v(d).ne(&v(d))?)),
                ("lt / le / gt / ge", |d| {
                    let (a, b) = (v(d), v(d));
                    a.lt(&b)?
                        .logical_or(&a.le(&b)?)?
                        .logical_or(&a.gt(&b)?)?
                        .logical_or(&a.ge(&b)?)
                }),
                ("logical_and / or / xor", |d| {
                    v(d).logical_and(&v(d))?.logical_or(&v(d))?.logical_xor(&v(d))
                }),
                ("bitwise_and / or / xor, shifts, invert", |d| {
                    let (x, y) = (v(d), v(d));
                    x.bitwise_and(&y)?
                        .bitwise_or(&y)?
                        .bitwise_xor(&y)?
                        .left_shift(&y)?
                        .right_shift(&y)?
                        .invert()
                }),
                ("where_", |d| {
                    Tensor::where_(&Tensor::vector(&[true, false, true]), &v(d), &v(d))
                }),
                ("complex", |d| Tensor::complex(&v(d), &v(d))),
            ],
        ),
        (
            "Reductions and scans",
            vec![
                ("sum", |d| v(d).sum(&[0], false)),
                ("mean", |d| v(d).mean(&[0], false)),
                ("prod", |d| v(d).prod(&[0], false)),
                ("max / min", |d| v(d).max(&[0], false)?.and(&v(d).min(&[0], false)?)),
                ("argmax / argmin", |d| v(d).argmax(0)?.and(&v(d).argmin(0)?)),
                ("all / any", |d| {
                    v(d).all(&[0], false)?.logical_or(&v(d).any(&[0], false)?)
                }),
                ("norm", |d| v(d).norm(&[0], false)),
                ("logsumexp", |d| v(d).logsumexp(&[0], false)),
                ("variance / std / moments", |d| {
                    v(d).variance(&[0], false)?
                        .and(&v(d).std(&[0], false)?)?
                        .and(&first(v(d).moments(&[0], false))?)
                }),
                ("cumsum", |d| v(d).cumsum(0, false, false)),
                ("cumprod", |d| v(d).cumprod(0, false, false)),
            ],
        ),
        (
            "Shape and indexing",
            vec![
                ("reshape / transpose / broadcast_to", |d| {
                    m(d).reshape(&[4])?
                        .reshape(&[2, 2])?
                        .transpose()?
                        .broadcast_to(&[3, 2, 2])
                }),
                ("slice / strided_slice / reverse", |d| {
                    m(d).slice(&[0, 0], &[1, 2])?
                        .strided_slice(&[Slice::rev()])?
                        .reverse(&[1])
                }),
                ("pad / pad_with", |d| {
                    m(d).pad(&[(1, 0), (0, 1)])?
                        .pad_with(&[(1, 1), (1, 1)], PadMode::Reflect)
                }),
                ("concat / stack / split", |d| {
                    Tensor::stack(&[&Tensor::concat(&[&v(d), &v(d)], 0)?.split(2, 0)?[0], &v(d)], 0)
                }),
                ("tile / repeat", |d| v(d).tile(&[2])?.repeat(2, 0)),
                ("gather / gather_nd / scatter_nd", |d| {
                    let g = m(d)
                        .gather(&idx(&[1, 0]), 0)?
                        .gather_nd(&Tensor::from_vec(vec![0i64, 1], &[1, 2])?)?;
                    Tensor::scatter_nd(&Tensor::from_vec(vec![1i64], &[1, 1])?, &g, &[3])
                }),
                ("one_hot (output dtype)", |d| idx(&[0, 2]).one_hot(3, 1.0, 0.0, -1, d)),
                ("sort / argsort / top_k", |d| {
                    v(d).sort(0, true)?.and(&first(v(d).top_k(2))?.sum_all()?)
                }),
                ("unique / searchsorted", |d| {
                    first(v(d).unique())?.searchsorted(&v(d), false)
                }),
                ("bincount weights", |d| idx(&[0, 1, 1]).bincount(Some(&v(d)), 0)),
                ("argwhere / boolean_mask", |d| {
                    v(d).boolean_mask(&Tensor::vector(&[true, false, true]))?.argwhere()
                }),
                ("roll", |d| v(d).roll(&[1], &[0])),
                ("segment_sum / unsorted_segment_max", |d| {
                    v(d).segment_sum(&idx(&[0, 0, 1]))?
                        .and(&v(d).unsorted_segment_max(&idx(&[1, 0, 1]), 2)?)
                }),
                ("tensor_scatter_nd_update", |d| {
                    v(d).tensor_scatter_nd_update(&Tensor::from_vec(vec![1i64], &[1, 1])?, &v(d).slice(&[0], &[1])?)
                }),
            ],
        ),
        (
            "Linear algebra",
            vec![
                ("matmul / matvec / outer / tensordot", |d| {
                    m(d).matmul(&m(d))?
                        .matvec(&v(d).slice(&[0], &[2])?)?
                        .outer(&v(d))?
                        .tensordot(&v(d), &[1], &[0])
                }),
                ("einsum", |d| Tensor::einsum("ij,jk->ik", &[&m(d), &m(d)])),
                ("einsum (three operands, cheapest order)", |d| {
                    Tensor::einsum("ij,jk,k->i", &[&m(d), &m(d), &v(d).slice(&[0], &[2])?])
                }),
                ("diag / diag_part / trace / band_part", |d| {
                    m(d).diag_part()?.diag()?.band_part(0, 0)?.trace()
                }),
                ("cholesky / triangular_solve", |d| {
                    m(d).cholesky()?.triangular_solve(&m(d), true, false)
                }),
                ("solve / inverse", |d| m(d).solve(&m(d))?.and(&m(d).inverse()?)),
                ("det / slogdet / logdet", |d| m(d).det()?.and(&m(d).logdet()?)),
                ("eigh / svd", |d| first(m(d).eigh())?.and(&m(d).svd()?.0)),
                ("qr / lu", |d| first(m(d).qr())?.and(&m(d).lu()?.0)),
                ("matrix_exp", |d| m(d).matrix_exp()),
                ("lstsq / pinv / matrix_norm", |d| {
                    m(d).lstsq(&m(d), 0.0)?
                        .and(&m(d).pinv(None)?)?
                        .sum_all()?
                        .and(&m(d).matrix_norm(MatrixNorm::Nuc)?)
                }),
                ("fft / ifft / fft2d / ifft2d", |d| m(d).fft()?.ifft()?.fft2d()?.ifft2d()),
                ("rfft / irfft (real in, complex out)", |d| {
                    m(d).rfft(None)?.irfft(Some(2))
                }),
            ],
        ),
        (
            "Neural networks",
            vec![
                ("softmax / log_softmax", |d| {
                    m(d).softmax(-1)?.and(&m(d).log_softmax(-1)?)
                }),
                ("softmax_cross_entropy_with_logits", |d| {
                    Tensor::softmax_cross_entropy_with_logits(&m(d), &m(d))
                }),
                ("sparse_softmax_cross_entropy_with_logits", |d| {
                    Tensor::sparse_softmax_cross_entropy_with_logits(&idx(&[0, 1]), &m(d))
                }),
                ("sigmoid_cross_entropy_with_logits", |d| {
                    Tensor::sigmoid_cross_entropy_with_logits(&m(d), &m(d))
                }),
                ("bias_add", |d| m(d).bias_add(&v(d).slice(&[0], &[2])?)),
                ("conv2d / conv1d", |d| {
                    img(d).conv2d(&Tensor::ones(&[2, 2, 1, 1], d), [1, 1], Padding::Same, [1, 1])
                }),
                ("depthwise_conv2d", |d| {
                    img(d).depthwise_conv2d(&Tensor::ones(&[2, 2, 1, 1], d), [1, 1], Padding::Valid, [1, 1])
                }),
                ("max_pool2d / avg_pool2d", |d| {
                    img(d)
                        .max_pool2d([2, 2], [2, 2], Padding::Valid)?
                        .and(&img(d).avg_pool2d([2, 2], [2, 2], Padding::Valid)?)
                }),
                ("resize_images (bilinear, nearest)", |d| {
                    img(d)
                        .resize_images([3, 5], ResizeMethod::Bilinear)?
                        .and(&img(d).resize_images([3, 5], ResizeMethod::Nearest)?)
                }),
                ("resize_bilinear / resize_bilinear_grad", |d| {
                    img(d)
                        .resize_bilinear([3, 5], false, true)?
                        .and(&img(d).resize_bilinear_grad([2, 3], true, false)?)
                }),
                ("resize_nearest_neighbor", |d| {
                    img(d).resize_nearest_neighbor([3, 5], true, false)
                }),
                ("resize_nearest_neighbor_grad", |d| {
                    img(d).resize_nearest_neighbor_grad([2, 3], false, true)
                }),
                ("ctc_loss", |d| {
                    let x = Tensor::zeros(&[3, 1, 4], d);
                    Tensor::ctc_loss(&idx(&[1, 2]).reshape(&[1, 2])?, &x, &idx(&[2]), &idx(&[3]), true, 0)
                }),
                ("conv3d", |d| {
                    img(d).reshape(&[1, 2, 2, 4, 1])?.conv3d(
                        &Tensor::ones(&[2, 1, 2, 1, 1], d),
                        [1, 1, 1],
                        Padding::Same,
                        [1, 1, 1],
                    )
                }),
                ("conv3d_backprop_input / conv3d_backprop_filter", |d| {
                    let x = img(d).reshape(&[1, 2, 2, 4, 1])?;
                    let (f, dy) = (Tensor::ones(&[2, 1, 2, 1, 1], d), Tensor::ones(&[1, 1, 2, 3, 1], d));
                    let s = [1, 1, 1];
                    Tensor::conv3d_backprop_input(&[1, 2, 2, 4, 1], &f, &dy, s, Padding::Valid, s)?.and(
                        &Tensor::conv3d_backprop_filter(&x, &[2, 1, 2, 1, 1], &dy, s, Padding::Valid, s)?,
                    )
                }),
                ("avg_pool2d_grad / avg_pool3d_grad", |d| {
                    let g = Tensor::ones(&[1, 1, 1, 2, 1], d);
                    g.reshape(&[1, 1, 2, 1])?
                        .avg_pool2d_grad(&[1, 2, 4, 1], [2, 2], [2, 2], Padding::Valid)?
                        .and(&g.avg_pool3d_grad(&[1, 2, 2, 4, 1], [2, 2, 2], [2, 2, 2], Padding::Valid)?)
                }),
                ("max_pool3d / avg_pool3d", |d| {
                    let x = img(d).reshape(&[1, 2, 2, 4, 1])?;
                    x.max_pool3d([2, 2, 2], [2, 2, 2], Padding::Valid)?.and(&x.avg_pool3d(
                        [2, 2, 2],
                        [2, 2, 2],
                        Padding::Valid,
                    )?)
                }),
                ("max_pool1d / avg_pool1d", |d| {
                    let x = img(d).reshape(&[1, 16, 1])?;
                    x.max_pool1d(2, 2, Padding::Same)?
                        .and(&x.avg_pool1d(2, 2, Padding::Same)?)
                }),
                ("separable_conv2d", |d| {
                    img(d).separable_conv2d(
                        &Tensor::ones(&[2, 2, 1, 2], d),
                        &Tensor::ones(&[1, 1, 2, 1], d),
                        [1, 1],
                        Padding::Same,
                        [1, 1],
                    )
                }),
                ("bias_add (channels first)", |d| {
                    m(d).bias_add_with_format(&v(d).slice(&[0], &[2])?, DataFormat::ChannelsFirst)
                }),
                ("conv2d / max_pool2d / avg_pool2d / conv3d (channels first)", |d| {
                    let x = img(d).reshape(&[1, 1, 4, 4])?;
                    let f = DataFormat::ChannelsFirst;
                    x.conv2d_with_format(&Tensor::ones(&[2, 2, 1, 1], d), [1, 1], Padding::Same, [1, 1], f)?
                        .and(&x.max_pool2d_with_format([2, 2], [2, 2], Padding::Valid, f)?)?
                        .and(&x.avg_pool2d_with_format([2, 2], [2, 2], Padding::Valid, f)?)?
                        .and(&x.reshape(&[1, 1, 2, 2, 4])?.conv3d_with_format(
                            &Tensor::ones(&[1, 1, 1, 1, 1], d),
                            [1, 1, 1],
                            Padding::Same,
                            [1, 1, 1],
                            f,
                        )?)
                }),
                (
                    "conv1d / max_pool1d / avg_pool1d / separable_conv2d (channels first)",
                    |d| {
                        let x = img(d).reshape(&[1, 2, 8])?;
                        let f = DataFormat::ChannelsFirst;
                        x.conv1d_with_format(&Tensor::ones(&[2, 2, 1], d), 1, Padding::Same, 1, f)?
                            .and(&x.max_pool1d_with_format(2, 2, Padding::Valid, f)?)?
                            .and(&x.avg_pool1d_with_format(2, 2, Padding::Valid, f)?)?
                            .and(&img(d).reshape(&[1, 1, 4, 4])?.separable_conv2d_with_format(
                                &Tensor::ones(&[2, 2, 1, 2], d),
                                &Tensor::ones(&[1, 1, 2, 1], d),
                                [1, 1],
                                Padding::Same,
                                [1, 1],
                                f,
                            )?)
                    },
                ),
                ("layer_normalization", |d| {
                    m(d).layer_normalization(&[-1], None, None, 1e-3)
                }),
                ("lstm_cell", |d| {
                    let z = Tensor::ones(&[2, 4], DType::F64).cast(d)?;
                    Ok(Tensor::lstm_cell(&z, &Tensor::ones(&[2, 1], DType::F64).cast(d)?)?.0)
                }),
                ("batch_normalization", |d| {
                    Tensor::batch_normalization(
                        &m(d),
                        &v(d).slice(&[0], &[2])?,
                        &v(d).slice(&[0], &[2])?,
                        None,
                        None,
                        1e-3,
                    )
                }),
                ("dropout", |d| m(d).dropout(0.5, 1)),
                ("l2_loss", |d| m(d).l2_loss()),
            ],
        ),
        (
            "Special functions",
            vec![
                ("lgamma / digamma", |d| v(d).lgamma()?.and(&v(d).digamma()?)),
                ("polygamma / igamma / igammac / betainc", |d| {
                    let p = Tensor::polygamma(&v(d).scalar_like(1.0)?, &v(d))?;
                    p.and(&Tensor::igamma(&v(d), &v(d))?)?
                        .and(&Tensor::igammac(&v(d), &v(d))?)?
                        .and(&Tensor::betainc(&v(d), &v(d), &v(d))?)
                }),
                ("erfinv / ndtri", |d| v(d).erfinv()?.and(&v(d).ndtri()?)),
                ("bessel_i0e / bessel_i1e", |d| {
                    v(d).bessel_i0e()?.and(&v(d).bessel_i1e()?)
                }),
                ("xlogy / xlog1py / divide_no_nan", |d| {
                    Tensor::xlogy(&v(d), &v(d))?
                        .and(&Tensor::xlog1py(&v(d), &v(d))?)?
                        .and(&Tensor::divide_no_nan(&v(d), &v(d))?)
                }),
                ("log_sigmoid", |d| v(d).log_sigmoid()),
            ],
        ),
        (
            "Creation",
            vec![
                ("zeros / ones / full", |d| {
                    Tensor::try_zeros(&[2], d)?.and(&Tensor::try_ones(&[2], d)?)
                }),
                ("eye", |d| Tensor::try_eye(2, d)),
                ("range / linspace", |d| {
                    Tensor::range(0.0, 3.0, 1.0, d)?.and(&Tensor::linspace(0.0, 2.0, 3, d)?)
                }),
                ("random_uniform", |d| Tensor::random_uniform(&[2], 0.0, 2.0, d, 1)),
                ("random_normal / truncated_normal", |d| {
                    Tensor::random_normal(&[2], 0.0, 1.0, d, 1)?.and(&Tensor::truncated_normal(&[2], 0.0, 1.0, d, 1)?)
                }),
            ],
        ),
    ]
}

fn name(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::Bool => "bool",
        DType::C64 => "c64",
        DType::C128 => "c128",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
    }
}

fn table() -> String {
    let mut panics = Vec::new();
    let mut s = String::from(
        "# Ops and their dtypes\n\n\
         Generated by `crates/gradtape-tests/tests/ops/dtype_table.rs`, which calls every op on valid\n\
         inputs of each dtype (a mark: every op of the row accepts it; blank: refused with an\n\
         `Error`). The test\n\
         fails when this file and the code disagree; `GRADTAPE_BLESS=1 cargo test --release\n\
         --test ops dtype_table` rewrites it. Rows that list several ops hold for all of them.\n",
    );
    for (family, probes) in families() {
        s.push_str(&format!("\n## {family}\n\n| op |"));
        for d in DTYPES {
            s.push_str(&format!(" {} |", name(d)));
        }
        s.push_str("\n|---|");
        s.push_str(&"---|".repeat(DTYPES.len()));
        s.push('\n');
        for (op, probe) in probes {
            s.push_str(&format!("| `{op}` |"));
            for d in DTYPES {
                let ok = match catch_unwind(AssertUnwindSafe(|| probe(d))) {
                    Ok(r) => r.is_ok(),
                    Err(_) => {
                        panics.push(format!("{op} on {}", name(d)));
                        false
                    }
                };
                s.push_str(if ok { " ✓ |" } else { "   |" });
            }
            s.push('\n');
        }
    }
    assert!(
        panics.is_empty(),
        "these panicked instead of returning an error: {panics:?}"
    );
    s
}

#[test]
fn the_dtype_table_in_the_docs_matches_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/dtypes.md");
    let got = table();
    if std::env::var_os("GRADTAPE_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        got == want,
        "docs/dtypes.md is out of date; run GRADTAPE_BLESS=1 cargo test --release --test ops dtype_table\n{got}"
    );
}

#[test]
fn floats_are_accepted_by_every_differentiable_family() {
    // a sanity floor: every family works in f32 and f64 (but the logical,
    // bitwise and spectral rows, and one_hot's output dtypes)
    for (family, probes) in families() {
        for (op, probe) in probes {
            if op.starts_with("one_hot")
                || op.starts_with("logical_")
                || op.starts_with("bitwise_")
                || op.starts_with("all")
                || op.starts_with("fft")
            {
                continue;
            }
            for d in [DType::F32, DType::F64] {
                if let Err(e) = probe(d) {
                    panic!("{family}: {op} refuses {}: {e}", name(d));
                }
            }
        }
    }
}
