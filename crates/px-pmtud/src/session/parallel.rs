//! Parallel probing: the path MTU in two or three round trips on any path
//! (IPv6, ICMP black holes and fragment filters included), for a
//! measurement tool and for a transport's *first* search. The in-band
//! search a transport keeps running (RFC 8899 PROBE_TIMER, MAX_PROBES,
//! black-hole detection) stays [`super::DplpmtudSession`] /
//! [`crate::dplpmtud::Dplpmtud`].
//!
//! Each round sends DF-set probes of several sizes back to back, largest
//! first, and last a small *control* probe (the IP version's minimum MTU,
//! which every path carries). The responder acknowledges each probe by
//! size (a confirming report echoing the probe id). The control's answer,
//! coming back over the same path, closes the round without a timer:
//! every larger probe that survived has been answered by then, so each
//! unanswered one is taken as too big (a validated ICMP "too big" says so
//! at once and names the bottleneck's MTU). Only a lost control costs a
//! timer (the PTO, floored at the probe timer); the round is then sent
//! again, at most MAX_PROBES times.
//!
//! Round 1 probes the bounds of the search (the link MTU; the control is
//! the lower bound) and the common MTUs between them ([`CANDIDATES`]). With
//! `fragment_hint` (IPv4), a DF-clear F-PMTUD probe of the link MTU goes
//! first: its report's largest fragment `L` is a size the path carried and
//! puts the path MTU within `L ..= L + 7`. Later rounds refine the
//! interval `(lo, hi]` left (`lo` the largest size acknowledged, `hi` the
//! largest not shown too big): every size when few are left, else evenly
//! spaced sizes (enough that the next round can take every size). The
//! size `lo + 1` is always sent twice: the answer is **exact** only when
//! `lo` was acknowledged and `lo + 1` is too big by evidence, not by one
//! chance loss — two unanswered probes, a validated ICMP "too big", or
//! above the cap (the link MTU, the responder's link MTU).
//!
//! Typical cost: on a path whose MTU is one of the common sizes, two round
//! trips (round 1 finds it, round 2 shows `lo + 1` too big); with the
//! fragment hint also for any other IPv4 path MTU; elsewhere three. Where a
//! validated ICMP "too big" names the bottleneck's MTU, round 2 probes that
//! size alone (twice), which the PTB above it makes exact.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::{
    Df, Measurement, ProbeDatagram, REFUSED, Session, SessionConfig, SessionError, TooBig, UNAUTHENTICATED,
    confirm_probe, unreachable_grace,
};
use crate::dplpmtud::MAX_PROBES;
use crate::fpmtud::wire::{self, ProbeKind, ProbeRepr, Reply};
use crate::rtt::{ClassicRtt, RttEstimator, RttSample};

/// Round-1 sizes besides the bounds, those strictly between the minimum
/// and the link MTU: RFC 1191's plateau table (296, 508, 1006, 1492, 2002,
/// 4352, 8166; RFC 8899 §5.1.2 lets a PL probe such common sizes), 576
/// (the classic IPv4 datagram every host accepts), 1280 (IPv6 minimum,
/// many tunnels clamp to it), 1400 / 1420 / 1450 / 1460 / 1480 (tunnels:
/// GRE, WireGuard 1420, VXLAN 1450, IPsec, 6in4 1480), 1492 (PPPoE), 1500
/// (Ethernet), 4000 / 8000 / 9000 (jumbo frames; 9000 the data-centre
/// default). lsquic's search starts at the largest size (the link MTU):
/// here it is one of round 1's probes, and so is every size above.
/// 2500 … 7000 only keep the gaps between jumbo sizes small enough for a
/// third round to end the search: no gap is wider than
/// [`MAX_ROUND_SIZES`] × [`ALL_SIZES_UP_TO`] = 1024 bytes, so the second
/// round's evenly spaced sizes leave at most [`ALL_SIZES_UP_TO`] sizes.
pub const CANDIDATES: [u16; 24] = [
    296, 508, 576, 1006, 1280, 1400, 1420, 1450, 1460, 1480, 1492, 1500, 2002, 2500, 3000, 3500, 4000, 4352, 5000,
    6000, 7000, 8000, 8166, 9000,
];

/// A refinement round probes every size left, each twice, when there are
/// at most this many (two unanswered probes make "too big" evidence, so
/// the round that finds the path MTU also proves it exact); else evenly
/// spaced sizes, enough that the window left is at most this wide.
pub const ALL_SIZES_UP_TO: u16 = 16;

