//! The tables `px lab demo` and `px lab up` print.

use std::fmt::Write;

use super::{BNET_ADDR_GW, DemoResult, EMTU, IMTU, LEGACY_ADDR, UP_METRICS, UpReport};

/// `writeln!` into a `String` (which cannot fail).
macro_rules! say {
    ($o:ident) => {
        $o.push('\n')
    };
    ($o:ident, $($t:tt)*) => {{
        let _ = writeln!($o, $($t)*);
    }};
}

impl DemoResult {
    /// The table `px lab demo` prints.
    pub fn table(&self) -> String {
        let r = self;
        let mut out = String::new();
        let opt = |v: Option<u32>| v.map_or("-".to_string(), |m| m.to_string());
        say!(
            out,
            "\nlegacy host (MTU {EMTU}) — middle box — b-network host (MTU {IMTU}); {} flow(s), {} s per run",
            r.flows,
            r.seconds_per_run
        );
        say!(out, "offloads: {}", r.offloads);
        if r.fast_path {
            say!(
                out,
                "kernel fast path: on; it carried {:.1} % of the TCP payload through the gateway (CPU per GB against Linux forwarding: px bench gateway --fast-path)",
                r.kernel_share * 100.0
            );
        }
        say!(out);
        say!(out, "{:<44} {:>14} {:>14}", "", "inbound", "outbound");
        say!(out, "{:<44} {:>14} {:>14}", "", "legacy→bnet", "bnet→legacy");
        let mut row = |label: &str, a: String, b: String| say!(out, "{label:<44} {a:>14} {b:>14}");
        let (i, o) = (&r.inbound, &r.outbound);
        row("throughput via px gateway (Gbps)", format!("{:.2}", i.gateway_gbps), format!("{:.2}", o.gateway_gbps));
        row("throughput via Linux router (Gbps)", format!("{:.2}", i.router_gbps), format!("{:.2}", o.router_gbps));
        row("gateway / router (mean of rounds)", format!("{:.2}", i.ratio), format!("{:.2}", o.ratio));
        let each = |v: &[f64]| v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(" ");
        row("  ... each round", each(&i.round_ratios), each(&o.round_ratios));
        row(
            "  ... with frame observers on (their cost)",
            format!("{:.2}/{:.2}", i.gateway_gbps_observed, i.router_gbps_observed),
            format!("{:.2}/{:.2}", o.gateway_gbps_observed, o.router_gbps_observed),
        );
        row(
            "b-network host CPU s/GB via gateway",
            format!("{:.3}", i.bnet_cpu_s_per_gb_gateway),
            format!("{:.3}", o.bnet_cpu_s_per_gb_gateway),
        );
        row(
            "b-network host CPU s/GB via router",
            format!("{:.3}", i.bnet_cpu_s_per_gb_router),
            format!("{:.3}", o.bnet_cpu_s_per_gb_router),
        );
        row("  ... gateway / router", format!("{:.2}", i.bnet_cpu_ratio), format!("{:.2}", o.bnet_cpu_ratio));
        row(
            "  ... CPU pass Gbps gateway/router",
            format!("{:.2}/{:.2}", i.cpu_pass_gbps[0], i.cpu_pass_gbps[1]),
            format!("{:.2}/{:.2}", o.cpu_pass_gbps[0], o.cpu_pass_gbps[1]),
        );
        row("largest IP packet on inner link (observer)", i.max_frame_inner.to_string(), o.max_frame_inner.to_string());
        row("largest IP packet on outer link (observer)", i.max_frame_outer.to_string(), o.max_frame_outer.to_string());
        row("  ... inner link via router", i.router_max_frame_inner.to_string(), o.router_max_frame_inner.to_string());
        row(
            "b-network host socket mss / rcvmss",
            format!("{}/{}", opt(i.mss_seen), opt(i.rcvmss_seen)),
            format!("{}/{}", opt(o.mss_seen), opt(o.rcvmss_seen)),
        );
        row("  ... via router", opt(i.router_mss_seen), opt(o.router_mss_seen));
        row(
            "conversion yield (gateway counter, whole run)",
            i.r#yield.map_or("-".into(), |y| format!("{y:.3}")),
            "".into(),
        );
        row(
            "retransmits via gateway / router",
            format!("{}/{}", i.gateway_retransmits, i.router_retransmits),
            format!("{}/{}", o.gateway_retransmits, o.router_retransmits),
        );
        say!(out, "{:<44} {:>14.2}", "gateway CPU (cores, whole run)", r.gateway_cpu_cores);
        say!(out, "{:<44} {}", "gateway early flushes (all rounds)", crate::exp::flushes_text(&r.gateway_flushes));
        say!(out, "\nthroughput: no observer on the path (mean of rounds); frame sizes: a separate observed pass;");
        say!(out, "b-network host CPU: {}", r.bnet_cpu_accounting);
        say!(out, "\nwhere the b-network host's CPU goes, inbound (px-lab's receiver, {} flows):", r.flows);
        out.push_str(&r.bnet_cpu_split.lines());
        out
    }
}

