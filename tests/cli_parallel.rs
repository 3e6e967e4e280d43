//! `lowcomm train --method ...` end to end: a data-parallel run on each
//! runtime writes its metrics, events, trace and checkpoint; bad parallel
//! settings give one error line naming the field and a valid example.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output};

fn lowcomm(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lowcomm")).args(args).current_dir(cwd).output().expect("spawn lowcomm")
}

/// The tiny run's config with `extra` TOML appended, written into `dir`.
fn config(dir: &Path, extra: &str) -> String {
    let path = dir.join("run.toml");
    std::fs::write(&path, tiny_toml(corpus(), &dir.join("run")) + extra).unwrap();
    path.display().to_string()
}

#[track_caller]
fn one_error(o: Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "expected failure");
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected:\n{err}");
    assert_mentions(lines[0], needles);
}

#[test]
fn parallel_runs_write_metrics_events_trace_and_checkpoint() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    for (runtime, extra) in [("sim", vec!["--link", "1gbit,50us"]), ("real", vec![])] {
        let trace = tmp.path().join(format!("trace-{runtime}.json"));
        let mut args = vec![
            "train",
            "--config",
            &cfg,
            "--method",
            "acco",
            "--workers",
            "2",
            "--runtime",
            runtime,
            "--steps",
            "3",
            "--quiet",
            // The second runtime replaces the first one's run (and its metrics).
            "--force",
        ];
        args.extend(extra.iter());
        let t = trace.display().to_string();
        args.extend(["--trace", &t]);
        let o = lowcomm(tmp.path(), &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let run = tmp.path().join("run");
        let m = read_metrics(&run);
        assert_eq!(records(&m, "train").len(), 3);
        assert_eq!(records(&m, "eval").len(), 1);
        let events = lowcomm::metrics::read_jsonl(&run.join("events.jsonl")).unwrap();
        let summary = events.summary.expect("summary line");
        assert_eq!(summary.world, 2);
        assert!(summary.bytes_sent > 0 && summary.overlap_ratio.is_some());
        let tr: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
        assert!(tr.to_string().contains("worker 1 comm"));
        lowcomm::checkpoint::load(&run).expect("final checkpoint loads");
        for plot in ["loss_vs_tokens.svg", "loss_vs_time.svg"] {
            assert!(std::fs::read_to_string(run.join(plot)).unwrap().starts_with("<svg"), "{plot}");
        }
    }
}

#[test]
fn bad_parallel_settings_name_the_field_and_an_example() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    let run = |extra: &[&str]| {
        let mut args = vec!["train", "--config", &cfg, "--steps", "1"];
        args.extend(extra);
        lowcomm(tmp.path(), &args)
    };
    one_error(run(&["--method", "acc0"]), &["unknown method `acc0`", "ddp, zero1, dpu, acco-wp, acco"]);
    one_error(run(&["--method", "ddp", "--workers", "0"]), &["--workers", "at least 1"]);
    one_error(
        run(&["--method", "ddp", "--workers", "3", "--speeds", "1,0.5"]),
        &["--speeds has 2 values", "3 workers", "--speeds 1,1,1"],
    );
    one_error(run(&["--method", "ddp", "--workers", "2", "--link", "1gbt,50us"]), &["--link", "1gbt", "e.g."]);
    one_error(run(&["--method", "ddp", "--runtime", "cloud"]), &["unknown runtime `cloud`", "--runtime sim"]);
    let bad = tmp.path().join("bad-cluster.toml");
    std::fs::write(&bad, "name = \"x\"\nnodes = 2\nworkers_per_node = 2\n[device]\npeak_flops = 1e12\nutilization = 0.5\n[links]\nintra = \"0gbit\"\ninter = \"10gbit\"\n").unwrap();
    let b = bad.display().to_string();
    one_error(run(&["--method", "acco", "--runtime", "sim", "--cluster", &b]), &["links.intra", "e.g."]);
    std::fs::write(&bad, "name = \"x\"\nnodes = 2\nworkers_per_node = 2\n[device]\npeak_flops = 1e12\nutilization = 0.5\n[links]\nintra = \"10gbit\"\n").unwrap();
    one_error(run(&["--method", "acco", "--runtime", "sim", "--cluster", &b]), &["links.inter"]);
}

#[cfg(not(feature = "mpi"))]
#[test]
fn mpi_backend_without_the_feature_says_how_to_build_it() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    one_error(
        lowcomm(tmp.path(), &["train", "--config", &cfg, "--backend", "mpi", "--method", "zero1"]),
        &["built without MPI", "--features mpi", "libmpich-dev"],
    );
    one_error(
        lowcomm(tmp.path(), &["train", "--config", &cfg, "--backend", "tcp", "--method", "zero1"]),
        &["unknown backend `tcp`", "--backend local"],
    );
}
