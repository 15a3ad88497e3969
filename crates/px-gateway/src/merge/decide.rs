//! The merge decision: whether an inbound segment joins a hold, and if not,
//! the one reason it passes on (as Linux's `tcp_gro_receive` builds one
//! flush reason). Bulk detection (in-order full-sized segments in a
//! row), the flags and events that flush (FIN, PSH for flows that wait after
//! it, control flags, pure ACKs, reordering, a segment that cannot join),
//! the hold deadline and memory pressure (the oldest holds go first) are
//! decided here; the engine carries the decision out (`engine/inbound.rs`,
//! `engine/hold.rs`), and [`super::held`] is the segment being filled and decides which
//! pieces may join (ECN, flags, options, timestamps).
//!
//! PSH (issue 11; the reasoning and measurements are in docs/merge.md).
//! RFC 1122 §4.2.2.2: PSH is not a record marker, a receiver may merge
//! across it. What the anchors do: Linux GRO merges the PSH segment into
//! the aggregate and then flushes; DPDK GRO 22.11 does not merge PSH
//! segments at all, 24.03+ merges them and flushes at the next timeout;
//! FreeBSD LRO merges across PSH; mlx5 hardware LRO ORs PSH into the
//! aggregate and holds for 32 µs. The gateway is in the LRO class (what it
//! merges is never cut back downstream), so:
//! - the PSH segment always joins the aggregate, and the merged segment
//!   that holds the PSH'd byte (its last) carries PSH;
//! - a flow whose recent PSHs were followed by more data within the merge
//!   timeout (a bulk sender: Linux sets PSH at the end of every write, about
//!   every 64 KB, and the next write follows at once) merges on across PSH,
//!   within the hold bound: flushing there caps the yield near 7/8;
//! - a flow whose PSH was followed by silence, or by data from the inner
//!   host (request/response: the sender waits for an answer; on a short
//!   path the next answer may come well within the timeout, but only after
//!   the inner host asked for it), flushes at the PSH, so an answer never
//!   waits for data that will not come. A flow with no history yet flushes.
//!
//! A PSH that rides waits for more data at most [`PSH_GRACE`] (32 µs, as
//! mlx5 LRO holds), not the whole merge timeout: a bulk sender's next
//! segment is microseconds behind, and an answer whose end was taken for
//! bulk waits no longer than that. A steady bulk sender ([`STEADY_BULK`]:
//! eight PSHs in a row followed by its own data in time, no data from the
//! inner host) waits up to the merge timeout: its write often ends a TSO
//! burst, and the next write comes a burst period later.
//!
//! The evidence is per flow ([`PshHistory`]): whether the last two
//! PSHs were followed by more data within the merge timeout with no data
//! from the inner host since. Two, not one: a sender pushes in the middle
//! of a large write too (Linux forces PSH when half a window is unpushed),
//! so one PSH followed by data may still be inside an answer; two in a row
//! since the last request are a bulk transfer (`px lab rr` measured the
//! difference: with one, every 64 KB answer's end waited the PSH grace). A bulk flow that turns interactive is held at
//! most once more (and at most the timeout); a PSH at the end of a TSO
//! burst followed by a pause costs a bulk flow one early flush, not a wait.

use std::time::{Duration, Instant};

use px_wire::checksum::Sum;
use px_wire::offload::{Checksum, PacketMeta};
use px_wire::tcp::flags;

use super::held::{Held, holdable};
use crate::config::{Config, PshPolicy};
use crate::counters::FlushReason;
use crate::segment::Seg;

/// Smallest segment that counts as full-sized for bulk detection: the
/// default MSS every IPv4 host may send (RFC 9293 §3.7.1). A flow of smaller
/// segments in a row is interactive, not bulk, and is never held.
pub(crate) const BULK_MIN_PAYLOAD: u32 = 536;

/// Longest a pushed byte waits under adaptive PSH (if the merge timeout is
/// not shorter). A bulk sender's next segment after a PSH is in the same
/// burst, microseconds away, so merging goes on; the end of an answer that
/// the flow's history mistook for bulk (an answer written in two writes:
/// the first PSH was followed by more data) waits no longer than this. It
/// is the hold of mlx5's hardware LRO, which ORs PSH into the aggregate.
pub const PSH_GRACE: std::time::Duration = std::time::Duration::from_micros(32);

