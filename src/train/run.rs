//! `lowcomm train`: the loop around [`Trainer`] that logs, evaluates and
//! checkpoints on schedule.

use super::config::RunConfig;
use super::interrupt::{requested, Interrupted};
use super::metrics::{EvalRecord, MetricsLog, Progress};
use super::trainer::Trainer;
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// How to run (beyond the config).
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Resume from this checkpoint or run directory.
    pub resume: Option<PathBuf>,
    /// Stop (with a checkpoint) after this step, as a preempted job would;
    /// the schedule still spans `train.steps`. It must lie after the step
    /// the run starts at and not beyond `train.steps` ([`end_step`]).
    pub stop_at: Option<u64>,
    /// No progress output.
    pub quiet: bool,
    /// A fresh run may replace a run already in `train.out_dir` (its
    /// metrics, checkpoints and config; see [`super::rundir::claim_fresh`]).
    /// Without it, such a run is refused.
    pub force: bool,
    /// Stop (with a checkpoint, at the next step or round boundary) once
    /// this is set: `train`'s Ctrl-C handler (`train::interrupt`). The run
    /// then ends with [`Interrupted`].
    pub stop: Option<Arc<AtomicBool>>,
    /// Start even when the run is estimated not to fit in memory or to take
    /// more than an hour per round (`train::memory`, `train::duration`).
    pub yes: bool,
}

/// What a run ends with.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub steps: u64,
    pub tokens: u64,
    pub final_loss: f32,
    pub eval: EvalRecord,
    pub checkpoint: PathBuf,
    pub wall_s: f64,
    /// Validation windows behind `eval` (the same count `lowcomm eval` uses by default).
    pub eval_windows: usize,
    /// The step and checkpoint a resumed run continued from.
    pub resumed_from: Option<(u64, PathBuf)>,
}

/// The step a run that is at step `start` trains to: `stop_at` if given,
/// else `steps`. Refuses `steps` below `start` (a run cannot be shortened
/// after the fact; its schedule already spans `steps`) and a `stop_at`
/// outside the steps left, naming the range that works. Both single-worker
/// and data-parallel runs (where a step is a round) check with this.
pub fn end_step(start: u64, steps: u64, stop_at: Option<u64>) -> Result<u64> {
    if steps < start {
        bail!(
            "--steps {steps} is below the run's step {start}: give --steps {start} or more to continue it (e.g. --steps {})",
            2 * start
        );
    }
    match stop_at {
        Some(s) if start == steps => bail!(
            "--stop-at {s}: the run is already at step {start} of {steps}, nothing is left to stop in; train it further with --steps {} (and a --stop-at up to it)",
            2 * steps
        ),
        Some(s) if s <= start || s > steps => bail!(
            "--stop-at {s} is outside the steps left to train: give a step from {} to {steps}",
            start + 1
        ),
        Some(s) => Ok(s),
        None => Ok(steps),
    }
}

