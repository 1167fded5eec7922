//! The packing of [`super::sgemm`]'s operands into the kernel's panels,
//! and the fetching of the next block of `A` into L2 ahead of its packing
//! (see that module's docs for where each is used).

use std::arch::x86_64::*;

use super::lockstep::{self, zip};
use super::sgemm::{mask, View};

/// Steps of k ahead that a column-major `A`'s packing fetches into L2.
const PF: usize = 16;
/// Steps of k of a column-major `A` packed together, panel by panel.
const PB: usize = 8;

/// Fetches into L2 part `part` of `parts` of the `mc×kc` block of a
/// row-major `A` at (`i0`, `p0`), its rows' lines. (A column-major `A`'s
/// packing fetches its own steps ahead, `PF`; fetched a block ahead
/// besides, the weight gradients' products were 1-3 % slower.)
#[inline(always)]
pub(super) unsafe fn prefetch_part(a: View, i0: usize, p0: usize, mc: usize, kc: usize, part: usize, parts: usize) {
    unsafe {
        let per = mc.div_ceil(parts);
        let base = a.at(i0, p0);
        for i in (part * per)..((part + 1) * per).min(mc) {
            let row = base.wrapping_offset(i as isize * a.rs);
            // (every line of the row's `kc` floats, the last included)
            for l in (0..kc + 15).step_by(16) {
                // (a prefetch never faults)
                _mm_prefetch::<_MM_HINT_T1>(row.wrapping_add(l.min(kc - 1)) as *const i8);
            }
        }
    }
}

/// Fetches into L2 part `part` of `parts` of the `mc×kc` block of a
/// column-major `A` at (`i0`, `p0`), read where it lies by the kernel: its
/// steps' lines (`mc` floats side by side each).
#[inline(always)]
pub(super) unsafe fn prefetch_steps(a: View, i0: usize, p0: usize, mc: usize, kc: usize, part: usize, parts: usize) {
    unsafe {
        let per = kc.div_ceil(parts);
        for p in (part * per)..((part + 1) * per).min(kc) {
            let step = a.at(i0, p0 + p);
            // (every line of the step's `mc` floats, the last included)
            for l in (0..mc + 15).step_by(16) {
                // (a prefetch never faults)
                _mm_prefetch::<_MM_HINT_T1>(step.wrapping_add(l.min(mc - 1)) as *const i8);
            }
        }
    }
}

/// Packs `mc×kc` of `A` into `MR`-row panels: panel `q` holds, for each
/// `p`, rows `q*MR..q*MR+MR` of column `p` (zero past `mc`).
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pack_a<const MR: usize>(mc: usize, kc: usize, a: *const f32, rs: isize, cs: isize, dst: *mut f32) {
    unsafe {
        if rs == 1 && MR <= 16 {
            // a column-major A (the `Xᵀ` of a weight gradient `Xᵀ·dY`): `PB`
            // steps of k at a time, the block's panels one after the other
            // within them, so that each column of A (a row of X, `mc`
            // floats side by side) is read whole, line after line, and
            // each panel's part is written whole before the next panel's.
            // A step at a time over all the panels, the panels' current
            // lines (`MR*kc` floats apart: a multiple of 4 KiB) and the
            // columns' (a page apart for X 1024 wide) all fell in the same
            // sets of the L1 cache, evicting each other (packing `[1024,
            // 1024]ᵀ` in blocks of 96 by 256: 0.44 ms against 0.39; perf
            // put the time on the loads). The columns `PF` steps ahead are
            // fetched into L2, whose sets hold them
            let (panels, all) = (mc.div_ceil(MR), mask(MR, 0));
            let mut p0 = 0;
            while p0 < kc {
                let pn = PB.min(kc - p0);
                for p in p0..p0 + pn {
                    let ahead = a.wrapping_offset((p + PF) as isize * cs);
                    for l in (0..mc).step_by(16) {
                        // (a prefetch never faults; past the slice too)
                        _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(l) as *const i8);
                    }
                }
                for q in 0..panels {
                    let mk = mask(MR.min(mc - q * MR), 0);
                    let d = dst.add(q * MR * kc);
                    for p in p0..p0 + pn {
                        let x = _mm512_maskz_loadu_ps(mk, a.offset(p as isize * cs).add(q * MR));
                        _mm512_mask_storeu_ps(d.add(p * MR), all, x);
                    }
                }
                p0 += pn;
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
