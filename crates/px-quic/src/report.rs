//! The result of `px lab quic`: the figures measured, the blog's beside
//! them, a table and JSON. Everything printed was measured in this run.

use std::fmt::Write;

use px_netns::ImpairStats;
use px_netns::Machine;
use serde::Serialize;

use crate::QuicOptions;
use crate::bulk::BulkRun;
use crate::path::{MTU, OFFLOADS};
use crate::start::StartRun;
use crate::summary::{Spread, faster_pct};

/// What the blog reports (lsquic, 5 connections × 1 GB over HTTP/3):
/// % faster than 1252 per largest UDP payload.
pub const BLOG: [(u16, f64); 3] = [(1252, 0.0), (1472, 11.0), (4096, 35.0)];

/// The blog's line, for every result.
pub const BLOG_SAYS: &str = "lsquic DPLPMTUD blog: 5 connections fetch 1 GB each over HTTP/3, median of 3: \
                             1252 B 19.9 s, 1472 B 17.7 s (11 % faster), 4096 B 13.0 s (35 % faster)";

/// One payload size over its runs.
#[derive(Debug, Clone, Serialize)]
pub struct PayloadResult {
    /// Largest UDP payload (fixed).
    pub payload: u16,
    /// Median transfer time (s).
    pub seconds: f64,
    /// Fastest run (s).
    pub seconds_min: f64,
    /// Slowest run (s).
    pub seconds_max: f64,
    /// Median time saved over the baseline payload's median, in %.
    pub faster_than_1252_pct: f64,
    /// The blog's figure for this size, if it has one.
    pub blog_faster_pct: Option<f64>,
    /// Mean UDP datagram the server sent (bytes, over all runs).
    pub mean_datagram: f64,
    /// UDP datagrams the server sent (all runs).
    pub datagrams_sent: u64,
    /// UDP datagrams the clients received (all runs).
    pub datagrams_received: u64,
    /// Packets the server declared lost (all runs).
    pub lost_packets: u64,
    /// Datagrams dropped on a full socket receive buffer (both hosts, all runs).
    pub rcvbuf_drops: u64,
    /// Every run.
    pub runs: Vec<BulkRun>,
}

/// One PMTUD start over its runs (medians).
#[derive(Debug, Clone, Serialize)]
pub struct StartResult {
    /// `quinn` (its own PMTUD from 1200) or `fpmtud` (started where one probe said).
    pub start: &'static str,
    /// The size it started at.
    pub initial_payload: u16,
    /// The probe (ms; 0 for quinn's own).
    pub probe_ms: f64,
    /// From `connect` to full-size packets (ms), `None` if a run never got there.
    pub to_full_ms: Option<f64>,
    /// Probe + `to_full_ms`.
    pub total_to_full_ms: Option<f64>,
    /// From `connect` to the short fetch's last byte (ms).
    pub fetch_ms: f64,
    /// Probe + `fetch_ms`.
    pub total_fetch_ms: f64,
    /// The server's packet size at the end (last run).
    pub final_payload: u16,
    /// PMTUD probes the server sent (median).
    pub plpmtud_probes: f64,
    /// Every run.
    pub runs: Vec<StartRun>,
}

/// Frame counters of the delay element.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ElementCounters {
    /// Frames forwarded (server → client, client → server).
    pub forwarded: [u64; 2],
    /// Frames dropped by the loss draw (none asked).
    pub lost: [u64; 2],
    /// Frames dropped because the delay queue was full.
    pub overflow: [u64; 2],
}

