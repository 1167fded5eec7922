//! Loops over slices in lock step, for the kernels' hot loops: [`zip`],
//! [`zip3`] and [`zip4`] in place of `a.iter_mut().zip(b)`, [`chunks`] and
//! [`chunks_mut`] to zip runs of elements, [`map`] and [`from_fn`] for
//! fixed-size arrays, and [`fill`] and [`copy`] for slices. They do what
//! the `std` forms do (a zip ends with its shortest operand), and every
//! function they call is inlined, always.
//!
//! Why not `std`'s: part of the machinery behind them is generic code that
//! is not marked `#[inline]` (`Zip`'s specialised constructor for slices,
//! `[T; N]::map`, `slice::fill`, `copy_from_slice`, and `smallvec`'s
//! indexing). rustc compiles such an instance in one of the crate's
//! codegen units, and LLVM inlines it into a loop of another unit only
//! when link-time optimisation runs. A release build without it (the
//! crate is optimised about a fifth faster) then ran some kernels three
//! times slower: a call per zipped loop, or per element of an array map.
//! Written with these, a kernel's loop is whole in the unit that compiles
//! it, whatever the build's settings.

use std::marker::PhantomData;

/// Something indexable in lock step: `len()` items, the `i`-th by [`at`](Seq::at).
pub trait Seq {
    /// What one step gives.
    type Item;
    /// How many steps it has.
    fn len(&self) -> usize;
    /// Whether it has none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The `i`-th item.
    ///
    /// # Safety
    /// `i < self.len()`, and each `i` is asked for at most once (items
    /// may be mutable borrows).
    unsafe fn at(&mut self, i: usize) -> Self::Item;
}

/// What can be turned into a [`Seq`]: slices, arrays and index ranges.
pub trait IntoSeq {
    /// The sequence.
    type Seq: Seq;
    /// It.
    fn into_seq(self) -> Self::Seq;
}

/// A slice read in lock step.
pub struct Shared<'a, T> {
    p: *const T,
    n: usize,
    _l: PhantomData<&'a [T]>,
}

/// A slice written in lock step (held as a pointer, so that each item is
/// a borrow of its own element only).
pub struct Exclusive<'a, T> {
    p: *mut T,
    n: usize,
    _l: PhantomData<&'a mut [T]>,
}

impl<'a, T> Seq for Shared<'a, T> {
    type Item = &'a T;
    #[inline(always)]
    fn len(&self) -> usize {
        self.n
    }
    #[inline(always)]
    unsafe fn at(&mut self, i: usize) -> &'a T {
        // SAFETY: `i < n` (the caller's contract), within the slice
        unsafe { &*self.p.add(i) }
    }
}

impl<'a, T> Seq for Exclusive<'a, T> {
    type Item = &'a mut T;
    #[inline(always)]
    fn len(&self) -> usize {
        self.n
    }
    #[inline(always)]
    unsafe fn at(&mut self, i: usize) -> &'a mut T {
        // SAFETY: `i < n` and asked for once (the caller's contract): a
        // borrow of this element alone, of a slice borrowed mutably for 'a
        unsafe { &mut *self.p.add(i) }
    }
}

impl<'a, T> IntoSeq for &'a [T] {
    type Seq = Shared<'a, T>;
    #[inline(always)]
    fn into_seq(self) -> Shared<'a, T> {
        Shared {
            p: self.as_ptr(),
            n: self.len(),
            _l: PhantomData,
        }
    }
}

impl<'a, T> IntoSeq for &'a mut [T] {
    type Seq = Exclusive<'a, T>;
    #[inline(always)]
    fn into_seq(self) -> Exclusive<'a, T> {
        Exclusive {
            p: self.as_mut_ptr(),
            n: self.len(),
            _l: PhantomData,
        }
    }
}

impl<'a, T, const N: usize> IntoSeq for &'a [T; N] {
    type Seq = Shared<'a, T>;
    #[inline(always)]
    fn into_seq(self) -> Shared<'a, T> {
        Shared {
            p: self.as_ptr(),
            n: N,
            _l: PhantomData,
        }
    }
}

impl<'a, T, const N: usize> IntoSeq for &'a mut [T; N] {
    type Seq = Exclusive<'a, T>;
    #[inline(always)]
    fn into_seq(self) -> Exclusive<'a, T> {
        Exclusive {
            p: self.as_mut_ptr(),
            n: N,
            _l: PhantomData,
        }
    }
}

