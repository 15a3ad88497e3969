//! What the gateway reports: per-worker snapshots of the engine's counters
//! (published by each worker a few times a second, never per packet),
//! rendered as Prometheus text and as a one-line log summary.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use px_gateway::{Counters, DropReason, FlushReason, PortCounters};

/// One worker's published state.
#[derive(Debug, Clone, Default)]
pub struct WorkerSnapshot {
    pub counters: Counters,
    pub flows: usize,
    pub held_bytes: usize,
    /// Frames the kernel reported dropped on our sockets, and send failures.
    pub socket_drops: u64,
    pub send_errors: u64,
    /// Frames that came in truncated or with a bad vnet header.
    pub rx_errors: u64,
}

/// Snapshots of all workers.
#[derive(Debug, Clone)]
pub struct Shared {
    pub workers: Arc<Vec<Mutex<WorkerSnapshot>>>,
}

impl Shared {
    pub fn new(n: usize) -> Shared {
        Shared { workers: Arc::new((0..n).map(|_| Mutex::new(WorkerSnapshot::default())).collect()) }
    }

    pub fn publish(&self, i: usize, s: WorkerSnapshot) {
        if let Some(m) = self.workers.get(i) {
            *m.lock().unwrap_or_else(|p| p.into_inner()) = s;
        }
    }

    pub fn snapshots(&self) -> Vec<WorkerSnapshot> {
        self.workers.iter().map(|m| m.lock().unwrap_or_else(|p| p.into_inner()).clone()).collect()
    }

    pub fn total(&self) -> WorkerSnapshot {
        let mut t = WorkerSnapshot::default();
        for s in self.snapshots() {
            t.counters.accumulate(&s.counters);
            t.flows += s.flows;
            t.held_bytes += s.held_bytes;
            t.socket_drops += s.socket_drops;
            t.send_errors += s.send_errors;
            t.rx_errors += s.rx_errors;
        }
        t
    }
}

