//! The embedded backend: workers are threads of one process; collectives go
//! through shared memory, not channels.
//!
//! Every collective has the same shape:
//! 1. each rank publishes a pointer to its buffer (and its length);
//! 2. barrier — now every buffer is visible and nobody republishes;
//! 3. rank r does its share of the work, reading other ranks' buffers
//!    directly and writing only the ranges the table below gives it;
//! 4. barrier — nobody returns (and frees or reuses its buffer) while
//!    another rank may still read or write it.
//!
//! | op | rank r reads | rank r writes |
//! |---|---|---|
//! | all_reduce | chunk r of every buffer | chunk r of every buffer |
//! | reduce_scatter | chunk r of every input | its own output |
//! | all_gather | every input | its own output |
//! | broadcast | root's buffer (r != root) | its own buffer |
//! | all_gather_bytes | every input | its own output |
//!
//! Chunks are disjoint, so between the two barriers no element is touched by
//! two ranks unless both only read it. The barriers (a Mutex + Condvar) order
//! the pointer publication and the data accesses (happens-before). Each rank
//! moves about 2n floats per all-reduce: memcpy speed, no allocation.
//!
//! Sums run over ranks 0..p in order, so results are bitwise identical on
//! every rank and from run to run, whatever the thread timing.
//!
//! A rank that panics or drops its [`LocalComm`] marks the group as left; any
//! rank waiting at (or later entering) a barrier of that group then panics
//! with a message naming the rank instead of hanging. The leaving rank
//! wakes the waiters (Condvar notify), so no wait timeout is needed, and a
//! rank that is merely slow (a long compute between collectives) is never
//! mistaken for a dead one. A thread that vanishes without dropping its
//! communicator (`mem::forget`) still hangs. Not detected: ranks passing
//! different `root`s to broadcast (wrong data, but no unsound access).
//!
//! The participants' fabric (groups and mailboxes): `local_fabric.rs`.

use super::{CommStats, Communicator, ReduceOp, WireDtype};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Elements reduced per block: the partial sums stay in L1.
const BLOCK: usize = 2048;
/// Ranks per group; lets a collective gather the peers' pointers on the stack.
pub const MAX_WORLD: usize = 64;

/// Factory for in-process groups.
pub struct LocalGroup;

impl LocalGroup {
    /// One communicator per rank of a new group of `world` threads.
    #[allow(clippy::new_ret_no_self)] // a group is its members' handles
    pub fn new(world: usize) -> Vec<LocalComm> {
        let shared = Shared::new(world);
        (0..world).map(|rank| LocalComm { rank, shared: shared.clone(), stats: CommStats::default() }).collect()
    }
}

struct BarrierState {
    arrived: usize,
    generation: u64,
    /// First rank that left the group: (rank, was panicking).
    left: Option<(usize, bool)>,
}

struct Shared {
    world: usize,
    state: Mutex<BarrierState>,
    cv: Condvar,
    /// Published buffer of each rank for the collective in progress (as
    /// bytes: each collective casts back to its element type).
    ptrs: Vec<AtomicPtr<u8>>,
    lens: Vec<AtomicUsize>,
}

