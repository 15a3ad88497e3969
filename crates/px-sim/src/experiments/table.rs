//! The tables `px sim` prints, one per experiment result: the simulated
//! figures, with the seed's own beside them where the seed has any. Pure
//! functions of the result (and the wall time the run took), so the same
//! result always prints the same table.

use std::fmt::Write as _;
use std::time::Duration;

use super::{MtuBenefitResult, MtuDropResult, PmtudCompareResult};
use crate::transport::SenderModel;

/// `writeln!` into a `String`, which cannot fail.
macro_rules! out {
    ($s:ident) => {
        $s.push('\n')
    };
    ($s:ident, $($t:tt)*) => {{
        let _ = writeln!($s, $($t)*);
    }};
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.digits$}"))
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{:.1} %", x * 100.0))
}

impl MtuDropResult {
    /// The table `px sim` prints: the simulated figures beside the seed's
    /// own where it has them; `elapsed` is the wall time the run took.
    pub fn table(&self, elapsed: Duration) -> String {
        let r = self;
        let mut buf = String::new();
        let p = &r.params;
        let sender = match p.sender {
        SenderModel::Picoquic => {
            "picoquic model (CUBIC, paced, RACK/timer losses, MTU reset after 11 losses; drop timed from the handshake)"
                .to_string()
        }
        SenderModel::Bbr => "picoquic model with picoquic's BBRv1 (long-RTT start-up, drain, ProbeBW; paced, \
             RACK and 2023 per-packet timer losses, MTU reset after 11 losses; drop timed from the handshake)"
            .to_string(),
        SenderModel::Rfc9002NewReno => {
            format!("RFC 9002 NewReno, DPLPMTUD {:?} (PROBE_TIMER floor {} ms)", p.search, p.min_probe_timer_ms)
        }
    };
        out!(
            buf,
            "px sim mtu-drop — {} B over {} Mb/s, {} ms each way, queue {}, path MTU {} -> {} at {} s, \
         packets up to {} B, {sender}, seed {}",
            p.file_bytes,
            p.bandwidth_bps as f64 / 1e6,
            p.one_way_delay_ms,
            p.queue_bytes.map_or_else(|| "unlimited".to_string(), |q| format!("{q} B")),
            p.mtu_before,
            p.mtu_after,
            p.drop_at_s,
            p.max_packet(),
            p.seed
        );
        out!(buf);
        out!(
            buf,
            "  {:<12} {:>14} {:>10} | {:>21} {:>9} {:>9} | {:>21} {:>8} | {:>5} {:>6}",
            "",
            "completion s",
            "losses",
            "--- at the drop ---",
            "cwnd",
            "in flight",
            "--- before detection ---",
            "detected",
            "",
            "final"
        );
        out!(
            buf,
            "  {:<12} {:>14} {:>10} | {:>6} {:>6} {:>7} {:>9} {:>9} | {:>6} {:>6} {:>7} {:>8} | {:>5} {:>6}",
            "variant",
            "sim / blog",
            "sim / blog",
            "srtt",
            "rtt",
            "PTO",
            "bytes",
            "bytes",
            "srtt",
            "rtt",
            "PTO",
            "at s",
            "PTOs",
            "PLPMTU"
        );
        for row in &r.rows {
            out!(
                buf,
                "  {:<12} {:>14} {:>10} | {:>6.3} {:>6.3} {:>7.3} {:>9} {:>9} | {:>6.3} {:>6.3} {:>7.3} {:>8} | {:>5} {:>6}",
                row.variant,
                format!("{} / {:.1}", opt(row.completion_s, 2), row.blog_completion_s),
                format!("{} / {}", row.losses, row.blog_losses),
                row.srtt_at_drop_s,
                row.latest_rtt_at_drop_s,
                row.pto_at_drop_s,
                row.cwnd_at_drop_bytes,
                row.in_flight_at_drop_bytes,
                row.srtt_before_detection_s,
                row.latest_rtt_before_detection_s,
                row.pto_before_detection_s,
                opt(row.black_hole_detected_s, 2),
                row.ptos,
                row.final_plpmtu
            );
        }
        let mut order: Vec<&_> = r.rows.iter().filter(|x| x.completion_s.is_some()).collect();
        order.sort_by(|x, y| x.completion_s.unwrap_or(f64::MAX).total_cmp(&y.completion_s.unwrap_or(f64::MAX)));
        let names: Vec<&str> = order.iter().map(|x| x.variant.as_str()).collect();
        out!(buf);
        out!(buf, "  fastest to slowest (sim):  {}", names.join(" < "));
        out!(buf, "  fastest to slowest (blog): Once 3V < Once 4V < Classic < Once MaxRTT");
        let most = r.rows.iter().max_by_key(|x| x.losses);
        match most {
            Some(m) if r.rows.iter().any(|x| x.losses != m.losses) => {
                out!(buf, "  most losses (sim): {} ({}); (blog): Classic (79)", m.variant, m.losses);
            }
            Some(m) => out!(buf, "  losses (sim): {} in every run; (blog): Classic 79, the others 48-50", m.losses),
            None => {}
        }
        out!(
            buf,
            "  (srtt, raw rtt, PTO in seconds; 'detected' = when the PLPMTU fell; PTOs = timer events; {} variants in {:.1?})",
            r.rows.len(),
            elapsed
        );
        buf
    }
}

