//! The unit tests of `src/function/compile/kernel/regs.rs`, moved out of the library.

use gradtape::__internals::function::compile::kernel::regs::*;

#[test]
fn a_loaded_register_reads_the_input_in_place_until_it_is_written() {
    let input = [1.0f32, 2.0, 3.0, 4.0];
    let mut buf = [0.0f32; 12];
    let mut regs = Regs::new(&mut buf, 4);
    // SAFETY: `input` outlives `regs` and is not written
    unsafe { regs.view(1, input.as_ptr(), 4) };
    assert_eq!(regs.get(1, 4), &input);
    let (d, a, b) = regs.split(0, 1, 1, 3);
    for ((d, a), b) in d.iter_mut().zip(a).zip(b) {
        *d = a + b;
    }
    assert_eq!(regs.get(0, 4), &[2.0, 4.0, 6.0, 0.0]);
    let (s, c, x) = regs.split2(2, 0, 1, 4);
    s.copy_from_slice(x);
    c.fill(5.0);
    assert_eq!((regs.get(2, 4), regs.get(0, 4)), (&input[..], &[5.0; 4][..]));
    // written: its own elements again, the input untouched
    regs.get_mut(1, 4).fill(9.0);
    assert_eq!(regs.get(1, 4), &[9.0; 4]);
    assert_eq!(input, [1.0, 2.0, 3.0, 4.0]);
}
