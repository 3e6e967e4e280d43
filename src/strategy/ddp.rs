//! DDP: every step, average the gradients of all workers, then every worker
//! takes the same optimizer step on its full replica (the baseline).
//!
//! ```text
//! for t in 0..T:
//!     g_i   = (1/K) sum_k grad f(theta; xi_{i,k})      K = grad_accum micro-batches
//!     g     = (1/N) sum_i g_i                          all-reduce (mean)
//!     theta = Opt(theta, clip(g))                      identical on every worker
//! ```

use super::worker::{accumulate, MemoryBytes, Outcome, Plan, Worker};
use crate::comm::ReduceOp;
use crate::optim::clip_global_norm;
use crate::runtime::{Collective, Ctx, Work};
use anyhow::Result;

/// Run DDP on one worker; returns its losses, steps and memory.
pub async fn run<C: Ctx>(ctx: &mut C, w: &mut Worker, plan: &Plan) -> Result<Outcome> {
    let n = w.model.num_params();
    let mut opt = plan.optimizer.try_build(n)?;
    let mut losses = Vec::with_capacity(plan.steps as usize);
    for step in 0..plan.steps {
        ctx.mark_round(step);
        losses.push(accumulate(ctx, w, plan.grad_accum).await);
        let grads = std::mem::take(&mut w.model.grads);
        let h = ctx.start(Collective::AllReduce { buf: grads, op: ReduceOp::Mean });
        w.model.grads = ctx.wait(h).await.output;
        if plan.grad_clip > 0.0 {
            clip_global_norm(&mut w.model.grads, plan.grad_clip);
        }
        let lr = plan.schedule.lr(step);
        let m = &mut w.model;
        ctx.compute(Work::Optimizer { params: n }, || opt.step(&mut m.params, &m.grads, lr, &plan.decay)).await;
    }
    let f = std::mem::size_of::<f32>();
    // The all-reduce runs in place on the gradients: no extra buffer.
    let memory = MemoryBytes { params: f * n, grads: f * n, comm_buffers: 0, optimizer: f * opt.state_len() };
    Ok(Outcome { losses, optimizer_steps: opt.steps_taken(), memory })
}