/// Most sizes in one refinement round.
pub const MAX_ROUND_SIZES: u16 = 64;

/// A probe of the current round.
#[derive(Debug, Clone, Copy)]
struct Sent {
    id: u32,
    size: u16,
    df: Df,
    at: Instant,
    answered: bool,
    /// The local stack refused it: it never left the host.
    refused: bool,
}

/// Parallel-probing session.
#[derive(Debug)]
pub struct ParallelSession {
    nonce: u64,
    overhead: u16,
    min: u16,
    link_mtu: u16,
    /// Upper bound from the responder's link MTU (its reports).
    responder_mtu: Option<u16>,
    probe_timer: Duration,
    legacy_ok: bool,
    fragment_hint: bool,
    rtt: ClassicRtt,
    start: Instant,
    hard: Instant,
    /// Largest size acknowledged (or carried as a fragment).
    lo: Option<u16>,
    /// Largest size not shown too big.
    hi: u16,
    /// The fragment report's `L + 7`: where the path MTU must be if `L` is
    /// a maximal fragment (a hint, checked by probing `L + 8`).
    hint_hi: Option<u16>,
    /// Unanswered DF-set probes per size, over the measurement.
    losses: BTreeMap<u16, u8>,
    /// A validated ICMP "too big" showed every size above this too big.
    ptb_hi: Option<u16>,
    round: Vec<Sent>,
    control: Option<u32>,
    pending: Vec<(u16, Df)>,
    next_id: u32,
    rounds: u32,
    /// Rounds whose control was lost in a row.
    retries: u8,
    deadline: Option<Instant>,
    refused_deadline: Option<Instant>,
    probes: u32,
    ptbs: u32,
    legacy_used: bool,
    hint_used: bool,
    done: Option<Measurement>,
}

impl ParallelSession {
    /// A measurement starting at `now`; `nonce` is its secret. With
    /// `fragment_hint` (IPv4 only) round 1 also carries a DF-clear F-PMTUD
    /// probe. `lower_bound`: a size already known to pass, if any.
    pub fn new(
        cfg: &SessionConfig,
        nonce: u64,
        fragment_hint: bool,
        lower_bound: Option<u16>,
        now: Instant,
    ) -> Result<Self, SessionError> {
        let min = cfg.min_mtu();
        if cfg.link_mtu < min {
            return Err(SessionError::LinkMtuBelowMinimum { link_mtu: cfg.link_mtu, min });
        }
        if fragment_hint && cfg.ipv6 {
            return Err(SessionError::FpmtudNeedsIpv4);
        }
        let mut s = ParallelSession {
            nonce,
            overhead: cfg.overhead(),
            min,
            link_mtu: cfg.link_mtu,
            responder_mtu: None,
            probe_timer: cfg.probe_timer,
            legacy_ok: cfg.accept_legacy || cfg.legacy,
            fragment_hint,
            rtt: ClassicRtt::new(cfg.initial_rtt),
            start: now,
            hard: now + cfg.timeout,
            lo: lower_bound.map(|l| l.clamp(min, cfg.link_mtu)),
            hi: cfg.link_mtu,
            hint_hi: None,
            losses: BTreeMap::new(),
            ptb_hi: None,
            round: Vec::new(),
            control: None,
            pending: Vec::new(),
            next_id: 1,
            rounds: 0,
            retries: 0,
            deadline: None,
            refused_deadline: None,
            probes: 0,
            ptbs: 0,
            legacy_used: false,
            hint_used: false,
            done: None,
        };
        s.queue_first_round();
        Ok(s)
    }

    /// Largest size the path may carry.
    fn cap(&self) -> u16 {
        let mut c = self.link_mtu.min(self.responder_mtu.unwrap_or(u16::MAX));
        if let Some(p) = self.ptb_hi {
            c = c.min(p);
        }
        c.max(self.lo.unwrap_or(0))
    }

    /// `size` is too big by evidence: above the cap (or a PTB), or two
    /// DF-set probes of it went unanswered.
    fn shown_too_big(&self, size: u16) -> bool {
        size > self.cap() || self.losses.get(&size).is_some_and(|&n| n >= 2)
    }

