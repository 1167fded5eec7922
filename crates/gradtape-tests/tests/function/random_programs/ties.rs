//! The referee of sorts at near-ties: a compiled graph may add a sum in
//! another order (a fused mean, a joined product) and so move a sort key
//! by an ulp; where two keys of a row are equal up to that rounding, the
//! traced sort may order them the other way. The sorted values agree, but
//! a sort's (or `top_k`'s) gradient routes each position's cotangent to
//! the element the order put there, so that a flipped near-tie moves a
//! gradient by `O(1)`: the gradient is discontinuous at a tie, and either
//! side is right (random program 744 of seed 4347, leaning: a mean summed
//! in another order, one ulp apart, flipped two keys of `relu(conv + mean)`
//! and moved a weight's gradient from 503.14 to 503.03).
//!
//! Nudging the inputs (as [`at_a_kink`](super::at_a_kink) does) cannot
//! reproduce one flip among a row's many exact ties, which every nudge
//! breaks at random. This referee replays the traced graph's own orders
//! instead: the program traced once more, its sort steps also returning
//! their orders ([`recording`]), then run eagerly with each sort step
//! taking the traced order in place of its own ([`replaying`]), after
//! checking that the order sorts the eager keys up to the comparison's
//! tolerance (keys that the values' comparison cannot tell apart may go
//! either way; any other inversion refuses the replay). The traced result
//! must then equal that eager run. A wrong element, an order that swaps
//! keys farther apart than rounding, or a program whose orders cannot be
//! replayed is still caught. (That equal keys keep their order in a
//! compiled graph, as eagerly and in TensorFlow, is `sort_ties.rs`'s test.)

use std::cell::RefCell;
use std::collections::VecDeque;

use gradtape::{function, DType, Error, Result, Tensor};

/// What the sort steps do with their orders.
enum Mode {
    /// sort as written
    Off,
    /// sort as written, and keep each step's order (its `argsort`)
    Record(Vec<Tensor>),
    /// take these orders, each checked against its keys within a tolerance
    /// of the row's scale
    Replay(VecDeque<Tensor>, f64),
}

thread_local! {
    static MODE: RefCell<Mode> = const { RefCell::new(Mode::Off) };
}

/// The order along the last axis a sort step of `keys` must use (`None`:
/// its own): records it when recording, and hands out the next recorded
/// one when replaying, an error where there is none or where it does not
/// sort `keys` up to the tolerance.
pub fn order(keys: &Tensor, descending: bool) -> Result<Option<Tensor>> {
    MODE.with_borrow_mut(|m| match m {
        Mode::Off => Ok(None),
        Mode::Record(all) => {
            all.push(keys.argsort(-1, descending)?);
            Ok(None)
        }
        Mode::Replay(all, tol) => {
            let o = all
                .pop_front()
                .ok_or_else(|| refused("more sort steps than recorded orders"))?;
            sorts(keys, &o, descending, *tol)?;
            Ok(Some(o))
        }
    })
}

/// The error of an order that cannot be replayed.
fn refused(msg: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op: "ties",
        msg: msg.into(),
    }
}

/// Checks that `o` sorts each row of `keys` up to `tol` of the row's scale
/// (`1 + max |key|`; NaN after every number ascending, first descending).
fn sorts(keys: &Tensor, o: &Tensor, descending: bool, tol: f64) -> Result<()> {
    if o.shape() != keys.shape() {
        return Err(refused(format!(
            "an order of shape {:?} for keys {:?}",
            o.shape(),
            keys.shape()
        )));
    }
    let n = keys.shape().last().copied().unwrap_or(1).max(1);
    let (k, o) = (keys.to_vec_f64(), o.to_vec::<i64>()?);
    for (row, ord) in k.chunks(n).zip(o.chunks(n)) {
        let scale = row.iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs()));
        let at = |r: usize| {
            ord.get(r)
                .and_then(|&i| usize::try_from(i).ok())
                .and_then(|i| row.get(i).copied())
        };
        let mut seen = vec![false; n];
        for r in 0..n {
            let i = ord[r] as usize;
            if i >= n || std::mem::replace(&mut seen[i], true) {
                return Err(refused(format!("{ord:?} is not a permutation")));
            }
            let (Some(a), Some(b)) = (at(r), at(r + 1).or(at(r))) else {
                continue;
            };
            let (lo, hi) = if descending { (b, a) } else { (a, b) };
            let fine = match (lo.is_nan(), hi.is_nan()) {
                (false, false) => lo - hi <= tol * (1.0 + scale),
                (nan_lo, nan_hi) => nan_hi || !nan_lo,
            };
            if !fine {
                return Err(refused(format!(
                    "the order puts {a} before {b} (descending: {descending})"
                )));
            }
        }
    }
    Ok(())
}

/// `f()` with every sort step's order kept; returns them too.
pub fn recording<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, Vec<Tensor>)> {
    let prev = MODE.replace(Mode::Record(Vec::new()));
    let out = f();
    let Mode::Record(orders) = MODE.replace(prev) else {
        unreachable!("the mode set above")
    };
    Ok((out?, orders))
}

