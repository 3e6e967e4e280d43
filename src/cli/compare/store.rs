//! One method's result in a `lowcomm compare` sweep, kept as
//! `runs/DIR/result.json` (written atomically once the run has finished),
//! so a sweep run again reuses what is complete and reruns what is not.
//! A run that ended with [`Diverged`] is complete too: its result keeps how
//! it ended and its curve up to there (from `RUN/metrics.jsonl`). A
//! result.json written before `ended` existed loads as a finished run.

use crate::metrics::{Lane, Span, Summary};
use crate::strategy::{Diverged, MemoryBytes};
use crate::train::parallel::ParallelSummary;
use anyhow::{Context, Result};
use serde::{Deserialize, Deserializer, Serialize};
use std::path::Path;

/// The file a finished method leaves in its run directory.
pub const RESULT_FILE: &str = "result.json";

/// One round of a method's curve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Round {
    /// Rounds completed, this one included.
    pub step: u64,
    /// Tokens applied so far, all workers.
    pub tokens: u64,
    /// When the round's last worker ended it (virtual under `sim`).
    pub wall_s: f64,
    /// Mean training loss over the workers.
    #[serde(deserialize_with = "f32_or_nan")]
    pub loss: f32,
    /// Bytes sent per worker by the time the round ended (NaN: not known,
    /// a run that diverged wrote no events).
    #[serde(deserialize_with = "f64_or_nan")]
    pub bytes: f64,
}

/// How a method's run ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "end", rename_all = "lowercase")]
pub enum Ended {
    /// It ran its budget and evaluated its model.
    #[default]
    Finished,
    /// It stopped with [`Diverged`]: no events, no evaluation.
    Diverged {
        /// The participant that saw it.
        participant: usize,
        /// Its round (or inner step, or update) then.
        step: u64,
        /// What was not finite.
        what: String,
    },
}

/// JSON has no NaN: serde_json writes a non-finite number as `null`; read
/// it back as NaN.
fn f32_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
    Ok(Option::<f32>::deserialize(d)?.unwrap_or(f32::NAN))
}

fn f64_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// What the comparison needs of one finished method.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MethodResult {
    /// The `--methods` entry (`co2:tau=4`).
    pub spec: String,
    /// The method with its settings, as the run printed it.
    pub label: String,
    /// The run's whole configuration (TOML): a result made under another
    /// one is not reused.
    pub config: String,
    /// Data-parallel workers.
    pub world: usize,
    /// The curve.
    pub rounds: Vec<Round>,
    /// Validation loss of the run's own model (the one its checkpoint
    /// holds: the replica, the gathered shards, the last average, or
    /// async DiLoCo's server's); NaN for a run that diverged.
    #[serde(deserialize_with = "f32_or_nan")]
    pub val_loss: f32,
    /// Times, overlap, idle share and bytes (metrics::summary).
    pub summary: Summary,
    /// Worker 0's model states by category.
    pub memory: MemoryBytes,
    /// A compressing method's exchange: payload bytes and compression.
    pub exchange: Option<(usize, f64)>,
    /// The most bytes a worker sent in one transfer: the peak a link must
    /// carry at once (Streaming DiLoCo's point: one fragment, not the
    /// model). Absent in results written before it: read back from the
    /// run's events.jsonl by [`MethodResult::load`].
    #[serde(default)]
    pub largest_transfer: Option<u64>,
    /// Wall-clock seconds the run took here (for the sweep's ETA).
    pub run_s: f64,
    /// Under a fault plan: who was up when and the updates the server
    /// applied per worker (the summary's notes show it).
    #[serde(default)]
    pub membership: Option<String>,
    /// How the run ended (absent in results written before: finished).
    #[serde(default)]
    pub ended: Ended,
}

