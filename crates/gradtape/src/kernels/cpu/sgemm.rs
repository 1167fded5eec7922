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
//! packing what it reads: a little duplicated packing buys a single
//! synchronisation per product.
//!
//! The blocking is the classic one (Goto and van de Geijn): `KC` of the
//! shared dimension at a time, `B` packed in `NR`-column panels that stay
//! in L2, `A` in `MR`-row panels of `MC` rows, and the kernel keeps an
//! `MR`×`NR` tile of `C` in registers over the whole `KC` slice, writing it
//! once (or adding it, for later slices) with masked stores at the edges.
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
//! `A` a step of k of all its panels at a time. A thin output with a long
//! shared dimension (a filter gradient) is split over the shared
//! dimension.
//!
//! Set `GRADTAPE_SGEMM=0` to route every product to `gemm` instead (for
//! comparisons); the choice is read once.

use std::arch::x86_64::*;
use std::cell::RefCell;
use std::sync::OnceLock;

use super::lockstep::{self, zip};
use super::workers;

/// Largest slice of the shared dimension packed at once.
const KC: usize = 256;
/// Rows of `A` packed at once (a multiple of every tile's `MR`).
const MC: usize = 96;
/// Columns of `B` packed at once (a multiple of every tile's `NR`).
const NC: usize = 1536;
/// Steps of k ahead that a column-major `A`'s packing fetches.
const PF: usize = 8;
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
/// 3.5 ms with them split, so it keeps the larger bound.
const PAR_FLOPS_COMPILED: usize = 1 << 18;

