//! Settings of Streaming DiLoCo (`[methods.streaming-diloco]`, arXiv
//! 2501.18512; docs/methods.md has the table with every source).
//!
//! The outer optimizer's keys mean what they mean for `diloco` (the same
//! `OuterConfig`, the same checks; `dn` takes DiLoCo's N = workers and
//! c = 0). Streaming adds the fragments P, the overlap tau and the mixing
//! factor alpha. The paper's values are as read from its abstract and
//! summaries (its full text was not at hand: docs/methods.md says what to
//! check); torchft's from `torchft/local_sgd.py`:
//!
//! - `h = 100`: the paper's H for Streaming DiLoCo (DiLoCo's own paper
//!   used 500, the async paper 50; ours for `diloco` is 50).
//! - `fragments = 2`: the paper sizes fragments in blocks (a fixed number
//!   of layers each, so P grows with depth); our presets have 2 to 6
//!   blocks, and 2 is the most the smallest (nano) allows. Our choice.
//! - `overlap` unset: 1, the paper's tau = 1 (one inner step of overlap
//!   already hides the latency of a far link; larger tau costs loss), or 0
//!   where H leaves no room for it (tau x P < H: `compare --h 2` with two
//!   fragments). torchft's `fragment_sync_delay` defaults to 0.
//! - `mix = 0.5`: the paper's alpha (its ablation finds 0.5 best once
//!   tau > 0; alpha = 0 is DiLoCo's "take the global value"). torchft's
//!   `fragment_update_alpha` defaults to 0.
//! - `fragment_pattern = "strided"`: the paper's (better than sequential
//!   in its ablation).
//! - `outer_wire` unset: the run's wire dtype, as `diloco` (the paper
//!   sends 4-bit E3M0: `outer_wire = "fp4"`; unset keeps a comparison with
//!   `diloco` about fragments and overlap only).
//! - `eager = false`: the Streaming DiLoCo paper's overlap; `true` is the
//!   eager updates of Kale, Douillard et al. (arXiv 2502.12996), as
//!   streaming.rs adapts them to tau steps (E1-E3).

use super::fragments::FragmentPattern;
use super::settings::{check_outer_name, describe_round, describe_wire, DilocoSettings};
use crate::comm::codec::OuterWire;
use crate::optim::{OuterConfig, OuterKind};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// The keys of `[methods.streaming-diloco]`.
pub const KEYS: &[&str] = &[
    "h",
    "outer",
    "outer_lr",
    "outer_momentum",
    "fragments",
    "overlap",
    "mix",
    "fragment_pattern",
    "outer_wire",
    "error_feedback",
    "error_decay",
    "eager",
];

/// Streaming DiLoCo's settings (`[methods.streaming-diloco]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamingSettings {
    /// Inner steps per outer round H: every fragment is synchronised once
    /// per H steps. Flag `--h`. Default 100 (the paper's Streaming DiLoCo runs).
    pub h: u64,
    /// Outer optimizer, per fragment: `nesterov`, `sgd`, `sgd-momentum` or
    /// `dn`. Flag `--outer`. Default `nesterov` (DiLoCo's, kept by the paper).
    pub outer: OuterKind,
    /// Outer learning rate eps, > 0. Flag `--outer-lr`. Default 0.7 (DiLoCo's).
    pub outer_lr: f32,
    /// Outer momentum beta, in [0, 1). Flag `--outer-momentum`. Default 0.9 (DiLoCo's).
    pub outer_momentum: f32,
    /// Fragments P, between 1 and the model's blocks; P = 1 is DiLoCo with
    /// overlap and mixing. Default 2 (ours: the paper sizes fragments in
    /// layers; 2 fits every preset).
    pub fragments: usize,
    /// Overlap tau: inner steps a fragment's outer gradient is in flight
    /// before its outer step; 0 <= tau and tau x P < H (it lands before the
    /// next fragment leaves). Default unset: 1 (the paper's), 0 where
    /// 1 x P >= H ([`StreamingSettings::overlap`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlap: Option<u64>,
    /// Mixing factor alpha in [0, 1]: on landing, theta_p = alpha
    /// theta_local_p + (1 - alpha) theta_outer_p. Default 0.5 (the paper's;
    /// torchft's default 0 takes the global value, as DiLoCo).
    pub mix: f32,
    /// How blocks are dealt to fragments: `strided` (block i to fragment
    /// i mod P) or `sequential`. Default `strided` (the paper's).
    pub fragment_pattern: FragmentPattern,
    /// How an outer gradient travels, as `diloco`'s: unset (the default)
    /// in the run's wire dtype by an all-reduce; `"f32"`, `"bf16"`,
    /// `"int8"`, `"fp4"` (the paper's 4-bit E3M0) or `"topk:K+2bit"`
    /// encoded per fragment and all-gathered. The outer step runs in f32.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outer_wire: Option<OuterWire>,
    /// With `outer_wire` set: a residual per fragment (error feedback).
    /// Default true, as `diloco`.
    pub error_feedback: bool,
    /// With error feedback: beta in [0, 1], as `diloco`'s. Default 1.
    #[serde(skip_serializing_if = "super::settings::keeps_whole_residual")]
    pub error_decay: f32,
    /// Eager updates (Kale, Douillard et al., arXiv 2502.12996): while a
    /// fragment's averaged outer gradient is in flight (the tau overlap
    /// steps), each worker applies a stand-in made of its own fresh outer
    /// gradient and the others' last landed share, and corrects to the
    /// average when it lands (streaming.rs, E1-E3). Needs tau >= 1 (with
    /// tau = 0 the average lands at once and eager changes nothing).
    /// Default false (the Streaming DiLoCo paper's plain overlap).
    pub eager: bool,
    /// Test knob, not a key: every fragment on offset 0 (all at the round's
    /// end), which with tau = 0 is DiLoCo with one outer step per fragment.
    #[serde(skip)]
    pub same_offset: bool,
}

