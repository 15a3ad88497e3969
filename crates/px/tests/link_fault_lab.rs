//! Root test of link-fault pass-through (issue 38 item 3): two gateways
//! behind ECMP, and the outer link of one of them failing.
//!
//! ```text
//!  hA ── ra ══g1══[gw1]══g1══ rx ── hL
//!           ╚═g2══[gw2]══g2═╝
//! ```
//!
//! Both routers hash flows over the two links (addresses, protocol, ports)
//! and ignore a route whose link has no carrier
//! (`ignore_routes_with_linkdown`), as a router with link detection does.
//! 16 UDP flows go from hA to hL, a datagram every 10 ms each; then rx's
//! `g1` goes down (gw1's outer port loses its carrier). Without
//! pass-through ra never learns: the flows it hashes onto g1 stand still
//! until the end. With it, gw1 takes its inner port down, ra's `g1` loses
//! its carrier, and every flow moves to g2 within a few tens of ms; once
//! rx's `g1` is back, gw1's inner port comes up again.

mod common;

use std::collections::HashMap;
use std::net::UdpSocket;
use std::path::Path;
use std::time::{Duration, Instant};

use px_lab::gateway::GatewayProcess;
use px_lab::topology::{NsId, Topology};

const HOST_A: &str = "198.51.100.1";
const HOST_L: &str = "203.0.113.1";
const FLOWS: u16 = 16;
const EVERY: Duration = Duration::from_millis(10);
const BEFORE_CUT: Duration = Duration::from_millis(700);
const AFTER_CUT: Duration = Duration::from_millis(2000);

struct Lab {
    topo: Topology,
    host_a: NsId,
    ra: NsId,
    gws: [NsId; 2],
    rx: NsId,
    host_l: NsId,
}

impl Lab {
    fn build() -> Lab {
        let mut topo = Topology::new().unwrap();
        let host_a = topo.add_ns("lfa").unwrap();
        let ra = topo.add_ns("lfra").unwrap();
        let gws = [topo.add_ns("lfgw1").unwrap(), topo.add_ns("lfgw2").unwrap()];
        let rx = topo.add_ns("lfrx").unwrap();
        let host_l = topo.add_ns("lfl").unwrap();
        topo.add_veth((host_a, "eth0"), (ra, "a0"), 1500).unwrap();
        topo.add_veth((rx, "l0"), (host_l, "eth0"), 1500).unwrap();
        let links = [("198.51.100.17", "198.51.100.18"), ("198.51.100.21", "198.51.100.22")];
        for (i, gw) in gws.iter().enumerate() {
            let dev = format!("g{}", i + 1);
            topo.add_veth((ra, &dev), (*gw, "gwi"), 1500).unwrap();
            topo.add_veth((*gw, "gwo"), (rx, &dev), 1500).unwrap();
            topo.ns(ra).add_addr(&dev, &format!("{}/30", links[i].0)).unwrap();
            topo.ns(rx).add_addr(&dev, &format!("{}/30", links[i].1)).unwrap();
        }
        topo.ns(host_a).add_addr("eth0", &format!("{HOST_A}/28")).unwrap();
        topo.ns(ra).add_addr("a0", "198.51.100.14/28").unwrap();
        topo.ns(host_a).add_route("203.0.113.0/28", "198.51.100.14").unwrap();
        topo.ns(host_l).add_addr("eth0", &format!("{HOST_L}/28")).unwrap();
        topo.ns(rx).add_addr("l0", "203.0.113.14/28").unwrap();
        topo.ns(host_l).add_route("198.51.100.0/28", "203.0.113.14").unwrap();
        for (r, dst, hops) in
            [(ra, "203.0.113.0/28", [links[0].1, links[1].1]), (rx, "198.51.100.0/28", [links[0].0, links[1].0])]
        {
            let ns = topo.ns(r);
            ns.enable_forwarding().unwrap();
            ns.set_sysctl("net.ipv4.fib_multipath_hash_policy", "3").unwrap();
            ns.set_sysctl("net.ipv4.fib_multipath_hash_fields", "0x0037").unwrap();
            ns.set_sysctl("net.ipv4.conf.all.ignore_routes_with_linkdown", "1").unwrap();
            ns.ip(&[
                "route", "add", dst, "nexthop", "via", hops[0], "dev", "g1", "nexthop", "via", hops[1], "dev", "g2",
            ])
            .unwrap();
        }
        Lab { topo, host_a, ra, gws, rx, host_l }
    }

    fn gateways(&self, args: &[&str]) -> [GatewayProcess; 2] {
        let exe = Path::new(env!("CARGO_BIN_EXE_px"));
        self.gws.map(|gw| GatewayProcess::start_in(self.topo.ns(gw), "gwi", "gwo", &[], exe, args).unwrap())
    }

    /// `ip link show DEV` in `ns` says UP among its flags and has a carrier.
    fn link_up(&self, ns: NsId, dev: &str) -> bool {
        let out = self.topo.ns(ns).ip(&["link", "show", "dev", dev]).unwrap();
        out.contains(",UP") && !out.contains("NO-CARRIER")
    }

