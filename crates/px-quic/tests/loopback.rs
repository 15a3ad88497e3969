//! quinn server and client on the loopback of a fresh namespace (root;
//! skips otherwise): a fetch with 8952-byte packets arrives byte-exact,
//! the server's packets are that size, and nothing is lost (quinn's own
//! GSO batches of ten such packets exceed 64 KB and vanish without
//! [`px_quic::socket::GsoCapped`]).

use std::net::SocketAddr;
use std::sync::Arc;

use px_netns::Netns;
use px_quic::config::{self, Sizing};
use px_quic::fetch;
use px_quic::path::QuicPath;
use px_quic::socket::GsoCapped;
use px_quic::tls::{SERVER_NAME, Tls};
use quinn::{Endpoint, TokioRuntime};

#[test]
fn jumbo_fetch_over_loopback_loses_nothing() {
    if !px_netns::require_root_or_skip("jumbo_fetch_over_loopback_loses_nothing") {
        return;
    }
    let ns = Netns::new("qloop").unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let sizing = Sizing::Fixed(8952);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let tls = Tls::self_signed().unwrap();
        let mut sc = tls.server.clone();
        sc.transport_config(config::transport(sizing));
        let sock = GsoCapped::wrap(QuicPath::socket(&ns, any).unwrap(), sizing.largest()).unwrap();
        let server =
            Endpoint::new_with_abstract_socket(config::endpoint(8972).unwrap(), Some(sc), sock, Arc::new(TokioRuntime))
                .unwrap();
        let addr = server.local_addr().unwrap();
        let s = server.clone();
        let serving = tokio::spawn(async move {
            let conn = s.accept().await.unwrap().await.unwrap();
            fetch::serve(conn.clone()).await.unwrap();
            conn.stats()
        });
        let sock = GsoCapped::wrap(QuicPath::socket(&ns, any).unwrap(), sizing.largest()).unwrap();
        let mut client =
            Endpoint::new_with_abstract_socket(config::endpoint(8972).unwrap(), None, sock, Arc::new(TokioRuntime))
                .unwrap();
        let mut cc = tls.client.clone();
        cc.transport_config(config::transport(sizing));
        client.set_default_client_config(cc);
        let conn = client.connect(addr, SERVER_NAME).unwrap().await.unwrap();
        fetch::fetch(&conn, 3_000_001).await.unwrap();
        conn.close(0u32.into(), b"done");
        let stats = serving.await.unwrap();
        assert_eq!(stats.path.current_mtu, 8952);
        assert_eq!(stats.path.lost_packets, 0, "{:?}", stats.path);
        // 3 MB in packets of at most 8952 bytes, most of them full.
        assert!(stats.udp_tx.bytes / stats.udp_tx.datagrams > 7000, "{:?}", stats.udp_tx);
    });
}
