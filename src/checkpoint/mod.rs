//! Checkpoints: a directory per saved step, written so that a crash at any
//! moment leaves the previous checkpoint loadable.
//!
//! ```text
//! RUN/checkpoints/step-000200/model.safetensors      weights, GPT-2 names, [out, in] layouts
//! RUN/checkpoints/step-000200/optimizer.safetensors  optimizer state (e.g. exp_avg, exp_avg_sq)
//! RUN/checkpoints/step-000200/tokenizer.json         so the checkpoint stands alone
//! RUN/checkpoints/step-000200/state.json             step, sampler, RNG, configs, sha256 of each file
//! RUN/checkpoints/latest                             name of the newest complete checkpoint
//! ```
//!
//! Protocol: everything is written into `step-N.tmp-PID/` and fsynced; the
//! directory is renamed to `step-N`; only then is `latest` replaced
//! atomically. A reader trusts `latest`, and verifies every file against the
//! sha256 recorded in `state.json`, so a truncated or edited file is caught.

mod staging;
mod tensors;

use crate::data::sampler::SamplerState;
use crate::model::GptConfig;
use crate::util::sha256_file;
use anyhow::{bail, Context, Result};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
pub use staging::Staging;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
pub use tensors::{
    read_f32_tensors, read_f32_tensors_with_metadata, write_f32_tensors, write_f32_tensors_with_metadata,
};

/// Bumped when the layout of a checkpoint changes incompatibly.
pub const FORMAT_VERSION: u32 = 1;
pub(crate) const MODEL_FILE: &str = "model.safetensors";
pub(crate) const OPTIM_FILE: &str = "optimizer.safetensors";
pub(crate) const STATE_FILE: &str = "state.json";
pub(crate) const TOKENIZER_FILE: &str = "tokenizer.json";
pub(crate) const LATEST_FILE: &str = "latest";

/// Everything besides tensors that `--resume` needs to continue bit-identically.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainState {
    /// Checkpoint format version.
    pub format_version: u32,
    /// Optimizer steps completed.
    pub step: u64,
    /// Training tokens consumed so far.
    pub tokens_seen: u64,
    /// Model shape (must match on resume).
    pub model: GptConfig,
    /// The run's full configuration, as TOML text, for the record.
    pub run_config: String,
    /// Optimizer kind (`adamw`, `sgd`) and its committed step count.
    pub optimizer_kind: String,
    pub optimizer_steps: u64,
    /// The training sampler's position and RNG.
    pub sampler: SamplerState,
    /// Dropout's RNG.
    pub dropout_rng: Pcg64,
    /// Wall-clock seconds trained before this checkpoint (for metrics).
    pub wall_s: f64,
    /// sha256 of every other file in the checkpoint.
    pub files: BTreeMap<String, String>,
    /// A data-parallel run's shape and its participants' parts (absent for
    /// single-worker runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<ParallelCheckpoint>,
}

/// What a data-parallel checkpoint adds: the run's shape and one part file
/// per participant (its optimizer shard, held gradients, sampler, clock).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParallelCheckpoint {
    /// The method's name.
    pub method: String,
    /// Data-parallel workers.
    pub workers: usize,
    /// Workers per node.
    pub per_node: usize,
    /// Whether a parameter server took part (its part is the last).
    pub server: bool,
    /// Part file names, in participant order (each also in `files`).
    pub parts: Vec<String>,
    /// Each participant's latest logged step, in its own numbering (see
    /// `strategy::SavedPart::last_step`); empty in checkpoints written
    /// before it was added.
    #[serde(default)]
    pub last_steps: Vec<u64>,
}

/// A checkpoint in memory.
pub struct Checkpoint {
    pub state: TrainState,
    /// Flat parameters, in `ParamLayout` order.
    pub params: Vec<f32>,
    /// Optimizer state tensors by name.
    pub optimizer: Vec<(String, Vec<f32>)>,
    /// The tokenizer's JSON.
    pub tokenizer_json: String,
}

/// Directory holding a run's checkpoints.
pub fn checkpoints_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoints")
}

/// Save a checkpoint for `state.step` under `run_dir`, then prune all but
/// the newest `keep`. Returns the checkpoint's directory.
pub fn save(
    run_dir: &Path,
    state: TrainState,
    params: &[f32],
    optimizer: &[(String, &[f32])],
    tokenizer_json: &str,
    keep: usize,
) -> Result<PathBuf> {
    let staging = Staging::begin(run_dir, state.step)?;
    staging.write_core(&state.model, params, optimizer, tokenizer_json)?;
    staging.commit(state, &[], keep)
}

