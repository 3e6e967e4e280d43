//! Asynchronous DiLoCo with a parameter server (async-local-sgd.txt,
//! Algorithm 2 with Algorithms 4-5 and Algorithm 3's Delayed Nesterov):
//! the worker side and the server side, written once against `Ctx`.
//!
//! ```text
//! server (Algorithm 2)                              worker w (Algorithm 4's train_worker)
//! theta = theta^(0); send (theta, H) to every w     loop: receive (theta, steps) or stop
//! while t_local < t_max:                                  theta_old = theta
//!     recv_any(deadline = tau_sync + tau_grace)           `steps` inner steps (state kept, App. 10.1)
//!     an update from w arrived:                           send delta = theta_old - theta_w
//!         theta = OuterOpt(theta, delta)   line 17
//!         W_completed.add(w); t_local += steps
//!     deadline passed (or nobody is out):
//!         send (theta, H) to W_completed   line 23
//! ```
//!
//! Status: run by [`run_with_server`] on a topology with a server (the
//! tests); not yet a `--method` (no `[methods.async-diloco]`, CLI, train
//! driver, checkpoints, DyLU or shard sampling wiring: issue 10,
//! milestones 3-5).
//!
//! - `t_max` is `plan.steps` local steps per worker, `plan.steps x workers`
//!   in all, as `--steps` counts a worker's inner steps in sync DiLoCo.
//! - Updates still in flight when `t_max` is reached are applied too (no
//!   update that reached the server is lost), then every worker is stopped.
//! - When every worker has reported, nobody can arrive within the grace
//!   period, so the server hands out the model at once (our choice; the
//!   paper waits on a wall clock). With equal speeds and a grace period
//!   covering everyone each group is a synchronous round, and DN with
//!   N = workers applies Nesterov to the round's mean: sync DiLoCo.

use super::diloco_settings::DilocoSettings;
use super::journal::{Checkpointing, Journal};
use super::local::{memory, Inner};
use super::param_server::Grace;
use super::worker::{MemoryBytes, Outcome, Plan, Worker, WorkerReport};
use crate::comm::Message;
use crate::optim::OuterOpt;
use crate::runtime::{real, sim, Ctx, Recv, RecvAny, Send, Work};
use anyhow::{bail, ensure, Result};
use std::sync::Mutex;

const MODEL: u32 = 1;
const UPDATE: u32 = 2;
const STOP: u32 = 3;

/// The worker side: inner rounds from whatever model the server sends.
pub async fn worker<C: Ctx>(ctx: &mut C, w: &mut Worker, plan: &Plan, j: &mut Journal) -> Result<Outcome> {
    let n = w.model.num_params();
    let Some(server) = ctx.topology().server_rank() else { bail!("async-diloco needs a server participant") };
    let mut inner = Inner::new(plan, n)?;
    loop {
        let m = ctx.run(Recv { from: server }).await;
        if m.tag == STOP {
            break;
        }
        ensure!(m.tag == MODEL && m.values.len() == n, "worker {}: unexpected message {}", ctx.rank(), m.tag);
        let steps = m.scalars[0] as u64;
        let theta_old = m.values;
        w.model.params.copy_from_slice(&theta_old);
        for _ in 0..steps {
            // The schedule follows this worker's own step count.
            inner.step(ctx, w, plan, inner.steps, j).await;
        }
        let mut delta = std::mem::take(&mut w.model.params);
        ctx.compute(Work::Elementwise { name: "diloco pseudo-gradient", elems: n }, || {
            super::diloco::pseudo_gradient(&mut delta, &theta_old)
        })
        .await;
        let msg = Message::new(UPDATE).with_scalars(vec![steps as f64]).with_values(delta, plan.wire);
        ctx.run(Send { to: server, msg }).await;
        w.model.params = theta_old;
    }
    Ok(Outcome { exchange: None, optimizer_steps: inner.steps, memory: memory(n, &inner, 0, 0), model: None })
}

/// The server's options beyond the outer optimizer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerOptions {
    /// Grace period tau_grace in seconds, >= 0.
    pub grace_s: f64,
    /// DyLU (eq. 6): the workers' speeds; `None` runs H steps everywhere.
    pub dylu_speeds: Option<Vec<f64>>,
}

