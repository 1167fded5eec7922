//! Running one case: eagerly, or through the tape API (reverse mode,
//! jacobians, forward mode, variables, traced functions).

use std::sync::Mutex;

use gradtape::{ForwardAccumulator, GradientTape, Result, Tensor, Variable};

use crate::case::{materialize, Case};
use crate::ops::{differentiable, Env, OpFn, OPS};

/// How many calls of each op were accepted and refused (in this process).
pub static STATS: Mutex<Vec<[u64; 2]>> = Mutex::new(Vec::new());

/// Calls the op, counting the outcome in [`STATS`].
fn call(f: OpFn, e: &Env) -> Result<Tensor> {
    let y = f(e);
    let mut s = STATS.lock().unwrap_or_else(|p| p.into_inner());
    if s.len() < OPS.len() {
        s.resize(OPS.len(), [0; 2]);
    }
    s[e.k.op][usize::from(y.is_err())] += 1;
    y
}

/// Looks at an accepted result the way a user would: prints it and makes
/// it contiguous (a huge view must give an error, not an allocation).
pub fn inspect(t: &Tensor) {
    let _ = format!("{t} {t:?}");
    if let Ok(c) = t.contiguous() {
        assert_eq!(c.shape(), t.shape(), "contiguous changed the shape");
    }
}

fn inspect_grad(g: Result<Option<Tensor>>, x: &Tensor, what: &str) {
    if let Ok(Some(g)) = g {
        assert_eq!(g.shape(), x.shape(), "{what}: gradient of the wrong shape");
        inspect(&g);
    }
}

/// `GRADTAPE_FUZZ_MODE=<0..=5>`: every case in that mode (a campaign on
/// one mode, say 5, traced); by default each case's own.
fn forced_mode() -> Option<u8> {
    static MODE: std::sync::OnceLock<Option<u8>> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| std::env::var("GRADTAPE_FUZZ_MODE").ok()?.trim().parse().ok())
}

/// Runs the case; panics (caught by the caller) on a library panic or a
/// result of the wrong shape.
pub fn run_case(k: &Case) {
    let Ok(a) = materialize(&k.a, None) else { return };
    let Ok(b) = materialize(&k.b, Some(&a)) else { return };
    let Ok(c) = materialize(&k.c, Some(&a)) else { return };
    let f: OpFn = OPS[k.op].1;
    let env = Env { a: &a, b: &b, c: &c, k };
    // the surfaces (the table's last entries) run eagerly: they trace,
    // differentiate and read files themselves
    let surface = k.op >= OPS.len() - crate::surfaces::SURFACES.len();
    match if surface { 0 } else { forced_mode().unwrap_or(k.mode) } {
        0 | 1 => {
            if let Ok(y) = call(f, &env) {
                inspect(&y);
            }
        }
        2 => reverse(&env, f),
        3 => forward(&env, f),
        4 => variable(&env, f),
        _ => traced(&env, f),
    }
}

/// Under a persistent tape watching the operands: `gradient` of the
/// result with respect to each, and its `jacobian` when small.
fn reverse(e: &Env, f: OpFn) {
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&[e.a, e.b, e.c]);
        call(f, e)
    });
    let Ok(y) = y else { return };
    inspect(&y);
    if let Ok(g) = tape.gradient(&y, &[e.a, e.b, e.c]) {
        assert_eq!(g.len(), 3, "gradient: one entry per source");
        for (g, x) in g.into_iter().zip([e.a, e.b, e.c]) {
            inspect_grad(Ok(g), x, "gradient");
        }
    }
    let out = y.clone();
    let _ = tape.gradient_with(
        &y,
        e.a,
        gradtape::GradientOptions::default().output_gradients(vec![out]),
    );
    if (y.numel().saturating_mul(e.a.numel()) <= 4096 || e.k.flags[2])
        && let Ok(Some(j)) = tape.jacobian(&y, e.a)
    {
        let want: Vec<usize> = y.shape().iter().chain(e.a.shape()).copied().collect();
        assert_eq!(j.shape(), &want[..], "jacobian of the wrong shape");
        inspect(&j);
    }
}

/// Under a forward accumulator watching `a` (with a tangent of ones, or of
/// `b` when the flag says so: maybe of the wrong shape or dtype).
fn forward(e: &Env, f: OpFn) {
    let tangent = if e.k.flags[2] {
        e.b.clone()
    } else {
        match e.a.try_ones_like() {
            Ok(t) => t,
            Err(_) => return,
        }
    };
    let Ok(acc) = ForwardAccumulator::watching(e.a, &[tangent]) else {
        return;
    };
    let Ok(y) = acc.record(|| call(f, e)) else { return };
    inspect(&y);
    if let Ok(Some(t)) = acc.jvp(&y) {
        assert_eq!(t.shape(), y.shape(), "jvp of the wrong shape");
        inspect(&t);
    }
}

/// With `a` held by a variable, read under a tape; then the variable's
/// updates with `b` and `c` (maybe of the wrong shape or dtype).
fn variable(e: &Env, f: OpFn) {
    let v = Variable::new(e.a.clone());
    let tape = GradientTape::new();
    let y = tape.record(|| {
        let a = v.read();
        call(f, &Env { a: &a, ..*e })
    });
    if let Ok(y) = y {
        inspect(&y);
        inspect_grad(tape.gradient(&y, &v), e.a, "variable gradient");
    }
    let _ = format!("{v:?}");
    if differentiable(v.dtype()) {
        let _ = v.assign_add(e.b);
        let _ = v.apply_gradient_descent(e.k.floats[0], e.c);
    }
    let _ = v.assign_sub(e.c);
    let _ = v.assign(e.b);
    assert!(
        v.shape() == e.a.shape() && v.dtype() == e.a.dtype() || v.shape() == e.b.shape(),
        "a variable changed shape to {:?}",
        v.shape()
    );
    let _ = format!("{v:?}");
}

/// Traced by `function` and compared with the same closure run eagerly on
/// the same arguments, over a sequence of calls of other shapes and
/// argument structures (see `traced.rs`).
fn traced(e: &Env, f: OpFn) {
    // (counted in the stats; the comparisons below call the op again)
    if let Ok(y) = call(f, e) {
        inspect(&y);
    }
    crate::traced::traced_calls(e, f);
}
