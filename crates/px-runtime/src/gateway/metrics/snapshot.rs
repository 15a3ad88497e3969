//! What the workers publish and a scrape reads: each worker's snapshot of
//! its engine's counters (replaced whole a few times a second, never
//! written per packet), the process' own counts, and [`Scrape`], all of
//! them read once so that one exposition is consistent with itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use px_gateway::{Counters, FlowView, Port, PortCounters};
use px_io::PacketMeta;

/// One worker's published state.
#[derive(Debug, Clone, Default)]
pub struct WorkerSnapshot {
    /// The engine's counters. Its per-port packet counts are of frames
    /// crossing the packet sockets: a GRO or GSO super-packet counts once.
    pub counters: Counters,
    /// What crossed each port's wire, as `ip -s link` counts it (indexed
    /// by `Port as usize`): each super-packet counted as the frames GRO
    /// made it of or GSO cuts it into ([`px_wire::offload::wire_count`]).
    /// Sent frames are counted when handed to the kernel (those it then
    /// refuses are `send_errors`).
    pub wire: [PortCounters; 2],
    /// In the gateway's totals only ([`Shared::total`]): the kernel fast
    /// path's share of `wire` (what its program redirected, which no
    /// worker sees), by `Port as usize`.
    pub kernel_wire: [PortCounters; 2],
    pub flows: usize,
    pub held_bytes: usize,
    /// Frames the kernel reported dropped on our sockets, and send failures.
    pub socket_drops: u64,
    pub send_errors: u64,
    /// Frames that came in truncated or with a bad vnet header.
    pub rx_errors: u64,
    /// Capture records given up because the capture queue was full (the
    /// packets themselves went on).
    pub capture_dropped: u64,
    /// The merge timeout the worker's engine runs with now (it changes on
    /// a reload), in µs.
    pub merge_timeout_us: u64,
    /// Flows the kernel fast path carries for this worker now.
    pub in_kernel: usize,
    /// What the kernel fast path's program did with the packets it saw,
    /// by [`crate::fast_path::REASONS`] (in the gateway's final total only).
    pub kernel_reasons: Option<[u64; crate::fast_path::REASONS.len()]>,
    /// The engine's largest flows (`px status`), made only when asked for:
    /// the answer to request number `flows_answered` of
    /// [`ProcessCounters::flows_wanted`].
    pub largest_flows: Vec<FlowView>,
    pub flows_answered: u64,
    /// Time the worker spent in receive rounds that moved at least one
    /// frame, and in its whole loop, in ns: a polling worker (DPDK) is
    /// always 100 % busy to the kernel; this is how busy it really was.
    pub busy_ns: u64,
    pub loop_ns: u64,
    /// From the start of the first round that moved a frame to the end of
    /// the last one, in ns: the span `busy_ns` is measured against, as
    /// the DPDK benchmark's reference forwarders measure theirs.
    pub active_ns: u64,
}

impl WorkerSnapshot {
    /// Counts `frame` (with `meta`) as received on `port`'s wire.
    pub fn count_wire_rx(&mut self, port: Port, frame: &[u8], meta: &PacketMeta) {
        let w = px_wire::offload::wire_count(frame, meta);
        let pc = &mut self.wire[port as usize];
        pc.rx_packets += w.packets;
        pc.rx_bytes += w.bytes;
    }

    /// Counts `frame` (with `meta`) as sent out of `port`'s wire.
    pub fn count_wire_tx(&mut self, port: Port, frame: &[u8], meta: &PacketMeta) {
        let w = px_wire::offload::wire_count(frame, meta);
        let pc = &mut self.wire[port as usize];
        pc.tx_packets += w.packets;
        pc.tx_bytes += w.bytes;
    }

    /// What crossed `port`'s wire.
    pub fn wire(&self, port: Port) -> &PortCounters {
        &self.wire[port as usize]
    }
}

