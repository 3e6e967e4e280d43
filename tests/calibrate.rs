//! `lowcomm calibrate` end to end, in-process with fast settings: the
//! profile it writes is one `plan` and `train --runtime sim` take unchanged,
//! its numbers are positive, and bad input gives one clear error.

mod common;

use common::*;
use lowcomm::runtime::cluster::ClusterProfile;
use std::path::Path;

/// Calibrates the tiny settings into `dir/cal.toml` with `extra` flags.
fn calibrate(dir: &Path, extra: &[&str]) -> std::process::Output {
    let out = dir.join("cal.toml").display().to_string();
    let fast = ["--batch-size", "2", "--seq-len", "16", "--repeats", "2", "--warmup", "0", "--max-bytes", "65536"];
    lowcomm_in(dir, &[&["calibrate", "--out", &out][..], &fast, extra].concat())
}

#[test]
fn a_calibrated_profile_is_read_by_plan_and_the_simulator() {
    let tmp = tempdir();
    let o = calibrate(tmp.path(), &["--workers-per-node", "2"]);
    let err = stderr_text(&o);
    assert!(o.status.success(), "{err}");
    // A progress line per phase.
    assert_mentions(
        &err,
        &["calibrate [1/3] micro-batch", "calibrate [2/3] intra-node link", "calibrate [3/3] writing"],
    );
    let path = tmp.path().join("cal.toml");
    let p = ClusterProfile::from_file(&path).unwrap();
    assert_eq!((p.nodes, p.workers_per_node), (1, 2));
    let d = p.device.clone().unwrap();
    let positive = |x: Option<f64>| x.is_some_and(|v| v > 0.0 && v.is_finite());
    assert!(positive(Some(d.peak_flops)) && positive(d.memory_bandwidth) && positive(d.sustained_flops), "{d:?}");
    assert_eq!(p.timing.tokens_per_micro_batch, Some(32));
    let text = std::fs::read_to_string(&path).unwrap();
    assert_mentions(&text, &["WITH ALL 2 WORKERS OF A NODE", "intra: measured", "alpha-beta", "64 KiB:"]);
    let path = path.display().to_string();
    let plan = lowcomm_in(tmp.path(), &["plan", "--model", "nano", "--cluster", &path]);
    assert!(plan.status.success(), "{}", stderr_text(&plan));
    assert!(String::from_utf8_lossy(&plan.stdout).contains("Recommendation"));
    let cfg = tiny_toml_file(tmp.path());
    let sim = lowcomm_in(
        tmp.path(),
        &[
            "train",
            "--config",
            &cfg,
            "--method",
            "demo",
            "--runtime",
            "sim",
            "--cluster",
            &path,
            "--steps",
            "2",
            "--quiet",
        ],
    );
    assert!(sim.status.success(), "{}", stderr_text(&sim));
}

#[test]
fn calibrate_bad_input_gives_one_clear_error() {
    let tmp = tempdir();
    assert_one_error(
        calibrate(tmp.path(), &["--nodes", "2"]),
        &["--nodes 2", "cannot be measured in one process", "--inter 10gbit,50us"],
    );
    assert_one_error(calibrate(tmp.path(), &["--intra", "fast"]), &["--intra: cannot parse link \"fast\""]);
    let out = tmp.path().join("cal.toml").display().to_string();
    let long = lowcomm_in(tmp.path(), &["calibrate", "--out", &out, "--seq-len", "65"]);
    assert_one_error(long, &["--seq-len 65", "context (64)"]);
    assert_one_error(calibrate(tmp.path(), &["--backend", "tcp"]), &["unknown backend `tcp`"]);
    std::fs::write(tmp.path().join("cal.toml"), "keep").unwrap();
    assert_one_error(calibrate(tmp.path(), &[]), &["cal.toml exists", "--force"]);
    assert_eq!(std::fs::read_to_string(tmp.path().join("cal.toml")).unwrap(), "keep");
}
