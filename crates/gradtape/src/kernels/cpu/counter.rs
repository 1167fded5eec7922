//! A counter-based generator: element `i` of a draw is a fixed function
//! (SplitMix64's output mixer) of the seed, a stream number and `i`, so a
//! value depends on the seed and its index only, never on the number of
//! threads or the order in which chunks are filled. The random ops
//! (`ops::random`) and the dropout of the fused attention kernel draw from
//! it; the kernel recomputes each keep/drop decision from its index instead
//! of storing a mask.

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finaliser: a bijection of `u64` with good avalanche.
#[inline]
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The counter-based generator of one draw: `(seed, stream)` fixes a key;
/// `bits(i)` is the `i`-th output of SplitMix64 started at that key.
#[derive(Clone, Copy, Debug)]
pub struct CounterRng {
    key: u64,
}

impl CounterRng {
    /// The generator of stream `stream` under `seed`.
    pub fn new(seed: u64, stream: u64) -> Self {
        CounterRng {
            key: mix(seed ^ mix(stream.wrapping_add(0x5851_F42D_4C95_7F2D))),
        }
    }

    /// The key `(seed, stream)` fixed (the GPU's dropout recomputes
    /// [`bits`](Self::bits) from it).
    #[inline]
    pub(crate) fn key(self) -> u64 {
        self.key
    }

    #[inline]
    pub(crate) fn bits(self, i: u64) -> u64 {
        mix(self.key.wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA)))
    }

    /// A uniform `f64` in `[0, 1)` (53 random bits).
    #[inline]
    pub fn unit(self, i: u64) -> f64 {
        (self.bits(i) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A standard normal (Box-Muller on counters `2i`, `2i + 1`).
    #[inline]
    pub(crate) fn normal(self, i: u64) -> f64 {
        let u1 = ((self.bits(2 * i) >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64); // (0, 1]
        let u2 = self.unit(2 * i + 1);
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}
