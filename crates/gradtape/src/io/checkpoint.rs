//! Checkpoints: variables saved and loaded by name in the safetensors
//! format, through the `safetensors` crate.
//!
//! A model's variables ([`Module::variables`](crate::nn::Module::variables))
//! and an optimizer's ([`Optimizer::variables`](crate::optim::Optimizer::variables):
//! its step counter and slots) have distinct names, so one file can hold
//! both. Loading checks everything before assigning anything: a variable
//! whose name is missing from the file, or whose shape or dtype differs,
//! is an error naming it, and no variable is changed.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use super::{from_bytes, io_error, to_le_bytes};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

fn st_dtype(op: &'static str, d: DType) -> Result<Dtype> {
    Ok(match d {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::Bool => Dtype::BOOL,
        DType::C64 => Dtype::C64,
        DType::C128 => {
            return Err(Error::UnsupportedDType {
                op,
                dtype: d,
                expected: "a dtype safetensors stores (f16, bf16, f32, f64, i32, i64, bool, complex64)",
            })
        }
    })
}

fn our_dtype(op: &'static str, name: &str, d: Dtype) -> Result<DType> {
    Ok(match d {
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::BOOL => DType::Bool,
        Dtype::C64 => DType::C64,
        other => {
            return Err(Error::invalid(
                op,
                format!("tensor '{name}' has dtype {other}, which gradtape does not read"),
            ))
        }
    })
}

/// The key safetensors reserves for the file's metadata: a tensor of that
/// name would be written into the header where readers expect a map of
/// strings, so that the file could not be read back.
const RESERVED: &str = "__metadata__";