/// The server side (Algorithm 2); returns theta and the outer optimizer's steps.
pub async fn server<C: Ctx>(
    ctx: &mut C,
    theta0: Vec<f32>,
    plan: &Plan,
    s: &DilocoSettings,
    o: &ServerOptions,
) -> Result<(Vec<f32>, u64)> {
    let k = ctx.topology().workers;
    let n = theta0.len();
    let mut theta = theta0;
    let mut outer = OuterOpt::new(s.outer_config(), n);
    let mut grace = Grace::new(o.grace_s);
    let t_max = plan.steps * k as u64;
    let (mut t_local, mut out) = (0u64, 0usize);
    // Algorithm 4 line 5: each worker's local steps (DyLU, eq. 6, or H).
    let steps = match &o.dylu_speeds {
        Some(v) => {
            ensure!(
                v.len() == k,
                "dylu: {} speeds for {k} workers; give one per worker, e.g. speeds = [1, 1, 0.5, 0.25]",
                v.len()
            );
            super::param_server::dylu_steps(v, s.h)
        }
        None => vec![s.h; k],
    };
    let model = |to: usize, theta: &[f32]| {
        Message::new(MODEL).with_scalars(vec![steps[to] as f64]).with_values(theta.to_vec(), plan.wire)
    };
    // Line 9: train(W, theta).
    for to in 0..k {
        ctx.run(Send { to, msg: model(to, &theta) }).await;
        out += 1;
    }
    let mut completed: Vec<usize> = Vec::new();
    while out > 0 {
        match ctx.run(RecvAny { deadline_s: grace.deadline() }).await {
            Some((from, m)) => {
                ensure!(m.tag == UPDATE && m.values.len() == n, "server: unexpected message {} from {from}", m.tag);
                grace.admit(ctx.now());
                // Line 17: the pseudo-gradient applied on arrival.
                ctx.compute(Work::Elementwise { name: "async-diloco outer step", elems: 3 * n }, || {
                    outer.step(&mut theta, &m.values)
                })
                .await;
                t_local += m.scalars[0] as u64;
                completed.push(from);
                out -= 1;
            }
            None => {
                // Lines 22-24: the group gets the current model.
                grace.close();
                if t_local < t_max {
                    for to in completed.drain(..) {
                        ctx.run(Send { to, msg: model(to, &theta) }).await;
                        out += 1;
                    }
                }
            }
        }
        if out == 0 && t_local < t_max {
            grace.close();
            for to in completed.drain(..) {
                ctx.run(Send { to, msg: model(to, &theta) }).await;
                out += 1;
            }
        }
    }
    for to in 0..k {
        ctx.run(Send { to, msg: Message::new(STOP) }).await;
    }
    Ok((theta, outer.steps_taken()))
}

/// Which runtime runs [`run_with_server`].
pub enum Rt {
    /// Virtual time (the spec's topology gets the server).
    Sim(sim::SimSpec),
    /// Threads.
    Real(real::RealSpec),
}

/// Runs async DiLoCo on `workers` plus a server participant; the last
/// report is the server's, whose `params` are the run's model.
pub fn run_with_server(
    rt: Rt,
    workers: Vec<Worker>,
    plan: &Plan,
    s: &DilocoSettings,
    o: &ServerOptions,
) -> Result<Vec<WorkerReport>> {
    ensure!(o.grace_s >= 0.0, "grace must be >= 0 seconds, got {}; e.g. grace = 0.5", o.grace_s);
    let theta0 = workers.first().map(|w| w.model.params.clone()).unwrap_or_default();
    let slots: Vec<Mutex<Option<Worker>>> = workers.into_iter().map(|w| Mutex::new(Some(w))).collect();
    let take = |rank: usize| slots.get(rank).map(|s| s.lock().expect("slot").take().expect("each worker runs once"));
    match rt {
        Rt::Sim(mut spec) => {
            spec.topology.server = true;
            sim::run(spec, |mut ctx| {
                let (w, theta0) = (take(ctx.rank()), theta0.clone());
                async move { participant(&mut ctx, w, theta0, plan, s, o).await }
            })
        }
        Rt::Real(mut spec) => {
            spec.topology.server = true;
            real::run(spec, |mut ctx| {
                let (w, theta0) = (take(ctx.rank()), theta0.clone());
                async move { participant(&mut ctx, w, theta0, plan, s, o).await }
            })
        }
    }
}

async fn participant<C: Ctx>(
    ctx: &mut C,
    w: Option<Worker>,
    theta0: Vec<f32>,
    plan: &Plan,
    s: &DilocoSettings,
    o: &ServerOptions,
) -> Result<WorkerReport> {
    let mut j = Journal::new(ctx.rank(), None, Checkpointing::default(), None);
    let (params, steps, mem) = match w {
        Some(mut w) => {
            let o = worker(ctx, &mut w, plan, &mut j).await?;
            (w.model.params.clone(), o.optimizer_steps, o.memory)
        }
        None => {
            let n = theta0.len();
            let (theta, steps) = server(ctx, theta0, plan, s, o).await?;
            (theta, steps, MemoryBytes { params: 4 * n, ..MemoryBytes::default() })
        }
    };
    Ok(WorkerReport {
        rank: ctx.rank(),
        points: j.into_points(),
        optimizer_steps: steps,
        times: ctx.times(),
        params,
        model: None,
        events: ctx.take_events(),
        memory: mem,
        exchange: None,
    })
}
