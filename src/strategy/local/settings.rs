//! Settings of the local-update methods (`[methods.local-sgd]`,
//! `[methods.overlap-local-sgd]`, `[methods.slowmo]`, `[methods.co2]`).
//!
//! Defaults come from the papers where they state one; where they do not,
//! the value is our choice and says so:
//!
//! - `tau = 12`: our choice. It is the CO2 paper's setting for the 7B model
//!   on RDMA (co2.txt, Sec. 4.3, Table 3; App. A.3.3 uses the same tau for
//!   every local method of a task); the best tau depends on the cluster.
//! - `outer_lr = 1.0`, `outer_momentum = 0.5`: co2.txt states no values;
//!   its implementation is built on FairScale 0.4.13 (App. A.1), whose
//!   SlowMo defaults are `slowmo_lr = 1.0`, `slowmo_momentum = 0.5`. Our
//!   choice for slowmo and co2 alike.
//! - `clip = 0.1` (co2's phi, Sec. 3.3): our choice; the paper only says
//!   phi > 0. With AdamW inner steps each coordinate moves at most about
//!   `lr` per step, so at the default peak lr 3e-3, tau 12 and momentum
//!   0.5 the outer momentum stays near `tau * lr / (1 - beta) = 0.072`:
//!   0.1 cuts outliers, not ordinary rounds (raise it with tau or lr).
//! - `pull = 0.5` (overlap-local-sgd's alpha): our choice (the paper is not
//!   in shared/papers); half way between keeping the local model (0) and
//!   replacing it by the one-round-stale anchor (1).

use anyhow::{bail, Result};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The default number of local steps per outer round.
pub const DEFAULT_TAU: u64 = 12;

fn tau() -> u64 {
    DEFAULT_TAU
}

/// What local-sgd does with each worker's inner optimizer state at a sync.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InnerState {
    /// Each worker keeps its own moments (the default).
    #[default]
    Keep,
    /// Fresh optimizer state after every sync (step count back to 0).
    Reset,
    /// The moments are averaged too: one more all-reduce per sync.
    Average,
}

/// Local-SGD's settings (`[methods.local-sgd]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalSgdSettings {
    /// Local steps per outer round. Flag `--tau`. Default 12 (our choice).
    pub tau: u64,
    /// Inner optimizer state at a sync: `keep`, `reset` or `average`.
    /// Flag `--inner-state`. Default `keep`.
    pub inner_state: InnerState,
}

impl Default for LocalSgdSettings {
    fn default() -> Self {
        Self { tau: tau(), inner_state: InnerState::Keep }
    }
}

/// Overlap-Local-SGD's settings (`[methods.overlap-local-sgd]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OverlapLocalSgdSettings {
    /// Local steps per outer round. Flag `--tau`. Default 12 (our choice).
    pub tau: u64,
    /// Pull toward the anchor, `x <- x - pull * (x - z)`, in (0, 1].
    /// Flag `--pull`. Default 0.5 (our choice).
    pub pull: f32,
}

impl Default for OverlapLocalSgdSettings {
    fn default() -> Self {
        Self { tau: tau(), pull: 0.5 }
    }
}

/// SlowMo's settings (`[methods.slowmo]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlowMoSettings {
    /// Local steps per outer round. Flag `--tau`. Default 12 (our choice).
    pub tau: u64,
    /// Outer learning rate alpha, > 0. Flag `--outer-lr`. Default 1.0.
    pub outer_lr: f32,
    /// Slow momentum beta, in [0, 1). Flag `--outer-momentum`. Default 0.5.
    pub outer_momentum: f32,
}

impl Default for SlowMoSettings {
    fn default() -> Self {
        Self { tau: tau(), outer_lr: 1.0, outer_momentum: 0.5 }
    }
}

