//! The numbers every run reports, computed from spans alone.
//!
//! # Definitions
//! All times are measures of *sets*: a lane's spans are first merged into
//! disjoint intervals ([`Intervals`]), so overlapping spans on one lane are
//! counted once.
//!
//! - **Window** `[start_s, end_s]`: from the earliest span start to the latest
//!   span end over *all* workers and lanes; `wall_s = end_s - start_s`.
//! - **Compute time** of a worker: measure of its merged compute-lane spans.
//! - **Comm time** of a worker: measure of its merged comm-lane spans.
//! - **Idle time** of a worker: `wall_s - compute time`, i.e. the time in the
//!   window when its compute lane is not busy. This counts waiting on
//!   communication, waiting on slower workers, and a late start or early
//!   finish relative to the run's window. **Idle share** (overall) is total
//!   idle time over `world * wall_s`.
//! - **Overlap** of a worker: `|comm ∩ compute|`, the measure of the comm set
//!   intersected with the compute set; its **overlap ratio** is
//!   `|comm ∩ compute| / |comm|` (`None` with no comm time), the share of
//!   communication hidden behind compute. The overall **overlap ratio** is
//!   the comm-time-weighted mean of the workers' ratios, which equals
//!   `Σ_w |comm_w ∩ compute_w| / Σ_w |comm_w|`.
//! - **Micro-batches per round**: for each round in which a worker's
//!   compute-lane spans carry at least one micro-batch, the sum of their
//!   `micro_batches`; then mean/min/max over those rounds (ACCO's `N_i`).
//!   Rounds where the worker computed no micro-batch are not counted.
//! - **Bytes sent**: sum of `bytes` over comm-lane spans (compute-lane bytes
//!   are ignored). **Intra** / **inter**: of those, the spans whose transfer
//!   stayed inside a node / went between nodes (one member per node, or a
//!   message across nodes). A collective over several nodes with several
//!   members each splits its bytes as the hierarchical collective the link
//!   model times does (`Span::inter_bytes`, `runtime::collective_traffic`):
//!   inside each node over its members, between nodes a member's share.
//! - **Tokens/s**: the token count given by the caller over `wall_s`
//!   (`None` when `wall_s` is 0); real or virtual, as the clock was.

use super::events::{Lane, Span};
use super::intervals::Intervals;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Micro-batches per round on one worker (only rounds with at least one).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MicroBatchStats {
    /// Rounds counted.
    pub rounds: u64,
    /// Micro-batches over all counted rounds.
    pub total: u64,
    /// `total / rounds`.
    pub mean: f64,
    /// Fewest micro-batches in one round.
    pub min: u64,
    /// Most micro-batches in one round.
    pub max: u64,
}

/// One worker's measurements; see the module docs for definitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerSummary {
    /// The worker's rank.
    pub worker: usize,
    /// Seconds the compute lane was busy.
    pub compute_s: f64,
    /// Seconds the comm lane was busy.
    pub comm_s: f64,
    /// Seconds of the run's window with the compute lane not busy.
    pub idle_s: f64,
    /// Seconds when both lanes were busy.
    pub overlap_s: f64,
    /// `overlap_s / comm_s`; `None` when `comm_s` is 0.
    pub overlap_ratio: Option<f64>,
    /// Bytes sent (comm-lane spans).
    pub bytes_sent: u64,
    /// Of those, bytes that stayed inside a node.
    #[serde(default)]
    pub bytes_intra: u64,
    /// Bytes that crossed between nodes (one member per node).
    #[serde(default)]
    pub bytes_inter: u64,
    /// Micro-batches per round; `None` when no span carried one.
    pub micro_batches: Option<MicroBatchStats>,
}

