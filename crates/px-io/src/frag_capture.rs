//! Every IPv4 fragment of every probe, from a packet socket (needs
//! `CAP_NET_RAW`): `px fpmtud --packet-socket`.
//!
//! `IP_RECVFRAGSIZE` tells only the largest fragment of a reassembled
//! datagram. A cooked `AF_PACKET` socket on all interfaces sees each
//! incoming IPv4 fragment before the kernel reassembles it; this module
//! keeps the fragments of UDP datagrams (offset, IP length, MF) per
//! datagram (source, destination, IP id) until the UDP socket delivers the
//! reassembled datagram, which is then matched by source address, source
//! port and the first bytes of its payload (magic, nonce, probe id) against
//! the first fragment.
//!
//! Guarantees: bounded memory (at most [`MAX_DATAGRAMS`] datagrams of at
//! most [`MAX_FRAGMENTS`] fragments each, entries older than [`MAX_AGE`]
//! dropped); malformed packets are skipped, never trusted; a datagram
//! without a complete match is answered from `IP_RECVFRAGSIZE` as before.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use px_wire::ipv4::Ipv4Packet;
use px_wire::udp::{self, UdpDatagram};

/// Datagrams being tracked at once.
pub const MAX_DATAGRAMS: usize = 1024;
/// Fragments kept per datagram (a 64 KiB datagram over 68-byte links).
pub const MAX_FRAGMENTS: usize = 1500;
/// How long fragments wait for their datagram (the kernel's reassembly
/// timeout is 30 s; probes reassemble in milliseconds).
pub const MAX_AGE: Duration = Duration::from_secs(5);
/// Payload bytes of the first fragment compared with the datagram.
const MATCH_LEN: usize = 24;

/// One datagram's fragments.
#[derive(Debug, Clone)]
struct Datagram {
    first_seen: Instant,
    records: Vec<Fragment>,
    /// UDP source and destination port and the first payload bytes, from
    /// the fragment at offset 0.
    head: Option<(u16, u16, Vec<u8>)>,
}

/// What a packet socket saw of one IPv4 fragment: the F-PMTUD responder
/// reports these (px-pmtud's `FragmentRecord` carries the same fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment {
    /// Byte offset of the fragment's data in the original datagram
    /// (8 × the IP fragment-offset field).
    pub offset: u16,
    /// IP total length of the fragment.
    pub ip_len: u16,
    /// The IP "more fragments" flag.
    pub more_fragments: bool,
}

/// A parsed IPv4 fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Parsed {
    key: (Ipv4Addr, Ipv4Addr, u16),
    record: Fragment,
    /// For the fragment at offset 0: UDP ports and payload start.
    head: Option<(u16, u16, Vec<u8>)>,
}

/// Parses an IPv4 packet (from the IP header on); `Some` only for a UDP
/// fragment (MF set or non-zero offset) with a sane header.
fn parse_fragment(p: &[u8]) -> Option<Parsed> {
    let ip = Ipv4Packet::new_checked(p).ok()?;
    if ip.protocol() != libc::IPPROTO_UDP as u8 || !ip.is_fragment() {
        return None;
    }
    // The checked view guarantees header_len <= total_len <= 65535.
    let total = ip.total_len() as u16;
    let offset = ip.frag_offset() as u16;
    let data = ip.payload();
    // Only the first fragment holds the UDP header; its length field is the
    // whole datagram's, so the header is read unchecked (ports only).
    let head = if offset == 0 && data.len() >= udp::HEADER_LEN {
        let h = UdpDatagram::new_unchecked(&data[..udp::HEADER_LEN]);
        let start = &data[udp::HEADER_LEN..];
        Some((h.src_port(), h.dst_port(), start[..start.len().min(MATCH_LEN)].to_vec()))
    } else {
        None
    };
    Some(Parsed {
        key: (ip.src(), ip.dst(), ip.ident()),
        record: Fragment { offset, ip_len: total, more_fragments: ip.more_frags() },
        head,
    })
}

/// The packet socket and the fragments seen so far.
#[derive(Debug)]
pub struct FragmentCapture {
    fd: OwnedFd,
    datagrams: HashMap<(Ipv4Addr, Ipv4Addr, u16), Datagram>,
    buf: Vec<u8>,
}

impl FragmentCapture {
    /// Opens a cooked packet socket for IPv4 on every interface.
    pub fn open() -> io::Result<FragmentCapture> {
        let proto = (libc::ETH_P_IP as u16).to_be();
        // SAFETY: socket(2) with constant arguments.
        let fd = unsafe {
            libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, proto.into())
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just returned by socket(2) and is owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(FragmentCapture { fd, datagrams: HashMap::new(), buf: vec![0u8; 65536] })
    }

