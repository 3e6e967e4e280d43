//! The data-parallel methods by name, each with its own typed settings.
//!
//! Settings come from the run configuration's `[methods.NAME]` section
//! (flags are merged into the chosen method's section first), are parsed by
//! the method's settings struct, and unknown keys are rejected. A key that
//! belongs to another method says which:
//!
//! ```toml
//! [parallel]
//! method = "dpu"
//! [methods.dpu]
//! warmup_steps = 10
//! ```

use super::local_settings::{Co2Settings, LocalSgdSettings, OverlapLocalSgdSettings, SlowMoSettings};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// DPU's settings (`[methods.dpu]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DpuSettings {
    /// Rounds of non-delayed (zero1) updates before the one-step delay
    /// starts; Ren et al. recommend a warmup. Flag: `--dpu-warmup`. Default 0.
    pub warmup_steps: u64,
}

/// A data-parallel method with its settings.
#[derive(Clone, Debug, PartialEq)]
pub enum Method {
    /// Average gradients every step.
    Ddp,
    /// DDP with the optimizer state sharded (ZeRO-1).
    Zero1,
    /// Delayed parameter update.
    Dpu(DpuSettings),
    /// ACCO with weight prediction.
    AccoWp,
    /// ACCO, the two-stage algorithm.
    Acco,
    /// Local-SGD/AdamW: tau local steps, then a blocking parameter average.
    LocalSgd(LocalSgdSettings),
    /// Overlap-Local-SGD: a pull toward an anchor averaged in the background.
    OverlapLocalSgd(OverlapLocalSgdSettings),
    /// SlowMo: local steps, exact average, slow-momentum outer step.
    SlowMo(SlowMoSettings),
    /// CO2: local steps, asynchronous average, one-step-stale outer momentum.
    Co2(Co2Settings),
}

/// Every method's name and the keys its `[methods.NAME]` section accepts.
const SETTINGS: [(&str, &[&str]); 9] = [
    ("ddp", &[]),
    ("zero1", &[]),
    ("dpu", &["warmup_steps"]),
    ("acco-wp", &[]),
    ("acco", &[]),
    ("local-sgd", &["tau", "inner_state"]),
    ("overlap-local-sgd", &["tau", "pull"]),
    ("slowmo", &["tau", "outer_lr", "outer_momentum"]),
    ("co2", &["tau", "outer_lr", "outer_momentum", "penalty", "clip", "shard_outer"]),
];

