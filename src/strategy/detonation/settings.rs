//! Settings of DeMo and FlexDeMo (`[methods.demo]`, `[methods.flexdemo]`;
//! shared/notes/demo.md has the algorithm): the replicator of steps 2-7,
//! the inner optimizer of step 9, and their knobs.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// Which DeToNATION replicator carries steps 2-7 (strategy/detonation/).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplicatorKind {
    /// DCT top-k per chunk, all-gathered (DeMo).
    #[default]
    Demo,
    /// The same seeded random indices on every member, values averaged.
    Random,
    /// Every n-th element, the offset moving each step, values averaged.
    Striding,
    /// Nothing for n-1 steps, then the whole momentum averaged.
    Diloco,
    /// The gradient averaged every step (hybrid-sharded baseline).
    Full,
}

impl ReplicatorKind {
    /// Names, as in `replicator = "..."`.
    pub const NAMES: [&'static str; 5] = ["demo", "random", "striding", "diloco", "full"];
}

/// Step 9's optimizer in DeMo and FlexDeMo.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InnerKind {
    /// DeMo-SGD: p <- p - lr Q.
    #[default]
    Sgd,
    /// AdamW on Q, moments kept locally.
    DecoupledAdamw,
}

/// DeMo's and FlexDeMo's settings (`[methods.demo]`, `[methods.flexdemo]`;
/// shared/notes/demo.md has the algorithm).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DemoSettings {
    /// How steps 2-7 replicate: demo, random, striding, diloco or full.
    /// Flag: `--replicator`. Default `demo`.
    pub replicator: ReplicatorKind,
    /// Target chunk size per axis (step 3): blocks of the largest divisor
    /// of each axis that is at most this. No flag. Default 64.
    pub chunk: usize,
    /// DCT coefficients sent per chunk (step 4), 1 to chunk^2; clamped to
    /// the chunk's size. No flag. Default 32 (when `compression` is unset).
    pub topk: Option<usize>,
    /// Bytes sent per step over bytes of the f32 gradient, in (0, 1]: the
    /// same budget for every replicator (sets topk, the values of random
    /// and striding, and diloco's period). Flag: `--compression`. Default:
    /// unset (DeMo: topk; others: 0.1).
    pub compression: Option<f64>,
    /// Momentum decay beta in [0, 1) (step 2). No flag. Default 0.999.
    pub beta: f32,
    /// Whether step 8 takes the sign of Q. No flag. Default true.
    pub sign: bool,
    /// Decoupled weight decay (step 1), >= 0, on the tensors that take
    /// decay. No flag. Default 0.
    pub weight_decay: f32,
    /// Step 9: `sgd` (DeMo-SGD) or `decoupled-adamw`. Flag: `--inner`. Default `sgd`.
    pub inner: InnerKind,
    /// Exchange step t while step t+1 computes, applying it one step late.
    /// Flag: `--overlap`. Default false.
    pub overlap: bool,
    /// diloco: average every this many steps (default: 1 / compression, or 10).
    /// No flag.
    pub every: Option<u64>,
    /// random: the seed every member draws the indices from. No flag. Default 42.
    pub seed: u64,
}

impl Default for DemoSettings {
    fn default() -> Self {
        DemoSettings {
            replicator: ReplicatorKind::Demo,
            chunk: 64,
            topk: None,
            compression: None,
            beta: 0.999,
            sign: true,
            weight_decay: 0.0,
            inner: InnerKind::Sgd,
            overlap: false,
            every: None,
            seed: 42,
        }
    }
}

impl Eq for DemoSettings {}

impl DemoSettings {
    /// Coefficients per chunk when neither `topk` nor `compression` is set.
    pub const DEFAULT_TOPK: usize = 32;
    /// The rate of random, striding and diloco when `compression` is unset.
    pub const DEFAULT_COMPRESSION: f64 = 0.1;

    /// diloco's period.
    pub fn diloco_every(&self) -> u64 {
        self.every
            .unwrap_or_else(|| (1.0 / self.compression.unwrap_or(Self::DEFAULT_COMPRESSION)).round().max(1.0) as u64)
    }

    /// Checks every key; errors name the key and give a valid example.
    pub fn validate(&self, name: &str) -> Result<()> {
        let s = format!("[methods.{name}]");
        if self.chunk == 0 {
            bail!("{s}: chunk must be at least 1 (the target chunk size per axis), e.g. chunk = 64");
        }
        if let Some(k) = self.topk {
            let max = self.chunk * self.chunk;
            if k == 0 || k > max {
                bail!("{s}: topk must be between 1 and the chunk's {max} coefficients (chunk = {}), got {k}; e.g. topk = 32", self.chunk);
            }
            if self.compression.is_some() {
                bail!("{s}: give topk or compression, not both (compression sets topk), e.g. compression = 0.05");
            }
        }
        if !(0.0..1.0).contains(&self.beta) {
            bail!("{s}: beta must be in [0, 1), got {}; e.g. beta = 0.999", self.beta);
        }
        if let Some(c) = self.compression {
            if !(c > 0.0 && c <= 1.0) {
                bail!("{s}: compression must be in (0, 1] (bytes sent / bytes of the f32 gradient), got {c}; e.g. compression = 0.05 (--compression 0.05)");
            }
        }
        if self.every == Some(0) {
            bail!("{s}: every must be at least 1 (diloco averages every this many steps), e.g. every = 10");
        }
        if !(self.weight_decay >= 0.0 && self.weight_decay.is_finite()) {
            bail!("{s}: weight_decay must be >= 0, got {}; e.g. weight_decay = 0.1", self.weight_decay);
        }
        Ok(())
    }
}

/// The keys of `[methods.demo]` and `[methods.flexdemo]`.
pub const KEYS: &[&str] = &[
    "replicator",
    "chunk",
    "topk",
    "compression",
    "beta",
    "sign",
    "weight_decay",
    "inner",
    "overlap",
    "every",
    "seed",
];

/// Parses and checks `[methods.demo]` / `[methods.flexdemo]`; a replicator
/// or inner optimizer that does not exist is named with the valid ones.
pub fn parse(name: &str, table: toml::Table) -> Result<DemoSettings> {
    for (key, valid, example) in [
        ("replicator", &ReplicatorKind::NAMES[..], "--replicator random"),
        ("inner", &["sgd", "decoupled-adamw"][..], "--inner decoupled-adamw"),
    ] {
        if let Some(v) = table.get(key) {
            if !v.as_str().is_some_and(|s| valid.contains(&s)) {
                bail!("[methods.{name}]: {key} {v} does not exist: choose one of {}, e.g. {example}", valid.join(", "));
            }
        }
    }
    let s: DemoSettings =
        table.try_into().map_err(|e: toml::de::Error| anyhow::anyhow!("[methods.{name}]: {}", e.message()))?;
    s.validate(name)?;
    Ok(s)
}
