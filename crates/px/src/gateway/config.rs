//! `px gateway` configuration: a TOML file with every option, overridden by
//! command-line flags. Every refusal names the field and what is allowed.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The whole configuration of a gateway (see `examples/gateway.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Interface toward the b-network (large MTU).
    pub inner: String,
    /// Interface toward the legacy network.
    pub outer: String,
    /// Inner MTU; 0 means "the inner interface's MTU".
    pub imtu: u16,
    /// Outer MTU; 0 means "the outer interface's MTU".
    pub emtu: u16,
    /// Worker threads, each with its own engine and sockets.
    pub workers: usize,
    /// Address of the Prometheus metrics endpoint (e.g. "127.0.0.1:9464").
    pub metrics: Option<SocketAddr>,
    /// Seconds between one-line summaries in the log; 0 turns them off.
    pub log_interval_s: u64,
    /// Frames per receive/send batch.
    pub batch: usize,
    /// Use kernel GRO on receive and GSO on send (PACKET_VNET_HDR); off,
    /// every frame is handled and cut in software.
    pub offload: bool,
    /// Receive through a memory-mapped ring (TPACKET_V2) instead of
    /// `recvmmsg` into buffers. Off by default: in `px lab demo` (4 rounds,
    /// twice each) recvmmsg carried 8.3–9.7 Gbps through the gateway and
    /// the ring 6.4–7.2, although px-io measured less CPU per frame with the
    /// ring; see the README.
    pub rx_ring: bool,
    /// Put the ports in promiscuous mode (a bump in the wire sees frames
    /// addressed to the hosts behind it).
    pub promiscuous: bool,
    /// The translation engine's options.
    pub engine: EngineSection,
}

/// The engine's options as written in the file (durations in µs or s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSection {
    pub merge_timeout_us: u64,
    pub max_flows: usize,
    pub max_held_bytes: usize,
    pub flow_idle_timeout_s: u64,
    pub bulk_after: u16,
    pub pmtu_cache_size: usize,
    pub pmtu_lifetime_s: u64,
    pub icmp_source_v4: Option<std::net::Ipv4Addr>,
    pub icmp_source_v6: Option<std::net::Ipv6Addr>,
    pub icmp_rate_per_sec: u32,
    pub verify_checksums: bool,
    /// Caravan-capable inner hosts (`docs/caravan.md`); empty: no caravans.
    pub caravan_prefixes: Vec<px_gateway::Prefix>,
    /// Their UDP ports (empty: any).
    pub caravan_ports: Vec<u16>,
    pub caravan_dscp: u8,
    /// "flush" (default) or "hold": see examples/gateway.toml.
    pub psh: px_gateway::PshPolicy,
}

impl Default for EngineSection {
    fn default() -> Self {
        let d = px_gateway::Config::default();
        EngineSection {
            merge_timeout_us: d.merge_timeout.as_micros() as u64,
            max_flows: d.max_flows,
            max_held_bytes: d.max_held_bytes,
            flow_idle_timeout_s: d.flow_idle_timeout.as_secs(),
            bulk_after: d.bulk_after,
            pmtu_cache_size: d.pmtu_cache_size,
            pmtu_lifetime_s: d.pmtu_lifetime.as_secs(),
            icmp_source_v4: d.icmp_source_v4,
            icmp_source_v6: d.icmp_source_v6,
            icmp_rate_per_sec: d.icmp_rate_per_sec,
            verify_checksums: d.verify_checksums,
            psh: d.psh,
            caravan_prefixes: d.caravan_prefixes,
            caravan_ports: d.caravan_ports,
            caravan_dscp: d.caravan_dscp,
        }
    }
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            inner: String::new(),
            outer: String::new(),
            imtu: 0,
            emtu: 0,
            workers: 1,
            metrics: None,
            log_interval_s: 10,
            batch: 64,
            offload: true,
            rx_ring: false,
            promiscuous: true,
            engine: EngineSection::default(),
        }
    }
}

