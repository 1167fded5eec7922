//! `crop_and_resize`, `extract_patches`, `resize_images` with the bicubic
//! and area methods, and `fft3d`, `ifft3d`, `rfft3d`, `irfft3d` against
//! TensorFlow 2.21: values and gradients (of a weighted sum, or seeded
//! with a complex cotangent for a complex result), then each op traced
//! against eager, and the errors of bad arguments.
//!
//! The numbers are printed by `tests/reference/tf_image_more.py` into
//! `tests/data/tf_image_more.txt` (see the script for every case). Their
//! sources: `tf` is TensorFlow in f64 / complex128 (`extract_patches`,
//! `fft3d`, `ifft3d`); `tf-f32` is TensorFlow's float32 numbers where its
//! kernels are float32 only (`CropAndResize` and its two gradients,
//! `ResizeBicubic` and its gradient, `ResizeArea`, which has no gradient in
//! TensorFlow), compared here in f32; `ref-f64` is the same cases in f64
//! by a JAX / NumPy transcription of TensorFlow's kernels that the script
//! checks against TensorFlow's float32 numbers (values and gradients);
//! `jax` is the gradients of `rfft3d` and `irfft3d`, which TensorFlow does
//! not define, by JAX (the script checks the same route against
//! TensorFlow's own `rfft2d` / `irfft2d` gradients), their values
//! TensorFlow's.

use std::collections::HashMap;

use gradtape::{
    check_traced, Complex, DType, GradientOptions, GradientTape, Padding, ResizeMethod, Result, Tensor,
    TracedCheckOptions,
};

use super::tf_util::{agrees, report};

type C = Complex<f64>;

const DATA: &str = include_str!("../data/tf_image_more.txt");

/// One tensor of a line: its kind (`r`, `c`, `i`), shape and values (complex
/// ones as pairs).
struct Data {
    kind: char,
    shape: Vec<usize>,
    values: Vec<C>,
}

fn parse(field: &str) -> (String, Data) {
    let mut it = field.splitn(4, '=');
    let (name, kind, shape, values) = (
        it.next().unwrap(),
        it.next().unwrap(),
        it.next().unwrap(),
        it.next().unwrap(),
    );
    let shape: Vec<usize> = if shape.is_empty() {
        Vec::new()
    } else {
        shape.split('x').map(|d| d.parse().unwrap()).collect()
    };
    let values = if values.is_empty() {
        Vec::new()
    } else if kind == "c" {
        values
            .split(';')
            .map(|p| {
                let (re, im) = p.split_once(',').unwrap();
                C::new(re.parse().unwrap(), im.parse().unwrap())
            })
            .collect()
    } else {
        values.split(',').map(|v| C::new(v.parse().unwrap(), 0.0)).collect()
    };
    let kind = kind.chars().next().unwrap();
    (name.to_string(), Data { kind, shape, values })
}

impl Data {
    /// The tensor: complex128, i32 indices, or reals in `real`.
    fn tensor(&self, real: DType) -> Tensor {
        match self.kind {
            'c' => Tensor::from_vec(self.values.clone(), &self.shape).unwrap(),
            'i' => Tensor::from_vec(self.values.iter().map(|z| z.re as i32).collect(), &self.shape).unwrap(),
            _ => Tensor::from_vec(self.values.iter().map(|z| z.re).collect(), &self.shape)
                .unwrap()
                .cast(real)
                .unwrap(),
        }
    }
}

/// The value of `key` in a config `k=v;k=v`.
fn arg<'a>(cfg: &'a str, key: &str) -> &'a str {
    cfg.split(';')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key} in {cfg}"))
}

fn nums(s: &str) -> Vec<i64> {
    s.split(['x', ',']).map(|v| v.parse().unwrap()).collect()
}

fn pair(s: &str) -> [i64; 2] {
    let v = nums(s);
    [v[0], v[1]]
}

