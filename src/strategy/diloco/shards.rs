//! Data shards of asynchronous DiLoCo on the server (async-local-sgd.txt,
//! Sec. 3 "Data Shard Sampling", eq. 2, and the per-shard learning-rate
//! schedules of eq. 3; Algorithm 4 lines 4 and 6).
//!
//! ```text
//! train(W, theta) (Alg. 4): for w in W:
//!     D' = sample shard (eq. 2)               line 4   p_i ~ max(|D_i| / sum |D| - n_i / sum n, 0)
//!     w.steps = DyLU or H                     line 5
//!     w.lr = D''s schedule from n_D'          line 6   eq. 3: warmup, cosine to eta_min over T_D'
//!     n_D' += w.steps
//! ```
//!
//! Our reading and choices:
//! - Shards are the contiguous, near-equal pieces `shard_range(tokens, i,
//!   S)` of the training token stream (the split every worker uses when
//!   shards are fixed); `|D_i|` is its token count. S defaults to the
//!   number of workers (the paper's k shards for k workers).
//! - `n_i` counts the inner steps handed out on shard `i`, rounds still in
//!   flight included (every step trains on the same number of tokens, so
//!   steps and data points give the same shares). Counting at hand-out, not
//!   at arrival, keeps a shard being trained now from being drawn again as
//!   if untouched, and gives each round its own steps of the shard's schedule.
//! - Each shard has eq. 3's schedule, advanced by that shard's own steps:
//!   the round starts at step `n_i` of shard `i`'s schedule. The run's
//!   budget is `steps x workers` inner steps (the server's `t_max`); shard
//!   `i`'s share of it is `|D_i| / sum |D|`, so its schedule is the run's
//!   stretched by `workers x share`: `T_i = round(T x workers x share)`,
//!   warmup likewise. With S = workers equal shards that is the run's own
//!   schedule. Past `T_i` the rate stays at the floor eta_min (the paper's
//!   "minimum learning rate ... even if t exceeds T"), never below it.
//! - The draw is the server's: a PCG64 seeded from the run's seed, one
//!   uniform number per hand-out, so a simulated run is bit-reproducible.
//! - `fixed`: worker `w` always trains on shard `w` (no eq. 2; needs S =
//!   workers). Its schedule is then the worker's own, as in sync DiLoCo,
//!   with which async DiLoCo with equal speeds and a covering grace period
//!   then agrees.

use super::param_server::sample_shard;
use crate::data::sampler::shard_range;
use crate::optim::LrSchedule;
use anyhow::{ensure, Result};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

/// One round as the server handed it out: who trains which shard, from
/// which step of the shard's schedule, for how many steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRound {
    /// The worker.
    pub worker: usize,
    /// The shard it trains on.
    pub shard: usize,
    /// The shard's schedule step the round starts at (`n_i` when handed out).
    pub first_step: u64,
    /// Inner steps of the round.
    pub steps: u64,
}

/// The server's shards: sizes, steps handed out, the draw's RNG.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Shards {
    /// Tokens of each shard, `|D_i|`.
    pub sizes: Vec<u64>,
    /// Inner steps handed out on each shard, `n_i`.
    pub steps: Vec<u64>,
    /// The draw's RNG, mid-stream.
    pub rng: Pcg64,
    /// Worker `w` always trains on shard `w` (no eq. 2).
    pub fixed: bool,
    /// The run's schedule (per worker, over `steps` inner steps).
    pub schedule: LrSchedule,
    /// Workers of the run (the run's budget is the schedule's x workers).
    pub workers: usize,
    /// Every round handed out by [`Shards::order`], in order.
    pub rounds: Vec<ShardRound>,
}

impl Shards {
    /// `shards` shards of a stream of `tokens` tokens, for `workers`
    /// workers following `schedule`; draws seeded by `seed`.
    pub fn new(
        tokens: usize,
        shards: usize,
        workers: usize,
        schedule: &LrSchedule,
        seed: u64,
        fixed: bool,
    ) -> Result<Shards> {
        check(tokens, shards, workers, fixed, 0)?;
        let sizes = (0..shards).map(|i| shard_range(tokens, i, shards).len() as u64).collect();
        // "SHARDS" in ASCII: a stream of its own, apart from the workers' samplers.
        let rng = Pcg64::seed_from_u64(seed ^ 0x5348_4152_4453);
        Ok(Shards {
            sizes,
            steps: vec![0; shards],
            rng,
            fixed,
            schedule: schedule.clone(),
            workers,
            rounds: Vec::new(),
        })
    }

