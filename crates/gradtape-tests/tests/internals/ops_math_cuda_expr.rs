//! The unit tests of `src/ops/math/cuda_expr.rs`, moved out of the library.

use gradtape::__internals::ops::desc::F64;
use gradtape::__internals::ops::desc::{Binary, Unary};
use gradtape::__internals::ops::math::cuda_expr::*;
use gradtape::__internals::ops::math::table;

/// Every one-input op, with attributes (those of the table's own tests).
fn all_unary() -> Vec<Unary> {
    use Unary::*;
    let ops = vec![
        Neg,
        Abs,
        ComplexAbs,
        Sign,
        Square,
        Sqrt,
        Rsqrt,
        Reciprocal,
        Exp,
        Expm1,
        Log,
        Log1p,
        Sin,
        Cos,
        Tan,
        Asin,
        Acos,
        Atan,
        Sinh,
        Cosh,
        Tanh,
        Asinh,
        Acosh,
        Atanh,
        Erf,
        Erfc,
        Gelu,
        GeluGrad,
        GeluTanh,
        GeluTanhGrad,
        Silu,
        SiluGrad,
        Mish,
        MishGrad,
        TanhShrink,
        Floor,
        Ceil,
        Round,
        Sigmoid,
        Relu,
        Relu6,
        LeakyRelu(F64(0.2)),
        Elu,
        Selu,
        Softplus,
        Softsign,
        ClipByValue(F64(-1.0), F64(2.0)),
        PowScalar(F64(1.5)),
        MulScalar(F64(-3.0)),
        DivScalar(F64(7.0)),
        AddScalar(F64(0.25)),
        LogicalNot,
        Real,
        Imag,
        Conj,
        Angle,
        Invert,
    ];
    // (a new variant fails to compile here: add it to the list above)
    for op in &ops {
        match op {
            Neg | Abs | ComplexAbs | Sign | Square | Sqrt | Rsqrt | Reciprocal | Exp | Expm1 | Log | Log1p | Sin
            | Cos | Tan | Asin | Acos | Atan | Sinh | Cosh | Tanh | Asinh | Acosh | Atanh | Erf | Erfc | Gelu
            | GeluGrad | GeluTanh | GeluTanhGrad | Silu | SiluGrad | Mish | MishGrad | TanhShrink | Floor | Ceil
            | Round | Sigmoid | Relu | Relu6 | LeakyRelu(_) | Elu | Selu | Softplus | Softsign | ClipByValue(..)
            | PowScalar(_) | MulScalar(_) | DivScalar(_) | AddScalar(_) | LogicalNot | Real | Imag | Conj | Angle
            | Invert => {}
        }
    }
    ops
}

/// Every two-input op.
fn all_binary() -> Vec<Binary> {
    use Binary::*;
    let ops = vec![
        Add,
        Sub,
        Mul,
        Div,
        Pow,
        Maximum,
        Minimum,
        SquaredDifference,
        Atan2,
        FloorDiv,
        FloorMod,
        Equal,
        NotEqual,
        Less,
        LessEqual,
        Greater,
        GreaterEqual,
        LogicalAnd,
        LogicalOr,
        LogicalXor,
        Complex,
        ReluGrad,
        TanhGrad,
        BitwiseAnd,
        BitwiseOr,
        BitwiseXor,
        LeftShift,
        RightShift,
    ];
    // (a new variant fails to compile here: add it to the list above)
    for op in &ops {
        match op {
            Add | Sub | Mul | Div | Pow | Maximum | Minimum | SquaredDifference | Atan2 | FloorDiv | FloorMod
            | Equal | NotEqual | Less | LessEqual | Greater | GreaterEqual | LogicalAnd | LogicalOr | LogicalXor
            | Complex | ReluGrad | TanhGrad | BitwiseAnd | BitwiseOr | BitwiseXor | LeftShift | RightShift => {}
        }
    }
    ops
}

const TYPES: [CType; 2] = [CType::F32, CType::F64];

/// The table's ops whose results the expressions must give bit for bit
/// (everything else calls a transcendental function: within ulps).
fn exact_unary(op: &Unary) -> bool {
    use Unary::*;
    matches!(
        op,
        Neg | Abs
            | Sign
            | Square
            | Sqrt
            | Rsqrt
            | Reciprocal
            | Floor
            | Ceil
            | Round
            | Relu
            | Relu6
            | LeakyRelu(_)
            | Softsign
            | ClipByValue(..)
            | MulScalar(_)
            | DivScalar(_)
            | AddScalar(_)
    )
}

