//! Time per optimizer step (or outer round) of every method, its traffic
//! per tier and its overlap rule, in closed form over the simulator's cost
//! model (`SimSpec`): what `--runtime sim` gives on a homogeneous cluster in
//! steady state (tests_sim.rs checks it).
//!
//! Notation: `mb` one micro-batch, `K` micro-batches per step, `opt(p)` an
//! optimizer step on p parameters, `ew(e)` elementwise work, `AR`, `RS`,
//! `AG` a collective's link time on its group's route (comm/link.rs),
//! `n` parameters, `N` workers, `m = padded(n, N) / N` a shard.
//! The communication stream is one FIFO lane per worker: tasks never
//! overlap each other, only computation.

use super::Costing;
use crate::comm::link::{Op, Route};
use crate::comm::{padded_len, WireDtype};
use crate::runtime::{Group, Work};
use crate::strategy::{InnerState, Method};
use anyhow::Result;
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
    /// sim_comm.rs costs it: `round(elems * comm_scale)` elements on the
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

    /// Seconds of one micro-batch.
    pub(super) fn mb(&self) -> f64 {
        self.work(Work::MicroBatch)
    }
}

/// The sharded round of sharded.rs: [count all-reduce] + RS + [norm
/// all-reduce] + opt(m) + AG, all on the communication lane.
fn sharded_round(net: &Net, c: &Costing, counts: bool) -> Xfer {
    let (n, world) = (c.params, c.workers());
    let padded = padded_len(n, world);
    let scalar = net.dense(Op::AllReduce, 1, WireDtype::F32, Group::World);
    let mut x = net.dense(Op::ReduceScatter, padded, c.wire, Group::World)
        + net.dense(Op::AllGather, padded, c.wire, Group::World);
    if counts {
        x = x + scalar;
    }
    if c.grad_clip {
        x = x + scalar;
    }
    x.s += net.work(Work::Optimizer { params: padded / world });
    x
}

/// A stage of dpu / acco-wp / acco: micro-batches are computed while the
/// round `r` runs, checked after each one (at least one); or exactly `k`,
/// then a wait. Returns (seconds, micro-batches).
fn accumulate_while(net: &Net, c: &Costing, r: f64) -> (f64, f64) {
    let mb = net.mb();
    match c.fixed_micro_batches {
        Some(k) => ((k as f64 * mb).max(r), k as f64),
        None => {
            // The round is done at a check when it ended at or before it (the
            // communication lane goes first at equal times).
            let k = if mb > 0.0 { (r / mb * (1.0 - 1e-12)).ceil().max(1.0) } else { 1.0 };
            (k * mb, k)
        }
    }
}

