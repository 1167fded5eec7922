//! The tests of `src/optim/half_update.rs`: its branch-free roundings of
//! `f32` to f16 and bf16 (what the half-precision updates store) against
//! the `half` crate's conversions, over every rounding boundary and a
//! stride through all `f32` bit patterns (NaNs, infinities, subnormals
//! and the halves' overflow included). CI takes every 1021st pattern;
//! `GRADTAPE_ROUNDING_STRIDE=1` takes all 2³² (a few minutes).
//!
//! (These were unit tests of the library, which `cargo test` never built
//! once the library's own tests were turned off; the updates' bits against
//! the element-by-element ones are in `optim_kernel_bits.rs`.)

use gradtape::__internals::optim::half_update::{bf16_round_bits, f16_round_bits};
use gradtape::{bf16, f16};

/// The stride through the `f32` bit patterns.
fn stride() -> usize {
    std::env::var("GRADTAPE_ROUNDING_STRIDE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&s| s > 0)
        .unwrap_or(1021)
}

/// `f16_round_bits` against `f16::from_f32(x).to_f32()`: around every
/// rounding boundary of every exponent (the low 13 bits at and beside the
/// tie, and the ends), and every [`stride`]th `f32`.
#[test]
fn f16_rounding_is_the_half_crates() {
    let check = |b: u32| {
        let x = f32::from_bits(b);
        let want = f16::from_f32(x).to_f32().to_bits();
        assert_eq!(f16_round_bits(x), want, "{b:#010x} ({x:e})");
    };
    for hi in 0..(1u32 << 19) {
        for lo in [0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF] {
            check(hi << 13 | lo);
        }
    }
    for b in (0..=u32::MAX).step_by(stride()) {
        check(b);
    }
}

/// `bf16_round_bits` against `bf16::from_f32(x).to_f32()`: around every
/// tie (the low 16 bits at and beside it) and every [`stride`]th `f32`.
#[test]
fn bf16_rounding_is_the_half_crates() {
    let check = |b: u32| {
        let x = f32::from_bits(b);
        let want = bf16::from_f32(x).to_f32().to_bits();
        assert_eq!(bf16_round_bits(x), want, "{b:#010x} ({x:e})");
    };
    for hi in 0..(1u32 << 16) {
        for lo in [0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF] {
            check(hi << 16 | lo);
        }
    }
    for b in (0..=u32::MAX).step_by(stride()) {
        check(b);
    }
}
