//! The run configuration: one TOML file, every field documented, every
//! field optional (defaults below), unknown keys rejected.
//!
//! ```toml
//! [model]
//! preset = "nano"          # nano | micro | small | llama-nano | llama-micro | llama-small | gpt2;
//!                          # the fields below override it
//! [data]
//! dir = "data/gutenberg-2048"
//! [train]
//! steps = 300
//! batch_size = 16
//! [schedule]
//! max_lr = 3e-3
//! [optimizer]
//! kind = "adamw"
//! weight_decay = 0.1
//! ```

use crate::model::{Arch, ComputeDevice, ComputePrecision, GptConfig};
use crate::optim::{LrSchedule, OptimizerConfig};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

// [parallel], a file of its own for length.
mod parallel;
pub use parallel::{BudgetUnit, ParallelSection};

/// Model shape: a preset plus optional overrides of any of its fields.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// Preset to start from: `nano`, `micro`, `small`, `llama-nano`,
    /// `llama-micro` or `llama-small` (default `nano`).
    pub preset: Option<String>,
    /// Block architecture, over the preset's: `gpt2` or `llama`.
    pub arch: Option<Arch>,
    /// Vocabulary size (must match the prepared corpus' tokenizer).
    pub vocab_size: Option<usize>,
    /// Residual-stream width.
    pub n_embd: Option<usize>,
    /// Transformer blocks.
    pub n_layer: Option<usize>,
    /// Attention heads.
    pub n_head: Option<usize>,
    /// Context length in tokens.
    pub ctx: Option<usize>,
    /// Dropout probability (default 0).
    #[serde(serialize_with = "crate::util::f32_shortest::option")]
    pub dropout: Option<f32>,
    /// Key/value heads of grouped-query attention (llama; default `n_head`).
    pub n_kv_head: Option<usize>,
    /// Hidden width of the SwiGLU MLP (llama; default Llama's rule,
    /// 8 n_embd / 3 rounded up to a multiple of 64).
    pub ffn_hidden: Option<usize>,
    /// Whether the LM head is the token embedding (llama; default true).
    pub tie_head: Option<bool>,
}

impl ModelSection {
    /// The preset with the overrides applied, validated.
    pub fn resolve(&self) -> Result<GptConfig> {
        let mut c = GptConfig::preset(self.preset.as_deref().unwrap_or("nano"))?;
        if let Some(arch) = self.arch {
            c = c.with_arch(arch);
        }
        c.n_kv_head = self.n_kv_head.or(c.n_kv_head);
        c.ffn_hidden = self.ffn_hidden.or(c.ffn_hidden);
        c.tie_head = self.tie_head.unwrap_or(c.tie_head);
        c.vocab_size = self.vocab_size.unwrap_or(c.vocab_size);
        c.n_embd = self.n_embd.unwrap_or(c.n_embd);
        c.n_layer = self.n_layer.unwrap_or(c.n_layer);
        c.n_head = self.n_head.unwrap_or(c.n_head);
        c.ctx = self.ctx.unwrap_or(c.ctx);
        c.dropout = self.dropout.unwrap_or(c.dropout);
        c.validate()?;
        Ok(c)
    }
}

/// Where the prepared corpus lives.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSection {
    /// Directory written by `lowcomm data prepare` (default
    /// `data/gutenberg-{vocab_size}`).
    pub dir: Option<PathBuf>,
}

