//! An example sender and receiver of PX-caravans (`docs/caravan.md`) built
//! on the `px-caravan` end-host library over px-io's UDP sockets, for the
//! lab (`px caravan send|recv` is the command line around it).
//!
//! [`send`] sends sequence-numbered UDP datagrams on one socket per flow,
//! plain or (with [`SendConfig::caravan`]) packed into caravans sent with
//! the caravan DSCP. [`recv`] reads one UDP socket, asks the kernel for each
//! datagram's TOS (`IP_RECVTOS` / `IPV6_RECVTCLASS`), opens caravans with
//! the library and checks every datagram: its flow's next sequence number,
//! its bytes. [`RecvSummary::failed`] says whether any datagram was corrupt,
//! duplicated or out of order (or, with [`RecvConfig::expect`], missing).
//!
//! Datagram payload: `"PXCV"`, flow (u32 BE), sequence (u64 BE), then bytes
//! that are a function of (flow, sequence, position), so that any byte
//! moved, lost or changed is seen.
//!
//! Errors ([`SendError`], [`RecvError`]) name the step that failed (and
//! the command-line flag, where a setting is at fault) in the words
//! `px caravan` prints.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use px_caravan::{Builder, Counts, InnerChecksum, Pseudo};
use px_io::{RecvBatch, UdpSocket};
use serde::Serialize;

/// What [`send`] sends: the flags of `px caravan send`.
#[derive(Debug, Clone, clap::Args)]
pub struct SendConfig {
    /// Destination address and port.
    #[arg(long, value_name = "ADDR:PORT")]
    pub to: SocketAddr,
    /// Flows (one socket and source port each).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub flows: u32,
    /// Datagrams per flow (0: until --duration or a signal).
    #[arg(long, default_value_t = 1000)]
    pub count: u64,
    /// Stop after this long, e.g. 10s (0: no limit; a bare number is seconds).
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = px_units::secs_f64)]
    pub duration: f64,
    /// UDP payload bytes per datagram (16..=65507).
    #[arg(long, value_name = "BYTES", default_value_t = 1200, value_parser = clap::value_parser!(u16).range(16..=65507))]
    pub size: u16,
    /// Datagrams per second over all flows (0: as fast as the socket takes them).
    #[arg(long, value_name = "DATAGRAMS_PER_S", default_value_t = 0)]
    pub rate: u64,
    /// Pack the datagrams into caravans (the sender is a caravan-capable host).
    #[arg(long)]
    pub caravan: bool,
    /// Largest caravan IP packet (the b-network's iMTU).
    #[arg(long, value_name = "BYTES", default_value_t = 9000)]
    pub mtu: usize,
    /// DSCP marking caravans.
    #[arg(long, default_value_t = px_caravan::DEFAULT_DSCP)]
    pub dscp: u8,
}

/// What [`recv`] listens on and when it stops: the flags of `px caravan recv`.
#[derive(Debug, Clone, clap::Args)]
pub struct RecvConfig {
    /// UDP port to receive on.
    #[arg(long)]
    pub port: u16,
    /// Address to bind (`0.0.0.0`; `::` for IPv6, dual-stack).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0")]
    pub bind: IpAddr,
    /// Stop after this long, e.g. 10s (0: no limit; a bare number is seconds).
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = px_units::secs_f64)]
    pub duration: f64,
    /// Stop once nothing arrived for this long after the first datagram,
    /// e.g. 1s (0: never; a bare number is milliseconds; old name --idle-ms).
    #[arg(long = "idle", alias = "idle-ms", value_name = "DURATION", default_value = "1000ms", value_parser = px_units::millis_u64)]
    pub idle_ms: u64,
    /// Datagrams expected in total: fewer is a failure.
    #[arg(long, value_name = "N")]
    pub expect: Option<u64>,
    /// DSCP marking caravans.
    #[arg(long, default_value_t = px_caravan::DEFAULT_DSCP)]
    pub dscp: u8,
    /// Socket receive buffer, e.g. 8MiB (a bare number is bytes).
    #[arg(long, value_name = "SIZE", default_value = "8MiB", value_parser = rcvbuf_size)]
    pub rcvbuf: usize,
}

