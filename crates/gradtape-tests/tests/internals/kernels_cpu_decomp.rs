//! The unit tests of `src/kernels/cpu/decomp.rs`, moved out of the library.

use gradtape::__internals::kernels::cpu::decomp::*;

#[test]
fn lu_solves_and_gives_the_determinant() {
    // [[0, 2], [3, 4]]: needs a pivot swap; det = -6
    let a = [0.0, 2.0, 3.0, 4.0];
    let f = lu(&a, 2);
    assert!(!f.singular);
    assert_eq!(f.det(), -6.0);
    let mut b = [2.0, 7.0]; // x = [1, 1]
    f.solve(&mut b, 1, false);
    assert_eq!(b, [1.0, 1.0]);
    let mut b = [3.0, 6.0]; // Aᵀ x: [[0,3],[2,4]] x = [3, 6] -> x = [1, 1]
    f.solve(&mut b, 1, true);
    assert_eq!(b, [1.0, 1.0]);
    assert!(lu(&[1.0, 2.0, 2.0, 4.0], 2).singular);
    assert_eq!(lu(&[1.0, 2.0, 2.0, 4.0], 2).det(), 0.0);
}

#[test]
fn cholesky_and_triangular_solves() {
    // [[4, 2], [2, 5]] = L Lᵀ with L = [[2, 0], [1, 2]]
    let l = cholesky(&[4.0, 99.0, 2.0, 5.0], 2).unwrap();
    assert_eq!(l, vec![2.0, 0.0, 1.0, 2.0]);
    assert_eq!(cholesky(&[1.0, 0.0, 2.0, 1.0], 2), Err(1));
    let mut b = [2.0, 5.0];
    triangular_solve(&l, &mut b, 2, 1, true, false); // [[2,0],[1,2]] x = [2,5]
    assert_eq!(b, [1.0, 2.0]);
    let mut b = [4.0, 2.0];
    triangular_solve(&l, &mut b, 2, 1, true, true); // [[2,1],[0,2]] x = [4,2]
    assert_eq!(b, [1.5, 1.0]);
}
