//! The kernels' index arithmetic, run as host C++ (`kernels_cuda_source_host`),
//! against the CPU kernels.
use crate::kernels_cuda_source_host as host;
use gradtape::__internals::kernels::cuda::index::*;
use gradtape::__internals::kernels::cuda::source::Lay;
use gradtape::__internals::tensor::layout::Layout;
use gradtape::__internals::TensorInternals;
use gradtape::Tensor;

fn vals(n: usize, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| (((i * 7919 + seed * 104_729) % 1009) as f64 / 1009.0) * 2.0 - 1.0)
        .collect()
}

fn t(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn i64s(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn lay_of(x: &Tensor) -> String {
    Lay::of(x.layout(), x.shape()).unwrap().c_init()
}

fn same(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
            "{what}: element {i}: {x} vs {y}"
        );
    }
}

#[test]
fn gather_and_scatter_agree_with_the_cpu_kernels_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    // params [3, 5, 2] read through a transposed view, gathered along each axis
    let base = t(&vals(30, 1), &[5, 3, 2]);
    let p = base.permute(&[1, 0, 2]).unwrap();
    let flat_p = base.to_vec_f64();
    for (axis, idx) in [(0usize, vec![2i64, 0, 2]), (1, vec![4, 0, 3, 3]), (2, vec![1, 0])] {
        let it = i64s(&idx, &[idx.len()]);
        let want = gradtape::__internals::kernels::cpu::index::gather(&p, &it, axis).unwrap();
        let ps = p.shape();
        let (dim, inner) = (ps[axis], ps[axis + 1..].iter().product::<usize>());
        let n = want.numel();
        let body = format!(
            "{}{}static double y[{n}];\nstatic unsigned long long err[3];\nLay lp = {};\nk(lp, p, idx, y, {}LL, {dim}LL, {inner}LL, {n}LL, err, 1ULL);\ngt_put(y, {n});\nif (err[0]) return 1;",
            host::array("double", "p", &flat_p),
            host::array("long long", "idx", &idx.iter().map(|&v| v as f64).collect::<Vec<_>>()),
            lay_of(&p),
            idx.len()
        );
        let got = host::run(&gather_source("double", "long long"), &body).unwrap();
        same(&got, &want.to_vec_f64(), &format!("gather along {axis}"));

        // its adjoint: the gathered values scattered back
        let u = t(&vals(n, 2), want.shape());
        let want_s = gradtape::__internals::kernels::cpu::index::scatter_add(&u, &it, axis, dim).unwrap();
        let outer: usize = ps[..axis].iter().product();
        let ns = want_s.numel();
        let body = format!(
            "{}{}static double y[{ns}];\nstatic unsigned long long err[3];\nLay lu = {};\nk(lu, u, idx, y, {}LL, {dim}LL, {inner}LL, {}LL, err, 1ULL);\ngt_put(y, {ns});\nif (err[0]) return 1;",
            host::array("double", "u", &u.to_vec_f64()),
            host::array("int", "idx", &idx.iter().map(|&v| v as f64).collect::<Vec<_>>()),
            lay_of(&u),
            idx.len(),
            outer * idx.len() * inner
        );
        let got = host::run(&scatter_add_source("double", "int"), &body).unwrap();
        same(&got, &want_s.to_vec_f64(), &format!("scatter_add along {axis}"));
    }
}

