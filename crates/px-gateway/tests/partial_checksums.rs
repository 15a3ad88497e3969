//! Partial checksums of every protocol a router forwards (issue 27, item
//! 8): a frame whose checksum the local sender left to offload
//! (`CHECKSUM_PARTIAL`) leaves the engine complete, whatever its protocol,
//! as Linux finishes it before a device that cannot (`skb_checksum_help`,
//! and `skb_crc32c_csum_help` for SCTP's CRC32c, RFC 9260 §6.8).

mod common;

use std::net::IpAddr;
use std::time::Instant;

use common::*;
use etherparse::{IpNumber, PacketBuilder};
use px_gateway::{Engine, Port, Verdict};
use px_wire::offload::{Checksum, PacketMeta};

/// CRC32c bit by bit, written here apart from px-wire's tables.
fn crc32c(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
        }
    }
    !c
}

/// An Ethernet frame carrying `l4` as protocol `proto` from `src` to `dst`.
fn frame(src: IpAddr, dst: IpAddr, proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER)
        .ip(ip_headers(src, dst, 0, 0, 64, true, 1, 0))
        .write(&mut v, IpNumber(proto), l4)
        .unwrap();
    v
}

/// An SCTP packet (common header, one DATA chunk of `len` bytes) with its
/// CRC32c stored as Linux stores it (least significant byte first).
fn sctp(len: usize) -> Vec<u8> {
    let mut p = vec![0x13, 0x88, 0x13, 0x89, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0];
    let chunk_len = (16 + len) as u16;
    p.extend_from_slice(&[0, 3]);
    p.extend_from_slice(&chunk_len.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    p.extend((0..len).map(|i| (i * 7 + 3) as u8));
    p.resize(p.len().next_multiple_of(4), 0);
    let c = crc32c(&p);
    p[8..12].copy_from_slice(&c.to_le_bytes());
    p
}

/// Feeds `f` from `from` with a partial checksum at `offset` from its L4
/// header, and returns the frame as it leaves (forwarded in place).
fn forward_partial(from: Port, mut f: Vec<u8>, l4: usize, offset: u16) -> Vec<u8> {
    let mut e = Engine::new(test_config()).unwrap();
    let meta = PacketMeta { csum: Checksum::Partial { start: l4 as u16, offset }, ..PacketMeta::PLAIN };
    let v = e.handle_packet(Instant::now(), from, &mut f, meta);
    assert_eq!(v, Verdict::Forward { meta: PacketMeta::PLAIN });
    f
}

#[test]
fn an_sctp_frame_with_a_partial_checksum_leaves_with_its_crc32c() {
    for v6 in [false, true] {
        for (from, len) in [(Port::Outer, 33), (Port::Inner, 1000)] {
            let (src, dst) = match from {
                Port::Outer => (outer_addr(v6, 1), inner_addr(v6, 1)),
                Port::Inner => (inner_addr(v6, 1), outer_addr(v6, 1)),
            };
            let want = frame(src, dst, 132, &sctp(len));
            let l4 = if v6 { 14 + 40 } else { 14 + 20 };
            // Offloaded: the field not computed yet.
            let mut f = want.clone();
            f[l4 + 8..l4 + 12].fill(0);
            assert_eq!(forward_partial(from, f, l4, 8), want, "v6={v6} from={from:?}");
        }
    }
}

#[test]
fn a_partial_checksum_of_another_protocol_is_finished_too() {
    // ICMP echo (no pseudo-header: the partial field holds zero).
    let mut echo = vec![8, 0, 0, 0, 0x12, 0x34, 0, 1];
    echo.extend_from_slice(b"ping through the border");
    let want_sum = !ones_complement(&echo, 0);
    let f = frame(inner_addr(false, 1), outer_addr(false, 1), 1, &echo);
    let out = forward_partial(Port::Inner, f, 34, 2);
    assert_eq!(u16::from_be_bytes([out[36], out[37]]), want_sum);
    assert_eq!(ones_complement(&out[34..], 0), 0xffff, "the echo verifies");
}
