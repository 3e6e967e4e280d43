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
//! # Groups and messages
//! [`MpiFabric`] is a participant's whole view: the communicator of any
//! group of ranks, made on first use with `MPI_Comm_create_group` (collective
//! over the group's members only), and point-to-point messages on a
//! duplicate of `MPI_COMM_WORLD` of their own. A send is an `MPI_Isend` of
//! the message's encoding that completes in the background (tested at every
//! later call and waited for at the end), so a sender never waits for its
//! receiver; receives probe (`MPI_Improbe`) by polling, which is also how a
//! receive-any honours its deadline.
//!
//! # Failure
//! A collective that does not complete within [`Poll::timeout`] (a peer
//! died without the launcher noticing, or hangs) prints which rank waited on
//! what, and aborts the whole job (`MPI_Abort`) instead of hanging.

use super::bf16::{from_bf16_bits, to_bf16_bits};
use super::{padded_len, CommStats, Communicator, Fabric, Message, ReduceOp, WireDtype};
use anyhow::{bail, Context, Result};
use mpi::collective::CommunicatorCollectives;
use mpi::datatype::{Equivalence, PartitionMut};
use mpi::environment::Universe;
use mpi::point_to_point::{Destination, Source};
use mpi::request::{Request, Scope, StaticScope};
use mpi::topology::Group as _;
use mpi::topology::{Communicator as _, SimpleCommunicator};
use mpi::traits::Root;
use mpi::Threading;
use std::collections::HashMap;
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
    /// This rank's place among them (0 to `local_ranks - 1`).
    local_rank: usize,
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
        let machine = world.split_shared(world.rank());
        let (local_ranks, local_rank) = (machine.size() as usize, machine.rank() as usize);
        Ok(MpiProcess { world, threading, poll, local_ranks, local_rank, _universe: universe })
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
    pub fn comm(&self) -> MpiComm {
        MpiComm::new(self.world.duplicate(), self.poll)
    }

    /// The ranks' vote on a stop request (strategy/stop.rs), on a
    /// communicator of its own; `None` unless MPI granted
    /// `MPI_THREAD_MULTIPLE`: a participant may vote while its
    /// communication thread is inside MPI.
    pub fn flag_vote(&self) -> Option<FlagVote> {
        (self.threading == Threading::Multiple).then(|| FlagVote {
            comm: self.world.duplicate(),
            poll: self.poll,
            rank: self.rank(),
        })
    }

    /// This rank's view of the job as a [`Fabric`] (for the communication thread).
    pub fn fabric(&self) -> MpiFabric {
        MpiFabric::new(self.world.duplicate(), self.world.duplicate(), self.poll)
    }

    /// Ranks sharing memory (the machine) with this one, as MPI sees it.
    pub fn local_ranks(&self) -> usize {
        self.local_ranks
    }

    /// This rank's place among the ranks on its machine: the GPU it takes
    /// under `--device cuda` (`cuda:(local rank mod GPUs)`), whatever the
    /// job's rank numbering across machines.
    pub fn local_rank(&self) -> usize {
        self.local_rank
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
    /// Only the first `workers` ranks (the job's workers; a server rank
    /// after them sits on a node of its own) need to divide into nodes; a
    /// node larger than that is one node of `workers`.
    pub fn ranks_per_node(&self, workers: usize) -> Result<usize> {
        let per_node = match std::env::var("LOWCOMM_RANKS_PER_NODE") {
            Ok(v) => v
                .parse::<usize>()
                .ok()
                .filter(|k| *k >= 1)
                .with_context(|| format!("LOWCOMM_RANKS_PER_NODE={v}: give a whole number >= 1"))?,
            Err(_) => self.local_ranks(),
        }
        .min(workers.max(1));
        // Every rank must agree, or the sub-groups would not line up.
        let mut all = vec![0u64; self.size()];
        let (world, poll, rank, mine) = (&self.world, self.poll, self.rank(), per_node as u64);
        mpi::request::scope(|sc| {
            let req = world.immediate_all_gather_into(sc, &mine, &mut all[..]);
            MpiComm::complete(world, poll, rank, "ranks-per-node all_gather", req)
        });
        // Workers must agree; a server after them may sit elsewhere.
        all.truncate(workers.min(all.len()));
        if all.iter().any(|&k| k != per_node as u64) || !workers.is_multiple_of(per_node) {
            bail!("ranks per node differ across nodes ({all:?}) or do not divide {workers} workers: groups by node need the same number of workers on every node (set LOWCOMM_RANKS_PER_NODE to override)");
        }
        Ok(per_node)
    }

    /// Gathers every rank's `bytes` on rank 0 (in rank order); `None` elsewhere.
    /// Both gathers are polled with the collective timeout, so a rank that
    /// hangs between them is caught too.
    pub fn gather_bytes(&self, bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
        let (world, poll, rank) = (&self.world, self.poll, self.rank());
        let root = world.process_at_rank(0);
        let len = bytes.len() as i32;
        if rank != 0 {
            mpi::request::scope(|sc| {
                MpiComm::complete(world, poll, rank, "gather (lengths)", root.immediate_gather_into(sc, &len))
            });
            mpi::request::scope(|sc| {
                MpiComm::complete(world, poll, rank, "gather", root.immediate_gather_varcount_into(sc, bytes))
            });
            return None;
        }
        let mut lens = vec![0i32; self.size()];
        mpi::request::scope(|sc| {
            MpiComm::complete(
                world,
                poll,
                rank,
                "gather (lengths)",
                root.immediate_gather_into_root(sc, &len, &mut lens[..]),
            )
        });
        let displs: Vec<i32> = lens.iter().scan(0, |acc, &l| Some(std::mem::replace(acc, *acc + l))).collect();
        let mut all = vec![0u8; lens.iter().map(|&l| l as usize).sum()];
        let mut part = PartitionMut::new(&mut all[..], &lens[..], &displs[..]);
        mpi::request::scope(|sc| {
            MpiComm::complete(
                world,
                poll,
                rank,
                "gather",
                root.immediate_gather_varcount_into_root(sc, bytes, &mut part),
            )
        });
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
///
/// `MPI_Abort` may fail to end the process: once in 20 runs of the MPI
/// suite under load (docs/decisions.md, "The MPI tests 20 times under
/// load") the rank that should have aborted stayed alive for minutes with
/// its communication thread inside MPICH (ch4:ucx), most likely in the
/// library's exit path. A watchdog armed first ends this process with `_exit`
/// (no exit handlers, no library destructors) after [`ABORT_GRACE`]; the
/// launcher then sees a rank gone and ends the others.
pub fn abort_job(comm: &SimpleCommunicator, rank: usize, why: &str) -> ! {
    eprintln!("lowcomm (mpi rank {rank}): {why}; aborting all ranks");
    std::thread::spawn(move || {
        std::thread::sleep(ABORT_GRACE);
        eprintln!("lowcomm (mpi rank {rank}): MPI_Abort did not end this rank in {} s; exiting", ABORT_GRACE.as_secs());
        // SAFETY: _exit ends the process at once; nothing runs after it.
        unsafe { libc::_exit(1) }
    });
    std::thread::sleep(Duration::from_millis(300));
    if std::env::var_os("LOWCOMM_FAULT_ABORT_HANGS").is_some() {
        // Tests: stand in for an MPI_Abort that never returns nor ends the process.
        loop {
            std::thread::park();
        }
    }
    comm.abort(1)
}

/// How long [`abort_job`] lets `MPI_Abort` take before the watchdog ends
/// the process itself.
pub const ABORT_GRACE: Duration = Duration::from_secs(10);

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
    comm: SimpleCommunicator,
    poll: Poll,
    rank: usize,
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
    fn new(comm: SimpleCommunicator, poll: Poll) -> MpiComm {
        let (rank, world) = (comm.rank() as usize, comm.size() as usize);
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

/// Tag of every point-to-point message (one communicator is theirs alone).
const MESSAGE_TAG: i32 = 77;

/// A message on its way: the request and the encoding it reads, leaked
/// until the request completes.
struct Outgoing {
    req: Option<Request<'static, [u8], StaticScope>>,
    buf: *mut [u8],
}

/// One MPI rank's view of the job: groups and messages (module docs).
pub struct MpiFabric {
    /// Parent of every group.
    world: SimpleCommunicator,
    /// Point-to-point messages only.
    p2p: SimpleCommunicator,
    poll: Poll,
    rank: usize,
    size: usize,
    groups: HashMap<Vec<usize>, MpiComm>,
    outgoing: Vec<Outgoing>,
    stats: CommStats,
}

// SAFETY: as for MpiComm: process-wide handles, used by one thread at a
// time; the leaked send buffers are owned by this fabric alone.
unsafe impl Send for MpiFabric {}

impl MpiFabric {
    fn new(world: SimpleCommunicator, p2p: SimpleCommunicator, poll: Poll) -> MpiFabric {
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        MpiFabric {
            world,
            p2p,
            poll,
            rank,
            size,
            groups: HashMap::new(),
            outgoing: Vec::new(),
            stats: CommStats::default(),
        }
    }

    /// Completes the sends that have finished; with `all`, waits for every
    /// one (aborting the job after the collective timeout).
    fn progress_sends(&mut self, all: bool) {
        let t = Instant::now();
        loop {
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
            if !all || self.outgoing.is_empty() {
                return;
            }
            if t.elapsed() > self.poll.timeout {
                abort_job(&self.world, self.rank, "a message send did not complete: its receiver has probably died");
            }
            std::thread::yield_now();
        }
    }

    /// Polls for a message from `from` (any sender when `None`) until `timeout`.
    fn probe(&mut self, from: Option<usize>, timeout: Option<Duration>) -> Option<(usize, Message)> {
        let t = Instant::now();
        loop {
            self.progress_sends(false);
            let got = match from {
                Some(f) => self.p2p.process_at_rank(f as i32).immediate_matched_probe_with_tag(MESSAGE_TAG),
                None => self.p2p.any_process().immediate_matched_probe_with_tag(MESSAGE_TAG),
            };
            if let Some((msg, status)) = got {
                let len = status.count(u8::equivalent_datatype()) as usize;
                let mut bytes = vec![0u8; len];
                msg.matched_receive_into(&mut bytes[..]);
                let source = status.source_rank() as usize;
                let m = Message::decode(&bytes).unwrap_or_else(|e| {
                    abort_job(&self.world, self.rank, &format!("a message from rank {source} does not decode ({e}): ranks built from different lowcomm versions?"))
                });
                self.stats.count_message(len, false);
                return Some((source, m));
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
            std::thread::yield_now();
        }
    }
}

impl Drop for MpiFabric {
    fn drop(&mut self) {
        self.progress_sends(true);
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
            let comm = if members.len() == self.size {
                self.world.duplicate()
            } else {
                let ranks: Vec<i32> = members.iter().map(|&m| m as i32).collect();
                let group = self.world.group().include(&ranks[..]);
                self.world.split_by_subgroup(&group).expect("a member of the group gets its communicator")
            };
            self.groups.insert(members.to_vec(), MpiComm::new(comm, self.poll));
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
        self.progress_sends(false);
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
