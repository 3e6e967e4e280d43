//! Runtimes: how the participants of a strategy are run.
//!
//! A strategy is written once as an `async fn` over a [`Ctx`] and runs in
//! both runtimes (docs/design.md has the whole picture):
//!
//! - [`sim`]: one thread, virtual time, an event queue ordered by
//!   (time, lane, participant). Compute costs come from a cost model,
//!   collectives complete at `last join + link cost`. Real math,
//!   deterministic by construction.
//! - [`real`]: one OS thread per participant plus one communication thread
//!   per participant; started tasks really overlap the next micro-batches.
//!
//! Communication is written once too: a [`CommTask`] is an `async fn` over a
//! [`CommSide`] (groups, typed payloads, messages, timed local work), run in
//! start order on the participant's communication stream — by the
//! simulator in virtual time, by the real runtime on the communication
//! thread. A strategy never sleeps, reads a clock or spawns a thread: it
//! asks its context to compute and to communicate.

pub mod cluster;
pub mod conformance;
pub mod kernel_pool;
pub mod real;
mod real_comm;
pub mod sim;
pub mod tasks;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_interference;
mod topology;

use crate::comm::{CommStats, LinkModel, Message, ReduceOp, WireDtype};
use crate::metrics::{EventLog, LinkTier, Traffic};
use std::sync::Arc;

pub use tasks::{AllGather, AllGatherBytes, AllReduce, Broadcast, Recv, RecvAny, ReduceScatter, Send, SendDelivered};
pub use topology::Topology;

/// A participant that ended early on purpose, at a round boundary every
/// participant agreed on, after saving its part of a checkpoint there (an
/// interrupted run: strategy/stop.rs). Not a failure: the simulator runs
/// the others on to the same boundary instead of ending the run, the real
/// runtime does not tell the others that this one failed; the run then
/// ends with this error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stopped {
    /// Who stopped.
    pub participant: usize,
    /// The boundary it stopped at (rounds or steps done).
    pub round: u64,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "participant {} stopped on request at round {}, its checkpoint part saved",
            self.participant, self.round
        )
    }
}

impl std::error::Error for Stopped {}

/// Whether `e` is a [`Stopped`] participant's end.
pub fn is_stopped(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Stopped>().is_some()
}

/// Work a strategy asks the runtime to time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Work {
    /// Forward + backward of one micro-batch.
    MicroBatch,
    /// An optimizer step over this many parameters: memory-bound (sim: costed
    /// at the device's memory bandwidth when the profile gives one, else free).
    Optimizer {
        /// Parameters updated.
        params: usize,
    },
    /// Other memory-bound work over `elems` f32 elements (an outer step, an
    /// average): costed like an optimizer step of that size.
    Elementwise {
        /// What it is, for traces.
        name: &'static str,
        /// Elements touched.
        elems: usize,
    },
    /// Compute-bound work (a DCT encode): costed at the device's FLOP rate,
    /// which the simulator infers from the micro-batch time and FLOPs.
    Flops {
        /// What it is, for traces.
        name: &'static str,
        /// Floating-point operations.
        flops: f64,
    },
}

impl Work {
    /// The gradient clip over `elems` gradients: the norm reads each, the
    /// scale reads and writes it, 12 bytes an element as other elementwise
    /// work (strategy/worker.rs `clip_grads`, plan/net.rs `clip`).
    pub fn grad_clip(elems: usize) -> Work {
        Work::Elementwise { name: "grad clip", elems }
    }

    /// The name this work gets in traces.
    pub fn name(&self) -> &'static str {
        match self {
            Work::MicroBatch => "micro-batch",
            Work::Optimizer { .. } => "optimizer",
            Work::Elementwise { name, .. } | Work::Flops { name, .. } => name,
        }
    }
}

/// A set of participants a collective runs over, as each member names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Group {
    /// Every worker (not the server).
    World,
    /// The workers of my node.
    Node,
    /// The workers with my local index on every node (FlexDeMo's
    /// replication group).
    Replicas,
    /// Any sorted set of participants (every member names the same set).
    Ranks(Arc<[usize]>),
}

