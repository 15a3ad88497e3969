//! The F-PMTUD responder daemon (`px fpmtud`): px-pmtud's sans-I/O
//! [`Responder`] driven over px-io's UDP sockets.
//!
//! Ordinary UDP sockets (unprivileged): one IPv4 and one IPv6 socket on the
//! port unless `--bind` names addresses. The kernel reassembles fragmented
//! probes and reports the largest fragment's IP length with
//! `IP_RECVFRAGSIZE` (`IPV6_RECVFRAGSIZE`); `IP_PKTINFO` gives the arrival
//! interface (whose MTU the report carries) and the address the probe was
//! sent to, which is where the reply comes from.
//!
//! Guarantees (on top of the core's): the daemon counts the IP bytes it
//! received in probes and the IP bytes it sent in replies, and never sends
//! a reply the core did not produce, so the core's no-amplification rule
//! holds on the wire (counters `ip_bytes_sent` <=
//! `ip_bytes_received`); it stops cleanly when its stop flag is
//! set (SIGINT/SIGTERM in `px fpmtud`).

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use px_io::{FragmentCapture, Poller, UdpSocket, ifindex_mtu};
use px_pmtud::fpmtud::responder::{Arrival, Pieces, Responder, ResponderConfig, ResponderStats};
use px_pmtud::fpmtud::wire::{DEFAULT_PORT, FragmentRecord};

/// Daemon settings.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Addresses to listen on (port included).
    pub bind: Vec<SocketAddr>,
    /// Replies per second per source address.
    pub rate_per_sec: u32,
    /// Replies a source may get at once.
    pub burst: u32,
    /// Also record every IPv4 fragment from a packet socket (root), so
    /// reports list each fragment's offset and length.
    pub packet_socket: bool,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            bind: vec![
                (Ipv4Addr::UNSPECIFIED, DEFAULT_PORT).into(),
                SocketAddr::from((Ipv6Addr::UNSPECIFIED, DEFAULT_PORT)),
            ],
            rate_per_sec: ResponderConfig::default().rate_per_sec,
            burst: ResponderConfig::default().burst,
            packet_socket: false,
        }
    }
}

/// Most arrival interfaces with their own responder core (each reports its
/// own link MTU); more are answered by the core of interface 0 ("unknown").
const MAX_INTERFACES: usize = 64;

/// How often [`Daemon::run`] looks at its stop flag when nothing arrives.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// One listening socket and a responder core per arrival interface.
#[derive(Debug)]
struct Listener {
    sock: UdpSocket,
    cores: HashMap<u32, Responder>,
}

/// The running responder.
#[derive(Debug)]
pub struct Daemon {
    listeners: Vec<Listener>,
    capture: Option<FragmentCapture>,
    fragment_reports: u64,
    config: DaemonConfig,
    stop: Arc<AtomicBool>,
    ip_bytes_received: u64,
    ip_bytes_sent: u64,
    send_errors: u64,
    truncated_input: u64,
}

