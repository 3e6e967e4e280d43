//! The engine's conformance program: one participant function, written
//! once against [`Ctx`], that exercises every primitive a strategy can use
//! and checks each result against its definition. Run on the simulator, on
//! the real runtime over threads, and on the real runtime over MPI
//! (`lowcomm comm-check --backend mpi`), every participant must get the
//! same bits everywhere.
//!
//! What it covers, on a topology with nodes and a server:
//! - grouped collectives on the world, the node, the replication group and
//!   a custom group (sum and mean, f32 and bf16), a reduce-scatter in the
//!   node, an all-gather across nodes, a broadcast in the node;
//! - typed payloads: counts travel exactly in f32 (bf16 would round 257 to
//!   256), a packed sparse payload round-trips (indices exact, values
//!   rounded only when bf16);
//! - the hierarchical all-reduce against the flat one (to rounding);
//! - two tasks in flight complete in start order;
//! - messages to and from a server actor, a receive-any gathering every
//!   worker, and a receive-any whose deadline passes with nothing sent.

use super::tasks::HierarchicalAllReduce;
use super::{
    real, sim, AllGather, AllGatherBytes, AllReduce, Broadcast, Ctx, Group, Recv, RecvAny, ReduceScatter, Send,
    Topology, Work,
};
use crate::comm::conformance::value;
use crate::comm::payload::SparseLayout;
use crate::comm::{LinkModel, Message, ReduceOp, Sparse, Tier, WireDtype};
use anyhow::{ensure, Result};
use std::sync::Arc;

/// Elements per test buffer (not a multiple of any group size).
const N: usize = 37;

/// The values participant `r` contributes (the backend conformance values).
fn values(r: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| value(r, i)).collect()
}

/// What the rank-order recipe gives over `members` (f32 or bf16, sum or mean).
fn expected(members: &[usize], off: usize, n: usize, op: ReduceOp, wire: WireDtype) -> Vec<f32> {
    (off..off + n)
        .map(|i| {
            let mut acc = wire.round(value(members[0], i));
            for &q in &members[1..] {
                acc += wire.round(value(q, i));
            }
            if op == ReduceOp::Mean {
                acc /= members.len() as f32;
            }
            wire.round(acc)
        })
        .collect()
}

fn bits(v: &[f32]) -> impl Iterator<Item = u32> + '_ {
    v.iter().map(|x| x.to_bits())
}

