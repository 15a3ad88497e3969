//! Where PMTUD starts: quinn with its own PMTUD from its default start
//! (1200 bytes) against quinn started at the size one F-PMTUD probe found,
//! both searching up to the largest payload the link allows (quinn's
//! default ceiling, 1452, would never reach a jumbo path's size).
//!
//! Per run and start, a fresh connection fetches a short file. Timed from
//! the client's `connect` (handshake included): until the server's
//! quinn holds a full-size packet size (its path statistics, sampled
//! every millisecond; "full size" is within quinn's own search precision,
//! [`crate::summary::is_full_size`]) and until the last byte of the
//! fetch. The F-PMTUD start also pays the probe (from the server host to
//! the `px fpmtud` responder core on the client host, before the
//! connection), reported on its own and added in the totals.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use px_pmtud::fpmtud::wire::DEFAULT_PORT;
use px_pmtud::search::SearchStrategy;
use px_pmtud::transport::{QUIC_MIN_PAYLOAD, TransportStart};
use px_runtime::pmtud::probe::{self, Measurement, Method, ProbeOptions};
use px_runtime::pmtud::responder::{Daemon, DaemonConfig};
use quinn::Connection;
use serde::Serialize;
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

use crate::config::Sizing;
use crate::endpoint::{accept, close_client, close_server, connect, server};
use crate::path::{MTU, QuicPath};
use crate::summary::is_full_size;
use crate::tls::Tls;
use crate::{QuicError, QuicOptions, block_on_bounded, fetch, io_err};

/// quinn's default `MtuDiscoveryConfig::minimum_change`.
const QUINN_MINIMUM_CHANGE: u16 = 20;
/// How long the server's packet size is watched for reaching full size.
const WATCH_LIMIT: Duration = Duration::from_secs(5);

/// One connection's figures.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StartRun {
    /// The size quinn started at (UDP payload).
    pub initial_payload: u16,
    /// The F-PMTUD probe before the connection (zero for quinn's own start).
    pub probe_ms: f64,
    /// Round trips the probe waited for (zero for quinn's own start).
    pub probe_round_trips: u32,
    /// From `connect` until the server's quinn held a full-size packet
    /// size (`None`: not within the watch limit).
    pub to_full_ms: Option<f64>,
    /// From `connect` to the last byte of the short fetch.
    pub fetch_ms: f64,
    /// The server's packet size at the end.
    pub final_payload: u16,
    /// PMTUD probes the server sent.
    pub plpmtud_probes: u64,
}

/// Both starts, `runs` times each: `(quinn's own, F-PMTUD)`.
pub fn run(
    rt: &Runtime,
    lab: &QuicPath,
    tls: &Tls,
    o: &QuicOptions,
    say: &dyn Fn(&str),
) -> Result<(Vec<StartRun>, Vec<StartRun>), QuicError> {
    let full = MTU - 28;
    let responder = Responder::start(lab)?;
    let (mut own, mut probed) = (Vec::new(), Vec::new());
    for r in 0..o.runs {
        say(&format!(
            "px lab quic: PMTUD start, run {}/{}: quinn from 1200, then from one F-PMTUD probe…",
            r + 1,
            o.runs
        ));
        let sizing = Sizing::Discover { initial: QUIC_MIN_PAYLOAD, ceiling: full };
        own.push(block_on_bounded(rt, "a PMTUD-start run", once(lab, tls, sizing, (0.0, 0), o.short_bytes, full))?);
        let (m, probe_time) = measure(lab, responder.addr)?;
        let start = TransportStart::from_measurement(&m, false, QUIC_MIN_PAYLOAD)
            .ok_or_else(|| QuicError::Probe(format!("no usable path MTU: {:?} ({})", m.pmtu, m.note)))?;
        let sizing = Sizing::Discover { initial: start.initial_payload, ceiling: start.search_ceiling };
        let probe = (probe_time.as_secs_f64() * 1e3, m.round_trips);
        probed.push(block_on_bounded(rt, "a PMTUD-start run", once(lab, tls, sizing, probe, o.short_bytes, full))?);
    }
    drop(responder);
    Ok((own, probed))
}

