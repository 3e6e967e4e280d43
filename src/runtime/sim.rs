//! The simulated cluster: real math, virtual time, one thread.
//!
//! Every worker is a future. The executor keeps a queue of wake-ups ordered
//! by (virtual time, rank) and polls one worker at a time, so the order in
//! which things happen depends only on the cost model: the same seed gives
//! the same bits, every run.
//!
//! - [`Ctx::compute`] runs the math at once and resumes the worker at
//!   `now + cost / speed`.
//! - A collective completes at `max(join times) + link cost`; its math runs
//!   when the last member joins (same element recipe as the local backend:
//!   ranks summed in order 0..p, Mean by division, wire rounding), so sim and
//!   real runs of a synchronous strategy give the same bits.
//! - [`Ctx::is_done`] at time t is exact: a peer that joins before t has
//!   already been polled, because events are processed in time order.

use super::{work_name, Collective, Ctx, Finished, Work, WorkerTimes};
use crate::comm::{LinkModel, ReduceOp, WireDtype};
use crate::metrics::{EventLog, Span};
use anyhow::{bail, Result};
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// The cost model of a simulated cluster.
#[derive(Clone, Debug)]
pub struct SimSpec {
    /// Virtual seconds of one micro-batch on a worker of speed 1.
    pub micro_batch_s: f64,
    /// Speed factor per worker (1 nominal, 0.25 = four times slower).
    pub speeds: Vec<f64>,
    /// Link costs; `None` makes communication free.
    pub link: Option<LinkModel>,
    /// What travels on the wire.
    pub wire: WireDtype,
    /// Multiplier from elements communicated to elements costed, so a small
    /// model can be trained under the timing of a big one
    /// (timing-model parameters / real parameters).
    pub comm_scale: f64,
}

