//! Asynchronous DiLoCo with a parameter server (strategy/diloco/async_diloco.rs):
//! a bound, not a prediction. Updates arrive when each worker finishes
//! its H inner steps, and the server applies them one at a time, so the
//! time a worker waits for its next model depends on who else arrived
//! first: not a closed form. The plan gives the two ends.
//!
//! One cycle of worker w (speed factor `s_w`, `msg` the alpha-beta time of
//! one message of n values to or from the server, which sits on its own
//! node: the inter-node link; `out` the server's outer step on n values):
//!
//! ```text
//! H_w     = H, or with DyLU floor(s_w / max s x H) (eq. 6, the engine's dylu_steps)
//! T_w     = msg (model fetch) + L_w + upd (pseudo-gradient send) + dec + out
//! L_w     = [H_w (K mb + opt(n)) + pg(n) + enc] / s_w, its local work; on cores every rank shares
//!           (`shared_cores_compute_factor` b > 1) the others' (N - 1)(upd + msg) of exchanges
//!           run beside it in a staggered steady state: L_w b if they cover it, else
//!           L_w + (N - 1)(upd + msg)(1 - 1/b)
//! serve   = dec + out + msg                the server's work per update (its sends are serial)
//! upd     = msg, or with a compressed outer_wire one message of wire_bytes(n) packed bytes;
//! enc, dec = ew(2n) each with a compressed outer_wire (the worker encodes, the server decodes), else 0
//! lower:  cycle_w >= T_w                   nobody queues (on shared cores: with L_w unslowed)
//! server: sum_w 1 / cycle_w <= 1 / max(serve, upd)   it applies and answers one update at a time,
//!                                          and its link takes in one update at a time
//! upper:  cycle_w <= T_w + grace + (N - 1) (upd + serve)   its group waits out the grace period,
//!                                          its update lands after every other, which is served first
//!                                          (on shared cores: with L_w b; every message at r times:
//!                                          r_m, r_u the link's duplex factors at the model's and the
//!                                          update's size, a message beside data the other way)
//! tokens/s <= min(sum_w H_w K tokens / T_w, max_w H_w K tokens / max(serve, upd))   (the row: this best case,
//!                                          T_w staggered as above on shared cores: `Cycles::steady`)
//! steady: msg' = msg (1 + (r_m - 1) min(1, (N - 1) upd' / T_w)), upd' likewise with msg'   in the
//!                                          staggered cycle each message meets the others' going the
//!                                          other way for their share of it (a fixed point; runtime/sim/duplex.rs)
//! ```
//!
//! The row's time per round is the workers' cycle at that best throughput,
//! weighted by their tokens (sum_w H_w K tokens / tokens/s; with equal
//! speeds N H K tokens / tokens/s = max(T, N serve)); its compute is the
//! same mean of each worker's local time, and the rest is exposed.
//! The server's limit binds the sum, not each worker: the worker it
//! answers first can cycle faster than N serve while others wait longer.

//! Memory: a worker holds its replica, gradients, the inner optimizer's
//! state and the model its round started from (`theta_old`, counted as
//! outer state as sync DiLoCo counts its theta; the pseudo-gradient reuses
//! the replica's buffer), with a compressed outer_wire its staged message
//! and error-feedback residual (comm::codec::sender_copies less the decode
//! buffer, which is the server's message buffer); the server holds theta and the outer optimizer's
//! state (Nesterov's momentum, DN's buffer), shown in `server`.
//!
//! `tests_sim.rs` runs the method in the simulator and checks that every
//! worker's steady cycle lies between the two ends, and both memories.

use super::rank::gb;
use super::{Costing, MethodPlan, Precision};
use crate::comm::codec::{sender_copies, OuterWire};
use crate::comm::payload::MESSAGE_HEADER;
use crate::runtime::Work;
use crate::strategy::diloco::param_server::dylu_steps;
use crate::strategy::{AsyncDilocoSettings, DilocoSettings, MemoryBytes};
use anyhow::Result;

/// The name the row carries (`--methods async-diloco`).
pub const NAME: &str = "async-diloco";

/// Seconds of a message of `bytes` to or from the server, and how many
/// times that beside the other direction's data (the link's duplex factor).
fn on_link(c: &Costing, bytes: usize) -> (f64, f64) {
    c.spec.link.as_ref().map_or((0.0, 1.0), |l| (l.message_s(bytes, false), l.message_duplex_factor(bytes, false)))
}

/// One message of `n` values (and one scalar, the step count) to or from the server ([`on_link`]).
fn message_s(c: &Costing, n: usize) -> (f64, f64) {
    on_link(c, MESSAGE_HEADER + 8 + (n as f64 * c.spec.comm_scale).round() as usize * c.wire.bytes_per_elem())
}

/// Bytes of one pseudo-gradient message of `n` values before the simulator's
/// scaling: its scalar and the values in the wire dtype, or the codec's packed bytes.
fn update_body(c: &Costing, wire: Option<OuterWire>, n: usize) -> f64 {
    match wire {
        None => (n as f64 * c.spec.comm_scale).round() * c.wire.bytes_per_elem() as f64,
        Some(w) => (w.wire_bytes(n) as f64 * c.spec.comm_scale).round(),
    }
}