/// Counts of the gateway process rather than of a worker.
#[derive(Debug, Default)]
pub struct ProcessCounters {
    /// Capture records written, and those lost to write errors.
    pub capture_written: AtomicU64,
    pub capture_write_errors: AtomicU64,
    /// Configuration reloads, by [`ReloadResult`].
    pub reloads: [AtomicU64; 3],
    /// Requests for the workers' largest flows (`px status`), numbered: a
    /// worker that has not answered the latest lists its flows at its
    /// next publication (a scan of its flow table, never per packet).
    pub flows_wanted: AtomicU64,
    /// Times each port (by `Port as usize`) lost its carrier.
    pub carrier_lost: [AtomicU64; 2],
    /// Times link-fault pass-through took each port down.
    pub link_fault_downs: [AtomicU64; 2],
    /// 1 while link-fault pass-through holds the port down.
    pub held_down: [AtomicU64; 2],
    /// Each port's link as last looked at: [`LINK_UNKNOWN`] (not
    /// watched: the DPDK datapath), [`LINK_UP`], [`LINK_NO_CARRIER`],
    /// [`LINK_DOWN`] (administratively).
    pub link_state: [AtomicU64; 2],
}

/// Values of [`ProcessCounters::link_state`].
pub const LINK_UNKNOWN: u64 = 0;
pub const LINK_UP: u64 = 1;
pub const LINK_NO_CARRIER: u64 = 2;
pub const LINK_DOWN: u64 = 3;

/// How a configuration reload (SIGHUP) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadResult {
    /// The new configuration runs.
    Applied = 0,
    /// It changes something that cannot change while running; the old one stays.
    Refused = 1,
    /// It could not be read or is invalid; the old one stays.
    Invalid = 2,
}

impl ReloadResult {
    pub const ALL: [ReloadResult; 3] = [ReloadResult::Applied, ReloadResult::Refused, ReloadResult::Invalid];

    pub fn name(self) -> &'static str {
        match self {
            ReloadResult::Applied => "applied",
            ReloadResult::Refused => "refused",
            ReloadResult::Invalid => "invalid",
        }
    }
}

/// Snapshots of all workers, and the process' own counts.
#[derive(Debug, Clone)]
pub struct Shared {
    pub workers: Arc<Vec<Mutex<WorkerSnapshot>>>,
    pub process: Arc<ProcessCounters>,
    /// The kernel fast path's maps, once it is attached.
    pub kernel: Arc<Mutex<Option<crate::fast_path::FastPathStats>>>,
    /// Each worker's beat count: it moves whenever the worker goes round
    /// its loop (at most every [`BEAT_EVERY`]), busy or idle; what the
    /// systemd watchdog is fed from.
    beats: Arc<Vec<Beat>>,
}

/// How often a worker bumps its beat count, at most.
pub const BEAT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// One worker's beat count, on a cache line of its own (the workers write
/// theirs from different cores).
#[derive(Debug, Default)]
#[repr(align(64))]
struct Beat(AtomicU64);

impl Shared {
    pub fn new(n: usize) -> Shared {
        Shared {
            workers: Arc::new((0..n).map(|_| Mutex::new(WorkerSnapshot::default())).collect()),
            process: Arc::new(ProcessCounters::default()),
            kernel: Arc::new(Mutex::new(None)),
            beats: Arc::new((0..n).map(|_| Beat::default()).collect()),
        }
    }

    /// Worker `i` went round its loop.
    pub fn beat(&self, i: usize) {
        if let Some(b) = self.beats.get(i) {
            b.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every worker's beat count.
    pub fn beats(&self) -> Vec<u64> {
        self.beats.iter().map(|b| b.0.load(Ordering::Relaxed)).collect()
    }

    pub fn publish(&self, i: usize, s: WorkerSnapshot) {
        if let Some(m) = self.workers.get(i) {
            *m.lock().unwrap_or_else(|p| p.into_inner()) = s;
        }
    }

    /// Flows the kernel fast path carries for the workers, as they last
    /// published.
    pub fn in_kernel(&self) -> usize {
        self.workers.iter().map(|m| m.lock().unwrap_or_else(|p| p.into_inner()).in_kernel).sum()
    }

    pub fn snapshots(&self) -> Vec<WorkerSnapshot> {
        self.workers.iter().map(|m| m.lock().unwrap_or_else(|p| p.into_inner()).clone()).collect()
    }

    /// The sum of the workers' snapshots, with the kernel fast path's
    /// wire counts added to theirs (`kernel_wire`): each port's counts as
    /// its device's.
    pub fn total(&self) -> WorkerSnapshot {
        let mut t = total(&self.snapshots());
        if let Some(k) = self.kernel_ports() {
            with_kernel(&mut t, k);
        }
        t
    }

    /// What the kernel fast path redirected, if it is attached.
    fn kernel_ports(&self) -> Option<[PortCounters; 2]> {
        self.kernel.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|k| k.ports())
    }

    /// Everything one scrape shows, read once.
    pub fn scrape(&self) -> Scrape {
        let kernel = self.kernel.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|k| KernelScrape {
            live: k.live(),
            reasons: k.reasons(),
            ports: k.ports(),
        });
        self.scrape_with(kernel)
    }

