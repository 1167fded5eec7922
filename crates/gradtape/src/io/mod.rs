//! Saving and loading: checkpoints of variables in the
//! [safetensors](https://github.com/huggingface/safetensors) format
//! (feature `safetensors`, on by default) and single tensors as NumPy
//! `.npy` files.
//!
//! ```
//! # #[cfg(feature = "safetensors")] {
//! use gradtape::{io, nn::{Dense, Module}, Rng};
//! let dir = std::env::temp_dir().join(format!("gradtape-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("model.safetensors");
//! let model = Dense::builder(3, 2).name("fc").build(&mut Rng::new(0))?;
//! io::save_safetensors(&path, &model.variables())?;
//! let fresh = Dense::builder(3, 2).name("fc").build(&mut Rng::new(1))?;   // other weights
//! io::load_safetensors(&path, &fresh.variables())?;
//! assert_eq!(fresh.kernel().read().to_vec::<f32>()?, model.kernel().read().to_vec::<f32>()?);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # }
//! # Ok::<(), gradtape::Error>(())
//! ```

#[cfg(feature = "safetensors")]
mod checkpoint;
mod npy;

#[cfg(feature = "safetensors")]
pub use checkpoint::{
    load_safetensors, read_safetensors, safetensors_from_bytes, safetensors_to_bytes, save_safetensors,
    write_safetensors,
};
pub use npy::{npy_from_bytes, npy_to_bytes, read_npy, write_npy};

use std::path::Path;

use crate::error::{Error, Result};
use crate::tensor::{Complex, DType, Tensor};

/// The error for a failed file operation.
pub(crate) fn io_error(op: &'static str, path: &Path, e: std::io::Error) -> Error {
    Error::invalid(op, format!("{}: {e}", path.display()))
}

/// Bytes per element of `dtype` in files.
pub(crate) fn elem_size(dtype: DType) -> usize {
    match dtype {
        DType::Bool => 1,
        DType::F16 | DType::BF16 => 2,
        DType::F32 | DType::I32 => 4,
        DType::F64 | DType::I64 | DType::C64 => 8,
        DType::C128 => 16,
    }
}

/// The elements of `t` in row-major order, little-endian (bools as 0/1
/// bytes, complex numbers as real then imaginary part). An error for a
/// value a traced function computes (known only when its graph runs).
pub(crate) fn to_le_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    append_le_bytes("save", t, &mut out)?;
    Ok(out)
}

/// Appends [`to_le_bytes`]'s bytes to `out`, reserving their room
/// fallibly first ([`Error::OutOfMemory`] naming `op` for a tensor, or a
/// huge view of one, whose bytes cannot be allocated).
pub(crate) fn append_le_bytes(op: &'static str, t: &Tensor, out: &mut Vec<u8>) -> Result<()> {
    t.expect_readable(op)?;
    fn flat<T: crate::tensor::Element, const N: usize>(
        op: &'static str,
        t: &Tensor,
        out: &mut Vec<u8>,
        f: impl Fn(T) -> [u8; N],
    ) -> Result<()> {
        let oom = || crate::tensor::alloc::oom(op, t.numel(), N);
        let bytes = t.numel().checked_mul(N).ok_or_else(oom)?;
        out.try_reserve_exact(bytes).map_err(|_| oom())?;
        out.extend(t.values::<T>(op)?.iter().flat_map(|&x| f(x)));
        Ok(())
    }
    fn c64(c: Complex<f32>) -> [u8; 8] {
        let mut b = [0; 8];
        b[..4].copy_from_slice(&c.re.to_le_bytes());
        b[4..].copy_from_slice(&c.im.to_le_bytes());
        b
    }
    fn c128(c: Complex<f64>) -> [u8; 16] {
        let mut b = [0; 16];
        b[..8].copy_from_slice(&c.re.to_le_bytes());
        b[8..].copy_from_slice(&c.im.to_le_bytes());
        b
    }
    match t.dtype() {
        DType::F32 => flat(op, t, out, f32::to_le_bytes),
        DType::F64 => flat(op, t, out, f64::to_le_bytes),
        DType::F16 => flat(op, t, out, crate::tensor::f16::to_le_bytes),
        DType::BF16 => flat(op, t, out, crate::tensor::bf16::to_le_bytes),
        DType::I32 => flat(op, t, out, i32::to_le_bytes),
        DType::I64 => flat(op, t, out, i64::to_le_bytes),
        DType::Bool => flat(op, t, out, |b: bool| [b as u8]),
        DType::C64 => flat(op, t, out, c64),
        DType::C128 => flat(op, t, out, c128),
    }
}

/// A tensor from row-major element bytes (`big_endian` for `>` NumPy
/// files); `op` names the caller in errors.
pub(crate) fn from_bytes(
    op: &'static str,
    dtype: DType,
    shape: &[usize],
    bytes: &[u8],
    big_endian: bool,
) -> Result<Tensor> {
    let size = elem_size(dtype);
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|n| n.checked_mul(size).is_some())
        .ok_or_else(|| Error::invalid(op, format!("shape {shape:?} is too large")))?;
    if bytes.len() != n * size {
        return Err(Error::invalid(
            op,
            format!(
                "{} bytes of data for {n} {dtype} elements of shape {shape:?} (expected {})",
                bytes.len(),
                n * size
            ),
        ));
    }
    fn read<const N: usize>(c: &[u8], big: bool) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        if big {
            a.reverse();
        }
        a
    }
    let b = big_endian;
    match dtype {
        DType::F32 => Tensor::from_vec(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(read(c, b)))
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::F64 => Tensor::from_vec(
            bytes
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(read(c, b)))
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::I32 => Tensor::from_vec(
            bytes
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(read(c, b)))
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::I64 => Tensor::from_vec(
            bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(read(c, b)))
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::F16 => Tensor::from_vec(
            bytes
                .chunks_exact(2)
                .map(|c| crate::tensor::f16::from_le_bytes(read(c, b)))
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::BF16 => Tensor::from_vec(
            bytes
                .chunks_exact(2)
                .map(|c| crate::tensor::bf16::from_le_bytes(read(c, b)))
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::Bool => Tensor::from_vec(bytes.iter().map(|&x| x != 0).collect::<Vec<_>>(), shape),
        DType::C64 => Tensor::from_vec(
            bytes
                .chunks_exact(8)
                .map(|c| {
                    Complex::new(
                        f32::from_le_bytes(read(&c[..4], b)),
                        f32::from_le_bytes(read(&c[4..], b)),
                    )
                })
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::C128 => Tensor::from_vec(
            bytes
                .chunks_exact(16)
                .map(|c| {
                    Complex::new(
                        f64::from_le_bytes(read(&c[..8], b)),
                        f64::from_le_bytes(read(&c[8..], b)),
                    )
                })
                .collect::<Vec<_>>(),
            shape,
        ),
    }
}
