//! `px-netns`: the network-namespace fixtures of PacketExpress.
//!
//! Builds topologies of network namespaces joined by veth links, with MTUs,
//! documentation-range addresses, routes, forwarding and offload settings,
//! and guarantees they are removed again: on drop, on panic and on
//! SIGINT/SIGTERM. Every crate's root tests build on it (calling
//! [`require_root_or_skip`] first), and so do the experiments of `px lab`
//! (`px-lab`, `px-quic`). It depends on nothing of ours above `px-io`, so a
//! lower crate's tests never compile the experiments.
//!
//! - [`netns`]: [`Netns`] guards, entering a namespace from Rust, children.
//! - [`link`]: veth pairs placed directly into namespaces.
//! - [`topology`]: [`Topology`], which owns all of it.
//! - [`line`](mod@line): [`Line`], the host — middle box — host line the gateway
//!   lab, the demo and the forwarding tests are built on.
//! - [`impair`]: loss and delay on a link (this kernel has no `netem`).
//! - [`observe`]: counting frame sizes on a link from a host's namespace.
//! - [`shape`]: a link rate on a device's egress (`tbf`).
//! - [`traffic`]: the bulk TCP generator that verifies every byte.
//! - [`gateway`]: `px gateway` run as a lab process in a line's middle box.
//! - [`cpu`]: confining a lab's parts to CPUs and accounting their CPU time;
//!   [`machine`]: the machine a run happened on.
//! - [`addr`]: the only address ranges the lab will configure.
//! - [`cleanup`]: the registry emptied on signals.

pub mod addr;
pub mod cleanup;
pub mod cmd;
pub mod counters;
pub mod cpu;
mod element;
pub mod gateway;
pub mod impair;
pub mod line;
pub mod link;
pub mod machine;
pub mod netns;
pub mod observe;
pub mod runfiles;
pub mod shape;
pub mod topology;
pub mod traffic;

pub use addr::{AddrError, DocPrefix};
pub use cleanup::{TempFile, cleanup_all, install_signal_cleanup, interrupted};
pub use cmd::CmdError;
pub use counters::DevCounters;
pub use element::{send_frame, send_or_drop};
pub use impair::{ImpairSpec, ImpairStats, Impairment};
pub use line::{Addressing, Line, LineImpairment, LineSpec};
pub use link::{LinkEnd, Veth};
pub use machine::Machine;
pub use netns::{LabChild, Netns, NetnsGuard, NsName, Offloads, list_px_namespaces};
pub use observe::{FrameObserver, FrameSizes, SizeCounts};
pub use shape::{LinkRate, RateError};
pub use topology::{LinkId, NsId, Topology};
pub use traffic::{
    BulkResult, BulkSpec, FlowResult, FlowSender, Pace, Pattern, ReceivedFlow, SentFlow, TcpStats, TrafficError,
    bulk_tcp, bulk_tcp_counted, receive_flow, tcp_stats,
};

/// Why a lab operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// An external tool (`ip`, `ethtool`, `sysctl`) failed.
    #[error(transparent)]
    Cmd(#[from] CmdError),
    /// An address outside the documentation ranges, or malformed.
    #[error(transparent)]
    Addr(#[from] AddrError),
    /// A role, interface or namespace name the lab does not accept.
    #[error("invalid name `{0}`")]
    Name(String),
    /// Entering or leaving a namespace with setns(2) failed.
    #[error("cannot enter namespace {name}: {source}")]
    Setns {
        /// The namespace.
        name: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A closure run inside a namespace ([`Netns::run`]) panicked.
    #[error("code running in namespace {0} panicked")]
    Panicked(String),
    /// Installing the signal cleanup failed.
    #[error("cannot install signal cleanup: {0}")]
    Signal(std::io::Error),
    /// Writing a sysctl inside a namespace failed.
    #[error("sysctl {key}: {source}")]
    Sysctl {
        /// The key, e.g. `net.ipv4.ip_forward`.
        key: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A new link did not become operational in time.
    #[error("link not operational: {0}")]
    NotOperational(String),
    /// A frame observer or impairment could not start.
    #[error("lab element: {0}")]
    Observe(String),
    /// A child process was already waited for.
    #[error("process `{0}` was already collected")]
    Gone(String),
}

/// Why root-only tests cannot run here, or `None` if they can: effective
/// uid 0 and a working `ip netns`.
pub fn root_unavailable_reason() -> Option<String> {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not running as root".into());
    }
    match cmd::run_args("ip", &["netns", "list"]) {
        Ok(_) => None,
        Err(e) => Some(format!("`ip netns` does not work: {e}")),
    }
}

/// For root/namespace tests: returns `true` if the test can run, otherwise
/// prints a clear skip message naming the test and returns `false`.
///
/// ```no_run
/// if !px_netns::require_root_or_skip("veth_ping") { return; }
/// ```
pub fn require_root_or_skip(test: &str) -> bool {
    match root_unavailable_reason() {
        None => true,
        Some(why) => {
            eprintln!("SKIPPED {test}: needs root and network namespaces ({why})");
            false
        }
    }
}
