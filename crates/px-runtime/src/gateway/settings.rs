//! Settings declared once (issue 36 item 7): the configuration's keys are
//! the only declaration of what a gateway can be told. The command line
//! sets keys, it does not mirror them: `--set KEY=VALUE` sets any key
//! (`engine.max_flows=100000`, a table's keys dotted), and the few flags
//! `px gateway` keeps for the most used keys (`--workers 2`) are each one
//! [`Setting`] of one key. A setting is applied to the configuration read
//! from the file exactly as the file's own value would be (the same types,
//! units and checks), so a key added to [`GatewayConfig`] can be set from
//! the command line without a line of CLI code.
//!
//! Errors name what the user wrote: the flag (`--merge-timeout` = 20000us)
//! for a value from the command line, the file and line for a value from
//! the file, whether the file could be read or a check failed later.
//!
//! The keys' documentation is `examples/gateway.toml` (every key with its
//! default and a comment above it, a test holds it to the struct); the
//! flags' help and the configuration file's man page come from it
//! ([`documented`]).

use std::path::Path;

use super::config::{self, ConfigError, GatewayConfig};

/// The example configuration: every key with its default, each with a
/// comment above it that says what it does.
pub const EXAMPLE: &str = include_str!("../../../../examples/gateway.toml");

/// A key set on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The key, dotted for a table's (`engine.merge_timeout_us`).
    pub key: String,
    /// The value as the file writes it; text needs no quotes
    /// (`inner=eth1`), a list may be comma-separated (`80,443`).
    pub value: String,
    /// How the user wrote it, for errors: `--merge-timeout`, `--set
    /// engine.merge_timeout_us`.
    pub given_as: String,
}

impl Setting {
    /// `KEY=VALUE`, as `--set` takes it.
    pub fn parse(arg: &str) -> Result<Setting, String> {
        match arg.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                let key = k.trim().to_string();
                Ok(Setting { given_as: format!("--set {key}"), key, value: v.trim().to_string() })
            }
            _ => Err(format!("`{arg}`: expected KEY=VALUE, e.g. engine.max_flows=100000 or log_interval_s=30s")),
        }
    }

    /// What the value may mean, in the order tried: the TOML value it
    /// spells, a comma-separated list (of one, for `80`), text.
    /// The first is the one an error is told about.
    fn readings(&self) -> Vec<toml::Value> {
        let literal = |v: &str| toml::from_str::<toml::Table>(&format!("v = {v}")).ok().and_then(|mut t| t.remove("v"));
        let mut out: Vec<toml::Value> = literal(&self.value).into_iter().collect();
        let text = toml::Value::String(self.value.clone());
        if out.is_empty() {
            out.push(text.clone());
        }
        if !self.value.starts_with('[') {
            let item = |v: &str| literal(v.trim()).unwrap_or_else(|| toml::Value::String(v.trim().to_string()));
            out.push(toml::Value::Array(self.value.split(',').map(item).collect()));
        }
        if !self.value.starts_with(['"', '\'']) && out[0] != text {
            out.push(text);
        }
        out
    }
}

/// A configuration read from its file (if any) with the command line's
/// settings applied, not yet checked ([`Loaded::check`]).
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: GatewayConfig,
    /// The file's path and text, to name a key's line.
    file: Option<(String, String)>,
    settings: Vec<Setting>,
}

/// Reads `file` (none: the defaults) and applies `settings` in order.
pub fn load(file: Option<&Path>, settings: &[Setting]) -> Result<Loaded, ConfigError> {
    let (mut config, file) = match file {
        Some(p) => {
            let path = p.display().to_string();
            let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
            (GatewayConfig::from_text(&path, &text)?, Some((path, text)))
        }
        None => (GatewayConfig::default(), None),
    };
    for s in settings {
        config = apply(&config, s)?;
    }
    config.resolve_icmp_source();
    let config = config.with_port_names();
    Ok(Loaded { config, file, settings: settings.to_vec() })
}

impl Loaded {
    /// Warnings for keys spelt with their old names
    /// ([`config::DEPRECATED_KEYS`]), in the file (with its line) or in a
    /// `--set`.
    pub fn deprecations(&self) -> Vec<String> {
        let mut out = self.file.as_ref().map(|(p, t)| config::deprecated_keys(p, t)).unwrap_or_default();
        for s in &self.settings {
            if let Some((old, new)) = config::DEPRECATED_KEYS.iter().find(|(old, _)| s.key == *old) {
                out.push(format!("`{}`: `{old}` is the old name of `{new}`; write `{new}`", s.given_as));
            }
        }
        out
    }

