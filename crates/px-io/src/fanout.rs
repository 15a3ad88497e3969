//! Spreading flows over workers so both directions of a flow meet the same
//! worker (and so the same engine shard) although they arrive on two
//! different ports.
//!
//! Two mechanisms, one invariant (*symmetric*: swapping source and
//! destination, addresses and ports together, gives the same worker):
//!
//! - [`Fanout`]: kernel `PACKET_FANOUT` in `PACKET_FANOUT_HASH` mode. The
//!   kernel picks a member socket by `__skb_get_hash_symmetric`, which
//!   orders the endpoints before hashing, with one boot-time key shared by
//!   all devices. With one group per port, and worker *i* joining each
//!   group as its *i*-th member, a flow maps to worker *i* on both ports.
//!   This needs no thread hand-off at all, so it is what the gateway uses.
//! - [`symmetric_flow_hash`]: the same idea in software, for an I/O path
//!   where one thread receives and dispatches (or to check a placement).
//!
//! The software hash parses only what it needs, never panics on any bytes,
//! and returns `None` for frames that are not IP (ARP, LLDP): the caller
//! sends those to a fixed worker.

/// `PACKET_FANOUT` settings for a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fanout {
    /// Group id; unique per port within a network namespace.
    pub group: u16,
    /// Reassemble IPv4 fragments before hashing (`PACKET_FANOUT_FLAG_DEFRAG`).
    /// Not needed to keep a datagram's fragments together (the symmetric
    /// hash never reads a fragment's ports), and not for a router, which
    /// forwards fragments as they come: the gateway leaves it off.
    pub defrag: bool,
}

impl Fanout {
    /// The `PACKET_FANOUT` option value: group id in the low 16 bits, mode
    /// and flags in the high 16. A fan-out group delivers through its own
    /// hook, which ignores the member sockets' `PACKET_IGNORE_OUTGOING`:
    /// the group needs `PACKET_FANOUT_FLAG_IGNORE_OUTGOING` itself, or every
    /// frame a worker sends out of a port is read back by the group (a
    /// test forwarding through fan-out workers saw 42 393 such frames).
    pub fn option_value(&self, ignore_outgoing: bool) -> u32 {
        let mut mode = libc::PACKET_FANOUT_HASH;
        if self.defrag {
            mode |= libc::PACKET_FANOUT_FLAG_DEFRAG;
        }
        if ignore_outgoing {
            mode |= libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING;
        }
        u32::from(self.group) | (mode << 16)
    }
}

const ETH_HLEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: [u16; 2] = [0x8100, 0x88a8];
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Hash of a flow that is the same for both of its directions, or `None`
/// if `frame` (starting at the Ethernet header) is not IPv4/IPv6.
///
/// Uses addresses and protocol always, ports for TCP/UDP when they are in
/// the packet (not for IPv4/IPv6 fragments, so all fragments of a datagram
/// agree with each other, though not with its unfragmented flow).
pub fn symmetric_flow_hash(frame: &[u8]) -> Option<u32> {
    let mut off = ETH_HLEN;
    let mut ethertype = be16(frame, 12)?;
    // Up to two VLAN tags (802.1Q, QinQ).
    for _ in 0..2 {
        if ETHERTYPE_VLAN.contains(&ethertype) {
            ethertype = be16(frame, off + 2)?;
            off += 4;
        }
    }
    let ip = frame.get(off..)?;
    let (src, dst, proto, l4): (&[u8], &[u8], u8, Option<&[u8]>) = match ethertype {
        ETHERTYPE_IPV4 => {
            let ihl = usize::from(*ip.first()? & 0x0f) * 4;
            if ihl < 20 || ip.len() < ihl {
                return None;
            }
            let frag = be16(ip, 6)? & 0x3fff; // MF flag + fragment offset
            let l4 = if frag == 0 { ip.get(ihl..) } else { None };
            (&ip[12..16], &ip[16..20], ip[9], l4)
        }
        ETHERTYPE_IPV6 => {
            if ip.len() < 40 {
                return None;
            }
            let (proto, l4) = ipv6_upper_layer(ip)?;
            (&ip[8..24], &ip[24..40], proto, l4)
        }
        _ => return None,
    };
    let ports = match (proto, l4) {
        (PROTO_TCP | PROTO_UDP, Some(l4)) => Some((be16(l4, 0)?, be16(l4, 2)?)),
        _ => None,
    };
    let (sp, dp) = ports.unwrap_or((0, 0));
    // Canonical order: the smaller (address, port) endpoint first.
    let (a, ap, b, bp) = if (src, sp) <= (dst, dp) { (src, sp, dst, dp) } else { (dst, dp, src, sp) };
    let mut h = Mixer::new(u32::from(proto));
    h.bytes(a);
    h.bytes(b);
    h.word(u32::from(ap) << 16 | u32::from(bp));
    Some(h.finish())
}

