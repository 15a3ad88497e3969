//! MSS rewriting in SYN and SYN-ACK segments.
//!
//! Inbound (outer → inner) the outer host's MSS option is raised to the
//! inner MSS, so that the inner host sends segments of the iMTU (the engine
//! cuts them on the way out); outbound (inner → outer) the inner host's MSS
//! is clamped to the outer MSS, so that outside hosts send what the eMTU
//! carries (the engine merges them on the way in). What each host announced
//! before the rewrite is kept in the flow: no segment toward a host is ever
//! larger than it said it takes (RFC 6691).
//!
//! This is also where a flow learns about its connection from every
//! segment's flags and options ([`Engine::track_tcp`]):
//! - An announced MSS below Linux's `tcp_min_snd_mss` (48) counts as 48,
//!   as Linux's `tcp_sync_mss` takes it: no peer, spoofed or not, can make
//!   the gateway cut segments into slivers.
//! - A SYN changes what a flow knows only when it can start a connection:
//!   during the handshake, as a retransmission of the SYN already taken, or
//!   once the old connection ended (RST, or FIN both ways). A SYN on an
//!   established connection is what RFC 5961 §4 answers with a challenge
//!   ACK: the gateway passes it on untouched and changes nothing (no MSS
//!   rewrite, no reset of the stream state), so a spoofed SYN with MSS 1
//!   on a live 4-tuple is harmless. An RST from outside counts only near
//!   the expected sequence (a blind RST must guess it, as RFC 5961 §3
//!   asks of the end host).
//! - A SYN taken as a new connection resets the flow: the expected inbound
//!   sequence, bulk detection, what each side announced.
//! - TCP-MD5 (kind 19) and TCP-AO (kind 29) segments mark the flow signed:
//!   AO's MAC covers the options, MD5's digest the payload, so such flows
//!   are never rewritten, merged or split; what is too big for the egress
//!   gets the router's treatment.
//! - What a handshake said outlives the flow entry ([`HandshakeMemory`]): a
//!   flow forgotten while idle, or evicted, gets its MSSs and its ECN mode
//!   (AccECN or not) back when it returns.
//!   A flow whose SYN the gateway never saw (a connection older than the
//!   gateway, or one the memory lost) is merged only up to the safe size,
//!   one outer-sized segment (see `Engine::segment_limit`).

use std::time::Instant;

use px_wire::IpVersion;
use px_wire::tcp::{TcpSegment, flags};

use core::hash::BuildHasher;

use crate::counters::FlushReason;
use crate::engine::Engine;
use crate::flow::{FlowKey, SeededHash};
use crate::port::Port;
use crate::segment::Seg;

/// Linux's `tcp_min_snd_mss`: the smallest MSS a peer may make it use.
pub(crate) const MIN_MSS: u16 = 48;

/// How far from the expected sequence an RST from outside may be and still
/// end the connection for the gateway (a blind attacker must guess within
/// it: 1 in 2^16 per try).
const RST_WINDOW: u32 = 1 << 15;

/// Which way a SYN's MSS option may be rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rewrite {
    /// Up to the target, never down.
    Raise,
    /// Down to the target, never up.
    Clamp,
}

/// What [`Engine::track_tcp`] found a segment to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Track {
    /// An ordinary segment of a flow the gateway may translate.
    Plain,
    /// A SYN that does not start a connection: passed on untouched, the
    /// flow's state unchanged.
    IgnoredSyn,
    /// A segment of a TCP-MD5 / TCP-AO flow: passed on untouched.
    Signed,
}

/// The MSS of a host behind a link of `mtu` with option-less IP and TCP
/// headers.
pub(crate) fn mss_for(mtu: u16, version: IpVersion) -> u16 {
    mtu - if version == IpVersion::V4 { 40 } else { 60 }
}

/// What a peer that sent no MSS option may be sent (RFC 9293 §3.7.1: 536;
/// RFC 8200 §8.3: 1220 for IPv6).
fn default_mss(version: IpVersion) -> u16 {
    if version == IpVersion::V4 { 536 } else { 1220 }
}

/// What a flow keeps of an announced MSS (`None`: no option): the default
/// MSS, floored like Linux.
fn kept_mss(announced: Option<u16>, version: IpVersion) -> u16 {
    announced.unwrap_or(default_mss(version)).max(MIN_MSS)
}

