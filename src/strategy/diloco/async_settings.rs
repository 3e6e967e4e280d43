//! Settings of asynchronous DiLoCo (`[methods.async-diloco]`).
//!
//! The outer optimizer's keys mean what they mean for `diloco` (the same
//! `OuterConfig`, the same checks); async DiLoCo adds the grace period of
//! Algorithm 2 and Dynamic Local Updates (Sec. 5, eq. 6). Defaults: the
//! paper's H = 50 and DiLoCo's outer optimizer (see `settings.rs`),
//! no grace period (the paper's plain asynchronous setting) and no DyLU.
//!
//! `--workers 1` is allowed: one worker and the server. The server then
//! applies each of the worker's pseudo-gradients in turn, which is
//! synchronous DiLoCo on one worker, run over point-to-point messages.

use super::settings::DilocoSettings;
use crate::optim::{OuterConfig, OuterKind};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// Async DiLoCo's settings (`[methods.async-diloco]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AsyncDilocoSettings {
    /// Inner steps per round H, >= 1 (the fastest worker's, with DyLU). Flag `--h`. Default 50 (the paper's).
    pub h: u64,
    /// Outer optimizer on the server: `nesterov`, `sgd`, `sgd-momentum` or
    /// `dn` (Delayed Nesterov, Algorithm 3). Flag `--outer`. Default `nesterov`.
    pub outer: OuterKind,
    /// Outer learning rate eps, > 0. Flag `--outer-lr`. Default 0.7 (DiLoCo's).
    pub outer_lr: f32,
    /// Outer momentum beta, in [0, 1). Flag `--outer-momentum`. Default 0.9 (DiLoCo's).
    pub outer_momentum: f32,
    /// `dn`: buffer size N >= 1. Flag `--dn-buffer`. Default 4 (the paper's 4 workers).
    pub dn_buffer: u64,
    /// `dn`: momentum activation c in [0, 1/N]. Flag `--dn-c`. Default 0 (Algorithm 3).
    pub dn_c: f32,
    /// Grace period tau_grace in seconds (virtual in sim), >= 0: updates
    /// completing within it of the group's first join the group, which then
    /// restarts from one server model (Algorithm 2). Flag `--grace`. Default 0.
    pub grace: f64,
    /// Dynamic Local Updates (eq. 6): each worker runs floor(v / max v x H)
    /// steps, v its speed as measured from its reported time per inner step.
    /// Flag `--dylu`. Default false (H steps everywhere).
    pub dylu: bool,
    /// Data shards S, >= 1: the training token stream split into S
    /// contiguous near-equal pieces; the server draws each round's shard
    /// (eq. 2) and each shard has its own lr schedule (`shards.rs`). Flag
    /// `--shards`. Default: one per worker (the paper's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<u64>,
    /// Worker i always trains on shard i (no eq. 2 draw; needs as many
    /// shards as workers): the setting under which equal speeds and a
    /// covering grace period give sync DiLoCo. Flag `--fixed-shards`.
    /// Default false (eq. 2).
    pub fixed_shards: bool,
}

impl Default for AsyncDilocoSettings {
    fn default() -> Self {
        let d = DilocoSettings::default();
        AsyncDilocoSettings {
            h: d.h,
            outer: d.outer,
            outer_lr: d.outer_lr,
            outer_momentum: d.outer_momentum,
            dn_buffer: d.dn_buffer,
            dn_c: d.dn_c,
            grace: 0.0,
            dylu: false,
            shards: None,
            fixed_shards: false,
        }
    }
}

impl AsyncDilocoSettings {
    /// The server's outer optimizer.
    pub fn outer_config(&self) -> OuterConfig {
        self.diloco().outer_config()
    }

    /// The keys shared with synchronous DiLoCo, as its settings.
    pub fn diloco(&self) -> DilocoSettings {
        DilocoSettings {
            h: self.h,
            outer: self.outer,
            outer_lr: self.outer_lr,
            outer_momentum: self.outer_momentum,
            dn_buffer: self.dn_buffer,
            dn_c: self.dn_c,
        }
    }

