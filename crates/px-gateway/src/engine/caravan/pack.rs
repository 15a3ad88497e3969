//! Packing: inbound datagrams of one flow, in arrival order, into a caravan
//! of at most the iMTU, held at most the merge timeout; a caravan of one
//! datagram leaves as that plain datagram.

use std::time::Instant;

use px_wire::at;
use px_wire::checksum::{self, Sum};
use px_wire::ipv4::Ipv4Packet;
use px_wire::offload::{Checksum, PacketMeta};
use px_wire::udp;
use px_wire::udp::UdpDatagram;
use px_wire::{FrameInfo, IpVersion};

use crate::buf::{Transmit, Verdict};
use crate::caravan::ip::{pseudo, pseudo_of, set_ip_header};
use crate::caravan::open::{Open, SendReason, append, same_headers};
use crate::engine::Engine;
use crate::flow::FlowKey;
use crate::port::Port;
use crate::timer::Timer;

impl Engine {
    /// Packs one inbound datagram; `None` if it must pass plain.
    pub(super) fn pack(
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
        let csum = UdpDatagram::new_unchecked(&frame[info.l4..info.end]).checksum();
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
                    self.send_open(key, SendReason::Full, now);
                }
                return Some(Verdict::Consumed);
            }
            why = Some(if same { SendReason::Full } else { SendReason::Mismatch });
        }
        if let Some(w) = why {
            self.send_open(key, w, now);
        }
        self.start(key, frame, info, now);
        let o = self.caravans.open.get_mut(&key)?;
        let full = append(o, &frame[info.l4..info.end], known.then(|| ps.negate()), ident, limit);
        self.counters.caravan.packed_in += 1;
        if full {
            self.send_open(key, SendReason::Full, now);
        }
        Some(Verdict::Consumed)
    }

    fn start(&mut self, key: FlowKey, frame: &[u8], info: &FrameInfo, now: Instant) {
        let cap = self.cfg.imtu as usize;
        while self.caravans.reserved + cap > self.cfg.max_held_bytes || self.caravans.open.len() >= self.cfg.max_flows {
            let Some((k, id)) = self.deadlines.oldest_caravan() else { break };
            if self.caravan_is(k, id) {
                self.send_open(k, SendReason::Pressure, now);
            }
        }
        let mut buf = self.pool.get_full();
        buf[..info.l4].copy_from_slice(&frame[..info.l4]);
        let id = self.caravans.next_id;
        self.caravans.next_id += 1;
        self.caravans.reserved += cap;
        self.deadlines.push(now + self.cfg.merge_timeout, Timer::Caravan { key, id });
        let end = info.l4 + udp::HEADER_LEN;
        let o =
            Open { buf, l3: info.l3, l4: info.l4, end, count: 0, sum: Sum(0), last: 0, next_ident: 0, id, since: now };
        self.caravans.open.insert(key, o);
    }

    /// Sends the flow's open caravan, if any.
    pub(crate) fn send_open(&mut self, key: FlowKey, why: SendReason, now: Instant) {
        let Some(mut o) = self.caravans.open.remove(&key) else { return };
        self.caravans.reserved -= self.cfg.imtu as usize;
        let c = &mut self.counters.caravan;
        match why {
            SendReason::Timeout => c.timeouts += 1,
            SendReason::Mismatch => c.mismatches += 1,
            SendReason::Pressure => c.pressure += 1,
            SendReason::Full | SendReason::Shutdown => {}
        }
        if o.count == 0 {
            self.pool.put(o.buf);
            return;
        }
        let (l3, l4) = (o.l3, o.l4);
        let end = if o.count == 1 {
            // One datagram: it leaves as it came (headers untouched; a
            // codepoint was already remarked on arrival, see `caravan_udp`).
            c.singles += 1;
            o.buf.copy_within(l4 + udp::HEADER_LEN..o.end, l4);
            o.end - udp::HEADER_LEN
        } else {
            c.built += 1;
            c.built_datagrams += o.count as u64;
            c.built_full += (why == SendReason::Full) as u64;
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
            o.buf[at(l4, udp::field::CHECKSUM)].copy_from_slice(&sum.to_be_bytes());
            o.end
        };
        self.counters.hold.record(now.saturating_duration_since(o.since).as_micros() as u64);
        self.queue(Transmit { port: Port::Inner, buf: o.buf, start: 0, end, meta: PacketMeta::PLAIN });
    }

    /// Whether caravan `id` is still open for `key`.
    pub(crate) fn caravan_is(&self, key: FlowKey, id: u64) -> bool {
        self.caravans.open.get(&key).is_some_and(|o| o.id == id)
    }
}
