//! `lowcomm tune`: a grid over one method's settings in the simulator,
//! each point run with `--seeds` seeds through compare's sweep (the same
//! run directories, result files and reuse: a rerun reuses finished runs),
//! ranked by the validation loss of the model each run produces, mean over
//! the seeds; the winner's `[methods.NAME]` section is printed and written
//! to `tuned.toml`, ready to paste into a run config or to give to
//! `lowcomm compare --tuned`.
//!
//! Early stops: a run that diverges stops itself (`strategy::Diverged`),
//! and the grid is raced over seeds: every point runs its first seed,
//! then a point that is marked (diverged or unstable, compare's marks) or
//! whose validation loss is more than `--behind` nats above the best
//! first seed's runs no more seeds (grid points are dropped between whole
//! runs, never cut short, so what ranks them is the loss at the end of the
//! same schedule: docs/decisions.md says why).
//!
//! `--loss-slack NAT` trades a little loss for time: the winner is then
//! the fastest eligible point within NAT of the best loss.

mod grid;
mod report;

use super::compare::sweep::{self, configure, Planned, Setup, Sweep};
use super::compare::table::rows;
use super::{values, TrainArgs};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;

/// `lowcomm tune`: `train`'s flags apply to every run, `--method` names
/// the method tuned; the flags of one run are hidden and refused, as
/// compare's are.
#[derive(Args, Debug)]
#[command(
    mut_arg("method", |a| a.required(true).help("The method to tune: a name, or NAME:key=value:... with settings every grid point keeps (async-diloco:dylu=true)")),
    mut_arg("out", |a| a.hide(true)),
    mut_arg("resume", |a| a.hide(true)),
    mut_arg("stop_at", |a| a.hide(true)),
    mut_arg("force", |a| a.hide(true)),
    mut_arg("trace", |a| a.hide(true))
)]
pub struct TuneArgs {
    /// `KEY=V1,V2,...`: one of the method's settings (its `[methods.NAME]` keys) and the values to
    /// try (TOML: 0.1, true, "dn"); repeat for more keys: every combination runs.
    #[arg(long, required = true)]
    pub grid: Vec<String>,
    /// Seeds per grid point, at least 1 (--seed S, S+1, ...): points are ranked by the mean
    /// validation loss over them, and ties within the spread are named.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = values::positive_u64)]
    pub seeds: u64,
    /// A point whose first seed ends more than this many nats of validation loss above the best
    /// first seed's runs no more seeds (0.3: about 2 standard deviations of the difference of two
    /// seeds at nano's seed spread of 0.1, issue 28).
    #[arg(long, default_value_t = 0.3, allow_negative_numbers = true, value_parser = values::finite_f64)]
    pub behind: f64,
    /// Pick the fastest point (least virtual time) whose mean validation loss is within this many
    /// nats of the best, instead of the best: for settings that trade loss for communication
    /// (DeMo's topk, H), where past some point the loss gains less than the seeds' spread [default: 0,
    /// the best loss wins].
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = values::loss_slack)]
    pub loss_slack: f64,
    /// Output directory: summary.md, tuned.toml, curves.csv, runs/POINT/ (finished runs are reused
    /// by the next tune here) [default: results/tune/METHOD].
    #[arg(long = "results", value_parser = values::Utf8Path)]
    pub results: Option<PathBuf>,
    /// Training loss the time-to-loss column is measured at (default: the median final training
    /// loss of the unmarked points).
    #[arg(long, allow_negative_numbers = true, value_parser = values::finite_f64)]
    pub target_loss: Option<f64>,
    /// Rerun every run, even those whose result in --results is complete.
    #[arg(long)]
    pub fresh: bool,
    /// `train`'s flags apply to each run (the runtime is sim).
    #[command(flatten)]
    pub train: TrainArgs,
}

/// Why a point ran no more seeds after its first, if it did not.
pub type Dropped = Option<String>;

