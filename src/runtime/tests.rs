//! Engine tests: the runtime API on both runtimes, and the simulator's
//! timing by hand.

use super::conformance::{check_runtimes, run_real, run_sim, run_sim_with};
use super::sim::{self, SimSpec};
use super::*;
use crate::comm::{LinkModel, Message, Tier};

pub(super) fn tier(bw: f64, lat: f64) -> Tier {
    Tier::line(lat, bw)
}

#[test]
fn engine_primitives_agree_on_sim_and_real_with_nodes_and_a_server() {
    // 2 nodes x 2 workers + server: grouped collectives, typed payloads,
    // messages, receive-any with a deadline, two tasks in flight.
    check_runtimes(4).unwrap();
}

#[test]
fn engine_primitives_agree_on_small_jobs() {
    for workers in 1..=3 {
        check_runtimes(workers).unwrap_or_else(|e| panic!("{workers} workers: {e:#}"));
    }
}

#[test]
fn engine_program_is_bit_reproducible_in_sim() {
    let topo = Topology { workers: 4, per_node: 2, server: true };
    let parallel = run_sim(topo).unwrap();
    assert_eq!(parallel, run_sim(topo).unwrap());
    assert_eq!(parallel, run_sim_with(topo, false).unwrap(), "sequential sim != parallel sim");
    // Without emulated links the real runtime still gives the same bits.
    let flat = Topology { workers: 3, per_node: 3, server: true };
    assert_eq!(run_sim(flat).unwrap(), run_real(flat).unwrap());
}

/// Runs `f` for every participant of `spec` and returns their outputs.
pub(super) fn sim_run<T: 'static>(
    spec: SimSpec,
    f: impl Fn(sim::SimCtx) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<T>>>>,
) -> Vec<T> {
    sim::run(spec, f).unwrap()
}

#[test]
fn sim_costs_each_group_on_the_tier_it_crosses() {
    // 2 nodes x 2. Intra 1 GB/s, inter 100 MB/s, no latency; 1000 f32 = 4 kB.
    // Node all-reduce (p = 2): 2 * 1/2 * 4000 / 1e9 = 4 us.
    // Replicas all-reduce (2 nodes, 2 groups share each link): 4000 / 5e7 = 80 us.
    // World all-reduce, hierarchical: 2 * 1/2 * 4000/1e9 (intra RS + AG) + 4000/1e8 = 44 us.
    let link = LinkModel { intra: tier(1e9, 0.0), inter: Some(tier(1e8, 0.0)), workers_per_node: 2 };
    let spec = SimSpec {
        link: Some(link),
        topology: Topology { workers: 4, per_node: 2, server: false },
        ..SimSpec::flat(4, 1.0, None)
    };
    let times = sim_run(spec, |mut ctx| {
        Box::pin(async move {
            let mut t = Vec::new();
            for g in [Group::Node, Group::Replicas, Group::World] {
                let t0 = ctx.now();
                ctx.run(AllReduce::sum(g, vec![1.0; 1000], crate::comm::WireDtype::F32)).await;
                t.push(ctx.now() - t0);
            }
            Ok(t)
        })
    });
    for t in times {
        let want = [4e-6, 80e-6, 44e-6];
        for (got, want) in t.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{t:?}");
        }
    }
}

#[test]
fn sim_message_costs_latency_plus_bytes_and_recv_any_honours_its_deadline() {
    // 1 worker + server on a flat 1 MB/s, 10 ms link. A message of 1000 f32
    // is 16 + 4000 bytes: 10 ms + 4.016 ms. The server's second receive-any
    // has nothing to get and returns at its deadline, exactly.
    let spec = SimSpec {
        link: Some(LinkModel::flat(tier(1e6, 0.01))),
        topology: Topology { workers: 1, per_node: 1, server: true },
        ..SimSpec::flat(1, 1.0, None)
    };
    let out = sim_run(spec, |mut ctx| {
        Box::pin(async move {
            if ctx.rank() == 0 {
                ctx.run(Send { to: 1, msg: Message::new(5).with_values(vec![1.0; 1000], crate::comm::WireDtype::F32) })
                    .await;
                return Ok(vec![ctx.now()]);
            }
            let (from, m) = ctx.run(RecvAny { deadline_s: None }).await.unwrap();
            assert_eq!((from, m.tag), (0, 5));
            let arrived = ctx.now();
            let none = ctx.run(RecvAny { deadline_s: Some(arrived + 0.5) }).await;
            assert!(none.is_none());
            Ok(vec![arrived, ctx.now() - arrived])
        })
    });
    let transfer = 0.01 + 4016.0 / 1e6;
    assert!((out[0][0] - transfer).abs() < 1e-12, "sender busy for the transfer: {:?}", out[0]);
    assert!((out[1][0] - transfer).abs() < 1e-12, "arrival: {:?}", out[1]);
    assert!((out[1][1] - 0.5).abs() < 1e-12, "deadline: {:?}", out[1]);
}

