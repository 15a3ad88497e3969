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

mod alerts;
pub mod capture;
pub mod config;
pub mod control;
mod datapath;
pub mod flags;
pub mod imtu;
mod link_fault;
pub mod lock;
pub mod metrics;
mod running;
pub mod settings;
mod start;
pub mod status;
mod worker;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::fast_path::FastPathError;
use crate::logging::{info, warn};
pub use config::{Change, ConfigError, DatapathKind, DpdkConfig, FastPathMode, GatewayConfig, ReloadError};
pub use lock::{LockError, PortLock};
use metrics::ReloadResult;
pub use metrics::WorkerSnapshot;
use running::Running;
use worker::LiveConfig;

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
    /// `[imtu_follow]` is configured and its routing table cannot be read
    /// here (a sandbox without netlink).
    #[error(
        "[imtu_follow]: cannot read kernel routing table {table}: {source}; the iMTU follower needs netlink (AF_NETLINK: a systemd unit must list it in RestrictAddressFamilies)"
    )]
    ImtuFollow { table: u32, source: px_io::route_table::RouteError },
    /// The DPDK datapath could not start (the EAL, a port, a pool), or
    /// this build has no DPDK (what to install).
    #[error("datapath = \"dpdk\": {0}")]
    Dpdk(String),
}

impl GatewayError {
    /// Whether the same start may succeed later without a change to the
    /// configuration or the host: a port that is not there yet (a NIC late
    /// at boot) or that another gateway still serves, an address or socket
    /// still in use. `px gateway` exits 1 then (a service manager starts it
    /// again), 2 otherwise.
    pub fn may_pass(&self) -> bool {
        match self {
            GatewayError::Port { .. }
            | GatewayError::PortInUse(_)
            | GatewayError::Socket { .. }
            | GatewayError::Metrics { .. }
            | GatewayError::Capture { .. }
            | GatewayError::Thread(_)
            | GatewayError::Control(_) => true,
            GatewayError::Config(_)
            | GatewayError::Mtu { .. }
            | GatewayError::FastPath(_)
            | GatewayError::ImtuFollow { .. }
            | GatewayError::Dpdk(_) => false,
        }
    }
}

/// The configuration key that names port `name` (`inner` or `outer`).
pub(crate) fn key_of(cfg: &GatewayConfig, name: &str) -> &'static str {
    if name == cfg.inner { "inner" } else { "outer" }
}

/// Whether this build has the DPDK datapath (`datapath = "dpdk"`; built
/// where pkg-config found libdpdk).
pub fn dpdk_built() -> bool {
    px_dpdk::BUILT
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
}

impl Control<'_> {
    /// Stop only, no reload.
    pub fn stop_only(stop: Arc<AtomicBool>) -> Control<'static> {
        Control { stop, reload: Arc::new(AtomicBool::new(false)), load: None }
    }
}

/// Runs the gateway until `stop` is set, then flushes what the engines
/// hold and returns the final counters of all workers (see [`run_with`];
/// no reload).
pub fn run(cfg: &GatewayConfig, stop: Arc<AtomicBool>) -> Result<WorkerSnapshot, GatewayError> {
    run_with(cfg, Control::stop_only(stop))
}

/// One reload: read, check, log, hand the workers the engine's part.
fn reload(
    ctl: &mut Control<'_>,
    running: &mut GatewayConfig,
    running_engine: &mut px_gateway::Config,
    live: &LiveConfig,
    fast_path: Result<(), &str>,
) -> ReloadResult {
    let Some(load) = ctl.load.as_mut() else {
        warn!("px gateway: reload requested, but there is no configuration to read again; nothing changed");
        return ReloadResult::Invalid;
    };
    let new = match load() {
        Ok(new) => new,
        Err(e) => {
            warn!("px gateway: reload refused: {e}; the running configuration stays");
            return ReloadResult::Invalid;
        }
    };
    if let (FastPathMode::On, Err(why)) = (new.offload, fast_path) {
        warn!(
            "px gateway: reload refused: offload = \"on\", but the kernel fast path is not attached ({why}); the running configuration stays"
        );
        return ReloadResult::Invalid;
    }
    match running.reload(&new, running_engine) {
        Ok((changes, _)) if changes.is_empty() => {
            info!("px gateway: reloaded the configuration: nothing changed");
            ReloadResult::Applied
        }
        Ok((changes, engine)) => {
            let list: Vec<String> = changes.iter().map(|c| c.to_string()).collect();
            info!("px gateway: reloaded the configuration: {}", list.join(", "));
            if engine != *running_engine {
                live.publish(engine.clone());
            }
            *running = new;
            *running_engine = engine;
            ReloadResult::Applied
        }
        Err(e @ ReloadError::Invalid(_)) => {
            warn!("px gateway: reload refused: {e}; the running configuration stays");
            ReloadResult::Invalid
        }
        Err(e) => {
            warn!("px gateway: reload refused: {e}; the running configuration stays");
            ReloadResult::Refused
        }
    }
}

/// Runs the gateway until `ctl.stop` is set, reloading its configuration
/// when `ctl.reload` is, then flushes what the engines hold and returns
/// the final counters of all workers. The start lines, the periodic
/// summaries, what reloads changed or why they were refused, and the stop
/// line go to the log (`tracing`, target [`crate::logging::TARGET`], each
/// at its level: [`crate::logging`]).
///
/// Three phases: the start (`start.rs`: ports, locks, datapath, workers,
/// endpoints), the supervising loop, and the ordered teardown
/// (`running.rs`), which also runs, without the stop line, when the start
/// fails half-way.
///
/// Under systemd (`Type=notify`), whatever the datapath: `READY=1` once
/// the start is done (ports open, workers running), `WATCHDOG=1` while
/// every worker makes progress, `STATUS=` with each summary, and
/// `STOPPING=1` when the stop begins ([`crate::systemd`]).
pub fn run_with(cfg: &GatewayConfig, mut ctl: Control<'_>) -> Result<WorkerSnapshot, GatewayError> {
    let notify = crate::systemd::Notifier::from_env().unwrap_or_else(|e| {
        warn!("px gateway: {e}; the service manager hears nothing (no readiness, no watchdog)");
        None
    });
    let mut gateway = Running::start(cfg, ctl.stop.clone())?;
    if let Some(n) = &notify
        && let Err(e) = n.ready(&format!("forwarding between {} and {}", cfg.inner, cfg.outer))
    {
        warn!("px gateway: telling systemd it is ready: {e}");
    }
    gateway.supervise(&mut ctl, notify.as_ref());
    if let Some(n) = &notify {
        let _ = n.send("STOPPING=1\nSTATUS=stopping: flushing what is held");
    }
    Ok(gateway.stop())
}

/// The configuration's part of `px status`.
pub(crate) fn status_config(cfg: &GatewayConfig, engine: &px_gateway::Config) -> status::ConfigStatus {
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