/// The PSH history of a steady bulk sender: each of its last eight PSHs was
/// followed by more of its data within the merge timeout, with no data from
/// the inner host since. Its riding PSH waits up to the merge timeout, not
/// [`PSH_GRACE`]: a sender whose writes end at a TSO burst's end sends the
/// next write a burst period later (0.26–0.52 ms at 1–2 Gbps), and cutting
/// there costs a short segment every write. An answer could look like this
/// only after eight pushes inside it (Linux pushes when half the largest
/// window is unsent) with no request since, that is a download of several
/// windows; its end waits at most the merge timeout, once, and the next
/// request from the inner host clears the history.
const STEADY_BULK: u8 = u8::MAX;

/// What a flow's PSHs were followed by (adaptive PSH): when the last PSH
/// not yet followed by data arrived, and one bit per earlier PSH, newest in
/// bit 0: 1 if more of the sender's data came within the merge timeout with
/// no data from the inner host in between.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PshHistory {
    pending: Option<Instant>,
    followed: u8,
}

impl PshHistory {
    /// Data from the outer host: the pending PSH, if any, was followed by
    /// it (in time, or not); a PSH on this data is pending from now.
    #[inline]
    fn on_outer_data(&mut self, now: Instant, psh: bool, timeout: Duration) {
        if let Some(t) = self.pending.take() {
            let kept_coming = now.saturating_duration_since(t) <= timeout;
            self.followed = self.followed << 1 | kept_coming as u8;
        }
        if psh {
            self.pending = Some(now);
        }
    }

    /// Data from the inner host: the conversation goes both ways (a
    /// request, an answer), so the outer sender's next PSH may well be the
    /// end of the answer it waits for. A PSH still unanswered by more data
    /// was answered by the inner host first: "followed by a wait". The two
    /// latest outcomes are cleared, so the next PSH flushes.
    pub fn on_inner_data(&mut self) {
        if self.pending.take().is_some() {
            self.followed <<= 1;
        }
        self.followed &= !0b11;
    }

    /// The last two PSHs were each followed by more data in time: a bulk
    /// sender, whose PSH may ride.
    #[inline]
    fn bulk_sender(&self) -> bool {
        self.followed & 0b11 == 0b11
    }

    /// The last eight were ([`STEADY_BULK`]): a riding PSH may wait the
    /// whole merge timeout, not only [`PSH_GRACE`].
    pub fn steady_bulk(&self) -> bool {
        self.followed == STEADY_BULK
    }
}

/// A flow's inbound merge state: bulk detection, the PSH history and the
/// segment being filled.
#[derive(Debug, Default)]
pub(crate) struct MergeState {
    /// Largest inbound payload seen, and in-order segments of that size in
    /// a row; bulk once the run is long enough (`Config::bulk_after`).
    pub max_payload: u32,
    pub full_run: u16,
    pub bulk: bool,
    pub psh: PshHistory,
    pub held: Option<Held>,
}

impl MergeState {
    /// The outer host's stream starts anew (a new connection): bulk is
    /// detected again. What is held is the engine's to flush.
    pub fn restart(&mut self) {
        self.bulk = false;
        self.full_run = 0;
        self.max_payload = 0;
    }

    /// Bulk detection: in-order segments of the flow's largest size in a
    /// row (a GRO super-packet counts as the segments it was made of).
    #[inline]
    fn count_run(&mut self, in_order: bool, unit: u32, len: usize, bulk_after: u16) {
        if in_order && unit >= self.max_payload && unit >= BULK_MIN_PAYLOAD {
            if unit > self.max_payload {
                self.max_payload = unit;
                self.full_run = 0;
            }
            // A plain segment is one of its own size: no division (a
            // dozen cycles) on every segment.
            let segments = if len as u32 == unit { 1 } else { (len as u32 / unit).max(1) };
            self.full_run = self.full_run.saturating_add(segments as u16);
            if self.full_run >= bulk_after {
                self.bulk = true;
            }
        } else if !in_order {
            self.full_run = 0;
        }
    }
}