/// The whole result.
#[derive(Debug, Clone, Serialize)]
pub struct QuicResult {
    /// Per payload size, the baseline first.
    pub payloads: Vec<PayloadResult>,
    /// The payload the "% faster" figures compare with.
    pub baseline_payload: u16,
    /// quinn's own PMTUD start and the F-PMTUD start (if run).
    pub pmtud_start: Option<[StartResult; 2]>,
    /// Bytes each connection fetched.
    pub bytes_per_connection: u64,
    /// Parallel connections.
    pub connections: usize,
    /// Runs per size.
    pub runs: usize,
    /// Delay each way (ms).
    pub delay_ms: f64,
    /// MTU of the path's links.
    pub path_mtu: u16,
    /// Bytes of the short fetch.
    pub short_bytes: u64,
    /// Offloads on the path.
    pub offloads: &'static str,
    /// The delay element's counters.
    pub element: ElementCounters,
    /// The machine and its load at the start.
    pub machine: Machine,
    /// What the blog reports.
    pub blog: &'static str,
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    Spread::of(&v.collect::<Vec<_>>()).map_or(0.0, |s| s.median)
}

fn start_result(start: &'static str, runs: Vec<StartRun>) -> StartResult {
    let reached: Option<Vec<f64>> = runs.iter().map(|r| r.to_full_ms).collect();
    let to_full_ms = reached.as_deref().and_then(Spread::of).map(|s| s.median);
    let total: Option<Vec<f64>> = runs.iter().map(|r| r.to_full_ms.map(|t| t + r.probe_ms)).collect();
    StartResult {
        start,
        initial_payload: runs.first().map_or(0, |r| r.initial_payload),
        probe_ms: median(runs.iter().map(|r| r.probe_ms)),
        to_full_ms,
        total_to_full_ms: total.as_deref().and_then(Spread::of).map(|s| s.median),
        fetch_ms: median(runs.iter().map(|r| r.fetch_ms)),
        total_fetch_ms: median(runs.iter().map(|r| r.fetch_ms + r.probe_ms)),
        final_payload: runs.last().map_or(0, |r| r.final_payload),
        plpmtud_probes: median(runs.iter().map(|r| r.plpmtud_probes as f64)),
        runs,
    }
}

impl QuicResult {
    /// Summarises the runs.
    pub fn new(
        o: &QuicOptions,
        machine: Machine,
        bulk: Vec<BulkRun>,
        start: Option<(Vec<StartRun>, Vec<StartRun>)>,
        element: ImpairStats,
    ) -> QuicResult {
        let baseline_payload = o.payloads.first().copied().unwrap_or(0);
        let mut payloads: Vec<PayloadResult> = o
            .payloads
            .iter()
            .map(|&payload| {
                let runs: Vec<BulkRun> = bulk.iter().filter(|r| r.payload == payload).copied().collect();
                let s = Spread::of(&runs.iter().map(|r| r.seconds).collect::<Vec<_>>()).unwrap_or(Spread {
                    median: 0.0,
                    min: 0.0,
                    max: 0.0,
                });
                let (bytes, dgrams) = runs.iter().fold((0, 0), |(b, d), r| (b + r.udp_bytes, d + r.datagrams));
                PayloadResult {
                    payload,
                    seconds: s.median,
                    seconds_min: s.min,
                    seconds_max: s.max,
                    faster_than_1252_pct: 0.0,
                    blog_faster_pct: BLOG.iter().find(|b| b.0 == payload).map(|b| b.1),
                    mean_datagram: if dgrams > 0 { bytes as f64 / dgrams as f64 } else { 0.0 },
                    datagrams_sent: dgrams,
                    datagrams_received: runs.iter().map(|r| r.client_datagrams).sum(),
                    lost_packets: runs.iter().map(|r| r.lost_packets).sum(),
                    rcvbuf_drops: runs.iter().map(|r| r.rcvbuf_drops).sum(),
                    runs,
                }
            })
            .collect();
        let base = payloads.first().map_or(0.0, |p| p.seconds);
        for p in &mut payloads {
            p.faster_than_1252_pct = faster_pct(base, p.seconds);
        }
        QuicResult {
            payloads,
            baseline_payload,
            pmtud_start: start.map(|(own, probed)| [start_result("quinn", own), start_result("fpmtud", probed)]),
            bytes_per_connection: o.bytes,
            connections: o.connections,
            runs: o.runs,
            delay_ms: o.delay.as_secs_f64() * 1e3,
            path_mtu: MTU,
            short_bytes: o.short_bytes,
            offloads: OFFLOADS,
            element: ElementCounters { forwarded: element.forwarded, lost: element.lost, overflow: element.overflow },
            machine,
            blog: BLOG_SAYS,
        }
    }

