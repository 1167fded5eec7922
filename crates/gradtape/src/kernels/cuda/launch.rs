//! The GPU kernels' entry points: each takes tensors on one GPU (the
//! caller checked the placement), launches the kernel of
//! [`source`](super::source) for their dtype, and returns a new contiguous
//! tensor on that GPU. Copies between host and device are here too.

use std::sync::Arc;

use super::runtime::{gpu, grid_for, CudaMem, Gpu};
use super::source::{self, ctype, Lay};
use crate::error::Result;
use crate::tensor::{with_dtype, DType, Device, DeviceBuffer, Layout, Mem, Tensor};

pub(super) const BLOCK: u32 = 256;

/// A GPU tensor's memory and GPU.
pub(super) fn mem_of(t: &Tensor) -> (&CudaMem, &'static Gpu) {
    match t.device_buffer().map(|b| &b.mem) {
        Some(Mem::Cuda(m)) => (m, m.gpu),
        _ => unreachable!("gradtape internal error: a CUDA kernel given a tensor not on a GPU"),
    }
}

/// A pointer argument for a kernel (the device address as a value).
pub(super) fn ptr_of(t: &Tensor) -> u64 {
    mem_of(t).0.ptr
}

/// A new contiguous tensor of `shape` and `dtype` on `g` (uninitialised
/// memory: the caller's kernel writes every element).
pub(super) fn alloc(op: &'static str, g: &'static Gpu, shape: &[usize], dtype: DType) -> Result<(Tensor, u64)> {
    let n: usize = shape.iter().product();
    let mem = g.alloc(op, n * dtype.size_in_bytes())?;
    let ptr = mem.ptr;
    let t = Tensor::from_device_buffer(
        DeviceBuffer {
            device: Device::Cuda(g.ordinal),
            dtype,
            len: n,
            mem: Mem::Cuda(mem),
        },
        shape,
    );
    Ok((t, ptr))
}

/// [`alloc`], for the kernels of sibling modules.
pub(super) fn alloc_on(op: &'static str, g: &'static Gpu, shape: &[usize], dtype: DType) -> Result<(Tensor, u64)> {
    alloc(op, g, shape, dtype)
}

/// The GPU of a tensor on a GPU.
pub(super) fn tensor_gpu(t: &Tensor) -> &'static Gpu {
    mem_of(t).1
}

