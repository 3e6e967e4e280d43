//! `lowcomm compare`: run several methods (`--methods all`: every one) on
//! the same model, data and cluster; write a table (summary.md), the curves
//! (curves.csv), three plots (SVG) and one self-contained report.html to a
//! directory. Each finished method leaves `runs/DIR/result.json`, so the
//! same command run again reuses it (`--fresh`: rerun everything).
//!
//! Every method trains the same tokens unless `--budget rounds` is given,
//! and the report says whether they did (table.rs). A method whose
//! run stops with `strategy::Diverged` does not end the sweep: its row is
//! marked, with its curve up to there. Rows are marked diverged or unstable
//! by marks.rs and left out of the target loss and the verdict
//! (verdict.rs) that ends summary.md and report.html.

mod html;
mod marks;
mod methods;
mod store;
mod table;
mod verdict;

use super::{CompareArgs, TrainArgs};
use crate::strategy::method_spec::{expand, Entry};
use crate::strategy::Diverged;
use crate::train::RunConfig;
use anyhow::{bail, Context, Result};
use marks::{FAR_NATS, GIVE_BACK, RISE_FLOOR, SMOOTH};
use methods::misfit;
use std::path::Path;
use std::time::Instant;
use store::MethodResult;
use table::{budget_line, curves_csv, final_loss, memory_total, plots, rows, tables, target_loss, time_to};
use verdict::{verdict, Entrant, TIE};

/// One method of the sweep, configured.
struct Planned {
    entry: Entry,
    cfg: RunConfig,
    /// The configuration as TOML: a stored result counts only under the same one.
    config: String,
    /// The method with its settings (`co2 (tau 12, ...)`).
    label: String,
    /// A complete result from an earlier invocation.
    done: Option<MethodResult>,
}

/// Builds and checks every entry's configuration before the first run, so a
/// typo in the last one does not cost the runs before it. Misfits that
/// `all` added are skipped (with a note); named ones are refused.
fn configure(a: &CompareArgs, out: &Path, notes: &mut Vec<String>) -> Result<Vec<Planned>> {
    let entries = expand(&a.methods)?;
    let names: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    let mut planned = Vec::with_capacity(entries.len());
    for entry in entries {
        let dir = out.join("runs").join(entry.dir());
        // Method flags go to the methods that take them (--tau to the local-update ones).
        let mut args = super::train_config::flags_for(&a.train, &entry.name, &names)?;
        args.method = Some(entry.name.clone());
        args.out = Some(dir.clone());
        args.trace = Some(dir.join("trace.json"));
        let (mut cfg, _) = super::train_config::run_config_with(&args, &entry.settings)?;
        // Every method on the same tokens unless --budget rounds asks for the papers' rounds.
        if a.train.budget.is_none() {
            cfg.parallel.budget = crate::train::config::BudgetUnit::Tokens;
        }
        let method = crate::strategy::Method::from_config(&entry.name, cfg.methods.get(&entry.name))
            .with_context(|| format!("--methods {} (values are TOML: true/false, numbers, \"strings\")", entry.spec))?;
        if let Some(why) = misfit(&method, &cfg) {
            if !entry.implied {
                bail!("--methods {}: {} does not fit this setup: {why}", entry.spec, entry.name);
            }
            notes.push(format!("{}: skipped: {why}", entry.spec));
            continue;
        }
        // A fault plan naming a worker the run lacks is refused before the first run (compare never resumes).
        crate::train::parallel::fault_plan(&cfg, &method, false)?;
        let config = cfg.to_toml();
        let done = if a.fresh { None } else { MethodResult::load(&dir, &config) };
        planned.push(Planned { entry, cfg, config, label: method.to_string(), done });
    }
    Ok(planned)
}

/// The sweep's remaining time: seconds per step of the methods run so far
/// times the steps of those still to run; `None` before the first finishes.
fn eta_s(finished: &[(f64, u64)], remaining_steps: u64) -> Option<f64> {
    let (secs, steps) = finished.iter().fold((0.0, 0u64), |(s, n), (t, k)| (s + t, n + k));
    (steps > 0).then(|| secs / steps as f64 * remaining_steps as f64)
}

/// Refuses the `train` flags that belong to one run: compare sets them per
/// method, or has its own way of doing what they ask. Before, they were
/// accepted and ignored.
fn refuse_single_run_flags(t: &TrainArgs) -> Result<()> {
    let single_run = [
        (t.method.is_some(), "--method", "name the methods with --methods"),
        (t.out.is_some(), "--out", "each method's run goes to --results/runs/METHOD"),
        (t.trace.is_some(), "--trace", "each method's run writes --results/runs/METHOD/trace.json"),
        (
            t.resume.is_some(),
            "--resume",
            "run the same compare again: finished methods are reused from --results, unfinished ones start over",
        ),
        (
            t.stop_at.is_some(),
            "--stop-at",
            "compare runs every method to --steps; stop one run with `lowcomm train --stop-at`",
        ),
        (t.force, "--force", "compare starts unfinished runs over itself, and --fresh reruns the finished ones"),
    ];
    match single_run.iter().find(|(given, ..)| *given) {
        Some((_, flag, instead)) => bail!("compare: {flag} applies to one `train` run, not to a sweep: {instead}"),
        None => Ok(()),
    }
}

