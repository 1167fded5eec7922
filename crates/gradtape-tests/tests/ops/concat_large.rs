//! Concatenations of contiguous operands large enough to be copied over
//! the compute threads (by equal runs of the output, each copying the
//! blocks or pieces of blocks that fall in it): every element against the
//! operand and position it comes from, written out here, on shapes whose
//! runs end inside blocks and inside rows (the last axis of a fused QKV
//! projection's gradient, the first axis of a batch, a middle axis,
//! uneven widths, a block of width one), and the gradient of a `split`
//! (one concatenation of its parts' cotangents).

use gradtape::{GradientTape, Result, Tensor};

/// `n` distinct values, tagged by operand `tag` (so that an element from
/// the wrong operand or position shows; `f64`, exact, through the same
/// generic copy as `f32`).
fn tagged(n: usize, tag: usize) -> Vec<f64> {
    (0..n).map(|i| (tag * 1_000_000_000 + i) as f64).collect()
}

/// Concatenates operands of `shapes` (equal but for `axis`) and checks
/// every element of the result.
fn check(shapes: &[Vec<usize>], axis: usize) -> Result<()> {
    let data: Vec<Vec<f64>> = shapes
        .iter()
        .enumerate()
        .map(|(t, s)| tagged(s.iter().product(), t + 1))
        .collect();
    let ts: Vec<Tensor> = data
        .iter()
        .zip(shapes)
        .map(|(d, s)| Tensor::from_vec(d.clone(), s))
        .collect::<Result<_>>()?;
    let refs: Vec<&Tensor> = ts.iter().collect();
    let out = Tensor::concat(&refs, axis as isize)?;
    let mut want_shape = shapes[0].clone();
    want_shape[axis] = shapes.iter().map(|s| s[axis]).sum();
    assert_eq!(out.shape(), &want_shape[..]);
    let got = out.to_vec::<f64>()?;
    let outer: usize = want_shape[..axis].iter().product();
    let blocks: Vec<usize> = shapes.iter().map(|s| s[axis..].iter().product()).collect();
    let row: usize = blocks.iter().sum();
    for o in 0..outer {
        let mut at = o * row;
        for (t, &c) in blocks.iter().enumerate() {
            for q in 0..c {
                let want = data[t][o * c + q];
                assert!(
                    got[at + q] == want,
                    "{shapes:?} on axis {axis}: element {} is {}, wants operand {t}'s {}",
                    at + q,
                    got[at + q],
                    o * c + q
                );
            }
            at += c;
        }
    }
    Ok(())
}

#[test]
fn a_fused_projections_three_parts_join_on_the_last_axis() -> Result<()> {
    check(&[vec![1024, 256], vec![1024, 256], vec![1024, 256]], 1)
}

#[test]
fn uneven_blocks_and_runs_that_end_inside_them_join_on_every_axis() -> Result<()> {
    // rows of 5 + 13 + 1 elements, 4001 of them
    check(&[vec![4001, 5], vec![4001, 13], vec![4001, 1]], 1)?;
    // the first axis: each operand one block
    check(&[vec![300, 70], vec![500, 70], vec![1, 70]], 0)?;
    // a middle axis of a rank-3 tensor
    check(&[vec![16, 3, 700], vec![16, 5, 700]], 1)?;
    // many operands
    let shapes: Vec<Vec<usize>> = (1..=9).map(|w| vec![2000, w]).collect();
    check(&shapes, 1)
}

#[test]
fn the_gradient_of_a_split_is_its_parts_cotangents_joined() -> Result<()> {
    // y = Σ_t (t + 1) · part_t: the gradient is t + 1 over part t's columns
    let x = Tensor::from_vec(tagged(512 * 384, 0), &[512, 384])?;
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        let parts = x.split(3, -1)?;
        let mut y = parts[0].sum_all()?;
        for (t, p) in parts.iter().enumerate().skip(1) {
            y = y.add(&p.mul_scalar((t + 1) as f64)?.sum_all()?)?;
        }
        Ok(y)
    })?;
    let g = tape.gradient(&y, &x)?.expect("a gradient").to_vec::<f64>()?;
    for (i, &v) in g.iter().enumerate() {
        assert_eq!(v, (i % 384 / 128 + 1) as f64, "element {i}");
    }
    Ok(())
}
