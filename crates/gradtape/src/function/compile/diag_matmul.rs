//! Products by a diagonal matrix, computed as a row or column scaling (the
//! `diag_matmul` pass).
//!
//! ```text
//! before:                                after:
//!   %2: f32[12, 12] = Const[eye]           %2: f32[12, 12] = Const[eye]
//!   %3: f32[12, 12] = Mul(%2, %v)          %3: f32[12, 12] = Mul(%2, %v)
//!   %4: f32[7, 12] = MatMul(%w, %3)        %4: f32[7, 12] = DiagMatMul[right](%w, %3)
//! ```
//!
//! A Jacobian by reverse mode seeds its rows with the identity, and the
//! first gradient step turns the identity into a diagonal matrix
//! (`tanh_grad(y, I)` is `I (1 - y²)` broadcast over the rows); the next
//! step multiplies it by a weight, `D W`: an `n × n × k` product whose only
//! nonzero terms are `D[i][i] W[i][:]`. This pass finds products with an
//! operand made elementwise from a constant diagonal matrix (through
//! reshapes and transposes that keep it square), and gives them to a
//! [`DiagMatMul`] node, which checks at run time that the operand is
//! diagonal and scales the rows (or columns) of the other operand, and
//! runs the product otherwise.
//!
//! Values: bit for bit those of the product. The product's element
//! `Σ_j D[i][j] W[j][c]` adds `D[i][i] W[i][c]` to products `0 · W[j][c]`,
//! which are `±0` when `W` is finite. Adding `±0` leaves a nonzero number
//! as it is (with or without a fused multiply-add, in any order), so where
//! the rounded `D[i][i] W[i][c]` is not zero it is the product's element.
//! Where it is zero, the sign of the product's zero depends on the signs of
//! all the terms and the kernel's order of adding them: a scaling with a
//! zero anywhere in its result is thrown away, and the product runs. So
//! does a product with a non-finite element in the other operand (where
//! `0 · inf` is NaN) or an off-diagonal element that is not `±0` (a
//! denormal included). The scaling runs under the product's flushing of
//! denormals to zero (a flushed result is a zero: the product runs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::pipeline::PassCx;
use crate::error::Result;
use crate::function::graph::{Graph, ValueId};
use crate::kernels::cpu::build_rows;
use crate::kernels::cpu::lockstep::{zip, zip3};
use crate::kernels::cpu::math::with_simd;
use crate::ops::desc::{DynOp, Op, Outputs, ShapeOp};
use crate::tensor::{DType, Element, Tensor};

/// Smallest diagonal worth a check: below it the product is cheap anyway.
const MIN_N: usize = 8;

/// Which operand of a product is diagonal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// `a` (the rows of `b` are scaled)
    Left,
    /// `b` (the columns of `a` are scaled)
    Right,
}

/// `MatMul[transpose_a, transpose_b](a, b)` where one operand is likely
/// diagonal: a scaling when it is, the product otherwise.
pub struct DiagMatMul {
    pub transpose_a: bool,
    pub transpose_b: bool,
    pub side: Side,
}

impl DynOp for DiagMatMul {
    fn name(&self) -> &'static str {
        "DiagMatMul"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let [a, b] = inputs else {
            return Err(crate::error::Error::invalid(
                "DiagMatMul",
                format!("takes 2 inputs, got {}", inputs.len()),
            ));
        };
        if let Some(y) = self.scaled(a, b)? {
            return Ok(smallvec::smallvec![y]);
        }
        Ok(smallvec::smallvec![a.matmul_with(
            b,
            self.transpose_a,
            self.transpose_b
        )?])
    }
    fn stateful(&self) -> bool {
        false
    }
    fn fmt_attrs(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[transpose_a={}, transpose_b={}, diagonal={:?}]",
            self.transpose_a, self.transpose_b, self.side
        )
    }
}

/// Whether every element off the diagonal of the row-major `n × n` matrix
/// `d` is `±0` (compared by bits: a denormal is not zero).
#[inline(always)]
fn is_diagonal(d: &[f32], n: usize) -> bool {
    // (bits without the sign, or-ed: vectorised, each row a pass)
    let zero = |xs: &[f32]| xs.iter().fold(0u32, |acc, x| acc | x.to_bits() << 1) == 0;
    d.chunks_exact(n)
        .enumerate()
        .all(|(i, row)| zero(&row[..i]) && zero(&row[i + 1..]))
}

/// Whether every element of `xs` is finite.
#[inline(always)]
fn all_finite(xs: &[f32]) -> bool {
    // (the largest magnitude, by bits: NaN and infinities have the largest)
    xs.iter().fold(0u32, |m, x| m.max(x.to_bits() & 0x7fff_ffff)) < f32::INFINITY.to_bits()
}

