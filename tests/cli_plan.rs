//! `lowcomm plan` end to end: the table, the JSON, and one clear error per bad input.

use std::path::Path;
use std::process::{Command, Output};

fn lowcomm(args: &[&str]) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    Command::new(env!("CARGO_BIN_EXE_lowcomm")).args(args).current_dir(root).output().expect("spawn lowcomm")
}

const A100: &str = "configs/clusters/a100-4x8-100g.toml";

#[test]
fn plan_prints_a_ranked_table_and_writes_every_method_as_json() {
    let json = std::env::temp_dir().join(format!("lowcomm-plan-{}.json", std::process::id()));
    let out = lowcomm(&["plan", "--model", "7.5e9", "--cluster", A100, "--json", json.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}{}", text, String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("| 1 |") && text.contains("Recommendation") && text.contains("does not fit in 80 GB"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    let methods = v["methods"].as_array().unwrap();
    // Every method once; async DiLoCo's row is a bound.
    assert_eq!(methods.len(), lowcomm::strategy::Method::NAMES.len());
    let asy = methods.iter().find(|m| m["method"] == "async-diloco").unwrap();
    assert_eq!(asy["time"]["exact"].as_bool(), Some(false));
    assert!(asy["time"]["rule"].as_str().unwrap().starts_with("bound"), "{asy}");
    assert!(asy["server"]["params"].as_u64().unwrap() > 0, "{asy}");
    // DDP at 7.5e9 in Table 1's mixed precision: (2 + 2 + 12) x 7.5e9 = 120 GB, which does not fit in 80 GB.
    let ddp = methods.iter().find(|m| m["method"] == "ddp").unwrap();
    assert_eq!((ddp["memory_total"].as_f64(), ddp["fits"].as_bool()), (Some(120e9), Some(false)));
}

#[test]
fn plan_bad_input_gives_one_clear_error() {
    let dir = std::env::temp_dir().join(format!("lowcomm-plan-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = dir.join("config.yaml");
    std::fs::write(&yaml, "n_embd: 768").unwrap();
    let json = dir.join("config.json");
    std::fs::write(&json, r#"{"model_type":"llama","hidden_size":4096}"#).unwrap();
    let safetensors = dir.join("model.safetensors");
    std::fs::write(&safetensors, [0u8; 8]).unwrap();
    let gpt2 = dir.join("gpt2.json");
    std::fs::write(&gpt2, r#"{"model_type":"gpt2","n_embd":768,"n_head":12,"vocab_size":50257,"n_positions":1024}"#)
        .unwrap();
    let text = dir.join("text.json");
    std::fs::write(
        &text,
        r#"{"model_type":"llama","hidden_size":"4096","num_hidden_layers":32,"num_attention_heads":32,"intermediate_size":11008,"vocab_size":32000,"max_position_embeddings":4096}"#,
    )
    .unwrap();
    let tcp = "configs/clusters/tcp-4x1-10g.toml";
    // Each: the arguments, what names the field or flag, and the valid example the error gives.
    let cases: [(Vec<&str>, &str, &str); 12] = [
        (
            vec!["--model", text.to_str().unwrap(), "--cluster", A100],
            "field `hidden_size` must be a number",
            "\"hidden_size\": 4096",
        ),
        (
            vec!["--model", "gpt2", "--cluster", tcp, "--speeds", "1,0.5"],
            "--speeds has 2 values but the cluster has 4 workers",
            "e.g. --speeds 1,1,1,0.4",
        ),
        (vec!["--model", yaml.to_str().unwrap(), "--cluster", A100], "unknown model file format", "config.json"),
        (vec!["--model", safetensors.to_str().unwrap(), "--cluster", A100], "unknown model file format", "config.json"),
        (
            vec!["--model", json.to_str().unwrap(), "--cluster", A100],
            "missing field `num_hidden_layers`",
            "\"num_hidden_layers\": 32",
        ),
        (vec!["--model", gpt2.to_str().unwrap(), "--cluster", A100], "missing field `n_layer`", "\"n_layer\": 12"),
        (vec!["--model", "gpt2", "--cluster", tcp, "--require-fit"], "no [device] memory", "memory = 80e9"),
        (
            vec!["--model", "gpt2", "--cluster", tcp, "--methods", "co2", "--tau", "0"],
            "tau must be at least 1",
            "tau = 12",
        ),
        (
            vec!["--model", "gpt2", "--cluster", tcp, "--methods", "demo", "--compression", "1.5"],
            "compression must be in (0, 1]",
            "compression = ",
        ),
        (vec!["--model", "gpt2", "--cluster", tcp, "--batch", "0"], "--batch 0", "e.g. --batch 24x1024"),
        (
            vec!["--model", "gpt2", "--cluster", tcp, "--precision", "fp8"],
            "--precision must be mixed or f32",
            "e.g. --precision mixed",
        ),
        (vec!["--model", "gpt2", "--cluster", tcp, "--wire", "fp8"], "--wire must be f32 or bf16", "e.g. --wire bf16"),
    ];
    for (args, field, example) in cases {
        let out = lowcomm(&[&["plan"], &args[..]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(field) && err.contains(example), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one clear error, not a trace: {err}");
    }
    // Without device memory and without --require-fit, fit is unknown, not an error.
    let out = lowcomm(&["plan", "--model", "gpt2", "--cluster", tcp]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("fit unknown"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plan_memory_rows_are_acco_table_1_on_its_own_example() {
    // ACCO paper, Table 1, last column: K = 12 (AdamW), N = 64, Psi = 7.5B,
    // printed rounded: DDP 120 GB, ZeRO-1 31 GB, SlowMo 150 GB, CO2 180 GB, ACCO 46 GB.
    let json = std::env::temp_dir().join(format!("lowcomm-plan-table1-{}.json", std::process::id()));
    let cluster = "configs/clusters/acco-table1-8x8.toml";
    let methods = "ddp,zero1,slowmo,co2,acco";
    let out = lowcomm(&[
        "plan",
        "--model",
        "7.5e9",
        "--cluster",
        cluster,
        "--methods",
        methods,
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert_eq!(v["workers"], 64);
    let total = |name: &str| {
        let m = v["methods"].as_array().unwrap().iter().find(|m| m["method"] == name).unwrap();
        m["memory_total"].as_f64().unwrap()
    };
    // By hand: (2 + 2 + 12) x 7.5e9; (2 + 2 + 12/64) x 7.5e9; (2 + 2 + 2 x 2 + 12) x 7.5e9; (2 + 2 + 2 + 12/64) x 7.5e9.
    assert_eq!(total("ddp"), 120e9);
    assert_eq!(total("zero1"), 31.40625e9);
    assert_eq!(total("slowmo"), 150e9);
    assert_eq!(total("acco"), 46.40625e9);
    // CO2 as the engine runs it by default keeps its staleness penalty's two
    // extra copies (x_{t-1,1}, x_{t,1}: 2 x 2 bytes), which Table 1 does not
    // count: (2 + 2 + 4 x 2 + 12) x 7.5e9 = 180 GB, plus 30 GB.
    assert_eq!(total("co2"), 180e9 + 30e9);
    // The paper's rounded figures, from the same numbers.
    let rounded: Vec<f64> = ["ddp", "zero1", "slowmo", "acco"].iter().map(|m| (total(m) / 1e9).round()).collect();
    assert_eq!(rounded, [120.0, 31.0, 150.0, 46.0]);
}

#[test]
fn plan_with_speeds_paces_by_the_slowest_and_bounds_acco() {
    let json = std::env::temp_dir().join(format!("lowcomm-plan-speeds-{}.json", std::process::id()));
    let cluster = "configs/clusters/hetero-2x8-mixed-100g.toml";
    let slow_node = "1,1,1,1,1,1,1,1,0.4,0.4,0.4,0.4,0.4,0.4,0.4,0.4";
    let args = ["plan", "--model", "gpt2", "--cluster", cluster, "--methods", "ddp,acco", "--speeds", slow_node];
    let out = lowcomm(&[&args[..], &["--json", json.to_str().unwrap()]].concat());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.starts_with("speeds   1,1"), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    // Micro-batch time of the slowest worker: the A100's over 0.4.
    let even = std::env::temp_dir().join(format!("lowcomm-plan-even-{}.json", std::process::id()));
    let out = lowcomm(&[
        "plan",
        "--model",
        "gpt2",
        "--cluster",
        cluster,
        "--methods",
        "ddp",
        "--json",
        even.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let e: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&even).unwrap()).unwrap();
    std::fs::remove_file(&even).unwrap();
    let ratio = v["micro_batch_s"].as_f64().unwrap() / e["micro_batch_s"].as_f64().unwrap();
    assert!((ratio - 2.5).abs() < 1e-9, "{ratio}");
    let row = |name: &str| v["methods"].as_array().unwrap().iter().find(|m| m["method"] == name).unwrap().clone();
    let (ddp, acco) = (row("ddp"), row("acco"));
    assert_eq!(ddp["time"]["exact"], true);
    assert_eq!(acco["time"]["exact"], false);
    assert!(acco["time"]["rule"].as_str().unwrap().contains("upper bound"));
    // ACCO counts the fast node's extra micro-batches: (8 x 2.5 + 8) / 16 = 1.75 x the paced rate.
    assert!(acco["tokens_per_s"].as_f64().unwrap() > 1.7 * ddp["tokens_per_s"].as_f64().unwrap());
}

#[test]
fn plan_takes_method_variants_and_plans_dylu_per_worker() {
    // As compare takes them: async DiLoCo plain and with DyLU on a node of
    // A100s and a node at 0.4 of their speed. DyLU gives the slow workers
    // floor(0.4 x 50) = 20 steps, so their cycles (and the mean) shorten
    // while every worker still trains at its own speed: about the same tokens/s.
    let json = std::env::temp_dir().join(format!("lowcomm-plan-variants-{}.json", std::process::id()));
    let cluster = "configs/clusters/hetero-2x8-mixed-100g.toml";
    let slow_node = "1,1,1,1,1,1,1,1,0.4,0.4,0.4,0.4,0.4,0.4,0.4,0.4";
    let methods = "async-diloco,async-diloco:dylu=true";
    let args = ["plan", "--model", "gpt2", "--cluster", cluster, "--methods", methods, "--speeds", slow_node];
    let out = lowcomm(&[&args[..], &["--json", json.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    let rows = v["methods"].as_array().unwrap();
    let labels: Vec<&str> = rows.iter().map(|m| m["label"].as_str().unwrap()).collect();
    assert_eq!(labels[0], "async-diloco (H 50, outer Nesterov)");
    // grace "auto" with DyLU: one inner step of the slowest worker, as the plan times it.
    assert!(
        labels[1].starts_with("async-diloco (H 50, outer Nesterov, dylu, grace ") && labels[1].ends_with(" s)"),
        "{labels:?}"
    );
    let (plain, dylu) = (&rows[0], &rows[1]);
    let round = |m: &serde_json::Value| m["time"]["round_s"].as_f64().unwrap();
    assert!(round(dylu) < 0.8 * round(plain), "{} vs {}", round(dylu), round(plain));
    let tps = |m: &serde_json::Value| m["tokens_per_s"].as_f64().unwrap();
    assert!((tps(dylu) / tps(plain) - 1.0).abs() < 0.01, "{} vs {}", tps(dylu), tps(plain));
    // A variant's key that does not exist is the method's own error.
    let out = lowcomm(&["plan", "--model", "gpt2", "--cluster", cluster, "--methods", "async-diloco:dyl=true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("dyl"), "{err}");
}

/// Plan's bad numbers: a negative --model or --batch reached clap as an
/// unknown flag, 1e30 printed a saturated u64 of GB, --tau and
/// --compression no listed method takes were accepted and ignored, and a
/// method named twice was planned twice.
#[test]
fn plan_answers_out_of_range_numbers_and_unused_knobs_with_one_error() {
    let tcp = "configs/clusters/tcp-4x1-10g.toml";
    let cases: [(&[&str], &str); 7] = [
        (&["--model", "-5"], "must be in [1, 1e15]"),
        (&["--model", "1e30", "--methods", "ddp"], "beyond the 1e15 a plan covers"),
        (&["--model", "gpt2", "--batch", "-3"], "each at least 1"),
        (&["--model", "gpt2", "--methods", "ddp", "--tau", "5"], "--tau applies to none of ddp"),
        (&["--model", "gpt2", "--methods", "ddp", "--compression", "0.5"], "--compression applies to none of ddp"),
        (&["--model", "gpt2", "--methods", "ddp,ddp"], "--methods names `ddp` twice"),
        (&["--model", "gpt2", "--methods", "ddp,foo"], "unknown method `foo` in --methods; the methods are: ddp"),
    ];
    for (args, says) in cases {
        let out = lowcomm(&[&["plan", "--cluster", tcp], args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one clear error: {err}");
    }
}

/// The micro-batch is a token count (the profile's 24576); for nano, whose
/// context is 64, the plan says that is 384 sequences, not 24 of 1024.
#[test]
fn plan_says_how_many_sequences_of_the_context_a_micro_batch_is() {
    let out = lowcomm(&["plan", "--model", "nano", "--cluster", A100, "--methods", "ddp"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("24576 tokens per micro-batch (384 sequences of nano's 64-token context)"), "{text}");
    let out = lowcomm(&["plan", "--model", "7.5e9", "--cluster", A100, "--methods", "ddp"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("24576 tokens per micro-batch, "));
}

/// The global batch each method implies, tokens per optimizer step over
/// all workers: acco computes as many micro-batches as fit in each of its
/// two stages (on 10 Gb/s between nodes, several), ddp its grad accum, a
/// local-update method per inner step (not per round of tau steps).
#[test]
fn plan_shows_the_global_batch_each_method_implies() {
    use lowcomm::plan::table::short_count;
    let json = std::env::temp_dir().join(format!("lowcomm-plan-batch-{}.json", std::process::id()));
    let cluster = "configs/clusters/a100-8x2-10g.toml";
    let args = ["plan", "--model", "llama-7b", "--cluster", cluster, "--methods", "ddp,acco,local-sgd"];
    let out = lowcomm(&[&args[..], &["--json", json.to_str().unwrap()]].concat());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    let (workers, tokens) = (v["workers"].as_f64().unwrap(), v["tokens_per_micro_batch"].as_f64().unwrap());
    let row = |m: &str| text.lines().find(|l| l.contains(&format!("| {m}"))).unwrap_or_else(|| panic!("{m}: {text}"));
    let time = |m: &str| v["methods"].as_array().unwrap().iter().find(|p| p["method"] == m).unwrap()["time"].clone();
    // ddp: one micro-batch per worker per step (grad accum 1).
    assert!(row("ddp").contains(&format!("| {} (1) |", short_count(workers * tokens))), "{}", row("ddp"));
    // acco: both stages' micro-batches make one optimizer step, more than one each.
    let acco = time("acco");
    let mbs = acco["micro_batches"].as_f64().unwrap();
    assert_eq!(acco["steps"].as_u64(), Some(1));
    assert!(mbs >= 4.0 && mbs % 2.0 == 0.0, "{acco}");
    let cell = format!("| {} ({}) |", short_count(workers * mbs * tokens), short_count(mbs));
    assert!(row("acco").contains(&cell), "{cell} not in {}", row("acco"));
    // local-sgd: a round of tau steps, but the batch is per inner step, ddp's.
    assert!(time("local-sgd")["steps"].as_u64().unwrap() > 1);
    assert!(row("local-sgd").contains(&format!("| {} (1) |", short_count(workers * tokens))), "{}", row("local-sgd"));
    assert!(text.contains("global batch = tokens per optimizer step") && text.contains("per inner step"), "{text}");
}

#[test]
fn plan_repeats_the_warnings_calibrate_wrote_into_its_profile() {
    let dir = std::env::temp_dir().join(format!("lowcomm-plan-warn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("drifted.toml");
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(A100)).unwrap();
    std::fs::write(&profile, format!("# WARNING: this host's speed moved while calibrate ran (+9%).\n{text}")).unwrap();
    let out = lowcomm(&["plan", "--model", "nano", "--cluster", profile.to_str().unwrap(), "--methods", "ddp"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = format!("warning: {}: this host's speed moved while calibrate ran (+9%).", profile.display());
    assert_eq!(err.matches(&line).count(), 1, "{err}");
    // The shipped profile has no warning: nothing said.
    let out = lowcomm(&["plan", "--model", "nano", "--cluster", A100, "--methods", "ddp"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning:"), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}
