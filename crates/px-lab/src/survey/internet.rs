//! The lab "Internet": the namespaces, links, routes and nftables rules
//! that give each address its behaviour ([`super::Truth`]).
//!
//! ```text
//!  client ── r1 ── r2 ── r3 ─┬─ srv      every target address (local routes), HTTP on 6 ports
//!  .1      .2 .5  .6 .9 .10  ├─ poor     the poor-reassembly addresses (/32 routes from r3)
//!                            └─ rn ─┬─ natpoor   behind a router with connection tracking
//!                                   └─ natok
//! ```
//!
//! Routers answer TTL expiry at Linux's default ICMP rate limits
//! (`icmp_ratelimit` 1000 ms per destination host after a burst of six,
//! `icmp_msgs_per_sec` 1000), as real routers do, unless the run asks for
//! unlimited routers (the comparison of `targets_per_second`). `rn` tracks
//! connections (an nftables `ct` rule), so it reassembles fragment trains
//! before routing them and holds a lone first fragment without a word, as
//! a NAT or a stateful firewall does. In each server namespace every
//! address answers through its own routing table (`ip rule from A`, `src
//! A`): a host's path MTU cache is per route, so without this the first
//! PMTUD test would lower the MTU of every address's path to the client.

use std::io::Write;
use std::net::Ipv4Addr;
use std::process::Stdio;

use px_netns::{Netns, Offloads, Veth};

use super::servers::Servers;
use super::truth::Truth;
use crate::RunError;

/// The namespaces of the lab, removed on drop.
pub(super) struct Internet {
    pub(super) client: Netns,
    _routers: [Netns; 4],
    _hosts: [Netns; 4],
    _servers: [Servers; 4],
}

