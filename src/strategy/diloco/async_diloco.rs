//! Asynchronous DiLoCo with a parameter server (async-local-sgd.txt,
//! Algorithm 2 with Algorithms 4-5 and Algorithm 3's Delayed Nesterov):
//! the worker side here and the server side in `async_server.rs`, written
//! once against `Ctx`. The server is the topology's last participant
//! (`Method::needs_server`).
//!
//! ```text
//! server (Algorithm 2)                              worker w (Algorithm 4's train_worker)
//! theta = theta^(0); send (theta, round_w) to all   send hello (its speed v(w), tokens)
//! while t_local < t_max:                            loop: receive (theta, round) or stop
//!     recv_any(deadline = tau_sync + tau_grace)           theta_old = theta; data = round's shard
//!     an update from w arrived:                           `steps` inner steps at the shard's lr (App. 10.1)
//!         theta = OuterOpt(theta, a delta) line 17        send delta = theta_old - theta_w
//!         W_completed.add(w); t_local += steps
//!     deadline passed (or nobody is out):
//!         send (theta, round_w) to W_completed   line 23
//! ```
//!
//! `round_w` (Algorithm 4 lines 4-6, `shards.rs`): the shard drawn by eq. 2,
//! the steps (DyLU or H), and where the round starts in the shard's own
//! learning-rate schedule. `a` (`weight`, `param_server::arrival_weight`):
//! 1/k for sgd, sgd-momentum and nesterov, so that k arrivals move theta as
//! sync DiLoCo's one step on their mean (Algorithm 1 line 15) instead of k
//! times as far (eq. 5), and 1 for dn, which divides by N itself (Algorithm 3).
//!
//! - `t_max` is `plan.end` local steps per worker, `plan.end x workers` in
//!   all, as `--steps` counts a worker's inner steps in sync DiLoCo; no
//!   round is handed out once `t_local` reaches it.
//! - No round takes the run past its budget, `plan.steps x workers` (our
//!   choice). Algorithm 2 hands out whole rounds while `t_local < t_max` and
//!   so ends past the budget by the rounds in flight: up to one per worker,
//!   and k whole rounds when `--steps` is below H. `compare` needs every
//!   method on the same tokens. Workers handed rounds together get the
//!   steps each wants (H or DyLU's) or, when less is left, shares of what
//!   is left in proportion to those, as sync DiLoCo cuts its last round. A
//!   worker given no steps waits; a round lost to a crash gives its steps
//!   back. A run stopped early (`--stop-at`) cuts as the whole run would,
//!   so resuming it is bit-identical. Every update that reaches the server
//!   is applied.
//! - When every worker has reported, nobody can arrive within the grace
//!   period, so the server hands out the model at once (our choice; the
//!   paper waits on a wall clock). With equal speeds and a grace period
//!   covering everyone each group is a synchronous round, and DN with
//!   N = workers applies Nesterov to the round's mean: sync DiLoCo.
//! - DyLU (eq. 6) needs each worker's speed v(w). The first round uses the
//!   speed factor each worker declares in its hello (`ctx.speed()`: the
//!   profile's / `--speeds`); every later round uses the worker's measured
//!   seconds per inner step, sent with each update (v = 1 / that), and a
//!   worker not yet measured has its factor converted to the same unit
//!   (`param_server::Speeds`). In sim the measurement is the profile's
//!   speed again (virtual time); in real runs it follows the machine.
//! - The grace period (`grace`, default "auto") is fixed when a group
//!   opens: with DyLU, one inner step of the slowest live worker as then
//!   measured, so the arrivals eq. 6 means to be together form one group.
//! - The server's curve has one point per applied update: step = updates
//!   applied so far, loss = the sender's mean inner loss over its round.
//! - Checkpoints stop the world: workers are mid-round asynchronously, and
//!   a round in flight is state in no one's part. When the inner steps
//!   applied reach a checkpoint boundary (`t_local / workers` crosses a
//!   multiple of `--checkpoint-every`: the same unit as `--steps`), the
//!   server hands out no more rounds, applies every update still out (as
//!   at the end of the run), then, with every worker between rounds and
//!   nothing in flight, tells all to save (SAVE, with the boundary; SAVE_STOP
//!   when the run stops there on request, which the server decides), saves
//!   its own part (`server_state.rs`) and hands every worker a round, in
//!   worker order. A run stopped there (`--stop-at`) drains the same way
//!   and a resumed one starts by that hand-out, so 2N rounds == N + save +
//!   resume + N, bit for bit in sim. The cost: a checkpoint waits for the
//!   slowest worker's round (the paper does not checkpoint; we chose
//!   consistency over that wait). Workers save their inner state (kept
//!   across rounds, App. 10.1) with the sampler back on their own shard.
//! - A compressed pseudo-gradient (`outer_wire`, comm/codec, as `diloco`'s):
//!   the worker encodes delta with its error-feedback residual and sends
//!   the packed bytes (the message's size is what travels); the server
//!   decodes them to f32 and steps in f32 (line 17 unchanged). `"f32"`
//!   through this path is the dense message bit for bit. The residual is
//!   the worker's state (in its checkpoint part); a worker that crashes
//!   comes back with none, as with fresh inner state.
//! - Workers that leave and join (`--faults`, membership.rs): a worker
//!   whose crash time passes drops its round and sends a LEFT notice; the
//!   server stops waiting for it, and answers its hello at its join time
//!   with the current model (the worker's inner state fresh). A fault plan
//!   runs without intermediate checkpoints: a checkpoint needs every
//!   worker up and between rounds (train refuses the two together). A
//!   dropped round's steps keep their losses in the worker's curve but
//!   count no micro-batches (no update applied them, so they are not
//!   tokens trained on): while a crash is still ahead of a worker, its
//!   journal holds each round's points until the round is sent or lost.