impl MethodResult {
    /// From a finished run of `spec` under `config` that took `run_s` seconds.
    pub fn from_run(spec: &str, config: String, s: &ParallelSummary, run_s: f64) -> MethodResult {
        let mut sent: Vec<(f64, u64)> = s
            .reports
            .iter()
            .flat_map(|r| r.events.spans())
            .filter(|sp| sp.lane == Lane::Comm && sp.bytes > 0)
            .map(|sp| (sp.end_s, sp.bytes))
            .collect();
        sent.sort_by(|a, b| a.0.total_cmp(&b.0));
        let ends: Vec<f64> = s.rounds.iter().map(|r| r.wall_s).collect();
        let bytes = bytes_by(&sent, &ends, s.world);
        MethodResult {
            membership: membership(s),
            spec: spec.to_string(),
            label: s.method.to_string(),
            config,
            world: s.world,
            rounds: s
                .rounds
                .iter()
                .zip(bytes)
                .map(|(r, bytes)| Round { step: r.step, tokens: r.tokens, wall_s: r.wall_s, loss: r.loss, bytes })
                .collect(),
            val_loss: s.val_loss,
            summary: s.summary.clone(),
            memory: s.reports.first().map(|r| r.memory).unwrap_or_default(),
            exchange: s.reports.first().and_then(|r| r.exchange).map(|b| (b.payload_bytes, b.compression())),
            largest_transfer: largest_transfer(s.reports.iter().flat_map(|r| r.events.spans()), s.world),
            run_s,
            ended: Ended::Finished,
        }
    }

    /// From a run of `spec` (labelled `label`, `world` workers) in `dir`
    /// that stopped with `d` after `run_s` seconds: its curve up to there is
    /// the run's rounds in `dir/metrics.jsonl`; there are no events (bytes,
    /// times, memory) and no evaluation.
    pub fn from_diverged(
        spec: &str,
        label: String,
        config: String,
        world: usize,
        dir: &Path,
        d: &Diverged,
        run_s: f64,
    ) -> Result<MethodResult> {
        Ok(MethodResult {
            spec: spec.to_string(),
            label,
            config,
            world,
            rounds: logged_rounds(dir),
            val_loss: f32::NAN,
            summary: crate::metrics::summarize(&[], world, 0)?,
            memory: MemoryBytes::default(),
            exchange: None,
            largest_transfer: None,
            run_s,
            membership: None,
            ended: Ended::Diverged { participant: d.participant, step: d.step, what: d.what.clone() },
        })
    }

    /// Whether the run ran to its end (else it diverged).
    pub fn finished(&self) -> bool {
        self.ended == Ended::Finished
    }

    /// The result in `dir` if it is complete and was made under `config`
    /// (wherever its run directory was then: a moved results folder is reused).
    pub fn load(dir: &Path, config: &str) -> Option<MethodResult> {
        let text = std::fs::read_to_string(dir.join(RESULT_FILE)).ok()?;
        let mut r: MethodResult = serde_json::from_str(&text).ok()?;
        if !same_run(&r.config, config) {
            return None;
        }
        // Written before the field: read the events once more (only for a result that is reused).
        if r.largest_transfer.is_none() && r.finished() {
            let events = crate::metrics::read_jsonl(&dir.join("events.jsonl")).ok();
            r.largest_transfer = events.and_then(|e| largest_transfer(e.spans.iter(), r.world));
        }
        Some(r)
    }

    /// Writes `dir/result.json` atomically: it exists only once complete.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let text = serde_json::to_string(self)?;
        let path = dir.join(RESULT_FILE);
        crate::util::atomic_write(&path, text.as_bytes()).with_context(|| format!("cannot write {}", path.display()))
    }
}

/// Whether two run configurations (TOML) describe the same run: equal but
/// for where it wrote its files (`train.out_dir`, `parallel.trace`).
fn same_run(a: &str, b: &str) -> bool {
    let without_paths = |text: &str| {
        let mut t: toml::Table = text.parse().ok()?;
        for (section, key) in [("train", "out_dir"), ("parallel", "trace")] {
            if let Some(s) = t.get_mut(section).and_then(|v| v.as_table_mut()) {
                s.remove(key);
                if s.is_empty() {
                    t.remove(section);
                }
            }
        }
        Some(t)
    };
    a == b || matches!((without_paths(a), without_paths(b)), (Some(x), Some(y)) if x == y)
}