impl Daemon {
    /// Opens the sockets. An IPv6 wildcard that cannot be bound (IPv6
    /// disabled) is skipped when an IPv4 socket exists.
    pub fn open(config: &DaemonConfig) -> io::Result<Daemon> {
        let mut listeners = Vec::new();
        let mut last_err = None;
        for &addr in &config.bind {
            // Errors name the address (`--bind`) they are about.
            let named = |e: io::Error| io::Error::new(e.kind(), format!("{addr}: {e}"));
            match UdpSocket::bind(addr).and_then(|s| s.enable_arrival_info().map(|()| s)) {
                Ok(sock) => listeners.push(Listener { sock, cores: HashMap::new() }),
                Err(e) if config.bind.len() > 1 && addr.ip().is_unspecified() && addr.is_ipv6() => {
                    last_err = Some(named(e))
                }
                Err(e) => return Err(named(e)),
            }
        }
        if listeners.is_empty() {
            return Err(last_err.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "nothing to bind")));
        }
        let capture = match config.packet_socket {
            true => Some(FragmentCapture::open().map_err(|e| {
                let why = if e.kind() == io::ErrorKind::PermissionDenied {
                    " (it needs CAP_NET_RAW: run as root, or grant the capability)"
                } else {
                    ""
                };
                io::Error::new(e.kind(), format!("the packet socket of --packet-socket: {e}{why}"))
            })?),
            false => None,
        };
        Ok(Daemon {
            listeners,
            capture,
            fragment_reports: 0,
            config: config.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            ip_bytes_received: 0,
            ip_bytes_sent: 0,
            send_errors: 0,
            truncated_input: 0,
        })
    }

    /// The addresses actually bound (ports resolved).
    #[must_use]
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().filter_map(|l| l.sock.local_addr().ok()).collect()
    }

    /// Setting this flag makes [`Daemon::run`] return within 100 ms.
    #[must_use]
    pub fn stop_handle(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Serves until the stop flag is set.
    pub fn run(&mut self) -> io::Result<()> {
        let mut buf = vec![0u8; 65536];
        let mut poller = Poller::new();
        for l in &self.listeners {
            poller.add(l.sock.as_fd());
        }
        // The capture socket is polled too so that its queue (every IPv4
        // packet of the host) is emptied even when no probe comes.
        if let Some(c) = &self.capture {
            poller.add(c.as_fd());
        }
        let listeners = self.listeners.len();
        let polled = listeners + usize::from(self.capture.is_some());
        while !self.stop.load(Ordering::Relaxed) {
            // A signal wakes the wait with nothing ready.
            if poller.wait(Some(POLL_INTERVAL))? == 0 {
                continue;
            }
            for i in (0..polled).filter(|&i| poller.is_ready(i)) {
                if i < listeners {
                    self.serve(i, &mut buf)?;
                } else if let Some(c) = self.capture.as_mut() {
                    c.drain(Instant::now());
                }
            }
        }
        Ok(())
    }

    /// Handles everything queued on listener `i`.
    fn serve(&mut self, i: usize, buf: &mut [u8]) -> io::Result<()> {
        let rate_per_sec = self.config.rate_per_sec;
        let burst = self.config.burst;
        let l = &mut self.listeners[i];
        let overhead = l.sock.overhead();
        let port = l.sock.local_addr()?.port();
        loop {
            let m = match l.sock.recv_meta(buf) {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(()),
                // ICMP errors about earlier replies: nothing to do.
                Err(e) if e.raw_os_error().is_some_and(|c| c == libc::ECONNREFUSED || c == libc::EHOSTUNREACH) => {
                    continue;
                }
                Err(e) => return Err(e),
            };
            if m.truncated {
                // Larger than any IP datagram; cannot be a probe we sent.
                self.truncated_input += 1;
                continue;
            }
            let whole = u16::try_from(m.len + usize::from(overhead)).unwrap_or(u16::MAX);
            let now = Instant::now();
            // The fragments the packet socket saw, if they agree with the
            // kernel's own account of the largest one.
            let records = match (m.largest_fragment, self.capture.as_mut()) {
                (Some(largest), Some(c)) => {
                    c.drain(now);
                    c.take(m.source, port, &buf[..m.len])
                        .filter(|r| r.iter().map(|f| f.ip_len).max() == Some(largest))
                        .map(|r| {
                            r.iter()
                                .map(|f| FragmentRecord {
                                    offset: f.offset,
                                    ip_len: f.ip_len,
                                    more_fragments: f.more_fragments,
                                })
                                .collect::<Vec<_>>()
                        })
                }
                _ => None,
            };
            let pieces = match (&records, m.largest_fragment) {
                (Some(r), _) => Pieces::Fragments { records: r, reassembled: true },
                (None, Some(largest)) => Pieces::Reassembled { largest_fragment: largest },
                (None, None) => Pieces::Whole { ip_len: whole },
            };
            // Fragments: their IP bytes; otherwise one header plus the
            // payload (a lower bound for a reassembled datagram).
            self.ip_bytes_received +=
                records.as_ref().map_or(u64::from(whole), |r| r.iter().map(|f| u64::from(f.ip_len)).sum());
            if records.is_some() {
                self.fragment_reports += 1;
            }
            let ifindex = m.ifindex.filter(|_| l.cores.len() < MAX_INTERFACES).unwrap_or(0);
            let core = l.cores.entry(ifindex).or_insert_with(|| {
                let link_mtu = if ifindex == 0 { 0 } else { ifindex_mtu(ifindex).unwrap_or(0) };
                Responder::new(ResponderConfig {
                    link_mtu: u16::try_from(link_mtu).unwrap_or(u16::MAX),
                    reply_overhead: overhead,
                    rate_per_sec,
                    burst,
                    ..ResponderConfig::default()
                })
            });
            let arrival = Arrival { source: m.source, payload: &buf[..m.len], pieces };
            let _ = core.handle_arrival(now, &arrival);
            while let Some(tx) = core.poll_transmit() {
                match l.sock.send_from(&tx.payload, tx.destination, m.destination) {
                    Ok(_) => self.ip_bytes_sent += (tx.payload.len() + usize::from(overhead)) as u64,
                    Err(_) => self.send_errors += 1,
                }
            }
        }
    }

    /// The cores' counters, summed.
    #[must_use]
    pub fn stats(&self) -> ResponderStats {
        let mut t = ResponderStats::default();
        for c in self.listeners.iter().flat_map(|l| l.cores.values()) {
            let s = c.stats();
            t.received += s.received;
            t.legacy_probes += s.legacy_probes;
            t.probes += s.probes;
            t.confirms += s.confirms;
            t.not_fpmt += s.not_fpmt;
            t.malformed += s.malformed;
            t.headless += s.headless;
            t.inconsistent += s.inconsistent;
            t.partial += s.partial;
            t.rate_limited += s.rate_limited;
            t.table_full += s.table_full;
            t.eviction_checks += s.eviction_checks;
            t.over_budget += s.over_budget;
            t.truncated += s.truncated;
            t.queue_full += s.queue_full;
            t.replies += s.replies;
            t.reply_bytes += s.reply_bytes;
            t.probe_bytes += s.probe_bytes;
        }
        t
    }

    /// Counters as `(name, value)` pairs, for the text and JSON summaries.
    #[must_use]
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats();
        vec![
            ("received", s.received),
            ("legacy_probes", s.legacy_probes),
            ("probes", s.probes),
            ("confirms", s.confirms),
            ("replies", s.replies),
            ("not_fpmt", s.not_fpmt),
            ("malformed", s.malformed),
            ("headless", s.headless),
            ("inconsistent", s.inconsistent),
            ("rate_limited", s.rate_limited),
            ("table_full", s.table_full),
            ("eviction_checks", s.eviction_checks),
            ("over_budget", s.over_budget),
            ("truncated_reports", s.truncated),
            ("queue_full", s.queue_full),
            ("truncated_input", self.truncated_input),
            ("send_errors", self.send_errors),
            ("fragment_reports", self.fragment_reports),
            ("ip_bytes_received", self.ip_bytes_received),
            ("ip_bytes_sent", self.ip_bytes_sent),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use px_pmtud::fpmtud::wire::{self, ProbeKind, ProbeRepr, Reply};

    #[test]
    fn answers_legacy_and_extended_and_ignores_junk() {
        let cfg = DaemonConfig { bind: vec!["127.0.0.1:0".parse().unwrap()], ..DaemonConfig::default() };
        let mut d = Daemon::open(&cfg).unwrap();
        let addr = d.local_addrs()[0];
        let stop = d.stop_handle();
        let t = std::thread::spawn(move || {
            d.run().unwrap();
            d
        });
        let c = UdpSocket::connect_to(addr).unwrap();
        let mut buf = [0u8; 2048];
        // Legacy: "FPMT" + padding, 1000 bytes of IP → 4-byte BE 1000.
        let mut legacy = vec![0u8; 1000 - 28];
        wire::emit_legacy_probe(&mut legacy).unwrap();
        c.send(&legacy).unwrap();
        assert!(c.wait(Some(Duration::from_secs(2))).unwrap());
        assert_eq!(c.try_recv(&mut buf).unwrap(), Some(4));
        assert_eq!(u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]), 1000);
        // Junk: no answer.
        c.send(b"hello, not a probe").unwrap();
        // Extended confirmation probe: a report echoing nonce and id.
        let mut p = vec![0u8; 600 - 28];
        ProbeRepr { kind: ProbeKind::Confirm, nonce: 0x1234, probe_id: 7, ip_len: 600 }.emit(&mut p).unwrap();
        c.send(&p).unwrap();
        assert!(c.wait(Some(Duration::from_secs(2))).unwrap());
        let n = c.try_recv(&mut buf).unwrap().unwrap();
        match wire::parse_reply(&buf[..n]).unwrap() {
            Reply::Report(r) => {
                assert_eq!((r.nonce, r.probe_id, r.confirm, r.largest_ip_len), (0x1234, 7, true, 600));
                assert!(r.link_mtu > 0, "loopback MTU reported");
            }
            other => panic!("{other:?}"),
        }
        stop.store(true, Ordering::Relaxed);
        let d = t.join().unwrap();
        let s = d.stats();
        assert_eq!((s.received, s.legacy_probes, s.confirms, s.not_fpmt, s.replies), (3, 1, 1, 1, 2));
        assert_eq!(d.ip_bytes_received, 1000 + (18 + 28) + 600);
        assert_eq!(d.ip_bytes_sent, (4 + 28) + (n as u64 + 28));
    }
}