/// Three workers and a server (participant 3), one per node.
const WORKERS_3_AND_A_SERVER: Topology = Topology { workers: 3, per_node: 1, server: true };

/// The simulator on [`WORKERS_3_AND_A_SERVER`]: micro-batches of 1 s, one
/// flat 1 MB/s link with no latency.
pub(super) fn sim_workers_3_and_a_server() -> SimSpec {
    SimSpec {
        link: Some(LinkModel::flat(tier(1e6, 0.0))),
        topology: WORKERS_3_AND_A_SERVER,
        ..SimSpec::flat(3, 1.0, None)
    }
}

/// A message tagged `tag` with `n` f32 values (16 B header + 4n B).
pub(super) fn floats(tag: usize, n: usize) -> Message {
    Message::new(tag as u32).with_values(vec![0.0; n], crate::comm::WireDtype::F32)
}

#[test]
fn sim_receive_any_takes_arrivals_in_time_order() {
    // Three workers send to the server after 2 - w micro-batches of 1 s:
    // worker 2's message arrives first and worker 0's last.
    let spec = sim_workers_3_and_a_server();
    let out = sim_run(spec, |mut ctx| {
        Box::pin(async move {
            let me = ctx.rank();
            if me < 3 {
                for _ in me..2 {
                    ctx.compute(Work::MicroBatch, || ()).await;
                }
                ctx.run(Send { to: 3, msg: floats(me, 100) }).await;
                return Ok(vec![]);
            }
            let mut order = Vec::new();
            for _ in 0..3 {
                order.push(ctx.run(RecvAny { deadline_s: None }).await.unwrap().0);
            }
            Ok(order)
        })
    });
    assert_eq!(out[3], vec![2, 1, 0]);
}

#[test]
fn sim_a_receiver_takes_one_message_at_a_time() {
    // Three workers send to the server at once, 300, 200 and 100 f32 (16 B
    // header: 1216, 816, 416 B) over 1 MB/s: the server's link takes them
    // one after another in send order (rank order at one instant), and each
    // sender is held until its message has landed: 1.216, 2.032, 2.448 ms.
    let spec = sim_workers_3_and_a_server();
    let out = sim_run(spec, |mut ctx| {
        Box::pin(async move {
            let me = ctx.rank();
            if me < 3 {
                ctx.run(Send { to: 3, msg: floats(me, (3 - me) * 100) }).await;
                return Ok(vec![ctx.now()]);
            }
            let mut got = Vec::new();
            for _ in 0..3 {
                let (from, _) = ctx.run(RecvAny { deadline_s: None }).await.unwrap();
                got.extend([from as f64, ctx.now()]);
            }
            Ok(got)
        })
    });
    let landed = [1.216e-3, 2.032e-3, 2.448e-3];
    for w in 0..3 {
        assert!((out[w][0] - landed[w]).abs() < 1e-12, "worker {w} held until {:?}", out[w]);
        assert_eq!(out[3][2 * w], w as f64);
        assert!((out[3][2 * w + 1] - landed[w]).abs() < 1e-12, "server: {:?}", out[3]);
    }
}

#[test]
fn sim_tasks_in_flight_run_one_after_another() {
    // One link per participant: two all-reduces started together take the
    // sum of their times, and the second is done exactly when it ends.
    let spec = SimSpec { link: Some(LinkModel::flat(tier(1e3, 0.0))), ..SimSpec::flat(2, 1.0, None) };
    let out = sim_run(spec, |mut ctx| {
        Box::pin(async move {
            let a = ctx.start(AllReduce::sum(Group::World, vec![1.0; 500], crate::comm::WireDtype::F32)); // 2 s
            let b = ctx.start(AllReduce::sum(Group::World, vec![1.0; 250], crate::comm::WireDtype::F32)); // 1 s
            ctx.compute(Work::MicroBatch, || ()).await; // 1 s: neither is done
            let early = (ctx.is_done(&a), ctx.is_done(&b));
            ctx.compute(Work::MicroBatch, || ()).await; // 2 s: a just completed
            let mid = (ctx.is_done(&a), ctx.is_done(&b));
            ctx.wait(b).await;
            let t = ctx.now();
            ctx.wait(a).await;
            Ok((early, mid, t))
        })
    });
    assert_eq!(out[0], ((false, false), (true, false), 3.0));
}

