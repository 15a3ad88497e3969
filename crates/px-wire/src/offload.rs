//! Segmentation and checksum offload state of one frame: the metadata the
//! engine and the I/O layer exchange with every frame.
//!
//! On receive it says that a frame is a GRO super-packet (`gso` is the
//! segment size the sender used) and whether the TCP/UDP checksum is still
//! *partial* (only the pseudo-header sum is in the checksum field; the
//! payload has not been summed). On transmit it asks whoever sends the
//! frame (kernel, NIC, or a software fallback) to cut a super-packet into
//! `gso.size`-byte segments and to finish the checksum.
//!
//! These are plain descriptions, with the semantics of Linux's
//! `struct virtio_net_hdr`; the encoding to and from that header lives in
//! the I/O layer (`px_io::vnet`).

/// What a GSO super-packet is cut into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GsoKind {
    /// TCP over IPv4 (`VIRTIO_NET_HDR_GSO_TCPV4`).
    TcpV4,
    /// TCP over IPv6 (`VIRTIO_NET_HDR_GSO_TCPV6`).
    TcpV6,
    /// UDP segmentation, one datagram per segment (`VIRTIO_NET_HDR_GSO_UDP_L4`).
    UdpL4,
}

/// Segmentation metadata of a super-packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gso {
    /// Protocol the segments carry.
    pub kind: GsoKind,
    /// Payload bytes per segment (the MSS for TCP); the last may be shorter.
    pub size: u16,
    /// TCP ECN: the flow uses ECN and CWR must appear on the first segment
    /// only (`VIRTIO_NET_HDR_GSO_ECN`).
    pub ecn: bool,
}

/// State of the transport checksum of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Checksum {
    /// Nothing known: the checksum field holds whatever the sender wrote.
    /// On TX: the frame's checksums are complete, nobody touches them.
    Unknown,
    /// `VIRTIO_NET_HDR_F_NEEDS_CSUM` / `CHECKSUM_PARTIAL`: the field at
    /// `start + offset` holds only the pseudo-header sum; the one's
    /// complement sum from `start` to the end of the frame must still be
    /// folded in. On RX the data was verified on the way in.
    Partial {
        /// Offset from the frame start where summing begins (the L4 header).
        start: u16,
        /// Offset of the checksum field from `start` (16 TCP, 6 UDP).
        offset: u16,
    },
    /// `VIRTIO_NET_HDR_F_DATA_VALID`: the kernel or NIC already verified it.
    Valid,
}

/// Offload metadata of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PacketMeta {
    /// `Some` for a super-packet (RX: built by GRO; TX: to be cut).
    pub gso: Option<Gso>,
    /// Checksum state.
    pub csum: Checksum,
    /// Length of the L2+L3+L4 headers (a hint; 0 if unknown).
    pub hdr_len: u16,
}

impl PacketMeta {
    /// An ordinary frame: no GSO, complete checksums.
    pub const PLAIN: PacketMeta = PacketMeta { gso: None, csum: Checksum::Unknown, hdr_len: 0 };

    /// TX metadata for a TCP super-packet to be cut into `mss` payload bytes
    /// per segment. `l4_offset` is where the TCP header starts and `hdr_len`
    /// the length of all headers. The frame's TCP checksum field must hold
    /// the pseudo-header sum (as a NIC driver would set it for TSO); each
    /// segment's checksum is computed when it is cut.
    #[inline]
    pub fn tcp_gso(ipv6: bool, mss: u16, l4_offset: u16, hdr_len: u16) -> PacketMeta {
        PacketMeta {
            gso: Some(Gso { kind: if ipv6 { GsoKind::TcpV6 } else { GsoKind::TcpV4 }, size: mss, ecn: false }),
            csum: Checksum::Partial { start: l4_offset, offset: 16 },
            hdr_len,
        }
    }

