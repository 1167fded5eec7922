//! Blocks of the `f32` fused attention kernels whose rows all see the same
//! keys (no causal mask) on the register tiles of
//! `src/kernels/cpu/causal_tiles.rs` with a flat staircase (where the CPU
//! has AVX-512; elsewhere the same checks cover the product kernels),
//! against attention written out plainly in `f64`
//! (`kernels_cpu_causal_tiles::plain`) and, where a row's keys are all
//! hidden or dropout is on, against the online kernel run in `f64`.

use super::kernels_cpu_causal_tiles::{inputs, near, plain};
use gradtape::__internals::kernels::cpu::attention::{backward_online, forward_online, Dims, Dropout, Mask};
use gradtape::__internals::kernels::cpu::attention_gemm::{backward, forward, Batch};

/// The mask layouts a layer hands the kernels, as `(row, col)` strides of
/// a `[batch, tq, tk]` view: a full mask, a key (padding) mask broadcast
/// over rows, a per-row bias broadcast over keys, and a full mask stored
/// transposed (keys outermost; read key by key).
const LAYOUTS: [&str; 4] = ["full", "keys", "rows", "transposed"];

/// The mask of `layout` for batch elements of `tq × tk`: its data, its
/// strides, and the same values expanded to `[batch, tq, tk]` for the
/// reference. `hide(b, i, j)` says which entries are `-inf`; the others
/// are finite values that differ per entry.
fn mask_of(
    layout: &str,
    batch: usize,
    tq: usize,
    tk: usize,
    hide: &dyn Fn(usize, usize, usize) -> bool,
) -> (Vec<f32>, usize, usize, usize, Vec<f32>) {
    let val = |b: usize, i: usize, j: usize| {
        if hide(b, i, j) {
            f32::NEG_INFINITY
        } else {
            ((0.11 * (b * 131 + i * 17 + j) as f64).sin() * 0.9) as f32
        }
    };
    // (data, batch step, row stride, key stride)
    let (data, step, row, col): (Vec<f32>, usize, usize, usize) = match layout {
        "full" => (
            (0..batch * tq * tk)
                .map(|x| val(x / (tq * tk), x / tk % tq, x % tk))
                .collect(),
            tq * tk,
            tk,
            1,
        ),
        "keys" => ((0..batch * tk).map(|x| val(x / tk, 0, x % tk)).collect(), tk, 0, 1),
        "rows" => ((0..batch * tq).map(|x| val(x / tq, x % tq, 0)).collect(), tq, 1, 0),
        _ => (
            (0..batch * tk * tq)
                .map(|x| val(x / (tq * tk), x % tq, x / tq % tk))
                .collect(),
            tq * tk,
            1,
            tq,
        ),
    };
    let full = (0..batch * tq * tk)
        .map(|x| {
            let (b, i, j) = (x / (tq * tk), x / tk % tq, x % tk);
            data[b * step + i * row + j * col]
        })
        .collect();
    (data, step, row, col, full)
}

fn dims(batch: usize, tq: usize, tk: usize, d: usize, dv: usize, scale: f64, dropout: Option<Dropout>) -> Dims {
    Dims {
        batch,
        tq,
        tk,
        d,
        dv,
        scale,
        causal: false,
        dropout,
    }
}

/// Shapes on either side of the tiles' 8 and 16 rows and 16 and 32 keys
/// (ragged right and bottom edges), fewer and more queries than keys
/// (cross-attention), heads of 5 to 128, key lengths up to and just past
/// the 256 that run on the tiles whole; each without a mask and with every
/// mask layout (key masks hiding whole 16-key tiles at the end of some
/// batch elements), with a negative scale too: forward and backward within
/// `f32` rounding of the plain `f64` attention.
#[test]
fn flat_blocks_equal_plain_attention() {
    let cases = [
        (2, 64, 64, 32, 32),
        (3, 50, 130, 64, 64),
        (1, 130, 70, 32, 33),
        (2, 17, 200, 16, 48),
        (1, 65, 256, 128, 128),
        (1, 40, 257, 64, 64),
        (2, 70, 9, 17, 5),
        (2, 8, 33, 40, 40),
    ];
    for (batch, tq, tk, d, dv) in cases {
        let [q, k, v, g] = inputs(batch, tq, tk, d, dv);
        // batch element b keeps its first tk − 19·b keys (at least 1)
        let keep = |b: usize| tk.saturating_sub(19 * b).max(1);
        for layout in [None].into_iter().chain(LAYOUTS.map(Some)) {
            let hide = |b: usize, _i: usize, j: usize| j >= keep(b);
            let m = layout.map(|l| mask_of(l, batch, tq, tk, &hide));
            let mask = m.as_ref().map(|(data, step, row, col, _)| Mask {
                data,
                batch: Batch::even(batch, *step, 0),
                row: *row,
                col: *col,
            });
            for scale in [1.0 / (d as f64).sqrt(), -0.3] {
                let dims = dims(batch, tq, tk, d, dv, scale, None);
                let what = format!("{batch}x{tq}x{tk} d {d} dv {dv} scale {scale} mask {layout:?}");
                let full = m.as_ref().map(|m| &m.4[..]);
                let (want, want_g) = plain(&dims, &q, &k, &v, full, &g);
                let fwd = forward("t", &dims, &q, &k, &v, mask.as_ref()).unwrap();
                near(&fwd, &want, &format!("forward {what}"));
                let grads = backward("t", &dims, &q, &k, &v, mask.as_ref(), &fwd, &g).unwrap();
                near(&grads, &want_g, &format!("backward {what}"));
            }
        }
    }
}

