//! CO2 (Sun et al., ICLR 2024; shared/papers/co2.txt): local updating
//! with an asynchronous all-reduce of the parameters (AAR), so that the
//! averaging of round t runs behind the computation of round t+1.
//! Algorithm 1, line by line:
//!
//! ```text
//!  1  m_0 = 0
//!  2  for t in 0..T:
//!  3-6    x_{t,tau}^(i) = tau inner steps from x_{t,0} on worker i   (inner.rs; x_{t,1} kept for eq. 3)
//!  7      launch AAR(x_{t,tau}^(i))
//!  8-10   x_{t-1,tau} = wait(AAR(x_{t-1,tau}^(i)))                  (returns at once if it is done)
//! 11      Lambda_t = |x_{t,0} - x_{t-1,0}| / (tau |x_{t-1,1} - x_{t-1,0}|) + 1      eq. 3, element-wise
//! 12      m_t = beta m_{t-1} + (x_{t-1,0} - x_{t-1,tau}) / Lambda_t                 one-step-stale momentum
//! 13      x_{t+1,0} = x_{t,0} - alpha Clip(m_t, phi),  Clip = max(-phi, min(m, phi))  Sec. 3.3
//! ```
//!
//! This is `mode = "paper"`, the default; `mode = "reference"` runs what
//! the released code does instead (co2_reference.rs). Defaults
//! (co2_settings.rs): alpha 0.5 and beta 0, tuned on nano because co2.txt
//! gives neither and the released alpha 1 oscillates behind the one-round
//! staleness (docs/results/co2.md, experiment 0; docs/decisions.md).
//!
//! Decisions (the lead's, written down here):
//! - First outer iteration (t = 0): lines 8-13 are skipped and the outer
//!   iterate does not move, x_{1,0} = x_{0,0}. This is the reading under
//!   which the appendix's eq. 10 holds from t = 1 (with m_0 = 0:
//!   -alpha beta m_0 = beta (x_{1,0} - x_{0,0}) = 0); a test checks it.
//! - Lambda_t uses the worker's own x_{t-1,1} (local, "readily accessible",
//!   Sec. 3.2), so with the penalty on the outer iterates of different
//!   workers drift slightly apart: that is the paper's algorithm. Where
//!   tau |x_{t-1,1} - x_{t-1,0}| is 0 the ratio is 0 if the numerator is 0
//!   (Lambda = 1), else +inf (1/Lambda = 0: that coordinate's new
//!   displacement is ignored).
//! - The clip applies to the update only: m_t itself is kept unclipped
//!   (line 13 clips what is applied; the momentum of line 12 is stored).
//! - Order at a boundary: wait for AAR(t-1), checkpoint (nothing in
//!   flight), launch AAR(t), then lines 11-13 while AAR(t) runs. The
//!   launch precedes the outer step as in Algorithm 1's timing; the math
//!   is unchanged (AAR(t) carries x_{t,tau}, which lines 11-13 do not
//!   touch). A checkpoint saves x_{t,tau} (not yet launched) and the outer
//!   state; a resumed run launches it first. Its model is the last
//!   synchronised one, x_{t-1,tau} (x_{0,0} before any average).
//! - The run's model at the end: wait for the last AAR and take
//!   x_{T-1,tau}, the average of the last inner loop's results. A run
//!   stopped early (`--stop-at`) ends on x_{t-1,tau} and resumes bit for bit.
//! - `shard_outer`: co2_sharded.rs. With a bf16 wire the difference to the
//!   last synchronised model travels (inner.rs).
//! - Memory: x_{t,0}, x_{t-1,0} and m (3 copies) plus the buffer in flight
//!   is ACCO's Table 1 row `(2 + 2 + 4x2 + K) Psi`; the element-wise
//!   penalty adds x_{t-1,1} and x_{t,1} (both live at once: x_{t,1} is
//!   recorded during round t, x_{t-1,1} is used at its end).

use super::co2_outer::{resume, Outer};
use super::settings::Co2Settings;
use crate::runtime::{AllReduce, Ctx, Group, Work};
use crate::strategy::inner::{memory, Form, Inner, Rounds};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::Outcome;
use crate::strategy::worker::{replica_piece, Plan, Worker};
use anyhow::Result;

