//! `einsum` over any number of operands, by views, sums and batched
//! matmuls.
//!
//! Each operand first loses its repeated letters (a diagonal view:
//! `"ii->i"`) and the letters that appear nowhere else (summed out). The
//! operands are then contracted two at a time, in the order that
//! `einsum_path.rs` finds cheapest: each pair is permuted and reshaped to
//! `[batch, free, contracted]` and `[batch, contracted, free]` and
//! multiplied with one matmul (where the second operand's free letters
//! come before its contracted ones and the first operand's free part is
//! the smaller, those letters join the batch instead, the first operand
//! broadcast along them, so that the second is read in place rather than
//! permuted into a copy: `leading_free`), and the result takes the pair's
//! place. The last result is permuted into the output order. Everything is made of
//! differentiable ops (each traced as itself), so gradients of every order,
//! forward mode and tracing follow without a rule of einsum's own.

use super::einsum_path::{best_path, EinsumPath};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// One operand: the tensor and the letter of each of its dims.
struct Term {
    t: Tensor,
    letters: Vec<char>,
}

fn bad(spec: &str, msg: impl std::fmt::Display) -> Error {
    Error::invalid("einsum", format!("spec {spec:?}: {msg}"))
}

impl Term {
    /// Takes the diagonal of every repeated letter.
    fn diagonals(mut self, spec: &str) -> Result<Term> {
        loop {
            let l = &self.letters;
            let Some((p, q)) = (0..l.len()).find_map(|p| (p + 1..l.len()).find(|&q| l[q] == l[p]).map(|q| (p, q)))
            else {
                return Ok(self);
            };
            let s = self.t.shape();
            if s[p] != s[q] {
                return Err(bad(
                    spec,
                    format!("letter {:?} has sizes {} and {} in shape {s:?}", l[p], s[p], s[q]),
                ));
            }
            let rest: Vec<usize> = (0..l.len()).filter(|&i| i != p && i != q).collect();
            let perm: Vec<usize> = rest.iter().copied().chain([p, q]).collect();
            let mut letters: Vec<char> = rest.iter().map(|&i| l[i]).collect();
            letters.push(l[p]);
            self = Term {
                t: self.t.permute(&perm)?.diag_part()?,
                letters,
            };
        }
    }

    /// Sums out the letters not in `keep`.
    fn sum_out(self, keep: &[char]) -> Result<Term> {
        let axes: Vec<isize> = (0..self.letters.len())
            .filter(|&i| !keep.contains(&self.letters[i]))
            .map(|i| i as isize)
            .collect();
        if axes.is_empty() {
            return Ok(self);
        }
        let letters = self.letters.iter().copied().filter(|c| keep.contains(c)).collect();
        Ok(Term {
            t: self.t.sum(&axes, false)?,
            letters,
        })
    }

    fn size(&self, c: char) -> usize {
        let i = self.letters.iter().position(|&x| x == c).expect("letter present");
        self.t.shape()[i]
    }

    /// Permutes to the order of `order` (which lists exactly this term's letters).
    fn permuted(&self, order: &[char]) -> Result<Tensor> {
        let perm: Vec<usize> = order
            .iter()
            .map(|c| self.letters.iter().position(|x| x == c).expect("letter present"))
            .collect();
        self.t.permute(&perm)
    }
}

/// A parsed spec: the letters of each input term (ellipsis dims as private
/// letters), of the output, and the size of every letter (the largest,
/// where ellipsis dims broadcast).
pub(super) struct Spec {
    pub(super) terms: Vec<Vec<char>>,
    pub(super) out: Vec<char>,
    ell: Vec<char>,
    sizes: Vec<(char, usize)>,
}

impl Spec {
    /// The size of letter `c` (present in some term).
    pub(super) fn size(&self, c: char) -> usize {
        self.sizes.iter().find(|(x, _)| *x == c).map_or(0, |&(_, n)| n)
    }

