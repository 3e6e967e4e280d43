//! `lowcomm compare`: run several methods on the same model, data and
//! cluster; write a table, the curves (CSV) and plots (SVG) to a directory.

use super::TrainArgs;
use crate::metrics::plot::{line_plot, Series};
use crate::train::parallel::ParallelSummary;
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::PathBuf;

/// Moving average over `w` rounds (the per-round training loss is noisy).
fn smooth(x: &[f32], w: usize) -> Vec<f64> {
    (0..x.len())
        .map(|i| x[i.saturating_sub(w - 1)..=i].iter().map(|&v| v as f64).sum::<f64>() / (i.min(w - 1) + 1) as f64)
        .collect()
}

/// `NAME:key=value:...`: a method and settings written into its
/// `[methods.NAME]` section for this run only (e.g.
/// `flexdemo:replicator=random:compression=0.05`), so one comparison can
/// hold one method several ways. Values are TOML (`true`, `0.05`,
/// `"random"`); a bare word is taken as a string.
fn variant(spec: &str) -> Result<(String, Vec<(String, toml::Value)>)> {
    let mut parts = spec.split(':');
    let name = parts.next().unwrap_or_default().to_string();
    let mut kvs = Vec::new();
    for kv in parts {
        let Some((k, v)) = kv.split_once('=') else {
            anyhow::bail!(
                "--methods {spec}: `{kv}` is not key=value; e.g. flexdemo:replicator=random:compression=0.05"
            );
        };
        let value = format!("v = {v}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(v.to_string()));
        kvs.push((k.to_string(), value));
    }
    Ok((name, kvs))
}

/// Run each method in `methods` with the flags of `train`; write to `out`.
pub fn compare(methods: &[String], out: &PathBuf, train: &TrainArgs) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut runs: Vec<(String, ParallelSummary)> = Vec::new();
    let mut runner = super::mpi::runner(train.backend.as_deref().unwrap_or("local"))?;
    let root = runner.root;
    let say = |s: String| {
        if root {
            eprintln!("{s}");
        }
    };
    // Every variant's configuration is built and checked before the first
    // run, so a typo in the last one does not cost the runs before it.
    let variants = methods.iter().map(|m| variant(m)).collect::<Result<Vec<_>>>()?;
    let names: Vec<String> = variants.iter().map(|(n, _)| n.clone()).collect();
    let mut configs = Vec::with_capacity(methods.len());
    for (m, (name, settings)) in methods.iter().zip(variants) {
        let dir = m.replace([':', '=', '/'], "_");
        // Method flags go to the methods that take them (--tau to the local-update ones).
        let mut args = super::commands::flags_for(train, &name, &names)?;
        args.method = Some(name.clone());
        args.out = Some(out.join("runs").join(&dir));
        args.trace = Some(out.join("runs").join(&dir).join("trace.json"));
        let (mut cfg, _) = super::commands::run_config(&args)?;
        for (k, v) in settings {
            cfg.methods.entry(name.clone()).or_default().insert(k, v);
        }
        crate::strategy::Method::from_config(&name, cfg.methods.get(&name))
            .with_context(|| format!("--methods {m} (values are TOML: true/false, numbers, \"strings\")"))?;
        configs.push(cfg);
    }
    for (i, (m, cfg)) in methods.iter().zip(configs).enumerate() {
        say(format!("compare [{}/{}]: {m} ({} to go after it)", i + 1, methods.len(), methods.len() - i - 1));
        let opts = crate::train::RunOptions { quiet: train.quiet, ..Default::default() };
        let Some(s) = (runner.run)(cfg, &opts)? else {
            continue; // an MPI rank other than 0: rank 0 writes the results
        };
        say(format!(
            "compare: {m}: final loss {:.4}, val loss {:.4}, {:.2} s",
            s.final_loss, s.val_loss, s.summary.wall_s
        ));
        runs.push((m.clone(), s));
    }
    if !root {
        return Ok(());
    }
    // Time for each method to reach the baseline's final (smoothed) training loss.
    const W: usize = 10;
    let base = runs.iter().position(|(m, _)| m == "zero1").unwrap_or(0);
    let base_loss: Vec<f32> = runs[base].1.rounds.iter().map(|r| r.loss).collect();
    let target = *smooth(&base_loss, W).last().unwrap_or(&f64::NAN);
    let reach = |s: &ParallelSummary| {
        let l: Vec<f32> = s.rounds.iter().map(|r| r.loss).collect();
        smooth(&l, W).iter().zip(&s.rounds).find(|(v, _)| **v <= target).map(|(_, r)| r.wall_s)
    };
    let base_reach = reach(&runs[base].1);
    let mut md = String::new();
    writeln!(md, "command: `lowcomm {}`\n", std::env::args().skip(1).collect::<Vec<_>>().join(" "))?;
    writeln!(md, "| method | rounds | tokens | final train loss | val loss | time (s) | time to {}'s final loss (s) | vs {} | overlap | idle | micro-batches/round |", runs[base].0, runs[base].0)?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    let mut csv = String::from("method,step,tokens,wall_s,loss\n");
    for (m, s) in &runs {
        let last = s.rounds.last();
        let r = reach(s);
        let ratio = match (r, base_reach) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
            _ => "-".into(),
        };
        let mbr = s.summary.workers.iter().filter_map(|w| w.micro_batches.as_ref().map(|m| m.mean)).sum::<f64>()
            / s.world as f64;
        let pct = |x: Option<f64>| x.map_or("-".into(), |v| format!("{:.0}%", 100.0 * v));
        writeln!(
            md,
            "| {m} | {} | {} | {:.4} | {:.4} | {:.2} | {} | {ratio} | {} | {} | {mbr:.2} |",
            s.rounds.len(),
            last.map_or(0, |r| r.tokens),
            *smooth(&s.rounds.iter().map(|r| r.loss).collect::<Vec<_>>(), W).last().unwrap_or(&f64::NAN),
            s.val_loss,
            s.summary.wall_s,
            r.map_or("not reached".into(), |t| format!("{t:.2}")),
            pct(s.summary.overlap_ratio),
            pct(s.summary.idle_share),
        )?;
        for rec in &s.rounds {
            writeln!(csv, "{m},{},{},{},{}", rec.step, rec.tokens, rec.wall_s, rec.loss)?;
        }
    }
    writeln!(md, "\nTraining loss is a {W}-round moving average of the mean over workers; time is virtual under `--runtime sim`.")?;
    writeln!(md, "\nPer round, averaged over workers (c = compute, m = communication):\n")?;
    writeln!(md, "| method | round (s) | c (s) | m (s) | round / max(c, m) | round / (c + m) |")?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    for (m, s) in &runs {
        let r = s.rounds.len().max(1) as f64;
        let n = s.world as f64;
        let c = s.summary.workers.iter().map(|w| w.compute_s).sum::<f64>() / n / r;
        let k = s.summary.workers.iter().map(|w| w.comm_s).sum::<f64>() / n / r;
        let round = s.summary.wall_s / r;
        writeln!(md, "| {m} | {round:.4} | {c:.4} | {k:.4} | {:.2} | {:.2} |", round / c.max(k), round / (c + k))?;
    }
    writeln!(md, "\nBytes per worker per round (ring model; between nodes = one member per node):\n")?;
    writeln!(
        md,
        "| method | all (kB) | inside nodes (kB) | between nodes (kB) | exchange payload (B) | compression |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    for (m, s) in &runs {
        let per = |b: u64| b as f64 / s.world.max(1) as f64 / s.rounds.len().max(1) as f64 / 1e3;
        let ex = s.reports.first().and_then(|r| r.exchange);
        writeln!(
            md,
            "| {m} | {:.1} | {:.1} | {:.1} | {} | {} |",
            per(s.summary.bytes_sent),
            per(s.summary.bytes_intra),
            per(s.summary.bytes_inter),
            ex.map_or("-".into(), |b| b.payload_bytes.to_string()),
            ex.map_or("-".into(), |b| format!("{:.4}", b.compression())),
        )?;
    }
    crate::util::atomic_write(&out.join("summary.md"), md.as_bytes())?;
    crate::util::atomic_write(&out.join("curves.csv"), csv.as_bytes())?;
    let series = |x: fn(&crate::train::parallel::RoundRecord) -> f64| -> Vec<Series> {
        runs.iter()
            .map(|(m, s)| {
                let sm = smooth(&s.rounds.iter().map(|r| r.loss).collect::<Vec<_>>(), W);
                Series { name: m.clone(), points: s.rounds.iter().zip(sm).map(|(r, l)| (x(r), l)).collect() }
            })
            .collect()
    };
    line_plot(
        &out.join("loss_vs_tokens.svg"),
        "training loss vs tokens",
        "tokens",
        "loss",
        &series(|r| r.tokens as f64),
    )?;
    line_plot(&out.join("loss_vs_time.svg"), "training loss vs time", "seconds", "loss", &series(|r| r.wall_s))?;
    print!("{md}");
    eprintln!("wrote {}/summary.md, curves.csv, loss_vs_tokens.svg, loss_vs_time.svg", out.display());
    Ok(())
}
