//! The kernel fast path's contract with the engine (issue 28): what the
//! engine asks a datapath to carry, and what the datapath reports back.
//!
//! The engine is the only decision maker. It offloads an established bulk
//! flow to a [`Datapath`] (in `px gateway`, a TC program on each port that
//! changes a GRO super-packet's segment size and redirects it to the other
//! port) and takes it back when anything unusual happens. The datapath
//! never creates a flow: it only carries what it was given, hands a
//! direction back ([`Progress::returned`]) on what it does not handle, and
//! forwards unchanged, as a router would, a segment from outside that lies
//! outside what the inner host allows (the engine's own rule,
//! [`ReceiveWindow::admits`](crate::ReceiveWindow::admits), with the
//! window the datapath keeps from the inner host's packets).
//!
//! This leaf holds the types and the per-flow state (`FastState`); the
//! engine's side (when a flow goes to the kernel and comes back) is
//! `engine::fast_path`. A [`Datapath`] is the engine's only I/O-facing
//! interface besides its frames: it is called rarely (install, withdraw,
//! and for the few packets of an offloaded flow that reach user space),
//! never per forwarded packet, and tests give the engine a fake one.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::conntrack::{Conn, ReceiveWindow};
use crate::flow::FlowKey;
use crate::port::Port;
use crate::segment::Layout;

/// What the datapath is to do with one direction of an offloaded flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Direction {
    /// The port its packets arrive on (they leave by the other).
    pub from: Port,
    /// Payload of each segment on the egress: a super-packet is re-cut to
    /// this size if it carries more (the engine's `segment_limit`).
    pub segment: u16,
    /// The TCP header length (with options) `segment` was computed for: a
    /// data segment with another header length is handed back (its
    /// options would make a segment of `segment` bytes too big).
    pub tcp_header_len: u8,
    /// Where the stream is: the end of the furthest data seen. Segments
    /// from outside are checked against it and the inner host's window.
    pub next_seq: u32,
}

/// What to offload of a flow: either direction or both. Each direction
/// goes on its own terms (its data's GRO batches), and comes back alone
/// unless the connection's state changes (SYN, FIN, RST, URG). The
/// datapath keys the flow as the engine does; a packet that arrives on the
/// other port than its direction's is not the flow's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offload {
    pub key: FlowKey,
    pub inbound: Option<Direction>,
    pub outbound: Option<Direction>,
    /// What the inner host allows the outer host to send now; the
    /// datapath keeps it up to date from the inner host's packets, with
    /// `inner_shift` (RFC 7323), and takes nothing from outside beyond it
    /// as the connection's ([`ReceiveWindow::admits`]).
    pub receiver: ReceiveWindow,
    pub inner_shift: u8,
}

impl Offload {
    /// The directions to offload.
    pub fn directions(&self) -> impl Iterator<Item = &Direction> {
        self.inbound.iter().chain(self.outbound.iter())
    }
}

/// Why a datapath handed a direction back to user space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReturnReason {
    /// SYN, FIN, RST, URG, or CWR on a super-packet.
    Flags,
    /// A TCP option the fast path does not pass, or a data segment whose
    /// header length differs from the one its segment size was made for.
    Options,
    /// One segment too big for the egress that only the engine can cut.
    Lone,
    /// The kernel refused to change the segment size.
    Adjust,
    /// Anything else the datapath reports.
    Other,
}

impl ReturnReason {
    /// Every reason, in counter order.
    pub const ALL: [ReturnReason; 5] =
        [ReturnReason::Flags, ReturnReason::Options, ReturnReason::Lone, ReturnReason::Adjust, ReturnReason::Other];

    /// Its name in metrics and status output.
    pub fn name(self) -> &'static str {
        match self {
            ReturnReason::Flags => "flags",
            ReturnReason::Options => "options",
            ReturnReason::Lone => "lone",
            ReturnReason::Adjust => "adjust",
            ReturnReason::Other => "other",
        }
    }
}

/// What a datapath did with one direction since it was installed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// The end of the furthest data it carried (or the value installed).
    pub next_seq: u32,
    /// How far `next_seq` moved since the install, in bytes: 64 bits, so
    /// that a direction that carried more than 2 GiB (where a 32-bit
    /// comparison wraps) still catches the engine up.
    pub advanced: u64,
    /// The last ACK its packets carried (of the other direction's data).
    pub ack: u32,
    /// Handed back to user space (and why); `None`: still carried.
    pub returned: Option<ReturnReason>,
    /// Packets it carried (a super-packet counts once), the wire segments
    /// they arrived as and left as, the full-sized ones of those, and their
    /// TCP payload bytes.
    pub packets: u64,
    pub segs_in: u64,
    pub segs_out: u64,
    pub full_out: u64,
    pub bytes: u64,
    /// Of `segs_out`, those with payload.
    pub data_out: u64,
}

