//! Text from a trained [`Gpt`]: each new character drawn from the logits
//! of the last position, the window rerun for each character or fed once
//! into key/value caches (growing ones eagerly, or caches of fixed
//! capacity through one traced decoding step).

use std::sync::Arc;

use gradtape::nn::sampling::sample_next;
use gradtape::nn::KvCache;
use gradtape::{function, Result, Rng, Tensor};

use super::{invalid, Gpt};

/// How [`generate`] computes the logits of each new character.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Decode {
    /// The whole window rerun for each character (the reference).
    Rerun,
    /// One growing [`KvCache`] per block, eagerly.
    Cached,
    /// One [`KvCache`] of fixed capacity (the context) per block, through
    /// a traced decoding step: one trace for every one-character step.
    Traced,
}

/// `n` new characters after `prompt`, each drawn by [`sample_next`] from
/// the logits of the last position, and the number of traces of the
/// decoding step (0 unless `decode` is [`Decode::Traced`]). With caches
/// the prompt is fed once and then each new character alone, at its
/// position. All slide the same way: when the window (the characters
/// since its start) would pass the model's context, it restarts at the last
/// half of the context (positions from 0 again; the caches are refilled
/// from those characters).
pub fn generate(
    model: &Arc<Gpt>,
    prompt: &[i64],
    n: usize,
    temperature: f64,
    top_k: Option<usize>,
    rng: &mut Rng,
    decode: Decode,
) -> Result<(Vec<i64>, usize)> {
    let context = model.context();
    if prompt.is_empty() {
        return Err(invalid("the prompt is empty".into()));
    }
    let mut tokens = prompt.to_vec();
    let mut start = tokens.len().saturating_sub(context);
    let mut caches: Vec<KvCache> = match decode {
        Decode::Traced => model
            .blocks
            .iter()
            .map(|b| b.kv_cache(1, context))
            .collect::<Result<_>>()?,
        _ => model.blocks.iter().map(|_| KvCache::new()).collect(),
    };
    let step = {
        let model = model.clone();
        function(move |(ids, caches): &(Tensor, Vec<KvCache>)| {
            let mut caches = caches.clone();
            Ok((model.logits(ids, 0, Some(&mut caches[..]), false)?, caches))
        })
    };
    // the window's characters already in the caches
    let mut fed = 0;
    for _ in 0..n {
        if tokens.len() - start > context {
            start = tokens.len() - context / 2;
            caches.iter_mut().for_each(KvCache::clear);
            fed = 0;
        }
        let window = &tokens[start..];
        let logits = if decode != Decode::Rerun {
            let new = &window[fed..];
            let ids = Tensor::from_vec(new.to_vec(), &[1, new.len()])?;
            let l = if decode == Decode::Traced {
                let (l, next) = step.call(&(ids, std::mem::take(&mut caches)))?;
                caches = next;
                l
            } else {
                model.logits(&ids, fed, Some(&mut caches[..]), false)?
            };
            fed = window.len();
            l
        } else {
            let ids = Tensor::from_vec(window.to_vec(), &[1, window.len()])?;
            model.logits(&ids, 0, None, false)?
        };
        let t = logits.shape()[1];
        let last = logits.narrow(1, t - 1, 1)?.reshape(&[1, model.vocab])?;
        tokens.push(sample_next(&last, temperature, top_k, rng)?.to_vec::<i64>()?[0]);
    }
    Ok((tokens[prompt.len()..].to_vec(), step.trace_count()))
}
