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

use super::net::{Net, Timing, Xfer};
use super::Costing;
use crate::comm::link::Op;
use crate::comm::{padded_len, WireDtype};
use crate::runtime::sim::Interference;
use crate::runtime::{Group, Work};
use crate::strategy::{InnerState, Method};
use anyhow::Result;

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
    x.s += shard_step(net, c);
    x
}

/// The optimizer step on one shard, on the communication lane of the sharded round.
fn shard_step(net: &Net, c: &Costing) -> f64 {
    net.update(padded_len(c.params, c.workers()) / c.workers())
}

/// A stage of dpu / acco-wp / acco: micro-batches are computed while the
/// round runs, checked after each one (at least one); or exactly `k`,
/// then a wait. `r` is the sharded round: its collectives are slowed by
/// the interference (their members compute), not its optimizer step on the
/// communication lane. Returns (seconds, micro-batches, seconds of one).
fn accumulate_while(net: &Net, c: &Costing, r: &Xfer) -> (f64, f64, f64) {
    let (f, work) = (c.spec.interference, shard_step(net, c));
    let (mb, r) = (net.mb() * f.compute, (r.s - work) * f.comm + work);
    let (s, k) = match c.fixed_micro_batches {
        Some(k) => ((k as f64 * mb).max(r), k as f64),
        None => {
            // The round is done at a check when it ended at or before it (the
            // communication lane goes first at equal times).
            let k = if mb > 0.0 { (r / mb * (1.0 - 1e-12)).ceil().max(1.0) } else { 1.0 };
            (k * mb, k)
        }
    };
    (s, k, mb)
}

/// Timing of one step or round of `method` under `c` (module docs). With a
/// micro-batch spread (`micro_batch_cv`), the blocking rules add the
/// expected wait for the latest member (sim/straggle.rs) and every row is
/// an expectation of the simulator's drawn times, so none is exact.
pub fn timing(method: &Method, c: &Costing) -> Result<Timing> {
    let mut t = rule_timing(method, c)?;
    if c.spec.micro_batch_cv > 0.0 {
        t.exact = false;
        t.rule.push_str("; micro-batch times vary (micro_batch_cv): a blocking collective waits the expected latest arrival, an overlapped one is costed without it");
    }
    Ok(t)
}

