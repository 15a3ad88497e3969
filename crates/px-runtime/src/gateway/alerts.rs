//! Trouble the counters show, said in the log: frames dropped on receive
//! (the sockets' buffers were full), frames that could not be sent, flows
//! evicted from a full flow table, flows the kernel fast path could not
//! take because its table was full.
//!
//! Each is a WARN line when it starts, then at most one per [`EVERY`] with
//! the count since the last line (a gateway dropping frames for an hour
//! writes 60 lines, not millions). Time is passed in; the supervisor
//! looks once a second.

use std::time::{Duration, Instant};

use super::metrics::WorkerSnapshot;

/// The most often one kind of trouble is said.
pub(crate) const EVERY: Duration = Duration::from_secs(60);

/// The kinds of trouble, in the order they are said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    SocketDrops,
    SendErrors,
    Evicted,
    KernelTableFull,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::SocketDrops, Kind::SendErrors, Kind::Evicted, Kind::KernelTableFull];

    /// Its count in the totals.
    fn count(self, t: &WorkerSnapshot) -> u64 {
        match self {
            Kind::SocketDrops => t.socket_drops,
            Kind::SendErrors => t.send_errors,
            Kind::Evicted => t.counters.flows_evicted,
            Kind::KernelTableFull => t.counters.fast_path.table_full,
        }
    }

    /// What `n` of it in `over` means, and what to look at.
    fn line(self, n: u64, over: Duration, max_flows: usize) -> String {
        let over = over.as_secs().max(1);
        match self {
            Kind::SocketDrops => format!(
                "px gateway: {n} frames dropped on receive in the last {over} s: the packet sockets' buffers were full, the workers did not keep up (`workers`, `socket_buffer_bytes`, `rx_ring`)"
            ),
            Kind::SendErrors => format!(
                "px gateway: {n} frames could not be sent in the last {over} s: a port's send buffer stayed full, or the port is down"
            ),
            Kind::Evicted => format!(
                "px gateway: {n} flows evicted in the last {over} s: the flow table was full (`[engine] max_flows` = {max_flows}); the least recently used flows were sent what they held and forgotten"
            ),
            Kind::KernelTableFull => format!(
                "px gateway: {n} flows could not move to the kernel fast path in the last {over} s: its flow table was full; they stay in user space"
            ),
        }
    }
}

/// What was said of one kind.
#[derive(Debug, Clone, Copy)]
struct Said {
    /// The count at the last line (or at start).
    total: u64,
    /// When (or the start).
    at: Instant,
    /// Whether any line was said yet.
    ever: bool,
}

/// The lines to say, given the counters over time.
#[derive(Debug)]
pub(crate) struct Alerts {
    said: [Said; Kind::ALL.len()],
}

impl Alerts {
    /// Nothing said yet; counts from zero at `now`.
    pub(crate) fn new(now: Instant) -> Alerts {
        Alerts { said: [Said { total: 0, at: now, ever: false }; Kind::ALL.len()] }
    }

    /// The totals at `now`: a WARN line for each kind that grew, unless
    /// one was said less than [`EVERY`] ago (its count waits for the next).
    pub(crate) fn check(&mut self, now: Instant, t: &WorkerSnapshot, max_flows: usize) -> Vec<String> {
        let mut lines = Vec::new();
        for (kind, said) in Kind::ALL.into_iter().zip(&mut self.said) {
            let n = kind.count(t).saturating_sub(said.total);
            let since = now.saturating_duration_since(said.at);
            if n == 0 || (said.ever && since < EVERY) {
                continue;
            }
            lines.push(kind.line(n, since, max_flows));
            *said = Said { total: kind.count(t), at: now, ever: true };
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(socket_drops: u64, evicted: u64, table_full: u64) -> WorkerSnapshot {
        let mut t = WorkerSnapshot { socket_drops, ..Default::default() };
        t.counters.flows_evicted = evicted;
        t.counters.fast_path.table_full = table_full;
        t
    }

    #[test]
    fn trouble_is_said_when_it_starts_then_once_a_minute_with_the_count() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut a = Alerts::new(t0);
        assert!(a.check(at(1), &totals(0, 0, 0), 1024).is_empty(), "nothing to say");
        // Drops start: said at once.
        let l = a.check(at(2), &totals(500, 0, 0), 1024);
        assert_eq!(l.len(), 1, "{l:?}");
        assert!(l[0].starts_with("px gateway: 500 frames dropped on receive in the last 2 s"), "{l:?}");
        // They go on: quiet for a minute, then the count since the line.
        for s in 3..62 {
            assert!(a.check(at(s), &totals(500 + 100 * s, 0, 0), 1024).is_empty(), "said again at {s} s");
        }
        let l = a.check(at(62), &totals(500 + 100 * 62, 0, 0), 1024);
        assert_eq!(l, [Kind::SocketDrops.line(6200, Duration::from_secs(60), 1024)]);
        // They stop: nothing more, even after a minute.
        assert!(a.check(at(200), &totals(6700, 0, 0), 1024).is_empty());
        // Each kind on its own clock.
        let l = a.check(at(201), &totals(6700, 3, 1), 1024);
        assert_eq!(l.len(), 2, "{l:?}");
        assert!(l[0].contains("3 flows evicted") && l[0].contains("`[engine] max_flows` = 1024"), "{l:?}");
        assert!(l[1].contains("1 flows could not move to the kernel fast path"), "{l:?}");
        let l = a.check(at(202), &totals(6701, 4, 1), 1024);
        assert_eq!(l.len(), 1, "drops said 140 s ago, evictions 1 s ago: {l:?}");
        assert!(l[0].contains("1 frames dropped on receive in the last 140 s"), "{l:?}");
    }

    #[test]
    fn send_errors_are_said_too() {
        let t0 = Instant::now();
        let mut a = Alerts::new(t0);
        let t = WorkerSnapshot { send_errors: 7, ..Default::default() };
        let l = a.check(t0 + Duration::from_secs(1), &t, 1);
        assert_eq!(l.len(), 1);
        assert!(l[0].starts_with("px gateway: 7 frames could not be sent"), "{l:?}");
    }
}
