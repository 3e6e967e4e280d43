//! What a user gets wrong, and what they are told: corrupted checkpoints,
//! bad configs, mismatched vocabularies and shapes, missing or too-small
//! corpora, and a diverging run.

mod common;

use common::*;
use lowcomm::checkpoint;
use lowcomm::data::Dataset;
use lowcomm::train::{run, RunConfig, RunOptions, Trainer};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const BASE_STEPS: u64 = 3;

/// A finished 3-step run of the tiny model, once per binary. Read-only:
/// tests that modify it work on a copy.
fn base_run() -> &'static Path {
    static RUN: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = RUN.get_or_init(|| {
        let tmp = shared_tempdir();
        let dir = tmp.path().join("run");
        let mut cfg = tiny_config(corpus(), &dir);
        cfg.train.steps = BASE_STEPS;
        run(cfg, &quiet()).expect("base run");
        (tmp, dir)
    });
    path
}

fn base_ckpt_name() -> String {
    format!("step-{BASE_STEPS:06}")
}

// ---------------------------------------------------------------- checkpoints

fn flip_middle_byte(p: &Path) {
    let mut bytes = fs::read(p).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    fs::write(p, bytes).unwrap();
}

fn truncate_by(p: &Path, n: u64) {
    let len = fs::metadata(p).unwrap().len();
    fs::OpenOptions::new().write(true).open(p).unwrap().set_len(len - n).unwrap();
}

#[test]
fn corrupted_checkpoints_are_refused_without_touching_disk() {
    type Corrupt = fn(&Path);
    let cases: [(&str, &str, Corrupt); 7] = [
        ("truncated model", "model.safetensors", |p| truncate_by(p, 37)),
        ("flipped byte in model", "model.safetensors", flip_middle_byte),
        ("deleted state", "state.json", |p| fs::remove_file(p).unwrap()),
        ("garbage state", "state.json", |p| fs::write(p, b"\x00\xffnot json at all {").unwrap()),
        ("truncated optimizer", "optimizer.safetensors", |p| truncate_by(p, 4)),
        ("flipped byte in optimizer", "optimizer.safetensors", flip_middle_byte),
        ("edited tokenizer", "tokenizer.json", |p| {
            fs::write(p, fs::read_to_string(p).unwrap().replace("<|endoftext|>", "<|endoftxet|>")).unwrap()
        }),
    ];
    let tmp = tempdir();
    // Sanity: the pristine checkpoint loads.
    assert_eq!(checkpoint::load(base_run()).unwrap().state.step, BASE_STEPS);
    for (i, (what, file, corrupt)) in cases.iter().enumerate() {
        let run_dir = tmp.path().join(format!("case-{i}"));
        copy_dir(base_run(), &run_dir);
        let ck_dir = checkpoint::checkpoints_dir(&run_dir).join(base_ckpt_name());
        corrupt(&ck_dir.join(file));
        let before = snapshot(&run_dir);

        for target in [run_dir.clone(), checkpoint::checkpoints_dir(&run_dir)] {
            let err = match checkpoint::load(&target) {
                Ok(_) => panic!("{what}: a corrupted checkpoint loaded from {}", target.display()),
                Err(e) => chain(&e),
            };
            assert_mentions(&err, &["unusable", file, "resume from an older one", &base_ckpt_name()]);
            assert_eq!(err.lines().count(), 1, "{what}: multi-line error:\n{err}");
        }
        // Resuming a run from it fails the same way, before writing anything.
        let cfg = tiny_config(corpus(), &run_dir);
        let resume = RunOptions { resume: Some(run_dir.clone()), quiet: true, ..Default::default() };
        let err = chain(&run(cfg, &resume).map(|_| ()).unwrap_err());
        assert_mentions(&err, &["unusable", file]);
        assert!(before == snapshot(&run_dir), "{what}: a failed load modified the run directory");
    }
}

