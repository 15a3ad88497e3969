//! Splitting: how a TCP segment larger than the egress allows is handed to
//! segmentation offload ([`prepare_gso`]) or cut in software
//! ([`write_piece`]) the way a correct TSO cuts it. The engine decides when
//! (`engine/outbound.rs`, with the segment-size limit). Every piece carries a copy of
//! the headers with its own sequence number, IP length and (IPv4) an IP ID
//! counting up from the original's; both checksums are recomputed, the
//! payload's in the same pass that copies it.
//!
//! What each piece carries, flag by flag. Linux's `tcp_gso_segment`
//! (`net/ipv4/tcp_offload.c`) clears FIN and PSH on every piece but the
//! last and CWR on every piece but the first (unless the segment is
//! AccECN's), and copies everything else; the gateway does the same, and
//! goes beyond it where Linux never meets the segment (its TCP does not
//! TSO a SYN, an urgent send or an RST), so that the pieces are what the
//! sender's TCP would have sent had it sent them one by one:
//!
//! | flag | pieces | why |
//! |---|---|---|
//! | FIN | last only | it follows the last byte (as Linux GSO) |
//! | PSH | last only | "deliver up to here" (as Linux GSO) |
//! | RST | last only | an RST on an earlier piece would reset the connection before the rest of the data arrived; on the last piece its sequence number is the receiver's next expected one once the data before it is in (RFC 5961 §3.2 asks for exactly that) |
//! | CWR | first only | classic ECN (as Linux GSO); for AccECN every piece of the first segment: all pieces of a plain segment, the pieces of the first segment of a GRO super-packet (see [`cwr_on_every_piece`]) |
//! | SYN | first only | its sequence slot counts: piece 2 starts at ISN + 1 + the first piece's data (TCP Fast Open) |
//! | URG | pieces before the urgent point | the pointer is an offset from each segment's own sequence (RFC 9293 §3.8.5): each piece before the urgent point carries it less the piece's offset; pieces after it carry neither (GSO would copy URG and the pointer unchanged, moving the urgent point forward on the receiver) |
//! | ACK, ECE, AE | every piece | the acknowledgement, window and ECN echo are the same for every byte of the segment (as Linux GSO) |
//!
//! Options are copied onto every piece unchanged, as Linux GSO copies them
//! (timestamps, SACK blocks and all).
//!
//! SYN, URG and RST segments are cut in software, never handed to GSO (the
//! kernel would copy these flags onto every piece). The IPv4 ID counts up
//! by one per piece as Linux GSO counts it (`inet_gso_segment` without
//! `SKB_GSO_TCP_FIXEDID`, which virtio headers cannot carry), so a software
//! cut and a GSO hand-off give the same frames.

use px_wire::IpVersion;
use px_wire::checksum::{self, Sum};
use px_wire::ipv4::Ipv4Packet;
use px_wire::ipv6::Ipv6Packet;
use px_wire::offload::PacketMeta;
use px_wire::tcp::{TcpSegment, flags};
use px_wire::{at, ipv4, tcp};

use crate::segment::Seg;

/// What splitting does to CWR and AE (issue 10 item 7).
///
/// Classic ECN (RFC 3168 §6.1.2): CWR tells the receiver that the sender
/// reduced its window, and is set on the first new-data segment after the
/// reduction only; a receiver that saw CWR stops echoing ECE, so CWR on a
/// later piece would swallow the echo of a CE mark that arrived on an
/// earlier one. Pieces after the first lose CWR, as Linux GSO clears it
/// (tcp_gso_segment) and as the GSO ECN flag asks of a NIC.
///
/// AccECN (draft-ietf-tcpm-accurate-ecn §3.2.2): AE, CWR and ECE together
/// are the ACE field, a counter of CE-marked packets the sender of the
/// segment has received, and CWR is no longer a signal. Every piece of one
/// segment reports the same count, so every piece carries the same ACE:
/// clearing CWR on later pieces would make the counter go back by 2 (mod 8),
/// which the peer reads as 6 more CE marks. Linux keeps CWR on every segment
/// for SKB_GSO_TCP_ACCECN. The gateway knows a connection uses AccECN from
/// its SYN-ACK (`crate::segment::is_accecn_synack`); not knowing, it cuts as Linux does.
/// A GRO super-packet is several segments, and only the first can have
/// carried CWR (Linux GRO flushes on a segment with CWR rather than merge
/// it): CWR stays on the pieces of that first segment only.
///
/// AE and ECE are never touched: in classic ECN AE is zero and ECE is a
/// state echoed on every segment; in AccECN both are ACE bits.
pub(crate) fn cwr_on_every_piece(accecn: bool) -> bool {
    accecn
}

