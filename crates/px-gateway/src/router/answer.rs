//! When the gateway may answer a packet with an ICMP error at all (RFC 1812
//! §4.3.2.7, RFC 4443 §2.4(e)): never about an ICMP error, a non-first
//! fragment, a packet to a multicast or broadcast address (IP or link
//! layer), or a packet whose source is not a unicast host (unspecified,
//! "this network", loopback, multicast, class E, limited broadcast).
//!
//! The one exception is RFC 4443's: an IPv6 "packet too big" is sent about
//! packets to multicast destinations too (§2.4(e.2), (e.3)), since without
//! it path MTU discovery for multicast cannot work. The gateway sends no
//! other ICMPv6 error, so IPv6 multicast destinations are always answered.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use px_wire::icmp;
use px_wire::ipv4::Ipv4Packet;
use px_wire::ipv6::Ipv6Packet;
use px_wire::{FrameInfo, IpVersion, Transport};

/// Whether the packet in `frame` may be answered with a "too big" error.
pub(crate) fn may_answer_too_big(frame: &[u8], info: &FrameInfo) -> bool {
    let about_icmp_error = info.transport == Transport::Icmp
        && frame.get(info.l4).is_some_and(|&t| match info.version {
            IpVersion::V4 => icmp::is_v4_error(t),
            IpVersion::V6 => icmp::is_v6_error(t),
        });
    let later_fragment = match info.version {
        IpVersion::V4 => Ipv4Packet::new_unchecked(&frame[info.l3..info.l4]).frag_offset() != 0,
        IpVersion::V6 => {
            info.fragment
                && Ipv6Packet::new_checked(&frame[info.l3..info.end])
                    .ok()
                    .and_then(|p| p.upper_layer().ok())
                    .and_then(|u| u.fragment)
                    .is_none_or(|f| f.offset != 0)
        }
    };
    // Bit 0 of the first byte: a group (multicast or broadcast) address.
    let link_group = info.l3 >= 6 && frame[0] & 1 != 0;
    let dst_ok = match info.dst {
        IpAddr::V4(d) => !link_group && !v4_not_unicast(d),
        // RFC 4443 §2.4(e.2), (e.3): "packet too big" is allowed.
        IpAddr::V6(_) => true,
    };
    let src_ok = match info.src {
        IpAddr::V4(s) => !v4_not_unicast(s) && !s.is_loopback() && s.octets()[0] != 0,
        IpAddr::V6(s) => !v6_not_unicast_host(s),
    };
    !about_icmp_error && !later_fragment && dst_ok && src_ok
}

/// Multicast (class D), class E and the limited broadcast.
fn v4_not_unicast(a: Ipv4Addr) -> bool {
    a.octets()[0] >= 224
}

/// Unspecified, loopback or multicast.
fn v6_not_unicast_host(a: Ipv6Addr) -> bool {
    a.is_unspecified() || a.is_loopback() || a.is_multicast()
}
