//! Started (non-blocking) collectives on a dedicated communication thread
//! per worker: the papers' "communication stream".
//!
//! The worker moves its buffers into `start_*` and gets them back, reduced,
//! from [`OpHandle::wait`]: no copy, no buffer allocation (one small `Arc`
//! per op carries the completion). Ops of one [`CommThread`] run in the
//! order they were started.
//!
//! With a [`LinkModel`] the thread emulates a slow network: it first waits
//! until every rank has joined the op (a barrier, not counted in the stats),
//! runs the collective, then sleeps until `join + modeled time`, so every
//! rank's op completes at about `last join + max(copy, modeled)`, as over a
//! real link. Example (not a test, timings are noisy here): two workers that
//! compute 30 ms while an all-reduce modeled at 30 ms is in flight finish a
//! round in ~30 ms, not 60.

use super::{CommStats, Communicator, LinkModel, ReduceOp};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Which collective an op is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// In-place all-reduce.
    AllReduce,
    /// Input of `world * m` to output of `m`.
    ReduceScatter,
    /// Input of `m` to output of `world * m`.
    AllGather,
    /// In-place broadcast.
    Broadcast,
    /// A [`Task`].
    Task,
}

/// A finished op: the buffers, handed back, and its timing.
#[derive(Debug)]
pub struct Completed {
    /// Which collective ran.
    pub kind: OpKind,
    /// The result: the reduced/broadcast buffer, or reduce-scatter's or
    /// all-gather's output.
    pub output: Vec<f32>,
    /// Reduce-scatter's or all-gather's input, handed back for reuse; empty
    /// (unallocated) for in-place ops.
    pub input: Vec<f32>,
    /// Wall time on the communication thread, from the op's start there
    /// (after earlier ops) to its completion, waiting for peers and the
    /// link hold included.
    pub measured: Duration,
    /// Time the link model gives this op (zero without a model).
    pub modeled: Duration,
    /// What a task (see [`CommThread::start_task`]) returned; `None` for collectives.
    pub task: Option<Box<dyn std::any::Any + Send>>,
}

/// Work run on the communication thread with its communicator: several
/// collectives and local work between them (e.g. a sharded optimizer step).
/// Returns its result and the link time it models.
pub type Task =
    Box<dyn FnOnce(&mut dyn Communicator, Option<&LinkModel>) -> (Box<dyn std::any::Any + Send>, f64) + Send>;

enum Job {
    AllReduce(Vec<f32>, ReduceOp),
    ReduceScatter(Vec<f32>, Vec<f32>, ReduceOp),
    AllGather(Vec<f32>, Vec<f32>),
    Broadcast(Vec<f32>, usize),
    Task(Task),
}

struct OpState {
    done: AtomicBool,
    /// `Err` when the communication thread died before finishing the op.
    slot: Mutex<Option<Result<Completed, String>>>,
    cv: Condvar,
}

/// Completes the op with an error if dropped unfinished (a panic on the
/// communication thread, or a queued op dropped at shutdown), so `wait`
/// never hangs on a dead thread.
struct Pending(Arc<OpState>);

impl Pending {
    fn complete(&self, r: Result<Completed, String>) {
        let mut slot = self.0.slot.lock().unwrap_or_else(|e| e.into_inner());
        *slot = Some(r);
        self.0.done.store(true, Ordering::Release);
        self.0.cv.notify_all();
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.0.done.load(Ordering::Acquire) {
            self.complete(Err("the communication thread stopped (panicked) before finishing this op".into()));
        }
    }
}

/// A started collective.
pub struct OpHandle {
    state: Arc<OpState>,
}

impl OpHandle {
    /// Whether the op has completed; one atomic load, never blocks.
    pub fn is_done(&self) -> bool {
        self.state.done.load(Ordering::Acquire)
    }

