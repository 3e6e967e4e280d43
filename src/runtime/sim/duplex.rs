//! A link's two directions slow each other (issue 29, finding 22 of
//! docs/results/planner-accuracy.md).
//!
//! A TCP stream's ACKs go back the other way; when that direction carries
//! data too, they queue behind it and the stream slows. Calibrate measures
//! how much: its all-reduce sweep sends and receives at once, its ping-pong
//! one way at a time, and the ratio at a size is the message's duplex
//! factor `r` (comm/link.rs, `Tier::duplex_factor`; 1.17-1.29 at 20 Mbit/s
//! on the netns links). The collectives' sweep already holds it; a
//! point-to-point message costs the ping-pong, so the simulator slows it
//! here:
//!
//! ```text
//! while messages m and o run the other way on a link of m's (o leaves m's
//! receiver or reaches m's sender), both run r times slower:
//!   co-run from t = max(start_m, start_o) for D = min(r_m left_m(t), r_o left_o(t))
//!   (left: the unslowed seconds still to send), then each at full speed
//! ```
//!
//! A message's cost is known when it is sent, so the one sent first is
//! rescheduled when the second starts: its mail lands later, messages
//! queued behind it on its receiver's link start later, and its sender
//! (waiting for delivery, comm.rs `send`) waits on. A message is slowed
//! once per window however many run the other way: a direction is busy or
//! not. Async DiLoCo's server is the case that has it: a worker's update
//! comes in while the server sends the other worker its model.

use super::state::{Lane, State};

/// A point-to-point message on its way (module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Flight {
    pub from: usize,
    pub to: usize,
    /// The mail's sequence number (state.rs, `Mail::seq`).
    pub seq: u64,
    /// When it started to move (the shared-cores rule's "running").
    pub begin: f64,
    /// From `at` on, `work` unslowed seconds are left to send.
    at: f64,
    work: f64,
    /// It runs `factor` times slower from `at` to `slow_until`.
    slow_until: f64,
    factor: f64,
}

impl Flight {
    /// A message from `from` to `to` starting at `begin` that takes `work`
    /// seconds alone and `factor` (at least 1) times that beside reverse
    /// traffic.
    pub fn new(from: usize, to: usize, seq: u64, begin: f64, work: f64, factor: f64) -> Flight {
        Flight { from, to, seq, begin, at: begin, work, slow_until: begin, factor }
    }

    /// When it lands.
    pub fn end(&self) -> f64 {
        let slow = (self.slow_until - self.at).max(0.0);
        if self.work * self.factor <= slow {
            self.at + self.work * self.factor
        } else {
            self.at + slow + self.work - slow / self.factor
        }
    }

    /// Unslowed seconds left to send at `t` (not before `at`).
    fn left(&self, t: f64) -> f64 {
        let slow = (self.slow_until.min(t) - self.at).max(0.0);
        let fast = (t - self.slow_until.max(self.at)).max(0.0);
        (self.work - slow / self.factor - fast).max(0.0)
    }

    /// Slowed from `t` (not before `at`) for `d` seconds, as well as any
    /// slowing it already had past `t` (a direction is busy or not).
    fn slow_from(&mut self, t: f64, d: f64) {
        let work = self.left(t);
        let slow_until = self.slow_until.max(t + d);
        *self = Flight { at: t, work, slow_until, ..*self };
    }

    /// Whether `o` runs the other way on one of this message's links.
    fn reverse(&self, o: &Flight) -> bool {
        o.from == self.to || o.to == self.from
    }
}

/// Both messages slowed while they run the other way at once (module
/// docs); whether they overlap at all.
fn share(m: &mut Flight, o: &mut Flight) -> bool {
    let t = m.at.max(o.at);
    if (m.factor == 1.0 && o.factor == 1.0) || t >= m.end().min(o.end()) {
        return false;
    }
    let d = (m.left(t) * m.factor).min(o.left(t) * o.factor);
    m.slow_from(t, d);
    o.slow_from(t, d);
    true
}

impl State {
    /// Sends `m` on its way: slows it and the messages already running the
    /// other way on its links (moving their mail, the messages queued
    /// behind them and their receivers' wake-ups), and returns when it
    /// lands.
    pub(super) fn fly(&mut self, mut m: Flight) -> f64 {
        let now = self.now;
        self.flights.retain(|f| f.end() > now);
        for i in 0..self.flights.len() {
            if !m.reverse(&self.flights[i]) {
                continue;
            }
            let was = self.flights[i].end();
            if share(&mut m, &mut self.flights[i]) {
                let (to, seq) = (self.flights[i].to, self.flights[i].seq);
                self.delay_receiver(to, seq, was, self.flights[i].end() - was);
            }
        }
        self.flights.push(m);
        m.end()
    }