fn rule_timing(method: &Method, c: &Costing) -> Result<Timing> {
    let net = Net { c };
    let (n, world, k) = (c.params, c.workers(), c.grad_accum.max(1) as f64);
    let mb = net.mb();
    // Overlapped computation and communication slow each other (sim/spec.rs).
    let ov = c.spec.interference;
    let opt_n = net.update(n);
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
    // With interference, a transfer behind inner steps slows, whole, each
    // inner step that starts inside it (sim/spec.rs); the closed form
    // assumes the steps line up with the transfer's start as in steady
    // state, so it is called approximate (tests_sim finds it equal there).
    let approx = |mut t: Timing| {
        t.exact = ov == Interference::NONE;
        t
    };
    let ar_n = net.dense(Op::AllReduce, n, c.wire, Group::World);
    // The latest worker's arrival after the mean at a blocking collective,
    // `mbs` micro-batches after the last one (sim/straggle.rs).
    let wait = |mbs: f64| net.straggle(mbs);
    Ok(match method {
        // Blocking all-reduce after the micro-batches, then the step: nothing hidden.
        Method::Ddp => {
            let compute = k * mb + opt_n;
            t(
                compute + wait(k) + ar_n.s,
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
            t(k * mb + wait(k) + r.s, 1, k, k * mb, r, "none: the next forward needs the gathered parameters")
        }
        // One round per step, micro-batches computed while it runs (one step stale).
        Method::Dpu(_) | Method::AccoWp => {
            let r = sharded_round(&net, c, true);
            let (s, mbs, one) = accumulate_while(&net, c, &r);
            let rule = "all: micro-batches are computed while the round runs (>= 1, so at least one micro-batch per round); the first round (dpu: after its warmup) adds one micro-batch";
            t(s, 1, mbs, mbs * one, r, rule)
        }
        // Two stages per step, each hiding one sharded round.
        Method::Acco => {
            let r = sharded_round(&net, c, true);
            let (s, mbs, one) = accumulate_while(&net, c, &r);
            let rule = "all: each of the two stages computes micro-batches while its round runs; one extra micro-batch at the start";
            t(2.0 * s, 1, 2.0 * mbs, 2.0 * mbs * one, r.times(2.0), rule)
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
                compute + wait(s.tau as f64 * k) + x.s,
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
                compute + wait(s.tau as f64 * k) + ar_n.s,
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
            approx(t(
                ov.overlapped(inner(s.tau), ar_n.s, inner(1)) + pull,
                s.tau,
                s.tau as f64 * k,
                compute,
                ar_n,
                rule,
            ))
        }
        // The released code (mode = "reference"): like SlowMo, the exact average blocks.
        Method::Co2(s) if s.is_reference() => {
            let compute = inner(s.tau) + net.work(Work::Elementwise { name: "co2 reference outer step", elems: 2 * n });
            let rule = "none: the released code's average (reduce + broadcast) blocks, once every tau steps";
            t(compute + wait(s.tau as f64 * k) + ar_n.s, s.tau, s.tau as f64 * k, compute, ar_n, rule)
        }
        Method::Co2(s) if !s.shard_outer => {
            let outer = net.work(Work::Elementwise { name: "co2 outer step", elems: 5 * n });
            let compute = outer + inner(s.tau);
            let rule = "up to all: the asynchronous all-reduce (AAR) runs behind the outer step and the next tau steps";
            approx(t(ov.overlapped(compute, ar_n.s, inner(1)), s.tau, s.tau as f64 * k, compute, ar_n, rule))
        }
        Method::Co2(s) => {
            let padded = padded_len(n, world);
            let outer = net.work(Work::Elementwise { name: "co2 outer step", elems: 5 * (padded / world) });
            let ag = net.dense(Op::AllGather, padded, c.wire, Group::World);
            let rs = net.dense(Op::ReduceScatter, padded, c.wire, Group::World);
            let compute = outer + inner(s.tau);
            let rule =
                "partly: the reduce-scatter runs behind the next tau steps, the all-gather of x_{t+1,0} is exposed";
            approx(t(
                outer + ag.s + ov.overlapped(inner(s.tau), rs.s, inner(1)),
                s.tau,
                s.tau as f64 * k,
                compute,
                ag + rs,
                rule,
            ))
        }
        Method::Demo(s) => super::demo::timing(&net, c, s, false)?,
        Method::FlexDemo(s) => super::demo::timing(&net, c, s, true)?,
        // H inner steps, the pseudo-gradient, its blocking all-reduce, the outer step.
        // With a compressed outer_wire: encode, all-gather the messages, decode them all.
        Method::Diloco(s) => {
            let mut local = net.work(Work::Elementwise { name: "diloco pseudo-gradient", elems: n })
                + net.work(Work::Elementwise { name: "diloco outer step", elems: 3 * n });
            let comm = match s.outer_wire {
                None => ar_n,
                Some(wire) => {
                    local += net.work(Work::Elementwise { name: "diloco encode", elems: 2 * n })
                        + net.work(Work::Elementwise { name: "diloco decode", elems: 2 * world * n });
                    net.coll(Op::AllGather, world * wire.wire_bytes(n), 1, Group::World)
                }
            };
            let compute = inner(s.h) + local;
            t(
                compute + wait(s.h as f64 * k) + comm.s,
                s.h,
                s.h as f64 * k,
                compute,
                comm,
                "none: the pseudo-gradient's average blocks, once every H steps",
            )
        }
        Method::StreamingDiloco(s) => super::streaming::timing(&net, c, s)?,
        // Not a round: plan_method takes async_diloco.rs's bound instead.
        Method::AsyncDiloco(_) => anyhow::bail!("async-diloco is planned as a bound (plan::async_diloco), not a round"),
    })
}
