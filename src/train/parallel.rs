//! `lowcomm train --method M --workers N`: data-parallel training with a
//! strategy, on the real or the simulated runtime; writes metrics.jsonl,
//! events.jsonl (spans + summary), an optional Chrome trace, and a final
//! checkpoint of the model (the sharded optimizer state is not saved).

use super::config::{ParallelSection, RunConfig};
use super::trainer::{decay_segments, evaluate, open_data};
use crate::checkpoint::{self, TrainState};
use crate::comm::{LinkModel, Tier, WireDtype};
use crate::data::sampler::{shard_range, WindowSampler};
use crate::metrics::{self, EventLog, Summary};
use crate::model::{Gpt, GptConfig};
use crate::runtime::{real::RealSpec, sim::SimSpec};
use crate::strategy::{run_cluster, table1_bytes, Method, Plan, Runtime, Worker, WorkerReport};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;

/// One round of a parallel run, as logged.
#[derive(Clone, Debug, Serialize)]
pub struct RoundRecord {
    /// Rounds completed, this one included.
    pub step: u64,
    /// Tokens processed by all workers so far.
    pub tokens: u64,
    /// Mean training loss over the workers.
    pub loss: f32,
    /// Learning rate used.
    pub lr: f32,
    /// Seconds (virtual under `sim`) at which the round's last work ended.
    pub wall_s: f64,
}

/// What a parallel run ends with.
pub struct ParallelSummary {
    pub method: Method,
    pub rounds: Vec<RoundRecord>,
    pub world: usize,
    pub final_loss: f32,
    pub val_loss: f32,
    pub summary: Summary,
    pub reports: Vec<WorkerReport>,
    pub checkpoint: PathBuf,
}