/// Remove complete checkpoints beyond the newest `keep` (never `current`)
/// and temp directories left by crashed writers.
pub(crate) fn prune(root: &Path, keep: usize, current: &str) -> Result<()> {
    let mut complete = Vec::new();
    for e in fs::read_dir(root)? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if name.contains(".tmp-") {
            let _ = fs::remove_dir_all(root.join(&name));
        } else if let Some(key) = checkpoint_order(&name) {
            complete.push((key, name));
        }
    }
    // Oldest first: by step, then by re-save suffix.
    complete.sort();
    let excess = complete.len().saturating_sub(keep.max(1));
    for (_, name) in complete.into_iter().take(excess).filter(|(_, n)| n != current) {
        fs::remove_dir_all(root.join(name))?;
    }
    Ok(())
}

/// `step-N` or `step-N-K` -> (N, K); anything else -> None.
fn checkpoint_order(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix("step-")?;
    let mut parts = rest.splitn(2, '-');
    let step = parts.next()?.parse().ok()?;
    let k = parts.next().map_or(Some(0), |k| k.parse().ok())?;
    Some((step, k))
}

/// Names of the complete checkpoints (`step-N`, `step-N-K`) in a
/// `checkpoints/` directory, oldest first (empty if it does not exist).
pub fn list(checkpoints_root: &Path) -> Vec<String> {
    let mut found: Vec<((u64, u64), String)> = fs::read_dir(checkpoints_root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let complete = e.path().join(STATE_FILE).is_file();
            checkpoint_order(&name).filter(|_| complete).map(|k| (k, name))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, n)| n).collect()
}

/// "checkpoints there: a, b; pass one of them, e.g. ROOT/b" (or that there
/// are none), for errors about a run directory whose `latest` is unusable.
fn present_checkpoints(root: &Path) -> String {
    let present = list(root);
    match present.last() {
        None => format!("there are no complete checkpoints in {}", root.display()),
        Some(newest) => format!(
            "checkpoints there: {}; pass one of them instead, e.g. {}",
            present.join(", "),
            root.join(newest).display()
        ),
    }
}

/// Resolve what the user passed to `--resume`/`--ckpt`: a checkpoint
/// directory, or a run directory (its `latest` checkpoint).
pub fn resolve(path: &Path) -> Result<PathBuf> {
    // A checkpoint directory, even a damaged one (load then says what is wrong).
    let named_like_one = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| checkpoint_order(n).is_some());
    if path.join(STATE_FILE).exists() || (named_like_one && path.is_dir()) {
        return Ok(path.to_path_buf());
    }
    let root = if path.join(LATEST_FILE).exists() { path.to_path_buf() } else { checkpoints_dir(path) };
    let latest = root.join(LATEST_FILE);
    if !latest.exists() {
        if !list(&root).is_empty() {
            // `latest` is written last on every save, so step directories
            // without it mean it was deleted (or the first save was cut
            // short between its two renames): say so, and what is there.
            bail!(
                "{} has no `latest` file naming the newest checkpoint; {}",
                root.display(),
                present_checkpoints(&root)
            );
        }
        if !path.exists() {
            bail!("no checkpoint found at {}: it does not exist", path.display());
        }
        bail!("no checkpoint found at {}: pass a run directory (with checkpoints/latest) or a checkpoints/step-N directory", path.display());
    }
    let name = fs::read_to_string(&latest).with_context(|| format!("cannot read {}", latest.display()))?;
    let dir = root.join(name.trim());
    if name.trim().is_empty() || !dir.is_dir() {
        bail!(
            "{} names checkpoint `{}`, which does not exist (deleted or moved); {}",
            latest.display(),
            name.trim(),
            present_checkpoints(&root)
        );
    }
    Ok(dir)
}

/// Read a checkpoint's `state.json` only (its step and saved run
/// configuration), without loading or verifying the tensors; returns the
/// checkpoint directory with it. [`load`] verifies everything.
pub fn read_state(path: &Path) -> Result<(PathBuf, TrainState)> {
    let dir = resolve(path)?;
    let text = fs::read_to_string(dir.join(STATE_FILE))
        .map_err(|e| unusable(&dir, format!("cannot read {STATE_FILE} ({e})")))?;
    let state =
        serde_json::from_str(&text).map_err(|e| unusable(&dir, format!("{STATE_FILE} does not parse ({e})")))?;
    Ok((dir, state))
}

