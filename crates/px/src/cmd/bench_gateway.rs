//! `px bench gateway` (root): the gateway's real I/O path against Linux
//! forwarding, on the same frames, in one run; with `--datapath dpdk`, the
//! gateway on DPDK against DPDK's GRO/GSO and plain forwarding on memif
//! ports. The experiments are [`px_lab::gateway_bench`] and
//! [`px_lab::gateway_bench::dpdk`]; this module parses the flags and prints
//! their table or JSON.

use std::process::ExitCode;

use clap::{Args, ValueEnum};
use px_bench::vs_dpdk::gateway::{Forwarder, TraceKind, TraceSizes};
use px_bench::vs_dpdk::paced::AtOnce;
use px_lab::gateway_bench::dpdk::{DpdkBenchError, DpdkBenchOptions};
use px_lab::gateway_bench::{self, GatewayBenchOptions};

/// The DPDK generator checks the checksums of every 16th frame that
/// arrives: checking every frame reads every byte the forwarder wrote, and
/// made the generator, not the forwarder, the limit of the `limit` round
/// (26 Gbps inbound against 34 with no check). Every frame's size, flow,
/// port and payload bytes are checked in every case.
const VERIFY_EVERY: u32 = 16;

/// Exit status when DPDK is not installed (as `bench/dpdk/build.sh`).
const EXIT_DPDK_ABSENT: u8 = 3;

/// The I/O path the gateway is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DatapathArg {
    /// Packet sockets on px-lab's gateway line, against a Linux router.
    Packet,
    /// DPDK memif ports: px gateway --datapath dpdk against DPDK's GRO/GSO
    /// (`baseline`) and plain forwarding (`limit`), rounds interleaved.
    Dpdk,
}

#[derive(Debug, Args)]
pub struct GatewayBenchArgs {
    /// The I/O path: packet sockets (default) or DPDK memif ports (needs
    /// libdpdk-dev; the rounds limit, px, baseline on the inbound,
    /// outbound, mixed and bulk traces; figures in docs/dpdk-bench.md).
    #[arg(long, value_enum, default_value_t = DatapathArg::Packet)]
    datapath: DatapathArg,
    /// With --datapath dpdk: repeats of every round (interleaved; medians
    /// and the targets' ratios are over the repeats).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    repeats: u32,
    /// With --datapath dpdk: flows of the bulk trace (no small flows).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    bulk_flows: u32,
    /// With --datapath dpdk: which forwarders, of limit, px, baseline.
    #[arg(long, value_delimiter = ',', default_value = "limit,px,baseline", value_parser = str::parse::<Forwarder>)]
    rounds: Vec<Forwarder>,
    /// With --datapath dpdk: which traces, of inbound, outbound, mixed, bulk.
    #[arg(long, value_delimiter = ',', default_value = "inbound,outbound,mixed,bulk", value_parser = str::parse::<TraceKind>)]
    traces: Vec<TraceKind>,
    /// Gateway workers (each a thread; with more than one, the gateway is
    /// pinned to every CPU).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: u32,
    /// How long each round replays the trace (looping over it), e.g. 10s
    /// (a bare number is seconds; old name --seconds). Default: 10 s on
    /// packet sockets, 3 s per round with --datapath dpdk.
    #[arg(long = "duration", alias = "seconds", value_parser = px_units::secs_f64)]
    seconds: Option<f64>,
    /// Bulk flows in the trace.
    #[arg(long, default_value_t = 800, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    flows: u32,
    /// Inbound frames (1448-byte segments) in the trace (default 200 000;
    /// with --datapath dpdk 100 000, and half that in the bulk trace).
    #[arg(long, value_parser = clap::value_parser!(u64).range(100..=2_000_000))]
    packets: Option<u64>,
    /// Outbound frames (8948-byte segments) in the trace (default 30 000;
    /// with --datapath dpdk 15 000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(10..=300_000))]
    split_packets: Option<u64>,
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
    /// Also run a round with the kernel fast path (`px gateway --fast-path
    /// on`), on the same trace and CPU (old name --offload; JSON:
    /// `offload_gbps`, `offload_cpu_s_per_gb`, `offload_yield`).
    #[arg(long, alias = "offload")]
    fast_path: bool,
    /// With --datapath dpdk: how many flows the generator sends at once.
    /// `fit` (default): a window of flows at a time, sized after each
    /// window so that every flow moves at its trace rate (one core forwards
    /// a fiftieth of the 800-flow trace's 1.2 Tbps); `all`: every flow at
    /// once, each slowed to the forwarder's pace; or a number of flows.
    #[arg(long, default_value = "fit", value_parser = str::parse::<AtOnce>)]
    at_once: AtOnce,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(a: GatewayBenchArgs) -> Result<ExitCode, String> {
    if a.datapath == DatapathArg::Dpdk {
        return dpdk(a);
    }
    let o = GatewayBenchOptions {
        exe: std::env::current_exe().map_err(|e| e.to_string())?,
        workers: a.workers,
        seconds: a.seconds.unwrap_or(10.0),
        flows: a.flows,
        packets: a.packets.unwrap_or(200_000),
        split_packets: a.split_packets.unwrap_or(30_000),
        rate_gbps: a.rate_gbps,
        cpu: a.cpu,
        router: !a.no_router,
        fast_path: a.fast_path,
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

/// `--datapath dpdk`: every round, then the table or the JSON. Exit 1 when
/// a round did not move every byte, 3 when DPDK is not installed.
fn dpdk(a: GatewayBenchArgs) -> Result<ExitCode, String> {
    if a.workers != 1 || a.fast_path || a.rate_gbps != 0.0 {
        return Err("--datapath dpdk runs one forwarding lcore, as fast as it can: \
                    --workers, --fast-path and --rate-gbps apply to packet sockets only"
            .into());
    }
    let o = DpdkBenchOptions {
        exe: std::env::current_exe().map_err(|e| e.to_string())?,
        seconds: a.seconds.unwrap_or(3.0),
        repeats: a.repeats,
        sizes: TraceSizes {
            flows: a.flows as usize,
            inbound_frames: a.packets.unwrap_or(100_000) as usize,
            outbound_frames: a.split_packets.unwrap_or(15_000) as usize,
            bulk_flows: a.bulk_flows as usize,
            bulk_frames: a.packets.unwrap_or(100_000) as usize / 2,
        },
        cpu: a.cpu,
        forwarders: a.rounds.clone(),
        traces: a.traces.clone(),
        verify_every: VERIFY_EVERY,
        at_once: a.at_once,
    };
    let say = |m: &str| {
        if !a.json {
            eprintln!("px bench gateway: {m}");
        }
    };
    let r = match px_lab::gateway_bench::dpdk::run(&o, &say) {
        Ok(r) => r,
        Err(DpdkBenchError::DpdkMissing(why)) => {
            eprintln!("px bench gateway --datapath dpdk: skipped: {why}");
            return Ok(ExitCode::from(EXIT_DPDK_ABSENT));
        }
        Err(e) => return Err(e.to_string()),
    };
    if a.json {
        println!("{}", r.json());
    } else {
        print!("{}", r.table());
    }
    // The table lists what failed; with --json it was a silent exit 1.
    for line in r.failure_lines().iter().filter(|_| a.json) {
        eprintln!("px bench gateway: {line}");
    }
    Ok(if r.failed().is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
