//! `px-lab`: the experiments of `px lab` and `px bench gateway`.
//!
//! Each experiment reproduces a result (the paper's, a seed's, a border's)
//! in network namespaces built with the fixtures of [`px_netns`], measures
//! it against a plain Linux router in the same run, and returns a result
//! that prints itself as a table, a plot and JSON. One module per verb:
//!
//! - [`demo`]: `px lab demo` (gateway vs router, iperf3) and `px lab up` /
//!   `down` (the same topology left running).
//! - [`pmtud`]: `px lab pmtud`, path-MTU lab paths and the comparison of the
//!   probing methods on them.
//! - [`receiver`], [`wan`], [`gro`], [`middlebox`], [`parallel`]: the
//!   paper's end-host experiments; [`report`] runs them all into one
//!   Markdown report. What they share is in [`exp`].
//! - [`rr`]: `px lab rr` (request/response latency, gateway vs router).
//! - [`rtt`]: `px lab rtt` (the 1500-vs-9000 RTT study).
//! - [`survey`]: the lab "Internet" of `px lab survey` (the fragment-delivery
//!   survey against a known ground truth).
//! - [`border`]: `px lab border` (iMTU over BGP, ECMP failover).
//! - [`gateway_bench`]: the experiment of `px bench gateway` (px-bench's
//!   trace replayed through packet sockets: gateway vs Linux router).
//!
//! The fixtures are re-exported under their old paths (`px_lab::Line`,
//! `px_lab::line::LEFT_V4`, …) for the experiments and the `px` crate's
//! root tests; crates below the lab name [`px_netns`] directly.

pub mod border;
pub mod demo;
pub mod exp;
pub mod gateway_bench;
pub mod gro;
pub mod middlebox;
pub mod parallel;
pub mod pmtud;
pub mod receiver;
pub mod report;
pub mod rr;
pub mod rtt;
pub mod survey;
pub mod wan;

pub use px_netns::{
    AddrError, Addressing, BulkResult, BulkSpec, CmdError, DocPrefix, FlowResult, FlowSender, FrameObserver,
    FrameSizes, ImpairSpec, ImpairStats, Impairment, LabChild, LabError, Line, LineImpairment, LineSpec, LinkEnd,
    LinkId, LinkRate, Netns, NetnsGuard, NsId, NsName, Offloads, Pace, Pattern, RateError, ReceivedFlow, SentFlow,
    SizeCounts, TcpStats, Topology, TrafficError, Veth, bulk_tcp, bulk_tcp_counted, cleanup_all,
    install_signal_cleanup, interrupted, list_px_namespaces, receive_flow, require_root_or_skip,
    root_unavailable_reason, send_frame, send_or_drop, tcp_stats,
};
pub use px_netns::{addr, cleanup, cmd, cpu, gateway, impair, line, link, netns, observe, shape, topology, traffic};

/// Why a lab run (an experiment, the demo, `lab up`) could not be done:
/// the one error type its public entry points return.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Not root, no network namespaces, or too few CPUs.
    #[error("{what} needs {need}")]
    Unavailable {
        /// The run.
        what: String,
        /// What it lacks.
        need: String,
    },
    /// A tool the run needs is not installed.
    #[error("`{tool}` is not installed ({hint})")]
    MissingTool {
        /// The command.
        tool: String,
        /// Where to get it.
        hint: &'static str,
    },
    /// Building or driving the namespaces failed.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// The `px gateway` process failed.
    #[error(transparent)]
    Gateway(#[from] gateway::GatewayError),
    /// A step of the run failed: what was being done and what was seen.
    #[error("{0}")]
    Step(String),
}

impl From<String> for RunError {
    fn from(s: String) -> RunError {
        RunError::Step(s)
    }
}

impl From<&str> for RunError {
    fn from(s: &str) -> RunError {
        RunError::Step(s.to_string())
    }
}

impl From<RunError> for String {
    /// For callers that report what failed as text.
    fn from(e: RunError) -> String {
        e.to_string()
    }
}
