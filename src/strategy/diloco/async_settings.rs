//! Settings of asynchronous DiLoCo (`[methods.async-diloco]`).
//!
//! The outer optimizer's keys mean what they mean for `diloco` (the same
//! `OuterConfig`, the same checks); async DiLoCo adds the weight of each
//! arriving pseudo-gradient, the grace period of Algorithm 2 and Dynamic
//! Local Updates (Sec. 5, eq. 6). Defaults (docs/methods.md has the table
//! with every source, docs/decisions.md the reasons):
//!
//! - `h`, `outer`, `outer_momentum`, `dn_c`: DiLoCo's, as `diloco`.
//! - `weight = "auto"`: each pseudo-gradient scaled by 1/k on arrival for
//!   sgd, sgd-momentum and nesterov (k arrivals then move the model as sync
//!   DiLoCo's one step on their mean), by 1 for dn (Algorithm 3 divides by
//!   N). Unscaled at lr 0.7, vanilla async DiLoCo diverged (issue 26).
//! - `outer_lr` unset: 0.2 for nesterov and sgd-momentum (what tuning found,
//!   [`MOMENTUM_OUTER_LR`]: at 1/k, 0.7 still moved the model too far),
//!   DiLoCo's 0.7 for sgd and dn.
//! - `dn_buffer` unset: N = the number of workers (the paper's Table 5
//!   "delay period 4, 8, 16" with 4, 8, 16 workers; footnote 5: with equal
//!   speeds DN and DiLoCo then "reduce to the same").
//! - `grace = "auto"`: 0 without DyLU (the paper's plain asynchronous
//!   setting); with DyLU one inner step of the slowest live worker, the
//!   spread eq. 6's floor leaves between arrivals DyLU means to be together.
//! - `dylu = false`: "Async. DiLoCo" is the paper's baseline;
//!   `outer = "dn", dylu = true` is its proposed method.
//!
//! `--workers 1` is allowed: one worker and the server. The server then
//! applies each of the worker's pseudo-gradients in turn, which is
//! synchronous DiLoCo on one worker, run over point-to-point messages.

use super::settings::DilocoSettings;
use crate::comm::codec::OuterWire;
use crate::optim::{OuterConfig, OuterKind};
use anyhow::{bail, Result};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The keys `[methods.async-diloco]` accepts (strategy/method.rs): the
/// fields below, checked by `the_keys_method_rs_accepts_are_the_fields`.
pub const KEYS: &[&str] = &[
    "h",
    "outer",
    "outer_lr",
    "outer_momentum",
    "dn_buffer",
    "dn_c",
    "weight",
    "grace",
    "dylu",
    "shards",
    "fixed_shards",
    "outer_wire",
    "error_feedback",
    "error_decay",
];

