//! `f32` matrix products on CPUs with AVX-512: packed panels, a register
//! tile of `MR` rows by `NR` columns, and a split over gradtape's compute
//! threads.
//!
//! The `gemm` crate (used for every other case) spends much of a
//! training step's small products (128×784 by 784×512 and the like) outside
//! its kernel: its packing buffers are allocated per call, which on Linux
//! means fresh pages and page faults for the larger ones, and its rayon
//! split woke sleeping threads for every product. Here packing buffers live
//! per thread and are reused, and a product is cut into one piece per
//! thread along its longer side (rows or columns of the output), each piece
//! packing what it reads, except that the pieces of a split by rows pack
//! their common `B` once, together (`SharedB`): each waits only for the
//! panels the other is packing, never for a thread that has not started.
//!
//! The blocking is the classic one (Goto and van de Geijn): `KC` of the
//! shared dimension at a time, `B` packed in `NR`-column panels that stay
//! in L2, `A` in `MR`-row panels of `MC` rows, and the kernel keeps an
//! `MR`×`NR` tile of `C` in registers over the whole `KC` slice, writing it
//! once (or adding it, for later slices) with masked stores at the edges.
//! A block of rows of `A` runs its tiles panel by panel of `B`, or, where
//! `B` has many panels, a row of tiles at a time with the panels inner, so
//! that the tile's rows of `A` stay in L1 (`ROWS_OUTER_PANELS`).
//! The tile's width follows the output's: 48 columns (8 rows), 32 (12 rows)
//! or 16 (16 rows), whichever pads the output's edges least, so conv
//! layers with 16 or 32 channels and outputs 256 or 1024 wide waste no
//! lanes.
//! A row-major `B` multiplied by few rows of `A` (at most `MC`) is not
//! packed but read in place, its part-width right edge aside: packing it
//! would cost as much as a large share of the arithmetic (an RNN step's
//! `[32,128] @ [128,128]`). A transposed `B` is packed through 16×16
//! transposes in registers (a gather per vector cost more). A row-major
//! `A` of at most `MC` rows, or times few panels of `B`, is not packed:
//! the kernel broadcasts each step's `MR` values from the tile's rows
//! where they lie, one pointer per row, which saves a pass over `A` (most
//! of whose time went to waiting on `A`'s first reads, out of the
//! caches), unless its rows alias in the L1 cache (see `serial`); other
//! row-major `A`s are packed through 16×16 transposes, and a column-major
//! `A` a step of k of all its panels at a time, unless few panels of `B`
//! use it (a filter gradient's): then the kernel reads each step's values
//! where they lie, side by side as in a packed panel; while the kernel runs on
//! one block of a packed row-major `A`, the next block's lines are
//! fetched into L2 (a part per panel of `B`), so that its packing does not
//! wait on the L3 cache or memory; so are the next block's steps of a
//! column-major `A` read where it lies (a part per tile, from two panels of
//! `B`: `COLS_AHEAD_PANELS`), whose tiles otherwise waited on `kc` lines
//! from as many pages at the start of each block. A thin output with a long
//! shared dimension (a filter gradient) is split over the shared
//! dimension.
//!
//! Set `GRADTAPE_SGEMM=0` to route every product to `gemm` instead (for
//! comparisons); the choice is read once.

use std::arch::x86_64::*;
use std::cell::RefCell;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::OnceLock;

use super::lockstep::{self, zip};
use super::sgemm_pack::{pack_a, pack_b, prefetch_part, prefetch_steps};
use super::workers;