    /// Parses `spec` for operands of `shapes`, checking every letter's sizes.
    pub(super) fn parse(spec: &str, shapes: &[&[usize]]) -> Result<Spec> {
        if shapes.is_empty() {
            return Err(bad(spec, "needs at least one operand"));
        }
        let compact: String = spec.chars().filter(|c| !c.is_whitespace()).collect();
        let (lhs, out) = match compact.split_once("->") {
            Some((l, o)) => (l.to_string(), Some(o.to_string())),
            None => (compact.clone(), None),
        };
        let inputs: Vec<&str> = lhs.split(',').collect();
        if inputs.len() != shapes.len() {
            return Err(bad(
                spec,
                format!("has {} input terms for {} operands", inputs.len(), shapes.len()),
            ));
        }
        let valid = |s: &str| s.chars().all(|c| c.is_ascii_alphabetic());
        // each term: (letters before "...", letters after, whether it has "...")
        let split = |s: &str| -> Result<(String, String, bool)> {
            if s.matches("...").count() > 1 {
                return Err(bad(spec, format!("term {s:?} has more than one ellipsis")));
            }
            let (pre, post, has) = match s.split_once("...") {
                Some((a, b)) => (a, b, true),
                None => (s, "", false),
            };
            if !valid(pre) || !valid(post) {
                return Err(bad(spec, "letters must be ASCII a-z or A-Z (and one '...' per term)"));
            }
            Ok((pre.to_string(), post.to_string(), has))
        };
        let parsed: Vec<(String, String, bool)> = inputs.iter().map(|s| split(s)).collect::<Result<_>>()?;
        let out_parsed = out.as_deref().map(split).transpose()?;
        // how many dims each ellipsis covers
        let mut ell_dims = Vec::new();
        for ((pre, post, has), s) in parsed.iter().zip(shapes) {
            let named = pre.len() + post.len();
            if (*has && named > s.len()) || (!*has && named != s.len()) {
                return Err(bad(
                    spec,
                    format!(
                        "term \"{pre}{}{post}\" has {named} letters for shape {s:?}",
                        if *has { "..." } else { "" },
                    ),
                ));
            }
            ell_dims.push(s.len() - named);
        }
        let e = ell_dims.iter().copied().max().unwrap_or(0);
        // private letters for the ellipsis dims, right-aligned across operands
        let ell: Vec<char> = (0..e)
            .map(|j| char::from_u32(0xE000 + j as u32).expect("private-use char"))
            .collect();
        let terms: Vec<Vec<char>> = parsed
            .iter()
            .zip(&ell_dims)
            .map(|((pre, post, _), &k)| {
                pre.chars()
                    .chain(ell[e - k..].iter().copied())
                    .chain(post.chars())
                    .collect()
            })
            .collect();
        let all: Vec<char> = terms.iter().flatten().copied().collect();
        let out: Vec<char> = match out_parsed {
            Some((pre, post, has)) => {
                let mid: &[char] = if has { &ell } else { &[] };
                pre.chars().chain(mid.iter().copied()).chain(post.chars()).collect()
            }
            None => {
                let mut once: Vec<char> = all
                    .iter()
                    .copied()
                    .filter(|&c| !ell.contains(&c) && all.iter().filter(|&&x| x == c).count() == 1)
                    .collect();
                once.sort_unstable();
                ell.iter().copied().chain(once).collect()
            }
        };
        for (i, c) in out.iter().enumerate() {
            if out[..i].contains(c) {
                return Err(bad(spec, format!("output letter {c:?} is repeated")));
            }
            if !all.contains(c) {
                return Err(bad(spec, format!("output letter {c:?} is in no input")));
            }
        }
        // sizes: a letter repeated in one term must agree there; across
        // terms named letters must agree and ellipsis dims broadcast 1 to n
        let mut sizes: Vec<(char, usize, usize)> = Vec::new(); // (letter, size, first term)
        for (ti, (letters, shape)) in terms.iter().zip(shapes).enumerate() {
            for (p, (&c, &n)) in letters.iter().zip(shape.iter()).enumerate() {
                if let Some(q) = letters[..p].iter().position(|&x| x == c)
                    && shape[q] != n
                {
                    return Err(bad(
                        spec,
                        format!("letter {c:?} has sizes {} and {n} in shape {shape:?}", shape[q]),
                    ));
                }
                match sizes.iter_mut().find(|(x, _, _)| *x == c) {
                    None => sizes.push((c, n, ti)),
                    Some(entry) if entry.1 == n => {}
                    Some(entry) if ell.contains(&c) && (entry.1 == 1 || n == 1) => entry.1 = entry.1.max(n),
                    Some(entry) => {
                        // which letter, in which operands: "incompatible
                        // shapes" alone left the user to find it
                        let what = if ell.contains(&c) {
                            "a dim of the ellipsis".to_string()
                        } else {
                            format!("letter {c:?}")
                        };
                        return Err(bad(
                            spec,
                            format!(
                                "{what} is {} in operand {} (shape {:?}) but {n} in operand {ti} (shape {shape:?})",
                                entry.1, entry.2, shapes[entry.2]
                            ),
                        ));
                    }
                }
            }
        }
        Ok(Spec {
            terms,
            out,
            ell,
            sizes: sizes.into_iter().map(|(c, n, _)| (c, n)).collect(),
        })
    }
}

