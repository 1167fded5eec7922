//! The unit tests of `src/scoped.rs`, moved out of the library.

use gradtape::__internals::scoped::*;
use std::cell::Cell;

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
