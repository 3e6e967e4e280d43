//! `lowcomm compare --methods all`: every method runs on the tiny model and
//! lands in one complete, self-contained report.html (well-formed, no
//! external resource); a second run reuses the finished methods, reruns
//! one whose result is missing, and `--fresh` reruns all; a misfit of the
//! setup is skipped under `all` and refused when named; flags of a single
//! `train` run (--out, --resume, --stop-at, ...) are refused.

mod common;

use common::*;
use lowcomm::strategy::Method;
use std::path::Path;
use std::process::{Command, Output};

fn lowcomm(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lowcomm")).args(args).current_dir(cwd).output().expect("spawn lowcomm")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `--methods all` (plus `extra`) on the tiny model: 2 workers on 2 nodes
/// (so bytes cross nodes), simulated, 2 steps, tau and H of 2.
fn compare_all(dir: &Path, results: &Path, extra: &[&str]) -> Output {
    let cfg = dir.join("run.toml");
    std::fs::write(&cfg, tiny_toml(corpus(), &dir.join("run"))).unwrap();
    let (cfg, results) = (cfg.display().to_string(), results.display().to_string());
    let mut args = vec![
        "compare",
        "--methods",
        "all",
        "--config",
        &cfg,
        "--workers",
        "2",
        "--nodes",
        "2",
        "--runtime",
        "sim",
        "--link",
        "100mbit,1ms",
        "--steps",
        "2",
        "--tau",
        "2",
        "--h",
        "2",
        "--results",
        &results,
        "--quiet",
    ];
    args.extend(extra);
    lowcomm(dir, &args)
}

/// Checks that every element of `html` is closed in order (void elements
/// and `<x/>` need no end tag) and returns the start tags' names.
fn balanced_tags(html: &str) -> Result<Vec<String>, String> {
    const VOID: [&str; 4] = ["meta", "br", "hr", "img"];
    let mut open: Vec<String> = Vec::new();
    let mut seen = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        let end =
            rest[i..].find('>').ok_or_else(|| format!("unclosed tag at {:?}", &rest[i..i + 40.min(rest.len() - i)]))?;
        let tag = &rest[i + 1..i + end];
        rest = &rest[i + end + 1..];
        if tag.starts_with('!') {
            continue; // <!DOCTYPE html>
        }
        let name: String = tag.trim_start_matches('/').chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
        if name.is_empty() {
            return Err(format!("a `<` that opens no tag: <{tag}>"));
        }
        if tag.starts_with('/') {
            match open.pop() {
                Some(o) if o == name => {}
                o => return Err(format!("</{name}> closes {o:?}")),
            }
        } else if !tag.ends_with('/') && !VOID.contains(&name.as_str()) {
            open.push(name.clone());
            seen.push(name);
        } else {
            seen.push(name);
        }
    }
    if open.is_empty() {
        Ok(seen)
    } else {
        Err(format!("never closed: {open:?}"))
    }
}

#[test]
fn the_tag_checker_can_fail() {
    assert!(balanced_tags("<p><b>x</p></b>").is_err());
    assert!(balanced_tags("<div>").is_err());
    assert_eq!(balanced_tags("<p>a<br><path d=\"\"/></p>").unwrap(), ["p", "br", "path"]);
}

