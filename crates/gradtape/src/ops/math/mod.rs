//! Elementwise math, one file per kind of function:
//!
//! - `unary.rs`: `neg`, `abs`, `sign`, `square`, `sqrt`, `exp`, `log`,
//!   `sin`, `cos`, `tanh`, `sigmoid`, `relu`, and arithmetic with a scalar
//!   (`add_scalar`, `sub_scalar`, `mul_scalar`, `div_scalar`, `pow_scalar`)
//! - `elementary.rs`: `expm1`, `log1p`, `rsqrt`, `reciprocal`, `erf`, `erfc`
//!   (the forms that need care near their cancellation points)
//! - `special.rs`: SciPy's special functions: `lgamma`, `digamma`,
//!   `polygamma`, `igamma`/`igammac`, `betainc`, `erfinv`, `ndtri`, Bessel
//!   `i0e`/`i1e`, and the `is_nan`/`is_finite`/`is_inf` tests
//! - (`xlogy`, `xlog1py`, `divide_no_nan`, whose rules are custom
//!   gradients, are in `autodiff/guarded.rs`, beside `custom_gradient`)
//! - `trig.rs`: `tan`, inverse and hyperbolic functions, `atan2`
//! - `rounding.rs`: `floor`, `ceil`, `round`
//! - `activation.rs`: `softplus`, `softsign`, `relu6`, `leaky_relu`, `elu`,
//!   `selu`, `gelu`, `silu`, `clip_by_value`
//! - `activation_more.rs`: Keras's and PyTorch's further activations:
//!   `hard_sigmoid`, `hard_silu`, `mish`, `celu`, `relu_with`, `hard_tanh`,
//!   the shrinks, `glu`, `sparse_plus`, `squareplus`
//! - `gelu_slope.rs`: the exact GELU's eager path for a one-shot tape,
//!   which makes its slope with its value (one `erf`) for the rule
//! - `binary.rs`: `add`, `sub`, `mul`, `div`, `pow`, `maximum`, `minimum`,
//!   `squared_difference`, `where_`, `sum_to_shape`
//! - `floor_div.rs`: `floor_div`, `floor_mod`
//! - `compare.rs`: `eq`, `ne`, `lt`, `le`, `gt`, `ge`, `gt_scalar`,
//!   `lt_scalar`, `scalar_like`
//! - `logical.rs`: `logical_and`, `logical_or`, `logical_xor`, `logical_not`
//! - `bitwise.rs`: `bitwise_and`, `bitwise_or`, `bitwise_xor`, `invert`,
//!   `left_shift`, `right_shift` (integers)
//! - `complex.rs`: `complex`, `real`, `imag`, `conj`, `angle`, and the
//!   complex forms of the arithmetic ops
//! - `complex_fns.rs`: the holomorphic functions of complex tensors
//!   (`sqrt`, `sin`, `tanh`, `pow`, ...), reached through the real ops
//! - `operators.rs`: `&a + &b`, `&a * 2.0`, `-&a`
//!
//! Every op binds with an elementwise descriptor
//! ([`Unary`](crate::ops::desc::Unary) or [`Binary`](crate::ops::desc::Binary)).

pub(crate) mod activation;
mod activation_more;
pub(crate) mod binary;
mod bitwise;
pub(crate) mod compare;
pub(crate) mod complex;
mod complex_fns;
#[allow(dead_code)]
pub(crate) mod cuda_expr;
pub(crate) mod elementary;
mod floor_div;
pub(crate) mod gelu_slope;
pub(crate) mod igamma;
pub(crate) mod igamma_temme;
mod logical;
mod operators;
mod rounding;
pub(crate) mod special;
pub(crate) mod table;
mod table_half;
mod trig;
mod unary;
