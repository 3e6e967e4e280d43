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

use super::diloco::async_settings::AsyncDilocoSettings;
use super::diloco::settings::DilocoSettings;
use super::local::settings::{Co2Settings, LocalSgdSettings, OverlapLocalSgdSettings, SlowMoSettings};
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
    fn validate(&self, name: &str) -> Result<()> {
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
    /// DeMo: decoupled momentum, replicated over the world.
    Demo(DemoSettings),
    /// FlexDeMo: DeMo with hybrid sharding inside nodes.
    FlexDemo(DemoSettings),
    /// Local-SGD/AdamW: tau local steps, then a blocking parameter average.
    LocalSgd(LocalSgdSettings),
    /// Overlap-Local-SGD: a pull toward an anchor averaged in the background.
    OverlapLocalSgd(OverlapLocalSgdSettings),
    /// SlowMo: local steps, exact average, slow-momentum outer step.
    SlowMo(SlowMoSettings),
    /// CO2: local steps, asynchronous average, one-step-stale outer momentum.
    Co2(Co2Settings),
    /// DiLoCo: H inner steps, averaged pseudo-gradient, outer optimizer (Algorithm 1).
    Diloco(DilocoSettings),
    /// Asynchronous DiLoCo: workers report to a parameter server that applies
    /// each pseudo-gradient on arrival (Algorithms 2-5).
    AsyncDiloco(AsyncDilocoSettings),
}

/// Every method's name and the keys its `[methods.NAME]` section accepts.
const SETTINGS: [(&str, &[&str]); 13] = [
    ("ddp", &[]),
    ("zero1", &[]),
    ("dpu", &["warmup_steps"]),
    ("acco-wp", &[]),
    ("acco", &[]),
    ("local-sgd", &["tau", "inner_state"]),
    ("overlap-local-sgd", &["tau", "pull"]),
    ("slowmo", &["tau", "outer_lr", "outer_momentum"]),
    ("co2", &["tau", "outer_lr", "outer_momentum", "penalty", "clip", "shard_outer"]),
    ("demo", DEMO_KEYS),
    ("flexdemo", DEMO_KEYS),
    ("diloco", &["h", "outer", "outer_lr", "outer_momentum", "dn_buffer", "dn_c"]),
    (
        "async-diloco",
        &["h", "outer", "outer_lr", "outer_momentum", "dn_buffer", "dn_c", "grace", "dylu", "shards", "fixed_shards"],
    ),
];