/// One participant's run of the program; returns a digest of every result
/// (bits), so runtimes can be compared participant by participant.
pub async fn program<C: Ctx>(ctx: &mut C) -> Result<Vec<u32>> {
    let topo = ctx.topology();
    let me = ctx.rank();
    let mut digest = Vec::new();
    if Some(me) == topo.server_rank() {
        server(ctx, &mut digest).await?;
        return Ok(digest);
    }
    let parity: Vec<usize> = (0..topo.workers).filter(|r| r % 2 == me % 2).collect();
    let groups = [Group::World, Group::Node, Group::Replicas, Group::Ranks(Arc::from(parity))];
    for g in &groups {
        let members = topo.members(g, me);
        for (op, wire) in [(ReduceOp::Sum, WireDtype::F32), (ReduceOp::Mean, WireDtype::Bf16)] {
            let got = ctx.run(AllReduce { group: g.clone(), buf: values(me, N), op, wire }).await;
            ensure!(got == expected(&members, 0, N, op, wire), "all_reduce {op:?} {wire:?} on {g:?} = {members:?}");
            digest.extend(bits(&got));
        }
    }
    // Reduce-scatter in the node: member r gets chunk r.
    let node = topo.members(&Group::Node, me);
    let k = node.len();
    let at = node.iter().position(|&m| m == me).expect("a member of its node");
    let (_, chunk) = ctx
        .run(ReduceScatter {
            group: Group::Node,
            input: values(me, k * 5),
            output: vec![0.0; 5],
            op: ReduceOp::Sum,
            wire: WireDtype::F32,
        })
        .await;
    ensure!(chunk == expected(&node, at * 5, 5, ReduceOp::Sum, WireDtype::F32), "reduce_scatter in node {node:?}");
    digest.extend(bits(&chunk));
    // All-gather across nodes: chunk q is replica q's input, wire-rounded.
    let reps = topo.members(&Group::Replicas, me);
    let (_, all) = ctx
        .run(AllGather {
            group: Group::Replicas,
            input: values(me, 3),
            output: vec![0.0; 3 * reps.len()],
            wire: WireDtype::Bf16,
        })
        .await;
    let want: Vec<f32> = reps.iter().flat_map(|&q| values(q, 3)).map(|x| WireDtype::Bf16.round(x)).collect();
    ensure!(all == want, "all_gather across {reps:?}");
    digest.extend(bits(&all));
    // Broadcast from the node's last member.
    let got = ctx.run(Broadcast { group: Group::Node, buf: values(me, 4), root: k - 1, wire: WireDtype::F32 }).await;
    ensure!(got == values(node[k - 1], 4), "broadcast in node {node:?}");
    digest.extend(bits(&got));
    // Scalars travel exactly in f32; bf16 would round them.
    let count = ctx.run(AllReduce::sum(Group::World, vec![257.0 + me as f32], WireDtype::F32)).await[0];
    let w = topo.workers as f32;
    ensure!(count == 257.0 * w + (w - 1.0) * w / 2.0, "count all-reduce {count}");
    let rounded = ctx.run(AllReduce::sum(Group::World, vec![257.0], WireDtype::Bf16)).await[0];
    ensure!(rounded == WireDtype::Bf16.round(256.0 * w), "bf16 rounds 257 to 256: got {rounded}");
    digest.extend([count.to_bits(), rounded.to_bits()]);
    // A packed sparse payload: u16 indices over a 300-wide domain, bf16 values.
    let layout = SparseLayout::new(3, 300, WireDtype::Bf16);
    let mine = |r: usize| Sparse { indices: vec![r as u32, 299 - r as u32, 256 + r as u32 % 40], values: values(r, 3) };
    let mut bytes = vec![0u8; layout.bytes()];
    mine(me).encode(&layout, &mut bytes);
    let (_, gathered) = ctx
        .run(AllGatherBytes { group: Group::World, input: bytes, output: vec![0; layout.bytes() * topo.workers] })
        .await;
    for (q, chunk) in gathered.chunks(layout.bytes()).enumerate() {
        let got = Sparse::decode(&layout, chunk);
        let want = mine(q);
        ensure!(got.indices == want.indices, "sparse indices from {q}: {:?}", got.indices);
        ensure!(
            got.values.iter().zip(&want.values).all(|(a, b)| *a == WireDtype::Bf16.round(*b)),
            "sparse values from {q}"
        );
        digest.extend(got.indices.iter().copied());
    }
    // The two-level all-reduce equals the flat one to rounding.
    let hier = ctx.run(HierarchicalAllReduce { buf: values(me, N), op: ReduceOp::Sum, wire: WireDtype::F32 }).await;
    let flat = expected(&(0..topo.workers).collect::<Vec<_>>(), 0, N, ReduceOp::Sum, WireDtype::F32);
    for (i, (h, f)) in hier.iter().zip(&flat).enumerate() {
        let scale: f32 = (0..topo.workers).map(|q| value(q, i).abs()).sum();
        ensure!(
            (h - f).abs() <= 4.0 * topo.workers as f32 * f32::EPSILON * scale,
            "hierarchical all-reduce element {i}: {h} vs {f}"
        );
    }
    digest.extend(bits(&hier));
    // Two tasks in flight: they complete in start order, never the second first.
    let a = ctx.start(AllReduce::sum(Group::World, values(me, 5000), WireDtype::F32));
    let b = ctx.start(AllReduce::sum(Group::Node, values(me, 3), WireDtype::F32));
    let mut order = Vec::new();
    while order.len() < 2 {
        // b first: if b is seen done, a finished before it and is seen done
        // too. Read the other way round, both could finish between the two
        // reads and the order would be misjudged (issue 27, item 8).
        let db = ctx.is_done(&b);
        let da = ctx.is_done(&a);
        ensure!(!db || da, "the second task in flight completed before the first");
        if da && order.is_empty() {
            order.push(1);
        }
        if db && order.len() == 1 {
            order.push(2);
        }
        ctx.compute(Work::Flops { name: "poll", flops: 1e6 }, || std::hint::black_box(0)).await;
    }
    let (ra, rb) = (ctx.wait(a).await, ctx.wait(b).await);
    digest.extend(order);
    digest.extend(bits(&ra[..4]));
    digest.extend(bits(&rb));
    // Messages with the server: send mine, get everyone's sum back.
    if let Some(s) = topo.server_rank() {
        let msg = Message::new(me as u32).with_scalars(vec![me as f64]).with_values(values(me, 10), WireDtype::Bf16);
        ctx.run(Send { to: s, msg }).await;
        let reply = ctx.run(Recv { from: s }).await;
        let ranks: f64 = (0..topo.workers).map(|r| r as f64).sum();
        ensure!(reply.tag == 99 && reply.scalars == vec![ranks], "server reply {:?}", reply.scalars);
        digest.extend(bits(&reply.values));
    }
    Ok(digest)
}