/// Contracts two terms into one that keeps the letters of `keep` (those
/// needed later: the output's and the other operands') that they have.
fn contract(a: Term, b: Term, keep: &[char], ell: &[char]) -> Result<Term> {
    // letters kept by each operand: those needed later or in the other operand
    let keep_a: Vec<char> = keep.iter().chain(&b.letters).copied().collect();
    let keep_b: Vec<char> = keep.iter().chain(&a.letters).copied().collect();
    let (mut a, mut b) = (a.sum_out(&keep_a)?, b.sum_out(&keep_b)?);
    for c in a.letters.clone() {
        if !b.letters.contains(&c) || a.size(c) == b.size(c) {
            continue;
        }
        // ellipsis dims broadcast (size 1 against n); named letters were checked
        if ell.contains(&c) && (a.size(c) == 1 || b.size(c) == 1) {
            let n = a.size(c).max(b.size(c));
            for t in [&mut a, &mut b] {
                let i = t.letters.iter().position(|&x| x == c).expect("letter present");
                let mut shape = t.t.shape().to_vec();
                shape[i] = n;
                t.t = t.t.broadcast_to(&shape)?;
            }
            continue;
        }
        return Err(Error::ShapeMismatch {
            op: "einsum",
            lhs: a.t.shape().to_vec(),
            rhs: b.t.shape().to_vec(),
        });
    }
    let in_b = |c: &char| b.letters.contains(c);
    let in_a = |c: &char| a.letters.contains(c);
    let batch: Vec<char> = a
        .letters
        .iter()
        .copied()
        .filter(|c| in_b(c) && keep.contains(c))
        .collect();
    let contr: Vec<char> = a
        .letters
        .iter()
        .copied()
        .filter(|c| in_b(c) && !keep.contains(c))
        .collect();
    let free_a: Vec<char> = a.letters.iter().copied().filter(|c| !in_b(c)).collect();
    let mut free_b: Vec<char> = b.letters.iter().copied().filter(|c| !in_a(c)).collect();
    let prod = |t: &Term, cs: &[char]| cs.iter().map(|&c| t.size(c)).product::<usize>();
    let (mut a, mut batch) = (a, batch);
    if let Some(lead) = leading_free(&b.letters, &batch, &contr, &free_b)
        && prod(&a, &free_a) < prod(&b, &free_b[lead..])
    {
        // `b`'s free letters before its contracted ones would make its
        // permutation a copy of `b`: they become batch letters instead, `a`
        // broadcast along them (a copy of the smaller operand)
        let promoted: Vec<char> = free_b.drain(..lead).collect();
        let mut shape = a.t.shape().to_vec();
        shape.extend(promoted.iter().map(|_| 1));
        let mut wide = shape.clone();
        for (i, &c) in promoted.iter().enumerate() {
            wide[a.letters.len() + i] = b.size(c);
        }
        a.t = a.t.reshape(&shape)?.broadcast_to(&wide)?;
        a.letters.extend(&promoted);
        batch.extend(promoted);
    }
    let (nb, m, k, n) = (prod(&a, &batch), prod(&a, &free_a), prod(&a, &contr), prod(&b, &free_b));
    let order_a: Vec<char> = batch.iter().chain(&free_a).chain(&contr).copied().collect();
    let order_b: Vec<char> = batch.iter().chain(&contr).chain(&free_b).copied().collect();
    let a2 = a.permuted(&order_a)?.reshape(&[nb, m, k])?;
    let b2 = b.permuted(&order_b)?.reshape(&[nb, k, n])?;
    let mut letters: Vec<char> = batch.clone();
    letters.extend(&free_a);
    letters.extend(&free_b);
    let shape: Vec<usize> = batch
        .iter()
        .chain(&free_a)
        .map(|&c| a.size(c))
        .chain(free_b.iter().map(|&c| b.size(c)))
        .collect();
    Ok(Term {
        t: a2.matmul(&b2).map_err(|e| e.for_op("einsum"))?.reshape(&shape)?,
        letters,
    })
}

