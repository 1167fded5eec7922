//! Checkpoints (safetensors) and `.npy` files. The `.npy` fixtures in
//! `tests/data/npy/` were written by NumPy 2.4.6's `np.save`
//! (`tests/reference/npy_fixtures.py`): reading them checks the reader, and
//! writing the same arrays must give NumPy's bytes exactly.

use std::path::PathBuf;

use gradtape::io::{self, load_safetensors, read_npy, save_safetensors};
use gradtape::nn::{self, Activation, Dense, Layer, Module, Sequential};
use gradtape::optim::{Adam, Optimizer};
use gradtape::{Complex, DType, Error, GradientTape, Result, Rng, Tensor, Variable};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/npy")
        .join(format!("{name}.npy"))
}

/// A fresh directory under the system's temporary one.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gradtape-io-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn npy_files_written_by_numpy_are_read() -> Result<()> {
    let t = read_npy(fixture("f32_2x3"))?;
    assert_eq!((t.dtype(), t.shape()), (DType::F32, &[2usize, 3][..]));
    assert_eq!(t.to_vec::<f32>()?, vec![0.0, 0.25, 0.5, 0.75, 1.0, 1.25]);
    let t = read_npy(fixture("f64_scalar"))?;
    assert_eq!((t.shape(), t.to_scalar::<f64>()?), (&[][..], 3.25));
    assert_eq!(read_npy(fixture("i64_vec"))?.to_vec::<i64>()?, vec![-3, 0, 7]);
    let t = read_npy(fixture("i32_2x3x4"))?;
    assert_eq!(t.shape(), &[2, 3, 4]);
    assert_eq!(t.to_vec::<i32>()?, (0..24).map(|i| i - 5).collect::<Vec<_>>());
    assert_eq!(
        read_npy(fixture("bool_2x2"))?.to_vec::<bool>()?,
        vec![true, false, false, true]
    );
    assert_eq!(
        read_npy(fixture("c64_vec"))?.to_vec::<Complex<f32>>()?,
        vec![Complex::new(1.0, 2.0), Complex::new(0.0, -0.5)]
    );
    assert_eq!(
        read_npy(fixture("c128_vec"))?.to_vec::<Complex<f64>>()?,
        vec![Complex::new(0.25, -1.0)]
    );
    assert_eq!(read_npy(fixture("f64_empty"))?.shape(), &[0, 3]);
    // Fortran order is transposed into row-major order
    let t = read_npy(fixture("f64_fortran"))?;
    assert_eq!(
        (t.shape(), t.to_vec::<f64>()?),
        (&[2usize, 3][..], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    );
    // big-endian
    assert_eq!(
        read_npy(fixture("f8_big_endian"))?.to_vec::<f64>()?,
        vec![0.5, 1.5, 2.5, 3.5]
    );
    Ok(())
}

#[test]
fn npy_files_written_here_are_numpys_bytes() -> Result<()> {
    for name in [
        "f32_2x3",
        "f64_scalar",
        "i64_vec",
        "i32_2x3x4",
        "bool_2x2",
        "c64_vec",
        "c128_vec",
        "f64_empty",
    ] {
        let want = std::fs::read(fixture(name)).unwrap();
        let t = io::npy_from_bytes(&want)?;
        assert_eq!(io::npy_to_bytes(&t)?, want, "{name}");
    }
    // a view (transposed) is written in row-major order of its shape
    let t = Tensor::from_vec((0..6).map(f64::from).collect::<Vec<_>>(), &[3, 2])?.transpose()?;
    let dir = scratch("npy");
    io::write_npy(dir.join("t.npy"), &t)?;
    let back = read_npy(dir.join("t.npy"))?;
    assert_eq!(
        (back.shape(), back.to_vec::<f64>()?),
        (&[2usize, 3][..], t.to_vec::<f64>()?)
    );
    std::fs::remove_dir_all(dir).unwrap();
    Ok(())
}

