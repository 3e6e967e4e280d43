//! Equal tokens (budget.rs): under `Plan::micro_batch_budget` the methods
//! that accumulate while communicating apply exactly the synchronous
//! methods' micro-batches, shared by speed, end together whatever their
//! speeds, follow the schedule by tokens (resume: strategy/tests/resume.rs).

use crate::comm::{LinkModel, Tier};
use crate::runtime::real::RealSpec;
use crate::runtime::sim::SimSpec;
use crate::strategy::tests::{bits, plan, tiny, workers};
use crate::strategy::*;

/// A simulated link on which one gradient all-reduce costs ~3 micro-batches,
/// workers of `speeds`: each stage accumulates several micro-batches.
fn slow_link(speeds: &[f64]) -> Runtime {
    let n = crate::model::ParamLayout::new(&tiny()).len as f64;
    let tier = Tier::line(0.0, 4.0 * n / 3.0);
    Runtime::Sim(SimSpec {
        speeds: speeds.to_vec(),
        link: Some(LinkModel::flat(tier)),
        ..SimSpec::flat(speeds.len(), 1.0, None)
    })
}

fn applied(r: &[WorkerReport]) -> Vec<u64> {
    r.iter().map(|w| w.points.iter().map(|p| p.micro_batches).sum()).collect()
}

#[test]
fn under_a_budget_the_workers_apply_exactly_steps_micro_batches_each_shared_by_speed() {
    let steps = 12;
    let budgeted = Plan { micro_batch_budget: Some(steps), ..plan(steps, 1, 1.0) };
    for method in [Method::Dpu(DpuSettings::default()), Method::AccoWp, Method::Acco] {
        for speeds in [&[1.0, 1.0][..], &[1.0, 1.0, 0.25]] {
            let w = speeds.len();
            // Without a budget: `steps` rounds of several micro-batches each.
            let free = run_cluster(&method, &slow_link(speeds), workers(w, 1), &plan(steps, 1, 1.0), &Hooks::default())
                .unwrap();
            assert!(applied(&free)[0] > 2 * steps, "{method}: {:?}", applied(&free));
            let r = run_cluster(&method, &slow_link(speeds), workers(w, 1), &budgeted, &Hooks::default()).unwrap();
            // ddp's tokens: steps micro-batches per worker, all applied, and
            // every worker ends on the same round with the same replica.
            let a = applied(&r);
            assert_eq!(a.iter().sum::<u64>(), steps * w as u64, "{method} at speeds {speeds:?}: {a:?}");
            if speeds[w - 1] == 1.0 {
                assert_eq!(a, vec![steps; w], "{method}: equal speeds, equal shares");
            } else {
                // The slow worker's share goes to the fast ones, who keep
                // computing instead of waiting for it to spend its own.
                assert!(a[w - 1] < steps && a[0] > steps && a[1] > steps, "{method}: {a:?}");
            }
            let rounds: Vec<usize> = r.iter().map(|x| x.points.len()).collect();
            assert!(rounds.iter().all(|&k| k == rounds[0] && (k as u64) < steps), "{method}: rounds {rounds:?}");
            assert!(r.iter().all(|x| bits(&x.params) == bits(&r[0].params)), "{method}: replicas differ");
        }
    }
}

#[test]
fn a_pooled_budget_ends_sooner_than_one_capped_per_worker_when_a_worker_is_slow() {
    // One worker 4x slower: with a cap per worker the run lasts until the
    // slow one has computed its `steps`, about `steps / 2` ACCO rounds of
    // one micro-batch per stage; pooled, the fast ones take over its share.
    let steps = 24;
    let budgeted = Plan { micro_batch_budget: Some(steps), ..plan(steps, 1, 1.0) };
    let speeds = [1.0, 1.0, 1.0, 0.25];
    let r = run_cluster(&Method::Acco, &slow_link(&speeds), workers(4, 1), &budgeted, &Hooks::default()).unwrap();
    let a = applied(&r);
    let slow_per_round = a[3] as f64 / r[3].points.len() as f64;
    let capped_rounds = steps as f64 / slow_per_round;
    assert!(
        (r[0].points.len() as f64) < 0.75 * capped_rounds,
        "pooled: {} rounds, applied {a:?}; a per-worker cap needs ~{capped_rounds:.1}",
        r[0].points.len()
    );
}
#[test]
fn under_a_budget_threads_end_together_and_apply_the_budget() {
    // Real threads: the counts per stage depend on timing, the budget does not.
    let p = Plan { micro_batch_budget: Some(6), ..plan(6, 1, 1.0) };
    for method in [Method::Dpu(DpuSettings::default()), Method::Acco] {
        let r = run_cluster(&method, &Runtime::Real(RealSpec::flat(2)), workers(2, 1), &p, &Hooks::default()).unwrap();
        assert_eq!(applied(&r).iter().sum::<u64>(), 12, "{method}: {:?}", applied(&r));
    }
}
