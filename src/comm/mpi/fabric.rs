//! One MPI rank's view of the job: a communicator per group, made on first
//! use, and point-to-point messages (the module docs of `comm::mpi`).

use super::{abort_job, bounded, MpiComm, Poll, Wait};
use crate::comm::{CommStats, Communicator, Fabric, Message};
use mpi::datatype::Equivalence;
use mpi::point_to_point::{Destination, Source};
use mpi::request::{Request, StaticScope};
use mpi::topology::Group as _;
use mpi::topology::{Communicator as _, SimpleCommunicator};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Tag of every point-to-point message (one communicator is theirs alone).
const MESSAGE_TAG: i32 = 77;

/// A message on its way: the request and the encoding it reads, leaked
/// until the request completes.
struct Outgoing {
    req: Option<Request<'static, [u8], StaticScope>>,
    buf: *mut [u8],
}

/// A message matched and on its way in: its sender, the request and the
/// buffer it fills, leaked until the request completes.
struct Incoming {
    source: usize,
    req: Request<'static, [u8], StaticScope>,
    buf: *mut [u8],
}

/// One MPI rank's view of the job: groups and messages (module docs).
pub struct MpiFabric {
    /// Parent of every group.
    world: SimpleCommunicator,
    /// Point-to-point messages only.
    p2p: SimpleCommunicator,
    /// Each group resolves its own wait ([`super::Wait::for_group`]).
    poll: Poll,
    /// How a message is waited for, resolved over the whole job.
    message_wait: Wait,
    rank: usize,
    size: usize,
    groups: HashMap<Vec<usize>, MpiComm>,
    outgoing: Vec<Outgoing>,
    /// The message being received, if any (one at a time: `start_receive`).
    incoming: Option<Incoming>,
    /// Messages received whole and not yet taken, each sender's in order.
    arrived: VecDeque<(usize, Message)>,
    stats: CommStats,
}

// SAFETY: as for MpiComm: process-wide handles, used by one thread at a
// time; the leaked send buffers are owned by this fabric alone.
unsafe impl Send for MpiFabric {}

impl MpiFabric {
    pub(super) fn new(world: SimpleCommunicator, p2p: SimpleCommunicator, poll: Poll) -> MpiFabric {
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        MpiFabric {
            message_wait: poll.wait.for_group(super::on_one_machine(&world)),
            world,
            p2p,
            poll,
            rank,
            size,
            groups: HashMap::new(),
            outgoing: Vec::new(),
            incoming: None,
            arrived: VecDeque::new(),
            stats: CommStats::default(),
        }
    }

    /// Completes the sends that have finished.
    fn progress_sends(&mut self) {
        self.outgoing.retain_mut(|o| {
            let req = o.req.take().expect("a pending send has its request");
            match req.test() {
                Ok(_) => {
                    // SAFETY: the request that read the buffer completed;
                    // the buffer came from Box::leak in `send`.
                    drop(unsafe { Box::from_raw(o.buf) });
                    false
                }
                Err(req) => {
                    o.req = Some(req);
                    true
                }
            }
        });
    }

    /// Waits until every send has completed, aborting the job after the
    /// collective timeout; with `receiving`, receives go on meanwhile (into
    /// `arrived`, as `progress` moves them).
    fn wait_for_sends(&mut self, receiving: bool) {
        let t = Instant::now();
        loop {
            if receiving {
                self.progress(None);
            } else {
                self.progress_sends();
            }
            if self.outgoing.is_empty() {
                return;
            }
            let waited = t.elapsed();
            if waited > self.poll.timeout {
                abort_job(&self.world, self.rank, "a message send did not complete: its receiver has probably died");
            }
            // Sends in flight: their bytes move only in MPI calls (mod.rs, Wait::for_receive).
            self.message_wait.for_receive(true).pause(waited);
        }
    }

    /// Starts receiving the next message from `from` (any sender when
    /// `None`) whose envelope has come, if any (`MPI_Improbe`, `MPI_Imrecv`),
    /// unless one is being received: a receiver's link takes one message at
    /// a time, as in the simulator (docs/design.md), so the first to come
    /// arrives in one message's time instead of sharing the link with the
    /// next (MPI moves a large message's bytes once its receive is posted).
    fn start_receive(&mut self, from: Option<usize>) {
        if self.incoming.is_some() {
            return;
        }
        let got = match from {
            Some(f) => self.p2p.process_at_rank(f as i32).immediate_matched_probe_with_tag(MESSAGE_TAG),
            None => self.p2p.any_process().immediate_matched_probe_with_tag(MESSAGE_TAG),
        };
        if let Some((msg, status)) = got {
            let len = status.count(u8::equivalent_datatype()) as usize;
            let buf: &'static mut [u8] = Box::leak(vec![0u8; len].into_boxed_slice());
            let ptr: *mut [u8] = buf;
            // SAFETY: `buf` lives until the request completes (progress_receives frees it then).
            let req = msg.immediate_matched_receive_into(StaticScope, unsafe { &mut *ptr });
            let source = status.source_rank() as usize;
            self.incoming = Some(Incoming { source, req, buf: ptr });
        }
    }

