//! The lock-step loops the kernels use in place of `std`'s zips and array
//! maps: the same items, in the same order, ending with the shortest.

use gradtape::__internals::kernels::cpu::lockstep::{
    chunks, chunks_mut, copy, each, fill, from_fn, map, whole, whole_mut, zip, zip3, zip4,
};

#[test]
fn zips_end_with_the_shortest_and_give_each_item_once() {
    let mut a = [1, 2, 3, 4];
    let b = [10, 20, 30];
    for (x, &y) in zip(&mut a[..], &b[..]) {
        *x += y;
    }
    assert_eq!(a, [11, 22, 33, 4]);
    let got: Vec<(usize, i32, i32)> = zip3(0.., &a, &b).map(|(i, &x, &y)| (i, x, y)).collect();
    assert_eq!(got, vec![(0, 11, 10), (1, 22, 20), (2, 33, 30)]);
    let got: Vec<(usize, usize, i32, i32)> = zip4(2..4, 0.., &a, &b).map(|(i, j, &x, &y)| (i, j, x, y)).collect();
    assert_eq!(got, vec![(2, 0, 11, 10), (3, 1, 22, 20)]);
    // the std forms, as the reference
    let v: Vec<i32> = (0..7).collect();
    let w: Vec<i32> = (10..15).collect();
    let ours: Vec<(i32, i32)> = zip(&v, w.iter()).map(|(&x, &y)| (x, y)).collect();
    let std: Vec<(i32, i32)> = v.iter().zip(w.iter()).map(|(&x, &y)| (x, y)).collect();
    assert_eq!(ours, std);
    assert_eq!(zip(&v, &w).size_hint(), (5, Some(5)));
}

#[test]
fn chunks_are_those_of_std_and_whole_splits_as_chunks_exact() {
    let d: Vec<i32> = (0..7).collect();
    for size in 1..9 {
        let ours: Vec<Vec<i32>> = each(chunks(&d, size)).map(|c| c.to_vec()).collect();
        let std: Vec<Vec<i32>> = d.chunks(size).map(|c| c.to_vec()).collect();
        assert_eq!(ours, std, "size {size}");
        let (runs, rest) = whole(&d, size);
        let exact = d.chunks_exact(size);
        assert_eq!(rest, exact.remainder(), "size {size}");
        assert_eq!(runs.len(), exact.len() * size, "size {size}");
    }
    let mut c = [0; 7];
    for (o, x) in zip(chunks_mut(&mut c, 3), chunks(&d, 3)) {
        copy(o, x);
    }
    assert_eq!(c.to_vec(), d);
    assert_eq!(zip(chunks(&d, 3), chunks(&d[..6], 3)).count(), 2);
    let mut e = [0; 5];
    let (head, tail) = whole_mut(&mut e, 2);
    fill(head, 1);
    fill(tail, 2);
    assert_eq!(e, [1, 1, 1, 1, 2]);
}

#[test]
fn array_maps_match_std() {
    assert_eq!(map([1, 2, 3], |v| v * 2), [1, 2, 3].map(|v| v * 2));
    let s: [String; 3] = from_fn(|i| i.to_string());
    assert_eq!(s, std::array::from_fn::<String, 3, _>(|i| i.to_string()));
}

#[test]
#[should_panic(expected = "copy: slices of different lengths")]
fn copy_refuses_slices_of_different_lengths() {
    copy(&mut [0; 2], &[1, 2, 3]);
}
