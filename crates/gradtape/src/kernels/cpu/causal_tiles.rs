//! The products of an attention block on register tiles cut along its
//! diagonal: [`attention_gemm`](super::attention_gemm)'s blocks whose
//! rows see different numbers of keys (causal), and, with a flat
//! staircase, those whose rows all see the same keys (no causal mask,
//! cross-attention: see [`attention_split`](super::attention_split)),
//! `f32` on CPUs with AVX-512.
//!
//! Row `r` of such a block sees the first `seen[r]` of its keys (a
//! non-decreasing staircase). Cut into sub-blocks, each one a product over
//! the keys its last row sees, a block of 64 rows against 128 keys still
//! multiplied some 40 % more scores than its rows see (sub-blocks of 32
//! rows, padded to the product's 12-row tile). Here each product walks the
//! [`sgemm`](super::sgemm) kernel's register tiles itself and skips what no
//! row of a tile sees:
//!
//! - [`cols`] (scores `Q Kᵀ`, `dP = dO Vᵀ`): per 16 rows, only the 16-key
//!   vectors that the tile's last row reaches;
//! - [`rows_k`] (`O = P V`, `dQ = dS K`): per 8 rows, the sum over only the
//!   keys the tile's last row sees (the rest of each row is 0);
//! - [`keys_t`] (`dV += Pᵀ dO`, `dK += dSᵀ Q`): per 8 keys, the sum over only
//!   the rows from the first that sees the tile's first key.
//!
//! Each operand that is read across its rows (`Kᵀ`, `Vᵀ`) is packed into
//! panels once per task, for all the blocks of its batch element that the
//! task takes ([`KeyPanels`]); the others are read where they lie, bar a
//! part-width right edge. Every sum runs over its terms in order, as the
//! product kernel's do: what differs from one product over all the keys is
//! only which zero terms are added. Those zeros are the only entries past a
//! row's keys that the tiles read ([`read_end`]: a few per row), so the
//! callers clear no more of a row than that.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::tensor::Float;

/// Rows of the tiles of [`cols`] (one vector of 16 keys wide). (Their 16
/// row pointers do not fit the registers, and are reloaded every step of
/// `k`; tiles of 8 rows measured level or 0-2 % slower on one Xeon core,
/// heads of 16 to 64: the loads do not bound the tile.)
const MR_COLS: usize = 16;
/// Rows of the tiles of [`rows_k`] and [`keys_t`] (two vectors wide).
const MR_K: usize = 8;
/// Columns of those tiles.
const NR_K: usize = 32;

/// 64-byte aligned packing storage (the packing stores whole lines).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// Blocks (causal or flat) whose score (or `dP`) product ran here,
/// counted for the tests (one relaxed increment per block).
static PRODUCTS: AtomicUsize = AtomicUsize::new(0);

/// How many blocks' score (or `dP`) products have run on these tiles
/// since the process started: a test's check that its blocks took
/// them (the count only grows, other threads' blocks included).
///
/// ```
/// use gradtape::__internals::kernels::cpu::causal_tiles::products;
/// let before = products();
/// assert!(products() >= before);
/// ```
pub fn products() -> usize {
    PRODUCTS.load(Ordering::Relaxed)
}

/// Whether `f32` causal blocks run on these tiles here (AVX-512, and not
/// turned off by `GRADTAPE_CAUSAL_TILES=0`).
///
/// ```
/// let _on: bool = gradtape::__internals::kernels::cpu::causal_tiles::runs_f32();
/// ```
pub fn runs_f32() -> bool {
    available::<f32>()
}

