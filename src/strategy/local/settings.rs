//! Settings of the local-update methods (`[methods.local-sgd]`,
//! `[methods.overlap-local-sgd]`, `[methods.slowmo]`, `[methods.co2]`).
//!
//! Defaults come from the papers where they state one; where they do not,
//! the value is our choice and says so:
//!
//! - `tau = 12`: our choice. It is the CO2 paper's setting for the 7B model
//!   (co2.txt Table 3 on RDMA, Sec. 4.3; Table 7, TN-LLM 7B; App. A.3.3
//!   uses the same tau for every local method of a task); the paper used 3
//!   for GPT-2 Small and Medium and 6 for Large (Table 7), the released
//!   fairseq-CO2 defaults to 20; the best tau depends on the cluster.
//! - slowmo `outer_lr = 1.0`, `outer_momentum = 0.5`: FairScale's SlowMo
//!   class defaults (`slowmo_lr`, `slowmo_momentum`; weigao266/fairscale-CO2
//!   `gossip/distributed.py:179,182`), on which CO2's code is built
//!   (co2.txt App. A.1). CO2's own defaults: co2_settings.rs.
//! - co2 `clip = 0.1` (phi, Sec. 3.3): our choice; the paper only says
//!   phi > 0. With AdamW inner steps each coordinate moves at most about
//!   `lr` per step, so at the default peak lr 3e-3 and tau 12 a round's
//!   displacement is at most about `tau * lr = 0.036` per coordinate, and
//!   the outer momentum about that over `1 - beta` (0.072 at beta 0.5):
//!   0.1 cuts outliers, not ordinary rounds (raise it with tau or lr).
//! - `pull = 0.5` (overlap-local-sgd's alpha): our choice (the paper is not
//!   in shared/papers); half way between keeping the local model (0) and
//!   replacing it by the one-round-stale anchor (1).

pub use super::co2_settings::{auto_beta, Beta, Clip, Co2Mode, Co2Settings};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

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

pub(super) fn check_tau(name: &str, tau: u64) -> Result<()> {
    if tau == 0 {
        bail!("[methods.{name}]: tau must be at least 1 (local steps per outer round), e.g. tau = 12 (flag --tau 12)");
    }
    Ok(())
}

pub(super) fn check_outer(name: &str, lr: f32, momentum: f32) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_name_the_key_and_an_example() {
        // co2's own: co2_settings.rs.
        let s: OverlapLocalSgdSettings = toml::from_str("pull = 0.0").unwrap();
        assert!(s.validate().unwrap_err().to_string().contains("pull must be in (0, 1]"));
        let s: SlowMoSettings = toml::from_str("outer_momentum = 1.5").unwrap();
        let e = s.validate().unwrap_err().to_string();
        assert!(
            e.contains("[methods.slowmo]: outer_momentum must be in [0, 1)") && e.contains("outer_momentum = 0.5"),
            "{e}"
        );
        let s: SlowMoSettings = toml::from_str("outer_lr = 0.0").unwrap();
        assert!(s.validate().unwrap_err().to_string().contains("outer_lr must be > 0"));
        let s: LocalSgdSettings = toml::from_str("tau = 0").unwrap();
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("[methods.local-sgd]: tau must be at least 1") && e.contains("tau = 12"), "{e}");
    }

    #[test]
    fn inner_state_reads_its_three_words() {
        for (text, want) in [("keep", InnerState::Keep), ("reset", InnerState::Reset), ("average", InnerState::Average)]
        {
            let s: LocalSgdSettings = toml::from_str(&format!("inner_state = \"{text}\"")).unwrap();
            assert_eq!(s.inner_state, want);
        }
    }
}
