//! A generator's state (the key and counter of [`Rng`](crate::Rng)), in
//! the ops layer: the `Rng` above and the draw nodes of traced graphs
//! (`ops::random`) share it, and the traces (`function`, a layer above)
//! hear of each advance through a hook ([`install_note`]) rather than
//! being named here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// What a trace does when the traced code is about to advance a generator
/// (notes its state, to put it back when the trace ends); set by the
/// traces when they are first used.
static NOTE: OnceLock<fn(&Arc<State>)> = OnceLock::new();

/// Installs the traces' hook on generator advances (once; later calls do
/// nothing).
pub(crate) fn install_note(note: fn(&Arc<State>)) {
    let _ = NOTE.set(note);
}

/// SplitMix64's finaliser: a bijection of `u64` with good avalanche.
#[inline]
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The key of a generator made from `seed`.
pub(crate) fn key_of(seed: u64) -> u64 {
    mix(seed ^ 0x6A09_E667_F3BC_C908)
}

/// A generator's state: its key and how many draws it made. Shared (an
/// `Arc`) between the `Rng` and the nodes of the traced graphs that draw
/// from it, which read and advance it at each run (see the module docs).
#[derive(Debug)]
pub(crate) struct State {
    key: AtomicU64,
    counter: AtomicU64,
}

impl State {
    pub(crate) fn new(key: u64, counter: u64) -> Arc<State> {
        Arc::new(State {
            key: AtomicU64::new(key),
            counter: AtomicU64::new(counter),
        })
    }

    /// The key and the counter.
    pub(crate) fn get(&self) -> (u64, u64) {
        (self.key.load(Ordering::Relaxed), self.counter.load(Ordering::Relaxed))
    }

    /// Sets the key and the counter.
    pub(crate) fn set(&self, key: u64, counter: u64) {
        self.key.store(key, Ordering::Relaxed);
        self.counter.store(counter, Ordering::Relaxed);
    }

    /// The next 64 random bits (advances the counter by one). Inside a
    /// trace, the trace first notes the state, to put it back when it ends.
    pub(crate) fn next_u64(self: &Arc<Self>) -> u64 {
        if let Some(note) = NOTE.get() {
            note(self);
        }
        let c = self.counter.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        mix(self
            .key
            .load(Ordering::Relaxed)
            .wrapping_add(c.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
    }

    /// A uniform integer in `0..n` (advances; see `Rng::below`).
    pub(crate) fn below(self: &Arc<Self>, n: u64) -> u64 {
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

    /// Shuffles `items` in place (see `Rng::shuffle`).
    pub(crate) fn shuffle<T>(self: &Arc<Self>, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }

    /// Makes `self` the generator split off `parent` (advances `parent`
    /// by one draw): `Rng::split`.
    pub(crate) fn split_from(&self, parent: &Arc<State>) {
        self.set(key_of(parent.next_u64()), 0);
    }
}
