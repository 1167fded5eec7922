//! A seeded random generator that advances: [`Rng`], TensorFlow's
//! `tf.random.Generator`.
//!
//! The explicit-seed functions ([`Tensor::random_uniform`] and friends) give
//! the same tensor for the same seed. A model needs fresh values for each
//! layer without the user choosing a seed per layer: an [`Rng`] holds a seed
//! and a counter, and each draw takes the next counter value to derive the
//! seed it passes to those functions. Two layers built one after the other
//! from the same `Rng` therefore get different weights, and the whole model
//! is reproducible from the one seed.
//!
//! ```
//! use gradtape::{DType, Rng};
//! let mut rng = Rng::new(42);
//! let a = rng.uniform(&[3], 0.0, 1.0, DType::F32)?;
//! let b = rng.uniform(&[3], 0.0, 1.0, DType::F32)?;
//! assert_ne!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);        // it advanced
//! let again = Rng::new(42).uniform(&[3], 0.0, 1.0, DType::F32)?;
//! assert_eq!(a.to_vec::<f32>()?, again.to_vec::<f32>()?);    // reproducible
//! # Ok::<(), gradtape::Error>(())
//! ```
//!
//! Host-side draws (permutations, shuffles, dropout seeds) use the same
//! SplitMix64 mixer, so they too depend only on the seed and on how many
//! draws came before.
//!
//! Inside a traced function ([`function`](crate::function())), a tensor drawn
//! from an `Rng` (and the mask of a [`Dropout`](crate::nn::Dropout) layer)
//! becomes a node that draws with a new seed at each run of the graph, as
//! `tf.random.Generator` does in a `tf.function`; the `Rng` itself advances
//! only while tracing. An explicit-seed function called in a trace is
//! stateless: the same values at every run. Host-side draws
//! ([`permutation`](Rng::permutation), [`shuffle_rows`](Rng::shuffle_rows))
//! are made once, at trace time.

use crate::error::{Error, Result};
use crate::tensor::{alloc, DType, Tensor};

