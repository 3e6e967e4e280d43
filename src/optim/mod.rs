//! Optimizers on flat f32 slices.
//!
//! The model exposes all parameters as one contiguous `Vec<f32>` and all
//! gradients as another of the same length. An optimizer is built for `len`
//! elements and stepped with slices of exactly that length, so a ZeRO-1 shard
//! is simply `params[lo..hi]` with an optimizer built for `hi - lo` elements
//! and `DecaySegments::restrict(lo, hi)`.
//!
//! Every optimizer also offers a *look-ahead*: the parameters one step would
//! produce, written to a separate buffer, without committing any state
//! (moments, step count). ACCO and DPU need it.
//!
//! Steps are parallel over fixed-size chunks of [`CHUNK`] elements; each
//! element is updated by the same scalar code whatever the thread count, so
//! results are bitwise deterministic. Steps allocate nothing.

mod adamw;
mod clip;
pub mod dct;
mod outer;
mod schedule;
mod sgd;

pub use adamw::{AdamW, AdamWConfig, Coefs};
pub use clip::{clip_global_norm, global_norm, scale_to_norm, sum_of_squares};
pub use outer::{OuterConfig, OuterKind, OuterOpt};
pub use schedule::LrSchedule;
pub use sgd::{Sgd, SgdConfig};

use std::ops::Range;

use anyhow::{bail, ensure};
use serde::{Deserialize, Serialize};

/// Elements per parallel work item (64K f32 = 256 KiB per stream).
pub const CHUNK: usize = 1 << 16;

/// Which elements of a flat slice receive weight decay: sorted, disjoint,
/// non-empty ranges of indices relative to the start of the slice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecaySegments {
    ranges: Vec<Range<usize>>,
}

impl DecaySegments {
    /// Builds from arbitrary ranges: sorts them, drops empty ones and merges
    /// overlapping or touching ones.
    pub fn new(ranges: impl IntoIterator<Item = Range<usize>>) -> Self {
        let mut rs: Vec<Range<usize>> = ranges.into_iter().filter(|r| r.start < r.end).collect();
        rs.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<usize>> = Vec::with_capacity(rs.len());
        for r in rs {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        Self { ranges: merged }
    }

    /// Every element of a slice of length `len` is decayed.
    pub fn all(len: usize) -> Self {
        Self::new(std::iter::once(0..len))
    }

    /// No element is decayed.
    pub fn none() -> Self {
        Self::default()
    }

    /// The part inside `[lo, hi)`, re-based so that `lo` becomes 0 (for a
    /// shard `params[lo..hi]`).
    pub fn restrict(&self, lo: usize, hi: usize) -> Self {
        let ranges = self
            .ranges
            .iter()
            .map(|r| r.start.max(lo)..r.end.min(hi))
            .filter(|r| r.start < r.end)
            .map(|r| r.start - lo..r.end - lo)
            .collect();
        Self { ranges }
    }

    /// Whether element `i` is decayed.
    pub fn contains(&self, i: usize) -> bool {
        let k = self.ranges.partition_point(|r| r.end <= i);
        self.ranges.get(k).is_some_and(|r| r.start <= i)
    }

    /// The normalised ranges (sorted, disjoint, non-empty).
    pub fn ranges(&self) -> &[Range<usize>] {
        &self.ranges
    }

    /// Splits `[off, off + len)` into consecutive spans, in order, and calls
    /// `f(local_span, decayed)` with each span re-based to `off`.
    pub(crate) fn for_each_span(&self, off: usize, len: usize, mut f: impl FnMut(Range<usize>, bool)) {
        let hi = off + len;
        let mut pos = off;
        let mut k = self.ranges.partition_point(|r| r.end <= off);
        while pos < hi {
            match self.ranges.get(k) {
                Some(r) if r.start < hi => {
                    if r.start > pos {
                        f(pos - off..r.start - off, false);
                        pos = r.start;
                    }
                    let end = r.end.min(hi);
                    f(pos - off..end - off, true);
                    pos = end;
                    k += 1;
                }
                _ => {
                    f(pos - off..hi - off, false);
                    pos = hi;
                }
            }
        }
    }
}

/// An optimizer over a flat slice of fixed length (see the module docs).
pub trait Optimizer: Send {
    /// One step: updates `params` in place and commits the state. `decay` is
    /// relative to the start of `params`. Panics if a length differs from
    /// the length the optimizer was built for.
    fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f32, decay: &DecaySegments);

    /// Writes into `out` the parameters [`Optimizer::step`] would produce,
    /// bitwise, without changing any state.
    fn look_ahead(&self, params: &[f32], grads: &[f32], lr: f32, decay: &DecaySegments, out: &mut [f32]);

    /// Number of committed steps.
    fn steps_taken(&self) -> u64;

    /// Named state tensors, for checkpoints.
    fn state_tensors(&self) -> Vec<(String, &[f32])>;