#[test]
fn bad_npy_input_is_an_error_naming_the_problem() {
    let err = read_npy(fixture("u1_unsupported")).unwrap_err();
    assert!(err.to_string().contains("'|u1'"), "{err}");
    let err = read_npy(fixture("no_such_file")).unwrap_err();
    assert!(
        err.to_string().contains("read_npy") && err.to_string().contains("no_such_file"),
        "{err}"
    );
    assert!(io::npy_from_bytes(b"not numpy at all").is_err());
    let mut cut = std::fs::read(fixture("f32_2x3")).unwrap();
    cut.truncate(cut.len() - 4);
    let err = io::npy_from_bytes(&cut).unwrap_err();
    assert!(err.to_string().contains("bytes of data"), "{err}");
    // a header whose shape overflows is an error, not a panic
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }\n";
    let mut huge = b"\x93NUMPY\x01\x00".to_vec();
    huge.extend_from_slice(&(header.len() as u16).to_le_bytes());
    huge.extend_from_slice(header.as_bytes());
    huge.extend_from_slice(&[0u8; 24]);
    let err = io::npy_from_bytes(&huge).unwrap_err();
    assert!(matches!(err, Error::ShapeOverflow { op: "read_npy", .. }), "{err}");
}

fn model(seed: u64) -> Result<Sequential> {
    nn::reset_names();
    let mut rng = Rng::new(seed);
    Ok(Sequential::new()
        .add(Dense::builder(3, 4).activation(Activation::Tanh).build(&mut rng)?)
        .add(Dense::new(4, 2, &mut rng)?))
}

fn train_steps(m: &Sequential, opt: &mut Adam, steps: usize) -> Result<()> {
    let x = Tensor::from_vec((0..12).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>(), &[4, 3])?;
    let vars = m.trainable_variables();
    for _ in 0..steps {
        let tape = GradientTape::new();
        let loss = tape.record(|| m.forward(&x, true)?.square()?.mean_all())?;
        opt.minimize(&tape, &loss, &vars)?;
    }
    Ok(())
}

fn values(vs: &[Variable]) -> Result<Vec<Vec<f64>>> {
    Ok(vs.iter().map(|v| v.read().to_vec_f64()).collect())
}

/// A model and its optimizer saved after two steps and loaded into fresh
/// ones continue exactly as the originals do.
#[test]
fn a_checkpoint_restores_model_and_optimizer_state() -> Result<()> {
    let dir = scratch("ckpt");
    let path = dir.join("ckpt.safetensors");
    let a = model(0)?;
    let mut opt_a = Adam::new(0.01).with_name("adam");
    train_steps(&a, &mut opt_a, 2)?;
    let mut vars = a.variables();
    vars.extend(opt_a.variables());
    save_safetensors(&path, &vars)?;

    let b = model(99)?; // other initial weights, same names
    let mut opt_b = Adam::new(0.01).with_name("adam");
    opt_b.build(&b.trainable_variables())?;
    let mut vars_b = b.variables();
    vars_b.extend(opt_b.variables());
    assert_ne!(values(&b.variables())?, values(&a.variables())?);
    assert!(load_safetensors(&path, &vars_b)?.is_empty());
    assert_eq!(values(&vars_b)?, values(&vars)?);
    assert_eq!(opt_b.iterations(), 2);

    train_steps(&a, &mut opt_a, 3)?;
    train_steps(&b, &mut opt_b, 3)?;
    assert_eq!(values(&b.variables())?, values(&a.variables())?);

    // the model alone can be loaded from the same file; the rest is reported
    let c = model(5)?;
    let unused = load_safetensors(&path, &c.variables())?;
    assert_eq!(unused.len(), opt_a.variables().len());
    assert!(unused.iter().all(|n| n.starts_with("adam/")));
    std::fs::remove_dir_all(dir).unwrap();
    Ok(())
}