#[test]
fn checkpoint_dir_without_state_json_names_state_json() {
    let tmp = tempdir();
    let run_dir = tmp.path().join("run");
    copy_dir(base_run(), &run_dir);
    let ck_dir = checkpoint::checkpoints_dir(&run_dir).join(base_ckpt_name());
    fs::remove_file(ck_dir.join("state.json")).unwrap();
    let err = chain(&checkpoint::load(&ck_dir).map(|_| ()).unwrap_err());
    assert_mentions(&err, &["unusable", "state.json"]);
}

#[test]
fn latest_pointing_nowhere_is_refused() {
    let tmp = tempdir();
    let run_dir = tmp.path().join("run");
    copy_dir(base_run(), &run_dir);
    let ckdir = checkpoint::checkpoints_dir(&run_dir);
    fs::write(ckdir.join("latest"), "step-999999").unwrap();
    // Said as it is (not as a truncated file), with what is there instead.
    let err = chain(&checkpoint::load(&run_dir).map(|_| ()).unwrap_err());
    assert_mentions(&err, &["latest", "step-999999", "does not exist", "checkpoints there: step-000003"]);
    assert!(!err.contains("truncated"), "{err}");
    // `latest` gone while step directories remain: not "no checkpoint found".
    fs::remove_file(ckdir.join("latest")).unwrap();
    let err = chain(&checkpoint::load(&run_dir).map(|_| ()).unwrap_err());
    assert_mentions(&err, &["no `latest` file", "checkpoints there: step-000003", &base_ckpt_name()]);
    assert!(!err.contains("no checkpoint found"), "{err}");
    // No checkpoint at all: the message says what to pass.
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let err = chain(&checkpoint::load(&empty).map(|_| ()).unwrap_err());
    assert_mentions(&err, &["no checkpoint found", "checkpoints/step-N"]);
}

// ------------------------------------------------------------------ configs

fn write_config(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("bad.toml");
    fs::write(&p, text).unwrap();
    p
}

#[test]
fn bad_config_errors_name_the_key() {
    let tmp = tempdir();
    let good = tiny_toml(corpus(), &tmp.path().join("run"));
    // Unknown keys, in each section and at the top, are rejected by name.
    for (bad, key) in [
        (good.replace("batch_size = 4", "batch_size = 4\nstepz = 3"), "stepz"),
        (good.replace("[model]", "[model]\nn_layers = 3"), "n_layers"),
        (good.replace("[schedule]", "[schedule]\nwarmup = 3"), "warmup"),
        (format!("{good}\n[modle]\nn_head = 2\n"), "modle"),
        (format!("{good}\n[optimizer]\nkind = \"sgd\"\nmomentun = 0.9\n"), "momentun"),
        (format!("{good}\n[optimizer]\nkind = \"adamw\"\nbeta = 0.9\n"), "beta"),
        (format!("{good}\n[optimizer]\nkind = \"adam\"\n"), "adam"),
    ] {
        let path = write_config(tmp.path(), &bad);
        let err = match RunConfig::from_file(&path) {
            Ok(c) => panic!("config with unknown key {key} was accepted: {c:?}"),
            Err(e) => chain(&e),
        };
        assert_mentions(&err, &[key, &path.display().to_string()]);
    }
    // A wrong type names the key too.
    let path = write_config(tmp.path(), &good.replace("n_embd = 64", "n_embd = \"wide\""));
    assert_mentions(&chain(&RunConfig::from_file(&path).unwrap_err()), &["n_embd"]);
    // A missing file is named.
    let missing = tmp.path().join("nope.toml");
    assert_mentions(&chain(&RunConfig::from_file(&missing).unwrap_err()), &["nope.toml"]);

    // Values that parse but cannot run: the error names the field, and
    // nothing is written.
    for (edit, needles) in [
        (good.replace("steps = 10", "steps = 0"), vec!["train.steps"]),
        (good.replace("batch_size = 4", "batch_size = 0"), vec!["train.batch_size"]),
        (good.replace("batch_size = 4", "batch_size = 4\ngrad_accum = 0"), vec!["train.grad_accum"]),
        (good.replace("batch_size = 4", "batch_size = 4\nseq_len = 33"), vec!["train.seq_len", "33"]),
        (good.replace("batch_size = 4", "batch_size = 4\ngrad_clip = -1.0"), vec!["train.grad_clip"]),
        (good.replace("preset = \"nano\"", "preset = \"tiny\""), vec!["tiny", "nano, micro, small"]),
        (good.replace("n_head = 2", "n_head = 3"), vec!["model.n_head", "model.n_embd"]),
        (good.replace("ctx = 32", "ctx = 32\ndropout = 1.0"), vec!["model.dropout"]),
        (good.replace("n_layer = 2", "n_layer = 0"), vec!["model.n_layer"]),
        (good.replace("max_lr = 1e-2", "max_lr = 0.0"), vec!["max_lr"]),
    ] {
        let path = write_config(tmp.path(), &edit);
        let cfg = RunConfig::from_file(&path).unwrap_or_else(|e| panic!("{e:#}\n{edit}"));
        let err = chain(&cfg.validate().unwrap_err());
        assert_mentions(&err, &needles);
        let out = cfg.train.out_dir.clone();
        let err = chain(&run(cfg, &quiet()).map(|_| ()).unwrap_err());
        assert_mentions(&err, &needles);
        assert!(!out.exists(), "a config error still created {}", out.display());
    }
}

