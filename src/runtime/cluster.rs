//! Cluster profiles for the simulated runtime: TOML files in
//! `configs/clusters/` that say how fast a cluster computes and communicates.
//!
//! The timing model is separate from the model trained (shared/DESIGN.md):
//! `[timing]` may name a bigger model (GPT-Neo-125M) whose cost is simulated
//! while `nano` is what is actually trained. Compute then comes from that
//! model's FLOPs, and communication is scaled by its parameter count, so the
//! strategies see the big cluster's compute/communication ratio.
//!
//! Every key, with the formulas, is documented in configs/clusters/README.md;
//! the shipped profiles are examples.

use super::sim::{Interference, SimSpec};
use crate::comm::link_measured::AllReduceSweep;
use crate::comm::{LinkModel, Tier, WireDtype};
use crate::model::GptConfig;
use anyhow::{anyhow, bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A simulated cluster: its shape, devices, links and which model's cost to simulate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterProfile {
    /// Human-readable name, shown in summaries.
    pub name: String,
    /// Number of nodes (machines).
    pub nodes: usize,
    /// Workers (GPUs) per node; workers in a node talk over `links.intra`.
    pub workers_per_node: usize,
    /// What travels on the wire (`f32` or `bf16`): sets the bytes costed and
    /// the rounding the simulated collectives apply; default `f32`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<WireDtype>,
    /// The devices' speed; required unless `timing.seconds_per_micro_batch` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceProfile>,
    /// Link tiers.
    pub links: LinksProfile,
    /// Which model's cost to simulate; empty means the trained model's own.
    #[serde(default)]
    pub timing: TimingProfile,
}

/// Speed of one device (all workers share it; `--speeds` scales it per worker).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    /// Peak FLOP/s in the training precision (A100 bf16 dense: 312e12).
    pub peak_flops: f64,
    /// Share of the peak a training step really reaches, in (0, 1] (model FLOPs utilisation).
    pub utilization: f64,
    /// Device memory in bytes (A100-80GB: 80e9); optional: `lowcomm plan`
    /// says whether a method fits in it, and that fit is unknown without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<f64>,
    /// Bytes/s of memory-bound work outside micro-batches: an optimizer
    /// step is charged 28 bytes a parameter, elementwise work (outer steps,
    /// averages) 12 an element. Default none: that work is free.
    /// `lowcomm calibrate` measures it (AdamW's rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bandwidth: Option<f64>,
    /// FLOP/s of compute-bound work outside micro-batches (DeMo's DCT
    /// encode/decode). Default `peak_flops x utilization`. `lowcomm
    /// calibrate` measures it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained_flops: Option<f64>,
    /// Factor (at least 1) on computation while the worker's own
    /// communication runs (CPU workers: the network stack and MPI's
    /// progress share the cores). Default 1. `lowcomm calibrate --backend
    /// mpi` measures it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_compute_factor: Option<f64>,
    /// Factor (at least 1) on communication while its worker computes. Default 1.
    /// `lowcomm calibrate --backend mpi` measures it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_comm_factor: Option<f64>,
    /// Factor (at least 1) on computation while other ranks' transfers run,
    /// for a cluster whose ranks all share one machine's cores (network
    /// namespaces on one VM, bench/netns): async DiLoCo's server sending
    /// to one worker slows the other's micro-batches. Default 1 (separate
    /// machines). `lowcomm calibrate --backend mpi` writes it when every
    /// rank runs on one kernel: one stream's share of `overlap_compute_factor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_cores_compute_factor: Option<f64>,
}

impl DeviceProfile {
    /// The rates the cost model charges work outside micro-batches at
    /// (`SimSpec::memory_bytes_per_s`, `SimSpec::flops_per_s`).
    pub fn work_rates(&self) -> (Option<f64>, Option<f64>) {
        (self.memory_bandwidth, Some(self.sustained_flops.unwrap_or(self.peak_flops * self.utilization)))
    }

    /// How overlapped computation and communication slow each other (1 = not at all).
    pub fn interference(&self) -> Interference {
        Interference {
            compute: self.overlap_compute_factor.unwrap_or(1.0),
            comm: self.overlap_comm_factor.unwrap_or(1.0),
            beside: self.shared_cores_compute_factor.unwrap_or(1.0),
        }
    }
}