#[test]
fn loading_checks_every_variable_before_changing_any() -> Result<()> {
    let dir = scratch("mismatch");
    let path = dir.join("m.safetensors");
    let w = Variable::builder(Tensor::vector(&[1.0f32, 2.0])).name("w").build();
    let b = Variable::builder(Tensor::vector(&[3.0f32])).name("b").build();
    save_safetensors(&path, &[w.clone(), b.clone()])?;

    let w2 = Variable::builder(Tensor::vector(&[0.0f32, 0.0])).name("w").build();
    // a missing name
    let c = Variable::builder(Tensor::vector(&[0.0f32])).name("c").build();
    let err = load_safetensors(&path, &[w2.clone(), c]).unwrap_err();
    assert!(
        err.to_string().contains("'c'") && err.to_string().contains("load_safetensors"),
        "{err}"
    );
    assert_eq!(w2.read().to_vec::<f32>()?, vec![0.0, 0.0], "nothing assigned on error");
    // a shape mismatch
    let b3 = Variable::builder(Tensor::vector(&[0.0f32; 3])).name("b").build();
    let err = load_safetensors(&path, &[w2.clone(), b3]).unwrap_err();
    assert!(
        matches!(&err, Error::VariableMismatch { name, got, .. } if name == "b" && got == &[1]),
        "{err}"
    );
    assert_eq!(w2.read().to_vec::<f32>()?, vec![0.0, 0.0]);
    // a dtype mismatch
    let b64 = Variable::builder(Tensor::vector(&[0.0f64])).name("b").build();
    let err = load_safetensors(&path, &[b64]).unwrap_err();
    assert!(
        err.to_string().contains("dtype f64") && err.to_string().contains("dtype f32"),
        "{err}"
    );
    // duplicate names cannot be saved
    let err = save_safetensors(&path, &[w.clone(), w.clone()]).unwrap_err();
    assert!(err.to_string().contains("'w'"), "{err}");
    // not a safetensors file
    std::fs::write(&path, b"garbage").unwrap();
    assert!(load_safetensors(&path, &[w2]).is_err());
    // complex128 has no safetensors dtype
    let z = Variable::builder(Tensor::vector(&[Complex::new(1.0f64, 0.0)]))
        .name("z")
        .build();
    assert!(save_safetensors(&path, &[z]).is_err());
    std::fs::remove_dir_all(dir).unwrap();
    Ok(())
}

#[test]
fn tensors_of_every_stored_dtype_round_trip() -> Result<()> {
    let dir = scratch("dtypes");
    let path = dir.join("t.safetensors");
    let f = Tensor::from_vec(vec![1.5f32, -2.0, 0.25, 8.0], &[2, 2])?;
    let d = Tensor::scalar(std::f64::consts::PI);
    let i = Tensor::vector(&[i64::MIN, 0, i64::MAX]);
    let j = Tensor::vector(&[-7i32]);
    let b = Tensor::vector(&[true, false, true]);
    let c = Tensor::vector(&[Complex::new(1.0f32, -1.0)]);
    io::write_safetensors(
        &path,
        &[("f", &f), ("d", &d), ("i", &i), ("j", &j), ("b", &b), ("c", &c)],
    )?;
    let back = io::read_safetensors(&path)?;
    let names: Vec<&str> = back.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["b", "c", "d", "f", "i", "j"]);
    let get = |n: &str| back.iter().find(|(m, _)| m == n).unwrap().1.clone();
    assert_eq!(get("f").to_vec::<f32>()?, f.to_vec::<f32>()?);
    assert_eq!(get("f").shape(), &[2, 2]);
    assert_eq!(get("d").to_scalar::<f64>()?, std::f64::consts::PI);
    assert_eq!(get("i").to_vec::<i64>()?, i.to_vec::<i64>()?);
    assert_eq!(get("j").to_vec::<i32>()?, vec![-7]);
    assert_eq!(get("b").to_vec::<bool>()?, vec![true, false, true]);
    assert_eq!(get("c").to_vec::<Complex<f32>>()?, vec![Complex::new(1.0, -1.0)]);
    let err = io::read_safetensors(dir.join("missing.safetensors")).unwrap_err();
    assert!(err.to_string().contains("missing.safetensors"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
    Ok(())
}

/// A version 1.0 `.npy` file with `header` (padded as NumPy does) and
/// `data`.
fn npy_with_header(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(h.len() as u16).to_le_bytes());
    b.extend_from_slice(h.as_bytes());
    b.extend_from_slice(data);
    b
}

