//! Asynchronous DiLoCo from the command line: the server is a participant
//! of its own (the last), its curve and updates per worker are reported,
//! the run's model is the server's, flags write `[methods.async-diloco]`,
//! and bad input gives one error naming the key and an example.

mod common;

use common::*;

use lowcomm_in as lowcomm;
use stderr_text as stderr;

#[test]
fn async_diloco_runs_with_a_server_and_reports_it() {
    let tmp = tempdir();
    let cfg = tiny_toml_file(tmp.path());
    let args = [
        "train",
        "--config",
        &cfg,
        "--method",
        "async-diloco",
        "--workers",
        "2",
        "--steps",
        "4",
        "--runtime",
        "sim",
        "--speeds",
        "1,0.5",
        "--h",
        "2",
        "--outer",
        "dn",
        "--dn-buffer",
        "2",
        "--grace",
        "0.25",
        "--dylu",
        "--shards",
        "3",
    ];
    let o = lowcomm(tmp.path(), &args);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_mentions(
        &err,
        &[
            "async-diloco (h 2, outer dn lr 0.7, beta 0.9, N 2, c 0, weight auto, grace 0.25 s, dylu, 3 shards)",
            "inner steps handed out per data shard: 0: ",
            "on 2 workers + a parameter server",
            "server (participant 2):",
            "updates applied (worker 0: ",
            "done: val loss",
        ],
    );
    let metrics = read_metrics(&tmp.path().join("run"));
    let server = records(&metrics, "server");
    assert!(!server.is_empty(), "the server's curve is logged as its own kind");
    assert!(server.iter().all(|r| r["worker"] == 2 && r["micro_batches"] == 0), "{server:?}");
    // DyLU (eq. 6): speeds 1 and 0.5 with H = 2 give rounds of 2 and 1 steps.
    let per_worker = |w: u64| records(&metrics, "worker").iter().filter(|r| r["worker"] == w).count();
    let (fast, slow) = (per_worker(0), per_worker(1));
    assert!(fast > slow && fast + slow >= 8, "t_max = 2 x 4 local steps, more from the fast worker: {fast}, {slow}");
    let saved = std::fs::read_to_string(tmp.path().join("run/config.toml")).unwrap();
    for key in ["[methods.async-diloco]", "grace = 0.25", "dylu = true", "outer = \"dn\"", "shards = 3"] {
        assert!(saved.contains(key), "{key}: {saved}");
    }
    // The final checkpoint holds a part per worker and the server's (with the outer state).
    let entries = checkpoint_entries(&tmp.path().join("run"));
    let last = entries.last().expect("a checkpoint");
    let dir = tmp.path().join("run/checkpoints").join(last);
    for part in ["part-000.safetensors", "part-001.safetensors", "part-002.safetensors"] {
        assert!(dir.join(part).exists(), "{part} in {}", dir.display());
    }
    // Resume: 4 rounds checkpointed every 2 == 2 rounds (--stop-at 2) + --resume, to the bit in sim.
    let ok = |extra: &[&str]| {
        let o = lowcomm(tmp.path(), &[&args[..], extra].concat());
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
    };
    ok(&["--checkpoint-every", "2", "--out", "whole"]);
    ok(&["--checkpoint-every", "2", "--stop-at", "2", "--out", "halves"]);
    ok(&["--checkpoint-every", "2", "--resume", "halves"]);
    let params = |run: &str| ::lowcomm::checkpoint::load(&tmp.path().join(run)).expect("final checkpoint").params;
    let (whole, halves) = (params("whole"), params("halves"));
    assert!(whole.iter().zip(&halves).all(|(a, b)| a.to_bits() == b.to_bits()), "resumed run's model differs");
    // ... and its log has every line of the whole run once: each worker's
    // lines are numbered by its own inner steps and the server's by updates
    // applied, so trimming them all by the checkpoint's round (2) dropped
    // the fast worker's and the server's pre-checkpoint lines past 2.
    let lines = |run: &str| {
        let mut v: Vec<String> = read_metrics(&tmp.path().join(run))
            .iter()
            .filter(|r| ["worker", "server", "train"].contains(&r["kind"].as_str().unwrap_or("")))
            .map(|r| format!("{} {} {} {}", r["kind"], r["worker"], r["step"], r["loss"]))
            .collect();
        v.sort();
        v
    };
    assert_eq!(lines("halves"), lines("whole"), "the resumed run's metrics lines");
}

#[test]
fn one_worker_and_a_server_is_allowed() {
    let tmp = tempdir();
    let cfg = tiny_toml_file(tmp.path());
    let args = ["train", "--config", &cfg, "--method", "async-diloco", "--workers", "1", "--steps", "2", "--h", "1"];
    let o = lowcomm(tmp.path(), &[&args[..], &["--runtime", "sim"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_mentions(&stderr(&o), &["on 1 workers + a parameter server", "2 updates applied (worker 0: 2)"]);
}

#[test]
fn bad_async_diloco_settings_name_the_key_and_an_example() {
    let tmp = tempdir();
    let cfg = tiny_toml_file(tmp.path());
    let base = ["train", "--config", &cfg, "--workers", "2", "--steps", "2", "--method", "async-diloco"];
    let run = |extra: &[&str]| lowcomm(tmp.path(), &[&base[..], extra].concat());
    // Out-of-range flag values are refused by the command line parser, on its first line.
    for (flag, needles) in [
        ("--h", ["--h", "at least 1"]),
        ("--dn-buffer", ["--dn-buffer", "at least 1"]),
        ("--shards", ["--shards", "at least 1"]),
    ] {
        let o = run(&[flag, "0"]);
        assert!(!o.status.success());
        assert_mentions(stderr(&o).lines().next().unwrap_or(""), &needles);
    }
    assert_one_error(run(&["--grace", "-1"]), &["[methods.async-diloco]", "grace must be >= 0 seconds", "--grace 0.5"]);
    assert_one_error(
        run(&["--outer", "dn", "--dn-buffer", "4", "--dn-c", "0.5"]),
        &["[methods.async-diloco]", "dn_c must be in [0, 1/N] = [0, 0.25]"],
    );
    assert_one_error(run(&["--outer", "adam"]), &["[methods.async-diloco]", "outer \"adam\" does not exist"]);
    assert_one_error(run(&["--speeds", "1,1,1"]), &["--speeds has 3 values but there are 2 workers", "--speeds 1,1"]);
    assert_one_error(run(&["--tau", "2"]), &["--tau is a setting of", "not of async-diloco"]);
    assert_one_error(
        run(&["--fixed-shards", "--shards", "3"]),
        &["[methods.async-diloco]", "shards must equal the workers (2), got 3", "--shards 2"],
    );
    assert_one_error(
        lowcomm(tmp.path(), &["train", "--config", &cfg, "--method", "diloco", "--workers", "2", "--grace", "1"]),
        &["--grace is a setting of async-diloco, not of diloco"],
    );
}
