//! The local-update methods (local-sgd, overlap-local-sgd, slowmo, co2)
//! from the command line: flags write their `[methods.NAME]` keys, bad
//! values give one error naming the key and an example, a co2 run reports
//! its overlap and memory, `compare` runs them next to zero1 on both
//! runtimes, and a stopped run resumes bit for bit.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output};

fn lowcomm(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lowcomm")).args(args).current_dir(cwd).output().expect("spawn lowcomm")
}

fn config(dir: &Path, extra: &str) -> String {
    let path = dir.join("run.toml");
    std::fs::write(&path, tiny_toml(corpus(), &dir.join("run")) + extra).unwrap();
    path.display().to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn one_error(o: Output, needles: &[&str]) {
    let err = stderr(&o);
    assert!(!o.status.success(), "expected failure");
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected:\n{err}");
    assert_mentions(lines[0], needles);
}

#[test]
fn bad_local_settings_name_the_key_and_an_example() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    let run = |extra: &[&str]| {
        let mut args = vec!["train", "--config", &cfg, "--workers", "2", "--steps", "2"];
        args.extend(extra);
        lowcomm(tmp.path(), &args)
    };
    // Flag values out of range are refused by the command line parser.
    let clap_error = |o: Output, needles: &[&str]| {
        assert!(!o.status.success());
        assert_mentions(stderr(&o).lines().next().unwrap_or(""), needles);
    };
    clap_error(run(&["--method", "co2", "--tau", "0"]), &["--tau", "at least 1"]);
    one_error(
        run(&["--method", "co2", "--outer-lr", "0"]),
        &["[methods.co2]", "outer_lr must be > 0", "--outer-lr 1.0"],
    );
    one_error(run(&["--method", "slowmo", "--outer-lr", "-1"]), &["[methods.slowmo]", "outer_lr must be > 0"]);
    one_error(run(&["--method", "co2", "--outer-momentum", "1"]), &["outer_momentum must be in [0, 1)", "0.5"]);
    one_error(run(&["--method", "slowmo", "--outer-momentum", "-0.5"]), &["outer_momentum must be in [0, 1)"]);
    clap_error(run(&["--method", "co2", "--outer-clip", "0"]), &["--outer-clip", "> 0", "off"]);
    one_error(run(&["--method", "overlap-local-sgd", "--pull", "1.5"]), &["pull must be in (0, 1]", "pull = 0.5"]);
    one_error(run(&["--method", "local-sgd", "--inner-state", "share"]), &["[methods.local-sgd]", "share"]);
    // A flag of another method names the flag and the methods that take it.
    one_error(run(&["--method", "slowmo", "--penalty", "off"]), &["--penalty is a setting of co2, not of slowmo"]);
    one_error(
        run(&["--method", "zero1", "--tau", "4"]),
        &["--tau is a setting of local-sgd, overlap-local-sgd, slowmo, co2, not of zero1"],
    );
    let cfg2 = config(tmp.path(), "\n[methods.co2]\ntau = 0\n");
    one_error(
        lowcomm(tmp.path(), &["train", "--config", &cfg2, "--method", "co2", "--workers", "2", "--steps", "2"]),
        &["[methods.co2]: tau must be at least 1", "tau = 12"],
    );
    let cfg3 = config(tmp.path(), "\n[methods.co2]\npull = 0.5\nclip = 0.0\n");
    one_error(
        lowcomm(tmp.path(), &["train", "--config", &cfg3, "--method", "co2", "--workers", "2", "--steps", "2"]),
        &["`pull` is a setting of overlap-local-sgd, not of co2"],
    );
}

#[test]
fn a_co2_run_reports_progress_overlap_and_memory_by_category() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    let o = lowcomm(
        tmp.path(),
        &[
            "train",
            "--config",
            &cfg,
            "--method",
            "co2",
            "--workers",
            "4",
            "--runtime",
            "sim",
            "--link",
            "20mbit,1ms",
            "--tau",
            "6",
            "--outer-clip",
            "off",
            "--steps",
            "12",
        ],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_mentions(&err, &["co2 (tau 6, alpha 0.5, beta 0, penalty, no clip)", "round 12/12", "overlap"]);
    assert_mentions(&err, &["outer state", "Table 1 formula"]);
    let m = read_metrics(&tmp.path().join("run"));
    assert_eq!(records(&m, "train").len(), 12, "one record per inner step");
    let saved = std::fs::read_to_string(tmp.path().join("run/config.toml")).unwrap();
    assert!(
        saved.contains("[methods.co2]") && saved.contains("tau = 6") && saved.contains("clip = \"off\""),
        "{saved}"
    );
}

