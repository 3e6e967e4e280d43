//! CO2's settings (`[methods.co2]`): two modes, each with its own defaults.
//!
//! - `mode = "paper"` (the default): Algorithm 1 of co2.txt (co2.rs): the
//!   one-round-stale outer step behind an asynchronous all-reduce, eq. 3's
//!   element-wise staleness gap penalty, the coordinate-wise clip.
//! - `mode = "reference"`: what the released code runs (co2_reference.rs):
//!   weigao266/fairscale-CO2 at 55aaca5,
//!   `fairscale/experimental/nn/data_parallel/gossip/co2.py`, driven by
//!   weigao266/fairseq-CO2 at 6375219: a blocking exact average, a constant
//!   gap penalty lambda, no clip.
//!
//! Defaults and where they come from (docs/methods.md has the full table):
//!
//! - `tau = 12` in both modes (settings.rs: the paper's RDMA setting,
//!   co2.txt Sec. 4.3 and Table 7's TN-LLM 7B; fairseq-CO2's
//!   `co2_outer_frequency` is 20, `fairseq/dataclass/configs.py:385`).
//! - paper: `outer_lr = 0.5`, `outer_momentum = 0`: tuned here
//!   (docs/results/co2.md, experiment 0; docs/decisions.md). co2.txt gives
//!   neither. The released code's alpha 1 with its beta sits at or past the
//!   edge of stability once the outer step is one round stale: on a
//!   quadratic, eq. 10 gives e_{t+1} = (1 + beta) e_t - (beta + alpha c) e_{t-1}
//!   (c: the share of the way to the optimum one inner loop covers), stable
//!   only while alpha c < 1 - beta, and an AdamW inner loop has c near 1.
//! - reference: `outer_lr = 1.0` (`co2.py:47`; fairseq never passes it),
//!   `outer_momentum = "auto"`: fairseq-CO2's rule by world size, 0 up to 16
//!   workers, 0.2 up to 32, 0.5 up to 64, 0.6 above
//!   (`fairseq/models/distributed_fairseq_model.py:140-148`; the authors'
//!   launch script sets 0.2, `co2_examples/run_co2_local.sh:36`),
//!   `gap_penalty = 1.0` (`co2.py:51`, `configs.py:373`).
//! - `penalty = true`, `clip = 0.1`: the paper mode's eq. 3 and Sec. 3.3;
//!   phi is our choice (settings.rs says why). Refused in reference mode,
//!   whose code has neither (its clip's result is thrown away,
//!   `co2.py:594-595`).

use super::settings::{check_outer, check_tau, Validate, DEFAULT_TAU};
use anyhow::{bail, Result};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Which CO2 runs: the paper's Algorithm 1 or the released code's algorithm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Co2Mode {
    /// co2.txt's Algorithm 1: asynchronous all-reduce, one-round-stale outer step, eq. 3, clip.
    #[default]
    Paper,
    /// fairscale-CO2's `co2.py`: blocking exact average, constant gap penalty, no clip.
    Reference,
}

/// CO2's outer momentum clipping threshold phi (Sec. 3.3), or off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Clip {
    /// `Clip(m, phi) = max(-phi, min(m, phi))`, coordinate-wise.
    Phi(f32),
    /// No clipping (Table 4's "CO2 w/o Clipping").
    Off,
}

/// An outer momentum beta: a number in [0, 1), or `"auto"`, fairseq-CO2's
/// rule by the number of workers ([`auto_beta`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Beta {
    /// This beta at any world size.
    Value(f32),
    /// [`auto_beta`] of the run's number of workers.
    Auto,
}

/// fairseq-CO2's outer momentum by world size (its GPUs; here the workers),
/// `fairseq/models/distributed_fairseq_model.py:140-148`, a copy of its
/// SlowMo rule (`:112-120`, "tuned on the En-De 16 dataset").
pub fn auto_beta(world: usize) -> f32 {
    match world {
        0..=16 => 0.0,
        17..=32 => 0.2,
        33..=64 => 0.5,
        _ => 0.6,
    }
}

impl Beta {
    /// The beta a run on `world` workers uses.
    pub fn at(self, world: usize) -> f32 {
        match self {
            Beta::Value(b) => b,
            Beta::Auto => auto_beta(world),
        }
    }
}

