//! `lowcomm train` checks everything before it touches a run: `--force`
//! replaces an old run only once the new one is known to start, a finished
//! run resumed says there is nothing to do, `--steps` / `--stop-at` outside
//! the run are refused with the range that works, a bad `--trace` path is
//! refused up front, and another model on `--resume` is named field by field.

mod common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A project directory: `data/corpus` (a copy of the shared corpus) and
/// `tiny.toml` with paths relative to it.
fn project(root: &Path) -> PathBuf {
    let dir = root.join("project");
    copy_dir(corpus(), &dir.join("data/corpus"));
    fs::write(dir.join("tiny.toml"), tiny_toml(Path::new("data/corpus"), Path::new("runs/tiny"))).unwrap();
    dir
}

/// `train` of a tiny data-parallel run on the simulated runtime, for
/// `steps`, with `extra` flags (and `--method ddp` unless they name one).
fn dp(steps: &str, extra: &[&str]) -> Vec<String> {
    let mut v =
        vec!["train", "--config", "tiny.toml", "--workers", "2", "--runtime", "sim", "--quiet", "--steps", steps];
    if !extra.contains(&"--method") {
        v.extend(["--method", "ddp"]);
    }
    v.iter().chain(extra).map(|s| s.to_string()).collect()
}

/// Runs `lowcomm ARGS` in `cwd`.
fn lowcomm(cwd: &Path, args: &[String]) -> Output {
    lowcomm_in(cwd, &args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[track_caller]
fn ok(o: Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "lowcomm failed:\n{out}\n{}", stderr_text(&o));
    out
}

#[test]
fn force_keeps_the_old_run_when_parallel_settings_are_invalid() {
    let tmp = tempdir();
    let proj = project(tmp.path());
    ok(lowcomm(&proj, &dp("2", &[])));
    let run = proj.join("runs/tiny");
    let before = snapshot(&run);
    fs::create_dir(proj.join("traces")).unwrap();
    let cases: [(&[&str], &str); 8] = [
        (&["--method", "acco", "--fixed-micro-batches", "0"], "fixed_micro_batches"),
        (&["--speeds", "1,1,1"], "--speeds has 3 values"),
        (&["--data", "nonexist"], "no prepared corpus at"),
        (&["--cluster", "nonexist.toml"], "nonexist.toml"),
        (&["--method", "async-diloco", "--fixed-shards", "--shards", "4"], "shards must equal the workers"),
        (&["--trace", "traces"], "--trace traces: that is a directory"),
        (&["--stop-at", "0"], "--stop-at 0"),
        (&["--stop-at", "3"], "give a step from 1 to 2"),
    ];
    for (extra, says) in cases {
        assert_one_error(lowcomm(&proj, &dp("2", &[&["--force"][..], extra].concat())), &[says]);
        assert!(before == snapshot(&run), "--force with {extra:?} removed or changed the old run");
    }
    // --runtime real with a cluster profile (dp() asks for sim: a config says real).
    let real = tiny_toml(Path::new("data/corpus"), Path::new("runs/tiny"))
        + "\n[parallel]\nruntime = \"real\"\ncluster = \"nonexist.toml\"\n";
    fs::write(proj.join("real.toml"), real).unwrap();
    let args = ["train", "--config", "real.toml", "--method", "ddp", "--quiet", "--force"];
    assert!(!lowcomm_in(&proj, &args).status.success());
    assert!(before == snapshot(&run), "--force with a bad cluster removed the old run");
}

#[test]
fn resuming_a_finished_run_says_nothing_to_do_and_out_of_range_steps_are_refused() {
    let tmp = tempdir();
    let proj = project(tmp.path());
    ok(lowcomm(&proj, &dp("4", &[])));
    let run = proj.join("runs/tiny");
    let before = snapshot(&run);
    let out = ok(lowcomm_in(&proj, &["train", "--resume", "runs/tiny", "--quiet"]));
    assert_mentions(&out, &["nothing to do", "round 4 of 4", "--resume runs/tiny --steps 8"]);
    let below = lowcomm_in(&proj, &["train", "--resume", "runs/tiny", "--steps", "3", "--quiet"]);
    assert_one_error(below, &["--steps 3 is below the run's step 4", "--steps 4 or more"]);
    let stop = lowcomm_in(&proj, &["train", "--resume", "runs/tiny", "--steps", "6", "--stop-at", "9", "--quiet"]);
    assert_one_error(stop, &["--stop-at 9", "from 5 to 6"]);
    assert!(before == snapshot(&run), "a resume with nothing to do changed the run");
    // Single-worker runs refuse the same.
    let fresh =
        lowcomm_in(&proj, &["train", "--config", "tiny.toml", "--out", "runs/one", "--stop-at", "0", "--quiet"]);
    assert_one_error(fresh, &["--stop-at 0", "from 1 to 10"]);
    assert!(!proj.join("runs/one").exists());
    ok(lowcomm_in(&proj, &["train", "--config", "tiny.toml", "--out", "runs/one", "--steps", "2", "--quiet"]));
    let below = lowcomm_in(&proj, &["train", "--resume", "runs/one", "--steps", "1", "--quiet"]);
    assert_one_error(below, &["--steps 1 is below the run's step 2"]);
}

#[test]
fn a_bad_trace_path_is_refused_before_training() {
    let tmp = tempdir();
    let proj = project(tmp.path());
    fs::create_dir(proj.join("out")).unwrap();
    let refused = lowcomm(&proj, &dp("2", &["--trace", "out"]));
    assert_one_error(refused, &["--trace out: that is a directory", "--trace out/trace.json"]);
    let refused = lowcomm(&proj, &dp("2", &["--trace", "tiny.toml/trace.json"]));
    assert_one_error(refused, &["tiny.toml is a file, not a directory"]);
    assert!(!proj.join("runs/tiny").exists(), "a refused run started");
    // A trace into a directory yet to be made works, and the run is complete.
    ok(lowcomm(&proj, &dp("2", &["--trace", "traces/t.json"])));
    assert!(proj.join("traces/t.json").is_file() && proj.join("runs/tiny/config.toml").is_file());
}

#[test]
fn resume_with_another_model_names_the_fields_before_the_corpus() {
    let tmp = tempdir();
    let proj = project(tmp.path());
    // Another vocabulary would also mismatch the corpus: the model is what to fix.
    let other = tiny_toml(Path::new("data/corpus"), Path::new("runs/tiny"))
        .replace(&format!("vocab_size = {VOCAB}"), "vocab_size = 1024")
        .replace("n_layer = 2", "n_layer = 3");
    fs::write(proj.join("other.toml"), other).unwrap();
    for extra in [&["--steps", "2"][..], &["--method", "ddp", "--workers", "2", "--runtime", "sim", "--steps", "2"]] {
        let _ = fs::remove_dir_all(proj.join("runs/tiny"));
        ok(lowcomm_in(&proj, &[&["train", "--config", "tiny.toml", "--quiet"][..], extra].concat()));
        let o = lowcomm_in(&proj, &["train", "--resume", "runs/tiny", "--config", "other.toml", "--quiet"]);
        let err = stderr_text(&o);
        assert!(!err.contains("data prepare") && !err.contains("GptConfig"), "{err}");
        assert_one_error(
            o,
            &[
                "another model",
                "vocab_size 512 (run) vs 1024 (now)",
                "n_layer 2 (run) vs 3 (now)",
                "same model settings",
            ],
        );
    }
}
