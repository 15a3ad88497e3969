//! Path-MTU lab paths: a prober host, routers, a responder host, in a chain
//! of namespaces with a chosen MTU on every link, and the obstacles path
//! MTU discovery meets on the Internet.
//!
//! [`PathSpec`] describes a path (link MTUs from the prober outward, which
//! router is an ICMP black hole, which drops IPv4 fragments, where the
//! round-trip delay and loss are); [`PmtudLab::build`] makes it real and
//! [`standard_paths`] lists the paths of the comparison in issue 4.
//!
//! Guarantees: addresses only from 198.51.100.0/24 (a /28 per link) and
//! 2001:db8::/32 (a /64 per link); every node routes every link's prefix,
//! so the prober reaches the responder over every router and back; routers
//! forward (IPv4 and IPv6) and do not rate-limit their ICMP errors (so the
//! ICMP-based tools get every "too big" a router sends); nothing is
//! reassembled on the way (no conntrack). Everything is torn down when the
//! [`PmtudLab`] drops (the delay element first, then the namespaces), and on
//! SIGINT/SIGTERM through [`Topology`]'s cleanup.

use std::net::IpAddr;
use std::time::Duration;

use px_netns::impair::{ImpairSpec, Impairment};
use px_netns::topology::{NsId, Topology};
use px_netns::{LabError, Netns};

/// An obstacle a router puts in the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterFilter {
    /// Drops the ICMP "fragmentation needed" / ICMPv6 "packet too big" it
    /// would send (an ICMP black hole: DF-set packets that are too big
    /// vanish without a word).
    DropTooBig,
    /// Drops every IPv4 fragment it would forward (a fragment-filtering
    /// firewall). Put it after the router that fragments: a router's own
    /// fragmentation happens after its forward hook.
    DropFragments,
}

/// Delay and loss on one link, by px-lab's [`Impairment`] bridge (this
/// kernel has no netem).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WireSpec {
    /// Index into [`PathSpec::links`].
    pub link: usize,
    /// Delay added in each direction.
    pub one_way: Duration,
    /// Probability that a frame is dropped, each direction.
    pub loss: f64,
    /// Seed of the loss draws.
    pub seed: u64,
}

/// One path of the lab.
#[derive(Debug, Clone, PartialEq)]
pub struct PathSpec {
    /// Short name for tables (`chain-9000-1500-1400`).
    pub name: String,
    /// MTU of each link, the prober's link first, the responder's last.
    /// `links.len() - 1` routers sit between them.
    pub links: Vec<u32>,
    /// Filters: (router number, 1 = the router next to the prober).
    pub filters: Vec<(usize, RouterFilter)>,
    /// An emulated wire (delay and seeded random loss) on one link.
    pub wire: Option<WireSpec>,
    /// Probe the responder's IPv6 address instead of its IPv4 address.
    pub ipv6: bool,
}

impl PathSpec {
    /// A plain chain with the given link MTUs.
    pub fn chain(name: &str, links: &[u32]) -> PathSpec {
        PathSpec { name: name.to_owned(), links: links.to_vec(), filters: Vec::new(), wire: None, ipv6: false }
    }

    /// The path MTU: the smallest link MTU.
    pub fn true_pmtu(&self) -> u32 {
        self.links.iter().copied().min().unwrap_or(0)
    }

    /// Number of routers.
    pub fn routers(&self) -> usize {
        self.links.len().saturating_sub(1)
    }
}