fn lengths(cfg: &str) -> Option<[usize; 3]> {
    let l = arg(cfg, "len");
    (l != "none").then(|| {
        let v = nums(l);
        [v[0] as usize, v[1] as usize, v[2] as usize]
    })
}

/// Runs `op` of a line on its inputs `xs` (`x`, then `boxes` and `idx`).
fn run(op: &str, cfg: &str, xs: &[Tensor]) -> Result<Tensor> {
    let x = &xs[0];
    let size = || {
        let s = nums(arg(cfg, "size"));
        [s[0] as usize, s[1] as usize]
    };
    match op {
        "crop_and_resize" => {
            let method = match arg(cfg, "method") {
                "bilinear" => ResizeMethod::Bilinear,
                _ => ResizeMethod::Nearest,
            };
            let extrap: f64 = arg(cfg, "extrap").parse().unwrap();
            x.crop_and_resize(&xs[1], &xs[2], pair(arg(cfg, "crop")), method, extrap)
        }
        "extract_patches" => {
            let padding = if arg(cfg, "padding") == "SAME" {
                Padding::Same
            } else {
                Padding::Valid
            };
            let g = |k| pair(arg(cfg, k));
            x.extract_patches(g("sizes"), g("strides"), g("rates"), padding)
        }
        "resize_bicubic" => x.resize_images(size(), ResizeMethod::Bicubic),
        "resize_area" => x.resize_images(size(), ResizeMethod::Area),
        "fft3d" => x.fft3d(),
        "ifft3d" => x.ifft3d(),
        "rfft3d" => x.rfft3d(lengths(cfg)),
        "irfft3d" => x.irfft3d(lengths(cfg)),
        _ => panic!("no op {op}"),
    }
}

/// The cotangent of `y`: w_i = 1 + i/2, minus 0.5i (i mod 3) for a complex y.
fn cotangent(y: &Tensor) -> Result<Tensor> {
    let k = y.numel();
    if y.dtype().is_complex() {
        let w: Vec<C> = (0..k)
            .map(|i| C::new(1.0 + 0.5 * i as f64, -0.5 * (i % 3) as f64))
            .collect();
        Tensor::from_vec(w, y.shape())
    } else {
        let w: Vec<f64> = (0..k).map(|i| 1.0 + 0.5 * i as f64).collect();
        Tensor::from_vec(w, y.shape())?.cast(y.dtype())
    }
}

fn values(t: &Tensor) -> Result<Vec<C>> {
    if t.dtype().is_complex() {
        t.to_vec::<C>()
    } else {
        Ok(t.cast(DType::F64)?
            .to_vec::<f64>()?
            .into_iter()
            .map(|v| C::new(v, 0.0))
            .collect())
    }
}

/// Every part within `rel` of the largest modulus of `want`.
fn all_close(got: &[C], want: &[C], rel: f64) -> bool {
    let scale = want.iter().fold(0.0f64, |m, z| m.max(z.norm()));
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(a, b)| agrees(a.re, b.re, rel, scale) && agrees(a.im, b.im, rel, scale))
}

/// The lines of the data file: op, config, source, tensors by name.
fn lines() -> Vec<(&'static str, &'static str, &'static str, HashMap<String, Data>)> {
    DATA.lines()
        .map(|line| {
            let mut f = line.split('|');
            let (op, cfg, src) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
            (op, cfg, src, f.map(parse).collect())
        })
        .collect()
}

/// The inputs of a line (`x`, and `boxes`, `idx` where present), reals in
/// `real`.
fn inputs(t: &HashMap<String, Data>, real: DType) -> Vec<Tensor> {
    ["x", "boxes", "idx"]
        .iter()
        .filter_map(|k| t.get(*k).map(|d| d.tensor(real)))
        .collect()
}

