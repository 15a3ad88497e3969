//! The gateway's configuration: a TOML file with every option (the `px`
//! command line overrides some with flags). The `[engine]` table is the
//! engine's own [`px_gateway::Config`], read as it is. Every refusal names
//! the field and what is allowed.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use super::datapath::keys::{DatapathKind, DpdkConfig};

/// The source of the ICMPv4 errors the gateway sends when the
/// configuration names none: RFC 7600's IPv4 "dummy address", meant for a
/// node with no IPv4 address of its own to source ICMP errors from (Linux
/// uses it so, `INADDR_DUMMY`). A bump in the wire owns no address, yet
/// its "fragmentation needed" is what tells a sender inside that a
/// datagram with DF (QUIC, DF UDP) was too big for the outside: without
/// one it is lost with no signal. `"0.0.0.0"` turns the errors off.
pub const DEFAULT_ICMP_SOURCE_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 0, 8);

/// The whole configuration of a gateway (see `examples/gateway.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Interface toward the b-network (large MTU). With the DPDK datapath
    /// and a `[dpdk]` table, a name for the port in logs and `px status`
    /// (default: the device's name, `[dpdk] inner` up to its first comma).
    pub inner: String,
    /// Interface toward the legacy network (with DPDK: a name, as `inner`).
    pub outer: String,
    /// What carries the frames: `"af_packet"` (Linux interfaces through
    /// packet sockets) or `"dpdk"` (DPDK ports: the `[dpdk]` table's
    /// devices, or without one DPDK's AF_PACKET driver on `inner` and
    /// `outer`).
    pub datapath: DatapathKind,
    /// Inner MTU; 0 means "the inner interface's MTU".
    pub imtu: u16,
    /// Outer MTU; 0 means "the outer interface's MTU".
    pub emtu: u16,
    /// Worker threads, each with its own engine and sockets.
    pub workers: usize,
    /// Address of the Prometheus metrics endpoint (e.g. "127.0.0.1:9464").
    pub metrics: Option<SocketAddr>,
    /// Seconds between one-line summaries in the log; 0 turns them off.
    #[serde(with = "px_gateway::units::secs")]
    pub log_interval_s: u64,
    /// Frames per receive/send batch.
    pub batch: usize,
    /// The kernel fast path (`docs/fast-path.md`): `"on"`, established bulk
    /// TCP flows move to a TC program on the ports that re-cuts their GRO
    /// super-packets in the kernel, the engine deciding which and when;
    /// `"off"`, every packet crosses user space. Reloadable (while the
    /// program is attached: it is, whenever this build has it and the
    /// kernel takes it). Its old name `offload` is still read, with a
    /// warning ([`DEPRECATED_KEYS`]).
    #[serde(alias = "offload")]
    pub fast_path: FastPathMode,
    /// Use kernel GRO on receive and GSO on send (PACKET_VNET_HDR); off,
    /// every frame is handled and cut in software (and the fast path,
    /// which re-cuts GRO super-packets, has nothing to carry).
    pub gro_gso: bool,
    /// Receive through a memory-mapped ring (TPACKET_V2) instead of
    /// `recvmmsg` into buffers. Off by default: in `px lab demo` (4 rounds,
    /// twice each) recvmmsg carried 8.3–9.7 Gbps through the gateway and
    /// the ring 6.4–7.2, although px-io measured less CPU per frame with the
    /// ring; see the README.
    pub rx_ring: bool,
    /// After the ports last had frames, a worker keeps looking at its
    /// sockets without sleeping for this long before it sleeps in `poll`
    /// (AF_PACKET only: DPDK polls always). A sleeping worker pays a
    /// thread wake-up on each frame that ends a quiet spell, about 50 µs
    /// on a VM (`px lab rr`, docs/io.md); spinning costs CPU while
    /// traffic comes and nothing once it has stopped this long. 0: off.
    #[serde(with = "px_gateway::units::duration_us")]
    pub busy_poll_us: std::time::Duration,
    /// Put the ports in promiscuous mode (a bump in the wire sees frames
    /// addressed to the hosts behind it).
    pub promiscuous: bool,
    /// Receive and send buffer of each packet socket, in bytes as the
    /// kernel accounts them (`SO_RCVBUFFORCE` / `SO_SNDBUFFORCE`, past
    /// `net.core.rmem_max`; a frame counts with the kernel's overhead,
    /// about 2.3 KiB for 1500 bytes). What arrives while a worker is not
    /// running waits here; a full buffer drops frames, counted in
    /// `px_gateway_socket_drops_total`. The 8 MiB default holds about
    /// 3 500 frames of 1500 bytes.
    #[serde(with = "px_gateway::units::bytes_usize")]
    pub socket_buffer_bytes: usize,
    /// Write what the ports receive and send to this pcapng file (see
    /// [`capture`](super::capture)); absent: no capture.
    pub capture: Option<PathBuf>,
    /// Largest size of one capture file; then it rotates (FILE.1, ...).
    #[serde(with = "px_gateway::units::bytes")]
    pub capture_max_bytes: u64,
    /// Capture files kept, the current one included.
    pub capture_files: u32,
    /// Bytes captured of each frame.
    #[serde(with = "px_gateway::units::bytes")]
    pub capture_snaplen: u32,
    /// The control socket `px status` asks (see
    /// [`control`](super::control)); absent: `gateway-net<namespace>-<outer>-<inner>.sock`
    /// in `/run/px` (systemd: `$RUNTIME_DIRECTORY`).
    pub control_socket: Option<PathBuf>,
    /// The translation engine's options (the `[engine]` table; what the
    /// gateway decides itself, MTUs, GSO and hash seed, is set by
    /// [`GatewayConfig::engine_config`]).
    pub engine: px_gateway::Config,
    /// Link-fault pass-through (the `[link_fault]` table).
    pub link_fault: LinkFaultConfig,
    /// Follow neighbours' advertised iMTUs from a kernel table, verify and
    /// use them (the `[imtu_follow]` table, issue 30; none: every outside
    /// destination is translated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imtu_follow: Option<ImtuFollowConfig>,
    /// The DPDK datapath's ports and settings (the `[dpdk]` table; used
    /// with `datapath = "dpdk"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dpdk: Option<DpdkConfig>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            inner: String::new(),
            outer: String::new(),
            datapath: DatapathKind::AfPacket,
            imtu: 0,
            emtu: 0,
            workers: 1,
            metrics: None,
            log_interval_s: 10,
            batch: 64,
            fast_path: FastPathMode::Off,
            gro_gso: true,
            rx_ring: false,
            busy_poll_us: std::time::Duration::ZERO,
            promiscuous: true,
            socket_buffer_bytes: 8 << 20,
            capture: None,
            capture_max_bytes: 64 << 20,
            capture_files: 4,
            capture_snaplen: 262_144,
            control_socket: None,
            engine: px_gateway::Config::default(),
            link_fault: LinkFaultConfig::default(),
            imtu_follow: None,
            dpdk: None,
        }
    }
}

