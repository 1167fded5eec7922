//! The generators a traced graph draws from (see `crate::random`'s module
//! docs): a gradient that runs a forward graph again puts them where the
//! forward run found them, to draw what it drew.

use std::sync::Arc;

use super::graph::Graph;
use crate::ops::desc::Op;
use crate::ops::random;
use crate::ops::rng_state::State;

/// The generators the nodes of `g` (and of the graphs nested in them) draw
/// from or make, each once.
pub(crate) fn generators(g: &Graph) -> Vec<Arc<State>> {
    fn walk(g: &Graph, out: &mut Vec<Arc<State>>) {
        for n in &g.nodes {
            let Op::Dyn(d) = &n.op else { continue };
            let mut found: Vec<&Arc<State>> = Vec::new();
            if let Some(x) = n.op.as_dyn::<random::StreamDraw>() {
                found.push(&x.state);
            } else if let Some(x) = n.op.as_dyn::<random::RowOrder>() {
                found.push(&x.state);
            } else if let Some(x) = n.op.as_dyn::<random::MakeRng>() {
                found.push(&x.state);
                if let random::Made::Copy(from) | random::Made::Split(from) = &x.how {
                    found.push(from);
                }
            }
            for st in found {
                if !out.iter().any(|o| Arc::ptr_eq(o, st)) {
                    out.push(st.clone());
                }
            }
            for (_, sub) in super::graph::nested(&**d) {
                walk(&sub, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(g, &mut out);
    out
}
