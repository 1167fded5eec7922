//! How the products of a block of query rows of
//! [`attention_gemm`](super::attention_gemm) are cut: into pieces for the
//! product kernels, and the keys that run on register tiles
//! ([`causal_tiles`](super::causal_tiles)).
//!
//! A block whose rows all see the same keys (no causal mask, or a causal
//! block whose first row already sees them all) is one piece, or, in `f32`
//! with AVX-512 and up to [`TILES_WHOLE`] keys, one set of tiles with a
//! flat staircase: the tiles read the queries, values and `dO` where they
//! lie and pack only `Kᵀ`, `Vᵀ` and, for `dV` and `dK`, 8 keys' columns at
//! a time, where the blocked kernel packs its operands per product and
//! costs more to start (per call, one Zen 4 core, `f32`, `[batch·heads,
//! tq, tk]`: `[32·4, 64, 64]` heads of 32 backward 3.2-3.4 to 2.7-3.3 ms,
//! `[8·12, 128, 128]` heads of 64 13.6-14.4 to 12.8-13.3, `[8·4, 128,
//! 128]` heads of 128 8.8-9.1 to 8.3-8.4; forward unchanged within the
//! noise; the same bits).

use super::attention::Dims;
use super::attention_gemm::ROWS;
use crate::tensor::Float;

/// Query rows per sub-block of a block whose rows see different numbers
/// of keys (causal): each sub-block's products run over only the keys its
/// last row sees (see [`split`]).
/// (Sub-blocks of twice as many rows where the block goes to the general
/// product kernel, whose calls cost more to start.)
const SUB: usize = 16;

/// Neighbouring sub-blocks whose keys end at or before this many are
/// merged into one product (the general kernel's path): a product that
/// narrow costs more to start than its hidden scores save. (16, not 32,
/// since the `f32` products all run on `sgemm`: the first block's 32 rows
/// against 32 keys, then 32 against 64, rather than 64 against 64. Per
/// call on one Zen 4 core, causal, `[batch·heads, time, head]`: `[64, 64,
/// 32]` forward 0.74-0.79 to 0.66-0.70 ms, backward 1.21-1.50 to
/// 1.15-1.19; `[32, 128, 64]` forward 1.47-1.51 to 1.41-1.47; `[8, 512,
/// 64]` and `[4, 1024, 64]` unchanged within the noise.)
const WIDE_MIN: usize = 16;

/// A piece of a block's products: rows `r0..r1` of the block against keys
/// `lo..hi`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Piece {
    pub r0: usize,
    pub r1: usize,
    pub lo: usize,
    pub hi: usize,
}

pub(super) type Pieces = smallvec::SmallVec<[Piece; ROWS / SUB]>;

/// How the products of the block of rows `i0..i0 + n` (whose last row sees
/// `nk` keys) are cut. Without a causal mask, or where every row of the
/// block sees all `nk` keys, the tiles take it whole with a flat staircase
/// where they run (`f32`, not the small-product kernels) and `nk` is at
/// most [`TILES_WHOLE`], else one piece covers it all. Else, where
/// [`causal_tiles`](super::causal_tiles) runs (`f32`, not the small-product kernels), it takes
/// the keys from `lo` ([`Tiles`]), and one piece those before. Else the
/// rows are cut into sub-blocks, and:
///
/// - the stairs: for each sub-block whose last row sees `hi` keys (the
///   previous one's `lo`), the rows from it to the block's end against
///   keys `lo..hi`; together they cover exactly the keys each sub-block
///   sees, the sums over keys split between them;
/// - the rows (the general kernel): each sub-block against keys `0..hi`,
///   neighbours merged while narrow (see [`WIDE_MIN`]), fewer and larger
///   products.
///
/// Entries a piece leaves unwritten lie past the keys their row sees
/// (hidden: probability 0, written as 0 where a later product reads them).
pub(super) struct Split {
    /// For the products that write per query row (scores, output, dP, dQ):
    /// the stairs for the small-product kernels, the rows for the general.
    pub prods: Pieces,
    /// For the products that sum over query rows (dV, dK): the stairs.
    pub accs: Pieces,
    /// Keys from which the products run on [`causal_tiles`](super::causal_tiles) (`f32` with
    /// AVX-512) instead: the pieces cover those before.
    pub tiles: Option<Tiles>,
}

/// The keys `lo..` of a block that [`causal_tiles`](super::causal_tiles) multiplies:
/// row `r` sees the first `seen[r]` of them.
pub(super) struct Tiles {
    pub lo: usize,
    pub seen: [usize; ROWS],
}

/// Key lengths up to which a block runs on [`causal_tiles`](super::causal_tiles) whole; past
/// it, only a causal block's diagonal does (a flat block none) (the keys before it on the blocked
/// kernel, whose slices of the shared dimension keep long sums in the
/// caches).
pub(super) const TILES_WHOLE: usize = 256;

#[inline(always)]
pub(super) fn split<T: Float>(dims: &Dims, i0: usize, n: usize, nk: usize, small: bool) -> Split {
    let whole = Piece {
        r0: 0,
        r1: n,
        lo: 0,
        hi: nk,
    };
    let tiles = !small && super::causal_tiles::available::<T>();
    if n == 0 || dims.keys(i0) == nk {
        if n > 0 && tiles && nk <= TILES_WHOLE {
            // every row sees all nk keys: a flat staircase
            return Split {
                prods: Pieces::new(),
                accs: Pieces::new(),
                tiles: Some(Tiles {
                    lo: 0,
                    seen: [nk; ROWS],
                }),
            };
        }
        let p: Pieces = smallvec::smallvec![whole];
        return Split {
            prods: p.clone(),
            accs: p,
            tiles: None,
        };
    }
    if tiles {
        // (causal: the first row sees i0 + 1 keys)
        let lo = if nk <= TILES_WHOLE { 0 } else { i0 };
        let mut seen = [0; ROWS];
        for (r, s) in seen[..n].iter_mut().enumerate() {
            *s = dims.keys(i0 + r) - lo;
        }
        let p: Pieces = match lo {
            0 => Pieces::new(),
            _ => smallvec::smallvec![Piece { hi: lo, ..whole }],
        };
        return Split {
            prods: p.clone(),
            accs: p,
            tiles: Some(Tiles { lo, seen }),
        };
    }
    let sub = if small { SUB } else { 2 * SUB };
    let (mut stairs, mut rows) = (Pieces::new(), Pieces::new());
    let mut r0 = 0;
    let mut lo = 0;
    while r0 < n {
        let r1 = (r0 + sub).min(n);
        let nkj = dims.keys(i0 + r1 - 1);
        if stairs.last().is_none_or(|p| p.hi != nkj) {
            stairs.push(Piece { r0, r1: n, lo, hi: nkj });
        }
        match rows.last_mut() {
            Some(p) if p.hi == nkj || p.hi <= WIDE_MIN => {
                p.r1 = r1;
                p.hi = nkj;
            }
            _ => rows.push(Piece { r0, r1, lo: 0, hi: nkj }),
        }
        lo = nkj;
        r0 = r1;
    }
    Split {
        prods: if small { stairs.clone() } else { rows },
        accs: stairs,
        tiles: None,
    }
}
