//! The simulated cluster: real math, virtual time, one thread.
//!
//! Every participant is two actors: its compute actor (the strategy's
//! future) and its communication actor (a loop running the participant's
//! started tasks one after another, the papers' communication stream). The
//! executor keeps a queue of wake-ups ordered by (virtual time, lane,
//! participant), communication lane first, and polls one actor at a time,
//! so the order in which things happen depends only on the cost model: the
//! same seed gives the same bits, every run.
//!
//! - [`Ctx::compute`] runs the math at once and resumes the actor at
//!   `now + cost / speed`.
//! - A collective (comm.rs) completes at `max(join times) + link cost`;
//!   its math runs when the last member joins, with the in-process
//!   backend's element recipe (ranks summed in order, Mean by division,
//!   wire rounding), so sim and real runs give the same bits.
//! - [`Ctx::is_done`] at time t is exact: everything that happens before t
//!   has happened, and at t the communication lane goes first.

mod comm;

use super::{CommTask, Ctx, StartClocks, Topology, Work, WorkerTimes};
use crate::comm::LinkModel;
use crate::metrics::{EventLog, Span};
use anyhow::{bail, Result};
use comm::{Mail, SimComm};
use std::any::Any;
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// The cost model of a simulated cluster.
#[derive(Clone, Debug)]
pub struct SimSpec {
    /// Virtual seconds of one micro-batch on a worker of speed 1.
    pub micro_batch_s: f64,
    /// Speed factor per worker (1 nominal, 0.25 = four times slower); the
    /// server, if any, runs at 1.
    pub speeds: Vec<f64>,
    /// Link costs; `None` makes communication free.
    pub link: Option<LinkModel>,
    /// Multiplier from elements communicated or updated to elements costed,
    /// so a small model can be trained under the timing of a big one
    /// (timing-model parameters / real parameters).
    pub comm_scale: f64,
    /// Workers, nodes, server.
    pub topology: Topology,
    /// Device memory bandwidth for memory-bound work ([`Work::Optimizer`],
    /// [`Work::Elementwise`]); `None` makes that work free.
    pub memory_bytes_per_s: Option<f64>,
    /// Device FLOP/s for [`Work::Flops`]; `None` makes that work free.
    pub flops_per_s: Option<f64>,
    /// Where each participant's clock starts (empty: at zero).
    pub start: StartClocks,
}

impl SimSpec {
    /// A flat cluster of `workers` equal workers, `micro_batch_s` per
    /// micro-batch, `link` (or free communication).
    pub fn flat(workers: usize, micro_batch_s: f64, link: Option<LinkModel>) -> SimSpec {
        SimSpec {
            micro_batch_s,
            speeds: vec![1.0; workers],
            link,
            comm_scale: 1.0,
            topology: Topology::flat(workers),
            memory_bytes_per_s: None,
            flops_per_s: None,
            start: Vec::new(),
        }
    }

    /// Virtual seconds `work` takes on a participant of speed `speed`.
    pub fn cost(&self, work: Work, speed: f64) -> f64 {
        // Bytes an element costs: AdamW reads p, g, m, v and writes p, m, v;
        // other elementwise work reads two and writes one.
        let mem = |elems: usize, bytes: f64| {
            self.memory_bytes_per_s.map_or(0.0, |bw| elems as f64 * self.comm_scale * bytes / bw)
        };
        let t = match work {
            Work::MicroBatch => self.micro_batch_s,
            Work::Optimizer { params } => mem(params, 28.0),
            Work::Elementwise { elems, .. } => mem(elems, 12.0),
            Work::Flops { flops, .. } => self.flops_per_s.map_or(0.0, |f| flops * self.comm_scale / f),
        };
        t / speed
    }
}

#[derive(Clone, Copy, PartialEq)]
struct Time(pub f64);
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

/// Which actor of a participant a wake-up is for; the communication lane
/// sorts first, so completions at time t are visible to compute at t.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Lane {
    Comm = 0,
    Compute = 1,
}

type TaskFuture = Pin<Box<dyn Future<Output = Box<dyn Any>>>>;
type TaskFn = Box<dyn FnOnce(SimComm) -> TaskFuture>;

/// A started task waiting for the communication actor.
struct Queued {
    id: u64,
    round: u64,
    run: TaskFn,
}

/// One participant's state.
struct Part {
    pub speed: f64,
    pub times: WorkerTimes,
    pub events: EventLog,
    pub round: u64,
    /// Tasks started and not yet run, in order.
    queue: VecDeque<Queued>,
    /// The communication actor waits for a task.
    comm_idle: bool,
    next_id: u64,
    /// Completed tasks' outputs, until waited for.
    finished: HashMap<u64, Box<dyn Any>>,
    /// The task the compute actor waits on.
    waiting: Option<u64>,
    in_flight: usize,
    /// Messages delivered or on their way here.
    pub mailbox: Vec<Mail>,
    /// What the communication actor is blocked on (deadlock reports).
    pub blocked: Option<String>,
}

