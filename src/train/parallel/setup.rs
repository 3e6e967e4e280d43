//! The types a data-parallel run's driver (mod.rs, mpi.rs) and its report
//! (report.rs) share: what the run fixes before its workers start
//! ([`Setup`], built by [`super::setup()`]) and what it ends with
//! ([`ParallelSummary`]).

use super::checkpoint::{Resumed, RunIdentity};
use super::log::{logged_rounds, resume_log, RoundLog, RoundLogSpec, RoundRecord};
use crate::data::sampler::shard_range;
use crate::metrics::Summary;
use crate::model::{Gpt, GptConfig};
use crate::runtime::Topology;
use crate::strategy::{Method, Plan, Runtime, Worker, WorkerReport};
use crate::train::config::RunConfig;
use crate::train::metrics::MetricsLog;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::sync::Arc;

/// What a parallel run ends with.
pub struct ParallelSummary {
    pub method: Method,
    /// The run's rounds (all of them, also those before a resume).
    pub rounds: Vec<RoundRecord>,
    pub world: usize,
    pub final_loss: f32,
    pub val_loss: f32,
    pub summary: Summary,
    pub reports: Vec<WorkerReport>,
    pub checkpoint: PathBuf,
}

/// Everything a parallel run fixes before its workers start.
pub struct Setup {
    pub cfg: RunConfig,
    pub model_cfg: GptConfig,
    pub method: Method,
    /// The validation split and tokenizer (the training split is `tokens`).
    pub data: crate::data::Dataset,
    /// The training tokens, shared by every worker of this process.
    pub tokens: Arc<Vec<u32>>,
    /// The initial model (identical on every worker): fresh, or the
    /// checkpoint's when resuming.
    pub init: Gpt,
    pub world: usize,
    pub runtime: Runtime,
    pub plan: Plan,
    /// Tokens per sequence.
    pub seq: usize,
    /// The checkpoint resumed from, if any.
    pub resumed: Option<Resumed>,
    /// No progress output.
    pub quiet: bool,
    /// Shown before the progress bar.
    pub label: String,
}

/// The job's shape under `runtime`.
pub fn topology(runtime: &Runtime) -> Topology {
    runtime.topology()
}

impl Setup {
    /// Worker `rank` of threads in one process, computing on the device of
    /// local slot `rank` ([`Setup::worker_on`]).
    pub fn worker(&self, rank: usize) -> Result<Worker> {
        self.worker_on(rank, rank)
    }

    /// Worker `rank`: a replica of the initial model and its shard of the
    /// data, continuing its stream when resuming. It computes on the device
    /// of `local` (its place among the workers on its machine: `--device
    /// cuda` spreads those over the machine's GPUs).
    pub fn worker_on(&self, rank: usize, local: usize) -> Result<Worker> {
        let t = &self.cfg.train;
        let shard = shard_range(self.tokens.len(), rank, self.world);
        let device = t.device.for_worker(local, crate::model::device::cuda_count());
        let model =
            Gpt::from_params(self.model_cfg.clone(), self.init.params.clone(), t.seed)?.on(device, t.precision)?;
        let mut w = Worker::new(model, self.tokens.clone(), shard, t.batch_size, self.seq, t.seed, rank).with_context(
            || format!("worker {rank} of {}: its data shard is too small; use fewer workers or more text", self.world),
        )?;
        if let Some(r) = &self.resumed {
            if let Some(s) = r.part(rank)?.worker {
                w.restore(s)
                    .with_context(|| format!("worker {rank}: the checkpoint's sampler does not fit this corpus"))?;
            }
        }
        Ok(w)
    }

    /// Tokens per micro-batch.
    pub fn tokens_per_micro_batch(&self) -> u64 {
        (self.cfg.train.batch_size * self.seq) as u64
    }

    /// What every checkpoint of this run shares.
    pub fn identity(&self) -> Result<RunIdentity> {
        Ok(RunIdentity {
            run_dir: self.cfg.train.out_dir.clone(),
            cfg: self.cfg.clone(),
            model: self.model_cfg.clone(),
            method: self.method.name().into(),
            topology: topology(&self.runtime),
            tokenizer_json: self.data.tokenizer.to_json()?,
            tokens_per_micro_batch: self.tokens_per_micro_batch(),
        })
    }

    /// The metrics log (when `write`) and progress (when not quiet) over
    /// `workers`' rounds, continuing a resumed run's log.
    pub fn round_log(&self, write: bool, workers: usize) -> Result<RoundLog> {
        let pooled = self.method.needs_server();
        let dir = &self.cfg.train.out_dir;
        let (log, first, tokens, pool) = match (&self.resumed, write) {
            (None, true) => (Some(MetricsLog::open(dir, None)?), 0, 0, Vec::new()),
            (None, false) => (None, 0, 0, Vec::new()),
            (Some(r), true) => {
                let l = resume_log(dir, &r.into(), workers, pooled, self.tokens_per_micro_batch())?;
                (Some(l.log), l.first, l.tokens, l.pool)
            }
            (Some(r), false) => (None, logged_rounds(&r.into(), workers, pooled), r.tokens_seen, Vec::new()),
        };
        Ok(RoundLog::new(
            log,
            RoundLogSpec {
                workers,
                first,
                tokens,
                pool,
                total: self.plan.steps,
                tokens_per_micro_batch: self.tokens_per_micro_batch(),
                schedule: self.plan.schedule.clone(),
                lr_by_tokens: (self.plan.micro_batch_budget.is_some() && self.method.accumulates_while_communicating())
                    .then(|| self.tokens_per_micro_batch() * (workers * self.plan.grad_accum) as u64),
                virtual_time: matches!(self.runtime, Runtime::Sim(_)),
                pooled,
                quiet: self.quiet || (write && workers > 1 && matches!(self.cfg.parallel.backend.as_str(), "mpi")),
                label: self.label.clone(),
            },
        ))
    }

    /// Each participant's part to resume from (empty for a fresh run).
    pub fn resumed_parts(&self) -> Result<Vec<Option<crate::strategy::SavedPart>>> {
        match &self.resumed {
            None => Ok(Vec::new()),
            Some(r) => (0..topology(&self.runtime).participants()).map(|p| r.part(p).map(Some)).collect(),
        }
    }

    /// The line announcing the run.
    pub fn banner(&self, backend: &str) -> String {
        let rt = match &self.runtime {
            Runtime::Real(_) => "real",
            Runtime::Sim(_) => "sim",
        };
        let t = &self.cfg.train;
        let from = match &self.resumed {
            Some(r) => format!(" (resuming round {} from {})", r.round, r.dir.display()),
            None => String::new(),
        };
        format!(
            "training {} params with {} on {} workers{} ({rt} runtime, {backend} backend) for rounds {}..{} of {}{from} -> {}",
            self.init.num_params(),
            self.method,
            self.world,
            if self.runtime.topology().server { " + a parameter server" } else { "" },
            self.resumed.as_ref().map_or(0, |r| r.round),
            self.plan.end,
            t.steps,
            t.out_dir.display()
        )
    }
}