/// The whole run's measurements; see the module docs for definitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of workers (ranks `0..world`).
    pub world: usize,
    /// Earliest span start (0 with no spans).
    pub start_s: f64,
    /// Latest span end (0 with no spans).
    pub end_s: f64,
    /// `end_s - start_s`.
    pub wall_s: f64,
    /// Tokens processed, as given by the caller.
    pub tokens: u64,
    /// `tokens / wall_s`; `None` when `wall_s` is 0.
    pub tokens_per_s: Option<f64>,
    /// Share of communication hidden behind compute, over all workers;
    /// `None` when no worker communicated.
    pub overlap_ratio: Option<f64>,
    /// Total idle time over `world * wall_s`; `None` when that is 0.
    pub idle_share: Option<f64>,
    /// Bytes sent by all workers.
    pub bytes_sent: u64,
    /// Of those, bytes that stayed inside a node (the rest crossed nodes,
    /// alone or in a hierarchical collective).
    #[serde(default)]
    pub bytes_intra: u64,
    /// Bytes of transfers between nodes only (one member per node).
    #[serde(default)]
    pub bytes_inter: u64,
    /// Per-worker measurements, by rank.
    pub workers: Vec<WorkerSummary>,
}

/// Computes the [`Summary`] of `spans` (any order) for ranks `0..world`;
/// `tokens` is the number of tokens the run processed.
///
/// A rank with no spans is reported with zero busy time (idle for the whole
/// window). Fails when a span names a rank `>= world` or is malformed.
pub fn summarize(spans: &[Span], world: usize, tokens: u64) -> Result<Summary> {
    for s in spans {
        if s.worker >= world {
            bail!("span {:?} names worker {} but the run has {world} workers", s.name, s.worker);
        }
        if let Some(p) = s.problem() {
            bail!("{p}");
        }
    }
    let start_s = spans.iter().map(|s| s.start_s).reduce(f64::min).unwrap_or(0.0);
    let end_s = spans.iter().map(|s| s.end_s).reduce(f64::max).unwrap_or(0.0);
    let wall_s = end_s - start_s;

    let workers: Vec<WorkerSummary> = (0..world).map(|w| summarize_worker(spans, w, wall_s)).collect();
    Ok(totals((start_s, end_s), tokens, workers))
}

/// The run's totals over `workers`, in the window `(start_s, end_s)`.
fn totals((start_s, end_s): (f64, f64), tokens: u64, workers: Vec<WorkerSummary>) -> Summary {
    let wall_s = end_s - start_s;
    let comm_total: f64 = workers.iter().map(|w| w.comm_s).sum();
    let overlap_total: f64 = workers.iter().map(|w| w.overlap_s).sum();
    let idle_total: f64 = workers.iter().map(|w| w.idle_s).sum();
    let capacity = workers.len() as f64 * wall_s;
    Summary {
        world: workers.len(),
        start_s,
        end_s,
        wall_s,
        tokens,
        tokens_per_s: (wall_s > 0.0).then(|| tokens as f64 / wall_s),
        overlap_ratio: (comm_total > 0.0).then(|| overlap_total / comm_total),
        idle_share: (capacity > 0.0).then(|| idle_total / capacity),
        bytes_sent: workers.iter().map(|w| w.bytes_sent).sum(),
        bytes_intra: workers.iter().map(|w| w.bytes_intra).sum(),
        bytes_inter: workers.iter().map(|w| w.bytes_inter).sum(),
        workers,
    }
}

impl Summary {
    /// The run's measurements over ranks `0..workers` only, and the rest
    /// (a parameter server after the workers), so that totals and shares
    /// "per worker" are over workers: a server's bytes and idle time are
    /// reported apart. The window stays the whole run's.
    pub fn split_workers(&self, workers: usize) -> (Summary, Vec<WorkerSummary>) {
        let (mine, rest) = self.workers.split_at(workers.min(self.workers.len()));
        (totals((self.start_s, self.end_s), self.tokens, mine.to_vec()), rest.to_vec())
    }
}

