//! The parallel simulator's compute jobs: the math of a participant's
//! [`Ctx::compute`](crate::runtime::Ctx::compute) runs on rayon's pool
//! while the participant sleeps in virtual time, so the math of
//! participants whose virtual compute intervals overlap runs at once on
//! real threads.
//!
//! Why the bits cannot change: the virtual cost of a compute does not
//! depend on its result, so the schedule (the order of every wake-up) is
//! fixed before the math runs. A job touches only what its closure
//! captures, which is `Send` (no `Rc`, no `RefCell` shared with another
//! actor), and every collective, message and reduction still runs on the
//! executor's thread in the engine's order. A job's own math is the same
//! whichever thread runs it: the kernels split work into fixed blocks
//! (model/ops/reduce.rs), never by thread count.
//!
//! A job is joined when its participant wakes at `now + cost / speed`: the
//! executor blocks until it has finished, or runs it itself if no pool
//! thread has taken it yet (so a simulator started on a rayon thread cannot
//! wait on a job queued behind itself). A panic inside a job is caught on
//! the pool thread and resumed on the executor's at the join, with its
//! payload, as if the math had run there.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// The math of a job and, later, its outcome.
enum Stage<'a, R> {
    /// Not taken by a pool thread yet.
    Queued(Box<dyn FnOnce() -> R + Send + 'a>),
    /// A pool thread runs it.
    Running,
    /// Finished: the result, or the panic's payload.
    Done(Result<R, Box<dyn Any + Send>>),
    /// The joiner took the result (or the math, to run or drop it itself);
    /// nothing in the slot borrows anything any more.
    Joined,
}

/// What the pool thread and the joiner share.
struct Slot<'a, R> {
    stage: Mutex<Stage<'a, R>>,
    finished: Condvar,
}

impl<'a, R> Slot<'a, R> {
    fn lock(&self) -> MutexGuard<'_, Stage<'a, R>> {
        // No code panics while holding the lock (the math runs outside it).
        self.stage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pool thread's side: takes the math unless the joiner did, runs
    /// it, posts the outcome.
    fn run(&self) {
        let f = {
            let mut st = self.lock();
            match std::mem::replace(&mut *st, Stage::Running) {
                Stage::Queued(f) => f,
                other => {
                    *st = other;
                    return;
                }
            }
        };
        // The closure's captures are dropped inside `catch_unwind` (it is
        // consumed by the call), so nothing borrowed survives `Done`.
        let out = catch_unwind(AssertUnwindSafe(f));
        *self.lock() = Stage::Done(out);
        self.finished.notify_all();
    }

    /// The joiner's side: the outcome once the math has finished. Math not
    /// started yet runs here (`run_queued`) or is dropped unrun.
    fn join(&self, run_queued: bool) -> Option<Result<R, Box<dyn Any + Send>>> {
        let mut st = self.lock();
        loop {
            match std::mem::replace(&mut *st, Stage::Joined) {
                Stage::Queued(f) => {
                    drop(st);
                    return run_queued.then(|| catch_unwind(AssertUnwindSafe(f)));
                }
                Stage::Running => {
                    *st = Stage::Running;
                    st = self.finished.wait(st).unwrap_or_else(PoisonError::into_inner);
                }
                Stage::Done(out) => return Some(out),
                Stage::Joined => return None,
            }
        }
    }
}

/// A compute closure handed to rayon's pool; [`Job::finish`] takes its
/// result. Borrows what the closure borrows (`'a`), and joins the math
/// before that borrow ends: in `finish`, and in `Drop` when the future
/// holding it is dropped before its wake-up.
pub(super) struct Job<'a, R: Send> {
    slot: Arc<Slot<'a, R>>,
}