impl UpReport {
    /// What `px lab up` prints: what runs where, and what to try.
    pub fn text(&self) -> String {
        let r = self;
        let mut out = String::new();
        let names = &r.namespaces;
        let (legacy, gw, bnet) = (&names[0], &r.gateway_ns, &names[2]);
        say!(out, "{}", r.description);
        say!(
            out,
            "legacy host {LEGACY_ADDR} / {} (MTU {EMTU}) <-> b-network host {BNET_ADDR_GW} / {} (MTU {IMTU}), one subnet through the gateway.",
            px_netns::line::LEFT_V6,
            px_netns::line::RIGHT_V6
        );
        say!(out, "namespaces: legacy {legacy}, gateway {gw}, b-network {bnet}");
        say!(out, "gateway configuration: {}", r.config.display());
        let command = r.gateway_command.join(" ");
        match &r.gateway {
            Some((pid, log)) => {
                say!(out, "px gateway running in {gw} (PID {pid}), log: {}", log.display());
                say!(out, "  started as: {command}");
            }
            None => say!(out, "px gateway not started (--no-gateway); start it by hand with:\n  {command}"),
        }
        for (ns, pid) in &r.responders {
            say!(
                out,
                "F-PMTUD responder (px fpmtud) in {ns} (PID {pid}), UDP port {}",
                px_pmtud::fpmtud::wire::DEFAULT_PORT
            );
        }
        say!(out, "\ntry:");
        say!(out, "  ip netns exec {gw} px status                  # ports, counters and rates, flows, path MTUs");
        say!(out, "  ip netns exec {gw} curl -s http://{UP_METRICS}/metrics");
        say!(out, "  ip netns exec {bnet} iperf3 -s &   ip netns exec {legacy} iperf3 -c {BNET_ADDR_GW}");
        say!(
            out,
            "  ip netns exec {bnet} px probe {LEGACY_ADDR}                 # path MTU from inside by F-PMTUD: 1500"
        );
        let pid = r.gateway.as_ref().map_or("<gateway PID>".to_string(), |(pid, _)| pid.to_string());
        say!(out, "  edit {} then: kill -HUP {pid}   # reload", r.config.display());
        say!(
            out,
            "  ip netns exec {bnet} px probe {LEGACY_ADDR} --method icmp   # the same by ICMP: last, see the warning"
        );
        say!(
            out,
            "WARNING: `px probe --method icmp` (like any non-TCP packet with DF set larger than 1500) from {bnet} gets\n\
             the gateway's \"fragmentation needed\": {bnet} then caches a path MTU of 1500 toward {LEGACY_ADDR} (10 min),\n\
             advertises MSS 1460, and its connections are not translated (`px status` names them). Before it:\n  \
             ip netns exec {bnet} ip route replace {LEGACY_ADDR}/32 dev {} advmss {}   # docs/operations.md",
            px_netns::line::BNET_DEV,
            IMTU - 40
        );
        say!(out, "then: px lab down{}", if r.default_name { String::new() } else { format!(" --name {}", r.name) });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(gateway: Option<(u32, std::path::PathBuf)>) -> UpReport {
        UpReport {
            description: "legacy — gw — bnet".into(),
            namespaces: vec!["px-legacy-1".into(), "px-gw-1".into(), "px-bnet-1".into()],
            gateway_ns: "px-gw-1".into(),
            config: "/tmp/px-lab-up/gateway.toml".into(),
            gateway_command: vec!["px".into(), "gateway".into()],
            gateway,
            responders: vec![("px-bnet-1".into(), 42)],
            name: "alice".into(),
            default_name: true,
        }
    }

    /// Issue 38 items 5 and 6: `px lab up --json` is one object with what
    /// runs where; the reload hint names the gateway's PID when it knows it.
    #[test]
    fn up_report_as_json_and_text() {
        let r = report(Some((4242, "/tmp/gw.log".into())));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["gateway_ns"], "px-gw-1");
        assert_eq!(v["gateway"][0], 4242);
        assert_eq!(v["config"], "/tmp/px-lab-up/gateway.toml");
        assert!(r.text().contains("kill -HUP 4242"), "{}", r.text());
        assert!(report(None).text().contains("kill -HUP <gateway PID>"));
        assert!(r.text().contains("then: px lab down\n"), "{}", r.text());
        let named = UpReport { name: "lab2".into(), default_name: false, ..r };
        assert!(named.text().contains("then: px lab down --name lab2\n"), "{}", named.text());
    }

    /// Issue 38 item 2: the list warns that an ICMP probe from the
    /// b-network host stops translation toward the legacy host, says the
    /// remedy, and puts that probe last.
    #[test]
    fn the_list_warns_of_the_cached_path_mtu_before_it_happens() {
        let t = report(None).text();
        let probe = t.find("--method icmp").expect("the ICMP probe is listed");
        let iperf = t.find("iperf3 -c").unwrap();
        assert!(probe > iperf, "the ICMP probe comes after the transfers: {t}");
        assert!(t.contains("WARNING: `px probe --method icmp`"), "{t}");
        assert!(t.contains("advertises MSS 1460, and its connections are not translated"), "{t}");
        assert!(
            t.contains(&format!("ip route replace {LEGACY_ADDR}/32 dev {} advmss 8960", px_netns::line::BNET_DEV)),
            "{t}"
        );
    }
}
