//! Hand-written SVG line and bar charts for reports (learning curves, utility
//! over time, latency distributions, scores per method). No plotting dependency: a chart is a few hundred bytes
//! of markup, and the output is deterministic for a given input.

use std::fmt::Write as _;

/// One line (with markers) on a chart.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Optional ± band drawn around the line (same length as `points`).
    pub band: Option<Vec<f64>>,
    pub dashed: bool,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            band: None,
            dashed: false,
        }
    }
}

/// A horizontal reference line (e.g. the R² = 0.95 target).
#[derive(Debug, Clone)]
pub struct Reference {
    pub label: String,
    pub y: f64,
}

#[derive(Debug, Clone, Default)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub references: Vec<Reference>,
    /// Plot x on a log₁₀ axis (all x must be positive).
    pub log_x: bool,
    /// Fixed y range; computed from the data when `None`.
    pub y_range: Option<(f64, f64)>,
}

const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];
const W: f64 = 720.0;
const H: f64 = 440.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 180.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 55.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Up to ~6 round tick values covering [lo, hi].
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(f64::EPSILON);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 6.0)
        .unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-9 {
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    out
}

/// 1-2-5 ticks of a log₁₀ axis spanning [lo, hi] (in log units); falls back to
/// every decade when that would be too many.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (first, last) = (lo.floor() as i32, hi.ceil() as i32);
    let in_range = |v: f64| v.log10() >= lo - 1e-9 && v.log10() <= hi + 1e-9;
    let with = |mantissas: &[f64]| -> Vec<f64> {
        (first..=last)
            .flat_map(|e| mantissas.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|&v| in_range(v))
            .collect()
    };
    let fine = with(&[1.0, 2.0, 5.0]);
    if fine.len() <= 8 { fine } else { with(&[1.0]) }
}

