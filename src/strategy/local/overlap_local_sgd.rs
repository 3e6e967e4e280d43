//! Overlap-Local-SGD (Wang, Liang and Joshi, ICASSP 2020), as co2.txt
//! characterises it (Sec. 2, App. B.1): each worker keeps an anchor model
//! z; after `tau` local steps it pulls toward the anchor and starts a
//! non-blocking all-reduce of its parameters, whose average becomes the
//! next anchor while the next `tau` local steps run.
//!
//! ```text
//! z_0 = x_0 (the initial model, equal on every worker)
//! for t in 0..T:
//!     x^(i) = tau inner steps from x^(i) on worker i         (inner.rs)
//!     z_t   = wait(AAR(t-1))                                 the average of round t-1 (z_0 when t = 0)
//!     x^(i) <- x^(i) - pull * (x^(i) - z_t)                  pull toward the anchor
//!     AAR(t) <- start all-reduce mean of x^(i)               in flight during round t+1
//! end: wait(AAR(T-1)); the run's model is that average
//! ```
//!
//! - The anchor used in round t is the average of round t-1's pulled
//!   parameters, never the current round's (the all-reduce runs behind
//!   round t+1's computation; a worker waits only if it is still running).
//! - Workers' parameters differ between averages; the replicas only meet
//!   in the anchor. A checkpoint (at a boundary, after the pull, before the
//!   launch) holds each worker's pulled parameters and inner state; its
//!   model is the anchor z_t, the last completed average. A resumed run
//!   starts by launching the all-reduce the stopped run did not.
//! - With a bf16 wire the difference to the anchor z_t travels (it is
//!   held by every worker anyway, inner.rs).

use super::settings::OverlapLocalSgdSettings;
use crate::runtime::{AllReduce, Ctx, Group, Work};
use crate::strategy::inner::{memory, Form, Inner, Rounds};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::Outcome;
use crate::strategy::worker::{replica_piece, Plan, Worker};
use anyhow::Result;

/// Starts AAR(x): the mean of every worker's `x` (or of its difference to
/// the anchor `z`), in `spare` if there is one.
fn launch<C: Ctx>(ctx: &mut C, x: &[f32], z: &[f32], spare: &mut Option<Vec<f32>>, plan: &Plan) -> C::Handle<Vec<f32>> {
    let mut buf = spare.take().unwrap_or_else(|| vec![0.0; x.len()]);
    buf.copy_from_slice(x);
    Form::Delta.encode(plan.wire, &mut buf, z);
    ctx.start(AllReduce::mean(Group::World, buf, plan.wire))
}

/// Run Overlap-Local-SGD on one worker.
pub async fn run<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    s: &OverlapLocalSgdSettings,
    j: &mut Journal,
) -> Result<Outcome> {
    let (n, rank) = (w.model.num_params(), ctx.rank());
    let rounds = Rounds::new(s.tau, plan.steps);
    let end = rounds.round_up(plan.end);
    let mut inner = Inner::new(plan, n)?;
    // The anchor: the initial model, or the checkpoint's (the last average).
    let mut z = w.model.params.clone();
    let mut spare: Option<Vec<f32>> = None;
    let mut pending = None;
    let mut t = 0;
    if let Some(st) = j.take_resumed() {
        inner.restore(&st)?;
        st.copy_into("x", &mut w.model.params)?;
        t = rounds.ending_at(j.first_round())? + 1;
        if rounds.range(t).0 < end {
            pending = Some(launch(ctx, &w.model.params, &z, &mut spare, plan));
        }
    }
    while rounds.range(t).0 < end {
        let (lo, hi) = rounds.range(t);
        inner.round(ctx, w, plan, lo..hi, j).await?;
        // z_t = the average of round t-1 (waits only if it is still in flight).
        if let Some(h) = pending.take() {
            let mut avg = ctx.wait(h).await;
            Form::Delta.decode(plan.wire, &mut avg, &z);
            spare = Some(std::mem::replace(&mut z, avg));
        }
        // x <- x - pull (x - z_t)
        let (x, alpha) = (&mut w.model.params, s.pull);
        ctx.compute(Work::Elementwise { name: "pull to anchor", elems: n }, || {
            x.iter_mut().zip(&z).for_each(|(x, z)| *x -= alpha * (*x - z))
        })
        .await;
        if hi == plan.steps {
            // The run's model: the average of the last pulled parameters.
            let h = launch(ctx, &w.model.params, &z, &mut spare, plan);
            let mut avg = ctx.wait(h).await;
            Form::Delta.decode(plan.wire, &mut avg, &z);
            spare = Some(std::mem::replace(&mut z, avg));
        }
        j.round_end(ctx, Some(w), hi, end, || {
            let mut st = StrategyState { model: replica_piece(rank, &z), ..StrategyState::default() };
            st.tensors.push(("x".into(), w.model.params.clone()));
            inner.save(&mut st);
            st
        })
        .await?;
        if hi < end {
            pending = Some(launch(ctx, &w.model.params, &z, &mut spare, plan));
        }
        t += 1;
    }
    // The run ends on the synchronised model (a stopped run: the last average).
    w.model.params.copy_from_slice(&z);
    Ok(Outcome {
        exchange: None,
        optimizer_steps: inner.steps,
        memory: memory(n, &inner, spare.as_ref().map_or(0, Vec::len), z.len()),
        model: replica_piece(rank, &z),
    })
}