/// The method, parsed with the DPU warmup applied.
pub fn method(p: &ParallelSection) -> Result<Method> {
    let m: Method = p.method.as_deref().unwrap_or("ddp").parse()?;
    Ok(match m {
        Method::Dpu { .. } => Method::Dpu { warmup_steps: p.dpu_warmup_steps },
        other => other,
    })
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
    let wire = p.wire.unwrap_or(WireDtype::F32);
    let rt = match p.runtime.as_str() {
        "real" => {
            if profile.is_some() {
                bail!("--cluster describes a simulated cluster: use it with --runtime sim (the real runtime takes --link)");
            }
            Runtime::Real(RealSpec { speeds, link, wire })
        }
        "sim" => match profile {
            Some(c) => {
                let mut spec = c.sim_spec(model, params, tokens_per_micro_batch, speeds, p.wire)?;
                if link.is_some() {
                    spec.link = link;
                }
                Runtime::Sim(spec)
            }
            None => Runtime::Sim(SimSpec { micro_batch_s: p.micro_batch_s, speeds, link, wire, comm_scale: 1.0 }),
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
    /// The initial model (identical on every worker).
    pub init: Gpt,
    pub world: usize,
    pub runtime: Runtime,
    pub plan: Plan,
    /// Tokens per sequence.
    pub seq: usize,
}

/// Validates `cfg`, opens the data and builds the initial model and plan.
pub fn setup(cfg: RunConfig) -> Result<Setup> {
    let model_cfg = cfg.validate()?;
    let method = method(&cfg.parallel)?;
    let (mut data, _) = open_data(&cfg, &model_cfg)?;
    let tokens = Arc::new(std::mem::take(&mut data.train));
    let t = &cfg.train;
    let seq = cfg.seq_len(&model_cfg);
    let init = Gpt::new(model_cfg.clone(), t.seed)?;
    let (world, runtime) = runtime(&cfg.parallel, &model_cfg, init.num_params(), t.batch_size * seq)?;
    let plan = Plan {
        steps: t.steps,
        grad_accum: t.grad_accum,
        schedule: cfg.schedule(),
        optimizer: cfg.optimizer.clone(),
        decay: decay_segments(&init.layout, &cfg),
        grad_clip: t.grad_clip,
        fixed_micro_batches: cfg.parallel.fixed_micro_batches,
    };
    Ok(Setup { cfg, model_cfg, method, data, tokens, init, world, runtime, plan, seq })
}

impl Setup {
    /// Worker `rank`: a replica of the initial model and its shard of the data.
    pub fn worker(&self, rank: usize) -> Result<Worker> {
        let t = &self.cfg.train;
        let shard = shard_range(self.tokens.len(), rank, self.world);
        let model = Gpt::from_params(self.model_cfg.clone(), self.init.params.clone(), t.seed)?;
        Worker::new(model, self.tokens.clone(), shard, t.batch_size, self.seq, t.seed, rank).with_context(|| {
            format!("worker {rank} of {}: its data shard is too small; use fewer workers or more text", self.world)
        })
    }

    /// The line announcing the run.
    pub fn banner(&self, backend: &str) -> String {
        let rt = match &self.runtime {
            Runtime::Real(_) => "real",
            Runtime::Sim(_) => "sim",
        };
        let t = &self.cfg.train;
        format!(
            "training {} params with {:?} on {} workers ({rt} runtime, {backend} backend) for {} steps -> {}",
            self.init.num_params(),
            self.method,
            self.world,
            t.steps,
            t.out_dir.display()
        )
    }
}

/// Train with `cfg.parallel.method`, all workers in this process.
pub fn run_parallel(cfg: RunConfig, quiet: bool) -> Result<ParallelSummary> {
    if cfg.parallel.backend != "local" {
        bail!("backend `{}` runs one worker per process: launch it with mpirun (see docs/mpi.md); in-process runs use --backend local", cfg.parallel.backend);
    }
    let s = setup(cfg)?;
    let workers = (0..s.world).map(|r| s.worker(r)).collect::<Result<Vec<_>>>()?;
    if !quiet {
        eprintln!("{}", s.banner("local"));
    }
    let reports = run_cluster(s.method, &s.runtime, workers, &s.plan)?;
    finish(s, reports, quiet)
}

/// Everything after the workers ran: metrics, events, plots, trace and the
/// final checkpoint, from all workers' reports (in rank order).
pub fn finish(s: Setup, reports: Vec<WorkerReport>, quiet: bool) -> Result<ParallelSummary> {
    let Setup { cfg, model_cfg, method, data, tokens, init, world, plan, seq, .. } = s;
    let n = init.num_params();
    let t = &cfg.train;
    let say = |s: String| {
        if !quiet {
            eprintln!("{s}");
        }
    };
    // Metrics: per round, the mean loss over workers and when the round ended.
    let tokens_per_mb = (t.batch_size * seq) as u64;
    let spans: Vec<_> = reports.iter().flat_map(|r| r.events.spans().to_vec()).collect();
    let mut log = super::metrics::MetricsLog::open(&t.out_dir, None)?;
    let mut tokens_so_far = 0u64;
    let mut last_loss = f32::NAN;
    let mut rounds = Vec::with_capacity(t.steps as usize);
    for step in 0..t.steps {
        let loss = (reports.iter().map(|r| r.losses[step as usize] as f64).sum::<f64>() / world as f64) as f32;
        let in_round = spans.iter().filter(|s| s.round == step);
        let (mut end, mut mbs) = (0.0f64, 0u64);
        for s in in_round {
            end = end.max(s.end_s);
            mbs += s.micro_batches as u64;
        }
        tokens_so_far += mbs * tokens_per_mb;
        last_loss = loss;
        let rec = RoundRecord { step: step + 1, tokens: tokens_so_far, loss, lr: plan.schedule.lr(step), wall_s: end };
        log.write("train", &rec)?;
        rounds.push(rec);
    }
    let mut model = Gpt::from_params(model_cfg.clone(), reports[0].params.clone(), t.seed)?;
    let val_loss = evaluate(&mut model, &data.val, seq, t.batch_size, t.eval_windows);
    let total_tokens: u64 = reports.iter().map(|r| r.times.micro_batches).sum::<u64>() * tokens_per_mb;
    let summary = metrics::summarize(&spans, world, total_tokens)?;
    log.write(
        "eval",
        &super::metrics::EvalRecord {
            step: t.steps,
            tokens: tokens_so_far,
            val_loss,
            val_ppl: val_loss.exp(),
            wall_s: summary.end_s,
        },
    )?;
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
            name: format!("{method:?}"),
            points: rounds.iter().map(|r| (x(r), r.loss as f64)).collect(),
        }];
        metrics::plot::line_plot(&t.out_dir.join(file), title, x_label, "loss", &series)?;
    }
    if let Some(path) = &cfg.parallel.trace {
        metrics::write_trace(path, &spans, world)?;
        say(format!("trace written to {} (open in https://ui.perfetto.dev or chrome://tracing)", path.display()));
    }
    crate::util::atomic_write(&t.out_dir.join("config.toml"), cfg.to_toml().as_bytes())?;
    let state = TrainState {
        format_version: checkpoint::FORMAT_VERSION,
        step: t.steps,
        tokens_seen: tokens_so_far,
        model: model_cfg.clone(),
        run_config: cfg.to_toml(),
        optimizer_kind: format!("none ({method:?} shards its optimizer state; not saved)"),
        optimizer_steps: reports[0].optimizer_steps,
        sampler: WindowSampler::new(0..tokens.len(), seq, t.seed, 0)?.state(),
        dropout_rng: model.dropout_rng.clone(),
        wall_s: summary.end_s,
        files: Default::default(),
    };
    let checkpoint =
        checkpoint::save(&t.out_dir, state, &reports[0].params, &[], &data.tokenizer.to_json()?, t.keep_checkpoints)?;
    if !quiet {
        eprint!("{}", report_table(method, &summary, &reports, n));
    }
    say(format!("done: val loss {val_loss:.4}  val ppl {:.2}  checkpoint {}", val_loss.exp(), checkpoint.display()));
    Ok(ParallelSummary { method, rounds, world, final_loss: last_loss, val_loss, summary, reports, checkpoint })
}

