//! ACCO-wp: delayed updates compensated by weight prediction (ACCO paper,
//! Sec. 3, eq. WP; Chen et al. 2019). The gradients used at round t were
//! computed on a prediction of theta(t); the prediction of theta(t+2) is a
//! second optimizer step with the same gradients, which commits nothing.
//!
//! ```text
//! theta~(1) = theta(0),  g~_i(0) = grad F(theta(0), xi),  N_i(0) = 1
//! for t in 0..T (both sides in parallel):
//!     g~_i(t+1) = sum_k grad F(theta~(t+1), xi_{i,k})   | theta(t+1)  = Opt(theta(t), sum_i g~_i(t) / sum_i N_i(t))       at lr(t)
//!                                                       | theta~(t+2) = Opt(theta(t+1), same gradients)                   at lr(t+1), look-ahead
//! ```
//! The prediction stands in for step t+1, so it takes that step's learning
//! rate. Whether it should also update the moments is left open by the
//! paper: it is a look-ahead step from theta(t+1), moments updated as that
//! step would, nothing committed (see sharded.rs).

use super::budget::TokenBudget;
use super::sharded::{accumulate_while, Sharded, Update};
use crate::runtime::{Ctx, Work};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::Outcome;
use crate::strategy::worker::{replica_piece, Plan, Worker};
use anyhow::Result;

/// Run ACCO-wp on one worker. At the end the replica holds the committed
/// theta(T), not the prediction.
pub async fn run<C: Ctx>(ctx: &mut C, w: &mut Worker, plan: &Plan, j: &mut Journal) -> Result<Outcome> {
    let mut shard = Sharded::new(&w.model.params, ctx.rank(), ctx.world(), plan)?;
    let mut budget = TokenBudget::new(plan, ctx.rank(), ctx.world());
    let (mut pending, mut pending_n) = match j.take_resumed() {
        Some(s) => {
            shard.restore(&s)?;
            budget.restore(&s)?;
            // The replica holds the prediction theta~(t+1), not the run's model.
            w.model.params.copy_from_slice(s.tensor("predicted")?);
            (s.tensor("pending")?.to_vec(), s.count("pending_n")? as usize)
        }
        None => {
            w.model.zero_grads();
            let loss = ctx.compute(Work::MicroBatch, || w.micro_batch(1.0)).await;
            budget.computed(1);
            budget.loss(loss as f64, 1);
            (w.model.grads().to_vec(), 1)
        }
    };
    for t in j.first_round()..plan.end {
        ctx.mark_round(t);
        let step = budget.lr_step(t);
        let update = Update::CommitThenPredict { predict_lr: plan.schedule.lr(step + 1) };
        let report = budget.to_send();
        let mut round = shard.start(ctx, &pending, pending_n as f32, None, update, plan.schedule.lr(step), report);
        w.model.zero_grads();
        let (loss, n) = accumulate_while(ctx, w, &shard, &round, plan.fixed_micro_batches, budget.cap()).await;
        budget.computed(n);
        shard.finish(ctx, &mut round).await;
        let (applied, sums) = shard.sums();
        budget.round_done(applied as u64, sums);
        let loss = budget.loss(loss, n);
        j.step(ctx, t + 1, loss, pending_n as u64)?;
        w.model.params.copy_from_slice(shard.gathered());
        pending.copy_from_slice(w.model.grads());
        pending_n = n;
        j.round_end(ctx, Some(w), t + 1, budget.end(plan.end, t), || {
            // Every worker holds one shard of the committed theta(t+1).
            let mut s = StrategyState { model: Some(shard.committed_piece()), ..StrategyState::default() };
            shard.save(&mut s);
            budget.save(&mut s);
            s.tensors.push(("pending".into(), pending.clone()));
            s.tensors.push(("predicted".into(), w.model.params.clone()));
            s.scalars["pending_n"] = serde_json::json!(pending_n);
            s
        })
        .await?;
        if budget.spent() {
            break;
        }
    }
    let committed = shard.gather_committed(ctx).await;
    w.model.params.copy_from_slice(committed);
    let rank = ctx.rank();
    Ok(Outcome {
        optimizer_steps: shard.steps_taken(),
        memory: shard.memory(1),
        model: replica_piece(rank, &w.model.params),
        exchange: None,
    })
}
