//! The pieces of the closed-form time model that every method's rule
//! shares (time.rs, demo.rs, async_diloco.rs): the row it gives
//! ([`Timing`]), one collective's link time and bytes per tier (`Xfer`), and
//! the costs of collectives and local work under a costing (`Net`).

use super::Costing;
use crate::comm::link::{Op, Route};
use crate::comm::WireDtype;
use crate::runtime::{Group, Work};
use serde::Serialize;

/// Time and traffic of one step or round of a method, per worker.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Timing {
    /// Seconds per optimizer step, or per outer round of `steps` inner steps.
    pub round_s: f64,
    /// Optimizer steps per round (tau for local-update methods, else 1).
    pub steps: u64,
    /// Micro-batches whose gradients a worker applies per round.
    pub micro_batches: f64,
    /// Seconds of computation per round.
    pub compute_s: f64,
    /// Seconds the communication lane is busy per round.
    pub comm_s: f64,
    /// Seconds of the round not spent computing (communication not hidden).
    pub exposed_s: f64,
    /// Bytes a worker sends inside its node per round.
    pub bytes_intra: f64,
    /// Bytes a worker sends to other nodes per round.
    pub bytes_inter: f64,
    /// `true`: the simulator's time exactly (same formula); `false`: an estimate, see `rule`.
    pub exact: bool,
    /// The method's overlap rule, and for estimates the bound used.
    pub rule: String,
}

/// One collective's link time and the bytes a worker sends on each tier.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Xfer {
    /// Seconds on the communication lane.
    pub(super) s: f64,
    /// Bytes sent inside the node.
    pub(super) intra: f64,
    /// Bytes sent to other nodes.
    pub(super) inter: f64,
}

impl std::ops::Add for Xfer {
    type Output = Xfer;
    fn add(self, o: Xfer) -> Xfer {
        Xfer { s: self.s + o.s, intra: self.intra + o.intra, inter: self.inter + o.inter }
    }
}

impl Xfer {
    /// The same scaled by `k` (a collective run `k` times).
    pub(super) fn times(self, k: f64) -> Xfer {
        Xfer { s: self.s * k, intra: self.intra * k, inter: self.inter * k }
    }
}

/// Costs of collectives and local work under `c`.
pub(super) struct Net<'a> {
    /// The costing.
    pub(super) c: &'a Costing,
}

impl Net<'_> {
    /// A collective `op` over `elems` elements of `bpe` bytes on `group`, as
    /// sim/comm.rs costs it: `round(elems * comm_scale)` elements on the
    /// group's route. Bytes per worker: the ring volumes, split by tier for
    /// a hierarchical collective (intra: the node's reduce-scatter and
    /// all-gather; inter: its 1/k share of the buffer across nodes).
    pub(super) fn coll(&self, op: Op, elems: usize, bpe: usize, group: Group) -> Xfer {
        let topo = self.c.spec.topology;
        let members = topo.members(&group, 0);
        let route = topo.route(&group, &members);
        let scaled = (elems as f64 * self.c.spec.comm_scale).round() as usize;
        let s = self.c.spec.link.as_ref().map_or(0.0, |l| l.collective_s(op, scaled, bpe, route));
        let b = (scaled * bpe) as f64;
        // Share of the buffer a worker sends in a ring of p.
        let ring = |p: usize| {
            let f = (p.max(1) - 1) as f64 / p.max(1) as f64;
            match op {
                Op::AllReduce => 2.0 * f,
                Op::ReduceScatter | Op::AllGather => f,
                Op::Broadcast => f64::from(u8::from(p > 1)),
            }
        };
        match route {
            Route::Node(p) => Xfer { s, intra: ring(p) * b, inter: 0.0 },
            Route::Across { p, .. } => Xfer { s, intra: 0.0, inter: ring(p) * b },
            Route::World(p) => {
                let k = topo.per_node.max(1);
                Xfer { s, intra: ring(k) * b, inter: ring(p.div_ceil(k)) * b / k as f64 }
            }
        }
    }

    /// A collective on `elems` elements travelling as `wire`.
    pub(super) fn dense(&self, op: Op, elems: usize, wire: WireDtype, group: Group) -> Xfer {
        self.coll(op, elems, wire.bytes_per_elem(), group)
    }

    /// Seconds of local work `w` at nominal speed.
    pub(super) fn work(&self, w: Work) -> f64 {
        self.c.spec.cost(w, 1.0)
    }

    /// Seconds of the gradient clip over `params` when the costing clips
    /// (strategy/worker.rs `clip_grads`), else 0.
    pub(super) fn clip(&self, params: usize) -> f64 {
        if self.c.grad_clip {
            self.work(Work::grad_clip(params))
        } else {
            0.0
        }
    }

    /// Seconds of an optimizer step over `params`, with the gradient clip before it.
    pub(super) fn update(&self, params: usize) -> f64 {
        self.work(Work::Optimizer { params }) + self.clip(params)
    }

    /// Seconds of one micro-batch.
    pub(super) fn mb(&self) -> f64 {
        self.work(Work::MicroBatch)
    }

    /// Seconds the latest of the cluster's workers reaches a blocking
    /// collective after the mean, each having computed `micro_batches`
    /// since the last one (0 without a micro-batch spread; sim/straggle.rs).
    /// Every worker waits for the world: the groups of a step chain them.
    pub(super) fn straggle(&self, micro_batches: f64) -> f64 {
        let s = &self.c.spec;
        crate::runtime::sim::straggle::straggle_s(
            s.topology.workers,
            micro_batches,
            self.mb(),
            s.micro_batch_cv,
            s.micro_batch_correlation,
        )
    }
}
