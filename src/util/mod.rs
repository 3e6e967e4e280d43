//! Small helpers shared by every layer: atomic file writes, hashing.

pub mod fsio;

pub use fsio::{atomic_write, sha256_file, sha256_hex};

/// A TOML parse error as one line naming where and what, e.g.
/// ``line 2 (`stepz = 3`): unknown field `stepz`, expected one of ...``
/// (toml's own multi-line rendering does not fit an `error:` line).
pub fn toml_error(text: &str, e: toml::de::Error) -> anyhow::Error {
    let what = e.message().trim_end().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let line_no = text[..start].matches('\n').count() + 1;
            let line = text.lines().nth(line_no - 1).unwrap_or("").trim();
            anyhow::anyhow!("line {line_no} (`{line}`): {what}")
        }
        None => anyhow::anyhow!("{what}"),
    }
}