/// The keys of `[methods.demo]` and `[methods.flexdemo]`.
const DEMO_KEYS: &[&str] = &[
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

impl Method {
    /// Names accepted on the command line, in the order `compare` runs them.
    pub const NAMES: [&'static str; 13] = [
        "ddp",
        "zero1",
        "dpu",
        "acco-wp",
        "acco",
        "local-sgd",
        "overlap-local-sgd",
        "slowmo",
        "co2",
        "demo",
        "flexdemo",
        "diloco",
        "async-diloco",
    ];

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
            Method::Demo(_) => "demo",
            Method::FlexDemo(_) => "flexdemo",
            Method::Diloco(_) => "diloco",
            Method::AsyncDiloco(_) => "async-diloco",
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
            "local-sgd" => Method::LocalSgd(super::local::settings::checked(parse(name, table)?)?),
            "overlap-local-sgd" => Method::OverlapLocalSgd(super::local::settings::checked(parse(name, table)?)?),
            "slowmo" => Method::SlowMo(super::local::settings::checked(parse(name, table)?)?),
            "co2" => Method::Co2(super::local::settings::checked(parse(name, table)?)?),
            "diloco" => Method::Diloco(super::diloco::settings::parse(table)?),
            "async-diloco" => Method::AsyncDiloco(super::diloco::async_settings::parse(table)?),
            "demo" | "flexdemo" => {
                let s = demo_settings(name, table)?;
                if name == "demo" {
                    Method::Demo(s)
                } else {
                    Method::FlexDemo(s)
                }
            }
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

    /// Whether the method runs a parameter server: the runtimes then add
    /// one participant after the workers (the last one; MPI's last rank).
    pub fn needs_server(&self) -> bool {
        matches!(self, Method::AsyncDiloco(_))
    }

    /// Whether a run survives workers that crash and join (`--faults`):
    /// only with a server that carries on with the others.
    pub fn survives_faults(&self) -> bool {
        self.needs_server()
    }

    /// Where a run asked to stop after step `end` (of `steps`) really stops:
    /// local-update methods finish the outer round containing it.
    pub fn stop_boundary(&self, end: u64, steps: u64) -> u64 {
        match self.local_tau() {
            Some(tau) => super::inner::Rounds::new(tau, steps).round_up(end),
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
            Method::Diloco(s) => Some(s.h),
            _ => None,
        }
    }
}

/// Parses and checks `[methods.demo]` / `[methods.flexdemo]`; a replicator
/// or inner optimizer that does not exist is named with the valid ones.
fn demo_settings(name: &str, table: toml::Table) -> Result<DemoSettings> {
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

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Method::Demo(s) | Method::FlexDemo(s) => {
                let rate = s.compression.map_or(String::new(), |c| format!(", compression {c}"));
                let sign = if s.sign { "" } else { ", no sign" };
                let overlap = if s.overlap { ", overlap" } else { "" };
                let inner = match s.inner {
                    InnerKind::Sgd => "sgd",
                    InnerKind::DecoupledAdamw => "decoupled-adamw",
                };
                write!(
                    f,
                    "{} ({}{rate}, {inner}{sign}{overlap})",
                    self.name(),
                    ReplicatorKind::NAMES[s.replicator as usize]
                )
            }
            Method::Dpu(s) if s.warmup_steps > 0 => write!(f, "dpu (warmup {})", s.warmup_steps),
            Method::LocalSgd(_) | Method::OverlapLocalSgd(_) | Method::SlowMo(_) | Method::Co2(_) => {
                super::local::settings::describe(self, f)
            }
            Method::Diloco(s) => super::diloco::settings::describe(s, f),
            Method::AsyncDiloco(s) => super::diloco::async_settings::describe(s, f),
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

    #[test]
    fn demo_settings_refuse_bad_values_naming_the_key_and_an_example() {
        let e = |name: &str, t: &str| Method::from_config(name, Some(&table(t))).unwrap_err().to_string();
        let cases = [
            ("topk = 0", "topk must be between 1 and", "topk = 32"),
            ("topk = 5000", "topk must be between 1 and the chunk's 4096 coefficients", "topk = 32"),
            ("chunk = 0", "chunk must be at least 1", "chunk = 64"),
            ("beta = 1.0", "beta must be in [0, 1), got 1", "beta = 0.999"),
            ("beta = -0.1", "beta must be in [0, 1)", "beta = 0.999"),
            ("compression = 0.0", "compression must be in (0, 1]", "compression = 0.05"),
            ("compression = 1.5", "compression must be in (0, 1]", "--compression 0.05"),
            (
                "replicator = \"dct\"",
                "replicator \"dct\" does not exist: choose one of demo, random, striding, diloco, full",
                "--replicator random",
            ),
            ("inner = \"adam\"", "inner \"adam\" does not exist", "--inner decoupled-adamw"),
            ("every = 0", "every must be at least 1", "every = 10"),
            ("topk = 8\ncompression = 0.1", "give topk or compression, not both", "compression = 0.05"),
        ];
        for (t, want, example) in cases {
            let msg = e("flexdemo", t);
            assert!(
                msg.starts_with("[methods.flexdemo]: ") && msg.contains(want) && msg.contains(example),
                "{t}: {msg}"
            );
        }
        assert!(e("demo", "warmup_steps = 1").contains("is a setting of dpu"));
        assert_eq!(
            Method::from_config("demo", Some(&table("replicator = \"random\"\ncompression = 0.05"))).unwrap(),
            Method::Demo(DemoSettings {
                replicator: ReplicatorKind::Random,
                compression: Some(0.05),
                ..DemoSettings::default()
            })
        );
    }
}
