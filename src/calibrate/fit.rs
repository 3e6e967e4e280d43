//! The alpha-beta model of a link, fitted to a sweep over message sizes.
//!
//! ```text
//! t(B) = a + b B                         (one message, or one collective)
//! ```
//!
//! fitted by least squares on the *relative* error, so the latency end of a
//! sweep (4 B) counts as much as the bandwidth end (64 MiB):
//!
//! ```text
//! minimise  sum_i w_i (t_i - a - b B_i)^2,   w_i = 1 / t_i^2
//! b = (S Sxy - Sx Sy) / (S Sxx - Sx^2),  a = (Sy - b Sx) / S          (normal equations)
//! ```
//!
//! with `S = sum w`, `Sx = sum w B`, `Sy = sum w t`, `Sxx = sum w B^2`,
//! `Sxy = sum w B t`. A negative `a` is refitted through the origin (`a = 0,
//! b = Sxy / Sxx`). The residual is the root mean square of `(fit - t) / t`;
//! above [`FIT_LIMIT`] the link "does not fit alpha-beta" (a protocol switch,
//! a shaper's bursts, a congested path), and calibrate says so in the profile.
//!
//! A ring all-reduce over `p` members costs `2(p-1) alpha + 2(p-1)/p B / bw`
//! (comm/link.rs, `Tier::all_reduce_s`), so its fit gives the tier as
//! `alpha = a / (2(p-1))`, `bw = 2(p-1) / (p b)` ([`AlphaBeta::all_reduce_tier`]).

use crate::comm::Tier;

/// Relative RMS residual above which a sweep does not fit alpha-beta (20%, our choice).
pub const FIT_LIMIT: f64 = 0.20;

/// One fitted line `t = alpha + beta B` and how well it fits.
#[derive(Clone, Debug, PartialEq)]
pub struct AlphaBeta {
    /// Intercept, seconds.
    pub alpha: f64,
    /// Slope, seconds per byte (> 0).
    pub beta: f64,
    /// Root mean square of `(fit - t) / t` over the sweep.
    pub rms_rel: f64,
    /// Largest `|fit - t| / t`, and the message size where it is.
    pub max_rel: (f64, f64),
    /// Why the slope is not the least-squares one, if it is not.
    pub note: Option<String>,
}

impl AlphaBeta {
    /// Whether the sweep fits alpha-beta: residual at most [`FIT_LIMIT`] and
    /// the slope from the least squares.
    pub fn fits(&self) -> bool {
        self.rms_rel <= FIT_LIMIT && self.note.is_none()
    }

    /// The link tier whose ring all-reduce over `p >= 2` members is this line.
    pub fn all_reduce_tier(&self, p: usize) -> Tier {
        let f = (p.max(2) - 1) as f64;
        Tier::line(self.alpha / (2.0 * f), 2.0 * f / (p.max(2) as f64 * self.beta))
    }

    /// The link tier of a one-way message (half a ping-pong round trip): `alpha`, `1 / beta`.
    pub fn message_tier(&self) -> Tier {
        Tier::line(self.alpha, 1.0 / self.beta)
    }

    /// One line for the profile's comments and the progress output.
    pub fn describe(&self) -> String {
        let verdict = if self.fits() {
            format!("fits alpha-beta (RMS relative residual {:.1}% <= {:.0}%)", 100.0 * self.rms_rel, 100.0 * FIT_LIMIT)
        } else {
            format!(
                "DOES NOT FIT alpha-beta (RMS relative residual {:.1}% > {:.0}%, worst {:.0}% at {} B{})",
                100.0 * self.rms_rel,
                100.0 * FIT_LIMIT,
                100.0 * self.max_rel.0,
                self.max_rel.1,
                self.note.as_deref().map(|n| format!("; {n}")).unwrap_or_default()
            )
        };
        format!("a = {:.3} us, b = {:.4e} s/B: {verdict}", self.alpha * 1e6, self.beta)
    }
}

/// Fits `t = a + b B` to `(bytes, seconds)` points (module docs). Needs two
/// sizes at least and positive times.
pub fn fit(points: &[(f64, f64)]) -> anyhow::Result<AlphaBeta> {
    anyhow::ensure!(
        points.len() >= 2 && points.iter().all(|&(b, t)| b >= 0.0 && t > 0.0 && t.is_finite()),
        "an alpha-beta fit needs at least two sizes with positive times, got {points:?}"
    );
    let (mut s, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, y) in points {
        let w = 1.0 / (y * y);
        s += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
    }
    let det = s * sxx - sx * sx;
    anyhow::ensure!(det > 0.0, "an alpha-beta fit needs at least two different sizes, got {points:?}");
    let mut beta = (s * sxy - sx * sy) / det;
    let mut alpha = (sy - beta * sx) / s;
    if alpha < 0.0 {
        alpha = 0.0;
        beta = sxy / sxx;
    }
    let mut note = None;
    if beta <= 0.0 {
        // No time grows with size: keep the sweep's throughput at its
        // largest message as the bandwidth, and say so.
        let &(x, y) = points.iter().max_by(|a, b| a.0.total_cmp(&b.0)).expect("two points");
        beta = y / x.max(1.0);
        alpha = 0.0;
        note = Some("time does not grow with size; bandwidth taken from the largest message".into());
    }
    let rel: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (((alpha + beta * x) - y).abs() / y, x)).collect();
    let rms_rel = (rel.iter().map(|r| r.0 * r.0).sum::<f64>() / rel.len() as f64).sqrt();
    let max_rel = rel.iter().copied().fold((0.0, 0.0), |m, r| if r.0 > m.0 { r } else { m });
    Ok(AlphaBeta { alpha, beta, rms_rel, max_rel, note })
}

