//! The single-worker training loop: sample, forward/backward with gradient
//! accumulation, clip, step, log, evaluate, checkpoint.
//!
//! Every piece of state that influences the next step (parameters,
//! optimizer moments, step count, sampler RNG, dropout RNG) is in the
//! checkpoint, so `--resume` continues bit-identically.

use super::config::RunConfig;
use super::metrics::{EvalRecord, StepRecord};
use crate::checkpoint::{self, TrainState};
use crate::data::sampler::{eval_windows, WindowSampler};
use crate::data::Dataset;
use crate::model::{Gpt, GptConfig};
use crate::optim::{clip_global_norm, global_norm, DecaySegments, LrSchedule, Optimizer};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A model, its optimizer and its data, ready to step.
pub struct Trainer {
    /// The run's configuration.
    pub cfg: RunConfig,
    /// The model (parameters, gradients).
    pub model: Gpt,
    /// The prepared corpus.
    pub data: Dataset,
    /// Optimizer steps completed.
    pub step: u64,
    /// Training tokens consumed.
    pub tokens_seen: u64,
    optimizer: Box<dyn Optimizer>,
    decay: DecaySegments,
    schedule: LrSchedule,
    sampler: WindowSampler,
    seq_len: usize,
    inputs: Vec<u32>,
    targets: Vec<u32>,
    /// Seconds trained by earlier runs (resumed), so wall time is cumulative.
    wall_before: f64,
    started: Instant,
}

impl Trainer {
    /// Build from a config, fresh or resuming from a checkpoint (a run
    /// directory or a `checkpoints/step-N` directory).
    pub fn new(cfg: RunConfig, resume: Option<&Path>) -> Result<Self> {
        let model_cfg = cfg.validate()?;
        let (data, data_dir) = open_data(&cfg, &model_cfg)?;
        let seq_len = cfg.seq_len(&model_cfg);
        let t = &cfg.train;
        let n_params = crate::model::ParamLayout::new(&model_cfg).len;
        let mut optimizer = cfg.optimizer.try_build(n_params)?;
        let mut sampler = WindowSampler::new(0..data.train.len(), seq_len, t.seed, 0)?;
        let (model, step, tokens_seen, wall_before) = match resume {
            None => {
                let model = match super::warm_start::initial(t, &model_cfg, &data.tokenizer)? {
                    Some(params) => Gpt::from_params(model_cfg.clone(), params, t.seed)?,
                    None => Gpt::new(model_cfg.clone(), t.seed)?,
                }
                .on(t.device, t.precision)?;
                (model, 0, 0, 0.0)
            }
            Some(path) => {
                let ck = checkpoint::load(path)?;
                let st = ck.state;
                if st.model != model_cfg {
                    bail!(
                        "checkpoint {} was trained with another model: {}; resume with the same model settings (or omit --preset/--config to reuse the checkpoint's)",
                        path.display(),
                        super::rundir::model_change(&st.model, &model_cfg)
                    );
                }
                let ck_tok = crate::data::Tokenizer::from_json(&ck.tokenizer_json)?;
                if ck_tok.to_json()? != data.tokenizer.to_json()? {
                    bail!(
                        "the checkpoint's tokenizer differs from {}'s: this checkpoint was trained on another corpus; pass the same --data as the original run",
                        data_dir.display()
                    );
                }
                if st.optimizer_kind != optimizer_kind(&cfg) {
                    bail!("checkpoint was trained with optimizer `{}`, this run uses `{}`: keep the same [optimizer] to resume", st.optimizer_kind, optimizer_kind(&cfg));
                }
                optimizer
                    .load_state(st.optimizer_steps, &ck.optimizer)
                    .context("checkpoint's optimizer state does not fit")?;
                sampler
                    .restore(st.sampler.clone())
                    .context("checkpoint's sampler does not fit this corpus and sequence length")?;
                let mut m = Gpt::from_params(model_cfg.clone(), ck.params, t.seed)?.on(t.device, t.precision)?;
                m.dropout_rng = st.dropout_rng.clone();
                (m, st.step, st.tokens_seen, st.wall_s)
            }
        };
        let decay = decay_segments(&model.layout, &cfg);
        let schedule = cfg.schedule();
        let rows = t.batch_size * seq_len;
        Ok(Self {
            model,
            data,
            step,
            tokens_seen,
            optimizer,
            decay,
            schedule,
            sampler,
            seq_len,
            inputs: vec![0; rows],
            targets: vec![0; rows],
            wall_before,
            started: Instant::now(),
            cfg,
        })
    }

    /// Tokens per optimizer step.
    pub fn tokens_per_step(&self) -> u64 {
        (self.cfg.train.batch_size * self.seq_len * self.cfg.train.grad_accum) as u64
    }

    /// Seconds trained in total (earlier runs included).
    pub fn wall_s(&self) -> f64 {
        self.wall_before + self.started.elapsed().as_secs_f64()
    }

