//! Learning path MTUs from ICMP "fragmentation needed" / "packet too big",
//! validated as RFC 5927 advises, since anyone can send one: an error that
//! lowered the size toward a destination on trust would let one spoofed
//! packet cut every connection to it to small segments.
//!
//! An error is learned only if
//! - its checksum verifies,
//! - the packet it quotes is TCP of a flow this gateway carries (4-tuple),
//!   with a sequence number inside that flow's window in the quoted
//!   direction, between the oldest unacknowledged byte and the end of the
//!   newest data forwarded (RFC 5927 §4.1; Linux `tcp_v4_err` checks the
//!   same, SND.UNA..SND.NXT);
//! - the reported MTU is below the size of the quoted packet (RFC 5927
//!   §4.2: a router reports a smaller MTU than the packet it refused);
//! - a second such error toward the same destination, quoting another
//!   sequence number, confirms it within a few seconds (beyond RFC 5927:
//!   a blind guess passes the window check once in 2^32 / W tries for a
//!   window of W bytes, which a hostile-traffic lab test hit; two
//!   independent hits are needed now; `PmtuReplica::confirm`);
//! - and the flow has not had its checks this second: a flow's windows are
//!   checked for at most `ICMP_CHECKS_PER_SEC` errors a second, so that a
//!   flood of guesses cannot buy two hits while a stalled flow has
//!   megabytes in flight (the same lab test, later, learned 552 that way).
//!
//! An error reaches the worker its own addresses hash to, not necessarily
//! the one that carries the quoted flow: one that quotes a flow this
//! engine does not carry is passed to the other workers through the shared
//! cache (`crate::pmtu`), and the one that carries it validates it.
//!
//! Values below the minimum are clamped (Linux `min_pmtu`: 552 for IPv4;
//! RFC 8201 §4: 1280 for IPv6), never taken.
//!
//! Only TCP is learned. The gateway sizes TCP itself (it cuts outbound
//! segments, merges inbound ones), so it must know the path; UDP, ICMP and
//! everything else it forwards intact (fragmenting only as a router does),
//! and the error is forwarded to the sender, whose own stack validates it
//! against its sockets and sizes its datagrams (RFC 8085 §3.2). A gateway
//! table of recent UDP 4-tuples would validate little (UDP carries no
//! sequence number, so any off-path sender who knows a QUIC server's
//! address and port could still pass it) and would add a table to bound.
//!
//! An error about TCP (checksum verified) is the gateway's alone: learned
//! or not, it is never passed to the host it is addressed to. The gateway
//! sizes every TCP packet it passes toward that path: it cuts plain
//! segments to the path MTU, and a signed (MD5/AO) segment too big for it
//! gets the gateway's own error, with the MTU the gateway validated. Passed
//! on, an error would make the host shrink its segments inside the
//! large-MTU network, which the gateway exists to avoid, and it would hand
//! the host every blind guess: a host believes one error whose sequence
//! number falls in its window (RFC 5927 §4.1, Linux `tcp_v4_err`), where
//! the gateway waits for a second. A spoofed error quoting a random guess
//! in a sender's window cut a live flow to 576-byte segments that way in
//! the hostile-traffic lab test, under load. This rests on what the whole
//! gateway rests on: it carries both directions of its network's
//! connections. A border where a host's packets leave by another exit but
//! the errors about them come back through the gateway would need those
//! errors passed on; the gateway does not support such routing (its MSS
//! rewrites and merges would not hold there either).
//!
//! Errors arrive on either port: from the outer side about packets the
//! gateway sent toward outside (the eMTU path), and from routers of the
//! b-network about packets toward inner hosts (the iMTU path); each is
//! learned for that direction.

use std::time::Instant;

use px_wire::checksum::Sum;
use px_wire::icmp::{self, IcmpMessage};
use px_wire::ipv6::next_header;
use px_wire::{FrameInfo, IpVersion};

use super::Engine;
use crate::flow::FlowKey;
use crate::pmtu::Candidate;
use crate::port::Port;
use crate::router::{MIN_PMTU_V4, MIN_PMTU_V6};