/// Run CO2 on one worker.
pub async fn run<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    s: &Co2Settings,
    j: &mut Journal,
) -> Result<Outcome> {
    if s.is_reference() {
        return super::co2_reference::run(ctx, w, plan, s, j).await;
    }
    if s.shard_outer {
        return super::co2_sharded::run(ctx, w, plan, s, j).await;
    }
    let (n, rank, wire, world) = (w.model.num_params(), ctx.rank(), plan.wire, ctx.world());
    let rounds = Rounds::new(s.tau, plan.steps);
    let end = rounds.round_up(plan.end);
    let mut inner = Inner::new(plan, n)?;
    let mut outer = Outer::new(&w.model.params, s.penalty);
    // x_{t-1,tau}: the last synchronised model (x_{0,0} before the first
    // average). With an f32 wire its buffer becomes the next replica once
    // lines 11-13 have read it; with bf16 it is the reference of the
    // difference in flight, kept until the next average arrives.
    let mut synced = w.model.params.clone();
    let delta = Form::Delta.sends_delta(wire);
    let mut spare: Option<Vec<f32>> = None;
    let mut pending = None;
    // The boundary this worker stands at (inner loop done, AAR(t-1) waited).
    let mut at = resume(j, &mut inner, &mut outer, &mut w.model.params, &rounds)?;
    let mut t = 0;
    loop {
        if let Some(b) = at {
            if rounds.range(b).1 >= end {
                break;
            }
            // Line 7: launch AAR(x_{b,tau}); the replica itself goes out.
            let mut x = std::mem::take(&mut w.model.params);
            Form::Delta.encode(wire, &mut x, &synced);
            pending = Some(ctx.start(AllReduce::mean(Group::World, x, wire)));
            // Lines 11-13 (skipped in the first iteration) while it runs.
            if b == 0 {
                outer.skip();
            } else {
                let o = &mut outer;
                ctx.compute(Work::Elementwise { name: "co2 outer step", elems: 5 * n }, || o.step(&synced, s, world))
                    .await;
            }
            let mut x = if delta { spare.take().unwrap_or_else(|| vec![0.0; n]) } else { std::mem::take(&mut synced) };
            x.copy_from_slice(&outer.x0);
            w.model.params = x;
            t = b + 1;
        }
        // Lines 3-6: the inner loop from x_{t,0}.
        let (lo, hi) = rounds.range(t);
        for step in lo..hi {
            inner.step(ctx, w, plan, step, j).await?;
            if step == lo {
                outer.record_first_step(&w.model.params);
            }
        }
        // Lines 8-10: x_{t-1,tau} = wait(AAR(t-1)).
        if let Some(h) = pending.take() {
            let mut avg = ctx.wait(h).await;
            Form::Delta.decode(wire, &mut avg, &synced);
            let old = std::mem::replace(&mut synced, avg);
            if delta {
                spare = Some(old);
            }
        }
        if hi == plan.steps {
            // The end: the run's model is x_{T-1,tau}.
            let mut x = std::mem::take(&mut w.model.params);
            Form::Delta.encode(wire, &mut x, &synced);
            let mut avg = ctx.run(AllReduce::mean(Group::World, x, wire)).await;
            Form::Delta.decode(wire, &mut avg, &synced);
            w.model.params = avg.clone();
            synced = avg;
        }
        j.round_end(ctx, Some(w), hi, end, || {
            let mut st = StrategyState { model: replica_piece(rank, &synced), ..StrategyState::default() };
            st.tensors.push(("x_tau".into(), w.model.params.clone()));
            outer.save(&mut st);
            inner.save(&mut st);
            st
        })
        .await?;
        at = Some(t);
    }
    // A stopped run ends on x_{t-1,tau}: every replica holds the synchronised model.
    w.model.params.copy_from_slice(&synced);
    // Held during a round: the buffer in flight, and with bf16 its reference.
    let comm = n * (1 + usize::from(delta));
    Ok(Outcome {
        exchange: None,
        optimizer_steps: inner.steps,
        memory: memory(n, &inner, comm, outer.len()),
        model: replica_piece(rank, &synced),
    })
}
