//! The experiment of `px bench gateway` (root): the gateway's real I/O path
//! against Linux forwarding, on the same frames, in one run.
//!
//! Topology: the gateway line ([`LineSpec::gateway_lab`]: `legacy` — `gw` —
//! `bnet`, eMTU 1500 / iMTU 9000; the hosts send with TSO/GSO off and
//! receive with GRO off, the middle box's ports have GRO on and TSO off).
//! One generator thread replays the benchmark trace (800 bulk flows plus
//! small flows) as pre-built wire frames from both ends at once: 1448-byte
//! segments from `legacy` into the outer port, 8948-byte segments from
//! `bnet` into the inner port, as fast as it can (or paced). One sink thread
//! counts what arrives at each end (`replay`). Generator and sink are
//! pinned to the other CPU; their interfaces' receive work is steered there
//! with RPS.
//!
//! Round 1: `px gateway` in the middle namespace, pinned with `taskset` to
//! the forwarding CPU, both ports' RPS to that CPU. Round 2: the middle
//! namespace becomes a Linux router (forwarding on, GRO on its receive
//! ports, RPS of both ports to the same CPU, static neighbours so no ARP is
//! involved). A router cannot cut DF 9000-byte segments to a 1500-byte
//! link, so its outbound frames are the same flows' bytes cut at 1448 (what
//! a b-network at MTU 1500 sends); the inbound frames are the same.
//!
//! CPU: `/proc/stat` of the forwarding CPU (user + nice + system + irq +
//! softirq + steal) over the round, divided by the TCP payload delivered.
//! Caveat: a veth runs its receiver's NAPI (GRO) on the CPU that sent the
//! frame, so the kernel's GRO work on the middle box's ports lands on the
//! generator's CPU in both rounds; everything after GRO (the gateway's
//! AF_PACKET receive, engine, send; or IP forwarding and GSO) is counted.
//!
//! Every namespace is removed on every exit path (the [`Line`] guard and
//! the signal cleanup). The CLI parses the flags and prints
//! [`GatewayBenchResult::json`] or [`GatewayBenchResult::table`].

pub mod dpdk;
mod error;
mod replay;

use std::fmt::Write as _;
use std::path::PathBuf;

use px_bench::replay::FlowIds;
use px_bench::vs_dpdk::trace_frames;
use px_bench::{Direction, TraceConfig};
use serde::Serialize;
use serde_json::json;

pub use error::GatewayBenchError;
use px_netns::cpu::{self, CpuTimes, CpuUse, REST_CPU, steer_rx};
use px_netns::gateway::GatewayProcess;
use px_netns::line::{BNET_DEV, EMTU, GW_INNER, GW_OUTER, IMTU, LEGACY_DEV};
use px_netns::{Addressing, LabError, Line, LineSpec, Netns};
use replay::{Frames, Tally};

/// How long the middle box's ports let GRO hold frames across NAPI polls
/// (`gro_flush_timeout`, ns): a NIC's interrupt coalescing.
const GRO_FLUSH_NS: u32 = 50_000;

/// What `px bench gateway` runs.
#[derive(Debug, Clone)]
pub struct GatewayBenchOptions {
    /// The `px` binary (run as `px gateway`).
    pub exe: PathBuf,
    /// Gateway workers; with more than one the gateway may use every CPU.
    pub workers: u32,
    /// Seconds each round replays the trace (looping over it).
    pub seconds: f64,
    /// Bulk flows in the trace.
    pub flows: u32,
    /// Inbound frames (1448-byte segments) in the trace.
    pub packets: u64,
    /// Outbound frames (8948-byte segments) in the trace.
    pub split_packets: u64,
    /// Pace the generator to this many Gbps of frames (0: as fast as it can).
    pub rate_gbps: f64,
    /// The forwarding CPU (default: the last one).
    pub cpu: Option<usize>,
    /// Run the Linux router round too.
    pub router: bool,
    /// Run a round of `px gateway --fast-path on` too (the kernel fast
    /// path), after the user-space one.
    pub fast_path: bool,
}

