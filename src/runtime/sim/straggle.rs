//! Micro-batches that do not all take the same time, and what that costs a
//! blocking collective (issue 29, planner-accuracy finding 11).
//!
//! On a real machine two ranks reach each step's collective a few
//! milliseconds apart: every micro-batch takes a slightly different time,
//! and the rank that arrives first waits for the last. With the profile's
//! `[timing] micro_batch_cv` (the standard deviation of one micro-batch's
//! time over its median, which `lowcomm calibrate` measures), the simulator
//! draws each micro-batch's time as `median x (1 + cv z)`, z standard
//! normal, from a hash of (run seed, participant, micro-batch index): the
//! draws do not depend on the order the executor runs things in, so a run
//! repeats bit for bit and the parallel simulator gives the sequential
//! one's times, and runs with other seeds (`compare --seeds N`) meet other
//! slow stretches, as real runs do. With one set of draws for every seed,
//! every simulated run had met the same luck: over 144 micro-batches at the
//! long-k profile's spread, worker 0 ran 5% fast and worker 1 3.4% slow
//! (planner-accuracy finding 27). `plan` takes the expectation instead: N
//! members that each computed K micro-batches since they last met reach
//! the collective `e_N cv mb sqrt(K)` after the mean, e_N the expected
//! largest of N standard normals ([`expected_max_of_normals`]).
//!
//! A slow micro-batch is seldom alone: on a shared host one worker's slow
//! stretch lasts several micro-batches (lag-1 correlation 0.24-0.85 in the
//! real runs of docs/results/planner-accuracy.md, finding 25), so the sum
//! of K varies more than K independent draws would, and the ranks meet
//! further apart. With `[timing] micro_batch_correlation` (rho, which
//! calibrate measures), z is a stationary AR(1) series per participant,
//! `z_i = rho z_(i-1) + sqrt(1 - rho^2) e_i`, written out as the sum of
//! the drawn e's (still a function of (participant, index) alone), and
//! `plan`'s sqrt(K) becomes the sum's standard deviation in units of one
//! draw's, [`sum_sd`].

use crate::data::sampler::splitmix64;

