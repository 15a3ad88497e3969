//! `px lab quic`: a real QUIC stack (quinn, in the `px-quic` crate) on a
//! lab path, MTU 9000, 1 ms each way. The lsquic DPLPMTUD blog's
//! experiment (five connections fetch one file with the largest UDP
//! payload fixed at 1252, 1472, 4096, 8952 bytes: time and "% faster than
//! 1252", the blog's figures beside ours), then quinn's own PMTUD from
//! 1200 against quinn started where one F-PMTUD probe said. JSON: per
//! payload `payload`, `seconds`, `seconds_min`, `seconds_max`,
//! `faster_than_1252_pct`. Only in a `px` built with the `quic` feature.

use std::process::ExitCode;

use clap::Args;

/// How to get a `px` that has it.
#[cfg_attr(feature = "quic", allow(dead_code))]
const NOT_BUILT: &str = "px lab quic is not in this build of px (it carries a QUIC stack, quinn, only on request): \
                         build it with `cargo build --release -p px --features quic`";

#[derive(Debug, Args)]
pub struct QuicArgs {
    /// Bytes each connection fetches (the blog: 1 GB; scaled so a run
    /// takes a few seconds here).
    #[arg(long, default_value_t = 50_000_000, value_parser = clap::value_parser!(u64).range(1..=1 << 40))]
    bytes: u64,
    /// Runs per payload size; the median is reported with the range.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    runs: u64,
    /// Parallel connections (the blog: 5).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=64))]
    connections: u64,
    /// Bytes of the short fetch of the PMTUD-start comparison.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=1 << 32))]
    short_bytes: u64,
    /// Skip the PMTUD-start comparison (quinn's own PMTUD vs an F-PMTUD start).
    #[arg(long)]
    no_pmtud: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

#[cfg(not(feature = "quic"))]
pub fn quic(_: QuicArgs) -> Result<ExitCode, String> {
    Err(NOT_BUILT.into())
}

#[cfg(feature = "quic")]
pub fn quic(a: QuicArgs) -> Result<ExitCode, String> {
    px_lab::exp::check_prerequisites("px lab quic", &["ethtool", "ping"])?;
    let t0 = std::time::Instant::now();
    let o = px_quic::QuicOptions {
        bytes: a.bytes,
        runs: a.runs as usize,
        connections: a.connections as usize,
        short_bytes: a.short_bytes,
        pmtud: !a.no_pmtud,
        ..px_quic::QuicOptions::new()
    };
    let json = a.json;
    let res = px_quic::run(&o, &|line| {
        if !json {
            eprintln!("{line}");
        }
    })
    .map_err(|e| e.to_string())?;
    if json {
        println!("{}", res.json());
    } else {
        print!("{}", res.table());
        eprintln!("px lab quic: done in {:.0} s; namespaces removed.", t0.elapsed().as_secs_f64());
    }
    Ok(ExitCode::SUCCESS)
}
