//! Asynchronous DiLoCo with a parameter server (async-local-sgd.txt,
//! Algorithm 2 with Algorithms 4-5 and Algorithm 3's Delayed Nesterov):
//! the worker side and the server side, written once against `Ctx`. The
//! server is the topology's last participant (`Method::needs_server`).
//!
//! ```text
//! server (Algorithm 2)                              worker w (Algorithm 4's train_worker)
//! theta = theta^(0); send (theta, round_w) to all   send hello (its speed v(w), tokens)
//! while t_local < t_max:                            loop: receive (theta, round) or stop
//!     recv_any(deadline = tau_sync + tau_grace)           theta_old = theta; data = round's shard
//!     an update from w arrived:                           `steps` inner steps at the shard's lr (App. 10.1)
//!         theta = OuterOpt(theta, delta)   line 17        send delta = theta_old - theta_w
//!         W_completed.add(w); t_local += steps
//!     deadline passed (or nobody is out):
//!         send (theta, round_w) to W_completed   line 23
//! ```
//!
//! `round_w` (Algorithm 4 lines 4-6, `shards.rs`): the shard drawn by eq. 2,
//! the steps (DyLU or H), and where the round starts in the shard's own
//! learning-rate schedule.
//!
//! - `t_max` is `plan.end` local steps per worker, `plan.end x workers` in
//!   all, as `--steps` counts a worker's inner steps in sync DiLoCo.
//! - Updates still in flight when `t_max` is reached are applied too (no
//!   update that reached the server is lost), then every worker is stopped.
//! - When every worker has reported, nobody can arrive within the grace
//!   period, so the server hands out the model at once (our choice; the
//!   paper waits on a wall clock). With equal speeds and a grace period
//!   covering everyone each group is a synchronous round, and DN with
//!   N = workers applies Nesterov to the round's mean: sync DiLoCo.
//! - DyLU (eq. 6) needs each worker's speed v(w). The first round uses the
//!   speed factor each worker declares in its hello (`ctx.speed()`: the
//!   profile's / `--speeds`); every later round uses the worker's measured
//!   seconds per inner step, sent with each update (v = 1 / that). In sim
//!   the measurement is the profile's speed again (virtual time); in real
//!   runs it follows what the machine really does.
//! - The server's curve has one point per applied update: step = updates
//!   applied so far, loss = the sender's mean inner loss over its round.
//! - Checkpoints: each participant saves its part at the end only (the
//!   server: theta, the outer state, counters; workers: inner state).
//!   Intermediate checkpoints and resuming are not built yet (issue 10
//!   milestone 4): `lowcomm train --resume` refuses this method.

use super::async_diloco_settings::AsyncDilocoSettings;
use super::diloco::{pseudo_gradient, save_outer};
use super::journal::{Journal, StrategyState};
use super::local::{memory, Inner};
use super::param_server::{dylu_steps, Grace};
use super::shards::{RoundOrder, ShardRound, Shards};
use super::worker::{MemoryBytes, ModelPiece, Outcome, Plan, Worker};
use crate::comm::Message;
use crate::optim::OuterOpt;
use crate::runtime::{Ctx, Recv, RecvAny, Send, Work};
use anyhow::{bail, ensure, Result};

const MODEL: u32 = 1;
const UPDATE: u32 = 2;
const STOP: u32 = 3;
const HELLO: u32 = 4;

/// The worker side: inner rounds from whatever model the server sends.
pub async fn worker<C: Ctx>(ctx: &mut C, w: &mut Worker, plan: &Plan, j: &mut Journal) -> Result<Outcome> {
    let n = w.model.num_params();
    let Some(server) = ctx.topology().server_rank() else { bail!("async-diloco needs a server participant") };
    let mut inner = Inner::new(plan, n)?;
    // Scalars travel as f64, exactly. The stream's length sizes the server's data shards.
    let hello = Message::new(HELLO).with_scalars(vec![ctx.speed(), w.data_tokens() as f64]);
    ctx.run(Send { to: server, msg: hello }).await;
    loop {
        let m = ctx.run(Recv { from: server }).await;
        if m.tag == STOP {
            break;
        }
        ensure!(m.tag == MODEL && m.values.len() == n, "worker {}: unexpected message {}", ctx.rank(), m.tag);
        // Algorithm 4 lines 4-6: the shard, the steps, the shard's schedule.
        let order = RoundOrder::from_scalars(&m.scalars)?;
        w.use_shard(order.shard, order.shards)?;
        let steps = order.steps;
        let theta_old = m.values;
        w.model.params.copy_from_slice(&theta_old);
        let (start, first) = (ctx.now(), j.points().len());
        for k in 0..steps {
            // The rate follows the shard's own step count (shards.rs), not this worker's.
            inner.step_at(ctx, w, plan, inner.steps, order.lr(&plan.schedule, k), j).await;
        }
        let per_step = (ctx.now() - start) / steps.max(1) as f64;
        let round = &j.points()[first..];
        let loss = round.iter().map(|p| p.loss as f64).sum::<f64>() / round.len().max(1) as f64;
        let mut delta = std::mem::take(&mut w.model.params);
        ctx.compute(Work::Elementwise { name: "diloco pseudo-gradient", elems: n }, || {
            pseudo_gradient(&mut delta, &theta_old)
        })
        .await;
        let msg = Message::new(UPDATE).with_scalars(vec![steps as f64, loss, per_step]).with_values(delta, plan.wire);
        ctx.run(Send { to: server, msg }).await;
        w.model.params = theta_old;
    }
    j.round_end(ctx, Some(w), plan.end, plan.end, || {
        let mut st = StrategyState::default();
        inner.save(&mut st);
        st
    })
    .await?;
    // theta_old, the model this round started from, is held beside the replica.
    Ok(Outcome { exchange: None, optimizer_steps: inner.steps, memory: memory(n, &inner, 0, n), model: None })
}

