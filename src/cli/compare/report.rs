//! The report of a `lowcomm compare` sweep: summary.md, curves.csv, the
//! three SVGs and report.html, from every method's results (one per seed).

use super::budget::budget_line;
use super::curves::{curves_csv, plots};
use super::html;
use super::marks::{FAR_NATS, GIVE_BACK, RISE_FLOOR, SMOOTH};
use super::stats::{tie_rule, ONE_SEED_TIE};
use super::store::MethodResult;
use super::table::{final_loss, memory_total, rows, tables, target_loss, time_to, times_to};
use super::verdict::{verdict, Entrant};
use crate::cli::CompareArgs;
use crate::train::RunConfig;
use anyhow::{Context, Result};

/// The device memory the run's cluster profile gives, if any.
fn device_memory(cfg: &RunConfig) -> Option<f64> {
    let profile = crate::runtime::cluster::ClusterProfile::from_file(cfg.parallel.cluster.as_ref()?).ok()?;
    profile.device.as_ref().and_then(|d| d.memory)
}

/// The machine and the (simulated) cluster, as the report shows them.
fn machine(cfg: &RunConfig, world: usize) -> Vec<(String, String)> {
    let p = &cfg.parallel;
    let cpu = crate::util::cpu_model().unwrap_or_else(|| "unknown".into());
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    vec![
        ("host".into(), format!("{cpu}, {}", crate::util::cpus_and_os())),
        (
            "runtime".into(),
            match p.runtime.as_str() {
                "sim" => "sim (simulated cluster, virtual time)".into(),
                other => format!("{other} (this machine, wall-clock time), backend {}", p.backend),
            },
        ),
        ("workers".into(), world.to_string()),
        (
            "nodes".into(),
            match (p.nodes, &p.cluster) {
                (Some(n), _) => n.to_string(),
                (None, Some(_)) => "the cluster profile's".into(),
                (None, None) => "1".into(),
            },
        ),
        ("cluster profile".into(), opt(p.cluster.as_ref().map(|c| c.display().to_string()))),
        ("link".into(), opt(p.link.clone())),
        ("wire".into(), opt(p.wire.map(|w| format!("{w:?}")))),
        ("speeds".into(), opt(p.speeds.as_ref().map(|s| format!("{s:?}")))),
        ("model".into(), opt(cfg.model.preset.clone())),
        (
            "steps x batch".into(),
            format!(
                "{} steps, {} sequences per micro-batch, grad accum {}",
                cfg.train.steps, cfg.train.batch_size, cfg.train.grad_accum
            ),
        ),
    ]
}

