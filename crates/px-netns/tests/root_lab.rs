//! Root integration tests of the lab: real namespaces, veth, ping, teardown,
//! and cleanup on SIGTERM. Skipped with a message when not root.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};

use px_netns::line::{LEFT_V6, ROUTED_RIGHT_V4, ROUTER_LEFT_V4};
use px_netns::{
    Addressing, Line, LineImpairment, LineSpec, Netns, NsName, Offloads, Topology, list_px_namespaces,
    require_root_or_skip,
};

/// Namespaces the child process `pid` created.
fn created_by(pid: u32) -> Vec<String> {
    list_px_namespaces().unwrap().into_iter().filter(|n| NsName::parse(n).is_some_and(|p| p.pid == pid)).collect()
}

#[test]
fn two_namespaces_ping_and_teardown() {
    if !require_root_or_skip("two_namespaces_ping_and_teardown") {
        return;
    }
    let names;
    {
        let mut t = Topology::new().unwrap();
        let a = t.add_ns("pinga").unwrap();
        let b = t.add_ns("pingb").unwrap();
        let l = t.add_veth((a, "eth0"), (b, "eth0"), 9000).unwrap();
        assert_eq!(t.link(l).mtu, 9000);
        t.ns(a).add_addr("eth0", "198.51.100.1/24").unwrap();
        t.ns(b).add_addr("eth0", "198.51.100.2/24").unwrap();
        t.ns(a).add_addr("eth0", "2001:db8:1::1/64").unwrap();
        t.ns(b).add_addr("eth0", "2001:db8:1::2/64").unwrap();
        t.link(l).wire_like(t.ns(a), t.ns(b)).unwrap();
        assert_eq!(t.ns(a).offload("eth0", "tcp-segmentation-offload").unwrap(), Some(false));
        assert_eq!(t.ns(a).offload("eth0", "generic-segmentation-offload").unwrap(), Some(false));
        assert_eq!(t.ns(b).offload("eth0", "generic-receive-offload").unwrap(), Some(true));
        t.ns(a).ping("198.51.100.2", 2).unwrap();
        t.ns(b).ping("198.51.100.1", 2).unwrap();
        t.ns(a).ping("2001:db8:1::2", 2).unwrap();
        // The MTU is what we set, seen from inside.
        let link = t.ns(a).ip(&["link", "show", "eth0"]).unwrap();
        assert!(link.contains("mtu 9000"), "{link}");
        // Addresses outside the documentation ranges are refused.
        assert!(t.ns(a).add_addr("eth0", "10.1.2.3/24").is_err());
        assert!(t.ns(a).ping("192.0.2.1", 1).is_err());
        names = vec![t.ns(a).name().to_owned(), t.ns(b).name().to_owned()];
        let now = list_px_namespaces().unwrap();
        assert!(names.iter().all(|n| now.contains(n)));
    }
    let after = list_px_namespaces().unwrap();
    assert!(names.iter().all(|n| !after.contains(n)), "left behind: {after:?}");
}

#[test]
fn rust_sockets_inside_namespaces() {
    if !require_root_or_skip("rust_sockets_inside_namespaces") {
        return;
    }
    let mut t = Topology::new().unwrap();
    let a = t.add_ns("sockc").unwrap();
    let b = t.add_ns("socks").unwrap();
    t.add_veth((a, "eth0"), (b, "eth0"), 1500).unwrap();
    t.ns(a).add_addr("eth0", "203.0.113.1/24").unwrap();
    t.ns(b).add_addr("eth0", "203.0.113.2/24").unwrap();
    // The listener is created in b by a thread that entered b; it stays in b.
    let listener = t.ns(b).run(|| TcpListener::bind("203.0.113.2:5201")).unwrap().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut v = Vec::new();
        s.read_to_end(&mut v).unwrap();
        v
    });
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
    let p2 = payload.clone();
    t.ns(a)
        .run(move || {
            let mut c = TcpStream::connect("203.0.113.2:5201").unwrap();
            c.write_all(&p2).unwrap();
        })
        .unwrap();
    assert_eq!(server.join().unwrap(), payload);
    // The test thread never left its namespace: 203.0.113.2 is unknown here.
    let here = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
    let g = t.ns(a).enter().unwrap();
    assert_ne!(std::fs::read_link("/proc/thread-self/ns/net").unwrap(), here);
    drop(g);
    assert_eq!(std::fs::read_link("/proc/thread-self/ns/net").unwrap(), here);
}

