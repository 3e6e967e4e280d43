//! Stopping a run on request (Ctrl-C, SIGTERM) with nothing lost: every
//! participant finishes the rounds up to one boundary they all agree on,
//! saves its part of a checkpoint there, and ends with
//! [`crate::runtime::Stopped`]. The checkpoint is an ordinary one (the
//! journal's `round_end` writes it as it writes `--checkpoint-every`'s), so
//! resuming it continues exactly where the run stopped.
//!
//! The agreement needs no communication, because every participant of a
//! run that stops this way lives in this process (the simulator, or threads)
//! and passes its boundaries through [`StopRequest::at`]:
//!
//! - `at(done)` records that a participant is at boundary `done` (rounds
//!   or steps done; a strategy with something to bring in first asks at the
//!   boundary before reaching it: `Journal::checkpoint_due`);
//! - the first call after the request fixes the stop at the boundary after
//!   every boundary recorded so far (`seen + 1`), under the same lock.
//!
//! So no participant can have passed the stop before it was fixed, and
//! each stops at its first boundary at or after it: the same boundary for
//! all, since the participants of a method share their boundaries (every
//! round; multiples of tau or H for the local-update methods). Async
//! DiLoCo's workers reach a boundary only when the server says so: its
//! server asks (`Journal::boundary_reached`), drains the rounds out as at
//! any checkpoint and hands every worker that boundary.
//!
//! A request that comes when the stop would fall at or after the run's end
//! changes nothing: the run ends as planned.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A run's stop request: the flag a signal handler sets, and the boundary
/// the participants agreed on once it is set.
#[derive(Debug)]
pub struct StopRequest {
    flag: Arc<AtomicBool>,
    agreed: Mutex<Agreed>,
}

#[derive(Debug, Default)]
struct Agreed {
    /// The furthest boundary any participant has recorded.
    seen: u64,
    /// The boundary every participant stops at, once fixed.
    at: Option<u64>,
}

impl StopRequest {
    /// A request that is made when `flag` becomes true.
    pub fn new(flag: Arc<AtomicBool>) -> Arc<StopRequest> {
        Arc::new(StopRequest { flag, agreed: Mutex::default() })
    }

    /// Records that a participant is at boundary `done`; once a stop is
    /// requested, the boundary every participant stops at (module docs).
    pub fn at(&self, done: u64) -> Option<u64> {
        let mut a = self.agreed.lock().unwrap_or_else(|e| e.into_inner());
        a.seen = a.seen.max(done);
        if a.at.is_none() && self.flag.load(Ordering::SeqCst) {
            a.at = Some(a.seen + 1);
        }
        a.at
    }

    /// Whether a participant at boundary `done` stops there.
    pub fn stops_at(&self, done: u64) -> bool {
        self.at(done).is_some_and(|at| done >= at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stop_falls_after_every_boundary_recorded_before_the_request() {
        let flag = Arc::new(AtomicBool::new(false));
        let s = StopRequest::new(flag.clone());
        // Two participants at boundaries 3 and 4 (one a round ahead).
        assert_eq!((s.at(3), s.at(4)), (None, None));
        flag.store(true, Ordering::SeqCst);
        // The one behind asks first: the stop is after 4, the furthest seen.
        assert_eq!(s.at(4), Some(5));
        assert!(!s.stops_at(4) && s.stops_at(5));
        // Fixed once: later boundaries do not move it.
        assert_eq!(s.at(9), Some(5));
        assert!(s.stops_at(9), "a participant whose boundaries jump (steps of tau) stops at its first one past it");
    }

    #[test]
    fn no_request_no_stop() {
        let s = StopRequest::new(Arc::new(AtomicBool::new(false)));
        assert!(!(0..100).any(|d| s.stops_at(d)));
    }
}