/// What the communication side of a participant can do. Implemented by the
/// simulator (virtual time) and by the real runtime's communication thread
/// (blocking calls on a [`crate::comm::Fabric`], held for the emulated link
/// time). Collectives follow [`crate::comm::Communicator`]'s contract within
/// the group; `root` is a rank within the group.
#[allow(async_fn_in_trait)] // futures are polled where they are made: no Send bound wanted
pub trait CommSide {
    /// This participant's number.
    fn rank(&self) -> usize;
    /// The job's shape.
    fn topology(&self) -> Topology;
    /// Seconds since the run started (virtual in sim).
    fn now(&self) -> f64;
    /// In-place all-reduce over `g`.
    async fn all_reduce(&mut self, g: &Group, buf: &mut [f32], op: ReduceOp, wire: WireDtype);
    /// `input.len() == |g| * output.len()`; member r gets chunk r reduced.
    async fn reduce_scatter(&mut self, g: &Group, input: &[f32], output: &mut [f32], op: ReduceOp, wire: WireDtype);
    /// `output.len() == |g| * input.len()`.
    async fn all_gather(&mut self, g: &Group, input: &[f32], output: &mut [f32], wire: WireDtype);
    /// Every member's `buf` becomes member `root`'s.
    async fn broadcast(&mut self, g: &Group, buf: &mut [f32], root: usize, wire: WireDtype);
    /// Exact byte all-gather (packed sparse payloads).
    async fn all_gather_bytes(&mut self, g: &Group, input: &[u8], output: &mut [u8]);
    /// Sends a message to participant `to`; returns when it has left this
    /// participant's link (the transfer time has passed).
    async fn send(&mut self, to: usize, msg: Message);
    /// [`CommSide::send`], returning only once the receiver has the whole
    /// message. The simulator's and the emulated link's sends are that
    /// already; over MPI a send returns once MPI has the message, and
    /// several in a row would share the link (tasks.rs `SendDelivered`).
    async fn send_delivered(&mut self, to: usize, msg: Message) {
        self.send(to, msg).await
    }
    /// The next message from `from`.
    async fn recv(&mut self, from: usize) -> Message;
    /// The next message from anyone, or `None` at `deadline_s` (run time, seconds).
    async fn recv_any(&mut self, deadline_s: Option<f64>) -> Option<(usize, Message)>;
    /// Runs local work on the communication side (a sharded optimizer
    /// step); the simulator costs it, the real runtime just runs it.
    async fn work<R>(&mut self, work: Work, f: impl FnOnce() -> R) -> R;
}

/// Work for the communication side: written once against [`CommSide`],
/// run in start order on the participant's communication stream.
#[allow(async_fn_in_trait)] // see CommSide
pub trait CommTask: std::marker::Send + 'static {
    /// What the task hands back (its buffers, typically).
    type Output: std::marker::Send + 'static;
    /// Runs the task.
    async fn run<C: CommSide>(self, comm: &mut C) -> Self::Output;
}

/// What a participant's strategy can ask of its runtime.
#[allow(async_fn_in_trait)] // see CommSide
pub trait Ctx {
    /// Handle of a started task with output `T`.
    type Handle<T: std::marker::Send + 'static>;
    /// This participant's number.
    fn rank(&self) -> usize;
    /// Number of workers.
    fn world(&self) -> usize {
        self.topology().workers
    }
    /// The job's shape.
    fn topology(&self) -> Topology;
    /// Seconds since the run started (virtual in sim).
    fn now(&self) -> f64;
    /// This participant's speed factor (1 nominal, 0.25 four times slower).
    fn speed(&self) -> f64;
    /// Seconds one micro-batch takes on this participant: the cost model's
    /// in sim; in the real runtime the mean measured so far (`None` before
    /// the first).
    fn micro_batch_estimate_s(&self) -> Option<f64>;
    /// Runs `f` (the math) and accounts for its time. `f` and its result
    /// cross threads: the simulator runs the math of participants whose
    /// virtual compute intervals overlap on a pool at once (sim/jobs.rs);
    /// the real runtime runs `f` on the participant's thread.
    async fn compute<R: std::marker::Send>(&mut self, work: Work, f: impl FnOnce() -> R + std::marker::Send) -> R;
    /// Starts a task on the communication stream; it proceeds while the
    /// participant computes. Tasks run one after another, in start order.
    fn start<T: CommTask>(&mut self, task: T) -> Self::Handle<T::Output>;
    /// Has it completed (at the current time)? Never waits.
    fn is_done<T: std::marker::Send + 'static>(&self, h: &Self::Handle<T>) -> bool;
    /// Waits for it and takes its output.
    async fn wait<T: std::marker::Send + 'static>(&mut self, h: Self::Handle<T>) -> T;
    /// Starts `task` and waits for it.
    async fn run<T: CommTask>(&mut self, task: T) -> T::Output {
        let h = self.start(task);
        self.wait(h).await
    }
    /// Tasks started and not yet waited for.
    fn in_flight(&self) -> usize;
    /// This participant's accounting so far (`total_s` = now).
    fn times(&self) -> WorkerTimes;
    /// Tags the spans recorded from now on with round `round`.
    fn mark_round(&mut self, round: u64);
    /// The compute and communication spans recorded so far (taken).
    fn take_events(&mut self) -> EventLog;
}

