//! Tests of asynchronous DiLoCo with a server, run as a method by
//! `run_cluster` (which adds the server participant): with equal speeds and
//! a grace period covering everyone, DN with N = workers is sync DiLoCo;
//! sim reproduces itself; real completes; heterogeneous speeds without a
//! grace period let the fast worker run more rounds; DyLU sets each
//! worker's steps by its speed.

use super::tests::{bits, workers};
use super::tests_local::{max_diff, sgd_plan};
use super::*;
use crate::optim::OuterKind;
use crate::runtime::{real::RealSpec, sim::SimSpec};

fn dn(h: u64, n: u64, grace: f64) -> Method {
    Method::AsyncDiloco(AsyncDilocoSettings {
        h,
        outer: OuterKind::Dn,
        dn_buffer: n,
        dn_c: 0.0,
        grace,
        ..AsyncDilocoSettings::default()
    })
}

fn sim_speeds(speeds: Vec<f64>) -> Runtime {
    Runtime::Sim(SimSpec { speeds: speeds.clone(), ..SimSpec::flat(speeds.len(), 1.0, None) })
}

fn run(m: &Method, rt: &Runtime, k: usize, p: &Plan) -> Vec<WorkerReport> {
    run_cluster(m, rt, workers(k, 2), p, &Hooks::default()).unwrap()
}

#[test]
fn async_dn_with_equal_speeds_and_grace_covering_all_is_sync_diloco() {
    // Each group is a whole round; DN with N = 3 applies eps g_i / 3 per
    // arrival and the momentum step on the mean at the third: Nesterov on
    // the mean, as sync DiLoCo, to rounding (sums in another order).
    let p = sgd_plan(6);
    let sync = Method::Diloco(DilocoSettings { h: 2, ..DilocoSettings::default() });
    let rt = Runtime::Sim(SimSpec::flat(3, 1.0, None));
    let want = run(&sync, &rt, 3, &p);
    let got = run(&dn(2, 3, 1e9), &rt, 3, &p);
    assert_eq!(got.len(), 4, "3 workers and the server, last");
    let worst = max_diff(&want[0].params, &got[3].params);
    assert!(worst < 1e-5, "max |sync diloco - async dn| = {worst}");
    assert_eq!(got[3].optimizer_steps, 9, "3 rounds of 3 updates");
    assert_eq!(got[3].updates, [3, 3, 3], "updates applied per worker");
    assert_eq!(got[3].points.len(), 9, "the server's curve: one point per update");
    assert_eq!(got[3].points.last().map(|p| p.step), Some(9));
    assert_eq!(got[3].points.iter().map(|p| p.micro_batches).sum::<u64>(), 0, "workers count micro-batches");
    // The run's model is the server's (its piece covers it all), no worker's.
    assert_eq!(got[3].model.as_ref().map(|m| bits(&m.values)), Some(bits(&got[3].params)));
    assert!(got[..3].iter().all(|r| r.model.is_none() && r.updates.is_empty()));
    for r in &got[..3] {
        assert_eq!(r.optimizer_steps, 6, "worker {}: its share of t_max", r.rank);
    }
    // Vanilla async (Nesterov on every arrival) is another method.
    let nesterov = Method::AsyncDiloco(AsyncDilocoSettings { h: 2, grace: 1e9, ..AsyncDilocoSettings::default() });
    let v = run(&nesterov, &rt, 3, &p);
    assert!(max_diff(&want[0].params, &v[3].params) > 1e-4);
}

#[test]
fn async_diloco_is_reproducible_in_sim_and_completes_on_threads() {
    let p = sgd_plan(6);
    let rt = sim_speeds(vec![1.0, 0.5]);
    let a = run(&dn(2, 2, 0.0), &rt, 2, &p);
    let b = run(&dn(2, 2, 0.0), &rt, 2, &p);
    assert_eq!(bits(&a[2].params), bits(&b[2].params));
    assert_eq!(a[2].times, b[2].times);
    // No grace period, worker 1 half as fast: worker 0 runs more rounds.
    assert!(a[0].optimizer_steps > a[1].optimizer_steps, "{} vs {}", a[0].optimizer_steps, a[1].optimizer_steps);
    assert!(a[2].updates[0] > a[2].updates[1], "{:?}", a[2].updates);
    assert!(a[0].optimizer_steps + a[1].optimizer_steps >= 12, "t_max = 6 x 2 local steps reached");
    let r = run(&dn(2, 2, 1e9), &Runtime::Real(RealSpec::flat(2)), 2, &p);
    assert_eq!(r[2].params.len(), a[2].params.len());
    assert!(r[2].params.iter().all(|x| x.is_finite()));
    assert_eq!(r[0].optimizer_steps + r[1].optimizer_steps, 12);
}

#[test]
fn dylu_changes_each_workers_step_count_by_its_speed() {
    // Speeds 1 and 0.5, H = 4: eq. 6 gives 4 and 2 steps per round, so both
    // finish a round at the same virtual time and, with a grace period, sync together.
    let p = sgd_plan(4);
    let rt = sim_speeds(vec![1.0, 0.5]);
    let dylu = |on| Method::AsyncDiloco(AsyncDilocoSettings { dylu: on, h: 4, grace: 0.5, ..Default::default() });
    let r = run(&dylu(true), &rt, 2, &p);
    // t_max = 8 local steps: rounds of 4 + 2 = 6, then 6 more: 8 + 4 steps.
    assert_eq!((r[0].optimizer_steps, r[1].optimizer_steps), (8, 4));
    assert_eq!((r[0].points.len(), r[1].points.len()), (8, 4), "one journal point per inner step");
    assert_eq!(r[2].updates, [2, 2]);
    // Without DyLU each worker runs H = 4 per round.
    let plain = run(&dylu(false), &rt, 2, &p);
    assert_eq!((plain[0].optimizer_steps % 4, plain[1].optimizer_steps % 4), (0, 0));
}

#[test]
fn real_threads_agree_with_sim_when_timing_does_not_matter() {
    // Equal speeds and a grace period covering everyone: each round is
    // synchronous on threads too; only the order in which the server
    // accumulates DN's buffer may differ (rounding).
    let p = sgd_plan(4);
    let s = run(&dn(2, 3, 1e9), &Runtime::Sim(SimSpec::flat(3, 1.0, None)), 3, &p);
    let r = run(&dn(2, 3, 1e9), &Runtime::Real(RealSpec::flat(3)), 3, &p);
    assert_eq!(r[3].updates, s[3].updates);
    let worst = max_diff(&s[3].params, &r[3].params);
    assert!(worst < 1e-5, "max |sim - real| = {worst}");
}

#[test]
fn one_worker_and_a_server_is_sync_diloco_on_one_worker() {
    // --workers 1 with async-diloco: the server applies each update in turn.
    let p = sgd_plan(4);
    let rt = Runtime::Sim(SimSpec::flat(1, 1.0, None));
    let sync = run(&Method::Diloco(DilocoSettings { h: 2, ..DilocoSettings::default() }), &rt, 1, &p);
    let a = run(&Method::AsyncDiloco(AsyncDilocoSettings { h: 2, ..AsyncDilocoSettings::default() }), &rt, 1, &p);
    assert_eq!(a[1].updates, [2]);
    assert_eq!(bits(&sync[0].params), bits(&a[1].params));
}