/// `--rcvbuf`: a size that fits a socket option.
fn rcvbuf_size(s: &str) -> Result<usize, String> {
    let b = px_units::size(s)?;
    if (4096..=1 << 30).contains(&b) { Ok(b as usize) } else { Err(format!("`{s}`: allowed 4KiB..=1GiB")) }
}

const MAGIC: &[u8; 4] = b"PXCV";
const HEAD: usize = 16;

/// Writes the payload of datagram `seq` of `flow` into `out`.
fn fill(out: &mut [u8], flow: u32, seq: u64) {
    out[..4].copy_from_slice(MAGIC);
    out[4..8].copy_from_slice(&flow.to_be_bytes());
    out[8..16].copy_from_slice(&seq.to_be_bytes());
    let k = (seq as u8).wrapping_mul(31) ^ flow as u8;
    for (i, b) in out[HEAD..].iter_mut().enumerate() {
        *b = k ^ i as u8;
    }
}

/// (flow, seq) of an intact payload, `None` if any byte is wrong.
fn check(p: &[u8]) -> Option<(u32, u64)> {
    if p.len() < HEAD || &p[..4] != MAGIC {
        return None;
    }
    let flow = u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
    let seq = u64::from_be_bytes([p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15]]);
    let k = (seq as u8).wrapping_mul(31) ^ flow as u8;
    p[HEAD..].iter().enumerate().all(|(i, b)| *b == k ^ i as u8).then_some((flow, seq))
}

/// CPU seconds this process used (user + system).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// What [`send`] did.
#[derive(Debug, Default, Serialize)]
pub struct SendSummary {
    pub flows: u32,
    pub datagrams: u64,
    pub caravans: u64,
    pub payload_bytes: u64,
    pub send_errors: u64,
    pub seconds: f64,
}

/// Why [`send`] could not send.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// A datagram of `--size` bytes and its record header do not fit a caravan of `--mtu`.
    #[error("--size {size} does not fit a caravan of --mtu {mtu}")]
    Size { size: usize, mtu: usize },
    /// A flow's socket could not be bound.
    #[error("bind: {0}")]
    Bind(io::Error),
    /// A flow's socket could not be connected to the destination.
    #[error("connect {to}: {source}")]
    Connect { to: SocketAddr, source: io::Error },
    /// The caravan DSCP could not be set on a socket.
    #[error("IP_TOS: {0}")]
    Tos(io::Error),
    /// The caravan library refused a datagram.
    #[error("{0}")]
    Build(px_caravan::BuildError),
    /// A send failed for another reason than a full buffer or a transient refusal.
    #[error("send: {0}")]
    Send(io::Error),
}