/// What the handshakes of live connections said (each side's MSS, and
/// whether they negotiated AccECN), kept for as long as the connection
/// lives rather than as long as its flow entry: a direct-mapped table of
/// 8-byte words (31-bit tag of the flow key's seeded hash, the AccECN bit,
/// inner MSS, outer MSS; 0: empty), a fixed size set by `max_flows`, so it
/// is bounded whatever arrives. Only established connections that did not
/// end are kept, so a flood of spoofed SYNs, which never establish, does
/// not wash it out. A collision overwrites (the older connection then
/// counts as unknown: merged to the safe size, and cut as classic ECN).
#[derive(Debug)]
pub(crate) struct HandshakeMemory {
    slots: Vec<u64>,
    hash: SeededHash,
}

/// What [`HandshakeMemory`] keeps of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handshake {
    pub inner_mss: Option<u16>,
    pub outer_mss: Option<u16>,
    /// The SYN-ACK chose AccECN: CWR is a bit of the ACE counter.
    pub accecn: bool,
}

impl HandshakeMemory {
    pub fn new(max_flows: usize, seed: u64) -> HandshakeMemory {
        let n = max_flows.saturating_mul(2).next_power_of_two().clamp(1024, 1 << 20);
        HandshakeMemory { slots: vec![0; n], hash: SeededHash(seed.rotate_left(17) ^ 0x6d73_735f_6d65_6d6f) }
    }

    /// The slot of `key`, and its tag: 31 bits of the hash, never 0, in
    /// the word's top bits.
    fn slot(&self, key: &FlowKey) -> (usize, u64) {
        let h = self.hash.hash_one(key);
        (h as usize & (self.slots.len() - 1), (h >> 33 | 1) << 33)
    }

    /// Keeps what a connection's handshake said (an MSS of 0: not announced).
    pub fn keep(&mut self, key: &FlowKey, h: Handshake) {
        let (i, tag) = self.slot(key);
        let mss = |m: Option<u16>| m.unwrap_or(0) as u64;
        self.slots[i] = tag | (h.accecn as u64) << 32 | mss(h.inner_mss) << 16 | mss(h.outer_mss);
    }

    /// The slot holding what was kept for `key`, if anything is.
    fn find(&self, key: &FlowKey) -> Option<usize> {
        let (i, tag) = self.slot(key);
        let w = self.slots[i];
        (w != 0 && w >> 33 << 33 == tag).then_some(i)
    }

    /// Whether something is kept for `key` (left in place).
    pub fn holds(&self, key: &FlowKey) -> bool {
        self.find(key).is_some()
    }

    /// Takes back what was kept for `key`, once.
    pub fn recall(&mut self, key: &FlowKey) -> Option<Handshake> {
        let i = self.find(key)?;
        let w = std::mem::take(&mut self.slots[i]);
        let m = |v: u64| Some(v as u16).filter(|m| *m != 0);
        Some(Handshake { inner_mss: m(w >> 16 & 0xffff), outer_mss: m(w & 0xffff), accecn: w >> 32 & 1 == 1 })
    }
}

impl Engine {
    /// Removes a flow from the table, keeping what its handshake said if
    /// its connection is still alive.
    pub(crate) fn remove_flow(&mut self, idx: u32) {
        if let Some(f) = self.flows.remove(idx)
            && f.conn.established
            && !f.conn.ended()
            && !f.conn.signed
            && (f.inner_mss.is_some() || f.accecn)
        {
            let h = Handshake { inner_mss: f.inner_mss, outer_mss: f.outer_mss, accecn: f.accecn };
            self.handshakes.keep(&f.key, h);
        }
    }

    /// A new flow entry gets back what its connection's handshake said, if
    /// it was kept; it is then an established connection.
    pub(crate) fn recall_handshake(&mut self, idx: u32) {
        let Some(f) = self.flows.get_mut(idx) else { return };
        if let Some(h) = self.handshakes.recall(&f.key) {
            f.inner_mss = h.inner_mss;
            f.outer_mss = h.outer_mss;
            f.accecn = h.accecn;
            f.conn.established = true;
        }
    }

