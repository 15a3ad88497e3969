//! The gateway runtime: the engine between two real ports (`px gateway` is
//! a thin shell over [`run`]).
//!
//! Locks both ports first (one gateway per port: a second is refused,
//! see [`lock`]), sets them up (GRO on for receive, promiscuous membership
//! while the sockets are open), runs one worker per thread, serves metrics, logs a
//! summary line at an interval, and when told to stop (the caller's flag,
//! which `px` sets on SIGINT/SIGTERM) flushes everything held, restores the
//! ports as it found them and returns.
//!
//! Reload (`px` asks for one on SIGHUP, see [`Control`]): the configuration
//! is read anew; if it changes only what can change live
//! ([`GatewayConfig::reload`]), each worker hands its engine the new
//! settings between two batches ([`px_gateway::Engine::set_config`]: what
//! it holds is sent first, in order), otherwise the change is refused in
//! the log and the running configuration stays.
//!
//! Receive path: `recvmmsg` into preallocated buffers by default; the
//! memory-mapped `TPACKET_V2` ring only when configured
//! ([`GatewayConfig::rx_ring`]).

pub mod capture;
pub mod config;
pub mod control;
pub mod imtu;
pub mod lock;
pub mod metrics;
pub mod status;
mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use px_gateway::{Engine, Port};
use px_io::{Fanout, IfaceGuard, Offload, PacketSocket, Receive, SocketConfig};

use crate::fast_path::{FastPath, FastPathError};
pub use config::{Change, ConfigError, FastPathMode, GatewayConfig, ReloadError};
pub use lock::{LockError, PortLock};
pub use metrics::WorkerSnapshot;
use metrics::{ReloadResult, Shared};
use worker::{LiveConfig, Sockets, Worker};

/// Why the gateway could not run.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A port named by the `key` (`inner`, `outer`) the user set.
    #[error("`{key}` = {port:?}: {source}")]
    Port { key: &'static str, port: String, source: px_io::IfaceError },
    /// Another gateway serves a port (its PID in the message).
    #[error(transparent)]
    PortInUse(LockError),
    #[error("port {port}: cannot open packet socket: {source}")]
    Socket { port: String, source: px_io::OpenError },
    #[error("MTU of {port} is {mtu}, outside 576..=65535")]
    Mtu { port: String, mtu: u32 },
    #[error("metrics endpoint {addr}: {source}")]
    Metrics { addr: std::net::SocketAddr, source: std::io::Error },
    #[error("capture file {path}: {source}")]
    Capture { path: String, source: std::io::Error },
    #[error("cannot start worker thread: {0}")]
    Thread(std::io::Error),
    /// `offload = "on"` and the kernel fast path could not start.
    #[error("offload = \"on\": {0}")]
    FastPath(FastPathError),
    #[error(transparent)]
    Control(#[from] control::ControlError),
}

/// The configuration key that names port `name` (`inner` or `outer`).
fn key_of(cfg: &GatewayConfig, name: &str) -> &'static str {
    if name == cfg.inner { "inner" } else { "outer" }
}

fn port_mtu(key: &'static str, name: &str, configured: u16) -> Result<u16, GatewayError> {
    if configured != 0 {
        return Ok(configured);
    }
    let mtu = px_io::iface::mtu(name).map_err(|source| GatewayError::Port { key, port: name.into(), source })?;
    u16::try_from(mtu).ok().filter(|m| *m >= 576).ok_or(GatewayError::Mtu { port: name.into(), mtu })
}

/// How the caller steers a running gateway.
pub struct Control<'a> {
    /// Set to stop (`px` sets it from its SIGINT/SIGTERM handler; it is
    /// looked at every 5 ms).
    pub stop: Arc<AtomicBool>,
    /// Set to ask for a reload (`px`: SIGHUP); cleared when taken.
    pub reload: Arc<AtomicBool>,
    /// Reads the configuration anew for a reload (`px`: the same file and
    /// flags as at start). None: reload requests are logged and ignored.
    pub load: Option<Box<dyn FnMut() -> Result<GatewayConfig, ConfigError> + 'a>>,
    /// Takes the periodic summary as fields (`px`: a structured log
    /// event). None: it goes to the log as its text.
    pub summary: Option<SummarySink<'a>>,
}

/// Where the periodic summary goes as fields ([`Control::summary`]).
pub type SummarySink<'a> = Box<dyn FnMut(&metrics::Summary) + 'a>;