/// The whole simulated cluster.
struct State {
    pub now: f64,
    wakes: BinaryHeap<Reverse<(Time, Lane, usize)>>,
    pub parts: Vec<Part>,
    pub spec: SimSpec,
    /// Collectives per group (comm.rs).
    pub groups: HashMap<Vec<usize>, comm::GroupOps>,
    /// Reused buffers (first-touch page faults cost ~10x a copy).
    pub pool: Vec<Vec<f32>>,
    /// Messages sent so far, for a deterministic tie-break.
    pub mail_seq: u64,
}

impl State {
    pub fn wake(&mut self, at: f64, lane: Lane, p: usize) {
        self.wakes.push(Reverse((Time(at), lane, p)));
    }

    /// A buffer of `n` zeros, from the pool when it has one.
    pub fn take_buf(&mut self, n: usize) -> Vec<f32> {
        let mut v = self.pool.pop().unwrap_or_default();
        v.clear();
        v.resize(n, 0.0);
        v
    }

    /// Returns a buffer to the pool.
    pub fn give_buf(&mut self, v: Vec<f32>) {
        if self.pool.len() < 64 {
            self.pool.push(v);
        }
    }
}

/// A participant's view of the simulated cluster.
pub struct SimCtx {
    rank: usize,
    state: Rc<RefCell<State>>,
}

/// Handle of a simulated task with output `T`.
pub struct SimHandle<T> {
    id: u64,
    _out: PhantomData<T>,
}

impl Ctx for SimCtx {
    type Handle<T: Send + 'static> = SimHandle<T>;
    fn rank(&self) -> usize {
        self.rank
    }
    fn topology(&self) -> Topology {
        self.state.borrow().spec.topology
    }
    fn now(&self) -> f64 {
        self.state.borrow().now
    }
    fn speed(&self) -> f64 {
        self.state.borrow().parts[self.rank].speed
    }
    fn micro_batch_estimate_s(&self) -> Option<f64> {
        let st = self.state.borrow();
        Some(st.spec.cost(Work::MicroBatch, st.parts[self.rank].speed))
    }
    async fn compute<R>(&mut self, work: Work, f: impl FnOnce() -> R) -> R {
        let r = f();
        let until = {
            let mut st = self.state.borrow_mut();
            let dt = st.spec.cost(work, st.parts[self.rank].speed);
            let now = st.now;
            let part = &mut st.parts[self.rank];
            part.times.compute_s += dt;
            let mb = u32::from(work == Work::MicroBatch);
            part.times.micro_batches += u64::from(mb);
            if dt > 0.0 {
                let span =
                    Span::compute(self.rank, work.name(), now, now + dt).with_micro_batches(mb).with_round(part.round);
                part.events.push(span);
            }
            now + dt
        };
        sleep_until(&self.state, self.rank, Lane::Compute, until).await;
        r
    }
    fn start<T: CommTask>(&mut self, task: T) -> SimHandle<T::Output> {
        let mut st = self.state.borrow_mut();
        let now = st.now;
        let part = &mut st.parts[self.rank];
        let id = part.next_id;
        part.next_id += 1;
        part.times.collectives += 1;
        part.in_flight += 1;
        let run: TaskFn = Box::new(move |mut comm: SimComm| {
            Box::pin(async move { Box::new(task.run(&mut comm).await) as Box<dyn Any> })
        });
        part.queue.push_back(Queued { id, round: part.round, run });
        if part.comm_idle {
            part.comm_idle = false;
            st.wake(now, Lane::Comm, self.rank);
        }
        SimHandle { id, _out: PhantomData }
    }
    fn is_done<T: Send + 'static>(&self, h: &SimHandle<T>) -> bool {
        self.state.borrow().parts[self.rank].finished.contains_key(&h.id)
    }
    async fn wait<T: Send + 'static>(&mut self, h: SimHandle<T>) -> T {
        let t0 = self.now();
        let out = WaitTask { state: &self.state, rank: self.rank, id: h.id }.await;
        let mut st = self.state.borrow_mut();
        let now = st.now;
        let part = &mut st.parts[self.rank];
        part.times.idle_s += now - t0;
        part.in_flight -= 1;
        *out.downcast::<T>().expect("a task's output has the task's type")
    }
    fn in_flight(&self) -> usize {
        self.state.borrow().parts[self.rank].in_flight
    }
    fn times(&self) -> WorkerTimes {
        let st = self.state.borrow();
        WorkerTimes { total_s: st.now, ..st.parts[self.rank].times.clone() }
    }
    fn mark_round(&mut self, round: u64) {
        self.state.borrow_mut().parts[self.rank].round = round;
    }
    fn take_events(&mut self) -> EventLog {
        std::mem::take(&mut self.state.borrow_mut().parts[self.rank].events)
    }
}

/// Resumes `rank`'s actor on `lane` at `until`.
fn sleep_until(state: &Rc<RefCell<State>>, rank: usize, lane: Lane, until: f64) -> SleepUntil<'_> {
    SleepUntil { state, rank, lane, until, registered: false }
}

struct SleepUntil<'a> {
    state: &'a Rc<RefCell<State>>,
    rank: usize,
    lane: Lane,
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
            let (u, l, r) = (self.until, self.lane, self.rank);
            st.wake(u, l, r);
            drop(st);
            self.registered = true;
        }
        Poll::Pending
    }
}