#[test]
fn image_and_fft3d_ops_match_tensorflow() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    let mut ops = std::collections::BTreeSet::new();
    for (op, cfg, src, t) in lines() {
        // float32 lines in f32, within a few float32 roundings (1e-6) of
        // the largest term (all agree to 4e-7 today: the coordinates are
        // computed in TensorFlow's order, so the same pixels and weights
        // are picked), the others to 1e-12
        let (real, rel) = if src == "tf-f32" {
            (DType::F32, 1e-6)
        } else {
            (DType::F64, 1e-12)
        };
        let xs = inputs(&t, real);
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&xs[0]);
            if xs.len() > 1 {
                tape.watch(&xs[1]);
            }
            run(op, cfg, &xs)
        })?;
        let w = cotangent(&y)?;
        let sources: Vec<Tensor> = xs.iter().take(2).cloned().collect();
        let g = tape.gradient_with(&y, &sources[..], GradientOptions::default().output_gradients(vec![w]))?;
        let mut compare = |what: &str, got: Option<Tensor>, rel: f64| -> Result<()> {
            let Some(want) = t.get(what) else { return Ok(()) };
            checked += 1;
            let ok = match &got {
                Some(v) => v.shape() == want.shape.as_slice() && all_close(&values(v)?, &want.values, rel),
                None => false,
            };
            if !ok {
                bad.push(format!(
                    "{op} {cfg} {what} ({src}): got {:?}, want {:?}",
                    got.map(|v| values(&v)),
                    want.values
                ));
            }
            Ok(())
        };
        assert_eq!(y.dtype().is_complex(), t["y"].kind == 'c', "{op}: the result's dtype");
        if !y.dtype().is_complex() {
            assert_eq!(y.dtype(), real, "{op} {cfg}: the result's dtype");
        }
        compare("y", Some(y), rel)?;
        compare("dx", g[0].clone(), rel)?;
        compare("dboxes", g.get(1).cloned().flatten(), rel)?;
        ops.insert(format!("{op} {src}"));
    }
    assert_eq!(ops.len(), 11, "the ops and sources of the data file: {ops:?}");
    report(checked, 180, &bad);
    Ok(())
}

/// The data file's f64 cases traced: values bit for bit, gradients (and
/// second derivatives) through the call and inside the trace equal to
/// eager, on inputs other than those traced (`check_traced`).
#[test]
fn traced_equals_eager() -> Result<()> {
    let mut done = std::collections::BTreeSet::new();
    for (op, cfg, src, t) in lines() {
        if src == "tf-f32" {
            continue;
        }
        let xs = inputs(&t, DType::F64);
        // differentiated inputs are the arguments; box indices are fixed
        let (args, idx) = if op == "crop_and_resize" {
            (xs[..2].to_vec(), Some(xs[2].clone()))
        } else {
            (xs[..1].to_vec(), None)
        };
        let (op_s, cfg_s) = (op.to_string(), cfg.to_string());
        let f = move |a: &[Tensor]| -> Result<Tensor> {
            let mut all = a.to_vec();
            all.extend(idx.clone());
            let y = run(&op_s, &cfg_s, &all)?;
            // a real loss of a complex result: its squared modulus
            if y.dtype().is_complex() {
                y.mul(&y.conj()?)?.real()
            } else {
                Ok(y)
            }
        };
        let r = check_traced(f, &args, &TracedCheckOptions::default())
            .unwrap_or_else(|e| panic!("{op} {cfg}: traced differs from eager: {e}"));
        assert!(r.values > 0 || op == "extract_patches", "{op} {cfg}: nothing compared");
        done.insert(op);
    }
    assert_eq!(done.len(), 8, "{done:?}");
    Ok(())
}

