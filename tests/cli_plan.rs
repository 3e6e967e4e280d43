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
    assert_eq!(methods.len(), lowcomm::strategy::Method::NAMES.len());
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
    let tcp = "configs/clusters/tcp-4x1-10g.toml";
    let cases: [(Vec<&str>, &str); 5] = [
        (vec!["--model", yaml.to_str().unwrap(), "--cluster", A100], "unknown model file format"),
        (vec!["--model", json.to_str().unwrap(), "--cluster", A100], "missing field `num_hidden_layers`"),
        (vec!["--model", "gpt2", "--cluster", tcp, "--require-fit"], "no [device] memory"),
        (vec!["--model", "gpt2", "--cluster", tcp, "--methods", "co2", "--tau", "0"], "tau must be at least 1"),
        (vec!["--model", "gpt2", "--cluster", tcp, "--precision", "fp8"], "--precision must be mixed or f32"),
    ];
    for (args, want) in cases {
        let out = lowcomm(&[&["plan"], &args[..]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{args:?}: {err}");
    }
    // Without device memory and without --require-fit, fit is unknown, not an error.
    let out = lowcomm(&["plan", "--model", "gpt2", "--cluster", tcp]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("fit unknown"));
    std::fs::remove_dir_all(&dir).unwrap();
}