    /// One optimizer step over `grad_accum` micro-batches.
    pub fn train_step(&mut self) -> Result<StepRecord> {
        let t0 = Instant::now();
        let (b, t, accum) = (self.cfg.train.batch_size, self.seq_len, self.cfg.train.grad_accum);
        self.model.zero_grads();
        let mut loss = 0.0f64;
        for _ in 0..accum {
            self.sampler.fill_batch(&self.data.train, &mut self.inputs, &mut self.targets);
            loss += self.model.forward_backward(&self.inputs, &self.targets, b, t, 1.0 / accum as f32) as f64;
        }
        let loss = (loss / accum as f64) as f32;
        let clip = self.cfg.train.grad_clip;
        let grad_norm =
            if clip > 0.0 { clip_global_norm(self.model.grads_mut(), clip) } else { global_norm(self.model.grads()) };
        let lr = self.schedule.lr(self.step);
        if !loss.is_finite() || !grad_norm.is_finite() {
            bail!(
                "training diverged at step {}: loss {loss}, gradient norm {grad_norm} (lr {lr:.2e}). Lower schedule.max_lr (--lr) or set train.grad_clip; the last checkpoint on disk is untouched",
                self.step + 1
            );
        }
        let (params, grads) = self.model.params_and_grads();
        self.optimizer.step(params, grads, lr, &self.decay);
        self.step += 1;
        self.tokens_seen += self.tokens_per_step();
        let dt = t0.elapsed().as_secs_f64();
        Ok(StepRecord {
            step: self.step,
            tokens: self.tokens_seen,
            loss,
            lr,
            grad_norm,
            tokens_per_s: self.tokens_per_step() as f64 / dt,
            wall_s: self.wall_s(),
        })
    }

    /// Mean validation loss over the fixed evaluation windows.
    pub fn evaluate(&mut self) -> EvalRecord {
        let loss = evaluate(
            &mut self.model,
            &self.data.val,
            self.seq_len,
            self.cfg.train.batch_size,
            self.cfg.train.eval_windows,
        );
        EvalRecord {
            step: self.step,
            tokens: self.tokens_seen,
            val_loss: loss,
            val_ppl: loss.exp(),
            wall_s: self.wall_s(),
        }
    }

    /// How many validation windows [`Trainer::evaluate`] averages over
    /// (`train.eval_windows`, or fewer on a small validation split).
    pub fn eval_window_count(&self) -> usize {
        eval_windows(&self.data.val, self.seq_len, self.cfg.train.eval_windows).len()
    }

    /// Write a checkpoint for the current step; returns its directory.
    pub fn save_checkpoint(&self) -> Result<PathBuf> {
        let state = TrainState {
            format_version: checkpoint::FORMAT_VERSION,
            step: self.step,
            tokens_seen: self.tokens_seen,
            model: self.model.cfg.clone(),
            run_config: self.cfg.to_toml(),
            optimizer_kind: optimizer_kind(&self.cfg).into(),
            optimizer_steps: self.optimizer.steps_taken(),
            sampler: self.sampler.state(),
            dropout_rng: self.model.dropout_rng.clone(),
            wall_s: self.wall_s(),
            files: Default::default(),
            parallel: None,
        };
        let opt = self.optimizer.state_tensors();
        checkpoint::save(
            &self.cfg.train.out_dir,
            state,
            &self.model.params,
            &opt,
            &self.data.tokenizer.to_json()?,
            self.cfg.train.keep_checkpoints,
        )
    }

    /// Bytes of optimizer state.
    pub fn optimizer_bytes(&self) -> usize {
        4 * self.optimizer.state_len()
    }
}

/// Open the prepared corpus of a run and check it fits the model: the
/// vocabulary matches and both splits hold at least one window.
pub fn open_data(cfg: &RunConfig, model_cfg: &GptConfig) -> Result<(Dataset, PathBuf)> {
    let data_dir = cfg.data_dir(model_cfg);
    if !data_dir.join(crate::data::tokens::META_FILE).exists() {
        bail!(
            "no prepared corpus at {}: run `lowcomm data prepare --vocab-size {} --out {}` first (add --input FILES for your own text)",
            data_dir.display(),
            model_cfg.vocab_size,
            crate::train::rundir::shell_quote(&data_dir.display().to_string())
        );
    }
    let data = Dataset::open(&data_dir)?;
    check_vocab(
        model_cfg,
        data.tokenizer.vocab_size(),
        &format!("the tokenizer of {}", data_dir.display()),
        &data_dir,
    )?;
    data.check_context(cfg.seq_len(model_cfg))?;
    Ok((data, data_dir))
}

/// Mean loss of `model` over up to `max_windows` evenly spread windows of
/// `tokens`, `batch` windows at a time.
pub fn evaluate(model: &mut Gpt, tokens: &[u32], seq: usize, batch: usize, max_windows: usize) -> f32 {
    let starts = eval_windows(tokens, seq, max_windows);
    let (mut x, mut y) = (Vec::with_capacity(batch * seq), Vec::with_capacity(batch * seq));
    let (mut total, mut count) = (0.0f64, 0usize);
    for group in starts.chunks(batch) {
        x.clear();
        y.clear();
        for &s in group {
            x.extend_from_slice(&tokens[s..s + seq]);
            y.extend_from_slice(&tokens[s + 1..s + seq + 1]);
        }
        total += model.loss(&x, &y, group.len(), seq) as f64 * group.len() as f64;
        count += group.len();
    }
    (total / count.max(1) as f64) as f32
}

