//! The sharded optimizer round shared by zero1, dpu, acco-wp and acco
//! (ACCO paper, Algorithm 1, "Communication CUDA stream"):
//!
//! ```text
//! sum_i N_i            <- all-reduce(N_i)                 (when counts vary; f32, exact)
//! Shard_i(sum_i g_i)   <- reduce-scatter(g_i)
//! Shard_i(theta')      <- ShardedOpt(Shard_i(theta), Shard_i(sum g / sum N))
//! theta'               <- all-gather(Shard_i(theta'))
//! ```
//!
//! The flat parameter vector is padded to a multiple of N and worker i owns
//! shard i and the optimizer state of that shard only. The whole round,
//! optimizer step included, is one [`CommTask`] ([`ShardedRound`]) that runs
//! on the communication side, as on the paper's communication stream: the
//! worker only starts it, keeps computing, and checks between micro-batches
//! whether it is done. Written once; the simulator and the real runtime
//! each run this same code.

use crate::comm::{padded_len, ReduceOp, WireDtype};
use crate::optim::{scale_to_norm, sum_of_squares, DecaySegments, Optimizer};
use crate::runtime::{CommSide, CommTask, Ctx, Group, Work};
use crate::strategy::journal::StrategyState;
use crate::strategy::outcome::MemoryBytes;
use crate::strategy::worker::{ModelPiece, Plan};
use anyhow::{Context, Result};

/// What the round does with the reduced gradient shard.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Update {
    /// theta <- Opt(theta, g): commits optimizer state.
    Commit,
    /// Gather Opt(theta, g) without committing anything (ACCO stage 1).
    LookAhead,
    /// Commit theta <- Opt(theta, g), then gather the prediction
    /// Opt(theta, g) at learning rate `predict_lr` from the new theta,
    /// without committing (ACCO-wp).
    CommitThenPredict {
        /// The learning rate of the step being predicted.
        predict_lr: f32,
    },
}

/// The shard's optimizer and parameters, stepped by the communication side.
struct ShardState {
    opt: Box<dyn Optimizer>,
    /// Own shard of the committed parameters theta(t).
    theta: Vec<f32>,
    decay: DecaySegments,
}

impl ShardState {
    fn step(&mut self, update: Update, lr: f32, g: &[f32], out: &mut [f32]) {
        let (opt, theta, decay) = (&mut self.opt, &mut self.theta, &self.decay);
        match update {
            Update::Commit => {
                opt.step(theta, g, lr, decay);
                out.copy_from_slice(theta);
            }
            // The look-ahead is one more optimizer step from theta with these
            // gradients, moments updated as such a step would (eq. 1 and eq.
            // WP read literally: theta~ = Opt(theta, g)), then discarded. The
            // papers leave open whether the prediction should reuse the
            // committed moments instead; docs/decisions.md records the choice.
            Update::LookAhead => opt.look_ahead(theta, g, lr, decay, out),
            Update::CommitThenPredict { predict_lr } => {
                opt.step(theta, g, lr, decay);
                opt.look_ahead(theta, g, predict_lr, decay, out);
            }
        }
    }
}

/// One sharded round: the buffers it owns while in flight, handed back.
pub struct ShardedRound {
    /// Padded gradients going out; the gathered parameters coming back.
    flat: Vec<f32>,
    /// This rank's gradient shard (scratch).
    shard_g: Vec<f32>,
    /// This rank's parameter shard to gather (scratch).
    shard_out: Vec<f32>,
    /// Micro-batches summed into `flat` by this rank.
    count: f32,
    /// The sum of counts when known in advance (no count all-reduce).
    known_total: Option<f32>,
    /// Under a token budget, what this worker reports of it (budget.rs):
    /// summed with the counts. `None`: nothing more is sent.
    extra: Option<Vec<f32>>,
    /// After the round: the sum of counts it divided by, and of `extra`.
    sums: (f32, Option<Vec<f32>>),
    /// Global-norm clip (0: off).
    clip: f32,
    update: Update,
    lr: f32,
    wire: WireDtype,
    state: ShardState,
}

