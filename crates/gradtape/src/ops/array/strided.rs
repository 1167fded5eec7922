//! Strided slicing with NumPy semantics (negative steps included), reverse,
//! tile, repeat, and padding by reflection.
//!
//! `strided_slice` and `reverse` are views (the layout allows negative
//! strides). The adjoint of a strided slice is its own op, which puts the
//! cotangent back into zeros, so that both are linear ops each the other's
//! rule (gradients of any order). tile, repeat and the reflecting pads are
//! compositions of views, broadcasts, reshapes and concat.

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::filled_vec;
use crate::ops::desc::{Lazy, Op, ShapeOp};
use crate::ops::{bind, grads};
use crate::tensor::layout::{checked_numel, norm_axis};
use crate::tensor::{with_dtype, Element, Layout, Tensor};

/// One axis of a [`Tensor::strided_slice`], like Python's `start:end:step`.
///
/// `None` bounds default as in NumPy (the whole axis in the step's
/// direction); negative bounds count from the end; out-of-range bounds are
/// clamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    /// First index (inclusive).
    pub start: Option<isize>,
    /// Last index (exclusive).
    pub end: Option<isize>,
    /// Step; not 0. Negative steps walk backwards.
    pub step: isize,
}

impl Slice {
    /// `start:end:step`.
    pub fn new(start: Option<isize>, end: Option<isize>, step: isize) -> Slice {
        Slice { start, end, step }
    }
    /// `:` (the whole axis).
    pub fn all() -> Slice {
        Slice::new(None, None, 1)
    }
    /// `start:end`.
    pub fn range(start: isize, end: isize) -> Slice {
        Slice::new(Some(start), Some(end), 1)
    }
    /// `::step`.
    pub fn step(step: isize) -> Slice {
        Slice::new(None, None, step)
    }
    /// `::-1` (the axis reversed).
    pub fn rev() -> Slice {
        Slice::step(-1)
    }

    /// `(start, step, len)` on an axis of size `n` (NumPy's rules).
    fn resolve(&self, n: usize) -> (usize, isize, usize) {
        // i128: no overflow for any isize bounds and step
        let n = n as i128;
        let s = self.step as i128;
        let norm = |v: isize| if v < 0 { v as i128 + n } else { v as i128 };
        if s > 0 {
            let start = self.start.map_or(0, |v| norm(v).clamp(0, n));
            let end = self.end.map_or(n, |v| norm(v).clamp(0, n));
            let len = if end > start { (end - start + s - 1) / s } else { 0 };
            (start as usize, self.step, len as usize)
        } else {
            let start = self.start.map_or(n - 1, |v| norm(v).clamp(-1, n - 1));
            let end = self.end.map_or(-1, |v| norm(v).clamp(-1, n - 1));
            let len = if start > end { (start - end - s - 1) / -s } else { 0 };
            (start.max(0) as usize, self.step, len as usize)
        }
    }
}

/// A view of `x` picking `start + i·step` (`i < len`) on each axis.
fn strided_view(x: &Tensor, spec: &[(usize, isize, usize)]) -> Tensor {
    let l = x.layout();
    let empty = spec.iter().any(|s| s.2 == 0);
    let offset = l.offset as isize
        + spec
            .iter()
            .zip(&l.strides)
            .map(|(s, &st)| s.0 as isize * st)
            .sum::<isize>();
    x.view(Layout {
        shape: spec.iter().map(|s| s.2).collect(),
        // a step beyond the axis gives len <= 1, whose stride is never used
        strides: spec
            .iter()
            .zip(&l.strides)
            .map(|(s, &st)| s.1.wrapping_mul(st))
            .collect(),
        offset: if empty { l.offset } else { offset as usize },
    })
}

/// Fails unless every entry a strided view with `spec` reads lies inside
/// `shape` (a spec replayed from a graph on a tensor of another shape).
fn check_spec(op: &'static str, shape: &[usize], spec: &[(usize, isize, usize)]) -> Result<()> {
    let fits = spec.len() == shape.len()
        && spec.iter().zip(shape).all(|(&(start, step, len), &n)| {
            len == 0
                || (start < n && {
                    let last = start as i128 + (len as i128 - 1) * step as i128;
                    (0..n as i128).contains(&last)
                })
        });
    if fits {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("the strided spec {spec:?} does not fit a tensor of shape {shape:?}"),
        ))
    }
}

