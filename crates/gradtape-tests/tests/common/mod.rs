//! The table-driven gradient-check harness shared by the `gradcheck*` test
//! files: input domains, cases, shape lists, and the runner. Each family of
//! ops keeps its own table in its own file and calls [`run_table`].
#![allow(dead_code)]

pub mod values;

use std::panic::{catch_unwind, AssertUnwindSafe};

use gradtape::{check_gradients, check_traced, CheckOptions, Result, Tensor, TracedCheckOptions};

pub type Op = fn(&[Tensor]) -> Result<Tensor>;

/// Where an input's values lie.
#[derive(Clone, Copy, Debug)]
pub enum Dom {
    /// Smooth values in about `[-1.3, 1.3]`, zero allowed.
    Any,
    /// Values in `[0.4, 2.0]`: for log, sqrt, pow bases and divisors.
    Pos,
    /// `|v| >= 0.25`, both signs: away from the kink of relu and abs.
    NonZero,
    /// Distinct values (across all inputs of a case) at least 0.05 apart, in
    /// `[-2.5, 2.5]`: no ties for max, min, maximum, minimum.
    Distinct,
}

pub struct Case {
    pub name: String,
    pub f: Op,
    pub inputs: Vec<(Vec<usize>, Dom)>,
    pub second_order: bool,
    pub loose: bool,
}

pub fn case(name: impl Into<String>, f: Op, inputs: &[(&[usize], Dom)]) -> Case {
    Case {
        name: name.into(),
        f,
        inputs: inputs.iter().map(|(s, d)| (s.to_vec(), *d)).collect(),
        second_order: true,
        loose: false,
    }
}

impl Case {
    /// f32 arithmetic inside: a larger step and tolerance.
    pub fn loose(mut self) -> Self {
        self.loose = true;
        self
    }

    pub fn make_inputs(&self) -> Vec<Tensor> {
        let mut counter = 0usize;
        self.inputs
            .iter()
            .enumerate()
            .map(|(j, (shape, dom))| {
                let n: usize = shape.iter().product();
                let v: Vec<f64> = (0..n)
                    .map(|i| {
                        let s = (1.7 * i as f64 + 2.3 * j as f64 + 0.4).sin();
                        let t = counter + i;
                        match dom {
                            Dom::Any => 1.3 * s,
                            Dom::Pos => 0.4 + 0.8 * (1.0 + s),
                            Dom::NonZero => s.signum() * (0.25 + s.abs()),
                            Dom::Distinct => ((t * 37 + 11) % 101) as f64 * 0.05 - 2.5,
                        }
                    })
                    .collect();
                counter += n;
                assert!(
                    !matches!(dom, Dom::Distinct) || counter <= 101,
                    "{}: too many Distinct values",
                    self.name
                );
                Tensor::from_vec(v, shape).unwrap()
            })
            .collect()
    }

    pub fn options(&self) -> CheckOptions {
        let mut o = CheckOptions::default();
        if self.loose {
            o.eps = 1e-2;
            o.atol = 1e-4;
            o.rtol = 1e-3;
        }
        o.second_order = self.second_order;
        o
    }
}

#[allow(unused_imports)]
pub use Dom::*;

/// Composes an op with `square`, so that second order sees the op's rule.
pub fn sq(t: Result<Tensor>) -> Result<Tensor> {
    t?.square()
}

pub fn idx(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

pub fn mask(v: &[bool], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

/// Shape pairs for binary ops: equal shapes of every rank, broadcasting
/// pairs, and zero-size dims.
pub const PAIRS: &[(&[usize], &[usize])] = &[
    (&[], &[]),
    (&[4], &[4]),
    (&[2, 3], &[2, 3]),
    (&[2, 3, 2], &[2, 3, 2]),
    (&[2, 3], &[3]),
    (&[3], &[2, 3]),
    (&[2, 1], &[1, 3]),
    (&[], &[2, 3]),
    (&[2, 3], &[]),
    (&[2, 1, 3], &[4, 1]),
    (&[0, 3], &[3]),
    (&[3, 1], &[0]),
];

/// Shapes for unary ops.
pub const SHAPES: &[&[usize]] = &[&[], &[5], &[2, 3], &[2, 3, 2], &[0, 3]];

pub fn fmt_shapes(shapes: &[&[usize]]) -> String {
    shapes.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(",")
}

/// Whether the tables also run each case as a traced function
/// (`check_traced`): always, unless `GRADTAPE_TRACED_CHECK=0` (every op has
/// a descriptor, so every case must trace).
fn traced_checks() -> bool {
    std::env::var("GRADTAPE_TRACED_CHECK").map_or(true, |v| v != "0")
}

/// Runs every case through `check_gradients` (first order, and second order
/// unless the case opts out), failing with a list of every failing case.
/// Every name in `required` must start some case name; at least `min_cases`
/// cases and `min_entries` compared entries must have run.
pub fn run_table(cases: &[Case], required: &[&str], min_cases: usize, min_entries: usize) {
    for r in required {
        assert!(
            cases.iter().any(|c| c.name.starts_with(r)),
            "no gradient-check case for {r:?}"
        );
    }
    let mut failures = Vec::new();
    let mut compared = 0;
    for c in cases {
        let inputs = c.make_inputs();
        let outcome = catch_unwind(AssertUnwindSafe(|| check_gradients(c.f, &inputs, &c.options())));
        match outcome {
            Err(_) => failures.push(format!("{}: panicked", c.name)),
            Ok(Err(e)) => failures.push(format!("{}: {e}", c.name)),
            Ok(Ok(report)) => {
                let elements: usize = inputs.iter().map(Tensor::numel).sum();
                let expected = if c.second_order { 2 * elements } else { elements };
                if report.compared != expected {
                    failures.push(format!(
                        "{}: compared {} entries, expected {expected}",
                        c.name, report.compared
                    ));
                }
                if c.second_order && report.max_err_second.is_none() {
                    failures.push(format!("{}: second order was not checked", c.name));
                }
                compared += report.compared;
                if traced_checks() {
                    let opts = TracedCheckOptions {
                        second_order: c.second_order,
                        ..Default::default()
                    };
                    match catch_unwind(AssertUnwindSafe(|| check_traced(c.f, &inputs, &opts))) {
                        Err(_) => failures.push(format!("{} (traced): panicked", c.name)),
                        Ok(Err(e)) => failures.push(format!("{} (traced): {e}", c.name)),
                        Ok(Ok(_)) => {}
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert!(
        cases.len() >= min_cases && compared >= min_entries,
        "{} cases, {compared} entries",
        cases.len()
    );
}

/// First and second derivatives by nested tapes: the gradient `g` of
/// `loss(x)` w.r.t. `x` (recorded by an outer tape), and the gradient of
/// `outer(g)` w.r.t. `x`.
pub fn nested_grads(
    x: &Tensor,
    loss: impl Fn(&Tensor) -> Result<Tensor>,
    outer: impl Fn(&Tensor) -> Result<Tensor>,
) -> Result<(Tensor, Tensor)> {
    let tape = gradtape::GradientTape::new();
    let (g, s) = tape.record(|| {
        tape.watch(x);
        let inner = gradtape::GradientTape::new();
        let l = inner.record(|| {
            inner.watch(x);
            loss(x)
        })?;
        let g = inner.gradient(&l, x)?.expect("a gradient");
        let s = outer(&g)?;
        Ok((g, s))
    })?;
    let h = tape.gradient(&s, x)?.expect("a second derivative");
    Ok((g, h))
}
