//! The numbers of a `lowcomm compare` sweep: the tables (rendered as
//! markdown for summary.md and as HTML for report.html from the same
//! cells), the curves (CSV) and the three plots.

use super::marks::{mark, smoothed, window_tokens, Mark};
use super::store::MethodResult;
use crate::metrics;
use crate::metrics::plot::{line_svg, Series};
use anyhow::Result;
use std::fmt::Write as _;

/// One method of the sweep with what the report derives from it.
pub struct Row<'a> {
    pub r: &'a MethodResult,
    /// Its training loss per round, smoothed over the sweep's window (marks.rs).
    pub smoothed: Vec<f64>,
    /// Diverged, unstable or sound.
    pub mark: Mark,
}

/// Every result's smoothed curve and mark.
pub fn rows(results: &[MethodResult]) -> Vec<Row<'_>> {
    let window = window_tokens(results);
    results
        .iter()
        .map(|r| {
            let s = smoothed(r, window);
            Row { mark: mark(r, &s), smoothed: s, r }
        })
        .collect()
}

/// The loss every method is timed to: `given`, else the median final
/// smoothed training loss of the methods neither diverged nor unstable (of
/// an even count, the higher of the two middle ones): a loss half of them
/// end at. Not the worst final loss, which every method reaches: a method
/// that ends worst would then set the target and win the verdict by
/// getting there early. If every method is marked, the highest finite
/// final loss.
pub fn target_loss(rows: &[Row], given: Option<f64>) -> f64 {
    given.unwrap_or_else(|| {
        let finals = |sound_only: bool| -> Vec<f64> {
            let mut v: Vec<f64> = rows
                .iter()
                .filter(|w| !sound_only || !w.mark.excluded())
                .filter_map(|w| w.smoothed.last().copied().filter(|l| l.is_finite()))
                .collect();
            v.sort_by(f64::total_cmp);
            v
        };
        let sound = finals(true);
        match sound.get(sound.len() / 2) {
            Some(&t) => t,
            None => finals(false).last().copied().unwrap_or(f64::NAN),
        }
    })
}

/// A method's final smoothed training loss.
pub fn final_loss(w: &Row) -> f64 {
    w.smoothed.last().copied().unwrap_or(f64::NAN)
}

/// When `w`'s smoothed training loss first got to `target` or below.
pub fn time_to(w: &Row, target: f64) -> Option<f64> {
    w.smoothed.iter().zip(&w.r.rounds).find(|(v, _)| **v <= target).map(|(_, x)| x.wall_s)
}

/// Tokens a method trained: its last round's count.
pub fn tokens(r: &MethodResult) -> u64 {
    r.rounds.last().map_or(0, |x| x.tokens)
}

/// The global batch a method trained with, in tokens per optimizer step,
/// mean over the run: its tokens over its rounds. A round is one optimizer
/// step (acco's two stages commit one), and for the local-update methods
/// one inner step of every worker (async DiLoCo's pooled rounds too).
pub fn global_batch(r: &MethodResult) -> Option<f64> {
    (!r.rounds.is_empty()).then(|| tokens(r) as f64 / r.rounds.len() as f64)
}

/// What the sweep's budgets were: equal tokens, or how far apart. `unit`
/// is `parallel.budget` (`tokens` or `rounds`). A run that diverged stopped
/// early and is not counted.
pub fn budget_line(results: &[MethodResult], unit: &str) -> String {
    let done: Vec<&MethodResult> = results.iter().filter(|r| r.finished()).collect();
    let stopped: Vec<String> = results
        .iter()
        .filter(|r| !r.finished())
        .map(|r| format!("{} stopped when it diverged, after {} tokens", r.spec, tokens(r)))
        .collect();
    let stopped = if stopped.is_empty() { String::new() } else { format!(" ({})", stopped.join("; ")) };
    let lo = done.iter().min_by_key(|r| tokens(r));
    let hi = done.iter().max_by_key(|r| tokens(r));
    match (lo, hi) {
        (Some(lo), Some(hi)) if tokens(lo) == tokens(hi) => format!(
            "Budget: every method got the same token budget and trained {} tokens (parallel.budget = {unit}){stopped}.",
            tokens(lo)
        ),
        (Some(lo), Some(hi)) => format!(
            "Budget: the methods did NOT get the same token budget (parallel.budget = {unit}{}): from {} tokens ({}) to {} ({}), {:.1}x; compare their losses on loss_vs_tokens.svg{}{stopped}.",
            if unit == "rounds" { ": --steps rounds each, and dpu, acco-wp and acco fit as many micro-batches into a round as its communication allows" } else { "" },
            tokens(lo),
            lo.spec,
            tokens(hi),
            hi.spec,
            tokens(hi) as f64 / tokens(lo).max(1) as f64,
            if unit == "rounds" { ", or drop --budget rounds for equal tokens" } else { "" }
        ),
        _ => format!("Budget: parallel.budget = {unit}; no method finished{stopped}."),
    }
}

