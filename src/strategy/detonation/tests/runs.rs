//! DeMo and FlexDeMo runs tied to each other and to ddp / zero1, on the
//! simulator and the real runtime.

use crate::comm::{LinkModel, Tier};
use crate::metrics::{Lane, LinkTier};
use crate::optim::{DecaySegments, LrSchedule, OptimizerConfig, SgdConfig};
use crate::runtime::{real::RealSpec, sim::SimSpec, Topology};
use crate::strategy::tests::{bits, plan, workers};
use crate::strategy::{
    run_cluster, DemoSettings, Hooks, InnerKind, Method, Plan, ReplicatorKind, Runtime, WorkerReport,
};

/// `workers` in nodes of `per_node` on the simulator (optionally a slow link).
fn sim_nodes(workers: usize, per_node: usize, link: Option<LinkModel>) -> Runtime {
    Runtime::Sim(SimSpec {
        topology: Topology { workers, per_node, server: false },
        link,
        ..SimSpec::flat(workers, 1.0, None)
    })
}

fn run(m: &Method, rt: &Runtime, n: usize, p: &Plan) -> Vec<WorkerReport> {
    run_cluster(m, rt, workers(n, 2), p, &Hooks::default()).unwrap()
}

/// SGD at a constant learning rate, no clipping, no decay.
fn sgd(steps: u64, lr: f32) -> Plan {
    Plan::new(steps, LrSchedule::constant(lr), OptimizerConfig::Sgd(SgdConfig::default()), DecaySegments::none())
}

fn demo(s: DemoSettings) -> Method {
    Method::Demo(s)
}

fn flex(s: DemoSettings) -> Method {
    Method::FlexDemo(s)
}

fn no_sign(r: ReplicatorKind) -> DemoSettings {
    DemoSettings { replicator: r, sign: false, ..DemoSettings::default() }
}

#[test]
fn demo_keeps_replicas_identical_and_sim_equals_real() {
    let p = plan(3, 1, 1.0);
    for s in [DemoSettings::default(), DemoSettings { replicator: ReplicatorKind::Random, ..DemoSettings::default() }] {
        let a = run(&demo(s.clone()), &sim_nodes(3, 3, None), 3, &p);
        for r in &a[1..] {
            assert_eq!(bits(&r.params), bits(&a[0].params), "replicas diverged");
        }
        let b = run(&demo(s.clone()), &Runtime::Real(RealSpec::flat(3)), 3, &p);
        assert_eq!(bits(&a[0].params), bits(&b[0].params), "{s:?}: sim != real");
        let seq = crate::strategy::tests::sequential(&sim_nodes(3, 3, None));
        assert_eq!(bits(&a[0].params), bits(&run(&demo(s), &seq, 3, &p)[0].params), "reproducible, sequential sim too");
        assert!(bits(&a[0].params) != bits(&workers(1, 2)[0].model.params), "it trained");
    }
}

#[test]
fn flexdemo_with_one_worker_per_node_is_demo() {
    let p = plan(3, 1, 1.0);
    for r in [ReplicatorKind::Demo, ReplicatorKind::Striding] {
        let s = DemoSettings { replicator: r, ..DemoSettings::default() };
        let d = run(&demo(s.clone()), &sim_nodes(2, 2, None), 2, &p);
        let f = run(&flex(s), &sim_nodes(2, 1, None), 2, &p);
        assert_eq!(bits(&d[0].params), bits(&f[0].params), "{r:?}");
    }
}

#[test]
fn flexdemo_with_one_node_is_sharded_sgd() {
    // One node of 3: the replication group is each worker alone, Q = lr g
    // sent whole. Without sign, at lr 1 (steps 2 and 9 both scale by lr),
    // that is zero1 with SGD, bit for bit.
    let p = sgd(3, 1.0);
    let f = run(&flex(no_sign(ReplicatorKind::Demo)), &sim_nodes(3, 3, None), 3, &p);
    let z = run(&Method::Zero1, &sim_nodes(3, 3, None), 3, &p);
    assert_eq!(bits(&f[0].params), bits(&z[0].params));
    assert_eq!(bits(&f[2].params), bits(&z[2].params));
}

#[test]
fn diloco_every_step_with_inner_sgd_is_ddp() {
    // n = 1, diloco: the raw gradient averaged every step, p - lr mean(g):
    // ddp's SGD step at any lr. diloco-delta: the whole momentum (lr g, the
    // previous one having left) averaged every step; without sign at lr 1
    // (its step is lr Q = lr^2 g) that is ddp's SGD step too.
    for (kind, lr) in [(ReplicatorKind::Diloco, 0.1), (ReplicatorKind::DilocoDelta, 1.0)] {
        let s = DemoSettings { every: Some(1), ..no_sign(kind) };
        let p = sgd(3, lr);
        let d = run(&demo(s.clone()), &sim_nodes(3, 3, None), 3, &p);
        let ddp = run(&Method::Ddp, &sim_nodes(3, 3, None), 3, &p);
        assert_eq!(bits(&d[0].params), bits(&ddp[0].params), "{kind:?}");
        // And as FlexDeMo with one worker per node.
        let f = run(&flex(s), &sim_nodes(3, 1, None), 3, &p);
        assert_eq!(bits(&f[1].params), bits(&ddp[1].params), "{kind:?}");
    }
}

