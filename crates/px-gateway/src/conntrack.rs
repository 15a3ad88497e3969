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
//! - an RST never ends the connection for the gateway. RFC 5961 §3.2 lets
//!   the end host reset only at exactly its expected sequence, which is
//!   secret to a blind sender; the gateway's expected sequence is not the
//!   end host's (it moves with data the end host may never have taken, a
//!   blind segment inside the window among it), so an RST there proves
//!   nothing. A later SYN from outside on the tuple starts a new connection
//!   only once the inner host answers it with a SYN-ACK ([`Conn::on_syn`]):
//!   the end host's own word that its old connection is gone;
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
//! - a segment counts only inside what the inner host allows
//!   ([`ReceiveWindow`]: its highest ACK plus its window, and no more than
//!   its largest window behind the stream), as Linux's `nf_conntrack`
//!   `tcp_in_window` checks and RFC 5961 §5 asks of an end host; the
//!   expected sequence moves only with such segments. A blind sweep across
//!   the sequence space therefore lands at most a window ahead of the
//!   stream, and each later packet of the sweep lies beyond what the inner
//!   host allows until the inner host acknowledges more (issue 35: before,
//!   a landed segment moved the expectation 256 KiB further for the next
//!   one, and the sweep carried it away from the stream for good).
//!
//! What is left to a lucky guess: a FIN at exactly the expected sequence
//! (1 in 2^32 per try, as for the end host), a segment inside the inner
//! host's window (1 in 2^32 / window per try; it holds merging back until
//! the stream reaches it, at most one window of bytes, and the end host
//! accepts such data into its window too).
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

/// How far from the expected sequence an inbound segment may start and
/// still be taken as the connection's while the inner host's window is not
/// known yet ([`Conn::is_foreign`]; until the inner host's first ACK on
/// this flow entry, at most a round trip). Meanwhile the expectation moves
/// only with data that joins it ([`Conn::advance_inbound`]), so nothing can
/// carry it away.
const MAX_AHEAD: u32 = 256 << 10;

/// The largest window shift (RFC 7323 §2.3), assumed for the inner host's
/// windows when the gateway did not see the handshake: such flows are
/// neither merged nor offloaded, so a window too wide costs them nothing.
pub(crate) const MAX_SHIFT: u8 = 14;

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
/// (`None`: not yet seen), whether the SYN-ACK chose AccECN (then CWR
/// is a bit of the ACE counter), and each side's window scale option. Kept
/// past the flow entry by [`HandshakeMemory`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Handshake {
    pub inner_mss: Option<u16>,
    pub outer_mss: Option<u16>,
    pub accecn: bool,
    pub inner_scale: Scale,
    pub outer_scale: Scale,
}

/// A SYN's window scale option (RFC 7323 §2.2), as far as the gateway saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Scale {
    /// The side's SYN was not seen.
    #[default]
    Unseen,
    /// Its SYN had no window scale option.
    Absent,
    /// Its SYN announced this shift.
    Shift(u8),
}

impl Handshake {
    /// The shift of the inner host's window field (RFC 7323 §2.3): what it
    /// announced if both SYNs carried the option (at most 14), 0 if either
    /// did not; `None` while the handshake is not known.
    pub fn inner_shift(&self) -> Option<u8> {
        match (self.inner_scale, self.outer_scale) {
            (Scale::Shift(s), Scale::Shift(_)) => Some(s.min(MAX_SHIFT)),
            (Scale::Absent, _) | (_, Scale::Absent) => Some(0),
            _ => None,
        }
    }
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
    /// An RST from the inner host (one from outside is never believed
    /// alone: module docs).
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
    /// What the inner host allows the outer host to send (`None` until the
    /// inner host's first ACK on this flow entry, and again when the outer
    /// host's stream starts anew).
    pub receiver: Option<ReceiveWindow>,
    /// The last SYN from outside that started nothing while the connection
    /// lived: a SYN-ACK of the inner host that answers it shows that the
    /// inner host took it as a new connection ([`Conn::on_syn`]).
    pub unanswered_syn: Option<UnansweredSyn>,
    pub windows: IcmpWindows,
}

/// A SYN from outside passed on without being taken ([`Conn::unanswered_syn`]):
/// what the flow takes from it if the inner host answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UnansweredSyn {
    pub seq: u32,
    pub mss: Option<u16>,
    pub scale: Scale,
}

