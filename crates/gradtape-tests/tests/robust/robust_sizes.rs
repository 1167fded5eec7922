//! Huge and overflowing sizes through the public API: an element count
//! never wraps (a shape whose count overflows is `Error::ShapeOverflow`),
//! a valid shape too large for memory is `Error::OutOfMemory` naming the op
//! and the bytes (never a "capacity overflow" panic or an allocation-failure
//! abort), and printing a huge broadcast view reads only what it shows.
//!
//! Before these fixes several of these cases aborted the process (or read
//! out of bounds: `matmul` after a wrapped `from_vec` was a SIGSEGV), so
//! every case that could take the process down runs [`isolated`]: in a child
//! process (this test binary, running that one test) whose address space is
//! capped at 32 GiB, so that an abort or a crash fails the test instead of
//! killing the binary, and so that "too large for memory" is deterministic
//! whatever the machine and its overcommit policy (Linux refuses a single
//! multi-TiB allocation under its default heuristic anyway; the cap only
//! makes that certain).
//!
//! Expected errors follow TensorFlow 2.21 (checked there): a shape with
//! more than 2^63 - 1 elements is an `InvalidArgumentError` ("would have
//! more than 2**63 - 1 elements"; here `ShapeOverflow`), an allocation it
//! cannot make a `ResourceExhaustedError` ("OOM when allocating tensor";
//! here `OutOfMemory`).

use std::panic::catch_unwind;
use std::process::Command;

use gradtape::{DType, Error, GradientTape, Padding, Result, Tensor, Variable};

/// Set in the child processes of [`isolated`].
const CHILD: &str = "GRADTAPE_ROBUST_SIZES_CHILD";
/// The child's address-space cap, in KiB (32 GiB).
const CAP_KIB: u64 = 32 << 20;

/// Runs `body` in a child process: this test binary, running only the test
/// `name` of this module, under a 32 GiB address-space cap (`ulimit -v`).
/// The test passes when the child exits normally; an abort, a crash or a
/// failed assertion in the child fails it, with the child's output in the
/// message.
fn isolated(name: &str, body: impl FnOnce()) {
    if std::env::var_os(CHILD).is_some() {
        body();
        return;
    }
    // the test's full name in the binary (`robust_sizes::name`): this
    // module's path without the crate's name
    let (_, module) = module_path!().split_once("::").expect("a module of the test crate");
    let name = &format!("{module}::{name}");
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {CAP_KIB} && exec \"$0\" \"$@\""))
        .arg(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .expect("spawn the child test process");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{name} failed in its child process ({}):\n{text}",
        out.status
    );
    assert!(text.contains("1 passed"), "{name}: the child ran no test:\n{text}");
}

fn overflow<T: std::fmt::Debug>(r: Result<T>, op: &str) {
    match r {
        Err(Error::ShapeOverflow { op: o, .. }) if o == op => {}
        other => panic!("{op}: expected ShapeOverflow, got {other:?}"),
    }
}

fn oom<T: std::fmt::Debug>(r: Result<T>, op: &str, bytes: u128) {
    match r {
        Err(Error::OutOfMemory { op: o, bytes: b }) if o == op && b == bytes => {}
        other => panic!("{op}: expected OutOfMemory of {bytes} bytes, got {other:?}"),
    }
}

/// A scalar broadcast to `shape` (a view: no memory of its own).
fn view(v: f32, shape: &[usize]) -> Tensor {
    Tensor::scalar(v).broadcast_to(shape).unwrap()
}

const BIG: usize = (1 << 62) + 1;

