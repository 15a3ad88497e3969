//! The command-line flags of `px gateway` that set configuration keys
//! (issue 36 item 7): `--set KEY=VALUE` for any key, and one flag for each
//! of the most used keys ([`SHORTHANDS`]), generated from the keys: a flag
//! is a [`Setting`] of its key, read as the file reads it, its help the
//! key's comment in `examples/gateway.toml` ([`settings::documented`]).
//! [`KeyFlags`] is flattened into `px gateway`'s arguments; it keeps the
//! settings in command-line order, so later ones win.

use clap::{Arg, ArgAction, ArgMatches, Args, ValueHint};

use super::settings::{self, Setting};

/// What a [`Shorthand`] flag takes.
#[derive(Debug, Clone, Copy)]
pub enum Takes {
    /// A value, shown as this metavar.
    Value(&'static str, ValueHint),
    /// One of these words (the metavar lists them); the flag alone means
    /// the third, if any (`--fast-path` is `--fast-path on`).
    Choice(&'static str, &'static [&'static str], Option<&'static str>),
    /// Nothing: the flag sets the key to this value.
    Sets(&'static str),
}

/// A flag that sets one key of the configuration.
pub struct Shorthand {
    pub flag: &'static str,
    /// Older spellings, still accepted.
    pub aliases: &'static [&'static str],
    pub key: &'static str,
    pub takes: Takes,
}

const fn flag(flag: &'static str, key: &'static str, takes: Takes) -> Shorthand {
    Shorthand { flag, aliases: &[], key, takes }
}

use Takes::{Choice, Sets, Value};

/// The keys that have a flag of their own: the ports, sizes and switches
/// an operator sets by hand most, and every flag older versions had.
pub const SHORTHANDS: &[Shorthand] = &[
    flag("inner", "inner", Value("IFACE", ValueHint::Other)),
    flag("outer", "outer", Value("IFACE", ValueHint::Other)),
    flag("imtu", "imtu", Value("BYTES", ValueHint::Other)),
    flag("emtu", "emtu", Value("BYTES", ValueHint::Other)),
    flag("workers", "workers", Value("N", ValueHint::Other)),
    flag("datapath", "datapath", Choice("af_packet|dpdk", &["af_packet", "dpdk"], None)),
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
    // The kernel fast path's key was `offload` (and its flag `--offload`):
    // the old flag stays an alias, the file's old key a warning
    // (`config::DEPRECATED_KEYS`).
    Shorthand {
        flag: "fast-path",
        aliases: &["offload"],
        key: "fast_path",
        takes: Choice("off|on", &["off", "on"], Some("on")),
    },
    flag("rx-ring", "rx_ring", Sets("true")),
    flag("psh", "engine.psh", Choice("adaptive|flush|hold", &["adaptive", "flush", "hold"], None)),
    flag("capture", "capture", Value("FILE", ValueHint::FilePath)),
    flag("capture-max-bytes", "capture_max_bytes", Value("SIZE", ValueHint::Other)),
    flag("capture-files", "capture_files", Value("N", ValueHint::Other)),
    flag("capture-snaplen", "capture_snaplen", Value("SIZE", ValueHint::Other)),
    flag("imtu-table", "imtu_follow.table", Value("TABLE", ValueHint::Other)),
    flag("imtu-responder-port", "imtu_follow.responder_port", Value("PORT", ValueHint::Other)),
];

/// The settings of the command line, in the order given.
#[derive(Debug, Default)]
pub struct KeyFlags(pub Vec<Setting>);

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
                Choice(name, words, alone) => {
                    let arg = arg.value_name(name).value_parser(words.to_vec());
                    match alone {
                        Some(v) => arg.num_args(0..=1).default_missing_value(v),
                        None => arg,
                    }
                }
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