thread_local! {
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
/// tile rather than the 12×32 one: where its tiles cover no more padding
/// (rows and columns past the output's, whose lanes still take their
/// multiply-adds). With 48 columns an output 256 wide wastes 11 % of its
/// work (6 panels for 5⅓), where 32 divide it; with 12 rows, 32 rows
/// waste 11 % (3 tiles for 2⅔), where 8 divide them. A 64-column tile
/// never pads less than the 32-column one.
fn wide_tile(m: usize, n: usize) -> bool {
    let area = |mr: usize, nr: usize| m.next_multiple_of(mr) * n.next_multiple_of(nr);
    area(8, 48) <= area(12, 32)
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
        if par && threads > 1 && m * n * k >= par_flops() && blocks {
            if ONE_THREAD.with(|o| o.get()) {
                // each element as the split computes it: whole, on this thread
                return serial::<MR, NV>(m, n, k, a, b, c, ldc, acc);
            }
            let split = workers::split_output(m, n, (MR, nr), |r, cols| {
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
                // SAFETY: each piece writes its own block of C.
                serial::<MR, NV>(r.len(), cols.len(), k, av, bv, dst, ldc, acc)
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
                    serial::<MR, NV>(m, n, p1 - p0, av, bv, cp.get(), ldc, acc);
                    return Vec::new();
                }
                let mut t = vec![0.0f32; m * n];
                // SAFETY: `t` holds m rows of n.
                serial::<MR, NV>(m, n, p1 - p0, av, bv, t.as_mut_ptr(), n, false);
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
        serial::<MR, NV>(m, n, k, a, b, c, ldc, acc)
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
        // time in an RNN step's `[32,128] @ [128,128]` (perf, `rnn_grad`)
        let direct = b.cs == 1 && b.rs > 0 && m <= MC;
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
                    for ic in (0..m).step_by(mc) {
                        let mc = mc.min(m - ic);
                        if !a_in_place {
                            pack_a::<MR>(mc, kc, a.at(ic, pc), a.rs, a.cs, ap);
                        }
                        for jr in (0..nc).step_by(nr) {
                            let (panel, ldb) = match jr < in_place {
                                true => (b.at(pc, jc + jr), b.rs as usize),
                                false => (bp.add(jr * kc) as *const f32, nr),
                            };
                            for ir in (0..mc).step_by(MR) {
                                let rows = MR.min(mc - ir);
                                let ar = match a_in_place {
                                    true => ARows::InPlace(lockstep::from_fn(|i| a.at(ic + ir + i.min(rows - 1), pc))),
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

/// Packs `mc×kc` of `A` into `MR`-row panels: panel `q` holds, for each
/// `p`, rows `q*MR..q*MR+MR` of column `p` (zero past `mc`).
#[target_feature(enable = "avx512f")]
unsafe fn pack_a<const MR: usize>(mc: usize, kc: usize, a: *const f32, rs: isize, cs: isize, dst: *mut f32) {
    unsafe {
        if rs == 1 && MR <= 16 {
            // a column-major A (the `Xᵀ` of a weight gradient `Xᵀ·dY`): one
            // step of k for all the block's panels at a time, so that each
            // column of A (a row of X, `mc` floats side by side) is read
            // once, line after line. Panel by panel, each step of k read a
            // few floats of a column `cs` floats after the last step's (a
            // page, for X 1024 wide), and each line once per panel in it
            let (panels, all) = (mc.div_ceil(MR), mask(MR, 0));
            for p in 0..kc {
                let s = a.offset(p as isize * cs);
                // (each step's lines are a stride apart, a new page for X
                // 1024 wide: fetched `PF` steps ahead; a prefetch never
                // faults, past the slice too)
                for l in (0..mc).step_by(16) {
                    _mm_prefetch::<_MM_HINT_T0>(s.wrapping_offset(PF as isize * cs).wrapping_add(l) as *const i8);
                }
                for q in 0..panels {
                    let rows = MR.min(mc - q * MR);
                    let x = _mm512_maskz_loadu_ps(mask(rows, 0), s.add(q * MR));
                    _mm512_mask_storeu_ps(dst.add(q * MR * kc + p * MR), all, x);
                }
            }
            return;
        }
        for r0 in (0..mc).step_by(MR) {
            let rows = MR.min(mc - r0);
            let d = dst.add(r0 * kc);
            let src = a.offset(r0 as isize * rs);
            if rows == MR && rs == 1 {
                for p in 0..kc {
                    std::ptr::copy_nonoverlapping(src.offset(p as isize * cs), d.add(p * MR), MR);
                }
            } else if cs == 1 && MR <= 16 {
                // a row-major A: 16 steps of k of the panel's rows at a time,
                // transposed in registers (rows past the panel's load
                // nothing: zeros)
                let all = mask(MR, 0);
                for p in (0..kc).step_by(16) {
                    let kv = 16.min(kc - p);
                    let mut r: [__m512; 16] = lockstep::from_fn(|i| {
                        let m = if i < rows { mask(kv, 0) } else { 0 };
                        _mm512_maskz_loadu_ps(m, src.wrapping_offset(i as isize * rs).wrapping_add(p))
                    });
                    transpose16(&mut r);
                    for (t, x) in zip(0.., &r[..]) {
                        if t < kv {
                            _mm512_mask_storeu_ps(d.add((p + t) * MR), all, *x);
                        }
                    }
                }
            } else if cs == 1 {
                for i in 0..rows {
                    let s = src.offset(i as isize * rs);
                    for p in 0..kc {
                        *d.add(p * MR + i) = *s.add(p);
                    }
                }
                for i in rows..MR {
                    for p in 0..kc {
                        *d.add(p * MR + i) = 0.0;
                    }
                }
            } else {
                for p in 0..kc {
                    let s = src.offset(p as isize * cs);
                    for i in 0..MR {
                        *d.add(p * MR + i) = if i < rows { *s.offset(i as isize * rs) } else { 0.0 };
                    }
                }
            }
        }
    }
}

/// Packs `kc×nc` of `B` into `NR`-column panels: panel `q` holds, for each
/// `p`, columns `q*NR..q*NR+NR` of row `p` (zero past `nc`).
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pack_b<const NV: usize>(kc: usize, nc: usize, b: *const f32, rs: isize, cs: isize, dst: *mut f32) {
    unsafe {
        const { assert!(NV > 0) };
        let nr = 16 * NV;
        if cs == 1 {
            // a row-major B: row after row of the slice, each read whole
            // (`nc` floats side by side) into its part of every panel.
            // Panel by panel, each row's few lines were read `rs` floats
            // after the last row's: a new page every few rows (every row,
            // for B 1024 wide), where the hardware's prefetchers stop
            let panels = nc.div_ceil(nr);
            for p in 0..kc {
                let s = b.offset(p as isize * rs);
                for q in 0..panels {
                    let cols = nr.min(nc - q * nr);
                    let d = dst.add(q * nr * kc + p * nr);
                    // (whole vectors, masked at the right edge, zeros past
                    // it: a memcpy call per 48-float row cost more)
                    for v in 0..NV {
                        let mk = if cols == nr { !0 } else { mask(cols, v) };
                        _mm512_store_ps(
                            d.add(16 * v),
                            _mm512_maskz_loadu_ps(mk, s.wrapping_add(q * nr + 16 * v)),
                        );
                    }
                }
            }
            return;
        }
        for j0 in (0..nc).step_by(nr) {
            let cols = nr.min(nc - j0);
            let d = dst.add(j0 * kc);
            let src = b.offset(j0 as isize * cs);
            if rs == 1 {
                // a column-major (transposed) B: 16 columns by 16 rows at a
                // time, transposed in registers (columns past the panel's load
                // nothing: mask 0)
                for p in (0..kc).step_by(16) {
                    let kv = 16.min(kc - p);
                    for v in 0..NV {
                        let mut r: [__m512; 16] = lockstep::from_fn(|i| {
                            let m = if 16 * v + i < cols { mask(kv, 0) } else { 0 };
                            _mm512_maskz_loadu_ps(m, src.wrapping_offset((16 * v + i) as isize * cs).wrapping_add(p))
                        });
                        transpose16(&mut r);
                        for (t, x) in zip(0.., &r[..]) {
                            if t < kv {
                                _mm512_store_ps(d.add((p + t) * nr + 16 * v), *x);
                            }
                        }
                    }
                }
            } else if cs.unsigned_abs() < (i32::MAX as usize) / 16 {
                // other strides: gather 16 columns per vector
                let idx = _mm512_mullo_epi32(
                    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                    _mm512_set1_epi32(cs as i32),
                );
                let masks: [__mmask16; NV] = lockstep::from_fn(|v| mask(cols, v));
                for p in 0..kc {
                    let s = src.offset(p as isize * rs);
                    for (v, &mk) in zip(0.., &masks[..]) {
                        let x = _mm512_mask_i32gather_ps::<4>(
                            _mm512_setzero_ps(),
                            mk,
                            idx,
                            s.wrapping_offset(16 * v as isize * cs),
                        );
                        _mm512_store_ps(d.add(p * nr + 16 * v), x);
                    }
                }
            } else {
                for j in 0..cols {
                    let s = src.offset(j as isize * cs);
                    for p in 0..kc {
                        *d.add(p * nr + j) = *s.offset(p as isize * rs);
                    }
                }
                for j in cols..nr {
                    for p in 0..kc {
                        *d.add(p * nr + j) = 0.0;
                    }
                }
            }
        }
    }
}

/// Transposes the 16×16 block whose rows are `r` (row `i` becomes column
/// `i`): pairs, then quads, then 128-bit lanes, then 256-bit halves.
#[inline(always)]
unsafe fn transpose16(r: &mut [__m512; 16]) {
    unsafe {
        let (lo, hi) = (
            |a: __m512, b: __m512| _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))),
            |a: __m512, b: __m512| _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))),
        );
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        for i in 0..4 {
            r[4 * i] = lo(t[4 * i], t[4 * i + 2]);
            r[4 * i + 1] = hi(t[4 * i], t[4 * i + 2]);
            r[4 * i + 2] = lo(t[4 * i + 1], t[4 * i + 3]);
            r[4 * i + 3] = hi(t[4 * i + 1], t[4 * i + 3]);
        }
        for h in 0..2 {
            for i in 0..4 {
                t[8 * h + i] = _mm512_shuffle_f32x4::<0x88>(r[8 * h + i], r[8 * h + 4 + i]);
                t[8 * h + 4 + i] = _mm512_shuffle_f32x4::<0xdd>(r[8 * h + i], r[8 * h + 4 + i]);
            }
        }
        for i in 0..8 {
            r[i] = _mm512_shuffle_f32x4::<0x88>(t[i], t[8 + i]);
            r[8 + i] = _mm512_shuffle_f32x4::<0xdd>(t[i], t[8 + i]);
        }
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