/// CO2's settings (`[methods.co2]`). Keys that belong to the other mode are
/// refused; the defaults depend on `mode` ([`Co2Settings::paper`],
/// [`Co2Settings::reference`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Raw", into = "Raw")]
pub struct Co2Settings {
    /// `"paper"` (Algorithm 1) or `"reference"` (the released code). Key
    /// only (`co2:mode=reference` in `compare`). Default `"paper"`.
    pub mode: Co2Mode,
    /// Local steps per outer round. Flag `--tau`. Default 12 in both modes
    /// (co2.txt Sec. 4.3, Table 7; the released fairseq default is 20).
    pub tau: u64,
    /// Outer learning rate alpha, > 0. Flag `--outer-lr`. Default 0.5 in
    /// paper mode (tuned: docs/results/co2.md, experiment 0), 1.0 in
    /// reference mode (`co2.py:47`).
    pub outer_lr: f32,
    /// Outer momentum beta in [0, 1), or `"auto"` (0 up to 16 workers, 0.2
    /// up to 32, 0.5 up to 64, 0.6 above). Flag `--outer-momentum` (a
    /// number). Default 0 in paper mode (tuned, as `outer_lr`), `"auto"` in
    /// reference mode (fairseq-CO2 `distributed_fairseq_model.py:140-148`).
    pub outer_momentum: Beta,
    /// Paper mode: eq. 3's element-wise staleness gap penalty. Flag
    /// `--penalty on|off`. Default on (co2.txt Sec. 3.2).
    pub penalty: bool,
    /// Paper mode: the outer momentum clipping threshold phi > 0, or
    /// `"off"`. Flag `--outer-clip PHI|off`. Default 0.1 (our choice; the
    /// paper says phi > 0, Sec. 3.3).
    pub clip: Clip,
    /// Reference mode: the constant gap penalty lambda > 0 that divides the
    /// displacement, `m = beta m + (x_old - xbar) / lambda`. Key only.
    /// Default 1.0 (`co2.py:51`; fairseq `configs.py:373`).
    pub gap_penalty: f32,
    /// Paper mode: outer state sharded ZeRO-style: reduce-scatter, outer
    /// step on the owned slice, all-gather. Flag `--shard-outer`. Default false.
    pub shard_outer: bool,
}

impl Co2Settings {
    /// Paper mode's defaults.
    pub fn paper() -> Self {
        Co2Settings {
            mode: Co2Mode::Paper,
            tau: DEFAULT_TAU,
            outer_lr: 0.5,
            outer_momentum: Beta::Value(0.0),
            penalty: true,
            clip: Clip::Phi(0.1),
            gap_penalty: 1.0,
            shard_outer: false,
        }
    }

    /// Reference mode's defaults (no penalty, no clip).
    pub fn reference() -> Self {
        Co2Settings {
            mode: Co2Mode::Reference,
            outer_lr: 1.0,
            outer_momentum: Beta::Auto,
            penalty: false,
            clip: Clip::Off,
            ..Co2Settings::paper()
        }
    }

    /// Whether this is the released code's algorithm.
    pub fn is_reference(&self) -> bool {
        self.mode == Co2Mode::Reference
    }
}

impl Default for Co2Settings {
    fn default() -> Self {
        Co2Settings::paper()
    }
}

/// `[methods.co2]` as written: every key optional, so that the defaults
/// can follow `mode` and a key of the other mode can be refused.
#[derive(Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<Co2Mode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tau: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outer_lr: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outer_momentum: Option<Beta>,
    #[serde(skip_serializing_if = "Option::is_none")]
    penalty: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clip: Option<Clip>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gap_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shard_outer: Option<bool>,
}

impl TryFrom<Raw> for Co2Settings {
    type Error = String;
    fn try_from(r: Raw) -> std::result::Result<Self, String> {
        let mode = r.mode.unwrap_or_default();
        let d = match mode {
            Co2Mode::Paper => Co2Settings::paper(),
            Co2Mode::Reference => Co2Settings::reference(),
        };
        let other_modes: &[(&str, bool)] = match mode {
            Co2Mode::Paper => &[("gap_penalty", r.gap_penalty.is_some())],
            Co2Mode::Reference => &[
                ("penalty", r.penalty.is_some()),
                ("clip", r.clip.is_some()),
                ("shard_outer", r.shard_outer == Some(true)),
            ],
        };
        if let Some((k, _)) = other_modes.iter().find(|(_, set)| *set) {
            return Err(match mode {
                Co2Mode::Paper => format!(
                    "`{k}` is a setting of mode = \"reference\" (the released code's constant lambda); the paper's mode penalises staleness by eq. 3 (penalty = true): add mode = \"reference\" (co2:mode=reference), or drop {k}"
                ),
                Co2Mode::Reference => format!(
                    "`{k}` is a setting of mode = \"paper\": the released code (mode = \"reference\") has no eq. 3 penalty (a constant gap_penalty instead), its clip is computed and thrown away (co2.py:594-595), and its outer state is sharded by the code itself; drop {k}, or use mode = \"paper\""
                ),
            });
        }
        Ok(Co2Settings {
            mode,
            tau: r.tau.unwrap_or(d.tau),
            outer_lr: r.outer_lr.unwrap_or(d.outer_lr),
            outer_momentum: r.outer_momentum.unwrap_or(d.outer_momentum),
            penalty: r.penalty.unwrap_or(d.penalty),
            clip: r.clip.unwrap_or(d.clip),
            gap_penalty: r.gap_penalty.unwrap_or(d.gap_penalty),
            shard_outer: r.shard_outer.unwrap_or(d.shard_outer),
        })
    }
}

