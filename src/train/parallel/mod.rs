//! `lowcomm train --method M --workers N`: data-parallel training with a
//! strategy, on the real or the simulated runtime. Writes as it goes
//! (metrics.jsonl, checkpoints with every participant's part every
//! `--checkpoint-every` rounds, by default 100 ([`checkpoint_every`]), and
//! at the end) and at the end (events.jsonl with spans and summary, plots,
//! an optional Chrome trace: report.rs). Before it starts, it refuses what
//! would not fit in memory or would take hours per round (train/memory.rs,
//! train/duration.rs); while it runs it holds the run directory's lock
//! (train/lock.rs); a stop request (Ctrl-C) ends it at a round boundary
//! with a checkpoint (strategy/stop.rs, train/interrupt.rs).
//! `--resume RUN` continues from the last checkpoint (checkpoint.rs).

pub mod checkpoint;
pub mod log;
#[cfg(feature = "mpi")]
pub mod mpi;
#[cfg(feature = "mpi")]
mod mpi_sink;
pub mod report;
mod setup;

use super::config::{ParallelSection, RunConfig};
use super::run::RunOptions;
use super::trainer::{decay_segments, open_data};
use crate::comm::{LinkModel, Tier, WireDtype};
use crate::model::{Gpt, GptConfig};
use crate::runtime::{real::RealSpec, sim::SimSpec, Topology};
use crate::strategy::{run_cluster, Checkpointing, Hooks, Method, Plan, Runtime, StopRequest};
use anyhow::{bail, Context, Result};
use checkpoint::{CheckpointWriter, Resumed};
pub use log::RoundRecord;
use report::finish;
pub use setup::{topology, ParallelSummary, Setup};
use std::sync::Arc;

/// The method named in `cfg`, with its `[methods.NAME]` settings.
pub fn method(cfg: &RunConfig) -> Result<Method> {
    let name = cfg.parallel.method.as_deref().unwrap_or("ddp");
    Method::from_config(name, cfg.methods.get(name))
}

/// The run's fault plan (`[faults]` / `--faults`), checked against its
/// method, backend and worker count (the profile's, without `--workers`),
/// and against checkpoints: `resuming` says the run continues a checkpoint.
pub fn fault_plan(cfg: &RunConfig, method: &Method, resuming: bool) -> Result<crate::strategy::faults::FaultPlan> {
    let p = &cfg.parallel;
    let workers = match (p.workers, &p.cluster) {
        (None, Some(c)) if !cfg.faults.is_empty() => crate::runtime::cluster::ClusterProfile::from_file(c)?.workers(),
        (w, _) => w.unwrap_or(1),
    };
    let plan = method.fault_plan(&cfg.faults.plan, workers, &p.backend)?;
    // A checkpoint stops the world with every worker between rounds (async_diloco.rs); a worker
    // that is down cannot take part, and a resumed run's clock would shift the plan's times.
    if !plan.is_empty() && (cfg.train.checkpoint_every.is_some_and(|n| n > 0) || resuming) {
        bail!(
            "--faults / [faults] plan: not with {}: a checkpoint needs every worker up and between rounds; run the fault plan without --checkpoint-every (the run's final checkpoint is still written) and from the start",
            if resuming { "--resume" } else { "--checkpoint-every" }
        );
    }
    Ok(plan)
}

/// Rounds between checkpoints: `train.checkpoint_every` if set, else
/// [`super::config::DEFAULT_CHECKPOINT_EVERY`], except where a checkpoint
/// would change the run (its doc comment): async-diloco's stop-the-world,
/// demo/flexdemo's overlapped exchange brought in early, a fault plan.
pub fn checkpoint_every(cfg: &RunConfig, method: &Method) -> u64 {
    let changes_the_run = match method {
        Method::AsyncDiloco(_) => true,
        Method::Demo(s) | Method::FlexDemo(s) => s.overlap,
        _ => false,
    };
    match cfg.train.checkpoint_every {
        Some(n) => n,
        None if changes_the_run || !cfg.faults.is_empty() => 0,
        None => super::config::DEFAULT_CHECKPOINT_EVERY,
    }
}

