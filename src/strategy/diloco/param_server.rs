//! The parameter server's decisions for asynchronous DiLoCo
//! (async-local-sgd.txt, Algorithms 2, 4 and 5, eqs. 2 and 6), as pure
//! functions of what the server knows, so each is checked by hand.
//!
//! `async_diloco.rs` (the server participant of `--method async-diloco`)
//! uses `Grace`, `Speeds`, `dylu_steps` and `arrival_weight`; `shards.rs`
//! draws each round's shard with `sample_shard`.
//!
//! ```text
//! get_worker (Alg. 5): w = earliest completed worker not yet synchronised
//!                      return w if w.completed_time - tau_sync <= tau_grace           line 8
//! Alg. 2 lines 14-24:  w found: tau_sync = min(tau_sync, w.completed_time); sync      lines 16-17
//!                      none:    tau_sync = inf; train(W_completed, theta)             lines 22-23
//! DyLU (eq. 6):        w.steps = floor(v(w) / max_w' v(w') * H)
//! shard (eq. 2):       p_i ~ max(|D_i| / sum_j |D_j| - n_i / sum_j n_j, 0)
//! sync (line 17):      theta = OuterOpt(theta, a delta_w),  a = 1/k (weight "1/k"; not for dn, which divides by N)
//! ```