/// Largest slice of the shared dimension packed at once.
const KC: usize = 256;
/// Rows of `A` packed at once (a multiple of every tile's `MR`).
const MC: usize = 96;
/// Columns of `B` packed at once (a multiple of every tile's `NR`).
const NC: usize = 1536;
/// Most rows of `A` times which a row-major `B` is read in place, with the
/// 8×48 tile (`MC` with the others).
const DIRECT_WIDE: usize = 128;
/// Most bytes that a row-major `B` read in place spans, with the 12×32
/// tile (one thread, GFLOP/s packed against in place: `96x2048 @
/// 2048x2048` 80 against 70, `96x4096 @ 4096x512` 90 against 77, `48x512 @
/// 512x512` 89 against 108, `128x256 @ 256x256` 103 against 107).
const DIRECT_SPAN: usize = 2 << 20;
/// Most panels of `B` times which a column-major `A` is read where it
/// lies rather than packed (one thread, GFLOP/s packed against in place:
/// a filter gradient `[576,3136]ᵀ @ [3136,64]` 88-98 against 111-112,
/// `[6272,144]ᵀ @ [6272,32]` 92 against 110, `[1024,1000]ᵀ @ [1024,100]`
/// 81-82 against 87-88, `[1024,1024]ᵀ @ [1024,256]` (8 panels) 102-108
/// against 108-110; from 16 panels no faster, `[128,784]ᵀ @ [128,512]`
/// 109 both ways, and past them slower, `[1024,512]ᵀ @ [1024,1376]`
/// 103-105 against 100-102 and `[2048,2048]ᵀ @ [2048,2048]` 100-101
/// against 98: each tile then reads `kc` lines `cs` floats apart, from
/// as many pages, where packed it reads `kc * MR` floats in a row).
const COLS_IN_PLACE_PANELS: usize = 8;
/// Fewest panels of `B` times which a column-major `A` read where it lies
/// has its next block fetched into L2 while the kernel runs on the current
/// one. One thread, operands out of the caches (a 512 MiB pass before each
/// call), median GFLOP/s of alternating runs without against with (2-core
/// Xeon, scratch program): `[576,3136]ᵀ @ [3136,64]` (2 panels) 55-74
/// against 81-109, `[1024,1024]ᵀ @ [1024,256]` (8 panels) 83-115 against
/// 92-129; operands warm, level (101-120 both ways). With one panel it
/// was slower warm (`[144,6272]ᵀ @ [6272,32]` 91-112 against 84-105),
/// though faster cold (42-59 against 51-59): the kernel's one pass over
/// the block streams it already, and the fetches compete with its reads.
const COLS_AHEAD_PANELS: usize = 2;
/// Fewest packed panels of `B` from which a block of rows of `A` runs its
/// tiles a row of tiles at a time, the panels inner (BLIS's order seen
/// from a row-major output), not a panel at a time: the tile's rows of
/// `A` (8-12 KiB) stay in L1 while the panels (48 KiB a tile at `KC`)
/// stream from L2, and `C` is written along its rows, not `MR` rows (other
/// pages) further per tile. Two threads, 2-core Xeon, scratch program
/// alternating both orders, warm/cold GFLOP/s: `[2048,2048]²` 274-277 →
/// 295-303, `[512,384] @ [384,1536]` 254/248 → 267-272/264-268; 8 panels
/// (`[512,384] @ [384,384]`) 1-3 % slower, hence the bound. Same sums.
const ROWS_OUTER_PANELS: usize = 16;
/// Products with fewer multiply-adds than this run on one thread (but see
/// `PAR_FLOPS_COMPILED`), and are not split over the shared dimension.
const PAR_FLOPS: usize = 1 << 20;
/// Products with fewer multiply-adds than this run on one thread while a
/// compiled graph runs ([`split_small`]; `PAR_FLOPS` otherwise), unless
/// `GRADTAPE_SGEMM_PAR` sets another bound for all (read once). An RNN
/// step's products (`[32,128] @ [128,128]`: 2^19) are split then: the
/// helpers spin between the back-to-back products of a compiled run, and
/// the `rnn_grad` bench's traced step went from about 2.6 to 2.5 ms. An
/// eager step has more work between its products, and went from 3.1 to
/// 3.5 ms with them split, so it keeps the larger bound. Such a product
/// splits only while the helpers are awake
/// ([`workers::helpers_awake`]): in a step of a few small products (the
/// `mlp_s` model of `trace_vs_eager`, `[32,64] @ [64,128]`: 2^18) the
/// helpers park between steps, and waking one for a product it never
/// reached in time made the traced step 0.9x-1.5x the eager one, run to run.
/// Computed whole on the caller, each element is the same sum in the same
/// order (see [`one_thread`]).
const PAR_FLOPS_COMPILED: usize = 1 << 18;

