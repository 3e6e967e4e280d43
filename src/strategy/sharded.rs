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
//! shard i and the optimizer state of that shard only. A round is a small
//! state machine so a worker can keep computing micro-batches while it is
//! in flight and advance it in between ([`Sharded::progress`]); the shard's
//! optimizer step runs on the worker when the reduce-scatter has landed (it
//! is 1/N of a full step, small next to a micro-batch).

use super::worker::Plan;
use crate::comm::{padded_len, ReduceOp};
use crate::optim::{DecaySegments, Optimizer};
use crate::runtime::{Collective, Ctx, Work};
use anyhow::Result;

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

enum Phase<H> {
    Reducing { counts: Option<H>, grads: H },
    Norm { h: H },
    Gathering { h: H },
    Done,
}

/// A round in flight.
pub struct Round<H> {
    phase: Phase<H>,
    update: Update,
    lr: f32,
    total: f32,
}

/// One worker's shard of the parameters and of the optimizer state.
pub struct Sharded {
    n: usize,
    m: usize,
    lo: usize,
    opt: Box<dyn Optimizer>,
    decay: DecaySegments,
    grad_clip: f32,
    /// Own shard of the committed parameters theta(t).
    theta: Vec<f32>,
    /// Padded flat buffer: gradients going out, parameters coming back.
    flat: Vec<f32>,
    shard_g: Vec<f32>,
    shard_out: Vec<f32>,
}

impl Sharded {
    /// The shard of `params` (the replica's initial parameters) owned by `rank`.
    pub fn new(params: &[f32], rank: usize, world: usize, plan: &Plan) -> Result<Self> {
        let n = params.len();
        let padded = padded_len(n, world);
        let m = padded / world;
        let lo = rank * m;
        let theta = (lo..lo + m).map(|i| if i < n { params[i] } else { 0.0 }).collect();
        Ok(Self {
            n,
            m,
            lo,
            opt: plan.optimizer.try_build(m)?,
            decay: plan.decay.restrict(lo, lo + m),
            grad_clip: plan.grad_clip,
            theta,
            flat: vec![0.0; padded],
            shard_g: vec![0.0; m],
            shard_out: vec![0.0; m],
        })
    }

    /// Optimizer steps committed so far.
    pub fn steps_taken(&self) -> u64 {
        self.opt.steps_taken()
    }

    /// Start a round on `grads` (length n). `count` is this worker's number
    /// of micro-batches in `grads`; with `known_total = Some(t)` the counts
    /// are not communicated and the reduced sum is divided by `t`.
    pub fn start<C: Ctx>(&mut self, ctx: &mut C, grads: &[f32], count: f32, known_total: Option<f32>, update: Update, lr: f32) -> Round<C::Handle> {
        let counts = match known_total {
            Some(_) => None,
            None => Some(ctx.start(Collective::AllReduce { buf: vec![count], op: ReduceOp::Sum })),
        };
        let mut flat = std::mem::take(&mut self.flat);
        flat[..self.n].copy_from_slice(grads);
        flat[self.n..].fill(0.0);
        let grads = ctx.start(Collective::ReduceScatter { input: flat, output: std::mem::take(&mut self.shard_g), op: ReduceOp::Sum });
        Round { phase: Phase::Reducing { counts, grads }, update, lr, total: known_total.unwrap_or(0.0) }
    }

    /// Advance the round as far as it can go without waiting; true when done.
    pub async fn progress<C: Ctx>(&mut self, ctx: &mut C, r: &mut Round<C::Handle>) -> bool {
        loop {
            let ready = match &r.phase {
                Phase::Reducing { counts, grads } => counts.as_ref().is_none_or(|h| ctx.is_done(h)) && ctx.is_done(grads),
                Phase::Norm { h } | Phase::Gathering { h } => ctx.is_done(h),
                Phase::Done => return true,
            };
            if !ready {
                return false;
            }
            self.advance(ctx, r).await;
        }
    }

    /// Wait for the round to complete.
    pub async fn finish<C: Ctx>(&mut self, ctx: &mut C, r: &mut Round<C::Handle>) {
        while !matches!(r.phase, Phase::Done) {
            self.advance(ctx, r).await;
        }
    }

    /// The gathered parameters of the last completed round (length n).
    pub fn gathered(&self) -> &[f32] {
        &self.flat[..self.n]
    }