/// Box indices given to a traced function are checked each time its graph
/// runs, not only when it was traced.
#[test]
fn traced_crop_checks_its_box_indices_on_every_call() -> Result<()> {
    let f = gradtape::function(|(img, boxes, idx): &(Tensor, Tensor, Tensor)| {
        img.crop_and_resize(boxes, idx, [3, 2], ResizeMethod::Bilinear, 0.5)
    });
    let img = Tensor::from_vec(
        (0..2 * 4 * 5 * 2).map(|v| (v as f64 * 0.37).sin()).collect(),
        &[2, 4, 5, 2],
    )?;
    let boxes = Tensor::from_vec(vec![0.11, 0.23, 0.87, 0.71, 0.52, -0.13, 0.09, 0.66], &[2, 4])?;
    let idx = Tensor::vector(&[1i64, 0]);
    let y = f.call(&(img.clone(), boxes.clone(), idx.clone()))?;
    let eager = img.crop_and_resize(&boxes, &idx, [3, 2], ResizeMethod::Bilinear, 0.5)?;
    assert_eq!(y.to_vec::<f64>()?, eager.to_vec::<f64>()?);
    let other = Tensor::vector(&[0i64, 0]);
    let y2 = f.call(&(img.clone(), boxes.clone(), other.clone()))?;
    let eager2 = img.crop_and_resize(&boxes, &other, [3, 2], ResizeMethod::Bilinear, 0.5)?;
    assert_eq!(y2.to_vec::<f64>()?, eager2.to_vec::<f64>()?);
    assert_ne!(y2.to_vec::<f64>()?, y.to_vec::<f64>()?);
    let err = f
        .call(&(img, boxes, Tensor::vector(&[0i64, 2])))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("crop_and_resize") && err.contains("box_indices[1] = 2"),
        "{err}"
    );
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

/// The error of a call: its message must name the op and mention `what`.
fn fails(r: Result<Tensor>, op: &str, what: &str) {
    match r {
        Ok(t) => panic!("{op}: expected an error mentioning {what:?}, got shape {:?}", t.shape()),
        Err(e) => {
            let m = e.to_string();
            assert!(
                m.contains(op) && m.contains(what),
                "{op}: {m:?} should mention {what:?}"
            );
        }
    }
}