/// `f()` with the sort steps taking `orders`, in turn, each checked to sort
/// its keys within `tol` of the row's scale; `None` where one does not, or
/// where some are left over.
pub fn replaying<T>(orders: Vec<Tensor>, tol: f64, f: impl FnOnce() -> Option<T>) -> Option<T> {
    let prev = MODE.replace(Mode::Replay(orders.into(), tol));
    let out = f();
    let Mode::Replay(left, _) = MODE.replace(prev) else {
        unreachable!("the mode set above")
    };
    out.filter(|_| left.is_empty())
}

/// The orders of the sort steps of `program` traced and compiled on `x`,
/// as its graph computes them: `program` traced with its orders as extra
/// outputs after its `n` own (`None` where it fails or sorts nothing).
pub fn traced_orders(
    program: impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
    n: usize,
    x: &[Tensor],
) -> Option<Vec<Tensor>> {
    let f = function(move |x: &Vec<Tensor>| {
        let (mut out, orders) = recording(|| program(x))?;
        out.extend(orders);
        Ok(out)
    });
    let out = f.call(&x.to_vec()).ok()?;
    let orders: Vec<Tensor> = out.into_iter().skip(n).collect();
    (!orders.is_empty() && orders.iter().all(|o| o.dtype() == DType::I64)).then_some(orders)
}

/// Whether `got` (traced) is `eager` run with the traced sort orders
/// (`orders`, from [`traced_orders`]), each a sort of the eager keys up to
/// `tol`, within `tol` of the output's scale.
pub fn at_a_tie(got: &Tensor, tol: f64, orders: Option<Vec<Tensor>>, eager: impl FnOnce() -> Option<Tensor>) -> bool {
    let Some(orders) = orders else { return false };
    replaying(orders, tol, eager).is_some_and(|w| super::differs(got, &w, tol).is_none())
}

/// A sort at a near-tie, as program 744 of seed 4347: `tanh(sort(x)·x)`'s
/// gradient where two keys are one ulp apart (`1` and `1 + 2^-52`), which a
/// compiled graph's rounding may order either way. Excused: the gradient
/// of the other order. Caught: a wrong element beside it, an order that
/// swaps keys farther apart than rounding (`1` and `2`), an order for keys
/// of another shape, orders that are not permutations, and a program that
/// sorts twice given one order.
pub fn a_sort_at_a_near_tie() -> Result<()> {
    let one_up = 1.0 + f64::EPSILON;
    let x = [Tensor::vector(&[2.0f64, one_up, 0.5, 1.0])];
    let grad = |times: usize| {
        move |m: &[Tensor]| -> Option<Tensor> {
            let tape = gradtape::GradientTape::new();
            let x = m[0].clone();
            let loss = tape
                .record(|| {
                    tape.watch(&x);
                    let mut y = x.clone();
                    for _ in 0..times {
                        y = match order(&y, false)? {
                            Some(o) => y.take_along_axis(&o, -1)?,
                            None => y.sort(-1, false)?,
                        }
                        .mul(&x)?
                        .tanh()?;
                    }
                    y.sum_all()
                })
                .ok()?;
            tape.gradient(&loss, &x).ok()?
        }
    };
    let eager = grad(1)(&x).expect("the program runs");
    let perm = |p: &[i64]| Tensor::vector(p);
    // the other order of the near-tie (eager's is [2, 3, 1, 0]), and its
    // gradient
    let flipped = perm(&[2, 1, 3, 0]);
    let other = replaying(vec![flipped.clone()], 1e-11, || grad(1)(&x)).expect("a valid order");
    // (the premise: the flip moves the gradient by far more than rounding)
    assert!(super::differs(&other, &eager, 1e-3).is_some(), "{other:?} {eager:?}");
    let tie = |got: &Tensor, o: Tensor| at_a_tie(got, 1e-11, Some(vec![o]), || grad(1)(&x));
    // must excuse: the other order's gradient
    assert!(tie(&other, flipped.clone()));
    // must catch: a wrong element beside the tie
    let mut v = other.to_vec_f64();
    v[2] += 0.5;
    assert!(!tie(&Tensor::vector(&v), flipped.clone()));
    // must catch: the other gradient with eager's own order
    assert!(!tie(&other, perm(&[2, 3, 1, 0])));
    // must catch: an order that puts 2 before 1 (not a tie), with its
    // gradient
    let wrong = perm(&[2, 3, 0, 1]);
    let swapped = |m: &[Tensor]| -> Option<Tensor> {
        let tape = gradtape::GradientTape::new();
        let x = m[0].clone();
        let loss = tape
            .record(|| {
                tape.watch(&x);
                x.take_along_axis(&wrong, -1)?.mul(&x)?.tanh()?.sum_all()
            })
            .ok()?;
        tape.gradient(&loss, &x).ok()?
    };
    let bad = swapped(&x).expect("the program runs");
    assert!(!tie(&bad, wrong.clone()));
    // must catch: orders of another shape, not permutations, too few
    assert!(!tie(&other, perm(&[2, 3, 1])));
    assert!(!tie(&other, perm(&[2, 3, 3, 0])));
    assert!(!at_a_tie(&other, 1e-11, Some(vec![flipped.clone()]), || grad(2)(&x)));
    assert!(!at_a_tie(&other, 1e-11, None, || grad(1)(&x)));
    Ok(())
}