/// The Prometheus text exposition of all workers.
pub fn render(shared: &Shared) -> String {
    let snaps = shared.snapshots();
    let mut o = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, rows: Vec<(String, f64)>| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in rows {
            let _ = writeln!(o, "{name}{labels} {v}");
        }
    };
    let per_worker = |f: &dyn Fn(&WorkerSnapshot) -> f64| -> Vec<(String, f64)> {
        snaps.iter().enumerate().map(|(i, s)| (format!("{{worker=\"{i}\"}}"), f(s))).collect()
    };
    // Rows per worker, port and direction from a port's (rx, tx) pair.
    let per_port = |f: fn(&PortCounters) -> (u64, u64)| -> Vec<(String, f64)> {
        let mut rows = Vec::new();
        for (i, s) in snaps.iter().enumerate() {
            for (port, pc) in [("inner", &s.counters.inner), ("outer", &s.counters.outer)] {
                let (rx, tx) = f(pc);
                rows.push((format!("{{worker=\"{i}\",port=\"{port}\",dir=\"rx\"}}"), rx as f64));
                rows.push((format!("{{worker=\"{i}\",port=\"{port}\",dir=\"tx\"}}"), tx as f64));
            }
        }
        rows
    };
    metric(
        "px_gateway_packets_total",
        "counter",
        "Frames received and sent, per worker and port.",
        per_port(|pc| (pc.rx_packets, pc.tx_packets)),
    );
    metric(
        "px_gateway_bytes_total",
        "counter",
        "Bytes received and sent, per worker and port.",
        per_port(|pc| (pc.rx_bytes, pc.tx_bytes)),
    );
    let mut total = Counters::default();
    for s in &snaps {
        total.accumulate(&s.counters);
    }
    metric(
        "px_gateway_conversion_yield",
        "gauge",
        "Share of TCP data packets sent to the inner port that carry exactly the inner MSS.",
        vec![(String::new(), total.conversion_yield())],
    );
    type Family = (&'static str, &'static str, fn(&Counters) -> u64);
    let simple: [Family; 17] = [
        ("px_gateway_merged_in_total", "Input segments merged into held segments.", |c| c.merged_in),
        ("px_gateway_merged_out_total", "Merged segments sent to the inner port.", |c| c.merged_out),
        ("px_gateway_inner_tcp_data_out_total", "TCP data packets sent to the inner port.", |c| c.inner_tcp_data_out),
        ("px_gateway_inner_tcp_full_out_total", "... of which carried exactly the inner MSS.", |c| {
            c.inner_tcp_full_out
        }),
        ("px_gateway_split_in_total", "Segments cut in software.", |c| c.split_in),
        ("px_gateway_split_out_total", "Pieces produced by software splits.", |c| c.split_out),
        ("px_gateway_gso_out_total", "Super-packets handed to the kernel with a segment size.", |c| c.gso_out),
        ("px_gateway_mss_raised_total", "SYN MSS options raised (inbound).", |c| c.mss_raised),
        ("px_gateway_mss_clamped_total", "SYN MSS options clamped (outbound).", |c| c.mss_clamped),
        ("px_gateway_syn_without_mss_total", "SYNs without an MSS option (left alone).", |c| c.syn_without_mss),
        ("px_gateway_pmtu_learned_total", "Path MTUs learned from ICMP.", |c| c.pmtu_learned),
        ("px_gateway_pmtu_ignored_total", "ICMP too-big errors not believed (RFC 5927).", |c| c.pmtu_ignored),
        ("px_gateway_pmtu_passed_on_total", "ICMP too-big errors passed to the other workers.", |c| c.pmtu_passed_on),
        ("px_gateway_icmp_suppressed_total", "ICMP errors RFC 1812/4443 forbid, not sent.", |c| c.icmp_suppressed),
        ("px_gateway_fragments_out_total", "IPv4 fragments produced.", |c| c.fragments_out),
        ("px_gateway_icmp_sent_total", "ICMP errors sent.", |c| c.icmp_sent),
        ("px_gateway_bad_checksum_total", "Segments with bad TCP checksums passed unmerged.", |c| c.bad_checksum),
    ];
    for (name, help, f) in simple {
        metric(name, "counter", help, per_worker(&|s| f(&s.counters) as f64));
    }
    let mut rows = Vec::new();
    for r in FlushReason::ALL {
        rows.push((format!("{{reason=\"{}\"}}", r.name()), total.flushes(r) as f64));
    }
    metric("px_gateway_flushes_total", "counter", "Held segments sent before they were full, by reason.", rows);
    let mut rows = Vec::new();
    for r in DropReason::ALL {
        rows.push((format!("{{reason=\"{}\"}}", r.name()), total.drops(r) as f64));
    }
    metric("px_gateway_drops_total", "counter", "Packets dropped, by reason.", rows);
    let cv: [Family; 8] = [
        ("px_gateway_caravan_packed_in_total", "Inbound datagrams packed into caravans.", |c| c.caravan.packed_in),
        ("px_gateway_caravans_built_total", "Caravans sent to the inner port.", |c| c.caravan.built),
        ("px_gateway_caravans_built_full_total", "... of which full (the caravan yield's numerator).", |c| {
            c.caravan.built_full
        }),
        ("px_gateway_caravan_datagrams_built_total", "Datagrams in the caravans built.", |c| c.caravan.built_datagrams),
        ("px_gateway_caravan_singles_total", "Holds of one datagram, sent plain.", |c| c.caravan.singles),
        ("px_gateway_caravan_timeouts_total", "Caravans sent at the merge timeout.", |c| c.caravan.timeouts),
        ("px_gateway_caravans_opened_total", "Outbound caravans unpacked.", |c| c.caravan.opened),
        ("px_gateway_caravan_datagrams_opened_total", "Datagrams from the caravans unpacked.", |c| {
            c.caravan.opened_datagrams
        }),
    ];
    for (name, help, f) in cv {
        metric(name, "counter", help, per_worker(&|s| f(&s.counters) as f64));
    }
    metric(
        "px_gateway_caravan_yield",
        "gauge",
        "Share of caravans built that were full.",
        vec![(String::new(), total.caravan.caravan_yield())],
    );
    let mut rows = Vec::new();
    for r in px_wire::caravan::Malformed::ALL {
        rows.push((format!("{{reason=\"{}\"}}", r.name()), total.caravan.malformed(r) as f64));
    }
    metric("px_gateway_caravans_malformed_total", "counter", "Outbound caravans dropped whole, by reason.", rows);
    metric("px_gateway_held_bytes", "gauge", "Payload bytes held now.", per_worker(&|s| s.held_bytes as f64));
    metric("px_gateway_flows", "gauge", "Flows tracked now.", per_worker(&|s| s.flows as f64));
    metric(
        "px_gateway_socket_drops_total",
        "counter",
        "Frames the kernel dropped on our sockets.",
        per_worker(&|s| s.socket_drops as f64),
    );
    metric(
        "px_gateway_send_errors_total",
        "counter",
        "Frames that could not be sent.",
        per_worker(&|s| s.send_errors as f64),
    );
    metric(
        "px_gateway_rx_errors_total",
        "counter",
        "Frames received truncated or with a bad vnet header.",
        per_worker(&|s| s.rx_errors as f64),
    );
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
    )
}

