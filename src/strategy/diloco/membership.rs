//! Workers that leave and join an asynchronous run (issue 10): the fault
//! plan of `faults.rs` injected into async DiLoCo's worker and server, the
//! same way in sim (virtual seconds) and on threads (wall seconds since the
//! run started), and what the run reports about it.
//!
//! ```text
//! worker w (a crash at c, a join at j)          server
//! before each inner step and before sending:    recv_any:
//!     now >= c: the round is lost (no delta)       LEFT from w: w is down; not waited for,
//!     record crash; send LEFT (the notice)                      dropped from its grace group
//!     drop every message until j (STOP: end)       HELLO from w: w is up; it gets the current
//!     record join; fresh inner state; HELLO                      model at once (if the budget is open)
//! ```
//!
//! - How the server learns of a death: a real server would notice a missed
//!   heartbeat or a closed connection. Here the runtime's stand-in is a
//!   `LEFT` notice on the dead worker's own channel, sent when the worker
//!   notices its crash time has passed (the next inner-step boundary, or at
//!   once while it waits for a model). Channels are FIFO, so the notice
//!   comes after every update the worker sent before it died, as a closed
//!   connection's end comes after its data: every update that reached the
//!   server is applied, and a round in progress is simply absent.
//! - A dead worker's thread does no more work: it only drops what reaches
//!   it (a model handed out before the server heard of the death is lost
//!   with the machine) until its join time, or until the run's STOP.
//! - A joining worker starts from the server's current model with fresh
//!   inner state (new AdamW moments, as a replacement machine would have);
//!   its step counter continues, so its schedule stays where the run is
//!   (no second warm-up) and its curve's step numbers keep increasing.
//! - The server never waits for a dead worker: its updates in flight stop
//!   counting, a grace group is handed out once every live worker is in,
//!   DyLU's fastest worker is the fastest live one, and while every worker
//!   is down or done the run waits only for those the plan brings back.

use crate::comm::Message;
use crate::runtime::{Ctx, RecvAny, Send};
use crate::strategy::faults::{Fault, FaultKind, FaultPlan, FaultRecord};
use crate::strategy::journal::Journal;

/// The tag of the failure notice (the runtime's stand-in for a missed heartbeat).
pub const LEFT: u32 = 5;

/// One worker's side of the plan: its own events, and which comes next.
pub struct Lifeline {
    mine: Vec<Fault>,
    next: usize,
}

impl Lifeline {
    /// `worker`'s events in `plan`.
    pub fn new(plan: &FaultPlan, worker: usize) -> Lifeline {
        Lifeline { mine: plan.events().iter().filter(|f| f.worker == worker).copied().collect(), next: 0 }
    }

    /// When the next crash is due (`None`: never), e.g. as a receive's deadline.
    pub fn next_crash(&self) -> Option<f64> {
        self.mine.get(self.next).filter(|f| f.kind == FaultKind::Crash).map(|f| f.at_s)
    }

    /// Whether the worker's crash time has passed by `now` (checked between
    /// inner steps: a crash and a join inside one step still count).
    pub fn crashed(&self, now: f64) -> bool {
        self.next_crash().is_some_and(|c| c <= now)
    }

    /// The worker, `steps` inner steps in, is down: records the crash, tells `server` (the notice),
    /// drops every message until its join time. `true`: it has joined
    /// (the caller starts fresh and says hello); `false`: the run's `stop`
    /// message came first, or it never joins and the run ended.
    pub async fn down<C: Ctx>(&mut self, ctx: &mut C, server: usize, stop: u32, steps: u64, j: &mut Journal) -> bool {
        let crash = self.mine[self.next];
        j.fault(record(&crash, ctx.now(), steps));
        ctx.run(Send { to: server, msg: Message::new(LEFT) }).await;
        let join = self.mine.get(self.next + 1).copied();
        loop {
            match ctx.run(RecvAny { deadline_s: join.map(|f| f.at_s) }).await {
                Some((_, m)) if m.tag == stop => return false,
                // Lost with the machine (a model handed out before the server heard).
                Some(_) => {}
                None => break,
            }
        }
        let join = join.expect("only a deadline ends the wait");
        self.next += 2;
        j.fault(record(&join, join.at_s.max(ctx.now()), steps));
        true
    }
}

