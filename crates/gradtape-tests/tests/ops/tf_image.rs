//! The image ops against TensorFlow 2.21: `resize_bilinear` and
//! `resize_nearest_neighbor` with each of TensorFlow's coordinate
//! conventions (half-pixel centers, aligned corners, neither), up, down
//! and to one pixel; `resize_images` of one image; the mirror and constant
//! pads (`pad_with`), and flips, `rot90`, transposition and the crops and
//! pads to a bounding box spelled with `reverse`, `permute`, `narrow` and
//! `pad`. Values and the gradient of a weighted sum with respect to the
//! image. The numbers are printed by `tests/reference/tf_image.py` into
//! `tests/data/tf_image.txt`: TensorFlow's in f64, except the bilinear
//! resizes, which TensorFlow computes and outputs in float32 only; those
//! are compared in f32 with TensorFlow's float32 numbers (`tf-f32`, within
//! 1e-6 of the result's magnitude, a few f32 roundings), and in f64 with
//! JAX's (`jax`, checked by the script against TensorFlow's).
//! `crop_and_resize`, `extract_patches` and the bicubic and area resizes
//! are tested in `tf_image_more.rs`.

use gradtape::{DType, GradientTape, PadMode, ResizeMethod, Result, Tensor};

use super::tf_util::{all_agree, floats, magnitude, report, weighted};

const DATA: &str = include_str!("../data/tf_image.txt");

/// The numbers of a config's `key=a,b,..` (sizes joined by `x` or `,`).
fn arg(cfg: &str, key: &str) -> Vec<usize> {
    let v = cfg
        .split(';')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key} in {cfg}"));
    v.split(['x', ',']).map(|d| d.parse().unwrap()).collect()
}

fn op(name: &str, cfg: &str, x: &Tensor) -> Result<Tensor> {
    let size = || {
        let s = arg(cfg, "size");
        [s[0], s[1]]
    };
    let flag = |key| arg(cfg, key)[0] == 1;
    let mirror = |mode| {
        let p = arg(cfg, "pads");
        x.pad_with(&[(0, 0), (p[0], p[1]), (p[2], p[3]), (0, 0)], mode)
    };
    match name {
        "resize_bilinear" => x.resize_bilinear(size(), flag("align"), flag("hpc")),
        "resize_nearest_neighbor" => x.resize_nearest_neighbor(size(), flag("align"), flag("hpc")),
        "resize_images_bilinear" => x.resize_images(size(), ResizeMethod::Bilinear),
        "resize_images_nearest" => x.resize_images(size(), ResizeMethod::Nearest),
        "pad_reflect" => mirror(PadMode::Reflect),
        "pad_symmetric" => mirror(PadMode::Symmetric),
        "pad_constant" => mirror(PadMode::Constant(1.5)),
        // NHWC: tf.image's flips, transposition and rotations (k quarter
        // turns counter-clockwise)
        "flip_left_right" => x.reverse(&[2]),
        "flip_up_down" => x.reverse(&[1]),
        "transpose" => x.permute(&[0, 2, 1, 3]),
        "rot90" => match arg(cfg, "k")[0] {
            1 => x.reverse(&[2])?.permute(&[0, 2, 1, 3]),
            2 => x.reverse(&[1, 2]),
            3 => x.permute(&[0, 2, 1, 3])?.reverse(&[2]),
            k => panic!("rot90 k={k}"),
        },
        "crop_to_bounding_box" => {
            let b = arg(cfg, "box");
            x.narrow(1, b[0], b[2])?.narrow(2, b[1], b[3])
        }
        "pad_to_bounding_box" => {
            let b = arg(cfg, "box");
            let s = x.shape();
            x.pad(&[(0, 0), (b[0], b[2] - b[0] - s[1]), (b[1], b[3] - b[1] - s[2]), (0, 0)])
        }
        _ => panic!("no op {name}"),
    }
}

#[test]
fn image_ops_match_tensorflow() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for line in DATA.lines() {
        let [name, cfg, shape, x, value, dx, src] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        let shape: Vec<usize> = shape.split('x').map(|d| d.parse().unwrap()).collect();
        // TensorFlow's bilinear resizes are float32 only (see above)
        let (dtype, rel) = if src == "tf-f32" {
            (DType::F32, 1e-6)
        } else {
            (DType::F64, 1e-12)
        };
        let x = Tensor::from_vec(floats(x).unwrap(), &shape)?.cast(dtype)?;
        let tape = GradientTape::new();
        let (y, s) = tape.record(|| {
            tape.watch(&x);
            let y = op(name, cfg, &x)?;
            let s = weighted(&y)?;
            Ok((y, s))
        })?;
        assert_eq!(y.dtype(), dtype, "{name}: the dtype");
        let g = tape.gradient(&s, &x)?;
        for (what, got, want) in [("value", Some(y), value), ("dx", g, dx)] {
            checked += 1;
            let got = got.map(|t| t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap());
            let want = floats(want).unwrap();
            // a weighted sum's roundoff is relative to its largest term
            let same = got
                .as_deref()
                .is_some_and(|g| all_agree(g, &want, rel, magnitude(&want)));
            if !same {
                bad.push(format!(
                    "{name} {cfg} {shape:?} {what} ({src}): got {got:?}, want {want:?}"
                ));
            }
        }
    }
    report(checked, 250, &bad);
    Ok(())
}