impl From<Co2Settings> for Raw {
    fn from(s: Co2Settings) -> Raw {
        let paper = s.mode == Co2Mode::Paper;
        Raw {
            mode: Some(s.mode),
            tau: Some(s.tau),
            outer_lr: Some(s.outer_lr),
            outer_momentum: Some(s.outer_momentum),
            penalty: paper.then_some(s.penalty),
            clip: paper.then_some(s.clip),
            gap_penalty: (!paper).then_some(s.gap_penalty),
            shard_outer: paper.then_some(s.shard_outer),
        }
    }
}

/// A TOML value that is a number or one word (`clip = 0.1` / `"off"`,
/// `outer_momentum = 0.2` / `"auto"`).
#[derive(Deserialize)]
#[serde(untagged)]
enum NumOrWord {
    Num(f64),
    Word(String),
}

impl Serialize for Clip {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Clip::Phi(p) => s.serialize_f32(*p),
            Clip::Off => s.serialize_str("off"),
        }
    }
}

impl<'de> Deserialize<'de> for Clip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let bad = |t: &str| serde::de::Error::custom(format!("clip must be a number > 0 or \"off\"{t}"));
        match NumOrWord::deserialize(d).map_err(|_| bad(""))? {
            NumOrWord::Num(x) => Ok(Clip::Phi(x as f32)),
            NumOrWord::Word(t) if t == "off" => Ok(Clip::Off),
            NumOrWord::Word(t) => Err(bad(&format!(", not {t:?}"))),
        }
    }
}

impl Serialize for Beta {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Beta::Value(b) => s.serialize_f32(*b),
            Beta::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for Beta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let bad =
            |t: &str| serde::de::Error::custom(format!("outer_momentum must be a number in [0, 1) or \"auto\"{t}"));
        match NumOrWord::deserialize(d).map_err(|_| bad(""))? {
            NumOrWord::Num(x) => Ok(Beta::Value(x as f32)),
            NumOrWord::Word(t) if t == "auto" => Ok(Beta::Auto),
            NumOrWord::Word(t) => Err(bad(&format!(", not {t:?}"))),
        }
    }
}

impl Validate for Co2Settings {
    fn validate(&self) -> Result<()> {
        check_tau("co2", self.tau)?;
        let beta = match self.outer_momentum {
            Beta::Value(b) => b,
            Beta::Auto => 0.0,
        };
        check_outer("co2", self.outer_lr, beta)?;
        if let Clip::Phi(p) = self.clip {
            if !(p > 0.0 && p.is_finite()) {
                bail!("[methods.co2]: clip must be > 0, got {p}; e.g. clip = 0.1, or clip = \"off\" (flag --outer-clip 0.1)");
            }
        }
        if !(self.gap_penalty > 0.0 && self.gap_penalty.is_finite()) {
            bail!(
                "[methods.co2]: gap_penalty must be > 0, got {}; e.g. gap_penalty = 1.0 (the released code's default)",
                self.gap_penalty
            );
        }
        Ok(())
    }
}

impl std::fmt::Display for Co2Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let beta = match self.outer_momentum {
            Beta::Value(b) => format!("{b}"),
            Beta::Auto => "auto".into(),
        };
        let (tau, alpha) = (self.tau, self.outer_lr);
        if self.is_reference() {
            return write!(f, "co2 reference (tau {tau}, alpha {alpha}, beta {beta}, lambda {})", self.gap_penalty);
        }
        let clip = match self.clip {
            Clip::Phi(p) => format!("clip {p}"),
            Clip::Off => "no clip".into(),
        };
        let penalty = if self.penalty { "penalty" } else { "no penalty" };
        let shard = if self.shard_outer { ", outer state sharded" } else { "" };
        write!(f, "co2 (tau {tau}, alpha {alpha}, beta {beta}, {penalty}, {clip}{shard})")
    }
}
