//! `px lab demo|up|down`: the namespace lab in which 1500-byte traffic
//! becomes 9000-byte traffic and back, measured against a plain Linux router
//! on the same hosts, links and MTUs in the same run. The experiment is
//! [`px_lab::demo`]; this is its command line and its table.

use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use px_lab::demo::{self, BNET_ADDR_GW, DemoOptions, DemoResult, EMTU, IMTU, LEGACY_ADDR, UP_METRICS};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Bulk TCP per direction and per middle box, e.g. 5s (1s..=60s; a
    /// bare number is seconds; old name --seconds).
    #[arg(long = "duration", alias = "seconds", default_value = "5s", value_parser = secs_in(1, 60))]
    seconds: u64,
    /// Rounds, each running the gateway and then the router, so that both
    /// see the same drift of a shared machine; figures are the mean.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=20))]
    rounds: u64,
    /// Parallel TCP flows per direction.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=128))]
    flows: u64,
    /// Gateway worker threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    workers: u64,
    /// Extra arguments for `px gateway` (repeatable), e.g. `--gateway-arg=--rx-ring`.
    #[arg(long = "gateway-arg", allow_hyphen_values = true)]
    gateway_args: Vec<String>,
    /// Run the gateway with the kernel fast path (`px gateway --offload
    /// on`): established bulk flows move to a TC program on its ports.
    #[arg(long)]
    offload: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Do not start `px gateway` in the gateway namespace; print the
    /// command that starts it by hand (with the configuration file written).
    #[arg(long)]
    no_gateway: bool,
}

#[derive(Debug, Args)]
pub struct DownArgs {}

/// Whole seconds within `lo..=hi` (see [`super::units`]).
pub(crate) fn secs_in(lo: u64, hi: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let v = super::units::secs_u64(s)?;
        if (lo..=hi).contains(&v) { Ok(v) } else { Err(format!("`{s}`: allowed {lo}s..={hi}s")) }
    }
}

fn px_exe() -> Result<std::path::PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find the px binary: {e}"))
}

pub fn demo(a: DemoArgs) -> Result<ExitCode, String> {
    demo::check_prerequisites("px lab demo")?;
    let t0 = Instant::now();
    let opts = DemoOptions {
        exe: px_exe()?,
        seconds: a.seconds,
        rounds: a.rounds,
        flows: a.flows,
        workers: a.workers,
        gateway_args: a.gateway_args,
        offload: a.offload,
    };
    let json = a.json;
    let res = demo::run(&opts, &|s| {
        if !json {
            eprintln!("{s}");
        }
    })?;
    if a.json {
        let mut v = serde_json::to_value(&res).map_err(|e| e.to_string())?;
        v["gateway_flushes"] = super::named_flushes(&res.gateway_flushes).into();
        println!("{v}");
    } else {
        print_table(&res);
        eprintln!("px lab demo: done in {:.0} s; namespaces removed.", t0.elapsed().as_secs_f64());
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(r: &DemoResult) {
    let opt = |v: Option<u32>| v.map_or("-".to_string(), |m| m.to_string());
    println!(
        "\nlegacy host (MTU {EMTU}) — middle box — b-network host (MTU {IMTU}); {} flow(s), {} s per run",
        r.flows, r.seconds_per_run
    );
    println!("offloads: {}", r.offloads);
    if r.fast_path {
        println!(
            "kernel fast path: on; it carried {:.1} % of the TCP payload through the gateway (CPU per GB against Linux forwarding: px bench gateway --offload)",
            r.kernel_share * 100.0
        );
    }
    println!();
    println!("{:<44} {:>14} {:>14}", "", "inbound", "outbound");
    println!("{:<44} {:>14} {:>14}", "", "legacy→bnet", "bnet→legacy");
    let row = |label: &str, a: String, b: String| println!("{label:<44} {a:>14} {b:>14}");
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
    println!("{:<44} {:>14.2}", "gateway CPU (cores, whole run)", r.gateway_cpu_cores);
    println!("{:<44} {}", "gateway early flushes (all rounds)", super::early_flushes_text(&r.gateway_flushes));
    println!("\nthroughput: no observer on the path (mean of rounds); frame sizes: a separate observed pass;");
    println!("b-network host CPU: {}", r.bnet_cpu_accounting);
    println!("\nwhere the b-network host's CPU goes, inbound (px-lab's receiver, {} flows):", r.flows);
    print!("{}", r.bnet_cpu_split.lines());
}

pub fn up(a: UpArgs) -> Result<ExitCode, String> {
    let r = demo::up(&px_exe()?, a.no_gateway)?;
    let names = &r.namespaces;
    let (legacy, gw, bnet) = (&names[0], &r.gateway_ns, &names[2]);
    println!("{}", r.description);
    println!(
        "legacy host {LEGACY_ADDR} / {} (MTU {EMTU}) <-> b-network host {BNET_ADDR_GW} / {} (MTU {IMTU}), one subnet through the gateway.",
        px_lab::line::LEFT_V6,
        px_lab::line::RIGHT_V6
    );
    println!("namespaces: legacy {legacy}, gateway {gw}, b-network {bnet}");
    println!("gateway configuration: {}", r.config.display());
    let command = r.gateway_command.join(" ");
    match &r.gateway {
        Some((pid, log)) => {
            println!("px gateway running in {gw} (PID {pid}), log: {}", log.display());
            println!("  started as: {command}");
        }
        None => println!("px gateway not started (--no-gateway); start it by hand with:\n  {command}"),
    }
    for (ns, pid) in &r.responders {
        println!(
            "F-PMTUD responder (px fpmtud) in {ns} (PID {pid}), UDP port {}",
            px_pmtud::fpmtud::wire::DEFAULT_PORT
        );
    }
    println!("\ntry:");
    println!("  ip netns exec {gw} px status                  # ports, counters and rates, flows, path MTUs");
    println!("  ip netns exec {gw} curl -s http://{UP_METRICS}/metrics");
    println!("  ip netns exec {bnet} iperf3 -s &   ip netns exec {legacy} iperf3 -c {BNET_ADDR_GW}");
    println!("  ip netns exec {bnet} px probe {LEGACY_ADDR} --method icmp   # path MTU from inside: 1500");
    println!("  ip netns exec {bnet} px probe {LEGACY_ADDR}                 # the same by F-PMTUD");
    println!("  edit {} then: kill -HUP <gateway PID>   # reload", r.config.display());
    println!("then: px lab down");
    Ok(ExitCode::SUCCESS)
}

pub fn down(_: DownArgs) -> Result<ExitCode, String> {
    if !demo::state_file().exists() {
        // Nothing to take down: "not running", not a failure.
        eprintln!("px lab down: no lab is up ({} not found)", demo::state_file().display());
        return Ok(ExitCode::from(3));
    }
    for n in demo::down()? {
        println!("removed {n}");
    }
    Ok(ExitCode::SUCCESS)
}