    /// Decodes the message being received once it has come whole, into `arrived`.
    fn progress_receives(&mut self) {
        let Some(o) = self.incoming.take() else { return };
        match o.req.test() {
            Ok(_) => {
                // SAFETY: the request that filled the buffer completed; it came from Box::leak.
                let bytes = unsafe { Box::from_raw(o.buf) };
                let m = Message::decode(&bytes).unwrap_or_else(|e| {
                    abort_job(&self.world, self.rank, &format!("a message from rank {} does not decode ({e}): ranks built from different lowcomm versions?", o.source))
                });
                self.stats.count_message(bytes.len(), false);
                self.arrived.push_back((o.source, m));
            }
            Err(req) => self.incoming = Some(Incoming { req, ..o }),
        }
    }

    /// Moves every message along: completes finished sends, starts
    /// receiving the next message from `from` (anyone: `None`) whose
    /// envelope has come, and takes one that has come whole.
    fn progress(&mut self, from: Option<usize>) {
        self.progress_sends();
        self.start_receive(from);
        self.progress_receives();
    }

    /// Waits up to `timeout` for a message from `from` (any sender when
    /// `None`) to have come whole. A message counts once all its bytes have
    /// come, not when its envelope has: an async DiLoCo server whose grace
    /// period ended hands out the model at once instead of first receiving a
    /// second worker's update still crossing its link
    /// (docs/results/planner-accuracy.md, finding 12). A message started and
    /// not finished by the deadline goes on arriving and is taken later.
    fn probe(&mut self, from: Option<usize>, timeout: Option<Duration>) -> Option<(usize, Message)> {
        let t = Instant::now();
        loop {
            self.progress(from);
            if let Some(i) = self.arrived.iter().position(|(s, _)| from.is_none_or(|f| f == *s)) {
                return self.arrived.remove(i);
            }
            let waited = t.elapsed();
            match timeout {
                Some(limit) if waited >= limit => return None,
                None if waited > self.poll.timeout => abort_job(
                    &self.world,
                    self.rank,
                    &format!(
                        "no message from {} in {:.0} s: a peer rank has probably died or hangs",
                        from.map_or("any rank".into(), |f| format!("rank {f}")),
                        self.poll.timeout.as_secs_f64()
                    ),
                ),
                _ => {}
            }
            self.message_wait.for_receive(!self.outgoing.is_empty()).pause(waited);
        }
    }
}

impl Drop for MpiFabric {
    fn drop(&mut self) {
        self.wait_for_sends(false);
        // A receive started is finished before its buffer goes (the message is dropped unread).
        let t = Instant::now();
        while self.incoming.is_some() && t.elapsed() < self.poll.timeout {
            self.progress_receives();
            std::thread::yield_now();
        }
    }
}

impl Fabric for MpiFabric {
    fn rank(&self) -> usize {
        self.rank
    }
    fn participants(&self) -> usize {
        self.size
    }
    fn group(&mut self, members: &[usize]) -> &mut dyn Communicator {
        if !self.groups.contains_key(members) {
            assert!(
                members.contains(&self.rank),
                "rank {} asked for group {members:?}, which it is not a member of",
                self.rank
            );
            assert!(members.windows(2).all(|w| w[0] < w[1]), "group members must be sorted and distinct: {members:?}");
            super::failure::before_making_a_group(self.rank);
            let (world, poll) = (&self.world, self.poll);
            let what = format!("making the communicator of ranks {members:?}");
            let comm = bounded(self.rank, poll.timeout, &what, || {
                let comm = if members.len() == self.size {
                    world.duplicate()
                } else {
                    let ranks: Vec<i32> = members.iter().map(|&m| m as i32).collect();
                    let group = world.group().include(&ranks[..]);
                    world.split_by_subgroup(&group).expect("a member of the group gets its communicator")
                };
                MpiComm::new(comm, poll)
            });
            self.groups.insert(members.to_vec(), comm);
        }
        self.groups.get_mut(members).expect("just inserted")
    }
    fn send(&mut self, to: usize, msg: Message) {
        assert!(to < self.size && to != self.rank, "rank {} cannot send to {to}", self.rank);
        let mut bytes = Vec::new();
        msg.encode(&mut bytes);
        self.stats.count_message(bytes.len(), true);
        let buf: &'static mut [u8] = Box::leak(bytes.into_boxed_slice());
        let ptr: *mut [u8] = buf;
        // SAFETY: `buf` lives until the request completes (progress_sends frees it then).
        let shared: &'static [u8] = unsafe { &*ptr };
        let req = self.p2p.process_at_rank(to as i32).immediate_send_with_tag(StaticScope, shared, MESSAGE_TAG);
        self.outgoing.push(Outgoing { req: Some(req), buf: ptr });
        self.progress_sends();
    }
    /// Receives go on meanwhile (into `arrived`): a server sending one
    /// worker its model still takes another's update on its other direction,
    /// as the simulator's does.
    fn flush(&mut self) {
        self.wait_for_sends(true);
    }
    fn recv(&mut self, from: usize) -> Message {
        self.probe(Some(from), None).expect("no timeout").1
    }
    fn recv_any(&mut self, timeout: Option<Duration>) -> Option<(usize, Message)> {
        self.probe(None, timeout)
    }
    fn message_stats(&self) -> CommStats {
        self.stats
    }
}
