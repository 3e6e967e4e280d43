//! The numbers of a `lowcomm compare` sweep: the tables (rendered as
//! markdown for summary.md and as HTML for report.html from the same
//! cells), the curves (CSV) and the three plots.

use super::marks::{mark, smoothed, window_tokens, Kind, Mark, Peer};
use super::stats::Spread;
use super::store::MethodResult;
use crate::metrics;

/// One method of the sweep (all its seeds) with what the report derives from it.
pub struct Row<'a> {
    /// The first seed's result: the columns that show no spread are its.
    pub r: &'a MethodResult,
    /// Every seed's result with its training loss per round, smoothed over
    /// the sweep's window (marks.rs); the first seed's first.
    pub seeds: Vec<(&'a MethodResult, Vec<f64>)>,
    /// The mean over the seeds of the smoothed curves, round by round (up
    /// to the shortest); with one seed, its smoothed curve.
    pub smoothed: Vec<f64>,
    /// Diverged, unstable or sound: the worst of its seeds' marks.
    pub mark: Mark,
}

/// The seed a result ran with (its config's `train.seed`), if it says.
pub fn seed_of(r: &MethodResult) -> Option<u64> {
    let cfg: toml::Table = r.config.parse().ok()?;
    cfg.get("train")?.get("seed")?.as_integer().map(|s| s as u64)
}

/// Every method's row: `groups` holds each method's results, one per seed.
pub fn rows(groups: &[Vec<MethodResult>]) -> Vec<Row<'_>> {
    let window = window_tokens(&groups.iter().flatten().cloned().collect::<Vec<_>>());
    let curves: Vec<Vec<(&MethodResult, Vec<f64>)>> =
        groups.iter().filter(|g| !g.is_empty()).map(|g| g.iter().map(|r| (r, smoothed(r, window))).collect()).collect();
    // Each run's mark among its peers: the sweep's runs with its seed (marks.rs), in `curves`' order.
    let mut marks = {
        let all: Vec<(Option<u64>, Peer)> =
            curves.iter().flatten().map(|(r, s)| (seed_of(r), (*r, s.as_slice()))).collect();
        let peers =
            |seed: Option<u64>| -> Vec<Peer> { all.iter().filter(|(s, _)| *s == seed).map(|(_, p)| *p).collect() };
        all.iter().map(|&(seed, (r, s))| mark(r, s, &peers(seed))).collect::<Vec<Mark>>().into_iter()
    };
    curves
        .into_iter()
        .map(|seeds| {
            let own: Vec<Mark> = marks.by_ref().take(seeds.len()).collect();
            let len = seeds.iter().map(|(_, s)| s.len()).min().unwrap_or(0);
            let n = seeds.len() as f64;
            let mean = (0..len).map(|i| seeds.iter().map(|(_, s)| s[i]).sum::<f64>() / n).collect();
            Row { mark: worst_mark(&seeds, own), smoothed: mean, r: seeds[0].0, seeds }
        })
        .collect()
}

/// The worst of the seeds' `marks` (diverged, then unstable), the first of
/// that kind, saying which seed and in how many of the seeds.
fn worst_mark(seeds: &[(&MethodResult, Vec<f64>)], marks: Vec<Mark>) -> Mark {
    let rank = |m: &Mark| match m.kind {
        Kind::Diverged => 2,
        Kind::Unstable => 1,
        Kind::Sound => 0,
    };
    let worst = marks.iter().map(rank).max().unwrap_or(0);
    let Some(i) = marks.iter().position(|m| rank(m) == worst) else {
        return marks[0].clone();
    };
    let mut m = marks[i].clone();
    if seeds.len() > 1 && m.excluded() {
        let k = marks.iter().filter(|x| rank(x) == worst).count();
        let which = seed_of(seeds[i].0).map_or(String::new(), |s| format!("seed {s}; "));
        m.cell += &format!(" ({which}{k} of {} seeds)", seeds.len());
        m.why += &format!(" ({which}{k} of {} seeds)", seeds.len());
    }
    m
}

