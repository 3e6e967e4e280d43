//! Learning-rate schedule: linear warmup, then cosine decay to a floor
//! (Loshchilov & Hutter, "SGDR", without restarts).

use anyhow::ensure;
use serde::{Deserialize, Serialize};

/// Linear warmup from `max_lr / warmup_steps` to `max_lr`, then cosine
/// decay from `max_lr` to `min_lr` over `[warmup_steps, total_steps)`, then
/// `min_lr`. Steps count from 0.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LrSchedule {
    /// Peak learning rate, reached at the last warmup step; > 0.
    pub max_lr: f32,
    /// Number of linear-warmup steps (0: start at `max_lr`).
    pub warmup_steps: u64,
    /// Step at which the cosine reaches `min_lr`; >= `warmup_steps`.
    pub total_steps: u64,
    /// Floor of the cosine decay, used from `total_steps` on; in [0, `max_lr`].
    #[serde(default)]
    pub min_lr: f32,
}

impl LrSchedule {
    /// The same learning rate at every step.
    pub fn constant(lr: f32) -> Self {
        Self { max_lr: lr, warmup_steps: 0, total_steps: 0, min_lr: lr }
    }

    /// Checks the constraints documented on each field.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            self.max_lr > 0.0 && self.max_lr.is_finite(),
            "lr schedule: max_lr must be > 0 and finite, got {}",
            self.max_lr
        );
        ensure!(self.min_lr >= 0.0, "lr schedule: min_lr must be >= 0, got {}", self.min_lr);
        ensure!(
            self.min_lr <= self.max_lr,
            "lr schedule: min_lr ({}) must not exceed max_lr ({})",
            self.min_lr,
            self.max_lr
        );
        ensure!(
            self.total_steps >= self.warmup_steps,
            "lr schedule: total_steps ({}) must be >= warmup_steps ({})",
            self.total_steps,
            self.warmup_steps
        );
        Ok(())
    }

    /// Learning rate for step `step` (0-based).
    pub fn lr(&self, step: u64) -> f32 {
        let (max, min) = (f64::from(self.max_lr), f64::from(self.min_lr));
        if step < self.warmup_steps {
            // lr = max_lr * (step + 1) / warmup
            return (max * (step + 1) as f64 / self.warmup_steps as f64) as f32;
        }
        if step >= self.total_steps {
            return self.min_lr;
        }
        // progress in [0, 1); lr = min + (max - min) * (1 + cos(pi * progress)) / 2
        let progress = (step - self.warmup_steps) as f64 / (self.total_steps - self.warmup_steps) as f64;
        (min + 0.5 * (max - min) * (1.0 + (std::f64::consts::PI * progress).cos())) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// max 1.0, min 0.1, warmup 4, total 12: the cosine spans 8 steps.
    fn sched() -> LrSchedule {
        LrSchedule { max_lr: 1.0, warmup_steps: 4, total_steps: 12, min_lr: 0.1 }
    }

    fn close(a: f32, b: f64) -> bool {
        (f64::from(a) - b).abs() < 1e-6
    }

    /// Warmup: lr(s) = (s + 1) / 4 for s = 0..3, reaching max at step 3;
    /// the cosine starts at max at step 4.
    #[test]
    fn warmup_is_linear_and_reaches_max() {
        let s = sched();
        assert_eq!([s.lr(0), s.lr(1), s.lr(2), s.lr(3)], [0.25, 0.5, 0.75, 1.0]);
        assert_eq!(s.lr(4), 1.0);
    }

    /// Midpoint, step 8 (progress 4/8): exactly (1.0 + 0.1) / 2 = 0.55.
    /// Step 6 (progress 1/4): 0.1 + 0.45 * (1 + cos(pi/4)) = 0.1 + 0.45 * 1.707106781 = 0.868198052.
    /// Step 11 (progress 7/8): 0.1 + 0.45 * (1 - 0.923879533) = 0.134254210.
    #[test]
    fn cosine_matches_hand_computed_points() {
        let s = sched();
        assert_eq!(s.lr(8), (1.0f32 + 0.1) / 2.0);
        assert!(close(s.lr(6), 0.868198052), "{}", s.lr(6));
        assert!(close(s.lr(11), 0.134254210), "{}", s.lr(11));
        assert!((4..12).all(|t| s.lr(t) > s.lr(t + 1)), "not strictly decreasing");
    }

    #[test]
    fn floor_holds_from_total_steps_on() {
        let s = sched();
        assert_eq!([s.lr(12), s.lr(13), s.lr(1_000_000)], [0.1; 3]);
    }

    #[test]
    fn no_warmup_starts_at_max_and_constant_is_constant() {
        let s = LrSchedule { warmup_steps: 0, ..sched() };
        assert_eq!(s.lr(0), 1.0);
        assert!(close(s.lr(6), 0.55), "{}", s.lr(6));
        let c = LrSchedule::constant(3e-4);
        c.validate().unwrap();
        assert_eq!([c.lr(0), c.lr(7)], [3e-4; 2]);
        // warmup == total: warmup, then straight to the floor.
        let w = LrSchedule { warmup_steps: 2, total_steps: 2, ..sched() };
        assert_eq!([w.lr(0), w.lr(1), w.lr(2)], [0.5, 1.0, 0.1]);
    }

    #[test]
    fn validate_rejects_inconsistent_schedules() {
        sched().validate().unwrap();
        let cases = [
            (LrSchedule { min_lr: 2.0, ..sched() }, "must not exceed max_lr"),
            (LrSchedule { total_steps: 3, ..sched() }, "total_steps (3) must be >= warmup_steps (4)"),
            (LrSchedule { max_lr: 0.0, min_lr: 0.0, ..sched() }, "max_lr must be > 0"),
            (LrSchedule { min_lr: -0.1, ..sched() }, "min_lr must be >= 0"),
        ];
        for (bad, needle) in cases {
            let err = bad.validate().unwrap_err().to_string();
            assert!(err.contains(needle), "{err:?} lacks {needle:?}");
        }
    }

    #[test]
    fn schedule_json_rejects_unknown_keys() {
        let s: LrSchedule = serde_json::from_str(r#"{"max_lr":1.0,"warmup_steps":4,"total_steps":12}"#).unwrap();
        assert_eq!(s.min_lr, 0.0);
        assert!(serde_json::from_str::<LrSchedule>(r#"{"max_lr":1.0,"warmup_steps":4,"total_steps":12,"min":0.1}"#)
            .is_err());
    }
}
