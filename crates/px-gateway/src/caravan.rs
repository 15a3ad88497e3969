//! PX-caravans in the engine (format: `docs/caravan.md`; wire view:
//! `px_wire::caravan`; end-host library: `px-caravan`).
//!
//! Inbound (outer → inner), UDP toward a caravan-capable destination
//! (`Config::caravan_prefixes` / `caravan_ports`): datagrams of one flow are
//! packed, in arrival order, into one caravan of at most the iMTU, held at
//! most the merge timeout. A datagram that does not fit, or whose headers
//! differ (TTL, TOS, DF, link header, an IPv4 ID out of sequence), sends the
//! open caravan and starts the next. A caravan that ends up with a single
//! datagram leaves as that plain datagram.
//!
//! Outbound (inner → outer), UDP marked with the caravan DSCP: the caravan is
//! validated whole, then unpacked into its datagrams with IP headers rebuilt
//! (length, DSCP 0, a fresh IPv4 ID, header checksum) and the records' own
//! UDP checksums kept; a datagram larger than the egress gets the router
//! treatment (fragments, or ICMP "too big").
//!
//! Guarantees (tests in `tests/caravan*.rs`): every datagram leaves once, its
//! UDP header and payload byte-exact, in the order of its flow; nothing is
//! held longer than the merge timeout; held buffers are bounded by
//! `max_flows` caravans and `max_held_bytes`; every malformed caravan is
//! dropped and counted by reason, never forwarded in part.

use core::fmt;
use core::net::IpAddr;
use core::str::FromStr;
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::time::Instant;

use px_wire::caravan::{Caravan, Malformed};
use px_wire::checksum::{self, Sum, copy_and_sum};
use px_wire::ipv4::Ipv4Packet;
use px_wire::offload::{Checksum, PacketMeta};
use px_wire::udp::{self, UdpDatagram};
use px_wire::{FrameInfo, IpVersion, Transport};
use serde::Serialize;

use super::Engine;
use crate::buf::{Transmit, Verdict};
use crate::config::Config;
use crate::counters::{DropReason, Port};
use crate::flow::{FlowKey, SeededHash};

/// An address prefix such as `203.0.113.0/24` or `2001:db8:2::/48`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

/// Why a prefix string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Not `address/length`.
    #[error("`{0}` is not address/length")]
    Syntax(String),
    /// The length exceeds the address width (32 or 128).
    #[error("prefix length {0} is longer than the address")]
    Length(u8),
}