impl CommTask for ShardedRound {
    type Output = ShardedRound;
    async fn run<C: CommSide>(mut self, c: &mut C) -> ShardedRound {
        let (total, extra) = match (self.known_total, self.extra.take()) {
            (Some(t), None) => (t, None),
            (None, None) => {
                let mut n = [self.count];
                c.all_reduce(&Group::World, &mut n, ReduceOp::Sum, WireDtype::F32).await;
                (n[0], None)
            }
            (known, Some(extra)) => {
                let mut n = [&[self.count][..], &extra].concat();
                c.all_reduce(&Group::World, &mut n, ReduceOp::Sum, WireDtype::F32).await;
                (known.unwrap_or(n[0]), Some(n.split_off(1)))
            }
        };
        self.sums = (total, extra);
        c.reduce_scatter(&Group::World, &self.flat, &mut self.shard_g, ReduceOp::Sum, self.wire).await;
        // Division, like the Mean collective, so zero1 == ddp bitwise.
        self.shard_g.iter_mut().for_each(|g| *g /= total);
        if self.clip > 0.0 {
            // Global norm: squared shard norms summed in f64, sent exactly.
            // One costed pass for the norm and the scale (worker.rs `clip_grads`).
            let work = Work::grad_clip(self.shard_g.len());
            let g = &self.shard_g;
            let mut sq = [c.work(work, || sum_of_squares(g) as f32).await];
            c.all_reduce(&Group::World, &mut sq, ReduceOp::Sum, WireDtype::F32).await;
            scale_to_norm(&mut self.shard_g, sq[0], self.clip);
        }
        let (update, lr) = (self.update, self.lr);
        let params = self.shard_g.len();
        let (state, g, out) = (&mut self.state, &self.shard_g, &mut self.shard_out);
        c.work(Work::Optimizer { params }, || state.step(update, lr, g, out)).await;
        c.all_gather(&Group::World, &self.shard_out, &mut self.flat, self.wire).await;
        self
    }
}

/// A round in flight (or not started).
pub struct Round<H> {
    handle: Option<H>,
}

/// One worker's shard of the parameters and of the optimizer state.
pub struct Sharded {
    n: usize,
    lo: usize,
    /// The round's buffers and shard state, here between rounds.
    op: Option<ShardedRound>,
}

impl Sharded {
    /// The shard of `params` (the replica's initial parameters) owned by `rank`.
    pub fn new(params: &[f32], rank: usize, world: usize, plan: &Plan) -> Result<Self> {
        let n = params.len();
        let padded = padded_len(n, world);
        let m = padded / world;
        let lo = rank * m;
        let theta = (lo..lo + m).map(|i| if i < n { params[i] } else { 0.0 }).collect();
        let state = ShardState { opt: plan.optimizer.try_build(m)?, theta, decay: plan.decay.restrict(lo, lo + m) };
        let op = ShardedRound {
            flat: vec![0.0; padded],
            shard_g: vec![0.0; m],
            shard_out: vec![0.0; m],
            count: 0.0,
            known_total: None,
            extra: None,
            sums: (0.0, None),
            clip: plan.grad_clip,
            update: Update::Commit,
            lr: 0.0,
            wire: plan.wire,
            state,
        };
        Ok(Self { n, lo, op: Some(op) })
    }

    fn op(&self) -> &ShardedRound {
        self.op.as_ref().expect("no round in flight")
    }

    /// Optimizer steps committed so far.
    pub fn steps_taken(&self) -> u64 {
        self.op().state.opt.steps_taken()
    }

    /// Start a round on `grads` (length n). `count` is this worker's number
    /// of micro-batches in `grads`; with `known_total = Some(t)` the counts
    /// are not communicated and the reduced sum is divided by `t`. `extra`:
    /// a token budget's report, summed with the counts ([`Sharded::sums`]).
    #[allow(clippy::too_many_arguments)]
    pub fn start<C: Ctx>(
        &mut self,
        ctx: &mut C,
        grads: &[f32],
        count: f32,
        known_total: Option<f32>,
        update: Update,
        lr: f32,
        extra: Option<Vec<f32>>,
    ) -> Round<C::Handle<ShardedRound>> {
        let mut op = self.op.take().expect("one round at a time");
        op.flat[..self.n].copy_from_slice(grads);
        op.flat[self.n..].fill(0.0);
        (op.count, op.known_total, op.update, op.lr, op.extra) = (count, known_total, update, lr, extra);
        Round { handle: Some(ctx.start(op)) }
    }

    /// Whether the round has completed (never waits).
    pub fn is_done<C: Ctx>(&self, ctx: &C, r: &Round<C::Handle<ShardedRound>>) -> bool {
        r.handle.as_ref().is_none_or(|h| ctx.is_done(h))
    }

    /// Wait for the round to complete.
    pub async fn finish<C: Ctx>(&mut self, ctx: &mut C, r: &mut Round<C::Handle<ShardedRound>>) {
        if let Some(h) = r.handle.take() {
            self.op = Some(ctx.wait(h).await);
        }
    }

    /// The last completed round's sums: of the counts (what it divided
    /// by) and of the workers' `extra` (`None` without a budget).
    pub fn sums(&self) -> (f32, Option<&[f32]>) {
        let (total, extra) = &self.op().sums;
        (*total, extra.as_deref())
    }

    /// The gathered parameters of the last completed round (length n).
    pub fn gathered(&self) -> &[f32] {
        &self.op().flat[..self.n]
    }

    /// The committed parameters of this shard, as a piece of the run's model.
    pub fn committed_piece(&self) -> ModelPiece {
        let theta = &self.op().state.theta;
        let hi = (self.lo + theta.len()).min(self.n).max(self.lo);
        ModelPiece { offset: self.lo, values: theta[..hi - self.lo].to_vec() }
    }

