//! CO2 (Sun et al., ICLR 2024; shared/papers/co2.txt): local updating
//! with an asynchronous all-reduce of the parameters (AAR), so that the
//! averaging of round t runs behind the computation of round t+1.
//! Algorithm 1, line by line:
//!
//! ```text
//!  1  m_0 = 0
//!  2  for t in 0..T:
//!  3-6    x_{t,tau}^(i) = tau inner steps from x_{t,0} on worker i   (local.rs; x_{t,1} kept for eq. 3)
//!  7      launch AAR(x_{t,tau}^(i))
//!  8-10   x_{t-1,tau} = wait(AAR(x_{t-1,tau}^(i)))                  (returns at once if it is done)
//! 11      Lambda_t = |x_{t,0} - x_{t-1,0}| / (tau |x_{t-1,1} - x_{t-1,0}|) + 1      eq. 3, element-wise
//! 12      m_t = beta m_{t-1} + (x_{t-1,0} - x_{t-1,tau}) / Lambda_t                 one-step-stale momentum
//! 13      x_{t+1,0} = x_{t,0} - alpha Clip(m_t, phi),  Clip = max(-phi, min(m, phi))  Sec. 3.3
//! ```
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
//!   last synchronised model travels (local.rs).
//! - Memory: x_{t,0}, x_{t-1,0} and m (3 copies) plus the buffer in flight
//!   is ACCO's Table 1 row `(2 + 2 + 4x2 + K) Psi`; the element-wise
//!   penalty adds x_{t-1,1} and x_{t,1} (both live at once: x_{t,1} is
//!   recorded during round t, x_{t-1,1} is used at its end).

use super::settings::{Clip, Co2Settings};
use crate::runtime::{AllReduce, Ctx, Group, Work};
use crate::strategy::inner::{memory, Form, Inner, Rounds};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::worker::{replica_piece, Outcome, Plan, Worker};
use anyhow::Result;

/// Eq. 3 for one coordinate: `|x0 - x0_prev| / (tau |x1_prev - x0_prev|) + 1`,
/// with 0/0 taken as 0 (Lambda = 1) and a/0 as +inf (Lambda = +inf).
pub fn staleness_gap(x0: f32, x0_prev: f32, x1_prev: f32, tau: f32) -> f32 {
    let num = (x0 - x0_prev).abs();
    let den = tau * (x1_prev - x0_prev).abs();
    if den == 0.0 {
        return if num == 0.0 { 1.0 } else { f32::INFINITY };
    }
    num / den + 1.0
}

/// Sec. 3.3: `max(-phi, min(m, phi))`, or `m` when clipping is off.
pub fn clip(m: f32, c: Clip) -> f32 {
    match c {
        Clip::Phi(phi) => m.min(phi).max(-phi),
        Clip::Off => m,
    }
}

/// CO2's outer state over a range of the parameters (all of them, or the
/// slice a worker owns under `shard_outer`).
#[derive(Clone, Debug, PartialEq)]
pub struct Outer {
    /// x_{t,0}: where the current inner loop started.
    pub x0: Vec<f32>,
    /// x_{t-1,0}.
    pub x0_prev: Vec<f32>,
    /// x_{t-1,1} (empty without the penalty).
    pub x1_prev: Vec<f32>,
    /// x_{t,1}, recorded after the current loop's first inner step (empty without the penalty).
    pub x1: Vec<f32>,
    /// m_{t-1}.
    pub m: Vec<f32>,
}

impl Outer {
    /// The state before the first round: x_{0,0} = `x`, m_0 = 0.
    pub fn new(x: &[f32], penalty: bool) -> Outer {
        let penalty_copy = || if penalty { x.to_vec() } else { Vec::new() };
        Outer {
            x0: x.to_vec(),
            x0_prev: x.to_vec(),
            x1_prev: penalty_copy(),
            x1: penalty_copy(),
            m: vec![0.0; x.len()],
        }
    }

    /// Records x_{t,1} (this range of the parameters after the first inner step).
    pub fn record_first_step(&mut self, x: &[f32]) {
        if !self.x1.is_empty() {
            self.x1.copy_from_slice(x);
        }
    }

