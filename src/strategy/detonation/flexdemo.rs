//! FlexDeMo (DeToNATION paper, "FlexDeMo"; shared/notes/demo.md) and DeMo,
//! one worker's loop. FlexDeMo is hybrid sharding: inside a node the
//! gradients are reduce-scattered (node mean) so each worker owns one
//! shard, cut at DeMo's chunk rows (shard.rs); steps 1-9 run on the shard;
//! the replicator exchanges only with the workers holding the same shard on
//! other nodes (`Group::Replicas`); the node all-gathers the parameters
//! before the next forward. DeMo is the same loop without sharding,
//! replicating over the world.
//!
//! ```text
//! for t in 0..T:
//!     g      = (1/K) sum_k grad f(theta; xi_k)                     on the whole replica
//!     g_s    = reduce-scatter_mean(g) over the node               FlexDeMo (skipped for a node of one)
//!     ex     = fold(lr, g_s)                                      steps 2-5, replicator
//!     Q      = unfold(exchange(ex) over the replication group)    steps 6-7, ONE task
//!     theta_s = step(theta_s, Q)                                  steps 1, 8, 9 (step.rs)
//!     theta  = all-gather(theta_s) over the node                  FlexDeMo
//! ```
//! With one node the replication group is one worker (Q = lr g, sent
//! whole): sharded SGD. With one worker per node it is DeMo.
//!
//! `overlap`: step t's exchange runs while step t+1's micro-batches are
//! computed and is applied at step t+1 (one step stale: theta(t+1) =
//! step(theta(t), Q(t-1)); step 0 applies nothing, the last exchange is
//! never applied). The all-gather of step t runs before the exchange is
//! started: the communication stream is FIFO, and the next forward needs
//! the parameters first. The reference waits on every exchange at once.

use super::adamw::DecoupledAdamW;
use super::replicator::Exchange;
use super::shard;
use super::step::{DemoStep, Inner};
use crate::comm::ReduceOp;
use crate::optim::{scale_to_norm, sum_of_squares};
use crate::runtime::{AllGather, AllReduce, Ctx, Group, ReduceScatter, Work};
use crate::strategy::detonation::settings::{DemoSettings, InnerKind, ReplicatorKind};
use crate::strategy::journal::{Journal, StrategyState};
use crate::strategy::outcome::{MemoryBytes, Outcome};
use crate::strategy::worker::{accumulate, ModelPiece, Plan, Worker};
use anyhow::Result;

/// An exchange started, or one that needed no communication.
enum Flight<H> {
    Started(H),
    Ready(Exchange),
}

