//! Workers of different speeds (`lowcomm plan --speeds`, as `train --speeds`):
//! a worker of speed `s` takes `mb / s` per micro-batch and `1 / s` of every
//! other costed work (`SimSpec::cost`).
//!
//! `plan_method` calls [`adjust`] on every row.
//!
//! - Every method but dpu, acco-wp and acco meets at a collective after a
//!   fixed amount of work per worker (a step, or tau inner steps), so the
//!   slowest worker sets the pace: the plan is the homogeneous plan of a
//!   cluster whose every worker has the slowest speed `s_min` ([`pace`]).
//!   That is the simulator's time, not a bound (tests_hetero.rs).
//! - dpu, acco-wp and acco let each worker compute micro-batches while the
//!   round runs (ACCO's point: "handle heterogeneous hardware"): worker i
//!   computes about `s_i / s_min` times the slowest worker's micro-batches
//!   in the same round. [`adjust`] scales their tokens/s by
//!   `sum_i s_i / (N s_min)` and marks the row an estimate: an upper bound,
//!   since a fast worker may idle while the round waits for the slowest
//!   worker's micro-batch in progress; the paced plan is the lower bound.
//!
//! Scalability is measured against what the workers could do alone:
//! `sum_i s_i` nominal workers (not N of them).

use super::{Costing, MethodPlan};
use anyhow::{bail, Result};

/// The rule added to the row of a method that computes while it communicates.
pub const RULE: &str = "heterogeneous speeds: each worker computes micro-batches in proportion to its speed while the round runs (an upper bound: a fast worker may idle until the slowest one's micro-batch in progress ends; the slowest-paced time is the lower bound)";

/// Checks `speeds` (one per worker, each > 0) and makes `c` the cluster
/// paced by its slowest worker: micro-batches and costed work take what
/// they take at `s_min`; `c.spec.speeds` keeps each worker's speed over
/// `s_min` (>= 1) for [`adjust`].
pub fn pace(c: &mut Costing, speeds: &[f64]) -> Result<()> {
    let n = c.workers();
    if speeds.len() != n {
        let example = (0..n).map(|i| if i + 1 == n { "0.4" } else { "1" }).collect::<Vec<_>>().join(",");
        bail!(
            "--speeds has {} values but the cluster has {n} workers; give one per worker, e.g. --speeds {example}",
            speeds.len()
        );
    }
    if let Some((i, s)) = speeds.iter().enumerate().find(|(_, s)| !(**s > 0.0 && s.is_finite())) {
        bail!("--speeds value {} (worker {i}) is {s}; every speed must be > 0 (1 = the profile's device, 0.4 = 2.5 times slower)", i + 1);
    }
    let slowest = speeds.iter().copied().fold(f64::INFINITY, f64::min);
    c.spec.micro_batch_s /= slowest;
    c.spec.flops_per_s = c.spec.flops_per_s.map(|f| f * slowest);
    c.spec.memory_bytes_per_s = c.spec.memory_bytes_per_s.map(|b| b * slowest);
    c.spec.speeds = speeds.iter().map(|s| s / slowest).collect();
    Ok(())
}

/// Whether `method` lets each worker compute as many micro-batches as fit while a round runs.
fn computes_while_communicating(c: &Costing, method: &str) -> bool {
    matches!(method, "dpu" | "acco-wp" | "acco") && c.fixed_micro_batches.is_none()
}