    /// The scrape with what the kernel fast path's maps said (`None`:
    /// not attached).
    pub(crate) fn scrape_with(&self, kernel: Option<KernelScrape>) -> Scrape {
        let workers = self.snapshots();
        let p = &self.process;
        let mut total = total(&workers);
        if let Some(k) = &kernel {
            with_kernel(&mut total, k.ports);
        }
        Scrape {
            total,
            workers,
            capture_written: p.capture_written.load(Ordering::Relaxed),
            capture_write_errors: p.capture_write_errors.load(Ordering::Relaxed),
            reloads: ReloadResult::ALL.map(|r| p.reloads[r as usize].load(Ordering::Relaxed)),
            link: LinkScrape {
                carrier_lost: p.carrier_lost.each_ref().map(|a| a.load(Ordering::Relaxed)),
                pass_through: p.link_fault_downs.each_ref().map(|a| a.load(Ordering::Relaxed)),
                held_down: p.held_down.each_ref().map(|a| a.load(Ordering::Relaxed)),
                state: p.link_state.each_ref().map(|a| a.load(Ordering::Relaxed)),
            },
            process: super::process::ProcessStats::read(),
            kernel,
        }
    }
}

/// The ports' carrier losses and link-fault pass-through, each by `Port as
/// usize`.
#[derive(Debug, Clone, Default)]
pub struct LinkScrape {
    pub carrier_lost: [u64; 2],
    pub pass_through: [u64; 2],
    pub held_down: [u64; 2],
    /// [`ProcessCounters::link_state`].
    pub state: [u64; 2],
}

/// What the kernel fast path's maps say at a scrape.
#[derive(Debug, Clone, Default)]
pub struct KernelScrape {
    /// What the flows in the kernel now carried so far.
    pub live: crate::fast_path::Live,
    /// Packets the program saw, by [`crate::fast_path::REASONS`].
    pub reasons: [u64; crate::fast_path::REASONS.len()],
    /// What the program redirected, as the ports' devices count it, by
    /// `Port as usize`.
    pub ports: [PortCounters; 2],
}

/// Adds the kernel fast path's wire counts `k` to the workers' total.
fn with_kernel(t: &mut WorkerSnapshot, k: [PortCounters; 2]) {
    for (w, k) in t.wire.iter_mut().zip(&k) {
        add(w, k);
    }
    t.kernel_wire = k;
}

fn add(a: &mut PortCounters, b: &PortCounters) {
    a.rx_packets += b.rx_packets;
    a.rx_bytes += b.rx_bytes;
    a.tx_packets += b.tx_packets;
    a.tx_bytes += b.tx_bytes;
}

/// The sum of the workers' snapshots (the merge timeout: the largest).
fn total(snaps: &[WorkerSnapshot]) -> WorkerSnapshot {
    let mut t = WorkerSnapshot::default();
    for s in snaps {
        t.counters.accumulate(&s.counters);
        for (a, b) in t.wire.iter_mut().zip(&s.wire) {
            add(a, b);
        }
        t.flows += s.flows;
        t.held_bytes += s.held_bytes;
        t.socket_drops += s.socket_drops;
        t.send_errors += s.send_errors;
        t.rx_errors += s.rx_errors;
        t.capture_dropped += s.capture_dropped;
        t.merge_timeout_us = t.merge_timeout_us.max(s.merge_timeout_us);
        t.in_kernel += s.in_kernel;
        t.busy_ns += s.busy_ns;
        t.loop_ns += s.loop_ns;
        t.active_ns += s.active_ns;
    }
    t
}

/// What one scrape renders.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    pub workers: Vec<WorkerSnapshot>,
    pub total: WorkerSnapshot,
    pub capture_written: u64,
    pub capture_write_errors: u64,
    /// By [`ReloadResult`].
    pub reloads: [u64; 3],
    /// The ports' carrier and link-fault pass-through.
    pub link: LinkScrape,
    /// The process' CPU, memory and descriptors.
    pub process: super::process::ProcessStats,
    /// The kernel fast path, if attached.
    pub kernel: Option<KernelScrape>,
}
