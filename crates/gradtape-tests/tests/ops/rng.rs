//! The seeded generator `Rng`: ranges and moments (formerly the unit tests
//! of `src/random.rs`).

use gradtape::Rng;

#[test]
fn below_is_in_range_and_covers_it() {
    let mut r = Rng::new(5);
    let mut seen = [0usize; 7];
    for _ in 0..7000 {
        seen[r.below(7) as usize] += 1;
    }
    // each bin expects 1000; a fair generator is well within 15 %
    assert!(seen.iter().all(|&c| (850..1150).contains(&c)), "{seen:?}");
}

#[test]
fn next_f64_has_the_mean_and_variance_of_a_uniform() {
    let mut r = Rng::new(11);
    let v: Vec<f64> = (0..100_000).map(|_| r.next_f64()).collect();
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
    assert!((mean - 0.5).abs() < 0.005, "{mean}");
    assert!((var - 1.0 / 12.0).abs() < 0.002, "{var}");
    assert!(v.iter().all(|x| (0.0..1.0).contains(x)));
}
