//! The real runtime: one OS thread per participant, each with its own
//! communication thread, so a started task really runs while the
//! participant computes. Optional link emulation (the communication side
//! holds each collective and message for its modeled time, real_comm.rs)
//! and per-worker slowdown: a worker of speed s waits (1/s - 1) x its
//! measured compute time after each micro-batch (the ACCO paper's Sec. 5.5
//! protocol).
//!
//! Tasks run on the communication thread in start order; a handle's
//! `is_done` is one atomic load and `wait` blocks on a condvar. A task that
//! panics, or a communication thread that dies, completes every pending
//! handle with an error, so `wait` reports it instead of hanging. A
//! participant whose program returns an error or panics tells the fabric
//! (`FailureGuard`), so the others stop waiting for messages and the run
//! ends with its error instead of hanging.

use super::real_comm::{RealComm, Receiving};
use super::{CommTask, Ctx, StartClocks, Topology, Work, WorkerTimes};
use crate::comm::activity::Computing;
use crate::comm::stranded::{panic_text, stranded};
use crate::comm::{Fabric, LinkModel, LocalFabric};
use crate::metrics::{EventLog, Span};
use anyhow::{anyhow, bail, Result};
use std::any::Any;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the real cluster runs.
#[derive(Clone, Debug)]
pub struct RealSpec {
    /// Speed factor per worker (1 nominal); the server runs at 1.
    pub speeds: Vec<f64>,
    /// Emulated link; `None`: as fast as the backend allows.
    pub link: Option<LinkModel>,
    /// Workers, nodes, server.
    pub topology: Topology,
    /// Where each participant's clock and accounting start (empty: zero).
    pub start: StartClocks,
}

impl RealSpec {
    /// `workers` equal workers in one flat group, no emulated link.
    pub fn flat(workers: usize) -> RealSpec {
        RealSpec { speeds: vec![1.0; workers], link: None, topology: Topology::flat(workers), start: Vec::new() }
    }
}

/// Completion of one task, shared by the handle and the communication thread.
struct OpState {
    done: AtomicBool,
    /// `Err` when the communication side failed before finishing the task.
    slot: Mutex<Option<Result<Box<dyn Any + Send>, String>>>,
    cv: Condvar,
}

/// Completes the task with an error if dropped unfinished (a panic on the
/// communication thread, or a task dropped at shutdown), so `wait` never
/// hangs on a dead thread.
struct Pending(Arc<OpState>);

impl Pending {
    fn complete(&self, r: Result<Box<dyn Any + Send>, String>) {
        let mut slot = self.0.slot.lock().unwrap_or_else(|e| e.into_inner());
        *slot = Some(r);
        self.0.done.store(true, Ordering::Release);
        self.0.cv.notify_all();
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.0.done.load(Ordering::Acquire) {
            self.complete(Err(
                "the communication thread stopped (a peer failed or a task panicked) before finishing this task".into(),
            ));
        }
    }
}

type JobFn = Box<dyn FnOnce(&mut RealComm) -> Box<dyn Any + Send> + Send>;

struct Job {
    round: u64,
    run: JobFn,
    done: Pending,
}

/// A started task with output `T`.
pub struct RealHandle<T> {
    state: Arc<OpState>,
    _out: PhantomData<T>,
}

/// A participant's view of the real cluster.
pub struct RealCtx {
    rank: usize,
    topo: Topology,
    jobs: Option<mpsc::Sender<Job>>,
    comm_thread: Option<JoinHandle<()>>,
    comm_events: Arc<Mutex<EventLog>>,
    speed: f64,
    t0: Instant,
    times: WorkerTimes,
    events: EventLog,
    round: u64,
    in_flight: usize,
    /// Measured micro-batches (slowdown included): count and seconds.
    measured: (u64, f64),
}

impl Drop for RealCtx {
    /// Finishes the tasks already started, then joins the communication thread.
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(t) = self.comm_thread.take() {
            // A panic there was already reported to the task's `wait`.
            let _ = t.join();
        }
    }
}