/// `from_vec` with a shape whose count wraps to the data's length was
/// accepted, and a matmul on it then read out of bounds (SIGSEGV).
#[test]
fn from_vec_refuses_a_wrapping_shape() {
    isolated("from_vec_refuses_a_wrapping_shape", || {
        let a = Tensor::from_vec(vec![1.0f32; 4], &[4, BIG]);
        let b = Tensor::from_vec(vec![1.0f32; 4], &[BIG, 4]);
        if let (Ok(a), Ok(b)) = (&a, &b) {
            let _ = a.matmul(b); // the read out of bounds, before the fix
        }
        overflow(a, "from_vec");
        overflow(b, "from_vec");
        // (TensorFlow accepts an empty shape whose other dims overflow;
        // gradtape refuses it, so that every partial product fits)
        overflow(Tensor::from_vec(Vec::<f32>::new(), &[0, 1 << 62, 1 << 62]), "from_vec");
        assert_eq!(Tensor::from_vec(Vec::<f32>::new(), &[0, 1 << 62]).unwrap().numel(), 0);
    });
}

#[test]
fn shapes_whose_count_overflows_are_errors() {
    // broadcast_to then sum_all gave 4.0 for 4 * (2^62 + 1) ones
    let one = Tensor::scalar(1.0f64);
    let b = one.broadcast_to(&[BIG, 4]);
    let total = b.as_ref().ok().map(|b| b.sum_all().and_then(|s| s.to_scalar::<f64>()));
    assert!(total.is_none(), "broadcast_to then sum_all gave {total:?}");
    overflow(b, "broadcast_to");
    // zeros of [2^32, 2^32] had 0 elements
    let z = catch_unwind(|| Tensor::zeros(&[1 << 32, 1 << 32], DType::F32).numel());
    assert!(z.is_err(), "zeros(&[2^32, 2^32]) gave a tensor of {z:?} elements");
    overflow(Tensor::try_zeros(&[1 << 32, 1 << 32], DType::F32), "zeros");
    overflow(Tensor::try_full(&[3, BIG], 1.0, DType::F64), "full");

    let x = Tensor::vector(&[1.0f32, 2.0, 3.0, 4.0]);
    overflow(x.reshape(&[4, BIG]), "reshape");
    overflow(x.reshape(&[usize::MAX, usize::MAX, 0]), "reshape");
    // broadcasting two valid views into a shape that overflows
    let (col, row) = (view(1.0, &[1 << 40, 1]), view(2.0, &[1, 1 << 40]));
    overflow(col.add(&row), "add");
    overflow(col.mul(&row), "mul");
    overflow(Tensor::where_(&Tensor::scalar(true), &col, &row), "where");
    overflow(col.matmul(&row), "matmul");
    overflow(x.tile(&[1 << 62]), "tile");
    overflow(x.repeat(1 << 62, 0), "repeat");
    overflow(x.pad(&[(1 << 62, 1 << 62)]), "pad");
    overflow(x.pad(&[(usize::MAX, 1)]), "pad");
    let huge = view(0.0, &[1 << 62]);
    overflow(Tensor::concat(&[&huge, &huge], 0), "concat");
    let idx = Tensor::vector(&[0i64, 1]);
    overflow(idx.one_hot(1 << 62, 1.0, 0.0, -1, DType::F32), "one_hot");
    overflow(idx.one_hot(usize::MAX, 1.0, 0.0, -1, DType::F32), "one_hot");
    let nd = Tensor::from_vec(vec![0i64], &[1, 1]).unwrap();
    let upd = Tensor::from_vec(vec![1.0f32], &[1, 1]).unwrap();
    overflow(Tensor::scatter_nd(&nd, &upd, &[1 << 32, 1 << 32]), "scatter_nd");
    overflow(
        Tensor::vector(&[1.0f32]).scatter_add(&Tensor::vector(&[0i64]), 0, 1 << 63),
        "scatter_add",
    );
    overflow(
        view(0.0, &[2, 1 << 61]).gather(&Tensor::vector(&[0i64, 1, 0, 1, 0]), 0),
        "gather",
    );
    overflow(
        Tensor::random_normal(&[1 << 40, 1 << 40], 0.0, 1.0, DType::F32, 1),
        "random_normal",
    );
    overflow(
        Tensor::random_uniform(&[BIG, 2], 0.0, 1.0, DType::F64, 1),
        "random_uniform",
    );
    overflow(Tensor::arange(0.0, 1e300, 1.0, DType::F64), "arange");
    overflow(Tensor::linspace(0.0, 1.0, usize::MAX, DType::F64), "linspace");
    overflow(Tensor::try_eye(1 << 32, DType::F32), "eye");
    // a transposed convolution whose requested output overflows
    let f = Tensor::ones(&[1, 1, 1, 1], DType::F32);
    let dy = Tensor::ones(&[1, 1, 1, 1], DType::F32);
    overflow(
        Tensor::conv2d_backprop_input(&[1 << 32, 1 << 32, 1, 1], &f, &dy, [1, 1], Padding::Valid, [1, 1]),
        "conv2d_backprop_input",
    );
    // a Jacobian whose result would overflow
    let x = view(1.0, &[1 << 32]);
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&x);
        Ok(x.identity())
    });
    overflow(tape.jacobian(&y.unwrap(), &x), "jacobian");
}

