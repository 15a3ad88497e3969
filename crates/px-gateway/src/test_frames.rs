//! Fixed frames for the unit tests beside the code: Ethernet + IPv4/IPv6 +
//! TCP or UDP with valid checksums, between one outer host
//! (198.51.100.1 / 2001:db8:1::1, port 40000) and one inner host
//! (203.0.113.2 / 2001:db8:2::2, port 80). The integration tests have a
//! richer builder (`tests/common`); this one is small on purpose.

use core::net::{Ipv4Addr, Ipv6Addr};

use px_wire::checksum::{self, Sum};
use px_wire::tcp::TcpSegment;
use px_wire::udp::UdpDatagram;
use px_wire::{ipv4, ipv6};

use crate::port::Port;

pub const OUTER_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
pub const INNER_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 2);
pub const OUTER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
pub const INNER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 2);
pub const OUTER_PORT: u16 = 40000;
pub const INNER_PORT: u16 = 80;
/// Link header length of every frame here.
pub const L2: usize = 14;

/// NOP NOP TS (TSval 1, TSecr 2): the option layout of nearly every bulk segment.
pub const TS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];

/// A TCP segment to build.
#[derive(Debug, Clone)]
pub struct Tcp {
    pub v6: bool,
    /// The port it arrives on: from the outer host on `Outer`.
    pub from: Port,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    pub opts: Vec<u8>,
    pub payload: Vec<u8>,
    pub ident: u16,
}

impl Tcp {
    /// An ACK segment with timestamps and `len` bytes of counting payload.
    pub fn data(v6: bool, from: Port, seq: u32, len: usize) -> Tcp {
        Tcp {
            v6,
            from,
            seq,
            ack: 1,
            flags: px_wire::tcp::flags::ACK,
            // No window scale in these tests' SYNs: the most an unscaled
            // window allows past the ACK.
            window: 65_535,
            opts: TS.to_vec(),
            payload: (0..len).map(|i| (i as u32).wrapping_add(seq) as u8).collect(),
            ident: 100,
        }
    }

    pub fn build(&self) -> Vec<u8> {
        let th = px_wire::tcp::MIN_HEADER_LEN + self.opts.len();
        assert!(self.opts.len() % 4 == 0 && th <= 60);
        let mut l4 = vec![0u8; th + self.payload.len()];
        let (sp, dp) = match self.from {
            Port::Outer => (OUTER_PORT, INNER_PORT),
            Port::Inner => (INNER_PORT, OUTER_PORT),
        };
        l4[0..2].copy_from_slice(&sp.to_be_bytes());
        l4[2..4].copy_from_slice(&dp.to_be_bytes());
        l4[4..8].copy_from_slice(&self.seq.to_be_bytes());
        l4[8..12].copy_from_slice(&self.ack.to_be_bytes());
        l4[12] = ((th / 4) as u8) << 4;
        l4[13] = self.flags;
        l4[14..16].copy_from_slice(&self.window.to_be_bytes());
        l4[20..th].copy_from_slice(&self.opts);
        l4[th..].copy_from_slice(&self.payload);
        let pseudo = pseudo(self.v6, self.from, 6, l4.len());
        TcpSegment::new_unchecked(&mut l4[..]).fill_checksum(pseudo);
        frame(self.v6, self.from, 6, self.ident, &l4)
    }
}

/// A UDP datagram of `payload` arriving on `from`.
pub fn udp(v6: bool, from: Port, payload: &[u8]) -> Vec<u8> {
    let mut l4 = vec![0u8; 8 + payload.len()];
    let (sp, dp) = match from {
        Port::Outer => (OUTER_PORT, INNER_PORT),
        Port::Inner => (INNER_PORT, OUTER_PORT),
    };
    let len = l4.len() as u16;
    px_wire::udp::emit_header(&mut l4, sp, dp, len);
    l4[8..].copy_from_slice(payload);
    let pseudo = pseudo(v6, from, 17, l4.len());
    UdpDatagram::new_unchecked(&mut l4[..]).fill_checksum(pseudo);
    frame(v6, from, 17, 7, &l4)
}

/// Source and destination of a packet arriving on `from`.
fn addrs_v4(from: Port) -> (Ipv4Addr, Ipv4Addr) {
    if from == Port::Outer { (OUTER_V4, INNER_V4) } else { (INNER_V4, OUTER_V4) }
}

fn addrs_v6(from: Port) -> (Ipv6Addr, Ipv6Addr) {
    if from == Port::Outer { (OUTER_V6, INNER_V6) } else { (INNER_V6, OUTER_V6) }
}

/// The pseudo-header sum of a packet arriving on `from`.
pub fn pseudo(v6: bool, from: Port, proto: u8, l4_len: usize) -> Sum {
    if v6 {
        let (s, d) = addrs_v6(from);
        checksum::pseudo_v6(s, d, proto, l4_len as u32)
    } else {
        let (s, d) = addrs_v4(from);
        checksum::pseudo_v4(s, d, proto, l4_len as u16)
    }
}

/// Ethernet + IP (DF set, TTL 64) around `l4`.
fn frame(v6: bool, from: Port, proto: u8, ident: u16, l4: &[u8]) -> Vec<u8> {
    let ip_len = if v6 { ipv6::HEADER_LEN } else { ipv4::MIN_HEADER_LEN };
    let mut f = vec![0u8; L2 + ip_len + l4.len()];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
    if v6 {
        let (s, d) = addrs_v6(from);
        ipv6::emit_header(&mut f[L2..], 0, l4.len() as u16, proto, 64, s, d);
    } else {
        let (s, d) = addrs_v4(from);
        ipv4::emit_header(&mut f[L2..], 0, (ip_len + l4.len()) as u16, ident, true, 64, proto, s, d);
    }
    f[L2 + ip_len..].copy_from_slice(l4);
    f
}

/// Whether the TCP or UDP checksum of a frame built here (or cut from one)
/// verifies.
pub fn l4_checksum_ok(f: &[u8], v6: bool, from: Port, proto: u8) -> bool {
    let l4 = L2 + if v6 { ipv6::HEADER_LEN } else { ipv4::MIN_HEADER_LEN };
    checksum::fold(pseudo(v6, from, proto, f.len() - l4).plus(Sum::of(&f[l4..]))) == 0xffff
}
