//! What the local-update methods (local-sgd, overlap-local-sgd, slowmo,
//! co2) share: outer rounds of `tau` inner steps, the inner step itself,
//! and how parameters travel when they are averaged.
//!
//! ```text
//! for t in 0..T:                                    T = ceil(steps / tau) outer rounds
//!     for k in 0..tau:                              inner steps t*tau + k (the last round may be shorter)
//!         g = (1/K) sum_k grad f(x; xi_k)           K = grad_accum micro-batches, this worker's data
//!         x = InnerOpt(x, clip(g), lr(t*tau + k))   the worker's own optimizer, no communication
//!     ... the method's outer step (parameter averaging) ...
//! ```
//!
//! Conventions shared by the four methods (the lead's decisions):
//! - `--steps` counts inner optimizer steps; the learning-rate schedule
//!   spans them. Every inner step applies all `grad_accum` micro-batches
//!   of its worker, so each is recorded with `Journal::step`; checkpoints
//!   are taken at outer-round boundaries only, with nothing in flight.
//! - A run asked to stop after step `e` (`--stop-at`) stops at the end of
//!   the outer round containing `e` (capped at `steps`).
//! - The gradient clip (`train.grad_clip`) applies to each worker's own
//!   gradient before its inner step: nothing is averaged per step.
//! - Parameter averages use the run's wire dtype. With `f32` the
//!   parameters themselves travel (so `tau = 1` is DDP up to rounding).
//!   With `bf16` each worker sends the difference between its parameters
//!   and the last synchronised ones (identical on every worker) and adds
//!   that reference back to the mean: the difference is small, so its bf16
//!   rounding costs far less than rounding the parameters themselves
//!   (measured: docs/decisions.md, "Parameter averages in bf16").

use super::journal::Journal;
use super::journal::StrategyState;
use super::outcome::MemoryBytes;
use super::worker::{accumulate, clip_grads, Plan, Worker};
use crate::comm::WireDtype;
use crate::optim::Optimizer;
use crate::runtime::{Ctx, Work};
use anyhow::{ensure, Context, Result};

/// Outer rounds of `tau` inner steps over a run of `steps` inner steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rounds {
    tau: u64,
    steps: u64,
}

impl Rounds {
    /// Rounds of `tau >= 1` steps over `steps`.
    pub fn new(tau: u64, steps: u64) -> Rounds {
        Rounds { tau: tau.max(1), steps }
    }

    /// Inner steps `[lo, hi)` of round `t`.
    pub fn range(&self, t: u64) -> (u64, u64) {
        (t * self.tau, ((t + 1) * self.tau).min(self.steps))
    }

    /// The end of the outer round containing step `end` (1-based: steps done).
    pub fn round_up(&self, end: u64) -> u64 {
        (end.div_ceil(self.tau) * self.tau).min(self.steps)
    }

    /// The round that ends after `done` steps (a checkpoint's round); an
    /// error when `done` is not a boundary: the run was saved with another
    /// `tau`, or it ended its last round early at its last step and is
    /// now extended (rounds end at multiples of tau and at the last step).
    pub fn ending_at(&self, done: u64) -> Result<u64> {
        let t = done.div_ceil(self.tau).saturating_sub(1);
        let tau = self.tau;
        ensure!(
            done > 0 && self.range(t).1 == done,
            "the checkpoint is at step {done}, which ends no outer round of tau = {tau} in a run of {} steps (rounds end at multiples of {tau} and at the last step). Either the run was saved with another tau (resume with that one), or it ended its last round early at its own last step, {done}, and extending it moves the boundaries: a run saved off a multiple of tau cannot be extended (resume with --steps {done}, nothing left to train); to extend a run later, stop it at a multiple of tau (--stop-at {})",
            self.steps,
            (done / tau).max(1) * tau
        );
        Ok(t)
    }
}

/// A worker's inner optimizer.
pub struct Inner {
    /// The inner optimizer over the whole replica.
    pub opt: Box<dyn Optimizer>,
    /// Inner steps this worker has taken (the optimizer's own count restarts
    /// when local-sgd resets its state).
    pub steps: u64,
}

impl Inner {
    /// A fresh inner optimizer for `n` parameters.
    pub fn new(plan: &Plan, n: usize) -> Result<Inner> {
        Ok(Inner { opt: plan.optimizer.try_build(n)?, steps: 0 })
    }