/// The examples of valid shapes too large for memory.
#[test]
fn allocations_that_fail_are_errors() {
    isolated("allocations_that_fail_are_errors", || {
        // the infallible sugar panics with the error's message (before the
        // fix: "memory allocation of 4398046511104 bytes failed", an abort)
        let p = catch_unwind(|| Tensor::zeros(&[1 << 40], DType::F32)).unwrap_err();
        let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
        assert_eq!(msg, "zeros: out of memory allocating 4398046511104 bytes");
        oom(Tensor::try_zeros(&[1 << 40], DType::F32), "zeros", 1 << 42);
        oom(Tensor::try_ones(&[1 << 40], DType::F64), "ones", 1 << 43);
        oom(Tensor::try_full(&[1 << 20, 1 << 20], 2.0, DType::I32), "full", 1 << 42);
        oom(Tensor::try_eye(1 << 21, DType::F32), "eye", 1 << 44);
        assert!(catch_unwind(|| Tensor::eye(1 << 21, DType::F32)).is_err());
        let idx = Tensor::vector(&[1i64]);
        oom(idx.one_hot(1 << 40, 1.0, 0.0, -1, DType::F32), "one_hot", 1 << 42);
        oom(
            Tensor::vector(&[1.0f32]).pad(&[(1 << 40, 1 << 40)]),
            "pad",
            (1 << 43) + 4,
        );
        // more than isize::MAX bytes: refused without asking the system
        oom(Tensor::try_zeros(&[1 << 61], DType::C128), "zeros", 1 << 65);
        oom(
            Tensor::random_uniform(&[1 << 40], 0.0, 1.0, DType::F32, 3),
            "random_uniform",
            1 << 42,
        );
        oom(
            Tensor::arange(0.0, (1u64 << 40) as f64, 1.0, DType::I64),
            "arange",
            1 << 43,
        );
        oom(Tensor::linspace(0.0, 1.0, 1 << 40, DType::F32), "linspace", 1 << 42);
    });
}

