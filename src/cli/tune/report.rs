//! What `lowcomm tune` writes: the table (printed, and `summary.md`), the
//! winning settings as a `[methods.NAME]` section (`tuned.toml`, ready to
//! paste into a run config or to give to `lowcomm compare --tuned`), and
//! every run's curve (`curves.csv`, compare's format).
//!
//! Ranking: the mean over the seeds of the validation loss of the model
//! each run produces. The winner is the lowest among the points that are
//! neither diverged nor unstable and ran every seed; with two seeds or
//! more, the points whose mean is within the spread of the winner's
//! (`compare::stats::tied`) are named as ties. With `--loss-slack NAT`,
//! the winner is instead the eligible point of least virtual time whose
//! mean is within NAT of the lowest ([`pick`]).

use super::grid::{describe, values, Axis};
use super::Dropped;
use crate::cli::compare::stats::{self, Spread};
use crate::cli::compare::sweep::Planned;
use crate::cli::compare::table::{final_loss, target_loss, time_to, Row};
use anyhow::Result;
use std::path::Path;

/// What the report needs besides the rows (one per point that ran, in grid order).
pub struct Context<'a> {
    pub method: &'a str,
    pub axes: &'a [Axis],
    /// Each row's first run as planned (its settings and config).
    pub entries: Vec<&'a Planned>,
    /// Each row's early stop, if it had one.
    pub dropped: Vec<Dropped>,
    pub seeds: usize,
    /// `--target-loss`.
    pub target: Option<f64>,
    pub behind: f64,
    /// `--loss-slack`: nats of validation loss a faster point may give up.
    pub loss_slack: f64,
}

/// A point's validation loss over its seeds (NaN seeds included: a
/// diverged seed makes the mean NaN).
fn val(w: &Row) -> Spread {
    let v: Vec<f64> = w.seeds.iter().map(|(r, _)| r.val_loss as f64).collect();
    Spread::of(&v).unwrap_or(Spread { mean: f64::NAN, std: 0.0, n: 0 })
}

/// Whether a point can win: unmarked, every seed run, a finite loss.
fn eligible(w: &Row, d: &Dropped, seeds: usize) -> bool {
    !w.mark.excluded() && d.is_none() && w.seeds.len() == seeds && val(w).mean.is_finite()
}

/// The rows' order in the table: eligible ones by mean validation loss,
/// then the others by it (NaN last).
fn ranked(ws: &[Row], c: &Context) -> Vec<usize> {
    let mut order: Vec<usize> = (0..ws.len()).collect();
    let key = |i: usize| (!eligible(&ws[i], &c.dropped[i], c.seeds), val(&ws[i]).mean);
    order.sort_by(|&a, &b| {
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    });
    order
}

/// The winner among `candidates` (eligible points as (mean validation
/// loss, virtual time), the lowest loss first): the lowest loss with no
/// slack, else the least time among those within `slack` of it (the lower
/// loss on equal times). Returns the winner's index into `candidates`.
fn pick(candidates: &[(f64, f64)], slack: f64) -> Option<usize> {
    let best = candidates.first()?.0;
    (0..candidates.len())
        .filter(|&i| candidates[i].0 <= best + slack)
        .min_by(|&a, &b| candidates[a].1.total_cmp(&candidates[b].1).then(candidates[a].0.total_cmp(&candidates[b].0)))
}

/// The winner's whole `[methods.NAME]` section: every key its runs used
/// (the grid's, the `--method` spec's, the method flags and the config's).
pub fn section(method: &str, p: &Planned) -> Result<String> {
    let keys = p.cfg.methods.get(method).cloned().unwrap_or_default();
    let mut methods = toml::Table::new();
    methods.insert(method.to_string(), toml::Value::Table(keys));
    let mut top = toml::Table::new();
    top.insert("methods".into(), toml::Value::Table(methods));
    Ok(toml::to_string(&top)?)
}

