//! quinn server and client on loopback (no namespaces, no root): a fetch
//! with a fixed packet size arrives byte-exact and the server's packets
//! are that size.

use std::net::UdpSocket;
use std::sync::Arc;

use px_quic::config::{self, Sizing};
use px_quic::fetch;
use px_quic::tls::{SERVER_NAME, Tls};
use quinn::{Endpoint, TokioRuntime};

fn socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_nonblocking(true).unwrap();
    s
}

#[test]
fn fixed_size_fetch_over_loopback() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let tls = Tls::self_signed().unwrap();
        let sizing = Sizing::Fixed(4096);
        let mut sc = tls.server.clone();
        sc.transport_config(config::transport(sizing));
        let server =
            Endpoint::new(config::endpoint(8972).unwrap(), Some(sc), socket(), Arc::new(TokioRuntime)).unwrap();
        let addr = server.local_addr().unwrap();
        let s = server.clone();
        let serving = tokio::spawn(async move {
            let conn = s.accept().await.unwrap().await.unwrap();
            fetch::serve(conn.clone()).await.unwrap();
            conn.stats()
        });
        let mut client =
            Endpoint::new(config::endpoint(8972).unwrap(), None, socket(), Arc::new(TokioRuntime)).unwrap();
        let mut cc = tls.client.clone();
        cc.transport_config(config::transport(sizing));
        client.set_default_client_config(cc);
        let conn = client.connect(addr, SERVER_NAME).unwrap().await.unwrap();
        fetch::fetch(&conn, 3_000_001).await.unwrap();
        conn.close(0u32.into(), b"done");
        let stats = serving.await.unwrap();
        assert_eq!(stats.path.current_mtu, 4096);
        // 3 MB in packets of at most 4096 bytes, most of them full.
        assert!(stats.udp_tx.bytes / stats.udp_tx.datagrams > 3000, "{:?}", stats.udp_tx);
    });
}
