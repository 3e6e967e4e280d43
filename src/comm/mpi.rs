//! The multi-process backend (cargo feature `mpi`): one worker per MPI rank,
//! over the `mpi` crate (rsmpi), so ranks can sit on several machines.
//!
//! ```text
//! cargo build --release --features mpi
//! mpirun -np 4 target/release/lowcomm train --backend mpi --method acco ...
//! ```
//!
//! # Same bits as the in-process backend
//! Reductions do not use MPI's reduction operators, whose summation order
//! depends on the library's algorithm (and changes with message size).
//! A reduce-scatter is an `MPI_Ialltoall` (rank r receives chunk r of every
//! rank: the `(p-1) m` elements a ring moves) followed by a sum over ranks
//! 0..p in order on the receiving rank — the recipe of
//! [`super::local::LocalComm`], so both backends give identical bits.
//! An all-reduce is that reduce-scatter followed by an all-gather, on a
//! copy padded to a multiple of the world size when needed. With the bf16
//! wire dtype the buffers really travel as 16-bit values.
//!
//! # Threads and progress
//! MPI is initialised with `MPI_THREAD_MULTIPLE` where granted, and at
//! least `MPI_THREAD_SERIALIZED` is required: the worker's communication
//! thread owns its own duplicate of `MPI_COMM_WORLD` and is the only thread
//! calling MPI while training runs (the main thread uses MPI only before and
//! after). Collectives are started non-blocking and completed by polling
//! `MPI_Test`: MPICH and OpenMPI progress non-blocking collectives only
//! inside MPI calls, and a blocking wait busy-polls a whole core — on a
//! 2-core machine that core is the one the worker computes on. [`Poll`]
//! decides what happens between tests (see `docs/mpi.md` for the measured
//! cost of each choice).
//!
//! # Failure
//! A collective that does not complete within [`Poll::timeout`] (a peer
//! died without the launcher noticing, or hangs) prints which rank waited on
//! what, and aborts the whole job (`MPI_Abort`) instead of hanging.

use super::bf16::{from_bf16_bits, to_bf16_bits};
use super::{padded_len, CommStats, Communicator, ReduceOp, TwoTierComm, WireDtype};
use anyhow::{bail, Context, Result};
use mpi::collective::CommunicatorCollectives;
use mpi::datatype::{Equivalence, PartitionMut};
use mpi::environment::Universe;
use mpi::request::{Request, Scope};
use mpi::topology::{Communicator as _, SimpleCommunicator};
use mpi::traits::Root;
use mpi::Threading;
use std::time::{Duration, Instant};

/// What the communication thread does between two `MPI_Test`s of a
/// started collective (docs/mpi.md has the measured cost of each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Nothing: a tight loop, as a blocking MPI wait does. Burns a core.
    Spin,
    /// `sched_yield`: the core goes to any other runnable thread (the
    /// worker computing), else straight back to testing.
    Yield,
    /// Yield for the first 100 us, then sleep `waited / 20` (50 us to 1 ms).
    Sleep,
}

/// How a started collective is completed.
#[derive(Clone, Copy, Debug)]
pub struct Poll {
    /// Between tests.
    pub wait: Wait,
    /// Give up (and abort the job) after this long on one collective.
    pub timeout: Duration,
}

impl Poll {
    /// From `LOWCOMM_MPI_POLL=spin|yield|sleep` (default yield) and
    /// `LOWCOMM_MPI_TIMEOUT_S` (default 600 s).
    pub fn from_env() -> Result<Poll> {
        let wait = match std::env::var("LOWCOMM_MPI_POLL").as_deref() {
            Err(_) | Ok("yield") => Wait::Yield,
            Ok("spin") => Wait::Spin,
            Ok("sleep") => Wait::Sleep,
            Ok(other) => bail!("LOWCOMM_MPI_POLL={other}: use spin, yield or sleep"),
        };
        let timeout = match std::env::var("LOWCOMM_MPI_TIMEOUT_S") {
            Ok(v) => v
                .parse::<f64>()
                .ok()
                .filter(|t| *t > 0.0)
                .with_context(|| format!("LOWCOMM_MPI_TIMEOUT_S={v}: give a number of seconds > 0, e.g. 600"))?,
            Err(_) => 600.0,
        };
        Ok(Poll { wait, timeout: Duration::from_secs_f64(timeout) })
    }
}

/// The process's MPI environment: initialised once, finalised on drop.
pub struct MpiProcess {
    world: SimpleCommunicator,
    /// The thread support MPI granted.
    pub threading: Threading,
    poll: Poll,
    /// Ranks sharing memory (the machine) with this one, found once at init.
    local_ranks: usize,
    // Dropped last: MPI_Finalize.
    _universe: Universe,
}