    /// The next incoming IPv4 packet queued on the socket (from its IP
    /// header on), without blocking; `None` when nothing is queued. Our own
    /// transmissions, looped back to packet sockets, are skipped.
    pub fn next_packet(&mut self) -> Option<&[u8]> {
        loop {
            // SAFETY: plain old data; zero is valid.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: buf and from are valid for writes of their sizes.
            let r = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_DONTWAIT,
                    (&raw mut from).cast(),
                    &raw mut len,
                )
            };
            if r < 0 {
                return None; // EAGAIN, or an error the next call will see again
            }
            if from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let n = (r as usize).min(self.buf.len());
            return Some(&self.buf[..n]);
        }
    }

    /// Reads every packet queued on the socket and keeps the UDP fragments.
    pub fn drain(&mut self, now: Instant) {
        self.datagrams.retain(|_, d| now.saturating_duration_since(d.first_seen) < MAX_AGE);
        while let Some(f) = self.next_packet().map(parse_fragment) {
            let Some(f) = f else { continue };
            if !self.datagrams.contains_key(&f.key) && self.datagrams.len() >= MAX_DATAGRAMS {
                continue;
            }
            let d = self.datagrams.entry(f.key).or_insert_with(|| Datagram {
                first_seen: now,
                records: Vec::new(),
                head: None,
            });
            if d.records.len() < MAX_FRAGMENTS {
                d.records.push(f.record);
            }
            if f.head.is_some() {
                d.head = f.head;
            }
        }
    }

    /// Takes the fragments of the datagram from `source` to port `port`
    /// whose payload starts like `payload`.
    pub fn take(&mut self, source: SocketAddr, port: u16, payload: &[u8]) -> Option<Vec<Fragment>> {
        let SocketAddr::V4(src) = source else { return None };
        let want = &payload[..payload.len().min(MATCH_LEN)];
        let key = self
            .datagrams
            .iter()
            .filter(|(k, d)| {
                k.0 == *src.ip()
                    && d.head
                        .as_ref()
                        .is_some_and(|(sp, dp, start)| *sp == src.port() && *dp == port && start.as_slice() == want)
            })
            // The most recent one, if retries reused a payload.
            .max_by_key(|(_, d)| d.first_seen)
            .map(|(k, _)| *k)?;
        self.datagrams.remove(&key).map(|d| d.records)
    }
}

/// The descriptor, for polling.
impl AsFd for FragmentCapture {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(id: u16, offset: u16, more: bool, data: &[u8]) -> Vec<u8> {
        let total = (20 + data.len()) as u16;
        let mut p = vec![0u8; 20];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[4..6].copy_from_slice(&id.to_be_bytes());
        let fo = (offset / 8) | if more { 0x2000 } else { 0 };
        p[6..8].copy_from_slice(&fo.to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[198, 51, 100, 1]);
        p[16..20].copy_from_slice(&[198, 51, 100, 34]);
        p.extend_from_slice(data);
        p
    }

    #[test]
    fn first_fragment_carries_ports_and_payload_start() {
        let mut udp = vec![0x9c, 0x40, 0x27, 0x0f, 0, 0, 0, 0];
        udp.extend_from_slice(b"FPMTPX\x01\x01 nonce and more bytes here");
        let f = parse_fragment(&packet(7, 0, true, &udp)).unwrap();
        assert_eq!(f.key.2, 7);
        assert_eq!(f.record, Fragment { offset: 0, ip_len: 20 + udp.len() as u16, more_fragments: true });
        let (sp, dp, start) = f.head.unwrap();
        assert_eq!((sp, dp), (40000, 9999));
        assert_eq!(start, udp[8..8 + MATCH_LEN].to_vec());
        let last = parse_fragment(&packet(7, 1480, false, &[0u8; 100])).unwrap();
        assert_eq!(last.record, Fragment { offset: 1480, ip_len: 120, more_fragments: false });
        assert!(last.head.is_none());
    }

    #[test]
    fn whole_packets_and_junk_are_not_fragments() {
        assert!(parse_fragment(&packet(1, 0, false, &[0u8; 40])).is_none(), "unfragmented");
        let mut tcp = packet(1, 0, true, &[0u8; 40]);
        tcp[9] = 6;
        assert!(parse_fragment(&tcp).is_none(), "not UDP");
        let mut short = packet(1, 0, true, &[0u8; 40]);
        short[2..4].copy_from_slice(&200u16.to_be_bytes());
        assert!(parse_fragment(&short).is_none(), "total length beyond the packet");
        let mut v6 = packet(1, 0, true, &[0u8; 40]);
        v6[0] = 0x60;
        assert!(parse_fragment(&v6).is_none());
        for n in 0..24 {
            assert!(parse_fragment(&packet(1, 8, true, &[0u8; 40])[..n]).is_none());
        }
    }
}
