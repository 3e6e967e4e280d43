//! Mean and spread over seeds, and when two numbers measured over seeds
//! are a tie: written once, used by `lowcomm compare --seeds N` (time to
//! the target loss, final losses) and by `lowcomm tune` (validation loss).
//!
//! - mean: the arithmetic mean of the n values;
//! - std: the sample standard deviation, sqrt(sum (x - mean)^2 / (n - 1))
//!   (0 for one value, which has no spread to measure);
//! - tie, with two seeds or more on both sides: |mean_a - mean_b| <=
//!   std_a + std_b (each within the other's reach of one standard deviation
//!   away from its own mean); with one seed on either side there is no
//!   spread, and the caller's share of the smaller mean stands in for it
//!   (compare's verdict: [`ONE_SEED_TIE`], 5%).

/// Times within this share of the smaller one are a tie when one seed
/// cannot measure a spread (compare's verdict, since before seeds existed).
pub const ONE_SEED_TIE: f64 = 0.05;

/// n values summarised.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub mean: f64,
    /// Sample standard deviation (n - 1); 0 for one value.
    pub std: f64,
    pub n: usize,
}

impl Spread {
    /// The mean and sample standard deviation of `xs`; `None` if empty.
    pub fn of(xs: &[f64]) -> Option<Spread> {
        let n = xs.len();
        if n == 0 {
            return None;
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        let std =
            if n < 2 { 0.0 } else { (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt() };
        Some(Spread { mean, std, n })
    }

    /// `mean` with `digits` decimals, and ` ± std` when there is a spread
    /// (two values or more): `4.1234` or `4.1234 ± 0.0567`.
    pub fn cell(&self, digits: usize) -> String {
        if self.n < 2 {
            format!("{:.digits$}", self.mean)
        } else {
            format!("{:.digits$} ± {:.digits$}", self.mean, self.std)
        }
    }
}

/// Whether `a` and `b` cannot be told apart (module docs): the spread rule
/// when both have two values or more, else within `one_seed_share` of the
/// smaller mean.
pub fn tied(a: &Spread, b: &Spread, one_seed_share: f64) -> bool {
    let gap = (a.mean - b.mean).abs();
    if a.n >= 2 && b.n >= 2 {
        gap <= a.std + b.std
    } else {
        gap <= one_seed_share * a.mean.abs().min(b.mean.abs())
    }
}

/// How [`tied`] decides, in words, for a report's legend.
pub fn tie_rule(seeds: usize, one_seed_share: f64) -> String {
    if seeds >= 2 {
        format!("over {seeds} seeds, two means are a tie when they differ by no more than the sum of their sample standard deviations (|mean_a - mean_b| <= std_a + std_b)")
    } else {
        format!(
            "one seed: differences under {:.0}% are ties (no spread is measured; --seeds 3 measures it)",
            100.0 * one_seed_share
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_std_by_hand() {
        // 2, 4, 6: mean 4; squares 4 + 0 + 4 = 8, / (3 - 1) = 4, sqrt 2.
        assert_eq!(Spread::of(&[2.0, 4.0, 6.0]), Some(Spread { mean: 4.0, std: 2.0, n: 3 }));
        // One value: no spread.
        assert_eq!(Spread::of(&[5.0]), Some(Spread { mean: 5.0, std: 0.0, n: 1 }));
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[2.0, 4.0, 6.0]).unwrap().cell(2), "4.00 ± 2.00");
        assert_eq!(Spread::of(&[5.0]).unwrap().cell(4), "5.0000");
    }

    #[test]
    fn within_the_sum_of_the_spreads_is_a_tie() {
        let s = |mean, std| Spread { mean, std, n: 3 };
        // 10 and 10.5 with spreads 0.3 and 0.2: the gap 0.5 is 0.3 + 0.2: a tie.
        assert!(tied(&s(10.0, 0.3), &s(10.5, 0.2), ONE_SEED_TIE));
        // With spreads 0.3 and 0.1 (0.4 < 0.5): not a tie, however large the one-seed share.
        assert!(!tied(&s(10.0, 0.3), &s(10.5, 0.1), 1.0));
        // One seed: 5% of the smaller: 2.00 and 2.09 (4.5%) tie, 2.00 and 2.12 (6%) do not.
        let one = |mean| Spread { mean, std: 0.0, n: 1 };
        assert!(tied(&one(2.0), &one(2.09), ONE_SEED_TIE));
        assert!(!tied(&one(2.0), &one(2.12), ONE_SEED_TIE));
        // One side with one seed is judged by the one-seed rule, whatever the other's spread.
        assert!(!tied(&one(2.0), &s(2.12, 1.0), ONE_SEED_TIE));
        assert!(tie_rule(1, ONE_SEED_TIE).starts_with("one seed: differences under 5% are ties"));
        assert!(tie_rule(3, ONE_SEED_TIE).contains("std_a + std_b"));
    }
}
