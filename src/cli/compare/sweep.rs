//! What `lowcomm compare` and `lowcomm tune` share: each method entry
//! (a `--methods` spec, or a tune grid point) times each seed configured
//! and checked before the first run ([`configure`]), then run one at a
//! time with its result kept in its run directory and reused by the next
//! invocation ([`Sweep::run`]), with progress lines and an ETA.
//!
//! Seeds: entry e with seed i of N runs with `train.seed` = the run's
//! seed (`--seed`, else the config's) + i, in `runs/DIR` for i = 0 (so a
//! one-seed sweep, and the sweeps made before `--seeds` existed, keep their
//! directories and are reused by a sweep of more seeds) and in
//! `runs/DIR-seed-S` for the others (`-` cannot follow a method name in
//! DIR, whose settings are joined with `_`).

use super::methods::misfit;
use super::store::{self, MethodResult};
use crate::cli::mpi::Runner;
use crate::cli::TrainArgs;
use crate::strategy::method_spec::Entry;
use crate::strategy::Diverged;
use crate::train::RunConfig;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One run of the sweep (an entry with one seed), configured.
pub struct Planned {
    pub entry: Entry,
    /// Its seed (`train.seed`).
    pub seed: u64,
    /// Seeds per entry in the sweep (progress lines name the seed when several).
    pub seeds: u64,
    pub cfg: RunConfig,
    /// The configuration as TOML: a stored result counts only under the same one.
    pub config: String,
    /// The method with its settings (`co2 (tau 12, ...)`).
    pub label: String,
    /// A complete result from an earlier invocation.
    pub done: Option<MethodResult>,
}

/// What a sweep configures its runs from.
pub struct Setup<'a> {
    pub train: &'a TrainArgs,
    /// The results directory (runs go to `out/runs/`).
    pub out: &'a Path,
    /// Rerun even the runs whose result is complete.
    pub fresh: bool,
    /// Seeds per entry, at least 1.
    pub seeds: u64,
    /// What wrote the entries, for errors: `--methods` (compare) or `--grid` (tune).
    pub flag: &'a str,
    /// `[methods.NAME]` sections to put under each entry's own settings
    /// (compare's `--tuned`): an entry's own key wins, and these win over flags.
    pub tuned: &'a toml::Table,
}

/// The run directory of seed number `i` (of value `seed`) of `entry`.
pub fn run_dir(out: &Path, entry: &Entry, i: u64, seed: u64) -> PathBuf {
    let dir = entry.dir();
    out.join("runs").join(if i == 0 { dir } else { format!("{dir}-seed-{seed}") })
}