/// `link spec` text (`BANDWIDTH,LATENCY`, comm/link.rs) of `t`, which parses back to `t` within 1e-4.
pub fn tier_spec(t: &Tier) -> String {
    let bw = t.bandwidth_bytes_per_s;
    let (v, unit) = match bw {
        b if b >= 1e9 => (b / 1e9, "GB/s"),
        b if b >= 1e6 => (b / 1e6, "MB/s"),
        b if b >= 1e3 => (b / 1e3, "KB/s"),
        b => (b, "B/s"),
    };
    format!("{v:.6}{unit},{:.4}us", t.latency_s * 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs()
    }

    #[test]
    fn an_exact_line_is_recovered_by_hand() {
        // t = 10 us + B / 1 GB/s: 0 B 10 us, 1000 B 11 us, 1e6 B 1010 us.
        let pts = [(0.0, 10e-6), (1000.0, 11e-6), (1e6, 1010e-6)];
        let f = fit(&pts).unwrap();
        assert!(close(f.alpha, 10e-6, 1e-9) && close(f.beta, 1e-9, 1e-9), "{f:?}");
        assert!(f.rms_rel < 1e-9 && f.fits(), "{f:?}");
        assert!(f.describe().contains("a = 10.000 us") && f.describe().contains("fits alpha-beta"));
    }

    #[test]
    fn an_all_reduce_sweep_gives_back_its_tier() {
        // Times from the simulator's own formula for 4 members of a 2 GB/s, 5 us tier.
        let tier = Tier::line(5e-6, 2e9);
        let pts: Vec<(f64, f64)> = (0..8).map(|i| 4f64.powi(2 * i + 1)).map(|b| (b, tier.all_reduce_s(b, 4))).collect();
        let back = fit(&pts).unwrap().all_reduce_tier(4);
        assert!(close(back.latency_s, 5e-6, 1e-9) && close(back.bandwidth_bytes_per_s, 2e9, 1e-9), "{back:?}");
        // Two members: 2 alpha + B / bw, by hand: a = 10 us, b = 0.5 ns/B.
        let f = AlphaBeta { alpha: 10e-6, beta: 0.5e-9, rms_rel: 0.0, max_rel: (0.0, 0.0), note: None };
        let (two, one) = (f.all_reduce_tier(2), f.message_tier());
        assert!(close(two.latency_s, 5e-6, 1e-12) && close(two.bandwidth_bytes_per_s, 2e9, 1e-12), "{two:?}");
        assert!(close(one.latency_s, 10e-6, 1e-12) && close(one.bandwidth_bytes_per_s, 2e9, 1e-12), "{one:?}");
    }

    #[test]
    fn a_step_in_the_sweep_does_not_fit() {
        // 1 ms up to 1 KiB, then 20 ms from 16 KiB on (a protocol switch):
        // no line is within 20% of both plateaus.
        let pts = [(4.0, 1e-3), (64.0, 1e-3), (1024.0, 1e-3), (16384.0, 20e-3), (262144.0, 20e-3), (4194304.0, 21e-3)];
        let f = fit(&pts).unwrap();
        assert!(f.rms_rel > FIT_LIMIT && !f.fits(), "{f:?}");
        assert!(f.describe().contains("DOES NOT FIT alpha-beta"), "{}", f.describe());
    }

    #[test]
    fn times_that_do_not_grow_are_flagged_and_still_give_a_bandwidth() {
        let f = fit(&[(4.0, 2e-3), (4096.0, 1e-3)]).unwrap();
        assert!(!f.fits() && f.note.is_some() && f.beta > 0.0, "{f:?}");
        assert!(fit(&[(4.0, 1e-3)]).is_err() && fit(&[(4.0, 1e-3), (4.0, 2e-3)]).is_err());
        assert!(fit(&[(4.0, 0.0), (8.0, 1e-3)]).is_err());
    }

    #[test]
    fn tier_specs_parse_back() {
        for t in [Tier::line(12.5e-6, 3.2e9), Tier::line(0.0, 12.5e6)] {
            let back: Tier = tier_spec(&t).parse().unwrap();
            assert!(close(back.bandwidth_bytes_per_s, t.bandwidth_bytes_per_s, 1e-4), "{}", tier_spec(&t));
            assert!((back.latency_s - t.latency_s).abs() < 1e-10, "{}", tier_spec(&t));
        }
    }
}