    /// The flows from hA to hL while rx's g1 goes down at BEFORE_CUT: for
    /// each flow, the longest time without a datagram after the cut (the
    /// end of the run counts as one); and the time from the cut (its
    /// command done: late on a loaded machine) to the end.
    fn stalls_across_a_cut(&self) -> (Vec<Duration>, Duration) {
        let (a, l) = (self.topo.ns(self.host_a), self.topo.ns(self.host_l));
        // Both routers resolve each other over both links first.
        for (ns, hop) in [(self.ra, "198.51.100.18"), (self.ra, "198.51.100.22")] {
            self.topo.ns(ns).ping(hop, 1).unwrap();
        }
        a.ping(HOST_L, 1).unwrap();
        let t0 = Instant::now();
        let end = t0 + BEFORE_CUT + AFTER_CUT;
        let arrivals: (HashMap<u16, Vec<Instant>>, Instant) = std::thread::scope(|s| {
            let rx = s.spawn(|| {
                l.run(|| {
                    let sock = UdpSocket::bind((HOST_L, 9000)).unwrap();
                    sock.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
                    let mut seen: HashMap<u16, Vec<Instant>> = HashMap::new();
                    let mut buf = [0u8; 64];
                    while Instant::now() < end + Duration::from_millis(100) {
                        if let Ok((_, from)) = sock.recv_from(&mut buf) {
                            seen.entry(from.port()).or_default().push(Instant::now());
                        }
                    }
                    seen
                })
                .unwrap()
            });
            s.spawn(|| {
                a.run(|| {
                    let socks: Vec<UdpSocket> =
                        (0..FLOWS).map(|i| UdpSocket::bind((HOST_A, 40000 + i)).unwrap()).collect();
                    let mut next = Instant::now();
                    while next < end {
                        for s in &socks {
                            let _ = s.send_to(b"px link-fault lab", (HOST_L, 9000));
                        }
                        next += EVERY;
                        std::thread::sleep(next.saturating_duration_since(Instant::now()));
                    }
                })
                .unwrap()
            });
            std::thread::sleep(BEFORE_CUT);
            self.topo.ns(self.rx).ip(&["link", "set", "g1", "down"]).unwrap();
            (rx.join().unwrap(), Instant::now())
        });
        let (arrivals, cut_done) = arrivals;
        let cut = t0 + BEFORE_CUT;
        assert_eq!(arrivals.len(), FLOWS as usize, "every flow arrived before the cut: {:?}", arrivals.keys());
        let stalls = arrivals
            .values()
            .map(|times| {
                let mut last = cut;
                let mut longest = Duration::ZERO;
                for &t in times.iter().filter(|&&t| t > cut).chain(std::iter::once(&end)) {
                    longest = longest.max(t - last);
                    last = t;
                }
                longest
            })
            .collect();
        (stalls, end.saturating_duration_since(cut_done))
    }
}

#[test]
fn with_link_fault_pass_through_ecmp_fails_over_at_once() {
    if !px_lab::require_root_or_skip("with_link_fault_pass_through_ecmp_fails_over_at_once") {
        return;
    }
    let _serial = common::serialize();
    let lab = Lab::build();
    // Without pass-through: gw1's inner port stays up, ra keeps hashing
    // flows onto g1, and they stand still to the end.
    let gws = lab.gateways(&[]);
    let (off, still_for) = lab.stalls_across_a_cut();
    let log = gws[0].wait_log("has no carrier", Duration::from_secs(2)).unwrap();
    assert!(log.contains(" WARN px gateway: outer gwo has no carrier"), "{log}");
    assert!(lab.link_up(lab.ra, "g1"), "without pass-through ra's g1 stays up");
    for g in gws {
        g.stop().unwrap();
    }
    lab.topo.ns(lab.rx).ip(&["link", "set", "g1", "up"]).unwrap();
    // With it.
    let gws = lab.gateways(&["--set", "link_fault.pass_through=true", "--set", "link_fault.restore_after_ms=300"]);
    let (on, _) = lab.stalls_across_a_cut();
    let log = gws[0].log();
    assert!(log.contains("link-fault pass-through: gwi taken down because gwo lost its carrier"), "{log}");
    assert!(!lab.link_up(lab.ra, "g1"), "ra's g1 lost its carrier");
    let ms = |v: &[Duration]| v.iter().map(|d| d.as_millis()).collect::<Vec<_>>();
    eprintln!("longest stall per flow after the cut, ms: without pass-through {:?}, with {:?}", ms(&off), ms(&on));
    let worst = |v: &[Duration]| v.iter().copied().max().unwrap();
    let to_end = still_for.saturating_sub(Duration::from_millis(100));
    assert!(worst(&off) >= to_end, "some flow stood still to the end without ({to_end:?}): {:?}", ms(&off));
    assert!(worst(&on) < Duration::from_millis(300), "every flow moved at once with pass-through: {:?}", ms(&on));
    // The carrier back: gw1's inner port comes up after 300 ms.
    lab.topo.ns(lab.rx).ip(&["link", "set", "g1", "up"]).unwrap();
    let log = gws[0].wait_log("up again", Duration::from_secs(3)).unwrap();
    assert!(log.contains("link-fault pass-through: gwi up again: gwo's carrier is back"), "{log}");
    assert!(lab.link_up(lab.gws[0], "gwi") && lab.link_up(lab.ra, "g1"), "gw1's inner port and ra's g1 up again");
    for g in gws {
        g.stop().unwrap();
    }
}