impl Method {
    /// Names accepted on the command line, in the order `compare` runs them.
    pub const NAMES: [&'static str; 9] =
        ["ddp", "zero1", "dpu", "acco-wp", "acco", "local-sgd", "overlap-local-sgd", "slowmo", "co2"];

    /// The method's name, as on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Method::Ddp => "ddp",
            Method::Zero1 => "zero1",
            Method::Dpu(_) => "dpu",
            Method::AccoWp => "acco-wp",
            Method::Acco => "acco",
            Method::LocalSgd(_) => "local-sgd",
            Method::OverlapLocalSgd(_) => "overlap-local-sgd",
            Method::SlowMo(_) => "slowmo",
            Method::Co2(_) => "co2",
        }
    }

    /// Whether method `name` has the key `key` in its `[methods.NAME]` section.
    pub fn takes(name: &str, key: &str) -> bool {
        SETTINGS.iter().any(|(n, keys)| *n == name && keys.contains(&key))
    }

    /// `name`'s method with its settings from `section` (its `[methods.NAME]`
    /// table, if any).
    pub fn from_config(name: &str, section: Option<&toml::Table>) -> Result<Method> {
        let Some((_, keys)) = SETTINGS.iter().find(|(n, _)| *n == name) else {
            bail!("unknown method `{name}`: choose one of {}, e.g. --method zero1", Method::NAMES.join(", "));
        };
        let table = section.cloned().unwrap_or_default();
        if let Some(key) = table.keys().find(|k| !keys.contains(&k.as_str())) {
            let owners: Vec<&str> =
                SETTINGS.iter().filter(|(_, ks)| ks.contains(&key.as_str())).map(|(n, _)| *n).collect();
            let has =
                if keys.is_empty() { "has no settings".to_string() } else { format!("takes {}", keys.join(", ")) };
            if owners.is_empty() {
                bail!("[methods.{name}]: unknown key `{key}` ({name} {has})");
            }
            bail!("[methods.{name}]: `{key}` is a setting of {}, not of {name} ({name} {has})", owners.join(", "));
        }
        fn parse<T: serde::de::DeserializeOwned>(name: &str, t: toml::Table) -> Result<T> {
            t.try_into().map_err(|e: toml::de::Error| anyhow::anyhow!("[methods.{name}]: {}", e.message()))
        }
        Ok(match name {
            "ddp" => Method::Ddp,
            "zero1" => Method::Zero1,
            "dpu" => Method::Dpu(parse(name, table)?),
            "acco-wp" => Method::AccoWp,
            "acco" => Method::Acco,
            "local-sgd" => Method::LocalSgd(super::local_settings::checked(parse(name, table)?)?),
            "overlap-local-sgd" => Method::OverlapLocalSgd(super::local_settings::checked(parse(name, table)?)?),
            "slowmo" => Method::SlowMo(super::local_settings::checked(parse(name, table)?)?),
            "co2" => Method::Co2(super::local_settings::checked(parse(name, table)?)?),
            _ => unreachable!("checked against SETTINGS"),
        })
    }

    /// Checks every `[methods.NAME]` section names a method and holds only
    /// its keys (sections of methods other than the one run are allowed:
    /// one config can serve `compare`).
    pub fn check_sections(sections: &std::collections::BTreeMap<String, toml::Table>) -> Result<()> {
        for (name, table) in sections {
            if !Method::NAMES.contains(&name.as_str()) {
                bail!("[methods.{name}]: no method is called `{name}`; methods are {}", Method::NAMES.join(", "));
            }
            Method::from_config(name, Some(table))?;
        }
        Ok(())
    }

    /// Whether workers accumulate as many micro-batches as fit while a
    /// round communicates (so `grad_accum` cannot fix the batch).
    pub fn accumulates_while_communicating(&self) -> bool {
        matches!(self, Method::Dpu(_) | Method::AccoWp | Method::Acco)
    }

    /// Where a run asked to stop after step `end` (of `steps`) really stops:
    /// local-update methods finish the outer round containing it.
    pub fn stop_boundary(&self, end: u64, steps: u64) -> u64 {
        match self.local_tau() {
            Some(tau) => super::local::Rounds::new(tau, steps).round_up(end),
            None => end.min(steps),
        }
    }

    /// Local steps per outer round of a local-update method.
    pub fn local_tau(&self) -> Option<u64> {
        match self {
            Method::LocalSgd(s) => Some(s.tau),
            Method::OverlapLocalSgd(s) => Some(s.tau),
            Method::SlowMo(s) => Some(s.tau),
            Method::Co2(s) => Some(s.tau),
            _ => None,
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Method::Dpu(s) if s.warmup_steps > 0 => write!(f, "dpu (warmup {})", s.warmup_steps),
            Method::LocalSgd(_) | Method::OverlapLocalSgd(_) | Method::SlowMo(_) | Method::Co2(_) => {
                super::local_settings::describe(self, f)
            }
            m => f.write_str(m.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    #[test]
    fn settings_come_from_the_methods_section() {
        assert_eq!(
            Method::from_config("dpu", Some(&table("warmup_steps = 7"))).unwrap(),
            Method::Dpu(DpuSettings { warmup_steps: 7 })
        );
        assert_eq!(Method::from_config("dpu", None).unwrap(), Method::Dpu(DpuSettings::default()));
        assert_eq!(Method::from_config("acco", None).unwrap(), Method::Acco);
    }

    #[test]
    fn misplaced_and_unknown_keys_are_named() {
        let e = Method::from_config("acco", Some(&table("warmup_steps = 2"))).unwrap_err().to_string();
        assert_eq!(e, "[methods.acco]: `warmup_steps` is a setting of dpu, not of acco (acco has no settings)");
        let e = Method::from_config("dpu", Some(&table("warmpu_steps = 2"))).unwrap_err().to_string();
        assert_eq!(e, "[methods.dpu]: unknown key `warmpu_steps` (dpu takes warmup_steps)");
        let e = Method::from_config("dpu", Some(&table("warmup_steps = -1"))).unwrap_err().to_string();
        assert!(e.starts_with("[methods.dpu]:"), "{e}");
        let e = Method::from_config("sgd", None).unwrap_err().to_string();
        assert!(e.contains("unknown method `sgd`") && e.contains("acco-wp"), "{e}");
        let mut sections = std::collections::BTreeMap::new();
        sections.insert("co3".to_string(), toml::Table::new());
        assert!(Method::check_sections(&sections).unwrap_err().to_string().contains("no method is called `co3`"));
    }
}