/// One pseudo-gradient message to the server (module docs: upd; [`on_link`]).
fn update_s(c: &Costing, wire: Option<OuterWire>, n: usize) -> (f64, f64) {
    on_link(c, MESSAGE_HEADER + 8 + update_body(c, wire, n) as usize)
}

/// A message of `s` seconds alone beside the other direction of its link
/// carrying data for `busy` of every `cycle` seconds, spread evenly: slowed
/// by the duplex factor `r` for that share of it (module docs).
fn beside_reverse(s: f64, r: f64, busy: f64, cycle: f64) -> f64 {
    s * (1.0 + (r - 1.0) * (busy / cycle).min(1.0))
}

/// Worker and server memory (module docs), in `c.precision` (mixed: as memory.rs, values in bf16, K = 4 + 4 s).
pub fn memory(s: &DilocoSettings, c: &Costing) -> Result<(MemoryBytes, MemoryBytes)> {
    let n = c.params as f64;
    let state = c.state_per_param()? as f64;
    let (small, opt_k) = if c.precision == Precision::Mixed { (2.0, 4.0 + 4.0 * state) } else { (4.0, 4.0 * state) };
    let b = |x: f64| x.round() as usize;
    let worker = MemoryBytes {
        params: b(small * n),
        grads: b(small * n),
        comm_buffers: 0,
        optimizer: b(opt_k * n),
        outer: b(small * n * (1 + sender_copies(s.outer_wire, s.error_feedback).saturating_sub(1)) as f64),
    };
    let server = MemoryBytes {
        params: b(small * n),
        outer: b(small * n * s.outer.state_copies() as f64),
        ..MemoryBytes::default()
    };
    Ok((worker, server))
}

/// Each worker's cycle bounds and what they are made of (module docs).
pub struct Cycles {
    /// Per worker: (lower, upper) seconds of one cycle.
    pub bounds: Vec<(f64, f64)>,
    /// Per worker: the cycle the row predicts, staggered and unqueued: the
    /// lower bound, or on shared cores with the others' exchanges beside
    /// its local work (module docs).
    pub steady: Vec<f64>,
    /// Per worker: its local work's wall seconds in that cycle (L_w, slowed
    /// on shared cores): the row's compute.
    pub steady_local: Vec<f64>,
    /// The server's seconds per update (outer step + model send).
    pub serve: f64,
    /// One message of the model (and of an uncompressed pseudo-gradient).
    pub msg: f64,
    /// One pseudo-gradient message to the server (module docs: upd).
    pub upd: f64,
    /// Per worker: inner steps per round, H_w.
    pub steps: Vec<u64>,
    /// Speed factors (>= 1 over the slowest, plan::hetero), or all 1.
    pub speeds: Vec<f64>,
    /// The grace period in seconds (`grace`, or what "auto" gives).
    pub grace: f64,
}

/// The cycle bounds of every worker under `c` (speed factors from the spec, or all 1).
pub fn cycles(s: &AsyncDilocoSettings, c: &Costing) -> Cycles {
    let (n, world) = (c.params, c.workers());
    let k = c.grad_accum.max(1) as f64;
    let cost = |w: Work| c.spec.cost(w, 1.0);
    let (msg, msg_duplex) = message_s(c, n);
    let (upd, upd_duplex) = if s.outer_wire.is_some() { update_s(c, s.outer_wire, n) } else { (msg, msg_duplex) };
    let out = cost(Work::Elementwise { name: "async-diloco outer step", elems: 3 * n });
    let step = k * cost(Work::MicroBatch) + super::net::Net { c }.update(n);
    let pg = cost(Work::Elementwise { name: "diloco pseudo-gradient", elems: n });
    let (enc, dec) = match s.outer_wire {
        None => (0.0, 0.0),
        Some(_) => (
            cost(Work::Elementwise { name: "diloco encode", elems: 2 * n }),
            cost(Work::Elementwise { name: "diloco decode", elems: 2 * n }),
        ),
    };
    let serve = dec + out + msg;
    let speeds: Vec<f64> = if c.spec.speeds.len() == world { c.spec.speeds.clone() } else { vec![1.0; world] };
    // DyLU's steps from the speeds the simulator runs at (in sim the measured speeds are these).
    let steps = if s.dylu { dylu_steps(&speeds, s.h) } else { vec![s.h; world] };
    let local: Vec<f64> = steps.iter().map(|&h| h as f64 * step + pg + enc).collect();
    // `grace = "auto"` with DyLU: one inner step of the slowest worker.
    let grace = s.grace_s(Some(step / speeds.iter().cloned().fold(f64::INFINITY, f64::min)));
    let b = c.spec.interference;
    let others = world as f64 - 1.0;
    // Slowed all through: every message beside the other direction's data.
    let (msg_slow, upd_slow) = (msg * msg_duplex, upd * upd_duplex);
    let bounds = speeds
        .iter()
        .zip(&local)
        .map(|(sp, local)| {
            // On shared cores the local work may be slowed all through.
            let hi = msg_slow + local / sp * b.beside + upd_slow + dec + out;
            (msg + local / sp + upd + dec + out, hi + grace + others * (upd_slow + dec + out + msg_slow))
        })
        .collect();
    // The steady state, staggered: the other workers' exchanges run beside
    // this one's local work (on cores every rank shares, an emulated
    // cluster, they slow it) and beside its own messages the other way
    // round (the server's link then carries both directions: each slowed
    // for the share of the cycle the others' take, a fixed point).
    let mut steady = Vec::with_capacity(world);
    let mut steady_local = Vec::with_capacity(world);
    for (sp, local) in speeds.iter().zip(&local) {
        let (mut m, mut u, mut l) = (msg, upd, local / sp);
        for _ in 0..8 {
            l = b.beside_others(local / sp, others * (u + m));
            let t = m + l + u + dec + out;
            (m, u) = (beside_reverse(msg, msg_duplex, others * u, t), beside_reverse(upd, upd_duplex, others * m, t));
        }
        steady.push(m + l + u + dec + out);
        steady_local.push(l);
    }
    Cycles { bounds, steady, steady_local, serve, msg, upd, steps, speeds, grace }
}

