//! The `lowcomm` binary end to end: prepare, train, eval, generate, export,
//! and how it reports errors.

mod common;

use common::*;
use lowcomm::checkpoint::read_f32_tensors;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

/// Run `lowcomm ARGS` in `cwd` (so nothing lands in the repository).
fn lowcomm(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lowcomm")).args(args).current_dir(cwd).output().expect("spawn lowcomm")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn ok(o: Output) -> String {
    assert!(o.status.success(), "lowcomm failed ({}):\nstdout:\n{}\nstderr:\n{}", o.status, stdout(&o), stderr(&o));
    stdout(&o)
}

/// Assert a failed command printed exactly one line on stderr, `error: ...`,
/// and return it.
#[track_caller]
fn one_error_line(o: Output) -> String {
    assert!(!o.status.success(), "expected failure, got success:\n{}", stdout(&o));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert_eq!(lines.len(), 1, "expected one error line on stderr, got {}:\n{err}", lines.len());
    assert!(lines[0].starts_with("error: "), "{err}");
    lines[0].to_string()
}

/// The first number after `key` in `text`.
fn number_after(text: &str, key: &str) -> f64 {
    let rest = &text[text.find(key).unwrap_or_else(|| panic!("no {key} in {text}")) + key.len()..];
    rest.split_whitespace().next().unwrap().parse().unwrap_or_else(|e| panic!("{key} in {text}: {e}"))
}