    /// The shard's optimizer state and committed parameters, for a checkpoint.
    pub fn save(&self, into: &mut StrategyState) {
        let s = &self.op().state;
        for (name, t) in s.opt.state_tensors() {
            into.tensors.push((format!("shard.{name}"), t.to_vec()));
        }
        into.tensors.push(("shard.theta".into(), s.theta.clone()));
        into.optimizer_steps = s.opt.steps_taken();
    }

    /// Restores what [`Sharded::save`] wrote.
    pub fn restore(&mut self, from: &StrategyState) -> Result<()> {
        let s = &mut self.op.as_mut().expect("no round in flight").state;
        let mut opt = Vec::new();
        for (name, t) in &from.tensors {
            if let Some(n) = name.strip_prefix("shard.") {
                if n == "theta" {
                    anyhow::ensure!(
                        t.len() == s.theta.len(),
                        "checkpointed shard has {} parameters, this worker's has {}",
                        t.len(),
                        s.theta.len()
                    );
                    s.theta.copy_from_slice(t);
                } else {
                    opt.push((n.to_string(), t.clone()));
                }
            }
        }
        s.opt.load_state(from.optimizer_steps, &opt).context("checkpointed shard optimizer state does not fit")
    }

    /// Model-state bytes of a worker using this shard, with `held` extra
    /// full-size gradient buffers kept between rounds (ACCO's g~, DPU's g(t-1)).
    pub fn memory(&self, held: usize) -> MemoryBytes {
        let f = std::mem::size_of::<f32>();
        let op = self.op();
        MemoryBytes {
            params: f * self.n,
            grads: f * self.n,
            comm_buffers: f * (op.flat.len() + op.shard_g.len() + op.shard_out.len() + held * self.n),
            optimizer: f * (op.state.opt.state_len() + op.state.theta.len()),
            outer: 0,
        }
    }
}

/// Compute micro-batches on the current parameters (at least one, so
/// N_i >= 1) and advance `round` between them, until it completes: ACCO's
/// "accumulate while you communicate". With `fixed = Some(k)`, exactly k
/// (the caller then waits for the round). At most `cap` (a token budget's
/// micro-batches left; none when it is 0). Gradients are summed (loss
/// weight 1) into the model's accumulator; returns (sum of losses, count).
pub async fn accumulate_while<C: Ctx>(
    ctx: &mut C,
    w: &mut crate::strategy::worker::Worker,
    shard: &Sharded,
    round: &Round<C::Handle<ShardedRound>>,
    fixed: Option<usize>,
    cap: Option<usize>,
) -> (f64, usize) {
    let (mut loss, mut count) = (0.0f64, 0usize);
    if cap == Some(0) {
        return (loss, count);
    }
    loop {
        loss += ctx.compute(Work::MicroBatch, || w.micro_batch(1.0)).await as f64;
        count += 1;
        let done = cap.is_some_and(|c| count >= c)
            || match fixed {
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
        let mut op = self.op.take().expect("no round in flight");
        let (mut input, output) = (std::mem::take(&mut op.shard_out), std::mem::take(&mut op.flat));
        input.copy_from_slice(&op.state.theta);
        let (input, output) =
            ctx.run(crate::runtime::AllGather { group: Group::World, input, output, wire: op.wire }).await;
        (op.shard_out, op.flat) = (input, output);
        self.op = Some(op);
        self.gathered()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::bf16::round_bf16;
    use crate::optim::{LrSchedule, OptimizerConfig, SgdConfig};
    use crate::runtime::sim::{self, SimSpec};

    #[test]
    fn counts_travel_exactly_even_with_a_bf16_wire() {
        // Two workers with counts 257 and 258 and gradient sums of 256 each
        // (bf16-exact). SGD at lr 1 from 0: the committed shard (f32, before
        // the bf16 all-gather) is -512 / 515; had the counts travelled in
        // bf16 (257 -> 256) it would be -512 / 514.
        let plan = Plan {
            wire: WireDtype::Bf16,
            ..Plan::new(1, LrSchedule::constant(1.0), OptimizerConfig::Sgd(SgdConfig::default()), DecaySegments::none())
        };
        let out = sim::run(SimSpec::flat(2, 1.0, None), |mut ctx| {
            let plan = plan.clone();
            async move {
                let mut shard = Sharded::new(&[0.0; 4], ctx.rank(), 2, &plan)?;
                let count = 257.0 + ctx.rank() as f32;
                let mut r = shard.start(&mut ctx, &[256.0; 4], count, None, Update::Commit, 1.0, None);
                shard.finish(&mut ctx, &mut r).await;
                Ok((shard.committed_piece().values, shard.gathered().to_vec()))
            }
        })
        .unwrap();
        let exact = -(512.0f32 / 515.0);
        for (committed, gathered) in out {
            assert!(committed.iter().all(|&x| x == exact) && exact != -(512.0f32 / 514.0), "{committed:?}");
            // What travels back is the bf16 rounding of that.
            assert_eq!(gathered, vec![round_bf16(exact); 4]);
        }
    }
}