    fn queue_first_round(&mut self) {
        let lo = self.lo.unwrap_or(self.min);
        let mut sizes: BTreeSet<u16> = CANDIDATES.iter().copied().filter(|&c| c > lo && c < self.link_mtu).collect();
        if self.link_mtu > lo {
            sizes.insert(self.link_mtu);
        }
        self.pending.clear();
        if self.fragment_hint {
            self.pending.push((self.link_mtu, Df::Clear));
        }
        self.pending.extend(sizes.iter().rev().map(|&s| (s, Df::Probe)));
        if self.pending.is_empty() {
            // Nothing between the bounds: the control alone shows `lo`.
            self.pending.push((self.min, Df::Probe));
        }
    }

    /// Sizes for the next refinement round over `(lo, hi]`, largest first.
    fn refinement(&self) -> Vec<u16> {
        let lo = self.lo.unwrap_or(self.min);
        let mut hi = self.hi.min(self.cap());
        if let Some(h) = self.hint_hi {
            // The hint's sentinel `L + 8` is probed too: if it passes, the
            // hint was wrong (equal-split fragments) and the search goes on.
            hi = hi.min(h.saturating_add(1));
        }
        // A validated "too big" named the bottleneck's MTU (RFC 1191): that
        // size alone, twice (one loss is no evidence). If the path carries
        // it, the PTB above it makes the answer exact in this round; if
        // both go unanswered, the next round refines below it as usual.
        if let Some(p) = self.ptb_hi.filter(|&p| p == hi && p > lo && !self.losses.contains_key(&p)) {
            return vec![p, p];
        }
        let mut once = BTreeSet::new();
        let mut twice = BTreeSet::new();
        let n = hi.saturating_sub(lo);
        if n <= ALL_SIZES_UP_TO {
            twice.extend(lo + 1..=hi);
        } else {
            // Evenly spaced sizes; the window left after them is at most
            // ALL_SIZES_UP_TO wide (up to MAX_ROUND_SIZES sizes).
            let k = n.div_ceil(ALL_SIZES_UP_TO).clamp(ALL_SIZES_UP_TO, MAX_ROUND_SIZES);
            for i in 1..=k {
                let s = u32::from(lo) + u32::from(n) * u32::from(i) / u32::from(k);
                once.insert(u16::try_from(s).unwrap_or(hi));
            }
            twice.insert(lo + 1);
        }
        // The size just above `hi` where `hi` rests on one loss: again, to
        // tell a chance loss from "too big".
        for s in [lo + 1, self.hi.saturating_add(1)] {
            if s <= self.cap() && !self.shown_too_big(s) && self.losses.contains_key(&s) {
                twice.insert(s);
            }
        }
        twice.retain(|&s| s <= self.cap() && !self.shown_too_big(s));
        once.retain(|s| !twice.contains(s));
        let mut all: Vec<u16> = once.into_iter().chain(twice.iter().copied()).chain(twice.iter().copied()).collect();
        all.sort_unstable_by(|a, b| b.cmp(a));
        all
    }

    /// A "too big" that came back while this round is still going out
    /// (its control not yet sent) and named an MTU: that size joins the
    /// round, in its place among the sizes still queued, so that a path
    /// that carries it is exact in this round trip instead of the next.
    fn probe_named_size_now(&mut self, named: u16) {
        let (queued, sent) = (&self.pending, &self.round);
        if self.control.is_some()
            || queued.is_empty()
            || self.lo.is_some_and(|lo| named <= lo)
            || queued.iter().any(|&(s, df)| s == named && df == Df::Probe)
            || sent.iter().any(|s| s.size == named && s.df == Df::Probe)
        {
            return;
        }
        let at = queued.iter().position(|&(s, _)| s < named).unwrap_or(queued.len());
        self.pending.insert(at, (named, Df::Probe));
    }

