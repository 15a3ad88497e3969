//! What `px status` shows of a running gateway: one [`Status`], built by
//! the gateway from what its workers published (no I/O here, time passed
//! in), sent as JSON over the control socket ([`super::control`]), and
//! rendered as text by [`Status::render`] on the client's side, so that
//! the text and `--json` always show the same model.
//!
//! Rates are over the last interval the control thread sampled (about a
//! second: [`Status::interval_s`]), not since start.
//!
//! The kernel fast path (issue 28) will report per-flow offload state in
//! [`FlowStatus::offloaded`] and its totals in [`Status::offload`]; until
//! then both say that nothing is offloaded.

use std::fmt::Write as _;
use std::time::Duration;

use px_gateway::{DropReason, FlowView, Port, PortCounters};
use serde::{Deserialize, Serialize};

use super::metrics::{Scrape, WorkerSnapshot, si};

/// How many flows `px status` lists.
pub const LARGEST_FLOWS: usize = 10;

/// A running gateway, as `px status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// `px` version of the running gateway.
    pub version: String,
    pub pid: u32,
    pub uptime_s: f64,
    pub config: ConfigStatus,
    /// Outer port first, then inner.
    pub ports: Vec<PortStatus>,
    /// What the rates are over, in seconds (0: no interval yet).
    pub interval_s: f64,
    pub engine: EngineStatus,
    /// The flows that carried the most payload, largest first, from all
    /// workers (at most [`LARGEST_FLOWS`]).
    pub flows: Vec<FlowStatus>,
    /// Path MTUs learned from ICMP, in force now.
    pub path_mtus: Vec<PathMtu>,
    /// The kernel fast path's totals.
    pub offload: OffloadStatus,
}

/// The running configuration's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigStatus {
    /// Reloads applied since start: 0 is the configuration it started with.
    pub generation: u64,
    /// Reloads refused (a key fixed at start) and invalid.
    pub reloads_refused: u64,
    pub reloads_invalid: u64,
    pub workers: usize,
    /// GRO/GSO on the ports (`gro_gso`).
    pub gro_gso: bool,
    /// The kernel fast path (`offload`: "off" or "on").
    pub offload: String,
    pub merge_timeout_us: u64,
    /// The source of ICMP errors; `None`: large packets with DF from
    /// inside are dropped without one (counted as `no_source`).
    pub icmp_source_v4: Option<String>,
    pub icmp_source_v6: Option<String>,
    /// The metrics endpoint, if any.
    pub metrics: Option<String>,
}

/// One port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PortStatus {
    /// `outer` or `inner`.
    pub role: String,
    /// The interface.
    pub name: String,
    pub mtu: u16,
    /// Frames on the wire (as `ip -s link` counts them): the workers'
    /// and the kernel fast path's.
    pub wire: PortCounters,
    /// The kernel fast path's share of `wire`: what its program
    /// redirected (zero without it).
    #[serde(default)]
    pub kernel: PortCounters,
    /// Frames through the gateway's sockets (a super-packet counts once).
    pub super_packets: PortCounters,
    /// The link: `up`, `no carrier`, `down` (administratively), `held
    /// down` (by link-fault pass-through: the other port lost its
    /// carrier), `unknown` (not watched: the DPDK datapath).
    #[serde(default)]
    pub link: String,
    /// Wire rates over the last interval.
    pub rx_pps: f64,
    pub tx_pps: f64,
    pub rx_bps: f64,
    pub tx_bps: f64,
}

/// The engines' totals (all workers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineStatus {
    pub flows: usize,
    pub held_bytes: usize,
    /// The conversion yield; `None` before the first TCP data to the inner port.
    pub conversion_yield: Option<f64>,
    /// Received frames merged, and inner segments they made.
    pub merged_in: u64,
    pub merged_out: u64,
    /// Segments cut in software and their pieces; super-packets handed to GSO.
    pub split_in: u64,
    pub split_out: u64,
    pub gso_out: u64,
    pub forwarded: u64,
    /// Drops by reason (only reasons with drops).
    pub drops: Vec<(String, u64)>,
    pub icmp_sent: u64,
    /// ICMP errors owed but not sent: no source address configured.
    pub icmp_no_source: u64,
    /// Connections not translated because their inner host advertised an
    /// MSS no larger than the outer port's (`inner_mss_small`; issue 38).
    #[serde(default)]
    pub inner_mss_small: u64,
    pub socket_drops: u64,
    pub send_errors: u64,
    pub rx_errors: u64,
}

