//! A tiny SVG writer for the figures of hirt (`docs/figures/`, the simulator's experiments, the
//! lab's latency CDFs): line charts, empirical CDFs and CCDFs on a log scale, stacked in panels
//! that share a legend. Hand-written (a couple of hundred lines) rather than a plotting crate so
//! the figures build with no native dependency (plotters' text rendering needs fontconfig and
//! FreeType) and byte-identical output.

use std::fmt::Write;

/// One curve.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points, drawn in order.
    pub points: Vec<(f64, f64)>,
}

/// One chart of a figure.
#[derive(Clone, Debug)]
pub struct Panel {
    /// Title above the chart.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The curves.
    pub series: Vec<Series>,
    /// Draw as steps (CDFs) instead of straight segments with markers.
    pub steps: bool,
    /// A log10 Y axis starting at this value (smaller values are drawn on it), e.g. `1e-4` for
    /// a CCDF's tail; `None`: a linear axis.
    pub y_log_min: Option<f64>,
}

const COLORS: [&str; 8] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Empirical CDF of `values` as step points (x sorted, y in (0, 1]).
pub fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.iter()
        .enumerate()
        .map(|(i, &x)| (x, (i + 1) as f64 / n))
        .collect()
}

/// Empirical complementary CDF (`1 - CDF`) of `values` as step points; the last point is 0
/// (drawn at the axis' minimum on a log scale).
pub fn ccdf(values: &[f64]) -> Vec<(f64, f64)> {
    cdf(values)
        .into_iter()
        .map(|(x, y)| (x, (1.0 - y).max(0.0)))
        .collect()
}

fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 6.0)
        .unwrap_or(mag * 10.0);
    let (i0, i1) = ((lo / step).ceil() as i64, (hi / step + 1e-9).floor() as i64);
    (i0..=i1).map(|i| i as f64 * step).collect()
}