#[test]
fn routes_and_forwarding_through_a_router() {
    if !require_root_or_skip("routes_and_forwarding_through_a_router") {
        return;
    }
    let mut line = Line::build(LineSpec {
        addressing: Some(Addressing::Router),
        ..LineSpec::new(["h1", "router", "h2"], [1500, 9000])
    })
    .unwrap();
    let (t, h1, r) = (&line.topo, line.left, line.middle);
    assert_eq!(t.ns(r).exec("cat", &["/proc/sys/net/ipv4/ip_forward"]).unwrap().trim(), "1");
    assert!(t.ns(r).set_sysctl("kernel.hostname", "x").is_err(), "only per-namespace net.* keys");
    t.ns(h1).ping(ROUTED_RIGHT_V4, 2).unwrap();
    assert!(t.ns(h1).add_route("0.0.0.0/0", ROUTER_LEFT_V4).is_err());
    let d = t.describe().unwrap();
    assert!(d.contains("198.51.100.254/24") && d.contains("mtu 9000"), "{d}");
    // A background process is killed with the topology.
    line.topo.spawn(line.right, "sleep", &["600"]).unwrap();
}

#[test]
fn offloads_default_untouched() {
    if !require_root_or_skip("offloads_default_untouched") {
        return;
    }
    let ns = Netns::new("offl").unwrap();
    let peer = Netns::new("offp").unwrap();
    px_netns::Veth::create(&ns, "v0", &peer, "v1", 1500).unwrap();
    let before = ns.offload("v0", "generic-receive-offload").unwrap();
    ns.set_offloads("v0", Offloads { tso: Some(false), ..Offloads::default() }).unwrap();
    assert_eq!(ns.offload("v0", "tcp-segmentation-offload").unwrap(), Some(false));
    assert_eq!(ns.offload("v0", "generic-receive-offload").unwrap(), before);
}

/// Helper run as a child process by `sigterm_removes_namespaces`: builds a
/// topology, prints the namespace names and waits to be killed.
#[test]
fn signal_child_helper() {
    if std::env::var_os("PX_LAB_SIGNAL_CHILD").is_none() {
        return; // only meaningful as the child of the test below
    }
    let mut t = Topology::new().unwrap();
    let a = t.add_ns("siga").unwrap();
    let b = t.add_ns("sigb").unwrap();
    t.add_veth((a, "eth0"), (b, "eth0"), 1500).unwrap();
    t.spawn(a, "sleep", &["600"]).unwrap();
    println!("NS {} {}", t.ns(a).name(), t.ns(b).name());
    std::io::stdout().flush().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(60));
    panic!("was not killed");
}

#[test]
fn sigterm_removes_namespaces() {
    if !require_root_or_skip("sigterm_removes_namespaces") {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "signal_child_helper", "--nocapture", "--test-threads=1"])
        .env("PX_LAB_SIGNAL_CHILD", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let names: Vec<String> = loop {
        let l = lines.next().expect("child ended before printing names").unwrap();
        // libtest prints "test signal_child_helper ... " before our line.
        if let Some((_, rest)) = l.split_once("NS ") {
            break rest.split(' ').map(str::to_owned).collect();
        }
    };
    assert!(list_px_namespaces().unwrap().contains(&names[0]));
    assert_eq!(created_by(child.id()).len(), 2);
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: signalling the child this test spawned.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    let after = list_px_namespaces().unwrap();
    assert!(names.iter().all(|n| !after.contains(n)), "left behind: {after:?}");
    assert!(created_by(u32::try_from(pid).unwrap()).is_empty());
}