/// What a datapath did with a flow: each direction it carries (or handed
/// back), and what the inner host allows now, as it saw the inner host's
/// packets (all of them, whichever side carried them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowProgress {
    /// By the port the direction's packets arrive on (`Port as usize`);
    /// `None`: a direction the engine carries.
    pub dirs: [Option<Progress>; 2],
    pub receiver: ReceiveWindow,
}

impl FlowProgress {
    /// The direction arriving on `from`, if the datapath carries it.
    pub fn dir(&self, from: Port) -> Option<&Progress> {
        self.dirs[from as usize].as_ref()
    }
}

/// Why a datapath refused a flow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstallError {
    /// Its flow table is full.
    #[error("the fast path's flow table is full")]
    Full,
    /// Anything else (the message says what).
    #[error("{0}")]
    Failed(String),
}

/// A kernel (or fake) datapath the engine offloads flows to.
pub trait Datapath: Send + core::fmt::Debug {
    /// Starts carrying the directions of `o` (a new flow, or another
    /// direction of one it carries).
    fn install(&mut self, o: &Offload) -> Result<(), InstallError>;
    /// What it did with a flow, if it carries a direction of it.
    fn progress(&self, key: &FlowKey) -> Option<FlowProgress>;
    /// Stops carrying the direction arriving on `from` (the flow leaves the
    /// datapath once it carries neither); returns what it had done with
    /// the flow.
    fn withdraw(&mut self, key: &FlowKey, from: Port) -> Option<FlowProgress>;
}

/// Where one flow stands with the fast path, and the fast path's policy
/// for it, as quinn-proto's `MtuDiscovery` owns its own: the engine
/// reports events (`on_data`, `on_queued`, `on_installed`,
/// `on_returned`, `on_reclaimed`, `on_window_read`, `on_kernel_packets`)
/// and asks for a [`plan`](FastState::plan); it never reads or sets the
/// fields.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FastState {
    /// Carried (in one direction or both) by the datapath since this moment.
    since: Option<Instant>,
    /// The directions the datapath carries, by the port they arrive on
    /// (`Port as usize`: outbound, inbound).
    dirs: [Option<Direction>; 2],
    /// Wire data segments seen in user space since the flow was last
    /// installed or handed back (a super-packet counts its segments).
    segments: u32,
    /// Packets the datapath had carried at the last look (idle checks).
    seen_packets: u64,
    /// When the inner host's window was last read from the datapath
    /// (while the datapath carries its packets and a segment from outside
    /// lay beyond the engine's copy): at most once per
    /// [`WINDOW_READ_EVERY`].
    window_read_at: Option<Instant>,
    /// When it was last handed back, and how many times in a row it came
    /// back soon after being installed (backoff).
    returned_at: Option<Instant>,
    quick_returns: u32,
    /// Waiting in the engine's list for the next quiet moment.
    pending: bool,
    /// Header layout of the last data segment each way (outer → inner,
    /// inner → outer): what the segment sizes are computed for.
    layout_in: Option<Layout>,
    layout_out: Option<Layout>,
    /// What GRO made of the flow's data in user space, since it last came
    /// back: inbound data packets and their payload (the kernel can only
    /// re-cut what GRO batched: a flow whose super-packets hold less than
    /// one inner segment on average merges better in the engine);
    /// outbound data packets, and those that were one segment too big for
    /// the egress (which the kernel hands back). Halved past
    /// [`BATCH_WINDOW`] packets, so they follow the flow.
    in_packets: u32,
    in_bytes: u64,
    out_packets: u32,
    out_lone: u32,
}

/// How often the engine may read the inner host's window from the
/// datapath for one flow: a segment from outside beyond its own copy
/// triggers the read, and a blind sender must not turn each of its
/// packets into a system call.
pub(crate) const WINDOW_READ_EVERY: Duration = Duration::from_millis(1);

/// Packets each way [`FastState`]'s batch figures cover before they are
/// halved.
const BATCH_WINDOW: u32 = 256;