    /// Restores what [`Optimizer::state_tensors`] and
    /// [`Optimizer::steps_taken`] returned. Every tensor must be given once,
    /// with the right name and length; on error the state is unchanged.
    fn load_state(&mut self, steps: u64, tensors: &[(String, Vec<f32>)]) -> anyhow::Result<()>;

    /// Number of f32 values of state held (for memory accounting).
    fn state_len(&self) -> usize;

    /// This optimizer as AdamW, if it is one: the libtorch backend can take
    /// AdamW's steps on its device (strategy/inner.rs, `Inner::round_at`).
    fn as_adamw_mut(&mut self) -> Option<&mut AdamW> {
        None
    }
}

/// Which optimizer to use, and its hyper-parameters. The learning rate is
/// not here: the schedule gives it each step.
///
/// `deny_unknown_fields` does not take effect on an internally tagged enum
/// with newtype variants, so it sits on the inner config structs instead.
/// `kind` may be left out (configs/README.md: every key is optional), which
/// serde's tagged enums do not allow: see the `Deserialize` impl below.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum OptimizerConfig {
    /// AdamW with decoupled weight decay.
    AdamW(AdamWConfig),
    /// SGD, optionally with (Nesterov) momentum and coupled weight decay.
    Sgd(SgdConfig),
}

/// [`OptimizerConfig`] as serde reads it once `kind` is known.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum TaggedOptimizerConfig {
    AdamW(AdamWConfig),
    Sgd(SgdConfig),
}

/// The `kind` of an `[optimizer]` section that does not name one.
const DEFAULT_KIND: &str = "adamw";

impl<'de> Deserialize<'de> for OptimizerConfig {
    /// Reads the section as a table, adds `kind = "adamw"` when it is
    /// missing, then reads it as the tagged enum (whose errors, unknown keys
    /// and kinds included, are passed on unchanged).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut table = serde_json::Map::deserialize(d)?;
        table.entry("kind").or_insert_with(|| DEFAULT_KIND.into());
        let tagged =
            TaggedOptimizerConfig::deserialize(serde_json::Value::Object(table)).map_err(serde::de::Error::custom)?;
        Ok(match tagged {
            TaggedOptimizerConfig::AdamW(c) => Self::AdamW(c),
            TaggedOptimizerConfig::Sgd(c) => Self::Sgd(c),
        })
    }
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        Self::AdamW(AdamWConfig::default())
    }
}

impl OptimizerConfig {
    /// Checks the hyper-parameters.
    pub fn validate(&self) -> anyhow::Result<()> {
        match self {
            Self::AdamW(c) => c.validate(),
            Self::Sgd(c) => c.validate(),
        }
    }

    /// Builds an optimizer for slices of `len` elements, after validation.
    pub fn try_build(&self, len: usize) -> anyhow::Result<Box<dyn Optimizer>> {
        self.validate()?;
        Ok(match self {
            Self::AdamW(c) => Box::new(AdamW::new(c.clone(), len)),
            Self::Sgd(c) => Box::new(Sgd::new(c.clone(), len)),
        })
    }

    /// Like [`OptimizerConfig::try_build`]; panics on an invalid config (call
    /// [`OptimizerConfig::validate`] when loading configs).
    pub fn build(&self, len: usize) -> Box<dyn Optimizer> {
        match self.try_build(len) {
            Ok(o) => o,
            Err(e) => panic!("invalid optimizer config: {e:#}"),
        }
    }
}

/// Checks `tensors` against the expected `(name, destination)` pairs (each
/// present exactly once, right length, nothing else), then copies. Nothing
/// is written unless everything checks.
pub(crate) fn load_named_state(
    optimizer: &str,
    tensors: &[(String, Vec<f32>)],
    targets: &mut [(&str, &mut [f32])],
) -> anyhow::Result<()> {
    let expected: Vec<&str> = targets.iter().map(|(n, _)| *n).collect();
    for (name, data) in tensors {
        let Some((_, dst)) = targets.iter().find(|(n, _)| n == name) else {
            bail!("{optimizer}: unknown state tensor {name:?} (expected {expected:?})");
        };
        ensure!(
            data.len() == dst.len(),
            "{optimizer}: state tensor {name:?} has {} elements, expected {}",
            data.len(),
            dst.len()
        );
    }
    for name in &expected {
        let n = tensors.iter().filter(|(t, _)| t == name).count();
        ensure!(n != 0, "{optimizer}: state tensor {name:?} is missing");
        ensure!(n == 1, "{optimizer}: state tensor {name:?} is given {n} times");
    }
    for (name, dst) in targets.iter_mut() {
        let (_, src) = tensors.iter().find(|(t, _)| t == name).expect("checked above");
        dst.copy_from_slice(src);
    }
    Ok(())
}

/// Panics with a clear message when a slice length differs from the
/// optimizer's length.
pub(crate) fn check_len(optimizer: &str, what: &str, got: usize, expected: usize) {
    assert!(got == expected, "{optimizer}: {what} has {got} elements, optimizer built for {expected}");
}

#[cfg(test)]
mod tests;