/// Run DeMo (`flex = false`) or FlexDeMo (`flex = true`) on one worker.
pub async fn run<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    s: &DemoSettings,
    flex: bool,
    j: &mut Journal,
) -> Result<Outcome> {
    let (topo, me) = (ctx.topology(), ctx.rank());
    let n = w.model.num_params();
    // The sharding group (my node, FlexDeMo only) and the replication group.
    let (node, repl) = if flex { (topo.members(&Group::Node, me), Group::Replicas) } else { (vec![me], Group::World) };
    let k = node.len();
    let at = node.iter().position(|&r| r == me).expect("a member of its node");
    let shards = if k > 1 { shard::cut(&w.model.layout, s.chunk, k)? } else { std::iter::once(0..n).collect() };
    let mine = shards[at].clone();
    let (lo, len) = (mine.start, mine.len());
    let m = shards.iter().map(|r| r.len()).max().unwrap_or(0);
    let pieces = shard::pieces(&w.model.layout, s.chunk, &mine);
    let members = topo.members(&repl, me).len();
    let mut rep = super::build(s, &pieces, len, repl, members, plan.wire)?;
    // diloco averages no parameters: the nodes' replicas drift apart, and a
    // worker resumes from its own node's replica, not from node 0's model.
    let drifts = s.replicator == ReplicatorKind::Diloco && members > 1 && s.diloco_every() > 1;
    let inner = match s.inner {
        InnerKind::Sgd => Inner::Sgd,
        InnerKind::DecoupledAdamw => Inner::AdamW(DecoupledAdamW::new(&plan.optimizer, len)),
    };
    let mut step =
        DemoStep { weight_decay: s.weight_decay, decay: plan.decay.restrict(lo, lo + len), sign: s.sign, inner };
    let mut theta = w.model.params[mine.clone()].to_vec();
    let (mut rs_in, mut g) = (vec![0.0f32; k * m], vec![0.0f32; if k > 1 { m } else { len }]);
    let (mut ag_in, mut ag_out) = (vec![0.0f32; m], vec![0.0f32; k * m]);
    let mut q = vec![0.0f32; len];
    let (mut applied_steps, mut pending) = (0u64, false);
    if let Some(st) = j.take_resumed() {
        st.copy_into("theta", &mut theta)?;
        rep.restore(&st)?;
        step.restore(st.count("inner_steps")?, &st.tensors)?;
        applied_steps = st.count("applied_steps")?;
        pending = st.count("pending")? == 1;
        if pending {
            q.copy_from_slice(st.tensor("pending_q")?);
        }
        if k <= 1 {
            w.model.params.copy_from_slice(&theta);
        } else if drifts {
            st.copy_into("replica", &mut w.model.params)?;
        }
    }
    let mut flight: Option<Flight<C::Handle<Exchange>>> = None;
    let half = rep.flops() / 2.0;
    for t in j.first_round()..plan.end {
        ctx.mark_round(t);
        let lr = plan.schedule.lr(t);
        let loss = accumulate(ctx, w, plan.grad_accum).await;
        // FlexDeMo: my shard of the node's mean gradient.
        if k > 1 {
            for (seg, r) in rs_in.chunks_mut(m).zip(&shards) {
                seg[..r.len()].copy_from_slice(&w.model.grads()[r.clone()]);
                seg[r.len()..].fill(0.0);
            }
            let task =
                ReduceScatter { group: Group::Node, input: rs_in, output: g, op: ReduceOp::Mean, wire: plan.wire };
            (rs_in, g) = ctx.run(task).await;
        } else {
            g.copy_from_slice(w.model.grads());
        }
        if plan.grad_clip > 0.0 {
            clip_node(ctx, &mut g[..len], plan.grad_clip, k).await;
        }
        let mut applied = plan.grad_accum as u64;
        if s.overlap {
            // Step 7 of step t-1: its exchange ran during this step's micro-batches.
            let have = if pending {
                pending = false;
                true
            } else if let Some(f) = flight.take() {
                let done = match f {
                    Flight::Started(h) => ctx.wait(h).await,
                    Flight::Ready(e) => e,
                };
                ctx.compute(Work::Flops { name: "demo-decode", flops: half }, || rep.unfold(done, &mut q)).await;
                true
            } else {
                false
            };
            // Steps 2-5 of step t.
            let ex = ctx.compute(Work::Flops { name: "demo-encode", flops: half }, || rep.fold(t, lr, &g[..len])).await;
            if have {
                ctx.compute(Work::Optimizer { params: len }, || step.apply(lr, &mut q, &mut theta)).await;
                applied_steps += 1;
            } else {
                applied = 0;
            }
            (ag_in, ag_out) = gather_params(ctx, w, &theta, &shards, k, ag_in, ag_out, plan).await;
            // Step 6 of step t, in flight until step t+1 needs it.
            flight = Some(match ex {
                Exchange::Nothing => Flight::Ready(ex),
                ex => Flight::Started(ctx.start(ex)),
            });
        } else {
            let ex = ctx.compute(Work::Flops { name: "demo-encode", flops: half }, || rep.fold(t, lr, &g[..len])).await;
            let done = match ex {
                Exchange::Nothing => ex,
                ex => ctx.run(ex).await,
            };
            ctx.compute(Work::Flops { name: "demo-decode", flops: half }, || rep.unfold(done, &mut q)).await;
            ctx.compute(Work::Optimizer { params: len }, || step.apply(lr, &mut q, &mut theta)).await;
            applied_steps += 1;
            (ag_in, ag_out) = gather_params(ctx, w, &theta, &shards, k, ag_in, ag_out, plan).await;
        }
        j.step(ctx, t + 1, loss, applied)?;
        if s.overlap && (t + 1 == plan.end || j.checkpoint_due(t + 1, plan.end)) {
            // A quiet boundary: bring the exchange in, keep its Q for the next step.
            if let Some(f) = flight.take() {
                let done = match f {
                    Flight::Started(h) => ctx.wait(h).await,
                    Flight::Ready(e) => e,
                };
                ctx.compute(Work::Flops { name: "demo-decode", flops: half }, || rep.unfold(done, &mut q)).await;
                pending = true;
            }
        }
        // The piece is made only when a part is saved: a copy of the model
        // every step is a fresh allocation whose first touch costs ~0.4 ms here.
        let first_node = topo.node_of(me) == 0;
        let params = &w.model.params;
        j.round_end(ctx, Some(w), t + 1, plan.end, || {
            let model = model_piece(flex, first_node, me, lo, &params[mine.clone()]);
            let mut st = StrategyState { model, optimizer_steps: applied_steps, ..StrategyState::default() };
            st.tensors.push(("theta".into(), theta.clone()));
            st.tensors.extend(rep.state());
            st.tensors.extend(step.state());
            if pending {
                st.tensors.push(("pending_q".into(), q.clone()));
            }
            if drifts && k > 1 {
                st.tensors.push(("replica".into(), w.model.params.clone()));
            }
            st.scalars = serde_json::json!({
                "inner_steps": step.steps_taken(),
                "applied_steps": applied_steps,
                "pending": u64::from(pending),
            });
            st
        })
        .await?;
    }
    let f = std::mem::size_of::<f32>();
    let held: usize = rep.state().iter().map(|(_, t)| t.len()).sum();
    let budget = rep.budget();
    let memory = MemoryBytes {
        outer: 0,
        params: f * n,
        grads: f * n,
        comm_buffers: f * (rs_in.len() + g.len() + ag_in.len() + ag_out.len() + q.len())
            + budget.payload_bytes * (members + 1),
        optimizer: f * (theta.len() + held + step.state_len()),
    };
    Ok(Outcome {
        optimizer_steps: applied_steps,
        memory,
        model: model_piece(flex, topo.node_of(me) == 0, me, lo, &w.model.params[mine]),
        exchange: Some(budget),
    })
}

