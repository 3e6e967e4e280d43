//! How computation and communication slow each other in the simulator
//! (sim/spec.rs, `Interference`): a worker's own transfers, and on shared
//! cores the other ranks' transfers.

use super::sim::{self, SimSpec};
use super::tests::{floats, sim_run, sim_workers_3_and_a_server, tier};
use super::*;
use crate::comm::{LinkModel, Tier};

#[test]
fn sim_overlapped_compute_and_communication_slow_each_other_by_the_spec() {
    // Link 1000 B/s: 500 f32 = 2000 B all-reduced over 2 = 2 s alone;
    // micro-batch 1 s alone. Factors: compute 1.5, comm 1.25.
    let spec = SimSpec {
        link: Some(LinkModel::flat(tier(1e3, 0.0))),
        interference: sim::Interference { compute: 1.5, comm: 1.25, beside: 1.0 },
        ..SimSpec::flat(2, 1.0, None)
    };
    let out = sim_run(spec, |mut ctx| {
        Box::pin(async move {
            // Overlapped: the collective starts while both compute, so 2 x 1.25
            // = 2.5 s; the micro-batches started inside it take 1.5 s each:
            // at 0, 1.5 (both inside), 3.0 (after it: 1 s) -> 4.0.
            let a = ctx.start(AllReduce::sum(Group::World, vec![1.0; 500], crate::comm::WireDtype::F32));
            let mut ends = Vec::new();
            for _ in 0..3 {
                ctx.compute(Work::MicroBatch, || ()).await;
                ends.push(ctx.now());
            }
            ctx.wait(a).await;
            // Blocking: nothing computes, so the next all-reduce takes its 2 s alone.
            let t0 = ctx.now();
            ctx.run(AllReduce::sum(Group::World, vec![1.0; 500], crate::comm::WireDtype::F32)).await;
            Ok((ends, ctx.now() - t0))
        })
    });
    assert_eq!(out[0], (vec![1.5, 3.0, 4.0], 2.0));
    // The planner's closed form of the same pair, 3 micro-batches of 1 s
    // behind a 2 s transfer: two start inside it -> 3 + 2 x 0.5 = 4 s.
    let f = sim::Interference { compute: 1.5, comm: 1.25, beside: 1.0 };
    assert_eq!(f.overlapped(3.0, 2.0, 1.0), 4.0);
    // Every piece starts inside: the slower of the two decides.
    assert_eq!(f.overlapped(1.0, 2.0, 1.0), 2.5);
    assert_eq!(f.overlapped(2.0, 1.0, 2.0), 3.0);
    assert_eq!(sim::Interference::NONE.overlapped(3.0, 2.0, 1.0), 3.0);
    // A 1 s tail after the pieces: 1 micro-batch (1.5 s) ends inside the
    // 2.5 s transfer, so the tail is slowed too: 1.5 + 1.5 = 3 s; after 3
    // micro-batches (4 s) the transfer is done and the tail takes 1 s: 5 s.
    assert_eq!(f.overlapped_with_tail(1.0, 2.0, 1.0, 1.0), 3.0);
    assert_eq!(f.overlapped_with_tail(3.0, 2.0, 1.0, 1.0), 5.0);
    // Without interference: max(c + tail, m).
    assert_eq!(sim::Interference::NONE.overlapped_with_tail(1.0, 2.5, 1.0, 1.0), 2.5);
}

