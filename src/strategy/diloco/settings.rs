//! Settings of DiLoCo (`[methods.diloco]`).
//!
//! Defaults are the DiLoCo setting async-local-sgd.txt builds on: `h = 50`
//! inner steps per round (Sec. 4: "We use inner steps = 50 across all
//! workers in all experiments by default"), Nesterov outer optimizer with
//! outer lr 0.7 and momentum 0.9 (see `optim/outer.rs` for the sources).
//! The inner optimizer is the run's optimizer (`[train.optimizer]`, AdamW
//! by default, App. 10.1).

use crate::comm::codec::OuterWire;
use crate::optim::{OuterConfig, OuterKind};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// The keys `[methods.diloco]` accepts (strategy/method.rs): the fields
/// below, checked by `the_keys_method_rs_accepts_are_the_fields`.
pub const KEYS: &[&str] =
    &["h", "outer", "outer_lr", "outer_momentum", "dn_buffer", "dn_c", "outer_wire", "error_feedback", "error_decay"];

/// DiLoCo's settings (`[methods.diloco]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DilocoSettings {
    /// Inner steps per outer round H, >= 1. Flag `--h`. Default 50 (the paper's).
    pub h: u64,
    /// Outer optimizer: `nesterov`, `sgd`, `sgd-momentum` or `dn` (Delayed
    /// Nesterov, Algorithm 3). Flag `--outer`. Default `nesterov`.
    pub outer: OuterKind,
    /// Outer learning rate eps, > 0. Flag `--outer-lr`. Default 0.7 (DiLoCo's).
    pub outer_lr: f32,
    /// Outer momentum beta, in [0, 1). Flag `--outer-momentum`. Default 0.9 (DiLoCo's).
    pub outer_momentum: f32,
    /// `dn`: buffer size N >= 1. Flag `--dn-buffer`. Default unset: N = the
    /// number of workers (the paper's Table 5 "delay period 4, 8, 16" with
    /// 4, 8, 16 workers in Table 2; footnote 5: with equal speeds DN and
    /// DiLoCo then "reduce to the same"). Before issue 26: 4.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dn_buffer: Option<u64>,
    /// `dn`: momentum activation c in [0, 1/N]. Flag `--dn-c`. Default 0 (Algorithm 3).
    pub dn_c: f32,
    /// How the pseudo-gradient travels. Unset (the default, DiLoCo's): in
    /// the run's wire dtype (`--wire`), averaged by an all-reduce. `"f32"`,
    /// `"bf16"`, `"int8"`, `"fp4"` or `"topk:K+2bit"` (comm/codec): encoded,
    /// all-gathered, and averaged by every worker in rank order; the outer
    /// step runs in f32 either way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outer_wire: Option<OuterWire>,
    /// With `outer_wire` set: add what the last message left out to the
    /// next pseudo-gradient (error feedback, comm/codec/feedback.rs).
    /// Default true: SparseLoCo's top-k needs it to converge.
    pub error_feedback: bool,
    /// With error feedback: beta in [0, 1], the share of the residual the
    /// next message carries (e <- beta e + Delta, comm/codec/feedback.rs).
    /// Default 1 (classic error feedback, nothing dropped). SparseLoCo
    /// (arXiv 2508.15706) decays it, beta < 1, with `outer = "sgd"`: the
    /// accumulator then stands in for the outer momentum.
    #[serde(skip_serializing_if = "super::settings::keeps_whole_residual")]
    pub error_decay: f32,
}

impl Default for DilocoSettings {
    fn default() -> Self {
        let o = OuterConfig::default();
        DilocoSettings {
            h: 50,
            outer: o.kind,
            outer_lr: o.lr,
            outer_momentum: o.momentum,
            dn_buffer: None,
            dn_c: o.dn_c,
            outer_wire: None,
            error_feedback: true,
            error_decay: 1.0,
        }
    }
}

impl DilocoSettings {
    /// The outer optimizer's configuration for `workers` workers (DN's N
    /// unset: `workers`).
    pub fn outer_config(&self, workers: usize) -> OuterConfig {
        OuterConfig {
            kind: self.outer,
            lr: self.outer_lr,
            momentum: self.outer_momentum,
            dn_buffer: self.dn_buffer.unwrap_or(workers.max(1) as u64),
            dn_c: self.dn_c,
        }
    }