/// Walks IPv6 extension headers (hop-by-hop, routing, destination options,
/// fragment) to the upper-layer protocol; ports are `None` for fragments.
fn ipv6_upper_layer(ip: &[u8]) -> Option<(u8, Option<&[u8]>)> {
    let mut next = ip[6];
    let mut off = 40;
    // A bounded walk: real packets carry few extension headers.
    for _ in 0..8 {
        match next {
            0 | 43 | 60 => {
                let len = (usize::from(*ip.get(off + 1)?) + 1) * 8;
                next = *ip.get(off)?;
                off += len;
            }
            // Fragment header: the first fragment has the ports but later
            // ones do not, so all fragments are hashed without them.
            44 => return Some((*ip.get(off)?, None)),
            _ => return Some((next, ip.get(off..))),
        }
    }
    None
}

/// A small non-cryptographic mixer (murmur3's round and finaliser): fast,
/// and good enough to spread flows; flows are not chosen by an attacker
/// who could see the worker index.
struct Mixer(u32);

impl Mixer {
    fn new(seed: u32) -> Mixer {
        Mixer(seed ^ 0x9e37_79b9)
    }

    fn word(&mut self, w: u32) {
        let k = w.wrapping_mul(0xcc9e_2d51).rotate_left(15).wrapping_mul(0x1b87_3593);
        self.0 = (self.0 ^ k).rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }

    fn bytes(&mut self, b: &[u8]) {
        for c in b.chunks(4) {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            self.word(u32::from_le_bytes(w));
        }
    }

    fn finish(self) -> u32 {
        let mut h = self.0;
        h ^= h >> 16;
        h = h.wrapping_mul(0x85eb_ca6b);
        h ^= h >> 13;
        h = h.wrapping_mul(0xc2b2_ae35);
        h ^ (h >> 16)
    }
}