    fn take_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        id
    }

    fn datagram(&mut self, now: Instant, size: u16, df: Df) -> ProbeDatagram {
        let id = self.take_id();
        self.probes += 1;
        self.rtt.on_packet_sent(u64::from(id));
        self.round.push(Sent { id, size, df, at: now, answered: false, refused: false });
        if df == Df::Clear {
            let mut payload = vec![0u8; usize::from(size.saturating_sub(self.overhead))];
            let _ =
                ProbeRepr { kind: ProbeKind::Probe, nonce: self.nonce, probe_id: id, ip_len: size }.emit(&mut payload);
            ProbeDatagram { size, df, payload }
        } else {
            confirm_probe(self.nonce, id, size, self.overhead, df)
        }
    }

    /// Round timer: the PTO, at least the probe timer, doubled per retry.
    fn round_timeout(&self) -> Duration {
        let base = self.rtt.pto(Duration::ZERO).max(self.probe_timer);
        base.saturating_mul(1 << self.retries.min(8))
    }

    fn sample(&mut self, now: Instant, idx: usize) {
        let s = &mut self.round[idx];
        s.answered = true;
        self.rtt.on_ack(RttSample {
            latest_rtt: now.saturating_duration_since(s.at),
            ack_delay: Duration::ZERO,
            acked_packet_number: u64::from(s.id),
        });
    }

    fn acked(&mut self, size: u16) {
        self.lo = Some(self.lo.map_or(size, |l| l.max(size)));
        if self.hi < size {
            // A size taken for too big after a chance loss passed after all.
            self.hi = self.cap();
        }
    }

    /// The round is over: the control came back (`complete`), or its timer
    /// fired.
    fn end_round(&mut self, now: Instant, complete: bool) {
        self.deadline = None;
        self.control = None;
        let round = std::mem::take(&mut self.round);
        if complete {
            self.retries = 0;
            for s in round.iter().filter(|s| !s.answered && !s.refused && s.df == Df::Probe) {
                if self.lo.is_none_or(|lo| s.size > lo) {
                    *self.losses.entry(s.size).or_insert(0) += 1;
                    self.hi = self.hi.min(s.size - 1);
                }
            }
        } else {
            self.retries += 1;
        }
        self.hi = self.hi.min(self.cap()).max(self.lo.unwrap_or(0));
        if let Some(lo) = self.lo
            && (lo >= self.cap() || self.shown_too_big(lo + 1))
        {
            return self.finish(now, true, "");
        }
        if self.retries >= MAX_PROBES {
            let note = if self.lo.is_some() { "round answered but its control lost" } else { "no answer" };
            return self.finish(now, false, note);
        }
        if self.lo.is_none() && !complete {
            // Nothing answered yet: the first round again.
            self.queue_first_round();
        } else {
            self.pending = self.refinement().into_iter().map(|s| (s, Df::Probe)).collect();
            if self.pending.is_empty() {
                // Nothing left worth probing (cannot happen while `lo + 1`
                // is undecided; a guard against a round of the control alone).
                self.finish(now, false, "search ended undecided");
            }
        }
    }

    fn finish(&mut self, now: Instant, exact: bool, why: &str) {
        self.deadline = None;
        self.pending.clear();
        let pmtu = self.lo.filter(|_| self.rounds > 0 || exact);
        let high = pmtu.map(|p| if exact { p } else { self.hi.max(p) });
        let mut note = if exact {
            let how = if self.lo.is_some_and(|lo| lo >= self.cap()) {
                if self.ptb_hi.is_some_and(|p| Some(p) == self.lo) {
                    "ICMP too big above it"
                } else {
                    "at the link's or the responder's MTU"
                }
            } else {
                "one byte more went unanswered twice"
            };
            let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
            format!(
                "{} of parallel DF probes ({}, {}): {how}",
                plural(self.rounds as usize, "round", "rounds"),
                plural(self.probes as usize, "probe", "probes"),
                plural(self.ptbs as usize, "PTB hint", "PTB hints")
            )
        } else {
            why.to_owned()
        };
        if self.hint_used {
            note = format!("fragment report + {note}");
        }
        if self.legacy_used && pmtu.is_some() {
            note = format!("{note}; {UNAUTHENTICATED}");
        }
        self.done = Some(Measurement {
            method: if self.hint_used { "fpmtud+parallel" } else { "parallel" }.into(),
            pmtu,
            exact: exact && pmtu.is_some(),
            pmtu_high: high,
            round_trips: self.rounds,
            probes: self.probes,
            elapsed: now - self.start,
            link_mtu: self.link_mtu,
            note,
            authenticated: !self.legacy_used,
        });
    }

    fn on_report(&mut self, now: Instant, r: &wire::ReportRepr<'_>) {
        if r.nonce != self.nonce {
            return;
        }
        let Some(idx) = self.round.iter().position(|s| s.id == r.probe_id && !s.answered) else { return };
        let sent = self.round[idx];
        if r.probe_ip_len != sent.size || r.largest_ip_len > sent.size || r.largest_ip_len < self.min.min(68) {
            return;
        }
        if r.link_mtu >= self.min && r.link_mtu >= self.lo.unwrap_or(0) {
            self.responder_mtu = Some(self.responder_mtu.map_or(r.link_mtu, |m| m.min(r.link_mtu)));
        }
        self.sample(now, idx);
        match sent.df {
            Df::Clear => {
                let largest = r.fragments.iter().map(|f| f.ip_len).chain([r.largest_ip_len]).max().unwrap_or(0);
                self.hint_used = true;
                self.acked(largest);
                if largest < sent.size {
                    self.hint_hi = Some(largest.saturating_add(7));
                }
            }
            _ => {
                if !r.confirm || r.fragmented || largest_is_not(r, sent.size) {
                    return;
                }
                self.acked(sent.size);
            }
        }
        self.after_answer(now, sent.id);
    }

    fn on_legacy(&mut self, now: Instant, v: u32) {
        if !self.legacy_ok {
            return;
        }
        let Ok(v) = u16::try_from(v) else { return };
        // No probe id: a DF-set probe of that size, else the DF-clear probe.
        let idx = self
            .round
            .iter()
            .position(|s| !s.answered && s.df == Df::Probe && s.size == v)
            .or_else(|| self.round.iter().position(|s| !s.answered && s.df == Df::Clear && v <= s.size));
        let Some(idx) = idx else { return };
        if v < self.min.min(68) {
            return;
        }
        self.legacy_used = true;
        let sent = self.round[idx];
        self.sample(now, idx);
        self.acked(v);
        if sent.df == Df::Clear {
            self.hint_used = true;
            if v < sent.size {
                self.hint_hi = Some(v.saturating_add(7));
            }
        }
        self.after_answer(now, sent.id);
    }

    fn after_answer(&mut self, now: Instant, id: u32) {
        self.refused_deadline = None;
        if self.control == Some(id) {
            self.end_round(now, true);
        } else if self.lo.is_some_and(|lo| lo >= self.cap()) {
            // Nothing larger can pass: no need to wait for the control.
            self.round.clear();
            self.end_round(now, true);
        }
    }
}