/// One worker's measurements within a window of length `wall_s`.
fn summarize_worker(spans: &[Span], worker: usize, wall_s: f64) -> WorkerSummary {
    let mine = || spans.iter().filter(move |s| s.worker == worker);
    let lane_set =
        |lane: Lane| Intervals::from_unsorted(mine().filter(|s| s.lane == lane).map(|s| (s.start_s, s.end_s)));
    let compute = lane_set(Lane::Compute);
    let comm = lane_set(Lane::Comm);
    let (compute_s, comm_s) = (compute.total(), comm.total());
    let overlap_s = comm.intersection_len(&compute);
    let (bytes_intra, bytes_inter) = Span::tier_totals(mine());

    let mut per_round: BTreeMap<u64, u64> = BTreeMap::new();
    for s in mine().filter(|s| s.lane == Lane::Compute && s.micro_batches > 0) {
        *per_round.entry(s.round).or_default() += u64::from(s.micro_batches);
    }

    WorkerSummary {
        worker,
        compute_s,
        comm_s,
        // Rounding can push the difference a hair below zero when the
        // compute lane fills the whole window.
        idle_s: (wall_s - compute_s).max(0.0),
        overlap_s,
        overlap_ratio: (comm_s > 0.0).then(|| overlap_s / comm_s),
        bytes_sent: mine().filter(|s| s.lane == Lane::Comm).map(|s| s.bytes).sum(),
        bytes_intra,
        bytes_inter,
        micro_batches: micro_batch_stats(per_round.values().copied()),
    }
}