/// The two link tiers, as `Tier` specs such as `"100gbit,20us"` or `"300GB/s,3us"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinksProfile {
    /// Link between workers of one node (e.g. NVLink `"300GB/s,3us"`).
    pub intra: String,
    /// Link between nodes (e.g. `"100gbit,20us"`); required when `nodes > 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inter: Option<String>,
    /// `intra`'s all-reduce sweep as `lowcomm calibrate` measured it: when
    /// given, the simulator and `plan` interpolate it instead of the line
    /// (comm/link_measured.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intra_sweep: Option<AllReduceSweep>,
    /// `inter`'s measured all-reduce sweep, as for `intra_sweep`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inter_sweep: Option<AllReduceSweep>,
}

/// The model whose cost is simulated; every field falls back to the trained run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingProfile {
    /// Parameters communicated per gradient exchange (default: the trained model's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<f64>,
    /// Training FLOPs per token (default: the trained model's `flops_per_token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops_per_token: Option<f64>,
    /// Tokens in one micro-batch (default: the trained micro-batch's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_micro_batch: Option<usize>,
    /// Fixed seconds per micro-batch; overrides the FLOP model and `[device]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_per_micro_batch: Option<f64>,
    /// How much one micro-batch's time varies: its standard deviation over
    /// its median, in [0, 0.5] (`lowcomm calibrate` measures it). The
    /// simulator draws each micro-batch's time from it, so members reach a
    /// blocking collective apart and the first waits for the last; `plan`
    /// adds that wait's expectation (sim/straggle.rs). Default 0: every
    /// micro-batch takes the same time and nobody waits for a straggler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_batch_cv: Option<f64>,
    /// How much one slow micro-batch predicts the next: the lag-1
    /// correlation of a worker's consecutive micro-batch times, in [0, 0.95]
    /// (`lowcomm calibrate` measures it). With it the simulator's draws for
    /// one worker come in slow and fast stretches, so a sum of K varies
    /// more than K independent draws and the ranks meet further apart;
    /// `plan` costs that wait (sim/straggle.rs). Default 0: each
    /// micro-batch drawn on its own. Needs `micro_batch_cv` to matter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_batch_correlation: Option<f64>,
}

/// `Some(x)` must be positive and finite; `None` is fine.
fn positive(field: &str, v: Option<f64>, example: &str) -> Result<()> {
    match v {
        Some(x) if !(x > 0.0 && x.is_finite()) => bail!("{field} must be > 0, got {x} (e.g. {example})"),
        _ => Ok(()),
    }
}

/// A `--speeds` example with exactly `p` values, so it can be pasted as is.
fn speeds_example(p: usize) -> String {
    if p <= 8 {
        let mut v = vec!["1"; p.saturating_sub(1)];
        v.push("0.25");
        v.join(",")
    } else {
        format!("1,1,...,1,0.25 ({p} values)")
    }
}

/// The `# WARNING: ...` comments of a profile's text (calibrate writes one
/// for a link that does not fit alpha-beta and for a host whose speed moved
/// while it measured), each without its prefix.
pub fn warnings(text: &str) -> Vec<&str> {
    text.lines().filter_map(|l| l.trim_start().strip_prefix("# WARNING:")).map(str::trim).collect()
}

/// Says a profile's [`warnings`] on stderr, once per file a process reads
/// (a comparison reads its profile once per run): a prediction from that
/// profile inherits them, and a comment nobody opens warns nobody.
fn warn_once(path: &Path, text: &str) {
    let found = warnings(text);
    if !found.is_empty() && first_warning_of(path) {
        found.iter().for_each(|w| eprintln!("warning: {}: {w}", path.display()));
    }
}

/// Whether this process has not yet warned of `path`'s profile; it has from now on.
fn first_warning_of(path: &Path) -> bool {
    static WARNED: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    let first = !warned.iter().any(|p| p == path);
    if first {
        warned.push(path.to_path_buf());
    }
    first
}

