//! The primitive communication tasks: one collective or one message each,
//! with the buffers they take over until they complete. Strategies start
//! them with [`super::Ctx::start`] (or [`super::Ctx::run`]) and get the
//! buffers back from [`super::Ctx::wait`]; bigger rounds (ACCO's sharded
//! round) are their own [`CommTask`]s built from the same [`CommSide`] calls.

use super::{CommSide, CommTask, Group};
use crate::comm::{padded_len, Message, ReduceOp, WireDtype};

/// Which collective, for costs and byte counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// In-place all-reduce.
    AllReduce,
    /// Input of `p * m` to output of `m`.
    ReduceScatter,
    /// Input of `m` to output of `p * m`.
    AllGather,
    /// In place, from a root.
    Broadcast,
}

impl Kind {
    /// Short name, for traces.
    pub fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "all_reduce",
            Kind::ReduceScatter => "reduce_scatter",
            Kind::AllGather => "all_gather",
            Kind::Broadcast => "broadcast",
        }
    }
}

/// In-place all-reduce of `buf` over `group`; hands `buf` back reduced.
#[derive(Debug)]
pub struct AllReduce {
    /// Who takes part.
    pub group: Group,
    /// Contribution in, result out.
    pub buf: Vec<f32>,
    /// Sum or mean.
    pub op: ReduceOp,
    /// How the values travel.
    pub wire: WireDtype,
}

impl AllReduce {
    /// The mean of `buf` over `group`.
    pub fn mean(group: Group, buf: Vec<f32>, wire: WireDtype) -> AllReduce {
        AllReduce { group, buf, op: ReduceOp::Mean, wire }
    }

    /// The sum of `buf` over `group`.
    pub fn sum(group: Group, buf: Vec<f32>, wire: WireDtype) -> AllReduce {
        AllReduce { group, buf, op: ReduceOp::Sum, wire }
    }
}

impl CommTask for AllReduce {
    type Output = Vec<f32>;
    async fn run<C: CommSide>(mut self, c: &mut C) -> Vec<f32> {
        c.all_reduce(&self.group, &mut self.buf, self.op, self.wire).await;
        self.buf
    }
}

/// Reduce-scatter: hands back `(input, output)`, member r's output the
/// reduction of chunk r.
#[derive(Debug)]
pub struct ReduceScatter {
    /// Who takes part.
    pub group: Group,
    /// `|group| * output.len()` elements.
    pub input: Vec<f32>,
    /// This member's chunk.
    pub output: Vec<f32>,
    /// Sum or mean.
    pub op: ReduceOp,
    /// How the values travel.
    pub wire: WireDtype,
}

impl CommTask for ReduceScatter {
    type Output = (Vec<f32>, Vec<f32>);
    async fn run<C: CommSide>(mut self, c: &mut C) -> Self::Output {
        c.reduce_scatter(&self.group, &self.input, &mut self.output, self.op, self.wire).await;
        (self.input, self.output)
    }
}

/// All-gather: hands back `(input, output)`.
#[derive(Debug)]
pub struct AllGather {
    /// Who takes part.
    pub group: Group,
    /// This member's chunk.
    pub input: Vec<f32>,
    /// `|group| * input.len()` elements.
    pub output: Vec<f32>,
    /// How the values travel.
    pub wire: WireDtype,
}

impl CommTask for AllGather {
    type Output = (Vec<f32>, Vec<f32>);
    async fn run<C: CommSide>(mut self, c: &mut C) -> Self::Output {
        c.all_gather(&self.group, &self.input, &mut self.output, self.wire).await;
        (self.input, self.output)
    }
}

/// Broadcast from member `root` of `group`.
#[derive(Debug)]
pub struct Broadcast {
    /// Who takes part.
    pub group: Group,
    /// Root's values in, everyone's out.
    pub buf: Vec<f32>,
    /// Rank within the group.
    pub root: usize,
    /// How the values travel.
    pub wire: WireDtype,
}