    /// Blocks until the op completes and returns its buffers. Panics if the
    /// communication thread died (e.g. a peer rank panicked).
    pub fn wait(self) -> Completed {
        let mut slot = self.state.slot.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = slot.take() {
                drop(slot);
                return r.unwrap_or_else(|e| panic!("comm op failed: {e}"));
            }
            slot = self.state.cv.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// One worker's communication thread, owning its [`Communicator`].
pub struct CommThread {
    tx: Option<mpsc::Sender<(Job, Pending)>>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<Mutex<CommStats>>,
    rank: usize,
    world: usize,
}

impl CommThread {
    /// Moves `comm` onto a new thread; `link` makes it emulate that network.
    pub fn spawn(comm: Box<dyn Communicator>, link: Option<LinkModel>) -> CommThread {
        let (rank, world) = (comm.rank(), comm.world());
        let (tx, rx) = mpsc::channel::<(Job, Pending)>();
        let stats = Arc::new(Mutex::new(comm.stats()));
        let shared = stats.clone();
        let thread = std::thread::Builder::new()
            .name(format!("comm-{rank}"))
            .spawn(move || serve(comm, link, rx, shared))
            .expect("spawn communication thread");
        CommThread { tx: Some(tx), thread: Some(thread), stats, rank, world }
    }

    /// Rank of the wrapped communicator.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// World size of the wrapped communicator.
    pub fn world(&self) -> usize {
        self.world
    }

    /// Traffic of the ops completed so far.
    pub fn stats(&self) -> CommStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn start(&self, job: Job) -> OpHandle {
        let state = Arc::new(OpState { done: AtomicBool::new(false), slot: Mutex::new(None), cv: Condvar::new() });
        let pending = Pending(state.clone());
        // If the thread is gone, the message (and `pending`) is dropped,
        // which completes the op with an error: `wait` reports it.
        let _ = self.tx.as_ref().expect("comm thread running").send((job, pending));
        OpHandle { state }
    }

    /// Starts an in-place all-reduce of `buf`.
    pub fn start_all_reduce(&self, buf: Vec<f32>, op: ReduceOp) -> OpHandle {
        self.start(Job::AllReduce(buf, op))
    }

    /// Starts a reduce-scatter; `input.len()` must be `world * output.len()`.
    pub fn start_reduce_scatter(&self, input: Vec<f32>, output: Vec<f32>, op: ReduceOp) -> OpHandle {
        assert_eq!(
            input.len(),
            self.world * output.len(),
            "start_reduce_scatter: input.len() must be world * output.len()"
        );
        self.start(Job::ReduceScatter(input, output, op))
    }

    /// Starts an all-gather; `output.len()` must be `world * input.len()`.
    pub fn start_all_gather(&self, input: Vec<f32>, output: Vec<f32>) -> OpHandle {
        assert_eq!(
            output.len(),
            self.world * input.len(),
            "start_all_gather: output.len() must be world * input.len()"
        );
        self.start(Job::AllGather(input, output))
    }

    /// Starts a task on the communication thread (after the ops before it).
    pub fn start_task(&self, task: Task) -> OpHandle {
        self.start(Job::Task(task))
    }

    /// Starts a broadcast of `buf` from rank `root`.
    pub fn start_broadcast(&self, buf: Vec<f32>, root: usize) -> OpHandle {
        assert!(root < self.world, "start_broadcast: root {root} out of range for world {}", self.world);
        self.start(Job::Broadcast(buf, root))
    }
}

impl Drop for CommThread {
    /// Finishes the ops already started, then joins the thread.
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            // A panic there was already reported to the op's `wait`.
            let _ = t.join();
        }
    }
}

