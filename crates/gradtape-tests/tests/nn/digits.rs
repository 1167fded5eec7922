//! The digits example's claims, on its own code: at least 95 % test
//! accuracy on the UCI digits, and the same accuracy from a model loaded
//! from its checkpoint.

#[allow(dead_code)]
#[path = "../../../gradtape-examples/examples/digits.rs"]
mod example;

#[test]
fn the_digits_example_reaches_95_percent_and_reloads_exactly() -> gradtape::Result<()> {
    let out_dir = std::env::temp_dir().join(format!("gradtape-digits-{}", std::process::id()));
    let cfg = example::Config {
        verbose: false,
        out_dir: out_dir.clone(),
        ..example::Config::default()
    };
    let out = example::train(&cfg)?;
    assert!(out.test_accuracy >= 0.95, "test accuracy {}", out.test_accuracy);
    assert_eq!(out.reloaded_test_accuracy, out.test_accuracy);
    assert_eq!(out.losses.len(), cfg.epochs);
    assert!(out.losses[cfg.epochs - 1] < 0.2 * out.losses[0], "{:?}", out.losses);
    assert!(out.checkpoint.exists());
    std::fs::remove_dir_all(out_dir).unwrap();
    Ok(())
}

#[test]
fn the_data_file_has_the_1797_images() -> gradtape::Result<()> {
    let (x, y) = example::load_digits(example::DATA)?;
    assert_eq!(x.shape(), &[1797, 8, 8, 1]);
    let labels = y.to_vec::<i64>()?;
    // every class is present, about 180 of each
    for c in 0..10 {
        let n = labels.iter().filter(|&&l| l == c).count();
        assert!((170..=190).contains(&n), "class {c}: {n}");
    }
    let px = x.to_vec::<f32>()?;
    assert!(px.iter().all(|p| (0.0..=1.0).contains(p)));
    Ok(())
}
