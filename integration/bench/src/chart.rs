//! SVG charts for the results folder: latency percentile curves per system (log scale),
//! written by hand so the benchmark needs no plotting stack.

use std::fmt::Write as _;

/// Percentiles every curve is drawn through.
pub const PERCENTILES: [f64; 8] = [0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99, 0.999];

const COLORS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
];

/// One curve: a label and its latencies (µs) at [`PERCENTILES`].
pub struct Curve {
    pub label: String,
    pub us: Vec<u64>,
}

/// A line chart of latency by percentile, y on a log scale from 10 µs to 10 s.
pub fn percentiles_svg(title: &str, curves: &[Curve]) -> String {
    let labels: Vec<String> = PERCENTILES
        .iter()
        .map(|p| format!("p{}", p * 100.0))
        .collect();
    lines_svg(title, &labels, curves, None)
}

/// A line chart of latencies (µs) over labelled x positions, y on a log scale from 10 µs
/// to 10 s, with an optional labelled horizontal line (a budget).
pub fn lines_svg(
    title: &str,
    x_labels: &[String],
    curves: &[Curve],
    rule: Option<(u64, &str)>,
) -> String {
    let (w, h, left, right, top, bottom) = (760.0, 420.0, 70.0, 250.0, 40.0, 50.0);
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let (lo, hi) = (1.0f64, 7.0f64); // log10 µs: 10 µs .. 10 s
    let x = |i: usize| left + plot_w * i as f64 / (x_labels.len().max(2) - 1) as f64;
    let y = |us: u64| {
        let l = (us.max(1) as f64).log10().clamp(lo, hi);
        top + plot_h * (hi - l) / (hi - lo)
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="22" font-size="15">{title}</text>"#
    );
    for (e, label) in [
        (1, "10 µs"),
        (2, "100 µs"),
        (3, "1 ms"),
        (4, "10 ms"),
        (5, "100 ms"),
        (6, "1 s"),
        (7, "10 s"),
    ] {
        let yy = top + plot_h * (hi - e as f64) / (hi - lo);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{yy}" y2="{yy}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{label}</text>"##,
            left + plot_w,
            left - 6.0,
            yy + 4.0
        );
    }
    for (i, label) in x_labels.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{label}</text>"#,
            x(i),
            top + plot_h + 18.0
        );
    }
    if let Some((us, label)) = rule {
        let yy = y(us);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{yy}" y2="{yy}" stroke="#d62728" stroke-dasharray="6 4"/><text x="{}" y="{}" fill="#d62728">{label}</text>"##,
            left + plot_w,
            left + 4.0,
            yy - 4.0
        );
    }
    for (n, c) in curves.iter().enumerate() {
        let color = COLORS[n % COLORS.len()];
        let points: Vec<String> =
            c.us.iter()
                .enumerate()
                .map(|(i, us)| format!("{:.1},{:.1}", x(i), y(*us)))
                .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        let ly = top + 16.0 * n as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{}" y="{}" width="12" height="3" fill="{color}"/><text x="{}" y="{}">{}</text>"#,
            left + plot_w + 12.0,
            ly + 4.0,
            left + plot_w + 30.0,
            ly + 9.0,
            c.label
        );
    }
    s.push_str("</svg>\n");
    s
}