impl Control<'_> {
    /// Stop only, no reload.
    pub fn stop_only(stop: Arc<AtomicBool>) -> Control<'static> {
        Control { stop, reload: Arc::new(AtomicBool::new(false)), load: None, summary: None }
    }
}

/// Runs the gateway until `stop` is set, then flushes what the engines
/// hold and returns the final counters of all workers (see [`run_with`];
/// no reload).
pub fn run(
    cfg: &GatewayConfig,
    stop: Arc<AtomicBool>,
    log: &mut dyn FnMut(&str),
) -> Result<WorkerSnapshot, GatewayError> {
    run_with(cfg, Control::stop_only(stop), log)
}

/// One reload: read, check, log, hand the workers the engine's part.
fn reload(
    ctl: &mut Control<'_>,
    running: &mut GatewayConfig,
    running_engine: &mut px_gateway::Config,
    live: &LiveConfig,
    fast_path: Result<(), &str>,
    log: &mut dyn FnMut(&str),
) -> ReloadResult {
    let Some(load) = ctl.load.as_mut() else {
        log("px gateway: reload requested, but there is no configuration to read again; nothing changed");
        return ReloadResult::Invalid;
    };
    let new = match load() {
        Ok(new) => new,
        Err(e) => {
            log(&format!("px gateway: reload refused: {e}; the running configuration stays"));
            return ReloadResult::Invalid;
        }
    };
    if let (FastPathMode::On, Err(why)) = (new.offload, fast_path) {
        log(&format!(
            "px gateway: reload refused: offload = \"on\", but the kernel fast path is not attached ({why}); the running configuration stays"
        ));
        return ReloadResult::Invalid;
    }
    match running.reload(&new, running_engine) {
        Ok((changes, _)) if changes.is_empty() => {
            log("px gateway: reloaded the configuration: nothing changed");
            ReloadResult::Applied
        }
        Ok((changes, engine)) => {
            let list: Vec<String> = changes.iter().map(|c| c.to_string()).collect();
            log(&format!("px gateway: reloaded the configuration: {}", list.join(", ")));
            if engine != *running_engine {
                live.publish(engine.clone());
            }
            *running = new;
            *running_engine = engine;
            ReloadResult::Applied
        }
        Err(e @ ReloadError::Invalid(_)) => {
            log(&format!("px gateway: reload refused: {e}; the running configuration stays"));
            ReloadResult::Invalid
        }
        Err(e) => {
            log(&format!("px gateway: reload refused: {e}; the running configuration stays"));
            ReloadResult::Refused
        }
    }
}