/// Every entry's runs, one per seed (outer: entries in order; inner: seeds),
/// each configured and checked before the first run, so a typo in the last
/// one does not cost the runs before it. Misfits that `all` added are
/// skipped (with a note); named ones are refused.
pub fn configure(entries: Vec<Entry>, s: &Setup, notes: &mut Vec<String>) -> Result<Vec<Vec<Planned>>> {
    let names: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    let mut planned = Vec::with_capacity(entries.len());
    'entries: for entry in entries {
        let mut settings: Vec<(String, toml::Value)> = match s.tuned.get(&entry.name).and_then(|v| v.as_table()) {
            Some(t) => t
                .iter()
                .filter(|(k, _)| !entry.settings.iter().any(|(e, _)| e == *k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            None => Vec::new(),
        };
        settings.extend(entry.settings.iter().cloned());
        let mut runs = Vec::new();
        let mut base_seed = None;
        for i in 0..s.seeds.max(1) {
            // Method flags go to the methods that take them (--tau to the local-update ones).
            let mut args = crate::cli::train_config::flags_for(s.train, &entry.name, &names)?;
            args.method = Some(entry.name.clone());
            if let Some(base) = base_seed {
                args.seed = Some(base + i);
            }
            let seed = base_seed.map_or(0, |b: u64| b + i);
            let dir = run_dir(s.out, &entry, i, seed);
            args.out = Some(dir.clone());
            args.trace = Some(dir.join("trace.json"));
            let (mut cfg, _) = crate::cli::train_config::run_config_with(&args, &settings)?;
            let seed = cfg.train.seed;
            base_seed.get_or_insert(seed);
            // Every method on the same tokens unless --budget rounds asks for the papers' rounds.
            if s.train.budget.is_none() {
                cfg.parallel.budget = crate::train::config::BudgetUnit::Tokens;
            }
            let method =
                crate::strategy::Method::from_config(&entry.name, cfg.methods.get(&entry.name)).with_context(|| {
                    format!("{} {} (values are TOML: true/false, numbers, \"strings\")", s.flag, entry.spec)
                })?;
            if let Some(why) = misfit(&method, &cfg) {
                if !entry.implied {
                    bail!("{} {}: {} does not fit this setup: {why}", s.flag, entry.spec, entry.name);
                }
                notes.push(format!("{}: skipped: {why}", entry.spec));
                continue 'entries;
            }
            // A fault plan naming a worker the run lacks is refused before the first run (a sweep never resumes).
            crate::train::parallel::fault_plan(&cfg, &method, false)?;
            let config = cfg.to_toml();
            let done = if s.fresh { None } else { MethodResult::load(&dir, &config) };
            runs.push(Planned {
                entry: entry.clone(),
                seed,
                seeds: s.seeds.max(1),
                cfg,
                config,
                label: method.to_string(),
                done,
            });
        }
        planned.push(runs);
    }
    Ok(planned)
}

/// The sweep's remaining time: seconds per step of the runs finished so far
/// times the steps of those still to run; `None` before the first finishes.
pub fn eta_s(finished: &[(f64, u64)], remaining_steps: u64) -> Option<f64> {
    let (secs, steps) = finished.iter().fold((0.0, 0u64), |(s, n), (t, k)| (s + t, n + k));
    (steps > 0).then(|| crate::train::metrics::eta_s(secs, steps, remaining_steps))
}

/// The runs of a sweep, one after the other, with progress lines.
pub struct Sweep {
    pub runner: Runner,
    /// `lowcomm compare` or `lowcomm tune`: the progress lines' first word.
    pub cmd: &'static str,
    pub quiet: bool,
    /// (seconds, steps) of each run made by this invocation, for the ETA.
    finished: Vec<(f64, u64)>,
}

impl Sweep {
    pub fn new(runner: Runner, cmd: &'static str, quiet: bool) -> Sweep {
        Sweep { runner, cmd, quiet, finished: Vec::new() }
    }

    /// Prints `line` on the process that owns the outputs.
    pub fn say(&self, line: &str) {
        if self.runner.root {
            eprintln!("{line}");
        }
    }

    /// Runs `p` (`at`: its `k/n` in the sweep) unless it was done earlier,
    /// then keeps its result in its run directory. `remaining`: the steps of
    /// the runs still to make, this one included (for the ETA). `Ok(None)`
    /// on an MPI rank other than 0 (rank 0 writes the results). A run that
    /// diverges ends with a result marked so, not with an error.
    pub fn run(
        &mut self,
        p: &Planned,
        at: &str,
        remaining: u64,
        notes: &mut Vec<String>,
    ) -> Result<Option<MethodResult>> {
        let cmd = self.cmd;
        let name = describe(p);
        let dir = p.cfg.train.out_dir.clone();
        if let Some(r) = &p.done {
            self.say(&format!("{cmd} [{at}] {name}: done earlier, reused ({})", dir.display()));
            notes.push(format!("{name}: done earlier, reused ({})", dir.join(store::RESULT_FILE).display()));
            return Ok(Some(r.clone()));
        }
        let eta = eta_s(&self.finished, remaining).map_or(
            format!("{} ETA after the first {}", self.what(), if self.cmd == "tune" { "run" } else { "method" }),
            |s| format!("{} ETA {s:.1} s", self.what()),
        );
        self.say(&format!("{cmd} [{at}] {name}: running ({eta})"));
        // A run left unfinished (no result.json) or made under other settings is started over.
        if self.runner.root && dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        let opts = crate::train::RunOptions { quiet: self.quiet, ..Default::default() };
        let started = Instant::now();
        let outcome = (self.runner.run)(p.cfg.clone(), &opts);
        let took = started.elapsed().as_secs_f64();
        self.finished.push((took, p.cfg.train.steps));
        let spec = &p.entry.spec;
        let r = match outcome {
            Ok(None) => return Ok(None),
            Ok(Some(s)) => {
                self.say(&format!(
                    "{cmd} [{at}] {name}: final loss {:.4}, val loss {:.4}, {:.2} s run time ({took:.1} s here)",
                    s.final_loss, s.val_loss, s.summary.wall_s
                ));
                MethodResult::from_run(spec, p.config.clone(), &s, took)
            }
            // A divergence ends this run, not the sweep.
            Err(e) => match diverged(&e) {
                Some(d) if self.runner.root => {
                    self.say(&format!("{cmd} [{at}] {name}: {d}"));
                    let world = workers(&p.cfg)?;
                    MethodResult::from_diverged(spec, p.label.clone(), p.config.clone(), world, &dir, d, took)?
                }
                Some(_) => return Ok(None),
                None => return Err(e.context(format!("{cmd}: {name}"))),
            },
        };
        r.save(&dir)?;
        Ok(Some(r))
    }

    fn what(&self) -> &'static str {
        if self.cmd == "tune" {
            "tune"
        } else {
            "sweep"
        }
    }
}

