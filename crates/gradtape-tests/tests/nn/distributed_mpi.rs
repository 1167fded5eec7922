//! The MPI check: builds `examples/digits_mpi.rs` with the feature `mpi`,
//! runs `mpirun -n 2 digits_mpi --check-gradients` and checks that both
//! ranks report that their averaged gradients (dense and sparse) equal the
//! gradients of the whole batch in one process, and that ranks passing
//! different shapes all got an error. Without `mpirun` (or `mpicc`, from
//! `libopenmpi-dev`) on the PATH it prints a skip message and passes, so
//! that a machine with only Rust runs the default suite; set
//! `GRADTAPE_SKIP_MPI=1` to skip it anyway.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Builds the example; the path of its executable.
fn build_example() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gradtape-examples/Cargo.toml");
    let out = Command::new(cargo)
        .args(["build", "--release", "--features", "mpi", "--example", "digits_mpi"])
        .args(["--message-format", "json-render-diagnostics", "--manifest-path"])
        .arg(&manifest)
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo build --features mpi --example digits_mpi failed"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let key = "\"executable\":\"";
    stdout
        .lines()
        .filter(|l| l.contains("digits_mpi"))
        .find_map(|l| {
            let start = l.find(key)? + key.len();
            let end = start + l[start..].find('"')?;
            Some(PathBuf::from(&l[start..end]))
        })
        .expect("cargo reported the example's executable")
}

#[test]
fn two_ranks_average_to_the_whole_batch_gradient() {
    if std::env::var_os("GRADTAPE_SKIP_MPI").is_some_and(|v| v == "1") {
        println!("skipped: GRADTAPE_SKIP_MPI=1");
        return;
    }
    if !on_path("mpirun") {
        println!("skipped: mpirun not found (apt-get install openmpi-bin libopenmpi-dev libclang-dev)");
        return;
    }
    if !on_path("mpicc") {
        println!("skipped: mpicc not found: the mpi feature needs libopenmpi-dev to build");
        return;
    }
    let exe = build_example();
    let version = Command::new("mpirun").arg("--version").output().expect("mpirun runs");
    let mut mpirun = Command::new("mpirun");
    if String::from_utf8_lossy(&version.stdout).contains("Open MPI") {
        // OpenMPI refuses to run as root without it; 2 ranks on fewer cores
        mpirun.args(["--allow-run-as-root", "--oversubscribe"]);
    }
    let mut child = mpirun
        .args(["-n", "2"])
        .arg(&exe)
        .arg("--check-gradients")
        .env("GRADTAPE_NUM_THREADS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun starts");
    let deadline = Instant::now() + Duration::from_secs(300);
    while child.try_wait().expect("mpirun waits").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("mpirun -n 2 digits_mpi --check-gradients did not finish in 300 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("mpirun output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "mpirun failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    for rank in 0..2 {
        assert!(
            stdout.contains(&format!("rank {rank}: gradient check passed")),
            "rank {rank} did not pass:\n{stdout}\n{stderr}"
        );
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("rank {rank}/2:")))
            .expect("the rank's report line");
        assert!(
            line.contains("dense max|diff|") && line.contains("sparse max|diff|"),
            "{line}"
        );
        assert!(line.contains("32 rows"), "the gathered rows of both ranks: {line}");
        assert!(line.contains("on rank 1"), "the mismatch error names rank 1: {line}");
        assert!(!line.contains("FAILED"), "{line}");
    }
}
