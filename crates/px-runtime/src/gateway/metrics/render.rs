//! The Prometheus text exposition (format 0.0.4) of one scrape, family by
//! family in the order of [`FAMILIES`], each with its `# HELP` and
//! `# TYPE` lines; and the one-line summary the log shows.

use std::fmt::Write as _;

use super::snapshot::{Scrape, Shared, WorkerSnapshot};
use super::table::FAMILIES;

/// The Prometheus text exposition of all workers.
pub fn render(shared: &Shared) -> String {
    render_scrape(&shared.scrape())
}

/// The Prometheus text exposition of one scrape.
pub fn render_scrape(s: &Scrape) -> String {
    let mut o = String::new();
    for f in FAMILIES {
        let _ = writeln!(o, "# HELP {} {}\n# TYPE {} {}", f.name, f.help, f.name, f.kind.name());
        for (labels, v) in (f.rows)(s) {
            // A histogram's rows name their suffix before a `|`.
            let (suffix, labels) = labels.split_once('|').unwrap_or(("", &labels));
            if labels.is_empty() {
                let _ = writeln!(o, "{}{suffix} {v}", f.name);
            } else {
                let _ = writeln!(o, "{}{suffix}{{{labels}}} {v}", f.name);
            }
        }
    }
    o
}

/// One line for the log.
pub fn summary(s: &WorkerSnapshot) -> String {
    let c = &s.counters;
    format!(
        "outer rx {} pkts / tx {} | inner rx {} / tx {} | yield {:.3} | merged {} -> {} | split {} | mss +{} -{} | caravans {} built (yield {:.3}) {} opened | flows {} held {} B | drops {} | sock drops {} send err {}",
        c.outer.rx_packets,
        c.outer.tx_packets,
        c.inner.rx_packets,
        c.inner.tx_packets,
        c.conversion_yield(),
        c.merged_in,
        c.merged_out,
        c.split_in + c.gso_out,
        c.mss_raised,
        c.mss_clamped,
        c.caravan.built,
        c.caravan.caravan_yield(),
        c.caravan.opened,
        s.flows,
        s.held_bytes,
        c.total_drops(),
        s.socket_drops,
        s.send_errors
    ) + &fast_path_summary(s)
}

/// The fast path's part of the log line, once it has carried a flow.
fn fast_path_summary(s: &WorkerSnapshot) -> String {
    let f = &s.counters.fast_path;
    if f.installed == 0 {
        return String::new();
    }
    let returned: Vec<String> = px_gateway::fast_path::ReturnReason::ALL
        .iter()
        .zip(f.returned)
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| format!("{} {n}", r.name()))
        .collect();
    format!(
        " | fast path {} flows, {} installed, back: {}{} backlog {}, passed on {}, engine {}",
        s.in_kernel,
        f.installed,
        returned.join(", "),
        if returned.is_empty() { "" } else { "," },
        f.backlog,
        f.passed_on,
        f.reclaimed_pmtu + f.reclaimed_config + f.reclaimed_removed
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::metrics::sample_scrape;
    use crate::gateway::metrics::table::FAMILIES;
    use std::io::Write;

    #[test]
    fn render_has_every_family_and_parses_as_lines() {
        let sh = sample_scrape();
        let text = render(&sh);
        assert!(text.contains("px_gateway_conversion_yield_ratio 0.9\n"), "{text}");
        assert!(text.contains("px_gateway_packets_total{worker=\"1\",port=\"outer\",direction=\"rx\"} 60\n"));
        assert!(text.contains("px_gateway_bytes_total{worker=\"1\",port=\"inner\",direction=\"tx\"} 5000\n"));
        assert!(text.contains("px_gateway_bytes_total{worker=\"0\",port=\"outer\",direction=\"rx\"} 0\n"));
        assert!(text.contains("px_gateway_flows{worker=\"1\"} 3\n"));
        assert!(text.contains("px_gateway_drops_total{worker=\"1\",reason=\"too_big_df\"} 2\n"));
        assert!(text.contains("px_gateway_caravans_malformed_total{worker=\"0\",reason=\"overrun\"} 0\n"));
        assert!(text.contains("px_gateway_caravan_yield_ratio 0\n"));
        assert!(text.contains("px_gateway_merge_timeout_seconds{worker=\"1\"} 0.0005\n"));
        assert!(text.contains("px_gateway_config_reloads_total{result=\"refused\"} 1\n"));
        // The hold histogram: cumulative, exact below each bound.
        assert!(text.contains("px_gateway_hold_seconds_bucket{worker=\"1\",le=\"0.000004\"} 2\n"), "{text}");
        assert!(text.contains("px_gateway_hold_seconds_bucket{worker=\"1\",le=\"0.000512\"} 4\n"));
        assert!(text.contains("px_gateway_hold_seconds_bucket{worker=\"1\",le=\"0.016384\"} 5\n"));
        assert!(text.contains("px_gateway_hold_seconds_bucket{worker=\"1\",le=\"+Inf\"} 6\n"));
        assert!(text.contains("px_gateway_hold_seconds_count{worker=\"1\"} 6\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (name_labels, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
            let name = name_labels.split('{').next().unwrap();
            assert!(FAMILIES.iter().any(|f| f.sample_names().iter().any(|n| n == name)), "{line}");
        }
        for f in FAMILIES {
            assert!(text.contains(&format!("# TYPE {} ", f.name)), "{}", f.name);
        }
        assert_eq!(sh.total().flows, 3);
    }

    /// `promtool check metrics` (Debian's `prometheus` package) accepts the
    /// exposition; skipped with a message where promtool is missing.
    #[test]
    fn promtool_accepts_the_exposition() {
        use std::process::{Command, Stdio};
        let text = render(&sample_scrape());
        let child = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            eprintln!("SKIP promtool_accepts_the_exposition: promtool not found (apt-get install prometheus)");
            return;
        };
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && report.trim().is_empty(), "promtool check metrics:\n{report}");
    }
}
