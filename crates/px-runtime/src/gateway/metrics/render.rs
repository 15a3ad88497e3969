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

/// What the periodic log line says, as fields (`--log-format json` writes
/// them as they are) and as text ([`std::fmt::Display`]): wire frames per
/// port (as `ip -s link` counts them) with their rates since the last
/// line, then the engine's work, each count named for what it counts.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Summary {
    pub outer_rx_packets: u64,
    pub outer_tx_packets: u64,
    pub inner_rx_packets: u64,
    pub inner_tx_packets: u64,
    /// Wire packets per second over the interval; `None` without one.
    pub outer_rx_pps: Option<f64>,
    pub outer_tx_pps: Option<f64>,
    pub inner_rx_pps: Option<f64>,
    pub inner_tx_pps: Option<f64>,
    pub outer_rx_super_packets: u64,
    pub outer_tx_super_packets: u64,
    pub inner_rx_super_packets: u64,
    pub inner_tx_super_packets: u64,
    /// Received frames merged, and the inner segments they became.
    pub merged_in_frames: u64,
    pub merged_out_segments: u64,
    pub conversion_yield: Option<f64>,
    pub split_in: u64,
    pub split_out: u64,
    pub gso_out: u64,
    pub mss_raised: u64,
    pub mss_clamped: u64,
    pub caravans_built: u64,
    pub caravans_opened: u64,
    pub flows: usize,
    pub held_bytes: usize,
    pub drops: u64,
    pub socket_drops: u64,
    pub send_errors: u64,
    /// The kernel fast path, once it was given a flow.
    pub fast_path: Option<FastPathSummary>,
}

/// The kernel fast path's part of a [`Summary`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct FastPathSummary {
    /// Flows it carries now, and installs since start.
    pub flows: usize,
    pub installed: u64,
    /// Directions it handed back, by reason (those with any).
    pub returned: Vec<(&'static str, u64)>,
    pub backlog: u64,
    pub passed_on: u64,
    /// Flows the engine took back itself (path MTU, reload, removal).
    pub reclaimed: u64,
}

impl FastPathSummary {
    fn new(s: &WorkerSnapshot) -> Option<FastPathSummary> {
        let f = &s.counters.fast_path;
        (f.installed > 0).then(|| FastPathSummary {
            flows: s.in_kernel,
            installed: f.installed,
            returned: px_gateway::fast_path::ReturnReason::ALL
                .iter()
                .zip(f.returned)
                .filter(|(_, n)| *n > 0)
                .map(|(r, n)| (r.name(), n))
                .collect(),
            backlog: f.backlog,
            passed_on: f.passed_on,
            reclaimed: f.reclaimed_pmtu + f.reclaimed_config + f.reclaimed_removed,
        })
    }
}

impl Summary {
    /// The totals `s`, with rates since `prev` (the last line's totals,
    /// `dt` before).
    pub fn new(s: &WorkerSnapshot, prev: Option<(&WorkerSnapshot, std::time::Duration)>) -> Summary {
        use px_gateway::Port;
        let c = &s.counters;
        let rate = |now: u64, then: fn(&WorkerSnapshot) -> u64| match prev {
            Some((p, dt)) if dt.as_secs_f64() > 0.0 => Some(now.saturating_sub(then(p)) as f64 / dt.as_secs_f64()),
            _ => None,
        };
        let (o, i) = (s.wire(Port::Outer), s.wire(Port::Inner));
        Summary {
            outer_rx_packets: o.rx_packets,
            outer_tx_packets: o.tx_packets,
            inner_rx_packets: i.rx_packets,
            inner_tx_packets: i.tx_packets,
            outer_rx_pps: rate(o.rx_packets, |p| p.wire(Port::Outer).rx_packets),
            outer_tx_pps: rate(o.tx_packets, |p| p.wire(Port::Outer).tx_packets),
            inner_rx_pps: rate(i.rx_packets, |p| p.wire(Port::Inner).rx_packets),
            inner_tx_pps: rate(i.tx_packets, |p| p.wire(Port::Inner).tx_packets),
            outer_rx_super_packets: c.outer.rx_packets,
            outer_tx_super_packets: c.outer.tx_packets,
            inner_rx_super_packets: c.inner.rx_packets,
            inner_tx_super_packets: c.inner.tx_packets,
            merged_in_frames: c.merged_in,
            merged_out_segments: c.merged_out,
            conversion_yield: (c.inner_tcp_data_out > 0).then(|| c.conversion_yield()),
            split_in: c.split_in,
            split_out: c.split_out,
            gso_out: c.gso_out,
            mss_raised: c.mss_raised,
            mss_clamped: c.mss_clamped,
            caravans_built: c.caravan.built,
            caravans_opened: c.caravan.opened,
            flows: s.flows,
            held_bytes: s.held_bytes,
            drops: c.total_drops(),
            socket_drops: s.socket_drops,
            send_errors: s.send_errors,
            fast_path: FastPathSummary::new(s),
        }
    }
}

