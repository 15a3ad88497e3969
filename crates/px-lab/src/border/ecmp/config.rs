//! The ECMP run's configuration: addresses, AS numbers, the routers'
//! multipath hash, the BIRD configurations, and the namespaces and links
//! ([`Lab`]).

use px_netns::gateway::GatewayProcess;
use px_netns::netns::{Netns, Offloads};
use px_netns::topology::{NsId, Topology};

use super::EcmpOptions;
use crate::RunError;

/// b-network A's host.
pub const HOST_A: &str = "198.51.100.1";
/// The legacy network's host.
pub const HOST_L: &str = "203.0.113.1";
/// The prefix `ra` announces (b-network A).
pub const PREFIX_A: &str = "198.51.100.0/28";
/// The prefix `rx` announces (the legacy network).
pub const PREFIX_L: &str = "203.0.113.0/28";
/// `ra`'s and `rx`'s addresses on link 1 and link 2 (each a /29 through
/// one gateway).
pub(super) const LINKS: [(&str, &str, &str); 2] =
    [("198.51.100.17", "198.51.100.18", "29"), ("198.51.100.25", "198.51.100.26", "29")];
/// AS numbers (documentation range, RFC 5398).
pub(super) const AS_A: u32 = 64500;
pub(super) const AS_X: u32 = 64510;
/// The multipath hash seed both routers use.
pub const HASH_SEED: u32 = 0x5eed_0030;
/// Port of each gateway's metrics endpoint (its namespace's loopback).
pub(super) const METRICS_PORT: u16 = 9464;

/// BFD detection multiplier.
pub(super) const BFD_MULTIPLIER: u32 = 3;

/// `ra`'s (`me` 0) or `rx`'s (`me` 1) BIRD configuration: eBGP over
/// each gateway link with BFD, the two routes merged into one kernel
/// multipath route.
pub(super) fn bird_config(log: &str, me: usize, bfd_ms: u32) -> String {
    let (router_id, my_as, peer_as, lan_dev, peers) = if me == 0 {
        (LINKS[0].0, AS_A, AS_X, "a0", [LINKS[0].1, LINKS[1].1])
    } else {
        (LINKS[0].1, AS_X, AS_A, "l0", [LINKS[0].0, LINKS[1].0])
    };
    let (iv, mult) = (bfd_ms, BFD_MULTIPLIER);
    format!(
        r#"log "{log}" all;
debug protocols {{ states }};
router id {router_id};
protocol device {{ scan time 10; }}
protocol direct {{ ipv4; interface "{lan_dev}"; }}
protocol kernel {{
  ipv4 {{ import none; export where source = RTS_BGP; }};
  merge paths on;
}}
protocol bfd {{
  interface "g*" {{ min rx interval {iv} ms; min tx interval {iv} ms; multiplier {mult}; }};
}}
template bgp gwlink {{
  local as {my_as};
  connect retry time 1;
  error wait time 1, 4;
  hold time 3;
  keepalive time 1;
  bfd on;
  ipv4 {{ import all; export where source = RTS_DEVICE; }};
}}
protocol bgp via1 from gwlink {{ neighbor {} as {peer_as}; }}
protocol bgp via2 from gwlink {{ neighbor {} as {peer_as}; }}
"#,
        peers[0], peers[1]
    )
}

/// The namespaces and links of the run.
pub(super) struct Lab {
    pub(super) topo: Topology,
    pub(super) host_a: NsId,
    pub(super) ra: NsId,
    pub(super) gws: [NsId; 2],
    pub(super) rx: NsId,
    pub(super) host_l: NsId,
}

impl Lab {
    pub(super) fn build(hash_policy: u32) -> Result<Lab, RunError> {
        let mut topo = Topology::new()?;
        let host_a = topo.add_ns("bneta")?;
        let ra = topo.add_ns("ra")?;
        let gws = [topo.add_ns("gw1")?, topo.add_ns("gw2")?];
        let rx = topo.add_ns("rx")?;
        let host_l = topo.add_ns("legacy")?;
        topo.add_veth((host_a, "eth0"), (ra, "a0"), 9000)?;
        topo.add_veth((rx, "l0"), (host_l, "eth0"), 1500)?;
        for (i, gw) in gws.iter().enumerate() {
            let dev = format!("g{}", i + 1);
            topo.add_veth((ra, &dev), (*gw, "gwi"), 9000)?;
            topo.add_veth((*gw, "gwo"), (rx, &dev), 1500)?;
            topo.ns(*gw).set_offloads("gwi", Offloads::GRO_RECEIVER)?;
            topo.ns(*gw).set_offloads("gwo", Offloads::GRO_RECEIVER)?;
            let (a, x, len) = LINKS[i];
            topo.ns(ra).add_addr(&dev, &format!("{a}/{len}"))?;
            topo.ns(rx).add_addr(&dev, &format!("{x}/{len}"))?;
        }
        topo.ns(host_a).add_addr("eth0", &format!("{HOST_A}/28"))?;
        topo.ns(ra).add_addr("a0", "198.51.100.14/28")?;
        topo.ns(host_a).add_route(PREFIX_L, "198.51.100.14")?;
        topo.ns(host_l).add_addr("eth0", &format!("{HOST_L}/28"))?;
        topo.ns(rx).add_addr("l0", "203.0.113.14/28")?;
        topo.ns(host_l).add_route(PREFIX_A, "203.0.113.14")?;
        for h in [host_a, host_l] {
            topo.ns(h).set_offloads("eth0", Offloads::WIRE_SENDER)?;
        }
        for r in [ra, rx] {
            let ns = topo.ns(r);
            ns.enable_forwarding()?;
            ns.set_sysctl("net.ipv4.fib_multipath_hash_policy", &hash_policy.to_string())?;
            // Policy 3's fields: source and destination address, protocol,
            // source and destination port.
            ns.set_sysctl("net.ipv4.fib_multipath_hash_fields", "0x0037")?;
            ns.set_sysctl("net.ipv4.fib_multipath_hash_seed", &HASH_SEED.to_string())?;
        }
        Ok(Lab { topo, host_a, ra, gws, rx, host_l })
    }

    pub(super) fn ns(&self, id: NsId) -> &Netns {
        self.topo.ns(id)
    }

    pub(super) fn start_gateway(&self, i: usize, o: &EcmpOptions) -> Result<GatewayProcess, RunError> {
        let mut args: Vec<String> = vec!["--metrics".into(), format!("127.0.0.1:{METRICS_PORT}")];
        args.extend(o.gateway_args.iter().cloned());
        Ok(GatewayProcess::start_in(self.ns(self.gws[i]), "gwi", "gwo", &[], &o.exe, &args)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bird_configs_name_both_sessions_bfd_and_merging() {
        let c = bird_config("/tmp/x.log", 0, 20);
        for want in ["merge paths on", "bfd on", "neighbor 198.51.100.18 as 64510", "neighbor 198.51.100.26 as 64510"] {
            assert!(c.contains(want), "{want}: {c}");
        }
        let c = bird_config("/tmp/x.log", 1, 20);
        crate::border::bird_parses(&c).unwrap();
        assert!(c.contains("neighbor 198.51.100.17 as 64500") && c.contains("interface \"l0\""), "{c}");
    }
}
