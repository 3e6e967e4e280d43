//! Runtimes: how the workers of a strategy are run.
//!
//! A strategy is written once as an `async fn` over a [`Ctx`] and runs in
//! both runtimes (shared/DESIGN.md, "One strategy, two runtimes"):
//!
//! - [`sim`]: one thread, virtual time, an event queue ordered by
//!   (time, rank). Compute costs come from a cost model, collectives complete
//!   at `last join + link cost`. Real math, deterministic by construction.
//! - [`real`]: one OS thread per worker plus one communication thread per
//!   worker; started collectives really overlap the next micro-batches.
//!
//! A strategy never sleeps, reads a clock or spawns a thread: it asks its
//! context to compute and to communicate.

pub mod cluster;
pub mod real;
pub mod sim;

use crate::comm::{CommStats, ReduceOp};
use crate::metrics::EventLog;
use std::future::Future;

/// Work a strategy asks the runtime to time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Work {
    /// Forward + backward of one micro-batch.
    MicroBatch,
    /// An optimizer step over this many parameters (sim: free, it is
    /// memory-bound and small next to a micro-batch; real: measured).
    Optimizer { params: usize },
}

/// A collective, with the buffers it takes over until it completes.
#[derive(Debug)]
pub enum Collective {
    /// In place on `buf`.
    AllReduce { buf: Vec<f32>, op: ReduceOp },
    /// `input.len() == world * output.len()`.
    ReduceScatter { input: Vec<f32>, output: Vec<f32>, op: ReduceOp },
    /// `output.len() == world * input.len()`.
    AllGather { input: Vec<f32>, output: Vec<f32> },
    /// In place on `buf`, from `root`.
    Broadcast { buf: Vec<f32>, root: usize },
    /// A whole sharded-optimizer round, run by the communication side
    /// without the worker (the ACCO paper's communication stream).
    Sharded(Box<ShardedOp>),
}

/// The local work of a sharded round between its reduce-scatter and its
/// all-gather: an optimizer step on this rank's shard.
pub trait ShardStep: Send {
    /// From the reduced, normalised (and clipped) gradient shard, write the
    /// parameter shard to gather into `out`.
    fn step(&mut self, grad_shard: &[f32], out: &mut [f32]);
    /// For the owner to reach its concrete state between rounds.
    fn as_any(&mut self) -> &mut dyn std::any::Any;
}

/// One sharded round (ACCO paper, Algorithm 1, communication stream):
/// `total = known_total or all-reduce(count)`; `g_r = reduce-scatter(flat) / total`;
/// optional global-norm clip (all-reduce of the squared shard norms);
/// `out_r = step(g_r)`; `flat = all-gather(out)`.
pub struct ShardedOp {
    /// Padded gradients going out; the gathered parameters coming back.
    pub flat: Vec<f32>,
    /// This rank's gradient shard (scratch).
    pub shard_g: Vec<f32>,
    /// This rank's parameter shard to gather (scratch).
    pub shard_out: Vec<f32>,
    /// Micro-batches summed into `flat` by this rank.
    pub count: f32,
    /// The sum of counts when known in advance (no count all-reduce).
    pub known_total: Option<f32>,
    /// Global-norm clip (0: off).
    pub clip: f32,
    /// The optimizer step on the shard.
    pub step: Box<dyn ShardStep>,
}

impl ShardedOp {
    /// Scale the shard by 1/total (division, like the Mean collective, so
    /// zero1 == ddp bitwise).
    pub fn normalise(&mut self, total: f32) {
        self.shard_g.iter_mut().for_each(|g| *g /= total);
    }

    /// This shard's squared norm, summed in f64 then rounded for the wire.
    pub fn shard_sq_norm(&self) -> f32 {
        self.shard_g.iter().map(|&g| (g as f64) * (g as f64)).sum::<f64>() as f32
    }

    /// Clip by the global norm `sq_total.sqrt()` (PyTorch's rule).
    pub fn clip_by(&mut self, sq_total: f32) {
        let norm = sq_total.sqrt();
        if self.clip > 0.0 && norm.is_finite() && norm > self.clip {
            let k = self.clip / (norm + 1e-6);
            self.shard_g.iter_mut().for_each(|g| *g *= k);
        }
    }

