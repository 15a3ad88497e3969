//! A one-pass summary of a whole frame: link, network and transport offsets
//! and the fields a gateway decides on, without copying anything.
//!
//! [`FrameInfo::parse`] runs the checked constructors of every layer, so the
//! offsets it returns are valid for the frame it was given: slicing that same
//! frame with them cannot go out of bounds.

use core::net::IpAddr;

use crate::error::ParseError;
use crate::ethernet::{EthernetFrame, ethertype};
use crate::ipv4::Ipv4Packet;
use crate::ipv6::{Ipv6Packet, next_header};
use crate::tcp::TcpSegment;
use crate::udp::UdpDatagram;

/// IP version of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpVersion {
    V4,
    V6,
}

/// What a frame carries above the network layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp {
        src_port: u16,
        dst_port: u16,
        header_len: usize,
    },
    Udp {
        src_port: u16,
        dst_port: u16,
    },
    Icmp,
    /// A non-first fragment, or a protocol the gateway does not look into.
    Other,
}

/// Offsets and fields of a parsed IPv4 or IPv6 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameInfo {
    pub version: IpVersion,
    /// Offset of the IP header in the frame (the link header's length).
    pub l3: usize,
    /// Offset of the transport header in the frame (after IPv4 options or
    /// IPv6 extension headers).
    pub l4: usize,
    /// End of the IP packet in the frame (trailing link padding excluded).
    pub end: usize,
    /// Upper-layer protocol number.
    pub protocol: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dscp: u8,
    pub ecn: u8,
    pub ttl: u8,
    /// IPv4 DF; IPv6 packets are never fragmented by routers, so `true`.
    pub dont_frag: bool,
    /// IPv4 fragment, or IPv6 packet with a Fragment header.
    pub fragment: bool,
    /// IPv4 options, or IPv6 extension headers, are present.
    pub ip_options: bool,
    pub transport: Transport,
}

impl FrameInfo {
    /// Parses an Ethernet frame carrying IPv4 or IPv6. Frames of other
    /// EtherTypes give `Ok(None)`: they are not the gateway's business.
    #[inline]
    pub fn parse(frame: &[u8]) -> Result<Option<FrameInfo>, ParseError> {
        if let Some(i) = Self::parse_plain_v4_tcp(frame) {
            return Ok(Some(i));
        }
        let eth = EthernetFrame::new_checked(frame)?;
        let l3 = eth.header_len();
        match eth.ethertype() {
            ethertype::IPV4 => Self::parse_v4(frame, l3).map(Some),
            ethertype::IPV6 => Self::parse_v6(frame, l3).map(Some),
            _ => Ok(None),
        }
    }

    /// The common case in one pass: untagged Ethernet, IPv4 without options,
    /// not a fragment, TCP. Anything else (or anything odd) returns `None`
    /// and takes the general path, which gives the same result for these
    /// frames (a property test checks it).
    #[inline]
    fn parse_plain_v4_tcp(frame: &[u8]) -> Option<FrameInfo> {
        let h: &[u8; 54] = frame.get(..54)?.try_into().ok()?;
        if h[12] != 0x08 || h[13] != 0x00 || h[14] != 0x45 || h[23] != next_header::TCP {
            return None;
        }
        let total = u16::from_be_bytes([h[16], h[17]]) as usize;
        let frag = u16::from_be_bytes([h[20], h[21]]);
        let doff = ((h[46] >> 4) as usize) * 4;
        if frag & 0x3fff != 0 || total < 20 + doff || doff < 20 || 14 + total > frame.len() {
            return None;
        }
        Some(FrameInfo {
            version: IpVersion::V4,
            l3: 14,
            l4: 34,
            end: 14 + total,
            protocol: next_header::TCP,
            src: IpAddr::V4([h[26], h[27], h[28], h[29]].into()),
            dst: IpAddr::V4([h[30], h[31], h[32], h[33]].into()),
            dscp: h[15] >> 2,
            ecn: h[15] & 3,
            ttl: h[22],
            dont_frag: frag & crate::ipv4::FLAG_DF != 0,
            fragment: false,
            ip_options: false,
            transport: Transport::Tcp {
                src_port: u16::from_be_bytes([h[34], h[35]]),
                dst_port: u16::from_be_bytes([h[36], h[37]]),
                header_len: doff,
            },
        })
    }

