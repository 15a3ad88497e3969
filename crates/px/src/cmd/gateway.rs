//! `px gateway`: run the MTU-translating gateway between two interfaces.
//!
//! Settings are declared once, as the configuration's keys
//! (`px_runtime::gateway::settings`): `--set KEY=VALUE` sets any key, and
//! each flag of `px_runtime::gateway::flags::SHORTHANDS` sets one key, its
//! help taken from that key's comment in `examples/gateway.toml`. Nothing
//! here copies a field.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueHint};

use px_runtime::gateway::flags;
use px_runtime::gateway::settings::{self, Loaded};
use px_runtime::gateway::{self, ConfigError, GatewayConfig};
use px_runtime::logging::{Level, LogFormat};

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
/// running configuration stays.
///
/// Exit status: 0 stopped cleanly; 1 a start that may succeed later by
/// itself (a port not there yet, one another gateway serves): a service
/// manager starts it again; 2 a configuration or host that must change
/// first. Under systemd (`Type=notify`) it says READY=1 once it forwards
/// and feeds the watchdog while every worker makes progress.
///
/// Every key of the configuration file (px-gateway.toml(5),
/// examples/gateway.toml) can be set with `--set KEY=VALUE`; the most used
/// have a flag of their own. The command line overrides the file, later
/// settings override earlier ones.
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// TOML configuration file (px-gateway.toml(5)).
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    config: Option<PathBuf>,
    /// Validate this configuration file (with any settings given) as `px
    /// gateway` would at start, check that its interfaces exist here, print
    /// the effective configuration as TOML and exit 0; on an error, name
    /// the key or flag and what it allows and exit 2. Changes nothing.
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath, conflicts_with = "config")]
    check_config: Option<PathBuf>,
    /// Print the effective configuration as TOML and exit (alone: every key
    /// with its default).
    #[arg(long)]
    print_config: bool,
    /// Log lines as text (`human`, the default) or one JSON object per line (`json`).
    #[arg(long, value_name = "FORMAT", value_parser = ["human", "json"], default_value = "human")]
    log_format: String,
    /// At exit, write the final counters as JSON to this file.
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    stats_file: Option<PathBuf>,
    #[command(flatten)]
    settings: flags::KeyFlags,
}

impl GatewayArgs {
    /// The file and settings read, not yet checked.
    fn load(&self) -> Result<Loaded, ConfigError> {
        settings::load(self.config.as_deref().or(self.check_config.as_deref()), &self.settings.0)
    }

    /// Warnings for keys spelt with their old names.
    fn deprecations(&self) -> Vec<String> {
        self.load().map(|l| l.deprecations()).unwrap_or_default()
    }

    /// The configuration to run, checked, its errors naming the flag or
    /// the file's line as the user wrote them.
    pub fn to_config(&self) -> Result<GatewayConfig, ConfigError> {
        let loaded = self.load()?;
        loaded.check()?;
        Ok(loaded.config)
    }

    /// The same, first saying which ports are missing.
    fn config(&self) -> Result<GatewayConfig, String> {
        let loaded = self.load().map_err(|e| e.to_string())?;
        let file = self.config.as_ref().or(self.check_config.as_ref());
        // DPDK devices name their ports ([dpdk] inner, outer).
        let devices = loaded.config.datapath == gateway::DatapathKind::Dpdk && loaded.config.dpdk.is_some();
        for key in ["inner", "outer"] {
            if !loaded.sets(key) && !devices {
                return Err(match file {
                    Some(p) => format!("`--{key}` is required: {} sets no `{key}`", p.display()),
                    None => format!("`--{key}` is required (or `{key}` in a --config file); see px gateway --help"),
                });
            }
        }
        loaded.check().map_err(|e| e.to_string())?;
        Ok(loaded.config)
    }
}