/// The run's model: DeMo's replica from worker 0; FlexDeMo's shards from
/// the workers of node 0 (the other nodes hold the same, except under
/// diloco, whose nodes drift apart: the run's model is then node 0's).
fn model_piece(flex: bool, first_node: bool, me: usize, lo: usize, shard: &[f32]) -> Option<ModelPiece> {
    let give = if flex { first_node } else { me == 0 };
    give.then(|| ModelPiece { offset: lo, values: shard.to_vec() })
}

/// Clips the node's mean gradient to global norm `clip` (its shards'
/// squared norms summed over the node, sent exactly); PyTorch's rule. One
/// costed pass for the norm and the scale (worker.rs `clip_grads`).
async fn clip_node<C: Ctx>(ctx: &mut C, g: &mut [f32], clip: f32, k: usize) {
    let work = Work::grad_clip(g.len());
    if k <= 1 {
        ctx.compute(work, || scale_to_norm(g, sum_of_squares(g) as f32, clip)).await;
        return;
    }
    let sq = ctx.compute(work, || sum_of_squares(g) as f32).await;
    let sq = ctx.run(AllReduce::sum(Group::Node, vec![sq], crate::comm::WireDtype::F32)).await[0];
    scale_to_norm(g, sq, clip);
}

/// The node all-gathers its shards into every member's replica (FlexDeMo);
/// without sharding the replica is the shard.
#[allow(clippy::too_many_arguments)] // the loop's buffers, handed through
async fn gather_params<C: Ctx>(
    ctx: &mut C,
    w: &mut Worker,
    theta: &[f32],
    shards: &[std::ops::Range<usize>],
    k: usize,
    mut input: Vec<f32>,
    output: Vec<f32>,
    plan: &Plan,
) -> (Vec<f32>, Vec<f32>) {
    if k <= 1 {
        w.model.params.copy_from_slice(theta);
        return (input, output);
    }
    let m = input.len();
    input[..theta.len()].copy_from_slice(theta);
    input[theta.len()..].fill(0.0);
    let (input, output) = ctx.run(AllGather { group: Group::Node, input, output, wire: plan.wire }).await;
    for (seg, r) in output.chunks(m).zip(shards) {
        w.model.params[r.clone()].copy_from_slice(&seg[..r.len()]);
    }
    (input, output)
}