/// Runs `lowcomm tune`.
pub fn tune(a: &TuneArgs) -> Result<()> {
    sweep::refuse_single_run_flags("tune", &a.train)?;
    let Some(method) = a.train.method.clone() else {
        bail!("tune: name the method to tune with --method, e.g. --method diloco --grid outer_lr=0.35,0.7");
    };
    let mut train = a.train.clone();
    match train.runtime.as_deref() {
        None => train.runtime = Some("sim".into()),
        Some("sim") => {}
        Some(other) => bail!(
            "tune: --runtime {other}: tune runs in the simulator only (--runtime sim, its default), where a run's time is virtual and the same on every try; on threads each point's time would be this machine's, shared with the other runs"
        ),
    }
    if train.backend.as_deref().is_some_and(|b| b != "local") {
        bail!(
            "tune: --backend {}: tune runs every point in this process (the simulator); drop --backend",
            train.backend.as_deref().unwrap_or_default()
        );
    }
    let name = method.split(':').next().unwrap_or_default();
    if !crate::strategy::Method::NAMES.contains(&name) {
        bail!(
            "tune: unknown method `{name}` in --method; the methods are: {}",
            crate::strategy::Method::NAMES.join(", ")
        );
    }
    let base = crate::strategy::method_spec::expand(std::slice::from_ref(&method))?;
    let [base] = &base[..] else { bail!("tune: --method {method}: name one method, e.g. --method diloco") };
    let fixed: Vec<String> = base.settings.iter().map(|(k, _)| k.clone()).collect();
    let axes = a.grid.iter().map(|g| grid::axis(g, &base.name, &fixed)).collect::<Result<Vec<_>>>()?;
    let given = super::flag_rules::given(&train);
    if let Some(x) = axes.iter().find(|x| given.contains(&x.key.as_str())) {
        bail!(
            "tune: {} and --grid {} both set {}: drop one",
            crate::strategy::method_spec::flag_of(&x.key),
            x.key,
            x.key
        );
    }
    let entries = grid::points(&method, &axes)?;
    let out = a.results.clone().unwrap_or_else(|| PathBuf::from("results/tune").join(base.dir()));
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut notes = Vec::new();
    let setup =
        Setup { train: &train, out: &out, fresh: a.fresh, seeds: a.seeds, flag: "--grid", tuned: &toml::Table::new() };
    let planned = configure(entries, &setup, &mut notes)?;
    let runner = super::mpi::runner("local")?;
    let mut sweep = Sweep::new(runner, "tune", a.train.quiet);
    let points = planned.len();
    sweep.say(&format!(
        "tune: {points} grid points x {} seeds = {} runs of {} steps ({}; results in {})",
        a.seeds,
        points as u64 * a.seeds,
        train.steps.map_or("the config's".into(), |s| s.to_string()),
        base.name,
        out.display()
    ));
    // First seed of every point.
    let mut groups: Vec<Vec<_>> = vec![Vec::new(); points];
    let mut todo: Vec<&Planned> = planned.iter().flat_map(|p| p.first()).collect();
    todo.extend(planned.iter().flat_map(|p| p.iter().skip(1)));
    let mut k = 0;
    let mut n = todo.len();
    for (i, p) in planned.iter().enumerate() {
        k += 1;
        let remaining = steps_left(&todo[k - 1..]);
        if let Some(r) = sweep.run(&p[0], &format!("{k}/{n}"), remaining, &mut notes)? {
            groups[i].push(r);
        }
    }
    // Race: points marked or clearly behind after their first seed run no more.
    let dropped = race(&groups, a.behind, a.seeds);
    let more: Vec<(usize, &Planned)> = planned
        .iter()
        .enumerate()
        .filter(|(i, _)| dropped[*i].is_none())
        .flat_map(|(i, p)| p.iter().skip(1).map(move |q| (i, q)))
        .collect();
    let saved = (points as u64 * a.seeds.saturating_sub(1)) as usize - more.len();
    if saved > 0 {
        sweep.say(&format!(
            "tune: {} of {points} points stop after their first seed (marked, or more than {} nat behind the best): {saved} runs fewer",
            dropped.iter().filter(|d| d.is_some()).count(),
            a.behind
        ));
    }
    n = k + more.len();
    let rest: Vec<&Planned> = more.iter().map(|(_, q)| *q).collect();
    for (j, (i, q)) in more.iter().enumerate() {
        k += 1;
        if let Some(r) = sweep.run(q, &format!("{k}/{n}"), steps_left(&rest[j..]), &mut notes)? {
            groups[*i].push(r);
        }
    }
    let kept: Vec<usize> = (0..points).filter(|&i| !groups[i].is_empty()).collect();
    let groups: Vec<Vec<_>> = kept.iter().map(|&i| groups[i].clone()).collect();
    let ws = rows(&groups);
    let ctx = report::Context {
        method: &base.name,
        axes: &axes,
        entries: kept.iter().map(|&i| &planned[i][0]).collect(),
        dropped: kept.iter().map(|&i| dropped[i].clone()).collect(),
        seeds: a.seeds as usize,
        target: a.target_loss,
        behind: a.behind,
        loss_slack: a.loss_slack,
    };
    report::write(&out, &ws, &ctx, &notes)
}

