//! Hand-written SVG charts for the experiments' results: a line chart, a
//! grouped bar chart (each bar labelled with its value), and [`stack`] to
//! put several charts one above the other in one figure.
//!
//! Output is a self-contained SVG 1.1 document (no scripts, no external
//! resources); every text is XML-escaped; non-finite values are skipped, so
//! a result with a missing point still renders.
//!
//! So that a reader does not misread them: each line of a chart has its
//! own dash pattern as well as its colour (lines that lie on top of each
//! other still show each one), short series mark their points, a series
//! of separate values can be drawn as points without a line
//! ([`LineChart::to_svg_with`]), and a bar chart whose values span decades
//! can take a logarithmic axis ([`BarChart::to_svg_log`]), a line chart a
//! logarithmic x axis ([`LineChart::x_log`]).
//!
//! Nothing runs off the canvas: legend labels and the small print under a
//! plot are wrapped at word boundaries (a chart grows to hold the lines of
//! its note), at widths estimated from the font size.

use std::fmt::Write;

const W: f64 = 760.0;
const H: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 180.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
/// One dash pattern per line, with its colour: where lines coincide, the
/// gaps of one show the others.
const DASHES: [&str; 6] = ["none", "8 4", "2 3", "10 3 2 3", "5 5", "1 5"];
/// A series with at most this many points has each point marked.
const MARK_POINTS_UP_TO: usize = 40;
/// Characters of a legend label per line (12 px text in the legend's
/// column, about 6.6 px a character).
const LEGEND_CHARS: usize = 21;
/// Characters of the note per line (11 px text across the chart, about
/// 6 px a character).
const NOTE_CHARS: usize = 110;
/// The height of a line of the note.
const NOTE_LINE: f64 = 13.0;

/// One named line of a [`LineChart`].
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points `(x, y)`, in x order.
    pub points: Vec<(f64, f64)>,
}

/// A line chart with linear axes starting at zero.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LineChart {
    /// Title above the plot.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
    /// Top of the y axis; larger values are drawn at the top edge (so that
    /// one transient peak does not flatten the rest). `None`: the data's max.
    pub y_max: Option<f64>,
    /// Labelled vertical lines at these x values (events such as an MTU drop).
    pub markers: Vec<(f64, String)>,
    /// Small print under the plot (sources, caveats), wrapped to the
    /// chart's width.
    pub note: Option<String>,
    /// A logarithmic x axis (decades), for sizes from tens to tens of
    /// thousands; points at x ≤ 0 are left out.
    pub x_log: bool,
}

/// Grouped bars: one group per category, one bar per series in each, each
/// bar labelled with its value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BarChart {
    /// Title above the plot.
    pub title: String,
    /// Y axis label.
    pub y_label: String,
    /// Category labels along the x axis.
    pub categories: Vec<String>,
    /// `(series name, one value per category)`.
    pub series: Vec<(String, Vec<f64>)>,
    /// Small print under the plot (sources, caveats), wrapped to the
    /// chart's width.
    pub note: Option<String>,
}

