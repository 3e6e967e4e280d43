//! `lowcomm plan`: an analytical model, no training, of what every method
//! costs on a cluster: memory per worker by category, time per optimizer
//! step or outer round, tokens/s, scalability, bytes per tier, whether it
//! fits in device memory, and a ranked recommendation.
//!
//! The time model is the simulator's own cost model (`runtime::sim::SimSpec`:
//! micro-batch seconds, the alpha-beta `LinkModel` on each group's route,
//! `comm_scale`, costed local work) applied to each method's schedule of
//! collectives in closed form (time.rs, one rule per method with why).
//! It is checked against `--runtime sim` runs in tests_sim.rs: the
//! simulated time per round to rounding (with and without a gradient clip
//! and costed work), and the memory the run measures.
//!
//! - model.rs: the model (preset, parameter count or Hugging Face config.json)
//! - memory.rs: bytes per worker by category, in mixed precision or f32
//! - time.rs: time, bytes per tier and overlap rule per method
//! - net.rs: what the rules share: the row (`Timing`), collective and local
//!   work costs (`Net`, `Xfer`)
//! - demo.rs: DeMo and FlexDeMo (shards, payloads, DCT FLOPs)
//! - async_diloco.rs: async DiLoCo's bounds (asynchronous arrivals)
//! - streaming.rs: Streaming DiLoCo's fragments, overlap and peak bytes
//! - hetero.rs: workers of different speeds (`--speeds`)
//! - rank.rs: the recommendation; table.rs: the printed table

pub mod async_diloco;
pub mod demo;
pub mod hetero;
pub mod memory;
pub mod model;
pub mod net;
pub mod rank;
pub mod setup;
pub mod streaming;
pub mod table;
#[cfg(test)]
mod tests_fixtures;
#[cfg(test)]
mod tests_hetero;
#[cfg(test)]
mod tests_sim;
#[cfg(test)]
mod tests_straggle;
pub mod time;

pub use model::ModelSpec;

use crate::comm::WireDtype;
use crate::optim::OptimizerConfig;
use crate::runtime::sim::SimSpec;
use crate::strategy::{MemoryBytes, Method};
use anyhow::Result;
use serde::Serialize;

/// How model states are stored, for the memory rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// The ACCO paper's Table 1 accounting: bf16 parameters, gradients and
    /// communication buffers (2 bytes), an fp32 master copy plus the
    /// optimizer's fp32 state (AdamW: K = 12 bytes per parameter).
    Mixed,
    /// What this engine allocates: every buffer in f32, exactly the
    /// `Outcome.memory` a run measures.
    F32,
}

impl std::str::FromStr for Precision {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Precision> {
        match s {
            "mixed" => Ok(Precision::Mixed),
            "f32" => Ok(Precision::F32),
            _ => anyhow::bail!("--precision must be mixed or f32, got `{s}`; e.g. --precision mixed"),
        }
    }
}

/// Everything the plan costs: a model's size, the cluster's cost model and the run's shared settings.
#[derive(Clone, Debug)]
pub struct Costing {
    /// Parameters of the model, psi (the elements a gradient exchange carries before `spec.comm_scale`).
    pub params: usize,
    /// Tokens in one micro-batch.
    pub tokens_per_micro_batch: usize,
    /// The simulator's cost model: micro-batch seconds, links, topology, `comm_scale`, costed work.
    pub spec: SimSpec,
    /// What gradients and parameters travel as.
    pub wire: WireDtype,
    /// Micro-batches per step of the synchronous methods (and per inner step).
    pub grad_accum: usize,
    /// Whether a global-norm gradient clip is on (the sharded round then all-reduces a norm).
    pub grad_clip: bool,
    /// The (inner) optimizer: its state per parameter enters the memory rows.
    pub optimizer: OptimizerConfig,
    /// Overlapping methods: micro-batches per stage when fixed (`--fixed-micro-batches`), else as many as fit.
    pub fixed_micro_batches: Option<usize>,
    /// Device memory in bytes, if the profile says (`[device] memory`).
    pub device_memory: Option<f64>,
    /// How the memory rows are stored.
    pub precision: Precision,
    /// The model's tensors, when known (DeMo's shards and payloads follow them).
    pub layout: Option<crate::model::ParamLayout>,
}

impl Costing {
    /// A costing for unit tests: `spec`'s cluster, `params` parameters,
    /// one token per micro-batch, one micro-batch per step, AdamW, no clip,
    /// no device memory, no layout; tests change what they need.
    #[cfg(test)]
    pub(crate) fn for_test(params: usize, spec: SimSpec, wire: WireDtype, precision: Precision) -> Costing {
        Costing {
            params,
            tokens_per_micro_batch: 1,
            spec,
            wire,
            grad_accum: 1,
            grad_clip: false,
            optimizer: OptimizerConfig::default(),
            fixed_micro_batches: None,
            device_memory: None,
            precision,
            layout: None,
        }
    }