/// At most one outbound data packet in this many may be a lone segment
/// too big for the egress for the outbound direction to go to the kernel
/// (each one the kernel meets hands the direction back).
const MAX_LONE_ONE_IN: u32 = 100;

/// Shortest wait before a flow that came back goes to the kernel again;
/// doubled for each quick return in a row, up to [`MAX_BACKOFF`].
pub(crate) const MIN_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// A flow that stayed in the kernel this long came back for a reason of
/// its own, not because it flaps: its backoff starts over.
const STABLE: Duration = Duration::from_secs(1);

/// One data segment (or super-packet) of a flow, handled in user space.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Data {
    /// The port it arrived on.
    pub from: Port,
    /// Its TCP payload, and the wire segments it stands for.
    pub payload: usize,
    pub segments: u32,
    /// Its header layout.
    pub layout: Layout,
    /// One segment too big for the egress, which the kernel would hand
    /// back (outbound only).
    pub lone: bool,
}

/// What the engine knows of a flow besides its fast-path state, for a
/// [`FastState::plan`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlowFacts<'a> {
    pub key: &'a FlowKey,
    pub conn: &'a Conn,
    /// Segments seen in user space before a flow may go
    /// ([`Config::fast_path_after`](crate::Config::fast_path_after)).
    pub after: u32,
    /// The engine holds inbound data of the flow that must leave before
    /// the inbound direction goes.
    pub holds: bool,
}

impl FastState {
    /// Whether the datapath carries a direction of the flow.
    pub fn in_kernel(&self) -> bool {
        self.dirs.iter().any(Option::is_some)
    }

    /// The direction arriving on `from`, if the datapath carries it.
    pub fn dir(&self, from: Port) -> Option<&Direction> {
        self.dirs[from as usize].as_ref()
    }

    /// A data segment handled in user space: counts toward the offload
    /// and follows what GRO makes of each direction's data.
    pub fn on_data(&mut self, d: &Data) {
        match d.from {
            Port::Outer => {
                if self.in_packets >= BATCH_WINDOW {
                    self.in_packets /= 2;
                    self.in_bytes /= 2;
                }
                self.in_packets += 1;
                self.in_bytes += d.payload as u64;
                self.layout_in = Some(d.layout);
            }
            Port::Inner => {
                if self.out_packets >= BATCH_WINDOW {
                    self.out_packets /= 2;
                    self.out_lone /= 2;
                }
                self.out_packets += 1;
                self.out_lone += d.lone as u32;
                self.layout_out = Some(d.layout);
            }
        }
        self.segments = self.segments.saturating_add(d.segments);
    }

    /// Whether the engine should ask for a [`plan`](FastState::plan) and
    /// queue the flow: it carried `after` segments in user space and does
    /// not wait yet.
    pub fn due(&self, after: u32) -> bool {
        !self.pending && self.segments >= after
    }

    /// The flow waits in the engine's list for the next quiet moment.
    pub fn on_queued(&mut self) {
        self.pending = true;
    }

    /// The flow left the engine's list (its quiet moment came).
    pub fn on_dequeued(&mut self) {
        self.pending = false;
    }

