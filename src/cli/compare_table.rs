//! The numbers of a `lowcomm compare` sweep: the tables (rendered as
//! markdown for summary.md and as HTML for report.html from the same
//! cells), the curves (CSV) and the three plots.

use super::compare_store::MethodResult;
use crate::metrics;
use crate::metrics::plot::{line_svg, Series};
use anyhow::Result;
use std::fmt::Write as _;

/// Rounds in the moving average of the training loss (it is noisy per round).
pub const SMOOTH: usize = 10;

/// Moving average over `w` rounds (fewer at the start).
pub fn smooth(x: &[f32], w: usize) -> Vec<f64> {
    (0..x.len())
        .map(|i| x[i.saturating_sub(w - 1)..=i].iter().map(|&v| v as f64).sum::<f64>() / (i.min(w - 1) + 1) as f64)
        .collect()
}

/// A method's smoothed training loss per round.
fn smoothed(r: &MethodResult) -> Vec<f64> {
    smooth(&r.rounds.iter().map(|x| x.loss).collect::<Vec<_>>(), SMOOTH)
}

/// The loss every method is timed to: `given`, else the highest final
/// smoothed training loss among the methods that ended below their first
/// round's loss (each of them reaches it). A method that diverged, ending
/// above where it started, is left out: its final loss would be a target
/// every method "reaches" in its first round. If no method improved, the
/// highest finite final loss.
pub fn target_loss(results: &[MethodResult], given: Option<f64>) -> f64 {
    given.unwrap_or_else(|| {
        let highest_end = |improved_only: bool| {
            results
                .iter()
                .filter_map(|r| {
                    let s = smoothed(r);
                    let (first, last) = (*s.first()?, *s.last()?);
                    (last.is_finite() && (!improved_only || last < first)).then_some(last)
                })
                .fold(f64::NAN, f64::max)
        };
        Some(highest_end(true)).filter(|t| !t.is_nan()).unwrap_or_else(|| highest_end(false))
    })
}