fn exact_binary(op: &Binary) -> bool {
    !matches!(op, Binary::Pow | Binary::Atan2)
}

/// Every op the table defines has an expression for both types (and
/// every other op none), naming exactly its attributes.
#[test]
fn every_table_op_has_an_expression() {
    let mut n = 0;
    for op in &all_unary() {
        let attrs = unary_attrs(op);
        for ty in TYPES {
            let e = unary_expr(op, ty, "x");
            assert_eq!(e.is_some(), table::defined(op), "{op:?} {ty:?}: {e:?}");
            let Some(e) = e else { continue };
            n += 1;
            assert!(e.contains("(x)"), "{op:?}: {e}");
            assert_eq!(e.contains("c0"), !attrs.is_empty(), "{op:?}: {e}");
            assert_eq!(e.contains("c1"), attrs.len() == 2, "{op:?}: {e}");
            let renamed = unary_expr_with(op, ty, "x", &["k7", "k8"]).unwrap();
            assert!(!renamed.contains("c0") && !renamed.contains("c1"), "{renamed}");
        }
        let want: &[f64] = match op {
            Unary::LeakyRelu(_) => &[0.2],
            Unary::ClipByValue(..) => &[-1.0, 2.0],
            Unary::PowScalar(_) => &[1.5],
            Unary::MulScalar(_) => &[-3.0],
            Unary::DivScalar(_) => &[7.0],
            Unary::AddScalar(_) => &[0.25],
            _ => &[],
        };
        assert_eq!(attrs, want, "{op:?}");
    }
    assert_eq!(n, 2 * 50);
    for op in &all_binary() {
        for ty in TYPES {
            let e = binary_expr(op, ty, "a", "b");
            assert_eq!(
                e.is_some(),
                table::defined_binary(op) || is_comparison(op),
                "{op:?} {ty:?}: {e:?}"
            );
            if let Some(e) = e {
                assert!(e.contains("(a)") && e.contains("(b)"), "{op:?}: {e}");
            }
        }
        let logical = matches!(op, Binary::LogicalAnd | Binary::LogicalOr | Binary::LogicalXor);
        assert_eq!(logical_expr(op, "a", "b").is_some(), logical, "{op:?}");
    }
    assert_eq!(logical_not_expr("x"), "(!(x))");
    assert_eq!(CType::F32.name(), "float");
    assert_eq!(CType::F64.name(), "double");
}

/// One (op, type) evaluated by the generated program.
#[derive(Debug)]
enum Op {
    Unary(Unary),
    Binary(Binary),
}

#[derive(Debug)]
struct Case {
    op: Op,
    ty: CType,
    expr: String,
    attrs: Vec<f64>,
}

impl Case {
    /// The C type of the expression's value.
    fn out_type(&self) -> &'static str {
        match &self.op {
            Op::Binary(b) if is_comparison(b) => "bool",
            _ => self.ty.name(),
        }
    }
}

/// Every (table op or comparison, type) with its expression.
fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for op in all_unary().into_iter().filter(table::defined) {
        for ty in TYPES {
            let expr = unary_expr(&op, ty, "x").unwrap();
            let attrs = unary_attrs(&op);
            cases.push(Case {
                op: Op::Unary(op.clone()),
                ty,
                expr,
                attrs,
            });
        }
    }
    for op in all_binary() {
        for ty in TYPES {
            if let Some(expr) = binary_expr(&op, ty, "a", "b") {
                cases.push(Case {
                    op: Op::Binary(op.clone()),
                    ty,
                    expr,
                    attrs: Vec::new(),
                });
            }
        }
    }
    cases
}

/// Inputs across every branch: both signs, zeros, halves, the bounds of
/// relu6 and the clip, the domains' edges, subnormals, the overflow
/// thresholds of exp in both types, huge values, non-finite ones.
fn unary_inputs() -> Vec<f64> {
    let mut xs: Vec<f64> = (0..300).map(|i| (i as f64 - 150.0) * 0.0731).collect();
    xs.extend([
        -0.0, 0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 1.0, -1.0, 2.0, -2.0, 6.0, -6.0, 5.999, 6.001, 0.999_999,
        1.000_001, -0.999_999, 1e-7, -1e-7, 1e-30, -1e-30, 1e-40, -1e-40, 1e-310, -1e-310, 20.0, -20.0, 30.0, -30.0,
        40.0, -40.0, 88.0, 88.8, 89.0, -87.0, -88.0, -104.0, -110.0, 300.0, -300.0, 709.0, 710.0, -745.0, 1e5, -1e5,
        1e10, -1e10, 1e30, -1e30, 3e38, -3e38, 1e300, -1e300,
    ]);
    xs.extend([f64::MAX, f64::MIN_POSITIVE, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]);
    xs
}

