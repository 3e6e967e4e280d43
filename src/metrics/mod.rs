//! Run measurements: what each worker did and when, and what that adds up to.
//!
//! This layer knows nothing of training algorithms. A runtime records
//! [`Span`]s (a piece of work on a worker's compute or comm lane, with bytes
//! sent, micro-batches and round) into one [`EventLog`] per worker, merges
//! the logs at the end, and hands the spans to:
//! - [`summarize`]: per-worker compute, comm and idle time, overlap ratio,
//!   micro-batches per round and bytes sent; overall tokens/s, overlap ratio
//!   and idle share (definitions in [`summary`]);
//! - [`write_trace`]: a Chrome/Perfetto trace with a compute and a comm
//!   track per worker;
//! - [`write_jsonl`] / [`read_jsonl`]: one JSON object per span, plus the
//!   summary.
//!
//! Times are seconds on one clock per run, real or virtual.

pub mod events;
pub mod intervals;
pub mod jsonl;
pub mod plot;
pub mod summary;
pub mod trace;

pub use events::{EventLog, Lane, LinkTier, Span};
pub use intervals::Intervals;
pub use jsonl::{read_jsonl, write_jsonl, EventsFile, Record};
pub use summary::{summarize, MicroBatchStats, Summary, WorkerSummary};
pub use trace::{trace_json, write_trace};