    fn parse_v4(frame: &[u8], l3: usize) -> Result<FrameInfo, ParseError> {
        let ip = Ipv4Packet::new_checked(&frame[l3..])?;
        let l4 = l3 + ip.header_len();
        let end = l3 + ip.total_len();
        let fragment = ip.is_fragment();
        let transport = if ip.frag_offset() != 0 {
            Transport::Other
        } else {
            Self::transport(ip.protocol(), &frame[l4..end], fragment)
        };
        Ok(FrameInfo {
            version: IpVersion::V4,
            l3,
            l4,
            end,
            protocol: ip.protocol(),
            src: IpAddr::V4(ip.src()),
            dst: IpAddr::V4(ip.dst()),
            dscp: ip.dscp(),
            ecn: ip.ecn(),
            ttl: ip.ttl(),
            dont_frag: ip.dont_frag(),
            fragment,
            ip_options: ip.header_len() > crate::ipv4::MIN_HEADER_LEN,
            transport,
        })
    }

    fn parse_v6(frame: &[u8], l3: usize) -> Result<FrameInfo, ParseError> {
        let ip = Ipv6Packet::new_checked(&frame[l3..])?;
        let up = ip.upper_layer()?;
        let l4 = l3 + up.offset;
        let end = l3 + ip.total_len();
        let transport = if up.fragment.is_some_and(|f| f.offset != 0) {
            Transport::Other
        } else {
            Self::transport(up.protocol, &frame[l4..end], up.fragment.is_some_and(|f| f.is_fragment()))
        };
        Ok(FrameInfo {
            version: IpVersion::V6,
            l3,
            l4,
            end,
            protocol: up.protocol,
            src: IpAddr::V6(ip.src()),
            dst: IpAddr::V6(ip.dst()),
            dscp: ip.dscp(),
            ecn: ip.ecn(),
            ttl: ip.hop_limit(),
            dont_frag: true,
            fragment: up.fragment.is_some(),
            ip_options: up.offset != crate::ipv6::HEADER_LEN,
            transport,
        })
    }

    /// What the IP packet carries. A transport header that does not parse
    /// (cut short, a UDP length that disagrees with the IP length) is
    /// `Other`, not an error: the IP packet is sound, and a router forwards
    /// it without looking further; only the endpoint may judge its payload.
    fn transport(protocol: u8, l4: &[u8], fragment: bool) -> Transport {
        let ports =
            || Some((u16::from_be_bytes([*l4.first()?, *l4.get(1)?]), u16::from_be_bytes([*l4.get(2)?, *l4.get(3)?])));
        match protocol {
            next_header::TCP => match TcpSegment::new_checked(l4) {
                Ok(t) => Transport::Tcp { src_port: t.src_port(), dst_port: t.dst_port(), header_len: t.header_len() },
                Err(_) => Transport::Other,
            },
            next_header::UDP => match UdpDatagram::new_checked(l4) {
                Ok(u) => Transport::Udp { src_port: u.src_port(), dst_port: u.dst_port() },
                // A first fragment holds the UDP header but not the length it
                // announces; anything else that does not parse is `Other`.
                Err(_) if fragment && l4.len() >= 8 => match ports() {
                    Some((src_port, dst_port)) if u16::from_be_bytes([l4[4], l4[5]]) as usize >= 8 => {
                        Transport::Udp { src_port, dst_port }
                    }
                    _ => Transport::Other,
                },
                Err(_) => Transport::Other,
            },
            1 | next_header::ICMPV6 => Transport::Icmp,
            _ => Transport::Other,
        }
    }

    /// Length of the IP packet.
    pub fn ip_len(&self) -> usize {
        self.end - self.l3
    }

    /// Length of the IP header including options / extension headers.
    pub fn ip_header_len(&self) -> usize {
        self.l4 - self.l3
    }

