//! Helpers shared by the files that compare with reference values
//! printed by a script (`attention.rs`, `layer_norm.rs`, the Keras layer
//! files, ...): the bench's deterministic inputs, two weighted sums that
//! summarise a tensor, a layer's output and gradients against such sums,
//! and a traced step against the eager one.
#![allow(dead_code)]

use gradtape::{DType, GradientTape, Result, Tensor, Variable};

/// Two sums of a tensor: `(Σ v, Σ v[i] sin(0.1 i))`.
pub type Sums = (f64, f64);

/// `scale · sin(0.37 i + k)` (the bench's `init`), in f64.
pub fn init(shape: &[usize], k: f64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| scale * (0.37 * i as f64 + k).sin()).collect(), shape).unwrap()
}

/// `(Σ o, Σ o[i] sin(0.1 i))`, in f64.
pub fn wsum(o: &Tensor) -> (f64, f64) {
    let v = o.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
    let w = v.iter().enumerate().map(|(i, x)| x * (0.1 * i as f64).sin()).sum();
    (v.iter().sum(), w)
}

/// Both sums within `tol` relative (plus `tol` absolute).
pub fn close_sums(got: (f64, f64), want: (f64, f64), tol: f64, what: &str) {
    assert!(
        (got.0 - want.0).abs() <= tol * (1.0 + want.0.abs()) && (got.1 - want.1).abs() <= tol * (1.0 + want.1.abs()),
        "{what}: got {got:?}, want {want:?}"
    );
}

/// `Σ y[i] sin(0.1 i)`, the reference scripts' loss.
pub fn sin_weighted(y: &Tensor) -> Result<Tensor> {
    let w: Vec<f64> = (0..y.numel()).map(|i| (0.1 * i as f64).sin()).collect();
    y.mul(&Tensor::from_vec(w, y.shape())?.cast(y.dtype())?)?.sum_all()
}

/// What a reference script printed for one case: the output's shape (when
/// it printed one), its sums, and the sums of the gradients of
/// [`sin_weighted`] with respect to the input, then to each weight.
pub struct Want<'a> {
    pub shape: Option<&'a [usize]>,
    pub y: Sums,
    pub grads: &'a [Sums],
}

/// `f(x)` and the gradients of its [`sin_weighted`] loss with respect to
/// `x` and `vars` against `want`, each sum within `tol` ([`close_sums`]).
pub fn check_against(
    what: &str,
    f: &dyn Fn(&Tensor) -> Result<Tensor>,
    x: &Tensor,
    vars: &[Variable],
    want: &Want,
    tol: f64,
) -> Result<()> {
    let tape = GradientTape::persistent();
    let mut y = None;
    let loss = tape.record(|| {
        tape.watch(x);
        let out = f(x)?;
        y = Some(out.clone());
        sin_weighted(&out)
    })?;
    let mut grads = tape.gradient(&loss, std::slice::from_ref(x))?.to_vec();
    grads.extend(tape.gradient(&loss, vars)?);
    let y = y.expect("recorded");
    if let Some(shape) = want.shape {
        assert_eq!(y.shape(), shape, "{what}: the output's shape");
    }
    close_sums(wsum(&y), want.y, tol, &format!("{what}: y"));
    assert_eq!(grads.len(), want.grads.len(), "{what}: gradients");
    for (i, (g, w)) in grads.iter().zip(want.grads).enumerate() {
        close_sums(
            wsum(g.as_ref().expect("a gradient")),
            *w,
            tol,
            &format!("{what}: gradient {i}"),
        );
    }
    Ok(())
}

/// Every output of a traced step is the eager step's, within `tol`
/// relative (plus `tol` absolute).
pub fn assert_same_outputs(eager: &[Tensor], traced: &[Tensor], tol: f64) {
    assert_eq!(eager.len(), traced.len(), "outputs");
    for (i, (e, t)) in eager.iter().zip(traced).enumerate() {
        let (e, t) = (e.to_vec_f64(), t.to_vec_f64());
        assert!(
            e.len() == t.len() && e.iter().zip(&t).all(|(a, b)| (a - b).abs() <= tol * (1.0 + a.abs())),
            "output {i}: eager {e:?}, traced {t:?}"
        );
    }
}