/// A confirmation that did not arrive whole at its size confirms nothing.
fn largest_is_not(r: &wire::ReportRepr<'_>, size: u16) -> bool {
    r.largest_ip_len != size || !r.reassembled
}

impl Session for ParallelSession {
    fn poll_transmit(&mut self, now: Instant) -> Option<ProbeDatagram> {
        if self.done.is_some() {
            return None;
        }
        if now >= self.hard {
            self.finish(now, false, "timed out");
            return None;
        }
        // What came back while the round was being sent (a driver reads
        // between sends) may already decide some of its sizes: a "too big"
        // lowered the cap, an answer raised `lo`. Those are not sent.
        while let Some(&(size, Df::Probe)) = self.pending.first() {
            if size <= self.cap() && self.lo.is_none_or(|lo| size > lo) {
                break;
            }
            self.pending.remove(0);
        }
        if !self.pending.is_empty() {
            let (size, df) = self.pending.remove(0);
            if self.round.is_empty() {
                self.rounds += 1;
            }
            return Some(self.datagram(now, size, df));
        }
        if self.control.is_none() && !self.round.is_empty() {
            // The control closes the round.
            let d = self.datagram(now, self.min, Df::Probe);
            self.control = self.round.last().map(|s| s.id);
            self.deadline = Some(now + self.round_timeout());
            return Some(d);
        }
        None
    }

    fn on_local_refused(&mut self, _now: Instant, _known_pmtu: Option<u16>) {
        // Nothing left the host: its silence proves nothing.
        if let Some(last) = self.round.last_mut() {
            last.refused = true;
            self.probes = self.probes.saturating_sub(1);
        }
    }

    fn on_datagram(&mut self, now: Instant, bytes: &[u8]) {
        if self.done.is_some() {
            return;
        }
        match wire::parse_reply(bytes) {
            Ok(Reply::Report(r)) => self.on_report(now, &r),
            Ok(Reply::Legacy(v)) => self.on_legacy(now, v),
            Err(_) => {}
        }
    }

