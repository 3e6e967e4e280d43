//! Communication: collectives over groups of participants, and messages
//! between two of them.
//!
//! A [`Communicator`] is one participant's handle on one group: rank, size
//! and the blocking collectives on flat buffers. A [`Fabric`] is one
//! participant's handle on the whole job: the communicator of any group it
//! belongs to (made on first use) and point-to-point [`Message`]s. Backends:
//! - [`local`]: threads of one process sharing memory (the embedded default).
//! - `mpi` (cargo feature `mpi`): one process per participant over MPI, on
//!   one machine or several; same traits, same conformance checks
//!   ([`conformance`]), same bits.
//!
//! # Payloads
//! Every op says what travels ([`WireDtype`]): `F32`, or `Bf16` (buffers
//! stay `f32`; every rank's contribution is rounded to bf16,
//! round-to-nearest-even, before it is combined, and the result is rounded
//! again: what would arrive over the wire). Scalars (counts, norms) are
//! sent with `F32`, so they travel exactly. Packed sparse payloads
//! ([`payload::Sparse`]) are encoded to bytes and all-gathered with
//! [`Communicator::all_gather_bytes`]; a [`Message`] carries scalars in f64
//! and values in its own wire dtype.
//!
//! # Byte counters
//! [`CommStats`] counts what a bandwidth-optimal *ring* implementation would
//! send and receive per rank, so counters are comparable across backends and
//! match [`link::LinkModel`]'s formulas. With `p` the group size, `b` the wire
//! bytes per element (4 for f32, 2 for bf16, 1 for raw bytes) and `n` the
//! buffer length:
//!
//! | op | sent = received (per rank) |
//! |---|---|
//! | `all_reduce(n)` | `2 (p-1) n b / p` (integer division) |
//! | `reduce_scatter(input p*m)` | `(p-1) m b` |
//! | `all_gather(output p*m)`, `all_gather_bytes` | `(p-1) m b` |
//! | `broadcast(n)` | pipelined chain `root -> root+1 -> ...`: every rank but the last in the chain sends `n b`; every rank but the root receives `n b` |
//! | `barrier` | 0 |
//! | message | its encoded length, sent by one and received by the other |
//!
//! With `p = 1` nothing is counted. `ops` counts every call, barrier included.

pub mod activity;
pub mod bench;
pub mod bf16;
pub mod codec;
pub mod conformance;
pub mod link;
pub mod link_measured;
pub mod local;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod payload;
pub mod stranded;

pub use link::{LinkModel, Tier};
pub use local::{LocalComm, LocalFabric, LocalGroup};
pub use payload::{Message, Sparse};

use serde::{Deserialize, Serialize};

/// How contributions are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReduceOp {
    /// Element-wise sum over ranks (in rank order 0..p, so bitwise deterministic).
    Sum,
    /// The sum divided by the world size.
    Mean,
}

/// The number format of data on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WireDtype {
    /// Full precision: 4 bytes per element.
    #[default]
    F32,
    /// bfloat16: 2 bytes per element, values rounded to nearest even.
    Bf16,
}

impl WireDtype {
    /// Bytes one element occupies on the wire.
    pub fn bytes_per_elem(self) -> usize {
        match self {
            WireDtype::F32 => 4,
            WireDtype::Bf16 => 2,
        }
    }

    /// Rounds `x` to what this wire dtype can carry.
    #[inline]
    pub fn round(self, x: f32) -> f32 {
        match self {
            WireDtype::F32 => x,
            WireDtype::Bf16 => bf16::round_bf16(x),
        }
    }
}

/// Per-rank traffic counters; see the module docs for the counting model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommStats {
    /// Bytes this rank would put on the wire.
    pub bytes_sent: u64,
    /// Bytes this rank would take off the wire.
    pub bytes_received: u64,
    /// Number of collective calls, barrier included.
    pub ops: u64,
}

/// Element-wise sum (e.g. over the sub-groups of a two-tier worker).
impl std::ops::Add for CommStats {
    type Output = CommStats;
    fn add(self, o: CommStats) -> CommStats {
        CommStats {
            bytes_sent: self.bytes_sent + o.bytes_sent,
            bytes_received: self.bytes_received + o.bytes_received,
            ops: self.ops + o.ops,
        }
    }
}

impl CommStats {
    /// Counts one all-reduce of `n` elements under the ring model.
    pub fn count_all_reduce(&mut self, n: usize, p: usize, b: usize) {
        let bytes = (2 * (p - 1) * n * b / p) as u64;
        self.count(bytes, bytes);
    }

    /// Counts one reduce-scatter or all-gather whose per-rank chunk is `m` elements.
    pub fn count_scatter_gather(&mut self, m: usize, p: usize, b: usize) {
        let bytes = ((p - 1) * m * b) as u64;
        self.count(bytes, bytes);
    }

    /// Counts one chain broadcast of `n` elements from `root`, seen by `rank`.
    pub fn count_broadcast(&mut self, n: usize, p: usize, b: usize, rank: usize, root: usize) {
        let bytes = (n * b) as u64;
        let last = (root + p - 1) % p;
        let sent = if p > 1 && rank != last { bytes } else { 0 };
        let received = if rank != root { bytes } else { 0 };
        self.count(sent, received);
    }

    /// Counts one message of `bytes` (encoded), sent or received.
    pub fn count_message(&mut self, bytes: usize, sent: bool) {
        let b = bytes as u64;
        if sent {
            self.count(b, 0);
        } else {
            self.count(0, b);
        }
    }

    /// Counts one barrier (no payload).
    pub fn count_barrier(&mut self) {
        self.count(0, 0);
    }

