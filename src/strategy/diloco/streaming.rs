//! Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512): DiLoCo
//! (diloco.rs) with the model cut into P fragments (fragments.rs), each
//! synchronised on its own inner step of the H-step round, so the bytes of
//! one synchronisation fall by ~P; a fragment's outer gradient travels
//! while tau more inner steps run; when it lands, the fragment's outer
//! step runs in f32 and its result is mixed into the local parameters.
//!
//! ```text
//! theta_old = theta^(0) on every worker, fragments p = 0..P-1      S1
//! for t = 1..T (inner steps done):                                 S2
//!     theta_i = InnerOpt(theta_i, grad f(theta_i; own data))       S3 (inner.rs)
//!     for p with t mod H == t_p mod H, t_p = floor((p+1) H / P):   S4 the fragment leaves
//!         delta_{i,p} = theta_old_p - theta_{i,p}                  S5 outer gradient: old minus new
//!         start Delta_p = (1/k) sum_i delta_{i,p}                  S6 in flight (compressed: outer_wire)
//!     for p with t mod H == (t_p + tau) mod H:                     S7 tau steps later it lands
//!         theta_outer_p = OuterOpt_p(theta_old_p, Delta_p)         S8 f32, each fragment's own state
//!         theta_{i,p} = alpha theta_{i,p} + (1 - alpha) theta_outer_p   S9 mixing ([`mix`])
//!         theta_old_p = theta_outer_p                              S10
//! ```
//!
//! S4 spreads the P offsets evenly as torchft's `DiLoCo` does
//! (`floor(sync_every / P * (i + 1))`), the last fragment at the round's
//! end; S9 is torchft's `lerp_(local, alpha)` after the outer step. With
//! P = 1, tau = 0, alpha = 0 this is `diloco` bit for bit (a test).
//!
//! Decisions (ours, written down here):
//! - tau x P < H (settings): a fragment lands before the next one leaves,
//!   so at most one is in flight and none at a round's end.
//! - At a round's end the fragments leaving there (the last one) have
//!   their outer gradient computed, then the boundary is checkpointed,
//!   then they are started: a checkpoint saves that gradient (not yet
//!   sent), each fragment's theta_old (the checkpoint's model), outer
//!   state and residual, and the local parameters; a resumed run starts
//!   the saved gradients first. Nothing is ever in flight at a checkpoint.
//! - The run ends like DiLoCo's: after the last step every fragment sends
//!   what it moved since its last synchronisation and takes the global
//!   value (alpha is not applied): the run's model is theta_old. A run
//!   stopped early ends on theta_old too, and resumes bit for bit.
//! - Memory: theta_old (n), the outer states, with a compressed wire each
//!   fragment's staged message and decode buffer (and residual), and the
//!   outer gradient in flight (the largest fragment; P of them with every
//!   offset equal), which cannot reuse the replica: training goes on.
//!
//! Eager updates (`eager = true`, arXiv 2502.12996): a stand-in for the
//! average while it is in flight, corrected when it lands (E1-E3,
//! streaming_eager.rs).

use super::diloco::{decode_mean, pseudo_gradient, restore_outer, save_outer, start_compressed};
use super::fragments::Fragments;
use super::streaming_eager::{correct, standin};
use super::streaming_settings::StreamingSettings;
use crate::comm::codec::{sender_copies, ErrorFeedback};
use crate::optim::OuterOpt;
use crate::runtime::{AllReduce, Ctx, Group, Work};
use crate::strategy::inner::{memory, Inner, Rounds};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::Outcome;
use crate::strategy::worker::{replica_piece, Plan, Worker};
use anyhow::Result;

/// S9: `local` becomes `alpha local + (1 - alpha) outer`. With alpha = 0
/// the global value is copied (DiLoCo's, exactly: no -0.0 turned into +0.0).
pub fn mix(local: &mut [f32], outer: &[f32], alpha: f32) {
    if alpha == 0.0 {
        local.copy_from_slice(outer);
    } else {
        local.iter_mut().zip(outer).for_each(|(x, o)| *x = alpha * *x + (1.0 - alpha) * o);
    }
}

/// One fragment's outer state, the same on every worker.
struct Fragment {
    /// theta_old_p: the fragment's global value since its last landing (S10).
    theta: Vec<f32>,
    /// OuterOpt_p's state (S8).
    outer: OuterOpt,
    /// A compressed outer_wire: the sender with its residual, and a decode buffer.
    sender: Option<(ErrorFeedback, Vec<f32>)>,
    /// Eager: the others' share of the last landed average (E3); while this
    /// fragment is in flight, minus this worker's own share (E3 adds the average).
    others: Vec<f32>,
}