impl Shared {
    fn new(world: usize) -> Arc<Shared> {
        assert!((1..=MAX_WORLD).contains(&world), "LocalGroup::new: world must be in 1..={MAX_WORLD}, got {world}");
        Arc::new(Shared {
            world,
            state: Mutex::new(BarrierState { arrived: 0, generation: 0, left: None }),
            cv: Condvar::new(),
            ptrs: (0..world).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
            lens: (0..world).map(|_| AtomicUsize::new(0)).collect(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, BarrierState> {
        // Nobody panics while holding the lock, but stay usable if one did.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Generation barrier: blocks (no spinning) until all ranks arrive.
    fn wait(&self, rank: usize) {
        let mut st = self.lock();
        let gen = st.generation;
        st.arrived += 1;
        if st.arrived == self.world {
            st.arrived = 0;
            st.generation += 1;
            self.cv.notify_all();
            return;
        }
        loop {
            if let Some((who, panicking)) = st.left {
                drop(st);
                let why = if panicking { "panicked" } else { "dropped its communicator" };
                crate::comm::stranded::stranded(format!(
                    "local comm: rank {rank} waits at a barrier but rank {who} {why}; the group cannot complete"
                ));
            }
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            // Check the generation first: a rank may leave right after a
            // barrier that already released us.
            if st.generation != gen {
                return;
            }
        }
    }
}

/// One rank of an in-process group (`Send`, used by one thread).
pub struct LocalComm {
    rank: usize,
    shared: Arc<Shared>,
    stats: CommStats,
}

impl Drop for LocalComm {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if st.left.is_none() {
            st.left = Some((self.rank, std::thread::panicking()));
        }
        self.shared.cv.notify_all();
    }
}

#[inline(always)]
fn rnd<const BF16: bool>(x: f32) -> f32 {
    if BF16 {
        super::bf16::round_bf16(x)
    } else {
        x
    }
}

/// Chunk r of n split into p nearly equal parts.
fn chunk_range(n: usize, p: usize, r: usize) -> (usize, usize) {
    (r * n / p, (r + 1) * n / p)
}

impl LocalComm {
    /// Publish, barrier, check lengths, `body`, barrier.
    fn collective<T>(&mut self, ptr: *mut T, len: usize, what: &str, body: impl FnOnce(&Shared, &[*mut T])) {
        let sh = &*self.shared;
        sh.ptrs[self.rank].store(ptr.cast(), Ordering::Relaxed);
        sh.lens[self.rank].store(len, Ordering::Relaxed);
        sh.wait(self.rank);
        // Every rank sees the same published lengths, so on a mismatch every
        // rank panics here, before anyone touches another rank's buffer.
        for q in 0..sh.world {
            let lq = sh.lens[q].load(Ordering::Relaxed);
            assert!(lq == len, "local comm {what}: rank {} has {len} elements but rank {q} has {lq}", self.rank);
        }
        // A stack array avoids a per-call allocation.
        let mut ptrs = [std::ptr::null_mut(); MAX_WORLD];
        for (slot, q) in ptrs.iter_mut().zip(&sh.ptrs) {
            *slot = q.load(Ordering::Relaxed).cast::<T>();
        }
        body(sh, &ptrs[..sh.world]);
        sh.wait(self.rank);
    }

    fn all_reduce_impl<const BF16: bool>(&mut self, buf: &mut [f32], op: ReduceOp) {
        let (n, rank) = (buf.len(), self.rank);
        self.collective(buf.as_mut_ptr(), n, "all_reduce", |sh, ptrs| {
            let p = sh.world;
            let (lo, hi) = chunk_range(n, p, rank);
            let mut acc = [0f32; BLOCK];
            let mut s = lo;
            while s < hi {
                let len = BLOCK.min(hi - s);
                let acc = &mut acc[..len];
                for (q, &ptr) in ptrs.iter().enumerate() {
                    // SAFETY: all ranks passed the barrier with buffers of
                    // length n, alive until the closing barrier; only this
                    // rank accesses [lo, hi) of any buffer (its chunk).
                    let src = unsafe { std::slice::from_raw_parts(ptr.add(s), len) };
                    if q == 0 {
                        acc.iter_mut().zip(src).for_each(|(a, &x)| *a = rnd::<BF16>(x));
                    } else {
                        acc.iter_mut().zip(src).for_each(|(a, &x)| *a += rnd::<BF16>(x));
                    }
                }
                finish::<BF16>(acc, op, p);
                for &ptr in ptrs {
                    // SAFETY: as above; the shared view `src` is gone.
                    let dst = unsafe { std::slice::from_raw_parts_mut(ptr.add(s), len) };
                    dst.copy_from_slice(acc);
                }
                s += len;
            }
        });
    }

    fn reduce_scatter_impl<const BF16: bool>(&mut self, input: &[f32], output: &mut [f32], op: ReduceOp) {
        let (m, rank) = (output.len(), self.rank);
        // Inputs are only ever read through the published pointer.
        self.collective(input.as_ptr() as *mut f32, input.len(), "reduce_scatter", |sh, ptrs| {
            for (b, out) in output.chunks_mut(BLOCK).enumerate() {
                let s = rank * m + b * BLOCK;
                for (q, &ptr) in ptrs.iter().enumerate() {
                    // SAFETY: inputs have p*m elements, alive until the closing
                    // barrier, and nobody writes them during the collective.
                    let src = unsafe { std::slice::from_raw_parts(ptr.add(s), out.len()) };
                    if q == 0 {
                        out.iter_mut().zip(src).for_each(|(a, &x)| *a = rnd::<BF16>(x));
                    } else {
                        out.iter_mut().zip(src).for_each(|(a, &x)| *a += rnd::<BF16>(x));
                    }
                }
                finish::<BF16>(out, op, sh.world);
            }
        });
    }

    fn all_gather_impl<const BF16: bool>(&mut self, input: &[f32], output: &mut [f32]) {
        let m = input.len();
        self.collective(input.as_ptr() as *mut f32, m, "all_gather", |_, ptrs| {
            for (out, &ptr) in output.chunks_mut(m.max(1)).zip(ptrs) {
                // SAFETY: read-only access to inputs of m elements, alive
                // until the closing barrier.
                let src = unsafe { std::slice::from_raw_parts(ptr, m) };
                out.iter_mut().zip(src).for_each(|(a, &x)| *a = rnd::<BF16>(x));
            }
        });
    }

    fn broadcast_impl<const BF16: bool>(&mut self, buf: &mut [f32], root: usize) {
        let (n, rank) = (buf.len(), self.rank);
        let ptr = buf.as_mut_ptr();
        self.collective(ptr, n, "broadcast", |_, ptrs| {
            if rank != root {
                // SAFETY: root's buffer is only read (root itself leaves it
                // alone until the closing barrier); ours is written only by us.
                let (src, dst) =
                    unsafe { (std::slice::from_raw_parts(ptrs[root], n), std::slice::from_raw_parts_mut(ptr, n)) };
                dst.iter_mut().zip(src).for_each(|(a, &x)| *a = rnd::<BF16>(x));
            }
        });
        if BF16 && rank == root {
            // After the closing barrier nobody reads root's buffer any more.
            super::bf16::round_slice_bf16(buf);
        }
    }
}

impl LocalComm {
    fn all_gather_bytes_impl(&mut self, input: &[u8], output: &mut [u8]) {
        let m = input.len();
        self.collective(input.as_ptr() as *mut u8, m, "all_gather_bytes", |_, ptrs| {
            for (out, &ptr) in output.chunks_mut(m.max(1)).zip(ptrs) {
                // SAFETY: read-only access to inputs of m bytes, alive until
                // the closing barrier.
                out.copy_from_slice(unsafe { std::slice::from_raw_parts(ptr, m) });
            }
        });
    }
}

/// Mean scaling and the final rounding of what would arrive over the wire.
#[inline(always)]
fn finish<const BF16: bool>(acc: &mut [f32], op: ReduceOp, p: usize) {
    if op == ReduceOp::Mean {
        // Division (not * 1/p) so that Mean == Sum / world bitwise on f32.
        let pf = p as f32;
        acc.iter_mut().for_each(|a| *a /= pf);
    }
    if BF16 {
        acc.iter_mut().for_each(|a| *a = rnd::<true>(*a));
    }
}

impl Communicator for LocalComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.shared.world
    }
    fn all_reduce(&mut self, buf: &mut [f32], op: ReduceOp, wire: WireDtype) {
        match wire {
            WireDtype::F32 => self.all_reduce_impl::<false>(buf, op),
            WireDtype::Bf16 => self.all_reduce_impl::<true>(buf, op),
        }
        self.stats.count_all_reduce(buf.len(), self.world(), wire.bytes_per_elem());
    }
    fn reduce_scatter(&mut self, input: &[f32], output: &mut [f32], op: ReduceOp, wire: WireDtype) {
        let p = self.world();
        assert_eq!(input.len(), p * output.len(), "reduce_scatter: input.len() must be world * output.len()");
        match wire {
            WireDtype::F32 => self.reduce_scatter_impl::<false>(input, output, op),
            WireDtype::Bf16 => self.reduce_scatter_impl::<true>(input, output, op),
        }
        self.stats.count_scatter_gather(output.len(), p, wire.bytes_per_elem());
    }
    fn all_gather(&mut self, input: &[f32], output: &mut [f32], wire: WireDtype) {
        let p = self.world();
        assert_eq!(output.len(), p * input.len(), "all_gather: output.len() must be world * input.len()");
        match wire {
            WireDtype::F32 => self.all_gather_impl::<false>(input, output),
            WireDtype::Bf16 => self.all_gather_impl::<true>(input, output),
        }
        self.stats.count_scatter_gather(input.len(), p, wire.bytes_per_elem());
    }
    fn broadcast(&mut self, buf: &mut [f32], root: usize, wire: WireDtype) {
        let p = self.world();
        assert!(root < p, "broadcast: root {root} out of range for world {p}");
        match wire {
            WireDtype::F32 => self.broadcast_impl::<false>(buf, root),
            WireDtype::Bf16 => self.broadcast_impl::<true>(buf, root),
        }
        self.stats.count_broadcast(buf.len(), p, wire.bytes_per_elem(), self.rank, root);
    }
    fn all_gather_bytes(&mut self, input: &[u8], output: &mut [u8]) {
        let p = self.world();
        assert_eq!(output.len(), p * input.len(), "all_gather_bytes: output.len() must be world * input.len()");
        self.all_gather_bytes_impl(input, output);
        self.stats.count_scatter_gather(input.len(), p, 1);
    }
    fn barrier(&mut self) {
        self.shared.wait(self.rank);
        self.stats.count_barrier();
    }
    fn stats(&self) -> CommStats {
        self.stats
    }
}

#[path = "local_fabric.rs"]
mod fabric;
pub use fabric::LocalFabric;

/// A member of a local group whose all-reduce is `F` (given the member
/// and the call's arguments); every other collective is the member's.
/// Tests use it for a backend whose all-reduce differs: one that sums in
/// another order (local_tests.rs), a slow link (calibrate/overlap.rs).
#[cfg(test)]
pub(crate) struct AllReduceBy<F>(pub LocalComm, pub F);

#[cfg(test)]
impl<F: FnMut(&mut LocalComm, &mut [f32], ReduceOp, WireDtype) + Send> Communicator for AllReduceBy<F> {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn world(&self) -> usize {
        self.0.world()
    }
    fn all_reduce(&mut self, buf: &mut [f32], op: ReduceOp, wire: WireDtype) {
        (self.1)(&mut self.0, buf, op, wire)
    }
    fn reduce_scatter(&mut self, input: &[f32], output: &mut [f32], op: ReduceOp, wire: WireDtype) {
        self.0.reduce_scatter(input, output, op, wire)
    }
    fn all_gather(&mut self, input: &[f32], output: &mut [f32], wire: WireDtype) {
        self.0.all_gather(input, output, wire)
    }
    fn broadcast(&mut self, buf: &mut [f32], root: usize, wire: WireDtype) {
        self.0.broadcast(buf, root, wire)
    }
    fn all_gather_bytes(&mut self, input: &[u8], output: &mut [u8]) {
        self.0.all_gather_bytes(input, output)
    }
    fn barrier(&mut self) {
        self.0.barrier()
    }
    fn stats(&self) -> CommStats {
        self.0.stats()
    }
}

#[cfg(test)]
#[path = "local_tests.rs"]
mod tests;