/// One round's figures (the `gateway` and `router` objects of the JSON).
#[derive(Debug, Clone, Serialize)]
pub struct RoundFigures {
    /// TCP payload delivered at both sinks / seconds until the last frame arrived.
    pub gbps: f64,
    pub mpps_in: f64,
    pub mpps_out: f64,
    /// Frames sent, in all and into the outer and the inner port.
    pub frames_in: u64,
    pub frames_in_outer: u64,
    pub frames_in_inner: u64,
    /// Frames the sinks received.
    pub frames_out: u64,
    pub payload_sent: u64,
    pub payload_delivered: u64,
    /// Largest frame (Ethernet header on) at the legacy and the bnet sink.
    pub largest_frame_out_legacy: usize,
    pub largest_frame_out_bnet: usize,
    /// Frames above their link's MTU at either sink.
    pub oversize_frames: u64,
    /// Frames of no flow of the trace.
    pub other_frames: u64,
    /// Full-iMSS data frames among the data frames at the bnet sink.
    #[serde(rename = "yield")]
    pub yield_: f64,
    /// Flows that sent data, and those whose every payload byte arrived.
    pub flows: usize,
    pub flows_exact: usize,
    pub seconds: f64,
    pub cpu_busy_s: f64,
    pub cpu_softirq_irq_s: f64,
    pub cpu_s_per_gb: f64,
    /// The forwarder's own CPU time (see `setup.cpu_accounting`).
    pub own_cpu_s: f64,
    pub own_cpu_s_per_gb: f64,
    /// Every CPU's busy time over the round (generator, sinks and the
    /// middle box alike), per GB delivered: where a veth's work lands on
    /// another CPU than the forwarding one, this still counts it; at the
    /// same paced rate the generator's and sinks' share is the same in
    /// every round.
    pub vm_cpu_s_per_gb: f64,
}

impl RoundFigures {
    /// One round's figures; `own_s` is the forwarder's own CPU time.
    fn of(t: &Tally, cpu: &CpuUse, own_s: f64, vm: &CpuUse) -> RoundFigures {
        let s = t.seconds.max(1e-9);
        let payload: u64 = t.payload_recv.iter().sum();
        let (sent, recv) = (&t.payload_sent, &t.payload_recv);
        let gb = (payload as f64 / 1e9).max(1e-12);
        RoundFigures {
            gbps: payload as f64 * 8.0 / s / 1e9,
            mpps_in: t.frames_sent as f64 / s / 1e6,
            mpps_out: t.frames_recv as f64 / s / 1e6,
            frames_in: t.frames_sent,
            frames_in_outer: t.frames_in[0],
            frames_in_inner: t.frames_in[1],
            frames_out: t.frames_recv,
            payload_sent: sent.iter().sum(),
            payload_delivered: payload,
            largest_frame_out_legacy: t.max_frame[0],
            largest_frame_out_bnet: t.max_frame[1],
            oversize_frames: t.oversize,
            other_frames: t.other_frames,
            yield_: if t.bnet_data == 0 { 0.0 } else { t.bnet_full as f64 / t.bnet_data as f64 },
            flows: sent.iter().filter(|b| **b > 0).count(),
            flows_exact: sent.iter().zip(recv).filter(|(a, b)| **a > 0 && a == b).count(),
            seconds: t.seconds,
            cpu_busy_s: cpu.busy_s,
            cpu_softirq_irq_s: cpu.softirq_s,
            cpu_s_per_gb: cpu.busy_s / gb,
            own_cpu_s: own_s,
            own_cpu_s_per_gb: own_s / gb,
            vm_cpu_s_per_gb: vm.busy_s / gb,
        }
    }
}

/// The gateway round: its figures, the gateway's final counters and the
/// engine's own yield counters.
#[derive(Debug, Clone, Serialize)]
pub struct GatewayRound {
    #[serde(flatten)]
    pub figures: RoundFigures,
    /// The gateway's `--stats-file` JSON.
    pub stats: serde_json::Value,
    /// `inner_tcp_full_out` and `inner_tcp_data_out` of the engine.
    pub engine_yield: serde_json::Value,
}

/// How the run was set up (the JSON's `setup`).
#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    pub cpu: usize,
    pub generator_cpu: usize,
    pub workers: u32,
    pub seconds: f64,
    pub flows: u32,
    pub inbound_frames: u64,
    pub outbound_frames: u64,
    pub rate_gbps: f64,
    /// `/proc/loadavg` at the end.
    pub loadavg: String,
    pub offloads: &'static str,
    pub cpu_accounting: &'static str,
    pub router_outbound: &'static str,
    pub gbps: &'static str,
}

/// What `px bench gateway` measured.
#[derive(Debug, Clone)]
pub struct GatewayBenchResult {
    pub gateway: GatewayRound,
    /// The round with the kernel fast path, if run.
    pub offload: Option<GatewayRound>,
    /// `None` without the router round.
    pub router: Option<RoundFigures>,
    pub setup: Setup,
}

