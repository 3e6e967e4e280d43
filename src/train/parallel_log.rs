//! What a data-parallel run reports while it runs: every participant's
//! rounds into `metrics.jsonl` (`kind: "worker"`), the run's rounds once
//! every worker has finished them (`kind: "train"`: mean loss, tokens
//! applied so far, when the last worker ended the round), and a progress
//! bar (or a line every few rounds when stderr is not a terminal).
//!
//! Under a parameter server (async DiLoCo) workers run unequal numbers of
//! rounds, so "round k of every worker" would end the run's curve at the
//! slowest worker's last round. There the curve is pooled instead: the
//! run's round k is the k-th group of `workers` consecutive worker rounds,
//! in the order they reach the log (whoever ran them); its loss is their
//! mean and its time the latest end among them. The server's budget is
//! `steps x workers` inner steps, so the pooled curve reaches round `steps`
//! like a synchronous run's; a last group of fewer rounds is not logged.

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
    /// Pooled curve (module docs): worker rounds not yet logged, any worker's.
    pool: Option<Vec<StepPoint>>,
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
    /// Workers run unequal numbers of rounds (a parameter server): pool the
    /// run's curve (module docs).
    pub pooled: bool,
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
                pool: spec.pooled.then(Vec::new),
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
            self.log_round(&points);
        }
    }

    /// Logs the run's next round from `points`, one per worker's round.
    fn log_round(&mut self, points: &[StepPoint]) {
        let loss = (points.iter().map(|p| p.loss as f64).sum::<f64>() / points.len() as f64) as f32;
        self.tokens += points.iter().map(|p| p.micro_batches).sum::<u64>() * self.tokens_per_micro_batch;
        let wall_s = points.iter().map(|p| p.end_s).fold(0.0, f64::max);
        let rec =
            RoundRecord { step: self.next, tokens: self.tokens, loss, lr: self.schedule.lr(self.next - 1), wall_s };
        self.write("train", &rec);
        self.show(&rec);
        self.rounds.push(rec);
        self.next += 1;
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
        if p >= inner.workers {
            return;
        }
        let workers = inner.workers;
        match inner.pool.as_mut() {
            Some(pool) => {
                pool.push(point.clone());
                if pool.len() == workers {
                    let points = std::mem::take(pool);
                    inner.log_round(&points);
                }
            }
            None => {
                inner.pending[p].push_back(point.clone());
                inner.drain();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(pooled: bool) -> RoundLog {
        let spec = RoundLogSpec {
            workers: 2,
            first: 0,
            tokens: 0,
            total: 3,
            tokens_per_micro_batch: 10,
            schedule: LrSchedule::constant(0.5),
            virtual_time: true,
            quiet: true,
            label: String::new(),
            pooled,
        };
        RoundLog::new(None, spec)
    }

    /// Worker 0 runs 4 rounds (losses 1..4, ending at 1..4 s), worker 1 two
    /// (losses 10, 20, ending at 2 and 4 s), in this order.
    fn feed(l: &RoundLog) {
        let p = |step, loss, end_s| StepPoint { step, loss, micro_batches: 1, end_s };
        for (w, point) in
            [(0, p(1, 1.0, 1.0)), (0, p(2, 2.0, 2.0)), (1, p(1, 10.0, 2.0)), (0, p(3, 3.0, 3.0)), (0, p(4, 4.0, 4.0))]
                .into_iter()
                .chain([(1, p(2, 20.0, 4.0)), (2, p(1, 0.0, 4.0))])
        {
            l.point(w, &point);
        }
    }

    #[test]
    fn lockstep_rounds_wait_for_every_worker_and_pooled_rounds_cover_the_run() {
        let lockstep = log(false);
        feed(&lockstep);
        let r = lockstep.finish().unwrap();
        // Round k of both workers: the curve stops at worker 1's last round.
        let got: Vec<_> = r.iter().map(|r| (r.step, r.loss, r.wall_s, r.tokens)).collect();
        assert_eq!(got, [(1, 5.5, 2.0, 20), (2, 11.0, 4.0, 40)]);
        // Pooled: each pair of worker rounds as they arrive, whoever ran them
        // (the server's point, participant 2, is not a worker round).
        let pooled = log(true);
        feed(&pooled);
        let r = pooled.finish().unwrap();
        let got: Vec<_> = r.iter().map(|r| (r.step, r.loss, r.wall_s, r.tokens)).collect();
        assert_eq!(got, [(1, 1.5, 2.0, 20), (2, 6.5, 3.0, 40), (3, 12.0, 4.0, 60)]);
    }
}