#[test]
fn gather_and_scatter_record_an_index_out_of_range_in_the_check_word() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    // params [4, 2], indices [1, 6, -2]: the first bad one is recorded (one
    // thread walks the elements in order), its rows read 0 or are dropped
    let p = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[4, 2]);
    let data = format!(
        "static double p[] = {{1, 2, 3, 4, 5, 6, 7, 8}};\nstatic long long idx[] = {{1, 6, -2}};\n\
         static unsigned long long err[3];\nLay l = {};\n",
        lay_of(&p)
    );
    let body = format!(
        "{data}static double y[6];\nk(l, p, idx, y, 3LL, 4LL, 2LL, 6LL, err, 9ULL);\ngt_put(y, 6);\n\
         printf(\"%llu %lld %llu\\n\", err[0], (long long)err[1], err[2]);"
    );
    let got = host::run(&gather_source("double", "long long"), &body).unwrap();
    assert_eq!(got, [3.0, 4.0, 0.0, 0.0, 0.0, 0.0, 9.0, 6.0, 4.0]);
    // a scatter with code 0 (segment sums drop negative ids) records nothing
    let body = format!(
        "{data}static double y[8];\nk(l, p, idx, y, 3LL, 4LL, 2LL, 6LL, err, 0ULL);\ngt_put(y, 8);\nprintf(\"%llu\\n\", err[0]);"
    );
    let got = host::run(&scatter_add_source("double", "long long"), &body).unwrap();
    assert_eq!(got, [0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
}

#[test]
fn copies_and_one_hot_agree_with_the_cpu_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    // pad: the copy into the interior region of zeros
    let x = t(&vals(12, 3), &[3, 4]);
    let pads = [(1usize, 2usize), (0, 3)];
    let want = x.pad(&pads).unwrap();
    let shape = want.shape().to_vec();
    let strides = gradtape::__internals::tensor::layout::contiguous_strides(&shape);
    let region = Layout {
        shape: x.shape().into(),
        strides: strides.clone(),
        offset: strides[0] as usize,
    };
    let n = want.numel();
    let body = format!(
        "{}static double y[{n}];\nLay lx = {}; Lay ly = {};\nk(lx, x, ly, y, 12LL);\ngt_put(y, {n});",
        host::array("double", "x", &x.to_vec_f64()),
        lay_of(&x),
        Lay::of(&region, x.shape()).unwrap().c_init()
    );
    same(
        &host::run(&copy_source("double"), &body).unwrap(),
        &want.to_vec_f64(),
        "pad",
    );

    // one_hot along the middle axis, with indices out of range
    let idx = [0i64, 3, 7, -1, 2, 2];
    let want = i64s(&idx, &[2, 3])
        .one_hot(5, 1.0, -0.5, 1, gradtape::DType::F64)
        .unwrap();
    let n = want.numel();
    let body = format!(
        "{}static double y[{n}];\nk(idx, y, 5LL, 3LL, 1.0, -0.5, {n}LL);\ngt_put(y, {n});",
        host::array("long long", "idx", &idx.map(|v| v as f64))
    );
    same(
        &host::run(&one_hot_source("double", "long long"), &body).unwrap(),
        &want.to_vec_f64(),
        "one_hot",
    );
}

/// `gather_nd`'s and `scatter_nd`'s flat offsets: each `K`-tuple's
/// offset into the leading dims, row-major, as the CPU's `gather_nd`
/// reads them; a coordinate out of range (negative, or at its dim)
/// records the first such in the check word (its value and dim) and
/// gives `-1`, which the gather or scatter that reads it skips.
#[test]
fn nd_offsets_agree_with_the_cpu_and_record_a_coordinate_out_of_range() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    let dims = [3usize, 4, 5];
    let dims_lay = Lay::of(&Layout::contiguous(&dims), &dims).unwrap().c_init();
    // in range: the offsets read a [60] arange as gather_nd does
    let idx: Vec<i64> = vec![2, 3, 4, 0, 0, 0, 1, 2, 3, 2, 0, 4];
    let ar = Tensor::from_vec((0..60).map(|v| v as f64).collect(), &dims).unwrap();
    let want = ar.gather_nd(&i64s(&idx, &[4, 3])).unwrap().to_vec::<f64>().unwrap();
    let arr = |t: &str, v: &[i64]| {
        let items: Vec<String> = v.iter().map(|x| format!("({t})({x}LL)")).collect();
        format!("static {t} idx[] = {{{}}};\n", items.join(", "))
    };
    for it in ["long long", "int"] {
        let body = format!(
            "{}static long long y[4];\nstatic unsigned long long err[3];\nLay dims = {dims_lay};\n\
             k(idx, y, 4LL, 3LL, dims, err, 7ULL);\n\
             gt_put(y, 4);\nprintf(\"%llu\\n\", err[0]);",
            arr(it, &idx)
        );
        let got = host::run(&nd_offsets_source(it), &body).unwrap();
        assert_eq!(&got[..4], &want[..], "{it}");
        assert_eq!(got[4], 0.0, "{it}: no error recorded");
    }
    // out of range: the second tuple's coordinate 4 at dim 1 (of 4), then
    // the fourth's -1 at dim 0: the first is recorded, both give -1
    let bad: Vec<i64> = vec![2, 3, 4, 0, 4, 0, 1, 2, 3, -1, 0, 0];
    let body = format!(
        "{}static long long y[4];\nstatic unsigned long long err[3];\nLay dims = {dims_lay};\n\
         k(idx, y, 4LL, 3LL, dims, err, 7ULL);\n\
         gt_put(y, 4);\nprintf(\"%llu %lld %llu\\n\", err[0], (long long)err[1], err[2]);",
        arr("long long", &bad)
    );
    let got = host::run(&nd_offsets_source("long long"), &body).unwrap();
    assert_eq!(got, vec![59.0, -1.0, 33.0, -1.0, 7.0, 4.0, 4.0]);
}

