//! DDP + ZeRO-1 (Rajbhandari et al. 2020): the optimizer state is sharded.
//! The flat parameter vector is padded to a multiple of N and cut into N
//! shards; worker i owns shard i and the optimizer state of that shard only.
//!
//! ```text
//! for t in 0..T:
//!     g_i        = (1/K) sum_k grad f(theta; xi_{i,k})
//!     g[s_i]     = reduce-scatter(g_1..g_N) / N           worker i gets its shard
//!     theta[s_i] = Opt_i(theta[s_i], clip(g)[s_i])        state only for s_i
//!     theta      = all-gather(theta[s_1..s_N])
//! ```
//! Without clipping this gives DDP's parameters bit for bit (same reduction
//! recipe, and an optimizer step on a shard equals that part of a full step).

use super::sharded::{Sharded, Update};
use crate::runtime::Ctx;
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::Outcome;
use crate::strategy::worker::{accumulate, replica_piece, Plan, Worker};
use anyhow::Result;

/// Run ZeRO-1 on one worker.
pub async fn run<C: Ctx>(ctx: &mut C, w: &mut Worker, plan: &Plan, j: &mut Journal) -> Result<Outcome> {
    let mut shard = Sharded::new(&w.model.params, ctx.rank(), ctx.world(), plan)?;
    if let Some(s) = j.take_resumed() {
        shard.restore(&s)?;
    }
    let (rank, world) = (ctx.rank(), ctx.world() as f32);
    for step in j.first_round()..plan.end {
        ctx.mark_round(step);
        let loss = accumulate(ctx, w, plan.grad_accum).await;
        let mut round =
            shard.start(ctx, w.model.grads(), 1.0, Some(world), Update::Commit, plan.schedule.lr(step), None);
        shard.finish(ctx, &mut round).await;
        w.model.params.copy_from_slice(shard.gathered());
        j.step(ctx, step + 1, loss, plan.grad_accum as u64)?;
        j.round_end(ctx, Some(w), step + 1, plan.end, || {
            let mut s = StrategyState { model: replica_piece(rank, &w.model.params), ..StrategyState::default() };
            shard.save(&mut s);
            s
        })
        .await?;
    }
    Ok(Outcome {
        optimizer_steps: shard.steps_taken(),
        memory: shard.memory(0),
        model: replica_piece(rank, &w.model.params),
        exchange: None,
    })
}