/// A standard normal drawn from (seed, rank, index) alone (Box-Muller).
/// Seed 0 draws what the simulator drew before runs had their own draws.
fn normal(seed: u64, rank: usize, index: u64) -> f64 {
    // The seed in the high half: no (seed, rank) pair below 2^32 meets another.
    let key = splitmix64(splitmix64(rank as u64 ^ seed.rotate_left(32)) ^ index);
    // Two uniforms in (0, 1]: 53 random bits each, never 0 (ln 0).
    let unit = |x: u64| ((x >> 11) + 1) as f64 / (1u64 << 53) as f64;
    let (u1, u2) = (unit(splitmix64(key)), unit(splitmix64(key ^ 0x5DEE_CE66_D1CE_5EED)));
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The factor on the `index`-th micro-batch of participant `rank` in a
/// run of seed `seed`:
/// `max(0, 1 + cv z)`, z a standard normal. With `correlation` rho > 0, z
/// is the AR(1) series' value, `sqrt(1 - rho^2) sum_k rho^k e_(index-k)`,
/// summed until rho^k < 1e-6 (its variance is then 1 - 1e-12); indices
/// before 0 wrap to other draws, so the series is stationary from the
/// first micro-batch. Exactly 1 for `cv = 0`; rho = 0 draws what it drew
/// before the correlation existed.
pub fn micro_batch_factor(cv: f64, correlation: f64, seed: u64, rank: usize, index: u64) -> f64 {
    if cv == 0.0 {
        return 1.0;
    }
    let z = if correlation <= 0.0 {
        normal(seed, rank, index)
    } else {
        let terms = (1e-6f64.ln() / correlation.ln()).ceil() as u64 + 1;
        let (mut weight, mut sum) = (1.0, 0.0);
        for k in 0..terms {
            sum += weight * normal(seed, rank, index.wrapping_sub(k));
            weight *= correlation;
        }
        (1.0 - correlation * correlation).sqrt() * sum
    };
    (1.0 + cv * z).max(0.0)
}

/// The standard deviation of the sum of `k` consecutive draws of a
/// stationary AR(1) series of unit variance and lag-1 correlation rho:
/// Var = k (1 + rho)/(1 - rho) - 2 rho (1 - rho^k)/(1 - rho)^2, which is
/// k for rho = 0 (independent draws), 2 (1 + rho) for k = 2, and k^2 as rho
/// goes to 1 (one draw k times).
pub fn sum_sd(k: f64, correlation: f64) -> f64 {
    let (k, r) = (k.max(0.0), correlation.clamp(0.0, 0.999_999));
    if r == 0.0 {
        return k.sqrt();
    }
    let var = k * (1.0 + r) / (1.0 - r) - 2.0 * r * (1.0 - r.powf(k)) / (1.0 - r).powi(2);
    var.max(0.0).sqrt()
}

/// E[max of n independent standard normals]: 0 for n = 1, 1/sqrt(pi) for
/// 2, 3/(2 sqrt(pi)) for 3, 1.0294 for 4, 1.7660 for 16. Numerically,
/// `sum x d(Phi(x)^n)` over [-12, 12] in steps of 1e-3 (Phi by the
/// trapezoid rule), to about 1e-7.
pub fn expected_max_of_normals(n: usize) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    const H: f64 = 1e-3;
    let pdf = |x: f64| (-0.5 * x * x).exp() / (std::f64::consts::TAU).sqrt();
    let (mut x, mut cdf, mut e) = (-12.0, 0.0f64, 0.0);
    while x < 12.0 {
        let next = cdf + 0.5 * H * (pdf(x) + pdf(x + H));
        e += (x + 0.5 * H) * (next.powi(n as i32) - cdf.powi(n as i32));
        cdf = next;
        x += H;
    }
    e
}