fn sh(ns: &Netns, script: &str) -> Result<(), LabError> {
    ns.exec("sh", &["-c", script]).map(drop)
}

/// The PID of CPU `cpu`'s `ksoftirqd` thread (where softirq work goes
/// when it outruns the interrupt exits).
fn ksoftirqd(cpu: usize) -> Option<u32> {
    let want = format!("ksoftirqd/{cpu}");
    std::fs::read_dir("/proc").ok()?.filter_map(Result::ok).find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        (std::fs::read_to_string(e.path().join("comm")).ok()?.trim() == want).then_some(pid)
    })
}

/// Runs both rounds; `say` gets a line of progress at each step.
pub fn run(o: &GatewayBenchOptions, say: &dyn Fn(&str)) -> Result<GatewayBenchResult, GatewayBenchError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(GatewayBenchError::NotRoot);
    }
    px_netns::install_signal_cleanup()?;
    let ncpu = cpu::online_cpus();
    let fwd_cpu = o.cpu.unwrap_or(ncpu - 1);
    let gen_cpu = if fwd_cpu == REST_CPU { ncpu - 1 } else { REST_CPU };
    let flows = o.flows as usize;
    let (imtu, emtu) = (IMTU as u16, EMTU as u16);
    let inbound_cfg = TraceConfig { flows, ..TraceConfig::inbound_default() };
    let outbound_cfg = TraceConfig { flows, ..TraceConfig::outbound_default() };
    say(&format!("generating {} inbound + {} outbound frames…", o.packets, o.split_packets));
    let mut keys = FlowIds::default();
    let inbound = trace_frames(&inbound_cfg, o.packets as usize, imtu, emtu);
    let outbound = trace_frames(&outbound_cfg, o.split_packets as usize, imtu, emtu);
    // The router's outbound: the same flows cut at the eMTU's MSS, as many
    // payload bytes.
    let recut_n = (outbound.data.payload_bytes / 1448).max(1) as usize;
    let recut_cfg = TraceConfig { segment: 1448, direction: Direction::Outbound, ..outbound_cfg.clone() };
    let recut = trace_frames(&recut_cfg, recut_n, imtu, emtu);
    let in_flow = keys.ids_of(&inbound.data);
    let out_flow = keys.ids_of(&outbound.data);
    let recut_flow = keys.ids_of(&recut.data);
    let pace = (o.seconds, o.rate_gbps);

    let line = Line::build(LineSpec::gateway_lab())?;
    for (ns, dev) in [(line.left_ns(), LEGACY_DEV), (line.right_ns(), BNET_DEV)] {
        steer_rx(ns, dev, gen_cpu).map_err(GatewayBenchError::Setup)?;
        // No addresses, no IPv6 autoconfiguration chatter on the ends.
        let _ = ns.set_sysctl(&format!("net.ipv6.conf.{dev}.disable_ipv6"), "1");
    }
    for dev in [GW_OUTER, GW_INNER] {
        steer_rx(line.middle_ns(), dev, fwd_cpu).map_err(GatewayBenchError::Setup)?;
        // Interrupt coalescing, as a NIC has: without it the generator's
        // every frame runs the port's NAPI poll on its own (veth polls at
        // the sender's bottom-half exit), and GRO never sees two frames.
        let s = format!(
            "echo {GRO_FLUSH_NS} > /sys/class/net/{dev}/gro_flush_timeout && \
             echo 2 > /sys/class/net/{dev}/napi_defer_hard_irqs"
        );
        sh(line.middle_ns(), &s)?;
    }

    // Round 1: px gateway; round 1b: with the kernel fast path.
    let pin = if o.workers > 1 {
        (0..ncpu).map(|c| c.to_string()).collect::<Vec<_>>().join(",")
    } else {
        fwd_cpu.to_string()
    };
    let workers = o.workers.to_string();
    let own = |pid: Option<u32>| pid.and_then(cpu::process_cpu_seconds).unwrap_or(0.0);
    let mut frames = Frames { inbound, outbound, in_flow, out_flow };
    let gateway_round = |extra: &[&str], frames: &mut Frames| -> Result<GatewayRound, GatewayBenchError> {
        let mut args = vec!["--workers", &workers];
        args.extend_from_slice(extra);
        let gw = GatewayProcess::start_wrapped(&line, &["taskset", "-c", &pin], &o.exe, &args)
            .map_err(GatewayBenchError::Gateway)?;
        let (c0, p0) = (CpuTimes::now(), own(Some(gw.pid)));
        let t = replay::replay(&line, frames, &keys.ids, pace, gen_cpu)?;
        let use_gw = c0.since(fwd_cpu);
        let vm = c0.since_all();
        let p1 = own(Some(gw.pid));
        let exit = gw.stop().map_err(GatewayBenchError::Gateway)?;
        Ok(GatewayRound {
            figures: RoundFigures::of(&t, &use_gw, p1 - p0 + use_gw.softirq_s, &vm),
            stats: exit.stats.clone(),
            engine_yield: json!({
                "inner_tcp_full_out": exit.counter("inner_tcp_full_out"),
                "inner_tcp_data_out": exit.counter("inner_tcp_data_out"),
            }),
        })
    };
    say(&format!("round 1: px gateway ({} worker(s), CPU {pin}) for {} s…", o.workers, o.seconds));
    let gateway = gateway_round(&[], &mut frames)?;
    let offload = if o.fast_path {
        say(&format!("round 1b: px gateway --fast-path on (the kernel fast path) for {} s…", o.seconds));
        // The same trace from its start (the replay moved every flow on;
        // a new gateway must see each flow's handshake, then its stream).
        let mut fresh = Frames {
            inbound: trace_frames(&inbound_cfg, o.packets as usize, imtu, emtu),
            outbound: trace_frames(&outbound_cfg, o.split_packets as usize, imtu, emtu),
            in_flow: frames.in_flow.clone(),
            out_flow: frames.out_flow.clone(),
        };
        Some(gateway_round(&["--fast-path", "on"], &mut fresh)?)
    } else {
        None
    };

    // Round 2: Linux forwarding on the same line.
    let router = if o.router {
        say(&format!("round 2: Linux router (GRO on, RPS to CPU {fwd_cpu}) for {} s…", o.seconds));
        line.address(Addressing::Router)?;
        let m = line.middle_ns();
        let mac = |dev: &str| -> Result<[u8; 6], GatewayBenchError> {
            let s = m.exec("cat", &[&format!("/sys/class/net/{dev}/address")])?;
            let s = s.trim();
            let v: Vec<u8> = s.split(':').filter_map(|h| u8::from_str_radix(h, 16).ok()).collect();
            v.try_into().map_err(|_| GatewayBenchError::Setup(format!("bad MAC {s}")))
        };
        let (om, im) = (mac(GW_OUTER)?, mac(GW_INNER)?);
        // Static neighbours with MACs nobody owns: the ends' stacks ignore
        // the frames (other host), their packet sockets still count them.
        let mut script = String::new();
        for x in 1..=253 {
            script += &format!("neigh replace 198.51.100.{x} lladdr 02:00:00:00:00:fd dev {GW_OUTER} nud permanent\n");
            script += &format!("neigh replace 203.0.113.{x} lladdr 02:00:00:00:00:fe dev {GW_INNER} nud permanent\n");
        }
        let batch = std::env::temp_dir().join(format!("px-bench-neigh-{}", std::process::id()));
        std::fs::write(&batch, script)?;
        let r = m.ip(&["-batch", &batch.to_string_lossy()]);
        let _ = std::fs::remove_file(&batch);
        r?;
        sh(m, "sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0")?;
        let mut inbound = frames.inbound;
        let mut outbound = recut;
        // Toward the router's port each frame enters by.
        for (c, dst) in [
            (&mut inbound.data, om),
            (&mut inbound.syns, om),
            (&mut inbound.synacks, im),
            (&mut outbound.data, im),
            (&mut outbound.syns, im),
            (&mut outbound.synacks, om),
        ] {
            for i in 0..c.frames.len() {
                c.frame_mut(i)[0..6].copy_from_slice(&dst);
            }
        }
        let mut frames = Frames { inbound, outbound, in_flow: frames.in_flow, out_flow: recut_flow };
        let ksoft = ksoftirqd(fwd_cpu);
        let (c0, k0) = (CpuTimes::now(), own(ksoft));
        let t = replay::replay(&line, &mut frames, &keys.ids, pace, gen_cpu)?;
        let use_r = c0.since(fwd_cpu);
        let vm = c0.since_all();
        Some(RoundFigures::of(&t, &use_r, own(ksoft) - k0 + use_r.softirq_s, &vm))
    } else {
        None
    };
    drop(line);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let setup = Setup {
        cpu: fwd_cpu,
        generator_cpu: gen_cpu,
        workers: o.workers,
        seconds: o.seconds,
        flows: o.flows,
        inbound_frames: o.packets,
        outbound_frames: o.split_packets,
        rate_gbps: o.rate_gbps,
        loadavg: load.trim().to_owned(),
        offloads: "hosts: TSO/GSO/GRO off; middle box ports: GRO on, TSO off, gro_flush_timeout 50 us with napi_defer_hard_irqs 2 (a NIC's interrupt coalescing)",
        cpu_accounting: "cpu_s_per_gb: /proc/stat of the forwarding CPU, user+nice+system+irq+softirq+steal over \
                         the round (includes any other process on that CPU); own_cpu_s_per_gb: the forwarder's own \
                         time, robust to other processes there: the gateway process's user+system (all threads) plus \
                         the CPU's softirq+irq, or for the router ksoftirqd/CPU's time plus the CPU's softirq+irq; \
                         veth GRO runs on the sender's (generator's) CPU in both rounds",
        router_outbound: "the same flows cut at 1448 B (a router cannot cut DF 9000-byte segments)",
        gbps: "TCP payload delivered at both sinks / seconds until the last frame arrived",
    };
    Ok(GatewayBenchResult { gateway, offload, router, setup })
}

