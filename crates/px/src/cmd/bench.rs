//! `px bench …`: measured, never assumed. Every number printed here was
//! timed in this run.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use px_bench::vs_dpdk::compare;
use px_bench::{BenchConfig, EngineReport, ScalingReport, TraceConfig};
use px_gateway::Config;
use px_wire::offload::Checksum;

/// Exit status of `--vs dpdk` when the DPDK side could not run (as
/// `bench/dpdk/build.sh`).
const EXIT_DPDK_ABSENT: u8 = 3;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Replay a reproducible synthetic trace through the engine on one core:
    /// merge (legacy → b-network), split (b-network → legacy, in software and
    /// with GSO) and a memcpy of the same payload bytes as the reference.
    Engine(EngineArgs),
    /// (root) The gateway's real I/O path against Linux forwarding on the
    /// same frames: a generator replays the trace from both ends of px-lab's
    /// gateway line as fast as it can, sinks count what arrives; px gateway
    /// and then a Linux router (GRO on) forward on one pinned CPU.
    Gateway(super::bench_gateway::GatewayBenchArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CsumArg {
    /// The NIC verified received checksums (as any modern NIC, or veth GRO).
    Verified,
    /// Nobody verified them: the engine checks each segment it merges.
    Unverified,
}

/// A reference implementation to run beside the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VsArg {
    /// DPDK 22.11's GRO and GSO libraries (bench/dpdk, built on demand).
    Dpdk,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PshArg {
    Adaptive,
    Flush,
    Hold,
}

#[derive(Debug, Args)]
pub struct EngineArgs {
    /// Bulk flows in the trace (the paper: 800 iPerf flows).
    #[arg(long, default_value_t = 800, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    flows: u32,
    /// Inbound packets (1448-byte segments) per run.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1000..=100_000_000))]
    packets: u64,
    /// Outbound packets (8948-byte segments) per run.
    #[arg(long, default_value_t = 150_000, value_parser = clap::value_parser!(u64).range(100..=10_000_000))]
    split_packets: u64,
    /// Lowest and highest per-flow rate in Gbps (each flow draws one).
    #[arg(long, default_value_t = 1.0)]
    rate_min: f64,
    #[arg(long, default_value_t = 2.0)]
    rate_max: f64,
    /// Application write size in bytes; PSH ends each write (iperf3: 128 KiB).
    #[arg(long, default_value_t = 131_072, value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    write_size: u64,
    /// Share of input packets from small flows (0..1). Small flows are
    /// never merged, so each of their packets is also an output packet: at 2 %
    /// of the input they are ~12 % of what leaves, and the yield then measures
    /// the mix more than the merge. 0.5 % keeps the workload bulk-dominated,
    /// like the paper's 800 iPerf flows (which have none).
    #[arg(long, default_value_t = 0.005)]
    small_share: f64,
    /// Merge timeout, e.g. 500us (default: the engine's default; a bare
    /// number is microseconds; old name --merge-timeout-us).
    #[arg(long = "merge-timeout", alias = "merge-timeout-us", value_parser = px_units::micros_u64)]
    merge_timeout_us: Option<u64>,
    /// What PSH does to held data: adaptive (default: per flow, docs/merge.md),
    /// flush (at once, the first round's rule) or hold (PSH always rides).
    /// The yield with flush and with `--small-share 0` is reported beside.
    #[arg(long, value_enum, default_value_t = PshArg::Adaptive)]
    psh: PshArg,
    /// Inner and outer MTU.
    #[arg(long, default_value_t = 9000)]
    imtu: u16,
    #[arg(long, default_value_t = 1500)]
    emtu: u16,
    /// How received checksums arrive.
    #[arg(long, value_enum, default_value_t = CsumArg::Verified)]
    rx_csum: CsumArg,
    /// Runs; the table shows the median and the range.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    runs: u32,
    /// Frames are generated in chunks of this many KiB just before the engine
    /// (and the memcpy reference) read them, so that they sit in the CPU
    /// cache as frames DMA'd by a NIC with DDIO do. Larger than the last-level
    /// cache measures reads from DRAM instead.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(64..=4 << 20))]
    chunk_kib: u64,
    /// Seed of the trace.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Run a reference beside the engine on the same frames, alternating
    /// run by run on one core. With `dpdk`, the whole trace is held in memory
    /// (the harness reads pcaps): at most 300 000 inbound and 30 000 outbound
    /// packets are used.
    #[arg(long, value_enum)]
    vs: Option<VsArg>,
    /// The CPU both sides run on with `--vs` (default: the last one).
    #[arg(long)]
    cpu: Option<usize>,
    /// Scaling instead of the one-core table: the trace's flows divided among
    /// this many threads (each its own engine, as RSS divides flows among
    /// gateway workers), pinned to CPUs 0..N-1, against the same work on one
    /// thread in the same run; merge and software split. Each thread's share
    /// runs exactly what the one-core bench runs; the N-thread figure is the sum of the threads' rates.
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=256))]
    threads: Option<u32>,
}

