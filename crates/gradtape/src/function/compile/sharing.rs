//! Whether a compiled graph's runs share the compute threads or run on the
//! calling thread alone, decided by timing runs both ways (a
//! [`SharingTrial`] per plan).
//!
//! **Why.** The compute pool's jobs are a fork and a join each: the caller
//! waits for every helper that joined. On a machine whose cores are the
//! step's, that costs microseconds. With another busy process beside the
//! step (two vCPUs, one `yes`), three threads take turns on two cores: a
//! helper taken off its core in the middle of a task holds the job until it
//! runs again, a time slice of a millisecond or more against tasks of
//! microseconds, and the spinning helper takes turns on the caller's core.
//! The `gpt` example's traced step (width 64, 6 layers) then took 33-36 ms
//! on two threads against 16.4 quiet and ~24 on one thread; with one thread
//! the step has a core to itself. With two busy processes it is the other
//! way round: the step's two threads get a core between them, one thread
//! two thirds of one, and sharing wins.
//!
//! A signal of the machine (the caller's wait for a core, Linux's
//! `schedstat`) told the two cases apart badly (`docs/compiler-notes-xeon.md`,
//! "Sharing the CPU"). A compiled graph, though, repeats the same work on
//! every run: its runs' wall times compare the two ways directly, as the
//! executor's pairs of products are decided ([`PairTrial`]).
//!
//! **How.** After [`WARM_RUNS`] (its pairs decided, its buffers made), the
//! plan runs its current way (shared at first), timing every run. A trial
//! runs up to [`TRIAL_RUNS`] runs the other way and switches only if their
//! mean beats the mean of the last [`RECENT`] runs the current way by
//! [`SWITCH`]; a run the other way slower than [`DECISIVE`] times that
//! mean ends the trial at once (on a quiet machine a trial costs one run
//! on one thread). Means, not the fastest runs: with a busy process beside
//! a short step, shared runs are of two kinds, those the neighbour left
//! alone and those in which a helper lost its core for a time slice (a
//! compiled two-layer gradient: 1.6-1.7 ms and 5.6-5.9 ms, mixed, against
//! 2.9-3.2 ms alone), and the fastest of a few shared runs says nothing
//! of their mean. Trials come every `interval` runs, which starts at
//! [`FIRST_INTERVAL`] after a switch and doubles, up to [`MOST_INTERVAL`],
//! while trials keep the current way; and at once when the current way's
//! last [`RECENT`] runs are all slower than [`SLOW`] times its fastest
//! since the last trial (a busy process came; one slow run, a spike of the
//! host's, does not count). Wall time, not CPU time: what a busy neighbour
//! costs is waiting. Plans whose runs take under [`SHORTEST`] (a loop's
//! body, a small function) keep sharing, untried, and are not timed
//! again until the [`RECENT`] runs before their next look, [`MOST_INTERVAL`]
//! runs on: the runs between read no clock and take no lock (an atomic
//! count), since two clock reads and two locks per run were a sixth of a
//! one-op traced call's fixed cost. (A short plan that grows slow in
//! that window is seen at the end of it, not at once.)
//!
//! **Values.** A run alone runs every job of the pool on the calling thread
//! ([`workers::alone`](crate::kernels::cpu::workers::alone)), the path of a
//! job nested in another, whose kernels split their work by the pool's
//! size, not by who runs it; a pair of products runs as a pair's job does
//! inside another job, its two tasks one after the other, in the buffers
//! of its shared runs (so that a trial allocates nothing). The results are
//! the bits of a shared run.
//!
//! [`PairTrial`]: super::pair_products::PairTrial

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Runs before the first trial: the plan's pairs of products decide in
/// their first [`RUNS_TO_DECIDE`](super::pair_products::RUNS_TO_DECIDE),
/// and the first runs make the buffers later runs reuse.
pub const WARM_RUNS: u64 = super::pair_products::RUNS_TO_DECIDE as u64 + 1;
/// The most runs of a trial the other way.
pub const TRIAL_RUNS: u32 = 3;
/// The runs the current way that a trial compares with (their mean), and
/// that must all be slow for a trial to come early.
pub const RECENT: usize = 4;
/// The other way's mean over the current way's recent mean, at most, for
/// a trial to switch.
pub const SWITCH: f64 = 0.9;
/// A run the other way slower than this times the current way's recent
/// mean ends its trial, keeping the current way.
pub const DECISIVE: f64 = 1.25;
/// Runs between trials after a switch.
pub const FIRST_INTERVAL: u64 = 16;
/// The most runs between trials.
pub const MOST_INTERVAL: u64 = 256;
/// Runs shared shorter than this (ns; mean of the recent ones) are not
/// tried alone: a time slice lost (1-4 ms) is many such runs, and a few
/// runs each way measure the host's spikes, not the two ways (the
/// 30-µs body of `rnn_grad`'s loop, tried both ways, made its step slower
/// in 3 of 7 runs).
pub const SHORTEST: u64 = 500_000;
/// Recent runs all slower than this times the best run since the last
/// trial bring the next trial forward.
pub const SLOW: f64 = 1.3;