/// The most bytes one of ranks `0..world` (the workers, not a parameter
/// server) sent in one transfer; `None` when none sent any.
fn largest_transfer<'a>(spans: impl Iterator<Item = &'a Span>, world: usize) -> Option<u64> {
    spans.filter(|sp| sp.lane == Lane::Comm && sp.worker < world).map(|sp| sp.bytes).max().filter(|&b| b > 0)
}

/// The run's rounds (`kind: "train"` lines) in `dir/metrics.jsonl`, bytes
/// unknown; none if it cannot be read.
fn logged_rounds(dir: &Path) -> Vec<Round> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["kind"] == "train")
        .filter_map(|v| {
            Some(Round {
                step: v["step"].as_u64()?,
                tokens: v["tokens"].as_u64()?,
                wall_s: v["wall_s"].as_f64()?,
                loss: v["loss"].as_f64().map_or(f32::NAN, |l| l as f32),
                bytes: f64::NAN,
            })
        })
        .collect()
}

/// Bytes per worker sent by each time in `ends` (ascending): the sum of the
/// transfers `(end_s, bytes)` (sorted by end) ended by then, over `world`.
fn bytes_by(sent: &[(f64, u64)], ends: &[f64], world: usize) -> Vec<f64> {
    let mut i = 0;
    let mut total = 0u64;
    ends.iter()
        .map(|&t| {
            while i < sent.len() && sent[i].0 <= t {
                total += sent[i].1;
                i += 1;
            }
            total as f64 / world.max(1) as f64
        })
        .collect()
}

