//! Events as JSON Lines: one object per span, then (optionally) one summary
//! object, each tagged with `"record": "span"` or `"record": "summary"` so a
//! reader (or `jq 'select(.record == "span")'`) can tell them apart.
//!
//! Floats round-trip to within serde_json's parser precision (exact for the
//! values tests use; the crate does not enable `float_roundtrip`).

use super::events::Span;
use super::summary::Summary;
use crate::util::fsio::atomic_write_with;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{BufWriter, Write};
use std::path::Path;

/// One line of the file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "lowercase")]
pub enum Record {
    /// A span, its fields inline.
    Span(Span),
    /// The run's summary, its fields inline.
    Summary(Summary),
}

/// What [`read_jsonl`] found in a file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventsFile {
    /// The spans, in file order.
    pub spans: Vec<Span>,
    /// The summary line, if the file has one.
    pub summary: Option<Summary>,
}

/// Writes `spans` (in the given order), then `summary` if any, one JSON
/// object per line, atomically: a crash leaves the previous file or none,
/// never a truncated one.
pub fn write_jsonl(path: &Path, spans: &[Span], summary: Option<&Summary>) -> Result<()> {
    atomic_write_with(path, |f| {
        let mut out = BufWriter::new(f);
        for s in spans {
            // Serialize through the enum so every line carries its tag.
            write_line(&mut out, &Record::Span(s.clone()))?;
        }
        if let Some(s) = summary {
            write_line(&mut out, &Record::Summary(s.clone()))?;
        }
        out.flush()?;
        Ok(())
    })
    .with_context(|| format!("cannot write events {}", path.display()))
}

fn write_line(out: &mut impl Write, record: &Record) -> Result<()> {
    serde_json::to_writer(&mut *out, record)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// Reads a file written by [`write_jsonl`]. Blank lines are skipped; a line
/// that does not parse, or a second summary, is an error naming the line.
pub fn read_jsonl(path: &Path) -> Result<EventsFile> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read events {}", path.display()))?;
    let mut file = EventsFile::default();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let record: Record = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not a span or summary record", path.display(), i + 1))?;
        match record {
            Record::Span(s) => file.spans.push(s),
            Record::Summary(s) => {
                if file.summary.is_some() {
                    bail!("{}:{}: a second summary record", path.display(), i + 1);
                }
                file.summary = Some(s);
            }
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::summary::summarize;

    fn spans() -> Vec<Span> {
        vec![
            Span::compute(0, "micro-batch", 0.0, 0.5).with_micro_batches(2).with_round(3),
            Span::comm(1, "all_reduce", 0.25, 1.75).with_bytes(1 << 40).with_round(3),
        ]
    }

    #[test]
    fn jsonl_round_trips_spans_and_summary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let summary = summarize(&spans(), 2, 1024).unwrap();
        write_jsonl(&path, &spans(), Some(&summary)).unwrap();

        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!((first["record"].as_str(), first["lane"].as_str()), (Some("span"), Some("compute")));
        assert!(lines[2].contains("\"record\":\"summary\""));

        let back = read_jsonl(&path).unwrap();
        assert_eq!(back, EventsFile { spans: spans(), summary: Some(summary) });
    }

    #[test]
    fn jsonl_without_summary_reads_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        write_jsonl(&path, &spans(), None).unwrap();
        let back = read_jsonl(&path).unwrap();
        assert_eq!((back.spans, back.summary), (spans(), None));
    }

    #[test]
    fn jsonl_bad_line_names_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        write_jsonl(&path, &spans(), None).unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"record\":\"nope\"}\n");
        std::fs::write(&path, text).unwrap();
        let err = format!("{:#}", read_jsonl(&path).unwrap_err());
        assert!(err.contains("events.jsonl:3"), "{err}");
    }
}