impl MpiProcess {
    /// Initialises MPI; fails with a clear message if the library cannot
    /// give a communication thread its own collectives.
    pub fn init() -> Result<MpiProcess> {
        let poll = Poll::from_env()?;
        let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
            .context("MPI was already initialised in this process")?;
        if threading < Threading::Serialized {
            bail!("the MPI library grants only {threading:?} threading; lowcomm needs at least MPI_THREAD_SERIALIZED (MPICH and OpenMPI builds from Debian grant MULTIPLE)");
        }
        let world = universe.world();
        let local_ranks = world.split_shared(world.rank()).size() as usize;
        Ok(MpiProcess { world, threading, poll, local_ranks, _universe: universe })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.world.size() as usize
    }

    /// A new communicator over all ranks (a duplicate of `MPI_COMM_WORLD`,
    /// so its traffic never matches another handle's).
    pub fn comm(&self, wire: WireDtype) -> MpiComm {
        MpiComm::new(self.world.duplicate(), wire, self.poll)
    }

    /// Ranks sharing memory (the machine) with this one, as MPI sees it.
    pub fn local_ranks(&self) -> usize {
        self.local_ranks
    }

    /// Whether `per_node` ranks per node make a real two-tier topology
    /// (more than one node, more than one rank on each); else the flat
    /// group is the whole story.
    pub fn is_two_tier(&self, per_node: usize) -> bool {
        per_node > 1 && per_node < self.size()
    }

    /// Ranks per node: `LOWCOMM_RANKS_PER_NODE` if set (to try two-tier
    /// collectives on one machine), else the ranks MPI finds sharing memory
    /// with this one. Every node must have the same number of ranks, and
    /// ranks must be numbered node by node (mpirun's default block mapping).
    pub fn ranks_per_node(&self) -> Result<usize> {
        let size = self.size();
        let per_node = match std::env::var("LOWCOMM_RANKS_PER_NODE") {
            Ok(v) => v
                .parse::<usize>()
                .ok()
                .filter(|k| *k >= 1)
                .with_context(|| format!("LOWCOMM_RANKS_PER_NODE={v}: give a whole number >= 1"))?,
            Err(_) => self.local_ranks(),
        };
        // Every rank must agree, or the sub-groups would not line up.
        let mut all = vec![0u64; size];
        self.world.all_gather_into(&(per_node as u64), &mut all[..]);
        if all.iter().any(|&k| k != per_node as u64) || size % per_node != 0 {
            bail!("ranks per node differ across nodes ({all:?}) or do not divide {size} ranks: two-tier collectives need the same number of ranks on every node (set LOWCOMM_RANKS_PER_NODE to override)");
        }
        Ok(per_node)
    }

    /// The two-tier topology with `per_node` ranks per node: rank
    /// `g = node * per_node + local`.
    pub fn two_tier(&self, per_node: usize, wire: WireDtype) -> TwoTierComm<MpiComm> {
        let rank = self.rank();
        let (node, local) = (rank / per_node, rank % per_node);
        let split = |color: usize| {
            self.world
                .split_by_color_with_key(mpi::topology::Color::with_value(color as i32), rank as i32)
                .expect("every rank has a color")
        };
        let intra = MpiComm::new(split(node), wire, self.poll);
        let inter = MpiComm::new(split(local), wire, self.poll);
        TwoTierComm::new(self.comm(wire), intra, inter)
    }

    /// Gathers every rank's `bytes` on rank 0 (in rank order); `None` elsewhere.
    pub fn gather_bytes(&self, bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
        // A rank that hangs is caught here, by the timeout, not in the gather.
        self.barrier();
        let root = self.world.process_at_rank(0);
        let len = bytes.len() as i32;
        if self.rank() != 0 {
            root.gather_into(&len);
            root.gather_varcount_into(bytes);
            return None;
        }
        let mut lens = vec![0i32; self.size()];
        root.gather_into_root(&len, &mut lens[..]);
        let displs: Vec<i32> = lens.iter().scan(0, |acc, &l| Some(std::mem::replace(acc, *acc + l))).collect();
        let mut all = vec![0u8; lens.iter().map(|&l| l as usize).sum()];
        let mut part = PartitionMut::new(&mut all[..], &lens[..], &displs[..]);
        root.gather_varcount_into_root(bytes, &mut part);
        Some(displs.iter().zip(&lens).map(|(&d, &l)| all[d as usize..(d + l) as usize].to_vec()).collect())
    }

    /// Blocks until every rank arrives (polled, with the collective timeout).
    pub fn barrier(&self) {
        MpiComm::complete(&self.world, self.poll, self.rank(), "barrier", self.world.immediate_barrier());
    }

    /// Prints `why` and ends every rank of the job.
    pub fn abort(&self, why: &str) -> ! {
        abort_job(&self.world, self.rank(), why)
    }
}

