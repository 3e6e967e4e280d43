//! The verdict that ends a `lowcomm compare` report: which method to use,
//! and why each other one lost.
//!
//! The recommended method is the one that reaches the target loss first in
//! the run's time (virtual under `sim`, else wall-clock) and ends at or
//! below it, among those that
//! are neither diverged nor unstable (marks.rs) and fit in device
//! memory (the cluster profile's `[device] memory`, against a worker's
//! memory as the run measured it, by `plan::fits`: the rule `plan` uses;
//! fit is unknown without it and then excludes nobody). With `--seeds N`
//! a method's time is the mean over its seeds, and it reaches the target
//! only if every seed does; it ends at or below the target by its mean
//! final loss. Methods whose time ties with the fastest's by
//! [`stats::tied`] are named as a tie: with two seeds or more, a mean
//! within the sum of the two standard deviations; with one seed, within
//! [`ONE_SEED_TIE`] (5%). Each other method gets one line: diverged,
//! unstable, needs more memory, did not reach the target, reached it but
//! ended above it, or slower by how much.

use super::marks::Mark;
use super::stats::{self, Spread, ONE_SEED_TIE};
use crate::plan::rank::gb;

/// What the verdict needs of one method.
pub struct Entrant<'a> {
    pub spec: &'a str,
    pub mark: &'a Mark,
    /// When its smoothed training loss first got to the target, over its
    /// seeds (`None` unless every seed got there).
    pub time_to: Option<Spread>,
    /// Seeds that got to the target, of `seeds`.
    pub reached: usize,
    pub seeds: usize,
    /// Its smoothed training loss at the end (mean over its seeds).
    pub final_loss: f64,
    /// One worker's memory, bytes.
    pub memory: f64,
}

