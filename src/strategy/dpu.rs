//! DPU, the delayed parameter update (Ren et al. 2021) as re-purposed by the
//! ACCO paper (Sec. 3, eq. DPU): the gradients of round t are computed on
//! theta(t) while the communication of round t-1's gradients and the
//! sharded optimizer step run in parallel, so every update is one step stale.
//!
//! ```text
//! g_i(-1) = grad F(theta(0), xi),  N_i(-1) = 1
//! for t in 0..T (both sides in parallel):
//!     g_i(t) = sum_{k <= N_i(t)} grad F(theta(t), xi_{i,k})      | theta(t+1) = Opt(theta(t), sum_i g_i(t-1) / sum_i N_i(t-1))
//! ```
//! The first `warmup_steps` rounds are not delayed (zero1 steps), the
//! recipe Ren et al. recommend; 0 disables the warmup.

use super::sharded::{accumulate_while, Sharded, Update};
use super::worker::{accumulate, Outcome, Plan, Worker};
use crate::runtime::{Ctx, Work};
use anyhow::Result;

/// Run DPU on one worker; returns its losses, steps and memory.
pub async fn run<C: Ctx>(ctx: &mut C, w: &mut Worker, plan: &Plan, warmup_steps: u64) -> Result<Outcome> {
    let mut shard = Sharded::new(&w.model.params, ctx.rank(), ctx.world(), plan)?;
    let world = ctx.world() as f32;
    let mut losses = Vec::with_capacity(plan.steps as usize);
    // g(t-1) and N(t-1): the gradients the next update will use.
    let mut stale: Option<(Vec<f32>, usize)> = None;
    for t in 0..plan.steps {
        ctx.mark_round(t);
        let lr = plan.schedule.lr(t);
        if t < warmup_steps {
            losses.push(accumulate(ctx, w, plan.grad_accum).await);
            let mut round = shard.start(ctx, &w.model.grads, 1.0, Some(world), Update::Commit, lr);
            shard.finish(ctx, &mut round).await;
            w.model.params.copy_from_slice(shard.gathered());
            continue;
        }
        let (mut prev, prev_n) = match stale.take() {
            Some(s) => s,
            None => {
                // g(-1): one micro-batch on the current parameters.
                w.model.zero_grads();
                ctx.compute(Work::MicroBatch, || w.micro_batch(1.0)).await;
                (w.model.grads.clone(), 1)
            }
        };
        let mut round = shard.start(ctx, &prev, prev_n as f32, None, Update::Commit, lr);
        w.model.zero_grads();
        let (loss, n) = accumulate_while(ctx, w, &mut shard, &mut round, plan.fixed_micro_batches).await;
        shard.finish(ctx, &mut round).await;
        losses.push((loss / n as f64) as f32);
        w.model.params.copy_from_slice(shard.gathered());
        prev.copy_from_slice(&w.model.grads);
        stale = Some((prev, n));
    }
    Ok(Outcome { losses, optimizer_steps: shard.steps_taken(), memory: shard.memory(1) })
}
