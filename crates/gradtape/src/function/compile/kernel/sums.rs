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
//! no register, was tried: the elementwise bench's traced step went from
//! 2.2 to 2.8 ms, the rows' per-op dispatch costing more than the pass it
//! saved.)

use super::{Instr, Reg, CHUNK};
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
pub(super) fn chunk_lanes<T: Float>(s: &[T]) -> Lanes {
    let mut u = [T::zero(); SUM_LANES];
    for row in s.chunks(SUM_LANES) {
        for (uk, &v) in u.iter_mut().zip(row) {
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
        for (k, uk) in u.iter_mut().enumerate() {
            *uk = *uk + s[j * SUM_LANES + k];
        }
    }
    lanes_tree(&u)
}

/// The 64 column sums of [`chunk_lanes`] in `f64`, added to eight lanes
/// of eight by a tree of depth three.
#[inline(always)]
fn lanes_tree<T: Float>(u: &[T; SUM_LANES]) -> Lanes {
    let d: [f64; SUM_LANES] = std::array::from_fn(|k| u[k].to_f64());
    std::array::from_fn(|k| {
        ((d[k] + d[k + 8]) + (d[k + 16] + d[k + 24])) + ((d[k + 32] + d[k + 40]) + (d[k + 48] + d[k + 56]))
    })
}

/// The total of a task's lanes, by a fixed tree.
#[inline(always)]
pub(super) fn lanes_total(t: &Lanes) -> f64 {
    ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]))
}

/// Adds the lanes of the [`CHUNK`]s of `s` (the last may be short) to
/// `acc`, in order: the bits of adding each [`chunk_lanes`] in turn.
#[inline(always)]
pub(super) fn add_chunk_sums<T: Float>(s: &[T], acc: &mut Lanes) {
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
fn add_lanes(acc: &mut Lanes, t: &Lanes) {
    for (a, &v) in acc.iter_mut().zip(t) {
        *a += v;
    }
}

/// The registers `ins` reads and the ones it writes.
pub(super) fn operands(ins: &Instr) -> (smallvec::SmallVec<[Reg; 2]>, smallvec::SmallVec<[Reg; 2]>) {
    use smallvec::smallvec;
    match *ins {
        Instr::Load { dst, .. } | Instr::Gather { dst, .. } => (smallvec![], smallvec![dst]),
        Instr::Unary { dst, a, .. } => (smallvec![a], smallvec![dst]),
        Instr::SinCos { sin, cos, a } => (smallvec![a], smallvec![sin, cos]),
        Instr::Binary { dst, a, b, .. } => (smallvec![a, b], smallvec![dst]),
        Instr::Store { src, .. } | Instr::Accumulate { src, .. } | Instr::Reduce { src, .. } => {
            (smallvec![src], smallvec![])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_chunk_sums_give_the_bits_of_the_general_one() {
        for n in [1usize, 255, 256, 300, 512, 700, 1024, 1025, 1500, 2048] {
            let xs: Vec<f32> = (0..n)
                .map(|i| ((i as f32 * 0.37).sin() * 1e3 + 1e-3 * i as f32) * if i % 7 == 0 { -1e4 } else { 1.0 })
                .collect();
            let mut want = [0.25f64; 8];
            for piece in xs.chunks(CHUNK) {
                add_lanes(&mut want, &chunk_lanes(piece));
            }
            let mut got = [0.25f64; 8];
            add_chunk_sums(&xs, &mut got);
            assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits), "{n}");
            // within three f32 roundings of each term of the exact sum
            let (got, exact) = (lanes_total(&got), 2.0 + xs.iter().map(|&v| v as f64).sum::<f64>());
            let scale: f64 = xs.iter().map(|&v| (v as f64).abs()).sum();
            assert!(
                (got - exact).abs() <= 3.0 * f32::EPSILON as f64 * scale,
                "{n}: {got} vs {exact}"
            );
        }
        // the lanes of a run: column k of the run in lane k % 8
        let xs: Vec<f32> = (0..CHUNK).map(|i| if i % 64 == 9 { 1.0 } else { 0.0 }).collect();
        assert_eq!(chunk_lanes(&xs), [0.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        // (a chunk summing to -0 gives +0: its columns start from +0)
        let mut got = [-0.0f64; 8];
        add_chunk_sums(&[-0.0f32; 1024], &mut got);
        assert_eq!(lanes_total(&got).to_bits(), 0.0f64.to_bits());
    }
}
