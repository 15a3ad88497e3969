//! Frames the engine does not translate but that arrive in an offloaded
//! form: GRO'd tunnel super-packets, tunnel frames whose inner checksum is
//! still partial, and UDP GRO batches. The gateway passes them as a router
//! with GSO would: the original frames go on the wire, and a frame still too
//! big for the egress gets the router's treatment (`route_non_tcp`).
//!
//! What the kernel hands over (6.18, `virtio_net_hdr_from_skb`): a GRO'd
//! tunnel super-packet (GRE, IPIP, 6in4, VXLAN, GENEVE) carries the GSO type
//! of the *inner* TCP (`TCPV4`/`TCPV6`; the `SKB_GSO_UDP_TUNNEL`, `GRE` and
//! `IPXIP4/6` bits are not representable in a virtio-net header and are
//! dropped), `gso_size` the inner MSS, `csum_start` at the inner TCP header
//! and the inner TCP checksum field holding the pseudo-header sum only.
//! Measured on this kernel (6.18, `crates/px/tests/tunnel_lab.rs`: a real
//! VXLAN tunnel, outer IPv4, inner TCP with timestamps, across the gateway):
//! with TSO/GSO on the hosts' links, VXLAN GSO super-packets reach the
//! gateway's ports as `gso_type` TCPV4, `gso_size` 1398, `NEEDS_CSUM` with
//! `csum_start` 84 (14 + 20 + 8 + 8 + 14 + 20: the inner TCP header) and
//! `csum_offset` 16, `hdr_len` 116 (through the inner TCP header), up to
//! 64424 bytes; with wire-like senders, 1514-byte frames with no GSO and the
//! same `csum_start` 84 / `csum_offset` 16 (veth checksum offload leaves the
//! inner TCP checksum partial).
//!
//! Handing such a frame back to AF_PACKET with that header does not work:
//! the kernel would try to cut the outer packet as TCP (or refuse it), so
//! the engine cuts it in software, as Linux's tunnel GSO does: the inner
//! TCP payload in `gso_size` pieces, each a whole outer + inner frame with
//! its own outer IP length/ID/checksum, outer UDP length (checksum left at
//! zero over IPv4 if it was zero, recomputed otherwise), GRE checksum (if
//! the C bit is set; GRE has no length), inner IP length/ID/checksum and
//! inner TCP sequence number, flags (FIN/PSH on the last piece, CWR on the
//! first) and checksum.
//!
//! A UDP GRO batch (`VIRTIO_NET_HDR_GSO_UDP_L4`, `rx-udp-gro-forwarding`) is
//! cut into its datagrams the same way; each then takes the path any single
//! datagram takes (caravans, or the router's).

use px_wire::checksum::{self, Sum};
use px_wire::ethernet::{EthernetFrame, ethertype};
use px_wire::ipv4::Ipv4Packet;
use px_wire::ipv6::{Ipv6Packet, next_header};
use px_wire::offload::{Checksum, PacketMeta};
use px_wire::tcp::{TcpSegment, flags};
use px_wire::{FrameInfo, IpVersion, Transport};
use px_wire::{at, ipv4, ipv6, tcp, udp};

/// UDP ports of the tunnels the engine looks into: VXLAN (IANA 4789, and
/// Linux's historical default 8472) and GENEVE (6081).
const VXLAN_PORTS: [u16; 2] = [4789, 8472];
const GENEVE_PORT: u16 = 6081;
/// Transparent Ethernet bridging (GRE, GENEVE protocol type).
const ETH_P_TEB: u16 = 0x6558;

/// Where the headers of a tunnelled TCP segment lie in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Encap {
    /// Outer UDP header (VXLAN, GENEVE).
    pub udp: Option<usize>,
    /// GRE header whose C bit is set (its checksum covers it and the rest).
    pub gre_csum: Option<usize>,
    pub inner_l3: usize,
    pub inner_v6: bool,
    pub inner_l4: usize,
    /// Inner TCP header length.
    pub th: usize,
}

