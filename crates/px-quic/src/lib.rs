//! `px-quic`: a real QUIC stack (quinn, rustls with `ring`) on px-netns
//! paths, for `px lab quic`. It answers two questions of issue 14:
//!
//! 1. The lsquic DPLPMTUD blog's experiment ([`bulk`]): five parallel
//!    connections fetch the same file over 1 ms each way with the largest
//!    UDP payload fixed at 1252, 1472, 4096 and 8952 bytes: how much
//!    faster are larger packets? (The blog: 0 / 11 / 35 %.)
//! 2. Where PMTUD starts ([`start`]): quinn's own PMTUD from 1200 bytes
//!    against quinn started at the size one F-PMTUD probe found
//!    (px-pmtud's [`px_pmtud::transport::TransportStart`]): time until
//!    full-size packets flow, time for a short transfer.
//!
//! The path ([`path`]) is two hosts in namespaces with px-netns's own delay
//! element between them (this kernel has no netem); each endpoint's UDP
//! socket is created inside its host's namespace and then driven from one
//! tokio runtime in this process. Every transfer is checked byte for byte
//! ([`fetch`]). The crate is kept out of the `px` binary unless it is
//! built with the `quic` feature.
//!
//! - [`tls`]: the self-signed certificate made at run time.
//! - [`config`]: quinn's transport settings (fixed size or PMTUD).
//! - [`endpoint`]: server and client endpoints on the path.
//! - [`socket`]: quinn's socket with GSO batches that fit 64 KB (quinn
//!   0.11 silently loses batches of large packets otherwise).
//! - [`summary`]: medians, ranges, "% faster".
//! - [`report`]: the result, its table and JSON.

pub mod bulk;
pub mod config;
pub mod endpoint;
pub mod fetch;
pub mod path;
pub mod report;
pub mod socket;
pub mod start;
pub mod summary;
pub mod tls;

use std::time::Duration;

pub use report::QuicResult;

/// Why `px lab quic` could not measure.
#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    /// Building or using the namespace path failed.
    #[error("lab: {0}")]
    Lab(#[from] px_netns::LabError),
    /// A socket or runtime operation failed.
    #[error("{step}: {source}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The certificate or a TLS configuration could not be made.
    #[error("TLS: {0}")]
    Tls(String),
    /// A setting quinn refuses.
    #[error("configuration: {0}")]
    Config(String),
    /// A connection could not be set up or failed.
    #[error("QUIC connection: {0}")]
    Connection(#[from] quinn::ConnectionError),
    /// Connecting failed before any packet (quinn's `ConnectError`).
    #[error("QUIC connect: {0}")]
    Connect(#[from] quinn::ConnectError),
    /// A stream operation failed.
    #[error("QUIC stream: {0}")]
    Stream(String),
    /// The server finished the stream early.
    #[error("transfer ended after {got} of {want} bytes")]
    Short {
        /// Bytes received.
        got: u64,
        /// Bytes asked for.
        want: u64,
    },
    /// A received byte differs from what the server sent.
    #[error("transfer corrupted at byte {offset}")]
    Corrupt {
        /// Stream offset of the first wrong byte.
        offset: u64,
    },
    /// The F-PMTUD probe failed or found nothing QUIC can use.
    #[error("F-PMTUD probe: {0}")]
    Probe(String),
    /// A run did not finish in time.
    #[error("{0} did not finish within {1:?}")]
    Timeout(&'static str, Duration),
}

/// Upper bound on one run (connections, transfer, close).
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// Runs `fut` to completion on `rt`, failing with `what` after [`RUN_LIMIT`].
fn block_on_bounded<T>(
    rt: &tokio::runtime::Runtime,
    what: &'static str,
    fut: impl Future<Output = Result<T, QuicError>>,
) -> Result<T, QuicError> {
    rt.block_on(async { tokio::time::timeout(RUN_LIMIT, fut).await.map_err(|_| QuicError::Timeout(what, RUN_LIMIT))? })
}

fn io_err(step: &'static str) -> impl FnOnce(std::io::Error) -> QuicError {
    move |source| QuicError::Io { step, source }
}

/// What `px lab quic` runs.
#[derive(Debug, Clone)]
pub struct QuicOptions {
    /// Bytes each connection fetches in the packet-size experiment.
    pub bytes: u64,
    /// Runs per payload size (and per PMTUD start); the median is reported.
    pub runs: usize,
    /// Parallel connections (the blog: five).
    pub connections: usize,
    /// Largest UDP payloads to compare; the first is the baseline of
    /// `faster_than_1252_pct` (1252 in `px lab quic`, as in the blog).
    pub payloads: Vec<u16>,
    /// Delay each way.
    pub delay: Duration,
    /// Bytes of the short transfer in the PMTUD-start comparison.
    pub short_bytes: u64,
    /// Run the PMTUD-start comparison too.
    pub pmtud: bool,
}

impl QuicOptions {
    /// The blog's setting scaled to a 2-core lab: 5 connections × 50 MB,
    /// 1 ms each way, 3 runs, payloads 1252 / 1472 / 4096 / 8952, a 1 MB
    /// short transfer.
    #[must_use]
    pub fn new() -> QuicOptions {
        QuicOptions {
            bytes: 50_000_000,
            runs: 3,
            connections: 5,
            payloads: vec![1252, 1472, 4096, 8952],
            delay: Duration::from_millis(1),
            short_bytes: 1_000_000,
            pmtud: true,
        }
    }
}

impl Default for QuicOptions {
    fn default() -> Self {
        QuicOptions::new()
    }
}

/// Runs `px lab quic`; `say` gets a line of progress at each step.
pub fn run(o: &QuicOptions, say: &dyn Fn(&str)) -> Result<QuicResult, QuicError> {
    if o.runs == 0 || o.connections == 0 || o.payloads.is_empty() || o.bytes == 0 || o.short_bytes == 0 {
        return Err(QuicError::Config("runs, connections, payloads and byte counts must be non-zero".into()));
    }
    let largest = path::MTU - 28;
    if let Some(p) = o.payloads.iter().find(|&&p| !(1200..=largest).contains(&p)) {
        return Err(QuicError::Config(format!("payload {p} is outside 1200..={largest} (path MTU {})", path::MTU)));
    }
    px_netns::install_signal_cleanup().map_err(io_err("signal cleanup"))?;
    let machine = px_netns::Machine::current();
    say(&format!("px lab quic: building server — delay element ({:?} each way) — client, MTU {}…", o.delay, path::MTU));
    let lab = path::QuicPath::build(o.delay)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(io_err("tokio runtime"))?;
    let tls = tls::Tls::self_signed()?;
    let bulk = bulk::run(&rt, &lab, &tls, o, say)?;
    let start = if o.pmtud { Some(start::run(&rt, &lab, &tls, o, say)?) } else { None };
    drop(rt);
    let impairment = lab.stop();
    Ok(QuicResult::new(o, machine, bulk, start, impairment))
}
