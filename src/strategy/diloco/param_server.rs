//! The parameter server's decisions for asynchronous DiLoCo
//! (async-local-sgd.txt, Algorithms 2, 4 and 5, eqs. 2 and 6), as pure
//! functions of what the server knows, so each is checked by hand.
//!
//! `async_diloco.rs` (the server participant of `--method async-diloco`)
//! uses `Grace` and `dylu_steps`; `shards.rs` draws each round's shard with
//! `sample_shard`.
//!
//! ```text
//! get_worker (Alg. 5): w = earliest completed worker not yet synchronised
//!                      return w if w.completed_time - tau_sync <= tau_grace           line 8
//! Alg. 2 lines 14-24:  w found: tau_sync = min(tau_sync, w.completed_time); sync      lines 16-17
//!                      none:    tau_sync = inf; train(W_completed, theta)             lines 22-23
//! DyLU (eq. 6):        w.steps = floor(v(w) / max_w' v(w') * H)
//! shard (eq. 2):       p_i ~ max(|D_i| / sum_j |D_j| - n_i / sum_j n_j, 0)
//! ```

/// The grace period of Algorithm 2 (`tau_sync`, `tau_grace`): which
/// completed update still joins the open synchronisation group.
#[derive(Clone, Debug, PartialEq)]
pub struct Grace {
    grace_s: f64,
    /// Start of the open grace period (`tau_sync`); `None` is infinity.
    sync: Option<f64>,
}

impl Grace {
    /// No group open; `grace_s >= 0` seconds.
    pub fn new(grace_s: f64) -> Grace {
        Grace { grace_s, sync: None }
    }

    /// Until when the server waits for another update before it hands out
    /// the new model (the `recv_any` deadline): `None` while no group is
    /// open (wait for the next update, however long).
    pub fn deadline(&self) -> Option<f64> {
        self.sync.map(|s| s + self.grace_s)
    }

    /// Algorithm 5 line 8, then Algorithm 2 line 16: whether an update
    /// completed at `t` is synchronised into the open group (opening one if
    /// none is open: `t - inf <= grace`).
    pub fn admit(&mut self, t: f64) -> bool {
        match self.sync {
            Some(s) if t - s > self.grace_s => false,
            // tau_sync = min(tau_sync, t): the window does not slide with later arrivals.
            Some(s) => {
                self.sync = Some(s.min(t));
                true
            }
            None => {
                self.sync = Some(t);
                true
            }
        }
    }

    /// Algorithm 2 line 22: the group is handed the model; `tau_sync = inf`.
    pub fn close(&mut self) {
        self.sync = None;
    }
}

/// The synchronisation groups of Algorithm 2 for updates completing at
/// fixed times `arrivals` (worker, completion time), in time order (ties
/// by worker): each group gets the same server model (Fig. 3).
pub fn grace_groups(arrivals: &[(usize, f64)], grace_s: f64) -> Vec<Vec<usize>> {
    let mut sorted = arrivals.to_vec();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut g = Grace::new(grace_s);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (w, t) in sorted {
        let joins = g.admit(t);
        if !joins {
            // get_worker returned null: line 23 hands out the model, then w opens the next group.
            g.close();
            g.admit(t);
        }
        if !joins || groups.is_empty() {
            groups.push(Vec::new());
        }
        groups.last_mut().expect("a group is open").push(w);
    }
    groups
}

/// DyLU, eq. 6: each worker's local steps `floor(v(w) / max v * H)` from
/// speeds `v` (steps per second, or any unit common to all). At least 1:
/// our choice, so a very slow worker still contributes (eq. 6 can give 0).
/// The product is raised by a relative [`DYLU_TOLERANCE`] before the floor:
/// speeds are measured (1 / seconds per step), so a ratio meant to give a
/// whole number can land a hair below it (0.29 / 1 x 100 = 28.999999999999996
/// in f64), and a bare floor would lose a whole step to that rounding.
pub fn dylu_steps(speeds: &[f64], h: u64) -> Vec<u64> {
    let max = speeds.iter().cloned().fold(0.0f64, f64::max);
    let steps = |v: f64| ((v / max) * h as f64 * (1.0 + DYLU_TOLERANCE)).floor() as u64;
    speeds.iter().map(|&v| if max > 0.0 { steps(v) } else { h }).map(|s| s.max(1)).collect()
}

/// Relative tolerance of DyLU's floor: far above f64 rounding (~1e-16 per
/// operation), far below one step in any H a run can use (< 1e9).
pub const DYLU_TOLERANCE: f64 = 1e-9;

/// Eq. 2's probabilities: shard `i` of `sizes[i]` data points, of which
/// `learned[i]` have been trained on, gets `p_i` proportional to
/// `max(|D_i| / sum |D| - n_i / sum n, 0)`. Before anything is learned
/// (sum n = 0) `n_i / sum n` is taken as 0, and when no shard is
/// under-sampled (all terms 0) the shares fall back to the sizes: our
/// reading, as eq. 2 is undefined there.
pub fn shard_probabilities(sizes: &[u64], learned: &[u64]) -> Vec<f64> {
    let total: f64 = sizes.iter().sum::<u64>() as f64;
    let done: f64 = learned.iter().sum::<u64>() as f64;
    let raw: Vec<f64> = sizes
        .iter()
        .zip(learned)
        .map(|(&d, &n)| {
            let seen = if done > 0.0 { n as f64 / done } else { 0.0 };
            (d as f64 / total - seen).max(0.0)
        })
        .collect();
    let sum: f64 = raw.iter().sum();
    if sum > 0.0 {
        raw.iter().map(|p| p / sum).collect()
    } else {
        sizes.iter().map(|&d| d as f64 / total).collect()
    }
}

