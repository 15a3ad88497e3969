//! `px lab border`'s flags: the experiment's parameters with their
//! defaults, units and ranges ([`BorderFlags::options`] checks them and
//! makes the [`BorderOptions`]).

use std::path::PathBuf;
use std::time::Duration;

use super::ecmp::EcmpOptions;
use super::exchange::ExchangeOptions;
use super::{BorderOptions, Parts};

/// The flags of `px lab border`.
#[derive(Debug, Clone, clap::Args)]
pub struct BorderFlags {
    /// Which part to run: the iMTU advertisement (`imtu`), the ECMP
    /// failover (`ecmp`) or both.
    #[arg(long, value_enum, default_value = "all")]
    pub part: Parts,
    /// Size of each bulk transfer of the advertisement part (each
    /// direction, each neighbour), e.g. 20MiB (1MiB..=4GiB; a bare number
    /// is MiB, as the old name --imtu-mib took).
    #[arg(long = "imtu-size", alias = "imtu-mib", value_name = "SIZE", default_value = "20MiB", value_parser = mib_size)]
    pub imtu_bytes: u64,
    /// sha256-checked TCP flows in each direction.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=32))]
    pub flows: u64,
    /// Rate of each flow, e.g. 40Mbps (paced 64 KiB writes; 100kbps..=10Gbps;
    /// a bare number is Mb/s, as the old name --rate-mbps took).
    #[arg(long = "rate", alias = "rate-mbps", value_name = "RATE", default_value = "40Mbps", value_parser = px_units::rate_mbps_bare)]
    pub rate_bps: f64,
    /// Traffic before gw1 is killed, e.g. 3s (0.5s..=600s; a bare number is
    /// seconds, old name --before-kill-s).
    #[arg(long = "before-kill", alias = "before-kill-s", value_name = "DURATION", default_value = "3s", value_parser = px_units::secs_f64)]
    pub before_kill_s: f64,
    /// How long gw1 stays dead, e.g. 5s (0.5s..=600s; a bare number is
    /// seconds, old name --down-s).
    #[arg(long = "down", alias = "down-s", value_name = "DURATION", default_value = "5s", value_parser = px_units::secs_f64)]
    pub down_s: f64,
    /// Traffic after gw1's restart, e.g. 5s (0.5s..=600s; a bare number is
    /// seconds, old name --after-restart-s).
    #[arg(long = "after-restart", alias = "after-restart-s", value_name = "DURATION", default_value = "5s", value_parser = px_units::secs_f64)]
    pub after_restart_s: f64,
    /// 5-tuples asked of both routers' FIBs for the hash symmetry check.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub hash_tuples: u64,
    /// BFD interval on both routers, e.g. 50ms (detection after 3 missed;
    /// 10ms..=1s; a bare number is milliseconds, old name --bfd-ms).
    #[arg(long = "bfd", alias = "bfd-ms", value_name = "DURATION", default_value = "50ms", value_parser = px_units::millis_u64)]
    pub bfd_ms: u64,
    /// The routers' `fib_multipath_hash_policy`: 3 (addresses, protocol,
    /// ports: symmetric) or 1 (L4, which reuses a packet's own hash: see
    /// docs/border.md).
    #[arg(long, default_value = "3", value_parser = ["1", "3"])]
    pub hash_policy: String,
    /// Extra arguments for both `px gateway`s (repeatable).
    #[arg(long = "gateway-arg", allow_hyphen_values = true)]
    pub gateway_args: Vec<String>,
}

impl BorderFlags {
    /// The options of a run of `exe` (the `px` binary), the flags' ranges
    /// checked.
    pub fn options(self, exe: PathBuf) -> Result<BorderOptions, String> {
        if !(1e5..=1e10).contains(&self.rate_bps) {
            return Err(format!("--rate: {} bit/s is outside 100kbps..=10Gbps", self.rate_bps));
        }
        if !(10..=1000).contains(&self.bfd_ms) {
            return Err(format!("--bfd: {}ms is outside 10ms..=1000ms", self.bfd_ms));
        }
        let ecmp = EcmpOptions {
            exe: exe.clone(),
            flows: self.flows as usize,
            rate_mbps: self.rate_bps / 1e6,
            before_kill: secs("before-kill", self.before_kill_s)?,
            down: secs("down", self.down_s)?,
            after_restart: secs("after-restart", self.after_restart_s)?,
            hash_tuples: self.hash_tuples as usize,
            gateway_args: self.gateway_args,
            bfd_ms: self.bfd_ms as u32,
            hash_policy: if self.hash_policy == "1" { 1 } else { 3 },
        };
        let exchange = ExchangeOptions { exe, bytes: self.imtu_bytes, ..ExchangeOptions::default() };
        Ok(BorderOptions { parts: self.part, ecmp, exchange })
    }
}

fn secs(name: &str, v: f64) -> Result<Duration, String> {
    if !(0.5..=600.0).contains(&v) {
        return Err(format!("--{name}: {v}s is outside 0.5s..=600s"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// A size, a bare number in MiB.
fn mib_size(s: &str) -> Result<u64, String> {
    let b = if s.trim().chars().all(|c| c.is_ascii_digit()) {
        px_units::size(&format!("{s}MiB"))?
    } else {
        px_units::size(s)?
    };
    if (1 << 20..=4 << 30).contains(&b) { Ok(b) } else { Err(format!("`{s}`: allowed 1MiB..=4GiB")) }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: super::BorderFlags,
    }

    /// Issue 38 item 5: durations, rates and sizes take units; the old
    /// names keep their bare units.
    #[test]
    fn units_and_old_names() {
        let a = T::parse_from(["t", "--down-s", "5s", "--bfd-ms", "50ms", "--rate", "2Mbps", "--imtu-size", "8MiB"]).a;
        assert_eq!((a.down_s, a.bfd_ms, a.rate_bps, a.imtu_bytes), (5.0, 50, 2e6, 8 << 20));
        let a = T::parse_from(["t", "--down", "1500ms", "--bfd", "0.1s", "--rate-mbps", "40", "--imtu-mib", "20"]).a;
        assert_eq!((a.down_s, a.bfd_ms, a.rate_bps, a.imtu_bytes), (1.5, 100, 4e7, 20 << 20));
        assert!(T::try_parse_from(["t", "--imtu-size", "9GiB"]).is_err());
    }
}
