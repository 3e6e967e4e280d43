//! How the plots of plot.rs tell curves apart and label their axes:
//!
//! - each series gets a (colour, dash) pair by its position: colour
//!   `i mod 7` from the Okabe-Ito palette (readable by colour-blind readers;
//!   its yellow left out, too faint on white), dash `i div 7` of solid,
//!   long and short dashes: 21 distinct pairs, the same for the same
//!   position in every plot of a report;
//! - series with exactly the same points are drawn once, named together
//!   (`ddp = zero1`), in the style of the first; so are series that would
//!   be drawn on top of each other, every point within [`SAME_LINE`] of the
//!   axes' spans (under half a pixel of the 760 x 480 plot), named with
//!   `≈` (`ddp ≈ zero1`: ZeRO-1 sums in another order, so its loss differs
//!   from ddp's in the sixth digit), so that no curve hides under another;
//! - tick labels are plain: integers as integers, thousands as `50k`,
//!   millions as `1.5M`, fractions with the fewest decimals that say the
//!   tick (`6.2`, `0.25`), never `50000.0`.

use super::plot::Series;
use plotters::style::RGBColor;

/// Okabe & Ito's colour-blind-safe palette without its yellow: blue,
/// vermillion, bluish green, reddish purple, orange, sky blue, black.
pub const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

/// A line's dash pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dash {
    Solid,
    /// 10 px drawn, 5 px gap.
    Long,
    /// 3 px drawn, 4 px gap.
    Short,
}

impl Dash {
    /// (drawn, gap) in pixels; `None` for a solid line.
    pub fn pattern(self) -> Option<(i32, i32)> {
        match self {
            Dash::Solid => None,
            Dash::Long => Some((10, 5)),
            Dash::Short => Some((3, 4)),
        }
    }
}

const DASHES: [Dash; 3] = [Dash::Solid, Dash::Long, Dash::Short];

/// The style of the series at position `i` (module docs); past 21
/// series the pairs repeat.
pub fn style(i: usize) -> (RGBColor, Dash) {
    let n = PALETTE.len();
    (PALETTE[i % n], DASHES[(i / n) % DASHES.len()])
}

/// Share of an axis's span within which two points are drawn as one.
pub const SAME_LINE: f64 = 5e-4;

/// Whether `a` and `b` would be drawn as one line on axes spanning `span`
/// (x, y): as many points, each pair within [`SAME_LINE`] of the spans
/// (a non-finite point matches only a non-finite one).
fn same_line(a: &[(f64, f64)], b: &[(f64, f64)], span: (f64, f64)) -> bool {
    let near = |u: f64, v: f64, s: f64| {
        if u.is_finite() && v.is_finite() {
            (u - v).abs() <= SAME_LINE * s.abs()
        } else {
            u.is_finite() == v.is_finite()
        }
    };
    a.len() == b.len() && a.iter().zip(b).all(|(p, q)| near(p.0, q.0, span.0) && near(p.1, q.1, span.1))
}

/// The series to draw: `(legend label, position of the first series with
/// these points)`, series drawn on top of an earlier one merged into its
/// entry: `a = b` when their points are equal, `a ≈ b` when they are
/// within [`SAME_LINE`] of the axes' spans `span` (x, y).
pub fn merge_identical(series: &[Series], span: (f64, f64)) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for (i, s) in series.iter().enumerate() {
        match out.iter_mut().find(|(_, j)| same_line(&series[*j].points, &s.points, span)) {
            Some((label, j)) => {
                let sign = if series[*j].points == s.points { "=" } else { "≈" };
                *label = format!("{label} {sign} {}", s.name);
            }
            None => out.push((s.name.clone(), i)),
        }
    }
    out
}

/// The tick label of `v` on an axis spanning `lo..hi` (module docs).
pub fn tick_label(v: f64, lo: f64, hi: f64) -> String {
    let big = lo.abs().max(hi.abs());
    let (scale, unit) = match big {
        b if b >= 1e6 => (1e6, "M"),
        b if b >= 1e4 => (1e3, "k"),
        _ => (1.0, ""),
    };
    // Ticks are round numbers: the fewest decimals that hold the tick to
    // within a millionth of the axis.
    let tol = ((hi - lo).abs() / scale * 1e-6).max(f64::MIN_POSITIVE);
    let x = v / scale;
    if x.abs() < tol {
        return "0".into();
    }
    let d = (0..=9).find(|&d| ((x * 10f64.powi(d)).round() / 10f64.powi(d) - x).abs() < tol).unwrap_or(9) as usize;
    format!("{x:.d$}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_series_get_sixteen_distinct_colour_and_dash_pairs() {
        let styles: Vec<_> = (0..16).map(style).collect();
        let distinct: std::collections::HashSet<_> = styles.iter().map(|(c, d)| (c.0, c.1, c.2, *d)).collect();
        assert_eq!(distinct.len(), 16);
        // The first seven are solid in seven colours; the eighth is the first colour, dashed.
        assert_eq!(style(0), (PALETTE[0], Dash::Solid));
        assert_eq!(style(7), (PALETTE[0], Dash::Long));
        assert_eq!(style(15), (PALETTE[1], Dash::Short));
        // Deterministic: the same position, the same style.
        assert_eq!(style(9), style(9));
    }

    #[test]
    fn identical_series_are_named_together_and_drawn_once() {
        let s = |name: &str, y: f64| Series { name: name.into(), points: vec![(0.0, 7.0), (1.0, y)] };
        // Axes spanning 1 (x) and 2 (y): within 0.001 of y is one line.
        let span = (1.0, 2.0);
        let series = [s("ddp", 6.0), s("dpu", 6.5), s("zero1", 6.0), s("acco", 6.0)];
        assert_eq!(merge_identical(&series, span), [("ddp = zero1 = acco".to_string(), 0), ("dpu".to_string(), 1)]);
        // 0.0009 apart: drawn as one, named with ≈; 0.0011 apart: two lines.
        let close = [s("ddp", 6.0), s("zero1", 6.0009), s("dpu", 6.0011)];
        assert_eq!(merge_identical(&close, span), [("ddp ≈ zero1".to_string(), 0), ("dpu".to_string(), 2)]);
        // A gap (NaN) matches only a gap; a shorter curve is another curve.
        let gap = Series { name: "gap".into(), points: vec![(0.0, 7.0), (1.0, f64::NAN)] };
        let short = Series { name: "short".into(), points: vec![(0.0, 7.0)] };
        assert_eq!(merge_identical(&[s("ddp", 6.0), gap, short], span).len(), 3);
    }

    #[test]
    fn ticks_are_plain_numbers() {
        // Tokens: thousands as k.
        assert_eq!(tick_label(50000.0, 0.0, 61440.0), "50k");
        assert_eq!(tick_label(2500.0, 0.0, 61440.0), "2.5k");
        assert_eq!(tick_label(0.0, 0.0, 61440.0), "0");
        assert_eq!(tick_label(1.5e6, 0.0, 3.9e6), "1.5M");
        // Seconds and losses: integers as integers, fractions as short as they are.
        assert_eq!(tick_label(10.0, 0.0, 33.0), "10");
        assert_eq!(tick_label(6.2, 5.9, 7.7), "6.2");
        assert_eq!(tick_label(0.1 + 0.2, 0.0, 1.0), "0.3");
        assert_eq!(tick_label(0.25, 0.0, 1.0), "0.25");
        assert_eq!(tick_label(-2.0, -5.0, 5.0), "-2");
    }
}
