//! Equal tokens for the methods that accumulate while communicating (dpu,
//! acco-wp, acco): `Plan::micro_batch_budget` micro-batches per worker,
//! what `steps` synchronous steps train, instead of `steps` rounds of as
//! many micro-batches as fit (ACCO's rounds apply ~10x ddp's batch on a
//! slow link, so `compare` used to rank them on 6x the tokens).
//!
//! ```text
//! each stage:  compute while the round is in flight, at most `left` micro-batches
//!              (none once a worker's `left` is 0: it still takes part in the round)
//! each round:  its count all-reduce also sums every worker's `left`
//!              sum(left) = 0  -> nobody computes any more: this round is the last
//! schedule:    lr(applied micro-batches over all workers / (workers x grad_accum)),
//!              the step a synchronous method would be at after as many tokens
//! ```
//!
//! Every worker reads the same sums, so all end on the same round, whatever
//! their speeds. Without a budget nothing here changes a bit of the run.

use crate::strategy::journal::StrategyState;
use crate::strategy::worker::Plan;
use anyhow::Result;

/// One worker's side of the token budget.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBudget {
    /// Micro-batches this worker may still compute (`None`: no budget).
    left: Option<u64>,
    /// Micro-batches applied so far, summed over the workers.
    applied: u64,
    /// Micro-batches of one synchronous step over all workers.
    per_step: u64,
    /// The last round's sums said no worker computes any more.
    spent: bool,
    /// The mean loss of the last micro-batches computed: a last round under
    /// a budget may compute none, and repeats it.
    last_loss: f32,
}

impl TokenBudget {
    /// The budget of `plan` for one of `world` workers.
    pub fn new(plan: &Plan, world: usize) -> TokenBudget {
        TokenBudget {
            left: plan.micro_batch_budget,
            applied: 0,
            per_step: (world * plan.grad_accum).max(1) as u64,
            spent: false,
            last_loss: 0.0,
        }
    }

    /// How many micro-batches this worker may compute now (`None`: no cap).
    pub fn cap(&self) -> Option<usize> {
        self.left.map(|l| l as usize)
    }

    /// This worker computed `n` micro-batches.
    pub fn computed(&mut self, n: usize) {
        if let Some(l) = &mut self.left {
            *l = l.saturating_sub(n as u64);
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

    /// What this worker adds to the round's sum of what is left (`None`:
    /// no budget, and the round sends nothing more than before).
    pub fn left_to_send(&self) -> Option<f32> {
        self.left.map(|l| l as f32)
    }

    /// A round's sums came back: `applied` micro-batches were applied over
    /// all workers (0 for a round that commits nothing), and the workers
    /// had `left` in total when it started.
    pub fn round_done(&mut self, applied: u64, left: Option<f32>) {
        self.applied += applied;
        if left == Some(0.0) {
            self.spent = true;
        }
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
        match self.left {
            None => t,
            Some(_) => self.applied / self.per_step,
        }
    }

    /// Into a checkpoint part (nothing without a budget).
    pub fn save(&self, into: &mut StrategyState) {
        if let Some(l) = self.left {
            into.scalars["budget_left"] = serde_json::json!(l);
            into.scalars["budget_applied"] = serde_json::json!(self.applied);
            into.scalars["budget_last_loss"] = serde_json::json!(self.last_loss);
        }
    }

    /// What [`TokenBudget::save`] wrote.
    pub fn restore(&mut self, from: &StrategyState) -> Result<()> {
        if self.left.is_some() {
            self.left = Some(from.count("budget_left")?);
            self.applied = from.count("budget_applied")?;
            self.last_loss = from.scalars["budget_last_loss"].as_f64().unwrap_or(0.0) as f32;
        }
        Ok(())
    }
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
        let mut b = TokenBudget::new(&plan(None, 1), 4);
        b.computed(7);
        assert_eq!(b.loss(14.0, 7), 2.0);
        b.round_done(28, None);
        assert_eq!((b.cap(), b.left_to_send(), b.lr_step(3), b.spent()), (None, None, 3, false));
    }

    #[test]
    fn a_budget_caps_counts_down_and_schedules_by_tokens() {
        // 4 workers, 2 micro-batches per synchronous step: 8 per step.
        let mut b = TokenBudget::new(&plan(Some(5), 2), 4);
        assert_eq!(b.cap(), Some(5));
        b.computed(3);
        assert_eq!((b.cap(), b.left_to_send()), (Some(2), Some(2.0)));
        // 12 micro-batches applied over all workers: step 1 (12 / 8), not round 7.
        b.round_done(12, Some(9.0));
        assert_eq!((b.lr_step(7), b.spent()), (1, false));
        b.computed(4); // more than is left: none left, never below 0
        assert_eq!(b.cap(), Some(0));
        assert_eq!(b.end(10, 7), 10);
        b.round_done(4, Some(0.0));
        assert_eq!((b.lr_step(8), b.spent(), b.end(10, 7)), (2, true, 8));
        // A round that computes nothing repeats the last loss.
        assert_eq!((b.loss(7.5, 3), b.loss(0.0, 0)), (2.5, 2.5));
    }

    #[test]
    fn the_budget_resumes_from_its_part() {
        let mut a = TokenBudget::new(&plan(Some(9), 1), 2);
        a.computed(4);
        a.loss(10.0, 4);
        a.round_done(8, Some(10.0));
        let mut st = StrategyState::default();
        a.save(&mut st);
        let mut b = TokenBudget::new(&plan(Some(9), 1), 2);
        b.restore(&st).unwrap();
        assert_eq!(a, b);
        // No budget: nothing saved, nothing needed.
        let mut none = StrategyState::default();
        TokenBudget::new(&plan(None, 1), 2).save(&mut none);
        assert!(none.scalars.is_null());
        TokenBudget::new(&plan(None, 1), 2).restore(&none).unwrap();
    }
}