impl Ctx for RealCtx {
    type Handle<T: Send + 'static> = RealHandle<T>;
    fn rank(&self) -> usize {
        self.rank
    }
    fn topology(&self) -> Topology {
        self.topo
    }
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
    fn speed(&self) -> f64 {
        self.speed
    }
    fn micro_batch_estimate_s(&self) -> Option<f64> {
        (self.measured.0 > 0).then(|| self.measured.1 / self.measured.0 as f64)
    }
    async fn compute<R: Send>(&mut self, work: Work, f: impl FnOnce() -> R + Send) -> R {
        let start = self.now();
        let t = Instant::now();
        // The communication thread waits by this (comm/activity.rs); an
        // emulated slow worker's sleep counts as computing.
        let computing = Computing::start();
        let r = f();
        let dt = t.elapsed();
        let mb = work == Work::MicroBatch;
        if mb && self.speed < 1.0 {
            std::thread::sleep(dt.mul_f64(1.0 / self.speed - 1.0));
        }
        drop(computing);
        let spent = t.elapsed().as_secs_f64();
        self.times.compute_s += spent;
        if mb {
            self.times.micro_batches += 1;
            self.measured = (self.measured.0 + 1, self.measured.1 + spent);
        }
        let span = Span::compute(self.rank, work.name(), start, start + spent);
        self.events.push(span.with_micro_batches(u32::from(mb)).with_round(self.round));
        r
    }
    fn start<T: CommTask>(&mut self, task: T) -> RealHandle<T::Output> {
        self.times.collectives += 1;
        self.in_flight += 1;
        let state = Arc::new(OpState { done: AtomicBool::new(false), slot: Mutex::new(None), cv: Condvar::new() });
        let run: JobFn = Box::new(move |comm: &mut RealComm| Box::new(block_on(task.run(comm))) as Box<dyn Any + Send>);
        let job = Job { round: self.round, run, done: Pending(state.clone()) };
        // If the thread is gone, the job (and its Pending) is dropped, which
        // completes the task with an error: `wait` reports it.
        let _ = self.jobs.as_ref().expect("communication thread running").send(job);
        RealHandle { state, _out: PhantomData }
    }
    fn is_done<T: Send + 'static>(&self, h: &RealHandle<T>) -> bool {
        h.state.done.load(Ordering::Acquire)
    }
    async fn wait<T: Send + 'static>(&mut self, h: RealHandle<T>) -> T {
        let t = Instant::now();
        let out = {
            let mut slot = h.state.slot.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(r) = slot.take() {
                    break r;
                }
                slot = h.state.cv.wait(slot).unwrap_or_else(|e| e.into_inner());
            }
        };
        self.times.idle_s += t.elapsed().as_secs_f64();
        self.in_flight -= 1;
        let out = out.unwrap_or_else(|e| stranded(format!("participant {}: communication failed: {e}", self.rank)));
        *out.downcast::<T>().expect("a task's output has the task's type")
    }
    fn in_flight(&self) -> usize {
        self.in_flight
    }
    fn times(&self) -> WorkerTimes {
        WorkerTimes { total_s: self.now(), ..self.times.clone() }
    }
    fn mark_round(&mut self, round: u64) {
        self.round = round;
    }
    fn take_events(&mut self) -> EventLog {
        let comm = std::mem::take(&mut *self.comm_events.lock().unwrap_or_else(|e| e.into_inner()));
        EventLog::merge(vec![std::mem::take(&mut self.events), comm])
    }
}

/// Drives a future whose awaits never suspend (every real-runtime operation
/// blocks instead): one poll completes it.
pub(super) fn block_on<T>(fut: impl Future<Output = T>) -> T {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        // Only reachable if a future from outside this runtime suspends.
        std::thread::yield_now();
    }
}