/// Ops on views whose result (or a copy of an operand) is too large.
#[test]
fn ops_on_huge_views_fail_cleanly() {
    isolated("ops_on_huge_views_fail_cleanly", || {
        let v = view(1.0, &[1 << 40]);
        oom(v.exp(), "exp", 1 << 42);
        oom(v.add_scalar(1.0), "add_scalar", 1 << 42);
        oom(v.to_vec::<f32>(), "to_vec", 1 << 42);
        oom(v.sum_all(), "sum", 1 << 42);
        // (the f32 view is gathered before it is converted)
        oom(v.cast(DType::F64), "cast", 1 << 42);
        oom(v.try_zeros_like(), "zeros_like", 1 << 42);
        // (a broadcast reshapes as a view, no memory; a column broadcast
        // along rows does not flatten without a copy)
        let r = v.reshape(&[1 << 20, 1 << 20]).unwrap();
        assert_eq!(r.shape(), &[1 << 20, 1 << 20]);
        let cols = Tensor::ones(&[1 << 20, 1], DType::F32)
            .broadcast_to(&[1 << 20, 1 << 20])
            .unwrap();
        oom(cols.reshape(&[1 << 40]), "reshape", 1 << 42);
        oom(v.contiguous(), "contiguous", 1 << 42);
        // (a tile of a broadcast is a view; of a vector, a copy)
        assert_eq!(v.tile(&[2]).unwrap().shape(), &[1 << 41]);
        let ones = Tensor::ones(&[1 << 20], DType::F32);
        oom(ones.tile(&[1 << 20]), "tile", 1 << 42);
        let (col, row) = (view(1.0, &[1 << 20, 1]), view(2.0, &[1, 1 << 20]));
        oom(col.add(&row), "add", 1 << 42);
        oom(col.matmul(&row), "matmul", 1 << 42);
        oom(Tensor::concat(&[&v, &v], 0), "concat", 1 << 43);
        let img = view(1.0, &[1, 1 << 20, 1 << 20, 1]);
        let f = Tensor::ones(&[3, 3, 1, 1], DType::F32);
        oom(img.conv2d(&f, [1, 1], Padding::Same, [1, 1]), "conv2d", 1 << 42);
        oom(img.max_pool2d([2, 2], [2, 2], Padding::Valid), "max_pool2d", 1 << 42);
        oom(img.softmax(-1), "softmax", 1 << 42);
        // a gradient whose cotangent seed is too large: the Jacobian of a
        // 2^21-element output needs a 2^42-element identity
        let x = view(1.0, &[1 << 21]);
        let tape = GradientTape::persistent();
        let y = tape.record(|| {
            tape.watch(&x);
            x.mul_scalar(2.0)
        });
        oom(tape.jacobian(&y.unwrap(), &x), "jacobian", 1 << 44);
        // and after all of that, ordinary work goes on
        let small = Tensor::vector(&[1.0f32, 2.0]).exp().unwrap();
        assert_eq!(small.shape(), &[2]);
    });
}

/// Printing a 2^40-element broadcast view reads only the elements shown
/// (before the fix: it gathered all 2^40 of them, an abort).
#[test]
fn display_of_a_huge_view_shows_only_its_edges() {
    isolated("display_of_a_huge_view_shows_only_its_edges", || {
        let x = view(1.5, &[1 << 20, 1 << 20]);
        let row = "[1.5, 1.5, 1.5, ..., 1.5, 1.5, 1.5]";
        let want =
            format!("Tensor([{row}, {row}, {row}, ..., {row}, {row}, {row}], shape=[1048576, 1048576], dtype=f32)");
        assert_eq!(x.to_string(), want);
        assert_eq!(format!("{x:?}"), want);
        let v = Variable::builder(x).name("w").build();
        assert_eq!(format!("{v:?}"), format!("Variable('w', {want})"));
        // rows differ: the first and last three are the ones shown (as
        // NumPy's summary of np.broadcast_to(np.arange(2000)[:, None],
        // (2000, 2**30)) shows them: 0, 1, 2, ..., 1997, 1998, 1999)
        let rows = Tensor::arange(0.0, 2000.0, 1.0, DType::I64)
            .unwrap()
            .reshape(&[2000, 1])
            .unwrap()
            .broadcast_to(&[2000, 1 << 30])
            .unwrap();
        let r = |i: i64| format!("[{i}, {i}, {i}, ..., {i}, {i}, {i}]");
        let want = format!(
            "Tensor([{}, {}, {}, ..., {}, {}, {}], shape=[2000, 1073741824], dtype=i64)",
            r(0),
            r(1),
            r(2),
            r(1997),
            r(1998),
            r(1999)
        );
        assert_eq!(rows.to_string(), want);
    });
}

