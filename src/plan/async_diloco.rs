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
//!                                          (on shared cores: with L_w b)
//! tokens/s <= min(sum_w H_w K tokens / T_w, max_w H_w K tokens / max(serve, upd))   (the row: this best case,
//!                                          T_w staggered as above on shared cores: `Cycles::steady`)
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

/// Seconds of one message of `n` values (and one scalar, the step count) to or from the server.
fn message_s(c: &Costing, n: usize) -> f64 {
    let bytes = MESSAGE_HEADER + 8 + (n as f64 * c.spec.comm_scale).round() as usize * c.wire.bytes_per_elem();
    c.spec.link.as_ref().map_or(0.0, |l| l.message_s(bytes, false))
}

/// Bytes of one pseudo-gradient message of `n` values before the simulator's
/// scaling: its scalar and the values in the wire dtype, or the codec's packed bytes.
fn update_body(c: &Costing, wire: Option<OuterWire>, n: usize) -> f64 {
    match wire {
        None => (n as f64 * c.spec.comm_scale).round() * c.wire.bytes_per_elem() as f64,
        Some(w) => (w.wire_bytes(n) as f64 * c.spec.comm_scale).round(),
    }
}

/// Seconds of one pseudo-gradient message to the server (module docs: upd).
fn update_s(c: &Costing, wire: Option<OuterWire>, n: usize) -> f64 {
    let bytes = MESSAGE_HEADER + 8 + update_body(c, wire, n) as usize;
    c.spec.link.as_ref().map_or(0.0, |l| l.message_s(bytes, false))
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
    let msg = message_s(c, n);
    let upd = if s.outer_wire.is_some() { update_s(c, s.outer_wire, n) } else { msg };
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
    let others = (world as f64 - 1.0) * (upd + msg);
    let cycle = |local: f64| msg + local + upd + dec + out;
    let bounds = speeds
        .iter()
        .zip(&local)
        .map(|(sp, local)| {
            // On shared cores the local work may be slowed all through.
            (cycle(local / sp), cycle(local / sp * b.beside) + grace + (world as f64 - 1.0) * (upd + serve))
        })
        .collect();
    // On cores every rank shares (an emulated cluster), the other workers'
    // exchanges run beside this one's local work in the steady state
    // (staggered by one exchange each) and slow it.
    let steady_local: Vec<f64> =
        speeds.iter().zip(&local).map(|(sp, local)| b.beside_others(local / sp, others)).collect();
    let steady = steady_local.iter().map(|&l| cycle(l)).collect();
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
mod tests {
    use super::*;
    use crate::comm::link::{LinkModel, Tier};
    use crate::runtime::sim::SimSpec;
    use crate::runtime::Topology;

    fn costing(workers: usize, precision: Precision) -> Costing {
        let mut spec = SimSpec::flat(workers, 0.5, Some(LinkModel::flat("1gbit,1ms".parse::<Tier>().unwrap())));
        spec.topology = Topology { workers, per_node: 1, server: false };
        let f32 = crate::comm::WireDtype::F32;
        Costing { tokens_per_micro_batch: 1000, ..Costing::for_test(1_000_000, spec, f32, precision) }
    }

    #[test]
    fn cycle_bounds_and_memory_by_hand() {
        let s = AsyncDilocoSettings { h: 10, ..AsyncDilocoSettings::default() };
        let c = costing(4, Precision::F32);
        let p = plan(&s, &c).unwrap();
        // One message: (16 + 8 + 4e6) bytes at 1 Gbit/s (1.25e8 B/s) + 1 ms.
        let msg = 1e-3 + (16.0 + 8.0 + 4e6) / 1.25e8;
        // No costed local work besides micro-batches here: T = 2 msg + 10 x 0.5.
        let t = 2.0 * msg + 5.0;
        assert!((p.time.round_s - t).abs() < 1e-12, "{} vs {t}", p.time.round_s);
        // Best: 4 workers x 10 x 1000 tokens per cycle; the worst cycle adds 3 other updates taken in
        // by the server's link first and 3 serves (one message each).
        assert!((p.tokens_per_s - 4.0 * 1e4 / t).abs() < 1e-6);
        assert!(p.time.rule.contains(&format!("{:.4} s when every other", t + 6.0 * msg)), "{}", p.time.rule);
        assert!(!p.time.exact);
        // Memory (f32, AdamW s = 2): worker 4n + 4n + 8n + theta_old 4n; server theta + Nesterov momentum.
        let (w, sv) = memory(&s.diloco(), &c).unwrap();
        assert_eq!((w.params, w.grads, w.optimizer, w.outer), (4_000_000, 4_000_000, 8_000_000, 4_000_000));
        assert_eq!((sv.params, sv.outer), (4_000_000, 4_000_000));
        // Mixed: bf16 values, K = 12 bytes of optimizer state per parameter.
        let (w, _) = memory(&s.diloco(), &costing(4, Precision::Mixed)).unwrap();
        assert_eq!((w.params, w.optimizer), (2_000_000, 12_000_000));
    }

    #[test]
    fn a_compressed_update_sends_the_codecs_bytes_and_holds_its_buffers() {
        // int8 on 1e6 values: 245 chunks of 4096 (the last 576), 4 bytes of scale each.
        let s = AsyncDilocoSettings { h: 10, outer_wire: Some(OuterWire::Int8), ..AsyncDilocoSettings::default() };
        let c = costing(4, Precision::F32);
        let packed = 1_000_000 + 4 * 245;
        assert_eq!(OuterWire::Int8.wire_bytes(1_000_000), packed);
        let p = plan(&s, &c).unwrap();
        assert_eq!(p.time.bytes_inter, (16 + 8 + packed) as f64);
        // The cycle: the model fetch dense, the update packed (no costed elementwise work here).
        let msg = 1e-3 + (16.0 + 8.0 + 4e6) / 1.25e8;
        let upd = 1e-3 + (16.0 + 8.0 + packed as f64) / 1.25e8;
        assert!((p.time.round_s - (msg + 5.0 + upd)).abs() < 1e-12, "{}", p.time.round_s);
        assert!(p.label.contains("outer_wire int8 + error feedback"), "{}", p.label);
        // Worker: theta_old, the staged message and the residual; without feedback no residual.
        let (w, sv) = memory(&s.diloco(), &c).unwrap();
        assert_eq!((w.outer, sv.outer), (3 * 4_000_000, 4_000_000));
        let plain = AsyncDilocoSettings { error_feedback: false, ..s };
        assert_eq!(memory(&plain.diloco(), &c).unwrap().0.outer, 2 * 4_000_000);
    }

    #[test]
    fn the_server_bounds_the_cycle_when_updates_are_cheap_to_compute() {
        // 64 workers, H = 1: the server's 64 model sends take longer than a worker's own cycle.
        let s = AsyncDilocoSettings { h: 1, ..AsyncDilocoSettings::default() };
        let p = plan(&s, &costing(64, Precision::F32)).unwrap();
        let msg = 1e-3 + (16.0 + 8.0 + 4e6) / 1.25e8;
        assert!((p.time.round_s - 64.0 * msg).abs() < 1e-9, "{}", p.time.round_s);
    }

    #[test]
    fn on_shared_cores_the_other_workers_exchanges_slow_the_local_work_by_hand() {
        // 2 workers, H = 10 of 0.5 s: 5 s of local work; the other worker's
        // upload and model, 2 msg = 0.066 s, run beside it at 1.5x: 2 msg
        // seconds of wall do 2 msg / 1.5 of work, so it ends 2 msg (1 - 1/1.5) later.
        let s = AsyncDilocoSettings { h: 10, ..AsyncDilocoSettings::default() };
        let mut c = costing(2, Precision::F32);
        let msg = 1e-3 + (16.0 + 8.0 + 4e6) / 1.25e8;
        let alone = cycles(&s, &c);
        assert!((alone.steady[0] - (2.0 * msg + 5.0)).abs() < 1e-12);
        assert_eq!(alone.steady[0], alone.bounds[0].0);
        c.spec.interference.beside = 1.5;
        let shared = cycles(&s, &c);
        let want = 2.0 * msg + 5.0 + 2.0 * msg * (1.0 - 1.0 / 1.5);
        assert!((shared.steady[0] - want).abs() < 1e-12, "{} vs {want}", shared.steady[0]);
        // The row follows the staggered cycle; the bounds stay bounds: the
        // lower unslowed, the upper with all the local work at 1.5x.
        let p = plan(&s, &c).unwrap();
        assert!((p.time.round_s - want).abs() < 1e-12, "{}", p.time.round_s);
        // Its compute is the slowed local work; only the two messages are exposed.
        assert!((p.time.exposed_s - 2.0 * msg).abs() < 1e-12, "{}", p.time.exposed_s);
        assert_eq!(shared.bounds[0].0, alone.bounds[0].0);
        let hi = 2.0 * msg + 5.0 * 1.5 + 2.0 * msg;
        assert!((shared.bounds[0].1 - hi).abs() < 1e-12, "{:?}", shared.bounds[0]);
        // Local work shorter than the exchanges beside it: all of it at 1.5x.
        let short = AsyncDilocoSettings { h: 1, ..s.clone() };
        c.spec.micro_batch_s = 0.01;
        let local = 0.01;
        assert!(local * 1.5 <= 2.0 * msg);
        let got = cycles(&short, &c).steady[0];
        assert!((got - (2.0 * msg + local * 1.5)).abs() < 1e-12, "{got}");
    }

    #[test]
    fn dylu_and_the_grace_period_by_hand() {
        // Speeds 1 and 0.5, H = 10: DyLU gives 10 and 5 steps of 0.5 s, 5 s of
        // work for both (the point of eq. 6); without it the slow one works 10 s.
        let mut c = costing(2, Precision::F32);
        c.spec.speeds = vec![1.0, 0.5];
        let msg = 1e-3 + (16.0 + 8.0 + 4e6) / 1.25e8;
        let near = |got: &[f64], want: &[f64]| {
            assert!(
                got.len() == want.len() && got.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12),
                "{got:?} vs {want:?}"
            )
        };
        let plain = AsyncDilocoSettings { h: 10, ..AsyncDilocoSettings::default() };
        let lower = |s: &AsyncDilocoSettings| cycles(s, &c).bounds.iter().map(|b| b.0).collect::<Vec<_>>();
        near(&lower(&plain), &[2.0 * msg + 5.0, 2.0 * msg + 10.0]);
        let dylu = AsyncDilocoSettings { dylu: true, ..plain.clone() };
        assert_eq!(cycles(&dylu, &c).steps, [10, 5]);
        near(&lower(&dylu), &[2.0 * msg + 5.0; 2]);
        // grace "auto": 0 without DyLU; with it one step of the slowest worker, 0.5 s / 0.5 = 1 s.
        assert_eq!((cycles(&plain, &c).grace, cycles(&dylu, &c).grace), (0.0, 1.0));
        // Tokens per cycle follow each worker's steps: (10 + 5) x 1000 over one cycle.
        let p = plan(&dylu, &c).unwrap();
        assert!((p.tokens_per_s - 15_000.0 / (2.0 * msg + 5.0)).abs() < 1e-6, "{}", p.tokens_per_s);
        assert!(p.label.contains("dylu"), "{}", p.label);
        // A grace period of 2 s: the upper end waits it out (then 1 other update, taken in and
        // served first: 2 messages), the lower end is unchanged.
        let graced = AsyncDilocoSettings { grace: Some(2.0), ..dylu };
        let (lo, hi) = cycles(&graced, &c).bounds[1];
        near(&[lo, hi], &[2.0 * msg + 5.0, 2.0 * msg + 5.0 + 2.0 + 2.0 * msg]);
        assert!(plan(&graced, &c).unwrap().time.rule.contains("grace period"));
    }
}
