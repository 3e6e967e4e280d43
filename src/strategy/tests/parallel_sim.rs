//! The parallel simulator (runtime/sim/jobs.rs) against the sequential one
//! ([`SimSpec::parallel`] off): every method, 4 workers of unequal speeds,
//! a link slow enough that the overlapping methods fit several
//! micro-batches into a round: the same parameters, loss curves and
//! clocks, to the bit. And the bits do not depend on how many cores the
//! job threads and their kernels get.

use super::resume::every_method;
use super::*;

/// [`every_method`] and asynchronous DiLoCo (a server; DyLU and a grace
/// period, so its rounds depend on the speeds).
fn methods() -> Vec<Method> {
    let mut v = every_method();
    v.push(Method::AsyncDiloco(crate::strategy::AsyncDilocoSettings {
        h: 2,
        dylu: true,
        grace: Some(0.4),
        ..Default::default()
    }));
    v
}

/// 4 workers at speeds 1, 0.5, 0.8, 0.3, micro-batches varying by 10% in
/// stretches (lag-1 correlation 0.5; sim/straggle.rs: drawn per worker and
/// micro-batch, whichever thread runs it); an all-reduce of the model
/// takes about 2.5 micro-batches.
fn unequal() -> Runtime {
    let n = crate::model::ParamLayout::new(&tiny()).len as f64;
    let link = LinkModel::flat(Tier::line(1e-3, 4.0 * n / 2.5));
    Runtime::Sim(SimSpec {
        link: Some(link),
        speeds: vec![1.0, 0.5, 0.8, 0.3],
        micro_batch_cv: 0.1,
        micro_batch_correlation: 0.5,
        ..SimSpec::flat(4, 1.0, None)
    })
}

fn losses(r: &WorkerReport) -> Vec<u32> {
    r.points.iter().map(|p| p.loss.to_bits()).collect()
}

#[test]
fn sequential_and_parallel_sims_give_the_same_bits_for_every_method() {
    let all = methods();
    for name in Method::NAMES {
        assert!(all.iter().any(|m| m.name() == name), "method {name} is not in the list this test runs");
    }
    let p = plan(4, 2, 1.0);
    let rt = unequal();
    for m in &all {
        let par = run_cluster(m, &rt, workers(4, 2), &p, &Hooks::default()).unwrap();
        let seq = run_cluster(m, &sequential(&rt), workers(4, 2), &p, &Hooks::default()).unwrap();
        assert_eq!(par.len(), seq.len());
        for (a, b) in par.iter().zip(&seq) {
            assert_eq!(bits(&a.params), bits(&b.params), "{m}: participant {}'s parameters", a.rank);
            assert_eq!(losses(a), losses(b), "{m}: participant {}'s loss curve", a.rank);
            assert_eq!(a.times, b.times, "{m}: participant {}'s clock and accounting", a.rank);
            assert_eq!(a.optimizer_steps, b.optimizer_steps, "{m}");
        }
    }
}

#[test]
fn the_sims_bits_do_not_depend_on_the_thread_count() {
    // Under a pool of c threads the simulator sees c cores: sequential, the
    // kernels run on c threads; parallel, min(4, c) job threads with
    // c / that kernel threads each (one core: sequential). All the same bits.
    let p = plan(3, 2, 1.0);
    let rt = unequal();
    for m in
        [Method::Ddp, Method::Demo(DemoSettings::default()), crate::strategy::local::tests::local_methods(1)[0].clone()]
    {
        let want = run_cluster(&m, &sequential(&rt), workers(4, 2), &p, &Hooks::default()).unwrap();
        for (cores, rt) in [1, 3, 8].into_iter().flat_map(|c| [(c, rt.clone()), (c, sequential(&rt))]) {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(cores).build().expect("a pool");
            let got = pool.install(|| run_cluster(&m, &rt, workers(4, 2), &p, &Hooks::default()).unwrap());
            for (a, b) in want.iter().zip(&got) {
                assert_eq!(bits(&a.params), bits(&b.params), "{m}, {cores} cores: participant {}", a.rank);
                assert_eq!(losses(a), losses(b), "{m}, {cores} cores: participant {}", a.rank);
            }
        }
    }
}