impl GatewayBenchResult {
    /// The JSON of `--json`: both rounds, their headline figures at the
    /// top (`router_gbps` and `router_cpu_s_per_gb` null without the router
    /// round) and the setup.
    pub fn json(&self) -> serde_json::Value {
        let g = &self.gateway.figures;
        let mut out = serde_json::Map::new();
        out.insert("gateway_gbps".into(), json!(g.gbps));
        out.insert("gateway_cpu_s_per_gb".into(), json!(g.cpu_s_per_gb));
        out.insert("gateway_own_cpu_s_per_gb".into(), json!(g.own_cpu_s_per_gb));
        out.insert("gateway_vm_cpu_s_per_gb".into(), json!(g.vm_cpu_s_per_gb));
        out.insert("gateway_yield".into(), json!(g.yield_));
        out.insert("gateway".into(), json!(self.gateway));
        if let Some(f) = &self.offload {
            let g = &f.figures;
            out.insert("offload_gbps".into(), json!(g.gbps));
            out.insert("offload_cpu_s_per_gb".into(), json!(g.cpu_s_per_gb));
            out.insert("offload_own_cpu_s_per_gb".into(), json!(g.own_cpu_s_per_gb));
            out.insert("offload_vm_cpu_s_per_gb".into(), json!(g.vm_cpu_s_per_gb));
            out.insert("offload_yield".into(), json!(g.yield_));
            out.insert("offload".into(), json!(f));
        }
        match &self.router {
            Some(r) => {
                out.insert("router_gbps".into(), json!(r.gbps));
                out.insert("router_cpu_s_per_gb".into(), json!(r.cpu_s_per_gb));
                out.insert("router_own_cpu_s_per_gb".into(), json!(r.own_cpu_s_per_gb));
                out.insert("router_vm_cpu_s_per_gb".into(), json!(r.vm_cpu_s_per_gb));
                out.insert("router".into(), json!(r));
            }
            None => {
                out.insert("router_gbps".into(), serde_json::Value::Null);
                out.insert("router_cpu_s_per_gb".into(), serde_json::Value::Null);
            }
        }
        out.insert("setup".into(), json!(self.setup));
        serde_json::Value::Object(out)
    }