    fn count(&mut self, sent: u64, received: u64) {
        self.bytes_sent += sent;
        self.bytes_received += received;
        self.ops += 1;
    }
}

/// One participant's handle on a group.
///
/// Every rank of the group must call the same collectives in the same order
/// with the same lengths and wire dtypes; a mismatch is a bug and panics (on
/// every rank, when the backend can detect it).
pub trait Communicator: Send {
    /// This participant's index in the group, `0..world()`.
    fn rank(&self) -> usize;
    /// Number of participants in the group.
    fn world(&self) -> usize;
    /// In place: every rank ends with the reduction of all ranks' `buf`.
    fn all_reduce(&mut self, buf: &mut [f32], op: ReduceOp, wire: WireDtype);
    /// `input.len() == world * output.len()`; rank r receives the reduction of chunk r.
    fn reduce_scatter(&mut self, input: &[f32], output: &mut [f32], op: ReduceOp, wire: WireDtype);
    /// `output.len() == world * input.len()`; chunk r of output is rank r's input.
    fn all_gather(&mut self, input: &[f32], output: &mut [f32], wire: WireDtype);
    /// Every rank's `buf` becomes rank `root`'s `buf`.
    fn broadcast(&mut self, buf: &mut [f32], root: usize, wire: WireDtype);
    /// `output.len() == world * input.len()`; chunk r of output is rank r's
    /// bytes, exactly (packed payloads: sparse indices and values).
    fn all_gather_bytes(&mut self, input: &[u8], output: &mut [u8]);
    /// Returns once every rank has entered the barrier.
    fn barrier(&mut self);
    /// Traffic so far, under the ring model of the module docs.
    fn stats(&self) -> CommStats;
}

/// One participant's handle on the whole job: its groups and its messages.
///
/// Participants are numbered `0..participants()`. A group is a sorted list
/// of participants; its communicator is made the first time a member asks
/// for it, which every member must do (in the same order relative to its
/// other new groups: making a group is collective over its members).
pub trait Fabric: Send {
    /// This participant's number.
    fn rank(&self) -> usize;
    /// Number of participants in the job.
    fn participants(&self) -> usize;
    /// The communicator of `members` (sorted, containing this participant).
    fn group(&mut self, members: &[usize]) -> &mut dyn Communicator;
    /// Sends `msg` to participant `to`; returns once it is on its way (the
    /// receiver need not be waiting).
    fn send(&mut self, to: usize, msg: Message);
    /// Waits until every message sent so far is in its receiver's hands
    /// (each receiver must be receiving). Over threads a message is by the
    /// time `send` returns: the default does nothing.
    fn flush(&mut self) {}
    /// The next message from participant `from` (messages from one sender
    /// arrive in the order they were sent).
    fn recv(&mut self, from: usize) -> Message;
    /// The next message from anyone, or `None` once `timeout` has passed
    /// (`None`: wait for ever).
    fn recv_any(&mut self, timeout: Option<std::time::Duration>) -> Option<(usize, Message)>;
    /// Traffic of this participant's messages (group traffic is counted by
    /// each group's communicator).
    fn message_stats(&self) -> CommStats;
    /// A call another thread can make once this participant's program has
    /// failed (returned an error), so that every participant waiting for a
    /// message fails too, naming it, instead of waiting for ever on a peer
    /// that waits on the failed one. The default does nothing: an MPI rank
    /// whose program fails aborts the whole job (`comm::mpi::abort_job`).
    fn failure_notice(&self) -> Box<dyn Fn() + Send + Sync> {
        Box::new(|| ())
    }
}

/// `n` rounded up to a multiple of `world`: the length of the flat vector a
/// ZeRO-1 shard layout pads to, so each rank owns `padded_len / world` elements.
pub fn padded_len(n: usize, world: usize) -> usize {
    assert!(world > 0, "padded_len: world must be >= 1");
    n.div_ceil(world) * world
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_len_rounds_up_to_world_multiple() {
        assert_eq!(padded_len(0, 4), 0);
        assert_eq!(padded_len(1, 4), 4);
        assert_eq!(padded_len(8, 4), 8);
        assert_eq!(padded_len(1001, 8), 1008);
        assert_eq!(padded_len(7, 1), 7);
    }

    #[test]
    fn byte_counters_follow_ring_model_by_hand() {
        // all-reduce of 1000 f32 on 4 ranks: 2*3/4*4000 = 6000 bytes each way.
        let mut s = CommStats::default();
        s.count_all_reduce(1000, 4, 4);
        assert_eq!((s.bytes_sent, s.bytes_received, s.ops), (6000, 6000, 1));
        // reduce-scatter, chunk 250 bf16 on 4 ranks: 3*250*2 = 1500.
        s.count_scatter_gather(250, 4, 2);
        assert_eq!(s.bytes_sent, 7500);
        // broadcast of 10 f32 from root 2 on 4 ranks: chain 2->3->0->1.
        let bc = |rank| {
            let mut s = CommStats::default();
            s.count_broadcast(10, 4, 4, rank, 2);
            (s.bytes_sent, s.bytes_received)
        };
        assert_eq!(bc(2), (40, 0));
        assert_eq!(bc(3), (40, 40));
        assert_eq!(bc(1), (0, 40));
    }

    #[test]
    fn wire_dtype_serde_is_lowercase() {
        assert_eq!(serde_json::to_string(&WireDtype::Bf16).unwrap(), "\"bf16\"");
        assert_eq!(serde_json::from_str::<ReduceOp>("\"mean\"").unwrap(), ReduceOp::Mean);
    }
}
