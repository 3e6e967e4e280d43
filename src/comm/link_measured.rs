//! A link tier's measured message times, used in place of the alpha-beta line
//! where a sweep does not fit it (issue 29, finding 4 of
//! docs/results/planner-accuracy.md).
//!
//! `lowcomm calibrate` times an all-reduce over `p` ranks at sizes 4 B, 16 B,
//! ..., 4 MiB. A ring all-reduce of `B` bytes is `2(p-1)` messages of `B/p`
//! bytes one after another (comm/link.rs), so the sweep gives one message's
//! time at each measured size:
//!
//! ```text
//! t(B / p) = T_allreduce(B) / (2 (p-1))
//! ```
//!
//! Between two measured sizes a message's time is the straight line through
//! them; above the largest it grows at the last segment's slope (the
//! bandwidth the largest messages reached); below the smallest it is the
//! smallest's time. Every collective on the tier is then built from `t`
//! (`Tier::message_time_s`). A shaped link's token bucket, TCP's window and
//! MPI's protocol switch all bend the line: at 20 Mbit/s the fitted line
//! was 14% below a measured 4 MiB all-reduce, and the model's own 2.6 MB
//! gradient fell between those two measured points.

use serde::{Deserialize, Serialize};

/// Most sizes a sweep keeps: calibrate's default sweep (4 B .. 4 MiB by x4)
/// has 11; a fixed array keeps [`super::Tier`] `Copy`.
pub const MAX_POINTS: usize = 16;

/// One message's measured seconds at increasing sizes (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessageTimes {
    /// Points in use at the front of `points`.
    len: usize,
    /// `(bytes, seconds)`, bytes strictly increasing, seconds > 0.
    points: [(f64, f64); MAX_POINTS],
    /// Messages of `m` bytes are looked up at `m * bytes_scale`: several
    /// groups sharing one link each see it `share` times slower.
    bytes_scale: f64,
}

/// The profile's record of a sweep: `[links.inter_sweep]` or `[links.intra_sweep]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllReduceSweep {
    /// Ranks the all-reduce ran over (at least 2).
    pub members: usize,
    /// `[bytes, seconds]` of each size: the whole buffer and the median time
    /// of one all-reduce, sizes increasing.
    pub all_reduce: Vec<[f64; 2]>,
    /// `[bytes, seconds]` of each size of calibrate's ping-pong: one
    /// lowcomm message and the median of half its round trip. When given,
    /// point-to-point messages on the tier cost these times (async DiLoCo's
    /// updates and models); the collectives keep the all-reduce's. Half an
    /// all-reduce of twice the size is not one message: at 20 Mbit/s it
    /// costed async DiLoCo's 2.67 MB model 1.42 s where the link took 1.12
    /// s (docs/results/planner-accuracy.md, finding 12).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ping_pong: Vec<[f64; 2]>,
}

/// `[bytes, seconds]` pairs as message times, each mapped by `point`, or
/// what is wrong with them, naming `key`.
fn times(pairs: &[[f64; 2]], key: &str, point: impl Fn(f64, f64) -> (f64, f64)) -> Result<MessageTimes, String> {
    let n = pairs.len();
    if !(2..=MAX_POINTS).contains(&n) {
        return Err(format!("{key} needs 2 to {MAX_POINTS} [bytes, seconds] pairs, got {n}"));
    }
    let mut points = [(0.0, 0.0); MAX_POINTS];
    for (i, &[b, t]) in pairs.iter().enumerate() {
        if !(b > 0.0 && b.is_finite() && t > 0.0 && t.is_finite()) {
            return Err(format!("{key}[{i}] = [{b}, {t}]: bytes and seconds must be positive"));
        }
        if i > 0 && b <= pairs[i - 1][0] {
            return Err(format!("{key}[{i}]: sizes must increase ({b} B after {} B)", pairs[i - 1][0]));
        }
        points[i] = point(b, t);
    }
    Ok(MessageTimes { len: n, points, bytes_scale: 1.0 })
}

impl AllReduceSweep {
    /// One message's times (module docs), or what is wrong with the sweep
    /// (for the profile's error, which names the key).
    pub fn message_times(&self) -> Result<MessageTimes, String> {
        let p = self.members;
        if p < 2 {
            return Err(format!("members must be at least 2 (an all-reduce over {p} rank moves nothing)"));
        }
        let steps = 2.0 * (p - 1) as f64;
        times(&self.all_reduce, "all_reduce", |b, t| (b / p as f64, t / steps))
    }

    /// A point-to-point message's times, from `ping_pong` when given.
    pub fn point_to_point_times(&self) -> Result<Option<MessageTimes>, String> {
        if self.ping_pong.is_empty() {
            return Ok(None);
        }
        times(&self.ping_pong, "ping_pong", |b, t| (b, t)).map(Some)
    }
}