/// Mean/min/max of per-round counts; `None` for no rounds.
fn micro_batch_stats(counts: impl Iterator<Item = u64>) -> Option<MicroBatchStats> {
    let counts: Vec<u64> = counts.collect();
    let (min, max) = (*counts.iter().min()?, *counts.iter().max()?);
    let total: u64 = counts.iter().sum();
    let rounds = counts.len() as u64;
    Some(MicroBatchStats { rounds, total, mean: total as f64 / rounds as f64, min, max })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    /// Worker 0 computes [0,2] and [3,5] and communicates [1,4].
    fn one_worker() -> Vec<Span> {
        vec![
            Span::compute(0, "micro-batch", 0.0, 2.0).with_micro_batches(1),
            Span::comm(0, "all_reduce", 1.0, 4.0).with_bytes(1000),
            Span::compute(0, "micro-batch", 3.0, 5.0).with_micro_batches(1).with_round(1),
        ]
    }

    #[test]
    fn overlap_and_idle_of_hand_checked_worker() {
        let s = summarize(&one_worker(), 1, 500).unwrap();
        let w = &s.workers[0];
        assert_eq!((s.start_s, s.end_s, s.wall_s), (0.0, 5.0, 5.0));
        assert_eq!((w.compute_s, w.comm_s, w.overlap_s, w.idle_s), (4.0, 3.0, 2.0, 1.0));
        assert!(close(w.overlap_ratio.unwrap(), 2.0 / 3.0));
        assert!(close(s.overlap_ratio.unwrap(), 2.0 / 3.0));
        assert!(close(s.idle_share.unwrap(), 0.2));
        assert_eq!(s.tokens_per_s, Some(100.0));
        assert_eq!(s.bytes_sent, 1000);
    }

    #[test]
    fn overlapping_spans_on_one_lane_count_once() {
        let mut spans = one_worker();
        spans.push(Span::compute(0, "optimizer", 0.5, 1.5));
        let w = &summarize(&spans, 1, 0).unwrap().workers[0];
        assert_eq!((w.compute_s, w.overlap_s), (4.0, 2.0));
    }

    #[test]
    fn overall_overlap_is_weighted_by_comm_time() {
        // Worker 1: comm [0,1] fully hidden behind compute [0,4]; comm [4,5] exposed.
        let mut spans = one_worker();
        spans.push(Span::compute(1, "micro-batch", 0.0, 4.0).with_micro_batches(3));
        spans.push(Span::comm(1, "all_reduce", 0.0, 1.0).with_bytes(10));
        spans.push(Span::comm(1, "all_reduce", 4.0, 5.0).with_bytes(20));
        let s = summarize(&spans, 2, 0).unwrap();
        let w1 = &s.workers[1];
        assert_eq!((w1.comm_s, w1.overlap_s, w1.idle_s), (2.0, 1.0, 1.0));
        assert_eq!(w1.overlap_ratio, Some(0.5));
        // (2 + 1) hidden out of (3 + 2) communicated, not the plain mean (2/3 + 1/2) / 2.
        assert!(close(s.overlap_ratio.unwrap(), 3.0 / 5.0));
        assert_eq!(s.bytes_sent, 1030);
        assert!(close(s.idle_share.unwrap(), 2.0 / 10.0));
    }

    #[test]
    fn bytes_of_a_collective_over_both_tiers_split_as_recorded() {
        use crate::metrics::{LinkTier, Traffic};
        let spans = vec![
            Span::comm(0, "send", 0.0, 1.0).with_traffic(Traffic::on(LinkTier::Intra, 100)),
            Span::comm(0, "send", 1.0, 2.0).with_traffic(Traffic::on(LinkTier::Inter, 10)),
            Span::comm(0, "all_reduce", 2.0, 3.0).with_traffic(Traffic {
                bytes: 6000,
                tier: LinkTier::Both,
                inter: 2000,
            }),
            // No tier recorded (an old log): in the total only.
            Span::comm(0, "all_reduce", 3.0, 4.0).with_bytes(1),
        ];
        let w = &summarize(&spans, 1, 0).unwrap().workers[0];
        assert_eq!((w.bytes_sent, w.bytes_intra, w.bytes_inter), (6111, 4100, 2010));
    }

    #[test]
    fn micro_batches_summed_per_round() {
        let spans = vec![
            Span::compute(0, "micro-batch", 0.0, 1.0).with_micro_batches(2).with_round(0),
            Span::compute(0, "micro-batch", 1.0, 2.0).with_micro_batches(1).with_round(0),
            Span::compute(0, "micro-batch", 2.0, 3.0).with_micro_batches(5).with_round(1),
            // No micro-batch: round 2 is not counted.
            Span::compute(0, "optimizer", 3.0, 4.0).with_round(2),
            // Comm-lane counts are ignored.
            Span::comm(0, "all_reduce", 0.0, 1.0).with_micro_batches(9).with_round(0),
        ];
        let mb = summarize(&spans, 1, 0).unwrap().workers[0].micro_batches.clone().unwrap();
        assert_eq!(mb, MicroBatchStats { rounds: 2, total: 8, mean: 4.0, min: 3, max: 5 });
    }

    #[test]
    fn silent_worker_is_idle_for_whole_window() {
        let s = summarize(&one_worker(), 2, 0).unwrap();
        let w1 = &s.workers[1];
        assert_eq!((w1.compute_s, w1.comm_s, w1.idle_s), (0.0, 0.0, 5.0));
        assert_eq!((w1.overlap_ratio, w1.micro_batches.clone()), (None, None));
        assert!(close(s.idle_share.unwrap(), 6.0 / 10.0));
    }

    #[test]
    fn a_server_after_the_workers_is_split_off_the_totals() {
        // Worker 0 as above (idle 1 of 5 s, 1000 bytes); rank 1, a server,
        // computes [0, 1] and sends 500 bytes: idle 4 of 5 s.
        let mut spans = one_worker();
        spans.push(Span::compute(1, "outer step", 0.0, 1.0));
        spans.push(Span::comm(1, "send", 1.0, 2.0).with_bytes(500));
        let all = summarize(&spans, 2, 500).unwrap();
        assert!(close(all.idle_share.unwrap(), 5.0 / 10.0));
        let (workers, server) = all.split_workers(1);
        assert_eq!((workers.world, workers.bytes_sent, workers.workers.len()), (1, 1000, 1));
        assert!(close(workers.idle_share.unwrap(), 1.0 / 5.0), "over the workers only");
        assert_eq!((workers.wall_s, workers.tokens_per_s), (5.0, Some(100.0)), "the run's window");
        assert_eq!((server.len(), server[0].bytes_sent, server[0].idle_s), (1, 500, 4.0));
        // No server: the same totals.
        assert_eq!(all.split_workers(2).0, all);
    }

    #[test]
    fn empty_run_has_no_ratios() {
        let s = summarize(&[], 2, 100).unwrap();
        assert_eq!((s.wall_s, s.tokens_per_s, s.overlap_ratio, s.idle_share), (0.0, None, None, None));
        assert_eq!(s.workers.len(), 2);
    }

    #[test]
    fn worker_outside_world_is_an_error() {
        let err = summarize(&one_worker(), 0, 0).unwrap_err().to_string();
        assert!(err.contains("worker 0") && err.contains("0 workers"), "{err}");
    }
}