/// Writes summary.md, tuned.toml (when there is a winner) and curves.csv
/// to `out`, and prints summary.md.
pub fn write(out: &Path, ws: &[Row], c: &Context, notes: &[String]) -> Result<()> {
    let target = target_loss(ws, c.target);
    let command = format!("lowcomm {}", std::env::args().skip(1).collect::<Vec<_>>().join(" "));
    let mut md = format!("command: `{command}`\n\n");
    let reach = format!("time to loss {target:.4} (s)");
    let mut head: Vec<String> = vec!["rank".into()];
    head.extend(c.axes.iter().map(|a| a.key.clone()));
    head.extend(["status", "seeds", "val loss", "final train loss", &reach, "virtual time (s)"].map(String::from));
    md += &format!("| {} |\n|{}\n", head.join(" | "), " --- |".repeat(head.len()));
    let order = ranked(ws, c);
    for (rank, &i) in order.iter().enumerate() {
        let w = &ws[i];
        let status = match (&c.dropped[i], w.mark.excluded()) {
            (_, true) => w.mark.cell.clone(),
            (Some(_), false) => "behind (stopped after seed 1)".into(),
            (None, false) => "ok".into(),
        };
        let mut row = vec![if eligible(w, &c.dropped[i], c.seeds) { (rank + 1).to_string() } else { "-".into() }];
        row.extend(values(&c.entries[i].entry, c.axes));
        row.extend([
            status,
            format!("{} of {}", w.seeds.len(), c.seeds),
            if val(w).mean.is_finite() { val(w).cell(4) } else { "-".into() },
            final_loss(w).cell(4),
            match (time_to(w, target), w.mark.excluded()) {
                (_, true) => "- (marked)".into(),
                (Some(t), false) => t.cell(2),
                (None, false) => "not reached".into(),
            },
            if w.r.finished() { format!("{:.2}", w.r.summary.wall_s) } else { "-".into() },
        ]);
        md += &format!("| {} |\n", row.join(" | "));
    }
    let target_says = match c.target {
        Some(v) => format!("--target-loss {v}"),
        None => "the median final training loss of the unmarked points (each point's highest seed; set it with --target-loss)".into(),
    };
    md += &format!(
        "\nRanked by the validation loss of the model each run produces (mean ± sample standard deviation over the seeds); rank only for points neither diverged nor unstable that ran every seed. Time to loss: when the smoothed training loss first got to {target:.4}, {target_says}, in virtual seconds (mean over the seeds that all got there). Virtual time: the first seed's run. A point whose first seed is marked, or whose first seed's validation loss is more than {} nat above the best first seed's (--behind), runs no more seeds.\n",
        c.behind
    );
    let fits: Vec<usize> = order.iter().copied().filter(|&i| eligible(&ws[i], &c.dropped[i], c.seeds)).collect();
    let candidates: Vec<(f64, f64)> = fits.iter().map(|&i| (val(&ws[i]).mean, ws[i].r.summary.wall_s)).collect();
    let best = pick(&candidates, c.loss_slack).map(|k| fits[k]);
    let tuned = out.join("tuned.toml");
    match best {
        Some(b) => {
            let win = val(&ws[b]);
            let traded = match fits.first() {
                Some(&l) if l != b => format!(
                    " It is the fastest point within --loss-slack {} nat of the lowest loss ({}, {}): {:.4} nat above that, in {:.2} s of virtual time against {:.2} s.",
                    c.loss_slack,
                    describe(&c.entries[l].entry, c.axes),
                    val(&ws[l]).cell(4),
                    win.mean - val(&ws[l]).mean,
                    ws[b].r.summary.wall_s,
                    ws[l].r.summary.wall_s
                ),
                _ => String::new(),
            };
            let ties: Vec<String> = order
                .iter()
                .filter(|&&i| {
                    i != b
                        && eligible(&ws[i], &c.dropped[i], c.seeds)
                        && c.seeds > 1
                        && stats::tied(&val(&ws[i]), &win, 0.0)
                })
                .map(|&i| format!("{} ({})", describe(&c.entries[i].entry, c.axes), val(&ws[i]).cell(4)))
                .collect();
            let spread = match (c.seeds, ties.is_empty()) {
                (1, _) => " One seed: no spread was measured, so close points cannot be told apart; run --seeds 3."
                    .to_string(),
                (_, true) => format!(" No other point is within the spread: {}.", stats::tie_rule(c.seeds, 0.0)),
                (_, false) => format!(
                    " Tied with it within the spread ({}; more seeds may separate them): {}.",
                    stats::tie_rule(c.seeds, 0.0),
                    ties.join(", ")
                ),
            };
            let sec = section(c.method, c.entries[b])?;
            md += &format!(
                "\nWinner: {} (val loss {} over {} seeds).{traded}{spread}\n\nIts settings, ready to paste into a run config (also in {}; `lowcomm compare --tuned {}` runs {} with them):\n\n```toml\n{sec}```\n",
                describe(&c.entries[b].entry, c.axes),
                win.cell(4),
                c.seeds,
                tuned.display(),
                tuned.display(),
                c.method
            );
            let file = format!(
                "# {command}\n# winner: {} (val loss {} over {} seeds)\n{sec}",
                describe(&c.entries[b].entry, c.axes),
                win.cell(4),
                c.seeds
            );
            crate::util::atomic_write(&tuned, file.as_bytes())?;
        }
        None => {
            md += "\nWinner: none: every point diverged, was unstable or stopped early; no tuned.toml written.\n";
            if tuned.exists() {
                std::fs::remove_file(&tuned)?;
            }
        }
    }
    let stops = (0..ws.len())
        .filter_map(|i| c.dropped[i].as_ref().map(|d| format!("{}: {d}", describe(&c.entries[i].entry, c.axes))));
    let notes: Vec<String> = stops.chain(notes.iter().cloned()).collect();
    md += &format!("\nNotes:\n\n{}", notes.iter().map(|n| format!("- {n}\n")).collect::<String>());
    crate::util::atomic_write(&out.join("summary.md"), md.as_bytes())?;
    crate::util::atomic_write(&out.join("curves.csv"), crate::cli::compare::curves::curves_csv(ws)?.as_bytes())?;
    print!("{md}");
    eprintln!("wrote {}/summary.md, curves.csv{}", out.display(), if best.is_some() { ", tuned.toml" } else { "" });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::pick;

    #[test]
    fn loss_slack_picks_the_fastest_point_near_the_best_loss() {
        // (val loss, virtual time), lowest loss first: DeMo's top-k 2048, 512, 1024, 256.
        let c = [(5.8084, 316.6), (5.8519, 88.4), (5.8612, 164.5), (5.9006, 50.3)];
        assert_eq!(pick(&c, 0.0), Some(0), "no slack: the lowest loss");
        // 5.8084 + 0.05 = 5.8584 holds 2048 and 512 (1024 is 0.0528 above): 512 is faster.
        assert_eq!(pick(&c, 0.05), Some(1));
        // 0.1 also holds 256 (0.0922 above), the fastest of all.
        assert_eq!(pick(&c, 0.1), Some(3));
        // Equal times: the lower loss.
        assert_eq!(pick(&[(1.0, 5.0), (1.01, 5.0)], 0.1), Some(0));
        assert_eq!(pick(&[], 0.1), None);
    }
}