/// Maps a hash onto `workers` (≥ 1) workers without a division
/// (multiply-shift; uniform when the hash is).
pub fn worker_for(hash: u32, workers: usize) -> usize {
    ((u64::from(hash) * workers as u64) >> 32) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;
    use proptest::prelude::*;

    fn v4(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, tcp: bool) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2; 6], [4; 6]).ipv4(src, dst, 64);
        let mut out = Vec::new();
        if tcp {
            b.tcp(sp, dp, 1, 1000).write(&mut out, &[1, 2, 3]).unwrap();
        } else {
            b.udp(sp, dp).write(&mut out, &[1, 2, 3]).unwrap();
        }
        out
    }

    fn v6(src: [u8; 16], dst: [u8; 16], sp: u16, dp: u16) -> Vec<u8> {
        let mut out = Vec::new();
        PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv6(src, dst, 64)
            .tcp(sp, dp, 1, 1000)
            .write(&mut out, &[9; 10])
            .unwrap();
        out
    }

    #[test]
    fn non_ip_and_short_frames_have_no_hash() {
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(symmetric_flow_hash(&arp), None);
        assert_eq!(symmetric_flow_hash(&[]), None);
        let f = v4([198, 51, 100, 1], [203, 0, 113, 1], 1, 2, true);
        assert_eq!(symmetric_flow_hash(&f[..20]), None);
    }

    #[test]
    fn ports_and_protocol_matter() {
        let a = symmetric_flow_hash(&v4([198, 51, 100, 1], [203, 0, 113, 1], 40000, 443, true));
        let b = symmetric_flow_hash(&v4([198, 51, 100, 1], [203, 0, 113, 1], 40001, 443, true));
        let c = symmetric_flow_hash(&v4([198, 51, 100, 1], [203, 0, 113, 1], 40000, 443, false));
        assert_ne!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn vlan_tag_is_skipped() {
        let plain = v4([198, 51, 100, 1], [203, 0, 113, 1], 5, 6, true);
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        tagged.extend_from_slice(&plain[12..]);
        assert_eq!(symmetric_flow_hash(&plain), symmetric_flow_hash(&tagged));
    }

    #[test]
    fn ipv4_fragments_hash_on_addresses() {
        let mut f = v4([198, 51, 100, 1], [203, 0, 113, 1], 5, 6, false);
        let whole = symmetric_flow_hash(&f);
        f[14 + 6] = 0x20; // MF set
        let first = symmetric_flow_hash(&f);
        f[14 + 6] = 0x00;
        f[14 + 7] = 0x10; // offset 16*8, no MF
        let last = symmetric_flow_hash(&f);
        assert_eq!(first, last);
        assert_ne!(first, whole);
    }

    /// Issue 27, "likely" (b): without the kernel's defragmentation every
    /// fragment of a datagram must still meet on one worker, so no
    /// fragment's hash may read ports (only the first carries them): first,
    /// middle and last fragments of IPv4 and IPv6 datagrams, whatever bytes
    /// follow their IP headers, hash alike, in both directions.
    #[test]
    fn every_fragment_of_a_datagram_hashes_alike() {
        let (a, b) = ([198, 51, 100, 1], [203, 0, 113, 1]);
        let mut first = v4(a, b, 5353, 6000, false);
        let frag = |f: &mut Vec<u8>, mf: bool, off8: u16, junk: u8| {
            let v = u16::from(mf) << 13 | off8;
            f[14 + 6..14 + 8].copy_from_slice(&v.to_be_bytes());
            if off8 > 0 {
                f[34..].fill(junk);
            }
        };
        frag(&mut first, true, 0, 0);
        let want = symmetric_flow_hash(&first);
        for (mf, off8, junk) in [(true, 185, 0x11), (true, 370, 0x22), (false, 555, 0x33)] {
            let mut f = first.clone();
            frag(&mut f, mf, off8, junk);
            assert_eq!(symmetric_flow_hash(&f), want, "IPv4 fragment at {off8}");
            // The other direction's fragments too.
            f[26..30].copy_from_slice(&b);
            f[30..34].copy_from_slice(&a);
            assert_eq!(symmetric_flow_hash(&f), want, "IPv4 fragment at {off8}, reversed");
        }
        // IPv6: a Fragment header (44) before UDP; ports only in the first.
        let v6frag = |src: [u8; 16], dst: [u8; 16], offset: u16, l4: &[u8]| {
            let mut f = vec![2u8; 12];
            f.extend_from_slice(&0x86ddu16.to_be_bytes());
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&((8 + l4.len()) as u16).to_be_bytes());
            f.extend_from_slice(&[44, 64]);
            f.extend_from_slice(&src);
            f.extend_from_slice(&dst);
            f.extend_from_slice(&[17, 0]);
            f.extend_from_slice(&(offset << 3 | u16::from(offset < 3)).to_be_bytes());
            f.extend_from_slice(&[0, 0, 0x12, 0x34]);
            f.extend_from_slice(l4);
            f
        };
        let (s6, d6) = (
            [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        );
        let udp_first = [0x14, 0xe9, 0x17, 0x70, 0x05, 0xdc, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        let want = symmetric_flow_hash(&v6frag(s6, d6, 0, &udp_first));
        assert!(want.is_some());
        for (offset, junk) in [(1u16, 0x44u8), (2, 0x55), (3, 0x66)] {
            assert_eq!(symmetric_flow_hash(&v6frag(s6, d6, offset, &[junk; 16])), want, "IPv6 fragment at {offset}");
            assert_eq!(symmetric_flow_hash(&v6frag(d6, s6, offset, &[junk; 16])), want, "reversed, at {offset}");
        }
    }

    #[test]
    fn spreads_flows_over_workers() {
        let mut counts = [0usize; 4];
        for sp in 0..4000u16 {
            let f = v4([198, 51, 100, 1], [203, 0, 113, 1], 10000 + sp, 80, true);
            counts[worker_for(symmetric_flow_hash(&f).unwrap(), 4)] += 1;
        }
        // 1000 expected per worker; allow wide noise, catch a broken mix.
        assert!(counts.iter().all(|&c| (800..1200).contains(&c)), "{counts:?}");
    }

    #[test]
    fn fanout_option_value() {
        let f = Fanout { group: 0x1234, defrag: true };
        assert_eq!(f.option_value(false), 0x1234 | (0x8000 << 16));
        assert_eq!(f.option_value(true), 0x1234 | (0xc000 << 16));
        assert_eq!(Fanout { group: 7, defrag: false }.option_value(false), 7);
    }

    proptest! {
        #[test]
        fn v4_hash_is_symmetric(s: [u8; 4], d: [u8; 4], sp: u16, dp: u16, tcp: bool) {
            let fwd = symmetric_flow_hash(&v4(s, d, sp, dp, tcp));
            prop_assert!(fwd.is_some());
            prop_assert_eq!(fwd, symmetric_flow_hash(&v4(d, s, dp, sp, tcp)));
        }

        #[test]
        fn v6_hash_is_symmetric(s: [u8; 16], d: [u8; 16], sp: u16, dp: u16) {
            let fwd = symmetric_flow_hash(&v6(s, d, sp, dp));
            prop_assert!(fwd.is_some());
            prop_assert_eq!(fwd, symmetric_flow_hash(&v6(d, s, dp, sp)));
        }

        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..120), et in 0usize..3) {
            let mut b = b;
            if b.len() >= 14 {
                let t = [0x0800u16, 0x86dd, 0x8100][et];
                b[12..14].copy_from_slice(&t.to_be_bytes());
            }
            let _ = symmetric_flow_hash(&b);
        }

        #[test]
        fn worker_in_range(h: u32, n in 1usize..64) {
            prop_assert!(worker_for(h, n) < n);
        }
    }
}