/// The `[link_fault]` table: what the gateway does when a port loses its
/// carrier (docs/operations.md, "Link faults").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinkFaultConfig {
    /// When one port loses its carrier, take the other port down, so that
    /// the router behind it sees its link fail and moves traffic to another
    /// path at once; bring it up again when the carrier is back. Off: the
    /// other port stays up (and the loss is only logged).
    pub pass_through: bool,
    /// How long the carrier must be back before the other port comes up
    /// again (a flapping link does not flap both), milliseconds.
    #[serde(with = "px_gateway::units::millis")]
    pub restore_after_ms: u64,
}

impl Default for LinkFaultConfig {
    fn default() -> Self {
        LinkFaultConfig { pass_through: false, restore_after_ms: 1000 }
    }
}

/// The `[imtu_follow]` table of the gateway's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImtuFollowConfig {
    /// Kernel routing table the routing daemon writes the advertised
    /// iMTUs to (routes with an `mtu` metric).
    pub table: u32,
    /// UDP port of the neighbours' `px fpmtud` responders.
    pub responder_port: u16,
    /// The responder's address: the prefix's first address plus this.
    pub responder_host: u32,
    /// Seconds between two measurements of a verified prefix.
    #[serde(with = "px_gateway::units::secs")]
    pub reverify_s: u64,
    /// Most prefixes held.
    pub max_prefixes: usize,
    /// Bound on one measurement, milliseconds.
    #[serde(with = "px_gateway::units::millis")]
    pub probe_timeout_ms: u64,
    /// The kernel routing table the gateway host forwards by (254: main),
    /// whose more-specific routes carve exclusions out of verified
    /// prefixes.
    pub forwarding_table: u32,
}

impl Default for ImtuFollowConfig {
    fn default() -> Self {
        ImtuFollowConfig {
            table: 30,
            responder_port: 9999,
            responder_host: 1,
            reverify_s: 300,
            max_prefixes: 4096,
            probe_timeout_ms: 2000,
            forwarding_table: 254,
        }
    }
}

impl ImtuFollowConfig {
    /// Checks the ranges, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // 253..=255 are the kernel's default, main and local tables: their
        // routes' MTUs are not advertisements.
        if self.table == 0 || (253..=255).contains(&self.table) {
            return Err(invalid("imtu_follow.table", self.table));
        }
        in_range("imtu_follow.responder_port", self.responder_port)?;
        in_range("imtu_follow.reverify_s", self.reverify_s)?;
        in_range("imtu_follow.max_prefixes", self.max_prefixes as u64)?;
        in_range("imtu_follow.probe_timeout_ms", self.probe_timeout_ms)?;
        if self.forwarding_table == 0 || self.forwarding_table == self.table {
            return Err(invalid("imtu_follow.forwarding_table", self.forwarding_table));
        }
        Ok(())
    }
}

/// See [`GatewayConfig::fast_path`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum FastPathMode {
    #[default]
    Off,
    On,
}

impl<'de> Deserialize<'de> for FastPathMode {
    /// `"off"` or `"on"`; a boolean (what `offload`, the key's old name,
    /// meant before it selected the fast path: GRO/GSO, now `gro_gso`) is
    /// refused with that said.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Flag(bool),
        }
        match Raw::deserialize(d)? {
            Raw::Text(t) if t == "off" => Ok(FastPathMode::Off),
            Raw::Text(t) if t == "on" => Ok(FastPathMode::On),
            Raw::Text(t) => Err(serde::de::Error::custom(format!(
                "`fast_path` = {t:?}: allowed \"off\" or \"on\" (the kernel fast path)"
            ))),
            Raw::Flag(b) => Err(serde::de::Error::custom(format!(
                "`fast_path` = {b}: the kernel fast path is \"off\" or \"on\" (a boolean was what `offload` meant before it named the fast path); GRO/GSO on the ports is `gro_gso = {b}`"
            ))),
        }
    }
}

impl std::str::FromStr for FastPathMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(FastPathMode::Off),
            "on" => Ok(FastPathMode::On),
            _ => Err(format!("{s:?}: allowed \"off\" or \"on\"")),
        }
    }
}

impl std::fmt::Display for FastPathMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FastPathMode::Off => "off",
            FastPathMode::On => "on",
        })
    }
}

