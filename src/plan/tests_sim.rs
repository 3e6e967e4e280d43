//! The plan against the simulator: each method runs a few rounds in
//! `--runtime sim` on shipped cluster profiles (a tiny model costed as the
//! profile's GPT-Neo-125M, as the CLI does), and the plan's time per
//! step/round must be within 5% of the simulated one (measured in steady
//! state, between the ends of the second and the last round of worker 0)
//! and its f32 memory equal to what the run measures.

use super::{plan_method, Costing, Precision};
use crate::data::sampler::shard_range;
use crate::model::{Gpt, GptConfig};
use crate::optim::{AdamWConfig, DecaySegments, LrSchedule, OptimizerConfig};
use crate::runtime::cluster::ClusterProfile;
use crate::strategy::method::{DemoSettings, InnerKind, ReplicatorKind};
use crate::strategy::{
    run_cluster, Co2Settings, DilocoSettings, DpuSettings, Hooks, LocalSgdSettings, Method, OverlapLocalSgdSettings,
    Plan, Runtime, SlowMoSettings, Worker,
};
use std::path::Path;
use std::sync::Arc;

pub(super) fn tiny() -> GptConfig {
    GptConfig { vocab_size: 37, n_embd: 16, n_layer: 2, n_head: 2, ctx: 8, dropout: 0.0 }
}

pub(super) fn workers(world: usize, batch: usize) -> Vec<Worker> {
    let toks: Arc<Vec<u32>> = Arc::new((0..4000u32).map(|i| (i * 7 + i * i / 3) % 37).collect());
    (0..world)
        .map(|r| {
            let shard = shard_range(toks.len(), r, world);
            Worker::new(Gpt::new(tiny(), 42).unwrap(), toks.clone(), shard, batch, tiny().ctx, 9, r).unwrap()
        })
        .collect()
}

pub(super) fn profile(name: &str) -> ClusterProfile {
    ClusterProfile::from_file(Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/clusters").join(name)).unwrap()
}

const TAU: u64 = 3;
const ROUNDS: u64 = 4;

/// Every method the plan predicts exactly (DeMo's replicators that exchange every step), with short rounds.
fn methods() -> Vec<Method> {
    vec![
        Method::Ddp,
        Method::Zero1,
        Method::Dpu(DpuSettings::default()),
        Method::AccoWp,
        Method::Acco,
        Method::LocalSgd(LocalSgdSettings { tau: TAU, ..LocalSgdSettings::default() }),
        Method::OverlapLocalSgd(OverlapLocalSgdSettings { tau: TAU, ..OverlapLocalSgdSettings::default() }),
        Method::SlowMo(SlowMoSettings { tau: TAU, ..SlowMoSettings::default() }),
        Method::Co2(Co2Settings { tau: TAU, ..Co2Settings::default() }),
        Method::Co2(Co2Settings { tau: TAU, shard_outer: true, ..Co2Settings::default() }),
        Method::Diloco(DilocoSettings { h: TAU, ..DilocoSettings::default() }),
        Method::Diloco(DilocoSettings { h: TAU, outer: crate::optim::OuterKind::Dn, ..DilocoSettings::default() }),
        // DeMo over the world; FlexDeMo hybrid-sharded (chunk 4: the tiny
        // model has enough chunk rows for 8 shards per node), with each
        // replicator that exchanges every step, blocking and overlapped.
        Method::Demo(DemoSettings::default()),
        Method::Demo(DemoSettings { overlap: true, compression: Some(0.05), ..DemoSettings::default() }),
        Method::FlexDemo(DemoSettings { chunk: 4, ..DemoSettings::default() }),
        Method::FlexDemo(DemoSettings { chunk: 4, overlap: true, ..DemoSettings::default() }),
        Method::FlexDemo(DemoSettings {
            chunk: 4,
            replicator: ReplicatorKind::Random,
            inner: InnerKind::DecoupledAdamw,
            ..DemoSettings::default()
        }),
        Method::FlexDemo(DemoSettings {
            chunk: 4,
            replicator: ReplicatorKind::Striding,
            overlap: true,
            ..DemoSettings::default()
        }),
        Method::FlexDemo(DemoSettings { chunk: 4, replicator: ReplicatorKind::Full, ..DemoSettings::default() }),
    ]
}

/// Simulated seconds per round of worker 0 in steady state, and its measured memory.
fn simulate(method: &Method, rt: &Runtime, world: usize, plan: &Plan) -> (f64, crate::strategy::MemoryBytes) {
    let reports = run_cluster(method, rt, workers(world, 2), plan, &Hooks::default()).unwrap();
    let r = &reports[0];
    let per = method.local_tau().unwrap_or(1) as usize;
    // Ends of rounds 2 and ROUNDS (1-based); a local method's round ends with its tau-th inner step.
    let end = |round: usize| r.points[round * per - 1].end_s;
    ((end(ROUNDS as usize) - end(2)) / (ROUNDS - 2) as f64, r.memory)
}

#[test]
fn plan_predicts_the_simulator_within_5_percent_and_its_memory_exactly() {
    let mut nvlink = profile("nvlink-1x8.toml");
    // One node: the intra tier only; costed as GPT-Neo-125M like the others.
    nvlink.timing = profile("a100-4x8-100g.toml").timing;
    let profiles = [nvlink, profile("a100-4x8-100g.toml"), profile("tcp-4x1-10g.toml"), profile("tcp-16x8-80g.toml")];
    let cfg = tiny();
    let n = crate::model::ParamLayout::new(&cfg).len;
    let batch = 2;
    for prof in &profiles {
        let world = prof.workers();
        let spec = prof.sim_spec(&cfg, n, batch * cfg.ctx, vec![1.0; world]).unwrap();
        let wire = prof.wire.unwrap_or_default();
        let layout = crate::model::ParamLayout::new(&cfg);
        for method in methods() {
            let steps = ROUNDS * method.local_tau().unwrap_or(1);
            let plan = Plan {
                wire,
                ..Plan::new(
                    steps,
                    LrSchedule::constant(1e-3),
                    OptimizerConfig::AdamW(AdamWConfig::default()),
                    DecaySegments::new(layout.decay_ranges()),
                )
            };
            let (sim_s, sim_mem) = simulate(&method, &Runtime::Sim(spec.clone()), world, &plan);
            let costing = Costing {
                params: n,
                tokens_per_micro_batch: batch * cfg.ctx,
                spec: spec.clone(),
                wire,
                grad_accum: 1,
                grad_clip: false,
                optimizer: plan.optimizer.clone(),
                fixed_micro_batches: None,
                device_memory: None,
                precision: Precision::F32,
                layout: Some(layout.clone()),
            };
            let p = plan_method(&method, &costing).unwrap();
            assert!(p.time.exact, "{method}");
            let err = (p.time.round_s - sim_s).abs() / sim_s;
            assert!(
                err < 0.05,
                "{} on {}: plan {} s vs sim {sim_s} s per round ({:.2}%)",
                method,
                prof.name,
                p.time.round_s,
                100.0 * err
            );
            let m = &p.memory;
            assert_eq!(
                (m.params, m.grads, m.comm_buffers, m.optimizer, m.outer),
                (sim_mem.params, sim_mem.grads, sim_mem.comm_buffers, sim_mem.optimizer, sim_mem.outer),
                "{method} on {}: plan's memory vs the run's",
                prof.name
            );
        }
    }
}