/// `--check-config` and `--print-config`: the effective configuration on
/// stdout, what to know about it on stderr.
fn check(args: &GatewayArgs) -> Result<ExitCode, String> {
    if args.print_config && args.config.is_none() && args.settings.0.is_empty() {
        // Alone: the defaults, ports unset.
        return print(&args.load().map_err(|e| e.to_string())?.config);
    }
    let cfg = args.config()?;
    if args.check_config.is_some() {
        // The Linux interfaces the gateway would open: its ports, or with
        // DPDK devices those a `net_af_packet` device runs on.
        let interfaces: Vec<(&str, &str)> = match (cfg.datapath, &cfg.dpdk) {
            (gateway::DatapathKind::Dpdk, Some(d)) => [("dpdk.inner", &d.inner), ("dpdk.outer", &d.outer)]
                .into_iter()
                .filter_map(|(k, spec)| Some((k, gateway::DpdkConfig::interface_of(spec)?)))
                .collect(),
            _ => vec![("inner", cfg.inner.as_str()), ("outer", cfg.outer.as_str())],
        };
        for (key, name) in interfaces {
            if px_io::iface::ifindex(name).is_err() {
                return Err(format!(
                    "`{key}` = {name:?}: no such interface in this network namespace; the gateway would not start here (`--config FILE --print-config` checks the file alone)"
                ));
            }
        }
    }
    // Loud, on stderr: stdout is the effective configuration.
    for line in args.deprecations() {
        eprintln!("px gateway: warning: {line}");
    }
    for (level, line) in cfg.icmp_notice() {
        let level = if level == Level::WARN { "warning: " } else { "" };
        eprintln!("px gateway: {level}{line}");
    }
    print(&cfg)
}

/// The effective configuration as the file would write it.
fn print(cfg: &GatewayConfig) -> Result<ExitCode, String> {
    print!("{}", toml::to_string(cfg).map_err(|e| e.to_string())?);
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: GatewayArgs) -> Result<ExitCode, String> {
    let format = args.log_format.parse::<LogFormat>().map_err(|e| e.to_string())?;
    if args.check_config.is_some() || args.print_config {
        return check(&args);
    }
    // Logs from the first line on: an error that stops the start is an
    // ERROR line in the format asked for (JSON for a log shipper).
    px_runtime::logging::init(format);
    let fail = |e: &dyn std::fmt::Display, code: u8| {
        px_runtime::logging::log(Level::ERROR, &format!("px gateway: {e}"));
        Ok(ExitCode::from(code))
    };
    let cfg = match args.config() {
        Ok(cfg) => cfg,
        Err(e) => return fail(&e, 2),
    };
    for line in args.deprecations() {
        px_runtime::logging::log(Level::WARN, &format!("px gateway: {line}"));
    }
    let stop = crate::signals::install();
    let reload = crate::signals::install_reload();
    let ctl = gateway::Control { stop, reload, load: Some(Box::new(|| args.to_config())) };
    let total = match gateway::run_with(&cfg, ctl) {
        Ok(total) => total,
        // 1: may pass by itself (a port not there yet, in use): a service
        // manager starts it again; 2: the configuration or this host must
        // change first.
        Err(e) => return fail(&e, if e.may_pass() { 1 } else { 2 }),
    };
    if let Some(path) = &args.stats_file {
        let json = serde_json::json!({
            "yield": total.counters.conversion_yield(),
            "flows": total.flows,
            "held_bytes": total.held_bytes,
            "socket_drops": total.socket_drops,
            "send_errors": total.send_errors,
            "rx_errors": total.rx_errors,
            // Summed over the workers: time in receive rounds that moved a
            // frame, and in the whole loop (a polling worker's real load).
            "busy_ns": total.busy_ns,
            "loop_ns": total.loop_ns,
            // From the first round that moved a frame to the last one.
            "active_ns": total.active_ns,
            "counters": total.counters,
            "fast_path_kernel": total.kernel_reasons.map(|r| {
                px_runtime::fast_path::REASONS.iter().zip(r).map(|(k, v)| ((*k).to_string(), serde_json::Value::from(v))).collect::<serde_json::Map<_, _>>()
            }),
            // The arrays of `counters` (`drop`, `flush`) by reason name.
            "drops": px_gateway::DropReason::ALL
                .iter()
                .map(|r| (r.name().to_string(), total.counters.drops(*r).into()))
                .collect::<serde_json::Map<String, serde_json::Value>>(),
            "flushes": px_lab::exp::flushes_json(&total.counters.flush),
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
