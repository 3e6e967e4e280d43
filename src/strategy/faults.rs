//! A fault plan: which workers crash and rejoin when (issue 10, "workers
//! that leave and join"), as a pure value the runtimes can query, so the
//! same plan is injected in sim (virtual seconds) and in real runs (wall
//! seconds since the run started).
//!
//! Written as `WORKER:crash@SECONDS` and `WORKER:join@SECONDS` items,
//! comma-separated: the flag `--faults 2:crash@120,2:join@300`, or the same
//! string in the config:
//!
//! ```toml
//! [faults]
//! plan = "2:crash@120,2:join@300"
//! ```
//!
//! - A worker is down on `[crash, join)`: at the crash's instant it is
//!   already down, at the join's instant it is back (it then starts from
//!   the server's current model with fresh inner state).
//! - Per worker the events alternate crash, join, crash, ... in time; the
//!   last crash may have no join (the worker stays down).
//! - At every instant at least one worker is up: a plan that takes every
//!   worker down at once leaves nothing to train and is refused.
//!
//! Only `async-diloco` survives a fault (`Method::fault_plan` refuses the
//! others, and MPI); `membership.rs` injects the plan into its runs.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// What happens to a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// The worker stops (mid-inner-loop: its round in progress is lost).
    Crash,
    /// The worker comes back.
    Join,
}

impl FaultKind {
    /// The name in a plan (`crash`, `join`).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Crash => "crash",
            FaultKind::Join => "join",
        }
    }
}

/// One event of a plan.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fault {
    /// The worker (0-based).
    pub worker: usize,
    /// Crash or join.
    pub kind: FaultKind,
    /// When, in seconds from the run's start (virtual in sim), >= 0.
    pub at_s: f64,
}

/// The `[faults]` config section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultsSection {
    /// The plan, e.g. `"2:crash@120,2:join@300"`. Flag `--faults`. Default
    /// empty: no faults.
    pub plan: String,
}

/// A checked fault plan for a run of `workers` workers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultPlan {
    /// Every event, by time (ties: by worker, then crash before join).
    events: Vec<Fault>,
}

const EXAMPLE: &str = "e.g. --faults 2:crash@120,2:join@300";

impl FaultsSection {
    /// Whether no plan is given (the section is then left out of saved configs).
    pub fn is_empty(&self) -> bool {
        self.plan.trim().is_empty()
    }
}

