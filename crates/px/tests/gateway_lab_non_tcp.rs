//! Root integration test of `px gateway` for traffic it does not translate:
//! large ICMP echoes and UDP datagrams, both directions, IPv4 and IPv6,
//! must get what a correct router between a 9000 and a 1500 link gives
//! them: IPv4 without DF is fragmented, IPv4 with DF and IPv6 are dropped
//! with "fragmentation needed" / "packet too big" (from the configured
//! ICMP source), after which the sending host fragments itself.
//! Skips with a message when not root; everything torn down by guards.

mod common;

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::Duration;

use common::*;
use px_lab::{FrameObserver, Netns, require_root_or_skip};

/// A UDP socket bound in `ns` with IPv4 path-MTU discovery set to `pmtudisc`
/// (`IP_PMTUDISC_DONT`: DF clear; `IP_PMTUDISC_DO`: DF set, never fragment).
fn udp(ns: &Netns, local: &str, port: u16, pmtudisc: Option<libc::c_int>) -> UdpSocket {
    let s = ns.run(|| UdpSocket::bind(sock(local, port))).unwrap().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    if let Some(v) = pmtudisc {
        set_sock_int(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, v)
            .unwrap_or_else(|e| panic!("IP_MTU_DISCOVER: {e}"));
    }
    s
}

fn datagram(len: usize, salt: u64) -> Vec<u8> {
    let mut d = vec![0u8; len];
    Pattern::new(len as u64, salt).fill(&mut d);
    d
}

