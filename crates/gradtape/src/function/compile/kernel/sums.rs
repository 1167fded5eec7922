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
use super::{Instr, Reg, CHUNK};
use crate::ops::desc::{Binary, Unary};
use crate::ops::math::table::{elem_unary, with_elem_binary, with_elem_unary};
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

/// `op(a[i], b[i])` into `out` (if any) and added to `acc` as
/// [`add_chunk_sums`] adds a register: the bits of a pass writing the
/// values and a pass summing them, in one pass (no store where the value
/// has no other use, no second read where it has).
#[inline(always)]
pub(super) fn zip_sum<T: Float>(a: &[T], b: &[T], mut out: Option<&mut [T]>, acc: &mut Lanes, f: impl Fn(T, T) -> T) {
    let n = a.len();
    assert!(b.len() == n && out.as_ref().is_none_or(|o| o.len() == n));
    let mut start = 0;
    while start + CHUNK <= n {
        let (Ok(ca), Ok(cb)) = (
            <&[T; CHUNK]>::try_from(&a[start..start + CHUNK]),
            <&[T; CHUNK]>::try_from(&b[start..start + CHUNK]),
        ) else {
            unreachable!("whole chunks")
        };
        let mut u = [T::zero(); SUM_LANES];
        match out.as_deref_mut() {
            Some(o) => {
                let Ok(co) = <&mut [T; CHUNK]>::try_from(&mut o[start..start + CHUNK]) else {
                    unreachable!("whole chunks")
                };
                for j in 0..CHUNK / SUM_LANES {
                    for (k, uk) in u.iter_mut().enumerate() {
                        let i = j * SUM_LANES + k;
                        let v = f(ca[i], cb[i]);
                        co[i] = v;
                        *uk = *uk + v;
                    }
                }
            }
            None => {
                for j in 0..CHUNK / SUM_LANES {
                    for (k, uk) in u.iter_mut().enumerate() {
                        let i = j * SUM_LANES + k;
                        *uk = *uk + f(ca[i], cb[i]);
                    }
                }
            }
        }
        add_lanes(acc, &lanes_tree(&u));
        start += CHUNK;
    }
    if start < n {
        // the last, short run, as `chunk_lanes` adds it
        let mut u = [T::zero(); SUM_LANES];
        for (r, i) in (start..n).enumerate() {
            let v = f(a[i], b[i]);
            if let Some(o) = out.as_deref_mut() {
                o[i] = v;
            }
            u[r % SUM_LANES] = u[r % SUM_LANES] + v;
        }
        add_lanes(acc, &lanes_tree(&u));
    }
}

/// [`zip_sum`] of a one-input op (any: one without an element function
/// goes through its kernel, a run at a time).
#[inline(always)]
pub(super) fn unary_sum<T: Lane>(op: &Unary, x: &[T], out: Option<&mut [T]>, acc: &mut Lanes) {
    with_elem_unary!(op, T, |f| zip_sum(x, x, out, acc, |v, _| f(v)), {
        let mut out = out;
        let mut tmp = [T::zero(); CHUNK];
        for (k, run) in x.chunks(CHUNK).enumerate() {
            let t = &mut tmp[..run.len()];
            T::unary(op, run, t);
            if let Some(o) = out.as_deref_mut() {
                o[k * CHUNK..k * CHUNK + run.len()].copy_from_slice(t);
            }
            add_lanes(acc, &chunk_lanes(t));
        }
    })
}

/// [`zip_sum`] of a two-input op.
#[inline(always)]
pub(super) fn binary_sum<T: Float>(op: &Binary, a: &[T], b: &[T], out: Option<&mut [T]>, acc: &mut Lanes) {
    with_elem_binary!(op, T, |f| zip_sum(a, b, out, acc, f))
}