    /// A validated PTB (RFC 8899 §4.6.1: it quotes one of our probes with
    /// our nonce) shows the quoted size too big and bounds the path MTU by
    /// the MTU it announces.
    fn on_icmp_too_big(&mut self, _now: Instant, ptb: TooBig<'_>) {
        if self.done.is_some() || !ptb.from_network {
            return;
        }
        let Ok(wire::Request::Probe(p)) = wire::parse_request(ptb.quoted) else { return };
        if p.nonce != self.nonce || !self.round.iter().any(|s| s.id == p.probe_id && s.df == Df::Probe) {
            return;
        }
        self.ptbs += 1;
        let announced = u16::try_from(ptb.mtu).unwrap_or(u16::MAX);
        // An announced MTU that is not below the probe is no evidence of
        // anything but the probe being too big.
        let named = announced >= self.min && announced < p.ip_len;
        let bound = if named { announced } else { p.ip_len - 1 };
        if bound >= self.lo.unwrap_or(0) {
            self.ptb_hi = Some(self.ptb_hi.map_or(bound, |b| b.min(bound)));
            self.hi = self.hi.min(bound);
            if named {
                self.probe_named_size_now(bound);
            }
        }
    }

    fn on_unreachable(&mut self, now: Instant) {
        if self.done.is_some() || self.lo.is_some() || self.refused_deadline.is_some() {
            return;
        }
        self.refused_deadline = Some(now + unreachable_grace(now - self.start));
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.done.is_some() {
            return None;
        }
        let t = super::earliest(self.deadline, self.refused_deadline);
        Some(t.map_or(self.hard, |t| t.min(self.hard)))
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.done.is_some() {
            return;
        }
        if self.refused_deadline.is_some_and(|t| t <= now) {
            self.refused_deadline = None;
            if self.lo.is_none() {
                return self.finish(now, false, REFUSED);
            }
        }
        if self.deadline.is_some_and(|t| t <= now) {
            self.end_round(now, false);
        }
        if self.done.is_none() && now >= self.hard {
            self.finish(now, false, "timed out");
        }
    }