/// Per-participant accounting a runtime keeps while a strategy runs.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorkerTimes {
    /// Seconds spent in [`Ctx::compute`].
    pub compute_s: f64,
    /// Seconds spent blocked in [`Ctx::wait`] (idle, waiting on communication).
    pub idle_s: f64,
    /// Micro-batches computed.
    pub micro_batches: u64,
    /// Tasks started on the communication stream.
    pub collectives: u64,
    /// Seconds from the start to when these times were read.
    pub total_s: f64,
}

/// Where each participant's clock and accounting start: zero for a fresh
/// run, what a checkpoint saved for a resumed one.
pub type StartClocks = Vec<WorkerTimes>;

/// Bytes a participant sends in one collective over `p` members, under the
/// ring model of [`CommStats`].
pub fn collective_bytes(
    kind: tasks::Kind,
    elems: usize,
    bytes_per_elem: usize,
    p: usize,
    me: usize,
    root: usize,
) -> u64 {
    let mut s = CommStats::default();
    match kind {
        tasks::Kind::AllReduce => s.count_all_reduce(elems, p, bytes_per_elem),
        tasks::Kind::ReduceScatter | tasks::Kind::AllGather => {
            s.count_scatter_gather(elems / p.max(1), p, bytes_per_elem)
        }
        tasks::Kind::Broadcast => s.count_broadcast(elems, p, bytes_per_elem, me, root),
    }
    s.bytes_sent
}

/// What participant `me` (its index in `members`) sends in one collective
/// over `members` of `g`: the bytes of [`collective_bytes`], the tier they
/// cross, and of those the bytes between nodes.
///
/// A collective over several nodes with several members each (tier
/// `Both`) is split as the hierarchical collective that `LinkModel` times
/// (comm/link.rs): each member sends inside its node what a ring over the
/// node's k members would, and between nodes what a ring over the m nodes
/// would on its k-th of the buffer. The two add up to the flat ring's
/// count: 2(p-1)/p = 2(k-1)/k + 2(m-1)/(mk) for an all-reduce. plan's
/// `Net::coll` splits all-reduce, reduce-scatter and all-gather the same
/// way. A broadcast (a chain from the root; no method broadcasts today)
/// sends between nodes when the member it hands on to is on another node.
#[allow(clippy::too_many_arguments)]
pub fn collective_traffic(
    topo: &Topology,
    g: &Group,
    members: &[usize],
    kind: tasks::Kind,
    elems: usize,
    bytes_per_elem: usize,
    me: usize,
    root: usize,
) -> Traffic {
    let p = members.len();
    let bytes = collective_bytes(kind, elems, bytes_per_elem, p, me, root);
    let tier = LinkTier::of(topo, g, members);
    if tier != LinkTier::Both {
        return Traffic::on(tier, bytes);
    }
    let mut nodes: Vec<usize> = members.iter().map(|&w| topo.node_of(w)).collect();
    nodes.dedup();
    let (m, k) = (nodes.len(), p.div_ceil(nodes.len()));
    let inter = match kind {
        tasks::Kind::AllReduce => collective_bytes(kind, elems / k, bytes_per_elem, m, 0, 0),
        tasks::Kind::ReduceScatter | tasks::Kind::AllGather => {
            collective_bytes(kind, elems / p.max(1) * m, bytes_per_elem, m, 0, 0)
        }
        tasks::Kind::Broadcast => {
            let next = members[(me + 1) % p];
            if topo.node_of(next) != topo.node_of(members[me]) {
                bytes
            } else {
                0
            }
        }
    };
    Traffic { bytes, tier, inter: inter.min(bytes) }
}

/// Seconds a collective of `kind` over `elems` elements takes on `route`.
pub fn collective_cost(
    link: &LinkModel,
    kind: tasks::Kind,
    elems: usize,
    bpe: usize,
    route: crate::comm::link::Route,
) -> f64 {
    use crate::comm::link::Op;
    let op = match kind {
        tasks::Kind::AllReduce => Op::AllReduce,
        tasks::Kind::ReduceScatter => Op::ReduceScatter,
        tasks::Kind::AllGather => Op::AllGather,
        tasks::Kind::Broadcast => Op::Broadcast,
    };
    link.collective_s(op, elems, bpe, route)
}
