//! Fused programs over `f16` and `bf16`: registers of `f32`, rounded to
//! the half type after every op, as the eager kernels round.
//!
//! The eager half kernels of the ops that fuse (see `fuse::half_fusible`)
//! convert their operands to `f32`, compute the op's `f32` function and
//! round each result once to the half type (`kernels::cpu::half_block`;
//! the scalar constants of `x·c`, `x / c`, `x + c` rounded to the half
//! type first). A program here does the same per chunk: a load converts
//! the input's chunk into an `f32` register, each op runs the `f32`
//! function of the table and rounds its register to the half type and
//! back (so the next op reads exactly the value the eager op would have
//! read from a half tensor), and a store rounds into the half output. A
//! fused half chain so gives the eager values bit for bit, with one read
//! of each input and one write of each output instead of a half tensor
//! per op. (XLA keeps the intermediates of a fused half chain in `f32`
//! and rounds only the outputs, which is more accurate but not what the
//! eager ops compute; equality with eager is the rule here.)
//!
//! Broadcast inputs (a bias row) and splatted ones are converted to `f32`
//! once per run; full-size inputs chunk by chunk. Half programs hold no
//! sums or partial reductions (the eager half reductions accumulate in
//! their own order and type), never merge two ops into one pass (the
//! merged pass would skip the rounding between them), and write no
//! output in place of an input.

use super::epilogue::gather;
use super::regs::Regs;
use super::rows::Rows;
use super::{register_width, scratch, Instr, List, Outs, Program, Splat, CHUNK, MAX_WIDTH};
use crate::error::{Error, Result};
use crate::kernels::cpu::half_block::Half;
use crate::kernels::cpu::math::with_simd;
use crate::kernels::cpu::workers::{self, SendPtr};
use crate::kernels::cpu::PAR_MIN;
use crate::ops::math::table::{binary_run, unary_run};
use crate::tensor::{alloc, Tensor};

/// `x[i]` rounded to the half type `H` (to nearest, ties to even, as the
/// eager kernels round each result), kept as `f32`.
#[inline]
pub(super) fn round_to<H: Half>(x: &mut [f32]) {
    let mut tmp = [H::zero(); MAX_WIDTH];
    for c in x.chunks_mut(MAX_WIDTH) {
        let t = &mut tmp[..c.len()];
        H::from_f32s(c, t);
        H::to_f32s(t, c);
    }
}

impl Program {
    /// Whether the body holds only the instructions a half program runs.
    fn half_runnable(&self) -> bool {
        self.body.iter().all(|i| {
            matches!(
                i,
                Instr::Load { .. }
                    | Instr::Gather { .. }
                    | Instr::Unary { .. }
                    | Instr::Pair { .. }
                    | Instr::Binary { .. }
                    | Instr::Store { .. }
            )
        })
    }

    /// [`run`](Self::run) for a program of the half type `H` (inputs
    /// checked by the caller).
    pub(super) fn run_half<H: Half>(&self, inputs: &[Tensor]) -> Result<Outs> {
        if !self.half_runnable() || self.outputs.iter().any(|o| !matches!(o, super::Output::Elementwise)) {
            return Err(Error::invalid(
                "Fused",
                format!(
                    "a {} program holds a sum or a merged pass, which half programs do not run",
                    self.dtype
                ),
            ));
        }
        // (a view with contiguous rows as its whole buffer: see `rows`)
        let read: List<super::rows::Read<'_, H>> = (inputs.iter().enumerate())
            .map(|(i, t)| self.read::<H>(i, t))
            .collect::<Result<_>>()?;
        let data: List<&[H]> = read.iter().map(|r| &r.0[..]).collect();
        let rows: List<Option<Rows>> = read.iter().map(|r| r.1).collect();
        // the inputs read broadcast or splatted, in f32 once
        // (allocated fallibly: an error naming the op, never an abort)
        let wide: List<Option<Vec<f32>>> = (0..inputs.len())
            .map(|i| {
                let gathered = self
                    .body
                    .iter()
                    .any(|x| matches!(x, Instr::Gather { input, .. } if *input as usize == i));
                let splat = self.splats.iter().any(|(_, s)| *s == Splat::Input(i as u16));
                if !(gathered || splat) {
                    return Ok(None);
                }
                let mut v = alloc::try_filled("Fused", data[i].len(), 0f32)?;
                H::to_f32s(data[i], &mut v);
                Ok(Some(v))
            })
            .collect::<Result<_>>()?;
        let n_out = self.outputs.len();
        let mut bufs: List<crate::tensor::Buf<H>> = List::new();
        for _ in 0..n_out {
            bufs.push(alloc::try_buf::<H>("Fused", self.len)?);
        }
        let outs: List<SendPtr<H>> = bufs.iter_mut().map(|b| SendPtr(b.as_mut_ptr())).collect();
        let (data, wide, outs) = ((&data[..], &rows[..]), &wide[..], &outs[..]);
        // (inlined into `with_simd`'s wide-vector function, as `run_typed`'s
        // tasks: out of it, the pairs' `erf` made its fused multiply-adds
        // library calls)
        let task = |c: std::ops::Range<usize>| {
            with_simd(
                #[inline(always)]
                || self.half_task::<H>(data, wide, outs, c.clone()),
            )
        };
        let min_task = self.min_task(PAR_MIN / 2);
        if self.len >= 2 * min_task && workers::threads() > 1 {
            let per = (self.len / (workers::threads() * 4))
                .max(min_task)
                .next_multiple_of(CHUNK);
            let n_tasks = self.len.div_ceil(per);
            workers::map_small(n_tasks, |t| task(t * per..((t + 1) * per).min(self.len)));
        } else {
            task(0..self.len);
        }
        Ok(bufs
            .into_iter()
            .map(|mut b| {
                // SAFETY: the tasks stored every element of every output
                // (each program stores each of its outputs once per chunk).
                unsafe { b.set_len(self.len) };
                Tensor::from_storage(H::buf_into_storage(b), &self.shape)
            })
            .collect())
    }