/// Serves `GET /metrics` on `addr` until `stop` is set.
pub fn serve(addr: SocketAddr, shared: Shared, stop: Arc<AtomicBool>) -> std::io::Result<std::thread::JoinHandle<()>> {
    let listener = TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    std::thread::Builder::new().name("px-metrics".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut reader = BufReader::new(&stream);
                    let mut line = String::new();
                    let _ = reader.read_line(&mut line);
                    // Skip the request headers.
                    let mut h = String::new();
                    while reader.read_line(&mut h).is_ok_and(|n| n > 2) {
                        h.clear();
                    }
                    let (status, body) = if line.starts_with("GET /metrics") || line.starts_with("GET / ") {
                        ("200 OK", render(&shared))
                    } else {
                        ("404 Not Found", "try /metrics\n".to_string())
                    };
                    let mut w = &stream;
                    let _ = write!(
                        w,
                        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(50)),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_has_every_family_and_parses_as_lines() {
        let sh = Shared::new(2);
        let mut s = WorkerSnapshot { flows: 3, ..Default::default() };
        s.counters.inner_tcp_data_out = 10;
        s.counters.inner_tcp_full_out = 9;
        s.counters.outer.rx_packets = 60;
        s.counters.inner.tx_bytes = 5000;
        sh.publish(1, s);
        let text = render(&sh);
        assert!(text.contains("px_gateway_conversion_yield 0.9\n"), "{text}");
        assert!(text.contains("px_gateway_packets_total{worker=\"1\",port=\"outer\",dir=\"rx\"} 60\n"));
        assert!(text.contains("px_gateway_bytes_total{worker=\"1\",port=\"inner\",dir=\"tx\"} 5000\n"));
        assert!(text.contains("px_gateway_bytes_total{worker=\"0\",port=\"outer\",dir=\"rx\"} 0\n"));
        assert!(text.contains("px_gateway_flows{worker=\"1\"} 3\n"));
        assert!(text.contains("px_gateway_drops_total{reason=\"too_big_df\"} 0\n"));
        assert!(text.contains("px_gateway_caravans_malformed_total{reason=\"overrun\"} 0\n"));
        assert!(text.contains("px_gateway_caravan_yield 0\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (name_labels, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
            assert!(name_labels.starts_with("px_gateway_"), "{line}");
        }
        assert_eq!(sh.total().flows, 3);
    }

    #[test]
    fn serves_metrics_over_http() {
        let sh = Shared::new(1);
        let stop = Arc::new(AtomicBool::new(false));
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        let h = serve(addr, sh, stop.clone()).unwrap();
        let mut body = String::new();
        for _ in 0..50 {
            if let Ok(mut s) = std::net::TcpStream::connect(addr) {
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
                std::io::Read::read_to_string(&mut s, &mut body).unwrap();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        assert!(body.contains("px_gateway_conversion_yield"));
    }
}
