//! Thread-local switches set for the length of a call.

use std::cell::Cell;
use std::thread::LocalKey;

/// Runs `f` with the thread-local flag `key` set to `value`, and puts the
/// old value back afterwards (also when `f` panics), so that such calls
/// nest.
pub(crate) fn with_flag<R>(key: &'static LocalKey<Cell<bool>>, value: bool, f: impl FnOnce() -> R) -> R {
    struct Reset(&'static LocalKey<Cell<bool>>, bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            self.0.with(|c| c.set(self.1));
        }
    }
    let _reset = Reset(key, key.with(|c| c.replace(value)));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! { static ON: Cell<bool> = const { Cell::new(false) }; }

    #[test]
    fn the_flag_is_set_inside_and_restored_after_even_on_panic() {
        assert!(with_flag(&ON, true, || ON.with(Cell::get)));
        assert!(!ON.with(Cell::get));
        assert!(with_flag(&ON, true, || with_flag(&ON, false, || !ON.with(Cell::get))
            && ON.with(Cell::get)));
        let _ = std::panic::catch_unwind(|| with_flag(&ON, true, || panic!("inside")));
        assert!(!ON.with(Cell::get));
    }
}
