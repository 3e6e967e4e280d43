//! DDP: every step, average the gradients of all workers, then every worker
//! takes the same optimizer step on its full replica (the baseline).
//!
//! ```text
//! for t in 0..T:
//!     g_i   = (1/K) sum_k grad f(theta; xi_{i,k})      K = grad_accum micro-batches
//!     g     = (1/N) sum_i g_i                          all-reduce (mean)
//!     theta = Opt(theta, clip(g))                      identical on every worker
//! ```

use crate::runtime::{AllReduce, Ctx, Group, Work};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::{MemoryBytes, Outcome};
use crate::strategy::worker::{accumulate, clip_grads, replica_piece, Plan, Worker};
use anyhow::{Context, Result};

/// Run DDP on one worker.
pub async fn run<C: Ctx>(ctx: &mut C, w: &mut Worker, plan: &Plan, j: &mut Journal) -> Result<Outcome> {
    let n = w.model.num_params();
    let mut opt = plan.optimizer.try_build(n)?;
    if let Some(s) = j.take_resumed() {
        opt.load_state(s.optimizer_steps, &s.tensors).context("checkpointed optimizer state does not fit")?;
    }
    let rank = ctx.rank();
    for step in j.first_round()..plan.end {
        ctx.mark_round(step);
        let loss = accumulate(ctx, w, plan.grad_accum).await;
        let grads = std::mem::take(w.model.grads_mut());
        *w.model.grads_mut() = ctx.run(AllReduce::mean(Group::World, grads, plan.wire)).await;
        clip_grads(ctx, w.model.grads_mut(), plan.grad_clip).await;
        let lr = plan.schedule.lr(step);
        let m = &mut w.model;
        ctx.compute(Work::Optimizer { params: n }, || {
            let (params, grads) = m.params_and_grads();
            opt.step(params, grads, lr, &plan.decay)
        })
        .await;
        j.step(ctx, step + 1, loss, plan.grad_accum as u64)?;
        j.round_end(ctx, Some(w), step + 1, plan.end, || StrategyState {
            tensors: opt.state_tensors().into_iter().map(|(k, v)| (k, v.to_vec())).collect(),
            model: replica_piece(rank, &w.model.params),
            optimizer_steps: opt.steps_taken(),
            ..StrategyState::default()
        })
        .await?;
    }
    let f = std::mem::size_of::<f32>();
    // The all-reduce runs in place on the gradients: no extra buffer.
    let memory = MemoryBytes { params: f * n, grads: f * n, comm_buffers: 0, optimizer: f * opt.state_len(), outer: 0 };
    Ok(Outcome {
        optimizer_steps: opt.steps_taken(),
        memory,
        model: replica_piece(rank, &w.model.params),
        exchange: None,
    })
}
