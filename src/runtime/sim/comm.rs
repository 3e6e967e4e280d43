//! The simulator's communication side: [`CommSide`] in virtual time.
//!
//! Collectives meet per group: each group keeps a sequence per member, and
//! a member's k-th collective on a group joins the group's k-th op (members
//! run their tasks in start order, so this is well defined). The last
//! member to join runs the math for everyone, with the in-process
//! backend's recipe, and fixes the completion time: the latest join plus
//! the link cost of the route the group crosses. Every member resumes then.
//!
//! Messages: a send holds the sender's stream for the transfer time and
//! lands in the receiver's mailbox stamped with its arrival time; a receive
//! takes the earliest arrived message (ties: lower sender, then send order).

use super::math::execute;
use super::state::{sleep_until, Data, Lane, Mail, PendingOp, SimComm, State, What};
use crate::comm::{Message, ReduceOp, WireDtype};
use crate::metrics::{LinkTier, Span, Traffic};
use crate::runtime::tasks::Kind;
use crate::runtime::{collective_cost, collective_traffic, CommSide, Group, Topology, Work};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

impl SimComm {
    pub fn new(rank: usize, round: u64, state: Rc<RefCell<State>>) -> SimComm {
        SimComm { rank, round, state }
    }

    /// Joins this participant's next collective on `g` with `data`; waits
    /// for it to complete; returns this member's result, the group's
    /// members and this participant's index among them.
    async fn collective(&mut self, g: &Group, what: What, data: Data, elems: usize) -> (Data, Vec<usize>, usize) {
        let (members, seq, me) = self.join(g, what, data, elems);
        let res = JoinWait { state: &self.state, rank: self.rank, members: &members, seq, me, registered: false }.await;
        (res, members, me)
    }

    fn join(&mut self, g: &Group, what: What, data: Data, elems: usize) -> (Vec<usize>, u64, usize) {
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        let topo = st.spec.topology;
        let members = topo.members(g, self.rank);
        let me = members.iter().position(|&m| m == self.rank).unwrap_or_else(|| {
            panic!("participant {} starts a collective on {g:?} = {members:?}, which it is not a member of", self.rank)
        });
        let p = members.len();
        let ops = st.groups.entry(members.clone()).or_default();
        if ops.next.is_empty() {
            ops.next = vec![0; p];
        }
        let seq = ops.next[me];
        ops.next[me] += 1;
        let now = st.now;
        let op = ops.ops.entry(seq).or_insert_with(|| PendingOp {
            what,
            joined: (0..p).map(|_| None).collect(),
            count: 0,
            done_at: None,
            results: (0..p).map(|_| None).collect(),
            waiters: Vec::new(),
        });
        assert!(
            op.what == what,
            "group {members:?}, collective #{seq}: participant {} calls {what:?} but an earlier member called {:?}",
            self.rank,
            op.what
        );
        op.joined[me] = Some((now, elems, data));
        op.count += 1;
        st.parts[self.rank].blocked = Some(format!("collective #{seq} of group {members:?} ({what:?})"));
        if op.count == p {
            let last = op.joined.iter().flatten().map(|j| j.0).fold(0.0, f64::max);
            let n_elems = op.joined[0].as_ref().map_or(0, |j| j.1);
            if let Some(q) = op.joined.iter().flatten().position(|j| j.1 != n_elems) {
                panic!("group {members:?}, collective #{seq} ({what:?}): members disagree on the length ({n_elems} vs {} at member {q})", op.joined[q].as_ref().map_or(0, |j| j.1));
            }
            let contributions: Vec<Data> = op.joined.iter_mut().map(|j| j.take().expect("all joined").2).collect();
            let results = execute(what, contributions, p, &mut st.pool);
            let (bpe, kind) = match what {
                What::Dense { wire, kind, .. } => (wire.bytes_per_elem(), kind),
                What::Bytes => (1, Kind::AllGather),
            };
            let route = topo.route(g, &members);
            let scaled = (n_elems as f64 * st.spec.comm_scale).round() as usize;
            let cost = st.spec.link.as_ref().map_or(0.0, |l| collective_cost(l, kind, scaled, bpe, route));
            // Slower while a member computes (spec.rs, Interference).
            let computing = members.iter().any(|&m| st.parts[m].computing_until > last);
            let done = last + if computing { cost * st.spec.interference.comm } else { cost };
            st.note_transfer(last, done);
            let ops = st.groups.get_mut(&members).expect("exists");
            let op = ops.ops.get_mut(&seq).expect("exists");
            op.results = results.into_iter().map(Some).collect();
            op.done_at = Some(done);
            for w in std::mem::take(&mut op.waiters) {
                st.wake(done, Lane::Comm, w);
            }
        }
        (members, seq, me)
    }