/// CO2's outer momentum clipping threshold phi (Sec. 3.3), or off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Clip {
    /// `Clip(m, phi) = max(-phi, min(m, phi))`, coordinate-wise.
    Phi(f32),
    /// No clipping (Table 4's "CO2 w/o Clipping").
    Off,
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
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(f64),
            Text(String),
        }
        match Raw::deserialize(d).map_err(|_| serde::de::Error::custom("clip must be a number > 0 or \"off\""))? {
            Raw::Num(x) => Ok(Clip::Phi(x as f32)),
            Raw::Text(t) if t == "off" => Ok(Clip::Off),
            Raw::Text(t) => Err(serde::de::Error::custom(format!("clip must be a number > 0 or \"off\", not {t:?}"))),
        }
    }
}

/// CO2's settings (`[methods.co2]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Co2Settings {
    /// Local steps per outer round. Flag `--tau`. Default 12 (our choice;
    /// the paper's RDMA setting).
    pub tau: u64,
    /// Outer learning rate alpha, > 0. Flag `--outer-lr`. Default 1.0.
    pub outer_lr: f32,
    /// Outer momentum beta, in [0, 1). Flag `--outer-momentum`. Default 0.5.
    pub outer_momentum: f32,
    /// Staleness gap penalty (eq. 3). Flag `--penalty on|off`. Default on.
    pub penalty: bool,
    /// Outer momentum clipping threshold phi > 0, or `"off"`. Flag
    /// `--outer-clip PHI|off`. Default 0.1 (our choice).
    pub clip: Clip,
    /// Outer state sharded ZeRO-style: reduce-scatter, outer step on the
    /// owned slice, all-gather. Flag `--shard-outer`. Default false.
    pub shard_outer: bool,
}

impl Default for Co2Settings {
    fn default() -> Self {
        Self { tau: tau(), outer_lr: 1.0, outer_momentum: 0.5, penalty: true, clip: Clip::Phi(0.1), shard_outer: false }
    }
}

fn check_tau(name: &str, tau: u64) -> Result<()> {
    if tau == 0 {
        bail!("[methods.{name}]: tau must be at least 1 (local steps per outer round), e.g. tau = 12 (flag --tau 12)");
    }
    Ok(())
}

fn check_outer(name: &str, lr: f32, momentum: f32) -> Result<()> {
    if !(lr > 0.0 && lr.is_finite()) {
        bail!("[methods.{name}]: outer_lr must be > 0, got {lr}; e.g. outer_lr = 1.0 (flag --outer-lr 1.0)");
    }
    if !((0.0..1.0).contains(&momentum)) {
        bail!(
            "[methods.{name}]: outer_momentum must be in [0, 1), got {momentum}; e.g. outer_momentum = 0.5 (flag --outer-momentum 0.5)"
        );
    }
    Ok(())
}

impl Validate for LocalSgdSettings {
    fn validate(&self) -> Result<()> {
        check_tau("local-sgd", self.tau)
    }
}

impl Validate for OverlapLocalSgdSettings {
    fn validate(&self) -> Result<()> {
        check_tau("overlap-local-sgd", self.tau)?;
        if !(self.pull > 0.0 && self.pull <= 1.0) {
            bail!(
                "[methods.overlap-local-sgd]: pull must be in (0, 1], got {}; e.g. pull = 0.5 (flag --pull 0.5)",
                self.pull
            );
        }
        Ok(())
    }
}

impl Validate for SlowMoSettings {
    fn validate(&self) -> Result<()> {
        check_tau("slowmo", self.tau)?;
        check_outer("slowmo", self.outer_lr, self.outer_momentum)
    }
}

impl Validate for Co2Settings {
    fn validate(&self) -> Result<()> {
        check_tau("co2", self.tau)?;
        check_outer("co2", self.outer_lr, self.outer_momentum)?;
        if let Clip::Phi(p) = self.clip {
            if !(p > 0.0 && p.is_finite()) {
                bail!("[methods.co2]: clip must be > 0, got {p}; e.g. clip = 0.1, or clip = \"off\" (flag --outer-clip 0.1)");
            }
        }
        Ok(())
    }
}

/// Range checks of a method's settings.
pub trait Validate {
    /// Checks the ranges; errors name the key and a valid example.
    fn validate(&self) -> Result<()>;
}