/// Pairs of inputs: every pair of a set with zeros of both signs,
/// negative divisors, halves, infinities and NaN, and a sweep.
fn binary_inputs() -> (Vec<f64>, Vec<f64>) {
    let set = [
        f64::NEG_INFINITY,
        -7.5,
        -3.0,
        -2.0,
        -1.0,
        -0.5,
        -0.0,
        0.0,
        1e-30,
        0.3,
        0.5,
        1.0,
        2.0,
        3.0,
        5.0,
        7.5,
        -5.0,
        1e30,
        f64::INFINITY,
        f64::NAN,
    ];
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for &x in &set {
        for &y in &set {
            a.push(x);
            b.push(y);
        }
    }
    let sweep: Vec<f64> = (0..300).map(|i| (i as f64 - 150.0) * 0.0731).collect();
    b.extend(sweep.iter().rev().map(|v| v * 0.7 + 0.1));
    a.extend(sweep);
    (a, b)
}

/// The C++ host program: [`PRELUDE`], a function per case printing the
/// bits of its values on one line, and a `main` reading the inputs
/// (hexadecimal bits of doubles) from stdin.
fn host_program(cases: &[Case]) -> String {
    use std::fmt::Write as _;
    let mut s = String::from(PRELUDE);
    s.push_str(
        "#include <cstdio>\n#include <cstring>\n#include <cstdint>\n#include <type_traits>\n#include <vector>\n\
         static void put(float v) { uint32_t u; memcpy(&u, &v, 4); printf(\"%x \", (unsigned)u); }\n\
         static void put(double v) { uint64_t u; memcpy(&u, &v, 8); printf(\"%llx \", (unsigned long long)u); }\n\
         static void put(bool v) { printf(\"%d \", (int)v); }\n",
    );
    for (i, c) in cases.iter().enumerate() {
        let (t, out, e) = (c.ty.name(), c.out_type(), &c.expr);
        let bind = match c.op {
            Op::Unary(_) => format!("{t} x = ({t})xs[i];"),
            Op::Binary(_) => format!("{t} a = ({t})as[i]; {t} b = ({t})bs[i];"),
        };
        let _ = writeln!(
            s,
            "static void case_{i}(const double* xs, const double* as, const double* bs, size_t n, double c0, \
             double c1) {{\n  (void)xs; (void)as; (void)bs; (void)c0; (void)c1;\n  for (size_t i = 0; i < n; \
             i++) {{\n    {bind}\n    static_assert(std::is_same<std::decay<decltype({e})>::type, {out}>::value, \
             \"case {i}: type\");\n    put({e});\n  }}\n  printf(\"\\n\");\n}}"
        );
    }
    s.push_str(
        "static std::vector<double> read(size_t n) {\n  std::vector<double> v(n);\n  for (size_t i = 0; i < n; i++) \
         {\n    unsigned long long u; if (scanf(\"%llx\", &u) != 1) return v; memcpy(&v[i], &u, 8);\n  }\n  return \
         v;\n}\nint main() {\n  size_t nu, nb;\n  if (scanf(\"%zu %zu\", &nu, &nb) != 2) return 1;\n  \
         std::vector<double> xs = read(nu), as = read(nb), bs = read(nb);\n",
    );
    for (i, c) in cases.iter().enumerate() {
        let n = match c.op {
            Op::Unary(_) => "nu",
            Op::Binary(_) => "nb",
        };
        let a = |k: usize| c.attrs.get(k).map_or("0.0".to_string(), |v| format!("{v:?}"));
        let _ = writeln!(
            s,
            "  case_{i}(xs.data(), as.data(), bs.data(), {n}, {}, {});",
            a(0),
            a(1)
        );
    }
    s.push_str("  return 0;\n}\n");
    s
}

