//! `TransformerBlock` as keras_hub's `TransformerEncoder` and
//! `TransformerDecoder`: post-norm (`normalize_first(false)`, their
//! default) and pre-norm, cross-attention to an encoder's sequence,
//! padding masks of the block's input and of the encoder's, against
//! keras_hub's layers with the same weights (f64), and the decoder's
//! gradients in both inputs against `tf.GradientTape`'s: all printed by
//! `tests/reference/keras_hub_blocks.py`. Then decoding with a cache
//! against the whole sequence, traced against eager, finite differences
//! and the errors for a missing or unexpected encoder.

use gradtape::nn::{Activation, BlockArgs, KvCache, Module, TransformerBlock, TransformerBlockBuilder};
use gradtape::{check_gradients, function, CheckOptions, DType, GradientTape, Result, Rng, Tensor};

#[path = "../reference/keras_hub_blocks.rs"]
mod keras;
use keras::*;

use super::keras_util::{assert_close, fill, weighted};

/// The script's block: width 6, 2 heads, feed-forward 8, ReLU, f64,
/// every weight `fill(shape, key(path))` with its path inside the block.
fn block(b: impl FnOnce(TransformerBlockBuilder) -> TransformerBlockBuilder) -> Result<TransformerBlock> {
    let builder = TransformerBlock::builder(6, 2, 8)
        .activation(Activation::Relu)
        .dtype(DType::F64)
        .name("blk");
    let m = b(builder).build(&mut Rng::new(0))?;
    for v in m.variables() {
        let path = v.name().strip_prefix("blk/").expect("the block's name").to_string();
        let key = (path.bytes().map(u64::from).sum::<u64>() % 89) as f64 / 7.0;
        v.assign(&fill(&v.shape(), key, DType::F64))?;
    }
    Ok(m)
}

fn decoder(normalize_first: bool) -> Result<TransformerBlock> {
    block(|b| b.causal(true).cross_attention(10).normalize_first(normalize_first))
}

/// The script's inputs and padding masks.
fn inputs() -> (Tensor, Tensor, Tensor, Tensor) {
    let xpad = Tensor::from_vec(vec![true, true, true, false, true, true, true, true], &[2, 4]).unwrap();
    let epad = [true, true, true, true, true, true, true, false, false, false];
    let epad = Tensor::from_vec(epad.to_vec(), &[2, 5]).unwrap();
    (
        fill(&[2, 4, 6], 0.3, DType::F64),
        fill(&[2, 5, 10], 0.8, DType::F64),
        xpad,
        epad,
    )
}

#[test]
fn a_post_norm_block_is_keras_hubs_transformer_encoder() -> Result<()> {
    let e = block(|b| b.normalize_first(false))?;
    let (x, _, xpad, _) = inputs();
    assert_close("encoder", &e.call_with(&x, BlockArgs::new())?, &ENCODER_POST, 1e-12);
    let padded = e.call_with(&x, BlockArgs::new().padding_mask(&xpad))?;
    assert_close("encoder, padded", &padded, &ENCODER_POST_PADDED, 1e-12);
    assert_eq!(
        e.forward_with_padding(&x, &xpad, false)?.to_vec_f64(),
        padded.to_vec_f64()
    );
    Ok(())
}

#[test]
fn decoders_with_cross_attention_are_keras_hubs_pre_and_post_norm() -> Result<()> {
    let (x, enc, xpad, epad) = inputs();
    for (first, plain, padded) in [
        (false, &DECODER_POST, &DECODER_POST_PADDED),
        (true, &DECODER_PRE, &DECODER_PRE_PADDED),
    ] {
        let d = decoder(first)?;
        assert_close(
            &format!("decoder (pre-norm {first})"),
            &d.call_with(&x, BlockArgs::new().encoder(&enc))?,
            plain,
            1e-12,
        );
        let args = BlockArgs::new()
            .encoder(&enc)
            .padding_mask(&xpad)
            .encoder_padding_mask(&epad);
        assert_close(
            &format!("decoder padded (pre-norm {first})"),
            &d.call_with(&x, args)?,
            padded,
            1e-12,
        );
    }
    // the variables: the self-attention's, then the cross-attention's
    let names: Vec<String> = decoder(false)?
        .variables()
        .iter()
        .map(|v| v.name().to_string())
        .collect();
    let at = |p: &str| {
        names
            .iter()
            .position(|n| n == p)
            .unwrap_or_else(|| panic!("{p} in {names:?}"))
    };
    assert!(at("blk/self_attention/query/kernel") < at("blk/cross_attention_layer_norm/gamma"));
    assert!(at("blk/cross_attention/attention_output/bias") < at("blk/feedforward_layer_norm/gamma"));
    assert_eq!(names.len(), 2 + 8 + 2 + 8 + 2 + 4);
    Ok(())
}