    /// Lines 11-13 for outer iteration t >= 1 from `avg` = x_{t-1,tau}:
    /// m becomes m_t and x0 becomes x_{t+1,0}; x0_prev and x1_prev move on
    /// to x_{t,0} and x_{t,1}.
    #[allow(clippy::needless_range_loop)] // one coordinate at a time, as the paper writes it
    pub fn step(&mut self, avg: &[f32], s: &Co2Settings) {
        let (alpha, beta, tau) = (s.outer_lr, s.outer_momentum, s.tau as f32);
        let penalty = !self.x1_prev.is_empty();
        for i in 0..self.x0.len() {
            let (x0, x0_prev) = (self.x0[i], self.x0_prev[i]);
            let lambda = if penalty { staleness_gap(x0, x0_prev, self.x1_prev[i], tau) } else { 1.0 };
            self.m[i] = beta * self.m[i] + (x0_prev - avg[i]) / lambda;
            // x_{t+1,0}, written where x_{t-1,0} was (no longer needed).
            self.x0_prev[i] = x0 - alpha * clip(self.m[i], s.clip);
        }
        std::mem::swap(&mut self.x0, &mut self.x0_prev);
        std::mem::swap(&mut self.x1, &mut self.x1_prev);
    }

    /// The first outer iteration: lines 8-13 skipped, x_{1,0} = x_{0,0}.
    pub fn skip(&mut self) {
        self.x0_prev.copy_from_slice(&self.x0);
        std::mem::swap(&mut self.x1, &mut self.x1_prev);
    }

    /// f32 values held.
    pub fn len(&self) -> usize {
        self.x0.len() + self.x0_prev.len() + self.x1_prev.len() + self.x1.len() + self.m.len()
    }

    /// Whether it holds nothing (a zero-length range).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The state as checkpoint tensors (`outer.*`).
    pub fn save(&self, st: &mut StrategyState) {
        for (name, v) in self.named() {
            st.tensors.push((format!("outer.{name}"), v.clone()));
        }
    }

    /// Restores what [`Outer::save`] wrote, checking every length.
    pub fn restore(&mut self, st: &StrategyState) -> Result<()> {
        let Outer { x0, x0_prev, x1_prev, x1, m } = self;
        for (name, v) in [("x0", x0), ("x0_prev", x0_prev), ("x1_prev", x1_prev), ("x1", x1), ("m", m)] {
            st.copy_into(&format!("outer.{name}"), v)?;
        }
        Ok(())
    }

    fn named(&self) -> [(&'static str, &Vec<f32>); 5] {
        [("x0", &self.x0), ("x0_prev", &self.x0_prev), ("x1_prev", &self.x1_prev), ("x1", &self.x1), ("m", &self.m)]
    }
}

/// Where a resumed CO2 worker (sharded or not) stands: its inner state,
/// outer state and x_{b,tau} restored from the checkpoint, and the round b
/// whose inner loop was done when it was saved (`None`: a fresh run).
pub(super) fn resume(
    j: &mut Journal,
    inner: &mut Inner,
    outer: &mut Outer,
    x_tau: &mut [f32],
    rounds: &Rounds,
) -> Result<Option<u64>> {
    let Some(st) = j.take_resumed() else { return Ok(None) };
    inner.restore(&st)?;
    outer.restore(&st)?;
    st.copy_into("x_tau", x_tau)?;
    Ok(Some(rounds.ending_at(j.first_round())?))
}

/// Run CO2 on one worker.
pub async fn run<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    s: &Co2Settings,
    j: &mut Journal,
) -> Result<Outcome> {
    if s.shard_outer {
        return super::co2_sharded::run(ctx, w, plan, s, j).await;
    }
    let (n, rank, wire) = (w.model.num_params(), ctx.rank(), plan.wire);
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
                ctx.compute(Work::Elementwise { name: "co2 outer step", elems: 5 * n }, || o.step(&synced, s)).await;
            }
            let mut x = if delta { spare.take().unwrap_or_else(|| vec![0.0; n]) } else { std::mem::take(&mut synced) };
            x.copy_from_slice(&outer.x0);
            w.model.params = x;
            t = b + 1;
        }
        // Lines 3-6: the inner loop from x_{t,0}.
        let (lo, hi) = rounds.range(t);
        for step in lo..hi {
            inner.step(ctx, w, plan, step, j).await;
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
