//! `px gateway`: run the MTU-translating gateway between two interfaces.
//!
//! Settings are declared once, as the configuration's keys
//! (`px_runtime::gateway::settings`): `--set KEY=VALUE` sets any key, and
//! each flag of [`SHORTHANDS`] sets one key, its help taken from that key's
//! comment in `examples/gateway.toml`. Nothing here copies a field.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Arg, ArgAction, ArgMatches, Args, ValueHint};

use px_runtime::gateway::settings::{self, Loaded, Setting};
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
/// running configuration stays.
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
    settings: KeyFlags,
}

/// What a [`Shorthand`] flag takes.
#[derive(Debug, Clone, Copy)]
enum Takes {
    /// A value, shown as this metavar.
    Value(&'static str, ValueHint),
    /// One of these words (the metavar lists them).
    Choice(&'static str, &'static [&'static str]),
    /// Nothing: the flag sets the key to this value.
    Sets(&'static str),
}

/// A flag that sets one key of the configuration.
struct Shorthand {
    flag: &'static str,
    /// Older spellings, still accepted.
    aliases: &'static [&'static str],
    key: &'static str,
    takes: Takes,
}

const fn flag(flag: &'static str, key: &'static str, takes: Takes) -> Shorthand {
    Shorthand { flag, aliases: &[], key, takes }
}

use Takes::{Choice, Sets, Value};

/// The keys that have a flag of their own: the ports, sizes and switches
/// an operator sets by hand most, and every flag older versions had.
const SHORTHANDS: &[Shorthand] = &[
    flag("inner", "inner", Value("IFACE", ValueHint::Other)),
    flag("outer", "outer", Value("IFACE", ValueHint::Other)),
    flag("imtu", "imtu", Value("BYTES", ValueHint::Other)),
    flag("emtu", "emtu", Value("BYTES", ValueHint::Other)),
    flag("workers", "workers", Value("N", ValueHint::Other)),
    flag("metrics", "metrics", Value("ADDR:PORT", ValueHint::Other)),
    flag("log-interval", "log_interval_s", Value("DURATION", ValueHint::Other)),
    Shorthand {
        flag: "merge-timeout",
        aliases: &["merge-timeout-us"],
        key: "engine.merge_timeout_us",
        takes: Value("DURATION", ValueHint::Other),
    },
    flag("icmp-source-v4", "engine.icmp_source_v4", Value("ADDR", ValueHint::Other)),
    flag("icmp-source-v6", "engine.icmp_source_v6", Value("ADDR", ValueHint::Other)),
    flag("no-gro-gso", "gro_gso", Sets("false")),
    flag("offload", "offload", Choice("off|on", &["off", "on"])),
    flag("rx-ring", "rx_ring", Sets("true")),
    flag("psh", "engine.psh", Choice("adaptive|flush|hold", &["adaptive", "flush", "hold"])),
    flag("capture", "capture", Value("FILE", ValueHint::FilePath)),
    flag("capture-max-bytes", "capture_max_bytes", Value("SIZE", ValueHint::Other)),
    flag("capture-files", "capture_files", Value("N", ValueHint::Other)),
    flag("capture-snaplen", "capture_snaplen", Value("SIZE", ValueHint::Other)),
    flag("imtu-table", "imtu_follow.table", Value("TABLE", ValueHint::Other)),
    flag("imtu-responder-port", "imtu_follow.responder_port", Value("PORT", ValueHint::Other)),
];

/// The settings of the command line, in the order given.
#[derive(Debug, Default)]
struct KeyFlags(Vec<Setting>);

impl Args for KeyFlags {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        let docs = settings::documented();
        cmd = cmd.arg(
            Arg::new("set")
                .long("set")
                .value_name("KEY=VALUE")
                .action(ArgAction::Append)
                .value_parser(Setting::parse)
                .help("Set any key of the configuration file (a table's key dotted: engine.max_flows=100000)")
                .long_help(
                    "Set any key of the configuration file, as the file would (px-gateway.toml(5);                      `px gateway --print-config` lists every key with its default). A table's key is dotted                      (engine.max_flows=100000, imtu_follow.table=30); text needs no quotes (inner=eth1); a list                      may be comma-separated (engine.caravan_ports=443,4433); durations and sizes take units                      (log_interval_s=30s, capture_max_bytes=64MiB). Repeatable.",
                ),
        );
        for s in SHORTHANDS {
            let doc = docs.iter().find(|d| d.key == s.key).map_or("", |d| d.doc.as_str());
            let first = doc.split_inclusive(". ").next().unwrap_or(doc).trim_end();
            let key = match s.takes {
                Sets(v) => format!("[sets {} = {v}]", s.key),
                _ => format!("[key {}]", s.key),
            };
            let mut arg = Arg::new(s.flag)
                .long(s.flag)
                .aliases(s.aliases)
                .help(format!("{first} {key}"))
                .long_help(format!("{doc} {key}"));
            arg = match s.takes {
                Value(name, hint) => arg.value_name(name).value_hint(hint),
                Choice(name, words) => arg.value_name(name).value_parser(words.to_vec()),
                Sets(_) => arg.action(ArgAction::SetTrue),
            };
            if s.flag == "imtu-responder-port" {
                arg = arg.requires("imtu-table");
            }
            cmd = cmd.arg(arg);
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for KeyFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut given: Vec<(usize, Setting)> = Vec::new();
        if let (Some(sets), Some(at)) = (m.get_many::<Setting>("set"), m.indices_of("set")) {
            given.extend(at.zip(sets.cloned()));
        }
        for s in SHORTHANDS {
            let value = match s.takes {
                Sets(v) if m.get_flag(s.flag) => v.to_string(),
                Sets(_) => continue,
                _ => match m.get_one::<String>(s.flag) {
                    Some(v) => v.clone(),
                    None => continue,
                },
            };
            let at = m.index_of(s.flag).unwrap_or(0);
            given.push((at, Setting { key: s.key.into(), value, given_as: format!("--{}", s.flag) }));
        }
        given.sort_by_key(|(at, _)| *at);
        Ok(KeyFlags(given.into_iter().map(|(_, s)| s).collect()))
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl GatewayArgs {
    /// The file and settings read, not yet checked.
    fn load(&self) -> Result<Loaded, ConfigError> {
        settings::load(self.config.as_deref().or(self.check_config.as_deref()), &self.settings.0)
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
        for key in ["inner", "outer"] {
            if !loaded.sets(key) {
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

/// The effective configuration as the file would write it.
fn print(cfg: &GatewayConfig) -> Result<ExitCode, String> {
    print!("{}", toml::to_string(cfg).map_err(|e| e.to_string())?);
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: GatewayArgs) -> Result<ExitCode, String> {
    if args.print_config && args.config.is_none() && args.settings.0.is_empty() {
        // Alone: the defaults, ports unset.
        return print(&args.load().map_err(|e| e.to_string())?.config);
    }
    let cfg = args.config()?;
    if args.check_config.is_some() {
        for (key, name) in [("inner", &cfg.inner), ("outer", &cfg.outer)] {
            if px_io::iface::ifindex(name).is_err() {
                return Err(format!(
                    "`{key}` = {name:?}: no such interface in this network namespace; the gateway would not start here (`--config FILE --print-config` checks the file alone)"
                ));
            }
        }
    }
    if args.check_config.is_some() || args.print_config {
        // Loud, on stderr: stdout is the effective configuration.
        for line in cfg.icmp_notice() {
            eprintln!("px gateway: {line}");
        }
        return print(&cfg);
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
