//! The registers of a running program: one buffer of `stride` elements per
//! register, where a register loaded from an input that nothing writes
//! during the run reads that input's elements in place (no copy), and a
//! register that a store will copy to an output may be written in that
//! output's elements instead (its *target*: no copy either).

use smallvec::SmallVec;

use super::Reg;

/// The registers as one buffer: `n` live elements per register.
pub struct Regs<'a, T> {
    buf: &'a mut [T],
    /// elements per register (see `register_width`)
    stride: usize,
    /// per register: the input elements it stands for (set by a load of an
    /// input that nothing writes during the run, until the register is
    /// next written), or null for its own elements in `buf`
    views: SmallVec<[*const T; 16]>,
    /// per register: output elements its writes go to (set by
    /// [`target`](Self::target) until [`untarget`](Self::untarget)), or
    /// null for its own elements in `buf`
    targets: SmallVec<[*mut T; 16]>,
    // (`views` and `targets` are indexed through their slices,
    // `(*self.views)[r]`: `SmallVec`'s own indexing is not `#[inline]`;
    // see `kernels::cpu::lockstep`)
}

impl<'a, T: Copy> Regs<'a, T> {
    /// `buf.len() / stride` registers of `stride` elements.
    pub fn new(buf: &'a mut [T], stride: usize) -> Self {
        let n_regs = buf.len() / stride.max(1);
        Regs {
            buf,
            stride,
            views: smallvec::smallvec![std::ptr::null(); n_regs],
            targets: smallvec::smallvec![std::ptr::null_mut(); n_regs],
        }
    }

    /// Where register `r`'s elements are read (its own in `buf`, checked
    /// to hold `n`, or the input elements it stands for).
    #[inline(always)]
    fn read_ptr(&self, r: Reg, n: usize) -> *const T {
        let s = r as usize * self.stride;
        assert!(
            n <= self.stride && s + n <= self.buf.len(),
            "a register past the registers"
        );
        let v = (*self.views)[r as usize];
        if v.is_null() {
            // SAFETY: `s + n` is within `buf` (checked)
            unsafe { self.buf.as_ptr().add(s) }
        } else {
            v
        }
    }

    /// Register `r`'s first `n` elements, to read.
    #[inline(always)]
    pub fn get(&self, r: Reg, n: usize) -> &[T] {
        // SAFETY: `read_ptr` gives `n` elements of `buf` (checked) or of an
        // input that nothing writes during the run (see `view`).
        unsafe { std::slice::from_raw_parts(self.read_ptr(r, n), n) }
    }

    /// Register `r`'s first `n` elements, to write: its own again, or
    /// its target's (which it then reads too).
    #[inline(always)]
    pub fn get_mut(&mut self, r: Reg, n: usize) -> &mut [T] {
        let s = r as usize * self.stride;
        let own = &mut self.buf[s..s + n];
        let t = (*self.targets)[r as usize];
        if t.is_null() {
            (*self.views)[r as usize] = std::ptr::null();
            own
        } else {
            (*self.views)[r as usize] = t;
            // SAFETY: a target holds `n` elements that only this register
            // reads or writes until `untarget` (see `target`); `n` is
            // within the register's width (checked by the slice above).
            unsafe { std::slice::from_raw_parts_mut(t, n) }
        }
    }

    /// Register `r`'s writes go to the `n` elements at `p` (and its reads
    /// follow them) until [`untarget`](Self::untarget).
    ///
    /// # Safety
    /// `p` is valid for reads and writes of `n` elements while the
    /// registers live, outside `buf` and every input a register reads;
    /// nothing else reads or writes them until `untarget`; and `n` is at
    /// least the length of every access to `r` meanwhile.
    #[inline(always)]
    pub unsafe fn target(&mut self, r: Reg, p: *mut T, n: usize) {
        assert!(n <= self.stride && (r as usize + 1) * self.stride <= self.buf.len());
        (*self.targets)[r as usize] = p;
    }

    /// Whether register `r`'s elements are now those at `p` (it was
    /// targeted there and written since).
    #[inline(always)]
    pub fn is_at(&self, r: Reg, p: *const T) -> bool {
        std::ptr::eq((*self.views)[r as usize], p)
    }

    /// Register `r` writes its own elements again (its value, if it was
    /// written in its target, is still read there until it is next
    /// written).
    #[inline(always)]
    pub fn untarget(&mut self, r: Reg) {
        (*self.targets)[r as usize] = std::ptr::null_mut();
    }