/// Runs `lowcomm compare`.
pub fn compare(a: &CompareArgs) -> Result<()> {
    refuse_single_run_flags(&a.train)?;
    let out = &a.results;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut runner = super::mpi::runner(a.train.backend.as_deref().unwrap_or("local"))?;
    let root = runner.root;
    let say = |s: String| {
        if root {
            eprintln!("{s}");
        }
    };
    let mut notes = Vec::new();
    let planned = configure(a, out, &mut notes)?;
    for n in &notes {
        say(format!("compare: {n}"));
    }
    if planned.is_empty() {
        bail!("--methods {}: no method fits this setup (see the lines above)", a.methods.join(","));
    }
    let n = planned.len();
    let mut results = Vec::with_capacity(n);
    let mut finished: Vec<(f64, u64)> = Vec::new();
    for (i, p) in planned.iter().enumerate() {
        let spec = &p.entry.spec;
        let dir = p.cfg.train.out_dir.clone();
        if let Some(r) = &p.done {
            say(format!("compare [{}/{n}] {spec}: done earlier, reused ({})", i + 1, dir.display()));
            notes.push(format!("{spec}: done earlier, reused ({})", dir.join(store::RESULT_FILE).display()));
            results.push(r.clone());
            continue;
        }
        let remaining: u64 = planned[i..].iter().filter(|q| q.done.is_none()).map(|q| q.cfg.train.steps).sum();
        let eta = eta_s(&finished, remaining)
            .map_or("sweep ETA after the first method".into(), |s| format!("sweep ETA {s:.1} s"));
        say(format!("compare [{}/{n}] {spec}: running ({eta})", i + 1));
        // A run left unfinished (no result.json) or made under other settings is started over.
        if root && dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        let opts = crate::train::RunOptions { quiet: a.train.quiet, ..Default::default() };
        let started = Instant::now();
        let outcome = (runner.run)(p.cfg.clone(), &opts);
        let took = started.elapsed().as_secs_f64();
        finished.push((took, p.cfg.train.steps));
        let r = match outcome {
            Ok(None) => continue, // an MPI rank other than 0: rank 0 writes the results
            Ok(Some(s)) => {
                say(format!(
                    "compare [{}/{n}] {spec}: final loss {:.4}, val loss {:.4}, {:.2} s run time ({took:.1} s here)",
                    i + 1,
                    s.final_loss,
                    s.val_loss,
                    s.summary.wall_s
                ));
                MethodResult::from_run(spec, p.config.clone(), &s, took)
            }
            // A divergence ends this method's run, not the sweep.
            Err(e) => match diverged(&e) {
                Some(d) if root => {
                    say(format!("compare [{}/{n}] {spec}: {d}", i + 1));
                    let world = workers(&p.cfg)?;
                    MethodResult::from_diverged(spec, p.label.clone(), p.config.clone(), world, &dir, d, took)?
                }
                Some(_) => continue,
                None => return Err(e.context(format!("compare: {spec}"))),
            },
        };
        r.save(&dir)?;
        results.push(r);
    }
    if !root {
        return Ok(());
    }
    write_report(a, &results, &notes)
}

/// The divergence that ended a run, if that is what `e` is.
fn diverged(e: &anyhow::Error) -> Option<&Diverged> {
    e.chain().find_map(|c| c.downcast_ref::<Diverged>())
}

/// Data-parallel workers of a run: `--workers`, else the cluster profile's, else 1.
fn workers(cfg: &RunConfig) -> Result<usize> {
    let p = &cfg.parallel;
    Ok(match (p.workers, &p.cluster) {
        (Some(w), _) => w,
        (None, Some(c)) => crate::runtime::cluster::ClusterProfile::from_file(c)?.workers(),
        (None, None) => 1,
    })
}

/// The device memory the run's cluster profile gives, if any.
fn device_memory(cfg: &RunConfig) -> Option<f64> {
    let profile = crate::runtime::cluster::ClusterProfile::from_file(cfg.parallel.cluster.as_ref()?).ok()?;
    profile.device.as_ref().and_then(|d| d.memory)
}

