//! The unit tests of `src/tensor/layout.rs`, moved out of the library.

use gradtape::__internals::tensor::layout::*;
use gradtape::Error;

#[test]
fn element_counts_are_checked() {
    assert_eq!(checked_numel("t", &[]).unwrap(), 1);
    assert_eq!(checked_numel("t", &[2, 3, 4]).unwrap(), 24);
    assert_eq!(checked_numel("t", &[0, 1 << 62]).unwrap(), 0);
    assert_eq!(checked_numel("t", &[isize::MAX as usize]).unwrap(), isize::MAX as usize);
    for bad in [
        &[4, (1 << 62) + 1][..],
        &[1 << 32, 1 << 32],
        &[isize::MAX as usize + 1],
        &[0, 1 << 62, 1 << 62],
        &[usize::MAX, usize::MAX, 0],
    ] {
        assert_eq!(
            checked_numel("t", bad),
            Err(Error::ShapeOverflow {
                op: "t",
                shape: bad.to_vec()
            })
        );
    }
    assert!(broadcast_shapes("t", &[1 << 40, 1], &[1, 1 << 40]).is_err());
    assert!(broadcast_shapes("t", &[1 << 20, 1], &[1, 1 << 20]).is_ok());
}

#[test]
fn views_inside_and_outside_their_buffer() {
    let l = |shape: &[usize], strides: &[isize], offset| Layout {
        shape: small_copy(shape),
        strides: small_copy(strides),
        offset,
    };
    assert!(Layout::contiguous(&[2, 3]).fits_in(6));
    assert!(!Layout::contiguous(&[2, 3]).fits_in(5));
    // a reversed view: offsets 5, 4, ..., 0
    assert!(l(&[6], &[-1], 5).fits_in(6));
    assert!(l(&[], &[], 5).fits_in(6));
    assert!(!l(&[], &[], 6).fits_in(6));
    assert!(!l(&[6], &[-1], 4).fits_in(6));
    // broadcast, and empty views anywhere
    assert!(l(&[1 << 40, 3], &[0, 1], 0).fits_in(3));
    assert!(l(&[0, 5], &[5, 1], 100).fits_in(1));
    // a stride that only a length-1 dim carries is never applied
    assert!(l(&[1, 2], &[isize::MAX, 1], 0).fits_in(2));
    assert!(!l(&[2, 2], &[isize::MAX, 1], 0).fits_in(2));
    assert!(!l(&[4, (1 << 62) + 1], &[(1 << 62) + 1, 1], 0).fits_in(4));
}

