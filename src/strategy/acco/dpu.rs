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

use super::budget::TokenBudget;
use super::settings::DpuSettings;
use super::sharded::{accumulate_while, Sharded, Update};
use crate::runtime::{Ctx, Work};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::Outcome;
use crate::strategy::worker::{accumulate, replica_piece, Plan, Worker};
use anyhow::Result;

/// Run DPU on one worker.
pub async fn run<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    settings: &DpuSettings,
    j: &mut Journal,
) -> Result<Outcome> {
    let mut shard = Sharded::new(&w.model.params, ctx.rank(), ctx.world(), plan)?;
    let mut budget = TokenBudget::new(plan, ctx.rank(), ctx.world());
    let (rank, world) = (ctx.rank(), ctx.world() as f32);
    // g(t-1) and N(t-1): the gradients the next update will use.
    let mut stale: Option<(Vec<f32>, usize)> = None;
    if let Some(s) = j.take_resumed() {
        shard.restore(&s)?;
        budget.restore(&s)?;
        if s.count("stale_n")? > 0 {
            stale = Some((s.tensor("stale")?.to_vec(), s.count("stale_n")? as usize));
        }
    }
    for t in j.first_round()..plan.end {
        ctx.mark_round(t);
        let lr = plan.schedule.lr(budget.lr_step(t));
        if t < settings.warmup_steps {
            let loss = accumulate(ctx, w, plan.grad_accum).await;
            budget.computed(plan.grad_accum);
            let report = budget.to_send();
            let mut round = shard.start(ctx, w.model.grads(), 1.0, Some(world), Update::Commit, lr, report);
            shard.finish(ctx, &mut round).await;
            w.model.params.copy_from_slice(shard.gathered());
            budget.round_done((ctx.world() * plan.grad_accum) as u64, shard.sums().1);
            j.step(ctx, t + 1, loss, plan.grad_accum as u64)?;
        } else {
            let (mut prev, prev_n) = match stale.take() {
                Some(s) => s,
                None => {
                    // g(-1): one micro-batch on the current parameters.
                    w.model.zero_grads();
                    let loss = ctx.compute(Work::MicroBatch, || w.micro_batch(1.0)).await;
                    budget.computed(1);
                    budget.loss(loss as f64, 1);
                    (w.model.grads().to_vec(), 1)
                }
            };
            let report = budget.to_send();
            let mut round = shard.start(ctx, &prev, prev_n as f32, None, Update::Commit, lr, report);
            w.model.zero_grads();
            let (loss, n) = accumulate_while(ctx, w, &shard, &round, plan.fixed_micro_batches, budget.cap()).await;
            budget.computed(n);
            shard.finish(ctx, &mut round).await;
            w.model.params.copy_from_slice(shard.gathered());
            let (applied, sums) = shard.sums();
            budget.round_done(applied as u64, sums);
            let loss = budget.loss(loss, n);
            j.step(ctx, t + 1, loss, prev_n as u64)?;
            prev.copy_from_slice(w.model.grads());
            stale = Some((prev, n));
        }
        j.round_end(ctx, Some(w), t + 1, budget.end(plan.end, t), || {
            let mut s = StrategyState { model: replica_piece(rank, &w.model.params), ..StrategyState::default() };
            shard.save(&mut s);
            budget.save(&mut s);
            let stale_n = stale.as_ref().map_or(0, |(_, n)| *n);
            if let Some((g, _)) = &stale {
                s.tensors.push(("stale".into(), g.clone()));
            }
            s.scalars["stale_n"] = serde_json::json!(stale_n);
            s
        })
        .await?;
        if budget.spent() {
            break;
        }
    }
    Ok(Outcome {
        optimizer_steps: shard.steps_taken(),
        memory: shard.memory(1),
        model: replica_piece(rank, &w.model.params),
        exchange: None,
    })
}
