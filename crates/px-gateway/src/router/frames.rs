//! The frames a router makes: IPv4 fragments (RFC 791 §3.2) and ICMP
//! "fragmentation needed" / "packet too big" errors (RFC 1191, RFC 4443),
//! written into a caller's buffer.

use px_wire::FrameInfo;
use px_wire::icmp;
use px_wire::ipv4::{self, Ipv4Packet};

/// Writes fragment `off..off+len` of the IPv4 packet in `frame` into `out`
/// and returns its length. `first` fragments keep all options; later ones
/// only those with the copied flag (`later_opts`).
/// An option-less IPv4 header's length.
const MIN: usize = ipv4::MIN_HEADER_LEN;

pub(crate) fn write_fragment(
    frame: &[u8],
    info: &FrameInfo,
    off: usize,
    len: usize,
    last: bool,
    later_opts: &[u8],
    out: &mut [u8],
) -> usize {
    let orig = Ipv4Packet::new_unchecked(&frame[info.l3..info.end]);
    let hl_first = info.ip_header_len();
    let (hl, opts): (usize, &[u8]) =
        if off == 0 { (hl_first, &frame[info.l3 + MIN..info.l4]) } else { (MIN + later_opts.len(), later_opts) };
    out[..info.l3].copy_from_slice(&frame[..info.l3]);
    out[info.l3..info.l3 + MIN].copy_from_slice(&frame[info.l3..info.l3 + MIN]);
    out[info.l3 + MIN..info.l3 + hl].copy_from_slice(opts);
    let data = &frame[info.l4 + off..info.l4 + off + len];
    out[info.l3 + hl..info.l3 + hl + len].copy_from_slice(data);
    let mut ip = Ipv4Packet::new_unchecked(&mut out[info.l3..info.l3 + hl + len]);
    ip.set_header_len(hl);
    ip.set_total_len((hl + len) as u16);
    ip.set_frag(false, !last || orig.more_frags(), orig.frag_offset() + off);
    ip.fill_checksum();
    info.l3 + hl + len
}

/// Copied options for non-first fragments.
pub(crate) fn later_options(frame: &[u8], info: &FrameInfo, out: &mut [u8; 40]) -> usize {
    ipv4::options_for_fragments(&frame[info.l3 + ipv4::MIN_HEADER_LEN..info.l4], out)
}

/// Builds, into `out`, the frame of an ICMP "too big" error about the
/// offending frame, addressed back to its sender through the port it came
/// from: link header copied with MACs swapped. IPv4 errors carry `ident`.
pub(crate) fn write_too_big(
    frame: &[u8],
    info: &FrameInfo,
    mtu: u16,
    ident: u16,
    src4: Option<core::net::Ipv4Addr>,
    src6: Option<core::net::Ipv6Addr>,
    out: &mut [u8],
) -> Option<usize> {
    let l3 = info.l3;
    out[..l3].copy_from_slice(&frame[..l3]);
    out[..6].copy_from_slice(&frame[6..12]);
    out[6..12].copy_from_slice(&frame[0..6]);
    let offending = &frame[l3..info.end];
    let n = match (info.src, info.dst) {
        (core::net::IpAddr::V4(s), _) => {
            let m = mtu.to_be_bytes();
            icmp::emit_v4_error(
                &mut out[l3..],
                ident,
                icmp::V4_DEST_UNREACH,
                icmp::V4_CODE_FRAG_NEEDED,
                [0, 0, m[0], m[1]],
                src4?,
                s,
                offending,
                // RFC 1812 §4.3.2.3: as much as fits in 576 bytes.
                576 - 28,
            )
        }
        (core::net::IpAddr::V6(s), _) => icmp::emit_v6_error(
            &mut out[l3..],
            icmp::V6_PACKET_TOO_BIG,
            0,
            (mtu as u32).to_be_bytes(),
            src6?,
            s,
            offending,
        ),
    };
    Some(l3 + n)
}