/// Which parameters take weight decay: weight matrices and the token
/// embedding always; biases, LayerNorm and the position embedding only
/// when the config asks.
pub fn decay_segments(layout: &crate::model::ParamLayout, cfg: &RunConfig) -> DecaySegments {
    let t = &cfg.train;
    DecaySegments::new(
        layout
            .tensors
            .iter()
            .filter(|s| {
                s.decay
                    || (s.name == "wpe.weight" && t.decay_position_embedding)
                    || (s.shape.len() == 1 && t.decay_biases_and_norms)
            })
            .map(|s| s.range.clone()),
    )
}

/// The `kind` tag of the configured optimizer.
fn optimizer_kind(cfg: &RunConfig) -> &'static str {
    match cfg.optimizer {
        crate::optim::OptimizerConfig::AdamW(_) => "adamw",
        crate::optim::OptimizerConfig::Sgd(_) => "sgd",
    }
}

/// The model's vocabulary must be the tokenizer's. The error gives a
/// command that prepares a matching corpus and works as pasted.
pub fn check_vocab(model: &GptConfig, tokenizer_vocab: usize, what: &str, data_dir: &Path) -> Result<()> {
    if model.vocab_size != tokenizer_vocab {
        bail!(
            "vocabulary mismatch: the model has vocab_size {} but {what} has {tokenizer_vocab} tokens. {}, or set model.vocab_size = {tokenizer_vocab}",
            model.vocab_size,
            matching_corpus_hint(data_dir, tokenizer_vocab, model.vocab_size)
        );
    }
    Ok(())
}

/// How to get a `vocab`-token corpus of the same text as `data_dir` (which
/// has `have` tokens): a directory beside it that already holds one, or a
/// `data prepare` command into a new directory beside it (never `--force`
/// over the existing corpus, which other runs may use), re-reading the
/// inputs recorded in its `meta.json`.
fn matching_corpus_hint(data_dir: &Path, have: usize, vocab: usize) -> String {
    use crate::data::gutenberg::GUTENBERG_PACKAGE;
    use crate::train::rundir::shell_quote;
    let name = data_dir.file_name().map_or_else(|| "corpus".into(), |n| n.to_string_lossy().into_owned());
    let stem = name.strip_suffix(&format!("-{have}")).unwrap_or(&name);
    let parent = data_dir.parent().unwrap_or(Path::new(""));
    let mut target = PathBuf::new();
    for k in 0.. {
        let suffix = if k == 0 { format!("-{vocab}") } else { format!("-{vocab}-{k}") };
        target = parent.join(format!("{stem}{suffix}"));
        match crate::data::Dataset::open_meta(&target) {
            Ok(meta) if meta.vocab_size == vocab => {
                return format!(
                    "{} already holds a {vocab}-token corpus: pass --data {}",
                    target.display(),
                    shell_quote(&target.display().to_string())
                )
            }
            _ if target.exists() => continue,
            _ => break,
        }
    }
    let out = shell_quote(&target.display().to_string());
    let sources = crate::data::Dataset::open_meta(data_dir).map(|m| m.sources).unwrap_or_default();
    let inputs = if !sources.is_empty() && sources.iter().all(|s| s.starts_with(GUTENBERG_PACKAGE)) {
        Some(String::new())
    } else if !sources.is_empty() && sources.iter().all(|s| Path::new(s).exists()) {
        Some(format!(" --input {}", sources.iter().map(|s| shell_quote(s)).collect::<Vec<_>>().join(" ")))
    } else {
        None // the inputs are not where they were; no command would work as pasted
    };
    match inputs {
        Some(inputs) => {
            format!("Prepare a matching corpus with `lowcomm data prepare{inputs} --vocab-size {vocab} --out {out}` and pass --data {out}")
        }
        None => format!(
            "Prepare a matching corpus from the same text (lowcomm data prepare --input FILES --vocab-size {vocab} --out {out}) and pass --data {out}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ParamLayout;

    #[test]
    fn weight_decay_selection_follows_the_config() {
        let layout = ParamLayout::new(&GptConfig::nano());
        let mut cfg = RunConfig::default();
        let at = |name: &str| layout.get(name).unwrap().range.start;
        let d = decay_segments(&layout, &cfg);
        assert!(d.contains(at("wte.weight")) && d.contains(at("h.1.mlp.c_fc.weight")));
        assert!(
            !d.contains(at("wpe.weight"))
                && !d.contains(at("h.0.ln_1.weight"))
                && !d.contains(at("h.0.attn.c_attn.bias"))
        );
        cfg.train.decay_position_embedding = true;
        cfg.train.decay_biases_and_norms = true;
        let d = decay_segments(&layout, &cfg);
        assert!(d.contains(at("wpe.weight")) && d.contains(at("h.0.ln_1.weight")) && d.contains(at("ln_f.bias")));
    }
}