pub fn run(cmd: BenchCommand) -> Result<ExitCode, String> {
    match cmd {
        BenchCommand::Engine(a) => engine(a),
        BenchCommand::Gateway(a) => super::bench_gateway::run(a),
    }
}

fn engine(a: EngineArgs) -> Result<ExitCode, String> {
    if !(a.rate_min > 0.0 && a.rate_min <= a.rate_max && a.rate_max <= 400.0) {
        return Err(format!("--rate-min {} / --rate-max {}: need 0 < min <= max <= 400 Gbps", a.rate_min, a.rate_max));
    }
    if !(0.0..1.0).contains(&a.small_share) {
        return Err(format!("--small-share {}: allowed 0 <= share < 1", a.small_share));
    }
    let psh = match a.psh {
        PshArg::Flush => px_gateway::PshPolicy::Flush,
        PshArg::Hold => px_gateway::PshPolicy::Hold,
        PshArg::Adaptive => px_gateway::PshPolicy::Adaptive,
    };
    let mut engine = Config { imtu: a.imtu, emtu: a.emtu, max_flows: 1 << 16, psh, ..Config::default() };
    if let Some(us) = a.merge_timeout_us {
        engine.merge_timeout = Duration::from_micros(us);
    }
    engine.validate().map_err(|e| e.to_string())?;
    let inbound = TraceConfig {
        flows: a.flows as usize,
        rate_gbps: (a.rate_min, a.rate_max),
        write_size: a.write_size as usize,
        small_share: a.small_share,
        segment: a.emtu as usize - 52,
        seed: a.seed,
        ..TraceConfig::inbound_default()
    };
    let outbound = TraceConfig {
        flows: a.flows as usize,
        rate_gbps: (a.rate_min, a.rate_max),
        write_size: a.write_size as usize,
        segment: a.imtu as usize - 52,
        seed: a.seed,
        ..TraceConfig::outbound_default()
    };
    let cfg = BenchConfig {
        inbound,
        outbound,
        inbound_packets: a.packets as usize,
        outbound_packets: a.split_packets as usize,
        rx_csum: match a.rx_csum {
            CsumArg::Verified => Checksum::Valid,
            CsumArg::Unverified => Checksum::Unknown,
        },
        engine,
        chunk_bytes: a.chunk_kib as usize * 1024,
    };
    if a.vs == Some(VsArg::Dpdk) {
        return vs_dpdk(&a, &cfg);
    }
    if let Some(n) = a.threads {
        return engine_scaling(&a, &cfg, n as usize);
    }
    let r = EngineReport::measure(&cfg, a.runs, &|i| {
        if !a.json {
            eprintln!(
                "px bench engine: run {}/{} ({} inbound + {} outbound packets)…",
                i + 1,
                a.runs,
                a.packets,
                a.split_packets
            );
        }
    });
    if a.json {
        println!("{}", r.json());
    } else {
        print!("{}", r.table());
    }
    Ok(ExitCode::SUCCESS)
}

/// `px bench engine --vs dpdk` ([`px_bench::vs_dpdk::compare`]).
fn vs_dpdk(a: &EngineArgs, cfg: &BenchConfig) -> Result<ExitCode, String> {
    let cpu = a.cpu.unwrap_or_else(px_lab::cpu::rx_cpu);
    let say = |m: &str| {
        if !a.json {
            eprintln!("px bench engine --vs dpdk: {m}");
        }
    };
    let c = compare::run(cfg, a.runs, cpu, &px_lab::cpu::pin_current_thread, &say).map_err(|e| e.to_string())?;
    if a.json {
        println!("{}", c.json());
    } else {
        print!("{}", c.table());
    }
    Ok(if c.dpdk_ran() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_DPDK_ABSENT) })
}

/// `px bench engine --threads N`: merge and split on one thread and on N.
fn engine_scaling(a: &EngineArgs, cfg: &BenchConfig, n: usize) -> Result<ExitCode, String> {
    let cpus = px_lab::cpu::online_cpus();
    if n > cpus {
        return Err(format!("--threads {n}: this machine has {cpus} CPUs online (one thread per CPU)"));
    }
    let pin = |k: usize| {
        if let Err(e) = px_lab::cpu::pin_current_thread(k) {
            eprintln!("px bench engine: cannot pin thread {k}: {e}");
        }
    };
    let mut runs = Vec::new();
    for i in 0..a.runs {
        if !a.json {
            eprintln!("px bench engine: scaling run {}/{} (1 thread, then {n})…", i + 1, a.runs);
        }
        runs.push(px_bench::scaling::scaling(cfg, n, &pin));
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let r = ScalingReport { cfg: cfg.clone(), threads: n, runs, loadavg: load.trim().to_owned() };
    if a.json {
        println!("{}", r.json());
    } else {
        print!("{}", r.table());
    }
    Ok(ExitCode::SUCCESS)
}
