//! Connection tracking: everything one TCP segment tells the gateway about
//! its connection, kept in the flow's [`Conn`] and in the
//! [`HandshakeMemory`] that outlives flow entries. Functions here change
//! only that state and return what the engine must do with the segment
//! ([`Track`], [`Syn`]); they never send, hold or rewrite a packet (the
//! MSS option's rewrite is `crate::mss`).
//!
//! - **The handshake** ([`Handshake`]): each side's announced MSS (before
//!   the gateway rewrote it) and whether the SYN-ACK chose AccECN. An
//!   announced MSS below Linux's `tcp_min_snd_mss` (48) counts as 48, as
//!   Linux's `tcp_sync_mss` takes it: no peer, spoofed or not, can make the
//!   gateway cut segments into slivers.
//! - **SYNs** ([`Conn::on_syn`]). A SYN changes what a flow knows only when
//!   it can start a connection: during the handshake, as a retransmission
//!   of the SYN already taken, or once the old connection ended (RST, or
//!   FIN both ways). A SYN on an established connection is what RFC 5961
//!   §4 answers with a challenge ACK: the gateway passes it on untouched
//!   and changes nothing (no MSS rewrite, no reset of the stream state), so
//!   a spoofed SYN with MSS 1 on a live 4-tuple is harmless. A SYN taken as
//!   a new connection resets the flow: the expected inbound sequence, what
//!   each side announced, and (the engine's part) bulk detection.
//! - **The end of a connection**: FIN both ways, or a plausible RST.
//! - **Signed flows**: TCP-MD5 (kind 19) and TCP-AO (kind 29): AO's MAC
//!   covers the options, MD5's digest the payload, so such flows are never
//!   rewritten, merged or split; what is too big for the egress gets the
//!   router's treatment. Both are negotiated in the SYN (RFC 2385 §3, RFC
//!   5925 §3.2: a connection is signed from its first segment or never), so
//!   a flow is signed from its handshake, or, when the gateway never saw
//!   the handshake (a connection older than it), from a signed segment of
//!   the inner host or one from outside at exactly the expected sequence.
//!   Any signed segment passes untouched, but one on a flow whose
//!   handshake was seen unsigned changes nothing.
//!
//! **Off-path senders** (issue 27). Someone who knows a flow's addresses
//! and ports, but not its sequence numbers, must find the gateway no easier
//! to steer than the end hosts behind it. What the inner host sends is
//! believed (it is inside the border). From outside:
//! - an RST ends the connection only at exactly the expected sequence (RFC
//!   5961 §3.2: the end host resets only then, and sends a challenge ACK
//!   for any other in-window RST); unknown (after the entry was forgotten
//!   and recalled), no RST from outside ends it;
//! - a FIN counts only at the expected sequence (or a retransmission
//!   ending there): a FIN elsewhere may be spoofed, and a missed one only
//!   costs a later SYN on the tuple its MSS rewrite;
//! - a SYN-ACK counts only if it acknowledges the inner host's SYN (the end
//!   host resets any other); once a SYN was taken, a SYN with another
//!   sequence number counts only after the connection ended (the end host
//!   in SYN-RECEIVED keeps the first SYN too). What no one can stop, at the
//!   gateway or at the end host, is a SYN that arrives before the real
//!   client's first one: the end host then answers the client's with an
//!   ACK, the client resets and retries, and the gateway follows (the RST
//!   is at the expected sequence);
//! - a handshake the gateway saw is completed only by an ACK of the inner
//!   host's SYN (`ISN + 1 ..= SND.NXT`), so spoofed handshakes never count
//!   as connections and never reach the handshake memory;
//! - the expected sequence moves only for segments starting at most
//!   `MAX_AHEAD` beyond it, so a segment at random (2^31 away) does not
//!   make every real segment out of order.
//!
//! What is left to a lucky guess: an RST or FIN at exactly the expected
//! sequence (1 in 2^32 per try, as for the end host), a segment within
//! `MAX_AHEAD` of it (1 in 16 384 per try; it holds merging back for at
//! most 256 KiB of the stream, and the end host accepts such data into its
//! window too).
//! - **Sequence windows** ([`IcmpWindows`]): the sequence space each
//!   direction's data has covered, and the expected inbound sequence, for
//!   validating ICMP errors that quote the flow (RFC 5927) and for telling
//!   in-order data from the rest.
//! - **The handshake memory** ([`HandshakeMemory`]): a flow forgotten while
//!   idle, or evicted, gets its MSSs and its ECN mode back when it returns.
//!   A flow whose SYN the gateway never saw (a connection older than the
//!   gateway, or one the memory lost) is merged only up to the safe size,
//!   one outer-sized segment (the engine's `segment_limit`).