/// What the inner host allows the outer host to send: the furthest
/// sequence number its ACKs and windows have opened (RCV.NXT + RCV.WND,
/// RFC 9293 §3.10.7.4), and the largest window it offered. Linux's
/// `nf_conntrack` keeps the same two (`td_maxend`, `td_maxwin`) for its
/// `tcp_in_window` check. The engine and the kernel fast path take a
/// segment from outside as the connection's by this one rule
/// ([`ReceiveWindow::admits`]; `bpf/fast_path.c` `px_admits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveWindow {
    /// The furthest `ack + window` the inner host announced.
    pub end: u32,
    /// The largest window it announced (bytes, scaled).
    pub max_win: u32,
}

/// The largest window TCP can announce (RFC 7323 §2.3: 2^30 bytes).
const MAX_WINDOW: u32 = 1 << 30;

impl ReceiveWindow {
    /// The largest window taken from an ACK (RFC 7323 §2.3: 2^30 bytes);
    /// the kernel fast path's `PX_MAX_WINDOW` (`bpf/fast_path.h`) is
    /// checked against it.
    pub const MAX_WINDOW: u32 = MAX_WINDOW;

    /// The first ACK of the inner host: `ack` with a window of `win` bytes
    /// (already scaled).
    pub fn new(ack: u32, win: u32) -> ReceiveWindow {
        let win = win.min(MAX_WINDOW);
        ReceiveWindow { end: ack.wrapping_add(win), max_win: win.max(1) }
    }

    /// A later ACK of the inner host: the end moves only forward.
    pub fn on_ack(&mut self, ack: u32, win: u32) {
        let win = win.min(MAX_WINDOW);
        let end = ack.wrapping_add(win);
        if SeqNumber(end).is_after(SeqNumber(self.end)) {
            self.end = end;
        }
        self.max_win = self.max_win.max(win);
    }

