//! Router behaviour for packets the gateway does not translate (everything
//! but TCP, and UDP the caravans do not take): IPv4 without DF is
//! fragmented (RFC 791 §3.2), anything else too big is dropped with an ICMP
//! error back to its source (RFC 1191 "fragmentation needed" with the
//! next-hop MTU, RFC 4443 "packet too big"), rate-limited (RFC 1812
//! §4.3.2.8, RFC 4443 §2.4(f)) and only where RFC 1812 §4.3.2.7 / RFC 4443
//! §2.4(e) allow one. ICMP errors from either side teach the engine path
//! MTUs once validated (kept in `crate::pmtu`).
//!
//! IEEE 802.1D link-local control frames are not passed on (see
//! [`link_local_control`]).
//!
//! - [`frames`]: writing fragments and ICMP errors.
//! - [`answer`]: which packets may be answered with an ICMP error.
//! - RFC 5927 validation of "too big" errors: the engine's `learn.rs`
//!   (it needs the flows); the per-flow sequence windows are kept by
//!   `crate::conntrack`.
//! - [`limit`]: the ICMP rate limit.

pub(crate) mod answer;
pub(crate) mod frames;
pub(crate) mod limit;

/// Linux `net.ipv4.route.min_pmtu`: the smallest IPv4 path MTU believed.
pub(crate) const MIN_PMTU_V4: u16 = 552;
/// RFC 8200 §5: every IPv6 link carries 1280 bytes.
pub(crate) const MIN_PMTU_V6: u16 = 1280;

/// Where an engine's ICMPv4 error identifications start: non-zero, and
/// spread apart between the engines of one gateway (its workers share a
/// seed and send errors from one source address); `engine` numbers them.
pub(crate) fn first_icmp_ident(seed: u64, engine: u64) -> u16 {
    ((seed ^ engine.wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> 16) as u16 | 1
}

/// An IEEE 802.1D reserved link-local group address, 01:80:C2:00:00:00 to
/// 01:80:C2:00:00:0F (STP, pause, LACP, 802.1X, LLDP...): a bridge never
/// forwards these, and the gateway, a bump in the wire, neither: passing
/// them would join the spanning trees and link aggregations of two
/// networks that each expect to talk to their own neighbour.
pub(crate) fn link_local_control(frame: &[u8]) -> bool {
    frame.len() >= 6 && frame[..5] == [0x01, 0x80, 0xc2, 0x00, 0x00] && frame[5] & 0xf0 == 0
}
