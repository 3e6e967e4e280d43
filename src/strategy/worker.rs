//! What every strategy's worker owns: a model replica, its data shard and
//! sampler, and the plan shared by all workers.

use crate::comm::WireDtype;
use crate::data::sampler::{SamplerState, WindowSampler};
use crate::model::Gpt;
use crate::optim::{DecaySegments, LrSchedule, OptimizerConfig};
use crate::runtime::{Ctx, Work};
use anyhow::{Context, Result};
use std::ops::Range;
use std::sync::Arc;

/// One worker's model replica and data.
pub struct Worker {
    /// The replica (parameters identical on every worker at the start).
    pub model: Gpt,
    sampler: WindowSampler,
    /// The shard the worker was built on (async DiLoCo moves it to others).
    home: Range<usize>,
    tokens: Arc<Vec<u32>>,
    inputs: Vec<u32>,
    targets: Vec<u32>,
    batch: usize,
    seq: usize,
}

impl Worker {
    /// A worker drawing windows of `seq` tokens from `shard` of `tokens`,
    /// `batch` sequences per micro-batch; its sampler is seeded by (seed, rank).
    pub fn new(
        model: Gpt,
        tokens: Arc<Vec<u32>>,
        shard: Range<usize>,
        batch: usize,
        seq: usize,
        seed: u64,
        rank: usize,
    ) -> Result<Self> {
        let sampler = WindowSampler::new(shard.clone(), seq, seed, rank)?;
        Ok(Self {
            model,
            sampler,
            home: shard,
            tokens,
            inputs: vec![0; batch * seq],
            targets: vec![0; batch * seq],
            batch,
            seq,
        })
    }

    /// Tokens in the whole training stream (every shard's).
    pub fn data_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Tokens per micro-batch.
    pub fn tokens_per_micro_batch(&self) -> usize {
        self.batch * self.seq
    }

    /// Forward + backward of the next micro-batch; gradients accumulate with
    /// weight `loss_scale`. Returns the micro-batch's mean loss.
    pub fn micro_batch(&mut self, loss_scale: f32) -> f32 {
        self.sampler.fill_batch(&self.tokens, &mut self.inputs, &mut self.targets);
        self.model.forward_backward(&self.inputs, &self.targets, self.batch, self.seq, loss_scale)
    }

    /// Trains on data shard `shard` of `shards` (`shard_range` of the token
    /// stream) from now on, its sampler's random stream continuing.
    pub fn use_shard(&mut self, shard: usize, shards: usize) -> Result<()> {
        let range = crate::data::sampler::shard_range(self.tokens.len(), shard, shards);
        self.sampler.set_range(range).with_context(|| {
            format!("data shard {shard} of {shards} is too small: use fewer shards (--shards) or more text")
        })
    }

    /// Back on the shard the worker was built on, its random stream
    /// continuing: async DiLoCo saves there, so a checkpoint restores onto a
    /// freshly built worker (and its check that the data did not change holds).
    pub fn use_own_shard(&mut self) -> Result<()> {
        self.sampler.set_range(self.home.clone())
    }

    /// Where this worker's data stream and dropout are (for a checkpoint).
    pub fn state(&self) -> WorkerState {
        WorkerState { sampler: self.sampler.state(), dropout_rng: self.model.dropout_rng.clone() }
    }

    /// Continues the data stream and dropout from `s`.
    pub fn restore(&mut self, s: WorkerState) -> Result<()> {
        self.sampler.restore(s.sampler)?;
        self.model.dropout_rng = s.dropout_rng;
        Ok(())
    }
}

/// A worker's data position and dropout RNG, as checkpointed.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorkerState {
    /// The sampler mid-stream.
    pub sampler: SamplerState,
    /// Dropout's RNG.
    pub dropout_rng: rand_pcg::Pcg64,
}

/// Everything about the optimisation that all workers share.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Optimizer steps (rounds) of the whole run; the schedule spans them.
    pub steps: u64,
    /// The round this run stops at (`steps`, or earlier to emulate a
    /// preempted job: `--stop-at`).
    pub end: u64,
    /// Micro-batches per step for synchronous methods.
    pub grad_accum: usize,
    /// Learning rate per step.
    pub schedule: LrSchedule,
    /// Optimizer and hyper-parameters.
    pub optimizer: OptimizerConfig,
    /// Which elements of the flat parameter vector take weight decay.
    pub decay: DecaySegments,
    /// Global gradient-norm clip (0: off).
    pub grad_clip: f32,
    /// Overlapping methods (dpu, acco-wp, acco): `Some(k)` computes exactly
    /// k micro-batches per stage, then waits for the round, so results do
    /// not depend on timing (reproducible, comparable across backends);
    /// `None` accumulates for as long as the round is in flight (the papers').
    pub fixed_micro_batches: Option<usize>,
    /// Equal tokens (`parallel.equal_tokens`): the micro-batches each worker
    /// may compute over the run, `steps x grad_accum`, what a synchronous
    /// method trains. Only the methods that accumulate as many micro-batches
    /// as fit while a round communicates (dpu, acco-wp, acco) read it: they
    /// stop computing there, apply what they hold and end, and follow the
    /// schedule by tokens applied (acco/sharded.rs). `None`: they run
    /// `steps` rounds of however many micro-batches fit (the papers').
    pub micro_batch_budget: Option<u64>,
    /// How gradients and parameters travel (scalars always travel in f32).
    pub wire: WireDtype,
    /// The run's seed (`train.seed`): seeds draws a strategy makes besides
    /// the workers' data (async DiLoCo's shard sampling).
    pub seed: u64,
    /// Which workers crash and join when (`--faults`; async-diloco only).
    pub faults: super::faults::FaultPlan,
}

