//! Equal tokens (budget.rs): under `Plan::micro_batch_budget` the methods
//! that accumulate while communicating apply exactly the synchronous
//! methods' micro-batches, end together whatever their speeds, follow the
//! schedule by tokens (resume: strategy/tests/resume.rs).

use crate::comm::{LinkModel, Tier};
use crate::runtime::real::RealSpec;
use crate::runtime::sim::SimSpec;
use crate::strategy::tests::{bits, plan, tiny, workers};
use crate::strategy::*;

/// A simulated link on which one gradient all-reduce costs ~3 micro-batches,
/// workers of `speeds`: each stage accumulates several micro-batches.
fn slow_link(speeds: &[f64]) -> Runtime {
    let n = crate::model::ParamLayout::new(&tiny()).len as f64;
    let tier = Tier { latency_s: 0.0, bandwidth_bytes_per_s: 4.0 * n / 3.0 };
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
fn under_a_budget_each_worker_applies_exactly_steps_micro_batches() {
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
            assert_eq!(applied(&r), vec![steps; w], "{method} at speeds {speeds:?}");
            let rounds: Vec<usize> = r.iter().map(|x| x.points.len()).collect();
            assert!(rounds.iter().all(|&k| k == rounds[0] && (k as u64) < steps), "{method}: rounds {rounds:?}");
            assert!(r.iter().all(|x| bits(&x.params) == bits(&r[0].params)), "{method}: replicas differ");
        }
    }
}

#[test]
fn under_a_budget_threads_end_together_and_apply_the_budget() {
    // Real threads: the counts per stage depend on timing, the budget does not.
    let p = Plan { micro_batch_budget: Some(6), ..plan(6, 1, 1.0) };
    for method in [Method::Dpu(DpuSettings::default()), Method::Acco] {
        let r = run_cluster(&method, &Runtime::Real(RealSpec::flat(2)), workers(2, 1), &p, &Hooks::default()).unwrap();
        assert_eq!(applied(&r), vec![6, 6], "{method}");
    }
}