/// A header and rows of cells.
pub struct Table {
    /// Column names.
    pub head: Vec<String>,
    /// One row per method.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    fn new(head: &[&str]) -> Table {
        Table { head: head.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    /// As a markdown table.
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        line(&self.head)
            + &line(&vec!["---".to_string(); self.head.len()])
            + &self.rows.iter().map(|r| line(r)).collect::<String>()
    }
}

/// The sweep's tables: the comparison, time per round, bytes per round.
pub struct Tables {
    /// Loss, tokens, time, time to target, overlap, idle, bytes per tier, memory.
    pub main: Table,
    /// Round time against its compute and communication.
    pub per_round: Table,
    /// Bytes per worker per round and a compressing method's exchange.
    pub bytes: Table,
}

/// The tables of `results`; `clock` is `virtual` or `wall` (the time column says which).
pub fn tables(rows: &[Row], target: f64, clock: &str) -> Tables {
    let time = format!("{clock} time (s)");
    let reach = format!("time to loss {target:.4} (s)");
    let mut main = Table::new(&[
        "method",
        "status",
        "rounds",
        "tokens",
        "global batch (tokens/step)",
        "final train loss",
        "val loss",
        &time,
        &reach,
        "overlap",
        "idle",
        "sent per worker (MB)",
        "inside nodes (MB)",
        "between nodes (MB)",
        "memory per worker (MB)",
        "micro-batches/round",
    ]);
    let mut per_round = Table::new(&["method", "round (s)", "c (s)", "m (s)", "round / max(c, m)", "round / (c + m)"]);
    let mut bytes = Table::new(&[
        "method",
        "all (kB)",
        "inside nodes (kB)",
        "between nodes (kB)",
        "exchange payload (B)",
        "compression",
    ]);
    let pct = |x: Option<f64>| x.map_or("-".into(), |v| format!("{:.0}%", 100.0 * v));
    for w in rows {
        let r = w.r;
        // A run that diverged has no events: its times, bytes and memory are unknown.
        let known = |cell: String| if r.finished() { cell } else { "-".to_string() };
        // Per worker: over the workers only (a parameter server's bytes and idle time are its own).
        let (s, _) = r.summary.split_workers(r.world);
        let s = &s;
        let n = r.world.max(1) as f64;
        let rounds = r.rounds.len().max(1) as f64;
        let mb = |b: u64| metrics::fixed(b as f64 / n / 1e6, 3, 0);
        let mbr = s.workers.iter().filter_map(|w| w.micro_batches.as_ref().map(|m| m.mean)).sum::<f64>() / n;
        let reached = match (time_to(w, target), w.mark.excluded()) {
            (_, true) => "- (marked)".to_string(),
            (None, false) => "not reached".to_string(),
            (Some(t), false) => format!("{t:.2}"),
        };
        main.rows.push(vec![
            r.spec.clone(),
            w.mark.cell.clone(),
            r.rounds.len().to_string(),
            tokens(r).to_string(),
            global_batch(r).map_or("-".into(), |b| format!("{b:.0}")),
            format!("{:.4}", w.smoothed.last().unwrap_or(&f64::NAN)),
            known(format!("{:.4}", r.val_loss)),
            known(format!("{:.2}", s.wall_s)),
            reached,
            known(pct(s.overlap_ratio)),
            known(pct(s.idle_share)),
            known(mb(s.bytes_sent)),
            known(mb(s.bytes_intra)),
            known(mb(s.bytes_inter)),
            known(format!("{:.2}", memory_total(r) / 1e6)),
            known(format!("{mbr:.2}")),
        ]);
        let c = s.workers.iter().map(|w| w.compute_s).sum::<f64>() / n / rounds;
        let k = s.workers.iter().map(|w| w.comm_s).sum::<f64>() / n / rounds;
        let round = s.wall_s / rounds;
        per_round.rows.push(vec![
            r.spec.clone(),
            known(metrics::fixed(round, 4, 0)),
            known(metrics::fixed(c, 4, 0)),
            known(metrics::fixed(k, 4, 0)),
            known(format!("{:.2}", round / c.max(k))),
            known(format!("{:.2}", round / (c + k))),
        ]);
        let per = |b: u64| format!("{:.1}", b as f64 / n / rounds / 1e3);
        bytes.rows.push(vec![
            r.spec.clone(),
            known(per(s.bytes_sent)),
            known(per(s.bytes_intra)),
            known(per(s.bytes_inter)),
            r.exchange.map_or("-".into(), |(p, _)| p.to_string()),
            r.exchange.map_or("-".into(), |(_, c)| metrics::fixed(c, 4, 0)),
        ]);
    }
    Tables { main, per_round, bytes }
}

