//! The real runtime's communication side: [`CommSide`] as blocking calls on
//! a [`Fabric`], on the participant's communication thread.
//!
//! With a link model, a collective first waits until every member has
//! joined (a barrier on the group, as a transfer over a real link starts
//! once both ends are there), runs, then holds until `join + modeled time`;
//! a message holds the sender for its modeled time before it is delivered,
//! and, one message at a time into each receiver, for the time the
//! receiver's link is still taking in the messages sent to it before (on
//! threads all participants share that clock; under MPI a rank knows only
//! its own sends, so there only the sender is held).
//! So every member's op completes at about `last join + max(copy, modeled)`.

use super::tasks::Kind;
use super::{collective_cost, collective_traffic, CommSide, Group, Topology, Work};
use crate::comm::{Communicator, Fabric, LinkModel, Message, ReduceOp, WireDtype};
use crate::metrics::{EventLog, LinkTier, Span, Traffic};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Per participant, when its link has taken in the last message sent to it.
pub(super) type Receiving = Arc<Mutex<Vec<Instant>>>;

/// One task's view of the communication thread.
pub(super) struct RealComm<'a> {
    rank: usize,
    topo: Topology,
    fabric: &'a mut dyn Fabric,
    link: Option<LinkModel>,
    t0: Instant,
    events: &'a Mutex<EventLog>,
    receiving: &'a Receiving,
    round: u64,
}

impl<'a> RealComm<'a> {
    pub fn new(
        fabric: &'a mut dyn Fabric,
        link: Option<LinkModel>,
        topo: Topology,
        t0: Instant,
        events: &'a Mutex<EventLog>,
        receiving: &'a Receiving,
        round: u64,
    ) -> RealComm<'a> {
        RealComm { rank: fabric.rank(), topo, fabric, link, t0, events, receiving, round }
    }

    fn secs(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn span(&self, name: &str, start: f64, traffic: Traffic) {
        let span = Span::comm(self.rank, name, start, self.secs()).with_round(self.round).with_traffic(traffic);
        self.events.lock().unwrap_or_else(|e| e.into_inner()).push(span);
    }

    /// Runs `op` on `g`'s communicator, held for the link time of `kind`
    /// over `elems` elements of `bpe` bytes.
    fn collective(
        &mut self,
        g: &Group,
        kind: Kind,
        elems: usize,
        bpe: usize,
        root: usize,
        op: impl FnOnce(&mut dyn Communicator),
    ) {
        let start = self.secs();
        let members = self.topo.members(g, self.rank);
        let me = members.iter().position(|&m| m == self.rank).unwrap_or_else(|| {
            panic!("participant {} starts a collective on {g:?} = {members:?}, which it is not a member of", self.rank)
        });
        let route = self.topo.route(g, &members);
        let modeled = self.link.as_ref().map(|l| collective_cost(l, kind, elems, bpe, route));
        let comm = self.fabric.group(&members);
        let joined = match modeled {
            Some(_) => {
                comm.barrier();
                Instant::now()
            }
            None => Instant::now(),
        };
        op(comm);
        hold_until(joined, modeled.unwrap_or(0.0));
        self.span(kind.name(), start, collective_traffic(&self.topo, g, &members, kind, elems, bpe, me, root));
    }

    /// A message to `to` (held for the emulated link's time); with
    /// `delivered`, returns once `to` has all of it ([`CommSide::send_delivered`]).
    fn send_message(&mut self, to: usize, msg: Message, delivered: bool) {
        let start = self.secs();
        let bytes = msg.wire_len();
        let same_node = self.topo.node_of(self.rank) == self.topo.node_of(to);
        if let Some(l) = &self.link {
            // The receiver's link takes one message at a time, as in the
            // simulator (sim/comm.rs): start when the one before has landed.
            let cost = l.message_s(bytes, same_node);
            let begin = {
                let mut r = self.receiving.lock().unwrap_or_else(|e| e.into_inner());
                let begin = r[to].max(Instant::now());
                r[to] = begin + Duration::from_secs_f64(cost);
                begin
            };
            hold_until(begin, cost);
        }
        self.fabric.send(to, msg);
        if delivered {
            self.fabric.flush();
        }
        let tier = if same_node { LinkTier::Intra } else { LinkTier::Inter };
        self.span("send", start, Traffic::on(tier, bytes as u64));
    }
}

/// Sleeps until `from + secs`.
fn hold_until(from: Instant, secs: f64) {
    let until = from + Duration::from_secs_f64(secs);
    let now = Instant::now();
    if until > now {
        std::thread::sleep(until - now);
    }
}

impl CommSide for RealComm<'_> {
    fn rank(&self) -> usize {
        self.rank
    }
    fn topology(&self) -> Topology {
        self.topo
    }
    fn now(&self) -> f64 {
        self.secs()
    }
    async fn all_reduce(&mut self, g: &Group, buf: &mut [f32], op: ReduceOp, wire: WireDtype) {
        self.collective(g, Kind::AllReduce, buf.len(), wire.bytes_per_elem(), 0, |c| c.all_reduce(buf, op, wire));
    }
    async fn reduce_scatter(&mut self, g: &Group, input: &[f32], output: &mut [f32], op: ReduceOp, wire: WireDtype) {
        self.collective(g, Kind::ReduceScatter, input.len(), wire.bytes_per_elem(), 0, |c| {
            c.reduce_scatter(input, output, op, wire)
        });
    }
    async fn all_gather(&mut self, g: &Group, input: &[f32], output: &mut [f32], wire: WireDtype) {
        let n = output.len();
        self.collective(g, Kind::AllGather, n, wire.bytes_per_elem(), 0, |c| c.all_gather(input, output, wire));
    }
    async fn broadcast(&mut self, g: &Group, buf: &mut [f32], root: usize, wire: WireDtype) {
        self.collective(g, Kind::Broadcast, buf.len(), wire.bytes_per_elem(), root, |c| c.broadcast(buf, root, wire));
    }
    async fn all_gather_bytes(&mut self, g: &Group, input: &[u8], output: &mut [u8]) {
        let n = output.len();
        self.collective(g, Kind::AllGather, n, 1, 0, |c| c.all_gather_bytes(input, output));
    }
    async fn send(&mut self, to: usize, msg: Message) {
        self.send_message(to, msg, false);
    }
    async fn send_delivered(&mut self, to: usize, msg: Message) {
        self.send_message(to, msg, true);
    }
    async fn recv(&mut self, from: usize) -> Message {
        let start = self.secs();
        let m = self.fabric.recv(from);
        self.span("recv", start, Traffic::on(LinkTier::Intra, 0));
        m
    }
    async fn recv_any(&mut self, deadline_s: Option<f64>) -> Option<(usize, Message)> {
        let start = self.secs();
        let timeout = deadline_s.map(|d| Duration::from_secs_f64((d - start).max(0.0)));
        let m = self.fabric.recv_any(timeout);
        self.span("recv", start, Traffic::on(LinkTier::Intra, 0));
        m
    }
    async fn work<R>(&mut self, _work: Work, f: impl FnOnce() -> R) -> R {
        f()
    }
}