    /// Inner step `step` (0-based over the run): `grad_accum` micro-batches,
    /// the worker's own clip, one optimizer step at `lr(step)`; recorded (a loss
    /// that is not finite ends the run: `Diverged`).
    pub async fn step<C: Ctx>(
        &mut self,
        ctx: &mut C,
        w: &mut Worker,
        plan: &Plan,
        step: u64,
        j: &mut Journal,
    ) -> Result<()> {
        self.step_at(ctx, w, plan, step, plan.schedule.lr(step), false, j).await
    }

    /// Inner step `step` at learning rate `lr`; `on_device`: inside a
    /// device round ([`Inner::round_at`]), where the clip and AdamW's step
    /// run on the model's device, costed as the host's are.
    #[allow(clippy::too_many_arguments)]
    async fn step_at<C: Ctx>(
        &mut self,
        ctx: &mut C,
        w: &mut Worker,
        plan: &Plan,
        step: u64,
        lr: f32,
        on_device: bool,
        j: &mut Journal,
    ) -> Result<()> {
        ctx.mark_round(step);
        let loss = accumulate(ctx, w, plan.grad_accum).await;
        let (m, opt) = (&mut w.model, &mut self.opt);
        let params = m.params.len();
        if !on_device {
            clip_grads(ctx, m.grads_mut(), plan.grad_clip).await;
            ctx.compute(Work::Optimizer { params }, || {
                let (params, grads) = m.params_and_grads();
                opt.step(params, grads, lr, &plan.decay)
            })
            .await;
        } else {
            if plan.grad_clip > 0.0 {
                ctx.compute(Work::grad_clip(params), || m.device_clip(plan.grad_clip)).await;
            }
            let opt = opt.as_adamw_mut().expect("a device round runs AdamW");
            ctx.compute(Work::Optimizer { params }, || m.device_adamw_step(opt, lr, &plan.decay)).await;
        }
        self.steps += 1;
        j.step(ctx, step + 1, loss, plan.grad_accum as u64)
    }

    /// Inner steps `steps` of one round at the schedule's lr: [`Inner::round_at`].
    pub async fn round<C: Ctx>(
        &mut self,
        ctx: &mut C,
        w: &mut Worker,
        plan: &Plan,
        steps: std::ops::Range<u64>,
        j: &mut Journal,
    ) -> Result<()> {
        let first = steps.start;
        let lr = |k: u64| plan.schedule.lr(first + k);
        self.round_at(ctx, w, plan, steps, lr, |_: &C| false, j).await.map(|_| ())
    }

    /// Inner steps `steps` of one round, the k-th (from 0) at `lr(k)`,
    /// before each of which `stop` may end the round (async DiLoCo: a
    /// crash); returns whether it did. Each step as [`Inner::step`] takes
    /// it, or, with the model on libtorch and AdamW inside, a device round
    /// (model/device_adamw.rs): the parameters and moments go to the device once,
    /// the steps run there with no transfer of the model, and both come
    /// back once at the end, where the host is the truth again (also when
    /// `stop` or a loss that is not finite ends the round). The same steps,
    /// so the same floats up to the device's rounding (tests/torch_backend.rs).
    #[allow(clippy::too_many_arguments)]
    pub async fn round_at<C: Ctx>(
        &mut self,
        ctx: &mut C,
        w: &mut Worker,
        plan: &Plan,
        steps: std::ops::Range<u64>,
        lr: impl Fn(u64) -> f32,
        mut stop: impl FnMut(&C) -> bool,
        j: &mut Journal,
    ) -> Result<bool> {
        let on_device = self.opt.as_adamw_mut().is_some_and(|opt| w.model.begin_device_adamw(opt));
        let first = steps.start;
        let mut out = Ok(false);
        for step in steps {
            if stop(ctx) {
                out = Ok(true);
                break;
            }
            let lr = lr(step - first);
            out = self.step_at(ctx, w, plan, step, lr, on_device, j).await.map(|()| false);
            if out.is_err() {
                break;
            }
        }
        if on_device {
            let opt = self.opt.as_adamw_mut().expect("the round began with AdamW");
            w.model.end_device_adamw(opt);
        }
        out
    }

