//! The simulator's shared state: the cluster ([`State`]: virtual clock,
//! wake-up queue, participants, the collectives in progress per group,
//! mailboxes) that the executor (mod.rs) and the communication side
//! (comm.rs) both work on, the pieces it is made of, and [`sleep_until`],
//! which resumes an actor at a virtual time.

use super::spec::SimSpec;
use crate::comm::{Message, ReduceOp, WireDtype};
use crate::metrics::EventLog;
use crate::runtime::tasks::Kind;
use crate::runtime::WorkerTimes;
use std::any::Any;
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

#[derive(Clone, Copy, PartialEq)]
pub(super) struct Time(pub f64);
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
pub(super) enum Lane {
    Comm = 0,
    Compute = 1,
}

type TaskFuture = Pin<Box<dyn Future<Output = Box<dyn Any>>>>;
pub(super) type TaskFn = Box<dyn FnOnce(SimComm) -> TaskFuture>;

/// A started task waiting for the communication actor.
pub(super) struct Queued {
    pub id: u64,
    pub round: u64,
    pub run: TaskFn,
}

/// One participant's state.
pub(super) struct Part {
    pub speed: f64,
    pub times: WorkerTimes,
    pub events: EventLog,
    pub round: u64,
    /// Tasks started and not yet run, in order.
    pub queue: VecDeque<Queued>,
    /// The communication actor waits for a task.
    pub comm_idle: bool,
    /// When the computation under way ends (at or before now: none).
    pub computing_until: f64,
    pub next_id: u64,
    /// Completed tasks' outputs, until waited for.
    pub finished: HashMap<u64, Box<dyn Any>>,
    /// The task the compute actor waits on.
    pub waiting: Option<u64>,
    pub in_flight: usize,
    /// Messages delivered or on their way here.
    pub mailbox: Vec<Mail>,
    /// When this participant's link has taken in the last message sent to
    /// it: it receives one message at a time (comm.rs, `send`).
    pub receiving_until: f64,
    /// What the communication actor is blocked on (deadlock reports).
    pub blocked: Option<String>,
}

/// The whole simulated cluster.
pub(super) struct State {
    pub now: f64,
    pub wakes: BinaryHeap<Reverse<(Time, Lane, usize)>>,
    pub parts: Vec<Part>,
    pub spec: SimSpec,
    /// Collectives per group (comm.rs).
    pub groups: HashMap<Vec<usize>, GroupOps>,
    /// Reused buffers (first-touch page faults cost ~10x a copy).
    pub pool: Vec<Vec<f32>>,
    /// Messages sent so far, for a deterministic tie-break.
    pub mail_seq: u64,
    /// The job threads computes run on (jobs.rs); `None`: every compute
    /// runs on the executor's thread.
    pub jobs: Option<super::jobs::Pool>,
    /// (begin, end) of the transfers not yet over, kept only when the
    /// participants share cores (`Interference::beside` > 1).
    pub transfers: Vec<(f64, f64)>,
}

impl State {
    pub fn wake(&mut self, at: f64, lane: Lane, p: usize) {
        self.wakes.push(Reverse((Time(at), lane, p)));
    }

    /// Notes a transfer (a message, a collective's data) on the links from
    /// `begin` to `end`, for the shared-cores rule (`Interference::beside`).
    pub fn note_transfer(&mut self, begin: f64, end: f64) {
        if self.spec.interference.beside != 1.0 && end > begin {
            self.transfers.push((begin, end));
        }
    }

    /// Whether a transfer runs now (and forgets those that ended).
    pub fn transfer_running(&mut self) -> bool {
        let now = self.now;
        self.transfers.retain(|&(_, end)| end > now);
        self.transfers.iter().any(|&(begin, _)| begin <= now)
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

/// Resumes `rank`'s actor on `lane` at `until`.
pub(super) fn sleep_until(state: &Rc<RefCell<State>>, rank: usize, lane: Lane, until: f64) -> SleepUntil<'_> {
    SleepUntil { state, rank, lane, until, registered: false }
}

pub(super) struct SleepUntil<'a> {
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

/// A message in a mailbox.
pub(super) struct Mail {
    pub arrival: f64,
    pub seq: u64,
    pub from: usize,
    pub msg: Message,
}

/// What one collective moves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum What {
    Dense { kind: Kind, op: ReduceOp, wire: WireDtype, root: usize },
    Bytes,
}

/// A contribution or a result.
pub(super) enum Data {
    Dense(Vec<f32>),
    Bytes(Vec<u8>),
    /// A result every member shares (each copies it out).
    Shared(Rc<Vec<f32>>),
    SharedBytes(Rc<Vec<u8>>),
}

impl Data {
    pub fn dense(&self) -> &[f32] {
        match self {
            Data::Dense(v) => v,
            Data::Shared(v) => v,
            Data::Bytes(_) | Data::SharedBytes(_) => unreachable!("a dense collective holds dense data"),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Data::Bytes(b) => b,
            Data::SharedBytes(b) => b,
            Data::Dense(_) | Data::Shared(_) => unreachable!("a byte gather holds bytes"),
        }
    }

    /// Another handle on a shared result.
    pub fn share(&self) -> Data {
        match self {
            Data::Shared(v) => Data::Shared(v.clone()),
            Data::SharedBytes(b) => Data::SharedBytes(b.clone()),
            Data::Dense(_) | Data::Bytes(_) => unreachable!("only shared results are shared"),
        }
    }
}

/// One collective of a group in progress.
pub(super) struct PendingOp {
    pub what: What,
    /// Per member: join time and contribution.
    pub joined: Vec<Option<(f64, usize, Data)>>,
    pub count: usize,
    pub done_at: Option<f64>,
    pub results: Vec<Option<Data>>,
    /// Participants waiting for `done_at` to be known.
    pub waiters: Vec<usize>,
}

/// The collectives of one group.
#[derive(Default)]
pub(super) struct GroupOps {
    /// Per member: its next sequence number.
    pub next: Vec<u64>,
    pub ops: BTreeMap<u64, PendingOp>,
}

/// A participant's communication side in the simulator.
pub(super) struct SimComm {
    pub rank: usize,
    pub round: u64,
    pub state: Rc<RefCell<State>>,
}