/// A run as the progress lines name it: its spec, and its seed when the
/// sweep has several (`ddp seed 8`).
fn describe(p: &Planned) -> String {
    if p.seeds > 1 {
        format!("{} seed {}", p.entry.spec, p.seed)
    } else {
        p.entry.spec.clone()
    }
}

/// The divergence that ended a run, if that is what `e` is.
fn diverged(e: &anyhow::Error) -> Option<&Diverged> {
    e.chain().find_map(|c| c.downcast_ref::<Diverged>())
}

/// Data-parallel workers of a run: `--workers`, else the cluster profile's, else 1.
pub fn workers(cfg: &RunConfig) -> Result<usize> {
    let p = &cfg.parallel;
    Ok(match (p.workers, &p.cluster) {
        (Some(w), _) => w,
        (None, Some(c)) => crate::runtime::cluster::ClusterProfile::from_file(c)?.workers(),
        (None, None) => 1,
    })
}

/// Refuses the `train` flags that belong to one run: a sweep (`cmd`) sets
/// them per run, or has its own way of doing what they ask. `--method` is
/// compare's to refuse only (tune's names the method it tunes).
pub fn refuse_single_run_flags(cmd: &str, t: &TrainArgs) -> Result<()> {
    let again =
        format!("run the same {cmd} again: finished runs are reused from --results, unfinished ones start over");
    let single_run = [
        (cmd == "compare" && t.method.is_some(), "--method", "name the methods with --methods"),
        (t.out.is_some(), "--out", "each run goes to --results/runs/METHOD"),
        (t.trace.is_some(), "--trace", "each run writes --results/runs/METHOD/trace.json"),
        (t.resume.is_some(), "--resume", again.as_str()),
        (t.stop_at.is_some(), "--stop-at", "every run goes to --steps; stop one run with `lowcomm train --stop-at`"),
        (t.force, "--force", "unfinished runs start over by themselves, and --fresh reruns the finished ones"),
    ];
    match single_run.iter().find(|(given, ..)| *given) {
        Some((_, flag, instead)) => bail!("{cmd}: {flag} applies to one `train` run, not to a sweep: {instead}"),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eta_is_seconds_per_finished_step_times_the_steps_to_go() {
        assert_eq!(eta_s(&[], 40), None);
        // 10 s for 20 steps and 20 s for 20 steps: 0.75 s per step; 40 to go.
        assert_eq!(eta_s(&[(10.0, 20), (20.0, 20)], 40), Some(30.0));
    }

    #[test]
    fn the_first_seed_keeps_the_methods_directory_and_the_others_get_their_own() {
        let e = crate::strategy::method_spec::expand(&["co2:tau=4".to_string()]).unwrap().remove(0);
        let out = Path::new("res");
        assert_eq!(run_dir(out, &e, 0, 7), Path::new("res/runs/co2_tau_4"));
        assert_eq!(run_dir(out, &e, 2, 9), Path::new("res/runs/co2_tau_4-seed-9"));
    }
}