    /// Reads what a TCP segment arriving on `from` tells about its flow
    /// (slot `idx`): connection state, SYNs (MSS rewrite, new connections),
    /// MD5/AO. Returns how the segment is to be handled.
    #[inline]
    pub(crate) fn track_tcp(&mut self, idx: u32, frame: &mut [u8], seg: &Seg, from: Port, now: Instant) -> Track {
        if seg.has(flags::SYN) {
            return self.track_syn(idx, frame, seg, from, now);
        }
        let Some(f) = self.flows.get_mut(idx) else { return Track::Plain };
        let c = &mut f.conn;
        c.signed |= seg.signed;
        match from {
            Port::Outer => c.fin_outer |= seg.has(flags::FIN),
            Port::Inner => c.fin_inner |= seg.has(flags::FIN),
        }
        if seg.has(flags::RST) {
            // From inside: trusted. From outside: near the expected sequence.
            let near = |n: u32| seg.seq.wrapping_sub(n).wrapping_add(RST_WINDOW) <= 2 * RST_WINDOW;
            c.reset |= from == Port::Inner || f.next_seq.is_none_or(near);
        } else {
            c.established = true;
        }
        let signed = c.signed;
        if signed {
            self.counters.signed_passed += 1;
            return Track::Signed;
        }
        Track::Plain
    }

    /// [`Engine::track_tcp`] for a SYN: the MSS rewrite, a new connection
    /// on the tuple, or a SYN that starts none.
    #[inline(never)]
    fn track_syn(&mut self, idx: u32, frame: &mut [u8], seg: &Seg, from: Port, now: Instant) -> Track {
        let Some(f) = self.flows.get_mut(idx) else { return Track::Plain };
        let c = &mut f.conn;
        let same_syn = match from {
            Port::Outer => c.syn_outer == Some(seg.seq),
            Port::Inner => c.syn_inner == Some(seg.seq),
        };
        if c.established && !c.ended() && !same_syn {
            self.counters.syns_ignored += 1;
            return Track::IgnoredSyn;
        }
        if !same_syn && !seg.has(flags::ACK) {
            // A new connection on this tuple: forget the old one.
            f.conn = Default::default();
            f.inner_mss = None;
            f.outer_mss = None;
            f.next_seq = None;
            f.bulk = false;
            f.full_run = 0;
            f.max_payload = 0;
        }
        if from == Port::Outer && !same_syn {
            // The outer host's stream starts here.
            f.next_seq = None;
            f.bulk = false;
            f.full_run = 0;
            f.max_payload = 0;
        }
        let c = &mut f.conn;
        c.established &= same_syn;
        c.signed |= seg.signed;
        match from {
            Port::Outer => c.syn_outer = Some(seg.seq),
            Port::Inner => c.syn_inner = Some(seg.seq),
        }
        let signed = c.signed;
        // What the old connection left held goes first.
        self.flush_flow(idx, FlushReason::ControlFlag, now);
        let announced = if signed {
            self.counters.signed_passed += 1;
            TcpSegment::new_unchecked(&frame[seg.info.l4..seg.info.end]).mss().map(|(m, _)| m)
        } else {
            match from {
                Port::Outer => self.rewrite_mss(frame, seg, mss_for(self.cfg.imtu, seg.info.version), Rewrite::Raise),
                Port::Inner => self.rewrite_mss(frame, seg, mss_for(self.cfg.emtu, seg.info.version), Rewrite::Clamp),
            }
        };
        if let Some(f) = self.flows.get_mut(idx) {
            // RFC 9293 §3.7.1 / RFC 8200 §5: what a peer that said nothing
            // may be sent; Linux's floor for what said too little.
            let m = Some(kept_mss(announced, seg.info.version));
            match from {
                Port::Outer => f.outer_mss = m,
                Port::Inner => {
                    f.inner_mss = m;
                    f.last_seen = now;
                }
            }
        }
        if signed { Track::Signed } else { Track::Plain }
    }