/// How one run runs: its jobs on the calling thread `alone` or shared;
/// `timed` if [`SharingTrial::record`] wants its wall time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharingRun {
    /// every job of the pool on the calling thread
    pub alone: bool,
    /// the run's time is wanted
    pub timed: bool,
}

/// How a plan's runs use the compute threads (see the module's notes).
#[derive(Default)]
pub struct SharingTrial {
    state: Mutex<State>,
    /// runs of a plan found too short to try that go untimed, without the
    /// lock, before its runs are timed again (see the module's notes)
    untimed: AtomicU64,
    /// such runs made, not yet added to `State::runs`
    skipped: AtomicU64,
}

#[derive(Default)]
struct State {
    /// runs recorded
    runs: u64,
    /// the current way
    alone: bool,
    /// the fastest run the current way since the last trial (ns; 0: none)
    best: u64,
    /// the last runs the current way (ns; 0: none), oldest first
    recent: [u64; RECENT],
    /// the run at which the next trial starts, and the runs between trials
    next_trial: u64,
    interval: u64,
    /// a trial under way: its runs so far, their sum (ns), and the mean
    /// of the current way's recent runs it is compared with
    trial: Option<(u32, u64, u64)>,
    /// trials run, switches made (for tests and notes)
    trials: u32,
    switches: u32,
}

impl SharingTrial {
    /// How the next run runs; `None` while another thread runs the plan
    /// (that run shares, untimed).
    pub fn next(&self) -> Option<SharingRun> {
        if self.untimed.load(Relaxed) > 0 {
            // (shared: only a plan that shares is found too short)
            return Some(SharingRun::default());
        }
        let s = self.state.try_lock().ok()?;
        Some(match (s.runs < WARM_RUNS, s.trial) {
            (true, _) => SharingRun::default(),
            (false, Some(_)) => SharingRun {
                alone: !s.alone,
                timed: true,
            },
            (false, None) => SharingRun {
                alone: s.alone,
                timed: true,
            },
        })
    }

    /// Records a run made as `run` said, which took `ns` nanoseconds of
    /// wall time (ignored when untimed); decides as the module's notes say.
    pub fn record(&self, run: SharingRun, ns: u64) {
        let untimed = self.untimed.load(Relaxed);
        if !run.timed && untimed > 0 {
            // (loads and stores, not read-modify-writes, each of which
            // costs as much as a lock: two threads running the plan at
            // once may lose a count, which only moves the next look)
            self.untimed.store(untimed - 1, Relaxed);
            self.skipped.store(self.skipped.load(Relaxed) + 1, Relaxed);
            return;
        }
        let Ok(mut s) = self.state.lock() else { return };
        s.runs += 1 + self.skipped.swap(0, Relaxed);
        if !run.timed {
            return;
        }
        let ns = ns.max(1);
        if let Some((k, sum, base)) = s.trial {
            if run.alone == s.alone {
                return; // (a run that began before the trial did)
            }
            let (k, sum) = (k + 1, sum + ns);
            let decisive = ns as f64 > DECISIVE * base as f64;
            if !decisive && k < TRIAL_RUNS {
                s.trial = Some((k, sum, base));
                return;
            }
            s.trial = None;
            s.trials += 1;
            s.recent = [0; RECENT];
            s.best = 0;
            let mean = sum / u64::from(k);
            if !decisive && (mean as f64) < SWITCH * base as f64 {
                s.alone = !s.alone;
                s.switches += 1;
                s.interval = FIRST_INTERVAL;
            } else {
                s.interval = (2 * s.interval).clamp(FIRST_INTERVAL, MOST_INTERVAL);
            }
            s.next_trial = s.runs + s.interval;
            return;
        }
        if run.alone != s.alone {
            return;
        }
        s.recent.rotate_left(1);
        s.recent[RECENT - 1] = ns;
        s.best = if s.best == 0 { ns } else { s.best.min(ns) };
        if s.recent.contains(&0) {
            return;
        }
        // every recent run slow (a spike of the host's is one run)
        let fastest = s.recent.iter().copied().min().unwrap_or(0);
        let slow = fastest as f64 > SLOW * s.best as f64;
        if slow || s.runs >= s.next_trial {
            let mean = s.recent.iter().sum::<u64>() / RECENT as u64;
            if !s.alone && mean < SHORTEST {
                // (too short to tell: a run either meets a time slice
                // lost or not; it keeps sharing, as it would without)
                s.next_trial = s.runs + MOST_INTERVAL;
                s.recent = [0; RECENT];
                // untimed until the runs that fill `recent` again
                self.untimed.store(MOST_INTERVAL - RECENT as u64, Relaxed);
                return;
            }
            s.trial = Some((0, 0, mean));
        }
    }

    /// The runs recorded (the runs of the plan that went through it).
    pub fn runs(&self) -> u64 {
        self.state.lock().map_or(0, |s| s.runs) + self.skipped.load(Relaxed)
    }

    /// Whether the runs now go alone, how many trials ran and how many
    /// switched the way.
    pub fn status(&self) -> (bool, u32, u32) {
        self.state
            .lock()
            .map_or((false, 0, 0), |s| (s.alone, s.trials, s.switches))
    }
}