/// The paths of the comparison, in table order.
pub fn standard_paths() -> Vec<PathSpec> {
    let mut v = vec![
        PathSpec::chain("chain-9000-1500-1400", &[9000, 1500, 1400]),
        PathSpec::chain("chain-9000-4000-1280", &[9000, 4000, 1280]),
        PathSpec::chain("ethernet-1500", &[1500, 1500]),
        PathSpec::chain("pppoe-1500-1492", &[1500, 1492]),
    ];
    let mut bh = PathSpec::chain("blackhole-9000-1500", &[9000, 1500, 1500]);
    bh.filters.push((1, RouterFilter::DropTooBig));
    v.push(bh);
    let mut frag = PathSpec::chain("fragfilter-9000-1500", &[9000, 1500, 1500]);
    frag.filters.push((2, RouterFilter::DropFragments));
    v.push(frag);
    let mut rtt = PathSpec::chain("rtt10ms-9000-1500-1400", &[9000, 1500, 1400]);
    rtt.wire = Some(WireSpec { link: 1, one_way: Duration::from_millis(5), loss: 0.0, seed: 1 });
    v.push(rtt);
    let mut v6 = PathSpec::chain("ipv6-9000-1500-1400", &[9000, 1500, 1400]);
    v6.ipv6 = true;
    v.push(v6);
    let mut v6bh = PathSpec::chain("ipv6-blackhole-9000-1500", &[9000, 1500, 1500]);
    v6bh.ipv6 = true;
    v6bh.filters.push((1, RouterFilter::DropTooBig));
    v.push(v6bh);
    // The same black hole 20 ms away (10 ms each way on the middle link):
    // what every round trip and every loss timer costs shows here.
    let mut v6bh20 = PathSpec::chain("ipv6-blackhole-rtt20ms-9000-1500", &[9000, 1500, 1500]);
    v6bh20.ipv6 = true;
    v6bh20.filters.push((1, RouterFilter::DropTooBig));
    v6bh20.wire = Some(WireSpec { link: 1, one_way: Duration::from_millis(10), loss: 0.0, seed: 1 });
    v.push(v6bh20);
    // Odd and unusual MTUs between routers (issue 14: on 1500 -> 1499 ->
    // 1500 F-PMTUD once said "1498, exact"): the round-2 window then
    // reaches above the path MTU, so a DF probe draws an ICMP error while
    // the others are still being sent.
    v.push(PathSpec::chain("odd-1500-1499-1500", &[1500, 1499, 1500]));
    v.push(PathSpec::chain("odd-1500-1497-1500", &[1500, 1497, 1500]));
    v.push(PathSpec::chain("mid-1500-1280-1500", &[1500, 1280, 1500]));
    // 68-byte steps (the IPv4 minimum MTU): every router fragments again.
    v.push(PathSpec::chain("steps68-1500-1432-1364-1296", &[1500, 1432, 1364, 1296]));
    v
}

/// A path with random loss on its middle link (not in the comparison: its
/// timings would need many runs), for robustness tests: `9000→1500→1400`,
/// `loss` on the 1500 link in each direction, 1 ms each way.
pub fn lossy_path(loss: f64, seed: u64) -> PathSpec {
    let mut p = PathSpec::chain("lossy-9000-1500-1400", &[9000, 1500, 1400]);
    p.wire = Some(WireSpec { link: 1, one_way: Duration::from_millis(1), loss, seed });
    p
}

/// Addresses of link `i`: (left end, right end) for IPv4 /28 and IPv6 /64.
fn link_addrs(i: usize) -> ([String; 2], [String; 2]) {
    let base = 16 * i;
    (
        [format!("198.51.100.{}", base + 1), format!("198.51.100.{}", base + 2)],
        [format!("2001:db8:{:x}::1", i + 1), format!("2001:db8:{:x}::2", i + 1)],
    )
}

fn link_prefixes(i: usize) -> (String, String) {
    (format!("198.51.100.{}/28", 16 * i), format!("2001:db8:{:x}::/64", i + 1))
}

/// A built path. Field order is drop order: the delay element stops before
/// its namespace goes.
#[derive(Debug)]
pub struct PmtudLab {
    // Held for its Drop: stops the delay thread before the namespaces go.
    _delay: Option<Impairment>,
    /// The namespaces, links and processes.
    pub topology: Topology,
    /// The prober host (its link to the first router is `eth0`).
    pub prober: NsId,
    /// The responder host (`eth0`).
    pub responder: NsId,
    /// Routers, the prober's neighbour first.
    pub routers: Vec<NsId>,
    /// What was built.
    pub spec: PathSpec,
}

