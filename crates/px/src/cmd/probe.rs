//! `px probe HOST`: the path MTU toward a `px fpmtud` responder, without
//! root: F-PMTUD (one or two round trips), DPLPMTUD, or classic ICMP PMTUD.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use px_pmtud::fpmtud::wire::DEFAULT_PORT;
use px_pmtud::search::SearchStrategy;

use px_runtime::pmtud::probe::{self, Measurement, Method, Path, ProbeOptions};

/// Exit status when the measurement ran but produced no path MTU.
pub const EXIT_NO_ANSWER: u8 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MethodArg {
    /// Parallel DF-set probes of several sizes per round trip, with the
    /// F-PMTUD fragment report as a hint on IPv4 (with --legacy: F-PMTUD,
    /// then DPLPMTUD when no fragment report comes back, and on IPv6).
    Auto,
    /// Parallel DF-set probes only (IPv4 and IPv6; no DF-clear probe).
    Parallel,
    /// F-PMTUD only (IPv4).
    Fpmtud,
    /// RFC 8899 DPLPMTUD with DF-set probes confirmed by the responder.
    Dplpmtud,
    /// Classic PMTUD: DF-set probes lowered by ICMP "too big" messages.
    Icmp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SearchArg {
    /// Bisection to the byte.
    Bisection,
    /// lsquic: the maximum first, then bisection (to the byte).
    Lsquic,
}

#[derive(Debug, Args)]
#[command(after_help = "Exit status: 0 path MTU found; 3 no answer (no responder, or every probe lost); \
2 error (bad arguments, socket failure).")]
pub struct ProbeArgs {
    /// Host running `px fpmtud` (address or name).
    host: String,
    /// Responder's UDP port (1..=65535).
    #[arg(long, default_value_t = DEFAULT_PORT, value_parser = clap::value_parser!(u16).range(1..))]
    port: u16,
    /// Discovery method.
    #[arg(long, value_enum, default_value_t = MethodArg::Auto)]
    method: MethodArg,
    /// Largest size to consider, in bytes of IP total length (default: the
    /// local outgoing link's MTU).
    #[arg(long, value_parser = clap::value_parser!(u16).range(68..))]
    max_size: Option<u16>,
    /// Bound on the whole measurement: `10s`, `500ms`, or seconds (more than 0).
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    timeout: Duration,
    /// Floor of the DPLPMTUD PROBE_TIMER and of the ICMP method's retry
    /// timer (RFC 8899 asks >= 1 s for a PL carrying traffic; a measurement
    /// against a responder that answers at once can use less; the PTO
    /// from measured RTTs applies above this floor).
    #[arg(long, default_value = "25ms", value_parser = parse_duration)]
    probe_timer: Duration,
    /// RTT assumed before the first answer (sets the first timeouts).
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    initial_rtt: Duration,
    /// DPLPMTUD search strategy (lsquic: most paths carry the local link
    /// MTU, which it confirms with one probe).
    #[arg(long, value_enum, default_value_t = SearchArg::Lsquic)]
    search: SearchArg,
    /// Send legacy `FPMT` probes (for the paper authors' reference responder).
    #[arg(long)]
    legacy: bool,
    /// Use an IPv4 address of HOST.
    #[arg(short = '4', conflicts_with = "ipv6")]
    ipv4: bool,
    /// Use an IPv6 address of HOST.
    #[arg(short = '6')]
    ipv6: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// Parses `1.5s`, `250ms`, `20us`, or a bare number of seconds.
pub use px_units::duration as parse_duration;

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() { Err(format!("`{s}`: must be more than 0")) } else { Ok(d) }
}

fn resolve(a: &ProbeArgs) -> Result<SocketAddr, String> {
    if let Ok(ip) = a.host.parse::<IpAddr>() {
        // An address of the other family than -4/-6 asks for is a mistake,
        // not a hint to ignore.
        if (a.ipv6 && ip.is_ipv4()) || (a.ipv4 && ip.is_ipv6()) {
            let (flag, family) = if a.ipv6 { ("-6", "IPv4") } else { ("-4", "IPv6") };
            return Err(format!("`{flag}` was given, but {ip} is an {family} address"));
        }
        return Ok(SocketAddr::new(ip, a.port));
    }
    let all: Vec<SocketAddr> =
        (a.host.as_str(), a.port).to_socket_addrs().map_err(|e| format!("cannot resolve {}: {e}", a.host))?.collect();
    all.iter()
        .find(|s| (!a.ipv4 || s.is_ipv4()) && (!a.ipv6 || s.is_ipv6()))
        .copied()
        .ok_or_else(|| format!("{} has no address of the requested family", a.host))
}

pub fn run(a: ProbeArgs) -> Result<ExitCode, String> {
    match measure(&a) {
        Ok((target, m)) => {
            if a.json {
                println!("{}", probe::report_json(target, &m, a.max_size));
            } else {
                print!("{}", probe::report_text(target, &m, a.max_size));
            }
            Ok(if m.pmtu.is_some() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_NO_ANSWER) })
        }
        Err(e) => {
            // As iperf3 does: a script reading stdout gets an object.
            if a.json {
                println!("{}", serde_json::json!({ "target": a.host, "error": e }));
            }
            Err(e)
        }
    }
}

/// Resolves the target and runs the measurement; errors name the target.
fn measure(a: &ProbeArgs) -> Result<(SocketAddr, Measurement), String> {
    let target = resolve(a)?;
    let opts = ProbeOptions {
        target,
        max_size: a.max_size,
        timeout: a.timeout,
        probe_timer: a.probe_timer,
        initial_rtt: a.initial_rtt,
        search: match a.search {
            SearchArg::Bisection => SearchStrategy::Bisection,
            SearchArg::Lsquic => SearchStrategy::lsquic_exact(),
        },
        legacy: a.legacy,
    };
    let path = Path::open(&opts).map_err(|e| format!("{target}: {e}"))?;
    let method = match a.method {
        MethodArg::Auto => Method::Auto,
        MethodArg::Parallel => Method::Parallel,
        MethodArg::Fpmtud => Method::Fpmtud,
        MethodArg::Dplpmtud => Method::Dplpmtud,
        MethodArg::Icmp => Method::Icmp,
    };
    let mut m = probe::measure(&path, &opts, method).map_err(|e| format!("{target}: {e}"))?;
    m.link_mtu = path.iface_mtu();
    // A path that carried the largest size allowed may carry more: with a
    // --max-size below the link's MTU that is a floor, not the answer.
    if let (Some(p), Some(cap)) = (m.pmtu, a.max_size)
        && p >= cap
    {
        m.exact = false;
        m.pmtu_high = None;
    }
    Ok((target, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("20us"), Ok(Duration::from_micros(20)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
    }
}