    /// The elements `c` of every output.
    #[inline(always)]
    fn half_task<H: Half>(
        &self,
        (data, rows): (&[&[H]], &[Option<Rows>]),
        wide: &[Option<Vec<f32>>],
        outs: &[SendPtr<H>],
        c: std::ops::Range<usize>,
    ) {
        let stride = register_width::<f32>(self.n_regs, c.len());
        let len = self.n_regs.max(1) * stride;
        let mut store = scratch::take_written(len, 0f32);
        let mut regs = Regs::new(&mut store[..len], stride);
        for (r, s) in self.splats.iter() {
            let v = match s {
                Splat::Input(i) => wide[*i as usize]
                    .as_ref()
                    .and_then(|w| w.first().copied())
                    .unwrap_or(0.0),
                // (a constant of the half type, as a half tensor holds it)
                Splat::Value(v) => H::from_f64(*v).to_f64() as f32,
            };
            regs.get_mut(*r, stride).fill(v);
        }
        let mut start = c.start;
        while start < c.end {
            let n = stride.min(c.end - start);
            for ins in self.body.iter() {
                match *ins {
                    Instr::Load { dst, input } => {
                        let (src, out) = (data[input as usize], regs.get_mut(dst, n));
                        match &rows[input as usize] {
                            Some(r) => {
                                let mut o = 0;
                                r.segments(start, n, |at, k| {
                                    H::to_f32s(&src[at..at + k], &mut out[o..o + k]);
                                    o += k;
                                });
                            }
                            None => H::to_f32s(&src[start..start + n], out),
                        }
                    }
                    Instr::Gather { dst, input, q, p } => {
                        let src = wide[input as usize].as_deref().unwrap_or(&[]);
                        gather(src, q, p, start, regs.get_mut(dst, n))
                    }
                    Instr::Unary { ref op, dst, a } => {
                        let (d, x, _) = regs.split(dst, a, a, n);
                        unary_run(op, x, d);
                        round_to::<H>(d);
                    }
                    Instr::Pair { pair, x0, x1, a } => {
                        let (y0, y1, x) = regs.split2(x0, x1, a, n);
                        pair.run(x, y0, y1);
                        round_to::<H>(y0);
                        round_to::<H>(y1);
                    }
                    Instr::Binary { ref op, dst, a, b } => {
                        let (d, x, y) = regs.split(dst, a, b, n);
                        binary_run(op, x, y, d);
                        round_to::<H>(d);
                    }
                    Instr::Store { out, src } => {
                        // SAFETY: elements `start..start + n` of an output
                        // buffer of `len` elements are this task's alone.
                        let o = unsafe { std::slice::from_raw_parts_mut(outs[out as usize].get().add(start), n) };
                        H::from_f32s(regs.get(src, n), o);
                    }
                    // (checked by `run_half`)
                    _ => {}
                }
            }
            start += n;
        }
        scratch::give(store);
    }
}
