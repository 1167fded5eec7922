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

use super::{append_le_bytes, elem_size, from_bytes, io_error};
use crate::error::{Error, Result};
use crate::tensor::alloc::{oom, try_vec};
use crate::tensor::layout::checked_numel;
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
    let cap = t
        .numel()
        .checked_mul(elem_size(t.dtype()))
        .and_then(|n| n.checked_add(header.len() + 12))
        .ok_or_else(|| oom("save_npy", t.numel(), elem_size(t.dtype())))?;
    let mut out = try_vec("save_npy", cap)?;
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    append_le_bytes("save_npy", t, &mut out)?;
    Ok(out)
}

/// The three fields of a `.npy` header.
struct Header {
    descr: String,
    fortran: bool,
    shape: Vec<usize>,
}

/// A value of the header dict: the subset of Python literals a `.npy`
/// header holds.
enum Value {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
}

/// A parser of the header text, a Python dict literal, as NumPy reads it
/// (`ast.literal_eval`, then its checks): exactly the keys `'descr'` (a
/// string), `'fortran_order'` (`True` or `False`) and `'shape'` (a tuple of
/// non-negative ints: `()`, `(3,)`, `(2, 3)`), in any order, a trailing
/// comma allowed. As in Python, a key given twice keeps its last value.
/// Ints may carry the `L` suffix of headers written by Python 2 (NumPy
/// strips it for versions 1 and 2).
struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> Error {
        Error::invalid(
            "read_npy",
            format!(
                "malformed header ({what} at byte {}): {}",
                self.pos,
                String::from_utf8_lossy(self.text).trim_end()
            ),
        )
    }

    fn skip_ws(&mut self) {
        while self.text.get(self.pos).is_some_and(|c| c.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    /// Skips whitespace, then consumes `c` if it comes next.
    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        let hit = self.text.get(self.pos) == Some(&c);
        self.pos += hit as usize;
        hit
    }

    fn expect(&mut self, c: u8) -> Result<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.err(&format!("expected '{}'", c as char)))
        }
    }

    /// A quoted string without escapes.
    fn string(&mut self) -> Result<String> {
        self.skip_ws();
        let q = match self.text.get(self.pos) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err(self.err("expected a string")),
        };
        let body = self.pos + 1;
        let len = self.text[body..]
            .iter()
            .position(|&c| c == q || c == b'\\' || c == b'\n')
            .filter(|&i| self.text[body + i] == q)
            .ok_or_else(|| self.err("unterminated string (or one with escapes)"))?;
        self.pos = body + len + 1;
        std::str::from_utf8(&self.text[body..body + len])
            .map(str::to_string)
            .map_err(|_| self.err("a non-UTF-8 string"))
    }

    /// A non-negative decimal int (as Python writes it: no leading zeros,
    /// `_` between digits), optionally with Python 2's `L` suffix.
    fn int(&mut self) -> Result<usize> {
        self.skip_ws();
        let start = self.pos;
        while self
            .text
            .get(self.pos)
            .is_some_and(|c| c.is_ascii_digit() || *c == b'_')
        {
            self.pos += 1;
        }
        let raw = &self.text[start..self.pos];
        let digits: Vec<u8> = raw.iter().copied().filter(|&c| c != b'_').collect();
        let leading_zero = digits.len() > 1 && digits[0] == b'0' && digits.iter().any(|&c| c != b'0');
        let bad_sep = raw.first() == Some(&b'_') || raw.last() == Some(&b'_') || raw.windows(2).any(|w| w == b"__");
        if digits.is_empty() || leading_zero || bad_sep {
            self.pos = start;
            return Err(self.err("expected a non-negative int"));
        }
        if matches!(self.text.get(self.pos), Some(b'L' | b'l')) {
            self.pos += 1;
        }
        if self
            .text
            .get(self.pos)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'.')
        {
            return Err(self.err("expected a non-negative int"));
        }
        std::str::from_utf8(&digits)
            .ok()
            .and_then(|d| d.parse::<usize>().ok())
            .ok_or_else(|| self.err("a dimension too large for usize"))
    }

    /// A tuple of ints: `()`, `(n,)`, `(n, m, ...)` (a trailing comma
    /// allowed once there are two). `(n)` is an int, not a tuple.
    fn tuple(&mut self) -> Result<Vec<usize>> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        if self.eat(b')') {
            return Ok(dims);
        }
        loop {
            dims.push(self.int()?);
            if self.eat(b')') {
                if dims.len() == 1 {
                    return Err(self.err("a parenthesised int is not a tuple (write (n,))"));
                }
                return Ok(dims);
            }
            self.expect(b',')?;
            if self.eat(b')') {
                return Ok(dims);
            }
        }
    }

    fn value(&mut self) -> Result<Value> {
        self.skip_ws();
        let rest = &self.text[self.pos..];
        let word = |w: &[u8]| {
            rest.starts_with(w)
                && !rest
                    .get(w.len())
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        };
        match rest.first() {
            Some(b'\'' | b'"') => self.string().map(Value::Str),
            Some(b'(') => self.tuple().map(Value::Tuple),
            _ if word(b"True") => {
                self.pos += 4;
                Ok(Value::Bool(true))
            }
            _ if word(b"False") => {
                self.pos += 5;
                Ok(Value::Bool(false))
            }
            _ => Err(self.err("expected a string, True, False or a tuple")),
        }
    }

    fn header(mut self) -> Result<Header> {
        self.expect(b'{')?;
        let (mut descr, mut fortran, mut shape) = (None, None, None);
        while !self.eat(b'}') {
            let key_at = self.pos;
            let key = self.string()?;
            self.expect(b':')?;
            let value = self.value()?;
            match (key.as_str(), value) {
                ("descr", Value::Str(s)) => descr = Some(s),
                ("fortran_order", Value::Bool(b)) => fortran = Some(b),
                ("shape", Value::Tuple(t)) => shape = Some(t),
                ("descr" | "fortran_order" | "shape", _) => {
                    self.pos = key_at;
                    return Err(self.err(&format!(
                        "'{key}' must be {}",
                        match key.as_str() {
                            "descr" => "a string",
                            "fortran_order" => "True or False",
                            _ => "a tuple of non-negative ints",
                        }
                    )));
                }
                _ => {
                    self.pos = key_at;
                    return Err(self.err(&format!(
                        "unexpected key '{key}' (a header has exactly 'descr', 'fortran_order', 'shape')"
                    )));
                }
            }
            if !self.eat(b',') {
                self.expect(b'}')?;
                break;
            }
        }
        self.skip_ws();
        if self.pos != self.text.len() {
            return Err(self.err("text after the dict"));
        }
        match (descr, fortran, shape) {
            (Some(descr), Some(fortran), Some(shape)) => Ok(Header { descr, fortran, shape }),
            (d, f, _) => {
                let missing = if d.is_none() {
                    "descr"
                } else if f.is_none() {
                    "fortran_order"
                } else {
                    "shape"
                };
                Err(self.err(&format!("missing key '{missing}'")))
            }
        }
    }
}

/// The header text parsed (see [`Parser`]).
fn parse_header(text: &[u8]) -> Result<Header> {
    Parser { text, pos: 0 }.header()
}

/// A tensor from a `.npy` file's bytes.
pub fn npy_from_bytes(bytes: &[u8]) -> Result<Tensor> {
    const OP: &str = "read_npy";
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(Error::invalid(OP, "not a .npy file (no \\x93NUMPY magic)"));
    }
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(Error::invalid(OP, format!("unsupported .npy version {v}.{}", bytes[7]))),
    };
    let text = start
        .checked_add(hlen)
        .and_then(|end| bytes.get(start..end))
        .ok_or_else(|| Error::invalid(OP, format!("truncated header ({hlen} bytes announced)")))?;
    let Header {
        descr: d,
        fortran,
        shape,
    } = parse_header(text)?;
    let (big, code) = match d.as_bytes().first() {
        Some(b'<' | b'|' | b'=') => (false, &d[1..]),
        Some(b'>') => (true, &d[1..]),
        _ => (false, d.as_str()),
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
    checked_numel(OP, &shape)?;
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
