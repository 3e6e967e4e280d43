//! Asynchronous DiLoCo with a parameter server (strategy/async_diloco.rs):
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
//! T_w     = msg (model fetch) + [H (K mb + opt(n)) + pg(n)] / s_w + msg (pseudo-gradient send) + out
//! serve   = out + msg                      the server's work per update (its sends are serial)
//! lower:  cycle_w >= max(T_w, N serve)    nobody queues; but the server sends N models per cycle
//! upper:  cycle_w <= T_w + (N - 1) serve  every other update is served first
//! tokens/s = sum_w H K tokens / cycle_w   (the row: the lower cycle, i.e. the best tokens/s)
//! ```
//!
//! Memory: a worker holds its replica, gradients, the inner optimizer's
//! state and one n-value buffer (the model it started from, which becomes
//! the pseudo-gradient it sends); the server holds theta and the outer
//! optimizer's state (Nesterov's momentum, DN's buffer), shown in `server`.

use super::rank::gb;
use super::{Costing, MethodPlan, Precision};
use crate::comm::payload::MESSAGE_HEADER;
use crate::runtime::Work;
use crate::strategy::{DilocoSettings, MemoryBytes};
use anyhow::Result;

/// The name the row carries (`--methods async-diloco`).
pub const NAME: &str = "async-diloco";

/// Seconds of one message of `n` values (and one scalar, the step count) to or from the server.
fn message_s(c: &Costing, n: usize) -> f64 {
    let bytes = MESSAGE_HEADER + 8 + (n as f64 * c.spec.comm_scale).round() as usize * c.wire.bytes_per_elem();
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
        comm_buffers: b(small * n),
        optimizer: b(opt_k * n),
        outer: 0,
    };
    let server = MemoryBytes {
        params: b(small * n),
        outer: b(small * n * s.outer.state_copies() as f64),
        ..MemoryBytes::default()
    };
    Ok((worker, server))
}

/// The async DiLoCo row under `c` (module docs): its time, tokens/s and
/// scalability at the best case, the worst case in its rule.
pub fn plan(s: &DilocoSettings, c: &Costing) -> Result<MethodPlan> {
    let (n, world) = (c.params, c.workers());
    let k = c.grad_accum.max(1) as f64;
    let cost = |w: Work| c.spec.cost(w, 1.0);
    let msg = message_s(c, n);
    let out = cost(Work::Elementwise { name: "async-diloco outer step", elems: 3 * n });
    let local = s.h as f64 * (k * cost(Work::MicroBatch) + cost(Work::Optimizer { params: n }))
        + cost(Work::Elementwise { name: "diloco pseudo-gradient", elems: n });
    let serve = out + msg;
    // Speed factors (>= 1 over the slowest, plan::hetero), or all 1.
    let speeds: Vec<f64> = if c.spec.speeds.len() == world { c.spec.speeds.clone() } else { vec![1.0; world] };
    let t_w: Vec<f64> = speeds.iter().map(|sp| msg + local / sp + msg + out).collect();
    let tokens = s.h as f64 * k * c.tokens_per_micro_batch as f64;
    let best: f64 = t_w.iter().map(|t| tokens / t.max(world as f64 * serve)).sum();
    let worst: f64 = t_w.iter().map(|t| tokens / (t + (world as f64 - 1.0) * serve)).sum();
    let round_s = t_w[0].max(world as f64 * serve);
    let (worker, server) = memory(s, c)?;
    let total = worker.total() as f64;
    let bytes = (MESSAGE_HEADER + 8 + n * c.wire.bytes_per_elem()) as f64;
    let rule = format!(
        "bound (asynchronous arrivals are not analytical): a worker's cycle is at least max(fetch + H steps + send + outer step, N x (server outer step + model send)) = {round_s:.4} s, at most {:.4} s when every other update is served first; tokens/s between {worst:.0} and {best:.0}",
        t_w[0] + (world as f64 - 1.0) * serve
    );
    let time = super::time::Timing {
        round_s,
        steps: s.h,
        micro_batches: s.h as f64 * k,
        compute_s: local / speeds[0],
        comm_s: 2.0 * msg,
        exposed_s: (round_s - local / speeds[0]).max(0.0),
        bytes_intra: 0.0,
        bytes_inter: bytes,
        exact: false,
        rule,
    };
    let alone = super::single_worker_tokens_per_s(c) * speeds.iter().sum::<f64>();
    let fits = c.device_memory.map(|m| total <= m);
    let mut p = MethodPlan {
        method: NAME.to_string(),
        label: format!("{NAME} (H {}, outer {:?})", s.h, s.outer),
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
        let s = DilocoSettings { h: 10, ..DilocoSettings::default() };
        let c = costing(4, Precision::F32);
        let p = plan(&s, &c).unwrap();
        // One message: (16 + 8 + 4e6) bytes at 1 Gbit/s (1.25e8 B/s) + 1 ms.
        let msg = 1e-3 + (16.0 + 8.0 + 4e6) / 1.25e8;
        // No costed local work besides micro-batches here: T = 2 msg + 10 x 0.5.
        let t = 2.0 * msg + 5.0;
        assert!((p.time.round_s - t).abs() < 1e-12, "{} vs {t}", p.time.round_s);
        // Best: 4 workers x 10 x 1000 tokens per cycle; the worst cycle adds 3 serves (one message each).
        assert!((p.tokens_per_s - 4.0 * 1e4 / t).abs() < 1e-6);
        assert!(p.time.rule.contains(&format!("{:.4} s when every other", t + 3.0 * msg)), "{}", p.time.rule);
        assert!(!p.time.exact);
        // Memory (f32, AdamW s = 2): worker 4n + 4n + 4n + 8n; server theta + Nesterov momentum.
        let (w, sv) = memory(&s, &c).unwrap();
        assert_eq!((w.params, w.grads, w.comm_buffers, w.optimizer), (4_000_000, 4_000_000, 4_000_000, 8_000_000));
        assert_eq!((sv.params, sv.outer), (4_000_000, 4_000_000));
        // Mixed: bf16 values, K = 12 bytes of optimizer state per parameter.
        let (w, _) = memory(&s, &costing(4, Precision::Mixed)).unwrap();
        assert_eq!((w.params, w.optimizer), (2_000_000, 12_000_000));
    }

    #[test]
    fn the_server_bounds_the_cycle_when_updates_are_cheap_to_compute() {
        // 64 workers, H = 1: the server's 64 model sends take longer than a worker's own cycle.
        let s = DilocoSettings { h: 1, ..DilocoSettings::default() };
        let p = plan(&s, &costing(64, Precision::F32)).unwrap();
        let msg = 1e-3 + (16.0 + 8.0 + 4e6) / 1.25e8;
        assert!((p.time.round_s - 64.0 * msg).abs() < 1e-9, "{}", p.time.round_s);
    }
}
