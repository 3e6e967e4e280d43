//! The verdict that ends a `lowcomm compare` report: which method to use,
//! and why each other one lost.
//!
//! The recommended method is the one that reaches the target loss first in
//! the run's time (virtual under `sim`, else wall-clock) and ends at or
//! below it, among those that
//! are neither diverged nor unstable (marks.rs) and fit in device
//! memory (the cluster profile's `[device] memory`, against a worker's
//! memory as the run measured it, by `plan::fits`: the rule `plan` uses;
//! fit is unknown without it and then excludes nobody). Methods within
//! [`TIE`] of the fastest are named as a tie: one seed cannot tell them
//! apart (a `--seeds` sweep, which would measure the spread, comes later).
//! Each other method gets one line: diverged, unstable, needs more memory,
//! did not reach the target, reached it but ended above it, or slower by
//! how much.

use super::marks::Mark;
use crate::plan::rank::gb;

/// Times within this share of the fastest are a tie (one seed).
pub const TIE: f64 = 0.05;

/// What the verdict needs of one method.
pub struct Entrant<'a> {
    pub spec: &'a str,
    pub mark: &'a Mark,
    /// When its smoothed training loss first got to the target.
    pub time_to: Option<f64>,
    /// Its smoothed training loss at the end.
    pub final_loss: f64,
    /// One worker's memory, bytes.
    pub memory: f64,
}

/// The verdict: the recommendation line, then one line per other method.
pub fn verdict(entrants: &[Entrant], target: f64, clock: &str, device_memory: Option<f64>) -> Vec<String> {
    let fits = |e: &Entrant| crate::plan::fits(e.memory, device_memory) != Some(false);
    let stays = |e: &Entrant| e.final_loss <= target;
    let time = |e: &Entrant| e.time_to.filter(|_| !e.mark.excluded() && fits(e) && stays(e));
    let best = entrants.iter().filter_map(time).fold(f64::INFINITY, f64::min);
    let tied: Vec<&Entrant> = entrants.iter().filter(|e| time(e).is_some_and(|t| t <= best * (1.0 + TIE))).collect();
    let at = |e: &Entrant| format!("{} ({:.2} s)", e.spec, time(e).unwrap_or(f64::NAN));
    let fit_said = match device_memory {
        Some(m) => format!("fit in {} of device memory", gb(m)),
        None => "fit (the cluster profile gives no device memory: fit unknown)".to_string(),
    };
    let mut lines = vec![match tied.as_slice() {
        [] => format!(
            "Recommendation: none: no method that is neither diverged nor unstable and that {fit_said} reached the target loss {target:.4} and ended at or below it."
        ),
        [one] => format!(
            "Recommendation: {}: of the methods that are neither diverged nor unstable and {fit_said}, it reaches the target loss {target:.4} first (and ends at or below it), in {:.2} s of {clock} time.",
            one.spec, best
        ),
        many => format!(
            "Recommendation: a tie between {}: they reach the target loss {target:.4} within {:.0}% of each other's {clock} time, closer than one seed can tell apart (a --seeds sweep, to come, would measure the spread; until then rerun with other --seed values).",
            many.iter().map(|e| at(e)).collect::<Vec<_>>().join(", "),
            100.0 * TIE
        ),
    }];
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
                None => format!("did not reach the target loss {target:.4} (ended at {:.4})", e.final_loss),
                Some(t) if !stays(e) => format!(
                    "reached the target loss {target:.4} at {t:.2} s but ended above it, at {:.4}",
                    e.final_loss
                ),
                Some(t) => format!("slower by {:.0}% ({t:.2} s against {best:.2} s)", 100.0 * (t / best - 1.0)),
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

    /// A method that ends at 6.0 (below every target here) unless `time_to` is `None`.
    fn entrant<'a>(spec: &'a str, mark: &'a Mark, time_to: Option<f64>, memory: f64) -> Entrant<'a> {
        let final_loss = if time_to.is_some() { 6.0 } else { 7.0 };
        Entrant { spec, mark, time_to, memory, final_loss }
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
            Entrant { spec: "diloco", mark: &ok, time_to: Some(0.5), memory: 1e9, final_loss: 6.7 },
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
        assert!(v[0].contains("--seeds"), "{}", v[0]);
        assert_eq!(v[1..], ["ddp: slower by 6% (2.12 s against 2.00 s)"]);
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
