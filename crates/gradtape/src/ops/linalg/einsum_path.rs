//! The contraction order of a many-operand `einsum`.
//!
//! Contracting `n` operands pairwise can cost orders of magnitude more in
//! one order than in another (`A[10,1000] B[1000,10] C[10,1000]`: `(AB)C`
//! takes 2·10⁵ multiply-adds, `A(BC)` 10⁷ + 10⁵). The cost of one pairwise
//! step is the product of the sizes of the letters its two operands have
//! (a batched matmul `[b, m, k] × [b, k, n]` does `b·m·k·n`), where an
//! intermediate keeps only the letters that the output or an operand not
//! yet contracted still needs.
//!
//! Up to [`OPTIMAL_MAX`] operands the order is optimal over every
//! contraction tree: dynamic programming over subsets of operands (3ⁿ
//! splits, 59049 for ten). Beyond, it is greedy, as opt_einsum's "greedy":
//! while operands remain, contract the pair that shrinks the data most
//! (size of the product minus sizes of the pair), preferring pairs that
//! share a letter, then the cheaper step.

/// Up to this many operands the order is searched exhaustively.
pub const OPTIMAL_MAX: usize = 10;

/// The pairwise contraction order of an einsum and its cost; see
/// [`Tensor::einsum_path`](crate::Tensor::einsum_path).
///
/// ```
/// use gradtape::Tensor;
/// let p = Tensor::einsum_path("ij,jk,kl->il", &[&[1000, 10], &[10, 1000], &[1000, 10]])?;
/// assert_eq!(p.steps, vec![(1, 2), (0, 1)]); // B C first
/// assert_eq!(p.flops, 200_000);
/// assert_eq!(p.naive_flops, 100_000_000); // one loop over i, j, k, l
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EinsumPath {
    /// Each step contracts operands `i < j` of the current list (they leave
    /// it; their product is appended), as NumPy's `einsum_path` lists them.
    pub steps: Vec<(usize, usize)>,
    /// The multiply-adds of all steps.
    pub flops: u128,
    /// The multiply-adds of a single loop over every letter at once.
    pub naive_flops: u128,
}

/// Letters as a set over the spec's distinct letters (at most 52 named ones
/// plus the ellipsis dims, so a `u128` holds them all).
type Set = u128;

pub struct Problem {
    /// The letter set of each operand.
    terms: Vec<Set>,
    out: Set,
    /// The size of each letter index.
    sizes: Vec<u128>,
}

impl Problem {
    pub fn new(terms: &[Vec<char>], out: &[char], size: &dyn Fn(char) -> u128) -> Problem {
        let mut letters: Vec<char> = terms.iter().flatten().chain(out).copied().collect();
        letters.sort_unstable();
        letters.dedup();
        let set = |ls: &[char]| -> Set {
            ls.iter().fold(0, |acc, c| {
                acc | 1 << letters.iter().position(|x| x == c).expect("letter listed")
            })
        };
        Problem {
            terms: terms.iter().map(|t| set(t)).collect(),
            out: set(out),
            sizes: letters.iter().map(|&c| size(c)).collect(),
        }
    }

    /// The letters the product of the operands in `mask` keeps.
    fn letters(&self, mask: u64) -> Set {
        let (mut inside, mut outside) = (0, self.out);
        for (i, &t) in self.terms.iter().enumerate() {
            if mask >> i & 1 == 1 {
                inside |= t;
            } else {
                outside |= t;
            }
        }
        inside & outside
    }

    /// The product of the sizes of the letters in `s`.
    fn volume(&self, mut s: Set) -> u128 {
        let mut v = 1u128;
        while s != 0 {
            v = v.saturating_mul(self.sizes[s.trailing_zeros() as usize]);
            s &= s - 1;
        }
        v
    }
}

