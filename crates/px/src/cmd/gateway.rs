//! `px gateway`: run the MTU-translating gateway between two interfaces.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use px_runtime::gateway::{self, ConfigError, GatewayConfig};

/// Bump-in-the-wire between an inner (large-MTU) and an outer (legacy) port.
///
/// Inbound TCP (outer → inner) is merged into inner-MSS segments, outbound
/// TCP is cut to the outer MSS or learned path MTU, SYN MSS options are
/// raised inbound and clamped outbound; everything else passes as through a
/// correct router (fragmented, or dropped with an ICMP error). Needs
/// CAP_NET_RAW and CAP_NET_ADMIN. SIGINT/SIGTERM: flush, restore the ports,
/// exit 0. SIGHUP: read the configuration file again and apply what can
/// change live (timeouts, limits, caravan prefixes, PSH policy, log
/// interval, offload); a change to ports, workers, MTUs, GRO/GSO, the receive ring,
/// the metrics address or the capture is refused in the log and the
/// running configuration stays. Every option can also be set in a TOML file (--config); flags
/// override the file. See examples/gateway.toml for all options.
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// Interface toward the b-network (large MTU).
    #[arg(long)]
    inner: Option<String>,
    /// Interface toward the legacy network.
    #[arg(long)]
    outer: Option<String>,
    /// Inner MTU (default: the inner interface's MTU).
    #[arg(long)]
    imtu: Option<u16>,
    /// Outer MTU (default: the outer interface's MTU).
    #[arg(long)]
    emtu: Option<u16>,
    /// Worker threads (1..=64).
    #[arg(long)]
    workers: Option<usize>,
    /// TOML configuration file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Prometheus metrics endpoint address, e.g. 127.0.0.1:9464.
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// Time between summary lines in the log, e.g. 10s (0: none; a bare
    /// number is seconds).
    #[arg(long, value_parser = super::units::secs_u64)]
    log_interval: Option<u64>,
    /// Merge timeout, e.g. 500us (0..=10ms; a bare number is microseconds,
    /// as the old name --merge-timeout-us took).
    #[arg(long = "merge-timeout", alias = "merge-timeout-us", value_parser = super::units::micros_u64)]
    merge_timeout_us: Option<u64>,
    /// Source address for ICMPv4 errors the gateway sends (default
    /// 192.0.0.8, RFC 7600's dummy address; 0.0.0.0: none).
    #[arg(long)]
    icmp_source_v4: Option<std::net::Ipv4Addr>,
    /// Source address for ICMPv6 errors the gateway sends (default none:
    /// large IPv6 packets from inside are dropped without "packet too big";
    /// the gateway warns at start).
    #[arg(long)]
    icmp_source_v6: Option<std::net::Ipv6Addr>,
    /// Handle every frame in software (no GRO/GSO through PACKET_VNET_HDR).
    #[arg(long)]
    no_gro_gso: bool,
    /// The kernel fast path: "on" moves established bulk TCP flows to a TC
    /// program on the ports that re-cuts GRO super-packets in the kernel
    /// (the engine decides which and when); "off": every packet crosses
    /// user space (docs/fast-path.md).
    #[arg(long, value_name = "off|on")]
    offload: Option<px_runtime::gateway::FastPathMode>,
    /// Receive through the memory-mapped ring instead of recvmmsg.
    #[arg(long)]
    rx_ring: bool,
    /// What PSH does to held data: adaptive (default: per flow, rides for
    /// bulk flows, flushes for request/response), flush (at once) or hold
    /// (it rides on the merged segment, still sent within the merge timeout).
    #[arg(long, value_parser = ["adaptive", "flush", "hold"])]
    psh: Option<String>,
    /// Write what the ports receive and send to this pcapng file (one
    /// interface per port, direction in each packet's flags), off the data
    /// path: when the writer falls behind, capture records are dropped and
    /// counted, never packets.
    #[arg(long, value_name = "FILE")]
    capture: Option<PathBuf>,
    /// Largest capture file before it rotates to FILE.1, FILE.2, ...
    #[arg(long, value_name = "BYTES")]
    capture_max_bytes: Option<u64>,
    /// Capture files kept, the current one included.
    #[arg(long, value_name = "N")]
    capture_files: Option<u32>,
    /// Bytes captured of each frame (64..=262144; e.g. 128 keeps the
    /// headers only, which costs far less than whole frames).
    #[arg(long, value_name = "BYTES")]
    capture_snaplen: Option<u32>,
    /// Follow neighbours' advertised iMTUs from this kernel routing table
    /// (routes with an `mtu` metric, e.g. BIRD's `krt_mtu`), verify each
    /// with one path-MTU measurement and send verified ones untranslated
    /// (docs/border.md).
    #[arg(long, value_name = "TABLE")]
    imtu_table: Option<u32>,
    /// UDP port of the neighbours' `px fpmtud` responders (with --imtu-table).
    #[arg(long, value_name = "PORT", requires = "imtu_table")]
    imtu_responder_port: Option<u16>,
    /// Log lines as text (human, the default) or one JSON object per line.
    #[arg(long, value_name = "FORMAT", value_parser = ["human", "json"], default_value = "human")]
    log_format: String,
    /// At exit, write the final counters as JSON to this file.
    #[arg(long)]
    stats_file: Option<PathBuf>,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    print_config: bool,
    /// Validate this configuration file (with any flags given) as `px
    /// gateway` would at start, print the effective configuration as TOML
    /// and exit 0; on an error, name the field and its allowed range and
    /// exit 2. Touches no interface.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check_config: Option<PathBuf>,
}

