//! Forwarding TCP, and outbound splitting: a TCP segment larger than the
//! egress allows (the segment-size limit, `Engine::segment_limit`, computed
//! here for every TCP path) is handed to segmentation offload or cut in
//! software the way a correct TSO cuts it. Every piece carries a copy of
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

use std::time::Instant;

use px_wire::IpVersion;
use px_wire::checksum::{self, Sum};
use px_wire::ipv4::Ipv4Packet;
use px_wire::ipv6::Ipv6Packet;
use px_wire::offload::{Checksum, PacketMeta};
use px_wire::tcp::{TcpSegment, flags};

use crate::buf::{HEADROOM, Transmit, Verdict};
use crate::engine::Engine;
use crate::port::Port;
use crate::segment::{Seg, is_accecn_synack};

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
/// its SYN-ACK ([`is_accecn_synack`]); not knowing, it cuts as Linux does.
/// A GRO super-packet is several segments, and only the first can have
/// carried CWR (Linux GRO flushes on a segment with CWR rather than merge
/// it): CWR stays on the pieces of that first segment only.
///
/// AE and ECE are never touched: in classic ECN AE is zero and ECE is a
/// state echoed on every segment; in AccECN both are ACE bits.
pub(crate) fn cwr_on_every_piece(accecn: bool) -> bool {
    accecn
}

impl Engine {
    /// Remembers from a SYN-ACK (either direction) whether the connection
    /// negotiated AccECN.
    pub(crate) fn learn_ecn_mode(&mut self, idx: u32, frame: &[u8], seg: &Seg) {
        if seg.has(flags::SYN) && seg.has(flags::ACK) {
            let accecn = is_accecn_synack(frame, seg);
            if let Some(f) = self.flows.get_mut(idx) {
                f.accecn = accecn;
            }
        }
    }

    /// The most TCP payload one segment of `seg`'s layout may carry toward
    /// `to`; the one place this is computed, for merges and for forwarding.
    /// Toward the inner port: the inner MSS for this header layout, and no
    /// more than the inner host said it takes (its MSS less the options,
    /// RFC 6691): what a merged segment may carry is also the most any
    /// segment toward the inner host may carry; when the inner host's MSS
    /// is unknown, an outer-sized segment (the safe size). Toward the outer port: the
    /// path MTU toward the destination, and no more than the outer host said
    /// it takes. `flow` is the segment's flow slot, if it has one.
    pub(crate) fn segment_limit(&self, now: Instant, to: Port, seg: &Seg, flow: Option<u32>) -> usize {
        let headers = seg.payload_start() - seg.info.l3;
        let options = seg.th - px_wire::tcp::MIN_HEADER_LEN;
        let flow = flow.and_then(|i| self.flows.get(i));
        match to {
            Port::Inner => {
                let mut cap = match flow.and_then(|f| f.inner_mss) {
                    Some(m) => self.cfg.inner_payload_cap(headers).min((m as usize).saturating_sub(options)),
                    // Nothing known of what the inner host takes (its SYN
                    // was not seen): the safe size, one outer-sized segment,
                    // which it takes if it takes anything from outside.
                    // Such connections (older than the gateway, or lost from
                    // `HandshakeMemory`) pass at the yield of no gateway rather
                    // than risk segments their receiver drops.
                    None => (self.cfg.emtu as usize).saturating_sub(headers),
                };
                if let Some(m) = self.pmtu.get(Port::Inner, seg.info.dst, now) {
                    // A path MTU learned from the b-network's routers.
                    cap = cap.min((m as usize).saturating_sub(headers));
                }
                cap.min(self.pool.size() - HEADROOM)
            }
            Port::Outer => {
                let mtu = self.egress_mtu(now, Port::Outer, seg.info.dst);
                let mut cap = (mtu as usize).saturating_sub(headers);
                if let Some(m) = flow.and_then(|f| f.outer_mss) {
                    cap = cap.min((m as usize).saturating_sub(options));
                }
                cap
            }
        }
    }

