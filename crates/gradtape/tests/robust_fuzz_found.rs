//! Regression tests for what the never-panic fuzz test (`tests/fuzz/`)
//! found: each failed (hung, panicked or aborted) before its fix.

use std::sync::mpsc;
use std::time::Duration;

use gradtape::{DType, Tensor};

/// Runs `f` on another thread; fails if it does not finish in 20 s (the
/// bugs here were loops over 2^32 or more empty rows: effectively hangs).
fn within_time<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(v) => v,
        Err(e) => panic!("{what}: did not finish in 20 s ({e})"),
    }
}

/// Printing an empty tensor with a huge dim walked every empty row
/// (4 * 2^32 of them, writing `[]` each); it prints `[]` as NumPy and
/// TensorFlow do (`array([], shape=(4, 4294967296, 0), dtype=float32)`).
#[test]
fn display_of_an_empty_tensor_with_a_huge_dim() {
    let s = within_time("Display", || {
        let t = Tensor::try_zeros(&[4, 1 << 32, 0], DType::F32).unwrap();
        format!("{t}|{t:?}")
    });
    let one = "Tensor([], shape=[4, 4294967296, 0], dtype=f32)";
    assert_eq!(s, format!("{one}|{one}"));
    // a non-contiguous empty view, and one with the empty dim first
    let s = within_time("Display", || {
        let t = Tensor::try_zeros(&[1, 0, 1 << 40], DType::I32).unwrap();
        t.permute(&[2, 0, 1]).unwrap().to_string()
    });
    assert_eq!(s, "Tensor([], shape=[1099511627776, 1, 0], dtype=i32)");
}