use core::hash::{BuildHasher, Hash};
use std::time::Instant;

use px_wire::IpVersion;
use px_wire::tcp::{SeqNumber, flags};

use crate::hash::SeededHash;
use crate::mss::default_mss;
use crate::port::Port;
use crate::segment::{Seg, is_accecn_synack};

/// Linux's `tcp_min_snd_mss`: the smallest MSS a peer may make it use.
pub(crate) const MIN_MSS: u16 = 48;

/// How far beyond the expected sequence an inbound segment may start and
/// still move it ([`Conn::advance_inbound`]). A real sender's segment lands
/// further on only after a loss of more than this many bytes in a row; its
/// data then passes unmerged until the hole is filled.
const MAX_AHEAD: u32 = 256 << 10;

/// What [`Conn::on_segment`] found a segment to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Track {
    /// An ordinary segment of a flow the gateway may translate.
    Plain,
    /// A SYN that does not start a connection: passed on untouched, the
    /// flow's state unchanged.
    IgnoredSyn,
    /// A segment of a TCP-MD5 / TCP-AO flow: passed on untouched.
    Signed,
    /// A segment from outside that cannot belong to the connection as it
    /// stands ([`Conn::is_foreign`]): passed on untouched, as a router
    /// would, ahead of what the flow holds, and the flow's state unchanged.
    Foreign,
}

/// What a SYN does to its flow ([`Conn::on_syn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Syn {
    /// It starts no connection (RFC 5961 §4): nothing changed.
    Ignored,
    /// Taken (a new connection, a retransmission, or the SYN-ACK). With
    /// `restart`, the outer host's stream starts anew: the engine restarts
    /// the flow's merge state too.
    Taken { restart: bool },
}

/// What a connection's handshake said: each side's MSS as announced
/// (`None`: not yet seen), and whether the SYN-ACK chose AccECN (then CWR
/// is a bit of the ACE counter). Kept past the flow entry by
/// [`HandshakeMemory`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Handshake {
    pub inner_mss: Option<u16>,
    pub outer_mss: Option<u16>,
    pub accecn: bool,
}

/// Where a connection is in its life, as its segments' flags told it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Life {
    /// A segment without SYN went by (from inside; from outside, one that
    /// acknowledges the inner host's SYN if the gateway saw it; any, if the
    /// gateway joined the connection after its handshake): from now on a
    /// SYN is not a new connection unless the old one ended.
    pub established: bool,
    /// FIN seen from the outer host, and from the inner host.
    pub fin_outer: bool,
    pub fin_inner: bool,
    /// A plausible RST (from the inner host, or from outside at the
    /// expected sequence).
    pub reset: bool,
    /// TCP-MD5 (RFC 2385) or TCP-AO (RFC 5925): passed untouched.
    pub signed: bool,
    /// Sequence numbers of the SYNs taken from each side: the same SYN
    /// again is a retransmission, not a new connection.
    pub syn_outer: Option<u32>,
    pub syn_inner: Option<u32>,
}

impl Life {
    /// Whether the connection is over, so that a SYN on its tuple may
    /// start the next one.
    pub fn ended(&self) -> bool {
        self.reset || (self.fin_outer && self.fin_inner)
    }
}