    /// For a TCP super-packet (a TCP GSO kind): the size of the segments it
    /// was made of (the wire MSS). `None` for plain frames and UDP batches.
    #[inline]
    pub fn tcp_gso_size(&self) -> Option<u16> {
        match self.gso {
            Some(Gso { kind: GsoKind::TcpV4 | GsoKind::TcpV6, size, .. }) => Some(size),
            _ => None,
        }
    }
}

/// Why a partial checksum could not be completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PartialChecksumError {
    /// The checksum field (`start + offset`, two bytes) lies beyond the packet.
    #[error("checksum field at {start}+{offset} outside a {len}-byte packet")]
    OutOfRange {
        /// Where summing starts.
        start: u16,
        /// The field's offset from `start`.
        offset: u16,
        /// The packet's length.
        len: usize,
    },
}

/// Completes a [`Checksum::Partial`] checksum of `packet` in place, as the
/// kernel's `skb_checksum_help` does: the field at `start + offset` holds
/// the pseudo-header sum, so the one's complement sum over `packet[start..]`
/// (field included) is folded, complemented and stored (RFC 1071; a UDP
/// field's computed zero is stored as all ones, RFC 768). `packet` is an
/// Ethernet frame and ends where the packet ends (no link-layer trailer:
/// it would be summed). Returns whether there was anything to complete.
/// This is the one place a partial checksum is completed: the engine, its
/// tunnel code and the I/O layer all call it.
///
/// SCTP's checksum is a CRC32c, not a one's complement sum (RFC 9260
/// §6.8); Linux offloads it as `CHECKSUM_PARTIAL` too, marking the skb
/// `csum_not_inet` and finishing it with `skb_crc32c_csum_help`. The
/// virtio-net header a packet socket reads carries only `start` and
/// `offset` (`virtio_net_hdr_from_skb`), not that mark, so it is told here
/// from the packet: a field at SCTP's offset (8) of a header at `start`
/// that the IP header names SCTP (protocol 132, not a fragment) gets the
/// CRC32c ([`crate::crc32c::finish_sctp`]). TCP's and UDP's offsets (16,
/// 6) never parse anything.
pub fn complete_partial(packet: &mut [u8], csum: Checksum) -> Result<bool, PartialChecksumError> {
    let Checksum::Partial { start, offset } = csum else { return Ok(false) };
    let (s, o) = (usize::from(start), usize::from(offset));
    let done = if o == crate::crc32c::SCTP_CHECKSUM
        && let Some(end) = sctp_end(packet, s)
    {
        crate::crc32c::finish_sctp(&mut packet[s..end])
    } else {
        crate::checksum::finish_partial(packet, s, o)
    };
    if done { Ok(true) } else { Err(PartialChecksumError::OutOfRange { start, offset, len: packet.len() }) }
}

/// What one frame handed over by (or to) a packet socket is on the wire:
/// how many frames, and how many bytes of them (link header included, no
/// FCS: what `ip -s link` counts on a device that counts segments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WireCount {
    /// Frames on the wire: 1 for a plain frame, the segments of a
    /// super-packet (GRO built it from them; GSO or TSO cuts it into them).
    pub packets: u64,
    /// Their bytes: the super-packet's bytes plus its headers once more
    /// for every segment after the first.
    pub bytes: u64,
}