/// `s` if its values are in range.
pub fn checked<T: Validate>(s: T) -> Result<T> {
    s.validate().map(|_| s)
}

// How each local-update method is shown (banner, summaries).

impl std::fmt::Display for LocalSgdSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "local-sgd (tau {}, inner state {})", self.tau, format!("{:?}", self.inner_state).to_lowercase())
    }
}

impl std::fmt::Display for OverlapLocalSgdSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "overlap-local-sgd (tau {}, pull {})", self.tau, self.pull)
    }
}

impl std::fmt::Display for SlowMoSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "slowmo (tau {}, alpha {}, beta {})", self.tau, self.outer_lr, self.outer_momentum)
    }
}

impl std::fmt::Display for Co2Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let clip = match self.clip {
            Clip::Phi(p) => format!("clip {p}"),
            Clip::Off => "no clip".into(),
        };
        let penalty = if self.penalty { "penalty" } else { "no penalty" };
        let shard = if self.shard_outer { ", outer state sharded" } else { "" };
        write!(
            f,
            "co2 (tau {}, alpha {}, beta {}, {penalty}, {clip}{shard})",
            self.tau, self.outer_lr, self.outer_momentum
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn co2(text: &str) -> Result<Co2Settings> {
        let s: Co2Settings = toml::from_str(text)?;
        s.validate().map(|_| s)
    }

    #[test]
    fn bad_values_name_the_key_and_an_example() {
        for (text, needles) in [
            ("tau = 0", &["tau must be at least 1", "tau = 12"][..]),
            ("outer_lr = 0.0", &["outer_lr must be > 0", "outer_lr = 1.0"]),
            ("outer_lr = -1.0", &["outer_lr must be > 0"]),
            ("outer_momentum = 1.0", &["outer_momentum must be in [0, 1)", "outer_momentum = 0.5"]),
            ("outer_momentum = -0.1", &["outer_momentum must be in [0, 1)"]),
            ("clip = 0.0", &["clip must be > 0", "clip = \"off\""]),
            ("clip = -2", &["clip must be > 0"]),
        ] {
            let e = format!("{:#}", co2(text).unwrap_err());
            for n in needles {
                assert!(e.contains(n), "{text}: {e}");
            }
        }
        let e = format!("{:#}", toml::from_str::<Co2Settings>("clip = \"sometimes\"").unwrap_err());
        assert!(e.contains("clip must be a number > 0 or \"off\""), "{e}");
        let s: OverlapLocalSgdSettings = toml::from_str("pull = 0.0").unwrap();
        assert!(s.validate().unwrap_err().to_string().contains("pull must be in (0, 1]"));
        let s: SlowMoSettings = toml::from_str("outer_momentum = 1.5").unwrap();
        assert!(s.validate().unwrap_err().to_string().contains("[methods.slowmo]: outer_momentum"));
        let s: LocalSgdSettings = toml::from_str("tau = 0").unwrap();
        assert!(s.validate().unwrap_err().to_string().contains("[methods.local-sgd]: tau"));
    }

    #[test]
    fn clip_reads_a_number_or_off_and_writes_it_back() {
        assert_eq!(co2("clip = 0.25").unwrap().clip, Clip::Phi(0.25));
        assert_eq!(co2("clip = 1").unwrap().clip, Clip::Phi(1.0));
        assert_eq!(co2("clip = \"off\"").unwrap().clip, Clip::Off);
        assert_eq!(co2("").unwrap(), Co2Settings::default());
        for c in [Clip::Off, Clip::Phi(0.5)] {
            let s = Co2Settings { clip: c, ..Co2Settings::default() };
            let back: Co2Settings = toml::from_str(&toml::to_string(&s).unwrap()).unwrap();
            assert_eq!(back, s);
        }
        let s: LocalSgdSettings = toml::from_str("inner_state = \"average\"").unwrap();
        assert_eq!(s.inner_state, InnerState::Average);
    }
}
