//! CO2's outer step, lines 11-13 of Algorithm 1 (co2.txt; the algorithm
//! and the decisions are in co2.rs): the staleness gap penalty of eq. 3, the
//! one-step-stale momentum and the clipped update, element by element, and
//! the outer state a checkpoint keeps. Shared by co2.rs and co2_sharded.rs
//! (which runs it on its shard).

use super::settings::{Clip, Co2Settings};
use crate::strategy::inner::{Inner, Rounds};
use crate::strategy::journal::{Journal, StrategyState};
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
    /// to x_{t,0} and x_{t,1}. `world`: the workers (for beta = "auto").
    #[allow(clippy::needless_range_loop)] // one coordinate at a time, as the paper writes it
    pub fn step(&mut self, avg: &[f32], s: &Co2Settings, world: usize) {
        let (alpha, beta, tau) = (s.outer_lr, s.outer_momentum.at(world), s.tau as f32);
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
