//! Equal tokens for the methods that accumulate while communicating (dpu,
//! acco-wp, acco): `Plan::micro_batch_budget` micro-batches per worker,
//! what `steps` synchronous steps train, instead of `steps` rounds of as
//! many micro-batches as fit (ACCO's rounds apply ~10x ddp's batch on a
//! slow link, so `compare` used to rank them on 6x the tokens).
//!
//! The budget is pooled: `workers x budget` micro-batches in all, shared by
//! speed. A per-worker cap stopped the fast workers once they had spent
//! their equal share, and the slow one then ran the last rounds alone (ACCO
//! with one worker 4x slower: the last 75 of 100 rounds). Each worker holds
//! a quota; what the others compute between two count reduces is bounded
//! by their own quotas, so the total never passes the pool:
//!
//! ```text
//! start:       quota_i = budget
//! each stage:  compute at most quota_i micro-batches (quota_i -= what it computed)
//! each round:  at its count all-reduce, worker i keeps min(quota_i, 2 rate_i) for
//!              the stage computed while the round is in flight and releases the
//!              rest; the reduce also sums every quota (before the release), the
//!              released micro-batches, and each worker's rate (micro-batches of
//!              its last stage that the quota did not cut short)
//!              released R goes back by rate: share_i = floor(R rate_i / sum rate),
//!              the R - sum floor left over one each to the largest remainders
//!              (lowest rank first on a tie): every worker computes the same shares
//!              sum(quota) = 0  -> nobody computes any more: this round is the last
//! schedule:    lr(applied micro-batches over all workers / (workers x grad_accum)),
//!              the step a synchronous method would be at after as many tokens
//! ```
//!
//! Every worker reads the same sums, so all end on the same round, whatever
//! their speeds; at equal speeds every worker computes its own budget, as a
//! per-worker cap did. The sums travel as f32 (exact below 2^24 micro-batches).
//! Without a budget nothing here changes a bit of the run.

use crate::strategy::journal::StrategyState;
use crate::strategy::worker::Plan;
use anyhow::Result;

/// One worker's side of the token budget.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBudget {
    /// Micro-batches this worker may still compute (`None`: no budget).
    quota: Option<u64>,
    /// Micro-batches applied so far, summed over the workers.
    applied: u64,
    /// Micro-batches of one synchronous step over all workers.
    per_step: u64,
    /// This worker's rank, and the number of workers.
    rank: usize,
    world: usize,
    /// Micro-batches of this worker's last stage that its quota did not cut
    /// short (at least 1): its speed, by which released quota is shared.
    rate: u64,
    /// The last round's sums said no worker computes any more.
    spent: bool,
    /// The mean loss of the last micro-batches computed: a last round under
    /// a budget may compute none, and repeats it.
    last_loss: f32,
}

impl TokenBudget {
    /// The budget of `plan` for worker `rank` of `world`.
    pub fn new(plan: &Plan, rank: usize, world: usize) -> TokenBudget {
        TokenBudget {
            quota: plan.micro_batch_budget,
            applied: 0,
            per_step: (world * plan.grad_accum).max(1) as u64,
            rank,
            world,
            rate: 1,
            spent: false,
            last_loss: 0.0,
        }
    }

    /// How many micro-batches this worker may compute now (`None`: no cap).
    pub fn cap(&self) -> Option<usize> {
        self.quota.map(|l| l as usize)
    }

    /// This worker computed `n` micro-batches in a stage.
    pub fn computed(&mut self, n: usize) {
        if let Some(q) = &mut self.quota {
            let n = n as u64;
            // A stage the quota cut short says only that the worker is at least this fast.
            self.rate = if n < *q { n.max(1) } else { self.rate.max(n) };
            *q = q.saturating_sub(n);
        }
    }

    /// A round's mean loss from the `n` micro-batches it computed, whose
    /// losses sum to `sum`; a round that computed none (the last, under a
    /// budget) repeats the previous round's.
    pub fn loss(&mut self, sum: f64, n: usize) -> f32 {
        if n > 0 {
            self.last_loss = (sum / n as f64) as f32;
        }
        self.last_loss
    }

