//! Root tests of `px gateway` with real TCP programs at the border (issue
//! 10): a BGP session signed with TCP-MD5 (BIRD 2 on both sides) passes
//! untouched, and TCP Fast Open with a SYN carrying more data than the
//! outer MTU takes is cut with the SYN once, and Multipath TCP connections
//! (real Linux MPTCP sockets) stay MPTCP at the raised MSS, a merged
//! connection's zero-window probes and keepalives reach the far end and
//! are answered, and urgent data keeps its byte both ways. The topology of
//! `gateway_lab.rs` (legacy host, eMTU 1500 — gateway — b-network host,
//! iMTU 9000); offloads as there (TSO/GSO off on the hosts, GRO on at the
//! gateway's ports). Each test skips with a message when it cannot run.

mod common;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use px_lab::{LabChild, Netns, require_root_or_skip};

fn have(program: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// BIRD 2 speaking BGP with a TCP-MD5 password from `me` (address, AS) to
/// `peer`, announcing `prefix`.
fn bird(ns: &Netns, dir: &Path, side: &str, me: (&str, u32), peer: (&str, u32), prefix: &str) -> (LabChild, PathBuf) {
    let ((me, my_as), (peer, peer_as)) = (me, peer);
    let conf = dir.join(format!("{side}.conf"));
    let ctl = dir.join(format!("{side}.ctl"));
    std::fs::write(
        &conf,
        format!(
            "log stderr all;\nrouter id {me};\nprotocol device {{ }}\n\
             protocol static {{ ipv4; route {prefix} blackhole; }}\n\
             protocol bgp peer {{\n  local {me} as {my_as};\n  neighbor {peer} as {peer_as};\n\
               password \"px-md5-lab\";\n  connect retry time 1;\n  ipv4 {{ import all; export all; }};\n}}\n"
        ),
    )
    .unwrap();
    let child = ns
        .spawn(
            "bird",
            &[
                "-f",
                "-c",
                conf.to_str().unwrap(),
                "-s",
                ctl.to_str().unwrap(),
                "-P",
                dir.join(format!("{side}.pid")).to_str().unwrap(),
            ],
        )
        .expect("bird");
    (child, ctl)
}

fn birdc(ns: &Netns, ctl: &Path, args: &[&str]) -> String {
    let mut a = vec!["-s", ctl.to_str().unwrap()];
    a.extend_from_slice(args);
    run_in(ns, "birdc", &a).1
}

/// The MSS (`mss:` of `ss -ti`) of the BGP connection in `ns`.
fn bgp_mss(ns: &Netns) -> Option<u32> {
    let (_, out) = run_in(ns, "ss", &["-tinH", "state", "established", "( sport = :179 or dport = :179 )"]);
    out.split_whitespace().find_map(|w| w.strip_prefix("mss:")?.parse().ok())
}

/// A BGP session with an MD5 password across the gateway establishes and
/// exchanges routes; the gateway raised no MSS (the b-network side's
/// socket uses the legacy host's MSS), counted the segments as signed and
/// dropped nothing.
#[test]
fn bgp_with_md5_passes_untouched() {
    if !require_root_or_skip("bgp_with_md5_passes_untouched") {
        return;
    }
    if !have("bird") || !have("birdc") {
        eprintln!("SKIP bgp_with_md5_passes_untouched: BIRD 2 is not installed (Debian package bird2, scripts/lib.sh)");
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let gw = Gateway::start(&lab, &[]);
    lab.ping_both();
    let dir = Scratch::new("bgp-md5");
    let (_a, ctl_a) =
        bird(lab.ns(lab.legacy), &dir.0, "legacy", (LEGACY_V4, 64500), (BNET_V4, 64501), "203.0.113.0/26");
    let (_b, ctl_b) = bird(lab.ns(lab.bnet), &dir.0, "bnet", (BNET_V4, 64501), (LEGACY_V4, 64500), "203.0.113.64/26");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut routes_a, mut routes_b) = (String::new(), String::new());
    loop {
        let up = [&ctl_a, &ctl_b]
            .iter()
            .zip([lab.legacy, lab.bnet])
            .all(|(c, ns)| birdc(lab.ns(ns), c, &["show", "protocols", "peer"]).contains("Established"));
        if up {
            routes_a = birdc(lab.ns(lab.legacy), &ctl_a, &["show", "route", "203.0.113.64/26"]);
            routes_b = birdc(lab.ns(lab.bnet), &ctl_b, &["show", "route", "203.0.113.0/26"]);
            if routes_a.contains("203.0.113.64/26") && routes_b.contains("203.0.113.0/26") {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no BGP session with routes within 60 s:\nlegacy: {}\nbnet: {}\n{routes_a}\n{routes_b}",
            birdc(lab.ns(lab.legacy), &ctl_a, &["show", "protocols", "all", "peer"]),
            birdc(lab.ns(lab.bnet), &ctl_b, &["show", "protocols", "all", "peer"])
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let mss = bgp_mss(lab.ns(lab.bnet)).expect("the b-network side's BGP socket");
    assert!(mss <= 1460, "the b-network side's MSS {mss} was raised (MD5 flows must pass untouched)");
    let exit = gw.stop();
    exit.assert_clean();
    eprintln!("bgp md5: b-network side mss {mss}; gateway counters: {}", exit.stats["counters"]);
    assert_eq!(exit.counter("mss_raised"), 0, "{}", exit.stats);
    assert_eq!(exit.counter("mss_clamped"), 0, "{}", exit.stats);
    assert!(exit.counter("signed_passed") > 0, "{}", exit.stats);
    assert_eq!(exit.counter("merged_in"), 0, "{}", exit.stats);
}

const TCP_FASTOPEN: libc::c_int = 23;
const TCP_FASTOPEN_CONNECT: libc::c_int = 30;

/// Sets the `IPPROTO_TCP` int option `opt` on `fd`.
fn set_int(fd: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    set_sock_int(fd, libc::IPPROTO_TCP, opt, v)
}

/// A TCP Fast Open client connection (`TCP_FASTOPEN_CONNECT`: the first
/// write goes in the SYN when a cookie is cached): sends `data`, half-closes
/// and waits for the server to close.
fn tfo_client(server: SocketAddr, data: &[u8]) -> io::Result<()> {
    let mut s = stream_connect(server, 0, &[(TCP_FASTOPEN_CONNECT, 1)])?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    s.write_all(data)?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)?;
    Ok(())
}

/// `TcpExt` counter `name` of the namespace (read inside it).
fn tcp_ext(ns: &Netns, name: &str) -> u64 {
    netstat(ns, "TcpExt:", name)
}

/// Counter `name` of the `group` lines (`TcpExt:`, `MPTcpExt:`) of the
/// namespace's `/proc/net/netstat` (read inside it); 0 if absent.
fn netstat(ns: &Netns, group: &str, name: &str) -> u64 {
    let text = ns.run(|| std::fs::read_to_string("/proc/thread-self/net/netstat").unwrap()).unwrap();
    let mut lines = text.lines().filter(|l| l.starts_with(group));
    let (keys, vals) = (lines.next().unwrap(), lines.next().unwrap());
    keys.split_whitespace()
        .zip(vals.split_whitespace())
        .find(|(k, _)| *k == name)
        .map_or(0, |(_, v)| v.parse().unwrap())
}

/// Real TCP Fast Open from the b-network host to a legacy server: the
/// first connection fetches the cookie and caches the server's MSS, which
/// the gateway raised; the second sends a SYN with ~8.9 KB of data, more
/// than the outer link takes. The gateway cuts it with SYN on the first
/// piece only (one SYN on the outer link for that connection), the server
/// accepts the first piece's data in the SYN (the later pieces of a
/// client's SYN carry no ACK: the server drops them and the client resends
/// that data after the SYN-ACK), and both transfers are exact.
#[test]
fn tcp_fast_open_syn_with_data_is_cut_with_one_syn() {
    if !require_root_or_skip("tcp_fast_open_syn_with_data_is_cut_with_one_syn") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    for ns in [lab.legacy, lab.bnet] {
        lab.ns(ns).set_sysctl("net.ipv4.tcp_fastopen", "3").unwrap();
    }
    let gw = Gateway::start(&lab, &[]);
    lab.ping_both();
    let port = 5341u16;
    let dir = Scratch::new("tfo");
    let pcap = dir.0.join("legacy.pcap");
    let filter = format!("tcp port {port}");
    // --immediate-mode: libpcap hands each packet over at once instead of
    // in blocks retired on a timeout of up to a second, and -U writes it at
    // once; the capture is stopped (killed) half a second after the last
    // connection, which under load could lose the block with its SYN.
    let dump = lab
        .ns(lab.legacy)
        .spawn(
            "tcpdump",
            &["-i", LEGACY_DEV, "-n", "--immediate-mode", "-U", "-s", "128", "-w", pcap.to_str().unwrap(), &filter],
        )
        .expect("tcpdump");
    std::thread::sleep(Duration::from_millis(800));
    let server = sock(LEGACY_V4, port);
    let listener = lab
        .ns(lab.legacy)
        .run(|| {
            let l = TcpListener::bind(server)?;
            set_int(l.as_raw_fd(), TCP_FASTOPEN, 16)?;
            Ok::<_, io::Error>(l)
        })
        .unwrap()
        .expect("TFO listener");
    set_accept_timeout(&listener, Duration::from_secs(20));
    let messages: Vec<Vec<u8>> =
        (0..2u8).map(|k| (0..30_000u32).map(|i| (i * 31 + k as u32 * 7) as u8 ^ (i >> 8) as u8).collect()).collect();
    let received = std::thread::scope(|s| {
        let srv = s.spawn(|| {
            let mut got = Vec::new();
            for _ in 0..2 {
                let (mut c, _) = listener.accept().expect("accept");
                c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut v = Vec::new();
                c.read_to_end(&mut v).expect("read");
                got.push(v);
            }
            got
        });
        for m in &messages {
            lab.ns(lab.bnet).run(|| tfo_client(server, m)).unwrap().expect("TFO client");
            std::thread::sleep(Duration::from_millis(200));
        }
        srv.join().unwrap()
    });
    assert_eq!(received.len(), 2);
    for (k, (got, sent)) in received.iter().zip(&messages).enumerate() {
        assert!(got == sent, "connection {k}: {} bytes received of {}, or different", got.len(), sent.len());
    }
    std::thread::sleep(Duration::from_millis(500));
    drop(dump);
    let passive = tcp_ext(lab.ns(lab.legacy), "TCPFastOpenPassive");
    // The client counts a SYN whose data was acknowledged in full as
    // TCPFastOpenActive, and one acknowledged in part (the server takes
    // the first piece's data; the later pieces carry no ACK, so it drops
    // them and the client resends them at once) as TCPFastOpenActiveFail.
    let active = tcp_ext(lab.ns(lab.bnet), "TCPFastOpenActive") + tcp_ext(lab.ns(lab.bnet), "TCPFastOpenActiveFail");
    // SYNs (no ACK) that reached the legacy host, with their payload length.
    let (_, syns) = run_in(
        lab.ns(lab.legacy),
        "tcpdump",
        &["-r", pcap.to_str().unwrap(), "-n", "-tt", "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn"],
    );
    let syn_lines: Vec<&str> = syns.lines().filter(|l| l.contains("Flags [S")).collect();
    let exit = gw.stop();
    exit.assert_clean();
    eprintln!(
        "tfo: passive {passive}, active {active}; split_in {}; SYNs on the outer link:\n{}",
        exit.counter("split_in"),
        syn_lines.join("\n")
    );
    assert!(passive >= 1 && active >= 1, "Fast Open was not used: passive {passive}, active {active}");
    assert_eq!(syn_lines.len(), 2, "one SYN per connection on the outer link:\n{syns}");
    let lens: Vec<u32> =
        syn_lines.iter().map(|l| l.rsplit("length ").next().and_then(|n| n.trim().parse().ok()).unwrap_or(0)).collect();
    assert!(lens[1] > 0, "the Fast Open SYN carried data: {syn_lines:?}");
    assert!(exit.counter("split_in") >= 1, "the SYN with data was cut: {}", exit.stats);
}

/// A stream socket of `addr`'s family and `protocol` (0: TCP), made in the
/// calling thread's namespace, and `addr` as a sockaddr for `bind` or
/// `connect`.
fn stream_socket(
    addr: SocketAddr,
    protocol: libc::c_int,
) -> io::Result<(OwnedFd, libc::sockaddr_storage, libc::socklen_t)> {
    let family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: socket(2) with plain arguments; the descriptor is owned at once.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let (sa, len) = px_io::udp::to_sockaddr(addr);
    Ok((fd, sa, len))
}

/// A listener on `addr` over `protocol` (0: TCP; `IPPROTO_MPTCP`), in the
/// calling thread's namespace, with the `SOL_SOCKET` options `opts` set
/// before it listens (a receive buffer then sets the window scale of the
/// connections it accepts, which inherit it).
fn stream_listen(
    addr: SocketAddr,
    protocol: libc::c_int,
    opts: &[(libc::c_int, libc::c_int)],
) -> io::Result<TcpListener> {
    let (fd, sa, len) = stream_socket(addr, protocol)?;
    for &(opt, v) in [(libc::SO_REUSEADDR, 1)].iter().chain(opts) {
        set_sock_int(fd.as_raw_fd(), libc::SOL_SOCKET, opt, v)?;
    }
    // SAFETY: a socket this function owns and a sockaddr of `len` bytes.
    let r = unsafe {
        if libc::bind(fd.as_raw_fd(), (&raw const sa).cast(), len) != 0 { -1 } else { libc::listen(fd.as_raw_fd(), 8) }
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TcpListener::from(fd))
}

/// A connection to `addr` over `protocol` (0: TCP), from the calling
/// thread's namespace, with the `IPPROTO_TCP` options `tcp_opts` set before
/// the connect.
fn stream_connect(
    addr: SocketAddr,
    protocol: libc::c_int,
    tcp_opts: &[(libc::c_int, libc::c_int)],
) -> io::Result<TcpStream> {
    let (fd, sa, len) = stream_socket(addr, protocol)?;
    for &(opt, v) in tcp_opts {
        set_int(fd.as_raw_fd(), opt, v)?;
    }
    // SAFETY: a socket this function owns and a sockaddr of `len` bytes.
    if unsafe { libc::connect(fd.as_raw_fd(), (&raw const sa).cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TcpStream::from(fd))
}

/// MPTcpExt counters that count a connection falling back to plain TCP, a
/// data-sequence mapping the receiver could not use, a bad DSS checksum or
/// a reset, a join refused or with a bad HMAC: each must stay 0 when the
/// gateway changes MPTCP segments as a careful TSO/LRO would.
const MPTCP_FAULTS: [&str; 18] = [
    "MPJoinSynAckHMacFailure",
    "MPJoinAckHMacFailure",
    "MPJoinRejected",
    "MPCapableFallbackACK",
    "MPCapableFallbackSYNACK",
    "MPFallbackTokenInit",
    "MPCapableDataFallback",
    "DssFallback",
    "FallbackFailed",
    "DSSNotMatching",
    "DSSCorruptionFallback",
    "DSSCorruptionReset",
    "DSSNoMatchTCP",
    "InfiniteMapRx",
    "DataCsumErr",
    "MPFailRx",
    "MPRstRx",
    "MPFastcloseRx",
];

/// Multipath TCP (RFC 8684) through the gateway, real Linux MPTCP sockets,
/// one connection each way over IPv4 and IPv6, 24 MB each, every byte and
/// the SHA-256 checked; the legacy host's IPv4 connection adds a second
/// subflow (MP_JOIN) from another address. MPTCP carries its data-sequence
/// mapping (DSS) in a TCP option the gateway does not parse: a merge of
/// segments with equal options keeps one copy of the mapping, which covers
/// the merged payload (Linux TSO copies the option to every segment it
/// cuts, GRO merges them back); segments whose options differ are not
/// merged. The connections
/// must stay MPTCP (no fallback, no DSS or checksum fault, no reset, from
/// each host's `MPTcpExt` counters), with the b-network host's subflow at
/// the raised MSS both ways.
#[test]
fn mptcp_connections_stay_mptcp_at_the_raised_mss() {
    if !require_root_or_skip("mptcp_connections_stay_mptcp_at_the_raised_mss") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let (legacy, bnet) = (lab.ns(lab.legacy), lab.ns(lab.bnet));
    for ns in [legacy, bnet] {
        // Checksums on: a merge or a cut that moved a byte against its
        // mapping would show as DataCsumErr, not only in the stream.
        ns.set_sysctl("net.mptcp.checksum_enabled", "1").unwrap();
    }
    // The legacy host opens a second subflow (MP_JOIN) from a second
    // address for each IPv4 connection it starts: the join's handshake
    // crosses the gateway too, and the data is spread over both subflows.
    let join_from = "198.51.100.11";
    legacy.add_addr(LEGACY_DEV, &format!("{join_from}/24")).unwrap();
    for ns in [legacy, bnet] {
        ns.ip(&["mptcp", "limits", "set", "subflow", "2", "add_addr_accepted", "2"]).unwrap();
    }
    legacy.ip(&["mptcp", "endpoint", "add", join_from, "dev", LEGACY_DEV, "subflow"]).unwrap();
    let gw = Gateway::start(&lab, &[]);
    lab.ping_both();
    let bytes: u64 = 24 << 20;
    let stall = Duration::from_secs(20);
    // (what, client, server, address, outer MSS, raised MSS)
    let cases = [
        ("inbound v4", legacy, bnet, sock(BNET_V4, 5361), 1448, 8948),
        ("outbound v4", bnet, legacy, sock(LEGACY_V4, 5362), 1448, 8948),
        ("inbound v6", legacy, bnet, sock(BNET_V6, 5363), 1428, 8928),
        ("outbound v6", bnet, legacy, sock(LEGACY_V6, 5364), 1428, 8928),
    ];
    for (what, client, server, addr, outer, raised) in cases {
        let listener = server
            .run(|| stream_listen(addr, libc::IPPROTO_MPTCP, &[]))
            .unwrap()
            .unwrap_or_else(|e| panic!("{what}: listen: {e}"));
        set_accept_timeout(&listener, stall);
        let progress = std::sync::atomic::AtomicU64::new(0);
        let (sent, got) = std::thread::scope(|sc| {
            let rx = sc.spawn(|| {
                let (s, _) = listener.accept().unwrap_or_else(|e| panic!("{what}: accept: {e}"));
                receive_flow(s, stall, &progress, true)
            });
            let s = client
                .run(|| stream_connect(addr, libc::IPPROTO_MPTCP, &[]))
                .unwrap()
                .unwrap_or_else(|e| panic!("{what}: connect: {e}"));
            let mut tx = FlowSender::over(s, 0, Some(bytes), stall, true).unwrap();
            for _ in 0..bytes / (256 << 10) {
                tx.send(256 << 10).unwrap_or_else(|e| panic!("{what}: {e}"));
            }
            (tx.finish().unwrap_or_else(|e| panic!("{what}: {e}")), rx.join().unwrap())
        });
        let got = got.unwrap_or_else(|e| panic!("{what}: receiver: {e}"));
        assert_eq!((got.bytes, &got.sha256), (bytes, &sent.sha256), "{what}");
        // TCP_INFO of an MPTCP socket is its first subflow's. A receiver's
        // rcv_mss is the largest payload it saw; every segment also
        // carries the DSS option (24 bytes with checksums), so a full one
        // holds up to the 28 bytes of option space beside the timestamps
        // less than the MSS: merged segments fill the iMTU, cut ones the
        // eMTU, options included.
        eprintln!("{what}: sender {:?}, receiver {:?}", sent.stats, got.stats);
        let full = |mss: u32| mss - 28..=mss;
        if server.name() == bnet.name() {
            assert!(full(raised).contains(&got.stats.rcv_mss), "{what}: merged to the iMTU: {:?}", got.stats);
        } else {
            assert_eq!(sent.stats.snd_mss, raised, "{what}: the b-network host sends at the raised MSS");
            assert!(full(outer).contains(&got.stats.rcv_mss), "{what}: cut to the eMTU: {:?}", got.stats);
        }
    }
    let exit = gw.stop();
    exit.assert_clean();
    for (name, ns) in [("legacy", legacy), ("b-network", bnet)] {
        let syn_ack = netstat(ns, "MPTcpExt:", "MPCapableSYNACKRX");
        let ack = netstat(ns, "MPTcpExt:", "MPCapableACKRX");
        // Two connections as client, two as server (a resent SYN-ACK or
        // ACK would count again).
        assert!(syn_ack >= 2 && ack >= 2, "{name}: MPTCP handshakes as client {syn_ack} and as server {ack}");
        let (join_synack, join_ack) =
            (netstat(ns, "MPTcpExt:", "MPJoinSynAckRx"), netstat(ns, "MPTcpExt:", "MPJoinAckRx"));
        eprintln!("{name}: MP_JOIN SYN-ACKs received {join_synack}, ACKs received {join_ack}");
        for fault in MPTCP_FAULTS {
            assert_eq!(netstat(ns, "MPTcpExt:", fault), 0, "{name}: MPTcpExt {fault}");
        }
    }
    eprintln!(
        "mptcp: merged_in {}, merged_out {}, split_in {}, yield {}",
        exit.counter("merged_in"),
        exit.counter("merged_out"),
        exit.counter("split_in"),
        exit.stats["yield"]
    );
    // The inbound IPv4 connection's join: the legacy host (client) got the
    // SYN-ACK, the b-network host (server) the third ACK, both HMACs good.
    assert!(netstat(legacy, "MPTcpExt:", "MPJoinSynAckRx") >= 1, "no MP_JOIN completed from the legacy host");
    assert!(netstat(bnet, "MPTcpExt:", "MPJoinAckRx") >= 1, "no MP_JOIN completed at the b-network host");
    assert!(exit.counter("merged_in") > 0, "inbound MPTCP segments were merged: {}", exit.stats);
}

/// Bytes `s` has sent and not had acknowledged, or not sent yet
/// (`SIOCOUTQ`).
fn unacknowledged(s: &TcpStream) -> io::Result<libc::c_int> {
    let mut n: libc::c_int = 0;
    // SAFETY: a connected socket and an int for the answer.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &raw mut n) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n)
}

/// A connection the gateway merges stalls on a closed receive window, then
/// idles. Linux's zero-window probes (the sender's, at backed-off RTOs
/// while the b-network host reads nothing) and keepalives (each end's,
/// after a second of silence) are segments without payload one byte behind
/// what the flow sent, at a flow with merge state. Each must reach the far
/// end and be answered: a lost probe answer leaves the sender deaf to the
/// window opening for seconds, lost keepalives reset the idle connection
/// (two unanswered, a second apart). The transfer is exact, the connection
/// still carries data both ways after 4.5 idle seconds, and the hosts'
/// counters show the closed window and the probes and keepalives sent.
#[test]
fn zero_window_probes_and_keepalives_pass_a_merging_flow() {
    let Some((_serial, lab, gw)) = lab_with_gateway("zero_window_probes_and_keepalives_pass_a_merging_flow") else {
        return;
    };
    let (legacy, bnet) = (lab.ns(lab.legacy), lab.ns(lab.bnet));
    let addr = sock(BNET_V4, 5371);
    // A fixed receive buffer (no autotuning), so that the window closes
    // soon after the reader stops: the data does not fit in it. Not much
    // smaller, though: at 64 KB the host sometimes ran out of receive
    // memory (9000-byte frames) before it had advertised a zero window,
    // dropped a segment (TcpExt TCPRcvQDrop) and the sender recovered by
    // timeout, never probing.
    let listener = bnet.run(|| stream_listen(addr, 0, &[(libc::SO_RCVBUF, 1 << 20)])).unwrap().expect("listen");
    let stall = Duration::from_secs(20);
    set_accept_timeout(&listener, stall);
    let data: Vec<u8> = (0..6u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let (read_first, pause) = (1usize << 20, Duration::from_millis(2500));
    let keepalive = |s: &TcpStream| {
        let fd = s.as_raw_fd();
        set_sock_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
        set_int(fd, libc::TCP_KEEPIDLE, 1)?;
        set_int(fd, libc::TCP_KEEPINTVL, 1)?;
        set_int(fd, libc::TCP_KEEPCNT, 2)
    };
    let idle = Duration::from_millis(4500);
    let drained = std::cell::Cell::new(None);
    let (got, answer) = std::thread::scope(|sc| {
        let srv = sc.spawn(|| -> io::Result<Vec<u8>> {
            let (mut c, _) = listener.accept()?;
            c.set_read_timeout(Some(stall))?;
            let mut got = vec![0u8; data.len()];
            c.read_exact(&mut got[..read_first])?;
            std::thread::sleep(pause);
            c.read_exact(&mut got[read_first..])?;
            keepalive(&c)?;
            let mut ping = [0u8; 4];
            c.read_exact(&mut ping)?;
            assert_eq!(&ping, b"ping");
            c.write_all(b"pong")?;
            Ok(got)
        });
        let mut s = legacy.run(|| stream_connect(addr, 0, &[])).unwrap().expect("connect");
        s.set_read_timeout(Some(stall)).unwrap();
        s.write_all(&data).expect("send");
        keepalive(&s).unwrap();
        // Idle on both ends from when every byte is acknowledged (the
        // receiver has read everything by then): a write returns once its
        // bytes are queued, and the window the small buffer offers may take
        // a while to carry the rest.
        let queued = Instant::now();
        while unacknowledged(&s).unwrap() > 0 {
            assert!(queued.elapsed() < stall, "data still unacknowledged after {stall:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
        drained.set(Some(queued.elapsed()));
        std::thread::sleep(idle);
        let answer = s.write_all(b"ping").and_then(|_| {
            let mut pong = [0u8; 4];
            s.read_exact(&mut pong).map(|_| pong)
        });
        (srv.join().unwrap(), answer)
    });
    let exit = gw.stop();
    let counters = |ns: &Netns| {
        ["TCPToZeroWindowAdv", "TCPFromZeroWindowAdv", "TCPWinProbe", "TCPKeepAlive", "TCPRcvQDrop", "TCPTimeouts"]
            .map(|k| (k, tcp_ext(ns, k)))
    };
    let (l, b) = (counters(legacy), counters(bnet));
    // Everything that tells a failure apart, before any check.
    eprintln!(
        "legacy {l:?}; b-network {b:?}; all acknowledged {:?} after the write returned; merged_in {}",
        drained.get(),
        exit.counter("merged_in")
    );
    let got = got.unwrap_or_else(|e| panic!("receiver: {e}"));
    assert!(got == data, "the stalled transfer arrived exact");
    let answer = answer.unwrap_or_else(|e| panic!("after {idle:?} idle with keepalives: {e}"));
    assert_eq!(&answer, b"pong");
    exit.assert_clean();
    assert!(b[0].1 >= 1 && b[1].1 >= 1, "the b-network host closed and reopened its window: {b:?}");
    assert!(l[2].1 >= 1, "the legacy host probed the closed window: {l:?}");
    assert!(l[3].1 >= 2 && b[3].1 >= 2, "both ends sent keepalives: legacy {l:?}, b-network {b:?}");
    assert!(exit.counter("merged_in") > 0, "the flow was merged: {}", exit.stats);
}

/// `SIOCATMARK` (`<asm/sockios.h>`; not in the `libc` crate).
const SIOCATMARK: libc::c_ulong = 0x8905;

/// Whether the next byte `s` reads is its urgent byte (`SIOCATMARK`).
fn at_urgent_mark(s: &TcpStream) -> io::Result<bool> {
    let mut mark: libc::c_int = 0;
    // SAFETY: a connected socket and an int for the answer.
    if unsafe { libc::ioctl(s.as_raw_fd(), SIOCATMARK, &raw mut mark) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(mark != 0)
}

/// The urgent byte of `s`, read out of band (`MSG_OOB`) once it has
/// arrived, waiting up to `limit`.
fn urgent_byte(s: &TcpStream, limit: Duration) -> io::Result<u8> {
    let deadline = Instant::now() + limit;
    loop {
        let mut b = 0u8;
        // SAFETY: a connected socket and a one-byte buffer.
        if unsafe { libc::recv(s.as_raw_fd(), (&raw mut b).cast(), 1, libc::MSG_OOB) } == 1 {
            return Ok(b);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::WouldBlock || Instant::now() > deadline {
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// TCP urgent data (`MSG_OOB`) through the gateway, real sockets, each way
/// over IPv4 and IPv6. The urgent pointer is an offset from each segment's
/// own sequence number; Linux marks every segment it sends before the
/// urgent point with URG and the pointer to it, so the b-network host's
/// 8948-byte segments ahead of the urgent byte each carry a pointer the
/// split must rebase per piece, and the legacy host's URG segments must
/// pass unmerged. A piece that kept its segment's pointer (as GSO would)
/// moves the urgent point forward, and the receiver (urgent data not
/// inline, the BSD default) pulls a different byte out of the stream: the
/// stream differs and the out-of-band byte too. (Linux ignores a pointer
/// that is not past the urgent point it knows, so a later piece's pointer
/// moved back is harmless to it; `tcp_border.rs` checks each piece's
/// pointer exactly.) One urgent byte per connection (a receiver keeps
/// only the last), at the end of a write whose bytes are all queued before
/// the push; the receiver reads it out of band at the mark.
#[test]
fn urgent_data_keeps_its_byte_both_ways() {
    let Some((_serial, lab, gw)) = lab_with_gateway("urgent_data_keeps_its_byte_both_ways") else {
        return;
    };
    let (legacy, bnet) = (lab.ns(lab.legacy), lab.ns(lab.bnet));
    let stall = Duration::from_secs(20);
    // (what, sender, receiver, address, bytes of the urgent write)
    let cases = [
        ("outbound v4", bnet, legacy, sock(LEGACY_V4, 5381), 20_000usize),
        ("inbound v4", legacy, bnet, sock(BNET_V4, 5382), 9_000),
        ("outbound v6", bnet, legacy, sock(LEGACY_V6, 5383), 30_001),
        ("inbound v6", legacy, bnet, sock(BNET_V6, 5384), 4_500),
    ];
    for (k, (what, sender, receiver, addr, urgent_write)) in cases.into_iter().enumerate() {
        let data: Vec<u8> = (0..urgent_write + 50_000).map(|i| (i * 7 + k * 13) as u8 | 0x80).collect();
        let urgent = b'U';
        let listener = receiver.run(|| stream_listen(addr, 0, &[])).unwrap().unwrap_or_else(|e| panic!("{what}: {e}"));
        set_accept_timeout(&listener, stall);
        let (stream, oob) = std::thread::scope(|sc| {
            let rx = sc.spawn(|| -> io::Result<(Vec<u8>, Option<u8>)> {
                let (mut c, _) = listener.accept()?;
                c.set_read_timeout(Some(stall))?;
                let (mut got, mut oob, mut buf) = (Vec::new(), None, vec![0u8; 64 << 10]);
                loop {
                    // A read stops at the urgent mark; one from the mark
                    // skips the urgent byte and forgets it, so it is taken
                    // out of band first, once it has arrived.
                    if oob.is_none() && at_urgent_mark(&c)? {
                        oob = Some(urgent_byte(&c, stall)?);
                    }
                    match c.read(&mut buf)? {
                        0 => break,
                        n => got.extend_from_slice(&buf[..n]),
                    }
                }
                Ok((got, oob))
            });
            let mut s = sender.run(|| stream_connect(addr, 0, &[])).unwrap().unwrap_or_else(|e| panic!("{what}: {e}"));
            s.set_read_timeout(Some(stall)).unwrap();
            let mut first = data[..urgent_write - 1].to_vec();
            first.push(urgent);
            // One call: each `MSG_OOB` send marks the end of what it sent
            // as urgent, so a partial send would mark a data byte (a
            // blocking send takes it all).
            // SAFETY: a connected socket and the bytes of `first`.
            let n = unsafe { libc::send(s.as_raw_fd(), first.as_ptr().cast(), first.len(), libc::MSG_OOB) };
            assert_eq!(n, first.len() as isize, "{what}: send: {}", io::Error::last_os_error());
            s.write_all(&data[urgent_write - 1..]).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            rx.join().unwrap().unwrap_or_else(|e| panic!("{what}: receiver: {e}"))
        });
        // The urgent byte left the stream; everything else is in order.
        assert!(stream == data, "{what}: {} bytes in line of {}, or different", stream.len(), data.len());
        assert_eq!(oob, Some(urgent), "{what}: the out-of-band byte");
    }
    let exit = gw.stop();
    exit.assert_clean();
    eprintln!("urgent: split_in {}, merged_in {}", exit.counter("split_in"), exit.counter("merged_in"));
    assert!(exit.counter("split_in") > 0, "the b-network host's segments were cut: {}", exit.stats);
}
