//! Local-SGD (Stich 2018), "Local-SGD/AdamW" in the CO2 paper's baselines
//! (co2.txt, Sec. 3.1 and 4.1): every worker runs `tau` steps of its own
//! inner optimizer (AdamW by default, SGD selectable) on its own data, then
//! the parameters are averaged with a blocking all-reduce.
//!
//! ```text
//! for t in 0..T:
//!     x_{t,tau}^(i) = tau inner steps from x_t on worker i       (inner.rs)
//!     x_{t+1}       = (1/G) sum_i x_{t,tau}^(i)                  all-reduce, blocking
//!     inner state:  keep | reset | average                       (setting inner_state)
//! ```
//!
//! - `inner_state`: `keep` (default) leaves each worker's optimizer moments
//!   local; `reset` starts a fresh optimizer after each sync (AdamW's step
//!   count, hence its bias correction, restarts); `average` all-reduces the
//!   moments too, one more all-reduce per sync (in the run's wire dtype).
//! - With `tau = 1` and inner SGD this is DDP with SGD up to float
//!   rounding (mean of `x - lr g_i` versus `x - lr mean(g_i)`); with one
//!   worker it is single-worker training, bit for bit.
//! - The run's model is the average after the last round (every replica
//!   holds it; rank 0's is handed in). A run stopped early saves the same
//!   synchronised model, and its checkpoint resumes bit for bit.

use super::settings::{InnerState, LocalSgdSettings};
use crate::runtime::{AllReduce, Ctx, Group, Work};
use crate::strategy::inner::{memory, Form, Inner, Rounds};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::Outcome;
use crate::strategy::worker::{replica_piece, Plan, Worker};
use anyhow::Result;

/// Run local-SGD on one worker.
pub async fn run<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    s: &LocalSgdSettings,
    j: &mut Journal,
) -> Result<Outcome> {
    run_form(ctx, w, plan, s, j, Form::Delta).await
}

/// [`run`] with parameters travelling in `form` (the wire measurement
/// compares both forms; docs/decisions.md).
pub(crate) async fn run_form<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    s: &LocalSgdSettings,
    j: &mut Journal,
    form: Form,
) -> Result<Outcome> {
    let (n, rank) = (w.model.num_params(), ctx.rank());
    let rounds = Rounds::new(s.tau, plan.steps);
    let end = rounds.round_up(plan.end);
    let mut inner = Inner::new(plan, n)?;
    let mut first = 0;
    if let Some(st) = j.take_resumed() {
        inner.restore(&st)?;
        first = rounds.ending_at(j.first_round())? + 1;
    }
    // The last synchronised parameters: the reference of a bf16 delta
    // (held only then; the checkpoint's model restores it).
    let mut synced = form.sends_delta(plan.wire).then(|| w.model.params.clone());
    let mut t = first;
    while rounds.range(t).0 < end {
        let (lo, hi) = rounds.range(t);
        inner.round(ctx, w, plan, lo..hi, j).await?;
        // x_{t+1} = mean_i x_{t,tau}^(i): the replica goes out and comes back averaged.
        let r = synced.as_deref().unwrap_or(&[]);
        let mut x = std::mem::take(&mut w.model.params);
        form.encode(plan.wire, &mut x, r);
        x = ctx.run(AllReduce::mean(Group::World, x, plan.wire)).await;
        form.decode(plan.wire, &mut x, r);
        w.model.params = x;
        if let Some(r) = synced.as_mut() {
            r.copy_from_slice(&w.model.params);
        }
        match s.inner_state {
            InnerState::Keep => {}
            InnerState::Reset => inner.opt = plan.optimizer.try_build(n)?,
            InnerState::Average => average_inner_state(ctx, &mut inner, plan).await?,
        }
        j.round_end(ctx, Some(w), hi, end, || {
            let mut st = StrategyState { model: replica_piece(rank, &w.model.params), ..StrategyState::default() };
            inner.save(&mut st);
            st
        })
        .await?;
        t += 1;
    }
    let held = synced.as_ref().map_or(0, Vec::len);
    Ok(Outcome {
        exchange: None,
        optimizer_steps: inner.steps,
        memory: memory(n, &inner, 0, held),
        model: replica_piece(rank, &w.model.params),
    })
}

/// `inner_state = average`: the workers' optimizer moments, all-reduced
/// as one flat buffer and loaded back (the step count is the same everywhere).
async fn average_inner_state<C: Ctx>(ctx: &mut C, inner: &mut Inner, plan: &Plan) -> Result<()> {
    let names: Vec<(String, usize)> = inner.opt.state_tensors().iter().map(|(k, v)| (k.clone(), v.len())).collect();
    let mut flat = Vec::with_capacity(inner.opt.state_len());
    for (_, t) in inner.opt.state_tensors() {
        flat.extend_from_slice(t);
    }
    let elems = flat.len();
    let flat = ctx.run(AllReduce::mean(Group::World, flat, plan.wire)).await;
    let mut tensors = Vec::with_capacity(names.len());
    let mut at = 0;
    for (name, len) in names {
        tensors.push((name, flat[at..at + len].to_vec()));
        at += len;
    }
    let steps = inner.opt.steps_taken();
    let opt = &mut inner.opt;
    ctx.compute(Work::Elementwise { name: "load averaged inner state", elems }, || opt.load_state(steps, &tensors))
        .await
}
