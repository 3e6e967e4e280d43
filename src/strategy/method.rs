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

use super::acco::settings::DpuSettings;
use super::detonation::settings::{self as demo_settings, DemoSettings, InnerKind, ReplicatorKind};
use super::diloco::async_settings::AsyncDilocoSettings;
use super::diloco::settings::DilocoSettings;
use super::diloco::streaming_settings::StreamingSettings;
use super::faults::FaultPlan;
use super::local::settings::{Co2Settings, LocalSgdSettings, OverlapLocalSgdSettings, SlowMoSettings};
use anyhow::{bail, Result};

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
    /// Streaming DiLoCo: fragments synchronised on their own offsets, with
    /// overlap and mixing (arXiv 2501.18512).
    StreamingDiloco(StreamingSettings),
}

/// Every method's name and the keys its `[methods.NAME]` section accepts.
const SETTINGS: [(&str, &[&str]); 14] = [
    ("ddp", &[]),
    ("zero1", &[]),
    ("dpu", &["warmup_steps"]),
    ("acco-wp", &[]),
    ("acco", &[]),
    ("local-sgd", &["tau", "inner_state"]),
    ("overlap-local-sgd", &["tau", "pull"]),
    ("slowmo", &["tau", "outer_lr", "outer_momentum"]),
    ("co2", &["mode", "tau", "outer_lr", "outer_momentum", "penalty", "clip", "gap_penalty", "shard_outer"]),
    ("demo", demo_settings::KEYS),
    ("flexdemo", demo_settings::KEYS),
    ("diloco", super::diloco::settings::KEYS),
    ("async-diloco", super::diloco::async_settings::KEYS),
    ("streaming-diloco", super::diloco::streaming_settings::KEYS),
];

impl Method {
    /// Names accepted on the command line, in the order `compare` runs them.
    pub const NAMES: [&'static str; 14] = [
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
        "streaming-diloco",
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
            Method::StreamingDiloco(_) => "streaming-diloco",
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
            "streaming-diloco" => Method::StreamingDiloco(super::diloco::streaming_settings::parse(table)?),
            "demo" | "flexdemo" => {
                let s = demo_settings::parse(name, table)?;
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

    /// The fault plan `text` for a run of this method on `workers` workers over `backend`:
    /// refused, naming `--faults`, for a method that cannot survive a
    /// worker leaving (every synchronous one: each round waits for every
    /// worker) and under MPI (a dead rank ends the whole job).
    pub fn fault_plan(&self, text: &str, workers: usize, backend: &str) -> Result<FaultPlan> {
        if text.trim().is_empty() {
            return Ok(FaultPlan::default());
        }
        if !self.survives_faults() {
            bail!(
                "--faults / [faults] plan: {} cannot survive a worker that leaves (every round waits for every worker); use --method async-diloco, whose server carries on with the others",
                self.name()
            );
        }
        if backend == "mpi" {
            bail!(
                "--faults / [faults] plan: not under --backend mpi: MPI has no recovery, a dead rank ends the whole job; inject faults with --backend local (--runtime sim or real)"
            );
        }
        FaultPlan::parse(text, workers)
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
            Method::StreamingDiloco(s) => Some(s.h),
            _ => None,
        }
    }
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
            Method::LocalSgd(s) => write!(f, "{s}"),
            Method::OverlapLocalSgd(s) => write!(f, "{s}"),
            Method::SlowMo(s) => write!(f, "{s}"),
            Method::Co2(s) => write!(f, "{s}"),
            Method::Diloco(s) => super::diloco::settings::describe(s, f),
            Method::AsyncDiloco(s) => super::diloco::async_settings::describe(s, f),
            Method::StreamingDiloco(s) => super::diloco::streaming_settings::describe(s, f),
            m => f.write_str(m.name()),
        }
    }
}

/// Model-state bytes per worker by the ACCO paper's Table 1 formula, with
/// bf16 parameters, gradients and communication buffer (2 bytes each) and
/// an optimizer costing `k` bytes per parameter (12 for mixed-precision
/// AdamW: fp32 master copy, m and v), `psi` parameters, `n` workers; NaN
/// for methods the table does not cover (DeMo, FlexDeMo); DiLoCo by the same
/// reasoning as SlowMo (its outer copies).
pub fn table1_bytes(method: &Method, psi: f64, n: f64, k: f64) -> f64 {
    use Method::*;
    psi * match method {
        Ddp => 2.0 + 2.0 + k,
        Zero1 => 2.0 + 2.0 + k / n,
        Dpu(_) | AccoWp | Acco => 2.0 + 2.0 + 2.0 + k / n,
        // Not in Table 1: Local-AdamW holds what DDP holds (co2.txt, App. B.2).
        LocalSgd(_) => 2.0 + 2.0 + k,
        // Table 1's rows: 2 extra model copies (u, x_0), 4 for CO2; its
        // released code holds SlowMo's two (x_old, m).
        SlowMo(_) => 2.0 + 2.0 + 2.0 * 2.0 + k,
        Co2(s) if s.is_reference() => 2.0 + 2.0 + 2.0 * 2.0 + k,
        Co2(_) => 2.0 + 2.0 + 4.0 * 2.0 + k,
        // Not in Table 1: the anchor and the average in flight, like SlowMo's two copies.
        OverlapLocalSgd(_) => 2.0 + 2.0 + 2.0 * 2.0 + k,
        Demo(_) | FlexDemo(_) => f64::NAN,
        // Not in Table 1: theta and the outer momentum, two copies like SlowMo (dn: one more, Delta).
        Diloco(s) if s.outer == crate::optim::OuterKind::Dn => 2.0 + 2.0 + 3.0 * 2.0 + k,
        Diloco(s) if s.outer == crate::optim::OuterKind::Sgd => 2.0 + 2.0 + 2.0 + k,
        Diloco(_) => 2.0 + 2.0 + 2.0 * 2.0 + k,
        // Workers hold a replica, its gradient, theta_old and the inner
        // optimizer; the outer state lives on the server, not on a worker.
        AsyncDiloco(_) => 2.0 + 2.0 + 2.0 + k,
        // Not in Table 1: DiLoCo's copies, plus the largest fragment's outer gradient in flight (a 1/P share).
        StreamingDiloco(s) => {
            2.0 + 2.0 + 2.0 * (1 + s.outer.state_copies()) as f64 + 2.0 / s.fragments.max(1) as f64 + k
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
    fn only_async_diloco_off_mpi_takes_a_plan() {
        let async_diloco = Method::from_config("async-diloco", None).unwrap();
        let plan = "1:crash@5,1:join@9";
        assert_eq!(async_diloco.fault_plan(plan, 2, "local").unwrap().events().len(), 2);
        for name in ["ddp", "diloco", "local-sgd"] {
            let m = Method::from_config(name, None).unwrap();
            let e = m.fault_plan(plan, 2, "local").unwrap_err().to_string();
            assert!(e.contains(&format!("{name} cannot survive")) && e.contains("--method async-diloco"), "{e}");
            assert!(m.fault_plan(" ", 2, "local").unwrap().is_empty(), "no plan: any method");
        }
        let e = async_diloco.fault_plan(plan, 2, "mpi").unwrap_err().to_string();
        assert!(e.contains("not under --backend mpi: MPI has no recovery"), "{e}");
        assert!(async_diloco.fault_plan("3:crash@1", 2, "local").is_err());
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
