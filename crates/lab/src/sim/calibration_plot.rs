//! An SVG bar chart of a calibration: reproduced slowdowns (mean over seeds, with
//! the seeds' range as whiskers) against the published figure and its tolerance band.

use super::calibration::{
    Calibration, PUBLISHED_AWQ_LLM_LOSS_PCT, PUBLISHED_YOLO_M_LOSS_PCT, PUBLISHED_YOLO_N_LOSS_PCT,
    TOLERANCE_PP,
};
use std::fmt::Write;

/// (label, published band low–high in %, measured values in % over the seeds)
type Bar = (&'static str, (f64, f64), Vec<f64>);

fn bars(runs: &[Calibration]) -> Vec<Bar> {
    let collect = |f: &dyn Fn(&Calibration) -> Option<f64>| runs.iter().filter_map(f).collect();
    let band = |target: f64| (target - TOLERANCE_PP, target + TOLERANCE_PP);
    vec![
        (
            "AWQ LLM tokens/s",
            band(PUBLISHED_AWQ_LLM_LOSS_PCT),
            collect(&|c| c.llm.loss_pct("awq")),
        ),
        (
            "YOLO11n FPS",
            band(PUBLISHED_YOLO_N_LOSS_PCT),
            collect(&|c| c.vision.loss_pct("n")),
        ),
        (
            "YOLO11s FPS",
            (PUBLISHED_YOLO_N_LOSS_PCT, PUBLISHED_YOLO_M_LOSS_PCT),
            collect(&|c| c.vision.loss_pct("s")),
        ),
        (
            "YOLO11m FPS",
            band(PUBLISHED_YOLO_M_LOSS_PCT),
            collect(&|c| c.vision.loss_pct("m")),
        ),
    ]
}

/// The chart as a standalone SVG document.
pub fn svg(runs: &[Calibration]) -> String {
    let bars = bars(runs);
    let (width, height) = (640.0, 360.0);
    let (left, right, top, bottom) = (60.0, 20.0, 50.0, 60.0);
    let plot_h = height - top - bottom;
    let y_max = 30.0_f64;
    let y = |pct: f64| top + plot_h * (1.0 - pct.clamp(0.0, y_max) / y_max);
    let slot = (width - left - right) / bars.len() as f64;
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">Slowdown under co-execution on paper-n2: simulator vs published</text>"#,
        width / 2.0
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="38" text-anchor="middle" fill="#555">bars: mean over {} seed(s), whiskers: min–max; shaded: published ± tolerance (s: between n and m)</text>"##,
        width / 2.0,
        runs.len()
    );
    for tick in (0..=30).step_by(5) {
        let ty = y(f64::from(tick));
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{ty:.1}" y2="{ty:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{tick} %</text>"##,
            width - right,
            left - 6.0,
            ty + 4.0
        );
    }
    for (k, (label, (lo, hi), values)) in bars.iter().enumerate() {
        let cx = left + slot * (k as f64 + 0.5);
        let half = slot * 0.3;
        let _ = writeln!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#f4c430" fill-opacity="0.35"/>"##,
            cx - half - 8.0,
            y(*hi),
            2.0 * (half + 8.0),
            y(*lo) - y(*hi)
        );
        if !values.is_empty() {
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            let min = values.iter().copied().fold(f64::INFINITY, f64::min);
            let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let _ = writeln!(
                s,
                r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#3b6ea8"/>"##,
                cx - half / 2.0,
                y(mean),
                half,
                y(0.0) - y(mean)
            );
            let _ = writeln!(
                s,
                r##"<line x1="{cx:.1}" x2="{cx:.1}" y1="{:.1}" y2="{:.1}" stroke="black"/><text x="{cx:.1}" y="{:.1}" text-anchor="middle">{mean:.1} %</text>"##,
                y(min),
                y(max),
                y(max) - 6.0
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#,
            height - bottom + 18.0
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">measured on the simulator (simulated 24 GB card)</text>"##,
        width / 2.0,
        height - 14.0
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::calibration::{REPEATS, calibrate};

    #[test]
    fn the_chart_has_a_bar_per_figure_and_says_it_is_simulated() {
        let runs = [calibrate(3, REPEATS).expect("calibration")];
        let svg = svg(&runs);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches(r##"fill="#3b6ea8""##).count(), 4);
        assert!(svg.contains("on the simulator"));
    }
}