#[test]
fn compare_all_writes_a_self_contained_report_and_reuses_finished_methods() {
    let tmp = tempdir();
    let results = tmp.path().join("cmp");
    let started = std::time::Instant::now();
    let o = compare_all(tmp.path(), &results, &[]);
    let first_s = started.elapsed().as_secs_f64();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let n = Method::NAMES.len();
    assert!(err.contains(&format!("compare [1/{n}] ddp: running (sweep ETA after the first method)")), "{err}");
    assert!(err.contains(&format!("compare [2/{n}] zero1: running (sweep ETA ")), "{err}");

    let html = std::fs::read_to_string(results.join("report.html")).unwrap();
    let md = std::fs::read_to_string(results.join("summary.md")).unwrap();
    for m in Method::NAMES {
        assert!(html.contains(&format!("<tr><td>{m}</td>")), "{m} missing from report.html");
        assert!(md.contains(&format!("| {m} |")), "{m} missing from summary.md:\n{md}");
    }
    let tags = balanced_tags(&html).unwrap_or_else(|e| panic!("report.html is not well-formed: {e}"));
    assert_eq!(tags.iter().filter(|t| *t == "svg").count(), 3, "three plots inline");
    for (file, title) in [
        ("loss_vs_tokens.svg", "training loss vs tokens"),
        ("loss_vs_time.svg", "training loss vs time"),
        ("loss_vs_bytes.svg", "training loss vs bytes sent"),
    ] {
        assert!(std::fs::read_to_string(results.join(file)).unwrap().contains(title), "{file}");
        assert!(html.contains(title), "{title} not in report.html");
    }
    let lower = html.to_lowercase();
    for external in ["http", "src=", "<link", "@import", "<script", "url(", "xmlns"] {
        assert!(!lower.contains(external), "report.html references an external resource ({external})");
    }
    assert_mentions(
        &html,
        &[
            "lowcomm compare --methods all",
            "sim (simulated cluster, virtual time)",
            "100mbit,1ms",
            "<th>virtual time (s)</th>",
            "co2: ran as co2",
            // Equal tokens by default, said; the global batch per method; a verdict at the end.
            "Budget: every method got the same token budget",
            "<th>global batch (tokens/step)</th>",
            "<h2>Verdict</h2>\n<p class=\"verdict\">Recommendation: ",
        ],
    );

    // Again: every method is reused, its result file untouched.
    let co2 = results.join("runs/co2/result.json");
    let mtime = || std::fs::metadata(&co2).unwrap().modified().unwrap();
    let before = mtime();
    // A method whose run did not finish (no result.json) is rerun.
    std::fs::remove_file(results.join("runs/zero1/result.json")).unwrap();
    let o = compare_all(tmp.path(), &results, &[]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains(&format!("compare [9/{n}] co2: done earlier, reused")), "{err}");
    assert!(err.contains(&format!("compare [2/{n}] zero1: running")), "{err}");
    assert_eq!(err.matches(": running").count(), 1, "only zero1 runs again:\n{err}");
    assert_eq!(mtime(), before, "co2 was rerun");
    assert!(std::fs::read_to_string(results.join("report.html")).unwrap().contains("co2: done earlier, reused"));
    // --fresh reruns all of them.
    let o = compare_all(tmp.path(), &results, &["--fresh"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o).matches(": running").count(), n, "{}", stderr(&o));
    assert!(mtime() > before, "--fresh did not rerun co2");
    eprintln!("compare --methods all on the tiny model took {first_s:.1} s");
}

