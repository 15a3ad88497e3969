//! The IP-header work caravans need: setting the DSCP, lengths
//! and IPv4 ID of a datagram's or caravan's IP header, and UDP
//! pseudo-header sums.

use core::net::IpAddr;

use px_wire::FrameInfo;
use px_wire::checksum::{self, Sum};
use px_wire::ipv4::Ipv4Packet;
use px_wire::{ipv4, ipv6};

/// Rewrites the IP header `ip` (the whole header: IPv4 options or IPv6
/// extension headers included) of a packet of `ip_len` bytes: DSCP (ECN
/// kept), length, and, if given, the IPv4 ID; the IPv4 header checksum is
/// recomputed.
pub(crate) fn set_ip_header(ip: &mut [u8], dscp: u8, ip_len: usize, ident: Option<u16>) {
    if ip[0] >> 4 == 4 {
        let mut h = Ipv4Packet::new_unchecked(ip);
        h.set_dscp(dscp);
        h.set_total_len(ip_len as u16);
        if let Some(id) = ident {
            h.set_ident(id);
        }
        h.fill_checksum();
    } else {
        // Traffic class = low nibble of byte 0, high nibble of byte 1.
        let tc = px_wire::caravan::tos(dscp, (ip[1] >> 4) & 0b11);
        ip[0] = (ip[0] & 0xf0) | (tc >> 4);
        ip[1] = (ip[1] & 0x0f) | (tc << 4);
        ip[ipv6::field::PAYLOAD_LEN].copy_from_slice(&((ip_len - ipv6::HEADER_LEN) as u16).to_be_bytes());
    }
}

/// UDP pseudo-header sum of a parsed frame's addresses for `len` bytes.
pub(crate) fn pseudo(info: &FrameInfo, len: usize) -> Sum {
    match (info.src, info.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => checksum::pseudo_v4(s, d, 17, len as u16),
        (IpAddr::V6(s), IpAddr::V6(d)) => checksum::pseudo_v6(s, d, 17, len as u32),
        _ => Sum(0),
    }
}

/// The same from an option-less IP header's bytes.
pub(crate) fn pseudo_of(ip: &[u8], len: usize) -> Sum {
    if ip[0] >> 4 == 4 {
        let word = |f: core::ops::Range<usize>| <[u8; 4]>::try_from(&ip[f]).unwrap_or_default();
        let (s, d) = (word(ipv4::field::SRC), word(ipv4::field::DST));
        checksum::pseudo_v4(s.into(), d.into(), 17, len as u16)
    } else {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&ip[ipv6::field::SRC]);
        d.copy_from_slice(&ip[ipv6::field::DST]);
        checksum::pseudo_v6(s.into(), d.into(), 17, len as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pseudo_sums_agree() {
        // Header bytes and parsed addresses give the same pseudo-header.
        let mut ip = [0u8; 20];
        px_wire::ipv4::emit_header(&mut ip, 0, 48, 1, true, 64, 17, [198, 51, 100, 1].into(), [203, 0, 113, 2].into());
        let a = checksum::pseudo_v4([198, 51, 100, 1].into(), [203, 0, 113, 2].into(), 17, 28);
        assert_eq!(pseudo_of(&ip, 28), a);
    }
}