impl MessageTimes {
    /// Seconds one message of `bytes` takes (module docs).
    pub fn at(&self, bytes: f64) -> f64 {
        let pts = &self.points[..self.len];
        let m = bytes * self.bytes_scale;
        let line = |(b0, t0): (f64, f64), (b1, t1): (f64, f64)| t0 + (m - b0) * (t1 - t0) / (b1 - b0);
        if m <= pts[0].0 {
            return pts[0].1;
        }
        match pts.windows(2).find(|w| m <= w[1].0) {
            Some(w) => line(w[0], w[1]),
            // Past the largest size: the last segment's slope, never below
            // the largest time (a segment can fall within the noise).
            None => line(pts[self.len - 2], pts[self.len - 1]).max(pts[self.len - 1].1),
        }
    }

    /// The same link shared by `share` groups at once: each message takes
    /// what `share` times its bytes would.
    pub fn shared(mut self, share: usize) -> MessageTimes {
        self.bytes_scale *= share.max(1) as f64;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1e-12)
    }

    /// All-reduces over 2 ranks of 200 B in 2 ms and 2200 B in 6 ms: one
    /// message of 100 B takes 1 ms, of 1100 B 3 ms.
    fn two_points() -> MessageTimes {
        AllReduceSweep { members: 2, all_reduce: vec![[200.0, 2e-3], [2200.0, 6e-3]], ping_pong: vec![] }
            .message_times()
            .unwrap()
    }

    #[test]
    fn measured_times_interpolate_between_sizes_and_extend_the_last_slope() {
        let t = two_points();
        assert!(close(t.at(100.0), 1e-3) && close(t.at(1100.0), 3e-3));
        assert!(close(t.at(600.0), 2e-3), "halfway: {}", t.at(600.0));
        assert!(close(t.at(2100.0), 5e-3), "past the largest, 2 ms per 1000 B: {}", t.at(2100.0));
        assert!(close(t.at(10.0), 1e-3), "below the smallest: its time");
        // Shared by two groups, a 300 B message takes what 600 B does.
        assert!(close(t.shared(2).at(300.0), 2e-3));
    }

    #[test]
    fn measured_times_of_four_ranks_divide_by_six_messages() {
        // Over 4 ranks an all-reduce of 400 B is 6 messages of 100 B.
        let t = AllReduceSweep { members: 4, all_reduce: vec![[400.0, 6e-3], [4000.0, 12e-3]], ping_pong: vec![] }
            .message_times()
            .unwrap();
        assert!(close(t.at(100.0), 1e-3) && close(t.at(1000.0), 2e-3));
    }

    #[test]
    fn a_falling_last_segment_never_extrapolates_below_the_largest_time() {
        let t = AllReduceSweep { members: 2, all_reduce: vec![[200.0, 4e-3], [2200.0, 2e-3]], ping_pong: vec![] }
            .message_times()
            .unwrap();
        assert!(close(t.at(5000.0), 1e-3));
    }

    #[test]
    fn bad_sweeps_name_the_problem() {
        let e = |members, all_reduce: Vec<[f64; 2]>| {
            AllReduceSweep { members, all_reduce, ping_pong: vec![] }.message_times().unwrap_err()
        };
        assert!(e(1, vec![[4.0, 1e-3], [8.0, 2e-3]]).starts_with("members must be at least 2"));
        assert!(e(2, vec![[4.0, 1e-3]]).starts_with("all_reduce needs 2 to 16"));
        assert!(e(2, vec![[4.0, 1e-3], [4.0, 2e-3]]).starts_with("all_reduce[1]: sizes must increase"));
        assert!(e(2, vec![[4.0, 0.0], [8.0, 2e-3]]).contains("must be positive"));
    }

    #[test]
    fn a_ping_pong_gives_one_message_its_own_times() {
        // Messages of 100 B in 0.5 ms and 1100 B in 1.5 ms, one way: no division by ranks.
        let sweep = AllReduceSweep {
            members: 2,
            all_reduce: vec![[200.0, 2e-3], [2200.0, 6e-3]],
            ping_pong: vec![[100.0, 0.5e-3], [1100.0, 1.5e-3]],
        };
        let p2p = sweep.point_to_point_times().unwrap().expect("given");
        assert!(close(p2p.at(600.0), 1e-3) && close(p2p.at(2100.0), 2.5e-3));
        // The collectives' message stays the all-reduce's: 100 B in 1 ms.
        assert!(close(sweep.message_times().unwrap().at(100.0), 1e-3));
        let none = AllReduceSweep { ping_pong: vec![], ..sweep.clone() };
        assert_eq!(none.point_to_point_times(), Ok(None));
        let bad = AllReduceSweep { ping_pong: vec![[100.0, 1e-3]], ..sweep };
        assert!(bad.point_to_point_times().unwrap_err().starts_with("ping_pong needs 2 to 16"));
    }
}