impl Default for StreamingSettings {
    fn default() -> Self {
        let o = OuterConfig::default();
        StreamingSettings {
            h: 100,
            outer: o.kind,
            outer_lr: o.lr,
            outer_momentum: o.momentum,
            fragments: 2,
            overlap: None,
            mix: 0.5,
            fragment_pattern: FragmentPattern::Strided,
            outer_wire: None,
            error_feedback: true,
            error_decay: 1.0,
            eager: false,
            same_offset: false,
        }
    }
}

impl StreamingSettings {
    /// The DiLoCo settings of its outer optimizer and codec (dn: N = workers, c = 0).
    pub fn diloco(&self) -> DilocoSettings {
        DilocoSettings {
            h: self.h,
            outer: self.outer,
            outer_lr: self.outer_lr,
            outer_momentum: self.outer_momentum,
            outer_wire: self.outer_wire,
            error_feedback: self.error_feedback,
            error_decay: self.error_decay,
            ..DilocoSettings::default()
        }
    }

    /// tau: `overlap`, or unset 1 (the paper's) where 1 x P < H, else 0.
    pub fn overlap(&self) -> u64 {
        self.overlap.unwrap_or(u64::from((self.fragments as u64) < self.h))
    }

    /// The inner step (1..=H, counted within the round) after which fragment
    /// p of P leaves: t_p = floor((p + 1) H / P), torchft's spread, so the
    /// last fragment leaves at the round's end as DiLoCo's whole model does.
    pub fn offset(&self, p: usize) -> u64 {
        let big_p = self.fragments.max(1) as u64;
        if self.same_offset {
            self.h
        } else {
            (p as u64 + 1) * self.h / big_p
        }
    }

    /// Checks the ranges that do not need the model (fragments <= blocks
    /// is checked with it, by `Fragments::new`).
    pub fn validate(&self) -> Result<()> {
        let m = "[methods.streaming-diloco]";
        if self.h == 0 {
            bail!("{m}: h must be at least 1 (inner steps per outer round), e.g. h = 100 (flag --h 100)");
        }
        if self.fragments == 0 || self.fragments as u64 > self.h {
            bail!(
                "{m}: fragments = {} must be between 1 and h = {} (each fragment leaves on its own inner step), e.g. fragments = 2",
                self.fragments,
                self.h
            );
        }
        if self.overlap() * self.fragments as u64 >= self.h {
            bail!(
                "{m}: overlap = {} with fragments = {} and h = {}: a fragment must land before the next leaves (overlap x fragments < h); set overlap <= {}, or raise h",
                self.overlap(),
                self.fragments,
                self.h,
                (self.h - 1) / self.fragments as u64
            );
        }
        if self.eager && self.overlap() == 0 {
            bail!(
                "{m}: eager = true needs overlap >= 1 (the stand-in is applied while the average is in flight; with overlap 0 it lands at once), got overlap 0 with h = {} and fragments = {}; set overlap = 1, or eager = false",
                self.h,
                self.fragments
            );
        }
        if !(0.0..=1.0).contains(&self.mix) {
            bail!(
                "{m}: mix must be in [0, 1] (0 takes the global value, 1 keeps the local one), got {}, e.g. mix = 0.5",
                self.mix
            );
        }
        self.diloco().check("streaming-diloco")
    }
}

