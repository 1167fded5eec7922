//! Linear algebra, one file per kind:
//!
//! - `matmul.rs`: `matmul`, `matmul_with` (the one product kernel), and
//!   `matmul_pair.rs`: its rule's two products as one parallel job;
//! - `products.rs`: `matvec`, `outer`, `tensordot` (built on it);
//! - `einsum.rs`: `einsum` for any number of operands, and
//!   `einsum_path.rs`: the order it contracts them in (`einsum_path`);
//! - `diag.rs`: `diag`, `diag_part`, `trace`, `band_part`, `tril`, `triu`;
//! - `decomp.rs`: `cholesky`, `det`, `slogdet`, `logdet`;
//! - `solve.rs`: `triangular_solve`, `solve`, `solve_with`, `inverse`;
//! - `spectral.rs`: `eigh`, `svd`, `qr`, `lu`, `matrix_exp`;
//! - `lstsq.rs`: `lstsq`, `pinv`, `matrix_norm` (compositions).
//!
//! The ops with a kernel of their own bind with a
//! [`LinalgOp`](super::desc::LinalgOp) descriptor (matmul with
//! [`Op::MatMul`](super::desc::Op::MatMul)); the others are compositions, so
//! every op here can be traced into a graph.

pub(crate) mod decomp;
mod diag;
mod einsum;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod einsum_path;
mod lstsq;
pub(crate) mod matmul;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod matmul_pair;
mod products;
mod solve;
mod spectral;

pub use einsum_path::EinsumPath;
pub use lstsq::MatrixNorm;