/// Train according to `cfg`: fresh (refusing to replace a run already in
/// `train.out_dir` unless `opts.force`), or resuming from `opts.resume` and
/// continuing in `train.out_dir` (the CLI sets it to the resumed run's own
/// directory; see [`super::rundir::resolve_resume`]).
pub fn run(cfg: RunConfig, opts: &RunOptions) -> Result<RunSummary> {
    // Before anything big is allocated: will it fit?
    super::memory::check(&super::memory::single(&cfg, &cfg.validate()?)?, opts.yes)?;
    let mut tr = Trainer::new(cfg, opts.resume.as_deref())?;
    let t = tr.cfg.train.clone();
    let out = t.out_dir.clone();
    let end = end_step(tr.step, t.steps, opts.stop_at)?;
    let progress = Progress::new(end, tr.step, opts.quiet);
    let resumed_from = match &opts.resume {
        Some(r) => Some((tr.step, crate::checkpoint::resolve(r)?)),
        None => None,
    };
    if let Some((step, ckpt)) = &resumed_from {
        progress.line(&format!("resuming {} from step {step}: {}", out.display(), ckpt.display()));
    }
    let eval_windows = tr.eval_window_count();
    if tr.step >= end {
        // Nothing to train (resuming a finished run): report, write nothing.
        let eval = tr.evaluate();
        progress.finish();
        progress.line(&format!("nothing to do: the run is already at step {} of {}", tr.step, t.steps));
        let checkpoint =
            resumed_from.as_ref().map_or_else(|| crate::checkpoint::resolve(&out), |(_, c)| Ok(c.clone()))?;
        return Ok(RunSummary {
            steps: tr.step,
            tokens: tr.tokens_seen,
            final_loss: f32::NAN,
            eval,
            checkpoint,
            wall_s: tr.wall_s(),
            eval_windows,
            resumed_from,
        });
    }
    if requested(&opts.stop) {
        return Err(
            Interrupted { run_dir: out, checkpoint: None, step: tr.step, steps: t.steps, launcher: None }.into()
        );
    }
    // Only now, with the config validated and the data open, so that a run
    // that cannot start creates and replaces nothing; held to the end.
    let _lock = super::lock::RunLock::acquire(&out)?;
    if opts.resume.is_none() {
        super::rundir::claim_fresh(&out, opts.force)?;
    }
    let mut log = MetricsLog::open(&out, opts.resume.as_ref().map(|_| tr.step))?;
    crate::util::atomic_write(&out.join("config.toml"), tr.cfg.to_toml().as_bytes())?;
    let checkpoint_every = t.checkpoint_every.unwrap_or(super::config::DEFAULT_CHECKPOINT_EVERY);
    progress.line(&format!(
        "training {} params ({} layers, d {}, vocab {}) for steps {}..{} of {}, {} tokens/step -> {}",
        tr.model.num_params(),
        tr.model.cfg.n_layer,
        tr.model.cfg.n_embd,
        tr.model.cfg.vocab_size,
        tr.step,
        end,
        t.steps,
        tr.tokens_per_step(),
        out.display()
    ));
    let mut last_loss = f32::NAN;
    let mut last_eval = None;
    while tr.step < end {
        let r = tr.train_step()?;
        last_loss = r.loss;
        progress.step(&r);
        if r.step % t.log_every == 0 || r.step == end {
            log.write("train", &r)?;
            progress.line(&format!(
                "step {:>6}  loss {:.4}  lr {:.2e}  grad-norm {:.3}  {:.0} tok/s  {}",
                r.step,
                r.loss,
                r.lr,
                r.grad_norm,
                r.tokens_per_s,
                progress.timing(r.step)
            ));
        }
        if t.eval_every > 0 && r.step % t.eval_every == 0 && r.step != end {
            let e = tr.evaluate();
            log.write("eval", &e)?;
            progress.line(&format!("step {:>6}  val loss {:.4}  val ppl {:.2}", e.step, e.val_loss, e.val_ppl));
            last_eval = Some(e);
        }
        if requested(&opts.stop) && r.step != end {
            let dir = tr.save_checkpoint()?;
            progress.finish();
            return Err(Interrupted {
                run_dir: out,
                checkpoint: Some(dir),
                step: tr.step,
                steps: t.steps,
                launcher: None,
            }
            .into());
        }
        if checkpoint_every > 0 && r.step % checkpoint_every == 0 && r.step != end {
            let dir = tr.save_checkpoint()?;
            progress.line(&format!("checkpoint {}", dir.display()));
        }
    }
    let eval = match last_eval.filter(|e| e.step == tr.step) {
        Some(e) => e,
        None => {
            let e = tr.evaluate();
            log.write("eval", &e)?;
            e
        }
    };
    let checkpoint = tr.save_checkpoint()?;
    progress.finish();
    progress.line(&format!(
        "done: step {}  val loss {:.4}  val perplexity {:.2} ({eval_windows} windows)  checkpoint {}",
        tr.step,
        eval.val_loss,
        eval.val_ppl,
        checkpoint.display()
    ));
    Ok(RunSummary {
        steps: tr.step,
        tokens: tr.tokens_seen,
        final_loss: last_loss,
        eval,
        checkpoint,
        wall_s: tr.wall_s(),
        eval_windows,
        resumed_from,
    })
}