/// How many of `free` (the free letters of an operand whose letters are
/// `letters`) to take into the batch so that the operand is already in
/// the `[batch, contracted, free]` order its product reads: `Some(k)`, at
/// least one, when `letters` are `batch`, then `free[..k]`, then
/// `contr`, then `free[k..]`; `None` otherwise (also when the operand is
/// in that order already). A mixture of experts' `"nd,nkdh->nkh"` (token
/// vectors by each token's gathered expert matrices) had permuted the
/// large `[n, k, d, h]` operand to `[n, d, k, h]`, a copy of it each way.
fn leading_free(letters: &[char], batch: &[char], contr: &[char], free: &[char]) -> Option<usize> {
    let k = free
        .iter()
        .zip(&letters[batch.len().min(letters.len())..])
        .take_while(|(f, l)| f == l)
        .count();
    let order: Vec<char> = batch
        .iter()
        .chain(&free[..k])
        .chain(contr)
        .chain(&free[k..])
        .copied()
        .collect();
    (k > 0 && !contr.is_empty() && letters.starts_with(batch) && order == letters).then_some(k)
}

/// The distinct letters of a term, in order.
fn distinct(letters: &[char]) -> Vec<char> {
    let mut d: Vec<char> = Vec::new();
    for &c in letters {
        if !d.contains(&c) {
            d.push(c);
        }
    }
    d
}

