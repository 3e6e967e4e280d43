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
//!
//! **Across processes** (MPI) the participants share no memory, so each
//! process's request carries a [`StopVote`]: at every boundary, the first
//! time its participant records it, the processes exchange their flags
//! (one collective of one value, on a communicator of its own, so the
//! strategy's collectives are not reordered); when any flag was set, all
//! fix the stop at the next boundary, as above. Every process records the
//! same boundaries in the same order (the participants of a method share
//! them), so every process sees the same vote at the same boundary. A
//! method with a server does not vote: its server decides alone and tells
//! the workers in the message that makes them save (async_diloco.rs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Tells every process of a run whether any of them was asked to stop.
pub trait StopVote: Send + Sync {
    /// This process's flag in, whether any process's flag was set out.
    /// Every process calls it at the same boundaries, in the same order.
    fn any(&self, mine: bool) -> bool;
}

/// A run's stop request: the flag a signal handler sets, and the boundary
/// the participants agreed on once it is set.
pub struct StopRequest {
    flag: Arc<AtomicBool>,
    agreed: Mutex<Agreed>,
    /// `Some` when the participants live in several processes (module docs).
    vote: Option<Box<dyn StopVote>>,
}

impl std::fmt::Debug for StopRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopRequest").field("flag", &self.flag).field("voting", &self.vote.is_some()).finish()
    }
}

#[derive(Debug, Default)]
struct Agreed {
    /// The furthest boundary any participant has recorded.
    seen: u64,
    /// The boundary every participant stops at, once fixed.
    at: Option<u64>,
    /// The last boundary the processes voted at (with a [`StopVote`]).
    voted: Option<u64>,
}

impl StopRequest {
    /// A request that is made when `flag` becomes true.
    pub fn new(flag: Arc<AtomicBool>) -> Arc<StopRequest> {
        Arc::new(StopRequest { flag, agreed: Mutex::default(), vote: None })
    }

    /// A request of one process among several: the processes agree through
    /// `vote` (module docs).
    pub fn voting(flag: Arc<AtomicBool>, vote: Box<dyn StopVote>) -> Arc<StopRequest> {
        Arc::new(StopRequest { flag, agreed: Mutex::default(), vote: Some(vote) })
    }

    /// Records that a participant is at boundary `done`; once a stop is
    /// requested, the boundary every participant stops at (module docs).
    pub fn at(&self, done: u64) -> Option<u64> {
        let mut a = self.agreed.lock().unwrap_or_else(|e| e.into_inner());
        a.seen = a.seen.max(done);
        let set = match &self.vote {
            None => self.flag.load(Ordering::SeqCst),
            // Once per boundary (a strategy may ask about one twice), on every
            // process, even after the stop is fixed: the vote is a collective.
            Some(vote) if a.voted.is_none_or(|v| done > v) => {
                a.voted = Some(done);
                vote.any(self.flag.load(Ordering::SeqCst))
            }
            Some(_) => false,
        };
        if a.at.is_none() && set {
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

    /// Two "processes" (threads, each with its own request) voting through
    /// a barrier: an OR of their flags per boundary.
    struct BarrierVote {
        hub: Arc<(std::sync::Barrier, [AtomicBool; 2])>,
        calls: std::sync::atomic::AtomicUsize,
        first: bool,
    }

    impl StopVote for BarrierVote {
        fn any(&self, mine: bool) -> bool {
            let (barrier, acc) = &*self.hub;
            let k = self.calls.fetch_add(1, Ordering::SeqCst);
            if mine {
                acc[k % 2].store(true, Ordering::SeqCst);
            }
            barrier.wait();
            if self.first {
                // Every process has read the other slot (its previous vote): reset it for the next.
                acc[(k + 1) % 2].store(false, Ordering::SeqCst);
            }
            let any = acc[k % 2].load(Ordering::SeqCst);
            barrier.wait();
            any
        }
    }

    #[test]
    fn processes_that_vote_stop_at_the_same_boundary_whichever_was_asked() {
        let hub = Arc::new((std::sync::Barrier::new(2), [AtomicBool::new(false), AtomicBool::new(false)]));
        let run = |first: bool, signal_after: Option<u64>| {
            let hub = hub.clone();
            std::thread::spawn(move || {
                let flag = Arc::new(AtomicBool::new(false));
                let vote = BarrierVote { hub, calls: Default::default(), first };
                let s = StopRequest::voting(flag.clone(), Box::new(vote));
                for done in 1..=20 {
                    // A strategy may ask about a boundary twice (checkpoint_due, then round_end).
                    let _ = s.at(done);
                    if s.stops_at(done) {
                        return Some(done);
                    }
                    if signal_after == Some(done) {
                        flag.store(true, Ordering::SeqCst);
                    }
                }
                None
            })
        };
        // Only the second process is signalled, after its boundary 3: both vote it at 4 and stop at 5.
        let (a, b) = (run(true, None), run(false, Some(3)));
        assert_eq!((a.join().unwrap(), b.join().unwrap()), (Some(5), Some(5)));
    }

    #[test]
    fn a_vote_that_nobody_raises_never_stops() {
        let hub = Arc::new((std::sync::Barrier::new(1), [AtomicBool::new(false), AtomicBool::new(false)]));
        let s = StopRequest::voting(
            Arc::new(AtomicBool::new(false)),
            Box::new(BarrierVote { hub, calls: Default::default(), first: true }),
        );
        assert!(!(0..50).any(|d| s.stops_at(d)));
    }
}
