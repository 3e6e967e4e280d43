//! Chrome trace-event JSON (the "JSON Object Format"), loadable by Perfetto
//! (ui.perfetto.dev) and chrome://tracing, drawn like the papers' timeline
//! figures: one process, and per worker `w` two tracks (threads),
//! "worker w compute" (tid `2w`) and "worker w comm" (tid `2w + 1`).
//!
//! Every span becomes a complete event (`"ph": "X"`) with `ts` and `dur` in
//! microseconds (fractional allowed, so sub-microsecond virtual times
//! survive) and `args` holding `bytes`, `micro_batches` and `round`.
//! Metadata events (`"ph": "M"`) name the process and the tracks and fix
//! the track order. Output is deterministic: metadata first by tid, then
//! spans by `(ts, tid, end, name)`; object keys are sorted by serde_json.

use super::events::{Lane, Span};
use crate::util::atomic_write;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::Path;

/// The single process id used for every event.
pub const TRACE_PID: u64 = 0;

/// The track (thread id) of a worker's lane: compute `2w`, comm `2w + 1`,
/// so that a worker's two tracks sit next to each other.
pub fn track_id(worker: usize, lane: Lane) -> u64 {
    2 * worker as u64 + matches!(lane, Lane::Comm) as u64
}

/// The track's display name, e.g. `"worker 3 comm"`.
pub fn track_name(worker: usize, lane: Lane) -> String {
    format!("worker {worker} {}", lane.as_str())
}

/// The trace as a JSON value: `{"displayTimeUnit": "ms", "traceEvents": [...]}`,
/// with tracks for workers `0..world` (and any higher rank a span names).
pub fn trace_json(spans: &[Span], world: usize) -> Value {
    let world = spans.iter().map(|s| s.worker + 1).max().unwrap_or(0).max(world);
    let mut events = vec![json!({
        "ph": "M", "name": "process_name", "pid": TRACE_PID, "tid": 0,
        "args": { "name": "lowcomm" },
    })];
    for worker in 0..world {
        for lane in [Lane::Compute, Lane::Comm] {
            let tid = track_id(worker, lane);
            events.push(json!({
                "ph": "M", "name": "thread_name", "pid": TRACE_PID, "tid": tid,
                "args": { "name": track_name(worker, lane) },
            }));
            // Without a sort index viewers order tracks by name, which puts
            // "worker 10" before "worker 2".
            events.push(json!({
                "ph": "M", "name": "thread_sort_index", "pid": TRACE_PID, "tid": tid,
                "args": { "sort_index": tid },
            }));
        }
    }

    let mut sorted: Vec<&Span> = spans.iter().collect();
    sorted.sort_by(|a, b| {
        a.start_s
            .total_cmp(&b.start_s)
            .then(track_id(a.worker, a.lane).cmp(&track_id(b.worker, b.lane)))
            .then(a.end_s.total_cmp(&b.end_s))
            .then(a.name.cmp(&b.name))
    });
    events.extend(sorted.into_iter().map(|s| {
        json!({
            "ph": "X",
            "name": s.name,
            "cat": s.lane.as_str(),
            "pid": TRACE_PID,
            "tid": track_id(s.worker, s.lane),
            "ts": s.start_s * 1e6,
            "dur": s.duration_s() * 1e6,
            "args": { "bytes": s.bytes, "micro_batches": s.micro_batches, "round": s.round },
        })
    }));
    json!({ "displayTimeUnit": "ms", "traceEvents": events })
}

/// Writes [`trace_json`] to `path` atomically (readers see the old file or
/// the whole new one, never a partial trace).
pub fn write_trace(path: &Path, spans: &[Span], world: usize) -> Result<()> {
    let bytes = serde_json::to_vec(&trace_json(spans, world)).context("cannot serialize trace")?;
    atomic_write(path, &bytes).with_context(|| format!("cannot write trace {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_workers() -> Vec<Span> {
        vec![
            Span::comm(1, "all_reduce", 1.0, 1.5).with_bytes(4096).with_round(0),
            Span::compute(0, "micro-batch", 0.0, 1.0).with_micro_batches(1),
            Span::compute(1, "micro-batch", 0.0, 0.75).with_micro_batches(2),
            Span::comm(0, "reduce_scatter", 1.0, 2.0).with_bytes(2048).with_round(0),
        ]
    }

    #[test]
    fn trace_written_and_parsed_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/trace.json");
        write_trace(&path, &two_workers(), 2).unwrap();
        let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(v["displayTimeUnit"], "ms");
        let events = v["traceEvents"].as_array().unwrap();
        assert!(events.iter().all(|e| e["pid"] == TRACE_PID));

        let names: Vec<(u64, &str)> = events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
            .map(|e| (e["tid"].as_u64().unwrap(), e["args"]["name"].as_str().unwrap()))
            .collect();
        assert_eq!(
            names,
            [(0, "worker 0 compute"), (1, "worker 0 comm"), (2, "worker 1 compute"), (3, "worker 1 comm")]
        );

        let spans: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        let order: Vec<(f64, u64, &str)> = spans
            .iter()
            .map(|e| (e["ts"].as_f64().unwrap(), e["tid"].as_u64().unwrap(), e["name"].as_str().unwrap()))
            .collect();
        assert_eq!(
            order,
            [(0.0, 0, "micro-batch"), (0.0, 2, "micro-batch"), (1e6, 1, "reduce_scatter"), (1e6, 3, "all_reduce")]
        );
        let rs = spans[2];
        assert_eq!(rs["cat"], "comm");
        assert_eq!(rs["dur"].as_f64().unwrap(), 1e6);
        assert_eq!(rs["args"], json!({ "bytes": 2048, "micro_batches": 0, "round": 0 }));
        let mb = spans[1];
        assert_eq!(mb["dur"].as_f64().unwrap(), 750_000.0);
        assert_eq!(mb["args"]["micro_batches"], 2);
        // Metadata comes before every complete event.
        let first_x = events.iter().position(|e| e["ph"] == "X").unwrap();
        assert!(events[first_x..].iter().all(|e| e["ph"] == "X"));
    }

    #[test]
    fn trace_is_independent_of_span_order() {
        let mut reversed = two_workers();
        reversed.reverse();
        assert_eq!(trace_json(&two_workers(), 2), trace_json(&reversed, 2));
    }

    #[test]
    fn trace_names_tracks_for_silent_workers() {
        let v = trace_json(&[], 3);
        let n = v["traceEvents"].as_array().unwrap().iter().filter(|e| e["name"] == "thread_name").count();
        assert_eq!(n, 6);
        assert_eq!(track_id(2, Lane::Comm), 5);
        assert_eq!(track_name(2, Lane::Comm), "worker 2 comm");
    }
}
