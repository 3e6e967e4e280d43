//! Equivalence tests that tie the strategies and runtimes together.

mod diverged;
mod llama;
mod parallel_sim;
mod resume;
mod resume_async;
mod stop;

use super::*;
use crate::comm::{LinkModel, Tier};
use crate::data::sampler::shard_range;
use crate::model::{Gpt, GptConfig};
use crate::optim::{AdamWConfig, DecaySegments, LrSchedule, OptimizerConfig};
use crate::runtime::{real::RealSpec, sim::SimSpec};
use std::sync::Arc;

pub(super) fn tiny() -> GptConfig {
    GptConfig::gpt2(37, 16, 2, 2, 8)
}

pub(super) fn tokens() -> Arc<Vec<u32>> {
    Arc::new((0..4000u32).map(|i| (i * 7 + i * i / 3) % 37).collect())
}

pub(super) fn plan(steps: u64, accum: usize, clip: f32) -> Plan {
    plan_of(&tiny(), steps, accum, clip)
}

/// [`plan`] for a model of shape `cfg` (its weight-decay ranges).
pub(super) fn plan_of(cfg: &GptConfig, steps: u64, accum: usize, clip: f32) -> Plan {
    let layout = crate::model::ParamLayout::new(cfg);
    Plan {
        steps,
        grad_accum: accum,
        schedule: LrSchedule { max_lr: 1e-2, warmup_steps: 2, total_steps: steps, min_lr: 1e-3 },
        optimizer: OptimizerConfig::AdamW(AdamWConfig::default()),
        decay: DecaySegments::new(layout.decay_ranges()),
        grad_clip: clip,
        ..Plan::new(steps, LrSchedule::constant(0.0), OptimizerConfig::default(), DecaySegments::none())
    }
}

/// `world` workers, each with its shard of the same token stream; same init.
pub(super) fn workers(world: usize, batch: usize) -> Vec<Worker> {
    workers_of(&tiny(), world, batch)
}

/// [`workers`] of a model of shape `cfg`, on windows of up to 16 tokens.
pub(super) fn workers_of(cfg: &GptConfig, world: usize, batch: usize) -> Vec<Worker> {
    let toks = tokens();
    let seq = cfg.ctx.min(16);
    (0..world)
        .map(|r| {
            let model = Gpt::new(cfg.clone(), 42).unwrap();
            Worker::new(model, toks.clone(), shard_range(toks.len(), r, world), batch, seq, 9, r).unwrap()
        })
        .collect()
}

pub(super) fn sim(world: usize) -> Runtime {
    Runtime::Sim(SimSpec::flat(world, 1.0, None))
}

/// `rt` with the simulator's computes run one at a time on the executor's
/// thread ([`SimSpec::parallel`] off): the bits must not change. A real
/// runtime is returned as it is.
pub(super) fn sequential(rt: &Runtime) -> Runtime {
    match rt {
        Runtime::Sim(s) => Runtime::Sim(SimSpec { parallel: false, ..s.clone() }),
        Runtime::Real(_) => rt.clone(),
    }
}

pub(super) fn real(world: usize) -> Runtime {
    Runtime::Real(RealSpec::flat(world))
}

pub(super) fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn replicas_stay_identical_under_ddp_and_zero1() {
    for method in [Method::Ddp, Method::Zero1] {
        let reports = run_cluster(&method, &sim(3), workers(3, 2), &plan(4, 2, 1.0), &Hooks::default()).unwrap();
        for r in &reports[1..] {
            assert_eq!(bits(&r.params), bits(&reports[0].params), "{method:?}: replicas diverged");
        }
        assert_eq!(reports[0].points.iter().map(|p| p.loss).collect::<Vec<_>>().len(), 4);
    }
}

#[test]
fn sim_and_real_runtimes_give_the_same_bits() {
    for method in [Method::Ddp, Method::Zero1] {
        let a = run_cluster(&method, &sim(2), workers(2, 2), &plan(3, 2, 0.0), &Hooks::default()).unwrap();
        let b = run_cluster(&method, &real(2), workers(2, 2), &plan(3, 2, 0.0), &Hooks::default()).unwrap();
        assert_eq!(bits(&a[0].params), bits(&b[0].params), "{method:?}");
        assert_eq!(
            a[1].points.iter().map(|p| p.loss).collect::<Vec<_>>(),
            b[1].points.iter().map(|p| p.loss).collect::<Vec<_>>(),
            "{method:?}"
        );
    }
}