/// The training loop.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainSection {
    /// Optimizer steps to run in total.
    pub steps: u64,
    /// Sequences per micro-batch.
    pub batch_size: usize,
    /// Tokens per sequence (default: the model's context length).
    pub seq_len: Option<usize>,
    /// Micro-batches accumulated into one optimizer step.
    pub grad_accum: usize,
    /// Seed of initialisation, data order and dropout.
    pub seed: u64,
    /// Clip the global gradient norm to this value (0 disables clipping).
    #[serde(serialize_with = "crate::util::f32_shortest::serialize")]
    pub grad_clip: f32,
    /// Also apply weight decay to biases and LayerNorm parameters
    /// (by default only weight matrices and the token embedding decay).
    pub decay_biases_and_norms: bool,
    /// Also apply weight decay to the position embedding.
    pub decay_position_embedding: bool,
    /// Log a metrics line every this many steps.
    pub log_every: u64,
    /// Evaluate on the validation split every this many steps (0: only at the end).
    pub eval_every: u64,
    /// Validation windows per evaluation (each `seq_len` tokens, taken in
    /// order; at least 1).
    pub eval_windows: usize,
    /// Save a checkpoint every this many steps (rounds; 0: only at the end).
    /// Unset: every [`DEFAULT_CHECKPOINT_EVERY`] steps, so that a run killed
    /// hard loses at most that much (our choice; Ctrl-C always saves, see
    /// `train::interrupt`), except where a checkpoint would change the run:
    /// async-diloco (a checkpoint stops the world), demo/flexdemo with
    /// `overlap` (it brings the exchange in flight in early) and a fault plan
    /// (which refuses checkpoints) checkpoint only at the end unless this is set.
    pub checkpoint_every: Option<u64>,
    /// Checkpoints kept on disk (older ones are deleted; at least 1, the
    /// latest).
    pub keep_checkpoints: usize,
    /// Run directory: metrics.jsonl, checkpoints/, config.toml.
    pub out_dir: PathBuf,
    /// Start from this run's (its latest checkpoint) or checkpoint's model
    /// instead of a fresh one: same model shape and tokenizer; optimizer,
    /// step count and data order start fresh (`--init-from`; see
    /// `train::warm_start`). Unset: a fresh model from `seed`. Ignored when
    /// resuming (the checkpoint holds the model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_from: Option<PathBuf>,
    /// Start from the model of this local Hugging Face GPT-2 or Llama directory
    /// (config.json + model.safetensors; `--init-from-hf`; see
    /// `import::hf`): its shape must be the run's and its vocabulary the
    /// corpus'; like `init_from` otherwise, and not together with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_from_hf: Option<PathBuf>,
    /// Where the model's forward and backward run (`--device`): `native`
    /// (lowcomm's CPU kernels, the default), or libtorch's `cpu`, `cuda`,
    /// `cuda:N` (a binary built with `--features torch`; docs/torch.md).
    /// Not part of a run's identity: a checkpoint resumes on either.
    #[serde(skip_serializing_if = "crate::model::device::is_native")]
    pub device: ComputeDevice,
    /// The precision of the model's math (`--precision`): `f32` (the
    /// default) or `bf16` (libtorch devices: bf16 forward and backward, f32
    /// master weights, gradients and optimizer). Not part of a run's
    /// identity, as `device`.
    #[serde(skip_serializing_if = "crate::model::device::is_f32")]
    pub precision: ComputePrecision,
}

impl Default for TrainSection {
    fn default() -> Self {
        Self {
            steps: 300,
            batch_size: 16,
            seq_len: None,
            grad_accum: 1,
            seed: 1337,
            grad_clip: 1.0,
            decay_biases_and_norms: false,
            decay_position_embedding: false,
            log_every: 10,
            eval_every: 100,
            eval_windows: 64,
            checkpoint_every: None,
            keep_checkpoints: 2,
            out_dir: PathBuf::from("runs/default"),
            init_from: None,
            init_from_hf: None,
            device: ComputeDevice::Native,
            precision: ComputePrecision::F32,
        }
    }
}

/// `train.checkpoint_every` when unset: every 100 steps, the cadence of
/// `eval_every`'s default (our choice; docs/design.md, "Stopping and
/// resuming").
pub const DEFAULT_CHECKPOINT_EVERY: u64 = 100;

/// Learning-rate schedule (its `total_steps` is `train.steps`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScheduleSection {
    /// Peak learning rate.
    #[serde(serialize_with = "crate::util::f32_shortest::serialize")]
    pub max_lr: f32,
    /// Linear warmup steps.
    pub warmup_steps: u64,
    /// Floor of the cosine decay, as a fraction of `max_lr`.
    #[serde(serialize_with = "crate::util::f32_shortest::serialize")]
    pub min_lr_ratio: f32,
}

impl Default for ScheduleSection {
    fn default() -> Self {
        Self { max_lr: 3e-3, warmup_steps: 20, min_lr_ratio: 0.1 }
    }
}

/// A whole run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    pub model: ModelSection,
    pub data: DataSection,
    pub train: TrainSection,
    pub schedule: ScheduleSection,
    pub optimizer: OptimizerConfig,
    pub parallel: ParallelSection,
    /// Per-method settings: `[methods.NAME]` sections (every key is
    /// documented in configs/README.md; see `strategy::method`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub methods: std::collections::BTreeMap<String, toml::Table>,
    /// Workers that crash and join: `[faults] plan = "2:crash@120,2:join@300"`
    /// (flag `--faults`; async-diloco only). Default: none.
    #[serde(default, skip_serializing_if = "crate::strategy::faults::FaultsSection::is_empty")]
    pub faults: crate::strategy::faults::FaultsSection,
}

