//! `lowcomm compare --seeds N`: every method runs N seeds (runs/METHOD for
//! the first, runs/METHOD-seed-S for the others), the table reports mean
//! ± std of the final losses and the time to the target, the plots draw a
//! band, curves.csv keeps every seed, and the finished seeds are reused:
//! a one-seed sweep's run is the first seed of a two-seed one.

mod common;

use common::*;
use std::path::Path;

/// `compare --methods ddp,diloco` on the tiny model, 2 simulated workers, 6 steps, H 2.
fn compare(dir: &Path, results: &Path, seeds: &str) -> std::process::Output {
    let cfg = tiny_toml_file(dir);
    let args = ["compare", "--methods", "ddp,diloco", "--config", &cfg, "--workers", "2", "--runtime", "sim"];
    let rest = ["--steps", "6", "--h", "2", "--seeds", seeds, "--results", results.to_str().unwrap(), "--quiet"];
    lowcomm_in(dir, &[&args[..], &rest[..]].concat())
}

/// The cells of the row of `method` in summary.md's first table.
fn row(md: &str, method: &str) -> Vec<String> {
    let line = md.lines().find(|l| l.starts_with(&format!("| {method} |"))).unwrap_or_else(|| panic!("{md}"));
    line.trim_matches('|').split(" | ").map(|c| c.trim().to_string()).collect()
}

/// `4.1234 ± 0.0567` as (mean, std).
fn spread(cell: &str) -> (f64, f64) {
    let (m, s) = cell.split_once(" ± ").unwrap_or_else(|| panic!("no spread in {cell:?}"));
    (m.parse().unwrap(), s.parse().unwrap())
}

#[test]
fn two_seeds_report_a_spread_a_band_and_every_seed_and_reuse_the_first_seeds_run() {
    let tmp = tempdir();
    let results = tmp.path().join("cmp");
    // One seed first: the table as before, no spread.
    let o = compare(tmp.path(), &results, "1");
    assert!(o.status.success(), "{}", stderr_text(&o));
    let md = std::fs::read_to_string(results.join("summary.md")).unwrap();
    assert!(!row(&md, "ddp")[5].contains('±') && md.contains("one seed: differences under 5% are ties"), "{md}");
    let first = results.join("runs/ddp/result.json");
    let mtime = std::fs::metadata(&first).unwrap().modified().unwrap();

    let o = compare(tmp.path(), &results, "2");
    let err = stderr_text(&o);
    assert!(o.status.success(), "{err}");
    // The tiny config's seed is 7: the second seed is 8; the first seed's runs are reused.
    assert_mentions(&err, &["compare [1/4] ddp seed 7: done earlier, reused", "compare [2/4] ddp seed 8: running"]);
    assert_eq!(err.matches(": running").count(), 2, "{err}");
    assert_eq!(std::fs::metadata(&first).unwrap().modified().unwrap(), mtime, "the first seed was rerun");
    assert!(results.join("runs/diloco-seed-8/result.json").exists());

    let md = std::fs::read_to_string(results.join("summary.md")).unwrap();
    let head = row(&md, "method");
    let col = |name: &str| head.iter().position(|h| h.starts_with(name)).unwrap_or_else(|| panic!("{name}: {head:?}"));
    for m in ["ddp", "diloco"] {
        let r = row(&md, m);
        let (train, train_std) = spread(&r[col("final train loss")]);
        let (val, val_std) = spread(&r[col("val loss")]);
        // Two seeds start from two models: their losses differ.
        assert!(train.is_finite() && train_std > 0.0 && val.is_finite() && val_std > 0.0, "{m}: {r:?}");
    }
    assert_mentions(
        &md,
        &["Seeds: each method ran 2 seeds", "two means are a tie when they differ by no more than the sum"],
    );
    // Every seed's rounds, the seed last.
    let csv = std::fs::read_to_string(results.join("curves.csv")).unwrap();
    assert!(csv.starts_with("method,step,tokens,wall_s,loss,bytes_per_worker,seed\n"), "{csv}");
    for (m, seed) in [("ddp", 7), ("ddp", 8), ("diloco", 7), ("diloco", 8)] {
        assert_eq!(
            csv.lines().filter(|l| l.starts_with(&format!("{m},")) && l.ends_with(&format!(",{seed}"))).count(),
            6
        );
    }
    let svg = std::fs::read_to_string(results.join("loss_vs_tokens.svg")).unwrap();
    assert!(svg.contains("ddp (2 seeds)") && svg.matches("<polygon").count() >= 2, "no band drawn");
    let html = std::fs::read_to_string(results.join("report.html")).unwrap();
    assert!(html.contains("<th>seeds</th><td>2 (--seed 7 and up)</td>"), "the machine table names the seeds");
}

#[test]
fn seeds_draw_their_own_micro_batch_times_on_a_profile_with_a_spread() {
    // A profile with [timing] micro_batch_cv: the simulator draws each
    // micro-batch's time from (seed, worker, index) (sim/straggle.rs), so
    // two seeds meet different slow stretches and end at different virtual
    // times; without a spread every micro-batch costs the same and they
    // end together. (Before, every seed drew the same times.)
    let tmp = tempdir();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let base = std::fs::read_to_string(root.join("configs/clusters/co2-table8-2x1.toml")).unwrap();
    assert!(
        base.trim_end().ends_with("seconds_per_micro_batch = 0.109"),
        "[timing] is no longer the profile's last section"
    );
    let cfg = tiny_toml_file(tmp.path());
    let wall = |results: &Path, run: &str| -> f64 {
        let text = std::fs::read_to_string(results.join("runs").join(run).join("result.json")).unwrap();
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["summary"]["wall_s"].as_f64().unwrap()
    };
    for (cv, differ) in [("0", false), ("0.2", true)] {
        let profile = tmp.path().join(format!("cv-{cv}.toml"));
        std::fs::write(&profile, format!("{base}\nmicro_batch_cv = {cv}\n")).unwrap();
        let results = tmp.path().join(format!("cmp-{cv}"));
        let p = profile.to_str().unwrap();
        let r = results.to_str().unwrap();
        let args = ["compare", "--methods", "ddp", "--config", &cfg, "--runtime", "sim", "--cluster", p];
        let rest = ["--steps", "4", "--seeds", "2", "--results", r, "--quiet"];
        let o = lowcomm_in(tmp.path(), &[&args[..], &rest[..]].concat());
        assert!(o.status.success(), "{}", stderr_text(&o));
        let (seed7, seed8) = (wall(&results, "ddp"), wall(&results, "ddp-seed-8"));
        assert_eq!(seed7 != seed8, differ, "cv {cv}: seed 7 ran {seed7} s, seed 8 {seed8} s");
    }
}
