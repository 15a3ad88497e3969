//! quinn endpoints on the lab path: the server in the server host, each
//! client on its own socket in the client host, both sized by a
//! [`Sizing`], both on [`GsoCapped`] sockets, accepting UDP payloads up to
//! the path's largest.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::{AsyncUdpSocket, Connection, Endpoint, TokioRuntime};

use crate::config::{self, Sizing};
use crate::path::{MTU, QuicPath};
use crate::socket::GsoCapped;
use crate::tls::{SERVER_NAME, Tls};
use crate::{QuicError, io_err};

/// How long closing waits for an endpoint's connections to drain.
const IDLE_LIMIT: Duration = Duration::from_secs(2);

/// A server endpoint in the server host on a port of the kernel's
/// choosing, sized by `sizing`; its address with it.
pub fn server(lab: &QuicPath, tls: &Tls, sizing: Sizing) -> Result<(Endpoint, SocketAddr), QuicError> {
    let sock = GsoCapped::wrap(QuicPath::socket(lab.server_ns(), QuicPath::server_addr(0)?)?, sizing.largest())?;
    let addr = sock.local_addr().map_err(io_err("getsockname"))?;
    let mut sc = tls.server.clone();
    sc.transport_config(config::transport(sizing));
    let ep = Endpoint::new_with_abstract_socket(config::endpoint(MTU - 28)?, Some(sc), sock, Arc::new(TokioRuntime))
        .map_err(io_err("server endpoint"))?;
    Ok((ep, addr))
}

/// A client endpoint in the client host, connected to the server at `to`.
pub async fn connect(
    lab: &QuicPath,
    tls: &Tls,
    sizing: Sizing,
    to: SocketAddr,
) -> Result<(Endpoint, Connection), QuicError> {
    let sock = GsoCapped::wrap(QuicPath::socket(lab.client_ns(), QuicPath::client_addr(0)?)?, sizing.largest())?;
    let mut ep = Endpoint::new_with_abstract_socket(config::endpoint(MTU - 28)?, None, sock, Arc::new(TokioRuntime))
        .map_err(io_err("client endpoint"))?;
    let mut cc = tls.client.clone();
    cc.transport_config(config::transport(sizing));
    ep.set_default_client_config(cc);
    let conn = ep.connect(to, SERVER_NAME)?.await?;
    Ok((ep, conn))
}

/// Accepts one connection on `ep`.
pub async fn accept(ep: &Endpoint) -> Result<Connection, QuicError> {
    let incoming = ep.accept().await.ok_or_else(|| QuicError::Stream("server endpoint closed".into()))?;
    Ok(incoming.await?)
}

/// Closes a client connection and waits (a bounded time) until its
/// endpoint is idle.
pub async fn close_client(ep: Endpoint, conn: Connection) {
    conn.close(0u32.into(), b"done");
    let _ = tokio::time::timeout(IDLE_LIMIT, ep.wait_idle()).await;
}

/// Closes the server endpoint and waits (a bounded time) until it is idle.
pub async fn close_server(ep: Endpoint) {
    ep.close(0u32.into(), b"bye");
    let _ = tokio::time::timeout(IDLE_LIMIT, ep.wait_idle()).await;
}