/// The machine and the (simulated) cluster, as the report shows them.
fn machine(cfg: &RunConfig, world: usize) -> Vec<(String, String)> {
    let p = &cfg.parallel;
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or("unknown".into(), |c| c.to_string());
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    vec![
        ("host".into(), format!("{cpu}, {cores} logical CPUs, {} {}", std::env::consts::OS, std::env::consts::ARCH)),
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
fn write_report(a: &CompareArgs, results: &[MethodResult], notes: &[String]) -> Result<()> {
    let out = &a.results;
    let first: RunConfig = toml::from_str(&results[0].config).context("a stored result's config does not parse")?;
    let clock = if first.parallel.runtime == "sim" { "virtual" } else { "wall" };
    let rows = rows(results);
    let target = target_loss(&rows, a.target_loss);
    let t = tables(&rows, target, clock);
    let command = format!("lowcomm {}", std::env::args().skip(1).collect::<Vec<_>>().join(" "));
    let target_says = match a.target_loss {
        Some(v) => format!("--target-loss {v}"),
        None => format!("the median final training loss of the methods neither diverged nor unstable, {target:.4}: half of them end at or below it (set it with --target-loss)"),
    };
    let unit = match first.parallel.budget {
        crate::train::config::BudgetUnit::Tokens => "tokens",
        crate::train::config::BudgetUnit::Rounds => "rounds",
    };
    let device = device_memory(&first);
    let legend = vec![
        budget_line(results, unit),
        "Global batch: tokens per optimizer step over all workers, mean over the run (tokens / rounds; for the local-update methods, per inner step).".into(),
        format!("Training loss is a moving average of the mean over workers, over the same tokens for every method: those of the last {SMOOTH} synchronous steps (a round of acco holds several)."),
        "Val loss: the validation loss of the model each run produces, as its checkpoint holds it: the replica (ddp, demo), the gathered shards (zero1, dpu, acco-wp, acco, flexdemo), the last average (local-sgd, overlap-local-sgd, slowmo, co2), the outer model (diloco), the parameter server's (async-diloco).".into(),
        format!("Status: **diverged**: the run stopped on a non-finite loss or value (its curve is kept up to there), or its model's validation loss is not finite or more than {FAR_NATS} nat above its first round's training loss (the untrained model's); **unstable**: its smoothed training loss rose above its lowest so far by more than {:.0}% of its drop down to there (and by more than {RISE_FLOOR} nat). Marked methods set no target loss and are left out of the verdict.", 100.0 * GIVE_BACK),
        format!("Time is {clock}-clock seconds{}.", if clock == "virtual" { " of the simulated cluster" } else { " on this machine" }),
        format!("Time to loss: when the training loss first got to the target: {target_says}."),
        "Sent per worker: bytes each worker sent over the run, all and by tier (ring model; a collective over several nodes with several members each is split as the hierarchical collective the link model times: a ring inside each node, and between nodes a ring over the nodes on each member's share).".into(),
        format!(
            "Memory: one worker's model states (parameters, gradients, communication buffers, optimizer and outer state), f32, as the run measured them; device memory {}.",
            device.map_or("unknown (the cluster profile gives no [device] memory)".to_string(), crate::plan::rank::gb)
        ),
        format!("Verdict: the method that reaches the target loss first and ends at or below it, among those neither diverged nor unstable that fit in device memory; times within {:.0}% of the fastest are a tie (one seed).", 100.0 * TIE),
    ];
    // Per-method notes: what each ran as, why a row is marked, then what was skipped or reused.
    let notes: Vec<String> = results
        .iter()
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
            final_loss: final_loss(w),
            memory: memory_total(w.r),
        })
        .collect();
    let verdict = verdict(&entrants, target, clock, device);
    let mut md = format!("command: `{command}`\n\n");
    md += &t.main.markdown();
    md += &legend.iter().map(|l| format!("\n{l}")).collect::<String>();
    md += "\n\nPer round, averaged over workers (c = compute, m = communication):\n\n";
    md += &t.per_round.markdown();
    md += "\nBytes per worker per round (ring model; tiers as in the table above):\n\n";
    md += &t.bytes.markdown();
    md += &format!("\nNotes:\n\n{}", notes.iter().map(|n| format!("- {n}\n")).collect::<String>());
    md += &format!("\nVerdict:\n\n{}\n", verdict[0]);
    md += &verdict[1..].iter().map(|l| format!("- {l}\n")).collect::<String>();
    crate::util::atomic_write(&out.join("summary.md"), md.as_bytes())?;
    crate::util::atomic_write(&out.join("curves.csv"), curves_csv(results)?.as_bytes())?;
    let svgs = plots(&rows, clock)?;
    for (name, svg) in &svgs {
        crate::util::atomic_write(&out.join(name), svg.as_bytes())?;
    }
    let machine = machine(&first, results[0].world);
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_eta_is_seconds_per_finished_step_times_the_steps_to_go() {
        assert_eq!(super::eta_s(&[], 40), None);
        // 10 s for 20 steps and 20 s for 20 steps: 0.75 s per step; 40 to go.
        assert_eq!(super::eta_s(&[(10.0, 20), (20.0, 20)], 40), Some(30.0));
    }
}
