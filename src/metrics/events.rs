//! Spans of work on a worker's compute or communication lane, and the
//! append-only log that collects them.
//!
//! A runtime gives each worker its own [`EventLog`]; the worker pushes spans
//! as work finishes, with no lock because nothing else touches that log. At
//! the end, [`EventLog::merge`] combines the per-worker logs in a
//! deterministic order.

use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// Which of a worker's two timelines a span occupies (the papers' compute
/// stream and communication stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    /// Forward/backward passes, optimizer steps: anything on the compute device.
    Compute,
    /// Collectives and transfers: anything waiting on the network.
    Comm,
}

impl Lane {
    /// Lower-case name, as used in JSON and trace track names.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Compute => "compute",
            Lane::Comm => "comm",
        }
    }
}

/// Which links a transfer crossed (comm-lane spans that moved bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkTier {
    /// Between workers of one node.
    Intra,
    /// Between nodes (one member per node, or a message across nodes).
    Inter,
    /// A collective over several nodes with several members each (both
    /// tiers; [`Span::inter_bytes`] says how its bytes split).
    Both,
}

impl LinkTier {
    /// The tier a collective over `members` of `g` crosses in `topo`.
    pub fn of(topo: &crate::runtime::Topology, g: &crate::runtime::Group, members: &[usize]) -> LinkTier {
        match topo.route(g, members) {
            crate::comm::link::Route::Node(_) => LinkTier::Intra,
            crate::comm::link::Route::Across { .. } => LinkTier::Inter,
            crate::comm::link::Route::World(_) => LinkTier::Both,
        }
    }
}

/// One piece of work on one lane of one worker, over `[start_s, end_s]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Span {
    /// Rank of the worker that did the work (0-based).
    pub worker: usize,
    /// The lane the work occupied.
    pub lane: Lane,
    /// What the work was, e.g. `"micro-batch"`, `"all_reduce"`, `"reduce_scatter"`.
    pub name: String,
    /// Start time in seconds (wall-clock or virtual; one clock per run).
    pub start_s: f64,
    /// End time in seconds, `>= start_s`.
    pub end_s: f64,
    /// Bytes this worker sent during the span (counted on the comm lane only).
    pub bytes: u64,
    /// Micro-batches processed during the span (counted on the compute lane only).
    pub micro_batches: u32,
    /// The training round (optimizer step) the span belongs to.
    pub round: u64,
    /// Which links the bytes crossed (comm lane only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<LinkTier>,
    /// Of `bytes`, those sent between nodes, for tier [`LinkTier::Both`]
    /// (the rest stayed inside a node); 0 for the other tiers, whose bytes
    /// are all of that tier.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub inter_bytes: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// What one transfer moved: the bytes a participant sent, the tier they
/// crossed, and of those the bytes between nodes (see [`Span::inter_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes sent.
    pub bytes: u64,
    /// The links crossed.
    pub tier: LinkTier,
    /// Of `bytes`, those between nodes (all of them for `Inter`, none for `Intra`).
    pub inter: u64,
}

impl Traffic {
    /// `bytes` all on `tier` (`Intra` or `Inter`: a message, a collective in one tier).
    pub fn on(tier: LinkTier, bytes: u64) -> Traffic {
        Traffic { bytes, tier, inter: if tier == LinkTier::Inter { bytes } else { 0 } }
    }
}

impl Span {
    /// A span with no bytes, no micro-batches, round 0; chain the `with_*`
    /// setters for the rest.
    pub fn new(worker: usize, lane: Lane, name: impl Into<String>, start_s: f64, end_s: f64) -> Span {
        Span {
            worker,
            lane,
            name: name.into(),
            start_s,
            end_s,
            bytes: 0,
            micro_batches: 0,
            round: 0,
            tier: None,
            inter_bytes: 0,
        }
    }

    /// A compute-lane span; see [`Span::new`].
    pub fn compute(worker: usize, name: impl Into<String>, start_s: f64, end_s: f64) -> Span {
        Span::new(worker, Lane::Compute, name, start_s, end_s)
    }

    /// A comm-lane span; see [`Span::new`].
    pub fn comm(worker: usize, name: impl Into<String>, start_s: f64, end_s: f64) -> Span {
        Span::new(worker, Lane::Comm, name, start_s, end_s)
    }

    /// Sets the bytes sent.
    pub fn with_bytes(mut self, bytes: u64) -> Span {
        self.bytes = bytes;
        self
    }

    /// Sets the micro-batch count.
    pub fn with_micro_batches(mut self, micro_batches: u32) -> Span {
        self.micro_batches = micro_batches;
        self
    }

    /// Sets the bytes, the tier and the bytes between nodes of a transfer.
    pub fn with_traffic(mut self, t: Traffic) -> Span {
        self.bytes = t.bytes;
        self.tier = Some(t.tier);
        self.inter_bytes = if t.tier == LinkTier::Both { t.inter } else { 0 };
        self
    }

    /// Of this span's bytes, `(inside a node, between nodes)`; `(0, 0)`
    /// when no tier was recorded.
    pub fn tier_bytes(&self) -> (u64, u64) {
        match self.tier {
            None => (0, 0),
            Some(LinkTier::Intra) => (self.bytes, 0),
            Some(LinkTier::Inter) => (0, self.bytes),
            Some(LinkTier::Both) => {
                let inter = self.inter_bytes.min(self.bytes);
                (self.bytes - inter, inter)
            }
        }
    }