/// One F-PMTUD measurement from the server host to the responder, timed
/// from opening the socket to the answer.
fn measure(lab: &QuicPath, target: SocketAddr) -> Result<(Measurement, Duration), QuicError> {
    let opts = ProbeOptions {
        target,
        max_size: None,
        timeout: Duration::from_secs(2),
        probe_timer: Duration::from_millis(25),
        initial_rtt: Duration::from_millis(10),
        search: SearchStrategy::lsquic_exact(),
        legacy: false,
    };
    lab.server_ns()
        .run(|| {
            let t0 = Instant::now();
            let path = probe::Path::open(&opts)?;
            let m = probe::measure(&path, &opts, Method::Fpmtud)?;
            Ok::<_, probe::ProbeError>((m, t0.elapsed()))
        })?
        .map_err(|e| QuicError::Probe(e.to_string()))
}

async fn once(
    lab: &QuicPath,
    tls: &Tls,
    sizing: Sizing,
    probe: (f64, u32),
    short_bytes: u64,
    full: u16,
) -> Result<StartRun, QuicError> {
    let (server_ep, at) = server(lab, tls, sizing)?;
    let (full_tx, full_rx) = oneshot::channel();
    let watching = {
        let ep = server_ep.clone();
        tokio::spawn(async move {
            let conn = accept(&ep).await?;
            let serving = tokio::spawn(fetch::serve(conn.clone()));
            let reached = watch(&conn, full).await;
            let _ = full_tx.send(());
            serving.await.map_err(|e| QuicError::Stream(format!("serve task: {e}")))??;
            Ok::<_, QuicError>((reached, conn.stats()))
        })
    };
    // The client keeps quinn's own start: the server's packets are measured.
    let client_sizing = Sizing::Discover { initial: QUIC_MIN_PAYLOAD, ceiling: full };
    let t0 = Instant::now();
    let (ep, conn) = connect(lab, tls, client_sizing, at).await?;
    fetch::fetch(&conn, short_bytes).await?;
    let fetch_ms = t0.elapsed().as_secs_f64() * 1e3;
    // Keep the connection up until the server's size was seen to settle.
    let _ = full_rx.await;
    close_client(ep, conn).await;
    let (reached, stats) = watching.await.map_err(|e| QuicError::Stream(format!("watch task: {e}")))??;
    close_server(server_ep).await;
    let initial_payload = match sizing {
        Sizing::Fixed(p) | Sizing::Discover { initial: p, .. } => p,
    };
    Ok(StartRun {
        initial_payload,
        probe_ms: probe.0,
        probe_round_trips: probe.1,
        to_full_ms: reached.map(|at| at.saturating_duration_since(t0).as_secs_f64() * 1e3),
        fetch_ms,
        final_payload: stats.path.current_mtu,
        plpmtud_probes: stats.path.sent_plpmtud_probes,
    })
}

/// Samples the connection's packet size every millisecond until it is
/// full size (the instant it was first seen so) or the watch limit.
async fn watch(conn: &Connection, full: u16) -> Option<Instant> {
    let until = Instant::now() + WATCH_LIMIT;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while Instant::now() < until && conn.close_reason().is_none() {
        if is_full_size(conn.stats().path.current_mtu, full, QUINN_MINIMUM_CHANGE) {
            return Some(Instant::now());
        }
        tick.tick().await;
    }
    None
}

/// px-runtime's F-PMTUD responder, bound in the client host, on a thread
/// until dropped.
struct Responder {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl Responder {
    fn start(lab: &QuicPath) -> Result<Responder, QuicError> {
        let addr = QuicPath::client_addr(DEFAULT_PORT)?;
        let cfg = DaemonConfig { bind: vec![addr], ..DaemonConfig::default() };
        let mut daemon = lab.client_ns().run(|| Daemon::open(&cfg))?.map_err(io_err("F-PMTUD responder"))?;
        let stop = daemon.stop_handle();
        let thread = std::thread::Builder::new()
            .name("px-quic-responder".into())
            .spawn(move || daemon.run())
            .map_err(io_err("responder thread"))?;
        Ok(Responder { addr, stop, thread: Some(thread) })
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