/// The C type of `t`'s dtype, or the error of an op with no GPU kernel for it.
pub(super) fn ct(op: &'static str, t: &Tensor) -> Result<&'static str> {
    ctype(t.dtype()).ok_or_else(|| crate::kernels::gpu::no_kernel(op, t.device(), t.dtype()))
}

/// `t`'s view as kernels read it over `shape`.
pub(super) fn lay(op: &'static str, g: &Gpu, t: &Tensor, shape: &[usize]) -> Result<Lay> {
    Lay::of(t.layout(), shape).ok_or_else(|| {
        g.err(
            op,
            format!(
                "views of more than {} dims are not supported on the GPU (shape {shape:?})",
                source::MAX_RANK
            ),
        )
    })
}

/// A host copy of a GPU tensor (contiguous).
pub(crate) fn download(op: &'static str, t: &Tensor) -> Result<Tensor> {
    let t = contiguous(op, t)?;
    let (m, g) = mem_of(&t);
    with_dtype!(t.dtype(), T => {
        let mut v: Vec<T> = crate::tensor::alloc::try_vec(op, t.numel())?;
        // SAFETY: `T` is plain data of the dtype; every element is written
        // by the copy before it is read
        unsafe { v.set_len(t.numel()) };
        g.download(op, &mut v, m.ptr + (t.layout().offset * t.dtype().size_in_bytes()) as u64)?;
        Tensor::from_vec(v, t.shape())
    })
}

/// A GPU copy of a host tensor.
pub(crate) fn upload(op: &'static str, t: &Tensor, ordinal: usize) -> Result<Tensor> {
    let g = gpu(op, ordinal)?;
    let (out, _) = alloc(op, g, t.shape(), t.dtype())?;
    with_dtype!(t.dtype(), T => {
        let v = t.values::<T>(op)?;
        g.upload(op, mem_of(&out).0, &v)?;
    });
    Ok(out)
}

/// `value` everywhere.
pub(crate) fn filled(op: &'static str, shape: &[usize], value: f64, dtype: DType, ordinal: usize) -> Result<Tensor> {
    let g = gpu(op, ordinal)?;
    let c = ctype(dtype).ok_or_else(|| crate::kernels::gpu::no_kernel(op, Device::Cuda(ordinal), dtype))?;
    let (out, y) = alloc(op, g, shape, dtype)?;
    let n = out.numel() as i64;
    g.launch(
        op,
        &format!("fill|{c}"),
        &|| source::fill(c),
        grid_for(n as usize, BLOCK),
        BLOCK,
        &mut args![y, n, value],
    )?;
    Ok(out)
}

/// `f(v)` of every element, `f` the C expression `expr` of `v` (with the
/// attributes `c0`, `c1`), from dtype `from` to `to`.
fn map_expr(op: &'static str, x: &Tensor, prelude: &str, to: DType, expr: &str, attrs: [f64; 2]) -> Result<Tensor> {
    let g = mem_of(x).1;
    g.bind_for(op)?;
    let (from_c, to_c) = (
        ct(op, x)?,
        ctype(to).ok_or_else(|| crate::kernels::gpu::no_kernel(op, x.device(), to))?,
    );
    let (out, y) = alloc(op, g, x.shape(), to)?;
    let lx = lay(op, g, x, x.shape())?;
    let (px, n) = (ptr_of(x), out.numel() as i64);
    g.launch(
        op,
        &format!("map|{}|{from_c}|{to_c}|{expr}", prelude.len()),
        &|| source::map(prelude, from_c, to_c, expr),
        grid_for(n as usize, BLOCK),
        BLOCK,
        &mut args![lx, px, y, n, attrs[0], attrs[1]],
    )?;
    Ok(out)
}

/// An integer one-input op (`i32`, `i64`): `expr` is its C expression
/// of `v` (of type `TX`) and the attribute `c0`.
pub(crate) fn int_map(op: &'static str, x: &Tensor, expr: &str, c0: f64) -> Result<Tensor> {
    if !matches!(x.dtype(), DType::I32 | DType::I64) {
        return Err(crate::kernels::gpu::no_kernel(op, x.device(), x.dtype()));
    }
    map_expr(op, x, "", x.dtype(), expr, [c0, 0.0])
}

/// A bool one-input op: `expr` is its C expression of `v`.
pub(crate) fn map_bool(op: &'static str, x: &Tensor, expr: &str) -> Result<Tensor> {
    map_expr(op, x, "", DType::Bool, expr, [0.0; 2])
}

/// A contiguous copy (the tensor itself when it already is one covering
/// its buffer).
pub(crate) fn contiguous(op: &'static str, t: &Tensor) -> Result<Tensor> {
    let l = t.layout();
    if l.is_contiguous() && l.offset == 0 && t.device_buffer().is_some_and(|b| b.len == l.numel()) {
        return Ok(t.clone());
    }
    map_expr(op, t, "", t.dtype(), "v", [0.0; 2])
}

/// `t` converted to `dtype` (C's conversions: float to integer truncates;
/// to bool, non-zero is true).
pub(crate) fn cast(op: &'static str, t: &Tensor, dtype: DType) -> Result<Tensor> {
    let expr = if dtype == DType::Bool { "v != 0" } else { "v" };
    map_expr(op, t, "", dtype, expr, [0.0; 2])
}

/// A float one-input op: `expr` is its C expression of `v` (with the
/// attributes `c0`, `c1`, and the functions of `prelude`).
pub(crate) fn unary(op: &'static str, x: &Tensor, prelude: &str, expr: &str, attrs: [f64; 2]) -> Result<Tensor> {
    if !x.dtype().is_float() {
        return Err(crate::kernels::gpu::no_kernel(op, x.device(), x.dtype()));
    }
    map_expr(op, x, prelude, x.dtype(), expr, attrs)
}

/// `x`'s dtype if it is a half type (whose kernels compute on an `f32`
/// copy and round back).
fn half(x: &Tensor) -> Option<DType> {
    x.dtype().is_half().then_some(x.dtype())
}

pub(super) fn float_only(op: &'static str, x: &Tensor) -> Result<()> {
    match x.dtype() {
        DType::F32 | DType::F64 => Ok(()),
        d => Err(crate::kernels::gpu::no_kernel(op, x.device(), d)),
    }
}

/// A two-input elementwise op broadcasting to `shape`: `expr` is its C
/// expression of `a` and `b` (and the functions of `prelude`), of dtype `to`.
pub(crate) fn binary(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    shape: &[usize],
    prelude: &str,
    expr: &str,
    to: DType,
) -> Result<Tensor> {
    let g = mem_of(a).1;
    g.bind_for(op)?;
    let tc = ct(op, a)?;
    let to_c = ctype(to).ok_or_else(|| crate::kernels::gpu::no_kernel(op, a.device(), to))?;
    let (out, y) = alloc(op, g, shape, to)?;
    let (la, lb) = (lay(op, g, a, shape)?, lay(op, g, b, shape)?);
    let (pa, pb, n) = (ptr_of(a), ptr_of(b), out.numel() as i64);
    g.launch(
        op,
        &format!("zip|{}|{tc}|{to_c}|{expr}", prelude.len()),
        &|| source::zip(prelude, tc, to_c, expr),
        grid_for(n as usize, BLOCK),
        BLOCK,
        &mut args![la, pa, lb, pb, y, n],
    )?;
    Ok(out)
}

/// `cond ? a : b`, broadcasting the three to `shape`.
pub(crate) fn select(op: &'static str, c: &Tensor, a: &Tensor, b: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let g = mem_of(a).1;
    g.bind_for(op)?;
    let t = ct(op, a)?;
    let (out, y) = alloc(op, g, shape, a.dtype())?;
    let (lc, la, lb) = (lay(op, g, c, shape)?, lay(op, g, a, shape)?, lay(op, g, b, shape)?);
    let (pc, pa, pb, n) = (ptr_of(c), ptr_of(a), ptr_of(b), out.numel() as i64);
    g.launch(
        op,
        &format!("select|{t}"),
        &|| source::select(t),
        grid_for(n as usize, BLOCK),
        BLOCK,
        &mut args![lc, pc, la, pa, lb, pb, y, n],
    )?;
    Ok(out)
}

/// `t` (on a GPU) as a contiguous tensor of `shape` (same element count):
/// a view of `t` itself when it is contiguous over its whole buffer, else of
/// a contiguous copy.
pub(super) fn reshaped(op: &'static str, t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    debug_assert_eq!(t.numel(), shape.iter().product::<usize>());
    let c = contiguous(op, t)?;
    let b = c.device_buffer().expect("on a GPU");
    Ok(Tensor::device_view(Arc::clone(b), Layout::contiguous(shape)))
}

/// `x` with its dims in the order `perm`, copied contiguous.
pub(super) fn permuted(op: &'static str, x: &Tensor, perm: &[usize]) -> Result<Tensor> {
    let l = x.layout();
    let layout = Layout {
        shape: perm.iter().map(|&p| l.shape[p]).collect(),
        strides: perm.iter().map(|&p| l.strides[p]).collect(),
        offset: l.offset,
    };
    let b = x.device_buffer().expect("on a GPU");
    contiguous(op, &Tensor::device_view(Arc::clone(b), layout))
}

/// A reduction (`sum`, `prod`, `max`, `min`) of `x` over the sorted,
/// distinct `axes`, giving the kept dims in order (`out_shape`, without
/// keepdims' ones: the caller reshapes).
pub(crate) fn reduce(op: &'static str, kind: &str, x: &Tensor, axes: &[usize]) -> Result<Tensor> {
    let g = mem_of(x).1;
    g.bind_for(op)?;
    let t = ct(op, x)?;
    let rank = x.rank();
    let kept: Vec<usize> = (0..rank).filter(|d| !axes.contains(d)).collect();
    let perm: Vec<usize> = kept.iter().chain(axes).copied().collect();
    let rows: usize = kept.iter().map(|&d| x.shape()[d]).product();
    let r: usize = axes.iter().map(|&d| x.shape()[d]).product();
    let xs = permuted(op, x, &perm)?;
    let out_shape: Vec<usize> = kept.iter().map(|&d| x.shape()[d]).collect();
    let (out, y) = alloc(op, g, &out_shape, x.dtype())?;
    if rows == 0 {
        return Ok(out);
    }
    if r == 0 {
        // (an empty reduction: the identity)
        let bools = x.dtype() == DType::Bool;
        let v = match kind {
            "sum" => 0.0,
            "prod" => 1.0,
            // (for bools: `any` of nothing is false, `all` true)
            "max" if bools => 0.0,
            "max" => f64::NEG_INFINITY,
            _ => f64::INFINITY,
        };
        return filled(op, &out_shape, v, x.dtype(), g.ordinal);
    }
    let acc = source::reduce_acc(t, kind);
    let (px, rows_i, r_i) = (ptr_of(&xs), rows as i64, r as i64);
    // few long rows: a first pass spreads each row over `parts` blocks
    // (else one block per row would leave the GPU idle), the second
    // reduces the partials
    let parts = if rows < 512 && r >= 16 * BLOCK as usize {
        (r / (8 * BLOCK as usize))
            .clamp(2, 1024)
            .min(65_535 * 8 / rows.max(1))
            .max(1)
    } else {
        1
    };
    if parts > 1 {
        let acc_dtype = match acc {
            "double" => DType::F64,
            "float" => DType::F32,
            _ => x.dtype(),
        };
        let (partial, pp) = alloc(op, g, &[rows, parts], acc_dtype)?;
        let parts_i = parts as i64;
        let grid = (rows * parts).min(65_535 * 8) as u32;
        g.launch(
            op,
            &format!("reduce_split|{t}|{acc}|{kind}"),
            &|| source::reduce_split(t, acc, kind),
            grid,
            BLOCK,
            &mut args![px, pp, rows_i, r_i, parts_i],
        )?;
        let grid = rows.min(65_535 * 8) as u32;
        g.launch(
            op,
            &format!("reduce|{acc}|{t}|{acc}|{kind}"),
            &|| source::reduce_rows(acc, t, acc, kind),
            grid,
            BLOCK,
            &mut args![pp, y, rows_i, parts_i],
        )?;
        drop(partial);
        return Ok(out);
    }
    let grid = rows.min(65_535 * 8) as u32;
    g.launch(
        op,
        &format!("reduce|{t}|{t}|{acc}|{kind}"),
        &|| source::reduce_rows(t, t, acc, kind),
        grid,
        BLOCK,
        &mut args![px, y, rows_i, r_i],
    )?;
    Ok(out)
}

/// The index of the largest (`largest`) or smallest element of `x` along
/// `axis`, as [`Tensor::argmax`](crate::Tensor::argmax) gives it (i64,
/// the axis removed; the caller rejects an empty axis).
pub(crate) fn arg_extremum(op: &'static str, x: &Tensor, axis: usize, largest: bool) -> Result<Tensor> {
    let g = mem_of(x).1;
    g.bind_for(op)?;
    let t = ct(op, x)?;
    let kept: Vec<usize> = (0..x.rank()).filter(|&d| d != axis).collect();
    let perm: Vec<usize> = kept.iter().copied().chain([axis]).collect();
    let out_shape: Vec<usize> = kept.iter().map(|&d| x.shape()[d]).collect();
    let rows: usize = out_shape.iter().product();
    let (out, y) = alloc(op, g, &out_shape, DType::I64)?;
    if rows == 0 {
        return Ok(out);
    }
    let xs = permuted(op, x, &perm)?;
    let (px, rows_i, r_i) = (ptr_of(&xs), rows as i64, x.shape()[axis] as i64);
    g.launch(
        op,
        &format!("arg|{t}|{largest}"),
        &|| source::arg_rows(t, largest),
        rows.min(65_535 * 8) as u32,
        BLOCK,
        &mut args![px, y, rows_i, r_i],
    )?;
    Ok(out)
}

/// Softmax or log-softmax along `axis` (moved last for the kernel, which
/// works on rows; the result is viewed back in the input's dim order).
pub(crate) fn softmax(op: &'static str, x: &Tensor, axis: usize, log: bool) -> Result<Tensor> {
    let g = mem_of(x).1;
    g.bind_for(op)?;
    if let Some(half) = half(x) {
        // computed in f32, rounded once (as the host's half softmax)
        return cast(op, &softmax(op, &cast(op, x, DType::F32)?, axis, log)?, half);
    }
    float_only(op, x)?;
    let t = ct(op, x)?;
    let rank = x.rank();
    let perm: Vec<usize> = (0..rank).filter(|&d| d != axis).chain(std::iter::once(axis)).collect();
    let xs = permuted(op, x, &perm)?;
    let r = if rank == 0 { 1 } else { x.shape()[axis] };
    let rows = x.numel().checked_div(r).unwrap_or(0);
    let (out, y) = alloc(op, g, xs.shape(), x.dtype())?;
    if rows > 0 {
        let (px, rows_i, r_i) = (ptr_of(&xs), rows as i64, r as i64);
        let grid = rows.min(65_535 * 8) as u32;
        g.launch(
            op,
            &format!("softmax|{t}|{log}"),
            &|| source::softmax_rows(t, log),
            grid,
            BLOCK,
            &mut args![px, y, rows_i, r_i],
        )?;
    }
    if axis + 1 == rank || rank == 0 {
        return Ok(out);
    }
    // out is in `perm` order: dim `perm[i]` of x has out's stride `i`
    let so = crate::tensor::layout::contiguous_strides(out.shape());
    let mut strides = vec![0isize; rank];
    for (i, &p) in perm.iter().enumerate() {
        strides[p] = so[i];
    }
    let layout = Layout {
        shape: x.shape().into(),
        strides: strides.as_slice().into(),
        offset: 0,
    };
    Ok(Tensor::device_view(
        Arc::clone(out.device_buffer().expect("on a GPU")),
        layout,
    ))
}

/// Sparse softmax cross-entropy of `logits` `[rows, r]` against integer
/// `labels` `[rows]`: `(loss [rows], softmax [rows, r])`, as the CPU
/// kernel returns them.
pub(crate) fn sparse_xent(op: &'static str, labels: &Tensor, logits: &Tensor) -> Result<(Tensor, Tensor)> {
    let g = mem_of(logits).1;
    g.bind_for(op)?;
    if let Some(half) = half(logits) {
        // computed in f32, both outputs rounded once
        let (loss, p) = sparse_xent(op, labels, &cast(op, logits, DType::F32)?)?;
        return Ok((cast(op, &loss, half)?, cast(op, &p, half)?));
    }
    float_only(op, logits)?;
    let (t, l) = (ct(op, logits)?, ct(op, labels)?);
    let (xs, ls) = (contiguous(op, logits)?, contiguous(op, labels)?);
    let r = *logits.shape().last().unwrap_or(&1);
    let rows = labels.numel();
    let (loss, pl) = alloc(op, g, labels.shape(), logits.dtype())?;
    let (grad, pg) = alloc(op, g, logits.shape(), logits.dtype())?;
    if rows == 0 || r == 0 {
        return Ok((loss, grad));
    }
    let (px, plab, rows_i, r_i) = (ptr_of(&xs), ptr_of(&ls), rows as i64, r as i64);
    let grid = rows.min(65_535 * 8) as u32;
    // (a label out of range gives NaNs and is reported at the next read)
    let (err, code) = g.check_word(op, labels.shape())?;
    g.launch(
        op,
        &format!("xent|{t}|{l}"),
        &|| source::sparse_xent_rows(t, l),
        grid,
        BLOCK,
        &mut args![px, plab, pl, pg, rows_i, r_i, err, code],
    )?;
    Ok((loss, grad))
}

/// A matrix operand as cuBLAS reads it: the pointer, whether its last two
/// dims are stored transposed (column-major), its leading dimension and
/// its batch stride (0: one matrix for every batch).
struct Operand {
    ptr: u64,
    transposed: bool,
    ld: i32,
    batch_stride: i64,
    _keep: Option<Tensor>,
}

/// `t` `[batch..., r, c]` as a cuBLAS operand over `batch` matrices (its
/// batch dims flattened; a copy when its layout is neither row- nor
/// column-major per matrix with one batch stride).
fn operand(op: &'static str, t: &Tensor, batch: usize) -> Result<Operand> {
    let l = t.layout();
    let k = l.shape.len();
    let (r, c) = (l.shape[k - 2], l.shape[k - 1]);
    let (sr, sc) = (l.strides[k - 2], l.strides[k - 1]);
    let size = t.dtype().size_in_bytes() as u64;
    // one batch stride over the flattened batch dims (0 for a broadcast)
    let tb: usize = l.shape[..k - 2].iter().product();
    let batch_stride = if tb <= 1 {
        Some(0)
    } else {
        let mut s: Option<isize> = None;
        let mut ok = true;
        let mut expect = None;
        for d in (0..k - 2).rev() {
            if l.shape[d] == 1 {
                continue;
            }
            match (s, expect) {
                (None, _) => {
                    s = Some(l.strides[d]);
                    expect = Some(l.strides[d] * l.shape[d] as isize);
                }
                (Some(_), Some(e)) => {
                    if l.strides[d] != e {
                        ok = false;
                    }
                    expect = Some(e * l.shape[d] as isize);
                }
                _ => {}
            }
        }
        if ok {
            s
        } else {
            None
        }
    };
    let row_major = sc == 1 || c == 1;
    let col_major = sr == 1 || r == 1;
    let fits = |ld: isize, min: usize| ld >= min.max(1) as isize && ld <= i32::MAX as isize;
    if let Some(bs) = batch_stride
        && bs >= 0
        && (tb == batch || tb <= 1)
    {
        let bs = if tb <= 1 { 0 } else { bs as i64 };
        let base = mem_of(t).0.ptr + l.offset as u64 * size;
        if row_major && fits(if r == 1 { c as isize } else { sr }, c) {
            let ld = if r == 1 { c.max(1) as i32 } else { sr as i32 };
            return Ok(Operand {
                ptr: base,
                transposed: false,
                ld,
                batch_stride: bs,
                _keep: None,
            });
        }
        if col_major && fits(if c == 1 { r as isize } else { sc }, r) {
            let ld = if c == 1 { r.max(1) as i32 } else { sc as i32 };
            return Ok(Operand {
                ptr: base,
                transposed: true,
                ld,
                batch_stride: bs,
                _keep: None,
            });
        }
    }
    let copy = contiguous(op, t)?;
    let bs = if tb <= 1 { 0 } else { (r * c) as i64 };
    Ok(Operand {
        ptr: mem_of(&copy).0.ptr,
        transposed: false,
        ld: c.max(1) as i32,
        batch_stride: bs,
        _keep: Some(copy),
    })
}

/// `op(a) @ op(b)` over broadcast batch dims, through cuBLAS
/// (`f32`: plain single precision, no TF32 unless allowed; `f64`; `f16`
/// and `bf16` on the tensor cores, accumulating in `f32` and rounding
/// each output once, as the CPU's half products do).
pub(crate) fn matmul(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    ta: bool,
    tb: bool,
    out_shape: &[usize],
) -> Result<Tensor> {
    let g = mem_of(a).1;
    g.bind_for(op)?;
    let dtype = a.dtype();
    if !dtype.is_float() {
        return Err(crate::kernels::gpu::no_kernel(op, a.device(), dtype));
    }
    let k = out_shape.len();
    let (m, n) = (out_shape[k - 2], out_shape[k - 1]);
    let inner = if ta {
        a.shape()[a.rank() - 2]
    } else {
        a.shape()[a.rank() - 1]
    };
    let batch: usize = out_shape[..k - 2].iter().product();
    let (out, y) = alloc(op, g, out_shape, dtype)?;
    if m == 0 || n == 0 || batch == 0 {
        return Ok(out);
    }
    if inner == 0 {
        return filled(op, out_shape, 0.0, dtype, g.ordinal);
    }
    // broadcast the operands' batch dims to the output's
    let bcast = |t: &Tensor| -> Result<Tensor> {
        let r = t.rank();
        let mut shape = out_shape[..k - 2].to_vec();
        shape.extend_from_slice(&t.shape()[r - 2..]);
        if t.shape() == shape.as_slice() {
            return Ok(t.clone());
        }
        let l = t.layout();
        let strides = crate::tensor::layout::broadcast_strides(&l.shape, &l.strides, &shape);
        let view = Layout {
            shape: shape.as_slice().into(),
            strides,
            offset: l.offset,
        };
        Ok(Tensor::device_view(
            Arc::clone(t.device_buffer().expect("on a GPU")),
            view,
        ))
    };
    let (a, b) = (bcast(a)?, bcast(b)?);
    let oa = operand(op, &a, batch)?;
    let ob = operand(op, &b, batch)?;
    // row-major C [m, n] = op(A) op(B) is column-major Cᵀ [n, m] = op(B)ᵀ op(A)ᵀ:
    // cuBLAS's first operand is B (as stored: row-major B is column-major Bᵀ)
    use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
    let op_of = |stored_transposed: bool, logical_t: bool| {
        if stored_transposed != logical_t {
            CUBLAS_OP_T
        } else {
            CUBLAS_OP_N
        }
    };
    let (opb, opa) = (op_of(ob.transposed, tb), op_of(oa.transposed, ta));
    let (mi, ni, ki) = (m as i32, n as i32, inner as i32);
    let (sc, bt) = ((m * n) as i64, batch as i32);
    let blas = g.blas_on(op)?;
    let handle = blas.handle;
    {
        use cudarc::cublas::sys::{cublasMath_t, cublasSetMathMode};
        let mode = if dtype == DType::F32 && crate::tensor::tf32_allowed() {
            cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            cublasMath_t::CUBLAS_DEFAULT_MATH
        };
        // SAFETY: a live handle of this GPU
        unsafe { cublasSetMathMode(handle, mode) }
            .result()
            .map_err(|e| g.err(op, format!("cublasSetMathMode failed: {e:?}")))?;
    }
    if dtype.is_half() {
        use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cudaDataType_t};
        let data = if dtype == DType::F16 {
            cudaDataType_t::CUDA_R_16F
        } else {
            cudaDataType_t::CUDA_R_16BF
        };
        // (alpha and beta in the compute type, f32)
        let (one, zero) = (1.0f32, 0.0f32);
        // SAFETY: pointers are live device memory of this GPU holding the
        // operands' half matrices at the given leading dims and batch
        // strides; alpha and beta are host f32 values (the compute type)
        let r = unsafe {
            cudarc::cublas::result::gemm_strided_batched_ex(
                handle,
                opb,
                opa,
                ni,
                mi,
                ki,
                &one as *const f32 as *const std::ffi::c_void,
                ob.ptr as *const std::ffi::c_void,
                data,
                ob.ld,
                ob.batch_stride,
                oa.ptr as *const std::ffi::c_void,
                data,
                oa.ld,
                oa.batch_stride,
                &zero as *const f32 as *const std::ffi::c_void,
                y as *mut std::ffi::c_void,
                data,
                ni,
                sc,
                bt,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        r.map_err(|e| g.err(op, format!("cuBLAS half gemm failed: {e:?}")))?;
        return Ok(out);
    }
    // SAFETY: pointers are live device memory of this GPU holding the
    // operands' matrices at the given leading dims and batch strides
    let r = unsafe {
        if dtype == DType::F32 {
            let (one, zero) = (1.0f32, 0.0f32);
            cudarc::cublas::result::sgemm_strided_batched(
                handle,
                opb,
                opa,
                ni,
                mi,
                ki,
                &one,
                ob.ptr as *const f32,
                ob.ld,
                ob.batch_stride,
                oa.ptr as *const f32,
                oa.ld,
                oa.batch_stride,
                &zero,
                y as *mut f32,
                ni,
                sc,
                bt,
            )
        } else {
            let (one, zero) = (1.0f64, 0.0f64);
            cudarc::cublas::result::dgemm_strided_batched(
                handle,
                opb,
                opa,
                ni,
                mi,
                ki,
                &one,
                ob.ptr as *const f64,
                ob.ld,
                ob.batch_stride,
                oa.ptr as *const f64,
                oa.ld,
                oa.batch_stride,
                &zero,
                y as *mut f64,
                ni,
                sc,
                bt,
            )
        }
    };
    r.map_err(|e| g.err(op, format!("cuBLAS gemm failed: {e:?}")))?;
    Ok(out)
}

impl Gpu {
    /// Binds this GPU's context on the calling thread.
    pub(super) fn bind_for(&self, op: &'static str) -> Result<()> {
        gpu(op, self.ordinal).map(|_| ())
    }
}

/// One optimizer step on a GPU: the new weight and slots (fresh tensors)
/// from `w`, `slots` and the dense gradient `g` (all of one shape and
/// float dtype), `body` being the rule's CUDA form with its `params` (at
/// most six) and `wd`/`lr` the weight decay (0: none) and learning rate.
#[allow(clippy::too_many_arguments)]
pub(crate) fn optimizer_update(
    op: &'static str,
    w: &Tensor,
    slots: &[&Tensor],
    g: &Tensor,
    body: &str,
    params: &[f64],
    wd: f64,
    lr: f64,
) -> Result<Vec<Tensor>> {
    let gpu_ = mem_of(w).1;
    gpu_.bind_for(op)?;
    float_only(op, w)?;
    let t = ct(op, w)?;
    let k = slots.len();
    if k > 3 || params.len() > 6 {
        return Err(gpu_.err(op, "at most three slots and six parameters per optimizer rule"));
    }
    let w_in = contiguous(op, w)?;
    let g_in = contiguous(op, g)?;
    let s_in: Vec<Tensor> = slots.iter().map(|s| contiguous(op, s)).collect::<Result<_>>()?;
    let (w_out, pwo) = alloc(op, gpu_, w.shape(), w.dtype())?;
    let mut outs = vec![w_out];
    let (mut si, mut so) = ([0u64; 3], [0u64; 3]);
    for (i, s) in s_in.iter().enumerate() {
        let (o, p) = alloc(op, gpu_, w.shape(), w.dtype())?;
        si[i] = ptr_of(s);
        so[i] = p;
        outs.push(o);
    }
    let p = |i: usize| params.get(i).copied().unwrap_or(0.0);
    let (p0, p1, p2, p3, p4, p5) = (p(0), p(1), p(2), p(3), p(4), p(5));
    let (pwi, pg, n) = (ptr_of(&w_in), ptr_of(&g_in), w.numel() as i64);
    gpu_.launch(
        op,
        &format!("optimizer|{t}|{k}|{body}"),
        &|| source::optimizer(t, k, body),
        grid_for(n as usize, BLOCK),
        BLOCK,
        &mut args![pwi, pwo, si[0], so[0], si[1], so[1], si[2], so[2], pg, n, p0, p1, p2, p3, p4, p5, wd, lr],
    )?;
    Ok(outs)
}
