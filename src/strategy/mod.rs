//! Strategies: what each worker computes, communicates, and when. One file
//! per method, each reading like its paper's pseudo-code, written once
//! against [`crate::runtime::Ctx`] and run by either runtime.

pub mod acco;
pub mod acco_wp;
pub mod ddp;
pub mod dpu;
pub mod sharded;
mod worker;
pub mod zero1;

pub use worker::{accumulate, table1_bytes, MemoryBytes, Outcome, Plan, Worker, WorkerReport};

use crate::runtime::{real, sim, Ctx};
use anyhow::{bail, Result};
use std::str::FromStr;
use std::sync::Mutex;

/// A data-parallel method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Average gradients every step.
    Ddp,
    /// DDP with the optimizer state sharded (ZeRO-1).
    Zero1,
    /// Delayed parameter update, with `warmup_steps` of non-delayed steps first.
    Dpu { warmup_steps: u64 },
    /// ACCO with weight prediction.
    AccoWp,
    /// ACCO, the two-stage algorithm.
    Acco,
}

impl Method {
    /// Names accepted on the command line.
    pub const NAMES: [&'static str; 5] = ["ddp", "zero1", "dpu", "acco-wp", "acco"];
}

impl FromStr for Method {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "ddp" => Self::Ddp,
            "zero1" => Self::Zero1,
            "dpu" => Self::Dpu { warmup_steps: 0 },
            "acco-wp" => Self::AccoWp,
            "acco" => Self::Acco,
            other => bail!("unknown method `{other}`: choose one of {}, e.g. --method zero1", Self::NAMES.join(", ")),
        })
    }
}

/// Run `method` on one worker to the end of the plan.
pub async fn run_worker<C: Ctx>(method: Method, ctx: &mut C, w: &mut Worker, plan: &Plan) -> Result<WorkerReport> {
    let out = match method {
        Method::Ddp => ddp::run(ctx, w, plan).await?,
        Method::Zero1 => zero1::run(ctx, w, plan).await?,
        Method::Dpu { warmup_steps } => dpu::run(ctx, w, plan, warmup_steps).await?,
        Method::AccoWp => acco_wp::run(ctx, w, plan).await?,
        Method::Acco => acco::run(ctx, w, plan).await?,
    };
    Ok(WorkerReport {
        rank: ctx.rank(),
        losses: out.losses,
        optimizer_steps: out.optimizer_steps,
        times: ctx.times(),
        params: w.model.params.clone(),
        events: ctx.take_events(),
        memory: out.memory,
    })
}

/// Which runtime, with its settings.
#[derive(Clone, Debug)]
pub enum Runtime {
    /// Threads, really overlapping.
    Real(real::RealSpec),
    /// Deterministic virtual-time cluster.
    Sim(sim::SimSpec),
}

/// Run `method` on `workers` (one per rank, in rank order) under `runtime`.
pub fn run_cluster(method: Method, runtime: &Runtime, workers: Vec<Worker>, plan: &Plan) -> Result<Vec<WorkerReport>> {
    let world = workers.len();
    if world == 0 {
        bail!("need at least one worker (--workers 1 or more)");
    }
    let slots: Vec<Mutex<Option<Worker>>> = workers.into_iter().map(|w| Mutex::new(Some(w))).collect();
    let take = |rank: usize| slots[rank].lock().expect("worker slot").take().expect("each worker runs once");
    match runtime {
        Runtime::Sim(spec) => sim::run(spec.clone(), world, |mut ctx| {
            let mut w = take(ctx.rank());
            async move { run_worker(method, &mut ctx, &mut w, plan).await }
        }),
        Runtime::Real(spec) => real::run(spec.clone(), world, |mut ctx| {
            let mut w = take(ctx.rank());
            async move { run_worker(method, &mut ctx, &mut w, plan).await }
        }),
    }
}

/// Run `method` for this process's rank only, over `comm` (one rank of a
/// multi-process group, e.g. MPI), on the real runtime.
pub fn run_rank(
    method: Method,
    spec: &real::RealSpec,
    comm: Box<dyn crate::comm::Communicator>,
    worker: Worker,
    plan: &Plan,
) -> Result<WorkerReport> {
    let slot = Mutex::new(Some(worker));
    let mut reports = real::run_with(spec.clone(), vec![comm], |mut ctx| {
        let mut w = slot.lock().expect("worker slot").take().expect("one worker per process");
        async move { run_worker(method, &mut ctx, &mut w, plan).await }
    })?;
    Ok(reports.remove(0))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_delayed;