#[test]
fn sim_on_shared_cores_others_transfers_slow_a_computation_by_beside() {
    // 3 workers and a server on one machine's cores (beside 1.5), 1000 B/s:
    // the server waits 0.5 s, then sends worker 0 a 2000 B message (16 B
    // header + 496 f32): a transfer from 0.5 to 2.5 s. Worker 1 computes
    // three 1 s micro-batches: at 0 (no transfer: 1 s), at 1 (inside it:
    // 1.5 s, to 2.5) and at 2.5 (over: 1 s), so 1.0, 2.5, 3.5. On separate
    // machines (beside 1) nothing slows it: 1, 2, 3.
    let run = |beside: f64| {
        let spec = SimSpec {
            link: Some(LinkModel::flat(tier(1e3, 0.0))),
            flops_per_s: Some(1.0),
            interference: sim::Interference { beside, ..sim::Interference::NONE },
            ..sim_workers_3_and_a_server()
        };
        sim_run(spec, |mut ctx| {
            Box::pin(async move {
                let mut ends = Vec::new();
                match ctx.rank() {
                    0 => {
                        ctx.run(Recv { from: 3 }).await;
                        ends.push(ctx.now());
                    }
                    1 => {
                        for _ in 0..3 {
                            ctx.compute(Work::MicroBatch, || ()).await;
                            ends.push(ctx.now());
                        }
                    }
                    2 => {}
                    _ => {
                        ctx.compute(Work::Flops { name: "wait", flops: 0.5 }, || ()).await;
                        ctx.run(Send { to: 0, msg: floats(0, 496) }).await;
                    }
                }
                Ok(ends)
            })
        })
    };
    let shared = run(1.5);
    assert_eq!(shared[1], vec![1.0, 2.5, 3.5]);
    assert_eq!(shared[0], vec![2.5]);
    assert_eq!(run(1.0)[1], vec![1.0, 2.0, 3.0]);
}

#[test]
fn sim_messages_the_other_way_on_a_link_slow_each_other_by_its_duplex_factor() {
    // One way 1 s per 1000 B (ping-pong); both ways at once 1.25 s (the
    // all-reduce's message): duplex factor 1.25. Messages of 2000 B (16 B
    // header + 496 f32), 2 s alone. Worker 0 sends the server one at 0,
    // worker 2 one at 0.5 (queued behind it: the server's link takes one
    // at a time); the server sends worker 1 one at 1.
    // - at 1, worker 0's has 1 s left and the server's 2 s: both slowed
    //   for min(1, 2) x 1.25 = 1.25 s; worker 0's lands at 2.25, and worker
    //   2's, queued behind it, now starts at 2.25 (not 2.0);
    // - at 2.25 the server's has 2 - 1 = 1 s left, worker 2's 2 s: both
    //   slowed for 1.25 s; the server's lands at 3.5, worker 2's has 1 s
    //   left then: it lands at 4.5.
    // Without the factor: 2.0, 3.0 and 4.0.
    let run = |both_ways_s: f64| {
        let sweep = crate::comm::link_measured::AllReduceSweep {
            members: 2,
            all_reduce: vec![[2000.0, 2.0 * both_ways_s], [8000.0, 8.0 * both_ways_s]],
            ping_pong: vec![[1000.0, 1.0], [4000.0, 4.0]],
        };
        let link = Tier {
            measured: Some(sweep.message_times().unwrap()),
            p2p: sweep.point_to_point_times().unwrap(),
            ..tier(1e3, 0.0)
        };
        let spec =
            SimSpec { link: Some(LinkModel::flat(link)), flops_per_s: Some(1.0), ..sim_workers_3_and_a_server() };
        sim_run(spec, |mut ctx| {
            Box::pin(async move {
                let mut ends = Vec::new();
                match ctx.rank() {
                    0 => ctx.run(Send { to: 3, msg: floats(0, 496) }).await,
                    1 => {
                        ctx.run(Recv { from: 3 }).await;
                    }
                    2 => {
                        ctx.compute(Work::Flops { name: "wait", flops: 0.5 }, || ()).await;
                        ctx.run(Send { to: 3, msg: floats(2, 496) }).await;
                    }
                    _ => {
                        ctx.compute(Work::Flops { name: "wait", flops: 1.0 }, || ()).await;
                        ctx.run(Send { to: 1, msg: floats(1, 496) }).await;
                        ends.push(ctx.now());
                        ctx.run(Recv { from: 2 }).await;
                    }
                }
                ends.push(ctx.now());
                Ok(ends)
            })
        })
    };
    let close = |got: &[f64], want: &[f64]| got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-9);
    let both = run(1.25);
    for (rank, want) in [(0, vec![2.25]), (1, vec![3.5]), (2, vec![4.5]), (3, vec![3.5, 4.5])] {
        assert!(close(&both[rank], &want), "rank {rank}: {:?}, want {want:?}", both[rank]);
    }
    let alone = run(1.0);
    for (rank, want) in [(0, vec![2.0]), (1, vec![3.0]), (2, vec![4.0]), (3, vec![3.0, 4.0])] {
        assert!(close(&alone[rank], &want), "rank {rank}: {:?}, want {want:?}", alone[rank]);
    }
}
