//! Engine configuration, with validation that names the field and the
//! allowed range of anything it refuses.

use core::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default merge timeout.
///
/// Why 500 µs, revisited under adaptive PSH (issue 11; the table is in
/// docs/merge.md): request/response flows no longer wait for the timeout
/// (their PSH flushes), so the hold is sized for bulk flows. A sender with
/// TSO emits bursts of up to 64 KB (about 1 ms of data at the flow's rate);
/// a burst fills seven 8948-byte segments and leaves a partial one that only
/// the next burst can complete, 262–524 µs later at 1–2 Gbps per flow: a
/// timeout of T completes it for flows above 64 KB / T (1.05 Gbps at
/// 500 µs). Measured with the `px bench engine` trace (800 flows at
/// 1–2 Gbps, PSH per 128 KiB write, 0.5 % small flows; yield / p99 hold):
/// 32–200 µs 0.839 / ≤208 µs, 300 µs 0.878 / 320 µs, 500 µs 0.948 / 512 µs,
/// 600 µs 0.951 / 512 µs (no timeout flushes left on this trace), 700 µs
/// 0.951 / 512 µs. 500 µs takes nearly all of the yield (the last 0.3
/// points need the trace's slowest flows, and would be gone for any flow a
/// little slower), under the DESIGN's bound of 1 ms and far below one WAN
/// round trip. mlx5's 32 µs suits a NIC that sees one host's bursts back to
/// back, not a border that waits for the next burst.
pub const DEFAULT_MERGE_TIMEOUT: Duration = Duration::from_micros(500);

/// The longest a flow's idle timeout or a learned path MTU may be set to:
/// a day (RFC 1191 suggests 10 minutes for a path MTU).
pub const MAX_LIFETIME: Duration = Duration::from_secs(86_400);

/// Everything the engine can be told. All sizes are bytes.
///
/// It is also the `[engine]` table of the gateway's TOML file
/// (`examples/gateway.toml`): every field missing there keeps its default,
/// an unknown key is refused, durations are written in the unit their key
/// names (`merge_timeout_us`, `flow_idle_timeout_s`, `pmtu_lifetime_s`).
/// What the gateway decides itself is not read from the file: the MTUs
/// (its own top-level keys, or the ports' MTUs), GSO (its `gro_gso`) and
/// the hash seed (random per run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// MTU of the inner (b-network) port: the largest IP packet sent there.
    #[serde(skip)]
    pub imtu: u16,
    /// MTU of the outer (legacy) port.
    #[serde(skip)]
    pub emtu: u16,
    /// The largest IP packet the outer port itself can send (its link
    /// MTU), which `emtu` may undercut when told to: what bounds packets
    /// passed untouched toward a verified neighbour (`crate::imtu`). 0:
    /// not known, `emtu`.
    #[serde(skip)]
    pub outer_link_mtu: u16,
    /// Longest a partial segment is held waiting to be filled.
    #[serde(rename = "merge_timeout_us", with = "crate::units::duration_us")]
    pub merge_timeout: Duration,
    /// Most flows tracked at once; a new flow beyond this flushes and evicts
    /// the oldest.
    pub max_flows: usize,
    /// Most payload bytes held across all flows; beyond it the oldest held
    /// segments are flushed.
    #[serde(with = "crate::units::bytes_usize")]
    pub max_held_bytes: usize,
    /// A flow not seen for this long is forgotten (its held data flushed).
    #[serde(rename = "flow_idle_timeout_s", with = "crate::units::duration_s")]
    pub flow_idle_timeout: Duration,
    /// In-order full-sized segments in a row before a flow counts as bulk and
    /// its segments may be held. Flows below it pass straight through.
    pub bulk_after: u16,
    /// Entries in the learned path-MTU cache (ICMP frag-needed / PTB).
    pub pmtu_cache_size: usize,
    /// Lifetime of a learned path MTU (RFC 1191 §6.3 suggests 10 minutes).
    #[serde(rename = "pmtu_lifetime_s", with = "crate::units::duration_s")]
    pub pmtu_lifetime: Duration,
    /// Source address of ICMPv4 errors the gateway generates; none: no errors.
    pub icmp_source_v4: Option<Ipv4Addr>,
    /// Source address of ICMPv6 errors the gateway generates; none: no errors.
    pub icmp_source_v6: Option<Ipv6Addr>,
    /// ICMP errors per second about the packets of any one source (token
    /// bucket rate; burst = rate / 10 + 1); all sources together get four
    /// times that (`router::limit`).
    pub icmp_rate_per_sec: u32,
    /// The inner port's I/O can take TCP super-packets with a segment size
    /// (GSO); otherwise the engine cuts them itself.
    #[serde(skip)]
    pub inner_gso: bool,
    /// The same for the outer port.
    #[serde(skip)]
    pub outer_gso: bool,
    /// A kernel fast path is attached and flows may go to it
    /// (`crate::fast_path`; `px gateway`'s `fast_path = "on"`).
    #[serde(skip)]
    pub fast_path: bool,
    /// TCP segments (wire segments: a super-packet counts its segments) a
    /// flow carries through user space, after its handshake, before it may
    /// go to the kernel fast path: short flows stay with the engine, whose
    /// holds merge them better than GRO batches can. Its old name
    /// `offload_after` is still read.
    #[serde(alias = "offload_after")]
    pub fast_path_after: u32,
    /// Verify TCP checksums that the I/O layer did not verify before merging
    /// (segments that fail are passed on unmerged, counted).
    pub verify_checksums: bool,
    /// Key of the flow hashes (SipHash-1-3, see `flow.rs`): `px gateway`
    /// draws it from the OS random source; tests fix it.
    #[serde(skip)]
    pub hash_seed: u64,
    /// Inner destinations that read PX-caravans (`docs/caravan.md`): UDP
    /// toward these prefixes is packed into caravans. Empty: no caravans are
    /// built, and none are unpacked.
    pub caravan_prefixes: Vec<crate::Prefix>,
    /// ... and toward these UDP destination ports only (empty: any port).
    pub caravan_ports: Vec<u16>,
    /// DSCP marking caravans inside the b-network.
    pub caravan_dscp: u8,
    /// What PSH does to a held segment (docs/merge.md). In every mode the
    /// PSH segment joins the aggregate, and the merged segment holding the
    /// PSH'd byte carries PSH. `Adaptive` (the default): per flow, PSH rides
    /// within the merge timeout if the flow's recent PSHs were followed by
    /// more data within it (bulk), and flushes at once otherwise
    /// (request/response). `Flush`: PSH always sends the hold at once (the
    /// first round's rule; Linux senders set PSH every 64 KB or so, which
    /// caps its yield near 7/8 at 9000 bytes). `Hold`: PSH always rides.
    /// (Last, so that the file lists it where the gateway always has.)
    pub psh: PshPolicy,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            imtu: 9000,
            emtu: 1500,
            outer_link_mtu: 0,
            merge_timeout: DEFAULT_MERGE_TIMEOUT,
            max_flows: 65_536,
            max_held_bytes: 64 << 20,
            flow_idle_timeout: Duration::from_secs(30),
            bulk_after: 2,
            pmtu_cache_size: 4096,
            pmtu_lifetime: Duration::from_secs(600),
            icmp_source_v4: None,
            icmp_source_v6: None,
            icmp_rate_per_sec: 100,
            inner_gso: false,
            outer_gso: false,
            fast_path: false,
            fast_path_after: 64,
            verify_checksums: true,
            psh: PshPolicy::Adaptive,
            hash_seed: 0x5eed_0f9a_7e3a_15c3,
            caravan_prefixes: Vec::new(),
            caravan_ports: Vec::new(),
            caravan_dscp: px_wire::caravan::DEFAULT_DSCP,
        }
    }
}

