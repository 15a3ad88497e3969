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
mod error;
pub mod flags;
pub mod imtu;
mod link_fault;
pub mod lock;
pub mod metrics;
mod reload;
mod running;
pub mod settings;
mod start;
pub mod status;
mod worker;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::logging::warn;
pub use config::{Change, ConfigError, DatapathKind, DpdkConfig, FastPathMode, GatewayConfig, ReloadError};
pub use error::GatewayError;
pub use lock::{LockError, PortLock};
pub use metrics::WorkerSnapshot;
pub use reload::Control;
use running::Running;

/// Whether this build has the DPDK datapath (`datapath = "dpdk"`; built
/// where pkg-config found libdpdk).
pub fn dpdk_built() -> bool {
    px_dpdk::BUILT
}

/// Runs the gateway until `stop` is set, then flushes what the engines
/// hold and returns the final counters of all workers (see [`run_with`];
/// no reload).
pub fn run(cfg: &GatewayConfig, stop: Arc<AtomicBool>) -> Result<WorkerSnapshot, GatewayError> {
    run_with(cfg, Control::stop_only(stop))
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