    /// What this worker adds to the round's count all-reduce, as the round
    /// starts: its quota, what it releases and its rate at its rank (`None`:
    /// no budget, and the round sends nothing more than before). From here
    /// until the round's sums return the worker computes at most what it keeps.
    pub fn to_send(&mut self) -> Option<Vec<f32>> {
        let q = self.quota?;
        let kept = q.min(2 * self.rate);
        self.quota = Some(kept);
        let mut v = vec![0.0; 2 + self.world];
        (v[0], v[1], v[2 + self.rank]) = (q as f32, (q - kept) as f32, self.rate as f32);
        Some(v)
    }

    /// A round's sums came back: `applied` micro-batches were applied over
    /// all workers (0 for a round that commits nothing), and `sums` is the
    /// sum of every worker's [`TokenBudget::to_send`] (`None`: no budget).
    pub fn round_done(&mut self, applied: u64, sums: Option<&[f32]>) {
        self.applied += applied;
        let (Some(q), Some(s)) = (&mut self.quota, sums) else { return };
        if s[0] == 0.0 {
            self.spent = true;
        }
        let rates: Vec<u64> = s[2..].iter().map(|&r| r as u64).collect();
        *q += shares(s[1] as u64, &rates)[self.rank];
    }

    /// Whether the run ends with this round (budget spent everywhere).
    pub fn spent(&self) -> bool {
        self.spent
    }

    /// The round a run stopping at `end` ends on, after round `t`: this
    /// one once the budget is spent (so it saves its last part here).
    pub fn end(&self, end: u64, t: u64) -> u64 {
        if self.spent {
            t + 1
        } else {
            end
        }
    }

    /// The schedule's step for round `t`: `t` without a budget, else the
    /// synchronous step the tokens applied so far correspond to.
    pub fn lr_step(&self, t: u64) -> u64 {
        match self.quota {
            None => t,
            Some(_) => self.applied / self.per_step,
        }
    }

    /// Into a checkpoint part (nothing without a budget).
    pub fn save(&self, into: &mut StrategyState) {
        if let Some(q) = self.quota {
            into.scalars["budget_left"] = serde_json::json!(q);
            into.scalars["budget_applied"] = serde_json::json!(self.applied);
            into.scalars["budget_rate"] = serde_json::json!(self.rate);
            into.scalars["budget_last_loss"] = serde_json::json!(self.last_loss);
        }
    }

    /// What [`TokenBudget::save`] wrote.
    pub fn restore(&mut self, from: &StrategyState) -> Result<()> {
        if self.quota.is_some() {
            self.quota = Some(from.count("budget_left")?);
            self.applied = from.count("budget_applied")?;
            // Parts written before the budget was pooled have no rate: every worker's is then 1.
            self.rate = from.scalars["budget_rate"].as_u64().unwrap_or(1);
            self.last_loss = from.scalars["budget_last_loss"].as_f64().unwrap_or(0.0) as f32;
        }
        Ok(())
    }
}

