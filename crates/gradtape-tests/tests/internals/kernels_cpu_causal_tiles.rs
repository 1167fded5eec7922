//! The causal blocks of the `f32` fused attention kernels on diagonal
//! tiles (`src/kernels/cpu/causal_tiles.rs`, where the CPU has AVX-512;
//! elsewhere the same checks cover the sub-block products), against
//! attention written out plainly in `f64` here: scores, softmax, output,
//! and the gradients from their textbook formulas.

use gradtape::__internals::kernels::cpu::attention::{backward_online, forward_online, Dims, Dropout, Mask};
use gradtape::__internals::kernels::cpu::attention_gemm::{backward, forward, Batch};

pub(crate) fn vals(n: usize, k: f64) -> Vec<f32> {
    (0..n).map(|i| ((0.37 * i as f64 + k).sin() * 1.3) as f32).collect()
}

/// `q`, `k`, `v` and the output's gradient for `batch` elements of `tq`
/// queries and `tk` keys of width `d` (values of width `dv`).
pub(crate) fn inputs(batch: usize, tq: usize, tk: usize, d: usize, dv: usize) -> [Vec<f32>; 4] {
    [
        vals(batch * tq * d, 1.0),
        vals(batch * tk * d, 2.0),
        vals(batch * tk * dv, 3.0),
        vals(batch * tq * dv, 4.0),
    ]
}

/// Mask values for `batch` matrices of `[tq, tk]` (from [`vals`]) that
/// hide every `every`th key from element `from` on, and all of row `row`
/// of each matrix: in `f32` and as the same values in `f64`.
pub(crate) fn hiding(
    batch: usize,
    tq: usize,
    tk: usize,
    every: usize,
    from: usize,
    row: usize,
) -> (Vec<f32>, Vec<f64>) {
    let mut m = vals(batch * tq * tk, 5.0);
    for (i, x) in m.iter_mut().enumerate() {
        if i % every == from || (i / tk) % tq == row {
            *x = f32::NEG_INFINITY;
        }
    }
    let m64 = m.iter().map(|&x| x as f64).collect();
    (m, m64)
}

/// The blocked kernels' forward and backward on `[q, k, v, dO]` against
/// the online kernel run on the same values in `f64` (and the `f64` copy
/// of the mask), to `f32` rounding; infinities (a hidden row's
/// log-sum-exp) where the reference has them. Returns the forward output.
pub(crate) fn against_online(
    what: &str,
    dims: &Dims,
    [q, k, v, g]: [&[f32]; 4],
    masks: Option<(&Mask<'_, f32>, &Mask<'_, f64>)>,
) -> Vec<f32> {
    let f64s = |x: &[f32]| x.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let (mask, mask64) = (masks.map(|m| m.0), masks.map(|m| m.1));
    let fwd = forward("t", dims, q, k, v, mask).unwrap();
    let (q64, k64, v64, g64) = (f64s(q), f64s(k), f64s(v), f64s(g));
    let want = forward_online("t", dims, &q64, &k64, &v64, mask64).unwrap();
    let grads = backward("t", dims, q, k, v, mask, &fwd, g).unwrap();
    let want_g = backward_online("t", dims, &q64, &k64, &v64, mask64, &want, &g64).unwrap();
    assert!(
        fwd.iter().zip(&want).all(|(a, b)| a.is_finite() == b.is_finite()),
        "forward {what}: infinities differ"
    );
    let finite = |x: &[f64]| {
        x.iter()
            .map(|&y| if y.is_finite() { y } else { 0.0 })
            .collect::<Vec<_>>()
    };
    near(&fin32(&fwd), &finite(&want), &format!("forward {what}"));
    near(&grads, &want_g, &format!("backward {what}"));
    fwd
}

/// `x` with its infinities and NaNs as 0.
fn fin32(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&y| if y.is_finite() { y } else { 0.0 }).collect()
}

/// A mask with its own `[tq, tk]` matrix per batch element.
pub(crate) fn full_mask<T>(data: &[T], batch: usize, tq: usize, tk: usize) -> Mask<'_, T> {
    Mask {
        data,
        batch: Batch::even(batch, tq * tk, 0),
        row: tk,
        col: 1,
    }
}

