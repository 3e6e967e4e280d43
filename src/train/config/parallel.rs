//! `[parallel]` of the run configuration (config.rs has the file's shape
//! and the other sections): the workers, where and how they run, and what
//! `--steps` buys the methods that accumulate while communicating.

use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Data-parallel training with several workers (unset `method`: one worker,
/// with checkpoints every N steps and `--resume`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ParallelSection {
    /// `ddp`, `zero1`, `dpu`, `acco-wp` or `acco`.
    pub method: Option<String>,
    /// Number of workers (default: the cluster profile's, else 1).
    pub workers: Option<usize>,
    /// Nodes the workers are spread over, equally (default: the cluster
    /// profile's, else one node); FlexDeMo shards inside a node.
    pub nodes: Option<usize>,
    /// `real` (threads, really overlapping) or `sim` (virtual time).
    pub runtime: String,
    /// Where the workers live: `local` (threads of this process) or `mpi`
    /// (one process per worker, launched by `mpirun`; needs the `mpi` build
    /// feature; docs/mpi.md).
    pub backend: String,
    /// Cluster profile for `sim` (configs/clusters/*.toml): workers, device, links.
    pub cluster: Option<PathBuf>,
    /// Link, emulated (real) or simulated (sim): one tier, e.g. `1gbit,50us`,
    /// or with `nodes` the link inside nodes and the one between them (per
    /// node), e.g. `25gbit,5us/1gbit,10ms`.
    pub link: Option<String>,
    /// Speed factor per worker, e.g. `[1, 1, 1, 0.25]` (default all 1).
    pub speeds: Option<Vec<f64>>,
    /// What travels on the wire: `f32` or `bf16`.
    pub wire: Option<crate::comm::WireDtype>,
    /// `sim` without a cluster profile: virtual seconds per micro-batch (> 0).
    pub micro_batch_s: f64,
    /// Write a Chrome/Perfetto trace here (one compute and one comm track per worker).
    pub trace: Option<PathBuf>,
    /// dpu, acco-wp, acco: compute exactly this many micro-batches per
    /// stage, then wait for the round (timing-independent, reproducible
    /// results); unset: accumulate while the round is in flight.
    pub fixed_micro_batches: Option<usize>,
    /// What `steps` buys dpu, acco-wp and acco (the methods that compute as
    /// many micro-batches as fit while a round communicates): `rounds`,
    /// `steps` rounds of however many fit, as their papers run them; or
    /// `tokens`, the tokens of `steps` synchronous steps (`steps x
    /// grad_accum` micro-batches per worker, pooled: a faster worker
    /// computes more of them; the schedule followed by tokens), what every
    /// other method trains. Default `rounds`;
    /// `compare` defaults to `tokens`. Flag `--budget`.
    pub budget: BudgetUnit,
}

/// What `--steps` buys the methods that accumulate while communicating.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetUnit {
    /// `steps` rounds, each of as many micro-batches as fit.
    #[default]
    Rounds,
    /// The tokens of `steps` synchronous steps.
    Tokens,
}

impl Default for ParallelSection {
    fn default() -> Self {
        Self {
            method: None,
            workers: None,
            nodes: None,
            runtime: "real".into(),
            backend: "local".into(),
            cluster: None,
            link: None,
            speeds: None,
            wire: None,
            micro_batch_s: 0.1,
            trace: None,
            fixed_micro_batches: None,
            budget: BudgetUnit::Rounds,
        }
    }
}

impl ParallelSection {
    /// The values that are wrong whatever the run (the runtime's settings
    /// are checked with the cluster in [`crate::train::parallel::runtime`]).
    pub fn validate(&self) -> Result<()> {
        let s = self.micro_batch_s;
        // 0 or below would make every compute span empty: no virtual time, no throughput.
        anyhow::ensure!(
            s > 0.0 && s.is_finite(),
            "parallel.micro_batch_s must be a number of seconds > 0 (got {s}): the virtual time one micro-batch takes on the simulated runtime, e.g. micro_batch_s = 0.1"
        );
        Ok(())
    }
}