/// `released` micro-batches shared in proportion to `rates` (each at least
/// 1), by largest remainder: the shares sum to `released` exactly, and every
/// worker computes the same ones from the same sums.
fn shares(released: u64, rates: &[u64]) -> Vec<u64> {
    let total: u64 = rates.iter().sum::<u64>().max(1);
    let mut out: Vec<u64> = rates.iter().map(|&r| released * r / total).collect();
    let mut by_remainder: Vec<usize> = (0..rates.len()).collect();
    // Largest remainder first, the lower rank on a tie (a stable sort keeps rank order).
    by_remainder.sort_by_key(|&i| std::cmp::Reverse(released * rates[i] % total));
    let left_over = released - out.iter().sum::<u64>();
    for &i in by_remainder.iter().take(left_over as usize) {
        out[i] += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::{DecaySegments, LrSchedule, OptimizerConfig};

    fn plan(budget: Option<u64>, accum: usize) -> Plan {
        Plan {
            micro_batch_budget: budget,
            grad_accum: accum,
            ..Plan::new(10, LrSchedule::constant(1.0), OptimizerConfig::default(), DecaySegments::none())
        }
    }

    #[test]
    fn without_a_budget_nothing_is_capped_sent_or_rescheduled() {
        let mut b = TokenBudget::new(&plan(None, 1), 0, 4);
        b.computed(7);
        assert_eq!(b.loss(14.0, 7), 2.0);
        assert_eq!(b.to_send(), None);
        b.round_done(28, None);
        assert_eq!((b.cap(), b.lr_step(3), b.spent()), (None, 3, false));
    }

    #[test]
    fn released_micro_batches_are_shared_by_rate_to_the_last_one() {
        // 10 by rates 8, 8, 2: 4.44, 4.44, 1.11 -> 4, 4, 1 and the one left
        // over to the largest remainder, rank 0 before rank 1 on the tie.
        assert_eq!(shares(10, &[8, 8, 2]), vec![5, 4, 1]);
        // 7 by equal rates: 1 each, the 3 left over to ranks 0, 1, 2.
        assert_eq!(shares(7, &[1, 1, 1, 1]), vec![2, 2, 2, 1]);
        // 11 by 8, 3, 8: 4.63, 1.74, 4.63 -> 4, 1, 4; remainders 12, 14, 12 of 19.
        assert_eq!(shares(11, &[8, 3, 8]), vec![5, 2, 4]);
        assert_eq!(shares(0, &[3, 1]), vec![0, 0]);
    }

    #[test]
    fn a_worker_keeps_two_stages_at_its_rate_and_gets_released_quota_back_by_rate() {
        // Worker 1 of 3, 20 micro-batches, 2 per synchronous step over all: 6.
        let mut b = TokenBudget::new(&plan(Some(20), 2), 1, 3);
        b.computed(3); // not cut short: its rate is 3
        assert_eq!(b.cap(), Some(17));
        // It keeps 2 x 3 for the stage computed while the round is in flight
        // and releases 11: [its quota, released, rates at ranks].
        assert_eq!(b.to_send(), Some(vec![17.0, 11.0, 0.0, 3.0, 0.0]));
        assert_eq!(b.cap(), Some(6));
        b.computed(4);
        // Worker 0 (rate 8) had 2 left and kept them, worker 2 (rate 8) none:
        // the 11 go back 5 / 2 / 4 (the test above), 2 of them to worker 1.
        b.round_done(12, Some(&[19.0, 11.0, 8.0, 3.0, 8.0]));
        assert_eq!((b.cap(), b.lr_step(7), b.spent()), (Some(4), 2, false));
        // A stage cut short by the quota: the worker is at least that fast.
        b.computed(4);
        assert_eq!((b.cap(), b.rate), (Some(0), 4));
        b.computed(0);
        assert_eq!(b.rate, 4);
        // No quota anywhere at a reduce: this round is the last.
        assert_eq!(b.end(10, 7), 10);
        assert_eq!(b.to_send(), Some(vec![0.0, 0.0, 0.0, 4.0, 0.0]));
        b.round_done(6, Some(&[0.0, 0.0, 8.0, 4.0, 8.0]));
        assert_eq!((b.lr_step(8), b.spent(), b.end(10, 7)), (3, true, 8));
        // A round that computes nothing repeats the last loss.
        assert_eq!((b.loss(7.5, 3), b.loss(0.0, 0)), (2.5, 2.5));
    }

    #[test]
    fn the_budget_resumes_from_its_part() {
        let mut a = TokenBudget::new(&plan(Some(9), 1), 0, 2);
        a.computed(4);
        a.loss(10.0, 4);
        a.to_send();
        a.round_done(8, Some(&[10.0, 2.0, 4.0, 1.0]));
        let mut st = StrategyState::default();
        a.save(&mut st);
        let mut b = TokenBudget::new(&plan(Some(9), 1), 0, 2);
        b.restore(&st).unwrap();
        assert_eq!(a, b);
        // No budget: nothing saved, nothing needed.
        let mut none = StrategyState::default();
        TokenBudget::new(&plan(None, 1), 0, 2).save(&mut none);
        assert!(none.scalars.is_null());
        TokenBudget::new(&plan(None, 1), 0, 2).restore(&none).unwrap();
    }
}
