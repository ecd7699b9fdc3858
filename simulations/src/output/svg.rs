//! A line chart as a small, self-contained SVG: axes with round ticks, one polyline per
//! line (bounds and predictions dashed), and a legend.

use crate::scenario::{Chart, LineStyle, Series};
use std::fmt::Write;

const WIDTH: u64 = 820;
const HEIGHT: u64 = 440;
const LEFT: u64 = 80;
const RIGHT: u64 = 20;
const TOP: u64 = 40;
const BOTTOM: u64 = 60;
const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#7f7f7f",
];

/// Draws `chart` from `series` (x from the first column).
pub fn plot(chart: &Chart, series: &Series) -> String {
    let xs: Vec<u64> = series.rows.iter().map(|r| r[0]).collect();
    let lines: Vec<(usize, &crate::scenario::ChartLine)> = chart
        .lines
        .iter()
        .filter_map(|l| series.column(&l.column).map(|c| (c, l)))
        .collect();
    let y_max = lines
        .iter()
        .flat_map(|(c, _)| series.rows.iter().map(move |r| r[*c]))
        .max()
        .unwrap_or(0);
    let y_top = nice_ceiling(y_max.max(1) + y_max / 10);
    let x_min = xs.first().copied().unwrap_or(0);
    let x_max = xs.last().copied().unwrap_or(1).max(x_min + 1);
    let plot_w = (WIDTH - LEFT - RIGHT) as f64;
    let plot_h = (HEIGHT - TOP - BOTTOM) as f64;
    let px = |x: u64| LEFT as f64 + (x - x_min) as f64 / (x_max - x_min) as f64 * plot_w;
    let py = |y: u64| TOP as f64 + plot_h - y as f64 / y_top as f64 * plot_h;
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(w, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        w,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        WIDTH / 2,
        escape(&chart.title)
    );
    axes(w, chart, &px, &py, (x_min, x_max), y_top);
    for (i, (col, line)) in lines.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let dash = match line.style {
            LineStyle::Solid => "",
            LineStyle::Dashed => r#" stroke-dasharray="6 4""#,
        };
        let points: Vec<String> = series
            .rows
            .iter()
            .map(|r| format!("{:.1},{:.1}", px(r[0]), py(r[*col])))
            .collect();
        let _ = writeln!(
            w,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.8"{dash} points="{}"/>"#,
            points.join(" ")
        );
        let ly = TOP + 14 + 16 * i as u64;
        let lx = LEFT + 12;
        let _ = writeln!(
            w,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            lx + 24,
            lx + 30,
            ly + 4,
            escape(&line.label)
        );
    }
    let _ = writeln!(w, "</svg>");
    out
}

fn axes(
    w: &mut String,
    chart: &Chart,
    px: &dyn Fn(u64) -> f64,
    py: &dyn Fn(u64) -> f64,
    (x_min, x_max): (u64, u64),
    y_top: u64,
) {
    let (x0, y0) = (LEFT, HEIGHT - BOTTOM);
    let _ = writeln!(
        w,
        r##"<path d="M{x0},{TOP} V{y0} H{}" fill="none" stroke="#333"/>"##,
        WIDTH - RIGHT
    );
    for i in 0..=5u64 {
        let y = y_top * i / 5;
        let yy = py(y);
        let _ = writeln!(
            w,
            r##"<line x1="{x0}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{y}</text>"##,
            WIDTH - RIGHT,
            x0 - 6,
            yy + 4.0
        );
    }
    let step = nice_ceiling((x_max - x_min).div_ceil(8).max(1));
    let mut x = x_min.div_ceil(step) * step;
    while x <= x_max {
        let xx = px(x);
        let _ = writeln!(
            w,
            r##"<line x1="{xx:.1}" y1="{y0}" x2="{xx:.1}" y2="{}" stroke="#333"/><text x="{xx:.1}" y="{}" text-anchor="middle">{x}</text>"##,
            y0 + 5,
            y0 + 18
        );
        x += step;
    }
    let _ = writeln!(
        w,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        LEFT + (WIDTH - LEFT - RIGHT) / 2,
        HEIGHT - 18,
        escape(&chart.x_label)
    );
    let _ = writeln!(
        w,
        r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">{}</text>"#,
        TOP + (HEIGHT - TOP - BOTTOM) / 2,
        TOP + (HEIGHT - TOP - BOTTOM) / 2,
        escape(&chart.y_label)
    );
}

/// The smallest of 1, 2, 5 × 10ⁿ at or above `v`.
fn nice_ceiling(v: u64) -> u64 {
    let mut base = 1u64;
    loop {
        for m in [1, 2, 5] {
            if base.saturating_mul(m) >= v {
                return base * m;
            }
        }
        base = base.saturating_mul(10);
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_one_two_five() {
        assert_eq!(nice_ceiling(1), 1);
        assert_eq!(nice_ceiling(3), 5);
        assert_eq!(nice_ceiling(1_100), 2_000);
        assert_eq!(nice_ceiling(5_000), 5_000);
    }

    #[test]
    fn draws_one_polyline_per_known_column() {
        let mut s = Series::new(&["t_s", "a", "b"]);
        s.push(vec![0, 1, 2]);
        s.push(vec![1, 3, 4]);
        let chart = Chart::new("t <x>", "x", "y")
            .line("a", "a", LineStyle::Solid)
            .line("b", "b", LineStyle::Dashed)
            .line("missing", "m", LineStyle::Solid);
        let svg = plot(&chart, &s);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("t &lt;x&gt;"));
        assert!(svg.contains("stroke-dasharray"));
    }
}