use super::async_settings::Weight;
use crate::optim::OuterKind;
use serde::{Deserialize, Serialize};

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

    /// Whether a group is open (an update admitted, the model not yet handed out).
    pub fn is_open(&self) -> bool {
        self.sync.is_some()
    }

    /// The grace period of the next group to open (`grace = "auto"`
    /// follows the workers' speeds); an open group keeps its deadline.
    pub fn set_next(&mut self, grace_s: f64) {
        if self.sync.is_none() {
            self.grace_s = grace_s;
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

/// Each worker's speed v(w) (eq. 6: "steps per second"), as the server
/// knows it: the speed factor the worker declared in its hello (unitless:
/// `--speeds`, the cluster profile), until its first update brings its
/// measured seconds per inner step. A declared factor is converted to
/// steps per second by the first measured worker's ratio (v over its
/// factor), so declared and measured speeds are never compared in
/// different units: a measured 2.5 steps/s is not "faster" than a declared
/// factor 1 (that mix, before issue 26, gave a slow worker who reported
/// first the fastest worker's H in the first round).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Speeds {
    /// The factor each worker declared in its latest hello.
    declared: Vec<f64>,
    /// Seconds per inner step each worker last measured since its latest hello.
    step_s: Vec<Option<f64>>,
}

impl Speeds {
    /// `k` workers, each declaring factor 1, none measured.
    pub fn new(k: usize) -> Speeds {
        Speeds { declared: vec![1.0; k], step_s: vec![None; k] }
    }

    /// Worker `w` said hello with speed factor `factor`: a fresh start, nothing measured.
    pub fn declare(&mut self, w: usize, factor: f64) {
        self.declared[w] = factor;
        self.step_s[w] = None;
    }

    /// Worker `w` measured `step_s` seconds per inner step (ignored unless > 0).
    pub fn measure(&mut self, w: usize, step_s: f64) {
        if step_s > 0.0 && step_s.is_finite() {
            self.step_s[w] = Some(step_s);
        }
    }

    /// v(w) for every worker in one unit: steps per second once any worker
    /// has measured (declared factors converted by its ratio), the
    /// declared factors as they are before.
    pub fn v(&self) -> Vec<f64> {
        let unit = (0..self.declared.len())
            .find_map(|w| self.step_s[w].filter(|_| self.declared[w] > 0.0).map(|s| 1.0 / s / self.declared[w]))
            .unwrap_or(1.0);
        self.declared.iter().zip(&self.step_s).map(|(&f, s)| s.map_or(f * unit, |s| 1.0 / s)).collect()
    }

    /// Seconds of one inner step of the slowest worker of those `live`
    /// (1 / min v), once some worker has measured (before, no unit).
    pub fn slowest_step_s(&self, live: impl Fn(usize) -> bool) -> Option<f64> {
        self.step_s.iter().any(Option::is_some).then_some(())?;
        let v = self.v();
        let slowest = (0..v.len()).filter(|&w| live(w)).map(|w| v[w]).fold(f64::INFINITY, f64::min);
        (slowest > 0.0 && slowest.is_finite()).then(|| 1.0 / slowest)
    }
}

/// The weight a of each arriving pseudo-gradient in the server's outer
/// step, `theta = OuterOpt(theta, a delta_w)` (Algorithm 2 line 17), `k`
/// the configured workers:
///
/// - `"1/k"`: k arrivals move the model as sync DiLoCo's one step on their
///   mean (Algorithm 1 line 15) does in steady state: with k equal
///   pseudo-gradients g and Nesterov (eq. 4), m settles at (g / k) / (1 - b)
///   and each of the k steps moves theta by eps (b^2 m + (1 + b) g / k) =
///   eps (g / k) / (1 - b): eps g / (1 - b) per round, sync's one step on
///   the mean. At weight 1 it is k times that, and in the first round eq. 5's
///   (4 + 4b + 3b^2 + 2b^3 + b^4) g = 12.1 g against sync's (1 + b) g = 1.9 g
///   at b = 0.9 (weight 1/4: 3.04 g).
/// - `"sqrt(k)/k"`: the DeepMind notebook's constant soup weight
///   (AsyncLocalSGDToyExample.ipynb:632), used there with outer lr 0.07.
/// - `"1"`: the paper's async soup weight 1.0 (Table 5, bold).
/// - `"auto"` (default): `"1/k"` for sgd, sgd-momentum and nesterov, and
///   `"1"` for dn, whose Algorithm 3 already divides each g by N (N = k by default).
pub fn arrival_weight(weight: Weight, outer: OuterKind, k: usize) -> f32 {
    let k = k.max(1) as f64;
    let a = match (weight, outer) {
        (Weight::Auto, OuterKind::Dn) | (Weight::One, _) => 1.0,
        (Weight::Auto, _) | (Weight::InvK, _) => 1.0 / k,
        (Weight::SqrtKOverK, _) => k.sqrt() / k,
    };
    a as f32
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
    fn each_arrival_is_weighted_1_over_k_unless_dn() {
        use OuterKind::*;
        assert_eq!(
            [Weight::Auto, Weight::InvK, Weight::SqrtKOverK, Weight::One].map(|w| arrival_weight(w, Nesterov, 4)),
            [0.25, 0.25, 0.5, 1.0]
        );
        // Auto: dn divides by N itself (Algorithm 3); sgd and sgd-momentum as nesterov; one worker: 1.
        assert_eq!([Dn, Sgd, SgdMomentum].map(|o| arrival_weight(Weight::Auto, o, 4)), [1.0, 0.25, 0.25]);
        assert_eq!((arrival_weight(Weight::InvK, Dn, 4), arrival_weight(Weight::Auto, Nesterov, 1)), (0.25, 1.0));
    }

    #[test]
    fn k_arrivals_at_1_over_k_move_theta_as_syncs_one_step_eq_4_and_5() {
        // Nesterov (eq. 4), eps 1, beta 0.5, k = 2 equal pseudo-gradients g = 1 per round, theta from 0.
        let cfg = crate::optim::OuterConfig { lr: 1.0, momentum: 0.5, ..Default::default() };
        let rounds = |k: usize, a: f32, n: usize| {
            let (mut opt, mut x) = (crate::optim::OuterOpt::new(cfg, 1), [0.0f32]);
            (0..n)
                .map(|_| {
                    let x0 = x[0];
                    (0..k).for_each(|_| opt.step(&mut x, &[a]));
                    x0 - x[0]
                })
                .collect::<Vec<f32>>()
        };
        // First round. Sync, on the mean: (1 + b) g = 1.5. Two arrivals at weight 1, eq. 5's k = 2 form:
        // (2 + 2b + b^2) g = 3.25; at weight 1/2: m = 0.5, step 0.75; m = 0.75, step 0.875: 1.625.
        assert_eq!((rounds(1, 1.0, 1)[0], rounds(2, 1.0, 1)[0], rounds(2, 0.5, 1)[0]), (1.5, 3.25, 1.625));
        // Steady state: sync moves g / (1 - b) = 2 per round; k arrivals at 1/k as much, at weight 1 k times it.
        let last = |k, a| *rounds(k, a, 30).last().unwrap();
        assert!(
            (last(1, 1.0) - 2.0).abs() < 1e-4 && (last(2, 0.5) - 2.0).abs() < 1e-4 && (last(2, 1.0) - 4.0).abs() < 1e-4
        );
    }

    #[test]
    fn speeds_compare_declared_and_measured_in_one_unit() {
        let mut s = Speeds::new(3);
        [(0, 1.0), (1, 0.5), (2, 0.25)].into_iter().for_each(|(w, f)| s.declare(w, f));
        // Nothing measured: the declared factors, and no step length in seconds.
        assert_eq!((s.v(), s.slowest_step_s(|_| true)), (vec![1.0, 0.5, 0.25], None));
        // Worker 1 measured 0.8 s per step: 1.25 steps/s at factor 0.5, so a factor is 2.5 steps/s.
        // Before issue 26 its 1.25 was compared with worker 0's bare factor 1: 1.25 > 1 made it the fastest.
        s.measure(1, 0.8);
        assert_eq!(s.v(), [2.5, 1.25, 0.625]);
        assert_eq!(dylu_steps(&s.v(), 10), [10, 5, 2]);
        // The slowest live worker's step: 1 / 0.625 = 1.6 s; without worker 2, worker 1's 0.8 s.
        assert_eq!((s.slowest_step_s(|_| true), s.slowest_step_s(|w| w != 2)), (Some(1.6), Some(0.8)));
        // A measurement wins over the factor; a hello starts the worker afresh; nonsense is ignored.
        s.measure(2, 2.0);
        s.measure(0, 0.0);
        assert_eq!(s.v(), [2.5, 1.25, 0.5]);
        s.declare(1, 0.5);
        assert_eq!(s.v(), [2.0, 1.0, 0.5], "worker 2's 0.5 steps/s at factor 0.25: 2 steps/s per unit");
    }

    #[test]
    fn an_open_group_keeps_its_grace_period() {
        let mut g = Grace::new(0.0);
        g.set_next(0.3);
        assert!(g.admit(1.0) && g.is_open());
        g.set_next(5.0);
        assert_eq!(g.deadline(), Some(1.3), "set while open: for the next group");
        g.close();
        g.set_next(5.0);
        g.admit(2.0);
        assert_eq!(g.deadline(), Some(7.0));
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
