//! A gateway that runs: what the start phase ([`super::start`]) set up, the
//! supervising loop (stop, reload, periodic summary, the iMTU follower's
//! lines) and the ordered teardown, by [`Running::stop`] or, on any other
//! way out (an error half-way through the start), on drop.
//!
//! Teardown order: the workers first (each flushes what its engine holds
//! and sends it), then the datapath (the kernel fast path goes and the
//! ports go back as they were: nothing below may delay them), then the
//! threads that only read (metrics, iMTU follower, control socket), then
//! the capture writer (it writes what the workers queued), and the port
//! locks last.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::alerts::Alerts;
use super::capture::CaptureSpec;
use super::config::FastPathMode;
use super::datapath::af_packet::AfPacket;
use super::datapath::dpdk::Dpdk;
use super::link_fault::LinkWatch;
use super::metrics::{self, Shared, WorkerSnapshot};
use super::reload::{Control, reload, status_config};
use super::status::ConfigStatus;
use super::worker::LiveConfig;
use super::{GatewayConfig, PortLock};
use crate::logging::{error, info, warn};
use crate::systemd::{Notifier, Watchdog};

/// How often the supervisor looks at the stop flag: short, so that a
/// SIGTERM reaches the workers well within a merge timeout and finds held
/// data still held.
const SUPERVISE_EVERY: Duration = Duration::from_millis(5);
/// How often it looks for trouble in the counters (said at most once a
/// minute per kind: [`super::alerts`]).
const ALERT_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The datapath's part of a running gateway (set up at start, taken down
/// after the workers).
pub(super) enum Datapath {
    AfPacket(AfPacket),
    Dpdk(Dpdk),
}

impl Datapath {
    /// Whether the kernel fast path is attached (why not, otherwise).
    pub(super) fn fast_path(&self) -> Result<(), &str> {
        match self {
            Datapath::AfPacket(a) => a.fast_path().map(|_| ()),
            Datapath::Dpdk(_) => Err("the DPDK datapath has none: its ports are not the kernel's"),
        }
    }

    /// Takes it down; returns the kernel fast path's final counts.
    fn stop(self) -> Option<[u64; crate::fast_path::REASONS.len()]> {
        match self {
            Datapath::AfPacket(a) => a.stop(),
            Datapath::Dpdk(d) => {
                d.stop();
                None
            }
        }
    }
}

/// Everything a running gateway owns, in teardown order (see the module
/// docs); built field by field by the start phase.
pub(super) struct Running {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) workers: Vec<JoinHandle<()>>,
    pub(super) datapath: Option<Datapath>,
    pub(super) metrics: Option<JoinHandle<()>>,
    pub(super) follower: Option<JoinHandle<()>>,
    pub(super) control: Option<JoinHandle<()>>,
    pub(super) capture: Option<(CaptureSpec, JoinHandle<()>)>,
    /// The ports' carrier (kernel ports only).
    pub(super) link: Option<LinkWatch>,
    pub(super) shared: Shared,
    /// The engine configuration the workers take at their next loop.
    pub(super) live: Arc<LiveConfig>,
    /// The configuration's part of `px status`.
    pub(super) live_status: Arc<Mutex<ConfigStatus>>,
    /// The configuration running now (a reload replaces it).
    pub(super) config: GatewayConfig,
    pub(super) engine: px_gateway::Config,
    /// Held until the very end (dropped after everything above).
    pub(super) locks: Vec<PortLock>,
    /// Teardown done (by [`Running::stop`]; drop then has nothing to do).
    done: bool,
}

impl Running {
    /// Nothing set up yet.
    pub(super) fn new(cfg: &GatewayConfig, stop: Arc<AtomicBool>) -> Running {
        let engine = px_gateway::Config::default();
        Running {
            stop,
            workers: Vec::new(),
            datapath: None,
            metrics: None,
            follower: None,
            control: None,
            capture: None,
            link: None,
            shared: Shared::new(cfg.workers),
            live: Arc::new(LiveConfig::new(engine.clone())),
            live_status: Arc::new(Mutex::new(status_config(cfg, &engine))),
            config: cfg.clone(),
            engine,
            locks: Vec::new(),
            done: false,
        }
    }