/// Why an inbound segment passes on instead of joining a hold; each is one
/// flush reason for what the flow holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// SYN, RST, URG, or CWR in a classic ECN flow (RFC 3168: a signal on
    /// one segment, as Linux GRO flushes on it).
    Control,
    /// No payload.
    PureAck,
    /// Not where the stream was expected to go on.
    OutOfOrder,
    /// The flow is not bulk, or the segment's options cannot be merged.
    NotBulk,
    /// Its checksum does not verify: it passes as it came, for the
    /// receiver to drop.
    BadChecksum,
    /// One segment already fills what the flow may receive (the safe size
    /// of a flow whose SYN was not seen, or an inner MSS no larger than
    /// the outer one).
    NothingToGain,
}

impl Pass {
    /// The flush reason it counts as.
    pub fn flush_reason(self) -> FlushReason {
        match self {
            Pass::Control => FlushReason::ControlFlag,
            Pass::PureAck => FlushReason::PureAck,
            Pass::OutOfOrder => FlushReason::OutOfOrder,
            Pass::NotBulk | Pass::BadChecksum | Pass::NothingToGain => FlushReason::Unmergeable,
        }
    }
}

/// How a segment joins the flow's hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// The sum of its payload.
    pub whole: Sum,
    /// The flags that end the merge on its last byte: FIN always, PSH
    /// unless it rides.
    pub ends: u8,
    /// The hold cannot take it (headers, options, flags differ): the hold
    /// leaves first.
    pub flush_first: bool,
}

/// What an inbound segment of a flow whose connection is tracked does:
/// join the hold ([`Plan`]) or pass on ([`Pass`]). Updates the flow's bulk
/// detection and PSH history on the way. `in_order`: the segment starts
/// where the stream was expected to go on; `accecn`: CWR is an ACE bit,
/// not a signal; `cap`: the most payload one segment toward the inner host
/// may carry; `known`: the payload's sum, if already computed.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn decide(
    m: &mut MergeState,
    cfg: &Config,
    now: Instant,
    frame: &[u8],
    seg: &Seg,
    meta: PacketMeta,
    in_order: bool,
    accecn: bool,
    cap: usize,
) -> Result<Plan, Pass> {
    let cwr = if accecn { 0 } else { flags::CWR };
    if seg.flags & (flags::SYN | flags::RST | flags::URG | cwr) != 0 {
        return Err(Pass::Control);
    }
    let len = seg.payload_len();
    if len > 0 {
        m.psh.on_outer_data(now, seg.has(flags::PSH), cfg.merge_timeout);
    }
    let psh_rides = match cfg.psh {
        PshPolicy::Flush => false,
        PshPolicy::Hold => true,
        PshPolicy::Adaptive => m.psh.bulk_sender(),
    };
    if len == 0 {
        return Err(Pass::PureAck);
    }
    let unit = meta.tcp_gso_size().map(|g| g as usize).filter(|g| *g > 0).unwrap_or(len).min(len) as u32;
    m.count_run(in_order, unit, len, cfg.bulk_after);
    if !in_order {
        return Err(Pass::OutOfOrder);
    }
    if !m.bulk || !holdable(seg) {
        return Err(Pass::NotBulk);
    }
    let whole = match meta.csum {
        Checksum::Unknown if cfg.verify_checksums => {
            if !seg.checksum_ok(frame) {
                return Err(Pass::BadChecksum);
            }
            seg.payload_sum_from_checksum(frame)
        }
        _ => seg.payload_sum_from_checksum(frame),
    };
    let flush_first = m.held.as_ref().is_some_and(|h| !h.accepts(frame, seg));
    if cap < len.min(64) || cap <= unit as usize {
        return Err(Pass::NothingToGain);
    }
    let ends = if psh_rides { flags::FIN } else { flags::PSH | flags::FIN };
    Ok(Plan { whole, ends, flush_first })
}