    /// The table `px lab quic` prints.
    #[must_use]
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "px lab quic — the lsquic DPLPMTUD blog with quinn");
        let _ = writeln!(s, "{}", self.machine.line());
        let _ = writeln!(
            s,
            "path: MTU {} both links, {} ms each way, no loss, px-lab delay element (no netem); {}",
            self.path_mtu, self.delay_ms, self.offloads
        );
        let _ = writeln!(
            s,
            "delay element frames: {} / {} forwarded, {} / {} dropped on a full queue",
            self.element.forwarded[0], self.element.forwarded[1], self.element.overflow[0], self.element.overflow[1]
        );
        let _ = writeln!(
            s,
            "\n{} connections × {} bytes, largest UDP payload fixed (PMTUD off); median of {} run(s), timed from all \
             connections up to the last byte",
            self.connections, self.bytes_per_connection, self.runs
        );
        let _ = writeln!(
            s,
            "{:>8} {:>9} {:>19} {:>13} {:>7} {:>10} {:>9} {:>9} {:>7} {:>10}",
            "payload",
            "seconds",
            "min–max",
            "faster vs 1252",
            "blog",
            "mean dgram",
            "sent",
            "received",
            "lost",
            "sock drops"
        );
        for p in &self.payloads {
            let _ = writeln!(
                s,
                "{:>8} {:>9.3} {:>19} {:>12.1}% {:>7} {:>10.0} {:>9} {:>9} {:>7} {:>10}",
                p.payload,
                p.seconds,
                format!("{:.3}–{:.3}", p.seconds_min, p.seconds_max),
                p.faster_than_1252_pct,
                p.blog_faster_pct.map_or("—".into(), |b| format!("{b:.0} %")),
                p.mean_datagram,
                p.datagrams_sent,
                p.datagrams_received,
                p.lost_packets,
                p.rcvbuf_drops
            );
        }
        let _ = writeln!(
            s,
            "(sent / received: UDP datagrams of the server and of the clients; lost: packets the server's quinn \
             declared lost; sock drops: datagrams the hosts dropped on a full socket buffer of {} KB asked; all runs)",
            crate::path::SOCKET_BUFFER >> 10
        );
        let _ = writeln!(s, "blog: {}", self.blog);
        if let Some(starts) = &self.pmtud_start {
            let _ = writeln!(
                s,
                "\nPMTUD start: a fresh connection fetches {} bytes; times from connect (handshake included), median of {} \
                 run(s); both search up to {} B",
                self.short_bytes,
                self.runs,
                self.path_mtu - 28
            );
            let _ = writeln!(
                s,
                "{:<34} {:>7} {:>9} {:>12} {:>9} {:>9} {:>9} {:>6} {:>7}",
                "start", "initial", "probe ms", "to full ms", "+probe", "fetch ms", "+probe", "final", "probes"
            );
            let ms = |v: Option<f64>| v.map_or("never".into(), |v| format!("{v:.1}"));
            for (r, label) in starts.iter().zip(["quinn's own PMTUD (default start)", "one F-PMTUD probe (px-pmtud)"]) {
                let _ = writeln!(
                    s,
                    "{label:<34} {:>7} {:>9.1} {:>12} {:>9} {:>9.1} {:>9.1} {:>6} {:>7.0}",
                    r.initial_payload,
                    r.probe_ms,
                    ms(r.to_full_ms),
                    ms(r.total_to_full_ms),
                    r.fetch_ms,
                    r.total_fetch_ms,
                    r.final_payload,
                    r.plpmtud_probes
                );
            }
        }
        s
    }

    /// JSON for `--json`.
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}
