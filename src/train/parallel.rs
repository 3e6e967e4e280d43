//! `lowcomm train --method M --workers N`: data-parallel training with a
//! strategy, on the real or the simulated runtime. Writes as it goes
//! (metrics.jsonl, checkpoints with every participant's part every
//! `--checkpoint-every` rounds and at the end) and at the end
//! (events.jsonl with spans and summary, plots, an optional Chrome trace).
//! `--resume RUN` continues from the last checkpoint (parallel_ckpt.rs).

use super::config::{ParallelSection, RunConfig};
use super::metrics::MetricsLog;
use super::parallel_ckpt::{CheckpointWriter, Resumed, RunIdentity};
pub use super::parallel_log::RoundRecord;
use super::parallel_log::{logged_rounds, resume_log, RoundLog, RoundLogSpec};
use super::run::RunOptions;
use super::trainer::{decay_segments, evaluate, open_data};
use crate::comm::{LinkModel, Tier, WireDtype};
use crate::data::sampler::shard_range;
use crate::metrics::{self, EventLog, Summary};
use crate::model::{Gpt, GptConfig};
use crate::runtime::{real::RealSpec, sim::SimSpec, Topology};
use crate::strategy::{
    assemble_model, run_cluster, table1_bytes, Checkpointing, Hooks, Method, Plan, Runtime, Worker, WorkerReport,
};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::sync::Arc;

/// What a parallel run ends with.
pub struct ParallelSummary {
    pub method: Method,
    /// The run's rounds (all of them, also those before a resume).
    pub rounds: Vec<RoundRecord>,
    pub world: usize,
    pub final_loss: f32,
    pub val_loss: f32,
    pub summary: Summary,
    pub reports: Vec<WorkerReport>,
    pub checkpoint: PathBuf,
}

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
    let plan = crate::strategy::faults::FaultPlan::for_run(&cfg.faults.plan, method, workers, &p.backend)?;
    // A checkpoint stops the world with every worker between rounds (async_diloco.rs); a worker
    // that is down cannot take part, and a resumed run's clock would shift the plan's times.
    if !plan.is_empty() && (cfg.train.checkpoint_every > 0 || resuming) {
        bail!(
            "--faults / [faults] plan: not with {}: a checkpoint needs every worker up and between rounds; run the fault plan without --checkpoint-every (the run's final checkpoint is still written) and from the start",
            if resuming { "--resume" } else { "--checkpoint-every" }
        );
    }
    Ok(plan)
}

/// Workers and runtime from the `[parallel]` section; errors name the field.
pub fn runtime(
    p: &ParallelSection,
    model: &GptConfig,
    params: usize,
    tokens_per_micro_batch: usize,
) -> Result<(usize, Runtime)> {
    let link = match &p.link {
        Some(s) => {
            Some(LinkModel::flat(s.parse::<Tier>().map_err(|e| anyhow::anyhow!("parallel.link (--link): {e}"))?))
        }
        None => None,
    };
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
    let rt = match p.runtime.as_str() {
        "real" => {
            if profile.is_some() {
                bail!("--cluster describes a simulated cluster: use it with --runtime sim (the real runtime takes --link)");
            }
            Runtime::Real(RealSpec { speeds, link, topology, start: Vec::new() })
        }
        "sim" => match profile {
            Some(c) => {
                let mut spec = c.sim_spec(model, params, tokens_per_micro_batch, speeds)?;
                if link.is_some() {
                    spec.link = link;
                }
                Runtime::Sim(spec)
            }
            None => Runtime::Sim(SimSpec { speeds, link, topology, ..SimSpec::flat(world, p.micro_batch_s, None) }),
        },
        other => bail!("unknown runtime `{other}`: use --runtime real or --runtime sim"),
    };
    Ok((world, rt))
}

/// Everything a parallel run fixes before its workers start.
pub struct Setup {
    pub cfg: RunConfig,
    pub model_cfg: GptConfig,
    pub method: Method,
    /// The validation split and tokenizer (the training split is `tokens`).
    pub data: crate::data::Dataset,
    /// The training tokens, shared by every worker of this process.
    pub tokens: Arc<Vec<u32>>,
    /// The initial model (identical on every worker): fresh, or the
    /// checkpoint's when resuming.
    pub init: Gpt,
    pub world: usize,
    pub runtime: Runtime,
    pub plan: Plan,
    /// Tokens per sequence.
    pub seq: usize,
    /// The checkpoint resumed from, if any.
    pub resumed: Option<Resumed>,
    /// No progress output.
    pub quiet: bool,
    /// Shown before the progress bar.
    pub label: String,
}