/// What each key allows, in the key's own unit, as every error says it:
/// [`GatewayConfig::validate`] checks the `a..=b` ranges from this table
/// (so a message cannot drift from the check), and a value the type cannot
/// even hold (`imtu = 70000`, `log_interval_s = -1`) is refused with the
/// same text. The `engine.` ranges are the engine's own checks
/// ([`px_gateway::Config::validate`]) in the file's units; a test holds
/// the two together.
pub const ALLOWED: &[(&str, &str)] = &[
    ("inner", "an interface name of 1..=15 bytes"),
    ("outer", "an interface name of 1..=15 bytes"),
    ("imtu", "0 (the inner interface's MTU) or 1280..=65535"),
    ("emtu", "0 (the outer interface's MTU) or 576..=65535, at most imtu"),
    ("workers", "1..=64"),
    ("batch", "1..=1024"),
    ("socket_buffer_bytes", "65536..=1073741824"),
    ("busy_poll_us", "0..=10000"),
    ("log_interval_s", "0..=86400"),
    ("capture_max_bytes", "65536..=1099511627776"),
    ("capture_files", "1..=1000"),
    ("capture_snaplen", "64..=262144"),
    ("engine.merge_timeout_us", "0..=10000"),
    ("engine.max_flows", "1..=16777216"),
    ("engine.max_held_bytes", "65536..=17179869184"),
    ("engine.flow_idle_timeout_s", "1..=86400"),
    ("engine.bulk_after", "0..=64"),
    ("engine.pmtu_cache_size", "1..=1048576"),
    ("engine.pmtu_lifetime_s", "1..=86400"),
    ("engine.icmp_rate_per_sec", "0..=1000000"),
    ("engine.fast_path_after", "0..=4294967295"),
    ("engine.caravan_dscp", "1..=63"),
    ("link_fault.restore_after_ms", "0..=600000"),
    ("imtu_follow.table", "1..=252 or 256..=4294967295"),
    ("imtu_follow.responder_port", "1..=65535"),
    ("imtu_follow.responder_host", "0..=4294967295"),
    ("imtu_follow.reverify_s", "10..=86400"),
    ("imtu_follow.max_prefixes", "1..=1000000"),
    ("imtu_follow.probe_timeout_ms", "100..=30000"),
    ("imtu_follow.forwarding_table", "1..=4294967295, not imtu_follow.table"),
    ("datapath", "\"af_packet\" or \"dpdk\""),
    ("dpdk.inner", "a DPDK device: a PCI address, or a virtual device and its arguments (net_memif0,socket=...)"),
    ("dpdk.outer", "a DPDK device other than `[dpdk] inner`"),
    ("dpdk.cores", "one CPU per worker, or none"),
    ("dpdk.rx_descriptors", "64..=16384"),
    ("dpdk.tx_descriptors", "64..=16384"),
    ("dpdk.mbufs", "0 (sized from the queues) or 1024..=16777216"),
];

/// What `key` (dotted: `engine.max_flows`) allows, from [`ALLOWED`].
pub fn allowed(key: &str) -> Option<&'static str> {
    ALLOWED.iter().find(|(k, _)| *k == key).map(|(_, a)| *a)
}

/// The error for `key` = `value`, with what [`ALLOWED`] says of it.
fn invalid(key: &'static str, value: impl ToString) -> ConfigError {
    ConfigError::Invalid {
        field: key,
        value: value.to_string(),
        allowed: allowed(key).unwrap_or("(see the documentation)"),
    }
}

/// Checks `value` against the `a..=b` range [`ALLOWED`] gives `key`.
fn in_range(key: &'static str, value: impl Into<u64>) -> Result<(), ConfigError> {
    let value = value.into();
    let range = allowed(key).and_then(|a| {
        let (lo, hi) = a.split_once("..=")?;
        Some(lo.parse::<u64>().ok()?..=hi.parse::<u64>().ok()?)
    });
    match range {
        Some(r) if r.contains(&value) => Ok(()),
        _ => Err(invalid(key, value)),
    }
}

/// The keys of one table of the file, from the struct that reads it
/// (`""`: the top level). A section added to [`GatewayConfig`] is added
/// here too (a test fails until it is): errors use this to say where a
/// misplaced key belongs, and the test of `examples/gateway.toml` to see
/// that every key is there.
pub fn section_keys(section: &str) -> &'static [&'static str] {
    match section {
        "" => struct_fields::<GatewayConfig>(),
        "engine" => struct_fields::<px_gateway::Config>(),
        "imtu_follow" => struct_fields::<ImtuFollowConfig>(),
        "link_fault" => struct_fields::<LinkFaultConfig>(),
        "dpdk" => struct_fields::<DpdkConfig>(),
        _ => &[],
    }
}

/// The tables of the file besides the top level.
pub const SECTIONS: &[&str] = &["engine", "imtu_follow", "dpdk", "link_fault"];

/// The field names serde reads for `T` (with their `rename`s): a
/// deserializer that only asks.
fn struct_fields<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{Error, Visitor, value::Error as E};
    struct Ask<'a>(&'a mut &'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for Ask<'_> {
        type Error = E;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, E> {
            Err(E::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, E> {
            *self.0 = fields;
            Err(E::custom("asked"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Ask(&mut fields));
    fields
}

/// A configuration the gateway refuses.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    /// The file is not TOML, or not a configuration (an unknown key, a
    /// value of the wrong type): the key and line, and what was expected.
    #[error("config file {path}: {detail}")]
    Parse { path: String, detail: String },
    /// The same for TOML text that came from no file
    /// ([`GatewayConfig::from_toml`]).
    #[error("{0}")]
    Toml(String),
    /// A value outside what the gateway allows (`field`: the key, dotted
    /// for a table's: `engine.max_flows`).
    #[error("invalid configuration: `{}` = {value} (allowed: {allowed})", written(field))]
    Invalid { field: &'static str, value: String, allowed: &'static str },
    /// An error about a key the file sets, found after the file was read
    /// (a range, the engine's checks): the file and the key's line.
    #[error("config file {path}, line {line}: {source}")]
    InFile { path: String, line: usize, source: Box<ConfigError> },
    /// A value given on the command line (`--workers 0`, `--set
    /// workers=0`), named as the user wrote it, in the key's unit.
    #[error("invalid configuration: `{flag}` = {value} (allowed: {allowed})")]
    Flag { flag: String, value: String, allowed: String },
    /// A command-line value its key cannot take at all (a word for a
    /// number, an unknown key).
    #[error("`{flag}`: {detail}")]
    FlagValue { flag: String, detail: String },
    /// The engine's own checks refused its part.
    #[error(transparent)]
    Engine(#[from] px_gateway::ConfigError),
}

/// Top-level keys a reload may change (besides the `[engine]` keys the
/// engine takes live). Ports, workers, MTUs, batch, GRO/GSO, the receive
/// ring, the socket buffers, the metrics address and the capture are set up
/// at start.
pub const LIVE_KEYS: &[&str] = &["log_interval_s", "fast_path"];

/// Keys renamed, still read under their old name with a warning
/// ([`deprecated_keys`]): (old, new).
pub const DEPRECATED_KEYS: &[(&str, &str)] =
    &[("offload", "fast_path"), ("engine.offload_after", "engine.fast_path_after")];

/// What a configuration's `text` (the file `path`) spells with an old key
/// name ([`DEPRECATED_KEYS`]): one warning per key, with its line.
pub fn deprecated_keys(path: &str, text: &str) -> Vec<String> {
    DEPRECATED_KEYS
        .iter()
        .filter_map(|(old, new)| {
            let line = key_line(text, old)?;
            Some(format!(
                "{path}:{line}: `{old}` is the old name of `{new}` (same values); it is still read, but will be refused in a later version: write `{new}`"
            ))
        })
        .collect()
}

/// One key that differs between two configurations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub key: String,
    pub old: String,
    pub new: String,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} -> {}", self.key, self.old, self.new)
    }
}

/// Why a reload was not applied (the running configuration stays).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The new configuration is invalid.
    #[error("{0}")]
    Invalid(ConfigError),
    /// It changes a key that is set up at start.
    #[error("`{}` cannot change while running ({} -> {}); restart the gateway to change it", .0.key, .0.old, .0.new)]
    Fixed(Change),
    /// It changes an engine key that is fixed at start.
    #[error("{0}; restart the gateway to change it")]
    Engine(ConfigError),
}

