//! The unit tests of `src/function/compile/pipeline.rs`, moved out of the library.

use gradtape::__internals::function::compile::pipeline::*;
use gradtape::__internals::GraphInternals;
use gradtape::function::Graph;

#[test]
fn every_pass_has_its_own_name_and_a_bit() {
    let names = CompileOptions::pass_names();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len());
    assert!(names.len() <= 32);
}

#[test]
fn unknown_names_are_errors_that_list_the_known_ones() {
    let e = CompileOptions::default()
        .disable_pass("fusion")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'fusion'") && e.contains("fuse") && e.contains("hoist_reductions"),
        "{e}"
    );
    let o = CompileOptions::default().disable_pass("fuse").unwrap();
    assert!(!o.runs("fuse") && o.runs("fold") && !o.runs("nonesuch"));
    assert_eq!(
        format!("{o:?}"),
        "CompileOptions { disabled: [\"fuse\"], verify: false }"
    );
}

#[test]
fn a_pass_that_breaks_the_graph_is_named() {
    // a graph whose one node reads a value nothing makes
    let mut g = Graph::default();
    g.add_value(gradtape::DType::F32, &[2]);
    g.add_value(gradtape::DType::F32, &[2]);
    g.add_value(gradtape::DType::F32, &[2]);
    g.inputs = vec![0];
    g.nodes.push(gradtape::__internals::function::graph::Node {
        op: gradtape::__internals::ops::desc::Op::Unary(gradtape::__internals::ops::desc::Unary::Exp),
        inputs: smallvec::smallvec![1],
        outputs: smallvec::smallvec![2],
        site: None,
    });
    g.outputs = vec![2];
    let e = checked(&g, "fuse").unwrap_err().to_string();
    assert!(
        e.contains("after pass fuse") && e.contains("reads %1 before it is made"),
        "{e}"
    );
}
