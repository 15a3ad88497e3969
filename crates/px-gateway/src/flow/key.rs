//! A connection's key: (outer host, outer port, inner host, inner port),
//! the same for both directions, whichever port a packet arrived on
//! ([`FlowKey::of_direction`]). A leaf: the flow table, the fast path's
//! contract and the caravans name it; it names no engine state.

use core::hash::Hasher;
use core::net::{IpAddr, SocketAddr};

use px_wire::IpVersion;

use crate::port::Port;
use crate::segment::Seg;

/// A connection as the gateway sees it: (outer host, outer port, inner
/// host, inner port), packed into words so that comparing and hashing a key
/// is a handful of word operations. IPv4 keys use the first two words only.
#[derive(Debug, Clone, Copy, Eq)]
pub struct FlowKey {
    pub(super) words: [u64; 5],
}

impl PartialEq for FlowKey {
    /// Word by word with an early exit (array equality calls `bcmp`).
    #[inline]
    fn eq(&self, o: &FlowKey) -> bool {
        let (a, b) = (&self.words, &o.words);
        a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4]
    }
}

impl FlowKey {
    pub fn new(outer_addr: IpAddr, inner_addr: IpAddr, outer_port: u16, inner_port: u16) -> FlowKey {
        let ports = (outer_port as u64) << 16 | inner_port as u64;
        match (outer_addr, inner_addr) {
            (IpAddr::V4(o), IpAddr::V4(i)) => FlowKey::from_v4(u32::from(o), u32::from(i), outer_port, inner_port),
            (o, i) => {
                let wide = |a: IpAddr| match a {
                    IpAddr::V4(v) => u128::from(v.to_ipv6_mapped()),
                    IpAddr::V6(v) => u128::from(v),
                };
                let (o, i) = (wide(o), wide(i));
                // Bit 32 of the ports word marks IPv6, so a v6 key never
                // equals a v4 one.
                FlowKey { words: [(o >> 64) as u64, ports | 1 << 32, o as u64, (i >> 64) as u64, i as u64] }
            }
        }
    }

    /// An IPv4 key from the addresses as host-order words.
    #[inline]
    pub fn from_v4(outer_addr: u32, inner_addr: u32, outer_port: u16, inner_port: u16) -> FlowKey {
        let ports = (outer_port as u64) << 16 | inner_port as u64;
        FlowKey { words: [(outer_addr as u64) << 32 | inner_addr as u64, ports, 0, 0, 0] }
    }

    /// The connection's key for a packet from `src` to `dst` (addresses
    /// and ports as the packet carries them) that arrived on `from`: a
    /// direction's key, the same for both directions of a connection.
    pub fn of_direction(from: Port, src: IpAddr, dst: IpAddr, src_port: u16, dst_port: u16) -> FlowKey {
        match from {
            Port::Outer => FlowKey::new(src, dst, src_port, dst_port),
            Port::Inner => FlowKey::new(dst, src, dst_port, src_port),
        }
    }

    /// The connection's flow key, for a segment that arrived on `from`.
    /// IPv4 keys are read as words straight from the frame.
    pub(crate) fn of_segment(seg: &Seg, frame: &[u8], from: Port) -> FlowKey {
        if seg.info.version == IpVersion::V4 {
            // One bounds check for both addresses.
            let a = seg.info.l3 + px_wire::ipv4::field::SRC.start;
            let w = frame.get(a..a + 8).and_then(|b| <[u8; 8]>::try_from(b).ok()).map_or(0, u64::from_be_bytes);
            let (src, dst) = ((w >> 32) as u32, w as u32);
            return match from {
                Port::Outer => FlowKey::from_v4(src, dst, seg.src_port, seg.dst_port),
                Port::Inner => FlowKey::from_v4(dst, src, seg.dst_port, seg.src_port),
            };
        }
        FlowKey::of_direction(from, seg.info.src, seg.info.dst, seg.src_port, seg.dst_port)
    }