impl FaultPlan {
    /// Parses and checks `text` for `workers` workers; each error names
    /// `--faults` / `[faults] plan`, the offending item and a valid example.
    pub fn parse(text: &str, workers: usize) -> Result<FaultPlan> {
        let mut events = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            events.push(parse_item(item, workers)?);
        }
        events.sort_by(|a, b| a.at_s.total_cmp(&b.at_s).then(a.worker.cmp(&b.worker)).then(a.kind.cmp_key(b.kind)));
        let plan = FaultPlan { events };
        plan.check(workers)?;
        Ok(plan)
    }

    /// Every event, by time.
    pub fn events(&self) -> &[Fault] {
        &self.events
    }

    /// Whether the plan has no event.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Whether `worker` is up at `t` seconds (down on `[crash, join)`).
    pub fn alive(&self, worker: usize, t: f64) -> bool {
        self.events.iter().rev().find(|f| f.worker == worker && f.at_s <= t).is_none_or(|f| f.kind == FaultKind::Join)
    }

    /// The workers (of `workers`) that are up at `t` seconds.
    pub fn alive_at(&self, workers: usize, t: f64) -> Vec<usize> {
        (0..workers).filter(|&w| self.alive(w, t)).collect()
    }

    /// `worker`'s first event strictly after `t`, if any (a worker that is
    /// up at `t` checks it to know when to stop mid-inner-loop).
    pub fn next_event(&self, worker: usize, t: f64) -> Option<Fault> {
        self.events.iter().find(|f| f.worker == worker && f.at_s > t).copied()
    }

    /// The plan as one line per worker, for the run's report, e.g.
    /// `worker 2: down 120-300 s`; "no faults" for an empty plan.
    pub fn describe(&self, workers: usize) -> String {
        let mut lines = Vec::new();
        for w in 0..workers {
            let mine: Vec<&Fault> = self.events.iter().filter(|f| f.worker == w).collect();
            if mine.is_empty() {
                continue;
            }
            let spans: Vec<String> = mine
                .chunks(2)
                .map(|c| match c {
                    [down, up] => format!("{}-{} s", down.at_s, up.at_s),
                    [down] => format!("from {} s on", down.at_s),
                    _ => unreachable!("chunks of 1 or 2"),
                })
                .collect();
            lines.push(format!("worker {w}: down {}", spans.join(", ")));
        }
        if lines.is_empty() {
            "no faults".into()
        } else {
            lines.join("; ")
        }
    }

    /// Per worker, events alternate crash and join with increasing times,
    /// and some worker is up at every instant.
    fn check(&self, workers: usize) -> Result<()> {
        for w in 0..workers {
            let mut last: Option<&Fault> = None;
            for f in self.events.iter().filter(|f| f.worker == w) {
                match (last, f.kind) {
                    (None, FaultKind::Join) => bail!(
                        "--faults / [faults] plan: worker {w} joins at {} s but has not crashed before: a join follows its crash, {EXAMPLE}",
                        f.at_s
                    ),
                    (Some(p), _) if p.at_s == f.at_s => bail!(
                        "--faults / [faults] plan: worker {w} has two events at {} s: give each a later time than the one before, {EXAMPLE}",
                        f.at_s
                    ),
                    (Some(p), k) if p.kind == k => bail!(
                        "--faults / [faults] plan: worker {w} would {} at {} s while already {} (since {} s): crash and join must alternate in time, {EXAMPLE}",
                        k.name(),
                        f.at_s,
                        if k == FaultKind::Crash { "down" } else { "up" },
                        p.at_s
                    ),
                    _ => {}
                }
                last = Some(f);
            }
        }
        // Only a crash can take the last worker down: check at each one.
        if let Some(f) =
            self.events.iter().find(|f| f.kind == FaultKind::Crash && self.alive_at(workers, f.at_s).is_empty())
        {
            bail!(
                "--faults / [faults] plan: at {} s every worker is down (worker {} crashes last): keep at least one up, {EXAMPLE}",
                f.at_s,
                f.worker
            );
        }
        Ok(())
    }
}

impl FaultKind {
    /// Crash before join among events at the same instant of one worker
    /// (the check then refuses them anyway).
    fn cmp_key(self, other: FaultKind) -> std::cmp::Ordering {
        (self == FaultKind::Join).cmp(&(other == FaultKind::Join))
    }
}

/// One `WORKER:crash@SECONDS` or `WORKER:join@SECONDS` item.
fn parse_item(item: &str, workers: usize) -> Result<Fault> {
    let bad = || {
        anyhow::anyhow!(
            "--faults / [faults] plan: `{item}` is not WORKER:crash@SECONDS or WORKER:join@SECONDS, {EXAMPLE}"
        )
    };
    let (w, rest) = item.split_once(':').ok_or_else(bad)?;
    let (kind, at) = rest.split_once('@').ok_or_else(bad)?;
    let worker: usize = w.trim().parse().map_err(|_| bad())?;
    let kind = match kind.trim() {
        "crash" => FaultKind::Crash,
        "join" => FaultKind::Join,
        _ => return Err(bad()),
    };
    let at_s: f64 = at.trim().parse().map_err(|_| bad())?;
    if worker >= workers {
        bail!(
            "--faults / [faults] plan: `{item}` names worker {worker}, but the run has workers 0..{} (--workers {workers}), {EXAMPLE}",
            workers.saturating_sub(1)
        );
    }
    if !(at_s >= 0.0 && at_s.is_finite()) {
        bail!("--faults / [faults] plan: `{item}`: the time must be a number of seconds >= 0, {EXAMPLE}");
    }
    Ok(Fault { worker, kind, at_s })
}

