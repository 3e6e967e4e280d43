//! Two-tier topology (nodes x workers per node) over any backend: each
//! worker holds the whole group, its node's group and its peers at the same
//! local index on the other nodes. Built by [`super::LocalGroup::two_tier`]
//! (threads) or, with the `mpi` feature, `MpiProcess::two_tier` (ranks per
//! node from MPI or the environment).

use super::{padded_len, CommStats, Communicator, LocalComm, ReduceOp, WireDtype};

/// A worker of a two-tier (nodes x workers per node) topology. As a
/// [`Communicator`] it is the whole group; its all-reduce is hierarchical
/// (intra-node reduce-scatter, inter-node all-reduce of 1/per_node of the
/// data, intra-node all-gather), the other collectives use `world`.
pub struct TwoTierComm<C: Communicator = LocalComm> {
    /// All ranks; rank = node * per_node + local.
    pub world: C,
    /// The ranks of this worker's node; rank = local index.
    pub intra: C,
    /// The ranks with the same local index on every node; rank = node.
    pub inter: C,
    /// Reused across calls (grown, never shrunk).
    scratch: Vec<f32>,
}

impl<C: Communicator> TwoTierComm<C> {
    /// Bundles one worker's handles (see [`super::LocalGroup::two_tier`]).
    pub fn new(world: C, intra: C, inter: C) -> TwoTierComm<C> {
        assert_eq!(world.world(), intra.world() * inter.world(), "two-tier: world must be intra x inter");
        TwoTierComm { world, intra, inter, scratch: Vec::new() }
    }

    fn grow(&mut self, len: usize) {
        if self.scratch.len() < len {
            self.scratch.resize(len, 0.0);
        }
    }
}

impl<C: Communicator> Communicator for TwoTierComm<C> {
    fn rank(&self) -> usize {
        self.world.rank()
    }
    fn world(&self) -> usize {
        self.world.world()
    }
    fn all_reduce(&mut self, buf: &mut [f32], op: ReduceOp) {
        // Mean within nodes then Mean across nodes is the global mean
        // because all nodes have the same size.
        let (n, k) = (buf.len(), self.intra.world());
        let padded = padded_len(n, k);
        let c = padded / k;
        if padded == n {
            self.grow(c);
            let part = &mut self.scratch[..c];
            self.intra.reduce_scatter(buf, part, op);
            self.inter.all_reduce(part, op);
            self.intra.all_gather(part, buf);
        } else {
            // Odd sizes: pad a copy (zeros do not change sums).
            self.grow(padded + c);
            let (full, rest) = self.scratch.split_at_mut(padded);
            let part = &mut rest[..c];
            full[..n].copy_from_slice(buf);
            full[n..].fill(0.0);
            self.intra.reduce_scatter(full, part, op);
            self.inter.all_reduce(part, op);
            self.intra.all_gather(part, full);
            buf.copy_from_slice(&full[..n]);
        }
    }
    fn reduce_scatter(&mut self, input: &[f32], output: &mut [f32], op: ReduceOp) {
        self.world.reduce_scatter(input, output, op)
    }
    fn all_gather(&mut self, input: &[f32], output: &mut [f32]) {
        self.world.all_gather(input, output)
    }
    fn broadcast(&mut self, buf: &mut [f32], root: usize) {
        self.world.broadcast(buf, root)
    }
    fn barrier(&mut self) {
        self.world.barrier()
    }
    fn wire(&self) -> WireDtype {
        self.world.wire()
    }
    /// Sum over the three sub-groups.
    fn stats(&self) -> CommStats {
        self.world.stats() + self.intra.stats() + self.inter.stats()
    }
}