impl From<ConfigError> for ReloadError {
    fn from(e: ConfigError) -> Self {
        ReloadError::Invalid(e)
    }
}

impl GatewayConfig {
    /// The configuration key that names port `name` (`inner` or `outer`).
    pub(crate) fn key_of(&self, name: &str) -> &'static str {
        if name == self.inner { "inner" } else { "outer" }
    }

    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<GatewayConfig, ConfigError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: p.clone(), source })?;
        Self::from_text(&p, &text)
    }

    /// Reads the TOML text of the file at `path` (named in errors).
    pub fn from_text(path: &str, text: &str) -> Result<GatewayConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.to_string(), detail: toml_error(text, &e) })
    }

    /// Reads TOML text.
    pub fn from_toml(text: &str) -> Result<GatewayConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Toml(toml_error(text, &e)))
    }

    /// With the DPDK datapath and a `[dpdk]` table, ports not named at the
    /// top level take their devices' names (`net_memif0`, a PCI address).
    pub fn with_port_names(mut self) -> GatewayConfig {
        if let (DatapathKind::Dpdk, Some(d)) = (self.datapath, &self.dpdk) {
            for (name, spec) in [(&mut self.inner, &d.inner), (&mut self.outer, &d.outer)] {
                if name.is_empty() {
                    *name = super::datapath::keys::device(spec).name.to_string();
                }
            }
        }
        self
    }

    /// Checks what the engine does not check itself.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_names()?;
        if self.datapath == DatapathKind::Dpdk {
            self.validate_dpdk()?;
        }
        in_range("workers", self.workers as u64)?;
        in_range("batch", self.batch as u64)?;
        in_range("socket_buffer_bytes", self.socket_buffer_bytes as u64)?;
        in_range("busy_poll_us", self.busy_poll_us.as_micros() as u64)?;
        in_range("log_interval_s", self.log_interval_s)?;
        in_range("capture_max_bytes", self.capture_max_bytes)?;
        in_range("capture_files", self.capture_files)?;
        in_range("capture_snaplen", self.capture_snaplen)?;
        if let Some(f) = &self.imtu_follow {
            f.validate()?;
        }
        in_range("link_fault.restore_after_ms", self.link_fault.restore_after_ms)?;
        if self.link_fault.pass_through && self.datapath == DatapathKind::Dpdk {
            return Err(ConfigError::Invalid {
                field: "link_fault.pass_through",
                value: "true".into(),
                allowed: "false with datapath = \"dpdk\" (its ports are not the kernel's to take down)",
            });
        }
        Ok(())
    }

    /// The two ports' names: interfaces (AF_PACKET, and DPDK without a
    /// `[dpdk]` table, which runs on them), or names of DPDK devices.
    fn validate_names(&self) -> Result<(), ConfigError> {
        let devices = self.datapath == DatapathKind::Dpdk && self.dpdk.is_some();
        for (key, name) in [("inner", &self.inner), ("outer", &self.outer)] {
            let plain = name.bytes().all(|b| b.is_ascii_alphanumeric() || b".:_-".contains(&b));
            if devices && (name.is_empty() || name.len() > 32 || !plain) {
                let allowed = "a name of 1..=32 letters, digits, '.', ':', '_' or '-' (default: the device's)";
                return Err(ConfigError::Invalid { field: key, value: format!("{name:?}"), allowed });
            }
            if !devices && (name.is_empty() || name.len() > 15) {
                return Err(invalid(key, format!("{name:?}")));
            }
        }
        if self.inner == self.outer {
            return Err(ConfigError::Invalid {
                field: "outer",
                value: format!("{:?}", self.outer),
                allowed: "an interface other than `inner`",
            });
        }
        Ok(())
    }

    /// What `datapath = "dpdk"` needs: no kernel fast path, and a
    /// `[dpdk]` table (if any) naming two devices.
    fn validate_dpdk(&self) -> Result<(), ConfigError> {
        use super::datapath::keys::device;
        if self.fast_path == FastPathMode::On {
            let allowed = "\"off\" with datapath = \"dpdk\" (the kernel fast path runs on Linux interfaces)";
            return Err(ConfigError::Invalid { field: "fast_path", value: "\"on\"".into(), allowed });
        }
        let Some(d) = &self.dpdk else { return Ok(()) };
        for (key, spec) in [("dpdk.inner", &d.inner), ("dpdk.outer", &d.outer)] {
            if device(spec).name.is_empty() {
                return Err(invalid(key, format!("{spec:?}")));
            }
        }
        if device(&d.inner).name == device(&d.outer).name {
            return Err(invalid("dpdk.outer", format!("{:?}", d.outer)));
        }
        if !d.cores.is_empty() && d.cores.len() != self.workers {
            return Err(invalid("dpdk.cores", format!("{:?}", d.cores)));
        }
        in_range("dpdk.rx_descriptors", d.rx_descriptors)?;
        in_range("dpdk.tx_descriptors", d.tx_descriptors)?;
        if d.mbufs != 0 && !(1024..=1 << 24).contains(&d.mbufs) {
            return Err(invalid("dpdk.mbufs", d.mbufs));
        }
        Ok(())
    }

    /// Everything [`run`](super::run) checks before it touches a port:
    /// [`GatewayConfig::validate`], then the engine's own checks with the
    /// MTUs as configured (an MTU of 0, "the interface's", is checked with
    /// the engine's default in its place; the port's real MTU is checked
    /// at start).
    pub fn check(&self) -> Result<(), ConfigError> {
        self.validate()?;
        let d = px_gateway::Config::default();
        let imtu = if self.imtu == 0 { d.imtu.max(self.emtu) } else { self.imtu };
        let emtu = if self.emtu == 0 { d.emtu.min(imtu) } else { self.emtu };
        self.engine_config(imtu, emtu, 0)?;
        Ok(())
    }

    /// The capture to run, if any.
    pub fn capture_spec(&self) -> Option<super::capture::CaptureSpec> {
        Some(super::capture::CaptureSpec {
            path: self.capture.clone()?,
            max_bytes: self.capture_max_bytes,
            files: self.capture_files,
            snaplen: self.capture_snaplen,
            inner: self.inner.clone(),
            outer: self.outer.clone(),
        })
    }

    /// What differs from `self` in `new`, key by key as the file names
    /// them (`engine.merge_timeout_us`), sorted by key.
    pub fn changes(&self, new: &GatewayConfig) -> Vec<Change> {
        fn walk(prefix: &str, old: Option<&toml::Value>, new: Option<&toml::Value>, out: &mut Vec<Change>) {
            match (old, new) {
                (Some(toml::Value::Table(a)), Some(toml::Value::Table(b))) => {
                    let mut keys: Vec<&String> = a.keys().collect();
                    keys.extend(b.keys().filter(|k| !a.contains_key(*k)));
                    for k in keys {
                        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                        walk(&key, a.get(k), b.get(k), out);
                    }
                }
                (a, b) if a != b => {
                    let show = |v: Option<&toml::Value>| v.map_or("(none)".to_string(), |v| v.to_string());
                    out.push(Change { key: prefix.to_string(), old: show(a), new: show(b) });
                }
                _ => {}
            }
        }
        let value = |c: &GatewayConfig| toml::Value::try_from(c).ok();
        let mut out = Vec::new();
        walk("", value(self).as_ref(), value(new).as_ref(), &mut out);
        out
    }

    /// Whether a gateway running `self` (its engines on `running`) can
    /// take `new` by a reload: `new` passes [`GatewayConfig::check`], and
    /// changes only keys in [`LIVE_KEYS`] and engine keys that
    /// [`px_gateway::Config::live_change`] accepts. Returns what changes
    /// and the engine configuration to hand the workers.
    pub fn reload(
        &self,
        new: &GatewayConfig,
        running: &px_gateway::Config,
    ) -> Result<(Vec<Change>, px_gateway::Config), ReloadError> {
        new.check().map_err(ReloadError::Invalid)?;
        let changes = self.changes(new);
        if let Some(c) = changes.iter().find(|c| !c.key.starts_with("engine.") && !LIVE_KEYS.contains(&c.key.as_str()))
        {
            return Err(ReloadError::Fixed(c.clone()));
        }
        let mut engine = new.engine_config(running.imtu, running.emtu, running.hash_seed)?;
        // Which ports cut GSO frames is decided at start with the datapath
        // (`gro_gso`, fixed, and what the ports can do).
        (engine.inner_gso, engine.outer_gso) = (running.inner_gso, running.outer_gso);
        engine.outer_link_mtu = running.outer_link_mtu;
        running.live_change(&engine).map_err(|e| ReloadError::Engine(e.into()))?;
        Ok((changes, engine))
    }

    /// Fills in the default ICMPv4 source ([`DEFAULT_ICMP_SOURCE_V4`])
    /// where none is configured, so that what is printed is what runs.
    pub fn resolve_icmp_source(&mut self) {
        self.engine.icmp_source_v4.get_or_insert(DEFAULT_ICMP_SOURCE_V4);
    }

    /// The ICMP error sources the engine runs with: the default for IPv4
    /// when none is configured, none for an unspecified address
    /// (`0.0.0.0`, `::`).
    pub fn icmp_sources(&self) -> (Option<Ipv4Addr>, Option<std::net::Ipv6Addr>) {
        let v4 = self.engine.icmp_source_v4.or(Some(DEFAULT_ICMP_SOURCE_V4)).filter(|a| !a.is_unspecified());
        (v4, self.engine.icmp_source_v6.filter(|a| !a.is_unspecified()))
    }

    /// What the operator must hear about ICMP errors, at start and from
    /// `--check-config`: where they come from, and loudly, which family
    /// gets none (its large DF packets from inside are lost without a
    /// signal, at WARN).
    pub fn icmp_notice(&self) -> Vec<(tracing::Level, String)> {
        let (v4, v6) = self.icmp_sources();
        let mut out = Vec::new();
        match (v4, self.engine.icmp_source_v4) {
            (Some(a), _) if a == DEFAULT_ICMP_SOURCE_V4 => out.push((tracing::Level::INFO, format!(
                "ICMPv4 errors (\"fragmentation needed\") come from {a}, the default (RFC 7600's dummy address); set [engine] icmp_source_v4 to an address of your network, or \"0.0.0.0\" for none"
            ))),
            (Some(a), _) => {
                out.push((tracing::Level::INFO, format!("ICMPv4 errors (\"fragmentation needed\") come from {a}")))
            }
            (None, _) => out.push((
                tracing::Level::WARN,
                "ICMPv4 errors are off (icmp_source_v4 = \"0.0.0.0\"): IPv4 packets with DF from inside larger than the outer MTU (QUIC, DF UDP) are dropped without \"fragmentation needed\", and their senders never learn why".to_string(),
            )),
        }
        match v6 {
            Some(a) => out.push((tracing::Level::INFO, format!("ICMPv6 errors (\"packet too big\") come from {a}"))),
            None => out.push((
                tracing::Level::WARN,
                "no ICMPv6 source ([engine] icmp_source_v6): IPv6 packets from inside larger than the outer MTU (QUIC, any UDP) are dropped without \"packet too big\", and their senders never learn the path MTU; set icmp_source_v6 to an address of your network (there is no dummy address for IPv6)".to_string(),
            )),
        }
        out
    }

    /// The engine configuration, with the MTUs resolved.
    pub fn engine_config(&self, imtu: u16, emtu: u16, seed: u64) -> Result<px_gateway::Config, ConfigError> {
        let (icmp_source_v4, icmp_source_v6) = self.icmp_sources();
        let c = px_gateway::Config {
            imtu,
            emtu,
            inner_gso: self.gro_gso,
            outer_gso: self.gro_gso,
            fast_path: self.fast_path == FastPathMode::On,
            hash_seed: seed,
            icmp_source_v4,
            icmp_source_v6,
            ..self.engine.clone()
        };
        c.validate().map_err(|e| self.as_written(e))?;
        Ok(c)
    }

    /// An engine error as the file names it: `[engine] merge_timeout_us`
    /// = 20000 (allowed 0..=10000), in the key's own unit, not the
    /// engine's field name and a `Duration`.
    pub fn as_written(&self, e: px_gateway::ConfigError) -> ConfigError {
        let c = &self.engine;
        let (key, value) = match e.field {
            "merge_timeout" => ("engine.merge_timeout_us", c.merge_timeout.as_micros().to_string()),
            "flow_idle_timeout" => ("engine.flow_idle_timeout_s", c.flow_idle_timeout.as_secs().to_string()),
            "pmtu_lifetime" => ("engine.pmtu_lifetime_s", c.pmtu_lifetime.as_secs().to_string()),
            field => match ALLOWED.iter().find(|(k, _)| k.strip_prefix("engine.") == Some(field)) {
                Some((k, _)) => (*k, e.value),
                // The MTUs: the top-level keys (or the ports' own MTUs).
                None => return ConfigError::Engine(e),
            },
        };
        invalid(key, value)
    }
}

