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
//! receiver; receives probe (`MPI_Improbe`) by polling and receive what
//! they matched non-blocking (`MPI_Imrecv`), so a message counts once all
//! its bytes have come, which is also how a receive-any honours its
//! deadline.
//!
//! # Failure
//! A collective that does not complete within [`Poll::timeout`] (a peer
//! died without the launcher noticing, or hangs) prints which rank waited on
//! what, and aborts the whole job (`MPI_Abort`) instead of hanging; so does
//! a communicator not made within it ([`bounded`], failure.rs).

use anyhow::{bail, Context, Result};
use mpi::collective::CommunicatorCollectives;
use mpi::datatype::PartitionMut;
use mpi::environment::Universe;
use mpi::topology::{Communicator as _, SimpleCommunicator};
use mpi::traits::Root;
use mpi::Threading;
use std::mem::ManuallyDrop;
use std::time::Duration;

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
    /// The default. For a group spanning machines, as `Sleep` while this
    /// process's worker computes beside the collective (comm/activity.rs)
    /// and as `Yield` while it does not (it waits for the collective): over
    /// TCP the kernel moves the bytes between tests, and a yielding thread
    /// took a share of the computing worker's core (acco's rounds 1.5x
    /// longer, finding 16), while sleeping delays a collective the worker
    /// waits for. For a group on one machine, as `Yield`: shared memory
    /// moves only inside MPI calls ([`Wait::for_group`]).
    Auto,
}

impl Wait {
    /// One pause between two tests, `waited` into the wait.
    pub(crate) fn pause(self, waited: Duration) {
        match self.now(crate::comm::activity::computing()) {
            Wait::Spin => std::hint::spin_loop(),
            Wait::Sleep if waited >= Duration::from_micros(100) => {
                std::thread::sleep((waited / 20).clamp(Duration::from_micros(50), Duration::from_millis(1)))
            }
            // (`now` never gives `Auto`.)
            Wait::Yield | Wait::Sleep | Wait::Auto => std::thread::yield_now(),
        }
    }

    /// The wait for a group's collectives: `Auto` on a group whose members
    /// all share this machine's memory waits as `Yield` (a sleeping thread
    /// starves a shared-memory transfer: 4x slower, docs/mpi.md; acco
    /// trained 7% fewer tokens a second); the others are themselves.
    pub fn for_group(self, one_machine: bool) -> Wait {
        match self {
            Wait::Auto if one_machine => Wait::Yield,
            other => other,
        }
    }

    /// The wait to use now, `computing` saying whether this process's
    /// worker computes: `Auto` picks; the others are themselves.
    pub fn now(self, computing: bool) -> Wait {
        match self {
            Wait::Auto if computing => Wait::Sleep,
            Wait::Auto => Wait::Yield,
            other => other,
        }
    }

    /// How a receive waits for a message: as `self`, but sleeping where
    /// `self` yields. A receive can wait for a peer's whole round (async
    /// DiLoCo's server waits for the next worker's update), and a rank that
    /// only yields still takes its share of a core it shares with computing
    /// ranks: on two cores, a yielding server made its two workers'
    /// micro-batches 1.6x slower (docs/results/planner-accuracy.md, finding 6).
    /// Sleeping adds at most 1 ms to a message's arrival; a rank with
    /// `sends_in_flight` keeps `self` (their bytes move only in MPI calls).
    /// A receive in flight sleeps too: over TCP the kernel's socket buffer
    /// takes the bytes between tests, and a server yielding through a
    /// model's arrival made its workers compute 11-60% slower (finding 12).
    pub(crate) fn for_receive(self, sends_in_flight: bool) -> Wait {
        match self {
            Wait::Yield | Wait::Auto if !sends_in_flight => Wait::Sleep,
            other => other,
        }
    }
}

/// Whether every member of `comm` shares this rank's machine (its memory),
/// as `MPI_Comm_split_type` shared finds it: what [`Wait::for_group`]
/// takes. Collective over `comm`.
pub(super) fn on_one_machine(comm: &SimpleCommunicator) -> bool {
    comm.split_shared(0).size() == comm.size()
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
    /// From `LOWCOMM_MPI_POLL=auto|yield|sleep|spin` (default auto) and
    /// `LOWCOMM_MPI_TIMEOUT_S` (default 600 s).
    pub fn from_env() -> Result<Poll> {
        let wait = match std::env::var("LOWCOMM_MPI_POLL").as_deref() {
            Err(_) | Ok("auto") => Wait::Auto,
            Ok("yield") => Wait::Yield,
            Ok("spin") => Wait::Spin,
            Ok("sleep") => Wait::Sleep,
            Ok(other) => bail!("LOWCOMM_MPI_POLL={other}: use auto (the default), yield, sleep or spin"),
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
    /// Dropped by [`MpiProcess`]'s `drop`, under a deadline: `MPI_Finalize`.
    universe: ManuallyDrop<Universe>,
}

impl Drop for MpiProcess {
    fn drop(&mut self) {
        // SAFETY: taken once, here; nothing reads the field afterwards.
        let universe = unsafe { ManuallyDrop::take(&mut self.universe) };
        bounded(self.rank(), self.poll.timeout, "MPI_Finalize", || drop(universe));
    }
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
        let rank = world.rank() as usize;
        let machine =
            bounded(rank, poll.timeout, "finding the ranks on this machine", || world.split_shared(rank as i32));
        let (local_ranks, local_rank) = (machine.size() as usize, machine.rank() as usize);
        Ok(MpiProcess { world, threading, poll, local_ranks, local_rank, universe: ManuallyDrop::new(universe) })
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
        self.bounded("making a communicator", || MpiComm::new(self.world.duplicate(), self.poll))
    }

    /// Runs `call`, which makes a communicator, under the collective
    /// timeout ([`bounded`]).
    fn bounded<T>(&self, what: &str, call: impl FnOnce() -> T) -> T {
        bounded(self.rank(), self.poll.timeout, what, call)
    }

    /// The ranks' vote on a stop request (strategy/stop.rs), on a
    /// communicator of its own; `None` unless MPI granted
    /// `MPI_THREAD_MULTIPLE`: a participant may vote while its
    /// communication thread is inside MPI.
    pub fn flag_vote(&self) -> Option<FlagVote> {
        (self.threading == Threading::Multiple).then(|| FlagVote {
            comm: self.bounded("making the stop vote's communicator", || self.world.duplicate()),
            poll: self.poll,
            rank: self.rank(),
        })
    }

    /// This rank's view of the job as a [`Fabric`] (for the communication thread).
    pub fn fabric(&self) -> MpiFabric {
        self.bounded("making the communication thread's communicators", || {
            MpiFabric::new(self.world.duplicate(), self.world.duplicate(), self.poll)
        })
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

mod collectives;
mod fabric;
mod failure;
pub use collectives::{FlagVote, MpiComm};
pub use fabric::MpiFabric;
pub use failure::{abort_job, bounded, hang_before_first_group, stop_this_process, ABORT_GRACE};