fn nft(ns: &Netns, script: &str) -> Result<(), RunError> {
    let mut c = ns.command("nft");
    c.args(["-f", "-"]).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| format!("nft in {}: {e}", ns.name()))?;
    if let Some(mut i) = child.stdin.take() {
        i.write_all(script.as_bytes()).map_err(|e| format!("nft: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if !out.status.success() {
        return Err(format!("nft in {}: {}\n{script}", ns.name(), String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(())
}

fn ip_batch(ns: &Netns, lines: &str) -> Result<(), RunError> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut c = std::process::Command::new("ip");
    c.args(["-n", ns.name(), "-batch", "-"]).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| format!("ip -batch: {e}"))?;
    if let Some(mut i) = child.stdin.take() {
        i.write_all(lines.as_bytes()).map_err(|e| format!("ip -batch: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("ip -batch: {e}"))?;
    if !out.status.success() {
        return Err(format!("ip -batch in {}: {}", ns.name(), String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(())
}

fn set_of(assigned: &[(Ipv4Addr, Truth)], t: Truth) -> String {
    let v: Vec<String> = assigned.iter().filter(|(_, x)| *x == t).map(|(a, _)| a.to_string()).collect();
    // nftables does not accept an empty element list.
    // (203.0.113.255 is never a target.)
    if v.is_empty() { "203.0.113.255".into() } else { v.join(", ") }
}

/// Local routes for `mine` addresses of a server namespace (all of the
/// target ranges for `srv`), each answering through its own table toward
/// `gw`.
fn serve_addresses(
    ns: &Netns,
    assigned: &[(Ipv4Addr, Truth)],
    mine: &dyn Fn(Truth) -> bool,
    gw: &str,
    all: bool,
) -> Result<(), RunError> {
    let mut batch = String::new();
    if all {
        for p in TARGET_RANGES {
            batch += &format!("route add local {p} dev lo table local\n");
        }
    }
    for (i, (a, t)) in assigned.iter().enumerate() {
        if mine(*t) {
            if !all {
                batch += &format!("route add local {a}/32 dev lo table local\n");
            }
            let table = 1000 + i;
            batch += &format!("rule add from {a} lookup {table} pref {table}\n");
            batch += &format!("route add 198.51.100.0/30 via {gw} src {a} table {table}\n");
        }
    }
    batch += &format!("route add 198.51.100.0/30 via {gw}\n");
    ip_batch(ns, &batch)
}

/// `/32` routes toward `via` for the addresses of `mine`.
fn route_addresses(
    ns: &Netns,
    assigned: &[(Ipv4Addr, Truth)],
    mine: &dyn Fn(Truth) -> bool,
    via: &str,
) -> Result<(), RunError> {
    let batch: String =
        assigned.iter().filter(|(_, t)| mine(*t)).map(|(a, _)| format!("route add {a}/32 via {via}\n")).collect();
    ip_batch(ns, &batch)
}

const TARGET_RANGES: [&str; 2] = ["203.0.113.0/24", "198.51.100.128/25"];

/// Builds the lab; `loss_percent` each way toward the lossy addresses;
/// `limited`: routers at Linux's default ICMP rate limits.
pub(super) fn build(assigned: &[(Ipv4Addr, Truth)], loss_percent: u32, limited: bool) -> Result<Internet, RunError> {
    let client = Netns::new("svc")?;
    let r1 = Netns::new("svr1")?;
    let r2 = Netns::new("svr2")?;
    let r3 = Netns::new("svr3")?;
    let rn = Netns::new("svrn")?;
    let srv = Netns::new("svsrv")?;
    let poor = Netns::new("svpoor")?;
    let natpoor = Netns::new("svnatp")?;
    let natok = Netns::new("svnato")?;
    let links = [
        (&client, "c0", &r1, "r1a", "198.51.100.1/30", "198.51.100.2/30"),
        (&r1, "r1b", &r2, "r2a", "198.51.100.5/30", "198.51.100.6/30"),
        (&r2, "r2b", &r3, "r3a", "198.51.100.9/30", "198.51.100.10/30"),
        (&r3, "r3b", &srv, "s0", "198.51.100.13/30", "198.51.100.14/30"),
        (&r3, "r3c", &poor, "p0", "198.51.100.17/30", "198.51.100.18/30"),
        (&r3, "r3d", &rn, "rna", "198.51.100.21/30", "198.51.100.22/30"),
        (&rn, "rnb", &natpoor, "q0", "198.51.100.25/30", "198.51.100.26/30"),
        (&rn, "rnc", &natok, "k0", "198.51.100.29/30", "198.51.100.30/30"),
    ];
    let wire = Offloads::WIRE_SENDER.with(Offloads { tso: None, gso: None, gro: Some(false) });
    for (a, ad, b, bd, aa, ba) in links {
        Veth::create(a, ad, b, bd, 1500)?;
        a.add_addr(ad, aa)?;
        b.add_addr(bd, ba)?;
        a.set_offloads(ad, wire)?;
        b.set_offloads(bd, wire)?;
    }
    for r in [&r1, &r2, &r3, &rn] {
        r.enable_forwarding()?;
        if !limited {
            r.set_sysctl("net.ipv4.icmp_ratelimit", "0")?;
            r.set_sysctl("net.ipv4.icmp_msgs_per_sec", "1000000")?;
            // The global bucket refills per jiffy: without a large burst, a
            // router answers at most 50 expiries in one.
            r.set_sysctl("net.ipv4.icmp_msgs_burst", "1000000")?;
        }
    }
    for p in TARGET_RANGES {
        client.add_route(p, "198.51.100.2")?;
        r1.add_route(p, "198.51.100.6")?;
        r2.add_route(p, "198.51.100.10")?;
        r3.add_route(p, "198.51.100.14")?;
    }
    for (via, r) in [("198.51.100.5", &r2), ("198.51.100.9", &r3)] {
        r.add_route("198.51.100.0/30", via)?;
    }
    r3.add_route("198.51.100.4/30", "198.51.100.9")?;
    rn.add_route("198.51.100.0/30", "198.51.100.21")?;
    serve_addresses(&srv, assigned, &|_| true, "198.51.100.13", true)?;
    let is = |x: Truth| move |t: Truth| t == x;
    serve_addresses(&poor, assigned, &is(Truth::PoorReassembly), "198.51.100.17", false)?;
    serve_addresses(&natpoor, assigned, &is(Truth::NatPoorReassembly), "198.51.100.25", false)?;
    serve_addresses(&natok, assigned, &is(Truth::NatOk), "198.51.100.29", false)?;
    route_addresses(&r3, assigned, &is(Truth::PoorReassembly), "198.51.100.18")?;
    route_addresses(&r3, assigned, &Truth::behind_nat, "198.51.100.22")?;
    route_addresses(&rn, assigned, &is(Truth::NatPoorReassembly), "198.51.100.26")?;
    route_addresses(&rn, assigned, &is(Truth::NatOk), "198.51.100.30")?;
    for ns in [&poor, &natpoor] {
        ns.set_sysctl("net.ipv4.ipfrag_low_thresh", "0")?;
        ns.set_sysctl("net.ipv4.ipfrag_high_thresh", "256")?;
        ns.set_sysctl("net.ipv4.ipfrag_time", "1")?;
    }
    // The routers' behaviours.
    let frag = "ip frag-off & 0x3fff != 0";
    let non_first = "ip frag-off & 0x1fff != 0";
    nft(
        &r1,
        &format!(
            "table ip px_lab {{ set lossy {{ type ipv4_addr; elements = {{ {} }} }}\n\
             chain transit {{ type filter hook forward priority 0; policy accept;\n\
               ip daddr @lossy numgen random mod 100 < {loss_percent} drop\n\
               ip saddr @lossy numgen random mod 100 < {loss_percent} drop\n }}\n}}\n",
            set_of(assigned, Truth::Lossy)
        ),
    )?;
    nft(
        &r2,
        &format!(
            "table ip px_lab {{ set fragmid {{ type ipv4_addr; elements = {{ {} }} }}\n\
             set icmpbh {{ type ipv4_addr; elements = {{ {} }} }}\n\
             chain pre {{ type filter hook prerouting priority -300; policy accept; ip daddr @fragmid {frag} drop\n }}\n\
             chain transit {{ type filter hook forward priority 0; policy accept; ip daddr @icmpbh icmp type destination-unreachable drop\n }}\n}}\n",
            set_of(assigned, Truth::FragFilterInPath),
            set_of(assigned, Truth::IcmpBlackhole)
        ),
    )?;
    nft(
        &r3,
        &format!(
            "table ip px_lab {{ set fraglast {{ type ipv4_addr; elements = {{ {} }} }}\n\
             set nonfirst {{ type ipv4_addr; elements = {{ {} }} }}\n\
             set dead {{ type ipv4_addr; elements = {{ {} }} }}\n\
             set prohibited {{ type ipv4_addr; elements = {{ {} }} }}\n\
             chain pre {{ type filter hook prerouting priority -300; policy accept;\n\
               ip daddr @fraglast {frag} drop\n\
               ip daddr @nonfirst {non_first} drop\n }}\n\
             chain transit {{ type filter hook forward priority 0; policy accept;\n\
               ip daddr @dead drop\n\
               ip daddr @prohibited tcp flags & (syn | ack) == syn reject with icmp type admin-prohibited\n }}\n}}\n",
            set_of(assigned, Truth::FragFilterLastHop),
            set_of(assigned, Truth::FragFilterNonFirst),
            set_of(assigned, Truth::Dead),
            set_of(assigned, Truth::Prohibited)
        ),
    )?;
    // Connection tracking at rn: any `ct` rule registers it, and with it
    // the defragmentation before routing.
    nft(
        &rn,
        "table ip px_lab { chain transit { type filter hook forward priority 0; policy accept; ct state invalid counter\n }\n}\n",
    )?;
    let servers = [Servers::start(&srv)?, Servers::start(&poor)?, Servers::start(&natpoor)?, Servers::start(&natok)?];
    Ok(Internet { client, _routers: [r1, r2, r3, rn], _hosts: [srv, poor, natpoor, natok], _servers: servers })
}