#[derive(Clone, Copy, PartialEq)]
struct Time(f64);
impl Eq for Time {}
impl Ord for Time {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}
impl PartialOrd for Time {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// A collective in flight: who joined with what, and when it completes.
struct SimOp {
    joined: Vec<Option<(Collective, f64)>>,
    count: usize,
    done_at: Option<f64>,
    results: Vec<Option<Finished>>,
    waiters: Vec<usize>,
}

struct State {
    now: f64,
    wakes: BinaryHeap<Reverse<(Time, usize)>>,
    /// Ops by sequence number; every worker starts collectives in the same order.
    ops: BTreeMap<u64, SimOp>,
    started: Vec<u64>,
    spec: SimSpec,
    times: Vec<WorkerTimes>,
    events: Vec<EventLog>,
    rounds: Vec<u64>,
}

impl State {
    fn wake(&mut self, at: f64, rank: usize) {
        self.wakes.push(Reverse((Time(at), rank)));
    }
}

/// A worker's view of the simulated cluster.
pub struct SimCtx {
    rank: usize,
    world: usize,
    state: Rc<RefCell<State>>,
}

/// Handle of a simulated collective.
pub struct SimHandle(u64);

impl Ctx for SimCtx {
    type Handle = SimHandle;
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn now(&self) -> f64 {
        self.state.borrow().now
    }
    async fn compute<R>(&mut self, work: Work, f: impl FnOnce() -> R) -> R {
        let r = f();
        let (until, dt) = {
            let mut st = self.state.borrow_mut();
            let dt = match work {
                Work::MicroBatch => st.spec.micro_batch_s / st.spec.speeds[self.rank],
                Work::Optimizer { .. } => 0.0,
            };
            let t = &mut st.times[self.rank];
            t.compute_s += dt;
            t.micro_batches += u64::from(work == Work::MicroBatch);
            let (now, round) = (st.now, st.rounds[self.rank]);
            if dt > 0.0 {
                let span = Span::compute(self.rank, work_name(work), now, now + dt)
                    .with_micro_batches(u32::from(work == Work::MicroBatch))
                    .with_round(round);
                st.events[self.rank].push(span);
            }
            (now + dt, dt)
        };
        if dt > 0.0 {
            SleepUntil { state: &self.state, rank: self.rank, until, registered: false }.await;
        }
        r
    }
    fn start(&mut self, op: Collective) -> SimHandle {
        let mut guard = self.state.borrow_mut();
        // Through a plain &mut so fields can be borrowed separately.
        let st = &mut *guard;
        let seq = st.started[self.rank];
        st.started[self.rank] += 1;
        st.times[self.rank].collectives += 1;
        let now = st.now;
        let world = self.world;
        let entry = st.ops.entry(seq).or_insert_with(|| SimOp {
            joined: (0..world).map(|_| None).collect(),
            count: 0,
            done_at: None,
            results: (0..world).map(|_| None).collect(),
            waiters: Vec::new(),
        });
        entry.joined[self.rank] = Some((op, now));
        entry.count += 1;
        if entry.count == world {
            let spec = st.spec.clone();
            let op = st.ops.get_mut(&seq).expect("just inserted");
            let last = op.joined.iter().flatten().map(|(_, t)| *t).fold(0.0, f64::max);
            let bpe = spec.wire.bytes_per_elem();
            let spans: Vec<Span> = op
                .joined
                .iter()
                .enumerate()
                .map(|(r, j)| {
                    let (c, t) = j.as_ref().expect("all joined");
                    Span::comm(r, c.name(), *t, *t).with_bytes(c.bytes_sent(r, world, bpe))
                })
                .collect();
            let (results, cost) = execute(&mut op.joined, &spec);
            let done = last + cost;
            for mut span in spans {
                span.end_s = done;
                span.round = st.rounds[span.worker];
                st.events[span.worker].push(span);
            }
            op.results = results.into_iter().map(Some).collect();
            op.done_at = Some(done);
            let waiters = std::mem::take(&mut op.waiters);
            for w in waiters {
                st.wake(done, w);
            }
        }
        SimHandle(seq)
    }
    fn is_done(&self, h: &SimHandle) -> bool {
        let st = self.state.borrow();
        st.ops.get(&h.0).and_then(|o| o.done_at).is_some_and(|t| t <= st.now)
    }
    async fn wait(&mut self, h: SimHandle) -> Finished {
        let t0 = self.now();
        WaitOp { state: &self.state, rank: self.rank, seq: h.0, registered: false }.await;
        let mut st = self.state.borrow_mut();
        let now = st.now;
        st.times[self.rank].idle_s += now - t0;
        let op = st.ops.get_mut(&h.0).expect("op exists");
        let out = op.results[self.rank].take().expect("each rank takes its result once");
        if op.results.iter().all(Option::is_none) {
            st.ops.remove(&h.0);
        }
        out
    }
    fn times(&self) -> WorkerTimes {
        let st = self.state.borrow();
        WorkerTimes { total_s: st.now, ..st.times[self.rank].clone() }
    }
    fn mark_round(&mut self, round: u64) {
        self.state.borrow_mut().rounds[self.rank] = round;
    }
    fn take_events(&mut self) -> EventLog {
        std::mem::take(&mut self.state.borrow_mut().events[self.rank])
    }
}

struct SleepUntil<'a> {
    state: &'a Rc<RefCell<State>>,
    rank: usize,
    until: f64,
    registered: bool,
}

impl Future for SleepUntil<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        let mut st = self.state.borrow_mut();
        if st.now >= self.until {
            return Poll::Ready(());
        }
        if !self.registered {
            let (u, r) = (self.until, self.rank);
            st.wake(u, r);
            drop(st);
            self.registered = true;
        }
        Poll::Pending
    }
}

struct WaitOp<'a> {
    state: &'a Rc<RefCell<State>>,
    rank: usize,
    seq: u64,
    registered: bool,
}

impl Future for WaitOp<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        let (rank, seq) = (self.rank, self.seq);
        let mut st = self.state.borrow_mut();
        let now = st.now;
        let op = st.ops.get_mut(&seq).expect("waiting on a started op");
        match op.done_at {
            Some(t) if t <= now => return Poll::Ready(()),
            Some(t) if !self.registered => st.wake(t, rank),
            None if !self.registered => op.waiters.push(rank),
            _ => {}
        }
        drop(st);
        self.registered = true;
        Poll::Pending
    }
}

