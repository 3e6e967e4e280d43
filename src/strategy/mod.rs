//! Strategies: what each participant computes, communicates, and when. One
//! file per method, each reading like its paper's pseudo-code, written once
//! against [`crate::runtime::Ctx`] and run by either runtime.

pub mod acco;
pub mod detonation;
pub mod diloco;
pub mod diverged;
pub mod faults;
pub mod inner;
pub mod journal;
pub mod local;
pub mod method;
pub mod method_spec;
pub mod outcome;
pub mod stop;
mod worker;

pub use acco::settings::DpuSettings;
pub use detonation::settings::{DemoSettings, InnerKind, ReplicatorKind};
pub use diloco::async_settings::AsyncDilocoSettings;
pub use diloco::settings::DilocoSettings;
pub use diloco::streaming_settings::StreamingSettings;
pub use diverged::Diverged;
pub use faults::FaultRecord;
pub use journal::{Checkpointing, Journal, Observer, PartSink, SavedPart, StepPoint, StrategyState};
pub use local::settings::{Clip, Co2Settings, InnerState, LocalSgdSettings, OverlapLocalSgdSettings, SlowMoSettings};
pub use method::{table1_bytes, Method};
pub use outcome::{Budget, MemoryBytes, Outcome};
pub use stop::{StopRequest, StopVote};
pub use worker::{accumulate, assemble_model, replica_piece, ModelPiece, Plan, Worker, WorkerState};

use crate::runtime::{real, sim, Ctx, WorkerTimes};
use anyhow::{bail, ensure, Result};
use std::sync::{Arc, Mutex};

/// What a worker reports at the end.
#[derive(Clone, Debug)]
pub struct WorkerReport {
    /// Participant number.
    pub rank: usize,
    /// This participant's rounds: loss, micro-batches applied, when each ended.
    pub points: Vec<StepPoint>,
    /// Optimizer steps committed (by this worker's shard, or its replica).
    pub optimizer_steps: u64,
    /// Time accounting from the runtime.
    pub times: WorkerTimes,
    /// Final replica parameters (flat; empty for a participant without one).
    pub params: Vec<f32>,
    /// This participant's piece of the run's model.
    pub model: Option<ModelPiece>,
    /// Compute and communication spans (for the trace and the summary).
    pub events: crate::metrics::EventLog,
    /// Bytes of model states this worker held, by category.
    pub memory: MemoryBytes,
    /// What one exchange of a compressing method sends (DeMo, FlexDeMo).
    pub exchange: Option<Budget>,
    /// The parameter server's report: updates it applied from each worker
    /// (empty for workers and methods without a server).
    pub updates: Vec<u64>,
    /// The parameter server's rounds as handed out: worker, data shard and
    /// where in the shard's schedule (empty for workers and methods without one).
    pub shard_rounds: Vec<diloco::shards::ShardRound>,
    /// A worker's crashes and joins under a fault plan, in time order.
    pub faults: Vec<FaultRecord>,
    /// Updates a worker sent to the parameter server (0 without one).
    pub sent: u64,
}

/// Run `method` on one worker to the end of the plan.
pub async fn run_worker<C: Ctx>(
    method: &Method,
    ctx: &mut C,
    w: &mut Worker,
    plan: &Plan,
    mut j: Journal,
) -> Result<WorkerReport> {
    let out = match method {
        Method::Ddp => acco::ddp::run(ctx, w, plan, &mut j).await?,
        Method::Zero1 => acco::zero1::run(ctx, w, plan, &mut j).await?,
        Method::Dpu(s) => acco::dpu::run(ctx, w, plan, s, &mut j).await?,
        Method::AccoWp => acco::acco_wp::run(ctx, w, plan, &mut j).await?,
        Method::Acco => acco::acco::run(ctx, w, plan, &mut j).await?,
        Method::Demo(s) => detonation::flexdemo::run(ctx, w, plan, s, false, &mut j).await?,
        Method::FlexDemo(s) => detonation::flexdemo::run(ctx, w, plan, s, true, &mut j).await?,
        Method::LocalSgd(s) => local::local_sgd::run(ctx, w, plan, s, &mut j).await?,
        Method::OverlapLocalSgd(s) => local::overlap_local_sgd::run(ctx, w, plan, s, &mut j).await?,
        Method::SlowMo(s) => local::slowmo::run(ctx, w, plan, s, &mut j).await?,
        Method::Co2(s) => local::co2::run(ctx, w, plan, s, &mut j).await?,
        Method::Diloco(s) => diloco::diloco::run(ctx, w, plan, s, &mut j).await?,
        Method::AsyncDiloco(s) => diloco::async_diloco::worker(ctx, w, plan, s, &mut j).await?,
        Method::StreamingDiloco(s) => diloco::streaming::run(ctx, w, plan, s, &mut j).await?,
    };
    Ok(report(ctx, j, out, w.model.params.clone(), Vec::new(), Vec::new()))
}