/// The sums every piece of one segment shares, computed once per segment
/// instead of once per piece: the headers with the fields a piece changes
/// set to zero (their words are added back per piece), and the
/// pseudo-header without its length (for IPv6 with extension headers,
/// finding the final destination means parsing them).
pub(crate) struct PieceSums {
    /// The IPv4 header without total length, identification and checksum.
    ip: Sum,
    /// The TCP header without sequence number, offset-and-flags word,
    /// checksum and urgent pointer.
    tcp: Sum,
    /// The pseudo-header with a zero length.
    pseudo: Sum,
}

impl PieceSums {
    pub fn of(frame: &[u8], seg: &Seg) -> PieceSums {
        let info = &seg.info;
        let zeroed = |h: &[u8], fields: &[usize]| {
            let mut c = [0u8; 60];
            let c = &mut c[..h.len()];
            c.copy_from_slice(h);
            for f in fields {
                c[*f..*f + 2].copy_from_slice(&[0, 0]);
            }
            Sum::of(c)
        };
        let ip = match info.version {
            IpVersion::V4 => zeroed(&frame[info.l3..info.l4], &[2, 4, 10]),
            IpVersion::V6 => Sum::default(),
        };
        PieceSums {
            ip,
            tcp: zeroed(&frame[info.l4..seg.payload_start()], &[4, 6, 12, 16, 18]),
            pseudo: seg.pseudo(frame, 0),
        }
    }
}

/// Writes piece `i` of `seg` (payload `[off, off + len)`) into `out`,
/// returning its length and the sum of its payload (as if at an even
/// offset). `out` must hold the headers and `len` bytes. Both checksums
/// are the shared sums of [`PieceSums`] plus the words this piece changed,
/// so the headers are not summed again piece by piece.
/// CWR stays on the first piece and on every piece starting before
/// `cwr_span` (0 for classic ECN; see [`cwr_on_every_piece`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_piece(
    frame: &[u8],
    seg: &Seg,
    sums: &PieceSums,
    i: usize,
    off: usize,
    len: usize,
    last: bool,
    cwr_span: usize,
    out: &mut [u8],
) -> (usize, Sum) {
    let hdr = seg.payload_start();
    let info = &seg.info;
    out[..hdr].copy_from_slice(&frame[..hdr]);
    let psum = checksum::copy_and_sum_in(&mut out[hdr..hdr + len], frame, hdr + off..hdr + off + len);
    let l4_len = seg.th + len;
    let word = |out: &[u8], at: usize| Sum(u16::from_be_bytes([out[at], out[at + 1]]) as u64);
    match info.version {
        IpVersion::V4 => {
            let mut ip = Ipv4Packet::new_unchecked(&mut out[info.l3..]);
            ip.set_total_len((info.l4 - info.l3 + l4_len) as u16);
            ip.set_ident(ip.ident().wrapping_add(i as u16));
            let changed =
                word(out, info.l3 + ipv4::field::LEN.start).plus(word(out, info.l3 + ipv4::field::IDENT.start));
            out[at(info.l3, ipv4::field::CHECKSUM)].copy_from_slice(&sums.ip.plus(changed).checksum().to_be_bytes());
        }
        IpVersion::V6 => {
            let mut ip = Ipv6Packet::new_unchecked(&mut out[info.l3..]);
            ip.set_payload_len((info.l4 - info.l3 - px_wire::ipv6::HEADER_LEN + l4_len) as u16);
        }
    }
    let mut f = seg.flags;
    if !last {
        // FIN, PSH and RST follow the last byte (the table in the module docs).
        f &= !(flags::FIN | flags::PSH | flags::RST);
    }
    // The SYN takes the first sequence number, then the data follows.
    let mut seq = seg.seq.wrapping_add(off as u32);
    if i != 0 {
        f &= !flags::SYN;
        if off >= cwr_span {
            f &= !flags::CWR;
        }
        seq = seq.wrapping_add(seg.has(flags::SYN) as u32);
    }
    if seg.has(flags::URG) && i != 0 {
        // The urgent point, as an offset from this piece (module docs).
        let urg = at(info.l4, tcp::field::URGENT);
        let ptr = u16::from_be_bytes([out[urg.start], out[urg.start + 1]]) as usize;
        let p = ptr.checked_sub(off).filter(|p| *p > 0).unwrap_or(0);
        if p == 0 {
            f &= !flags::URG;
        }
        out[urg].copy_from_slice(&(p as u16).to_be_bytes());
    }
    let mut tcp = TcpSegment::new_unchecked(&mut out[info.l4..]);
    tcp.set_seq(seq);
    tcp.set_flags(f);
    let l4 = info.l4;
    // The words this piece changed: the sequence number's two, the offset-and-flags word, the urgent pointer.
    let (seq, urg) = (tcp::field::SEQ.start, tcp::field::URGENT.start);
    let changed = [seq, seq + 2, tcp::field::OFF, urg].iter().fold(Sum::default(), |s, f| s.plus(word(out, l4 + *f)));
    let c = sums.pseudo.plus(Sum(l4_len as u64)).plus(sums.tcp).plus(changed).plus(psum.at_offset(seg.th)).checksum();
    out[at(l4, tcp::field::CHECKSUM)].copy_from_slice(&c.to_be_bytes());
    (hdr + len, psum)
}

