//! The layering of `lib.rs`, checked on the source: no file names a module
//! of a layer above its own (`crate::x` paths, in `use` lines or inline,
//! comments aside; names re-exported at the crate root count as the module
//! they come from).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

/// The layers, bottom first; modules in one entry form one layer.
const LAYERS: &[&[&str]] = &[
    &["error", "scoped", "tensor", "kernels"],
    &["dispatch"],
    &["ops"],
    &["autodiff"],
    &["function"],
    &["random"],
    &["nn"],
    &["optim"],
    &["io"],
    &["distributed"],
];

fn layer(m: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&m))
}

/// The source without `//` comments (doc comments included) and without
/// string literals' contents.
fn code(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut kept = String::new();
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if !in_str && c == '/' && chars.get(i + 1) == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            }
            if !in_str {
                kept.push(c);
            }
            prev = c;
            i += 1;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// The first path segment of every `crate::` path in `src`.
fn crate_refs(src: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = src;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(inner) = rest.strip_prefix('{') {
            // top-level names of a `crate::{a::b, c}` group
            let (mut depth, mut name, mut at_start) = (0usize, String::new(), true);
            for c in inner.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(std::mem::take(&mut name));
                        at_start = true;
                    }
                    ':' => at_start = false,
                    c if depth == 0 && at_start && (c.is_alphanumeric() || c == '_') => name.push(c),
                    _ => {}
                }
            }
            out.insert(name);
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            out.insert(name);
        }
    }
    out.remove("");
    out
}

/// Names re-exported by `lib.rs` (`pub use module::...::{A, B}`), mapped to
/// their module.
fn root_reexports(lib: &str) -> HashMap<String, String> {
    let mut map = HashMap::new();
    for stmt in lib.split(';') {
        let Some(at) = stmt.find("pub use ") else { continue };
        let path = &stmt[at + "pub use ".len()..];
        let module: String = path.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        for word in path.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !word.is_empty() {
                map.entry(word.to_string()).or_insert_with(|| module.clone());
            }
        }
    }
    map
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("a readable source dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every arrow from a file's layer to a higher one.
fn upward_imports(src_dir: &Path) -> Vec<String> {
    let lib = code(&std::fs::read_to_string(src_dir.join("lib.rs")).expect("lib.rs"));
    let reexports = root_reexports(&lib);
    let mut all = Vec::new();
    files(src_dir, &mut all);
    let mut bad = Vec::new();
    for f in all {
        let rel = f.strip_prefix(src_dir).expect("under src");
        let first = rel.components().next().expect("a path").as_os_str().to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        let Some(own) = layer(&module) else { continue };
        let src = code(&std::fs::read_to_string(&f).expect("a readable file"));
        for r in crate_refs(&src) {
            let target = if layer(&r).is_some() {
                r.clone()
            } else {
                reexports.get(&r).cloned().unwrap_or(r.clone())
            };
            if layer(&target).is_some_and(|l| l > own) {
                bad.push(format!("{} -> {target} (crate::{r})", rel.display()));
            }
        }
    }
    bad
}

#[test]
fn no_file_imports_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gradtape/src");
    let bad = upward_imports(&src);
    assert!(bad.is_empty(), "imports pointing up the layers:\n{}", bad.join("\n"));
}

/// The checker sees what it must: an inline path, a group, a root
/// re-export, and not a comment.
#[test]
fn the_layer_check_can_fail() {
    let src =
        code("use crate::{tensor::Tensor, function::trace};\n// crate::optim\nlet g = crate::GradientTape::new();");
    let refs = crate_refs(&src);
    assert_eq!(
        refs.into_iter().collect::<Vec<_>>(),
        vec!["GradientTape".to_string(), "function".into(), "tensor".into()]
    );
    let lib = code("pub use autodiff::gradient_tape::{GradientOptions, GradientTape};");
    assert_eq!(root_reexports(&lib)["GradientTape"], "autodiff");
}
