//! Why the gateway could not run: one error for the whole start, kept
//! apart from the facade (`mod.rs`) so that the datapaths, the start phase
//! and the supervising loop name it without naming each other.

use super::config::{ConfigError, GatewayConfig};
use super::control;
use super::lock::LockError;
use crate::fast_path::FastPathError;

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
    /// The DPDK datapath could not start (the EAL, a port, a pool), or
    /// this build has no DPDK (what to install).
    #[error("datapath = \"dpdk\": {0}")]
    Dpdk(String),
}

/// The configuration key that names port `name` (`inner` or `outer`).
pub(crate) fn key_of(cfg: &GatewayConfig, name: &str) -> &'static str {
    if name == cfg.inner { "inner" } else { "outer" }
}