#[test]
fn zero1_equals_ddp_bit_for_bit_without_clipping() {
    // 3 workers: the flat vector needs padding to a multiple of 3.
    assert_ne!(crate::model::ParamLayout::new(&tiny()).len % 3, 0);
    let d = run_cluster(&Method::Ddp, &sim(3), workers(3, 2), &plan(5, 1, 0.0), &Hooks::default()).unwrap();
    let z = run_cluster(&Method::Zero1, &sim(3), workers(3, 2), &plan(5, 1, 0.0), &Hooks::default()).unwrap();
    assert_eq!(bits(&d[0].params), bits(&z[0].params));
}

#[test]
fn zero1_equals_ddp_with_clipping_to_rounding() {
    // The global norm is summed in another order (per shard, then across
    // workers), so equality holds to float rounding only.
    let d = run_cluster(&Method::Ddp, &sim(2), workers(2, 2), &plan(5, 1, 0.05), &Hooks::default()).unwrap();
    let z = run_cluster(&Method::Zero1, &sim(2), workers(2, 2), &plan(5, 1, 0.05), &Hooks::default()).unwrap();
    let worst = d[0].params.iter().zip(&z[0].params).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(worst < 1e-5, "max |ddp - zero1| = {worst}");
}

#[test]
fn n_workers_equal_one_worker_with_n_times_the_batch() {
    // Same data: worker r's windows are the ones the single worker would draw
    // as rows r*b..(r+1)*b. Build that by giving the single worker the
    // concatenated batches: run each worker's sampler and compare gradients.
    let world = 2;
    let p = plan(3, 1, 0.0);
    let multi = run_cluster(&Method::Ddp, &sim(world), workers(world, 2), &p, &Hooks::default()).unwrap();
    // One worker whose micro-batch is the two workers' micro-batches stacked.
    let toks = tokens();
    let mut samplers: Vec<_> = (0..world)
        .map(|r| crate::data::sampler::WindowSampler::new(shard_range(toks.len(), r, world), tiny().ctx, 9, r).unwrap())
        .collect();
    let mut model = Gpt::new(tiny(), 42).unwrap();
    let mut opt = p.optimizer.try_build(model.num_params()).unwrap();
    let t = tiny().ctx;
    for step in 0..p.steps {
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for s in samplers.iter_mut() {
            let (mut xi, mut yi) = (vec![0; 2 * t], vec![0; 2 * t]);
            s.fill_batch(&toks, &mut xi, &mut yi);
            x.extend(xi);
            y.extend(yi);
        }
        model.zero_grads();
        model.forward_backward(&x, &y, 2 * world, t, 1.0);
        let (params, grads) = model.params_and_grads();
        opt.step(params, grads, p.schedule.lr(step), &p.decay);
    }
    let worst = multi[0].params.iter().zip(&model.params).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(worst < 1e-5, "max |N workers - 1 worker x N batch| = {worst}");
}

#[test]
fn sim_is_bit_reproducible() {
    let run =
        |rt: &Runtime| run_cluster(&Method::Zero1, rt, workers(4, 1), &plan(3, 2, 1.0), &Hooks::default()).unwrap();
    let (a, b, c) = (run(&sim(4)), run(&sim(4)), run(&sequential(&sim(4))));
    assert_eq!(bits(&a[3].params), bits(&b[3].params));
    assert_eq!(a[2].times.total_s, b[2].times.total_s);
    assert_eq!(bits(&a[3].params), bits(&c[3].params), "sequential sim != parallel sim");
    assert_eq!(a[2].times, c[2].times);
}