    /// The outer optimizer's ranges, workers unknown: an unset `dn_buffer`
    /// is checked as N = 1 here (c <= 1) and with the run's workers by
    /// [`DilocoSettings::check_workers`].
    pub(super) fn check(&self, method: &str) -> Result<()> {
        if !(0.0..=1.0).contains(&self.error_decay) {
            bail!(
                "[methods.{method}]: error_decay must be in [0, 1] (the share of the residual kept), got {}, e.g. error_decay = 0.95",
                self.error_decay
            );
        }
        if self.error_decay != 1.0 && (self.outer_wire.is_none() || !self.error_feedback) {
            bail!(
                "[methods.{method}]: error_decay = {} decays the error-feedback residual, which needs a compressed outer_wire and error_feedback = true; add outer_wire = \"topk:64+2bit\", or leave error_decay out",
                self.error_decay
            );
        }
        self.outer_config(1).validate(method)
    }

    /// How a compressed pseudo-gradient keeps what it left out: `Some(beta)`
    /// with error feedback, `None` without ([`crate::comm::codec::ErrorFeedback::new`]).
    pub fn feedback(&self) -> Option<f32> {
        self.error_feedback.then_some(self.error_decay)
    }

    /// The outer optimizer's ranges with `workers` workers (`train` checks
    /// this before anything is written): c <= 1/N with N = workers when
    /// `dn_buffer` is unset.
    pub fn check_workers(&self, method: &str, workers: usize) -> Result<()> {
        let r = self.outer_config(workers).validate(method);
        match (r, self.dn_buffer) {
            (Err(e), None) => Err(e.context(format!(
                "[methods.{method}]: dn_buffer is unset, so N = the {workers} workers; set dn_c <= 1/{workers}, or dn_buffer"
            ))),
            (r, _) => r,
        }
    }
}

impl crate::strategy::local::settings::Validate for DilocoSettings {
    fn validate(&self) -> Result<()> {
        if self.h == 0 {
            bail!("[methods.diloco]: h must be at least 1 (inner steps per outer round), e.g. h = 50 (flag --h 50)");
        }
        self.check("diloco")
    }
}

/// Parses `[methods.diloco]`; an outer optimizer that does not exist is
/// named with the valid ones.
pub fn parse(table: toml::Table) -> Result<DilocoSettings> {
    check_outer_name(&table, "diloco", "nesterov")?;
    let s: DilocoSettings =
        table.try_into().map_err(|e: toml::de::Error| anyhow::anyhow!("[methods.diloco]: {}", e.message()))?;
    crate::strategy::local::settings::checked(s)
}

/// `outer` in `[methods.METHOD]`, if given, must name an outer optimizer:
/// the error lists the valid ones and shows `example`. Checked before
/// serde so the message is ours, not serde's "unknown variant".
pub(super) fn check_outer_name(table: &toml::Table, method: &str, example: &str) -> Result<()> {
    if let Some(v) = table.get("outer") {
        if !v.as_str().is_some_and(|s| OuterKind::NAMES.contains(&s)) {
            bail!(
                "[methods.{method}]: outer {v} does not exist: choose one of {}, e.g. outer = \"{example}\" (flag --outer {example})",
                OuterKind::NAMES.join(", ")
            );
        }
    }
    Ok(())
}

/// `error_decay` at its default (1) is left out of a written config, so
/// runs from before the key existed keep their identity.
pub(super) fn keeps_whole_residual(beta: &f32) -> bool {
    *beta == 1.0
}

/// How DiLoCo is shown (banner, summaries).
pub fn describe(s: &DilocoSettings, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    f.write_str("diloco (")?;
    describe_round(s, f)?;
    describe_wire(s, f)?;
    f.write_str(")")
}

/// `, outer_wire W + error feedback (decay B)` when the pseudo-gradient is
/// compressed: what every DiLoCo variant shows alike.
pub(super) fn describe_wire(s: &DilocoSettings, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    let Some(w) = s.outer_wire else { return Ok(()) };
    match s.feedback() {
        None => write!(f, ", outer_wire {w}"),
        Some(1.0) => write!(f, ", outer_wire {w} + error feedback"),
        Some(b) => write!(f, ", outer_wire {w} + error feedback (decay {b})"),
    }
}