/// Steps of the runs in `runs` not done earlier (for the ETA).
fn steps_left(runs: &[&Planned]) -> u64 {
    runs.iter().filter(|q| q.done.is_none()).map(|q| q.cfg.train.steps).sum()
}

/// Which points run no more seeds after their first (`groups[i]`: point
/// i's first-seed result, if any): those compare marks (diverged,
/// unstable), and those whose validation loss is more than `behind` nats
/// above the best first seed's among the unmarked. Nothing is dropped when
/// there is one seed (nothing would be saved).
pub fn race(groups: &[Vec<super::compare::store::MethodResult>], behind: f64, seeds: u64) -> Vec<Dropped> {
    if seeds < 2 {
        return vec![None; groups.len()];
    }
    let firsts: Vec<Vec<_>> = groups.iter().map(|g| g.iter().take(1).cloned().collect()).collect();
    let present: Vec<usize> = (0..firsts.len()).filter(|&i| !firsts[i].is_empty()).collect();
    let only: Vec<Vec<_>> = present.iter().map(|&i| firsts[i].clone()).collect();
    let ws = rows(&only);
    let val = |i: usize| ws[i].r.val_loss as f64;
    let best = (0..ws.len())
        .filter(|&i| !ws[i].mark.excluded())
        .map(val)
        .filter(|v| v.is_finite())
        .fold(f64::INFINITY, f64::min);
    let mut out = vec![None; groups.len()];
    for (j, &i) in present.iter().enumerate() {
        out[i] = if ws[j].mark.excluded() {
            Some(format!("{} (its first seed; it ran no more)", ws[j].mark.why))
        } else if val(j) > best + behind {
            Some(format!(
                "behind after its first seed: val loss {:.4}, {:.4} nat above the best first seed's {best:.4} (more than --behind {behind}); it ran no more",
                val(j),
                val(j) - best
            ))
        } else {
            None
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::compare::marks::tests::result;
    use super::*;

    #[test]
    fn after_the_first_seed_marked_and_clearly_behind_points_stop() {
        // Val losses 4.0 (best), 4.15 (0.15 behind), 4.5 (0.5 behind); one that climbed back up.
        let g = |losses: &[f32], val| vec![result("diloco", losses, val)];
        let groups = [g(&[6.0, 4.0], 4.0), g(&[6.0, 4.1], 4.15), g(&[6.0, 4.4], 4.5), g(&[6.0, 60.0], 6.5), vec![]];
        let d = race(&groups, 0.2, 3);
        assert_eq!((d[0].is_none(), d[1].is_none(), d[4].is_none()), (true, true, true));
        let behind = d[2].as_deref().unwrap();
        assert!(
            behind.starts_with(
                "behind after its first seed: val loss 4.5000, 0.5000 nat above the best first seed's 4.0000"
            ),
            "{behind}"
        );
        assert!(d[3].as_deref().unwrap().starts_with("unstable: "), "{:?}", d[3]);
        // One seed: nothing to save, nothing dropped.
        assert!(race(&groups, 0.2, 1).iter().all(Option::is_none));
    }
}
