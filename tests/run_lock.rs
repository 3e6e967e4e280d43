//! One run at a time in a run directory (train/lock.rs): two `train`
//! processes racing on one `--out` (with and without `--force`): exactly
//! one trains, the other is refused naming the winner's process id, and the
//! winner's metrics.jsonl holds one line per logged step. A lock left by a
//! killed run is detected and named by the next one.

mod common;

use common::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn spawn(cwd: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_lowcomm"))
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lowcomm")
}

/// A run long enough (a few seconds) that a second one started with it
/// finds it still training.
fn args(config: &str, force: bool) -> Vec<&str> {
    let mut a = vec!["train", "--config", config, "--quiet", "--steps", "1500", "--checkpoint-every", "0"];
    if force {
        a.push("--force");
    }
    a
}

#[test]
fn two_runs_racing_on_one_directory_one_trains_the_other_is_refused_naming_it() {
    for force in [false, true] {
        let tmp = tempdir();
        let config = tiny_toml_file(tmp.path());
        let (a, b) = (spawn(tmp.path(), &args(&config, force)), spawn(tmp.path(), &args(&config, force)));
        let pids = [a.id(), b.id()];
        let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let ok: Vec<usize> = (0..2).filter(|&i| outs[i].status.success()).collect();
        assert_eq!(
            ok.len(),
            1,
            "force {force}: exactly one run trains:\n{}\n{}",
            stderr_text(&outs[0]),
            stderr_text(&outs[1])
        );
        let (winner, loser) = (ok[0], 1 - ok[0]);
        let said = stderr_text(&outs[loser]);
        assert!(
            said.contains("is in use by process") && said.contains(&format!("process {} (", pids[winner])),
            "force {force}: the refusal names the winner, process {}:\n{said}",
            pids[winner]
        );
        let metrics = read_metrics(&tmp.path().join("run"));
        let steps: Vec<u64> = records(&metrics, "train").iter().map(|r| r["step"].as_u64().unwrap()).collect();
        assert_eq!(steps, (1..=1500).collect::<Vec<_>>(), "force {force}: one line per logged step");
        assert_eq!(metrics.len(), 1500 + 1, "force {force}: and the final eval line, nothing else");
    }
}

#[test]
fn a_resume_or_a_fresh_run_into_a_directory_in_use_is_refused_at_once() {
    let tmp = tempdir();
    let config = tiny_toml_file(tmp.path());
    let mut a = spawn(tmp.path(), &args(&config, false));
    let lock = tmp.path().join("run").join(lowcomm::train::lock::LOCK_FILE);
    let held = |pid: u32| std::fs::read_to_string(&lock).is_ok_and(|t| t.starts_with(&format!("pid {pid}\n")));
    let start = Instant::now();
    while !held(a.id()) {
        assert!(start.elapsed() < Duration::from_secs(60), "the run never took its lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    let run = tmp.path().join("run").display().to_string();
    for second in [vec!["train", "--resume", &run], vec!["train", "--config", &config, "--force"]] {
        let o = lowcomm_in(tmp.path(), &second);
        assert_one_error(o, &[&format!("is in use by process {} (", a.id()), &format!("kill -INT {}", a.id())]);
    }
    assert!(a.wait().unwrap().success());
}

#[test]
fn a_lock_left_by_a_killed_run_is_named_and_taken_over() {
    let tmp = tempdir();
    let config = tiny_toml_file(tmp.path());
    let mut a = spawn(tmp.path(), &args(&config, false));
    let lock = tmp.path().join("run").join(lowcomm::train::lock::LOCK_FILE);
    let start = Instant::now();
    while !std::fs::read_to_string(&lock).is_ok_and(|t| t.starts_with("pid ")) {
        assert!(start.elapsed() < Duration::from_secs(60), "the run never took its lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    a.kill().unwrap(); // SIGKILL: no cleanup
    a.wait().unwrap();
    let o = lowcomm_in(tmp.path(), &["train", "--config", &config, "--quiet", "--steps", "5", "--force"]);
    assert!(o.status.success(), "{}", stderr_text(&o));
    let said = stderr_text(&o);
    assert!(
        said.contains(&format!("was locked by process {} (", a.id())) && said.contains("ended without releasing it"),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), "", "released cleanly this time");
}