#[test]
fn shipped_configs_load_and_every_key_is_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut seen = 0;
    for e in fs::read_dir(&root).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let cfg = RunConfig::from_file(&p).unwrap_or_else(|e| panic!("{e:#}"));
            cfg.validate().unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
            seen += 1;
        }
    }
    assert!(seen >= 3, "expected configs/{{nano,micro,small}}.toml");
    // Every key a RunConfig has (both optimizers) is in configs/README.md.
    let readme = fs::read_to_string(root.join("README.md")).unwrap();
    let sgd = RunConfig::from_toml("[optimizer]\nkind = \"sgd\"\n").unwrap();
    for cfg in [RunConfig::default(), sgd] {
        let v = serde_json::to_value(&cfg).unwrap();
        for (section, body) in v.as_object().unwrap() {
            assert!(readme.contains(&format!("`[{section}]`")), "configs/README.md lacks section [{section}]");
            for key in body.as_object().unwrap().keys() {
                assert!(
                    readme.contains(&format!("`{key}`")) || readme.contains(&format!("`{key} = ")),
                    "configs/README.md does not document {section}.{key}"
                );
            }
        }
    }
}

// ------------------------------------------------------- vocabulary, shape

#[test]
fn vocab_mismatch_names_the_fix() {
    let tmp = tempdir();
    for vocab in [1024, 256 + 1] {
        let mut cfg = tiny_config(corpus(), &tmp.path().join("run"));
        cfg.model.vocab_size = Some(vocab);
        let err = chain(&Trainer::new(cfg, None).map(|_| ()).unwrap_err());
        assert_mentions(
            &err,
            &[
                "vocabulary mismatch",
                &format!("`lowcomm data prepare --input {} --vocab-size {vocab} --out ", fixture().display()),
                "512",
                &corpus().display().to_string(),
                &format!("--data {}-{vocab}", corpus().display().to_string().trim_end_matches("-512")),
            ],
        );
    }
    assert!(!tmp.path().join("run").exists());
}