/// The header is a Python dict literal read as NumPy reads it: exactly the
/// keys 'descr', 'fortran_order' and 'shape', the shape a tuple of
/// non-negative ints. Before, keys were found by substring search (an
/// extra key whose value held `'shape': (1, 2)` set the shape), `(3)` and
/// `((2,3),)` were read as shapes, and an empty or multi-byte descr
/// panicked in `str::split_at`. Each header below is refused by NumPy 2
/// (`np.lib.format.read_array`), except the accepted ones at the end.
#[test]
fn malformed_npy_headers_are_errors() -> Result<()> {
    let f4x6 = [0u8; 24];
    let bad = [
        "",
        "{}",
        "{'descr': '', 'fortran_order': False, 'shape': (6,), }",
        "{'descr': 'é', 'fortran_order': False, 'shape': (6,), }",
        "{'descr': '\u{1F600}f4', 'fortran_order': False, 'shape': (6,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': ((2, 3),), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': \"'shape': (1, 2)\"}",
        "{'descr': '<f4', 'fortran_order': False, 'note': 'x', 'shape': (6,)}",
        "{'descr': '<f4', 'fortran_order': False}",
        "{'descr': '<f4', 'shape': (6,)}",
        "{'fortran_order': False, 'shape': (6,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': [6], }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6.0,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (06,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6,,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }",
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (6,), }",
        "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (6,), }",
        "{'descr': <f4, 'fortran_order': False, 'shape': (6,), }",
        "{'descr': '<f4, 'fortran_order': False, 'shape': (6,), }",
        "{'descr': '<f4' 'fortran_order': False, 'shape': (6,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), ,}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), } x",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), ",
        "['descr', '<f4']",
        "'shape': (6,)",
    ];
    for h in bad {
        let r = io::npy_from_bytes(&npy_with_header(h, &f4x6));
        let e = r.as_ref().err().unwrap_or_else(|| panic!("accepted {h:?}: {r:?}"));
        assert!(e.to_string().contains("read_npy"), "{h:?}: {e}");
    }
    // the shape's element count is checked
    let r = io::npy_from_bytes(&npy_with_header(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4), }",
        &[],
    ));
    assert!(matches!(r, Err(Error::ShapeOverflow { .. })), "{r:?}");
    // what NumPy accepts: any key order, no trailing comma, double quotes,
    // spacing, Python 2's `L` suffix, a key repeated (the last value wins)
    let good = [
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
            vec![2, 3],
        ),
        ("{'shape': (6,), 'fortran_order': False, 'descr': '<f4'}", vec![6]),
        (
            "{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(1,2,3,)}",
            vec![1, 2, 3],
        ),
        (
            "{ 'descr' : 'f4' ,\n 'fortran_order' : False , 'shape' : ( 3 , 2 ) }",
            vec![3, 2],
        ),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (6L,), }", vec![6]),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1_2,), 'shape': (6,)}",
            vec![6],
        ),
    ];
    for (h, shape) in good {
        let t = io::npy_from_bytes(&npy_with_header(h, &f4x6))?;
        assert_eq!(t.shape(), shape.as_slice(), "{h:?}");
    }
    let t = io::npy_from_bytes(&npy_with_header(
        "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
        &2.5f64.to_le_bytes(),
    ))?;
    assert_eq!((t.shape(), t.to_scalar::<f64>()?), (&[] as &[usize], 2.5));
    Ok(())
}

/// safetensors reserves `__metadata__` for the header's metadata: a
/// variable of that name made a file that could not be loaded back.
#[test]
fn the_reserved_safetensors_name_is_refused_on_save() {
    let v = Variable::builder(Tensor::vector(&[1.0f32]))
        .name("__metadata__")
        .build();
    let dir = scratch("reserved");
    let e = save_safetensors(dir.join("m.safetensors"), &[v])
        .unwrap_err()
        .to_string();
    assert!(e.contains("save_safetensors") && e.contains("__metadata__"), "{e}");
    assert!(!dir.join("m.safetensors").exists());
    let t = Tensor::scalar(1.0f32);
    let e = io::write_safetensors(dir.join("t.safetensors"), &[("__metadata__", &t)]).unwrap_err();
    assert!(e.to_string().contains("reserves"), "{e}");
}