impl ClusterProfile {
    /// Read and validate a profile; errors start with the file name.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read cluster profile {}", path.display()))?;
        // One line `file: field: problem`, not a context chain that hides the field.
        let profile = Self::from_toml(&text).map_err(|e| anyhow!("{}: {e:#}", path.display()))?;
        warn_once(path, &text);
        Ok(profile)
    }

    /// Parse and validate TOML text.
    pub fn from_toml(text: &str) -> Result<Self> {
        let p: Self = toml::from_str(text).map_err(|e| crate::util::toml_error(text, e))?;
        p.validate()?;
        Ok(p)
    }

    /// Check every field; errors name the field and give a valid example.
    pub fn validate(&self) -> Result<()> {
        ensure!(self.nodes >= 1, "nodes must be at least 1 (e.g. nodes = 4)");
        ensure!(self.workers_per_node >= 1, "workers_per_node must be at least 1 (e.g. workers_per_node = 8)");
        self.link_model()?;
        let t = &self.timing;
        if t.seconds_per_micro_batch.is_none() {
            let Some(d) = &self.device else {
                bail!("device: missing [device] section (needed unless timing.seconds_per_micro_batch is set), e.g. [device] peak_flops = 312e12, utilization = 0.4");
            };
            positive("device.peak_flops", Some(d.peak_flops), "312e12 for an A100 in bf16")?;
            ensure!(
                d.utilization > 0.0 && d.utilization <= 1.0,
                "device.utilization must be in (0, 1], got {} (e.g. 0.4)",
                d.utilization
            );
            positive("device.memory", d.memory, "80e9 for an A100-80GB")?;
        }
        if let Some(d) = &self.device {
            positive("device.memory_bandwidth", d.memory_bandwidth, "2e12 bytes/s for an A100's HBM")?;
            positive("device.sustained_flops", d.sustained_flops, "1e11")?;
            for (field, v) in [
                ("device.overlap_compute_factor", d.overlap_compute_factor),
                ("device.overlap_comm_factor", d.overlap_comm_factor),
                ("device.shared_cores_compute_factor", d.shared_cores_compute_factor),
            ] {
                if let Some(x) = v.filter(|x| !(*x >= 1.0 && x.is_finite())) {
                    bail!("{field} must be >= 1 (1 = overlapped work is not slowed), got {x} (e.g. 1.2)");
                }
            }
        }
        positive("timing.params", t.params, "125e6 for GPT-Neo-125M")?;
        positive("timing.flops_per_token", t.flops_per_token, "7.5e8 = 6 x 125e6 for GPT-Neo-125M")?;
        positive("timing.seconds_per_micro_batch", t.seconds_per_micro_batch, "0.15")?;
        if let Some(r) = t.micro_batch_correlation.filter(|r| !(0.0..=0.95).contains(r)) {
            bail!("timing.micro_batch_correlation must be in [0, 0.95] (the lag-1 correlation of consecutive micro-batch times), got {r} (e.g. 0.5; 0 = each micro-batch drawn on its own)");
        }
        if let Some(cv) = t.micro_batch_cv.filter(|cv| !(0.0..=0.5).contains(cv)) {
            bail!("timing.micro_batch_cv must be in [0, 0.5] (a micro-batch's standard deviation over its median), got {cv} (e.g. 0.04; 0 = every micro-batch takes the same time)");
        }
        ensure!(
            t.tokens_per_micro_batch != Some(0),
            "timing.tokens_per_micro_batch must be at least 1 (e.g. 24576 = 24 sequences x 1024 tokens)"
        );
        Ok(())
    }

    /// The cost model's rates of work outside micro-batches: memory
    /// bandwidth and FLOP/s ([`DeviceProfile::work_rates`]; none without `[device]`).
    pub fn work_rates(&self) -> (Option<f64>, Option<f64>) {
        self.device.as_ref().map_or((None, None), DeviceProfile::work_rates)
    }

    /// How overlapped computation and communication slow each other
    /// ([`DeviceProfile::interference`]; none without `[device]`).
    pub fn interference(&self) -> Interference {
        self.device.as_ref().map_or(Interference::NONE, DeviceProfile::interference)
    }

    /// Number of workers: `nodes * workers_per_node`.
    pub fn workers(&self) -> usize {
        self.nodes * self.workers_per_node
    }

    /// The link model: `intra`, plus `inter` between nodes when there are several.
    pub fn link_model(&self) -> Result<LinkModel> {
        let tier = |field: &str, spec: &str, sweep: &Option<AllReduceSweep>| -> Result<Tier> {
            let mut t = spec.parse::<Tier>().map_err(|e| anyhow!("links.{field}: {e}"))?;
            if let Some(sw) = sweep {
                let bad = |e: String| anyhow!("links.{field}_sweep: {e}; `lowcomm calibrate` writes it");
                t.measured = Some(sw.message_times().map_err(bad)?);
                t.p2p = sw.point_to_point_times().map_err(bad)?;
            }
            Ok(t)
        };
        let intra = tier("intra", &self.links.intra, &self.links.intra_sweep)?;
        let inter = match (&self.links.inter, self.nodes > 1) {
            (Some(s), _) => Some(tier("inter", s, &self.links.inter_sweep)?),
            (None, true) => bail!("links.inter is required when nodes > 1 ({} nodes): the link between nodes, e.g. inter = \"100gbit,20us\"", self.nodes),
            (None, false) => None,
        };
        if self.links.inter_sweep.is_some() && self.links.inter.is_none() {
            bail!("links.inter_sweep is given without links.inter: the sweep measures that tier; give both (as `lowcomm calibrate` writes them) or neither");
        }
        // With one node the inter tier is parsed (so typos surface) but unused.
        let inter = inter.filter(|_| self.nodes > 1);
        Ok(LinkModel { intra, inter, workers_per_node: self.workers_per_node })
    }

    /// Virtual seconds of one micro-batch at speed 1: `timing.seconds_per_micro_batch`,
    /// else `flops_per_token * tokens / (peak_flops * utilization)`, where the
    /// FLOPs and tokens come from `[timing]` or else from the trained run.
    pub fn micro_batch_s(&self, model: &GptConfig, tokens_per_micro_batch: usize) -> Result<f64> {
        if let Some(s) = self.timing.seconds_per_micro_batch {
            return Ok(s);
        }
        let d = self
            .device
            .as_ref()
            .context("device: missing [device] section, e.g. [device] peak_flops = 312e12, utilization = 0.4")?;
        let flops = self.timing.flops_per_token.unwrap_or_else(|| model.flops_per_token());
        let tokens = self.timing.tokens_per_micro_batch.unwrap_or(tokens_per_micro_batch);
        ensure!(
            tokens >= 1,
            "a micro-batch must hold at least one token (set timing.tokens_per_micro_batch, e.g. 24576)"
        );
        Ok(flops * tokens as f64 / (d.peak_flops * d.utilization))
    }

    /// Elements costed per element communicated: `timing.params / model_params`, or 1.
    pub fn comm_scale(&self, model_params: usize) -> Result<f64> {
        match self.timing.params {
            None => Ok(1.0),
            Some(p) => {
                ensure!(
                    model_params > 0,
                    "the trained model has no parameters; cannot scale communication to timing.params = {p}"
                );
                Ok(p / model_params as f64)
            }
        }
    }

    /// The sim runtime's cost model for training `model` (`model_params`
    /// parameters, `tokens_per_micro_batch` tokens per micro-batch) on this
    /// cluster. `speeds` has one factor per worker (pass `vec![1.0; workers()]`
    /// for a homogeneous cluster); `wire_override` (e.g. `--wire`) beats the profile's `wire`.
    pub fn sim_spec(
        &self,
        model: &GptConfig,
        model_params: usize,
        tokens_per_micro_batch: usize,
        speeds: Vec<f64>,
    ) -> Result<SimSpec> {
        self.validate()?;
        let p = self.workers();
        ensure!(
            speeds.len() == p,
            "--speeds has {} values but the cluster has {p} workers; give one per worker, e.g. --speeds {}",
            speeds.len(),
            speeds_example(p)
        );
        if let Some((i, s)) = speeds.iter().enumerate().find(|(_, s)| !(**s > 0.0 && s.is_finite())) {
            bail!("--speeds value {} (worker {i}) is {s}; every speed must be > 0 (1 = nominal, 0.25 = four times slower)", i + 1);
        }
        Ok(SimSpec {
            micro_batch_s: self.micro_batch_s(model, tokens_per_micro_batch)?,
            speeds,
            link: Some(self.link_model()?),
            comm_scale: self.comm_scale(model_params)?,
            topology: crate::runtime::Topology { workers: p, per_node: self.workers_per_node, server: false },
            memory_bytes_per_s: self.work_rates().0,
            flops_per_s: self.work_rates().1,
            interference: self.interference(),
            start: Vec::new(),
            micro_batch_cv: self.timing.micro_batch_cv.unwrap_or(0.0),
            micro_batch_correlation: self.timing.micro_batch_correlation.unwrap_or(0.0),
            draw_seed: 0,
            parallel: true,
        })
    }
}

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