#[test]
fn resume_with_other_settings_is_refused() {
    let tmp = tempdir();
    let run_dir = tmp.path().join("run");
    copy_dir(base_run(), &run_dir);
    let before = snapshot(&run_dir);
    let resume = |cfg: RunConfig| chain(&Trainer::new(cfg, Some(&run_dir)).map(|_| ()).unwrap_err());

    // Another model shape.
    let mut cfg = tiny_config(corpus(), &run_dir);
    cfg.model.n_embd = Some(32);
    assert_mentions(&resume(cfg), &["n_embd 64 (run) vs 32 (now)", "same model settings"]);
    let mut cfg = tiny_config(corpus(), &run_dir);
    cfg.model.n_layer = Some(3);
    assert_mentions(&resume(cfg), &["n_layer 2 (run) vs 3 (now)", "same model settings"]);
    // Another optimizer.
    let cfg =
        RunConfig::from_toml(&format!("{}\n[optimizer]\nkind = \"sgd\"\n", tiny_toml(corpus(), &run_dir))).unwrap();
    cfg.validate().unwrap();
    assert_mentions(&resume(cfg), &["adamw", "sgd", "[optimizer]"]);
    // Another sequence length: the sampler no longer fits.
    let mut cfg = tiny_config(corpus(), &run_dir);
    cfg.train.seq_len = Some(16);
    assert_mentions(&resume(cfg), &["sampler", "sequence length"]);
    // The same config resumes fine.
    assert_eq!(Trainer::new(tiny_config(corpus(), &run_dir), Some(&run_dir)).unwrap().step, BASE_STEPS);
    assert!(before == snapshot(&run_dir), "a refused resume modified the run directory");

    // Another corpus (a different tokenizer of the same size).
    let half = tmp.path().join("half.txt");
    let text = fs::read_to_string(fixture()).unwrap();
    let cut = text[..text.len() / 2].rfind("\n\n").unwrap();
    fs::write(&half, &text[..cut]).unwrap();
    let other = tmp.path().join("other-corpus");
    let report = prepare_into(vec![half], &other, VOCAB).unwrap();
    assert_eq!(report.vocab_size, VOCAB);
    let cfg = tiny_config(&other, &run_dir);
    assert_mentions(&resume(cfg), &["tokenizer", "--data"]);
}

// ------------------------------------------------------------------ corpora

#[test]
fn missing_or_too_small_corpus_is_explained() {
    let tmp = tempdir();
    // No corpus at all.
    let missing = tmp.path().join("no-such-corpus");
    let err = chain(&Trainer::new(tiny_config(&missing, &tmp.path().join("run")), None).map(|_| ()).unwrap_err());
    assert_mentions(&err, &["lowcomm data prepare", &missing.display().to_string()]);

    // A 200-byte text: prepares, but holds less than one 128-token window.
    let small = tmp.path().join("small.txt");
    let text = "The cat sat on the mat.\nThe dog sat on the log.\n\n".repeat(5);
    fs::write(&small, &text[..200]).unwrap();
    let out = tmp.path().join("small-corpus");
    let report = prepare_into(vec![small], &out, 300).unwrap();
    assert!(report.vocab_size >= 257 && report.vocab_size <= 300, "{report}");
    let ds = Dataset::open(&out).unwrap();
    let err = ds.check_context(128).unwrap_err().to_string();
    assert_mentions(&err, &["context window", "129"]);
    let mut cfg = tiny_config(&out, &tmp.path().join("run"));
    cfg.model.vocab_size = Some(report.vocab_size);
    cfg.model.ctx = Some(128);
    let err = chain(&Trainer::new(cfg, None).map(|_| ()).unwrap_err());
    assert_mentions(&err, &["context window", "shorter window (--seq-len N"]);

    // Nothing to prepare from: clear errors, and no corpus is left behind.
    let empty_file = tmp.path().join("empty.txt");
    fs::write(&empty_file, "").unwrap();
    let blank_file = tmp.path().join("blank.txt");
    fs::write(&blank_file, " \n\n\t\r\n").unwrap();
    let empty_dir = tmp.path().join("empty-dir");
    fs::create_dir(&empty_dir).unwrap();
    let binary = tmp.path().join("weights.txt");
    fs::write(&binary, b"abc\x00\x01\x02def").unwrap();
    for (input, needles) in [
        (empty_file.clone(), vec!["no text found", "empty.txt"]),
        (blank_file, vec!["no text found", "blank.txt"]),
        (empty_dir.clone(), vec!["no text found", "empty-dir"]),
        (tmp.path().join("absent.txt"), vec!["absent.txt", "does not exist"]),
        (binary, vec!["weights.txt", "binary"]),
    ] {
        let out = tmp.path().join("out");
        let err = chain(&prepare_into(vec![input], &out, 300).map(|_| ()).unwrap_err());
        assert_mentions(&err, &needles);
        assert!(!out.join("meta.json").exists(), "a failed prepare left a corpus marker");
        assert!(Dataset::open(&out).is_err());
    }
}