/// Seconds the last of `members` arrives after the mean, each having
/// computed `micro_batches` micro-batches of `mb` seconds with relative
/// spread `cv` and lag-1 correlation `correlation` since they last met:
/// `e_N cv mb sd(K)`, sd(K) = sqrt(K) for independent micro-batches ([`sum_sd`]).
pub fn straggle_s(members: usize, micro_batches: f64, mb: f64, cv: f64, correlation: f64) -> f64 {
    if cv == 0.0 {
        // Every shipped profile: no need for the 24,000-step integral.
        return 0.0;
    }
    expected_max_of_normals(members) * cv * mb * sum_sd(micro_batches, correlation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_max_of_normals_by_hand() {
        let sqrt_pi = std::f64::consts::PI.sqrt();
        assert_eq!(expected_max_of_normals(1), 0.0);
        assert!((expected_max_of_normals(2) - 1.0 / sqrt_pi).abs() < 1e-6);
        assert!((expected_max_of_normals(3) - 1.5 / sqrt_pi).abs() < 1e-6);
        // Tables of normal order statistics (e.g. Harter 1961): 1.02938, 1.76599.
        assert!((expected_max_of_normals(4) - 1.02938).abs() < 1e-5);
        assert!((expected_max_of_normals(16) - 1.76599).abs() < 1e-5);
    }

    #[test]
    fn straggle_grows_with_the_square_root_of_the_micro_batches() {
        // Two members, cv 0.1, 50 ms micro-batches, 4 of them: 0.5642 x 0.1 x 0.05 x 2.
        let s = straggle_s(2, 4.0, 0.05, 0.1, 0.0);
        assert!((s - 0.5642 * 0.1 * 0.05 * 2.0).abs() < 1e-6, "{s}");
        assert_eq!(straggle_s(1, 4.0, 0.05, 0.1, 0.0), 0.0);
        assert_eq!(straggle_s(8, 4.0, 0.05, 0.0, 0.5), 0.0);
    }

    #[test]
    fn micro_batch_factors_have_mean_1_and_spread_cv_and_repeat() {
        assert_eq!(micro_batch_factor(0.0, 0.0, 0, 3, 7), 1.0);
        let n = 200_000u64;
        let f: Vec<f64> = (0..n).map(|i| micro_batch_factor(0.05, 0.0, 0, (i % 4) as usize, i / 4)).collect();
        let mean = f.iter().sum::<f64>() / n as f64;
        let sd = (f.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        assert!((mean - 1.0).abs() < 1e-3 && (sd - 0.05).abs() < 1e-3, "mean {mean}, sd {sd}");
        // The same (rank, index) always draws the same factor; neighbours differ.
        assert_eq!(micro_batch_factor(0.05, 0.0, 0, 1, 9), micro_batch_factor(0.05, 0.0, 0, 1, 9));
        assert_ne!(micro_batch_factor(0.05, 0.0, 0, 1, 9), micro_batch_factor(0.05, 0.0, 0, 2, 9));
        assert_ne!(micro_batch_factor(0.05, 0.0, 0, 1, 9), micro_batch_factor(0.05, 0.0, 0, 1, 10));
    }

    #[test]
    fn seed_0_draws_what_the_simulator_drew_before_runs_had_seeds() {
        // Printed by 991737c's draws (no seed): 1 + 0.1 z for (rank 1,
        // index 9) and (0, 0), and rho 0.5's factor for (3, 40).
        assert!((micro_batch_factor(0.1, 0.0, 0, 1, 9) - 1.1167070973683269).abs() < 1e-12);
        assert!((micro_batch_factor(0.1, 0.0, 0, 0, 0) - 0.9623293982982547).abs() < 1e-12);
        assert!((micro_batch_factor(0.1, 0.5, 0, 3, 40) - 1.0250500185167548).abs() < 1e-12);
    }

    #[test]
    fn each_seed_draws_its_own_run_and_their_run_means_spread_as_expected() {
        // 144 micro-batches of one worker, cv 0.13, rho 0.5, under 400
        // seeds: each seed's mean factor is one draw of a run's luck, whose
        // standard deviation is cv sum_sd(144, 0.5) / 144 = 0.0187. Seeds
        // that shared draws, or a seed that changed nothing, would spread
        // less.
        let (cv, rho, k, seeds) = (0.13, 0.5, 144u64, 400u64);
        let run_mean = |seed: u64| (0..k).map(|i| micro_batch_factor(cv, rho, seed, 1, i)).sum::<f64>() / k as f64;
        let means: Vec<f64> = (1337..1337 + seeds).map(run_mean).collect();
        let mean = means.iter().sum::<f64>() / seeds as f64;
        let sd = (means.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (seeds - 1) as f64).sqrt();
        let want = cv * sum_sd(k as f64, rho) / k as f64;
        assert!((mean - 1.0).abs() < 3.0 * want / (seeds as f64).sqrt(), "mean of the run means {mean}");
        assert!((sd / want - 1.0).abs() < 0.12, "run means spread {sd}, expected {want}");
        // A seed repeats itself; another seed, or another worker, draws anew.
        assert_eq!(micro_batch_factor(cv, rho, 7, 1, 5), micro_batch_factor(cv, rho, 7, 1, 5));
        assert_ne!(micro_batch_factor(cv, rho, 7, 1, 5), micro_batch_factor(cv, rho, 8, 1, 5));
        assert_ne!(micro_batch_factor(cv, rho, 7, 1, 5), micro_batch_factor(cv, rho, 7, 0, 5));
    }

    #[test]
    fn the_mean_straggle_of_drawn_micro_batches_is_the_expected_one() {
        // 4 members, 9 micro-batches each, 20k meetings: the latest sum's
        // mean excess over 9 is e_4 x cv x 3.
        let (members, k, cv, rounds) = (4usize, 9u64, 0.1, 20_000u64);
        let mut excess = 0.0;
        for r in 0..rounds {
            let latest = (0..members)
                .map(|m| (0..k).map(|i| micro_batch_factor(cv, 0.0, 0, m, r * k + i)).sum::<f64>())
                .fold(f64::MIN, f64::max);
            excess += latest - k as f64;
        }
        let (got, want) = (excess / rounds as f64, straggle_s(members, k as f64, 1.0, cv, 0.0));
        assert!((got - want).abs() < 0.02 * want, "measured {got}, expected {want}");
    }

    #[test]
    fn the_sum_of_correlated_draws_by_hand() {
        // Independent: sqrt(k). k = 1: one draw, whatever rho. k = 2: 2 (1 + rho).
        assert!((sum_sd(9.0, 0.0) - 3.0).abs() < 1e-12);
        assert!((sum_sd(1.0, 0.7) - 1.0).abs() < 1e-9);
        assert!((sum_sd(2.0, 0.5) - 3.0f64.sqrt()).abs() < 1e-9);
        // k = 3, rho = 0.5: 3 + 2 (2 x 0.5 + 1 x 0.25) = 5.5.
        assert!((sum_sd(3.0, 0.5) - 5.5f64.sqrt()).abs() < 1e-9);
        // Two members, 12 micro-batches of 50 ms, cv 0.1, rho 0.5:
        // 0.5642 x 0.1 x 0.05 x sqrt(12 x 3 - 2 x 0.5 x (1 - 0.5^12) / 0.25).
        let want = 0.564190 * 0.1 * 0.05 * (36.0 - 4.0 * (1.0 - 0.5f64.powi(12))).sqrt();
        assert!((straggle_s(2, 12.0, 0.05, 0.1, 0.5) - want).abs() < 1e-6);
    }

    #[test]
    fn correlated_factors_have_mean_1_spread_cv_and_the_lag_1_correlation_asked() {
        let (cv, rho, n) = (0.05, 0.7, 100_000u64);
        let f: Vec<f64> = (0..n).map(|i| micro_batch_factor(cv, rho, 0, 2, i)).collect();
        let mean = f.iter().sum::<f64>() / n as f64;
        let d: Vec<f64> = f.iter().map(|x| x - mean).collect();
        let var = d.iter().map(|x| x * x).sum::<f64>() / n as f64;
        let lag1 = d.windows(2).map(|w| w[0] * w[1]).sum::<f64>() / (n - 1) as f64 / var;
        assert!((mean - 1.0).abs() < 2e-3 && (var.sqrt() - cv).abs() < 2e-3, "mean {mean}, sd {}", var.sqrt());
        assert!((lag1 - rho).abs() < 0.02, "lag-1 correlation {lag1}");
        // Other participants draw other series; the same one repeats.
        assert_ne!(micro_batch_factor(cv, rho, 0, 3, 5), micro_batch_factor(cv, rho, 0, 2, 5));
        assert_eq!(micro_batch_factor(cv, rho, 0, 3, 5), micro_batch_factor(cv, rho, 0, 3, 5));
    }

    #[test]
    fn the_mean_straggle_of_correlated_draws_is_the_expected_one() {
        // 2 members, 12 micro-batches each, rho 0.7: the latest sum's mean
        // excess over 12 is e_2 x cv x sum_sd(12, 0.7), about 2.1x the
        // independent draws' e_2 x cv x sqrt(12).
        let (members, k, cv, rho, rounds) = (2usize, 12u64, 0.1, 0.7, 20_000u64);
        let mut excess = 0.0;
        for r in 0..rounds {
            let latest = (0..members)
                .map(|m| (0..k).map(|i| micro_batch_factor(cv, rho, 0, m, r * k + i)).sum::<f64>())
                .fold(f64::MIN, f64::max);
            excess += latest - k as f64;
        }
        let (got, want) = (excess / rounds as f64, straggle_s(members, k as f64, 1.0, cv, rho));
        assert!((got - want).abs() < 0.03 * want, "measured {got}, expected {want}");
        assert!(want > 2.0 * straggle_s(members, k as f64, 1.0, cv, 0.0));
    }
}