/// Validates `cfg`, opens the data and builds the initial model and plan
/// (from the checkpoint at `opts.resume`, if given).
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
    let (mut data, _) = open_data(&cfg, &model_cfg)?;
    let tokens = Arc::new(std::mem::take(&mut data.train));
    let seq = cfg.seq_len(&model_cfg);
    let mut init = Gpt::new(model_cfg.clone(), t.seed)?;
    let (world, runtime) = runtime(&cfg.parallel, &model_cfg, init.num_params(), t.batch_size * seq)?;
    if let Method::AsyncDiloco(a) = &method {
        crate::strategy::shards::check(tokens.len(), a.shard_count(world), world, a.fixed_shards, seq + 1)?;
    }
    // A method with a parameter server gets one more participant, the last.
    let mut runtime = runtime.with_server(method.needs_server());
    let wire = match (&cfg.parallel.wire, &cfg.parallel.cluster) {
        (Some(w), _) => *w,
        (None, Some(c)) => crate::runtime::cluster::ClusterProfile::from_file(c)?.wire.unwrap_or(WireDtype::F32),
        (None, None) => WireDtype::F32,
    };
    // Local-update methods stop at the end of the outer round containing --stop-at.
    let end = method.stop_boundary(opts.stop_at.unwrap_or(t.steps).min(t.steps), t.steps);
    let plan = Plan {
        steps: t.steps,
        end,
        grad_accum: t.grad_accum,
        schedule: cfg.schedule(),
        optimizer: cfg.optimizer.clone(),
        decay: decay_segments(&init.layout, &cfg),
        grad_clip: t.grad_clip,
        fixed_micro_batches: cfg.parallel.fixed_micro_batches,
        wire,
        seed: t.seed,
        faults,
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

/// The job's shape under `runtime`.
pub fn topology(runtime: &Runtime) -> Topology {
    runtime.topology()
}

impl Setup {
    /// Worker `rank`: a replica of the initial model and its shard of the
    /// data, continuing its stream when resuming.
    pub fn worker(&self, rank: usize) -> Result<Worker> {
        let t = &self.cfg.train;
        let shard = shard_range(self.tokens.len(), rank, self.world);
        let model = Gpt::from_params(self.model_cfg.clone(), self.init.params.clone(), t.seed)?;
        let mut w = Worker::new(model, self.tokens.clone(), shard, t.batch_size, self.seq, t.seed, rank).with_context(
            || format!("worker {rank} of {}: its data shard is too small; use fewer workers or more text", self.world),
        )?;
        if let Some(r) = &self.resumed {
            if let Some(s) = r.part(rank)?.worker {
                w.restore(s)
                    .with_context(|| format!("worker {rank}: the checkpoint's sampler does not fit this corpus"))?;
            }
        }
        Ok(w)
    }

    /// Tokens per micro-batch.
    pub fn tokens_per_micro_batch(&self) -> u64 {
        (self.cfg.train.batch_size * self.seq) as u64
    }

    /// What every checkpoint of this run shares.
    pub fn identity(&self) -> Result<RunIdentity> {
        Ok(RunIdentity {
            run_dir: self.cfg.train.out_dir.clone(),
            cfg: self.cfg.clone(),
            model: self.model_cfg.clone(),
            method: self.method.name().into(),
            topology: topology(&self.runtime),
            tokenizer_json: self.data.tokenizer.to_json()?,
            tokens_per_micro_batch: self.tokens_per_micro_batch(),
        })
    }

    /// The metrics log (when `write`) and progress (when not quiet) over
    /// `workers`' rounds, continuing a resumed run's log.
    pub fn round_log(&self, write: bool, workers: usize) -> Result<RoundLog> {
        let pooled = self.method.needs_server();
        let dir = &self.cfg.train.out_dir;
        let (log, first, tokens, pool) = match (&self.resumed, write) {
            (None, true) => (Some(MetricsLog::open(dir, None)?), 0, 0, Vec::new()),
            (None, false) => (None, 0, 0, Vec::new()),
            (Some(r), true) => {
                let l = resume_log(dir, &r.into(), workers, pooled, self.tokens_per_micro_batch())?;
                (Some(l.log), l.first, l.tokens, l.pool)
            }
            (Some(r), false) => (None, logged_rounds(&r.into(), workers, pooled), r.tokens_seen, Vec::new()),
        };
        Ok(RoundLog::new(
            log,
            RoundLogSpec {
                workers,
                first,
                tokens,
                pool,
                total: self.plan.steps,
                tokens_per_micro_batch: self.tokens_per_micro_batch(),
                schedule: self.plan.schedule.clone(),
                virtual_time: matches!(self.runtime, Runtime::Sim(_)),
                pooled,
                quiet: self.quiet || (write && workers > 1 && matches!(self.cfg.parallel.backend.as_str(), "mpi")),
                label: self.label.clone(),
            },
        ))
    }

    /// Each participant's part to resume from (empty for a fresh run).
    pub fn resumed_parts(&self) -> Result<Vec<Option<crate::strategy::SavedPart>>> {
        match &self.resumed {
            None => Ok(Vec::new()),
            Some(r) => (0..topology(&self.runtime).participants()).map(|p| r.part(p).map(Some)).collect(),
        }
    }

    /// The line announcing the run.
    pub fn banner(&self, backend: &str) -> String {
        let rt = match &self.runtime {
            Runtime::Real(_) => "real",
            Runtime::Sim(_) => "sim",
        };
        let t = &self.cfg.train;
        let from = match &self.resumed {
            Some(r) => format!(" (resuming round {} from {})", r.round, r.dir.display()),
            None => String::new(),
        };
        format!(
            "training {} params with {} on {} workers{} ({rt} runtime, {backend} backend) for rounds {}..{} of {}{from} -> {}",
            self.init.num_params(),
            self.method,
            self.world,
            if self.runtime.topology().server { " + a parameter server" } else { "" },
            self.resumed.as_ref().map_or(0, |r| r.round),
            self.plan.end,
            t.steps,
            t.out_dir.display()
        )
    }
}

/// Train with `cfg.parallel.method`, all workers in this process.
pub fn run_parallel(cfg: RunConfig, opts: &RunOptions) -> Result<ParallelSummary> {
    if cfg.parallel.backend != "local" {
        bail!("backend `{}` runs one worker per process: launch it with mpirun (see docs/mpi.md); in-process runs use --backend local", cfg.parallel.backend);
    }
    let s = setup(cfg, opts)?;
    let workers = (0..s.world).map(|r| s.worker(r)).collect::<Result<Vec<_>>>()?;
    if !s.quiet {
        eprintln!("{}", s.banner("local"));
    }
    let log = Arc::new(s.round_log(true, s.world)?);
    let writer = Arc::new(CheckpointWriter::new(s.identity()?, s.init.num_params()));
    let hooks = Hooks {
        observer: Some(log.clone()),
        checkpoints: Checkpointing { every: s.cfg.train.checkpoint_every, sink: Some(writer.clone()) },
        resumed: s.resumed_parts()?,
    };
    let reports = run_cluster(&s.method, &s.runtime, workers, &s.plan, &hooks)?;
    drop(hooks);
    let log = Arc::into_inner(log).expect("the run is over: one owner left");
    let checkpoint = writer
        .written()
        .last()
        .map(|(_, d)| d.clone())
        .context("the run ended without writing its final checkpoint")?;
    finish(s, reports, log, checkpoint)
}

/// Everything after the workers ran: the evaluation, events, plots and
/// trace, from all participants' reports (in participant order).
pub fn finish(s: Setup, reports: Vec<WorkerReport>, log: RoundLog, checkpoint: PathBuf) -> Result<ParallelSummary> {
    let this_run = log.finish()?;
    let Setup { cfg, model_cfg, method, data, init, world, plan, seq, quiet, .. } = s;
    let t = &cfg.train;
    let say = |s: String| {
        if !quiet {
            eprintln!("{s}");
        }
    };
    let participants = reports.len();
    let spans: Vec<_> = reports.iter().flat_map(|r| r.events.spans().to_vec()).collect();
    let applied: u64 = reports.iter().flat_map(|r| &r.points).map(|p| p.micro_batches).sum();
    let summary = metrics::summarize(&spans, participants, applied * (t.batch_size * seq) as u64)?;
    let params = assemble_model(init.num_params(), reports.iter().filter_map(|r| r.model.clone()))?;
    let mut model = Gpt::from_params(model_cfg.clone(), params, t.seed)?;
    let val_loss = evaluate(&mut model, &data.val, seq, t.batch_size, t.eval_windows);
    // The whole run's rounds, a resumed run's earlier ones included.
    let rounds = read_rounds(&t.out_dir).unwrap_or(this_run);
    let last = rounds.last();
    // Reopened to append, keeping every line: under a server a fast
    // worker's steps and the server's updates can pass plan.end.
    let mut mlog = MetricsLog::open(&t.out_dir, Some(u64::MAX))?;
    let eval = super::metrics::EvalRecord {
        step: plan.end,
        tokens: last.map_or(0, |r| r.tokens),
        val_loss,
        val_ppl: val_loss.exp(),
        wall_s: last.map_or(0.0, |r| r.wall_s),
    };
    mlog.write("eval", &eval)?;
    metrics::write_jsonl(
        &t.out_dir.join("events.jsonl"),
        &EventLog::merge(reports.iter().map(|r| r.events.clone()).collect()).into_spans(),
        Some(&summary),
    )?;
    for (file, title, x_label, x) in [
        (
            "loss_vs_tokens.svg",
            "training loss vs tokens",
            "tokens",
            (|r: &RoundRecord| r.tokens as f64) as fn(&RoundRecord) -> f64,
        ),
        ("loss_vs_time.svg", "training loss vs time", "seconds", |r: &RoundRecord| r.wall_s),
    ] {
        let series = [metrics::plot::Series {
            name: method.to_string(),
            points: rounds.iter().map(|r| (x(r), r.loss as f64)).collect(),
        }];
        metrics::plot::line_plot(&t.out_dir.join(file), title, x_label, "loss", &series)?;
    }
    if let Some(path) = &cfg.parallel.trace {
        metrics::write_trace(path, &spans, participants)?;
        say(format!("trace written to {} (open in https://ui.perfetto.dev or chrome://tracing)", path.display()));
    }
    crate::util::atomic_write(&t.out_dir.join("config.toml"), cfg.to_toml().as_bytes())?;
    if !quiet {
        eprint!("{}", report_table(&method, &summary, &reports, init.num_params()));
    }
    say(format!("done: val loss {val_loss:.4}  val ppl {:.2}  checkpoint {}", val_loss.exp(), checkpoint.display()));
    let final_loss = rounds.last().map_or(f32::NAN, |r| r.loss);
    Ok(ParallelSummary { method, rounds, world, final_loss, val_loss, summary, reports, checkpoint })
}

/// The run-level rounds in `RUN/metrics.jsonl` (`None` if it does not read).
fn read_rounds(run_dir: &std::path::Path) -> Option<Vec<RoundRecord>> {
    let text = std::fs::read_to_string(run_dir.join("metrics.jsonl")).ok()?;
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["kind"] == "train")
        .map(|v| {
            Some(RoundRecord {
                step: v["step"].as_u64()?,
                tokens: v["tokens"].as_u64()?,
                loss: v["loss"].as_f64()? as f32,
                lr: v["lr"].as_f64()? as f32,
                wall_s: v["wall_s"].as_f64()?,
            })
        })
        .collect()
}