#[test]
fn bad_arguments_are_errors() -> Result<()> {
    let img = Tensor::zeros(&[2, 4, 5, 3], DType::F32);
    let boxes = Tensor::from_vec(vec![0.1f32, 0.2, 0.7, 0.9], &[1, 4])?;
    let idx = Tensor::vector(&[1i32]);
    let bl = ResizeMethod::Bilinear;
    let cr = "crop_and_resize";
    fails(
        img.reshape(&[8, 5, 3])?.crop_and_resize(&boxes, &idx, [2, 2], bl, 0.0),
        cr,
        "[8, 5, 3]",
    );
    fails(
        img.crop_and_resize(&boxes.reshape(&[4])?, &idx, [2, 2], bl, 0.0),
        cr,
        "boxes",
    );
    fails(
        img.crop_and_resize(&boxes, &Tensor::vector(&[0i32, 1]), [2, 2], bl, 0.0),
        cr,
        "[2]",
    );
    fails(
        img.crop_and_resize(&boxes, &Tensor::vector(&[2i32]), [2, 2], bl, 0.0),
        cr,
        "outside [0, 2)",
    );
    fails(
        img.crop_and_resize(&boxes, &Tensor::vector(&[-1i64]), [2, 2], bl, 0.0),
        cr,
        "-1",
    );
    fails(img.crop_and_resize(&boxes, &idx, [0, 2], bl, 0.0), cr, "[0, 2]");
    fails(img.crop_and_resize(&boxes, &idx, [3, -2], bl, 0.0), cr, "[3, -2]");
    fails(
        img.crop_and_resize(&boxes, &idx, [2, 2], ResizeMethod::Area, 0.0),
        cr,
        "Area",
    );
    fails(
        img.crop_and_resize(&boxes.cast(DType::I32)?, &idx, [2, 2], bl, 0.0),
        cr,
        "i32",
    );
    fails(
        img.crop_and_resize(&boxes, &Tensor::vector(&[1.0f32]), [2, 2], bl, 0.0),
        cr,
        "f32",
    );
    fails(
        img.cast(DType::Bool)?.crop_and_resize(&boxes, &idx, [2, 2], bl, 0.0),
        cr,
        "bool",
    );
    fails(
        Tensor::zeros(&[1, 0, 3, 1], DType::F32).crop_and_resize(&boxes, &Tensor::vector(&[0i32]), [2, 2], bl, 0.0),
        cr,
        "positive",
    );
    // no boxes: an empty crop whose image gradient is zeros
    let none = Tensor::zeros(&[0, 4], DType::F64);
    let img64 = img.cast(DType::F64)?;
    let tape = GradientTape::new();
    let (y, s) = tape.record(|| {
        tape.watch(&img64);
        let y = img64.crop_and_resize(&none, &Tensor::vector::<i64>(&[]), [1 << 20, 1 << 20], bl, 0.0)?;
        let s = y.sum_all()?;
        Ok((y, s))
    })?;
    assert_eq!(y.shape(), &[0, 1 << 20, 1 << 20, 3]);
    let g = tape.gradient(&s, &img64)?.expect("a gradient");
    assert_eq!(g.to_vec::<f64>()?, vec![0.0; 120]);

    let ep = "extract_patches";
    let v = Padding::Valid;
    fails(
        img.reshape(&[8, 5, 3])?.extract_patches([2, 2], [1, 1], [1, 1], v),
        ep,
        "[8, 5, 3]",
    );
    fails(img.extract_patches([0, 2], [1, 1], [1, 1], v), ep, "sizes");
    fails(img.extract_patches([2, 2], [1, -1], [1, 1], v), ep, "strides");
    fails(img.extract_patches([2, 2], [1, 1], [0, 1], v), ep, "rates");
    fails(
        img.extract_patches([4, 2], [1, 1], [2, 1], v),
        ep,
        "smaller than the dilated window 7",
    );
    // a window overhanging by less than a stride: no rows, as TensorFlow
    assert_eq!(img.extract_patches([5, 2], [2, 1], [1, 1], v)?.shape(), &[2, 0, 4, 30]);

    let ri = "resize_images";
    for m in [ResizeMethod::Bicubic, ResizeMethod::Area] {
        fails(img.resize_images([0, 3], m), ri, "[0, 3]");
        fails(img.reshape(&[120])?.resize_images([2, 3], m), ri, "[120]");
        fails(
            Tensor::zeros(&[1, 0, 3, 1], DType::F32).resize_images([2, 3], m),
            ri,
            "non-zero",
        );
        fails(img.cast(DType::C64)?.resize_images([2, 3], m), ri, "complex64");
        fails(img.resize_images([usize::MAX / 2, 3], m), ri, "");
        // integers give f32; an empty batch gives an empty result however large the size
        assert_eq!(img.cast(DType::I32)?.resize_images([3, 3], m)?.dtype(), DType::F32);
        let empty = Tensor::zeros(&[0, 4, 5, 3], DType::F64).resize_images([1 << 30, 1 << 30], m)?;
        assert_eq!(empty.shape(), &[0, 1 << 30, 1 << 30, 3]);
    }

    let c = Tensor::zeros(&[2, 3], DType::C128);
    fails(c.fft3d(), "fft3d", "[2, 3]");
    fails(c.ifft3d(), "ifft3d", "[2, 3]");
    fails(Tensor::zeros(&[2, 3, 4], DType::F64).fft3d(), "fft3d", "f64");
    fails(Tensor::zeros(&[2, 3], DType::F64).rfft3d(None), "rfft3d", "[2, 3]");
    fails(
        Tensor::zeros(&[2, 2, 3], DType::C128).rfft3d(None),
        "rfft3d",
        "complex128",
    );
    fails(Tensor::zeros(&[2, 2, 3], DType::F64).irfft3d(None), "irfft3d", "f64");
    fails(c.irfft3d(Some([2, 2, 2])), "irfft3d", "[2, 3]");
    Ok(())
}