#[test]
fn display_walks_strided_views() {
    // a reversed (negative-stride) view and a transposed one
    let x = Tensor::arange(0.0, 2000.0, 1.0, DType::I32).unwrap();
    assert_eq!(
        x.reverse(&[0]).unwrap().to_string(),
        "Tensor([1999, 1998, 1997, ..., 2, 1, 0], shape=[2000], dtype=i32)"
    );
    let m = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
    assert_eq!(
        m.transpose().unwrap().to_string(),
        "Tensor([[1, 4], [2, 5], [3, 6]], shape=[3, 2], dtype=i64)"
    );
    let e = Tensor::from_vec(Vec::<f32>::new(), &[3, 0]).unwrap();
    // TensorFlow 2.21: print(tf.zeros([3, 0])) is `tf.Tensor([], shape=(3, 0), ...)`
    assert_eq!(e.to_string(), "Tensor([], shape=[3, 0], dtype=f32)");
}

/// Layer constructors with huge or overflowing sizes: the constant
/// initialisers, `LayerNorm`, `BatchNorm`, `Dense`, `GRUCell` and
/// `LSTMCell` (whose `vec![0.0; 4 * units]` aborted, or wrapped and then
/// panicked slicing) and `zero_state` return errors; zero units are
/// refused as in Keras ("units must be positive").
#[test]
fn layer_constructors_with_huge_sizes_are_errors() {
    use gradtape::nn::{BatchNorm, Dense, Embedding, GRUCell, Initializer, LSTMCell, LayerNorm};
    use gradtape::Rng;
    isolated("layer_constructors_with_huge_sizes_are_errors", || {
        let rng = &mut Rng::new(0);
        for init in [Initializer::Zeros, Initializer::Ones, Initializer::Constant(2.0)] {
            assert!(matches!(
                init.init(&[1 << 40], DType::F32, rng),
                Err(Error::OutOfMemory { .. })
            ));
            assert!(matches!(
                init.init(&[1 << 40, 1 << 40], DType::F32, rng),
                Err(Error::ShapeOverflow { .. })
            ));
        }
        let orth = Initializer::Orthogonal { gain: 1.0 };
        assert!(matches!(
            orth.init(&[1 << 40, 1 << 40, 1 << 40], DType::F32, rng),
            Err(Error::ShapeOverflow { .. })
        ));
        for n in [1usize << 40, 1 << 60, usize::MAX] {
            assert!(LayerNorm::new(n, DType::F32).is_err(), "LayerNorm {n}");
            assert!(BatchNorm::new(n, DType::F64).is_err(), "BatchNorm {n}");
            assert!(Dense::builder(3, n).build(rng).is_err(), "Dense {n}");
            assert!(Dense::builder(n, n).build(rng).is_err(), "Dense {n}");
            assert!(Embedding::new(n, 2, rng).is_err(), "Embedding {n}");
            for units in [n, n / 3 + 1, n / 4 + 1] {
                let e = LSTMCell::new(3, units, rng).err().expect("LSTMCell refuses it");
                assert!(e.to_string().contains("LSTMCell"), "{e}");
                let e = GRUCell::new(3, units, rng).err().expect("GRUCell refuses it");
                assert!(e.to_string().contains("GRUCell"), "{e}");
            }
        }
        // zero sizes, as Keras
        let e = Dense::new(3, 0, rng).err().expect("Dense refuses 0 units").to_string();
        assert!(e.contains("units must be a positive integer"), "{e}");
        assert!(LSTMCell::new(3, 0, rng).is_err());
        assert!(GRUCell::new(3, 0, rng).is_err());
        assert!(Embedding::new(0, 4, rng).is_err());
        assert!(gradtape::nn::Conv2D::builder(1, 0, [3, 3]).build(rng).is_err());
        // the zero state of a huge batch
        let lstm = LSTMCell::new(3, 4, rng).unwrap();
        assert!(matches!(lstm.zero_state(1 << 40), Err(Error::OutOfMemory { .. })));
        assert!(matches!(lstm.zero_state(usize::MAX), Err(Error::ShapeOverflow { .. })));
        let gru = GRUCell::new(3, 4, rng).unwrap();
        assert!(gru.zero_state(1 << 60).is_err());
        assert_eq!(lstm.zero_state(2).unwrap().c.shape(), &[2, 4]);
        // a sequence of 2^40 steps (a view): its outputs' list is refused
        let xs = view(1.0, &[1, 1 << 40, 3]);
        let r = lstm.run_sequence(&xs, lstm.zero_state(1).unwrap());
        assert!(
            matches!(r, Err(Error::OutOfMemory { op: "run_sequence", .. })),
            "{:?}",
            r.err()
        );
    });
}