impl std::fmt::Display for Summary {
    /// The short human line: wire frames per second on each port (or, for
    /// a final total without an interval, the frames), flows, held bytes,
    /// the yield and the drops; socket drops, send errors and the fast
    /// path only when there are any. The rest is in the JSON fields,
    /// `px status` and the metrics.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let port = |name: &str, rx: u64, rx_pps: Option<f64>, tx: u64, tx_pps: Option<f64>| match (rx_pps, tx_pps) {
            (Some(r), Some(t)) => format!("{name} rx {}/s tx {}/s", si(r), si(t)),
            _ => format!("{name} rx {rx} tx {tx}"),
        };
        let yield_ = self.conversion_yield.map_or("-".to_string(), |y| format!("{y:.3}"));
        write!(
            f,
            "{}, {}, {} flows, held {}B, yield {yield_}, drops {}",
            port("outer", self.outer_rx_packets, self.outer_rx_pps, self.outer_tx_packets, self.outer_tx_pps),
            port("inner", self.inner_rx_packets, self.inner_rx_pps, self.inner_tx_packets, self.inner_tx_pps),
            si(self.flows as f64),
            si(self.held_bytes as f64),
            self.drops,
        )?;
        if self.socket_drops > 0 {
            write!(f, ", socket drops {}", self.socket_drops)?;
        }
        if self.send_errors > 0 {
            write!(f, ", send errors {}", self.send_errors)?;
        }
        match &self.fast_path {
            Some(fp) => write!(f, ", fast path {} flows", fp.flows),
            None => Ok(()),
        }
    }
}

/// One line for the log ([`Summary`] as text).
pub fn summary(s: &WorkerSnapshot, prev: Option<(&WorkerSnapshot, std::time::Duration)>) -> String {
    Summary::new(s, prev).to_string()
}

/// A rate with an SI prefix: `950`, `12.3k`, `1.66M`.
pub fn si(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.2}G", v / 1e9),
        v if v >= 1e6 => format!("{:.2}M", v / 1e6),
        v if v >= 1e3 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::metrics::sample_scrape;
    use crate::gateway::metrics::table::FAMILIES;
    use std::io::Write;

    #[test]
    fn the_log_line_says_what_the_fast_path_carries_once_it_carried_a_flow() {
        let mut w = WorkerSnapshot::default();
        assert!(Summary::new(&w, None).fast_path.is_none());
        assert!(!Summary::new(&w, None).to_string().contains("fast path"));
        w.in_kernel = 1;
        w.counters.fast_path.installed = 2;
        w.counters.fast_path.returned[px_gateway::fast_path::ReturnReason::Lone as usize] = 1;
        w.counters.fast_path.passed_on = 3;
        let s = Summary::new(&w, None);
        assert!(s.to_string().ends_with(", drops 0, fast path 1 flows"), "{s}");
        assert_eq!(s.fast_path.unwrap().returned, [("lone", 1)]);
    }

    #[test]
    fn render_has_every_family_and_parses_as_lines() {
        let sh = sample_scrape();
        let text = render(&sh);
        assert!(text.contains("px_gateway_conversion_yield_ratio 0.9\n"), "{text}");
        // Wire frames and socket frames (super-packets) apart.
        assert!(text.contains("px_gateway_packets_total{worker=\"1\",port=\"outer\",direction=\"rx\"} 600\n"));
        assert!(text.contains("px_gateway_super_packets_total{worker=\"1\",port=\"outer\",direction=\"rx\"} 60\n"));
        assert!(
            text.contains("px_gateway_super_packet_bytes_total{worker=\"1\",port=\"inner\",direction=\"tx\"} 5000\n")
        );
        assert!(text.contains("px_gateway_bytes_total{worker=\"0\",port=\"outer\",direction=\"rx\"} 0\n"));
        assert!(text.contains("px_gateway_flows{worker=\"1\"} 3\n"));
        assert!(text.contains(&format!("px_build_info{{version=\"{}\"}} 1\n", env!("CARGO_PKG_VERSION"))), "{text}");
        assert!(
            text.contains("\nprocess_resident_memory_bytes ") && text.contains("\nprocess_cpu_seconds_total "),
            "{text}"
        );
        assert!(text.contains("px_gateway_drops_total{worker=\"1\",reason=\"too_big_df\"} 2\n"));
        assert!(text.contains("px_gateway_caravans_malformed_total{worker=\"0\",reason=\"overrun\"} 0\n"));
        // No caravan built: no yield sample (not a yield of 0).
        assert!(!text.contains("\npx_gateway_caravan_yield_ratio "), "{text}");
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

    /// The log line: rates from the last line, totals without one.
    #[test]
    fn summary_gives_rates_or_totals() {
        let sh = sample_scrape();
        let now = sh.total();
        let line = summary(&now, None);
        assert_eq!(line, "outer rx 600 tx 0, inner rx 0 tx 0, 3 flows, held 0B, yield 0.900, drops 2");
        let before = WorkerSnapshot::default();
        let line = summary(&now, Some((&before, std::time::Duration::from_millis(500))));
        assert!(line.starts_with("outer rx 1.2k/s tx 0/s, inner rx 0/s tx 0/s, 3 flows,"), "{line}");
        assert_eq!(si(1_661_961.0), "1.66M");
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
