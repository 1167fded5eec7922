//! Random programs in `f16` and `bf16`, traced against eager.
//!
//! The compiler fuses half-precision elementwise chains (each op computed
//! in `f32` and rounded to the half type where eager rounds it) and runs
//! the half types' products, reductions, optimizer-free training steps and
//! gradients through the same passes as `f32`'s. `half_fusion.rs` checks
//! the fused ops bit for bit, one op at a time and in chains; here whole
//! programs of the generator's vocabulary (every op of which applies to
//! half inputs as often as to `f64` ones) run in each half type, eagerly
//! and traced, with their traced training steps and gradients, as the
//! `f32` and `f64` programs do. Differences are allowed up to a few units
//! of the half type's roundoff (a product's sums in another order round to
//! a neighbouring half value), beyond which the `f64` run referees
//! ([`rounding`](super::referees::rounding)).

use super::*;

/// Small programs per half type in CI (one in 16 at the larger sizes).
const HALF_CASES: usize = 96;

#[test]
fn half_random_programs_traced_equal_eager() {
    for dtype in [DType::F16, DType::BF16] {
        for k in 0..HALF_CASES {
            check_program(0x4a1f, k, k % 16 == 15, false, Some(dtype));
        }
    }
}

/// Every op of the vocabulary applies to half inputs (a half program
/// whose steps were refused would compare nothing), as often as to `f64`
/// ones.
#[test]
fn the_generator_reaches_every_op_in_half_types() -> Result<()> {
    let reached = |dtype: DType| -> Result<(Vec<usize>, usize)> {
        let mut seen = vec![0usize; OPS];
        let mut applied = 0;
        for k in 0..200 {
            let mut g = Gen(0x5eed ^ k);
            let steps = draw_program(&mut g, false);
            let mut v = inputs(&mut g, dtype, 3, 4, 5)?;
            for s in &steps {
                if let Ok(t) = apply(s, &v) {
                    seen[s.op] += 1;
                    applied += 1;
                    v.push(t);
                }
            }
        }
        Ok((seen, applied))
    };
    let (seen64, applied64) = reached(DType::F64)?;
    for dtype in [DType::F16, DType::BF16] {
        let (seen, applied) = reached(dtype)?;
        assert!(seen.iter().all(|&c| c > 0), "{dtype}: ops never applied: {seen:?}");
        assert_eq!(applied, applied64, "{dtype}: steps applied, against f64's");
        assert_eq!(seen, seen64, "{dtype}: steps applied per op, against f64's");
    }
    Ok(())
}
