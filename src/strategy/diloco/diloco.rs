//! DiLoCo, synchronous (async-local-sgd.txt, Algorithm 1; Douillard et al.
//! 2023), as an all-reduce among the workers: no server.
//!
//! ```text
//! theta = theta^(0), equal on every worker                         line 1
//! for t in 1..T:                                                    line 5
//!     theta_i = theta                                               line 7
//!     H inner steps of InnerOpt on worker i's own data              lines 8-12 (inner.rs)
//!     delta_i = theta - theta_i                                     line 13: old minus new
//!     Delta   = (1/k) sum_i delta_i                                 line 15: all-reduce mean
//!     theta   = OuterOpt(theta, Delta)                              line 16 (optim/outer.rs)
//! ```
//!
//! - The pseudo-gradient's sign is `theta_old - theta_i` (line 13): it
//!   points like a gradient, so an outer SGD step with lr 1 lands on the
//!   average of the workers' parameters. (torchft once had it reversed,
//!   which walks the model away from where the workers went; the test
//!   `diloco_h1_sgd_outer_lr1_is_ddp_with_sgd` fails with that sign.)
//! - Each worker keeps its inner optimizer state across rounds; it is never
//!   reset or sent (App. 10.1).
//! - The pseudo-gradient travels in the run's wire dtype: it is a small
//!   difference, so bf16 rounds it far less than it would the parameters.
//!   With `outer_wire` set it travels compressed instead (comm/codec:
//!   int8, fp4, top-k + 2 bits, with error feedback): each worker's
//!   message is all-gathered and every worker decodes and averages them in
//!   rank order, so replicas stay equal (line 15 over compressed deltas).
//! - Every worker holds the outer state (theta and the outer optimizer) and
//!   applies the same outer step to the same average: replicas stay equal.
//!   The checkpoint's model is theta; the outer state goes into each part.
//! - `--steps` counts inner steps (as for the other local-update methods):
//!   rounds of H, the last one possibly shorter.

use super::settings::DilocoSettings;
use crate::comm::codec::{sender_copies, ErrorFeedback, OuterWire};
use crate::optim::OuterOpt;
use crate::runtime::{AllGatherBytes, AllReduce, Ctx, Group, Work};
use crate::strategy::inner::{memory, Inner, Rounds};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::Outcome;
use crate::strategy::worker::{replica_piece, Plan, Worker};
use anyhow::Result;

/// The checkpoint tensor holding the error-feedback residual.
const RESIDUAL: &str = "outer_wire.residual";

/// Line 13, in place: `theta_i` becomes `delta_i = theta_old - theta_i`.
pub fn pseudo_gradient(theta_i: &mut [f32], theta_old: &[f32]) {
    theta_i.iter_mut().zip(theta_old).for_each(|(x, old)| *x = old - *x);
}

/// Saves `outer` into `st` (`{prefix}outer.NAME` tensors, `{prefix}outer_steps`;
/// the prefix tells streaming DiLoCo's fragments apart, "" for one outer state).
pub(super) fn save_outer(outer: &OuterOpt, st: &mut StrategyState, prefix: &str) {
    for (name, t) in outer.state_tensors() {
        st.tensors.push((format!("{prefix}outer.{name}"), t.to_vec()));
    }
    let steps = serde_json::json!(outer.steps_taken());
    if let Some(o) = st.scalars.as_object_mut() {
        o.insert(format!("{prefix}outer_steps"), steps);
    } else {
        st.scalars = serde_json::json!({ format!("{prefix}outer_steps"): steps });
    }
}

/// Restores what [`save_outer`] wrote under `prefix`.
pub(super) fn restore_outer(outer: &mut OuterOpt, st: &StrategyState, prefix: &str) -> Result<()> {
    let steps = st.count(&format!("{prefix}outer_steps"))?;
    outer.load_state(steps, |name| Ok(st.tensor(&format!("{prefix}outer.{name}"))?.to_vec()))
}

/// Line 15 over compressed pseudo-gradients: `delta` (this worker's) is
/// encoded with error feedback, every worker's message all-gathered, and
/// their decoded values averaged in rank order (rank 0's first, as the
/// all-reduce sums): `delta` becomes the mean.
async fn compressed_mean<C: Ctx>(ctx: &mut C, ef: &mut ErrorFeedback, delta: &mut [f32], scratch: &mut [f32]) {
    let h = start_compressed(ctx, ef, delta).await;
    let (_, all) = ctx.wait(h).await;
    decode_mean(ctx, ef.wire(), &all, delta, scratch).await;
}