/// Sends until every flow sent `count` datagrams, `duration` passed or
/// `stop()` returns true.
pub fn send(a: &SendConfig, stop: impl Fn() -> bool) -> Result<SendSummary, SendError> {
    let v6 = a.to.is_ipv6();
    let size = a.size as usize;
    let ip_hdr = if v6 { 40 } else { 20 };
    if a.caravan && ip_hdr + 16 + size > a.mtu {
        return Err(SendError::Size { size, mtu: a.mtu });
    }
    let mut socks = Vec::new();
    for _ in 0..a.flows {
        let any: SocketAddr = if v6 { (Ipv6Addr::UNSPECIFIED, 0).into() } else { (Ipv4Addr::UNSPECIFIED, 0).into() };
        let s = UdpSocket::bind_dual_stack(any).map_err(SendError::Bind)?;
        s.connect(a.to).map_err(|source| SendError::Connect { to: a.to, source })?;
        let _ = s.set_send_buffer(4 << 20);
        if a.caravan {
            s.set_tos(px_caravan::tos(a.dscp, 0)).map_err(SendError::Tos)?;
        }
        socks.push(s);
    }
    let pseudo: Vec<Pseudo> = socks
        .iter()
        .map(|s| match (s.local_addr().map(|l| l.ip()), a.to.ip()) {
            (Ok(IpAddr::V4(l)), IpAddr::V4(t)) => Pseudo::V4 { src: l, dst: t },
            (Ok(IpAddr::V6(l)), IpAddr::V6(t)) => Pseudo::V6 { src: l, dst: t },
            _ => Pseudo::V4 { src: [0, 0, 0, 0].into(), dst: [0, 0, 0, 0].into() },
        })
        .collect();
    let ports: Vec<u16> = socks.iter().map(|s| s.local_addr().map_or(0, |l| l.port())).collect();
    let start = Instant::now();
    let deadline = (a.duration > 0.0).then(|| start + Duration::from_secs_f64(a.duration));
    let mut sum = SendSummary { flows: a.flows, ..SendSummary::default() };
    let mut seq = vec![0u64; a.flows as usize];
    let mut dg = vec![0u8; size];
    let mut cbuf = vec![0u8; a.mtu];
    let per_send = if a.caravan { (a.mtu - ip_hdr - 8) / (size + 8) } else { 1 } as u64;
    'outer: loop {
        for f in 0..a.flows as usize {
            if stop() || deadline.is_some_and(|d| Instant::now() >= d) {
                break 'outer;
            }
            if a.count > 0 && seq[f] >= a.count {
                if seq.iter().all(|s| *s >= a.count) {
                    break 'outer;
                }
                continue;
            }
            let n = if a.count > 0 { per_send.min(a.count - seq[f]) } else { per_send };
            if a.rate > 0 {
                // Pace: datagram number `sum.datagrams` is due at this time.
                let due = start + Duration::from_secs_f64(sum.datagrams as f64 / a.rate as f64);
                if let Some(w) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(w);
                }
            }
            let r = if a.caravan {
                let mut b = Builder::new(&mut cbuf[..], ports[f], a.to.port()).with_mtu(a.mtu, ip_hdr);
                for i in 0..n {
                    fill(&mut dg, f as u32, seq[f] + i);
                    b.push(&dg, InnerChecksum::Compute(pseudo[f])).map_err(SendError::Build)?;
                }
                let len = b.len();
                socks[f].send(&cbuf[..len])
            } else {
                fill(&mut dg, f as u32, seq[f]);
                socks[f].send(&dg)
            };
            match r {
                Ok(_) => {
                    seq[f] += n;
                    sum.datagrams += n;
                    sum.payload_bytes += n * size as u64;
                    sum.caravans += a.caravan as u64;
                }
                // A full socket buffer or a transient refusal: the same
                // datagrams are sent again (sequence numbers stay gap-free).
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN | libc::ECONNREFUSED)) => {
                    sum.send_errors += 1;
                }
                Err(e) => return Err(SendError::Send(e)),
            }
        }
    }
    sum.seconds = start.elapsed().as_secs_f64();
    Ok(sum)
}

/// What [`recv`] saw.
#[derive(Debug, Default, Serialize)]
pub struct RecvSummary {
    /// Datagrams delivered (from caravans and plain packets).
    pub datagrams: u64,
    /// Socket reads that were caravans / plain datagrams.
    pub caravans: u64,
    pub plain: u64,
    /// Caravans refused whole, by reason.
    pub malformed: u64,
    /// Datagrams whose bytes were wrong (or not ours).
    pub corrupt: u64,
    /// Sequence numbers at or below one already seen: duplicates and late
    /// arrivals (both break "once, in order").
    pub reordered: u64,
    /// Sequence numbers skipped (lost on the way, or still missing).
    pub missing: u64,
    pub flows: u64,
    pub payload_bytes: u64,
    /// From the first to the last datagram.
    pub seconds: f64,
    pub datagrams_per_s: f64,
    pub gbit_per_s: f64,
    /// CPU seconds of this process while receiving, and datagrams per CPU second.
    pub cpu_s: f64,
    pub datagrams_per_cpu_s: f64,
    pub mean_datagrams_per_caravan: f64,
}