    fn outcome(&self) -> Option<&Measurement> {
        self.done.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::super::scripted::ScriptedPath;
    use super::*;

    fn run(hops: &[u16], ipv6: bool, hint: bool, setup: impl Fn(&mut ScriptedPath)) -> Measurement {
        let mut path = ScriptedPath::new(hops);
        setup(&mut path);
        let cfg = SessionConfig::new(hops[0], ipv6);
        let mut s = ParallelSession::new(&cfg, 9, hint, None, path.now).unwrap();
        path.drive(&mut s)
    }

    /// Every path of the lab and the issue, with and without ICMP, with and
    /// without the fragment hint: exact in at most 3 round trips, no timer.
    #[test]
    fn exact_in_at_most_three_round_trips_without_a_timer() {
        let paths: [&[u16]; 12] = [
            &[9000, 1500, 1400],
            &[9000, 4000, 1280],
            &[1500, 1500],
            &[1500, 1492],
            &[9000, 1500, 1500],
            &[1500, 1499, 1500],
            &[1500, 1497, 1500],
            &[1500, 1280, 1500],
            &[1500, 1432, 1364, 1296],
            &[9000, 9000, 4321, 9000],
            &[9000, 1287, 9000],
            &[9000, 9000],
        ];
        for hops in paths {
            for black_hole in [false, true] {
                for (ipv6, hint) in [(false, true), (false, false), (true, false)] {
                    let m = run(hops, ipv6, hint, |p| p.black_hole = black_hole);
                    let want = hops.iter().copied().min();
                    let ctx = format!("{hops:?} black_hole={black_hole} ipv6={ipv6} hint={hint}: {m:?}");
                    assert_eq!((m.pmtu, m.exact, m.pmtu_high), (want, true, want), "{ctx}");
                    assert!(m.round_trips <= 3, "{ctx}");
                    // No timer: each round is closed by its control.
                    assert_eq!(m.elapsed, ScriptedPath::new(hops).rtt * m.round_trips, "{ctx}");
                }
            }
        }
    }

    #[test]
    fn common_mtus_take_two_round_trips_and_the_hint_any_ipv4_mtu() {
        let m = run(&[9000, 1500, 1400, 1500], true, false, |p| p.black_hole = true);
        assert_eq!((m.pmtu, m.round_trips, m.method.as_str()), (Some(1400), 2, "parallel"), "{m:?}");
        // The responder's link MTU caps the search: one round trip.
        let m = run(&[9000, 1500, 1400], true, false, |p| p.black_hole = true);
        assert_eq!((m.pmtu, m.exact, m.round_trips), (Some(1400), true, 1), "{m:?}");
        let m = run(&[9000, 1287, 9000], false, true, |p| p.black_hole = true);
        assert_eq!((m.pmtu, m.round_trips, m.method.as_str()), (Some(1287), 2, "fpmtud+parallel"), "{m:?}");
        // At the link MTU: one round trip.
        let m = run(&[1500, 1500], false, true, |_| {});
        assert_eq!((m.pmtu, m.round_trips), (Some(1500), 1), "{m:?}");
    }

    /// A validated ICMP "too big" names the bottleneck's MTU: round 2 is
    /// that size alone (twice) and the control, not every size up to it;
    /// without ICMP (a black hole) every size in the window is probed.
    #[test]
    fn an_icmp_named_mtu_is_probed_alone_in_round_two() {
        for (hops, want) in [(&[1500u16, 1499, 1500][..], 1499u16), (&[9000, 4321, 9000][..], 4321)] {
            let mut path = ScriptedPath::new(hops);
            let cfg = SessionConfig::new(hops[0], true);
            let mut s = ParallelSession::new(&cfg, 9, false, None, path.now).unwrap();
            let m = path.drive(&mut s);
            assert_eq!((m.pmtu, m.exact, m.round_trips), (Some(want), true, 2), "{hops:?}: {m:?}");
            let round1 = CANDIDATES.iter().filter(|&&c| c > 1280 && c < hops[0]).count() + 2;
            assert_eq!(
                path.sent.len(),
                round1 + 3,
                "{hops:?}: round 2 is the named size twice and the control: {:?}",
                path.sent
            );
            assert_eq!(path.sent[round1..].iter().filter(|(s, _)| *s == want).count(), 2, "{:?}", path.sent);
            let m = run(hops, true, false, |p| p.black_hole = true);
            assert_eq!((m.pmtu, m.exact), (Some(want), true), "{hops:?} black hole: {m:?}");
            assert!(m.probes as usize > round1 + 3, "{hops:?} black hole: every size probed: {m:?}");
        }
    }

    /// A driver that reads between sends hands the session a "too big" or
    /// an answer while the round is still going out: sizes they decide are
    /// not sent, and the answer is the same.
    #[test]
    fn what_comes_back_during_a_round_spares_the_rest_of_it() {
        for (hops, hint, want) in [
            (&[9000u16, 1500, 1400][..], false, 1400u16),
            (&[9000, 4000, 1280][..], true, 1280),
            (&[9000, 1500, 1500][..], true, 1500),
            (&[1500, 1500][..], false, 1500),
        ] {
            let sent = |gap: Duration| {
                let mut path = ScriptedPath::new(hops);
                path.rtt = Duration::from_micros(100);
                path.send_gap = gap;
                let cfg = SessionConfig::new(hops[0], false);
                let mut s = ParallelSession::new(&cfg, 9, hint, None, path.now).unwrap();
                let m = path.drive(&mut s);
                assert_eq!((m.pmtu, m.exact), (Some(want), true), "{hops:?} gap {gap:?}: {m:?}");
                path.sent
            };
            let (all, fewer) = (sent(Duration::ZERO), sent(Duration::from_micros(10)));
            assert!(fewer.len() < all.len(), "{hops:?}: {} probes, then {}: {fewer:?}", all.len(), fewer.len());
        }
        // A "too big" naming an odd MTU during round 1: that size joins
        // the round, and the answer is exact in one round trip (two when
        // the PTB comes back only after the round went out).
        for (gap, rtts) in [(Duration::from_micros(10), 1), (Duration::ZERO, 2)] {
            let mut path = ScriptedPath::new(&[1500, 1499, 1500]);
            path.rtt = Duration::from_micros(100);
            path.send_gap = gap;
            let cfg = SessionConfig::new(1500, false);
            let mut s = ParallelSession::new(&cfg, 9, false, None, path.now).unwrap();
            let m = path.drive(&mut s);
            assert_eq!((m.pmtu, m.exact, m.round_trips), (Some(1499), true, rtts), "gap {gap:?}: {m:?}");
        }
        // The "too big" for the 9000-byte probe comes back after 5 sends:
        // no jumbo probe after it.
        let mut path = ScriptedPath::new(&[9000, 1500, 1400]);
        path.rtt = Duration::from_micros(100);
        path.send_gap = Duration::from_micros(10);
        let cfg = SessionConfig::new(9000, false);
        let mut s = ParallelSession::new(&cfg, 9, false, None, path.now).unwrap();
        path.drive(&mut s);
        assert!(path.sent[5..].iter().all(|&(size, _)| size <= 1500), "{:?}", path.sent);
    }

    #[test]
    fn fragment_filters_only_lose_the_hint() {
        let m = run(&[9000, 1500, 1500], false, true, |p| {
            p.fragment_filter = true;
            p.black_hole = true;
        });
        assert_eq!((m.pmtu, m.exact, m.method.as_str()), (Some(1500), true, "parallel"), "{m:?}");
        assert!(m.round_trips <= 2, "{m:?}");
    }

    #[test]
    fn a_lost_control_costs_one_timer_and_losses_never_overestimate() {
        // The very first datagrams lost: the first round's probes (largest
        // first) and nothing else.
        let m = run(&[9000, 1500, 1400], false, false, |p| p.lose_first = 13);
        assert_eq!((m.pmtu, m.exact), (Some(1400), true), "{m:?}");
        for every in [3, 4, 5, 7] {
            let m = run(&[9000, 1500, 1400], false, true, |p| p.loss_every = Some(every));
            assert!(m.pmtu.is_some_and(|p| p <= 1400), "every {every}: {m:?}");
        }
    }

    #[test]
    fn no_responder_and_refusals() {
        let m = run(&[1500, 1500], true, false, |p| p.no_responder = true);
        assert_eq!((m.pmtu, m.note.as_str()), (None, REFUSED), "{m:?}");
        let m = run(&[1500, 1500], false, false, |p| p.loss_every = Some(1));
        assert_eq!((m.pmtu, m.exact), (None, false), "{m:?}");
    }

    #[test]
    fn a_legacy_responder_is_used_unauthenticated() {
        let m = run(&[9000, 1500, 1400, 1500], false, true, |p| p.legacy_late_bind = true);
        // Legacy answers are not accepted unless asked for.
        assert_eq!(m.pmtu, None, "{m:?}");
        let mut path = ScriptedPath::new(&[9000, 1500, 1400, 1500]);
        path.legacy_late_bind = true;
        let cfg = SessionConfig { accept_legacy: true, ..SessionConfig::new(9000, false) };
        let mut s = ParallelSession::new(&cfg, 9, true, None, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.exact, m.authenticated), (Some(1400), true, false), "{m:?}");
    }