/// SplitMix64's finaliser: a bijection of `u64` with good avalanche.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seeded generator whose state advances with every draw (TensorFlow's
/// `tf.random.Generator.from_seed`). Not a cryptographic generator.
///
/// ```
/// use gradtape::Rng;
/// let mut rng = Rng::new(7);
/// let p = rng.permutation(5)?;
/// let mut sorted = p.clone();
/// sorted.sort();
/// assert_eq!(sorted, vec![0, 1, 2, 3, 4]);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    key: u64,
    counter: u64,
}

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng {
            key: mix(seed ^ 0x6A09_E667_F3BC_C908),
            counter: 0,
        }
    }

    /// How many draws this generator has made.
    pub fn position(&self) -> u64 {
        self.counter
    }

    /// The next 64 random bits (advances the state by one).
    pub fn next_u64(&mut self) -> u64 {
        self.counter += 1;
        mix(self.key.wrapping_add(self.counter.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
    }

    /// A fresh seed for one of the explicit-seed functions (advances).
    pub fn next_seed(&mut self) -> u64 {
        self.next_u64()
    }

    /// A uniform `f64` in `[0, 1)` (advances).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in `0..n` (advances; `0` when `n` is 0). Unbiased
    /// (the short last interval of `u64` is rejected).
    pub fn below(&mut self, n: u64) -> u64 {
        if n <= 1 {
            return 0;
        }
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let r = self.next_u64();
            if r < zone {
                return r % n;
            }
        }
    }

    /// An independent generator split off this one (advances this one by
    /// one draw), as `tf.random.Generator.split`: give each layer or data
    /// pipeline its own.
    ///
    /// ```
    /// use gradtape::Rng;
    /// let mut rng = Rng::new(1);
    /// let mut child = rng.split();
    /// assert_ne!(child.next_u64(), rng.next_u64());
    /// ```
    pub fn split(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }

    /// Uniform values in `[lo, hi)`; see [`Tensor::random_uniform`].
    pub fn uniform(&mut self, shape: &[usize], lo: f64, hi: f64, dtype: DType) -> Result<Tensor> {
        let seed = self.next_seed();
        crate::ops::random::fresh(|| Tensor::random_uniform(shape, lo, hi, dtype, seed))
    }

    /// Normal values `mean + std · z`; see [`Tensor::random_normal`].
    pub fn normal(&mut self, shape: &[usize], mean: f64, std: f64, dtype: DType) -> Result<Tensor> {
        let seed = self.next_seed();
        crate::ops::random::fresh(|| Tensor::random_normal(shape, mean, std, dtype, seed))
    }

    /// Normal values within two standard deviations of `mean`; see
    /// [`Tensor::truncated_normal`].
    pub fn truncated_normal(&mut self, shape: &[usize], mean: f64, std: f64, dtype: DType) -> Result<Tensor> {
        let seed = self.next_seed();
        crate::ops::random::fresh(|| Tensor::truncated_normal(shape, mean, std, dtype, seed))
    }

    /// Shuffles `items` in place (Fisher–Yates; advances).
    ///
    /// ```
    /// use gradtape::Rng;
    /// let mut v: Vec<u32> = (0..10).collect();
    /// Rng::new(3).shuffle(&mut v);
    /// assert_ne!(v, (0..10).collect::<Vec<_>>());
    /// ```
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }

    /// A random permutation of `0..n` (advances), or
    /// [`Error::OutOfMemory`] when `n` indices cannot be allocated.
    ///
    /// ```
    /// use gradtape::{Error, Rng};
    /// assert_eq!(Rng::new(0).permutation(1).unwrap(), vec![0]);
    /// let e = Rng::new(0).permutation(usize::MAX).unwrap_err();
    /// assert!(matches!(e, Error::OutOfMemory { op: "permutation", .. }));
    /// ```
    pub fn permutation(&mut self, n: usize) -> Result<Vec<usize>> {
        let mut p: Vec<usize> = alloc::try_collect("permutation", 0..n)?;
        self.shuffle(&mut p);
        Ok(p)
    }

    /// The rows of `t` (axis 0) in a random order, TensorFlow's
    /// `tf.random.shuffle`; differentiable (a gather).
    ///
    /// ```
    /// use gradtape::{Rng, Tensor};
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
    /// let s = Rng::new(0).shuffle_rows(&t)?;
    /// let mut rows: Vec<Vec<f32>> = s.to_vec::<f32>()?.chunks(2).map(|c| c.to_vec()).collect();
    /// rows.sort_by(|a, b| a[0].total_cmp(&b[0]));
    /// assert_eq!(rows, vec![vec![1.0, 2.0], vec![3.0, 4.0], vec![5.0, 6.0]]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn shuffle_rows(&mut self, t: &Tensor) -> Result<Tensor> {
        if t.rank() == 0 {
            return Err(Error::invalid("shuffle_rows", "cannot shuffle the rows of a scalar"));
        }
        let p = self.permutation(t.shape()[0]).map_err(|e| e.for_op("shuffle_rows"))?;
        let p: Vec<i64> = alloc::try_collect("shuffle_rows", p.into_iter().map(|i| i as i64))?;
        t.gather(&Tensor::from_vec(p, &[t.shape()[0]])?, 0)
    }
}

/// Mini-batches of row indices `0..n`: `batch_size` at a time, the last one
/// shorter, in a random order when given a generator (one shuffle per call,
/// so one per epoch). A zero `batch_size`, an `n` beyond `i64::MAX` (the
/// indices are `i64`) or one whose indices cannot be allocated is an error.
///
/// ```
/// use gradtape::{random::batches, Rng};
/// let b = batches(5, 2, None)?;
/// assert_eq!(b, vec![vec![0, 1], vec![2, 3], vec![4]]);
/// let b = batches(5, 2, Some(&mut Rng::new(9)))?;
/// assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 2, 1]);
/// assert!(batches(5, 0, None).is_err());
/// assert!(batches(usize::MAX, 2, None).is_err());
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn batches(n: usize, batch_size: usize, rng: Option<&mut Rng>) -> Result<Vec<Vec<i64>>> {
    const OP: &str = "batches";
    if batch_size == 0 {
        return Err(Error::invalid(OP, "batch_size must be positive, got 0"));
    }
    if i64::try_from(n).is_err() {
        return Err(Error::invalid(
            OP,
            format!("{n} rows do not fit i64 indices (at most i64::MAX)"),
        ));
    }
    let mut order: Vec<i64> = alloc::try_collect(OP, (0..n).map(|i| i as i64))?;
    if let Some(rng) = rng {
        rng.shuffle(&mut order);
    }
    let mut out = alloc::try_vec(OP, n.div_ceil(batch_size))?;
    for c in order.chunks(batch_size) {
        let mut b = alloc::try_vec(OP, c.len())?;
        b.extend_from_slice(c);
        out.push(b);
    }
    Ok(out)
}
