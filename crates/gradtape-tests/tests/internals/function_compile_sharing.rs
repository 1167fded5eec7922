//! The tests of `src/function/compile/sharing.rs`: how a compiled graph's
//! runs decide between sharing the compute threads and running alone
//! (`SharingTrial`, driven with made-up run times: a quiet machine, a busy
//! process arriving and leaving, two busy processes, a near tie), and that
//! runs alone give the bits of shared runs, on a model's gradient step.

use gradtape::__internals::function::compile::exec::Executable;
use gradtape::__internals::function::compile::sharing::{
    SharingRun, SharingTrial, FIRST_INTERVAL, MOST_INTERVAL, RECENT, SHORTEST, TRIAL_RUNS, WARM_RUNS,
};
use gradtape::__internals::kernels::cpu::workers;
use gradtape::{GradientTape, Result, Tensor};

/// The unit of the made-up run times: 100 U is 1 ms, a step's time.
const U: u64 = 10_000;

/// Runs `t` `n` times, each taking `time(alone, run)` nanoseconds (of
/// wall time) the way it says; the ways the runs went.
fn drive(t: &SharingTrial, n: u64, time: impl Fn(bool, u64) -> u64) -> Vec<SharingRun> {
    (0..n)
        .map(|i| {
            let r = t.next().expect("no other thread runs it");
            t.record(r, time(r.alone, i));
            r
        })
        .collect()
}

/// The indices of the runs made alone.
fn alone_at(runs: &[SharingRun]) -> Vec<u64> {
    (0..runs.len() as u64).filter(|&i| runs[i as usize].alone).collect()
}

#[test]
fn on_a_quiet_machine_trials_cost_one_run_alone_at_doubling_intervals() {
    let t = SharingTrial::default();
    // two threads take 100 µs, one thread 150
    let runs = drive(&t, 1000, |alone, _| if alone { 150 * U } else { 100 * U });
    let w = WARM_RUNS;
    let r = RECENT as u64;
    // warm-up untimed and shared; the first trial once RECENT runs were
    // timed, ended by its first run (1.5x: decisive); then every 16, 32,
    // ... runs (counted from the end of the last trial), at most 256
    assert!(runs[..w as usize].iter().all(|r| *r == SharingRun::default()));
    let mut want = vec![w + r];
    let mut interval = FIRST_INTERVAL;
    while want.last().copied().unwrap() + 1 + interval < 1000 {
        let at = want.last().copied().unwrap() + 1 + interval;
        want.push(at);
        interval = (2 * interval).min(MOST_INTERVAL);
    }
    assert_eq!(alone_at(&runs), want);
    assert_eq!(t.status(), (false, want.len() as u32, 0));
    assert!(runs[w as usize..].iter().all(|r| r.timed));
}

#[test]
fn a_busy_neighbour_sends_the_runs_alone_and_its_leaving_brings_them_back() {
    let t = SharingTrial::default();
    // from run 100 to 400 another process takes turns on the cores: shared
    // runs take 2x as long (a helper held off its core mid-task), alone
    // (a core to itself) as before
    let busy = |i: u64| (100..400).contains(&i);
    let runs = drive(&t, 700, |alone, i| match (alone, busy(i)) {
        (true, _) => 150 * U,
        (false, false) => 100 * U,
        (false, true) => 200 * U,
    });
    let way: Vec<bool> = runs.iter().map(|r| r.alone).collect();
    // within RECENT slow runs a trial starts, and its runs alone switch
    let switched = (100..130).find(|&i| way[i..i + 5].iter().all(|&a| a));
    let switched = switched.expect("the runs went alone soon after the neighbour came");
    assert!(switched <= 100 + RECENT + 1, "alone from run {switched}");
    // alone while the neighbour stays, but for trials of one shared run
    let shared: Vec<usize> = (switched..400).filter(|&i| !way[i]).collect();
    assert!(!shared.is_empty() && shared.len() <= 8, "{shared:?}");
    assert!(shared.windows(2).all(|w| w[1] - w[0] > FIRST_INTERVAL as usize));
    // back to sharing within one interval (at most 256 runs) of its leaving
    let back = (400..700).find(|&i| way[i..].iter().filter(|&&a| a).count() <= 3);
    let back = back.expect("the runs came back to sharing");
    assert!(back < 400 + MOST_INTERVAL as usize + RECENT + 2, "back at run {back}");
    let (alone, trials, switches) = t.status();
    assert!(!alone && switches == 2, "{:?}", t.status());
    assert!(trials > 2);
}