/// Plain attention in `f64` on the `f32` inputs: per query row its output
/// and log-sum-exp (`dv + 1` values, as the kernels lay them out), and per
/// batch element `dq`, `dk`, `dv` one after the other.
pub(crate) fn plain(
    dims: &Dims,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    g: &[f32],
) -> (Vec<f64>, Vec<f64>) {
    let Dims {
        batch, tq, tk, d, dv, ..
    } = *dims;
    let f = |x: &[f32]| x.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let (q, k, v, g) = (f(q), f(k), f(v), f(g));
    let mut out = vec![0.0; batch * tq * (dv + 1)];
    let per = tq * d + tk * d + tk * dv;
    let mut grads = vec![0.0; batch * per];
    for b in 0..batch {
        let (qb, kb, vb, gb) = (&q[b * tq * d..], &k[b * tk * d..], &v[b * tk * dv..], &g[b * tq * dv..]);
        let gr = &mut grads[b * per..][..per];
        let (dq, rest) = gr.split_at_mut(tq * d);
        let (dk, dvv) = rest.split_at_mut(tk * d);
        for i in 0..tq {
            let seen = if dims.causal { (i + 1).min(tk) } else { tk };
            let s: Vec<f64> = (0..seen)
                .map(|j| {
                    let dot: f64 = (0..d).map(|c| qb[i * d + c] * kb[j * d + c]).sum();
                    dims.scale * dot + mask.map_or(0.0, |m| m[(b * tq + i) * tk + j] as f64)
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = s.iter().map(|x| (x - m).exp()).sum();
            let p: Vec<f64> = s.iter().map(|x| (x - m).exp() / sum).collect();
            let o = &mut out[(b * tq + i) * (dv + 1)..][..dv + 1];
            for (j, pj) in p.iter().enumerate() {
                for c in 0..dv {
                    o[c] += pj * vb[j * dv + c];
                }
            }
            o[dv] = m + sum.ln();
            // dP = g·v, dS = P (dP − g·o), then the three products
            let go: f64 = (0..dv).map(|c| gb[i * dv + c] * o[c]).sum();
            for (j, pj) in p.iter().enumerate() {
                let dp: f64 = (0..dv).map(|c| gb[i * dv + c] * vb[j * dv + c]).sum();
                let ds = pj * (dp - go);
                for c in 0..d {
                    dq[i * d + c] += dims.scale * ds * kb[j * d + c];
                    dk[j * d + c] += dims.scale * ds * qb[i * d + c];
                }
                for c in 0..dv {
                    dvv[j * dv + c] += pj * gb[i * dv + c];
                }
            }
        }
    }
    (out, grads)
}

/// `f32` values against `f64` ones: each element within `1e-4` of the
/// reference relative to the largest of its tensor (a key product left out
/// or counted twice moves elements by a good part of that).
pub(crate) fn near(x: &[f32], y: &[f64], what: &str) {
    assert_eq!(x.len(), y.len(), "{what}");
    let top = y.iter().fold(1.0f64, |a, b| a.max(b.abs()));
    for (i, (a, b)) in x.iter().zip(y).enumerate() {
        assert!(
            (*a as f64 - b).abs() <= 1e-4 * top,
            "{what} [{i}]: {a} vs {b} (largest {top})"
        );
    }
}

/// The blocked kernels' forward and backward passes against plain `f64`
/// attention (`plain`), with the mask `m` given both ways (its values for
/// `plain`, as the kernels' `mask`) or none.
pub(crate) fn against_plain(
    dims: &Dims,
    [q, k, v, g]: [&[f32]; 4],
    m: Option<&[f32]>,
    mask: Option<&Mask<'_, f32>>,
    what: &str,
) {
    let (want, want_g) = plain(dims, q, k, v, m, g);
    let fwd = forward("t", dims, q, k, v, mask).unwrap();
    near(&fwd, &want, &format!("forward {what}"));
    let grads = backward("t", dims, q, k, v, mask, &fwd, g).unwrap();
    near(&grads, &want_g, &format!("backward {what}"));
}

/// Causal lengths on either side of the tiles' 8 and 16 rows and of the
/// blocks' 64, more and fewer keys than queries (the block that reaches
/// past the keys; past 256 keys only the diagonal is tiled), head widths
/// with a part-width right edge (5, 40), a mask with a negative scale (the
/// scores scaled before the softmax): forward and backward within `f32`
/// rounding of the plain `f64` attention.
#[test]
fn causal_blocks_equal_plain_attention() {
    let mut cases: Vec<(usize, usize, usize, usize, usize)> = [1, 15, 17, 63, 65, 127, 129, 200]
        .iter()
        .map(|&t| (2, t, t, 64, 64))
        .collect();
    cases.extend([
        (3, 40, 40, 32, 40),
        (2, 70, 70, 17, 5),
        (2, 50, 130, 64, 64),
        (1, 150, 70, 32, 33),
        (1, 100, 300, 16, 48),
        (1, 300, 300, 64, 64),
        (2, 129, 129, 128, 128),
    ]);
    for (batch, tq, tk, d, dv) in cases {
        let [q, k, v, g] = inputs(batch, tq, tk, d, dv);
        let m = vals(batch * tq * tk, 5.0);
        let mask = full_mask(&m, batch, tq, tk);
        for (scale, masked) in [(1.0 / (d as f64).sqrt(), false), (-0.3, true)] {
            let dims = Dims {
                batch,
                tq,
                tk,
                d,
                dv,
                scale,
                causal: true,
                dropout: None,
            };
            let what = format!("{batch}x{tq}x{tk} d {d} dv {dv} scale {scale} mask {masked}");
            let (m, mask) = (masked.then_some(&m[..]), masked.then_some(&mask));
            against_plain(&dims, [&q, &k, &v, &g], m, mask, &what);
        }
    }
}

/// With dropout and with masks that hide keys (and whole rows) the causal
/// tiles give the online kernel's values in `f64` to `f32` rounding.
#[test]
fn causal_blocks_with_dropout_and_hidden_keys_equal_the_online_kernel() {
    for &(batch, tq, tk, d, dv) in &[(2, 65, 65, 64, 64), (1, 130, 200, 32, 40), (2, 17, 17, 16, 5)] {
        let [q, k, v, g] = inputs(batch, tq, tk, d, dv);
        // every 7th key hidden, and all of row 3
        let (m, m64) = hiding(batch, tq, tk, 7, 3, 3);
        let mask = full_mask(&m, batch, tq, tk);
        let mask64 = full_mask(&m64, batch, tq, tk);
        for (masked, dropout) in [
            (true, None),
            (false, Some(Dropout::new(7, 0.25))),
            (true, Some(Dropout::new(3, 0.5))),
        ] {
            let dims = Dims {
                batch,
                tq,
                tk,
                d,
                dv,
                scale: 0.125,
                causal: true,
                dropout,
            };
            let what = format!(
                "{batch}x{tq}x{tk} d {d} dv {dv} mask {masked} dropout {}",
                dropout.is_some()
            );
            let masks = masked.then_some((&mask, &mask64));
            against_online(&what, &dims, [&q, &k, &v, &g], masks);
        }
    }
}

/// Causal `f32` blocks take the tiles where the CPU has AVX-512: `[2, 128,
/// 128]` has two blocks of 64 rows per batch element, each seeing part of
/// its keys: 4 score products forward, and 4 score and 4 `dP` products
/// backward (the count is process-wide: other tests only add to it).
#[test]
fn causal_f32_blocks_take_the_tiles() {
    use gradtape::__internals::kernels::cpu::causal_tiles::{products, runs_f32};
    let avx512 = {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    };
    let wanted = avx512
        && std::env::var("GRADTAPE_CAUSAL_TILES").map_or(true, |v| v != "0")
        && std::env::var("GRADTAPE_SGEMM").map_or(true, |v| v != "0");
    assert_eq!(runs_f32(), wanted, "whether f32 causal blocks run on the tiles");
    let (batch, t, d) = (2, 128, 64);
    let dims = Dims {
        batch,
        tq: t,
        tk: t,
        d,
        dv: d,
        scale: 0.125,
        causal: true,
        dropout: None,
    };
    let (q, k, v, g) = (
        vals(batch * t * d, 1.0),
        vals(batch * t * d, 2.0),
        vals(batch * t * d, 3.0),
        vals(batch * t * d, 4.0),
    );
    let before = products();
    let fwd = forward("t", &dims, &q, &k, &v, None).unwrap();
    let grads = backward("t", &dims, &q, &k, &v, None, &fwd, &g).unwrap();
    let ran = products() - before;
    if wanted {
        assert!(ran >= 12, "{ran} tiled products for 12 causal block products");
    }
    let (want, want_g) = plain(&dims, &q, &k, &v, None, &g);
    near(&fwd, &want, "forward [2, 128, 128]");
    near(&grads, &want_g, "backward [2, 128, 128]");
}

/// With batch elements enough for every thread (`8 · threads`), a forward
/// task takes a whole batch element and its blocks share the packed keys
/// (`causal_tiles::KeyPanels`; the backward pass's tasks always do):
/// lengths of 3 blocks with a last block of one row (129), and past
/// `TILES_WHOLE` (300: the last block tiles only its diagonal, from key
/// 256, continuing the panels packed before it), causal and not, against
/// plain `f64` attention.
#[test]
fn blocks_sharing_their_key_panels_equal_plain_attention() {
    let batch = 8 * gradtape::__internals::kernels::cpu::workers::threads();
    for &(t, d, causal) in &[(129usize, 16usize, true), (129, 16, false), (300, 32, true)] {
        let dims = Dims {
            batch,
            tq: t,
            tk: t,
            d,
            dv: d,
            scale: 1.0 / (d as f64).sqrt(),
            causal,
            dropout: None,
        };
        let [q, k, v, g] = inputs(batch, t, t, d, d);
        let what = format!("{batch}x{t}x{t} d {d} causal {causal}");
        against_plain(&dims, [&q, &k, &v, &g], None, None, &what);
    }
}

/// The rows of a causal block are cleared past their keys only as far as
/// the tiles read them (`causal_tiles::read_end`: the rest of the task's
/// scratch keeps the scores of the tiles or of an earlier block): lengths
/// around the 8-row and 8-key tiles and the 64-row blocks (1, 17, 65,
/// 129, 200, 300), more and fewer keys than queries, heads of 32, 80 and
/// 128, with and without a mask, against plain `f64` attention; with
/// dropout and keys hidden by a mask, against the online kernel in `f64`.
/// Several batch elements, so that each task's scratch holds the last
/// element's scores (other row lengths) when the next one starts.
#[test]
fn causal_rows_cleared_as_far_as_the_tiles_read_equal_plain_attention() {
    for &(batch, tq, tk, d) in &[
        (3, 1, 1, 32),
        (3, 17, 17, 80),
        (3, 65, 65, 128),
        (2, 129, 129, 32),
        (2, 200, 200, 80),
        (2, 300, 300, 32),
        (3, 65, 17, 32),
        (2, 17, 200, 80),
        (2, 129, 300, 128),
    ] {
        let [q, k, v, g] = inputs(batch, tq, tk, d, d);
        let m = vals(batch * tq * tk, 5.0);
        let mask = full_mask(&m, batch, tq, tk);
        for masked in [false, true] {
            let dims = Dims {
                batch,
                tq,
                tk,
                d,
                dv: d,
                scale: 1.0 / (d as f64).sqrt(),
                causal: true,
                dropout: None,
            };
            let what = format!("{batch}x{tq}x{tk} d {d} mask {masked}");
            let (m, mask) = (masked.then_some(&m[..]), masked.then_some(&mask));
            against_plain(&dims, [&q, &k, &v, &g], m, mask, &what);
        }
        let (hm, hm64) = hiding(batch, tq, tk, 5, 2, tq / 2);
        let (hmask, hmask64) = (full_mask(&hm, batch, tq, tk), full_mask(&hm64, batch, tq, tk));
        let dims = Dims {
            batch,
            tq,
            tk,
            d,
            dv: d,
            scale: 0.1,
            causal: true,
            dropout: Some(Dropout::new(11, 0.3)),
        };
        let what = format!("{batch}x{tq}x{tk} d {d} hidden keys and dropout");
        against_online(&what, &dims, [&q, &k, &v, &g], Some((&hmask, &hmask64)));
    }
}

/// Every head width the tiles' part-width edges meet (8 to 128: part
/// vectors of `k`, part panels of the outputs) on lengths beside the
/// 8-row score tiles and the 64-row blocks (7, 33, 64, 70), causal with as
/// many keys as queries and with more or fewer, and not causal; each bare
/// and with a key padding mask (one `[tk]` row per batch element, `-inf`
/// past a length that differs per element: exponentials of `-inf` inside
/// the keys a row sees): forward and backward within `f32` rounding of the
/// plain `f64` attention.
#[test]
fn head_widths_and_padding_equal_plain_attention() {
    for &d in &[8usize, 16, 24, 32, 48, 64, 80, 128] {
        for &(tq, tk, causal) in &[
            (7usize, 7usize, true),
            (33, 33, true),
            (64, 64, true),
            (70, 70, true),
            (33, 50, true),
            (70, 20, true),
            (33, 33, false),
            (70, 64, false),
        ] {
            let batch = 3;
            let [q, k, v, g] = inputs(batch, tq, tk, d, d);
            // batch element b hides its last 5·b keys (at least one kept)
            let keep = |b: usize| tk.saturating_sub(5 * b).max(1);
            let pad: Vec<f32> = (0..batch * tk)
                .map(|x| if x % tk >= keep(x / tk) { f32::NEG_INFINITY } else { 0.0 })
                .collect();
            let full: Vec<f32> = (0..batch * tq * tk).map(|x| pad[x / (tq * tk) * tk + x % tk]).collect();
            let mask = Mask {
                data: &pad[..],
                batch: Batch::even(batch, tk, 0),
                row: 0,
                col: 1,
            };
            for masked in [false, true] {
                let dims = Dims {
                    batch,
                    tq,
                    tk,
                    d,
                    dv: d,
                    scale: 1.0 / (d as f64).sqrt(),
                    causal,
                    dropout: None,
                };
                let what = format!("{batch}x{tq}x{tk} d {d} causal {causal} padded {masked}");
                let (m, mask) = (masked.then_some(&full[..]), masked.then_some(&mask));
                against_plain(&dims, [&q, &k, &v, &g], m, mask, &what);
            }
        }
    }
}
