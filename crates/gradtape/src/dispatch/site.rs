//! Where a traced node comes from: the public op the user called.
//!
//! A public op is often several primitive ops (`gather_with` is a
//! transpose, a cast and a `gather_nd`), and a traced graph records the
//! primitives. When a graph's node fails at run time (an index out of
//! range, an integer division by zero: errors that depend on values), the
//! primitive's name alone does not say which call of the user's failed.
//! So an op whose errors can depend on values opens a [`Site`] scope
//! ([`user_op`]) while a trace records; the trace stores the outermost
//! scope open with each node it makes, and the executor puts it in the
//! error ([`Error::InFunction`](crate::Error::InFunction)).
//!
//! Cost: when no trace records, [`user_op`] is one thread-local read (the
//! listening mask) and the graph executor does nothing per node; the
//! description is built only when an error occurs.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use super::{listens, Kind};
use crate::tensor::{DType, Shape, Tensor};

/// The public op a node of a traced graph was made by, with its operands'
/// names, shapes and dtypes at trace time.
#[derive(Debug)]
pub struct Site {
    /// The op the user called (`gather_with`).
    pub op: &'static str,
    /// Its operands: name, dtype and shape.
    pub operands: Vec<(&'static str, DType, Shape)>,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (", self.op)?;
        for (i, (name, dtype, shape)) in self.operands.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name} {:?} {dtype}", &shape[..])?;
        }
        f.write_str(")")
    }
}

thread_local! {
    /// The outermost site open on this thread while a trace records.
    static CURRENT: RefCell<Option<Arc<Site>>> = const { RefCell::new(None) };
}

/// An open site; closed on drop.
pub(crate) struct SiteGuard(bool);

impl Drop for SiteGuard {
    fn drop(&mut self) {
        if self.0 {
            CURRENT.with(|c| *c.borrow_mut() = None);
        }
    }
}

/// Opens the site of public op `op` on `operands` (names and tensors) for
/// the nodes a recording trace makes until the guard drops; a site already
/// open (an outer public op) stays. Nothing when no trace records.
#[inline]
pub(crate) fn user_op(op: &'static str, operands: &[(&'static str, &Tensor)]) -> SiteGuard {
    if !listens(Kind::Trace) {
        return SiteGuard(false);
    }
    open(op, operands)
}

#[cold]
fn open(op: &'static str, operands: &[(&'static str, &Tensor)]) -> SiteGuard {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_some() {
            return SiteGuard(false);
        }
        *c = Some(Arc::new(Site {
            op,
            operands: operands
                .iter()
                .map(|(name, t)| (*name, t.dtype(), crate::tensor::layout::small_copy(t.shape())))
                .collect(),
        }));
        SiteGuard(true)
    })
}

/// The site open now, if any (read by the trace for each node).
pub(crate) fn current() -> Option<Arc<Site>> {
    CURRENT.with(|c| c.borrow().clone())
}
