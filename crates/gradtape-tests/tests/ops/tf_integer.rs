//! Integer arithmetic as TensorFlow 2.21 computes it (the expected values
//! were printed by TF in the reference environment): products, means and
//! powers of integers, and the bitwise ops of `tf.bitwise`; each also
//! traced, where it must give the eager bits.

use gradtape::{function, DType, GradientTape, Result, Tensor};

fn m32(v: &[i32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

#[test]
fn integer_matmul_wraps_and_broadcasts_batches() -> Result<()> {
    // tf.matmul([[1, 2], [3, -4]], itself): int32 and int64
    let a = m32(&[1, 2, 3, -4], &[2, 2]);
    assert_eq!(a.matmul(&a)?.to_vec::<i32>()?, vec![7, -6, -9, 22]);
    let a64 = a.cast(DType::I64)?;
    let p = a64.matmul(&a64)?;
    assert_eq!((p.dtype(), p.to_vec::<i64>()?), (DType::I64, vec![7, -6, -9, 22]));
    // tf.matmul([[2^30, 2^30]], [[2], [2]]) wraps to 0 in int32
    let big = m32(&[1 << 30, 1 << 30], &[1, 2]);
    assert_eq!(big.matmul(&m32(&[2, 2], &[2, 1]))?.to_vec::<i32>()?, vec![0]);
    // a batch of 3 against one matrix, and the transposed forms, against the
    // f64 product of the same values (exact: small integers)
    let x: Vec<i32> = (0..24).map(|i| (i * 7 % 11) - 5).collect();
    let xb = m32(&x, &[3, 2, 4]);
    let w = m32(&[1, -2, 3, 0, 5, -1, 2, 2], &[4, 2]);
    for (ta, tb) in [(false, false), (true, true)] {
        let (l, r) = if ta {
            (xb.permute(&[0, 2, 1])?, w.transpose()?)
        } else {
            (xb.clone(), w.clone())
        };
        let got = l.matmul_with(&r, ta, tb)?;
        let want = l.cast(DType::F64)?.matmul_with(&r.cast(DType::F64)?, ta, tb)?;
        assert_eq!(got.shape(), &[3, 2, 2]);
        assert_eq!(got.cast(DType::F64)?.to_vec::<f64>()?, want.to_vec::<f64>()?);
    }
    // matvec and tensordot on integers go through the same product
    assert_eq!(a.matvec(&Tensor::vector(&[1i32, 1]))?.to_vec::<i32>()?, vec![3, -1]);
    assert_eq!(
        a.tensordot(&Tensor::vector(&[2i32, 1]), &[1], &[0])?.to_vec::<i32>()?,
        vec![4, 2]
    );
    // einsum on integers, as tf.einsum: a batched product, a trace, an
    // outer product with a sum, each against the same einsum in f64
    let y = m32(&[3, -1, 2, 5, 0, -4, 1, 1, 2, 7, -3, 0], &[3, 4]);
    for (spec, ops) in [
        ("bij,jk->bik", vec![&xb, &w]),
        ("ii->", vec![&a]),
        ("ij,kl->ik", vec![&a, &y]),
        ("bij,kj->bik", vec![&xb, &y]),
    ] {
        let got = Tensor::einsum(spec, &ops)?;
        let f: Vec<Tensor> = ops.iter().map(|t| t.cast(DType::F64)).collect::<Result<_>>()?;
        let want = Tensor::einsum(spec, &f.iter().collect::<Vec<_>>())?;
        assert_eq!(got.dtype(), DType::I32, "{spec}");
        assert_eq!(got.cast(DType::F64)?.to_vec::<f64>()?, want.to_vec::<f64>()?, "{spec}");
    }
    // tf.einsum('ij,jk->ik', [[2^30, 2^30]], [[2], [2]]) wraps to 0 as matmul
    assert_eq!(
        Tensor::einsum("ij,jk->ik", &[&big, &m32(&[2, 2], &[2, 1])])?.to_vec::<i32>()?,
        vec![0]
    );
    // mixed dtypes and bools are refused, naming the op
    let e = a.matmul(&a64).unwrap_err().to_string();
    assert!(e.contains("matmul"), "{e}");
    let b = Tensor::from_vec(vec![true, false, true, true], &[2, 2])?;
    assert!(b.matmul(&b).unwrap_err().to_string().contains("matmul"));
    Ok(())
}

#[test]
fn tensordot_of_complex_tensors() -> Result<()> {
    // tf.tensordot([[1+2j, 3j]], [1-1j, 2], [[1], [0]]) = [3+7j] (complex64)
    let a = Tensor::complex(
        &m32(&[1, 0], &[1, 2]).cast(DType::F32)?,
        &m32(&[2, 3], &[1, 2]).cast(DType::F32)?,
    )?;
    let b = Tensor::complex(&Tensor::vector(&[1.0f32, 2.0]), &Tensor::vector(&[-1.0f32, 0.0]))?;
    let c = a.tensordot(&b, &[1], &[0])?;
    assert_eq!(c.dtype(), DType::C64);
    assert_eq!(c.real()?.to_vec::<f32>()?, vec![3.0]);
    assert_eq!(c.imag()?.to_vec::<f32>()?, vec![7.0]);
    Ok(())
}

#[test]
fn integer_means_truncate_as_tensorflow() -> Result<()> {
    let mean = |v: &[i32]| Tensor::vector(v).mean(&[0], false).unwrap().to_vec::<i32>().unwrap();
    // tf.reduce_mean([-1, -2, -4]) = -2, ([1, 2, 4]) = 2: toward zero
    assert_eq!(mean(&[-1, -2, -4]), vec![-2]);
    assert_eq!(mean(&[1, 2, 4]), vec![2]);
    // int32 sums do not overflow: ([M, M, 1]) = 1431655765, ([M; 4]) = M,
    // ([MIN; 3]) = MIN
    let (mx, mn) = (i32::MAX, i32::MIN);
    assert_eq!(mean(&[mx, mx, 1]), vec![1431655765]);
    assert_eq!(mean(&[mx, mx, mx, mx]), vec![mx]);
    assert_eq!(mean(&[mn, mn, mn]), vec![mn]);
    // ([5, -7, 3] * 1000) = 0
    assert_eq!(mean(&[5, -7, 3].repeat(1000)), vec![0]);
    // int64 sums wrap: ([2^62] * 3) = -1537228672809129301
    let x = Tensor::vector(&[1i64 << 62, 1 << 62, 1 << 62]);
    assert_eq!(x.mean(&[0], false)?.to_vec::<i64>()?, vec![-1537228672809129301]);
    // along axes, keeping dims: ([[1, 2], [4, 7]], 0) = [2, 4];
    // ([[1, 2], [4, -7]], 1) = [1, -1]
    let y = m32(&[1, 2, 4, 7], &[2, 2]).mean(&[0], true)?;
    assert_eq!((y.shape(), y.to_vec::<i32>()?), (&[1usize, 2][..], vec![2, 4]));
    assert_eq!(
        m32(&[1, 2, 4, -7], &[2, 2]).mean(&[1], false)?.to_vec::<i32>()?,
        vec![1, -1]
    );
    // an empty mean is 0; bools are refused (as TF)
    assert_eq!(
        Tensor::zeros(&[0], DType::I32).mean(&[0], false)?.to_vec::<i32>()?,
        vec![0]
    );
    assert!(Tensor::vector(&[true]).mean(&[0], false).is_err());
    Ok(())
}

#[test]
fn integer_powers_wrap_and_refuse_negative_exponents() -> Result<()> {
    // tf.pow([2, -3, 0, 5], [3, 3, 0, 2]) = [8, -27, 1, 25]
    let p = Tensor::vector(&[2i32, -3, 0, 5]).pow(&Tensor::vector(&[3i32, 3, 0, 2]))?;
    assert_eq!(p.to_vec::<i32>()?, vec![8, -27, 1, 25]);
    // 3^40 in int32 wraps to 689956897; 3^39 in int64 is 4052555153018976267
    assert_eq!(
        Tensor::vector(&[3i32])
            .pow(&Tensor::vector(&[40i32]))?
            .to_vec::<i32>()?,
        vec![689956897]
    );
    let p = Tensor::vector(&[3i64]).pow(&Tensor::scalar(39i64))?;
    assert_eq!(p.to_vec::<i64>()?, vec![4052555153018976267]);
    // broadcasting a column against a row
    let p = m32(&[2, -1], &[2, 1]).pow(&Tensor::vector(&[0i32, 1, 2, 31]))?;
    assert_eq!(p.to_vec::<i32>()?, vec![1, 2, 4, i32::MIN, 1, -1, 1, -1]);
    // "Integers to negative integer powers are not allowed", even for ±1
    for base in [2i32, 1, -1] {
        let e = Tensor::vector(&[base])
            .pow(&Tensor::vector(&[-1i32]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("pow") && e.contains("negative"), "{e}");
    }
    assert!(Tensor::vector(&[2i32]).pow(&Tensor::vector(&[2i64])).is_err());
    // an empty result computes no power, so nothing is refused: TF 2.21's
    // tf.pow(tf.zeros([0, 1, 1], tf.int64), tf.constant([-43], tf.int64))
    // is an int64 tensor of shape [0, 1, 1] (random programs vs TF, seed
    // 29's program 1052); a mismatched shape stays an error
    let empty = Tensor::from_vec(Vec::<i64>::new(), &[0, 1, 1])?;
    let p = empty.pow(&Tensor::vector(&[-43i64]))?;
    assert_eq!((p.dtype(), p.shape()), (gradtape::DType::I64, &[0usize, 1, 1][..]));
    let two = Tensor::from_vec(Vec::<i64>::new(), &[0, 2])?;
    assert!(two.pow(&Tensor::vector(&[-1i64, -2, -3])).is_err());
    Ok(())
}

#[test]
fn bitwise_ops_as_tf_bitwise() -> Result<()> {
    let (a, b) = (Tensor::vector(&[12i32, -1]), Tensor::vector(&[10i32, 5]));
    assert_eq!(a.bitwise_and(&b)?.to_vec::<i32>()?, vec![8, 5]);
    assert_eq!(a.bitwise_or(&b)?.to_vec::<i32>()?, vec![14, -1]);
    assert_eq!(a.bitwise_xor(&b)?.to_vec::<i32>()?, vec![6, -6]);
    assert_eq!(
        Tensor::vector(&[12i32, -1, 0]).invert()?.to_vec::<i32>()?,
        vec![-13, 0, -1]
    );
    // shifts out of range clamp: left_shift([1, 1, 1, -8, 1], [3, 31, 32, 1, -1])
    let l = Tensor::vector(&[1i32, 1, 1, -8, 1]).left_shift(&Tensor::vector(&[3i32, 31, 32, 1, -1]))?;
    assert_eq!(l.to_vec::<i32>()?, vec![8, i32::MIN, i32::MIN, -16, 1]);
    // right_shift([-8, 8, 8, -8, 8], [1, 1, 33, 40, -1])
    let r = Tensor::vector(&[-8i32, 8, 8, -8, 8]).right_shift(&Tensor::vector(&[1i32, 1, 33, 40, -1]))?;
    assert_eq!(r.to_vec::<i32>()?, vec![-4, 4, 0, -1, 8]);
    // int64: 1 << 63 is MIN; broadcasting a scalar mask
    let l = Tensor::vector(&[1i64]).left_shift(&Tensor::vector(&[63i64]))?;
    assert_eq!(l.to_vec::<i64>()?, vec![i64::MIN]);
    let m = m32(&[0x0f, 0xf0, 0xff, 7], &[2, 2]).bitwise_and(&Tensor::scalar(0x3ci32))?;
    assert_eq!(
        (m.shape(), m.to_vec::<i32>()?),
        (&[2usize, 2][..], vec![0x0c, 0x30, 0x3c, 4])
    );
    // bools, floats and mixed dtypes are refused with the op's name
    for e in [
        Tensor::vector(&[true])
            .bitwise_and(&Tensor::vector(&[false]))
            .unwrap_err(),
        Tensor::vector(&[1.0f32]).invert().unwrap_err(),
        a.bitwise_or(&b.cast(DType::I64)?).unwrap_err(),
        Tensor::vector(&[1.0f64])
            .right_shift(&Tensor::vector(&[1.0f64]))
            .unwrap_err(),
    ] {
        let e = e.to_string();
        assert!(
            e.contains("bitwise_and") || e.contains("invert") || e.contains("bitwise_or") || e.contains("right_shift"),
            "{e}"
        );
    }
    Ok(())
}

#[test]
fn integer_ops_traced_give_the_eager_bits() -> Result<()> {
    let body = |(x, y): &(Tensor, Tensor)| -> Result<Tensor> {
        let p = x.matmul(y)?; // [3, 3]
        let q = p.bitwise_xor(&p.right_shift(&Tensor::scalar(2i64))?)?.invert()?;
        let r = q.bitwise_and(&Tensor::scalar(0xffffi64))?.pow(&Tensor::scalar(3i64))?;
        r.left_shift(
            &x.matmul(&y.transpose()?.matmul(x)?)?
                .bitwise_or(&Tensor::scalar(1i64))?
                .bitwise_and(&Tensor::scalar(15i64))?,
        )?
        .mean(&[1], false)
    };
    let f = function(body);
    for k in 0..3i64 {
        let x = Tensor::from_vec((0..9).map(|i| (i * 5 + k) % 13 - 6).collect::<Vec<i64>>(), &[3, 3])?;
        let y = Tensor::from_vec((0..9).map(|i| (i * 3 + 2 * k) % 7 - 3).collect::<Vec<i64>>(), &[3, 3])?;
        let want = body(&(x.clone(), y.clone()))?;
        let got = f.call(&(x, y))?;
        assert_eq!(got.dtype(), DType::I64);
        assert_eq!(got.to_vec::<i64>()?, want.to_vec::<i64>()?);
    }
    Ok(())
}

#[test]
fn integer_results_carry_no_gradient() -> Result<()> {
    // TF: integer tensors are not differentiable; a float source reached
    // only through integer ops has no gradient
    let x = Tensor::vector(&[1.5f32, 2.5]);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        let i = x.cast(DType::I32)?.reshape(&[1, 2])?;
        let j = i
            .matmul(&i.transpose()?)?
            .pow(&Tensor::scalar(2i32))?
            .bitwise_and(&Tensor::scalar(255i32))?;
        j.mean(&[0, 1], false)?.cast(DType::F32)
    })?;
    assert_eq!(y.to_vec::<f32>()?, vec![25.0]);
    assert!(tape.gradient(&y, &x)?.is_none());
    Ok(())
}

#[test]
fn integer_ops_vectorise_as_a_loop_of_them() -> Result<()> {
    // vmap over the rows of x and y: each row's result equals the op on it
    let body = |a: &[Tensor]| -> Result<Vec<Tensor>> {
        let (x, y) = (&a[0], &a[1]);
        let m = x.reshape(&[2, 2])?.matmul(&y.reshape(&[2, 2])?)?.reshape(&[4])?;
        let b = m.bitwise_xor(&x.left_shift(&Tensor::scalar(3i64))?)?.invert()?;
        Ok(vec![b.pow(&Tensor::scalar(2i64))?.mean(&[0], false)?])
    };
    let x = Tensor::from_vec((0..12).map(|i| i * 7 % 5 - 2).collect::<Vec<i64>>(), &[3, 4])?;
    let y = Tensor::from_vec((0..12).map(|i| i * 3 % 7 - 3).collect::<Vec<i64>>(), &[3, 4])?;
    let v = gradtape::vmap(body, &[Some(0), Some(0)], &[Some(0)]);
    let got = v.call(&[x.clone(), y.clone()])?;
    let mut want = Vec::new();
    for r in 0..3 {
        let row = |t: &Tensor| t.slice(&[r, 0], &[1, 4])?.reshape(&[4]);
        want.extend(body(&[row(&x)?, row(&y)?])?[0].to_vec::<i64>()?);
    }
    assert_eq!(got[0].to_vec::<i64>()?, want);
    Ok(())
}