fn record(f: &Fault, observed_s: f64, step: u64) -> FaultRecord {
    FaultRecord { worker: f.worker, event: f.kind.name().into(), at_s: f.at_s, observed_s, step }
}

/// Where a worker is, as the server sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seat {
    /// Training on a model the server handed it, for this many inner steps.
    Out(u64),
    /// Up and waiting for a model (reported, or joined after the budget).
    Waiting,
    /// Down (its notice arrived).
    Down,
}

/// The server's view of who is up: updates it still waits for, and who
/// will come back.
pub struct Roster {
    seats: Vec<Seat>,
    left: Vec<u64>,
}

impl Roster {
    /// `workers` workers, all up and waiting for their first model.
    pub fn new(workers: usize) -> Roster {
        Roster { seats: vec![Seat::Waiting; workers], left: vec![0; workers] }
    }

    /// Updates the server still waits for (models out with live workers).
    pub fn out(&self) -> usize {
        self.seats.iter().filter(|s| matches!(s, Seat::Out(_))).count()
    }

    /// Inner steps in the models out: the run's budget they have taken.
    pub fn steps_out(&self) -> u64 {
        self.seats.iter().map(|s| if let Seat::Out(steps) = s { *steps } else { 0 }).sum()
    }

    /// `w` was handed a model for `steps` inner steps.
    pub fn handed(&mut self, w: usize, steps: u64) {
        self.seats[w] = Seat::Out(steps);
    }

    /// `w`'s update arrived.
    pub fn reported(&mut self, w: usize) {
        self.seats[w] = Seat::Waiting;
    }

    /// `w`'s notice arrived: it is down, its model out (if any) is lost,
    /// and its steps go back to the budget.
    pub fn left(&mut self, w: usize) {
        self.seats[w] = Seat::Down;
        self.left[w] += 1;
    }

    /// `w` said hello again.
    pub fn joined(&mut self, w: usize) {
        self.seats[w] = Seat::Waiting;
    }

    /// Whether `w` is up.
    pub fn up(&self, w: usize) -> bool {
        self.seats[w] != Seat::Down
    }

    /// Whether a worker that is down will come back (the plan has a join
    /// after the crash the server heard of): the run waits for it only
    /// when nothing else is out.
    pub fn coming_back(&self, plan: &FaultPlan) -> bool {
        let joins = |w: usize| plan.events().iter().filter(|f| f.worker == w && f.kind == FaultKind::Join).count();
        (0..self.seats.len()).any(|w| self.seats[w] == Seat::Down && joins(w) as u64 >= self.left[w])
    }

    /// `speeds` with the workers that are down at 0, so DyLU's fastest
    /// worker is the fastest live one.
    pub fn live_speeds(&self, speeds: &[f64]) -> Vec<f64> {
        speeds.iter().enumerate().map(|(w, s)| if self.up(w) { *s } else { 0.0 }).collect()
    }
}

/// Per worker, the `[from, to)` spans it was up, from the crash and join
/// records of a run that ended at `end_s` (by plan times: the plan's
/// intervals when every event fell inside the run).
pub fn alive_intervals(records: &[FaultRecord], workers: usize, end_s: f64) -> Vec<Vec<(f64, f64)>> {
    (0..workers)
        .map(|w| {
            let mut spans = Vec::new();
            let mut up_since = Some(0.0);
            for r in records.iter().filter(|r| r.worker == w) {
                match (r.event.as_str(), up_since) {
                    ("crash", Some(s)) => {
                        spans.push((s, r.at_s));
                        up_since = None;
                    }
                    ("join", None) => up_since = Some(r.at_s),
                    _ => {}
                }
            }
            spans.extend(up_since.map(|s| (s, end_s)));
            spans
        })
        .collect()
}

/// The same spans as the plan says, for a run that ended at `end_s`.
pub fn planned_intervals(plan: &FaultPlan, workers: usize, end_s: f64) -> Vec<Vec<(f64, f64)>> {
    let records: Vec<FaultRecord> =
        plan.events().iter().filter(|f| f.at_s <= end_s).map(|f| record(f, f.at_s, 0)).collect();
    alive_intervals(&records, workers, end_s)
}

