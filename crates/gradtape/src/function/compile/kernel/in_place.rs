//! Fused kernels that write into their inputs' buffers: which input may
//! give an output its buffer, and how inputs are read when one does.

use super::{Instr, Lane, Prepared, Program};
use crate::error::{Error, Result};
use crate::kernels::cpu::workers::SendPtr;
use crate::tensor::{DType, Tensor};

/// An input's elements, read through a raw pointer: an input whose buffer
/// an output takes is written while the kernel reads it (each chunk loaded
/// before the same chunk is stored), so no reference to them may live.
pub(super) struct Src<'a, T> {
    pub(super) ptr: *const T,
    pub(super) len: usize,
    /// a register loaded from the input may read its elements in place:
    /// nothing writes them during the run (no output takes the buffer), or
    /// the output that does is stored after the last read of that register
    /// in each chunk (see [`Program::load_dies_before_store`])
    pub(super) fixed: bool,
    /// for a view with contiguous rows, where they lie (`ptr` and `len`
    /// are then its whole buffer's; only loads read it: see [`super::rows`])
    pub(super) rows: Option<&'a super::rows::Rows>,
}

impl<T> Clone for Src<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Src<'_, T> {}
// SAFETY: the elements are only read, by the tasks of one kernel run, each
// of its own chunks, while the tensors they belong to are held by the run.
unsafe impl<T: Send> Send for Src<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Src<'_, T> {}

impl<T: Copy> Src<'_, T> {
    /// Copies elements `start..start + out.len()` into `out`.
    #[inline(always)]
    pub(super) fn copy_to(&self, start: usize, out: &mut [T]) {
        assert!(start + out.len() <= self.len, "a fused load past its input");
        // SAFETY: the range lies in the input (checked), and `out` is a
        // register, another allocation.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(start), out.as_mut_ptr(), out.len()) }
    }
    /// Where elements `start..start + n` begin (checked to lie in the input).
    #[inline(always)]
    pub(super) fn at(&self, start: usize, n: usize) -> *const T {
        assert!(start + n <= self.len, "a fused load past its input");
        // SAFETY: `start` is within the input (checked).
        unsafe { self.ptr.add(start) }
    }
    /// The first element (of a one-element input).
    #[inline(always)]
    pub(super) fn first(&self) -> T {
        assert!(self.len > 0, "a fused splat of an empty input");
        // SAFETY: the input has an element (checked).
        unsafe { *self.ptr }
    }
    /// The elements as a slice, for the broadcast reads of [`gather`](super::epilogue::gather).
    ///
    /// # Safety
    /// No output may write these elements while the slice lives: true of
    /// every input that gives no output its buffer, and a broadcast input
    /// never does (a donor has the group's length, a broadcast input fewer
    /// elements).
    #[inline(always)]
    pub(super) unsafe fn as_slice<'a>(&self) -> &'a [T] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// An elementwise output written into an input's buffer.
pub(super) struct Donor<T> {
    /// the output's number among the elementwise outputs
    pub(super) out: usize,
    /// the input whose buffer it takes
    pub(super) input: usize,
    /// the input's elements
    pub(super) ptr: SendPtr<T>,
    /// whether a register loaded from the input may read it in place
    /// (see [`Program::load_dies_before_store`])
    pub(super) fixed: bool,
}

impl Program {
    /// [`run`](Self::run), writing elementwise outputs into the buffers of
    /// inputs that nothing else holds (the caller's handle in `inputs` is
    /// the only one: no other handle, no view) instead of new buffers.
    /// Such an input takes a fresh id, and `inputs` then holds the output
    /// in its place. An output may take the buffer of an input of the
    /// group's length that the program loads (once) before it stores that
    /// output (each chunk of the input is read into a register before the
    /// same chunk of the output is written).
    pub fn run_in_place(&self, inputs: &mut [Tensor]) -> Result<super::Outs> {
        self.run_in_place_lent(inputs, 0)
    }

    /// [`run_in_place`](Self::run_in_place) where the inputs marked in
    /// `lent` (bit `k`: input `k`) are handles that do not count (the
    /// executor's, see `exec::Operands`): held by something else although
    /// they look held alone, so no output is written into them.
    pub fn run_in_place_lent(&self, inputs: &mut [Tensor], lent: u64) -> Result<super::Outs> {
        self.check_inputs(inputs)?;
        match self.dtype {
            DType::F32 => {
                let mut fresh = None;
                let plan = self.prepared(&mut fresh);
                let donors = self.donors::<f32>(plan, inputs, lent);
                self.run_typed::<f32>(plan, inputs, &donors)
            }
            DType::F64 => {
                let mut fresh = None;
                let plan = self.prepared(&mut fresh);
                let donors = self.donors::<f64>(plan, inputs, lent);
                self.run_typed::<f64>(plan, inputs, &donors)
            }
            // (into new buffers: see `half`)
            DType::F16 => self.run_half::<crate::tensor::f16>(inputs),
            DType::BF16 => self.run_half::<crate::tensor::bf16>(inputs),
            d => Err(Error::invalid("Fused", format!("no fused kernel for {d}"))),
        }
    }

    /// Whether the register loaded from `input` (which the program loads
    /// once) is read by no instruction from the store of elementwise output
    /// `out` on, that store included: then, within each chunk, every read of
    /// the input's elements comes before the output writes them, and the
    /// register may read them in place although `out` takes the buffer.
    pub(super) fn load_dies_before_store(&self, input: usize, out: usize) -> bool {
        let Some(at) = self
            .body
            .iter()
            .position(|x| matches!(x, Instr::Load { input: i, .. } if *i as usize == input))
        else {
            return false;
        };
        let Instr::Load { dst: r, .. } = self.body[at] else {
            return false;
        };
        let mut stored = false;
        for ins in self.body[at + 1..].iter() {
            if let Instr::Store { out: o, .. } = ins {
                stored |= *o as usize == out;
            }
            let (reads, writes) = super::sums::operands(ins);
            if stored && reads.contains(&r) {
                return false;
            }
            if writes.contains(&r) {
                return true;
            }
        }
        true
    }

    /// Per elementwise output that can be written in place: the output's
    /// number among the elementwise outputs, the input, the input's
    /// elements. Taking an input's elements here gives it a fresh id.
    fn donors<T: Lane>(&self, plan: &Prepared, inputs: &mut [Tensor], lent: u64) -> smallvec::SmallVec<[Donor<T>; 2]> {
        let mut donors = smallvec::SmallVec::new();
        // tiny tensors hold their elements inline, in the handle: left alone
        if self.len == 1 || self.len * std::mem::size_of::<T>() <= 64 {
            return donors;
        }
        let mut taken: smallvec::SmallVec<[bool; 8]> = smallvec::smallvec![false; inputs.len()];
        // (the candidates per store, and whether their registers may
        // still read in place, are the call plan's)
        for (out, candidates) in plan.donor_stores.iter() {
            for &(i, fixed) in candidates.iter() {
                let i = i as usize;
                let lent = i < 64 && lent >> i & 1 == 1;
                if lent || taken[i] || inputs[i].shape() != &self.shape[..] {
                    continue;
                }
                if let Some(v) = inputs[i].unique_values_mut::<T>()
                    && v.len() == self.len
                {
                    taken[i] = true;
                    donors.push(Donor {
                        out: *out as usize,
                        input: i,
                        ptr: SendPtr(v.as_mut_ptr()),
                        fixed,
                    });
                    break;
                }
            }
        }
        donors
    }
}