    /// The inner optimizer's state, for a checkpoint (`inner.NAME` tensors).
    pub fn save(&self, into: &mut StrategyState) {
        for (name, t) in self.opt.state_tensors() {
            into.tensors.push((format!("inner.{name}"), t.to_vec()));
        }
        into.optimizer_steps = self.opt.steps_taken();
        let steps = serde_json::json!(self.steps);
        match into.scalars.as_object_mut() {
            Some(o) => {
                o.insert("inner_steps".into(), steps);
            }
            None => into.scalars = serde_json::json!({ "inner_steps": steps }),
        }
    }

    /// Restores what [`Inner::save`] wrote.
    pub fn restore(&mut self, from: &StrategyState) -> Result<()> {
        let tensors: Vec<(String, Vec<f32>)> = from
            .tensors
            .iter()
            .filter_map(|(n, t)| n.strip_prefix("inner.").map(|n| (n.to_string(), t.clone())))
            .collect();
        self.opt
            .load_state(from.optimizer_steps, &tensors)
            .context("checkpointed inner optimizer state does not fit")?;
        self.steps = from.count("inner_steps")?;
        Ok(())
    }
}

/// How parameters go onto the wire for an average (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// The parameters themselves.
    Params,
    /// With a bf16 wire, the difference to the last synchronised
    /// parameters (with f32, the parameters: exact either way).
    Delta,
}

impl Form {
    /// Whether, with `wire`, this form sends differences (and so needs a
    /// reference held by every worker).
    pub fn sends_delta(self, wire: WireDtype) -> bool {
        self == Form::Delta && wire == WireDtype::Bf16
    }

    /// `x` becomes what travels: itself, or `x - reference`.
    pub fn encode(self, wire: WireDtype, x: &mut [f32], reference: &[f32]) {
        if self.sends_delta(wire) {
            x.iter_mut().zip(reference).for_each(|(a, r)| *a -= r);
        }
    }

    /// The averaged parameters from what arrived: itself, or `mean + reference`.
    pub fn decode(self, wire: WireDtype, avg: &mut [f32], reference: &[f32]) {
        if self.sends_delta(wire) {
            avg.iter_mut().zip(reference).for_each(|(a, r)| *a += r);
        }
    }
}

/// Memory of a local-update worker: its replica, gradients, inner
/// optimizer, plus `comm` and `outer` f32 values held by the method.
pub fn memory(n: usize, inner: &Inner, comm: usize, outer: usize) -> MemoryBytes {
    let f = std::mem::size_of::<f32>();
    MemoryBytes {
        params: f * n,
        grads: f * n,
        comm_buffers: f * comm,
        optimizer: f * inner.opt.state_len(),
        outer: f * outer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_of_tau_steps_end_at_multiples_of_tau_or_the_last_step() {
        let r = Rounds::new(4, 10);
        assert_eq!((r.range(0), r.range(1), r.range(2)), ((0, 4), (4, 8), (8, 10)));
        // A stop inside a round finishes it; the last round is shorter.
        assert_eq!([1, 4, 5, 8, 9, 10].map(|e| r.round_up(e)), [4, 4, 8, 8, 10, 10]);
        assert_eq!([4, 8, 10].map(|d| r.ending_at(d).unwrap()), [0, 1, 2]);
        let e = r.ending_at(6).unwrap_err().to_string();
        assert!(e.contains("step 6") && e.contains("tau = 4"), "{e}");
        // A finished run of 10 steps (last round 8..10) extended to 20:
        // step 10 ends no round of 4 there; the fix names --steps 10 and a
        // --stop-at on a multiple of tau.
        let e = Rounds::new(4, 20).ending_at(10).unwrap_err().to_string();
        assert!(e.contains("extending it moves the boundaries") && e.contains("--steps 10"), "{e}");
        assert!(e.contains("--stop-at 8"), "{e}");
        assert!(r.ending_at(0).is_err());
    }

    #[test]
    fn deltas_travel_only_on_a_bf16_wire() {
        let reference = [1.0, 2.0];
        let mut x = [1.5, 2.25];
        Form::Delta.encode(WireDtype::F32, &mut x, &reference);
        assert_eq!(x, [1.5, 2.25]);
        Form::Params.encode(WireDtype::Bf16, &mut x, &reference);
        assert_eq!(x, [1.5, 2.25]);
        Form::Delta.encode(WireDtype::Bf16, &mut x, &reference);
        assert_eq!(x, [0.5, 0.25]);
        Form::Delta.decode(WireDtype::Bf16, &mut x, &reference);
        assert_eq!(x, [1.5, 2.25]);
    }
}
