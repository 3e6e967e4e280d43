//! The parallel simulator's compute jobs: the math of a participant's
//! [`Ctx::compute`](crate::runtime::Ctx::compute) runs on a job thread
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
//! whichever thread runs it and however many threads its kernels get: they
//! split work into fixed blocks (model/ops/reduce.rs), never by thread count.
//!
//! The threads ([`Pool`]): `n = min(participants, cores)` job threads, each
//! with its own rayon pool of `cores / n` threads for the kernels inside
//! its jobs, so `n` overlapping computes fill the cores without fighting
//! over one pool (nested in rayon's global pool, a job's kernels split
//! into pieces that the other jobs' threads never had time to take, and
//! measured slower than the sequential simulator: docs/decisions.md).
//! Jobs are taken first come, first served.
//!
//! A job is joined when its participant wakes at `now + cost / speed`: the
//! executor blocks until it has finished (job threads are the pool's own,
//! so a job never waits on the executor). A panic inside a job is caught
//! on the job thread and resumed on the executor's at the join, with its
//! payload, as if the math had run there.

use std::any::Any;
use std::collections::VecDeque;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// A lifetime-erased job (see [`Job::spawn`]).
type Task = Box<dyn FnOnce() + Send + 'static>;

/// The queue the job threads take from; `None` once the pool closes.
struct Queue {
    tasks: Mutex<Option<VecDeque<Task>>>,
    ready: Condvar,
}