impl RunConfig {
    /// Parse a TOML file; errors name the file, the key and the fix.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read config {}", path.display()))?;
        Self::from_toml(&text).with_context(|| {
            format!("invalid config {} (every key is documented in configs/README.md)", path.display())
        })
    }

    /// Parse TOML text. Errors are one line: where, and what (toml's own
    /// message names the unknown key and lists the valid ones).
    pub fn from_toml(text: &str) -> Result<Self> {
        toml::from_str(text).map_err(|e| crate::util::toml_error(text, e))
    }

    /// The config as TOML (saved beside the run and inside checkpoints).
    /// Only for a config that passed [`RunConfig::validate`], which refuses
    /// what TOML cannot hold.
    pub fn to_toml(&self) -> String {
        self.try_to_toml().expect("a validated RunConfig serialises")
    }

    /// The config as TOML, or why it cannot be written as TOML.
    pub fn try_to_toml(&self) -> Result<String> {
        toml::to_string(self).context("the run's configuration cannot be written as TOML (config.toml)")
    }

    /// What a run saves (config.toml, every checkpoint) must be TOML: whole
    /// numbers up to 2^63 - 1 and UTF-8 text. A flag's value is checked
    /// when it is parsed; this catches the rest (a path made absolute under
    /// a working directory that is not UTF-8), before any file is written.
    fn check_saveable(&self) -> Result<()> {
        let t = &self.train;
        let paths = [
            ("train.out_dir (--out)", Some(&t.out_dir)),
            ("train.init_from (--init-from)", t.init_from.as_ref()),
            ("train.init_from_hf (--init-from-hf)", t.init_from_hf.as_ref()),
            ("data.dir (--data)", self.data.dir.as_ref()),
            ("parallel.cluster (--cluster)", self.parallel.cluster.as_ref()),
            ("parallel.trace (--trace)", self.parallel.trace.as_ref()),
        ];
        for (key, path) in paths {
            if let Some(p) = path.filter(|p| p.to_str().is_none()) {
                anyhow::bail!(
                    "{key} {}: path contains invalid UTF-8; a run records its paths in config.toml, which holds UTF-8 text only: use a path that is valid UTF-8",
                    p.display()
                );
            }
        }
        let max = i64::MAX as u64;
        let counts = [
            ("train.steps (--steps)", t.steps),
            ("train.seed (--seed)", t.seed),
            ("train.log_every", t.log_every),
            ("train.eval_every (--eval-every)", t.eval_every),
            ("train.checkpoint_every (--checkpoint-every)", t.checkpoint_every.unwrap_or(0)),
            ("schedule.warmup_steps", self.schedule.warmup_steps),
            ("train.batch_size (--batch-size)", t.batch_size as u64),
            ("train.grad_accum (--grad-accum)", t.grad_accum as u64),
        ];
        if let Some((key, v)) = counts.iter().find(|(_, v)| *v > max) {
            anyhow::bail!("{key} = {v} is too large: must be at most {max} (2^63 - 1, the largest whole number config.toml can hold)");
        }
        self.try_to_toml().map(drop)
    }

    /// Tokens per sequence.
    pub fn seq_len(&self, model: &GptConfig) -> usize {
        self.train.seq_len.unwrap_or(model.ctx)
    }

    /// Prepared-corpus directory.
    pub fn data_dir(&self, model: &GptConfig) -> PathBuf {
        self.data.dir.clone().unwrap_or_else(|| default_data_dir(model.vocab_size))
    }

    /// The learning-rate schedule over `train.steps`.
    pub fn schedule(&self) -> LrSchedule {
        let s = &self.schedule;
        LrSchedule {
            max_lr: s.max_lr,
            warmup_steps: s.warmup_steps.min(self.train.steps),
            total_steps: self.train.steps,
            min_lr: s.max_lr * s.min_lr_ratio,
        }
    }

    /// Check everything that can be checked before touching data.
    pub fn validate(&self) -> Result<GptConfig> {
        let model = self.model.resolve()?;
        let t = &self.train;
        anyhow::ensure!(t.steps >= 1, "train.steps must be at least 1");
        anyhow::ensure!(t.batch_size >= 1, "train.batch_size must be at least 1");
        anyhow::ensure!(t.grad_accum >= 1, "train.grad_accum must be at least 1");
        anyhow::ensure!(t.log_every >= 1, "train.log_every must be at least 1");
        // 0 windows would average no loss at all and report val_loss 0 (a perfect model).
        anyhow::ensure!(
            t.eval_windows >= 1,
            "train.eval_windows must be at least 1 (got 0): it is how many validation windows each evaluation averages, e.g. eval_windows = 64"
        );
        anyhow::ensure!(
            t.keep_checkpoints >= 1,
            "train.keep_checkpoints must be at least 1 (got 0): the latest checkpoint is always kept, it is what --resume continues"
        );
        anyhow::ensure!(t.grad_clip >= 0.0, "train.grad_clip must be >= 0 (0 disables clipping)");
        t.device.check_for(&model)?;
        t.precision.check_for(t.device)?;
        let seq = self.seq_len(&model);
        anyhow::ensure!(
            seq >= 1 && seq <= model.ctx,
            "train.seq_len ({seq}) must be between 1 and the model's ctx ({})",
            model.ctx
        );
        anyhow::ensure!((0.0..=1.0).contains(&self.schedule.min_lr_ratio), "schedule.min_lr_ratio must be in [0, 1]");
        self.schedule().validate()?;
        self.optimizer.validate()?;
        crate::strategy::Method::check_sections(&self.methods)?;
        self.parallel.validate()?;
        self.check_saveable()?;
        Ok(model)
    }
}

/// Default location of a prepared Gutenberg corpus for a vocabulary size.
pub fn default_data_dir(vocab_size: usize) -> PathBuf {
    PathBuf::from(format!("data/gutenberg-{vocab_size}"))
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
