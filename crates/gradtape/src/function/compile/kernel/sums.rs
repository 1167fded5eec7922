//! The fused sums: how a program adds a register's elements to a sum of
//! all elements, and which registers an instruction reads and writes.
//!
//! A sum adds each run of [`CHUNK`] elements on its own ([`chunk_lanes`]:
//! 64 `f32` columns, then eight `f64` lanes), so its bits do not depend on
//! the register width; a task adds the runs' lanes in order into eight
//! `f64` lanes of its own ([`Lanes`]), added up once at its end
//! ([`lanes_total`]); the tasks' totals are added in order.
//!
//! (Folding a value whose only use is a sum into the sum, row by row with
//! no register, was tried and was slower: the rows' per-op dispatch cost
//! more than the pass it saved.)

use super::Lane;
use super::{Instr, Reg, CHUNK, MAX_WIDTH};
use crate::kernels::cpu::lockstep::{chunks, each, from_fn, zip};
use crate::ops::desc::{Binary, Unary};
use crate::ops::math::table::{binary_run, elem_unary, unary_run};
use crate::tensor::Float;

/// Columns of a chunk in the fused sums: a [`CHUNK`] is rows of this many.
const SUM_LANES: usize = 64;

/// A task's running sum: eight `f64` lanes (see the module docs).
pub(super) type Lanes = [f64; 8];

/// The sum of a run of at most [`CHUNK`] elements, as eight `f64` lanes:
/// the run's 64 columns (elements `k`, `k + 64`, ... of the run) each
/// summed in `T` from zero, at most four terms, then converted to `f64`
/// and added eight to a lane by a fixed tree. Each column's sum rounds at
/// most three times, so the result is closer to the exact sum than the
/// eager kernel's (long `f32` lanes); adding in `f32` first needs a
/// quarter of the conversions to `f64`, which bound an earlier all-`f64`
/// version. (The lanes are added across runs and only once per task,
/// where each run's horizontal sum had cost a tenth of the elementwise
/// bench's traced step.)
#[inline(always)]
pub fn chunk_lanes<T: Float>(s: &[T]) -> Lanes {
    let mut u = [T::zero(); SUM_LANES];
    for row in each(chunks(s, SUM_LANES)) {
        for (uk, &v) in zip(&mut u, row) {
            *uk = *uk + v;
        }
    }
    lanes_tree(&u)
}

/// [`chunk_lanes`] of a whole chunk (the same bits, fixed-length loops).
#[inline(always)]
fn whole_chunk_lanes<T: Float>(s: &[T; CHUNK]) -> Lanes {
    let mut u = [T::zero(); SUM_LANES];
    for j in 0..CHUNK / SUM_LANES {
        for (k, uk) in zip(0..SUM_LANES, &mut u) {
            *uk = *uk + s[j * SUM_LANES + k];
        }
    }
    lanes_tree(&u)
}

/// The 64 column sums of [`chunk_lanes`] in `f64`, added to eight lanes
/// of eight by a tree of depth three.
#[inline(always)]
fn lanes_tree<T: Float>(u: &[T; SUM_LANES]) -> Lanes {
    let d: [f64; SUM_LANES] = from_fn(|k| u[k].to_f64());
    from_fn(|k| ((d[k] + d[k + 8]) + (d[k + 16] + d[k + 24])) + ((d[k + 32] + d[k + 40]) + (d[k + 48] + d[k + 56])))
}

/// The total of a task's lanes, by a fixed tree.
#[inline(always)]
pub fn lanes_total(t: &Lanes) -> f64 {
    ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]))
}

/// Adds the lanes of the [`CHUNK`]s of `s` (the last may be short) to
/// `acc`, in order: the bits of adding each [`chunk_lanes`] in turn.
#[inline(always)]
pub fn add_chunk_sums<T: Float>(s: &[T], acc: &mut Lanes) {
    let mut whole = s.chunks_exact(CHUNK);
    for q in &mut whole {
        let q: &[T; CHUNK] = q.try_into().expect("chunks_exact gives whole chunks");
        add_lanes(acc, &whole_chunk_lanes(q));
    }
    if !whole.remainder().is_empty() {
        add_lanes(acc, &chunk_lanes(whole.remainder()));
    }
}

#[inline(always)]
pub fn add_lanes(acc: &mut Lanes, t: &Lanes) {
    for (a, &v) in zip(acc, t) {
        *a += v;
    }
}

/// `op(x[i])` into `out` (if any) and added to `acc` as [`add_chunk_sums`]
/// adds a register: [`unary_run`] over a run of at most [`MAX_WIDTH`]
/// elements (a register's), then the run's sum. Out of line, in one copy
/// per type, the table's functions in their own copy (`unary_run`'s): an
/// element loop per op with the sum inside, as before, put one more copy
/// of every function of the table into each fused kernel's loop, to save
/// a pass over a run in the first-level cache.
#[inline(never)]
pub(super) fn unary_sum<T: Lane>(op: &Unary, x: &[T], out: Option<&mut [T]>, acc: &mut Lanes) {
    by_runs(x.len(), out, acc, |r, t| unary_run(op, &x[r], t))
}