#[test]
fn a_misfit_is_skipped_under_all_and_refused_when_named() {
    let tmp = tempdir();
    let results = tmp.path().join("cmp");
    let o = compare_all(tmp.path(), &results, &["--grad-accum", "2", "--target-loss", "100"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    for m in ["dpu", "acco-wp", "acco"] {
        assert!(err.contains(&format!("compare: {m}: skipped: ")) && err.contains("--grad-accum 2"), "{m}: {err}");
        assert!(!results.join("runs").join(m).exists(), "{m} ran");
    }
    let html = std::fs::read_to_string(results.join("report.html")).unwrap();
    assert!(html.contains("acco: skipped: ") && !html.contains("<tr><td>acco</td>"), "acco in the table");
    // Every method is below a target of 100 from its first round on.
    assert_mentions(&html, &["<th>time to loss 100.0000 (s)</th>", "--target-loss 100"]);
    assert!(!html.contains("not reached"), "a target of 100 is reached by every method");
    // Named, the same method is refused before anything runs.
    let cfg = tmp.path().join("run.toml").display().to_string();
    let named = tmp.path().join("named");
    let o = lowcomm(
        tmp.path(),
        &[
            "compare",
            "--methods",
            "zero1,acco",
            "--config",
            &cfg,
            "--grad-accum",
            "2",
            "--results",
            named.to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    assert_mentions(&stderr(&o), &["--methods acco: acco does not fit this setup", "--fixed-micro-batches"]);
    assert!(!named.join("runs/zero1").exists(), "zero1 ran before acco was refused");
}

#[test]
fn flags_of_a_single_run_are_refused_before_anything_runs() {
    // Each was accepted and silently ignored before.
    let tmp = tempdir();
    let cfg = tmp.path().join("run.toml");
    std::fs::write(&cfg, tiny_toml(corpus(), &tmp.path().join("run"))).unwrap();
    let results = tmp.path().join("cmp");
    for (flag, value, instead) in [
        ("--method", Some("ddp"), "--methods"),
        ("--out", Some("elsewhere"), "--results/runs/METHOD"),
        ("--trace", Some("t.json"), "trace.json"),
        ("--resume", None, "run the same compare again"),
        ("--stop-at", Some("1"), "lowcomm train --stop-at"),
        ("--force", None, "--fresh"),
    ] {
        let mut args = vec!["compare", "--methods", "ddp", "--config", cfg.to_str().unwrap()];
        args.extend(["--results", results.to_str().unwrap(), flag]);
        args.extend(value);
        let o = lowcomm(tmp.path(), &args);
        let err = stderr(&o);
        assert!(!o.status.success(), "{flag} accepted: {err}");
        assert!(err.contains(&format!("compare: {flag} applies to one `train` run")) && err.contains(instead), "{err}");
        assert!(!results.exists(), "{flag}: {} written", results.display());
    }
}

#[test]
fn duplicate_and_unknown_methods_are_refused_before_anything_runs() {
    // `ddp,ddp` ran twice into runs/ddp and wrote its rows twice; `foo`
    // was answered with a remark on TOML values and a flag compare refuses.
    let tmp = tempdir();
    let cfg = tmp.path().join("run.toml");
    std::fs::write(&cfg, tiny_toml(corpus(), &tmp.path().join("run"))).unwrap();
    let results = tmp.path().join("cmp");
    for (methods, says) in [
        ("ddp,zero1,ddp", "--methods names `ddp` twice"),
        ("ddp,foo", "unknown method `foo` in --methods; the methods are: ddp, zero1"),
    ] {
        let args = ["compare", "--methods", methods, "--config", cfg.to_str().unwrap()];
        let o = lowcomm(tmp.path(), &[&args[..], &["--results", results.to_str().unwrap()]].concat());
        let err = stderr(&o);
        assert!(!o.status.success() && err.contains(says), "{methods}: {err}");
        assert!(!err.contains("TOML") && !err.contains("--method "), "{methods}: {err}");
        assert!(!results.join("runs").exists(), "{methods}: a run started");
    }
}

#[test]
fn compare_help_hides_the_flags_compare_refuses() {
    let o = lowcomm(Path::new("."), &["compare", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && help.contains("--methods") && help.contains("--steps"), "{help}");
    for flag in ["--method ", "--out ", "--resume", "--stop-at", "--force", "--trace"] {
        assert!(!help.contains(flag), "compare --help lists {flag}:\n{help}");
    }
}

/// A method whose run diverges (DiLoCo with an outer learning rate of
/// 1e30: its first outer step throws the model to infinity) does not end
/// the sweep: compare exits 0, its row is marked with the step and what,
/// it is left out of the verdict, and its result (how it ended included)
/// is reused by the next compare.
#[test]
fn a_method_that_diverges_is_marked_and_the_sweep_ends_with_a_verdict() {
    let tmp = tempdir();
    let cfg = tiny_toml_file(tmp.path());
    let results = tmp.path().join("cmp");
    let run = || {
        let args = ["compare", "--methods", "ddp,diloco:outer_lr=1e30", "--config", &cfg, "--workers", "2"];
        let rest = ["--runtime", "sim", "--steps", "4", "--h", "2", "--results", results.to_str().unwrap(), "--quiet"];
        lowcomm(tmp.path(), &[&args[..], &rest[..]].concat())
    };
    let o = run();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("diloco:outer_lr=1e30: training diverged"), "{err}");
    let md = std::fs::read_to_string(results.join("summary.md")).unwrap();
    let row = md.lines().find(|l| l.starts_with("| diloco:outer_lr=1e30 |")).unwrap_or_else(|| panic!("{md}"));
    assert!(row.contains("| **diverged** at step "), "{row}");
    // Its curve up to the divergence is kept: at least the rounds before the outer step.
    let rounds: usize = row.split(" | ").nth(2).unwrap().parse().unwrap();
    assert!(rounds >= 1, "{row}");
    // The verdict ends the summary: ddp, the only method left; the other says why.
    let verdict = md.split("\nVerdict:\n").nth(1).unwrap_or_else(|| panic!("no verdict: {md}"));
    assert!(verdict.trim_start().starts_with("Recommendation: ddp: "), "{verdict}");
    assert!(verdict.contains("- diloco:outer_lr=1e30: diverged: the run stopped at step"), "{verdict}");
    let html = std::fs::read_to_string(results.join("report.html")).unwrap();
    assert!(
        html.contains("<td><strong>diverged</strong> at step")
            && html.contains("<p class=\"verdict\">Recommendation: ddp: ")
    );
    balanced_tags(&html).unwrap_or_else(|e| panic!("report.html is not well-formed: {e}"));
    let stored = std::fs::read_to_string(results.join("runs/diloco_outer_lr_1e30/result.json")).unwrap();
    assert!(stored.contains("\"end\":\"diverged\""), "{stored}");
    // Again: both reused, the mark with them.
    let o = run();
    assert!(o.status.success() && stderr(&o).matches("done earlier, reused").count() == 2, "{}", stderr(&o));
    let again = std::fs::read_to_string(results.join("summary.md")).unwrap();
    assert!(again.contains(row), "{again}");
}