/// A key as the file writes it: `[engine] max_flows` for `engine.max_flows`.
pub fn written(key: &str) -> String {
    match key.split_once('.') {
        Some((section, k)) => format!("[{section}] {k}"),
        None => key.to_string(),
    }
}

/// A TOML error told as the key the user wrote: the key and section at
/// the error's position in `text`, Rust's type names replaced by what to
/// write, the key's allowed values, and for a key in the wrong table,
/// the table it belongs to.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let what = plain(e.message());
    let Some(span) = e.span() else { return what };
    let before = &text[..span.start.min(text.len())];
    let line_no = before.matches('\n').count() + 1;
    let line = text.lines().nth(line_no - 1).unwrap_or_default();
    let section = before
        .lines()
        .rev()
        .map(str::trim)
        .find_map(|l| l.strip_prefix('[').and_then(|l| l.strip_suffix(']')))
        .unwrap_or_default();
    match line.split_once('=') {
        Some((key, _)) if !line.trim_start().starts_with('[') => {
            let key = key.trim();
            let dotted = if section.is_empty() { key.to_string() } else { format!("{section}.{key}") };
            format!("`{}` (line {line_no}): {}", written(&dotted), explain(&dotted, what, false))
        }
        _ => format!("line {line_no}: {what}"),
    }
}

