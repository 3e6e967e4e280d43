//! Ctrl-C loses nothing (train/interrupt.rs, strategy/stop.rs): SIGINT in
//! the middle of a run stops it at the next round with a checkpoint, exit
//! status 130 and the command that continues it; that command finishes the
//! run bit-identically to one never interrupted. A second Ctrl-C exits at
//! once.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill {sig} {pid}");
}

/// Waits until `RUN/metrics.jsonl` has `lines` lines.
fn wait_for_lines(run: &Path, lines: usize) {
    let start = Instant::now();
    while std::fs::read_to_string(run.join("metrics.jsonl")).map_or(0, |t| t.lines().count()) < lines {
        assert!(start.elapsed() < Duration::from_secs(120), "the run never logged {lines} lines");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The metrics lines without their wall-clock fields.
fn lines_without_wall_time(run: &Path) -> Vec<serde_json::Value> {
    let mut v = read_metrics(run);
    for line in &mut v {
        line.as_object_mut().unwrap().retain(|k, _| !k.contains("wall") && k != "tokens_per_s");
    }
    v
}

/// The final checkpoint's files (model, optimizer or parts, tokenizer).
fn final_tensors(run: &Path) -> Vec<(String, Vec<u8>)> {
    let ckpt = lowcomm::checkpoint::resolve(run).unwrap();
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&ckpt)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no tensors in {}", ckpt.display());
    files
}

/// `train` with `args` into `whole` uninterrupted, and into `cut` with a
/// SIGINT once it has logged some lines, then `--resume`d: same results.
fn interrupted_then_resumed_equals_whole(args: &[&str], steps: u64) {
    let tmp = tempdir();
    let config = tiny_toml_file(tmp.path());
    let (whole, cut) = (tmp.path().join("whole"), tmp.path().join("cut"));
    let steps_s = steps.to_string();
    let run = |out: &Path| {
        let mut a = vec!["train", "--config", &config, "--quiet", "--steps", &steps_s, "--out", out.to_str().unwrap()];
        a.extend(args);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let o = lowcomm_in(tmp.path(), &run(&whole).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", stderr_text(&o));

    let child = Command::new(env!("CARGO_BIN_EXE_lowcomm"))
        .args(run(&cut))
        .current_dir(tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_lines(&cut, 20);
    signal(child.id(), "-INT");
    let o = child.wait_with_output().unwrap();
    let said = stderr_text(&o);
    assert_eq!(o.status.code(), Some(130), "{args:?}: exit status of an interrupted run:\n{said}");
    let resume = format!("continue the run with `lowcomm train --resume {}`", cut.display());
    assert!(said.contains("interrupted: stopped at step ") && said.contains(&resume), "{args:?}:\n{said}");
    let at: u64 = said.split("stopped at step ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(at > 0 && at < steps, "{args:?}: stopped mid-run, at {at} of {steps}");

    let o = lowcomm_in(tmp.path(), &["train", "--resume", cut.to_str().unwrap(), "--quiet"]);
    assert!(o.status.success(), "{args:?}: {}", stderr_text(&o));
    assert_eq!(lines_without_wall_time(&cut), lines_without_wall_time(&whole), "{args:?}: metrics");
    assert!(final_tensors(&cut) == final_tensors(&whole), "{args:?}: the final checkpoints differ");
}

#[test]
fn sigint_mid_run_then_resume_is_bit_identical_to_an_uninterrupted_run_in_the_simulator() {
    interrupted_then_resumed_equals_whole(&["--method", "ddp", "--workers", "2", "--runtime", "sim"], 3000);
    interrupted_then_resumed_equals_whole(
        &["--method", "local-sgd", "--tau", "4", "--workers", "2", "--runtime", "sim"],
        3000,
    );
}

#[test]
fn sigint_mid_run_then_resume_is_bit_identical_for_a_single_worker() {
    interrupted_then_resumed_equals_whole(&[], 1500);
}

#[test]
fn a_second_sigint_exits_at_once() {
    // Rounds of about 40 s (an emulated 100 kbit/s link): the second signal
    // comes in the middle of the first round, and the process ends there,
    // without the checkpoint the first one asked for.
    let tmp = tempdir();
    let config = tiny_toml_file(tmp.path());
    let args =
        ["train", "--config", &config, "--workers", "2", "--runtime", "real", "--link", "100kbit,1ms", "--steps", "10"];
    let child = Command::new(env!("CARGO_BIN_EXE_lowcomm"))
        .args(args)
        .current_dir(tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Training has started once the run holds its directory's lock.
    let lock = tmp.path().join("run").join(lowcomm::train::lock::LOCK_FILE);
    let start = Instant::now();
    while !std::fs::read_to_string(&lock).is_ok_and(|t| t.starts_with(&format!("pid {}\n", child.id()))) {
        assert!(start.elapsed() < Duration::from_secs(60), "the run never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(child.id(), "-INT");
    std::thread::sleep(Duration::from_millis(300));
    signal(child.id(), "-INT");
    let o = child.wait_with_output().unwrap();
    let said = stderr_text(&o);
    assert_eq!(o.status.code(), Some(130), "{said}");
    assert!(said.contains("interrupt: stopping at the end of the current round"), "{said}");
    assert!(!said.contains("interrupted: stopped at step"), "the second signal did not wait for the round:\n{said}");
    assert!(!tmp.path().join("run/checkpoints/latest").exists(), "nothing was saved after the second signal");
}