/// Runs the gateway until `ctl.stop` is set, reloading its configuration
/// when `ctl.reload` is, then flushes what the engines hold and returns
/// the final counters of all workers. `log` gets the start line, the
/// periodic summaries, what reloads changed or why they were refused, and
/// the stop line.
pub fn run_with(
    cfg: &GatewayConfig,
    mut ctl: Control<'_>,
    log: &mut dyn FnMut(&str),
) -> Result<WorkerSnapshot, GatewayError> {
    let stop = ctl.stop.clone();
    cfg.validate()?;
    let imtu = port_mtu("inner", &cfg.inner, cfg.imtu)?;
    let emtu = port_mtu("outer", &cfg.outer, cfg.emtu)?;
    // The outer port's own MTU, whatever `emtu` says: nothing passed
    // untouched toward a verified neighbour may exceed it (issue 35).
    let outer_link = port_mtu("outer", &cfg.outer, 0)?;
    // One gateway per port, refused before anything is touched; held
    // until this function returns (declared before the guards, so dropped
    // after them).
    let _locks = lock_ports(cfg, log)?;
    // Capture both ports before touching them; the guards restore on drop,
    // on every return path below.
    let mut guards = Vec::new();
    for name in [&cfg.inner, &cfg.outer] {
        let key = key_of(cfg, name);
        let g = IfaceGuard::capture(name).map_err(|source| GatewayError::Port { key, port: name.clone(), source })?;
        if cfg.gro_gso {
            // Kernel GRO hands us super-packets: the software LRO.
            g.ctl().set_offload(name, Offload::Gro, true).map_err(|source| GatewayError::Port {
                key,
                port: name.clone(),
                source,
            })?;
        }
        guards.push(g);
    }
    let mut ecfg = cfg.engine_config(imtu, emtu, os_random_seed())?;
    ecfg.outer_link_mtu = outer_link;
    // The kernel fast path: attached whenever this build has it, so that
    // `offload` can be turned on by a reload; required when it is on.
    let fast_path = match FastPath::attach(&cfg.inner, &cfg.outer) {
        Ok(fp) => Ok(fp),
        Err(e) if cfg.offload == FastPathMode::On => return Err(GatewayError::FastPath(e)),
        Err(e) => {
            if FastPath::built() {
                log(&format!("px gateway: the kernel fast path is not available: {e}; offload stays off"));
            }
            Err(e.to_string())
        }
    };
    let live = Arc::new(LiveConfig::new(ecfg.clone()));
    // One fan-out group per port and receiving socket kind; worker i
    // joins each as its i-th member.
    let base = (std::process::id() as u16 & 0x1fff) * 8;
    let shared = Shared::new(cfg.workers);
    if let Ok(fp) = &fast_path {
        *shared.kernel.lock().unwrap_or_else(|p| p.into_inner()) = Some(fp.stats());
    }
    let (taps, capture) = match cfg.capture_spec() {
        Some(spec) => {
            let (taps, h) = capture::start(&spec, cfg.workers, shared.process.clone())
                .map_err(|source| GatewayError::Capture { path: spec.path.display().to_string(), source })?;
            (taps.into_iter().map(Some).collect(), Some((spec, h)))
        }
        None => ((0..cfg.workers).map(|_| None).collect::<Vec<_>>(), None),
    };
    // One path MTU cache for all workers: an ICMP error reaches one of them,
    // and must apply to the flow on every one.
    let pmtu = px_gateway::SharedPmtu::new(ecfg.pmtu_cache_size, ecfg.pmtu_lifetime);
    // Verified neighbour iMTUs (issue 30), published by the follower thread.
    let imtu_shared = cfg.imtu_follow.as_ref().map(|f| px_gateway::SharedImtu::new(f.max_prefixes));
    let mut workers = Vec::new();
    for (i, tap) in taps.into_iter().enumerate() {
        let open = |name: &str, group: Option<u16>, receive: Receive| {
            let sc = SocketConfig {
                // Always: even with offloads off, the virtio-net header is
                // the only way to learn that a frame's checksum is partial
                // (a sender's checksum offload); forwarded as it is, such a
                // frame is dropped by the receiver as corrupt. What
                // `offload` turns off is GRO on the ports and GSO on send.
                vnet_hdr: true,
                promiscuous: cfg.promiscuous,
                rcvbuf: cfg.socket_buffer_bytes,
                sndbuf: cfg.socket_buffer_bytes,
                // The ring only when configured (`rx_ring`): see GatewayConfig.
                // No defragmentation: a router forwards fragments as they
                // come (and must not spend the host's reassembly memory on
                // a flood of them); the kernel's symmetric hash keeps the
                // fragments of a datagram together without it, as it never
                // reads a fragment's ports (`__skb_get_hash_symmetric`
                // dissects without FLOW_DISSECTOR_F_PARSE_1ST_FRAG).
                receive,
                ..SocketConfig::gateway_port(
                    group.filter(|_| cfg.workers > 1).map(|group| Fanout { group, defrag: false }),
                )
            };
            let sc = if cfg.rx_ring && receive != Receive::Nothing { sc } else { SocketConfig { rx_ring: None, ..sc } };
            PacketSocket::open(name, &sc).map_err(|source| GatewayError::Socket { port: name.into(), source })
        };
        let sockets = if fast_path.is_ok() {
            // Receiving sockets bound to IPv4 and IPv6 see only what the
            // fast path did not redirect (the kernel serves them after TC);
            // a third takes every other protocol; a fourth only sends.
            let mut all = Vec::new();
            for (port, name, g) in [(Port::Inner, &cfg.inner, base + 3), (Port::Outer, &cfg.outer, base)] {
                all.push((port, open(name, None, Receive::Nothing)?));
                for (k, r) in [Receive::Ipv4, Receive::Ipv6, Receive::NotIp].into_iter().enumerate() {
                    all.push((port, open(name, Some(g + k as u16), r)?));
                }
            }
            Sockets { tx: [0, 4], rx: vec![5, 6, 7, 1, 2, 3], all }
        } else {
            let outer = open(&cfg.outer, Some(base), Receive::All)?;
            let inner = open(&cfg.inner, Some(base + 3), Receive::All)?;
            Sockets::plain(inner, outer)
        };
        let mut engine =
            Engine::with_shared_pmtu(ecfg.clone(), pmtu.clone()).map_err(|e| GatewayError::Config(e.into()))?;
        if let Ok(fp) = &fast_path {
            engine.set_datapath(Some(Box::new(fp.datapath())), Instant::now());
        }
        if let Some(s) = &imtu_shared {
            engine.follow_imtu(s.clone());
        }
        workers.push(Worker { index: i, engine, sockets, batch: cfg.batch, live: live.clone(), tap });
    }
    let metrics = match cfg.metrics {
        Some(addr) => Some(
            metrics::serve(addr, shared.clone(), stop.clone())
                .map_err(|source| GatewayError::Metrics { addr, source })?,
        ),
        None => None,
    };
    let live_status = Arc::new(std::sync::Mutex::new(status_config(cfg, &ecfg)));
    let control_path = cfg.control_socket.clone().unwrap_or_else(|| control::default_path(&cfg.inner, &cfg.outer));
    let source = control::Source {
        id: status::Identity {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            outer: (cfg.outer.clone(), emtu),
            inner: (cfg.inner.clone(), imtu),
        },
        config: live_status.clone(),
        shared: shared.clone(),
        pmtu: pmtu.clone(),
        started: Instant::now(),
    };
    // A configured socket must work; the default one may be in a
    // directory this process cannot write (an unprivileged run outside
    // systemd): then the gateway runs without `px status`, saying so.
    let control = match control::serve(&control_path, source, stop.clone()) {
        Ok(h) => Some(h),
        Err(e @ control::ControlError::Io { .. }) if cfg.control_socket.is_none() => {
            log(&format!("px gateway: {e}; running without a control socket: px status cannot reach this gateway"));
            None
        }
        Err(e) => return Err(e.into()),
    };
    log(&format!(
        "px gateway: inner {} (iMTU {imtu}) <-> outer {} (eMTU {emtu}), {} worker(s), offload {}, merge timeout {} µs{}",
        cfg.inner,
        cfg.outer,
        cfg.workers,
        if cfg.gro_gso { "GRO/GSO" } else { "off (software)" },
        ecfg.merge_timeout.as_micros(),
        cfg.metrics.map(|a| format!(", metrics on http://{a}/metrics")).unwrap_or_default()
    ));
    for line in cfg.icmp_notice() {
        log(&format!("px gateway: {line}"));
    }
    if control.is_some() {
        log(&format!("px gateway: status: px status (control socket {})", control_path.display()));
    }
    if let Some((spec, _)) = &capture {
        log(&format!(
            "px gateway: capturing to {} (pcapng, snap length {} B, {} file(s) of at most {} B)",
            spec.path.display(),
            spec.snaplen,
            spec.files,
            spec.max_bytes
        ));
    }
    log(&match (&fast_path, cfg.offload) {
        (Ok(_), FastPathMode::On) => format!(
            "px gateway: kernel fast path on: TC program on {} and {} ingress; established bulk TCP flows move to it",
            cfg.inner, cfg.outer
        ),
        (Ok(_), FastPathMode::Off) => {
            "px gateway: kernel fast path attached, offload off (a reload with offload = \"on\" turns it on)".into()
        }
        (Err(e), _) => format!("px gateway: kernel fast path unavailable ({e})"),
    });
    let mut handles = Vec::new();
    for w in workers {
        let (stop, shared) = (stop.clone(), shared.clone());
        let h = std::thread::Builder::new()
            .name(format!("px-worker-{}", w.index))
            .spawn(move || w.run(stop, shared))
            .map_err(GatewayError::Thread)?;
        handles.push(h);
    }
    let (imtu_log, imtu_lines) = std::sync::mpsc::channel();
    let follower = match (&cfg.imtu_follow, &imtu_shared) {
        (Some(f), Some(s)) => Some(
            imtu::spawn(f.clone(), ecfg.outer_port_mtu(), s.clone(), stop.clone(), imtu_log)
                .map_err(GatewayError::Thread)?,
        ),
        _ => None,
    };
    let (mut last_log, mut last_total) = (Instant::now(), WorkerSnapshot::default());
    let (mut running, mut running_engine) = (cfg.clone(), ecfg);
    while !stop.load(Ordering::Relaxed) {
        while let Ok(line) = imtu_lines.try_recv() {
            log(&line);
        }
        // Short, so a SIGTERM reaches the workers well within a merge
        // timeout and finds held data still held.
        std::thread::sleep(Duration::from_millis(5));
        if ctl.reload.swap(false, Ordering::Relaxed) {
            let attached = fast_path.as_ref().map(|_| ()).map_err(|e| e.as_str());
            let result = reload(&mut ctl, &mut running, &mut running_engine, &live, attached, log);
            shared.process.reloads[result as usize].fetch_add(1, Ordering::Relaxed);
            *live_status.lock().unwrap_or_else(|p| p.into_inner()) = status_config(&running, &running_engine);
        }
        let cfg = &running;
        if cfg.log_interval_s > 0 && last_log.elapsed() >= Duration::from_secs(cfg.log_interval_s) {
            let total = shared.total();
            let line = metrics::Summary::new(&total, Some((&last_total, last_log.elapsed())));
            match ctl.summary.as_mut() {
                Some(f) => f(&line),
                None => log(&line.to_string()),
            }
            last_log = Instant::now();
            last_total = total;
        }
    }
    for h in handles {
        let _ = h.join();
    }
    // The workers took every flow back: the program goes, its counts kept.
    let kernel_reasons = fast_path.as_ref().ok().map(|fp| fp.stats().reasons());
    drop(fast_path);
    // The ports go back first: nothing below may delay them (the capture
    // writer drains its queue; the metrics thread ends within its poll
    // interval and never waits for a client, whose threads end on their
    // own deadlines).
    for g in &guards {
        if let Err(e) = g.restore() {
            log(&format!("px gateway: restoring {}: {e}", g.name()));
        }
    }
    if let Some(m) = metrics {
        let _ = m.join();
    }
    // Ends within one measurement (`imtu_follow.probe_timeout_ms`).
    if let Some(h) = follower {
        let _ = h.join();
    }
    if let Some(c) = control {
        let _ = c.join();
    }
    // The workers' taps are gone: the writer writes what is queued and ends.
    if let Some((spec, h)) = capture {
        let _ = h.join();
        let s = shared.scrape();
        log(&format!(
            "px gateway: capture: {} packets written to {}, {} records dropped (queue full), {} write errors",
            s.capture_written,
            spec.path.display(),
            s.total.capture_dropped,
            s.capture_write_errors
        ));
    }
    let mut total = shared.total();
    total.kernel_reasons = kernel_reasons;
    log(&format!("px gateway: stopped; flushed everything held. {}", metrics::summary(&total, None)));
    Ok(total)
}