    /// Forwards a TCP segment toward `to` unchanged, or cut to what the
    /// egress allows (by GSO or in software) if it is larger. `flow` is the
    /// segment's flow slot; `None` when the caller's lookup found no flow (an
    /// untracked connection: nothing is looked up again here).
    pub(crate) fn forward_tcp(
        &mut self,
        now: Instant,
        to: Port,
        frame: &mut [u8],
        seg: &Seg,
        meta: PacketMeta,
        flow: Option<u32>,
    ) -> Verdict {
        let len = seg.payload_len();
        let allowed = self.segment_limit(now, to, seg, flow);
        let mut limit = allowed;
        // A GRO super-packet passed on unchanged goes back to its own sizes.
        if let Some(g) = meta.tcp_gso_size().filter(|g| *g > 0 && len > *g as usize) {
            limit = limit.min(g as usize);
        }
        let limit = limit.max(8);
        let pieces = len.div_ceil(limit).max(1);
        if to == Port::Inner && len > 0 {
            // Toward the inner port, `allowed` is the inner MSS of this flow.
            // Where the handshake was not seen, it is only the safe size:
            // the yield counts conversion to the inner MSS, so such a
            // flow's segments are never counted full.
            let known = flow.and_then(|i| self.flows.get(i)).is_some_and(|f| f.inner_mss.is_some());
            let cap = if known { allowed } else { usize::MAX };
            self.counters.inner_tcp_data_out += pieces as u64;
            if len <= limit {
                self.counters.inner_tcp_full_out += (len == cap) as u64;
            } else if limit == cap {
                self.counters.inner_tcp_full_out += (len / limit) as u64;
            }
        }
        if len <= limit {
            return self.forward(to, seg.info.end, PacketMeta::PLAIN);
        }
        let gso_ok = match to {
            Port::Inner => self.cfg.inner_gso,
            Port::Outer => self.cfg.outer_gso,
        };
        // Each piece's checksum is computed from its own bytes, which would
        // hide corruption of a segment nobody verified: it is verified, and
        // a corrupt segment is cut in software with every piece's checksum
        // spoiled, so that the receiver drops them all, as it would have
        // dropped the whole (invariant 1: never deliver corrupted bytes).
        // The software cut verifies from the pieces' own sums (below), so
        // the payload is read once; GSO is verified first, by a read.
        let verify = meta.csum == Checksum::Unknown && self.cfg.verify_checksums;
        let keep_cwr = cwr_on_every_piece(flow.and_then(|i| self.flows.get(i)).is_some_and(|f| f.accecn));
        // The bytes whose pieces keep CWR: in an AccECN flow, those of the
        // first segment, which is the whole segment unless it is a GRO
        // super-packet. Linux GRO never merges a segment with CWR onto
        // another (`tcp_gro_receive` flushes on it), so only a
        // super-packet's first segment can have carried CWR; its later
        // segments, had they gained it, would report an ACE 2 higher.
        let cwr_span = match meta.tcp_gso_size() {
            _ if !keep_cwr => 0,
            Some(g) if g > 0 && len > g as usize => g as usize,
            _ => len,
        };
        // The virtio header can ask the kernel for CWR on the first piece
        // only (VIRTIO_NET_HDR_GSO_ECN), not on all: AccECN CWR is cut here.
        let gso_ok = gso_ok && !(keep_cwr && seg.has(flags::CWR));
        // SYN, URG and RST pieces need more than GSO does (see the module docs).
        let mut corrupt = false;
        if gso_ok && seg.flags & (flags::SYN | flags::URG | flags::RST) == 0 {
            if !verify || seg.checksum_ok(frame) {
                let g = prepare_gso(frame, seg, limit);
                self.counters.gso_out += 1;
                return self.forward(to, seg.info.end, g);
            }
            corrupt = true;
        }
        self.counters.split_in += 1;
        let first = self.queued();
        let hdr = seg.payload_start();
        checksum::prefetch_lines(&frame[hdr..hdr + len.min(checksum::PREFETCH_AHEAD)]);
        let sums = PieceSums::of(frame, seg);
        let mut payload = Sum::default();
        let mut off = 0;
        let mut i = 0;
        while off < len {
            let n = limit.min(len - off);
            let mut buf = self.pool.get();
            let (end, psum) = write_piece(frame, seg, &sums, i, off, n, off + n == len, cwr_span, &mut buf);
            payload = payload.plus(psum.at_offset(off));
            self.counters.split_out += 1;
            self.queue(Transmit { port: to, buf, start: 0, end, meta: PacketMeta::PLAIN });
            off += n;
            i += 1;
        }
        // The pieces' payload sums add up to the segment's (at their
        // offsets): with the unchanged headers they verify the original
        // checksum without a second read of the payload.
        let corrupt = corrupt || (verify && !seg.checksum_ok_with_payload(frame, payload));
        if corrupt {
            self.counters.bad_checksum += 1;
            for t in self.queued_since(first) {
                // Off by one in the sum: can never verify.
                t.buf[seg.info.l4 + 17] ^= 1;
            }
        }
        Verdict::Consumed
    }
}

/// The sums every piece of one segment shares, computed once per segment
/// instead of once per piece: the headers with the fields a piece changes
/// set to zero (their words are added back per piece), and the
/// pseudo-header without its length (for IPv6 with extension headers,
/// finding the final destination means parsing them).
struct PieceSums {
    /// The IPv4 header without total length, identification and checksum.
    ip: Sum,
    /// The TCP header without sequence number, offset-and-flags word,
    /// checksum and urgent pointer.
    tcp: Sum,
    /// The pseudo-header with a zero length.
    pseudo: Sum,
}