/// The wire frames of `frame` with offload metadata `meta`: a plain frame
/// is itself; a super-packet is `ceil(payload / gso.size)` segments, each
/// carrying the headers up to the end of the TCP header (or the UDP
/// header of a `UdpL4` batch). The headers are read from the frame, not
/// from `meta.hdr_len` (on receive Linux fills that with the skb's linear
/// length, which may include payload). A super-packet whose headers do not
/// parse counts as one frame.
pub fn wire_count(frame: &[u8], meta: &PacketMeta) -> WireCount {
    let len = frame.len() as u64;
    let one = WireCount { packets: 1, bytes: len };
    let Some(gso) = meta.gso else { return one };
    let Ok(Some(info)) = crate::FrameInfo::parse(frame) else { return one };
    let hdr = match (gso.kind, info.transport) {
        (GsoKind::TcpV4 | GsoKind::TcpV6, crate::Transport::Tcp { header_len, .. }) => info.l4 + header_len,
        (GsoKind::UdpL4, crate::Transport::Udp { .. }) => info.l4 + crate::udp::HEADER_LEN,
        _ => return one,
    } as u64;
    let end = (info.end as u64).min(len);
    if gso.size == 0 || end <= hdr {
        return one;
    }
    let segments = (end - hdr).div_ceil(u64::from(gso.size));
    WireCount { packets: segments, bytes: len + (segments - 1) * hdr }
}