#[test]
fn sim_reports_a_deadlock_naming_who_waits_on_what() {
    let err = sim::run(SimSpec::flat(2, 1.0, None), |mut ctx| async move {
        if ctx.rank() == 0 {
            ctx.run(AllReduce::sum(Group::World, vec![1.0], crate::comm::WireDtype::F32)).await;
        }
        Ok(())
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("simulation deadlock") && err.contains("participant 0 waits on collective #0 of group [0, 1]"),
        "{err}"
    );
}

#[test]
fn work_of_every_kind_is_costed_by_the_sim_spec() {
    let spec = SimSpec { memory_bytes_per_s: Some(28e6), flops_per_s: Some(1e9), ..SimSpec::flat(1, 0.5, None) };
    // 1M params of AdamW: 28 bytes each at 28 MB/s = 1 s; at speed 0.5, 2 s.
    assert_eq!(spec.cost(Work::Optimizer { params: 1_000_000 }, 0.5), 2.0);
    assert_eq!(spec.cost(Work::Elementwise { name: "outer", elems: 1_000_000 }, 1.0), 12.0 / 28.0);
    assert_eq!(spec.cost(Work::Flops { name: "dct", flops: 3e9 }, 1.0), 3.0);
    assert_eq!(spec.cost(Work::MicroBatch, 0.25), 2.0);
    // Unknown rates make that work free, as before there were any.
    assert_eq!(SimSpec::flat(1, 0.5, None).cost(Work::Optimizer { params: 1 << 20 }, 1.0), 0.0);
}

#[test]
fn worker_facts_are_visible_to_strategies() {
    let spec = SimSpec { speeds: vec![1.0, 0.25], ..SimSpec::flat(2, 0.1, None) };
    let out = sim_run(spec, |ctx| Box::pin(async move { Ok((ctx.speed(), ctx.micro_batch_estimate_s())) }));
    assert_eq!(out, vec![(1.0, Some(0.1)), (0.25, Some(0.4))]);
    let real = real::run(real::RealSpec { speeds: vec![0.5], ..real::RealSpec::flat(1) }, |mut ctx| async move {
        let before = ctx.micro_batch_estimate_s();
        let micro_batch = || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            crate::comm::activity::computing()
        };
        let marked = ctx.compute(Work::MicroBatch, micro_batch).await;
        Ok((ctx.speed(), before, ctx.micro_batch_estimate_s(), marked))
    })
    .unwrap();
    let (speed, before, after, marked) = real[0];
    assert_eq!((speed, before), (0.5, None));
    assert!(marked, "a communication thread must see the worker computing (comm/activity.rs)");
    // Measured, slowdown included: about 2 x 20 ms.
    assert!(after.unwrap() >= 0.039, "{after:?}");
}

#[test]
fn topology_groups_and_routes() {
    use crate::comm::link::Route;
    let t = Topology { workers: 6, per_node: 3, server: true };
    assert_eq!(t.participants(), 7);
    assert_eq!(t.members(&Group::Node, 4), vec![3, 4, 5]);
    assert_eq!(t.members(&Group::Replicas, 4), vec![1, 4]);
    assert_eq!(t.members(&Group::World, 6), (0..6).collect::<Vec<_>>());
    assert_eq!(t.route(&Group::Node, &[3, 4, 5]), Route::Node(3));
    assert_eq!(t.route(&Group::Replicas, &[1, 4]), Route::Across { p: 2, share: 3 });
    assert_eq!(t.route(&Group::Ranks(vec![0, 3].into()), &[0, 3]), Route::Across { p: 2, share: 1 });
    assert_eq!(t.route(&Group::World, &(0..6).collect::<Vec<_>>()), Route::World(6));
    assert!(Topology { workers: 5, per_node: 2, server: false }
        .validate()
        .unwrap_err()
        .to_string()
        .contains("do not divide"));
}

#[test]
fn real_runtime_ends_with_a_failed_participants_error_instead_of_hanging() {
    // Worker 0 reports to the server and waits for its answer; the server
    // waits for both workers' reports; worker 1 fails first. Before the
    // failure notice this waited for ever: worker 1's thread ended, but the
    // server still had worker 0 to hear from, and worker 0 the server.
    let topo = Topology { workers: 2, per_node: 2, server: true };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let spec = real::RealSpec { topology: topo, ..real::RealSpec::flat(2) };
        let r = real::run(spec, |mut ctx| async move {
            match ctx.rank() {
                0 => {
                    ctx.run(Send { to: 2, msg: Message::new(1) }).await;
                    ctx.run(Recv { from: 2 }).await;
                }
                1 => anyhow::bail!("worker 1: disk full"),
                _ => {
                    for _ in 0..2 {
                        ctx.run(RecvAny { deadline_s: None }).await;
                    }
                    for to in 0..2 {
                        ctx.run(Send { to, msg: Message::new(2) }).await;
                    }
                }
            }
            Ok(())
        });
        let _ = tx.send(r.map_err(|e| e.to_string()));
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the run hangs");
    assert_eq!(got.unwrap_err(), "worker 1: disk full");
}

