//! Will a round end before the user gives up? A lower bound of one round's
//! wall time, from the planner's cost model, checked before the run starts:
//! `--runtime real --link 1bit,1us` or `--speeds 1,1e-9` used to run
//! silently until killed (the first round over that link: years).
//!
//! - Real runtime: the planner's round time (`plan::plan_method`, the
//!   simulator's cost model in closed form) for this run's method, model,
//!   batch, link and speeds, paced by the slowest worker (`plan::hetero`),
//!   with a micro-batch costed at [`FASTEST_FLOPS`]: faster than this
//!   engine runs on any CPU, so the real round takes at least this long.
//! - Simulator: virtual time is free, but every micro-batch of every worker
//!   is really computed, one after the other: the bound is the micro-batches
//!   of one round (the planner's, in virtual time: an overlapping method
//!   fills a long virtual round with them) times that micro-batch cost.
//!
//! A round whose bound exceeds [`ROUND_BOUND_S`] (one hour: no progress
//! line for an hour looks like a hang) is refused, naming the estimate and
//! the settings behind it; `--yes` starts it anyway, with a warning. The
//! memory a run needs is train/memory.rs's check.

use super::config::RunConfig;
use crate::model::{GptConfig, ParamLayout};
use crate::plan::{Costing, Precision};
use crate::runtime::sim::SimSpec;
use crate::strategy::{Method, Runtime};
use anyhow::{bail, Result};

/// The longest a round may take without `--yes`: one hour of wall time.
pub const ROUND_BOUND_S: f64 = 3600.0;

/// FLOP/s no CPU reaches with this engine (about 100x what it does on 2
/// cores; a big server's whole socket stays below), so that a micro-batch
/// costed at this rate is a lower bound of its real time.
pub const FASTEST_FLOPS: f64 = 1e13;

/// A lower bound of one round's wall time, and what it is made of.
#[derive(Clone, Debug)]
pub struct RoundBound {
    /// Seconds.
    pub s: f64,
    /// What sets it, for the message.
    pub why: String,
}

/// The lower bound of one round of `method` under `runtime` (module docs).
pub fn round_bound(cfg: &RunConfig, model: &GptConfig, method: &Method, runtime: &Runtime) -> Result<RoundBound> {
    let tokens = cfg.train.batch_size * cfg.seq_len(model);
    let micro_batch_s = model.flops_per_token() * tokens as f64 / FASTEST_FLOPS;
    let (spec, real) = match runtime {
        Runtime::Real(r) => (
            SimSpec {
                micro_batch_s,
                speeds: r.speeds.clone(),
                link: r.link,
                topology: r.topology,
                flops_per_s: Some(FASTEST_FLOPS),
                ..SimSpec::flat(0, micro_batch_s, None)
            },
            true,
        ),
        Runtime::Sim(s) => (s.clone(), false),
    };
    let speeds = spec.speeds.clone();
    let workers = spec.topology.workers;
    let mut c = Costing {
        params: ParamLayout::new(model).len,
        tokens_per_micro_batch: tokens,
        spec,
        wire: cfg.parallel.wire.unwrap_or_default(),
        grad_accum: cfg.train.grad_accum,
        grad_clip: cfg.train.grad_clip > 0.0,
        optimizer: cfg.optimizer.clone(),
        fixed_micro_batches: cfg.parallel.fixed_micro_batches,
        device_memory: None,
        precision: Precision::F32,
        layout: Some(ParamLayout::new(model)),
    };
    // Every worker at the slowest one's pace: the round waits for it.
    crate::plan::hetero::pace(&mut c, &speeds)?;
    let relative: f64 = c.spec.speeds.iter().sum();
    c.spec.speeds = vec![1.0; workers];
    let t = crate::plan::plan_method(method, &c)?.time;
    let slowest = speeds.iter().copied().fold(f64::INFINITY, f64::min);
    if real {
        let link = cfg.parallel.link.as_deref().map_or(String::new(), |l| format!(" over --link {l}"));
        let why = format!(
            "{} of communication{link} and {} of computing at the slowest worker's speed {slowest} (at most {FASTEST_FLOPS:.0e} FLOP/s)",
            human(t.comm_s),
            human(t.compute_s)
        );
        return Ok(RoundBound { s: t.round_s, why });
    }
    // The simulator computes every worker's micro-batches; an overlapping
    // method's faster workers compute more of them while the slowest one computes its.
    let fills = method.accumulates_while_communicating() && cfg.parallel.fixed_micro_batches.is_none();
    let micro_batches = t.micro_batches * if fills { relative } else { workers as f64 };
    let why = format!(
        "{micro_batches:.3e} micro-batches computed for real in one round of {} virtual, at least {} each",
        human(t.round_s),
        human(micro_batch_s)
    );
    Ok(RoundBound { s: micro_batches * micro_batch_s, why })
}

