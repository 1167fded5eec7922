//! NumPy's `.npy` format (versions 1.0 to 3.0): one array per file.
//!
//! Written: a version 1.0 header (2.0 when the header is too long),
//! little-endian, C order, padded to 64 bytes as NumPy does. Read: `<` and
//! `>` byte orders, C or Fortran order (a Fortran-order array is
//! transposed into row-major order), dtypes `f4`, `f8`, `i4`, `i8`, `b1`,
//! `c8`, `c16`; anything else is an error naming the dtype.
//!
//! ```
//! use gradtape::{io, Tensor};
//! let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
//! let bytes = io::npy_to_bytes(&t)?;
//! assert_eq!(&bytes[..6], b"\x93NUMPY");
//! let back = io::npy_from_bytes(&bytes)?;
//! assert_eq!(back.shape(), &[2, 3]);
//! assert_eq!(back.to_vec::<f32>()?, t.to_vec::<f32>()?);
//! # Ok::<(), gradtape::Error>(())
//! ```

use std::path::Path;

use super::{elem_size, from_bytes, io_error, to_le_bytes};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

const MAGIC: &[u8] = b"\x93NUMPY";

fn descr(dtype: DType) -> Result<&'static str> {
    Ok(match dtype {
        DType::F16 => "<f2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::Bool => "|b1",
        DType::C64 => "<c8",
        DType::C128 => "<c16",
        DType::BF16 => {
            return Err(Error::UnsupportedDType {
                op: "save_npy",
                dtype,
                expected: "a dtype NumPy has (bf16 has none: cast to f32, or use safetensors)",
            })
        }
    })
}

/// The `.npy` file's bytes for `t`.
pub fn npy_to_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let shape = match t.shape() {
        [n] => format!("({n},)"),
        s => format!("({})", s.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr(t.dtype())?
    );
    // magic + version + length field + header + '\n', padded to 64
    let (version, len_field) = if header.len() + 1 + 10 <= u16::MAX as usize {
        (1u8, 2)
    } else {
        (2u8, 4)
    };
    let total = MAGIC.len() + 2 + len_field + header.len() + 1;
    header.push_str(&" ".repeat(total.next_multiple_of(64) - total));
    header.push('\n');
    let mut out = Vec::with_capacity(total + 64 + t.numel() * elem_size(t.dtype()));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&to_le_bytes(t)?);
    Ok(out)
}

/// The value of `key` in the header dict: the text after `'key':` up to
/// the end of the value.
fn field<'a>(header: &'a str, key: &str) -> Result<&'a str> {
    let bad = || Error::invalid("read_npy", format!("header has no '{key}': {header}"));
    let start = header.find(&format!("'{key}'")).ok_or_else(bad)? + key.len() + 2;
    let rest = header[start..]
        .trim_start()
        .strip_prefix(':')
        .ok_or_else(bad)?
        .trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')').map(|i| i + 1)
    } else if let Some(q) = rest.strip_prefix('\'') {
        q.find('\'').map(|i| i + 2)
    } else {
        rest.find([',', '}'])
    }
    .ok_or_else(bad)?;
    Ok(&rest[..end])
}

/// A tensor from a `.npy` file's bytes.
pub fn npy_from_bytes(bytes: &[u8]) -> Result<Tensor> {
    const OP: &str = "read_npy";
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(Error::invalid(OP, "not a .npy file (no \\x93NUMPY magic)"));
    }
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(Error::invalid(OP, format!("unsupported .npy version {v}.{}", bytes[7]))),
    };
    let header = bytes
        .get(start..start + hlen)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| Error::invalid(OP, "truncated or non-UTF-8 header"))?;
    let d = field(header, "descr")?.trim_matches('\'');
    let (big, code) = match d.split_at(1) {
        ("<" | "|" | "=", c) => (false, c),
        (">", c) => (true, c),
        _ => (false, d),
    };
    let dtype = match code {
        "f2" => DType::F16,
        "f4" => DType::F32,
        "f8" => DType::F64,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "b1" => DType::Bool,
        "c8" => DType::C64,
        "c16" => DType::C128,
        _ => {
            return Err(Error::invalid(
                OP,
                format!("unsupported dtype '{d}' (gradtape reads f2, f4, f8, i4, i8, b1, c8, c16)"),
            ))
        }
    };
    let fortran = match field(header, "fortran_order")? {
        "True" => true,
        "False" => false,
        v => return Err(Error::invalid(OP, format!("bad fortran_order {v}"))),
    };
    let shape: Vec<usize> = field(header, "shape")?
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| Error::invalid(OP, format!("bad shape entry '{s}' in {header}")))
        })
        .collect::<Result<_>>()?;
    let data = &bytes[start + hlen..];
    if !fortran {
        return from_bytes(OP, dtype, &shape, data, big);
    }
    // column-major: the data is the row-major array of the reversed shape, transposed
    let rev: Vec<usize> = shape.iter().rev().copied().collect();
    let perm: Vec<usize> = (0..shape.len()).rev().collect();
    from_bytes(OP, dtype, &rev, data, big)?.permute(&perm)?.contiguous()
}

/// Writes `t` to `path` as a `.npy` file.
pub fn write_npy(path: impl AsRef<Path>, t: &Tensor) -> Result<()> {
    let path = path.as_ref();
    std::fs::write(path, npy_to_bytes(t)?).map_err(|e| io_error("write_npy", path, e))
}

/// Reads a `.npy` file.
pub fn read_npy(path: impl AsRef<Path>) -> Result<Tensor> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| io_error("read_npy", path, e))?;
    npy_from_bytes(&bytes)
}
