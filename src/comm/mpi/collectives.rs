//! One rank's collectives over a group of MPI ranks: reductions summed in
//! rank order for the in-process backend's bits, completion polled (the
//! module docs of `comm::mpi`).

use super::failure::timed_out;
use super::{abort_job, Poll};
use crate::comm::bf16::{from_bf16_bits, to_bf16_bits};
use crate::comm::{padded_len, CommStats, Communicator, ReduceOp, WireDtype};
use mpi::collective::CommunicatorCollectives;
use mpi::datatype::Equivalence;
use mpi::request::{Request, Scope};
use mpi::topology::{Communicator as _, SimpleCommunicator};
use mpi::traits::Root;
use std::time::Instant;

/// One rank's handle on a group of MPI ranks. See the module docs.
pub struct MpiComm {
    comm: SimpleCommunicator,
    rank: usize,
    world: usize,
    stats: CommStats,
    poll: Poll,
    /// Reused across calls (grown, never shrunk): first-touch page faults
    /// cost ~10x a copy on these VMs.
    recv: Vec<f32>,
    pad: Vec<f32>,
    send16: Vec<u16>,
    recv16: Vec<u16>,
}

// SAFETY: an MPI communicator is a process-wide handle (an integer in MPICH,
// a pointer to library-owned state in OpenMPI), not tied to the thread that
// made it. MpiProcess::init requires MPI_THREAD_SERIALIZED or better, and
// an MpiComm is used by one thread at a time (`&mut self` on every
// collective); the threads that use MPI in turn (main, then communication
// thread, then main) are ordered by the channel and join that hand it over.
unsafe impl Send for MpiComm {}

/// Whether any rank raised a flag: an all-reduce (max) of one byte per
/// call, polled with the collective timeout like every collective.
pub struct FlagVote {
    pub(super) comm: SimpleCommunicator,
    pub(super) poll: Poll,
    pub(super) rank: usize,
}

// SAFETY: as MpiComm's; and MpiProcess::flag_vote exists only under
// MPI_THREAD_MULTIPLE, since the participant that votes may do so while its
// communication thread is inside MPI. One participant per process votes, so
// the vote's own calls never overlap (strategy/stop.rs holds a lock around it).
unsafe impl Send for FlagVote {}
unsafe impl Sync for FlagVote {}

impl FlagVote {
    /// This rank's flag in; whether any rank's was set out. Every rank
    /// must call it the same number of times.
    pub fn any_raised(&self, mine: bool) -> bool {
        let (send, mut any) = (u8::from(mine), 0u8);
        let op = mpi::collective::SystemOperation::max();
        mpi::request::scope(|sc| {
            MpiComm::complete(
                &self.comm,
                self.poll,
                self.rank,
                "stop vote",
                self.comm.immediate_all_reduce_into(sc, &send, &mut any, op),
            )
        });
        any != 0
    }
}

fn grow<T: Copy + Default>(v: &mut Vec<T>, len: usize) -> &mut [T] {
    if v.len() < len {
        v.resize(len, T::default());
    }
    &mut v[..len]
}

impl MpiComm {
    /// Collective over `comm`'s members (every caller makes it at once).
    pub(super) fn new(comm: SimpleCommunicator, poll: Poll) -> MpiComm {
        let (rank, world) = (comm.rank() as usize, comm.size() as usize);
        let poll = Poll { wait: poll.wait.for_group(super::on_one_machine(&comm)), ..poll };
        MpiComm {
            comm,
            rank,
            world,
            stats: CommStats::default(),
            poll,
            recv: Vec::new(),
            pad: Vec::new(),
            send16: Vec::new(),
            recv16: Vec::new(),
        }
    }