/// A deserializer's message about `key` (dotted) made plain: what to
/// write instead of a Rust type, what the key allows, where a key of
/// another table belongs (`cli`: said as `--set` takes the key).
pub(crate) fn explain(key: &str, what: String, cli: bool) -> String {
    let (section, name) = key.rsplit_once('.').unwrap_or(("", key));
    if what.starts_with("unknown field") {
        let home = std::iter::once("")
            .chain(SECTIONS.iter().copied())
            .find(|s| *s != section && section_keys(s).contains(&name));
        return match (home, cli) {
            (Some(""), false) => format!("{what}; `{name}` is a top-level key: put it before the first [table]"),
            (Some(s), false) => format!("{what}; `{name}` is a key of the [{s}] table: put it under `[{s}]`"),
            (Some(""), true) => format!("{what}; `{name}` is a top-level key: set `{name}`"),
            (Some(s), true) => format!("{what}; `{name}` is a key of the [{s}] table: set `{s}.{name}`"),
            (None, _) => what,
        };
    }
    match allowed(key) {
        Some(a) => format!("{what} (allowed: {a})"),
        None => what,
    }
}

/// A serde message with Rust's type names replaced by what to write.
pub(crate) fn plain(message: &str) -> String {
    let mut what = message.trim_end().to_string();
    for t in ["usize", "u64", "u32", "u16", "u8", "i64", "i32"] {
        what = what.replace(&format!("expected {t}"), "expected a whole number");
    }
    what.replace("expected a boolean", "expected true or false")
}