#[test]
fn the_decoders_gradients_match_tensorflow_and_finite_differences() -> Result<()> {
    let d = decoder(false)?;
    let (x, enc, xpad, epad) = inputs();
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(&x);
        tape.watch(&enc);
        let args = BlockArgs::new()
            .encoder(&enc)
            .padding_mask(&xpad)
            .encoder_padding_mask(&epad);
        weighted(&d.call_with(&x, args)?)
    })?;
    assert_close("loss", &l, &DECODER_POST_LOSS, 1e-12);
    let g = tape.gradient(&l, &[&x, &enc][..])?;
    assert_close("d/dx", g[0].as_ref().expect("a gradient"), &DECODER_POST_GRAD_X, 1e-10);
    assert_close(
        "d/dencoder",
        g[1].as_ref().expect("a gradient"),
        &DECODER_POST_GRAD_ENCODER,
        1e-10,
    );
    let f = |t: &[Tensor]| {
        let args = BlockArgs::new()
            .encoder(&t[1])
            .padding_mask(&xpad)
            .encoder_padding_mask(&epad);
        weighted(&d.call_with(&t[0], args)?)
    };
    let report = check_gradients(f, &[x, enc], &CheckOptions::default())?;
    assert!(report.compared > 0, "{report:?}");
    Ok(())
}

#[test]
fn a_decoder_decodes_with_a_cache_as_on_the_whole_sequence_pre_and_post_norm() -> Result<()> {
    let (x, enc, _, epad) = inputs();
    for first in [false, true] {
        let d = decoder(first)?;
        let args = BlockArgs::new().encoder(&enc).encoder_padding_mask(&epad);
        let full = d.call_with(&x, args)?;
        let mut cache = KvCache::new();
        let mut rows = vec![d.call_cached_with(&x.narrow(1, 0, 2)?, &mut cache, args)?];
        for i in 2..4 {
            rows.push(d.call_cached_with(&x.narrow(1, i, 1)?, &mut cache, args)?);
        }
        let got = Tensor::concat(&rows.iter().collect::<Vec<_>>(), 1)?;
        assert_close(&format!("decoded (pre-norm {first})"), &got, &full.to_vec_f64(), 1e-12);
    }
    Ok(())
}

/// While decoding, the encoder's key and value heads are projected once
/// and kept in the cache (keras_hub's `cross_attention_cache`); a cache
/// given another encoder's sequence projects that one, so a stale cache
/// never answers: each step equals the whole decoder on its own encoder.
#[test]
fn a_decoder_keeps_its_encoders_projections_and_never_a_stale_one() -> Result<()> {
    let (x, enc, _, _) = inputs();
    let other = enc.mul_scalar(-0.5)?.add_scalar(0.25)?;
    let d = decoder(true)?;
    let mut cache = KvCache::new();
    d.call_cached_with(&x.narrow(1, 0, 2)?, &mut cache, BlockArgs::new().encoder(&enc))?;
    let kept = cache.encoder_keys().expect("kept").clone();
    // the third position on the first encoder: the kept heads, reused
    let third = d.call_cached_with(&x.narrow(1, 2, 1)?, &mut cache, BlockArgs::new().encoder(&enc))?;
    assert_eq!(cache.encoder_keys().expect("kept").id(), kept.id());
    let full = d.call_with(&x.narrow(1, 0, 3)?, BlockArgs::new().encoder(&enc))?;
    assert_close(
        "third, first encoder",
        &third,
        &full.narrow(1, 2, 1)?.to_vec_f64(),
        1e-12,
    );
    // the fourth on another encoder's sequence (the self-attention's cache
    // as it is): that encoder's heads, not the kept ones
    let mut again = cache.clone();
    let fourth = d.call_cached_with(&x.narrow(1, 3, 1)?, &mut again, BlockArgs::new().encoder(&other))?;
    assert_ne!(again.encoder_keys().expect("kept").id(), kept.id());
    let mut fresh = KvCache::new();
    d.call_cached_with(&x.narrow(1, 0, 3)?, &mut fresh, BlockArgs::new().encoder(&enc))?;
    let mut mixed = fresh.clone();
    let want = d.call_cached_with(&x.narrow(1, 3, 1)?, &mut mixed, BlockArgs::new().encoder(&other))?;
    assert_close("fourth, other encoder", &fourth, &want.to_vec_f64(), 1e-12);
    let stale = d.call_cached_with(&x.narrow(1, 3, 1)?, &mut fresh, BlockArgs::new().encoder(&enc))?;
    assert!(
        fourth.sub(&stale)?.abs()?.max_all()?.to_scalar::<f64>()? > 1e-3,
        "the other encoder's sequence changed nothing"
    );
    // `clear` forgets them
    cache.clear();
    assert!(cache.encoder_keys().is_none() && cache.is_empty());
    Ok(())
}