/// The first half of [`compressed_mean`]: encodes `delta` with error
/// feedback and starts the all-gather of every worker's message (streaming
/// DiLoCo keeps training while it travels).
pub(super) async fn start_compressed<C: Ctx>(
    ctx: &mut C,
    ef: &mut ErrorFeedback,
    delta: &[f32],
) -> C::Handle<(Vec<u8>, Vec<u8>)> {
    let k = ctx.topology().workers;
    let bytes =
        ctx.compute(Work::Elementwise { name: "diloco encode", elems: 2 * delta.len() }, || ef.encode(delta)).await;
    let len = bytes.len();
    ctx.start(AllGatherBytes { group: Group::World, input: bytes, output: vec![0; k * len] })
}

/// The second half: `delta` becomes the mean of the gathered messages
/// `all`, decoded and summed in rank order (rank 0's first, as the
/// all-reduce sums), then divided by the workers.
pub(super) async fn decode_mean<C: Ctx>(
    ctx: &mut C,
    wire: OuterWire,
    all: &[u8],
    delta: &mut [f32],
    scratch: &mut [f32],
) {
    let (n, k) = (delta.len(), ctx.topology().workers);
    let len = all.len() / k;
    ctx.compute(Work::Elementwise { name: "diloco decode", elems: 2 * k * n }, || {
        wire.decode(&all[..len], delta);
        for msg in all[len..].chunks_exact(len) {
            wire.decode(msg, scratch);
            delta.iter_mut().zip(scratch.iter()).for_each(|(d, x)| *d += x);
        }
        delta.iter_mut().for_each(|d| *d /= k as f32);
    })
    .await;
}

/// Run synchronous DiLoCo on one worker.
pub async fn run<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    s: &DilocoSettings,
    j: &mut Journal,
) -> Result<Outcome> {
    let (n, rank) = (w.model.num_params(), ctx.rank());
    let rounds = Rounds::new(s.h, plan.steps);
    let end = rounds.round_up(plan.end);
    let mut inner = Inner::new(plan, n)?;
    let mut outer = OuterOpt::new(s.outer_config(ctx.topology().workers), n);
    // theta^(t-1): the replica at the start of every round (the checkpoint's model when resuming).
    let mut theta = w.model.params.clone();
    // A compressed outer_wire: the sender with its residual, and a buffer to decode into.
    let mut sender = s.outer_wire.map(|wire| (ErrorFeedback::new(wire, s.feedback(), n), vec![0.0; n]));
    let mut t = 0;
    if let Some(st) = j.take_resumed() {
        inner.restore(&st)?;
        restore_outer(&mut outer, &st, "")?;
        if let Some((ef, _)) = sender.as_mut().filter(|_| s.error_feedback) {
            ef.restore(st.tensor(RESIDUAL)?);
        }
        t = rounds.ending_at(j.first_round())? + 1;
    }
    while rounds.range(t).0 < end {
        let (lo, hi) = rounds.range(t);
        // Lines 8-12: H inner steps from theta (the replica holds theta here).
        inner.round(ctx, w, plan, lo..hi, j).await?;
        // Line 13, then line 15: the mean pseudo-gradient.
        let mut delta = std::mem::take(&mut w.model.params);
        ctx.compute(Work::Elementwise { name: "diloco pseudo-gradient", elems: n }, || {
            pseudo_gradient(&mut delta, &theta)
        })
        .await;
        match sender.as_mut() {
            None => delta = ctx.run(AllReduce::mean(Group::World, delta, plan.wire)).await,
            Some((ef, scratch)) => compressed_mean(ctx, ef, &mut delta, scratch).await,
        }
        // Line 16: the outer step, the same on every worker.
        ctx.compute(Work::Elementwise { name: "diloco outer step", elems: 3 * n }, || outer.step(&mut theta, &delta))
            .await;
        // Line 7 of the next round: every worker restarts from theta (the buffer is reused).
        delta.copy_from_slice(&theta);
        w.model.params = delta;
        j.round_end(ctx, Some(w), hi, end, || {
            let mut st = StrategyState { model: replica_piece(rank, &theta), ..StrategyState::default() };
            inner.save(&mut st);
            save_outer(&outer, &mut st, "");
            if let Some((ef, _)) = sender.as_ref().filter(|_| s.error_feedback) {
                st.tensors.push((RESIDUAL.into(), ef.residual().to_vec()));
            }
            st
        })
        .await?;
        t += 1;
    }
    Ok(Outcome {
        exchange: None,
        optimizer_steps: inner.steps,
        memory: memory(
            n,
            &inner,
            0,
            theta.len() + outer.state_len() + sender_copies(s.outer_wire, s.error_feedback) * n,
        ),
        model: replica_piece(rank, &theta),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pseudo_gradient_is_old_minus_new() {
        // Line 13: theta_old = (1, 2), theta_i = (0.5, 3): delta = (0.5, -1).
        let mut x = [0.5, 3.0];
        pseudo_gradient(&mut x, &[1.0, 2.0]);
        assert_eq!(x, [0.5, -1.0]);
    }
}