#[test]
fn flexdemo_diloco_moves_the_parameters_on_every_step() {
    // 2 nodes x 2, n = 3: steps 1 and 2 exchange nothing between nodes, yet
    // each takes a sign-SGD step on its node's mean gradient: every
    // parameter with a non-zero gradient moves by exactly lr = 0.01.
    let s = DemoSettings {
        every: Some(3),
        ..DemoSettings { replicator: ReplicatorKind::Diloco, ..DemoSettings::default() }
    };
    let start = workers(1, 2)[0].model.params.clone();
    let after = |steps: u64, s: &DemoSettings| run(&flex(s.clone()), &sim_nodes(4, 2, None), 4, &sgd(steps, 0.01));
    let (one, two) = (after(1, &s), after(2, &s));
    for (from, to) in [(&start, &one[0].params), (&one[0].params, &two[0].params)] {
        let moved: Vec<f32> = from.iter().zip(to).map(|(a, b)| (a - b).abs()).filter(|d| *d > 0.0).collect();
        assert!(moved.len() > from.len() * 9 / 10, "{} of {} moved", moved.len(), from.len());
        assert!(moved.iter().all(|d| (d - 0.01).abs() < 1e-6), "sign steps of lr");
    }
    assert_eq!(bits(&one[0].params), bits(&one[1].params), "a node shares its shards");
    assert!(bits(&one[0].params) != bits(&one[2].params), "nodes drift apart between exchanges");
    // diloco-delta on the same run: Q = 0 until step 3, nothing moves.
    let d = DemoSettings { replicator: ReplicatorKind::DilocoDelta, ..s };
    assert_eq!(bits(&after(2, &d)[0].params), bits(&start));
}

#[test]
fn full_replicator_with_decoupled_adamw_is_hybrid_sharded_adamw_is_zero1() {
    // 2 nodes x 2: node-mean then replica-mean (a mean of means) against
    // zero1's world mean: equal to float rounding, which AdamW's first
    // steps (~ sign of g) can amplify where g is ~0. Tolerance 1e-5 on
    // parameters of magnitude ~0.1 after 4 steps at lr <= 1e-2.
    let p = plan(4, 1, 0.0);
    let wd = match &p.optimizer {
        OptimizerConfig::AdamW(c) => c.weight_decay,
        OptimizerConfig::Sgd(_) => unreachable!(),
    };
    let s = DemoSettings { inner: InnerKind::DecoupledAdamw, weight_decay: wd, ..no_sign(ReplicatorKind::Full) };
    let f = run(&flex(s), &sim_nodes(4, 2, None), 4, &p);
    let z = run(&Method::Zero1, &sim_nodes(4, 4, None), 4, &p);
    let worst = f[0].params.iter().zip(&z[0].params).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(worst < 1e-5, "max |flexdemo full - zero1| = {worst}");
    for r in &f[1..] {
        assert_eq!(bits(&r.params), bits(&f[0].params), "replicas diverged");
    }
}