thread_local! {
    static COLS_IN_PLACE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    static SPLIT_SMALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static ONE_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with products whose output would be split by rows or columns
/// over the threads computed whole on the calling thread (the compiled
/// executor's pairs of products, each on its own thread). Each element is
/// the same sum in the same order either way: the slices of the shared
/// dimension follow from `k` alone. A split of the shared dimension (a
/// thin output) changes the order of the sums, so it is kept (its pieces
/// run one after the other within a pair's job).
pub(crate) fn one_thread<R>(f: impl FnOnce() -> R) -> R {
    crate::scoped::with_flag(&ONE_THREAD, true, f)
}

/// Runs `f` with products from `PAR_FLOPS_COMPILED` multiply-adds split
/// over the threads (the compiled executor's runs).
pub(crate) fn split_small<R>(f: impl FnOnce() -> R) -> R {
    crate::scoped::with_flag(&SPLIT_SMALL, true, f)
}

/// Runs `f` with the eager bound (`PAR_FLOPS`) on splitting products,
/// inside a compiled run too: for a kernel that loops over small dependent
/// products itself (a recurrence's steps, each product followed by the
/// step's elementwise work on one thread), where the compiled bound split
/// each step's product and the helpers waited out the rest of the step (a
/// traced LSTM of 64 units, batch 32, returning its sequence: 5.4 ms a
/// training step against 5.0 with the eager bound, as eagerly).
pub(crate) fn eager_bound<R>(f: impl FnOnce() -> R) -> R {
    crate::scoped::with_flag(&SPLIT_SMALL, false, f)
}

/// How many blocked products (or pieces of one) this thread has run with
/// a column-major `A` read where it lies (see `COLS_IN_PLACE_PANELS`): for
/// tests that the path is taken.
///
/// ```
/// # use gradtape::__internals::kernels::cpu::sgemm::*;
/// if available() {
///     // A = Xᵀ for X of 3×20 (20×3, column-major), B of 3×40
///     let (x, y) = (vec![1.0f32; 60], vec![0.5f32; 120]);
///     let a = View { ptr: x.as_ptr(), rs: 1, cs: 20 };
///     let b = View { ptr: y.as_ptr(), rs: 40, cs: 1 };
///     let mut c = vec![0.0f32; 800];
///     let before = cols_in_place_calls();
///     // SAFETY: the views address 20×3 and 3×40 elements; c has 20 rows of 40
///     unsafe { sgemm(20, 40, 3, a, b, c.as_mut_ptr(), 40, false, false) };
///     assert_eq!(cols_in_place_calls(), before + 1);
///     assert!(c.iter().all(|&v| v == 1.5));
/// }
/// ```
pub fn cols_in_place_calls() -> usize {
    COLS_IN_PLACE.with(|c| c.get())
}

/// The bound below which products run on one thread.
fn par_flops() -> usize {
    static P: OnceLock<Option<usize>> = OnceLock::new();
    let set = *P.get_or_init(|| std::env::var("GRADTAPE_SGEMM_PAR").ok().and_then(|v| v.parse().ok()));
    set.unwrap_or_else(|| match SPLIT_SMALL.with(|s| s.get()) {
        true => PAR_FLOPS_COMPILED,
        false => PAR_FLOPS,
    })
}

/// Whether this CPU runs the kernel (checked once).
pub fn available() -> bool {
    static A: OnceLock<bool> = OnceLock::new();
    *A.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512f") && std::env::var("GRADTAPE_SGEMM").map_or(true, |v| v != "0")
    })
}

/// Whether `m×k @ k×n` is worth this path rather than `gemm`'s (which has
/// matrix-vector kernels for thin products).
pub(crate) fn suits(m: usize, n: usize, k: usize) -> bool {
    available() && m >= 4 && n >= 8 && k >= 4
}

/// A strided matrix operand.
#[derive(Clone, Copy)]
pub struct View {
    pub ptr: *const f32,
    pub rs: isize,
    pub cs: isize,
}

// SAFETY: a View only reads, and the callers keep the operand alive and
// unmodified for the whole product.
unsafe impl Send for View {}
// SAFETY: as above.
unsafe impl Sync for View {}

impl View {
    /// The element at (`r`, `c`) as a pointer.
    ///
    /// # Safety
    ///
    /// (`r`, `c`) is an element of the operand: the pointer stays inside
    /// its allocation.
    #[inline(always)]
    pub unsafe fn at(self, r: usize, c: usize) -> *const f32 {
        unsafe { self.ptr.offset(r as isize * self.rs + c as isize * self.cs) }
    }
}

/// 64-byte aligned packing storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