/// The first of `c++` and `g++` that runs.
fn cxx() -> Option<&'static str> {
    ["c++", "g++"].into_iter().find(|c| {
        std::process::Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// A fresh directory under the system's temporary one.
fn temp_dir(what: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!(
        "gradtape-{what}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compiles the C++ `program` with the host's compiler (plain IEEE:
/// no contraction into fused multiply-adds) and runs it on `stdin`,
/// returning its output; `None` (after a printed line) where there is
/// no C++ compiler. The host check of CUDA C: the expressions here,
/// the fused programs' kernels and the optimizers' rules use it.
pub fn run_host_cxx(what: &str, program: &str, stdin: &str) -> Option<String> {
    use std::io::Write as _;
    let Some(cxx) = cxx() else {
        println!("skipped: no C++ compiler for the host check of {what}");
        return None;
    };
    let dir = temp_dir(what);
    let (src, exe) = (dir.join("host.cpp"), dir.join("host"));
    std::fs::write(&src, program).unwrap();
    let out = std::process::Command::new(cxx)
        .args(["-O1", "-std=c++17", "-ffp-contract=off", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{what}: {cxx} failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut child = std::process::Command::new(&exe)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let run = child.wait_with_output().unwrap();
    assert!(run.status.success(), "{what}: the host program failed");
    let _ = std::fs::remove_dir_all(&dir);
    Some(String::from_utf8(run.stdout).unwrap())
}

/// Distance in ulps between two non-NaN floats (of one type, as f64
/// holding an `f32` exactly where `f32`): the count of values of the
/// type between them; zeros of both signs are the same point.
fn ulps(ty: CType, x: f64, y: f64) -> u64 {
    fn ordered64(v: f64) -> i128 {
        let i = v.to_bits() as i64;
        i128::from(if i < 0 { i64::MIN.wrapping_sub(i) } else { i })
    }
    fn ordered32(v: f32) -> i128 {
        let i = v.to_bits() as i32;
        i128::from(if i < 0 { i32::MIN.wrapping_sub(i) } else { i })
    }
    let d = match ty {
        CType::F32 => ordered32(x as f32) - ordered32(y as f32),
        CType::F64 => ordered64(x) - ordered64(y),
    };
    d.unsigned_abs() as u64
}

/// The table's value of a case at one input (as f64; bools 0 or 1).
fn reference(c: &Case, x: f64, y: f64) -> f64 {
    fn compare<T: PartialOrd>(op: &Binary, a: T, b: T) -> f64 {
        f64::from(match op {
            Binary::Equal => a == b,
            Binary::NotEqual => a != b,
            Binary::Less => a < b,
            Binary::LessEqual => a <= b,
            Binary::Greater => a > b,
            Binary::GreaterEqual => a >= b,
            _ => unreachable!(),
        })
    }
    match (&c.op, c.ty) {
        (Op::Unary(op), CType::F64) => table::unary_f64(op, x),
        (Op::Unary(op), CType::F32) => f64::from(table::unary_one::<f32>(op, x as f32)),
        (Op::Binary(op), CType::F64) if is_comparison(op) => compare(op, x, y),
        (Op::Binary(op), CType::F32) if is_comparison(op) => compare(op, x as f32, y as f32),
        (Op::Binary(op), CType::F64) => table::binary_f64(op, x, y),
        (Op::Binary(op), CType::F32) => {
            let mut out = [0.0f32];
            table::binary(op, &[x as f32], &[y as f32], &mut out);
            f64::from(out[0])
        }
    }
}

/// An accurate value where the table's function is not: its `asinh`,
/// `acosh` and `atanh` are Rust's, formulas that overflow for huge `|x|`
/// (`asinh`, `acosh`) or lose digits to cancellation near 1 (`acosh`,
/// `atanh`, thousands of ulps), where CUDA's (and the C library's) are
/// accurate: those are checked against `libm`'s too.
fn accurate(c: &Case, x: f64) -> Option<f64> {
    let Op::Unary(op) = &c.op else { return None };
    let v = (x as f32, x);
    let (f32_value, f64_value) = match op {
        Unary::Asinh => (libm::asinhf(v.0), libm::asinh(v.1)),
        Unary::Acosh => (libm::acoshf(v.0), libm::acosh(v.1)),
        Unary::Atanh => (libm::atanhf(v.0), libm::atanh(v.1)),
        _ => return None,
    };
    Some(match c.ty {
        CType::F32 => f64::from(f32_value),
        CType::F64 => f64_value,
    })
}

/// Parses a printed value of a case: bits of its type, or a bool.
fn parse(c: &Case, s: &str) -> f64 {
    match (c.out_type(), c.ty) {
        ("bool", _) => s.parse::<u8>().map(f64::from).unwrap(),
        (_, CType::F32) => f64::from(f32::from_bits(u32::from_str_radix(s, 16).unwrap())),
        (_, CType::F64) => f64::from_bits(u64::from_str_radix(s, 16).unwrap()),
    }
}

/// Whether `got` is close enough to the table's `want` for case `c`.
fn agrees(c: &Case, got: f64, want: f64) -> bool {
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    let exact = match &c.op {
        Op::Unary(op) => exact_unary(op),
        Op::Binary(op) => exact_binary(op),
    };
    if exact {
        return got.to_bits() == want.to_bits();
    }
    if got.is_infinite() || want.is_infinite() {
        return got == want;
    }
    // the table's vectorised f32 functions: within a few ulps, or an
    // absolute 1e-6 where the value passes through zero
    ulps(c.ty, got, want) <= 4 || (c.ty == CType::F32 && (got - want).abs() <= 1e-6)
}

/// The expressions compiled by the host's C++ compiler, over a grid of
/// inputs, against the table: every op, both types.
#[test]
fn host_cxx_agrees_with_the_table() {
    let cases = cases();
    let xs = unary_inputs();
    let (a, b) = binary_inputs();
    let mut input = format!("{} {}\n", xs.len(), a.len());
    for v in xs.iter().chain(&a).chain(&b) {
        input.push_str(&format!("{:x}\n", v.to_bits()));
    }
    let Some(text) = run_host_cxx("cuda-expr", &host_program(&cases), &input) else {
        return;
    };
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), cases.len());
    let mut bad = Vec::new();
    let mut worst = Vec::new();
    for (c, line) in cases.iter().zip(&lines) {
        let mut most = 0;
        let vals: Vec<&str> = line.split_whitespace().collect();
        let inputs: Vec<(f64, f64)> = match c.op {
            Op::Unary(_) => xs.iter().map(|&x| (x, 0.0)).collect(),
            Op::Binary(_) => a.iter().copied().zip(b.iter().copied()).collect(),
        };
        assert_eq!(vals.len(), inputs.len(), "{c:?}");
        for (&(x, y), v) in inputs.iter().zip(&vals) {
            let (got, want) = (parse(c, v), reference(c, x, y));
            if got.is_finite() && want.is_finite() && accurate(c, x).is_none() {
                most = most.max(ulps(c.ty, got, want));
            }
            if !agrees(c, got, want) && !accurate(c, x).is_some_and(|a| agrees(c, got, a)) {
                bad.push(format!(
                    "{:?} {:?} at ({x:e}, {y:e}): C {got:e}, table {want:e} ({} ulps)",
                    c.op,
                    c.ty,
                    ulps(c.ty, got, want)
                ));
            }
        }
        if most > 0 {
            worst.push(format!("{:?} {:?}: {most}", c.op, c.ty));
        }
    }
    println!("ulps from the table, where not 0: {}", worst.join(", "));
    assert!(bad.is_empty(), "{} disagreements:\n{}", bad.len(), bad.join("\n"));
}

/// The CUDA source of a kernel per case (`out[i] = expr(in[i])`).
#[cfg(feature = "cuda")]
fn cuda_program(cases: &[Case]) -> String {
    use std::fmt::Write as _;
    let mut s = String::from(PRELUDE);
    for (i, c) in cases.iter().enumerate() {
        let (t, out, e) = (c.ty.name(), c.out_type(), &c.expr);
        let (params, bind) = match c.op {
            Op::Unary(_) => (format!("const {t}* in"), "const auto x = in[i];"),
            Op::Binary(_) => (
                format!("const {t}* in_a, const {t}* in_b"),
                "const auto a = in_a[i], b = in_b[i];",
            ),
        };
        let _ = writeln!(
            s,
            "extern \"C\" __global__ void gt_case_{i}({params}, {out}* out, unsigned long long n, double c0, \
             double c1) {{\n  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n  \
             if (i < n) {{ {bind} out[i] = {e}; }}\n}}"
        );
    }
    s
}

/// NVRTC compiles a kernel of every expression (where it is found).
#[cfg(feature = "cuda")]
#[test]
fn nvrtc_compiles_every_expression() {
    use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions};
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("skipped: NVRTC not found");
        return;
    }
    let cases = cases();
    let src = cuda_program(&cases);
    let opts = CompileOptions {
        arch: Some("compute_90"),
        ..Default::default()
    };
    match compile_ptx_with_opts(&src, opts) {
        Ok(ptx) => {
            let ptx = ptx.to_src();
            for i in 0..cases.len() {
                assert!(
                    ptx.contains(&format!("gt_case_{i}(")),
                    "kernel {i} missing from the PTX"
                );
            }
        }
        Err(CompileError::CompileError { log, .. }) => {
            panic!("NVRTC failed:\n{}\n--- source:\n{src}", log.to_string_lossy())
        }
        Err(e) => panic!("NVRTC failed: {e}"),
    }
}
