//! Line plots (SVG) of training curves, with plotters.

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::Path;

/// One named curve.
pub struct Series {
    /// Legend label.
    pub name: String,
    /// (x, y) points in order.
    pub points: Vec<(f64, f64)>,
}

/// Plot `series` as lines into an SVG file at `path`.
pub fn line_plot(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Result<()> {
    let svg = line_svg(title, x_label, y_label, series).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    // Written like every other output: a reader never sees half a plot.
    crate::util::atomic_write(path, svg.as_bytes())
}

/// Plot `series` as lines; the SVG document as text.
pub fn line_svg(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Result<String> {
    let pts = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        if x.is_finite() && y.is_finite() {
            (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
        }
    }
    if x0 > x1 {
        return Err(anyhow!("nothing to plot ({title})"));
    }
    let pad = ((y1 - y0) * 0.05).max(1e-6);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 500)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1.max(x0 + 1e-9), (y0 - pad)..(y1 + pad))
            .map_err(|e| anyhow!("{e}"))?;
        chart.configure_mesh().x_desc(x_label).y_desc(y_label).draw().map_err(|e| anyhow!("{e}"))?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2)))
                .map_err(|e| anyhow!("{e}"))?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
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
}
