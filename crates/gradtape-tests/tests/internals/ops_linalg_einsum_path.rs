//! The unit tests of `src/ops/linalg/einsum_path.rs`, moved out of the library.

use gradtape::__internals::ops::linalg::einsum_path::*;

/// The textbook matrix-chain order: least multiply-adds over every
/// parenthesisation of `M_0 ... M_{n-1}`, `M_i: [d_i, d_{i+1}]`.
fn matrix_chain(d: &[u128]) -> u128 {
    let n = d.len() - 1;
    let mut c = vec![vec![0u128; n]; n];
    for len in 2..=n {
        for i in 0..=n - len {
            let j = i + len - 1;
            c[i][j] = (i..j)
                .map(|k| c[i][k] + c[k + 1][j] + d[i] * d[k + 1] * d[j + 1])
                .min()
                .unwrap();
        }
    }
    c[0][n - 1]
}

fn chain(n: usize) -> (Vec<Vec<char>>, Vec<char>) {
    let l = |i: usize| (b'a' + i as u8) as char;
    ((0..n).map(|i| vec![l(i), l(i + 1)]).collect(), vec![l(0), l(n)])
}

#[test]
fn the_optimal_order_of_a_chain_is_the_matrix_chain_optimum() {
    let dims = [3u128, 40, 2, 25, 7, 30, 2, 50, 4, 9, 60, 3, 5];
    let size = |c: char| dims[(c as u8 - b'a') as usize];
    for n in 2..=OPTIMAL_MAX {
        let (terms, out) = chain(n);
        let (steps, cost) = best_path(&terms, &out, &size);
        assert_eq!(steps.len(), n - 1);
        assert_eq!(cost, matrix_chain(&dims[..=n]), "chain of {n}");
        // greedy is never better than optimal
        let (_, g) = greedy(&Problem::new(&terms, &out, &size));
        assert!(g >= cost, "chain of {n}: greedy {g} < optimal {cost}");
    }
    // twelve matrices: greedy, a valid order within 3x of the optimum here
    let (terms, out) = chain(12);
    let (steps, cost) = best_path(&terms, &out, &size);
    assert_eq!(steps.len(), 11);
    assert!(steps.iter().enumerate().all(|(k, &(i, j))| i < j && j < 12 - k));
    let best = matrix_chain(&dims);
    assert!(cost >= best && cost <= 3 * best, "greedy {cost}, optimum {best}");
}