fn fmt_tick(v: f64) -> String {
    if v.abs() >= 1000.0 || (v.fract().abs() < 1e-9 && v.abs() >= 1.0) {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

impl LineChart {
    pub fn render(&self) -> String {
        let xs = |x: f64| {
            if self.log_x {
                x.max(f64::MIN_POSITIVE).log10()
            } else {
                x
            }
        };
        let finite = |v: &f64| v.is_finite();
        let all_x: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| xs(p.0)))
            .filter(finite)
            .collect();
        let all_y: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| {
                s.points.iter().enumerate().flat_map(move |(i, p)| {
                    let b = s
                        .band
                        .as_ref()
                        .and_then(|b| b.get(i))
                        .copied()
                        .unwrap_or(0.0);
                    [p.1 - b, p.1 + b]
                })
            })
            .chain(self.references.iter().map(|r| r.y))
            .filter(finite)
            .collect();
        let (x0, x1) = min_max(&all_x).unwrap_or((0.0, 1.0));
        let (y0, y1) = self
            .y_range
            .or_else(|| min_max(&all_y).map(|(a, b)| pad(a, b)))
            .unwrap_or((0.0, 1.0));
        let (x0, x1) = if x1 > x0 {
            (x0, x1)
        } else {
            (x0 - 0.5, x0 + 0.5)
        };
        let pw = W - LEFT - RIGHT;
        let ph = H - TOP - BOTTOM;
        let px = |x: f64| LEFT + (xs(x) - x0) / (x1 - x0) * pw;
        let py = |y: f64| TOP + (1.0 - (y.clamp(y0, y1) - y0) / (y1 - y0)) * ph;

        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
            LEFT + pw / 2.0,
            escape(&self.title)
        );
        // Axes and grid.
        for t in ticks(y0, y1) {
            let y = py(t);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e6e6e6"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + pw,
                LEFT - 6.0,
                y + 4.0,
                fmt_tick(t)
            );
        }
        let x_ticks: Vec<f64> = if self.log_x {
            log_ticks(x0, x1)
        } else {
            ticks(x0, x1)
        };
        for t in x_ticks {
            let x = px(t);
            let _ = writeln!(
                svg,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="black"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                TOP + ph,
                TOP + ph + 5.0,
                TOP + ph + 19.0,
                fmt_tick(t)
            );
        }
        let _ = writeln!(
            svg,
            r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            H - 12.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            svg,
            r#"<text transform="translate(18,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + ph / 2.0,
            escape(&self.y_label)
        );
        for r in &self.references {
            let y = py(r.y);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#555" stroke-dasharray="2,3"/><text x="{:.1}" y="{:.1}" fill="#555">{}</text>"##,
                LEFT + pw,
                LEFT + pw - 4.0,
                y - 4.0,
                escape(&r.label)
            );
        }
        // Series: band, line, markers, legend entry.
        for (k, s) in self.series.iter().enumerate() {
            let color = PALETTE[k % PALETTE.len()];
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .collect();
            if let Some(band) = &s.band {
                let upper: Vec<String> = s
                    .points
                    .iter()
                    .zip(band)
                    .map(|(p, b)| format!("{:.1},{:.1}", px(p.0), py(p.1 + b)))
                    .collect();
                let lower: Vec<String> = s
                    .points
                    .iter()
                    .zip(band)
                    .rev()
                    .map(|(p, b)| format!("{:.1},{:.1}", px(p.0), py(p.1 - b)))
                    .collect();
                let _ = writeln!(
                    svg,
                    r#"<polygon points="{} {}" fill="{color}" fill-opacity="0.15" stroke="none"/>"#,
                    upper.join(" "),
                    lower.join(" ")
                );
            }
            let path: Vec<String> = pts
                .iter()
                .map(|p| format!("{:.1},{:.1}", px(p.0), py(p.1)))
                .collect();
            let dash = if s.dashed {
                r#" stroke-dasharray="6,4""#
            } else {
                ""
            };
            let _ = writeln!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="1.8"{dash}/>"#,
                path.join(" ")
            );
            if pts.len() <= 40 {
                for p in &pts {
                    let _ = writeln!(
                        svg,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="2.8" fill="{color}"/>"#,
                        px(p.0),
                        py(p.1)
                    );
                }
            }
            let ly = TOP + 10.0 + 18.0 * k as f64;
            let lx = LEFT + pw + 12.0;
            let _ = writeln!(
                svg,
                r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
                lx + 22.0,
                lx + 28.0,
                ly + 4.0,
                escape(&s.name)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// One group of bars (e.g. one target), one value per bar kind (`None`: no bar).
#[derive(Debug, Clone)]
pub struct BarGroup {
    pub label: String,
    pub values: Vec<Option<f64>>,
}

/// Grouped vertical bars: one colour per bar kind, one cluster per group. The
/// y axis starts at 0 unless a value is negative (then at that value).
#[derive(Debug, Clone, Default)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    /// Bar kinds, in legend order (parallel to each group's values).
    pub bars: Vec<String>,
    pub groups: Vec<BarGroup>,
}