    /// The upper layer's pseudo-header sum for `l4_len` bytes of `protocol`
    /// (`frame` is the one this was parsed from). IPv6 names the final
    /// destination (RFC 8200 §8.1): a routing header with segments left is
    /// looked into, which only packets with extension headers pay for.
    pub fn pseudo_header(&self, frame: &[u8], protocol: u8, l4_len: usize) -> crate::checksum::Sum {
        match (self.src, self.dst) {
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let d = if self.ip_options {
                    Ipv6Packet::new_checked(&frame[self.l3..self.end]).map_or(d, |p| p.final_dst())
                } else {
                    d
                };
                crate::checksum::pseudo_v6(s, d, protocol, l4_len as u32)
            }
            (IpAddr::V4(s), IpAddr::V4(d)) => crate::checksum::pseudo_v4(s, d, protocol, l4_len as u16),
            // Never parsed so.
            _ => crate::checksum::Sum(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_v4_frame() -> Vec<u8> {
        let builder = etherparse::PacketBuilder::ethernet2([1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12])
            .ipv4([198, 51, 100, 1], [203, 0, 113, 2], 64)
            .tcp(40000, 5201, 7, 64000)
            .ack(99)
            .options(&[etherparse::TcpOptionElement::Timestamp(1, 2)])
            .unwrap();
        let mut f = Vec::new();
        builder.write(&mut f, &[0xab; 100]).unwrap();
        f
    }

    #[test]
    fn tcp_v4_offsets() {
        let f = tcp_v4_frame();
        let i = FrameInfo::parse(&f).unwrap().unwrap();
        assert_eq!(i.version, IpVersion::V4);
        assert_eq!((i.l3, i.l4, i.end), (14, 34, f.len()));
        assert_eq!(i.transport, Transport::Tcp { src_port: 40000, dst_port: 5201, header_len: 32 });
        assert!(!i.fragment && !i.ip_options);
    }

    #[test]
    fn udp_v6() {
        let builder = etherparse::PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv6(
                [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                9,
            )
            .udp(53, 5353);
        let mut f = Vec::new();
        builder.write(&mut f, b"hello").unwrap();
        let i = FrameInfo::parse(&f).unwrap().unwrap();
        assert_eq!(i.version, IpVersion::V6);
        assert_eq!(i.transport, Transport::Udp { src_port: 53, dst_port: 5353 });
        assert_eq!(i.ttl, 9);
        assert_eq!(i.ip_len(), 40 + 8 + 5);
    }

    /// The general path, without the fast one.
    fn parse_general(frame: &[u8]) -> Result<Option<FrameInfo>, ParseError> {
        let eth = EthernetFrame::new_checked(frame)?;
        let l3 = eth.header_len();
        match eth.ethertype() {
            ethertype::IPV4 => FrameInfo::parse_v4(frame, l3).map(Some),
            ethertype::IPV6 => FrameInfo::parse_v6(frame, l3).map(Some),
            _ => Ok(None),
        }
    }

    proptest::proptest! {
        #[test]
        fn fast_path_agrees_with_general(
            payload in 0usize..300, doff in 5u8..16, flags_frag in proptest::prelude::any::<u16>(),
            total_delta in -70i32..10, tail in 0usize..8, tos in proptest::prelude::any::<u8>(),
        ) {
            let mut f = tcp_v4_frame();
            f.truncate(14 + 20 + 32);
            f.extend(std::iter::repeat_n(0xab, payload + tail));
            f[15] = tos;
            f[20..22].copy_from_slice(&flags_frag.to_be_bytes());
            f[46] = (doff << 4) | (f[46] & 0x0f);
            let total = (20 + 32 + payload) as i32 + total_delta;
            f[16..18].copy_from_slice(&(total.max(0) as u16).to_be_bytes());
            let fast = FrameInfo::parse_plain_v4_tcp(&f);
            let general = parse_general(&f);
            if let Some(x) = fast {
                proptest::prop_assert_eq!(Ok(Some(x)), general);
            }
            proptest::prop_assert_eq!(FrameInfo::parse(&f), general);
        }
    }

    /// A UDP header whose length runs past the packet is `Other` unless the
    /// packet is a first fragment (which holds only the start of the datagram).
    #[test]
    fn udp_length_past_the_packet_is_other_unless_first_fragment() {
        let builder = etherparse::PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv4([198, 51, 100, 1], [203, 0, 113, 2], 64)
            .udp(53, 5353);
        let mut f = Vec::new();
        builder.write(&mut f, &[7u8; 40]).unwrap();
        f[14 + 20 + 4..14 + 20 + 6].copy_from_slice(&4000u16.to_be_bytes());
        assert_eq!(FrameInfo::parse(&f).unwrap().unwrap().transport, Transport::Other);
        f[14 + 6] = 0x20; // MF: a first fragment
        f[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
        let c = crate::checksum::Sum::of(&f[14..34]).checksum();
        f[24..26].copy_from_slice(&c.to_be_bytes());
        let i = FrameInfo::parse(&f).unwrap().unwrap();
        assert!(i.fragment);
        assert_eq!(i.transport, Transport::Udp { src_port: 53, dst_port: 5353 });
    }

    #[test]
    fn arp_is_not_ours() {
        let mut f = vec![0u8; 42];
        f[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
        assert_eq!(FrameInfo::parse(&f).unwrap(), None);
    }

    #[test]
    fn bad_transport_header_is_other_not_error() {
        let mut f = tcp_v4_frame();
        // Claim a 60-byte TCP header in a 32-byte one with little payload.
        f.truncate(14 + 20 + 32);
        f[16..18].copy_from_slice(&((20 + 32) as u16).to_be_bytes());
        f[14 + 20 + 12] = 15 << 4;
        let i = FrameInfo::parse(&f).unwrap().unwrap();
        assert_eq!(i.transport, Transport::Other);
        assert_eq!(i.protocol, 6);
        // A broken IP header stays an error.
        f[14] = 0x55;
        assert!(FrameInfo::parse(&f).is_err());
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// Frames built by scapy (`IPv6ExtHdrSegmentRouting`, `IPv6ExtHdrRouting`),
    /// whose checksums scapy computes over the final destination
    /// 2001:db8:2::4, not the header's 2001:db8::2.
    #[test]
    fn routing_headers_put_the_final_destination_in_the_pseudo_header() {
        let srh_tcp = hex(concat!(
            "02000000000202000000000186dd6000000000642b4020010db800000000000000000000000120010db8",
            "000000000000000000000002060604020200000020010db800020000000000000000000420010db80001",
            "0000000000000000000320010db80000000000000000000000029c400050000003e80000000050182000",
            "180a000068656c6c6f2c2066696e616c2064657374696e6174696f6e"
        ));
        let rh0_udp = hex(concat!(
            "02000000000202000000000186dd60000000003c2b4020010db800000000000000000000000120010db8",
            "000000000000000000000002110400020000000020010db800010000000000000000000320010db80002",
            "000000000000000000041388177000146ff974797065203020726f757465"
        ));
        let fin: core::net::Ipv6Addr = "2001:db8:2::4".parse().unwrap();
        for (f, proto) in [(srh_tcp, 6u8), (rh0_udp, 17)] {
            let i = FrameInfo::parse(&f).unwrap().unwrap();
            assert_eq!(i.protocol, proto);
            assert!(i.ip_options);
            assert_eq!(Ipv6Packet::new_checked(&f[i.l3..i.end]).unwrap().final_dst(), fin);
            let l4_len = i.end - i.l4;
            let s = i.pseudo_header(&f, proto, l4_len).plus(crate::checksum::Sum::of(&f[i.l4..i.end]));
            assert_eq!(crate::checksum::fold(s), 0xffff, "proto {proto}: scapy's checksum verifies");
            // With segments left 0 the header's destination is the final one.
            let mut g = f.clone();
            g[14 + 40 + 3] = 0;
            let i = FrameInfo::parse(&g).unwrap().unwrap();
            let s = i.pseudo_header(&g, proto, l4_len).plus(crate::checksum::Sum::of(&g[i.l4..i.end]));
            assert_ne!(crate::checksum::fold(s), 0xffff);
        }
    }
}
