//! A job's shape (workers, nodes, a server) and the routes its groups take.

use super::Group;

/// The shape of a job: `workers` data-parallel workers on nodes of
/// `per_node`, and optionally one parameter server.
///
/// Participants are numbered workers first (`0..workers`, worker
/// `r` on node `r / per_node`), then the server (`workers`), which sits on a
/// node of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Data-parallel workers.
    pub workers: usize,
    /// Workers per node (1: every worker on its own node; `workers`: one node).
    pub per_node: usize,
    /// Whether a parameter server participates.
    pub server: bool,
}

impl Topology {
    /// `workers` workers in one flat group (the link model decides the tiers).
    pub fn flat(workers: usize) -> Topology {
        Topology { workers, per_node: workers.max(1), server: false }
    }

    /// Number of participants (workers and the server).
    pub fn participants(&self) -> usize {
        self.workers + usize::from(self.server)
    }

    /// The server's participant number, if there is one.
    pub fn server_rank(&self) -> Option<usize> {
        self.server.then_some(self.workers)
    }

    /// Number of nodes holding workers.
    pub fn nodes(&self) -> usize {
        self.workers.div_ceil(self.per_node.max(1))
    }

    /// The node of participant `p` (the server's is `nodes()`).
    pub fn node_of(&self, p: usize) -> usize {
        if p >= self.workers {
            self.nodes()
        } else {
            p / self.per_node.max(1)
        }
    }

    /// The members of `g` as seen by participant `me`, sorted.
    pub fn members(&self, g: &Group, me: usize) -> Vec<usize> {
        let k = self.per_node.max(1);
        match g {
            Group::World => (0..self.workers).collect(),
            Group::Node => {
                let node = self.node_of(me);
                (node * k..((node + 1) * k).min(self.workers)).collect()
            }
            Group::Replicas => (me % k..self.workers).step_by(k).collect(),
            Group::Ranks(r) => r.to_vec(),
        }
    }

    /// Which links a collective over `members` of group `g` crosses.
    pub fn route(&self, g: &Group, members: &[usize]) -> crate::comm::link::Route {
        use crate::comm::link::Route;
        let p = members.len();
        let first = members.first().map_or(0, |&m| self.node_of(m));
        if members.iter().all(|&m| self.node_of(m) == first) {
            return Route::Node(p);
        }
        let mut nodes: Vec<usize> = members.iter().map(|&m| self.node_of(m)).collect();
        nodes.dedup();
        if nodes.len() == p {
            // One member per node. The replication groups of all local
            // indices run at once and share each node's link.
            let share = if matches!(g, Group::Replicas) { self.per_node.max(1) } else { 1 };
            return Route::Across { p, share };
        }
        Route::World(p)
    }

    /// Checks the shape; errors name the problem.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.workers >= 1, "a job needs at least one worker");
        anyhow::ensure!(
            self.per_node >= 1 && self.workers.is_multiple_of(self.per_node),
            "{} workers do not divide into nodes of {}: every node must hold the same number of workers",
            self.workers,
            self.per_node
        );
        Ok(())
    }
}
