//! The real runtime: one OS thread per worker, each with its own
//! communication thread ([`CommThread`]), so a started collective really
//! runs while the worker computes. Optional link emulation (the comm thread
//! holds each op for its modeled time) and per-worker slowdown: a worker of
//! speed s waits (1/s - 1) x its measured compute time after each
//! micro-batch (the ACCO paper's Sec. 5.5 protocol).

use super::{work_name, Collective, Ctx, Finished, ShardedOp, Work, WorkerTimes};
use crate::comm::async_op::{CommThread, OpHandle};
use crate::comm::{Communicator, LinkModel, LocalGroup, ReduceOp, WireDtype};
use crate::metrics::{EventLog, Span};
use anyhow::{bail, Result};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// How the real cluster runs.
#[derive(Clone, Debug)]
pub struct RealSpec {
    /// Speed factor per worker (1 nominal).
    pub speeds: Vec<f64>,
    /// Emulated link; `None`: as fast as shared memory allows.
    pub link: Option<LinkModel>,
    /// What travels on the wire.
    pub wire: WireDtype,
}

/// A worker's view of the real cluster.
pub struct RealCtx {
    rank: usize,
    world: usize,
    comm: CommThread,
    speed: f64,
    t0: Instant,
    times: WorkerTimes,
    events: EventLog,
    round: u64,
    bytes_per_elem: usize,
    /// When the communication thread finishes the ops started so far: ops
    /// run in order, so the next one starts at max(its start call, this).
    comm_free_at: f64,
}

/// A started op with what its span needs.
pub struct RealHandle {
    op: OpHandle,
    name: &'static str,
    called_at: f64,
    bytes: u64,
}

impl Ctx for RealCtx {
    type Handle = RealHandle;
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
    async fn compute<R>(&mut self, work: Work, f: impl FnOnce() -> R) -> R {
        let start = self.now();
        let t = Instant::now();
        let r = f();
        let dt = t.elapsed();
        if work == Work::MicroBatch && self.speed < 1.0 {
            std::thread::sleep(dt.mul_f64(1.0 / self.speed - 1.0));
        }
        let spent = t.elapsed().as_secs_f64();
        self.times.compute_s += spent;
        self.times.micro_batches += u64::from(work == Work::MicroBatch);
        let mb = u32::from(work == Work::MicroBatch);
        self.events.push(
            Span::compute(self.rank, work_name(work), start, start + spent)
                .with_micro_batches(mb)
                .with_round(self.round),
        );
        r
    }
    fn start(&mut self, op: Collective) -> RealHandle {
        self.times.collectives += 1;
        let (name, bytes, called_at) =
            (op.name(), op.bytes_sent(self.rank, self.world, self.bytes_per_elem), self.now());
        let op = match op {
            Collective::AllReduce { buf, op } => self.comm.start_all_reduce(buf, op),
            Collective::ReduceScatter { input, output, op } => self.comm.start_reduce_scatter(input, output, op),
            Collective::AllGather { input, output } => self.comm.start_all_gather(input, output),
            Collective::Broadcast { buf, root } => self.comm.start_broadcast(buf, root),
            Collective::Sharded(op) => self.comm.start_task(sharded_task(op)),
        };
        RealHandle { op, name, called_at, bytes }
    }
    fn is_done(&self, h: &RealHandle) -> bool {
        h.op.is_done()
    }
    async fn wait(&mut self, h: RealHandle) -> Finished {
        let t = Instant::now();
        let c = h.op.wait();
        self.times.idle_s += t.elapsed().as_secs_f64();
        let begin = h.called_at.max(self.comm_free_at);
        let end = begin + c.measured.as_secs_f64();
        self.comm_free_at = end;
        self.events.push(Span::comm(self.rank, h.name, begin, end).with_bytes(h.bytes).with_round(self.round));
        let sharded = c.task.map(|t| t.downcast::<ShardedOp>().expect("a sharded round returns its ShardedOp"));
        Finished { output: c.output, input: c.input, sharded }
    }
    fn times(&self) -> WorkerTimes {
        WorkerTimes { total_s: self.now(), ..self.times.clone() }
    }
    fn mark_round(&mut self, round: u64) {
        self.round = round;
    }
    fn take_events(&mut self) -> EventLog {
        std::mem::take(&mut self.events)
    }
}

