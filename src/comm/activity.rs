//! Whether this process's worker is computing right now, for a
//! communication thread choosing how to wait between two tests of a
//! collective (`LOWCOMM_MPI_POLL=auto`, comm/mpi/mod.rs).
//!
//! On CPU workers the communication thread and the computing worker share
//! cores. While the worker computes beside a collective (ACCO's micro-batches
//! during the all-reduce), a waiter that stays runnable takes a share of the
//! worker's core: a thread that yields between `MPI_Test`s made acco's
//! micro-batches 1.35-1.46x slower over TCP, and one that sleeps did not
//! (docs/results/planner-accuracy.md, finding 16). While the worker waits for
//! the collective, the core is free and sleeping only delays the collective
//! (DeMo's blocking all-gathers, 20 Mbit/s: 89.3 ms a step sleeping against
//! 76.4 yielding). So the waiter asks this module which case it is in.
//!
//! The count is per process: under MPI a process holds one worker (and its
//! communication thread); the in-process backend does not poll at all.

use std::sync::atomic::{AtomicUsize, Ordering};

/// A count of computations running now.
pub struct Activity(AtomicUsize);

/// This process's computations: what [`Computing::start`] marks.
static PROCESS: Activity = Activity::new();

impl Activity {
    const fn new() -> Activity {
        Activity(AtomicUsize::new(0))
    }

    fn start(&'static self) -> Computing {
        self.0.fetch_add(1, Ordering::AcqRel);
        Computing(self)
    }

    fn any(&self) -> bool {
        self.0.load(Ordering::Acquire) > 0
    }
}

/// Marks a computation as running until dropped.
#[must_use = "the computation counts as running only while this guard lives"]
pub struct Computing(&'static Activity);

impl Computing {
    /// Marks the start of one of this process's computations; it ends when
    /// the guard is dropped.
    pub fn start() -> Computing {
        PROCESS.start()
    }
}

impl Drop for Computing {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether any computation of this process is running now.
pub fn computing() -> bool {
    PROCESS.any()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_computation_counts_while_its_guard_lives_and_guards_nest() {
        // A count of its own: the process's may be raised by tests running
        // beside this one.
        static OWN: Activity = Activity::new();
        assert!(!OWN.any());
        let outer = OWN.start();
        assert!(OWN.any());
        let inner = OWN.start();
        drop(outer);
        assert!(OWN.any(), "the inner computation still runs");
        drop(inner);
        assert!(!OWN.any());
    }

    #[test]
    fn the_process_counts_while_a_guard_lives() {
        let _g = Computing::start();
        assert!(computing());
    }
}
