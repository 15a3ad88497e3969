//! Why the gateway could not run: one error for the whole start, kept
//! apart from the facade (`mod.rs`) so that the datapaths, the start phase
//! and the supervising loop name it without naming each other.

use super::config::ConfigError;
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
    /// `fast_path = "on"` and the kernel fast path could not start.
    #[error("fast_path = \"on\": {0}")]
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