impl BarChart {
    pub fn render(&self) -> String {
        let values: Vec<f64> = self
            .groups
            .iter()
            .flat_map(|g| g.values.iter().flatten().copied())
            .filter(|v| v.is_finite())
            .collect();
        let (lo, hi) = min_max(&values).unwrap_or((0.0, 1.0));
        let (y0, y1) = (lo.min(0.0), if hi > lo.min(0.0) { hi } else { 1.0 });
        let (y0, y1) = (y0, y1 + (y1 - y0) * 0.05);
        let pw = W - LEFT - RIGHT;
        let ph = H - TOP - BOTTOM;
        let py = |y: f64| TOP + (1.0 - (y.clamp(y0, y1) - y0) / (y1 - y0)) * ph;
        let slot = pw / self.groups.len().max(1) as f64;
        let bar = slot * 0.8 / self.bars.len().max(1) as f64;

        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
            LEFT + pw / 2.0,
            escape(&self.title)
        );
        for t in ticks(y0, y1) {
            let y = py(t);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e6e6e6"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + pw,
                LEFT - 6.0,
                y + 4.0,
                fmt_tick(t)
            );
        }
        for (g, group) in self.groups.iter().enumerate() {
            let x0 = LEFT + g as f64 * slot + slot * 0.1;
            for (b, value) in group.values.iter().enumerate() {
                let Some(v) = value.filter(|v| v.is_finite()) else {
                    continue;
                };
                let (top, base) = (py(v.max(0.0)), py(v.min(0.0)));
                let _ = writeln!(
                    svg,
                    r#"<rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {v:.4}</title></rect>"#,
                    x0 + b as f64 * bar,
                    bar * 0.9,
                    (base - top).max(0.5),
                    PALETTE[b % PALETTE.len()],
                    escape(&self.bars[b.min(self.bars.len().saturating_sub(1))])
                );
            }
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                LEFT + (g as f64 + 0.5) * slot,
                TOP + ph + 19.0,
                escape(&group.label)
            );
        }
        let _ = writeln!(
            svg,
            r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<text transform="translate(18,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + ph / 2.0,
            escape(&self.y_label)
        );
        for (b, name) in self.bars.iter().enumerate() {
            let y = TOP + 10.0 + b as f64 * 20.0;
            let _ = writeln!(
                svg,
                r#"<rect x="{:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                W - RIGHT + 12.0,
                y - 10.0,
                PALETTE[b % PALETTE.len()],
                W - RIGHT + 30.0,
                y,
                escape(name)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

fn min_max(v: &[f64]) -> Option<(f64, f64)> {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
}

fn pad(lo: f64, hi: f64) -> (f64, f64) {
    if hi > lo {
        let m = (hi - lo) * 0.05;
        (lo - m, hi + m)
    } else {
        (lo - 0.5, hi + 0.5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_charts_draw_one_bar_per_value() {
        let chart = BarChart {
            title: "R² <by> method".into(),
            y_label: "R²".into(),
            bars: vec!["a".into(), "b".into()],
            groups: vec![
                BarGroup {
                    label: "absolute".into(),
                    values: vec![Some(0.9), Some(-0.2)],
                },
                BarGroup {
                    label: "log".into(),
                    values: vec![Some(0.95), None],
                },
            ],
        };
        let svg = chart.render();
        assert_eq!(svg.matches("<title>").count(), 3, "{svg}");
        assert!(svg.contains("R² &lt;by&gt; method"));
        assert!(svg.ends_with("</svg>\n"));
    }

    #[test]
    fn renders_well_formed_svg_with_every_series_and_escaped_text() {
        let chart = LineChart {
            title: "R² <vs> n".into(),
            x_label: "n".into(),
            y_label: "R²".into(),
            series: vec![
                Series::new("N=2", vec![(10.0, 0.5), (20.0, 0.9), (40.0, 0.96)]),
                Series {
                    band: Some(vec![0.01, 0.02]),
                    dashed: true,
                    ..Series::new("N=3 & more", vec![(10.0, 0.4), (80.0, 0.95)])
                },
            ],
            references: vec![Reference {
                label: "target".into(),
                y: 0.95,
            }],
            log_x: true,
            y_range: None,
        };
        let svg = chart.render();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("R² &lt;vs&gt; n"));
        assert!(svg.contains("N=3 &amp; more"));
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn log_ticks_are_one_two_five() {
        assert_eq!(
            log_ticks(0.0, 2.0),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
        assert_eq!(
            log_ticks(-3.0, 3.0).len(),
            7,
            "decades only when 1-2-5 is crowded"
        );
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        let t = ticks(0.0, 1.0);
        assert_eq!(t.first().copied(), Some(0.0));
        assert!(t.last().copied().unwrap_or(0.0) >= 1.0 - 1e-9);
        assert!(t.len() <= 7);
    }
}
