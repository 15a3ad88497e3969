//! The life of a hold (the inner segment a flow's inbound data fills,
//! `crate::merge::held`): started under the hold budget, flushed for a
//! reason, sent when full. Holds are bounded in bytes by
//! `Config::max_held_bytes` (`crate::merge::budget`): a new hold that would pass it
//! first sends the oldest holds (memory pressure), never drops them.

use std::time::Instant;

use px_wire::offload::PacketMeta;

use super::Engine;
use crate::buf::Transmit;
use crate::counters::FlushReason;
use crate::merge::held::Held;
use crate::port::Port;
use crate::segment::Seg;
use crate::timer::Timer;

impl Engine {
    /// Starts the flow's hold at `seq` with room for `cap` payload bytes,
    /// from `seg`'s headers; the oldest holds leave first if the budget
    /// would be passed.
    pub(crate) fn start_hold(&mut self, idx: u32, frame: &[u8], seg: &Seg, seq: u32, cap: usize, now: Instant) {
        while self.holds.reserved + cap > self.cfg.max_held_bytes {
            let Some((i, id)) = self.deadlines.oldest_hold() else { break };
            if self.hold_is(i, id) {
                self.flush_flow(i, FlushReason::MemoryPressure, now);
            }
        }
        let buf = self.pool.get_full();
        let id = self.holds.next_id();
        let held = Held::start(buf, frame, seg, seq, cap, now, id);
        if let Some(f) = self.flows.get_mut(idx) {
            f.merge.held = Some(held);
            self.holds.reserved += cap;
            self.deadlines.push(now + self.cfg.merge_timeout, Timer::Hold { flow: idx, id });
        }
    }

    /// Whether the flow's live hold is the one numbered `id`.
    pub(crate) fn hold_is(&self, idx: u32, id: u64) -> bool {
        self.flows.get(idx).and_then(|f| f.merge.held.as_ref()).is_some_and(|h| h.id == id)
    }

    /// Sends what the flow holds, early, for `reason` (nothing if it holds nothing).
    pub(crate) fn flush_flow(&mut self, idx: u32, reason: FlushReason, now: Instant) {
        if self.flows.get(idx).is_some_and(|f| f.merge.held.is_some()) {
            self.emit_hold(idx, 0, Some(reason), now);
        }
    }

    /// Sends the flow's hold (full, or flushed early for `reason`), with
    /// `last_flags` (PSH/FIN of the piece that ended it) set.
    pub(crate) fn emit_hold(&mut self, idx: u32, last_flags: u8, reason: Option<FlushReason>, now: Instant) {
        // Finished in place and then dropped (its buffer taken): the hold
        // is not moved out of the flow entry first.
        let Some(f) = self.flows.get_mut(idx) else { return };
        let Some(h) = f.merge.held.as_mut() else { return };
        let (cap, len, since) = (h.cap, h.len, h.since);
        let (buf, start, end) = h.finish(last_flags);
        f.merge.held = None;
        self.holds.reserved -= cap;
        self.holds.bytes -= len;
        self.counters.hold.record(now.saturating_duration_since(since).as_micros() as u64);
        if let Some(r) = reason {
            self.counters.flush[r as usize] += 1;
        }
        self.counters.merged_out += 1;
        self.counters.inner_tcp_data_out += 1;
        self.counters.inner_tcp_full_out += (len == cap) as u64;
        self.queue(Transmit { port: Port::Inner, buf, start, end, meta: PacketMeta::PLAIN });
    }
}