/// `h H, outer KIND lr LR` and the outer optimizer's own knobs: what sync
/// and async DiLoCo show alike.
pub(super) fn describe_round(s: &DilocoSettings, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    write!(f, "h {}, outer {} lr {}", s.h, s.outer.name(), s.outer_lr)?;
    match s.outer {
        OuterKind::Sgd => Ok(()),
        OuterKind::Dn => match s.dn_buffer {
            Some(n) => write!(f, ", beta {}, N {n}, c {}", s.outer_momentum, s.dn_c),
            None => write!(f, ", beta {}, N workers, c {}", s.outer_momentum, s.dn_c),
        },
        _ => write!(f, ", beta {}", s.outer_momentum),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn err(text: &str) -> String {
        format!("{:#}", parse(text.parse().unwrap()).unwrap_err())
    }

    #[test]
    fn defaults_and_bad_values_name_the_key_and_an_example() {
        let d = parse(toml::Table::new()).unwrap();
        assert_eq!((d.h, d.outer, d.outer_lr, d.outer_momentum), (50, OuterKind::Nesterov, 0.7, 0.9));
        assert_eq!((d.dn_buffer, d.outer_config(8).dn_buffer, d.outer_config(3).dn_buffer), (None, 8, 3));
        let s = parse("outer = \"dn\"\ndn_buffer = 2\ndn_c = 0.5\nh = 3".parse().unwrap()).unwrap();
        assert_eq!((s.outer, s.dn_buffer, s.dn_c, s.h), (OuterKind::Dn, Some(2), 0.5, 3));
        assert_eq!(s.outer_config(8).dn_buffer, 2);
        // dn_c = 0.5 with N unset: fine at parse (c <= 1), refused with 4 workers at setup.
        let c = parse("outer = \"dn\"\ndn_c = 0.5".parse().unwrap()).unwrap();
        assert!(c.check_workers("diloco", 2).is_ok());
        let e = format!("{:#}", c.check_workers("diloco", 4).unwrap_err());
        assert!(e.contains("N = the 4 workers") && e.contains("dn_c must be in [0, 1/N] = [0, 0.25]"), "{e}");
        for (text, needles) in [
            ("h = 0", &["[methods.diloco]: h must be at least 1", "h = 50"][..]),
            ("dn_buffer = 0", &["dn_buffer must be at least 1", "--dn-buffer 4"]),
            ("dn_buffer = 4\ndn_c = 0.3", &["dn_c must be in [0, 1/N] = [0, 0.25]"]),
            ("outer_lr = -1.0", &["outer_lr must be > 0"]),
            ("outer = \"adam\"", &["outer \"adam\" does not exist: choose one of sgd, sgd-momentum, nesterov, dn"]),
            ("h = -1", &["[methods.diloco]:"]),
            ("outer_wire = \"int8\"\nerror_decay = 1.5", &["error_decay must be in [0, 1]", "error_decay = 0.95"]),
            (
                "error_decay = 0.9",
                &["error_decay = 0.9 decays the error-feedback residual", "outer_wire = \"topk:64+2bit\""],
            ),
            (
                "outer_wire = \"int8\"\nerror_feedback = false\nerror_decay = 0.9",
                &["needs a compressed outer_wire and error_feedback = true"],
            ),
        ] {
            let e = err(text);
            for n in needles {
                assert!(e.contains(n), "{text}: {e}");
            }
        }
    }

    #[test]
    fn error_decay_reaches_the_sender_and_the_banner_and_leaves_old_configs_alone() {
        struct Shown(DilocoSettings);
        impl std::fmt::Display for Shown {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                describe(&self.0, f)
            }
        }
        let s = parse("outer = \"sgd\"\nouter_wire = \"topk:64+2bit\"\nerror_decay = 0.95".parse().unwrap()).unwrap();
        assert_eq!(s.feedback(), Some(0.95));
        let shown = Shown(s.clone()).to_string();
        assert!(shown.ends_with("outer_wire topk:64+2bit + error feedback (decay 0.95))"), "{shown}");
        let off = DilocoSettings { error_feedback: false, ..s.clone() };
        assert_eq!((off.feedback(), Shown(off).to_string().contains("error feedback")), (None, false));
        // The default (1) is not written, so a run from before the key keeps its identity.
        let d = DilocoSettings { outer_wire: s.outer_wire, ..DilocoSettings::default() };
        assert!(!toml::to_string(&d).unwrap().contains("error_decay"));
        assert!(toml::to_string(&s).unwrap().contains("error_decay = 0.9"));
    }

    #[test]
    fn the_keys_method_rs_accepts_are_the_fields() {
        let s = DilocoSettings {
            dn_buffer: Some(2),
            outer_wire: Some(OuterWire::Int8),
            error_decay: 0.5,
            ..DilocoSettings::default()
        };
        assert_keys_are_fields(&s, KEYS);
    }

    /// Test helper: the keys `settings` writes (every optional field set) are
    /// `keys`, in any order.
    pub(in crate::strategy::diloco) fn assert_keys_are_fields(settings: &impl Serialize, keys: &[&str]) {
        let v = toml::Value::try_from(settings).unwrap();
        let mut got: Vec<&str> = v.as_table().unwrap().keys().map(String::as_str).collect();
        let mut want = keys.to_vec();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }
}