impl Encap {
    /// Parses a tunnelled TCP segment: outer IP (`info`), then IPIP / 6in4
    /// (and 4in6, 6in6), GRE (C and K bits; no routing, version 0), VXLAN or
    /// GENEVE, then inner IPv4 or IPv6 (not a fragment) and TCP filling the
    /// outer packet exactly. `None` for anything else.
    pub fn parse(frame: &[u8], info: &FrameInfo) -> Option<Encap> {
        if info.fragment {
            return None;
        }
        let (l4, end) = (info.l4, info.end);
        let mut udp = None;
        let mut gre_csum = None;
        let inner_l3 = match (info.protocol, info.transport) {
            // IPv4 (4) or IPv6 (41) right behind the outer header.
            (4 | 41, _) => l4,
            (47, _) => {
                let g = frame.get(l4..l4 + 4)?;
                // C, K, S bits only; version 0.
                if g[0] & !0xb0 != 0 || g[1] != 0 {
                    return None;
                }
                let len = 4 + 4 * ((g[0] >> 7) + ((g[0] >> 5) & 1) + ((g[0] >> 4) & 1)) as usize;
                if g[0] & 0x80 != 0 {
                    gre_csum = Some(l4);
                }
                inner_start(frame, l4 + len, u16::from_be_bytes([g[2], g[3]]), end)?
            }
            (next_header::UDP, Transport::Udp { dst_port, .. }) if VXLAN_PORTS.contains(&dst_port) => {
                udp = Some(l4);
                // I flag set; inner Ethernet after the 8-byte header.
                (frame.get(l4 + 8)? & 0x08 != 0).then_some(())?;
                inner_start(frame, l4 + 16, ETH_P_TEB, end)?
            }
            (next_header::UDP, Transport::Udp { dst_port: GENEVE_PORT, .. }) => {
                udp = Some(l4);
                let g = frame.get(l4 + 8..l4 + 16)?;
                if g[0] >> 6 != 0 {
                    return None;
                }
                let len = 8 + 4 * (g[0] & 0x3f) as usize;
                inner_start(frame, l4 + 8 + len, u16::from_be_bytes([g[2], g[3]]), end)?
            }
            _ => return None,
        };
        let ip = frame.get(inner_l3..end)?;
        let (inner_v6, inner_l4) = match ip.first()? >> 4 {
            4 => {
                let p = Ipv4Packet::new_checked(ip).ok()?;
                if p.is_fragment() || p.protocol() != next_header::TCP || p.total_len() != ip.len() {
                    return None;
                }
                (false, inner_l3 + p.header_len())
            }
            6 => {
                let p = Ipv6Packet::new_checked(ip).ok()?;
                let up = p.upper_layer().ok()?;
                if up.fragment.is_some() || up.protocol != next_header::TCP || p.total_len() != ip.len() {
                    return None;
                }
                (true, inner_l3 + up.offset)
            }
            _ => return None,
        };
        let th = TcpSegment::new_checked(&frame[inner_l4..end]).ok()?.header_len();
        Some(Encap { udp, gre_csum, inner_l3, inner_v6, inner_l4, th })
    }
}

/// Where the inner IP header starts after an encapsulation header ending
/// at `at` that announces `proto` (an EtherType; TEB: an Ethernet header
/// follows, possibly VLAN-tagged).
fn inner_start(frame: &[u8], at: usize, proto: u16, end: usize) -> Option<usize> {
    match proto {
        ethertype::IPV4 | ethertype::IPV6 => Some(at),
        ETH_P_TEB => {
            let e = EthernetFrame::new_checked(frame.get(at..end)?).ok()?;
            matches!(e.ethertype(), ethertype::IPV4 | ethertype::IPV6).then_some(at + e.header_len())
        }
        _ => None,
    }
}

/// Whether a frame that is not plain TCP carries offload state the router
/// path cannot honour as it is: GSO, or a partial checksum beyond its own
/// transport header (an inner header's).
#[inline]
pub(crate) fn is_offloaded(info: &FrameInfo, meta: &PacketMeta) -> bool {
    meta.gso.is_some() || matches!(meta.csum, Checksum::Partial { start, .. } if start as usize > info.l4)
}

/// One piece of a super-packet: number `i`, payload `[off, off + len)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece {
    pub i: usize,
    pub off: usize,
    pub len: usize,
    pub last: bool,
}

/// Copies the headers `frame[..hdr]` into `out` (which a pool buffer always
/// has room for: the callers check).
pub(crate) fn out_headers(out: &mut [u8], frame: &[u8], hdr: usize) {
    out[..hdr].copy_from_slice(&frame[..hdr]);
}

