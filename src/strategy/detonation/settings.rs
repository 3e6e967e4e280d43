//! Settings of DeMo and FlexDeMo (`[methods.demo]`, `[methods.flexdemo]`;
//! shared/notes/demo.md has the algorithm): the replicator of steps 2-7,
//! the inner optimizer of step 9, and their knobs.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// Which DeToNATION replicator carries steps 2-7 (strategy/detonation/).
/// `striding` and `diloco` follow the DeToNATION code
/// (schneiderkamplab/DeToNATION be29e5c); `striding-element` and
/// `diloco-delta` are lowcomm's earlier readings of the paper's words,
/// kept under their own names (docs/methods.md, "DeToNATION").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicatorKind {
    /// DCT top-k per chunk, all-gathered (DeMo).
    #[default]
    Demo,
    /// The same seeded random indices on every member, values averaged.
    Random,
    /// Rows of each tensor's (c, -1) view, every ceil(c/k)-th row, the
    /// offset cycling through every row; values averaged (the reference's
    /// `StridingReplicator`, with its frozen offset fixed).
    Striding,
    /// The reference's "DiLoCo": the raw gradient averaged every n-th
    /// step, the node's own gradient applied on the others; no momentum.
    Diloco,
    /// The gradient averaged every step (hybrid-sharded baseline).
    Full,
    /// Every n-th element, the offset moving each step (lowcomm's reading
    /// of the paper's "every n-th index"; `striding` before issue 26).
    StridingElement,
    /// Nothing for n-1 steps, then the whole momentum averaged
    /// (shared/notes/demo.md's "full every n"; `diloco` before issue 26).
    DilocoDelta,
}

impl ReplicatorKind {
    /// Names, as in `replicator = "..."`, in the enum's order.
    pub const NAMES: [&'static str; 7] =
        ["demo", "random", "striding", "diloco", "full", "striding-element", "diloco-delta"];

    /// Its name, as in `replicator = "..."`.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// Whether it carries the raw gradient and keeps no momentum (`full`,
    /// `diloco`): it runs as itself in a replication group of one (Q = g),
    /// where the momentum replicators hand all of lr g to Q.
    pub fn raw_gradient(self) -> bool {
        matches!(self, ReplicatorKind::Full | ReplicatorKind::Diloco)
    }

    /// Whether it exchanges only every `every` steps (`diloco`, `diloco-delta`).
    pub fn periodic(self) -> bool {
        matches!(self, ReplicatorKind::Diloco | ReplicatorKind::DilocoDelta)
    }
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
    /// How steps 2-7 replicate: demo, random, striding, diloco, full,
    /// striding-element or diloco-delta. Flag: `--replicator`. Default
    /// `demo` (DeToNATION `detonatiomixin.py:34`, `DeMoReplicator()`).
    pub replicator: ReplicatorKind,
    /// Target chunk size per axis (step 3): blocks of the largest divisor
    /// of each axis that is at most this; striding: each tensor's rows c,
    /// the largest divisor of its length that is at most this. No flag.
    /// Default 64 (bloc97/DeMo `demo.py:25`; DeToNATION `compression_chunk`).
    pub chunk: usize,
    /// DCT coefficients sent per chunk (step 4), 1 to chunk^2; clamped to
    /// the chunk's size. No flag. Default 32 when `compression` is unset
    /// (bloc97/DeMo `demo.py:24`; DeToNATION `demo_replicator.py:17`).
    pub topk: Option<usize>,
    /// Bytes sent per step over bytes of the f32 gradient, in (0, 1]: the
    /// same budget for every replicator (sets topk, the values of random
    /// and striding-element, striding's rows per step k = floor(rate c),
    /// and the period 1/rate of diloco and diloco-delta). Flag:
    /// `--compression`. Default: unset (DeMo: topk; others: 0.1, the
    /// DeToNATION classes' `compression_rate = 0.1`).
    pub compression: Option<f64>,
    /// Momentum decay beta in [0, 1) (step 2). No flag. Default 0.999
    /// (bloc97/DeMo `demo.py:23`, `compression_decay`).
    pub beta: f32,
    /// Whether step 8 takes the sign of Q, whatever the inner optimizer.
    /// No flag. Default true (DeToNATION `detonatiomixin.py:31`).
    pub sign: bool,
    /// Decoupled weight decay (step 1), >= 0, on the tensors that take
    /// decay. No flag. Default 0 (bloc97/DeMo `demo.py:26`; any non-zero
    /// value crashes the DeToNATION code, here it decays: step.rs).
    pub weight_decay: f32,
    /// Step 9: `sgd` (DeMo-SGD) or `decoupled-adamw`. Flag: `--inner`. Default `sgd`.
    pub inner: InnerKind,
    /// Exchange step t while step t+1 computes, applying it one step late.
    /// Flag: `--overlap`. Default false (the references block on every exchange).
    pub overlap: bool,
    /// diloco, diloco-delta: exchange every this many steps (the
    /// reference's `replicate_every`). No flag. Default: round(1 /
    /// compression), so 10 (lowcomm's: the same bytes budget as the others;
    /// the reference's default is 1, its benchmarks set it by flag).
    pub every: Option<u64>,
    /// random: the seed every member draws the indices from. No flag.
    /// Default 42 (DeToNATION `random_replicator.py:17`).
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
            bail!("{s}: every must be at least 1 (diloco and diloco-delta exchange every this many steps), e.g. every = 10");
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