/// The buffer offsets of a view's elements, in row-major order.
fn offsets(l: &Layout) -> Vec<isize> {
    let n = l.numel();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; l.shape.len()];
    for _ in 0..n {
        out.push(l.offset as isize + idx.iter().zip(&l.strides).map(|(&i, &s)| i as isize * s).sum::<isize>());
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < l.shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

fn layout(shape: &[usize], strides: &[isize], offset: usize) -> Layout {
    Layout {
        shape: small_copy(shape),
        strides: small_copy(strides),
        offset,
    }
}

#[test]
fn reshapes_that_strides_can_describe() {
    // the middle 256 columns of a [1024, 768] matrix, split into heads
    let cols = layout(&[1024, 256], &[768, 1], 256);
    let heads = cols.reshaped(&[8, 128, 4, 64]).unwrap();
    assert_eq!(&heads.strides[..], &[128 * 768, 768, 64, 1]);
    assert_eq!(heads.offset, 256);
    assert_eq!(offsets(&heads), offsets(&cols));
    // and back, and merged into rows of the batch
    assert_eq!(heads.reshaped(&[1024, 256]).unwrap(), cols);
    assert!(cols.reshaped(&[256 * 1024]).is_none());
    // a transposed matrix does not flatten, nor split across its columns
    let t = layout(&[3, 2], &[1, 3], 0);
    assert!(t.reshaped(&[6]).is_none());
    assert!(t.reshaped(&[2, 3]).is_none());
    // but it gains and loses dims of size 1 anywhere
    let t1 = t.reshaped(&[1, 3, 1, 2, 1]).unwrap();
    assert_eq!(offsets(&t1), offsets(&t));
    assert_eq!(t1.reshaped(&[3, 2]).unwrap().strides, t.strides);
    // a broadcast row splits and merges its broadcast dims
    let b = layout(&[4, 6], &[0, 1], 2);
    assert_eq!(offsets(&b.reshaped(&[2, 2, 3, 2]).unwrap()), offsets(&b));
    assert!(b.reshaped(&[24]).is_none());
    // a reversed axis
    let r = layout(&[4, 3], &[-3, 1], 9);
    assert_eq!(offsets(&r.reshaped(&[2, 2, 3]).unwrap()), offsets(&r));
    // a wrong element count
    assert!(cols.reshaped(&[1024, 255]).is_none());
    // empty views reshape to anything of no elements
    assert_eq!(
        layout(&[0, 3], &[3, 1], 0).reshaped(&[3, 0, 2]).unwrap().shape[..],
        [3, 0, 2]
    );
}

/// Random views (slices, transposes, broadcasts, reversals of a buffer)
/// reshaped to random shapes of their element count: where `reshaped`
/// gives a layout, it addresses the same elements in the same order; and
/// it gives one for every contiguous view and every split of one dim.
#[test]
fn reshaped_views_keep_the_elements_in_order() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut found = 0;
    for _ in 0..3000 {
        // a contiguous base of up to 4 dims
        let rank = 1 + rand(4);
        let base: Vec<usize> = (0..rank).map(|_| 1 + rand(5)).collect();
        let mut l = Layout::contiguous(&base);
        // slice each dim, maybe reverse it, maybe broadcast a size-1 dim
        for d in 0..rank {
            let len = 1 + rand(l.shape[d]);
            let start = rand(l.shape[d] - len + 1);
            l.offset += start * l.strides[d] as usize;
            l.shape[d] = len;
            if rand(4) == 0 {
                l.offset += (len - 1) * l.strides[d] as usize;
                l.strides[d] = -l.strides[d];
            }
            if len == 1 && rand(2) == 0 {
                l.shape[d] = 1 + rand(3);
                l.strides[d] = 0;
            }
        }
        // maybe swap two dims
        if rank > 1 && rand(2) == 0 {
            let (a, b) = (rand(rank), rand(rank));
            l.shape.swap(a, b);
            l.strides.swap(a, b);
        }
        // a random shape of the same count: its prime factors, grouped
        let mut n = l.numel();
        let mut factors = vec![];
        let mut p = 2;
        while n > 1 {
            while n.is_multiple_of(p) {
                factors.push(p);
                n /= p;
            }
            p += 1;
        }
        let mut shape = vec![];
        for f in factors {
            if shape.is_empty() || rand(2) == 0 {
                shape.push(f);
            } else {
                *shape.last_mut().unwrap() *= f;
            }
            if rand(5) == 0 {
                shape.push(1);
            }
        }
        let want = offsets(&l);
        if let Some(r) = l.reshaped(&shape) {
            found += 1;
            assert_eq!(&r.shape[..], &shape[..]);
            assert_eq!(offsets(&r), want, "{l:?} as {shape:?}: {r:?}");
        }
        if l.is_contiguous() {
            assert!(l.reshaped(&shape).is_some(), "{l:?} as {shape:?}");
        }
        // splitting one dim in two is always a view
        if let Some(d) = (0..l.shape.len()).find(|&d| l.shape[d].is_multiple_of(2)) {
            let mut split: Vec<usize> = l.shape.to_vec();
            split[d] /= 2;
            split.insert(d, 2);
            let r = l.reshaped(&split).expect("a split of one dim");
            assert_eq!(offsets(&r), want);
        }
    }
    assert!(found > 1000, "only {found} views reshaped");
}
