//! The lsquic blog's experiment: N parallel connections fetch the same
//! file with the largest UDP payload fixed, for each payload size, `runs`
//! times (the sizes interleaved, so a change in the machine's load hits
//! every size alike).
//!
//! What is timed: from the moment all N connections are established to
//! the last byte of the last fetch (the handshakes are not counted; the
//! blog timed whole fetches of 1 GB, where a handshake is noise). What is
//! counted, from the server's side: UDP datagrams and bytes sent, the
//! size quinn held (`current_mtu`), lost packets and congestion events;
//! from both hosts, datagrams dropped on a full socket buffer.

use std::time::Instant;

use serde::Serialize;
use tokio::runtime::Runtime;

use crate::config::Sizing;
use crate::endpoint::{accept, close_client, close_server, connect, server};
use crate::path::QuicPath;
use crate::tls::Tls;
use crate::{QuicError, QuicOptions, block_on_bounded, fetch};

/// One run of one payload size.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BulkRun {
    /// The fixed largest UDP payload.
    pub payload: u16,
    /// Seconds from all connections established to the last byte.
    pub seconds: f64,
    /// UDP datagrams the server sent (all connections).
    pub datagrams: u64,
    /// UDP datagrams the clients received (all connections): with
    /// `datagrams`, tells real losses from packets declared lost that
    /// arrived.
    pub client_datagrams: u64,
    /// UDP payload bytes the server sent.
    pub udp_bytes: u64,
    /// The smallest `current_mtu` quinn reported on the server's connections.
    pub server_mtu: u16,
    /// Packets the server declared lost.
    pub lost_packets: u64,
    /// Congestion events on the server's connections.
    pub congestion_events: u64,
    /// Datagrams the two hosts dropped on a full socket receive buffer.
    pub rcvbuf_drops: u64,
}

/// Runs every payload `o.runs` times; the runs in the order made.
pub fn run(
    rt: &Runtime,
    lab: &QuicPath,
    tls: &Tls,
    o: &QuicOptions,
    say: &dyn Fn(&str),
) -> Result<Vec<BulkRun>, QuicError> {
    let mut out = Vec::new();
    for r in 0..o.runs {
        for &payload in &o.payloads {
            say(&format!(
                "px lab quic: run {}/{}, payload {payload} B: {} connections × {} bytes…",
                r + 1,
                o.runs,
                o.connections,
                o.bytes
            ));
            let once = block_on_bounded(rt, "a transfer run", once(lab, tls, payload, o))?;
            out.push(once);
        }
    }
    Ok(out)
}

async fn once(lab: &QuicPath, tls: &Tls, payload: u16, o: &QuicOptions) -> Result<BulkRun, QuicError> {
    let sizing = Sizing::Fixed(payload);
    let (server_ep, at) = server(lab, tls, sizing)?;
    let n = o.connections;
    let accepting = {
        let ep = server_ep.clone();
        tokio::spawn(async move {
            let mut serving = Vec::with_capacity(n);
            for _ in 0..n {
                let conn = accept(&ep).await?;
                let c = conn.clone();
                serving.push((conn, tokio::spawn(fetch::serve(c))));
            }
            Ok::<_, QuicError>(serving)
        })
    };
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(connect(lab, tls, sizing, at).await?);
    }
    let drops_before = lab.rcvbuf_errors()?;
    let t0 = Instant::now();
    let fetches: Vec<_> = clients
        .iter()
        .map(|(_, c)| {
            let (c, bytes) = (c.clone(), o.bytes);
            tokio::spawn(async move { fetch::fetch(&c, bytes).await })
        })
        .collect();
    for f in fetches {
        f.await.map_err(|e| QuicError::Stream(format!("fetch task: {e}")))??;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let drops_after = lab.rcvbuf_errors()?;
    let client_datagrams = clients.iter().map(|(_, c)| c.stats().udp_rx.datagrams).sum();
    for (ep, conn) in clients {
        close_client(ep, conn).await;
    }
    let serving = accepting.await.map_err(|e| QuicError::Stream(format!("accept task: {e}")))??;
    let mut run = BulkRun {
        payload,
        seconds,
        datagrams: 0,
        client_datagrams,
        udp_bytes: 0,
        server_mtu: u16::MAX,
        lost_packets: 0,
        congestion_events: 0,
        rcvbuf_drops: (0..2).map(|i| drops_after[i].saturating_sub(drops_before[i])).sum(),
    };
    for (conn, task) in serving {
        task.await.map_err(|e| QuicError::Stream(format!("serve task: {e}")))??;
        let s = conn.stats();
        run.datagrams += s.udp_tx.datagrams;
        run.udp_bytes += s.udp_tx.bytes;
        run.server_mtu = run.server_mtu.min(s.path.current_mtu);
        run.lost_packets += s.path.lost_packets;
        run.congestion_events += s.path.congestion_events;
    }
    close_server(server_ep).await;
    Ok(run)
}