/// [`unary_sum`] of a two-input op, through [`binary_run`].
#[inline(never)]
pub(super) fn binary_sum<T: Lane>(op: &Binary, a: &[T], b: &[T], out: Option<&mut [T]>, acc: &mut Lanes) {
    assert!(a.len() == b.len());
    by_runs(a.len(), out, acc, |r, t| binary_run(op, &a[r.clone()], &b[r], t))
}

/// `run(elements, their values)` for each run of [`MAX_WIDTH`] of `n`
/// elements, each run's values written to `out` (if any) and added to
/// `acc` in order (the bits of [`add_chunk_sums`] over the whole register).
#[inline(always)]
fn by_runs<T: Lane>(
    n: usize,
    mut out: Option<&mut [T]>,
    acc: &mut Lanes,
    run: impl Fn(std::ops::Range<usize>, &mut [T]),
) {
    assert!(out.as_ref().is_none_or(|o| o.len() == n));
    // (not zeroed: a register's worth, written by `run` before the sum)
    let mut tmp = std::mem::MaybeUninit::<[T; MAX_WIDTH]>::uninit();
    for start in (0..n).step_by(MAX_WIDTH) {
        let r = start..(start + MAX_WIDTH).min(n);
        let t = match out.as_deref_mut() {
            Some(o) => &mut o[r.clone()],
            // SAFETY: `T` is `f32` or `f64`, for which every bit pattern is
            // a value, and `run` writes the whole run before it is read.
            None => unsafe { std::slice::from_raw_parts_mut(tmp.as_mut_ptr() as *mut T, r.len()) },
        };
        run(r, t);
        // (the sum compiled for the CPU's vector extensions, as in the
        // kernel's loop)
        crate::kernels::cpu::math::with_simd(
            #[inline(always)]
            || add_chunk_sums(t, acc),
        );
    }
}

/// Merges each `Accumulate` of the result of an earlier `Unary` (with an
/// element function, see `elem_unary`) or `Binary` into that
/// instruction (`UnarySum`, `BinarySum`), which then keeps its result in
/// its register only where a later instruction reads it. The sums do not
/// move past a write of the register, so they add the same values.
pub fn merge_sums(body: &mut Vec<Instr>) -> usize {
    let mut merged = 0;
    let mut i = 0;
    while i < body.len() {
        let d = match &body[i] {
            Instr::Unary { op, dst, .. } if elem_unary(op) => *dst,
            Instr::Binary { dst, .. } => *dst,
            _ => {
                i += 1;
                continue;
            }
        };
        // the first sum of `d` before `d` is written again
        let mut found = None;
        for (j, ins) in body.iter().enumerate().skip(i + 1) {
            if let Instr::Accumulate { acc, src } = *ins
                && src == d
            {
                found = Some((j, acc));
                break;
            }
            if operands(ins).1.contains(&d) {
                break;
            }
        }
        let Some((j, acc)) = found else {
            i += 1;
            continue;
        };
        body.remove(j);
        // kept where read again before it is next written
        let mut kept = false;
        for ins in body[i + 1..].iter() {
            let (reads, writes) = operands(ins);
            if reads.contains(&d) {
                kept = true;
                break;
            }
            if writes.contains(&d) {
                break;
            }
        }
        let dst = kept.then_some(d);
        body[i] = match body[i].clone() {
            Instr::Unary { op, a, .. } => Instr::UnarySum { op, dst, a, acc },
            Instr::Binary { op, a, b, .. } => Instr::BinarySum { op, dst, a, b, acc },
            _ => unreachable!("a unary or binary instruction"),
        };
        merged += 1;
        i += 1;
    }
    merged
}

/// The registers `ins` reads and the ones it writes.
pub(crate) fn operands(ins: &Instr) -> (smallvec::SmallVec<[Reg; 3]>, smallvec::SmallVec<[Reg; 2]>) {
    use smallvec::smallvec;
    match *ins {
        Instr::Load { dst, .. } | Instr::Gather { dst, .. } => (smallvec![], smallvec![dst]),
        Instr::Unary { dst, a, .. } => (smallvec![a], smallvec![dst]),
        Instr::Pair { x0, x1, a, .. } => (smallvec![a], smallvec![x0, x1]),
        Instr::Binary { dst, a, b, .. } => (smallvec![a, b], smallvec![dst]),
        Instr::UnarySum { dst, a, .. } => (smallvec![a], dst.into_iter().collect()),
        Instr::BinarySum { dst, a, b, .. } => (smallvec![a, b], dst.into_iter().collect()),
        Instr::Chain { dst, a, b, c, .. } => (smallvec![a, b, c], smallvec![dst]),
        Instr::Store { src, .. } | Instr::Accumulate { src, .. } | Instr::Reduce { src, .. } => {
            (smallvec![src], smallvec![])
        }
    }
}
