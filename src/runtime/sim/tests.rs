//! The executor's parallel computes: overlapping computes really run at
//! once, the sequential switch keeps them on the executor's thread, and a
//! panic inside a job ends the run with its message instead of hanging.

use super::{run, SimSpec};
use crate::runtime::{Ctx, Work};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Runs `f` as the one compute (a micro-batch) of each of 2 equal workers.
fn both_compute<R: Send + 'static>(parallel: bool, f: impl Fn() -> R + Sync) -> Vec<R> {
    let spec = SimSpec { parallel, ..SimSpec::flat(2, 1.0, None) };
    let f = &f;
    run(spec, |mut ctx| async move { Ok(ctx.compute(Work::MicroBatch, f).await) }).unwrap()
}

#[test]
fn computes_whose_virtual_intervals_overlap_run_at_once() {
    // Both workers compute over [0, 1): each job announces itself and waits
    // for the other. Only two jobs running at once both see 2; run one
    // after the other, the first would give up after 10 s and see 1.
    // Inside a pool of 2 threads the simulator sees 2 cores: 2 job threads,
    // whatever this machine has.
    let here = AtomicUsize::new(0);
    let meet = || {
        here.fetch_add(1, Ordering::SeqCst);
        let t0 = Instant::now();
        while here.load(Ordering::SeqCst) < 2 && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        here.load(Ordering::SeqCst)
    };
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
    assert_eq!(pool.install(|| both_compute(true, meet)), [2, 2]);
}

#[test]
fn the_sequential_switch_runs_every_compute_on_the_executors_thread() {
    let me = std::thread::current().id();
    assert_eq!(both_compute(false, || std::thread::current().id()), [me, me]);
    // Free work (no cost) is never worth a job: it runs in place too; so
    // does everything on one core.
    let spec = SimSpec::flat(2, 1.0, None);
    let free = run(spec, |mut ctx| async move {
        Ok(ctx.compute(Work::Optimizer { params: 10 }, || std::thread::current().id()).await)
    })
    .unwrap();
    assert_eq!(free, [me, me]);
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("pool");
    let here = one.install(|| (std::thread::current().id(), both_compute(true, || std::thread::current().id())));
    assert_eq!(here.1, [here.0, here.0]);
    // And on 2 cores a compute runs on a job thread.
    let two = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
    let names = two.install(|| both_compute(true, || std::thread::current().name().map(String::from)));
    assert!(names.iter().all(|n| n.as_deref().is_some_and(|n| n.starts_with("sim-job-"))), "{names:?}");
}

#[test]
fn a_panic_in_a_parallel_compute_ends_the_run_with_its_message() {
    // Worker 1 panics in its third micro-batch while worker 0 is still
    // computing; the run unwinds with worker 1's payload, no hang.
    for parallel in [true, false] {
        let spec = SimSpec { parallel, speeds: vec![1.0, 0.5], ..SimSpec::flat(2, 1.0, None) };
        let err = catch_unwind(AssertUnwindSafe(|| {
            run(spec, |mut ctx| async move {
                for step in 0..5 {
                    let rank = ctx.rank();
                    ctx.compute(Work::MicroBatch, move || {
                        assert!(!(rank == 1 && step == 2), "worker 1 fails in step 2");
                    })
                    .await;
                }
                Ok(())
            })
        }))
        .expect_err("the panic ends the run");
        let text = err.downcast_ref::<String>().map(String::as_str).or(err.downcast_ref::<&str>().copied());
        assert_eq!(text, Some("worker 1 fails in step 2"), "parallel = {parallel}");
    }
}

#[test]
fn a_bad_lowcomm_sim_sequential_value_is_refused_naming_the_fix() {
    // Checked by value here (the variable is process-wide; setting it would
    // race the other tests).
    assert!(!super::parse_sequential(None).unwrap());
    assert!(!super::parse_sequential(Some("0")).unwrap());
    assert!(super::parse_sequential(Some("1")).unwrap());
    let e = super::parse_sequential(Some("yes")).unwrap_err().to_string();
    assert!(e.contains("LOWCOMM_SIM_SEQUENTIAL=yes") && e.contains("use 1"), "{e}");
}