/// What the server ends with: the run's model, and the updates it applied
/// from each worker.
pub struct Served {
    /// The server's outcome (its model piece is the run's whole model).
    pub outcome: Outcome,
    /// Updates applied, per worker.
    pub updates: Vec<u64>,
    /// Every round handed out: worker, shard, where in the shard's schedule.
    pub shard_rounds: Vec<ShardRound>,
}

/// The server side (Algorithm 2), from the initial model `theta0`.
pub async fn server<C: Ctx>(
    ctx: &mut C,
    theta0: Vec<f32>,
    plan: &Plan,
    s: &AsyncDilocoSettings,
    j: &mut Journal,
) -> Result<Served> {
    let k = ctx.topology().workers;
    let n = theta0.len();
    let mut theta = theta0;
    let mut outer = OuterOpt::new(s.diloco().outer_config(), n);
    let mut grace = Grace::new(s.grace);
    let t_max = plan.end * k as u64;
    let (mut t_local, mut out) = (0u64, 0usize);
    let mut updates = vec![0u64; k];
    // Each worker's speed v(w): declared in its hello, then measured (module docs).
    let mut speed = vec![1.0f64; k];
    let mut tokens = 0;
    for _ in 0..k {
        let m = ctx.run(RecvAny { deadline_s: None }).await;
        let Some((from, m)) = m else { bail!("server: a worker never said hello") };
        ensure!(m.tag == HELLO && from < k, "server: expected a hello, got message {} from {from}", m.tag);
        speed[from] = m.scalars[0];
        tokens = m.scalars[1] as usize;
    }
    let mut shards = Shards::new(tokens, s.shard_count(k), k, &plan.schedule, plan.seed, s.fixed_shards)?;
    // Algorithm 4: each worker's shard (eq. 2) and local steps (line 5: DyLU, eq. 6, or H).
    let steps_of = |speed: &[f64], to: usize| if s.dylu { dylu_steps(speed, s.h)[to] } else { s.h };
    let mut model = |to: usize, speed: &[f64], theta: &[f32]| {
        let m = Message::new(MODEL).with_scalars(shards.order(to, steps_of(speed, to)).to_scalars());
        m.with_values(theta.to_vec(), plan.wire)
    };
    // Line 9: train(W, theta).
    for to in 0..k {
        ctx.run(Send { to, msg: model(to, &speed, &theta) }).await;
        out += 1;
    }
    let mut completed: Vec<usize> = Vec::new();
    while out > 0 {
        let hand_out = match ctx.run(RecvAny { deadline_s: grace.deadline() }).await {
            Some((from, m)) => {
                ensure!(m.tag == UPDATE && m.values.len() == n, "server: unexpected message {} from {from}", m.tag);
                grace.admit(ctx.now());
                // Line 17: the pseudo-gradient applied on arrival.
                ctx.compute(Work::Elementwise { name: "async-diloco outer step", elems: 3 * n }, || {
                    outer.step(&mut theta, &m.values)
                })
                .await;
                t_local += m.scalars[0] as u64;
                if m.scalars[2] > 0.0 {
                    speed[from] = 1.0 / m.scalars[2];
                }
                updates[from] += 1;
                j.step(ctx, outer.steps_taken(), m.scalars[1] as f32, 0);
                completed.push(from);
                out -= 1;
                out == 0
            }
            // Lines 22-24: the group gets the current model.
            None => true,
        };
        if hand_out {
            grace.close();
            if t_local < t_max {
                for to in completed.drain(..) {
                    ctx.run(Send { to, msg: model(to, &speed, &theta) }).await;
                    out += 1;
                }
            }
        }
    }
    for to in 0..k {
        ctx.run(Send { to, msg: Message::new(STOP) }).await;
    }
    j.round_end(ctx, None, plan.end, plan.end, || {
        let mut st =
            StrategyState { model: Some(ModelPiece { offset: 0, values: theta.clone() }), ..Default::default() };
        save_outer(&outer, &mut st);
        if let Some(o) = st.scalars.as_object_mut() {
            o.insert("t_local".into(), serde_json::json!(t_local));
            o.insert("updates".into(), serde_json::json!(updates));
        }
        st.optimizer_steps = outer.steps_taken();
        st
    })
    .await?;
    let memory = MemoryBytes { params: 4 * n, outer: 4 * outer.state_len(), ..MemoryBytes::default() };
    let outcome = Outcome {
        exchange: None,
        optimizer_steps: outer.steps_taken(),
        memory,
        model: Some(ModelPiece { offset: 0, values: theta }),
    };
    Ok(Served { outcome, updates, shard_rounds: shards.rounds })
}