/// A sharded round as a task for the communication thread: the same steps,
/// in the same order and with the same element recipes, as the simulated
/// runtime's, so both give the same bits.
fn sharded_task(mut op: Box<ShardedOp>) -> crate::comm::async_op::Task {
    Box::new(move |comm: &mut dyn Communicator, link: Option<&LinkModel>| {
        let (p, bpe, padded) = (comm.world(), comm.wire().bytes_per_elem(), op.flat.len());
        let cost = |f: &dyn Fn(&LinkModel) -> f64| link.map_or(0.0, f);
        let mut modeled = 0.0;
        let total = match op.known_total {
            Some(t) => t,
            None => {
                let mut c = [op.count];
                comm.all_reduce(&mut c, ReduceOp::Sum);
                modeled += cost(&|l| l.all_reduce_s(1, bpe, p));
                c[0]
            }
        };
        let o = &mut *op;
        comm.reduce_scatter(&o.flat, &mut o.shard_g, ReduceOp::Sum);
        modeled += cost(&|l| l.reduce_scatter_s(padded, bpe, p));
        op.normalise(total);
        if op.clip > 0.0 {
            let mut sq = [op.shard_sq_norm()];
            comm.all_reduce(&mut sq, ReduceOp::Sum);
            op.clip_by(sq[0]);
            modeled += cost(&|l| l.all_reduce_s(1, bpe, p));
        }
        op.run_step();
        let o = &mut *op;
        comm.all_gather(&o.shard_out, &mut o.flat);
        modeled += cost(&|l| l.all_gather_s(padded, bpe, p));
        (op as Box<dyn std::any::Any + Send>, modeled)
    })
}

/// Drive a future whose awaits never suspend (every real-runtime operation
/// blocks instead): one poll completes it.
fn block_on<T>(fut: impl Future<Output = T>) -> T {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        // Only reachable if a future from outside this module suspends.
        std::thread::yield_now();
    }
}

/// Run `world` workers, one thread each, over an in-process group;
/// `make(ctx)` builds worker r's future.
pub fn run<T, F, Fut>(spec: RealSpec, world: usize, make: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(RealCtx) -> Fut + Sync,
    Fut: Future<Output = Result<T>>,
{
    let comms = LocalGroup::new(world, spec.wire).into_iter().map(|c| Box::new(c) as Box<dyn Communicator>).collect();
    run_with(spec, comms, make)
}

/// Run one worker thread per communicator in `comms` (all ranks of an
/// in-process group, or this process's rank of an MPI job); results in the
/// order of `comms`. Worker `comm.rank()` gets `spec.speeds[rank]`.
pub fn run_with<T, F, Fut>(spec: RealSpec, comms: Vec<Box<dyn Communicator>>, make: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(RealCtx) -> Fut + Sync,
    Fut: Future<Output = Result<T>>,
{
    let world = comms.first().map_or(0, |c| c.world());
    if spec.speeds.len() != world {
        bail!("real runtime: {} speed factors for {world} workers", spec.speeds.len());
    }
    let t0 = Instant::now();
    let results: Vec<Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .map(|comm| {
                let (make, spec) = (&make, &spec);
                s.spawn(move || {
                    let rank = comm.rank();
                    let comm = CommThread::spawn(comm, spec.link);
                    let ctx = RealCtx {
                        rank,
                        world,
                        comm,
                        speed: spec.speeds[rank],
                        t0,
                        times: WorkerTimes::default(),
                        events: EventLog::new(),
                        round: 0,
                        bytes_per_elem: spec.wire.bytes_per_elem(),
                        comm_free_at: 0.0,
                    };
                    block_on(make(ctx))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a worker thread panicked"))))
            .collect()
    });
    results.into_iter().collect()
}