#[test]
fn sim_virtual_time_follows_the_cost_model_by_hand() {
    // 2 workers, 2 micro-batches of 1 s per step, 3 steps, all-reduce of n
    // floats over 1 GB/s with 1 ms latency: 2(p-1) alpha + 2(p-1)/p * 4n / bw.
    let n = crate::model::ParamLayout::new(&tiny()).len as f64;
    let tier = Tier::line(1e-3, 1e9);
    let spec = SimSpec { speeds: vec![1.0, 0.5], link: Some(LinkModel::flat(tier)), ..SimSpec::flat(2, 1.0, None) };
    let r = run_cluster(&Method::Ddp, &Runtime::Sim(spec), workers(2, 1), &plan(3, 2, 0.0), &Hooks::default()).unwrap();
    let comm = 2.0 * 1e-3 + 4.0 * n / 1e9;
    // Worker 1 runs at half speed: 4 s of compute per step; worker 0 waits 2 s.
    let want = 3.0 * (4.0 + comm);
    for w in &r {
        assert!((w.times.total_s - want).abs() < 1e-9, "rank {}: {} vs {want}", w.rank, w.times.total_s);
    }
    assert!((r[0].times.idle_s - 3.0 * (2.0 + comm)).abs() < 1e-9, "fast worker idles while the slow one computes");
    assert!((r[1].times.idle_s - 3.0 * comm).abs() < 1e-9);
    assert_eq!(r[0].times.micro_batches, 6);
}

#[test]
fn memory_by_category_follows_table_1() {
    // f32 everywhere here: AdamW's state is m and v (8 bytes/param) for DDP;
    // a sharded AdamW also keeps its shard of master parameters, so 12
    // bytes per parameter of its shard: Table 1's K = 12 over N.
    let n = crate::model::ParamLayout::new(&tiny()).len;
    let padded = crate::comm::padded_len(n, 4);
    let d = run_cluster(&Method::Ddp, &sim(4), workers(4, 1), &plan(1, 1, 0.0), &Hooks::default()).unwrap();
    assert_eq!(d[0].memory.optimizer, 8 * n);
    assert_eq!(d[0].memory.comm_buffers, 0);
    let z = run_cluster(&Method::Zero1, &sim(4), workers(4, 1), &plan(1, 1, 0.0), &Hooks::default()).unwrap();
    assert_eq!(z[0].memory.optimizer, 12 * padded / 4);
    let a = run_cluster(&Method::Acco, &sim(4), workers(4, 1), &plan(1, 1, 0.0), &Hooks::default()).unwrap();
    assert!(a[0].memory.comm_buffers > z[0].memory.comm_buffers, "ACCO keeps g~ between rounds");
    assert_eq!(a[0].memory.optimizer, z[0].memory.optimizer);
    // The formula itself, by hand: 7.5B params, 64 workers, K = 12.
    let gb = |m| table1_bytes(&m, 7.5e9, 64.0, 12.0) / 1e9;
    assert!((gb(Method::Ddp) - 120.0).abs() < 1e-9);
    assert!((gb(Method::Zero1) - 31.40625).abs() < 1e-9);
    assert!((gb(Method::Acco) - 46.40625).abs() < 1e-9);
}

#[test]
fn fixed_micro_batches_make_overlapping_methods_timing_independent() {
    // With k = 2 per stage, ACCO computes 1 (g~(0)) + 2 stages x 2 per round,
    // DPU and ACCO-wp 1 (g(-1)) + 2 per round, whatever the link; and the real runtime
    // (timing-dependent without it) gives the simulator's bits.
    let steps = 3;
    let fixed = Plan { fixed_micro_batches: Some(2), ..plan(steps, 1, 0.0) };
    let slow = Runtime::Sim(SimSpec {
        speeds: vec![1.0; 2],
        link: Some(LinkModel::flat(Tier::line(50.0, 1e9))),
        ..SimSpec::flat(2, 1.0, None)
    });
    for (method, per_round, extra) in
        [(Method::Acco, 4, 1), (Method::Dpu(DpuSettings { warmup_steps: 0 }), 2, 1), (Method::AccoWp, 2, 1)]
    {
        let a = run_cluster(&method, &slow, workers(2, 2), &fixed, &Hooks::default()).unwrap();
        let b = run_cluster(&method, &real(2), workers(2, 2), &fixed, &Hooks::default()).unwrap();
        assert_eq!(a[0].times.micro_batches, steps * per_round + extra, "{method:?}");
        assert_eq!(bits(&a[0].params), bits(&b[0].params), "{method:?}: real != sim");
        // Without the cap the 100 s link round would be filled with micro-batches.
        let free = run_cluster(&method, &slow, workers(2, 2), &plan(steps, 1, 0.0), &Hooks::default()).unwrap();
        assert!(free[0].times.micro_batches > a[0].times.micro_batches, "{method:?}");
    }
}
