//! `--faults` from the command line: an async-diloco run with a crash and
//! a rejoin logs both (`kind: "fault"` in metrics.jsonl), reports who was up
//! when and saves the plan in config.toml; a plan a run cannot honour (a
//! synchronous method, a worker it lacks, times out of order) is one error
//! naming `--faults` before anything is written.

mod common;

use common::*;

use lowcomm_in as lowcomm;
use stderr_text as stderr;

#[test]
fn a_crash_and_a_rejoin_are_logged_and_reported() {
    let tmp = tempdir();
    let cfg = tiny_toml_file(tmp.path());
    // Sim: an inner step costs 0.1 virtual s, so worker 1 dies in its second round.
    let flags = "--method async-diloco --workers 2 --steps 8 --runtime sim --h 2 --faults 1:crash@0.25,1:join@0.5";
    let args: Vec<&str> = ["train", "--config", &cfg].into_iter().chain(flags.split(' ')).collect();
    let o = lowcomm(tmp.path(), &args);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_mentions(&err, &["membership: worker 1: up 0-0.25 s, 0.5-", "(updates sent per worker: "]);
    let metrics = read_metrics(&tmp.path().join("run"));
    let faults = records(&metrics, "fault");
    let got: Vec<(u64, &str, f64)> = faults
        .iter()
        .map(|r| (r["worker"].as_u64().unwrap(), r["event"].as_str().unwrap(), r["at_s"].as_f64().unwrap()))
        .collect();
    assert_eq!(got, [(1, "crash", 0.25), (1, "join", 0.5)]);
    let saved = std::fs::read_to_string(tmp.path().join("run/config.toml")).unwrap();
    assert!(saved.contains("[faults]\nplan = \"1:crash@0.25,1:join@0.5\""), "{saved}");
    // compare passes --faults through; its summary notes who was up when.
    let results = tmp.path().join("results");
    let mut cmp = vec!["compare", "--methods", "async-diloco", "--results", results.to_str().unwrap(), "--quiet"];
    cmp.extend(&args[1..3]);
    cmp.extend(&args[5..]);
    let o = lowcomm(tmp.path(), &cmp);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = std::fs::read_to_string(results.join("summary.md")).unwrap();
    assert_mentions(
        &summary,
        &["async-diloco: ran as async-diloco (", "; worker 1: up 0-0.25 s, 0.5-", "(updates applied per worker: "],
    );
}

#[test]
fn a_plan_a_run_cannot_honour_is_one_error_before_anything_is_written() {
    let tmp = tempdir();
    let cfg = tiny_toml_file(tmp.path());
    let base = ["train", "--config", &cfg, "--workers", "2", "--steps", "2", "--runtime", "sim"];
    let run = |extra: &[&str]| lowcomm(tmp.path(), &[&base[..], extra].concat());
    let example = "e.g. --faults 2:crash@120,2:join@300";
    assert_one_error(
        run(&["--method", "diloco", "--faults", "1:crash@1"]),
        &["--faults", "diloco cannot survive a worker that leaves", "use --method async-diloco"],
    );
    assert_one_error(
        run(&["--method", "async-diloco", "--faults", "2:crash@1"]),
        &["--faults", "names worker 2, but the run has workers 0..1 (--workers 2)", example],
    );
    assert_one_error(
        run(&["--method", "async-diloco", "--faults", "1:join@5,1:crash@9"]),
        &["--faults", "worker 1 joins at 5 s but has not crashed before", example],
    );
    assert_one_error(run(&["--faults", "1:crash@1"]), &["--faults", "--method async-diloco"]);
    // A checkpoint stops the world with every worker up: not with a fault plan.
    assert_one_error(
        run(&["--method", "async-diloco", "--faults", "1:crash@1", "--checkpoint-every", "1"]),
        &["--faults", "not with --checkpoint-every", "a checkpoint needs every worker up"],
    );
    assert!(!tmp.path().join("run").exists(), "nothing written");
    // compare refuses a synchronous method named next to a fault plan, before any run.
    let results = tmp.path().join("results");
    let o = lowcomm(
        tmp.path(),
        &[
            "compare",
            "--methods",
            "async-diloco,ddp",
            "--config",
            &cfg,
            "--workers",
            "2",
            "--faults",
            "1:crash@1",
            "--results",
            &results.display().to_string(),
        ],
    );
    assert_one_error(o, &["--methods ddp", "ddp cannot survive that", "use async-diloco"]);
    assert!(!results.join("runs").exists(), "nothing run");
}
