//! The plan's straggler term against the simulator's drawn micro-batch
//! times (sim/straggle.rs): with `micro_batch_cv`, each blocking round of
//! the simulator lasts longer by the wait for its latest worker, and the
//! plan adds that wait's expectation. The simulator's mean over many rounds
//! must match the plan's added time within its sampling error.

use super::tests_fixtures::{profile, sim_costing, sim_plan, tiny, workers};
use super::{plan_method, Costing};
use crate::runtime::cluster::ClusterProfile;
use crate::strategy::detonation::settings::DemoSettings;
use crate::strategy::{run_cluster, DilocoSettings, Hooks, Method, Runtime};

/// Worker 0's mean seconds per round between the ends of its 2nd and its
/// last round, and the plan's round, of `rounds` rounds of `method` on `prof`.
fn sim_and_plan(prof: &ClusterProfile, method: &Method, rounds: usize) -> (f64, f64) {
    let cfg = tiny();
    let layout = crate::model::ParamLayout::new(&cfg);
    let world = prof.workers();
    let spec = prof.sim_spec(&cfg, layout.len, 2 * cfg.ctx, vec![1.0; world]).unwrap();
    let per = method.local_tau().unwrap_or(1) as usize;
    let plan = sim_plan((rounds * per) as u64, prof.wire.unwrap_or_default(), &layout);
    let costing: Costing = sim_costing(spec.clone(), &plan, 2, &layout);
    let planned = plan_method(method, &costing).unwrap().time.round_s;
    let reports = run_cluster(method, &Runtime::Sim(spec), workers(world, 2), &plan, &Hooks::default()).unwrap();
    let end = |round: usize| reports[0].points[round * per - 1].end_s;
    ((end(rounds) - end(2)) / (rounds - 2) as f64, planned)
}

#[test]
fn blocking_rounds_wait_for_the_latest_worker_as_the_plan_expects() {
    let quiet = profile("tcp-4x1-10g.toml");
    let mut spread = quiet.clone();
    spread.timing.micro_batch_cv = Some(0.1);
    let methods = [
        (Method::Ddp, 80),
        (Method::Zero1, 80),
        (Method::Diloco(DilocoSettings { h: 3, ..DilocoSettings::default() }), 40),
        (Method::Demo(DemoSettings::default()), 80),
    ];
    for (method, rounds) in methods {
        let (sim0, plan0) = sim_and_plan(&quiet, &method, rounds);
        let (sim, plan) = sim_and_plan(&spread, &method, rounds);
        // Without the spread nothing changes: plan is the simulator to rounding.
        assert!((plan0 - sim0).abs() < 1e-6 * sim0, "{method}: plan {plan0} vs sim {sim0}");
        // 4 workers: e_4 = 1.029 sigma of a round's micro-batches; the mean
        // of the latest over R rounds has a standard error of about
        // 0.7 sigma / sqrt(R), a tenth of the term at these R.
        let (waited, expected) = (sim - sim0, plan - plan0);
        eprintln!("{method}: waited {waited:.5} s a round, expected {expected:.5} s");
        assert!(expected > 0.0, "{method}: the plan adds no wait");
        assert!(
            (waited - expected).abs() < 0.35 * expected,
            "{method}: the simulator's rounds waited {waited} s more on average, the plan expects {expected} s"
        );
    }
}

#[test]
fn correlated_micro_batches_wait_longer_as_the_plan_expects() {
    // DiLoCo, 6 micro-batches a round, cv 0.1: with a lag-1 correlation of
    // 0.7 a worker's slow micro-batches come in stretches, the sum of 6
    // spreads 1.9x as far as 6 independent ones (sim/straggle.rs sum_sd),
    // and the wait for the latest worker grows with it, in the simulator's
    // draws and in the plan's expectation alike.
    let quiet = profile("tcp-4x1-10g.toml");
    let mut spread = quiet.clone();
    spread.timing.micro_batch_cv = Some(0.1);
    let mut stretches = spread.clone();
    stretches.timing.micro_batch_correlation = Some(0.7);
    let diloco = Method::Diloco(DilocoSettings { h: 6, ..DilocoSettings::default() });
    let (sim0, plan0) = sim_and_plan(&quiet, &diloco, 40);
    let (sim_i, plan_i) = sim_and_plan(&spread, &diloco, 40);
    let (sim_c, plan_c) = sim_and_plan(&stretches, &diloco, 40);
    let ratio = crate::runtime::sim::straggle::sum_sd(6.0, 0.7) / 6f64.sqrt();
    assert!(((plan_c - plan0) / (plan_i - plan0) - ratio).abs() < 1e-6, "plan's wait grows by sum_sd's ratio {ratio}");
    let (waited, expected) = (sim_c - sim0, plan_c - plan0);
    eprintln!("waited {waited:.5} s a round, expected {expected:.5} s (independent: {:.5})", sim_i - sim0);
    assert!(
        (waited - expected).abs() < 0.35 * expected,
        "the simulator's rounds waited {waited} s, the plan expects {expected} s"
    );
    assert!(waited > 1.4 * (sim_i - sim0), "stretches make the simulator's workers wait longer than independent draws");
}