thread_local! {
    static PACK: RefCell<(Vec<Line>, Vec<Line>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// A packing buffer of at least `floats` elements, and at first use all
/// of `cap` (the most that [`sgemm`] packs into it: an `MC`×`KC` block of
/// `A`, a `KC`×`NC` panel of `B`; 1.6 MB per thread for the two). Grown
/// by need instead, a thread allocated again whenever it first packed a
/// larger product, which in a compiled run depends on which thread takes
/// which product of a pair: allocations at random calls.
fn room(v: &mut Vec<Line>, floats: usize, cap: usize) -> *mut f32 {
    let lines = floats.div_ceil(16);
    if v.len() < lines {
        // (the old contents are scratch: not copied)
        *v = vec![Line([0.0; 16]); lines.max(cap.div_ceil(16))];
    }
    v.as_mut_ptr() as *mut f32
}

/// `C = A @ B` (or `C += A @ B` when `acc`) for `A` of `m×k` and `B` of
/// `k×n`; `C` is row-major with row stride `ldc`. Without `acc` every one of
/// its `m×n` elements is written, so it may start uninitialised.
///
/// # Safety
/// [`available`] must be true; the views must address `m×k` and `k×n`
/// readable elements and `c` `m` rows of `ldc >= n` writable ones, not
/// overlapping the operands.
#[allow(clippy::too_many_arguments)]
pub unsafe fn sgemm(m: usize, n: usize, k: usize, a: View, b: View, c: *mut f32, ldc: usize, acc: bool, par: bool) {
    unsafe {
        if m == 0 || n == 0 {
            return;
        }
        if k == 0 {
            if acc {
                return;
            }
            for i in 0..m {
                std::ptr::write_bytes(c.add(i * ldc), 0, n);
            }
            return;
        }
        // the tile: MR rows by 16*NV columns, sized to the output's width
        // (24 or 16 accumulators of the 32 vector registers)
        match n {
            0..=16 => run::<16, 1>(m, n, k, a, b, c, ldc, acc, par),
            17..=32 => run::<12, 2>(m, n, k, a, b, c, ldc, acc, par),
            _ if wide_tile(m, n) => run::<8, 3>(m, n, k, a, b, c, ldc, acc, par),
            _ => run::<12, 2>(m, n, k, a, b, c, ldc, acc, par),
        }
    }
}

/// Whether an output of `m` rows and `n > 32` columns takes the 8×48
/// tile rather than the 12×32 one: where its tiles cover at most 1/64
/// more padding (rows and columns past the output's, whose lanes still
/// take their multiply-adds). With 48 columns an output 256 wide wastes
/// 11 % of its work (6 panels for 5⅓), where 32 divide it; with 12 rows,
/// 32 rows waste 11 % (3 tiles for 2⅔), where 8 divide them. A 64-column
/// tile never pads less than the 32-column one.
///
/// The 1/64: where neither pads much, the 8×48 tile was the faster one
/// at large sizes. `[2048,2048]²` (the 8×48 tile pads 0.6 % more: 43
/// panels for 42⅔, where 12 rows pad 2048 to 2052, 0.2 %), 2-core Xeon,
/// the library's own probe (two threads, median of 10, builds alternated
/// twice): 264-276 GFLOP/s warm with 12×32 against 283-286 with 8×48,
/// cold 254-264 against 269-277 (MKL 315-318 warm). Not explained: the
/// register kernel alone runs both tiles at the FMA ports' peak, and in a
/// scratch copy the two tiles' gap (0-10 %) moved with the build. At 3 %
/// (`[1024,256] @ [256,1024]`: 1056 columns for 1024, against 1032 rows
/// for 1024) the two were level (153-156 one thread), so it stays 12×32.
/// The tile does not change the sums: each element adds the same
/// products in the same order (the slices of `k` follow from `k`).
pub fn wide_tile(m: usize, n: usize) -> bool {
    let area = |mr: usize, nr: usize| m.next_multiple_of(mr) * n.next_multiple_of(nr);
    64 * area(8, 48) <= 65 * area(12, 32)
}

/// [`sgemm`] with a given tile: split over the threads, then [`serial`].
#[allow(clippy::too_many_arguments)]
unsafe fn run<const MR: usize, const NV: usize>(
    m: usize,
    n: usize,
    k: usize,
    a: View,
    b: View,
    c: *mut f32,
    ldc: usize,
    acc: bool,
    par: bool,
) {
    unsafe {
        let nr = 16 * NV;
        let threads = workers::threads();
        let cp = workers::SendPtr(c);
        // (`split_output` finds two aligned blocks on one side exactly when
        // this holds; otherwise a long shared dimension is split, below)
        let blocks = n >= 2 * nr || m >= 2 * MR;
        // a product below `PAR_FLOPS` splits only onto helpers already
        // awake: waking a parked one costs more than the product
        let small = m * n * k < PAR_FLOPS;
        if par && threads > 1 && m * n * k >= par_flops() && blocks && (!small || workers::helpers_awake()) {
            if ONE_THREAD.with(|o| o.get()) {
                // each element as the split computes it: whole, on this thread
                return serial::<MR, NV>(m, n, k, a, b, c, ldc, acc, None);
            }
            // a split by rows packs B once, the threads together (`SharedB`)
            let kb = k.div_ceil(KC);
            let n_pad = n.next_multiple_of(nr);
            let need = k.div_ceil(kb) * kb * n_pad;
            let share = n <= NC && kb <= SHARED_SLICES && need <= SHARED_FLOATS;
            let split = SHARED.with(|cell| {
                let mut buf = cell.try_borrow_mut().ok().filter(|_| share);
                let sb = buf.as_mut().map(|v| SharedB::new(room(v, need, 0), k, n_pad, nr));
                // (a square output by rows when B is shared: by columns,
                // each thread packed the whole of A, through transposes for
                // a row-major one; `[1024,256] @ [256,1024]`)
                workers::split_output(m, n, (MR, nr), sb.is_some(), |r, cols| {
                    let (av, bv) = (
                        View {
                            ptr: a.at(r.start, 0),
                            ..a
                        },
                        View {
                            ptr: b.at(0, cols.start),
                            ..b
                        },
                    );
                    let dst = cp.get().wrapping_add(r.start * ldc + cols.start);
                    // (a split by columns gives each piece its own part of B)
                    let shared = sb.as_ref().filter(|_| cols.len() == n);
                    // SAFETY: each piece writes its own block of C.
                    serial::<MR, NV>(r.len(), cols.len(), k, av, bv, dst, ldc, acc, shared)
                })
            });
            debug_assert!(split, "an output of two aligned blocks splits");
            return;
        }
        if par && threads > 1 && m * n * k >= PAR_FLOPS && k >= 2 * KC {
            // thin output, long shared dimension (a filter gradient): each
            // thread sums a slice of k; the first writes C, the others their
            // own buffers, added afterwards
            let kp = k.div_ceil(threads);
            let parts = workers::map(k.div_ceil(kp), |i| {
                let (p0, p1) = (i * kp, ((i + 1) * kp).min(k));
                let (av, bv) = (View { ptr: a.at(0, p0), ..a }, View { ptr: b.at(p0, 0), ..b });
                if i == 0 {
                    // SAFETY: only this piece writes C.
                    serial::<MR, NV>(m, n, p1 - p0, av, bv, cp.get(), ldc, acc, None);
                    return Vec::new();
                }
                let mut t = vec![0.0f32; m * n];
                // SAFETY: `t` holds m rows of n.
                serial::<MR, NV>(m, n, p1 - p0, av, bv, t.as_mut_ptr(), n, false, None);
                t
            });
            for t in parts.iter().filter(|t| !t.is_empty()) {
                for i in 0..m {
                    let row = std::slice::from_raw_parts_mut(c.add(i * ldc), n);
                    for (x, y) in zip(&mut row[..], &t[i * n..(i + 1) * n]) {
                        *x += y;
                    }
                }
            }
            return;
        }
        serial::<MR, NV>(m, n, k, a, b, c, ldc, acc, None)
    }
}

/// Most slices of the shared dimension that a [`SharedB`] packs.
const SHARED_SLICES: usize = 16;
/// Most floats that a [`SharedB`] packs (4 MiB).
const SHARED_FLOATS: usize = 1 << 20;

thread_local! {
    static SHARED: RefCell<Vec<Line>> = const { RefCell::new(Vec::new()) };
}

/// `B` packed once for all the threads of a split by rows, each slice of
/// the shared dimension in its own part of one buffer: the threads claim
/// groups of its panels in turn, pack them, and wait until every group of
/// the slice is packed before using it. A thread that arrives first (or
/// alone: the pool may run both pieces on the caller) packs whatever is
/// unclaimed, so no thread waits on one that has not started, only on
/// groups another thread is packing.
struct SharedB {
    buf: workers::SendPtr<f32>,
    /// floats from one slice's panels to the next's
    slice: usize,
    /// panels per group, groups per slice
    per: usize,
    groups: usize,
    claimed: [AtomicUsize; SHARED_SLICES],
    done: [AtomicUsize; SHARED_SLICES],
}

impl SharedB {
    /// For `k` rows of `B` in panels of `nr` columns, `n_pad` columns in
    /// all, into `buf` (room for `k.div_ceil(KC)` slices of the longest).
    fn new(buf: *mut f32, k: usize, n_pad: usize, nr: usize) -> Self {
        let kb = k.div_ceil(KC);
        let panels = n_pad / nr;
        // (groups of a panel or more: eight per slice, about, so that the
        // threads share the last ones out evenly)
        let per = panels.div_ceil(8);
        Self {
            buf: workers::SendPtr(buf),
            slice: k.div_ceil(kb) * n_pad,
            per,
            groups: panels.div_ceil(per),
            claimed: std::array::from_fn(|_| AtomicUsize::new(0)),
            done: std::array::from_fn(|_| AtomicUsize::new(0)),
        }
    }

    /// The packed panels of slice `s`, packing groups of them by
    /// `pack(first panel, panels, their place)` until none is left
    /// unclaimed, then waiting for the other threads' groups.
    fn slice(&self, s: usize, pack: impl Fn(usize, usize, *mut f32)) -> *const f32 {
        let base = self.buf.get().wrapping_add(s * self.slice);
        loop {
            let g = self.claimed[s].fetch_add(1, Relaxed);
            if g >= self.groups {
                break;
            }
            pack(g * self.per, self.per, base);
            self.done[s].fetch_add(1, Release);
        }
        let mut spins = 0u32;
        while self.done[s].load(Acquire) < self.groups {
            std::hint::spin_loop();
            spins += 1;
            if spins > 1 << 12 {
                std::thread::yield_now();
            }
        }
        base
    }
}

/// The blocked product on the calling thread.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn serial<const MR: usize, const NV: usize>(
    m: usize,
    n: usize,
    k: usize,
    a: View,
    b: View,
    c: *mut f32,
    ldc: usize,
    acc: bool,
    shared: Option<&SharedB>,
) {
    unsafe {
        let nr = 16 * NV;
        // slices of the shared dimension of (nearly) equal length
        let kb = k.div_ceil(KC);
        let kc_max = k.div_ceil(kb);
        let mc = MC / MR * MR;
        let mc_max = mc.min(m.next_multiple_of(MR));
        let nc_max = NC.min(n.next_multiple_of(nr));
        // a row-major B multiplied by few rows of A is read in place, one row
        // of a panel per step of k, and only a part-width panel at its right
        // edge is packed: packing it whole cost a third of the arithmetic's
        // time in an RNN step's `[32,128] @ [128,128]` (perf, `rnn_grad`).
        // With the 48-column tile, up to `DIRECT_WIDE` rows (the `mlp_step`
        // products of 128 rows: 3-6 % faster in place). With the 32-column
        // one, only where B spans at most `DIRECT_SPAN` bytes: beyond, its
        // rows came from the L3 cache or memory each a page apart, and
        // `96x2048 @ 2048x2048` ran 14 % slower in place than packed
        // (`12x2048 @ 2048x2048` 30 %; see `DIRECT_SPAN`)
        let direct = b.cs == 1
            && b.rs > 0
            && match NV {
                3 => m <= DIRECT_WIDE,
                2 => m <= MC && k * b.rs as usize * 4 <= DIRECT_SPAN,
                _ => m <= MC,
            };
        // a row-major A of one block of rows, or of an output of few
        // panels (a convolution's columns times 16 or 32 filters), is read
        // where it lies (see `ARows`), unless its rows are a multiple of
        // 2 KiB apart: then every row's next line falls in the same sets
        // of the L1 cache, which holds 8 lines per set, and a tile's rows
        // evicted each other and the panel of B (`[1024, 1024] @ [1024,
        // 256]` went from 79 to 103 GFLOP/s on one Zen 4 core packed).
        // Else A is packed: its packing is shared by the output's panels
        let aliased = (a.rs as usize * 4).is_multiple_of(2048);
        let a_in_place = a.cs == 1 && a.rs > 0 && (m <= MC || n < 4 * nr) && !aliased;
        // a column-major A (the `Xᵀ` of a weight gradient) times few panels
        // of B is read where it lies too: each step's `MR` values are side
        // by side there as in a packed panel, only `cs` floats from the
        // last step's rather than `MR` (see `COLS_IN_PLACE_PANELS`)
        let a_cols = a.rs == 1 && a.cs > 0 && n <= COLS_IN_PLACE_PANELS * nr;
        if a_cols {
            COLS_IN_PLACE.with(|c| c.set(c.get() + 1));
        }
        // and while the kernel runs on one block of it, the next block's
        // lines are fetched into L2, a part per tile, where B has two
        // panels or more (see `COLS_AHEAD_PANELS`)
        let cols_ahead = a_cols && n.min(NC).div_ceil(nr) >= COLS_AHEAD_PANELS;
        // the tiles of a block of rows taken row of tiles by row of tiles
        // (the panels of B inner) where B is packed and has many panels,
        // else panel by panel (see `ROWS_OUTER_PANELS`)
        let rows_outer = !direct && !a_cols && n.min(NC).div_ceil(nr) >= ROWS_OUTER_PANELS;
        PACK.with(|cell| {
            let mut local = (Vec::new(), Vec::new());
            let mut borrowed = cell.try_borrow_mut();
            let (abuf, bbuf) = match borrowed.as_mut() {
                Ok(b) => {
                    let b = &mut **b;
                    (&mut b.0, &mut b.1)
                }
                Err(_) => (&mut local.0, &mut local.1),
            };
            let ap = room(abuf, mc_max * kc_max, MC * KC);
            let bp = room(bbuf, nc_max * kc_max, NC * KC);
            for jc in (0..n).step_by(NC) {
                let nc = NC.min(n - jc);
                // columns read in place: whole panels
                let in_place = if direct { nc / nr * nr } else { 0 };
                let mut pc = 0;
                while pc < k {
                    let kc = kc_max.min(k - pc);
                    let bq = match shared {
                        // (one block of columns: `n <= NC`)
                        Some(sh) if !direct => sh.slice(pc / kc_max, |q0, np, base| {
                            let j0 = q0 * nr;
                            pack_b::<NV>(kc, (np * nr).min(nc - j0), b.at(pc, j0), b.rs, b.cs, base.add(j0 * kc))
                        }),
                        _ => {
                            if in_place < nc {
                                pack_b::<NV>(
                                    kc,
                                    nc - in_place,
                                    b.at(pc, jc + in_place),
                                    b.rs,
                                    b.cs,
                                    bp.add(in_place * kc),
                                );
                            }
                            bp as *const f32
                        }
                    };
                    for ic in (0..m).step_by(mc) {
                        let mc_step = mc;
                        let mc = mc.min(m - ic);
                        if !a_in_place && !a_cols {
                            pack_a::<MR>(mc, kc, a.at(ic, pc), a.rs, a.cs, ap);
                        } else if a_cols && !mc.is_multiple_of(MR) {
                            // (the block's last, part-height tile: packed, its
                            // rows past the operand's zeros)
                            let r0 = mc / MR * MR;
                            pack_a::<MR>(mc - r0, kc, a.at(ic + r0, pc), a.rs, a.cs, ap.add(r0 * kc));
                        }
                        // the next block of A that `pack_a` reads (or the
                        // kernel, in place: `cols_ahead`), fetched into L2 a
                        // part per panel of B (per tile) while the kernel runs
                        let next = match () {
                            _ if a_in_place || (a.cs != 1 && !cols_ahead) => None,
                            _ if ic + mc_step < m => Some((ic + mc_step, pc, mc_step.min(m - ic - mc_step), kc)),
                            _ if pc + kc < k => Some((0, pc + kc, mc_step.min(m), kc_max.min(k - pc - kc))),
                            _ => None,
                        };
                        let parts = nc.div_ceil(nr);
                        let tiles = mc.div_ceil(MR);
                        if rows_outer {
                            for ir in (0..mc).step_by(MR) {
                                let rows = MR.min(mc - ir);
                                let ar = match a_in_place {
                                    true => ARows::InPlace(lockstep::from_fn(|i| a.at(ic + ir + i.min(rows - 1), pc))),
                                    false => ARows::Packed(ap.add(ir * kc)),
                                };
                                for jr in (0..nc).step_by(nr) {
                                    if let Some((i0, p0, mn, kn)) = next {
                                        let part = ir / MR * parts + jr / nr;
                                        prefetch_part(a, i0, p0, mn, kn, part, parts * tiles);
                                    }
                                    kernel::<MR, NV>(
                                        kc,
                                        ar,
                                        (bq.add(jr * kc), nr),
                                        c.add((ic + ir) * ldc + jc + jr),
                                        ldc,
                                        rows,
                                        nr.min(nc - jr),
                                        acc || pc > 0,
                                    );
                                }
                            }
                            continue;
                        }
                        for jr in (0..nc).step_by(nr) {
                            if let Some((i0, p0, mn, kn)) = next.filter(|_| !a_cols) {
                                prefetch_part(a, i0, p0, mn, kn, jr / nr, parts);
                            }
                            let (panel, ldb) = match jr < in_place {
                                true => (b.at(pc, jc + jr), b.rs as usize),
                                false => (bq.add(jr * kc), nr),
                            };
                            for ir in (0..mc).step_by(MR) {
                                if let Some((i0, p0, mn, kn)) = next.filter(|_| a_cols) {
                                    let part = jr / nr * tiles + ir / MR;
                                    prefetch_steps(a, i0, p0, mn, kn, part, parts * tiles);
                                }
                                let rows = MR.min(mc - ir);
                                let ar = match a_in_place {
                                    true => ARows::InPlace(lockstep::from_fn(|i| a.at(ic + ir + i.min(rows - 1), pc))),
                                    false if a_cols && rows == MR => ARows::Cols(a.at(ic + ir, pc), a.cs as usize),
                                    false => ARows::Packed(ap.add(ir * kc)),
                                };
                                kernel::<MR, NV>(
                                    kc,
                                    ar,
                                    (panel, ldb),
                                    c.add((ic + ir) * ldc + jc + jr),
                                    ldc,
                                    MR.min(mc - ir),
                                    nr.min(nc - jr),
                                    acc || pc > 0,
                                );
                            }
                        }
                    }
                    pc += kc;
                }
            }
        })
    }
}

/// Lane mask for the `v`-th vector of a row with `nr` valid columns.
#[inline(always)]
pub(crate) fn mask(nr: usize, v: usize) -> __mmask16 {
    let left = nr.saturating_sub(16 * v).min(16);
    ((1u32 << left) - 1) as __mmask16
}

/// One step of k: the tile += the column of `MR` values `a(i)` x row `bp`
/// (16*NV, packed or in place: not necessarily aligned).
#[inline(always)]
unsafe fn step<const MR: usize, const NV: usize>(
    acc: &mut [[__m512; NV]; MR],
    a: impl Fn(usize) -> f32,
    bp: *const f32,
) {
    unsafe {
        let mut bv = [_mm512_setzero_ps(); NV];
        for (v, x) in zip(0.., &mut bv[..]) {
            *x = _mm512_loadu_ps(bp.add(16 * v));
        }
        for (i, row) in zip(0.., &mut acc[..]) {
            let av = _mm512_set1_ps(a(i));
            for v in 0..NV {
                row[v] = _mm512_fmadd_ps(av, bv[v], row[v]);
            }
        }
    }
}

/// Where the kernel reads its `MR` rows of `A`: a packed panel (for each
/// step of k, the `MR` values side by side), or the rows of a row-major
/// `A` where they lie (one pointer per row; rows past the tile's last
/// repeat it, their results unstored).
#[derive(Clone, Copy)]
pub(super) enum ARows<const MR: usize> {
    Packed(*const f32),
    InPlace([*const f32; MR]),
    /// A column-major `A` where it lies: each step's `MR` values side by
    /// side, steps `.1` floats apart.
    Cols(*const f32, usize),
}

/// The `MR`×`NR` tile: `C[..mr, ..nr] (+)= Apanel @ Bpanel` over `kc`;
/// the B panel's rows (16*NV readable floats each) are `ldb` floats apart.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn kernel<const MR: usize, const NV: usize>(
    kc: usize,
    a: ARows<MR>,
    (b, ldb): (*const f32, usize),
    c: *mut f32,
    ldc: usize,
    mr: usize,
    nr: usize,
    add: bool,
) {
    unsafe {
        // C's lines, fetched for writing while the tile's steps run: a
        // compiled step's outputs are buffers no op has touched since the
        // last step, out of the caches, and the tile's stores waited for
        // them
        for i in 0..mr {
            for v in (0..NV).take_while(|&v| 16 * v < nr) {
                // (a prefetch never faults; the address is the tile's own)
                _mm_prefetch::<_MM_HINT_ET0>(c.wrapping_add(i * ldc + 16 * v) as *const i8);
            }
        }
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        match a {
            ARows::Packed(a) => {
                // four steps of k per trip (fewer loop instructions between the FMAs)
                let mut p = 0;
                while p + 4 <= kc {
                    for q in p..p + 4 {
                        step::<MR, NV>(&mut acc, |i| *a.add(q * MR + i), b.add(q * ldb));
                    }
                    p += 4;
                }
                while p < kc {
                    step::<MR, NV>(&mut acc, |i| *a.add(p * MR + i), b.add(p * ldb));
                    p += 1;
                }
            }
            ARows::Cols(a, lda) => {
                let mut p = 0;
                while p + 4 <= kc {
                    for q in p..p + 4 {
                        step::<MR, NV>(&mut acc, |i| *a.add(q * lda + i), b.add(q * ldb));
                    }
                    p += 4;
                }
                while p < kc {
                    step::<MR, NV>(&mut acc, |i| *a.add(p * lda + i), b.add(p * ldb));
                    p += 1;
                }
            }
            ARows::InPlace(rows) => {
                let mut p = 0;
                while p + 4 <= kc {
                    for q in p..p + 4 {
                        step::<MR, NV>(&mut acc, |i| *rows[i].add(q), b.add(q * ldb));
                    }
                    p += 4;
                }
                while p < kc {
                    step::<MR, NV>(&mut acc, |i| *rows[i].add(p), b.add(p * ldb));
                    p += 1;
                }
            }
        }
        let masks: [__mmask16; NV] = lockstep::from_fn(|v| mask(nr, v));
        for (i, row) in acc.iter().enumerate().take(mr) {
            let cr = c.add(i * ldc);
            for v in 0..NV {
                let dst = cr.add(16 * v);
                let mut x = row[v];
                if add {
                    x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(masks[v], dst));
                }
                _mm512_mask_storeu_ps(dst, masks[v], x);
            }
        }
    }
}
