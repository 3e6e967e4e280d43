//! What a data-parallel run reports while it runs: every participant's
//! rounds into `metrics.jsonl` (`kind: "worker"`), the run's rounds once
//! every worker has finished them (`kind: "train"`: mean loss, tokens
//! applied so far, when the last worker ended the round), crashes and joins
//! under a fault plan (`kind: "fault"`), and a progress
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

use super::checkpoint::Resumed;
use crate::optim::LrSchedule;
use crate::strategy::{Observer, StepPoint};
use crate::train::metrics::MetricsLog;
use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::io::IsTerminal;
use std::path::Path;
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
    lr_by_tokens: Option<u64>,
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
    /// When the last plain line was printed (none yet: the first round prints one).
    last_line: Option<Instant>,
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
    /// Under a token budget (dpu, acco-wp, acco: acco/budget.rs), the tokens
    /// of one synchronous step: the schedule then follows the tokens applied
    /// before each round, not the round's number, and so does the logged lr.
    pub lr_by_tokens: Option<u64>,
    /// Times are virtual (sim): say so.
    pub virtual_time: bool,
    /// No progress output.
    pub quiet: bool,
    /// Shown before the bar (the method, or "compare 2/5: acco").
    pub label: String,
    /// Workers run unequal numbers of rounds (a parameter server): pool the
    /// run's curve (module docs).
    pub pooled: bool,
    /// A resumed pooled run's worker rounds logged before its checkpoint
    /// but in no `train` line yet (fewer than `workers`).
    pub pool: Vec<StepPoint>,
}

/// Where a resumed run's log continues ([`resume_log`]).
pub struct LogResume {
    /// The log, trimmed to the lines written before the checkpoint.
    pub log: MetricsLog,
    /// The run's rounds (`train` lines) those lines hold.
    pub first: u64,
    /// Tokens applied by the worker rounds in those `train` lines.
    pub tokens: u64,
    /// Worker rounds logged after the last of them ([`RoundLogSpec::pool`]).
    pub pool: Vec<StepPoint>,
}

/// Reopens `dir/metrics.jsonl` for a run resumed from `r`, keeping each
/// line written before the checkpoint and no other. Participants number
/// their lines in their own steps (`SavedPart::last_step`): a synchronous
/// run's workers by rounds, async DiLoCo's by their own inner steps and the
/// server by updates applied, so each participant's lines are kept up to
/// its own step at the checkpoint, and a pooled run's `train` lines up to
/// the groups its workers' kept rounds fill, the rest of them going back
/// into the pool. Checkpoints from before `last_steps` was saved keep every
/// line up to the checkpoint's round.
pub fn resume_log(
    dir: &Path,
    r: &Position,
    workers: usize,
    pooled: bool,
    tokens_per_micro_batch: u64,
) -> Result<LogResume> {
    let steps = r.last_steps;
    let first = logged_rounds(r, workers, pooled);
    let keep = |l: &serde_json::Value| {
        let Some(step) = l["step"].as_u64() else { return false };
        let own = l["worker"].as_u64().and_then(|p| steps.get(p as usize));
        match (l["kind"].as_str(), own) {
            (Some("worker" | "server" | "fault"), Some(&last)) => step <= last,
            (Some("train"), _) => step <= first,
            _ => step <= r.round,
        }
    };
    let (log, kept) = MetricsLog::open_keeping(dir, keep)?;
    let pool: Vec<StepPoint> = if pooled {
        let rounds = kept.iter().filter(|l| l["kind"] == "worker" && l["worker"].as_u64() < Some(workers as u64));
        rounds.skip(first as usize * workers).filter_map(|l| serde_json::from_value(l.clone()).ok()).collect()
    } else {
        Vec::new()
    };
    let pooled_mb: u64 = pool.iter().map(|p| p.micro_batches).sum();
    let tokens = r.tokens_seen.saturating_sub(pooled_mb * tokens_per_micro_batch);
    Ok(LogResume { log, first, tokens, pool })
}

/// How far a checkpoint's run had got (from [`Resumed`]).
pub struct Position<'a> {
    /// Rounds completed.
    pub round: u64,
    /// Tokens applied.
    pub tokens_seen: u64,
    /// Each participant's last step (`ParallelCheckpoint::last_steps`).
    pub last_steps: &'a [u64],
}

impl<'a> From<&'a Resumed> for Position<'a> {
    fn from(r: &'a Resumed) -> Self {
        Position { round: r.round, tokens_seen: r.tokens_seen, last_steps: &r.shape.last_steps }
    }
}