/// When `r`'s smoothed training loss first got to `target` or below.
pub fn time_to(r: &MethodResult, target: f64) -> Option<f64> {
    smoothed(r).iter().zip(&r.rounds).find(|(v, _)| **v <= target).map(|(_, x)| x.wall_s)
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
pub fn tables(results: &[MethodResult], target: f64, clock: &str) -> Tables {
    let time = format!("{clock} time (s)");
    let reach = format!("time to loss {target:.4} (s)");
    let mut main = Table::new(&[
        "method",
        "rounds",
        "tokens",
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
    for r in results {
        // Per worker: over the workers only (a parameter server's bytes and idle time are its own).
        let (s, _) = r.summary.split_workers(r.world);
        let s = &s;
        let n = r.world.max(1) as f64;
        let rounds = r.rounds.len().max(1) as f64;
        let mb = |b: u64| metrics::fixed(b as f64 / n / 1e6, 3, 0);
        let m = &r.memory;
        let mbr = s.workers.iter().filter_map(|w| w.micro_batches.as_ref().map(|m| m.mean)).sum::<f64>() / n;
        main.rows.push(vec![
            r.spec.clone(),
            r.rounds.len().to_string(),
            r.rounds.last().map_or(0, |x| x.tokens).to_string(),
            format!("{:.4}", smoothed(r).last().unwrap_or(&f64::NAN)),
            format!("{:.4}", r.val_loss),
            format!("{:.2}", s.wall_s),
            time_to(r, target).map_or("not reached".into(), |t| format!("{t:.2}")),
            pct(s.overlap_ratio),
            pct(s.idle_share),
            mb(s.bytes_sent),
            mb(s.bytes_intra),
            mb(s.bytes_inter),
            format!("{:.2}", (m.params + m.grads + m.comm_buffers + m.optimizer + m.outer) as f64 / 1e6),
            format!("{mbr:.2}"),
        ]);
        let c = s.workers.iter().map(|w| w.compute_s).sum::<f64>() / n / rounds;
        let k = s.workers.iter().map(|w| w.comm_s).sum::<f64>() / n / rounds;
        let round = s.wall_s / rounds;
        per_round.rows.push(vec![
            r.spec.clone(),
            metrics::fixed(round, 4, 0),
            metrics::fixed(c, 4, 0),
            metrics::fixed(k, 4, 0),
            format!("{:.2}", round / c.max(k)),
            format!("{:.2}", round / (c + k)),
        ]);
        let per = |b: u64| format!("{:.1}", b as f64 / n / rounds / 1e3);
        bytes.rows.push(vec![
            r.spec.clone(),
            per(s.bytes_sent),
            per(s.bytes_intra),
            per(s.bytes_inter),
            r.exchange.map_or("-".into(), |(p, _)| p.to_string()),
            r.exchange.map_or("-".into(), |(_, c)| metrics::fixed(c, 4, 0)),
        ]);
    }
    Tables { main, per_round, bytes }
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
pub fn plots(results: &[MethodResult], clock: &str) -> Result<Vec<(&'static str, String)>> {
    let series = |x: fn(&super::compare_store::Round) -> f64| -> Vec<Series> {
        results
            .iter()
            .map(|r| Series {
                name: r.spec.clone(),
                points: r.rounds.iter().zip(smoothed(r)).map(|(p, l)| (x(p), l)).collect(),
            })
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
    use super::super::compare_store::Round;
    use super::*;

    fn result(spec: &str, losses: &[f32]) -> MethodResult {
        MethodResult {
            spec: spec.into(),
            label: spec.into(),
            config: String::new(),
            world: 2,
            rounds: losses
                .iter()
                .enumerate()
                .map(|(i, &loss)| Round { step: i as u64 + 1, tokens: 0, wall_s: i as f64 + 1.0, loss, bytes: 0.0 })
                .collect(),
            val_loss: 0.0,
            summary: crate::metrics::summarize(&[], 2, 0).unwrap(),
            memory: Default::default(),
            exchange: None,
            run_s: 0.0,
            membership: None,
        }
    }

    #[test]
    fn the_default_target_is_the_worst_final_loss_and_times_are_when_it_is_reached() {
        assert_eq!(smooth(&[4.0, 2.0, 0.0], 2), [4.0, 3.0, 1.0]);
        let a = result("a", &[6.0, 4.0, 2.0]);
        let b = result("b", &[6.0, 5.0, 4.0]);
        let rs = [a, b];
        // a: smoothed 6, 5, 4 (window 10 covers all): final 4; b: 6, 5.5, 5: final 5.
        assert_eq!(target_loss(&rs, None), 5.0);
        assert_eq!(target_loss(&rs, Some(4.5)), 4.5);
        // A method that diverged (smoothed 6, 33, 72: it ends above its
        // start) does not set the target, else every method would reach
        // 72 in its first round; with only diverged methods, the highest end.
        let diverged = result("d", &[6.0, 60.0, 150.0]);
        assert_eq!(target_loss(&[rs[0].clone(), rs[1].clone(), diverged.clone()], None), 5.0);
        assert_eq!(target_loss(&[diverged], None), 72.0);
        assert_eq!(time_to(&rs[0], 5.0), Some(2.0));
        assert_eq!(time_to(&rs[1], 5.0), Some(3.0));
        assert_eq!(time_to(&rs[1], 4.5), None);
        let t = tables(&rs, 5.0, "virtual");
        assert!(t.main.head.contains(&"virtual time (s)".to_string()), "{:?}", t.main.head);
        assert_eq!(t.main.rows[1][6], "3.00");
        let md = t.main.markdown();
        assert!(md.starts_with("| method | rounds |") && md.lines().nth(1).unwrap().starts_with("| --- |"), "{md}");
    }
}