/// The workers a run asks for (`--workers`, else the cluster profile's,
/// else 1), read before anything is allocated for them.
fn asked_workers(p: &ParallelSection) -> Result<usize> {
    Ok(match (p.workers, &p.cluster) {
        (Some(w), _) => w,
        (None, Some(c)) => crate::runtime::cluster::ClusterProfile::from_file(c)?.workers(),
        (None, None) => 1,
    })
}

/// `link` and `cluster` are not set together: a profile's links (intra and
/// inter node) are its own, and one flat link cannot stand in for both.
pub fn check_link_and_cluster(p: &ParallelSection) -> Result<()> {
    if p.link.is_some() && p.cluster.is_some() {
        bail!("--link (parallel.link) sets one flat link, and the --cluster profile (parallel.cluster) has its own links: use one or the other, or edit the profile's [links]");
    }
    Ok(())
}

/// `--link`: one flat link (`1gbit,50us`), or with `--nodes` the link
/// inside nodes and the one between them (`25gbit,5us/1gbit,10ms`, the
/// latter per node, as a cluster profile's `[links]`).
fn link_model(text: &str, per_node: usize, world: usize) -> Result<LinkModel> {
    let tier = |t: &str| t.parse::<Tier>().map_err(|e| anyhow::anyhow!("parallel.link (--link): {e}"));
    let Some((intra, inter)) = text.split_once('/') else { return Ok(LinkModel::flat(tier(text)?)) };
    if per_node >= world {
        bail!(
            "--link {text} gives a link inside nodes and one between them, but every worker is on one node: add --nodes N (N >= 2 dividing --workers {world}), or give one link, e.g. --link {inter}"
        );
    }
    Ok(LinkModel { intra: tier(intra)?, inter: Some(tier(inter)?), workers_per_node: per_node })
}

/// Workers and runtime from the `[parallel]` section; errors name the field.
pub fn runtime(
    p: &ParallelSection,
    model: &GptConfig,
    params: usize,
    tokens_per_micro_batch: usize,
) -> Result<(usize, Runtime)> {
    let profile = match &p.cluster {
        Some(path) => Some(crate::runtime::cluster::ClusterProfile::from_file(path)?),
        None => None,
    };
    let world = match (p.workers, &profile) {
        (Some(w), Some(c)) if w != c.workers() => bail!(
            "--workers {w} but the cluster profile has {} workers: drop --workers or use another profile",
            c.workers()
        ),
        (Some(w), _) => w,
        (None, Some(c)) => c.workers(),
        (None, None) => 1,
    };
    if p.fixed_micro_batches == Some(0) {
        bail!("parallel.fixed_micro_batches (--fixed-micro-batches) must be at least 1, e.g. --fixed-micro-batches 1");
    }
    if world == 0 {
        bail!("parallel.workers (--workers) must be at least 1, e.g. --workers 4");
    }
    let speeds = p.speeds.clone().unwrap_or_else(|| vec![1.0; world]);
    if speeds.len() != world {
        bail!(
            "--speeds has {} values but there are {world} workers: give one per worker, e.g. --speeds {}",
            speeds.len(),
            vec!["1"; world].join(",")
        );
    }
    if let Some(s) = speeds.iter().find(|s| !(**s > 0.0 && s.is_finite())) {
        bail!("--speeds: every speed factor must be > 0 (1 = nominal, 0.25 = four times slower), got {s}");
    }
    let per_node = match (p.nodes, &profile) {
        (Some(n), Some(c)) if n != c.nodes => {
            bail!("--nodes {n} but the cluster profile has {} nodes: drop --nodes or use another profile", c.nodes)
        }
        (Some(0), _) => bail!("parallel.nodes (--nodes) must be at least 1, e.g. --nodes 2"),
        (Some(n), _) if world % n != 0 => bail!(
            "--nodes {n} does not divide --workers {world}: every node holds the same number of workers, e.g. --workers {} --nodes {n}",
            n * world.div_ceil(n)
        ),
        (Some(n), _) => world / n,
        (None, _) => world,
    };
    let topology = Topology { workers: world, per_node, server: false };
    let link = p.link.as_deref().map(|s| link_model(s, per_node, world)).transpose()?;
    let rt = match p.runtime.as_str() {
        "real" => {
            if profile.is_some() {
                bail!("--cluster describes a simulated cluster: use it with --runtime sim (the real runtime takes --link)");
            }
            Runtime::Real(RealSpec { speeds, link, topology, start: Vec::new() })
        }
        "sim" => match profile {
            Some(c) => {
                // Before, --link replaced the profile's two tiers with one flat link, undocumented.
                check_link_and_cluster(p)?;
                Runtime::Sim(c.sim_spec(model, params, tokens_per_micro_batch, speeds)?)
            }
            None => Runtime::Sim(SimSpec { speeds, link, topology, ..SimSpec::flat(world, p.micro_batch_s, None) }),
        },
        other => bail!("unknown runtime `{other}`: use --runtime real or --runtime sim"),
    };
    Ok((world, rt))
}