    /// Take the next phase (waiting on the current one's collectives).
    async fn advance<C: Ctx>(&mut self, ctx: &mut C, r: &mut Round<C::Handle>) {
        match std::mem::replace(&mut r.phase, Phase::Done) {
            Phase::Reducing { counts, grads } => {
                if let Some(h) = counts {
                    r.total = ctx.wait(h).await.output[0];
                }
                let done = ctx.wait(grads).await;
                (self.flat, self.shard_g) = (done.input, done.output);
                // Division, as the Mean collective does, so zero1 == ddp bitwise.
                let total = r.total;
                self.shard_g.iter_mut().for_each(|g| *g /= total);
                if self.grad_clip > 0.0 {
                    let sq: f64 = self.shard_g.iter().map(|&g| (g as f64) * (g as f64)).sum();
                    r.phase = Phase::Norm { h: ctx.start(Collective::AllReduce { buf: vec![sq as f32], op: ReduceOp::Sum }) };
                } else {
                    self.step_and_gather(ctx, r).await;
                }
            }
            Phase::Norm { h } => {
                let norm = ctx.wait(h).await.output[0].sqrt();
                if norm.is_finite() && norm > self.grad_clip {
                    let k = self.grad_clip / (norm + 1e-6);
                    self.shard_g.iter_mut().for_each(|g| *g *= k);
                }
                self.step_and_gather(ctx, r).await;
            }
            Phase::Gathering { h } => {
                let done = ctx.wait(h).await;
                (self.shard_out, self.flat) = (done.input, done.output);
            }
            Phase::Done => {}
        }
    }

    async fn step_and_gather<C: Ctx>(&mut self, ctx: &mut C, r: &mut Round<C::Handle>) {
        let (lr, m) = (r.lr, self.m);
        let (opt, theta, g, out, decay) = (&mut self.opt, &mut self.theta, &self.shard_g, &mut self.shard_out, &self.decay);
        ctx.compute(Work::Optimizer { params: m }, || match r.update {
            Update::Commit => {
                opt.step(theta, g, lr, decay);
                out.copy_from_slice(theta);
            }
            Update::LookAhead => opt.look_ahead(theta, g, lr, decay, out),
            Update::CommitThenPredict => {
                opt.step(theta, g, lr, decay);
                opt.look_ahead(theta, g, lr, decay, out);
            }
        })
        .await;
        let out = std::mem::take(&mut self.shard_out);
        r.phase = Phase::Gathering { h: ctx.start(Collective::AllGather { input: out, output: std::mem::take(&mut self.flat) }) };
    }

    /// Model-state bytes of a worker using this shard, with `held` extra
    /// full-size gradient buffers kept between rounds (ACCO's g~, DPU's g(t-1)).
    pub fn memory(&self, held: usize) -> super::worker::MemoryBytes {
        let f = std::mem::size_of::<f32>();
        super::worker::MemoryBytes {
            params: f * self.n,
            grads: f * self.n,
            comm_buffers: f * (self.flat.len() + self.shard_g.len() + self.shard_out.len() + held * self.n),
            optimizer: f * (self.opt.state_len() + self.theta.len()),
        }
    }

    /// First index of this worker's shard in the flat vector.
    pub fn shard_start(&self) -> usize {
        self.lo
    }
}

/// Compute micro-batches on the current parameters (at least one, so
/// N_i >= 1) and advance `round` between them, until it completes: ACCO's
/// "accumulate while you communicate". Gradients are summed (loss weight 1)
/// into the model's accumulator; returns (sum of losses, count).
pub async fn accumulate_while<C: Ctx>(ctx: &mut C, w: &mut super::Worker, shard: &mut Sharded, round: &mut Round<C::Handle>) -> (f64, usize) {
    let (mut loss, mut count) = (0.0f64, 0usize);
    loop {
        loss += ctx.compute(Work::MicroBatch, || w.micro_batch(1.0)).await as f64;
        count += 1;
        if shard.progress(ctx, round).await {
            return (loss, count);
        }
    }
}

impl Sharded {
    /// All-gather the committed parameters (e.g. at the end of ACCO-wp,
    /// whose replicas hold a prediction).
    pub async fn gather_committed<C: Ctx>(&mut self, ctx: &mut C) -> &[f32] {
        self.shard_out.copy_from_slice(&self.theta);
        let h = ctx.start(Collective::AllGather { input: std::mem::take(&mut self.shard_out), output: std::mem::take(&mut self.flat) });
        let done = ctx.wait(h).await;
        (self.shard_out, self.flat) = (done.input, done.output);
        &self.flat[..self.n]
    }
}