/// Async DiLoCo's settings (`[methods.async-diloco]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AsyncDilocoSettings {
    /// Inner steps per round H, >= 1 (the fastest worker's, with DyLU). Flag
    /// `--h`. Default 50 (the paper's Sec. 4, "inner steps = 50 ... by default").
    pub h: u64,
    /// Outer optimizer on the server: `nesterov`, `sgd`, `sgd-momentum` or
    /// `dn` (Delayed Nesterov, Algorithm 3). Flag `--outer`. Default
    /// `nesterov` (DiLoCo's; the paper's "Async. DiLoCo" baseline).
    pub outer: OuterKind,
    /// Outer learning rate eps, > 0: with the default `weight` the step of
    /// k arrivals together, as sync DiLoCo's of a round. Flag `--outer-lr`.
    /// Default unset: [`MOMENTUM_OUTER_LR`] for nesterov and sgd-momentum
    /// (what tuning found: 0.7 moved the model too far, docs/decisions.md),
    /// 0.7 for sgd and dn (DiLoCo's; the paper's Table 5 has 0.1 and 0.7 in bold).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outer_lr: Option<f32>,
    /// Outer momentum beta, in [0, 1). Flag `--outer-momentum`. Default 0.9 (DiLoCo's).
    pub outer_momentum: f32,
    /// `dn`: buffer size N >= 1. Flag `--dn-buffer`. Default unset: N = the
    /// number of workers (the paper's Table 5 "delay period 4, 8, 16" with
    /// 4, 8, 16 workers, and footnote 5; the notebook's buffered variant
    /// uses `NUM_WORKERS`, AsyncLocalSGDToyExample.ipynb:651-654).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dn_buffer: Option<u64>,
    /// `dn`: momentum activation c in [0, 1/N]. Flag `--dn-c`. Default 0 (Algorithm 3).
    pub dn_c: f32,
    /// The weight a of each arriving pseudo-gradient, theta = OuterOpt(theta,
    /// a delta) (Algorithm 2 line 17): `"1/k"`, `"sqrt(k)/k"` (the DeepMind
    /// notebook's), `"1"` (the paper's soup weight 1.0, Table 5; lowcomm's
    /// before issue 26) or `"auto"`, k the configured workers. Flag
    /// `--weight`. Default `"auto"`: `"1/k"` for sgd, sgd-momentum and
    /// nesterov, `"1"` for dn (our rule, `param_server::arrival_weight`).
    pub weight: Weight,
    /// Grace period tau_grace in seconds (virtual in sim), >= 0: updates
    /// completing within it of the group's first join the group, which then
    /// restarts from one server model (Algorithm 2). Flag `--grace`.
    /// Default unset (`"auto"`): 0 without DyLU; with DyLU one inner step of
    /// the slowest live worker, as measured (our choice; the paper gives no
    /// value, the notebook 0.5 s).
    #[serde(default, deserialize_with = "grace_de", serialize_with = "grace_ser")]
    pub grace: Option<f64>,
    /// Dynamic Local Updates (eq. 6): each worker runs floor(v / max v x H)
    /// steps, v its speed as measured from its reported time per inner step.
    /// Flag `--dylu`. Default false (H steps everywhere: the paper's baseline).
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
    /// How each worker's pseudo-gradient travels to the server, as
    /// `diloco`'s key: unset (the default) as values in the run's wire dtype;
    /// `"f32"`, `"bf16"`, `"int8"`, `"fp4"` or `"topk:K+2bit"` packed by
    /// comm/codec (the bytes that travel are the codec's), decoded by the
    /// server, whose outer step runs in f32.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outer_wire: Option<OuterWire>,
    /// With `outer_wire` set: each worker keeps a residual of what its
    /// messages left out and adds it to its next pseudo-gradient (error
    /// feedback). Default true, as `diloco`.
    pub error_feedback: bool,
    /// With error feedback: beta in [0, 1], as `diloco`'s. Default 1.
    #[serde(skip_serializing_if = "super::settings::keeps_whole_residual")]
    pub error_decay: f32,
}

/// Async DiLoCo's default outer lr with nesterov and sgd-momentum, at the
/// default weight 1/k (0.05 per arrival with 4 workers; the DeepMind
/// notebook's 0.07 x sqrt(4)/4 is 0.035). What tuning found (docs/decisions.md):
/// on `nano` (4 workers of speeds 1 to 0.125, 3 seeds; results page,
/// experiment 6) val loss 7.27 at DiLoCo's 0.7, 6.26 at 0.4, 6.01 at 0.2,
/// 5.86 at 0.1, 5.89 at 0.05 against sync DiLoCo's 6.20; on the tests' tiny
/// model (`tiny_outer_lr_sweep`) 0.1 and 0.05 fall 15% behind sync DiLoCo
/// and 0.2 stays within 6.2% in every setup: 0.2 is the value good at both.
pub const MOMENTUM_OUTER_LR: f32 = 0.2;

/// `weight` (see `param_server::arrival_weight` for the rule).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Weight {
    /// `"1/k"` for sgd, sgd-momentum and nesterov; `"1"` for dn.
    #[default]
    Auto,
    /// 1/k.
    InvK,
    /// sqrt(k)/k.
    SqrtKOverK,
    /// 1.
    One,
}