#[test]
fn bulk_tcp_through_a_router_is_verified_and_observed() {
    if !require_root_or_skip("bulk_tcp_through_a_router_is_verified_and_observed") {
        return;
    }
    // legacy (MTU 1500) -- router -- b-network host (MTU 9000): the plain
    // Linux baseline, in which the 9000-byte link only carries what fits
    // the legacy MSS.
    let line = Line::build(LineSpec {
        // Wire-like frames everywhere, and no GRO, so observers count wire sizes.
        host_offloads: Offloads { gro: Some(false), ..Offloads::WIRE_SENDER },
        middle_offloads: Offloads { gro: Some(false), ..Offloads::WIRE_SENDER },
        ipv6: true,
        addressing: Some(Addressing::Router),
        ..LineSpec::new(["legacy", "router", "bnet"], [1500, 9000])
    })
    .unwrap();
    let (t, h1, h2) = (&line.topo, line.left, line.right);
    // Resolve neighbours first: SYNs queued behind neighbour discovery would
    // cost a 1 s retransmission timeout and distort the throughput.
    t.ns(h1).ping(ROUTED_RIGHT_V4, 2).unwrap();
    t.ns(h2).ping(LEFT_V6, 2).unwrap();
    let obs = px_netns::FrameObserver::start(t.ns(h2), "eth0").unwrap();
    let spec = |server: &str| px_netns::BulkSpec::new(server.parse().unwrap(), 4, 4 << 20);
    let inbound = px_netns::bulk_tcp(t.ns(h1), t.ns(h2), &spec("203.0.113.2:5001")).unwrap();
    let outbound = px_netns::bulk_tcp(t.ns(h2), t.ns(h1), &spec("[2001:db8:1::1]:5002")).unwrap();
    let sizes = obs.stop();
    eprintln!("router baseline: inbound {:.2} Gbit/s, outbound {:.2} Gbit/s", inbound.gbps(), outbound.gbps());
    eprintln!("b-network host eth0: {sizes:?}");
    for f in &inbound.flows {
        assert_eq!(f.bytes, 4 << 20);
        assert_eq!(f.sender.snd_mss, 1448, "legacy host: 1500 - 40 - 12");
    }
    for f in &outbound.flows {
        assert_eq!(f.bytes, 4 << 20);
        // The b-network host could send 8928-byte segments but the legacy
        // side's MSS option (1440 for IPv6) limits it.
        assert_eq!(f.sender.snd_mss, 1428, "b-network host held to the legacy MSS: 1500 - 60 - 12");
    }
    assert!(sizes.rx.frames > 1000 && sizes.tx.frames > 1000, "{sizes:?}");
    assert!(sizes.rx.max_l3 <= 1500 && sizes.tx.max_l3 <= 1500, "9000-byte link only carries legacy sizes: {sizes:?}");
}