/// The math and the link cost of a collective every member has joined.
fn execute(joined: &mut [Option<(Collective, f64)>], spec: &SimSpec) -> (Vec<Finished>, f64) {
    let p = joined.len();
    let ops: Vec<Collective> = joined.iter_mut().map(|j| j.take().expect("all joined").0).collect();
    let bpe = spec.wire.bytes_per_elem();
    let scaled = |n: usize| (n as f64 * spec.comm_scale).round() as usize;
    let link = |f: &dyn Fn(&LinkModel) -> f64| spec.link.as_ref().map_or(0.0, f);
    let wire = spec.wire;
    match &ops[0] {
        Collective::Sharded(_) => {
            let mut each: Vec<Box<super::ShardedOp>> = ops
                .into_iter()
                .map(|o| if let Collective::Sharded(b) = o { b } else { panic!("mismatched collectives") })
                .collect();
            let m = each[0].shard_g.len();
            let padded = m * p;
            let (known, clip) = (each[0].known_total, each[0].clip > 0.0);
            let total = known.unwrap_or_else(|| {
                let counts: Vec<[f32; 1]> = each.iter().map(|o| [o.count]).collect();
                let mut acc = [0.0f32];
                reduce(&mut acc, &counts.iter().map(|c| &c[..]).collect::<Vec<_>>(), 0, ReduceOp::Sum, wire);
                acc[0]
            });
            let shards: Vec<Vec<f32>> = (0..p)
                .map(|r| {
                    let mut acc = vec![0.0f32; m];
                    reduce(&mut acc, &each.iter().map(|o| &o.flat[..]).collect::<Vec<_>>(), r * m, ReduceOp::Sum, wire);
                    acc
                })
                .collect();
            for (o, g) in each.iter_mut().zip(shards) {
                o.shard_g.copy_from_slice(&g);
                o.normalise(total);
            }
            if clip {
                let sq: Vec<[f32; 1]> = each.iter().map(|o| [o.shard_sq_norm()]).collect();
                let mut acc = [0.0f32];
                reduce(&mut acc, &sq.iter().map(|c| &c[..]).collect::<Vec<_>>(), 0, ReduceOp::Sum, wire);
                each.iter_mut().for_each(|o| o.clip_by(acc[0]));
            }
            each.iter_mut().for_each(|o| o.run_step());
            let gathered: Vec<f32> = each.iter().flat_map(|o| o.shard_out.iter().map(|&x| wire.round(x))).collect();
            each.iter_mut().for_each(|o| o.flat.copy_from_slice(&gathered));
            let scalar = |on: bool| if on { link(&|l| l.all_reduce_s(1, bpe, p)) } else { 0.0 };
            let cost = scalar(known.is_none())
                + link(&|l| l.reduce_scatter_s(scaled(padded), bpe, p))
                + scalar(clip)
                + link(&|l| l.all_gather_s(scaled(padded), bpe, p));
            (
                each.into_iter()
                    .map(|o| Finished { output: Vec::new(), input: Vec::new(), sharded: Some(o) })
                    .collect(),
                cost,
            )
        }
        Collective::AllReduce { buf, op } => {
            let (n, op) = (buf.len(), *op);
            let mut acc = vec![0.0f32; n];
            let srcs: Vec<&[f32]> = ops
                .iter()
                .map(|o| {
                    if let Collective::AllReduce { buf, .. } = o {
                        &buf[..]
                    } else {
                        panic!("mismatched collectives")
                    }
                })
                .collect();
            reduce(&mut acc, &srcs, 0, op, wire);
            let cost = link(&|l| l.all_reduce_s(scaled(n), bpe, p));
            let res = ops.into_iter().map(|o| match o {
                Collective::AllReduce { mut buf, .. } => {
                    buf.copy_from_slice(&acc);
                    Finished { output: buf, input: Vec::new(), sharded: None }
                }
                _ => unreachable!(),
            });
            (res.collect(), cost)
        }
        Collective::ReduceScatter { output, op, .. } => {
            let (m, op) = (output.len(), *op);
            let srcs: Vec<&[f32]> = ops
                .iter()
                .map(|o| {
                    if let Collective::ReduceScatter { input, .. } = o {
                        &input[..]
                    } else {
                        panic!("mismatched collectives")
                    }
                })
                .collect();
            let outs: Vec<Vec<f32>> = (0..p)
                .map(|r| {
                    let mut acc = vec![0.0f32; m];
                    reduce(&mut acc, &srcs, r * m, op, wire);
                    acc
                })
                .collect();
            let cost = link(&|l| l.reduce_scatter_s(scaled(m * p), bpe, p));
            let res = ops.into_iter().zip(outs).map(|(o, acc)| match o {
                Collective::ReduceScatter { input, mut output, .. } => {
                    output.copy_from_slice(&acc);
                    Finished { output, input, sharded: None }
                }
                _ => unreachable!(),
            });
            (res.collect(), cost)
        }
        Collective::AllGather { input, .. } => {
            let m = input.len();
            let mut gathered = Vec::with_capacity(m * p);
            for o in &ops {
                let Collective::AllGather { input, .. } = o else { panic!("mismatched collectives") };
                gathered.extend(input.iter().map(|&x| wire.round(x)));
            }
            let cost = link(&|l| l.all_gather_s(scaled(m * p), bpe, p));
            let res = ops.into_iter().map(|o| match o {
                Collective::AllGather { input, mut output } => {
                    output.copy_from_slice(&gathered);
                    Finished { output, input, sharded: None }
                }
                _ => unreachable!(),
            });
            (res.collect(), cost)
        }
        Collective::Broadcast { buf, root } => {
            let (n, root) = (buf.len(), *root);
            let Collective::Broadcast { buf: src, .. } = &ops[root] else { panic!("mismatched collectives") };
            let data: Vec<f32> = src.iter().map(|&x| wire.round(x)).collect();
            let cost = link(&|l| l.broadcast_s(scaled(n), bpe, p));
            let res = ops.into_iter().map(|o| match o {
                Collective::Broadcast { mut buf, .. } => {
                    buf.copy_from_slice(&data);
                    Finished { output: buf, input: Vec::new(), sharded: None }
                }
                _ => unreachable!(),
            });
            (res.collect(), cost)
        }
    }
}

