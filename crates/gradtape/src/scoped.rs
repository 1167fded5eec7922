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