/// The communication thread's loop: one op at a time, in order.
fn serve(
    mut comm: Box<dyn Communicator>,
    link: Option<LinkModel>,
    rx: mpsc::Receiver<(Job, Pending)>,
    stats: Arc<Mutex<CommStats>>,
) {
    let (p, b) = (comm.world(), comm.wire().bytes_per_elem());
    let mut hold_barriers = 0;
    for (job, pending) in rx {
        let begin = Instant::now();
        let modeled = link.map_or(0.0, |l| match &job {
            Job::AllReduce(buf, _) => l.all_reduce_s(buf.len(), b, p),
            Job::ReduceScatter(input, _, _) => l.reduce_scatter_s(input.len(), b, p),
            Job::AllGather(_, output) => l.all_gather_s(output.len(), b, p),
            Job::Broadcast(buf, _) => l.broadcast_s(buf.len(), b, p),
            Job::Task(_) => 0.0, // the task reports its own
        });
        let modeled = Duration::from_secs_f64(modeled);
        let joined = if link.is_some() {
            // Transfer starts once everyone has joined, as on a real link.
            comm.barrier();
            hold_barriers += 1;
            Instant::now()
        } else {
            begin
        };
        let mut task_out = None;
        let mut modeled = modeled;
        let (kind, output, input) = match job {
            Job::Task(task) => {
                let (out, m) = task(comm.as_mut(), link.as_ref());
                task_out = Some(out);
                modeled = Duration::from_secs_f64(m);
                (OpKind::Task, Vec::new(), Vec::new())
            }
            Job::AllReduce(mut buf, op) => {
                comm.all_reduce(&mut buf, op);
                (OpKind::AllReduce, buf, Vec::new())
            }
            Job::ReduceScatter(input, mut output, op) => {
                comm.reduce_scatter(&input, &mut output, op);
                (OpKind::ReduceScatter, output, input)
            }
            Job::AllGather(input, mut output) => {
                comm.all_gather(&input, &mut output);
                (OpKind::AllGather, output, input)
            }
            Job::Broadcast(mut buf, root) => {
                comm.broadcast(&mut buf, root);
                (OpKind::Broadcast, buf, Vec::new())
            }
        };
        let until = joined + modeled;
        let now = Instant::now();
        if until > now {
            std::thread::sleep(until - now);
        }
        let mut s = comm.stats();
        s.ops -= hold_barriers; // emulation barriers are not traffic
        *stats.lock().unwrap_or_else(|e| e.into_inner()) = s;
        pending.complete(Ok(Completed { kind, output, input, measured: begin.elapsed(), modeled, task: task_out }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::{LocalGroup, Tier, WireDtype};

    fn threads(world: usize, link: Option<LinkModel>) -> Vec<CommThread> {
        LocalGroup::new(world, WireDtype::F32).into_iter().map(|c| CommThread::spawn(Box::new(c), link)).collect()
    }

    #[test]
    fn started_ops_complete_in_order_with_right_results() {
        let p = 3;
        let workers = threads(p, None);
        std::thread::scope(|s| {
            for ct in &workers {
                s.spawn(move || {
                    let r = ct.rank() as f32;
                    let h0 = ct.start_all_reduce(vec![r; 5], ReduceOp::Sum);
                    let h1 = ct.start_reduce_scatter(vec![r; 6], vec![0.0; 2], ReduceOp::Mean);
                    let h2 = ct.start_all_gather(vec![r, r], vec![0.0; 6]);
                    let h3 = ct.start_broadcast(vec![r; 4], 2);
                    // Waiting on the last op implies the earlier ones are done.
                    let c3 = h3.wait();
                    assert!(h0.is_done() && h1.is_done() && h2.is_done());
                    assert_eq!((c3.kind, c3.output), (OpKind::Broadcast, vec![2.0; 4]));
                    let c2 = h2.wait();
                    assert_eq!(c2.output, vec![0.0, 0.0, 1.0, 1.0, 2.0, 2.0]);
                    assert_eq!(c2.input, vec![r, r]);
                    let c1 = h1.wait();
                    assert_eq!((c1.output, c1.input.len()), (vec![1.0; 2], 6));
                    let c0 = h0.wait();
                    assert_eq!((c0.kind, c0.output, c0.modeled), (OpKind::AllReduce, vec![3.0; 5], Duration::ZERO));
                });
            }
        });
        // 5 f32 all-reduce on 3 ranks: 2*2*20/3 = 26 bytes (integer division).
        let s = workers[0].stats();
        assert_eq!(s.ops, 4);
        assert_eq!(s.bytes_sent, 26 + 2 * 2 * 4 + 2 * 2 * 4 + 16);
    }

    #[test]
    fn slow_link_op_stays_in_flight_while_worker_computes() {
        // 2 workers, 100 ms latency, 4000 bytes at 1 GB/s:
        // all-reduce = 2 * 1 * 0.1 s + 2 * (1/2) * 4000 / 1e9 s = 200.004 ms.
        let link = LinkModel::flat(Tier { latency_s: 0.1, bandwidth_bytes_per_s: 1e9 });
        let workers = threads(2, Some(link));
        std::thread::scope(|s| {
            for ct in &workers {
                s.spawn(move || {
                    let h = ct.start_all_reduce(vec![ct.rank() as f32 + 1.0; 1000], ReduceOp::Sum);
                    assert!(!h.is_done(), "held for 200 ms, cannot be done yet");
                    // The caller is free meanwhile.
                    let work: f64 = (0..100_000).map(|i| (i as f64).sqrt()).sum();
                    assert!(work > 0.0);
                    let c = h.wait();
                    assert_eq!(c.output, vec![3.0; 1000]);
                    assert!((c.modeled.as_secs_f64() - 0.200_004).abs() < 1e-9);
                    assert!(c.measured >= c.modeled);
                });
            }
        });
        // The emulation barrier is not counted.
        assert_eq!(workers[1].stats().ops, 1);
    }

    #[test]
    fn dead_peer_makes_wait_panic_instead_of_hang() {
        let mut comms = LocalGroup::new(2, WireDtype::F32);
        drop(comms.pop()); // rank 1 leaves the group
        let ct = CommThread::spawn(Box::new(comms.pop().unwrap()), None);
        let h = ct.start_all_reduce(vec![1.0; 4], ReduceOp::Sum);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.wait()));
        let msg = r.unwrap_err().downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("communication thread stopped"), "{msg}");
        // Later ops on the dead thread fail the same way.
        let h2 = ct.start_all_reduce(vec![1.0; 4], ReduceOp::Sum);
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h2.wait())).is_err());
    }
}