impl CommTask for Broadcast {
    type Output = Vec<f32>;
    async fn run<C: CommSide>(mut self, c: &mut C) -> Vec<f32> {
        c.broadcast(&self.group, &mut self.buf, self.root, self.wire).await;
        self.buf
    }
}

/// Exact all-gather of packed bytes (sparse payloads); hands back `(input, output)`.
#[derive(Debug)]
pub struct AllGatherBytes {
    /// Who takes part.
    pub group: Group,
    /// This member's bytes.
    pub input: Vec<u8>,
    /// `|group| * input.len()` bytes.
    pub output: Vec<u8>,
}

impl CommTask for AllGatherBytes {
    type Output = (Vec<u8>, Vec<u8>);
    async fn run<C: CommSide>(mut self, c: &mut C) -> Self::Output {
        c.all_gather_bytes(&self.group, &self.input, &mut self.output).await;
        (self.input, self.output)
    }
}

/// A message to participant `to`.
#[derive(Debug)]
pub struct Send {
    /// The receiver.
    pub to: usize,
    /// What it gets.
    pub msg: Message,
}

impl CommTask for Send {
    type Output = ();
    async fn run<C: CommSide>(self, c: &mut C) {
        c.send(self.to, self.msg).await
    }
}

/// A message to participant `to` that completes once `to` has all of it,
/// so that the next one starts on a free link: a server handing its model
/// to several workers gives the first its model in one message's time
/// instead of sharing the link among all (as the simulator's one
/// communication lane per participant does; planner-accuracy finding 12b).
/// `to` must be receiving, not waiting on the sender.
#[derive(Debug)]
pub struct SendDelivered {
    /// The receiver.
    pub to: usize,
    /// What it gets.
    pub msg: Message,
}

impl CommTask for SendDelivered {
    type Output = ();
    async fn run<C: CommSide>(self, c: &mut C) {
        c.send_delivered(self.to, self.msg).await
    }
}

/// The next message from participant `from`.
#[derive(Debug)]
pub struct Recv {
    /// The sender.
    pub from: usize,
}

impl CommTask for Recv {
    type Output = Message;
    async fn run<C: CommSide>(self, c: &mut C) -> Message {
        c.recv(self.from).await
    }
}

/// The next message from anyone, or `None` at the deadline (run seconds).
#[derive(Debug)]
pub struct RecvAny {
    /// `None`: wait for ever.
    pub deadline_s: Option<f64>,
}

impl CommTask for RecvAny {
    type Output = Option<(usize, Message)>;
    async fn run<C: CommSide>(self, c: &mut C) -> Self::Output {
        c.recv_any(self.deadline_s).await
    }
}

/// The two-level all-reduce over the whole cluster: reduce-scatter inside
/// the node, all-reduce of the node's chunk across nodes (the replication
/// group), all-gather inside the node. Sums in another order than the flat
/// all-reduce, so it matches it to rounding, not bit for bit; it matches
/// itself bit for bit on every runtime and backend.
#[derive(Debug)]
pub struct HierarchicalAllReduce {
    /// Contribution in, result out.
    pub buf: Vec<f32>,
    /// Sum or mean (a mean of node means: nodes are equal in size).
    pub op: ReduceOp,
    /// How the values travel.
    pub wire: WireDtype,
}

impl CommTask for HierarchicalAllReduce {
    type Output = Vec<f32>;
    async fn run<C: CommSide>(mut self, c: &mut C) -> Vec<f32> {
        let k = c.topology().members(&Group::Node, c.rank()).len();
        let n = self.buf.len();
        let padded = padded_len(n, k);
        let mut full = std::mem::take(&mut self.buf);
        full.resize(padded, 0.0); // zeros do not change sums
        let mut part = vec![0.0; padded / k];
        c.reduce_scatter(&Group::Node, &full, &mut part, self.op, self.wire).await;
        c.all_reduce(&Group::Replicas, &mut part, self.op, self.wire).await;
        c.all_gather(&Group::Node, &part, &mut full, self.wire).await;
        full.truncate(n);
        full
    }
}