impl PmtudLab {
    /// Builds `spec`: namespaces `pxprobe`, `pxrtrN`, `pxresp` (and `pxdelay`
    /// for the delay element), veth links with the MTUs, addresses, routes,
    /// forwarding, filters.
    pub fn build(spec: &PathSpec) -> Result<PmtudLab, LabError> {
        let n = spec.links.len();
        if n == 0 || n > 15 {
            return Err(LabError::Name(format!("path with {n} links (1..=15)")));
        }
        let mut t = Topology::new()?;
        let mut nodes = vec![t.add_ns("pxprobe")?];
        for r in 1..n {
            nodes.push(t.add_ns(&format!("pxrtr{r}"))?);
        }
        nodes.push(t.add_ns("pxresp")?);
        let mut delay = None;
        for (i, &mtu) in spec.links.iter().enumerate() {
            let (left, right) = (nodes[i], nodes[i + 1]);
            // Hosts have one interface (eth0); routers eth0 left, eth1 right.
            let left_dev = if i == 0 { "eth0" } else { "eth1" };
            match spec.wire {
                Some(w) if w.link == i => {
                    let e = t.add_ns("pxdelay")?;
                    t.add_veth((left, left_dev), (e, "left"), mtu)?;
                    t.add_veth((e, "right"), (right, "eth0"), mtu)?;
                    let spec = ImpairSpec {
                        delay: w.one_way,
                        loss: w.loss,
                        seed: w.seed,
                        max_frame: mtu as usize + 18,
                        ..ImpairSpec::default()
                    };
                    delay = Some(Impairment::start(t.ns(e), "left", "right", spec)?);
                }
                _ => {
                    t.add_veth((left, left_dev), (right, "eth0"), mtu)?;
                }
            }
            let (v4, v6) = link_addrs(i);
            t.ns(left).add_addr(left_dev, &format!("{}/28", v4[0]))?;
            t.ns(right).add_addr("eth0", &format!("{}/28", v4[1]))?;
            t.ns(left).add_addr(left_dev, &format!("{}/64", v6[0]))?;
            t.ns(right).add_addr("eth0", &format!("{}/64", v6[1]))?;
        }
        for (k, &node) in nodes.iter().enumerate() {
            for j in 0..n {
                // Node k sits between link k-1 (left) and link k (right).
                let via = if j > k {
                    link_addrs(k)
                } else if j + 1 < k {
                    link_addrs(k - 1)
                } else {
                    continue;
                };
                let (v4, v6) =
                    if j > k { (via.0[1].clone(), via.1[1].clone()) } else { (via.0[0].clone(), via.1[0].clone()) };
                let (p4, p6) = link_prefixes(j);
                t.ns(node).add_route(&p4, &v4)?;
                t.ns(node).add_route(&p6, &v6)?;
            }
        }
        let routers: Vec<NsId> = nodes[1..n].to_vec();
        for &r in &routers {
            t.ns(r).enable_forwarding()?;
        }
        for &node in &nodes {
            // Every ICMP error a node has to send ("too big", "time
            // exceeded", "port unreachable") is sent: the ICMP-based tools
            // are not starved by rate limits the lab would impose.
            t.ns(node).set_sysctl("net.ipv4.icmp_ratelimit", "0")?;
            t.ns(node).set_sysctl("net.ipv6.icmp.ratelimit", "0")?;
        }
        for &(r, f) in &spec.filters {
            let Some(&id) = routers.get(r.wrapping_sub(1)) else {
                return Err(LabError::Name(format!("filter on router {r} of {}", routers.len())));
            };
            apply_filter(t.ns(id), f)?;
        }
        let lab =
            PmtudLab { _delay: delay, topology: t, prober: nodes[0], responder: nodes[n], routers, spec: spec.clone() };
        lab.install_target_counter()?;
        Ok(lab)
    }

