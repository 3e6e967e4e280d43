//! How computation and communication slow each other in the simulator
//! (sim/spec.rs, `Interference`): a worker's own transfers, and on shared
//! cores the other ranks' transfers.

use super::sim::{self, SimSpec};
use super::tests::{floats, sim_run, sim_workers_3_and_a_server, tier};
use super::*;
use crate::comm::LinkModel;

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
