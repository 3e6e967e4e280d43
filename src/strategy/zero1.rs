//! DDP + ZeRO-1 (Rajbhandari et al. 2020): the optimizer state is sharded.
//! The flat parameter vector is padded to a multiple of N and cut into N
//! shards; worker i owns shard i and the optimizer state of that shard only.
//!
//! ```text
//! for t in 0..T:
//!     g_i      = (1/K) sum_k grad f(theta; xi_{i,k})
//!     g[s_i]   = reduce-scatter_mean(g_1..g_N)          worker i gets its shard
//!     theta[s_i] = Opt_i(theta[s_i], clip(g)[s_i])      state only for s_i
//!     theta    = all-gather(theta[s_1..s_N])
//! ```
//! Without clipping this gives DDP's parameters bit for bit (same reduction
//! recipe, and an optimizer step on a shard equals that part of a full step).

use super::worker::{accumulate, Plan, Worker};
use crate::comm::{padded_len, ReduceOp};
use crate::runtime::{Collective, Ctx, Work};
use anyhow::Result;

/// Run ZeRO-1 on one worker; returns its per-step losses.
pub async fn run<C: Ctx>(ctx: &mut C, w: &mut Worker, plan: &Plan) -> Result<Vec<f32>> {
    let (n, p, r) = (w.model.num_params(), ctx.world(), ctx.rank());
    let padded = padded_len(n, p);
    let m = padded / p;
    let (lo, hi) = (r * m, (r + 1) * m);
    let decay = plan.decay.restrict(lo, hi);
    let mut opt = plan.optimizer.try_build(m)?;
    // Buffers allocated once and passed to and from the collectives.
    let (mut flat, mut shard_g, mut shard_p) = (vec![0.0f32; padded], vec![0.0f32; m], vec![0.0f32; m]);
    let mut losses = Vec::with_capacity(plan.steps as usize);
    for step in 0..plan.steps {
        losses.push(accumulate(ctx, w, plan.grad_accum).await);
        flat[..n].copy_from_slice(&w.model.grads);
        let h = ctx.start(Collective::ReduceScatter { input: flat, output: shard_g, op: ReduceOp::Mean });
        let done = ctx.wait(h).await;
        (flat, shard_g) = (done.input, done.output);
        if plan.grad_clip > 0.0 {
            clip_sharded(ctx, &mut shard_g, plan.grad_clip).await;
        }
        // Own shard of the parameters (padding stays 0: zero gradient, zero state).
        for (dst, i) in shard_p.iter_mut().zip(lo..hi) {
            *dst = if i < n { w.model.params[i] } else { 0.0 };
        }
        let lr = plan.schedule.lr(step);
        ctx.compute(Work::Optimizer { params: m }, || opt.step(&mut shard_p, &shard_g, lr, &decay)).await;
        let h = ctx.start(Collective::AllGather { input: shard_p, output: flat });
        let done = ctx.wait(h).await;
        (shard_p, flat) = (done.input, done.output);
        w.model.params.copy_from_slice(&flat[..n]);
    }
    Ok(losses)
}

/// Clip by the global norm when each worker holds one shard: the squared
/// norms of the shards are summed with an all-reduce.
pub async fn clip_sharded<C: Ctx>(ctx: &mut C, shard: &mut [f32], max_norm: f32) -> f32 {
    let sq: f64 = shard.iter().map(|&g| (g as f64) * (g as f64)).sum();
    let h = ctx.start(Collective::AllReduce { buf: vec![sq as f32], op: ReduceOp::Sum });
    let norm = ctx.wait(h).await.output[0].sqrt();
    if norm.is_finite() && norm > max_norm {
        let k = max_norm / (norm + 1e-6);
        shard.iter_mut().for_each(|g| *g *= k);
    }
    norm
}
