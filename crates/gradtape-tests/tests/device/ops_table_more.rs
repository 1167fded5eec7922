//! More ops checked on a GPU against the CPU (the cases of
//! `ops_table.rs`, which takes them in): scans, products and sorts, 3-D
//! convolutions and pools, grouped convolutions, n-d gathers and scatters, and composite ops
//! that make constants of their own (an identity, a band mask, an
//! epsilon, coordinates), which must be made on their input's device;
//! the image resizes; segment reductions; layers that make masks and
//! tables of their own (rotary embeddings, causal and sliding-window
//! attention, decoding from a cache of fixed capacity); the dynamic
//! slices.

use super::{case, Case, Domain};
use gradtape::nn::{AttentionArgs, Module, MultiHeadAttention, RotaryEmbedding};
use gradtape::{Padding, Rng, Tensor};

const U: &[&[usize]] = &[&[3, 5]];
const SQ: &[&[usize]] = &[&[2, 4, 4]];

/// The cases.
pub fn cases() -> Vec<Case> {
    use Domain::*;
    vec![
        case("prod_rows", |x| x[0].prod(&[1], false), U, Positive, true),
        case("prod_cols_keep", |x| x[0].prod(&[0], true), U, Any, true),
        case("cumsum", |x| x[0].cumsum(1, false, false), U, Any, true),
        case("argsort", |x| x[0].argsort(1, false)?.cast(x[0].dtype()), U, Any, false),
        case(
            "argsort_descending_axis0",
            |x| x[0].argsort(0, true)?.cast(x[0].dtype()),
            U,
            Any,
            false,
        ),
        case("sort", |x| x[0].sort(-1, true), U, Any, true),
        case("top_k", |x| Ok(x[0].top_k(3)?.0), U, Any, true),
        case("cumsum_exclusive_reverse", |x| x[0].cumsum(0, true, true), U, Any, true),
        case(
            "cumsum_long_rows",
            |x| x[0].cumsum(-1, false, false),
            &[&[2, 3000]],
            Any,
            true,
        ),
        case("cumprod", |x| x[0].cumprod(1, false, false), U, Positive, true),
        case(
            "cumprod_exclusive_reverse",
            |x| x[0].cumprod(0, true, true),
            U,
            Any,
            true,
        ),
        case(
            "sigmoid_cross_entropy",
            |x| Tensor::sigmoid_cross_entropy_with_logits(&x[1], &x[0]),
            &[&[3, 5], &[3, 5]],
            Any,
            true,
        ),
        case(
            "conv3d_same",
            |x| x[0].conv3d(&x[1], [1, 2, 1], Padding::Same, [1, 1, 1]),
            &[&[2, 3, 5, 4, 2], &[2, 3, 3, 2, 3]],
            Unit,
            true,
        ),
        case(
            "conv3d_valid_dilated",
            |x| x[0].conv3d(&x[1], [2, 1, 1], Padding::Valid, [1, 2, 1]),
            &[&[1, 5, 5, 4, 2], &[2, 2, 2, 2, 2]],
            Unit,
            true,
        ),
        case(
            "conv3d_backprop_input",
            |x| Tensor::conv3d_backprop_input(&[1, 4, 5, 5, 2], &x[1], &x[0], [2, 2, 2], Padding::Same, [1, 1, 1]),
            &[&[1, 2, 3, 3, 3], &[2, 3, 3, 2, 3]],
            Unit,
            true,
        ),
        case(
            "conv3d_backprop_filter",
            |x| Tensor::conv3d_backprop_filter(&x[0], &[2, 3, 3, 2, 3], &x[1], [2, 2, 2], Padding::Same, [1, 1, 1]),
            &[&[1, 4, 5, 5, 2], &[1, 2, 3, 3, 3]],
            Unit,
            true,
        ),
        // grouped convolutions (a filter of c / groups input channels)
        case(
            "conv2d_groups2_same",
            |x| x[0].conv2d(&x[1], [1, 1], Padding::Same, [1, 1]),
            &[&[2, 5, 5, 4], &[3, 3, 2, 6]],
            Unit,
            true,
        ),
        case(
            "conv2d_groups4_valid_s2",
            |x| x[0].conv2d(&x[1], [2, 2], Padding::Valid, [1, 1]),
            &[&[1, 6, 5, 4], &[2, 2, 1, 8]],
            Unit,
            true,
        ),
        case(
            "conv2d_groups_backprop_input",
            |x| Tensor::conv2d_backprop_input(&[2, 5, 5, 4], &x[1], &x[0], [2, 2], Padding::Same, [1, 1]),
            &[&[2, 3, 3, 4], &[3, 3, 2, 4]],
            Unit,
            true,
        ),
        case(
            "conv2d_groups_backprop_filter",
            |x| Tensor::conv2d_backprop_filter(&x[0], &[3, 3, 2, 4], &x[1], [2, 2], Padding::Same, [1, 1]),
            &[&[2, 5, 5, 4], &[2, 3, 3, 4]],
            Unit,
            true,
        ),
        case(
            "conv2d_transpose_groups",
            |x| x[0].conv2d_transpose(&x[1], &[1, 6, 5, 4], [2, 2], Padding::Same, [1, 1]),
            &[&[1, 3, 3, 2], &[3, 3, 2, 2]],
            Unit,
            true,
        ),
        case(
            "conv1d_groups",
            |x| x[0].conv1d(&x[1], 1, Padding::Same, 2),
            &[&[2, 7, 6], &[3, 2, 6]],
            Unit,
            true,
        ),
        case(
            "conv3d_groups",
            |x| x[0].conv3d(&x[1], [1, 2, 1], Padding::Same, [1, 1, 1]),
            &[&[1, 3, 4, 4, 4], &[2, 2, 2, 2, 4]],
            Unit,
            true,
        ),
        case(
            "conv3d_groups_backprop_filter",
            |x| Tensor::conv3d_backprop_filter(&x[0], &[2, 2, 2, 1, 4], &x[1], [1, 1, 1], Padding::Valid, [1, 1, 1]),
            &[&[1, 3, 4, 4, 4], &[1, 2, 3, 3, 4]],
            Unit,
            true,
        ),
        case(
            "max_pool3d",
            |x| x[0].max_pool3d([2, 2, 2], [2, 1, 2], Padding::Same),
            &[&[2, 3, 5, 4, 2]],
            Any,
            true,
        ),
        case(
            "avg_pool3d",
            |x| x[0].avg_pool3d([2, 3, 2], [1, 2, 2], Padding::Same),
            &[&[1, 4, 5, 5, 2]],
            Any,
            true,
        ),
        case(
            "gather_nd",
            |x| {
                let i = Tensor::from_vec(vec![2i64, 1, 0, 4, 2, 1], &[3, 2])?.to(x[0].device())?;
                x[0].gather_nd(&i)
            },
            U,
            Any,
            true,
        ),
        case(
            "gather_nd_rows",
            |x| {
                let i = Tensor::from_vec(vec![1i32, 0, 1], &[3, 1])?.to(x[0].device())?;
                x[0].gather_nd(&i)
            },
            &[&[2, 3, 4]],
            Any,
            true,
        ),
        case(
            "scatter_nd",
            |x| {
                let i = Tensor::from_vec(vec![0i64, 2, 0, 1, 1, 3, 0, 2], &[4, 2])?.to(x[0].device())?;
                Tensor::scatter_nd(&i, &x[0].reshape(&[4, 2])?, &[2, 4, 2])
            },
            &[&[8]],
            Any,
            true,
        ),
        case(
            "gather_with_batch_dims",
            |x| {
                let i = Tensor::from_vec(vec![4i64, 0, 1, 1, 3, 2], &[3, 2])?.to(x[0].device())?;
                x[0].gather_with(&i, 1, 1)
            },
            U,
            Any,
            true,
        ),
        // composites that make constants of their own
        case("diag", |x| x[0].diag(), &[&[2, 3]], Any, true),
        case("diag_part", |x| x[0].diag_part(), SQ, Any, true),
        case("trace", |x| x[0].trace(), SQ, Any, true),
        case("band_part", |x| x[0].band_part(1, 0), SQ, Any, true),
        case("tril", |x| x[0].tril(), SQ, Any, true),
        case("triu", |x| x[0].triu(), SQ, Any, true),
        case("l2_normalize", |x| x[0].l2_normalize(&[-1], 1e-12), U, Any, true),
        case(
            "softmax_cross_entropy_with_logits",
            |x| Tensor::softmax_cross_entropy_with_logits(&x[1].softmax(-1)?, &x[0]),
            &[&[3, 5], &[3, 5]],
            Any,
            true,
        ),
        case(
            "log_poisson_loss_full",
            |x| Tensor::log_poisson_loss(&x[1].mul_scalar(3.0)?, &x[0], true),
            &[&[3, 5], &[3, 5]],
            Positive,
            true,
        ),
        case(
            "weighted_cross_entropy",
            |x| Tensor::weighted_cross_entropy_with_logits(&x[1], &x[0], 2.5),
            &[&[3, 5], &[3, 5]],
            Any,
            true,
        ),
        case(
            "pad_reflect",
            |x| x[0].pad_with(&[(1, 2), (2, 1)], gradtape::PadMode::Reflect),
            U,
            Any,
            true,
        ),
        case(
            "pad_constant",
            |x| x[0].pad_with(&[(1, 1), (0, 2)], gradtape::PadMode::Constant(2.5)),
            U,
            Any,
            true,
        ),
        case(
            "pad_symmetric",
            |x| x[0].pad_with(&[(2, 0), (0, 3)], gradtape::PadMode::Symmetric),
            U,
            Any,
            true,
        ),
        case(
            "einsum_matmul",
            |x| Tensor::einsum("ij,jk->ik", &[&x[0], &x[1]]),
            &[&[3, 5], &[5, 2]],
            Any,
            true,
        ),
        case(
            "einsum_diagonal",
            |x| Tensor::einsum("bii->bi", &[&x[0]]),
            SQ,
            Any,
            true,
        ),
        case("einsum_trace", |x| Tensor::einsum("bii->b", &[&x[0]]), SQ, Any, true),
        case(
            "einsum_outer",
            |x| Tensor::einsum("i,j->ij", &[&x[0], &x[1]]),
            &[&[3], &[4]],
            Any,
            true,
        ),
        case(
            "extract_patches",
            |x| x[0].extract_patches([2, 2], [1, 2], [1, 1], Padding::Valid),
            &[&[1, 4, 5, 2]],
            Any,
            true,
        ),
        case(
            "resize_bilinear_up",
            |x| x[0].resize_images([7, 9], gradtape::ResizeMethod::Bilinear),
            &[&[2, 3, 4, 2]],
            Any,
            true,
        ),
        case(
            "resize_bilinear_aligned_down",
            |x| x[0].resize_bilinear([3, 2], true, false),
            &[&[1, 7, 5, 2]],
            Any,
            true,
        ),
        case(
            "resize_nearest",
            |x| x[0].resize_images([6, 3], gradtape::ResizeMethod::Nearest),
            &[&[1, 4, 5, 2]],
            Any,
            true,
        ),
        case(
            "resize_nearest_aligned",
            |x| x[0].resize_nearest_neighbor([5, 8], true, false),
            &[&[2, 3, 4, 1]],
            Any,
            true,
        ),
        case(
            "unsorted_segment_max",
            |x| {
                let i = Tensor::vector(&[2i64, 0, -1]).to(x[0].device())?;
                x[0].unsorted_segment_max(&i, 4)
            },
            U,
            Any,
            true,
        ),
        case(
            "unsorted_segment_prod",
            |x| {
                let i = Tensor::vector(&[1i64, 1, 0]).to(x[0].device())?;
                x[0].unsorted_segment_prod(&i, 3)
            },
            U,
            Any,
            true,
        ),
        case(
            "segment_min",
            |x| {
                let i = Tensor::vector(&[0i64, 0, 2]).to(x[0].device())?;
                x[0].segment_min(&i)
            },
            U,
            Any,
            true,
        ),
        case(
            "tensor_scatter_nd_update",
            |x| {
                // (row 2 twice: the last update wins)
                let i = Tensor::from_vec(vec![2i64, 0, 2], &[3, 1])?.to(x[0].device())?;
                x[0].tensor_scatter_nd_update(&i, &x[1])
            },
            &[&[3, 5], &[3, 5]],
            Any,
            true,
        ),
        case(
            "resize_bicubic",
            |x| x[0].resize_images([5, 7], gradtape::ResizeMethod::Bicubic),
            &[&[1, 3, 4, 2]],
            Any,
            true,
        ),
        case(
            "resize_area",
            |x| x[0].resize_images([2, 3], gradtape::ResizeMethod::Area),
            &[&[1, 5, 7, 2]],
            Any,
            true,
        ),
        case(
            "crop_and_resize",
            |x| {
                let dev = x[0].device();
                let boxes = Tensor::from_vec(vec![0.1f32, 0.2, 0.8, 0.9, 0.0, 0.0, 1.0, 0.5], &[2, 4])?.to(dev)?;
                let idx = Tensor::vector(&[1i64, 0]).to(dev)?;
                x[0].crop_and_resize(&boxes, &idx, [3, 4], gradtape::ResizeMethod::Bilinear, 0.0)
            },
            &[&[2, 5, 6, 2]],
            Any,
            true,
        ),
        // layers whose masks and tables are made inside them
        case(
            "rotary_embedding",
            |x| RotaryEmbedding::builder().build()?.call_at(&x[0], 1),
            &[&[1, 3, 2, 4]],
            Any,
            true,
        ),
        case(
            "multi_head_attention_causal_window",
            |x| {
                let m = MultiHeadAttention::builder(2, 3)
                    .sliding_window(2)
                    .dtype(x[0].dtype())
                    .build(6, &mut Rng::new(0))?;
                m.move_to(x[0].device())?;
                m.call_with(&x[0], &x[0], AttentionArgs::new().use_causal_mask(true))
            },
            &[&[2, 5, 6]],
            Unit,
            true,
        ),
        case(
            "multi_head_attention_fixed_cache",
            |x| {
                // (the cache, the index, the rotary tables and the window
                // made on the layer's device; a prompt of 3, then one)
                let m = MultiHeadAttention::builder(2, 4)
                    .rotary_embedding(RotaryEmbedding::builder().build()?)
                    .sliding_window(2)
                    .dtype(x[0].dtype())
                    .build(6, &mut Rng::new(0))?;
                m.move_to(x[0].device())?;
                let mut cache = m.kv_cache(2, 6)?;
                let a = m.call_cached(&x[0].narrow(1, 0, 3)?, &mut cache)?;
                let b = m.call_cached(&x[0].narrow(1, 3, 1)?, &mut cache)?;
                Tensor::concat(&[&a, &b], 1)
            },
            &[&[2, 4, 6]],
            Unit,
            true,
        ),
        case(
            "dynamic_update_slice",
            |x| x[0].dynamic_update_slice(&x[1], &Tensor::vector(&[1i64, 2]).to(x[0].device())?),
            &[&[3, 5], &[2, 3]],
            Any,
            true,
        ),
        case(
            "dynamic_update_slice_rows",
            // (rows of the last axis from a permuted view)
            |x| {
                let at = Tensor::vector(&[1i64, 1, 0]).to(x[0].device())?;
                x[0].dynamic_update_slice(&x[1].permute(&[2, 1, 0])?, &at)
            },
            &[&[2, 4, 3], &[3, 2, 1]],
            Any,
            true,
        ),
        case(
            "dynamic_slice",
            |x| x[0].dynamic_slice(&Tensor::vector(&[1i64, 1]).to(x[0].device())?, &[2, 3]),
            U,
            Any,
            true,
        ),
        case(
            "multi_head_attention_scores_causal",
            |x| {
                let m = MultiHeadAttention::builder(2, 3)
                    .dtype(x[0].dtype())
                    .build(6, &mut Rng::new(0))?;
                m.move_to(x[0].device())?;
                Ok(
                    m.call_with_scores(&x[0], &x[0], AttentionArgs::new().use_causal_mask(true))?
                        .1,
                )
            },
            &[&[2, 4, 6]],
            Unit,
            true,
        ),
        case(
            "eye_mul",
            |x| x[0].mul(&Tensor::eye(5, x[0].dtype()).to(x[0].device())?.narrow(0, 0, 3)?),
            U,
            Any,
            true,
        ),
    ]
}
