//! Tests of asynchronous DiLoCo with a server: with equal speeds and a
//! grace period covering everyone, DN with N = workers is sync DiLoCo;
//! sim reproduces itself; real completes; heterogeneous speeds without a
//! grace period let the fast worker run more rounds.

use super::async_diloco::{run_with_server, Rt, ServerOptions};
use super::tests::{bits, workers};
use super::tests_local::{max_diff, sgd_plan};
use super::*;
use crate::optim::OuterKind;
use crate::runtime::{real::RealSpec, sim::SimSpec};

fn grace(grace_s: f64) -> ServerOptions {
    ServerOptions { grace_s, dylu_speeds: None }
}

fn dn(h: u64, n: u64) -> DilocoSettings {
    DilocoSettings { h, outer: OuterKind::Dn, dn_buffer: n, dn_c: 0.0, ..DilocoSettings::default() }
}

#[test]
fn async_dn_with_equal_speeds_and_grace_covering_all_is_sync_diloco() {
    // Each group is a whole round; DN with N = 3 applies eps g_i / 3 per
    // arrival and the momentum step on the mean at the third: Nesterov on
    // the mean, as sync DiLoCo, to rounding (sums in another order).
    let p = sgd_plan(6);
    let sync = Method::Diloco(DilocoSettings { h: 2, ..DilocoSettings::default() });
    let want =
        run_cluster(&sync, &Runtime::Sim(SimSpec::flat(3, 1.0, None)), workers(3, 2), &p, &Hooks::default()).unwrap();
    let got = run_with_server(Rt::Sim(SimSpec::flat(3, 1.0, None)), workers(3, 2), &p, &dn(2, 3), &grace(1e9)).unwrap();
    assert_eq!(got.len(), 4, "3 workers and the server");
    let worst = max_diff(&want[0].params, &got[3].params);
    assert!(worst < 1e-5, "max |sync diloco - async dn| = {worst}");
    assert_eq!(got[3].optimizer_steps, 9, "3 rounds of 3 updates");
    for r in &got[..3] {
        assert_eq!(r.optimizer_steps, 6, "worker {}: its share of t_max", r.rank);
    }
    // Vanilla async (Nesterov on every arrival) is another method.
    let nesterov = DilocoSettings { h: 2, ..DilocoSettings::default() };
    let v = run_with_server(Rt::Sim(SimSpec::flat(3, 1.0, None)), workers(3, 2), &p, &nesterov, &grace(1e9)).unwrap();
    assert!(max_diff(&want[0].params, &v[3].params) > 1e-4);
}

#[test]
fn async_diloco_is_reproducible_in_sim_and_completes_on_threads() {
    let p = sgd_plan(6);
    let spec = SimSpec { speeds: vec![1.0, 0.5], ..SimSpec::flat(2, 1.0, None) };
    let a = run_with_server(Rt::Sim(spec.clone()), workers(2, 2), &p, &dn(2, 2), &grace(0.0)).unwrap();
    let b = run_with_server(Rt::Sim(spec), workers(2, 2), &p, &dn(2, 2), &grace(0.0)).unwrap();
    assert_eq!(bits(&a[2].params), bits(&b[2].params));
    assert_eq!(a[2].times, b[2].times);
    // No grace period, worker 1 half as fast: worker 0 runs more rounds.
    assert!(a[0].optimizer_steps > a[1].optimizer_steps, "{} vs {}", a[0].optimizer_steps, a[1].optimizer_steps);
    assert!(a[0].optimizer_steps + a[1].optimizer_steps >= 12, "t_max = 6 x 2 local steps reached");
    let r = run_with_server(Rt::Real(RealSpec::flat(2)), workers(2, 2), &p, &dn(2, 2), &grace(1e9)).unwrap();
    assert_eq!(r[2].params.len(), a[2].params.len());
    assert!(r[2].params.iter().all(|x| x.is_finite()));
    assert_eq!(r[0].optimizer_steps + r[1].optimizer_steps, 12);
}

#[test]
fn dylu_changes_each_workers_step_count_by_its_speed() {
    // Speeds 1 and 0.5, H = 4: eq. 6 gives 4 and 2 steps per round, so both
    // finish a round at the same virtual time and, with a grace period, sync together.
    let p = sgd_plan(4);
    let spec = SimSpec { speeds: vec![1.0, 0.5], ..SimSpec::flat(2, 1.0, None) };
    let o = ServerOptions { grace_s: 0.5, dylu_speeds: Some(vec![1.0, 0.5]) };
    let r = run_with_server(Rt::Sim(spec.clone()), workers(2, 2), &p, &dn(4, 2), &o).unwrap();
    // t_max = 8 local steps: rounds of 4 + 2 = 6, then 6 more: 8 + 4 steps.
    assert_eq!((r[0].optimizer_steps, r[1].optimizer_steps), (8, 4));
    assert_eq!((r[0].points.len(), r[1].points.len()), (8, 4), "one journal point per inner step");
    // Without DyLU each worker runs H = 4 per round.
    let plain = run_with_server(Rt::Sim(spec.clone()), workers(2, 2), &p, &dn(4, 2), &grace(0.5)).unwrap();
    assert_eq!((plain[0].optimizer_steps % 4, plain[1].optimizer_steps % 4), (0, 0));
    let bad = ServerOptions { grace_s: 0.0, dylu_speeds: Some(vec![1.0]) };
    let e = run_with_server(Rt::Sim(spec), workers(2, 2), &p, &dn(4, 2), &bad).unwrap_err().to_string();
    assert!(e.contains("1 speeds for 2 workers"), "{e}");
}