    /// The table: one row per round.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let mut row = |name: &str, v: &RoundFigures| {
            let _ = writeln!(
                s,
                "  {name:<8} {:>8.3} Gbps  {:>6.3} Mpps in  {:>6.3} Mpps out  largest out {} / {} B  yield {:.3}  \
                 {:.3} CPU-s/GB (own {:.3}, whole VM {:.3})  flows exact {}/{}",
                v.gbps,
                v.mpps_in,
                v.mpps_out,
                v.largest_frame_out_legacy,
                v.largest_frame_out_bnet,
                v.yield_,
                v.cpu_s_per_gb,
                v.own_cpu_s_per_gb,
                v.vm_cpu_s_per_gb,
                v.flows_exact,
                v.flows,
            );
        };
        let (cpu, setup) = (self.setup.cpu, &self.setup);
        row("gateway", &self.gateway.figures);
        if let Some(f) = &self.offload {
            row("offload", &f.figures);
        }
        if let Some(r) = &self.router {
            row("router", r);
        }
        format!(
            "px bench gateway — forwarding CPU {cpu}, generator CPU {}, {} s per round, load {}\n{s}  \
             (largest out: legacy side / b-network side; CPU-s/GB from /proc/stat of CPU {cpu}, softirq included)\n",
            setup.generator_cpu, setup.seconds, setup.loadavg
        )
    }
}
