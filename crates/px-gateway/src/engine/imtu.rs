//! Toward a neighbour b-network with a verified iMTU (`crate::imtu`,
//! issues 30 and 35): packets pass untouched — but only toward a
//! destination whose *own* path was seen to carry the size
//! (`crate::confirm`), and never larger than the outer port sends
//! ([`Config::outer_port_mtu`](crate::Config::outer_port_mtu)).
//!
//! The guarantee (`docs/border.md`): no claim, true or false, makes the
//! gateway send a frame that a destination's path cannot carry without
//! the flow recovering by itself, ICMP filtered or not. A destination is
//! translated (as any legacy one, which is always safe) until an echo of
//! the passing size, DF set, sent out of the outer port with the link
//! header and addresses of an inner host's own packet toward it, came
//! back whole with its mark; then its packets up to that size pass: both
//! ends use their large MSS (a SYN's MSS above the size is clamped to
//! it, as a router clamps), segments are neither merged nor split,
//! caravans are not opened. A TCP flow the engine already translates
//! stays translated (a flow does not change hands mid-stream), and one
//! passed untouched that loses its confirmation is one whose handshake the
//! engine did not see: passed at the safe size, split outbound, no byte
//! lost.
//!
//! ICMP errors about a passed flow (a "too big" from a router whose path
//! shrank after the confirmation) are passed to the host they are
//! addressed to, as a router passes them: only the host can act on them.
//! Errors about the gateway's own probes are the gateway's: taken, so
//! that no inner host caches a path MTU for a packet it never sent.

use px_wire::icmp;
use px_wire::offload::{Checksum, PacketMeta};
use px_wire::{FrameInfo, IpVersion, Transport, echo, tcp};

use super::Engine;
use crate::buf::Verdict;
use crate::confirm;
use crate::flow::FlowKey;
use crate::mss::{Rewrite, mss_for, rewrite_mss};
use crate::port::Port;
use crate::segment::Seg;
use std::net::IpAddr;
use std::time::Instant;

impl Engine {
    /// `Some(verdict)` when the frame is the gateway's business as a
    /// verified neighbour's (passed untouched, or a reply or error about
    /// one of its probes); `None`: translate as usual.
    #[inline]
    pub(super) fn verified_passthrough(
        &mut self,
        now: Instant,
        from: Port,
        frame: &mut [u8],
        info: &FrameInfo,
        meta: PacketMeta,
    ) -> Option<Verdict> {
        self.imtu.sync();
        if !self.imtu.any() {
            return None;
        }
        // An ICMP error is about the packet it quotes, whoever sent it.
        if let Some(error) = self.verified_icmp_error(now, from, frame, info, meta) {
            return error;
        }
        // The address outside the b-network: where it goes, or where it
        // came from.
        let outside = match from {
            Port::Inner => info.dst,
            Port::Outer => info.src,
        };
        let verified = self.imtu.lookup(outside)?;
        // What may pass: the verified size, within what both ports send.
        let size = verified.min(self.cfg.imtu).min(self.cfg.outer_port_mtu());
        if size <= self.cfg.emtu {
            // Nothing to gain over translation.
            return None;
        }
        if from == Port::Outer
            && let Some(v) = self.take_probe_reply(now, frame, info)
        {
            return Some(v);
        }
        let carried = self.pmtu.carried(outside, now);
        if from == Port::Inner
            && carried.is_none_or(|(c, until)| c < size || until.saturating_duration_since(now) < confirm::RENEW_WITHIN)
        {
            self.send_probe(now, frame, info, size);
        }
        let limit = size.min(carried?.0);
        if limit <= self.cfg.emtu || wire_size(info, &meta) > usize::from(limit) {
            return None;
        }
        let mut meta = meta;
        if let Some(seg) = Seg::parse(frame, info) {
            // A flow the engine translates stays translated.
            if self.flows.lookup(&FlowKey::of_segment(&seg, frame, from)).is_some() {
                return None;
            }
            if seg.has(tcp::flags::SYN) {
                // Neither end may be told it can receive more than passes.
                let target = mss_for(limit, info.version);
                if crate::mss::announced_mss(frame, &seg).is_some_and(|m| m > target) {
                    if matches!(meta.csum, Checksum::Partial { .. }) {
                        let at = Checksum::Partial { start: info.l4 as u16, offset: tcp::field::CHECKSUM.start as u16 };
                        let _ = px_wire::offload::complete_partial(&mut frame[..info.end], at);
                        meta.csum = Checksum::Unknown;
                    }
                    if rewrite_mss(frame, &seg, target, Rewrite::Clamp).changed {
                        self.counters.mss_clamped += 1;
                    }
                }
            }
        }
        self.counters.imtu_passed += 1;
        Some(self.forward(from.other(), frame.len(), meta))
    }