/// The order (NumPy's step convention) and cost of contracting operands
/// with letters `terms` into `out`, `size` giving each letter's size.
pub fn best_path(terms: &[Vec<char>], out: &[char], size: &dyn Fn(char) -> u128) -> (Vec<(usize, usize)>, u128) {
    let p = Problem::new(terms, out, size);
    let n = terms.len();
    if n < 2 {
        return (Vec::new(), 0);
    }
    if n <= OPTIMAL_MAX {
        optimal(&p)
    } else {
        greedy(&p)
    }
}

/// Dynamic programming over subsets: the cheapest tree for each subset.
fn optimal(p: &Problem) -> (Vec<(usize, usize)>, u128) {
    let n = p.terms.len();
    let full: u64 = (1 << n) - 1;
    let keep: Vec<Set> = (0..=full).map(|m| p.letters(m)).collect();
    // best[m] = (cost, first part of the best split; 0 for a leaf)
    let mut best: Vec<(u128, u64)> = vec![(u128::MAX, 0); (full + 1) as usize];
    for i in 0..n {
        best[1 << i] = (0, 0);
    }
    for m in 1..=full {
        if m.count_ones() < 2 {
            continue;
        }
        // every split {s, m - s} once: s holds m's lowest operand
        let low = m & m.wrapping_neg();
        let rest = m ^ low;
        let mut sub = rest;
        loop {
            let s = low | (rest & !sub);
            let t = m ^ s;
            if t != 0 {
                let step = p.volume(keep[s as usize] | keep[t as usize]);
                let c = best[s as usize]
                    .0
                    .saturating_add(best[t as usize].0)
                    .saturating_add(step);
                if c < best[m as usize].0 {
                    best[m as usize] = (c, s);
                }
            }
            if sub == 0 {
                break;
            }
            sub = (sub - 1) & rest;
        }
    }
    // the tree as steps: children first, then their pair
    let mut list: Vec<u64> = (0..n).map(|i| 1 << i).collect();
    let mut steps = Vec::new();
    fn emit(m: u64, best: &[(u128, u64)], list: &mut Vec<u64>, steps: &mut Vec<(usize, usize)>) {
        if m.count_ones() < 2 {
            return;
        }
        let s = best[m as usize].1;
        emit(s, best, list, steps);
        emit(m ^ s, best, list, steps);
        let i = list.iter().position(|&x| x == s).expect("part listed");
        let j = list.iter().position(|&x| x == m ^ s).expect("part listed");
        let (i, j) = (i.min(j), i.max(j));
        list.remove(j);
        list.remove(i);
        list.push(m);
        steps.push((i, j));
    }
    emit(full, &best, &mut list, &mut steps);
    (steps, best[full as usize].0)
}

/// Greedy pairing for many operands.
pub fn greedy(p: &Problem) -> (Vec<(usize, usize)>, u128) {
    let n = p.terms.len();
    // each operand of the current list: the operands it holds and its letters
    let mut list: Vec<(u64, Set)> = (0..n).map(|i| (1 << i, p.letters(1 << i))).collect();
    let mut steps = Vec::new();
    let mut flops = 0u128;
    while list.len() > 1 {
        // score: (shares no letter, product size - pair sizes, step cost)
        let mut pick: Option<((bool, i128, u128), usize, usize)> = None;
        for i in 0..list.len() {
            for j in i + 1..list.len() {
                let (a, b) = (list[i], list[j]);
                let kept = p.letters(a.0 | b.0);
                let size = |s: Set| p.volume(s).min(i128::MAX as u128) as i128;
                let score = (
                    a.1 & b.1 == 0,
                    size(kept).saturating_sub(size(a.1)).saturating_sub(size(b.1)),
                    p.volume(a.1 | b.1),
                );
                if pick.as_ref().is_none_or(|(s, _, _)| score < *s) {
                    pick = Some((score, i, j));
                }
            }
        }
        let ((_, _, cost), i, j) = pick.expect("two operands at least");
        let (a, b) = (list[i], list[j]);
        list.remove(j);
        list.remove(i);
        let m = a.0 | b.0;
        list.push((m, p.letters(m)));
        steps.push((i, j));
        flops = flops.saturating_add(cost);
    }
    (steps, flops)
}
