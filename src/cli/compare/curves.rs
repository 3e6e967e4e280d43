//! The curves of a `lowcomm compare` sweep: curves.csv (every round of
//! every seed) and the three plots, each method's smoothed training loss
//! against tokens, time and bytes sent per worker: with several seeds, the
//! mean curve over the seeds with the band from the lowest to the highest
//! seed at each round.

use super::marks::Kind;
use super::store::Round;
use super::table::{seed_of, Row};
use crate::metrics::plot::{line_svg_bands, Series};
use anyhow::Result;
use std::fmt::Write as _;

/// Every method's rounds, every seed:
/// `method,step,tokens,wall_s,loss,bytes_per_worker,seed` (the seed last,
/// so readers of the columns before it are unchanged).
pub fn curves_csv(rows: &[Row]) -> Result<String> {
    let mut csv = String::from("method,step,tokens,wall_s,loss,bytes_per_worker,seed\n");
    for (r, _) in rows.iter().flat_map(|w| &w.seeds) {
        let seed = seed_of(r).map_or(String::new(), |s| s.to_string());
        for x in &r.rounds {
            writeln!(csv, "{},{},{},{},{},{},{seed}", r.spec, x.step, x.tokens, x.wall_s, x.loss, x.bytes)?;
        }
    }
    Ok(csv)
}

/// `(x, lowest, highest)` at each point of a mean curve.
pub type Band = Vec<(f64, f64, f64)>;

/// `w`'s curve against `x`: the mean over its seeds, round by round (x
/// too), and with several seeds the band `(x, lowest, highest)` of the
/// seeds' smoothed losses at each round (up to the shortest seed).
pub fn curve(w: &Row, x: fn(&Round) -> f64) -> (Vec<(f64, f64)>, Band) {
    let n = w.seeds.len() as f64;
    let mean_x = |i: usize| w.seeds.iter().map(|(r, _)| x(&r.rounds[i])).sum::<f64>() / n;
    let len = w.smoothed.len().min(w.seeds.iter().map(|(r, _)| r.rounds.len()).min().unwrap_or(0));
    let points = (0..len).map(|i| (mean_x(i), w.smoothed[i])).collect();
    if w.seeds.len() < 2 {
        return (points, Vec::new());
    }
    let band = (0..len)
        .map(|i| {
            let ys = w.seeds.iter().map(|(_, s)| s[i]);
            (mean_x(i), ys.clone().fold(f64::INFINITY, f64::min), ys.fold(f64::NEG_INFINITY, f64::max))
        })
        .collect();
    (points, band)
}

/// The three plots as `(file name, SVG)`: smoothed training loss against
/// tokens, time and bytes sent per worker.
/// A marked method's curve is named with its mark; one with no point to
/// draw (bytes of a run that diverged) is left out of that plot. A
/// method with several seeds is named with their count (`ddp (3 seeds)`).
pub fn plots(rows: &[Row], clock: &str) -> Result<Vec<(&'static str, String)>> {
    let plot = |title: &str, x_label: &str, x: fn(&Round) -> f64| -> Result<String> {
        let mut series = Vec::new();
        let mut bands = Vec::new();
        for w in rows {
            let (points, band) = curve(w, x);
            if !points.iter().any(|p| p.0.is_finite() && p.1.is_finite()) {
                continue;
            }
            let seeds = if w.seeds.len() > 1 { format!(" ({} seeds)", w.seeds.len()) } else { String::new() };
            let name = match w.mark.kind {
                Kind::Sound => format!("{}{seeds}", w.r.spec),
                Kind::Diverged => format!("{}{seeds} (diverged)", w.r.spec),
                Kind::Unstable => format!("{}{seeds} (unstable)", w.r.spec),
            };
            series.push(Series { name, points });
            bands.push(band);
        }
        line_svg_bands(title, x_label, "loss", &series, &bands)
    };
    let seconds = format!("seconds ({clock})");
    Ok(vec![
        ("loss_vs_tokens.svg", plot("training loss vs tokens", "tokens", |p| p.tokens as f64)?),
        ("loss_vs_time.svg", plot("training loss vs time", &seconds, |p| p.wall_s)?),
        ("loss_vs_bytes.svg", plot("training loss vs bytes sent", "MB sent per worker", |p| p.bytes / 1e6)?),
    ])
}

#[cfg(test)]
mod tests {
    use super::super::marks::tests::result;
    use super::super::table::rows;
    use super::*;

    #[test]
    fn two_seeds_plot_their_mean_with_the_band_between_them_and_the_csv_keeps_both() {
        // Rounds of 100 tokens; the window (10 rounds) covers all 2: smoothed a 6, 5; b 6, 4.
        let mut a = result("ddp", &[6.0, 4.0], 4.0);
        let mut b = result("ddp", &[6.0, 2.0], 3.0);
        a.config = "[train]\nseed = 7\n".into();
        b.config = "[train]\nseed = 8\n".into();
        let groups = [vec![a, b]];
        let ws = rows(&groups);
        let (points, band) = curve(&ws[0], |p| p.tokens as f64);
        assert_eq!(points, [(100.0, 6.0), (200.0, 4.5)]);
        assert_eq!(band, [(100.0, 6.0, 6.0), (200.0, 4.0, 5.0)]);
        let csv = curves_csv(&ws).unwrap();
        assert_eq!(csv.lines().next(), Some("method,step,tokens,wall_s,loss,bytes_per_worker,seed"));
        assert!(csv.contains("\nddp,2,200,2,4,0,7\n") && csv.contains("\nddp,2,200,2,2,0,8\n"), "{csv}");
        let svgs = plots(&ws, "virtual").unwrap();
        assert!(svgs[0].1.contains("ddp (2 seeds)") && svgs[0].1.contains("<polygon"), "{}", svgs[0].1);
        // One seed: no band.
        let one = [groups[0][..1].to_vec()];
        assert!(curve(&rows(&one)[0], |p| p.tokens as f64).1.is_empty());
    }
}