/// The run's rounds logged before the checkpoint `r`: its round, or for a
/// pooled curve the groups of `workers` rounds its workers had ended.
pub fn logged_rounds(r: &Position, workers: usize, pooled: bool) -> u64 {
    match r.last_steps.get(..workers) {
        Some(w) if pooled => w.iter().sum::<u64>() / workers as u64,
        _ => r.round,
    }
}

/// Longest silence between plain progress lines, in wall seconds.
const LINE_EVERY_S: f64 = 10.0;

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
                pool: spec.pooled.then_some(spec.pool),
                next: spec.first + 1,
                tokens: spec.tokens,
                tokens_per_micro_batch: spec.tokens_per_micro_batch,
                lr_by_tokens: spec.lr_by_tokens,
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
                last_line: None,
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
        let lr = self.schedule.lr(match self.lr_by_tokens {
            Some(per_step) => self.tokens / per_step.max(1),
            None => self.next - 1,
        });
        self.tokens += points.iter().map(|p| p.micro_batches).sum::<u64>() * self.tokens_per_micro_batch;
        let wall_s = points.iter().map(|p| p.end_s).fold(0.0, f64::max);
        let rec = RoundRecord { step: self.next, tokens: self.tokens, loss, lr, wall_s };
        self.write("train", &rec);
        self.show(&rec);
        self.rounds.push(rec);
        self.next += 1;
    }

    fn show(&mut self, r: &RoundRecord) {
        let elapsed = self.started.elapsed().as_secs_f64();
        let clock = if self.virtual_time {
            format!("virtual {:.1} s, wall {elapsed:.0} s", r.wall_s)
        } else {
            format!("{:.1} s", r.wall_s)
        };
        let rate = if r.wall_s > 0.0 { r.tokens as f64 / r.wall_s } else { 0.0 };
        let msg = format!("loss {:.4}  {} tokens  {clock}  {rate:.0} tok/s", r.loss, r.tokens);
        // async-diloco under a fault plan: a lost round's steps stay in the
        // curve, and its share of the budget is handed out again.
        let past = (r.step > self.total).then(|| format!("(past {}: lost rounds rerun)", self.total));
        match &self.bar {
            Some(b) => {
                b.set_position(r.step);
                b.set_message(match past {
                    Some(past) => format!("{past}  {msg}"),
                    None => msg,
                });
            }
            // Every `every` rounds, the last, the first this process ran, and
            // at least every LINE_EVERY_S: a slow simulated round still shows
            // progress within seconds.
            None if !self.quiet
                && (r.step.is_multiple_of(self.every)
                    || r.step >= self.total
                    || self.last_line.is_none_or(|t| t.elapsed().as_secs_f64() >= LINE_EVERY_S)) =>
            {
                self.last_line = Some(Instant::now());
                let eta = crate::train::metrics::eta_s(elapsed, r.step - self.first, self.total.saturating_sub(r.step));
                match past {
                    None => eprintln!("{} round {}/{}  {msg}  ETA {eta:.0} s", self.label, r.step, self.total),
                    Some(past) => eprintln!("{} round {} {past}  {msg}", self.label, r.step),
                }
            }
            None => {}
        }
    }
}

/// Gives `observer` rounds that reach it in batches, every participant's
/// at once (under MPI the other ranks' rounds travel in the checkpoint's
/// parts), in the order they ended. A pooled curve groups worker rounds in
/// the order they arrive (module docs), so fed participant by participant
/// its round 1 would be worker 0's first rounds and its times would run
/// backwards when worker 1's begin. Each participant's own rounds keep
/// their order (a stable sort; their ends do not decrease).
pub fn observe_in_time_order<'a>(observer: &dyn Observer, batch: impl IntoIterator<Item = (usize, &'a [StepPoint])>) {
    let mut all: Vec<(usize, &StepPoint)> =
        batch.into_iter().flat_map(|(p, points)| points.iter().map(move |pt| (p, pt))).collect();
    all.sort_by(|a, b| a.1.end_s.total_cmp(&b.1.end_s));
    all.into_iter().for_each(|(p, pt)| observer.point(p, pt));
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

    /// A crash or join: a `kind: "fault"` line (worker, event, plan time, when acted on, its step).
    fn fault(&self, record: &crate::strategy::faults::FaultRecord) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).write("fault", record);
    }
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