    /// Register `r` stands for the `n` elements at `p` until it is next
    /// written.
    ///
    /// # Safety
    /// `p` is valid for reads of `n` elements while the registers live, and
    /// nothing writes those elements meanwhile.
    #[inline(always)]
    pub unsafe fn view(&mut self, r: Reg, p: *const T, n: usize) {
        assert!(n <= self.stride && (r as usize + 1) * self.stride <= self.buf.len());
        (*self.views)[r as usize] = p;
    }

    /// Register `dst` (written) and registers `a`, `b` (read); `dst` is
    /// never `a` or `b` (the allocator gives an instruction a register
    /// that none of its operands holds).
    #[inline(always)]
    pub fn split(&mut self, dst: Reg, a: Reg, b: Reg, n: usize) -> (&mut [T], &[T], &[T]) {
        assert!(dst != a && dst != b);
        let (pa, pb) = (self.read_ptr(a, n), self.read_ptr(b, n));
        let d = self.get_mut(dst, n).as_mut_ptr();
        // SAFETY: `dst`'s own range (in `buf`) is disjoint from `a`'s and
        // `b`'s (other registers of `stride` elements, or input elements
        // outside `buf`), each valid for `n` elements; `a` and `b` are only
        // read.
        unsafe {
            (
                std::slice::from_raw_parts_mut(d, n),
                std::slice::from_raw_parts(pa, n),
                std::slice::from_raw_parts(pb, n),
            )
        }
    }

    /// Registers `d1` and `d2` (written) and register `a` (read), three
    /// distinct registers.
    #[inline(always)]
    pub fn split2(&mut self, d1: Reg, d2: Reg, a: Reg, n: usize) -> (&mut [T], &mut [T], &[T]) {
        assert!(d1 != d2 && d1 != a && d2 != a);
        let pa = self.read_ptr(a, n);
        let p1 = self.get_mut(d1, n).as_mut_ptr();
        let p2 = self.get_mut(d2, n).as_mut_ptr();
        // SAFETY: as in `split`: `d1` and `d2` are distinct registers'
        // own ranges, disjoint from each other and from `a`'s elements.
        unsafe {
            (
                std::slice::from_raw_parts_mut(p1, n),
                std::slice::from_raw_parts_mut(p2, n),
                std::slice::from_raw_parts(pa, n),
            )
        }
    }
}

/// The registers of a [`Instr::Chain`](super::Instr::Chain): where its
/// result goes relative to its inputs.
pub(super) enum ChainRegs<'r, T> {
    /// `dst` apart from `a`, `b`, `c`.
    Fresh(&'r mut [T], &'r [T], &'r [T], &'r [T]),
    /// `dst` is `a`'s own elements (written after each is read); `b`, `c`.
    OverA(&'r mut [T], &'r [T], &'r [T]),
    /// `a`; `dst` is `b`'s own elements; `c`.
    OverB(&'r [T], &'r mut [T], &'r [T]),
}

impl<T: Copy> Regs<'_, T> {
    /// A chain's registers: `dst` written, `a`, `b`, `c` read, where `dst`
    /// may be `a` or `b` (not both) but not `c`. A register that stands for
    /// input elements is read there, so `dst` over it is a fresh register.
    #[inline(always)]
    pub(super) fn chain(&mut self, dst: Reg, a: Reg, b: Reg, c: Reg, n: usize) -> ChainRegs<'_, T> {
        assert!(dst != c && !(dst == a && dst == b));
        let (pa, pb, pc) = (self.read_ptr(a, n), self.read_ptr(b, n), self.read_ptr(c, n));
        let own = self.get_mut(dst, n).as_mut_ptr();
        // SAFETY: each pointer is valid for `n` elements (`read_ptr`,
        // `get_mut`); registers are disjoint ranges of `buf`, and inputs lie
        // outside it, so `own` equals at most one of `pa`, `pb` (not both:
        // checked) and never `pc` (`dst != c`), and overlaps none it does
        // not equal. The one written slice is never read through another.
        unsafe {
            let r = |p: *const T| std::slice::from_raw_parts(p, n);
            let w = std::slice::from_raw_parts_mut(own, n);
            if std::ptr::eq(pa, own) {
                ChainRegs::OverA(w, r(pb), r(pc))
            } else if std::ptr::eq(pb, own) {
                ChainRegs::OverB(r(pa), w, r(pc))
            } else {
                ChainRegs::Fresh(w, r(pa), r(pb), r(pc))
            }
        }
    }
}