/// The async DiLoCo row under `c` (module docs): its time, tokens/s and
/// scalability at the best case, the worst case in its rule.
pub fn plan(s: &AsyncDilocoSettings, c: &Costing) -> Result<MethodPlan> {
    let n = c.params;
    let k = c.grad_accum.max(1) as f64;
    let Cycles { bounds, steady, steady_local, serve, msg, upd, steps, speeds, grace } = cycles(s, c);
    let tokens: Vec<f64> = steps.iter().map(|&h| h as f64 * k * c.tokens_per_micro_batch as f64).collect();
    let most = tokens.iter().cloned().fold(0.0, f64::max);
    let best = steady.iter().zip(&tokens).map(|(cycle, t)| t / cycle).sum::<f64>().min(most / serve.max(upd));
    let worst: f64 = bounds.iter().zip(&tokens).map(|((_, hi), t)| t / hi).sum();
    let world = bounds.len() as f64;
    let round_s = tokens.iter().sum::<f64>() / best;
    let upper_s = bounds[0].1;
    // The compute part of that mean cycle (the same harmonic mean of each
    // worker's local time, as slowed in it: on shared cores the slowdown is
    // computation, as the runs measure it, not exposed communication).
    let compute_s = world / steady_local.iter().map(|l| 1.0 / l).sum::<f64>();
    let (worker, server) = memory(&s.diloco(), c)?;
    let total = worker.total() as f64;
    // What a worker sends per round: its pseudo-gradient, as values or packed by the codec.
    let bytes = match s.outer_wire {
        None => (MESSAGE_HEADER + 8 + n * c.wire.bytes_per_elem()) as f64,
        Some(w) => (MESSAGE_HEADER + 8 + w.wire_bytes(n)) as f64,
    };
    let rule = format!(
        "bound (asynchronous arrivals are not analytical): a worker's cycle is at least fetch + {} steps + send + outer step, the server takes in one update at a time and answers one per outer step + model send, so the mean cycle is at least {round_s:.4} s; worker 0's is at most {upper_s:.4} s when {}every other update is served first; tokens/s between {worst:.0} and {best:.0}",
        if s.dylu { "its DyLU" } else { "H" },
        if grace > 0.0 { "its group waits out the grace period and " } else { "" }
    );
    let time = super::net::Timing {
        round_s,
        steps: s.h,
        micro_batches: steps.iter().sum::<u64>() as f64 / world * k,
        compute_s,
        comm_s: msg + upd,
        exposed_s: (round_s - compute_s).max(0.0),
        bytes_intra: 0.0,
        bytes_inter: bytes,
        exact: false,
        rule,
    };
    let alone = super::single_worker_tokens_per_s(c) * speeds.iter().sum::<f64>();
    let fits = c.device_memory.map(|m| total <= m);
    let mut p = MethodPlan {
        method: NAME.to_string(),
        label: format!(
            "{NAME} (H {}, outer {:?}{}{}{})",
            s.h,
            s.outer,
            if s.dylu { ", dylu" } else { "" },
            match s.outer_wire {
                Some(w) => format!(", outer_wire {w}{}", if s.error_feedback { " + error feedback" } else { "" }),
                None => String::new(),
            },
            if grace > 0.0 { format!(", grace {grace:.4} s") } else { String::new() }
        ),
        memory: worker,
        memory_total: total,
        fits,
        time,
        tokens_per_s: best,
        scalability: best / alone,
        reason: String::new(),
        server: Some(server),
    };
    p.reason = format!(
        "{}; server holds {}",
        super::rank::reason(&p, c).replace("(estimate)", "(upper bound, asynchronous)"),
        gb(server.total() as f64)
    );
    Ok(p)
}

#[cfg(test)]
#[path = "async_diloco_tests.rs"]
mod tests;
