//! Thread-local switches set for the length of a call.

use std::cell::Cell;
use std::thread::LocalKey;

/// Runs `f` with the thread-local flag `key` set to `value`, and puts the
/// old value back afterwards (also when `f` panics), so that such calls
/// nest.
pub fn with_flag<R>(key: &'static LocalKey<Cell<bool>>, value: bool, f: impl FnOnce() -> R) -> R {
    struct Reset(&'static LocalKey<Cell<bool>>, bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            self.0.with(|c| c.set(self.1));
        }
    }
    let _reset = Reset(key, key.with(|c| c.replace(value)));
    f()
}

/// `f()`, run by `around` (a wrapper compiled once, which calls its
/// argument once): how a wrapper generic over its closure keeps its own
/// code out of each instance.
#[inline]
pub(crate) fn once<T>(f: impl FnOnce() -> T, around: impl FnOnce(&mut dyn FnMut())) -> T {
    let mut f = Some(f);
    let mut out = None;
    around(&mut || out = f.take().map(|f| f()));
    out.expect("the wrapper calls its closure once")
}