    /// Records this participant's span of a finished collective.
    fn span(&self, name: &str, start: f64, traffic: Traffic) {
        let mut st = self.state.borrow_mut();
        let now = st.now;
        let part = &mut st.parts[self.rank];
        let span = Span::comm(self.rank, name, start, now).with_round(self.round);
        part.events.push(span.with_traffic(traffic));
        part.blocked = None;
    }

    /// A copy of `src` in a pooled buffer (the contribution a member hands in).
    fn pooled(&self, src: &[f32]) -> Vec<f32> {
        let mut v = self.state.borrow_mut().take_buf(src.len());
        v.copy_from_slice(src);
        v
    }

    /// A dense collective: hands `contribution` in, waits, copies this
    /// member's result into `output`.
    #[allow(clippy::too_many_arguments)] // the collective's own parameters
    async fn dense(
        &mut self,
        g: &Group,
        kind: Kind,
        op: ReduceOp,
        wire: WireDtype,
        root: usize,
        contribution: Vec<f32>,
        output: &mut [f32],
    ) {
        let start = self.now();
        // Costed on the whole buffer: the input of a reduce-scatter, the output of an all-gather.
        let elems = match kind {
            Kind::AllGather => output.len(),
            _ => contribution.len(),
        };
        let what = What::Dense { kind, op, wire, root };
        let (res, members, me) = self.collective(g, what, Data::Dense(contribution), elems).await;
        output.copy_from_slice(res.dense());
        // The last member holding a result hands its buffer back.
        let back = match res {
            Data::Dense(v) => Some(v),
            Data::Shared(rc) => Rc::try_unwrap(rc).ok(),
            Data::Bytes(_) | Data::SharedBytes(_) => None,
        };
        if let Some(v) = back {
            self.state.borrow_mut().give_buf(v);
        }
        let traffic = collective_traffic(&self.topology(), g, &members, kind, elems, wire.bytes_per_elem(), me, root);
        self.span(kind.name(), start, traffic);
    }
}

/// Waits until the joined collective has completed, then takes the result.
struct JoinWait<'a> {
    state: &'a Rc<RefCell<State>>,
    rank: usize,
    members: &'a [usize],
    seq: u64,
    me: usize,
    registered: bool,
}

impl Future for JoinWait<'_> {
    type Output = Data;
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Data> {
        let (rank, seq, me) = (self.rank, self.seq, self.me);
        let mut st = self.state.borrow_mut();
        let now = st.now;
        let ops = st.groups.get_mut(self.members).expect("joined group");
        let op = ops.ops.get_mut(&seq).expect("joined op");
        match op.done_at {
            Some(t) if t <= now => {
                let out = op.results[me].take().expect("each member takes its result once");
                if op.results.iter().all(Option::is_none) {
                    ops.ops.remove(&seq);
                }
                return Poll::Ready(out);
            }
            Some(t) if !self.registered => st.wake(t, Lane::Comm, rank),
            None if !self.registered => op.waiters.push(rank),
            _ => {}
        }
        drop(st);
        self.registered = true;
        Poll::Pending
    }
}

