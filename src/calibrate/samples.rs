//! Timed samples of one kind of work and the statistics the profile
//! reports of them: median, mean, range, spread and a robust cv.

/// Samples of one kind of work: every repetition of every local worker.
#[derive(Clone, Debug, Default)]
pub struct Samples(pub Vec<f64>);

impl Samples {
    /// The median (0 when empty).
    pub fn median(&self) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    }
    /// The mean (0 when empty): what stretched samples add to a run's time,
    /// which the median leaves out.
    pub fn mean(&self) -> f64 {
        self.0.iter().sum::<f64>() / self.0.len().max(1) as f64
    }
    /// Smallest and largest.
    pub fn range(&self) -> (f64, f64) {
        self.0.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)))
    }
    /// `(max - min) / median`: the spread the profile reports.
    pub fn spread(&self) -> f64 {
        let (lo, hi) = self.range();
        (hi - lo) / self.median().max(f64::MIN_POSITIVE)
    }
    /// The standard deviation over the median, estimated from the median
    /// absolute deviation (1.4826 MAD, a normal's sd): one sample that a
    /// page fault or another process stretched does not move it, as it
    /// would the plain sd or the range.
    pub fn robust_cv(&self) -> f64 {
        let med = self.median();
        let dev = Samples(self.0.iter().map(|x| (x - med).abs()).collect());
        1.4826 * dev.median() / med.max(f64::MIN_POSITIVE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_median_range_and_spread_by_hand() {
        let s = Samples(vec![3.0, 1.0, 2.0, 10.0]);
        assert_eq!((s.median(), s.range()), (3.0, (1.0, 10.0)));
        assert_eq!((s.mean(), Samples(vec![]).mean()), (4.0, 0.0));
        // Deviations from 3: 0, 1, 2, 7; their (upper) median is 2, so 1.4826 x 2 / 3: the 10 counts as one far sample, not by its size.
        assert!((s.robust_cv() - 1.4826 * 2.0 / 3.0).abs() < 1e-12, "{}", s.robust_cv());
        assert_eq!(s.spread(), 3.0);
    }
}