/// Prints `why`, then `MPI_Abort`s every rank of `comm`'s job. The pause
/// lets the launcher forward this rank's stderr first: hydra tears the job
/// down at once, and the message was lost in about one run of three when
/// several jobs shared this 2-core machine.
pub fn abort_job(comm: &SimpleCommunicator, rank: usize, why: &str) -> ! {
    eprintln!("lowcomm (mpi rank {rank}): {why}; aborting all ranks");
    std::thread::sleep(Duration::from_millis(300));
    comm.abort(1)
}

/// One rank's handle on a group of MPI ranks. See the module docs.
pub struct MpiComm {
    comm: SimpleCommunicator,
    rank: usize,
    world: usize,
    wire: WireDtype,
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

fn grow<T: Copy + Default>(v: &mut Vec<T>, len: usize) -> &mut [T] {
    if v.len() < len {
        v.resize(len, T::default());
    }
    &mut v[..len]
}

impl MpiComm {
    fn new(comm: SimpleCommunicator, wire: WireDtype, poll: Poll) -> MpiComm {
        let (rank, world) = (comm.rank() as usize, comm.size() as usize);
        MpiComm {
            comm,
            rank,
            world,
            wire,
            stats: CommStats::default(),
            poll,
            recv: Vec::new(),
            pad: Vec::new(),
            send16: Vec::new(),
            recv16: Vec::new(),
        }
    }

    /// Completes `req` by polling (see [`Poll`]); aborts the job on timeout.
    fn complete<'a, D: ?Sized, S: Scope<'a>>(
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
                let why = format!("{what} did not complete in {:.0} s: a peer rank has probably died or hangs (LOWCOMM_MPI_TIMEOUT_S raises the limit if a step legitimately takes longer)", poll.timeout.as_secs_f64());
                abort_job(comm, rank, &why);
            }
            match poll.wait {
                Wait::Spin => std::hint::spin_loop(),
                Wait::Sleep if waited >= Duration::from_micros(100) => {
                    std::thread::sleep((waited / 20).clamp(Duration::from_micros(50), Duration::from_millis(1)))
                }
                Wait::Yield | Wait::Sleep => std::thread::yield_now(),
            }
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
    fn reduce_scatter_impl(&mut self, input: &[f32], output: &mut [f32], op: ReduceOp) {
        let (p, m) = (self.world, output.len());
        match self.wire {
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
        finish(output, op, p, self.wire);
    }

    /// All-gather without counting; bf16 travels as 16 bits.
    fn all_gather_impl(&mut self, input: &[f32], output: &mut [f32]) {
        match self.wire {
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
        super::bf16::round_slice_bf16(out);
    }
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn all_reduce(&mut self, buf: &mut [f32], op: ReduceOp) {
        let (n, p) = (buf.len(), self.world);
        let padded = padded_len(n, p);
        let m = padded / p;
        // One scratch holds the padded copy (when needed) and this rank's chunk.
        let mut pad = std::mem::take(&mut self.pad);
        let scratch = grow(&mut pad, if padded == n { m } else { padded + m });
        if padded == n {
            self.reduce_scatter_impl(buf, scratch, op);
            self.all_gather_impl(scratch, buf);
        } else {
            let (full, chunk) = scratch.split_at_mut(padded);
            full[..n].copy_from_slice(buf);
            full[n..].fill(0.0);
            self.reduce_scatter_impl(full, chunk, op);
            self.all_gather_impl(chunk, full);
            buf.copy_from_slice(&full[..n]);
        }
        self.pad = pad;
        self.stats.count_all_reduce(n, p, self.wire.bytes_per_elem());
    }
    fn reduce_scatter(&mut self, input: &[f32], output: &mut [f32], op: ReduceOp) {
        let p = self.world;
        assert_eq!(input.len(), p * output.len(), "reduce_scatter: input.len() must be world * output.len()");
        self.reduce_scatter_impl(input, output, op);
        self.stats.count_scatter_gather(output.len(), p, self.wire.bytes_per_elem());
    }
    fn all_gather(&mut self, input: &[f32], output: &mut [f32]) {
        let p = self.world;
        assert_eq!(output.len(), p * input.len(), "all_gather: output.len() must be world * input.len()");
        self.all_gather_impl(input, output);
        self.stats.count_scatter_gather(input.len(), p, self.wire.bytes_per_elem());
    }
    fn broadcast(&mut self, buf: &mut [f32], root: usize) {
        let p = self.world;
        assert!(root < p, "broadcast: root {root} out of range for world {p}");
        match self.wire {
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
        self.stats.count_broadcast(buf.len(), p, self.wire.bytes_per_elem(), self.rank, root);
    }
    fn barrier(&mut self) {
        Self::complete(&self.comm, self.poll, self.rank, "barrier", self.comm.immediate_barrier());
        self.stats.count_barrier();
    }
    fn wire(&self) -> WireDtype {
        self.wire
    }
    fn stats(&self) -> CommStats {
        self.stats
    }
}
