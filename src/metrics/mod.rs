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
pub mod plot_style;
pub mod summary;
pub mod trace;

pub use events::{EventLog, Lane, LinkTier, Span, Traffic};
pub use intervals::Intervals;
pub use jsonl::{read_jsonl, write_jsonl, EventsFile, Record};
pub use summary::{summarize, MicroBatchStats, Summary, WorkerSummary};
pub use trace::{trace_json, write_trace};

/// `x` with `prec` decimals, right-aligned in `width` characters, never
/// `-0.000`: a value that rounds to zero (-0.0, or a hair below zero left
/// by subtracting two clocks) prints without its sign.
pub fn fixed(x: f64, prec: usize, width: usize) -> String {
    let t = format!("{x:.prec$}");
    let t = match t.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => t,
    };
    format!("{t:>width$}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn fixed_never_prints_minus_zero() {
        assert_eq!(format!("{:.3}", -1e-12), "-0.000", "what plain formatting does");
        assert_eq!(super::fixed(-1e-12, 3, 0), "0.000");
        assert_eq!(super::fixed(-0.0, 1, 5), "  0.0");
        assert_eq!(super::fixed(-0.0004, 3, 7), "  0.000");
        assert_eq!(super::fixed(-0.0005001, 3, 0), "-0.001", "a negative that does not round to zero keeps its sign");
        assert_eq!(super::fixed(2.5, 2, 6), "  2.50");
    }
}