/// Parses `[methods.streaming-diloco]`; an outer optimizer or a pattern
/// that does not exist is named with the valid ones.
pub fn parse(table: toml::Table) -> Result<StreamingSettings> {
    check_outer_name(&table, "streaming-diloco", "nesterov")?;
    if let Some(v) = table.get("fragment_pattern") {
        if !v.as_str().is_some_and(|s| FragmentPattern::NAMES.contains(&s)) {
            bail!(
                "[methods.streaming-diloco]: fragment_pattern {v} does not exist: choose one of {}, e.g. fragment_pattern = \"strided\"",
                FragmentPattern::NAMES.join(", ")
            );
        }
    }
    let s: StreamingSettings = table
        .try_into()
        .map_err(|e: toml::de::Error| anyhow::anyhow!("[methods.streaming-diloco]: {}", e.message()))?;
    s.validate().map(|_| s)
}

/// How Streaming DiLoCo is shown (banner, summaries).
pub fn describe(s: &StreamingSettings, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    f.write_str("streaming-diloco (")?;
    describe_round(&s.diloco(), f)?;
    write!(f, ", {} {} fragments, overlap {}, mix {}", s.fragments, s.fragment_pattern.name(), s.overlap(), s.mix)?;
    if s.eager {
        f.write_str(", eager")?;
    }
    describe_wire(&s.diloco(), f)?;
    f.write_str(")")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        format!("{:#}", parse(text.parse().unwrap()).unwrap_err())
    }

    #[test]
    fn defaults_and_offsets_spread_over_the_round() {
        let d = parse(toml::Table::new()).unwrap();
        assert_eq!(
            (d.h, d.fragments, d.overlap(), d.mix, d.fragment_pattern),
            (100, 2, 1, 0.5, FragmentPattern::Strided)
        );
        // Unset overlap where H / P leaves no room for one step: 0, not an error.
        let tight = parse("h = 2\nfragments = 2".parse().unwrap()).unwrap();
        assert_eq!((tight.overlap, tight.overlap()), (None, 0));
        assert_eq!(parse("h = 3\nfragments = 2".parse().unwrap()).unwrap().overlap(), 1);
        assert_eq!((d.outer, d.outer_lr, d.outer_momentum, d.outer_wire), (OuterKind::Nesterov, 0.7, 0.9, None));
        // t_p = floor((p + 1) H / P): H = 10, P = 3 gives 3, 6, 10; P = 1 gives H.
        let s = StreamingSettings { h: 10, fragments: 3, ..d.clone() };
        assert_eq!([0, 1, 2].map(|p| s.offset(p)), [3, 6, 10]);
        assert_eq!(StreamingSettings { h: 10, fragments: 1, ..d.clone() }.offset(0), 10);
        assert_eq!(StreamingSettings { h: 10, fragments: 3, same_offset: true, ..d }.offset(0), 10);
        let t = parse("fragment_pattern = \"sequential\"\nouter_wire = \"fp4\"\nmix = 0.0".parse().unwrap()).unwrap();
        assert_eq!((t.fragment_pattern, t.outer_wire, t.mix), (FragmentPattern::Sequential, Some(OuterWire::Fp4), 0.0));
    }

    #[test]
    fn the_keys_method_rs_accepts_are_the_fields_and_round_trip() {
        let s = StreamingSettings {
            overlap: Some(2),
            outer_wire: Some(OuterWire::Fp4),
            error_decay: 0.5,
            eager: true,
            ..StreamingSettings::default()
        };
        super::super::settings::tests::assert_keys_are_fields(&s, KEYS);
        assert_eq!(parse(toml::Table::try_from(&s).unwrap()).unwrap(), s);
    }

    #[test]
    fn bad_values_get_one_error_naming_the_key_and_a_fix() {
        for (text, needles) in [
            ("h = 0", &["[methods.streaming-diloco]: h must be at least 1", "h = 100"][..]),
            ("h = 4\nfragments = 5\noverlap = 0", &["fragments = 5 must be between 1 and h = 4"]),
            ("fragments = 0", &["fragments = 0 must be between 1"]),
            ("h = 10\nfragments = 2\noverlap = 5", &["overlap x fragments < h", "set overlap <= 4"]),
            ("mix = 1.5", &["mix must be in [0, 1]", "mix = 0.5"]),
            ("outer_lr = -1.0", &["outer_lr must be > 0"]),
            ("outer = \"adam\"", &["outer \"adam\" does not exist"]),
            (
                "fragment_pattern = \"zigzag\"",
                &["fragment_pattern \"zigzag\" does not exist: choose one of strided, sequential"],
            ),
            ("same_offset = true", &["unknown field `same_offset`"]),
            ("eager = true\noverlap = 0", &["eager = true needs overlap >= 1", "set overlap = 1"]),
            ("eager = true\nh = 2\nfragments = 2", &["eager = true needs overlap >= 1"]),
        ] {
            let e = err(text);
            for n in needles {
                assert!(e.contains(n), "{text}: {e}");
            }
        }
    }
}
