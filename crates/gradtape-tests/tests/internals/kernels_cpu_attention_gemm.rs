//! The unit tests of `src/kernels/cpu/attention_gemm.rs`, moved out of the library.

use gradtape::__internals::kernels::cpu::attention::Dims;
use gradtape::__internals::kernels::cpu::attention::{backward_online, forward_online, Dropout};
use gradtape::__internals::kernels::cpu::attention_gemm::*;

fn vals(n: usize, k: f64) -> Vec<f64> {
    (0..n).map(|i| (0.37 * i as f64 + k).sin() * 1.3).collect()
}

fn close(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let ok = (x - y).abs() <= 1e-12 * (1.0 + y.abs()) || (x.is_nan() && y.is_nan()) || x == y;
        assert!(ok, "{what} [{i}]: {x} vs {y}");
    }
}

/// The product kernels give the online kernels' values (to rounding),
/// forward and backward: row blocks across batch elements, causal rows
/// that see part of a block, fewer and more keys than queries, masks
/// with -inf entries, dropout.
#[test]
fn products_equal_the_online_kernels() {
    for &(batch, tq, tk, d, dv) in &[
        (3, 70, 70, 8, 5),
        (2, 130, 40, 4, 6),
        (1, 9, 200, 5, 3),
        (4, 1, 1, 2, 2),
        (2, 64, 64, 16, 16),
        // the widths that choose between the products' two kernels (below
        // 64 the crate's own small products where the CPU has them)
        (1, 67, 90, 33, 63),
        (1, 65, 70, 64, 64),
    ] {
        let (q, k, v) = (
            vals(batch * tq * d, 1.0),
            vals(batch * tk * d, 2.0),
            vals(batch * tk * dv, 3.0),
        );
        let g = vals(batch * tq * dv, 4.0);
        let mut m = vals(batch * tq * tk, 5.0);
        for (i, x) in m.iter_mut().enumerate() {
            if i % 7 == 3 {
                *x = f64::NEG_INFINITY;
            }
        }
        let mask = crate::kernels_cpu_causal_tiles::full_mask(&m, batch, tq, tk);
        // (a positive scale without a mask is applied inside the
        // exponential; a negative one, or a mask, on the scores first)
        for (causal, scale) in [(false, 0.4), (true, 0.4), (true, -0.3)] {
            for masked in [false, true] {
                for dropout in [None, Some(Dropout::new(9, 0.3))] {
                    let dims = Dims {
                        batch,
                        tq,
                        tk,
                        d,
                        dv,
                        scale,
                        causal,
                        dropout,
                    };
                    let what = format!(
                        "{batch}x{tq}x{tk} causal {causal} scale {scale} mask {masked} dropout {}",
                        dropout.is_some()
                    );
                    let mk = masked.then_some(&mask);
                    let a = forward("t", &dims, &q, &k, &v, mk).unwrap();
                    let b = forward_online("t", &dims, &q, &k, &v, mk).unwrap();
                    close(&a, &b, &format!("forward {what}"));
                    let ga = gradtape::__internals::kernels::cpu::attention_gemm::backward(
                        "t", &dims, &q, &k, &v, mk, &b, &g,
                    )
                    .unwrap();
                    let gb = backward_online("t", &dims, &q, &k, &v, mk, &b, &g).unwrap();
                    close(&ga, &gb, &format!("backward {what}"));
                }
            }
        }
    }
}

/// The same in `f32` (tiles of 16 columns where the small products run),
/// to `f32` rounding: head widths either side of a tile and of 64, rows
/// that are not a multiple of the tile's four, a causal block that sees
/// part of the keys; and the short key lengths and narrow heads that take
/// the products where the CPU has `sgemm` (from 8 keys and 8 wide).
#[test]
fn f32_products_equal_the_online_kernels() {
    let f32s = |n: usize, k: f64| -> Vec<f32> { vals(n, k).into_iter().map(|x| x as f32).collect() };
    for &(batch, tq, tk, d, dv) in &[
        (2, 70, 100, 32, 33),
        (3, 66, 64, 48, 17),
        (1, 64, 129, 64, 64),
        (4, 20, 8, 16, 8),
        (2, 40, 33, 8, 12),
        (3, 17, 63, 64, 9),
    ] {
        let (q, k, v, g) = (
            f32s(batch * tq * d, 1.0),
            f32s(batch * tk * d, 2.0),
            f32s(batch * tk * dv, 3.0),
            f32s(batch * tq * dv, 4.0),
        );
        for causal in [false, true] {
            let dims = Dims {
                batch,
                tq,
                tk,
                d,
                dv,
                scale: 0.2,
                causal,
                dropout: None,
            };
            let what = format!("{batch}x{tq}x{tk} d {d} dv {dv} causal {causal}");
            let a = forward("t", &dims, &q, &k, &v, None).unwrap();
            let b = forward_online("t", &dims, &q, &k, &v, None).unwrap();
            let ga =
                gradtape::__internals::kernels::cpu::attention_gemm::backward("t", &dims, &q, &k, &v, None, &b, &g)
                    .unwrap();
            let gb = backward_online("t", &dims, &q, &k, &v, None, &b, &g).unwrap();
            for (name, x, y) in [("forward", &a, &b), ("backward", &ga, &gb)] {
                assert_eq!(x.len(), y.len(), "{name} {what}");
                let worst = x
                    .iter()
                    .zip(y.iter())
                    .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
                    .fold(0.0f32, f32::max);
                assert!(worst <= 2e-5, "{name} {what}: worst relative difference {worst}");
            }
        }
    }
}
