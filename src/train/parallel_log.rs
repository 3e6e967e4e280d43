//! What a data-parallel run reports while it runs: every participant's
//! rounds into `metrics.jsonl` (`kind: "worker"`), the run's rounds once
//! every worker has finished them (`kind: "train"`: mean loss, tokens
//! applied so far, when the last worker ended the round), crashes and joins
//! under a fault plan (`kind: "fault"`), and a progress
//! bar (or a line every few rounds when stderr is not a terminal).

use super::metrics::MetricsLog;
use crate::optim::LrSchedule;
use crate::strategy::{Observer, StepPoint};
use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Instant;

/// One round of a parallel run, as logged.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RoundRecord {
    /// Rounds completed, this one included.
    pub step: u64,
    /// Tokens whose gradients have been applied, all workers, so far.
    pub tokens: u64,
    /// Mean training loss over the workers.
    pub loss: f32,
    /// Learning rate used.
    pub lr: f32,
    /// Seconds (virtual under `sim`) at which the round's last worker ended it.
    pub wall_s: f64,
}

/// A participant's round, as logged.
#[derive(Serialize)]
struct WorkerRecord<'a> {
    worker: usize,
    #[serde(flatten)]
    point: &'a StepPoint,
}

struct Inner {
    workers: usize,
    /// Per worker: rounds ended but not yet logged for the run.
    pending: Vec<std::collections::VecDeque<StepPoint>>,
    next: u64,
    tokens: u64,
    tokens_per_micro_batch: u64,
    schedule: LrSchedule,
    log: Option<MetricsLog>,
    rounds: Vec<RoundRecord>,
    error: Option<anyhow::Error>,
    bar: Option<ProgressBar>,
    quiet: bool,
    total: u64,
    /// Rounds done before this run started (a resumed run).
    first: u64,
    every: u64,
    started: Instant,
    virtual_time: bool,
    label: String,
}

/// The run's [`Observer`]: metrics lines and progress.
pub struct RoundLog {
    inner: Mutex<Inner>,
}

/// How a [`RoundLog`] is set up.
pub struct RoundLogSpec {
    /// Data-parallel workers (a round is logged once all have ended it).
    pub workers: usize,
    /// Rounds completed before this run (a resumed run).
    pub first: u64,
    /// Tokens applied before this run.
    pub tokens: u64,
    /// Rounds of the whole run.
    pub total: u64,
    /// Tokens per micro-batch.
    pub tokens_per_micro_batch: u64,
    /// The learning rate of each round.
    pub schedule: LrSchedule,
    /// Times are virtual (sim): say so.
    pub virtual_time: bool,
    /// No progress output.
    pub quiet: bool,
    /// Shown before the bar (the method, or "compare 2/5: acco").
    pub label: String,
}

impl RoundLog {
    /// Appends to `log` (if any) from round `spec.first + 1` on.
    pub fn new(log: Option<MetricsLog>, spec: RoundLogSpec) -> RoundLog {
        let bar = (!spec.quiet && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::new(spec.total);
            let style = ProgressStyle::with_template("{prefix} {bar:25} {pos}/{len} rounds  {msg}  ETA {eta}")
                .expect("valid template");
            b.set_style(style);
            b.set_prefix(spec.label.clone());
            b.set_position(spec.first);
            b
        });
        RoundLog {
            inner: Mutex::new(Inner {
                workers: spec.workers,
                pending: (0..spec.workers).map(|_| Default::default()).collect(),
                next: spec.first + 1,
                tokens: spec.tokens,
                tokens_per_micro_batch: spec.tokens_per_micro_batch,
                schedule: spec.schedule,
                log,
                rounds: Vec::new(),
                error: None,
                bar,
                quiet: spec.quiet,
                // About 20 plain lines per run, at most one per round.
                every: (spec.total / 20).max(1),
                total: spec.total,
                first: spec.first,
                started: Instant::now(),
                virtual_time: spec.virtual_time,
                label: spec.label,
            }),
        }
    }

    /// The run's rounds logged by this run, and the first error writing them.
    pub fn finish(self) -> Result<Vec<RoundRecord>> {
        let inner = self.inner.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = &inner.bar {
            b.finish_and_clear();
        }
        match inner.error {
            Some(e) => Err(e),
            None => Ok(inner.rounds),
        }
    }
}

impl Inner {
    fn write<T: Serialize>(&mut self, kind: &str, rec: &T) {
        if let Some(Err(e)) = self.log.as_mut().map(|l| l.write(kind, rec)) {
            self.error.get_or_insert(e);
        }
    }

    /// Logs every round all workers have ended.
    fn drain(&mut self) {
        while self.pending.iter().all(|q| !q.is_empty()) {
            let points: Vec<StepPoint> = self.pending.iter_mut().map(|q| q.pop_front().expect("checked")).collect();
            let loss = (points.iter().map(|p| p.loss as f64).sum::<f64>() / self.workers as f64) as f32;
            self.tokens += points.iter().map(|p| p.micro_batches).sum::<u64>() * self.tokens_per_micro_batch;
            let wall_s = points.iter().map(|p| p.end_s).fold(0.0, f64::max);
            let rec =
                RoundRecord { step: self.next, tokens: self.tokens, loss, lr: self.schedule.lr(self.next - 1), wall_s };
            self.write("train", &rec);
            self.show(&rec);
            self.rounds.push(rec);
            self.next += 1;
        }
    }

    fn show(&self, r: &RoundRecord) {
        let elapsed = self.started.elapsed().as_secs_f64();
        let clock = if self.virtual_time {
            format!("virtual {:.1} s, wall {elapsed:.0} s", r.wall_s)
        } else {
            format!("{:.1} s", r.wall_s)
        };
        let rate = if r.wall_s > 0.0 { r.tokens as f64 / r.wall_s } else { 0.0 };
        let msg = format!("loss {:.4}  {} tokens  {clock}  {rate:.0} tok/s", r.loss, r.tokens);
        match &self.bar {
            Some(b) => {
                b.set_position(r.step);
                b.set_message(msg);
            }
            None if !self.quiet && (r.step % self.every == 0 || r.step == self.total) => {
                let per_round = elapsed / (r.step - self.first).max(1) as f64;
                let eta = per_round * self.total.saturating_sub(r.step) as f64;
                eprintln!("{} round {}/{}  {msg}  ETA {eta:.0} s", self.label, r.step, self.total);
            }
            None => {}
        }
    }
}

impl Observer for RoundLog {
    fn point(&self, p: usize, point: &StepPoint) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // Participants after the workers (a parameter server) have their
        // own curve (updates applied), not part of the workers' rounds.
        let kind = if p < inner.workers { "worker" } else { "server" };
        inner.write(kind, &WorkerRecord { worker: p, point });
        if p < inner.workers {
            inner.pending[p].push_back(point.clone());
            inner.drain();
        }
    }

    /// A crash or join: a `kind: "fault"` line (worker, event, plan time, when acted on, its step).
    fn fault(&self, record: &crate::strategy::membership::FaultRecord) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).write("fault", record);
    }
}