    /// Checks the ranges; errors name the key, its flag and a valid example.
    pub fn validate(&self) -> Result<()> {
        if self.h == 0 {
            bail!("[methods.async-diloco]: h must be at least 1 (inner steps per round), e.g. h = 50 (flag --h 50)");
        }
        if !(self.grace >= 0.0 && self.grace.is_finite()) {
            bail!(
                "[methods.async-diloco]: grace must be >= 0 seconds, got {}; e.g. grace = 0.5 (flag --grace 0.5)",
                self.grace
            );
        }
        if self.shards == Some(0) {
            bail!("[methods.async-diloco]: shards must be at least 1, e.g. shards = 4 (flag --shards 4); leave it out for one per worker");
        }
        self.outer_config().validate("async-diloco")
    }

    /// Data shards for `workers` workers (one per worker unless set).
    pub fn shard_count(&self, workers: usize) -> usize {
        self.shards.map_or(workers, |s| s as usize)
    }
}

/// Parses `[methods.async-diloco]`; an outer optimizer that does not exist
/// is named with the valid ones.
pub fn parse(table: toml::Table) -> Result<AsyncDilocoSettings> {
    super::settings::check_outer_name(&table, "async-diloco", "dn")?;
    let s: AsyncDilocoSettings =
        table.try_into().map_err(|e: toml::de::Error| anyhow::anyhow!("[methods.async-diloco]: {}", e.message()))?;
    s.validate().map(|_| s)
}

/// How async DiLoCo is shown (banner, summaries).
pub fn describe(s: &AsyncDilocoSettings, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    f.write_str("async-diloco (")?;
    super::settings::describe_round(&s.diloco(), f)?;
    write!(f, ", grace {} s{}", s.grace, if s.dylu { ", dylu" } else { "" })?;
    match (s.shards, s.fixed_shards) {
        (_, true) => f.write_str(", fixed shards)"),
        (Some(n), false) => write!(f, ", {n} shards)"),
        (None, false) => f.write_str(")"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        format!("{:#}", parse(text.parse().unwrap()).unwrap_err())
    }

    #[test]
    fn defaults_and_bad_values_name_the_key_and_an_example() {
        let d = parse(toml::Table::new()).unwrap();
        assert_eq!((d.h, d.outer, d.outer_lr, d.outer_momentum), (50, OuterKind::Nesterov, 0.7, 0.9));
        assert_eq!((d.grace, d.dylu, d.shards, d.fixed_shards), (0.0, false, None, false));
        assert_eq!((d.shard_count(3), parse("shards = 5".parse().unwrap()).unwrap().shard_count(3)), (3, 5));
        let s = parse("outer = \"dn\"\ndn_buffer = 2\ndn_c = 0.5\nh = 3\ngrace = 1.5\ndylu = true".parse().unwrap())
            .unwrap();
        assert_eq!((s.outer, s.dn_buffer, s.dn_c, s.h, s.grace, s.dylu), (OuterKind::Dn, 2, 0.5, 3, 1.5, true));
        assert_eq!(s.diloco().outer_config(), s.outer_config());
        for (text, needles) in [
            ("h = 0", &["[methods.async-diloco]: h must be at least 1", "h = 50"][..]),
            ("dn_buffer = 0", &["[methods.async-diloco]: dn_buffer must be at least 1", "--dn-buffer 4"]),
            ("dn_c = 0.3", &["dn_c must be in [0, 1/N] = [0, 0.25]"]),
            ("dn_c = -0.1", &["dn_c must be in [0, 1/N]"]),
            ("grace = -1.0", &["grace must be >= 0 seconds, got -1", "--grace 0.5"]),
            ("outer = \"adam\"", &["outer \"adam\" does not exist", "--outer dn"]),
            ("dylu = 1", &["[methods.async-diloco]:"]),
            ("shards = 0", &["[methods.async-diloco]: shards must be at least 1", "--shards 4"]),
        ] {
            let e = err(text);
            for n in needles {
                assert!(e.contains(n), "{text}: {e}");
            }
        }
    }
}
