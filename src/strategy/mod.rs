//! Strategies: what each participant computes, communicates, and when. One
//! file per method, each reading like its paper's pseudo-code, written once
//! against [`crate::runtime::Ctx`] and run by either runtime.

pub mod acco;
pub mod acco_wp;
pub mod async_diloco;
pub mod co2;
pub mod co2_sharded;
pub mod ddp;
pub mod detonation;
pub mod diloco;
pub mod diloco_settings;
pub mod dpu;
pub mod faults;
pub mod journal;
pub mod local;
pub mod local_settings;
pub mod local_sgd;
pub mod method;
pub mod overlap_local_sgd;
pub mod param_server;
pub mod sharded;
pub mod slowmo;
mod worker;
pub mod zero1;

pub use diloco_settings::DilocoSettings;
pub use journal::{Checkpointing, Journal, Observer, PartSink, SavedPart, StepPoint, StrategyState};
pub use local_settings::{Clip, Co2Settings, InnerState, LocalSgdSettings, OverlapLocalSgdSettings, SlowMoSettings};
pub use method::{DemoSettings, DpuSettings, InnerKind, Method, ReplicatorKind};
pub use worker::{
    accumulate, assemble_model, replica_piece, table1_bytes, MemoryBytes, ModelPiece, Outcome, Plan, Worker,
    WorkerReport, WorkerState,
};

use crate::runtime::{real, sim, Ctx};
use anyhow::{bail, Result};
use std::sync::{Arc, Mutex};

/// Run `method` on one worker to the end of the plan.
pub async fn run_worker<C: Ctx>(
    method: &Method,
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    mut j: Journal,
) -> Result<WorkerReport> {
    let out = match method {
        Method::Ddp => ddp::run(ctx, w, plan, &mut j).await?,
        Method::Zero1 => zero1::run(ctx, w, plan, &mut j).await?,
        Method::Dpu(s) => dpu::run(ctx, w, plan, s, &mut j).await?,
        Method::AccoWp => acco_wp::run(ctx, w, plan, &mut j).await?,
        Method::Acco => acco::run(ctx, w, plan, &mut j).await?,
        Method::Demo(s) => detonation::flexdemo::run(ctx, w, plan, s, false, &mut j).await?,
        Method::FlexDemo(s) => detonation::flexdemo::run(ctx, w, plan, s, true, &mut j).await?,
        Method::LocalSgd(s) => local_sgd::run(ctx, w, plan, s, &mut j).await?,
        Method::OverlapLocalSgd(s) => overlap_local_sgd::run(ctx, w, plan, s, &mut j).await?,
        Method::SlowMo(s) => slowmo::run(ctx, w, plan, s, &mut j).await?,
        Method::Co2(s) => co2::run(ctx, w, plan, s, &mut j).await?,
        Method::Diloco(s) => diloco::run(ctx, w, plan, s, &mut j).await?,
    };
    Ok(WorkerReport {
        rank: ctx.rank(),
        points: j.into_points(),
        optimizer_steps: out.optimizer_steps,
        times: ctx.times(),
        params: w.model.params.clone(),
        model: out.model,
        events: ctx.take_events(),
        memory: out.memory,
        exchange: out.exchange,
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

/// What a run adds around its strategies: who watches, how it
/// checkpoints, and where each participant resumes from.
#[derive(Clone, Default)]
pub struct Hooks {
    /// Sees every participant's rounds (progress, metrics).
    pub observer: Option<Arc<dyn Observer>>,
    /// When and where participants save their parts.
    pub checkpoints: Checkpointing,
    /// Per participant: the part it resumes from (empty: a fresh run).
    pub resumed: Vec<Option<SavedPart>>,
}

impl Hooks {
    /// Participant `p`'s journal.
    fn journal(&self, p: usize) -> Journal {
        let resumed = self.resumed.get(p).cloned().flatten();
        Journal::new(p, self.observer.clone(), self.checkpoints.clone(), resumed)
    }
}

/// Run `method` on `workers` (one per rank, in rank order) under `runtime`.
pub fn run_cluster(
    method: &Method,
    runtime: &Runtime,
    workers: Vec<Worker>,
    plan: &Plan,
    hooks: &Hooks,
) -> Result<Vec<WorkerReport>> {
    let world = workers.len();
    if world == 0 {
        bail!("need at least one worker (--workers 1 or more)");
    }
    let slots: Vec<Mutex<Option<Worker>>> = workers.into_iter().map(|w| Mutex::new(Some(w))).collect();
    let take = |rank: usize| slots[rank].lock().expect("worker slot").take().expect("each worker runs once");
    match runtime {
        Runtime::Sim(spec) => sim::run(spec.clone(), |mut ctx| {
            let (mut w, j) = (take(ctx.rank()), hooks.journal(ctx.rank()));
            async move { run_worker(method, &mut ctx, &mut w, plan, j).await }
        }),
        Runtime::Real(spec) => real::run(spec.clone(), |mut ctx| {
            let (mut w, j) = (take(ctx.rank()), hooks.journal(ctx.rank()));
            async move { run_worker(method, &mut ctx, &mut w, plan, j).await }
        }),
    }
}

/// Run `method` for this process's participant only, over `fabric` (one
/// rank of a multi-process job, e.g. MPI), on the real runtime.
pub fn run_rank(
    method: &Method,
    spec: &real::RealSpec,
    fabric: Box<dyn crate::comm::Fabric>,
    worker: Worker,
    plan: &Plan,
    hooks: &Hooks,
) -> Result<WorkerReport> {
    let slot = Mutex::new(Some(worker));
    let mut reports = real::run_with(spec.clone(), vec![fabric], |mut ctx| {
        let w = slot.lock().expect("worker slot").take().expect("one worker per process");
        let j = hooks.journal(ctx.rank());
        async move {
            let mut w = w;
            run_worker(method, &mut ctx, &mut w, plan, j).await
        }
    })?;
    Ok(reports.remove(0))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_async_diloco;
#[cfg(test)]
mod tests_co2;
#[cfg(test)]
mod tests_delayed;
#[cfg(test)]
mod tests_diloco;
#[cfg(test)]
mod tests_local;
#[cfg(test)]
mod tests_resume;
