//! The server side of asynchronous DiLoCo (Algorithm 2, Algorithm 5's
//! grace period, DyLU's eq. 6 when it hands out rounds): the pseudo-code
//! and the choices it makes are in `async_diloco.rs`'s module docs, beside
//! the worker side it talks to.

use super::async_diloco::{decoded, HELLO, MODEL, SAVE, SAVE_STOP, STOP, UPDATE};
use super::async_settings::AsyncDilocoSettings;
use super::membership::{Roster, LEFT};
use super::param_server::{arrival_weight, dylu_steps, Grace, Speeds};
use super::server_state::Progress;
use super::shards::{ShardRound, Shards};
use crate::comm::{Message, WireDtype};
use crate::optim::OuterOpt;
use crate::runtime::{Ctx, RecvAny, Send, SendDelivered, Work};
use crate::strategy::journal::Journal;
use crate::strategy::outcome::{MemoryBytes, Outcome};
use crate::strategy::worker::{ModelPiece, Plan};
use anyhow::{bail, ensure, Result};

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

/// The inner steps of the rounds handed to a group of workers together:
/// what each `wanted`, or, when the budget `left` is smaller than their sum,
/// a share of it in proportion to what each wanted, rounded up in turn, so
/// that the shares add up to `left` exactly (module docs).
pub(super) fn cut_to_budget(wanted: &[u64], mut left: u64) -> Vec<u64> {
    let mut rest: u64 = wanted.iter().sum();
    let mut steps = Vec::with_capacity(wanted.len());
    for &w in wanted {
        // left < rest here makes the share at most w, and at most left.
        let share = if left >= rest { w } else { (left * w).div_ceil(rest) };
        steps.push(share);
        (rest, left) = (rest - w, left - share);
    }
    steps
}