/// The line of `text` that sets `key` (dotted: `engine.max_flows`), if any.
pub fn key_line(text: &str, key: &str) -> Option<usize> {
    let (section, name) = key.rsplit_once('.').unwrap_or(("", key));
    let mut current = "";
    for (n, line) in text.lines().enumerate() {
        let l = line.trim();
        if let Some(s) = l.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = s.trim();
        } else if current == section && l.split_once('=').is_some_and(|(k, _)| k.trim() == name) {
            return Some(n + 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Errors name the key as the file writes it, in its unit, and say
    /// what to write instead of a Rust type.
    #[test]
    fn errors_name_the_key_as_written() {
        let c = GatewayConfig::from_toml("inner = \"a\"\nouter = \"b\"\n[engine]\nmerge_timeout_us = 20000\n").unwrap();
        let e = c.check().unwrap_err().to_string();
        assert_eq!(e, "invalid configuration: `[engine] merge_timeout_us` = 20000 (allowed: 0..=10000)");
        let e = GatewayConfig::from_toml("inner = \"a\"\nworkers = \"two\"\n").unwrap_err().to_string();
        assert!(e.starts_with("`workers` (line 2): invalid type: string \"two\", expected a whole number"), "{e}");
        let e = GatewayConfig::from_toml("[engine]\nbulk_after = true\n").unwrap_err().to_string();
        assert!(e.starts_with("`[engine] bulk_after` (line 2):"), "{e}");
        assert!(!e.contains("u16"), "{e}");
    }

    #[test]
    fn icmpv4_errors_have_a_source_unless_turned_off_and_v6_is_warned() {
        let mut c = GatewayConfig { inner: "a".into(), outer: "b".into(), ..GatewayConfig::default() };
        let e = c.engine_config(9000, 1500, 1).unwrap();
        assert_eq!(e.icmp_source_v4, Some(DEFAULT_ICMP_SOURCE_V4));
        assert_eq!(e.icmp_source_v6, None);
        let notice = c.icmp_notice();
        assert_eq!(notice[0].0, tracing::Level::INFO);
        assert!(notice[0].1.contains("come from 192.0.0.8, the default"), "{notice:?}");
        assert_eq!(notice[1].0, tracing::Level::WARN);
        assert!(notice[1].1.starts_with("no ICMPv6 source"), "{notice:?}");
        c.engine.icmp_source_v4 = Some(Ipv4Addr::UNSPECIFIED);
        c.engine.icmp_source_v6 = Some("2001:db8::fe".parse().unwrap());
        let e = c.engine_config(9000, 1500, 1).unwrap();
        assert_eq!((e.icmp_source_v4, e.icmp_source_v6), (None, Some("2001:db8::fe".parse().unwrap())));
        let notice = c.icmp_notice();
        assert_eq!(notice[0].0, tracing::Level::WARN);
        assert!(notice[0].1.starts_with("ICMPv4 errors are off"), "{notice:?}");
        assert_eq!(notice[1].0, tracing::Level::INFO, "{notice:?}");
        let mut d = GatewayConfig::default();
        d.resolve_icmp_source();
        assert_eq!(d.engine.icmp_source_v4, Some(DEFAULT_ICMP_SOURCE_V4));
    }

    #[test]
    fn example_file_parses_and_validates() {
        let text = include_str!("../../../../examples/gateway.toml");
        let c = GatewayConfig::from_toml(text).unwrap();
        c.validate().unwrap();
        c.engine_config(9000, 1500, 1).unwrap();
        assert_eq!(c.inner, "px-in");
    }

    #[test]
    fn caravan_options_reach_the_engine() {
        let t = "inner = \"a\"\nouter = \"b\"\n[engine]\ncaravan_prefixes = [\"203.0.113.0/24\"]\ncaravan_ports = [4433]\ncaravan_dscp = 12\n";
        let e = GatewayConfig::from_toml(t).unwrap().engine_config(9000, 1500, 0).unwrap();
        assert_eq!(e.caravan_prefixes, vec!["203.0.113.0/24".parse::<px_gateway::Prefix>().unwrap()]);
        assert_eq!((e.caravan_ports.as_slice(), e.caravan_dscp), (&[4433u16][..], 12));
        let bad = "inner = \"a\"\nouter = \"b\"\n[engine]\ncaravan_prefixes = [\"203.0.113.0/40\"]\n";
        assert!(GatewayConfig::from_toml(bad).unwrap_err().to_string().contains("longer than the address"));
    }

    #[test]
    fn unknown_field_and_bad_range_are_named() {
        let e = GatewayConfig::from_toml("inner = \"a\"\nouter = \"b\"\nworkerz = 2\n").unwrap_err().to_string();
        assert!(e.contains("workerz"), "{e}");
        let c = GatewayConfig::from_toml("inner = \"a\"\nouter = \"b\"\nworkers = 0\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("`workers`") && e.contains("1..=64"), "{e}");
        for bytes in [65_535usize, (1 << 30) + 1] {
            let c = GatewayConfig::from_toml(&format!("inner = \"a\"\nouter = \"b\"\nsocket_buffer_bytes = {bytes}\n"));
            let e = c.unwrap().validate().unwrap_err().to_string();
            assert!(e.contains("`socket_buffer_bytes`") && e.contains("65536..=1073741824"), "{e}");
        }
        let c = GatewayConfig::from_toml("inner = \"a\"\nouter = \"b\"\n[engine]\nmerge_timeout_us = 50000\n").unwrap();
        let e = c.engine_config(9000, 1500, 0).unwrap_err().to_string();
        assert!(e.contains("merge_timeout"), "{e}");
        let e = GatewayConfig::from_toml("inner = 5\n").unwrap_err().to_string();
        assert!(e.contains("inner"), "{e}");
    }

    #[test]
    fn engine_table_keys_keep_their_units() {
        let t = "inner = \"a\"\nouter = \"b\"\n[engine]\nmerge_timeout_us = 300\nflow_idle_timeout_s = 7\npmtu_lifetime_s = 9\npsh = \"hold\"\n";
        let e = GatewayConfig::from_toml(t).unwrap().engine_config(9000, 1500, 0).unwrap();
        assert_eq!(e.merge_timeout, std::time::Duration::from_micros(300));
        assert_eq!(e.flow_idle_timeout, std::time::Duration::from_secs(7));
        assert_eq!(e.pmtu_lifetime, std::time::Duration::from_secs(9));
        assert_eq!(e.psh, px_gateway::PshPolicy::Hold);
        // Keys missing from the table keep the engine's defaults.
        assert_eq!(e.max_flows, px_gateway::Config::default().max_flows);
    }

    #[test]
    fn what_the_gateway_decides_is_not_an_engine_key() {
        for key in ["imtu = 9000", "emtu = 1500", "inner_gso = true", "hash_seed = 1", "merge_timeout = 5"] {
            let e = GatewayConfig::from_toml(&format!("inner = \"a\"\nouter = \"b\"\n[engine]\n{key}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("unknown field"), "{key}: {e}");
        }
        let c = GatewayConfig { gro_gso: false, ..GatewayConfig::default() };
        let e = c.engine_config(9000, 1400, 42).unwrap();
        assert_eq!((e.imtu, e.emtu, e.inner_gso, e.outer_gso, e.hash_seed), (9000, 1400, false, false, 42));
    }

    #[test]
    fn fast_path_selects_the_fast_path_and_says_what_a_boolean_meant() {
        let base = "inner = \"a\"\nouter = \"b\"\n";
        let on = GatewayConfig::from_toml(&format!("{base}fast_path = \"on\"\n")).unwrap();
        assert_eq!(on.fast_path, FastPathMode::On);
        assert!(on.engine_config(9000, 1500, 0).unwrap().fast_path);
        let off = GatewayConfig::from_toml(base).unwrap();
        assert_eq!(off.fast_path, FastPathMode::Off, "the default");
        assert!(!off.engine_config(9000, 1500, 0).unwrap().fast_path);
        let e = GatewayConfig::from_toml(&format!("{base}offload = true\n")).unwrap_err().to_string();
        assert!(e.contains("gro_gso = true"), "{e}");
        let e = GatewayConfig::from_toml(&format!("{base}fast_path = \"yes\"\n")).unwrap_err().to_string();
        assert!(e.contains("\"off\" or \"on\""), "{e}");
        // The old name: still read, with a warning naming its line; not
        // both names at once.
        let old = format!("{base}offload = \"on\"\n");
        assert_eq!(GatewayConfig::from_toml(&old).unwrap().fast_path, FastPathMode::On);
        let notes = deprecated_keys("gw.toml", &old);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("gw.toml:3: `offload` is the old name of `fast_path`"), "{notes:?}");
        assert!(deprecated_keys("gw.toml", &format!("{base}fast_path = \"on\"\n")).is_empty());
        let both = format!("{base}offload = \"on\"\nfast_path = \"on\"\n");
        let e = GatewayConfig::from_toml(&both).unwrap_err().to_string();
        assert!(e.contains("fast_path"), "{e}");
        // Live: a reload may turn it on and off.
        let (changes, engine) = off.reload(&on, &off.engine_config(9000, 1500, 0).unwrap()).unwrap();
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].key, "fast_path");
        assert!(engine.fast_path);
    }

    #[test]
    fn check_runs_the_engine_checks_without_ports() {
        let c = GatewayConfig::from_toml("inner = \"a\"\nouter = \"b\"\n").unwrap();
        c.check().unwrap();
        let c = GatewayConfig { imtu: 1500, ..c };
        c.check().unwrap();
        let c = GatewayConfig { emtu: 9001, ..c };
        let e = c.check().unwrap_err().to_string();
        assert!(e.contains("`emtu`") && e.contains("at most imtu"), "{e}");
        let t = "inner = \"a\"\nouter = \"b\"\n[engine]\nmax_held_bytes = 10\n";
        let e = GatewayConfig::from_toml(t).unwrap().check().unwrap_err().to_string();
        assert!(e.contains("`[engine] max_held_bytes`") && e.contains("65536..="), "{e}");
    }

    #[test]
    fn reload_takes_live_keys_and_names_the_fixed_ones() {
        let old = GatewayConfig::from_toml("inner = \"a\"\nouter = \"b\"\n").unwrap();
        let running = old.engine_config(9000, 1500, 77).unwrap();
        let t = "inner = \"a\"\nouter = \"b\"\nlog_interval_s = 1\n[engine]\nmerge_timeout_us = 200\npsh = \"hold\"\ncaravan_prefixes = [\"203.0.113.0/24\"]\n";
        let new = GatewayConfig::from_toml(t).unwrap();
        let (changes, engine) = old.reload(&new, &running).unwrap();
        let shown: Vec<String> = changes.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            shown,
            [
                "engine.caravan_prefixes [] -> [\"203.0.113.0/24\"]",
                "engine.merge_timeout_us 500 -> 200",
                "engine.psh \"adaptive\" -> \"hold\"",
                "log_interval_s 10 -> 1",
            ]
        );
        // The engine keeps what the gateway decided at start.
        assert_eq!((engine.imtu, engine.emtu, engine.hash_seed), (9000, 1500, 77));
        assert_eq!(engine.merge_timeout, std::time::Duration::from_micros(200));
        assert!(old.reload(&old, &running).unwrap().0.is_empty());
        // Refused: a top-level key set up at start, an engine key fixed at
        // start, an invalid value.
        let workers = GatewayConfig { workers: 2, ..old.clone() };
        let e = old.reload(&workers, &running).unwrap_err().to_string();
        assert_eq!(e, "`workers` cannot change while running (1 -> 2); restart the gateway to change it");
        let buffers = GatewayConfig { socket_buffer_bytes: 16 << 20, ..old.clone() };
        let e = old.reload(&buffers, &running).unwrap_err().to_string();
        assert!(e.starts_with("`socket_buffer_bytes` cannot change while running (8388608 -> 16777216)"), "{e}");
        let metrics = GatewayConfig { metrics: Some("127.0.0.1:9464".parse().unwrap()), ..old.clone() };
        assert!(old.reload(&metrics, &running).unwrap_err().to_string().starts_with("`metrics` cannot change"));
        let mut flows = old.clone();
        flows.engine.max_flows = 10;
        let e = old.reload(&flows, &running).unwrap_err().to_string();
        assert!(e.contains("`max_flows`") && e.contains("restart"), "{e}");
        let bad = GatewayConfig { workers: 0, ..old.clone() };
        assert!(matches!(old.reload(&bad, &running), Err(ReloadError::Invalid(_))));
    }

    /// Which ports cut GSO frames themselves is the datapath's decision at
    /// start (a DPDK port without TSO: none), not the file's: a reload
    /// keeps it.
    #[test]
    fn reload_keeps_the_datapaths_gso_decision() {
        let old = GatewayConfig::from_toml("inner = \"a\"\nouter = \"b\"\ndatapath = \"dpdk\"\n").unwrap();
        let mut running = old.engine_config(9000, 1500, 77).unwrap();
        (running.inner_gso, running.outer_gso) = (false, true);
        let t = "inner = \"a\"\nouter = \"b\"\ndatapath = \"dpdk\"\n[engine]\nmerge_timeout_us = 200\n";
        let (_, engine) = old.reload(&GatewayConfig::from_toml(t).unwrap(), &running).unwrap();
        assert_eq!((engine.inner_gso, engine.outer_gso), (false, true));
    }

    #[test]
    fn busy_poll_takes_a_duration_up_to_10_ms() {
        let read = |v: &str| GatewayConfig::from_toml(&format!("inner = \"a\"\nouter = \"b\"\nbusy_poll_us = {v}\n"));
        assert_eq!(GatewayConfig::default().busy_poll_us, std::time::Duration::ZERO, "off by default");
        assert_eq!(read("50").unwrap().busy_poll_us, std::time::Duration::from_micros(50));
        let c = read("\"10ms\"").unwrap();
        assert_eq!(c.busy_poll_us, std::time::Duration::from_millis(10));
        c.validate().unwrap();
        let e = read("\"11ms\"").unwrap().validate().unwrap_err().to_string();
        assert!(e.contains("`busy_poll_us`") && e.contains("0..=10000"), "{e}");
    }

    #[test]
    fn printed_config_reads_back_the_same() {
        let text = include_str!("../../../../examples/gateway.toml");
        let c = GatewayConfig::from_toml(text).unwrap();
        let printed = toml::to_string(&c).unwrap();
        assert_eq!(GatewayConfig::from_toml(&printed).unwrap(), c);
        assert!(printed.contains("\n[engine]\nmerge_timeout_us = 500\n"), "{printed}");
        assert!(printed.contains("flow_idle_timeout_s = 30\n") && printed.contains("pmtu_lifetime_s = 600\n"));
    }
}