/// Merges each `Accumulate` of the result of an earlier `Unary` (with an
/// element function, see [`elem_unary`]) or `Binary` into that
/// instruction (`UnarySum`, `BinarySum`), which then keeps its result in
/// its register only where a later instruction reads it. The sums do not
/// move past a write of the register, so they add the same values.
pub(super) fn merge_sums(body: &mut Vec<Instr>) -> usize {
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
        for ins in &body[i + 1..] {
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
pub(super) fn operands(ins: &Instr) -> (smallvec::SmallVec<[Reg; 3]>, smallvec::SmallVec<[Reg; 2]>) {
    use smallvec::smallvec;
    match *ins {
        Instr::Load { dst, .. } | Instr::Gather { dst, .. } => (smallvec![], smallvec![dst]),
        Instr::Unary { dst, a, .. } => (smallvec![a], smallvec![dst]),
        Instr::SinCos { sin, cos, a } => (smallvec![a], smallvec![sin, cos]),
        Instr::Binary { dst, a, b, .. } => (smallvec![a, b], smallvec![dst]),
        Instr::UnarySum { dst, a, .. } => (smallvec![a], dst.into_iter().collect()),
        Instr::BinarySum { dst, a, b, .. } => (smallvec![a, b], dst.into_iter().collect()),
        Instr::Chain { dst, a, b, c, .. } => (smallvec![a, b, c], smallvec![dst]),
        Instr::Store { src, .. } | Instr::Accumulate { src, .. } | Instr::Reduce { src, .. } => {
            (smallvec![src], smallvec![])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{testing, Output, Program};
    use super::*;
    use crate::ops::desc::{Binary as B, Unary as U};
    use crate::tensor::Tensor;

    /// `out0 = a * b` (also summed), `sum1 += |a * b|`, `sum2 += exp(b)`
    /// and `sum3 += -a` (whose register held `a - b` first), over `len`.
    fn program(len: usize) -> Program {
        use Instr::*;
        testing::program(
            len,
            2,
            vec![
                Load { dst: 0, input: 0 },
                Load { dst: 1, input: 1 },
                Binary {
                    op: B::Mul,
                    dst: 2,
                    a: 0,
                    b: 1,
                },
                Store { out: 0, src: 2 },
                Accumulate { acc: 0, src: 2 },
                Unary {
                    op: U::Abs,
                    dst: 3,
                    a: 2,
                },
                Accumulate { acc: 1, src: 3 },
                Unary {
                    op: U::Exp,
                    dst: 2,
                    a: 1,
                },
                Accumulate { acc: 2, src: 2 },
                Binary {
                    op: B::Sub,
                    dst: 3,
                    a: 0,
                    b: 1,
                },
                Unary {
                    op: U::Neg,
                    dst: 3,
                    a: 0,
                },
                Accumulate { acc: 3, src: 3 },
            ],
            4,
            vec![
                Output::Elementwise,
                Output::Sum(vec![]),
                Output::Sum(vec![]),
                Output::Sum(vec![]),
                Output::Sum(vec![]),
            ],
        )
    }

    #[test]
    fn sums_merge_into_the_cheap_op_before_them() {
        let mut p = program(8);
        assert_eq!(merge_sums(&mut p.body), 3);
        use Instr::*;
        assert_eq!(
            p.body[2..],
            [
                // kept: stored and read again
                BinarySum {
                    op: B::Mul,
                    dst: Some(2),
                    a: 0,
                    b: 1,
                    acc: 0
                },
                Store { out: 0, src: 2 },
                // read by nothing else: not kept
                UnarySum {
                    op: U::Abs,
                    dst: None,
                    a: 2,
                    acc: 1
                },
                // exp has no element function: left alone
                Unary {
                    op: U::Exp,
                    dst: 2,
                    a: 1
                },
                Accumulate { acc: 2, src: 2 },
                // the sum reads the later value of r3, not the difference
                Binary {
                    op: B::Sub,
                    dst: 3,
                    a: 0,
                    b: 1
                },
                UnarySum {
                    op: U::Neg,
                    dst: None,
                    a: 0,
                    acc: 3
                },
            ]
        );
        let text = format!("{p}");
        assert!(
            text.contains("r2 = sum0 += Mul(r0, r1)\n") && text.contains("\nsum1 += Abs(r2)\n"),
            "{text}"
        );
    }

    #[test]
    fn merged_sums_give_the_bits_of_the_separate_passes() {
        // lengths around the runs and registers, and one spread over tasks
        for len in [1usize, 3, 255, 256, 300, 1024, 5000, 300_001] {
            let a: Vec<f32> = (0..len).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
            let b: Vec<f32> = (0..len).map(|i| ((i as f32) * 0.11).cos() - 0.2).collect();
            let inputs = [
                Tensor::from_vec(a, &[len]).unwrap(),
                Tensor::from_vec(b, &[len]).unwrap(),
            ];
            let plain = program(len);
            let mut merged = plain.clone();
            assert_eq!(merge_sums(&mut merged.body), 3);
            let got = testing::same_bits(&plain, &merged, &inputs);
            assert_eq!(got.len(), 5);
            // and the values are the sums they name
            let (a, b) = (inputs[0].to_vec::<f32>().unwrap(), inputs[1].to_vec::<f32>().unwrap());
            let exact: f64 = a.iter().zip(&b).map(|(&x, &y)| (x * y) as f64).sum();
            let s0 = got[1][0] as f64;
            assert!(
                (s0 - exact).abs() <= 1e-5 * (1.0 + exact.abs()) + 1e-6 * len as f64,
                "{len}: {s0} vs {exact}"
            );
            let neg: f64 = a.iter().map(|&x| -(x as f64)).sum();
            let s3 = got[4][0] as f64;
            assert!(
                (s3 - neg).abs() <= 1e-5 * (1.0 + neg.abs()) + 1e-6 * len as f64,
                "{len}: {s3} vs {neg}"
            );
        }
    }

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
