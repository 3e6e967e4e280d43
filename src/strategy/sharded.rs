//! The sharded optimizer round shared by zero1, dpu, acco-wp and acco
//! (ACCO paper, Algorithm 1, "Communication CUDA stream"):
//!
//! ```text
//! sum_i N_i            <- all-reduce(N_i)                 (when counts vary)
//! Shard_i(sum_i g_i)   <- reduce-scatter(g_i)
//! Shard_i(theta')      <- ShardedOpt(Shard_i(theta), Shard_i(sum g / sum N))
//! theta'               <- all-gather(Shard_i(theta'))
//! ```
//!
//! The flat parameter vector is padded to a multiple of N and worker i owns
//! shard i and the optimizer state of that shard only. The whole round,
//! optimizer step included, runs on the communication side (one
//! [`Collective::Sharded`] op: the real runtime's communication thread, or
//! the simulator at the reduce-scatter's completion), as on the paper's
//! communication stream: the worker only starts it, keeps computing, and
//! checks between micro-batches whether it is done.

use super::worker::Plan;
use crate::comm::padded_len;
use crate::optim::{DecaySegments, Optimizer};
use crate::runtime::{Collective, Ctx, ShardStep, ShardedOp, Work};
use anyhow::Result;
use std::any::Any;

/// What the round does with the reduced gradient shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// theta <- Opt(theta, g): commits optimizer state.
    Commit,
    /// Gather Opt(theta, g) without committing anything (ACCO stage 1).
    LookAhead,
    /// Commit theta <- Opt(theta, g), then gather the prediction
    /// Opt(theta, g) taken from the new theta without committing (ACCO-wp).
    CommitThenPredict,
}

/// A round in flight.
pub struct Round<H> {
    handle: Option<H>,
}

/// The shard's optimizer and parameters, run by the communication side.
struct ShardState {
    opt: Box<dyn Optimizer>,
    /// Own shard of the committed parameters theta(t).
    theta: Vec<f32>,
    decay: DecaySegments,
    update: Update,
    lr: f32,
}