/// The segment products, maxima and minima fold each segment's rows in
/// row order as the CPU does: against `unsorted_segment_*` (negative ids
/// dropped, an empty segment the dtype's lowest or highest value, 1 for
/// a product) and `segment_*` (sorted ids, an empty segment 0), with a
/// NaN and ties, in `double` and `long long` (wrapping products).
#[test]
fn segment_reductions_agree_with_the_cpu_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    let (rows, inner, num) = (7usize, 3usize, 5usize);
    let data: Vec<f64> = (0..rows * inner)
        .map(|i| if i == 4 { f64::NAN } else { ((i * 37) % 11) as f64 - 5.0 })
        .collect();
    let unsorted: Vec<i64> = vec![3, 0, -1, 3, 1, 0, 3];
    let sorted: Vec<i64> = vec![0, 0, 1, 1, 1, 3, 3];
    for (t, ints) in [("double", false), ("long long", true)] {
        let dv: Vec<f64> = data
            .iter()
            .map(|&v| if ints && v.is_nan() { 7.0 } else { v })
            .map(|v| if ints { v * 1e9 } else { v })
            .collect();
        let dtype = if ints {
            gradtape::DType::I64
        } else {
            gradtape::DType::F64
        };
        let d = t_of(&dv, &[rows, inner], dtype);
        for (ids, is_sorted) in [(&unsorted, false), (&sorted, true)] {
            let idt = i64s(ids, &[rows]);
            // the rows of each segment in row order, as the launch builds them
            let mut starts = vec![0i64; num + 1];
            let mut seg_rows = vec![];
            for s in 0..num {
                seg_rows.extend((0..rows).filter(|&i| ids[i] == s as i64).map(|i| i as i64));
                starts[s + 1] = seg_rows.len() as i64;
            }
            for kind in ["prod", "max", "min"] {
                let want = match (kind, is_sorted) {
                    ("prod", false) => d.unsorted_segment_prod(&idt, num),
                    ("max", false) => d.unsorted_segment_max(&idt, num),
                    ("min", false) => d.unsorted_segment_min(&idt, num),
                    ("prod", true) => d.segment_prod(&idt),
                    ("max", true) => d.segment_max(&idt),
                    _ => d.segment_min(&idt),
                }
                .unwrap();
                let nseg = want.shape()[0];
                let want = want.cast(gradtape::DType::F64).unwrap().to_vec::<f64>().unwrap();
                let (init, empty) = segment_values(dtype, kind, is_sorted).unwrap();
                let ints_arr = |name: &str, v: &[i64]| {
                    let items: Vec<String> = v.iter().map(|x| format!("{x}LL")).collect();
                    format!("static long long {name}[] = {{{}}};\n", items.join(", "))
                };
                let n_out = nseg * inner;
                let body = format!(
                    "{}{}{}static {t} y[{n_out}];\nLay ld = {};\nk(ld, d, starts, rows, y, {nseg}LL, {inner}LL);\ngt_put(y, {n_out});",
                    host::array(t, "d", &dv),
                    ints_arr("starts", &starts),
                    ints_arr("rows", &seg_rows),
                    lay_of(&d),
                );
                let got = host::run(&segment_source(t, kind, &init, &empty), &body).unwrap();
                assert_eq!(got.len(), want.len(), "{t} {kind} sorted={is_sorted}");
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    let same = (a.is_nan() && b.is_nan()) || a == b;
                    assert!(same, "{t} {kind} sorted={is_sorted} element {i}: {a} vs {b}");
                }
            }
        }
    }
}

fn t_of(v: &[f64], shape: &[usize], dtype: gradtape::DType) -> Tensor {
    t(v, shape).cast(dtype).unwrap()
}

/// `tensor_scatter_nd_update`'s kernel writes each winning slice (the
/// launch passes one `(destination, update)` pair per destination) over
/// the copy, and leaves the other slices alone.
#[test]
fn scatter_update_writes_the_winning_slices_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    // y: 4 slices of 2; updates: 3 slices; slice 3 <- update 2, slice 0 <- update 0
    let body = "static double y[] = {1, 2, 3, 4, 5, 6, 7, 8};\nstatic double u[] = {10, 11, 20, 21, 30, 31};\n\
                static long long at[] = {3, 2, 0, 0};\nLay lu = LU;\nk(lu, u, at, y, 2LL, 2LL);\ngt_put(y, 8);"
        .replace("LU", &Lay::of(&Layout::contiguous(&[3, 2]), &[3, 2]).unwrap().c_init());
    let got = host::run(&scatter_update_source("double"), &body).unwrap();
    assert_eq!(got, vec![10.0, 11.0, 3.0, 4.0, 5.0, 6.0, 30.0, 31.0]);
}