    /// The end a packet that arrived on `from` goes to: the inner host for
    /// an inbound one, the outer host for an outbound one.
    pub fn destination(&self, from: Port) -> SocketAddr {
        match from {
            Port::Outer => self.inner(),
            Port::Inner => self.outer(),
        }
    }

    fn is_v6(&self) -> bool {
        self.words[1] & 1 << 32 != 0
    }

    /// (outer host, inner host, outer port, inner port), as made by
    /// [`FlowKey::new`] (IPv4-mapped IPv6 addresses of a mixed key come
    /// back as IPv6).
    pub fn parts(&self) -> (IpAddr, IpAddr, u16, u16) {
        let w = &self.words;
        let (op, ip) = ((w[1] >> 16) as u16, w[1] as u16);
        if self.is_v6() {
            let o = (w[0] as u128) << 64 | w[2] as u128;
            let i = (w[3] as u128) << 64 | w[4] as u128;
            (IpAddr::V6(o.into()), IpAddr::V6(i.into()), op, ip)
        } else {
            let (o, i) = ((w[0] >> 32) as u32, w[0] as u32);
            (IpAddr::V4(o.into()), IpAddr::V4(i.into()), op, ip)
        }
    }
    /// The outer host's address and port.
    pub fn outer(&self) -> SocketAddr {
        let port = (self.words[1] >> 16) as u16;
        if self.is_v6() {
            let a = (self.words[0] as u128) << 64 | self.words[2] as u128;
            SocketAddr::new(IpAddr::V6(a.into()), port)
        } else {
            SocketAddr::new(IpAddr::V4(((self.words[0] >> 32) as u32).into()), port)
        }
    }

    /// The inner host's address and port.
    pub fn inner(&self) -> SocketAddr {
        let port = self.words[1] as u16;
        if self.is_v6() {
            let a = (self.words[3] as u128) << 64 | self.words[4] as u128;
            SocketAddr::new(IpAddr::V6(a.into()), port)
        } else {
            SocketAddr::new(IpAddr::V4((self.words[0] as u32).into()), port)
        }
    }
}

impl core::hash::Hash for FlowKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.words[0]);
        h.write_u64(self.words[1]);
        if self.is_v6() {
            h.write_u64(self.words[2]);
            h.write_u64(self.words[3]);
            h.write_u64(self.words[4]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    fn key(n: u16) -> FlowKey {
        FlowKey::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)), IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1)), n, 80)
    }

    #[test]
    fn v4_and_v6_keys_differ() {
        let v4 = key(1);
        let v6 = FlowKey::new(
            IpAddr::V6(Ipv4Addr::new(198, 51, 100, 1).to_ipv6_mapped()),
            IpAddr::V6(Ipv4Addr::new(203, 0, 113, 1).to_ipv6_mapped()),
            1,
            80,
        );
        assert_ne!(v4, v6);
        assert!(v6.is_v6() && !v4.is_v6());
        assert_ne!(key(1), key(2));
    }

    #[test]
    fn both_directions_of_a_connection_have_one_key() {
        let (o, i): (IpAddr, IpAddr) = ("198.51.100.1".parse().unwrap(), "203.0.113.1".parse().unwrap());
        let inbound = FlowKey::of_direction(Port::Outer, o, i, 40_000, 80);
        let outbound = FlowKey::of_direction(Port::Inner, i, o, 80, 40_000);
        assert_eq!(inbound, outbound);
        assert_eq!(inbound, FlowKey::new(o, i, 40_000, 80));
        assert_eq!(inbound.destination(Port::Outer), SocketAddr::new(i, 80));
        assert_eq!(inbound.destination(Port::Inner), SocketAddr::new(o, 40_000));
        let (o6, i6): (IpAddr, IpAddr) = ("2001:db8::1".parse().unwrap(), "2001:db8:1::2".parse().unwrap());
        let v6 = FlowKey::of_direction(Port::Inner, i6, o6, 443, 5000);
        assert_eq!(v6.parts(), (o6, i6, 5000, 443));
        assert_eq!(v6.destination(Port::Inner), SocketAddr::new(o6, 5000));
    }
}