impl<'a, R: Send + 'a> Job<'a, R> {
    /// Queues `f` on rayon's pool.
    pub fn spawn(f: impl FnOnce() -> R + Send + 'a) -> Job<'a, R> {
        let slot = Arc::new(Slot { stage: Mutex::new(Stage::Queued(Box::new(f))), finished: Condvar::new() });
        let pool_side = slot.clone();
        let task: Box<dyn FnOnce() + Send + 'a> = Box::new(move || pool_side.run());
        // SAFETY: rayon wants a 'static task; this one borrows for 'a. The
        // borrowed data is touched only by the math (`Stage::Queued`) and
        // the outcome (`Stage::Done`), and both leave the slot before `'a`
        // can end: `Job<'a, _>` cannot outlive `'a` (it names it), and both
        // of its ends, `finish` and `Drop`, return only once the stage is
        // `Joined` — the math has finished on the pool (its captures dropped
        // there inside `run`) or was taken back by the joiner. After that
        // the pool side may still lock the slot and drop its `Arc`, but the
        // slot then holds nothing borrowed. The one way around this is to
        // leak the future that owns the job (`mem::forget` after its first
        // poll) and go on using the borrowed data; the simulator's
        // strategies await every compute, and nothing in the crate leaks a
        // future.
        let task: Box<dyn FnOnce() + Send + 'static> = unsafe { std::mem::transmute(task) };
        rayon::spawn(task);
        Job { slot }
    }

    /// The math's result: waits for it, or runs it here if no pool thread
    /// has started it. A panic in the math resumes here.
    pub fn finish(self) -> R {
        match self.slot.join(true) {
            Some(Ok(r)) => r,
            Some(Err(payload)) => resume_unwind(payload),
            None => unreachable!("a job is finished once"),
        }
    }
}

impl<R: Send> Drop for Job<'_, R> {
    fn drop(&mut self) {
        // Dropped before `finish` (the participant's future was dropped
        // while it slept, e.g. another one failed): math not started is
        // dropped unrun, running math is waited for; its result or panic
        // is dropped here, while what it borrows is still alive.
        let _ = self.slot.join(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_returns_its_closures_result_and_writes_through_its_borrow() {
        let mut x = vec![1, 2, 3];
        let job = Job::spawn(|| {
            x.push(4);
            x.iter().sum::<i32>()
        });
        assert_eq!(job.finish(), 10);
        assert_eq!(x, [1, 2, 3, 4]);
    }

    #[test]
    fn many_jobs_at_once_each_get_their_own_result() {
        let mut outs = vec![0u64; 16];
        let jobs: Vec<_> =
            outs.iter_mut().enumerate().map(|(i, o)| Job::spawn(move || *o = (i as u64 + 1) * 7)).collect();
        jobs.into_iter().for_each(Job::finish);
        assert_eq!(outs, (1..=16).map(|i| i * 7).collect::<Vec<u64>>());
    }

    #[test]
    fn a_panic_in_a_job_resumes_at_finish_with_its_message() {
        let job = Job::spawn(|| -> u32 { panic!("math failed: 42") });
        let err = catch_unwind(AssertUnwindSafe(|| job.finish())).expect_err("the panic resumes");
        assert_eq!(err.downcast_ref::<&str>(), Some(&"math failed: 42"));
    }

    #[test]
    fn a_dropped_job_has_finished_or_never_run_when_drop_returns() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        for _ in 0..50 {
            let state = AtomicUsize::new(0);
            let job = Job::spawn(|| {
                state.store(1, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(1));
                state.store(2, Ordering::SeqCst);
            });
            drop(job);
            // Never half-way: started math was waited for.
            assert_ne!(state.load(Ordering::SeqCst), 1);
        }
    }

    #[test]
    fn a_job_finished_from_inside_rayons_pool_does_not_wait_on_itself() {
        // One pool thread, which spawns the job and joins it: the job is
        // still queued behind the joiner, so the joiner runs it.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("pool");
        let r = pool.install(|| Job::spawn(|| 6 * 7).finish());
        assert_eq!(r, 42);
    }
}
