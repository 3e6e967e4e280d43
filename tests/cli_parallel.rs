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
    // -2 said ">= 0", and 0 was then refused: one range for both (clap's error, with its --help hint).
    let counts: [(&[&str], &str); 3] = [
        (&["--workers", "0"], "--workers"),
        (&["--workers", "-2"], "--workers"),
        (&["--workers", "2", "--nodes", "-1"], "--nodes"),
    ];
    for (args, flag) in counts {
        let o = run(&[&["--method", "ddp"][..], args].concat());
        assert!(!o.status.success(), "{args:?} accepted");
        assert_mentions(&String::from_utf8_lossy(&o.stderr), &[flag, "must be at least 1"]);
    }
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

/// Final parameters of the run in `dir` as bits.
fn final_bits(dir: &Path) -> Vec<u32> {
    lowcomm::checkpoint::load(dir).unwrap().params.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn parallel_runs_resume_bit_identically_from_their_checkpoint_parts() {
    // Uninterrupted: 6 rounds, a checkpoint every 3. Interrupted: stop at
    // round 3 (as a preempted job), then --resume to the end. Same bits,
    // same metrics (a resumed run appends to its log), in sim and real.
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    for (method, runtime) in [("acco", "sim"), ("dpu", "sim"), ("zero1", "real")] {
        let run = |out: &str, extra: &[&str]| {
            let mut args = vec!["train", "--config", &cfg, "--method", method, "--workers", "2", "--runtime", runtime];
            if runtime == "sim" {
                // Slow enough that acco and dpu accumulate several micro-batches per stage.
                args.extend(["--link", "5mbit,1ms"]);
            }
            args.extend(["--steps", "6", "--checkpoint-every", "3", "--quiet", "--out", out]);
            args.extend(extra);
            let o = lowcomm(tmp.path(), &args);
            assert!(o.status.success(), "{method} {runtime} {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        };
        let (whole, part) = (format!("whole-{method}"), format!("part-{method}"));
        run(&whole, &[]);
        run(&part, &["--stop-at", "3"]);
        // The run is moved, and resumed from another directory: it continues where it is.
        let part_dir = tmp.path().join(format!("moved-{method}"));
        std::fs::rename(tmp.path().join(&part), &part_dir).unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let ck = lowcomm::checkpoint::load(&part_dir).unwrap();
        let shape = ck.state.parallel.expect("a data-parallel checkpoint names its parts");
        assert_eq!((ck.state.step, shape.parts.len(), shape.method.as_str()), (3, 2, method));
        for p in &shape.parts {
            assert!(ck.state.files.contains_key(p), "{p} has a sha256 in the manifest");
        }
        let abs = part_dir.display().to_string();
        let o = lowcomm(&elsewhere, &["train", "--resume", &abs, "--quiet"]);
        assert!(o.status.success(), "{method} resume: {}", String::from_utf8_lossy(&o.stderr));
        let (a, b) = (tmp.path().join(&whole), part_dir);
        if method != "acco" || runtime == "sim" {
            assert_eq!(final_bits(&a), final_bits(&b), "{method} {runtime}: resumed run differs");
        }
        let rounds = |d: &Path| -> Vec<(u64, f64)> {
            records(&read_metrics(d), "train")
                .iter()
                .map(|r| (r["step"].as_u64().unwrap(), r["loss"].as_f64().unwrap()))
                .collect()
        };
        assert_eq!(rounds(&a).len(), 6);
        assert_eq!(
            rounds(&a),
            rounds(&b),
            "{method} {runtime}: the resumed log has every round once, with the same losses"
        );
        if runtime == "sim" {
            let tokens_time = |d: &Path| -> Vec<(u64, f64)> {
                records(&read_metrics(d), "train")
                    .iter()
                    .map(|r| (r["tokens"].as_u64().unwrap(), r["wall_s"].as_f64().unwrap()))
                    .collect()
            };
            assert_eq!(tokens_time(&a), tokens_time(&b), "{method}: tokens and virtual time continue");
        }
    }
}

#[test]
fn parallel_resume_refuses_another_method_or_worker_count() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    let o = lowcomm(
        tmp.path(),
        &[
            "train",
            "--config",
            &cfg,
            "--method",
            "zero1",
            "--workers",
            "2",
            "--runtime",
            "sim",
            "--steps",
            "4",
            "--stop-at",
            "2",
            "--quiet",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    one_error(
        lowcomm(tmp.path(), &["train", "--resume", "run", "--method", "acco"]),
        &["trained with method zero1", "--method zero1"],
    );
    one_error(
        lowcomm(tmp.path(), &["train", "--resume", "run", "--workers", "3"]),
        &["trained on 2 workers", "this run has 3"],
    );
    // A damaged part is named.
    let ck = lowcomm::checkpoint::resolve(&tmp.path().join("run")).unwrap();
    std::fs::write(ck.join("part-001.safetensors"), b"garbage").unwrap();
    one_error(lowcomm(tmp.path(), &["train", "--resume", "run"]), &["part-001.safetensors"]);
}

#[test]
fn grad_accum_is_refused_where_a_method_cannot_honour_it() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    one_error(
        lowcomm(
            tmp.path(),
            &["train", "--config", &cfg, "--method", "acco", "--workers", "2", "--grad-accum", "4", "--steps", "1"],
        ),
        &["--grad-accum 4 does not apply to acco", "--fixed-micro-batches"],
    );
}

#[test]
fn method_settings_come_from_their_section_and_misplaced_keys_are_named() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "\n[methods.acco]\nwarmup_steps = 2\n");
    one_error(
        lowcomm(tmp.path(), &["train", "--config", &cfg, "--method", "acco", "--workers", "2", "--steps", "1"]),
        &["[methods.acco]", "`warmup_steps` is a setting of dpu"],
    );
    let cfg = config(tmp.path(), "\n[methods.dpu]\nwarmup_steps = 1\n");
    let o = lowcomm(
        tmp.path(),
        &[
            "train",
            "--config",
            &cfg,
            "--method",
            "dpu",
            "--workers",
            "2",
            "--runtime",
            "sim",
            "--steps",
            "2",
            "--quiet",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    one_error(
        lowcomm(
            tmp.path(),
            &["train", "--config", &cfg, "--method", "zero1", "--workers", "2", "--steps", "1", "--dpu-warmup", "3"],
        ),
        &["--dpu-warmup is a setting of dpu, not of zero1"],
    );
}

#[test]
fn compare_runs_demo_variants_with_bytes_per_tier_and_compression() {
    // FlexDeMo on 2 nodes x 2 (sim), two replicators at one compression
    // rate, and the hybrid AdamW baseline, in one comparison.
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    let results = tmp.path().join("cmp");
    let o = lowcomm(
        tmp.path(),
        &[
            "compare",
            "--methods",
            "flexdemo:compression=0.05,flexdemo:replicator=random:compression=0.05,flexdemo:replicator=full:sign=false:inner=decoupled-adamw",
            "--config",
            &cfg,
            "--runtime",
            "sim",
            "--workers",
            "4",
            "--nodes",
            "2",
            "--steps",
            "3",
            "--quiet",
            "--results",
            &results.display().to_string(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(results.join("summary.md")).unwrap();
    assert!(md.contains("| flexdemo:replicator=random:compression=0.05 |"), "{md}");
    let row = |name: &str| md.lines().rfind(|l| l.starts_with(&format!("| {name} |"))).unwrap().to_string();
    // The last table: bytes per tier, the largest transfer, then payload and compression.
    let random: Vec<String> =
        row("flexdemo:replicator=random:compression=0.05").split('|').map(|c| c.trim().to_string()).collect();
    let comp: f64 = random[7].parse().unwrap();
    assert!((comp - 0.05).abs() < 0.001, "{md}");
    let between: f64 = random[4].parse().unwrap();
    assert!(between > 0.0, "the exchange crosses nodes: {md}");
    let full: Vec<String> = row("flexdemo:replicator=full:sign=false:inner=decoupled-adamw")
        .split('|')
        .map(|c| c.trim().to_string())
        .collect();
    assert!(full[4].parse::<f64>().unwrap() > 10.0 * between, "the baseline sends the whole shard: {md}");
    // The largest single transfer: here the sharding collective inside a node, the same for both.
    let cell = |r: &[String], i: usize| r[i].parse::<f64>().unwrap();
    assert!(cell(&random, 5) > 0.0 && cell(&random, 5) <= cell(&random, 2), "one transfer's peak: {md}");
    assert_eq!(cell(&random, 5), cell(&full, 5), "{md}");
    // Bad input: a replicator that does not exist, and nodes that do not divide the workers.
    let bad =
        lowcomm(tmp.path(), &["train", "--config", &cfg, "--method", "flexdemo", "--replicator", "dct", "--quiet"]);
    one_error(bad, &["replicator \"dct\" does not exist", "--replicator random"]);
    let bad = lowcomm(
        tmp.path(),
        &["train", "--config", &cfg, "--method", "flexdemo", "--workers", "3", "--nodes", "2", "--quiet"],
    );
    one_error(bad, &["--nodes 2 does not divide --workers 3", "--workers 4 --nodes 2"]);
}