/// The simulator's job threads, for one run.
pub(super) struct Pool {
    queue: Arc<Queue>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    /// The pool for `participants` on `cores` cores: `None` when it would
    /// have one job thread (nothing to overlap: the sequential simulator's
    /// kernels already get every core).
    pub fn for_run(participants: usize, cores: usize) -> std::io::Result<Option<Pool>> {
        let n = participants.min(cores);
        if n < 2 {
            return Ok(None);
        }
        let queue = Arc::new(Queue { tasks: Mutex::new(Some(VecDeque::new())), ready: Condvar::new() });
        let per_job = (cores / n).max(1);
        let threads = (0..n)
            .map(|i| {
                let queue = queue.clone();
                let kernels = rayon::ThreadPoolBuilder::new()
                    .num_threads(per_job)
                    .thread_name(move |k| format!("sim-job-{i}-kernel-{k}"))
                    .build()
                    .map_err(std::io::Error::other)?;
                std::thread::Builder::new().name(format!("sim-job-{i}")).spawn(move || {
                    while let Some(task) = queue.next() {
                        kernels.install(task);
                    }
                })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Some(Pool { queue, threads }))
    }

    fn push(&self, task: Task) {
        let mut q = self.queue.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        q.as_mut().expect("the pool is open while the run lasts").push_back(task);
        self.queue.ready.notify_one();
    }
}

impl Queue {
    /// The next task, waiting for one; `None` once the pool closes.
    fn next(&self) -> Option<Task> {
        let mut q = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match q.as_mut()?.pop_front() {
                Some(t) => return Some(t),
                None => q = self.ready.wait(q).unwrap_or_else(PoisonError::into_inner),
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Every job was joined before (each `Job` joins in `finish` or
        // `Drop`, and jobs borrow from the run), so the queue is empty.
        *self.queue.tasks.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.queue.ready.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The math of a job and, later, its outcome.
enum Stage<'a, R> {
    /// Not taken by a job thread yet.
    Queued(Box<dyn FnOnce() -> R + Send + 'a>),
    /// A job thread runs it.
    Running,
    /// Finished: the result, or the panic's payload.
    Done(Result<R, Box<dyn Any + Send>>),
    /// The joiner took the result (or dropped the math unrun); nothing in
    /// the slot borrows anything any more.
    Joined,
}

/// What the job thread and the joiner share.
struct Slot<'a, R> {
    stage: Mutex<Stage<'a, R>>,
    finished: Condvar,
}

impl<'a, R> Slot<'a, R> {
    fn lock(&self) -> MutexGuard<'_, Stage<'a, R>> {
        // No code panics while holding the lock (the math runs outside it).
        self.stage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The job thread's side: takes the math unless the joiner dropped it,
    /// runs it, posts the outcome.
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

    /// The joiner's side: waits for the outcome; math not started yet is
    /// waited for too (`wait_queued`) or dropped unrun (`None`).
    fn join(&self, wait_queued: bool) -> Option<Result<R, Box<dyn Any + Send>>> {
        let mut st = self.lock();
        loop {
            match std::mem::replace(&mut *st, Stage::Joined) {
                Stage::Queued(f) if !wait_queued => {
                    drop(st);
                    drop(f);
                    return None;
                }
                busy @ (Stage::Queued(_) | Stage::Running) => {
                    *st = busy;
                    st = self.finished.wait(st).unwrap_or_else(PoisonError::into_inner);
                }
                Stage::Done(out) => return Some(out),
                Stage::Joined => return None,
            }
        }
    }
}

/// A compute closure handed to the job threads; [`Job::finish`] takes its
/// result. Borrows what the closure borrows (`'a`), and joins the math
/// before that borrow ends: in `finish`, and in `Drop` when the future
/// holding it is dropped before its wake-up.
pub(super) struct Job<'a, R: Send> {
    slot: Arc<Slot<'a, R>>,
}

impl<'a, R: Send + 'a> Job<'a, R> {
    /// Queues `f` on `pool`.
    pub fn spawn(pool: &Pool, f: impl FnOnce() -> R + Send + 'a) -> Job<'a, R> {
        let slot = Arc::new(Slot { stage: Mutex::new(Stage::Queued(Box::new(f))), finished: Condvar::new() });
        let pool_side = slot.clone();
        let task: Box<dyn FnOnce() + Send + 'a> = Box::new(move || pool_side.run());
        // SAFETY: the job threads take 'static tasks; this one borrows for
        // 'a. The borrowed data is touched only by the math
        // (`Stage::Queued`) and the outcome (`Stage::Done`), and both leave
        // the slot before `'a` can end: `Job<'a, _>` cannot outlive `'a` (it
        // names it), and both of its ends, `finish` and `Drop`, return only
        // once the stage is `Joined` — the math has finished on its thread
        // (its captures dropped there inside `run`) or was dropped unrun by
        // the joiner. After that the job thread may still lock the slot and
        // drop its `Arc`, but the slot then holds nothing borrowed. The one
        // way around this is to leak the future that owns the job
        // (`mem::forget` after its first poll) and go on using the borrowed
        // data; the simulator's strategies await every compute, and nothing
        // in the crate leaks a future.
        let task: Task = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'a>, Task>(task) };
        pool.push(task);
        Job { slot }
    }

    /// The math's result, once a job thread has run it. A panic in the
    /// math resumes here.
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

    fn pool(n: usize, cores: usize) -> Pool {
        Pool::for_run(n, cores).unwrap().expect("two job threads or more")
    }

    #[test]
    fn a_job_returns_its_closures_result_and_writes_through_its_borrow() {
        let p = pool(2, 2);
        let mut x = vec![1, 2, 3];
        let job = Job::spawn(&p, || {
            x.push(4);
            x.iter().sum::<i32>()
        });
        assert_eq!(job.finish(), 10);
        assert_eq!(x, [1, 2, 3, 4]);
    }

    #[test]
    fn many_jobs_at_once_each_get_their_own_result() {
        let p = pool(3, 3);
        let mut outs = vec![0u64; 16];
        let jobs: Vec<_> =
            outs.iter_mut().enumerate().map(|(i, o)| Job::spawn(&p, move || *o = (i as u64 + 1) * 7)).collect();
        jobs.into_iter().for_each(Job::finish);
        assert_eq!(outs, (1..=16).map(|i| i * 7).collect::<Vec<u64>>());
    }

    #[test]
    fn one_job_thread_is_no_pool_and_the_cores_are_shared_out() {
        assert!(Pool::for_run(1, 16).unwrap().is_none(), "one participant: nothing to overlap");
        assert!(Pool::for_run(8, 1).unwrap().is_none(), "one core: nothing to overlap on");
        // 4 participants on 16 cores: 4 job threads, 4 kernel threads each;
        // 16 on 2 cores: 2 job threads, 1 each.
        for (n, cores, threads, kernels) in [(4, 16, 4, 4), (16, 2, 2, 1), (3, 8, 3, 2)] {
            let p = pool(n, cores);
            assert_eq!(p.threads.len(), threads);
            let seen = Job::spawn(&p, rayon::current_num_threads).finish();
            assert_eq!(seen, kernels, "{n} participants on {cores} cores");
        }
    }

    #[test]
    fn a_panic_in_a_job_resumes_at_finish_with_its_message() {
        let p = pool(2, 2);
        let job = Job::spawn(&p, || -> u32 { panic!("math failed: 42") });
        let err = catch_unwind(AssertUnwindSafe(|| job.finish())).expect_err("the panic resumes");
        assert_eq!(err.downcast_ref::<&str>(), Some(&"math failed: 42"));
        // The job thread survived it.
        assert_eq!(Job::spawn(&p, || 5).finish(), 5);
    }

    #[test]
    fn a_dropped_job_has_finished_or_never_run_when_drop_returns() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let p = pool(2, 2);
        for _ in 0..50 {
            let state = AtomicUsize::new(0);
            let job = Job::spawn(&p, || {
                state.store(1, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(1));
                state.store(2, Ordering::SeqCst);
            });
            drop(job);
            // Never half-way: started math was waited for.
            assert_ne!(state.load(Ordering::SeqCst), 1);
        }
    }
}