fn fmt_tick(v: f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Renders the panels stacked vertically into one SVG document.
pub fn render(title: &str, panels: &[Panel]) -> String {
    let (w, ph) = (760.0, 300.0);
    let (ml, mr, mt, mb) = (70.0, 190.0, 40.0, 50.0);
    let top = 30.0;
    let h = top + ph * panels.len() as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="15">{}</text>"#,
        w / 2.0,
        esc(title)
    );
    for (pi, p) in panels.iter().enumerate() {
        let y0 = top + ph * pi as f64;
        let (px, py, pw, pph) = (ml, y0 + mt, w - ml - mr, ph - mt - mb);
        // On a log axis, Y is placed by its decimal logarithm.
        let ty = |y: f64| match p.y_log_min {
            Some(min) => y.max(min).log10(),
            None => y,
        };
        let pts = p.series.iter().flat_map(|s| s.points.iter());
        let (mut xlo, mut xhi, mut ylo, mut yhi) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for &(x, y) in pts {
            let y = ty(y);
            xlo = xlo.min(x);
            xhi = xhi.max(x);
            ylo = ylo.min(y);
            yhi = yhi.max(y);
        }
        if xlo > xhi {
            (xlo, xhi, ylo, yhi) = (0.0, 1.0, 0.0, 1.0);
        }
        if (xhi - xlo).abs() < 1e-12 {
            xhi = xlo + 1.0;
        }
        if (yhi - ylo).abs() < 1e-12 {
            yhi = ylo + 0.01;
        }
        let pad = (yhi - ylo) * 0.05;
        let (ylo, yhi) = (ylo - pad, yhi + pad);
        let sx = |x: f64| px + (x - xlo) / (xhi - xlo) * pw;
        let sy = |y: f64| py + pph - (ty(y) - ylo) / (yhi - ylo) * pph;
        let y_ticks: Vec<(f64, String)> = match p.y_log_min {
            Some(_) => (ylo.ceil() as i32..=yhi.floor() as i32)
                .map(|e| (10f64.powi(e), format!("1e{e}")))
                .collect(),
            None => nice_ticks(ylo, yhi)
                .into_iter()
                .map(|t| (t, fmt_tick(t)))
                .collect(),
        };
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="13">{}</text>"#,
            px + pw / 2.0,
            y0 + 25.0,
            esc(&p.title)
        );
        for (t, label) in y_ticks {
            let y = sy(t);
            let _ = writeln!(
                s,
                r##"<line x1="{px}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"##,
                px + pw,
                px - 5.0,
                y + 4.0,
            );
        }
        for t in nice_ticks(xlo, xhi) {
            let x = sx(t);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{py}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                py + pph,
                py + pph + 16.0,
                fmt_tick(t)
            );
        }
        let _ = writeln!(
            s,
            r#"<rect x="{px}" y="{py}" width="{pw}" height="{pph}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            px + pw / 2.0,
            py + pph + 34.0,
            esc(&p.x_label)
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">{}</text>"#,
            px - 50.0,
            py + pph / 2.0,
            px - 50.0,
            py + pph / 2.0,
            esc(&p.y_label)
        );
        for (si, ser) in p.series.iter().enumerate() {
            let c = COLORS[si % COLORS.len()];
            let mut d = String::new();
            let mut prev: Option<(f64, f64)> = None;
            for &(x, y) in &ser.points {
                let (xx, yy) = (sx(x), sy(y));
                match prev {
                    None => {
                        let _ = write!(d, "M{xx:.1},{yy:.1}");
                    }
                    Some((_, py_)) if p.steps => {
                        let _ = write!(d, " L{xx:.1},{py_:.1} L{xx:.1},{yy:.1}");
                    }
                    Some(_) => {
                        let _ = write!(d, " L{xx:.1},{yy:.1}");
                    }
                }
                prev = Some((xx, yy));
            }
            let dash = if si >= COLORS.len() {
                r#" stroke-dasharray="4 3""#
            } else {
                ""
            };
            let _ = writeln!(
                s,
                r#"<path d="{d}" fill="none" stroke="{c}" stroke-width="1.8"{dash}/>"#
            );
            if !p.steps {
                for &(x, y) in &ser.points {
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{c}"/>"#,
                        sx(x),
                        sy(y)
                    );
                }
            }
            let ly = py + 12.0 + 18.0 * si as f64;
            let lx = px + pw + 12.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="2.5"{dash}/><text x="{}" y="{}">{}</text>"#,
                lx + 20.0,
                lx + 26.0,
                ly + 4.0,
                esc(&ser.name)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_steps() {
        assert_eq!(
            cdf(&[3.0, 1.0, 2.0, 4.0]),
            vec![(1.0, 0.25), (2.0, 0.5), (3.0, 0.75), (4.0, 1.0)]
        );
    }

    #[test]
    fn renders_valid_looking_svg() {
        let p = Panel {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y<".into(),
            series: vec![Series {
                name: "a&b".into(),
                points: vec![(0.0, 1.0), (1.0, 2.0)],
            }],
            steps: false,
            y_log_min: None,
        };
        let svg = render("fig", &[p.clone(), Panel { steps: true, ..p }]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("a&amp;b") && svg.contains("y&lt;"));
        assert_eq!(svg.matches("<path").count(), 2);
        let t = nice_ticks(0.0, 1.0);
        assert_eq!((t.len(), t[0], t[5]), (6, 0.0, 1.0));
    }

    /// A CCDF on a log axis: decades as ticks, zero drawn at the axis' floor, the same output
    /// for the same input.
    #[test]
    fn ccdf_on_a_log_axis() {
        let values: Vec<f64> = (1..=1000).map(f64::from).collect();
        let points = ccdf(&values);
        assert_eq!(points[0], (1.0, 0.999));
        assert_eq!(points[999], (1000.0, 0.0));
        let p = Panel {
            title: "tail".into(),
            x_label: "ms".into(),
            y_label: "1 - CDF".into(),
            series: vec![Series {
                name: "a".into(),
                points,
            }],
            steps: true,
            y_log_min: Some(1e-4),
        };
        let svg = render("fig", std::slice::from_ref(&p));
        for decade in ["1e-4", "1e-3", "1e-2", "1e-1", "1e0"] {
            assert!(
                svg.contains(&format!(">{decade}</text>")),
                "{decade}: {svg}"
            );
        }
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        assert_eq!(svg, render("fig", &[p]));
    }
}