    /// Of the comm-lane bytes of `spans`, `(inside a node, between nodes)`
    /// summed ([`Span::tier_bytes`]; compute-lane spans carry no transfer).
    pub fn tier_totals<'a>(spans: impl IntoIterator<Item = &'a Span>) -> (u64, u64) {
        spans
            .into_iter()
            .filter(|s| s.lane == Lane::Comm)
            .map(Span::tier_bytes)
            .fold((0, 0), |(a, b), (intra, inter)| (a + intra, b + inter))
    }

    /// Sets the round.
    pub fn with_round(mut self, round: u64) -> Span {
        self.round = round;
        self
    }

    /// Length in seconds.
    pub fn duration_s(&self) -> f64 {
        self.end_s - self.start_s
    }

    /// `None` when the span is well formed (finite times, `end_s >= start_s`),
    /// otherwise what is wrong with it.
    pub fn problem(&self) -> Option<String> {
        if !self.start_s.is_finite() || !self.end_s.is_finite() {
            return Some(format!("span {:?} on worker {} has non-finite times", self.name, self.worker));
        }
        if self.end_s < self.start_s {
            return Some(format!(
                "span {:?} on worker {} ends ({}) before it starts ({})",
                self.name, self.worker, self.end_s, self.start_s
            ));
        }
        None
    }

    /// The order used by [`EventLog::merge`]: start time, then worker, then lane.
    fn merge_order(&self, other: &Span) -> Ordering {
        self.start_s.total_cmp(&other.start_s).then(self.worker.cmp(&other.worker)).then(self.lane.cmp(&other.lane))
    }
}

/// An append-only list of spans, usually one worker's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventLog {
    spans: Vec<Span>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> EventLog {
        EventLog::default()
    }

    /// A log holding `spans` as given (no sorting).
    ///
    /// # Panics
    /// If a span is malformed (see [`Span::problem`]).
    pub fn from_spans(spans: Vec<Span>) -> EventLog {
        let mut log = EventLog::new();
        for s in spans {
            log.push(s);
        }
        log
    }

    /// Appends a span.
    ///
    /// # Panics
    /// If the span is malformed (see [`Span::problem`]): a negative or NaN
    /// duration is a bug in the runtime that recorded it, and would silently
    /// corrupt every measure computed later.
    pub fn push(&mut self, span: Span) {
        if let Some(p) = span.problem() {
            panic!("{p}");
        }
        self.spans.push(span);
    }

    /// The spans, in the order pushed (or merge order after [`EventLog::merge`]).
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// Gives up the spans.
    pub fn into_spans(self) -> Vec<Span> {
        self.spans
    }

    /// Number of spans.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True when no span was pushed.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// One log holding every span of `logs`, sorted by `(start_s, worker, lane)`.
    ///
    /// The sort is stable, so spans equal under that key keep their order
    /// within `logs` (log by log, then push order): the result depends only
    /// on the input, never on thread timing.
    pub fn merge(logs: Vec<EventLog>) -> EventLog {
        let mut spans: Vec<Span> = logs.into_iter().flat_map(|l| l.spans).collect();
        spans.sort_by(Span::merge_order);
        EventLog { spans }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_sorts_by_start_then_worker_then_lane() {
        let mut w0 = EventLog::new();
        w0.push(Span::compute(0, "micro-batch", 0.0, 1.0));
        w0.push(Span::comm(0, "all_reduce", 1.0, 2.0));
        w0.push(Span::compute(0, "micro-batch", 1.0, 2.0));
        let mut w1 = EventLog::new();
        w1.push(Span::comm(1, "all_reduce", 0.5, 2.0));
        w1.push(Span::compute(1, "micro-batch", 0.0, 0.5));
        let merged = EventLog::merge(vec![w1, w0]);
        let keys: Vec<(f64, usize, Lane)> = merged.spans().iter().map(|s| (s.start_s, s.worker, s.lane)).collect();
        assert_eq!(
            keys,
            vec![
                (0.0, 0, Lane::Compute),
                (0.0, 1, Lane::Compute),
                (0.5, 1, Lane::Comm),
                (1.0, 0, Lane::Compute),
                (1.0, 0, Lane::Comm),
            ]
        );
    }

    #[test]
    fn merge_keeps_push_order_for_equal_keys() {
        let mut w0 = EventLog::new();
        w0.push(Span::compute(0, "first", 0.0, 0.0));
        w0.push(Span::compute(0, "second", 0.0, 1.0));
        let merged = EventLog::merge(vec![w0]);
        let names: Vec<&str> = merged.spans().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["first", "second"]);
    }

    #[test]
    fn builders_set_fields() {
        let s = Span::comm(3, "reduce_scatter", 1.0, 1.5).with_bytes(42).with_micro_batches(2).with_round(7);
        assert_eq!((s.worker, s.lane, s.bytes, s.micro_batches, s.round), (3, Lane::Comm, 42, 2, 7));
        assert_eq!(s.duration_s(), 0.5);
        assert!(s.problem().is_none());
    }

    #[test]
    #[should_panic(expected = "ends")]
    fn push_rejects_backwards_span() {
        EventLog::new().push(Span::compute(0, "micro-batch", 2.0, 1.0));
    }

    #[test]
    fn problem_names_non_finite_times() {
        assert!(Span::compute(0, "x", f64::NAN, 1.0).problem().unwrap().contains("non-finite"));
    }

    #[test]
    fn span_serde_uses_lowercase_lane() {
        let s = Span::compute(1, "micro-batch", 0.25, 0.5).with_micro_batches(1);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["lane"], "compute");
        let back: Span = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
    }
}
