//! ACCO: Accumulate While You Communicate (Nabli et al.; eqs. 1-2 and
//! Algorithm 1 of the ACCO paper). Each round has two stages; in each, the
//! worker accumulates as many micro-batches as fit while the other stage's
//! communication and sharded optimizer step run.
//!
//! ```text
//! g~_i(0) = grad F(theta(0), xi),  N~_i(0) = 1
//! for t in 0..T:
//!   stage 1:  g_i(t)  = sum_{k<=N_i(t)}  grad F(theta(t), xi)   | theta~(t+1) = Opt(theta(t), sum_i g~_i(t) / sum_i N~_i(t))        (1)  look-ahead, commits nothing
//!   stage 2:  g~_i(t+1) = sum_{k<=N~_i} grad F(theta~(t+1), xi) | theta(t+1)  = Opt(theta(t), sum_i (g_i(t) + g~_i(t)) / sum_i (N_i(t) + N~_i(t)))   (2)
//! ```
//! With SGD, theta(t+1) = theta(t) - lr * (sum of gradients at theta(t) and
//! at theta~(t)) / (their count): no stale gradient (Sec. 3, "Theoretical
//! discussion"). The look-ahead uses lr(t): it estimates theta(t+1), the
//! result of step t. Under a token budget (budget.rs) a worker computes at
//! most its quota (shared by speed), and the run ends on the round after which no
//! worker has any.

use super::budget::TokenBudget;
use super::sharded::{accumulate_while, Sharded, Update};
use crate::runtime::{Ctx, Work};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::Outcome;
use crate::strategy::worker::{replica_piece, Plan, Worker};
use anyhow::Result;

/// Run ACCO on one worker.
pub async fn run<C: Ctx>(ctx: &mut C, w: &mut Worker, plan: &Plan, j: &mut Journal) -> Result<Outcome> {
    let mut shard = Sharded::new(&w.model.params, ctx.rank(), ctx.world(), plan)?;
    let mut budget = TokenBudget::new(plan, ctx.rank(), ctx.world());
    let rank = ctx.rank();
    let (mut tilde, mut tilde_n) = match j.take_resumed() {
        Some(s) => {
            shard.restore(&s)?;
            budget.restore(&s)?;
            (s.tensor("tilde")?.to_vec(), s.count("tilde_n")? as usize)
        }
        None => {
            // g~(0): one micro-batch on theta(0).
            w.model.zero_grads();
            let loss = ctx.compute(Work::MicroBatch, || w.micro_batch(1.0)).await;
            budget.computed(1);
            budget.loss(loss as f64, 1);
            (w.model.grads().to_vec(), 1)
        }
    };
    for t in j.first_round()..plan.end {
        ctx.mark_round(t);
        let lr = plan.schedule.lr(budget.lr_step(t));
        // Stage 1 (eq. 1): estimate theta~(t+1) from g~(t) while computing g(t) on theta(t).
        let mut r1 = shard.start(ctx, &tilde, tilde_n as f32, None, Update::LookAhead, lr, None);
        w.model.zero_grads();
        let (loss1, n1) = accumulate_while(ctx, w, &shard, &r1, plan.fixed_micro_batches, budget.cap()).await;
        budget.computed(n1);
        shard.finish(ctx, &mut r1).await;
        w.model.params.copy_from_slice(shard.gathered()); // theta~(t+1)
                                                          // Stage 2 (eq. 2): commit theta(t+1) from g(t) + g~(t) while computing g~(t+1) on theta~(t+1).
        for (a, g) in tilde.iter_mut().zip(w.model.grads()) {
            *a += g;
        }
        let report = budget.to_send();
        let mut r2 = shard.start(ctx, &tilde, (n1 + tilde_n) as f32, None, Update::Commit, lr, report);
        w.model.zero_grads();
        let (loss2, n2) = accumulate_while(ctx, w, &shard, &r2, plan.fixed_micro_batches, budget.cap()).await;
        budget.computed(n2);
        shard.finish(ctx, &mut r2).await;
        w.model.params.copy_from_slice(shard.gathered()); // theta(t+1)
        let (applied, sums) = shard.sums();
        budget.round_done(applied as u64, sums);
        let loss = budget.loss(loss1 + loss2, n1 + n2);
        j.step(ctx, t + 1, loss, (n1 + tilde_n) as u64)?;
        tilde.copy_from_slice(w.model.grads());
        tilde_n = n2;
        j.round_end(ctx, Some(w), t + 1, budget.end(plan.end, t), || {
            let mut s = StrategyState { model: replica_piece(rank, &w.model.params), ..StrategyState::default() };
            shard.save(&mut s);
            budget.save(&mut s);
            s.tensors.push(("tilde".into(), tilde.clone()));
            s.scalars["tilde_n"] = serde_json::json!(tilde_n);
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