/// `acc[i] = finish(sum_q round(src_q[off + i]))`, ranks in order 0..p: the
/// local backend's element recipe, so sim and real agree bit for bit.
fn reduce(acc: &mut [f32], srcs: &[&[f32]], off: usize, op: ReduceOp, wire: WireDtype) {
    for (q, s) in srcs.iter().enumerate() {
        let s = &s[off..off + acc.len()];
        if q == 0 {
            acc.iter_mut().zip(s).for_each(|(a, &x)| *a = wire.round(x));
        } else {
            acc.iter_mut().zip(s).for_each(|(a, &x)| *a += wire.round(x));
        }
    }
    let p = srcs.len() as f32;
    for a in acc.iter_mut() {
        if op == ReduceOp::Mean {
            *a /= p;
        }
        *a = wire.round(*a);
    }
}

/// Run `world` workers to completion under `spec`. `make(ctx)` builds
/// worker r's future from its context.
pub fn run<'a, T, F, Fut>(spec: SimSpec, world: usize, mut make: F) -> Result<Vec<T>>
where
    F: FnMut(SimCtx) -> Fut,
    Fut: Future<Output = Result<T>> + 'a,
{
    if spec.speeds.len() != world {
        bail!("sim: {} speed factors for {world} workers", spec.speeds.len());
    }
    let state = Rc::new(RefCell::new(State {
        now: 0.0,
        wakes: BinaryHeap::new(),
        ops: BTreeMap::new(),
        started: vec![0; world],
        spec,
        times: vec![WorkerTimes::default(); world],
        events: (0..world).map(|_| EventLog::new()).collect(),
        rounds: vec![0; world],
    }));
    type Worker<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + 'a>>;
    let mut futs: Vec<Option<Worker<'a, T>>> = (0..world)
        .map(|rank| {
            Some(Box::pin(make(SimCtx { rank, world, state: state.clone() }))
                as Pin<Box<dyn Future<Output = Result<T>>>>)
        })
        .collect();
    let mut out: Vec<Option<T>> = (0..world).map(|_| None).collect();
    for r in 0..world {
        state.borrow_mut().wake(0.0, r);
    }
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        let next = state.borrow_mut().wakes.pop();
        let Some(Reverse((Time(t), r))) = next else { break };
        {
            let mut st = state.borrow_mut();
            assert!(t >= st.now, "virtual time went backwards ({} -> {t})", st.now);
            st.now = t;
        }
        let Some(fut) = futs[r].as_mut() else { continue };
        if let Poll::Ready(res) = fut.as_mut().poll(&mut cx) {
            out[r] = Some(res?);
            futs[r] = None;
        }
    }
    let stuck: Vec<usize> = (0..world).filter(|&r| out[r].is_none()).collect();
    if !stuck.is_empty() {
        bail!("simulation deadlock: workers {stuck:?} wait on collectives their peers never started (strategies must start the same collectives in the same order)");
    }
    Ok(out.into_iter().map(|o| o.expect("checked")).collect())
}