/// Escapes the five XML special characters.
#[must_use]
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving about
/// `target` ticks up to `max`.
fn tick_step(max: f64, target: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / target;
    // The power of ten at or below `raw` (a loop: `powf`/`log10` were the
    // last reasons the binary loaded libm).
    let mut mag = 1.0f64;
    while mag * 10.0 <= raw {
        mag *= 10.0;
    }
    while mag > raw && mag / 10.0 > 0.0 {
        mag /= 10.0;
    }
    let n = raw / mag;
    let nice = if n <= 1.0 {
        1.0
    } else if n <= 2.0 {
        2.0
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn fmt_tick(v: f64) -> String {
    if v == 0.0 {
        "0".to_string()
    } else if v.abs() >= 1e6 || v.abs() < 1e-3 {
        format!("{v:.1e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    }
}

/// Value label for a bar: three significant digits, but never rounded up
/// to the next power of ten (99.97 % of paths is "99.97", not a "100.0"
/// beside an exact "100").
fn fmt_value(v: f64) -> String {
    let a = v.abs();
    let s = if a >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    // One more digit where rounding reached the next decade.
    let decimals = s.split('.').nth(1).map_or(0, str::len);
    match s.trim_start_matches('-') {
        "100.0" | "10.00" | "1.000" => format!("{v:.prec$}", prec = decimals + 1),
        _ => s,
    }
}

/// Splits `s` into lines of at most `max` characters at spaces (a word
/// longer than a line is cut).
fn wrap(s: &str, max: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in s.split_whitespace() {
        let mut word = word;
        while word.chars().count() > max {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            let cut = word.char_indices().nth(max).map_or(word.len(), |(i, _)| i);
            lines.push(word[..cut].to_string());
            word = &word[cut..];
        }
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > max {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// The note's lines.
fn note_lines(note: Option<&String>) -> Vec<String> {
    note.map(|n| wrap(n, NOTE_CHARS)).unwrap_or_default()
}

/// The chart's height: the plot, and room for a note of `lines` lines.
fn height(lines: usize) -> f64 {
    H + NOTE_LINE * lines.saturating_sub(1) as f64
}

fn note(out: &mut String, lines: &[String]) {
    let h = height(lines.len());
    for (k, line) in lines.iter().enumerate() {
        let y = h - 4.0 - NOTE_LINE * (lines.len() - 1 - k) as f64;
        let _ = write!(out, r##"<text x="{LEFT}" y="{y:.1}" font-size="11" fill="#444444">{}</text>"##, escape(line));
    }
}

/// The height a chart document declares.
fn declared_height(part: &str) -> f64 {
    part.split_once("height=\"").and_then(|(_, r)| r.split_once('"')).and_then(|(v, _)| v.parse().ok()).unwrap_or(H)
}

/// Stacks complete chart documents (as returned by `to_svg`) vertically
/// into one document, each keeping its own size.
#[must_use]
pub fn stack(parts: &[String]) -> String {
    let total: f64 = if parts.is_empty() { H } else { parts.iter().map(|p| declared_height(p)).sum() };
    let mut out = String::with_capacity(parts.iter().map(String::len).sum::<usize>() + 256);
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{total}" viewBox="0 0 {W} {total}" font-family="sans-serif" font-size="12">"#
    );
    let mut y = 0.0;
    for part in parts {
        // A nested <svg> establishes its own viewport at (0, y).
        let inner = part.trim_end().strip_prefix("<svg ").unwrap_or(part);
        let _ = write!(out, r#"<svg x="0" y="{y:.1}" {inner}"#);
        out.push('\n');
        y += declared_height(part);
    }
    out.push_str("</svg>\n");
    out
}

fn header(out: &mut String, title: &str, h: f64) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(out, r##"<rect width="{W}" height="{h}" fill="#ffffff"/>"##);
    let _ = write!(
        out,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        escape(title)
    );
}

/// Draws the y axis with ticks up to `y_max` (rounded up to a tick) and
/// returns the rounded maximum.
fn y_axis(out: &mut String, y_max: f64, label: &str) -> f64 {
    let step = tick_step(y_max, 5.0);
    let top = (y_max / step).ceil().max(1.0) * step;
    let plot_h = H - TOP - BOTTOM;
    let mut v = 0.0;
    while v <= top + step * 1e-9 {
        let y = H - BOTTOM - v / top * plot_h;
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#dddddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            fmt_tick(v)
        );
        v += step;
    }
    let _ = write!(
        out,
        r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        escape(label)
    );
    let _ = write!(
        out,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="#000000"/><line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#000000"/>"##,
        H - BOTTOM,
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM
    );
    top
}

/// Writes a legend label at (x, y), wrapped; returns where the next entry
/// goes.
fn legend_text(out: &mut String, x: f64, y: f64, name: &str) -> f64 {
    let lines = wrap(name, LEGEND_CHARS);
    for (k, line) in lines.iter().enumerate() {
        let _ = write!(out, r#"<text x="{x:.1}" y="{:.1}">{}</text>"#, y + 14.0 * k as f64, escape(line));
    }
    y + 14.0 * lines.len().max(1) as f64 + 4.0
}

fn legend(out: &mut String, names: &[&str]) {
    let mut y = TOP + 10.0;
    for (i, name) in names.iter().enumerate() {
        let x = W - RIGHT + 14.0;
        let _ = write!(
            out,
            r#"<rect x="{x}" y="{:.1}" width="12" height="12" fill="{}"/>"#,
            y - 10.0,
            COLORS[i % COLORS.len()]
        );
        y = legend_text(out, x + 18.0, y, name);
    }
}

/// The legend of a line chart: each entry a sample of its line (colour,
/// dash, marker) so that the entry matches what is drawn.
fn line_legend(out: &mut String, names: &[&str], points_only: &[bool]) {
    let mut y = TOP + 10.0;
    for (i, name) in names.iter().enumerate() {
        let x = W - RIGHT + 8.0;
        let color = COLORS[i % COLORS.len()];
        if points_only.get(i).copied().unwrap_or(false) {
            marker(out, i, x + 11.0, y - 4.0);
        } else {
            let _ = write!(
                out,
                r#"<line x1="{x}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="2" stroke-dasharray="{}"/>"#,
                y - 4.0,
                x + 22.0,
                y - 4.0,
                DASHES[i % DASHES.len()]
            );
        }
        y = legend_text(out, x + 26.0, y, name);
    }
}

/// A point marker of series `i`: a shape per series (circle, square,
/// diamond, triangle), filled with its colour.
fn marker(out: &mut String, i: usize, x: f64, y: f64) {
    let c = COLORS[i % COLORS.len()];
    let _ = match i % 4 {
        0 => write!(out, r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{c}"/>"#),
        1 => write!(out, r#"<rect x="{:.1}" y="{:.1}" width="7" height="7" fill="{c}"/>"#, x - 3.5, y - 3.5),
        2 => write!(
            out,
            r#"<polygon points="{x:.1},{:.1} {:.1},{y:.1} {x:.1},{:.1} {:.1},{y:.1}" fill="{c}"/>"#,
            y - 4.5,
            x + 4.5,
            y + 4.5,
            x - 4.5
        ),
        _ => write!(
            out,
            r#"<polygon points="{x:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{c}"/>"#,
            y - 4.5,
            x + 4.5,
            y + 3.5,
            x - 4.5,
            y + 3.5
        ),
    };
}

impl LineChart {
    /// Renders the chart as an SVG document.
    #[must_use]
    pub fn to_svg(&self) -> String {
        self.to_svg_with(&[])
    }

    /// Renders the chart, the series named in `points_only` as separate
    /// points without a line (values measured at those x only, such as a
    /// paper's figures, which a line would suggest exist in between).
    #[must_use]
    pub fn to_svg_with(&self, points_only: &[&str]) -> String {
        let finite = |p: &&(f64, f64)| p.0.is_finite() && p.1.is_finite() && (!self.x_log || p.0 > 0.0);
        let pts = || self.series.iter().flat_map(|s| s.points.iter().filter(finite));
        let marks = || self.markers.iter().filter(|m| m.0.is_finite() && (!self.x_log || m.0 > 0.0));
        let x_max = pts().map(|p| p.0).chain(marks().map(|m| m.0)).fold(0.0, f64::max);
        let x_min = pts().map(|p| p.0).chain(marks().map(|m| m.0)).fold(f64::INFINITY, f64::min);
        let y_max = self.y_max.unwrap_or_else(|| pts().map(|p| p.1).fold(0.0, f64::max));
        let notes = note_lines(self.note.as_ref());
        let mut out = String::with_capacity(4096);
        header(&mut out, &self.title, height(notes.len()));
        let y_top = y_axis(&mut out, y_max, &self.y_label);
        let plot_w = W - LEFT - RIGHT;
        let plot_h = H - TOP - BOTTOM;
        let x_axis = XAxis::new(self.x_log, x_min, x_max);
        for (v, label) in x_axis.ticks() {
            let x = LEFT + x_axis.at(v) * plot_w;
            let _ = write!(out, r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#, H - BOTTOM + 16.0);
        }
        let x_label = if self.x_log { format!("{} (log scale)", self.x_label) } else { self.x_label.clone() };
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            H - 18.0,
            escape(&x_label)
        );
        let only: Vec<bool> = self.series.iter().map(|s| points_only.contains(&s.name.as_str())).collect();
        for (i, s) in self.series.iter().enumerate() {
            let at = |&(x, y): &(f64, f64)| (LEFT + x_axis.at(x) * plot_w, H - BOTTOM - y.min(y_top) / y_top * plot_h);
            if !only[i] {
                let _ = write!(
                    out,
                    r#"<polyline fill="none" stroke-width="{}" stroke="{}" stroke-dasharray="{}" points=""#,
                    // Later lines a little thinner, so one on top of
                    // another leaves the first's edges visible.
                    2.2 - 0.3 * (i % 4) as f64,
                    COLORS[i % COLORS.len()],
                    DASHES[i % DASHES.len()]
                );
                for p in s.points.iter().filter(finite) {
                    let (px, py) = at(p);
                    let _ = write!(out, "{px:.1},{py:.1} ");
                }
                out.push_str(r#""/>"#);
            }
            let n = s.points.iter().filter(finite).count();
            if only[i] || n <= MARK_POINTS_UP_TO {
                for p in s.points.iter().filter(finite) {
                    let (px, py) = at(p);
                    marker(&mut out, i, px, py);
                }
            }
        }
        for (x, label) in marks() {
            let px = LEFT + x_axis.at(*x) * plot_w;
            let _ = write!(
                out,
                r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#555555" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" font-size="11" fill="#333333">{}</text>"##,
                H - BOTTOM,
                px + 4.0,
                TOP + 12.0,
                escape(label)
            );
        }
        let names: Vec<&str> = self.series.iter().map(|s| s.name.as_str()).collect();
        line_legend(&mut out, &names, &only);
        note(&mut out, &notes);
        out.push_str("</svg>\n");
        out
    }
}

/// A line chart's x axis: linear from zero, or logarithmic in decades.
struct XAxis {
    log: bool,
    /// Linear: the top (rounded up to a tick) and the tick step;
    /// logarithmic: the bottom and top decades.
    lo: f64,
    hi: f64,
    step: f64,
}

impl XAxis {
    fn new(log: bool, min: f64, max: f64) -> XAxis {
        if log && min.is_finite() && min > 0.0 {
            let mut lo = 1.0f64;
            while lo > min {
                lo /= 10.0;
            }
            while lo * 10.0 <= min {
                lo *= 10.0;
            }
            let mut hi = lo * 10.0;
            while hi < max {
                hi *= 10.0;
            }
            XAxis { log: true, lo, hi, step: 0.0 }
        } else {
            let step = tick_step(max, 6.0);
            XAxis { log: false, lo: 0.0, hi: (max / step).ceil().max(1.0) * step, step }
        }
    }

    /// Where `x` is, from 0 (left) to 1 (right).
    fn at(&self, x: f64) -> f64 {
        if self.log { log10(x / self.lo) / log10(self.hi / self.lo) } else { x / self.hi }
    }

    /// The ticks and their labels: every step, or 1, 2 and 5 of each decade.
    fn ticks(&self) -> Vec<(f64, String)> {
        let mut out = Vec::new();
        if self.log {
            let mut d = self.lo;
            while d <= self.hi * 1.000_001 {
                for m in [1.0, 2.0, 5.0] {
                    if d * m <= self.hi * 1.000_001 {
                        out.push((d * m, fmt_tick(d * m)));
                    }
                }
                d *= 10.0;
            }
        } else {
            let mut v = 0.0;
            while v <= self.hi + self.step * 1e-9 {
                out.push((v, fmt_tick(v)));
                v += self.step;
            }
        }
        out
    }
}

/// log10 of a positive, normal `x` without libm (the binary loads no
/// library but libc, `px probe`'s start-up cost: see `tick_step`): the
/// exponent from the bits, the mantissa's log2 by repeated squaring
/// (30 bits, far finer than a pixel).
fn log10(x: f64) -> f64 {
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    let (mut frac, mut bit) = (0.0, 0.5);
    for _ in 0..30 {
        m *= m;
        if m >= 2.0 {
            m /= 2.0;
            frac += bit;
        }
        bit /= 2.0;
    }
    (exp as f64 + frac) * std::f64::consts::LOG10_2
}

/// A logarithmic y axis: decades from the one at or below `lo` to the one
/// at or above `hi`, labelled; returns (bottom, top) decades as values.
fn log_y_axis(out: &mut String, lo: f64, hi: f64, label: &str) -> (f64, f64) {
    // The decade strictly below the smallest value, so that its bar has
    // a height (a value of exactly 1 on an axis from 1 would draw none).
    let mut bottom = 1.0f64;
    while bottom >= lo && bottom > 1e-12 {
        bottom /= 10.0;
    }
    while bottom * 10.0 < lo {
        bottom *= 10.0;
    }
    let mut top = bottom * 10.0;
    while top < hi {
        top *= 10.0;
    }
    let plot_h = H - TOP - BOTTOM;
    let span = log10(top / bottom);
    let mut v = bottom;
    while v <= top * 1.000_001 {
        let y = H - BOTTOM - log10(v / bottom) / span * plot_h;
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#dddddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            fmt_tick(v)
        );
        v *= 10.0;
    }
    let _ = write!(
        out,
        r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{} (log scale)</text>"#,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        escape(label)
    );
    let _ = write!(
        out,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="#000000"/><line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#000000"/>"##,
        H - BOTTOM,
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM
    );
    (bottom, top)
}

impl BarChart {
    /// Renders the chart as an SVG document.
    #[must_use]
    pub fn to_svg(&self) -> String {
        self.render(false)
    }

    /// Renders the chart with a logarithmic y axis, for values that span
    /// decades (0.17 s beside 27 s), which a linear axis would flatten to
    /// nothing. Values of 0 or less are left out.
    #[must_use]
    pub fn to_svg_log(&self) -> String {
        self.render(true)
    }

    fn render(&self, log: bool) -> String {
        let values = || self.series.iter().flat_map(|s| s.1.iter()).copied().filter(|v| v.is_finite());
        let y_max = values().fold(0.0, f64::max);
        let y_min = values().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
        let notes = note_lines(self.note.as_ref());
        let mut out = String::with_capacity(4096);
        header(&mut out, &self.title, height(notes.len()));
        let plot_h = H - TOP - BOTTOM;
        let (bottom, top) = if log && y_min.is_finite() {
            log_y_axis(&mut out, y_min, y_max, &self.y_label)
        } else {
            (0.0, y_axis(&mut out, y_max, &self.y_label))
        };
        let log = log && y_min.is_finite();
        // The bar's height for value v.
        let height = |v: f64| {
            if log {
                if v <= 0.0 { f64::NAN } else { log10(v / bottom) / log10(top / bottom) * plot_h }
            } else {
                v / top * plot_h
            }
        };
        let plot_w = W - LEFT - RIGHT;
        let groups = self.categories.len().max(1) as f64;
        let group_w = plot_w / groups;
        let bar_w = group_w * 0.8 / self.series.len().max(1) as f64;
        for (g, cat) in self.categories.iter().enumerate() {
            let gx = LEFT + g as f64 * group_w;
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                gx + group_w / 2.0,
                H - BOTTOM + 16.0,
                escape(cat)
            );
            for (i, (_, values)) in self.series.iter().enumerate() {
                let Some(&v) = values.get(g) else { continue };
                let h = height(v);
                if !v.is_finite() || !h.is_finite() {
                    continue;
                }
                let x = gx + group_w * 0.1 + i as f64 * bar_w;
                let _ = write!(
                    out,
                    r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{}</title></rect>"#,
                    H - BOTTOM - h,
                    bar_w * 0.95,
                    COLORS[i % COLORS.len()],
                    fmt_tick(v)
                );
                let _ = write!(
                    out,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{}</text>"#,
                    x + bar_w * 0.475,
                    H - BOTTOM - h - 3.0,
                    fmt_value(v)
                );
            }
        }
        let names: Vec<&str> = self.series.iter().map(|s| s.0.as_str()).collect();
        legend(&mut out, &names);
        note(&mut out, &notes);
        out.push_str("</svg>\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log axis shows a 0.17 beside a 27 as a bar of its own: its
    /// height is a visible share of the plot, not a sliver.
    #[test]
    fn a_log_axis_keeps_small_values_visible() {
        let c = BarChart {
            title: "t".into(),
            y_label: "seconds".into(),
            categories: vec!["a".into(), "b".into()],
            series: vec![("median".into(), vec![0.169, 0.437]), ("p99".into(), vec![0.585, 27.3])],
            note: None,
        };
        let heights = |svg: &str| -> Vec<f64> {
            // Bars carry a <title>; legend swatches do not.
            svg.split("<rect x=")
                .skip(1)
                .filter(|r| r.split("/>").next().is_some_and(|b| b.contains("<title>")))
                .filter_map(|r| r.split("height=\"").nth(1)?.split('"').next()?.parse().ok())
                .collect()
        };
        let lin = heights(&c.to_svg());
        let log = heights(&c.to_svg_log());
        let plot_h = H - TOP - BOTTOM;
        // Linear: the median of 0.169 s is under 1 % of the plot.
        assert!(lin.iter().any(|h| *h < 0.01 * plot_h), "{lin:?}");
        // Log: every bar at least a twentieth of it.
        assert!(log.iter().all(|h| *h > 0.05 * plot_h), "{log:?}");
        assert!(c.to_svg_log().contains("seconds (log scale)"));
        assert!(c.to_svg_log().contains(">0.1<") && c.to_svg_log().contains(">100<"));
    }

    /// Lines that coincide are told apart by their dash patterns, short
    /// series mark their points, and a points-only series draws no line.
    #[test]
    fn lines_have_their_own_dashes_markers_and_points_only() {
        let same = vec![(0.0, 1.0), (1.0, 2.0)];
        let c = LineChart {
            series: vec![
                Series { name: "a".into(), points: same.clone() },
                Series { name: "b".into(), points: same.clone() },
                Series { name: "paper".into(), points: vec![(1500.0, 1.0), (9000.0, 5.6)] },
            ],
            ..LineChart::default()
        };
        let svg = c.to_svg_with(&["paper"]);
        assert_eq!(svg.matches("<polyline").count(), 2, "paper drawn without a line");
        assert!(svg.contains(r#"stroke-dasharray="none""#) && svg.contains(r#"stroke-dasharray="8 4""#));
        // Markers: 2 + 2 points of the lines, 2 of the paper, 1 in the legend.
        let markers =
            svg.matches("<circle").count() + svg.matches("<polygon").count() + svg.matches("width=\"7\"").count();
        assert_eq!(markers, 7, "{svg}");
    }

    #[test]
    fn log10_without_libm() {
        for (x, want) in
            [(1.0, 0.0), (10.0, 1.0), (1000.0, 3.0), (0.1, -1.0), (2.0, std::f64::consts::LOG10_2), (270.0, 2.431_36)]
        {
            assert!((log10(x) - want).abs() < 1e-5, "log10({x}) = {}", log10(x));
        }
    }

    #[test]
    fn values_are_not_rounded_up_to_the_next_decade() {
        assert_eq!(fmt_value(100.0), "100");
        assert_eq!(fmt_value(99.97), "99.97");
        assert_eq!(fmt_value(84.61), "84.6");
        assert_eq!(fmt_value(9.996), "9.996");
        assert_eq!(fmt_value(0.585), "0.585");
        assert_eq!(fmt_value(0.9996), "0.9996");
    }

    #[test]
    fn nice_ticks() {
        assert_eq!(tick_step(10.0, 5.0), 2.0);
        assert_eq!(tick_step(0.9, 5.0), 0.2);
        assert_eq!(tick_step(7300.0, 6.0), 2000.0);
    }

    #[test]
    fn line_chart_is_well_formed_and_escaped() {
        let c = LineChart {
            title: "a < b & c".into(),
            x_label: "t (s)".into(),
            y_label: "cwnd".into(),
            series: vec![
                Series { name: "MSS 1448".into(), points: vec![(0.0, 1.0), (1.0, 2.0), (2.0, f64::NAN)] },
                Series { name: "MSS 8948".into(), points: vec![(0.0, 3.0), (2.0, 8.0)] },
            ],
            ..LineChart::default()
        };
        let svg = c.to_svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a &lt; b &amp; c"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(!svg.contains("NaN"));
        // Balanced quotes: every attribute closed.
        assert_eq!(svg.matches('"').count() % 2, 0);
    }

    #[test]
    fn bar_chart_draws_one_rect_per_value() {
        let c = BarChart {
            title: "t".into(),
            y_label: "s".into(),
            categories: vec!["Classic".into(), "Once 3V".into()],
            series: vec![("sim".into(), vec![11.0, 10.0]), ("blog".into(), vec![11.3, 10.5])],
            note: Some("blog: Table 1".into()),
        };
        let svg = c.to_svg();
        // 4 bars + 2 legend swatches + background.
        assert_eq!(svg.matches("<rect").count(), 7);
        // Each bar carries its value; the note is printed.
        for label in [">11<", ">10<", ">11.3<", ">10.5<", ">blog: Table 1<"] {
            assert!(svg.contains(label), "{label} missing");
        }
    }

    #[test]
    fn line_chart_clips_to_y_max_and_draws_markers() {
        let c = LineChart {
            title: "t".into(),
            series: vec![Series { name: "a".into(), points: vec![(0.0, 100.0), (1.0, 5.0), (2.0, 8.0)] }],
            y_max: Some(10.0),
            markers: vec![(1.5, "drop".into())],
            ..LineChart::default()
        };
        let svg = c.to_svg();
        // The peak of 100 is drawn at the top edge (y = TOP), not off the plot.
        assert!(svg.contains(&format!("80.0,{TOP:.1} ")), "{svg}");
        assert!(svg.contains("stroke-dasharray") && svg.contains(">drop<"));
        // The y axis stops at 10.
        assert!(svg.contains(">10<") && !svg.contains(">100<"));
    }

    #[test]
    fn stacked_charts_form_one_document() {
        let a = BarChart {
            title: "first".into(),
            categories: vec!["x".into()],
            series: vec![("s".into(), vec![1.0])],
            ..BarChart::default()
        };
        let b = LineChart {
            title: "second".into(),
            series: vec![Series { name: "l".into(), points: vec![(0.0, 1.0), (1.0, 2.0)] }],
            ..LineChart::default()
        };
        let svg = stack(&[a.to_svg(), b.to_svg()]);
        assert!(
            svg.starts_with(&format!(r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{}""#, 2.0 * H))
        );
        assert_eq!(svg.matches("<svg").count(), 3);
        assert_eq!(svg.matches("</svg>").count(), 3);
        assert!(svg.contains(&format!(r#"<svg x="0" y="{H:.1}" xmlns"#)));
        assert!(svg.contains(">first<") && svg.contains(">second<"));
    }

    /// Every text of a chart, with where it starts and how wide it is
    /// estimated to be (px): `(x, y, font size, text)`.
    fn texts(svg: &str) -> Vec<(f64, f64, f64, String)> {
        let mut out = Vec::new();
        for part in svg.split("<text ").skip(1) {
            let attr = |name: &str| {
                part.split_once(&format!("{name}=\""))
                    .and_then(|(_, r)| r.split_once('"'))
                    .and_then(|(v, _)| v.parse::<f64>().ok())
            };
            let body = part.split_once('>').map(|(_, r)| r.split_once("</text>").map_or(r, |x| x.0)).unwrap_or("");
            let anchor = if part.contains("text-anchor=\"middle\"") {
                1
            } else if part.contains("text-anchor=\"end\"") {
                2
            } else {
                0
            };
            if part.contains("rotate(") {
                continue;
            }
            let size = attr("font-size").unwrap_or(12.0);
            let chars = body.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").chars().count() as f64;
            let w = chars * size * 0.55;
            let x = attr("x").unwrap_or(0.0);
            let left = match anchor {
                1 => x - w / 2.0,
                2 => x - w,
                _ => x,
            };
            out.push((left, w, size, body.to_string()));
        }
        out
    }

    /// Issue 38.6: long legend labels and notes stay on the canvas.
    #[test]
    fn long_labels_and_notes_are_wrapped_inside_the_canvas() {
        let long = "9000 → px gateway → 1500 through a very long and descriptive legend label that goes on";
        let note = "machine: Intel(R) Xeon(R) Platinum 8488C (2 CPUs), kernel 6.18.44-fc-v657, load 3.21 at start; \
                    sender cubic, receiver cubic (iperf3 -C cubic); a caveat that makes the small print far longer \
                    than one line of the chart";
        let c = LineChart {
            title: "t".into(),
            series: vec![
                Series { name: long.into(), points: vec![(1.0, 1.0), (2.0, 2.0)] },
                Series { name: "short".into(), points: vec![(1.0, 2.0)] },
            ],
            note: Some(note.into()),
            ..LineChart::default()
        };
        let b = BarChart {
            title: "b".into(),
            y_label: "y".into(),
            categories: vec!["a".into()],
            series: vec![(long.into(), vec![1.0]), ("x".into(), vec![2.0])],
            note: Some(note.into()),
        };
        for svg in [c.to_svg(), b.to_svg()] {
            let h = declared_height(&svg);
            assert!(h > H, "a chart grows to hold its note: {h}");
            for (left, w, _, text) in texts(&svg) {
                assert!(left >= 0.0 && left + w <= W + 1.0, "`{text}` runs off the canvas: {left} + {w}");
            }
            assert!(svg.contains("kernel 6.18.44-fc-v657"), "the whole note is there");
            assert!(svg.contains(">goes on</text>") || svg.contains("goes on</text>"), "the whole label is there");
            let stacked = stack(&[svg.clone(), svg.clone()]);
            assert_eq!(declared_height(&stacked), 2.0 * h, "stacked charts keep their heights");
        }
    }

    #[test]
    fn words_wrap_at_spaces_and_long_words_are_cut() {
        assert_eq!(wrap("a bb ccc dddd", 6), vec!["a bb", "ccc", "dddd"]);
        assert_eq!(wrap("abcdefghij", 4), vec!["abcd", "efgh", "ij"]);
        assert_eq!(wrap("", 4), Vec::<String>::new());
        assert_eq!(wrap("→ x", 3), vec!["→ x"], "characters, not bytes");
    }

    /// Issue 38.6: a log x axis spreads sizes from 64 B to 65 KB.
    #[test]
    fn a_log_x_axis_spreads_decades_evenly() {
        let c = LineChart {
            title: "t".into(),
            x_label: "size".into(),
            series: vec![Series {
                name: "s".into(),
                points: vec![(64.0, 1.0), (640.0, 2.0), (6400.0, 3.0), (64000.0, 4.0)],
            }],
            x_log: true,
            ..LineChart::default()
        };
        let svg = c.to_svg();
        assert!(svg.contains("size (log scale)"));
        let line = svg.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
        let xs: Vec<f64> = line.split_whitespace().map(|p| p.split(',').next().unwrap().parse().unwrap()).collect();
        let gaps: Vec<f64> = xs.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| (g - gaps[0]).abs() < 0.5), "one decade, one step: {gaps:?}");
        for tick in [">10<", ">100<", ">1000<", ">10000<", ">100000<", ">20<", ">5000<"] {
            assert!(svg.contains(tick), "{tick}");
        }
        let a = XAxis::new(true, 64.0, 65000.0);
        assert_eq!((a.lo, a.hi), (10.0, 100_000.0));
        assert!((a.at(1000.0) - 0.5).abs() < 1e-6);
    }
}