/// The sequence windows of one flow, for validating ICMP errors that quote
/// it (RFC 5927): the data sent toward the outer port (the inner host's)
/// and toward the inner port, and the checks spent this second.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct IcmpWindows {
    pub seq_out: SeqWindow,
    pub seq_in: SeqWindow,
    pub checks: CheckBudget,
}

/// Everything the gateway knows about one TCP connection.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Conn {
    pub handshake: Handshake,
    pub life: Life,
    /// Next inbound sequence number expected: the end of the furthest
    /// inbound segment (`None` until the outer host's first).
    pub next_in: Option<SeqNumber>,
    pub windows: IcmpWindows,
}

impl Conn {
    /// A segment without SYN that arrived on `from`: its FIN, RST, ACK and
    /// signature tell about the connection. From inside, every segment is
    /// believed. From outside, only what an end host would believe of it
    /// (module docs, "Off-path senders").
    #[inline(always)]
    pub fn on_segment(&mut self, seg: &Seg, from: Port) -> Track {
        let seq = SeqNumber(seg.seq);
        // Exactly where the outer host's stream is (RFC 5961 §3.2 asks the
        // same of an RST), or a retransmission ending there.
        let at_next = self.next_in.is_some_and(|n| n == seq || n == seq + seg.seq_len());
        let handshake_seen = self.life.syn_outer.is_some() || self.life.syn_inner.is_some();
        let completes_handshake = self.acks_the_inner_syn(seg);
        let l = &mut self.life;
        if seg.signed && !l.signed {
            if handshake_seen || (from == Port::Outer && !at_next) {
                // Signed, on a connection that is not: someone else's.
                return Track::Foreign;
            }
            // A connection older than the gateway shows it is signed.
            l.signed = true;
        }
        match from {
            Port::Outer => l.fin_outer |= seg.has(flags::FIN) && at_next,
            Port::Inner => l.fin_inner |= seg.has(flags::FIN),
        }
        if seg.has(flags::RST) {
            l.reset |= from == Port::Inner || self.next_in == Some(seq);
        } else if from == Port::Inner || completes_handshake {
            l.established = true;
        }
        if l.signed { Track::Signed } else { Track::Plain }
    }

    /// Whether a segment from outside (not a SYN) lies too far from the
    /// outer host's stream to be this connection's: starting more than
    /// [`MAX_AHEAD`] before or beyond the expected sequence. A blind sender
    /// lands there almost always (all but 1 in 8 192 guesses); a real
    /// segment only after a loss or a delay of more than 256 KiB, and then
    /// it only passes unmerged, ahead of the flow's hold, which TCP takes
    /// as it takes any reordering.
    #[inline(always)]
    pub fn is_foreign(&self, seg: &Seg) -> bool {
        self.next_in.is_some_and(|n| SeqNumber(seg.seq).since(n).unsigned_abs() > MAX_AHEAD)
    }

    /// Whether a segment from outside may establish the connection: during
    /// a handshake the gateway saw the inner host answer, only by
    /// acknowledging the inner host's SYN (an ACK in `ISN + 1 ..= SND.NXT`,
    /// as Linux's `tcp_check_req` asks for exactly `ISN + 1`); otherwise
    /// (established already, or a connection older than the gateway) any.
    fn acks_the_inner_syn(&self, seg: &Seg) -> bool {
        match self.life.syn_inner {
            Some(isn) if !self.life.established => {
                let ack = SeqNumber(seg.ack);
                seg.has(flags::ACK) && ack.is_after(SeqNumber(isn)) && self.windows.seq_out.contains(seg.ack)
            }
            _ => true,
        }
    }

