//! CO2 as its released code runs it (`[methods.co2] mode = "reference"`,
//! `compare --methods co2:mode=reference`): weigao266/fairscale-CO2 at
//! 55aaca5, `fairscale/experimental/nn/data_parallel/gossip/co2.py`, driven
//! by weigao266/fairseq-CO2 at 6375219, whose `trainer.py:1033-1034` calls
//! `perform_co2` after every optimizer step. Per outer round (lines: co2.py):
//!
//! ```text
//! x_old = x_0, m = 0                                          :479-539 (buffers at the first call)
//! every tau = H inner steps (outer_frequency, :340-341):
//!     xbar  = (1/W) sum_i x_i          p /= W, then reduce to the owner; blocking, main thread  :552-575
//!     m     = beta m - xbar / lambda + x_old / lambda          :624-626 (lambda = co2_gap_penalty)
//!     (clamp(m, -phi, phi): computed and thrown away)          :594-595, :627-628
//!     x_old = x_old - alpha m                                  :629
//!     x_i   = x_old on every worker    copy, then broadcast from the owner                      :630, :574
//! ```
//!
//! That is SlowMo (slowmo.rs) with its 1/gamma replaced by a constant
//! 1/lambda and no gamma in the outer step, and not the paper's Algorithm 1
//! (co2.rs): the average is exact and blocking (nothing overlaps), and the
//! outer step uses this round's average, not the last one's.
//!
//! Where lowcomm departs from the released code, on purpose:
//! - **With beta = 0 and alpha = 1 it still averages** (plain local SGD, to
//!   rounding). The released code then sets `self.co2 = False` (`:122`),
//!   so its outer step never runs (`:340-341`, `:579-580`), and the
//!   local-SGD average was moved into a thread that wakes only at outer
//!   steps (`:416`, `:472`, `:675-682`): workers never synchronise. fairseq's rule gives
//!   beta = 0 up to 16 GPUs, so its default CO2 on one or two nodes is that.
//! - No racy extra average. The thread's local-SGD average every
//!   `localsgd_frequency` steps (`:343-357`, `:392-408`) reads `num_updates`
//!   while the main thread increments it (`:477`) and writes into the live
//!   parameters; with the class defaults it never runs.
//! - A lowcomm worker is one replica; the released code's worker is a node
//!   whose GPUs all-reduce gradients every step (`:642-663`).
//! - The outer state is held whole on every worker; the released code
//!   shards it over min(W, 32) owners (`:45,48,144`): the same arithmetic
//!   per element, less memory.
//! - beta = "auto" (the default) counts lowcomm's workers where fairseq
//!   counts GPUs (`distributed_fairseq_model.py:140-148`).
//!
//! Checkpoint: the model is x_old (every replica restarts from it), m goes
//! into each worker's part; a stopped run resumes bit for bit.

use super::settings::Co2Settings;
use crate::runtime::{AllReduce, Ctx, Group, Work};
use crate::strategy::inner::{memory, Form, Inner, Rounds};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::Outcome;
use crate::strategy::worker::{replica_piece, Plan, Worker};
use anyhow::Result;

/// The released code's outer step on `x_old` and `m`, in place, from the
/// exact average `xbar`, in its order of operations (co2.py:624-629):
/// `m = beta m - xbar / lambda + x_old / lambda`, `x_old = x_old - alpha m`.
/// No clip.
pub fn outer_step(x_old: &mut [f32], m: &mut [f32], xbar: &[f32], alpha: f32, beta: f32, lambda: f32) {
    let inv = 1.0 / lambda;
    for ((x, m), a) in x_old.iter_mut().zip(m.iter_mut()).zip(xbar) {
        *m = beta * *m - inv * a + inv * *x;
        *x += -alpha * *m;
    }
}

/// Run CO2's reference mode on one worker.
pub async fn run<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    s: &Co2Settings,
    j: &mut Journal,
) -> Result<Outcome> {
    let (n, rank) = (w.model.num_params(), ctx.rank());
    let (alpha, beta, lambda) = (s.outer_lr, s.outer_momentum.at(ctx.world()), s.gap_penalty);
    let rounds = Rounds::new(s.tau, plan.steps);
    let end = rounds.round_up(plan.end);
    let mut inner = Inner::new(plan, n)?;
    // x_old: where every replica starts a round (the checkpoint's model when resuming).
    let mut x_old = w.model.params.clone();
    let mut m = vec![0.0f32; n];
    let mut t = 0;
    if let Some(st) = j.take_resumed() {
        inner.restore(&st)?;
        st.copy_into("m", &mut m)?;
        t = rounds.ending_at(j.first_round())? + 1;
    }
    while rounds.range(t).0 < end {
        let (lo, hi) = rounds.range(t);
        for step in lo..hi {
            inner.step(ctx, w, plan, step, j).await?;
        }
        // xbar = mean_i x_i, blocking (bf16 wire: the difference to x_old travels).
        let mut x = std::mem::take(&mut w.model.params);
        Form::Delta.encode(plan.wire, &mut x, &x_old);
        x = ctx.run(AllReduce::mean(Group::World, x, plan.wire)).await;
        Form::Delta.decode(plan.wire, &mut x, &x_old);
        ctx.compute(Work::Elementwise { name: "co2 reference outer step", elems: 2 * n }, || {
            outer_step(&mut x_old, &mut m, &x, alpha, beta, lambda)
        })
        .await;
        // Every replica restarts from x_old (the averaged buffer is reused).
        x.copy_from_slice(&x_old);
        w.model.params = x;
        j.round_end(ctx, Some(w), hi, end, || {
            let mut st = StrategyState { model: replica_piece(rank, &x_old), ..StrategyState::default() };
            st.tensors.push(("m".into(), m.clone()));
            inner.save(&mut st);
            st
        })
        .await?;
        t += 1;
    }
    Ok(Outcome {
        exchange: None,
        optimizer_steps: inner.steps,
        memory: memory(n, &inner, 0, x_old.len() + m.len()),
        model: replica_piece(rank, &x_old),
    })
}