/// See [`Config::psh`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PshPolicy {
    /// PSH flushes what the flow holds at once.
    Flush,
    /// PSH is carried on the merged segment, held at most the merge timeout.
    Hold,
    /// Per flow: rides for flows whose PSHs were followed by more data,
    /// flushes for flows whose PSHs were followed by silence.
    #[default]
    Adaptive,
}

/// A configuration value outside what the engine supports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: `{field}` = {value} (allowed: {allowed})")]
pub struct ConfigError {
    pub field: &'static str,
    pub value: String,
    pub allowed: &'static str,
}

fn check(ok: bool, field: &'static str, value: impl ToString, allowed: &'static str) -> Result<(), ConfigError> {
    if ok { Ok(()) } else { Err(ConfigError { field, value: value.to_string(), allowed }) }
}

impl Config {
    /// Checks every field; the first offending one is reported.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check((1280..=65_535).contains(&self.imtu), "imtu", self.imtu, "1280..=65535")?;
        check((576..=65_535).contains(&self.emtu), "emtu", self.emtu, "576..=65535")?;
        check(self.emtu <= self.imtu, "emtu", self.emtu, "at most imtu")?;
        check(
            self.outer_link_mtu == 0 || self.outer_link_mtu >= 576,
            "outer_link_mtu",
            self.outer_link_mtu,
            "0 (the eMTU) or 576..=65535",
        )?;
        check(
            self.merge_timeout <= Duration::from_millis(10),
            "merge_timeout",
            format!("{:?}", self.merge_timeout),
            "0..=10ms",
        )?;
        check((1..=16_777_216).contains(&self.max_flows), "max_flows", self.max_flows, "1..=16777216")?;
        check(
            (65_536..=(16usize << 30)).contains(&self.max_held_bytes),
            "max_held_bytes",
            self.max_held_bytes,
            "65536..=17179869184",
        )?;
        // Bounded above too: a deadline this far out would overflow the
        // clock (`Instant + Duration` panics), and no flow idles for a day.
        check(
            (Duration::from_millis(1)..=MAX_LIFETIME).contains(&self.flow_idle_timeout),
            "flow_idle_timeout",
            format!("{:?}", self.flow_idle_timeout),
            "1ms..=1day",
        )?;
        check(self.bulk_after <= 64, "bulk_after", self.bulk_after, "0..=64")?;
        check((1..=1 << 20).contains(&self.pmtu_cache_size), "pmtu_cache_size", self.pmtu_cache_size, "1..=1048576")?;
        check(
            (Duration::from_secs(1)..=MAX_LIFETIME).contains(&self.pmtu_lifetime),
            "pmtu_lifetime",
            format!("{:?}", self.pmtu_lifetime),
            "1s..=1day",
        )?;
        check(self.icmp_rate_per_sec <= 1_000_000, "icmp_rate_per_sec", self.icmp_rate_per_sec, "0..=1000000")?;
        check((1..=63).contains(&self.caravan_dscp), "caravan_dscp", self.caravan_dscp, "1..=63")?;
        Ok(())
    }

    /// The largest IP packet the outer port sends: its link MTU, or the
    /// eMTU when that is not known.
    pub fn outer_port_mtu(&self) -> u16 {
        if self.outer_link_mtu == 0 { self.emtu } else { self.outer_link_mtu }
    }

    /// The inner host's MSS (as the flow keeps it; `None`: not seen) if it
    /// leaves nothing to translate toward that host: at most the outer
    /// port's MSS while the inner port carries more, so that no merge can
    /// be larger than what arrives (RFC 6691: never above what a host
    /// advertised).
    pub(crate) fn untranslatable_inner_mss(&self, inner_mss: Option<u16>, version: px_wire::IpVersion) -> Option<u16> {
        let m = inner_mss?;
        (self.imtu > self.emtu && m <= crate::mss::mss_for(self.emtu, version)).then_some(m)
    }

    /// Largest TCP payload toward the inner port for a header of this size.
    pub fn inner_payload_cap(&self, ip_and_tcp_header_len: usize) -> usize {
        (self.imtu as usize).saturating_sub(ip_and_tcp_header_len)
    }

    /// Whether a running engine can take `new` in place of `self` (see
    /// [`Engine::set_config`](crate::Engine::set_config)): `new` is valid
    /// and changes none of the fields that size or seed the engine's state
    /// at its start. The first such field is named.
    pub fn live_change(&self, new: &Config) -> Result<(), ConfigError> {
        new.validate()?;
        const FIXED: &str = "the running value (set at start; a restart changes it)";
        let fixed = [
            ("imtu", self.imtu != new.imtu, new.imtu.to_string()),
            ("emtu", self.emtu != new.emtu, new.emtu.to_string()),
            ("outer_link_mtu", self.outer_link_mtu != new.outer_link_mtu, new.outer_link_mtu.to_string()),
            ("inner_gso", self.inner_gso != new.inner_gso, new.inner_gso.to_string()),
            ("outer_gso", self.outer_gso != new.outer_gso, new.outer_gso.to_string()),
            ("hash_seed", self.hash_seed != new.hash_seed, new.hash_seed.to_string()),
            // The flow table and the path-MTU cache are sized at start.
            ("max_flows", self.max_flows != new.max_flows, new.max_flows.to_string()),
            ("pmtu_cache_size", self.pmtu_cache_size != new.pmtu_cache_size, new.pmtu_cache_size.to_string()),
            ("pmtu_lifetime", self.pmtu_lifetime != new.pmtu_lifetime, format!("{:?}", new.pmtu_lifetime)),
        ];
        for (field, changed, value) in fixed {
            check(!changed, field, value, FIXED)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn errors_name_field_and_range() {
        let c = Config { imtu: 1000, ..Config::default() };
        let e = c.validate().unwrap_err();
        assert_eq!(e.field, "imtu");
        assert!(e.to_string().contains("1280..=65535"), "{e}");
        let c = Config { emtu: 9001, ..Config::default() };
        assert_eq!(c.validate().unwrap_err().field, "emtu");
        let c = Config { merge_timeout: Duration::from_millis(11), ..Config::default() };
        assert_eq!(c.validate().unwrap_err().field, "merge_timeout");
        let c = Config { max_flows: 0, ..Config::default() };
        assert_eq!(c.validate().unwrap_err().field, "max_flows");
    }

    #[test]
    fn live_change_names_what_is_fixed_at_start() {
        let old = Config::default();
        let live = Config {
            merge_timeout: Duration::from_micros(100),
            max_held_bytes: 1 << 20,
            flow_idle_timeout: Duration::from_secs(5),
            psh: PshPolicy::Hold,
            caravan_prefixes: vec!["203.0.113.0/24".parse().unwrap()],
            icmp_rate_per_sec: 5,
            ..Config::default()
        };
        old.live_change(&live).unwrap();
        for (fixed, field) in [
            (Config { max_flows: 10, ..Config::default() }, "max_flows"),
            (Config { imtu: 8000, ..Config::default() }, "imtu"),
            (Config { pmtu_lifetime: Duration::from_secs(1), ..Config::default() }, "pmtu_lifetime"),
        ] {
            assert_eq!(old.live_change(&fixed).unwrap_err().field, field);
        }
        let bad = Config { merge_timeout: Duration::from_millis(11), ..Config::default() };
        assert_eq!(old.live_change(&bad).unwrap_err().field, "merge_timeout");
    }
}
