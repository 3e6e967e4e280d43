//! Line plots (SVG) of training curves, with plotters. Curves are told
//! apart by colour and dash, identical ones (or ones drawn on top of each
//! other) drawn once and named together,
//! the legend sits to the right of the plot (never over the data) and tick
//! labels are plain numbers (plot_style.rs). A curve that climbs far above
//! where the curves start (a diverging run) is cut at the top of the plot
//! instead of squeezing every other curve into a line.

use super::plot_style::{merge_identical, style, tick_label};
use anyhow::{anyhow, Result};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use std::path::Path;

/// One named curve.
pub struct Series {
    /// Legend label.
    pub name: String,
    /// (x, y) points in order; a non-finite one breaks the line.
    pub points: Vec<(f64, f64)>,
}

/// Plot `series` as lines into an SVG file at `path`.
pub fn line_plot(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Result<()> {
    let svg = line_svg(title, x_label, y_label, series).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    // Written like every other output: a reader never sees half a plot.
    crate::util::atomic_write(path, svg.as_bytes())
}

/// Width and height of the plot area, pixels (the legend comes on top of the width).
const PLOT: (u32, u32) = (760, 480);
/// Pixels between legend lines.
const LEGEND_LINE: i32 = 20;
const FONT: &str = "sans-serif";

/// The y-axis top: the highest point, but no higher than the highest
/// first point (where the curves start) plus half of the way from there
/// down to the lowest point. Returns (bottom, top).
fn y_range(series: &[Series]) -> Option<(f64, f64)> {
    let finite = |p: &&(f64, f64)| p.0.is_finite() && p.1.is_finite();
    let ys = || series.iter().flat_map(|s| s.points.iter().filter(finite).map(|p| p.1));
    let lo = ys().fold(f64::INFINITY, f64::min);
    let hi = ys().fold(f64::NEG_INFINITY, f64::max);
    let start =
        series.iter().filter_map(|s| s.points.iter().find(finite).map(|p| p.1)).fold(f64::NEG_INFINITY, f64::max);
    (lo <= hi).then(|| (lo, if start > lo { hi.min(start + 0.5 * (start - lo)) } else { hi }))
}

/// `points` as the pieces of line at or below `top`: a line leaving the
/// plot ends where it crosses `top`, and one coming back starts there; a
/// non-finite point ends a piece.
fn clip_below(points: &[(f64, f64)], top: f64) -> Vec<Vec<(f64, f64)>> {
    let mut pieces = vec![Vec::new()];
    let mut prev: Option<(f64, f64)> = None;
    for &(x, y) in points {
        if !(x.is_finite() && y.is_finite()) {
            pieces.push(Vec::new());
            prev = None;
            continue;
        }
        let cut = |(px, py): (f64, f64)| (px + (x - px) * (top - py) / (y - py), top);
        let piece = pieces.last_mut().expect("one piece at least");
        match prev {
            Some(p) if p.1 <= top && y > top => {
                piece.push(cut(p));
                pieces.push(Vec::new());
            }
            Some(p) if p.1 > top && y <= top => piece.push(cut(p)),
            _ => {}
        }
        if y <= top {
            pieces.last_mut().expect("one piece at least").push((x, y));
        }
        prev = Some((x, y));
    }
    pieces.into_iter().filter(|p| !p.is_empty()).collect()
}

/// Plot `series` as lines; the SVG document as text.
pub fn line_svg(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Result<String> {
    line_svg_bands(title, x_label, y_label, series, &[])
}

/// [`line_svg`] with a shaded band under some curves: `bands[i]` (if
/// there, and not empty) is `(x, low, high)` around `series[i]`, drawn in
/// its colour, faint, below every line (e.g. the spread over seeds of a
/// mean curve). Bands do not widen the y-axis; they are cut at its ends.
pub fn line_svg_bands(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    bands: &[Vec<(f64, f64, f64)>],
) -> Result<String> {
    let xs = || series.iter().flat_map(|s| s.points.iter().filter(|p| p.0.is_finite() && p.1.is_finite()).map(|p| p.0));
    let (x0, x1) = (xs().fold(f64::INFINITY, f64::min), xs().fold(f64::NEG_INFINITY, f64::max));
    let Some((y0, y1)) = y_range(series).filter(|_| x0 <= x1) else {
        return Err(anyhow!("nothing to plot ({title})"));
    };
    let x1 = x1.max(x0 + 1e-9);
    let pad = ((y1 - y0) * 0.05).max(1e-6);
    let (ylo, yhi) = (y0 - pad, y1 + pad);
    let drawn = merge_identical(series, (x1 - x0, yhi - ylo));
    // About 7 px per character of the legend's sans-serif (16 / 1.24 px: plotters' scale), after a 28 px sample line.
    let legend_w = 60 + 7 * drawn.iter().map(|(l, _)| l.chars().count()).max().unwrap_or(0) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (PLOT.0 + legend_w, PLOT.1)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let (plot, legend) = root.split_horizontally(PLOT.0);
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, (FONT, 22))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, ylo..yhi)
            .map_err(|e| anyhow!("{e}"))?;
        let fx = |v: &f64| tick_label(*v, x0, x1);
        let fy = |v: &f64| tick_label(*v, ylo, yhi);
        chart
            .configure_mesh()
            .x_labels(8)
            .y_labels(8)
            .x_label_formatter(&fx)
            .y_label_formatter(&fy)
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 16))
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        for (label_i, band) in drawn.iter().filter_map(|(_, i)| bands.get(*i).map(|b| (*i, b))) {
            let ok: Vec<&(f64, f64, f64)> =
                band.iter().filter(|p| p.0.is_finite() && p.1.is_finite() && p.2.is_finite()).collect();
            if ok.len() < 2 {
                continue;
            }
            let clamp = |y: f64| y.clamp(ylo, yhi);
            let outline: Vec<(f64, f64)> =
                ok.iter().map(|p| (p.0, clamp(p.2))).chain(ok.iter().rev().map(|p| (p.0, clamp(p.1)))).collect();
            let (color, _) = style(label_i);
            chart
                .draw_series(std::iter::once(Polygon::new(outline, color.mix(0.18).filled())))
                .map_err(|e| anyhow!("{e}"))?;
        }
        for (k, (label, i)) in drawn.iter().enumerate() {
            let (color, dash) = style(*i);
            let line = color.stroke_width(2);
            for piece in clip_below(&series[*i].points, yhi) {
                match dash.pattern() {
                    None => chart.draw_series(LineSeries::new(piece, line)).map(|_| ()),
                    Some((on, off)) => chart.draw_series(DashedLineSeries::new(piece, on, off, line)).map(|_| ()),
                }
                .map_err(|e| anyhow!("{e}"))?;
            }
            // The legend: a sample of the line, then the name, one entry per line.
            let y = 40 + LEGEND_LINE * k as i32;
            let sample = vec![(4, y), (32, y)];
            match dash.pattern() {
                None => legend.draw(&PathElement::new(sample, line)),
                Some((on, off)) => legend.draw(&DashedPathElement::new(sample, on, off, line)),
            }
            .map_err(|e| anyhow!("{e}"))?;
            legend.draw(&Text::new(label.clone(), (38, y - 7), (FONT, 16))).map_err(|e| anyhow!("{e}"))?;
        }
        root.present().map_err(|e| anyhow!("{e}"))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plot_writes_an_svg_with_the_legend() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("loss.svg");
        let s = vec![Series { name: "acco".into(), points: vec![(0.0, 3.0), (1.0, 2.0), (2.0, 1.5)] }];
        line_plot(&p, "loss", "tokens", "loss", &s).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("acco"), "{}", &svg[..200.min(svg.len())]);
        assert!(line_plot(&p, "x", "x", "y", &[]).is_err());
    }

    #[test]
    fn a_curve_is_cut_where_it_leaves_the_plot_and_resumes_where_it_comes_back() {
        // Up through 10 between x = 1 and 2 (at 1.5), back down between 2 and 3 (at 2.5).
        let pts = [(0.0, 4.0), (1.0, 6.0), (2.0, 14.0), (3.0, 6.0), (4.0, f64::NAN), (5.0, 5.0)];
        assert_eq!(
            clip_below(&pts, 10.0),
            [vec![(0.0, 4.0), (1.0, 6.0), (1.5, 10.0)], vec![(2.5, 10.0), (3.0, 6.0)], vec![(5.0, 5.0)]]
        );
    }

    #[test]
    fn the_top_of_the_plot_stops_half_way_above_where_the_curves_start() {
        let s = |points: Vec<(f64, f64)>| Series { name: "m".into(), points };
        // Curves start at 8 and 7, the lowest point is 6: the top is 8 + (8 - 6) / 2 = 9, not 1e6.
        let series = [s(vec![(0.0, 8.0), (1.0, 6.0)]), s(vec![(0.0, 7.0), (1.0, 1e6), (2.0, f64::NAN)])];
        assert_eq!(y_range(&series), Some((6.0, 9.0)));
        // Curves that stay below their start are shown whole.
        assert_eq!(y_range(&series[..1]), Some((6.0, 8.0)));
    }

    #[test]
    fn a_band_is_drawn_as_one_shaded_polygon_under_its_curve() {
        let s = vec![Series { name: "ddp".into(), points: vec![(0.0, 3.0), (1.0, 2.0)] }];
        let plain = line_svg("loss", "tokens", "loss", &s).unwrap();
        let banded = line_svg_bands("loss", "tokens", "loss", &s, &[vec![(0.0, 2.9, 3.1), (1.0, 1.8, 2.2)]]).unwrap();
        assert_eq!(plain.matches("<polygon").count(), 0, "{plain}");
        assert_eq!(banded.matches("<polygon").count(), 1, "{banded}");
        // An empty band draws nothing.
        assert_eq!(line_svg_bands("loss", "t", "l", &s, &[vec![]]).unwrap().matches("<polygon").count(), 0);
    }

    #[test]
    fn sixteen_curves_draw_sixteen_legend_entries_beside_the_plot() {
        let series: Vec<Series> = (0..16)
            .map(|i| Series { name: format!("m{i}"), points: vec![(0.0, 7.0), (50000.0, 6.0 - i as f64 * 0.01)] })
            .collect();
        let svg = line_svg("loss", "tokens", "loss", &series).unwrap();
        for i in 0..16 {
            assert!(svg.contains(&format!(">\nm{i}\n</text>")), "m{i} not in the legend");
        }
        // Plain ticks: 50k, not 50000.0.
        assert!(svg.contains(">\n50k\n</text>") && !svg.contains("50000"), "ticks");
    }
}