impl Weight {
    /// Names, as in `weight = "..."`, in the order of the variants.
    pub const NAMES: [&'static str; 4] = ["auto", "1/k", "sqrt(k)/k", "1"];

    /// The name, as in `weight = "..."`.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

impl Serialize for Weight {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A weight or a grace period as written: text, or a number (`weight = 1`,
/// `async-diloco:weight=1` in a compare spec, `grace = 0.5`).
#[derive(Deserialize)]
#[serde(untagged)]
enum TextOrNumber {
    Text(String),
    Number(f64),
}

impl<'de> Deserialize<'de> for Weight {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Weight, D::Error> {
        let given = match TextOrNumber::deserialize(d)? {
            TextOrNumber::Number(1.0) => return Ok(Weight::One),
            TextOrNumber::Number(x) => x.to_string(),
            TextOrNumber::Text(t) => t,
        };
        match Weight::NAMES.iter().position(|n| *n == given.replace(' ', "")) {
            Some(i) => Ok([Weight::Auto, Weight::InvK, Weight::SqrtKOverK, Weight::One][i]),
            None => Err(serde::de::Error::custom(format!(
                "weight must be one of \"{}\", got \"{given}\"; e.g. weight = \"1/k\" (flag --weight 1/k)",
                Weight::NAMES.join("\", \"")
            ))),
        }
    }
}

/// `grace`: seconds, or `"auto"` (= unset).
fn grace_de<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<f64>, D::Error> {
    match TextOrNumber::deserialize(d)? {
        TextOrNumber::Number(x) => Ok(Some(x)),
        TextOrNumber::Text(t) if t == "auto" => Ok(None),
        TextOrNumber::Text(t) => Err(serde::de::Error::custom(format!(
            "grace must be seconds >= 0 or \"auto\", got \"{t}\"; e.g. grace = 0.5 (flag --grace 0.5)"
        ))),
    }
}

fn grace_ser<S: Serializer>(g: &Option<f64>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match g {
        Some(x) => s.serialize_f64(*x),
        None => s.serialize_str("auto"),
    }
}

impl Default for AsyncDilocoSettings {
    fn default() -> Self {
        let d = DilocoSettings::default();
        AsyncDilocoSettings {
            h: d.h,
            outer: d.outer,
            outer_lr: None,
            outer_momentum: d.outer_momentum,
            dn_buffer: d.dn_buffer,
            dn_c: d.dn_c,
            weight: Weight::Auto,
            grace: None,
            dylu: false,
            shards: None,
            fixed_shards: false,
            outer_wire: None,
            error_feedback: d.error_feedback,
            error_decay: d.error_decay,
        }
    }
}

impl AsyncDilocoSettings {
    /// The outer learning rate: as set, or the default for `outer`.
    pub fn outer_lr(&self) -> f32 {
        let default = match self.outer {
            OuterKind::Nesterov | OuterKind::SgdMomentum => MOMENTUM_OUTER_LR,
            OuterKind::Sgd | OuterKind::Dn => DilocoSettings::default().outer_lr,
        };
        self.outer_lr.unwrap_or(default)
    }

    /// The server's outer optimizer for `workers` workers (DN's N unset: `workers`).
    pub fn outer_config(&self, workers: usize) -> OuterConfig {
        self.diloco().outer_config(workers)
    }

    /// The grace period of the next group: as set, or (`"auto"`) 0 without
    /// DyLU and with it `slowest_step_s`, one inner step of the slowest live
    /// worker (0 while unknown). With DyLU each worker's round is meant to
    /// end when the fastest's does, but eq. 6's floor lets worker w end up
    /// to one of its own steps earlier, and arrivals differ by rounding
    /// even when the steps divide exactly (0.9999999999999999 s and 1.0 s):
    /// one step of the slowest covers both, so each DyLU round is one group.
    pub fn grace_s(&self, slowest_step_s: Option<f64>) -> f64 {
        match (self.grace, self.dylu) {
            (Some(g), _) => g,
            (None, false) => 0.0,
            (None, true) => slowest_step_s.unwrap_or(0.0),
        }
    }

    /// The keys shared with synchronous DiLoCo, as its settings.
    pub fn diloco(&self) -> DilocoSettings {
        DilocoSettings {
            h: self.h,
            outer: self.outer,
            outer_lr: self.outer_lr(),
            outer_momentum: self.outer_momentum,
            dn_buffer: self.dn_buffer,
            dn_c: self.dn_c,
            outer_wire: self.outer_wire,
            error_feedback: self.error_feedback,
            error_decay: self.error_decay,
        }
    }

    /// Checks the ranges; errors name the key, its flag and a valid example.
    pub fn validate(&self) -> Result<()> {
        if self.h == 0 {
            bail!("[methods.async-diloco]: h must be at least 1 (inner steps per round), e.g. h = 50 (flag --h 50)");
        }
        if let Some(g) = self.grace.filter(|g| !(*g >= 0.0 && g.is_finite())) {
            bail!("[methods.async-diloco]: grace must be >= 0 seconds, got {g}; e.g. grace = 0.5 (flag --grace 0.5), or leave it out (\"auto\")");
        }
        if self.shards == Some(0) {
            bail!("[methods.async-diloco]: shards must be at least 1, e.g. shards = 4 (flag --shards 4); leave it out for one per worker");
        }
        self.diloco().check("async-diloco")
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
    write!(f, ", weight {}", s.weight.name())?;
    match s.grace {
        Some(g) => write!(f, ", grace {g} s")?,
        None => f.write_str(", grace auto")?,
    }
    f.write_str(if s.dylu { ", dylu" } else { "" })?;
    match (s.shards, s.fixed_shards) {
        (_, true) => f.write_str(", fixed shards")?,
        (Some(n), false) => write!(f, ", {n} shards")?,
        (None, false) => (),
    }
    super::settings::describe_wire(&s.diloco(), f)?;
    f.write_str(")")
}

#[cfg(test)]
#[path = "async_settings_tests.rs"]
mod tests;