/// One flow: the engine's view, and what the kernel fast path does with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowStatus {
    /// The worker whose engine carries it.
    pub worker: usize,
    #[serde(flatten)]
    pub flow: FlowView,
    /// Whether the kernel fast path carries the flow's bytes now (in
    /// either direction; the segment sizes are in `flow`). `false`: all
    /// of it crosses user space.
    pub offloaded: bool,
}

/// The kernel fast path's totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OffloadStatus {
    /// Whether a fast path is running (`false` until issue 28).
    pub active: bool,
    /// Flows it carries now.
    pub flows: u64,
    /// Flows (or directions of one) it was given, and handed back, since
    /// start.
    pub installed: u64,
    pub returned: u64,
}

/// One learned path MTU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathMtu {
    /// The port toward which the path lies (`outer`, `inner`).
    pub toward: String,
    pub destination: String,
    pub mtu: u16,
    pub expires_in_s: u64,
}

/// What the gateway knows of itself that no worker publishes.
#[derive(Debug, Clone)]
pub struct Identity {
    pub version: String,
    pub pid: u32,
    /// (outer name, eMTU), (inner name, iMTU).
    pub outer: (String, u16),
    pub inner: (String, u16),
}

fn port_name(p: Port) -> &'static str {
    match p {
        Port::Inner => "inner",
        Port::Outer => "outer",
    }
}

/// A port's link state ([`super::metrics::ProcessCounters::link_state`]) as `px status` names it.
fn link_name(state: u64, held_down: bool) -> &'static str {
    use super::metrics::{LINK_DOWN, LINK_NO_CARRIER, LINK_UP};
    match state {
        _ if held_down => "held down",
        LINK_UP => "up",
        LINK_NO_CARRIER => "no carrier",
        LINK_DOWN => "down",
        _ => "unknown",
    }
}