use super::async_settings::AsyncDilocoSettings;
use super::diloco::pseudo_gradient;
use super::membership::Lifeline;
use super::shards::RoundOrder;
use crate::comm::codec::{sender_copies, ErrorFeedback, OuterWire};
use crate::comm::Message;
use crate::runtime::{Ctx, RecvAny, Send, Work};
use crate::strategy::inner::{memory, Inner};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::Outcome;
use crate::strategy::worker::{Plan, Worker};
use anyhow::{bail, ensure, Result};

pub(super) const MODEL: u32 = 1;
pub(super) const UPDATE: u32 = 2;
pub(super) const STOP: u32 = 3;
pub(super) const HELLO: u32 = 4;
// 5 is membership.rs's LEFT.
pub(super) const SAVE: u32 = 6;
/// SAVE, then stop (Ctrl-C: the server decided it, stop.rs); the same bytes as SAVE.
pub(super) const SAVE_STOP: u32 = 7;

/// The worker's checkpoint tensor holding its error-feedback residual.
const RESIDUAL: &str = "outer_wire.residual";

/// The worker's compressed sender (`outer_wire` set), fresh.
pub(crate) fn sender(s: &AsyncDilocoSettings, n: usize) -> Option<ErrorFeedback> {
    s.outer_wire.map(|wire| ErrorFeedback::new(wire, s.diloco().feedback(), n))
}

/// The server's side of [`sender`]: a packed pseudo-gradient of `n`
/// values, decoded to f32.
pub(crate) fn decoded(wire: OuterWire, packed: &[u8], n: usize) -> Result<Vec<f32>> {
    let want = wire.wire_bytes(n);
    ensure!(packed.len() == want, "server: an {wire} update of {} bytes, {want} expected", packed.len());
    let mut delta = vec![0.0; n];
    wire.decode(packed, &mut delta);
    Ok(delta)
}