/// Timing of one step or round of `method` under `c` (module docs).
pub fn timing(method: &Method, c: &Costing) -> Result<Timing> {
    let net = Net { c };
    let (n, world, k) = (c.params, c.workers(), c.grad_accum.max(1) as f64);
    let mb = net.mb();
    let opt_n = net.work(Work::Optimizer { params: n });
    // tau inner steps of a local-update method: K micro-batches and an optimizer step each.
    let inner = |tau: u64| tau as f64 * (k * mb + opt_n);
    let t = |round_s: f64, steps: u64, mbs: f64, compute_s: f64, x: Xfer, rule: &str| Timing {
        round_s,
        steps,
        micro_batches: mbs,
        compute_s,
        comm_s: x.s,
        exposed_s: (round_s - compute_s).max(0.0),
        bytes_intra: x.intra,
        bytes_inter: x.inter,
        exact: true,
        rule: rule.to_string(),
    };
    let ar_n = net.dense(Op::AllReduce, n, c.wire, Group::World);
    Ok(match method {
        // Blocking all-reduce after the micro-batches, then the step: nothing hidden.
        Method::Ddp => {
            let compute = k * mb + opt_n;
            t(
                compute + ar_n.s,
                1,
                k,
                compute,
                ar_n,
                "none: the all-reduce waits for the last micro-batch and the step waits for it",
            )
        }
        // The sharded round (RS, shard step, AG) blocks the next micro-batch.
        Method::Zero1 => {
            let r = sharded_round(&net, c, false);
            t(k * mb + r.s, 1, k, k * mb, r, "none: the next forward needs the gathered parameters")
        }
        // One round per step, micro-batches computed while it runs (one step stale).
        Method::Dpu(_) | Method::AccoWp => {
            let r = sharded_round(&net, c, true);
            let (s, mbs) = accumulate_while(&net, c, r.s);
            let rule = "all: micro-batches are computed while the round runs (>= 1, so at least one micro-batch per round); the first round (dpu: after its warmup) adds one micro-batch";
            t(s, 1, mbs, mbs * mb, r, rule)
        }
        // Two stages per step, each hiding one sharded round.
        Method::Acco => {
            let r = sharded_round(&net, c, true);
            let (s, mbs) = accumulate_while(&net, c, r.s);
            let rule = "all: each of the two stages computes micro-batches while its round runs; one extra micro-batch at the start";
            t(2.0 * s, 1, 2.0 * mbs, 2.0 * mbs * mb, r.times(2.0), rule)
        }
        // tau local steps, then a blocking average (plus the moments' with inner_state = average).
        Method::LocalSgd(s) => {
            let mut x = ar_n;
            let mut extra = 0.0;
            if s.inner_state == InnerState::Average {
                let state = c.state_per_param()? * n;
                x = x + net.dense(Op::AllReduce, state, c.wire, Group::World);
                extra = net.work(Work::Elementwise { name: "load averaged inner state", elems: state });
            }
            let compute = inner(s.tau) + extra;
            t(
                compute + x.s,
                s.tau,
                s.tau as f64 * k,
                compute,
                x,
                "none: the average blocks, but only once every tau steps",
            )
        }
        Method::SlowMo(s) => {
            let compute = inner(s.tau) + net.work(Work::Elementwise { name: "slowmo outer step", elems: 2 * n });
            t(
                compute + ar_n.s,
                s.tau,
                s.tau as f64 * k,
                compute,
                ar_n,
                "none: the exact average blocks, once every tau steps",
            )
        }
        // The average of round t-1 runs during round t's inner steps; then the pull.
        Method::OverlapLocalSgd(s) => {
            let pull = net.work(Work::Elementwise { name: "pull to anchor", elems: n });
            let compute = inner(s.tau) + pull;
            let rule = "up to all: the average runs behind the next tau steps; exposed only if it is longer than them";
            t(inner(s.tau).max(ar_n.s) + pull, s.tau, s.tau as f64 * k, compute, ar_n, rule)
        }
        Method::Co2(s) if !s.shard_outer => {
            let outer = net.work(Work::Elementwise { name: "co2 outer step", elems: 5 * n });
            let compute = outer + inner(s.tau);
            let rule = "up to all: the asynchronous all-reduce (AAR) runs behind the outer step and the next tau steps";
            t(compute.max(ar_n.s), s.tau, s.tau as f64 * k, compute, ar_n, rule)
        }
        Method::Co2(s) => {
            let padded = padded_len(n, world);
            let outer = net.work(Work::Elementwise { name: "co2 outer step", elems: 5 * (padded / world) });
            let ag = net.dense(Op::AllGather, padded, c.wire, Group::World);
            let rs = net.dense(Op::ReduceScatter, padded, c.wire, Group::World);
            let compute = outer + inner(s.tau);
            let rule =
                "partly: the reduce-scatter runs behind the next tau steps, the all-gather of x_{t+1,0} is exposed";
            t(outer + ag.s + inner(s.tau).max(rs.s), s.tau, s.tau as f64 * k, compute, ag + rs, rule)
        }
        Method::Demo(s) => super::demo::timing(&net, c, s, false)?,
        Method::FlexDemo(s) => super::demo::timing(&net, c, s, true)?,
        // H inner steps, the pseudo-gradient, its blocking all-reduce, the outer step.
        Method::Diloco(s) => {
            let local = net.work(Work::Elementwise { name: "diloco pseudo-gradient", elems: n })
                + net.work(Work::Elementwise { name: "diloco outer step", elems: 3 * n });
            let compute = inner(s.h) + local;
            t(
                compute + ar_n.s,
                s.h,
                s.h as f64 * k,
                compute,
                ar_n,
                "none: the pseudo-gradient's average blocks, once every H steps",
            )
        }
        // Not a round: plan_method takes async_diloco.rs's bound instead.
        Method::AsyncDiloco(_) => anyhow::bail!("async-diloco is planned as a bound (plan::async_diloco), not a round"),
    })
}