    /// Shard `i`'s schedule (eq. 3): the run's, stretched by its share of
    /// the run's budget (module docs).
    pub fn schedule(&self, i: usize) -> LrSchedule {
        let total: u64 = self.sizes.iter().sum();
        let stretch = self.workers as f64 * self.sizes[i] as f64 / total.max(1) as f64;
        let scale = |t: u64| (t as f64 * stretch).round() as u64;
        let s = &self.schedule;
        LrSchedule { warmup_steps: scale(s.warmup_steps), total_steps: scale(s.total_steps), ..s.clone() }
    }

    /// Algorithm 4 lines 4-6 for `worker`'s next round of `steps` steps,
    /// as the worker reads it; the round is recorded in `rounds`.
    pub fn order(&mut self, worker: usize, steps: u64) -> RoundOrder {
        let r = self.hand_out(worker, steps);
        self.rounds.push(r);
        let s = self.schedule(r.shard);
        RoundOrder {
            steps,
            shard: r.shard,
            shards: self.sizes.len(),
            first_step: r.first_step,
            warmup_steps: s.warmup_steps,
            total_steps: s.total_steps,
        }
    }

    /// Algorithm 4 lines 4-6 for `worker`'s next round of `steps` steps:
    /// the shard (eq. 2, or the worker's own when fixed) and where in its
    /// schedule the round starts; the shard's count advances by `steps`.
    pub fn hand_out(&mut self, worker: usize, steps: u64) -> ShardRound {
        let shard = if self.fixed {
            worker
        } else {
            let u: f64 = self.rng.random();
            sample_shard(&self.sizes, &self.steps, u)
        };
        let first_step = self.steps[shard];
        self.steps[shard] += steps;
        ShardRound { worker, shard, first_step, steps }
    }
}

/// Checks a run's shards before it starts: at least one, as many as the
/// workers when `fixed`, and each able to hold a window of `window` tokens
/// (`seq + 1`) of the `tokens`-token stream.
pub fn check(tokens: usize, shards: usize, workers: usize, fixed: bool, window: usize) -> Result<()> {
    ensure!(shards >= 1, "[methods.async-diloco]: shards must be at least 1, e.g. shards = 4 (flag --shards 4)");
    ensure!(
        !fixed || shards == workers,
        "[methods.async-diloco]: fixed_shards gives worker i shard i, so shards must equal the workers ({workers}), got {shards}: e.g. shards = {workers} (flag --shards {workers}), or drop --fixed-shards"
    );
    let smallest = shard_range(tokens, shards - 1, shards).len();
    let fit = (tokens / window.max(1)).max(1);
    ensure!(
        smallest >= window,
        "[methods.async-diloco]: {shards} shards of {tokens} training tokens hold {smallest} tokens each, fewer than one window ({window}): use fewer, e.g. shards = {fit} (flag --shards {fit}), or more text"
    );
    Ok(())
}

/// What a worker reads from the server's model message: its round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundOrder {
    /// Inner steps to run.
    pub steps: u64,
    /// The shard to train on, of `shards`.
    pub shard: usize,
    /// Shards of the run.
    pub shards: usize,
    /// The shard's schedule step the round starts at.
    pub first_step: u64,
    /// The shard's schedule: warmup steps.
    pub warmup_steps: u64,
    /// The shard's schedule: steps to the floor (`T_i`).
    pub total_steps: u64,
}

impl RoundOrder {
    /// As scalars on the wire (f64: whole numbers travel exactly).
    pub fn to_scalars(&self) -> Vec<f64> {
        let v =
            [self.steps, self.shard as u64, self.shards as u64, self.first_step, self.warmup_steps, self.total_steps];
        v.iter().map(|&x| x as f64).collect()
    }

    /// Reads what [`RoundOrder::to_scalars`] wrote.
    pub fn from_scalars(x: &[f64]) -> Result<RoundOrder> {
        ensure!(x.len() == 6, "a model message carries 6 numbers (the round), got {}", x.len());
        let u = |i: usize| x[i] as u64;
        Ok(RoundOrder {
            steps: u(0),
            shard: u(1) as usize,
            shards: u(2) as usize,
            first_step: u(3),
            warmup_steps: u(4),
            total_steps: u(5),
        })
    }

