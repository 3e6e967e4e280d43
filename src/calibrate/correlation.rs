//! How much one slow micro-batch predicts the next, from calibrate's own
//! series: each worker's micro-batches of one set, in the order they ran.
//!
//! On a shared host a worker's slow stretch lasts several micro-batches
//! (docs/results/planner-accuracy.md, finding 25), so two ranks drift
//! further apart over a round than independent draws would, and the one
//! that arrives first waits longer. The simulator and `plan` take that
//! from `[timing] micro_batch_correlation` (runtime/sim/straggle.rs).
//!
//! The estimate is the lag-1 autocorrelation pooled over the series, each
//! centred on its own mean (a series taken minutes after another may run
//! at another speed: that drift is not a stretch within a round):
//! `r = sum d_t d_(t+1) / sum d_t^2`. Centring on a mean taken from the
//! same n samples biases r low by about (1 + 3 rho)/n (Kendall 1954,
//! Marriott and Pope 1954: E[r] = rho - (1 + 3 rho)/n), -0.1 to -0.3 for
//! calibrate's 30-sample series; solving that for rho gives the corrected
//! `(n r + 1)/(n - 3)`, clamped to [0, 0.95].

use super::compute::Samples;

/// Largest correlation a profile takes (`timing.micro_batch_correlation`).
pub const MAX_CORRELATION: f64 = 0.95;

/// The lag-1 correlation of consecutive micro-batches over `series`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lag1 {
    /// The pooled estimate as measured, each series centred on its mean.
    pub raw: f64,
    /// Corrected for the centring's bias and clamped to [0, MAX_CORRELATION]: what the profile keeps.
    pub corrected: f64,
    /// Pairs of consecutive micro-batches it rests on.
    pub pairs: usize,
    /// Series it pools.
    pub series: usize,
}

/// The pooled lag-1 correlation of `series` ([`Lag1`]); `None` with fewer
/// than 8 pairs (series of at least 4) or series that never vary.
pub fn lag1(series: &[Samples]) -> Option<Lag1> {
    let usable: Vec<&Samples> = series.iter().filter(|s| s.0.len() >= 4).collect();
    let (mut num, mut den, mut pairs, mut samples) = (0.0, 0.0, 0usize, 0usize);
    for s in &usable {
        let mean = s.mean();
        let d: Vec<f64> = s.0.iter().map(|x| x - mean).collect();
        num += d.windows(2).map(|w| w[0] * w[1]).sum::<f64>();
        den += d.iter().map(|x| x * x).sum::<f64>();
        pairs += d.len() - 1;
        samples += d.len();
    }
    if pairs < 8 || den <= 0.0 {
        return None;
    }
    let raw = num / den;
    let n = samples as f64 / usable.len() as f64;
    let corrected = ((n * raw + 1.0) / (n - 3.0)).clamp(0.0, MAX_CORRELATION);
    Some(Lag1 { raw, corrected, pairs, series: usable.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag1_by_hand() {
        // One series 1, 2, ..., 9 (mean 5): d = -4 .. 4, sum d^2 = 60,
        // sum d_t d_(t+1) = 12 + 6 + 2 + 0 + 0 + 2 + 6 + 12 = 40;
        // r = 40 / 60; n = 9: corrected (9 x 2/3 + 1)/6 = 7/6, clamped to 0.95.
        let s = Samples((1..=9).map(f64::from).collect());
        let l = lag1(&[s]).unwrap();
        assert!((l.raw - 2.0 / 3.0).abs() < 1e-12, "{l:?}");
        assert_eq!(l.corrected, MAX_CORRELATION);
        assert_eq!((l.pairs, l.series), (8, 1));
        // 1, 2, 1, 2, ... (10): d = -+0.5, r = 9 x -0.25 / 2.5 = -0.9;
        // corrected (10 x -0.9 + 1)/7 < 0, clamped to 0.
        let alt = Samples((0..10).map(|i| if i % 2 == 0 { 1.0 } else { 2.0 }).collect());
        let l = lag1(&[alt]).unwrap();
        assert!((l.raw + 0.9).abs() < 1e-12 && l.corrected == 0.0, "{l:?}");
        // Between the clamps: 1, 3, 2, 4, 3, 5, 4, 6, 5, 7, 6, 8 (mean 4.5,
        // a rising zigzag): sum d^2 = 47, sum d_t d_(t+1) = 20.25,
        // r = 0.43085; n = 12: corrected (12 r + 1)/9 = 0.68558.
        let zigzag = Samples([1, 3, 2, 4, 3, 5, 4, 6, 5, 7, 6, 8].map(f64::from).to_vec());
        let l = lag1(&[zigzag]).unwrap();
        assert!((l.raw - 20.25 / 47.0).abs() < 1e-12 && (l.corrected - 0.685579).abs() < 1e-6, "{l:?}");
    }

    #[test]
    fn each_series_is_centred_on_its_own_mean() {
        // Two alternating series at different speeds: pooled on one mean
        // their offset would read as a strong correlation; each on its own
        // mean, they alternate.
        let a = Samples((0..8).map(|i| 1.0 + 0.1 * (i % 2) as f64).collect());
        let b = Samples((0..8).map(|i| 5.0 + 0.1 * (i % 2) as f64).collect());
        let l = lag1(&[a, b]).unwrap();
        assert!(l.raw < -0.8, "{l:?}");
        assert_eq!((l.pairs, l.series), (14, 2));
    }

    #[test]
    fn too_few_pairs_or_no_variation_measure_nothing() {
        assert_eq!(lag1(&[Samples(vec![1.0, 2.0, 3.0])]), None);
        assert_eq!(lag1(&[Samples(vec![1.0, 2.0, 3.0, 4.0, 5.0])]), None);
        assert_eq!(lag1(&[Samples(vec![2.0; 12])]), None);
    }

    #[test]
    fn an_ar1_series_is_measured_near_its_correlation() {
        // Ten series of 30 from the simulator's own AR(1) draws at rho 0.7:
        // the corrected estimate lands near 0.7, the raw one below it.
        use crate::runtime::sim::straggle::micro_batch_factor;
        let series: Vec<Samples> =
            (0..10).map(|r| Samples((0..30).map(|i| micro_batch_factor(0.1, 0.7, 0, r, i)).collect())).collect();
        let l = lag1(&series).unwrap();
        assert!(l.raw < l.corrected, "{l:?}");
        assert!((l.corrected - 0.7).abs() < 0.12, "{l:?}");
    }
}