    proptest::proptest! {
        /// Any chain of link MTUs (IPv4 from 576, IPv6 from 1280, up to
        /// 9000), with or without ICMP, fragments or the hint: exact in at
        /// most three round trips and no timer when nothing is lost; under
        /// loss never above the path MTU.
        #[test]
        fn random_paths(
            hops in proptest::collection::vec(576u16..=9000, 1..5),
            local in proptest::sample::select(vec![1500u16, 9000]),
            ipv6 in proptest::bool::ANY,
            hint in proptest::bool::ANY,
            black_hole in proptest::bool::ANY,
            filter in proptest::bool::ANY,
            loss in proptest::option::of(2u32..9),
            interleaved in proptest::bool::ANY,
        ) {
            let min = if ipv6 { 1280 } else { 576 };
            let mut all = vec![local];
            all.extend(hops.iter().map(|&h| h.max(min)));
            let want = all.iter().copied().min();
            let m = run(&all, ipv6, hint && !ipv6, |p| {
                p.black_hole = black_hole;
                p.fragment_filter = filter;
                p.loss_every = loss;
                if interleaved {
                    // Answers and ICMP come back while a round goes out.
                    p.rtt = Duration::from_micros(200);
                    p.send_gap = Duration::from_micros(15);
                }
            });
            proptest::prop_assert!(m.pmtu <= want, "{:?}: {:?}", all, m);
            if loss.is_none() {
                proptest::prop_assert_eq!((m.pmtu, m.exact), (want, true), "{:?}: {:?}", all, m);
                proptest::prop_assert!(m.round_trips <= 3, "{:?}: {:?}", all, m);
                if !interleaved {
                    proptest::prop_assert_eq!(m.elapsed, ScriptedPath::new(&all).rtt * m.round_trips);
                }
            }
        }
    }
}
