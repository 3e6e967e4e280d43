//! What a data-parallel run leaves when its workers are done: the
//! evaluation of the assembled model, the `eval` line, events.jsonl with the
//! spans and summary, plots, an optional Chrome trace, and the
//! per-participant report it prints (`report_table`).

use super::log::{RoundLog, RoundRecord};
use super::setup::{ParallelSummary, Setup};
use crate::metrics::{self, EventLog, Summary};
use crate::model::Gpt;
use crate::strategy::{assemble_model, table1_bytes, Method, WorkerReport};
use crate::train::metrics::MetricsLog;
use crate::train::trainer::evaluate;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Refuses a `--trace` path that the trace, written once every round has
/// run, could not be written to: an existing directory, a path with no file
/// name, or one under a file. Missing parent directories are fine (they are
/// created).
pub fn check_trace(path: &Path) -> Result<()> {
    let example = |dir: &Path| dir.join("trace.json").display().to_string();
    if path.is_dir() {
        bail!(
            "--trace {}: that is a directory; give a file to write the trace to, e.g. --trace {}",
            path.display(),
            example(path)
        );
    }
    if path.file_name().is_none() {
        bail!(
            "--trace {}: not a file path; give a file to write the trace to, e.g. --trace trace.json",
            path.display()
        );
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if let Some(file) = parent.ancestors().find(|a| a.exists()).filter(|a| !a.is_dir()) {
        bail!(
            "--trace {}: {} is a file, not a directory; give a trace path in a directory, e.g. --trace trace.json",
            path.display(),
            file.display()
        );
    }
    Ok(())
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
    let mut model = Gpt::from_params(model_cfg.clone(), params, t.seed)?.on(t.device.for_worker(0, 1), t.precision)?;
    let val_loss = evaluate(&mut model, &data.val, seq, t.batch_size, t.eval_windows);
    // The whole run's rounds, a resumed run's earlier ones included.
    let rounds = read_rounds(&t.out_dir).unwrap_or(this_run);
    let last = rounds.last();
    // Reopened to append, keeping every line (under a server a fast
    // worker's steps and the server's updates can pass plan.end), without
    // reading and rewriting the log as a resumed run's trim does.
    let mut mlog = MetricsLog::append_to(&t.out_dir)?;
    let eval = crate::train::metrics::EvalRecord {
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
    // The run's config before the trace: the run directory is complete (and
    // resumable) even if the trace cannot be written.
    crate::util::atomic_write(&t.out_dir.join("config.toml"), cfg.to_toml().as_bytes())?;
    if let Some(path) = &cfg.parallel.trace {
        metrics::write_trace(path, &spans, participants)
            .with_context(|| format!("--trace {}: cannot write the trace", path.display()))?;
        say(format!("trace written to {} (open in https://ui.perfetto.dev or chrome://tracing)", path.display()));
    }
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
                crate::strategy::diloco::membership::describe_intervals(&faults, workers, s.wall_s),
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