/// Refuses a run whose round would take longer than [`ROUND_BOUND_S`]
/// (module docs); with `yes`, a warning.
pub fn check(cfg: &RunConfig, model: &GptConfig, method: &Method, runtime: &Runtime, yes: bool) -> Result<()> {
    let b = round_bound(cfg, model, method, runtime)?;
    if b.s <= ROUND_BOUND_S {
        return Ok(());
    }
    let say = format!(
        "one round of {} would take at least {} of wall time ({}), over the bound of {} per round: the run would look hung",
        method.name(),
        human(b.s),
        b.why,
        human(ROUND_BOUND_S)
    );
    if yes {
        eprintln!("warning: {say}; starting anyway (--yes)");
        return Ok(());
    }
    let fix = match runtime {
        Runtime::Real(_) => "check --link (e.g. 1gbit,50us) and --speeds",
        Runtime::Sim(_) => "use fewer workers or steps per round, --fixed-micro-batches K for an overlapping method, or a faster simulated link",
    };
    bail!("{say}: {fix}, or pass --yes to start it anyway")
}

/// Seconds as "3.4 years", "2.0 days", "5.0 h", "12 min", "3.2 s", "4.1 ms", "7.0 us".
pub fn human(s: f64) -> String {
    const DAY: f64 = 86400.0;
    match s {
        s if s >= 365.0 * DAY => format!("{:.1} years", s / (365.0 * DAY)),
        s if s >= 2.0 * DAY => format!("{:.1} days", s / DAY),
        s if s >= 3600.0 => format!("{:.1} h", s / 3600.0),
        s if s >= 120.0 => format!("{:.0} min", s / 60.0),
        s if s >= 1.0 => format!("{s:.1} s"),
        s if s >= 1e-3 => format!("{:.1} ms", s * 1e3),
        s => format!("{:.1} us", s * 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::{LinkModel, Tier};
    use crate::runtime::real::RealSpec;

    fn real(speeds: Vec<f64>, link: Option<Tier>) -> Runtime {
        let n = speeds.len();
        Runtime::Real(RealSpec { speeds, link: link.map(LinkModel::flat), ..RealSpec::flat(n) })
    }

    #[test]
    fn a_one_bit_link_is_refused_and_yes_lets_it_start() {
        let cfg = RunConfig::default();
        let model = cfg.validate().unwrap();
        let bit = Tier::line(1e-6, 1.0 / 8.0);
        let rt = real(vec![1.0; 2], Some(bit));
        let b = round_bound(&cfg, &model, &Method::Ddp, &rt).unwrap();
        // The all-reduce alone: 2 (p-1)/p x 4n bytes at 1/8 byte/s, p = 2.
        let n = ParamLayout::new(&model).len as f64;
        assert!(b.s >= 4.0 * n * 8.0, "{} s", b.s);
        let e = check(&cfg, &model, &Method::Ddp, &rt, false).unwrap_err().to_string();
        assert!(
            e.starts_with("one round of ddp would take at least")
                && e.contains("over the bound of 1.0 h")
                && e.contains("--yes"),
            "{e}"
        );
        check(&cfg, &model, &Method::Ddp, &rt, true).unwrap();
    }

    #[test]
    fn a_tiny_speed_is_refused_on_threads_and_free_in_the_simulator() {
        let cfg = RunConfig::default();
        let model = cfg.validate().unwrap();
        let rt = real(vec![1.0, 1e-9], None);
        let e = check(&cfg, &model, &Method::Ddp, &rt, false).unwrap_err().to_string();
        assert!(e.contains("slowest worker's speed 0.000000001") && e.contains("--speeds"), "{e}");
        let sim = Runtime::Sim(SimSpec { speeds: vec![1.0, 1e-9], ..SimSpec::flat(2, 0.1, None) });
        check(&cfg, &model, &Method::Ddp, &sim, false).unwrap();
        // An ordinary run passes: nano, 4 workers, 1 Gbit.
        let gbit = Tier::line(50e-6, 1.25e8);
        check(&cfg, &model, &Method::Acco, &real(vec![1.0; 4], Some(gbit)), false).unwrap();
    }

    #[test]
    fn an_overlapping_method_in_a_very_long_virtual_round_is_refused_in_the_simulator() {
        // ACCO fills a round of years (a one-bit simulated link) with micro-batches, all really computed.
        let cfg = RunConfig::default();
        let model = cfg.validate().unwrap();
        let bit = Tier::line(1e-6, 1.0 / 8.0);
        let sim = Runtime::Sim(SimSpec::flat(2, 0.1, Some(LinkModel::flat(bit))));
        let e = check(&cfg, &model, &Method::Acco, &sim, false).unwrap_err().to_string();
        assert!(e.contains("micro-batches computed for real") && e.contains("--fixed-micro-batches"), "{e}");
        // DDP computes its micro-batch per step whatever the link: free.
        check(&cfg, &model, &Method::Ddp, &sim, false).unwrap();
    }

    #[test]
    fn durations_read_as_a_person_would_say_them() {
        assert_eq!(human(0.0041), "4.1 ms");
        assert_eq!(human(7e-6), "7.0 us");
        assert_eq!(human(3.24), "3.2 s");
        assert_eq!(human(720.0), "12 min");
        assert_eq!(human(5.0 * 3600.0), "5.0 h");
        assert_eq!(human(3.4 * 365.0 * 86400.0), "3.4 years");
    }
}