/// The configuration's part of `px status`.
fn status_config(cfg: &GatewayConfig, engine: &px_gateway::Config) -> status::ConfigStatus {
    status::ConfigStatus {
        generation: 0,
        reloads_refused: 0,
        reloads_invalid: 0,
        workers: cfg.workers,
        gro_gso: cfg.gro_gso,
        offload: cfg.offload.to_string(),
        merge_timeout_us: engine.merge_timeout.as_micros() as u64,
        icmp_source_v4: engine.icmp_source_v4.map(|a| a.to_string()),
        icmp_source_v6: engine.icmp_source_v6.map(|a| a.to_string()),
        metrics: cfg.metrics.map(|a| a.to_string()),
    }
}

/// Locks both ports ([`lock`]). A port another gateway serves is an
/// error; a lock directory this process may not write (an unprivileged
/// run outside systemd) is a warning, and the gateway runs unlocked.
fn lock_ports(cfg: &GatewayConfig, log: &mut dyn FnMut(&str)) -> Result<Vec<PortLock>, GatewayError> {
    let dir = lock::lock_dir();
    let mut locks = Vec::new();
    for name in [&cfg.inner, &cfg.outer] {
        match PortLock::acquire(&dir, name) {
            Ok(l) => locks.push(l),
            Err(e @ LockError::Held { .. }) => return Err(GatewayError::PortInUse(e)),
            Err(LockError::Iface { port, source }) => {
                return Err(GatewayError::Port { key: key_of(cfg, &port), port, source });
            }
            Err(e @ LockError::Io { .. }) => log(&format!(
                "px gateway: {e}; running without the lock: a second gateway on {name} would not be refused"
            )),
        }
    }
    Ok(locks)
}

/// The key of the engine's flow hashes, from the OS random source
/// (`getrandom(2)`; std's `RandomState`, itself seeded from the OS, if that
/// fails): outside senders choose flow keys, so they must not be able to
/// predict the hash (time and PID were guessable).
fn os_random_seed() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == b.len() as isize {
        return u64::from_ne_bytes(b);
    }
    use std::hash::BuildHasher;
    std::hash::RandomState::new().hash_one(std::process::id())
}