/// An outer gradient in flight: the all-reduce's handle, or the
/// all-gather's with the buffer the mean is decoded into.
enum Wire<A, B> {
    Dense(A),
    Packed(B, Vec<f32>),
}

/// Fragment `p`'s outer gradient, landing after `lands` inner steps.
struct Flight<A, B> {
    p: usize,
    lands: u64,
    wire: Wire<A, B>,
    /// Eager: the stand-in step theta~ the local replica was mixed with (E1), and alpha.
    standin: Option<(Vec<f32>, f32)>,
}

/// A flight under runtime `C`.
type FlightOf<C> = Flight<<C as Ctx>::Handle<Vec<f32>>, <C as Ctx>::Handle<(Vec<u8>, Vec<u8>)>>;

/// Everything a worker keeps across steps besides its replica.
struct State {
    frags: Fragments,
    fs: Vec<Fragment>,
    wire: crate::comm::WireDtype,
    /// Workers k (E1's divisor).
    workers: usize,
}

impl State {
    /// S5: fragment p's outer gradient from the replica `params`.
    async fn outer_gradient<C: Ctx>(&self, ctx: &mut C, p: usize, params: &[f32]) -> Vec<f32> {
        let (frags, theta) = (&self.frags, &self.fs[p].theta);
        let mut delta = vec![0.0; theta.len()];
        ctx.compute(Work::Elementwise { name: "diloco pseudo-gradient", elems: theta.len() }, || {
            frags.gather(p, params, &mut delta);
            pseudo_gradient(&mut delta, theta);
        })
        .await;
        delta
    }

    /// S6: starts fragment p's mean, landing after `lands` steps; with
    /// `eager` = Some(alpha) the stand-in step is mixed into `params` at once (E1).
    async fn send<C: Ctx>(
        &mut self,
        ctx: &mut C,
        p: usize,
        delta: Vec<f32>,
        lands: u64,
        params: &mut [f32],
        eager: Option<f32>,
    ) -> FlightOf<C> {
        let np = delta.len();
        let k = self.workers;
        // E1's stand-in gradient from this worker's share as the others
        // receive it (the raw delta dense, what the codec sent compressed);
        // others_p then holds minus that share, and E3 adds the average.
        let standin_gradient = |others: &mut Vec<f32>, own: &[f32]| {
            let mut g = vec![0.0; np];
            standin(&mut g, own, others, k);
            others.iter_mut().zip(own).for_each(|(r, d)| *r = -(d / k as f32));
            g
        };
        let work = Work::Elementwise { name: "eager stand-in", elems: 2 * np };
        let f = &mut self.fs[p];
        let (wire, g) = match (f.sender.as_mut(), eager) {
            (None, None) => (Wire::Dense(ctx.start(AllReduce::mean(Group::World, delta, self.wire))), None),
            (None, Some(_)) => {
                let others = &mut f.others;
                let g = ctx.compute(work, || standin_gradient(others, &delta)).await;
                (Wire::Dense(ctx.start(AllReduce::mean(Group::World, delta, self.wire))), Some(g))
            }
            (Some((ef, _)), eager) => {
                let h = start_compressed(ctx, ef, &delta).await;
                let g = match eager {
                    None => None,
                    Some(_) => {
                        let (others, sent) = (&mut f.others, ef.sent());
                        Some(ctx.compute(work, || standin_gradient(others, sent)).await)
                    }
                };
                (Wire::Packed(h, delta), g)
            }
        };
        let mut standin_step = None;
        if let (Some(g), Some(alpha)) = (g, eager) {
            // E1 on copies: theta_old_p and OuterOpt_p see only the true average (S8).
            let f = &self.fs[p];
            let (mut theta, mut outer) = (f.theta.clone(), f.outer.clone());
            ctx.compute(Work::Elementwise { name: "eager stand-in step", elems: 3 * np }, || {
                outer.step(&mut theta, &g)
            })
            .await;
            let frags = &self.frags;
            ctx.compute(Work::Elementwise { name: "streaming mix", elems: 3 * np }, || {
                let mut local = vec![0.0; np];
                frags.gather(p, params, &mut local);
                mix(&mut local, &theta, alpha);
                frags.scatter(p, &local, params);
            })
            .await;
            standin_step = Some((theta, alpha));
        }
        Flight { p, lands, wire, standin: standin_step }
    }