#[test]
fn with_two_busy_neighbours_runs_alone_slow_down_and_go_back_to_sharing() {
    let t = SharingTrial::default();
    // one neighbour from run 50 (alone wins), a second from run 200: one
    // thread gets two thirds of a core, two threads a core between them
    let runs = drive(&t, 400, |alone, i| match (alone, i >= 50, i >= 200) {
        (false, false, _) => 100 * U,
        (true, false, _) => 150 * U,
        (false, true, false) => 200 * U,
        (true, true, false) => 150 * U,
        (false, true, true) => 180 * U,
        (true, true, true) => 225 * U,
    });
    assert!(runs[60..200].iter().filter(|r| r.alone).count() > 120);
    // the slow runs alone bring a trial forward, which finds sharing faster
    let back = (200..400).find(|&i| runs[i..i + 10].iter().all(|r| !r.alone));
    let back = back.expect("back to sharing");
    assert!(back <= 200 + RECENT + 2, "back at run {back}");
    assert!(!t.status().0, "{:?}", t.status());
}

#[test]
fn a_near_tie_keeps_sharing() {
    let t = SharingTrial::default();
    // alone 5 % faster: under the 10 % a switch needs
    let runs = drive(&t, 300, |alone, _| if alone { 95 * U } else { 100 * U });
    assert_eq!(t.status().2, 0);
    let alone = alone_at(&runs);
    // each trial ran all its runs alone, then kept sharing
    let n = TRIAL_RUNS as usize;
    assert!(
        alone.len() >= 3 * n && alone.chunks(n).all(|c| c.len() == n && c[n - 1] == c[0] + n as u64 - 1),
        "{alone:?}"
    );
}

#[test]
fn runs_of_two_kinds_are_compared_by_their_mean() {
    let t = SharingTrial::default();
    // shared runs: two fast, then one held by a descheduled helper (mean
    // 2.67x the fast ones' time); alone 1.5x: the fastest shared run
    // would keep sharing, the mean switches
    let runs = drive(&t, 60, |alone, i| match (alone, i % 3) {
        (true, _) => 150 * U,
        (false, 2) => 600 * U,
        (false, _) => 100 * U,
    });
    let (alone, _, switches) = t.status();
    assert!(alone && switches == 1, "{:?}", t.status());
    let first = alone_at(&runs)[0];
    assert_eq!(first, WARM_RUNS + RECENT as u64);
    assert!(runs[first as usize..].iter().filter(|r| !r.alone).count() <= 3);
}

#[test]
fn runs_too_short_to_tell_keep_sharing_untried() {
    let t = SharingTrial::default();
    // a loop's body: 30 µs shared, 10 µs alone (and 1 µs under the bound
    // alone): never tried
    for (shared, alone) in [(30_000, 10_000), (SHORTEST - 1, 1)] {
        let runs = drive(&t, 600, |a, _| if a { alone } else { shared });
        assert!(alone_at(&runs).is_empty());
        assert_eq!(t.status(), (false, 0, 0));
    }
    // at the bound it is
    let t = SharingTrial::default();
    let runs = drive(&t, 100, |a, _| if a { SHORTEST / 2 } else { SHORTEST });
    assert_eq!(alone_at(&runs)[0], WARM_RUNS + RECENT as u64);
    assert!(t.status().0);
}

