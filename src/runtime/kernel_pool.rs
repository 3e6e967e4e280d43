//! The rayon pool a process's only computing participant runs its kernels in.
//!
//! A kernel's parallel loop called from a thread outside any rayon pool (a
//! participant thread of the real runtime, calibrate's main thread) is
//! handed to the global pool: the caller blocks on a latch and a pool
//! thread wakes to run the loop, every call. With one compute thread per
//! MPI rank (`RAYON_NUM_THREADS=1`) a micro-batch's work then alternated
//! between two threads, about 580 hand-offs a second each way; beside a
//! third process on two cores (async DiLoCo's server) each hand-off can
//! wait for a core (docs/results/planner-accuracy.md, finding 23). Run
//! inside a pool as wide as the global one, the loop starts on the
//! participant's own thread and the pool's other threads steal from it, as
//! in the simulator's jobs (sim/jobs.rs).
//!
//! Several participants in one process (the threads backend) keep sharing
//! the global pool: a pool each would leave a waiting participant's threads
//! idle while another computes.

use rayon::ThreadPool;

/// A pool for the kernels of one of `participants` computing in this
/// process, its threads named `{name}-kernel-{k}`: with one participant, as
/// many threads as the global pool (`RAYON_NUM_THREADS`, or what the MPI
/// backend sized it to: train/parallel/mpi.rs); with several, `None` (the
/// global pool). `None` too if the threads cannot be started, or when
/// `LOWCOMM_KERNEL_POOL=global` asks for the hand-off (bench/kernel_pool.sh's
/// baseline).
pub fn for_participants(participants: usize, name: &str) -> Option<ThreadPool> {
    if participants > 1 || std::env::var("LOWCOMM_KERNEL_POOL").as_deref() == Ok("global") {
        return None;
    }
    let name = name.to_string();
    rayon::ThreadPoolBuilder::new()
        .num_threads(rayon::current_num_threads())
        .thread_name(move |k| format!("{name}-kernel-{k}"))
        .build()
        .ok()
}

/// Runs `f` on one of `pool`'s threads (the calling thread waits), or on
/// the calling thread without a pool.
pub fn run<T: Send>(pool: Option<&ThreadPool>, f: impl FnOnce() -> T + Send) -> T {
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_pool_of_a_lone_participant_is_as_wide_as_the_global_one_and_runs_the_work_inside() {
        let global = rayon::current_num_threads();
        let pool = for_participants(1, "test");
        let (name, index, width) = run(pool.as_ref(), || {
            let name = std::thread::current().name().map(str::to_string);
            (name, rayon::current_thread_index(), rayon::current_num_threads())
        });
        assert!(name.is_some_and(|n| n.starts_with("test-kernel-")));
        // Inside the pool: a parallel loop starts here instead of being handed over.
        assert!(index.is_some());
        assert_eq!(width, global);
    }

    #[test]
    fn kernel_pool_is_the_global_one_for_several_participants() {
        assert!(for_participants(2, "test").is_none());
        assert_eq!(run(None, rayon::current_thread_index), None);
    }
}