    /// Message `seq` to `to` now lands `by` seconds after `was`: its mail,
    /// and every message queued behind it on `to`'s link, land that much
    /// later.
    fn delay_receiver(&mut self, to: usize, seq: u64, was: f64, by: f64) {
        let mut moved = Vec::new();
        for f in self.flights.iter_mut().filter(|f| f.to == to) {
            if f.seq != seq && f.begin >= was {
                f.begin += by;
                f.at += by;
                f.slow_until += by;
            } else if f.seq != seq {
                continue;
            }
            moved.push((f.seq, f.end()));
        }
        let part = &mut self.parts[to];
        for mail in part.mailbox.iter_mut() {
            if let Some(&(_, end)) = moved.iter().find(|(s, _)| *s == mail.seq) {
                mail.arrival = end;
            }
        }
        if part.receiving_until >= was {
            part.receiving_until += by;
        }
        for (_, end) in moved {
            self.wake(end, Lane::Comm, to);
        }
    }

    /// When message `seq` lands, while it is on its way (its sender waits
    /// for that: a later message may have delayed it).
    pub(super) fn landing(&self, seq: u64) -> Option<f64> {
        self.flights.iter().find(|f| f.seq == seq).map(Flight::end)
    }

    /// Whether a message is on its way now (the shared-cores rule).
    pub(super) fn message_running(&self) -> bool {
        let now = self.now;
        self.flights.iter().any(|f| f.begin <= now && f.end() > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_alone_lands_after_its_work() {
        let m = Flight::new(0, 1, 0, 2.0, 1.5, 1.25);
        assert_eq!(m.end(), 3.5);
        assert_eq!(m.left(3.0), 0.5);
    }

    #[test]
    fn two_directions_at_once_slow_both_until_the_first_lands() {
        // o: 2 -> 0, started at 0 with 1 s of work (would land at 1); at
        // 0.6 m: 0 -> 2 starts with 1 s of work, factor 1.25 both. Left
        // at 0.6: o 0.4, m 1.0; co-run D = min(0.4, 1.0) x 1.25 = 0.5 s, so
        // o lands at 1.1 (0.1 later) and m has 1 - 0.5/1.25 = 0.6 s left
        // at 1.1: lands at 1.7.
        let mut o = Flight::new(2, 0, 0, 0.0, 1.0, 1.25);
        let mut m = Flight::new(0, 2, 1, 0.6, 1.0, 1.25);
        assert!(m.reverse(&o) && o.reverse(&m));
        assert!(share(&mut m, &mut o));
        assert!((o.end() - 1.1).abs() < 1e-12, "{}", o.end());
        assert!((m.end() - 1.7).abs() < 1e-12, "{}", m.end());
        // q: 1 -> 0 from 1.0, 1 s of work, also into m's sender. m's left
        // at 1.0: 1 - 0.4 / 1.25 = 0.68 (slowed since 0.6); D = min(0.68,
        // 1.0) x 1.25 = 0.85, so m lands at 1.85, slowed throughout (its
        // window to 1.1 is not slowed twice), and q has 1 - 0.68 = 0.32 s
        // left at 1.85: lands at 2.17.
        let mut q = Flight::new(1, 0, 2, 1.0, 1.0, 1.25);
        assert!(!q.reverse(&o), "o runs 2 -> 0, the same way into 0");
        assert!(share(&mut m, &mut q));
        assert!((m.end() - 1.85).abs() < 1e-12, "{}", m.end());
        assert!((q.end() - 2.17).abs() < 1e-12, "{}", q.end());
    }

    #[test]
    fn messages_that_do_not_overlap_or_run_the_same_way_are_not_slowed() {
        let mut o = Flight::new(2, 0, 0, 0.0, 1.0, 1.25);
        let mut later = Flight::new(0, 2, 1, 1.0, 1.0, 1.25);
        assert!(!share(&mut later, &mut o));
        assert_eq!((o.end(), later.end()), (1.0, 2.0));
        // 1 -> 0 beside 2 -> 0: the same direction into 0 (the receiver's
        // link takes them one at a time, comm.rs), not the other way.
        assert!(!Flight::new(1, 0, 2, 0.5, 1.0, 1.25).reverse(&o));
        // A factor of 1 (a line, or sweeps without the ping-pong): unchanged.
        let mut a = Flight::new(2, 0, 0, 0.0, 1.0, 1.0);
        let mut b = Flight::new(0, 2, 1, 0.5, 1.0, 1.0);
        assert!(!share(&mut b, &mut a));
        assert_eq!((a.end(), b.end()), (1.0, 1.5));
    }
}