/// Prepares `frame` in place for segmentation offload: checksum field set to
/// the folded pseudo-header sum (the `CHECKSUM_PARTIAL` convention).
/// Returns the transmit metadata: cut into `mss`-byte pieces, checksum to
/// be completed from the TCP header on, and the ECN flag if the segment
/// carries CWR (VIRTIO_NET_HDR_GSO_ECN, as Linux GRO sets SKB_GSO_TCP_ECN:
/// the kernel keeps CWR on the first piece only, or refuses the frame if
/// the flag is missing where the device demands it).
pub(crate) fn prepare_gso(frame: &mut [u8], seg: &Seg, mss: usize) -> PacketMeta {
    let l4_len = seg.info.end - seg.info.l4;
    let pseudo = seg.pseudo(frame, l4_len);
    let l4 = seg.info.l4;
    frame[at(l4, tcp::field::CHECKSUM)].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
    let mut meta =
        PacketMeta::tcp_gso(seg.info.version == IpVersion::V6, mss as u16, l4 as u16, seg.payload_start() as u16);
    if let Some(g) = meta.gso.as_mut() {
        g.ecn = seg.has(flags::CWR);
    }
    meta
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::Port;
    use crate::test_frames::{L2, Tcp, l4_checksum_ok, pseudo};
    use px_wire::FrameInfo;

    fn parsed(f: &[u8]) -> FrameInfo {
        FrameInfo::parse(f).unwrap().unwrap()
    }

    #[test]
    fn pieces_are_cut_as_tso_cuts() {
        for v6 in [false, true] {
            let mut t = Tcp::data(v6, Port::Inner, 5000, 2500);
            t.flags = flags::ACK | flags::PSH | flags::FIN | flags::CWR;
            let f = t.build();
            let info = parsed(&f);
            let seg = Seg::parse(&f, &info).unwrap();
            let hdr = seg.payload_start();
            let mut off = 0;
            for i in 0..3 {
                let n = 1000.min(2500 - off);
                let mut out = vec![0u8; 2048];
                let (end, _) = write_piece(&f, &seg, &PieceSums::of(&f, &seg), i, off, n, off + n == 2500, 0, &mut out);
                let p = &out[..end];
                assert_eq!(end, hdr + n);
                assert_eq!(&p[hdr..], &f[hdr + off..hdr + off + n], "payload of piece {i}");
                let pi = parsed(p);
                let ps = Seg::parse(p, &pi).unwrap();
                assert_eq!(ps.seq, 5000 + off as u32);
                let want = match i {
                    0 => flags::ACK | flags::CWR,
                    1 => flags::ACK,
                    _ => flags::ACK | flags::PSH | flags::FIN,
                };
                assert_eq!(ps.flags, want, "v6={v6} piece {i}");
                assert!(l4_checksum_ok(p, v6, Port::Inner, 6), "v6={v6} piece {i}");
                assert_eq!(pi.ip_len(), end - L2);
                if !v6 {
                    let ip = Ipv4Packet::new_unchecked(&p[L2..pi.l4]);
                    assert!(ip.verify_checksum());
                    assert_eq!(ip.ident(), 100 + i as u16);
                }
                off += n;
            }
        }
    }

    #[test]
    fn gso_hand_off_leaves_the_pseudo_header_sum() {
        for v6 in [false, true] {
            let mut f = Tcp::data(v6, Port::Inner, 1, 4000).build();
            let info = parsed(&f);
            let seg = Seg::parse(&f, &info).unwrap();
            let (l4, start) = (info.l4, seg.payload_start());
            let meta = prepare_gso(&mut f, &seg, 1448);
            assert_eq!(meta, PacketMeta::tcp_gso(v6, 1448, l4 as u16, start as u16));
            let want = checksum::fold(pseudo(v6, Port::Inner, 6, f.len() - l4));
            assert_eq!(u16::from_be_bytes([f[l4 + 16], f[l4 + 17]]), want, "v6={v6}");
        }
    }
}