    /// S8-S10 for every flight due by `done` steps (all of them with
    /// `None`), mixing by `alpha`.
    async fn land<C: Ctx>(
        &mut self,
        ctx: &mut C,
        params: &mut [f32],
        flights: &mut Vec<FlightOf<C>>,
        done: Option<u64>,
        alpha: f32,
    ) {
        while flights.first().is_some_and(|f| done.is_none_or(|d| f.lands <= d)) {
            let Flight { p, wire, standin, .. } = flights.remove(0);
            let f = &mut self.fs[p];
            let mut avg = match wire {
                Wire::Dense(h) => ctx.wait(h).await,
                Wire::Packed(h, mut buf) => {
                    let (_, all) = ctx.wait(h).await;
                    let (ef, scratch) = f.sender.as_mut().expect("a packed flight has a sender");
                    decode_mean(ctx, ef.wire(), &all, &mut buf, scratch).await;
                    buf
                }
            };
            let np = avg.len();
            let (theta, outer) = (&mut f.theta, &mut f.outer);
            ctx.compute(Work::Elementwise { name: "diloco outer step", elems: 3 * np }, || outer.step(theta, &avg))
                .await;
            let frags = &self.frags;
            match standin {
                None => {
                    ctx.compute(Work::Elementwise { name: "streaming mix", elems: 3 * np }, || {
                        frags.gather(p, params, &mut avg);
                        mix(&mut avg, theta, alpha);
                        frags.scatter(p, &avg, params);
                    })
                    .await
                }
                // E2 and E3 (module docs).
                Some((standin_theta, alpha)) => {
                    let others = &mut f.others;
                    ctx.compute(Work::Elementwise { name: "eager correction", elems: 4 * np }, || {
                        others.iter_mut().zip(&avg).for_each(|(r, a)| *r += a);
                        frags.gather(p, params, &mut avg);
                        correct(&mut avg, theta, &standin_theta, alpha);
                        frags.scatter(p, &avg, params);
                    })
                    .await
                }
            }
        }
    }

    /// theta_old of every fragment, as one model.
    fn global(&self, n: usize) -> Vec<f32> {
        let mut theta = vec![0.0; n];
        for (p, f) in self.fs.iter().enumerate() {
            self.frags.scatter(p, &f.theta, &mut theta);
        }
        theta
    }
}