/// Eq. 2's draw with a uniform `u` in [0, 1): the first shard whose
/// cumulative probability exceeds `u` (only shards with p > 0).
pub fn sample_shard(sizes: &[u64], learned: &[u64], u: f64) -> usize {
    let p = shard_probabilities(sizes, learned);
    let mut acc = 0.0;
    let last = p.iter().rposition(|&x| x > 0.0).unwrap_or(0);
    for (i, x) in p.iter().enumerate() {
        acc += x;
        if *x > 0.0 && u < acc {
            return i;
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: usize = 0;
    const B: usize = 1;
    const C: usize = 2;

    #[test]
    fn a_hand_built_arrival_schedule_gives_fig_3s_groups() {
        // Fig. 3: B finishes after A but within A's grace period, so A and B
        // start from the same server model; C, later, starts its own grace period.
        assert_eq!(grace_groups(&[(C, 3.0), (A, 1.0), (B, 1.5)], 1.0), [vec![A, B], vec![C]]);
        // The window is tau_sync + grace from the group's first update: it does
        // not slide with later arrivals (C at 1.8 is 0.9 after B but 1.8 after A).
        assert_eq!(grace_groups(&[(A, 0.0), (B, 0.9), (C, 1.8)], 1.0), [vec![A, B], vec![C]]);
        // Line 8 is "<=": an update exactly at the deadline joins.
        assert_eq!(grace_groups(&[(A, 0.0), (B, 1.0)], 1.0), [vec![A, B]]);
        // No grace: every update alone unless simultaneous (ties by worker).
        assert_eq!(grace_groups(&[(B, 2.0), (A, 2.0), (C, 2.5)], 0.0), [vec![A, B], vec![C]]);
        // A grace period covering everyone: one synchronous round.
        assert_eq!(grace_groups(&[(A, 0.0), (B, 0.9), (C, 1.8)], 5.0), [vec![A, B, C]]);
    }

    #[test]
    fn the_grace_deadline_is_the_first_arrival_plus_grace() {
        let mut g = Grace::new(0.5);
        assert_eq!(g.deadline(), None, "no group open: wait for the next update");
        assert!(g.admit(2.0));
        assert_eq!(g.deadline(), Some(2.5));
        assert!(g.admit(2.25));
        assert_eq!(g.deadline(), Some(2.5), "tau_sync = min(tau_sync, t)");
        assert!(!g.admit(2.75));
        g.close();
        assert_eq!(g.deadline(), None);
    }

    #[test]
    fn dylu_gives_each_worker_steps_in_proportion_to_its_speed() {
        // Eq. 6 with H = 50: speeds 1, 1, 0.5, 0.25 -> 50, 50, 25, 12 (floor of 12.5).
        assert_eq!(dylu_steps(&[1.0, 1.0, 0.5, 0.25], 50), [50, 50, 25, 12]);
        // Only ratios count; the fastest runs H; a worker eq. 6 would give 0 runs 1.
        assert_eq!(dylu_steps(&[4.0, 2.0, 0.01], 10), [10, 5, 1]);
        assert_eq!(dylu_steps(&[3.0, 3.0], 7), [7, 7]);
    }

    #[test]
    fn dylu_does_not_lose_a_step_to_float_rounding() {
        // 0.29 / 1 x 100 is 28.999999999999996 in f64 and 0.21 / 0.9 x 30 is
        // 6.999999999999999: a bare floor gives 28 and 6.
        assert_eq!(dylu_steps(&[0.29, 1.0], 100), [29, 100]);
        assert_eq!(dylu_steps(&[0.21, 0.9], 30), [7, 30]);
        // Speeds measured as 1 / (seconds per step), as the server does.
        let measured = |v: f64| 1.0 / (1.0 / v);
        assert_eq!(dylu_steps(&[measured(0.7), measured(1.0)], 50), [35, 50]);
        // A ratio really below a whole number still floors: 0.699 x 50 = 34.95.
        assert_eq!(dylu_steps(&[0.699, 1.0], 50), [34, 50]);
    }

    #[test]
    fn shards_are_sampled_only_when_under_sampled_eq_2() {
        // Sizes 2:1:1 (shares 0.5, 0.25, 0.25), learned in the same shares: no shard is under-sampled, by size.
        assert_eq!(shard_probabilities(&[200, 100, 100], &[20, 10, 10]), [0.5, 0.25, 0.25]);
        // Learned 1:1:2 of 4: shares 0.25, 0.25, 0.5 -> max(0.25, 0, -0.25, 0) -> shard 0 only.
        assert_eq!(shard_probabilities(&[200, 100, 100], &[10, 10, 20]), [1.0, 0.0, 0.0]);
        // Learned 0:1:1 of 2: 0.5 - 0, 0.25 - 0.5 < 0, < 0 -> shard 0 only;
        // learned 1:0:3 of 4: 0.5 - 0.25 = 0.25, 0.25 - 0 = 0.25, 0.25 - 0.75 < 0 -> 0.5, 0.5, 0.
        assert_eq!(shard_probabilities(&[200, 100, 100], &[0, 1, 1]), [1.0, 0.0, 0.0]);
        assert_eq!(shard_probabilities(&[200, 100, 100], &[1, 0, 3]), [0.5, 0.5, 0.0]);
        // Nothing learned yet: by size.
        assert_eq!(shard_probabilities(&[200, 100, 100], &[0, 0, 0]), [0.5, 0.25, 0.25]);
        // The draw walks the cumulative distribution, skipping shards with p = 0.
        let draw = |u| sample_shard(&[200, 100, 100], &[1, 0, 3], u);
        assert_eq!([0.0, 0.49, 0.5, 0.99].map(draw), [0, 0, 1, 1]);
        assert_eq!(sample_shard(&[200, 100, 100], &[10, 10, 20], 0.999), 0);
    }
}