/// Sends `d` from `tx` to `rx` (already bound) and returns what `rx` got.
fn udp_one(tx: &UdpSocket, rx: &UdpSocket, d: &[u8]) -> std::io::Result<Vec<u8>> {
    tx.send_to(d, rx.local_addr().unwrap())?;
    let mut buf = vec![0u8; 65536];
    let (n, _) = rx.recv_from(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

#[test]
fn large_icmp_and_udp_get_router_behaviour() {
    if !require_root_or_skip("large_icmp_and_udp_get_router_behaviour") {
        return;
    }
    router_behaviour("1");
}

/// The same through two workers (kernel fan-out by a symmetric hash).
#[test]
fn large_icmp_and_udp_get_router_behaviour_two_workers() {
    if !require_root_or_skip("large_icmp_and_udp_get_router_behaviour_two_workers") {
        return;
    }
    router_behaviour("2");
}

fn router_behaviour(workers: &str) {
    let _serial = serialize();
    let lab = GwLab::build(None);
    let gw =
        Gateway::start(&lab, &["--workers", workers, "--icmp-source-v4", ICMP_SRC_V4, "--icmp-source-v6", ICMP_SRC_V6]);
    lab.ping_both();
    let (l, b) = (lab.ns(lab.legacy), lab.ns(lab.bnet));
    let obs_outer = FrameObserver::start(l, LEGACY_DEV).unwrap();

    // IPv4 ICMP echo without DF: the gateway fragments the b-network host's
    // 8028-byte request; the legacy host's request is fragmented by itself,
    // its reply by the gateway.
    let (ok, out) =
        run_in(b, "ping", &["-n", "-c", "2", "-i", "0.2", "-W", "2", "-M", "dont", "-s", "8000", LEGACY_V4]);
    assert!(ok && out.contains("2 received"), "{out}");
    let (ok, out) = run_in(l, "ping", &["-n", "-c", "2", "-i", "0.2", "-W", "2", "-s", "8000", BNET_V4]);
    assert!(ok && out.contains("2 received"), "{out}");

    // IPv4 UDP, 4000 bytes, DF clear: fragmented by the gateway outbound, by
    // the legacy host inbound; reassembled intact at the other end.
    let (bs, ls) = (udp(b, BNET_V4, 6001, Some(libc::IP_PMTUDISC_DONT)), udp(l, LEGACY_V4, 6001, None));
    let d = datagram(4000, 1);
    assert_eq!(udp_one(&bs, &ls, &d).expect("bnet -> legacy UDP, DF clear"), d);
    let d = datagram(4000, 2);
    assert_eq!(udp_one(&ls, &bs, &d).expect("legacy -> bnet UDP"), d);
    // 30000 bytes: the b-network host fragments at 9000 and the gateway
    // fragments those fragments again; inbound, fragments pass as they are.
    let d = datagram(30000, 7);
    assert_eq!(udp_one(&bs, &ls, &d).expect("bnet -> legacy UDP, 30000 bytes"), d);
    let d = datagram(30000, 8);
    assert_eq!(udp_one(&ls, &bs, &d).expect("legacy -> bnet UDP, 30000 bytes"), d);

    // IPv4 UDP with DF: the gateway drops it and answers "fragmentation
    // needed" (mtu 1500); the host records the path MTU and refuses the
    // next send with EMSGSIZE.
    let bs_df = udp(b, BNET_V4, 6002, Some(libc::IP_PMTUDISC_DO));
    let ls2 = udp(l, LEGACY_V4, 6002, None);
    bs_df.connect(ls2.local_addr().unwrap()).unwrap();
    bs_df.send(&datagram(4000, 3)).expect("first DF send leaves the host (its link MTU is 9000)");
    let mut buf = [0u8; 8];
    assert!(ls2.recv_from(&mut buf).is_err(), "a 4028-byte DF datagram crossed the 1500 link");
    let mut refused = None;
    for _ in 0..20 {
        match bs_df.send(&datagram(4000, 4)) {
            Err(e) => {
                refused = Some(e);
                break;
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    let e = refused.expect("the host never learned the 1500-byte path MTU");
    assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE), "{e}");
    let route = b.ip(&["route", "get", LEGACY_V4]).unwrap();
    assert!(route.contains("mtu 1500"), "{route}");

    // The same for ICMP echo with DF, once the learned MTU is forgotten:
    // ping reports the gateway's error (or, for later requests, the MTU).
    b.ip(&["route", "flush", "cache"]).unwrap();
    let (ok, out) = run_in(b, "ping", &["-n", "-c", "2", "-i", "0.3", "-W", "2", "-M", "do", "-s", "8000", LEGACY_V4]);
    assert!(!ok, "{out}");
    assert!(out.contains(&format!("From {ICMP_SRC_V4}")) && out.contains("Frag needed"), "{out}");
    assert!(out.contains("mtu = 1500") || out.contains("mtu=1500"), "{out}");

    // IPv6 (routers never fragment): the first large echo request earns a
    // "packet too big" from the gateway; then the host fragments itself and
    // the following requests are answered.
    let (_, out) = run_in(b, "ping", &["-6", "-n", "-c", "3", "-i", "0.3", "-W", "2", "-s", "8000", LEGACY_V6]);
    assert!(out.contains(&format!("From {ICMP_SRC_V6}")) && out.contains("Packet too big"), "{out}");
    assert!(out.contains("2 received") || out.contains("3 received"), "{out}");
    let route = b.ip(&["-6", "route", "get", LEGACY_V6]).unwrap();
    assert!(route.contains("mtu 1500"), "{route}");
    let (ok, out) = run_in(l, "ping", &["-6", "-n", "-c", "2", "-i", "0.2", "-W", "2", "-s", "8000", BNET_V6]);
    // The b-network host's first 8048-byte reply may be the one that
    // learns the path MTU; it already knows it from above.
    assert!(ok && out.contains("2 received"), "{out}");

    // IPv6 UDP, 4000 bytes, both ways (the path MTU is known by now, so the
    // b-network host fragments at 1500; the legacy host always does).
    let (bs6, ls6) = (udp(b, BNET_V6, 6003, None), udp(l, LEGACY_V6, 6003, None));
    let d = datagram(4000, 5);
    assert_eq!(udp_one(&bs6, &ls6, &d).expect("bnet -> legacy UDP/IPv6"), d);
    let d = datagram(4000, 6);
    assert_eq!(udp_one(&ls6, &bs6, &d).expect("legacy -> bnet UDP/IPv6"), d);

    let outer = obs_outer.stop();
    assert!(outer.rx.max_l3 <= EMTU as usize && outer.tx.max_l3 <= EMTU as usize, "{outer:?}");
    let exit = gw.stop();
    exit.assert_clean();
    eprintln!("{}", exit.stats);
    let drops = &exit.stats["counters"]["drop"];
    assert!(exit.counter("fragments_out") >= 6, "{}", exit.stats);
    assert!(drops[px_gateway::DropReason::TooBigDf as usize].as_u64() >= Some(2), "{}", exit.stats);
    assert!(drops[px_gateway::DropReason::TooBigV6 as usize].as_u64() >= Some(1), "{}", exit.stats);
    assert!(exit.counter("icmp_sent") >= 3, "{}", exit.stats);
}

/// Issue 27, "likely" (b), confirmed: a router never reassembles what it
/// forwards. With two workers the fan-out group once asked the kernel to defragment
/// IPv4 (`PACKET_FANOUT_FLAG_DEFRAG`: `ip_check_defrag` in af_packet's
/// `packet_rcv_fanout`), so a legacy host's fragments reached the b-network
/// reassembled and cut again at the iMTU (an F-PMTUD responder inside then
/// reports too large a path MTU), and a fragment flood filled the gateway
/// host's reassembly memory. The fragments must arrive as they were sent,
/// each at most the legacy link's MTU, and still make up the datagram.
#[test]
fn two_workers_pass_fragments_on_as_they_came() {
    if !require_root_or_skip("two_workers_pass_fragments_on_as_they_came") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let gw = Gateway::start(&lab, &["--workers", "2"]);
    lab.ping_both();
    let (l, b) = (lab.ns(lab.legacy), lab.ns(lab.bnet));
    let obs = FrameObserver::start(b, BNET_DEV).unwrap();
    let (bs, ls) = (udp(b, BNET_V4, 6020, None), udp(l, LEGACY_V4, 6020, None));
    for salt in 0..3 {
        let d = datagram(30000, 20 + salt);
        assert_eq!(udp_one(&ls, &bs, &d).expect("legacy -> bnet UDP, 30000 bytes"), d);
    }
    let seen = obs.stop();
    assert!(seen.rx.frames >= 3 * 21, "{seen:?}");
    assert!(seen.rx.max_l3 <= EMTU as usize, "the gateway reassembled fragments: {seen:?}");
    gw.stop().assert_clean();
}

/// scapy on the b-network host: one UDP datagram (IPv4, `len` bytes of
/// payload, DF) to the legacy host, with `trailer` bytes of 0xa5 after the
/// IP packet in the same Ethernet frame.
const TRAILER: &str = r#"
import sys
from scapy.all import Ether, IP, UDP, Raw, sendp, conf, get_if_hwaddr
conf.verb = 0
iface, src, dst, dst_mac, port, n, trailer = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
packet = bytes(IP(src=src, dst=dst, flags="DF") / UDP(sport=port, dport=port) / Raw(bytes(i % 251 for i in range(n))))
sendp(Ether(src=get_if_hwaddr(iface), dst=dst_mac, type=0x0800) / Raw(packet + b"\xa5" * trailer), iface=iface)
print("sent a %d-byte IP packet with a %d-byte trailer" % (len(packet), trailer))
"#;

/// A frame whose IP packet fits the outer link but whose trailer (bytes
/// after the packet) makes it larger than the link's MTU crosses the
/// gateway as its IP packet, as through a Linux router, which trims every
/// received packet to its IP length. Fails if the gateway passes the frame
/// on whole: its outer port refuses a frame over the MTU.
#[test]
fn a_trailer_after_the_packet_is_left_behind() {
    let Some((_serial, lab, gw)) = lab_with_gateway("a_trailer_after_the_packet_is_left_behind") else {
        return;
    };
    let (l, b) = (lab.ns(lab.legacy), lab.ns(lab.bnet));
    let ls = udp(l, LEGACY_V4, 6010, None);
    let legacy_mac = mac_of(l, LEGACY_DEV);
    let want: Vec<u8> = (0..1400usize).map(|i| (i % 251) as u8).collect();
    for trailer in [6usize, 400] {
        let (ok, out) = run_in(
            b,
            "/usr/bin/python3",
            &["-c", TRAILER, BNET_DEV, BNET_V4, LEGACY_V4, &legacy_mac, "6010", "1400", &trailer.to_string()],
        );
        assert!(ok, "scapy: {out}");
        let mut buf = vec![0u8; 65536];
        let (n, _) = ls.recv_from(&mut buf).unwrap_or_else(|e| panic!("{trailer}-byte trailer: nothing arrived: {e}"));
        assert_eq!(&buf[..n], &want[..], "{trailer}-byte trailer: the datagram arrives whole");
    }
    gw.stop().assert_clean();
}
