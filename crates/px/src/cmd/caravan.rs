//! `px caravan send|recv`: an example sender and receiver of PX-caravans
//! (`docs/caravan.md`) built on the `px-caravan` library, for the lab.
//!
//! `send` sends sequence-numbered UDP datagrams on one socket per flow,
//! plain or (with `--caravan`) packed into caravans sent with the caravan
//! DSCP. `recv` reads one UDP socket, asks the kernel for each datagram's
//! TOS (`IP_RECVTOS` / `IPV6_RECVTCLASS`), opens caravans with the library
//! and checks every datagram: its flow's next sequence number, its bytes.
//! It prints the counts and exits 1 if any datagram was corrupt, duplicated
//! or out of order (or, with `--expect`, missing).
//!
//! Datagram payload: `"PXCV"`, flow (u32 BE), sequence (u64 BE), then bytes
//! that are a function of (flow, sequence, position), so that any byte
//! moved, lost or changed is seen.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use px_caravan::{Builder, Counts, InnerChecksum, Pseudo};
use serde::Serialize;

#[derive(Debug, Subcommand)]
pub enum CaravanCommand {
    /// Send sequence-numbered UDP datagrams, plain or packed in caravans.
    Send(SendArgs),
    /// Receive datagrams and caravans, check every sequence number and byte.
    Recv(RecvArgs),
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// Destination address and port.
    #[arg(long)]
    to: SocketAddr,
    /// Flows (one socket and source port each).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    flows: u32,
    /// Datagrams per flow (0: until --duration or a signal).
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Stop after this many seconds (0: no limit).
    #[arg(long, default_value_t = 0.0)]
    duration: f64,
    /// UDP payload bytes per datagram (16..=65507).
    #[arg(long, default_value_t = 1200, value_parser = clap::value_parser!(u16).range(16..=65507))]
    size: u16,
    /// Datagrams per second over all flows (0: as fast as the socket takes them).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Pack the datagrams into caravans (the sender is a caravan-capable host).
    #[arg(long)]
    caravan: bool,
    /// Largest caravan IP packet (the b-network's iMTU).
    #[arg(long, default_value_t = 9000)]
    mtu: usize,
    /// DSCP marking caravans.
    #[arg(long, default_value_t = px_caravan::DEFAULT_DSCP)]
    dscp: u8,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct RecvArgs {
    /// UDP port to receive on.
    #[arg(long)]
    port: u16,
    /// Address to bind (default 0.0.0.0; `::` for IPv6).
    #[arg(long, default_value = "0.0.0.0")]
    bind: IpAddr,
    /// Stop after this many seconds (0: no limit).
    #[arg(long, default_value_t = 0.0)]
    duration: f64,
    /// Stop once nothing arrived for this many ms after the first datagram (0: never).
    #[arg(long, default_value_t = 1000)]
    idle_ms: u64,
    /// Datagrams expected in total: fewer is a failure.
    #[arg(long)]
    expect: Option<u64>,
    /// DSCP marking caravans.
    #[arg(long, default_value_t = px_caravan::DEFAULT_DSCP)]
    dscp: u8,
    /// Socket receive buffer (bytes).
    #[arg(long, default_value_t = 8 << 20)]
    rcvbuf: usize,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(c: CaravanCommand) -> Result<ExitCode, String> {
    crate::signals::install();
    match c {
        CaravanCommand::Send(a) => send(a),
        CaravanCommand::Recv(a) => recv(a),
    }
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

fn set_tos(s: &UdpSocket, v6: bool, tos: u8) -> io::Result<()> {
    let (level, opt) = if v6 { (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) } else { (libc::IPPROTO_IP, libc::IP_TOS) };
    set_int(s, level, opt, libc::c_int::from(tos))
}

fn set_int(s: &UdpSocket, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: a valid fd and a c_int option value of the right size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            opt,
            &v as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// CPU seconds this process used (user + system).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[derive(Debug, Default, Serialize)]
struct SendSummary {
    flows: u32,
    datagrams: u64,
    caravans: u64,
    payload_bytes: u64,
    send_errors: u64,
    seconds: f64,
}

fn send(a: SendArgs) -> Result<ExitCode, String> {
    let v6 = a.to.is_ipv6();
    let size = a.size as usize;
    let ip_hdr = if v6 { 40 } else { 20 };
    if a.caravan && ip_hdr + 16 + size > a.mtu {
        return Err(format!("--size {size} does not fit a caravan of --mtu {}", a.mtu));
    }
    let mut socks = Vec::new();
    for _ in 0..a.flows {
        let any: SocketAddr = if v6 { "[::]:0".parse().unwrap() } else { "0.0.0.0:0".parse().unwrap() };
        let s = UdpSocket::bind(any).map_err(|e| format!("bind: {e}"))?;
        s.connect(a.to).map_err(|e| format!("connect {}: {e}", a.to))?;
        let _ = set_int(&s, libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
        if a.caravan {
            set_tos(&s, v6, px_caravan::tos(a.dscp, 0)).map_err(|e| format!("IP_TOS: {e}"))?;
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
            if crate::signals::stopped() || deadline.is_some_and(|d| Instant::now() >= d) {
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
                    b.push(&dg, InnerChecksum::Compute(pseudo[f])).map_err(|e| e.to_string())?;
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
                Err(e) => return Err(format!("send: {e}")),
            }
        }
    }
    sum.seconds = start.elapsed().as_secs_f64();
    if a.json {
        println!("{}", serde_json::to_string(&sum).map_err(|e| e.to_string())?);
    } else {
        println!(
            "px caravan send: {} datagrams of {} B on {} flows in {} {} ({:.3} s, {} send errors)",
            sum.datagrams,
            size,
            sum.flows,
            if a.caravan { sum.caravans } else { sum.datagrams },
            if a.caravan { "caravans" } else { "packets" },
            sum.seconds,
            sum.send_errors
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Default, Serialize)]
struct RecvSummary {
    /// Datagrams delivered (from caravans and plain packets).
    datagrams: u64,
    /// Socket reads that were caravans / plain datagrams.
    caravans: u64,
    plain: u64,
    /// Caravans refused whole, by reason.
    malformed: u64,
    /// Datagrams whose bytes were wrong (or not ours).
    corrupt: u64,
    /// Sequence numbers at or below one already seen: duplicates and late
    /// arrivals (both break "once, in order").
    reordered: u64,
    /// Sequence numbers skipped (lost on the way, or still missing).
    missing: u64,
    flows: u64,
    payload_bytes: u64,
    /// From the first to the last datagram.
    seconds: f64,
    datagrams_per_s: f64,
    gbit_per_s: f64,
    /// CPU seconds of this process while receiving, and datagrams per CPU second.
    cpu_s: f64,
    datagrams_per_cpu_s: f64,
    mean_datagrams_per_caravan: f64,
}

/// Per-flow sequence tracking.
#[derive(Debug, Default)]
struct FlowSeq {
    next: u64,
}

fn recv(a: RecvArgs) -> Result<ExitCode, String> {
    let v6 = a.bind.is_ipv6();
    let s = UdpSocket::bind(SocketAddr::new(a.bind, a.port)).map_err(|e| format!("bind port {}: {e}", a.port))?;
    let _ = set_int(&s, libc::SOL_SOCKET, libc::SO_RCVBUF, a.rcvbuf.min(i32::MAX as usize) as i32);
    let _ = set_int(&s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, a.rcvbuf.min(i32::MAX as usize) as i32);
    if v6 {
        set_int(&s, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1).map_err(|e| format!("IPV6_RECVTCLASS: {e}"))?;
        // Dual-stack: IPv4 datagrams on this socket report their TOS too.
        let _ = set_int(&s, libc::IPPROTO_IP, libc::IP_RECVTOS, 1);
    } else {
        set_int(&s, libc::IPPROTO_IP, libc::IP_RECVTOS, 1).map_err(|e| format!("IP_RECVTOS: {e}"))?;
    }
    s.set_read_timeout(Some(Duration::from_millis(50))).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let deadline = (a.duration > 0.0).then(|| start + Duration::from_secs_f64(a.duration));
    let mut counts = Counts::default();
    let mut sum = RecvSummary::default();
    let mut flows: HashMap<(SocketAddr, u32), FlowSeq> = HashMap::new();
    let mut batch = Batch::new(64, 65_536);
    let (mut first, mut last): (Option<Instant>, Instant) = (None, start);
    let mut cpu0 = 0.0;
    loop {
        if crate::signals::stopped() || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if a.idle_ms > 0 && first.is_some() && last.elapsed() >= Duration::from_millis(a.idle_ms) {
            break;
        }
        let n = batch.recv(s.as_raw_fd()).map_err(|e| format!("recvmmsg: {e}"))?;
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
            let (data, peer, tos) = batch.get(i);
            let Some(peer) = peer else { continue };
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
            if tos.is_some_and(|t| px_caravan::is_caravan_tos(t, a.dscp)) {
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
    if a.json {
        println!("{}", serde_json::to_string(&sum).map_err(|e| e.to_string())?);
    } else {
        println!(
            "px caravan recv: {} datagrams ({} caravans, {} plain) on {} flows in {:.3} s: {:.0} datagrams/s, {:.3} Gbit/s payload, {:.0} datagrams per CPU second",
            sum.datagrams,
            sum.caravans,
            sum.plain,
            sum.flows,
            sum.seconds,
            sum.datagrams_per_s,
            sum.gbit_per_s,
            sum.datagrams_per_cpu_s
        );
        println!(
            "  corrupt {} reordered or duplicate {} missing {} malformed caravans {}",
            sum.corrupt, sum.reordered, sum.missing, sum.malformed
        );
    }
    let bad = sum.corrupt + sum.reordered + sum.malformed + if a.expect.is_some() { sum.missing } else { 0 };
    Ok(if bad == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `recvmmsg` with room for each datagram's TOS / traffic class.
struct Batch {
    bufs: Vec<Vec<u8>>,
    addrs: Vec<libc::sockaddr_storage>,
    ctrl: Vec<[u8; 64]>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl Batch {
    fn new(n: usize, size: usize) -> Batch {
        // SAFETY: plain C structs; all-zero is a valid value for each.
        let zero_addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut b = Batch {
            bufs: vec![vec![0u8; size]; n],
            addrs: vec![zero_addr; n],
            ctrl: vec![[0u8; 64]; n],
            iov: Vec::with_capacity(n),
            msgs: Vec::with_capacity(n),
        };
        for i in 0..n {
            b.iov.push(libc::iovec { iov_base: b.bufs[i].as_mut_ptr() as *mut libc::c_void, iov_len: size });
        }
        for i in 0..n {
            // SAFETY: as above.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = &mut b.iov[i];
            m.msg_hdr.msg_iovlen = 1;
            b.msgs.push(m);
        }
        b
    }

    /// Receives up to a batch; 0 on timeout.
    fn recv(&mut self, fd: libc::c_int) -> io::Result<usize> {
        for i in 0..self.msgs.len() {
            let h = &mut self.msgs[i].msg_hdr;
            h.msg_name = &mut self.addrs[i] as *mut _ as *mut libc::c_void;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_control = self.ctrl[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = self.ctrl[i].len();
            h.msg_flags = 0;
        }
        // SAFETY: every message points at live buffers owned by `self`.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                self.msgs.len() as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => Ok(0),
                _ => Err(e),
            };
        }
        Ok(r as usize)
    }

    /// Message `i` of the last batch: bytes, sender, TOS / traffic class.
    fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>, Option<u8>) {
        let m = &self.msgs[i];
        let len = (m.msg_len as usize).min(self.bufs[i].len());
        let data = &self.bufs[i][..len];
        let peer = sockaddr(&self.addrs[i]);
        let mut tos = None;
        // SAFETY: the kernel wrote `msg_controllen` bytes of well-formed
        // control messages into our buffer; CMSG_* walk only within it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
            while !c.is_null() {
                let (lvl, ty) = ((*c).cmsg_level, (*c).cmsg_type);
                if lvl == libc::IPPROTO_IP && ty == libc::IP_TOS {
                    tos = Some(*libc::CMSG_DATA(c));
                } else if lvl == libc::IPPROTO_IPV6 && ty == libc::IPV6_TCLASS {
                    let v = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int);
                    tos = Some(v as u8);
                }
                c = libc::CMSG_NXTHDR(&m.msg_hdr, c);
            }
        }
        (data, peer, tos)
    }
}

fn sockaddr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match s.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let a = unsafe { &*(s as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::from((u32::from_be(a.sin_addr.s_addr).to_be_bytes(), u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let a = unsafe { &*(s as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::from((a.sin6_addr.s6_addr, u16::from_be(a.sin6_port))))
        }
        _ => None,
    }
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
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap().port()
        };
        let rx = std::thread::spawn(move || {
            recv(RecvArgs {
                port,
                bind: "127.0.0.1".parse().unwrap(),
                duration: 10.0,
                idle_ms: 300,
                expect: Some(2 * 50 * 2),
                dscp: px_caravan::DEFAULT_DSCP,
                rcvbuf: 1 << 20,
                json: false,
            })
        });
        std::thread::sleep(Duration::from_millis(100));
        for caravan in [true, false] {
            send(SendArgs {
                to: SocketAddr::from(([127, 0, 0, 1], port)),
                flows: 2,
                count: 50,
                duration: 0.0,
                size: 1000,
                rate: 20_000,
                caravan,
                mtu: 9000,
                dscp: px_caravan::DEFAULT_DSCP,
                json: false,
            })
            .unwrap();
        }
        assert_eq!(rx.join().unwrap().unwrap(), ExitCode::SUCCESS);
    }
}