impl PmtudCompareResult {
    /// The table `px sim` prints: the simulated figures beside the seed's
    /// own where it has them; `elapsed` is the wall time the run took.
    pub fn table(&self, elapsed: Duration) -> String {
        let r = self;
        let mut buf = String::new();
        let p = &r.params;
        out!(
            buf,
            "px sim pmtud-compare — {} random paths ({}–{} links, RTT {}–{} ms, {:.0} % lossy up to {} %, \
         {} ICMP black holes, {} fragment filters), PROBE_TIMER floor {} ms, seed {}",
            p.paths,
            p.min_hops,
            p.max_hops,
            p.min_rtt_ms,
            p.max_rtt_ms,
            p.lossy_share * 100.0,
            p.max_loss * 100.0,
            r.black_hole_paths,
            r.fragment_filter_paths,
            p.dplpmtud_min_probe_timer_ms,
            p.seed
        );
        out!(buf);
        out!(
            buf,
            "  {:<20} {:>8} {:>8} {:>7} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8} {:>10} {:>10} {:>9}",
            "method",
            "success",
            "exact",
            "wrong",
            "p50 s",
            "p99 s",
            "p50 RTT",
            "p99 RTT",
            "probes",
            "kB sent",
            "black hole",
            "frag filt",
            "fallback"
        );
        for s in &r.summaries {
            out!(
                buf,
                "  {:<20} {:>8} {:>8} {:>7} {:>8} {:>8} {:>8} {:>8} {:>7.1} {:>8.1} {:>10} {:>10} {:>9}",
                s.method,
                pct(Some(s.success_rate)),
                pct(Some(s.exact_rate)),
                pct(Some(s.wrong_rate)),
                opt(s.p50_s, 2),
                opt(s.p99_s, 2),
                opt(s.p50_rtts, 1),
                opt(s.p99_rtts, 1),
                s.probes_mean,
                s.bytes_mean / 1000.0,
                pct(s.black_hole_success_rate),
                pct(s.fragment_filter_success_rate),
                pct(Some(s.fallback_rate))
            );
        }
        out!(buf);
        out!(
            buf,
            "  By path class (a path counts in every class it belongs to; clean = IPv4 without loss, black hole or filter):"
        );
        out!(
            buf,
            "  {:<20} {:<16} {:>6} {:>8} {:>8} {:>8} {:>8}",
            "method",
            "class",
            "paths",
            "success",
            "exact",
            "p50 RTT",
            "p99 RTT"
        );
        for s in &r.summaries {
            for c in &s.classes {
                out!(
                    buf,
                    "  {:<20} {:<16} {:>6} {:>8} {:>8} {:>8} {:>8}",
                    s.method,
                    c.class,
                    c.paths,
                    pct(c.success_rate),
                    pct(c.exact_rate),
                    opt(c.p50_rtts, 1),
                    opt(c.p99_rtts, 1)
                );
            }
            out!(
                buf,
                "  {:<20} {:<16} {:>6} {:>8} {:>8}",
                s.method,
                "(all loss-free)",
                "",
                "",
                pct(s.loss_free_exact_rate)
            );
        }
        out!(buf);
        out!(buf, "  success = an answer no larger than the true path MTU; exact = equal to it; wrong = larger.");
        out!(buf, "  Times to the answer over successful paths; 'black hole' / 'frag filt' = success on those paths.");
        out!(buf, "  No seed figure exists for this table (the paper claims F-PMTUD in one round trip, §4.2).");
        out!(buf, "  ({} paths x {} methods in {:.2?})", p.paths, p.methods.len(), elapsed);
        buf
    }
}

impl MtuBenefitResult {
    /// The table `px sim` prints: the simulated figures beside the seed's
    /// own where it has them; `elapsed` is the wall time the run took.
    pub fn table(&self, elapsed: Duration) -> String {
        let r = self;
        let mut buf = String::new();
        let p = &r.params;
        out!(
            buf,
            "px sim mtu-benefit — one NewReno flow, {} Gb/s WAN, {} ms each way, {} % loss each way, \
         {} s per run, {} run(s) per MSS, seed {}",
            p.bandwidth_bps as f64 / 1e9,
            p.one_way_delay_ms,
            p.loss * 100.0,
            p.duration_s,
            p.runs,
            p.seed
        );
        out!(buf);
        out!(
            buf,
            "  {:>6} {:>6} {:>12} {:>12} {:>12} {:>16} {:>14}",
            "MSS",
            "MTU",
            "Mb/s",
            "lost pkts",
            "cong. events",
            "growth/RTT (CA)",
            "mean cwnd kB"
        );
        for run in &r.runs {
            out!(
                buf,
                "  {:>6} {:>6} {:>12.1} {:>12.1} {:>12.1} {:>14.0} B {:>14.1}",
                run.mss,
                run.mtu,
                run.throughput_mbps,
                run.packets_lost,
                run.congestion_events,
                run.ca_growth_per_rtt_bytes,
                run.mean_cwnd_bytes / 1000.0
            );
        }
        out!(buf);
        out!(
            buf,
            "  throughput ratio (last / first MSS): {:.2}x   (paper: 2.5x sender-side §5.2, 5.4x Fig. 1d)",
            r.throughput_ratio
        );
        out!(
            buf,
            "  window growth per RTT ratio:         {:.2}x   (paper §2.1: 9 KB per RTT, 6x faster)",
            r.growth_ratio
        );
        out!(buf, "  The simulator has no host or NIC limits: its ratio is the congestion-control effect alone.");
        out!(buf, "  ({} runs in {:.2?})", r.runs.len() as u32 * p.runs, elapsed);
        buf
    }
}
