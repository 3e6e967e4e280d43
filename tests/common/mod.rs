//! Shared setup for the integration tests: the committed fixture, a corpus
//! prepared from it once per test binary, a tiny model configuration and
//! small file helpers.
#![allow(dead_code)]

use lowcomm::data::{prepare, PrepareOptions, PrepareReport};
use lowcomm::train::{RunConfig, RunOptions};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tempfile::TempDir;

/// Vocabulary of the shared corpus.
pub const VOCAB: usize = 512;
/// Tiny model shape used everywhere.
pub const N_EMBD: usize = 64;
pub const CTX: usize = 32;

/// The committed ~80 KB Macbeth fixture.
pub fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-shakespeare-macbeth.txt")
}

/// A fresh temporary directory under cargo's per-target test tmp dir.
pub fn tempdir() -> TempDir {
    tempfile::Builder::new().prefix("lowcomm-it-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("create tempdir")
}

/// A temporary directory that lives as long as the test binary (for
/// per-binary shared setup held in a `static`, which is never dropped).
/// Such directories left by earlier runs are removed once over an hour old.
pub fn shared_tempdir() -> TempDir {
    const PREFIX: &str = "lowcomm-it-shared-";
    if let Ok(entries) = fs::read_dir(env!("CARGO_TARGET_TMPDIR")) {
        for e in entries.flatten() {
            let stale = e
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age.as_secs() > 3600);
            if stale && e.file_name().to_string_lossy().starts_with(PREFIX) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    tempfile::Builder::new().prefix(PREFIX).tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("create tempdir")
}

/// Prepare `inputs` into `out` with vocabulary `vocab` (cache dir inside `out`'s parent, unused for inputs).
pub fn prepare_into(inputs: Vec<PathBuf>, out: &Path, vocab: usize) -> anyhow::Result<PrepareReport> {
    let cache_dir = out.parent().unwrap_or(out).join("cache");
    prepare(&PrepareOptions {
        inputs,
        out: out.to_path_buf(),
        vocab_size: vocab,
        val_fraction: 0.05,
        cache_dir,
        force: false,
        tokenizer: None,
    })
}

/// The fixture prepared with vocab 512, once per test binary. Tests must not
/// modify it (copy it with [`copy_dir`] first).
pub fn corpus() -> &'static Path {
    static DIR: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = DIR.get_or_init(|| {
        let tmp = shared_tempdir();
        let out = tmp.path().join("corpus-512");
        let report = prepare_into(vec![fixture()], &out, VOCAB).expect("prepare the fixture");
        assert_eq!(report.vocab_size, VOCAB, "the fixture must support a {VOCAB}-token vocabulary");
        (tmp, out)
    });
    path
}

/// TOML of the tiny run: nano preset shrunk to d 64, 2 layers, 2 heads, ctx 32.
pub fn tiny_toml(data: &Path, out: &Path) -> String {
    format!(
        r#"[model]
preset = "nano"
vocab_size = {VOCAB}
n_embd = {N_EMBD}
n_layer = 2
n_head = 2
ctx = {CTX}

[data]
dir = {data:?}

[train]
steps = 10
batch_size = 4
seed = 7
log_every = 1
eval_every = 0
eval_windows = 8
out_dir = {out:?}

[schedule]
max_lr = 1e-2
warmup_steps = 5
min_lr_ratio = 0.1
"#,
        data = data.display().to_string(),
        out = out.display().to_string(),
    )
}

/// Writes the tiny run's TOML (over `corpus()`, writing to `dir/run`) as
/// `dir/run.toml`; returns its path, for `--config`.
pub fn tiny_toml_file(dir: &Path) -> String {
    let path = dir.join("run.toml");
    std::fs::write(&path, tiny_toml(corpus(), &dir.join("run"))).unwrap();
    path.display().to_string()
}

/// The tiny run configuration over `data`, writing to `out`.
pub fn tiny_config(data: &Path, out: &Path) -> RunConfig {
    let cfg = RunConfig::from_toml(&tiny_toml(data, out)).expect("tiny config parses");
    cfg.validate().expect("tiny config is valid");
    cfg
}

/// Run options without progress output.
pub fn quiet() -> RunOptions {
    RunOptions { quiet: true, ..Default::default() }
}

/// Every line of `RUN/metrics.jsonl`, parsed.
pub fn read_metrics(run: &Path) -> Vec<serde_json::Value> {
    let text = fs::read_to_string(run.join("metrics.jsonl")).expect("read metrics.jsonl");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("metrics line {l:?} is not JSON: {e}")))
        .collect()
}

/// The records of one kind (`train`, `eval`).
pub fn records<'a>(metrics: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    metrics.iter().filter(|v| v["kind"] == kind).collect()
}

/// Every file under `dir` (recursively) with its bytes.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(p.strip_prefix(root).unwrap().to_path_buf(), fs::read(&p).unwrap());
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

/// Copy a directory tree.
pub fn copy_dir(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    for e in fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let to = dst.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &to);
        } else {
            fs::copy(&p, &to).unwrap();
        }
    }
}

/// Names of the entries of `RUN/checkpoints`, sorted.
pub fn checkpoint_entries(run: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(lowcomm::checkpoint::checkpoints_dir(run))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `{:#}` of an error: the whole context chain, as the CLI prints it.
pub fn chain(e: &anyhow::Error) -> String {
    format!("{e:#}")
}

/// Assert that `text` contains every one of `needles`.
#[track_caller]
pub fn assert_mentions(text: &str, needles: &[&str]) {
    for n in needles {
        assert!(text.contains(n), "expected {n:?} in:\n{text}");
    }
}

/// Runs the `lowcomm` binary in `cwd` with `args`.
pub fn lowcomm_in(cwd: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_lowcomm"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("spawn lowcomm")
}

/// A finished command's stderr, as text.
pub fn stderr_text(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts `o` failed with exactly one stderr line mentioning every needle.
#[track_caller]
pub fn assert_one_error(o: std::process::Output, needles: &[&str]) {
    let err = stderr_text(&o);
    assert!(!o.status.success(), "expected failure");
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected:\n{err}");
    assert_mentions(lines[0], needles);
}