/// Validates `cfg`, opens the data and builds the initial model and plan
/// (from the checkpoint at `opts.resume`, if given). Every check of a
/// parallel run's settings happens here, before anything is written, so a
/// fresh run replaces an old one (`--force`) only after this succeeds.
pub fn setup(cfg: RunConfig, opts: &RunOptions) -> Result<Setup> {
    let model_cfg = cfg.validate()?;
    let method = method(&cfg)?;
    let faults = fault_plan(&cfg, &method, opts.resume.is_some())?;
    let t = &cfg.train;
    if method.accumulates_while_communicating() && t.grad_accum > 1 {
        bail!(
            "--grad-accum {} does not apply to {}: it accumulates as many micro-batches as fit while a round communicates; fix the count per stage with --fixed-micro-batches K instead",
            t.grad_accum,
            method.name()
        );
    }
    if let Some(path) = &cfg.parallel.trace {
        report::check_trace(path)?;
    }
    // Before anything is allocated for the workers: will they fit?
    let p = &cfg.parallel;
    let estimate =
        super::memory::parallel(&cfg, &model_cfg, &method, asked_workers(p)?, p.backend == "mpi", p.runtime == "real")?;
    super::memory::check(&estimate, opts.yes)?;
    let seq = cfg.seq_len(&model_cfg);
    let n_params = crate::model::ParamLayout::new(&model_cfg).len;
    let (world, runtime) = runtime(&cfg.parallel, &model_cfg, n_params, t.batch_size * seq)?;
    // A method with a parameter server gets one more participant, the last.
    let mut runtime = runtime.with_server(method.needs_server());
    // The simulator's micro-batch draws follow the run's seed, so seeds
    // differ in their timing luck as real runs do (sim/straggle.rs).
    if let Runtime::Sim(s) = &mut runtime {
        s.draw_seed = t.seed;
    }
    // ... and will its rounds end?
    super::duration::check(&cfg, &model_cfg, &method, &runtime, opts.yes)?;
    let (mut data, _) = open_data(&cfg, &model_cfg)?;
    let tokens = Arc::new(std::mem::take(&mut data.train));
    let mut init = Gpt::new(model_cfg.clone(), t.seed)?;
    if opts.resume.is_none() {
        if let Some(params) = super::warm_start::initial(t, &model_cfg, &data.tokenizer)? {
            init.params.copy_from_slice(&params);
        }
    }
    if let Method::AsyncDiloco(a) = &method {
        crate::strategy::diloco::shards::check(tokens.len(), a.shard_count(world), world, a.fixed_shards, seq + 1)?;
        a.diloco().check_workers("async-diloco", world)?;
    }
    if let Method::Diloco(d) = &method {
        d.check_workers("diloco", world)?; // dn_c <= 1/N, N = the workers when dn_buffer is unset
    }
    if let Method::StreamingDiloco(s) = &method {
        // fragments <= the model's blocks, refused before anything is written
        crate::strategy::diloco::fragments::Fragments::new(
            &crate::model::ParamLayout::new(&model_cfg),
            s.fragments,
            s.fragment_pattern,
        )?;
    }
    let wire = match (&cfg.parallel.wire, &cfg.parallel.cluster) {
        (Some(w), _) => *w,
        (None, Some(c)) => crate::runtime::cluster::ClusterProfile::from_file(c)?.wire.unwrap_or(WireDtype::F32),
        (None, None) => WireDtype::F32,
    };
    let resumed = match &opts.resume {
        Some(path) => {
            let r = Resumed::open(path, method.name(), topology(&runtime), &model_cfg)?;
            init.params.copy_from_slice(&r.params);
            let clocks =
                (0..topology(&runtime).participants()).map(|p| Ok(r.part(p)?.clock)).collect::<Result<Vec<_>>>()?;
            match &mut runtime {
                Runtime::Sim(s) => s.start = clocks,
                Runtime::Real(s) => s.start = clocks,
            }
            Some(r)
        }
        None => None,
    };
    // Local-update methods stop at the end of the outer round containing --stop-at.
    let start = resumed.as_ref().map_or(0, |r| r.round);
    let end = method.stop_boundary(super::run::end_step(start, t.steps, opts.stop_at)?, t.steps);
    let plan = Plan {
        steps: t.steps,
        end,
        grad_accum: t.grad_accum,
        schedule: cfg.schedule(),
        optimizer: cfg.optimizer.clone(),
        decay: decay_segments(&init.layout, &cfg),
        grad_clip: t.grad_clip,
        fixed_micro_batches: cfg.parallel.fixed_micro_batches,
        micro_batch_budget: (cfg.parallel.budget == super::config::BudgetUnit::Tokens)
            .then_some(cfg.train.steps.saturating_mul(cfg.train.grad_accum as u64)),
        wire,
        seed: t.seed,
        faults,
    };
    let label = method.to_string();
    Ok(Setup {
        cfg,
        model_cfg,
        method,
        data,
        tokens,
        init,
        world,
        runtime,
        plan,
        seq,
        resumed,
        quiet: opts.quiet,
        label,
    })
}