/// Human-readable per-worker table: compute, comm, idle, micro-batches per
/// round, bytes, memory by category next to Table 1's formula.
pub fn report_table(method: Method, s: &Summary, reports: &[WorkerReport], params: usize) -> String {
    let mut out = String::new();
    let pct = |x: Option<f64>| x.map_or("-".into(), |v| format!("{:.0}%", 100.0 * v));
    out += &format!(
        "time {:.2} s  tokens/s {:.0}  overlap {}  idle {}  sent {:.1} MB\n",
        s.wall_s,
        s.tokens_per_s.unwrap_or(0.0),
        pct(s.overlap_ratio),
        pct(s.idle_share),
        s.bytes_sent as f64 / 1e6
    );
    out += "worker  compute_s    comm_s    idle_s  mb/round  sent_MB\n";
    for w in &s.workers {
        let mb = w.micro_batches.as_ref().map_or("-".into(), |m| format!("{:.2}", m.mean));
        out += &format!(
            "{:>6} {:>10.3} {:>9.3} {:>9.3} {:>9} {:>8.1}\n",
            w.worker,
            w.compute_s,
            w.comm_s,
            w.idle_s,
            mb,
            w.bytes_sent as f64 / 1e6
        );
    }
    let m = &reports[0].memory;
    let mb = |b: usize| b as f64 / 1e6;
    out += &format!(
        "memory per worker (f32): params {:.1} MB, grads {:.1} MB, comm buffers {:.1} MB, optimizer {:.1} MB = {:.1} MB; Table 1 formula (bf16, K=12): {:.1} MB\n",
        mb(m.params),
        mb(m.grads),
        mb(m.comm_buffers),
        mb(m.optimizer),
        mb(m.total()),
        table1_bytes(method, params as f64, reports.len() as f64, 12.0) / 1e6
    );
    out
}