/// Host-side buffers sized by a user's count: a segment op's `seen` flags
/// (`vec![false; num_segments]`), `Rng::permutation`, `random::batches`
/// (whose `n as i64` wrapped to no batches at all) and the `.npy` /
/// safetensors bytes of a huge view (`Vec::with_capacity`) aborted or
/// panicked; each is now an error.
#[test]
fn host_buffers_sized_by_user_counts_fail_cleanly() {
    use gradtape::random::batches;
    use gradtape::Rng;
    isolated("host_buffers_sized_by_user_counts_fail_cleanly", || {
        // an empty row per segment: the output is empty, the flags are not
        let data = Tensor::zeros(&[2, 0], DType::F32);
        let ids = Tensor::vector(&[0i64, 1]);
        // (now nothing is allocated for them: see
        // `empty_outputs_with_huge_dims_allocate_nothing`)
        for n in [1usize << 40, 1 << 62] {
            assert_eq!(data.unsorted_segment_max(&ids, n).unwrap().shape(), &[n, 0]);
        }
        let far = Tensor::vector(&[0i64, 1 << 40]);
        assert_eq!(data.segment_min(&far).unwrap().shape(), &[(1 << 40) + 1, 0]);
        // a non-empty output that large is still an error
        let r = Tensor::zeros(&[2, 1], DType::F32).unsorted_segment_max(&ids, 1 << 40);
        assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
        oom(Rng::new(0).permutation(1 << 40), "permutation", 1 << 43);
        assert!(matches!(
            Rng::new(0).permutation(usize::MAX),
            Err(Error::OutOfMemory { op: "permutation", .. })
        ));
        assert!(Rng::new(0).shuffle_rows(&view(1.0, &[1 << 40])).is_err());
        oom(batches(1 << 40, 8, None), "batches", 1 << 43);
        let e = batches((1usize << 63) + 5, 8, None).unwrap_err().to_string();
        assert!(e.contains("i64"), "{e}");
        assert!(batches(usize::MAX, 1, None).is_err());
        assert_eq!(batches(3, 2, None).unwrap().len(), 2);
        // the bytes of a huge view
        let big = view(1.0, &[1 << 40]);
        let r = gradtape::io::npy_to_bytes(&big);
        assert!(matches!(r, Err(Error::OutOfMemory { op: "save_npy", .. })), "{r:?}");
        let v = Variable::builder(big).name("big").build();
        let r = gradtape::io::safetensors_to_bytes(&[v]);
        assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
    });
}

/// The transformer helpers sized by the caller's counts:
/// `sine_position_encoding(length, features, start, ..)` multiplied
/// `length * features` unchecked into `Vec::with_capacity` (`1 << 40`
/// squared wrapped to 0 and its loop ran on; `1 << 33` rows of 4 aborted on
/// the failed allocation) and `start + length` wrapped (a shape error about
/// 0 elements); `categorical(logits, num_samples, ..)` panicked with
/// "capacity overflow" for `usize::MAX` samples and aborted for `1 << 40`.
/// Each is now a named error.
#[test]
fn sequence_helpers_sized_by_user_counts_fail_cleanly() {
    use gradtape::nn::{sampling::categorical, sine_position_encoding};
    use gradtape::Rng;
    isolated("sequence_helpers_sized_by_user_counts_fail_cleanly", || {
        overflow(
            sine_position_encoding(1 << 40, 1 << 40, 0, 1e4, DType::F32),
            "sine_position_encoding",
        );
        oom(
            sine_position_encoding(1 << 33, 4, 0, 1e4, DType::F32),
            "sine_position_encoding",
            (1u128 << 35) * 8,
        );
        let e = sine_position_encoding(4, 4, usize::MAX - 1, 1e4, DType::F32).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "sine_position_encoding",
                    ..
                }
            ),
            "{e}"
        );
        // positions up to the last that fits are fine
        let t = sine_position_encoding(2, 4, usize::MAX - 2, 1e4, DType::F32).unwrap();
        assert_eq!(t.shape(), &[2, 4]);
        let logits = Tensor::zeros(&[2, 3], DType::F32);
        oom(categorical(&logits, 1 << 40, &mut Rng::new(0)), "categorical", 1 << 44);
        overflow(categorical(&logits, usize::MAX, &mut Rng::new(0)), "categorical");
        // no rows: an empty result, whatever the count (within isize::MAX)
        let none = categorical(&Tensor::zeros(&[0, 3], DType::F32), 1 << 40, &mut Rng::new(0)).unwrap();
        assert_eq!(none.shape(), &[0, 1 << 40]);
    });
}

