//! Outbound splitting: a TCP segment larger than the egress allows is cut
//! the way a correct TSO cuts it. Every piece carries a copy of the headers
//! with its own sequence number, IP length and (IPv4) an IP ID counting up
//! from the original's; FIN and PSH stay on the last piece only, CWR on the
//! first only; both checksums are recomputed, the payload's in the same pass
//! that copies it.

use px_wire::IpVersion;
use px_wire::checksum::{self, Sum};
use px_wire::ipv4::Ipv4Packet;
use px_wire::ipv6::Ipv6Packet;
use px_wire::offload::PacketMeta;
use px_wire::tcp::{TcpSegment, flags};

use crate::segment::Seg;

/// Writes piece `i` of `seg` (payload `[off, off + len)`) into `out`,
/// returning its length. `out` must hold the headers and `len` bytes.
pub(crate) fn write_piece(
    frame: &[u8],
    seg: &Seg,
    i: usize,
    off: usize,
    len: usize,
    last: bool,
    out: &mut [u8],
) -> usize {
    let hdr = seg.payload_start();
    let info = &seg.info;
    out[..hdr].copy_from_slice(&frame[..hdr]);
    let src = &frame[hdr + off..hdr + off + len];
    let psum = checksum::copy_and_sum(&mut out[hdr..hdr + len], src);
    let l4_len = seg.th + len;
    let pseudo = match info.version {
        IpVersion::V4 => {
            let mut ip = Ipv4Packet::new_unchecked(&mut out[info.l3..]);
            ip.set_total_len((info.l4 - info.l3 + l4_len) as u16);
            ip.set_ident(ip.ident().wrapping_add(i as u16));
            ip.fill_checksum();
            checksum::pseudo_v4(ip.src(), ip.dst(), 6, l4_len as u16)
        }
        IpVersion::V6 => {
            let mut ip = Ipv6Packet::new_unchecked(&mut out[info.l3..]);
            ip.set_payload_len((info.l4 - info.l3 - px_wire::ipv6::HEADER_LEN + l4_len) as u16);
            px_wire::checksum::pseudo_v6(ip.src(), ip.dst(), 6, l4_len as u32)
        }
    };
    let mut f = seg.flags;
    if !last {
        f &= !(flags::FIN | flags::PSH);
    }
    if i != 0 {
        f &= !flags::CWR;
    }
    let mut tcp = TcpSegment::new_unchecked(&mut out[info.l4..]);
    tcp.set_seq(seg.seq.wrapping_add(off as u32));
    tcp.set_flags(f);
    tcp.set_checksum(0);
    let c = pseudo.plus(Sum::of(&out[info.l4..hdr])).plus(psum.at_offset(seg.th)).checksum();
    out[info.l4 + 16..info.l4 + 18].copy_from_slice(&c.to_be_bytes());
    hdr + len
}

/// Prepares `frame` in place for segmentation offload: checksum field set to
/// the folded pseudo-header sum (the `CHECKSUM_PARTIAL` convention).
/// Returns the transmit metadata: cut into `mss`-byte pieces, checksum to
/// be completed from the TCP header on.
pub(crate) fn prepare_gso(frame: &mut [u8], seg: &Seg, mss: usize) -> PacketMeta {
    let l4_len = seg.info.end - seg.info.l4;
    let pseudo = seg.pseudo(frame, l4_len);
    let l4 = seg.info.l4;
    frame[l4 + 16..l4 + 18].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
    PacketMeta::tcp_gso(seg.info.version == IpVersion::V6, mss as u16, l4 as u16, seg.payload_start() as u16)
}
