//! The unit tests of `src/kernels/cpu/complex_fns.rs`, moved out of the library.

use gradtape::__internals::kernels::cpu::complex_fns::*;
use gradtape::Complex;
type C = Complex<f64>;

#[test]
fn identities_hold() {
    for &(x, y) in &[(0.3, -1.2), (-2.0, 0.7), (1.5, 2.5), (-0.1, -0.4)] {
        let z = C::new(x, y);
        let s = c_sqrt(z);
        assert!((s * s - z).norm() < 1e-14, "sqrt({z})² = {}", s * s);
        assert!(s.re >= 0.0);
        let (sn, cs) = (c_sin(z), c_cos(z));
        assert!((sn * sn + cs * cs - C::new(1.0, 0.0)).norm() < 1e-12);
        let (sh, ch) = (c_sinh(z), c_cosh(z));
        assert!((ch * ch - sh * sh - C::new(1.0, 0.0)).norm() < 1e-12);
        assert!((c_tanh(z) - sh / ch).norm() < 1e-13);
        assert!((c_tan(z) - sn / cs).norm() < 1e-13);
    }
    // large real parts: tanh saturates instead of overflowing
    assert_eq!(c_tanh(C::new(400.0, 1.0)), C::new(1.0, 0.0));
    assert_eq!(c_tanh(C::new(-400.0, 0.5)).re, -1.0);
    // sign of a zero imaginary part on the cut
    assert_eq!(c_sqrt(C::new(-4.0, -0.0)), C::new(0.0, -2.0));
    assert_eq!(c_sqrt(C::new(-4.0, 0.0)), C::new(0.0, 2.0));
}