    /// Runs until the stop flag is set: reloads when asked, logs the
    /// periodic summary and, rate-limited, the trouble the counters show
    /// ([`Alerts`]); with `notify`, feeds systemd's watchdog while every
    /// worker moves ([`Watchdog`]) and gives it each summary as status.
    pub(super) fn supervise(&mut self, ctl: &mut Control<'_>, notify: Option<&Notifier>) {
        let start = Instant::now();
        let (mut last_log, mut last_total) = (start, WorkerSnapshot::default());
        let (mut alerts, mut last_alert_check) = (Alerts::new(start), start);
        let mut watchdog = notify.and_then(|n| Some((n, Watchdog::new(n.watchdog()?, start, self.shared.beats()))));
        let mut last_link = start;
        while !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(SUPERVISE_EVERY);
            if ctl.reload.swap(false, Ordering::Relaxed) {
                self.reload(ctl);
            }
            self.sync_fast_path();
            let now = Instant::now();
            if let Some((n, w)) = &mut watchdog
                && w.poll(now, &self.shared.beats())
            {
                let _ = n.send("WATCHDOG=1");
            }
            if let Some(l) = &mut self.link
                && now.duration_since(last_link) >= LinkWatch::EVERY
            {
                last_link = now;
                l.poll(now);
            }
            if now.duration_since(last_alert_check) >= ALERT_CHECK_EVERY {
                last_alert_check = now;
                for line in alerts.check(now, &self.shared.total(), self.engine.max_flows) {
                    warn!("{line}");
                }
            }
            let interval = self.config.log_interval_s;
            if interval > 0 && now.duration_since(last_log) >= Duration::from_secs(interval) {
                let total = self.shared.total();
                let line = metrics::Summary::new(&total, Some((&last_total, now.duration_since(last_log))));
                crate::logging::summary("px gateway: ", &line);
                if let Some(n) = notify {
                    let _ = n.send(&format!("STATUS={line}"));
                }
                last_log = now;
                last_total = total;
            }
        }
    }

    fn reload(&mut self, ctl: &mut Control<'_>) {
        let attached = self.datapath.as_ref().map_or(Err("not started"), Datapath::fast_path);
        let result = reload(ctl, &mut self.config, &mut self.engine, &self.live, attached);
        self.shared.process.reloads[result as usize].fetch_add(1, Ordering::Relaxed);
        *self.live_status.lock().unwrap_or_else(|p| p.into_inner()) = status_config(&self.config, &self.engine);
    }

    /// Lets the kernel fast path's program work while `fast_path` is on, and
    /// pauses it when it is off (then it looks up and counts nothing: it
    /// only keeps tagged frames from the IP sockets) once the workers took
    /// every flow back (issue 38: with the fast path off the program looked up
    /// every packet, counting each as `no_flow`).
    fn sync_fast_path(&mut self) {
        let want = self.config.fast_path == FastPathMode::On;
        let Some(Datapath::AfPacket(a)) = self.datapath.as_mut() else { return };
        if a.fast_path().is_err() || a.fast_path_active() == want || (!want && self.shared.in_kernel() > 0) {
            return;
        }
        if let Err(e) = a.set_fast_path(want) {
            error!("px gateway: the kernel fast path: {e}");
        }
    }

    /// Stops the workers (each flushes what its engine holds), takes the
    /// rest down in order and returns the final counters of all workers.
    pub(super) fn stop(mut self) -> WorkerSnapshot {
        let total = self.teardown();
        crate::logging::summary("px gateway: stopped; flushed everything held. ", &metrics::Summary::new(&total, None));
        total
    }

    fn teardown(&mut self) -> WorkerSnapshot {
        self.done = true;
        self.stop.store(true, Ordering::Relaxed);
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
        // A port held down for the other's lost carrier comes up.
        if let Some(mut l) = self.link.take() {
            l.release();
        }
        // The workers took every flow back: the program goes, its counts
        // kept; the ports go back as they were.
        let kernel_reasons = self.datapath.take().and_then(|d| d.stop());
        // The metrics thread ends within its poll interval and never waits
        // for a client, whose threads end on their own deadlines; the
        // follower within one measurement (`imtu_follow.probe_timeout_ms`).
        for h in [self.metrics.take(), self.follower.take(), self.control.take()].into_iter().flatten() {
            let _ = h.join();
        }
        // The workers' taps are gone: the writer writes what is queued and ends.
        if let Some((spec, h)) = self.capture.take() {
            let _ = h.join();
            let s = self.shared.scrape();
            let line = format!(
                "px gateway: capture: {} packets written to {}, {} records dropped (queue full), {} write errors",
                s.capture_written,
                spec.path.display(),
                s.total.capture_dropped,
                s.capture_write_errors
            );
            if s.capture_write_errors > 0 { warn!("{line}") } else { info!("{line}") }
        }
        let mut total = self.shared.total();
        total.kernel_reasons = kernel_reasons;
        total
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.done {
            self.teardown();
        }
    }
}