impl DiagMatMul {
    /// The product computed as a scaling, or `None` where it cannot be
    /// (an operand not `f32` or not a matrix, an operand not diagonal, the
    /// other not finite, a zero in the result).
    pub fn scaled(&self, a: &Tensor, b: &Tensor) -> Result<Option<Tensor>> {
        if a.dtype() != DType::F32 || b.dtype() != DType::F32 || a.rank() != 2 || b.rank() != 2 {
            return Ok(None);
        }
        let (sa, sb) = (a.shape(), b.shape());
        // the product's rows and columns, the shared dimension
        let (m, k) = if self.transpose_a {
            (sa[1], sa[0])
        } else {
            (sa[0], sa[1])
        };
        let (kb, n) = if self.transpose_b {
            (sb[1], sb[0])
        } else {
            (sb[0], sb[1])
        };
        let (dv, ov, square, trans) = match self.side {
            Side::Left => (a, b, m, self.transpose_b),
            Side::Right => (b, a, n, self.transpose_a),
        };
        if k == 0 || n == 0 || k != kb || k != square {
            return Ok(None);
        }
        let d = dv.values::<f32>("DiagMatMul")?;
        if !with_simd(|| is_diagonal(&d, k)) {
            return Ok(None);
        }
        let o = ov.values::<f32>("DiagMatMul")?;
        if !with_simd(|| all_finite(&o)) {
            return Ok(None);
        }
        // (inline up to 256: the jacobian bench's identity allocates nothing)
        let diag: smallvec::SmallVec<[f32; 256]> = (0..k).map(|i| d[i * k + i]).collect();
        // the other operand as stored: `rows × cols`, read transposed when
        // `trans`
        let cols = ov.shape()[1];
        let (o, left) = (&o[..], self.side == Side::Left);
        // the product's flushing of denormals (the compute threads take on
        // the caller's setting)
        let _flush = crate::kernels::cpu::denormal::flush_guard();
        // a zero anywhere: the product's sign of zero is not known here
        let zeros = AtomicBool::new(false);
        let y = build_rows("DiagMatMul", m, n, |rows, out| {
            let zero = with_simd(
                #[inline(always)]
                || {
                    let mut zero = false;
                    for (r, row) in rows.zip(out.chunks_exact_mut(n)) {
                        // the other operand's row `r` (when not transposed)
                        let plain = || &o[r * cols..(r + 1) * cols];
                        let mut put = |y: &mut std::mem::MaybeUninit<f32>, v: f32| {
                            zero |= v == 0.0;
                            y.write(v);
                        };
                        match (left, trans) {
                            (true, false) => {
                                let s = diag[r];
                                for (y, &w) in zip(&mut row[..], plain()) {
                                    put(y, s * w);
                                }
                            }
                            (false, false) => {
                                for (y, &w, &s) in zip3(&mut row[..], plain(), &*diag) {
                                    put(y, w * s);
                                }
                            }
                            (true, true) => {
                                let s = diag[r];
                                for (c, y) in zip(0.., &mut row[..]) {
                                    put(y, s * o[c * cols + r]);
                                }
                            }
                            (false, true) => {
                                for (c, y) in zip(0.., &mut row[..]) {
                                    put(y, o[c * cols + r] * diag[c]);
                                }
                            }
                        }
                    }
                    zero
                },
            );
            if zero {
                zeros.store(true, Ordering::Relaxed);
            }
        })?;
        if zeros.load(Ordering::Relaxed) {
            return Ok(None);
        }
        Ok(Some(Tensor::from_storage(f32::buf_into_storage(y), &[m, n])))
    }
}

/// The dimensions of `shape` other than ones.
fn squeezed(shape: &[usize]) -> Vec<usize> {
    shape.iter().copied().filter(|&d| d != 1).collect()
}

/// Whether a constant is a square matrix (up to dimensions of one) with
/// `±0` off its diagonal.
fn const_diagonal(t: &Tensor) -> bool {
    match squeezed(t.shape())[..] {
        [r, c] if t.dtype() == DType::F32 && r == c && r >= MIN_N => {
            t.values::<f32>("DiagMatMul").is_ok_and(|d| is_diagonal(&d, r))
        }
        _ => false,
    }
}

/// Rewrites products with a likely diagonal operand into [`DiagMatMul`]
/// nodes; returns how many.
pub(crate) fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    // values likely diagonal: square `f32` matrices up to dimensions of
    // one, from a diagonal constant by elementwise ops and shape ops that
    // keep them square
    let mut likely: FxHashMap<ValueId, usize> = FxHashMap::default();
    let mut rewrites = 0;
    for node in g.nodes.iter_mut() {
        let [out] = node.outputs[..] else { continue };
        let info = &g.values[out as usize];
        let s = squeezed(&info.shape);
        let square = match s[..] {
            [r, c] if info.dtype == DType::F32 && r == c && r >= MIN_N => Some(r),
            _ => None,
        };
        let from_likely = |n: usize| node.inputs.iter().any(|v| likely.get(v) == Some(&n));
        match (&node.op, square) {
            (Op::Const(t), Some(n)) if const_diagonal(t) => {
                likely.insert(out, n);
            }
            (
                Op::Unary(_)
                | Op::Binary(_)
                | Op::Shape(ShapeOp::Reshape(_) | ShapeOp::Transpose(_) | ShapeOp::Contiguous),
                Some(n),
            ) if from_likely(n) => {
                likely.insert(out, n);
            }
            (
                Op::MatMul {
                    transpose_a,
                    transpose_b,
                },
                _,
            ) if info.dtype == DType::F32 && info.shape.len() == 2 => {
                let [a, b] = node.inputs[..] else { continue };
                let two_d = |v: ValueId| g.values[v as usize].shape.len() == 2;
                let side = match (likely.contains_key(&a) && two_d(a), likely.contains_key(&b) && two_d(b)) {
                    (true, _) => Side::Left,
                    (false, true) => Side::Right,
                    _ => continue,
                };
                node.op = Op::Dyn(Arc::new(DiagMatMul {
                    transpose_a: *transpose_a,
                    transpose_b: *transpose_b,
                    side,
                }));
                rewrites += 1;
            }
            _ => {}
        }
    }
    rewrites
}
