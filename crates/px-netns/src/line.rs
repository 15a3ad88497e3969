//! The line every middle-box experiment is built on: a host — a middle box
//! with two ports — a host, three namespaces joined by two veth links.
//!
//! `px lab demo/up` (legacy host, eMTU 1500 — gateway or router — b-network
//! host, iMTU 9000), the `px gateway` root tests, px-io's forwarding tests
//! and px-lab's own router and impairment tests all build it from a
//! [`LineSpec`]: names, link MTUs, offloads, address families, how the hosts
//! are addressed (one subnet through a bump in the wire, or one subnet per
//! link through a Linux router), and an optional impairment (loss, delay)
//! as the middle box or on the left link.
//!
//! Guarantees: only the documentation addresses below; the link MTUs and
//! offloads of the spec; everything torn down with the [`Line`] (the
//! impairment's thread first, then processes, then namespaces), and on
//! SIGINT/SIGTERM through [`Topology`]'s cleanup.

use std::time::{Duration, Instant};

use crate::LabError;
use crate::impair::{ImpairSpec, Impairment};
use crate::netns::{Netns, Offloads};
use crate::topology::{NsId, Topology};

/// The left host's IPv4 address (both addressings).
pub const LEFT_V4: &str = "198.51.100.1";
/// The left host's IPv6 address (both addressings).
pub const LEFT_V6: &str = "2001:db8:1::1";
/// The right host's IPv4 address on the bump's shared subnet.
pub const RIGHT_V4: &str = "198.51.100.2";
/// The right host's IPv6 address on the bump's shared subnet.
pub const RIGHT_V6: &str = "2001:db8:1::2";
/// The router's address on the left link (the left host's next hop).
pub const ROUTER_LEFT_V4: &str = "198.51.100.254";
/// The router's IPv6 address on the left link.
pub const ROUTER_LEFT_V6: &str = "2001:db8:1::fe";
/// The router's address on the right link (the right host's next hop).
pub const ROUTER_RIGHT_V4: &str = "203.0.113.254";
/// The router's IPv6 address on the right link.
pub const ROUTER_RIGHT_V6: &str = "2001:db8:2::fe";
/// The right host's IPv4 address behind the router.
pub const ROUTED_RIGHT_V4: &str = "203.0.113.2";
/// The right host's IPv6 address behind the router.
pub const ROUTED_RIGHT_V6: &str = "2001:db8:2::2";

/// [`LineSpec::gateway_lab`]: the legacy host's interface.
pub const LEGACY_DEV: &str = "px-l0";
/// [`LineSpec::gateway_lab`]: the gateway's outer port (legacy side).
pub const GW_OUTER: &str = "px-gwo";
/// [`LineSpec::gateway_lab`]: the gateway's inner port (b-network side).
pub const GW_INNER: &str = "px-gwi";
/// [`LineSpec::gateway_lab`]: the b-network host's interface.
pub const BNET_DEV: &str = "px-b0";
/// [`LineSpec::gateway_lab`]: MTU of the legacy link (eMTU).
pub const EMTU: u32 = 1500;
/// [`LineSpec::gateway_lab`]: MTU of the b-network link (iMTU).
pub const IMTU: u32 = 9000;

/// How the hosts are addressed, which says what the middle box must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressing {
    /// Bump in the wire: both hosts on one subnet per family
    /// (198.51.100.0/24, 2001:db8:1::/64); the middle box owns no address
    /// and joins its ports itself (px gateway, a bridge, a forwarder, an
    /// impairment).
    Bump,
    /// A plain Linux router: one subnet per link (198.51.100.0/24 and
    /// 203.0.113.0/24; 2001:db8:1::/64 and 2001:db8:2::/64), forwarding on,
    /// each host routing the far subnet through the router.
    Router,
}

impl Addressing {
    /// The right host's address in this addressing.
    pub fn right_addr(self, ipv6: bool) -> &'static str {
        match (self, ipv6) {
            (Addressing::Bump, false) => RIGHT_V4,
            (Addressing::Bump, true) => RIGHT_V6,
            (Addressing::Router, false) => ROUTED_RIGHT_V4,
            (Addressing::Router, true) => ROUTED_RIGHT_V6,
        }
    }
}

/// Where an impairment (loss, delay) sits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LineImpairment {
    /// The middle box itself: an [`Impairment`] joins its two ports.
    Middle(ImpairSpec),
    /// A namespace of its own (`imp`, ports `im-l` and `im-g`) on the left
    /// link, between the left host and the middle box's left port; both
    /// of its links get the left link's MTU.
    LeftLink(ImpairSpec),
}

