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
//! **In a traced function** ([`function`](crate::function())) a generator
//! draws the same stream as eagerly, as `tf.random.Generator` does in a
//! `tf.function`: a call of the traced function draws exactly what the
//! eager call would draw at that point of the generator's stream, and
//! leaves the generator where the eager call would. So a traced training
//! step with a [`Dropout`](crate::nn::Dropout) (or any draw from an `Rng`)
//! gives the eager step's values, losses and gradients, bit for bit.
//!
//! How: the generator's key and counter are state shared (an `Arc`) by the
//! `Rng` and by the graph's nodes that draw from it. A tensor drawn from an
//! `Rng` (its [`uniform`](Rng::uniform), [`normal`](Rng::normal),
//! [`truncated_normal`](Rng::truncated_normal), the mask of a `Dropout`, the
//! seed of an attention layer's dropout, the order of
//! [`shuffle_rows`](Rng::shuffle_rows)) becomes a node that, at each run,
//! takes the generator's next seed (advancing it), in program order. A
//! trace is a dry run: the generators its code advanced are put back where
//! they stood when it ends (as its variable writes are kept apart as
//! shadows), and the graph's runs make the draws. Hence:
//!
//! - draws in a [`cond`](crate::cond) branch advance the generator only when
//!   the branch runs, and draws in a [`while_loop`](crate::while_loop) body
//!   at each iteration, as eagerly;
//! - an unused draw is kept in the graph (its node is stateful): it
//!   advances the generator, as eagerly;
//! - a retrace, the trace of a function's gradient and a function traced
//!   inside another leave the generator as they found it; a differentiated
//!   call runs its forward graph once, one draw per draw, and a gradient
//!   that runs it again (a second order reaching its saved values) draws
//!   what that run drew, then puts the generator back;
//! - a generator made by the traced code ([`Rng::new`], a clone, a
//!   [`split`](Rng::split)) is made again at each run, from the same seed
//!   (a new one draws the same values at every call, as eagerly).
//!
//! A graph that draws from a generator should not run on two threads at
//! once (the eager code would not share one generator between two threads
//! either: the draws would interleave).
//!
//! An explicit-seed function called in a trace is stateless: the same
//! values at every run. Host-side draws give host values, which a graph
//! cannot draw again: [`permutation`](Rng::permutation) inside a trace is
//! an error (use [`shuffle_rows`](Rng::shuffle_rows), or draw it outside);
//! [`next_u64`](Rng::next_u64), [`next_seed`](Rng::next_seed),
//! [`next_f64`](Rng::next_f64), [`below`](Rng::below),
//! [`shuffle`](Rng::shuffle) and [`batches`] are made once, at trace time:
//! their values are fixed in the graph, and its runs do not advance the
//! generator for them.

use std::fmt;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::tensor::{alloc, DType, Tensor};

pub(crate) use crate::ops::rng_state::{key_of, State};

/// A seeded generator whose state advances with every draw (TensorFlow's
/// `tf.random.Generator.from_seed`). Not a cryptographic generator.
///
/// Cloning gives an independent copy: it draws what this one would draw
/// next, and advancing one does not advance the other.
///
/// ```
/// use gradtape::Rng;
/// let mut rng = Rng::new(7);
/// let p = rng.permutation(5)?;
/// let mut sorted = p.clone();
/// sorted.sort();
/// assert_eq!(sorted, vec![0, 1, 2, 3, 4]);
/// let mut copy = rng.clone();
/// assert_eq!(copy.next_u64(), rng.next_u64());
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Rng {
    state: Arc<State>,
}

impl Clone for Rng {
    fn clone(&self) -> Rng {
        let (key, counter) = self.state.get();
        let copy = Rng {
            state: State::new(key, counter),
        };
        // (a copy made by traced code is made again at each run)
        crate::ops::random::rng_made(&copy.state, crate::ops::random::Made::Copy(self.state.clone()));
        copy
    }
}

impl PartialEq for Rng {
    /// Two generators are equal when they will draw the same values.
    fn eq(&self, other: &Rng) -> bool {
        self.state.get() == other.state.get()
    }
}

impl Eq for Rng {}

impl fmt::Debug for Rng {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (key, counter) = self.state.get();
        f.debug_struct("Rng")
            .field("key", &key)
            .field("counter", &counter)
            .finish()
    }
}

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        let rng = Rng {
            state: State::new(key_of(seed), 0),
        };
        // (one made by traced code starts again from `seed` at each run)
        crate::ops::random::rng_made(&rng.state, crate::ops::random::Made::New(seed));
        rng
    }

    /// How many draws this generator has made.
    pub fn position(&self) -> u64 {
        self.state.get().1
    }

    /// The next 64 random bits (advances the state by one).
    pub fn next_u64(&mut self) -> u64 {
        self.state.next_u64()
    }

    /// A fresh seed for one of the explicit-seed functions (advances).
    pub fn next_seed(&mut self) -> u64 {
        self.next_u64()
    }

    /// Runs `f` with the next seed, as a draw of this generator's stream:
    /// inside a trace, the random op `f` makes becomes a node that takes
    /// the generator's next seed at each run (see the module docs).
    pub(crate) fn draw<R>(&mut self, f: impl FnOnce(u64) -> R) -> R {
        let seed = self.next_seed();
        crate::ops::random::fresh(&self.state, || f(seed))
    }

    /// A uniform `f64` in `[0, 1)` (advances).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in `0..n` (advances; `0` when `n` is 0). Unbiased
    /// (the short last interval of `u64` is rejected).
    pub fn below(&mut self, n: u64) -> u64 {
        self.state.below(n)
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
        let child = Rng {
            state: State::new(0, 0),
        };
        child.state.split_from(&self.state);
        // (one split off by traced code is split off again at each run)
        crate::ops::random::rng_made(&child.state, crate::ops::random::Made::Split(self.state.clone()));
        child
    }

    /// Uniform values in `[lo, hi)`; see [`Tensor::random_uniform`].
    pub fn uniform(&mut self, shape: &[usize], lo: f64, hi: f64, dtype: DType) -> Result<Tensor> {
        self.draw(|seed| Tensor::random_uniform(shape, lo, hi, dtype, seed))
    }

    /// Normal values `mean + std · z`; see [`Tensor::random_normal`].
    pub fn normal(&mut self, shape: &[usize], mean: f64, std: f64, dtype: DType) -> Result<Tensor> {
        self.draw(|seed| Tensor::random_normal(shape, mean, std, dtype, seed))
    }

    /// Normal values within two standard deviations of `mean`; see
    /// [`Tensor::truncated_normal`].
    pub fn truncated_normal(&mut self, shape: &[usize], mean: f64, std: f64, dtype: DType) -> Result<Tensor> {
        self.draw(|seed| Tensor::truncated_normal(shape, mean, std, dtype, seed))
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
        self.state.shuffle(items);
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
        if crate::function::trace::recording() {
            return Err(Error::invalid(
                "permutation",
                format!(
                    "a permutation of {n} on the host inside a traced function would be drawn once, at trace \
                     time, and never again: use shuffle_rows (a graph node, drawn at each run), or draw it \
                     outside the function and pass it in"
                ),
            ));
        }
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
        // (inside a trace, a node that draws the order at each run)
        t.gather(&crate::ops::random::row_order(&self.state, t.shape()[0])?, 0)
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