/// Algorithm 4 lines 4-6 for each worker of `group`, with its `steps`: the
/// model, the shard drawn by eq. 2 and where the round starts in that
/// shard's schedule. Returns the workers given no steps (the budget is
/// spoken for): they wait, and a round lost to a crash gives its steps
/// back (membership.rs). Each model is in its worker's hands before the
/// next leaves (`SendDelivered`): over MPI the first worker of a group
/// would otherwise share the link with the rest and wait as long as the
/// last (planner-accuracy finding 12b).
#[allow(clippy::too_many_arguments)]
async fn send_rounds<C: Ctx>(
    ctx: &mut C,
    group: &[usize],
    steps: Vec<u64>,
    p: &mut Progress,
    roster: &mut Roster,
    theta: &[f32],
    wire: WireDtype,
) -> Vec<usize> {
    let mut waiting = Vec::new();
    for (&to, steps) in group.iter().zip(steps) {
        if steps == 0 {
            waiting.push(to);
            continue;
        }
        let order = p.shards.order(to, steps);
        roster.handed(to, steps);
        let msg = Message::new(MODEL).with_scalars(order.to_scalars()).with_values(theta.to_vec(), wire);
        ctx.run(SendDelivered { to, msg }).await;
    }
    waiting
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
    let mut outer = OuterOpt::new(s.outer_config(k), n);
    // Line 17's weight of each arriving pseudo-gradient.
    let a = arrival_weight(s.weight, s.outer, k);
    let mut grace = Grace::new(s.grace_s(None));
    let t_max = plan.end * k as u64;
    // The whole run's inner steps (`t_max` of a run not stopped early): rounds are cut to it.
    let budget = plan.steps * k as u64;
    // Who is up, and the models out (membership.rs).
    let mut roster = Roster::new(k);
    let mut p = match j.take_resumed() {
        Some(st) => Progress::restore(&st, &mut theta, &mut outer)?,
        None => {
            // Each worker's speed v(w): declared in its hello, then measured (module docs).
            let (mut speeds, mut tokens) = (Speeds::new(k), 0);
            let mut greeted = vec![false; k];
            while greeted.iter().any(|g| !g) {
                let m = ctx.run(RecvAny { deadline_s: None }).await;
                let Some((from, m)) = m else { bail!("server: a worker never said hello") };
                ensure!(from < k, "server: a message from participant {from}, not a worker");
                match m.tag {
                    // A worker whose crash came before its first model (it said hello first: FIFO).
                    LEFT => roster.left(from),
                    HELLO => {
                        if greeted[from] {
                            roster.joined(from); // ... and back already.
                        }
                        greeted[from] = true;
                        speeds.declare(from, m.scalars[0]);
                        tokens = m.scalars[1] as usize;
                    }
                    tag => bail!("server: expected a hello, got message {tag} from {from}"),
                }
            }
            let shards = Shards::new(tokens, s.shard_count(k), k, &plan.schedule, plan.seed, s.fixed_shards)?;
            Progress { t_local: 0, updates: vec![0; k], speeds, shards }
        }
    };
    // Algorithm 4 line 5: the local steps each worker of a group handed
    // rounds together wants (DyLU, eq. 6, over the live workers, or H), cut
    // to the budget that is left (module docs).
    let steps_for = |p: &Progress, roster: &Roster, group: &[usize]| {
        let wanted: Vec<u64> = if s.dylu {
            let dylu = dylu_steps(&roster.live_speeds(&p.speeds.v()), s.h);
            group.iter().map(|&w| dylu[w]).collect()
        } else {
            vec![s.h; group.len()]
        };
        // Past the stop (`--stop-at`), none: the run drains, as at a checkpoint.
        let left = if p.t_local < t_max { budget.saturating_sub(p.t_local + roster.steps_out()) } else { 0 };
        cut_to_budget(&wanted, left)
    };
    // Line 9: train(W, theta), to the workers that are up.
    let up: Vec<usize> = (0..k).filter(|&w| roster.up(w)).collect();
    let steps = steps_for(&p, &roster, &up);
    // Workers that report (and those the budget had no steps for), waiting for a model.
    let mut completed = send_rounds(ctx, &up, steps, &mut p, &mut roster, &theta, plan.wire).await;
    // A checkpoint boundary being drained to (module docs).
    let mut saving: Option<u64> = None;
    // With nothing out, the run still waits for a worker the fault plan brings back.
    while roster.out() > 0 || (p.t_local < t_max && roster.coming_back(&plan.faults)) {
        let hand_out = match ctx.run(RecvAny { deadline_s: grace.deadline() }).await {
            // A worker's failure notice: its model out is lost, it leaves its group.
            Some((from, m)) if m.tag == LEFT => {
                roster.left(from);
                completed.retain(|&w| w != from);
                roster.out() == 0
            }
            // A worker back: it gets the current model at once.
            Some((from, m)) if m.tag == HELLO => {
                roster.joined(from);
                p.speeds.declare(from, m.scalars[0]);
                let steps = steps_for(&p, &roster, &[from]);
                completed.extend(send_rounds(ctx, &[from], steps, &mut p, &mut roster, &theta, plan.wire).await);
                false
            }
            Some((from, m)) => {
                ensure!(m.tag == UPDATE, "server: unexpected message {} from {from}", m.tag);
                p.speeds.measure(from, m.scalars[2]);
                // Algorithm 5 line 8, Algorithm 2 line 16 (a group opening takes the grace period now due).
                grace.set_next(s.grace_s(p.speeds.slowest_step_s(|w| roster.up(w))));
                grace.admit(ctx.now());
                // Line 17: sync(theta, w.update) = OuterOpt(theta, a delta), on arrival.
                let mut delta = match s.outer_wire {
                    None => {
                        ensure!(m.values.len() == n, "server: an update of {} values for {n}", m.values.len());
                        m.values
                    }
                    Some(wire) => {
                        let work = Work::Elementwise { name: "diloco decode", elems: 2 * n };
                        ctx.compute(work, || decoded(wire, &m.packed, n)).await?
                    }
                };
                ctx.compute(Work::Elementwise { name: "async-diloco outer step", elems: 3 * n }, || {
                    if a != 1.0 {
                        delta.iter_mut().for_each(|x| *x *= a);
                    }
                    outer.step(&mut theta, &delta)
                })
                .await;
                p.t_local += m.scalars[0] as u64;
                p.updates[from] += 1;
                if saving.is_none() && p.t_local < t_max {
                    saving = j.boundary_reached(p.t_local / k as u64);
                }
                j.step(ctx, outer.steps_taken(), m.scalars[1] as f32, 0)?;
                roster.reported(from);
                completed.push(from);
                roster.out() == 0
            }
            // Lines 22-24: the group gets the current model.
            None => true,
        };
        if hand_out {
            grace.close();
            if let (Some(b), 0) = (saving, roster.out()) {
                // Everyone is between rounds (a fault plan runs without checkpoints:
                // parallel::fault_plan): the checkpoint, then rounds for all in worker order.
                // The server alone decides a stop (stop.rs): the workers hear it here.
                let tag = if j.stopping(b, plan.end) { SAVE_STOP } else { SAVE };
                for to in 0..k {
                    ctx.run(Send { to, msg: Message::new(tag).with_scalars(vec![b as f64]) }).await;
                }
                j.round_end(ctx, None, b, plan.end, || p.save(&theta, &outer)).await?;
                completed.sort_unstable();
                saving = None;
            }
            if saving.is_none() {
                let group = std::mem::take(&mut completed);
                let steps = steps_for(&p, &roster, &group);
                completed = send_rounds(ctx, &group, steps, &mut p, &mut roster, &theta, plan.wire).await;
            }
        }
    }
    // STOP carries the round as SAVE does: the same bytes, so a stopped run's clocks are a checkpointed one's.
    for to in 0..k {
        ctx.run(Send { to, msg: Message::new(STOP).with_scalars(vec![plan.end as f64]) }).await;
    }
    j.round_end(ctx, None, plan.end, plan.end, || p.save(&theta, &outer)).await?;
    let memory = MemoryBytes { params: 4 * n, outer: 4 * outer.state_len(), ..MemoryBytes::default() };
    let outcome = Outcome {
        exchange: None,
        optimizer_steps: outer.steps_taken(),
        memory,
        model: Some(ModelPiece { offset: 0, values: theta }),
    };
    Ok(Served { outcome, updates: p.updates, shard_rounds: p.shards.rounds })
}
