//! Independent reference shape rules for the never-panic tests
//! (`robust_*.rs`): what an op's output shape must be, or `None` where the
//! op must fail. Written from NumPy's rules, not from the library's code.
#![allow(dead_code)]

/// NumPy broadcasting of two shapes, or None if they are incompatible.
pub fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
        let db = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

/// The normalised axes, or None if one is out of range or repeated.
pub fn norm_axes(axes: &[isize], rank: usize) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for &a in axes {
        let n = if a < 0 { a + rank as isize } else { a };
        if n < 0 || n >= rank as isize || out.contains(&(n as usize)) {
            return None;
        }
        out.push(n as usize);
    }
    Some(out)
}

/// The shape after reducing `axes` (kept as 1 with `keep`).
pub fn reduced(shape: &[usize], axes: &[usize], keep: bool) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, &d) in shape.iter().enumerate() {
        if axes.contains(&i) {
            if keep {
                out.push(1);
            }
        } else {
            out.push(d);
        }
    }
    out
}