/// The row of a paced plan ([`pace`]) on heterogeneous workers: tokens/s
/// of the methods that compute while communicating, and scalability
/// against `sum_i s_i` nominal workers. A no-op on equal speeds.
pub fn adjust(p: &mut MethodPlan, c: &Costing) {
    let n = c.workers() as f64;
    // sum_i s_i / s_min (the speeds are kept over s_min).
    let relative: f64 = c.spec.speeds.iter().sum();
    if c.spec.speeds.iter().all(|&r| r == 1.0) {
        return;
    }
    if computes_while_communicating(c, &p.method) {
        let gain = relative / n;
        p.tokens_per_s *= gain;
        p.scalability *= gain;
        p.time.micro_batches *= gain;
        p.time.exact = false;
        p.time.rule = format!("{}; {RULE}", p.time.rule);
    }
    // Scalability was against N workers of the slowest speed.
    p.scalability *= n / relative;
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::comm::WireDtype;
    use crate::plan::{plan_method, Precision};
    use crate::runtime::sim::SimSpec;
    use crate::strategy::Method;

    /// A costing as the CLI builds it (any fields the plan adds keep their
    /// defaults), on `workers` workers of one node.
    pub(in crate::plan) fn base(workers: usize) -> Costing {
        let toml = format!(
            "name = \"t\"\nnodes = 1\nworkers_per_node = {workers}\n[links]\nintra = \"1GB/s\"\n[timing]\nseconds_per_micro_batch = 1.0\n"
        );
        let profile = crate::runtime::cluster::ClusterProfile::from_toml(&toml).unwrap();
        let knobs = super::super::setup::Knobs {
            tokens_per_micro_batch: Some(10),
            wire: Some(WireDtype::F32),
            grad_accum: 2,
            precision: Precision::F32,
            require_fit: false,
            grad_clip: false,
        };
        super::super::setup::costing(&crate::plan::ModelSpec::parse("1000").unwrap(), &profile, &knobs).unwrap()
    }

    /// 1000 parameters, 10 tokens per micro-batch, 2 per step, 1 s each, 100 FLOP/s, no link.
    fn costing(workers: usize) -> Costing {
        Costing { spec: SimSpec { flops_per_s: Some(100.0), ..SimSpec::flat(workers, 1.0, None) }, ..base(workers) }
    }

    #[test]
    fn the_slowest_worker_paces_and_acco_counts_every_workers_micro_batches() {
        // Speeds 1, 1, 1, 0.5: the slowest takes 2 s per micro-batch, the others are 2x it.
        let mut c = costing(4);
        pace(&mut c, &[1.0, 1.0, 1.0, 0.5]).unwrap();
        assert_eq!((c.spec.micro_batch_s, c.spec.flops_per_s), (2.0, Some(50.0)));
        assert_eq!(c.spec.speeds, [2.0, 2.0, 2.0, 1.0]);
        // DDP without a link: 2 micro-batches of 2 s; 4 x 2 x 10 tokens / 4 s = 20 tokens/s.
        let ddp = plan_method(&Method::Ddp, &c).unwrap();
        assert_eq!((ddp.time.round_s, ddp.tokens_per_s), (4.0, 20.0));
        // Alone, the four would do (1 + 1 + 1 + 0.5) x 10 tokens/s = 35: 20 / 35.
        assert!((ddp.scalability - 20.0 / 35.0).abs() < 1e-12, "{}", ddp.scalability);
        assert!(ddp.time.exact);
        // ACCO: every worker computes in proportion to its speed: 7 / 4 of the paced 20 tokens/s.
        let acco = plan_method(&Method::Acco, &c).unwrap();
        let paced = plan_method(
            &Method::Acco,
            &Costing { spec: SimSpec { speeds: vec![1.0; 4], ..c.spec.clone() }, ..c.clone() },
        )
        .unwrap()
        .tokens_per_s;
        assert!((acco.tokens_per_s - paced * 7.0 / 4.0).abs() < 1e-9, "{} vs {paced}", acco.tokens_per_s);
        assert!(!acco.time.exact && acco.time.rule.contains("upper bound"));
        // Against what the workers do alone (3.5 nominal workers), it scales as the homogeneous plan does.
        let homogeneous = plan_method(&Method::Acco, &costing(4)).unwrap();
        assert!((acco.scalability - homogeneous.scalability).abs() < 1e-12, "{}", acco.scalability);
    }

    #[test]
    fn equal_speeds_change_nothing_and_bad_speeds_are_named() {
        let c = costing(2);
        let mut paced = c.clone();
        pace(&mut paced, &[0.5, 0.5]).unwrap();
        // All at half speed: the homogeneous plan of a cluster twice as slow, exact.
        let (a, b) = (plan_method(&Method::Acco, &paced).unwrap(), plan_method(&Method::Acco, &c).unwrap());
        assert_eq!((a.tokens_per_s, a.scalability, a.time.exact), (b.tokens_per_s / 2.0, b.scalability, true));
        let e = pace(&mut c.clone(), &[1.0]).unwrap_err().to_string();
        assert!(
            e.contains("--speeds has 1 values but the cluster has 2 workers") && e.contains("--speeds 1,0.4"),
            "{e}"
        );
        let e = pace(&mut c.clone(), &[1.0, 0.0]).unwrap_err().to_string();
        assert!(e.contains("--speeds value 2 (worker 1) is 0"), "{e}");
    }
}
