//! The unit tests of `src/tensor/alloc.rs`, moved out of the library.

use gradtape::__internals::tensor::alloc::*;
use gradtape::Error;

#[test]
fn impossible_sizes_are_errors() {
    let e = try_vec::<f64>("t", usize::MAX / 4).unwrap_err();
    assert_eq!(
        e,
        Error::OutOfMemory {
            op: "t",
            bytes: (usize::MAX / 4) as u128 * 8
        }
    );
    assert!(try_buf::<f32>("t", isize::MAX as usize).is_err());
    assert!(try_filled("t", 1 << 62, 0u32).is_err());
    assert_eq!(try_collect("t", 0..3).unwrap(), vec![0, 1, 2]);
    assert_eq!(try_buf::<f32>("t", 10).unwrap().capacity(), 10);
}

#[test]
fn huge_range_is_the_aligned_interior() {
    const H: usize = 2 << 20;
    // aligned both ends: all of it
    assert_eq!(huge_range(4 * H, 3 * H), Some((4 * H, 3 * H)));
    // unaligned start and end: the whole huge pages inside
    assert_eq!(huge_range(4 * H + 16, 3 * H), Some((5 * H, 2 * H)));
    assert_eq!(huge_range(4 * H - 16, H + 16), Some((4 * H, H)));
    // no whole huge page inside
    assert_eq!(huge_range(4 * H + 16, 2 * H - 32), None);
    assert_eq!(huge_range(4 * H + 16, H), None);
    assert_eq!(huge_range(4 * H, H - 1), None);
    assert_eq!(huge_range(4 * H, 0), None);
    // near the top of the address space: no overflow
    assert_eq!(huge_range(usize::MAX - 100, 50), None);
    assert_eq!(huge_range(usize::MAX - H, 2 * H), None);
}

/// The `VmFlags` line of the mapping of this process that holds `addr`.
#[cfg(target_os = "linux")]
fn vm_flags(addr: usize) -> Option<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_whitespace().next().and_then(|r| r.split_once('-'));
        if let Some((lo, hi)) =
            range.and_then(|(l, h)| Some((usize::from_str_radix(l, 16).ok()?, usize::from_str_radix(h, 16).ok()?)))
        {
            inside = (lo..hi).contains(&addr);
        } else if inside && line.starts_with("VmFlags:") {
            return Some(line.to_string());
        }
    }
    None
}

#[test]
#[cfg(target_os = "linux")]
fn large_new_buffers_ask_for_huge_pages() {
    // (where the kernel has transparent huge pages at all)
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.is_empty() || thp.contains("[never]") {
        eprintln!("no transparent huge pages here: skipped");
        return;
    }
    // (a size no other test frees, so that the buffer is new, not cached)
    let n = (5 << 20) + 7;
    let b = try_buf::<f32>("t", n).unwrap();
    let (first, len) = huge_range(b.as_ptr() as usize, b.capacity() * 4).expect("20 MiB hold whole huge pages");
    assert!(len >= 8 << 20);
    let hg = |addr| {
        vm_flags(addr)
            .expect("the buffer is mapped")
            .split_whitespace()
            .any(|f| f == "hg")
    };
    assert!(hg(first) && hg(first + len - 1));
    // (the flag is the advice's: a buffer allocated without it has none;
    // 40 MiB, past glibc's largest mmap threshold, a mapping of its own)
    let plain = vec![0.0f32; 10 << 20];
    let (first, len) = huge_range(plain.as_ptr() as usize, 40 << 20).unwrap();
    assert!(!hg(first) && !hg(first + len - 1));
}
