//! `einsum` for one and two operands, by views, sums and one batched matmul.
//!
//! Each operand first loses its repeated letters (a diagonal view:
//! `"ii->i"`) and the letters that appear nowhere else (summed out). Two
//! operands are then permuted and reshaped to `[batch, free, contracted]`
//! and `[batch, contracted, free]` and multiplied with one matmul; the
//! result is reshaped and permuted into the output order. Everything is made
//! of differentiable ops, so gradients of every order follow.

use super::super::expect_float;
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

impl Tensor {
    /// Einstein summation over one or two operands, e.g. `"ij,jk->ik"`
    /// (matmul), `"bij,bjk->bik"` (batched), `"i,j->ij"` (outer),
    /// `"ij->ji"`, `"ii->"` (trace), `"ii->i"` (diagonal), `"ij->"`.
    /// Without `->` the output is the letters used once, in alphabetical
    /// order, after any ellipsis dims (NumPy's implicit mode). Letters are
    /// ASCII `a-z`/`A-Z`; a letter shared by both operands must have the same
    /// size in each. One `...` per term stands for the leading/middle dims
    /// not named (right-aligned across operands, broadcasting size-1 dims,
    /// as NumPy): `"...ij,...jk->...ik"` is batched matmul. Floats only.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let b = Tensor::from_vec(vec![5.0f64, 6.0, 7.0, 8.0], &[2, 2])?;
    /// let c = Tensor::einsum("ij,jk->ik", &[&a, &b])?;
    /// assert_eq!(c.to_vec::<f64>()?, a.matmul(&b)?.to_vec::<f64>()?);
    /// assert_eq!(Tensor::einsum("ii->", &[&a])?.to_scalar::<f64>()?, 5.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn einsum(spec: &str, operands: &[&Tensor]) -> Result<Tensor> {
        let compact: String = spec.chars().filter(|c| !c.is_whitespace()).collect();
        let (lhs, out) = match compact.split_once("->") {
            Some((l, o)) => (l.to_string(), Some(o.to_string())),
            None => (compact.clone(), None),
        };
        let inputs: Vec<&str> = lhs.split(',').collect();
        if inputs.len() != operands.len() || !(1..=2).contains(&operands.len()) {
            return Err(bad(
                spec,
                format!(
                    "has {} input terms for {} operands (one or two are supported)",
                    inputs.len(),
                    operands.len()
                ),
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
        for t in operands {
            expect_float("einsum", t)?;
        }
        if operands.len() == 2 && operands[0].dtype() != operands[1].dtype() {
            return Err(Error::DTypeMismatch {
                op: "einsum",
                lhs: operands[0].dtype(),
                rhs: operands[1].dtype(),
            });
        }
        // how many dims each ellipsis covers
        let mut ell_dims = Vec::new();
        for ((pre, post, has), t) in parsed.iter().zip(operands) {
            let named = pre.len() + post.len();
            if (*has && named > t.rank()) || (!*has && named != t.rank()) {
                return Err(bad(
                    spec,
                    format!(
                        "term \"{pre}{}{post}\" has {named} letters for shape {:?}",
                        if *has { "..." } else { "" },
                        t.shape()
                    ),
                ));
            }
            ell_dims.push(t.rank() - named);
        }
        let e = ell_dims.iter().copied().max().unwrap_or(0);
        // private letters for the ellipsis dims, right-aligned across operands
        let ell: Vec<char> = (0..e)
            .map(|j| char::from_u32(0xE000 + j as u32).expect("private-use char"))
            .collect();
        let mut terms = Vec::new();
        for (((pre, post, _), t), &k) in parsed.iter().zip(operands).zip(&ell_dims) {
            let letters: Vec<char> = pre
                .chars()
                .chain(ell[e - k..].iter().copied())
                .chain(post.chars())
                .collect();
            terms.push(Term {
                t: (*t).clone(),
                letters,
            });
        }
        let all: Vec<char> = terms.iter().flat_map(|t| t.letters.iter().copied()).collect();
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
        let mut terms: Vec<Term> = terms.into_iter().map(|t| t.diagonals(spec)).collect::<Result<_>>()?;
        if terms.len() == 1 {
            let t = terms.pop().expect("one term").sum_out(&out)?;
            return t.permuted(&out);
        }
        let b = terms.pop().expect("two terms");
        let a = terms.pop().expect("two terms");
        // letters kept by each operand: those in the output or in the other operand
        let keep_a: Vec<char> = out.iter().chain(&b.letters).copied().collect();
        let keep_b: Vec<char> = out.iter().chain(&a.letters).copied().collect();
        let (a, b) = (a.sum_out(&keep_a)?, b.sum_out(&keep_b)?);
        let (mut a, mut b) = (a, b);
        for c in a.letters.clone() {
            if !b.letters.contains(&c) || a.size(c) == b.size(c) {
                continue;
            }
            // ellipsis dims broadcast (size 1 against n); named letters must agree
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
        let batch: Vec<char> = out
            .iter()
            .copied()
            .filter(|c| a.letters.contains(c) && b.letters.contains(c))
            .collect();
        let contr: Vec<char> = a
            .letters
            .iter()
            .copied()
            .filter(|c| b.letters.contains(c) && !out.contains(c))
            .collect();
        let free_a: Vec<char> = out
            .iter()
            .copied()
            .filter(|c| a.letters.contains(c) && !b.letters.contains(c))
            .collect();
        let free_b: Vec<char> = out
            .iter()
            .copied()
            .filter(|c| b.letters.contains(c) && !a.letters.contains(c))
            .collect();
        let prod = |t: &Term, cs: &[char]| cs.iter().map(|&c| t.size(c)).product::<usize>();
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
        let c = Term {
            t: a2.matmul(&b2).map_err(|e| e.for_op("einsum"))?.reshape(&shape)?,
            letters,
        };
        c.permuted(&out)
    }
}