impl Prefix {
    pub fn contains(&self, a: IpAddr) -> bool {
        match (self.addr, a) {
            (IpAddr::V4(p), IpAddr::V4(a)) => {
                let m = u32::MAX.checked_shl(32 - self.len as u32).unwrap_or(0);
                u32::from(p) & m == u32::from(a) & m
            }
            (IpAddr::V6(p), IpAddr::V6(a)) => {
                let m = u128::MAX.checked_shl(128 - self.len as u32).unwrap_or(0);
                u128::from(p) & m == u128::from(a) & m
            }
            _ => false,
        }
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;
    fn from_str(s: &str) -> Result<Prefix, PrefixError> {
        let (a, l) = s.split_once('/').ok_or_else(|| PrefixError::Syntax(s.to_string()))?;
        let addr: IpAddr = a.parse().map_err(|_| PrefixError::Syntax(s.to_string()))?;
        let len: u8 = l.parse().map_err(|_| PrefixError::Syntax(s.to_string()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(PrefixError::Length(len));
        }
        Ok(Prefix { addr, len })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Serialize for Prefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Prefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Prefix, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What the engine counts about caravans.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CaravanCounters {
    /// Inbound datagrams packed into caravans (those sent alone included).
    pub packed_in: u64,
    /// Caravans sent to the inner port (two datagrams or more).
    pub built: u64,
    /// ... of which were full: the next datagram of the flow's last size
    /// would not have fitted the iMTU. The caravan yield's numerator.
    pub built_full: u64,
    /// Datagrams in the caravans built (datagrams per caravan = this / built).
    pub built_datagrams: u64,
    /// Holds that ended with one datagram, sent plain.
    pub singles: u64,
    /// Holds sent because the merge timeout expired.
    pub timeouts: u64,
    /// Holds sent early because a datagram's headers did not match (TTL,
    /// TOS, DF, IPv4 ID out of sequence) or it could not be packed.
    pub mismatches: u64,
    /// Holds sent early for memory or table bounds.
    pub pressure: u64,
    /// Inbound plain datagrams toward caravan-capable hosts whose DSCP was
    /// the caravan codepoint, remarked to 0 (RFC 2474 §6: a boundary node
    /// re-marks codepoints it does not honour).
    pub remarked: u64,
    /// Outbound caravans unpacked, and datagrams they gave.
    pub opened: u64,
    pub opened_datagrams: u64,
    /// Outbound caravans dropped whole, by [`Malformed`] reason.
    pub malformed: [u64; 6],
}

impl CaravanCounters {
    /// Share of built caravans that were full (the paper's yield, for UDP).
    pub fn caravan_yield(&self) -> f64 {
        if self.built == 0 { 0.0 } else { self.built_full as f64 / self.built as f64 }
    }

    /// Mean datagrams per caravan built.
    pub fn datagrams_per_caravan(&self) -> f64 {
        if self.built == 0 { 0.0 } else { self.built_datagrams as f64 / self.built as f64 }
    }

    pub fn malformed(&self, r: Malformed) -> u64 {
        self.malformed[r as usize]
    }

    pub fn accumulate(&mut self, o: &CaravanCounters) {
        let pairs: [(&mut u64, u64); 11] = [
            (&mut self.packed_in, o.packed_in),
            (&mut self.built, o.built),
            (&mut self.built_full, o.built_full),
            (&mut self.built_datagrams, o.built_datagrams),
            (&mut self.singles, o.singles),
            (&mut self.timeouts, o.timeouts),
            (&mut self.mismatches, o.mismatches),
            (&mut self.pressure, o.pressure),
            (&mut self.remarked, o.remarked),
            (&mut self.opened, o.opened),
            (&mut self.opened_datagrams, o.opened_datagrams),
        ];
        for (a, b) in pairs {
            *a += b;
        }
        for (a, b) in self.malformed.iter_mut().zip(o.malformed) {
            *a += b;
        }
    }
}

/// Why an open caravan is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Send {
    Full,
    Timeout,
    Mismatch,
    Pressure,
    Shutdown,
}

/// A caravan being filled. The buffer holds the first datagram's link and IP
/// headers at `0..l4`, the outer UDP header's room at `l4..l4 + 8`, then the
/// records up to `end`.
#[derive(Debug)]
struct Open {
    buf: Vec<u8>,
    l3: usize,
    l4: usize,
    end: usize,
    count: u32,
    /// Sum of the record bytes as they sit in the outer UDP payload.
    sum: Sum,
    /// Length of the last record: a caravan that cannot take another of
    /// this size is sent at once (full).
    last: usize,
    /// IPv4 ID the next datagram must carry to join (incrementing IDs).
    next_ident: u16,
    id: u64,
    since: Instant,
}

/// The engine's caravan state.
#[derive(Debug)]
pub(crate) struct Caravans {
    open: HashMap<FlowKey, Open, SeededHash>,
    /// (deadline, flow, hold id), in start order = deadline order.
    timers: VecDeque<(Instant, FlowKey, u64)>,
    reserved: usize,
    next_id: u64,
    /// IPv4 ID source for datagrams rebuilt from caravans (RFC 6864 §4.2:
    /// the gateway is their IP-layer source).
    ident: u16,
}

impl Caravans {
    pub(crate) fn new() -> Caravans {
        Caravans {
            // The flow table's hash, seeded at random per engine so that
            // outside senders cannot aim their flows at one bucket.
            open: HashMap::with_hasher(SeededHash(RandomState::new().hash_one(0x5eed_u64))),
            timers: VecDeque::new(),
            reserved: 0,
            next_id: 1,
            ident: 0x5a5a,
        }
    }

    /// Earliest hold deadline (may be early: a hold that already left).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.timers.front().map(|t| t.0)
    }
}

/// Whether the engine packs UDP toward `dst:port`.
fn capable(cfg: &Config, dst: IpAddr, port: u16) -> bool {
    cfg.caravan_prefixes.iter().any(|p| p.contains(dst))
        && (cfg.caravan_ports.is_empty() || cfg.caravan_ports.contains(&port))
}

/// DSCP of the IP header `ip`.
fn dscp_of(ip: &[u8]) -> u8 {
    if ip[0] >> 4 == 4 { ip[1] >> 2 } else { ((ip[0] & 0x0f) << 2) | (ip[1] >> 6) }
}

/// Rewrites the IP header `ip` (the whole header: IPv4 options or IPv6
/// extension headers included) of a packet of `ip_len` bytes: DSCP (ECN
/// kept), length, and, if given, the IPv4 ID; the IPv4 header checksum is
/// recomputed.
fn set_ip_header(ip: &mut [u8], dscp: u8, ip_len: usize, ident: Option<u16>) {
    if ip[0] >> 4 == 4 {
        let mut h = Ipv4Packet::new_unchecked(ip);
        h.set_dscp(dscp);
        h.set_total_len(ip_len as u16);
        if let Some(id) = ident {
            h.set_ident(id);
        }
        h.fill_checksum();
    } else {
        // Traffic class = low nibble of byte 0, high nibble of byte 1.
        let tc = px_wire::caravan::tos(dscp, (ip[1] >> 4) & 0b11);
        ip[0] = (ip[0] & 0xf0) | (tc >> 4);
        ip[1] = (ip[1] & 0x0f) | (tc << 4);
        ip[4..6].copy_from_slice(&((ip_len - 40) as u16).to_be_bytes());
    }
}

impl Engine {
    /// The caravan branch of UDP handling. `None`: not the caravans' business,
    /// the caller treats the frame as any other UDP.
    pub(super) fn caravan_udp(
        &mut self,
        now: Instant,
        from: Port,
        frame: &mut [u8],
        info: &FrameInfo,
        meta: PacketMeta,
    ) -> Option<Verdict> {
        if self.cfg.caravan_prefixes.is_empty() {
            return None;
        }
        let Transport::Udp { src_port, dst_port } = info.transport else { return None };
        match from {
            Port::Outer if capable(&self.cfg, info.dst, dst_port) => {
                let key = FlowKey::new(info.src, info.dst, src_port, dst_port);
                let packable = !info.fragment && !info.ip_options;
                if packable && let Some(v) = self.pack(now, key, frame, info, meta) {
                    return Some(v);
                }
                // Passing plain: whatever the flow holds goes first.
                self.send_open(key, Send::Mismatch, now);
                if info.dscp == self.cfg.caravan_dscp {
                    set_ip_header(&mut frame[info.l3..info.l4], 0, info.ip_len(), None);
                    self.counters.caravan.remarked += 1;
                }
                None
            }
            Port::Inner if info.dscp == self.cfg.caravan_dscp && !info.fragment => {
                Some(self.unpack(now, frame, info, meta, src_port, dst_port))
            }
            _ => None,
        }
    }

    /// Packs one inbound datagram; `None` if it must pass plain.
    fn pack(
        &mut self,
        now: Instant,
        key: FlowKey,
        frame: &[u8],
        info: &FrameInfo,
        meta: PacketMeta,
    ) -> Option<Verdict> {
        let rec_len = info.end - info.l4;
        let limit = (self.cfg.imtu as usize).min(self.pool.size() - info.l3);
        if info.ip_header_len() + udp::HEADER_LEN + rec_len > limit {
            return None;
        }
        // A UDP GRO batch (`rx-udp-gro-forwarding`) is many datagrams under
        // one header: not one record. It passes as the router path has it.
        if meta.gso.is_some_and(|g| g.size > 0 && rec_len - udp::HEADER_LEN > g.size as usize) {
            return None;
        }
        let ident = match info.version {
            IpVersion::V4 => Ipv4Packet::new_unchecked(&frame[info.l3..info.l4]).ident(),
            IpVersion::V6 => 0,
        };
        let csum = u16::from_be_bytes([frame[info.l4 + 6], frame[info.l4 + 7]]);
        let ps = pseudo(info, rec_len);
        let verify = meta.csum == Checksum::Unknown && self.cfg.verify_checksums && csum != 0;
        if verify && checksum::fold(ps.plus(Sum::of(&frame[info.l4..info.end]))) != 0xffff {
            // A corrupt datagram is not hidden under a valid outer checksum:
            // it passes plain, after what its flow holds, as TCP's do.
            self.counters.bad_checksum += 1;
            return None;
        }
        // A datagram with a correct non-zero checksum sums to the negated
        // pseudo-header (RFC 1071: the whole sums to zero), so its bytes
        // are read once, to copy them; others are summed while copied.
        let known = (verify || matches!(meta.csum, Checksum::Valid | Checksum::Partial { .. })) && csum != 0;
        // One lookup in the common case: the open caravan takes the datagram.
        let mut why = None;
        if let Some(o) = self.caravans.open.get_mut(&key) {
            let fits = o.end + rec_len <= o.l3 + limit;
            let same = o.l4 == info.l4 && same_headers(&o.buf[..o.l4], &frame[..info.l4], info, o.next_ident, ident);
            if fits && same {
                let full = append(o, &frame[info.l4..info.end], known.then(|| ps.negate()), ident, limit);
                self.counters.caravan.packed_in += 1;
                if full {
                    self.send_open(key, Send::Full, now);
                }
                return Some(Verdict::Consumed);
            }
            why = Some(if same { Send::Full } else { Send::Mismatch });
        }
        if let Some(w) = why {
            self.send_open(key, w, now);
        }
        self.start(key, frame, info, now);
        let o = self.caravans.open.get_mut(&key)?;
        let full = append(o, &frame[info.l4..info.end], known.then(|| ps.negate()), ident, limit);
        self.counters.caravan.packed_in += 1;
        if full {
            self.send_open(key, Send::Full, now);
        }
        Some(Verdict::Consumed)
    }

    fn start(&mut self, key: FlowKey, frame: &[u8], info: &FrameInfo, now: Instant) {
        let cap = self.cfg.imtu as usize;
        while self.caravans.reserved + cap > self.cfg.max_held_bytes || self.caravans.open.len() >= self.cfg.max_flows {
            let Some((_, k, id)) = self.caravans.timers.pop_front() else { break };
            if self.caravans.open.get(&k).is_some_and(|o| o.id == id) {
                self.send_open(k, Send::Pressure, now);
            }
        }
        let mut buf = self.pool.get();
        buf[..info.l4].copy_from_slice(&frame[..info.l4]);
        let id = self.caravans.next_id;
        self.caravans.next_id += 1;
        self.caravans.reserved += cap;
        self.caravans.timers.push_back((now + self.cfg.merge_timeout, key, id));
        let end = info.l4 + udp::HEADER_LEN;
        let o =
            Open { buf, l3: info.l3, l4: info.l4, end, count: 0, sum: Sum(0), last: 0, next_ident: 0, id, since: now };
        self.caravans.open.insert(key, o);
    }

    /// Sends the flow's open caravan, if any.
    fn send_open(&mut self, key: FlowKey, why: Send, now: Instant) {
        let Some(mut o) = self.caravans.open.remove(&key) else { return };
        self.caravans.reserved -= self.cfg.imtu as usize;
        let c = &mut self.counters.caravan;
        match why {
            Send::Timeout => c.timeouts += 1,
            Send::Mismatch => c.mismatches += 1,
            Send::Pressure => c.pressure += 1,
            Send::Full | Send::Shutdown => {}
        }
        if o.count == 0 {
            self.pool.put(o.buf);
            return;
        }
        let (l3, l4) = (o.l3, o.l4);
        let end = if o.count == 1 {
            // One datagram: it leaves as it came (headers untouched), but
            // never with the codepoint, which would make it a caravan.
            c.singles += 1;
            o.buf.copy_within(l4 + udp::HEADER_LEN..o.end, l4);
            if dscp_of(&o.buf[l3..l4]) == self.cfg.caravan_dscp {
                set_ip_header(&mut o.buf[l3..l4], 0, o.end - udp::HEADER_LEN - l3, None);
                c.remarked += 1;
            }
            o.end - udp::HEADER_LEN
        } else {
            c.built += 1;
            c.built_datagrams += o.count as u64;
            c.built_full += (why == Send::Full) as u64;
            let udp_len = o.end - l4;
            // The ECN bits stay those every datagram had; the ID the first's.
            set_ip_header(&mut o.buf[l3..l4], self.cfg.caravan_dscp, l4 - l3 + udp_len, None);
            let (sp, dp) = (
                u16::from_be_bytes([o.buf[l4 + udp::HEADER_LEN], o.buf[l4 + udp::HEADER_LEN + 1]]),
                u16::from_be_bytes([o.buf[l4 + udp::HEADER_LEN + 2], o.buf[l4 + udp::HEADER_LEN + 3]]),
            );
            udp::emit_header(&mut o.buf[l4..], sp, dp, udp_len as u16);
            let ps = pseudo_of(&o.buf[l3..l4], udp_len);
            let mut sum = ps.plus(Sum::of(&o.buf[l4..l4 + udp::HEADER_LEN])).plus(o.sum).checksum();
            if sum == 0 {
                sum = 0xffff;
            }
            o.buf[l4 + 6..l4 + 8].copy_from_slice(&sum.to_be_bytes());
            o.end
        };
        self.counters.hold.record(now.saturating_duration_since(o.since).as_micros() as u64);
        self.queue(Transmit { port: Port::Inner, buf: o.buf, start: 0, end, meta: PacketMeta::PLAIN });
    }

    /// Sends caravans whose hold deadline passed.
    pub(super) fn caravan_timeout(&mut self, now: Instant) {
        while let Some(&(deadline, key, id)) = self.caravans.timers.front() {
            if self.caravans.open.get(&key).is_none_or(|o| o.id != id) {
                self.caravans.timers.pop_front();
                continue;
            }
            if deadline > now {
                break;
            }
            self.caravans.timers.pop_front();
            self.send_open(key, Send::Timeout, now);
        }
    }

    /// Sends every open caravan (shutdown).
    pub(super) fn caravan_flush_all(&mut self, now: Instant) {
        while let Some((_, key, _)) = self.caravans.timers.pop_front() {
            self.send_open(key, Send::Shutdown, now);
        }
    }

    /// Unpacks an outbound caravan into its datagrams, or drops it whole.
    fn unpack(&mut self, now: Instant, frame: &[u8], info: &FrameInfo, meta: PacketMeta, sp: u16, dp: u16) -> Verdict {
        let udp_bytes = &frame[info.l4..info.end];
        let outer = UdpDatagram::new_unchecked(udp_bytes);
        // The outer checksum covers every record: check it once, unless the
        // I/O layer did. IPv6 forbids a zero checksum (RFC 8200 §8.1).
        let zero_ok = info.version == IpVersion::V4;
        let check = meta.csum == Checksum::Unknown || outer.checksum() == 0;
        if check && !outer.verify_checksum(pseudo(info, udp_bytes.len()), zero_ok) {
            return self.malformed(Malformed::Checksum);
        }
        let caravan = match Caravan::parse(outer.payload(), Some((sp, dp))) {
            Ok(c) => c,
            Err(e) => return self.malformed(e.reason()),
        };
        self.counters.caravan.opened += 1;
        self.counters.caravan.opened_datagrams += caravan.len() as u64;
        let (l3, l4) = (info.l3, info.l4);
        for rec in caravan.iter() {
            let d = rec.datagram();
            let mut buf = self.pool.get();
            let end = l4 + d.len();
            buf[..l4].copy_from_slice(&frame[..l4]);
            buf[l4..end].copy_from_slice(d);
            let ident = (info.version == IpVersion::V4).then_some(self.caravans.ident);
            self.caravans.ident = self.caravans.ident.wrapping_add(1);
            set_ip_header(&mut buf[l3..l4], 0, end - l3, ident);
            if info.version == IpVersion::V6 && rec.checksum() == 0 {
                // A zero inner checksum cannot leave over IPv6 (RFC 8200 §8.1).
                UdpDatagram::new_unchecked(&mut buf[l4..end]).fill_checksum(pseudo(info, d.len()));
            }
            self.send_unpacked(now, buf, end);
        }
        Verdict::Consumed
    }

    /// Sends one rebuilt datagram out of the outer port, as a router would.
    fn send_unpacked(&mut self, now: Instant, buf: Vec<u8>, end: usize) {
        let Ok(Some(info)) = FrameInfo::parse(&buf[..end]) else {
            // Cannot happen for a frame built from a parsed caravan; counted
            // rather than trusted.
            let _ = self.drop(DropReason::Malformed);
            self.pool.put(buf);
            return;
        };
        let mtu = self.egress_mtu(now, Port::Outer, info.dst) as usize;
        if info.ip_len() <= mtu {
            self.queue(Transmit { port: Port::Outer, buf, start: 0, end, meta: PacketMeta::PLAIN });
            return;
        }
        let _ = match info.version {
            IpVersion::V4 if !info.dont_frag => self.fragment(Port::Outer, &buf, &info, mtu),
            IpVersion::V4 => {
                self.too_big(now, Port::Inner, &buf, &info, mtu as u16);
                self.drop(DropReason::TooBigDf)
            }
            IpVersion::V6 => {
                self.too_big(now, Port::Inner, &buf, &info, mtu as u16);
                self.drop(DropReason::TooBigV6)
            }
        };
        self.pool.put(buf);
    }

    fn malformed(&mut self, r: Malformed) -> Verdict {
        self.counters.caravan.malformed[r as usize] += 1;
        self.drop(DropReason::Malformed)
    }
}

/// Appends one record (`sum`: its bytes' sum if already known) and says
/// whether the caravan is now full: another record of this size would not
/// fit `limit` (the largest IP packet).
fn append(o: &mut Open, rec: &[u8], sum: Option<Sum>, ident: u16, limit: usize) -> bool {
    let dst = &mut o.buf[o.end..o.end + rec.len()];
    let sum = match sum {
        Some(s) => {
            dst.copy_from_slice(rec);
            s
        }
        None => copy_and_sum(dst, rec),
    };
    o.sum = o.sum.plus(sum.at_offset(o.end - o.l4 - udp::HEADER_LEN));
    o.end += rec.len();
    o.count += 1;
    o.last = rec.len();
    o.next_ident = ident.wrapping_add(1);
    o.end + o.last > o.l3 + limit
}

/// Whether a datagram (headers `new[..l4]`) may join a caravan whose first
/// datagram had headers `first`: same link header and IP header but for
/// the length, ID and checksum fields, and, over IPv4 without DF, the next
/// ID in sequence (as Linux GRO requires; with DF the datagram is atomic,
/// RFC 6864 §4.1, and its ID carries nothing).
fn same_headers(first: &[u8], new: &[u8], info: &FrameInfo, next_ident: u16, ident: u16) -> bool {
    let l3 = info.l3;
    if first.len() != new.len() || first[..l3] != new[..l3] {
        return false;
    }
    let (a, b) = (&first[l3..], &new[l3..]);
    match info.version {
        // ver/IHL, TOS | flags+offset, TTL, protocol | addresses, options.
        IpVersion::V4 => {
            a[..2] == b[..2] && a[6..10] == b[6..10] && a[12..] == b[12..] && (info.dont_frag || ident == next_ident)
        }
        // version, class, flow label | next header, hop limit, addresses.
        IpVersion::V6 => a[..4] == b[..4] && a[6..] == b[6..],
    }
}

/// UDP pseudo-header sum of a parsed frame's addresses for `len` bytes.
fn pseudo(info: &FrameInfo, len: usize) -> Sum {
    match (info.src, info.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => checksum::pseudo_v4(s, d, 17, len as u16),
        (IpAddr::V6(s), IpAddr::V6(d)) => checksum::pseudo_v6(s, d, 17, len as u32),
        _ => Sum(0),
    }
}

/// The same from an option-less IP header's bytes.
fn pseudo_of(ip: &[u8], len: usize) -> Sum {
    if ip[0] >> 4 == 4 {
        let (s, d) = ([ip[12], ip[13], ip[14], ip[15]], [ip[16], ip[17], ip[18], ip[19]]);
        checksum::pseudo_v4(s.into(), d.into(), 17, len as u16)
    } else {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&ip[8..24]);
        d.copy_from_slice(&ip[24..40]);
        checksum::pseudo_v6(s.into(), d.into(), 17, len as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_match() {
        let p: Prefix = "203.0.113.0/24".parse().unwrap();
        assert!(p.contains("203.0.113.77".parse().unwrap()));
        assert!(!p.contains("203.0.114.1".parse().unwrap()));
        assert!(!p.contains("2001:db8::1".parse().unwrap()));
        let all: Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("198.51.100.1".parse().unwrap()));
        let v6: Prefix = "2001:db8:2::/48".parse().unwrap();
        assert!(v6.contains("2001:db8:2:ffff::1".parse().unwrap()));
        assert!(!v6.contains("2001:db8:3::1".parse().unwrap()));
        assert_eq!("10.0.0.0/33".parse::<Prefix>(), Err(PrefixError::Length(33)));
        assert!(matches!("10.0.0.0".parse::<Prefix>(), Err(PrefixError::Syntax(_))));
        assert_eq!(v6.to_string(), "2001:db8:2::/48");
    }

    #[test]
    fn ports_narrow_the_destinations() {
        let mut cfg = Config { caravan_prefixes: vec!["203.0.113.0/24".parse().unwrap()], ..Config::default() };
        let a = "203.0.113.5".parse().unwrap();
        assert!(capable(&cfg, a, 53));
        cfg.caravan_ports = vec![443];
        assert!(capable(&cfg, a, 443) && !capable(&cfg, a, 53));
    }

    #[test]
    fn pseudo_sums_agree() {
        // Header bytes and parsed addresses give the same pseudo-header.
        let mut ip = [0u8; 20];
        px_wire::ipv4::emit_header(&mut ip, 0, 48, 1, true, 64, 17, [198, 51, 100, 1].into(), [203, 0, 113, 2].into());
        let a = checksum::pseudo_v4([198, 51, 100, 1].into(), [203, 0, 113, 2].into(), 17, 28);
        assert_eq!(pseudo_of(&ip, 28), a);
    }
}