impl PieceSums {
    fn of(frame: &[u8], seg: &Seg) -> PieceSums {
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
fn write_piece(
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
            let c = sums.ip.plus(word(out, info.l3 + 2)).plus(word(out, info.l3 + 4)).checksum();
            out[info.l3 + 10..info.l3 + 12].copy_from_slice(&c.to_be_bytes());
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
        let urg = info.l4 + 18..info.l4 + 20;
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
    let changed = [l4 + 4, l4 + 6, l4 + 12, l4 + 18].iter().fold(Sum::default(), |s, at| s.plus(word(out, *at)));
    let c = sums.pseudo.plus(Sum(l4_len as u64)).plus(sums.tcp).plus(changed).plus(psum.at_offset(seg.th)).checksum();
    out[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
    (hdr + len, psum)
}

/// Prepares `frame` in place for segmentation offload: checksum field set to
/// the folded pseudo-header sum (the `CHECKSUM_PARTIAL` convention).
/// Returns the transmit metadata: cut into `mss`-byte pieces, checksum to
/// be completed from the TCP header on, and the ECN flag if the segment
/// carries CWR (VIRTIO_NET_HDR_GSO_ECN, as Linux GRO sets SKB_GSO_TCP_ECN:
/// the kernel keeps CWR on the first piece only, or refuses the frame if
/// the flag is missing where the device demands it).
fn prepare_gso(frame: &mut [u8], seg: &Seg, mss: usize) -> PacketMeta {
    let l4_len = seg.info.end - seg.info.l4;
    let pseudo = seg.pseudo(frame, l4_len);
    let l4 = seg.info.l4;
    frame[l4 + 16..l4 + 18].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
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
    use crate::config::Config;
    use crate::flow::FlowKey;
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

    #[test]
    fn segment_limit_is_the_path_and_what_each_host_announced() {
        let now = Instant::now();
        let mut e = Engine::new(Config::default()).unwrap();
        for v6 in [false, true] {
            let f = Tcp::data(v6, Port::Inner, 1, 10).build();
            let info = parsed(&f);
            let seg = Seg::parse(&f, &info).unwrap();
            // 32 bytes of TCP header with timestamps.
            let ip = if v6 { 40 } else { 20 };
            assert_eq!(e.segment_limit(now, Port::Outer, &seg, None), 1500 - ip - 32);
            // No handshake seen: the safe size, an outer-sized segment.
            assert_eq!(e.segment_limit(now, Port::Inner, &seg, None), 1500 - ip - 32);
        }
        // The inner host announces MSS 1000 in its SYN: segments toward it
        // carry at most 1000 less the 12 bytes of options.
        let mut syn = Tcp::data(false, Port::Inner, 0, 0);
        syn.flags = flags::SYN;
        syn.opts = vec![2, 4, 0x03, 0xe8];
        let _ = e.handle_packet(now, Port::Inner, &mut syn.build(), PacketMeta::PLAIN);
        let f = Tcp::data(false, Port::Outer, 1, 10).build();
        let info = parsed(&f);
        let seg = Seg::parse(&f, &info).unwrap();
        let flow = e.flows.peek(&FlowKey::of_segment(&seg, &f, Port::Outer));
        assert!(flow.is_some());
        assert_eq!(e.segment_limit(now, Port::Inner, &seg, flow), 1000 - 12);
    }

    #[test]
    fn forwarding_cuts_in_software_or_hands_off_to_gso() {
        let now = Instant::now();
        for gso in [false, true] {
            let mut e = Engine::new(Config { outer_gso: gso, ..Config::default() }).unwrap();
            let mut f = Tcp::data(false, Port::Inner, 1, 3000).build();
            let info = parsed(&f);
            let seg = Seg::parse(&f, &info).unwrap();
            let hdr = seg.payload_start();
            let v = e.forward_tcp(now, Port::Outer, &mut f, &seg, PacketMeta::PLAIN, None);
            let mut sizes = Vec::new();
            while let Some(t) = e.poll_transmit() {
                assert_eq!(t.port, Port::Outer);
                sizes.push(t.frame().len() - hdr);
            }
            if gso {
                assert_eq!(v, Verdict::Forward { meta: PacketMeta::tcp_gso(false, 1448, 34, hdr as u16) });
                assert!(sizes.is_empty());
                assert_eq!(e.counters.gso_out, 1);
            } else {
                assert_eq!(v, Verdict::Consumed);
                assert_eq!(sizes, [1448, 1448, 104]);
                assert_eq!((e.counters.split_in, e.counters.split_out), (1, 3));
            }
        }
    }
}
