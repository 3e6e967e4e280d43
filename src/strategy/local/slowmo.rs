//! SlowMo (Wang et al. 2019), as the CO2 paper builds on it (co2.txt,
//! Sec. 3.1, 3.2 and Algorithm 1 without asynchrony): `tau` local steps,
//! a blocking exact average, then the slow-momentum outer step.
//!
//! ```text
//! u = 0, x_0 = initial parameters (the outer iterate, equal on every worker)
//! for t in 0..T:
//!     x_{t,tau}^(i) = tau inner steps from x_0 on worker i      (inner.rs)
//!     x_avg = (1/G) sum_i x_{t,tau}^(i)                         all-reduce, blocking
//!     u   <- beta u + (x_0 - x_avg) / gamma                     slow momentum
//!     x_0 <- x_0 - alpha gamma u                                outer step; every worker restarts from x_0
//! ```
//!
//! - gamma is the inner learning rate of the round's last inner step
//!   (`lr(hi - 1)`: the rate the round ended with; SlowMo's analysis takes
//!   it constant over a round). The schedule gives lr > 0 before its last
//!   step; should it give 0, the outer step falls back to `x_0 = x_avg`.
//! - With `beta = 0` and `alpha = 1` the outer step is `x_0 - (x_0 - x_avg)`
//!   = `x_avg`, local-sgd, but only up to float rounding (dividing by and
//!   multiplying with gamma are not exact).
//! - Each worker keeps its inner optimizer state (local).
//! - Outer state: u and x_0 (two model copies: ACCO's Table 1 row for
//!   SlowMo, `(2 + 2 + 2x2 + K) Psi`). The checkpoint's model is x_0 (so
//!   it is not saved twice); u goes into each worker's part.

use super::settings::SlowMoSettings;
use crate::runtime::{AllReduce, Ctx, Group, Work};
use crate::strategy::inner::{memory, Form, Inner, Rounds};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::Outcome;
use crate::strategy::worker::{replica_piece, Plan, Worker};
use anyhow::Result;

/// The slow-momentum outer step on `x0` and `u`, from `avg` (the exact
/// average), in place: `u = beta u + (x0 - avg) / gamma`, `x0 = x0 - alpha gamma u`.
pub fn outer_step(x0: &mut [f32], u: &mut [f32], avg: &[f32], alpha: f32, beta: f32, gamma: f32) {
    if gamma <= 0.0 {
        x0.copy_from_slice(avg);
        return;
    }
    for ((x, u), a) in x0.iter_mut().zip(u.iter_mut()).zip(avg) {
        *u = beta * *u + (*x - a) / gamma;
        *x -= alpha * gamma * *u;
    }
}

/// Run SlowMo on one worker.
pub async fn run<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    s: &SlowMoSettings,
    j: &mut Journal,
) -> Result<Outcome> {
    let (n, rank) = (w.model.num_params(), ctx.rank());
    let rounds = Rounds::new(s.tau, plan.steps);
    let end = rounds.round_up(plan.end);
    let mut inner = Inner::new(plan, n)?;
    // x_0 is the replica at the start of every round (the checkpoint's model when resuming).
    let mut x0 = w.model.params.clone();
    let mut u = vec![0.0f32; n];
    let mut t = 0;
    if let Some(st) = j.take_resumed() {
        inner.restore(&st)?;
        st.copy_into("u", &mut u)?;
        t = rounds.ending_at(j.first_round())? + 1;
    }
    let form = Form::Delta;
    while rounds.range(t).0 < end {
        let (lo, hi) = rounds.range(t);
        inner.round(ctx, w, plan, lo..hi, j).await?;
        // x_avg = mean_i x_{t,tau}^(i) (bf16 wire: the difference to x_0 travels).
        let mut x = std::mem::take(&mut w.model.params);
        form.encode(plan.wire, &mut x, &x0);
        x = ctx.run(AllReduce::mean(Group::World, x, plan.wire)).await;
        form.decode(plan.wire, &mut x, &x0);
        let gamma = plan.schedule.lr(hi - 1);
        let (alpha, beta) = (s.outer_lr, s.outer_momentum);
        ctx.compute(Work::Elementwise { name: "slowmo outer step", elems: 2 * n }, || {
            outer_step(&mut x0, &mut u, &x, alpha, beta, gamma)
        })
        .await;
        // Every worker restarts from the same x_0 (the averaged buffer is reused).
        x.copy_from_slice(&x0);
        w.model.params = x;
        j.round_end(ctx, Some(w), hi, end, || {
            let mut st = StrategyState { model: replica_piece(rank, &x0), ..StrategyState::default() };
            st.tensors.push(("u".into(), u.clone()));
            inner.save(&mut st);
            st
        })
        .await?;
        t += 1;
    }
    Ok(Outcome {
        exchange: None,
        optimizer_steps: inner.steps,
        memory: memory(n, &inner, 0, x0.len() + u.len()),
        model: replica_piece(rank, &x0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outer_step_by_hand() {
        // x0 = (1, 2), avg = (0.5, 3), gamma 0.5, beta 0.5, alpha 2, u = (1, 0):
        // u = 0.5 (1, 0) + ((1 - 0.5), (2 - 3)) / 0.5 = (0.5 + 1, -2) = (1.5, -2)
        // x0 = (1, 2) - 2 * 0.5 * (1.5, -2) = (-0.5, 4)
        let (mut x0, mut u) = (vec![1.0, 2.0], vec![1.0, 0.0]);
        outer_step(&mut x0, &mut u, &[0.5, 3.0], 2.0, 0.5, 0.5);
        assert_eq!(u, vec![1.5, -2.0]);
        assert_eq!(x0, vec![-0.5, 4.0]);
        // beta 0, alpha 1: x0 becomes the average (exactly here: powers of two).
        let (mut x0, mut u) = (vec![1.0, 2.0], vec![7.0, 7.0]);
        outer_step(&mut x0, &mut u, &[0.5, 3.0], 1.0, 0.0, 0.25);
        assert_eq!(x0, vec![0.5, 3.0]);
        // gamma 0: plain averaging, u untouched.
        outer_step(&mut x0, &mut u, &[9.0, 9.0], 1.0, 0.5, 0.0);
        assert_eq!((x0, u), (vec![9.0, 9.0], vec![2.0, -4.0]));
    }
}
