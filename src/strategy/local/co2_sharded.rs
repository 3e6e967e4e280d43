//! CO2 with its outer state sharded ZeRO-style (`shard_outer = true`;
//! co2.txt says CO2 integrates with ZeRO, Sec. 4.1 and App. B.3). The flat
//! parameter vector is padded to a multiple of N and cut into N slices;
//! worker i owns slice i and keeps the outer state (x_{t,0}, x_{t-1,0},
//! x_{t-1,1}, x_{t,1}, m) of that slice only.
//!
//! ```text
//! for t in 0..T:
//!     x_{t,tau}^(i) = tau inner steps from x_{t,0}                       lines 3-6
//!     x_{t-1,tau}[s_i] = wait(reduce-scatter(x_{t-1,tau}^(j)))            lines 8-10, the AAR of round t-1
//!     x_{t+1,0}[s_i] = lines 11-13 on slice s_i (own Lambda slice)        (t = 0: x_{1,0} = x_{0,0})
//!     x_{t+1,0} = all-gather(x_{t+1,0}[s_1..s_N])                        blocking: exposed
//!     launch reduce-scatter(x_{t,tau}^(i))                                line 7, in flight during round t+1
//! ```
//!
//! - The all-gather is needed before the next inner loop can start, so
//!   its time is exposed (not overlapped); the reduce-scatter stays hidden.
//!   On the one communication stream the reduce-scatter of round t is
//!   launched after that all-gather (FIFO: launched before, it would
//!   delay the all-gather by its whole duration).
//! - With the penalty off (or one worker) every worker computes the same
//!   outer update, so this gives the unsharded run's bits (the
//!   reduce-scatter sums each element in the same rank order as the
//!   all-reduce). With the penalty on it cannot: each slice takes its
//!   owner's own Lambda (from the owner's x_{t-1,1}), and every replica
//!   restarts from that one x_{t+1,0}, whereas unsharded each replica uses
//!   its own Lambda everywhere. Tests assert both.
//! - Memory: the outer state is 1/N of the unsharded one per worker; the
//!   buffers are the reduce-scatter input in flight (padded), its output
//!   slice, and with bf16 the slice of the reference.
//! - Wire: with bf16 the reduce-scatter carries the difference to the
//!   gathered x_{t+1,0} (held by every worker when it is launched; its
//!   owner keeps that slice to add back). The all-gather carries the
//!   parameters themselves, bf16-rounded; the owners keep f32 masters. So
//!   does the final reduce-scatter (of x_{T-1,tau}): no full synchronised
//!   copy is held to take a difference from, and holding one would undo
//!   the sharding's saving.
//! - The run's model is assembled from the owners' slices of the last
//!   average (x_{T-1,tau} at the end), and the replicas end on its
//!   all-gather.

use super::co2_outer::{resume, Outer};
use super::settings::Co2Settings;
use crate::comm::{padded_len, ReduceOp};
use crate::runtime::{AllGather, Ctx, Group, ReduceScatter, Work};
use crate::strategy::inner::{memory, Form, Inner, Rounds};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::Outcome;
use crate::strategy::worker::{ModelPiece, Plan, Worker};
use anyhow::Result;