impl SendSummary {
    /// The line `px caravan send` prints.
    pub fn text(&self, cfg: &SendConfig) -> String {
        let (n, what) = if cfg.caravan { (self.caravans, "caravans") } else { (self.datagrams, "packets") };
        format!(
            "px caravan send: {} datagrams of {} B on {} flows in {n} {what} ({:.3} s, {} send errors)\n",
            self.datagrams, cfg.size, self.flows, self.seconds, self.send_errors
        )
    }
}

impl RecvSummary {
    /// The lines `px caravan recv` prints.
    pub fn text(&self) -> String {
        format!(
            "px caravan recv: {} datagrams ({} caravans, {} plain) on {} flows in {:.3} s: {:.0} datagrams/s, {:.3} Gbit/s payload, {:.0} datagrams per CPU second\n  corrupt {} reordered or duplicate {} missing {} malformed caravans {}\n",
            self.datagrams,
            self.caravans,
            self.plain,
            self.flows,
            self.seconds,
            self.datagrams_per_s,
            self.gbit_per_s,
            self.datagrams_per_cpu_s,
            self.corrupt,
            self.reordered,
            self.missing,
            self.malformed
        )
    }

    /// Any datagram corrupt, duplicated or out of order, any caravan
    /// malformed, or (when the receiver expected a count) any missing.
    #[must_use]
    pub fn failed(&self, cfg: &RecvConfig) -> bool {
        let bad = self.corrupt + self.reordered + self.malformed + if cfg.expect.is_some() { self.missing } else { 0 };
        bad != 0
    }
}

/// Per-flow sequence tracking.
#[derive(Debug, Default)]
struct FlowSeq {
    next: u64,
}