    /// Sends an echo of `size` bytes toward the destination of `frame` (a
    /// packet from the inner port) with its link header and source, if the
    /// schedule and the rate allow.
    fn send_probe(&mut self, now: Instant, frame: &[u8], info: &FrameInfo, size: u16) {
        let (inner, outside) = (info.src, info.dst);
        if usize::from(size) < echo::min_probe_len(outside)
            || !self.imtu_schedule.take(outside, now)
            || !self.imtu_probe_rate.allow(now)
        {
            return;
        }
        let slot = confirm::slot(self.pmtu.epoch(now), now);
        let tag = confirm::tag(self.cfg.hash_seed, inner, outside, size, slot);
        let l3 = info.l3;
        let mut buf = self.pool.get(l3 + usize::from(size));
        buf[..l3].copy_from_slice(&frame[..l3]);
        let ident = self.icmp_ident;
        match echo::emit_request(&mut buf[l3..], inner, outside, ident, tag.id, slot, usize::from(size), &tag.mark) {
            Ok(n) => {
                self.icmp_ident = ident.checked_add(1).unwrap_or(1);
                self.counters.imtu_probes += 1;
                self.queue(crate::buf::Transmit {
                    port: Port::Outer,
                    buf,
                    start: 0,
                    end: l3 + n,
                    meta: PacketMeta::PLAIN,
                });
            }
            Err(_) => self.pool.put(buf),
        }
    }

    /// A reply to one of the gateway's probes: taken, and the path toward
    /// its sender recorded as carrying its size, if it arrived whole (no
    /// fragment, the probe's own size) with the probe's mark and within
    /// its time. Anything else: `None`.
    fn take_probe_reply(&mut self, now: Instant, frame: &[u8], info: &FrameInfo) -> Option<Verdict> {
        if !matches!(info.transport, Transport::Icmp) || info.fragment || info.ip_options {
            return None;
        }
        let e = echo::parse(frame.get(info.l4..info.end)?, info.src, info.dst)?;
        let (first, last) = e.marks()?;
        let slot_now = confirm::slot(self.pmtu.epoch(now), now);
        if !e.reply || !confirm::fresh(e.seq, slot_now) {
            return None;
        }
        let size = u16::try_from(info.end - info.l3).ok()?;
        // The reply's source is the probe's destination, and its
        // destination the inner host the probe spoke for.
        let tag = confirm::tag(self.cfg.hash_seed, info.dst, info.src, size, e.seq);
        if tag.id != e.id || first != tag.mark || last != tag.mark {
            return None;
        }
        self.pmtu.carry(info.src, size, now);
        self.imtu_schedule.answered(info.src);
        self.counters.imtu_confirmed += 1;
        Some(Verdict::Consumed)
    }

    /// For an ICMP error, `Some(what to do)`: whose quoted packet went to
    /// (from outside: its destination) or came from (from inside: its
    /// source) a verified prefix: about one of the gateway's probes,
    /// taken; about a packet passed untouched (its destination confirmed),
    /// passed on untouched; else `Some(None)`, translated. `None` for
    /// anything that is not an ICMP error.
    fn verified_icmp_error(
        &mut self,
        now: Instant,
        from: Port,
        frame: &[u8],
        info: &FrameInfo,
        meta: PacketMeta,
    ) -> Option<Option<Verdict>> {
        if !matches!(info.transport, Transport::Icmp) || info.fragment {
            return None;
        }
        let message = frame.get(info.l4..info.end)?;
        let ty = *message.first()?;
        let v6 = info.version == IpVersion::V6;
        let error = if v6 { icmp::is_v6_error(ty) } else { icmp::is_v4_error(ty) };
        if !error {
            return None;
        }
        let Some(quote) = message.get(icmp::HEADER_LEN..) else { return Some(None) };
        let Ok(quoted) = icmp::parse_quoted(quote) else { return Some(None) };
        let outside = match from {
            Port::Outer => quoted.dst,
            Port::Inner => quoted.src,
        };
        if self.imtu.lookup(outside).is_none() {
            return Some(None);
        }
        if from == Port::Outer && self.quotes_own_probe(now, quote, quoted.src, quoted.dst, quoted.ip_len) {
            self.counters.imtu_probe_errors += 1;
            return Some(Some(Verdict::Consumed));
        }
        if self.pmtu.carried(outside, now).is_none() {
            return Some(None);
        }
        self.counters.imtu_passed += 1;
        Some(Some(self.forward(from.other(), frame.len(), meta)))
    }

    /// Whether `quote` (an ICMP error's quoted packet) is a probe this
    /// gateway sent from `inner` to `outside` within the answer window.
    fn quotes_own_probe(&self, now: Instant, quote: &[u8], inner: IpAddr, outside: IpAddr, ip_len: usize) -> bool {
        let Some((id, seq)) = echo::quoted_request(quote) else { return false };
        let Ok(size) = u16::try_from(ip_len) else { return false };
        let slot_now = confirm::slot(self.pmtu.epoch(now), now);
        confirm::fresh(seq, slot_now) && confirm::tag(self.cfg.hash_seed, inner, outside, size, seq).id == id
    }
}

/// The largest IP packet this frame puts on the wire: the packet itself,
/// or for a super-packet its headers plus one segment.
fn wire_size(info: &FrameInfo, meta: &PacketMeta) -> usize {
    let ip_len = info.end - info.l3;
    let Some(gso) = meta.gso else { return ip_len };
    let l4_hdr = match info.transport {
        Transport::Tcp { header_len, .. } => header_len,
        Transport::Udp { .. } => 8,
        _ => return ip_len,
    };
    ip_len.min(info.l4 - info.l3 + l4_hdr + usize::from(gso.size))
}