#[test]
fn cli_prepare_train_eval_generate_export() {
    let tmp = tempdir();
    let cwd = tmp.path();
    let (data, run) = (cwd.join("corpus"), cwd.join("run"));
    let s = |p: &Path| p.display().to_string();

    let out =
        ok(lowcomm(cwd, &["data", "prepare", "--input", &s(&fixture()), "--vocab-size", "512", "--out", &s(&data)]));
    assert_mentions(&out, &["vocab size   512", &s(&data)]);
    for f in ["meta.json", "train.bin", "val.bin", "tokenizer.json"] {
        assert!(data.join(f).is_file(), "prepare did not write {f}");
    }

    // The tiny model from a config file; --data/--out/--steps override it.
    let config = cwd.join("tiny.toml");
    fs::write(&config, tiny_toml(&cwd.join("elsewhere"), &cwd.join("other-run"))).unwrap();
    let out = ok(lowcomm(
        cwd,
        &["train", "--config", &s(&config), "--data", &s(&data), "--out", &s(&run), "--steps", "5", "--quiet"],
    ));
    assert_mentions(&out, &["step 5", "val_ppl", "step-000005"]);
    assert!(run.join("checkpoints/step-000005/state.json").is_file());
    assert!(!cwd.join("other-run").exists() && !cwd.join("runs").exists(), "--out was not honoured");
    let train_lines = records(&read_metrics(&run), "train").len();
    assert_eq!(train_lines, 5);

    let out = ok(lowcomm(cwd, &["eval", "--ckpt", &s(&run)]));
    assert_mentions(&out, &["step 5", "val_loss", "val_ppl"]);
    let (loss, ppl) = (number_after(&out, "val_loss"), number_after(&out, "val_ppl"));
    assert!(loss.is_finite() && loss > 0.0 && loss < 512f64.ln() + 1.0, "{out}");
    assert!((ppl - loss.exp()).abs() < 0.01 * ppl, "{out}");

    let out = ok(lowcomm(cwd, &["generate", "--ckpt", &s(&run), "--tokens", "10", "--prompt", "The"]));
    assert!(out.starts_with("The") && out.trim_end().len() > 3, "generate printed {out:?}");

    let (hf, reference) = (cwd.join("hf"), cwd.join("ref.safetensors"));
    ok(lowcomm(cwd, &["export", "--ckpt", &s(&run), "--hf", &s(&hf), "--reference", &s(&reference)]));
    let config: serde_json::Value = serde_json::from_str(&fs::read_to_string(hf.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["activation_function"], "gelu");
    assert_eq!(config["model_type"], "gpt2");
    assert_eq!(
        (config["n_embd"].as_u64(), config["n_layer"].as_u64(), config["n_head"].as_u64()),
        (Some(64), Some(2), Some(2))
    );
    assert_eq!((config["vocab_size"].as_u64(), config["n_positions"].as_u64()), (Some(512), Some(CTX as u64)));

    let tensors = read_f32_tensors(&hf.join("model.safetensors")).unwrap();
    let get = |name: &str| tensors.iter().find(|(n, _, _)| n == name).unwrap_or_else(|| panic!("export lacks {name}"));
    let (_, shape, exported) = get("transformer.h.0.attn.c_attn.weight");
    assert_eq!(shape, &[N_EMBD, 3 * N_EMBD]);
    assert_eq!(get("transformer.wte.weight").1, [VOCAB, N_EMBD]);
    assert_eq!(get("transformer.wpe.weight").1, [CTX, N_EMBD]);
    assert!(tensors.iter().all(|(n, _, _)| n.starts_with("transformer.")), "untied or unprefixed tensor exported");
    // Conv1D layout: the export is the checkpoint's [out, in] matrix transposed.
    let ours = read_f32_tensors(&run.join("checkpoints/step-000005/model.safetensors")).unwrap();
    let (_, our_shape, our_data) = ours.iter().find(|(n, _, _)| n == "h.0.attn.c_attn.weight").unwrap();
    assert_eq!(our_shape, &[3 * N_EMBD, N_EMBD]);
    for (r, c) in [(0, 0), (5, 3), (3 * N_EMBD - 1, N_EMBD - 1), (100, 17)] {
        assert_eq!(exported[c * 3 * N_EMBD + r].to_bits(), our_data[r * N_EMBD + c].to_bits());
    }
    let tok = fs::read_to_string(hf.join("tokenizer.json")).unwrap();
    assert_eq!(lowcomm::data::Tokenizer::from_json(&tok).unwrap().vocab_size(), VOCAB);

    let reference = read_f32_tensors(&reference).unwrap();
    let (_, tshape, tokens) = reference.iter().find(|(n, _, _)| n == "tokens").unwrap();
    let (_, lshape, logits) = reference.iter().find(|(n, _, _)| n == "logits").unwrap();
    assert!(tshape[0] > 0 && tshape[0] <= CTX);
    assert_eq!(lshape, &[tshape[0], VOCAB]);
    assert!(tokens.iter().all(|&t| t >= 0.0 && t < VOCAB as f32 && t.fract() == 0.0));
    assert!(logits.iter().all(|l| l.is_finite()));
}

#[test]
fn cli_errors_are_one_line() {
    let tmp = tempdir();
    let cwd = tmp.path();
    let bad = cwd.join("bad.toml");
    fs::write(&bad, tiny_toml(corpus(), &cwd.join("run")).replace("batch_size = 4", "batch_size = 4\nstepz = 3"))
        .unwrap();
    let o = lowcomm(cwd, &["train", "--config", &bad.display().to_string(), "--quiet"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("error: "), "{}", stderr(&o));
    assert_mentions(&stderr(&o), &["stepz", "bad.toml"]);

    let line = one_error_line(lowcomm(cwd, &["train", "--preset", "huge", "--quiet"]));
    assert_mentions(&line, &["huge", "nano, micro, small"]);

    let missing = cwd.join("no-corpus");
    let line = one_error_line(lowcomm(
        cwd,
        &["train", "--config", &bad.display().to_string().replace("bad", "missing"), "--quiet"],
    ));
    assert_mentions(&line, &["missing.toml"]);
    let good = cwd.join("good.toml");
    fs::write(&good, tiny_toml(&missing, &cwd.join("run"))).unwrap();
    let line = one_error_line(lowcomm(cwd, &["train", "--config", &good.display().to_string(), "--quiet"]));
    assert_mentions(&line, &["lowcomm data prepare", "no-corpus"]);

    let line = one_error_line(lowcomm(cwd, &["eval", "--ckpt", &cwd.join("run").display().to_string()]));
    assert_mentions(&line, &["no checkpoint found"]);
    // Nothing was written by any of the failures.
    let mut left: Vec<String> =
        fs::read_dir(cwd).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["bad.toml", "good.toml"]);
}

/// The CLI contract: a config error is one `error:` line naming the key.
#[test]
fn cli_config_error_is_one_line_naming_the_key() {
    let tmp = tempdir();
    let bad = tmp.path().join("bad.toml");
    fs::write(
        &bad,
        tiny_toml(corpus(), &tmp.path().join("run")).replace("batch_size = 4", "batch_size = 4\nstepz = 3"),
    )
    .unwrap();
    let line = one_error_line(lowcomm(tmp.path(), &["train", "--config", &bad.display().to_string(), "--quiet"]));
    assert_mentions(&line, &["stepz", "bad.toml"]);
}

#[test]
fn cli_prepare_without_force_keeps_the_existing_corpus() {
    let tmp = tempdir();
    let data = tmp.path().join("corpus");
    copy_dir(corpus(), &data);
    let before = snapshot(&data);
    // Another input, so an overwrite would change the bytes.
    let other = tmp.path().join("other.txt");
    fs::write(&other, fs::read_to_string(fixture()).unwrap().replace("Macbeth", "Duncan")).unwrap();
    let line = one_error_line(lowcomm(
        tmp.path(),
        &[
            "data",
            "prepare",
            "--input",
            &other.display().to_string(),
            "--vocab-size",
            "512",
            "--out",
            &data.display().to_string(),
        ],
    ));
    assert_mentions(&line, &["already holds a prepared corpus", "--force"]);
    assert!(before == snapshot(&data), "prepare without --force modified the corpus");
    // With --force it does overwrite.
    ok(lowcomm(
        tmp.path(),
        &[
            "data",
            "prepare",
            "--input",
            &other.display().to_string(),
            "--vocab-size",
            "512",
            "--out",
            &data.display().to_string(),
            "--force",
        ],
    ));
    assert!(before != snapshot(&data), "--force did not rebuild the corpus");
}