#[test]
fn exactly_one_exchange_per_step_with_the_formula_bytes() {
    // DeMo over 3 workers: one all-gather of the whole model's pairs per step;
    // a ring all-gather sends (p - 1) x payload.
    let steps = 3;
    let r = run(&demo(DemoSettings::default()), &sim_nodes(3, 3, None), 3, &plan(steps, 1, 1.0));
    let payload = r[0].exchange.unwrap().payload_bytes;
    // tiny: every tensor's chunks send min(32, chunk) pairs, u16 indices (the widest chunk is 64 x 16).
    let layout = crate::model::ParamLayout::new(&crate::strategy::tests::tiny());
    let pairs: usize = layout
        .tensors
        .iter()
        .map(|t| {
            let (rows, cols, h, w) = crate::strategy::detonation::shard::tensor_grid(&t.shape, 64);
            (rows / h) * (cols / w) * (h * w).min(32)
        })
        .sum();
    assert_eq!(payload, pairs * (2 + 4));
    for w in &r {
        for t in 0..steps {
            let ex: Vec<_> = w.events.spans().iter().filter(|s| s.round == t && s.name == "all_gather_bytes").collect();
            assert_eq!(ex.len(), 1, "worker {} round {t}: one batched exchange", w.rank);
            assert_eq!(ex[0].bytes, 2 * payload as u64);
            let others = w.events.spans().iter().filter(|s| s.round == t && s.lane == Lane::Comm).count();
            assert_eq!(others, 1, "and nothing else on the wire (no sharding)");
        }
    }
    // FlexDeMo on 2 nodes x 2: the exchange crosses nodes between 2 replicas.
    let f = run(&flex(DemoSettings::default()), &sim_nodes(4, 2, None), 4, &plan(steps, 1, 0.0));
    let payload = f[0].exchange.unwrap().payload_bytes;
    let per_round: Vec<usize> = (0..steps)
        .map(|t| f[0].events.spans().iter().filter(|s| s.round == t && s.name == "all_gather_bytes").count())
        .collect();
    assert_eq!(per_round, vec![1; steps as usize]);
    let bytes: u64 = f[0].events.spans().iter().filter(|s| s.name == "all_gather_bytes").map(|s| s.bytes).sum();
    assert_eq!(bytes, steps * payload as u64);
    // The spans say which links they crossed: the exchange between nodes,
    // the gradients' reduce-scatter and the parameters' all-gather inside.
    for sp in f[0].events.spans().iter().filter(|s| s.lane == Lane::Comm) {
        let want = if sp.name == "all_gather_bytes" { LinkTier::Inter } else { LinkTier::Intra };
        assert_eq!(sp.tier, Some(want), "{}", sp.name);
    }
    let sum =
        crate::metrics::summarize(&f.iter().flat_map(|r| r.events.spans().to_vec()).collect::<Vec<_>>(), 4, 0).unwrap();
    assert_eq!(sum.bytes_inter, 4 * steps * payload as u64);
    assert_eq!(sum.bytes_intra + sum.bytes_inter, sum.bytes_sent);
}

#[test]
fn flexdemo_on_two_nodes_gives_the_same_bits_on_sim_and_threads() {
    let p = plan(3, 1, 1.0);
    let topology = Topology { workers: 4, per_node: 2, server: false };
    for r in [
        ReplicatorKind::Demo,
        ReplicatorKind::Random,
        ReplicatorKind::Striding,
        ReplicatorKind::StridingElement,
        ReplicatorKind::Diloco,
        ReplicatorKind::DilocoDelta,
    ] {
        let s = DemoSettings { replicator: r, compression: Some(0.5), ..DemoSettings::default() };
        let a = run(&flex(s.clone()), &sim_nodes(4, 2, None), 4, &p);
        let b = run(&flex(s), &Runtime::Real(RealSpec { topology, ..RealSpec::flat(4) }), 4, &p);
        for (x, y) in a.iter().zip(&b) {
            assert!(bits(&x.params) == bits(&y.params), "{r:?}: worker {} differs between sim and threads", x.rank);
        }
    }
}

#[test]
fn overlap_keeps_the_exchange_in_flight_during_the_next_micro_batch() {
    // A slow link: the exchange of step t takes longer than a micro-batch.
    let n = crate::model::ParamLayout::new(&crate::strategy::tests::tiny()).len as f64;
    let link = LinkModel::flat(Tier::line(0.5, n));
    let rt = sim_nodes(2, 2, Some(link));
    let overlapping = |w: &WorkerReport| {
        let spans = w.events.spans();
        spans.iter().filter(|s| s.name == "all_gather_bytes").any(|e| {
            spans.iter().any(|c| {
                c.name == "micro-batch" && c.round == e.round + 1 && c.start_s < e.end_s && e.start_s < c.end_s
            })
        })
    };
    let off = run(&demo(DemoSettings::default()), &rt, 2, &plan(4, 1, 1.0));
    let on = run(&demo(DemoSettings { overlap: true, ..DemoSettings::default() }), &rt, 2, &plan(4, 1, 1.0));
    assert!(!overlapping(&off[0]), "the reference's way: every exchange waited on at once");
    assert!(overlapping(&on[0]), "step t's exchange runs under step t+1's micro-batch");
    assert!(on[0].times.total_s < off[0].times.total_s);
    assert_eq!(bits(&on[0].params), bits(&on[1].params));
    // One step stale: the first step applies nothing, the last exchange is never applied.
    assert_eq!(on[0].points.iter().map(|p| p.micro_batches).collect::<Vec<_>>(), vec![0, 1, 1, 1]);
    assert_eq!(on[0].optimizer_steps, 3);
}

#[test]
fn weight_decay_changes_a_run() {
    let p = plan(2, 1, 1.0);
    let a = run(&demo(DemoSettings::default()), &sim_nodes(2, 2, None), 2, &p);
    let b = run(&demo(DemoSettings { weight_decay: 0.5, ..DemoSettings::default() }), &sim_nodes(2, 2, None), 2, &p);
    // A decayed element (in wte) differs; an undecayed one (ln_f bias, sign steps only) does not.
    let layout = crate::model::ParamLayout::new(&crate::strategy::tests::tiny());
    let i = layout.wte.start;
    assert_ne!(a[0].params[i], b[0].params[i]);
    let j = layout.lnf_b.start;
    assert_eq!(a[0].params[j], b[0].params[j]);
}