impl GatewayArgs {
    /// The flags given on the command line, each with the key it sets:
    /// an error about that key names the flag instead.
    fn flags_given(&self) -> Vec<(&'static str, &'static str)> {
        let given = [
            ("inner", "--inner", self.inner.is_some()),
            ("outer", "--outer", self.outer.is_some()),
            ("workers", "--workers", self.workers.is_some()),
            ("log_interval_s", "--log-interval", self.log_interval.is_some()),
            ("[engine] merge_timeout_us", "--merge-timeout", self.merge_timeout_us.is_some()),
            ("capture_max_bytes", "--capture-max-bytes", self.capture_max_bytes.is_some()),
            ("capture_files", "--capture-files", self.capture_files.is_some()),
            ("capture_snaplen", "--capture-snaplen", self.capture_snaplen.is_some()),
        ];
        given.into_iter().filter(|g| g.2).map(|(k, f, _)| (k, f)).collect()
    }

    /// The configuration, its errors naming the flag or key as the user
    /// wrote it.
    pub fn config(&self) -> Result<GatewayConfig, String> {
        let file = self.config.as_ref().or(self.check_config.as_ref());
        // Nothing names the ports: say which flags are missing.
        let c = match file {
            Some(p) => GatewayConfig::from_file(p).map_err(|e| e.to_string())?,
            None => GatewayConfig::default(),
        };
        for (key, flag, given) in [("inner", "--inner", &self.inner), ("outer", "--outer", &self.outer)] {
            let named = if key == "inner" { !c.inner.is_empty() } else { !c.outer.is_empty() };
            if given.is_none() && !named {
                return Err(match file {
                    Some(p) => format!("`{flag}` is required: {} sets no `{key}`", p.display()),
                    None => format!("`{flag}` is required (or `{key}` in a --config file); see px gateway --help"),
                });
            }
        }
        self.to_config().map_err(|e| {
            let text = e.to_string();
            match &e {
                ConfigError::Invalid { field, value, .. } => {
                    match self.flags_given().iter().find(|(k, _)| k == field) {
                        // The flag takes a duration: say it with its unit.
                        Some((_, flag)) if *field == "[engine] merge_timeout_us" => {
                            format!("invalid configuration: `{flag}` = {value}us (allowed: 0us..=10000us)")
                        }
                        Some((k, flag)) => text.replacen(&format!("`{k}`"), &format!("`{flag}`"), 1),
                        None => text,
                    }
                }
                _ => text,
            }
        })
    }