/// Run Streaming DiLoCo on one worker.
pub async fn run<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    s: &StreamingSettings,
    j: &mut Journal,
) -> Result<Outcome> {
    let (n, rank) = (w.model.num_params(), ctx.rank());
    let frags = Fragments::new(&w.model.layout, s.fragments, s.fragment_pattern)?;
    let rounds = Rounds::new(s.h, plan.steps);
    let end = rounds.round_up(plan.end);
    let mut inner = Inner::new(plan, n)?;
    let cfg = s.diloco().outer_config(ctx.topology().workers);
    let ef = s.error_feedback;
    // S1: theta_old from the replica (the checkpoint's model when resuming).
    let fs = (0..frags.len())
        .map(|p| {
            let np = frags.size(p);
            let mut theta = vec![0.0; np];
            frags.gather(p, &w.model.params, &mut theta);
            let sender = s.outer_wire.map(|wire| (ErrorFeedback::new(wire, s.diloco().feedback(), np), vec![0.0; np]));
            let others = vec![0.0; if s.eager { np } else { 0 }];
            Fragment { theta, outer: OuterOpt::new(cfg, np), sender, others }
        })
        .collect();
    let mut st = State { frags, fs, wire: plan.wire, workers: ctx.topology().workers };
    // Eager: the alpha of E1's stand-in (module docs).
    let eager = s.eager.then_some(s.mix);
    // Outer gradients computed at a round's end, started after its checkpoint.
    let mut pending: Vec<(usize, Vec<f32>)> = Vec::new();
    let mut t = 0;
    if let Some(saved) = j.take_resumed() {
        inner.restore(&saved)?;
        for (p, f) in st.fs.iter_mut().enumerate() {
            restore_outer(&mut f.outer, &saved, &format!("f{p}."))?;
            if let Some((e, _)) = f.sender.as_mut().filter(|_| ef) {
                e.restore(saved.tensor(&format!("f{p}.residual"))?);
            }
            if s.eager {
                f.others.copy_from_slice(saved.tensor(&format!("f{p}.others"))?);
            }
            if let Ok(d) = saved.tensor(&format!("f{p}.pending")) {
                pending.push((p, d.to_vec()));
            }
        }
        saved.copy_into("local", &mut w.model.params)?;
        t = rounds.ending_at(j.first_round())? + 1;
    }
    let mut flights = Vec::new();
    while rounds.range(t).0 < end {
        let (lo, hi) = rounds.range(t);
        for (p, delta) in std::mem::take(&mut pending) {
            let f = st.send(ctx, p, delta, lo + s.overlap(), &mut w.model.params, eager).await;
            flights.push(f);
        }
        st.land(ctx, &mut w.model.params, &mut flights, Some(lo), s.mix).await;
        for step in lo..hi {
            inner.step(ctx, w, plan, step, j).await?;
            let done = step + 1;
            // S4-S6 (the round's end waits for its checkpoint, below), then S7-S10.
            for p in (0..st.frags.len()).filter(|&p| done < hi && done - lo == s.offset(p)) {
                let delta = st.outer_gradient(ctx, p, &w.model.params).await;
                let f = st.send(ctx, p, delta, done + s.overlap(), &mut w.model.params, eager).await;
                flights.push(f);
            }
            st.land(ctx, &mut w.model.params, &mut flights, Some(done), s.mix).await;
        }
        if hi == plan.steps {
            // The end: every fragment synchronises once more and takes the global value.
            st.land(ctx, &mut w.model.params, &mut flights, None, s.mix).await;
            for p in 0..st.frags.len() {
                let delta = st.outer_gradient(ctx, p, &w.model.params).await;
                let f = st.send(ctx, p, delta, hi, &mut w.model.params, None).await;
                flights.push(f);
            }
            st.land(ctx, &mut w.model.params, &mut flights, None, 0.0).await;
        } else {
            for p in (0..st.frags.len()).filter(|&p| hi - lo == s.offset(p)) {
                let delta = st.outer_gradient(ctx, p, &w.model.params).await;
                pending.push((p, delta));
            }
        }
        j.round_end(ctx, Some(w), hi, end, || {
            let mut saved = StrategyState { model: replica_piece(rank, &st.global(n)), ..StrategyState::default() };
            inner.save(&mut saved);
            saved.tensors.push(("local".into(), w.model.params.clone()));
            for (p, f) in st.fs.iter().enumerate() {
                save_outer(&f.outer, &mut saved, &format!("f{p}."));
                if let Some((e, _)) = f.sender.as_ref().filter(|_| ef) {
                    saved.tensors.push((format!("f{p}.residual"), e.residual().to_vec()));
                }
                if s.eager {
                    saved.tensors.push((format!("f{p}.others"), f.others.clone()));
                }
            }
            for (p, d) in &pending {
                saved.tensors.push((format!("f{p}.pending"), d.clone()));
            }
            saved
        })
        .await?;
        t += 1;
    }
    // The run's model is theta_old (after the last step: every fragment just synchronised).
    let theta = st.global(n);
    w.model.params.copy_from_slice(&theta);
    let outer_state: usize = st.fs.iter().map(|f| f.outer.state_len()).sum();
    let codec = sender_copies(s.outer_wire, ef) * n;
    let largest = (0..st.frags.len()).map(|p| st.frags.size(p)).max().unwrap_or(0);
    let in_flight = if s.same_offset { n } else { largest };
    // Eager: others (n), and for the fragment in flight g~, theta~ and OuterOpt_p's copy.
    let eager_bufs = if s.eager { n + largest * (2 + s.outer.state_copies()) } else { 0 };
    Ok(Outcome {
        exchange: None,
        optimizer_steps: inner.steps,
        memory: memory(n, &inner, in_flight, n + outer_state + codec + eager_bufs),
        model: replica_piece(rank, &theta),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_is_alpha_local_plus_one_minus_alpha_outer() {
        // alpha = 0.25: 0.25 * 1 + 0.75 * 3 = 2.5; 0.25 * 4 + 0.75 * (-4) = -2.
        let mut local = [1.0, 4.0];
        mix(&mut local, &[3.0, -4.0], 0.25);
        assert_eq!(local, [2.5, -2.0]);
        // alpha = 1 keeps the local value, alpha = 0 takes the global one (sign of zero too).
        let mut keep = [1.0, 4.0];
        mix(&mut keep, &[3.0, -4.0], 1.0);
        assert_eq!(keep, [1.0, 4.0]);
        let mut take = [1.0, 4.0];
        mix(&mut take, &[-0.0, -4.0], 0.0);
        assert_eq!(take.map(f32::to_bits), [(-0.0f32).to_bits(), (-4.0f32).to_bits()]);
    }
}