/// The server's side: gather one message from every worker (receive-any,
/// whatever the arrival order), reply with their sum, then wait on an
/// empty mailbox until a deadline.
async fn server<C: Ctx>(ctx: &mut C, digest: &mut Vec<u32>) -> Result<()> {
    let w = ctx.topology().workers;
    let mut got: Vec<(usize, Message)> = Vec::new();
    for _ in 0..w {
        let deadline = ctx.now() + 600.0;
        let m = ctx.run(RecvAny { deadline_s: Some(deadline) }).await;
        got.push(m.ok_or_else(|| anyhow::anyhow!("server: no message before the deadline"))?);
    }
    got.sort_by_key(|(from, _)| *from);
    ensure!(
        got.iter().map(|(f, _)| *f).eq(0..w),
        "server: senders {:?}",
        got.iter().map(|(f, _)| *f).collect::<Vec<_>>()
    );
    let mut sum = vec![0.0f32; 10];
    for (from, m) in &got {
        ensure!(
            m.tag == *from as u32 && m.scalars == vec![*from as f64],
            "server: message from {from} has tag {} scalars {:?}",
            m.tag,
            m.scalars
        );
        let want: Vec<f32> = values(*from, 10).iter().map(|&x| WireDtype::Bf16.round(x)).collect();
        ensure!(m.values == want, "server: message from {from}: values not bf16-rounded as sent");
        sum.iter_mut().zip(&m.values).for_each(|(s, v)| *s += v);
        digest.extend(bits(&m.values));
    }
    let ranks: f64 = (0..w).map(|r| r as f64).sum();
    for to in 0..w {
        let msg = Message::new(99).with_scalars(vec![ranks]).with_values(sum.clone(), WireDtype::F32);
        ctx.run(Send { to, msg }).await;
    }
    // Nothing more is sent: the receive-any returns at its deadline.
    let deadline = ctx.now() + 0.05;
    let none = ctx.run(RecvAny { deadline_s: Some(deadline) }).await;
    ensure!(none.is_none(), "server: a message arrived from {:?} after everyone's", none.map(|m| m.0));
    ensure!(ctx.now() >= deadline, "server: receive-any returned at {} before its deadline {deadline}", ctx.now());
    digest.push(1);
    Ok(())
}

/// The link both runtimes use: fast inside nodes, slower between them.
fn link(per_node: usize) -> LinkModel {
    LinkModel { intra: Tier::line(100e-6, 1e9), inter: Some(Tier::line(1e-3, 1e8)), workers_per_node: per_node }
}

/// The program on the simulator: every participant's digest.
pub fn run_sim(topo: Topology) -> Result<Vec<Vec<u32>>> {
    run_sim_with(topo, true)
}

/// The program on the simulator, its computes run at once on the pool
/// (`parallel`) or one at a time on the executor's thread.
pub fn run_sim_with(topo: Topology, parallel: bool) -> Result<Vec<Vec<u32>>> {
    // Polling work costs 1 ms of virtual time, so waiting loops advance.
    let spec = sim::SimSpec {
        topology: topo,
        link: Some(link(topo.per_node)),
        flops_per_s: Some(1e9),
        parallel,
        ..sim::SimSpec::flat(topo.workers, 1e-3, None)
    };
    sim::run(spec, |mut ctx| async move { program(&mut ctx).await })
}

/// The program on the real runtime over threads, with the same link emulated.
pub fn run_real(topo: Topology) -> Result<Vec<Vec<u32>>> {
    let spec = real::RealSpec { topology: topo, link: Some(link(topo.per_node)), ..real::RealSpec::flat(topo.workers) };
    real::run(spec, |mut ctx| async move { program(&mut ctx).await })
}

/// Runs the program on both in-process runtimes on `workers` workers in
/// nodes of 2 (or one node) plus a server, and checks they agree.
pub fn check_runtimes(workers: usize) -> Result<()> {
    let per_node = if workers.is_multiple_of(2) && workers > 2 { 2 } else { workers };
    let topo = Topology { workers, per_node, server: true };
    let (s, r) = (run_sim(topo)?, run_real(topo)?);
    for (p, (a, b)) in s.iter().zip(&r).enumerate() {
        ensure!(a == b, "participant {p}: the simulated and the real runtime give different results");
    }
    Ok(())
}

/// The topology `comm-check` uses for an MPI job of `size` ranks: the last
/// rank is the server, the others workers in nodes of `per_node` when they
/// divide evenly (else one node).
pub fn mpi_topology(size: usize, per_node: usize) -> Topology {
    let workers = size.saturating_sub(1).max(1);
    let per_node = if per_node >= 1 && workers.is_multiple_of(per_node) { per_node } else { workers };
    Topology { workers, per_node, server: size >= 2 }
}

/// This rank's part of the program over MPI, compared with the simulator's
/// result for the same participant.
#[cfg(feature = "mpi")]
pub fn check_mpi(mpi: &crate::comm::mpi::MpiProcess, per_node: usize) -> Result<()> {
    let topo = mpi_topology(mpi.size(), per_node);
    let spec = real::RealSpec { topology: topo, link: None, ..real::RealSpec::flat(topo.workers) };
    let got = real::run_with(spec, vec![Box::new(mpi.fabric())], |mut ctx| async move { program(&mut ctx).await })?;
    let want = run_sim(topo)?;
    ensure!(got[0] == want[mpi.rank()], "rank {}: MPI results differ from the simulator's", mpi.rank());
    if mpi.rank() == 0 {
        println!(
            "comm-check mpi: the engine's primitives on {} workers in nodes of {} + a server agree with the simulator",
            topo.workers, topo.per_node
        );
    }
    Ok(())
}
