//! A test responder that behaves on the wire like the paper authors'
//! reference destination (TNET-SNU/F-PMTUD `mtud_destination`), so that
//! `px probe`'s interop with it is tested without shipping its source
//! (`px fpmtud --legacy-late-bind`, root).
//!
//! What it reproduces: the port is *not* bound at first; a packet socket
//! watches for the first UDP datagram to the port (whole, or all its IPv4
//! fragments), so the kernel answers that probe with ICMP "port
//! unreachable"; only then is the UDP port bound and the probe answered.
//! Every answer is the legacy one: 4 bytes, the largest IP length that
//! arrived for the datagram (its largest fragment, or its whole length),
//! big-endian, no nonce, whatever the probe's format.
//!
//! Guarantees: answers only datagrams whose payload starts with `FPMT`,
//! never more reply bytes than probe bytes (4 bytes for at least 68),
//! stops within 100 ms of its stop flag.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use px_io::{FragmentCapture, Poller, UdpSocket};
use px_pmtud::fpmtud::wire::MAGIC;
use px_wire::ipv4::Ipv4Packet;
use px_wire::udp::{self, UdpDatagram};

/// How often the loop looks at its stop flag when nothing arrives.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// What the packet socket learned of one datagram so far.
#[derive(Debug, Default)]
struct Seen {
    largest: u16,
    /// The first fragment (UDP header, magic) arrived: source port, and
    /// whether the payload starts with `FPMT`.
    head: Option<(u16, bool)>,
    /// The last fragment (MF clear) arrived.
    tail: bool,
}

/// The late-binding legacy responder.
#[derive(Debug)]
pub struct LateBindResponder {
    port: u16,
    stop: Arc<AtomicBool>,
    /// Legacy answers sent.
    pub replies: u64,
}

impl LateBindResponder {
    /// A responder for UDP port `port` on every IPv4 address.
    #[must_use]
    pub fn new(port: u16) -> Self {
        LateBindResponder { port, stop: Arc::new(AtomicBool::new(false)), replies: 0 }
    }

    /// Setting this flag makes [`LateBindResponder::run`] return.
    #[must_use]
    pub fn stop_handle(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Waits for the first probe on a packet socket, then binds the port,
    /// answers that probe and serves every later one from the socket.
    pub fn run(&mut self) -> io::Result<()> {
        let Some((source, largest)) = self.first_probe()? else { return Ok(()) };
        let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, self.port).into())?;
        sock.enable_arrival_info()?;
        self.answer(&sock, source, largest);
        let mut buf = vec![0u8; 65536];
        let mut poller = Poller::new();
        poller.add(sock.as_fd());
        while !self.stop.load(Ordering::Relaxed) {
            if poller.wait(Some(POLL_INTERVAL))? == 0 {
                continue;
            }
            loop {
                let m = match sock.recv_meta(&mut buf) {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    Err(e) if e.raw_os_error().is_some_and(|c| c == libc::ECONNREFUSED) => continue,
                    Err(e) => return Err(e),
                };
                if buf[..m.len].starts_with(&MAGIC) {
                    let whole = u16::try_from(m.len + 28).unwrap_or(u16::MAX);
                    self.answer(&sock, m.source, m.largest_fragment.unwrap_or(whole));
                }
            }
        }
        Ok(())
    }

    fn answer(&mut self, sock: &UdpSocket, to: SocketAddr, largest: u16) {
        if sock.send_from(&u32::from(largest).to_be_bytes(), to, None).is_ok() {
            self.replies += 1;
        }
    }

    /// The source and largest IP length of the first complete `FPMT`
    /// datagram to the port, from the packet socket.
    fn first_probe(&mut self) -> io::Result<Option<(SocketAddr, u16)>> {
        let mut capture = FragmentCapture::open()?;
        let mut seen: HashMap<(Ipv4Addr, u16), Seen> = HashMap::new();
        let mut poller = Poller::new();
        poller.add(capture.as_fd());
        while !self.stop.load(Ordering::Relaxed) {
            if poller.wait(Some(POLL_INTERVAL))? == 0 {
                continue;
            }
            while let Some(p) = capture.next_packet() {
                let Ok(ip) = Ipv4Packet::new_checked(p) else { continue };
                if ip.protocol() != libc::IPPROTO_UDP as u8 {
                    continue;
                }
                let s = seen.entry((ip.src(), ip.ident())).or_default();
                let len = u16::try_from(ip.total_len()).unwrap_or(u16::MAX);
                s.largest = s.largest.max(len);
                if ip.frag_offset() == 0 {
                    let data = ip.payload();
                    if data.len() < udp::HEADER_LEN {
                        continue;
                    }
                    let h = UdpDatagram::new_unchecked(&data[..udp::HEADER_LEN]);
                    if h.dst_port() != self.port {
                        seen.remove(&(ip.src(), ip.ident()));
                        continue;
                    }
                    s.head = Some((h.src_port(), data[udp::HEADER_LEN..].starts_with(&MAGIC)));
                }
                if !ip.more_frags() {
                    s.tail = true;
                }
                if let (Some((sport, true)), true) = (s.head, s.tail) {
                    return Ok(Some((SocketAddrV4::new(ip.src(), sport).into(), s.largest)));
                }
            }
            // Bounded: only datagrams of the host being watched.
            if seen.len() > 4096 {
                seen.clear();
            }
        }
        Ok(None)
    }
}