/// Train with `cfg.parallel.method`, all workers in this process.
pub fn run_parallel(cfg: RunConfig, opts: &RunOptions) -> Result<ParallelSummary> {
    if cfg.parallel.backend != "local" {
        bail!("backend `{}` runs one worker per process: launch it with mpirun (see docs/mpi.md); in-process runs use --backend local", cfg.parallel.backend);
    }
    let s = setup(cfg, opts)?;
    let workers = (0..s.world).map(|r| s.worker(r)).collect::<Result<Vec<_>>>()?;
    let out = s.cfg.train.out_dir.clone();
    let interrupted = |checkpoint| super::interrupt::Interrupted {
        run_dir: out.clone(),
        checkpoint,
        step: s.resumed.as_ref().map_or(0, |r| r.round),
        steps: s.plan.steps,
        launcher: None,
    };
    if super::interrupt::requested(&opts.stop) {
        return Err(interrupted(None).into());
    }
    // Only now, with every setting, the data and the cluster checked, so
    // that a run that cannot start creates and replaces nothing (--force).
    let _lock = super::lock::RunLock::acquire(&out)?;
    if opts.resume.is_none() {
        super::rundir::claim_fresh(&out, opts.force)?;
    }
    if !s.quiet {
        eprintln!("{}", s.banner("local"));
    }
    let log = Arc::new(s.round_log(true, s.world)?);
    let writer = Arc::new(CheckpointWriter::new(s.identity()?, s.init.num_params()));
    let hooks = Hooks {
        observer: Some(log.clone()),
        checkpoints: Checkpointing {
            every: checkpoint_every(&s.cfg, &s.method),
            sink: Some(writer.clone()),
            stop: opts.stop.clone().map(StopRequest::new),
        },
        resumed: s.resumed_parts()?,
    };
    let ran = run_cluster(&s.method, &s.runtime, workers, &s.plan, &hooks);
    drop(hooks);
    let log = Arc::into_inner(log).expect("the run is over: one owner left");
    let reports = match ran {
        Err(e) if crate::runtime::is_stopped(&e) => {
            log.finish()?;
            let written = writer.written().last().cloned();
            let mut i = interrupted(written.as_ref().map(|(_, d)| d.clone()));
            i.step = written.map_or(i.step, |(round, _)| round);
            return Err(i.into());
        }
        r => r?,
    };
    let checkpoint = writer
        .written()
        .last()
        .map(|(_, d)| d.clone())
        .context("the run ended without writing its final checkpoint")?;
    finish(s, reports, log, checkpoint)
}

#[cfg(test)]
mod tests;