    /// Whether a segment from outside occupying `[seq, end)` may belong to
    /// the connection whose furthest data so far ends at `next`: it starts
    /// no further on than the inner host allows, and ends less than the
    /// largest window before `next` (`tcp_in_window`'s first two checks).
    pub fn admits(&self, next: u32, seq: u32, end: u32) -> bool {
        let behind = next.wrapping_sub(self.max_win).wrapping_sub(1);
        !SeqNumber(seq).is_after(SeqNumber(self.end)) && SeqNumber(end).is_after(SeqNumber(behind))
    }
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
            l.reset |= from == Port::Inner;
        } else if from == Port::Inner || completes_handshake {
            l.established = true;
        }
        if l.signed { Track::Signed } else { Track::Plain }
    }

    /// Whether a segment from outside (not a SYN) lies outside what the
    /// inner host allows ([`ReceiveWindow::admits`]), so cannot be this
    /// connection's; while the inner host's window is not known, whether it
    /// starts more than [`MAX_AHEAD`] before or beyond the expected
    /// sequence. A blind sender lands there almost always (all but 1 in
    /// 2^32 / window guesses); a real sender never sends beyond the window
    /// it was given, and a retransmission lies within one window of the
    /// stream.
    #[inline(always)]
    pub fn is_foreign(&self, seg: &Seg) -> bool {
        let Some(n) = self.next_in else { return false };
        match &self.receiver {
            Some(r) => !r.admits(n.0, seg.seq, seg.seq.wrapping_add(seg.seq_len())),
            None => SeqNumber(seg.seq).since(n).unsigned_abs() > MAX_AHEAD,
        }
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

    /// A SYN that arrived on `from`, with the MSS and window scale it
    /// announced: whether it starts a connection, a retransmission of one,
    /// or nothing (module docs). The inner host's SYN-ACK that answers a
    /// SYN from outside which started nothing (one that came while the
    /// connection lived) starts the new connection: the inner host has
    /// just said that its old one is gone.
    pub fn on_syn(&mut self, seg: &Seg, from: Port, mss: Option<u16>, scale: Scale) -> Syn {
        if from == Port::Inner
            && seg.has(flags::ACK)
            && let Some(s) = self.unanswered_syn.filter(|s| seg.ack == s.seq.wrapping_add(1))
        {
            return self.answered(s, seg, scale);
        }
        let l = &mut self.life;
        let same_syn = match from {
            Port::Outer => l.syn_outer == Some(seg.seq),
            Port::Inner => l.syn_inner == Some(seg.seq),
        };
        if !same_syn && l.established && !l.ended() {
            if from == Port::Outer && !seg.has(flags::ACK) {
                self.unanswered_syn = Some(UnansweredSyn { seq: seg.seq, mss, scale });
            }
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
                // `tcp_check_req`; RFC 5961 §4), unless the inner host
                // answers it.
                self.unanswered_syn = Some(UnansweredSyn { seq: seg.seq, mss, scale });
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
            self.receiver = None;
        }
        let l = &mut self.life;
        l.established &= same_syn;
        l.signed |= seg.signed;
        match from {
            Port::Outer => {
                l.syn_outer = Some(seg.seq);
                self.handshake.outer_scale = scale;
            }
            Port::Inner => {
                l.syn_inner = Some(seg.seq);
                self.handshake.inner_scale = scale;
                if seg.has(flags::ACK) {
                    // A SYN-ACK's window is never scaled (RFC 7323 §2.2).
                    self.receiver = Some(ReceiveWindow::new(seg.ack, seg.window as u32));
                }
            }
        }
        Syn::Taken { restart }
    }

    /// The inner host's SYN-ACK `seg` (announcing `scale`) answers `syn`, a
    /// SYN from outside that started nothing: the connection starts anew
    /// with that SYN (its MSS was passed on as announced, not raised) and
    /// this SYN-ACK.
    fn answered(&mut self, syn: UnansweredSyn, seg: &Seg, scale: Scale) -> Syn {
        self.life = Life { syn_outer: Some(syn.seq), syn_inner: Some(seg.seq), signed: seg.signed, ..Life::default() };
        self.handshake = Handshake { outer_scale: syn.scale, inner_scale: scale, ..Handshake::default() };
        self.unanswered_syn = None;
        self.next_in = Some(SeqNumber(syn.seq.wrapping_add(1)));
        self.receiver = Some(ReceiveWindow::new(seg.ack, seg.window as u32));
        self.on_announced_mss(Port::Outer, syn.mss, seg.info.version);
        Syn::Taken { restart: true }
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
    /// toward `from`. The inner host's ACK and window move what it allows
    /// the outer host to send ([`ReceiveWindow`]).
    #[inline(always)]
    pub fn on_sequence(&mut self, from: Port, seg: &Seg) {
        if from == Port::Inner && seg.flags & (flags::ACK | flags::SYN | flags::RST) == flags::ACK {
            let shift = self.handshake.inner_shift().unwrap_or(MAX_SHIFT);
            let win = (seg.window as u32) << shift;
            match &mut self.receiver {
                Some(r) => r.on_ack(seg.ack, win),
                None => self.receiver = Some(ReceiveWindow::new(seg.ack, win)),
            }
        }
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

    /// An inbound segment's place in the outer host's stream (one
    /// [`Conn::is_foreign`] let through): whether it starts where the last
    /// one ended. The expectation moves to its end if that is further on
    /// (an RST never moves it): inside the inner host's window, as its
    /// furthest data; while that window is not known, only with a segment
    /// that starts at or before it (no hole), so that nothing carries it
    /// away before the window bounds it.
    #[inline(always)]
    pub fn advance_inbound(&mut self, seg: &Seg) -> bool {
        let seq = SeqNumber(seg.seq);
        let end = seq + seg.seq_len();
        let in_order = self.next_in == Some(seq);
        let moves = match self.next_in {
            None => true,
            Some(n) => end.is_after(n) && !seg.has(flags::RST) && (self.receiver.is_some() || !seq.is_after(n)),
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

    /// The data reached `nxt` by a path the gateway did not see (the kernel
    /// fast path), `advanced` bytes beyond where it was: the end moves there.
    /// Beyond 2 GiB a 32-bit comparison cannot tell forward from back, and
    /// what lies between is long acknowledged: the window starts over at
    /// `nxt`.
    pub fn catch_up(&mut self, nxt: u32, advanced: u64) {
        if advanced >= 1 << 31 {
            *self = SeqWindow { una: nxt, nxt, known: true };
        } else {
            self.on_data(nxt, nxt);
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
/// 8-byte words (27-bit tag of the flow key's seeded hash, the inner host's
/// window shift, the AccECN bit,
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

/// Where a handshake memory word's tag starts (bits 37 to 63).
const TAG_AT: u32 = 37;

impl HandshakeMemory {
    pub fn new(max_flows: usize, seed: u64) -> HandshakeMemory {
        let n = max_flows.saturating_mul(2).next_power_of_two().clamp(1024, 1 << 20);
        HandshakeMemory { slots: vec![0; n], hash: SeededHash(seed.rotate_left(17) ^ 0x6d73_735f_6d65_6d6f) }
    }

    /// The slot of `key`, and its tag: 27 bits of the hash, never 0, in
    /// the word's top bits.
    fn slot(&self, key: &impl Hash) -> (usize, u64) {
        let h = self.hash.hash_one(key);
        (h as usize & (self.slots.len() - 1), (h >> TAG_AT | 1) << TAG_AT)
    }

    /// Keeps what a connection's handshake said (an MSS of 0: not announced).
    pub fn keep(&mut self, key: &impl Hash, h: Handshake) {
        let (i, tag) = self.slot(key);
        let mss = |m: Option<u16>| m.unwrap_or(0) as u64;
        // The inner host's window shift + 1 (0: not known).
        let shift = h.inner_shift().map_or(0, |s| s as u64 + 1);
        self.slots[i] = tag | shift << 33 | (h.accecn as u64) << 32 | mss(h.inner_mss) << 16 | mss(h.outer_mss);
    }

    /// The slot holding what was kept for `key`, if anything is.
    fn find(&self, key: &impl Hash) -> Option<usize> {
        let (i, tag) = self.slot(key);
        let w = self.slots[i];
        (w != 0 && w >> TAG_AT << TAG_AT == tag).then_some(i)
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
        // Both sides' scale as the shift they make for the inner host's windows.
        let (inner_scale, outer_scale) = match (w >> 33 & 0xf) as u8 {
            0 => (Scale::Unseen, Scale::Unseen),
            s => (Scale::Shift(s - 1), Scale::Shift(0)),
        };
        Some(Handshake {
            inner_mss: m(w >> 16 & 0xffff),
            outer_mss: m(w & 0xffff),
            accecn: w >> 32 & 1 == 1,
            inner_scale,
            outer_scale,
        })
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
        // As recalled: the window shift comes back as the shift the inner
        // host's windows take (both sides' options, or neither).
        let hs = |inner: u16, outer: Option<u16>, accecn, shift: Option<u8>| Handshake {
            inner_mss: Some(inner),
            outer_mss: outer,
            accecn,
            inner_scale: shift.map_or(Scale::Unseen, Scale::Shift),
            outer_scale: shift.map_or(Scale::Unseen, |_| Scale::Shift(0)),
        };
        let mut m = HandshakeMemory::new(4, 7);
        assert_eq!(m.slots.len(), 1024, "at least 1 Ki entries");
        assert_eq!(HandshakeMemory::new(1 << 24, 7).slots.len(), 1 << 20, "at most 1 Mi entries (8 MiB)");
        m.keep(&key(1), hs(8960, None, false, Some(7)));
        m.keep(&key(3), hs(65535, Some(65535), true, None));
        assert_eq!(m.recall(&key(2)), None);
        assert_eq!(m.recall(&key(1)), Some(hs(8960, None, false, Some(7))));
        assert_eq!(m.recall(&key(1)), None, "given back once");
        assert_eq!(m.recall(&key(3)), Some(hs(65535, Some(65535), true, None)), "every field apart");
        let absent = Handshake { inner_scale: Scale::Shift(9), outer_scale: Scale::Absent, ..hs(1, None, false, None) };
        m.keep(&key(4), absent);
        assert_eq!(m.recall(&key(4)).and_then(|h| h.inner_shift()), Some(0), "no scaling: shift 0");
        // Thousands of keys: every slot is a fixed word, nothing grows.
        let shift = |n: u16| (n % 16 < 15).then_some((n % 15) as u8);
        for n in 0..5000 {
            m.keep(&key(n), hs(1000 + n, Some(1460), n % 3 == 0, shift(n)));
        }
        assert_eq!(m.slots.len(), 1024);
        let back = (4000..5000)
            .filter(|n| m.recall(&key(*n)) == Some(hs(1000 + n, Some(1460), n % 3 == 0, shift(*n))))
            .count();
        assert!(back > 500, "recent keys mostly survive: {back}");
    }

    use crate::test_frames::Tcp;
    use px_wire::FrameInfo;

    /// Runs `f` on the segment `t` as the engine parses it.
    fn with_seg<R>(t: &Tcp, f: impl FnOnce(&Seg) -> R) -> R {
        let frame = t.build();
        let info = FrameInfo::parse(&frame).unwrap().unwrap();
        f(&Seg::parse(&frame, &info).unwrap())
    }

    /// What the engine does with a segment from outside: nothing if it is
    /// foreign, else its sequence; whether it was taken as the
    /// connection's.
    fn from_outside(c: &mut Conn, t: &Tcp) -> bool {
        with_seg(t, |s| {
            if !s.has(flags::SYN) && c.is_foreign(s) {
                return false;
            }
            c.on_sequence(Port::Outer, s);
            if s.has(flags::SYN) {
                let taken = matches!(c.on_syn(s, Port::Outer, Some(1460), Scale::Shift(7)), Syn::Taken { .. });
                if taken {
                    c.on_announced_mss(Port::Outer, Some(1460), IpVersion::V4);
                    c.advance_inbound(s);
                }
                return taken;
            }
            c.on_segment(s, Port::Outer);
            c.advance_inbound(s);
            true
        })
    }

    fn from_inside(c: &mut Conn, t: &Tcp) -> Option<Syn> {
        with_seg(t, |s| {
            c.on_sequence(Port::Inner, s);
            if s.has(flags::SYN) {
                let r = c.on_syn(s, Port::Inner, Some(8960), Scale::Shift(7));
                if r != Syn::Ignored {
                    c.on_announced_mss(Port::Inner, Some(8960), IpVersion::V4);
                }
                return Some(r);
            }
            c.on_segment(s, Port::Inner);
            None
        })
    }

    const ISN: u32 = 0x4000_0000;

    /// A connection after its handshake (both SYNs with window scale 7) and
    /// an ACK of the inner host that opens a window of `win << 7` bytes.
    fn connection(win: u16) -> Conn {
        let mut c = Conn::default();
        let mut syn = Tcp::data(false, Port::Outer, ISN - 1, 0);
        syn.flags = flags::SYN;
        assert!(from_outside(&mut c, &syn));
        let mut sa = Tcp::data(false, Port::Inner, 7, 0);
        sa.flags = flags::SYN | flags::ACK;
        sa.ack = ISN;
        sa.window = 65_535;
        from_inside(&mut c, &sa);
        let mut ack = Tcp::data(false, Port::Outer, ISN, 0);
        ack.ack = 8;
        assert!(from_outside(&mut c, &ack));
        let mut open = Tcp::data(false, Port::Inner, 8, 0);
        open.ack = ISN;
        open.window = win;
        from_inside(&mut c, &open);
        // The SYN-ACK opened 65,535 bytes already (unscaled).
        let opened = ((win as u32) << 7).max(65_535);
        assert_eq!(c.receiver, Some(ReceiveWindow { end: ISN + opened, max_win: opened }));
        c
    }

    /// A blind sweep of 1-byte segments 256 KiB apart across the whole
    /// sequence space (issue 35 item 1): the expected sequence moves only
    /// inside what the inner host allows, so the sweep cannot carry it
    /// away, and the real stream is back in order within one window.
    #[test]
    fn a_blind_sweep_moves_the_stream_only_inside_the_inner_hosts_window() {
        for (win, offset) in [(1024u16, 77u32), (1024, 100_000), (8, 3), (65_535, 5)] {
            let mut c = connection(win);
            let opened = ((win as u32) << 7).max(65_535);
            let allowed = ISN + opened;
            let mut landed = 0;
            for k in 0..(1u32 << 14) {
                let seq = ISN.wrapping_add(offset).wrapping_add(k << 18);
                landed += from_outside(&mut c, &Tcp::data(false, Port::Outer, seq, 1)) as u32;
                let n = c.next_in.unwrap();
                assert!(!n.is_after(SeqNumber(allowed + 1)), "win {win}: moved to {:#x} after {k}", n.0);
            }
            let most = opened.div_ceil(1 << 18);
            assert!(landed <= most, "win {win} offset {offset}: {landed} of the sweep taken");
            // The real stream, acknowledged as it arrives: out of order only
            // until it passes the sweep's furthest byte taken.
            let mut out_of_order = 0;
            let n = opened / 1448 + 8;
            for i in 0..n {
                let t = Tcp::data(false, Port::Outer, ISN + i * 1448, 1448);
                let in_order = with_seg(&t, |s| !c.is_foreign(s) && c.advance_inbound(s));
                out_of_order += !in_order as u32;
                let mut ack = Tcp::data(false, Port::Inner, 8, 0);
                ack.ack = ISN + (i + 1) * 1448;
                ack.window = win;
                from_inside(&mut c, &ack);
            }
            let behind = c.next_in.unwrap().0.wrapping_sub(ISN);
            assert_eq!(behind, n * 1448, "win {win}: the stream is where the real data ends");
            assert!(out_of_order * 1448 <= opened + 1448, "win {win}: {out_of_order} out of order");
            assert!(out_of_order <= landed * (opened / 1448 + 1), "win {win}: {out_of_order} out of order");
        }
    }

    /// Before the inner host's first ACK on the flow entry, the expected
    /// sequence moves only with data that joins it: a segment ahead with a
    /// hole does not carry it (and what is more than 256 KiB away is
    /// foreign).
    #[test]
    fn without_the_inner_hosts_window_the_stream_moves_only_without_a_hole() {
        let mut c = Conn::default();
        assert!(from_outside(&mut c, &Tcp::data(false, Port::Outer, ISN, 100)));
        assert!(from_outside(&mut c, &Tcp::data(false, Port::Outer, ISN + 5000, 1)));
        assert_eq!(c.next_in, Some(SeqNumber(ISN + 100)), "a segment beyond a hole does not move it");
        assert!(!from_outside(&mut c, &Tcp::data(false, Port::Outer, ISN + (300 << 10), 1)), "foreign");
        assert!(from_outside(&mut c, &Tcp::data(false, Port::Outer, ISN + 50, 200)));
        assert_eq!(c.next_in, Some(SeqNumber(ISN + 250)), "overlapping data moves it");
        let mut ack = Tcp::data(false, Port::Inner, 8, 0);
        ack.ack = ISN + 250;
        ack.window = 10_000;
        from_inside(&mut c, &ack);
        assert_eq!(c.receiver, Some(ReceiveWindow { end: ISN + 250 + (10_000 << MAX_SHIFT), max_win: 10_000 << 14 }));
    }

    /// The inner host's windows are scaled by its own option only if both
    /// SYNs carried one (RFC 7323 §2.2); a SYN-ACK's window never is.
    #[test]
    fn the_inner_hosts_window_is_scaled_as_the_handshake_agreed() {
        let h = |inner, outer| Handshake { inner_scale: inner, outer_scale: outer, ..Handshake::default() };
        assert_eq!(h(Scale::Shift(7), Scale::Shift(2)).inner_shift(), Some(7));
        assert_eq!(h(Scale::Shift(20), Scale::Shift(0)).inner_shift(), Some(14), "RFC 7323 §2.3: at most 14");
        assert_eq!(h(Scale::Shift(7), Scale::Absent).inner_shift(), Some(0));
        assert_eq!(h(Scale::Absent, Scale::Unseen).inner_shift(), Some(0));
        assert_eq!(h(Scale::Shift(7), Scale::Unseen).inner_shift(), None);
        let c = connection(1000);
        assert_eq!(c.receiver.map(|r| r.end), Some(ISN + (1000 << 7)));
    }

    /// An RST from outside at exactly the gateway's expected sequence ends
    /// nothing (the gateway's expectation is not the end host's secret); a
    /// later SYN from outside passes untouched and starts a connection only
    /// when the inner host answers it with a SYN-ACK.
    #[test]
    fn an_rst_from_outside_alone_never_makes_a_later_syn_a_new_connection() {
        let mut c = connection(1024);
        assert!(from_outside(&mut c, &Tcp::data(false, Port::Outer, ISN, 1000)));
        let mut rst = Tcp::data(false, Port::Outer, ISN + 1000, 0);
        rst.flags = flags::RST;
        assert!(from_outside(&mut c, &rst));
        assert!(!c.life.ended() && c.life.established);
        let mut syn = Tcp::data(false, Port::Outer, 0x1234_5678, 0);
        syn.flags = flags::SYN;
        let taken = with_seg(&syn, |s| c.on_syn(s, Port::Outer, Some(48), Scale::Absent));
        assert_eq!(taken, Syn::Ignored);
        assert_eq!(c.handshake.outer_mss, Some(1460), "the MSS of the live connection stays");
        // The inner host answers with a challenge ACK: nothing changes.
        let mut challenge = Tcp::data(false, Port::Inner, 8, 0);
        challenge.ack = ISN + 1000;
        assert_eq!(from_inside(&mut c, &challenge), None);
        assert_eq!(c.handshake.outer_mss, Some(1460));
        // A SYN-ACK of another SYN is no answer to it.
        let mut other = Tcp::data(false, Port::Inner, 900, 0);
        other.flags = flags::SYN | flags::ACK;
        other.ack = 0x1234_0000;
        assert_eq!(from_inside(&mut c, &other), Some(Syn::Ignored));
        // The inner host answers it with a SYN-ACK: its old connection is
        // gone, the new one starts with that SYN.
        let mut sa = Tcp::data(false, Port::Inner, 900, 0);
        sa.flags = flags::SYN | flags::ACK;
        sa.ack = 0x1234_5679;
        sa.window = 64_000;
        assert_eq!(from_inside(&mut c, &sa), Some(Syn::Taken { restart: true }));
        assert_eq!(c.handshake.outer_mss, Some(48));
        assert_eq!(c.next_in, Some(SeqNumber(0x1234_5679)));
        assert_eq!(c.receiver, Some(ReceiveWindow { end: 0x1234_5679 + 64_000, max_win: 64_000 }));
        assert!(!c.life.established && c.life.syn_outer == Some(0x1234_5678));
        assert_eq!(c.handshake.inner_shift(), Some(0), "the SYN had no window scale");
    }

    /// What no one can stop is a spoofed SYN that arrives before the real
    /// client's first: the gateway takes it, and ignores the client's. The
    /// inner host answers the client with an ACK, the client resets (an RST
    /// from outside, which ends nothing for the gateway) and sends its SYN
    /// again; the inner host answers that one with a SYN-ACK, and the
    /// gateway takes the client's connection then.
    #[test]
    fn a_spoofed_syn_before_the_clients_is_overcome_when_the_inner_host_answers_the_client() {
        let mut c = Conn::default();
        let mut spoofed = Tcp::data(false, Port::Outer, 0x0bad_0000, 0);
        spoofed.flags = flags::SYN;
        assert!(from_outside(&mut c, &spoofed));
        let mut sa = Tcp::data(false, Port::Inner, 7, 0);
        sa.flags = flags::SYN | flags::ACK;
        sa.ack = 0x0bad_0001;
        from_inside(&mut c, &sa);
        let mut syn = Tcp::data(false, Port::Outer, ISN - 1, 0);
        syn.flags = flags::SYN;
        assert!(!from_outside(&mut c, &syn), "the client's SYN is ignored during the spoofed handshake");
        let mut challenge = Tcp::data(false, Port::Inner, 8, 0);
        challenge.ack = 0x0bad_0001;
        from_inside(&mut c, &challenge);
        let mut rst = Tcp::data(false, Port::Outer, 0x0bad_0001, 0);
        rst.flags = flags::RST;
        from_outside(&mut c, &rst);
        assert!(!from_outside(&mut c, &syn), "the retried SYN alone starts nothing");
        let mut sa = Tcp::data(false, Port::Inner, 5000, 0);
        sa.flags = flags::SYN | flags::ACK;
        sa.ack = ISN;
        assert_eq!(from_inside(&mut c, &sa), Some(Syn::Taken { restart: true }));
        assert_eq!((c.life.syn_outer, c.next_in), (Some(ISN - 1), Some(SeqNumber(ISN))));
        assert_eq!(c.handshake.outer_mss, Some(1460));
    }

    /// An RST from the inner host ends the connection: the next SYN from
    /// outside starts one at once.
    #[test]
    fn an_rst_from_inside_ends_the_connection() {
        let mut c = connection(1024);
        let mut rst = Tcp::data(false, Port::Inner, 8, 0);
        rst.flags = flags::RST | flags::ACK;
        from_inside(&mut c, &rst);
        assert!(c.life.ended());
        let mut syn = Tcp::data(false, Port::Outer, 0x1234_5678, 0);
        syn.flags = flags::SYN;
        assert!(from_outside(&mut c, &syn));
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