impl CommSide for SimComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn topology(&self) -> Topology {
        self.state.borrow().spec.topology
    }
    fn now(&self) -> f64 {
        self.state.borrow().now
    }
    async fn all_reduce(&mut self, g: &Group, buf: &mut [f32], op: ReduceOp, wire: WireDtype) {
        let c = self.pooled(buf);
        self.dense(g, Kind::AllReduce, op, wire, 0, c, buf).await;
    }
    async fn reduce_scatter(&mut self, g: &Group, input: &[f32], output: &mut [f32], op: ReduceOp, wire: WireDtype) {
        let p = self.topology().members(g, self.rank).len();
        assert_eq!(input.len(), p * output.len(), "reduce_scatter: input.len() must be |group| * output.len()");
        let c = self.pooled(input);
        self.dense(g, Kind::ReduceScatter, op, wire, 0, c, output).await;
    }
    async fn all_gather(&mut self, g: &Group, input: &[f32], output: &mut [f32], wire: WireDtype) {
        let p = self.topology().members(g, self.rank).len();
        assert_eq!(output.len(), p * input.len(), "all_gather: output.len() must be |group| * input.len()");
        let c = self.pooled(input);
        self.dense(g, Kind::AllGather, ReduceOp::Sum, wire, 0, c, output).await;
    }
    async fn broadcast(&mut self, g: &Group, buf: &mut [f32], root: usize, wire: WireDtype) {
        let p = self.topology().members(g, self.rank).len();
        assert!(root < p, "broadcast: root {root} out of range for a group of {p}");
        let c = self.pooled(buf);
        self.dense(g, Kind::Broadcast, ReduceOp::Sum, wire, root, c, buf).await;
    }
    async fn all_gather_bytes(&mut self, g: &Group, input: &[u8], output: &mut [u8]) {
        let p = self.topology().members(g, self.rank).len();
        assert_eq!(output.len(), p * input.len(), "all_gather_bytes: output.len() must be |group| * input.len()");
        let start = self.now();
        let (res, members, me) = self.collective(g, What::Bytes, Data::Bytes(input.to_vec()), output.len()).await;
        output.copy_from_slice(res.bytes());
        let n = output.len();
        self.span(
            "all_gather_bytes",
            start,
            collective_traffic(&self.topology(), g, &members, Kind::AllGather, n, 1, me, 0),
        );
    }
    async fn send(&mut self, to: usize, mut msg: Message) {
        let start = self.now();
        let topo = self.topology();
        assert!(to < topo.participants() && to != self.rank, "participant {} cannot send to {to}", self.rank);
        msg.round_for_wire();
        let bytes = msg.wire_len();
        let same_node = topo.node_of(self.rank) == topo.node_of(to);
        let arrival = {
            let mut st = self.state.borrow_mut();
            let scaled = crate::comm::payload::MESSAGE_HEADER
                + ((bytes - crate::comm::payload::MESSAGE_HEADER) as f64 * st.spec.comm_scale).round() as usize;
            let cost = st.spec.link.as_ref().map_or(0.0, |l| l.message_s(scaled, same_node));
            let computing = st.parts[self.rank].computing_until > st.now;
            // The receiver's link takes one message at a time: one that
            // finds it busy (two workers' updates reaching one server)
            // starts when the message before it has landed, and its sender
            // is held until then, as TCP's window would hold it.
            let begin = st.now.max(st.parts[to].receiving_until);
            let arrival = begin + if computing { cost * st.spec.interference.comm } else { cost };
            st.parts[to].receiving_until = arrival;
            st.note_transfer(begin, arrival);
            let seq = st.mail_seq;
            st.mail_seq += 1;
            st.parts[to].mailbox.push(Mail { arrival, seq, from: self.rank, msg });
            // A receiver waiting for mail looks again when this one lands.
            st.wake(arrival, Lane::Comm, to);
            arrival
        };
        sleep_until(&self.state, self.rank, Lane::Comm, arrival).await;
        let tier = if same_node { LinkTier::Intra } else { LinkTier::Inter };
        self.span("send", start, Traffic::on(tier, bytes as u64));
    }
    async fn recv(&mut self, from: usize) -> Message {
        let start = self.now();
        self.state.borrow_mut().parts[self.rank].blocked = Some(format!("a message from participant {from}"));
        let msg = TakeMail { state: &self.state, rank: self.rank, from: Some(from), deadline: None }
            .await
            .expect("no deadline")
            .1;
        self.span("recv", start, Traffic::on(LinkTier::Intra, 0));
        msg
    }
    async fn recv_any(&mut self, deadline_s: Option<f64>) -> Option<(usize, Message)> {
        let start = self.now();
        self.state.borrow_mut().parts[self.rank].blocked = Some("a message from anyone".into());
        let got = TakeMail { state: &self.state, rank: self.rank, from: None, deadline: deadline_s }.await;
        self.span("recv", start, Traffic::on(LinkTier::Intra, 0));
        got
    }
    async fn work<R>(&mut self, work: Work, f: impl FnOnce() -> R) -> R {
        let r = f();
        let until = {
            let st = self.state.borrow();
            st.now + st.spec.cost(work, st.parts[self.rank].speed)
        };
        sleep_until(&self.state, self.rank, Lane::Comm, until).await;
        r
    }
}

/// Takes the earliest arrived message (from `from`, or anyone); `None` at
/// the deadline.
struct TakeMail<'a> {
    state: &'a Rc<RefCell<State>>,
    rank: usize,
    from: Option<usize>,
    deadline: Option<f64>,
}

impl Future for TakeMail<'_> {
    type Output = Option<(usize, Message)>;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        let mut st = self.state.borrow_mut();
        let now = st.now;
        let box_ = &mut st.parts[self.rank].mailbox;
        let pick = box_
            .iter()
            .enumerate()
            .filter(|(_, m)| self.from.is_none_or(|f| m.from == f) && m.arrival <= now)
            .min_by(|a, b| {
                a.1.arrival.total_cmp(&b.1.arrival).then(a.1.from.cmp(&b.1.from)).then(a.1.seq.cmp(&b.1.seq))
            })
            .map(|(i, _)| i);
        if let Some(i) = pick {
            let m = box_.remove(i);
            st.parts[self.rank].blocked = None;
            return Poll::Ready(Some((m.from, m.msg)));
        }
        if let Some(d) = self.deadline {
            if now >= d {
                st.parts[self.rank].blocked = None;
                return Poll::Ready(None);
            }
            // Mail landing before the deadline wakes us itself.
            let r = self.rank;
            st.wake(d, Lane::Comm, r);
        }
        Poll::Pending
    }
}