/// A plan found too short to try is not timed (no clock read, no lock)
/// until the `RECENT` runs before its next look, `MOST_INTERVAL` runs on;
/// every run is still counted, and runs grown long by then (2x `SHORTEST`
/// shared, `SHORTEST` alone) are tried at that look, and go alone.
#[test]
fn runs_too_short_go_untimed_until_their_next_look() {
    let t = SharingTrial::default();
    let long_from = 100;
    let runs = drive(&t, 700, |a, i| match (a, i >= long_from) {
        (_, false) => 30_000,
        (false, true) => 2 * SHORTEST,
        (true, true) => SHORTEST,
    });
    assert_eq!(t.runs(), 700);
    let (w, r, m) = (WARM_RUNS as usize, RECENT, MOST_INTERVAL as usize);
    // timed from the warm-up to the first look (found short) ...
    assert!(runs[w..w + r].iter().all(|x| x.timed && !x.alone));
    // ... then untimed and shared, though the runs grew long at run 100
    let look = w + r + m;
    assert!(look - r > long_from as usize);
    assert!(runs[w + r..look - r].iter().all(|x| *x == SharingRun::default()));
    // timed for the runs the next look compares, which starts a trial
    assert!(runs[look - r..look].iter().all(|x| x.timed && !x.alone));
    assert_eq!(alone_at(&runs)[0], look as u64);
    let (alone, trials, switches) = t.status();
    assert!(alone && trials >= 1 && switches == 1, "{:?}", t.status());
    assert!(runs[look..].iter().all(|x| x.timed));
}

/// A two-layer network's loss and gradients, traced and compiled.
fn mlp_grads() -> (Executable, Vec<Tensor>) {
    let val = |n: usize, k: usize, s: f32| {
        (0..n)
            .map(|i| ((i * 7919 + k * 31) % 101) as f32 * s - 50.0 * s)
            .collect::<Vec<_>>()
    };
    let args = vec![
        Tensor::from_vec(val(128 * 192, 0, 0.02), &[128, 192]).unwrap(),
        Tensor::from_vec(val(192 * 256, 1, 0.002), &[192, 256]).unwrap(),
        Tensor::from_vec(val(256 * 64, 2, 0.002), &[256, 64]).unwrap(),
    ];
    let f = gradtape::function(|(x, w1, w2): &(Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(w1);
            tape.watch(w2);
            x.matmul(w1)?.tanh()?.matmul(w2)?.square()?.mean_all()
        })?;
        let [g1, g2] = tape.gradient(&loss, &[w1.clone(), w2.clone()])?;
        Ok(vec![loss, g1.unwrap(), g2.unwrap()])
    });
    let t = (args[0].clone(), args[1].clone(), args[2].clone());
    let c = f.concrete(&t).unwrap();
    (Executable::compile(c.graph(), &Default::default()).unwrap(), args)
}

fn bits(ts: &[Tensor]) -> Vec<Vec<u32>> {
    ts.iter()
        .map(|t| t.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect())
        .collect()
}

#[test]
fn runs_alone_give_the_bits_of_shared_runs_and_the_plan_runs_its_trials() {
    let (e, args) = mlp_grads();
    let shared = bits(&e.run(&args).unwrap());
    for _ in 0..3 {
        let alone = workers::alone(|| e.run(&args).unwrap());
        assert!(bits(&alone) == shared, "a run alone differs from a shared run");
    }
    // (runs inside `alone` are no trial's: they ran untimed, uncounted)
    let many = workers::threads() > 1;
    assert_eq!(e.plan.sharing.runs(), u64::from(many));
    let n = WARM_RUNS + RECENT as u64 + u64::from(TRIAL_RUNS);
    for _ in 0..n {
        assert!(bits(&e.run(&args).unwrap()) == shared);
    }
    // every run outside went through the plan's trial (none with one
    // thread: nothing to decide); whether it tried running alone depends
    // on the machine's time for a run (SHORTEST), the driven tests above
    // check the decisions
    let want = if many { n + 1 } else { 0 };
    assert_eq!(e.plan.sharing.runs(), want);
}