/// Sorting an empty tensor with a huge axis reserved a scratch row of that
/// axis's length (an abort under the fuzz's memory cap): nothing is sorted,
/// so nothing is reserved.
#[test]
fn sorting_an_empty_tensor_with_a_huge_axis_reserves_nothing() {
    isolated("sorting_an_empty_tensor_with_a_huge_axis_reserves_nothing", || {
        let x = Tensor::zeros(&[0, 2, 1 << 33], DType::F32);
        assert_eq!(x.argsort(-1, false).unwrap().shape(), &[0, 2, 1 << 33]);
        assert_eq!(x.sort(-1, true).unwrap().shape(), &[0, 2, 1 << 33]);
    });
}

/// Decompositions of 2^31 empty matrices walked them one by one (the fuzz
/// saw them hang): every output is empty, so none is walked.
#[test]
fn decompositions_of_many_empty_matrices_return_at_once() {
    let nb = 1usize << 31;
    let wide = Tensor::zeros(&[nb, 2, 0], DType::F64);
    let (q, r) = wide.qr().unwrap();
    assert_eq!((q.shape(), r.shape()), (&[nb, 2, 0][..], &[nb, 0, 0][..]));
    let (s, u, v) = wide.svd().unwrap();
    assert_eq!(
        (s.shape(), u.shape(), v.shape()),
        (&[nb, 0][..], &[nb, 2, 0][..], &[nb, 0, 0][..])
    );
    let square = Tensor::zeros(&[nb, 0, 0], DType::F64);
    let (e, w) = square.eigh().unwrap();
    assert_eq!((e.shape(), w.shape()), (&[nb, 0][..], &[nb, 0, 0][..]));
    assert_eq!(square.matrix_exp().unwrap().shape(), &[nb, 0, 0]);
    let (l, _, p) = square.lu().unwrap();
    assert_eq!((l.shape(), p.shape()), (&[nb, 0, 0][..], &[nb, 0][..]));
}

/// An optimizer's slots for a huge variable (a broadcast view) were made
/// with the panicking `Tensor::full` (found by the fuzz's surfaces): now an
/// error.
#[test]
fn optimizer_slots_of_a_huge_variable_are_an_error() {
    use gradtape::optim::{Adam, Optimizer, RmsProp};
    isolated("optimizer_slots_of_a_huge_variable_are_an_error", || {
        let w = Variable::new(view(1.0, &[1 << 40]));
        let g = view(0.5, &[1 << 40]);
        let r = Adam::new(0.1).apply(vec![(Some(g.clone().into()), w.clone())]);
        assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
        let r = RmsProp::new(0.1).apply(vec![(Some(g.into()), w)]);
        assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
    });
}