    /// Workers in the cluster.
    pub fn workers(&self) -> usize {
        self.spec.topology.workers
    }

    /// Optimizer state values per parameter (AdamW 2: m and v; SGD 0 or 1).
    pub fn state_per_param(&self) -> Result<usize> {
        Ok(self.optimizer.try_build(1)?.state_len())
    }
}

/// The plan of one method.
#[derive(Clone, Debug, Serialize)]
pub struct MethodPlan {
    /// The method as named on the command line.
    pub method: String,
    /// The method with its knobs (`co2 (tau 12, ...)`).
    pub label: String,
    /// Bytes per worker by category, in `precision`.
    pub memory: MemoryBytes,
    /// Their sum.
    pub memory_total: f64,
    /// Whether `memory_total` fits in device memory (`None`: the profile does not say).
    pub fits: Option<bool>,
    /// Time, traffic and overlap of one step or round.
    pub time: net::Timing,
    /// Tokens per second, whole cluster (applied tokens only).
    pub tokens_per_s: f64,
    /// Tokens/s at N workers over N x the tokens/s of one worker alone.
    pub scalability: f64,
    /// One line: why it ranks where it does.
    pub reason: String,
    /// The parameter server's memory, for a method that has one (async-diloco).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<MemoryBytes>,
}

/// The whole plan: the model, the cluster and every method, ranked.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The model and how its size and FLOPs were derived.
    pub model: ModelSpec,
    /// The cluster's name.
    pub cluster: String,
    /// Workers.
    pub workers: usize,
    /// Workers per node.
    pub workers_per_node: usize,
    /// Tokens per micro-batch.
    pub tokens_per_micro_batch: usize,
    /// Seconds of one micro-batch.
    pub micro_batch_s: f64,
    /// Micro-batches per step of the synchronous methods and per inner step.
    pub grad_accum: usize,
    /// Wire dtype of gradients and parameters.
    pub wire: WireDtype,
    /// Precision of the memory rows.
    pub precision: Precision,
    /// Device memory, bytes, if known.
    pub device_memory: Option<f64>,
    /// Methods, best first.
    pub methods: Vec<MethodPlan>,
}

/// Whether `memory_total` bytes per worker fit in `device_memory` (`None`:
/// unknown, the profile does not say). `compare`'s verdict uses the same rule.
pub fn fits(memory_total: f64, device_memory: Option<f64>) -> Option<bool> {
    device_memory.map(|m| memory_total <= m)
}

/// Tokens/s of one worker training alone (no communication): the reference of scalability.
pub fn single_worker_tokens_per_s(c: &Costing) -> f64 {
    let k = c.grad_accum.max(1) as f64;
    let step = k * c.spec.cost(crate::runtime::Work::MicroBatch, 1.0) + net::Net { c }.update(c.params);
    k * c.tokens_per_micro_batch as f64 / step
}

/// The plan of `method` under `c`.
pub fn plan_method(method: &Method, c: &Costing) -> Result<MethodPlan> {
    // Asynchronous arrivals: a bound, not a round (async_diloco.rs).
    if let Method::AsyncDiloco(s) = method {
        return async_diloco::plan(s, c);
    }
    let memory = memory::memory(method, c)?;
    let total = memory.total() as f64;
    let time = time::timing(method, c)?;
    let tokens_per_s = c.workers() as f64 * time.micro_batches * c.tokens_per_micro_batch as f64 / time.round_s;
    let scalability = tokens_per_s / (c.workers() as f64 * single_worker_tokens_per_s(c));
    let fits = fits(total, c.device_memory);
    let mut p = MethodPlan {
        method: method.name().to_string(),
        label: method.to_string(),
        memory,
        memory_total: total,
        fits,
        time,
        tokens_per_s,
        scalability,
        reason: String::new(),
        server: None,
    };
    hetero::adjust(&mut p, c);
    p.reason = rank::reason(&p, c);
    Ok(p)
}

/// Plans every method of `methods` and ranks them (rank.rs).
pub fn plan_all(model: ModelSpec, cluster: &str, methods: &[Method], c: &Costing) -> Result<Report> {
    let mut plans = methods.iter().map(|m| plan_method(m, c)).collect::<Result<Vec<_>>>()?;
    rank::rank(&mut plans);
    Ok(Report {
        model,
        cluster: cluster.to_string(),
        workers: c.workers(),
        workers_per_node: c.spec.topology.per_node,
        tokens_per_micro_batch: c.tokens_per_micro_batch,
        micro_batch_s: c.spec.micro_batch_s,
        grad_accum: c.grad_accum.max(1),
        wire: c.wire,
        precision: c.precision,
        device_memory: c.device_memory,
        methods: plans,
    })
}
