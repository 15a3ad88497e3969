//! How the caller steers a running gateway ([`Control`]), what one reload
//! does, and the configuration's part of `px status`: what the supervising
//! loop (`running.rs`) needs, apart from the facade (`mod.rs`) that starts
//! it.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::config::{ConfigError, FastPathMode, GatewayConfig, ReloadError};
use super::metrics::ReloadResult;
use super::status;
use super::worker::LiveConfig;
use crate::logging::{info, warn};

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

/// One reload: read, check, log, hand the workers the engine's part.
pub(super) fn reload(
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
    if let (FastPathMode::On, Err(why)) = (new.fast_path, fast_path) {
        warn!(
            "px gateway: reload refused: fast_path = \"on\", but the kernel fast path is not attached ({why}); the running configuration stays"
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

/// The configuration's part of `px status`.
pub(crate) fn status_config(cfg: &GatewayConfig, engine: &px_gateway::Config) -> status::ConfigStatus {
    status::ConfigStatus {
        generation: 0,
        reloads_refused: 0,
        reloads_invalid: 0,
        workers: cfg.workers,
        gro_gso: cfg.gro_gso,
        offload: cfg.fast_path.to_string(),
        merge_timeout_us: engine.merge_timeout.as_micros() as u64,
        icmp_source_v4: engine.icmp_source_v4.map(|a| a.to_string()),
        icmp_source_v6: engine.icmp_source_v6.map(|a| a.to_string()),
        metrics: cfg.metrics.map(|a| a.to_string()),
    }
}