struct WaitTask<'a> {
    state: &'a Rc<RefCell<State>>,
    rank: usize,
    id: u64,
}

impl Future for WaitTask<'_> {
    type Output = Box<dyn Any>;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Box<dyn Any>> {
        let mut st = self.state.borrow_mut();
        let part = &mut st.parts[self.rank];
        match part.finished.remove(&self.id) {
            Some(out) => {
                part.waiting = None;
                Poll::Ready(out)
            }
            None => {
                part.waiting = Some(self.id);
                Poll::Pending
            }
        }
    }
}

/// The next queued task of `rank`, or pending (idle) until one is started.
struct NextTask<'a> {
    state: &'a Rc<RefCell<State>>,
    rank: usize,
}

impl Future for NextTask<'_> {
    type Output = Queued;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Queued> {
        let mut st = self.state.borrow_mut();
        let part = &mut st.parts[self.rank];
        match part.queue.pop_front() {
            Some(q) => Poll::Ready(q),
            None => {
                part.comm_idle = true;
                Poll::Pending
            }
        }
    }
}

/// The communication actor of `rank`: runs started tasks in order, for ever.
async fn comm_actor(state: Rc<RefCell<State>>, rank: usize) {
    loop {
        let q = NextTask { state: &state, rank }.await;
        let comm = SimComm::new(rank, q.round, state.clone());
        let out = (q.run)(comm).await;
        let mut st = state.borrow_mut();
        let now = st.now;
        let part = &mut st.parts[rank];
        part.finished.insert(q.id, out);
        if part.waiting == Some(q.id) {
            st.wake(now, Lane::Compute, rank);
        }
    }
}

type Actor<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + 'a>>;

/// Runs every participant of `spec.topology` to completion. `make(ctx)`
/// builds participant p's future from its context; results in participant order.
pub fn run<'a, T, F, Fut>(spec: SimSpec, mut make: F) -> Result<Vec<T>>
where
    F: FnMut(SimCtx) -> Fut,
    Fut: Future<Output = Result<T>> + 'a,
{
    let topo = spec.topology;
    topo.validate()?;
    let n = topo.participants();
    if spec.speeds.len() != topo.workers {
        bail!("sim: {} speed factors for {} workers", spec.speeds.len(), topo.workers);
    }
    if !spec.start.is_empty() && spec.start.len() != n {
        bail!("sim: {} start clocks for {n} participants", spec.start.len());
    }
    let parts = (0..n)
        .map(|p| Part {
            speed: spec.speeds.get(p).copied().unwrap_or(1.0),
            times: spec.start.get(p).cloned().unwrap_or_default(),
            events: EventLog::new(),
            round: 0,
            queue: VecDeque::new(),
            comm_idle: true,
            next_id: 0,
            finished: HashMap::new(),
            waiting: None,
            in_flight: 0,
            mailbox: Vec::new(),
            blocked: None,
        })
        .collect();
    let state = Rc::new(RefCell::new(State {
        now: 0.0,
        wakes: BinaryHeap::new(),
        parts,
        spec,
        groups: HashMap::new(),
        pool: Vec::new(),
        mail_seq: 0,
    }));
    let mut compute: Vec<Option<Actor<'a, T>>> =
        (0..n).map(|rank| Some(Box::pin(make(SimCtx { rank, state: state.clone() })) as Actor<'a, T>)).collect();
    let mut comm: Vec<Pin<Box<dyn Future<Output = ()>>>> =
        (0..n).map(|rank| Box::pin(comm_actor(state.clone(), rank)) as Pin<Box<dyn Future<Output = ()>>>).collect();
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    {
        let mut st = state.borrow_mut();
        for p in 0..n {
            // A resumed participant continues from the clock it saved.
            let at = st.parts[p].times.total_s;
            st.wake(at, Lane::Compute, p);
        }
    }
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        let next = state.borrow_mut().wakes.pop();
        let Some(Reverse((Time(t), lane, p))) = next else { break };
        {
            let mut st = state.borrow_mut();
            assert!(t >= st.now, "virtual time went backwards ({} -> {t})", st.now);
            st.now = t;
        }
        match lane {
            Lane::Comm => {
                let _ = comm[p].as_mut().poll(&mut cx);
            }
            Lane::Compute => {
                let Some(fut) = compute[p].as_mut() else { continue };
                if let Poll::Ready(res) = fut.as_mut().poll(&mut cx) {
                    out[p] = Some(res?);
                    compute[p] = None;
                }
            }
        }
    }
    let stuck: Vec<String> = (0..n)
        .filter(|&p| out[p].is_none())
        .map(|p| {
            let st = state.borrow();
            let on = st.parts[p].blocked.clone().unwrap_or_else(|| "a task that never completes".into());
            format!("participant {p} waits on {on}")
        })
        .collect();
    if !stuck.is_empty() {
        bail!(
            "simulation deadlock: {} (every member of a group must start the same collectives in the same order)",
            stuck.join("; ")
        );
    }
    Ok(out.into_iter().map(|o| o.expect("checked")).collect())
}