/// Where the SCTP packet whose common header starts at `start` ends, if
/// `frame`'s IP header (not a fragment) names SCTP there.
fn sctp_end(frame: &[u8], start: usize) -> Option<usize> {
    const SCTP: u8 = 132;
    let info = crate::FrameInfo::parse(frame).ok()??;
    (info.protocol == SCTP && info.l4 == start && !info.fragment && info.end <= frame.len()).then_some(info.end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP/IPv4 frame: 14 + 20 + 20 (+12 options) header bytes, `payload` bytes of data.
    fn tcp_frame(payload: usize, options: bool) -> Vec<u8> {
        let th = if options { 32 } else { 20 };
        let ip_len = 20 + th + payload;
        let mut f = vec![0u8; 14 + ip_len];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&(ip_len as u16).to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&[198, 51, 100, 1]);
        f[30..34].copy_from_slice(&[203, 0, 113, 1]);
        let c = crate::checksum::Sum::of(&f[14..34]).checksum();
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f[34 + 12] = ((th / 4) as u8) << 4;
        f
    }

    #[test]
    fn a_super_packet_counts_its_wire_segments_and_their_headers() {
        let plain = tcp_frame(1448, true);
        assert_eq!(wire_count(&plain, &PacketMeta::PLAIN), WireCount { packets: 1, bytes: plain.len() as u64 });
        // 10 segments of 1448 (GRO's super-packet of 10 wire frames of 1514 B).
        let gro = tcp_frame(14_480, true);
        let meta = PacketMeta::tcp_gso(false, 1448, 34, 0);
        assert_eq!(wire_count(&gro, &meta), WireCount { packets: 10, bytes: 10 * (66 + 1448) });
        // A last, shorter segment is a segment.
        let odd = tcp_frame(14_481, false);
        assert_eq!(wire_count(&odd, &PacketMeta::tcp_gso(false, 1448, 34, 0)).packets, 11);
        assert_eq!(wire_count(&odd, &PacketMeta::tcp_gso(false, 1448, 34, 0)).bytes, 14 + 40 + 14_481 + 10 * 54);
        // A link trailer after the packet is not payload.
        let mut padded = tcp_frame(2896, false);
        padded.extend_from_slice(&[0; 4]);
        assert_eq!(wire_count(&padded, &PacketMeta::tcp_gso(false, 1448, 34, 0)).packets, 2);
        // Headers that do not parse: one frame, whatever the metadata says.
        assert_eq!(wire_count(&[0u8; 100], &meta), WireCount { packets: 1, bytes: 100 });
    }

    #[test]
    fn a_partial_checksum_is_completed_once_and_only_inside_the_packet() {
        // A UDP header at 0 whose checksum field holds a pseudo-header sum.
        let mut p = [0x12, 0x34, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x11, 1, 2, 3, 4];
        let csum = Checksum::Partial { start: 0, offset: 6 };
        assert_eq!(complete_partial(&mut p, csum), Ok(true));
        // The datagram with its pseudo-header (whose sum 0x0011 the field
        // held) now verifies: the total folds to zero.
        assert_eq!(crate::checksum::Sum::of(&p).plus(crate::checksum::Sum(0x11)).checksum(), 0);
        assert_eq!(complete_partial(&mut p, Checksum::Valid), Ok(false));
        assert_eq!(
            complete_partial(&mut p[..7], csum),
            Err(PartialChecksumError::OutOfRange { start: 0, offset: 6, len: 7 })
        );
    }

    /// SCTP frames (IPv4 and IPv6, with IPv6 extension headers) built and
    /// checksummed by scapy, an implementation independent of ours, at
    /// test time; skipped, saying so, where `/usr/bin/python3` has no scapy.
    fn scapy_sctp_frames() -> Option<Vec<Vec<u8>>> {
        let script = r#"
from scapy.all import *
e = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
d = SCTPChunkData(tsn=1, data=b"partial checksum of sctp, odd length")
for p in [e/IP(src="198.51.100.1", dst="203.0.113.2")/SCTP(sport=5000, dport=5001, tag=0x12345678)/d,
          e/IPv6(src="2001:db8::1", dst="2001:db8::2")/IPv6ExtHdrHopByHop()/SCTP(sport=7, dport=9, tag=1)/d/SCTPChunkData(tsn=2, data=b"x" * 1000),
          e/IP(src="198.51.100.1", dst="203.0.113.2")/SCTP(sport=1, dport=2)/SCTPChunkInit()]:
    print(raw(p).hex())
"#;
        let out = std::process::Command::new("/usr/bin/python3").args(["-c", script]).output().ok()?;
        if !out.status.success() {
            eprintln!("skipped: /usr/bin/python3 with scapy is not available here");
            return None;
        }
        let hex = |s: &str| (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect();
        Some(String::from_utf8(out.stdout).unwrap().lines().map(hex).collect())
    }

    #[test]
    fn a_partial_sctp_checksum_is_finished_as_scapy_computes_it() {
        let Some(frames) = scapy_sctp_frames() else { return };
        assert_eq!(frames.len(), 3);
        for want in frames {
            let info = crate::FrameInfo::parse(&want).unwrap().unwrap();
            assert_eq!(info.protocol, 132);
            // CHECKSUM_PARTIAL as Linux hands an SCTP frame over: the
            // field not yet computed (here zero, then garbage).
            for junk in [[0u8; 4], [0xde, 0xad, 0xbe, 0xef]] {
                let mut f = want.clone();
                f[info.l4 + 8..info.l4 + 12].copy_from_slice(&junk);
                let csum = Checksum::Partial { start: info.l4 as u16, offset: 8 };
                assert_eq!(complete_partial(&mut f[..info.end], csum), Ok(true));
                assert_eq!(f, want, "the CRC32c scapy computed, byte for byte");
            }
        }
    }

    #[test]
    fn tcp_gso_describes_a_tso_frame() {
        let m = PacketMeta::tcp_gso(true, 8928, 54, 86);
        assert_eq!(m.gso, Some(Gso { kind: GsoKind::TcpV6, size: 8928, ecn: false }));
        assert_eq!(m.csum, Checksum::Partial { start: 54, offset: 16 });
        assert_eq!(m.hdr_len, 86);
        assert_eq!(PacketMeta::tcp_gso(false, 1448, 34, 66).gso.map(|g| g.kind), Some(GsoKind::TcpV4));
    }

    #[test]
    fn tcp_gso_size_ignores_udp_batches() {
        assert_eq!(PacketMeta::tcp_gso(false, 1448, 34, 66).tcp_gso_size(), Some(1448));
        assert_eq!(PacketMeta::PLAIN.tcp_gso_size(), None);
        let udp = PacketMeta {
            gso: Some(Gso { kind: GsoKind::UdpL4, size: 1200, ecn: false }),
            csum: Checksum::Partial { start: 34, offset: 6 },
            hdr_len: 42,
        };
        assert_eq!(udp.tcp_gso_size(), None);
    }
}