/// The loss every method is timed to: `given`, else the median final
/// smoothed training loss of the methods neither diverged nor unstable (of
/// an even count, the higher of the two middle ones): a loss half of them
/// end at. A method's final loss here is its highest seed's, so that the
/// method at the median reaches the target in every seed (by its mean, it
/// would in about half of them). Not the worst final loss of all, which
/// every method reaches: a method that ends worst would then set the
/// target and win the verdict by getting there early. If every method is
/// marked, the highest finite final loss.
pub fn target_loss(rows: &[Row], given: Option<f64>) -> f64 {
    given.unwrap_or_else(|| {
        let highest = |w: &Row| {
            w.seeds.iter().map(|(_, s)| s.last().copied().unwrap_or(f64::NAN)).fold(f64::NEG_INFINITY, f64::max)
        };
        let finals = |sound_only: bool| -> Vec<f64> {
            let mut v: Vec<f64> = rows
                .iter()
                .filter(|w| !sound_only || !w.mark.excluded())
                .map(highest)
                .filter(|l| l.is_finite())
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

/// A method's final smoothed training loss over its seeds.
pub fn final_loss(w: &Row) -> Spread {
    let finals: Vec<f64> = w.seeds.iter().map(|(_, s)| s.last().copied().unwrap_or(f64::NAN)).collect();
    Spread::of(&finals).unwrap_or(Spread { mean: f64::NAN, std: 0.0, n: 0 })
}

/// When each seed's smoothed training loss first got to `target` or below.
pub fn times_to(w: &Row, target: f64) -> Vec<Option<f64>> {
    w.seeds.iter().map(|(r, s)| s.iter().zip(&r.rounds).find(|(v, _)| **v <= target).map(|(_, x)| x.wall_s)).collect()
}

/// When `w` got to `target` over its seeds: `None` unless every seed did.
pub fn time_to(w: &Row, target: f64) -> Option<Spread> {
    times_to(w, target).into_iter().collect::<Option<Vec<f64>>>().and_then(|t| Spread::of(&t))
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
        "largest transfer (kB)",
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
            (None, false) => match times_to(w, target).iter().filter(|t| t.is_some()).count() {
                0 => "not reached".to_string(),
                k => format!("not reached ({k} of {} seeds did)", w.seeds.len()),
            },
            (Some(t), false) => t.cell(2),
        };
        let vals: Vec<f64> = w.seeds.iter().map(|(r, _)| r.val_loss as f64).collect();
        let all_finished = w.seeds.iter().all(|(r, _)| r.finished());
        main.rows.push(vec![
            r.spec.clone(),
            w.mark.cell.clone(),
            r.rounds.len().to_string(),
            tokens(r).to_string(),
            global_batch(r).map_or("-".into(), |b| format!("{b:.0}")),
            final_loss(w).cell(4),
            match Spread::of(&vals) {
                Some(v) if all_finished => v.cell(4),
                _ => "-".into(),
            },
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
            r.largest_transfer.map_or("-".into(), |b| format!("{:.1}", b as f64 / 1e3)),
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

#[cfg(test)]
mod tests {
    use super::super::marks::tests::result;
    use super::*;

    /// One seed each.
    fn each(rs: &[MethodResult]) -> Vec<Vec<MethodResult>> {
        rs.iter().map(|r| vec![r.clone()]).collect()
    }

    #[test]
    fn the_default_target_is_the_median_final_loss_of_the_sound_methods() {
        // Rounds of 100 tokens; the window is 10 rounds, which covers the 3 rounds of each.
        let a = result("a", &[6.0, 4.0, 2.0], 2.0);
        let b = result("b", &[6.0, 5.0, 4.0], 4.0);
        let c = result("c", &[6.0, 5.5, 5.5], 5.0);
        let rs = [a.clone(), b.clone()];
        let groups = each(&rs);
        let ws = rows(&groups);
        // a: smoothed 6, 5, 4: final 4; b: 6, 5.5, 5: final 5; c: 6, 5.75, 5.667.
        // Of two, the higher middle one: 5; of three, the middle one: 5 again.
        assert_eq!(target_loss(&ws, None), 5.0);
        assert_eq!(target_loss(&rows(&each(&[c, a.clone(), b.clone()])), None), 5.0);
        assert_eq!(target_loss(&ws, Some(4.5)), 4.5);
        assert_eq!(time_to(&ws[0], 5.0).map(|t| t.mean), Some(2.0));
        assert_eq!(time_to(&ws[1], 5.0).map(|t| t.mean), Some(3.0));
        assert_eq!(time_to(&ws[1], 4.5), None);
        // A method that ends above where it started (smoothed 6, 33, 72) is
        // unstable and sets no target (with it, the higher middle of 4 and 72);
        // nor does one whose model's validation loss is far off (final 3: with
        // it, the median of 3, 4, 5 would be 4).
        let up = result("up", &[6.0, 60.0, 150.0], 7.0);
        let far = result("far", &[6.0, 2.0, 1.0], 52.0);
        assert_eq!(target_loss(&rows(&each(&[a.clone(), up.clone()])), None), 4.0);
        assert_eq!(target_loss(&rows(&each(&[a.clone(), b.clone(), far.clone()])), None), 5.0);
        let all = [a, b, up.clone(), far];
        // With only marked methods, the highest finite end.
        assert_eq!(target_loss(&rows(&each(&[up])), None), 72.0);
        let groups = each(&all);
        let t = tables(&rows(&groups), 5.0, "virtual");
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
    fn two_seeds_show_mean_and_spread_and_a_marked_seed_marks_the_method() {
        let seeded = |losses: &[f32], val: f32, seed: u64| {
            let mut r = result("ddp", losses, val);
            r.config = format!("[train]\nseed = {seed}\n");
            r
        };
        // Window 10 rounds covers all 3: smoothed 6, 5.5, 5 and 6, 5, 4; vals 4 and 3.
        let groups = vec![vec![seeded(&[6.0, 5.0, 4.0], 4.0, 7), seeded(&[6.0, 4.0, 2.0], 3.0, 8)]];
        let ws = rows(&groups);
        // Mean 4.5, sample std sqrt(((5 - 4.5)^2 + (4 - 4.5)^2) / 1) = 0.7071.
        assert_eq!(final_loss(&ws[0]), Spread { mean: 4.5, std: 0.5f64.sqrt(), n: 2 });
        assert_eq!(ws[0].smoothed, [6.0, 5.25, 4.5]);
        // To 5: seed 7 at round 3 (3 s), seed 8 at round 2 (smoothed 5, 2 s): 2.5 +- 0.71.
        assert_eq!(times_to(&ws[0], 5.0), [Some(3.0), Some(2.0)]);
        let t = tables(&ws, 5.0, "virtual");
        let cell = |col: &str| t.main.rows[0][t.main.head.iter().position(|h| h == col).unwrap()].clone();
        assert_eq!(cell("final train loss"), "4.5000 ± 0.7071");
        assert_eq!(cell("val loss"), "3.5000 ± 0.7071");
        assert_eq!(cell("time to loss 5.0000 (s)"), "2.50 ± 0.71");
        // The default target is the highest seed's final loss (5), not the mean (4.5), so both reach it.
        assert_eq!(target_loss(&ws, None), 5.0);
        // To 4.5 only seed 8 gets there.
        let t = tables(&ws, 4.5, "virtual");
        assert_eq!(t.main.rows[0][8], "not reached (1 of 2 seeds did)");
        // A second seed that climbs back: the method is marked, naming the seed.
        let groups = vec![vec![seeded(&[6.0, 5.0, 4.0], 4.0, 7), seeded(&[6.0, 60.0, 150.0], 7.0, 8)]];
        let ws = rows(&groups);
        assert_eq!(ws[0].mark.kind, Kind::Unstable);
        assert!(ws[0].mark.cell.ends_with("(seed 8; 1 of 2 seeds)"), "{}", ws[0].mark.cell);
    }

    #[test]
    fn runs_are_each_others_peers_only_with_the_same_seed() {
        // Two warm starts whose curves rise together at round 3 (smoothed over the window of all
        // three rounds: 4.6, 4.5, 4.67; a rise of 0.17 where 0.1 is allowed): with the same seed
        // (the same data) the shared rise does not count; with different seeds, each is judged alone.
        let with_seed = |spec: &str, seed: u64| {
            let mut r = result(spec, &[4.6, 4.4, 5.0], 4.4);
            r.config = format!("[train]\nseed = {seed}\n");
            r
        };
        let same = each(&[with_seed("a", 1), with_seed("b", 1)]);
        assert!(rows(&same).iter().all(|w| w.mark.kind == Kind::Sound));
        let apart = each(&[with_seed("a", 1), with_seed("b", 2)]);
        assert!(rows(&apart).iter().all(|w| w.mark.kind == Kind::Unstable));
    }
}