/// Ops whose output is empty but has a huge dim: an unsorted segment
/// reduction of `[4, 0, 2]` into 2^40 segments sized a per-segment flag
/// array (a 1 TiB `OutOfMemory`), `rfft2d` of an empty batch with an FFT
/// length of 2^32 a column scratch (128 GiB); both found by the fuzz once
/// it stopped skipping empty operands with huge dims. Each now returns the
/// empty result, as TensorFlow does for an empty input; and the other ops
/// the fuzz had skipped for this return at once too.
#[test]
fn empty_outputs_with_huge_dims_allocate_nothing() {
    isolated("empty_outputs_with_huge_dims_allocate_nothing", || {
        let x = Tensor::zeros(&[4, 0, 2], DType::F32);
        let ids = Tensor::vector(&[0i64, 3, -1, 7]);
        let n = 1usize << 40;
        for (name, y) in [
            ("sum", x.unsorted_segment_sum(&ids, n)),
            ("prod", x.unsorted_segment_prod(&ids, n)),
            ("max", x.unsorted_segment_max(&ids, n)),
            ("min", x.unsorted_segment_min(&ids, n)),
            ("mean", x.unsorted_segment_mean(&ids, n)),
        ] {
            assert_eq!(y.unwrap().shape(), &[n, 0, 2], "unsorted_segment_{name}");
        }
        let z = Tensor::zeros(&[0, 4, 4], DType::F32);
        assert_eq!(z.rfft2d(Some([1 << 32, 4])).unwrap().shape(), &[0, 1 << 32, 3]);
        let e = Tensor::zeros(&[n, 0, 3], DType::F64);
        assert_eq!(e.pinv(None).unwrap().shape(), &[n, 3, 0]);
        let k = Tensor::zeros(&[0, 2, 1 << 32], DType::F32);
        assert_eq!(k.top_k(3).unwrap().0.shape(), &[0, 2, 3]);
        let s = Tensor::zeros(&[0, 1 << 33], DType::F32);
        assert_eq!(
            s.searchsorted(&Tensor::zeros(&[0, 5], DType::F32), false)
                .unwrap()
                .shape(),
            &[0, 5]
        );
        let t = Tensor::zeros(&[n, 0], DType::F32);
        let i = Tensor::zeros(&[n, 0], DType::I64);
        assert_eq!(t.take_along_axis(&i, -1).unwrap().shape(), &[n, 0]);
        // kernels that walked the empty rows of a huge outer dim (2^60 of
        // them: they never returned)
        let rows = 1usize << 60;
        let w = Tensor::zeros(&[rows, 0], DType::F64);
        assert_eq!(w.argsort(-1, false).unwrap().shape(), &[rows, 0]);
        assert_eq!(w.cumsum(1, false, true).unwrap().shape(), &[rows, 0]);
        assert_eq!(w.cumprod(1, true, false).unwrap().shape(), &[rows, 0]);
        let wi = Tensor::zeros(&[rows, 0], DType::I64);
        assert_eq!(wi.one_hot(3, 1.0, 0.0, -1, DType::F32).unwrap().shape(), &[rows, 0, 3]);
        let none = Tensor::zeros(&[0], DType::I64);
        assert_eq!(w.gather(&none, 1).unwrap().shape(), &[rows, 0]);
    });
}

/// `gather_with` without batch dims walked every index to build batch
/// coordinates it did not need: 3 * 2^40 steps for a broadcast index (a
/// hang the fuzz found once the optimiser stopped deleting the empty loop).
/// Now the index's 24 TiB `i64` copy is refused at once (TensorFlow has no
/// broadcast views: its index would be that big already), and with batch
/// dims the coordinates are refused before any walk.
#[test]
fn gather_with_a_huge_broadcast_index_returns_at_once() {
    isolated("gather_with_a_huge_broadcast_index_returns_at_once", || {
        let n = 1usize << 40;
        let p = Tensor::zeros(&[n, 0], DType::F32);
        let i = Tensor::scalar(0i64).broadcast_to(&[n, 3]).unwrap();
        let e = p.gather_with(&i, 0, 0).unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
        let p = Tensor::zeros(&[2, 3], DType::F32);
        let i = Tensor::scalar(0i64).broadcast_to(&[2, 1 << 40]).unwrap();
        let e = p.gather_with(&i, 1, 1).unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    });
}
