//! `lowcomm tune`: on a tiny grid of DiLoCo's outer learning rate where one
//! value diverges (1e30) and one barely moves the model (0.01), the planted
//! best (0.7) wins; the diverged and the clearly-behind points run no more
//! seeds; a rerun reuses every finished run; the winning section, given to
//! `compare --tuned`, is what compare runs; `--init-from` reaches every
//! run; flags tune cannot honour are refused before anything runs.

mod common;

use common::*;
use std::path::Path;

fn tune(dir: &Path, results: &Path, extra: &[&str]) -> std::process::Output {
    let cfg = tiny_toml_file(dir);
    let args = ["tune", "--method", "diloco", "--config", &cfg, "--workers", "2", "--steps", "8", "--h", "2"];
    let rest = ["--results", results.to_str().unwrap(), "--quiet"];
    lowcomm_in(dir, &[&args[..], extra, &rest[..]].concat())
}

#[test]
fn tune_finds_the_planted_best_stops_the_rest_early_and_reuses_finished_runs() {
    let tmp = tempdir();
    let results = tmp.path().join("tune");
    let grid = ["--grid", "outer_lr=1e30,0.7,0.01", "--seeds", "2"];
    let o = tune(tmp.path(), &results, &grid);
    let err = stderr_text(&o);
    assert!(o.status.success(), "{err}");
    assert_mentions(
        &err,
        &["tune [1/6] diloco:outer_lr=1e30 seed 7: running (tune ETA after the first run)", "tune ETA "],
    );
    assert_mentions(&err, &["diloco:outer_lr=1e30 seed 7: training diverged"]);
    assert_mentions(&err, &["2 of 3 points stop after their first seed", "2 runs fewer"]);
    // The diverged and the behind points ran one seed; the best ran both.
    let runs = results.join("runs");
    assert!(runs.join("diloco_outer_lr_0.7-seed-8/result.json").exists());
    assert!(!runs.join("diloco_outer_lr_1e30-seed-8").exists() && !runs.join("diloco_outer_lr_0.01-seed-8").exists());
    let md = std::fs::read_to_string(results.join("summary.md")).unwrap();
    let first = md.lines().find(|l| l.starts_with("| 1 |")).unwrap_or_else(|| panic!("no rank 1:\n{md}"));
    assert!(first.starts_with("| 1 | 0.7 | ok | 2 of 2 | ") && first.contains(" ± "), "{first}");
    assert_mentions(
        &md,
        &[
            "| - | 0.01 | behind (stopped after seed 1) | 1 of 2 |",
            "| - | 1e30 | **diverged** at step",
            "Winner: outer_lr=0.7 (val loss ",
            "outer_lr=0.01: behind after its first seed",
        ],
    );
    let tuned = results.join("tuned.toml");
    let section = std::fs::read_to_string(&tuned).unwrap();
    assert!(section.contains("[methods.diloco]\nh = 2\nouter_lr = 0.7\n"), "{section}");
    assert!(md.contains("```toml\n[methods.diloco]\nh = 2\nouter_lr = 0.7\n```"), "{md}");

    // Again: nothing runs, the same table.
    let stamp = |p: &str| std::fs::metadata(runs.join(p).join("result.json")).unwrap().modified().unwrap();
    let before = stamp("diloco_outer_lr_0.7-seed-8");
    let o = tune(tmp.path(), &results, &grid);
    let err = stderr_text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(err.matches("done earlier, reused").count(), 4, "{err}");
    assert!(!err.contains(": running"), "{err}");
    assert_eq!(stamp("diloco_outer_lr_0.7-seed-8"), before);
    let table = |md: &str| md.split("\nNotes:").next().unwrap().to_string();
    assert_eq!(table(&std::fs::read_to_string(results.join("summary.md")).unwrap()), table(&md));

    // compare --tuned runs diloco with the winner's settings.
    let cmp = tmp.path().join("cmp");
    let cfg = tiny_toml_file(tmp.path());
    let args = ["compare", "--methods", "diloco", "--config", &cfg, "--workers", "2", "--runtime", "sim"];
    let rest = ["--steps", "8", "--tuned", tuned.to_str().unwrap(), "--results", cmp.to_str().unwrap(), "--quiet"];
    let o = lowcomm_in(tmp.path(), &[&args[..], &rest[..]].concat());
    assert!(o.status.success(), "{}", stderr_text(&o));
    let md = std::fs::read_to_string(cmp.join("summary.md")).unwrap();
    assert!(md.contains("diloco: ran as diloco (h 2, outer nesterov lr 0.7"), "{md}");
}

#[test]
fn tune_passes_init_from_to_every_run() {
    let tmp = tempdir();
    let cfg = tiny_toml_file(tmp.path());
    let pre = tmp.path().join("pre");
    let o =
        lowcomm_in(tmp.path(), &["train", "--config", &cfg, "--steps", "2", "--out", pre.to_str().unwrap(), "--quiet"]);
    assert!(o.status.success(), "{}", stderr_text(&o));
    let results = tmp.path().join("tune");
    let o = tune(tmp.path(), &results, &["--grid", "outer_lr=0.7", "--init-from", pre.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr_text(&o));
    let stored = std::fs::read_to_string(results.join("runs/diloco_outer_lr_0.7/result.json")).unwrap();
    let r: serde_json::Value = serde_json::from_str(&stored).unwrap();
    assert!(
        r["config"].as_str().unwrap().contains(&format!("init_from = {:?}", pre.display().to_string())),
        "{stored}"
    );
}

#[test]
fn what_tune_cannot_honour_is_refused_before_anything_runs() {
    let tmp = tempdir();
    let results = tmp.path().join("tune");
    for (extra, says) in [
        (&["--grid", "outer_lr=0.7", "--runtime", "real"][..], "tune runs in the simulator only"),
        (&["--grid", "outer_lr=0.7", "--outer-lr", "0.5"], "--outer-lr and --grid outer_lr both set outer_lr"),
        (&["--grid", "tau=4"], "`tau` is not a setting of diloco"),
        (&["--grid", "outer_lr=0.7", "--stop-at", "2"], "tune: --stop-at applies to one `train` run"),
    ] {
        let o = tune(tmp.path(), &results, extra);
        assert!(!o.status.success(), "{extra:?} accepted");
        assert_mentions(&stderr_text(&o), &[says]);
        assert!(!results.join("runs").exists(), "{extra:?}: a run started");
    }
    let o = lowcomm_in(tmp.path(), &["tune", "--method", "foo", "--grid", "outer_lr=0.7"]);
    assert!(!o.status.success());
    assert_mentions(&stderr_text(&o), &["tune: unknown method `foo` in --method; the methods are: ddp"]);
}