    /// Whether a setting or the file names the key.
    pub fn sets(&self, key: &str) -> bool {
        self.settings.iter().any(|s| s.key == key)
            || self.file.as_ref().is_some_and(|(_, t)| config::key_line(t, key).is_some())
    }

    /// [`GatewayConfig::check`], the error naming the flag or the file's
    /// line that set the offending key.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.config.check().map_err(|e| self.locate(e))
    }

    fn locate(&self, e: ConfigError) -> ConfigError {
        let (key, value, allowed) = match &e {
            ConfigError::Invalid { field, value, allowed } => (field.to_string(), value.clone(), allowed.to_string()),
            ConfigError::Engine(x) => (x.field.to_string(), x.value.clone(), x.allowed.to_string()),
            _ => return e,
        };
        if let Some(s) = self.settings.iter().rev().find(|s| s.key == key) {
            let unit = ["us", "ms", "s"].into_iter().find(|u| key.ends_with(&format!("_{u}"))).unwrap_or("");
            let allowed = match allowed.split_once("..=") {
                Some((lo, hi)) if lo.parse::<u64>().is_ok() && hi.parse::<u64>().is_ok() => {
                    format!("{lo}{unit}..={hi}{unit}")
                }
                _ => allowed,
            };
            return ConfigError::Flag { flag: s.given_as.clone(), value: format!("{value}{unit}"), allowed };
        }
        match &self.file {
            Some((path, text)) => match config::key_line(text, &key) {
                Some(line) => ConfigError::InFile { path: path.clone(), line, source: Box::new(e) },
                None => e,
            },
            None => e,
        }
    }
}