/// Runs every participant of `spec.topology` as threads of this process,
/// over an in-process fabric; `make(ctx)` builds participant p's future.
pub fn run<T, F, Fut>(spec: RealSpec, make: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(RealCtx) -> Fut + Sync,
    Fut: Future<Output = Result<T>>,
{
    spec.topology.validate()?;
    let fabrics =
        LocalFabric::job(spec.topology.participants()).into_iter().map(|f| Box::new(f) as Box<dyn Fabric>).collect();
    run_with(spec, fabrics, make)
}

/// Runs one participant thread per fabric in `fabrics` (all participants of
/// an in-process job, or this process's participant of an MPI job); results
/// in the order of `fabrics`.
pub fn run_with<T, F, Fut>(spec: RealSpec, fabrics: Vec<Box<dyn Fabric>>, make: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(RealCtx) -> Fut + Sync,
    Fut: Future<Output = Result<T>>,
{
    let topo = spec.topology;
    topo.validate()?;
    if spec.speeds.len() != topo.workers {
        bail!("real runtime: {} speed factors for {} workers", spec.speeds.len(), topo.workers);
    }
    if let Some(f) = fabrics.iter().find(|f| f.participants() != topo.participants()) {
        bail!("real runtime: the fabric has {} participants but the job has {}", f.participants(), topo.participants());
    }
    // A resumed run continues its clock from the latest saved one.
    let resumed_s = spec.start.iter().map(|t| t.total_s).fold(0.0, f64::max);
    let t0 = Instant::now().checked_sub(Duration::from_secs_f64(resumed_s)).unwrap_or_else(Instant::now);
    // With a link model, when each participant's link has taken in the last
    // message sent to it (real_comm.rs, `send`): shared by the participants
    // of this process (all of them on threads; under MPI a rank's own).
    let receiving: Receiving = Arc::new(Mutex::new(vec![t0; topo.participants()]));
    let participants_here = fabrics.len();
    let results: Vec<Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = fabrics
            .into_iter()
            .map(|fabric| {
                let (make, spec, receiving) = (&make, &spec, receiving.clone());
                let rank = fabric.rank();
                s.spawn(move || {
                    let mut failed = FailureGuard { notice: fabric.failure_notice(), ok: false };
                    let comm_events = Arc::new(Mutex::new(EventLog::new()));
                    let (tx, rx) = mpsc::channel::<Job>();
                    let (link, events) = (spec.link, comm_events.clone());
                    let comm_thread = std::thread::Builder::new()
                        .name(format!("comm-{rank}"))
                        .spawn(move || serve(fabric, link, topo, t0, rx, events, receiving))
                        .expect("spawn communication thread");
                    let ctx = RealCtx {
                        rank,
                        topo,
                        jobs: Some(tx),
                        comm_thread: Some(comm_thread),
                        comm_events,
                        speed: spec.speeds.get(rank).copied().unwrap_or(1.0),
                        t0,
                        times: spec.start.get(rank).cloned().unwrap_or_default(),
                        events: EventLog::new(),
                        round: 0,
                        in_flight: 0,
                        measured: (0, 0.0),
                    };
                    // A lone participant computes inside a pool (kernel_pool.rs).
                    let kernels = super::kernel_pool::for_participants(participants_here, &format!("worker-{rank}"));
                    let result = super::kernel_pool::run(kernels.as_ref(), || block_on(make(ctx)));
                    // A participant stopped at the agreed boundary did not fail: the others run on to it.
                    failed.ok = result.as_ref().map_or_else(super::is_stopped, |_| true);
                    result
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| Err(anyhow!("a participant thread panicked: {}", panic_text(&*p)))))
            .collect()
    });
    // The first real error explains the others (peers that panicked because it left);
    // a participant stopped on request is the run's end only when nothing failed.
    let real = |e: &anyhow::Error| !e.to_string().starts_with("a participant thread panicked") && !super::is_stopped(e);
    if let Some(i) = results
        .iter()
        .position(|r| r.as_ref().is_err_and(real))
        .or_else(|| results.iter().position(|r| r.as_ref().is_err_and(super::is_stopped)))
    {
        return Err(results.into_iter().nth(i).expect("exists").err().expect("an error"));
    }
    results.into_iter().collect()
}

/// Tells the other participants (`Fabric::failure_notice`) that this one's
/// program failed, when it returns an error or panics (the guard is then
/// dropped unwinding, `ok` still false): a peer waiting for a message, maybe
/// from a third participant that waits on this one, then fails instead of
/// hanging, and the run reports this participant's error.
struct FailureGuard {
    notice: Box<dyn Fn() + Send + Sync>,
    ok: bool,
}

impl Drop for FailureGuard {
    fn drop(&mut self) {
        if !self.ok {
            (self.notice)();
        }
    }
}

/// The communication thread's loop: one task at a time, in order.
fn serve(
    mut fabric: Box<dyn Fabric>,
    link: Option<LinkModel>,
    topo: Topology,
    t0: Instant,
    rx: mpsc::Receiver<Job>,
    events: Arc<Mutex<EventLog>>,
    receiving: Receiving,
) {
    for job in rx {
        let mut comm = RealComm::new(fabric.as_mut(), link, topo, t0, &events, &receiving, job.round);
        let out = (job.run)(&mut comm);
        job.done.complete(Ok(out));
    }
}