impl Status {
    /// The status from a scrape `now`, the previous sample `prev` taken
    /// `dt` before it (for rates), and what the gateway knows of itself.
    pub fn build(
        id: &Identity,
        cfg: &ConfigStatus,
        uptime: Duration,
        now: &Scrape,
        prev: Option<(&WorkerSnapshot, Duration)>,
        path_mtus: Vec<(Port, std::net::IpAddr, u16, Duration)>,
    ) -> Status {
        let t = &now.total;
        let secs = prev.map_or(0.0, |(_, dt)| dt.as_secs_f64());
        let rate = |a: u64, b: Option<u64>| match b {
            Some(b) if secs > 0.0 => a.saturating_sub(b) as f64 / secs,
            _ => 0.0,
        };
        let ports = [(Port::Outer, &id.outer), (Port::Inner, &id.inner)]
            .into_iter()
            .map(|(p, (name, mtu))| {
                let w = *t.wire(p);
                let before = prev.map(|(s, _)| *s.wire(p));
                PortStatus {
                    role: port_name(p).to_string(),
                    name: name.clone(),
                    mtu: *mtu,
                    wire: w,
                    kernel: t.kernel_wire[p as usize],
                    link: link_name(now.link.state[p as usize], now.link.held_down[p as usize] > 0).to_string(),
                    super_packets: *t.counters.port(p),
                    rx_pps: rate(w.rx_packets, before.map(|b| b.rx_packets)),
                    tx_pps: rate(w.tx_packets, before.map(|b| b.tx_packets)),
                    rx_bps: 8.0 * rate(w.rx_bytes, before.map(|b| b.rx_bytes)),
                    tx_bps: 8.0 * rate(w.tx_bytes, before.map(|b| b.tx_bytes)),
                }
            })
            .collect();
        let c = &t.counters;
        let engine = EngineStatus {
            flows: t.flows,
            held_bytes: t.held_bytes,
            conversion_yield: (c.inner_tcp_data_out > 0).then(|| c.conversion_yield()),
            merged_in: c.merged_in,
            merged_out: c.merged_out,
            split_in: c.split_in,
            split_out: c.split_out,
            gso_out: c.gso_out,
            forwarded: c.forwarded,
            drops: DropReason::ALL
                .iter()
                .map(|r| (r.name().to_string(), c.drops(*r)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            icmp_sent: c.icmp_sent,
            icmp_no_source: c.icmp_no_source,
            inner_mss_small: c.inner_mss_small,
            socket_drops: t.socket_drops,
            send_errors: t.send_errors,
            rx_errors: t.rx_errors,
        };
        let mut flows: Vec<FlowStatus> = now
            .workers
            .iter()
            .enumerate()
            .flat_map(|(worker, w)| {
                w.largest_flows.iter().map(move |f| FlowStatus {
                    worker,
                    flow: f.clone(),
                    offloaded: f.kernel_segment_in.is_some() || f.kernel_segment_out.is_some(),
                })
            })
            .collect();
        flows.sort_by(|a, b| {
            let size = |f: &FlowStatus| f.flow.bytes_in + f.flow.bytes_out;
            size(b).cmp(&size(a))
        });
        flows.truncate(LARGEST_FLOWS);
        Status {
            version: id.version.clone(),
            pid: id.pid,
            uptime_s: uptime.as_secs_f64(),
            config: cfg.clone(),
            ports,
            interval_s: secs,
            engine,
            flows,
            path_mtus: path_mtus
                .into_iter()
                .map(|(p, dst, mtu, left)| PathMtu {
                    toward: port_name(p).to_string(),
                    destination: dst.to_string(),
                    mtu,
                    expires_in_s: left.as_secs(),
                })
                .collect(),
            offload: OffloadStatus {
                active: cfg.offload == "on",
                flows: now.workers.iter().map(|w| w.in_kernel as u64).sum(),
                installed: t.counters.fast_path.installed,
                returned: t.counters.fast_path.returned.iter().sum(),
            },
        }
    }

    /// The text `px status` prints.
    pub fn render(&self) -> String {
        let mut o = String::new();
        self.render_settings(&mut o);
        self.render_ports(&mut o);
        self.render_engine(&mut o);
        self.render_flows(&mut o);
        self.render_path_mtus(&mut o);
        let _ = writeln!(
            o,
            "\nkernel fast path: {}",
            if self.offload.active {
                format!(
                    "on; {} flow(s) in the kernel now, {} installs and {} hand-backs since start",
                    self.offload.flows, self.offload.installed, self.offload.returned
                )
            } else {
                "off (fast_path = \"off\": every packet crosses user space)".to_string()
            }
        );
        o
    }

    /// Who runs, since when, and with what settings.
    fn render_settings(&self, o: &mut String) {
        let c = &self.config;
        let up = self.uptime_s as u64;
        let _ = writeln!(
            o,
            "px gateway {} (PID {}), up {}h{:02}m{:02}s, configuration generation {} ({} reload(s) refused, {} invalid)",
            self.version,
            self.pid,
            up / 3600,
            up / 60 % 60,
            up % 60,
            c.generation,
            c.reloads_refused,
            c.reloads_invalid
        );
        let icmp = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".to_string());
        let _ = writeln!(
            o,
            "settings: {} worker(s), {}, merge timeout {} µs, ICMP source v4 {} v6 {}{}",
            c.workers,
            format_args!("GRO/GSO {}, kernel fast path {}", if c.gro_gso { "on" } else { "off" }, c.offload),
            c.merge_timeout_us,
            icmp(&c.icmp_source_v4),
            icmp(&c.icmp_source_v6),
            c.metrics.as_ref().map(|m| format!(", metrics http://{m}/metrics")).unwrap_or_default()
        );
        if c.icmp_source_v4.is_none() || c.icmp_source_v6.is_none() {
            let _ = writeln!(
                o,
                "WARNING: no ICMP source address for {}: packets too big for the outside with DF set (e.g. QUIC) are dropped without \"too big\" ({} so far)",
                match (&c.icmp_source_v4, &c.icmp_source_v6) {
                    (None, None) => "IPv4 and IPv6",
                    (None, _) => "IPv4",
                    _ => "IPv6",
                },
                self.engine.icmp_no_source
            );
        }
    }

    /// Each port's wire counts and rates.
    fn render_ports(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "\nports (wire frames, as ip -s link counts them; rates over the last {:.1} s; super rx / tx: frames through\n\
             the gateway's sockets, a GRO or GSO super-packet counting once; kernel rx / tx: of the wire frames, those\n\
             the kernel fast path carried)",
            self.interval_s
        );
        let _ = writeln!(
            o,
            "  {:<6} {:<15} {:>6} {:>14} {:>10} {:>12} {:>14} {:>10} {:>12} {:>21} {:>21}  link",
            "port",
            "interface",
            "MTU",
            "rx packets",
            "rx pps",
            "rx bit/s",
            "tx packets",
            "tx pps",
            "tx bit/s",
            "super rx / tx",
            "kernel rx / tx",
        );
        for p in &self.ports {
            let _ = writeln!(
                o,
                "  {:<6} {:<15} {:>6} {:>14} {:>10} {:>12} {:>14} {:>10} {:>12} {:>21} {:>21}  {}",
                p.role,
                p.name,
                p.mtu,
                p.wire.rx_packets,
                si(p.rx_pps),
                si(p.rx_bps),
                p.wire.tx_packets,
                si(p.tx_pps),
                si(p.tx_bps),
                format!("{} / {}", p.super_packets.rx_packets, p.super_packets.tx_packets),
                if self.offload.active {
                    format!("{} / {}", p.kernel.rx_packets, p.kernel.tx_packets)
                } else {
                    "-".to_string()
                },
                p.link,
            );
        }
    }

    /// What the engines did, and what was dropped.
    fn render_engine(&self, o: &mut String) {
        let e = &self.engine;
        let _ = writeln!(
            o,
            "\nengine: {} flow(s), {} B held, yield {}, inbound merge {} frames -> {} inner segments, outbound split {} in software -> {} pieces, {} to GSO, {} forwarded",
            e.flows,
            e.held_bytes,
            e.conversion_yield.map_or("-".to_string(), |y| format!("{y:.3}")),
            e.merged_in,
            e.merged_out,
            e.split_in,
            e.split_out,
            e.gso_out,
            e.forwarded
        );
        let drops: Vec<String> = e.drops.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let _ = writeln!(
            o,
            "drops: {}; ICMP errors sent {}, not sent for want of a source {}; socket drops {}, send errors {}, receive errors {}",
            if drops.is_empty() { "none".to_string() } else { drops.join(", ") },
            e.icmp_sent,
            e.icmp_no_source,
            e.socket_drops,
            e.send_errors,
            e.rx_errors
        );
        if e.inner_mss_small > 0 {
            let outer_mtu = self.ports.iter().find(|p| p.role == "outer").map_or(0, |p| p.mtu);
            let _ = writeln!(
                o,
                "WARNING: {} connection(s) not translated: their inner host advertised an MSS of at most {} (IPv4) \
                 although the inner port carries more; a path MTU the host cached after a \"too big\"? \
                 (docs/operations.md, \"Translation that stops\")",
                e.inner_mss_small,
                outer_mtu.saturating_sub(40)
            );
        }
    }

    /// The largest flows, one line each.
    fn render_flows(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "\nlargest flows (TCP payload bytes; in = from the outer port toward the inner host, out = the other way;\n\
             max seg: the largest segment seen; MSS inner/outer: what the inner and the outer host advertised)"
        );
        if self.flows.is_empty() {
            let _ = writeln!(o, "  none");
        } else {
            let _ = writeln!(
                o,
                "  {:<41} {:<41} {:<11} {:>12} {:>12} {:>10} {:>11} {:>15} {:<8} {:>8} {:>7} offloaded",
                "outer",
                "inner",
                "state",
                "bytes in",
                "bytes out",
                "max seg in",
                "max seg out",
                "MSS inner/outer",
                "merging",
                "held B",
                "idle ms",
            );
            let mss = |m: Option<u16>| m.map_or("-".to_string(), |m| m.to_string());
            for f in &self.flows {
                let v = &f.flow;
                let _ = writeln!(
                    o,
                    "  {:<41} {:<41} {:<11} {:>12} {:>12} {:>10} {:>11} {:>15} {:<8} {:>8} {:>7} {}",
                    v.outer.to_string(),
                    v.inner.to_string(),
                    v.state,
                    v.bytes_in,
                    v.bytes_out,
                    v.largest_segment_in,
                    v.largest_segment_out,
                    format!("{}/{}", mss(v.inner_mss), mss(v.outer_mss)),
                    if v.merging { "yes" } else { "no" },
                    v.held_bytes,
                    v.idle_ms,
                    match (v.kernel_segment_in, v.kernel_segment_out) {
                        (None, None) => "no".to_string(),
                        (i, o) => format!("in {} / out {}", mss(i), mss(o)),
                    }
                );
                if let Some(why) = &v.not_translated {
                    let _ = writeln!(o, "    not translated: {why}");
                }
                if self.offload.active {
                    if let Some(why) = &v.not_offloaded {
                        let _ = writeln!(o, "    not offloaded: {why}");
                    }
                    if v.hand_backs > 0 || v.kernel_bytes_in + v.kernel_bytes_out > 0 {
                        let _ = writeln!(
                            o,
                            "    kernel: {} B in, {} B out; {} hand-back(s){}",
                            v.kernel_bytes_in,
                            v.kernel_bytes_out,
                            v.hand_backs,
                            v.last_hand_back.as_ref().map(|r| format!(", the last for {r}")).unwrap_or_default()
                        );
                    }
                }
            }
        }
    }