/// The worker side: inner rounds from whatever model the server sends.
pub async fn worker<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    s: &AsyncDilocoSettings,
    j: &mut Journal,
) -> Result<Outcome> {
    let n = w.model.num_params();
    // A compressed outer_wire: the encoder with its residual (module docs).
    let mut ef = sender(s, n);
    let Some(server) = ctx.topology().server_rank() else { bail!("async-diloco needs a server participant") };
    let mut inner = Inner::new(plan, n)?;
    // The fault plan's side of this worker (membership.rs): when it crashes and joins.
    let mut life = Lifeline::new(&plan.faults, ctx.rank());
    // Scalars travel as f64, exactly. The stream's length sizes the server's data shards.
    let tokens = w.data_tokens() as f64;
    let hello = |speed: f64| Message::new(HELLO).with_scalars(vec![speed, tokens]);
    match j.take_resumed() {
        // Resumed between rounds: the server knows this worker already.
        Some(st) => {
            inner.restore(&st)?;
            if let Some(e) = ef.as_mut().filter(|_| s.error_feedback) {
                e.restore(st.tensor(RESIDUAL)?);
            }
        }
        None => ctx.run(Send { to: server, msg: hello(ctx.speed()) }).await,
    }
    let save = |inner: &Inner, ef: &Option<ErrorFeedback>| {
        let mut st = StrategyState::default();
        inner.save(&mut st);
        if let Some(e) = ef.as_ref().filter(|_| s.error_feedback) {
            st.tensors.push((RESIDUAL.into(), e.residual().to_vec()));
        }
        st
    };
    loop {
        // Waiting for a model ends at this worker's crash, if one is due.
        if let Some((_, m)) = ctx.run(RecvAny { deadline_s: life.next_crash() }).await {
            if m.tag == STOP {
                break;
            }
            if m.tag == SAVE || m.tag == SAVE_STOP {
                if m.tag == SAVE_STOP {
                    j.stop_at(m.scalars[0] as u64);
                }
                w.use_own_shard()?;
                j.round_end(ctx, Some(w), m.scalars[0] as u64, plan.end, || save(&inner, &ef)).await?;
                continue;
            }
            ensure!(m.tag == MODEL && m.values.len() == n, "worker {}: unexpected message {}", ctx.rank(), m.tag);
            // Algorithm 4 lines 4-6: the shard, the steps, the shard's schedule.
            let order = RoundOrder::from_scalars(&m.scalars)?;
            w.use_shard(order.shard, order.shards)?;
            let steps = order.steps;
            let theta_old = m.values;
            w.model.params.copy_from_slice(&theta_old);
            let (start, first) = (ctx.now(), j.points().len());
            // While a crash is still ahead, this round may be lost: its steps
            // count as applied only once its update is sent.
            if life.next_crash().is_some() {
                j.hold();
            }
            // A crash stops the round between inner steps; its delta is never sent.
            // The rate follows the shard's own step count (shards.rs), not this worker's.
            let (from, lr) = (inner.steps, |k: u64| order.lr(&plan.schedule, k));
            let crashed = |ctx: &C| life.crashed(ctx.now());
            let lost = inner.round_at(ctx, w, plan, from..from + steps, lr, crashed, j).await?;
            if !(lost || life.crashed(ctx.now())) {
                let per_step = (ctx.now() - start) / steps.max(1) as f64;
                let round = &j.points()[first..];
                let loss = round.iter().map(|p| p.loss as f64).sum::<f64>() / round.len().max(1) as f64;
                let mut delta = std::mem::take(&mut w.model.params);
                ctx.compute(Work::Elementwise { name: "diloco pseudo-gradient", elems: n }, || {
                    pseudo_gradient(&mut delta, &theta_old)
                })
                .await;
                let msg = Message::new(UPDATE).with_scalars(vec![steps as f64, loss, per_step]);
                let msg = match ef.as_mut() {
                    None => msg.with_values(delta, plan.wire),
                    Some(e) => {
                        let work = Work::Elementwise { name: "diloco encode", elems: 2 * n };
                        let packed = ctx.compute(work, || e.encode(&delta)).await;
                        msg.with_packed(packed)
                    }
                };
                ctx.run(Send { to: server, msg }).await;
                j.sent_update();
                j.settle(true);
                w.model.params = theta_old;
                continue;
            }
            j.settle(false);
        }
        // Down until the plan's join (or the run's end); back with fresh
        // inner state, the step counter continuing (membership.rs).
        if !life.down(ctx, server, STOP, inner.steps, j).await {
            break;
        }
        inner = Inner { steps: inner.steps, ..Inner::new(plan, n)? };
        ef = sender(s, n);
        ctx.run(Send { to: server, msg: hello(ctx.speed()) }).await;
    }
    w.use_own_shard()?;
    j.round_end(ctx, Some(w), plan.end, plan.end, || save(&inner, &ef)).await?;
    // theta_old, the model this round started from, is held beside the replica;
    // a compressed wire adds the staged message and the residual (no decode
    // buffer: the server decodes, into the buffer a dense update arrives in).
    let codec = sender_copies(s.outer_wire, s.error_feedback).saturating_sub(1);
    Ok(Outcome {
        exchange: None,
        optimizer_steps: inner.steps,
        memory: memory(n, &inner, 0, n + codec * n),
        model: None,
    })
}