/// `c` with one setting applied, read as the file's value would be.
fn apply(c: &GatewayConfig, s: &Setting) -> Result<GatewayConfig, ConfigError> {
    let fail = |detail: String| ConfigError::FlagValue { flag: s.given_as.clone(), detail };
    let base = toml::Table::try_from(c).map_err(|e| fail(e.to_string()))?;
    // An old name sets its new key (the table already holds the new one).
    let key = config::DEPRECATED_KEYS.iter().find(|(old, _)| s.key == *old).map_or(s.key.as_str(), |(_, new)| new);
    let (section, name) = match key.split_once('.') {
        Some((t, k)) if config::SECTIONS.contains(&t) && !k.contains('.') => (Some(t), k),
        Some(_) => {
            return Err(fail(format!("no such key (tables: {}; see px-gateway.toml(5))", config::SECTIONS.join(", "))));
        }
        None => (None, key),
    };
    let mut first = None;
    for value in s.readings() {
        let mut t = base.clone();
        let table = match section {
            Some(sec) => match t.entry(sec).or_insert_with(|| toml::Value::Table(toml::Table::new())) {
                toml::Value::Table(table) => table,
                _ => return Err(fail(format!("`{sec}` is not a table"))),
            },
            None => &mut t,
        };
        table.insert(name.to_string(), value);
        match toml::Value::Table(t).try_into::<GatewayConfig>() {
            Ok(c) => return Ok(c),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    let e = first.map(|e| config::plain(e.message())).unwrap_or_default();
    Err(fail(format!("{:?}: {}", s.value, config::explain(&s.key, e, true))))
}

/// One key as `examples/gateway.toml` documents it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDoc {
    /// Dotted for a table's key.
    pub key: String,
    /// The comment above it, joined into one paragraph.
    pub doc: String,
    /// The value the file shows: the default, or an example for a key
    /// that has none (written commented out).
    pub value: String,
    /// Written commented out: the key has no default (absent: off).
    pub optional: bool,
}

/// Every key of [`EXAMPLE`] with its comment, in the file's order.
pub fn documented() -> Vec<KeyDoc> {
    let mut out = Vec::new();
    let (mut section, mut doc) = (String::new(), Vec::<String>::new());
    for line in EXAMPLE.lines() {
        let l = line.trim();
        let (commented, body) = match l.strip_prefix('#') {
            Some(b) => (true, b.trim()),
            None => (false, l),
        };
        if l.is_empty() {
            doc.clear();
        } else if let Some(s) = body.strip_prefix('[').and_then(|b| b.strip_suffix(']')) {
            section = s.trim().to_string();
            doc.clear();
        } else if let Some((key, rest)) =
            body.split_once('=').filter(|(k, _)| config::section_keys(&section).contains(&k.trim()))
        {
            let (value, note) = match rest.split_once(" #") {
                Some((v, n)) => (v.trim(), Some(n.trim())),
                None => (rest.trim(), None),
            };
            let mut text = doc.join(" ");
            if let Some(n) = note {
                text = if text.is_empty() { n.to_string() } else { format!("{text} ({n})") };
            }
            let key = if section.is_empty() { key.trim().to_string() } else { format!("{section}.{}", key.trim()) };
            out.push(KeyDoc { key, doc: text, value: value.to_string(), optional: commented });
            doc.clear();
        } else if commented {
            doc.push(body.to_string());
        }
    }
    out
}

/// px-gateway.toml(5): the configuration file's man page, every key from
/// [`documented`] with its default and what it does.
pub fn man_page(version: &str) -> String {
    let esc = |t: &str| t.replace('\\', "\\e").replace('-', "\\-");
    let mut out = format!(
        ".TH PX-GATEWAY.TOML 5 \"\" \"px {version}\" \"PacketExpress\"\n.SH NAME\npx\\-gateway.toml \\- configuration of px gateway\n\
         .SH SYNOPSIS\n/etc/px/\\fINAME\\fR.toml (the px\\-gateway@\\fINAME\\fR service), or \\fBpx gateway \\-\\-config\\fR \\fIFILE\\fR\n\
         .SH DESCRIPTION\nA TOML file. Keys outside a table configure the gateway; [engine] the translation engine; \
         [imtu_follow] the following of neighbours' iMTUs; [link_fault] link-fault pass-through; [dpdk] the DPDK datapath. A key absent takes its default; an unknown key is an error. \
         Durations take a unit (\"500us\", \"2s\", \"10min\") or a bare number in the unit the key's name ends with \
         (_us, _ms, _s); sizes take a unit (\"64KiB\", \"8MiB\") or a bare number of bytes. Every key can also be set on \
         the command line: \\fBpx gateway \\-\\-set\\fR \\fIKEY\\fR=\\fIVALUE\\fR (a table's key dotted: engine.max_flows). \
         \\fBpx gateway \\-\\-print\\-config\\fR prints every key with its default; \\fB\\-\\-check\\-config\\fR \\fIFILE\\fR \
         checks a file as a start would. SIGHUP reloads the file: what can change live does, anything else is refused in the log.\n"
    );
    out.push_str(".SH KEYS\n");
    let mut section = String::new();
    for k in documented() {
        let (table, key) = k.key.split_once('.').unwrap_or(("", &k.key));
        if table != section {
            section = table.to_string();
            out.push_str(&format!(".SH \"[{table}]\"\n"));
        }
        let value = if k.optional { format!("absent; e.g. {}", k.value) } else { format!("default {}", k.value) };
        out.push_str(&format!(".TP\n\\fB{}\\fR ({})\n{}\n", esc(key), esc(&value), esc(&k.doc)));
    }
    out.push_str(
        ".SH FILES\n/usr/share/doc/px/examples/gateway.toml: every key with its default.\n\
         .SH \"SEE ALSO\"\n\\fBpx\\-gateway\\fR(1), \\fBpx\\-status\\fR(1), \\fBsystemctl\\fR(1)\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(arg: &str) -> Setting {
        Setting::parse(arg).unwrap()
    }

    #[test]
    fn settings_read_values_as_the_file_does() {
        let s = [
            set("inner=300"),
            set("outer=eth0"),
            set("workers=2"),
            set("engine.merge_timeout_us=0.3ms"),
            set("engine.caravan_ports=80,443"),
            set("engine.caravan_prefixes=203.0.113.0/24"),
            set("metrics=127.0.0.1:9464"),
            set("gro_gso=false"),
            set("capture_max_bytes=1MiB"),
            set("imtu_follow.responder_port=4000"),
        ];
        let c = load(None, &s).unwrap().config;
        assert_eq!((c.inner.as_str(), c.outer.as_str(), c.workers), ("300", "eth0", 2));
        assert_eq!(c.engine.merge_timeout, std::time::Duration::from_micros(300));
        assert_eq!(c.engine.caravan_ports, [80, 443]);
        assert_eq!(c.engine.caravan_prefixes.len(), 1);
        assert_eq!(c.metrics, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!((c.gro_gso, c.capture_max_bytes), (false, 1 << 20));
        // A table's key makes the table, as in the file.
        assert_eq!(c.imtu_follow.as_ref().map(|f| (f.responder_port, f.table)), Some((4000, 30)));
        // Later settings win.
        let c = load(None, &[set("workers=2"), set("workers=3")]).unwrap().config;
        assert_eq!(c.workers, 3);
    }

    #[test]
    fn settings_errors_name_the_flag_and_say_what_is_allowed() {
        let err = |s: &[Setting]| load(None, s).and_then(|l| l.check()).unwrap_err().to_string();
        let e = err(&[set("workers=many")]);
        assert!(
            e.starts_with(
                "`--set workers`: \"many\": invalid type: string \"many\", expected a whole number (allowed: 1..=64)"
            ),
            "{e}"
        );
        let e = err(&[set("merge_timeout_us=5")]);
        assert!(e.contains("unknown field `merge_timeout_us`") && e.contains("set `engine.merge_timeout_us`"), "{e}");
        let e = err(&[set("nosuch.key=1")]);
        assert!(e.contains("no such key"), "{e}");
        let e = err(&[set("inner=a"), set("outer=b"), set("engine.merge_timeout_us=20ms")]);
        assert_eq!(e, "invalid configuration: `--set engine.merge_timeout_us` = 20000us (allowed: 0us..=10000us)");
        let w = Setting { given_as: "--workers".into(), ..set("workers=0") };
        let e = err(&[set("inner=a"), set("outer=b"), w]);
        assert_eq!(e, "invalid configuration: `--workers` = 0 (allowed: 1..=64)");
        assert!(Setting::parse("workers").unwrap_err().contains("KEY=VALUE"));
    }

    #[test]
    fn errors_after_reading_name_the_file_and_line() {
        let p = std::env::temp_dir().join(format!("px-settings-{}.toml", std::process::id()));
        std::fs::write(&p, "inner = \"a\"\nouter = \"b\"\n\n[engine]\nmax_flows = 0\n").unwrap();
        let e = load(Some(&p), &[]).unwrap().check().unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "config file {}, line 5: invalid configuration: `[engine] max_flows` = 0 (allowed: 1..=16777216)",
                p.display()
            )
        );
        // The same key from a flag: the flag.
        let e = load(Some(&p), &[set("engine.max_flows=0")]).unwrap().check().unwrap_err().to_string();
        assert!(e.contains("`--set engine.max_flows` = 0"), "{e}");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn the_man_page_has_every_key() {
        let page = man_page("0.1.0");
        assert!(page.starts_with(".TH PX-GATEWAY.TOML 5"), "{page}");
        for k in documented() {
            let key = k.key.rsplit('.').next().unwrap().replace('-', "\\-");
            assert!(page.contains(&format!("\\fB{key}\\fR")), "{key} missing");
        }
        assert!(
            page.contains(".SH KEYS") && page.contains(".SH \"[engine]\"") && page.contains(".SH \"SEE ALSO\""),
            "{page}"
        );
    }

    #[test]
    fn every_documented_key_has_its_comment() {
        let keys = documented();
        assert!(keys.len() > 30, "{keys:?}");
        for k in &keys {
            assert!(!k.doc.is_empty(), "`{}` has no comment above it in examples/gateway.toml", k.key);
        }
        let merge = keys.iter().find(|k| k.key == "engine.merge_timeout_us").unwrap();
        assert_eq!((merge.value.as_str(), merge.optional), ("500", false));
        assert!(keys.iter().any(|k| k.key == "metrics" && k.optional));
    }
}

#[cfg(test)]
mod example_tests {
    use super::*;

    /// Issue 38 item 5: `examples/gateway.toml` has every key of the
    /// configuration, each with its default (or, commented out, an example
    /// for a key that has none), and no key the configuration lacks.
    #[test]
    fn example_file_has_every_key_with_its_default() {
        let mut expected: Vec<String> = Vec::new();
        for k in config::section_keys("") {
            if config::SECTIONS.contains(k) {
                let fields = config::section_keys(k);
                assert!(!fields.is_empty(), "the table [{k}] has no keys: add it to config::section_keys");
                expected.extend(fields.iter().map(|f| format!("{k}.{f}")));
            } else {
                expected.push(k.to_string());
            }
        }
        // Old names (serde's aliases) are read, not documented.
        expected.retain(|k| !config::DEPRECATED_KEYS.iter().any(|(old, _)| k == old));
        let docs = documented();
        let mut found: Vec<String> = docs.iter().map(|d| d.key.clone()).collect();
        expected.sort();
        found.sort();
        for k in &expected {
            assert!(found.contains(k), "`{k}` is not in examples/gateway.toml (a table? add it to config::SECTIONS)");
        }
        assert_eq!(found, expected, "examples/gateway.toml lists a key twice or one the configuration lacks");
        let defaults = toml::Table::try_from(GatewayConfig::default()).unwrap();
        let default_of = |key: &str| match key.split_once('.') {
            Some((t, k)) => defaults.get(t).and_then(|t| t.get(k)).cloned(),
            None => defaults.get(key).cloned(),
        };
        for d in &docs {
            let shown: toml::Value =
                toml::from_str::<toml::Table>(&format!("v = {}", d.value)).unwrap().remove("v").unwrap();
            match (d.optional, d.key.as_str()) {
                // The ports have no default; the file shows example names.
                (false, "inner" | "outer") => {}
                (false, _) => assert_eq!(
                    Some(shown),
                    default_of(&d.key),
                    "`{}`: the file shows another value than the default",
                    d.key
                ),
                // Keys of an optional table are written as the table is.
                (true, _) => assert!(
                    default_of(&d.key).is_none() || ["imtu_follow.", "dpdk."].iter().any(|t| d.key.starts_with(t)),
                    "`{}` has a default: write it uncommented",
                    d.key
                ),
            }
        }
        // Commented out keys are keys too: the file with them read.
        let all: String = EXAMPLE
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(b)
                    if documented()
                        .iter()
                        .any(|d| d.optional && b.split_once('=').is_some_and(|(k, _)| d.key.ends_with(k.trim()))) =>
                {
                    b
                }
                Some(b) if config::SECTIONS.iter().any(|t| b.starts_with(&format!("[{t}]"))) => b,
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let full = GatewayConfig::from_toml(&all).unwrap();
        full.check().unwrap();
        assert!(full.imtu_follow.is_some() && full.capture.is_some() && full.control_socket.is_some());
        // The [dpdk] table shows its defaults (the devices, EAL arguments
        // and cores are examples).
        let d = full.dpdk.expect("the [dpdk] table");
        let examples = config::DpdkConfig {
            inner: d.inner.clone(),
            outer: d.outer.clone(),
            eal: d.eal.clone(),
            cores: d.cores.clone(),
            ..Default::default()
        };
        assert_eq!(d, examples, "[dpdk] shows another value than a default");
    }

    /// The `a..=b` ranges of `[engine]` keys in [`config::ALLOWED`] are the
    /// engine's own checks: each end is taken, one past it refused.
    #[test]
    fn engine_ranges_are_the_engines_checks() {
        for (key, allowed) in config::ALLOWED {
            let (Some(name), Some((lo, hi))) = (key.strip_prefix("engine."), allowed.split_once("..=")) else {
                continue;
            };
            let (lo, hi): (u64, u64) = (lo.parse().unwrap(), hi.parse().unwrap());
            let with =
                |v: u64| GatewayConfig::from_toml(&format!("inner = \"a\"\nouter = \"b\"\n[engine]\n{name} = {v}\n"));
            for ok in [lo, hi] {
                with(ok).unwrap().check().unwrap_or_else(|e| panic!("{key} = {ok}: {e}"));
            }
            for bad in [lo.checked_sub(1), hi.checked_add(1)].into_iter().flatten() {
                // Refused when read (the type cannot hold it) or when checked.
                if let Ok(c) = with(bad) {
                    let e = c.check().expect_err(&format!("{key} = {bad} passed")).to_string();
                    assert!(e.contains(name), "{key} = {bad}: {e}");
                }
            }
        }
    }
}