/// Serialises named tensors (names must be distinct, and not the reserved
/// `__metadata__`).
fn serialize(op: &'static str, tensors: &[(&str, &Tensor)]) -> Result<Vec<u8>> {
    let host: Vec<Tensor> = tensors
        .iter()
        .map(|(_, t)| crate::kernels::gpu::to_host(op, t))
        .collect::<Result<_>>()?;
    let tensors: Vec<(&str, &Tensor)> = tensors.iter().zip(&host).map(|((n, _), t)| (*n, t)).collect();
    let tensors = tensors.as_slice();
    let mut seen = HashSet::new();
    let mut data = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        if *name == RESERVED {
            return Err(Error::invalid(
                op,
                format!(
                    "a tensor cannot be named '{RESERVED}': safetensors reserves that key for the \
                     file's metadata (rename the variable)"
                ),
            ));
        }
        if !seen.insert(*name) {
            return Err(Error::invalid(
                op,
                format!("two tensors are named '{name}'; names must be unique"),
            ));
        }
        data.push((
            name.to_string(),
            st_dtype(op, t.dtype())?,
            t.shape().to_vec(),
            to_le_bytes(t)?,
        ));
    }
    let views = data
        .iter()
        .map(|(n, d, s, b)| {
            Ok((
                n.clone(),
                TensorView::new(*d, s.clone(), b).map_err(|e| Error::invalid(op, format!("'{n}': {e}")))?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize(views, None).map_err(|e| Error::invalid(op, e.to_string()))
}

/// Parses every tensor of a safetensors buffer.
fn deserialize(op: &'static str, bytes: &[u8]) -> Result<Vec<(String, Tensor)>> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| Error::invalid(op, format!("not a safetensors file: {e}")))?;
    let mut out = Vec::with_capacity(st.len());
    for (name, view) in st.iter() {
        let dtype = our_dtype(op, name, view.dtype())?;
        out.push((
            name.to_string(),
            from_bytes(op, dtype, view.shape(), view.data(), false)?,
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The variables' current values as a safetensors buffer, keyed by their
/// names (which must be distinct).
pub fn safetensors_to_bytes(vars: &[Variable]) -> Result<Vec<u8>> {
    let values: Vec<Tensor> = crate::autodiff::tape::without_tapes(|| vars.iter().map(Variable::read).collect());
    let named: Vec<(&str, &Tensor)> = vars.iter().map(Variable::name).zip(&values).collect();
    serialize("save_safetensors", &named)
}

/// Assigns each variable the tensor of its name in a safetensors buffer;
/// returns the names in the buffer that no variable took (sorted).
pub fn safetensors_from_bytes(bytes: &[u8], vars: &[Variable]) -> Result<Vec<String>> {
    assign_all(
        "load_safetensors",
        deserialize("load_safetensors", bytes)?,
        vars,
        "the checkpoint",
    )
}

fn assign_all(
    op: &'static str,
    tensors: Vec<(String, Tensor)>,
    vars: &[Variable],
    source: &str,
) -> Result<Vec<String>> {
    let mut by_name: HashMap<String, Tensor> = tensors.into_iter().collect();
    let mut plan = Vec::with_capacity(vars.len());
    for v in vars {
        let Some(t) = by_name.remove(v.name()) else {
            let mut have: Vec<&String> = by_name.keys().collect();
            have.sort();
            return Err(Error::invalid(
                op,
                format!(
                    "variable '{}' is not in {source} (unused names there: {have:?})",
                    v.name()
                ),
            ));
        };
        if t.shape() != v.shape().as_slice() || t.dtype() != v.dtype() {
            return Err(Error::VariableMismatch {
                op,
                name: v.name().to_string(),
                expected: v.shape(),
                expected_dtype: v.dtype(),
                got: t.shape().to_vec(),
                got_dtype: t.dtype(),
            });
        }
        plan.push((v, t));
    }
    for (v, t) in plan {
        v.assign(&t)?;
    }
    let mut rest: Vec<String> = by_name.into_keys().collect();
    rest.sort();
    Ok(rest)
}

/// Saves the variables' values to `path` (safetensors), keyed by name.
/// Names must be distinct and not `__metadata__` (the key safetensors
/// reserves for metadata); a complex128 variable is an error (safetensors
/// has no such dtype).
pub fn save_safetensors(path: impl AsRef<Path>, vars: &[Variable]) -> Result<()> {
    let path = path.as_ref();
    let bytes = safetensors_to_bytes(vars)?;
    std::fs::write(path, bytes).map_err(|e| io_error("save_safetensors", path, e))
}

/// Loads `path` into the variables by name (see the module docs for the
/// checks); returns the names in the file that no variable took.
///
/// ```
/// # #[cfg(feature = "safetensors")] {
/// use gradtape::{io, Tensor, Variable};
/// let dir = std::env::temp_dir().join(format!("gradtape-doc-load-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("ckpt.safetensors");
/// let w = Variable::builder(Tensor::vector(&[1.0f32, 2.0])).name("w").build();
/// io::save_safetensors(&path, &[w.clone()])?;
/// let other = Variable::builder(Tensor::vector(&[0.0f32, 0.0])).name("w").build();
/// assert!(io::load_safetensors(&path, &[other.clone()])?.is_empty());
/// assert_eq!(other.read().to_vec::<f32>()?, vec![1.0, 2.0]);
/// let wrong = Variable::builder(Tensor::vector(&[0.0f32; 3])).name("w").build();
/// assert!(io::load_safetensors(&path, &[wrong]).is_err());     // shape mismatch
/// let missing = Variable::builder(Tensor::vector(&[0.0f32; 2])).name("b").build();
/// assert!(io::load_safetensors(&path, &[missing]).is_err());   // no tensor 'b'
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # }
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn load_safetensors(path: impl AsRef<Path>, vars: &[Variable]) -> Result<Vec<String>> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| io_error("load_safetensors", path, e))?;
    let tensors = deserialize("load_safetensors", &bytes)?;
    assign_all("load_safetensors", tensors, vars, &format!("'{}'", path.display()))
}

/// Writes named tensors to `path` (safetensors).
pub fn write_safetensors(path: impl AsRef<Path>, tensors: &[(&str, &Tensor)]) -> Result<()> {
    let path = path.as_ref();
    let bytes = serialize("write_safetensors", tensors)?;
    std::fs::write(path, bytes).map_err(|e| io_error("write_safetensors", path, e))
}

/// Reads every tensor of a safetensors file, sorted by name (f16 and other
/// dtypes gradtape does not have are an error naming the tensor).
pub fn read_safetensors(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| io_error("read_safetensors", path, e))?;
    deserialize("read_safetensors", &bytes)
}