    /// A SYN that arrived on `from`: whether it starts a connection, a
    /// retransmission of one, or nothing (module docs).
    pub fn on_syn(&mut self, seg: &Seg, from: Port) -> Syn {
        let l = &mut self.life;
        let same_syn = match from {
            Port::Outer => l.syn_outer == Some(seg.seq),
            Port::Inner => l.syn_inner == Some(seg.seq),
        };
        if !same_syn && l.established && !l.ended() {
            return Syn::Ignored;
        }
        if !same_syn && from == Port::Outer {
            let answers_inner_syn = l.syn_inner.is_some_and(|isn| seg.ack == isn.wrapping_add(1));
            if seg.has(flags::ACK) && !answers_inner_syn {
                // A SYN-ACK from outside that does not acknowledge the inner
                // host's SYN: the inner host would answer it with an RST.
                return Syn::Ignored;
            }
            if !seg.has(flags::ACK) && (l.syn_outer.is_some() || l.syn_inner.is_some()) && !l.ended() {
                // A handshake is under way: a SYN with another sequence
                // number starts nothing (the end host in SYN-RECEIVED keeps
                // the first SYN's and answers others with an ACK, Linux
                // `tcp_check_req`; RFC 5961 §4).
                return Syn::Ignored;
            }
        }
        let new_connection = !same_syn && !seg.has(flags::ACK);
        if new_connection {
            // A new connection on this tuple: forget the old one.
            self.life = Life::default();
            self.handshake.inner_mss = None;
            self.handshake.outer_mss = None;
        }
        // The outer host's stream starts here (or the old one is forgotten).
        let restart = new_connection || (from == Port::Outer && !same_syn);
        if restart {
            self.next_in = None;
        }
        let l = &mut self.life;
        l.established &= same_syn;
        l.signed |= seg.signed;
        match from {
            Port::Outer => l.syn_outer = Some(seg.seq),
            Port::Inner => l.syn_inner = Some(seg.seq),
        }
        Syn::Taken { restart }
    }

    /// The MSS a taken SYN from `from` announced (`None`: no option): kept
    /// as RFC 9293 §3.7.1 / RFC 8200 §5 and Linux's floor take it.
    pub fn on_announced_mss(&mut self, from: Port, announced: Option<u16>, version: IpVersion) {
        let m = Some(kept_mss(announced, version));
        match from {
            Port::Outer => self.handshake.outer_mss = m,
            Port::Inner => self.handshake.inner_mss = m,
        }
    }

    /// A SYN-ACK (either direction) tells whether the connection
    /// negotiated AccECN.
    pub fn on_synack_ecn(&mut self, frame: &[u8], seg: &Seg) {
        if seg.has(flags::SYN) && seg.has(flags::ACK) {
            self.handshake.accecn = is_accecn_synack(frame, seg);
        }
    }

    /// Keeps the sequence windows: `seg` arrived on `from`, so its data
    /// goes toward the other port and its ACK acknowledges data that went
    /// toward `from`.
    #[inline(always)]
    pub fn on_sequence(&mut self, from: Port, seg: &Seg) {
        let w = &mut self.windows;
        let (data, acked) = match from {
            Port::Inner => (&mut w.seq_out, &mut w.seq_in),
            Port::Outer => (&mut w.seq_in, &mut w.seq_out),
        };
        let len = seg.seq_len();
        if len > 0 {
            if seg.has(flags::SYN) {
                // A new initial sequence number.
                *data = Default::default();
            }
            data.on_data(seg.seq, seg.seq.wrapping_add(len));
        }
        if seg.has(flags::ACK) {
            acked.on_ack(seg.ack);
        }
    }

    /// An inbound segment's place in the outer host's stream: whether it
    /// starts where the last one ended. The expectation moves to its end if
    /// that is further on and the segment starts at most [`MAX_AHEAD`]
    /// beyond it (an RST never moves it): a segment guessed at random is
    /// that close once in 2^32 / `MAX_AHEAD` tries, and then holds merging
    /// back for at most that many bytes.
    #[inline(always)]
    pub fn advance_inbound(&mut self, seg: &Seg) -> bool {
        let seq = SeqNumber(seg.seq);
        let end = seq + seg.seq_len();
        let in_order = self.next_in == Some(seq);
        let moves = match self.next_in {
            None => true,
            Some(n) => end.is_after(n) && !seq.is_after(n + MAX_AHEAD) && !seg.has(flags::RST),
        };
        if moves {
            self.next_in = Some(end);
        }
        in_order
    }