impl Plan {
    /// A plan of `steps` rounds with the given optimizer and schedule, one
    /// micro-batch per step, no clipping, f32 on the wire.
    pub fn new(steps: u64, schedule: LrSchedule, optimizer: OptimizerConfig, decay: DecaySegments) -> Plan {
        Plan {
            steps,
            end: steps,
            grad_accum: 1,
            schedule,
            optimizer,
            decay,
            grad_clip: 0.0,
            fixed_micro_batches: None,
            micro_batch_budget: None,
            wire: WireDtype::F32,
            seed: 0,
            faults: Default::default(),
        }
    }
}

/// A piece of the run's model: `values` at `offset` of the flat parameter
/// vector. The participants' pieces together cover it (one whole piece for
/// replica methods, one shard each for ACCO-wp's committed parameters).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelPiece {
    /// Where the piece starts.
    pub offset: usize,
    /// Its values.
    pub values: Vec<f32>,
}

/// The whole replica as the run's model, from participant 0 only (replica
/// methods: every worker holds the same parameters).
pub fn replica_piece(rank: usize, params: &[f32]) -> Option<ModelPiece> {
    (rank == 0).then(|| ModelPiece { offset: 0, values: params.to_vec() })
}

/// Assembles the run's model of `n` parameters from the participants' pieces.
pub fn assemble_model(n: usize, pieces: impl IntoIterator<Item = ModelPiece>) -> anyhow::Result<Vec<f32>> {
    let mut model = vec![0.0f32; n];
    let mut covered = vec![false; n];
    for p in pieces {
        let hi = (p.offset + p.values.len()).min(n);
        if p.offset < hi {
            model[p.offset..hi].copy_from_slice(&p.values[..hi - p.offset]);
            covered[p.offset..hi].iter_mut().for_each(|c| *c = true);
        }
    }
    match covered.iter().position(|c| !c) {
        Some(i) => anyhow::bail!("the participants' model pieces leave parameter {i} of {n} uncovered"),
        None => Ok(model),
    }
}

/// Clips `grads` to global norm `max_norm` (0: off; PyTorch's
/// `clip_grad_norm_`) as timed work, [`Work::grad_clip`] (plan/net.rs
/// `clip` charges the same).
pub async fn clip_grads<C: Ctx>(ctx: &mut C, grads: &mut [f32], max_norm: f32) {
    if max_norm > 0.0 {
        ctx.compute(Work::grad_clip(grads.len()), || crate::optim::clip_global_norm(grads, max_norm)).await;
    }
}

/// Zero the gradients and accumulate `k` micro-batches (loss weight 1/k);
/// returns their mean loss.
pub async fn accumulate<C: Ctx>(ctx: &mut C, w: &mut Worker, k: usize) -> f32 {
    w.model.zero_grads();
    let mut loss = 0.0f64;
    for _ in 0..k {
        loss += ctx.compute(Work::MicroBatch, || w.micro_batch(1.0 / k as f32)).await as f64;
    }
    (loss / k as f64) as f32
}

#[cfg(test)]
mod tests {
    use super::clip_grads;
    use crate::runtime::sim::{run, SimSpec};
    use crate::runtime::Ctx;

    /// The clip is work the simulator charges 12 bytes an element: 1000
    /// gradients at 12 kB/s take 1 s of virtual time, and they end at norm
    /// 1 (each 3 x 1 / (sqrt(9000) + 1e-6) = 0.0316228). Off (0), it is
    /// neither run nor charged.
    #[test]
    fn the_gradient_clip_is_costed_work_of_twelve_bytes_an_element() {
        let spec = SimSpec { memory_bytes_per_s: Some(12_000.0), ..SimSpec::flat(1, 1.0, None) };
        let out = run(spec, |mut ctx| async move {
            let mut g = vec![3.0f32; 1000];
            let t0 = ctx.now();
            clip_grads(&mut ctx, &mut g, 1.0).await;
            let (t1, clipped) = (ctx.now(), g[0]);
            clip_grads(&mut ctx, &mut g, 0.0).await;
            Ok((t1 - t0, ctx.now() - t1, clipped, g[0]))
        })
        .unwrap();
        let (on, off, clipped, after) = out[0];
        assert!((on - 1.0).abs() < 1e-12 && off == 0.0, "{on} {off}");
        assert!((clipped - 0.0316228).abs() < 1e-6 && after == clipped, "{clipped} {after}");
    }
}