/// Masks that hide whole rows (output 0, log-sum-exp `+inf`, gradients 0)
/// and scattered keys, each layout, with and without dropout: the flat
/// tiles give the online kernel's values in `f64` to `f32` rounding.
#[test]
fn flat_blocks_with_hidden_rows_and_dropout_equal_the_online_kernel() {
    for &(batch, tq, tk, d, dv) in &[(2, 65, 64, 32, 32), (1, 40, 130, 64, 40), (2, 17, 23, 16, 5)] {
        let [q, k, v, g] = inputs(batch, tq, tk, d, dv);
        let f64s = |x: &[f32]| x.iter().map(|&x| x as f64).collect::<Vec<_>>();
        let (q64, k64, v64, g64) = (f64s(&q), f64s(&k), f64s(&v), f64s(&g));
        for layout in LAYOUTS {
            // every 7th key, and in the row-wise layouts all of row 3
            let hide = |b: usize, i: usize, j: usize| match layout {
                "keys" => (b + j) % 7 == 3 || j >= tk - 16,
                "rows" => i == 3,
                _ => (b + i + j) % 7 == 3 || i == 3,
            };
            let (data, step, row, col, _) = mask_of(layout, batch, tq, tk, &hide);
            let mask = Mask {
                data: &data,
                batch: Batch::even(batch, step, 0),
                row,
                col,
            };
            let data64 = f64s(&data);
            let mask64 = Mask {
                data: &data64,
                batch: Batch::even(batch, step, 0),
                row,
                col,
            };
            for dropout in [None, Some(Dropout::new(7, 0.25))] {
                let dims = dims(batch, tq, tk, d, dv, 0.125, dropout);
                let what = format!(
                    "{batch}x{tq}x{tk} d {d} dv {dv} mask {layout} dropout {}",
                    dropout.is_some()
                );
                let fwd = forward("t", &dims, &q, &k, &v, Some(&mask)).unwrap();
                let want = forward_online("t", &dims, &q64, &k64, &v64, Some(&mask64)).unwrap();
                let grads = backward("t", &dims, &q, &k, &v, Some(&mask), &fwd, &g).unwrap();
                let want_g = backward_online("t", &dims, &q64, &k64, &v64, Some(&mask64), &want, &g64).unwrap();
                assert!(
                    fwd.iter().zip(&want).all(|(a, b)| a.is_finite() == b.is_finite()),
                    "forward {what}: infinities differ"
                );
                if layout != "keys" {
                    // row 3 is hidden: output 0, log-sum-exp +inf
                    let r = &fwd[3 * (dv + 1)..][..dv + 1];
                    assert!(
                        r[..dv].iter().all(|&x| x == 0.0) && r[dv] == f32::INFINITY,
                        "{what}: {r:?}"
                    );
                }
                let fin = |x: &[f64]| {
                    x.iter()
                        .map(|&y| if y.is_finite() { y } else { 0.0 })
                        .collect::<Vec<_>>()
                };
                near(
                    &fwd.iter()
                        .map(|&y| if y.is_finite() { y } else { 0.0 })
                        .collect::<Vec<_>>(),
                    &fin(&want),
                    &format!("forward {what}"),
                );
                near(&grads, &want_g, &format!("backward {what}"));
            }
        }
    }
}

/// Non-causal `f32` blocks take the tiles where the CPU has AVX-512 and
/// their keys are at most 256: `[2, 64, 64]` (one block per batch element:
/// a score product forward, a score and a `dP` product backward) and a
/// cross-attention `[3, 100, 40]` (two blocks per batch element). The
/// count is process-wide: other tests only add to it.
#[test]
fn flat_f32_blocks_take_the_tiles() {
    use gradtape::__internals::kernels::cpu::causal_tiles::{products, runs_f32};
    for (batch, tq, tk, want) in [(2, 64, 64, 6), (3, 100, 40, 18)] {
        let (d, dv) = (32, 32);
        let [q, k, v, g] = inputs(batch, tq, tk, d, dv);
        let dims = dims(batch, tq, tk, d, dv, 0.2, None);
        let before = products();
        let fwd = forward("t", &dims, &q, &k, &v, None).unwrap();
        let grads = backward("t", &dims, &q, &k, &v, None, &fwd, &g).unwrap();
        let ran = products() - before;
        if runs_f32() {
            assert!(ran >= want, "{ran} tiled products for {want} block products");
        }
        let (want_f, want_g) = plain(&dims, &q, &k, &v, None, &g);
        near(&fwd, &want_f, &format!("forward {batch}x{tq}x{tk}"));
        near(&grads, &want_g, &format!("backward {batch}x{tq}x{tk}"));
    }
}