impl<'a, T> IntoSeq for &'a Vec<T> {
    type Seq = Shared<'a, T>;
    #[inline(always)]
    fn into_seq(self) -> Shared<'a, T> {
        self.as_slice().into_seq()
    }
}

impl<'a, T> IntoSeq for &'a mut Vec<T> {
    type Seq = Exclusive<'a, T>;
    #[inline(always)]
    fn into_seq(self) -> Exclusive<'a, T> {
        self.as_mut_slice().into_seq()
    }
}

impl<'a, A: smallvec::Array> IntoSeq for &'a smallvec::SmallVec<A> {
    type Seq = Shared<'a, A::Item>;
    #[inline(always)]
    fn into_seq(self) -> Shared<'a, A::Item> {
        (&**self).into_seq()
    }
}

impl<'a, A: smallvec::Array> IntoSeq for &'a mut smallvec::SmallVec<A> {
    type Seq = Exclusive<'a, A::Item>;
    #[inline(always)]
    fn into_seq(self) -> Exclusive<'a, A::Item> {
        (&mut **self).into_seq()
    }
}

/// `s.iter()`, as its slice.
impl<'a, T> IntoSeq for std::slice::Iter<'a, T> {
    type Seq = Shared<'a, T>;
    #[inline(always)]
    fn into_seq(self) -> Shared<'a, T> {
        self.as_slice().into_seq()
    }
}

/// `s.iter_mut()`, as its slice.
impl<'a, T> IntoSeq for std::slice::IterMut<'a, T> {
    type Seq = Exclusive<'a, T>;
    #[inline(always)]
    fn into_seq(self) -> Exclusive<'a, T> {
        self.into_slice().into_seq()
    }
}

/// The indices from `start` on, as `enumerate` gives them (`0..`).
impl Seq for std::ops::RangeFrom<usize> {
    type Item = usize;
    #[inline(always)]
    fn len(&self) -> usize {
        usize::MAX
    }
    #[inline(always)]
    unsafe fn at(&mut self, i: usize) -> usize {
        self.start + i
    }
}

impl IntoSeq for std::ops::RangeFrom<usize> {
    type Seq = Self;
    #[inline(always)]
    fn into_seq(self) -> Self {
        self
    }
}

/// The indices `start..end`, as `enumerate` gives them.
impl Seq for std::ops::Range<usize> {
    type Item = usize;
    #[inline(always)]
    fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }
    #[inline(always)]
    unsafe fn at(&mut self, i: usize) -> usize {
        self.start + i
    }
}

impl IntoSeq for std::ops::Range<usize> {
    type Seq = Self;
    #[inline(always)]
    fn into_seq(self) -> Self {
        self
    }
}

/// Runs of `size` elements of a slice, the last perhaps shorter (as
/// `slice::chunks`), to read.
pub struct Chunks<'a, T> {
    s: Shared<'a, T>,
    size: usize,
}

/// Runs of `size` elements of a slice, to write (as `chunks_mut`).
pub struct ChunksMut<'a, T> {
    s: Exclusive<'a, T>,
    size: usize,
}

impl<'a, T> Seq for Chunks<'a, T> {
    type Item = &'a [T];
    #[inline(always)]
    fn len(&self) -> usize {
        self.s.n.div_ceil(self.size)
    }
    #[inline(always)]
    unsafe fn at(&mut self, i: usize) -> &'a [T] {
        let start = i * self.size;
        let len = self.size.min(self.s.n - start);
        // SAFETY: `i < len()`, so `start < n` and the run lies in the slice
        unsafe { std::slice::from_raw_parts(self.s.p.add(start), len) }
    }
}

impl<'a, T> Seq for ChunksMut<'a, T> {
    type Item = &'a mut [T];
    #[inline(always)]
    fn len(&self) -> usize {
        self.s.n.div_ceil(self.size)
    }
    #[inline(always)]
    unsafe fn at(&mut self, i: usize) -> &'a mut [T] {
        let start = i * self.size;
        let len = self.size.min(self.s.n - start);
        // SAFETY: `i < len()` and asked for once: a run of the slice that
        // no other item overlaps
        unsafe { std::slice::from_raw_parts_mut(self.s.p.add(start), len) }
    }
}

impl<'a, T> IntoSeq for Chunks<'a, T> {
    type Seq = Self;
    #[inline(always)]
    fn into_seq(self) -> Self {
        self
    }
}

impl<'a, T> IntoSeq for ChunksMut<'a, T> {
    type Seq = Self;
    #[inline(always)]
    fn into_seq(self) -> Self {
        self
    }
}