#[test]
fn a_traced_decoder_step_equals_eager() -> Result<()> {
    let (x, enc, xpad, epad) = inputs();
    let d = decoder(false)?;
    let args = BlockArgs::new()
        .encoder(&enc)
        .padding_mask(&xpad)
        .encoder_padding_mask(&epad);
    let eager = d.call_with(&x, args)?.to_vec_f64();
    let traced = {
        let (xpad, epad) = (xpad.clone(), epad.clone());
        function(move |(x, enc): &(Tensor, Tensor)| {
            d.call_with(
                x,
                BlockArgs::new()
                    .encoder(enc)
                    .padding_mask(&xpad)
                    .encoder_padding_mask(&epad),
            )
        })
    };
    assert_eq!(traced.call(&(x.clone(), enc.clone()))?.to_vec_f64(), eager);
    // other inputs through the same graph
    let (x2, enc2) = (fill(&[2, 4, 6], 1.7, DType::F64), fill(&[2, 5, 10], -0.4, DType::F64));
    let want = decoder(false)?.call_with(
        &x2,
        BlockArgs::new()
            .encoder(&enc2)
            .padding_mask(&xpad)
            .encoder_padding_mask(&epad),
    )?;
    assert_eq!(traced.call(&(x2, enc2))?.to_vec_f64(), want.to_vec_f64());
    Ok(())
}

#[test]
fn a_missing_or_unexpected_encoder_and_bad_masks_are_errors() -> Result<()> {
    let (x, enc, _, _) = inputs();
    let d = decoder(false)?;
    let e = block(|b| b)?;
    let err = d.call_with(&x, BlockArgs::new()).unwrap_err().to_string();
    assert!(err.contains("TransformerBlock") && err.contains("encoder"), "{err}");
    let err = e.call_with(&x, BlockArgs::new().encoder(&enc)).unwrap_err().to_string();
    assert!(err.contains("without cross-attention"), "{err}");
    let short = Tensor::from_vec(vec![true; 8], &[2, 4])?;
    let err = d
        .call_with(&x, BlockArgs::new().encoder(&enc).encoder_padding_mask(&short))
        .unwrap_err()
        .to_string();
    assert!(err.contains("encoder padding mask") && err.contains("[2, 5]"), "{err}");
    let err = e
        .call_with(&x, BlockArgs::new().padding_mask(&Tensor::ones(&[2, 4], DType::F32)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("padding mask") && err.contains("f32"), "{err}");
    // the encoder's feature size is the builder's
    assert!(d
        .call_with(&x, BlockArgs::new().encoder(&fill(&[2, 5, 6], 0.0, DType::F64)))
        .is_err());
    // decoding needs a causal block, at inference
    let mut cache = KvCache::new();
    assert!(e.call_cached(&x, &mut cache).is_err());
    assert!(d
        .call_cached_with(&x, &mut cache, BlockArgs::new().encoder(&enc).training(true))
        .is_err());
    Ok(())
}
