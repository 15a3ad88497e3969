//! `px bench gateway` (root): the gateway's real I/O path against Linux
//! forwarding, on the same frames, in one run. The experiment (topology,
//! generator, sinks, CPU accounting) is [`px_lab::gateway_bench`]; this
//! module parses the flags and prints its table or JSON.

use std::process::ExitCode;

use clap::Args;
use px_lab::gateway_bench::{self, GatewayBenchOptions};

#[derive(Debug, Args)]
pub struct GatewayBenchArgs {
    /// Gateway workers (each a thread; with more than one, the gateway is
    /// pinned to every CPU).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: u32,
    /// How long each round replays the trace (looping over it), e.g. 10s
    /// (a bare number is seconds; old name --seconds).
    #[arg(long = "duration", alias = "seconds", default_value = "10s", value_parser = px_units::secs_f64)]
    seconds: f64,
    /// Bulk flows in the trace.
    #[arg(long, default_value_t = 800, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    flows: u32,
    /// Inbound frames (1448-byte segments) in the trace.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(100..=2_000_000))]
    packets: u64,
    /// Outbound frames (8948-byte segments) in the trace.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(10..=300_000))]
    split_packets: u64,
    /// Pace the generator to this many Gbps of frames (0: as fast as it can).
    #[arg(long, default_value_t = 0.0)]
    rate_gbps: f64,
    /// The forwarding CPU (default: the last one); the generator and sinks
    /// get CPU 0.
    #[arg(long)]
    cpu: Option<usize>,
    /// Skip the Linux router round.
    #[arg(long)]
    no_router: bool,
    /// Also run a round with the kernel fast path (`px gateway --offload
    /// on`), on the same trace and CPU (JSON: `offload_gbps`,
    /// `offload_cpu_s_per_gb`, `offload_yield`).
    #[arg(long)]
    offload: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(a: GatewayBenchArgs) -> Result<ExitCode, String> {
    let o = GatewayBenchOptions {
        exe: std::env::current_exe().map_err(|e| e.to_string())?,
        workers: a.workers,
        seconds: a.seconds,
        flows: a.flows,
        packets: a.packets,
        split_packets: a.split_packets,
        rate_gbps: a.rate_gbps,
        cpu: a.cpu,
        router: !a.no_router,
        offload: a.offload,
    };
    let r = gateway_bench::run(&o, &|m| {
        if !a.json {
            eprintln!("px bench gateway: {m}");
        }
    })
    .map_err(|e| e.to_string())?;
    if a.json {
        println!("{}", r.json());
    } else {
        print!("{}", r.table());
    }
    Ok(ExitCode::SUCCESS)
}