    /// What the datapath would be asked to take of the flow at `now`: the
    /// directions it does not carry yet that qualify, if any, each cut to
    /// `segment(from, layout)` (the engine's own segment size for the
    /// direction arriving on `from` with that header layout).
    ///
    /// A flow qualifies once it carried enough in user space, with its
    /// handshake seen both ways with both MSSs, established, not signed,
    /// not AccECN, no FIN or RST, its expected sequence and the inner
    /// host's window known, and its backoff over. The inbound direction
    /// goes if GRO batches at least one inner segment per super-packet and
    /// nothing is held; the outbound one if lone segments too big for the
    /// egress are rare.
    ///
    /// `Err`: why nothing of the flow qualifies now (what `px status` says
    /// of a flow the datapath does not carry), the first condition that
    /// fails, named.
    pub fn plan(
        &self,
        now: Instant,
        f: &FlowFacts<'_>,
        segment: impl Fn(Port, &Layout) -> usize,
    ) -> Result<Offload, &'static str> {
        let (c, l) = (f.conn, &f.conn.life);
        let why = if l.signed {
            Some("signed (TCP-MD5/AO): passed untouched")
        } else if c.handshake.accecn {
            Some("AccECN")
        } else if l.reset || l.fin_outer || l.fin_inner {
            Some("closing")
        } else if c.handshake.inner_mss.is_none() || c.handshake.outer_mss.is_none() {
            Some("handshake not seen both ways")
        } else if !l.established {
            Some("not established")
        } else if !self.backoff_over(now) {
            Some("waiting after a hand-back")
        } else if self.segments < f.after {
            Some("fewer segments than fast_path_after so far")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(why);
        }
        let next_in = c.next_in.ok_or("inbound sequence not known yet")?;
        // The datapath checks segments from outside against the inner
        // host's window as the engine does: it must be known.
        let receiver = c.receiver.ok_or("the inner host's window not known yet")?;
        let inner_shift = c.handshake.inner_shift().ok_or("the inner host's window scale not known")?;
        let (layout_in, layout_out) = self.layouts().ok_or("no data segment seen yet")?;
        let seg_in = segment(Port::Outer, &layout_in);
        let seg_out = segment(Port::Inner, &layout_out);
        let tcp_len = |l: &Layout| (px_wire::tcp::MIN_HEADER_LEN + l.options as usize) as u8;
        let inbound =
            (self.dir(Port::Outer).is_none() && !f.holds && self.inbound_suits_kernel(seg_in)).then(|| Direction {
                from: Port::Outer,
                segment: seg_in.min(u16::MAX as usize) as u16,
                tcp_header_len: tcp_len(&layout_in),
                next_seq: next_in.0,
            });
        let outbound = (self.dir(Port::Inner).is_none() && self.outbound_suits_kernel()).then(|| Direction {
            from: Port::Inner,
            segment: seg_out.min(u16::MAX as usize) as u16,
            tcp_header_len: tcp_len(&layout_out),
            next_seq: c.windows.seq_out.end().unwrap_or(0),
        });
        if inbound.is_none() && outbound.is_none() {
            return Err(if self.in_kernel() {
                "in the kernel"
            } else if !self.inbound_suits_kernel(seg_in) {
                "its inbound GRO batches hold less than one inner segment (the engine merges them better)"
            } else {
                "data held"
            });
        }
        Ok(Offload { key: *f.key, inbound, outbound, receiver, inner_shift })
    }

    /// The datapath took `plan` at `now`. Whether the flow is new to the
    /// datapath (it carried no direction of it before).
    pub fn on_installed(&mut self, plan: &Offload, now: Instant) -> bool {
        let new = !self.in_kernel();
        if new {
            self.since = Some(now);
            self.seen_packets = 0;
        }
        for d in plan.directions() {
            self.dirs[d.from as usize] = Some(*d);
        }
        new
    }

    /// Whether a segment size the datapath was given is no longer
    /// `segment(from, layout)` (a path MTU learned since).
    pub fn stale(&self, segment: impl Fn(Port, &Layout) -> usize) -> bool {
        let Some((lin, lout)) = self.layouts() else { return false };
        self.dirs.iter().flatten().any(|d| {
            let layout = if d.from == Port::Outer { &lin } else { &lout };
            segment(d.from, layout) != d.segment as usize
        })
    }

    /// Whether the engine may read the inner host's window from the
    /// datapath at `now`: the datapath carries the inner host's packets,
    /// and the last read is [`WINDOW_READ_EVERY`] old.
    pub fn window_read_due(&self, now: Instant) -> bool {
        self.dir(Port::Inner).is_some()
            && self.window_read_at.is_none_or(|t| now.saturating_duration_since(t) >= WINDOW_READ_EVERY)
    }

    /// The engine read the inner host's window from the datapath at `now`.
    pub fn on_window_read(&mut self, now: Instant) {
        self.window_read_at = Some(now);
    }

    /// The datapath has carried `packets` of the flow so far: whether it
    /// moved since the last look (the flow is busy in the kernel).
    pub fn on_kernel_packets(&mut self, packets: u64) -> bool {
        let moved = packets > self.seen_packets;
        self.seen_packets = self.seen_packets.max(packets);
        moved
    }

    /// The direction arriving on `from` came back alone at `now` (the
    /// other may stay in the kernel): for a lone segment, without a
    /// backoff (whether it goes again is the outbound batch figures'
    /// call), otherwise with one, as a whole flow's. Whether the datapath
    /// still carries the other.
    pub fn on_returned(&mut self, from: Port, now: Instant, lone: bool) -> bool {
        self.dirs[from as usize] = None;
        if !self.in_kernel() {
            self.on_reclaimed(now, lone);
            return false;
        }
        if !lone {
            self.start_backoff(now);
        }
        true
    }

    /// The flow came back from the kernel at `now`. A flow that came back
    /// only for a lone segment too big for the egress (which the engine
    /// cuts, and which the kernel cannot) is still the bulk flow it was:
    /// it may go again at the next quiet moment, without a backoff.
    pub fn on_reclaimed(&mut self, now: Instant, lone: bool) {
        if !lone {
            self.start_backoff(now);
        }
        self.since = None;
        self.dirs = [None, None];
        self.seen_packets = 0;
        self.window_read_at = None;
        self.pending = false;
        if lone {
            return;
        }
        self.segments = 0;
        self.in_packets = 0;
        self.in_bytes = 0;
        self.out_packets = 0;
        self.out_lone = 0;
    }

    /// Whether what GRO makes of the inbound data suits the kernel: its
    /// super-packets carry on average at least `segment` bytes (one full
    /// inner segment). No data (the ACKs of an outbound flow): yes.
    fn inbound_suits_kernel(&self, segment: usize) -> bool {
        self.in_packets == 0 || self.in_bytes >= self.in_packets as u64 * segment as u64
    }

    /// Whether the outbound data suits the kernel: few of its packets are
    /// lone segments too big for the egress.
    fn outbound_suits_kernel(&self) -> bool {
        self.out_lone * MAX_LONE_ONE_IN <= self.out_packets
    }

    /// Whether the backoff after the last return has passed at `now`.
    fn backoff_over(&self, now: Instant) -> bool {
        let Some(t) = self.returned_at else { return true };
        let wait = MIN_BACKOFF.saturating_mul(1 << self.quick_returns.saturating_sub(1).min(16)).min(MAX_BACKOFF);
        now.saturating_duration_since(t) >= wait
    }

    /// A return at `now` that waits a backoff: doubled if it came soon
    /// after the flow went to the kernel, from the shortest if it stayed
    /// [`STABLE`]. Reads `since`: before it is cleared.
    fn start_backoff(&mut self, now: Instant) {
        let stayed = self.since.map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
        self.quick_returns = if stayed >= STABLE { 0 } else { self.quick_returns.saturating_add(1) };
        self.returned_at = Some(now);
    }

    /// The header layouts the segment sizes are computed for, inbound and
    /// outbound: each direction's own, or the other's while it has carried
    /// no data.
    fn layouts(&self) -> Option<(Layout, Layout)> {
        let inbound = self.layout_in.or(self.layout_out)?;
        Some((inbound, self.layout_out.unwrap_or(inbound)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_for_quick_returns_and_starts_over_after_a_stable_stay() {
        let t0 = Instant::now();
        let mut s = FastState { since: Some(t0), ..FastState::default() };
        s.on_reclaimed(t0 + Duration::from_millis(1), false);
        assert_eq!(s.quick_returns, 1);
        let back = t0 + Duration::from_millis(1);
        assert!(!s.backoff_over(back + Duration::from_millis(4)));
        assert!(s.backoff_over(back + Duration::from_millis(5)));
        s.since = Some(back);
        s.on_reclaimed(back + Duration::from_millis(1), false);
        assert_eq!(s.quick_returns, 2);
        let back = back + Duration::from_millis(1);
        assert!(!s.backoff_over(back + Duration::from_millis(9)));
        assert!(s.backoff_over(back + Duration::from_millis(10)));
        for _ in 0..40 {
            s.since = s.returned_at;
            let t = s.returned_at.unwrap() + Duration::from_millis(1);
            s.on_reclaimed(t, false);
        }
        let t = s.returned_at.unwrap();
        assert!(s.backoff_over(t + MAX_BACKOFF), "capped");
        s.since = Some(t);
        s.on_reclaimed(t + STABLE, false);
        assert_eq!(s.quick_returns, 0);
        assert!(s.backoff_over(t + STABLE + MIN_BACKOFF));
    }

    #[test]
    fn a_lone_segment_costs_no_backoff_and_keeps_the_count() {
        let t0 = Instant::now();
        let mut s = FastState { since: Some(t0), segments: 100, ..FastState::default() };
        s.on_reclaimed(t0 + Duration::from_micros(10), true);
        assert!(!s.in_kernel());
        assert!(s.backoff_over(t0 + Duration::from_micros(10)));
        assert_eq!((s.segments, s.quick_returns), (100, 0));
        s.since = Some(t0);
        s.on_reclaimed(t0 + Duration::from_micros(20), false);
        assert_eq!((s.segments, s.quick_returns), (0, 1));
    }
}