thread_local! {
    static BUF: RefCell<(Vec<Line>, Vec<Line>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Whether the products of `T` run here: `f32` where the CPU has the
/// [`sgemm`](super::sgemm) kernel.
/// Set `GRADTAPE_CAUSAL_TILES=0` to cut causal blocks into sub-block
/// products instead (for comparisons); the choice is read once.
pub(super) fn available<T: Float>() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        T::DTYPE == crate::DType::F32
            && super::sgemm::available()
            && *ON.get_or_init(|| std::env::var("GRADTAPE_CAUSAL_TILES").map_or(true, |v| v != "0"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Runs `f` on this thread's two packing buffers, each of at least the
/// given number of floats (a fresh pair if the thread's are in use).
fn with_bufs<R>(floats: (usize, usize), f: impl FnOnce(*mut f32, *mut f32) -> R) -> R {
    let room = |v: &mut Vec<Line>, n: usize| {
        let lines = n.div_ceil(16).max(1);
        if v.len() < lines {
            *v = vec![Line([0.0; 16]); lines];
        }
        v.as_mut_ptr() as *mut f32
    };
    BUF.with(|cell| match cell.try_borrow_mut() {
        Ok(mut b) => {
            let b = &mut *b;
            let (x, y) = (room(&mut b.0, floats.0), room(&mut b.1, floats.1));
            f(x, y)
        }
        Err(_) => {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            f(room(&mut x, floats.0), room(&mut y, floats.1))
        }
    })
}

/// Asserts that a matrix of `rows × width`, rows `rs` apart, lies in `len`
/// elements.
#[inline(always)]
fn fits(len: usize, rows: usize, width: usize, rs: usize) {
    assert!(
        rows == 0 || width == 0 || len >= (rows - 1) * rs + width,
        "causal attention tile out of bounds"
    );
}

/// Checks the staircase: non-decreasing. Returns its width (the last
/// row's keys), 0 for no rows.
#[inline(always)]
fn width(seen: &[usize]) -> usize {
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "causal attention: stairs go down"
    );
    seen.last().copied().unwrap_or(0)
}

/// Where the entries of row `r` of a staircase block that [`rows_k`] and
/// [`keys_t`] read end (keys from the tiles' first, exclusive): past the
/// row's own `seen[r]` keys, [`rows_k`]'s 8-row tile reads up to its last
/// row's keys, and [`keys_t`]'s 8-key tiles read the row's keys up to the
/// next multiple of 8 (at most the block's width). Those entries must be 0
/// (the probability of a hidden key); those after them are never read, so
/// a block's rows need not be cleared to their end (a `memset` call of up
/// to a block's width per row and product: some 5 % of a causal `[32, 128,
/// 128, 64]` call).
#[inline(always)]
pub(super) fn read_end(seen: &[usize], r: usize) -> usize {
    let (n, s) = (seen.len(), seen[r]);
    let tile_last = (r / MR_K * MR_K + MR_K - 1).min(n - 1);
    seen[tile_last].max(s.next_multiple_of(MR_K).min(seen[n - 1]))
}

/// The keys of one batch element (`Kᵀ` or `Vᵀ` as [`cols`] reads them)
/// packed once for all the blocks of a task that read them: panels of 16
/// keys, from key 0 up to the most any block has asked for so far (a block
/// of a causal task asks for more keys than the one before it; the panels
/// of the first keys are the same whoever packs them). Packing per block
/// had cost some 6 % of a causal `[32, 128, 128, 64]` call's time (each
/// key packed once per block of 64 rows that sees it). The storage is the
/// thread's, given back when the panels are dropped.
pub(super) struct KeyPanels {
    buf: Vec<Line>,
    /// The keys packed: their first element, row stride and width.
    src: (usize, usize, usize),
    /// The first key packed (the first panel's), and the keys packed
    /// so far (`base..packed`).
    base: usize,
    packed: usize,
}

thread_local! {
    static PANELS: RefCell<Vec<Vec<Line>>> = const { RefCell::new(Vec::new()) };
}

impl KeyPanels {
    /// Panels with nothing packed (on the thread's kept storage).
    pub(super) fn new() -> KeyPanels {
        let buf = PANELS.with(|p| p.borrow_mut().pop()).unwrap_or_default();
        KeyPanels {
            buf,
            src: (0, 0, 0),
            base: 0,
            packed: 0,
        }
    }
}

impl Drop for KeyPanels {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        PANELS.with(|p| {
            if let Ok(mut p) = p.try_borrow_mut() {
                p.push(buf);
            }
        });
    }
}

/// `c[r, j] = Σ_p a[r, p] · bt[lo + j, p]` for the rows `r` of `seen` and,
/// of keys `j < seen[r]`, at least those (each 16-row tile writes the
/// 16-key vectors its last row reaches, up to the last row's keys: entries
/// past a row's own keys get values, which the caller overwrites). `a`:
/// rows `a_rs` apart, `k` wide; `bt` (the keys from key 0): rows `bt_rs`
/// apart, `k` wide, packed into `panels` (kept for the task's next
/// blocks; repacked where they held other keys); `c`: rows `ldc` apart.
#[allow(clippy::too_many_arguments)]
pub(super) fn cols<T: Float>(
    seen: &[usize],
    k: usize,
    (a, a_rs): (&[T], usize),
    (bt, bt_rs, lo): (&[T], usize, usize),
    (c, ldc): (&mut [T], usize),
    panels: &mut KeyPanels,
) {
    let (n, w) = (seen.len(), width(seen));
    if n == 0 || w == 0 {
        return;
    }
    assert!(available::<T>() && ldc >= w);
    PRODUCTS.fetch_add(1, Ordering::Relaxed);
    fits(a.len(), n, k, a_rs);
    fits(bt.len(), lo + w, k, bt_rs);
    fits(c.len(), n, w, ldc);
    #[cfg(target_arch = "x86_64")]
    {
        let (a, c) = (a.as_ptr() as *const f32, c.as_mut_ptr() as *mut f32);
        let bt = bt.as_ptr() as *const f32;
        let _flush = super::denormal::flush_guard();
        let src = (bt as usize, bt_rs, k);
        if panels.src != src || lo < panels.base || lo > panels.packed {
            // other keys, or a gap after those packed: start again at `lo`
            // (a causal block past `TILES_WHOLE` keys tiles only its
            // diagonal, from its first row's key on)
            (panels.src, panels.base, panels.packed) = (src, lo, lo);
        }
        if !(lo - panels.base).is_multiple_of(16) {
            // keys from inside a panel: packed for this block alone
            // SAFETY: T is f32 (`available`), the bounds are checked above.
            return with_bufs((w.next_multiple_of(16) * k, 0), |bp, _| unsafe {
                pack_keys(k, w, bt.add(lo * bt_rs), bt_rs, bp);
                cols_f32(seen, k, (a, a_rs), (c, ldc), bp)
            });
        }
        // keys from the first panel not yet whole (packed again, whole
        // where it now has more keys) to the block's last
        let base = panels.base;
        let (from, to) = (base + (panels.packed - base) / 16 * 16, lo + w);
        let need = (to - base).next_multiple_of(16) * k;
        if panels.buf.len() * 16 < need {
            // (grown by doubling: a task's blocks ask for more keys each)
            let lines = (need / 16).max(2 * panels.buf.len());
            let mut grown = vec![Line([0.0; 16]); lines];
            grown[..panels.buf.len()].copy_from_slice(&panels.buf);
            panels.buf = grown;
        }
        let bp = panels.buf.as_mut_ptr() as *mut f32;
        // SAFETY: T is f32 (`available`), the bounds are checked above
        // (keys `..lo + w` lie in `bt`), the panels hold `need` floats
        // from key `base`.
        unsafe {
            if to > panels.packed {
                pack_keys(k, to - from, bt.add(from * bt_rs), bt_rs, bp.add((from - base) * k));
                panels.packed = to;
            }
            cols_f32(seen, k, (a, a_rs), (c, ldc), bp.add((lo - base) * k))
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pack_keys(k: usize, keys: usize, bt: *const f32, bt_rs: usize, bp: *mut f32) {
    // the keys' columns of Bᵀ, in panels of 16 (`k` steps each)
    unsafe { super::sgemm_pack::pack_b::<1>(k, keys, bt, 1, bt_rs as isize, bp) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn cols_f32(
    seen: &[usize],
    k: usize,
    (a, a_rs): (*const f32, usize),
    (c, ldc): (*mut f32, usize),
    bp: *const f32,
) {
    use super::sgemm::{kernel, ARows};
    let (n, w) = (seen.len(), seen[seen.len() - 1]);
    unsafe {
        for r0 in (0..n).step_by(MR_COLS) {
            let rows = MR_COLS.min(n - r0);
            let ar = ARows::InPlace(super::lockstep::from_fn(|i| a.add((r0 + i.min(rows - 1)) * a_rs)));
            for j0 in (0..seen[r0 + rows - 1]).step_by(16) {
                kernel::<MR_COLS, 1>(
                    k,
                    ar,
                    (bp.add(j0 * k), 16),
                    c.add(r0 * ldc + j0),
                    ldc,
                    rows,
                    16.min(w - j0),
                    false,
                );
            }
        }
    }
}

/// `c[r, ..n_out] (+)= Σ_{p < seen[r]} a[r, p] · b[p, ..]` (added where
/// `acc`), for a staircase `a` that is 0 past each row's keys (each 8-row
/// tile sums over the keys its last row sees). `a`: rows `a_rs` apart;
/// `b`: `seen`'s width of rows `b_rs` apart, `n_out` wide; `c`: rows `ldc`
/// apart (`c_len` elements from `c` writable).
///
/// # Safety
///
/// `c`'s `c_len` elements are writable, overlap neither operand, and no
/// other thread reads or writes the product's rows meanwhile.
pub(super) unsafe fn rows_k<T: Float>(
    seen: &[usize],
    (a, a_rs): (&[T], usize),
    (b, b_rs): (&[T], usize),
    n_out: usize,
    (c, c_len, ldc): (*mut T, usize, usize),
    acc: bool,
) {
    let (n, w) = (seen.len(), width(seen));
    if n == 0 || n_out == 0 {
        return;
    }
    assert!(available::<T>() && ldc >= n_out);
    fits(a.len(), n, w, a_rs);
    fits(b.len(), w, n_out, b_rs);
    fits(c_len, n, n_out, ldc);
    #[cfg(target_arch = "x86_64")]
    {
        let (a, b, c) = (a.as_ptr() as *const f32, b.as_ptr() as *const f32, c as *mut f32);
        let _flush = super::denormal::flush_guard();
        // SAFETY: T is f32 (`available`), the bounds are checked above,
        // the caller keeps `c` to itself.
        with_bufs((w * NR_K, 0), |bp, _| unsafe {
            rows_k_f32(seen, (a, a_rs), (b, b_rs), n_out, (c, ldc), acc, bp)
        })
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn rows_k_f32(
    seen: &[usize],
    (a, a_rs): (*const f32, usize),
    (b, b_rs): (*const f32, usize),
    n_out: usize,
    (c, ldc): (*mut f32, usize),
    acc: bool,
    bp: *mut f32,
) {
    use super::sgemm::{kernel, ARows};
    use super::sgemm_pack::pack_b;
    let (n, w) = (seen.len(), seen[seen.len() - 1]);
    unsafe {
        // whole panels of B read in place, a part-width right edge packed
        let whole = n_out / NR_K * NR_K;
        if whole < n_out && w > 0 {
            pack_b::<2>(w, n_out - whole, b.add(whole), b_rs as isize, 1, bp);
        }
        for r0 in (0..n).step_by(MR_K) {
            let rows = MR_K.min(n - r0);
            let kc = seen[r0 + rows - 1];
            let ar = ARows::InPlace(super::lockstep::from_fn(|i| a.add((r0 + i.min(rows - 1)) * a_rs)));
            for jr in (0..n_out).step_by(NR_K) {
                let panel = match jr < whole {
                    true => (b.add(jr), b_rs),
                    false => (bp as *const f32, NR_K),
                };
                // (kc = 0: the kernel stores zeros, or adds them)
                kernel::<MR_K, 2>(
                    kc,
                    ar,
                    panel,
                    c.add(r0 * ldc + jr),
                    ldc,
                    rows,
                    NR_K.min(n_out - jr),
                    acc,
                );
            }
        }
    }
}

/// `c[t, ..n_out] += Σ_{r: seen[r] > t} a[r, t] · b[r, ..]` for the keys
/// `t` below `seen`'s width, with `a` 0 past each row's keys (each 8-key
/// tile sums over the rows from the first that sees its first key): the
/// products that sum over a block's rows (`dV`, `dK`). `a`: rows `a_rs`
/// apart; `b`: `seen.len()` rows `b_rs` apart, `n_out` wide; `c`: rows
/// `ldc` apart (`c_len` elements from `c` writable).
///
/// # Safety
///
/// As [`rows_k`]'s.
pub(super) unsafe fn keys_t<T: Float>(
    seen: &[usize],
    (a, a_rs): (&[T], usize),
    (b, b_rs): (&[T], usize),
    n_out: usize,
    (c, c_len, ldc): (*mut T, usize, usize),
) {
    let (n, w) = (seen.len(), width(seen));
    if n == 0 || w == 0 || n_out == 0 {
        return;
    }
    assert!(available::<T>() && ldc >= n_out);
    fits(a.len(), n, w, a_rs);
    fits(b.len(), n, n_out, b_rs);
    fits(c_len, w, n_out, ldc);
    #[cfg(target_arch = "x86_64")]
    {
        let (a, b, c) = (a.as_ptr() as *const f32, b.as_ptr() as *const f32, c as *mut f32);
        let _flush = super::denormal::flush_guard();
        // SAFETY: T is f32 (`available`), the bounds are checked above,
        // the caller keeps `c` to itself.
        with_bufs((n * NR_K, n * MR_K), |bp, ap| unsafe {
            keys_t_f32(seen, (a, a_rs), (b, b_rs), n_out, (c, ldc), bp, ap)
        })
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn keys_t_f32(
    seen: &[usize],
    (a, a_rs): (*const f32, usize),
    (b, b_rs): (*const f32, usize),
    n_out: usize,
    (c, ldc): (*mut f32, usize),
    bp: *mut f32,
    ap: *mut f32,
) {
    use super::sgemm::{kernel, ARows};
    use super::sgemm_pack::pack_b;
    use std::arch::x86_64::{_mm512_mask_storeu_ps, _mm512_maskz_loadu_ps};
    let (n, w) = (seen.len(), seen[seen.len() - 1]);
    unsafe {
        let whole = n_out / NR_K * NR_K;
        if whole < n_out {
            pack_b::<2>(n, n_out - whole, b.add(whole), b_rs as isize, 1, bp);
        }
        for t0 in (0..w).step_by(MR_K) {
            let keys = MR_K.min(w - t0);
            // the first row that sees key t0 (one does: the last)
            let first = seen.partition_point(|&s| s <= t0);
            // Aᵀ's tile: for each row from `first`, its 8 keys from t0
            // side by side (0 past the last key)
            let (load, all) = (super::sgemm::mask(keys, 0), super::sgemm::mask(MR_K, 0));
            for r in first..n {
                let x = _mm512_maskz_loadu_ps(load, a.add(r * a_rs + t0));
                _mm512_mask_storeu_ps(ap.add((r - first) * MR_K), all, x);
            }
            for jr in (0..n_out).step_by(NR_K) {
                let panel = match jr < whole {
                    true => (b.add(first * b_rs + jr), b_rs),
                    false => (bp.add(first * NR_K) as *const f32, NR_K),
                };
                kernel::<MR_K, 2>(
                    n - first,
                    ARows::Packed(ap),
                    panel,
                    c.add(t0 * ldc + jr),
                    ldc,
                    keys,
                    NR_K.min(n_out - jr),
                    true,
                );
            }
        }
    }
}