/// What to build.
#[derive(Debug, Clone, PartialEq)]
pub struct LineSpec {
    /// Roles (namespace names) of the left host, the middle box, the right host.
    pub roles: [&'static str; 3],
    /// Interfaces: the left host's, the middle box's left and right ports,
    /// the right host's.
    pub devs: [&'static str; 4],
    /// MTU of the left link and of the right link.
    pub mtus: [u32; 2],
    /// Offloads of the hosts' interfaces.
    pub host_offloads: Offloads,
    /// Offloads of the middle box's two ports.
    pub middle_offloads: Offloads,
    /// Configure IPv4 addresses (and routes).
    pub ipv4: bool,
    /// Configure IPv6 addresses (and routes).
    pub ipv6: bool,
    /// Addresses set by [`Line::build`]; `None` for none yet (see [`Line::address`]).
    pub addressing: Option<Addressing>,
    /// An impairment, if any.
    pub impairment: Option<LineImpairment>,
}

impl LineSpec {
    /// Interfaces `eth0` on the hosts and `p0`, `p1` on the middle box,
    /// offloads untouched, IPv4 only, hosts on one subnet (a bump).
    pub fn new(roles: [&'static str; 3], mtus: [u32; 2]) -> LineSpec {
        LineSpec {
            roles,
            devs: ["eth0", "p0", "p1", "eth0"],
            mtus,
            host_offloads: Offloads::default(),
            middle_offloads: Offloads::default(),
            ipv4: true,
            ipv6: false,
            addressing: Some(Addressing::Bump),
            impairment: None,
        }
    }

    /// The topology of `px lab demo`: `legacy` (`px-l0`, eMTU 1500) —
    /// `gw` (`px-gwo`, `px-gwi`) — `bnet` (`px-b0`, iMTU 9000). Links are
    /// wire-like: the hosts send with TSO/GSO off and receive with GRO off,
    /// so frame observers in the *hosts'* namespaces count the frames that
    /// really cross each link; the middle box's ports have GRO on (the
    /// NIC's LRO) and TSO off (they send wire-sized frames). IPv4 only, no
    /// addresses yet.
    pub fn gateway_lab() -> LineSpec {
        LineSpec {
            roles: ["legacy", "gw", "bnet"],
            devs: [LEGACY_DEV, GW_OUTER, GW_INNER, BNET_DEV],
            mtus: [EMTU, IMTU],
            host_offloads: Offloads { tso: Some(false), gso: Some(false), gro: Some(false) },
            middle_offloads: Offloads { tso: Some(false), gso: None, gro: Some(true) },
            ipv4: true,
            ipv6: false,
            addressing: None,
            impairment: None,
        }
    }
}

/// A built line. Field order is drop order: the impairment's thread stops
/// before its namespace goes.
#[derive(Debug)]
pub struct Line {
    /// The impairment, if the spec asked for one (take it to stop it and
    /// read its counters).
    pub impairment: Option<Impairment>,
    /// The namespaces, links and processes.
    pub topo: Topology,
    /// The left host.
    pub left: NsId,
    /// The middle box.
    pub middle: NsId,
    /// The right host.
    pub right: NsId,
    /// What was built.
    pub spec: LineSpec,
}

impl Line {
    /// Builds `spec`: namespaces, links with their MTUs, offloads, then
    /// (if the spec says) the impairment and the addresses.
    pub fn build(spec: LineSpec) -> Result<Line, LabError> {
        let [l_dev, ml_dev, mr_dev, r_dev] = spec.devs;
        let [left_mtu, right_mtu] = spec.mtus;
        let mut topo = Topology::new()?;
        let left = topo.add_ns(spec.roles[0])?;
        let middle = topo.add_ns(spec.roles[1])?;
        let right = topo.add_ns(spec.roles[2])?;
        let mut impairment = None;
        match spec.impairment {
            Some(LineImpairment::LeftLink(imp_spec)) => {
                let imp = topo.add_ns("imp")?;
                topo.add_veth((left, l_dev), (imp, "im-l"), left_mtu)?;
                topo.add_veth((imp, "im-g"), (middle, ml_dev), left_mtu)?;
                impairment = Some(Impairment::start(topo.ns(imp), "im-l", "im-g", imp_spec)?);
            }
            _ => {
                topo.add_veth((left, l_dev), (middle, ml_dev), left_mtu)?;
            }
        }
        topo.add_veth((middle, mr_dev), (right, r_dev), right_mtu)?;
        topo.ns(left).set_offloads(l_dev, spec.host_offloads)?;
        topo.ns(right).set_offloads(r_dev, spec.host_offloads)?;
        for dev in [ml_dev, mr_dev] {
            topo.ns(middle).set_offloads(dev, spec.middle_offloads)?;
        }
        if let Some(LineImpairment::Middle(imp_spec)) = spec.impairment {
            impairment = Some(Impairment::start(topo.ns(middle), ml_dev, mr_dev, imp_spec)?);
        }
        let line = Line { impairment, topo, left, middle, right, spec };
        if let Some(a) = line.spec.addressing {
            line.assign(a)?;
        }
        Ok(line)
    }

    /// The left host's namespace.
    pub fn left_ns(&self) -> &Netns {
        self.topo.ns(self.left)
    }

    /// The middle box's namespace.
    pub fn middle_ns(&self) -> &Netns {
        self.topo.ns(self.middle)
    }

    /// The right host's namespace.
    pub fn right_ns(&self) -> &Netns {
        self.topo.ns(self.right)
    }

    /// Readdresses the line: flushes the addresses of all four interfaces,
    /// then configures `a` (`px lab demo` alternates the gateway and the
    /// router on the same links).
    pub fn address(&self, a: Addressing) -> Result<(), LabError> {
        let [l_dev, ml_dev, mr_dev, r_dev] = self.spec.devs;
        let (l, m, r) = (self.left_ns(), self.middle_ns(), self.right_ns());
        for (ns, dev) in [(l, l_dev), (r, r_dev), (m, ml_dev), (m, mr_dev)] {
            ns.ip(&["addr", "flush", "dev", dev])?;
        }
        self.assign(a)
    }

    fn assign(&self, a: Addressing) -> Result<(), LabError> {
        let [l_dev, ml_dev, mr_dev, r_dev] = self.spec.devs;
        let (l, m, r) = (self.left_ns(), self.middle_ns(), self.right_ns());
        let families = [(self.spec.ipv4, false), (self.spec.ipv6, true)];
        match a {
            Addressing::Bump => {
                // A router round before may have turned it on; the bump
                // forwards nothing itself (only IPv4 is reset, as ever).
                if self.spec.ipv4 {
                    m.set_sysctl("net.ipv4.ip_forward", "0")?;
                }
                for (_, v6) in families.into_iter().filter(|f| f.0) {
                    let len = if v6 { 64 } else { 24 };
                    l.add_addr(l_dev, &format!("{}/{len}", if v6 { LEFT_V6 } else { LEFT_V4 }))?;
                    r.add_addr(r_dev, &format!("{}/{len}", a.right_addr(v6)))?;
                }
            }
            Addressing::Router => {
                for (_, v6) in families.into_iter().filter(|f| f.0) {
                    let (len, left, router_l, router_r) = if v6 {
                        (64, LEFT_V6, ROUTER_LEFT_V6, ROUTER_RIGHT_V6)
                    } else {
                        (24, LEFT_V4, ROUTER_LEFT_V4, ROUTER_RIGHT_V4)
                    };
                    l.add_addr(l_dev, &format!("{left}/{len}"))?;
                    m.add_addr(ml_dev, &format!("{router_l}/{len}"))?;
                    m.add_addr(mr_dev, &format!("{router_r}/{len}"))?;
                    r.add_addr(r_dev, &format!("{}/{len}", a.right_addr(v6)))?;
                }
                m.enable_forwarding()?;
                for (_, v6) in families.into_iter().filter(|f| f.0) {
                    let (left_net, right_net, router_l, router_r) = if v6 {
                        ("2001:db8:1::/64", "2001:db8:2::/64", ROUTER_LEFT_V6, ROUTER_RIGHT_V6)
                    } else {
                        ("198.51.100.0/24", "203.0.113.0/24", ROUTER_LEFT_V4, ROUTER_RIGHT_V4)
                    };
                    l.add_route(right_net, router_l)?;
                    r.add_route(left_net, router_r)?;
                }
            }
        }
        Ok(())
    }

    /// Joins the middle box's two ports with a Linux bridge (a plain
    /// layer-2 forwarder: no MSS change, no merging) until
    /// [`Line::unbridge`]; returns once both ports forward.
    pub fn bridge(&self) -> Result<(), LabError> {
        let [_, ml_dev, mr_dev, _] = self.spec.devs;
        let m = self.middle_ns();
        m.ip(&["link", "add", "px-br", "type", "bridge"])?;
        for dev in [ml_dev, mr_dev] {
            m.ip(&["link", "set", dev, "master", "px-br"])?;
        }
        m.ip(&["link", "set", "px-br", "up"])?;
        // A fresh bridge learns and forwards at once (no STP), but its
        // ports pass through "learning"/"forwarding" only once up.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            let s = m.exec("bridge", &["link", "show"]).unwrap_or_default();
            if s.matches("state forwarding").count() >= 2 {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(LabError::NotOperational("bridge ports never reached forwarding".into()))
    }

    /// Removes the bridge of [`Line::bridge`].
    pub fn unbridge(&self) -> Result<(), LabError> {
        let [_, ml_dev, mr_dev, _] = self.spec.devs;
        let m = self.middle_ns();
        for dev in [ml_dev, mr_dev] {
            m.ip(&["link", "set", dev, "nomaster"])?;
        }
        m.ip(&["link", "del", "px-br"]).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_documentation_addresses() {
        for a in [LEFT_V4, RIGHT_V4, ROUTER_LEFT_V4, ROUTER_RIGHT_V4, ROUTED_RIGHT_V4] {
            assert!(crate::addr::doc_addr(a).is_ok(), "{a}");
        }
        for a in [LEFT_V6, RIGHT_V6, ROUTER_LEFT_V6, ROUTER_RIGHT_V6, ROUTED_RIGHT_V6] {
            assert!(crate::addr::doc_addr(a).is_ok(), "{a}");
        }
        assert_eq!(Addressing::Bump.right_addr(false), RIGHT_V4);
        assert_eq!(Addressing::Router.right_addr(true), ROUTED_RIGHT_V6);
    }
}