/// Seconds to the millisecond, without trailing zeros (`120`, `0.25`).
fn secs(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// One line per worker that went down, e.g. `worker 2: up 0-120 s,
/// 300-512.346 s`; "all workers up throughout" without records.
pub fn describe_intervals(records: &[FaultRecord], workers: usize, end_s: f64) -> String {
    let spans = alive_intervals(records, workers, end_s);
    let lines: Vec<String> = (0..workers)
        .filter(|w| records.iter().any(|r| r.worker == *w))
        .map(|w| {
            let s: Vec<String> = spans[w].iter().map(|(a, b)| format!("{}-{} s", secs(*a), secs(*b))).collect();
            format!("worker {w}: up {}", s.join(", "))
        })
        .collect();
    if lines.is_empty() {
        "all workers up throughout".into()
    } else {
        lines.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(worker: usize, event: &str, at_s: f64) -> FaultRecord {
        FaultRecord { worker, event: event.into(), at_s, observed_s: at_s + 0.5, step: 0 }
    }

    #[test]
    fn alive_intervals_follow_the_records_by_plan_time() {
        let r = [rec(1, "crash", 10.0), rec(1, "join", 20.0), rec(2, "crash", 5.0)];
        let got = alive_intervals(&r, 3, 50.0);
        assert_eq!(got, [vec![(0.0, 50.0)], vec![(0.0, 10.0), (20.0, 50.0)], vec![(0.0, 5.0)]]);
        let plan = FaultPlan::parse("1:crash@10,1:join@20,2:crash@5,2:join@60", 3).unwrap();
        // The join at 60 s is after the run's end: worker 2 stays down.
        assert_eq!(planned_intervals(&plan, 3, 50.0), got);
        assert_eq!(describe_intervals(&r, 3, 50.0), "worker 1: up 0-10 s, 20-50 s; worker 2: up 0-5 s");
        assert_eq!(describe_intervals(&r[2..], 3, 5.4321), "worker 2: up 0-5 s");
        assert_eq!(secs(0.25) + " " + &secs(7.00049), "0.25 7");
        assert_eq!(describe_intervals(&[], 3, 50.0), "all workers up throughout");
    }

    #[test]
    fn a_lifeline_sees_a_crash_that_passed_even_after_its_join() {
        let plan = FaultPlan::parse("0:crash@10,0:join@10.5,1:crash@3", 3).unwrap();
        let l = Lifeline::new(&plan, 0);
        assert_eq!(l.next_crash(), Some(10.0));
        assert!(!l.crashed(9.9));
        // A step from 9.9 to 11 spans the crash and the join: the worker still goes down.
        assert!(l.crashed(11.0));
        assert_eq!(Lifeline::new(&plan, 1).next_crash(), Some(3.0));
    }

    #[test]
    fn the_roster_waits_only_for_live_workers_and_those_coming_back() {
        let plan = FaultPlan::parse("1:crash@10,1:join@20,2:crash@5", 3).unwrap();
        let mut r = Roster::new(3);
        (0..3).for_each(|w| r.handed(w, 5 + w as u64));
        assert_eq!((r.out(), r.steps_out()), (3, 5 + 6 + 7));
        r.left(2);
        assert_eq!(r.out(), 2, "a dead worker's model out is not waited for");
        assert_eq!(r.steps_out(), 5 + 6, "... and its steps are back in the budget");
        assert!(!r.coming_back(&plan), "worker 2 never joins");
        r.reported(0);
        assert_eq!(r.steps_out(), 6);
        r.left(1);
        assert_eq!((r.out(), r.steps_out()), (0, 0));
        assert!(r.coming_back(&plan), "worker 1 joins at 20 s");
        assert_eq!(r.live_speeds(&[1.0, 4.0, 2.0]), [1.0, 0.0, 0.0]);
        r.joined(1);
        assert!(!r.coming_back(&plan) && r.up(1));
        assert_eq!(r.live_speeds(&[1.0, 4.0, 2.0]), [1.0, 4.0, 0.0]);
    }
}
