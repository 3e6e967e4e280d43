//! What a run reports: one JSON object per line in `RUN/metrics.jsonl`,
//! and a progress bar (or plain lines when stderr is not a terminal).

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};

/// One optimizer step.
#[derive(Clone, Debug, Serialize)]
pub struct StepRecord {
    /// Steps completed, this one included.
    pub step: u64,
    /// Training tokens consumed so far.
    pub tokens: u64,
    /// Mean training loss over the step's micro-batches.
    pub loss: f32,
    /// Learning rate used.
    pub lr: f32,
    /// Global gradient norm before clipping.
    pub grad_norm: f32,
    /// Throughput of this step.
    pub tokens_per_s: f64,
    /// Seconds since the run started (resumed runs included).
    pub wall_s: f64,
}

/// One evaluation on the validation split.
#[derive(Clone, Debug, Serialize)]
pub struct EvalRecord {
    pub step: u64,
    pub tokens: u64,
    /// Mean cross-entropy (nats per token).
    pub val_loss: f32,
    /// exp(val_loss).
    pub val_ppl: f32,
    pub wall_s: f64,
}

/// Appends records to `metrics.jsonl`, one line each, flushed at once.
pub struct MetricsLog {
    file: File,
    path: PathBuf,
}

impl MetricsLog {
    /// Open `dir/metrics.jsonl`. On resume, lines from steps after
    /// `resume_step` (written by the interrupted run after its last
    /// checkpoint) are dropped first, so the log has each step once.
    pub fn open(dir: &Path, resume_step: Option<u64>) -> Result<Self> {
        match resume_step {
            Some(step) => Ok(Self::open_keeping(dir, |v| v["step"].as_u64().is_some_and(|s| s <= step))?.0),
            None => {
                // A fresh run starts a fresh log.
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create run directory {}", dir.display()))?;
                crate::util::atomic_write(&dir.join("metrics.jsonl"), b"")?;
                Self::append(dir.join("metrics.jsonl"))
            }
        }
    }

    /// Open `dir/metrics.jsonl` for a resumed run, keeping only the lines
    /// `keep` accepts (those written before the checkpoint; a line that is
    /// not JSON is dropped too). Also returns the kept lines, in order.
    pub fn open_keeping(
        dir: &Path,
        keep: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<(Self, Vec<serde_json::Value>)> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create run directory {}", dir.display()))?;
        let path = dir.join("metrics.jsonl");
        let mut kept = Vec::new();
        if path.exists() {
            let mut text = String::new();
            for line in BufReader::new(File::open(&path)?).lines().map_while(|l| l.ok()) {
                if let Some(v) = serde_json::from_str::<serde_json::Value>(&line).ok().filter(&keep) {
                    text.push_str(&line);
                    text.push('\n');
                    kept.push(v);
                }
            }
            crate::util::atomic_write(&path, text.as_bytes())?;
        }
        Ok((Self::append(path)?, kept))
    }

    /// Open `dir/metrics.jsonl` to append to it as it is (made if missing).
    pub fn append_to(dir: &Path) -> Result<Self> {
        Self::append(dir.join("metrics.jsonl"))
    }

    fn append(path: PathBuf) -> Result<Self> {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        Ok(Self { file, path })
    }

    /// Append one record as a JSON line tagged with its `kind`.
    pub fn write<T: Serialize>(&mut self, kind: &str, record: &T) -> Result<()> {
        let mut v = serde_json::to_value(record)?;
        v["kind"] = kind.into();
        writeln!(self.file, "{v}").with_context(|| format!("cannot write {}", self.path.display()))?;
        Ok(())
    }
}

/// Seconds left for `left` more units (steps, rounds) at the pace of the
/// `done` ones that took `elapsed` seconds (at least one counted, so the
/// first line says something).
pub fn eta_s(elapsed: f64, done: u64, left: u64) -> f64 {
    elapsed / done.max(1) as f64 * left as f64
}

/// Progress for humans: an indicatif bar on a terminal, plain lines otherwise.
pub struct Progress {
    bar: Option<ProgressBar>,
    quiet: bool,
    /// For the elapsed time and ETA of plain lines: when this process
    /// started stepping, from which step, towards which.
    started: std::time::Instant,
    first: u64,
    total: u64,
}

impl Progress {
    /// A bar over `total` steps, starting at `done`.
    pub fn new(total: u64, done: u64, quiet: bool) -> Self {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::new(total);
            b.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  ETA {eta}").expect("valid template"),
            );
            b.set_position(done);
            b
        });
        Self { bar, quiet, started: std::time::Instant::now(), first: done, total }
    }

    /// `elapsed 12.3 s  ETA 40 s` at `step`: this process's wall time so far,
    /// and the steps left at the pace of the steps this process ran.
    pub fn timing(&self, step: u64) -> String {
        let elapsed = self.started.elapsed().as_secs_f64();
        let eta = eta_s(elapsed, step.saturating_sub(self.first), self.total.saturating_sub(step));
        format!("{elapsed:.1} s  ETA {eta:.0} s")
    }

    /// Update after a step (the bar's message; no line).
    pub fn step(&self, r: &StepRecord) {
        if let Some(b) = &self.bar {
            b.set_position(r.step);
            b.set_message(format!("loss {:.4}  {:.0} tok/s", r.loss, r.tokens_per_s));
        }
    }

    /// Print a line above the bar (or to stderr).
    pub fn line(&self, text: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some(b) => b.println(text),
            None => eprintln!("{text}"),
        }
    }

    /// Remove the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::eta_s;

    #[test]
    fn eta_is_the_pace_so_far_times_what_is_left() {
        // 5 steps in 10 s: 2 s each, 20 left.
        assert_eq!(eta_s(10.0, 5, 20), 40.0);
        // Nothing done yet: the time so far counts as one step's.
        assert_eq!(eta_s(3.0, 0, 2), 6.0);
        assert_eq!(eta_s(3.0, 4, 0), 0.0);
    }
}