/// A crash or join as it happened to one worker, for the run's events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultRecord {
    /// The worker.
    pub worker: usize,
    /// `crash` or `join`.
    pub event: String,
    /// When the plan says (seconds from the run's start, virtual in sim).
    pub at_s: f64,
    /// When the worker acted on it: the first inner-step boundary at or
    /// after a crash (or at once while waiting), the join time for a join.
    pub observed_s: f64,
    /// Inner steps the worker had taken by then (metrics.jsonl keys lines by step).
    pub step: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str, workers: usize) -> String {
        FaultPlan::parse(text, workers).unwrap_err().to_string()
    }

    #[test]
    fn a_worker_is_down_from_its_crash_until_its_join() {
        let p = FaultPlan::parse("2:crash@120, 2:join@300", 4).unwrap();
        assert_eq!(p.events().len(), 2);
        // [crash, join): down at 120, up again at 300.
        assert_eq!(
            [0.0, 119.9, 120.0, 299.9, 300.0, 1e6].map(|t| p.alive(2, t)),
            [true, true, false, false, true, true]
        );
        assert!(p.alive(1, 200.0), "other workers are untouched");
        assert_eq!(p.alive_at(4, 200.0), [0, 1, 3]);
        assert_eq!(p.alive_at(4, 300.0), [0, 1, 2, 3]);
        assert_eq!(p.next_event(2, 0.0), Some(Fault { worker: 2, kind: FaultKind::Crash, at_s: 120.0 }));
        assert_eq!(p.next_event(2, 120.0).map(|f| (f.kind, f.at_s)), Some((FaultKind::Join, 300.0)));
        assert_eq!(p.next_event(2, 300.0), None);
        assert_eq!(p.describe(4), "worker 2: down 120-300 s");
    }

    #[test]
    fn items_in_any_order_several_crashes_and_a_crash_for_good() {
        // Given out of order; sorted by time. Worker 0 crashes twice, worker 1 for good.
        let p = FaultPlan::parse("0:join@20,1:crash@15,0:crash@10,0:crash@30,0:join@40", 3).unwrap();
        let at: Vec<(usize, f64)> = p.events().iter().map(|f| (f.worker, f.at_s)).collect();
        assert_eq!(at, [(0, 10.0), (1, 15.0), (0, 20.0), (0, 30.0), (0, 40.0)]);
        assert_eq!(p.alive_at(3, 16.0), [2]);
        assert_eq!(p.alive_at(3, 35.0), [2]);
        assert_eq!(p.alive_at(3, 50.0), [0, 2]);
        assert_eq!(p.describe(3), "worker 0: down 10-20 s, 30-40 s; worker 1: down from 15 s on");
        assert!(FaultPlan::parse("", 2).unwrap().is_empty());
        assert_eq!(FaultPlan::default().describe(2), "no faults");
    }

    #[test]
    fn bad_plans_say_what_is_wrong_with_an_example() {
        for (text, workers, want) in [
            ("4:crash@10", 4, "names worker 4, but the run has workers 0..3 (--workers 4)"),
            ("1:join@300,1:crash@400", 2, "worker 1 joins at 300 s but has not crashed before"),
            ("1:crash@120,1:crash@200", 2, "worker 1 would crash at 200 s while already down (since 120 s)"),
            ("1:crash@1,1:join@2,1:join@3", 2, "worker 1 would join at 3 s while already up"),
            ("1:crash@120,1:join@120", 2, "worker 1 has two events at 120 s"),
            ("0:crash@5,1:crash@7", 2, "at 7 s every worker is down (worker 1 crashes last)"),
            ("0:crash@-1", 2, "the time must be a number of seconds >= 0"),
            ("2crash@120", 4, "`2crash@120` is not WORKER:crash@SECONDS"),
            ("2:leave@120", 4, "`2:leave@120` is not"),
            ("2:crash@soon", 4, "`2:crash@soon` is not"),
        ] {
            let e = err(text, workers);
            assert!(
                e.starts_with("--faults / [faults] plan: ") && e.contains(want) && e.contains(EXAMPLE),
                "{text}: {e}"
            );
        }
        // A worker down while another is up is fine, even back to back.
        assert!(FaultPlan::parse("0:crash@5,0:join@7,1:crash@7", 2).is_ok());
    }

    #[test]
    fn the_config_section_takes_only_plan() {
        let s: FaultsSection = toml::from_str("plan = \"2:crash@120,2:join@300\"").unwrap();
        assert_eq!(FaultPlan::parse(&s.plan, 3).unwrap().events().len(), 2);
        assert!(toml::from_str::<FaultsSection>("crash = 1").is_err());
    }
}
