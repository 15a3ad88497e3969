//! What `px lab rtt` prints and plots: a table per link rate and protocol
//! (p50 with p10–p90 per path and size), the ratios beside the study's,
//! and one chart per protocol (p50 against message size on a logarithmic
//! axis, a line per path and link rate).

use std::fmt::Write;

use px_netns::LinkRate;

use super::{PROTOS, RttResult};

fn rate_name(bps: Option<u64>) -> String {
    bps.map_or_else(|| "unshaped veth".to_string(), |b| format!("every hop at {}", LinkRate(b)))
}

/// The tables `px lab rtt` prints.
pub fn table(r: &RttResult) -> String {
    let mut t = String::new();
    let mut paths: Vec<&str> = Vec::new();
    let mut rates: Vec<Option<u64>> = Vec::new();
    for row in &r.rows {
        if !paths.contains(&row.path) {
            paths.push(row.path);
        }
        if !rates.contains(&row.link_rate_bps) {
            rates.push(row.link_rate_bps);
        }
    }
    let _ = writeln!(t, "px lab rtt — one send of SIZE bytes, a 4-byte answer; µs, p50 (p10–p90); {}", r.offloads);
    if rates.iter().any(Option::is_some) {
        let _ = writeln!(t, "  {}", r.shaping);
    }
    for &rate in &rates {
        let _ = writeln!(t, "\n{}", rate_name(rate));
        for proto in PROTOS {
            let _ = write!(t, "  {proto:<12} {:>7}", "size");
            for p in &paths {
                let _ = write!(t, "  {:>24}", format!("path {p}"));
            }
            t.push('\n');
            let here = || r.rows.iter().filter(|x| x.link_rate_bps == rate && x.proto == proto);
            let mut sizes: Vec<usize> = here().map(|x| x.size).collect();
            sizes.sort_unstable();
            sizes.dedup();
            for s in sizes {
                let _ = write!(t, "  {:<12} {s:>7}", "");
                for p in &paths {
                    let cell = here().find(|x| x.path == *p && x.size == s).map_or_else(
                        || "-".to_string(),
                        |x| {
                            if x.samples == 0 {
                                return format!("all {} lost", x.lost);
                            }
                            let lost = if x.lost > 0 { format!(" {} lost", x.lost) } else { String::new() };
                            format!("{:.0} ({:.0}–{:.0}){lost}", x.p50_us, x.p10_us, x.p90_us)
                        },
                    );
                    let _ = write!(t, "  {cell:>24}");
                }
                t.push('\n');
            }
            t.push('\n');
        }
    }
    if rates.contains(&None) {
        for &rate in rates.iter().filter(|r| r.is_some()) {
            let _ = writeln!(
                t,
                "  {}: what shaping added to the p50 (shaped − unshaped), against what a store-and-forward wire adds\n  \
                 by arithmetic (2 hops each way; rtt/model.rs), µs:",
                rate_name(rate)
            );
            for proto in PROTOS {
                let mut cells = Vec::new();
                for size in [2000usize, 4500, 11000, 32000] {
                    let get = |rate: Option<u64>, path: &str| {
                        r.rows
                            .iter()
                            .find(|x| x.link_rate_bps == rate && x.path == path && x.proto == proto && x.size == size)
                    };
                    for path in ["1500", "9000"] {
                        if let (Some(a), Some(b)) = (get(rate, path), get(None, path)) {
                            cells.push(format!(
                                "{size} B @{path}: {:.0} / {:.0}",
                                a.p50_us - b.p50_us,
                                a.model_wire_us.unwrap_or(f64::NAN)
                            ));
                        }
                    }
                }
                if !cells.is_empty() {
                    let _ = writeln!(t, "    {proto:<12} {}", cells.join(", "));
                }
            }
            t.push('\n');
        }
    }
    let _ = writeln!(t, "  p50(9000) / p50(1500): median over sizes above one 1500 frame [at 11000 B]:");
    for x in &r.ratios {
        let at = x.at_11000.map_or_else(String::new, |a| format!(" [{a:.2}]"));
        let _ = writeln!(
            t,
            "    {:<22} {:<12} {:.2}{at}  ({})",
            rate_name(x.link_rate_bps),
            x.proto,
            x.median,
            if x.median > 1.0 { "1500 faster, as the study found" } else { "9000 faster, unlike the study" }
        );
    }
    let _ = writeln!(
        t,
        "\n  The study (Egan; two 700 MHz PCs, gigabit fibre): 1500 had the lower RTT for TCP and UDP,\n  \
         e.g. UDP at 11000 B: 0.1782 ms at 9000 against 0.0962 ms at 1500 (ratio 1.85), explained there by\n  \
         the receiver's buffers and timers. See docs/rtt-study.md for what this machine shows and why."
    );
    t
}

/// The plot: one chart per protocol, p50 RTT against message size (a
/// logarithmic axis: the sizes span 64 B to 65 KB), a line per path and
/// link rate (with several rates, the two direct paths only).
pub fn svg(r: &RttResult) -> String {
    use px_sim::svg::{LineChart, Series, stack};
    let mut lines: Vec<(Option<u64>, &str)> = Vec::new();
    for row in &r.rows {
        if !lines.contains(&(row.link_rate_bps, row.path)) {
            lines.push((row.link_rate_bps, row.path));
        }
    }
    let several = lines.iter().any(|l| l.0 != lines[0].0);
    if several {
        lines.retain(|l| matches!(l.1, "1500" | "9000"));
    }
    let charts: Vec<String> = PROTOS
        .iter()
        .map(|&proto| {
            let series = lines
                .iter()
                .map(|&(rate, path)| {
                    let name = match path {
                        "1500" | "9000" => format!("MTU {path}"),
                        p => format!("9000 → {p} → 1500"),
                    };
                    Series {
                        name: match rate {
                            Some(b) if several => format!("{name}, {}", LinkRate(b)),
                            None if several => format!("{name}, unshaped"),
                            _ => name,
                        },
                        points: r
                            .rows
                            .iter()
                            .filter(|x| x.link_rate_bps == rate && x.path == path && x.proto == proto)
                            .map(|x| (x.size as f64, x.p50_us))
                            .collect(),
                    }
                })
                .collect();
            LineChart {
                title: format!("{proto}: round-trip time (p50) against message size"),
                x_label: "message size (bytes, one send)".into(),
                y_label: "RTT p50 (µs)".into(),
                series,
                y_max: None,
                markers: vec![(1472.0, "1500".into()), (8972.0, "9000".into())],
                note: Some(format!(
                    "px lab rtt (veth, TSO/GSO off; {}); dashed: largest one-frame message at MTU 1500, 9000",
                    if several || lines.iter().any(|l| l.0.is_some()) {
                        "with a rate: tbf on every hop, one-frame burst, a switch between the direct hosts"
                    } else {
                        "unshaped"
                    }
                )),
                x_log: true,
            }
            .to_svg()
        })
        .collect();
    stack(&charts)
}
