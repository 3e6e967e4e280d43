//! What the plan-against-simulator tests share (tests_sim.rs,
//! tests_hetero.rs, tests_straggle.rs): a tiny model, its workers over a
//! fixed token stream, the shipped cluster profiles, and the plan and
//! costing of a short sim run.

use super::{Costing, Precision};
use crate::data::sampler::shard_range;
use crate::model::{Gpt, GptConfig};
use crate::optim::{AdamWConfig, DecaySegments, LrSchedule, OptimizerConfig};
use crate::runtime::cluster::ClusterProfile;
use crate::strategy::{Plan, Worker};
use std::path::Path;
use std::sync::Arc;

pub(super) fn tiny() -> GptConfig {
    GptConfig::gpt2(37, 16, 2, 2, 8)
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

/// The plan of a short sim run: `steps`, constant lr, AdamW, over `wire`.
pub(super) fn sim_plan(steps: u64, wire: crate::comm::WireDtype, layout: &crate::model::ParamLayout) -> Plan {
    Plan {
        wire,
        ..Plan::new(
            steps,
            LrSchedule::constant(1e-3),
            OptimizerConfig::AdamW(AdamWConfig::default()),
            DecaySegments::new(layout.decay_ranges()),
        )
    }
}

/// What plan costs for the tiny model under `spec`, as the run `plan` does (f32, known layout).
pub(super) fn sim_costing(
    spec: crate::runtime::sim::SimSpec,
    plan: &Plan,
    batch: usize,
    layout: &crate::model::ParamLayout,
) -> Costing {
    Costing {
        params: layout.len,
        tokens_per_micro_batch: batch * tiny().ctx,
        spec,
        wire: plan.wire,
        grad_accum: 1,
        grad_clip: false,
        optimizer: plan.optimizer.clone(),
        fixed_micro_batches: None,
        device_memory: None,
        precision: Precision::F32,
        layout: Some(layout.clone()),
    }
}