// ---------------------------------------------------------------- divergence

/// The integer right after `key` in `text`.
fn number_after(text: &str, key: &str) -> u64 {
    let rest = &text[text.find(key).unwrap_or_else(|| panic!("no {key:?} in {text}")) + key.len()..];
    rest.chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|e| panic!("{key:?} in {text}: {e}"))
}

#[test]
fn non_finite_loss_stops_the_run_with_a_clear_error() {
    let tmp = tempdir();
    let run_dir = tmp.path().join("run");
    let toml = tiny_toml(corpus(), &run_dir)
        .replace("max_lr = 1e-2", "max_lr = 1e4")
        .replace("warmup_steps = 5", "warmup_steps = 0")
        .replace("batch_size = 4", "batch_size = 4\ngrad_clip = 0.0\ncheckpoint_every = 1\nkeep_checkpoints = 100")
        + "\n[optimizer]\nkind = \"sgd\"\n";
    let mut cfg = RunConfig::from_toml(&toml).unwrap();
    cfg.train.steps = 30;
    cfg.validate().unwrap();
    let err = chain(&run(cfg, &quiet()).map(|_| ()).unwrap_err());
    assert_mentions(&err, &["diverged", "max_lr"]);

    // Every line logged before the divergence is finite.
    let metrics = read_metrics(&run_dir);
    let train = records(&metrics, "train");
    for r in &train {
        assert!(r["loss"].is_number() && r["grad_norm"].is_number(), "non-finite value logged: {r}");
    }
    // The error names the step: the last one completed (the message counts
    // from 0) or the one that failed (metrics count from 1); see the report.
    let last_logged = train.last().map_or(0, |r| r["step"].as_u64().unwrap());
    assert!(last_logged < 30);
    let named: u64 = number_after(&err, "diverged at step ");
    assert!(named == last_logged || named == last_logged + 1, "{err}\nlast logged step {last_logged}");

    // Every checkpoint on disk was written before the divergence and holds finite values.
    let ckdir = checkpoint::checkpoints_dir(&run_dir);
    let saved: Vec<String> = if ckdir.exists() {
        checkpoint_entries(&run_dir).into_iter().filter(|n| n.starts_with("step-")).collect()
    } else {
        vec![]
    };
    assert_eq!(saved.len() as u64, last_logged, "checkpoint_every = 1: one checkpoint per completed step: {saved:?}");
    assert!(!saved.is_empty(), "the run diverged on its very first step; no checkpoint to check");
    for name in &saved {
        assert!(!name.contains(".tmp-"), "{saved:?}");
        let ck = checkpoint::load(&ckdir.join(name)).unwrap();
        assert!(ck.state.step <= last_logged);
        assert!(ck.params.iter().all(|p| p.is_finite()), "{name} holds non-finite parameters");
    }
    assert_eq!(checkpoint::load(&run_dir).unwrap().state.step, last_logged);
}

/// `--device` names a libtorch device this binary cannot reach: without the
/// `torch` feature, the rebuild; an unknown name, the choices. One line each.
#[test]
fn a_device_this_binary_lacks_or_does_not_know_is_refused_in_one_line() {
    let tmp = tempdir();
    let config = tiny_toml_file(tmp.path());
    let o = lowcomm_in(tmp.path(), &["train", "--config", &config, "--device", "gpu"]);
    assert!(!o.status.success());
    assert_mentions(&stderr_text(&o), &["unknown device `gpu`", "native", "cuda:N"]);
    if !cfg!(feature = "torch") {
        for device in ["cpu", "cuda:1"] {
            let o = lowcomm_in(tmp.path(), &["train", "--config", &config, "--device", device]);
            assert_one_error(o, &[&format!("--device {device} needs libtorch"), "--features torch", "--device native"]);
        }
    }
}