#[test]
fn compare_runs_the_local_methods_next_to_zero1_on_both_runtimes() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    for runtime in ["sim", "real"] {
        let results = tmp.path().join(format!("cmp-{runtime}"));
        let r = results.display().to_string();
        let o = lowcomm(
            tmp.path(),
            &[
                "compare",
                "--methods",
                "zero1,local-sgd,slowmo,overlap-local-sgd,co2",
                "--config",
                &cfg,
                "--workers",
                "2",
                "--runtime",
                runtime,
                "--steps",
                "4",
                "--tau",
                "2",
                "--results",
                &r,
                "--quiet",
            ],
        );
        assert!(o.status.success(), "{runtime}: {}", stderr(&o));
        let summary = std::fs::read_to_string(results.join("summary.md")).unwrap();
        for m in ["| zero1 |", "| local-sgd |", "| slowmo |", "| overlap-local-sgd |", "| co2 |"] {
            assert!(summary.contains(m), "{runtime}: {m} missing:\n{summary}");
        }
        // --tau went to the local-update methods only.
        let zero1 = std::fs::read_to_string(results.join("runs/zero1/config.toml")).unwrap();
        assert!(!zero1.contains("tau"), "{zero1}");
        let co2 = std::fs::read_to_string(results.join("runs/co2/config.toml")).unwrap();
        assert!(co2.contains("tau = 2"), "{co2}");
    }
    // A method flag no compared method takes is refused.
    let o = lowcomm(tmp.path(), &["compare", "--methods", "zero1,ddp", "--config", &cfg, "--tau", "2", "--quiet"]);
    assert!(!o.status.success());
    assert_mentions(&stderr(&o), &["--tau applies to none of zero1, ddp", "a setting of local-sgd"]);
    // A bad variant is refused before the first method runs.
    let results = tmp.path().join("bad-variant");
    let o = lowcomm(
        tmp.path(),
        &["compare", "--methods", "zero1,co2:penalty=off", "--config", &cfg, "--results", results.to_str().unwrap()],
    );
    one_error(o, &["--methods co2:penalty=off", "values are TOML", "expected a boolean"]);
    assert!(!results.join("runs/zero1").exists(), "zero1 ran before the bad variant was refused");
}

#[test]
fn a_stopped_co2_run_resumes_at_its_outer_round_and_gives_the_same_bits() {
    // tau 2, 6 steps, a stop asked at step 3: the run finishes the outer
    // round (step 4) and saves there; resumed, it ends where the
    // uninterrupted run ends, bit for bit (sim), with the same curve.
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    let run = |out: &str, extra: &[&str]| {
        let mut args = vec![
            "train",
            "--config",
            &cfg,
            "--method",
            "co2",
            "--tau",
            "2",
            "--workers",
            "2",
            "--runtime",
            "sim",
            "--link",
            "5mbit,1ms",
            "--steps",
            "6",
            "--quiet",
            "--out",
            out,
        ];
        args.extend(extra);
        let o = lowcomm(tmp.path(), &args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
    };
    run("whole", &[]);
    run("part", &["--stop-at", "3"]);
    let ck = lowcomm::checkpoint::load(&tmp.path().join("part")).unwrap();
    assert_eq!(ck.state.step, 4, "the stop finishes its outer round");
    // Resuming with another tau is refused, naming tau; nothing is lost.
    let o = lowcomm(tmp.path(), &["train", "--resume", "part", "--tau", "3", "--quiet"]);
    assert!(!o.status.success());
    assert_mentions(&stderr(&o), &["step 4", "tau = 3", "saved with another tau (resume with that one)"]);
    let o = lowcomm(tmp.path(), &["train", "--resume", "part", "--quiet"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bits = |d: &str| -> Vec<u32> {
        lowcomm::checkpoint::load(&tmp.path().join(d)).unwrap().params.iter().map(|x| x.to_bits()).collect()
    };
    assert!(bits("whole") == bits("part"), "resumed co2 differs from the uninterrupted run");
    let curve = |d: &str| -> Vec<(u64, f64, f64)> {
        records(&read_metrics(&tmp.path().join(d)), "train")
            .iter()
            .map(|r| (r["step"].as_u64().unwrap(), r["loss"].as_f64().unwrap(), r["wall_s"].as_f64().unwrap()))
            .collect()
    };
    assert_eq!(curve("whole"), curve("part"));
}

#[test]
fn diloco_from_the_command_line_writes_its_keys_and_refuses_bad_values() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    let run = |extra: &[&str]| {
        let mut args = vec!["train", "--config", &cfg, "--workers", "2", "--steps", "4", "--method", "diloco"];
        args.extend(extra);
        lowcomm(tmp.path(), &args)
    };
    let clap_error = |o: Output, needles: &[&str]| {
        assert!(!o.status.success());
        assert_mentions(stderr(&o).lines().next().unwrap_or(""), needles);
    };
    clap_error(run(&["--h", "0"]), &["--h", "at least 1"]);
    clap_error(run(&["--dn-buffer", "0"]), &["--dn-buffer", "at least 1"]);
    one_error(
        run(&["--outer", "dn", "--dn-buffer", "4", "--dn-c", "0.5"]),
        &["[methods.diloco]", "dn_c must be in [0, 1/N]"],
    );
    one_error(run(&["--outer", "adam"]), &["[methods.diloco]", "outer \"adam\" does not exist", "--outer nesterov"]);
    one_error(run(&["--outer-momentum", "1"]), &["[methods.diloco]", "outer_momentum must be in [0, 1)", "0.9"]);
    one_error(
        run(&["--tau", "2"]),
        &["--tau is a setting of local-sgd, overlap-local-sgd, slowmo, co2, not of diloco"],
    );
    let o = run(&["--runtime", "sim", "--h", "2", "--outer", "dn", "--dn-buffer", "2", "--dn-c", "0.25"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_mentions(&err, &["diloco (h 2, outer dn lr 0.7, beta 0.9, N 2, c 0.25)", "outer state"]);
    assert_eq!(records(&read_metrics(&tmp.path().join("run")), "train").len(), 4, "one record per inner step");
    let saved = std::fs::read_to_string(tmp.path().join("run/config.toml")).unwrap();
    assert!(
        saved.contains("[methods.diloco]") && saved.contains("h = 2") && saved.contains("outer = \"dn\""),
        "{saved}"
    );
}
