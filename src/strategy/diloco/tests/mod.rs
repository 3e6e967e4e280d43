//! Tests of synchronous DiLoCo (Algorithm 1): equivalences with ddp and
//! local-sgd, a hand-written replay, the pseudo-gradient's sign, sim == real,
//! memory by category.

mod async_diloco;
mod defaults;
mod faults;
mod outer_wire;
mod streaming;

use crate::comm::{LinkModel, Tier};
use crate::optim::{OuterKind, OuterOpt};
use crate::runtime::{real::RealSpec, sim::SimSpec};
use crate::strategy::local::tests::{max_diff, sgd_plan};
use crate::strategy::tests::{bits, plan, sim, tiny, workers};
use crate::strategy::*;

pub(crate) fn diloco(h: u64, outer: OuterKind, lr: f32) -> Method {
    Method::Diloco(DilocoSettings { h, outer, outer_lr: lr, ..DilocoSettings::default() })
}

fn run(method: &Method, rt: &Runtime, world: usize, p: &Plan) -> Vec<WorkerReport> {
    run_cluster(method, rt, workers(world, 2), p, &Hooks::default()).unwrap()
}

#[test]
fn diloco_h1_sgd_outer_lr1_is_ddp_with_sgd() {
    // theta - 1 * mean_i(theta - (theta - lr g_i)) = theta - lr mean_i(g_i), to
    // rounding (about one ulp of |theta| < 2 per step: 8 steps, allowed 2e-6).
    // With the pseudo-gradient reversed (theta_i - theta, torchft's old bug)
    // the outer step moves theta by +lr mean(g): off by 2 lr |g| at once.
    let p = sgd_plan(8);
    let d = run(&Method::Ddp, &sim(3), 3, &p);
    let l = run(&diloco(1, OuterKind::Sgd, 1.0), &sim(3), 3, &p);
    let worst = max_diff(&d[0].params, &l[0].params);
    assert!(worst < 2e-6, "max |ddp - diloco(h 1, sgd lr 1)| = {worst}");
    for (a, b) in d[0].points.iter().zip(&l[0].points) {
        assert!((a.loss - b.loss).abs() < 1e-5, "{} vs {}", a.loss, b.loss);
    }
    assert_eq!(l[0].points.len(), 8);
}

#[test]
fn diloco_with_sgd_outer_lr1_is_local_sgd_and_nesterov_is_not() {
    // theta - (theta - avg) = avg to rounding: diloco with outer SGD at lr 1 is
    // parameter averaging every h steps (AdamW inner, 2 workers, rounds of 3, 3, 1).
    let p = plan(7, 1, 0.0);
    let l = run(&Method::LocalSgd(LocalSgdSettings { tau: 3, ..LocalSgdSettings::default() }), &sim(2), 2, &p);
    let d = run(&diloco(3, OuterKind::Sgd, 1.0), &sim(2), 2, &p);
    let worst = max_diff(&d[0].params, &l[0].params);
    assert!(worst < 1e-5, "max |local-sgd - diloco(sgd lr 1)| = {worst}");
    let n = run(&diloco(3, OuterKind::Nesterov, 0.7), &sim(2), 2, &p);
    assert!(max_diff(&n[0].params, &l[0].params) > 1e-4, "the outer optimizer should matter");
}

#[test]
fn diloco_with_one_worker_is_algorithm_1_written_out() {
    // One worker: the mean is x / 1 = x, so every bit matches a plain loop of
    // Algorithm 1 with the inner state kept across rounds (App. 10.1).
    let p = Plan { grad_accum: 2, ..plan(7, 2, 0.5) };
    let s = DilocoSettings { h: 3, outer: OuterKind::Dn, dn_buffer: Some(2), dn_c: 0.25, ..DilocoSettings::default() };
    let got = run(&Method::Diloco(s.clone()), &sim(1), 1, &p).remove(0);
    let mut w = workers(1, 2).remove(0);
    let n = w.model.num_params();
    let mut inner = p.optimizer.try_build(n).unwrap();
    let mut outer = OuterOpt::new(s.outer_config(1), n);
    let mut theta = w.model.params.clone();
    for (lo, hi) in [(0, 3), (3, 6), (6, 7)] {
        for step in lo..hi {
            w.model.zero_grads();
            for _ in 0..2 {
                w.micro_batch(0.5);
            }
            crate::optim::clip_global_norm(w.model.grads_mut(), 0.5);
            let (params, grads) = w.model.params_and_grads();
            inner.step(params, grads, p.schedule.lr(step), &p.decay);
        }
        let delta: Vec<f32> = theta.iter().zip(&w.model.params).map(|(old, new)| old - new).collect();
        outer.step(&mut theta, &delta);
        w.model.params.copy_from_slice(&theta);
    }
    assert_eq!(bits(&got.params), bits(&theta));
    assert_eq!(got.points.len(), 7, "one point per inner step");
    assert_eq!(got.optimizer_steps, 7, "inner steps, never reset");
}

#[test]
fn diloco_gives_the_same_bits_on_sim_and_real_and_sim_reproduces_itself() {
    let n = crate::model::ParamLayout::new(&tiny()).len as f64;
    let slow = LinkModel::flat(Tier::line(1e-3, 4.0 * n / 2.0));
    let slow_sim = Runtime::Sim(SimSpec { link: Some(slow), speeds: vec![1.0, 0.5], ..SimSpec::flat(2, 1.0, None) });
    let real = Runtime::Real(RealSpec::flat(2));
    let p = plan(5, 2, 1.0);
    for m in [diloco(2, OuterKind::Nesterov, 0.7), diloco(2, OuterKind::Dn, 0.7)] {
        let a = run(&m, &slow_sim, 2, &p);
        let b = run(&m, &real, 2, &p);
        // The sim again, its computes one at a time: the same bits.
        let c = run(&m, &crate::strategy::tests::sequential(&slow_sim), 2, &p);
        assert_eq!(bits(&a[0].params), bits(&b[0].params), "{m}: sim != real");
        assert_eq!(bits(&a[1].params), bits(&a[0].params), "{m}: replicas end on the same theta");
        let losses = |r: &[WorkerReport]| r[1].points.iter().map(|p| p.loss).collect::<Vec<_>>();
        assert_eq!(losses(&a), losses(&b), "{m}");
        assert_eq!(bits(&a[0].params), bits(&c[0].params), "{m}: sim is not reproducible");
        assert_eq!(a[0].times, c[0].times, "{m}: virtual time is not reproducible");
    }
}

#[test]
fn diloco_memory_counts_theta_and_the_outer_state() {
    let n = crate::model::ParamLayout::new(&tiny()).len;
    let p = plan(2, 1, 0.0);
    let mem = |m: Method| run(&m, &sim(2), 2, &p)[0].memory;
    // AdamW inner: two moments. Outer: theta, plus m (nesterov), plus Delta (dn).
    let s = mem(diloco(2, OuterKind::Sgd, 1.0));
    assert_eq!((s.params, s.grads, s.optimizer, s.comm_buffers, s.outer), (4 * n, 4 * n, 8 * n, 0, 4 * n));
    assert_eq!(mem(diloco(2, OuterKind::Nesterov, 0.7)).outer, 8 * n);
    assert_eq!(mem(diloco(2, OuterKind::Dn, 0.7)).outer, 12 * n);
}