/// Why [`recv`] could not receive.
#[derive(Debug, thiserror::Error)]
pub enum RecvError {
    /// The socket could not be bound to the port.
    #[error("bind port {port}: {source}")]
    Bind { port: u16, source: io::Error },
    /// The kernel would not report each datagram's TOS (`option`:
    /// `IP_RECVTOS` or `IPV6_RECVTCLASS`).
    #[error("{option}: {source}")]
    RecvTos { option: &'static str, source: io::Error },
    /// The socket's read timeout could not be set.
    #[error("{0}")]
    Timeout(io::Error),
    /// A batch receive failed.
    #[error("recvmmsg: {0}")]
    Recv(io::Error),
}

/// Receives until `duration` passed, nothing arrived for `idle_ms` after
/// the first datagram, or `stop()` returns true.
pub fn recv(a: &RecvConfig, stop: impl Fn() -> bool) -> Result<RecvSummary, RecvError> {
    let v6 = a.bind.is_ipv6();
    let s = UdpSocket::bind_dual_stack(SocketAddr::new(a.bind, a.port))
        .map_err(|source| RecvError::Bind { port: a.port, source })?;
    let _ = s.set_recv_buffer(a.rcvbuf);
    let option = if v6 { "IPV6_RECVTCLASS" } else { "IP_RECVTOS" };
    s.enable_recv_tos().map_err(|source| RecvError::RecvTos { option, source })?;
    s.set_read_timeout(Some(Duration::from_millis(50))).map_err(RecvError::Timeout)?;
    let start = Instant::now();
    let deadline = (a.duration > 0.0).then(|| start + Duration::from_secs_f64(a.duration));
    let mut counts = Counts::default();
    let mut sum = RecvSummary::default();
    let mut flows: HashMap<(SocketAddr, u32), FlowSeq> = HashMap::new();
    let mut batch = RecvBatch::new(64, 65_536);
    let (mut first, mut last): (Option<Instant>, Instant) = (None, start);
    let mut cpu0 = 0.0;
    loop {
        if stop() || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if a.idle_ms > 0 && first.is_some() && last.elapsed() >= Duration::from_millis(a.idle_ms) {
            break;
        }
        let n = s.recv_batch(&mut batch).map_err(RecvError::Recv)?;
        if n == 0 {
            continue;
        }
        let now = Instant::now();
        if first.is_none() {
            first = Some(now);
            cpu0 = cpu_seconds();
        }
        last = now;
        for i in 0..n {
            let Some((data, meta)) = batch.get(i) else { continue };
            let peer = meta.source;
            let mut deliver = |p: &[u8], sum: &mut RecvSummary| {
                sum.datagrams += 1;
                sum.payload_bytes += p.len() as u64;
                let Some((flow, seq)) = check(p) else {
                    sum.corrupt += 1;
                    return;
                };
                let f = flows.entry((peer, flow)).or_default();
                if seq == f.next {
                    f.next += 1;
                } else if seq > f.next {
                    sum.missing += seq - f.next;
                    f.next = seq + 1;
                } else {
                    // Earlier than expected: a duplicate, or a late one that
                    // was counted missing.
                    sum.reordered += 1;
                }
            };
            if meta.tos.is_some_and(|t| px_caravan::is_caravan_tos(t, a.dscp)) {
                match counts.open(data, Some((peer.port(), a.port))) {
                    Ok(c) => {
                        sum.caravans += 1;
                        for r in c.iter() {
                            deliver(r.payload(), &mut sum);
                        }
                    }
                    Err(_) => sum.malformed += 1,
                }
            } else {
                sum.plain += 1;
                deliver(data, &mut sum);
            }
        }
    }
    let cpu = cpu_seconds() - cpu0;
    sum.flows = flows.len() as u64;
    sum.seconds = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    if sum.seconds > 0.0 {
        sum.datagrams_per_s = sum.datagrams as f64 / sum.seconds;
        sum.gbit_per_s = sum.payload_bytes as f64 * 8.0 / sum.seconds / 1e9;
    }
    sum.cpu_s = cpu;
    if cpu > 0.0 {
        sum.datagrams_per_cpu_s = sum.datagrams as f64 / cpu;
    }
    if sum.caravans > 0 {
        sum.mean_datagrams_per_caravan = counts.datagrams as f64 / sum.caravans as f64;
    }
    if let Some(e) = a.expect {
        let got = sum.datagrams - sum.corrupt - sum.reordered;
        sum.missing = sum.missing.max(e.saturating_sub(got));
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_check_catches_any_change() {
        let mut p = vec![0u8; 100];
        fill(&mut p, 3, 77);
        assert_eq!(check(&p), Some((3, 77)));
        for i in 0..p.len() {
            let mut q = p.clone();
            q[i] ^= 0x10;
            assert!(check(&q).is_none_or(|fs| fs != (3, 77)), "byte {i}");
        }
    }

    #[test]
    fn loopback_caravans_and_plain_round_trip() {
        // Unprivileged: a receiver thread on loopback, the sender in this one.
        let port = {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap().port()
        };
        let cfg = RecvConfig {
            port,
            bind: "127.0.0.1".parse().unwrap(),
            duration: 10.0,
            idle_ms: 300,
            expect: Some(2 * 50 * 2),
            dscp: px_caravan::DEFAULT_DSCP,
            rcvbuf: 1 << 20,
        };
        let rx = std::thread::spawn(move || {
            let sum = recv(&cfg, || false).unwrap();
            !sum.failed(&cfg)
        });
        std::thread::sleep(Duration::from_millis(100));
        for caravan in [true, false] {
            send(
                &SendConfig {
                    to: SocketAddr::from(([127, 0, 0, 1], port)),
                    flows: 2,
                    count: 50,
                    duration: 0.0,
                    size: 1000,
                    rate: 20_000,
                    caravan,
                    mtu: 9000,
                    dscp: px_caravan::DEFAULT_DSCP,
                },
                || false,
            )
            .unwrap();
        }
        assert!(rx.join().unwrap());
    }
}