    /// What to keep of this connection when its flow entry goes: its
    /// handshake, if it is alive, established and translatable.
    pub fn worth_keeping(&self) -> Option<Handshake> {
        let (l, h) = (&self.life, &self.handshake);
        (l.established && !l.ended() && !l.signed && (h.inner_mss.is_some() || h.accecn)).then_some(*h)
    }

    /// A new flow entry of a connection whose handshake was kept: it is
    /// established, with what its handshake said.
    pub fn resume(&mut self, h: Handshake) {
        self.handshake = h;
        self.life.established = true;
    }
}

/// What a flow keeps of an announced MSS (`None`: no option): the default
/// MSS, floored like Linux.
fn kept_mss(announced: Option<u16>, version: IpVersion) -> u16 {
    announced.unwrap_or(default_mss(version)).max(MIN_MSS)
}

/// How many "too big" errors quoting one flow are checked against its
/// windows per second; the others are not believed. RFC 5927's window
/// check lets a blind guess through once in 2^32 / W tries, and a flow
/// stalled with megabytes in flight (W) during a flood of spoofed errors
/// gave two hits among a few thousand guesses (the hostile-traffic lab
/// test: 552 learned). With the checks bounded, a guess costs the attacker
/// a second of the flow's time, not a packet. A router's own errors fit:
/// Linux sends a burst of 6 per destination, then one a second. The price:
/// while someone floods errors about a flow, its router's real ones may go
/// unchecked, and the path MTU is learned later.
pub const ICMP_CHECKS_PER_SEC: u32 = 10;

/// The checks a flow has had in the current second ([`ICMP_CHECKS_PER_SEC`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CheckBudget {
    since: Option<Instant>,
    used: u32,
}

impl CheckBudget {
    /// Whether [`CheckBudget::allow`] would allow one more at `now`,
    /// without spending it.
    pub fn would_allow(&self, now: Instant) -> bool {
        let mut c = *self;
        c.allow(now)
    }

    /// Whether one more error may be checked at `now`.
    pub fn allow(&mut self, now: Instant) -> bool {
        if self.since.is_none_or(|s| now.saturating_duration_since(s) >= std::time::Duration::from_secs(1)) {
            *self = CheckBudget { since: Some(now), used: 0 };
        }
        self.used += 1;
        self.used <= ICMP_CHECKS_PER_SEC
    }
}

/// The sequence space a flow's data has covered in one direction, as the
/// gateway saw it: from the oldest byte not yet acknowledged by the other
/// side (SND.UNA, from the ACKs going the other way) to the end of the
/// newest data forwarded (SND.NXT). A TCP sequence number quoted by an ICMP
/// error must fall in it (RFC 5927 §4.1, as Linux `tcp_v4_err` checks).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SeqWindow {
    una: u32,
    nxt: u32,
    known: bool,
}

impl SeqWindow {
    /// Data `[seq, end)` was forwarded in this direction.
    #[inline]
    pub fn on_data(&mut self, seq: u32, end: u32) {
        if !self.known {
            *self = SeqWindow { una: seq, nxt: end, known: true };
        } else if SeqNumber(end).is_after(SeqNumber(self.nxt)) {
            self.nxt = end;
        }
    }

    /// The other side acknowledged up to `ack`.
    #[inline]
    pub fn on_ack(&mut self, ack: u32) {
        if self.known
            && SeqNumber(ack).is_after(SeqNumber(self.una))
            && SeqNumber(self.nxt).is_at_or_after(SeqNumber(ack))
        {
            self.una = ack;
        }
    }

