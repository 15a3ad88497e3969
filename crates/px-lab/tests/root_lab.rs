//! Root integration tests of the lab: real namespaces, veth, ping, teardown,
//! and cleanup on SIGTERM. Skipped with a message when not root.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};

use px_lab::{Netns, NsName, Offloads, Topology, list_px_namespaces, require_root_or_skip};

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
    let mut t = Topology::new().unwrap();
    let h1 = t.add_ns("h1").unwrap();
    let r = t.add_ns("router").unwrap();
    let h2 = t.add_ns("h2").unwrap();
    t.add_veth((h1, "eth0"), (r, "left"), 1500).unwrap();
    t.add_veth((r, "right"), (h2, "eth0"), 9000).unwrap();
    t.ns(h1).add_addr("eth0", "198.51.100.1/24").unwrap();
    t.ns(r).add_addr("left", "198.51.100.254/24").unwrap();
    t.ns(r).add_addr("right", "203.0.113.254/24").unwrap();
    t.ns(h2).add_addr("eth0", "203.0.113.1/24").unwrap();
    t.ns(r).enable_forwarding().unwrap();
    t.ns(h1).add_route("203.0.113.0/24", "198.51.100.254").unwrap();
    t.ns(h2).add_route("198.51.100.0/24", "203.0.113.254").unwrap();
    t.ns(h1).ping("203.0.113.1", 2).unwrap();
    assert!(t.ns(h1).add_route("0.0.0.0/0", "198.51.100.254").is_err());
    let d = t.describe().unwrap();
    assert!(d.contains("198.51.100.254/24") && d.contains("mtu 9000"), "{d}");
    // A background process is killed with the topology.
    t.spawn(h2, "sleep", &["600"]).unwrap();
}

#[test]
fn offloads_default_untouched() {
    if !require_root_or_skip("offloads_default_untouched") {
        return;
    }
    let ns = Netns::new("offl").unwrap();
    let peer = Netns::new("offp").unwrap();
    px_lab::Veth::create(&ns, "v0", &peer, "v1", 1500).unwrap();
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