#[test]
fn a_collective_across_nodes_of_several_members_splits_its_bytes_by_tier() {
    // 2 nodes of 2, 1000 f32 (b = 4000 bytes). All-reduce: a flat ring's
    // 2 (p-1)/p b = 6000 per member; hierarchically 2 (k-1)/k b = 4000
    // inside the node and 2 (m-1)/m (b/k) = 2000 between nodes.
    use crate::metrics::{LinkTier, Traffic};
    use tasks::Kind;
    let t = Topology { workers: 4, per_node: 2, server: false };
    let world: Vec<usize> = (0..4).collect();
    let traffic = |kind, me| collective_traffic(&t, &Group::World, &world, kind, 1000, 4, me, 0);
    assert_eq!(traffic(Kind::AllReduce, 0), Traffic { bytes: 6000, tier: LinkTier::Both, inter: 2000 });
    // Reduce-scatter / all-gather: (p-1) b/p = 3000; (m-1) b/p = 1000 between nodes.
    assert_eq!(traffic(Kind::ReduceScatter, 3), Traffic { bytes: 3000, tier: LinkTier::Both, inter: 1000 });
    assert_eq!(traffic(Kind::AllGather, 1), Traffic { bytes: 3000, tier: LinkTier::Both, inter: 1000 });
    // Broadcast from 0 along the chain 0 -> 1 -> 2 -> 3: only 1 hands on across nodes, 3 sends nothing.
    let sent: Vec<(u64, u64)> = (0..4).map(|me| traffic(Kind::Broadcast, me)).map(|x| (x.bytes, x.inter)).collect();
    assert_eq!(sent, [(4000, 0), (4000, 4000), (4000, 0), (0, 0)]);
    // One tier only: all of the bytes in it.
    let node = collective_traffic(&t, &Group::Node, &[2, 3], Kind::AllReduce, 1000, 4, 0, 0);
    assert_eq!(node, Traffic { bytes: 4000, tier: LinkTier::Intra, inter: 0 });
    let across = collective_traffic(&t, &Group::Replicas, &[1, 3], Kind::AllReduce, 1000, 4, 0, 0);
    assert_eq!(across, Traffic { bytes: 4000, tier: LinkTier::Inter, inter: 4000 });
}

#[test]
fn real_runtime_queues_messages_at_the_receivers_link_as_the_simulator_does() {
    // Three workers send to the server at once over an emulated 100 kB/s
    // link, 1216, 816 and 416 bytes: 12.16, 8.16 and 4.16 ms alone. The
    // server's link takes one at a time, so together they hold the link for
    // 24.48 ms: the last lands at least that long after the first was sent
    // (sleeps only run late on a busy machine, and a late start leaves a
    // gap, so a lower bound is all this checks; without the queue the three
    // are done 12.16 ms after starting together).
    let spec = real::RealSpec {
        link: Some(LinkModel::flat(tier(1e5, 0.0))),
        topology: WORKERS_3_AND_A_SERVER,
        ..real::RealSpec::flat(3)
    };
    let spans = real::run(spec, |mut ctx| async move {
        let me = ctx.rank();
        if me == 3 {
            for _ in 0..3 {
                ctx.run(RecvAny { deadline_s: None }).await;
            }
            return Ok((f64::INFINITY, 0.0));
        }
        let start = ctx.now();
        ctx.run(Send { to: 3, msg: floats(me, (3 - me) * 100) }).await;
        Ok((start, ctx.now()))
    })
    .unwrap();
    let first = spans.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
    let last = spans.iter().map(|s| s.1).fold(0.0, f64::max);
    assert!(last - first >= 24.48e-3 - 1e-4, "sends {spans:?}: the messages did not queue at the server's link");
}

#[test]
fn real_runtime_runs_a_lone_participant_inside_a_kernel_pool_and_several_on_the_shared_one() {
    // Inside a pool a kernel's parallel loop starts on the participant's own
    // thread (runtime/kernel_pool.rs); outside, it is handed to the global pool.
    let in_pool = |workers: usize| {
        super::real::run(super::real::RealSpec::flat(workers), |_ctx| async move {
            Ok(rayon::current_thread_index().is_some())
        })
        .unwrap()
    };
    assert_eq!(in_pool(1), [true]);
    assert_eq!(in_pool(2), [false, false]);
}