    /// The learning rate of the round's `k`-th step (0-based): the shard's
    /// schedule at its step `first_step + k`, the run's peak and floor.
    pub fn lr(&self, run: &LrSchedule, k: u64) -> f32 {
        let s = LrSchedule { warmup_steps: self.warmup_steps, total_steps: self.total_steps, ..run.clone() };
        s.lr(self.first_step + k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched() -> LrSchedule {
        LrSchedule { max_lr: 1.0, warmup_steps: 2, total_steps: 10, min_lr: 0.1 }
    }

    #[test]
    fn each_shards_schedule_is_the_runs_stretched_by_its_share() {
        // 4 workers over 100 tokens in 4 shards of 25: the run's own schedule.
        let s = Shards::new(100, 4, 4, &sched(), 0, false).unwrap();
        assert_eq!(s.sizes, [25, 25, 25, 25]);
        assert_eq!(s.schedule(3), sched());
        // 101 tokens in 3 near-equal shards (34, 34, 33) for 2 workers: the budget
        // is 2 x 10 steps; shard 2's share 33/101 x 20 = 6.53 -> 7 steps, warmup
        // 2 x 2 x 33/101 = 1.31 -> 1.
        let s = Shards::new(101, 3, 2, &sched(), 0, false).unwrap();
        assert_eq!(s.sizes, [34, 34, 33]);
        assert_eq!((s.schedule(2).total_steps, s.schedule(2).warmup_steps), (7, 1));
        assert_eq!((s.schedule(0).total_steps, s.schedule(0).warmup_steps), (7, 1), "34/101 x 20 = 6.73");
        // Past T_i the shard stays at the floor, never below.
        let t = s.schedule(2);
        assert_eq!([t.lr(7), t.lr(100)], [0.1, 0.1]);
    }

    #[test]
    fn hand_outs_follow_eq_2_and_advance_the_shards_own_count() {
        let mut s = Shards::new(100, 2, 2, &sched(), 7, false).unwrap();
        // First draw: nothing learned, shares by size (0.5, 0.5): either shard.
        let a = s.hand_out(0, 3);
        assert_eq!((a.worker, a.first_step, a.steps), (0, 0, 3));
        // Now shard a is over-sampled (3 of 3 steps for half the data): eq. 2 gives
        // the other shard probability 1, whatever the uniform number.
        let b = s.hand_out(1, 2);
        assert_eq!((b.shard, b.first_step), (1 - a.shard, 0));
        // Counts 3 and 2: shares 0.6, 0.4 -> only shard b is under-sampled; it continues at its step 2.
        let c = s.hand_out(0, 4);
        assert_eq!((c.shard, c.first_step), (b.shard, 2));
        assert_eq!(s.steps[a.shard] + s.steps[b.shard], 9);
        // Same seed, same draws; fixed shards: each worker its own.
        let mut again = Shards::new(100, 2, 2, &sched(), 7, false).unwrap();
        assert_eq!(again.hand_out(0, 3), a);
        let mut fixed = Shards::new(100, 2, 2, &sched(), 7, true).unwrap();
        assert_eq!(
            [fixed.hand_out(1, 2).shard, fixed.hand_out(0, 2).shard, fixed.hand_out(1, 2).first_step as usize],
            [1, 0, 2]
        );
    }

    #[test]
    fn the_order_carries_the_shards_schedule_and_the_worker_follows_it() {
        // 2 shards for 1 worker: each shard's share of the 10-step budget is 5 steps,
        // warmup 2 x 0.5 = 1; a round of 4 steps starting at step 3 of its shard.
        let mut s = Shards::new(100, 2, 1, &sched(), 1, false).unwrap();
        s.steps = vec![3, 3];
        let o = s.order(0, 4);
        assert_eq!((o.steps, o.shards, o.first_step, o.warmup_steps, o.total_steps), (4, 2, 3, 1, 5));
        assert_eq!(s.rounds, [ShardRound { worker: 0, shard: o.shard, first_step: 3, steps: 4 }]);
        assert_eq!(RoundOrder::from_scalars(&o.to_scalars()).unwrap(), o);
        // Steps 3..7 of the shard: cosine from 1 to 0.1 over steps 1..5, then the floor.
        // Step 3: progress (3 - 1) / 4 = 0.5 -> 0.1 + 0.45 x (1 + cos(pi/2)) = 0.55.
        let lrs: Vec<f32> = (0..4).map(|k| o.lr(&sched(), k)).collect();
        assert!((lrs[0] - 0.55).abs() < 1e-6, "{lrs:?}");
        assert_eq!(&lrs[2..], [0.1, 0.1], "the floor is reached at T_i = 5 and not passed");
    }

    #[test]
    fn bad_shard_counts_name_the_key_and_an_example() {
        let e = Shards::new(100, 0, 2, &sched(), 0, false).unwrap_err().to_string();
        assert!(e.contains("shards must be at least 1") && e.contains("--shards 4"), "{e}");
        let e = Shards::new(100, 3, 2, &sched(), 0, true).unwrap_err().to_string();
        assert!(e.contains("shards must equal the workers (2), got 3") && e.contains("--shards 2"), "{e}");
        // 100 tokens in 8 shards: the last holds 12, less than a window of 17.
        let e = check(100, 8, 2, false, 17).unwrap_err().to_string();
        assert!(e.contains("8 shards of 100 training tokens hold 12 tokens each") && e.contains("--shards 5"), "{e}");
        assert!(check(100, 5, 2, false, 17).is_ok(), "5 shards of 20 tokens");
    }
}