/// One worker's model states, bytes (parameters, gradients, communication
/// buffers, optimizer and outer state).
pub fn memory_total(r: &MethodResult) -> f64 {
    let m = &r.memory;
    (m.params + m.grads + m.comm_buffers + m.optimizer + m.outer) as f64
}

/// Every method's rounds: `method,step,tokens,wall_s,loss,bytes_per_worker`.
pub fn curves_csv(results: &[MethodResult]) -> Result<String> {
    let mut csv = String::from("method,step,tokens,wall_s,loss,bytes_per_worker\n");
    for r in results {
        for x in &r.rounds {
            writeln!(csv, "{},{},{},{},{},{}", r.spec, x.step, x.tokens, x.wall_s, x.loss, x.bytes)?;
        }
    }
    Ok(csv)
}

/// The three plots as `(file name, SVG)`: smoothed training loss against
/// tokens, time and bytes sent per worker.
/// A marked method's curve is named with its mark; one with no point to
/// draw (bytes of a run that diverged) is left out of that plot.
pub fn plots(rows: &[Row], clock: &str) -> Result<Vec<(&'static str, String)>> {
    let series = |x: fn(&super::store::Round) -> f64| -> Vec<Series> {
        rows.iter()
            .map(|w| Series {
                name: match w.mark.kind {
                    super::marks::Kind::Sound => w.r.spec.clone(),
                    super::marks::Kind::Diverged => format!("{} (diverged)", w.r.spec),
                    super::marks::Kind::Unstable => format!("{} (unstable)", w.r.spec),
                },
                points: w.r.rounds.iter().zip(&w.smoothed).map(|(p, l)| (x(p), *l)).collect(),
            })
            .filter(|s| s.points.iter().any(|p| p.0.is_finite() && p.1.is_finite()))
            .collect()
    };
    let seconds = format!("seconds ({clock})");
    Ok(vec![
        ("loss_vs_tokens.svg", line_svg("training loss vs tokens", "tokens", "loss", &series(|p| p.tokens as f64))?),
        ("loss_vs_time.svg", line_svg("training loss vs time", &seconds, "loss", &series(|p| p.wall_s))?),
        (
            "loss_vs_bytes.svg",
            line_svg("training loss vs bytes sent", "MB sent per worker", "loss", &series(|p| p.bytes / 1e6))?,
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::super::marks::tests::result;
    use super::super::store::Ended;
    use super::*;

    #[test]
    fn the_default_target_is_the_median_final_loss_of_the_sound_methods() {
        // Rounds of 100 tokens; the window is 10 rounds, which covers the 3 rounds of each.
        let a = result("a", &[6.0, 4.0, 2.0], 2.0);
        let b = result("b", &[6.0, 5.0, 4.0], 4.0);
        let c = result("c", &[6.0, 5.5, 5.5], 5.0);
        let rs = [a.clone(), b.clone()];
        let ws = rows(&rs);
        // a: smoothed 6, 5, 4: final 4; b: 6, 5.5, 5: final 5; c: 6, 5.75, 5.667.
        // Of two, the higher middle one: 5; of three, the middle one: 5 again.
        assert_eq!(target_loss(&ws, None), 5.0);
        assert_eq!(target_loss(&rows(&[c, a.clone(), b.clone()]), None), 5.0);
        assert_eq!(target_loss(&ws, Some(4.5)), 4.5);
        assert_eq!(time_to(&ws[0], 5.0), Some(2.0));
        assert_eq!(time_to(&ws[1], 5.0), Some(3.0));
        assert_eq!(time_to(&ws[1], 4.5), None);
        // A method that ends above where it started (smoothed 6, 33, 72) is
        // unstable and sets no target (with it, the higher middle of 4 and 72);
        // nor does one whose model's validation loss is far off (final 3: with
        // it, the median of 3, 4, 5 would be 4).
        let up = result("up", &[6.0, 60.0, 150.0], 7.0);
        let far = result("far", &[6.0, 2.0, 1.0], 52.0);
        assert_eq!(target_loss(&rows(&[a.clone(), up.clone()]), None), 4.0);
        assert_eq!(target_loss(&rows(&[a.clone(), b.clone(), far.clone()]), None), 5.0);
        let all = [a, b, up.clone(), far];
        // With only marked methods, the highest finite end.
        assert_eq!(target_loss(&rows(&[up]), None), 72.0);
        let t = tables(&rows(&all), 5.0, "virtual");
        assert!(t.main.head.contains(&"virtual time (s)".to_string()), "{:?}", t.main.head);
        let cell = |row: usize, col: &str| t.main.rows[row][t.main.head.iter().position(|h| h == col).unwrap()].clone();
        assert_eq!(cell(1, "time to loss 5.0000 (s)"), "3.00");
        assert_eq!(cell(2, "time to loss 5.0000 (s)"), "- (marked)");
        assert!(cell(2, "status").starts_with("**unstable**") && cell(3, "status").starts_with("**diverged**"));
        assert_eq!(
            (cell(0, "status"), cell(0, "tokens"), cell(0, "global batch (tokens/step)")),
            ("ok".into(), "300".into(), "100".into())
        );
        let md = t.main.markdown();
        assert!(
            md.starts_with("| method | status | rounds |") && md.lines().nth(1).unwrap().starts_with("| --- |"),
            "{md}"
        );
    }

    #[test]
    fn the_budget_line_says_whether_every_method_trained_the_same_tokens() {
        let a = result("ddp", &[6.0, 5.0], 5.0);
        let mut acco = result("acco", &[6.0, 5.0], 5.0);
        acco.rounds[1].tokens = 600;
        // Equal: 200 tokens each.
        let line = budget_line(&[a.clone(), a.clone()], "tokens");
        assert_eq!(
            line,
            "Budget: every method got the same token budget and trained 200 tokens (parallel.budget = tokens)."
        );
        // --budget rounds: 200 against 600, 3x.
        let line = budget_line(&[a.clone(), acco], "rounds");
        assert!(
            line.contains("did NOT get the same token budget")
                && line.contains("from 200 tokens (ddp) to 600 (acco), 3.0x"),
            "{line}"
        );
        assert!(line.contains("drop --budget rounds"), "{line}");
        // A run that diverged stopped early: said, not counted.
        let mut d = result("co2", &[6.0], f32::NAN);
        d.ended = Ended::Diverged { participant: 0, step: 2, what: "NaN".into() };
        let line = budget_line(&[a, d], "tokens");
        assert!(
            line.contains("trained 200 tokens") && line.contains("co2 stopped when it diverged, after 100 tokens"),
            "{line}"
        );
    }
}