    /// Completes `req` by polling (see [`Poll`]); aborts the job on timeout.
    pub(super) fn complete<'a, D: ?Sized, S: Scope<'a>>(
        comm: &SimpleCommunicator,
        poll: Poll,
        rank: usize,
        what: &str,
        mut req: Request<'a, D, S>,
    ) {
        let t = Instant::now();
        loop {
            req = match req.test() {
                Ok(_) => return,
                Err(r) => r,
            };
            let waited = t.elapsed();
            if waited > poll.timeout {
                abort_job(comm, rank, &timed_out(what, poll.timeout));
            }
            poll.wait.pause(waited);
        }
    }

    fn all_to_all<T: Equivalence>(&self, send: &[T], recv: &mut [T], what: &str) {
        let (comm, poll, rank) = (&self.comm, self.poll, self.rank);
        mpi::request::scope(|sc| {
            Self::complete(comm, poll, rank, what, comm.immediate_all_to_all_into(sc, send, recv))
        });
    }

    fn all_gather_raw<T: Equivalence>(&self, send: &[T], recv: &mut [T]) {
        let (comm, poll, rank) = (&self.comm, self.poll, self.rank);
        mpi::request::scope(|sc| {
            Self::complete(comm, poll, rank, "all_gather", comm.immediate_all_gather_into(sc, send, recv))
        });
    }

    fn broadcast_raw<T: Equivalence>(&self, buf: &mut [T], root: usize) {
        let (comm, poll, rank) = (&self.comm, self.poll, self.rank);
        let root = comm.process_at_rank(root as i32);
        mpi::request::scope(|sc| Self::complete(comm, poll, rank, "broadcast", root.immediate_broadcast_into(sc, buf)));
    }

    /// Reduce-scatter without counting: chunk r of every rank's `input`
    /// arrives at rank r, which sums them over ranks 0..p in order.
    fn reduce_scatter_impl(&mut self, input: &[f32], output: &mut [f32], op: ReduceOp, wire: WireDtype) {
        let (p, m) = (self.world, output.len());
        match wire {
            WireDtype::F32 => {
                let mut recv = std::mem::take(&mut self.recv);
                self.all_to_all(input, grow(&mut recv, p * m), "reduce_scatter");
                sum_chunks(&recv[..p * m], output, |x| x);
                self.recv = recv;
            }
            WireDtype::Bf16 => {
                let (mut send, mut recv) = (std::mem::take(&mut self.send16), std::mem::take(&mut self.recv16));
                grow(&mut send, p * m).iter_mut().zip(input).for_each(|(b, &x)| *b = to_bf16_bits(x));
                self.all_to_all(&send[..p * m], grow(&mut recv, p * m), "reduce_scatter");
                sum_chunks(&recv[..p * m], output, from_bf16_bits);
                (self.send16, self.recv16) = (send, recv);
            }
        }
        finish(output, op, p, wire);
    }

    /// All-gather without counting; bf16 travels as 16 bits.
    fn all_gather_impl(&mut self, input: &[f32], output: &mut [f32], wire: WireDtype) {
        match wire {
            WireDtype::F32 => self.all_gather_raw(input, output),
            WireDtype::Bf16 => {
                let (mut send, mut recv) = (std::mem::take(&mut self.send16), std::mem::take(&mut self.recv16));
                grow(&mut send, input.len()).iter_mut().zip(input).for_each(|(b, &x)| *b = to_bf16_bits(x));
                self.all_gather_raw(&send[..input.len()], grow(&mut recv, output.len()));
                output.iter_mut().zip(recv.iter()).for_each(|(x, &b)| *x = from_bf16_bits(b));
                (self.send16, self.recv16) = (send, recv);
            }
        }
    }
}

/// `out[i] = sum over q of f(chunks[q][i])`, q = 0..p in order (the local
/// backend's recipe: the first term is assigned, not added to zero).
fn sum_chunks<T: Copy>(chunks: &[T], out: &mut [f32], f: impl Fn(T) -> f32) {
    let m = out.len();
    for (q, chunk) in chunks.chunks_exact(m.max(1)).enumerate() {
        if q == 0 {
            out.iter_mut().zip(chunk).for_each(|(a, &x)| *a = f(x));
        } else {
            out.iter_mut().zip(chunk).for_each(|(a, &x)| *a += f(x));
        }
    }
}