    /// The end of the newest data (SND.NXT), if any was seen.
    pub fn end(&self) -> Option<u32> {
        self.known.then_some(self.nxt)
    }

    /// Whether `seq` lies in `[una, nxt]`.
    pub fn contains(&self, seq: u32) -> bool {
        self.known && seq.wrapping_sub(self.una) <= self.nxt.wrapping_sub(self.una)
    }
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

impl HandshakeMemory {
    pub fn new(max_flows: usize, seed: u64) -> HandshakeMemory {
        let n = max_flows.saturating_mul(2).next_power_of_two().clamp(1024, 1 << 20);
        HandshakeMemory { slots: vec![0; n], hash: SeededHash(seed.rotate_left(17) ^ 0x6d73_735f_6d65_6d6f) }
    }

    /// The slot of `key`, and its tag: 31 bits of the hash, never 0, in
    /// the word's top bits.
    fn slot(&self, key: &impl Hash) -> (usize, u64) {
        let h = self.hash.hash_one(key);
        (h as usize & (self.slots.len() - 1), (h >> 33 | 1) << 33)
    }

    /// Keeps what a connection's handshake said (an MSS of 0: not announced).
    pub fn keep(&mut self, key: &impl Hash, h: Handshake) {
        let (i, tag) = self.slot(key);
        let mss = |m: Option<u16>| m.unwrap_or(0) as u64;
        self.slots[i] = tag | (h.accecn as u64) << 32 | mss(h.inner_mss) << 16 | mss(h.outer_mss);
    }

    /// The slot holding what was kept for `key`, if anything is.
    fn find(&self, key: &impl Hash) -> Option<usize> {
        let (i, tag) = self.slot(key);
        let w = self.slots[i];
        (w != 0 && w >> 33 << 33 == tag).then_some(i)
    }

    /// Slots of the table (fixed at start).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Whether something is kept for `key` (left in place).
    pub fn holds(&self, key: &impl Hash) -> bool {
        self.find(key).is_some()
    }

    /// Takes back what was kept for `key`, once.
    pub fn recall(&mut self, key: &impl Hash) -> Option<Handshake> {
        let i = self.find(key)?;
        let w = std::mem::take(&mut self.slots[i]);
        let m = |v: u64| Some(v as u16).filter(|m| *m != 0);
        Some(Handshake { inner_mss: m(w >> 16 & 0xffff), outer_mss: m(w & 0xffff), accecn: w >> 32 & 1 == 1 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::FlowKey;

    #[test]
    fn the_handshake_memory_is_bounded_and_gives_back_what_it_kept_once() {
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
    fn sequence_window_follows_data_and_acks_across_the_wrap() {
        let mut w = SeqWindow::default();
        assert!(!w.contains(0));
        let isn = u32::MAX - 1000;
        w.on_data(isn, isn.wrapping_add(1)); // SYN
        w.on_data(isn.wrapping_add(1), isn.wrapping_add(3001));
        assert!(w.contains(isn) && w.contains(isn.wrapping_add(3001)) && w.contains(5));
        assert!(!w.contains(isn.wrapping_add(3002)) && !w.contains(isn - 1));
        w.on_ack(isn.wrapping_add(2001));
        assert!(!w.contains(isn.wrapping_add(2000)) && w.contains(isn.wrapping_add(2001)));
        w.on_ack(isn.wrapping_add(9999)); // acknowledges what was never sent
        assert!(w.contains(isn.wrapping_add(2001)));
        w.on_data(isn, isn.wrapping_add(100)); // an old retransmission
        assert!(w.contains(isn.wrapping_add(3001)));
    }

    #[test]
    fn a_tiny_mss_is_kept_at_linuxs_floor() {
        assert_eq!(kept_mss(None, IpVersion::V6), 1220);
        assert_eq!(kept_mss(Some(1), IpVersion::V4), MIN_MSS);
    }
}