/// Run CO2 with sharded outer state on one worker.
pub async fn run<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    s: &Co2Settings,
    j: &mut Journal,
) -> Result<Outcome> {
    let (n, wire, world) = (w.model.num_params(), plan.wire, ctx.world());
    let padded = padded_len(n, ctx.world());
    let m = padded / ctx.world();
    let lo = ctx.rank() * m;
    // This worker's slice of a full vector (zeros past n).
    let slice = |x: &[f32]| -> Vec<f32> { (lo..lo + m).map(|i| if i < n { x[i] } else { 0.0 }).collect() };
    let piece = |v: &[f32]| ModelPiece { offset: lo, values: v[..(lo + m).min(n).saturating_sub(lo)].to_vec() };
    let rounds = Rounds::new(s.tau, plan.steps);
    let end = rounds.round_up(plan.end);
    let mut inner = Inner::new(plan, n)?;
    let mut outer = Outer::new(&slice(&w.model.params), s.penalty);
    // x_{t-1,tau}[s_i]: this slice of the last synchronised model.
    let mut synced = slice(&w.model.params);
    let delta = Form::Delta.sends_delta(wire);
    // bf16: the slice of the reference the reduce-scatter in flight is relative to.
    let mut reference = if delta { vec![0.0; m] } else { Vec::new() };
    // A padded buffer: the all-gather's output, then the next reduce-scatter's input.
    let mut free = vec![0.0; padded];
    // Lines 7-10, sharded: the mean of every worker's padded x, this worker's slice of it.
    let average = |input: Vec<f32>, output: Vec<f32>| ReduceScatter {
        group: Group::World,
        input,
        output,
        op: ReduceOp::Mean,
        wire,
    };
    let mut pending = None;
    let mut at = resume(j, &mut inner, &mut outer, &mut w.model.params, &rounds)?;
    let mut t = 0;
    loop {
        if let Some(b) = at {
            if rounds.range(b).1 >= end {
                break;
            }
            // Lines 11-13 on the owned slice (skipped in the first iteration).
            if b == 0 {
                outer.skip();
            } else {
                let o = &mut outer;
                ctx.compute(Work::Elementwise { name: "co2 outer step", elems: 5 * m }, || o.step(&synced, s, world))
                    .await;
            }
            // x_{t+1,0} = all-gather of the slices (exposed: the next loop needs it).
            let gather = AllGather { group: Group::World, input: std::mem::take(&mut outer.x0), output: free, wire };
            let (x0, gathered) = ctx.run(gather).await;
            outer.x0 = x0;
            if delta {
                reference.copy_from_slice(&gathered[lo..lo + m]);
            }
            // The replica becomes x_{t+1,0}; x_{b,tau} goes out (line 7).
            let mut x = std::mem::replace(&mut w.model.params, gathered);
            w.model.params.truncate(n);
            Form::Delta.encode(wire, &mut x, &w.model.params);
            x.resize(padded, 0.0);
            pending = Some(ctx.start(average(x, std::mem::take(&mut synced))));
            free = Vec::new();
            t = b + 1;
        }
        // Lines 3-6.
        let (lo_step, hi) = rounds.range(t);
        for step in lo_step..hi {
            inner.step(ctx, w, plan, step, j).await?;
            if step == lo_step {
                let first = slice(&w.model.params);
                outer.record_first_step(&first);
            }
        }
        // Lines 8-10: this slice of x_{t-1,tau}.
        if let Some(h) = pending.take() {
            let (input, mut avg) = ctx.wait(h).await;
            Form::Delta.decode(wire, &mut avg, &reference);
            (free, synced) = (input, avg);
        }
        if hi == plan.steps {
            // The end: x_{T-1,tau}, reduce-scattered now. It travels as
            // parameters even with bf16 (no worker holds a full common
            // reference at this point; see the module docs).
            let mut x = std::mem::take(&mut free);
            x.resize(padded, 0.0);
            x[..n].copy_from_slice(&w.model.params);
            x[n..].fill(0.0);
            (free, synced) = ctx.run(average(x, std::mem::take(&mut synced))).await;
        }
        j.round_end(ctx, Some(w), hi, end, || {
            let mut st = StrategyState { model: Some(piece(&synced)), ..StrategyState::default() };
            st.tensors.push(("x_tau".into(), w.model.params.clone()));
            outer.save(&mut st);
            inner.save(&mut st);
            st
        })
        .await?;
        at = Some(t);
    }
    // Every replica ends on the synchronised model: the all-gather of the slices.
    let gather = AllGather { group: Group::World, input: synced, output: vec![0.0; padded], wire };
    let (synced, mut gathered) = ctx.run(gather).await;
    gathered.truncate(n);
    w.model.params = gathered;
    let comm = padded + m + reference.len();
    Ok(Outcome {
        exchange: None,
        optimizer_steps: inner.steps,
        memory: memory(n, &inner, comm, outer.len()),
        model: Some(piece(&synced)),
    })
}