/// summary.md, curves.csv, the three SVGs and report.html, each atomically.
pub fn write_report(a: &CompareArgs, groups: &[Vec<MethodResult>], notes: &[String]) -> Result<()> {
    let out = &a.results;
    let results: Vec<MethodResult> = groups.iter().flatten().cloned().collect();
    let results = &results[..];
    let seeds = groups.iter().map(Vec::len).max().unwrap_or(1);
    let first: RunConfig = toml::from_str(&results[0].config).context("a stored result's config does not parse")?;
    let clock = if first.parallel.runtime == "sim" { "virtual" } else { "wall" };
    let rows = rows(groups);
    let target = target_loss(&rows, a.target_loss);
    let t = tables(&rows, target, clock);
    let command = format!("lowcomm {}", std::env::args().skip(1).collect::<Vec<_>>().join(" "));
    let target_says = match a.target_loss {
        Some(v) => format!("--target-loss {v}"),
        None => format!(
            "the median final training loss of the methods neither diverged nor unstable{}, {target:.4}: half of them end at or below it (set it with --target-loss)",
            if seeds > 1 { " (each method's highest seed)" } else { "" }
        ),
    };
    let unit = match first.parallel.budget {
        crate::train::config::BudgetUnit::Tokens => "tokens",
        crate::train::config::BudgetUnit::Rounds => "rounds",
    };
    let device = device_memory(&first);
    let mut legend = vec![
        budget_line(results, unit),
        "Global batch: tokens per optimizer step over all workers, mean over the run (tokens / rounds; for the local-update methods, per inner step).".into(),
        format!("Training loss is a moving average of the mean over workers, over the same tokens for every method: those of the last {SMOOTH} synchronous steps (a round of acco holds several)."),
        "Val loss: the validation loss of the model each run produces, as its checkpoint holds it: the replica (ddp, demo), the gathered shards (zero1, dpu, acco-wp, acco, flexdemo), the last average (local-sgd, overlap-local-sgd, slowmo, co2), the outer model (diloco), the parameter server's (async-diloco).".into(),
        format!("Status: **diverged**: the run stopped on a non-finite loss or value (its curve is kept up to there), or its model's validation loss is not finite or more than {FAR_NATS} nat above its first round's training loss (the untrained model's); **unstable**: its smoothed training loss rose above its lowest so far by more than {:.0}% of its drop down to there (and by more than {RISE_FLOOR} nat), not counting the rise that every run with its seed (the same data) shows over the same tokens. Marked methods set no target loss and are left out of the verdict.", 100.0 * GIVE_BACK),
        format!("Time is {clock}-clock seconds{}.", if clock == "virtual" { " of the simulated cluster" } else { " on this machine" }),
        format!("Time to loss: when the training loss first got to the target: {target_says}."),
        "Sent per worker: bytes each worker sent over the run, all and by tier (ring model; a collective over several nodes with several members each is split as the hierarchical collective the link model times: a ring inside each node, and between nodes a ring over the nodes on each member's share).".into(),
        format!(
            "Memory: one worker's model states (parameters, gradients, communication buffers, optimizer and outer state), f32, as the run measured them; device memory {}.",
            device.map_or("unknown (the cluster profile gives no [device] memory)".to_string(), crate::plan::rank::gb)
        ),
        format!("Verdict: the method that reaches the target loss first and ends at or below it, among those neither diverged nor unstable that fit in device memory; {}.", tie_rule(seeds, ONE_SEED_TIE)),
    ];
    if seeds > 1 {
        legend.insert(0, format!(
            "Seeds: each method ran {seeds} seeds, --seed S and up (runs/METHOD for the first, runs/METHOD-seed-S for the others); final train loss, val loss and time to loss are the mean ± sample standard deviation over the seeds (time to loss: when every seed reached it); the other columns are the first seed's run; a method is marked when any seed is; the plots draw the mean curve with the band from the lowest to the highest seed; curves.csv has every seed."
        ));
    }
    // Per-method notes: what each ran as, why a row is marked, then what was skipped or reused.
    let notes: Vec<String> = groups
        .iter()
        .filter_map(|g| g.first())
        .map(|r| match &r.membership {
            Some(m) => format!("{}: ran as {}; {m}", r.spec, r.label),
            None => format!("{}: ran as {}", r.spec, r.label),
        })
        .chain(
            rows.iter()
                .filter(|w| w.mark.excluded())
                .map(|w| format!("{}: left out of the target loss and the verdict: {}", w.r.spec, w.mark.why)),
        )
        .chain(notes.iter().cloned())
        .collect();
    let notes = &notes[..];
    let entrants: Vec<Entrant> = rows
        .iter()
        .map(|w| Entrant {
            spec: &w.r.spec,
            mark: &w.mark,
            time_to: time_to(w, target),
            reached: times_to(w, target).iter().filter(|t| t.is_some()).count(),
            seeds: w.seeds.len(),
            final_loss: final_loss(w).mean,
            memory: memory_total(w.r),
        })
        .collect();
    let verdict = verdict(&entrants, target, clock, device);
    let mut md = format!("command: `{command}`\n\n");
    md += &t.main.markdown();
    md += &legend.iter().map(|l| format!("\n{l}")).collect::<String>();
    md += "\n\nPer round, averaged over workers (c = compute, m = communication):\n\n";
    md += &t.per_round.markdown();
    md += "\nBytes per worker per round (ring model; tiers as in the table above; largest transfer: the most one worker sent in one collective or message, the peak its link must carry at once):\n\n";
    md += &t.bytes.markdown();
    md += &format!("\nNotes:\n\n{}", notes.iter().map(|n| format!("- {n}\n")).collect::<String>());
    md += &format!("\nVerdict:\n\n{}\n", verdict[0]);
    md += &verdict[1..].iter().map(|l| format!("- {l}\n")).collect::<String>();
    crate::util::atomic_write(&out.join("summary.md"), md.as_bytes())?;
    crate::util::atomic_write(&out.join("curves.csv"), curves_csv(&rows)?.as_bytes())?;
    let svgs = plots(&rows, clock)?;
    for (name, svg) in &svgs {
        crate::util::atomic_write(&out.join(name), svg.as_bytes())?;
    }
    let mut machine = machine(&first, results[0].world);
    machine.push((
        "seeds".into(),
        match seeds {
            1 => format!("1 (--seed {})", first.train.seed),
            n => format!("{n} (--seed {} and up)", first.train.seed),
        },
    ));
    let page =
        html::Page { command: &command, machine: &machine, plots: &svgs, legend: &legend, notes, verdict: &verdict };
    crate::util::atomic_write(&out.join("report.html"), html::render(&page, &t).as_bytes())?;
    print!("{md}");
    eprintln!(
        "wrote {}/report.html, summary.md, curves.csv, loss_vs_tokens.svg, loss_vs_time.svg, loss_vs_bytes.svg",
        out.display()
    );
    Ok(())
}