#[test]
fn bulk_tcp_reports_a_dead_path_instead_of_hanging() {
    if !require_root_or_skip("bulk_tcp_reports_a_dead_path_instead_of_hanging") {
        return;
    }
    let mut t = Topology::new().unwrap();
    let a = t.add_ns("deada").unwrap();
    let b = t.add_ns("deadb").unwrap();
    t.add_veth((a, "eth0"), (b, "eth0"), 1500).unwrap();
    t.ns(a).add_addr("eth0", "198.51.100.1/24").unwrap();
    t.ns(b).add_addr("eth0", "198.51.100.2/24").unwrap();
    // Take the link down: connects must time out and be reported.
    t.ns(a).ip(&["link", "set", "eth0", "down"]).unwrap();
    let spec = px_netns::BulkSpec {
        stall_timeout: std::time::Duration::from_millis(500),
        ..px_netns::BulkSpec::new("198.51.100.2:5003".parse().unwrap(), 2, 1 << 20)
    };
    let t0 = std::time::Instant::now();
    let err = px_netns::bulk_tcp(t.ns(a), t.ns(b), &spec).unwrap_err();
    assert!(matches!(err, px_netns::TrafficError::Io { .. }), "{err}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(5));
}

/// a:eth0 -- imp:p0 | imp:p1 -- b:eth0, with `spec` applied in `imp`.
fn impaired_pair(spec: px_netns::ImpairSpec) -> (Line, px_netns::Impairment) {
    let mut line = Line::build(LineSpec {
        host_offloads: Offloads::WIRE_SENDER,
        impairment: Some(LineImpairment::Middle(spec)),
        ..LineSpec::new(["impa", "imp", "impb"], [1500, 1500])
    })
    .unwrap();
    let imp = line.impairment.take().unwrap();
    (line, imp)
}

#[test]
fn impairment_loses_frames_but_tcp_stays_exact() {
    if !require_root_or_skip("impairment_loses_frames_but_tcp_stays_exact") {
        return;
    }
    let spec = px_netns::ImpairSpec { loss: 0.02, seed: 9, ..px_netns::ImpairSpec::default() };
    let (line, imp) = impaired_pair(spec);
    line.left_ns().ping("198.51.100.2", 5).unwrap();
    let bulk = px_netns::BulkSpec::new("198.51.100.2:5004".parse().unwrap(), 2, 4 << 20);
    let r = px_netns::bulk_tcp(line.left_ns(), line.right_ns(), &bulk).unwrap();
    let stats = imp.stop();
    eprintln!("2 % loss: {:.2} Gbit/s, {stats:?}", r.gbps());
    assert!(r.flows.iter().all(|f| f.bytes == 4 << 20));
    assert!(r.flows.iter().map(|f| f.sender.total_retrans).sum::<u32>() > 0, "losses caused retransmissions");
    let (fwd, lost) = (stats.forwarded[0], stats.lost[0]);
    assert!(lost > 0 && fwd > 1000, "{stats:?}");
    let rate = lost as f64 / (fwd + lost) as f64;
    assert!((0.01..0.04).contains(&rate), "observed loss rate {rate}");
}

/// Minimum RTT in ms from `ping` output ("rtt min/avg/max/mdev = ...").
fn min_rtt_ms(out: &str) -> f64 {
    let line = out.lines().find(|l| l.contains("min/avg/max")).expect("ping summary");
    line.split('=').nth(1).unwrap().trim().split('/').next().unwrap().parse().unwrap()
}

#[test]
fn impairment_delays_both_directions() {
    if !require_root_or_skip("impairment_delays_both_directions") {
        return;
    }
    let delay = std::time::Duration::from_millis(15);
    let (line, imp) = impaired_pair(px_netns::ImpairSpec { delay, ..px_netns::ImpairSpec::default() });
    let out = line.left_ns().exec("ping", &["-n", "-q", "-c", "4", "-i", "0.2", "198.51.100.2"]).unwrap();
    let rtt = min_rtt_ms(&out);
    let stats = imp.stop();
    eprintln!("one-way delay 15 ms: min RTT {rtt} ms, {stats:?}");
    assert!(rtt >= 30.0, "RTT {rtt} ms below twice the one-way delay");
    assert!(rtt < 60.0, "RTT {rtt} ms: the delay line adds far more than asked");
    assert_eq!(stats.lost, [0, 0]);
    assert!(stats.forwarded[0] >= 4 && stats.forwarded[1] >= 4);
}

/// Issue 38 item 6: a gateway killed with SIGKILL leaves its control socket
/// and port locks in /run/px, named after its namespace; deleting the
/// namespace removes them (and leaves other namespaces' files alone).
#[test]
fn a_deleted_namespace_takes_its_gateway_files_along() {
    if !require_root_or_skip("a_deleted_namespace_takes_its_gateway_files_along") {
        return;
    }
    use px_netns::runfiles::{RUN_DIR, namespace_inode};
    let dir = std::path::Path::new(RUN_DIR);
    std::fs::create_dir_all(dir).unwrap();
    let a = Netns::new("runfa").unwrap();
    let b = Netns::new("runfb").unwrap();
    let files = |ns: &Netns| {
        let ino = namespace_inode(ns.name()).unwrap();
        [dir.join(format!("gateway-net{ino}-gwo-gwi.sock")), dir.join(format!("port-net{ino}-2-gwi.lock"))]
    };
    let (fa, fb) = (files(&a), files(&b));
    for f in fa.iter().chain(&fb) {
        std::fs::write(f, "1").unwrap();
    }
    drop(a);
    assert!(fa.iter().all(|f| !f.exists()), "{fa:?} left behind");
    assert!(fb.iter().all(|f| f.exists()), "another namespace's files removed");
    drop(b);
    assert!(fb.iter().all(|f| !f.exists()));
}