/// The error for a checkpoint whose files do not match what was written.
fn unusable(dir: &Path, what: String) -> anyhow::Error {
    anyhow::anyhow!(
        "checkpoint {} is unusable: {what}. It was truncated or modified after it was written; resume from an older one (ls {})",
        dir.display(),
        dir.parent().map_or_else(|| ".".into(), |p| p.display().to_string())
    )
}

/// Load and verify a checkpoint (a checkpoint dir or a run dir), with the
/// optimizer state (what `--resume` needs).
pub fn load(path: &Path) -> Result<Checkpoint> {
    load_impl(path, true).map(|(ck, _)| ck)
}

/// Load and verify what inference needs (weights, tokenizer, state) from a
/// checkpoint or run directory. The optimizer state is not read: a damaged
/// `optimizer.safetensors` is no reason to refuse `eval`, `generate` or
/// `export`, so it is reported in the returned warning instead (the
/// checkpoint can then no longer be resumed) and `optimizer` is empty.
pub fn load_for_inference(path: &Path) -> Result<(Checkpoint, Option<String>)> {
    load_impl(path, false)
}

fn load_impl(path: &Path, with_optimizer: bool) -> Result<(Checkpoint, Option<String>)> {
    let (dir, state) = read_state(path)?;
    let corrupt = |what: String| unusable(&dir, what);
    if state.format_version != FORMAT_VERSION {
        bail!(
            "checkpoint {} has format version {}, this lowcomm reads version {FORMAT_VERSION}",
            dir.display(),
            state.format_version
        );
    }
    let mut warning = None;
    for (file, want) in &state.files {
        let got = sha256_file(&dir.join(file)).map_err(|e| format!("{file}: {e:#}"));
        let problem = match got {
            Ok(got) if &got == want => continue,
            Ok(got) => format!("{file} has sha256 {got}, expected {want}"),
            Err(e) => e,
        };
        if !with_optimizer && file == OPTIM_FILE {
            warning = Some(format!(
                "checkpoint {}: {problem}; the optimizer state is damaged, so this checkpoint cannot be resumed, but the model is intact and is used as is",
                dir.display()
            ));
            continue;
        }
        return Err(corrupt(problem));
    }
    let layout = crate::model::ParamLayout::new(&state.model);
    let mut params = vec![0.0f32; layout.len];
    let model = read_f32_tensors(&dir.join(MODEL_FILE)).map_err(|e| corrupt(format!("{MODEL_FILE}: {e:#}")))?;
    for t in &layout.tensors {
        let (_, shape, data) = model
            .iter()
            .find(|(n, _, _)| n == &t.name)
            .ok_or_else(|| corrupt(format!("{MODEL_FILE} lacks tensor {}", t.name)))?;
        if shape != &t.shape {
            return Err(corrupt(format!("tensor {} has shape {shape:?}, the model config says {:?}", t.name, t.shape)));
        }
        params[t.range.clone()].copy_from_slice(data);
        // A run that diverged writes no checkpoint past its last finite one
        // (strategy/diverged.rs), but older lowcomm versions did: refuse
        // them rather than evaluate, sample or export NaN.
        if let Some(i) = data.iter().position(|v| !v.is_finite()) {
            bail!(
                "checkpoint {} holds a non-finite parameter ({}[{i}] = {}): the run had diverged when it was written; use an earlier checkpoint (ls {})",
                dir.display(),
                t.name,
                data[i],
                dir.parent().map_or_else(|| ".".into(), |p| p.display().to_string())
            );
        }
    }
    let optimizer = if with_optimizer {
        read_f32_tensors(&dir.join(OPTIM_FILE))
            .map_err(|e| corrupt(format!("{OPTIM_FILE}: {e:#}")))?
            .into_iter()
            .map(|(n, _, d)| (n, d))
            .collect()
    } else {
        Vec::new()
    };
    let tokenizer_json =
        fs::read_to_string(dir.join(TOKENIZER_FILE)).map_err(|e| corrupt(format!("{TOKENIZER_FILE}: {e}")))?;
    Ok((Checkpoint { state, params, optimizer, tokenizer_json }, warning))
}