/// Sets the length (and, IPv4, the ID `+ i` and header checksum) of the IP
/// header at `l3` of a packet ending at `end`; returns the pseudo-header's
/// address sum (protocol and length not included).
pub(crate) fn set_ip_lengths(out: &mut [u8], l3: usize, version: IpVersion, end: usize, i: usize) -> Sum {
    match version {
        IpVersion::V4 => {
            let mut ip = Ipv4Packet::new_unchecked(&mut out[l3..end]);
            ip.set_total_len((end - l3) as u16);
            ip.set_ident(ip.ident().wrapping_add(i as u16));
            ip.fill_checksum();
            Sum::of(&out[l3 + ipv4::field::SRC.start..l3 + ipv4::field::DST.end])
        }
        IpVersion::V6 => {
            Ipv6Packet::new_unchecked(&mut out[l3..end]).set_payload_len((end - l3 - px_wire::ipv6::HEADER_LEN) as u16);
            Sum::of(&out[l3 + ipv6::field::SRC.start..l3 + ipv6::field::DST.end])
        }
    }
}

/// Writes one piece of a tunnel super-packet into `out`; returns its length.
pub(crate) fn write_tunnel_piece(
    frame: &[u8],
    info: &FrameInfo,
    e: &Encap,
    p: Piece,
    zero_udp: bool,
    out: &mut [u8],
) -> usize {
    let hdr = e.inner_l4 + e.th;
    out_headers(out, frame, hdr);
    let psum = checksum::copy_and_sum_in(&mut out[hdr..hdr + p.len], frame, hdr + p.off..hdr + p.off + p.len);
    let end = hdr + p.len;
    // Inner IP and TCP.
    let inner = if e.inner_v6 { IpVersion::V6 } else { IpVersion::V4 };
    let tcp_len = end - e.inner_l4;
    let pseudo = set_ip_lengths(out, e.inner_l3, inner, end, p.i);
    let mut tcp = TcpSegment::new_unchecked(&mut out[e.inner_l4..end]);
    let mut f = tcp.flags();
    if !p.last {
        f &= !(flags::FIN | flags::PSH);
    }
    if p.i != 0 {
        f &= !flags::CWR;
    }
    tcp.set_seq(tcp.seq().wrapping_add(p.off as u32));
    tcp.set_flags(f);
    tcp.set_checksum(0);
    let c = pseudo
        .plus(Sum(next_header::TCP as u64 + (tcp_len as u64 >> 16) + (tcp_len as u64 & 0xffff)))
        .plus(Sum::of(&out[e.inner_l4..hdr]))
        .plus(psum.at_offset(e.th))
        .checksum();
    out[at(e.inner_l4, tcp::field::CHECKSUM)].copy_from_slice(&c.to_be_bytes());
    // The encapsulation.
    let outer = set_ip_lengths(out, info.l3, info.version, end, p.i);
    if let Some(g) = e.gre_csum {
        out[g + 4..g + 6].copy_from_slice(&[0, 0]);
        let c = Sum::of(&out[g..end]).checksum();
        out[g + 4..g + 6].copy_from_slice(&c.to_be_bytes());
    }
    if let Some(u) = e.udp {
        let udp_len = end - u;
        out[at(u, udp::field::LEN)].copy_from_slice(&(udp_len as u16).to_be_bytes());
        out[at(u, udp::field::CHECKSUM)].copy_from_slice(&[0, 0]);
        if !zero_udp {
            let len = Sum(next_header::UDP as u64 + (udp_len as u64 >> 16) + (udp_len as u64 & 0xffff));
            let mut c = outer.plus(len).plus(Sum::of(&out[u..end])).checksum();
            if c == 0 {
                c = 0xffff;
            }
            out[at(u, udp::field::CHECKSUM)].copy_from_slice(&c.to_be_bytes());
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::Port;
    use crate::test_frames::{L2, Tcp};

    /// `inner` (an IP packet) behind an outer IPv4 header of `proto` and `encap`.
    fn wrap(proto: u8, encap: &[u8], inner: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; L2 + 20];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let total = 20 + encap.len() + inner.len();
        px_wire::ipv4::emit_header(
            &mut f[L2..],
            0,
            total as u16,
            1,
            true,
            64,
            proto,
            [198, 51, 100, 1].into(),
            [203, 0, 113, 1].into(),
        );
        f.extend_from_slice(encap);
        f.extend_from_slice(inner);
        if proto == 17 {
            let n = (encap.len() + inner.len()) as u16;
            f[L2 + 24..L2 + 26].copy_from_slice(&n.to_be_bytes());
        }
        f
    }

    fn parse(f: &[u8]) -> Option<Encap> {
        let info = FrameInfo::parse(f).unwrap().unwrap();
        Encap::parse(f, &info)
    }

    #[test]
    fn encapsulations_are_found() {
        let v4 = Tcp::data(false, Port::Outer, 1, 100).build();
        let v6 = Tcp::data(true, Port::Outer, 1, 100).build();
        let (ip4, ip6) = (&v4[L2..], &v6[L2..]);
        let o = L2 + 20;
        let e = parse(&wrap(4, &[], ip4)).unwrap();
        assert_eq!((e.inner_l3, e.inner_l4, e.th, e.inner_v6, e.udp), (o, o + 20, 32, false, None));
        let e = parse(&wrap(41, &[], ip6)).unwrap();
        assert_eq!((e.inner_l4, e.inner_v6), (o + 40, true));
        let e = parse(&wrap(47, &[0xa0, 0, 0x08, 0, 0, 0, 0, 0, 0, 0, 0, 7], ip4)).unwrap();
        assert_eq!((e.inner_l3, e.gre_csum), (o + 12, Some(o)));
        // GRE routing (R bit) or version 1 (PPTP): not looked into.
        assert_eq!(parse(&wrap(47, &[0x40, 0, 0x08, 0], ip4)), None);
        assert_eq!(parse(&wrap(47, &[0, 1, 0x08, 0], ip4)), None);
        let mut vx = vec![0xc0, 0, 0x12, 0xb5, 0, 0, 0, 0, 0x08, 0, 0, 0, 0, 0, 1, 0];
        vx.extend_from_slice(&v4[..L2]);
        let e = parse(&wrap(17, &vx, ip4)).unwrap();
        assert_eq!((e.udp, e.inner_l3), (Some(o), o + 16 + L2));
        let mut gn = vec![0xc0, 0, 0x17, 0xc1, 0, 0, 0, 0, 0x01, 0, 0x65, 0x58, 0, 0, 1, 0, 0, 0, 0, 0];
        gn.extend_from_slice(&v6[..L2]);
        let e = parse(&wrap(17, &gn, ip6)).unwrap();
        assert_eq!((e.inner_l3, e.inner_v6), (o + 20 + L2, true));
        // Other UDP, inner UDP, an inner packet that does not fill the outer one.
        assert_eq!(parse(&wrap(17, &[0xc0, 0, 0x00, 0x35, 0, 0, 0, 0], ip4)), None);
        let u = crate::test_frames::udp(false, Port::Outer, b"x");
        assert_eq!(parse(&wrap(4, &[], &u[L2..])), None);
        let mut short = wrap(4, &[], ip4);
        let n = short.len();
        short[L2 + 2..L2 + 4].copy_from_slice(&((n - L2 + 4) as u16).to_be_bytes());
        short.extend_from_slice(&[0; 4]);
        Ipv4Packet::new_unchecked(&mut short[L2..]).fill_checksum();
        assert_eq!(parse(&short), None);
    }

    #[test]
    fn offloaded_means_gso_or_a_checksum_beyond_the_outer_header() {
        let f = Tcp::data(false, Port::Outer, 1, 10).build();
        let info = FrameInfo::parse(&f).unwrap().unwrap();
        let partial = |start| PacketMeta { csum: Checksum::Partial { start, offset: 16 }, ..PacketMeta::PLAIN };
        assert!(!is_offloaded(&info, &PacketMeta::PLAIN));
        assert!(!is_offloaded(&info, &partial(34)));
        assert!(!is_offloaded(&info, &partial(0)));
        assert!(is_offloaded(&info, &partial(78)));
        assert!(is_offloaded(&info, &PacketMeta::tcp_gso(false, 1448, 34, 66)));
    }
}