impl Engine {
    /// An ICMP message that arrived on `from`: if it is a valid "too big"
    /// about a packet of ours toward `from`, the path MTU in that direction.
    /// Returns whether the message is a "too big" about TCP (checksum
    /// verified), which the gateway takes instead of passing it on (module
    /// docs), whatever it learned from it.
    pub(crate) fn learn_pmtu(&mut self, now: Instant, from: Port, frame: &[u8], info: &FrameInfo) -> bool {
        let Ok(m) = IcmpMessage::new_checked(&frame[info.l4..info.end]) else { return false };
        let (mtu, floor, checksum_ok) = match info.version {
            IpVersion::V4 => match m.v4_next_hop_mtu() {
                Some(mtu) => (mtu as u32, MIN_PMTU_V4, m.verify_checksum(Sum(0))),
                None => return false,
            },
            IpVersion::V6 => match m.v6_mtu() {
                Some(mtu) => {
                    let pseudo = info.pseudo_header(frame, next_header::ICMPV6, info.end - info.l4);
                    (mtu, MIN_PMTU_V6, m.verify_checksum(pseudo))
                }
                None => return false,
            },
        };
        if !checksum_ok {
            self.counters.pmtu_ignored += 1;
            return false;
        }
        // As the host it is addressed to would read the quote: whatever the
        // host would take for TCP is judged here, as a well-formed one is.
        let Ok(q) = icmp::parse_quoted_as_host(m.quoted(), info.version == IpVersion::V6) else {
            self.counters.pmtu_ignored += 1;
            return false;
        };
        let (Some((sport, dport)), Some(seq), next_header::TCP) = (q.ports, q.tcp_seq, q.protocol) else {
            self.counters.pmtu_ignored += 1;
            return false;
        };
        self.counters.pmtu_taken += 1;
        // Judged on the value reported, then clamped.
        let refused = (mtu as usize) < q.ip_len;
        let mtu = (mtu.min(u16::MAX as u32) as u16).max(floor);
        if !refused || mtu >= self.egress_limit(from) {
            // Not smaller than what it refused, or nothing to learn.
            self.counters.pmtu_ignored += 1;
            return true;
        }
        // The quoted packet went out of the port the error came in on.
        let key = FlowKey::of_direction(from.other(), q.src, q.dst, sport, dport);
        let c = Candidate { to: from, key, seq, dst: q.dst, mtu };
        match self.in_window(&c, now) {
            Some(true) => self.learn_candidate(now, &c),
            None if self.pmtu.shared().has_peers() && self.pmtu.proposals.allow(now) => {
                // Perhaps another worker's flow: it validates when it next looks.
                self.pmtu.shared().propose(c);
                self.counters.pmtu_passed_on += 1;
            }
            _ => self.counters.pmtu_ignored += 1,
        }
        true
    }

    /// Whether this engine carries the candidate's flow (`None` if not),
    /// and if so whether the quoted sequence number lies in its window;
    /// `false` without looking once the flow had its checks this second
    /// ([`crate::conntrack::ICMP_CHECKS_PER_SEC`]).
    fn in_window(&mut self, c: &Candidate, now: Instant) -> Option<bool> {
        let idx = self.flows.peek(&c.key)?;
        if self.flows.get(idx).is_some_and(|f| f.fast.in_kernel() && f.conn.windows.checks.would_allow(now)) {
            // Its windows moved in the kernel: current before the check
            // (read, not withdrawn: the error may be a guess; if it is
            // learned, a smaller path MTU takes the flow back).
            self.catch_up_with_kernel(idx);
        }
        let f = self.flows.get_mut(idx)?;
        Some(
            f.conn.windows.checks.allow(now)
                && match c.to {
                    Port::Outer => f.conn.windows.seq_out.contains(c.seq),
                    Port::Inner => f.conn.windows.seq_in.contains(c.seq),
                },
        )
    }

    /// Learns `c` once a second in-window error confirms it
    /// ([`crate::pmtu::PmtuReplica::confirm`]).
    fn learn_candidate(&mut self, now: Instant, c: &Candidate) {
        let Some(mtu) = self.pmtu.confirm(c, now) else {
            self.counters.pmtu_unconfirmed += 1;
            return;
        };
        if self.pmtu.learn(c.to, c.dst, mtu, now) {
            self.counters.pmtu_learned += 1;
            self.reclaim_resized(now);
        }
    }

    /// Catches up with what the other workers learned, and validates what
    /// they passed on: one atomic load when nothing changed.
    #[inline]
    pub(crate) fn sync_pmtu(&mut self, now: Instant) {
        if self.pmtu.behind() {
            self.catch_up_pmtu(now);
        }
    }

    #[cold]
    fn catch_up_pmtu(&mut self, now: Instant) {
        let mut cands = std::mem::take(&mut self.pmtu.candidates);
        self.pmtu.catch_up(&mut cands);
        for c in &cands {
            if self.in_window(c, now) == Some(true) {
                self.learn_candidate(now, c);
            }
        }
        cands.clear();
        self.pmtu.candidates = cands;
        // What another worker learned may shrink this one's flows too.
        self.reclaim_resized(now);
    }
}