impl ShardStep for ShardState {
    fn step(&mut self, g: &[f32], out: &mut [f32]) {
        let (opt, theta, decay, lr) = (&mut self.opt, &mut self.theta, &self.decay, self.lr);
        match self.update {
            Update::Commit => {
                opt.step(theta, g, lr, decay);
                out.copy_from_slice(theta);
            }
            Update::LookAhead => opt.look_ahead(theta, g, lr, decay, out),
            Update::CommitThenPredict => {
                opt.step(theta, g, lr, decay);
                opt.look_ahead(theta, g, lr, decay, out);
            }
        }
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// One worker's shard of the parameters and of the optimizer state.
pub struct Sharded {
    n: usize,
    /// The round's buffers and shard state, here between rounds.
    op: Option<Box<ShardedOp>>,
}

impl Sharded {
    /// The shard of `params` (the replica's initial parameters) owned by `rank`.
    pub fn new(params: &[f32], rank: usize, world: usize, plan: &Plan) -> Result<Self> {
        let n = params.len();
        let padded = padded_len(n, world);
        let m = padded / world;
        let lo = rank * m;
        let theta = (lo..lo + m).map(|i| if i < n { params[i] } else { 0.0 }).collect();
        let state = ShardState {
            opt: plan.optimizer.try_build(m)?,
            theta,
            decay: plan.decay.restrict(lo, lo + m),
            update: Update::Commit,
            lr: 0.0,
        };
        let op = ShardedOp {
            flat: vec![0.0; padded],
            shard_g: vec![0.0; m],
            shard_out: vec![0.0; m],
            count: 0.0,
            known_total: None,
            clip: plan.grad_clip,
            step: Box::new(state),
        };
        Ok(Self { n, op: Some(Box::new(op)) })
    }

    fn state(&mut self) -> &mut ShardState {
        let op = self.op.as_mut().expect("no round in flight");
        op.step.as_any().downcast_mut::<ShardState>().expect("Sharded's own step")
    }

    /// Optimizer steps committed so far.
    pub fn steps_taken(&mut self) -> u64 {
        self.state().opt.steps_taken()
    }

    /// Start a round on `grads` (length n). `count` is this worker's number
    /// of micro-batches in `grads`; with `known_total = Some(t)` the counts
    /// are not communicated and the reduced sum is divided by `t`.
    pub fn start<C: Ctx>(
        &mut self,
        ctx: &mut C,
        grads: &[f32],
        count: f32,
        known_total: Option<f32>,
        update: Update,
        lr: f32,
    ) -> Round<C::Handle> {
        let s = self.state();
        (s.update, s.lr) = (update, lr);
        let mut op = self.op.take().expect("one round at a time");
        op.flat[..self.n].copy_from_slice(grads);
        op.flat[self.n..].fill(0.0);
        (op.count, op.known_total) = (count, known_total);
        Round { handle: Some(ctx.start(Collective::Sharded(op))) }
    }

    /// Whether the round has completed (never waits).
    pub fn is_done<C: Ctx>(&self, ctx: &C, r: &Round<C::Handle>) -> bool {
        r.handle.as_ref().is_none_or(|h| ctx.is_done(h))
    }

    /// Wait for the round to complete.
    pub async fn finish<C: Ctx>(&mut self, ctx: &mut C, r: &mut Round<C::Handle>) {
        if let Some(h) = r.handle.take() {
            self.op = Some(ctx.wait(h).await.sharded.expect("a sharded round hands its op back"));
        }
    }

    /// The gathered parameters of the last completed round (length n).
    pub fn gathered(&self) -> &[f32] {
        &self.op.as_ref().expect("no round in flight").flat[..self.n]
    }

    /// Model-state bytes of a worker using this shard, with `held` extra
    /// full-size gradient buffers kept between rounds (ACCO's g~, DPU's g(t-1)).
    pub fn memory(&mut self, held: usize) -> super::worker::MemoryBytes {
        let f = std::mem::size_of::<f32>();
        let n = self.n;
        let (flat, sg, so) = {
            let op = self.op.as_ref().expect("no round in flight");
            (op.flat.len(), op.shard_g.len(), op.shard_out.len())
        };
        let s = self.state();
        super::worker::MemoryBytes {
            params: f * n,
            grads: f * n,
            comm_buffers: f * (flat + sg + so + held * n),
            optimizer: f * (s.opt.state_len() + s.theta.len()),
        }
    }
}

/// Compute micro-batches on the current parameters (at least one, so
/// N_i >= 1) and advance `round` between them, until it completes: ACCO's
/// "accumulate while you communicate". With `fixed = Some(k)`, exactly k
/// (the caller then waits for the round). Gradients are summed (loss
/// weight 1) into the model's accumulator; returns (sum of losses, count).
pub async fn accumulate_while<C: Ctx>(
    ctx: &mut C,
    w: &mut super::Worker,
    shard: &mut Sharded,
    round: &mut Round<C::Handle>,
    fixed: Option<usize>,
) -> (f64, usize) {
    let (mut loss, mut count) = (0.0f64, 0usize);
    loop {
        loss += ctx.compute(Work::MicroBatch, || w.micro_batch(1.0)).await as f64;
        count += 1;
        let done = match fixed {
            Some(k) => count >= k,
            None => shard.is_done(ctx, round),
        };
        if done {
            return (loss, count);
        }
    }
}

impl Sharded {
    /// All-gather the committed parameters (e.g. at the end of ACCO-wp,
    /// whose replicas hold a prediction).
    pub async fn gather_committed<C: Ctx>(&mut self, ctx: &mut C) -> &[f32] {
        let theta = self.state().theta.clone();
        let mut op = self.op.take().expect("no round in flight");
        let (mut input, output) = (std::mem::take(&mut op.shard_out), std::mem::take(&mut op.flat));
        input.copy_from_slice(&theta);
        let h = ctx.start(Collective::AllGather { input, output });
        let done = ctx.wait(h).await;
        (op.shard_out, op.flat) = (done.input, done.output);
        self.op = Some(op);
        &self.op.as_ref().expect("just restored").flat[..self.n]
    }
}