/// `s.chunks(size)`, for [`zip`]. `size` is at least 1.
#[inline(always)]
pub fn chunks<T>(s: &[T], size: usize) -> Chunks<'_, T> {
    Chunks {
        s: s.into_seq(),
        size: size.max(1),
    }
}

/// `s.chunks_mut(size)`, for [`zip`]. `size` is at least 1.
#[inline(always)]
pub fn chunks_mut<T>(s: &mut [T], size: usize) -> ChunksMut<'_, T> {
    ChunksMut {
        s: s.into_seq(),
        size: size.max(1),
    }
}

macro_rules! zips {
    ($(#[$doc:meta])* $f:ident, $Z:ident, $($x:ident: $X:ident),+) => {
        $(#[$doc])*
        pub struct $Z<$($X),+> {
            $($x: $X,)+
            i: usize,
            n: usize,
        }

        #[allow(unused_parens)]
        impl<$($X: Seq),+> Iterator for $Z<$($X),+> {
            type Item = ($($X::Item),+);
            #[inline(always)]
            fn next(&mut self) -> Option<Self::Item> {
                if self.i < self.n {
                    let i = self.i;
                    self.i += 1;
                    // SAFETY: `i < n`, the shortest length, and each `i` once
                    unsafe { Some(($(self.$x.at(i)),+)) }
                } else {
                    None
                }
            }
            #[inline(always)]
            fn size_hint(&self) -> (usize, Option<usize>) {
                (self.n - self.i, Some(self.n - self.i))
            }
        }

        $(#[$doc])*
        #[inline(always)]
        pub fn $f<$($X: IntoSeq),+>($($x: $X),+) -> $Z<$($X::Seq),+> {
            $(let $x = $x.into_seq();)+
            let n = usize::MAX;
            $(let n = n.min($x.len());)+
            $Z { $($x,)+ i: 0, n }
        }
    };
}

zips!(
    /// The items of one sequence (of [`chunks`], say), as a loop over it.
    each, Each, a: A
);
zips!(
    /// `a` and `b` in lock step, as `a.zip(b)`: the items of slices
    /// (`&T` or `&mut T`), arrays, ranges of indices or [`chunks`].
    zip, Zip2, a: A, b: B
);
zips!(
    /// Three in lock step, as `a.zip(b).zip(c)` (the items flat).
    zip3, Zip3, a: A, b: B, c: C
);
zips!(
    /// Four in lock step (the items flat).
    zip4, Zip4, a: A, b: B, c: C, d: D
);

/// `s` cut where its whole runs of `size` end: the runs (for [`chunks`])
/// and the rest, as `s.chunks_exact(size)` and its remainder.
#[inline(always)]
pub fn whole<T>(s: &[T], size: usize) -> (&[T], &[T]) {
    s.split_at(s.len() - s.len() % size.max(1))
}

/// [`whole`] of a slice to write.
#[inline(always)]
pub fn whole_mut<T>(s: &mut [T], size: usize) -> (&mut [T], &mut [T]) {
    let at = s.len() - s.len() % size.max(1);
    s.split_at_mut(at)
}

/// `a.map(f)`.
#[inline(always)]
pub fn map<T: Copy, U, const N: usize>(a: [T; N], mut f: impl FnMut(T) -> U) -> [U; N] {
    from_fn(|i| f(a[i]))
}

/// `std::array::from_fn(f)`.
#[inline(always)]
pub fn from_fn<U, const N: usize>(mut f: impl FnMut(usize) -> U) -> [U; N] {
    let mut out = [const { std::mem::MaybeUninit::<U>::uninit() }; N];
    for (i, o) in zip(0..N, &mut out) {
        o.write(f(i));
    }
    // SAFETY: every element was written above; `[MaybeUninit<U>; N]` and
    // `[U; N]` have the same layout, and `out` drops nothing
    unsafe { (&raw const out).cast::<[U; N]>().read() }
}

/// `s.fill(v)`.
#[inline(always)]
pub fn fill<T: Copy>(s: &mut [T], v: T) {
    for x in s {
        *x = v;
    }
}

/// `dst.copy_from_slice(src)`: the two are as long (a kernel's own
/// invariant, asserted).
#[inline(always)]
pub fn copy<T: Copy>(dst: &mut [T], src: &[T]) {
    assert_eq!(dst.len(), src.len(), "copy: slices of different lengths");
    for (d, &s) in zip(dst, src) {
        *d = s;
    }
}