    fn render_path_mtus(&self, o: &mut String) {
        let _ = writeln!(o, "\npath MTUs learned");
        if self.path_mtus.is_empty() {
            let _ = writeln!(o, "  none");
        }
        for p in &self.path_mtus {
            let _ = writeln!(
                o,
                "  toward {:<6} {:<40} MTU {:>5}, for {} s more",
                p.toward, p.destination, p.mtu, p.expires_in_s
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::metrics::Shared;

    fn id() -> Identity {
        Identity { version: "0.1.0".into(), pid: 42, outer: ("px-gwo".into(), 1500), inner: ("px-gwi".into(), 9000) }
    }

    fn cfg() -> ConfigStatus {
        ConfigStatus {
            generation: 2,
            reloads_refused: 1,
            reloads_invalid: 0,
            workers: 2,
            gro_gso: true,
            offload: "off".into(),
            merge_timeout_us: 500,
            icmp_source_v4: Some("198.51.100.254".into()),
            icmp_source_v6: None,
            metrics: None,
        }
    }

    fn flow(bytes_in: u64, port: u16) -> FlowView {
        FlowView {
            outer: format!("198.51.100.1:{port}").parse().unwrap(),
            inner: "[2001:db8::2]:80".parse().unwrap(),
            bytes_in,
            bytes_out: 10,
            kernel_bytes_in: 0,
            kernel_bytes_out: 0,
            hand_backs: 0,
            last_hand_back: None,
            not_offloaded: None,
            frames_in: 3,
            frames_out: 1,
            largest_segment_in: 1448,
            largest_segment_out: 8948,
            inner_mss: Some(8960),
            outer_mss: Some(1460),
            state: "established".into(),
            merging: true,
            held_bytes: 0,
            idle_ms: 5,
            kernel_segment_in: None,
            kernel_segment_out: None,
            not_translated: None,
        }
    }

    #[test]
    fn rates_flows_and_warnings_come_from_the_samples() {
        let sh = Shared::new(2);
        let mut a = WorkerSnapshot::default();
        a.wire[Port::Outer as usize].rx_packets = 3000;
        a.wire[Port::Outer as usize].rx_bytes = 3000 * 1514;
        a.largest_flows = vec![flow(500, 1), flow(9000, 2)];
        sh.publish(0, a);
        sh.publish(1, WorkerSnapshot { largest_flows: vec![flow(700, 3)], ..Default::default() });
        let mut before = WorkerSnapshot::default();
        before.wire[Port::Outer as usize].rx_packets = 1000;
        let pmtu = vec![(Port::Outer, "203.0.113.9".parse().unwrap(), 1280, Duration::from_secs(598))];
        let s = Status::build(
            &id(),
            &cfg(),
            Duration::from_secs(3725),
            &sh.scrape(),
            Some((&before, Duration::from_secs(2))),
            pmtu,
        );
        assert_eq!(s.ports[0].role, "outer");
        assert_eq!(s.ports[0].rx_pps, 1000.0);
        assert_eq!(s.ports[1].rx_pps, 0.0);
        // Largest first, across workers.
        let order: Vec<u16> = s.flows.iter().map(|f| f.flow.outer.port()).collect();
        assert_eq!(order, [2, 3, 1]);
        assert_eq!(s.flows[1].worker, 1);
        let text = s.render();
        assert!(text.starts_with("px gateway 0.1.0 (PID 42), up 1h02m05s, configuration generation 2"), "{text}");
        assert!(text.contains("WARNING: no ICMP source address for IPv6"), "{text}");
        assert!(text.contains("  outer  px-gwo"), "{text}");
        assert!(text.contains("toward outer  203.0.113.9"), "{text}");
        assert!(text.contains("kernel fast path: off"), "{text}");
        // Issue 38 item 5: every column says what it counts.
        for label in [
            "super rx / tx",
            "a GRO or GSO super-packet counting once",
            "max seg in",
            "MSS inner/outer",
            "what the inner and the outer host advertised",
        ] {
            assert!(text.contains(label), "{label:?} not in {text}");
        }
        assert!(text.contains("198.51.100.1:2"), "{text}");
        // The JSON is the same model.
        let back: Status = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    /// Issue 38 item 1: with the kernel fast path, each port's counts are
    /// the workers' and the program's together (as the device counts),
    /// the program's share beside them, in the rates, the text and the
    /// metrics (`worker="kernel"`); each port's link state is named.
    #[test]
    fn the_kernel_fast_paths_frames_count_in_each_port_and_beside_it() {
        use crate::gateway::metrics::{KernelScrape, render_scrape};
        let sh = Shared::new(1);
        let mut w = WorkerSnapshot::default();
        w.wire[Port::Outer as usize].rx_packets = 100;
        w.wire[Port::Outer as usize].rx_bytes = 100 * 1514;
        w.wire[Port::Inner as usize].tx_packets = 20;
        w.largest_flows = vec![
            FlowView {
                kernel_bytes_in: 9_000_000,
                hand_backs: 2,
                last_hand_back: Some("flags".into()),
                ..flow(9_100_000, 1)
            },
            FlowView { not_offloaded: Some("closing".into()), ..flow(700, 2) },
        ];
        sh.publish(0, w);
        use std::sync::atomic::Ordering::Relaxed;
        sh.process.link_state[Port::Outer as usize].store(crate::gateway::metrics::LINK_NO_CARRIER, Relaxed);
        sh.process.link_state[Port::Inner as usize].store(crate::gateway::metrics::LINK_DOWN, Relaxed);
        sh.process.held_down[Port::Inner as usize].store(1, Relaxed);
        let mut k = KernelScrape::default();
        k.ports[Port::Outer as usize] =
            PortCounters { rx_packets: 6000, rx_bytes: 6000 * 1514, tx_packets: 7, tx_bytes: 7 * 66 };
        k.ports[Port::Inner as usize] =
            PortCounters { rx_packets: 9, rx_bytes: 9 * 86, tx_packets: 1000, tx_bytes: 1000 * 9014 };
        let scrape = sh.scrape_with(Some(k));
        let before = WorkerSnapshot::default();
        let cfg = ConfigStatus { offload: "on".into(), ..cfg() };
        let s =
            Status::build(&id(), &cfg, Duration::ZERO, &scrape, Some((&before, Duration::from_secs(1))), Vec::new());
        let (outer, inner) = (&s.ports[0], &s.ports[1]);
        assert_eq!((outer.wire.rx_packets, outer.wire.rx_bytes, outer.wire.tx_packets), (6100, 6100 * 1514, 7));
        assert_eq!((inner.wire.rx_packets, inner.wire.tx_packets, inner.wire.tx_bytes), (9, 1020, 1000 * 9014));
        assert_eq!(outer.kernel.rx_packets, 6000);
        assert_eq!(inner.kernel.tx_packets, 1000);
        assert_eq!(outer.rx_pps, 6100.0);
        let text = s.render();
        assert!(text.contains("kernel rx / tx"), "{text}");
        assert!(text.contains("6000 / 7"), "{text}");
        assert!(text.contains("    kernel: 9000000 B in, 0 B out; 2 hand-back(s), the last for flags"), "{text}");
        assert!(text.contains("    not offloaded: closing"), "{text}");
        assert_eq!((outer.link.as_str(), inner.link.as_str()), ("no carrier", "held down"));
        assert!(text.contains("  no carrier\n") && text.contains("  held down\n"), "{text}");
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["flows"][0]["kernel_bytes_in"], 9_000_000);
        assert_eq!(v["flows"][0]["last_hand_back"], "flags");
        assert_eq!(v["flows"][1]["not_offloaded"], "closing");
        let back: Status = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let m = render_scrape(&scrape);
        assert!(m.contains("px_gateway_packets_total{worker=\"kernel\",port=\"outer\",direction=\"rx\"} 6000"), "{m}");
        assert!(m.contains("px_gateway_bytes_total{worker=\"kernel\",port=\"inner\",direction=\"tx\"} 9014000"), "{m}");
        assert!(m.contains("px_gateway_packets_total{worker=\"0\",port=\"outer\",direction=\"rx\"} 100"), "{m}");
    }

    #[test]
    fn no_interval_means_no_rate_and_no_yield_without_data() {
        let sh = Shared::new(1);
        let s = Status::build(&id(), &cfg(), Duration::ZERO, &sh.scrape(), None, Vec::new());
        assert_eq!(s.interval_s, 0.0);
        assert_eq!(s.engine.conversion_yield, None);
        assert!(s.render().contains("yield -,"));
    }

    /// Issue 38 item 2: a connection whose inner host advertised the outer
    /// MSS is named in its flow's line and counted in a warning; the JSON
    /// carries both (`engine.inner_mss_small`, the flow's `not_translated`).
    #[test]
    fn connections_left_untranslated_by_a_small_inner_mss_are_named() {
        let sh = Shared::new(1);
        let mut a = WorkerSnapshot::default();
        a.counters.inner_mss_small = 2;
        let small = FlowView {
            inner_mss: Some(1460),
            not_translated: Some("the inner host advertised MSS 1460".into()),
            ..flow(900, 7)
        };
        a.largest_flows = vec![flow(500, 1), small];
        sh.publish(0, a);
        let s = Status::build(&id(), &cfg(), Duration::from_secs(1), &sh.scrape(), None, Vec::new());
        let text = s.render();
        assert!(
            text.contains(
                "WARNING: 2 connection(s) not translated: their inner host advertised an MSS of at most 1460"
            ),
            "{text}"
        );
        assert!(text.contains("    not translated: the inner host advertised MSS 1460"), "{text}");
        assert_eq!(text.matches("not translated: the inner host").count(), 1, "{text}");
        let v: serde_json::Value = serde_json::to_value(&s).unwrap();
        assert_eq!(v["engine"]["inner_mss_small"], 2);
        assert_eq!(v["flows"][0]["not_translated"], "the inner host advertised MSS 1460");
        assert_eq!(v["flows"][1]["not_translated"], serde_json::Value::Null);
        let quiet = Status::build(&id(), &cfg(), Duration::from_secs(1), &Shared::new(1).scrape(), None, Vec::new());
        assert!(!quiet.render().contains("not translated"));
    }
}
