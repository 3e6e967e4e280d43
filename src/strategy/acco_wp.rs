//! ACCO-wp: delayed updates compensated by weight prediction (ACCO paper,
//! Sec. 3, eq. WP; Chen et al. 2019). The gradients used at round t were
//! computed on a prediction of theta(t); the prediction of theta(t+2) is a
//! second optimizer step with the same gradients, which commits nothing.
//!
//! ```text
//! theta~(1) = theta(0),  g~_i(0) = grad F(theta(0), xi),  N_i(0) = 1
//! for t in 0..T (both sides in parallel):
//!     g~_i(t+1) = sum_k grad F(theta~(t+1), xi_{i,k})   | theta(t+1)  = Opt(theta(t), sum_i g~_i(t) / sum_i N_i(t))
//!                                                       | theta~(t+2) = Opt(theta(t+1), same gradients)   (look-ahead)
//! ```

use super::sharded::{accumulate_while, Sharded, Update};
use super::worker::{Outcome, Plan, Worker};
use crate::runtime::{Ctx, Work};
use anyhow::Result;

/// Run ACCO-wp on one worker; returns its losses, steps and memory.
/// At the end the replica holds the committed theta(T), not the prediction.
pub async fn run<C: Ctx>(ctx: &mut C, w: &mut Worker, plan: &Plan) -> Result<Outcome> {
    let mut shard = Sharded::new(&w.model.params, ctx.rank(), ctx.world(), plan)?;
    let mut losses = Vec::with_capacity(plan.steps as usize);
    w.model.zero_grads();
    ctx.compute(Work::MicroBatch, || w.micro_batch(1.0)).await;
    let (mut pending, mut pending_n) = (w.model.grads.clone(), 1usize);
    for t in 0..plan.steps {
        ctx.mark_round(t);
        let mut round =
            shard.start(ctx, &pending, pending_n as f32, None, Update::CommitThenPredict, plan.schedule.lr(t));
        w.model.zero_grads();
        let (loss, n) = accumulate_while(ctx, w, &mut shard, &mut round, plan.fixed_micro_batches).await;
        shard.finish(ctx, &mut round).await;
        losses.push((loss / n as f64) as f32);
        w.model.params.copy_from_slice(shard.gathered());
        pending.copy_from_slice(&w.model.grads);
        pending_n = n;
    }
    let committed = shard.gather_committed(ctx).await;
    w.model.params.copy_from_slice(committed);
    Ok(Outcome { losses, optimizer_steps: shard.steps_taken(), memory: shard.memory(1) })
}