/// Mean's division and bf16's final rounding, as the local backend does them.
fn finish(out: &mut [f32], op: ReduceOp, p: usize, wire: WireDtype) {
    if op == ReduceOp::Mean {
        let pf = p as f32;
        out.iter_mut().for_each(|a| *a /= pf);
    }
    if wire == WireDtype::Bf16 {
        crate::comm::bf16::round_slice_bf16(out);
    }
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn all_reduce(&mut self, buf: &mut [f32], op: ReduceOp, wire: WireDtype) {
        let (n, p) = (buf.len(), self.world);
        let padded = padded_len(n, p);
        let m = padded / p;
        // One scratch holds the padded copy (when needed) and this rank's chunk.
        let mut pad = std::mem::take(&mut self.pad);
        let scratch = grow(&mut pad, if padded == n { m } else { padded + m });
        if padded == n {
            self.reduce_scatter_impl(buf, scratch, op, wire);
            self.all_gather_impl(scratch, buf, wire);
        } else {
            let (full, chunk) = scratch.split_at_mut(padded);
            full[..n].copy_from_slice(buf);
            full[n..].fill(0.0);
            self.reduce_scatter_impl(full, chunk, op, wire);
            self.all_gather_impl(chunk, full, wire);
            buf.copy_from_slice(&full[..n]);
        }
        self.pad = pad;
        self.stats.count_all_reduce(n, p, wire.bytes_per_elem());
    }
    fn reduce_scatter(&mut self, input: &[f32], output: &mut [f32], op: ReduceOp, wire: WireDtype) {
        let p = self.world;
        assert_eq!(input.len(), p * output.len(), "reduce_scatter: input.len() must be world * output.len()");
        self.reduce_scatter_impl(input, output, op, wire);
        self.stats.count_scatter_gather(output.len(), p, wire.bytes_per_elem());
    }
    fn all_gather(&mut self, input: &[f32], output: &mut [f32], wire: WireDtype) {
        let p = self.world;
        assert_eq!(output.len(), p * input.len(), "all_gather: output.len() must be world * input.len()");
        self.all_gather_impl(input, output, wire);
        self.stats.count_scatter_gather(input.len(), p, wire.bytes_per_elem());
    }
    fn broadcast(&mut self, buf: &mut [f32], root: usize, wire: WireDtype) {
        let p = self.world;
        assert!(root < p, "broadcast: root {root} out of range for world {p}");
        match wire {
            WireDtype::F32 => self.broadcast_raw(buf, root),
            WireDtype::Bf16 => {
                let mut b16 = std::mem::take(&mut self.send16);
                let b = grow(&mut b16, buf.len());
                b.iter_mut().zip(buf.iter()).for_each(|(b, &x)| *b = to_bf16_bits(x));
                self.broadcast_raw(b, root);
                buf.iter_mut().zip(b.iter()).for_each(|(x, &b)| *x = from_bf16_bits(b));
                self.send16 = b16;
            }
        }
        self.stats.count_broadcast(buf.len(), p, wire.bytes_per_elem(), self.rank, root);
    }
    fn all_gather_bytes(&mut self, input: &[u8], output: &mut [u8]) {
        let p = self.world;
        assert_eq!(output.len(), p * input.len(), "all_gather_bytes: output.len() must be world * input.len()");
        self.all_gather_raw(input, output);
        self.stats.count_scatter_gather(input.len(), p, 1);
    }
    fn barrier(&mut self) {
        Self::complete(&self.comm, self.poll, self.rank, "barrier", self.comm.immediate_barrier());
        self.stats.count_barrier();
    }
    fn stats(&self) -> CommStats {
        self.stats
    }
}