    /// The responder's address the prober should probe (IPv4 or IPv6 per
    /// the spec).
    pub fn target(&self) -> IpAddr {
        let (v4, v6) = link_addrs(self.spec.links.len() - 1);
        let s = if self.spec.ipv6 { &v6[1] } else { &v4[1] };
        // The strings are built above from fixed documentation prefixes.
        s.parse().unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    fn install_target_counter(&self) -> Result<(), LabError> {
        let ns = self.prober_ns();
        let target = self.target().to_string();
        let family = if self.spec.ipv6 { "ip6" } else { "ip" };
        ns.exec("nft", &["add", "table", "netdev", "px_count"])?;
        let chain = [
            "add", "chain", "netdev", "px_count", "pxegress", "{", "type", "filter", "hook", "egress", "device",
            "eth0", "priority", "0", ";", "}",
        ];
        ns.exec("nft", &chain)?;
        // ICMP errors the prober's kernel sends back (port unreachable for
        // a reply that came after the tool exited) are not probes.
        let (icmp, unreach) =
            if self.spec.ipv6 { ("icmpv6", "destination-unreachable") } else { ("icmp", "destination-unreachable") };
        ns.exec(
            "nft",
            &[
                "add", "rule", "netdev", "px_count", "pxegress", family, "daddr", &target, icmp, "type", unreach,
                "return",
            ],
        )?;
        ns.exec("nft", &["add", "rule", "netdev", "px_count", "pxegress", family, "daddr", &target, "counter"])?;
        Ok(())
    }

    /// The prober's namespace.
    pub fn prober_ns(&self) -> &Netns {
        self.topology.ns(self.prober)
    }

    /// The responder's namespace.
    pub fn responder_ns(&self) -> &Netns {
        self.topology.ns(self.responder)
    }

    /// Packets the prober has sent to the target so far: probes, retries,
    /// traceroute probes of every TTL, counted by an nftables rule on the
    /// egress hook of the prober's link (installed by [`PmtudLab::build`]):
    /// it sees every frame leaving, from sockets of any kind, raw and packet
    /// sockets included, while address resolution, IPv6 housekeeping (not
    /// addressed to the target) and the ICMP errors the prober's kernel
    /// returns for late replies do not count.
    pub fn packets_to_target(&self) -> Result<u64, LabError> {
        let out = self.prober_ns().exec("nft", &["list", "chain", "netdev", "px_count", "pxegress"])?;
        Ok(sum_counter_packets(&out))
    }

    /// Forgets path MTUs the prober's kernel learned from ICMP, so that one
    /// tool's run does not answer the next one's question.
    pub fn forget_learned_pmtu(&self) -> Result<(), LabError> {
        self.prober_ns().ip(&["-4", "route", "flush", "cache"])?;
        self.prober_ns().ip(&["-6", "route", "flush", "cache"]).map(drop)
    }

    /// Waits (up to `within`) until the responder's UDP port (`px fpmtud`'s
    /// 9999) is bound; `false` if it never was.
    pub fn wait_responder_listening(&self, within: Duration) -> Result<bool, LabError> {
        let until = std::time::Instant::now() + within;
        while std::time::Instant::now() < until {
            if self.responder_ns().exec("ss", &["-Hlun"])?.contains(":9999") {
                return Ok(true);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(false)
    }

    /// Pings the target once from the prober (fills neighbour caches so
    /// address resolution does not count against the first tool).
    pub fn warm_up(&self) -> Result<(), LabError> {
        self.prober_ns().ping(&self.target().to_string(), 1)
    }
}

/// Installs `f` in router `ns` with nftables (table `inet px_pmtud`).
pub fn apply_filter(ns: &Netns, f: RouterFilter) -> Result<(), LabError> {
    ns.exec("nft", &["add", "table", "inet", "px_pmtud"])?;
    let (chain, hook, rules): (&str, &str, &[&[&str]]) = match f {
        RouterFilter::DropTooBig => (
            "pxoutput",
            "output",
            &[
                &["icmp", "type", "destination-unreachable", "icmp", "code", "frag-needed", "drop"],
                &["icmpv6", "type", "packet-too-big", "drop"],
            ],
        ),
        // Any fragment: MF set or a non-zero offset.
        RouterFilter::DropFragments => {
            ("pxforward", "forward", &[&["ip", "frag-off", "&", "0x3fff", "!=", "0", "drop"]])
        }
    };
    ns.exec(
        "nft",
        &["add", "chain", "inet", "px_pmtud", chain, "{", "type", "filter", "hook", hook, "priority", "0", ";", "}"],
    )?;
    for r in rules {
        let mut args = vec!["add", "rule", "inet", "px_pmtud", chain];
        args.extend_from_slice(r);
        ns.exec("nft", &args)?;
    }
    Ok(())
}

/// Sums the `counter packets N` statements of an `nft list` output.
fn sum_counter_packets(out: &str) -> u64 {
    let mut total = 0;
    let mut words = out.split_whitespace();
    while let Some(w) = words.next() {
        if w == "counter" && words.next() == Some("packets") {
            total += words.next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use px_netns::addr::DocPrefix;

    #[test]
    fn standard_paths_have_the_expected_pmtus() {
        let p: Vec<(String, u32)> = standard_paths().iter().map(|s| (s.name.clone(), s.true_pmtu())).collect();
        let get = |n: &str| p.iter().find(|(k, _)| k == n).map(|x| x.1);
        assert_eq!(get("chain-9000-1500-1400"), Some(1400));
        assert_eq!(get("chain-9000-4000-1280"), Some(1280));
        assert_eq!(get("ethernet-1500"), Some(1500));
        assert_eq!(get("pppoe-1500-1492"), Some(1492));
        assert_eq!(get("blackhole-9000-1500"), Some(1500));
        assert_eq!(get("fragfilter-9000-1500"), Some(1500));
        assert_eq!(get("ipv6-blackhole-rtt20ms-9000-1500"), Some(1500));
        assert_eq!(get("odd-1500-1499-1500"), Some(1499));
        assert_eq!(get("odd-1500-1497-1500"), Some(1497));
        assert_eq!(get("mid-1500-1280-1500"), Some(1280));
        assert_eq!(get("steps68-1500-1432-1364-1296"), Some(1296));
        for s in standard_paths() {
            for &(r, _) in &s.filters {
                assert!((1..=s.routers()).contains(&r), "{}: filter on router {r}", s.name);
            }
            // The fragment filter must sit after a router that fragments.
            if s.filters.iter().any(|f| f.1 == RouterFilter::DropFragments) {
                assert!(s.links[0] > s.true_pmtu());
            }
        }
    }

    #[test]
    fn link_addresses_are_documentation_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..15 {
            let (v4, v6) = link_addrs(i);
            let (p4, p6) = link_prefixes(i);
            for a in v4.iter().chain(v6.iter()).chain([&p4, &p6]) {
                assert!(DocPrefix::parse(a).is_ok() || DocPrefix::parse(&format!("{a}/28")).is_ok(), "{a}");
                assert!(seen.insert(a.clone()), "{a} twice");
            }
            // Both ends lie inside the link's prefix.
            let net = 16 * i;
            assert!(v4[0].ends_with(&format!(".{}", net + 1)) && v4[1].ends_with(&format!(".{}", net + 2)));
            assert!(DocPrefix::parse(&p4).is_ok() && DocPrefix::parse(&p6).is_ok());
        }
    }

    #[test]
    fn nft_counters_are_summed() {
        let out = "table netdev px_count {
	chain pxegress {
		type filter hook egress device \"eth0\" priority filter; policy accept;
		ip daddr 198.51.100.34 counter packets 6 bytes 10560
	}
}
";
        assert_eq!(sum_counter_packets(out), 6);
        assert_eq!(sum_counter_packets("counter packets 2 bytes 1 counter packets 3 bytes 9"), 5);
        assert_eq!(sum_counter_packets("chain pxoutput { }"), 0);
    }
}
