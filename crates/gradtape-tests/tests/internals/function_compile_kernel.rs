//! The unit tests of `src/function/compile/kernel.rs`, moved out of the library.

use gradtape::__internals::function::compile::kernel::*;

#[test]
fn registers_are_whole_chunks_within_the_budget_or_one_short_run() {
    // (whole chunks keep the fused sums' runs of `CHUNK` where they were)
    for n_regs in [1usize, 2, 3, 7, 12, 40] {
        for seg in [1usize, 5, 255, 256, 300, 1000, 4096, 1 << 20] {
            let w32 = register_width::<f32>(n_regs, seg);
            let w64 = register_width::<f64>(n_regs, seg);
            for w in [w32, w64] {
                assert!(w >= 1 && w <= seg && w <= MAX_WIDTH, "{n_regs} {seg} {w}");
                assert!(w == seg || w % CHUNK == 0, "{n_regs} {seg} {w}");
            }
            if seg >= MAX_WIDTH && n_regs * MAX_WIDTH * 4 <= REG_BYTES {
                assert_eq!(w32, MAX_WIDTH);
            }
        }
    }
}