    pub fn to_config(&self) -> Result<GatewayConfig, ConfigError> {
        let mut c = match self.config.as_ref().or(self.check_config.as_ref()) {
            Some(p) => GatewayConfig::from_file(p)?,
            None => GatewayConfig::default(),
        };
        if let Some(v) = &self.inner {
            c.inner = v.clone();
        }
        if let Some(v) = &self.outer {
            c.outer = v.clone();
        }
        if let Some(v) = self.imtu {
            c.imtu = v;
        }
        if let Some(v) = self.emtu {
            c.emtu = v;
        }
        if let Some(v) = self.workers {
            c.workers = v;
        }
        if self.metrics.is_some() {
            c.metrics = self.metrics;
        }
        if let Some(v) = self.log_interval {
            c.log_interval_s = v;
        }
        if let Some(v) = self.merge_timeout_us {
            c.engine.merge_timeout = std::time::Duration::from_micros(v);
        }
        if self.icmp_source_v4.is_some() {
            c.engine.icmp_source_v4 = self.icmp_source_v4;
        }
        if self.icmp_source_v6.is_some() {
            c.engine.icmp_source_v6 = self.icmp_source_v6;
        }
        if self.capture.is_some() {
            c.capture = self.capture.clone();
        }
        if let Some(v) = self.capture_max_bytes {
            c.capture_max_bytes = v;
        }
        if let Some(v) = self.capture_snaplen {
            c.capture_snaplen = v;
        }
        if let Some(v) = self.capture_files {
            c.capture_files = v;
        }
        if let Some(t) = self.imtu_table {
            let f = c.imtu_follow.get_or_insert_with(Default::default);
            f.table = t;
            if let Some(p) = self.imtu_responder_port {
                f.responder_port = p;
            }
        }
        if self.no_gro_gso {
            c.gro_gso = false;
        }
        if let Some(m) = self.offload {
            c.offload = m;
        }
        if self.rx_ring {
            c.rx_ring = true;
        }
        match self.psh.as_deref() {
            Some("hold") => c.engine.psh = px_gateway::PshPolicy::Hold,
            Some("adaptive") => c.engine.psh = px_gateway::PshPolicy::Adaptive,
            Some(_) => c.engine.psh = px_gateway::PshPolicy::Flush,
            None => {}
        }
        c.resolve_icmp_source();
        c.validate()?;
        // The engine's own checks too, so that --print-config and a reload
        // refuse what --check-config and a start refuse.
        c.check()?;
        Ok(c)
    }
}

pub fn run(args: GatewayArgs) -> Result<ExitCode, String> {
    let cfg = args.config()?;
    if args.check_config.is_some() {
        // Not an error: a file may be checked on another host or namespace.
        for (key, name) in [("inner", &cfg.inner), ("outer", &cfg.outer)] {
            if px_io::iface::ifindex(name).is_err() {
                eprintln!(
                    "px gateway: WARNING: `{key}` = {name:?}: no such interface in this network namespace; the gateway would not start here"
                );
            }
        }
        // Loud, on stderr: stdout is the effective configuration.
        for line in cfg.icmp_notice() {
            eprintln!("px gateway: {line}");
        }
        print!("{}", toml::to_string(&cfg).map_err(|e| e.to_string())?);
        return Ok(ExitCode::SUCCESS);
    }
    if args.print_config {
        print!("{}", toml::to_string(&cfg).map_err(|e| e.to_string())?);
        return Ok(ExitCode::SUCCESS);
    }
    px_runtime::logging::init(args.log_format.parse::<px_runtime::logging::LogFormat>().map_err(|e| e.to_string())?);
    let stop = crate::signals::install();
    let reload = crate::signals::install_reload();
    let ctl = gateway::Control {
        stop,
        reload,
        load: Some(Box::new(|| args.to_config())),
        summary: Some(Box::new(px_runtime::logging::summary)),
    };
    let total = gateway::run_with(&cfg, ctl, &mut |line| px_runtime::logging::line(line)).map_err(|e| e.to_string())?;
    if let Some(path) = &args.stats_file {
        let json = serde_json::json!({
            "yield": total.counters.conversion_yield(),
            "flows": total.flows,
            "held_bytes": total.held_bytes,
            "socket_drops": total.socket_drops,
            "send_errors": total.send_errors,
            "rx_errors": total.rx_errors,
            "counters": total.counters,
            "fast_path_kernel": total.kernel_reasons.map(|r| {
                px_runtime::fast_path::REASONS.iter().zip(r).map(|(k, v)| ((*k).to_string(), serde_json::Value::from(v))).collect::<serde_json::Map<_, _>>()
            }),
            // The arrays of `counters` (`drop`, `flush`) by reason name.
            "drops": px_gateway::DropReason::ALL
                .iter()
                .map(|r| (r.name().to_string(), total.counters.drops(*r).into()))
                .collect::<serde_json::Map<String, serde_json::Value>>(),
            "flushes": super::named_flushes(&total.counters.flush),
            // Frames on each port's wire, as `ip -s link` counts them.
            "wire": {
                "inner": total.wire(px_gateway::Port::Inner),
                "outer": total.wire(px_gateway::Port::Outer),
            },
        });
        std::fs::write(path, json.to_string()).map_err(|e| format!("--stats-file {}: {e}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