    /// Run the shard step into `shard_out`.
    pub fn run_step(&mut self) {
        self.step.step(&self.shard_g, &mut self.shard_out);
    }
}

impl std::fmt::Debug for ShardedOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ShardedOp {{ n: {}, shard: {}, count: {} }}", self.flat.len(), self.shard_g.len(), self.count)
    }
}

/// The buffers of a completed collective, handed back.
#[derive(Debug, Default)]
pub struct Finished {
    /// The result (the in-place buffer, or the output).
    pub output: Vec<f32>,
    /// The input of reduce-scatter / all-gather, for reuse; empty otherwise.
    pub input: Vec<f32>,
    /// A sharded round, handed back with its gathered parameters in `flat`.
    pub sharded: Option<Box<ShardedOp>>,
}

/// What a worker's strategy can ask of its runtime.
pub trait Ctx {
    /// Handle of a started collective.
    type Handle;
    /// This worker's rank.
    fn rank(&self) -> usize;
    /// Number of workers.
    fn world(&self) -> usize;
    /// Seconds since the run started (virtual in sim).
    fn now(&self) -> f64;
    /// Run `f` (the math) and account for its time.
    fn compute<R>(&mut self, work: Work, f: impl FnOnce() -> R) -> impl Future<Output = R>;
    /// Start a collective; it proceeds while the worker computes.
    fn start(&mut self, op: Collective) -> Self::Handle;
    /// Has it completed (at the current time)?
    fn is_done(&self, h: &Self::Handle) -> bool;
    /// Wait for it and take the buffers back.
    fn wait(&mut self, h: Self::Handle) -> impl Future<Output = Finished>;
    /// This worker's accounting so far (`total_s` = now).
    fn times(&self) -> WorkerTimes;
    /// Tag the spans recorded from now on with optimizer round `round`
    /// (so the summary can count micro-batches per round).
    fn mark_round(&mut self, round: u64);
    /// The compute and communication spans recorded so far (taken).
    fn take_events(&mut self) -> EventLog;
}

impl Collective {
    /// Short name, for traces.
    pub fn name(&self) -> &'static str {
        match self {
            Collective::AllReduce { .. } => "all_reduce",
            Collective::ReduceScatter { .. } => "reduce_scatter",
            Collective::AllGather { .. } => "all_gather",
            Collective::Broadcast { .. } => "broadcast",
            Collective::Sharded(_) => "sharded_round",
        }
    }

    /// Bytes this rank sends under the ring model of [`CommStats`], with
    /// `bytes_per_elem` on the wire and `p` workers.
    pub fn bytes_sent(&self, rank: usize, p: usize, bytes_per_elem: usize) -> u64 {
        let mut s = CommStats::default();
        match self {
            Collective::AllReduce { buf, .. } => s.count_all_reduce(buf.len(), p, bytes_per_elem),
            Collective::ReduceScatter { output, .. } => s.count_scatter_gather(output.len(), p, bytes_per_elem),
            Collective::AllGather { input, .. } => s.count_scatter_gather(input.len(), p, bytes_per_elem),
            Collective::Broadcast { buf, root } => s.count_broadcast(buf.len(), p, bytes_per_elem, rank, *root),
            Collective::Sharded(op) => {
                // reduce-scatter + all-gather of the padded vector (+ two scalars at most)
                s.count_scatter_gather(op.shard_g.len(), p, bytes_per_elem);
                s.count_scatter_gather(op.shard_g.len(), p, bytes_per_elem);
            }
        }
        s.bytes_sent
    }
}

/// The name a [`Work`] gets in traces.
pub fn work_name(w: Work) -> &'static str {
    match w {
        Work::MicroBatch => "micro-batch",
        Work::Optimizer { .. } => "optimizer",
    }
}

/// Per-worker accounting a runtime keeps while a strategy runs.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct WorkerTimes {
    /// Seconds spent in [`Ctx::compute`].
    pub compute_s: f64,
    /// Seconds spent blocked in [`Ctx::wait`] (idle, waiting on communication).
    pub idle_s: f64,
    /// Micro-batches computed.
    pub micro_batches: u64,
    /// Collectives started.
    pub collectives: u64,
    /// Seconds from the start to when these times were read.
    pub total_s: f64,
}