/// Run `method`'s parameter server from the initial model `theta0`.
pub async fn run_server<C: Ctx>(
    method: &Method,
    ctx: &mut C,
    theta0: Vec<f32>,
    plan: &Plan,
    mut j: Journal,
) -> Result<WorkerReport> {
    let served = match method {
        Method::AsyncDiloco(s) => diloco::async_server::server(ctx, theta0, plan, s, &mut j).await?,
        m => bail!("{} has no parameter server", m.name()),
    };
    let params = served.outcome.model.as_ref().map(|m| m.values.clone()).unwrap_or_default();
    Ok(report(ctx, j, served.outcome, params, served.updates, served.shard_rounds))
}

fn report<C: Ctx>(
    ctx: &mut C,
    j: Journal,
    out: Outcome,
    params: Vec<f32>,
    updates: Vec<u64>,
    shard_rounds: Vec<diloco::shards::ShardRound>,
) -> WorkerReport {
    let (faults, sent) = j.membership();
    WorkerReport {
        faults,
        sent,
        rank: ctx.rank(),
        points: j.into_points(),
        optimizer_steps: out.optimizer_steps,
        times: ctx.times(),
        params,
        model: out.model,
        events: ctx.take_events(),
        memory: out.memory,
        exchange: out.exchange,
        updates,
        shard_rounds,
    }
}

/// What one participant of a run starts from.
pub enum Participant {
    /// A data-parallel worker: its replica and data (boxed: a worker is
    /// large, the server's start is one vector).
    Worker(Box<Worker>),
    /// The parameter server: the initial model theta^(0).
    Server(Vec<f32>),
}

/// Run `method` as participant `p`.
pub async fn run_participant<C: Ctx>(
    method: &Method,
    ctx: &mut C,
    p: Participant,
    plan: &Plan,
    j: Journal,
) -> Result<WorkerReport> {
    match p {
        Participant::Worker(mut w) => run_worker(method, ctx, &mut w, plan, j).await,
        Participant::Server(theta0) => run_server(method, ctx, theta0, plan, j).await,
    }
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

impl Runtime {
    /// The job's shape.
    pub fn topology(&self) -> crate::runtime::Topology {
        match self {
            Runtime::Sim(s) => s.topology,
            Runtime::Real(s) => s.topology,
        }
    }

    /// This runtime with a server participant after the workers, or none.
    pub fn with_server(&self, server: bool) -> Runtime {
        let mut r = self.clone();
        match &mut r {
            Runtime::Sim(s) => s.topology.server = server,
            Runtime::Real(s) => s.topology.server = server,
        }
        r
    }
}

impl Hooks {
    /// Participant `p`'s journal.
    fn journal(&self, p: usize) -> Journal {
        let resumed = self.resumed.get(p).cloned().flatten();
        Journal::new(p, self.observer.clone(), self.checkpoints.clone(), resumed)
    }
}

/// Run `method` on `workers` (one per rank, in rank order) under `runtime`;
/// a method that needs a server gets one more participant, the last, which
/// starts from worker 0's parameters (its report comes last).
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
    let runtime = runtime.with_server(method.needs_server());
    let server = method.needs_server().then(|| Participant::Server(workers[0].model.params.clone()));
    let slots: Vec<Mutex<Option<Participant>>> = workers
        .into_iter()
        .map(|w| Participant::Worker(Box::new(w)))
        .chain(server)
        .map(|p| Mutex::new(Some(p)))
        .collect();
    ensure!(
        slots.len() == runtime.topology().participants(),
        "{} participants for a topology of {} workers{}",
        slots.len(),
        runtime.topology().workers,
        if method.needs_server() { " and a server" } else { "" }
    );
    let take = |rank: usize| slots[rank].lock().expect("participant slot").take().expect("each participant runs once");
    match &runtime {
        Runtime::Sim(spec) => sim::run(spec.clone(), |mut ctx| {
            let (p, j) = (take(ctx.rank()), hooks.journal(ctx.rank()));
            async move { run_participant(method, &mut ctx, p, plan, j).await }
        }),
        Runtime::Real(spec) => real::run(spec.clone(), |mut ctx| {
            let (p, j) = (take(ctx.rank()), hooks.journal(ctx.rank()));
            async move { run_participant(method, &mut ctx, p, plan, j).await }
        }),
    }
}

/// Run `method` for this process's participant only, over `fabric` (one
/// rank of a multi-process job, e.g. MPI), on the real runtime; `spec`'s
/// topology says whether there is a server (then the last rank is it).
pub fn run_rank(
    method: &Method,
    spec: &real::RealSpec,
    fabric: Box<dyn crate::comm::Fabric>,
    participant: Participant,
    plan: &Plan,
    hooks: &Hooks,
) -> Result<WorkerReport> {
    let slot = Mutex::new(Some(participant));
    let mut reports = real::run_with(spec.clone(), vec![fabric], |mut ctx| {
        let p = slot.lock().expect("participant slot").take().expect("one participant per process");
        let j = hooks.journal(ctx.rank());
        async move { run_participant(method, &mut ctx, p, plan, j).await }
    })?;
    Ok(reports.remove(0))
}

#[cfg(test)]
mod tests;