    /// Rewrites the segment's MSS option to `target` if `how` allows, and
    /// returns the MSS the host announced (`None`: no option).
    fn rewrite_mss(&mut self, frame: &mut [u8], seg: &Seg, target: u16, how: Rewrite) -> Option<u16> {
        let mut tcp = TcpSegment::new_unchecked(&mut frame[seg.info.l4..seg.info.end]);
        match tcp.mss() {
            Some((m, _)) if (how == Rewrite::Raise && m < target) || (how == Rewrite::Clamp && m > target) => {
                let _ = tcp.rewrite_mss(target);
                match how {
                    Rewrite::Raise => self.counters.mss_raised += 1,
                    Rewrite::Clamp => self.counters.mss_clamped += 1,
                }
                Some(m)
            }
            Some((m, _)) => Some(m),
            None => {
                self.counters.syn_without_mss += 1;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::port::Port;
    use crate::test_frames::{Tcp, l4_checksum_ok};
    use px_wire::FrameInfo;
    use px_wire::offload::PacketMeta;
    use px_wire::tcp::flags;

    /// The MSS option of a SYN after the engine saw it, and whether its
    /// checksum still verifies.
    fn through(e: &mut crate::Engine, from: Port, mss: u16) -> (u16, bool) {
        let mut syn = Tcp::data(false, from, 0, 0);
        syn.flags = flags::SYN;
        syn.opts = [[2, 4], mss.to_be_bytes()].concat();
        let mut f = syn.build();
        let _ = e.handle_packet(Instant::now(), from, &mut f, PacketMeta::PLAIN);
        let info = FrameInfo::parse(&f).unwrap().unwrap();
        let m = TcpSegment::new_checked(&f[info.l4..]).unwrap().mss().unwrap().0;
        (m, l4_checksum_ok(&f, false, from, 6))
    }

    #[test]
    fn syns_are_raised_inbound_and_clamped_outbound() {
        let mut e = crate::Engine::new(Config::default()).unwrap();
        assert_eq!(through(&mut e, Port::Outer, 1460), (8960, true));
        assert_eq!(through(&mut e, Port::Inner, 8960), (1460, true));
        assert_eq!(through(&mut e, Port::Inner, 1200), (1200, true), "never raised outbound");
        assert_eq!(through(&mut e, Port::Outer, 9000), (9000, true), "never lowered inbound");
        let c = e.counters();
        assert_eq!((c.mss_raised, c.mss_clamped, c.syn_without_mss), (1, 1, 0));
    }

    #[test]
    fn the_handshake_memory_is_bounded_and_gives_back_what_it_kept_once() {
        use crate::flow::FlowKey;
        use core::net::{IpAddr, Ipv4Addr};
        let key = |n: u16| {
            FlowKey::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)), IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1)), n, 80)
        };
        let hs =
            |inner: u16, outer: Option<u16>, accecn| Handshake { inner_mss: Some(inner), outer_mss: outer, accecn };
        let mut m = HandshakeMemory::new(4, 7);
        assert_eq!(m.slots.len(), 1024, "at least 1 Ki entries");
        assert_eq!(HandshakeMemory::new(1 << 24, 7).slots.len(), 1 << 20, "at most 1 Mi entries (8 MiB)");
        m.keep(&key(1), hs(8960, None, false));
        m.keep(&key(3), hs(65535, Some(65535), true));
        assert_eq!(m.recall(&key(2)), None);
        assert_eq!(m.recall(&key(1)), Some(hs(8960, None, false)));
        assert_eq!(m.recall(&key(1)), None, "given back once");
        assert_eq!(m.recall(&key(3)), Some(hs(65535, Some(65535), true)), "every field apart");
        // Thousands of keys: every slot is a fixed word, nothing grows.
        for n in 0..5000 {
            m.keep(&key(n), hs(1000 + n, Some(1460), n % 3 == 0));
        }
        assert_eq!(m.slots.len(), 1024);
        let back = (4000..5000).filter(|n| m.recall(&key(*n)) == Some(hs(1000 + n, Some(1460), n % 3 == 0))).count();
        assert!(back > 500, "recent keys mostly survive: {back}");
    }

    #[test]
    fn mss_follows_the_mtu_and_the_rfcs() {
        assert_eq!(mss_for(1500, IpVersion::V4), 1460);
        assert_eq!(mss_for(1500, IpVersion::V6), 1440);
        assert_eq!(mss_for(9000, IpVersion::V4), 8960);
        assert_eq!(default_mss(IpVersion::V4), 536);
        assert_eq!(default_mss(IpVersion::V6), 1220);
    }
}