impl Tensor {
    /// Einstein summation over any number of operands, e.g. `"ij,jk->ik"`
    /// (matmul), `"bij,bjk->bik"` (batched), `"i,j->ij"` (outer),
    /// `"ij,jk,kl->il"` (a chain), `"ij->ji"`, `"ii->"` (trace), `"ii->i"`
    /// (diagonal), `"ij->"`. Without `->` the output is the letters used
    /// once, in alphabetical order, after any ellipsis dims (NumPy's implicit
    /// mode). Letters are ASCII `a-z`/`A-Z`; a letter shared by several
    /// operands must have the same size in each. One `...` per term stands
    /// for the leading/middle dims not named (right-aligned across operands,
    /// broadcasting size-1 dims, as NumPy): `"...ij,...jk->...ik"` is
    /// batched matmul. Numeric operands of one dtype (integers wrap, as
    /// TensorFlow's).
    ///
    /// Three or more operands are contracted two at a time in the order of
    /// least work, the one [`Tensor::einsum_path`] reports (optimal up to
    /// ten operands, greedy beyond).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let b = Tensor::from_vec(vec![5.0f64, 6.0, 7.0, 8.0], &[2, 2])?;
    /// let c = Tensor::einsum("ij,jk->ik", &[&a, &b])?;
    /// assert_eq!(c.to_vec::<f64>()?, a.matmul(&b)?.to_vec::<f64>()?);
    /// assert_eq!(Tensor::einsum("ii->", &[&a])?.to_scalar::<f64>()?, 5.0);
    /// let abc = Tensor::einsum("ij,jk,kl->il", &[&a, &b, &a])?;
    /// assert_eq!(abc.to_vec::<f64>()?, a.matmul(&b)?.matmul(&a)?.to_vec::<f64>()?);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn einsum(spec: &str, operands: &[&Tensor]) -> Result<Tensor> {
        let shapes: Vec<&[usize]> = operands.iter().map(|t| t.shape()).collect();
        let sp = Spec::parse(spec, &shapes)?;
        for t in operands {
            crate::ops::expect_numeric("einsum", t)?;
            if t.dtype() != operands[0].dtype() {
                return Err(Error::DTypeMismatch {
                    op: "einsum",
                    lhs: operands[0].dtype(),
                    rhs: t.dtype(),
                });
            }
        }
        let mut terms: Vec<Term> = operands
            .iter()
            .zip(&sp.terms)
            .map(|(t, l)| {
                Term {
                    t: (*t).clone(),
                    letters: l.clone(),
                }
                .diagonals(spec)
            })
            .collect::<Result<_>>()?;
        let reduced: Vec<Vec<char>> = sp.terms.iter().map(|l| distinct(l)).collect();
        let (steps, _) = best_path(&reduced, &sp.out, &|c| sp.size(c) as u128);
        for (i, j) in steps {
            // (i < j) the pair leaves the list and its product joins the end
            let b = terms.remove(j);
            let a = terms.remove(i);
            let keep: Vec<char> = sp
                .out
                .iter()
                .chain(terms.iter().flat_map(|t| t.letters.iter()))
                .copied()
                .collect();
            terms.push(contract(a, b, &keep, &sp.ell)?);
        }
        let t = terms.pop().expect("one term left").sum_out(&sp.out)?;
        t.permuted(&sp.out)
    }

    /// The order in which [`Tensor::einsum`] contracts operands of these
    /// shapes, and its cost, as NumPy's `einsum_path` reports it: each step
    /// `(i, j)` (`i < j`) contracts operands `i` and `j` of the current list,
    /// which leave it, and appends their product at its end. `flops` counts
    /// the multiply-adds of the steps (for a step, the product of the sizes
    /// of the letters its two operands have), `naive_flops` those of one
    /// loop over every letter at once. Errors as `einsum` for a bad spec.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// // A[10, 1000] B[1000, 10] C[10, 1000]: (A B) first costs 2·10⁵, (B C) first 10⁷ + 10⁵
    /// let p = Tensor::einsum_path("ij,jk,kl->il", &[&[10, 1000], &[1000, 10], &[10, 1000]])?;
    /// assert_eq!(p.steps, vec![(0, 1), (0, 1)]);
    /// assert_eq!(p.flops, 200_000);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn einsum_path(spec: &str, shapes: &[&[usize]]) -> Result<EinsumPath> {
        let sp = Spec::parse(spec, shapes)?;
        let reduced: Vec<Vec<char>> = sp.terms.iter().map(|l| distinct(l)).collect();
        let size = |c: char| sp.size(c) as u128;
        let (steps, flops) = best_path(&reduced, &sp.out, &size);
        let mut all: Vec<char> = reduced.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        let naive_flops = all.iter().fold(1u128, |acc, &c| acc.saturating_mul(size(c)));
        Ok(EinsumPath {
            steps,
            flops,
            naive_flops,
        })
    }
}