/// Who was up when and the updates applied per worker, for a run whose
/// workers crashed or joined (`None` for every other run).
fn membership(s: &ParallelSummary) -> Option<String> {
    let faults: Vec<_> = s.reports.iter().flat_map(|r| r.faults.clone()).collect();
    let server = s.reports.get(s.world).filter(|_| !faults.is_empty())?;
    let applied: Vec<String> = server.updates.iter().map(u64::to_string).collect();
    Some(format!(
        "{} (updates applied per worker: {})",
        crate::strategy::diloco::membership::describe_intervals(&faults, s.world, s.summary.wall_s),
        applied.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_by_a_round_are_the_transfers_ended_by_then_per_worker() {
        // Two workers; transfers of 100 B at 1 s, 300 B at 2 s, 50 B at 5 s.
        let sent = [(1.0, 100), (2.0, 300), (5.0, 50)];
        // By 0.5 s nothing; by 2 s 400 B / 2; by 4 s still 200; by 5 s 450 / 2.
        assert_eq!(bytes_by(&sent, &[0.5, 2.0, 4.0, 5.0], 2), [0.0, 200.0, 200.0, 225.0]);
        assert_eq!(bytes_by(&[], &[1.0], 0), [0.0]);
    }

    #[test]
    fn a_result_is_reused_only_when_complete_and_made_under_the_same_config() {
        let dir = tempfile::tempdir().unwrap();
        let json = |r: Option<MethodResult>| r.map(|r| serde_json::to_string(&r).unwrap());
        assert_eq!(json(MethodResult::load(dir.path(), "x")), None, "no file: not done");
        let r = MethodResult {
            spec: "co2".into(),
            label: "co2 (tau 12)".into(),
            config: "[train]\nsteps = 4\n".into(),
            world: 2,
            rounds: vec![Round { step: 1, tokens: 64, wall_s: 0.5, loss: 3.0, bytes: 10.0 }],
            val_loss: 2.9,
            summary: crate::metrics::summarize(&[], 2, 0).unwrap(),
            memory: MemoryBytes::default(),
            exchange: None,
            largest_transfer: Some(300),
            run_s: 1.0,
            membership: None,
            ended: Ended::Finished,
        };
        r.save(dir.path()).unwrap();
        assert_eq!(json(MethodResult::load(dir.path(), &r.config)), json(Some(r.clone())));
        assert_eq!(json(MethodResult::load(dir.path(), "[train]\nsteps = 8\n")), None, "other settings: rerun");
        let moved = "[train]\nsteps = 4\nout_dir = \"elsewhere/runs/co2\"\n[parallel]\ntrace = \"elsewhere/runs/co2/trace.json\"\n";
        assert_eq!(json(MethodResult::load(dir.path(), moved)), json(Some(r.clone())), "another folder: reused");
        std::fs::write(dir.path().join(RESULT_FILE), "{\"spec\": \"co2\"").unwrap();
        assert_eq!(json(MethodResult::load(dir.path(), &r.config)), None, "a torn file: rerun");
    }

    #[test]
    fn a_result_from_before_the_largest_transfer_reads_it_from_its_events() {
        let dir = tempfile::tempdir().unwrap();
        let span = |worker, lane, bytes| Span {
            worker,
            lane,
            name: "x".into(),
            start_s: 0.0,
            end_s: 1.0,
            bytes,
            micro_batches: 0,
            round: 0,
            tier: None,
            inter_bytes: 0,
        };
        // Worker 1 sends 700 B once; compute spans and rank 2 (a server) do not count.
        let spans = [
            span(0, Lane::Comm, 300),
            span(1, Lane::Comm, 700),
            span(1, Lane::Compute, 900),
            span(2, Lane::Comm, 5000),
        ];
        crate::metrics::write_jsonl(&dir.path().join("events.jsonl"), &spans, None).unwrap();
        let mut r = super::super::marks::tests::result("diloco", &[3.0], 2.9);
        r.save(dir.path()).unwrap();
        assert_eq!(MethodResult::load(dir.path(), "").unwrap().largest_transfer, Some(700));
        r.largest_transfer = Some(1);
        r.save(dir.path()).unwrap();
        assert_eq!(MethodResult::load(dir.path(), "").unwrap().largest_transfer, Some(1), "kept when known");
    }

    #[test]
    fn an_older_result_loads_as_finished_and_a_diverged_one_keeps_its_curve_and_nan() {
        let dir = tempfile::tempdir().unwrap();
        // The run's rounds up to the divergence, as a run logs them (a worker line is not a round).
        let log = [
            r#"{"kind":"worker","worker":0,"step":1,"loss":7.6,"micro_batches":1,"end_s":0.5}"#,
            r#"{"kind":"train","step":1,"tokens":64,"loss":7.5,"lr":0.001,"wall_s":0.5}"#,
            r#"{"kind":"train","step":2,"tokens":128,"loss":9.25,"lr":0.001,"wall_s":1.0}"#,
        ];
        std::fs::write(dir.path().join("metrics.jsonl"), log.join("\n")).unwrap();
        let d = Diverged { participant: 1, step: 3, what: "training loss NaN".into() };
        let r = MethodResult::from_diverged("ddp", "ddp".into(), "c".into(), 2, dir.path(), &d, 0.1).unwrap();
        assert_eq!(
            r.rounds.iter().map(|x| (x.step, x.tokens, x.loss)).collect::<Vec<_>>(),
            [(1, 64, 7.5), (2, 128, 9.25)]
        );
        assert!(!r.finished() && r.val_loss.is_nan() && r.rounds[0].bytes.is_nan());
        // NaN is written as null and read back as NaN; the way it ended is kept.
        r.save(dir.path()).unwrap();
        let back = MethodResult::load(dir.path(), "c").expect("a diverged result reloads");
        assert!(back.val_loss.is_nan() && back.rounds[1].bytes.is_nan());
        assert_eq!(back.ended, Ended::Diverged { participant: 1, step: 3, what: "training loss NaN".into() });
        // A result.json from before `ended` existed: no such key, a finished run.
        let mut old: serde_json::Value = serde_json::to_value(&back).unwrap();
        old.as_object_mut().unwrap().remove("ended");
        std::fs::write(dir.path().join(RESULT_FILE), old.to_string()).unwrap();
        assert!(MethodResult::load(dir.path(), "c").unwrap().finished());
    }
}