/// Human-readable per-participant table: compute, comm, idle, micro-batches
/// per round, bytes, memory by category next to Table 1's formula.
/// Totals, shares and "per worker" figures are over the workers only; a
/// parameter server's row and line are its own (`Summary::split_workers`).
pub fn report_table(method: &Method, all: &Summary, reports: &[WorkerReport], params: usize) -> String {
    let mut out = String::new();
    let pct = |x: Option<f64>| x.map_or("-".into(), |v| format!("{:.0}%", 100.0 * v));
    let server_rank = method.needs_server().then(|| reports.len() - 1);
    let (s, server) = all.split_workers(server_rank.unwrap_or(all.workers.len()));
    out += &format!(
        "time {:.2} s  tokens/s {:.0} (tokens applied)  overlap {}  idle {}  sent {:.1} MB (workers)\n",
        s.wall_s,
        s.tokens_per_s.unwrap_or(0.0),
        pct(s.overlap_ratio),
        pct(s.idle_share),
        s.bytes_sent as f64 / 1e6
    );
    out += "worker  compute_s    comm_s    idle_s  mb/round  sent_MB\n";
    for w in s.workers.iter().chain(&server) {
        let mb = w.micro_batches.as_ref().map_or("-".into(), |m| format!("{:.2}", m.mean));
        let name = if Some(w.worker) == server_rank { "server".to_string() } else { w.worker.to_string() };
        let f = |x: f64, width: usize| metrics::fixed(x, 3, width);
        out += &format!(
            "{:>6} {} {} {} {:>9} {}\n",
            name,
            f(w.compute_s, 10),
            f(w.comm_s, 9),
            f(w.idle_s, 9),
            mb,
            metrics::fixed(w.bytes_sent as f64 / 1e6, 1, 8)
        );
    }
    let rounds = reports[0].points.len().max(1) as f64;
    let n = s.world.max(1) as f64;
    out += &format!(
        "bytes per worker per round: {:.1} kB in all, {:.1} kB inside nodes, {:.1} kB between nodes\n",
        s.bytes_sent as f64 / n / rounds / 1e3,
        s.bytes_intra as f64 / n / rounds / 1e3,
        s.bytes_inter as f64 / n / rounds / 1e3,
    );
    if let Some(b) = reports[0].exchange {
        out += &format!(
            "exchange: {} B per worker every {} step(s) for {} B of f32 gradient: compression {:.4}\n",
            b.payload_bytes,
            b.every,
            b.dense_bytes,
            b.compression()
        );
    }
    let m = &reports[0].memory;
    let mb = |b: usize| b as f64 / 1e6;
    let workers = reports.len() - usize::from(server_rank.is_some());
    let table1 = table1_bytes(method, params as f64, workers as f64, 12.0);
    let formula = if table1.is_finite() {
        format!("; Table 1 formula (bf16, K=12): {:.1} MB", table1 / 1e6)
    } else {
        String::new()
    };
    out += &format!(
        "memory per worker (f32): params {:.1} MB, grads {:.1} MB, comm buffers {:.1} MB, optimizer {:.1} MB, outer state {:.1} MB = {:.1} MB{formula}\n",
        mb(m.params),
        mb(m.grads),
        mb(m.comm_buffers),
        mb(m.optimizer),
        mb(m.outer),
        mb(m.total()),
    );
    if let Some(r) = server_rank.and_then(|p| reports.get(p)) {
        let per: Vec<String> = r.updates.iter().enumerate().map(|(w, u)| format!("worker {w}: {u}")).collect();
        out += &format!(
            "server (participant {}): {} updates applied ({}); holds theta {:.1} MB and the outer state {:.1} MB; sent {:.1} MB, idle {} s\n",
            r.rank,
            r.updates.iter().sum::<u64>(),
            per.join(", "),
            mb(r.memory.params),
            mb(r.memory.outer),
            server.iter().map(|w| w.bytes_sent).sum::<u64>() as f64 / 1e6,
            metrics::fixed(server.iter().map(|w| w.idle_s).sum::<f64>(), 3, 0),
        );
        let faults: Vec<_> = reports.iter().flat_map(|r| r.faults.clone()).collect();
        if !faults.is_empty() {
            let sent: Vec<String> = reports[..workers].iter().map(|r| r.sent.to_string()).collect();
            out += &format!(
                "membership: {} (updates sent per worker: {})\n",
                crate::strategy::membership::describe_intervals(&faults, workers, s.wall_s),
                sent.join(", ")
            );
        }
    }
    if let Some(r) = server_rank.and_then(|p| reports.get(p)).filter(|r| !r.shard_rounds.is_empty()) {
        // Eq. 2 keeps the shards' steps in proportion to their sizes.
        let mut steps = vec![0u64; r.shard_rounds.iter().map(|x| x.shard + 1).max().unwrap_or(0)];
        r.shard_rounds.iter().for_each(|x| steps[x.shard] += x.steps);
        let per: Vec<String> = steps.iter().enumerate().map(|(i, n)| format!("{i}: {n}")).collect();
        out += &format!("inner steps handed out per data shard: {}\n", per.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_split_the_workers_or_say_how() {
        let model = GptConfig::nano();
        let p = |nodes, rt: &str| ParallelSection {
            workers: Some(4),
            nodes: Some(nodes),
            runtime: rt.into(),
            ..ParallelSection::default()
        };
        let e = runtime(&p(3, "sim"), &model, 1000, 64).err().unwrap().to_string();
        assert_eq!(
            e,
            "--nodes 3 does not divide --workers 4: every node holds the same number of workers, e.g. --workers 6 --nodes 3"
        );
        assert!(runtime(&p(0, "real"), &model, 1000, 64).err().unwrap().to_string().contains("--nodes 2"));
        for rt in ["sim", "real"] {
            let (_, r) = runtime(&p(2, rt), &model, 1000, 64).unwrap();
            assert_eq!(topology(&r), Topology { workers: 4, per_node: 2, server: false });
        }
    }
}
