//! Small helpers shared by every layer: atomic file writes, hashing.

pub mod fsio;

pub use fsio::{atomic_write, sha256_file, sha256_hex};

/// This machine's CPU model (`model name` in /proc/cpuinfo), if known.
pub fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split(':').nth(1)?.trim().to_string())
}

/// `"4 logical CPUs, linux x86_64"`: what every report says after the CPU model.
pub fn cpus_and_os() -> String {
    let cores = std::thread::available_parallelism().map_or("unknown".into(), |c| c.to_string());
    format!("{cores} logical CPUs, {} {}", std::env::consts::OS, std::env::consts::ARCH)
}

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

/// Serialize `f32` config values as the shortest decimal that reads back as
/// the same `f32` (`3e-3` is saved as `0.003`, not `0.003000000026077032`).
///
/// TOML has only 64-bit floats, so an `f32` is widened on the way out and
/// the widened value prints with every digit of the binary approximation.
/// Going through the `f32`'s own shortest representation writes what the
/// user wrote; reading it back as `f64` and narrowing gives the same bits
/// (the shortest representation round-trips by construction), so resume
/// stays bit-identical. Use with `#[serde(serialize_with = "...")]`.
pub mod f32_shortest {
    use serde::Serializer;

    /// The `f64` whose shortest decimal is the `f32`'s shortest decimal.
    pub fn widen(v: f32) -> f64 {
        // Display is the shortest round-trip form ("0.003", "1e-8" prints
        // as "0.00000001"); `inf`/`NaN` parse back too.
        v.to_string().parse().expect("an f32's Display parses as f64")
    }

    /// For `f32` fields.
    pub fn serialize<S: Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(widen(*v))
    }

    /// For `Option<f32>` fields (`None` is skipped by TOML like any `None`).
    pub fn option<S: Serializer>(v: &Option<f32>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_some(&widen(*v)),
            None => s.serialize_none(),
        }
    }
}