/// [`strided_op`] on a spec from a graph, checked against `x`'s shape.
pub(crate) fn strided_replay(x: &Tensor, spec: &[(usize, isize, usize)]) -> Result<Tensor> {
    check_spec("strided_slice", x.shape(), spec)?;
    Ok(strided_op(x, spec.to_vec()))
}

/// A recorded strided view; d/dx embeds the cotangent back.
fn strided_op(x: &Tensor, spec: Vec<(usize, isize, usize)>) -> Tensor {
    let y = strided_view(x, &spec);
    let shape = x.shape().to_vec();
    let desc = Lazy("StridedSlice", || {
        Op::Shape(ShapeOp::StridedSlice(spec.as_slice().into()))
    });
    bind(desc, &[x], y, |_| {
        let spec = spec.clone();
        vjp(move |g, _| Ok(grads![Some(strided_embed(&g[0], &shape, spec.clone())?)]))
    })
}

/// Zeros of `shape` with `g` written at the positions a strided view with
/// `spec` reads (the adjoint of [`strided_view`]); d/dg is that view.
pub(crate) fn strided_embed(g: &Tensor, shape: &[usize], spec: Vec<(usize, isize, usize)>) -> Result<Tensor> {
    const OP: &str = "strided_slice";
    let n = checked_numel(OP, shape)?;
    check_spec(OP, shape, &spec)?;
    if g.shape().len() != spec.len() || g.shape().iter().zip(&spec).any(|(&d, s)| d != s.2) {
        return Err(Error::invalid(
            OP,
            format!(
                "a cotangent of shape {:?} does not match the strided spec {spec:?}",
                g.shape()
            ),
        ));
    }
    let r = shape.len();
    let mut ostrides = vec![1usize; r];
    for i in (0..r.saturating_sub(1)).rev() {
        ostrides[i] = ostrides[i + 1] * shape[i + 1];
    }
    let embed = |g: &Tensor| -> Result<Tensor> {
        Ok(with_dtype!(g.dtype(), T => {
        let src = g.values::<T>(OP)?;
        let mut out = filled_vec(OP, n, T::from_f64(0.0))?;
        let gs = g.shape();
        let mut idx = vec![0usize; r];
        for &v in src.iter() {
            let o: isize = (0..r)
                .map(|d| (spec[d].0 as isize + idx[d] as isize * spec[d].1) * ostrides[d] as isize)
                .sum();
            out[o as usize] = v;
            for d in (0..r).rev() {
                idx[d] += 1;
                if idx[d] < gs[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Tensor::from_vec(out, shape)?
        }))
    };
    let y = match crate::dispatch::device::offload(
        OP,
        &[g],
        |_| crate::kernels::cuda::strided_embed(OP, g, shape, &spec),
        |h| embed(&h[0]),
    ) {
        Some(r) => r?,
        None => embed(g)?,
    };
    let desc = Lazy("StridedSliceGrad", || {
        Op::Shape(ShapeOp::StridedSliceGrad(shape.into(), spec.as_slice().into()))
    });
    Ok(bind(desc, &[g], y, |_| {
        let spec = spec.clone();
        vjp(move |gg, _| Ok(grads![Some(strided_op(&gg[0], spec.clone()))]))
    }))
}

/// An empty tensor of `shape` (numel 0) that stays connected to `x` on the tape.
fn empty_like(x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let zeros = vec![0; x.rank()];
    x.slice(&zeros, &zeros)?.reshape(shape)
}

/// How [`Tensor::pad_with`] fills the border.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PadMode {
    /// A constant value.
    Constant(f64),
    /// Mirror without repeating the edge: `[1,2,3]` padded by 2 is `3 2 1 2 3 2 1`.
    Reflect,
    /// Mirror repeating the edge: `[1,2,3]` padded by 2 is `2 1 1 2 3 3 2`.
    Symmetric,
}

impl Tensor {
    /// NumPy-style basic slicing: one [`Slice`] per leading axis (missing
    /// trailing axes are taken whole). Steps may be negative; a step of 0 is
    /// an error. A view of the same storage; d/dx puts the cotangent back
    /// into zeros.
    ///
    /// ```
    /// use gradtape::{Slice, Tensor};
    /// let x = Tensor::arange(0.0, 10.0, 1.0, gradtape::DType::I64)?;
    /// let y = x.strided_slice(&[Slice::new(Some(8), Some(1), -3)])?;
    /// assert_eq!(y.to_vec::<i64>()?, vec![8, 5, 2]);
    /// assert_eq!(x.strided_slice(&[Slice::rev()])?.to_vec::<i64>()?[0], 9);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn strided_slice(&self, slices: &[Slice]) -> Result<Tensor> {
        let s = self.shape();
        if slices.len() > s.len() {
            return Err(Error::invalid(
                "strided_slice",
                format!("{} slices given for shape {s:?}", slices.len()),
            ));
        }
        if let Some(i) = slices.iter().position(|sl| sl.step == 0) {
            return Err(Error::invalid(
                "strided_slice",
                format!("step 0 on axis {i} of shape {s:?}"),
            ));
        }
        let spec: Vec<(usize, isize, usize)> = (0..s.len())
            .map(|i| slices.get(i).copied().unwrap_or(Slice::all()).resolve(s[i]))
            .collect();
        Ok(strided_op(self, spec))
    }

    /// Reverses the listed axes (a view with negative strides). d/dx
    /// reverses the cotangent.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3])?;
    /// assert_eq!(x.reverse(&[1])?.to_vec::<i32>()?, vec![3, 2, 1, 6, 5, 4]);
    /// assert_eq!(x.reverse(&[0, -1])?.to_vec::<i32>()?, vec![6, 5, 4, 3, 2, 1]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn reverse(&self, axes: &[isize]) -> Result<Tensor> {
        let ax = crate::ops::reduce::norm_axes("reverse", axes, self.shape())?;
        let l = self.layout();
        let mut strides = l.strides.clone();
        let mut offset = l.offset as isize;
        let empty = self.numel() == 0;
        for &a in &ax {
            offset += (l.shape[a] as isize - 1).max(0) * l.strides[a];
            strides[a] = -strides[a];
        }
        let y = self.view(Layout {
            shape: l.shape.clone(),
            strides,
            offset: if empty { l.offset } else { offset as usize },
        });
        let desc = Lazy("ReverseV2", || {
            Op::Shape(ShapeOp::Reverse(ax.iter().copied().collect()))
        });
        Ok(bind(desc, &[self], y, |_| {
            let ax = ax.clone();
            vjp(move |g, _| {
                let axes: Vec<isize> = ax.iter().map(|&a| a as isize).collect();
                Ok(grads![Some(g[0].reverse(&axes)?)])
            })
        }))
    }

    /// Repeats the whole tensor `multiples[i]` times along each axis `i`.
    /// d/dx sums the copies.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![1i32, 2], &[1, 2])?;
    /// let t = x.tile(&[2, 2])?;
    /// assert_eq!(t.to_vec::<i32>()?, vec![1, 2, 1, 2, 1, 2, 1, 2]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn tile(&self, multiples: &[usize]) -> Result<Tensor> {
        let s = self.shape();
        if multiples.len() != s.len() {
            return Err(Error::invalid(
                "tile",
                format!("{} multiples given for shape {s:?}", multiples.len()),
            ));
        }
        let inter: Vec<usize> = s.iter().flat_map(|&d| [1, d]).collect();
        let wide: Vec<usize> = s.iter().zip(multiples).flat_map(|(&d, &m)| [m, d]).collect();
        let out: Vec<usize> = s.iter().zip(multiples).map(|(&d, &m)| d.saturating_mul(m)).collect();
        if checked_numel("tile", &out)? == 0 {
            return empty_like(self, &out);
        }
        let y = || self.reshape(&inter)?.broadcast_to(&wide)?.reshape(&out);
        y().map_err(|e| e.for_op("tile"))
    }

    /// Repeats each element `repeats` times along `axis` (`[1,2]` → `[1,1,2,2]`).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[1.0f32, 2.0]);
    /// assert_eq!(x.repeat(2, 0)?.to_vec::<f32>()?, vec![1.0, 1.0, 2.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn repeat(&self, repeats: usize, axis: isize) -> Result<Tensor> {
        let ax = norm_axis("repeat", axis, self.shape())?;
        let s = self.shape();
        let mut wide = s.to_vec();
        wide.insert(ax + 1, repeats);
        let mut out = s.to_vec();
        out[ax] = out[ax].saturating_mul(repeats); // (refused below if it saturates)
        if checked_numel("repeat", &out)? == 0 {
            return empty_like(self, &out);
        }
        let y = || self.expand_dims(ax as isize + 1)?.broadcast_to(&wide)?.reshape(&out);
        y().map_err(|e| e.for_op("repeat"))
    }

    /// Repeats element `i` along `axis` `repeats[i]` times (one count per
    /// element of the axis).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[1i32, 2, 3]);
    /// assert_eq!(x.repeat_each(&[2, 0, 1], 0)?.to_vec::<i32>()?, vec![1, 1, 3]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn repeat_each(&self, repeats: &[usize], axis: isize) -> Result<Tensor> {
        let ax = norm_axis("repeat_each", axis, self.shape())?;
        if repeats.len() != self.shape()[ax] {
            return Err(Error::invalid(
                "repeat_each",
                format!(
                    "{} counts given for axis {axis} of shape {:?}",
                    repeats.len(),
                    self.shape()
                ),
            ));
        }
        let parts: Vec<Tensor> = repeats
            .iter()
            .enumerate()
            .filter(|&(_, &c)| c > 0)
            .map(|(i, &c)| self.narrow(ax as isize, i, 1)?.repeat(c, ax as isize))
            .collect::<Result<_>>()?;
        if parts.is_empty() {
            return self.narrow(ax as isize, 0, 0);
        }
        Tensor::concat(&parts.iter().collect::<Vec<_>>(), ax as isize)
    }

    /// Pads each dimension `i` by `pads[i]` (before, after), filling as
    /// `mode` says. `Reflect` needs pads below the dimension's size,
    /// `Symmetric` at most the size. Differentiable in `self`.
    ///
    /// ```
    /// use gradtape::{PadMode, Tensor};
    /// let x = Tensor::vector(&[1.0f64, 2.0, 3.0]);
    /// let r = x.pad_with(&[(2, 2)], PadMode::Reflect)?;
    /// assert_eq!(r.to_vec::<f64>()?, vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]);
    /// let s = x.pad_with(&[(2, 1)], PadMode::Symmetric)?;
    /// assert_eq!(s.to_vec::<f64>()?, vec![2.0, 1.0, 1.0, 2.0, 3.0, 3.0]);
    /// let c = x.pad_with(&[(1, 0)], PadMode::Constant(9.0))?;
    /// assert_eq!(c.to_vec::<f64>()?, vec![9.0, 1.0, 2.0, 3.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn pad_with(&self, pads: &[(usize, usize)], mode: PadMode) -> Result<Tensor> {
        let s = self.shape().to_vec();
        if pads.len() != s.len() {
            return Err(Error::invalid(
                "pad",
                format!("{} paddings given for shape {s:?}", pads.len()),
            ));
        }
        match mode {
            PadMode::Constant(c) => {
                let padded = self.pad(pads)?;
                if c == 0.0 {
                    return Ok(padded);
                }
                let inside = Tensor::full_on(&s, 1.0, crate::DType::Bool, self.device())
                    .map_err(|e| e.for_op("pad"))?
                    .pad(pads)?;
                Tensor::where_(&inside, &padded, &crate::ops::binary::scalar_for("pad", self, c)?)
            }
            PadMode::Reflect | PadMode::Symmetric => {
                let sym = mode == PadMode::Symmetric;
                let mut x = self.clone();
                for (a, (&n, &(before, after))) in s.iter().zip(pads).enumerate() {
                    if before == 0 && after == 0 {
                        continue;
                    }
                    let limit = if sym { n } else { n.saturating_sub(1) };
                    if before > limit || after > limit {
                        return Err(Error::invalid(
                            "pad",
                            format!(
                                "{} padding ({before}, {after}) of axis {a} of shape {s:?} exceeds {limit}",
                                if sym { "symmetric" } else { "reflect" }
                            ),
                        ));
                    }
                    let ai = a as isize;
                    let skip = usize::from(!sym);
                    let left = x.narrow(ai, skip, before)?.reverse(&[ai])?;
                    let right = x.narrow(ai, n - skip - after, after)?.reverse(&[ai])?;
                    x = Tensor::concat(&[&left, &x, &right], ai)?;
                }
                Ok(x)
            }
        }
    }
}