/// A configuration the gateway refuses.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("invalid configuration: `{field}` = {value} (allowed: {allowed})")]
    Invalid { field: &'static str, value: String, allowed: &'static str },
    #[error(transparent)]
    Engine(#[from] px_gateway::ConfigError),
}

impl GatewayConfig {
    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<GatewayConfig, ConfigError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: p.clone(), source })?;
        Self::from_toml(&text).map_err(|message| ConfigError::Parse { path: p, message })
    }

    pub fn from_toml(text: &str) -> Result<GatewayConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Checks what the engine does not check itself.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, value: String, allowed| Err(ConfigError::Invalid { field, value, allowed });
        if self.inner.is_empty() || self.inner.len() > 15 {
            return invalid("inner", format!("{:?}", self.inner), "an interface name of 1..=15 bytes");
        }
        if self.outer.is_empty() || self.outer.len() > 15 {
            return invalid("outer", format!("{:?}", self.outer), "an interface name of 1..=15 bytes");
        }
        if self.inner == self.outer {
            return invalid("outer", format!("{:?}", self.outer), "an interface other than `inner`");
        }
        if !(1..=64).contains(&self.workers) {
            return invalid("workers", self.workers.to_string(), "1..=64");
        }
        if !(1..=1024).contains(&self.batch) {
            return invalid("batch", self.batch.to_string(), "1..=1024");
        }
        if self.log_interval_s > 86_400 {
            return invalid("log_interval_s", self.log_interval_s.to_string(), "0..=86400");
        }
        Ok(())
    }

    /// The engine configuration, with the MTUs resolved.
    pub fn engine_config(&self, imtu: u16, emtu: u16, seed: u64) -> Result<px_gateway::Config, ConfigError> {
        let e = &self.engine;
        let c = px_gateway::Config {
            imtu,
            emtu,
            merge_timeout: Duration::from_micros(e.merge_timeout_us),
            max_flows: e.max_flows,
            max_held_bytes: e.max_held_bytes,
            flow_idle_timeout: Duration::from_secs(e.flow_idle_timeout_s),
            bulk_after: e.bulk_after,
            pmtu_cache_size: e.pmtu_cache_size,
            pmtu_lifetime: Duration::from_secs(e.pmtu_lifetime_s),
            icmp_source_v4: e.icmp_source_v4,
            icmp_source_v6: e.icmp_source_v6,
            icmp_rate_per_sec: e.icmp_rate_per_sec,
            inner_gso: self.offload,
            outer_gso: self.offload,
            verify_checksums: e.verify_checksums,
            psh: e.psh,
            hash_seed: seed,
            caravan_prefixes: e.caravan_prefixes.clone(),
            caravan_ports: e.caravan_ports.clone(),
            caravan_dscp: e.caravan_dscp,
        };
        c.validate()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(GatewayConfig::from_toml(bad).unwrap_err().contains("longer than the address"));
    }

    #[test]
    fn unknown_field_and_bad_range_are_named() {
        let e = GatewayConfig::from_toml("inner = \"a\"\nouter = \"b\"\nworkerz = 2\n").unwrap_err();
        assert!(e.contains("workerz"), "{e}");
        let c = GatewayConfig::from_toml("inner = \"a\"\nouter = \"b\"\nworkers = 0\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("`workers`") && e.contains("1..=64"), "{e}");
        let c = GatewayConfig::from_toml("inner = \"a\"\nouter = \"b\"\n[engine]\nmerge_timeout_us = 50000\n").unwrap();
        let e = c.engine_config(9000, 1500, 0).unwrap_err().to_string();
        assert!(e.contains("merge_timeout"), "{e}");
        let e = GatewayConfig::from_toml("inner = 5\n").unwrap_err();
        assert!(e.contains("inner"), "{e}");
    }
}