/// The verdict: the recommendation line, then one line per other method.
pub fn verdict(entrants: &[Entrant], target: f64, clock: &str, device_memory: Option<f64>) -> Vec<String> {
    let fits = |e: &Entrant| crate::plan::fits(e.memory, device_memory) != Some(false);
    let stays = |e: &Entrant| e.final_loss <= target;
    let time = |e: &Entrant| e.time_to.filter(|_| !e.mark.excluded() && fits(e) && stays(e));
    let best = entrants.iter().filter_map(time).min_by(|a, b| a.mean.total_cmp(&b.mean));
    let tied: Vec<&Entrant> = match best {
        Some(b) => entrants.iter().filter(|e| time(e).is_some_and(|t| stats::tied(&t, &b, ONE_SEED_TIE))).collect(),
        None => Vec::new(),
    };
    let seeds = entrants.iter().map(|e| e.seeds).max().unwrap_or(1);
    let at = |e: &Entrant| format!("{} ({} s)", e.spec, time(e).map_or("-".into(), |t| t.cell(2)));
    let fit_said = match device_memory {
        Some(m) => format!("fit in {} of device memory", gb(m)),
        None => "fit (the cluster profile gives no device memory: fit unknown)".to_string(),
    };
    let over = if seeds > 1 { format!(", mean over {seeds} seeds") } else { String::new() };
    let mut lines = vec![match (tied.as_slice(), best) {
        ([one], Some(b)) => format!(
            "Recommendation: {}: of the methods that are neither diverged nor unstable and {fit_said}, it reaches the target loss {target:.4} first (and ends at or below it), in {} s of {clock} time{over}.",
            one.spec, b.cell(2)
        ),
        ([], _) | (_, None) => format!(
            "Recommendation: none: no method that is neither diverged nor unstable and that {fit_said} reached the target loss {target:.4} and ended at or below it."
        ),
        (many, Some(_)) if seeds > 1 => format!(
            "Recommendation: a tie between {}: their mean {clock} times to the target loss {target:.4} over {seeds} seeds differ by no more than the sum of their standard deviations, so the seeds cannot tell them apart.",
            many.iter().map(|e| at(e)).collect::<Vec<_>>().join(", ")
        ),
        (many, Some(_)) => format!(
            "Recommendation: a tie between {}: they reach the target loss {target:.4} within {:.0}% of each other's {clock} time, closer than one seed can tell apart (--seeds 3 measures the spread).",
            many.iter().map(|e| at(e)).collect::<Vec<_>>().join(", "),
            100.0 * ONE_SEED_TIE
        ),
    }];
    let best = best.map_or(f64::NAN, |b| b.mean);
    for e in entrants.iter().filter(|e| !tied.iter().any(|t| std::ptr::eq(*t, *e))) {
        let why = if e.mark.excluded() {
            e.mark.why.clone()
        } else if !fits(e) {
            format!(
                "needs more memory: {} per worker, more than the device's {}",
                gb(e.memory),
                gb(device_memory.unwrap_or(0.0))
            )
        } else {
            match e.time_to {
                None if e.reached > 0 => format!(
                    "did not reach the target loss {target:.4} in every seed ({} of {} did; ended at {:.4})",
                    e.reached, e.seeds, e.final_loss
                ),
                None => format!("did not reach the target loss {target:.4} (ended at {:.4})", e.final_loss),
                Some(t) if !stays(e) => format!(
                    "reached the target loss {target:.4} at {} s but ended above it, at {:.4}",
                    t.cell(2),
                    e.final_loss
                ),
                Some(t) => format!(
                    "slower by {:.0}% ({} s against {best:.2} s{over})",
                    100.0 * (t.mean / best - 1.0),
                    t.cell(2)
                ),
            }
        };
        lines.push(format!("{}: {why}", e.spec));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::super::marks::{Kind, Mark};
    use super::*;

    fn sound() -> Mark {
        Mark { kind: Kind::Sound, cell: "ok".into(), why: String::new() }
    }

    /// A method of one seed that ends at 6.0 (below every target here) unless `time_to` is `None`.
    fn entrant<'a>(spec: &'a str, mark: &'a Mark, time_to: Option<f64>, memory: f64) -> Entrant<'a> {
        let final_loss = if time_to.is_some() { 6.0 } else { 7.0 };
        let time_to = time_to.map(|t| Spread { mean: t, std: 0.0, n: 1 });
        Entrant { spec, mark, time_to, reached: time_to.map_or(0, |_| 1), seeds: 1, memory, final_loss }
    }

    #[test]
    fn the_fastest_to_the_target_wins_and_each_other_says_why_it_lost() {
        let ok = sound();
        let diverged = Mark { kind: Kind::Diverged, cell: String::new(), why: "diverged: val loss 52".into() };
        let unstable = Mark { kind: Kind::Unstable, cell: String::new(), why: "unstable: rose".into() };
        let es = [
            entrant("ddp", &ok, Some(8.0), 1e9),
            // Fastest, but diverged or unstable: out.
            entrant("async-diloco", &diverged, Some(1.0), 1e9),
            entrant("co2", &unstable, Some(1.5), 1e9),
            entrant("local-sgd", &ok, Some(2.0), 1e9),
            // Faster still, but 100 GB does not fit in 80.
            entrant("overlap-local-sgd", &ok, Some(1.8), 100e9),
            entrant("acco", &ok, None, 1e9),
            // Got there first of all, but ended above the target.
            Entrant { final_loss: 6.7, ..entrant("diloco", &ok, Some(0.5), 1e9) },
        ];
        let v = verdict(&es, 6.5, "virtual", Some(80e9));
        assert!(
            v[0].starts_with("Recommendation: local-sgd: ") && v[0].contains("in 2.00 s of virtual time"),
            "{}",
            v[0]
        );
        assert_eq!(
            v[1..],
            [
                "ddp: slower by 300% (8.00 s against 2.00 s)",
                "async-diloco: diverged: val loss 52",
                "co2: unstable: rose",
                "overlap-local-sgd: needs more memory: 100 GB per worker, more than the device's 80 GB",
                "acco: did not reach the target loss 6.5000 (ended at 7.0000)",
                "diloco: reached the target loss 6.5000 at 0.50 s but ended above it, at 6.7000",
            ]
        );
        // Without device memory, fit is unknown and excludes nobody.
        let v = verdict(&es, 6.5, "virtual", None);
        assert!(v[0].starts_with("Recommendation: overlap-local-sgd: ") && v[0].contains("fit unknown"), "{}", v[0]);
    }

    #[test]
    fn times_within_five_percent_of_the_fastest_are_a_tie() {
        let ok = sound();
        // 2.00 and 2.09 (4.5% slower) tie; 2.12 (6%) is slower.
        let es = [
            entrant("demo", &ok, Some(2.09), 0.0),
            entrant("diloco", &ok, Some(2.0), 0.0),
            entrant("ddp", &ok, Some(2.12), 0.0),
        ];
        let v = verdict(&es, 6.5, "wall", None);
        assert!(v[0].starts_with("Recommendation: a tie between demo (2.09 s), diloco (2.00 s): "), "{}", v[0]);
        assert!(v[0].contains("--seeds 3 measures the spread"), "{}", v[0]);
        assert_eq!(v[1..], ["ddp: slower by 6% (2.12 s against 2.00 s)"]);
    }

    #[test]
    fn over_seeds_a_mean_within_the_sum_of_the_spreads_is_a_tie() {
        let ok = sound();
        let over3 = |spec, mean, std| Entrant {
            time_to: Some(Spread { mean, std, n: 3 }),
            reached: 3,
            seeds: 3,
            ..entrant(spec, &ok, Some(0.0), 0.0)
        };
        // Fastest 2.0 +- 0.1; 2.25 +- 0.15 is within 0.25: a tie; 2.5 +- 0.1 (0.5 > 0.2) is slower,
        // though 5% would not have said so for the first and would for both.
        let es = [over3("diloco", 2.0, 0.1), over3("demo", 2.25, 0.15), over3("ddp", 2.5, 0.1)];
        let v = verdict(&es, 6.5, "virtual", None);
        assert!(
            v[0].starts_with("Recommendation: a tie between diloco (2.00 ± 0.10 s), demo (2.25 ± 0.15 s): ")
                && v[0].contains("over 3 seeds"),
            "{}",
            v[0]
        );
        assert_eq!(v[1..], ["ddp: slower by 25% (2.50 ± 0.10 s against 2.00 s, mean over 3 seeds)"]);
        // A method that reached the target in 2 of 3 seeds did not reach it.
        let some = Entrant { time_to: None, reached: 2, ..over3("co2", 1.0, 0.0) };
        let v = verdict(&[over3("ddp", 2.5, 0.1), some], 6.5, "virtual", None);
        assert!(v[0].starts_with("Recommendation: ddp: ") && v[0].contains("mean over 3 seeds"), "{}", v[0]);
        assert_eq!(v[1], "co2: did not reach the target loss 6.5000 in every seed (2 of 3 did; ended at 6.0000)");
    }

    #[test]
    fn with_every_method_out_there_is_no_recommendation() {
        let d = Mark { kind: Kind::Diverged, cell: String::new(), why: "diverged: NaN".into() };
        let v = verdict(&[entrant("ddp", &d, Some(1.0), 0.0)], 6.0, "virtual", None);
        assert_eq!(v.len(), 2);
        assert!(v[0].starts_with("Recommendation: none: "), "{}", v[0]);
        assert_eq!(v[1], "ddp: diverged: NaN");
    }
}
