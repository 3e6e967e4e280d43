//! The simulated cluster: real math, virtual time, one executor thread.
//!
//! Every participant is two actors: its compute actor (the strategy's
//! future) and its communication actor (a loop running the participant's
//! started tasks one after another, the papers' communication stream). The
//! executor keeps a queue of wake-ups ordered by (virtual time, lane,
//! participant), communication lane first, and polls one actor at a time,
//! so the order in which things happen depends only on the cost model: the
//! same seed gives the same bits, every run.
//!
//! - [`Ctx::compute`] hands the math to a job thread (jobs.rs) and resumes
//!   the actor at `now + cost / speed` with its result, so the math of
//!   participants whose compute intervals overlap runs at once; with
//!   [`SimSpec::parallel`] off (or one participant, or one core) it runs
//!   at once on the executor's thread.
//! - A collective (comm.rs) completes at `max(join times) + link cost`;
//!   its math runs when the last member joins, with the in-process
//!   backend's element recipe (ranks summed in order, Mean by division,
//!   wire rounding), so sim and real runs give the same bits.
//! - [`Ctx::is_done`] at time t is exact: everything that happens before t
//!   has happened, and at t the communication lane goes first.
//!
//! This file is the executor ([`run`], [`SimCtx`]); spec.rs holds the cost
//! model ([`SimSpec`]), state.rs the cluster's state that the executor and
//! the communication side (comm.rs) both work on.

mod comm;
mod jobs;
mod math;
mod spec;
mod state;
pub mod straggle;
#[cfg(test)]
mod tests;

use super::{CommTask, Ctx, Topology, Work, WorkerTimes};
use crate::metrics::{EventLog, Span};
use anyhow::{bail, Result};
pub use spec::{Interference, SimSpec};
use state::{sleep_until, Lane, Part, Queued, SimComm, State, TaskFn, Time};
use std::any::Any;
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

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
    async fn compute<R: Send>(&mut self, work: Work, f: impl FnOnce() -> R + Send) -> R {
        let (until, parallel) = {
            let mut st = self.state.borrow_mut();
            // Slower while this worker's communication runs, or on shared
            // cores while another's transfer does (spec.rs, Interference).
            let slowdown = if !st.parts[self.rank].comm_idle {
                st.spec.interference.compute
            } else if st.spec.interference.beside != 1.0 && st.transfer_running() {
                st.spec.interference.beside
            } else {
                1.0
            };
            let mut dt = st.spec.cost(work, st.parts[self.rank].speed) * slowdown;
            if work == Work::MicroBatch {
                // Micro-batches vary in time (straggle.rs): drawn from (seed, rank, index), not from the order of events.
                dt *= straggle::micro_batch_factor(
                    st.spec.micro_batch_cv,
                    st.spec.micro_batch_correlation,
                    st.spec.draw_seed,
                    self.rank,
                    st.parts[self.rank].times.micro_batches,
                );
            }
            let now = st.now;
            let part = &mut st.parts[self.rank];
            part.computing_until = now + dt;
            part.times.compute_s += dt;
            let mb = u32::from(work == Work::MicroBatch);
            part.times.micro_batches += u64::from(mb);
            if dt > 0.0 {
                let span =
                    Span::compute(self.rank, work.name(), now, now + dt).with_micro_batches(mb).with_round(part.round);
                part.events.push(span);
            }
            (now + dt, dt > 0.0 && st.jobs.is_some())
        };
        if !parallel {
            let r = f();
            sleep_until(&self.state, self.rank, Lane::Compute, until).await;
            return r;
        }
        // The math runs on the pool while this participant sleeps; the
        // others' events until `until` run meanwhile (jobs.rs says why the
        // bits do not change).
        let job = jobs::Job::spawn(self.state.borrow().jobs.as_ref().expect("checked above"), f);
        sleep_until(&self.state, self.rank, Lane::Compute, until).await;
        job.finish()
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

/// `LOWCOMM_SIM_SEQUENTIAL`: `1` runs every simulation sequentially (the
/// fallback should the parallel simulator misbehave), `0` or unset leaves
/// it to [`SimSpec::parallel`].
fn sequential_from_env() -> Result<bool> {
    parse_sequential(std::env::var("LOWCOMM_SIM_SEQUENTIAL").ok().as_deref())
}

/// The value of `LOWCOMM_SIM_SEQUENTIAL`, if set: whether it asks for the
/// sequential simulator.
fn parse_sequential(v: Option<&str>) -> Result<bool> {
    match v {
        None | Some("0") | Some("") => Ok(false),
        Some("1") => Ok(true),
        Some(v) => {
            bail!("LOWCOMM_SIM_SEQUENTIAL={v}: use 1 (run the simulator sequentially) or 0 (parallel, the default)")
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
    let mut spec = spec;
    spec.parallel &= !sequential_from_env()?;
    let topo = spec.topology;
    topo.validate()?;
    let n = topo.participants();
    if spec.speeds.len() != topo.workers {
        bail!("sim: {} speed factors for {} workers", spec.speeds.len(), topo.workers);
    }
    if !spec.start.is_empty() && spec.start.len() != n {
        bail!("sim: {} start clocks for {n} participants", spec.start.len());
    }
    // Job threads for the computes, sized by the cores rayon would use
    // (RAYON_NUM_THREADS included); none for one participant or one core.
    let jobs = if spec.parallel { jobs::Pool::for_run(n, rayon::current_num_threads())? } else { None };
    let parts = (0..n)
        .map(|p| Part {
            speed: spec.speeds.get(p).copied().unwrap_or(1.0),
            times: spec.start.get(p).cloned().unwrap_or_default(),
            events: EventLog::new(),
            round: 0,
            queue: VecDeque::new(),
            comm_idle: true,
            computing_until: f64::NEG_INFINITY,
            next_id: 0,
            finished: HashMap::new(),
            waiting: None,
            in_flight: 0,
            mailbox: Vec::new(),
            receiving_until: f64::NEG_INFINITY,
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
        jobs,
        transfers: Vec::new(),
    }));
    let mut compute: Vec<Option<Actor<'a, T>>> =
        (0..n).map(|rank| Some(Box::pin(make(SimCtx { rank, state: state.clone() })) as Actor<'a, T>)).collect();
    let mut comm: Vec<Pin<Box<dyn Future<Output = ()>>>> =
        (0..n).map(|rank| Box::pin(comm_actor(state.clone(), rank)) as Pin<Box<dyn Future<Output = ()>>>).collect();
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    let mut stopped: Vec<Option<anyhow::Error>> = (0..n).map(|_| None).collect();
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
                    compute[p] = None;
                    match res {
                        Ok(v) => out[p] = Some(v),
                        // Stopped at the agreed boundary: the others run on to it.
                        Err(e) if super::is_stopped(&e) => stopped[p] = Some(e),
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    let stuck: Vec<String> = (0..n)
        .filter(|&p| out[p].is_none() && stopped[p].is_none())
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
    if let Some(e) = stopped.into_iter().flatten().next() {
        return Err(e);
    }
    Ok(out.into_iter().map(|o| o.expect("checked")).collect())
}
